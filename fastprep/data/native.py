"""The per-sample pipelines as one native call per batch.

A per-sample transform run by DataLoader worker processes pays, per sample, Python calls,
tensor allocations and the trip of the result through shared memory. For the pipelines it
can compile (:func:`fastprep.transforms._compile.compile_pipeline`: a fastprep decode
transform, or an unchanged torchvision v2 recipe on decoded images, with the native
augmentations of :mod:`fastprep.transforms._native`) :class:`NativePipeline` splits the work in
two:

* :meth:`NativePipeline.plan` (per sample) / :meth:`NativePipeline.plan_batch` (per batch,
  one native call without the GIL): read the JPEG header and draw the random parameters with
  exactly the torch RNG calls the pipeline makes -- the decode transform's window, the mask's
  seed, each augmentation's draws -- giving a :class:`Plan`: one ``SamplePlan`` record
  (csrc/batch/plan.h) and the sample's pixel steps (csrc/ops/pixel_kernel.h);
* :meth:`NativePipeline.run` (per batch): one call of ``torch.ops.fastprep.decode_batch``
  (csrc/batch/decode_batch.cpp), which decodes, resizes, pads, masks and augments every sample on a
  pool of native threads, without the GIL, straight into a preallocated batch -- uint8, or
  float with the output conversion fused into the write.

Bad files never abort a batch: :meth:`run` returns a status per sample.
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from typing import NamedTuple

import numpy as np
import torch
from torchvision.transforms import v2

from .. import _ops  # noqa: F401  (registers torch.ops.fastprep.*)
from .. import io as fio
from .._checks import checked_tensor, is_int
from .._kernels.coeffs import YUV_COEFFS
from .._layout import as_bytes, struct_dtype
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
    OnDecoded,
)
from ..transforms._compile import CompiledPipeline, compile_pipeline
from ..transforms._multiview import register_per_sample_runner
from ..transforms._pil import OnPIL, open_rgb
from ..transforms._native import Steps, TorchDraws, Unsupported, build_program, draw_steps
from ..transforms._plan import DCT_SCALES, INTERPOLATIONS, PAD_MODES, centered_ratio_window
from .batch import BatchConvert, channel_values
from .sample import SampleTransform

__all__ = ["MultiViewPipeline", "NativePipeline", "Plan", "PlanRef", "PlannedBatch", "STATUS_ERROR", "STATUS_OK",
           "STATUS_WARNING", "Unsupported", "native_pipeline"]

#: :meth:`NativePipeline.run` statuses.
STATUS_OK, STATUS_WARNING, STATUS_ERROR = 0, 1, 2

_CHANNELS = {fio.ImageReadMode.GRAY: 1, fio.ImageReadMode.RGB: 3, fio.ImageReadMode.YCbCr: 3}
_OUT_DTYPES = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)

# csrc/batch/plan.h: DecodeKind, ConvertKind
_KIND_NO_DRAW, _KIND_RESIZED_CROP, _KIND_RANDOM_CROP = range(3)
(_NO_CONVERT, _DIV255, _AFFINE, _YUV, _YUV_AFFINE, _YUV_AFFINE_FMA, _TO_FLOAT,
 _TO_FLOAT_NORMALIZE, _DIV_TO_FLOAT, _DIV_TO_FLOAT_NORMALIZE) = range(10)
_ROUTE_PLANNED, _ROUTE_PYTHON, _ROUTE_ERROR = range(3)

_PLAN = struct_dtype("SamplePlan")
#: the fields of a ``SamplePlan`` that a no-draw decode transform's geometry sets (a
#: function of the image size alone), packed
_GEOMETRY_FIELDS = ("scale_num", "top", "left", "height", "width", "resize", "full_in_h", "full_in_w", "in_top",
                    "in_left", "full_out_h", "full_out_w", "out_top", "out_left", "region_h", "region_w", "antialias",
                    "hflip", "filter", "placed", "place_top", "place_left", "scale_h", "scale_w", "pil_filter")
_GEOMETRY = np.dtype([(name, _PLAN[name]) for name in _GEOMETRY_FIELDS])
_STEP = struct_dtype("PixelStep")


class Plan:
    """One sample's work for :meth:`NativePipeline.run`, made by :meth:`NativePipeline.plan`.

    Attributes:
        record: its ``SamplePlan`` record (a numpy structured scalar; fields named in
            csrc/batch/plan.h; ``first_step`` is rewritten when a batch is assembled).
        steps: its ``PixelStep`` records, the uint8 steps then ``record["num_float_steps"]``
            float steps.
        extras: tensors its steps refer to by index (RandomErasing's noise).

    Two plans are equal when they describe the same work (:meth:`key`).
    """

    __slots__ = ("record", "steps", "extras")

    def __init__(self, record, steps: np.ndarray, extras: tuple):
        self.record, self.steps, self.extras = record, steps, tuple(extras)

    def key(self) -> tuple:
        """A comparable form: the record's and the steps' bytes (first_step zeroed) and the
        extras' values."""
        record = self.record.copy()
        record["first_step"] = 0
        return (record.tobytes(), self.steps.tobytes(), tuple(tuple(t.reshape(-1).tolist()) for t in self.extras))

    def __eq__(self, other) -> bool:
        return isinstance(other, Plan) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={self.record[name]}" for name in ("scale_num", "top", "left", "height", "width"))
        return f"Plan({fields}, steps={len(self.steps)})"


class PlannedBatch(NamedTuple):
    """The plans :meth:`NativePipeline.plan_batch` made for a batch, as ``decode_batch`` takes
    them: ``plans`` (SamplePlan records, numpy), ``steps`` (PixelStep records as bytes),
    ``extras`` (the tensors they keep). Records of samples it did not plan are unused."""

    plans: np.ndarray
    steps: torch.Tensor
    extras: list


class PlanRef(NamedTuple):
    """The plan at ``position`` of a :class:`PlannedBatch`; :meth:`NativePipeline.run` takes
    it wherever it takes a :class:`Plan`."""

    batch: PlannedBatch
    position: int

    def resolve(self) -> Plan:
        """The same plan as a standalone :class:`Plan`."""
        record = self.batch.plans[self.position].copy()
        first = int(record["first_step"])
        count = int(record["num_steps"]) + int(record["num_float_steps"])
        steps = self.batch.steps.numpy().view(_STEP)[first:first + count].copy()
        used = sorted({int(v) for v in steps["extra"] if v >= 0})
        return Plan(record, _renumber_extras(steps, {old: new for new, old in enumerate(used)}),
                    tuple(self.batch.extras[k] for k in used))


class _HeaderSize(NamedTuple):
    """The header fields the no-draw decode transforms' plans read."""

    height: int
    width: int


def _renumber_extras(steps: np.ndarray, mapping: dict[int, int]) -> np.ndarray:
    """``steps`` with their ``extra`` indices mapped through ``mapping``."""
    for s in steps:
        if int(s["extra"]) >= 0:
            s["extra"] = mapping[int(s["extra"])]
    return steps


def _plan_record(plan: DecodePlan, mask_seed, mask_m: int, fills=(), pil_filter: int = 0):
    """A ``SamplePlan`` record from a transform's :class:`~fastprep.transforms.DecodePlan` and
    the mask's seed (``None``: no mask); no steps. ``fills``: per padding stage of the plan's
    ``pad``, its per-channel value; ``pil_filter``: the resize is Pillow's."""
    rec = np.zeros((), dtype=_PLAN)
    top, left, height, width = plan.window
    rec["scale_num"], rec["top"], rec["left"], rec["height"], rec["width"] = plan.num, top, left, height, width
    r = plan.resize
    offset = plan.offset
    placed = offset is not None
    if r is not None and placed:
        rec["resize"] = 1
        rec["full_in_h"], rec["full_in_w"] = r.full_in
        rec["in_top"], rec["in_left"] = r.in_offset
        rec["full_out_h"], rec["full_out_w"] = r.full_out
        rec["out_top"], rec["out_left"], rec["region_h"], rec["region_w"] = r.out_window
        rec["antialias"], rec["hflip"] = int(r.antialias), int(r.hflip)
        rec["pil_filter"] = pil_filter
        rec["filter"] = INTERPOLATIONS.index(r.interpolation)
        if r.scale is not None:
            rec["scale_h"], rec["scale_w"] = float(r.scale[0]), float(r.scale[1])
    else:
        rec["region_h"], rec["region_w"] = height, width
    if offset is not None:
        rec["placed"] = 1
        rec["place_top"], rec["place_left"] = offset
    if plan.pad is not None:
        _pad_fields(rec, plan.pad, fills)
    if mask_seed is not None:
        rec["mask"], rec["mask_seed"], rec["mask_m"] = 1, int(mask_seed), mask_m
    return rec


def _pad_fields(rec, pad, fills) -> None:
    """A ``SamplePlan``'s padding by index (csrc/batch/plan.h) from a
    :class:`~fastprep.transforms._plan.PadMap` and its stages' per-channel fills."""
    rec["pad_stages"] = len(pad.stages)
    rec["pad_image_h"], rec["pad_image_w"] = pad.image
    rec["pad_origin_top"], rec["pad_origin_left"] = pad.origin
    for k, (stage, fill) in enumerate(zip(pad.stages, fills)):
        rec["pad_mode"][k] = PAD_MODES.index(stage.mode)
        rec["pad_ltrb"][4 * k:4 * k + 4] = stage.ltrb
        rec["pad_fill"][k] = sum(int(v) << (8 * c) for c, v in enumerate(fill))


def _with_steps(record, steps: Steps | None) -> Plan:
    """A :class:`Plan` of ``record`` and the steps a sample's draws emitted."""
    if steps is None or not steps.items:
        return Plan(record, np.zeros(0, dtype=_STEP), ())
    records = steps.records()
    record["num_steps"] = steps.num_uint8 if steps.num_uint8 is not None else len(records)
    record["num_float_steps"] = len(records) - int(record["num_steps"])
    return Plan(record, records, tuple(steps.extras))


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


def _compile(transform, decode_kwargs: dict | None = None) -> CompiledPipeline:
    """The compiled form of a transform the threads engine may run (the default transform
    included); raises :class:`Unsupported` saying why not."""
    if type(transform) is SampleTransform:
        transform = v2.Compose([transform.crop] + ([transform.mask] if transform.mask is not None else []))
    compiled = compile_pipeline(transform, decode_kwargs)
    decode, mask = compiled.decode, compiled.mask
    try:
        mode = _mode_number(decode.mode)
    except ValueError:
        raise Unsupported(f"{type(decode).__name__}(mode={decode.mode!r}) is not a decode mode") from None
    if mode not in _CHANNELS:
        raise Unsupported(f"{type(decode).__name__}(mode={decode.mode!r}): mode UNCHANGED gives each file its own "
                          "channel count; the native engine takes RGB, YCbCr or GRAY")
    if mask is not None and _uint8_fill(mask.fill, _CHANNELS[fio.ImageReadMode(mode)]) is None:
        raise Unsupported(f"RandomMask(fill={mask.fill!r}) is not a uint8 value per channel")
    return compiled


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
            if window[2] <= 0 or window[3] <= 0:
                return None  # an empty window: the transform's own draw raises, naming it
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
    """A compiled per-sample pipeline as one native call per batch.

    Build it with :meth:`from_transform` (or :meth:`compile`, which says why a transform is
    refused); then per sample :meth:`plan` or per batch :meth:`plan_batch` (draws the random
    parameters, as a call of the transform would) and per batch :meth:`run`.

    Attributes:
        transform: the transform it replaces.
        compiled: its :class:`~fastprep.transforms._compile.CompiledPipeline`.
        channels: output channels.
        size: ``(H, W)`` of every sample's output.
        float_output: the pipeline ends with ``ToDtype(torch.float32, scale=True)`` (+
            ``Normalize``): batches are float, converted as the pipeline says, and
            :meth:`run` takes a float ``out`` only.
    """

    def __init__(self, transform, compiled: CompiledPipeline):
        self.transform = transform
        self.compiled = compiled
        decode = compiled.decode
        self._decode = decode
        self._mask = compiled.mask
        self._mode = _mode_number(decode.mode)
        self.decode_channels = _CHANNELS[fio.ImageReadMode(self._mode)]
        self.channels = compiled.channels
        self.size = compiled.size
        self.float_output = compiled.to_float
        self._max_pixels = int(decode.max_pixels)
        self._strict = bool(decode.strict)
        self._max_scans = int(decode.max_scans if decode.max_scans is not None else fio.DEFAULT_MAX_SCANS)
        pad = tuple(int(v) for v in decode.padding_values(self.decode_channels))
        mask_fill = (0,) * self.decode_channels
        self._mask_m = 0
        if self._mask is not None:
            mask_fill = _uint8_fill(self._mask.fill, self.decode_channels)
            self._mask_m = int(round(self._mask.ratio / MASK_PROBABILITY_RESOLUTION))
        self._fills = torch.tensor([pad, mask_fill], dtype=torch.int64)
        self._augment = list(compiled.augment) + list(compiled.after_float)
        self._num_float = len(compiled.after_float)
        self._program = build_program(self._augment)
        self._keyed_draw = _keyed_draw(decode)
        self._pil_filter = int(compiled.pil_filter)
        self._spec = self._decode_spec()
        self._size_plans: dict = {}
        self._conversions: dict = {}  # _conversion's, per arguments
        #: a v2 pipeline (OnDecoded): its reference decodes the whole file, see _check_whole_file
        self._whole_file = isinstance(transform, (OnDecoded, OnPIL))

    def _decode_spec(self) -> torch.Tensor | None:
        """The ``DecodeSpec`` record of ``plan_batch`` (as bytes), or ``None`` where the
        decode's draws are only made in Python."""
        draw, decode = self._keyed_draw, self._decode
        spec = np.zeros((), dtype=struct_dtype("DecodeSpec"))
        spec["out_h"], spec["out_w"] = self.size
        spec["channels"] = self.decode_channels
        spec["has_mask"], spec["mask_m"] = int(self._mask is not None), self._mask_m
        if draw == "none":
            spec["kind"] = _KIND_NO_DRAW
        elif isinstance(draw, _ResizedCropDraw):
            spec["kind"] = _KIND_RESIZED_CROP
            spec["antialias"], spec["dct_scaling"] = int(decode.antialias), int(decode.dct_scaling)
            spec["filter"] = INTERPOLATIONS.index(decode.interpolation)
            spec["scale_lo"], spec["scale_hi"] = draw.scale
            spec["log_ratio_lo"], spec["log_ratio_hi"] = draw.log_lo, draw.log_hi
            spec["ratio_lo"], spec["ratio_hi"] = draw.ratio
            spec["flip_p"], spec["flip_below"] = draw.flip_p, draw.flip_below
            spec["pil_filter"] = self._pil_filter
        elif isinstance(draw, _RandomCropDraw):
            spec["kind"] = _KIND_RANDOM_CROP
            spec["pad_if_needed"] = int(draw.pad_if_needed)
        else:
            return None
        return as_bytes(spec.reshape(1))

    @classmethod
    def compile(cls, transform, decode_kwargs: dict | None = None) -> NativePipeline:
        """The native pipeline of ``transform``.

        Recognised (exact types): a fastprep decode transform (``DecodeRandomCrop``,
        ``DecodeCenterCrop``, ``DecodeRandomResizedCrop``, ``DecodeResizeCenterCrop``,
        ``DecodeResize`` with an ``(h, w)`` size; modes RGB, YCbCr, GRAY) or
        :class:`~fastprep.transforms.OnDecoded` of a torchvision v2 recipe whose geometry comes
        first, then optionally fastprep's ``RandomMask`` (uint8 fill), the native
        augmentations, ``ToDtype(torch.float32, scale=True)`` + ``Normalize`` and the float
        transforms (``docs/augment.md`` lists them); :func:`fastprep.data.default_transform`.

        Args:
            decode_kwargs: ``max_pixels``/``strict``/``max_scans`` for a decode built from a
                v2 geometry.

        Raises:
            Unsupported: a step cannot run natively; the message names it and says why.
        """
        return cls(transform, _compile(transform, decode_kwargs))

    @classmethod
    def from_transform(cls, transform, decode_kwargs: dict | None = None) -> NativePipeline | None:
        """:meth:`compile`, or ``None`` where it raises :class:`Unsupported`."""
        try:
            return cls.compile(transform, decode_kwargs)
        except Unsupported:
            return None

    def plan(self, data: torch.Tensor, key: int | None = None) -> Plan:
        """Read the header of ``data`` and draw this sample's random parameters.

        The torch RNG calls are exactly those of the transform on ``data`` (the decode
        transform's window and flip, the mask's seed, then each augmentation's draws): from
        torch's default CPU generator, or with ``key``, from a private generator seeded by
        ``key`` -- the draws under :func:`fastprep._seeding.keyed_default_rng` ``(key)``, without
        touching the default generator (safe in any thread).

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
        if self._whole_file:
            _check_whole_file(data, self.transform)
        if key is None:
            return self._plan_drawn(info, None)
        draw = self._keyed_draw
        if draw is None:
            with keyed_thread_rng(key):
                return self._plan_drawn(info, None)
        gen = _keyed_generator(key)
        if draw == "none":
            decode_plan = self._decode.draw_plan(info)
        else:
            params = draw(info, gen)
            if params is None:  # the transform raises: its own draw, for its error
                with keyed_thread_rng(key):
                    return self._plan_drawn(info, None)
            decode_plan = self._decode.decode_plan(info, params)
        seed = None
        if self._mask is not None:
            seed = int(torch.randint(0, _MASK_SEED_HIGH, (), dtype=torch.int64, generator=gen))
        return _with_steps(_plan_record(decode_plan, seed, self._mask_m, self._stage_fills(decode_plan),
                                        self._pil_filter), self._draw_augment(gen))

    def _draw_augment(self, gen: torch.Generator | None) -> Steps | None:
        """The augmentations' draws on ``gen`` (``None``: the default generator, or what a
        torch function mode hands out)."""
        if not self._augment:
            return None
        draws = TorchDraws(gen)
        steps = draw_steps(self._augment[:len(self._augment) - self._num_float], draws, self.decode_channels,
                           *self.size)
        steps.num_uint8 = len(steps.items)
        for t in self._augment[len(self._augment) - self._num_float:]:
            t.draw(draws, steps)
        return steps

    def _stage_fills(self, plan: DecodePlan) -> list:
        """Per padding stage of ``plan`` (padding by index), its per-channel value."""
        return [] if plan.pad is None else self._decode.stage_fills(self.decode_channels, plan.pad.stages)

    def _plan_drawn(self, info, gen) -> Plan:
        """The plan of an image with header ``info``, drawn by the transforms themselves
        (from the default generator, or what a torch function mode redirects it to)."""
        decode_plan = self._decode.draw_plan(info)
        seed = self._mask.get_params() if self._mask is not None else None
        return _with_steps(_plan_record(decode_plan, seed, self._mask_m, self._stage_fills(decode_plan),
                                        self._pil_filter), self._draw_augment(gen))

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
        return _plan_routes([self], self._spec, datas, keys, max_pixels, exif, PlanRef)

    def _fill_no_draw(self, plans: np.ndarray, rows, sizes) -> None:
        """Write the geometry of a no-draw decode transform into the records ``plans[rows]``,
        the image of ``rows[k]`` being of size ``sizes[k]``: one assignment for all rows (the
        geometry is cached per image size)."""
        if not rows:
            return
        names = list(_GEOMETRY_FIELDS)
        geometries = []
        for size in sizes:
            key = (int(size[0]), int(size[1]))
            geometry = self._size_plans.get(key)
            if geometry is None:
                record = _plan_record(self._decode.draw_plan(_HeaderSize(*key)), None, 0, pil_filter=self._pil_filter)
                geometry = np.array(record)[names].astype(_GEOMETRY)
                if len(self._size_plans) < 4096:
                    self._size_plans[key] = geometry
            geometries.append(geometry)
        plans[names][rows] = np.array(geometries, dtype=_GEOMETRY)

    def run(self, datas, plans, out: torch.Tensor, *, num_threads: int | None = None, mean=None, std=None,
            color: str | None = None, timings: dict | None = None) -> list[tuple[int, str]]:
        """Fill ``out[i]`` with sample ``i`` for every ``i``: one native call, GIL released.

        Args:
            datas: the ``N`` encoded JPEGs, uint8 1-D CPU tensors (those given to :meth:`plan`).
            plans: their ``N`` :class:`Plan` (or :class:`PlanRef`) objects, in the same order.
            out: ``[N, C, H, W]`` CPU tensor, contiguous or ``torch.channels_last``, with
                ``(C, H, W) == (channels, *size)``. uint8: the transform's outputs stacked,
                bit for bit. float32, float16 or bfloat16: for a pipeline with
                :attr:`float_output`, its float output (cast to ``out``'s dtype); otherwise
                what ``BatchConvert(color, mean, std, out.dtype)`` computes on the CPU from the
                uint8 batch, bit for bit.
            num_threads: threads working on the batch, the calling one included (default:
                the CPUs this process may run on; never more than ``N``).
            mean, std: per-channel normalisation of a float ``out`` on the [0, 1] scale (3
                values or one for all), both or neither (not with :attr:`float_output`).
            color: conversion of a float ``out``: ``"yuv"`` (default) or ``"rgb"`` (not with
                :attr:`float_output`).
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
        for i, p in enumerate(plans):
            if not isinstance(p, (Plan, PlanRef)):
                raise TypeError(f"plans[{i}] must be a Plan or PlanRef from NativePipeline.plan or plan_batch, "
                                f"got {type(p).__name__}")
        threads = _check_threads(num_threads, n)
        convert, converter = self._conversion(out.dtype, color, mean, std)
        if n == 0:
            return []
        if converter is not None:  # this torch rounds BatchConvert's last step in no single way
            staged = torch.empty(out.shape, dtype=torch.uint8)
            results = self.run(datas, plans, staged, num_threads=threads, timings=timings)
            out.copy_(converter(staged))
            return results
        records, steps, extras = _batch_tables(plans)
        start = time.thread_time() if timings is not None else 0.0
        status, text = _on_data(datas, lambda checked: torch.ops.fastprep.decode_batch(
            checked, records, steps, extras, self._fills, [out], self.decode_channels, self._mode, self._max_pixels,
            self._strict, self._max_scans, convert, threads))
        if timings is not None:
            timings["op_thread_s"] = timings.get("op_thread_s", 0.0) + time.thread_time() - start
        return _statuses(status, text)

    def _check_out(self, out, n):
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.dtype not in _OUT_DTYPES:
            raise TypeError(f"out must be uint8, float32, float16 or bfloat16, got {out.dtype}")
        if self.float_output and out.dtype == torch.uint8:
            raise TypeError("this pipeline ends with ToDtype(torch.float32): out must be float32, float16 or bfloat16")
        if out.device.type != "cpu":
            raise ValueError(f"out must be on the CPU, got {out.device}")
        want = (n, self.channels, *self.size)
        if tuple(out.shape) != want:
            raise ValueError(f"out must have shape {want} (N, channels, *size), got {tuple(out.shape)}")
        if not (out.is_contiguous() or out.is_contiguous(memory_format=torch.channels_last)):
            raise ValueError(f"out must be contiguous or channels_last, got strides {out.stride()}")

    def _conversion(self, dtype, color, mean, std):
        """``(ConvertSpec record as bytes, fallback)`` of ``decode_batch`` for an ``out`` of
        ``dtype``; ``fallback``: a BatchConvert to apply to a uint8 batch instead, when this
        torch's arithmetic cannot be matched natively. Remembered per arguments given as
        plain numbers (a loader asks the same every batch)."""
        key = (dtype, color, _number_key(mean), _number_key(std))
        if None in key[2:] or not (color is None or type(color) is str):
            return self._make_conversion(dtype, color, mean, std)
        found = self._conversions.get(key)
        if found is None:
            found = self._make_conversion(dtype, color, mean, std)
            if len(self._conversions) < 64:
                self._conversions[key] = found
        return found

    def _make_conversion(self, dtype, color, mean, std):
        spec = np.zeros(1, dtype=struct_dtype("ConvertSpec"))
        rec = spec[0]
        if self.float_output:
            if color is not None or mean is not None or std is not None:
                raise ValueError("this pipeline converts to float itself (ToDtype + Normalize): color, mean and std "
                                 "do not apply")
            c = self.compiled
            rec["scale"] = float(np.float32(1.0 / 255))  # v2 ToDtype: image.to(float32).mul_(1 / 255)
            if c.mean is None:
                rec["kind"] = _DIV_TO_FLOAT if c.divide else _TO_FLOAT  # v1 ConvertImageDtype: x / 255
            else:
                rec["kind"] = _DIV_TO_FLOAT_NORMALIZE if c.divide else _TO_FLOAT_NORMALIZE
                k = self.channels
                rec["mean"][:k] = (c.mean * k)[:k] if len(c.mean) == 1 else c.mean
                rec["std"][:k] = (c.std * k)[:k] if len(c.std) == 1 else c.std
            return as_bytes(spec), None
        if dtype == torch.uint8:
            if color is not None or mean is not None or std is not None:
                raise ValueError("color, mean and std apply to a float out; out is uint8")
            return as_bytes(spec), None
        convert = BatchConvert("yuv" if color is None else color, mean, std, dtype)  # validates
        if convert.color != "rgb" and self.channels != 3:
            raise ValueError(f"color={convert.color!r} needs 3 channels (RGB or YCbCr mode), this pipeline has "
                             f"{self.channels}: use color='rgb'")
        if convert.mean is not None and not all(math.isfinite(v) for v in convert.mean + convert.std):
            raise ValueError(f"mean and std must be finite, got {convert.mean} and {convert.std}")
        yuv = rec["yuv"].reshape(3, 4)
        if convert.color == "rgb":  # any channel count (1 after Grayscale(1))
            if convert.mean is None:
                rec["kind"] = _DIV255
                return as_bytes(spec), None
            # fastprep.functional.scale_normalize's gain and bias, in double
            assert convert.std is not None  # set together with mean
            means = channel_values(convert.mean, self.channels, "mean")
            stds = channel_values(convert.std, self.channels, "std")
            for c, (m, s) in enumerate(zip(means, stds)):
                rec["gain"][c], rec["bias"][c] = 1.0 / (255.0 * s), -m / s
            rec["kind"] = _AFFINE
            return as_bytes(spec), None
        if convert.mean is None:
            # fastprep.functional.yuv_scale: coefficients times 1/255 in double
            gain = 1.0 / 255.0
            for c, row in enumerate(YUV_COEFFS):
                for k, v in enumerate(row):
                    yuv[c, k] = v * gain
            rec["kind"] = _YUV
            rec["yuv"] = yuv.reshape(-1)
            return as_bytes(spec), None
        rounding = _torch_affine_rounding()
        if rounding is None:
            return as_bytes(spec), convert
        # BatchConvert's torch path: YUV with the plain coefficients, then addcmul
        for c, row in enumerate(YUV_COEFFS):
            for k, v in enumerate(row):
                yuv[c, k] = v
            rec["gain"][c] = 1.0 / (255.0 * convert.std[c])
            rec["bias"][c] = -convert.mean[c] / convert.std[c]
        rec["yuv"] = yuv.reshape(-1)
        rec["kind"] = _YUV_AFFINE_FMA if rounding == "fma" else _YUV_AFFINE
        return as_bytes(spec), None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transform!r}, channels={self.channels}, size={self.size})"


