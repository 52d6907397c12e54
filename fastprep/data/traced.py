"""Traced pipelines: a user's own transform on the threads engine (:class:`TracedPipeline`).

A transform the compiler does not know -- a user's class, such as DINO's multi-crop class,
whose ``__call__`` applies several ``Compose`` pipelines to the PIL image and returns a list --
runs per sample in two parts:

* **plan** (reader threads): the transform is called on a stand-in image
  (:class:`~fastprep.transforms._trace.LazyImage`: the file's mode and size, no pixels) under the
  sample's seeds (:func:`~fastprep._seeding.keyed_sample_rng`: what ``sample_rng(seed, epoch,
  index)`` seeds, torch's draws on a private generator); the user's code makes its own draws
  and the stand-in records the Pillow and torchvision calls it receives. Per view, the result
  is the chain of ops from the source image to the tensor.
* **run** (builder thread, ``num_workers`` threads): the file is decoded once -- only the
  window that the views' first crops cover (their union), by fastprep's JPEG decode, which
  gives Pillow's ``convert("RGB")`` bits (probed against the installed Pillow) -- and each
  view's ops are replayed on it: Pillow's own calls with the recorded arguments (so the same
  arithmetic; Pillow releases the GIL in its C code), ``ToTensor`` and ``Normalize`` written
  straight into the view's batch with torch's operations in torchvision's order.

A sample whose trace needs pixel values (a ``histogram()``, ``getpixel``, ``np.asarray`` of
the image, an op that is not recorded) runs as written on the real image, under the same
seeds: exact either way, counted in :attr:`TracedPipeline.literal_samples` with the reason.
A transform that does so on the probe traces at build time is not traced at all
(:class:`Unsupported`, whose message becomes the loader's ``engine_reason``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io as _io
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import PIL.Image
import PIL.ImageFilter
import torch

from .. import _ops  # noqa: F401  (registers torch.ops.fastprep.*)
from .. import io as fio
from .._seeding import (held_process_rngs, keyed_sample_rng, private_generator_draws, sample_key,
                        seal_private_generator)
from .._threads import usable_cpus
from ..transforms._native import Unsupported, pack_steps
from ..transforms._pil import PIL_FILTERS, OnPIL, open_rgb, pil_exact_reason
from ..transforms._pil_geometry_ops import pil_geometry_reason
from ..transforms._pil_ops import twin_reason
from ..transforms import OnDecoded
from ..transforms._compile import output_dtype, takes_pil_as_tensor
from ._tracers import TracerDied, default_processes, tracers
from ..transforms._trace import (LazyImage, LazyTensor, PixelRead, composes_answered, enhanced, install_hooks,
                                 view_leaves)

__all__ = ["TracedPipeline", "TracedPlan"]

#: what a TracedPipeline's pickle leaves out: the loader's threads, locks, counts and processes
_NOT_PICKLED = frozenset(("_pool", "_pool_size", "_count_lock", "literal_samples", "_tracers", "_planned",
                          "traced_elsewhere", "_payload", "_given", "tracing_reason"))


def _forget_given(given: list) -> None:
    """Drop a gone pipeline's pickles from the tracing processes."""
    while given:
        pool, token = given.pop()
        pool.forget(token)

#: samples a pipeline plans in the loader's process before its traces go to tracing processes
#: (:mod:`._tracers`; a short loader never starts them)
TRACE_AFTER = 512

#: stand-in image sizes (width, height) of the probe traces, and their count per size
_PROBE_SIZES = ((500, 375), (375, 500), (640, 427))
_PROBES_PER_SIZE = 3


class TracedPlan:
    """One sample's plan: its views' recorded programs and the window to decode (``window``:
    ``(top, left, height, width)``; ``pillow``: decode with Pillow instead, a file fastprep's
    JPEG decode does not take), or ``literal``: the transform's own output (a sample whose
    trace needed pixels), with ``reason``."""

    __slots__ = ("views", "window", "pillow", "literal", "reason", "key", "compiled", "native", "records")

    def __init__(self, key: int, views=None, window=None, pillow=False, literal=None, reason=None, compiled=None,
                 records=None):
        self.key, self.views, self.window, self.pillow = key, views, window, pillow
        self.literal, self.reason = literal, reason
        #: per view its :func:`view_record`, made by a tracing process (``views`` is then
        #: ``None``): the sample is replayed from them and the window alone
        self.records = records
        #: the NativePipeline of a sample whose one view is a whole Compose the native compiler
        #: takes (see :func:`_compiled_compose`), and its native plan (``native``)
        self.compiled = compiled
        self.native = None


class _CompiledComposes:
    """Per ``Compose`` object (by identity, the object kept alive while its entry is), its
    native pipeline when the native compiler takes it whole as ImageFolder's transform -- the
    same function of the RGB image, its draws made natively from the sample's key -- else
    ``None``.

    At most :data:`_MAX_COMPOSES` entries, the least recently used one making room for a new
    one, so a long-lived process that builds loader after loader keeps the compiled route. A
    transform that builds a new Compose on every call would pay for a compile per sample: once
    :data:`_MAX_COMPOSES` entries have left after a single use, new Composes are traced op by
    op instead."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: collections.OrderedDict[int, list] = collections.OrderedDict()  # id -> [compose, pipe, uses]
        self._multi: collections.OrderedDict[tuple, tuple[tuple, Any]] = collections.OrderedDict()
        self._single_use = 0  # entries that left after one use: Composes made per call

    def get(self, compose: Any):
        with self._lock:
            entry = self._known.get(id(compose))
            if entry is not None and entry[0] is compose:
                entry[2] += 1
                self._known.move_to_end(id(compose))
                return entry[1]
            if self._single_use >= _MAX_COMPOSES:
                return None
        pipe = None
        try:
            from .native import NativePipeline

            wrapped = OnDecoded(compose) if takes_pil_as_tensor(compose) else OnPIL(compose)
            candidate = NativePipeline.compile(wrapped)
            dtype = output_dtype(wrapped)
            if (candidate.float_output and dtype == torch.float32) or (not candidate.float_output
                                                                       and dtype == torch.uint8):
                pipe = candidate
        except Exception:  # noqa: BLE001 -- not compiled: traced op by op instead
            pipe = None
        with self._lock:
            self._known[id(compose)] = [compose, pipe, 1]
            self._known.move_to_end(id(compose))
            while len(self._known) > _MAX_COMPOSES:
                _, left = self._known.popitem(last=False)
                self._single_use += left[2] <= 1
        return pipe

    def multi(self, pipes: list):
        """The :class:`MultiViewPipeline` of these compiled Composes' pipelines, in this order
        (at most :data:`_MAX_COMPOSES` combinations kept, the least recently used one leaving
        first); PixelRead where they cannot share a sample's decode."""
        key = tuple(id(p) for p in pipes)
        with self._lock:
            entry = self._multi.get(key)
            if entry is not None and all(a is b for a, b in zip(entry[0], pipes)):
                self._multi.move_to_end(key)
                return entry[1]
        from .native import MultiViewPipeline

        try:
            multi = MultiViewPipeline(tuple(p.transform for p in pipes), list(pipes))
        except Unsupported as e:
            raise PixelRead(f"the compiled Composes cannot share a decode: {e}") from None
        with self._lock:  # the least recently used combination makes room, as in get
            self._multi[key] = (tuple(pipes), multi)
            self._multi.move_to_end(key)
            while len(self._multi) > _MAX_COMPOSES:
                self._multi.popitem(last=False)
        return multi


