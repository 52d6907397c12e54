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
    "PAD_MODES",
    "PadMap",
    "PadStage",
    "ResizeStep",
    "axis_map",
    "axis_span",
    "center_crop",
    "centered_ratio_window",
    "mapped_plan",
    "pad_error",
    "padded_plan",
    "padded_size",
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


#: torchvision's padding modes, in the order of their numbers in csrc/batch/plan.h (SamplePlan.pad_mode).
PAD_MODES = ("constant", "edge", "reflect", "symmetric")


class PadStage(NamedTuple):
    """One ``pad`` of torchvision: ``ltrb = (left, top, right, bottom)`` pixels added by
    ``mode`` (one of :data:`PAD_MODES`); ``fill``: a constant stage's value per channel."""

    mode: str
    ltrb: tuple
    fill: tuple = ()


class PadMap(NamedTuple):
    """Where each output pixel of a padded crop comes from: the ``image = (h, w)`` padded by
    ``stages`` (innermost first, each padding the previous one's output), then cut at
    ``origin = (top, left)`` of the last stage's output. :func:`axis_map` gives the rows and
    columns."""

    image: tuple
    stages: tuple
    origin: tuple


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
        pad: ``None``, or the :class:`PadMap` of an output whose every pixel is read by
            index from the padded image (edge, reflect and symmetric padding, or stages
            with other fills): then ``window`` covers every image pixel the map reads,
            ``resize`` is ``None`` and ``offset`` ``(0, 0)``.
    """

    num: int
    window: tuple
    resize: ResizeStep | None
    size: tuple
    offset: tuple | None
    pad: PadMap | None = None


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


def padded_size(height: int, width: int, stages) -> tuple[int, int]:
    """``(h, w)`` of an ``height x width`` image after ``stages`` (:class:`PadStage`)."""
    for st in stages:
        left, top, right, bottom = st.ltrb
        height, width = height + top + bottom, width + left + right
    return height, width


def pad_error(height: int, width: int, stages) -> bool:
    """Whether torch refuses ``stages`` on an ``height x width`` image: reflect padding must
    be shorter than the side it pads (torch's reflection pad), symmetric padding at most as
    long (torchvision indexes the mirrored pixels); checked on each stage's input."""
    for st in stages:
        left, top, right, bottom = st.ltrb
        if st.mode == "reflect" and (max(left, right) >= width or max(top, bottom) >= height):
            return True
        if st.mode == "symmetric" and (max(left, right) > width or max(top, bottom) > height):
            return True
        height, width = height + top + bottom, width + left + right
    return False


def axis_map(length: int, stages: tuple, axis: int, start: int, count: int) -> list[int]:
    """The source of ``count`` consecutive pixels, from ``start`` on, along ``axis`` (0: rows,
    1: columns) of an image ``length`` pixels long padded by ``stages``: the image's index,
    or ``-(k + 1)`` for a pixel of stage ``k``'s constant border. Assumes not
    :func:`pad_error`."""
    before = 1 - axis  # ltrb's top (rows) or left (columns); + 2: bottom or right
    lengths = [length]
    for st in stages:
        lengths.append(lengths[-1] + st.ltrb[before] + st.ltrb[before + 2])
    out = []
    for t in range(start, start + count):
        u = t
        for k in range(len(stages) - 1, -1, -1):
            st, n = stages[k], lengths[k]
            u -= st.ltrb[before]
            if 0 <= u < n:
                continue
            if st.mode == "constant":
                u = -(k + 1)
                break
            if st.mode == "edge":
                u = 0 if u < 0 else n - 1
            elif st.mode == "reflect":
                u = -u if u < 0 else 2 * (n - 1) - u
            else:  # symmetric
                u = -u - 1 if u < 0 else 2 * n - 1 - u
        out.append(u)
    return out


def _folded(u: int, n: int, mode: str) -> int:
    """Pixel ``u`` of a border of an ``n``-pixel side padded by ``mode`` (not constant)."""
    if mode == "edge":
        return 0 if u < 0 else n - 1
    if mode == "reflect":
        return -u if u < 0 else 2 * (n - 1) - u
    return -u - 1 if u < 0 else 2 * n - 1 - u


def axis_span(length: int, stages: tuple, axis: int, start: int, count: int) -> tuple[int, int] | None:
    """``(first, last)`` image index among :func:`axis_map`'s sources (``None``: none), in
    O(stages): the pixels of an interval stay an interval through each stage (a mirrored or
    repeated border lands next to the side's pixels), so its two ends and the side's ends
    are enough."""
    before = 1 - axis
    lengths = [length]
    for st in stages:
        lengths.append(lengths[-1] + st.ltrb[before] + st.ltrb[before + 2])
    lo, hi = start, start + count - 1
    for k in range(len(stages) - 1, -1, -1):
        st, n = stages[k], lengths[k]
        lo, hi = lo - st.ltrb[before], hi - st.ltrb[before]
        ends = [v for v in (max(lo, 0), min(hi, n - 1)) if 0 <= v < n and lo <= v <= hi]
        if st.mode != "constant":
            ends += [_folded(v, n, st.mode) for v in (lo, hi, -1, n) if lo <= v <= hi and not 0 <= v < n]
        if not ends:
            return None
        lo, hi = min(ends), max(ends)
    return lo, hi


def mapped_plan(height: int, width: int, stages: tuple, window: tuple[int, int, int, int]) -> DecodePlan:
    """Plan for ``window = (top, left, h, w)`` of an ``height x width`` image padded by
    ``stages`` (:class:`PadStage`, innermost first), each output pixel read by index: only
    the image pixels the window reads are decoded (their bounding box)."""
    top, left, out_h, out_w = window
    rows, cols = axis_span(height, stages, 0, top, out_h), axis_span(width, stages, 1, left, out_w)
    box = (0, 0, 1, 1)  # all padding: decode one pixel only for the channel count
    if rows is not None and cols is not None:
        box = (rows[0], cols[0], rows[1] - rows[0] + 1, cols[1] - cols[0] + 1)
    return DecodePlan(8, box, None, (out_h, out_w), (0, 0), PadMap((height, width), tuple(stages), (top, left)))
