"""The built-in per-sample pipelines as one native call per batch.

A per-sample transform run by DataLoader worker processes pays, per sample, Python calls,
tensor allocations and the trip of the result through shared memory. For the built-in
decode transforms :class:`NativePipeline` splits the work in two:

* :meth:`NativePipeline.plan` (per sample, Python, cheap): reads the JPEG header and draws
  the random parameters with exactly the torch RNG calls the transform makes, reusing the
  transform's own drawing and geometry (``draw_plan``), so under
  :func:`fastprep._seeding.keyed_default_rng` a sample gets the same pixels either way;
* :meth:`NativePipeline.run` (per batch): one call of ``torch.ops.fastprep.decode_batch``
  (csrc/decode_batch.cpp), which decodes, resizes, pads and masks every sample on a pool
  of native threads, without the GIL, straight into a preallocated batch -- uint8, or
  float with :class:`fastprep.data.BatchConvert`'s conversion fused into the write.

Bad files never abort a batch: :meth:`run` returns a status per sample.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from typing import NamedTuple

import torch
from torchvision.transforms import v2

from .. import _ops  # noqa: F401  (registers torch.ops.fastprep.*)
from .. import io as fio
from .._checks import is_int
from .._kernels.coeffs import YUV_COEFFS
from .._seeding import keyed_thread_rng
from .._threads import usable_cpus
from ..functional import MASK_PROBABILITY_RESOLUTION
from ..transforms import (
    DecodeCenterCrop,
    DecodePlan,
    DecodeRandomCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
    RandomMask,
)
from ..transforms._plan import DCT_SCALES, centered_ratio_window
from .batch import BatchConvert
from .sample import SampleTransform

__all__ = ["NativePipeline", "Plan", "PlanRef", "PlannedBatch", "STATUS_ERROR", "STATUS_OK", "STATUS_WARNING"]

#: :meth:`NativePipeline.run` statuses.
STATUS_OK, STATUS_WARNING, STATUS_ERROR = 0, 1, 2

_DECODE_TRANSFORMS = (DecodeRandomCrop, DecodeCenterCrop, DecodeRandomResizedCrop, DecodeResize,
                      DecodeResizeCenterCrop)
_CHANNELS = {fio.ImageReadMode.GRAY: 1, fio.ImageReadMode.RGB: 3, fio.ImageReadMode.YCbCr: 3}
_OUT_DTYPES = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)

# Conversions of csrc/decode_batch.cpp (enum Convert).
_NO_CONVERT, _DIV255, _AFFINE, _YUV, _YUV_AFFINE, _YUV_AFFINE_FMA = range(6)


class Plan(NamedTuple):
    """One sample's work for :meth:`NativePipeline.run`, made by :meth:`NativePipeline.plan`.

    Attributes:
        row: the int64 plan row of ``torch.ops.fastprep.decode_batch`` (its columns are
            defined in csrc/decode_batch.cpp, ``enum PlanColumn``; :func:`_plan_row`
            writes them).
        scales: ``(scale_h, scale_w)`` of the resize (output pixels per input pixel; 0:
            the output size over the input size).
    """

    row: tuple
    scales: tuple


class PlannedBatch(NamedTuple):
    """The plans :meth:`NativePipeline.plan_batch` made for a batch, as the tables
    ``torch.ops.fastprep.decode_batch`` takes: ``rows`` int64 ``[N, 24]`` and ``scales``
    float64 ``[N, 2]`` (rows of samples it did not plan are unused)."""

    rows: torch.Tensor
    scales: torch.Tensor


class PlanRef(NamedTuple):
    """The plan at row ``position`` of a :class:`PlannedBatch`; :meth:`NativePipeline.run`
    takes it wherever it takes a :class:`Plan`."""

    batch: PlannedBatch
    position: int


class _HeaderSize(NamedTuple):
    """The header fields the no-draw decode transforms' plans read."""

    height: int
    width: int


# plan_batch's kinds, integer and float parameters (csrc/plan_batch.cpp: enum Kind,
# IntParam, FloatParam) and its routes (enum Route).
_KIND_NO_DRAW, _KIND_RESIZED_CROP, _KIND_RANDOM_CROP = range(3)
_ROUTE_PLANNED, _ROUTE_PYTHON, _ROUTE_ERROR = range(3)
_MASK_COLUMNS = 3  # the last columns of a plan row: mask flag, seed, numerator


