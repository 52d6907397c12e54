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
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import PIL.Image
import torch
from torchvision.transforms import v2  # type: ignore[import-untyped, unused-ignore]

from .. import _checks
from .. import io as fio
from ..resize import resize_window
from ._plan import (
    INTERPOLATIONS,
    DecodePlan,
    PadStage,
    ResizeStep,
    axis_map,
    center_crop,
    centered_ratio_window,
    mapped_plan,
    pad_error,
    padded_plan,
    padded_size,
    plan_scaled_window,
    resized_plan,
    resized_size,
    smallest_scale,
)

__all__ = [
    "OnDecoded",
    "DecodeCenterCrop",
    "DecodeRandomCrop",
    "DecodeRandomResizedCrop",
    "DecodeResize",
    "DecodeResizeCenterCrop",
]

#: A decode mode: a :class:`fastprep.io.ImageReadMode` or its name.
Mode = str | fio.ImageReadMode
#: An output size: an int (square) or ``(height, width)``.
Size = int | Sequence[int]
Window = tuple[int, int, int, int]

_ENCODED_HELP = "takes encoded JPEG bytes (a path, bytes or a 1-D uint8 tensor), not a decoded image"


# ---------------------------------------------------------------------------------------
# input handling


def _describe_input(x: object) -> str:
    if isinstance(x, PIL.Image.Image):
        return f"a PIL image (mode {x.mode}, size {x.size})"
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return f"a {type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"a {type(x).__name__}"


def _is_candidate(x: object) -> bool:
    """Entries of a sample that can be the image (encoded, or a wrongly passed decoded one)."""
    return isinstance(x, (str, os.PathLike, bytes, bytearray, memoryview, np.ndarray, torch.Tensor,
                          PIL.Image.Image))


def _encoded(inpt: Any, owner: str) -> tuple[torch.Tensor, str | None]:
    """``(data, path)``: encoded bytes as a uint8 1-D tensor and the file path (or None)."""
    if isinstance(inpt, (str, os.PathLike)):
        return fio.read_file(inpt), os.fspath(inpt)
    decoded = isinstance(inpt, PIL.Image.Image) or (
        isinstance(inpt, torch.Tensor) and (inpt.dim() != 1 or inpt.dtype != torch.uint8)) or (
        isinstance(inpt, np.ndarray) and (inpt.ndim != 1 or inpt.dtype != np.uint8))
    if decoded:
        raise TypeError(f"{owner} {_ENCODED_HELP}; got {_describe_input(inpt)}")
    if not isinstance(inpt, (bytes, bytearray, memoryview, np.ndarray, torch.Tensor)):
        raise TypeError(f"{owner} {_ENCODED_HELP}; got {_describe_input(inpt)}")
    return _checks.encoded_tensor(inpt), None


@contextlib.contextmanager
def _file_named(path: str | None) -> Iterator[None]:
    """Prefix DecodeErrors with the file they came from."""
    try:
        yield
    except fio.DecodeError as e:
        if path is None:
            raise
        raise fio.DecodeError(f"{path}: {e}") from None


def _interpolation(value: Any) -> str:
    """A resize filter's name: one of ``INTERPOLATIONS`` (a ``v2.InterpolationMode`` or its value)."""
    name = value.value if isinstance(value, v2.InterpolationMode) else value
    if name not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {value!r}")
    return str(name)


def _pad_values(channels: int, mode: Mode, fill: int | tuple[int, ...]) -> tuple[int, ...]:
    """Per-channel value of padding pixels: gray level ``fill`` in every channel; in YCbCr
    mode its YCbCr, ``(fill, 128, 128)``, so padding means the same colour whatever the mode.
    A tuple ``fill`` is the value of each channel (one value: of every channel), in any mode."""
    if isinstance(fill, tuple):
        if len(fill) == 1:
            return fill * channels
        if len(fill) != channels:
            raise ValueError(f"fill {fill} has {len(fill)} values for {channels} channels")
        return fill
    if _checks.mode_name(mode) == fio.ImageReadMode.YCbCr.name:
        return (fill,) + (128,) * (channels - 1)
    return (fill,) * channels