class MultiViewPipeline:
    """:class:`~fastprep.transforms.MultiView` as one native call per batch.

    Each view is a compiled :class:`NativePipeline`; per sample the views draw one after the
    other on the sample's generator (as ``[view(data) for view in views]``), and the batch op
    decodes the image once per DCT scale its views use (the union of their windows) and cuts,
    resizes and augments every view from it. :meth:`run` fills one output per view.

    Attributes:
        transform: the MultiView.
        views: the views' native pipelines.
        channels, size, float_output: per view, as :class:`NativePipeline`'s.
    """

    def __init__(self, transform, views: list[NativePipeline]):
        first = views[0]
        for k, v in enumerate(views[1:], 1):
            if (v._mode, v._max_pixels, v._strict, v._max_scans) != (first._mode, first._max_pixels, first._strict,
                                                                      first._max_scans):
                raise Unsupported(f"view {k} decodes with other options (mode, max_pixels, strict, max_scans) than "
                                  "view 0; the views of a sample share its decodes")
        if len({v.float_output for v in views}) > 1:
            raise Unsupported("some views end in ToDtype(torch.float32) and some in uint8; the loader needs one kind")
        self.transform = transform
        self.views = views
        self.channels = [v.channels for v in views]
        self.size = [v.size for v in views]
        self.float_output = first.float_output
        specs = [v._spec for v in views]
        self._specs = torch.cat([t for t in specs if t is not None]) if all(t is not None for t in specs) else None
        self._fills = torch.cat([v._fills for v in views])

    @classmethod
    def compile(cls, transform, decode_kwargs: dict | None = None) -> MultiViewPipeline:
        """The native pipeline of a :class:`~fastprep.transforms.MultiView` (each view compiled as
        :meth:`NativePipeline.compile` does). Raises :class:`Unsupported` naming the view."""
        views = []
        for k, view in enumerate(transform.view_transforms()):
            try:
                views.append(NativePipeline.compile(view, decode_kwargs))
            except Unsupported as e:
                raise Unsupported(f"view {k}: {e}") from None
        return cls(transform, views)

    def plan(self, data: torch.Tensor, key: int | None = None) -> list[Plan]:
        """Every view's :class:`Plan` of one sample, drawn in view order as the MultiView's own
        call draws them (from the default generator, or with ``key`` a private generator seeded by
        it, the draws under :func:`fastprep._seeding.keyed_default_rng`)."""
        data = _check_data(data, "data")
        info = fio.jpeg_info(data)
        whole = next((v for v in self.views if v._whole_file), None)
        if whole is not None:
            _check_whole_file(data, whole.transform)
        if key is None:
            return [v._plan_drawn(info, None) for v in self.views]
        with keyed_thread_rng(key):
            return [v._plan_drawn(info, None) for v in self.views]

    def plan_batch(self, datas, keys, *, max_pixels: int = 0, exif: bool = False) -> list:
        """:meth:`NativePipeline.plan_batch` for every view at once: per sample ``(route, value)``
        with ``value`` a :class:`MultiPlanRef` for a planned sample."""
        V = len(self.views)
        return _plan_routes(self.views, self._specs, datas, keys, max_pixels, exif,
                            lambda batch, j: MultiPlanRef(batch, j, V))

    def run(self, datas, plans, outs, *, num_threads: int | None = None, mean=None, std=None,
            color: str | None = None, timings: dict | None = None) -> list[tuple[int, str]]:
        """Fill ``outs[v][i]`` with view ``v`` of sample ``i``: one native call, GIL released.

        Args:
            datas: the ``N`` encoded JPEGs.
            plans: per sample, its views' plans (a list of :class:`Plan`, or a :class:`MultiPlanRef`).
            outs: one ``[N, C, H, W]`` tensor per view (see :meth:`NativePipeline.run`'s ``out``);
                ``mean``, ``std`` and ``color`` apply to every view.
            num_threads, timings: as :meth:`NativePipeline.run`'s.

        Returns:
            ``(status, message)`` per sample, as :meth:`NativePipeline.run`.
        """
        datas, plans, outs = list(datas), list(plans), list(outs)
        n, V = len(datas), len(self.views)
        if len(plans) != n:
            raise ValueError(f"datas and plans must have the same length, got {n} and {len(plans)}")
        if len(outs) != V:
            raise ValueError(f"outs must hold one tensor per view ({V}), got {len(outs)}")
        for view, out in zip(self.views, outs):
            view._check_out(out, n)
        flat: list[Plan | PlanRef] = []
        for i, p in enumerate(plans):
            if isinstance(p, MultiPlanRef):
                flat.extend(PlanRef(p.batch, p.position * V + v) for v in range(V))
            elif isinstance(p, (list, tuple)) and len(p) == V and all(isinstance(q, Plan) for q in p):
                flat.extend(p)
            else:
                raise TypeError(f"plans[{i}] must be a MultiPlanRef or a list of {V} Plans from MultiViewPipeline.plan "
                                f"or plan_batch, got {type(p).__name__}")
        threads = _check_threads(num_threads, n)
        converts = []
        for view, out in zip(self.views, outs):
            convert, converter = view._conversion(out.dtype, color, mean, std)
            if converter is not None:
                raise ValueError("this torch build rounds BatchConvert's yuv + mean/std step in no single way: use "
                                 "color='rgb' (or no mean/std) with several views")
            converts.append(convert)
        if n == 0:
            return []
        records, steps, extras = _batch_tables(flat)
        start = time.thread_time() if timings is not None else 0.0
        first = self.views[0]
        convert = torch.cat(converts)
        status, text = _on_data(datas, lambda checked: torch.ops.fastprep.decode_batch(
            checked, records, steps, extras, self._fills, outs, first.decode_channels, first._mode, first._max_pixels,
            first._strict, first._max_scans, convert, threads))
        if timings is not None:
            timings["op_thread_s"] = timings.get("op_thread_s", 0.0) + time.thread_time() - start
        return _statuses(status, text)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.views)} views, sizes={self.size})"