def _plan_row(plan: DecodePlan, mask_seed, mask_m: int) -> Plan:
    """A :class:`Plan` from a transform's :class:`~fastprep.transforms.DecodePlan`
    and the mask's seed (``None``: no mask), in the column order of ``enum PlanColumn``."""
    top, left, height, width = plan.window
    r = plan.resize
    placed = plan.offset is not None
    if r is not None and placed:
        (oy, ox, oh, ow) = r.out_window
        resize = (1, *r.full_in, *r.in_offset, *r.full_out, oy, ox, oh, ow, int(r.antialias), int(r.hflip))
        scales = (0.0, 0.0) if r.scale is None else (float(r.scale[0]), float(r.scale[1]))
    else:
        resize = (0, 0, 0, 0, 0, 0, 0, 0, 0, height, width, 0, 0)
        scales = (0.0, 0.0)
    place = (0, 0, 0) if plan.offset is None else (1, *plan.offset)
    mask = (0, 0, 0) if mask_seed is None else (1, int(mask_seed), mask_m)
    return Plan((plan.num, top, left, height, width) + resize + place + mask, scales)


def _mode_number(mode) -> int:
    """The :class:`fastprep.io.ImageReadMode` value of a transform's (validated) ``mode``."""
    if isinstance(mode, fio.ImageReadMode):
        return int(mode)
    name = mode if isinstance(mode, str) else getattr(mode, "name", "")
    for m in fio.ImageReadMode:
        if m.name.upper() == str(name).upper():
            return int(m)
    raise ValueError(f"mode must be one of UNCHANGED, GRAY, RGB, YCbCr, got {mode!r}")


def _uint8_fill(fill, channels: int):
    """RandomMask's ``fill`` as ``channels`` uint8 values, or ``None`` where the transform
    itself would raise on a uint8 image (left to it)."""
    values = tuple(fill) if isinstance(fill, (list, tuple)) else (fill,) * channels
    if len(values) != channels:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return None
        if not float(v).is_integer() or not 0 <= float(v) <= 255:
            return None
        out.append(int(float(v)))
    return tuple(out)


def _split(transform):
    """``(decode transform, RandomMask or None)`` of a transform :meth:`NativePipeline.from_transform`
    takes, else ``None``. Exact types only: a subclass may draw or decode differently."""

    if type(transform) is SampleTransform:
        return transform.crop, transform.mask
    if type(transform) is v2.Compose and 1 <= len(transform.transforms) <= 2:
        parts = list(transform.transforms)
        return parts[0], (parts[1] if len(parts) == 2 else None)
    return transform, None


# ---------------------------------------------------------------------------------------
# Keyed draws without a torch function mode.
#
# Under keyed_thread_rng every torch call of a transform's draw goes through a Python
# __torch_function__ (about 30 calls, ~0.1 ms per sample). For the built-in decode
# transforms the draws are made here instead, with the same torch calls in the same order
# on an explicit generator seeded by the key: the same Mersenne Twister stream as the
# transform's under keyed_default_rng(key), so the same numbers (tests/test_native.py
# compares them with the transforms' own draws). The geometry stays the transform's
# (decode_plan).

_thread_local = threading.local()
_MASK_SEED_HIGH = 2 ** 63 - 1  # RandomMask.get_params: torch.randint(0, 2**63 - 1, ())


def _keyed_generator(key: int) -> torch.Generator:
    """This thread's private CPU generator, seeded with ``key``."""
    gen = getattr(_thread_local, "generator", None)
    if gen is None:
        gen = _thread_local.generator = torch.Generator()
        _thread_local.unit = torch.empty(1)
    gen.manual_seed(key)
    return gen


