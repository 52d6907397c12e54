"""Integer geometry of the decode transforms: which DCT scale to decode at, which window of
that decode to read, and where the resize puts it. Pure functions of sizes and windows: no
randomness, no torch (the transforms draw their windows, then ask here what to decode).

Sizes are ``(height, width)``, windows ``(top, left, height, width)``, in pixels.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "DCT_SCALES",
    "INTERPOLATIONS",
    "DecodePlan",
    "ResizeStep",
    "center_crop",
    "centered_ratio_window",
    "padded_plan",
    "plan_scaled_window",
    "resized_plan",
    "resized_size",
    "smallest_scale",
]

#: DCT scales tried, smallest first. libjpeg-turbo decodes at num/8 for any num in 1..8,
#: but only 1/8, 2/8, 4/8 (and 8/8) have SIMD inverse DCTs: measured on 12 MP windows, 5/8,
#: 6/8 and 7/8 decode slower than 8/8 and 3/8 no faster than 4/8.
DCT_SCALES = (1, 2, 4)


class ResizeStep(NamedTuple):
    """The resize of a decoded window: pixels ``out_window = (top, left, h, w)`` of resizing
    a virtual ``full_in = (H, W)`` image, of which the decoded window holds the pixels from
    ``in_offset = (top, left)`` on, to ``full_out = (h, w)`` (the arguments of
    :func:`fastprep.resize.resize_window`). ``scale``: ``(sh, sw)`` output pixels per input
    pixel, ``None`` for ``full_out / full_in``; ``hflip``: the result mirrored;
    ``interpolation``: the filter (one of :data:`INTERPOLATIONS`)."""

    full_in: tuple
    in_offset: tuple
    full_out: tuple
    out_window: tuple
    scale: tuple | None
    antialias: bool
    hflip: bool
    interpolation: str = "bilinear"


#: The resize filters, by torchvision's ``InterpolationMode`` value, in the order of
#: ``fastprep::resize_aa``'s ``filter`` argument.
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "nearest-exact")


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


def _scaled(length: int, num: int) -> int:
    """libjpeg's size of ``length`` pixels decoded at ``num/8``: ``ceil(length * num / 8)``
    (:func:`fastprep.io.scaled_size`, whose arguments are checked, for one side)."""
    return (length * num + 7) // 8


def _rounded(v_times_num: int) -> int:
    """``round(v * num / 8)``, halves up, from the integer ``v * num``."""
    return (v_times_num + 4) // 8


def plan_scaled_window(height: int, width: int, window: tuple[int, int, int, int], size: tuple[int, int],
                       scales: tuple[int, ...] = DCT_SCALES) -> tuple[int, tuple[int, int, int, int]]:
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
        hs, ws = _scaled(height, num), _scaled(width, num)
        y0, x0 = _rounded(top * num), _rounded(left * num)
        y1, x1 = min(_rounded((top + h) * num), hs), min(_rounded((left + w) * num), ws)
        if y1 - y0 >= th and x1 - x0 >= tw:
            return num, (y0, x0, y1 - y0, x1 - x0)
    return 8, (top, left, h, w)


def smallest_scale(height: int, width: int, out_h: int, out_w: int, scales: tuple[int, ...] = DCT_SCALES) -> int:
    """Smallest ``num`` whose ``num/8`` decode (real extent) is at least ``out`` in both
    dimensions; 8 when none is."""
    for num in scales:
        if height * num >= 8 * out_h and width * num >= 8 * out_w:
            return num
    return 8


def _filter_support(scale: float, antialias: bool, interpolation: str) -> tuple[float, float]:
    """``(step, support)``: input pixels per output pixel, and the half-width in input pixels
    of what one output pixel reads (bicubic's filter is twice bilinear's; nearest reads
    ``floor(i * step)``, up to half a step left of the centre)."""
    step = 1.0 / scale
    half = 2.0 if interpolation == "bicubic" else 1.0
    return step, half * (max(step, 1.0) if antialias or interpolation.startswith("nearest") else 1.0)


def _filter_start(out_start: int, scale: float, antialias: bool, interpolation: str = "bilinear") -> int:
    """First input pixel that output pixels from ``out_start`` on read, for torch's resize
    with ``scale`` output pixels per input pixel (less two for rounding)."""
    step, support = _filter_support(scale, antialias, interpolation)
    center = step * (out_start + 0.5)
    return max(int(center - support + 0.5) - 2, 0)


def _filter_end(out_end: int, scale: float, antialias: bool, in_size: int, interpolation: str = "bilinear") -> int:
    """One past the last input pixel that output pixels ``[0, out_end)`` read, for torch's
    resize with ``scale`` output pixels per input pixel (plus two for rounding)."""
    step, support = _filter_support(scale, antialias, interpolation)
    center = step * (out_end - 0.5)
    return min(int(center + support + 0.5) + 2, in_size)


def resized_size(h: int, w: int, size: tuple[int, ...], max_size: int | None) -> tuple[int, int]:
    """Output ``(h, w)`` of ``torchvision.transforms.v2.Resize(size, max_size=max_size)`` on
    an ``h x w`` image; ``size`` is ``(short_side,)`` or ``(height, width)``."""
    if len(size) == 2:
        return size[0], size[1]
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size[0], int(size[0] * long / short)
    if max_size is not None and new_long > max_size:
        new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if w <= h else (new_short, new_long)


def center_crop(h: int, w: int, size: tuple[int, int]) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """``(pad_ltrb, (top, left, th, tw))`` of torchvision's CenterCrop on an ``h x w`` image;
    the window is in the coordinates of the zero-padded image."""
    th, tw = size
    pad = (0, 0, 0, 0)
    if th > h or tw > w:
        pad = ((tw - w) // 2 if tw > w else 0, (th - h) // 2 if th > h else 0,
               (tw - w + 1) // 2 if tw > w else 0, (th - h + 1) // 2 if th > h else 0)
        h, w = h + pad[1] + pad[3], w + pad[0] + pad[2]
    return pad, (int(round((h - th) / 2.0)), int(round((w - tw) / 2.0)), th, tw)


def centered_ratio_window(height: int, width: int, ratio: tuple[float, float]) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of v2 RandomResizedCrop when none of its draws fits: the largest
    centred window whose aspect ratio (width / height) is within ``ratio``."""
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def padded_plan(height: int, width: int, window: tuple[int, int, int, int],
                pad_ltrb: tuple[int, int, int, int]) -> DecodePlan:
    """Plan for ``window = (top, left, h, w)`` of an ``height x width`` image padded by
    ``pad_ltrb``: only the part that overlaps the image is decoded, at full scale."""
    top, left, out_h, out_w = window
    pl, pt = pad_ltrb[0], pad_ltrb[1]
    # Window in image coordinates, clipped to the image.
    y0, x0 = max(top - pt, 0), max(left - pl, 0)
    y1, x1 = min(top - pt + out_h, height), min(left - pl + out_w, width)
    if y1 <= y0 or x1 <= x0:  # all padding: decode one pixel only for the channel count
        return DecodePlan(8, (0, 0, 1, 1), None, (out_h, out_w), None)
    return DecodePlan(8, (y0, x0, y1 - y0, x1 - x0), None, (out_h, out_w), (y0 - (top - pt), x0 - (left - pl)))