class MultiPlanRef(NamedTuple):
    """The plans of sample ``position`` (its ``views`` plans) in a :class:`PlannedBatch` of a
    :class:`MultiViewPipeline`."""

    batch: PlannedBatch
    position: int
    views: int

    def resolve(self) -> list[Plan]:
        """The same plans as standalone :class:`Plan` objects."""
        return [PlanRef(self.batch, self.position * self.views + v).resolve() for v in range(self.views)]


def native_pipeline(transform, decode_kwargs: dict | None = None) -> NativePipeline | MultiViewPipeline:
    """The native pipeline of ``transform`` (a :class:`~fastprep.transforms.MultiView` or a
    single pipeline). Raises :class:`Unsupported` saying why there is none."""
    if callable(getattr(transform, "view_transforms", None)):
        return MultiViewPipeline.compile(transform, decode_kwargs)
    return NativePipeline.compile(transform, decode_kwargs)


def _batch_tables(plans) -> tuple[torch.Tensor, torch.Tensor, list]:
    """The ``(plans, steps, extras)`` of ``decode_batch`` for a list of :class:`Plan` and
    :class:`PlanRef`; a whole :class:`PlannedBatch` in order is used as it is."""
    first = plans[0]
    if (isinstance(first, PlanRef) and len(first.batch.plans) == len(plans)
            and all(type(p) is PlanRef and p.batch is first.batch and p.position == j for j, p in enumerate(plans))):
        return as_bytes(first.batch.plans), first.batch.steps, first.batch.extras
    records = np.zeros(len(plans), dtype=_PLAN)
    step_lists: list[np.ndarray] = []
    extras: list[torch.Tensor] = []
    total = 0
    for j, p in enumerate(plans):
        plan = p.resolve() if isinstance(p, PlanRef) else p
        records[j] = plan.record
        records[j]["first_step"] = total
        steps = plan.steps.copy()
        if plan.extras:
            steps = _renumber_extras(steps, {k: len(extras) + k for k in range(len(plan.extras))})
            extras.extend(plan.extras)
        step_lists.append(steps)
        total += len(steps)
    steps = np.concatenate(step_lists) if step_lists else np.zeros(0, dtype=_STEP)
    return as_bytes(records), as_bytes(steps), extras


