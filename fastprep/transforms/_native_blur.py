"""Native sides of v2's RandomAdjustSharpness and GaussianBlur (kernels and C++ draws:
csrc/ops/sharpness.cpp, csrc/ops/gaussian_blur.cpp), and of v1's RandomAdjustSharpness on PIL
images (PIL twin: csrc/ops/pil_color.cpp)."""

from __future__ import annotations

from typing import Any

import torchvision.transforms as v1
from torchvision.transforms import v2

from ._fast import SeparableGaussianBlur
from ._native import NativeTransform, Steps, TorchDraws, V1ItemProbability, f32, native_transform


@native_transform(v2.RandomAdjustSharpness)
class NativeRandomAdjustSharpness(NativeTransform):
    """``v2.RandomAdjustSharpness(sharpness_factor, p)``: ``torch.rand(1) >= p`` skips."""

    draw_name = "RandomAdjustSharpness"
    emits = ("adjust_sharpness",)

    def probability(self) -> float:
        """The ``p`` the draws compare ``torch.rand(1)`` with, in float32."""
        return float(self.transform.p)

    def __init__(self, transform: Any):
        super().__init__(transform)
        factor = transform.sharpness_factor
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            raise self.unsupported(f"sharpness_factor must be a number, got {factor!r}")
        if factor < 0:
            raise self.unsupported(f"sharpness_factor ({factor}) is not non-negative")

    def params(self) -> tuple[list[int], list[float]]:
        return [], [self.probability(), float(self.transform.sharpness_factor)]

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        if draws.rand() >= f32(self.probability()):
            return
        steps.emit("adjust_sharpness", floats=(float(self.transform.sharpness_factor),))


@native_transform(v1.RandomAdjustSharpness, pil_only=True)
class NativeRandomAdjustSharpnessV1(V1ItemProbability, NativeRandomAdjustSharpness):
    """v1 ``RandomAdjustSharpness(sharpness_factor, p)`` (on PIL images): applies when
    ``torch.rand(1).item() < p``."""


@native_transform(v2.GaussianBlur)
class NativeGaussianBlur(NativeTransform):
    """``v2.GaussianBlur(kernel_size, sigma)``: ``sigma = torch.empty(1).uniform_(sigma_min, sigma_max)``
    for both axes (a fixed sigma draws too)."""

    draw_name = "GaussianBlur"
    emits = ("gaussian_blur",)

    def params(self) -> tuple[list[int], list[float]]:
        kx, ky = self.transform.kernel_size
        return [int(kx), int(ky)], [float(self.transform.sigma[0]), float(self.transform.sigma[1])]

    def check_size(self, height: int, width: int) -> None:
        # the image is padded by reflection, kernel_size // 2 on each side, which needs a
        # padding below the image's size: torchvision raises RuntimeError otherwise
        kx, ky = self.transform.kernel_size
        if kx // 2 >= width or ky // 2 >= height:
            raise self.unsupported(f"kernel_size ({kx}, {ky}) on {height}x{width} images: the reflection padding "
                                   "(kernel_size // 2) must be smaller than the image, torchvision raises")

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        sigma = draws.uniform(self.transform.sigma[0], self.transform.sigma[1])
        kx, ky = self.transform.kernel_size
        steps.emit("gaussian_blur", ints=(kx, ky), floats=(sigma, sigma))


@native_transform(SeparableGaussianBlur)
class NativeSeparableGaussianBlur(NativeGaussianBlur):
    """fastprep's ``SeparableGaussianBlur``: v2.GaussianBlur's draw, the separable kernel."""

    draw_name = "SeparableGaussianBlur"

    def check_size(self, height: int, width: int) -> None:
        pass  # its kernel reflects pads of any width (where v2.GaussianBlur raises), on both engines

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        sigma = draws.uniform(self.transform.sigma[0], self.transform.sigma[1])
        kx, ky = self.transform.kernel_size
        steps.emit("gaussian_blur_separable", ints=(kx, ky), floats=(sigma, sigma))

