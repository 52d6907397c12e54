"""Bilinear, bicubic and nearest resize of uint8 images for the decode recipes.

uint8 images of 1, 3 or 4 channels go through ``torch.ops.fastprep.resize_aa`` (csrc/
resize_aa.cpp), which is bit-identical to torch's uint8 kernels (bilinear and bicubic,
antialiased or not, nearest and nearest-exact: the ones ``torchvision.transforms.v2.Resize``
uses on uint8 images, bilinear on an AVX2/AVX-512 CPU) and faster; other
inputs use torch's kernel directly. Two additions that v2 cannot make:

* an explicit scale, so that a window of a larger image, or a DCT-scaled decode, is
  resized on the same pixel grid as the whole image would be (``resize_window``: the
  resize of a full image followed by a crop, computed from only the pixels the crop's
  filter reads);
* a horizontal flip, fused into the resize (equal to flipping the resized image).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import _ops  # noqa: F401  (registers torch.ops.fastprep.*)
from ._kernels._interleave import planar3_to_interleaved

__all__ = ["resize", "resize_window"]

#: ``torchvision.transforms.v2.InterpolationMode`` values, by ``fastprep::resize_aa`` filter number.
_INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "nearest-exact")


def _op_input(image: torch.Tensor) -> torch.Tensor | None:
    """``image`` as the channels-last ``[C, H, W]`` view that ``fastprep::resize_aa`` reads
    (1, 3 or 4 channels; planar input is interleaved first), or ``None`` for other channel
    counts."""
    c, h, w = image.shape
    if c not in (1, 3, 4):
        return None
    if image.stride(2) == c and (c == 1 or image.stride(0) == 1) and image.stride(1) >= w * c:
        return image
    if c == 3 and image.stride(2) == 1:
        hwc = np.empty((h, w, 3), np.uint8)
        planar3_to_interleaved(image.contiguous().numpy(), hwc)
        return torch.from_numpy(hwc).permute(2, 0, 1)
    return image.permute(1, 2, 0).contiguous().permute(2, 0, 1)


def _check_image(image: Any) -> torch.Tensor:
    if not isinstance(image, torch.Tensor) or image.dtype != torch.uint8 or image.dim() != 3:
        got = (f"{type(image).__name__} of shape {tuple(image.shape)} and dtype {image.dtype}"
               if isinstance(image, torch.Tensor) else type(image).__name__)
        raise TypeError(f"image must be a uint8 tensor [C, H, W], got {got}")
    if image.numel() == 0:
        raise ValueError(f"image must not be empty, got shape {tuple(image.shape)}")
    return image


def _torch_resample(image: torch.Tensor, out_hw: Sequence[int], scales: tuple[float, float] | None,
                    antialias: bool) -> torch.Tensor:
    """torch's kernel, for channel counts ``resize_aa`` does not take: ``image`` uint8
    ``[C, H, W]`` -> ``[C, out_h, out_w]``. ``scales`` = ``(sh, sw)`` output pixels per
    input pixel, or ``None`` for ``out / in`` (torch's convention)."""
    sh, sw = scales if scales is not None else (None, None)
    x = image[None]  # 2 or 5+ channels: torch has no interleaved fast path for them either
    if antialias:
        y = torch.ops.aten._upsample_bilinear2d_aa(x, list(out_hw), False, sh, sw)
    else:
        y = torch.ops.aten.upsample_bilinear2d(x, list(out_hw), False, sh, sw)
    return y[0]


def _filter(interpolation: str) -> int:
    """``fastprep::resize_aa``'s filter number of a torchvision interpolation mode's value."""
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}")
    return _INTERPOLATIONS.index(interpolation)


