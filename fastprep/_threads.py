"""Threads for the CPU kernels: how many CPUs this process may use, how many threads a
kernel call gets, and the process-wide helper pool the calls share.

A leaf module (imports nothing from fastprep), so every layer can use it.
"""

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from ._checks import is_int

__all__ = ["PARALLEL_MIN_ELEMENTS", "TASK_ELEMENTS", "kernel_threads", "run_tasks", "spans", "usable_cpus"]

PARALLEL_MIN_ELEMENTS = 1 << 20
"""Output elements per thread below which the colour/scale kernels do not add a thread
(about 0.3-0.5 ms of work per thread): a per-sample image (3x256x256 = 196,608 elements,
even 3x512x512) always runs on the calling thread alone."""

TASK_ELEMENTS = 1 << 18  # work unit handed out to the threads, in output elements


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def kernel_threads(elements, num_threads=None):
    """Threads the colour/scale kernels use for an output of ``elements`` float32 values.

    Args:
        elements (int): output elements of the call (``N * 3 * H * W`` for a batch).
        num_threads (int, optional): an explicit count, returned as is (checked).
            ``None``: one thread per :data:`PARALLEL_MIN_ELEMENTS` elements, at most
            ``torch.get_num_threads()`` and the CPUs this process may use -- so one
            thread for every per-sample image and inside DataLoader workers (where torch
            sets one thread), and up to all cores for large batches in the main process.

    Returns:
        int: >= 1.
    """
    if num_threads is not None:
        if not is_int(num_threads):
            raise TypeError(f"num_threads must be None or a positive int, got {num_threads!r} "
                            f"({type(num_threads).__name__})")
        if num_threads < 1:
            raise ValueError(f"num_threads must be None or a positive int, got {num_threads}")
        return int(num_threads)
    cap = min(torch.get_num_threads(), usable_cpus())
    return max(1, min(cap, int(elements) // PARALLEL_MIN_ELEMENTS))


_pool = None
_pool_workers = 0
_pool_lock = threading.Lock()


def _reset_pool():  # in a forked child the parent's pool threads do not exist
    global _pool, _pool_workers, _pool_lock
    _pool, _pool_workers, _pool_lock = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool)


def _helpers(workers):
    global _pool, _pool_workers
    with _pool_lock:
        if _pool is None or _pool_workers < workers:
            old = _pool
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fastprep-kernel")
            _pool_workers = workers
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def run_tasks(run_task, tasks, threads):
    """Call ``run_task(i)`` for ``i < tasks`` on the calling thread and ``threads - 1`` helpers.

    Caller-runs: every thread takes the next task from a shared counter, and the caller
    never waits for a helper that has not started (its job is cancelled), only for one
    that is inside a task. So a helper that the OS does not schedule, because another
    process holds its core, costs nothing: the caller does its share, and the call is
    never slower than one thread by more than one task (OpenMP's fork-join instead
    waits at its barrier for every team thread, which made one 3x256x256 image take
    8-12 ms instead of 0.15 ms with the other core busy). The kernels release the GIL.
    """
    threads = min(threads, tasks)
    if threads <= 1:
        for i in range(tasks):
            run_task(i)
        return
    counter = itertools.count()

    def loop():
        for i in counter:  # next() on itertools.count is atomic under the GIL
            if i >= tasks:
                return
            run_task(i)

    pool = _helpers(threads - 1)
    futures = [pool.submit(loop) for _ in range(threads - 1)]
    try:
        loop()
    finally:
        for f in futures:
            if not f.cancel():
                f.result()


def spans(length, per_task):
    """(tasks, bounds(i)) splitting ``range(length)`` into pieces of about ``per_task``."""
    per_task = max(1, per_task)
    tasks = max(1, -(-length // per_task))
    return tasks, lambda i: (i * per_task, min(length, (i + 1) * per_task))