def resized_plan(image: tuple[int, int], num: int, out_hw: tuple[int, int], rows: tuple[int, int],
                 cols: tuple[int, int], antialias: bool,
                 interpolation: str = "bilinear") -> tuple[tuple[int, int, int, int], ResizeStep]:
    """The window to decode and its resize, for rows ``[rows[0], rows[1])`` and columns
    ``[cols[0], cols[1])`` of an ``image = (H, W)`` image resized to ``out_hw``, decoded at
    ``num/8``: only the pixels the filter of those rows and columns reads are decoded, and
    the resize runs on the grid of the whole image at ``num/8``.

    Returns:
        ``(window, resize)``: the window in pixels of the ``num/8`` decode and its
        :class:`ResizeStep` (no flip).
    """
    H, W = image
    oh, ow = out_hw
    (oy0, oy1), (ox0, ox1) = rows, cols
    hs, ws = (_scaled(H, num), _scaled(W, num)) if num != 8 else (H, W)
    # Output pixels per pixel of the decode, on the grid of the whole image at num/8.
    sh, sw = oh * 8 / (H * num), ow * 8 / (W * num)
    y0, y1 = _filter_start(oy0, sh, antialias, interpolation), _filter_end(oy1, sh, antialias, hs, interpolation)
    x0, x1 = _filter_start(ox0, sw, antialias, interpolation), _filter_end(ox1, sw, antialias, ws, interpolation)
    # The window's rows/cols of the full image's resize grid, from the decoded window
    # alone (fastprep::resize_aa); at full scale the default in/out filter scale is v2's.
    resize = ResizeStep((hs, ws), (y0, x0), (oh, ow), (oy0, ox0, oy1 - oy0, ox1 - ox0),
                        None if num == 8 else (sh, sw), antialias, False, interpolation)
    return (y0, x0, y1 - y0, x1 - x0), resize
