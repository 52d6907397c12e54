"""Decode transforms: the first step of a pipeline over encoded JPEG bytes.

Each transform reads the image size from the JPEG header, draws its window with exactly
the torch RNG calls of the torchvision v2 transform it replaces, and decodes only what the
output needs:

* :class:`DecodeRandomCrop`, :class:`DecodeCenterCrop`: ``RandomCrop``/``CenterCrop``;
  only the window is decoded, bit-identical to cropping the full decode.
* :class:`DecodeRandomResizedCrop` (training): ``RandomResizedCrop`` (+ optionally
  ``RandomHorizontalFlip``); the window is decoded at the smallest DCT scale that keeps
  it at least ``size``, then resized.
* :class:`DecodeResize`, :class:`DecodeResizeCenterCrop` (evaluation): ``Resize`` and
  ``Resize`` + ``CenterCrop``; the image is decoded DCT-scaled from its top-left corner
  to the last row and column the crop's filter reads, then resized on the full image's
  pixel grid.

All are :class:`torchvision.transforms.v2.Transform` subclasses: call them on one encoded
image, or on a structure (``(image, label)``, a dict sample, ...) in which the first path,
bytes-like object, numpy array or tensor (depth-first) is the encoded image and everything
else passes through. They pickle (DataLoader workers) and work inside ``v2.Compose``.

Input: a path, encoded bytes (``bytes``, ``bytearray``, ``memoryview``, 1-D numpy uint8)
or an encoded uint8 1-D tensor. Output: a uint8 tensor ``[C, H, W]``.

Errors: bad arguments raise ``ValueError``/``TypeError`` when the transform is built; a
decoded image as input raises ``TypeError``; undecodable data raises
:class:`fastprep.io.DecodeError` (with the file name when the input was a path).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers
import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import PIL.Image
import torch
from torchvision.transforms import v2

from . import io as fio
from .resize import resize_window as _resize_window

__all__ = [
    "DecodePlan",
    "ResizeStep",
    "DecodeCenterCrop",
    "DecodeRandomCrop",
    "DecodeRandomResizedCrop",
    "DecodeResize",
    "DecodeResizeCenterCrop",
]

_IO_PARAMS = set(inspect.signature(fio.decode_jpeg_roi).parameters)
#: True when fastprep.io decodes at num/8 scale (``scale=(num, 8)``).
_IO_HAS_SCALE = "scale" in _IO_PARAMS and "scale" in inspect.signature(fio.decode_jpeg).parameters
_IO_HAS_MAX_SCANS = "max_scans" in _IO_PARAMS
# Decodes that feed the resize ask for interleaved memory, which torch's uint8 resize reads
# directly (planar input would have to be interleaved first).
_TO_RESIZE = {"channels_last": True} if "channels_last" in _IO_PARAMS else {}

_ENCODED_HELP = "takes encoded JPEG bytes (a path, bytes or a 1-D uint8 tensor), not a decoded image"


# ---------------------------------------------------------------------------------------
# argument validation


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


def _range_pair(value, name, low_open=None, high=None) -> tuple[float, float]:
    """``(min, max)`` of finite numbers with ``min <= max``; ``low_open``: values must be
    ``> low_open``; ``high``: values must be ``<= high``."""
    ok = (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
          and all(isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in value))
    if not ok:
        raise ValueError(f"{name} must be a pair of finite numbers (min, max), got {value!r}")
    lo, hi = float(value[0]), float(value[1])
    if lo > hi:
        raise ValueError(f"{name} must be (min, max) with min <= max, got {value!r}")
    if low_open is not None and lo <= low_open:
        raise ValueError(f"{name} values must be > {low_open}, got {value!r}")
    if high is not None and hi > high:
        raise ValueError(f"{name} values must be <= {high}, got {value!r}")
    return lo, hi


def _probability(p, name) -> float:
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {p!r}")
    return float(p)


# ---------------------------------------------------------------------------------------
# input handling


def _describe(x) -> str:
    if isinstance(x, PIL.Image.Image):
        return f"a PIL image (mode {x.mode}, size {x.size})"
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return f"a {type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"a {type(x).__name__}"


def _is_candidate(x) -> bool:
    """Entries of a sample that can be the image (encoded, or a wrongly passed decoded one)."""
    return isinstance(x, (str, os.PathLike, bytes, bytearray, memoryview, np.ndarray, torch.Tensor,
                          PIL.Image.Image))


def _encoded(inpt, owner: str):
    """``(data, path)``: encoded bytes as a uint8 1-D tensor and the file path (or None)."""
    if isinstance(inpt, (str, os.PathLike)):
        return fio.read_file(inpt), os.fspath(inpt)
    decoded = isinstance(inpt, PIL.Image.Image) or (
        isinstance(inpt, torch.Tensor) and (inpt.dim() != 1 or inpt.dtype != torch.uint8)) or (
        isinstance(inpt, np.ndarray) and (inpt.ndim != 1 or inpt.dtype != np.uint8))
    if decoded:
        raise TypeError(f"{owner} {_ENCODED_HELP}; got {_describe(inpt)}")
    if not isinstance(inpt, (bytes, bytearray, memoryview, np.ndarray, torch.Tensor)):
        raise TypeError(f"{owner} {_ENCODED_HELP}; got {_describe(inpt)}")
    return fio._as_tensor(inpt), None


@contextlib.contextmanager
def _file_named(path):
    """Prefix DecodeErrors with the file they came from."""
    try:
        yield
    except fio.DecodeError as e:
        if path is None:
            raise
        raise fio.DecodeError(f"{path}: {e}") from None


def _pad_values(channels: int, mode, fill: int) -> tuple[int, ...]:
    """Per-channel value of padding pixels: gray level ``fill`` in every channel; in YCbCr
    mode its YCbCr, ``(fill, 128, 128)``, so padding means the same colour whatever the mode."""
    if fio._mode(mode) == fio.ImageReadMode.YCbCr:
        return (fill,) + (128,) * (channels - 1)
    return (fill,) * channels


def _filled(values, height: int, width: int) -> torch.Tensor:
    """A ``[len(values), height, width]`` uint8 image, channel ``c`` all ``values[c]``."""
    out = torch.empty((len(values), height, width), dtype=torch.uint8)
    for c, v in enumerate(values):
        out[c] = v
    return out


class ResizeStep(NamedTuple):
    """The resize of a decoded window: pixels ``out_window = (top, left, h, w)`` of resizing
    a virtual ``full_in = (H, W)`` image, of which the decoded window holds the pixels from
    ``in_offset = (top, left)`` on, to ``full_out = (h, w)`` (the arguments of
    :func:`fastprep.resize.resize_window`). ``scale``: ``(sh, sw)`` output pixels per input
    pixel, ``None`` for ``full_out / full_in``; ``hflip``: the result mirrored."""

    full_in: tuple
    in_offset: tuple
    full_out: tuple
    out_window: tuple
    scale: tuple | None
    antialias: bool
    hflip: bool


class DecodePlan(NamedTuple):
    """What a decode transform computes for one image once its random parameters are drawn.

    Attributes:
        num: DCT scale: the image is decoded at ``num/8`` of its size.
        window: ``(top, left, height, width)`` decoded, in pixels of that scale.
        resize: the :class:`ResizeStep` applied to the decoded window, or ``None``.
        size: ``(height, width)`` of the output.
        offset: ``(top, left)`` of the (resized) window in the output; the other output
            pixels are padding (:meth:`padding_values` of the transform). ``None``: the
            output is all padding (the decode, of ``window``, only checks the file and
            gives the channel count).
    """

    num: int
    window: tuple
    resize: ResizeStep | None
    size: tuple
    offset: tuple | None


def scaled_size(height: int, width: int, num: int) -> tuple[int, int]:
    """Size of a ``num/8`` DCT-scaled decode: ``(ceil(height*num/8), ceil(width*num/8))``."""
    if hasattr(fio, "scaled_size"):
        return tuple(fio.scaled_size(height, width, (num, 8)))
    return -(-height * num // 8), -(-width * num // 8)


#: DCT scales tried, smallest first. libjpeg-turbo decodes at num/8 for any num in 1..8,
#: but only 1/8, 2/8, 4/8 (and 8/8) have SIMD inverse DCTs: measured on 12 MP windows, 5/8,
#: 6/8 and 7/8 decode slower than 8/8 and 3/8 no faster than 4/8.
DCT_SCALES = (1, 2, 4)


def _rounded(v_times_num: int) -> int:
    """``round(v * num / 8)``, halves up, from the integer ``v * num``."""
    return (v_times_num + 4) // 8


def plan_scaled_window(height, width, window, size, scales=DCT_SCALES):
    """The DCT scale and scaled window for decoding ``window`` to at least ``size``.

    The window ``(top, left, h, w)`` of an ``height x width`` image covers the real interval
    ``[left * num/8, (left + w) * num/8)`` of the ``num/8`` decode; its edges are rounded to
    the nearest scaled pixel (halves up), so each edge moves by at most half a scaled pixel
    (``4/num`` original pixels). The smallest ``num`` in ``scales`` whose rounded window is
    at least ``size`` in both dimensions wins.

    Returns:
        ``(num, (top, left, h, w))`` in scaled coordinates, or ``(8, window)`` when no
        smaller scale keeps the window at least ``size``.
    """
    top, left, h, w = window
    th, tw = size
    for num in scales:
        hs, ws = scaled_size(height, width, num)
        y0, x0 = _rounded(top * num), _rounded(left * num)
        y1, x1 = min(_rounded((top + h) * num), hs), min(_rounded((left + w) * num), ws)
        if y1 - y0 >= th and x1 - x0 >= tw:
            return num, (y0, x0, y1 - y0, x1 - x0)
    return 8, tuple(window)


def _smallest_scale(height, width, out_h, out_w, scales=DCT_SCALES) -> int:
    """Smallest ``num`` whose ``num/8`` decode (real extent) is at least ``out`` in both
    dimensions; 8 when none is."""
    for num in scales:
        if height * num >= 8 * out_h and width * num >= 8 * out_w:
            return num
    return 8


def _filter_support(scale: float, antialias: bool) -> tuple[float, float]:
    step = 1.0 / scale
    return step, (max(step, 1.0) if antialias else 1.0)


def _filter_start(out_start: int, scale: float, antialias: bool) -> int:
    """First input pixel that output pixels from ``out_start`` on read, for torch's bilinear
    resize with ``scale`` output pixels per input pixel (less two for rounding)."""
    step, support = _filter_support(scale, antialias)
    center = step * (out_start + 0.5)
    return max(int(center - support + 0.5) - 2, 0)


def _filter_end(out_end: int, scale: float, antialias: bool, in_size: int) -> int:
    """One past the last input pixel that output pixels ``[0, out_end)`` read, for torch's
    bilinear resize with ``scale`` output pixels per input pixel (plus two for rounding)."""
    step, support = _filter_support(scale, antialias)
    center = step * (out_end - 0.5)
    return min(int(center + support + 0.5) + 2, in_size)


# ---------------------------------------------------------------------------------------
# base class


class _DecodeTransform(v2.Transform):
    """A v2 transform whose input is an encoded JPEG: ``make_params`` reads the header and
    draws the window, ``transform`` decodes it."""

    def _init_decode(self, mode, max_pixels, strict, max_scans):
        fio._mode(mode)  # validate early
        self.mode = mode
        self.max_pixels = fio._max_pixels(max_pixels)
        self.strict = bool(strict)
        if max_scans is not None:
            if not _IO_HAS_MAX_SCANS:
                raise TypeError("max_scans needs a fastprep.io with scan limits (this build has none)")
            max_scans = fio._int("max_scans", max_scans)
            if max_scans < 0:
                raise ValueError(f"max_scans must be >= 0, got {max_scans}")
        self.max_scans = max_scans

    def _io_kwargs(self, num: int = 8) -> dict:
        kw = {"max_pixels": self.max_pixels, "strict": self.strict}
        if self.max_scans is not None:
            kw["max_scans"] = self.max_scans
        if num != 8:
            kw["scale"] = (num, 8)
        return kw

    def _needs_transform_list(self, flat_inputs):
        # The first candidate entry is the image; everything after it passes through.
        out, found = [], False
        for x in flat_inputs:
            hit = not found and _is_candidate(x)
            found = found or hit
            out.append(hit)
        if not found:
            got = _describe(flat_inputs[0]) if len(flat_inputs) == 1 else \
                "a sample with no path, bytes or tensor in it"
            raise TypeError(f"{type(self).__name__} {_ENCODED_HELP}; got {got}")
        return out

    def forward(self, *inputs):
        """Decode the encoded image in ``inputs`` (one image, or a structure such as
        ``(image, label)`` or a dict); other entries pass through unchanged."""
        if len(inputs) == 1 and not isinstance(inputs[0], (tuple, list, dict)):
            x = inputs[0]
            return self.transform(x, self.make_params([x]))
        return super().forward(*inputs)

    def make_params(self, flat_inputs):
        data, path = _encoded(flat_inputs[0], type(self).__name__)
        with _file_named(path):
            info = fio.jpeg_info(data)
        params = self._draw(info)
        params.update(data=data, path=path, info=info)
        return params

    def transform(self, inpt, params):
        with _file_named(params["path"]):
            return self._decode(params["data"], params["info"], params)

    def _draw(self, info: fio.JpegInfo) -> dict:
        raise NotImplementedError

    def decode_plan(self, info: fio.JpegInfo, params: dict) -> DecodePlan:
        """The :class:`DecodePlan` of an image with header ``info`` for parameters ``params``
        drawn by ``make_params``."""
        raise NotImplementedError

    def draw_plan(self, info: fio.JpegInfo) -> DecodePlan:
        """Draw the random parameters of one call on an image with header ``info`` -- exactly
        the torch RNG calls the call makes -- and return its :class:`DecodePlan`."""
        return self.decode_plan(info, self._draw(info))

    def padding_values(self, channels: int) -> tuple[int, ...]:
        """Value of padding pixels in each of the output's ``channels`` channels (0..255)."""
        return _pad_values(channels, self.mode, 0)

    def _decode(self, data, info, params) -> torch.Tensor:
        return self._run_plan(data, self.decode_plan(info, params))

    def _run_plan(self, data, plan: DecodePlan) -> torch.Tensor:
        """Decode, resize and pad as ``plan`` says."""
        kw = self._io_kwargs(plan.num)
        r = plan.resize
        if r is None:
            img = fio.decode_jpeg_roi(data, *plan.window, self.mode, **kw)
        else:
            img = fio.decode_jpeg_roi(data, *plan.window, self.mode, **kw, **_TO_RESIZE)
            img = _resize_window(img, r.full_in, r.in_offset, r.full_out, r.out_window, scale=r.scale,
                                 antialias=r.antialias, hflip=r.hflip)
        if plan.offset == (0, 0) and tuple(img.shape[1:]) == tuple(plan.size):
            return img
        out = _filled(self.padding_values(img.shape[0]), *plan.size)
        if plan.offset is not None:
            oy, ox = plan.offset
            out[:, oy:oy + img.shape[1], ox:ox + img.shape[2]] = img
        return out

    def _padded_plan(self, info: fio.JpegInfo, window, pad_ltrb) -> DecodePlan:
        """Plan for ``window = (top, left, height, width)`` of the image padded by
        ``pad_ltrb``: only the part that overlaps the image is decoded."""
        top, left, height, width = window
        pl, pt = pad_ltrb[0], pad_ltrb[1]
        # Window in image coordinates, clipped to the image.
        y0, x0 = max(top - pt, 0), max(left - pl, 0)
        y1, x1 = min(top - pt + height, info.height), min(left - pl + width, info.width)
        if y1 <= y0 or x1 <= x0:  # all padding: decode one pixel only for the channel count
            return DecodePlan(8, (0, 0, 1, 1), None, (height, width), None)
        return DecodePlan(8, (y0, x0, y1 - y0, x1 - x0), None, (height, width), (y0 - (top - pt), x0 - (left - pl)))

    def _io_repr(self) -> str:
        s = f"mode={self.mode!r}"
        if self.max_pixels != fio.DEFAULT_MAX_PIXELS:
            s += f", max_pixels={self.max_pixels}"
        if self.strict:
            s += ", strict=True"
        if self.max_scans is not None:
            s += f", max_scans={self.max_scans}"
        return s


