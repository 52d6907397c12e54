"""fastprep's fast mode: transforms with fastprep's own faster arithmetic in place of
torchvision's, off by default (``docs/multiview.md``).

:class:`SeparableGaussianBlur` draws exactly as ``v2.GaussianBlur`` and blurs with the same
Gaussian in two 1-D passes; :func:`fast_ops` makes a copy of a pipeline (or a MultiView) with
every ``v2.GaussianBlur`` replaced by it. The processes engine runs the same kernel per sample
as the threads engine runs per batch, so both engines still agree bit for bit; only the
comparison with torchvision's own output is given up (a few pixels by a level).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torchvision.transforms import v2

from .. import functional as F

__all__ = ["SeparableGaussianBlur", "fast_ops"]


class SeparableGaussianBlur(v2.Transform):
    """``v2.GaussianBlur(kernel_size, sigma)`` with the blur applied as two 1-D passes
    (:func:`fastprep.functional.gaussian_blur_separable`).

    The random draw is v2's (``sigma = torch.empty(1).uniform_(sigma_min, sigma_max)``), so a
    pipeline keeps its stream of random numbers.

    Args:
        kernel_size, sigma: as ``v2.GaussianBlur``'s.

    Input: uint8 tensor ``[C, H, W]``. Output: the same shape and dtype.
    """

    def __init__(self, kernel_size: int | tuple[int, int], sigma: float | tuple[float, float] = (0.1, 2.0)) -> None:
        super().__init__()
        reference = v2.GaussianBlur(kernel_size, sigma)  # validates as v2 does
        self.kernel_size = reference.kernel_size
        self.sigma = reference.sigma

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        sigma = torch.empty(1).uniform_(self.sigma[0], self.sigma[1]).item()
        return {"sigma": [sigma, sigma]}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if not isinstance(inpt, torch.Tensor):
            return inpt
        return F.gaussian_blur_separable(inpt.as_subclass(torch.Tensor), self.kernel_size, params["sigma"])


def fast_ops(pipeline: Any) -> Any:
    """A copy of ``pipeline`` in fastprep's fast mode: every ``v2.GaussianBlur`` (inside
    ``v2.Compose``, ``RandomApply``, ``RandomChoice``, ``RandomOrder`` and a MultiView's views)
    replaced by a :class:`SeparableGaussianBlur` with the same parameters. Everything else,
    the random draws included, is unchanged."""
    out = copy.deepcopy(pipeline)
    _replace(out)
    return out


def _swap(t: Any) -> Any:
    return SeparableGaussianBlur(t.kernel_size, t.sigma) if type(t) is v2.GaussianBlur else t


def _replace(node: Any) -> None:
    for attr in ("transforms", "views"):
        children = getattr(node, attr, None)
        if isinstance(children, (list, torch.nn.ModuleList)):
            for k, child in enumerate(children):
                children[k] = _swap(child)
                _replace(children[k])
    inner = getattr(node, "pipeline", None)  # OnDecoded
    if inner is not None:
        if type(inner) is v2.GaussianBlur:
            node.pipeline = _swap(inner)
        _replace(node.pipeline)
