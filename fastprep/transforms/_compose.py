"""The fusing :class:`Compose`: runs any transforms, replacing runs of kernel transforms by
one fused pass."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._kernel_transforms import ConvertColor, MaskYUVScale, RandomMask, Scale, YUVScale

__all__ = ["Compose"]


def _fuse(transforms: list[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """The transforms to run: runs of exactly RandomMask, ConvertColor, Scale (in this
    order, exact classes) become MaskYUVScale; ConvertColor, Scale become YUVScale."""
    plan: list[Callable[..., Any]] = []
    i, n = 0, len(transforms)
    kinds = [type(t) for t in transforms]
    while i < n:
        first = transforms[i]
        if kinds[i : i + 3] == [RandomMask, ConvertColor, Scale] and isinstance(first, RandomMask) \
                and not isinstance(first.fill, tuple):
            plan.append(MaskYUVScale(first.ratio, first.fill))
            i += 3
        elif kinds[i : i + 2] == [ConvertColor, Scale]:
            plan.append(YUVScale())
            i += 2
        else:
            plan.append(transforms[i])
            i += 1
    return plan


class Compose(torch.nn.Module):
    """Chain transforms like ``torchvision.transforms.v2.Compose``, fusing kernel runs.

    ``RandomMask -> ConvertColor -> Scale`` runs as one :class:`MaskYUVScale` pass and
    ``ConvertColor -> Scale`` as :class:`YUVScale`; other transforms (any callables) run as
    given. The fused pipeline draws the same random numbers as the unfused one, so under
    the same ``torch.manual_seed`` both give the same mask and values within 1e-6.

    Args:
        transforms (sequence of callables): applied in order. ``transforms`` keeps the list
            as given; ``fused_transforms`` is what runs.
    """

    def __init__(self, transforms: Sequence[Callable[..., Any]]) -> None:
        super().__init__()
        if not isinstance(transforms, Sequence):
            raise TypeError(f"transforms must be a sequence of callables, got {type(transforms).__name__}")
        for t in transforms:
            if not callable(t):
                raise TypeError(f"transforms must be callables, got {t!r} ({type(t).__name__})")
        self.transforms = list(transforms)
        self.fused_transforms = _fuse(self.transforms)

    def forward(self, *inputs: Any) -> Any:
        """Run the (fused) transforms in order on ``inputs``; returns what the last returns."""
        if len(inputs) == 1:
            x = inputs[0]
            for t in self.fused_transforms:
                x = t(x)
            return x
        outputs = inputs
        for t in self.fused_transforms:
            outputs = t(*outputs)
        return outputs

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("] + [f"    {t}" for t in self.transforms]
        if len(self.fused_transforms) != len(self.transforms):
            lines.append("  runs as:")
            lines += [f"    {t}" for t in self.fused_transforms]
        return "\n".join(lines + [")"])
