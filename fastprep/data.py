"""The data path: JPEG datasets, a uint8 collate, a device prefetcher and batch transforms.

The pipeline this module wires (:func:`make_loader`)::

    worker process                         | main process
    read bytes -> DecodeRandomCrop         |
      -> RandomMask (uint8)                |
      -> collate_uint8 (shared memory) ----+-> pinned (CUDA) -> DevicePrefetcher
                                           |     -> BatchYuvScale on the device

Design choices:

* **uint8 crosses the worker boundary.** A 3x256x256 sample is 196 KB as uint8 and 786 KB
  as float32; colour conversion and scaling are done once per batch after the transfer
  (on the GPU for free, or by the Cython kernel on the CPU).
* **Masking stays in the worker, on uint8, before collate.** It needs per-sample
  randomness drawn from the worker's torch RNG (seeded per worker by DataLoader), so a
  batch op would have to carry one mask per sample across the boundary anyway. Masked
  pixels are 0 in uint8 and end as ``(0, 128/255, 128/255)`` after :class:`BatchYuvScale`,
  exactly as Mask -> ConvertColor -> Scale per sample.
* **Decode errors.** ``on_error="raise"`` raises :class:`fastprep.io.DecodeError` whose
  message names the file (the libjpeg error is chained). ``on_error="skip"`` replaces the
  sample by another index chosen deterministically from the failed one and counts the
  skip; counts live in a small shared-memory tensor with one slot per process (main
  process and each DataLoader worker), so ``dataset.skipped`` in the main process sees
  the skips made in workers, with ``fork`` and ``spawn`` alike, without locks.
"""

from __future__ import annotations

import numbers
import os
import threading
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from . import functional as F
from . import io as fio
from ._kernels import _color
from .decode_transforms import DecodeRandomCrop
from .transforms import RandomMask

__all__ = [
    "BatchConvertColor",
    "BatchScale",
    "BatchYuvScale",
    "DevicePrefetcher",
    "JpegDataset",
    "JpegFolder",
    "batch_rgb_to_yuv",
    "collate_uint8",
    "make_loader",
]

_ON_ERROR = ("raise", "skip")
_MAX_SKIP_SLOTS = 256  # slot 0: main process; slot k: DataLoader worker k - 1
_DEFAULT_EXTENSIONS = (".jpg", ".jpeg")

# JFIF 1.02 (ITU-T T.871) section 7: BT.601 full-range YCbCr, rows (R, G, B, offset).
_YUV_COEFFS = (
    (0.299, 0.587, 0.114, 0.0),
    (-0.16874, -0.33126, 0.5, 128.0),
    (0.5, -0.41869, -0.08131, 128.0),
)


# --------------------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------------------


def _skip_slot() -> int:
    info = get_worker_info()
    return 0 if info is None else min(info.id + 1, _MAX_SKIP_SLOTS - 1)


