"""Native sides of v2's colour transforms: ColorJitter, Grayscale, RandomGrayscale
(kernels and C++ draws: csrc/ops/adjust_color.cpp), and of their v1 classes on PIL images
(the same torch draws; PIL twins: csrc/ops/pil_color.cpp)."""

from __future__ import annotations

from typing import Any

import torchvision.transforms as v1
from torchvision.transforms import v2

from ._native import NativeTransform, Steps, TorchDraws, f32, native_transform

_JITTER = ("brightness", "contrast", "saturation", "hue")
_JITTER_KERNELS = ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue")


@native_transform(v2.ColorJitter)
class NativeColorJitter(NativeTransform):
    """``v2.ColorJitter``: ``torch.randperm(4)``, then one ``uniform_`` per configured factor
    (brightness, contrast, saturation, hue); the adjustments run in the permutation's order."""

    draw_name = "ColorJitter"

    def kernels(self) -> set[str]:
        return {k for k, r in zip(_JITTER_KERNELS, self._ranges()) if r is not None}

    def _ranges(self) -> list[tuple[float, float] | None]:
        return [getattr(self.transform, name) for name in _JITTER]

    def params(self) -> tuple[list[int], list[float]]:
        ranges = self._ranges()
        floats: list[float] = []
        for r in ranges:
            floats.extend((float(r[0]), float(r[1])) if r is not None else (0.0, 0.0))
        return [int(r is not None) for r in ranges], floats

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        order = draws.randperm(4)
        factors = [None if r is None else draws.uniform(r[0], r[1]) for r in self._ranges()]
        for k in order:
            factor = factors[k]
            if factor is not None:
                steps.emit(_JITTER_KERNELS[k], floats=(factor,))


@native_transform(v2.Grayscale)
class NativeGrayscale(NativeTransform):
    """``v2.Grayscale(num_output_channels)``: no draw."""

    draw_name = "Grayscale"
    emits = ("rgb_to_grayscale",)

    def __init__(self, transform: Any):
        super().__init__(transform)
        if transform.num_output_channels not in (1, 3):
            raise self.unsupported(f"num_output_channels must be 1 or 3, got {transform.num_output_channels}")

    def params(self) -> tuple[list[int], list[float]]:
        return [int(self.transform.num_output_channels)], []

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        steps.emit("rgb_to_grayscale", ints=(self.transform.num_output_channels,))
        steps.channels = int(self.transform.num_output_channels)


@native_transform(v2.RandomGrayscale)
class NativeRandomGrayscale(NativeTransform):
    """``v2.RandomGrayscale(p)``: ``torch.rand(1) >= p`` skips; the image keeps its channel count."""

    draw_name = "RandomGrayscale"
    emits = ("rgb_to_grayscale",)

    def params(self) -> tuple[list[int], list[float]]:
        return [], [float(self.transform.p)]

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        if draws.rand() >= f32(self.transform.p):
            return
        steps.emit("rgb_to_grayscale", ints=(steps.channels,))


# v1's classes make the same torch calls (ColorJitter's ``get_params``; RandomGrayscale's
# ``torch.rand(1) < p`` in float32) and, on PIL images, call the same Pillow functions.


@native_transform(v1.ColorJitter, pil_only=True)
class NativeColorJitterV1(NativeColorJitter):
    """v1 ``ColorJitter`` (on PIL images)."""


@native_transform(v1.Grayscale, pil_only=True)
class NativeGrayscaleV1(NativeGrayscale):
    """v1 ``Grayscale`` (on PIL images)."""


@native_transform(v1.RandomGrayscale, pil_only=True)
class NativeRandomGrayscaleV1(NativeRandomGrayscale):
    """v1 ``RandomGrayscale`` (on PIL images)."""