def resize(image: torch.Tensor, size: Sequence[int], *, antialias: bool = True, hflip: bool = False,
           scale: Sequence[float] | None = None, interpolation: str = "bilinear") -> torch.Tensor:
    """Bilinear resize of a uint8 image (``align_corners=False``, as torchvision).

    Args:
        image: uint8 tensor ``[C, H, W]`` (any strides).
        size: output ``(h, w)``.
        antialias: antialiased (triangle filter widened by the downscale factor, as
            ``torchvision.transforms.v2.Resize(antialias=True)``) or plain bilinear.
        hflip: flip the output horizontally.
        scale: optional ``(sh, sw)``, output pixels per input pixel. By default
            ``(h / H, w / W)``. Output pixel ``i`` samples input coordinate
            ``(i + 0.5) / sh - 0.5``: with ``sh = h_full / H_full`` of a larger image,
            rows ``0..h-1`` of the result are rows ``0..h-1`` of resizing the whole image,
            given that ``image`` holds the rows their filter reads.
        interpolation: ``"bilinear"``, ``"bicubic"`` (torch's uint8 bicubic: Keys' cubic
            convolution, a = -0.5 antialiased, -0.75 not, clamped to [0, 255]),
            ``"nearest"`` or ``"nearest-exact"`` (``antialias`` ignored, as v2 does);
            the values of ``torchvision.transforms.v2.InterpolationMode``.

    Returns:
        uint8 tensor ``[C, h, w]``. Without ``scale`` it equals
        ``torchvision.transforms.v2.functional.resize(image, [h, w], interpolation=interpolation,
        antialias=antialias)`` bit for bit (1, 3 or 4 channels; other channel counts take
        torch's own bilinear kernel, the only filter they accept here).
    """
    image = _check_image(image)
    code = _filter(interpolation)
    if (not isinstance(size, (tuple, list)) or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)):
        raise ValueError(f"size must be a pair of positive ints (h, w), got {size!r}")
    if scale is not None:
        if (not isinstance(scale, (tuple, list)) or len(scale) != 2
                or not all(isinstance(v, (int, float)) and v > 0 for v in scale)):
            raise ValueError(f"scale must be a pair of positive numbers (sh, sw), got {scale!r}")
        scale = (float(scale[0]), float(scale[1]))
    if scale is None and tuple(size) == tuple(image.shape[1:]):
        out = image  # v2 returns the input unchanged for an identity resize
    else:
        src = _op_input(image)
        if src is not None:
            h, w = size
            sh, sw = scale if scale is not None else (0.0, 0.0)
            return torch.ops.fastprep.resize_aa(src, (h, w), (0, 0, h, w), tuple(src.shape[1:]), (0, 0),
                                                (sh, sw), bool(antialias), bool(hflip), code)
        if code != 0:
            raise ValueError(f"interpolation={interpolation!r} takes 1, 3 or 4 channels, got {image.shape[0]}")
        out = _torch_resample(image, size, scale, bool(antialias))
    return out.flip(-1) if hflip else out


def resize_window(image: torch.Tensor, full_in: Sequence[int], in_offset: Sequence[int], full_out: Sequence[int],
                  out_window: Sequence[int], *, scale: Sequence[float] | None = None, antialias: bool = True,
                  hflip: bool = False, interpolation: str = "bilinear") -> torch.Tensor:
    """Pixels ``out_window = (top, left, h, w)`` of resizing a virtual ``full_in = (H, W)``
    image to ``full_out = (h_full, w_full)``, given only ``image``: the virtual image's
    pixels from ``in_offset = (top, left)`` on (they must cover what the window's filter
    reads). ``scale``: ``(sh, sw)`` output pixels per input pixel, default ``full_out /
    full_in``; ``interpolation`` as :func:`resize`. Equal to ``resize`` of the whole virtual
    image followed by the crop.

    Raises:
        TypeError: ``image`` is not a uint8 ``[C, H, W]`` tensor.
        ValueError: ``image`` has other than 1, 3 or 4 channels, or lacks a pixel that the
            window's filter reads.
    """
    src = _op_input(_check_image(image))
    code = _filter(interpolation)
    if src is None:
        raise ValueError(f"resize_window takes 1, 3 or 4 channels, got {image.shape[0]}")
    sh, sw = scale if scale is not None else (0.0, 0.0)
    top, left, h, w = out_window
    return torch.ops.fastprep.resize_aa(src, tuple(full_out), (top, left, h, w), tuple(full_in), tuple(in_offset),
                                        (float(sh), float(sw)), bool(antialias), bool(hflip), code)
