"""Tracing processes: a traced pipeline's per-sample Python run off the loader's interpreter.

A traced pipeline (:class:`~fastprep.data.traced.TracedPipeline`) calls the user's transform
on a stand-in image for every sample. That is Python, and while it runs the loader's process
holds the GIL: on a DINO-style class about 1.4 ms a sample, more than half of the time the
GIL is held at all. Here the traces run in other processes. The loader sends each a share
of a batch's samples as ``(key, width, height)`` and gets back, per sample, the records the
native replay needs (:meth:`TracedPipeline.trace_records`: the window to decode and each
view's crop, resize and pixel steps, no pixels), or ``None`` for a sample the loader traces
itself. A trace depends on nothing but the transform and those three numbers (the seeds are
the sample's key), so where it runs does not change a bit of the output.

The processes are fresh interpreters (running :func:`main`), not
``multiprocessing`` children: fork would copy a loader's threads mid-step, and spawn or
forkserver import the user's ``__main__`` again, which runs a training script that has no
``if __name__ == "__main__"`` guard a second time. They are shared by the loaders of a
process, started on first need (:func:`tracers`), and each is given a pipeline once, by
cloudpickle (a class defined in ``__main__`` travels by value), then only calls. Started in
the background, a process takes no batch until it is ready: the loader traces the first
batches itself, and time to the first batch does not change.

Failures. A pipeline that cannot be pickled, or that no process can start or load, is traced
in the loader (its ``tracing_reason`` says why; a process's failure is also
:attr:`Tracers.reason`, and its stderr is kept in a file, not shown). A process that dies while tracing
fails the samples it held with an error naming the process and its exit status; it is
started again for later batches. The processes live in a session of their own and ignore
``SIGINT`` (Ctrl-C in a terminal is the loader's), and exit when their pipe closes: when the
loader's process exits, however it exits.

``FASTPREP_TRACE_PROCESSES`` sets the number of processes (default: a quarter of the usable
CPUs, at least one; ``0``: trace in the loader's process).
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from .._threads import usable_cpus

__all__ = ["Tracers", "TracerDied", "tracers", "default_processes"]


class TracerDied(RuntimeError):
    """A tracing process exited while it held a call's samples."""


