"""Native sides of v2's RandomPosterize, RandomSolarize, RandomAutocontrast, RandomEqualize and
RandomInvert (kernels and C++ draws: csrc/ops/point_ops.cpp).

Each is a ``_RandomApplyTransform``: ``torch.rand(1) >= p`` skips, else its kernel runs with the
transform's static parameters. Their v1 classes (on PIL images only) apply when
``torch.rand(1).item() < p``, compared in double (:class:`V1ItemProbability`)."""

from __future__ import annotations

import numbers
from typing import Any

import torchvision.transforms as v1
from torchvision.transforms import v2

from ._native import RandomStep, V1ItemProbability, compiling_for_pil, native_transform


@native_transform(v2.RandomPosterize)
class NativeRandomPosterize(RandomStep):
    """``v2.RandomPosterize(bits, p)``."""

    draw_name = "RandomPosterize"
    kernel = "posterize"

    def __init__(self, transform: Any):
        super().__init__(transform)
        bits = transform.bits
        # posterize_image raises TypeError on every applied call otherwise
        if not isinstance(bits, int) or not 0 <= bits <= 8:
            raise self.unsupported(f"bits must be an int in [0, 8] (torchvision raises TypeError), got {bits!r}")
        if bits == 0 and compiling_for_pil():
            raise self.unsupported("bits=0 on PIL images is left to Pillow (ImageOps.posterize refuses it from Pillow "
                                   "13 on)")

    def kernel_params(self) -> tuple[list[int], list[float]]:
        return [int(self.transform.bits)], []


#: An int threshold beyond this magnitude would not round-trip through the step's float.
_MAX_EXACT_INT = 2**53


@native_transform(v2.RandomSolarize)
class NativeRandomSolarize(RandomStep):
    """``v2.RandomSolarize(threshold, p)``: ``image >= threshold`` compares in float32 for a float
    threshold, in uint8 for an int (torch converts it to uint8, wrapping a negative one)."""

    draw_name = "RandomSolarize"
    kernel = "solarize"

    def __init__(self, transform: Any):
        super().__init__(transform)
        threshold = transform.threshold
        if not isinstance(threshold, numbers.Real):
            raise self.unsupported(f"threshold must be an int or a float, got {type(threshold).__name__}")
        value = int(threshold) if isinstance(threshold, numbers.Integral) else float(threshold)
        if abs(value) > _MAX_EXACT_INT and isinstance(value, int):
            raise self.unsupported(f"threshold={threshold} is beyond the int range the native kernel takes")
        # solarize_image raises TypeError on every applied call otherwise (uint8's maximum is 255)
        if value > 255:
            raise self.unsupported(f"threshold={threshold} is above 255, the maximum of uint8 images (torchvision "
                                   "raises TypeError)")

    def kernel_params(self) -> tuple[list[int], list[float]]:
        threshold = self.transform.threshold
        if isinstance(threshold, numbers.Integral):
            return [1], [float(int(threshold))]
        return [0], [float(threshold)]


@native_transform(v2.RandomAutocontrast)
class NativeRandomAutocontrast(RandomStep):
    """``v2.RandomAutocontrast(p)`` (1- or 3-channel images, as torchvision)."""

    draw_name = "RandomAutocontrast"
    kernel = "autocontrast"


@native_transform(v2.RandomEqualize)
class NativeRandomEqualize(RandomStep):
    """``v2.RandomEqualize(p)``."""

    draw_name = "RandomEqualize"
    kernel = "equalize"


@native_transform(v2.RandomInvert)
class NativeRandomInvert(RandomStep):
    """``v2.RandomInvert(p)``."""

    draw_name = "RandomInvert"
    kernel = "invert"


@native_transform(v1.RandomPosterize, pil_only=True)
class NativeRandomPosterizeV1(V1ItemProbability, NativeRandomPosterize):
    """v1 ``RandomPosterize(bits, p)`` (on PIL images)."""


@native_transform(v1.RandomSolarize, pil_only=True)
class NativeRandomSolarizeV1(V1ItemProbability, NativeRandomSolarize):
    """v1 ``RandomSolarize(threshold, p)`` (on PIL images)."""


@native_transform(v1.RandomAutocontrast, pil_only=True)
class NativeRandomAutocontrastV1(V1ItemProbability, NativeRandomAutocontrast):
    """v1 ``RandomAutocontrast(p)`` (on PIL images)."""


@native_transform(v1.RandomEqualize, pil_only=True)
class NativeRandomEqualizeV1(V1ItemProbability, NativeRandomEqualize):
    """v1 ``RandomEqualize(p)`` (on PIL images)."""


@native_transform(v1.RandomInvert, pil_only=True)
class NativeRandomInvertV1(V1ItemProbability, NativeRandomInvert):
    """v1 ``RandomInvert(p)`` (on PIL images)."""