class _ResizedCropDraw:
    """``DecodeRandomResizedCrop._draw`` (v2 RandomResizedCrop's window, then the flip) on a
    given generator."""

    def __init__(self, decode: DecodeRandomResizedCrop):
        self.scale = (float(decode.scale[0]), float(decode.scale[1]))
        self.ratio = (float(decode.ratio[0]), float(decode.ratio[1]))
        # v2 draws the log aspect ratio between float32 logs: the same bounds
        log_ratio = torch.log(torch.tensor(decode.ratio))
        self.log_lo, self.log_hi = float(log_ratio[0]), float(log_ratio[1])
        self.flip_p = float(decode.flip_p)
        # `torch.rand(1) < flip_p` compares in float32: flip_p rounded to float32 first
        self.flip_below = float(torch.tensor(self.flip_p, dtype=torch.float32))

    def __call__(self, info, gen):
        height, width = info.height, info.width
        area = height * width
        unit = _thread_local.unit
        window = None
        for _attempt in range(10):
            target_area = area * unit.uniform_(self.scale[0], self.scale[1], generator=gen).item()
            aspect = torch.exp(unit.uniform_(self.log_lo, self.log_hi, generator=gen)).item()
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(torch.randint(0, height - h + 1, size=(1,), generator=gen))
                left = int(torch.randint(0, width - w + 1, size=(1,), generator=gen))
                window = (top, left, h, w)
                break
        if window is None:  # no draw fitted
            window = centered_ratio_window(height, width, self.ratio)
        flip = False
        if self.flip_p > 0:
            flip = torch.rand(1, generator=gen).item() < self.flip_below
        return {"window": window, "flip": flip}


class _RandomCropDraw:
    """``DecodeRandomCrop._draw`` without ``padding`` (v2 RandomCrop's offsets) on a given
    generator; ``None`` where the transform raises (left to it, for its message)."""

    def __init__(self, decode: DecodeRandomCrop):
        self.size = tuple(decode.size)
        self.pad_if_needed = decode.pad_if_needed

    def __call__(self, info, gen):
        h, w = info.height, info.width
        th, tw = self.size
        pl = pt = pr = pb = 0
        if self.pad_if_needed and w < tw:
            pl, pr, w = tw - w, tw - w, w + 2 * (tw - w)
        if self.pad_if_needed and h < th:
            pt, pb, h = th - h, th - h, h + 2 * (th - h)
        if h < th or w < tw:
            return None
        i = int(torch.randint(0, h - th + 1, size=(1,), generator=gen)) if h > th else 0
        j = int(torch.randint(0, w - tw + 1, size=(1,), generator=gen)) if w > tw else 0
        return {"pad": (pl, pt, pr, pb), "window": (i, j, th, tw)}


def _keyed_draw(decode):
    """The draw of ``decode`` on an explicit generator, ``(info, generator) -> params`` for
    its ``decode_plan`` (``None``: use the transform's own draw under a keyed mode);
    ``"none"`` for transforms that draw nothing."""
    if type(decode) in (DecodeCenterCrop, DecodeResize, DecodeResizeCenterCrop):
        return "none"
    if type(decode) is DecodeRandomResizedCrop:
        return _ResizedCropDraw(decode)
    if type(decode) is DecodeRandomCrop and decode.padding is None:
        return _RandomCropDraw(decode)
    return None


_fma_probe_lock = threading.Lock()
_fma_probe_result: list[bool] = []


def _torch_affine_rounding():
    """How ``torch.addcmul(bias, x, gain)`` -- BatchConvert's ``"yuv"`` + mean/std step on the
    CPU -- rounds on this torch build, in BatchConvert's broadcast layout: ``"fma"`` (one
    rounding, a fused multiply-add), ``"two"`` (the product, then the sum), or ``None``
    when it is not the same for every element (then :meth:`NativePipeline.run` converts
    with BatchConvert itself)."""
    with _fma_probe_lock:
        if not _fma_probe_result:
            a = 1.0 + 2.0 ** -12
            # a * a + (-1) = 2**-11 + 2**-24 exactly; the product rounded first gives 2**-11
            x = torch.full((2, 3, 5, 37), a, dtype=torch.float32)
            gain = torch.full((1, 3, 1, 1), a, dtype=torch.float32)
            bias = torch.full((1, 3, 1, 1), -1.0, dtype=torch.float32)
            y = torch.addcmul(bias, x, gain)
            fused, two = 2.0 ** -11 + 2.0 ** -24, 2.0 ** -11
            result = "fma" if bool((y == fused).all()) else ("two" if bool((y == two).all()) else None)
            _fma_probe_result.append(result)
        return _fma_probe_result[0]