_IO_ARGS_DOC = """mode: decode mode, see :class:`fastprep.io.ImageReadMode` (default ``"RGB"``).
        max_pixels: refuse images with more pixels than this (0: no limit), as
            :func:`fastprep.io.decode_jpeg`.
        strict: raise :class:`fastprep.io.DecodeError` on corrupt data libjpeg can decode past.
        max_scans: refuse files with more scans than this (``None``: fastprep.io's default);
            needs a fastprep.io with scan limits."""


# ---------------------------------------------------------------------------------------
# crops


class DecodeRandomCrop(_DecodeTransform):
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
        {io}

    Output: uint8 tensor ``[C, height, width]``.
    """

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill: int = 0, mode="RGB", *,
                 max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False, max_scans=None):
        super().__init__()
        self.size = _size_pair(size)
        self.padding = padding
        self._pad = _padding_ltrb(padding)
        self.pad_if_needed = bool(pad_if_needed)
        if not isinstance(fill, numbers.Integral) or isinstance(fill, bool) or not 0 <= fill <= 255:
            raise ValueError(f"fill must be an int in [0, 255], got {fill!r}")
        self.fill = int(fill)
        self._init_decode(mode, max_pixels, strict, max_scans)

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
            raise ValueError(f"Required crop size {(th, tw)} is larger than input image size {(h, w)}; "
                             "pass pad_if_needed=True to pad smaller images")
        if h == th and w == tw:
            return (pl, pt, pr, pb), (0, 0, h, w)
        i = torch.randint(0, h - th + 1, size=(1,)).item()
        j = torch.randint(0, w - tw + 1, size=(1,)).item()
        return (pl, pt, pr, pb), (i, j, th, tw)

    def _draw(self, info):
        pad, window = self.get_params(info)
        return {"pad": pad, "window": window}

    def decode_plan(self, info, params):
        return self._padded_plan(info, params["window"], params["pad"])

    def padding_values(self, channels):
        return _pad_values(channels, self.mode, self.fill)

    def extra_repr(self) -> str:
        return (f"size={self.size}, padding={self.padding}, pad_if_needed={self.pad_if_needed}, "
                f"fill={self.fill}, {self._io_repr()}")


class DecodeCenterCrop(_DecodeTransform):
    """Decode the centre ``size`` crop of a JPEG, as ``torchvision.transforms.CenterCrop``.

    An image smaller than ``size`` is padded with zeros on both sides, as torchvision does.

    Args:
        size: output ``(height, width)``, or an int for a square crop.
        {io}

    Output: uint8 tensor ``[C, height, width]``.
    """

    def __init__(self, size, mode="RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False,
                 max_scans=None):
        super().__init__()
        self.size = _size_pair(size)
        self._init_decode(mode, max_pixels, strict, max_scans)

    def get_params(self, info: fio.JpegInfo):
        """``(pad_ltrb, (top, left, height, width))`` for an image with header ``info``, as
        ``torchvision.transforms.CenterCrop`` computes them (no randomness)."""
        return _center_crop(info.height, info.width, self.size)

    def _draw(self, info):
        pad, window = self.get_params(info)
        return {"pad": pad, "window": window}

    def decode_plan(self, info, params):
        return self._padded_plan(info, params["window"], params["pad"])

    def extra_repr(self) -> str:
        return f"size={self.size}, {self._io_repr()}"


def _center_crop(h, w, size):
    """``(pad_ltrb, (top, left, th, tw))`` of torchvision's CenterCrop on an ``h x w`` image;
    the window is in the coordinates of the zero-padded image."""
    th, tw = size
    pad = (0, 0, 0, 0)
    if th > h or tw > w:
        pad = ((tw - w) // 2 if tw > w else 0, (th - h) // 2 if th > h else 0,
               (tw - w + 1) // 2 if tw > w else 0, (th - h + 1) // 2 if th > h else 0)
        h, w = h + pad[1] + pad[3], w + pad[0] + pad[2]
    return pad, (int(round((h - th) / 2.0)), int(round((w - tw) / 2.0)), th, tw)


# ---------------------------------------------------------------------------------------
# training recipe


class DecodeRandomResizedCrop(_DecodeTransform):
    """Decode a random resized crop of a JPEG, as ``torchvision.transforms.v2.RandomResizedCrop``
    (bilinear), optionally followed by ``RandomHorizontalFlip(flip_p)``.

    RNG: the window is drawn with v2 ``RandomResizedCrop``'s calls on torch's default RNG
    for the header's size: per attempt (at most 10) one ``uniform_`` for the area and one
    for the log aspect ratio, then two ``randint`` for the offsets of the first window that
    fits; after 10 misses the centred fallback window, with no further draws. Then, when
    ``flip_p > 0``, one ``torch.rand(1)``: flip when it is ``< flip_p``. That is exactly
    the sequence of ``v2.Compose([v2.RandomResizedCrop(...), v2.RandomHorizontalFlip(flip_p)])``,
    so the same seed gives the same window and the same flip.

    Decode: with ``dct_scaling=False`` the window is decoded at full size and resized with
    the same kernel as v2: the output equals v2 on the full decode (bit for bit on CPUs
    where v2 resizes uint8 natively). With ``dct_scaling=True`` (default) the window is
    decoded at the smallest scale ``num/8`` for which it is still at least ``size`` (see
    :func:`plan_scaled_window`: window edges rounded to the nearest scaled pixel), then
    resized; the DCT-domain downscale replaces part of the bilinear one, so values differ
    from v2 slightly (PSNR in ``docs/recipes.md``). The flip is applied to the small output.

    Args:
        size: output ``(height, width)``, or an int for a square output.
        scale: ``(min, max)`` fraction of the image area, ``0 < min <= max <= 1``.
        ratio: ``(min, max)`` aspect ratio (width / height), ``0 < min <= max``.
        antialias: antialiased bilinear resize (as v2's default) or plain bilinear.
        dct_scaling: decode at reduced scale when the window allows it.
        flip_p: probability of a horizontal flip; 0 draws nothing (plain RandomResizedCrop).
        {io}

    Output: uint8 tensor ``[C, height, width]``.
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), antialias: bool = True,
                 dct_scaling: bool = True, flip_p: float = 0.0, mode="RGB", *,
                 max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False, max_scans=None):
        super().__init__()
        self.size = _size_pair(size)
        self.scale = _range_pair(scale, "scale", low_open=0.0, high=1.0)
        self.ratio = _range_pair(ratio, "ratio", low_open=0.0)
        self.antialias = bool(antialias)
        self.dct_scaling = bool(dct_scaling)
        self.flip_p = _probability(flip_p, "flip_p")
        self._init_decode(mode, max_pixels, strict, max_scans)
        # The same float32 tensor v2 builds, so the uniform_ bounds are the same numbers.
        self._log_ratio = torch.log(torch.tensor(self.ratio))

    def get_params(self, height: int, width: int):
        """Draw ``(top, left, h, w)`` for an ``height x width`` image, with the torch RNG calls
        of ``torchvision.transforms.v2.RandomResizedCrop.make_params``."""
        area = height * width
        lo, hi = self._log_ratio[0], self._log_ratio[1]
        for _attempt in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = torch.exp(torch.empty(1).uniform_(lo, hi)).item()
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = torch.randint(0, height - h + 1, size=(1,)).item()
                left = torch.randint(0, width - w + 1, size=(1,)).item()
                return top, left, h, w
        # No draw fitted: the largest centred window with an aspect ratio in range.
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            h, w = height, int(round(height * self.ratio[1]))
        else:
            h, w = height, width
        return (height - h) // 2, (width - w) // 2, h, w

    def _draw(self, info):
        window = self.get_params(info.height, info.width)
        flip = bool(torch.rand(1) < self.flip_p) if self.flip_p > 0 else False
        return {"window": window, "flip": flip}

    def decode_plan(self, info, params):
        window = params["window"]
        num = 8
        if self.dct_scaling and _IO_HAS_SCALE:
            num, window = plan_scaled_window(info.height, info.width, window, self.size)
        h, w = window[2], window[3]
        resize = ResizeStep((h, w), (0, 0), self.size, (0, 0) + self.size, None, self.antialias, params["flip"])
        return DecodePlan(num, tuple(window), resize, self.size, (0, 0))

    def extra_repr(self) -> str:
        return (f"size={self.size}, scale={self.scale}, ratio={self.ratio}, antialias={self.antialias}, "
                f"dct_scaling={self.dct_scaling}, flip_p={self.flip_p}, {self._io_repr()}")


