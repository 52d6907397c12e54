"""Collate functions for uint8 batches: :func:`collate_uint8` and :class:`PooledCollate`."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.data import get_worker_info

__all__ = ["PooledBatch", "PooledCollate", "collate_uint8"]


def _empty(shape, dtype, shared: bool) -> torch.Tensor:
    if not shared:
        return torch.empty(shape, dtype=dtype)
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(numel * itemsize)
    return torch.empty((), dtype=dtype).set_(storage, 0, tuple(shape), _contiguous_strides(shape))


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(s), 1)
    return tuple(reversed(strides))


def collate_uint8(batch, out=None):
    """Stack ``(image, target)`` samples into ``(images [N, C, H, W], targets int64 [N])``.

    A ``collate_fn`` for uint8 images (any dtype works, it is kept): the images are written
    into one preallocated tensor -- one allocation per batch -- which, inside a DataLoader
    worker, is allocated in shared memory (as ``default_collate`` does) so sending it to the
    main process copies nothing more. Targets may be ints or 0-d tensors.

    Args:
        batch: a list of ``(image, target)`` samples.
        out: optional ``[N, C, H, W]`` tensor to write the images into.

    Raises:
        TypeError: a sample is not an ``(image tensor, target)`` pair.
        ValueError: an empty batch, or images of different shapes or dtypes.
    """
    n = len(batch)
    if n == 0:
        raise ValueError("collate_uint8 got an empty batch")
    first = batch[0]
    if isinstance(first, (tuple, list)) and len(first) == 2 and isinstance(first[0], list):
        return _collate_views(batch)
    if not (isinstance(first, (tuple, list)) and len(first) == 2 and isinstance(first[0], torch.Tensor)):
        raise TypeError(f"collate_uint8 expects (image tensor, target) samples, got {type(first).__name__}"
                        + (f" of length {len(first)}" if isinstance(first, (tuple, list)) else ""))
    elem = first[0]
    shape, dtype = tuple(elem.shape), elem.dtype
    in_worker = get_worker_info() is not None
    if out is not None and (tuple(out.shape) != (n,) + shape or out.dtype != dtype):
        raise ValueError(f"collate_uint8: out must be {(n,) + shape} {dtype}, got {tuple(out.shape)} {out.dtype}")
    images = out if out is not None else _empty((n,) + shape, dtype, in_worker)
    targets = torch.empty(n, dtype=torch.int64)
    for i, sample in enumerate(batch):
        img, target = sample
        if not isinstance(img, torch.Tensor) or tuple(img.shape) != shape or img.dtype != dtype:
            raise ValueError(_mismatch(batch))
        images[i].copy_(img)
        targets[i] = int(target)
    return images, targets


def _collate_views(batch):
    """A MultiView's samples ``([view tensors], target)``: one batch per view, in a list."""
    views = len(batch[0][0])
    for sample in batch:
        if not isinstance(sample[0], list) or len(sample[0]) != views:
            raise ValueError(f"a MultiView batch needs {views} views in every sample, got "
                             f"{len(sample[0]) if isinstance(sample[0], list) else type(sample[0]).__name__}")
    batches = [collate_uint8([(sample[0][v], sample[1]) for sample in batch]) for v in range(views)]
    return [images for images, _ in batches], batches[0][1]


def _describe(img) -> str:
    return f"{tuple(img.shape)} {img.dtype}" if isinstance(img, torch.Tensor) else type(img).__name__


def _mismatch(batch) -> str:
    """The message for a batch whose images differ in shape or dtype: the first image
    unlike most of the batch, named by its file and index when the dataset gave them
    (``batch.names``, :meth:`fastprep.data.JpegDataset.__getitems__`)."""
    kinds = [_describe(sample[0]) for sample in batch]
    common = max(kinds, key=kinds.count)  # ties: the earliest
    i = next(k for k, kind in enumerate(kinds) if kind != common)
    names = getattr(batch, "names", None)
    where = f"sample {i} of the batch"
    if names is not None and i < len(names):
        index, name = names[i]
        where = f"{name!r} (index {index})"
    hint = ""
    got = batch[i][0]
    if isinstance(got, torch.Tensor) and got.dim() == 3 and got.shape[0] in (1, 2, 4) and "(3," in common:
        hint = (f" (a {got.shape[0]}-channel image: a grayscale, gray+alpha or CMYK file decoded as it is stored; "
                "decode it to RGB, e.g. fastprep.io.decode_jpeg(data) or torchvision's decode_jpeg(data, "
                "mode=ImageReadMode.RGB))")
    return (f"{where}: the per-sample transform gave {kinds[i]}, the batch's other images are {common}; a batch "
            f"needs images of one shape and dtype (collate_uint8){hint}")


