"""The fastprep loader end to end: :func:`make_loader`, its default per-sample transform and
kernel warm-up."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

from .. import functional as F
from .._seeding import check_seed
from .._threads import usable_cpus
from ..transforms import DecodeRandomResizedCrop, DecodeResizeCenterCrop, OnDecoded, OnPIL
from ..transforms._compile import input_kind, output_dtype
from .batch import BatchCast, BatchConvert
from .collate import PooledCollate
from .datasets import ENCODED_INPUT_HELP, JpegDataset, JpegFolder
from .engine import ThreadLoader
from .objects import ObjectFolder, is_object_url
from .native import MultiViewPipeline, NativePipeline, Unsupported, native_pipeline
from .options import BatchOutput, DecodeOptions, LoaderOptions, split_options
from .order import EpochControl, EpochSampler
from .prefetch import DevicePrefetcher
from .sample import SampleTransform
from .shards import ShardDataset, is_shard_dir
from .tars import TarDataset, is_tar_source

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "RECIPES", "batch_conversion", "dataset_transform", "default_transform",
           "make_loader", "warm_up_kernels"]

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


def default_transform(crop_size=256, mask_ratio=0.25, *, max_pixels=None, strict: bool = False,
                      max_scans=None) -> torch.nn.Module:
    """The per-sample transform of :func:`make_loader`: ``DecodeRandomCrop(crop_size,
    pad_if_needed=True)`` then ``RandomMask(mask_ratio)`` on uint8 (skipped when
    ``mask_ratio`` is 0 or ``None``).

    ``max_pixels``, ``strict`` and ``max_scans`` go to the decode (see
    :class:`DecodeOptions` and :class:`fastprep.transforms.DecodeRandomCrop`).
    """
    if mask_ratio is not None and not 0 <= mask_ratio <= 1:
        raise ValueError(f"mask_ratio must be in [0, 1], got {mask_ratio}")
    decode = DecodeOptions(max_pixels=max_pixels, strict=strict, max_scans=max_scans)
    return SampleTransform(crop_size, mask_ratio, decode.transform_kwargs())


def dataset_transform(transform=None, *, recipe: str | None = None, crop_size=256, mask_ratio=0.25,
                      decode: DecodeOptions | None = None):
    """The per-sample transform :func:`make_loader` gives its dataset (and
    :class:`fastprep.ray.RayLoader` its decode tasks) for these arguments:

    * neither ``transform`` nor ``recipe``: :func:`default_transform` ``(crop_size, mask_ratio)``;
    * ``recipe``: its transform from :data:`RECIPES`;
    * a ``transform`` on decoded images (an unchanged torchvision v2 pipeline, or one starting
      with fastprep's kernel transforms): wrapped in :class:`fastprep.transforms.OnDecoded`,
      which decodes each file with :func:`fastprep.io.decode_jpeg` first;
    * a ``transform`` on PIL images (v1 ops then ``ToTensor``, v2 ops then ``PILToTensor``:
      what ``ImageFolder`` gives): wrapped in :class:`fastprep.transforms.OnPIL`, which opens
      each file as ``Image.open(f).convert("RGB")`` first;
    * any other ``transform`` (on the encoded file: a pipeline starting with a fastprep decode
      transform, a :class:`~fastprep.transforms.MultiView`, your own callable): as it is.

    ``decode`` (:class:`DecodeOptions`) configures the decode built here (the first three
    cases); a transform on the encoded file decodes itself, so it takes ``max_pixels`` only.

    Raises:
        ValueError: an unknown recipe; both ``recipe`` and ``transform``; ``strict`` or
            ``max_scans`` with a transform on the encoded file.
    """
    decode = decode if decode is not None else DecodeOptions()
    transform_kwargs = decode.transform_kwargs()
    if recipe is not None:
        if recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {sorted(RECIPES)}, got {recipe!r}")
        if transform is not None:
            raise ValueError("pass either recipe= or transform=, not both")
        return RECIPES[recipe](transform_kwargs)
    if transform is None:
        return default_transform(crop_size, mask_ratio, **transform_kwargs)
    kind = input_kind(transform)
    if kind == "pil":
        # written for ImageFolder's PIL images: opened as its default loader does
        return OnPIL(transform, **{k: v for k, v in transform_kwargs.items() if k == "max_pixels"})
    if kind == "decoded":
        # a pipeline on decoded images: the loader decodes each file (DecodeOptions apply)
        return OnDecoded(transform, **transform_kwargs)
    if decode.strict or decode.max_scans is not None:
        raise ValueError("strict and max_scans configure the decode make_loader does; a transform on the encoded "
                         "file decodes itself: pass them to your decode transform")
    return transform


_PRELOAD = "fastprep.data._preload"
#: the object-store variables of the environment fastprep's forkserver started with (its
#: workers inherit that environment, not the caller's current one); None: not started here
_SERVER_ENV: dict[str, str] | None = None


def _store_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def _server_sees_store_env() -> bool:
    """Whether workers forked from the forkserver read the object-store settings (endpoint,
    credentials) this process has now: true when the server is not running yet (it starts
    with them) or started here with the same ones."""
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:
        return True
    return _SERVER_ENV is not None and _SERVER_ENV == _store_env()


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
    global _SERVER_ENV
    started = getattr(server, "_forkserver_pid", None) is not None
    forkserver.ensure_running()  # start it now: its imports overlap the caller's own setup
    if not started:
        _SERVER_ENV = _store_env()
    return multiprocessing.get_context("forkserver")


def make_loader(source, *, batch_size: int = 64, num_workers: int | None = None, crop_size=256,
                mask_ratio: float | None = 0.25, device=None, shuffle: bool = True, seed: int | None = None,
                recipe: str | None = None, transform=None, on_error: str = "raise",
                decode: DecodeOptions | None = None, output: BatchOutput | None = None, engine: str | None = None,
                distributed: bool = False, **options: Unpack[LoaderOptions]) -> DevicePrefetcher:
    """The fastprep loader end to end, as a :class:`DevicePrefetcher` (``docs/loader.md``).

    Per sample: ``DecodeRandomCrop(crop_size, pad_if_needed=True)`` -> ``RandomMask(mask_ratio)``
    on uint8, or the ``recipe``'s or your ``transform``; per batch: :class:`BatchConvert`
    (colour, ``/ 255``, mean/std, dtype) on ``device``. Two engines (``docs/engine.md``):
    ``"threads"`` decodes a whole batch in one native call into reused buffers (the default
    transform, ``recipe=`` and fastprep decode transforms); ``"processes"`` is a
    ``DataLoader`` with worker processes and runs any transform and any ``Dataset``.

    Args:
        source: one of (``docs/sources.md``)

            * a folder of images, class folders or flat (:class:`JpegFolder`), or a sequence of
              image paths (:class:`JpegDataset`);
            * a shard directory or URL from ``fastprep.pack --format wds`` (its manifest
              ``fastprep-shards.json``: :class:`ShardDataset`);
            * WebDataset tars written by other tools (:class:`TarDataset`, see
              :func:`is_tar_source`): a folder holding ``.tar`` files and no sub-folders, a
              brace pattern (``"train-{000000..000146}.tar"``), or a list of ``.tar`` paths;
            * an ``s3://`` URL of any of these (a class-folder: :class:`ObjectFolder`), or a
              brace pattern or list of ``s3://`` tar URLs in one bucket;
            * a ``Dataset`` of ``(uint8 [3, H, W], int)`` used as is (processes engine).
        batch_size, shuffle: as ``DataLoader``'s.
        num_workers: processes: ``DataLoader`` workers (default 2); threads: native decode
            threads (default: the CPUs this process may use). 0: all in the consumer's thread.
        crop_size, mask_ratio: the default transform's output size (int or ``(h, w)``) and
            mask probability (0 or ``None``: no mask).
        device: where batches arrive; default ``cuda`` if available, else ``cpu``.
        seed: sample ``i`` of epoch ``e`` gets the same parameters whatever the workers,
            rank or engine, and the epoch's order is keyed by ``(seed, e)``; ``None``: a
            seed drawn per epoch (from ``generator``).
        recipe: ``"imagenet-train"`` or ``"imagenet-eval"`` (:data:`RECIPES`): its decode
            transform, no mask, RGB normalised with ImageNet's mean and std by default.
        transform: your per-sample transform on the encoded file (uint8 1-D tensor; not a
            torchvision transform first, see ``docs/loader.md``) returning uint8 ``[3, H, W]``.
        on_error: ``"raise"`` or ``"skip"`` a bad file (``loader.dataset.skipped_files``).
        decode: :class:`DecodeOptions` (``max_pixels``, ``strict``, ``max_scans``).
        output: :class:`BatchOutput` (``color``, ``mean``, ``std``, ``dtype``, ``channels_last``).
        engine: ``"threads"``, ``"processes"`` or ``None``: threads when the transform has a
            native pipeline and no worker-process option is given.
        distributed: each rank of the initialised ``torch.distributed`` group takes its
            slice of the epoch's global order, as ``DistributedSampler`` does.
        **options: :class:`LoaderOptions`: ``DataLoader`` keywords (``drop_last``,
            ``sampler``, ``generator``, ``pin_memory``, ``prefetch_factor``,
            ``persistent_workers``, ``multiprocessing_context``, ``worker_init_fn``,
            ``spawn_via_forkserver``), the listing (``extensions``, ``jpeg_only``,
            ``apply_exif_orientation``), ``storage`` (:class:`StorageOptions`, ``s3://``
            sources), ``shuffle_block`` (a block shuffle: :class:`EpochSampler`), and the
            fields of ``decode``/``output`` as flat keywords.

    Each ``iter()`` is the next epoch (``set_epoch(e)`` to choose it). ``state_dict()`` /
    ``load_state_dict()`` resume mid-epoch bit for bit; with ``seed`` also after changing
    the workers, the batch size, the world size or the engine.

    Returns:
        A :class:`DevicePrefetcher` yielding ``(images [N, 3, H, W] dtype, targets int64 [N])``
        on ``device``: YUV / 255 (default pipeline, ``Dataset``) or RGB / 255 (``transform=``,
        ``recipe=``) unless ``color=`` says, then ``(x - mean) / std``.
    """
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    seed = check_seed(seed)
    decode, output, rest = split_options(decode, output, options)
    sampler = _given_sampler(rest, distributed)
    dataset = _dataset(source, recipe, transform, seed, on_error, decode, rest,
                       _DefaultTransform(crop_size, mask_ratio))
    engine, pipeline, engine_reason = _choose_engine(engine, dataset, isinstance(source, Dataset),
                                                     _process_only(rest))
    if num_workers is None:
        num_workers = usable_cpus() if engine == "threads" else 2
    pin_memory = rest.get("pin_memory")
    if pin_memory is None:
        pin_memory = device.type == "cuda"
    # With workers on the same CPU cores, kernel threads in the main process only contend
    # with them: the CPU path converts on one thread then.
    threads = 1 if device.type == "cpu" and num_workers > 0 else None
    convert: BatchConvert | BatchCast | None = batch_conversion(getattr(dataset, "transform", None), output,
                                                                recipe=recipe, transform=transform,
                                                                num_threads=threads)
    drop_last = bool(rest.get("drop_last", False))
    if sampler is None:
        sampler = _epoch_sampler(dataset, shuffle, drop_last, seed, distributed, rest.get("shuffle_block", 1))
    elif isinstance(sampler, EpochSampler) and sampler.size != len(dataset):
        raise ValueError(f"sampler is an EpochSampler of size {sampler.size}; the dataset has {len(dataset)} samples")
    user_sampler = not isinstance(sampler, EpochSampler)
    sliced = distributed or (not user_sampler and sampler.world_size > 1)
    loader, convert = _engine_loader(engine, dataset, pipeline, sampler, convert, device, batch_size=batch_size,
                                     drop_last=drop_last, num_workers=num_workers, pin_memory=pin_memory, rest=rest)
    # Samples drawing from worker processes' RNG are reproduced only by re-running them.
    replay = engine != "threads" and (user_sampler or (seed is None and num_workers > 0
                                                       and not rest.get("persistent_workers")))
    control = EpochControl(engine, loader, dataset, sampler, seed=seed, generator=rest.get("generator"),
                           distributed=sliced, replay=replay, batch_size=batch_size, num_workers=num_workers)
    prefetcher = DevicePrefetcher(loader, device, batch_transform=convert, track_epochs=True, epochs=control)
    prefetcher.engine_reason = engine_reason
    return prefetcher


def _engine_loader(engine: str, dataset, pipeline, sampler, convert, device: torch.device, *, batch_size: int,
                   drop_last: bool, num_workers: int, pin_memory: bool, rest: dict):
    """``(loader, conversion)``: the ``engine``'s batch loader, and the conversion left to the
    prefetcher (``None`` where the threads engine fuses all of it into its batch run)."""
    if engine != "threads":
        return _data_loader(dataset, sampler, batch_size, num_workers, pin_memory, rest), convert
    fused = _fused_conversion(convert, device)
    loader = ThreadLoader(dataset, pipeline, sampler, batch_size=batch_size, drop_last=drop_last,
                          num_workers=num_workers, pin_memory=pin_memory,
                          prefetch=rest.get("prefetch_factor") or 2, convert=fused)
    return loader, (None if fused is convert else convert)


def _fused_conversion(convert, device: torch.device):
    """The conversion the threads engine fuses into its batch run. On the CPU, the whole of it
    (bit for bit BatchConvert's): the native threads write the delivered batch and nothing
    converts it afterwards. A pipeline that converts itself writes float32 on any device (the
    cast, if any, happens there)."""
    if device.type == "cpu":
        return convert
    return BatchCast(torch.float32) if isinstance(convert, BatchCast) else None


def batch_conversion(sample_transform, output: BatchOutput | None = None, *, recipe: str | None = None,
                     transform=None, num_threads: int | None = None) -> BatchConvert | BatchCast:
    """What :func:`make_loader` applies to each delivered batch (and
    :class:`fastprep.ray.RayLoader` too): for the samples of ``sample_transform`` (the dataset's
    per-sample transform, :func:`dataset_transform`'s; ``None``: a ``Dataset`` of uint8 images),
    given make_loader's ``output``, ``recipe`` and ``transform`` arguments.

    * Samples the transform converts to float itself (it ends in ``ToDtype(torch.float32,
      scale=True)`` [+ ``Normalize``]): :class:`BatchCast` to ``output.dtype``, nothing converts
      them a second time (``output``'s ``color``, ``mean`` and ``std`` are refused).
    * uint8 samples: :class:`BatchConvert` with what ``output`` leaves unset filled in: YUV for
      the default pipeline (neither ``recipe`` nor ``transform``; a ``Dataset`` source too), RGB
      for ``transform=`` and ``recipe=``; a recipe normalises with ImageNet's mean and std.

    Args:
        num_threads: the CPU conversion's threads (``None``: the kernel's default).

    Raises:
        ValueError: ``color``, ``mean`` or ``std`` given for float samples.
    """
    given = output if output is not None else BatchOutput()
    if sample_transform is not None and output_dtype(sample_transform).is_floating_point:
        given_names = [name for name in ("color", "mean", "std") if getattr(given, name) is not None]
        if given_names:
            raise ValueError(f"your transform converts its images to float itself (ToDtype); {', '.join(given_names)} "
                             "of BatchOutput would convert them again: leave them unset (dtype and channels_last "
                             "still apply), or end the transform in uint8")
        return BatchCast(given.dtype, channels_last=given.channels_last)
    filled = _default_output(recipe, transform, given)
    return BatchConvert(filled.color or "yuv", filled.mean, filled.std, filled.dtype,
                        channels_last=filled.channels_last, num_threads=num_threads, require_uint8=True)


def _default_output(recipe: str | None, transform, output: BatchOutput) -> BatchOutput:
    """What ``output`` leaves unset: YUV for the default pipeline (crop + mask; a ``Dataset``
    source keeps it too), RGB for ``transform=`` and ``recipe=``; a recipe normalises with
    ImageNet's mean and std."""
    color = output.color
    if color is None:
        color = "yuv" if recipe is None and transform is None else "rgb"
    mean, std = output.mean, output.std
    if recipe is not None and mean is None and std is None:
        mean, std = IMAGENET_MEAN, IMAGENET_STD
    return dataclasses.replace(output, color=color, mean=mean, std=std)


def _check_transform_input(transform) -> None:
    """Refuse, before any worker starts, a dataset transform that needs a decoded image (a
    dataset hands its transform the encoded file)."""
    kind = input_kind(transform)
    if kind not in ("decoded", "pil"):
        return
    wrapper = "OnPIL" if kind == "pil" else "OnDecoded"
    raise ValueError(f"{ENCODED_INPUT_HELP}; this dataset's transform {transform!r:.200} needs a decoded image: "
                     f"wrap it as fastprep.transforms.{wrapper}(transform), or pass it to make_loader(transform=...), "
                     "which does that")


def _process_only(rest: dict) -> list[str]:
    """The given options that configure worker processes (the threads engine has none)."""
    given = (("worker_init_fn", rest.get("worker_init_fn") is not None),
             ("multiprocessing_context", rest.get("multiprocessing_context") is not None),
             ("persistent_workers", bool(rest.get("persistent_workers"))))
    return [name for name, is_given in given if is_given]


class _DefaultTransform(NamedTuple):
    """make_loader's parameters of its default per-sample transform."""

    crop_size: object
    mask_ratio: object


def _dataset(source, recipe, transform, seed, on_error, decode: DecodeOptions, rest: dict,
             default: _DefaultTransform):
    """The dataset of ``source`` with the per-sample transform (a ``Dataset`` as is); a
    :class:`JpegDataset`'s skips are counted when the loader delivers their batch."""
    dataset = _new_dataset(source, recipe, transform, seed, on_error, decode, rest, default)
    if isinstance(dataset, JpegDataset):
        dataset.count_skips_at_delivery = True
    return dataset


def _new_dataset(source, recipe, transform, seed, on_error, decode: DecodeOptions, rest: dict,
                 default: _DefaultTransform):
    """:func:`_dataset`'s dataset, as built (or given)."""
    if isinstance(source, Dataset):
        if isinstance(source, JpegDataset) and source.transform is not None:
            _check_transform_input(source.transform)
        if seed is not None:
            raise ValueError("seed= is for a folder or a list of files; give a Dataset source its own seed")
        if recipe is not None:
            raise ValueError("recipe= builds the per-sample transform; a Dataset source brings its own")
        return source
    transform = dataset_transform(transform, recipe=recipe, crop_size=default.crop_size,
                                  mask_ratio=default.mask_ratio, decode=decode)
    if isinstance(transform, SampleTransform) and transform.mask is not None:
        warm_up_kernels()
    kwargs = dict(max_pixels=decode.max_pixels, jpeg_only=rest.get("jpeg_only", False),
                  apply_exif_orientation=rest.get("apply_exif_orientation", False), seed=seed)
    storage = rest.get("storage")
    if is_tar_source(source, storage=storage):
        return TarDataset(source, transform=transform, on_error=on_error, storage=storage, **kwargs)
    if is_object_url(source):
        if is_shard_dir(source, storage=storage):
            return ShardDataset(source, transform=transform, on_error=on_error, storage=storage, **kwargs)
        return ObjectFolder(source, transform=transform, on_error=on_error, extensions=rest.get("extensions"),
                            storage=storage, **kwargs)
    if storage is not None:
        raise ValueError(f"storage= configures s3:// sources; source is {source!r:.200}")
    if is_shard_dir(source):
        return ShardDataset(source, transform=transform, on_error=on_error, **kwargs)
    if isinstance(source, (str, os.PathLike)):
        return JpegFolder(source, transform=transform, on_error=on_error, extensions=rest.get("extensions"),
                          **kwargs)
    if isinstance(source, Sequence):
        return JpegDataset(source, transform=transform, on_error=on_error, **kwargs)
    raise TypeError(f"source must be a folder path, a sequence of file paths or a Dataset, "
                    f"got {type(source).__name__}")


_ENGINES = ("threads", "processes")


class _EngineChoice(NamedTuple):
    """:func:`_choose_engine`'s answer: the engine, the native pipeline (threads), and why
    the threads engine is not used (``None`` when it is)."""

    engine: str
    pipeline: NativePipeline | MultiViewPipeline | None
    reason: str | None


def _native(dataset) -> tuple[NativePipeline | MultiViewPipeline | None, str | None]:
    """The dataset's native pipeline, or ``None`` and why there is none."""
    if not isinstance(dataset, JpegDataset):
        return None, f"a {type(dataset).__name__} source runs its own __getitem__"
    try:
        return native_pipeline(dataset.transform), None
    except Unsupported as e:
        return None, str(e)


def _choose_engine(engine, dataset, dataset_source: bool, process_only: list[str]) -> _EngineChoice:
    """See make_loader's ``engine``."""
    if engine is not None and engine not in _ENGINES:
        raise ValueError(f"engine must be 'threads', 'processes' or None, got {engine!r}")
    if engine == "processes":
        return _EngineChoice(engine, None, "engine='processes' was asked for")
    pipeline, why = _native(dataset)
    if engine == "threads":
        if pipeline is None:
            raise ValueError(f"engine='threads' cannot run this pipeline: {why}; use engine='processes' (it runs any "
                             "transform)")
        if process_only:
            raise ValueError(f"{', '.join(process_only)} configure worker processes; use engine='processes'")
        return _EngineChoice(engine, pipeline, None)
    if dataset_source:  # a Dataset runs on processes unless asked otherwise
        return _EngineChoice("processes", None, "a Dataset source runs on processes unless engine='threads'")
    if pipeline is None:
        return _EngineChoice("processes", None, why)
    if process_only:
        return _EngineChoice("processes", None, f"{', '.join(process_only)} configure worker processes")
    return _EngineChoice("threads", pipeline, None)


def _given_sampler(rest: dict, distributed: bool):
    """``sampler=``, checked against the options that build the sampler themselves."""
    sampler = rest.get("sampler")
    if sampler is not None and distributed:
        raise ValueError("pass either sampler= or distributed=True, not both")
    if sampler is not None and rest.get("shuffle_block", 1) != 1:
        raise ValueError("pass either sampler= or shuffle_block=, not both (EpochSampler takes shuffle_block)")
    return sampler


def _epoch_sampler(dataset, shuffle, drop_last, seed, distributed, shuffle_block: int = 1) -> EpochSampler:
    rank, world_size = 0, 1
    if distributed:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("make_loader(distributed=True) needs an initialised process group: call "
                               "torch.distributed.init_process_group() first (torchrun sets up its environment)")
        rank, world_size = dist.get_rank(), dist.get_world_size()
    # The seed here is a placeholder until the first epoch begins (EpochControl sets it).
    return EpochSampler(len(dataset), seed=seed or 0, shuffle=shuffle, rank=rank, world_size=world_size,
                        drop_last=drop_last, shuffle_block=shuffle_block)


def _data_loader(dataset, sampler, batch_size: int, num_workers: int, pin_memory: bool, rest: dict) -> DataLoader:
    """The processes engine's ``DataLoader``."""
    kwargs: dict[str, Any] = {}
    prefetch_factor = rest.get("prefetch_factor")
    if num_workers > 0:
        context = rest.get("multiprocessing_context")
        via_server = rest.get("spawn_via_forkserver", True)
        if context is None and getattr(dataset, "object_store", None) is not None:
            context = "spawn"  # obstore's runtime threads do not survive fork (a forkserver, below)
            # a forkserver started before the AWS_* variables changed would give its workers the old ones
            via_server = via_server and _server_sees_store_env()
        context = _worker_context(context, via_server)
        kwargs.update(persistent_workers=bool(rest.get("persistent_workers", False)),
                      multiprocessing_context=context, worker_init_fn=rest.get("worker_init_fn"))
        if prefetch_factor is not None:
            kwargs["prefetch_factor"] = prefetch_factor
    # Workers reuse their shared-memory batch buffers (the prefetcher below releases them).
    # Without workers it is collate_uint8, plus the batch's uncounted skips (see JpegDataset.skipped).
    collate = PooledCollate(num_workers, slots=(prefetch_factor or 2) + 2)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers, collate_fn=collate,
                      pin_memory=pin_memory, drop_last=bool(rest.get("drop_last", False)),
                      generator=rest.get("generator"), **kwargs)