def _read_padded(img: torch.Tensor, plan: DecodePlan, fills: list[tuple[int, ...]]) -> torch.Tensor:
    """The output of a plan with a :class:`~fastprep.transforms._plan.PadMap`: each pixel read
    by index from ``img`` (the decoded window) or, in a constant border, that stage's fill."""
    pad = plan.pad
    assert pad is not None
    (h, w), (oy, ox), (out_h, out_w) = pad.image, pad.origin, plan.size
    rows = torch.tensor(axis_map(h, pad.stages, 0, oy, out_h), dtype=torch.int64)
    cols = torch.tensor(axis_map(w, pad.stages, 1, ox, out_w), dtype=torch.int64)
    top, left = plan.window[0], plan.window[1]
    out = img[:, (rows - top).clamp(min=0)][:, :, (cols - left).clamp(min=0)]
    # the outermost constant stage either coordinate lies in (-1: none)
    stage = torch.maximum(torch.where(rows < 0, -rows - 1, -1)[:, None], torch.where(cols < 0, -cols - 1, -1)[None, :])
    for k, fill in enumerate(fills):
        out[:, stage == k] = torch.tensor(fill, dtype=torch.uint8)[:, None]
    return out


def _filled(values: tuple[int, ...], height: int, width: int) -> torch.Tensor:
    """A ``[len(values), height, width]`` uint8 image, channel ``c`` all ``values[c]``."""
    out = torch.empty((len(values), height, width), dtype=torch.uint8)
    for c, v in enumerate(values):
        out[c] = v
    return out


# ---------------------------------------------------------------------------------------
# base class