def _plan_routes(views, specs, datas, keys, max_pixels, exif, ref, generator: torch.Generator | None = None) -> list:
    """The body of both ``plan_batch`` methods: one ``torch.ops.fastprep.plan_batch`` call
    for ``views`` (their plans stored sample-major), then per sample its ``(route, value)``,
    a planned sample's value being ``ref(batch, sample)``; every sample routes to Python
    when ``specs`` is None (a pipeline the native planner does not draw). ``generator``: draw
    on it (every sample in turn) instead of on generators seeded by the keys."""
    datas, keys = list(datas), list(keys)
    if len(keys) != len(datas):
        raise ValueError(f"datas and keys must have the same length, got {len(datas)} and {len(keys)}")
    if specs is None:
        for i, d in enumerate(datas):
            _check_data(d, f"datas[{i}]")
        return [("python", None)] * len(datas)
    signed = torch.tensor([k - (1 << 64) if k >= 1 << 63 else k for k in keys], dtype=torch.int64)
    progs = [v._program for v in views]
    plans_b, steps, extras, hw, status, text = _on_data(datas, lambda checked: torch.ops.fastprep.plan_batch(
        checked, signed, specs, [p.nodes for p in progs], [p.ints for p in progs], [p.floats for p in progs],
        [p.num_roots for p in progs], [v._num_float for v in views], list(DCT_SCALES), int(max_pixels), bool(exif),
        any(v._whole_file for v in views), generator))
    plans = plans_b.numpy().view(_PLAN)
    batch = PlannedBatch(plans, steps, list(extras))
    no_draw = [v for v, view in enumerate(views) if view._keyed_draw == "none"]
    sizes = hw.tolist() if no_draw else []
    V = len(views)
    raw = None
    out: list = []
    planned = []
    for j, (code, start, length) in enumerate(status.tolist()):
        if code == _ROUTE_PLANNED:
            planned.append(j)
            out.append(("plan", ref(batch, j)))
        elif code == _ROUTE_ERROR:
            raw = text.numpy().tobytes() if raw is None else raw
            out.append(("error", raw[start:start + length].decode("utf-8", "replace")))
        else:
            out.append(("python", None))
    for v in no_draw:
        views[v]._fill_no_draw(plans, [j * V + v for j in planned], [sizes[j] for j in planned])
    return out


