"""Run one pipeline x workers configuration against a trainer and measure it.

The measured window starts after the warm-up steps and ends when the device has
finished the last step. Within it:

* ``samples_per_s`` / ``steps_per_s``: measured steps (times batch size) over the window.
  (A throughput over the window, not a median of per-step periods: with several workers
  batches arrive in bursts, and the median period would overstate the rate.)
* ``data_wait_fraction``: time the training loop spent blocked in ``next()`` on the loader,
  over the window.
* ``starvation_fraction``: time the device was idle, over the window -- the GPU starvation
  figure (simulated accelerator: exact; CUDA: from events around each step; CPU: equal to
  the data wait, as the step is synchronous).
* ``data_wait_ms_median`` / ``step_period_ms_median``: medians over the measured steps.
* ``time_to_first_batch_s``: from creating the iterator (workers start) to the first batch.
* ``worker_cpu_cores`` / ``main_cpu_cores``: CPU seconds per second of window used by the
  loader's worker processes and by this process (Linux ``/proc``; ``None`` elsewhere, and
  for the threads engine, whose workers are threads of this process: in ``main_cpu_cores``).
* ``engine_stage``: the threads engine's stage that held the window (:func:`engine_stage`).
* ``engine`` / ``engine_reason``: the engine a make_loader loader runs on, and why not threads.
* ``exactness``: what the row checked of its samples before it was timed (or ``None``).
* ``steps``: the measured steps; more than asked when a minimum window (``min_window_s``)
  made the run go on.
"""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch

from .pipelines import yuv_range

__all__ = ["ConfigResult", "check_batch", "check_views", "engine_stage", "measure", "one_line_error", "output_bounds"]


@dataclass
class ConfigResult:
    pipeline: str
    workers: int
    batch_size: int
    steps: int
    warmup: int
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    data_wait_fraction: float | None = None
    starvation_fraction: float | None = None
    time_to_first_batch_s: float | None = None
    data_wait_ms_median: float | None = None
    step_period_ms_median: float | None = None
    window_s: float | None = None
    worker_cpu_cores: float | None = None
    main_cpu_cores: float | None = None
    speedup_vs_reference: float | None = None
    skipped: str | None = None
    error: str | None = None
    trainer_metrics: dict | None = None
    #: threads engine only: ``[stage, explanation]`` of :func:`engine_stage` over the
    #: measured steps
    engine_stage: list | None = None
    #: ``loader.engine`` and ``loader.engine_reason`` of a make_loader loader (``None``
    #: for other loaders)
    engine: str | None = None
    engine_reason: str | None = None
    #: a row that asked for the threads engine and ran on another: why (the table marks it)
    engine_fallback: str | None = None
    #: the accelerator set the rate (starved less than
    #: :data:`~fastprep.bench.uncapped.CAPPED_STARVATION`): the row is a floor of the pipeline's
    capped_by_accelerator: bool | None = None
    #: the check a row makes of its samples before it is timed (the folder recipes'
    #: ``fastprep`` row: :func:`fastprep.bench.unchanged.check_exact`), ``None`` for none
    exactness: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in os.sysconf_names else 100