#: at most this many Composes are compiled and kept (the least recently used one leaves for a
#: new one); after this many left after a single use (a transform that makes a new Compose per
#: call), new ones are traced op by op
_MAX_COMPOSES = 64
_COMPOSES = _CompiledComposes()


def _is_plain_jpeg(data: torch.Tensor) -> bool:
    """A JPEG that ends in EOI (a truncated file goes to Pillow, whose decode is the reference)."""
    a = data.numpy()  # one view: a tensor's own indexing costs about 1 us an element
    n = a.size
    return n >= 4 and a[0] == 0xFF and a[1] == 0xD8 and a[n - 2] == 0xFF and a[n - 1] == 0xD9


def _union_window(views: list[LazyTensor], width: int, height: int) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` covering every view's first crop (clipped to the image);
    the whole image when a view does not start with a crop."""
    boxes = []
    for v in views:
        ops = v.image.ops
        if not ops or ops[0][0] != "crop":
            return 0, 0, height, width
        boxes.append(ops[0][1])
    x0 = max(0, min(b[0] for b in boxes))
    y0 = max(0, min(b[1] for b in boxes))
    x1 = min(width, max(b[2] for b in boxes))
    y1 = min(height, max(b[3] for b in boxes))
    if x1 <= x0 or y1 <= y0:  # every crop lies outside the image: Pillow pads them; decode a pixel
        return 0, 0, 1, 1
    return y0, x0, y1 - y0, x1 - x0


def _native_resize(op: tuple, mode: str) -> int | None:
    """``torch.ops.fastprep.pil_resize``'s filter id for a recorded ``resize`` it reproduces
    (Pillow's default filter is bicubic), ``None`` for one it does not."""
    if op[0] != "method" or op[1] != "resize" or mode != "RGB":
        return None
    kwargs = op[3]
    if kwargs["box"] is not None or kwargs["reducing_gap"] is not None:
        return None
    resample = PIL.Image.Resampling.BICUBIC if kwargs["resample"] is None else kwargs["resample"]
    try:
        return PIL_FILTERS.get(PIL.Image.Resampling(resample))
    except ValueError:
        return None


class _Decoded:
    """A sample's decoded window: ``rgb`` ``[3, h, w]`` uint8 (interleaved memory) whose pixel
    ``(0, 0)`` is the image's ``(left, top)`` = ``origin``; its PIL image made on first use."""

    __slots__ = ("rgb", "origin", "_pil")

    def __init__(self, rgb: torch.Tensor | None, origin: tuple[int, int], pil: PIL.Image.Image | None = None):
        self.rgb, self.origin, self._pil = rgb, origin, pil

    def pil(self) -> PIL.Image.Image:
        if self._pil is None:
            assert self.rgb is not None
            self._pil = PIL.Image.fromarray(self.rgb.permute(1, 2, 0).numpy(), "RGB")
        return self._pil


def _first_resize(ops: tuple, base: _Decoded, mode: str) -> torch.Tensor | None:
    """A view that starts with ``crop`` + ``resize`` inside the decoded window, resized by
    ``pil_resize`` straight from the window (Pillow's arithmetic, no copy of the crop);
    ``None`` where it does not apply."""
    if base.rgb is None or len(ops) < 2 or ops[0][0] != "crop":
        return None
    fid = _native_resize(ops[1], mode)
    if fid is None:
        return None
    x0, y0, x1, y1 = ops[0][1]
    x0, y0, x1, y1 = x0 - base.origin[0], y0 - base.origin[1], x1 - base.origin[0], y1 - base.origin[1]
    _, h, w = base.rgb.shape
    if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
        return None
    ow, oh = ops[1][2][0]
    crop = base.rgb[:, y0:y1, x0:x1]
    if (ow, oh) == (x1 - x0, y1 - y0):  # Pillow returns a copy at the same size
        return crop
    return torch.ops.fastprep.pil_resize(crop, [oh, ow], [0, 0, oh, ow], [y1 - y0, x1 - x0], [0, 0], fid, False)


def _to_pil(image: PIL.Image.Image | torch.Tensor) -> PIL.Image.Image:
    if isinstance(image, PIL.Image.Image):
        return image
    hwc = image.permute(1, 2, 0).contiguous().numpy()
    return PIL.Image.fromarray(hwc[..., 0] if hwc.shape[2] == 1 else hwc, "L" if hwc.shape[2] == 1 else "RGB")


def _twin_step(op: tuple, channels: int, size: tuple[int, int]) -> tuple | None:
    """The pixel step that gives ``op``'s Pillow bits on a uint8 ``[channels, H, W]`` image of
    ``size`` ``(W, H)``: ``(kernel, ints, floats, table)`` (``table``: ``pil_point``'s uint8 lookup
    table, else ``None``), or ``None`` where no kernel does (a PIL twin proved against the
    installed Pillow, a flip, a lookup table)."""
    kind = op[0]
    if kind == "method":
        name, args, kwargs = op[1], op[2], op[3]
        if name in ("rotate", "transform"):
            return _geometry_step(name, args, kwargs, channels, size)
        if name == "transpose" and args[0] in _FLIPS:
            return _FLIPS[args[0]], (), (), None
        if name == "point" and not kwargs:
            table = _point_table(args[0], channels)
            return None if table is None else ("pil_point", (), (), table)
        if name == "filter" and type(args[0]) is PIL.ImageFilter.GaussianBlur and _blur_ok():
            radius = args[0].radius
            rx, ry = (radius, radius) if isinstance(radius, (int, float)) else radius
            return "pil_gaussian_blur", (3,), (float(rx), float(ry)), None
        if name == "convert" and args[0] == "L" and channels == 3 and _twin_ok("rgb_to_grayscale"):
            return "pil_rgb_to_grayscale", (1,), (), None
        return None
    if kind == "call":
        found = _CALL_TWINS.get(op[1])
        if found is None and op[1] is enhanced and not op[3]:
            found = _ENHANCER_TWINS.get(op[2][0].__name__)
            args = op[2][1:]
        else:
            args = op[2]
        if found is None or op[3] or not _twin_ok(found[0]):
            return None
        kernel, twin, arity = found
        if len(args) != arity:
            return None
        if kernel == "rgb_to_grayscale":
            if channels != 3 or args[0] not in (1, 3):
                return None
            return twin, (int(args[0]),), (), None
        return twin, (), tuple(float(a) for a in args), None
    return None


def _geometry_step(name: str, args: tuple, kwargs: dict, channels: int, size: tuple[int, int]) -> tuple | None:
    """``Image.rotate(angle, resample, center=, fillcolor=)`` (no expand or translate) and
    ``Image.transform(size, AFFINE, data, resample, fillcolor=)`` at the image's own size as
    ``pil_rotate`` / ``pil_transform_affine`` steps, for Pillow's nearest, bilinear and bicubic
    and a fill that is ``None`` or ``channels`` whole numbers in [0, 255]."""
    if pil_geometry_reason() is not None:
        return None
    resample, fill = kwargs.get("resample"), kwargs.get("fillcolor")
    if resample not in _GEOMETRY_FILTERS:
        return None
    if fill is None:
        fills: tuple = (0.0,)
    elif isinstance(fill, tuple) and len(fill) == channels and all(type(v) is int and 0 <= v <= 255 for v in fill):
        fills = tuple(float(v) for v in fill)
    else:
        return None
    if name == "rotate":
        angle, center = args[0], kwargs.get("center")
        if kwargs.get("expand") or kwargs.get("translate") is not None or type(angle) not in (int, float):
            return None
        if center is not None and not (len(center) == 2 and all(type(v) in (int, float) for v in center)):
            return None
        where = (float(center[0]), float(center[1])) if center is not None else (0.0, 0.0)
        return ("pil_rotate", (int(resample), len(fills), int(center is not None)), (float(angle), *where, *fills),
                None)
    out_size, method, data = args
    if method != PIL.Image.Transform.AFFINE or tuple(out_size) != tuple(size) or data is None or len(data) != 6 \
            or any(type(v) not in (int, float) for v in data):
        return None
    return "pil_transform_affine", (int(resample), len(fills)), (*(float(v) for v in data), *fills), None


#: Pillow's filters that rotate and transform take natively: NEAREST, BILINEAR, BICUBIC
_GEOMETRY_FILTERS = (PIL.Image.Resampling.NEAREST, PIL.Image.Resampling.BILINEAR, PIL.Image.Resampling.BICUBIC)


def _tensor_op(op: tuple, img: torch.Tensor) -> torch.Tensor | None:
    """``op`` applied to the uint8 ``[C, H, W]`` ``img`` by its :func:`_twin_step`, or ``None``
    where there is none: the op then runs on Pillow itself."""
    if op[0] == "method" and op[1] == "convert" and op[2][0] == "RGB" and img.shape[0] == 1:
        return img.expand(3, -1, -1)
    step = _twin_step(op, img.shape[0], (img.shape[2], img.shape[1]))
    if step is None:
        return None
    kernel, ints, floats, table = step
    extras = None if table is None else [table]
    return torch.ops.fastprep.apply_pixel_kernel(img.contiguous(), kernel, list(ints), list(floats), 0, extras,
                                                 -1 if table is None else 0)


def _point_table(lut: list, channels: int) -> torch.Tensor | None:
    """``Image.point(lut)``'s table for an 8-bit image of ``channels`` bands (band ``c`` maps ``v``
    to ``lut[256 * c + v]``), or ``None`` for one Pillow would not apply so (``pil_point``)."""
    if len(lut) != 256 * channels or any(type(v) is not int or not 0 <= v <= 255 for v in lut):
        return None
    return torch.tensor(lut, dtype=torch.uint8)


#: the flip kernels of Pillow's transpose methods
_FLIPS = {PIL.Image.Transpose.FLIP_LEFT_RIGHT: "horizontal_flip", PIL.Image.Transpose.FLIP_TOP_BOTTOM: "vertical_flip"}


def _replay(ops: tuple, base: _Decoded, mode: str = "RGB") -> PIL.Image.Image | torch.Tensor:
    """A view's image (a PIL image, or a uint8 tensor ``[C, H, W]`` of the same pixels): its
    recorded ops applied to the decoded window, each as the traced code called it, but a
    leading crop + resize by ``pil_resize`` and, on such a tensor, the ops with a PIL-exact
    kernel (:func:`_tensor_op`)."""
    img: PIL.Image.Image | torch.Tensor | None = _first_resize(ops, base, mode)
    start = 2 if img is not None else 0
    if img is None:
        img = base.pil()
    for k in range(start, len(ops)):
        op = ops[k]
        kind = op[0]
        if isinstance(img, torch.Tensor):
            done = _tensor_op(op, img)
            if done is not None:
                img = done
                continue
            img = _to_pil(img)
        if kind == "crop":
            x0, y0, x1, y1 = op[1]
            if k == 0:
                left, top = base.origin
                x0, y0, x1, y1 = x0 - left, y0 - top, x1 - left, y1 - top
            img = img.crop((x0, y0, x1, y1))
        elif kind == "method":
            img = getattr(img, op[1])(*op[2], **op[3])
        else:  # "call": a torchvision PIL function
            img = op[1](img, *op[2], **op[3])
    return img


class _NativeViews:
    """The views of one sample that ``pil_replay_views`` makes in one call (the crop read from the
    decoded window, its resize, every later op a pixel step, ToTensor/ToDtype and a first
    Normalize fused into the write), gathered by :meth:`add`; :meth:`run` makes them."""

    __slots__ = ("images", "crops", "resizes", "steps", "tables", "outs", "scales", "means", "stds", "counts",
                 "after")

    def __init__(self) -> None:
        self.images: list = []  # the decoded window, once
        self.crops: list = []  # per view its crop of it
        self.resizes: list = []
        self.steps: list = []
        self.tables: list = []
        self.outs: list = []
        self.scales: list = []
        self.means: list = []
        self.stds: list = []
        self.counts: list = []
        self.after: list = []  # (out, tensor steps after the write: "setitem")

    def add(self, view: LazyTensor, base: _Decoded, mode: str, out: torch.Tensor) -> bool:
        """Take ``view`` (written into ``out`` by :meth:`run`) where each of its ops has a
        :func:`_twin_step`; ``False`` (nothing taken) where one has not."""
        if base.rgb is None:
            return False
        _, h, w = base.rgb.shape
        record = view_record(view, base.origin, (h, w), mode, tuple(out.shape), len(self.tables))
        if record is None:
            return False
        self.take(record, base.rgb, out)
        return True

    def take(self, record: tuple, rgb: torch.Tensor, out: torch.Tensor) -> None:
        """Take a view's :func:`view_record` (its tables numbered from this sample's count so
        far), cut from the decoded window ``rgb`` (the same for every view of the sample), to be
        written into ``out``."""
        crop, resize, steps, tables, scale, mean, std, after = record
        if not self.images:
            self.images.append(rgb)
        self.crops.extend(crop if crop is not None else (0, 0, rgb.shape[2], rgb.shape[1]))
        self.resizes.extend(resize)
        self.steps.append(torch.frombuffer(steps, dtype=torch.uint8) if steps else _NO_STEPS)
        if tables:
            self.tables.extend(torch.frombuffer(t, dtype=torch.uint8) for t in tables)
        self.outs.append(out)
        self.scales.append(scale)
        if mean:
            self.means.extend(mean)
            self.stds.extend(std)
        self.counts.append(len(mean))
        if after:
            self.after.append((out, after))

    def run(self) -> None:
        if self.images:
            torch.ops.fastprep.pil_replay_views(self.images, self.resizes, self.steps, self.tables, self.outs,
                                                self.scales, self.means, self.stds, self.counts, self.crops)
        for out, steps in self.after:  # "setitem" after the float write
            for _, index, values in steps:
                out[index] = torch.from_numpy(values) if isinstance(values, np.ndarray) else values


_NO_STEPS = torch.empty(0, dtype=torch.uint8)
_RGB_MODE = int(fio.ImageReadMode.RGB)  # decode_jpeg_roi's mode argument


def _portable(values: Any) -> Any:
    """A tensor's values as a NumPy array (cheaper to send between processes), where NumPy has
    its dtype."""
    if isinstance(values, torch.Tensor):
        try:
            return values.numpy()
        except TypeError:  # bfloat16, ...
            return values
    return values


def view_record(view: LazyTensor, origin: tuple[int, int], window: tuple[int, int], mode: str,
                shape: tuple[int, ...], first_table: int = 0) -> tuple | None:
    """What ``pil_replay_views`` needs to make ``view`` from a decoded window of ``window``
    ``(height, width)`` pixels whose pixel ``(0, 0)`` is the image's ``origin`` ``(left, top)``,
    into a tensor of ``shape``, as plain values (a tracing process sends it to the loader):
    ``(crop, resize, steps, tables, scale, mean, std, after)`` -- the first crop within the
    window (``None``: the whole window), ``[out height, out width, filter, flip]`` of a resize
    from it (zeros: none), the later ops' PixelStep records (``pack_steps``; their lookup
    tables numbered from ``first_table``), those tables (bytes), the float write
    (0: none, 1: ``/ 255``, 2: ``* (1 / 255)``), a first Normalize's mean and std, and the
    ``("setitem", index, values)`` steps after the write (values an array or a number).
    ``None`` where an op has no :func:`_twin_step` or the view is not one the call makes."""
    ops = view.image.ops
    if mode != "RGB":
        return None
    height, width = window
    crop, start, resize, size = None, 0, [0, 0, 0, 0], (width, height)
    if ops and ops[0][0] == "crop":
        x0, y0, x1, y1 = ops[0][1]
        x0, y0, x1, y1 = x0 - origin[0], y0 - origin[1], x1 - origin[0], y1 - origin[1]
        if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
            return None
        crop, start, size = (x0, y0, x1, y1), 1, (x1 - x0, y1 - y0)
        fid = _native_resize(ops[1], mode) if len(ops) > 1 else None
        if fid is not None:
            ow, oh = ops[1][2][0]
            if (ow, oh) != size:
                flip = len(ops) > 2 and ops[2][0] == "method" and ops[2][1] == "transpose" \
                    and ops[2][2][0] is PIL.Image.Transpose.FLIP_LEFT_RIGHT
                resize, start, size = [oh, ow, fid, int(flip)], 3 if flip else 2, (ow, oh)
            else:  # Pillow's resize to the same size is a copy
                start = 2
    elif origin != (0, 0):
        return None
    channels, kernels = 3, []
    tables: list[bytearray] = []
    for op in ops[start:]:
        step = _twin_step(op, channels, size)
        if step is None:
            return None
        kernel, ints, floats, table = step
        extra = -1
        if table is not None:
            extra = first_table + len(tables)
            tables.append(bytearray(table.numpy().tobytes()))
        kernels.append((kernel, ints, floats, extra))
        if kernel == "pil_rgb_to_grayscale":
            channels = ints[0]
    steps = view.steps
    mean: list = []
    std: list = []
    if steps and steps[0][0] == "normalize":
        mean, std = steps[0][1].flatten().tolist(), steps[0][2].flatten().tolist()
        steps = steps[1:]
    if any(step[0] == "normalize" for step in steps) or tuple(shape[1:]) != tuple(view.shape[1:]) \
            or shape[0] != channels:
        return None
    after = []
    for _, index, values in steps:  # "setitem"
        if isinstance(index, torch.Tensor) or (isinstance(index, tuple)
                                               and any(isinstance(i, torch.Tensor) for i in index)):
            return None
        after.append(("setitem", index, _portable(values)))
    scale = (2 if view.multiplied else 1) if view.scaled else 0
    return crop, resize, pack_steps(kernels), tables, scale, mean, std, after


def _write_tensor(view: LazyTensor, img: PIL.Image.Image | torch.Tensor, out: torch.Tensor) -> None:
    """``ToTensor`` (``x.to(float32).div(255)``), ``PILToTensor`` (then v2 ``ToDtype(float32,
    scale=True)``: ``mul_(1 / 255)``) of ``img``, then the view's
    tensor steps (``Normalize``'s ``sub_(mean).div_(std)``, ``tensor[index] = values``), written
    into ``out`` ``[C, H, W]``."""
    if isinstance(img, torch.Tensor):
        out.copy_(img)
    else:
        arr = np.array(img)  # writable (torch warns on a read-only array)
        out.copy_(torch.from_numpy(arr).view(img.size[1], img.size[0], -1).permute(2, 0, 1))
    if view.scaled and view.multiplied:  # v2 ToDtype(float32, scale=True)
        out.mul_(1.0 / 255)
    elif view.scaled:
        out.div_(255)
    for step in view.steps:
        if step[0] == "normalize":
            out.sub_(step[1]).div_(step[2])
        else:  # "setitem"
            out[step[1]] = step[2]


#: recorded torchvision PIL functions with a PIL twin: original -> (kernel, twin, number of args)
_CALL_TWINS: dict = {}
#: ImageEnhance classes (recorded as ``enhanced``) -> (kernel, twin, number of args)
_ENHANCER_TWINS = {"Brightness": ("adjust_brightness", "pil_adjust_brightness", 1),
                   "Contrast": ("adjust_contrast", "pil_adjust_contrast", 1),
                   "Color": ("adjust_saturation", "pil_adjust_saturation", 1),
                   "Sharpness": ("adjust_sharpness", "pil_adjust_sharpness", 1)}


def _fill_call_twins() -> None:
    """``_CALL_TWINS`` from torchvision's PIL functions (the originals, which the records hold)
    and ``ImageOps``' histogram ops (with their default arguments only)."""
    import PIL.ImageOps as ImageOps
    import torchvision.transforms._functional_pil as F_pil  # type: ignore[import-untyped, unused-ignore]

    def original(fn):
        return getattr(fn, "__wrapped__", fn)

    for name in ("adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue", "adjust_sharpness"):
        _CALL_TWINS[original(getattr(F_pil, name))] = (name, f"pil_{name}", 1)
    _CALL_TWINS[original(F_pil.to_grayscale)] = ("rgb_to_grayscale", "pil_rgb_to_grayscale", 1)
    _CALL_TWINS[original(F_pil.autocontrast)] = ("autocontrast", "pil_autocontrast", 0)
    _CALL_TWINS[original(F_pil.equalize)] = ("equalize", "pil_equalize", 0)
    _CALL_TWINS[original(ImageOps.autocontrast)] = ("autocontrast", "pil_autocontrast", 0)
    _CALL_TWINS[original(ImageOps.equalize)] = ("equalize", "pil_equalize", 0)


@functools.cache
def _twin_ok(kernel: str) -> bool:
    """The PIL twin of ``kernel`` gives the installed Pillow's bits on its probe."""
    return twin_reason(kernel) is None


@functools.cache
def _blur_ok() -> bool:
    """``pil_gaussian_blur`` gives ``ImageFilter.GaussianBlur``'s bits on probe images of the
    installed Pillow (radii of the self-supervised recipes, 0, fractional, anisotropic; tiny,
    thin and very wide images of 1 and 3 channels)."""
    rng = np.random.default_rng(5)
    try:
        for h, w in ((37, 41), (1, 1), (2, 9), (9, 1), (3, 700), (96, 96)):
            for c in (1, 3):
                arr = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
                image = PIL.Image.fromarray(arr[..., 0] if c == 1 else arr, "L" if c == 1 else "RGB")
                tensor = torch.from_numpy(arr).permute(2, 0, 1).contiguous()
                for radius in (0.1, 0.5, 1.0, 1.37, 2.0, 0.0, (0.7, 1.9), 5.5):
                    rx, ry = (radius, radius) if isinstance(radius, float) else radius
                    want = np.asarray(image.filter(PIL.ImageFilter.GaussianBlur(radius))).reshape(h, w, c)
                    got = torch.ops.fastprep.apply_pixel_kernel(tensor, "pil_gaussian_blur", [3], [rx, ry])
                    got = got.permute(1, 2, 0).numpy()
                    if not np.array_equal(got, want):
                        return False
    except Exception:  # noqa: BLE001 -- a probe that cannot run proves nothing
        return False
    return True


def _flat_output(result: Any) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


class TracedPipeline:
    """A user's transform on PIL images, traced per sample and replayed on the threads engine
    (see the module's docstring). Built by :meth:`compile`; the engine calls :meth:`plan_batch`
    (or :meth:`plan`) and :meth:`run`.

    Attributes:
        transform: the user's transform (called on ``Image.open(f).convert("RGB")``).
        listed: it returns a list of views (``channels``/``size`` are then per view).
        traced_elsewhere: samples traced in tracing processes (:mod:`._tracers`) so far.
        tracing_reason: why the traces stay in the loader's process (``None``: they do not,
            or not yet).
        channels, size: output channels and ``(H, W)`` (lists, one per view, when ``listed``).
        float_output: the views are float32 (``ToTensor``), else uint8 (``PILToTensor``).
        literal_samples: ``{reason: count}`` of samples run as written, so far.
    """

    def __init__(self, transform: Any, shapes: list[tuple], dtype: torch.dtype, listed: bool, max_pixels: int,
                 stored: Any = None):
        self.transform = transform
        #: ``None``: the transform is given ``Image.open(f).convert("RGB")`` (ImageFolder's
        #: loader); else the opener of images as a ``datasets`` column stores them
        #: (:class:`fastprep.data.hf._StoredImage`), whose samples other than plain RGB
        #: JPEGs run as written
        self.stored = stored
        self.listed = listed
        self.shapes = shapes
        channels = [s[0] for s in shapes]
        sizes = [tuple(s[1:]) for s in shapes]
        self.channels: Any = channels if listed else channels[0]
        self.size: Any = sizes if listed else sizes[0]
        self.float_output = dtype == torch.float32
        self.dtype = dtype
        self.max_pixels = int(max_pixels)
        self.literal_samples: collections.Counter = collections.Counter()
        self._count_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        #: ``(Tracers, token)`` once the traces run in tracing processes, ``False`` where they
        #: cannot (``tracing_reason`` says why), ``None`` before the pipeline has planned
        #: ``TRACE_AFTER`` samples
        self._tracers: Any = None
        self._planned = 0
        self.tracing_reason: str | None = None
        self._payload: bytes | None = None  # the pipeline as last given to the tracing processes
        self._given: list = []  # its (Tracers, token), dropped from them when this pipeline goes
        weakref.finalize(self, _forget_given, self._given)
        #: the probe traces found whole Composes the native compiler takes (the route
        #: :meth:`_plan` tries first), which stay in the loader's process
        self._compiled_route = False
        #: samples traced in tracing processes, so far
        self.traced_elsewhere = 0

    # ------------------------------------------------------------------ building

    @classmethod
    def compile(cls, transform: Any, max_pixels: int = fio.DEFAULT_MAX_PIXELS, stored: Any = None) -> TracedPipeline:
        """Trace ``transform`` on stand-in images of a few sizes under a few seeds; the views'
        shapes and dtype must not depend on them (a batch needs one).

        Raises:
            Unsupported: the transform reads pixels, returns something other than tensors made
                by ``ToTensor``/``PILToTensor`` (a list of them), or shapes that vary; or the
                installed Pillow does not give fastprep's decode bits.
        """
        if not callable(transform):
            raise Unsupported(f"the transform is a {type(transform).__name__}, not callable")
        reason = pil_exact_reason()
        if reason is not None:
            raise Unsupported(reason)
        if torch.get_default_dtype() != torch.float32:
            raise Unsupported(f"torch's default dtype is {torch.get_default_dtype()}: ToTensor's output is traced as "
                              "float32")
        install_hooks()
        if not _CALL_TWINS:
            _fill_call_twins()
        found: set = set()
        errors = []
        compiled = False  # a probe's views were compiled Composes' answers
        for w, h in _PROBE_SIZES:
            for k in range(_PROBES_PER_SIZE):
                key = sample_key(0x7472616365, w * 1000 + h, k)
                try:
                    views, listed = _probe(transform, w, h, key)
                    compiled = compiled or any(v.image.ops[:1] and v.image.ops[0][0] == "compiled" for v in views)
                except PixelRead as e:
                    raise Unsupported(f"tracing {type(transform).__name__} on a stand-in image: {e}; it runs as "
                                      "written") from None
                except Exception as e:  # noqa: BLE001 -- maybe the user's own error on some draws
                    errors.append(e)
                    continue
                found.add((tuple(tuple(v.shape) for v in views), tuple(v.dtype for v in views), listed))
        if not found:
            first = errors[0]
            raise Unsupported(f"tracing {type(transform).__name__} on a stand-in image raised "
                              f"{type(first).__name__}: {first}; it runs as written")
        if len(found) > 1:
            raise Unsupported(f"{type(transform).__name__}'s outputs change shape or dtype with the image or the "
                              f"draws ({sorted(str(f[0]) for f in found)[:3]}): a batch needs one")
        shapes, dtypes, listed = found.pop()
        if len(set(dtypes)) > 1:
            raise Unsupported(f"{type(transform).__name__}'s views are of several dtypes: the loader needs one kind")
        pipeline = cls(transform, list(shapes), dtypes[0], listed, max_pixels, stored)
        pipeline._compiled_route = compiled
        return pipeline

    # ------------------------------------------------------------------ planning

    def plan(self, data: torch.Tensor, key: int | None = None) -> TracedPlan:
        """Trace the transform for one sample (``key``: its ``sample_key``; ``None``: a fresh
        draw, as an unseeded loader's sample). A torchvision ``Compose`` the native compiler
        takes whole, called on the sample's image before any torch draw and giving its only
        view, is not traced but planned natively (the plan's ``compiled`` and ``native``).

        Raises:
            fastprep.io.DecodeError: the file is not an image Pillow or fastprep can read, or
                has more than ``max_pixels`` pixels.
            Exception: what the transform itself raises on this sample (run as written).
        """
        if key is None:
            key = int(torch.randint(0, 2 ** 63 - 1, (), dtype=torch.int64))
        return self._plan_natively([self._plan(data, key)], [data], False)[0]

    def _plan(self, data: torch.Tensor, key: int, *, compiled: bool = True) -> TracedPlan:
        """:meth:`plan`'s trace; a compiled view's native plan is left to
        :meth:`_plan_natively` (``compiled=False``: every Compose traced op by op).

        Raises:
            fastprep.io.DecodeError: the file is not an image Pillow or fastprep can read, or
                has more than ``max_pixels`` pixels.
            Exception: what the transform itself raises on this sample (run as written).
        """
        jpeg = _is_plain_jpeg(data)
        if jpeg:
            info = fio.jpeg_info(data)
            width, height = info.width, info.height
            if self.max_pixels and width * height > self.max_pixels:
                raise fio.DecodeError(f"image of {height}x{width} = {width * height} pixels exceeds "
                                      f"max_pixels={self.max_pixels}")
        else:
            width, height = self._pillow_size(data)
        if self.stored is not None:
            as_stored = self.stored.reason(data, info.num_components if jpeg else None)
            if as_stored is not None:
                return self._literal(data, key, as_stored)
        views = None
        if compiled and jpeg:
            try:  # whole Composes the native compiler takes are not traced op by op
                views, _ = _trace(self.transform, width, height, key, compiled=True)
                self._check(views)
                pipe = _compiled_view(views)
            except Exception:  # noqa: BLE001 -- traced op by op below, which says what went wrong
                views = None
            else:
                if pipe is not None:
                    return TracedPlan(key, views=views, compiled=pipe)
        try:
            if views is None:
                views, _ = _trace(self.transform, width, height, key)
                self._check(views)
        except PixelRead as e:
            return self._literal(data, key, str(e))
        except Exception as e:  # noqa: BLE001 -- the user's own error: its own run raises it
            return self._literal(data, key, f"tracing raised {type(e).__name__}")
        window = _union_window(views, width, height) if jpeg else None
        return TracedPlan(key, views=views, window=window, pillow=not jpeg)

    def trace_records(self, items: list[tuple[int, int, int]]) -> list:
        """What a tracing process (:mod:`fastprep.data._tracers`) answers for samples of plain
        JPEGs given as ``(key, width, height)``: per sample ``(window, records)`` (its
        :func:`view_record` per view, to replay from the window alone), or ``None`` where the
        loader's process traces the sample itself (an op without a pixel step, pixels read, the
        transform raised: what :meth:`_plan` would make of it)."""
        out: list = []
        with held_process_rngs():
            for key, width, height in items:
                try:
                    views, _ = _trace(self.transform, width, height, key)
                    self._check(views)
                except Exception:  # noqa: BLE001 -- traced again by the loader, which says what went wrong
                    out.append(None)
                    continue
                window = _union_window(views, width, height)
                top, left, wh, ww = window
                records: list = []
                tables = 0
                for view, shape in zip(views, self.shapes):
                    record = view_record(view, (left, top), (wh, ww), "RGB", shape, tables)
                    if record is None:
                        break
                    tables += len(record[3])
                    records.append(record)
                out.append((window, records) if len(records) == len(views) else None)
        return out

    def __getstate__(self) -> dict:
        """What a tracing process is given: the transform and what the trace checks, not the
        loader's threads, locks and counts."""
        return {k: v for k, v in self.__dict__.items() if k not in _NOT_PICKLED}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.literal_samples = collections.Counter()
        self._count_lock = threading.Lock()
        self.traced_elsewhere = self._planned = 0
        self._payload, self._given, self.tracing_reason = None, [], None
        self._pool, self._pool_size, self._tracers = None, 0, False  # a copy traces where it is
        install_hooks()  # in a tracing process: the recording hooks the trace needs
        if not _CALL_TWINS:
            _fill_call_twins()

    def _plan_natively(self, plans: list, datas: list, exif: bool) -> list:
        """Give the plans of samples whose view is a compiled Compose their native plans (one
        native call per pipeline); a sample the native planner routes elsewhere (not a plain
        JPEG for it, an error) is traced op by op instead. Returns the plans."""
        groups: dict[int, list[int]] = {}
        for j, plan in enumerate(plans):
            if isinstance(plan, TracedPlan) and plan.compiled is not None:
                groups.setdefault(id(plan.compiled), []).append(j)
        for members in groups.values():
            pipe = plans[members[0]].compiled
            routes = pipe.plan_batch([datas[j] for j in members], [plans[j].key for j in members],
                                     max_pixels=self.max_pixels, exif=exif)
            for j, (route, value) in zip(members, routes):
                if route == "plan":
                    plans[j].native = value
                else:
                    plans[j] = self._plan(datas[j], plans[j].key, compiled=False)
        return plans

    def _pillow_size(self, data: torch.Tensor) -> tuple[int, int]:
        try:
            with PIL.Image.open(_io.BytesIO(data.numpy().tobytes())) as im:
                return im.size
        except PIL.UnidentifiedImageError:
            raise fio.DecodeError(f"Pillow cannot identify the image data (first bytes "
                                  f"{data[:8].numpy().tobytes()!r})") from None

    def _check(self, views: list[LazyTensor]) -> None:
        got = [tuple(v.shape) for v in views]
        if got != [tuple(s) for s in self.shapes] or any(v.dtype != self.dtype for v in views):
            raise PixelRead(f"the views' shapes {got} differ from the batch's {self.shapes}")

    def _literal(self, data: torch.Tensor, key: int, reason: str) -> TracedPlan:
        """The transform as written on ``Image.open(f).convert("RGB")`` under the sample's seeds."""
        raw = data.numpy().tobytes()
        image = open_rgb(raw, self.max_pixels) if self.stored is None else self.stored.open(raw)
        with keyed_sample_rng(key):
            result = self.transform(image)
        with self._count_lock:
            self.literal_samples[reason] += 1
        return TracedPlan(key, literal=_flat_output(result), reason=reason)

    def plan_batch(self, datas, keys, *, max_pixels: int = 0, exif: bool = False) -> list:
        """:meth:`plan` per sample, as ``(route, value)`` (:meth:`NativePipeline.plan_batch`'s
        routes): ``("plan", TracedPlan)``, ``("error", message)`` for a file that cannot be
        read, ``("python", None)`` for a sample whose transform raises (the per-sample path
        raises it again, naming the file) or an EXIF-rotated JPEG with ``exif``."""
        out: list = []
        datas, keys = list(datas), list(keys)
        elsewhere = self._traced_elsewhere(datas, keys)
        with held_process_rngs():  # Python's and NumPy's states saved once for the batch
            for j, (data, key) in enumerate(zip(datas, keys)):
                if j in elsewhere:
                    out.append(elsewhere[j])
                    continue
                try:
                    out.append(("plan", self._plan(data, key)))
                except fio.DecodeError as e:
                    out.append(("error", str(e)))
                except Exception:  # noqa: BLE001 -- raised again by the per-sample path
                    out.append(("python", None))
            plans = [value if route == "plan" else None for route, value in out]
            try:
                plans = self._plan_natively(plans, datas, exif)
            except Exception:  # noqa: BLE001 -- e.g. a DecodeError of a retrace: per sample, each named
                return [self._one_route(d, entry) for d, entry in zip(datas, out)]
        return [("plan", plan) if plan is not None else route for plan, route in zip(plans, out)]

    def _traced_elsewhere(self, datas: list, keys: list) -> dict:
        """``{position: route}`` of the samples a tracing process traced (:mod:`._tracers`):
        plain JPEGs within ``max_pixels`` whose trace it could replay from records; the rest
        (and every sample before the processes are ready) is traced here."""
        tracing = self._tracing(len(datas))
        if tracing is None:
            return {}
        pool, token = tracing
        items, where = [], []
        for j, (data, key) in enumerate(zip(datas, keys)):
            if not _is_plain_jpeg(data):
                continue
            try:
                info = fio.jpeg_info(data)
            except fio.DecodeError:
                continue  # _plan names the error
            if (self.max_pixels and info.width * info.height > self.max_pixels) or (
                    self.stored is not None and self.stored.reason(data, info.num_components) is not None):
                continue
            items.append((key, info.width, info.height))
            where.append(j)
        routes: dict = {}
        answers = pool.call(token, "trace_records", items)
        if pool.reason is not None and not any(a is not None for a in answers):
            self.tracing_reason = pool.reason
        for j, answer in zip(where, answers):
            if isinstance(answer, TracerDied):
                routes[j] = ("error", str(answer))
            elif answer is not None:
                window, records = answer
                routes[j] = ("plan", TracedPlan(keys[j], window=window, records=records))
        with self._count_lock:
            self.traced_elsewhere += len(routes)
        return routes

    def _tracing(self, count: int):
        """``(Tracers, token)`` once this pipeline has planned ``TRACE_AFTER`` samples here;
        ``None`` until then, or where its traces cannot leave (``tracing_reason``). The
        pipeline is pickled again for each batch: a transform your code changed is given to
        the processes again (until they hold it, the loader traces)."""
        if self._tracers is False:
            return None
        if self._tracers is None:
            if self._compiled_route:  # planned natively: a trace here is short and its replay batched
                self._tracers = False
                return None
            self._planned += count
            if self._planned <= TRACE_AFTER:
                return None
            processes = default_processes()
            if processes == 0:
                self._tracers = False
                return None
            tracers().grow(processes)
        pool = tracers()
        payload = pool.pickle(self)
        if isinstance(payload, str):
            self._tracers, self.tracing_reason = False, payload
            self._forget()
            return None
        if payload != self._payload:
            self._forget()
            self._payload = payload
            self._tracers = (pool, pool.give(payload))
            self._given.append(self._tracers)
        return self._tracers

    def _forget(self) -> None:
        """Drop the pickled pipeline from the tracing processes."""
        _forget_given(self._given)

    def _one_route(self, data: torch.Tensor, entry: tuple) -> tuple:
        route, plan = entry
        if route != "plan" or plan.compiled is None:
            return entry
        try:
            return "plan", self.plan(data, plan.key)
        except fio.DecodeError as e:
            return "error", str(e)
        except Exception:  # noqa: BLE001 -- raised again by the per-sample path
            return "python", None

    # ------------------------------------------------------------------ running

    def _executor(self, threads: int) -> ThreadPoolExecutor:
        if self._pool is None or self._pool_size != threads:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fastprep-trace")
            self._pool_size = threads
        return self._pool

    def run(self, datas, plans, out, *, num_threads: int | None = None, timings: dict | None = None,
            color=None, mean=None, std=None) -> list[tuple[int, str]]:
        """Fill row ``i`` of ``out`` (one tensor, or a list with one per view) with sample ``i``.

        Returns:
            ``(status, message)`` per sample: ``(0, "")``, or ``(2, message)`` where its file
            cannot be decoded or its transform raised.
        """
        if color is not None or mean is not None or std is not None:
            raise ValueError("a traced transform converts to float itself: color, mean and std do not apply")
        outs = list(out) if isinstance(out, list) else [out]
        datas, plans = list(datas), list(plans)
        threads = max(1, min(int(num_threads or usable_cpus()), len(datas)))
        rows = [[o[j] for o in outs] for j in range(len(datas))]
        status: list = [None] * len(datas)
        for j, result in self._run_natively(datas, plans, outs, threads).items():
            if result[0] == 0:
                status[j] = result
            else:  # a warning or an error: Pillow's decode, op by op, is the reference
                plans[j] = self._plan(datas[j], plans[j].key, compiled=False)
        todo = [j for j, st in enumerate(status) if st is None]
        args = ([datas[j] for j in todo], [plans[j] for j in todo], [rows[j] for j in todo])
        done: list = [None] * len(todo)
        if threads == 1 or len(todo) < 2:
            done = list(map(self._run_one, *args))
        else:  # one task per thread, each taking the next sample: no future per sample
            pending = iter(range(len(todo)))  # next() hands each position out once

            def work() -> None:
                for k in pending:
                    done[k] = self._run_one(args[0][k], args[1][k], args[2][k])

            for future in [self._executor(threads).submit(work) for _ in range(min(threads, len(todo)))]:
                future.result()
        for j, result in zip(todo, done):
            status[j] = result
        return status

    def _run_natively(self, datas: list, plans: list, outs: list, threads: int) -> dict:
        """Run the samples whose view is a compiled Compose, one native call per pipeline,
        into their rows of ``outs`` (one view); ``{sample: (status, message)}``."""
        groups: dict[int, list[int]] = {}
        for j, plan in enumerate(plans):
            if plan.literal is None and plan.native is not None:
                groups.setdefault(id(plan.compiled), []).append(j)
        done: dict = {}
        for members in groups.values():
            pipe = plans[members[0]].compiled
            whole = len(members) == len(datas)
            targets = outs if whole else [o.new_empty((len(members), *o.shape[1:])) for o in outs]
            results = pipe.run([datas[j] for j in members], [plans[j].native for j in members],
                               targets if len(outs) > 1 else targets[0], num_threads=threads)
            if not whole:
                for o, t in zip(outs, targets):
                    o[members] = t
            done.update(zip(members, results))
        return done

    def _run_one(self, data: torch.Tensor, plan: TracedPlan, rows: list) -> tuple[int, str]:
        try:
            if plan.records is not None:
                try:
                    if self._run_records(data, plan, rows):
                        return 0, ""
                except Exception:  # noqa: BLE001 -- traced here, op by op, which says what went wrong
                    pass
                plan = self._plan(data, plan.key, compiled=False)
            if plan.literal is None:
                try:
                    base = self._source(data, plan)
                    native = _NativeViews()
                    for view, row in zip(plan.views, rows):
                        if not native.add(view, base, "RGB", row):
                            _write_tensor(view, _replay(view.image.ops, base), row)
                    native.run()
                    return 0, ""
                except Exception as e:  # noqa: BLE001 -- an op the replay could not make: as written
                    plan = self._literal(data, plan.key, f"replaying raised {type(e).__name__}")
            results = plan.literal
            if len(results) != len(rows) or any(not isinstance(r, torch.Tensor) or r.shape != row.shape
                                                or r.dtype != row.dtype for r, row in zip(results, rows)):
                got = [(tuple(r.shape), r.dtype) if isinstance(r, torch.Tensor) else type(r).__name__
                       for r in results]
                return 2, f"the transform gave {got}, the batch needs {[(tuple(r.shape), r.dtype) for r in rows]}"
            for r, row in zip(results, rows):
                row.copy_(r)
            return 0, ""
        except Exception as e:  # noqa: BLE001 -- reported for this sample
            return 2, f"{type(e).__name__}: {e}"

    def _run_records(self, data: torch.Tensor, plan: TracedPlan, rows: list) -> bool:
        """Make a sample from a tracing process's records; ``False`` where its window's decode
        warns or fails (the sample is then traced here and Pillow's decode is the reference)."""
        top, left, height, width = plan.window
        # The op itself, not fio.decode_jpeg_roi: the reader's data (a uint8 1-D tensor) and
        # the recorded window need none of its argument checks, which ran per sample with
        # the GIL held, and any failure has one outcome here (the op checks what it is given).
        try:
            rgb = torch.ops.fastprep.decode_jpeg_roi(data, top, left, height, width, _RGB_MODE, self.max_pixels,
                                                     True, 8, fio.DEFAULT_MAX_SCANS, True)
        except (RuntimeError, ValueError):  # an error or a warning (strict): traced here, Pillow's decode the reference
            return False
        native = _NativeViews()
        for record, row in zip(plan.records, rows):
            native.take(record, rgb, row)
        native.run()
        return True

    def _source(self, data: torch.Tensor, plan: TracedPlan) -> _Decoded:
        """The decoded image (window) the views are cut from."""
        if not plan.pillow:
            top, left, height, width = plan.window
            try:
                rgb = fio.decode_jpeg_roi(data, top, left, height, width, "RGB", max_pixels=self.max_pixels,
                                          strict=True, channels_last=True)
            except fio.DecodeError:
                pass  # a warning or an error: Pillow's decode is the reference
            else:
                return _Decoded(rgb, (left, top))
        return _Decoded(None, (0, 0), open_rgb(data.numpy().tobytes(), self.max_pixels))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.transform).__name__}, views={self.shapes})"


def _probe(transform: Any, width: int, height: int, key: int) -> tuple[list[LazyTensor], bool]:
    """A build-time trace: a compiled Compose's view where the sample would get one (so a
    Compose the op-by-op trace cannot follow, such as v2 geometry on tensors, still counts),
    else the op-by-op trace."""
    try:
        views, listed = _trace(transform, width, height, key, compiled=True)
        if _compiled_view(views) is not None:
            return views, listed
    except Exception:  # noqa: BLE001 -- the op-by-op trace says what is wrong
        pass
    return _trace(transform, width, height, key)


def _compiled_view(views: list[LazyTensor]):
    """The native pipeline of a trace whose views are all compiled Composes' answers, returned
    in the order the Composes were called and not computed on: the Compose's
    :class:`NativePipeline` for one view, a :class:`MultiViewPipeline` of theirs for several
    (its views draw one after the other from the sample's key, as the calls did). ``None``
    when no view is a compiled answer; PixelRead when some are and the rest is not so."""
    marked = [v for v in views if v.image.ops[:1] and v.image.ops[0][0] == "compiled"]
    if not marked:
        return None
    if len(marked) != len(views) or any(v.steps for v in views) \
            or [v.image.ops[0][2] for v in views] != list(range(len(views))):
        raise PixelRead("a compiled Compose's output is computed on, or mixed with other views, or out of call "
                        "order")
    pipes = [v.image.ops[0][1] for v in views]
    return pipes[0] if len(pipes) == 1 else _COMPOSES.multi(pipes)


def _trace(transform: Any, width: int, height: int, key: int,
           compiled: bool = False) -> tuple[list[LazyTensor], bool]:
    """The transform called on a stand-in RGB image of ``width`` x ``height`` under the seeds
    of ``key``: its views and whether it returned a list. With ``compiled``, a Compose the
    native compiler takes whole, called on the untouched image before any torch draw, answers
    a stand-in view marked ``("compiled", pipeline)`` and seals the sample's torch generator
    (a later draw raises: the Compose's draws were not made here)."""
    source = object()
    answered: list = []

    def answer(compose, image: LazyImage):
        if image.trace_source is not source or image.ops or image.mode != "RGB" \
                or private_generator_draws() != 0:
            return None
        pipe = _COMPOSES.get(compose)
        if pipe is None:
            return None
        seal_private_generator("a torch draw after a natively planned Compose")
        height, width = pipe.size
        mode = "L" if pipe.channels == 1 else "RGB"
        answered.append(pipe)
        marker = ("compiled", pipe, len(answered) - 1)
        return LazyTensor(LazyImage(mode, (width, height), source, (marker,)), pipe.float_output)

    with keyed_sample_rng(key), (composes_answered(answer) if compiled else contextlib.nullcontext()):
        result = transform(LazyImage("RGB", (width, height), source))
    leaves = view_leaves(result)
    if leaves is None:
        raise PixelRead(f"the transform returned a {type(result).__name__}, not ToTensor/PILToTensor tensors (or a "
                        "list of them)")
    views, listed = leaves
    if any(v.image.trace_source is not source for v in views):
        raise PixelRead("a view was not made from this sample's image")
    return views, listed