class JpegDataset(Dataset):
    """A map-style dataset over JPEG files that hands the transform the *encoded* bytes.

    ``dataset[i] == (transform(read_file(files[i])), targets[i])``: the file is read into a
    uint8 1-D tensor (no PIL, no decode), so the transform's first step is a decoding one
    such as :class:`fastprep.transforms.DecodeRandomCrop`. Without a transform the sample
    is the encoded tensor itself.

    Args:
        files: sequence of paths.
        targets: one int per file; ``None`` gives target 0 for every file.
        transform: callable applied to the encoded uint8 tensor.
        on_error: ``"raise"`` (default): a file that cannot be read or decoded raises
            :class:`fastprep.io.DecodeError` naming the file, chained to the original
            error. ``"skip"``: the sample at a substitute index is returned instead (the
            substitute is a fixed function of the failed index and the attempt, so runs
            are reproducible) and the skip is counted in :attr:`skipped`.
        max_skip_attempts: with ``"skip"``, how many substitutes to try before raising.

    Skip counting across processes: the counts are held in a shared-memory int64 tensor
    (:attr:`skip_counts`) with one slot per process -- slot 0 for the main process, slot
    ``k + 1`` for DataLoader worker ``k`` -- so every slot has a single writer and the
    main process reads the workers' counts directly, live, under ``fork`` or ``spawn``
    (torch shares the storage when it pickles the dataset for a spawned worker).
    Counts accumulate over epochs until :meth:`reset_skipped`. A plain
    ``pickle.dumps`` (not torch's multiprocessing pickler) copies the counts instead.
    """

    def __init__(self, files, targets=None, transform=None, on_error: str = "raise", *,
                 max_skip_attempts: int = 100):
        if isinstance(files, (str, os.PathLike)):
            raise TypeError(f"files must be a sequence of paths, got a single path {files!r}; "
                            "use JpegFolder for a directory")
        self.files = [os.fspath(f) for f in files]
        if targets is None:
            self.targets = [0] * len(self.files)
        else:
            self.targets = [int(t) for t in targets]
            if len(self.targets) != len(self.files):
                raise ValueError(f"targets must have one entry per file: got {len(self.targets)} targets "
                                 f"for {len(self.files)} files")
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if isinstance(max_skip_attempts, bool) or not isinstance(max_skip_attempts, numbers.Integral) \
                or max_skip_attempts < 1:
            raise ValueError(f"max_skip_attempts must be a positive int, got {max_skip_attempts!r}")
        self.transform = transform
        self.on_error = on_error
        self.max_skip_attempts = int(max_skip_attempts)
        self.skip_counts = torch.zeros(_MAX_SKIP_SLOTS, dtype=torch.int64).share_memory_()

    def __len__(self) -> int:
        return len(self.files)

    @property
    def skipped(self) -> int:
        """Samples skipped so far, summed over the main process and all DataLoader workers."""
        return int(self.skip_counts.sum())

    def reset_skipped(self) -> None:
        """Zero the skip counts (call from the main process while no workers run)."""
        self.skip_counts.zero_()

    def _load(self, index: int):
        path = self.files[index]
        try:
            data = fio.read_file(path)
            sample = data if self.transform is None else self.transform(data)
        except (fio.DecodeError, OSError) as e:
            raise fio.DecodeError(f"cannot decode {path!r} (index {index}): {e}") from e
        return sample, self.targets[index]

    def _substitute(self, index: int, attempt: int) -> int:
        """A deterministic index other than ``index`` (when there is one) for ``attempt``."""
        n = len(self.files)
        if n < 2:
            return index
        # Weyl step by a large odd constant: spreads substitutes instead of always taking
        # the neighbour, and is the same in every process and every run.
        return (index + 1 + (attempt * 0x9E3779B1 + index * 0x85EBCA77) % (n - 1)) % n

    def __getitem__(self, index: int):
        if self.on_error == "raise":
            return self._load(index)
        i = index
        for attempt in range(self.max_skip_attempts + 1):
            try:
                return self._load(i)
            except fio.DecodeError as e:
                self.skip_counts[_skip_slot()] += 1
                last = e
                i = self._substitute(index, attempt)
        raise fio.DecodeError(f"on_error='skip' found no decodable file after {self.max_skip_attempts} "
                              f"substitutes for index {index}") from last

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(files={len(self.files)}, transform={self.transform!r}, "
                f"on_error={self.on_error!r})")


def _has_extension(name: str, extensions) -> bool:
    return name.lower().endswith(extensions)


class JpegFolder(JpegDataset):
    """JPEG files in class subfolders, with ``torchvision.datasets.ImageFolder`` conventions.

    ``root/<class>/**/<file>.jpg``: classes are the subfolder names in sorted order,
    ``class_to_idx`` maps them to 0, 1, ..., ``samples`` is the sorted list of
    ``(path, class_index)``; files directly under ``root`` are ignored, as ImageFolder does.

    A *flat* folder (no subfolders, the JPEGs directly under ``root``) is accepted too: every
    sample gets target 0, and ``classes == []``, ``class_to_idx == {}``.

    Args:
        root: the folder.
        transform, on_error: as :class:`JpegDataset`.
        extensions: file name endings accepted, compared case-insensitively.

    Raises:
        FileNotFoundError: no file with one of ``extensions`` was found.
    """

    def __init__(self, root, transform=None, on_error: str = "raise", extensions=_DEFAULT_EXTENSIONS, **kwargs):
        self.root = os.fspath(root)
        if isinstance(extensions, str):
            extensions = (extensions,)
        self.extensions = tuple(e.lower() for e in extensions)
        if not os.path.isdir(self.root):
            raise FileNotFoundError(f"root is not a directory: {self.root!r}")
        self.classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        samples = []
        if self.classes:
            for c in self.classes:
                # sorted(os.walk(...)): the order ImageFolder uses
                for dirpath, _, filenames in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                    for name in sorted(filenames):
                        if _has_extension(name, self.extensions):
                            samples.append((os.path.join(dirpath, name), self.class_to_idx[c]))
        else:
            samples = [(os.path.join(self.root, name), 0) for name in sorted(os.listdir(self.root))
                       if _has_extension(name, self.extensions) and os.path.isfile(os.path.join(self.root, name))]
        if not samples:
            raise FileNotFoundError(f"no files ending in {self.extensions} found under {self.root!r}")
        self.samples = samples
        super().__init__([p for p, _ in samples], [t for _, t in samples], transform, on_error, **kwargs)


