"""Native side of v2's RandomErasing (kernel and C++ draw: csrc/ops/erase.cpp).

It runs on the uint8 image (before ``ToDtype``) or on the float image after
``ToDtype(torch.float32, scale=True)`` + ``Normalize``, wherever the pipeline puts it: its draws
do not depend on the dtype, and the ``erase`` kernel takes both."""

from __future__ import annotations

import math
from typing import Any

import torch
import torchvision.transforms as T1
from torchvision.transforms import v2

from ._native import NativeTransform, Steps, TorchDraws, f32, native_transform

#: Images in the native engine have 1 or 3 channels: other value counts can never fit.
_VALUE_COUNTS = (1, 3)


@native_transform(v2.RandomErasing)
class NativeRandomErasing(NativeTransform):
    """``v2.RandomErasing(p, scale, ratio, value, inplace)``: ``torch.rand(1) >= p`` skips; then
    up to 10 attempts, each a ``uniform_(*scale)`` and a ``uniform_(*log(ratio))``; the first
    rectangle smaller than the image draws its noise (``value='random'``:
    ``torch.empty([c, h, w]).normal_()``), then ``randint`` its top and left. When none fits,
    nothing is erased. ``inplace`` changes no pixel."""

    draw_name = "RandomErasing"
    stage = "any"

    def __init__(self, transform: Any):
        super().__init__(transform)
        value = transform.value
        if value is not None:
            if not isinstance(value, list):  # a number that is neither int nor float: len() fails in v2
                raise self.unsupported(f"value={value!r} ({type(value).__name__}) is not a number, a sequence "
                                       "or 'random'")
            if len(value) not in _VALUE_COUNTS:
                raise self.unsupported(f"{len(value)} values: an image has 1 or 3 channels, and v2 needs 1 value "
                                       "or one per channel")
        self.log_ratio = [float(v) for v in transform._log_ratio]
        if transform.p > 0:
            self._check_ranges(transform.scale, self.log_ratio)

    def check_channels(self, channels: int) -> None:
        value = self.transform.value
        if value is not None and len(value) not in (1, channels):
            raise self.unsupported(f"{len(value)} values for {channels}-channel images (v2 raises ValueError on "
                                   "every applied call)")

    def _check_ranges(self, scale: Any, log_ratio: list[float]) -> None:
        """The checks of ``Tensor.uniform_``, which raise on every applied call of v2's."""
        for name, (low, high) in (("scale", scale), ("log(ratio)", log_ratio)):
            low, high = float(low), float(high)
            if not (math.isfinite(f32(low)) and math.isfinite(f32(high))):
                raise self.unsupported(f"{name}=({low}, {high}) is not finite in float32 (uniform_ raises)")
            if low > high:
                raise self.unsupported(f"{name}=({low}, {high}) is not (min, max) (uniform_ raises)")

    def params(self) -> tuple[list[int], list[float]]:
        t = self.transform
        values = t.value or []
        return [len(values)], [float(t.p), float(t.scale[0]), float(t.scale[1]), *self.log_ratio, *values]

    def draw(self, draws: TorchDraws, steps: Steps) -> None:
        t = self.transform
        if draws.rand() >= f32(t.p):
            return
        c, h, w = steps.channels, steps.height, steps.width
        if t.value is not None and len(t.value) not in (1, c):
            raise ValueError(f"If value is a sequence, it should have either a single value or {c} (number of inpt "
                             "channels)")
        area = h * w
        for _ in range(10):
            erase_area = area * draws.uniform(t.scale[0], t.scale[1])
            aspect_ratio = float(torch.exp(torch.tensor([draws.uniform(*self.log_ratio)], dtype=torch.float32)))
            eh = int(round(math.sqrt(erase_area * aspect_ratio)))
            ew = int(round(math.sqrt(erase_area / aspect_ratio)))
            if not (eh < h and ew < w):
                continue
            noise = steps.keep(draws.normal([c, eh, ew])) if t.value is None else -1
            i = draws.randint(0, h - eh + 1)
            j = draws.randint(0, w - ew + 1)
            values = t.value or []
            steps.emit("erase", (i, j, eh, ew, 0, len(values)), values, extra=noise)
            return


@native_transform(T1.RandomErasing, pil_only=True)
class NativeRandomErasingV1(NativeRandomErasing):
    """v1 ``RandomErasing`` (after ``PILToTensor`` + ``ConvertImageDtype`` + ``Normalize`` in a
    pipeline on PIL images, torchvision's references presets with ``use_v2=False``): v2's draws
    and arithmetic (``torch.rand(1) < p`` applies; the same attempts, noise and ``randint``\\ s;
    when no rectangle fits, v1 erases with the image itself, which changes nothing), read from
    the v2 transform of the same parameters."""

    def __init__(self, transform: Any):
        t = transform
        super().__init__(v2.RandomErasing(p=t.p, scale=t.scale, ratio=t.ratio, value=t.value, inplace=t.inplace))
        self.v1_transform = transform
