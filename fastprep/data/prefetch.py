"""Move batches to a device one step ahead of the consumer: :class:`DevicePrefetcher`."""

from __future__ import annotations

import torch

from .collate import PooledCollate, _PooledBatch

__all__ = ["DevicePrefetcher"]


def _to_device(obj, device, non_blocking):
    if isinstance(obj, torch.Tensor):
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

    Every batch is yielded exactly once, in order, including a last partial batch.
    Breaking out of the loop closes the loader's iterator (non-persistent workers stop).
    ``len()`` is the loader's.

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
    """

    def __init__(self, loader, device, batch_transform=None, non_blocking: bool = True, *,
                 track_epochs: bool = False):
        self.track_epochs = bool(track_epochs)
        #: the epoch the next ``iter()`` runs (with ``track_epochs``)
        self.epoch = 0
        self.loader = loader
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.batch_transform = batch_transform
        self.non_blocking = bool(non_blocking)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch`` (to resume, or to follow the usual
        ``loader.set_epoch(epoch)`` idiom of a DDP loop); later ones continue from it.
        Only meaningful with ``track_epochs``."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self.epoch = epoch

    def _begin_epoch(self) -> None:
        epoch, self.epoch = self.epoch, self.epoch + 1
        for owner in (getattr(self.loader, "sampler", None), getattr(self.loader, "dataset", None)):
            set_epoch = getattr(owner, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)

    def _stage(self, batch):
        pooled = batch if isinstance(batch, _PooledBatch) else None
        if pooled is not None:
            batch = (pooled.images, pooled.targets)
        batch = _to_device(batch, self.device, self.non_blocking)
        if self.batch_transform is not None:
            if isinstance(batch, (tuple, list)) and batch:
                batch = type(batch)([self.batch_transform(batch[0]), *batch[1:]])
            else:
                batch = self.batch_transform(batch)
        if pooled is not None and pooled.slot >= 0:
            staged = batch[0]
            # Release the worker's buffer once the images were copied or converted out of
            # it (never when the yielded tensor still is that buffer).
            if staged.device.type != "cpu" or \
                    staged.untyped_storage().data_ptr() != pooled.images.untyped_storage().data_ptr():
                collate = getattr(self.loader, "collate_fn", None)
                if isinstance(collate, PooledCollate):
                    collate.release(pooled.slot)
        return batch

    def __iter__(self):
        collate = getattr(self.loader, "collate_fn", None)
        if isinstance(collate, PooledCollate) and not getattr(self.loader, "persistent_workers", False):
            collate.reset()  # new workers, new buffers: slots left busy by a broken-off loop are free
        if self.track_epochs:
            self._begin_epoch()  # before iter(): workers created or resumed now see the epoch
        it = iter(self.loader)
        try:
            if self.device.type == "cuda":
                yield from self._iter_cuda(it)
            else:
                nxt = self._next(it, None)
                while nxt is not _END:
                    cur = nxt
                    nxt = self._next(it, None)
                    yield cur
        except RuntimeError:
            _drop_broken_persistent_iterator(self.loader, it)
            raise
        finally:
            # On early exit, dropping the last reference to a DataLoader iterator shuts
            # its (non-persistent) workers down now rather than at garbage collection.
            del it

    def _next(self, it, stream):
        try:
            batch = next(it)
        except StopIteration:
            return _END
        if stream is None:
            return self._stage(batch)
        with torch.cuda.stream(stream):
            staged = self._stage(batch)
            event = torch.cuda.Event()
            event.record(stream)
        return staged, event

    def _iter_cuda(self, it):
        # No device context held across ``yield``: the consumer's current device is its own.
        stream = torch.cuda.Stream(self.device)
        nxt = self._next(it, stream)
        while nxt is not _END:
            staged, event = nxt
            nxt = self._next(it, stream)  # issue the next copy before handing this one out
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_event(event)
            for t in _tensors(staged):
                if t.device.type == "cuda":
                    # allocated on the side stream, used on the consumer's: keep the
                    # allocator from reusing the memory before the consumer's work is done
                    t.record_stream(consumer)
            yield staged

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={self.device}, batch_transform={self.batch_transform!r})"


_END = object()