# --------------------------------------------------------------------------------------
# Collate
# --------------------------------------------------------------------------------------


def _empty(shape, dtype, shared: bool) -> torch.Tensor:
    if not shared:
        return torch.empty(shape, dtype=dtype)
    numel = 1
    for s in shape:
        numel *= s
    itemsize = torch.empty((), dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(numel * itemsize)
    return torch.empty((), dtype=dtype).set_(storage, 0, shape)


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
            got = (f"{tuple(img.shape)} {img.dtype}" if isinstance(img, torch.Tensor) else type(img).__name__)
            raise ValueError(f"collate_uint8: all images must be {shape} {dtype}; sample {i} is {got}")
        images[i].copy_(img)
        targets[i] = int(target)
    return images, targets


class _PooledBatch(NamedTuple):
    """A batch written into a reusable shared-memory buffer; ``slot`` names the buffer
    (-1: a one-off buffer). :class:`DevicePrefetcher` releases the slot once it is done
    with the images."""

    images: torch.Tensor
    targets: torch.Tensor
    slot: int


class PooledCollate:
    """:func:`collate_uint8` into shared-memory buffers that each worker reuses.

    A fresh shared-memory batch is zero-filled by the kernel page by page on first write:
    measured 8.5 ms per 64x3x256x256 batch, 0.13 ms per sample -- about a tenth of a
    worker's time per sample. Each worker keeps ``slots`` buffers and writes a batch into
    one the consumer has released; :class:`DevicePrefetcher` releases a buffer as soon as
    the batch has been copied or converted out of it. If none is free (the consumer still
    holds them, or a loop was broken off with batches in flight) the worker falls back to a
    new buffer, so it never waits. Outside workers it is :func:`collate_uint8`.

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
        self._buffers = {}

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_buffers"] = {}
        return state

    def release(self, slot: int) -> None:
        if slot >= 0:
            self.busy[slot] = 0

    def reset(self) -> None:
        """Mark every buffer free (only while no worker runs)."""
        self.busy.zero_()

    def __call__(self, batch):
        info = get_worker_info()
        if info is None:
            return collate_uint8(batch)
        slot, out = self._acquire(info.id, batch)
        images, targets = collate_uint8(batch, out=out)
        return _PooledBatch(images, targets, slot)

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


# --------------------------------------------------------------------------------------
# Batch transforms
# --------------------------------------------------------------------------------------


def _check_batch(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"expected a tensor [N, 3, H, W], got {type(x).__name__}")
    if x.dim() != 4 or x.shape[1] != 3:
        raise ValueError(f"expected a tensor [N, 3, H, W], got shape {tuple(x.shape)}")


def _yuv_torch(x: torch.Tensor, gain: float | None) -> torch.Tensor:
    """YUV with plain elementwise torch ops (no matmul, so no TF32 on CUDA), float32."""
    x = x.float()
    r, g, b = x[:, 0], x[:, 1], x[:, 2]
    planes = [m0 * r + m1 * g + m2 * b + o for m0, m1, m2, o in _YUV_COEFFS]
    out = torch.stack(planes, 1)
    if gain is not None:
        out = out / 255
    return out


def batch_rgb_to_yuv(x: torch.Tensor, scale: bool = False, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """RGB -> YUV (BT.601 full range, JFIF 1.02 section 7) of a batch, optionally ``/ 255``.

    Args:
        x: ``[N, 3, H, W]`` RGB, uint8 or float, on any device.
        scale: divide by 255 (output in [0, 1] for uint8 input).
        dtype: output dtype (float32, float16 or bfloat16); computed in float32 and cast.

    Returns:
        ``[N, 3, H, W]`` of ``dtype`` on ``x``'s device. On the CPU the Cython kernels of
        :mod:`fastprep.functional` run (OpenMP over ``torch.get_num_threads()`` threads;
        with ``scale`` the coefficients are pre-divided by 255, which agrees with
        ``yuv / 255`` to float32 rounding); elsewhere plain torch ops.
    """
    _check_batch(x)
    if x.device.type == "cpu":
        if x.dtype not in (torch.uint8, torch.float32):
            x = x.float()
        out = F.yuv_scale(x) if scale else F.rgb_to_yuv(x)
    else:
        out = _yuv_torch(x, 255.0 if scale else None)
    return out if dtype == torch.float32 else out.to(dtype)


def _check_dtype(dtype) -> torch.dtype:
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float32, torch.float16 or torch.bfloat16, got {dtype}")
    return dtype


class BatchConvertColor(torch.nn.Module):
    """RGB -> YUV of a batch ``[N, 3, H, W]`` (uint8 or float, any device) to float32.

    Same formula as :class:`fastprep.transforms.ConvertColor`; no scaling, no clamping.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return batch_rgb_to_yuv(x, scale=False)


def _check_num_threads(num_threads):
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                    or num_threads < 1):
        raise ValueError(f"num_threads must be None or a positive int, got {num_threads!r}")
    return num_threads


