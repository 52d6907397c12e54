"""Native sides of v2's RandomHorizontalFlip and RandomVerticalFlip (csrc/ops/flip.cpp).

A RandomHorizontalFlip right after the crop is fused into the crop's resize by the compiler
(the flip of DecodeRandomResizedCrop); elsewhere in a pipeline it is this step."""

from __future__ import annotations

from torchvision.transforms import v2

from ._native import RandomStep, native_transform


@native_transform(v2.RandomHorizontalFlip)
class NativeRandomHorizontalFlip(RandomStep):
    """``v2.RandomHorizontalFlip(p)``: ``torch.rand(1) >= p`` skips."""

    draw_name = "RandomHorizontalFlip"
    kernel = "horizontal_flip"


@native_transform(v2.RandomVerticalFlip)
class NativeRandomVerticalFlip(RandomStep):
    """``v2.RandomVerticalFlip(p)``: ``torch.rand(1) >= p`` skips."""

    draw_name = "RandomVerticalFlip"
    kernel = "vertical_flip"
