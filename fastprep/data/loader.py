"""The fastprep loader end to end: :func:`make_loader`, its default per-sample transform and
kernel warm-up."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

from .. import functional as F
from .._seeding import check_seed
from ..transforms import DecodeRandomResizedCrop, DecodeResizeCenterCrop
from .batch import BatchConvert
from .collate import PooledCollate, collate_uint8
from .datasets import JpegDataset, JpegFolder
from .engine import ThreadLoader, available_cpus, native_pipeline
from .order import EpochControl, EpochSampler
from .prefetch import DevicePrefetcher
from .sample import SampleTransform
from .shards import ShardDataset, is_shard_dir

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "RECIPES", "default_transform", "make_loader", "warm_up_kernels"]

#: torchvision's ImageNet normalisation, on the [0, 1] scale (RGB).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: ``make_loader(recipe=...)``: the per-sample decode transform of each standard recipe
#: (built with the decode options); the loader then outputs RGB normalised with
#: ImageNet's mean and std unless ``color``/``mean``/``std`` say otherwise.
RECIPES = {
    "imagenet-train": lambda options: DecodeRandomResizedCrop(224, flip_p=0.5, **options),
    "imagenet-eval": lambda options: DecodeResizeCenterCrop(256, 224, **options),
}

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


def _decode_options(max_pixels, strict, max_scans) -> dict:
    """Keyword arguments for the decode transform: only those given, so a fastprep.io
    without scan limits keeps working when ``max_scans`` is not used."""
    options = {}
    if max_pixels is not None:
        options["max_pixels"] = max_pixels
    if strict:
        options["strict"] = True
    if max_scans is not None:
        options["max_scans"] = max_scans
    return options


def default_transform(crop_size=256, mask_ratio=0.25, *, max_pixels=None, strict: bool = False,
                      max_scans=None) -> torch.nn.Module:
    """The per-sample transform of :func:`make_loader`: ``DecodeRandomCrop(crop_size,
    pad_if_needed=True)`` then ``RandomMask(mask_ratio)`` on uint8 (skipped when
    ``mask_ratio`` is 0 or ``None``).

    ``max_pixels``, ``strict`` and ``max_scans`` go to the decode (see
    :class:`fastprep.transforms.DecodeRandomCrop`); ``None``/``False`` keep its defaults.
    """
    if mask_ratio is not None and not 0 <= mask_ratio <= 1:
        raise ValueError(f"mask_ratio must be in [0, 1], got {mask_ratio}")
    return SampleTransform(crop_size, mask_ratio, _decode_options(max_pixels, strict, max_scans))


_PRELOAD = "fastprep.data._preload"


def _worker_context(multiprocessing_context, spawn_via_forkserver: bool):
    """The multiprocessing context for the DataLoader workers.

    A spawned worker starts a new interpreter and imports torch, torchvision, fastprep and
    Numba, and loads the mask kernels, before its first sample: seconds per worker, paid
    again by every epoch without persistent workers (``bench/bench_first_batch.py``).
    A forkserver gives the same isolation (workers come from a clean single-threaded
    process that never touched CUDA or the parent's threads) but is started once per
    program; with fastprep preloaded in it, each worker is a fork of a process that has
    already imported everything. So ``"spawn"`` runs on a forkserver preloaded with
    fastprep (unless ``spawn_via_forkserver=False`` or the platform has no forkserver), and
    an explicit ``"forkserver"`` gets the preload too.
    """
    import multiprocessing

    ctx = multiprocessing_context
    if isinstance(ctx, str):
        method = ctx
    elif ctx is None:
        return None
    else:
        method = ctx.get_start_method()
    if method == "spawn" and not spawn_via_forkserver:
        return multiprocessing_context
    if method not in ("spawn", "forkserver") or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing_context
    from multiprocessing import forkserver

    server = forkserver._forkserver
    preload = list(getattr(server, "_preload_modules", []))
    if _PRELOAD not in preload:
        # The list is read when the server starts; a server already running keeps its own.
        server.set_forkserver_preload(preload + [_PRELOAD])
    forkserver.ensure_running()  # start it now: its imports overlap the caller's own setup
    return multiprocessing.get_context("forkserver")


def make_loader(source, *, batch_size: int = 64, num_workers: int | None = None, crop_size=256, mask_ratio=0.25,
                device=None, dtype: torch.dtype = torch.float32, shuffle: bool = True, drop_last: bool = False,
                generator=None, persistent_workers: bool = False, multiprocessing_context=None,
                pin_memory=None, on_error: str = "raise", transform=None, worker_init_fn=None,
                prefetch_factor=None, extensions=None, max_pixels=None, strict: bool = False,
                max_scans=None, jpeg_only: bool = False,
                apply_exif_orientation: bool = False, spawn_via_forkserver: bool = True, recipe=None,
                color=None, mean=None, std=None, channels_last: bool = False, seed=None, sampler=None,
                distributed: bool = False, engine: str | None = None) -> DevicePrefetcher:
    """The fastprep loader end to end, as a :class:`DevicePrefetcher`.

    Per sample: ``DecodeRandomCrop(crop_size, pad_if_needed=True)`` -> ``RandomMask(mask_ratio)``
    on uint8 (or the ``recipe``'s transform); per batch: a uint8 batch -> pinned memory
    (CUDA) -> :class:`DevicePrefetcher` -> :class:`BatchConvert` (colour, ``/ 255``, mean/std,
    ``dtype``) on ``device``. Two engines build the uint8 batches (``docs/engine.md``):

    * ``"threads"``: threads of this process read the files ahead, draw each sample's
      parameters and decode a whole batch in one native call into reused buffers
      (:class:`~fastprep.data.engine.ThreadLoader`); on the CPU that call also does the
      :class:`BatchConvert` step (fused, bit for bit the same). For the pipelines fastprep
      runs natively: the default transform, ``recipe=``, and fastprep decode transforms
      given as ``transform=`` that :func:`~fastprep.data.engine.native_pipeline` accepts.
    * ``"processes"``: a ``DataLoader`` with worker processes, each running the per-sample
      transform, batches collated into shared memory (:class:`PooledCollate`). Runs any
      transform and any ``Dataset``.

    Args:
        source: a sequence of JPEG paths (:class:`JpegDataset`, targets 0), a folder path
            (:class:`JpegFolder`), a shard directory written by ``fastprep.pack --format wds``
            (a folder holding its manifest, or an fsspec URL: :class:`ShardDataset`), or a
            ``Dataset`` used as is (its samples must already be ``(uint8 [3, H, W] of one
            size, int target)``; ``crop_size``, ``mask_ratio``, ``transform``, ``on_error``
            are then ignored; processes engine only).
        engine: ``"threads"``, ``"processes"`` or ``None`` (default): threads when the
            transform has a native pipeline and no process-only option
            (``worker_init_fn``, ``multiprocessing_context``, ``persistent_workers``) is
            given, else processes. ``"threads"`` with a transform it cannot run raises
            ``ValueError``.
        batch_size, shuffle, drop_last: as ``DataLoader``'s.
        num_workers: processes: ``DataLoader`` workers (default 2; 0: in this process).
            Threads: native decode threads (default: the CPUs this process may use,
            ``os.sched_getaffinity``; 0: everything in the consumer's thread at ``next()``).
        persistent_workers, multiprocessing_context, worker_init_fn: passed to
            ``DataLoader`` (``"spawn"``: see ``spawn_via_forkserver``); processes only.
        prefetch_factor: processes: passed to ``DataLoader``. Threads: finished batches
            kept ahead of the consumer (default and minimum 2).
        generator: without ``seed``: where each epoch's seed is drawn from (default:
            torch's default generator, in the thread calling ``iter()``); with ``seed``:
            passed to ``DataLoader`` (its workers' base seeds).
        crop_size: output size (int or ``(h, w)``).
        mask_ratio: mask probability; 0 or ``None`` disables masking.
        device: where batches are delivered; default ``cuda`` if available, else ``cpu``.
        dtype: output dtype of the images (float32, float16, bfloat16).
            On the CPU with workers, the batch conversion runs on one thread (the workers
            already use the cores) and recycles its output buffers (see
            :class:`BatchYuvScale`).
        pin_memory: default ``True`` exactly when ``device`` is CUDA.
        on_error: see :class:`JpegDataset` (the same on both engines).
        transform: replaces the default per-sample transform (must output uint8
            ``[3, H, W]`` of one size); ``crop_size`` and ``mask_ratio`` are then ignored.
        extensions: for a folder source (default: see :class:`JpegFolder`).
        max_pixels: refuse images with more pixels than this, checked from the header
            before decoding (``DecodeError`` naming the file; skipped with
            ``on_error="skip"``); ``None``: fastprep.io's default (2**28); 0: no limit.
        strict: decode with ``strict=True`` (corrupt data libjpeg decodes past raises).
        max_scans: refuse progressive JPEGs with more scans than this (decode bombs);
            ``None``: fastprep.io's default. Passed to the decode only when given.
            ``strict`` and ``max_scans`` configure the default transform: with
            ``transform=``, set them on your decode transform instead (``ValueError``).
        spawn_via_forkserver: run ``multiprocessing_context="spawn"`` workers from a
            forkserver preloaded with fastprep (same isolation from the parent: no
            inherited CUDA state or threads; the server is started once per program), so
            they do not each import torch, torchvision and Numba -- seconds per worker and
            epoch. ``"forkserver"`` gets the preload as well. ``False``: plain spawn.
        jpeg_only, apply_exif_orientation: see :class:`JpegDataset` (non-JPEG files go
            through a counted, warned full-decode fallback unless ``jpeg_only``).
        recipe: ``"imagenet-train"`` (``DecodeRandomResizedCrop(224, flip_p=0.5)``) or
            ``"imagenet-eval"`` (``DecodeResizeCenterCrop(256, 224)``) as the per-sample
            transform (see :data:`RECIPES`), no mask, and by default ``color="rgb"`` with
            ImageNet's ``mean``/``std``. Not with ``transform=``.
        color: ``"yuv"`` (default without a recipe) or ``"rgb"``.
        mean, std: per-channel normalisation on the [0, 1] scale, fused into the batch
            conversion on ``device`` (:class:`BatchConvert`); ``None``: none.
        channels_last: deliver images in ``torch.channels_last`` memory format.
        seed: sample-keyed randomness and order (see :class:`JpegDataset`): sample ``i`` of
            epoch ``e`` gets the same crop and mask whatever the worker count, start
            method, rank or engine, and the epoch's order is a permutation keyed by
            ``(seed, e)``; the two engines then deliver the same batches bit for bit.
            ``None`` (default): each epoch draws a seed at ``iter()`` (see ``generator``);
            the processes engine's samples draw from their worker's torch RNG. Not for a
            ``Dataset`` source (give the dataset its own ``seed``).
        sampler: a sampler of dataset indices; it does the shuffling (``shuffle`` is then
            ignored). Default: an :class:`~fastprep.data.EpochSampler`. An ``EpochSampler``
            given here keeps its rank, world size, ``shuffle`` and ``drop_last`` but takes
            its seed from the loader (``seed``; without it, 0 when ``world_size > 1``, else
            the epoch's drawn seed): one way to run a rank of a job without
            ``torch.distributed``.
        distributed: shard over the initialised ``torch.distributed`` process group: each
            rank takes its slice of the epoch's global order as ``DistributedSampler``
            does (``shuffle``, ``drop_last``; the order's seed: ``seed``, or 0 -- the same
            on every rank, as it must be). Without ``seed``, each rank's samples (or
            workers) still get rank-distinct randomness.

    The loader tracks epochs: each ``iter()`` is the next epoch (0, 1, ...; ``loader.set_epoch(e)``
    to resume at ``e``) and calls ``set_epoch`` on the sampler and the dataset before
    its workers start -- the loop ``for epoch ...: loader.set_epoch(epoch); for batch in
    loader: ...`` does the right thing, and calling ``sampler.set_epoch`` yourself is
    unnecessary (it would be overridden).

    It resumes mid-epoch: ``loader.state_dict()`` (a plain dict) after the last batch
    received, ``loader.load_state_dict(state)`` before the next ``iter()``, and the rest of
    the epoch is what an uninterrupted run would have delivered, bit for bit. With
    ``seed`` also after changing ``num_workers``, ``batch_size``, the world size or the
    engine (the position is a cursor in the global order); without it, in the same
    configuration (see ``docs/engine.md`` for the processes engine's limits).

    The per-sample transform must output uint8 ``[3, H, W]`` images (all of one size): the
    conversion to ``dtype``, colour and normalisation happen once per batch on ``device``.
    A float batch raises ``TypeError`` naming what arrived.

    Returns:
        A :class:`DevicePrefetcher` yielding ``(images [N, 3, H, W] dtype, targets int64 [N])``
        on ``device`` (``loader.loader``: the ``DataLoader`` or ``ThreadLoader``;
        ``loader.engine``: which). By default images are YUV / 255: Y in [0, 1], U and V
        in [0.5/255, 255.5/255]; with ``color="rgb"`` RGB / 255; then ``(x - mean) / std``.
    """
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    seed = check_seed(seed)
    if sampler is not None and distributed:
        raise ValueError("pass either sampler= or distributed=True, not both")
    if recipe is not None:
        color = "rgb" if color is None else color
        if mean is None and std is None:
            mean, std = IMAGENET_MEAN, IMAGENET_STD
    dataset = _dataset(source, recipe, transform, seed, on_error, extensions,
                       _SampleOptions(crop_size, mask_ratio, max_pixels, strict, max_scans, jpeg_only,
                                      apply_exif_orientation))
    process_only = [name for name, given in (("worker_init_fn", worker_init_fn is not None),
                                             ("multiprocessing_context", multiprocessing_context is not None),
                                             ("persistent_workers", bool(persistent_workers))) if given]
    engine, pipeline = _choose_engine(engine, dataset, isinstance(source, Dataset), process_only)
    if num_workers is None:
        num_workers = available_cpus() if engine == "threads" else 2
    if pin_memory is None:
        pin_memory = device.type == "cuda"
    # With workers on the same CPU cores, OpenMP threads in the main process only contend
    # with them (and spin): the CPU path converts serially then.
    threads = 1 if device.type == "cpu" and num_workers > 0 else None
    convert = BatchConvert(color or "yuv", mean, std, dtype, channels_last=channels_last, num_threads=threads,
                           require_uint8=True)
    if sampler is None:
        sampler = _epoch_sampler(dataset, shuffle, drop_last, seed, distributed)
    elif isinstance(sampler, EpochSampler) and sampler.size != len(dataset):
        raise ValueError(f"sampler is an EpochSampler of size {sampler.size}; the dataset has {len(dataset)} samples")
    user_sampler = not isinstance(sampler, EpochSampler)
    sliced = distributed or (not user_sampler and sampler.world_size > 1)
    if engine == "threads":
        # On the CPU the conversion is fused into the batch run (bit for bit BatchConvert's):
        # the native threads write the delivered batch, nothing converts it afterwards.
        fused = convert if device.type == "cpu" else None
        loader = ThreadLoader(dataset, pipeline, sampler, batch_size=batch_size, drop_last=drop_last,
                              num_workers=num_workers, pin_memory=pin_memory, prefetch=prefetch_factor or 2,
                              convert=fused)
        if fused is not None:
            convert = None
        replay = False
    else:
        loader = _data_loader(dataset, sampler, batch_size, drop_last, num_workers, pin_memory, generator,
                              persistent_workers, multiprocessing_context, spawn_via_forkserver,
                              worker_init_fn, prefetch_factor)
        # Samples drawing from worker processes' RNG are reproduced only by re-running them.
        replay = user_sampler or (seed is None and num_workers > 0 and not persistent_workers)
    control = EpochControl(engine, loader, dataset, sampler, seed=seed, generator=generator, distributed=sliced,
                           replay=replay, batch_size=batch_size, num_workers=num_workers)
    return DevicePrefetcher(loader, device, batch_transform=convert, track_epochs=True, epochs=control)


class _SampleOptions(NamedTuple):
    """make_loader's options for the per-sample transform and the dataset."""

    crop_size: object
    mask_ratio: object
    max_pixels: object
    strict: bool
    max_scans: object
    jpeg_only: bool
    apply_exif_orientation: bool


def _dataset(source, recipe, transform, seed, on_error, extensions, options: _SampleOptions):
    """The dataset of ``source`` with the per-sample transform (a ``Dataset`` as is)."""
    if isinstance(source, Dataset):
        if seed is not None:
            raise ValueError("seed= is for a folder or a list of files; give a Dataset source its own seed")
        if recipe is not None:
            raise ValueError("recipe= builds the per-sample transform; a Dataset source brings its own")
        return source
    decode = _decode_options(options.max_pixels, options.strict, options.max_scans)
    if recipe is not None:
        if recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {sorted(RECIPES)}, got {recipe!r}")
        if transform is not None:
            raise ValueError("pass either recipe= or transform=, not both")
        transform = RECIPES[recipe](decode)
    elif transform is None:
        transform = default_transform(options.crop_size, options.mask_ratio, **decode)
        if transform.mask is not None:
            warm_up_kernels()
    elif options.strict or options.max_scans is not None:
        raise ValueError("strict and max_scans configure make_loader's default decode; with transform= "
                         "pass them to your decode transform")
    kwargs = dict(max_pixels=options.max_pixels, jpeg_only=options.jpeg_only,
                  apply_exif_orientation=options.apply_exif_orientation, seed=seed)
    if is_shard_dir(source):
        return ShardDataset(source, transform=transform, on_error=on_error, **kwargs)
    if isinstance(source, (str, os.PathLike)):
        return JpegFolder(source, transform=transform, on_error=on_error, extensions=extensions, **kwargs)
    if isinstance(source, Sequence):
        return JpegDataset(source, transform=transform, on_error=on_error, **kwargs)
    raise TypeError(f"source must be a folder path, a sequence of file paths or a Dataset, "
                    f"got {type(source).__name__}")


_ENGINES = ("threads", "processes")


def _choose_engine(engine, dataset, dataset_source: bool, process_only: list[str]):
    """``(engine, native pipeline or None)``; see make_loader's ``engine``."""
    if engine is not None and engine not in _ENGINES:
        raise ValueError(f"engine must be 'threads', 'processes' or None, got {engine!r}")
    if engine == "processes":
        return engine, None
    if dataset_source:
        # A Dataset runs on processes unless asked otherwise: only a JpegDataset (folder,
        # file list, shards) whose transform has a native pipeline can run on threads.
        native = native_pipeline(dataset.transform) if isinstance(dataset, JpegDataset) else None
        if engine == "threads" and native is None:
            raise ValueError("engine='threads' runs fastprep's decode pipelines on a folder, a list of files or a "
                             "JpegDataset with a fastprep decode transform; this Dataset source needs "
                             "engine='processes'")
        if engine is None:
            return "processes", None
    pipeline = native_pipeline(dataset.transform)
    if engine == "threads":
        if pipeline is None:
            raise ValueError(f"engine='threads' cannot run the transform {dataset.transform!r} (it runs the "
                             "default transform, recipe= and fastprep decode transforms with a native batch "
                             "pipeline); use engine='processes'")
        if process_only:
            raise ValueError(f"{', '.join(process_only)} configure worker processes; use engine='processes'")
        return engine, pipeline
    if pipeline is None or process_only:
        return "processes", None
    return "threads", pipeline


def _epoch_sampler(dataset, shuffle, drop_last, seed, distributed) -> EpochSampler:
    rank, world_size = 0, 1
    if distributed:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("make_loader(distributed=True) needs an initialised process group: call "
                               "torch.distributed.init_process_group() first (torchrun sets up its environment)")
        rank, world_size = dist.get_rank(), dist.get_world_size()
    # The seed here is a placeholder until the first epoch begins (EpochControl sets it).
    return EpochSampler(len(dataset), seed=seed or 0, shuffle=shuffle, rank=rank, world_size=world_size,
                        drop_last=drop_last)


def _data_loader(dataset, sampler, batch_size, drop_last, num_workers, pin_memory, generator, persistent_workers,
                 multiprocessing_context, spawn_via_forkserver, worker_init_fn, prefetch_factor) -> DataLoader:
    """The processes engine's ``DataLoader``."""
    kwargs = {}
    if num_workers > 0:
        kwargs.update(persistent_workers=persistent_workers,
                      multiprocessing_context=_worker_context(multiprocessing_context, spawn_via_forkserver),
                      worker_init_fn=worker_init_fn)
        if prefetch_factor is not None:
            kwargs["prefetch_factor"] = prefetch_factor
    # Workers reuse their shared-memory batch buffers (the prefetcher below releases them).
    collate = PooledCollate(num_workers, slots=(prefetch_factor or 2) + 2) if num_workers > 0 else collate_uint8
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers, collate_fn=collate,
                      pin_memory=pin_memory, drop_last=drop_last, generator=generator, **kwargs)