def _check_whole_file(data: torch.Tensor, decode: OnDecoded | OnPIL) -> None:
    """A v2 pipeline's reference (``OnDecoded``) decodes the whole file, which fails on a
    truncated file even where the window the native decode reads is intact. A file that ends
    in EOI (``FF D9``) is not truncated; one that does not is decoded whole once here, which
    raises the reference's :class:`~fastprep.io.DecodeError` (``plan_batch`` leaves such files
    to this path)."""
    n = data.numel()
    if n >= 2 and int(data[n - 2]) == 0xFF and int(data[n - 1]) == 0xD9:
        return
    if isinstance(decode, OnPIL):  # its reference is Pillow's decode
        open_rgb(data.numpy().tobytes(), decode.max_pixels)
        return
    max_scans = fio.DEFAULT_MAX_SCANS if decode.max_scans is None else decode.max_scans  # as OnDecoded's call
    fio.decode_jpeg(data, decode.mode, max_pixels=decode.max_pixels, strict=decode.strict, max_scans=max_scans)


def _statuses(status: torch.Tensor, text: torch.Tensor) -> list[tuple[int, str]]:
    """``decode_batch``'s ``(status, text)`` as ``(code, message)`` per sample. No text means
    that every sample decoded without a word (the op gives every failure a reason), which is
    answered without reading the codes: this runs right after the batch's decode, when the
    caches are cold and each library call costs several times its usual time."""
    if text.numel() == 0:
        return [(STATUS_OK, "")] * status.shape[0]
    raw = text.numpy().tobytes()
    return [(int(code), raw[start:start + length].decode("utf-8", "replace"))
            for code, start, length in status.tolist()]