class BatchScale(torch.nn.Module):
    """``x / 255`` of a batch (any shape, uint8 or float, any device) as float32.

    Args:
        num_threads: threads of the CPU kernel; ``None``: ``torch.get_num_threads()``.
        reuse_buffers: CPU only: recycle up to this many output buffers once no tensor
            refers to them any more (as :class:`BatchYuvScale`). 0 disables.
    """

    def __init__(self, *, num_threads: int | None = None, reuse_buffers: int = 3):
        super().__init__()
        self.num_threads = _check_num_threads(num_threads)
        self._pool = _BufferPool(int(reuse_buffers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x / 255`` as float32, same shape and device."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"expected a tensor, got {type(x).__name__}")
        if x.device.type != "cpu" or x.dtype not in (torch.uint8, torch.float32):
            return x.float() / 255
        x = x.contiguous()
        out = self._pool.get(tuple(x.shape))
        if out.numel():
            # fastprep.functional.scale's kernel (a true division), writing into ``out``
            _color.scale(x.view(-1).numpy(), out.view(-1).numpy(),
                                   self.num_threads or torch.get_num_threads())
        return out

    def extra_repr(self) -> str:
        return f"num_threads={self.num_threads}"


class _BufferPool:
    """Reusable float32 output buffers for the CPU path.

    A fresh 50 MB batch costs more in page faults (the kernel zero-fills every page of a
    new mmap) than the colour conversion itself: measured 0.36 of 0.44 CPU-ms per
    256x256 sample. Buffers are numpy arrays handed out through ``torch.from_numpy``; the
    tensor's storage (shared by all its views) holds the only other reference to the
    array, so a refcount back at the pool's own proves no tensor uses it any more.
    """

    def __init__(self, size: int):
        self.size = size
        self._buffers = []

    def get(self, shape) -> torch.Tensor:
        import sys

        import numpy as np

        for buf in self._buffers:
            # references: the list, ``buf`` and getrefcount's argument; a live tensor adds one
            if buf.shape == shape and sys.getrefcount(buf) <= 3:
                return torch.from_numpy(buf)
        buf = np.empty(shape, dtype=np.float32)
        if self.size:
            if len(self._buffers) >= self.size:
                self._buffers.pop(0)
            self._buffers.append(buf)
        return torch.from_numpy(buf)

    def __getstate__(self):
        return {"size": self.size, "_buffers": []}


class BatchYuvScale(torch.nn.Module):
    """Fused RGB -> YUV -> ``/ 255`` of a batch ``[N, 3, H, W]`` (uint8 or float, any device).

    Args:
        dtype: output dtype: ``torch.float32`` (default), ``torch.float16`` or
            ``torch.bfloat16`` (computed in float32, cast once).
        num_threads: threads of the CPU kernel; ``None``: ``torch.get_num_threads()``.
        reuse_buffers: CPU, float32 only: recycle up to this many output buffers once no
            tensor refers to them any more (safe: a batch the caller still holds, or any
            view of it, is never overwritten), sparing the page faults of a fresh
            allocation per batch. 0 disables.

    Uint8 input gives Y in [0, 1] and U, V in about [0.0002, 0.9998]; a pixel masked to 0
    gives ``(0, 128/255, 128/255)``. On the CPU the Cython kernel runs with the
    coefficients pre-divided by 255 (agrees with ``yuv / 255`` to float32 rounding); on
    other devices plain torch ops.
    """

    def __init__(self, dtype: torch.dtype = torch.float32, *, num_threads: int | None = None,
                 reuse_buffers: int = 3):
        super().__init__()
        self.dtype = _check_dtype(dtype)
        self.num_threads = _check_num_threads(num_threads)
        self._pool = _BufferPool(int(reuse_buffers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, 3, H, W]`` RGB (uint8, or float on the 0-255 scale) -> YUV / 255 in ``dtype``."""
        _check_batch(x)
        if x.device.type != "cpu":
            out = _yuv_torch(x, 255.0)
            return out if self.dtype == torch.float32 else out.to(self.dtype)
        if x.dtype not in (torch.uint8, torch.float32):
            x = x.float()
        x = x.contiguous()
        n, _, h, w = x.shape
        out = self._pool.get((n, 3, h, w)) if self.dtype == torch.float32 else torch.empty((n, 3, h, w))
        if out.numel():
            threads = self.num_threads or torch.get_num_threads()
            # fastprep.functional.yuv_scale's kernel, writing into ``out``; x is checked
            # and contiguous here.
            _color.yuv(x.view(n, 3, h * w).numpy(), out.view(n, 3, h * w).numpy(), 1.0 / 255.0,
                                 threads)
        return out if self.dtype == torch.float32 else out.to(self.dtype)

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, num_threads={self.num_threads}"


# --------------------------------------------------------------------------------------
# Device prefetcher
# --------------------------------------------------------------------------------------


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
    """

    def __init__(self, loader, device, batch_transform=None, non_blocking: bool = True):
        self.loader = loader
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.batch_transform = batch_transform
        self.non_blocking = bool(non_blocking)

    def __len__(self) -> int:
        return len(self.loader)

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


# --------------------------------------------------------------------------------------
# make_loader
# --------------------------------------------------------------------------------------

_warm_lock = threading.Lock()
_warmed = False


def warm_up_kernels() -> None:
    """Compile (or load from Numba's on-disk cache) the mask kernels in this process.

    :func:`make_loader` calls it before any worker starts, so forked workers inherit the
    compiled code and spawned ones find the on-disk cache instead of each compiling.
    The torch RNG state is left untouched.
    """
    global _warmed
    with _warm_lock:
        if _warmed:
            return
        F.apply_random_mask(torch.zeros((3, 8, 8), dtype=torch.uint8), 0.5, seed=0)
        _warmed = True


class _SampleTransform(torch.nn.Module):
    """Decode a random crop, then mask it in uint8 (the default per-sample pipeline)."""

    def __init__(self, crop_size, mask_ratio):
        super().__init__()
        self.crop = DecodeRandomCrop(crop_size, pad_if_needed=True)
        self.mask = None if not mask_ratio else RandomMask(mask_ratio)

    def forward(self, data):
        img = self.crop(data)
        return img if self.mask is None else self.mask(img)


def default_transform(crop_size=256, mask_ratio=0.25) -> torch.nn.Module:
    """The per-sample transform of :func:`make_loader`: ``DecodeRandomCrop(crop_size,
    pad_if_needed=True)`` then ``RandomMask(mask_ratio)`` on uint8 (skipped when
    ``mask_ratio`` is 0 or ``None``)."""
    if mask_ratio is not None and not 0 <= mask_ratio <= 1:
        raise ValueError(f"mask_ratio must be in [0, 1], got {mask_ratio}")
    return _SampleTransform(crop_size, mask_ratio)


def make_loader(source, *, batch_size: int = 64, num_workers: int = 2, crop_size=256, mask_ratio=0.25,
                device=None, dtype: torch.dtype = torch.float32, shuffle: bool = True, drop_last: bool = False,
                generator=None, persistent_workers: bool = False, multiprocessing_context=None,
                pin_memory=None, on_error: str = "raise", transform=None, worker_init_fn=None,
                prefetch_factor=None, extensions=_DEFAULT_EXTENSIONS) -> DevicePrefetcher:
    """The fastprep loader end to end, as a :class:`DevicePrefetcher`.

    dataset -> ``DecodeRandomCrop(crop_size, pad_if_needed=True)`` -> ``RandomMask(mask_ratio)``
    on uint8 (in the workers) -> :func:`collate_uint8` into shared memory -> pinned memory
    (CUDA) -> :class:`DevicePrefetcher` -> :class:`BatchYuvScale` ``(dtype)`` on ``device``.

    Args:
        source: a sequence of JPEG paths (:class:`JpegDataset`, targets 0), a folder path
            (:class:`JpegFolder`), or a ``Dataset`` used as is (its samples must already be
            ``(uint8 [3, H, W] of one size, int target)``; ``crop_size``, ``mask_ratio``,
            ``transform``, ``on_error`` are then ignored).
        batch_size, num_workers, shuffle, drop_last, generator, persistent_workers,
        multiprocessing_context, worker_init_fn, prefetch_factor: passed to ``DataLoader``.
        crop_size: output size (int or ``(h, w)``).
        mask_ratio: mask probability; 0 or ``None`` disables masking.
        device: where batches are delivered; default ``cuda`` if available, else ``cpu``.
        dtype: output dtype of the images (float32, float16, bfloat16).
            On the CPU with workers, the batch conversion runs on one thread (the workers
            already use the cores) and recycles its output buffers (see
            :class:`BatchYuvScale`).
        pin_memory: default ``True`` exactly when ``device`` is CUDA.
        on_error: see :class:`JpegDataset`.
        transform: replaces the default per-sample transform (must output uint8
            ``[3, H, W]`` of one size); ``crop_size`` and ``mask_ratio`` are then ignored.
        extensions: for a folder source.

    Returns:
        A :class:`DevicePrefetcher` yielding ``(images [N, 3, H, W] dtype in [0, 1] (YUV),
        targets int64 [N])`` on ``device``.
    """
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    _check_dtype(dtype)
    if isinstance(source, Dataset):
        dataset = source
    else:
        if transform is None:
            transform = default_transform(crop_size, mask_ratio)
            if transform.mask is not None:
                warm_up_kernels()
        if isinstance(source, (str, os.PathLike)):
            dataset = JpegFolder(source, transform=transform, on_error=on_error, extensions=extensions)
        elif isinstance(source, Sequence):
            dataset = JpegDataset(source, transform=transform, on_error=on_error)
        else:
            raise TypeError(f"source must be a folder path, a sequence of file paths or a Dataset, "
                            f"got {type(source).__name__}")
    if pin_memory is None:
        pin_memory = device.type == "cuda"
    kwargs = {}
    if num_workers > 0:
        kwargs.update(persistent_workers=persistent_workers, multiprocessing_context=multiprocessing_context,
                      worker_init_fn=worker_init_fn)
        if prefetch_factor is not None:
            kwargs["prefetch_factor"] = prefetch_factor
    # Workers reuse their shared-memory batch buffers (the prefetcher below releases them).
    collate = PooledCollate(num_workers, slots=(prefetch_factor or 2) + 2) if num_workers > 0 else collate_uint8
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                        collate_fn=collate, pin_memory=pin_memory, drop_last=drop_last,
                        generator=generator, **kwargs)
    # With workers on the same CPU cores, OpenMP threads in the main process only contend
    # with them (and spin): the CPU path converts serially then.
    threads = 1 if device.type == "cpu" and num_workers > 0 else None
    return DevicePrefetcher(loader, device, batch_transform=BatchYuvScale(dtype, num_threads=threads))


__all__ += ["PooledCollate", "default_transform", "warm_up_kernels"]