class _DecodeTransform(v2.Transform):
    """A v2 transform whose input is an encoded JPEG: ``make_params`` reads the header and
    draws the window, ``transform`` decodes it."""

    def _init_decode(self, mode: Mode, max_pixels: int, strict: bool, max_scans: int | None) -> None:
        _checks.mode_name(mode)  # validate early
        self.mode = mode
        self.max_pixels = _checks.max_pixels(max_pixels)
        self.strict = bool(strict)
        self.max_scans = _checks.optional_max_scans(max_scans)

    def _io_kwargs(self, num: int = 8) -> dict[str, Any]:
        kw: dict[str, Any] = {"max_pixels": self.max_pixels, "strict": self.strict}
        if self.max_scans is not None:
            kw["max_scans"] = self.max_scans
        if num != 8:
            kw["scale"] = (num, 8)
        return kw

    def _needs_transform_list(self, flat_inputs: list[Any]) -> list[bool]:
        # The first candidate entry is the image; everything after it passes through.
        out, found = [], False
        for x in flat_inputs:
            hit = not found and _is_candidate(x)
            found = found or hit
            out.append(hit)
        if not found:
            got = _describe_input(flat_inputs[0]) if len(flat_inputs) == 1 else \
                "a sample with no path, bytes or tensor in it"
            raise TypeError(f"{type(self).__name__} {_ENCODED_HELP}; got {got}")
        return out

    def forward(self, *inputs: Any) -> Any:
        """Decode the encoded image in ``inputs`` (one image, or a structure such as
        ``(image, label)`` or a dict); other entries pass through unchanged."""
        if len(inputs) == 1 and not isinstance(inputs[0], (tuple, list, dict)):
            x = inputs[0]
            return self.transform(x, self.make_params([x]))
        return super().forward(*inputs)

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        data, path = _encoded(flat_inputs[0], type(self).__name__)
        with _file_named(path):
            info = fio.jpeg_info(data)
        params = self._draw(info)
        params.update(data=data, path=path, info=info)
        return params

    def transform(self, inpt: Any, params: dict[str, Any]) -> torch.Tensor:
        with _file_named(params["path"]):
            return self._decode(params["data"], params["info"], params)

    def _draw(self, info: fio.JpegInfo) -> dict[str, Any]:
        raise NotImplementedError

    def decode_plan(self, info: fio.JpegInfo, params: dict[str, Any]) -> DecodePlan:
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

    def stage_fills(self, channels: int, stages: Sequence[PadStage]) -> list[tuple[int, ...]]:
        """Per stage of a :class:`~fastprep.transforms._plan.PadMap`, the value of its constant
        border in each of ``channels`` channels."""
        return [_pad_values(channels, self.mode, tuple(st.fill)) if st.fill else (0,) * channels for st in stages]

    def _decode(self, data: torch.Tensor, info: fio.JpegInfo, params: dict[str, Any]) -> torch.Tensor:
        return self._run_plan(data, self.decode_plan(info, params))

    def _run_plan(self, data: torch.Tensor, plan: DecodePlan) -> torch.Tensor:
        """Decode, resize and pad as ``plan`` says."""
        kw = self._io_kwargs(plan.num)
        r = plan.resize
        top, left, height, width = plan.window
        if plan.pad is not None:
            img = fio.decode_jpeg_roi(data, top, left, height, width, self.mode, **kw)
            return _read_padded(img, plan, self.stage_fills(img.shape[0], plan.pad.stages))
        if r is None:
            img = fio.decode_jpeg_roi(data, top, left, height, width, self.mode, **kw)
        else:
            # Interleaved memory, which torch's uint8 resize reads directly (planar input
            # would have to be interleaved first).
            img = fio.decode_jpeg_roi(data, top, left, height, width, self.mode, channels_last=True, **kw)
            img = resize_window(img, r.full_in, r.in_offset, r.full_out, r.out_window, scale=r.scale,
                                 antialias=r.antialias, hflip=r.hflip, interpolation=r.interpolation)
        if plan.offset == (0, 0) and tuple(img.shape[1:]) == tuple(plan.size):
            return img
        out = _filled(self.padding_values(img.shape[0]), *plan.size)
        if plan.offset is not None:
            oy, ox = plan.offset
            out[:, oy:oy + img.shape[1], ox:ox + img.shape[2]] = img
        return out

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
        max_scans: refuse files with more scans than this (``None``: fastprep.io's default)."""


# ---------------------------------------------------------------------------------------
# crops


class DecodeRandomCrop(_DecodeTransform):
    """Decode a random ``size`` crop of a JPEG, drawn as ``torchvision.transforms.v2.RandomCrop``.

    The window is drawn from torch's default RNG with the same calls, in the same order, as
    ``RandomCrop(size, padding, pad_if_needed, fill)`` on the decoded image, so for the same
    seed the output equals ``RandomCrop(...)(decode_jpeg(data))``. Only the window is decoded.

    Args:
        size: output ``(height, width)``, or an int for a square crop.
        padding: optional padding on each border (int, or 2 or 4 ints as in torchvision).
        pad_if_needed: pad an image smaller than ``size`` (as torchvision does) instead of
            raising ``ValueError``.
        fill: gray level of padded pixels (0-255); in ``mode="YCbCr"`` padding is its
            YCbCr, ``(fill, 128, 128)``. A tuple: each channel's value (0-255) in any mode.
        {io}

    Output: uint8 tensor ``[C, height, width]``.
    """

    def __init__(self, size: Size, padding: int | Sequence[int] | None = None, pad_if_needed: bool = False,
                 fill: int | Sequence[int] = 0, mode: Mode = "RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS,
                 strict: bool = False, max_scans: int | None = None) -> None:
        super().__init__()
        self.size = _checks.size_pair(size)
        self.padding = padding
        self._pad = _checks.padding_ltrb(padding)
        self.pad_if_needed = bool(pad_if_needed)
        self.fill = _checks.pad_fill(fill)
        self._init_decode(mode, max_pixels, strict, max_scans)

    def get_params(self, info: fio.JpegInfo) -> tuple[Window, Window]:
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
        # As v2.RandomCrop: an offset is drawn only along a side longer than the crop, so a
        # crop as tall (or as wide) as the image consumes one draw fewer.
        i = int(torch.randint(0, h - th + 1, size=(1,)).item()) if h > th else 0
        j = int(torch.randint(0, w - tw + 1, size=(1,)).item()) if w > tw else 0
        return (pl, pt, pr, pb), (i, j, th, tw)

    def _draw(self, info: fio.JpegInfo) -> dict[str, Any]:
        pad, window = self.get_params(info)
        return {"pad": pad, "window": window}

    def decode_plan(self, info: fio.JpegInfo, params: dict[str, Any]) -> DecodePlan:
        return padded_plan(info.height, info.width, params["window"], params["pad"])

    def padding_values(self, channels: int) -> tuple[int, ...]:
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

    def __init__(self, size: Size, mode: Mode = "RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS,
                 strict: bool = False, max_scans: int | None = None) -> None:
        super().__init__()
        self.size = _checks.size_pair(size)
        self._init_decode(mode, max_pixels, strict, max_scans)

    def get_params(self, info: fio.JpegInfo) -> tuple[Window, Window]:
        """``(pad_ltrb, (top, left, height, width))`` for an image with header ``info``, as
        ``torchvision.transforms.CenterCrop`` computes them (no randomness)."""
        return center_crop(info.height, info.width, self.size)

    def _draw(self, info: fio.JpegInfo) -> dict[str, Any]:
        pad, window = self.get_params(info)
        return {"pad": pad, "window": window}

    def decode_plan(self, info: fio.JpegInfo, params: dict[str, Any]) -> DecodePlan:
        return padded_plan(info.height, info.width, params["window"], params["pad"])

    def extra_repr(self) -> str:
        return f"size={self.size}, {self._io_repr()}"


class PaddedCrop(_DecodeTransform):
    """torchvision's ``Pad`` steps, then its ``RandomCrop`` or ``CenterCrop`` (v1 or v2), on
    a decoded image, as one window decode: what the compiler makes of such a geometry
    (:mod:`fastprep.transforms._compile`). Every padding mode (constant, edge, reflect,
    symmetric) is read by index from the decoded window; only the image pixels the crop
    reads are decoded.

    Draws: v2 ``RandomCrop``'s (``crop="v2"``: one padding, then an offset along each side
    longer than the crop), v1 ``RandomCrop``'s (``"v1"``: its padding, then ``pad_if_needed``'s,
    then no draw when the padded image is the crop's size, else both offsets) or none
    (``"center"``, which pads with zeros as ``CenterCrop``). Where torchvision raises for an
    image's size (a crop larger than the padded image; reflect padding not shorter than the
    side, symmetric padding longer), ``reference`` -- the torchvision steps -- is called on a
    blank image of that size, so the error is torchvision's own.

    Args:
        pads: the ``Pad`` steps, as :class:`~fastprep.transforms._plan.PadStage`, in order.
        crop: ``"v2"``, ``"v1"`` or ``"center"``.
        size: the crop's ``(height, width)``.
        padding: the crop's own ``(left, top, right, bottom)`` padding, or ``None``.
        pad_if_needed, padding_mode: the crop's.
        fill: the crop's constant padding, one value per channel.
        reference: the torchvision steps this replaces.
        channels: channels of the decoded image.
        {io}
    """

    def __init__(self, pads: Sequence[PadStage], crop: str, size: Size, padding: Window | None, pad_if_needed: bool,
                 padding_mode: str, fill: tuple[int, ...], reference: Any, channels: int, mode: Mode = "RGB", *,
                 max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False, max_scans: int | None = None) -> None:
        super().__init__()
        if crop not in ("v1", "v2", "center"):
            raise ValueError(f"crop must be 'v1', 'v2' or 'center', got {crop!r}")
        self.pads, self.crop = tuple(pads), crop
        self.size = _checks.size_pair(size)
        self.padding = padding
        self.pad_if_needed, self.padding_mode, self.fill = bool(pad_if_needed), padding_mode, tuple(fill)
        self.reference, self.channels = reference, int(channels)
        constants = [st.fill for st in self.pads if st.mode == "constant"]
        if crop == "center":
            constants.append((0,) * self.channels)
        elif padding_mode == "constant":
            constants.insert(0, self.fill)
        #: the fill of plain constant padding (plans whose stages all use it need no index map)
        self._pad_fill = tuple(constants[0]) if constants else (0,) * self.channels
        self._init_decode(mode, max_pixels, strict, max_scans)

    def _refuse(self, height: int, width: int) -> None:
        """Raise torchvision's error for an ``height x width`` image."""
        self.reference(torch.zeros((self.channels, height, width), dtype=torch.uint8))
        raise RuntimeError(f"fastprep: torchvision did not raise for a {height}x{width} image; please report this")

    def _crop_stage(self, stages: list[PadStage], height: int, width: int) -> tuple[int, int]:
        """Append the crop's padding to ``stages`` (padded ``height x width`` so far); returns the
        padded size."""
        th, tw = self.size
        if self.crop == "center":
            pad, _ = center_crop(height, width, self.size)
            if any(pad):
                stages.append(PadStage("constant", pad, (0,) * self.channels))
            return height + pad[1] + pad[3], width + pad[0] + pad[2]
        left, top, right, bottom = self.padding or (0, 0, 0, 0)
        if self.crop == "v1" and any((left, top, right, bottom)):  # v1 pads in steps: its padding first
            stages.append(PadStage(self.padding_mode, (left, top, right, bottom), self.fill))
            height, width = height + top + bottom, width + left + right
            left = top = right = bottom = 0
        else:
            height, width = height + top + bottom, width + left + right
        dh = th - height if self.pad_if_needed and height < th else 0
        dw = tw - width if self.pad_if_needed and width < tw else 0
        left, top, right, bottom = left + dw, top + dh, right + dw, bottom + dh
        if any((left, top, right, bottom)):
            stages.append(PadStage(self.padding_mode, (left, top, right, bottom), self.fill))
        return height + 2 * dh, width + 2 * dw

    def _draw(self, info: fio.JpegInfo) -> dict[str, Any]:
        stages = list(self.pads)
        height, width = self._crop_stage(stages, *padded_size(info.height, info.width, stages))
        th, tw = self.size
        if height < th or width < tw or pad_error(info.height, info.width, stages):
            self._refuse(info.height, info.width)
        if self.crop == "center":
            top, left = int(round((height - th) / 2.0)), int(round((width - tw) / 2.0))
        elif self.crop == "v2":  # an offset only along a side longer than the crop
            top = int(torch.randint(0, height - th + 1, size=()).item()) if height > th else 0
            left = int(torch.randint(0, width - tw + 1, size=()).item()) if width > tw else 0
        elif height == th and width == tw:  # v1: no draw for a crop of the whole image
            top = left = 0
        else:
            top = int(torch.randint(0, height - th + 1, size=(1,)).item())
            left = int(torch.randint(0, width - tw + 1, size=(1,)).item())
        return {"stages": tuple(stages), "window": (top, left, th, tw)}

    def decode_plan(self, info: fio.JpegInfo, params: dict[str, Any]) -> DecodePlan:
        stages, window = params["stages"], params["window"]
        if all(st.mode == "constant" and tuple(st.fill) == self._pad_fill for st in stages):
            ltrb = tuple(sum(st.ltrb[e] for st in stages) for e in range(4))
            return padded_plan(info.height, info.width, window, ltrb)
        return mapped_plan(info.height, info.width, stages, window)

    def padding_values(self, channels: int) -> tuple[int, ...]:
        return _pad_values(channels, self.mode, self._pad_fill)

    def extra_repr(self) -> str:
        return (f"pads={self.pads}, crop={self.crop!r}, size={self.size}, padding={self.padding}, "
                f"pad_if_needed={self.pad_if_needed}, padding_mode={self.padding_mode!r}, fill={self.fill}, "
                f"{self._io_repr()}")


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
        interpolation: the resize filter, a ``v2.InterpolationMode`` value: ``"bilinear"``
            (default), ``"bicubic"``, ``"nearest"`` or ``"nearest-exact"`` (torch's uint8
            kernels, as v2 uses them).
        {io}

    Output: uint8 tensor ``[C, height, width]``.
    """

    def __init__(self, size: Size, scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0), antialias: bool = True,
                 dct_scaling: bool = True, flip_p: float = 0.0, mode: Mode = "RGB", *,
                 max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False, max_scans: int | None = None,
                 interpolation: str = "bilinear") -> None:
        super().__init__()
        self.interpolation = _interpolation(interpolation)
        self.size = _checks.size_pair(size)
        self.scale = _checks.range_pair(scale, "scale", low_open=0.0, high=1.0)
        self.ratio = _checks.range_pair(ratio, "ratio", low_open=0.0)
        self.antialias = bool(antialias)
        self.dct_scaling = bool(dct_scaling)
        self.flip_p = _checks.probability(flip_p, "flip_p")
        self._init_decode(mode, max_pixels, strict, max_scans)
        # The same float32 tensor v2 builds, so the uniform_ bounds are the same numbers.
        self._log_ratio = torch.log(torch.tensor(self.ratio))

    def get_params(self, height: int, width: int) -> Window:
        """Draw ``(top, left, h, w)`` for an ``height x width`` image, with the torch RNG calls
        of ``torchvision.transforms.v2.RandomResizedCrop.make_params``."""
        area = height * width
        lo, hi = self._log_ratio[0], self._log_ratio[1]
        for _attempt in range(10):
            target_area = area * torch.empty(1).uniform_(self.scale[0], self.scale[1]).item()
            aspect = torch.exp(torch.empty(1).uniform_(lo, hi)).item()  # type: ignore[arg-type]
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, size=(1,)).item())
                left = int(torch.randint(0, width - w + 1, size=(1,)).item())
                return top, left, h, w
        return centered_ratio_window(height, width, self.ratio)  # no draw fitted

    def _draw(self, info: fio.JpegInfo) -> dict[str, Any]:
        window = self.get_params(info.height, info.width)
        flip = bool(torch.rand(1) < self.flip_p) if self.flip_p > 0 else False
        if window[2] <= 0 or window[3] <= 0:  # torchvision's resize raises on the empty crop too
            raise ValueError(f"RandomResizedCrop(ratio={self.ratio}): no draw fitted the {info.height}x{info.width} "
                             f"image and its centred fallback window is empty ({window[2]}x{window[3]})")
        return {"window": window, "flip": flip}

    def decode_plan(self, info: fio.JpegInfo, params: dict[str, Any]) -> DecodePlan:
        window = params["window"]
        num = 8
        if self.dct_scaling:
            num, window = plan_scaled_window(info.height, info.width, window, self.size)
        h, w = window[2], window[3]
        resize = ResizeStep((h, w), (0, 0), self.size, (0, 0) + self.size, None, self.antialias, params["flip"],
                            self.interpolation)
        return DecodePlan(num, tuple(window), resize, self.size, (0, 0))

    def extra_repr(self) -> str:
        return (f"size={self.size}, scale={self.scale}, ratio={self.ratio}, antialias={self.antialias}, "
                f"interpolation={self.interpolation!r}, dct_scaling={self.dct_scaling}, flip_p={self.flip_p}, "
                f"{self._io_repr()}")


# ---------------------------------------------------------------------------------------
# evaluation recipe


class _ResizeBase(_DecodeTransform):
    """The decode transforms that resize the whole image (then maybe crop it)."""

    def _init_resize(self, size: Size, max_size: int | None, antialias: bool, dct_scaling: bool,
                     interpolation: str) -> None:
        self.interpolation = _interpolation(interpolation)
        self._size = _checks.resize_size(size, max_size)
        self.max_size = max_size
        self.antialias = bool(antialias)
        self.dct_scaling = bool(dct_scaling)

    def _resized_plan(self, info: fio.JpegInfo, out_hw: tuple[int, int], rows: tuple[int, int],
                      cols: tuple[int, int], size: tuple[int, int], offset: tuple[int, int]) -> DecodePlan:
        """Plan for rows ``[rows[0], rows[1])`` and columns ``[cols[0], cols[1])`` of the image
        resized to ``out_hw``, decoding (DCT-scaled when allowed) only the pixels their filter
        reads, placed at ``offset`` in a ``size`` output."""
        num = smallest_scale(info.height, info.width, out_hw[0], out_hw[1]) if self.dct_scaling else 8
        window, resize = resized_plan((info.height, info.width), num, out_hw, rows, cols, self.antialias,
                                      self.interpolation)
        return DecodePlan(num, window, resize, tuple(size), tuple(offset))


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
        interpolation: as :class:`DecodeRandomResizedCrop`.
        {io}

    Output: uint8 tensor ``[C, h, w]``.
    """

    def __init__(self, size: Size, max_size: int | None = None, antialias: bool = True, dct_scaling: bool = True,
                 mode: Mode = "RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS, strict: bool = False,
                 max_scans: int | None = None, interpolation: str = "bilinear") -> None:
        super().__init__()
        self._init_resize(size, max_size, antialias, dct_scaling, interpolation)
        self.size: int | tuple[int, ...] = self._size if len(self._size) == 2 else self._size[0]
        self._init_decode(mode, max_pixels, strict, max_scans)

    def _draw(self, info: fio.JpegInfo) -> dict[str, Any]:
        return {"out": resized_size(info.height, info.width, self._size, self.max_size)}

    def decode_plan(self, info: fio.JpegInfo, params: dict[str, Any]) -> DecodePlan:
        oh, ow = params["out"]
        return self._resized_plan(info, (oh, ow), (0, oh), (0, ow), (oh, ow), (0, 0))

    def extra_repr(self) -> str:
        return (f"size={self.size}, max_size={self.max_size}, antialias={self.antialias}, "
                f"interpolation={self.interpolation!r}, "
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
        antialias, dct_scaling, interpolation: as :class:`DecodeResize`.
        {io}

    Output: uint8 tensor ``[C, crop_h, crop_w]``.
    """

    def __init__(self, resize_size: Size = 256, crop_size: Size = 224, antialias: bool = True,
                 dct_scaling: bool = True, mode: Mode = "RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS,
                 strict: bool = False, max_scans: int | None = None, interpolation: str = "bilinear") -> None:
        super().__init__()
        self._init_resize(resize_size, None, antialias, dct_scaling, interpolation)
        self.resize_size: int | tuple[int, ...] = self._size if len(self._size) == 2 else self._size[0]
        self.crop_size = _checks.size_pair(crop_size, "crop_size")
        self._init_decode(mode, max_pixels, strict, max_scans)

    def _draw(self, info: fio.JpegInfo) -> dict[str, Any]:
        out = resized_size(info.height, info.width, self._size, None)
        pad, window = center_crop(out[0], out[1], self.crop_size)
        return {"out": out, "pad": pad, "window": window}

    def decode_plan(self, info: fio.JpegInfo, params: dict[str, Any]) -> DecodePlan:
        (oh, ow), pad, (top, left, ch, cw) = params["out"], params["pad"], params["window"]
        # Crop window in resized-image coordinates, clipped to the resized image (the centred
        # crop always overlaps it).
        y0, x0 = max(top - pad[1], 0), max(left - pad[0], 0)
        y1, x1 = min(top - pad[1] + ch, oh), min(left - pad[0] + cw, ow)
        return self._resized_plan(info, (oh, ow), (y0, y1), (x0, x1), (ch, cw),
                                  (y0 - (top - pad[1]), x0 - (left - pad[0])))

    def padding_values(self, channels: int) -> tuple[int, ...]:
        return (0,) * channels  # v2 CenterCrop pads with zeros, in every mode

    def extra_repr(self) -> str:
        return (f"resize_size={self.resize_size}, crop_size={self.crop_size}, antialias={self.antialias}, "
                f"interpolation={self.interpolation!r}, "
                f"dct_scaling={self.dct_scaling}, {self._io_repr()}")


# ---------------------------------------------------------------------------------------
# a pipeline on decoded images


class OnDecoded(v2.Transform):
    """Decode the whole JPEG (:func:`fastprep.io.decode_jpeg`), then apply ``pipeline``: a
    pipeline on decoded images, such as an unchanged torchvision v2 recipe.

    This is what ``make_loader(transform=...)`` makes of a pipeline on decoded images; the
    processes engine calls it per sample, and the threads engine compiles ``transform`` into
    native steps that give the same bits (``docs/augment.md``). ``fastprep.io.decode_jpeg``
    gives the bits of ``torchvision.io.decode_jpeg``.

    Args:
        pipeline: a callable on a uint8 ``[C, H, W]`` image.
        {io}

    Output: whatever ``pipeline`` returns.
    """

    def __init__(self, pipeline: Any, mode: Mode = "RGB", *, max_pixels: int = fio.DEFAULT_MAX_PIXELS,
                 strict: bool = False, max_scans: int | None = None) -> None:
        super().__init__()
        if not callable(pipeline):
            raise TypeError(f"pipeline must be callable, got {type(pipeline).__name__}")
        self.pipeline = pipeline
        _checks.mode_name(mode)
        self.mode = mode
        self.max_pixels = _checks.max_pixels(max_pixels)
        self.strict = bool(strict)
        self.max_scans = _checks.optional_max_scans(max_scans)

    def forward(self, *inputs: Any) -> Any:
        if len(inputs) != 1:
            raise TypeError(f"OnDecoded takes one encoded image, got {len(inputs)} inputs")
        data, path = _encoded(inputs[0], type(self).__name__)
        kw: dict[str, Any] = {"max_pixels": self.max_pixels, "strict": self.strict}
        if self.max_scans is not None:
            kw["max_scans"] = self.max_scans
        with _file_named(path):
            image = fio.decode_jpeg(data, self.mode, **kw)
        return self.pipeline(image)

    def decoded_equivalent(self) -> Any:
        """The pipeline on a decoded image (the full-decode fallback of a dataset applies it to
        files fastprep's JPEG decode does not take)."""
        return self.pipeline

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


_DECODE_TYPES = (DecodeRandomCrop, DecodeCenterCrop, DecodeRandomResizedCrop, DecodeResize, DecodeResizeCenterCrop)


def is_decode_transform(transform: Any) -> bool:
    """Whether ``transform`` is one of fastprep's window decode transforms (exact types)."""
    return type(transform) in _DECODE_TYPES


for _cls in (*_DECODE_TYPES, OnDecoded, PaddedCrop):
    _cls.__doc__ = (_cls.__doc__ or "").replace("{io}", _IO_ARGS_DOC)
del _cls