def _number_key(values):
    """A hashable key for a ``mean`` or ``std`` argument: ``()`` for ``None``, the tuple for a
    list or tuple of ints and floats, and ``None`` (no key: not remembered) for anything else."""
    if values is None:
        return ()
    if isinstance(values, (list, tuple)) and all(type(v) in (int, float) for v in values):
        return tuple(values)
    return None


def _on_data(datas: list, call):
    """``call(datas)``, the encoded files checked by the op itself: ``plan_batch`` and
    ``decode_batch`` check every one (uint8, 1-D, on the CPU, contiguous) before they work on
    any, and this runs on every batch, so the per-file checks in Python run only when the op
    refuses: to raise their clearer error, or to give it contiguous copies and call again."""
    try:
        return call(datas)
    except (TypeError, ValueError, RuntimeError):
        try:
            checked = [_check_data(d, f"datas[{i}]") for i, d in enumerate(datas)]
        except (TypeError, ValueError) as e:
            raise e from None  # the clearer error alone
        if all(c is d for c, d in zip(checked, datas)):
            raise  # the files were fine: the op's own error
    return call(checked)


def _check_data(data, name) -> torch.Tensor:
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"{name} must be a uint8 1-D tensor of encoded bytes, got {type(data).__name__}")
    return checked_tensor(data, name)