def default_processes() -> int:
    """``FASTPREP_TRACE_PROCESSES``, else a quarter of the usable CPUs (at least one)."""
    value = os.environ.get("FASTPREP_TRACE_PROCESSES", "").strip()
    if value:
        try:
            return max(0, int(value))
        except ValueError:
            raise ValueError(f"FASTPREP_TRACE_PROCESSES={value!r} is not a whole number") from None
    return max(1, usable_cpus() // 4)


class _Process:
    """One tracing process: its ``Popen``, the two ends of its pipes, and the tokens of the
    objects it has been given."""

    def __init__(self) -> None:
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        # what the process writes to stderr (a failed start's traceback, warnings of the traces)
        # is kept for the reason of a failure, not shown
        self.errors = tempfile.TemporaryFile()
        env = dict(os.environ, FASTPREP_TRACER_PATH=json.dumps(sys.path))
        try:
            self.popen = subprocess.Popen([sys.executable, "-c", _BOOT, str(to_child), str(from_child)],
                                          pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
                                          stderr=self.errors, start_new_session=True, cwd=os.getcwd(), env=env)
        finally:
            os.close(to_child)
            os.close(from_child)
        self.outbox = Connection(from_parent, readable=False)
        self.inbox = Connection(to_parent, writable=False)
        self.given: set[int] = set()
        self.giving: set[int] = set()
        self.dropped: list[int] = []  # forgotten targets not yet dropped (the process was busy)
        self.lock = threading.Lock()
        self.ready = False
        self.failed: str | None = None

    def flush_drops(self) -> None:
        """Tell the process to drop the targets forgotten since (the caller holds ``lock``)."""
        while self.dropped:
            token = self.dropped.pop()
            self.given.discard(token)
            try:
                self.send(("drop", token, None))
            except OSError:
                return

    def send(self, message: tuple) -> None:
        self.outbox.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    def receive(self) -> tuple:
        return pickle.loads(self.inbox.recv_bytes())

    def start(self) -> None:
        """Wait until the process is ready (it has imported fastprep)."""
        try:
            kind, _ = self.receive()
        except (OSError, EOFError):
            kind = None
        if kind == "ready":
            self.ready = True
        else:
            self.failed = f"a tracing process {self.exit_status()}: {self.error_tail()}"

    def error_tail(self) -> str:
        """The last line the process wrote to stderr."""
        try:
            self.errors.seek(0)
            lines = self.errors.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return lines[-1] if lines else ""

    def exit_status(self) -> str:
        try:
            code = self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"

    def close(self) -> None:
        for end in (self.outbox, self.inbox, self.errors):
            try:
                end.close()
            except OSError:
                pass
        try:
            self.popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class Tracers:
    """The tracing processes of this interpreter (:func:`tracers`), shared by its pipelines.

    Attributes:
        reason: why a process could not start or load a pipeline (``None``: none failed).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._processes: list[_Process] = []
        self._payloads: dict[int, bytes] = {}
        self._tokens = 0
        self.reason: str | None = None

    def grow(self, count: int) -> None:
        """Start processes in the background until there are ``count``."""
        with self._lock:
            while len(self._processes) < count:
                process = _Process()
                self._processes.append(process)
                threading.Thread(target=self._start, args=(process,), name="fastprep-tracer-start",
                                 daemon=True).start()

    def _start(self, process: _Process) -> None:
        process.start()
        if process.failed:  # not started again: its pipelines are traced in the loader
            self.reason = process.failed

    @staticmethod
    def pickle(target: Any) -> bytes | str:
        """``target`` pickled by cloudpickle, or why it cannot be."""
        try:
            import cloudpickle  # type: ignore[import-untyped, unused-ignore]
        except ImportError:
            return "cloudpickle is not installed"
        try:
            return cloudpickle.dumps(target, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 -- any failure to pickle keeps the traces in the loader
            return f"the transform cannot be pickled ({type(e).__name__}: {e})"

    def give(self, payload: bytes) -> int:
        """A token for a pickled target (:meth:`pickle`), given to the processes on their next
        :meth:`call`."""
        with self._lock:
            self._tokens += 1
            self._payloads[self._tokens] = payload
            return self._tokens

    def forget(self, token: int) -> None:
        """Drop a given target from every process: at once where the process is idle, else
        with its next call (a pipeline's finalizer may run in a thread that is in a call)."""
        with self._lock:
            self._payloads.pop(token, None)
            processes = list(self._processes)
        for process in processes:
            if token not in process.given:
                continue
            process.dropped.append(token)
            if process.lock.acquire(blocking=False):
                try:
                    process.flush_drops()
                finally:
                    process.lock.release()

    def wait(self, token: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until a process holds ``token``'s target (giving it
        to the ready ones meanwhile); whether one does."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                processes = list(self._processes)
            if any(token in p.given for p in processes):
                return True
            if time.monotonic() >= deadline or token not in self._payloads:
                return False
            self._offer(token)
            time.sleep(0.05)

    def pids(self) -> list[int]:
        """The process ids of the tracing processes."""
        with self._lock:
            return [p.popen.pid for p in self._processes]

    def call(self, token: int, method: str, items: list) -> list:
        """``target.method(share)`` on shares of ``items``, one share per process that is ready
        and holds the target, all at once; per item its answer, or ``None`` where no process
        took it (the caller does that item itself), or a :class:`TracerDied` where the process
        died holding it. A ready process that does not hold the target yet is given it in the
        background (unpickling it imports the transform's modules) and takes later calls."""
        holding = self._offer(token)
        results: list = [None] * len(items)
        if not holding or not items:
            return results
        bounds = [len(items) * k // len(holding) for k in range(len(holding) + 1)]
        taken: list[tuple[int, int, _Process]] = []
        for process, lo, hi in zip(holding, bounds, bounds[1:]):
            if lo == hi:
                continue
            process.lock.acquire()
            try:
                process.flush_drops()
                process.send(("call", token, (method, items[lo:hi])))
            except OSError as e:
                process.lock.release()
                results[lo:hi] = [self._died(process, e)] * (hi - lo)
                continue
            taken.append((lo, hi, process))
        for lo, hi, process in taken:
            try:
                kind, value = process.receive()
            except (OSError, EOFError) as e:
                results[lo:hi] = [self._died(process, e)] * (hi - lo)
                continue
            finally:
                process.lock.release()
            if kind == "ok" and len(value) == hi - lo:
                results[lo:hi] = value
        return results

    def _offer(self, token: int) -> list[_Process]:
        """The ready processes that hold ``token``'s target; the other ready ones are given it
        in the background."""
        with self._lock:
            ready = [p for p in self._processes if p.ready]
        for process in ready:
            if token not in process.given and token not in process.giving:
                process.giving.add(token)
                threading.Thread(target=self._give, args=(process, token), name="fastprep-tracer-give",
                                 daemon=True).start()
        return [p for p in ready if token in p.given]

    def _give(self, process: _Process, token: int) -> None:
        """Send ``process`` a target and wait until it holds it (or says it cannot load it)."""
        with self._lock:
            payload = self._payloads.get(token)
        if payload is None:
            return
        with process.lock:
            try:
                process.send(("give", token, payload))
                kind, value = process.receive()
            except (OSError, EOFError):
                return  # the next call finds the process gone
        if kind == "given":
            process.given.add(token)
        else:  # the process cannot load it: none will; the caller traces in its own process
            self.reason = str(value)

    def _died(self, process: _Process, error: BaseException) -> TracerDied:
        """Replace a dead process (started again in the background) and say what happened."""
        status = process.exit_status() if process.popen.poll() is not None or isinstance(error, EOFError) \
            else f"could not be reached ({error})"
        with self._lock:
            if process in self._processes:
                self._processes.remove(process)
        process.ready = False
        try:
            process.close()
        except OSError:
            pass
        self.grow(len(self._processes) + 1)
        return TracerDied(f"the tracing process {process.popen.pid} {status} while tracing this sample")

    def close(self) -> None:
        """Stop every process (their pipes close; each exits)."""
        with self._lock:
            processes, self._processes = self._processes, []
        for process in processes:
            process.ready = False
            process.close()


_TRACERS: Tracers | None = None
_TRACERS_LOCK = threading.Lock()


def tracers() -> Tracers:
    """This interpreter's :class:`Tracers` (made on first use; stopped at exit)."""
    global _TRACERS
    with _TRACERS_LOCK:
        if _TRACERS is None or _TRACERS_PID != os.getpid():
            _set(Tracers())
        assert _TRACERS is not None
        return _TRACERS


_TRACERS_PID = 0


def _set(value: Tracers) -> None:
    global _TRACERS, _TRACERS_PID
    _TRACERS, _TRACERS_PID = value, os.getpid()
    atexit.register(value.close)


# ---------------------------------------------------------------- the process's side


def _serve(inbox: Connection, outbox: Connection) -> None:
    """Answer the loader's messages until its pipe closes."""
    targets: dict[int, Any] = {}
    while True:
        try:
            kind, token, value = pickle.loads(inbox.recv_bytes())
        except (EOFError, OSError):
            return
        if kind == "give":
            try:
                targets[token] = pickle.loads(value)
                answer: tuple = ("given", None)
            except Exception as e:  # noqa: BLE001 -- the loader traces the target's samples itself
                answer = ("lost", f"a tracing process cannot load the transform ({type(e).__name__}: {e})")
            if not _answer(outbox, answer):
                return
        elif kind == "drop":
            targets.pop(token, None)
        elif kind == "call":
            method, args = value
            try:
                answer = ("ok", getattr(targets[token], method)(args))
            except Exception as e:  # noqa: BLE001 -- the loader traces these samples itself
                answer = ("failed", f"{type(e).__name__}: {e}")
            if not _answer(outbox, answer):
                return


def _answer(outbox: Connection, answer: tuple) -> bool:
    """Send an answer; ``False`` where the loader has gone."""
    try:
        message = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 -- an answer that cannot be pickled: the loader does the work
        message = pickle.dumps(("failed", f"the answer cannot be pickled ({type(e).__name__}: {e})"))
    try:
        outbox.send_bytes(message)
    except OSError:
        return False
    return True


#: the process's first lines: the loader's import path, then fastprep (which imports torch)
_BOOT = ("import json, os, sys; sys.path[:0] = json.loads(os.environ.pop('FASTPREP_TRACER_PATH')); "
         "from fastprep.data._tracers import main; main(sys.argv[1:])")


def main(argv: list[str]) -> None:
    """A tracing process: say it is ready, then serve the loader until its pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    # a trace's tensor work is tiny (a draw, RandomErasing's noise): intra-op threads would only
    # spin on the cores the loader's threads use
    torch.set_num_threads(1)
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    if _answer(outbox, ("ready", None)):
        _serve(inbox, outbox)