class NativePipeline:
    """The built-in per-sample pipelines as one native call per batch.

    Build it with :meth:`from_transform`; then per sample :meth:`plan` (draws the random
    parameters, as a call of the transform would) and per batch :meth:`run`.

    Attributes:
        transform: the transform it replaces.
        channels: output channels (3 for ``"RGB"``/``"YCbCr"`` modes, 1 for ``"GRAY"``).
        size: ``(H, W)`` of every sample's output.
    """

    def __init__(self, transform, decode, mask):
        self.transform = transform
        self._decode = decode
        self._mask = mask
        self._mode = _mode_number(decode.mode)
        self.channels = _CHANNELS[fio.ImageReadMode(self._mode)]
        size = decode.crop_size if isinstance(decode, DecodeResizeCenterCrop) else decode.size
        self.size = (int(size[0]), int(size[1]))
        self._max_pixels = int(decode.max_pixels)
        self._strict = bool(decode.strict)
        self._max_scans = int(decode.max_scans if decode.max_scans is not None else fio.DEFAULT_MAX_SCANS)
        pad = tuple(int(v) for v in decode.padding_values(self.channels))
        mask_fill = (0,) * self.channels
        self._mask_m = 0
        if mask is not None:
            mask_fill = _uint8_fill(mask.fill, self.channels)
            self._mask_m = int(round(mask.ratio / MASK_PROBABILITY_RESOLUTION))
        self._fills = torch.tensor([pad, mask_fill], dtype=torch.int64)
        self._keyed_draw = _keyed_draw(decode)
        self._batch_kind = self._plan_batch_kind()
        self._size_plans: dict = {}

    def _plan_batch_kind(self):
        """``(kind, iparams, fparams)`` of ``torch.ops.fastprep.plan_batch`` for this
        pipeline, or ``None`` where its draws are only made in Python."""
        draw, decode = self._keyed_draw, self._decode
        iparams = [*self.size, 0, 0, 0, int(self._mask is not None), self._mask_m]
        fparams = [0.0] * 8
        if draw == "none":
            return _KIND_NO_DRAW, iparams, fparams
        if isinstance(draw, _ResizedCropDraw):
            iparams[2:4] = [int(decode.antialias), int(decode.dct_scaling)]
            fparams = [*draw.scale, draw.log_lo, draw.log_hi, *draw.ratio, draw.flip_p, draw.flip_below]
            return _KIND_RESIZED_CROP, iparams, fparams
        if isinstance(draw, _RandomCropDraw):
            iparams[4] = int(draw.pad_if_needed)
            return _KIND_RANDOM_CROP, iparams, fparams
        return None

    @classmethod
    def from_transform(cls, transform) -> NativePipeline | None:
        """The native pipeline equivalent to ``transform``, or ``None`` when there is none.

        Recognised (exact types; modes ``"RGB"``, ``"YCbCr"``, ``"GRAY"``):

        * :func:`fastprep.data.default_transform`'s ``DecodeRandomCrop(pad_if_needed=True)``
          + optional :class:`fastprep.transforms.RandomMask` (uint8 fill), and
          ``v2.Compose([decode transform])`` or ``v2.Compose([decode transform, RandomMask])``;
        * :class:`~fastprep.transforms.DecodeRandomCrop`,
          :class:`~fastprep.transforms.DecodeCenterCrop`,
          :class:`~fastprep.transforms.DecodeRandomResizedCrop`,
          :class:`~fastprep.transforms.DecodeResizeCenterCrop`, and
          :class:`~fastprep.transforms.DecodeResize` with an ``(h, w)`` size.

        Anything else (user transforms, subclasses, ``"UNCHANGED"`` mode, whose channel
        count depends on the file) gives ``None``: run it per sample.
        """
        decode, mask = _split(transform)
        if type(decode) not in _DECODE_TRANSFORMS or (mask is not None and type(mask) is not RandomMask):
            return None
        try:
            mode = _mode_number(decode.mode)
        except ValueError:
            return None
        if mode not in _CHANNELS:
            return None
        if type(decode) is DecodeResize and not isinstance(decode.size, tuple):
            return None  # the output size follows each image's aspect ratio
        if mask is not None and _uint8_fill(mask.fill, _CHANNELS[fio.ImageReadMode(mode)]) is None:
            return None
        return cls(transform, decode, mask)

    def plan(self, data: torch.Tensor, key: int | None = None) -> Plan:
        """Read the header of ``data`` and draw this sample's random parameters.

        The torch RNG calls are exactly those of ``transform(data)`` (the decode
        transform's window and flip, then the mask's seed): from torch's default CPU
        generator, or with ``key``, from a private generator seeded by ``key`` -- the draws
        of ``transform(data)`` under :func:`fastprep._seeding.keyed_default_rng` ``(key)``,
        without touching the default generator (safe in any thread; the built-in
        transforms' draws are made with an explicit generator, not through a torch
        function mode).

        Args:
            data: the encoded JPEG, uint8 1-D CPU tensor.
            key: the sample's generator seed (:func:`fastprep._seeding.sample_key`), an int
                in ``[0, 2**64)``, or ``None``.

        Raises:
            TypeError: ``data`` is not a uint8 tensor.
            ValueError: ``data`` is not 1-D or not on the CPU; or the image is smaller than
                the crop of a ``DecodeRandomCrop`` without ``pad_if_needed``, as the
                transform raises.
            fastprep.io.DecodeError: the header is not a JPEG header.
        """
        data = _check_data(data, "data")
        info = fio.jpeg_info(data)
        if key is None:
            return self._plan_drawn(info)
        draw = self._keyed_draw
        if draw == "none" and self._mask is None:
            return self._plan_drawn(info)
        if draw is None:
            with keyed_thread_rng(key):
                return self._plan_drawn(info)
        gen = _keyed_generator(key)
        if draw == "none":
            decode_plan = self._decode.draw_plan(info)
        else:
            params = draw(info, gen)
            if params is None:  # the transform raises: its own draw, for its error
                with keyed_thread_rng(key):
                    return self._plan_drawn(info)
            decode_plan = self._decode.decode_plan(info, params)
        seed = None
        if self._mask is not None:
            seed = int(torch.randint(0, _MASK_SEED_HIGH, (), dtype=torch.int64, generator=gen))
        return _plan_row(decode_plan, seed, self._mask_m)

    def plan_batch(self, datas, keys, *, max_pixels: int = 0, exif: bool = False) -> list:
        """:meth:`plan` for a batch in one native call (``torch.ops.fastprep.plan_batch``,
        without the GIL), with a dataset's routing: what :meth:`plan` with each key gives,
        for the samples it plans.

        Args:
            datas: the encoded samples, uint8 1-D CPU tensors.
            keys: their generator seeds (ints in ``[0, 2**64)``), as :meth:`plan`'s ``key``.
            max_pixels: the dataset's limit on a JPEG's declared pixels (0: none), checked
                as :meth:`fastprep.data.JpegDataset.fallback_reason` does.
            exif: route JPEGs with an EXIF orientation other than 1 to Python (the
                dataset's ``apply_exif_orientation``).

        Returns:
            Per sample, ``(route, value)``: ``("plan", PlanRef or Plan)``; ``("error",
            message)``, the :class:`fastprep.io.DecodeError` text :meth:`plan` or the
            dataset's check would raise; or ``("python", None)``: not planned here (not a
            JPEG, EXIF-rotated, a header warning, or a draw this call does not make) --
            route and plan it in Python as before.
        """
        datas = [_check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]
        keys = list(keys)
        if len(keys) != len(datas):
            raise ValueError(f"datas and keys must have the same length, got {len(datas)} and {len(keys)}")
        if self._batch_kind is None:
            return [("python", None)] * len(datas)
        kind, iparams, fparams = self._batch_kind
        signed = torch.tensor([k - (1 << 64) if k >= 1 << 63 else k for k in keys], dtype=torch.int64)
        rows, scales, hw, status, text = torch.ops.fastprep.plan_batch(
            datas, signed, kind, iparams, fparams, list(DCT_SCALES), int(max_pixels), bool(exif))
        batch = PlannedBatch(rows, scales)
        raw = None
        out: list = []
        sizes = hw.tolist() if kind == _KIND_NO_DRAW else None
        for j, (code, start, length) in enumerate(status.tolist()):
            if code == _ROUTE_PLANNED:
                if sizes is None:
                    out.append(("plan", PlanRef(batch, j)))
                else:
                    out.append(("plan", self._no_draw_plan(sizes[j], rows[j, -_MASK_COLUMNS:].tolist())))
            elif code == _ROUTE_ERROR:
                raw = text.numpy().tobytes() if raw is None else raw
                out.append(("error", raw[start:start + length].decode("utf-8", "replace")))
            else:
                out.append(("python", None))
        return out

    def _no_draw_plan(self, size, mask) -> Plan:
        """The :class:`Plan` of a no-draw decode transform on an image of ``size``, with the
        mask columns ``mask`` (the geometry is cached per image size)."""
        key = (size[0], size[1])
        plan = self._size_plans.get(key)
        if plan is None:
            plan = _plan_row(self._decode.draw_plan(_HeaderSize(*key)), None, 0)
            if len(self._size_plans) < 4096:
                self._size_plans[key] = plan
        if not mask[0]:
            return plan
        return Plan(plan.row[:-_MASK_COLUMNS] + tuple(mask), plan.scales)

    def _plan_drawn(self, info) -> Plan:
        """The plan of an image with header ``info``, drawn by the transforms themselves
        (from the default generator, or what a torch function mode redirects it to)."""
        decode_plan = self._decode.draw_plan(info)
        seed = self._mask.get_params() if self._mask is not None else None
        return _plan_row(decode_plan, seed, self._mask_m)

    def run(self, datas, plans, out: torch.Tensor, *, num_threads: int | None = None, mean=None, std=None,
            color: str | None = None, timings: dict | None = None) -> list[tuple[int, str]]:
        """Fill ``out[i]`` with sample ``i`` for every ``i``: one native call, GIL released.

        Args:
            datas: the ``N`` encoded JPEGs, uint8 1-D CPU tensors (those given to :meth:`plan`).
            plans: their ``N`` :class:`Plan` (or :class:`PlanRef`) objects, in the same order.
            out: ``[N, C, H, W]`` CPU tensor, contiguous or ``torch.channels_last``, with
                ``(C, H, W) == (channels, *size)``. uint8: the transform's outputs stacked,
                bit for bit. float32, float16 or bfloat16 (3 channels): what
                ``BatchConvert(color, mean, std, out.dtype)`` computes on the CPU from that
                uint8 batch, bit for bit.
            num_threads: threads working on the batch, the calling one included (default:
                the CPUs this process may run on; never more than ``N``).
            mean, std: per-channel normalisation of a float ``out`` on the [0, 1] scale (3
                values or one for all), both or neither.
            color: conversion of a float ``out``: ``"yuv"`` (default) or ``"rgb"``.
            timings: a dict to which ``"op_thread_s"`` (float) is added: the calling
                thread's CPU seconds inside the native call (its share of the decoding; the
                rest of this call is Python holding the GIL).

        Returns:
            ``(status, message)`` per sample: ``(0, "")`` ok; ``(1, warning)`` decoded past
            corrupt data (the :class:`fastprep.io.DecodeWarning` the transform would
            issue); ``(2, error)`` not decodable, with the message
            :class:`fastprep.io.DecodeError` would carry (``out[i]`` is then unspecified).

        Raises:
            TypeError, ValueError: bad arguments (nothing is decoded then).
        """
        datas, plans = list(datas), list(plans)
        n = len(datas)
        if len(plans) != n:
            raise ValueError(f"datas and plans must have the same length, got {n} and {len(plans)}")
        self._check_out(out, n)
        datas = [_check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]
        for i, p in enumerate(plans):
            if not isinstance(p, (Plan, PlanRef)):
                raise TypeError(f"plans[{i}] must be a Plan or PlanRef from NativePipeline.plan or plan_batch, "
                                f"got {type(p).__name__}")
        threads = _check_threads(num_threads, n)
        convert, params, converter = self._conversion(out.dtype, color, mean, std)
        if n == 0:
            return []
        if converter is not None:  # this torch rounds BatchConvert's last step in no single way
            staged = torch.empty(out.shape, dtype=torch.uint8)
            results = self.run(datas, plans, staged, num_threads=threads, timings=timings)
            out.copy_(converter(staged))
            return results
        rows, scales = _plan_tables(plans)
        start = time.thread_time() if timings is not None else 0.0
        status, text = torch.ops.fastprep.decode_batch(
            datas, rows, scales, self._fills, out, self._mode, self._max_pixels, self._strict, self._max_scans,
            convert, params, threads)
        if timings is not None:
            timings["op_thread_s"] = timings.get("op_thread_s", 0.0) + time.thread_time() - start
        raw = text.numpy().tobytes()
        return [(int(code), raw[start:start + length].decode("utf-8", "replace"))
                for code, start, length in status.tolist()]

    def _check_out(self, out, n):
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.dtype not in _OUT_DTYPES:
            raise TypeError(f"out must be uint8, float32, float16 or bfloat16, got {out.dtype}")
        if out.device.type != "cpu":
            raise ValueError(f"out must be on the CPU, got {out.device}")
        want = (n, self.channels, *self.size)
        if tuple(out.shape) != want:
            raise ValueError(f"out must have shape {want} (N, channels, *size), got {tuple(out.shape)}")
        if not (out.is_contiguous() or out.is_contiguous(memory_format=torch.channels_last)):
            raise ValueError(f"out must be contiguous or channels_last, got strides {out.stride()}")

    def _conversion(self, dtype, color, mean, std):
        """``(convert, params [3, 6] float64, fallback)`` of ``torch.ops.fastprep.decode_batch``
        for an ``out`` of ``dtype``; ``fallback``: a BatchConvert to apply to a uint8 batch
        instead, when this torch's arithmetic cannot be matched natively."""
        params = torch.zeros((3, 6), dtype=torch.float64)
        if dtype == torch.uint8:
            if color is not None or mean is not None or std is not None:
                raise ValueError("color, mean and std apply to a float out; out is uint8")
            return _NO_CONVERT, params, None
        if self.channels != 3:
            raise ValueError(f"a float out needs 3 channels (RGB or YCbCr mode), this pipeline has {self.channels}")
        convert = BatchConvert("yuv" if color is None else color, mean, std, dtype)  # validates
        if convert.mean is not None and not all(math.isfinite(v) for v in convert.mean + convert.std):
            raise ValueError(f"mean and std must be finite, got {convert.mean} and {convert.std}")
        if convert.color == "rgb":
            if convert.mean is None:
                return _DIV255, params, None
            # fastprep.functional.scale_normalize's gain and bias, in double
            for c, (m, s) in enumerate(zip(convert.mean, convert.std)):
                params[c, 4], params[c, 5] = 1.0 / (255.0 * s), -m / s
            return _AFFINE, params, None
        if convert.mean is None:
            # fastprep.functional.yuv_scale: coefficients times 1/255 in double
            gain = 1.0 / 255.0
            for c, row in enumerate(YUV_COEFFS):
                for k, v in enumerate(row):
                    params[c, k] = v * gain
            return _YUV, params, None
        rounding = _torch_affine_rounding()
        if rounding is None:
            return _NO_CONVERT, params, convert
        # BatchConvert's torch path: YUV with the plain coefficients, then addcmul
        for c, row in enumerate(YUV_COEFFS):
            for k, v in enumerate(row):
                params[c, k] = v
            params[c, 4] = 1.0 / (255.0 * convert.std[c])
            params[c, 5] = -convert.mean[c] / convert.std[c]
        return (_YUV_AFFINE_FMA if rounding == "fma" else _YUV_AFFINE), params, None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transform!r}, channels={self.channels}, size={self.size})"