class PooledBatch(NamedTuple):
    """A batch written into a reusable buffer; ``slot`` names the buffer (-1: a one-off
    buffer) and ``owner`` is what takes it back (``owner.release(slot, event)``; ``None``:
    the loader's :class:`PooledCollate`). :class:`DevicePrefetcher` releases the slot once
    it is done with the images."""

    images: torch.Tensor
    targets: torch.Tensor
    slot: int
    owner: object = None
    #: the samples of this batch replaced by a substitute (``on_error="skip"``), as
    #: :class:`fastprep.data.SkippedFile` records not yet counted: the prefetcher counts them
    #: in the dataset when it delivers the batch
    skipped: tuple = ()


class PooledCollate:
    """:func:`collate_uint8` into shared-memory buffers that each worker reuses.

    A fresh shared-memory batch is zero-filled by the kernel page by page on first write:
    measured 8.5 ms per 64x3x256x256 batch, 0.13 ms per sample -- about a tenth of a
    worker's time per sample. Each worker keeps ``slots`` buffers and writes a batch into
    one the consumer has released; :class:`DevicePrefetcher` releases a buffer as soon as
    the batch has been copied or converted out of it. If none is free (the consumer still
    holds them, or a loop was broken off with batches in flight) the worker falls back to a
    new buffer, so it never waits. Outside workers it is :func:`collate_uint8`. The
    batch's uncounted skips (``samples.skipped`` from :meth:`JpegDataset.__getitems__`)
    go into ``PooledBatch.skipped`` (outside workers too, then with slot -1).

    Ownership is explicit: a busy flag per buffer in shared memory, set by the worker
    when it writes a batch and cleared by :meth:`release` (called by the prefetcher); no
    reference count is read (see ``docs/data.md``).

    Only for loaders consumed by :class:`DevicePrefetcher` (as :func:`make_loader` builds
    them), one iteration at a time: the prefetcher releases a buffer only when the batch it
    yields no longer lives in it, but two iterations of the same loader at once would share
    the release flags.

    Args:
        num_workers: the DataLoader's ``num_workers``.
        slots: buffers per worker; ``prefetch_factor + 2`` covers the batches in flight.
    """

    def __init__(self, num_workers: int, slots: int = 4):
        self.slots = int(slots)
        n = max(int(num_workers), 1) * self.slots
        self.busy = torch.zeros(n, dtype=torch.uint8).share_memory_()
        #: buffers allocated per worker (fresh ones included), for tests and diagnostics
        self.allocations = torch.zeros(max(int(num_workers), 1), dtype=torch.int64).share_memory_()
        self._buffers: dict[int, torch.Tensor] = {}

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_buffers"] = {}
        return state

    def release(self, slot: int, event=None) -> None:
        """Hand buffer ``slot`` back to its worker (the consumer no longer reads it).
        ``event`` (a CUDA event after a copy out of the buffer) is not needed here: on
        CUDA the DataLoader copies batches to pinned memory before the device copy."""
        if slot >= 0:
            self.busy[slot] = 0

    def reset(self) -> None:
        """Mark every buffer free (only while no worker runs)."""
        self.busy.zero_()

    def __call__(self, batch):
        skipped = tuple(getattr(batch, "skipped", ()))
        info = get_worker_info()
        if info is None:
            images, targets = collate_uint8(batch)
            return PooledBatch(images, targets, -1, skipped=skipped) if skipped else (images, targets)
        slot, out = self._acquire(info.id, batch)
        images, targets = collate_uint8(batch, out=out)
        return PooledBatch(images, targets, slot, skipped=skipped)

    def _acquire(self, worker: int, batch):
        """``(slot, view of a pooled buffer)`` for ``batch``, or ``(-1, None)``: a fresh one."""
        first = batch[0][0] if batch and isinstance(batch[0], (tuple, list)) and batch[0] else None
        if not isinstance(first, torch.Tensor):
            return -1, None
        shape = (len(batch),) + tuple(first.shape)
        for j in range(self.slots):
            slot = worker * self.slots + j
            if slot >= self.busy.numel() or self.busy[slot]:
                continue
            buf = self._buffers.get(j)
            if buf is None or buf.dtype != first.dtype or buf.shape[1:] != shape[1:] or buf.shape[0] < shape[0]:
                buf = _empty(shape, first.dtype, True)
                self._buffers[j] = buf
                self.allocations[min(worker, self.allocations.numel() - 1)] += 1
            self.busy[slot] = 1
            return slot, buf[: shape[0]]
        self.allocations[min(worker, self.allocations.numel() - 1)] += 1
        return -1, None

