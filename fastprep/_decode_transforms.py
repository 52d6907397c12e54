"""Decode-and-crop transforms: the first step of a pipeline over encoded JPEG bytes.

They draw the crop window exactly as torchvision's ``RandomCrop``/``CenterCrop`` would for
an image of the file's size (read from the header), then decode only that window.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence

import torch

from . import io as fio

__all__ = ["DecodeCenterCrop", "DecodeRandomCrop"]


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _size_pair(size, name="size") -> tuple[int, int]:
    given = size
    if _is_int(size):
        size = (size, size)
    elif isinstance(size, Sequence) and not isinstance(size, str) and len(size) in (1, 2) \
            and all(_is_int(v) for v in size):
        size = (size[0], size[-1])
    else:
        raise ValueError(f"{name} must be an int or a sequence of 1 or 2 ints, got {given!r}")
    if size[0] <= 0 or size[1] <= 0:
        raise ValueError(f"{name} must be positive, got {given!r}")
    return int(size[0]), int(size[1])


def _padding_ltrb(padding) -> tuple[int, int, int, int]:
    if padding is None:
        return (0, 0, 0, 0)
    if _is_int(padding):
        p = int(padding)
        out = (p, p, p, p)
    elif isinstance(padding, Sequence) and not isinstance(padding, str) and len(padding) in (1, 2, 4) \
            and all(_is_int(v) for v in padding):
        p = [int(v) for v in padding]
        out = tuple(p * 4) if len(p) == 1 else (tuple(p * 2) if len(p) == 2 else tuple(p))
    else:
        raise ValueError(f"padding must be an int or a sequence of 1, 2 or 4 ints, got {padding!r}")
    if min(out) < 0:
        raise ValueError(f"padding must be non-negative, got {padding!r}")
    return out


def _encoded(inpt):
    """Encoded bytes from a path, bytes-like object or uint8 tensor."""
    if isinstance(inpt, (str, os.PathLike)):
        return fio.read_file(inpt)
    return inpt


def _filled(channels: int, height: int, width: int, mode, fill: int) -> torch.Tensor:
    """Padding pixels: gray level ``fill`` in every channel; in YCbCr mode its YCbCr,
    ``(fill, 128, 128)``, so padding means the same colour whatever the mode."""
    out = torch.full((channels, height, width), fill, dtype=torch.uint8)
    if fio._mode(mode) == fio.ImageReadMode.YCbCr:
        out[1:] = 128
    return out


def _decode_padded(data, info: fio.JpegInfo, mode, window, pad_ltrb, fill) -> torch.Tensor:
    """Decode ``window = (top, left, height, width)`` of the image padded by ``pad_ltrb``
    (constant ``fill``), decoding only the part that overlaps the real image."""
    top, left, height, width = window
    pl, pt = pad_ltrb[0], pad_ltrb[1]
    # Window in image coordinates, clipped to the image.
    y0, x0 = max(top - pt, 0), max(left - pl, 0)
    y1, x1 = min(top - pt + height, info.height), min(left - pl + width, info.width)
    if y0 == top - pt and x0 == left - pl and y1 - y0 == height and x1 - x0 == width:
        return fio.decode_jpeg_roi(data, y0, x0, height, width, mode)
    if y1 <= y0 or x1 <= x0:  # all padding: decode one pixel only for the channel count
        channels = fio.decode_jpeg_roi(data, 0, 0, 1, 1, mode).shape[0]
        return _filled(channels, height, width, mode, fill)
    inner = fio.decode_jpeg_roi(data, y0, x0, y1 - y0, x1 - x0, mode)
    out = _filled(inner.shape[0], height, width, mode, fill)
    oy, ox = y0 - (top - pt), x0 - (left - pl)
    out[:, oy:oy + inner.shape[1], ox:ox + inner.shape[2]] = inner
    return out


class DecodeRandomCrop(torch.nn.Module):
    """Decode a random ``size`` crop of a JPEG, drawn as ``torchvision.transforms.RandomCrop``.

    The window is drawn from torch's default RNG with the same calls, in the same order, as
    ``RandomCrop(size, padding, pad_if_needed, fill)`` on the decoded image, so for the same
    seed the output equals ``RandomCrop(...)(decode_jpeg(data))``. Only the window is decoded.

    Args:
        size: output ``(height, width)``, or an int for a square crop.
        padding: optional padding on each border (int, or 2 or 4 ints as in torchvision).
        pad_if_needed: pad an image smaller than ``size`` (as torchvision does) instead of
            raising ``ValueError``.
        fill: gray level of padded pixels (0-255); in ``mode="YCbCr"`` padding is its
            YCbCr, ``(fill, 128, 128)``.
        mode: decode mode, see :class:`fastprep.io.ImageReadMode` (default ``"RGB"``).

    Input: a path, encoded bytes (bytes, bytearray, memoryview, numpy uint8) or an encoded
    uint8 1-D tensor. Output: uint8 tensor ``[C, height, width]``.
    """

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill: int = 0, mode="RGB"):
        super().__init__()
        self.size = _size_pair(size)
        self.padding = padding
        self._pad = _padding_ltrb(padding)
        self.pad_if_needed = bool(pad_if_needed)
        if not isinstance(fill, numbers.Integral) or isinstance(fill, bool) or not 0 <= fill <= 255:
            raise ValueError(f"fill must be an int in [0, 255], got {fill!r}")
        self.fill = int(fill)
        fio._mode(mode)  # validate early
        self.mode = mode

    def get_params(self, info: fio.JpegInfo):
        """Draw ``(pad_ltrb, (top, left, height, width))`` for an image with header ``info``;
        the window is in the coordinates of the padded image."""
        pl, pt, pr, pb = self._pad
        h, w = info.height + pt + pb, info.width + pl + pr
        th, tw = self.size
        if self.pad_if_needed and w < tw:
            pl, pr, w = pl + tw - w, pr + tw - w, w + 2 * (tw - w)
        if self.pad_if_needed and h < th:
            pt, pb, h = pt + th - h, pb + th - h, h + 2 * (th - h)
        if h < th or w < tw:
            raise ValueError(f"Required crop size {(th, tw)} is larger than input image size {(h, w)}")
        if h == th and w == tw:
            return (pl, pt, pr, pb), (0, 0, h, w)
        i = torch.randint(0, h - th + 1, size=(1,)).item()
        j = torch.randint(0, w - tw + 1, size=(1,)).item()
        return (pl, pt, pr, pb), (i, j, th, tw)

    def forward(self, inpt) -> torch.Tensor:
        data = fio._as_tensor(_encoded(inpt))
        info = fio.jpeg_info(data)
        pad, window = self.get_params(info)
        return _decode_padded(data, info, self.mode, window, pad, self.fill)

    def extra_repr(self) -> str:
        return (f"size={self.size}, padding={self.padding}, pad_if_needed={self.pad_if_needed}, "
                f"fill={self.fill}, mode={self.mode!r}")


class DecodeCenterCrop(torch.nn.Module):
    """Decode the centre ``size`` crop of a JPEG, as ``torchvision.transforms.CenterCrop``.

    An image smaller than ``size`` is padded with zeros on both sides, as torchvision does.
    Input and output as :class:`DecodeRandomCrop`.
    """

    def __init__(self, size, mode="RGB"):
        super().__init__()
        self.size = _size_pair(size)
        fio._mode(mode)
        self.mode = mode

    def get_params(self, info: fio.JpegInfo):
        """``(pad_ltrb, (top, left, height, width))`` for an image with header ``info``, as
        ``torchvision.transforms.CenterCrop`` computes them (no randomness)."""
        h, w = info.height, info.width
        th, tw = self.size
        pad = (0, 0, 0, 0)
        if th > h or tw > w:
            pad = ((tw - w) // 2 if tw > w else 0, (th - h) // 2 if th > h else 0,
                   (tw - w + 1) // 2 if tw > w else 0, (th - h + 1) // 2 if th > h else 0)
            h, w = h + pad[1] + pad[3], w + pad[0] + pad[2]
        return pad, (int(round((h - th) / 2.0)), int(round((w - tw) / 2.0)), th, tw)

    def forward(self, inpt) -> torch.Tensor:
        data = fio._as_tensor(_encoded(inpt))
        info = fio.jpeg_info(data)
        pad, window = self.get_params(info)
        return _decode_padded(data, info, self.mode, window, pad, 0)

    def extra_repr(self) -> str:
        return f"size={self.size}, mode={self.mode!r}"
