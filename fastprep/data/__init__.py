"""The data path: JPEG datasets, a uint8 collate, a device prefetcher and batch transforms.

The pipeline this module wires (:func:`make_loader`), with either engine::

    threads engine (one process)            | consumer thread
    reader threads: read bytes, plan each   |
      sample (keyed RNG) -> one native      |
      batch decode into a reused buffer ----+-> pinned (CUDA) -> DevicePrefetcher
                                            |     -> BatchConvert on the device
    processes engine (worker processes)     |
    read bytes -> DecodeRandomCrop          |
      -> RandomMask (uint8)                 |
      -> collate_uint8 (shared memory) -----+-> (same)

See ``docs/engine.md`` for the engines, their order (:class:`EpochSampler`) and resuming.

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
  the skips made in workers, with ``fork`` and ``spawn`` alike, without locks. In
  :func:`make_loader`'s loaders a batch carries its skips and they are counted (and
  named in ``dataset.skipped_files``) when it is delivered, on both engines.

Modules: :mod:`~fastprep.data.datasets` (JpegDataset, JpegFolder),
:mod:`~fastprep.data.collate` (collate_uint8, PooledCollate),
:mod:`~fastprep.data.batch` (batch colour transforms over :mod:`fastprep.functional`),
:mod:`~fastprep.data.prefetch` (DevicePrefetcher), :mod:`~fastprep.data.engine`
(ThreadLoader), :mod:`~fastprep.data.order` (EpochSampler, EpochControl),
:mod:`~fastprep.data.shards` (ShardDataset: WebDataset shards written by
``fastprep.pack --format wds``), :mod:`~fastprep.data.tars` (TarDataset: WebDataset tars
written by other tools),
:mod:`~fastprep.data.options` (DecodeOptions, BatchOutput, LoaderOptions),
:mod:`~fastprep.data.loader` (make_loader), :mod:`~fastprep.data.dataloader` (DataLoader, a drop-in
for torch's, over :mod:`~fastprep.data.sources`). Every public name is re-exported here. See ``docs/design.md``.
"""

from .batch import BatchCast, BatchConvert, BatchConvertColor, BatchScale, BatchYuvScale, batch_rgb_to_yuv
from .collate import PooledCollate, collate_uint8
from .._seeding import sample_rng
from .dataloader import DataLoader
from .datasets import JpegDataset, JpegFolder, SkippedFile
from .engine import ThreadLoader
from .loader import IMAGENET_MEAN, IMAGENET_STD, RECIPES, default_transform, make_loader, warm_up_kernels
from .objects import ObjectFolder, ObjectStore
from .options import BatchOutput, DecodeOptions, LoaderOptions, StorageOptions
from .order import EpochSampler
from .prefetch import DevicePrefetcher
from .shards import ShardDataset, is_shard_dir
from .tars import TarDataset, expand_braces, is_tar_source

__all__ = [
    "BatchCast",
    "BatchConvert",
    "BatchConvertColor",
    "BatchOutput",
    "BatchScale",
    "BatchYuvScale",
    "DataLoader",
    "DecodeOptions",
    "DevicePrefetcher",
    "EpochSampler",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "RECIPES",
    "JpegDataset",
    "JpegFolder",
    "LoaderOptions",
    "ObjectFolder",
    "ObjectStore",
    "PooledCollate",
    "ShardDataset",
    "SkippedFile",
    "StorageOptions",
    "TarDataset",
    "ThreadLoader",
    "batch_rgb_to_yuv",
    "collate_uint8",
    "default_transform",
    "expand_braces",
    "is_shard_dir",
    "is_tar_source",
    "make_loader",
    "sample_rng",
    "warm_up_kernels",
]