def _plan_tables(plans) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(rows, scales)`` tables of ``decode_batch`` for a list of :class:`Plan` and
    :class:`PlanRef`; a whole :class:`PlannedBatch` in order is used as it is."""
    first = plans[0]
    if (isinstance(first, PlanRef) and len(first.batch.rows) == len(plans)
            and all(type(p) is PlanRef and p.batch is first.batch and p.position == j for j, p in enumerate(plans))):
        return first.batch.rows, first.batch.scales
    rows = [p.row if isinstance(p, Plan) else tuple(p.batch.rows[p.position].tolist()) for p in plans]
    scales = [p.scales if isinstance(p, Plan) else tuple(p.batch.scales[p.position].tolist()) for p in plans]
    return torch.tensor(rows, dtype=torch.int64), torch.tensor(scales, dtype=torch.float64)


def _check_data(data, name) -> torch.Tensor:
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"{name} must be a uint8 1-D tensor of encoded bytes, got {type(data).__name__}")
    if data.dtype != torch.uint8:
        raise TypeError(f"{name} must be a uint8 tensor, got {data.dtype}")
    if data.dim() != 1:
        raise ValueError(f"{name} must be 1-D (encoded bytes), got shape {tuple(data.shape)}")
    if data.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU, got {data.device}")
    return data.contiguous()


def _check_threads(num_threads, n) -> int:
    if num_threads is None:
        return max(1, min(usable_cpus(), n))
    if not is_int(num_threads):
        raise TypeError(f"num_threads must be an int or None, got {num_threads!r}")
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    return max(1, min(int(num_threads), n))