# ---------------------------------------------------------------------------------------
# evaluation recipe


def _resized_size(h: int, w: int, size, max_size):
    """Output ``(h, w)`` of ``torchvision.transforms.v2.Resize(size, max_size=max_size)``."""
    if len(size) == 2:
        return size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size[0], int(size[0] * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if w <= h else (new_short, new_long)


def _resize_size_arg(size, max_size):
    if _is_int(size):
        size = (int(size),)
    elif (isinstance(size, Sequence) and not isinstance(size, str) and len(size) in (1, 2)
          and all(_is_int(v) for v in size)):
        size = tuple(int(v) for v in size)
    else:
        raise ValueError(f"size must be an int or a sequence of 1 or 2 ints, got {size!r}")
    if min(size) <= 0:
        raise ValueError(f"size must be positive, got {size!r}")
    if max_size is not None:
        if not _is_int(max_size) or len(size) != 1 or max_size <= size[0]:
            raise ValueError(f"max_size must be an int greater than an int size, got max_size={max_size!r} "
                             f"with size={size!r}")
    return size


class _ResizeBase(_DecodeTransform):
    def _init_resize(self, size, max_size, antialias, dct_scaling):
        self._size = _resize_size_arg(size, max_size)
        self.max_size = max_size
        self.antialias = bool(antialias)
        self.dct_scaling = bool(dct_scaling)

    def _resized_plan(self, info, out_hw, rows, cols, size, offset) -> DecodePlan:
        """Plan for rows ``[rows[0], rows[1])`` and columns ``[cols[0], cols[1])`` of the image
        resized to ``out_hw``, decoding (DCT-scaled when allowed) only the pixels their filter
        reads, placed at ``offset`` in a ``size`` output."""
        H, W = info.height, info.width
        oh, ow = out_hw
        (oy0, oy1), (ox0, ox1) = rows, cols
        num = 8
        if self.dct_scaling and _IO_HAS_SCALE:
            num = _smallest_scale(H, W, oh, ow)
        hs, ws = scaled_size(H, W, num) if num != 8 else (H, W)
        # Output pixels per pixel of the decode, on the grid of the whole image at num/8.
        sh, sw = oh * 8 / (H * num), ow * 8 / (W * num)
        y0, y1 = _filter_start(oy0, sh, self.antialias), _filter_end(oy1, sh, self.antialias, hs)
        x0, x1 = _filter_start(ox0, sw, self.antialias), _filter_end(ox1, sw, self.antialias, ws)
        # The window's rows/cols of the full image's resize grid, from the decoded window
        # alone (fastprep::resize_aa); at full scale the default in/out filter scale is v2's.
        resize = ResizeStep((hs, ws), (y0, x0), (oh, ow), (oy0, ox0, oy1 - oy0, ox1 - ox0),
                            None if num == 8 else (sh, sw), self.antialias, False)
        return DecodePlan(num, (y0, x0, y1 - y0, x1 - x0), resize, tuple(size), tuple(offset))


class DecodeResize(_ResizeBase):
    """Decode a JPEG resized as ``torchvision.transforms.v2.Resize(size, max_size)`` (bilinear).

    With ``dct_scaling=True`` (default) the image is decoded at the smallest scale ``num/8``
    that is still at least the output size, then resized on the same pixel grid (output
    pixel centres at the same image positions as v2's); values differ from v2 slightly.
    With ``dct_scaling=False`` the output equals v2 ``Resize`` on the full decode.

    Args:
        size: int (the shorter side, as v2) or ``(height, width)``.
        max_size: as v2: cap on the longer side when ``size`` is an int.
        antialias: antialiased bilinear (v2's default) or plain bilinear.
        dct_scaling: decode at reduced scale when the output allows it.
        {io}

    Output: uint8 tensor ``[C, h, w]``.
    """

    def __init__(self, size, max_size=None, antialias: bool = True, dct_scaling: bool = True, mode="RGB", *,
                 max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False, max_scans=None):
        super().__init__()
        self._init_resize(size, max_size, antialias, dct_scaling)
        self.size = self._size if len(self._size) == 2 else self._size[0]
        self._init_decode(mode, max_pixels, strict, max_scans)

    def _draw(self, info):
        return {"out": _resized_size(info.height, info.width, self._size, self.max_size)}

    def decode_plan(self, info, params):
        oh, ow = params["out"]
        return self._resized_plan(info, (oh, ow), (0, oh), (0, ow), (oh, ow), (0, 0))

    def extra_repr(self) -> str:
        return (f"size={self.size}, max_size={self.max_size}, antialias={self.antialias}, "
                f"dct_scaling={self.dct_scaling}, {self._io_repr()}")


class DecodeResizeCenterCrop(_ResizeBase):
    """Decode a JPEG as ``v2.Resize(resize_size)`` then ``v2.CenterCrop(crop_size)``: the
    standard evaluation transform (256 then 224).

    Only the pixels that the crop's filter reads are decoded (DCT-scaled with
    ``dct_scaling=True``; on a packed file only the restart intervals they lie in), and
    the resize runs on the whole image's pixel grid, so the crop sees the same sample
    positions as v2's. With ``dct_scaling=False`` the output
    equals v2 on the full decode bit for bit (``fastprep::resize_aa`` computes the crop's
    rows and columns of the full image's resize from the decoded window alone).
    A crop larger than the resized image is zero-padded as v2 ``CenterCrop`` pads.

    Args:
        resize_size: int (the shorter side) or ``(height, width)``, as v2 ``Resize``.
        crop_size: int or ``(height, width)``, as v2 ``CenterCrop``.
        antialias, dct_scaling: as :class:`DecodeResize`.
        {io}

    Output: uint8 tensor ``[C, crop_h, crop_w]``.
    """

    def __init__(self, resize_size=256, crop_size=224, antialias: bool = True, dct_scaling: bool = True,
                 mode="RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False, max_scans=None):
        super().__init__()
        self._init_resize(resize_size, None, antialias, dct_scaling)
        self.resize_size = self._size if len(self._size) == 2 else self._size[0]
        self.crop_size = _size_pair(crop_size, "crop_size")
        self._init_decode(mode, max_pixels, strict, max_scans)

    def _draw(self, info):
        out = _resized_size(info.height, info.width, self._size, None)
        pad, window = _center_crop(out[0], out[1], self.crop_size)
        return {"out": out, "pad": pad, "window": window}

    def decode_plan(self, info, params):
        (oh, ow), pad, (top, left, ch, cw) = params["out"], params["pad"], params["window"]
        # Crop window in resized-image coordinates, clipped to the resized image (the centred
        # crop always overlaps it).
        y0, x0 = max(top - pad[1], 0), max(left - pad[0], 0)
        y1, x1 = min(top - pad[1] + ch, oh), min(left - pad[0] + cw, ow)
        return self._resized_plan(info, (oh, ow), (y0, y1), (x0, x1), (ch, cw),
                                  (y0 - (top - pad[1]), x0 - (left - pad[0])))

    def padding_values(self, channels):
        return (0,) * channels  # v2 CenterCrop pads with zeros, in every mode

    def extra_repr(self) -> str:
        return (f"resize_size={self.resize_size}, crop_size={self.crop_size}, antialias={self.antialias}, "
                f"dct_scaling={self.dct_scaling}, {self._io_repr()}")


for _cls in (DecodeRandomCrop, DecodeCenterCrop, DecodeRandomResizedCrop, DecodeResize, DecodeResizeCenterCrop):
    _cls.__doc__ = _cls.__doc__.replace("{io}", _IO_ARGS_DOC)
del _cls
