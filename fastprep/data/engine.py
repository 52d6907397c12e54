"""The threads engine of :func:`~fastprep.data.make_loader`: :class:`ThreadLoader`.

One process, no pickling, no shared memory. An epoch runs in these stages::

    consumer thread   iter(): the epoch's indices (sampler) and sample keys
    reader threads    a whole batch at a time: dataset.read_encoded_batch(indices)
                      (one native call for plain files) -> pipeline.plan_batch(bytes,
                      keys): one native call that routes, reads the headers, draws and
                      plans; what it leaves to Python (not a JPEG, EXIF-rotated, a draw it
                      does not make) -> per sample: the dataset's full-decode fallback or
                      pipeline.plan, same keyed RNG
                      (bounded: a few batches and a byte budget ahead of the builder)
    builder thread    batch k's plans -> ONE pipeline.run(...) into a reused output
                      buffer, native threads, GIL released; substitutes for failed
                      samples (on_error="skip") -> up to `prefetch` finished batches
    consumer thread   next(): warnings, counts, errors (raised here, naming the file)
                      -> (images uint8 [N, C, H, W] in a ring buffer, targets) -> the
                      DevicePrefetcher copies/converts them and hands the buffer back

Randomness never touches torch's default generator outside the consumer thread: each
sample draws from a private generator seeded by ``sample_key(epoch seed, epoch, index)``
(``NativePipeline.plan_batch``/``plan(data, key=...)``; the fallback under
:func:`fastprep._seeding.keyed_thread_rng`), which gives the same draws as the processes
engine's :func:`~fastprep._seeding.keyed_default_rng`.
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings
import weakref
from typing import Any

import numpy as np
import torch

from .. import io as fio
from .._seeding import keyed_thread_rng, sample_key, sample_keys
from .._threads import usable_cpus
from .batch import BatchConvert
from .collate import PooledBatch
from .datasets import JpegDataset, SkippedFile
from . import native

__all__ = ["ThreadLoader", "bottleneck_stage", "native_pipeline"]

_JOIN_TIMEOUT_S = 30.0  # a thread still inside one read or one batch after this is left (daemon)
# epochs with threads: stopped at exit, before daemon threads are frozen
_live_runs: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _stop_live_runs() -> None:
    for run in list(_live_runs):
        run.close()


available_cpus = usable_cpus  # the name the loader and bench used; same function
_CPU_KEYS = ("samples", "batches", "read", "plan", "build_python", "build_native")
# wall-clock seconds: the consumer waiting for a batch; the builder building, waiting for
# the readers, waiting for the consumer (its queue of finished batches full)
_WAIT_KEYS = ("consumer_wait", "building", "builder_wait_readers", "builder_wait_consumer")


def native_pipeline(transform):
    """The native batch pipeline of ``transform`` (a :class:`~fastprep.data.native.NativePipeline`,
    or a :class:`~fastprep.data.native.MultiViewPipeline` for a MultiView), or ``None`` when it
    has none: the threads engine cannot run it."""
    try:
        return native.native_pipeline(transform)
    except native.Unsupported:
        return None


class _BufferRing:
    """Reused output buffers ``uint8 [batch_size, C, H, W]`` (pinned for CUDA).

    A buffer is busy from :meth:`acquire` until :meth:`release` (by the prefetcher, once
    the batch was copied or converted out of it; with a CUDA event, it is reused only
    after the event). With none free, a one-off buffer is handed out (slot -1): the
    builder never waits here -- how far it runs ahead is bounded by the output queue.
    """

    def __init__(self, shape, slots: int, pin: bool):
        self.shape = tuple(shape)
        self.pin = bool(pin)
        self._lock = threading.Lock()
        self._buffers: list[torch.Tensor | None] = [None] * slots
        self._busy = [False] * slots
        self._events = [None] * slots

    def _new(self, n: int) -> torch.Tensor:
        return torch.empty((n,) + self.shape[1:], dtype=torch.uint8, pin_memory=self.pin)

    def acquire(self, n: int):
        """``(slot, uint8 [n, C, H, W])`` with ``n <= batch_size``."""
        with self._lock:
            for slot, busy in enumerate(self._busy):
                if not busy:
                    self._busy[slot] = True
                    event, self._events[slot] = self._events[slot], None
                    buffer = self._buffers[slot]
                    if buffer is None:
                        buffer = self._buffers[slot] = self._new(self.shape[0])
                    break
            else:
                return -1, self._new(n)
        if event is not None:
            event.synchronize()
        return slot, buffer[:n]

    def release(self, slot: int, event=None) -> None:
        if slot >= 0:
            with self._lock:
                self._busy[slot] = False
                self._events[slot] = event


class _ViewBuffers:
    """One buffer pool per view of a MultiView, handed out and taken back together: a batch's
    images are a list with one tensor per view. The pools are used in lockstep, so a slot names
    the same position in each."""

    def __init__(self, pools: list):
        self.pools = pools
        self.shape = [p.shape for p in pools]

    def acquire(self, n: int):
        taken = [pool.acquire(n) for pool in self.pools]
        slots = {slot for slot, _ in taken}
        if len(slots) > 1:  # out of step (never expected): use one-off buffers, free the slots
            for pool, (slot, _) in zip(self.pools, taken):
                pool.release(slot)
            return -1, [pool._new(n) if isinstance(pool, _BufferRing) else pool.acquire(n)[1] for pool in self.pools]
        return slots.pop(), [images for _, images in taken]

    def release(self, slot: int, event=None) -> None:
        for pool in self.pools:
            pool.release(slot, event)


def _shape_key(shape):
    return [tuple(s) for s in shape] if isinstance(shape, list) else tuple(shape)


def _output_shape(pipeline, batch_size: int):
    """``(batch_size, C, H, W)`` of the pipeline's batches, or a list of them (one per view)."""
    if isinstance(pipeline.channels, list):
        return [(batch_size, c) + tuple(size) for c, size in zip(pipeline.channels, pipeline.size)]
    return (batch_size, pipeline.channels) + tuple(pipeline.size)