def _check_threads(num_threads, n) -> int:
    if num_threads is None:
        return max(1, min(usable_cpus(), n))
    if not is_int(num_threads):
        raise TypeError(f"num_threads must be an int or None, got {num_threads!r}")
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    return max(1, min(int(num_threads), n))


def _per_sample_views(transform, data: torch.Tensor) -> list | None:
    """``MultiView(views)(data)`` as the loader runs it: every view's draws made on torch's
    default generator in view order (by the native planner, ``plan_batch`` given the generator;
    by :meth:`MultiViewPipeline.plan` for draws it does not make), then one native call on the
    calling thread for a batch of one. ``None``, the generator left as it was, where the views
    do not compile natively, a torch function mode is active (it may redirect the draws), or
    the file does not take this path (not a JPEG, a decode warning or error): the view-by-view
    call then gives the result, or the error, itself. The compiled pipeline is kept on the
    MultiView (not pickled), keyed by its views."""
    single = _single_runner(transform)
    if single is None or torch._C._is_torch_function_mode_enabled():
        return None
    generator = torch.default_generator
    state = generator.get_state()
    try:
        views = single(data, generator, state)
    except Exception:  # the view-by-view call raises (or warns) as the views do
        views = None
    if views is None:
        generator.set_state(state)
    return views


