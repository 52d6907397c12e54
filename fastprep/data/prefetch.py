"""Move batches to a device one step ahead of the consumer: :class:`DevicePrefetcher`."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import torch

from .._checks import is_int
from .collate import PooledBatch, PooledCollate
from .order import check_epoch

__all__ = ["DevicePrefetcher"]


def _to_device(obj, device: torch.device, non_blocking):
    if isinstance(obj, torch.Tensor):
        if device.type == "cpu" and obj.is_cpu:  # what .to would return, without its argument parsing
            return obj
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, tuple):
        return tuple(_to_device(o, device, non_blocking) for o in obj)
    if isinstance(obj, list):
        return [_to_device(o, device, non_blocking) for o in obj]
    if isinstance(obj, dict):
        return {k: _to_device(v, device, non_blocking) for k, v in obj.items()}
    return obj


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _drop_broken_persistent_iterator(loader, it) -> None:
    """After a worker died (``RuntimeError: DataLoader worker ... exited unexpectedly``),
    a persistent-workers DataLoader would hand the same broken iterator to every later
    epoch; shut it down and forget it so the next epoch starts fresh workers."""
    if getattr(loader, "persistent_workers", False) and getattr(loader, "_iterator", None) is it:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        loader._iterator = None


_TRACEBACK = "Traceback (most recent call last):\n"
# torch's ExceptionWrapper.reraise: "Caught {type} in DataLoader worker process {n}.\nOriginal {traceback}"
_WORKER_ERROR = re.compile(r"Caught \w+ (in DataLoader worker process \d+)\.\nOriginal " + re.escape(_TRACEBACK))


def _consumer_error(error: Exception) -> Exception:
    """``error`` as the consumer should see it: for an exception a ``DataLoader`` worker
    raised, the worker's exception type with the worker's own message first (naming the
    file), chained to torch's re-raise, whose message holds the worker's traceback; any
    other error as it is.

    torch re-raises a worker's exception as ``type("Caught DecodeError in DataLoader worker
    process 0.\\nOriginal Traceback ...")``: the file the error names is tens of lines
    down. The worker's message is the last exception block of that traceback text.
    """
    text = str(error)
    match = _WORKER_ERROR.match(text)
    if match is None:
        return error
    lines = text[match.end():].rsplit(_TRACEBACK, 1)[-1].split("\n")
    k = 0
    while k < len(lines) and (not lines[k] or lines[k].startswith(" ")):
        k += 1  # the frames of the last traceback
    last = "\n".join(lines[k:]).rstrip("\n")
    cls = type(error)
    names = [cls.__qualname__] if cls.__module__ in ("builtins", "__main__") else \
        [f"{cls.__module__}.{cls.__qualname__}", cls.__qualname__]
    for name in names:
        if last.startswith(name + ": "):
            message = last[len(name) + 2:]
            break
    else:
        return error  # not the shape torch writes: leave it as it is
    try:
        rebuilt = cls(message)
    except Exception:  # noqa: BLE001 - an exception type that takes other arguments
        return error
    rebuilt.__cause__ = error
    add_note = getattr(rebuilt, "add_note", None)  # Python >= 3.11
    if add_note is not None:
        add_note(f"(raised {match.group(1)}; the worker's traceback is the cause above)")
    return rebuilt


def _check_plain_state(state) -> dict:
    """A state of a prefetcher without an epochs controller: ``{"epoch", "batches"}``."""
    if not isinstance(state, dict):
        raise TypeError(f"a loader state is a dict from loader.state_dict(), got {type(state).__name__}")
    missing = [k for k in ("epoch", "batches") if k not in state]
    if missing:
        raise ValueError(f"not a loader state from loader.state_dict() (missing {', '.join(map(repr, missing))}): "
                         f"{state!r:.200}")
    check_epoch(state["epoch"], "the loader state's 'epoch'")
    batches = state["batches"]
    if not is_int(batches):
        raise TypeError(f"the loader state's 'batches' must be an int, got {batches!r} ({type(batches).__name__})")
    if batches < 0:
        raise ValueError(f"the loader state's 'batches' must be >= 0, got {batches}")
    return dict(state)


class DevicePrefetcher:
    """Iterate a loader with batches moved to ``device`` one step ahead of the consumer.

    Each batch (normally ``(images, targets)``) is copied to ``device`` and, if given,
    ``batch_transform`` is applied to its first element (the images) on the device.

    On CUDA the copy and the transform of batch N+1 are issued on a side stream before
    batch N is handed out, so they overlap the consumer's work on batch N; the consumer's
    stream waits for the side stream before using a batch, and every yielded tensor is
    ``record_stream``-ed on the consumer's stream so the caching allocator does not reuse
    its memory while the consumer still runs. The copy is asynchronous only from pinned
    memory: use ``DataLoader(..., pin_memory=True)`` (:func:`make_loader` does on CUDA).
    On any other device the same code runs without streams, so results are identical.

    Every batch is yielded exactly once, in order, including a last partial batch. A batch
    that fails (the loader raises for it, or staging it does) is raised at the ``next()``
    that would return it, after every batch before it: the prefetcher stages the next batch
    ahead, but holds its failure back until its turn. A ``DataLoader`` worker's exception
    is re-raised as the worker's exception type with the worker's own message (naming the
    file) first, chained to torch's re-raise, which holds the worker's traceback.
    Breaking out of the loop, or an error, closes the loader's iterator (non-persistent
    workers stop, the threads engine's threads stop). ``len()`` is the loader's.

    Skips: a batch's samples replaced under ``on_error="skip"`` travel with it
    (``PooledBatch.skipped``) and are counted in :attr:`dataset` when the batch is yielded
    (``dataset.count_skip``), so ``dataset.skipped`` counts the delivered batches only.

    Resuming: :meth:`state_dict` returns a plain dict describing the position after the
    last batch the consumer received (its epoch, and batches of it delivered);
    :meth:`load_state_dict` makes the next ``iter()`` continue from there (torchdata's
    ``StatefulDataLoader`` conventions). With an ``epochs`` controller (:func:`make_loader`
    gives one) the state is the controller's (:class:`fastprep.data.order.EpochControl`:
    exact, skipping what was consumed); without one, a resumed epoch drops its first
    ``batches`` batches.

    Args:
        loader: an iterable of batches, usually a ``DataLoader``.
        device: target device (``torch.device`` or string).
        batch_transform: callable on the device images, e.g. :class:`BatchYuvScale`.
        non_blocking: pass ``non_blocking`` to ``Tensor.to``.
        track_epochs: count epochs (one per ``iter()``, starting at :attr:`epoch`, settable
            with :meth:`set_epoch`) and, before each one starts, call ``set_epoch(epoch)`` on
            the loader's ``sampler`` (e.g. ``DistributedSampler``: a new shuffle per
            epoch) and ``dataset`` (sample-keyed randomness) where they have one.
            :func:`make_loader` turns it on; off by default, so a sampler you drive
            yourself is left alone.
        epochs: an :class:`~fastprep.data.order.EpochControl` that sets each epoch up
            instead (with ``track_epochs``).
    """

    def __init__(self, loader, device, batch_transform=None, non_blocking: bool = True, *,
                 track_epochs: bool = False, epochs=None):
        self.track_epochs = bool(track_epochs)
        #: the epoch the next ``iter()`` runs (with ``track_epochs``)
        self.epoch = 0
        self.loader = loader
        self.epochs = epochs
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.batch_transform = batch_transform
        #: why make_loader's loader does not run on the threads engine (``None`` when it does)
        self.engine_reason: str | None = None
        self.non_blocking = bool(non_blocking)
        self._resume: dict | None = None  # a loaded state, for the next iter()
        # [epoch, batches delivered, samples delivered] of the epoch in progress
        self._running: list[int] | None = None

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def dataset(self):
        """The dataset the batches come from (``loader.dataset.skipped``,
        ``loader.dataset.skipped_files``); ``None`` when the loader has none."""
        if self.epochs is not None:
            return self.epochs.dataset
        return getattr(self.loader, "dataset", None)

    @property
    def engine(self) -> str | None:
        """``"threads"`` or ``"processes"`` for :func:`make_loader`'s loaders, else ``None``."""
        return getattr(self.epochs, "engine", None)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch`` (to resume, or to follow the usual
        ``loader.set_epoch(epoch)`` idiom of a DDP loop); later ones continue from it.
        Only meaningful with ``track_epochs``. A state loaded by :meth:`load_state_dict`
        stays pending when it is of ``epoch``."""
        epoch = check_epoch(epoch)
        self.epoch = epoch
        if self._resume is not None and self._resume.get("epoch") != epoch:
            self._resume = None
        if self.epochs is not None:
            self.epochs.set_epoch(epoch)

    def state_dict(self) -> dict:
        """Where the loader stands: the epoch and the position after the last batch the
        consumer received (at an epoch's end: the next epoch, at its start). A plain dict
        (ints, ``None``, strings) that pickles and ``torch.save``-s."""
        if self._resume is not None:
            return dict(self._resume)
        running = self._running
        if self.epochs is not None:
            if running is None:
                return self.epochs.state(self.epoch)
            return self.epochs.state(running[0], running[1], running[2], running=True)
        if running is None:
            return {"epoch": self.epoch, "batches": 0}
        return {"epoch": running[0], "batches": running[1]}

    def load_state_dict(self, state: dict) -> None:
        """Make the next ``iter()`` resume at ``state`` (from :meth:`state_dict`, possibly
        of another process).

        The state is checked here, before anything changes: every field's type and range,
        their consistency, and (with an ``epochs`` controller) that it fits this loader --
        dataset size, seed, configuration (:meth:`~fastprep.data.order.EpochControl.check`).

        Raises:
            TypeError, ValueError: naming the field and its value, or what differs.
        """
        if self.epochs is not None:
            state = self.epochs.check(state)
        else:
            state = _check_plain_state(state)
        self.set_epoch(state["epoch"])
        self._running = None
        self._resume = state

    def _begin_epoch(self) -> int:
        """Start the next epoch; returns how many leading batches to drop (a resume)."""
        epoch, self.epoch = self.epoch, self.epoch + 1
        resume, self._resume = self._resume, None
        self._running = [epoch, 0, 0]
        if self.epochs is not None:
            return self.epochs.begin(epoch, resume)
        for owner in (getattr(self.loader, "sampler", None), getattr(self.loader, "dataset", None)):
            set_epoch = getattr(owner, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
        if resume is not None and resume["epoch"] == epoch:
            self._running[1] = resume["batches"]
            return resume["batches"]
        return 0

    def _stage(self, batch):
        """``(batch on the device, transformed; its pooled buffer or None)``."""
        pooled = batch if isinstance(batch, PooledBatch) else None
        if pooled is not None:
            batch = (pooled.images, pooled.targets)
        batch = _to_device(batch, self.device, self.non_blocking)
        if self.batch_transform is not None:
            if isinstance(batch, (tuple, list)) and batch:
                batch = type(batch)([self._transform_images(batch[0]), *batch[1:]])
            else:
                batch = self.batch_transform(batch)
        if pooled is not None and pooled.slot >= 0:
            staged = batch[0] if isinstance(batch[0], list) else [batch[0]]
            pooled_images = pooled.images if isinstance(pooled.images, list) else [pooled.images]
            # Release the buffers once the images were copied or converted out of them (never
            # when a yielded tensor still is one of them).
            if all(x.device.type != "cpu" or x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
                   for x, y in zip(staged, pooled_images)):
                return batch, pooled
        return batch, None

    def _transform_images(self, images):
        """The batch transform of the images: of each view's batch for a MultiView's list."""
        assert self.batch_transform is not None
        if isinstance(images, list):
            return [self.batch_transform(x) for x in images]
        return self.batch_transform(images)

    def _release(self, pooled, event=None) -> None:
        if pooled is None:
            return
        owner = pooled.owner
        if owner is None:
            owner = getattr(self.loader, "collate_fn", None)
            if not isinstance(owner, PooledCollate):
                return
        owner.release(pooled.slot, event)

    def _delivered(self, batch) -> None:
        running = self._running
        if running is not None:
            running[1] += 1
            count = getattr(batch, "sample_count", None)  # a batch boxed with its size
            if count is not None:
                running[2] += int(count)
                return
            first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
            if isinstance(first, list) and first:  # a MultiView's views: count samples once
                first = first[0]
            if isinstance(first, torch.Tensor) and first.dim() > 0:
                running[2] += int(first.shape[0])

    def __iter__(self):
        collate = getattr(self.loader, "collate_fn", None)
        if isinstance(collate, PooledCollate) and not getattr(self.loader, "persistent_workers", False):
            collate.reset()  # new workers, new buffers: slots left busy by a broken-off loop are free
        # The epoch is set up now, in the caller's thread (an unseeded epoch draws its seed
        # from torch's default generator here), before any worker or thread starts.
        drop = self._begin_epoch() if self.track_epochs else self._untracked_resume()
        return self._iterate(drop)

    def _untracked_resume(self) -> int:
        resume, self._resume = self._resume, None
        self._running = [self.epoch, 0, 0]
        if resume is None:
            return 0
        self._running[1] = resume["batches"]
        return resume["batches"]

    def _iterate(self, drop: int):
        it = iter(self.loader)
        try:
            for _ in range(drop):
                batch = next(it, _END)
                if batch is _END:
                    break
                if isinstance(batch, PooledBatch) and batch.slot >= 0:
                    self._release(batch)
            # On CUDA the copy of batch k + 1 is issued on a side stream before batch k is
            # handed out, so it overlaps the consumer's work on batch k. A batch that fails
            # (a bad file, a worker error) is staged as its error, raised at its own turn:
            # the consumer gets every batch before it first.
            stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
            nxt = self._next(it, stream)
            while nxt is not _END:
                if isinstance(nxt, _Failed):
                    raise nxt.error
                cur = nxt
                nxt = self._next(it, stream)
                yield self._deliver(cur)
            self._running = None  # the epoch is complete
        except RuntimeError:
            _drop_broken_persistent_iterator(self.loader, it)
            raise
        finally:
            close = getattr(it, "close", None)
            if callable(close):
                close()  # the threads engine: stop its threads now
            elif not getattr(self.loader, "persistent_workers", False):
                # A DataLoader's workers stop now, also when an error ends the epoch: the
                # error's traceback keeps the iterator alive, and torch's own shutdown at
                # garbage collection took 10 s with 2 workers (here, plain DataLoader too),
                # against 0.07 s when called at once.
                shutdown = getattr(it, "_shutdown_workers", None)
                if callable(shutdown):
                    shutdown()
            del it

    def _next(self, it, stream):
        """The next batch staged (:class:`_Staged`), ``_END``, or :class:`_Failed` with the
        error that getting or staging it raised."""
        try:
            batch = next(it)
        except StopIteration:
            return _END
        except Exception as e:  # noqa: BLE001 - raised at this batch's turn, in _iterate
            return _Failed(_consumer_error(e))
        skipped = batch.skipped if isinstance(batch, PooledBatch) else ()
        try:
            if stream is None:
                staged, pooled = self._stage(batch)
                self._release(pooled)
                return _Staged(staged, None, skipped)
            with torch.cuda.stream(stream):
                staged, pooled = self._stage(batch)
                event = torch.cuda.Event()
                event.record(stream)
        except Exception as e:  # noqa: BLE001 - as above
            return _Failed(e)
        self._release(pooled, event)  # the buffer is free once the copy out of it is done
        return _Staged(staged, event, skipped)

    def _deliver(self, staged: _Staged):
        """Hand ``staged`` to the consumer: its stream waits for the copy, the position
        and the skipped samples of the batch are counted now."""
        batch = staged.batch
        if staged.event is not None:
            # No device context held across ``yield``: the consumer's current device is its own.
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_event(staged.event)
            for t in _tensors(batch):
                if t.device.type == "cuda":
                    # allocated on the side stream, used on the consumer's: keep the
                    # allocator from reusing the memory before the consumer's work is done
                    t.record_stream(consumer)
        self._delivered(batch)
        if staged.skipped:
            count = getattr(self.dataset, "count_skip", None)
            if callable(count):
                for record in staged.skipped:
                    count(record)
        return batch

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device}, batch_transform={self.batch_transform!r})"


_END = object()


class _Staged(NamedTuple):
    """A batch on its way to the consumer: on the device, the CUDA event after its copy
    (``None`` off CUDA), the samples its loader skipped (counted when it is delivered)."""

    batch: Any
    event: Any
    skipped: tuple


class _Failed(NamedTuple):
    """A batch that could not be made: its error, raised when the batch's turn comes."""

    error: BaseException