def _rows(out, start: int, stop: int):
    """Rows ``start:stop`` of a batch (every view's)."""
    return [o[start:stop] for o in out] if isinstance(out, list) else out[start:stop]


def _empty_rows(out, n: int):
    """A fresh batch of ``n`` rows shaped like ``out``'s rows."""
    if isinstance(out, list):
        return [torch.empty((n,) + tuple(o.shape[1:]), dtype=o.dtype) for o in out]
    return torch.empty((n,) + tuple(out.shape[1:]), dtype=out.dtype)


def _index_copy(out, index: torch.Tensor, rows) -> None:
    if isinstance(out, list):
        for o, r in zip(out, rows):
            o.index_copy_(0, index, r)
    else:
        out.index_copy_(0, index, rows)


_NUMPY_STORAGE = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: np.uint16}


class _LeasedBuffers:
    """Output buffers of converted batches, which the consumer keeps (the conversion is
    fused into the batch run, nothing copies out of them).

    As :class:`~fastprep.data.BatchConvert`'s pool: each hand-out is a new numpy view of a
    pooled array (a *lease*) on which the tensor is built, and the pool keeps a weak
    reference to it, so a buffer is handed out again only once every tensor using it is
    gone. ``acquire`` never waits (a fresh buffer when none is free). Same interface as
    :class:`_BufferRing`; the slot is always -1 (nothing to release).
    """

    def __init__(self, shape, dtype: torch.dtype, channels_last: bool, slots: int):
        self.shape, self.dtype, self.channels_last = tuple(shape), dtype, bool(channels_last)
        self._lock = threading.Lock()
        # [pooled array viewed as [B, C, H, W] (NHWC storage when channels_last), weak
        # reference to its lease or None]
        self._entries: list[list] = []
        self._slots = slots

    def _tensor(self, lease) -> torch.Tensor:
        # from_numpy takes the lease's strides as they are: a channels_last tensor from the
        # NHWC storage without a permute, the first n rows without a torch slice.
        t = torch.from_numpy(lease)
        return t.view(torch.bfloat16) if self.dtype == torch.bfloat16 else t

    def acquire(self, n: int):
        with self._lock:
            for entry in self._entries:
                if entry[1] is None or entry[1]() is None:
                    lease = entry[0][:n]
                    entry[1] = weakref.ref(lease)
                    return -1, self._tensor(lease)
            b, c, h, w = self.shape
            storage = _NUMPY_STORAGE[self.dtype]
            array = np.empty((b, h, w, c), storage).transpose(0, 3, 1, 2) if self.channels_last else \
                np.empty((b, c, h, w), storage)
            lease = array[:n]
            if len(self._entries) < self._slots:
                self._entries.append([array, weakref.ref(lease)])
        return -1, self._tensor(lease)

    def release(self, slot: int, event=None) -> None:
        pass


class _Sample:
    """One position of the epoch: what the readers prepared for the builder."""

    __slots__ = ("index", "name", "data", "plan", "image", "reason", "error", "fatal", "nbytes", "read_s")

    def __init__(self, index: int, name: str):
        self.index, self.name = index, name
        self.data: torch.Tensor | None = None
        self.plan: Any = None
        self.image: torch.Tensor | None = None
        self.reason: str | None = None
        self.error: Exception | None = None
        self.fatal: BaseException | None = None
        self.nbytes = 0
        self.read_s = 0.0  # thread-CPU seconds in dataset.read_encoded


class _Batch:
    """A finished batch and what the consumer must do about it."""

    __slots__ = ("slot", "images", "targets", "warnings", "fallbacks", "skips", "error", "timings")

    def __init__(self, slot, images, targets):
        self.slot, self.images, self.targets = slot, images, targets
        self.warnings, self.fallbacks, self.error = [], [], None
        self.skips: list[SkippedFile] = []  # the samples replaced by a substitute
        self.timings = {}  # NativePipeline.run's op_thread_s