def children_cpu_seconds(parent: int | None = None) -> dict[int, float] | None:
    """``{pid: user+system CPU seconds}`` of the live child processes (Linux), else None."""
    parent = os.getpid() if parent is None else parent
    if not os.path.isdir("/proc/self"):
        return None
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()  # after "pid (comm) "
        if len(fields) > 12 and int(fields[1]) == parent:
            out[int(entry)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def _cpu_delta(before: dict | None, after: dict | None) -> float | None:
    if before is None or after is None:
        return None
    return sum(after[p] - before.get(p, 0.0) for p in after)


def one_line_error(e: BaseException) -> str:
    """``"Type: message"`` on one line. An error re-raised from a DataLoader worker carries the
    worker's traceback in its message ("Caught X in DataLoader worker process k. Original
    Traceback ..."); its last line is the original ``Type: message``, and that is kept."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback" in str(e):
        return re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*:)", "", lines[-1])  # module.Type: -> Type:
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def slack_batches(workers: int) -> int:
    """Batches a loader should hold beyond the measured ones so it is not exhausted (and its
    workers not shut down, taking their CPU counters with them) before the window ends:
    what the workers and a prefetcher keep in flight, plus one."""
    return 2 + 2 * workers


def output_bounds(tolerance: float = 1e-5) -> tuple[tuple[float, float], ...]:
    """``(lo, hi)`` per channel (Y, U, V) that a pipeline's float32 output may take.

    The union of the RGB->YUV formula's range over ``[0, 255]^3`` scaled by ``1 / 255``
    (Y in [0, 1], U and V in [0.5/255, 255.5/255]: saturated blue and red reach 255.5/255,
    see :func:`~fastprep.bench.pipelines.yuv_range`) and the range of a decoder's uint8
    YCbCr over 255, ``[0, 1]``, widened by ``tolerance`` for float32 rounding.
    """
    return tuple((min(lo, 0.0) - tolerance, max(hi, 1.0) + tolerance) for lo, hi in yuv_range(1 / 255))


def check_batch(images, targets, batch_size: int, crop: int, device: torch.device, bounds=None) -> None:
    """Every pipeline must deliver float32 ``[N, 3, crop, crop]`` on the device, each channel
    within ``bounds`` (``((lo, hi),) * 3``; default :func:`output_bounds`, YUV), and int64
    targets ``[N]``."""
    if not isinstance(images, torch.Tensor) or images.dtype != torch.float32:
        raise TypeError(f"pipeline produced {getattr(images, 'dtype', type(images).__name__)} images, "
                        "expected float32")
    if tuple(images.shape) != (batch_size, 3, crop, crop):
        raise ValueError(f"pipeline produced images of shape {tuple(images.shape)}, "
                         f"expected {(batch_size, 3, crop, crop)}")
    if images.device.type != device.type:
        raise ValueError(f"pipeline produced images on {images.device}, expected {device}")
    if targets.dtype != torch.int64 or targets.shape != (batch_size,):
        raise ValueError(f"pipeline produced targets {targets.dtype} {tuple(targets.shape)}, expected int64 "
                         f"({batch_size},)")
    per_channel = images.transpose(0, 1).reshape(3, -1)
    los, his = per_channel.amin(1).tolist(), per_channel.amax(1).tolist()
    what = ("YUV", "YUV of RGB in [0, 255], divided by 255") if bounds is None else ("RGB", "normalised RGB")
    for name, lo, hi, (blo, bhi) in zip(what[0], los, his, bounds or output_bounds()):
        if not (blo <= lo and hi <= bhi):  # also catches NaN
            raise ValueError(f"pipeline produced {name} values in [{lo:.6f}, {hi:.6f}], expected "
                             f"[{blo:.6f}, {bhi:.6f}] ({what[1]})")


def check_views(views, targets, batch_size: int, crops: tuple[int, ...], device: torch.device, bounds=None) -> None:
    """A multi-view batch: a list of ``len(crops)`` batches, view ``k`` as :func:`check_batch`
    with ``crops[k]``."""
    if not isinstance(views, (list, tuple)) or len(views) != len(crops):
        raise ValueError(f"pipeline produced {type(views).__name__}"
                         f"{f' of {len(views)}' if isinstance(views, (list, tuple)) else ''}, expected a list of "
                         f"{len(crops)} views")
    for k, (view, crop) in enumerate(zip(views, crops)):
        try:
            check_batch(view, targets, batch_size, crop, device, bounds)
        except (TypeError, ValueError) as e:
            raise type(e)(f"view {k}: {e}") from None


def measure(make_iterable: Callable[[], Iterable], trainer, *, steps: int, warmup: int, result: ConfigResult,
            crop: int | tuple[int, ...] | None = None, on_step: Callable[[], None] | None = None,
            check_syncs: bool = False, bounds=None, min_window_s: float = 0.0,
            max_steps: int | None = None) -> ConfigResult:
    """Run ``warmup`` steps, then at least ``steps`` measured steps of ``trainer`` on batches
    from ``make_iterable()``, and fill ``result`` (see the module doc for the figures).

    With ``min_window_s`` the measured steps go on past ``steps`` until the window has lasted
    that long, up to ``max_steps`` (the iterable must hold ``warmup + max_steps`` batches);
    ``result.steps`` is the number measured.
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    limit = warmup + max(steps, max_steps or steps)
    waits, starts = [], []
    t_create = t0 = time.perf_counter()
    iterable = make_iterable()
    loader_engine = getattr(iterable, "engine", None)
    if isinstance(loader_engine, str):  # make_loader's loaders say which engine runs
        result.engine, result.engine_reason = loader_engine, getattr(iterable, "engine_reason", None)
    engine = _thread_loader(iterable)
    stages0 = None
    it = iter(iterable)
    sync_guard = contextlib.nullcontext()
    k = 0
    try:
        while k < warmup + steps or (k < limit and time.perf_counter() - t0 < min_window_s):
            if k == warmup:
                trainer.begin_window()
                t0 = time.perf_counter()
                cpu0, main0 = children_cpu_seconds(), time.process_time()
                stages0 = engine.stage_seconds() if engine is not None else None
                if check_syncs and trainer.device.type == "cuda" and k > 0:
                    sync_guard = _sync_debug_error()
                    sync_guard.__enter__()
            a = time.perf_counter()
            try:
                images, targets = next(it)
            except StopIteration:
                raise RuntimeError(f"the loader ran out after {k} batches; it must yield {limit}") from None
            b = time.perf_counter()
            if k == 0:
                result.time_to_first_batch_s = b - t_create
                if isinstance(crop, tuple):  # one batch per view
                    check_views(images, targets, result.batch_size, crop, trainer.device, bounds)
                elif crop is not None:
                    check_batch(images, targets, result.batch_size, crop, trainer.device, bounds)  # may sync
                if check_syncs and trainer.device.type == "cuda" and warmup == 0:
                    sync_guard = _sync_debug_error()
                    sync_guard.__enter__()
            trainer.step(images, targets)
            del images, targets
            if k >= warmup:
                waits.append(b - a)
                starts.append(a)
            k += 1
            if on_step is not None:
                on_step()
        busy, t_end = trainer.end_window()
        cpu1, main1 = children_cpu_seconds(), time.process_time()
        if engine is not None and stages0 is not None:
            result.engine_stage = list(engine_stage(stages0, engine.stage_seconds(), max(t_end - t0, 1e-9)))
    finally:
        sync_guard.__exit__(None, None, None)
        del it, iterable  # shut the workers down now
    _fill(result, len(waits), max(t_end - t0, 1e-9), busy, waits, starts, _cpu_delta(cpu0, cpu1), main1 - main0,
          no_children=not cpu0 and not cpu1)
    result.trainer_metrics = trainer.metrics() or None
    return result


def _fill(result: ConfigResult, steps: int, window: float, busy: float, waits: list[float], starts: list[float],
          workers_cpu: float | None, main_cpu: float, no_children: bool) -> None:
    """The figures of the module doc, from one measured window."""
    result.steps = steps
    result.window_s = window
    result.steps_per_s = steps / window
    result.samples_per_s = steps * result.batch_size / window
    result.data_wait_fraction = min(1.0, sum(waits) / window)
    result.starvation_fraction = min(1.0, max(0.0, 1.0 - busy / window))
    result.data_wait_ms_median = statistics.median(waits) * 1e3
    periods = [y - x for x, y in zip(starts, starts[1:])] or [window]
    result.step_period_ms_median = statistics.median(periods) * 1e3
    # No child processes (the threads engine runs its workers in this process, counted in
    # main_cpu_cores): no worker-process CPU to report.
    result.worker_cpu_cores = (None if workers_cpu is None or result.workers == 0 or no_children
                               else workers_cpu / window)
    result.main_cpu_cores = main_cpu / window


def engine_stage(before: dict, after: dict, window_s: float) -> tuple[str, str]:
    """:func:`fastprep.data.engine.bottleneck_stage` of two ``stage_seconds()`` readings,
    with the builder's shares taken over the builder thread's own time.

    The engine adds a batch's building and waiting when the batch is done, so a window
    also counts the whole of the batch the builder had begun before it: over a few steps
    the builder's seconds exceed the window (a "building 109%" of a single thread). The
    builder is one thread, so its seconds over the batches it finished are whole cycles:
    here they are scaled to span the window, each share then being the part of the
    builder's time it spent building or waiting (at most 100 %). The consumer's waits
    happen in the measuring thread, inside the window, and are left as they are.
    """
    from fastprep.data.engine import bottleneck_stage

    builder = ("building", "builder_wait_readers", "builder_wait_consumer")
    span = sum(after[key] - before[key] for key in builder)
    if span > 0:
        scale = window_s / span
        after = {**after, **{key: before[key] + (after[key] - before[key]) * scale for key in builder}}
    return bottleneck_stage(before, after, window_s)


def _thread_loader(iterable):
    """The threads engine's loader behind ``iterable`` (make_loader's prefetcher wraps it
    as ``.loader``), or ``None`` (also with ``num_workers=0``: no threads, no stages)."""
    for _ in range(4):
        if hasattr(iterable, "stage_seconds"):
            return iterable if iterable.num_workers > 0 else None
        iterable = getattr(iterable, "loader", None)
        if iterable is None:
            return None
    return None


@contextlib.contextmanager
def _sync_debug_error_cm():
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def _sync_debug_error():
    return _sync_debug_error_cm()