class _SingleSample:
    """A :class:`MultiViewPipeline` run on one sample with the draws on a given generator: the
    arguments of ``plan_batch`` and ``decode_batch`` that do not change, prepared once."""

    def __init__(self, pipe: MultiViewPipeline) -> None:
        self.pipe = pipe
        views = pipe.views
        progs = [v._program for v in views]
        self.plan_args = (pipe._specs, [p.nodes for p in progs], [p.ints for p in progs], [p.floats for p in progs],
                          [p.num_roots for p in progs], [v._num_float for v in views], list(DCT_SCALES), 0, False,
                          any(v._whole_file for v in views))
        self.key = torch.zeros(1, dtype=torch.int64)
        self.no_draw = [v for v, view in enumerate(views) if view._keyed_draw == "none"]
        self.dtype = torch.float32 if pipe.float_output else torch.uint8
        self.shapes = [(1, c, *size) for c, size in zip(pipe.channels, pipe.size)]
        first = views[0]
        self.converts = torch.cat([v._conversion(self.dtype, None, None, None)[0] for v in views])
        self.decode_args = (first.decode_channels, first._mode, first._max_pixels, first._strict, first._max_scans)

    def __call__(self, data: torch.Tensor, generator: torch.Generator, state: torch.Tensor) -> list | None:
        """The views of ``data`` drawn on ``generator`` (whose state before is ``state``), or
        ``None`` where the file does not take this path."""
        data = _check_data(data, "data")
        pipe = self.pipe
        outs = [torch.empty(shape, dtype=self.dtype) for shape in self.shapes]
        route = _ROUTE_PYTHON if pipe._specs is None else None
        if route is None:
            records, steps, extras, hw, status, _ = torch.ops.fastprep.plan_batch(
                [data], self.key, *self.plan_args, generator)
            route = int(status[0, 0])
        if route == _ROUTE_PLANNED:
            if self.no_draw:
                plans, size = records.numpy().view(_PLAN), hw[0].tolist()
                for v in self.no_draw:
                    pipe.views[v]._fill_no_draw(plans, [v], [size])
            status, _ = torch.ops.fastprep.decode_batch(
                [data], records, steps, list(extras), pipe._fills, outs, *self.decode_args, self.converts, 1)
            ok = int(status[0, 0]) == STATUS_OK
        elif route == _ROUTE_PYTHON:  # the views' own draws, on the default generator
            if pipe._specs is not None:  # the native planner may have drawn before leaving it here
                generator.set_state(state)
            ok = [s for s, _ in pipe.run([data], [pipe.plan(data)], outs, num_threads=1)] == [STATUS_OK]
        else:
            ok = False
        return [out[0] for out in outs] if ok else None


def _single_runner(transform) -> _SingleSample | None:
    """The MultiView's prepared pipeline (``None``: it does not compile), cached on it."""
    key = tuple(map(id, transform.views))
    cached = transform.__dict__.get("_fastprep_native")
    if cached is None or cached[0] != key:
        try:
            single: _SingleSample | None = _SingleSample(MultiViewPipeline.compile(transform))
        except Unsupported:
            single = None
        cached = (key, single)
        transform.__dict__["_fastprep_native"] = cached
    return cached[1]


register_per_sample_runner(_per_sample_views)