def _sample_name(dataset, index: int) -> str:
    files: Any = getattr(dataset, "files", None)
    try:
        return str(files[index])
    except (TypeError, IndexError, KeyError):
        return f"sample {index}"


def _failure(exc: BaseException, name: str, index: int) -> Exception:
    """The per-sample path's error for ``exc``: DecodeError or ValueError naming the file."""
    err: Exception
    if isinstance(exc, ValueError) and not isinstance(exc, fio.DecodeError):
        err = ValueError(f"{name!r} (index {index}): {exc}")
    else:
        err = fio.DecodeError(f"cannot decode {name!r} (index {index}): {exc}")
    err.__cause__ = exc
    return err


class ThreadLoader:
    """Batches of a :class:`~fastprep.data.JpegDataset` built by threads of this process.

    Iterating yields one epoch of ``PooledBatch(images uint8 [N, C, H, W], targets int64
    [N], slot, owner)``; the images live in a reused buffer that
    :class:`~fastprep.data.DevicePrefetcher` hands back (``owner.release(slot)``) once it
    copied or converted them (with ``convert``: converted images, slot -1). Use it through
    :func:`~fastprep.data.make_loader` (``engine="threads"``), which adds the prefetcher,
    the batch conversion and resuming. The samples a batch replaced (``on_error="skip"``)
    come with it, uncounted, in ``PooledBatch.skipped``: the prefetcher counts them in the
    dataset when it delivers the batch.

    Args:
        dataset: a :class:`~fastprep.data.JpegDataset` (or subclass); its ``transform`` is
            what ``pipeline`` runs, its ``on_error``, ``max_skip_attempts``,
            ``jpeg_only``, ``apply_exif_orientation`` and ``max_pixels`` apply as in
            ``dataset[i]``.
        pipeline: the native batch pipeline of the dataset's transform
            (:func:`native_pipeline`).
        sampler: the order of dataset indices (iterated once per epoch, in this thread).
        batch_size, drop_last: as ``DataLoader``'s.
        num_workers: native threads of each batch run; 0: everything runs in the
            consumer's thread at ``next()`` (no threads; for debugging).
        pin_memory: allocate the output buffers in pinned memory (when CUDA is available).
        prefetch: finished batches kept ahead of the consumer (at least 2).
        read_threads: threads reading and planning batches (each takes a whole batch).
        read_ahead_bytes: encoded bytes the readers may hold beyond the batch being built.
        convert: a :class:`~fastprep.data.BatchConvert` to fuse into the batch run (CPU
            delivery): batches then come out converted (its dtype, colour, mean/std, memory
            format), bit for bit what it computes on the uint8 batch, in buffers the
            consumer keeps (recycled once it drops them); ``None``: uint8 batches.
    """

    def __init__(self, dataset, pipeline, sampler, *, batch_size: int, drop_last: bool = False,
                 num_workers: int | None = None, pin_memory: bool = False, prefetch: int = 2,
                 read_threads: int = 2, read_ahead_bytes: int = 256 << 20, convert=None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.dataset = dataset
        self.pipeline = pipeline
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.num_workers = available_cpus() if num_workers is None else int(num_workers)
        if self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        self.prefetch = max(2, int(prefetch))
        self.read_threads = max(1, int(read_threads))
        channels = getattr(pipeline, "channels", 3)
        if (isinstance(convert, BatchConvert) and convert.color != "rgb"
                and any(c != 3 for c in (channels if isinstance(channels, list) else [channels]))):
            raise ValueError(f"convert {convert.color!r} needs 3-channel batches; the pipeline gives {channels}: "
                             "use color='rgb'")
        self.convert = convert
        self.read_ahead_bytes = int(read_ahead_bytes)
        self.epoch = 0
        self._epoch_seed: int | None = None
        self._skip = 0
        self._following = None  # the next epoch's indices, where its order is known now (begin_epoch)
        #: ``(epoch, indices, ReadAhead)``: the next epoch's first reads, issued as this one ends
        self._next_ahead: tuple[int, list[int], Any] | None = None
        self._cpu_lock = threading.Lock()
        self._cpu = dict.fromkeys(_CPU_KEYS + _WAIT_KEYS, 0.0)
        self._buffers: _BufferRing | _LeasedBuffers | _ViewBuffers | None = None

    def output_buffers(self, shape) -> _BufferRing | _LeasedBuffers | _ViewBuffers:
        """The output buffers, kept across epochs (no page faults, no pinning per epoch):
        the uint8 ring (a slot comes back when the prefetcher releases it, or when an
        epoch closes with the batch never handed out), or, with ``convert``, the pool of
        converted batches (a buffer comes back once the consumer dropped every batch
        using it). A list of shapes (one per view of a MultiView) gives one pool per view,
        handed out together."""
        pool = self._buffers
        if pool is None or pool.shape != _shape_key(shape):
            if isinstance(shape, list):
                pool = _ViewBuffers([self._pool(tuple(one)) for one in shape])
            else:
                pool = self._pool(tuple(shape))
            self._buffers = pool
        return pool

    def _pool(self, shape) -> _BufferRing | _LeasedBuffers:
        if self.convert is None:
            return _BufferRing(shape, self.prefetch + 3, self.pin_memory)
        return _LeasedBuffers(shape, self.convert.dtype, self.convert.channels_last, self.prefetch + 3)

    def cpu_seconds(self) -> dict:
        """Where this loader's threads spent CPU time, summed over its epochs so far.

        Returns:
            dict: ``samples`` and ``batches`` built (ints), and thread-CPU seconds:
            ``read`` (reader threads reading the bytes: one native call per batch for
            plain files, without the GIL), ``plan`` (reader threads routing and planning
            the samples -- one native call per batch without the GIL, plus the Python
            around it -- or running the full-decode fallback), ``build_python`` (builder
            thread outside the native batch call: Python holding the GIL),
            ``build_native`` (builder thread inside the native call: its share of the
            decoding; the native pool threads' share is not counted here). Counted with
            ``num_workers >= 1`` only.
        """
        with self._cpu_lock:
            out = {k: self._cpu[k] for k in _CPU_KEYS}
        out["samples"], out["batches"] = int(out["samples"]), int(out["batches"])
        return out

    def stage_seconds(self) -> dict:
        """Where the engine's threads spent wall-clock time, summed over its epochs so far
        (``num_workers >= 1``): ``consumer_wait`` (``next()`` waiting for a batch),
        ``building`` (the builder making batches), ``builder_wait_readers`` (the builder
        waiting for a batch's samples) and ``builder_wait_consumer`` (the builder waiting
        because ``prefetch`` finished batches are not taken yet). Differences of two calls
        around a run tell which stage held it: :func:`bottleneck_stage`."""
        with self._cpu_lock:
            return {k: self._cpu[k] for k in _WAIT_KEYS}

    def _add_cpu(self, **seconds) -> None:
        with self._cpu_lock:
            for k, v in seconds.items():
                self._cpu[k] += v

    def begin_epoch(self, epoch: int, epoch_seed: int, skip: int = 0, following=None) -> None:
        """Key the next iteration's samples by ``(epoch_seed, epoch, index)`` and skip the
        first ``skip`` indices of the sampler's order (a resume). ``following``: a callable
        giving the indices of the epoch after it, where they are known now (a seeded
        :class:`~fastprep.data.EpochSampler`): the reads of object storage then run on across
        the epoch boundary (:meth:`_read_ahead_next`)."""
        self.epoch, self._epoch_seed, self._skip = int(epoch), int(epoch_seed), int(skip)
        self._following = following

    def _read_ahead_next(self) -> None:
        """Start the next epoch's reads while this one's last batches are read and built: its
        whole order, issuing only its first :data:`_NEXT_EPOCH_BATCHES` batches until it
        begins. The next epoch takes them over where its order is the one read
        (:meth:`_take_next_ahead`), and they run on; otherwise they are dropped. A run's last
        epoch leaves those batches read by no one."""
        following, self._following = self._following, None
        if following is None or self._next_ahead is not None:
            return
        indices = list(following())
        if self.drop_last:
            indices = indices[:len(indices) // self.batch_size * self.batch_size]
        if indices:
            ahead = self.dataset.read_ahead(indices, budget_bytes=self.read_ahead_bytes, group=self.batch_size,
                                            first=_NEXT_EPOCH_BATCHES * self.batch_size)
            if ahead is not None:
                self._next_ahead = (self.epoch + 1, indices, ahead)

    def _take_next_ahead(self, epoch: int, indices: list[int]):
        """The reads started for ``epoch`` when they are of ``indices`` (issuing ahead as far as
        any epoch's from now on), else ``None`` (and they are dropped)."""
        pending, self._next_ahead = self._next_ahead, None
        if pending is None:
            return None
        if pending[0] == epoch and pending[1] == indices:
            pending[2].widen()
            return pending[2]
        pending[2].close()
        return None

    def __del__(self):
        pending = getattr(self, "_next_ahead", None)
        if pending is not None:
            pending[2].close()

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        if self._epoch_seed is None:  # used without make_loader's EpochControl
            self._epoch_seed = int(torch.empty((), dtype=torch.int64).random_())
        indices = list(self.sampler)[self._skip:]
        epoch_seed, self._epoch_seed, self._skip = self._epoch_seed, None, 0
        if self.drop_last:
            indices = indices[:len(indices) // self.batch_size * self.batch_size]
        return _EpochIterator(_EpochRun(self, indices, epoch_seed, self.epoch))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(dataset={self.dataset!r}, batch_size={self.batch_size}, "
                f"num_workers={self.num_workers})")


#: the next epoch's reads start when a reader takes one of this epoch's last this many
#: batches, issuing that many of its first batches until it begins (0: never)
_NEXT_EPOCH_BATCHES = 4


class _EpochRun:
    """The state and threads of one epoch (the threads reference this, not the iterator,
    so an abandoned iterator is collected and stops them)."""

    def __init__(self, loader: ThreadLoader, indices: list[int], epoch_seed: int, epoch: int):
        self.loader = loader
        self.dataset = loader.dataset
        self.pipeline = loader.pipeline
        self.indices = indices
        self.epoch_seed, self.epoch = epoch_seed, epoch
        self.batch_size = loader.batch_size
        self.num_batches = -(-len(indices) // self.batch_size)
        convert = loader.convert
        self.ring: _BufferRing | _LeasedBuffers | _ViewBuffers
        self.ring = loader.output_buffers(_output_shape(self.pipeline, self.batch_size))
        if convert is None:
            self.run_options = {}
        else:
            self.run_options = dict(color=convert.color, mean=convert.mean, std=convert.std)
        # the readers plan batches natively unless the dataset routes samples its own way (a
        # dataset whose fallback_reason sends nothing to the fallback says so: plans_in_batches)
        self.batch_planning = (type(self.dataset).fallback_reason is JpegDataset.fallback_reason
                               or getattr(self.dataset, "plans_in_batches", False))
        self.cond = threading.Condition()
        self.next_batch = 0  # next batch a reader takes
        self.ready: dict[int, list[_Sample]] = {}  # batch -> its prepared samples
        self.held_bytes = 0
        self.building = 0  # the batch the builder works on
        self.results: dict[int, _Batch] = {}  # batch -> _Batch
        self.stopped = False
        self.fatal: BaseException | None = None
        self.threads = []
        self.ahead = None  # the dataset's reads issued ahead in the epoch's order (s3:// sources)
        self.reads_next = False  # whether the next epoch's first reads were issued (_read_one)
        if loader.num_workers > 0 and self.num_batches and self.batch_planning \
                and hasattr(self.dataset, "read_ahead"):
            windows = getattr(self.dataset, "window_reads", False)
            # the first reads issued as the last epoch ended (not by window: those plan this epoch's crops)
            self.ahead = None if windows else loader._take_next_ahead(epoch, indices)
            if self.ahead is None:
                self.ahead = self.dataset.read_ahead(indices, budget_bytes=loader.read_ahead_bytes,
                                                     group=self.batch_size,
                                                     **({"plan_windows": self.plan_windows} if windows else {}))
            self.reads_next = windows
        if loader.num_workers > 0 and self.num_batches:
            names = [f"fastprep-read-{k}" for k in range(loader.read_threads)]
            self.threads = [threading.Thread(target=self._read_loop, name=n, daemon=True) for n in names]
            self.threads.append(threading.Thread(target=self._build_loop, name="fastprep-build", daemon=True))
            _live_runs.add(self)
            for t in self.threads:
                t.start()

    # ---------------------------------------------------------------- per sample

    def key(self, index: int) -> int:
        return sample_key(self.epoch_seed, self.epoch, index)

    def keys(self, indices) -> list[int]:
        """:meth:`key` of each of ``indices``."""
        return sample_keys(self.epoch_seed, self.epoch, indices)

    def prepare(self, index: int, read: tuple[torch.Tensor, str] | None = None) -> _Sample:
        """Read, route and plan (or fully decode) one sample; expected failures are kept
        in ``sample.error``, anything else raises. ``read``: its ``(bytes, name)`` when
        already read."""
        sample = _Sample(index, _sample_name(self.dataset, index))
        try:
            start = time.thread_time()
            data, sample.name = self.dataset.read_encoded(index) if read is None else read
            sample.read_s = time.thread_time() - start
            sample.nbytes = int(data.numel())
            reason = self.dataset.fallback_reason(data)
            if reason is None:
                sample.plan = self.pipeline.plan(data, key=self.key(index))
                sample.data = data
            else:
                with keyed_thread_rng(self.key(index)):
                    sample.image = self.dataset.decode_fallback(data, reason)
                sample.reason = reason
                images = sample.image if isinstance(sample.image, list) else [sample.image]
                sample.nbytes += sum(int(x.numel()) for x in images)
        except (fio.DecodeError, OSError, ValueError) as e:
            sample.error = _failure(e, sample.name, index)
            sample.data = sample.plan = sample.image = None
        return sample

    def plan_windows(self, datas: list[torch.Tensor], indices: list[int]) -> list[tuple[int, ...] | None]:
        """Per sample, the ``(top, left, height, width, scale_num)`` its plan decodes (the
        same draws as :meth:`prepare_batch` makes from the whole file: they read only the
        header), or ``None`` where it is not one window of a single-view native plan."""
        if getattr(self.pipeline, "_strict", True):  # strict decodes scan the whole file
            return [None] * len(datas)
        routes = self.pipeline.plan_batch(datas, self.keys(indices),
                                          max_pixels=self.dataset.max_pixels or 0,
                                          exif=self.dataset.apply_exif_orientation)
        out: list[tuple[int, ...] | None] = []
        for route, value in routes:
            record = None
            if route == "plan" and isinstance(value, native.PlanRef):
                record = value.batch.plans[value.position]
            elif route == "plan" and isinstance(value, native.Plan):
                record = value.record
            out.append(None if record is None else
                       tuple(int(record[f]) for f in ("top", "left", "height", "width", "scale_num")))
        return out

    def prepare_batch(self, indices: list[int], positions: range | None = None) -> tuple[list[_Sample], float]:
        """:meth:`prepare` for one batch's indices, as two native calls where the dataset
        and pipeline allow (``read_encoded_batch``, ``NativePipeline.plan_batch``); samples
        those calls do not plan take :meth:`prepare`. ``positions``: the indices' positions
        in the epoch, for the reads issued ahead (:attr:`ahead`). Returns the samples and
        the thread-CPU seconds spent reading."""
        if not self.batch_planning:
            samples = [self.prepare(i) for i in indices]
            return samples, sum(s.read_s for s in samples)
        dataset = self.dataset
        samples = [_Sample(i, _sample_name(dataset, i)) for i in indices]
        start = time.thread_time()
        windows = getattr(dataset, "window_reads", False)
        if self.ahead is not None and positions is not None:
            read = self.ahead.read_batch(positions)
            if windows and not getattr(self.ahead, "finished", False):  # the headers were read ahead
                read = dataset.read_windows(indices, self.plan_windows, read)
        elif windows:
            read = dataset.read_windows(indices, self.plan_windows)
        else:
            read = dataset.read_encoded_batch(indices)
        read_s = time.thread_time() - start
        live = []
        for j, (data, name) in enumerate(read):
            s = samples[j]
            if isinstance(data, Exception):
                s.error = _failure(data, s.name, s.index)
            else:
                s.name, s.data, s.nbytes = name, data, int(data.numel())
                live.append(j)
        routes = self.pipeline.plan_batch([samples[j].data for j in live], self.keys([samples[j].index for j in live]),
                                          max_pixels=dataset.max_pixels or 0, exif=dataset.apply_exif_orientation)
        for j, (route, value) in zip(live, routes):
            s = samples[j]
            if route == "plan":
                s.plan = value
            elif route == "error":
                s.error = _failure(fio.DecodeError(value), s.name, s.index)
                s.data = None
            else:  # not a JPEG, EXIF-rotated, ...: the per-sample path, with the bytes read
                assert s.data is not None  # read above (live)
                samples[j] = self.prepare(s.index, (s.data, s.name))
                read_s += samples[j].read_s
        return samples, read_s

    def _fill(self, samples: list[_Sample], out: torch.Tensor, batch: _Batch, num_threads: int) -> None:
        """Write ``samples`` into ``out`` (one native run for the planned ones)."""
        native = [j for j, s in enumerate(samples) if s.plan is not None]
        if native:
            dest = out if len(native) == len(samples) else _empty_rows(out, len(native))
            statuses = self.pipeline.run([samples[j].data for j in native], [samples[j].plan for j in native],
                                         dest, num_threads=num_threads, timings=batch.timings, **self.run_options)
            if dest is not out:
                _index_copy(out, torch.tensor(native, dtype=torch.int64), dest)
            for j, (status, message) in zip(native, statuses):
                s = samples[j]
                if status == 1:
                    batch.warnings.append(message)
                elif status != 0:
                    s.error = _failure(fio.DecodeError(message), s.name, s.index)
        for j, s in enumerate(samples):
            if s.image is not None:
                images = s.image if isinstance(s.image, list) else [s.image]
                outs = out if isinstance(out, list) else [out]
                # the pipeline's own output: float32 when it converts itself (ToDtype), else uint8
                dtype = torch.float32 if getattr(self.pipeline, "float_output", False) else torch.uint8
                wrong = [(tuple(x.shape), x.dtype) for x, o in zip(images, outs)
                         if tuple(x.shape) != tuple(o.shape[1:]) or x.dtype != dtype]
                if wrong or len(images) != len(outs):
                    s.error = ValueError(f"{s.name!r} (index {s.index}): the full-decode fallback gave "
                                         f"{[(tuple(x.shape), x.dtype) for x in images]}, the batch needs {dtype} "
                                         f"{[tuple(o.shape[1:]) for o in outs]}")
                    continue
                # the conversion is elementwise: a row converted alone equals its row in a batch
                convert = self.loader.convert if dtype == torch.uint8 else None
                for x, o in zip(images, outs):
                    o[j].copy_(x if convert is None else convert(x[None])[0])
                batch.fallbacks.append((s.name, s.reason))

    def _substitute(self, failed: _Sample, out: torch.Tensor, batch: _Batch, num_threads: int):
        """``on_error="skip"``: fill ``out`` (one row) with the first substitute that
        decodes, as ``JpegDataset.__getitem__`` picks it; returns its target, or ``None``
        after setting ``batch.error``."""
        tries = min(self.dataset.max_skip_attempts, len(self.dataset) - 1)
        for attempt in range(tries):
            sample = self.prepare(self.dataset.substitute(failed.index, attempt))
            if sample.error is None:
                trial = _Batch(-1, None, None)
                trial.timings = batch.timings
                self._fill([sample], out, trial, num_threads)
                if sample.error is None:
                    batch.warnings += trial.warnings
                    batch.fallbacks += trial.fallbacks
                    assert failed.error is not None  # only failed samples are substituted
                    batch.skips.append(SkippedFile.from_error(failed.index, _sample_name(self.dataset, failed.index),
                                                              failed.error))
                    return self.dataset.targets[sample.index]
            if not isinstance(sample.error, self.dataset.skip_errors):
                batch.error = sample.error
                return None
        error = fio.DecodeError(f"on_error='skip': {failed.error} -- and none of the {tries} substitutes tried "
                                f"could be decoded either")
        error.__cause__ = failed.error
        batch.error = error
        return None

    def build(self, samples: list[_Sample], num_threads: int) -> _Batch:
        slot, images = self.ring.acquire(len(samples))
        targets = torch.tensor([self.dataset.targets[s.index] for s in samples], dtype=torch.int64)
        batch = _Batch(slot, images, targets)
        for s in samples:  # a reader failed (not a decode error): the batch raises it
            if s.fatal is not None:
                batch.error = s.fatal
                return batch
            if s.error is not None and self.dataset.on_error != "skip":
                break
        self._fill(samples, images, batch, num_threads)
        for j, s in enumerate(samples):
            if s.error is None or batch.error is not None:
                continue
            if self.dataset.on_error == "skip" and isinstance(s.error, self.dataset.skip_errors):
                target = self._substitute(s, _rows(images, j, j + 1), batch, num_threads)
                if target is not None:
                    targets[j] = target
            else:
                batch.error = s.error
        return batch

    # ---------------------------------------------------------------- threads

    def _positions(self, k: int) -> range:
        return range(k * self.batch_size, min((k + 1) * self.batch_size, len(self.indices)))

    def _may_read(self, k: int) -> bool:
        if k > self.building + self.loader.prefetch:
            return False
        return k == self.building or self.held_bytes < self.loader.read_ahead_bytes

    def _fail(self, error: BaseException) -> None:
        with self.cond:
            if self.fatal is None:
                self.fatal = error
            self.stopped = True
            self.cond.notify_all()

    def _read_loop(self) -> None:
        try:
            while self._read_one():
                pass
        except BaseException as e:  # never leave the builder waiting on a position
            self._fail(_thread_error("a reader thread", self.dataset, None, e))

    def _read_one(self) -> bool:
        with self.cond:
            while True:
                if self.stopped or self.next_batch >= self.num_batches:
                    return False
                if self._may_read(self.next_batch):
                    break
                self.cond.wait()
            k = self.next_batch
            self.next_batch += 1
            # the epoch's last few batches are being read: the next epoch's reads go out now
            next_reads = (not self.reads_next and self.ahead is not None and _NEXT_EPOCH_BATCHES > 0
                          and k >= self.num_batches - _NEXT_EPOCH_BATCHES)
            if next_reads:
                self.reads_next = True
        if next_reads:
            self.loader._read_ahead_next()
        positions = self._positions(k)
        indices = [self.indices[p] for p in positions]
        start = time.thread_time()
        try:
            samples, read_s = self.prepare_batch(indices, positions)
        except BaseException:  # a bug or an unexpected error: again per sample, to name it
            samples = [self._prepare_or_fatal(i) for i in indices]
            read_s = sum(s.read_s for s in samples)
        spent = time.thread_time() - start
        self.loader._add_cpu(read=read_s, plan=spent - read_s)
        with self.cond:
            self.ready[k] = samples
            self.held_bytes += sum(s.nbytes for s in samples)
            self.cond.notify_all()
        return True

    def _prepare_or_fatal(self, index: int) -> _Sample:
        try:
            return self.prepare(index)
        except BaseException as e:  # raised at this sample's batch
            sample = _Sample(index, _sample_name(self.dataset, index))
            sample.fatal = _thread_error("reading", self.dataset, index, e)
            return sample

    def _build_loop(self) -> None:
        k = 0
        try:
            for k in range(self.num_batches):
                waited = {"builder_wait_readers": 0.0, "builder_wait_consumer": 0.0}
                with self.cond:
                    while not self.stopped and (len(self.results) >= self.loader.prefetch or k not in self.ready):
                        reason = "builder_wait_consumer" if len(self.results) >= self.loader.prefetch else \
                            "builder_wait_readers"
                        t0 = time.perf_counter()
                        self.cond.wait()
                        waited[reason] += time.perf_counter() - t0
                    if self.stopped:
                        return
                    samples = self.ready.pop(k)
                wall = time.perf_counter()
                start = time.thread_time()
                batch = self.build(samples, self.loader.num_workers)
                spent = time.thread_time() - start
                native = batch.timings.get("op_thread_s", 0.0)
                self.loader._add_cpu(samples=len(samples), batches=1, build_python=spent - native, build_native=native,
                                     building=time.perf_counter() - wall, **waited)
                with self.cond:
                    self.held_bytes -= sum(s.nbytes for s in samples)
                    if self.stopped:  # closed while building: nobody takes this batch
                        self.ring.release(batch.slot)
                        return
                    self.results[k] = batch
                    self.building = k + 1
                    self.cond.notify_all()
        except BaseException as e:  # raised in the consumer after the batches before it
            index = self.indices[k * self.batch_size] if self.indices else None
            self._fail(_thread_error(f"building batch {k} (first sample)", self.dataset, index, e))

    def take(self, k: int) -> _Batch:
        """Batch ``k`` (consumer thread): built here without threads, else waited for."""
        if not self.threads:
            samples, _ = self.prepare_batch([self.indices[p] for p in self._positions(k)])
            return self.build(samples, 1)
        t0 = time.perf_counter()
        with self.cond:
            while k not in self.results and self.fatal is None:
                self.cond.wait(0.25)
            self.loader._add_cpu(consumer_wait=time.perf_counter() - t0)
            if k not in self.results:
                assert self.fatal is not None  # the loop above ends on a result or on fatal
                raise self.fatal
            batch = self.results.pop(k)
            self.cond.notify_all()
        return batch

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.ready.clear()
            for batch in self.results.values():  # built, never handed out: the slots go back
                self.ring.release(batch.slot)
            self.results.clear()
            self.cond.notify_all()
        if self.ahead is not None:
            self.ahead.close()
        current = threading.current_thread()
        for t in self.threads:
            if t is not current:
                t.join(_JOIN_TIMEOUT_S)
        self.threads = []


#: :func:`bottleneck_stage`'s thresholds: the consumer waiting less than this share of the
#: run means the engine keeps up; the builder waiting for the readers more than this share
#: means reading holds it.
CONSUMER_WAIT_KEEPS_UP = 0.05
BUILDER_WAIT_READ_BOUND = 0.25


def bottleneck_stage(before: dict, after: dict, window_s: float) -> tuple[str, str]:
    """Which stage of the threads engine held a run: from two
    :meth:`ThreadLoader.stage_seconds` readings around it and its wall-clock length.

    Returns:
        ``(stage, explanation)``: ``"hand-over"`` -- the consumer hardly waited, so the
        engine kept up and the time went to what takes the batches (the prefetcher's copy
        or conversion, the training step); ``"read"`` -- the consumer waited and the
        builder spent more than a quarter of the run waiting for the readers (file reads,
        routing, planning, the full-decode fallback); ``"decode"`` -- the consumer waited
        for a builder busy in the native batch calls.
    """
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    share = {k: max(0.0, after[k] - before[k]) / window_s for k in _WAIT_KEYS}
    figures = (f"consumer waited {share['consumer_wait']:.0%}, builder building {share['building']:.0%}, "
               f"waiting for the readers {share['builder_wait_readers']:.0%}, for the consumer "
               f"{share['builder_wait_consumer']:.0%} of the run")
    if share["consumer_wait"] < CONSUMER_WAIT_KEEPS_UP:
        return "hand-over", f"the engine keeps up; the batches' consumer sets the pace ({figures})"
    if share["builder_wait_readers"] > BUILDER_WAIT_READ_BOUND:
        return "read", f"the readers (file reads, routing, planning) hold the builder ({figures})"
    return "decode", f"the native batch calls hold the consumer ({figures})"


def _thread_error(stage: str, dataset, index, exc: BaseException) -> Exception:
    name = "" if index is None else f" {_sample_name(dataset, index)!r} (index {index})"
    error = RuntimeError(f"fastprep threads engine: {stage}{name} failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


class _EpochIterator:
    """The consumer's side of an epoch: batches in order, warnings, counts and errors
    raised in the consumer's thread; :meth:`close` (or the end, or an error) stops the
    threads."""

    def __init__(self, run: _EpochRun):
        self._run: _EpochRun | None = run
        self._next = 0

    def __iter__(self):
        return self

    def __next__(self):
        run = self._run
        if run is None or self._next >= run.num_batches:
            self.close()
            raise StopIteration
        try:
            batch = run.take(self._next)
        except BaseException:
            self.close()
            raise
        self._next += 1
        dataset = run.dataset
        for message in batch.warnings:
            warnings.warn(message, fio.DecodeWarning, stacklevel=2)
        for name, reason in batch.fallbacks:
            dataset.count_fallback(name, reason, stacklevel=3)
        if batch.error is not None:
            run.ring.release(batch.slot)
            self.close()
            raise batch.error
        # the skips are counted when the batch is delivered (DevicePrefetcher)
        return PooledBatch(batch.images, batch.targets, batch.slot, run.ring, tuple(batch.skips))

    def close(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.close()

    def __del__(self):
        self.close()
