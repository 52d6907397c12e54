"""fastprep's per-sample work on Ray Data (optional: the ``ray`` extra; also importable as
``fastprep.ray``).

The same pipeline as :func:`fastprep.data.make_loader`, with the worker side run by Ray
Data instead of DataLoader workers, on this machine or across a cluster::

    rows (path, label, index) -> Ray tasks (RayLoader) read the bytes and run DecodeBatch:
         decode + per-sample transforms -> NCHW uint8 (float32 for a transform ending in ToDtype)
         (column image; a MultiView of V views: columns image_0 .. image_{V-1})
         (the threads engine's pipelines: one native call per batch, fastprep.data.native)
      -> iter_torch_batches -> fastprep.data.DevicePrefetcher -> make_loader's batch conversion
         on the device: BatchConvert (YUV / 255 for the default pipeline, RGB / 255 for
         transform=) or BatchCast (float samples, cast to dtype); per view for a MultiView

  :func:`read_jpegs` and :class:`DecodeBatch` are the same two steps as building blocks:
  ``read_jpegs(...).map_batches(DecodeBatch, ...)`` (an actor pool) for your own pipelines.

* **Same output.** :class:`DecodeBatch` runs the per-sample transform make_loader's dataset
  would (:func:`fastprep.data.loader.dataset_transform`: the default transform, yours, a
  torchvision v2 pipeline on decoded images wrapped in
  :class:`~fastprep.transforms.OnDecoded`, a :class:`~fastprep.transforms.MultiView`) on each
  file's bytes. With a ``seed`` every sample draws from the generator keyed by ``(seed,
  epoch, index)``, exactly as make_loader's engines do, so the multiset of samples an epoch
  produces is the same bit for bit whichever engine, process or batch made them.
* **Bad files.** ``on_error="raise"`` fails the iteration with Ray's task error carrying
  the :class:`fastprep.io.DecodeError` raised in the task, whose message names the file.
  ``on_error="skip"`` *drops* the sample (Ray batches are of variable size anyway; the
  DataLoader path substitutes another file instead) and :class:`RayLoader` counts it in
  :attr:`RayLoader.skipped`, with the indices in :attr:`RayLoader.skipped_indices`.
* **Faults.** :class:`RayLoader` decodes in Ray Data *tasks*, which Ray Data runs with
  ``max_retries=-1``: a task whose process dies is run again in another; a block's output
  is delivered once. :class:`RayLoader` checks this on every epoch: it raises
  ``RuntimeError`` if any index arrived twice. (Not an actor pool: Ray Data passes its
  actors their constructor arguments through the object store and restarts them, which
  Ray core logs at error level for every actor of every epoch -- ray-project/ray#53727 --
  and each epoch started a fresh pool. The tasks reuse Ray's worker processes, and each
  process builds one :class:`DecodeBatch` per epoch.)

Reading happens in Ray tasks on the nodes where they are scheduled: on a cluster the paths
must be readable there (a shared filesystem); otherwise build the rows yourself (columns
``bytes``, ``label``, ``index``) and apply ``map_batches(DecodeBatch, ...)`` to them.
"""

from __future__ import annotations

import functools
import os
import uuid
import warnings
from collections.abc import Sequence

import numpy as np
import torch

try:
    import ray
    import ray.data
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("fastprep.ray needs Ray Data: install fastprep's ray extra (from the checkout: "
                      "pip install --no-build-isolation -e '.[ray]'), or pip install 'ray[data,train]'") from e

from .. import _checks
from .. import io as fio
from .._seeding import check_seed, sample_key, sample_rng
from ..transforms._compile import output_dtype
from .datasets import JpegDataset, JpegFolder
from .objects import ObjectFolder, ObjectStore, is_object_url, split_url
from .loader import batch_conversion, dataset_transform
from .native import STATUS_ERROR, STATUS_WARNING, MultiViewPipeline, NativePipeline, Unsupported, native_pipeline
from .options import BatchOutput, DecodeOptions
from .prefetch import DevicePrefetcher

__all__ = ["DecodeBatch", "RayLoader", "image_columns", "read_jpegs"]


def _listing(source, extensions):
    """``(paths, labels)`` for a folder (:class:`JpegFolder`'s listing: the same files, in
    the same order, with the same classes) or a sequence of paths."""
    if is_object_url(source):  # the same listing in object storage (files: the objects' URLs)
        objects = ObjectFolder(source, extensions=extensions)
        return list(objects.files), list(objects.targets)
    if isinstance(source, (str, os.PathLike)):
        folder = JpegFolder(source, extensions=extensions)
        return list(folder.files), list(folder.targets)
    if isinstance(source, JpegDataset):
        return list(source.files), list(source.targets)
    if isinstance(source, Sequence):
        ds = JpegDataset(source)  # validates the sequence
        return list(ds.files), list(ds.targets)
    raise TypeError(f"source must be a folder path, a sequence of file paths or a JpegDataset, "
                    f"got {type(source).__name__}")


def _read_bytes(batch: dict) -> dict:
    """Ray task: add a ``bytes`` column with each file's contents (unreadable: empty).
    ``s3://`` URLs are read together, every request of the block in flight at once
    (:class:`~fastprep.data.ObjectStore`, one per bucket and task)."""
    out: list = []
    objects: dict[str, list[tuple[int, str]]] = {}
    for j, path in enumerate(batch["path"]):
        if is_object_url(path):
            bucket, key = split_url(path)
            objects.setdefault(bucket, []).append((j, key))
            out.append(b"")
            continue
        try:
            with open(path, "rb") as f:
                out.append(f.read())
        except OSError:
            out.append(b"")  # decoded (and reported) as a bad file by DecodeBatch
    for bucket, keys in objects.items():
        store = ObjectStore(f"s3://{bucket}/")
        for (j, _), data in zip(keys, store.get_many([(key, None, None) for _, key in keys])):
            if not isinstance(data, BaseException):
                out[j] = bytes(data)
    batch["bytes"] = np.array(out, dtype=object)
    return batch


def read_jpegs(source, *, extensions=None, shuffle_seed=None,
               num_blocks: int | None = None) -> ray.data.Dataset:
    """A ``ray.data.Dataset`` of image files with columns ``bytes``, ``label``, ``index``, ``path``.

    ``index`` is the file's position in the listing (:class:`fastprep.data.JpegFolder` order
    for a folder, the sequence order otherwise) -- the index the DataLoader path gives the
    same file -- and ``label`` its class index (0 for a flat folder or a list of paths).

    Args:
        source: a folder (class subfolders or flat), a sequence of paths or a
            :class:`fastprep.data.JpegDataset`.
        extensions: file name endings listed in a folder; default: :class:`JpegFolder`'s.
        shuffle_seed: if not ``None``, the rows are put in the order of a random
            permutation drawn from a ``torch.Generator`` seeded with it (done on the
            listing, in the driver: no all-to-all shuffle stage, no bytes moved).
        num_blocks: blocks of the listing (default: 8 files per block, at most 1000
            blocks), i.e. the granularity of the read and decode tasks.
    """
    return _rows(source, extensions, shuffle_seed, num_blocks).map_batches(_read_bytes, batch_format="numpy",
                                                                           batch_size=None)


def _rows(source, extensions, shuffle_seed, num_blocks: int | None) -> ray.data.Dataset:
    """:func:`read_jpegs` before the read: columns ``path``, ``label``, ``index``."""
    paths, labels = _listing(source, extensions)
    items = [{"path": p, "label": int(t), "index": i} for i, (p, t) in enumerate(zip(paths, labels))]
    if shuffle_seed is not None:
        gen = torch.Generator().manual_seed(int(shuffle_seed))
        items = [items[i] for i in torch.randperm(len(items), generator=gen).tolist()]
    if num_blocks is None:
        num_blocks = max(1, min(1000, -(-len(items) // 8)))
    return ray.data.from_items(items, override_num_blocks=int(num_blocks))


def image_columns(transform) -> list[str]:
    """The image columns of :class:`DecodeBatch`'s rows for a per-sample ``transform``:
    ``["image"]``, or for a :class:`~fastprep.transforms.MultiView` of ``V`` views
    ``["image_0", ..., "image_{V-1}"]`` (view ``v`` of each sample in ``image_v``)."""
    views = getattr(transform, "view_transforms", None)
    if callable(views):
        return [f"image_{v}" for v in range(len(views()))]
    return ["image"]


def _as_views(sample) -> list:
    """One sample's images as a list (a MultiView's views, or the one image)."""
    return sample if isinstance(sample, list) else [sample]


class DecodeBatch:
    """A ``map_batches`` callable class: decode + per-sample transforms -> one NCHW batch per
    image column.

    Input batch (numpy format): ``bytes`` (object array of encoded files), ``label``,
    ``index`` and optionally ``path`` (for error messages). Output:
    ``{"image": [N, C, H, W], "label": int64 [N], "index": int64 [N]}``, the images uint8, or
    float32 for a transform that converts to float itself (ending in
    ``v2.ToDtype(torch.float32, scale=True)`` [+ ``v2.Normalize``]). A
    :class:`~fastprep.transforms.MultiView` of ``V`` views gives ``V`` image columns
    ``image_0`` ... ``image_{V-1}`` instead of ``image`` (:func:`image_columns`), view ``v`` of
    every sample in ``image_v``.

    Args:
        transform: the per-sample pipeline, as :func:`fastprep.data.make_loader`'s
            ``transform=`` (:func:`fastprep.data.loader.dataset_transform`): a transform of the
            encoded uint8 1-D tensor (a fastprep decode transform first, a MultiView, your own
            callable) returning ``[C, H, W]`` of one size, or an unchanged torchvision v2
            pipeline on decoded images, which runs on each file decoded by
            :func:`fastprep.io.decode_jpeg` (:class:`~fastprep.transforms.OnDecoded`); default
            :func:`fastprep.data.default_transform` ``(crop_size, mask_ratio)``.
        crop_size, mask_ratio: for the default transform.
        seed: ``None``: the process's own torch RNG (the actor's, or the Ray worker's),
            which the constructor seeds from ``os.urandom`` (a fresh process starts torch's
            generator at a fixed seed and Ray does not reseed it, so every process would
            otherwise draw the same windows);
            an int: sample-keyed draws from ``(seed, epoch, index)``, the process RNG is
            left alone.
        epoch: the epoch the keys use.
        on_error: ``"raise"`` or ``"skip"`` (drop the sample).
        num_threads: native threads per batch for the pipelines the threads engine of
            :func:`make_loader` runs (:func:`fastprep.data.native.native_pipeline`: the default
            transform, fastprep decode transforms, the supported v2 recipes, float output and
            MultiViews of them), which run as one native call per batch (same output; the
            header read and the random draws stay per sample). Other transforms run per
            sample.
        jpeg_only, apply_exif_orientation, max_pixels: as :class:`~fastprep.data.JpegDataset`'s:
            which files take the full-decode fallback (non-JPEGs; EXIF-rotated JPEGs when
            asked), or are refused; ``max_pixels`` also limits the decode built for the
            default transform and a v2 pipeline, as make_loader's ``DecodeOptions`` does.
    """

    def __init__(self, transform=None, *, crop_size=256, mask_ratio=0.25, seed=None, epoch: int = 0,
                 on_error: str = "raise", num_threads: int = 1, jpeg_only: bool = False,
                 apply_exif_orientation: bool = False, max_pixels: int | None = None):
        _checks.on_error(on_error)
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"num_threads must be a positive int, got {num_threads!r}")
        self.transform = dataset_transform(transform, crop_size=crop_size, mask_ratio=mask_ratio,
                                           decode=DecodeOptions(max_pixels=max_pixels))
        self.columns = image_columns(self.transform)
        self.num_threads = num_threads
        self._native: NativePipeline | MultiViewPipeline | None
        try:
            self._native = native_pipeline(self.transform)
        except Unsupported:
            self._native = None
        # the routing of JpegDataset: which bytes take the full-decode fallback, and that fallback
        self._routing = JpegDataset([], transform=self.transform, jpeg_only=jpeg_only,
                                    apply_exif_orientation=apply_exif_orientation, max_pixels=max_pixels)
        self.seed = check_seed(seed)
        self.epoch = int(epoch)
        self.on_error = on_error
        if self.seed is None:
            torch.default_generator.manual_seed(int.from_bytes(os.urandom(8), "little"))
        # shapes (one per column) and dtype of an empty output batch (every sample dropped):
        # the native pipeline's, else the last batch's, or the default transform's
        self._dtype = output_dtype(self.transform)
        self._shapes: list[tuple] | None = None
        if transform is None:
            size = (crop_size, crop_size) if isinstance(crop_size, int) else tuple(crop_size)
            self._shapes = [(3, *size)]
        if self._native is not None:
            self._shapes, self._dtype = _native_outputs(self._native)

    @staticmethod
    def _encoded(data: bytes) -> torch.Tensor:
        # bytes -> 1-D uint8 tensor, as fastprep.io.read_file returns (a copy: the transform may
        # keep a reference and Ray's buffer is read-only)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8) if len(data) else torch.empty(0, dtype=torch.uint8)

    def _keyed(self, fn, enc: torch.Tensor, index: int):
        """``fn(enc)`` drawing from the sample's keyed generator (with a seed)."""
        if self.seed is None:
            return fn(enc)
        with sample_rng(self.seed, self.epoch, index):
            return fn(enc)

    def _sample(self, enc: torch.Tensor):
        """One sample as :class:`JpegDataset` makes it: the transform, or the full-decode
        fallback for bytes that need it (counted, warned once per process)."""
        reason = self._routing.fallback_reason(enc)
        if reason is None:
            return self.transform(enc)
        image = self._routing.decode_fallback(enc, reason)
        self._routing.count_fallback("a file of this Ray batch", reason, stacklevel=4)
        return image

    def _stack(self, samples: list) -> list[torch.Tensor] | None:
        """Samples (each an image or a MultiView's list of views) -> one batch per column."""
        if not samples:
            return None
        per_sample = [_as_views(s) for s in samples]
        for views in per_sample:
            if len(views) != len(self.columns):
                raise ValueError(f"the transform gave {len(views)} image(s) for a sample; DecodeBatch's columns are "
                                 f"{self.columns} (several views per sample: fastprep.transforms.MultiView)")
        return [torch.stack([views[c] for views in per_sample]) for c in range(len(self.columns))]

    def _per_sample(self, batch: dict):
        """``(batches, positions kept, {position: error})``, one transform call per sample."""
        samples, kept, failed = [], [], {}
        for k, (data, index) in enumerate(zip(batch["bytes"], batch["index"])):
            try:
                samples.append(self._keyed(self._sample, self._encoded(data), int(index)))
            except (fio.DecodeError, OSError, RuntimeError, ValueError) as e:
                failed[k] = e
                if self.on_error == "raise":
                    break
                continue
            kept.append(k)
        return self._stack(samples), kept, failed

    def _plans(self, batch: dict):
        """The batch's samples read and planned: ``(datas, plans, positions planned, {position:
        error}, {position: sample decoded through the fallback})``. With a seed the plans are
        made by one native call (per sample without one, or for what it leaves to Python)."""
        native = self._native
        assert native is not None  # __call__ takes this path only with a native pipeline
        datas, plans, planned, failed, decoded = [], [], [], {}, {}
        encs = [self._encoded(data) for data in batch["bytes"]]
        indices = [int(index) for index in batch["index"]]
        routes: list = [("python", None)] * len(encs)
        if self.seed is not None:  # keyed: routed, read and drawn in one native call
            routes = native.plan_batch(encs, [sample_key(self.seed, self.epoch, i) for i in indices],
                                       max_pixels=self._routing.max_pixels or 0,
                                       exif=self._routing.apply_exif_orientation)
        for k, (enc, index, (route, value)) in enumerate(zip(encs, indices, routes)):
            try:
                if route == "error":
                    raise fio.DecodeError(value)
                if route == "python":
                    reason = self._routing.fallback_reason(enc)
                    if reason is not None:
                        decoded[k] = self._keyed(self._sample, enc, index)
                        continue
                    key = None if self.seed is None else sample_key(self.seed, self.epoch, index)
                    value = native.plan(enc, key=key)  # keyed draws on a private generator
            except (fio.DecodeError, OSError, RuntimeError, ValueError) as e:
                failed[k] = e
                continue
            plans.append(value)
            datas.append(enc)
            planned.append(k)
        return datas, plans, planned, failed, decoded

    def _batched(self, batch: dict):
        """As :meth:`_per_sample`, with the planned samples decoded by one native run (files
        that need the full-decode fallback are decoded on their own)."""
        native, shapes = self._native, self._shapes
        assert native is not None and shapes is not None  # __call__ takes this path only with a native pipeline
        datas, plans, planned, failed, decoded = self._plans(batch)
        outs = [torch.empty((len(datas), *shape), dtype=self._dtype) for shape in shapes]
        if isinstance(native, MultiViewPipeline):
            statuses = native.run(datas, plans, outs, num_threads=self.num_threads)
        else:
            statuses = native.run(datas, plans, outs[0], num_threads=self.num_threads)
        rows = []
        for j, (status, message) in enumerate(statuses):
            if status == STATUS_ERROR:
                failed[planned[j]] = fio.DecodeError(message)
                continue
            if status == STATUS_WARNING:
                warnings.warn(message, fio.DecodeWarning, stacklevel=2)
            rows.append(j)
        if decoded:  # the batch's order: native rows and fallback samples interleaved
            decoded.update({planned[j]: [out[j] for out in outs] for j in rows})
            kept = sorted(decoded)
            return self._stack([decoded[k] for k in kept]), kept, failed
        if not rows:
            return None, [], failed
        images = outs if len(rows) == len(datas) else [out[rows] for out in outs]
        return images, [planned[j] for j in rows], failed

    def __call__(self, batch: dict) -> dict:
        images, kept, failed = (self._per_sample if self._native is None else self._batched)(batch)
        if failed and self.on_error == "raise":
            k = min(failed)  # the first bad sample of the batch, as one call per sample finds it
            index = int(batch["index"][k])
            paths = batch.get("path")
            name = paths[k] if paths is not None else f"index {index}"
            raise fio.DecodeError(f"cannot decode {name!r} (index {index}): {failed[k]}") from failed[k]
        if images is not None:
            self._shapes, self._dtype = [tuple(x.shape[1:]) for x in images], images[0].dtype
            arrays = [x.numpy() for x in images]
        else:
            shapes = self._shapes or [(3, 1, 1)] * len(self.columns)
            arrays = [torch.empty((0, *shape), dtype=self._dtype).numpy() for shape in shapes]
        labels = [int(batch["label"][k]) for k in kept]
        indices = [int(batch["index"][k]) for k in kept]
        return {**dict(zip(self.columns, arrays)), "label": np.asarray(labels, dtype=np.int64),
                "index": np.asarray(indices, dtype=np.int64)}


def _native_outputs(native) -> tuple[list[tuple], torch.dtype]:
    """The per-column sample shapes and the dtype of a native pipeline's batches."""
    if isinstance(native, MultiViewPipeline):
        shapes = [(c, *size) for c, size in zip(native.channels, native.size)]
    else:
        shapes = [(native.channels, *native.size)]
    return shapes, (torch.float32 if native.float_output else torch.uint8)


#: Per Ray worker process: the DecodeBatch of the last few epochs it decoded for
#: (``key`` -> DecodeBatch), so an epoch's tasks in one process share one.
_DECODERS: dict[str, DecodeBatch] = {}
_DECODERS_KEPT = 4


def _decode_task(batch: dict, *, options: dict, key: str) -> dict:
    """Ray task of :class:`RayLoader`: read the batch's files, then
    ``DecodeBatch(**options)(batch)``, the DecodeBatch built once per worker process and
    epoch (``key``). Unseeded, that is when the process's torch generator is reseeded from
    ``os.urandom``, as an actor's was."""
    decoder = _DECODERS.get(key)
    if decoder is None:
        while len(_DECODERS) >= _DECODERS_KEPT:
            _DECODERS.pop(next(iter(_DECODERS)))
        decoder = _DECODERS[key] = DecodeBatch(**options)
    return decoder(_read_bytes(batch))


class RayLoader:
    """:func:`fastprep.data.make_loader`'s output, with the per-sample work on Ray Data tasks.

    Iterating yields ``(images [N, C, H, W] dtype, targets int64 [N])`` on ``device``: Ray's
    ``iter_torch_batches`` -> :class:`fastprep.data.DevicePrefetcher` -> the batch conversion
    :func:`make_loader` applies by default (:func:`fastprep.data.loader.batch_conversion`):
    YUV / 255 for the default pipeline (crop + mask), RGB / 255 for ``transform=``
    (:class:`fastprep.data.BatchConvert`); a transform that converts to float itself
    (``v2.ToDtype(torch.float32, scale=True)`` [+ ``v2.Normalize``]) is delivered as it is,
    cast to ``dtype`` (:class:`fastprep.data.BatchCast`). With a
    :class:`~fastprep.transforms.MultiView` of ``V`` views it yields ``(views, targets)``,
    ``views`` a list of ``V`` batches (one per view, each converted alike), from the rows'
    ``image_0`` ... ``image_{V-1}`` columns.
    Each ``iter()`` is one epoch: epoch ``e`` (0, 1, ... unless :meth:`set_epoch` says
    otherwise) shuffles with ``(shuffle_seed, e)`` and, with ``seed``, keys the samples' draws
    on ``(seed, e, index)``. Call ``ray.init(...)`` first (any address); otherwise Ray
    starts a local instance on first use.

    Args:
        source: a folder, an ``s3://`` URL of one (a class-folder of images in object
            storage: :class:`fastprep.data.ObjectFolder`'s listing, each decode task's
            objects read with all their requests in flight, credentials and endpoint from
            the AWS variables of the Ray workers' environment), a sequence of paths or a
            :class:`fastprep.data.JpegDataset`.
        batch_size: rows per delivered batch (the last one may be smaller).
        crop_size, mask_ratio, transform: the per-sample pipeline, as make_loader's (see
            :class:`DecodeBatch`): an unchanged torchvision v2 pipeline on decoded images runs on
            each file decoded by :func:`fastprep.io.decode_jpeg`.
        seed: sample-keyed randomness (``None``: each Ray worker process's own RNG, reseeded
            from ``os.urandom`` when it first decodes for an epoch).
        shuffle: shuffle the file order each epoch.
        shuffle_seed: base seed of the shuffle (default: ``seed``, or 0).
        on_error: ``"raise"`` or ``"skip"`` (see the module doc).
        device, dtype: as :func:`make_loader`.
        concurrency: decode tasks run at once; ``None`` (default): as many as the Ray
            cluster has CPUs for (its CPUs divided by ``num_cpus``, at least 1), read when an
            epoch starts, so a 2-CPU laptop gets 2 and a cluster all of its cores.
        num_cpus: CPUs reserved per decode task; for the built-in pipelines also the native
            threads of each batch (its integer part, at least 1).
        map_batch_size: rows per decode task.
        drop_last: drop a last batch smaller than ``batch_size`` (its samples then count
            as neither delivered nor skipped: :attr:`skipped` is only exact without it).
        extensions: for a folder source (default: :class:`JpegFolder`'s listing). Non-JPEG
            files (PNG, ...) go through the same full-decode fallback as
            :class:`~fastprep.data.JpegDataset`, drawing the same parameters
            (:class:`DecodeBatch` takes the dataset's ``jpeg_only``,
            ``apply_exif_orientation`` and ``max_pixels`` too).
    """

    def __init__(self, source, *, batch_size: int = 64, crop_size=256, mask_ratio=0.25, transform=None,
                 seed=None, shuffle: bool = True, shuffle_seed=None, on_error: str = "raise", device=None,
                 dtype: torch.dtype = torch.float32, concurrency: int | None = None, num_cpus: float = 1,
                 map_batch_size: int = 16, drop_last: bool = False, extensions=None):
        _checks.on_error(on_error)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.paths, self.labels = _listing(source, extensions)
        self.batch_size = batch_size
        self.crop_size, self.mask_ratio, self.transform = crop_size, mask_ratio, transform
        # what each decode task's DecodeBatch runs (built there again from the same arguments)
        sample_transform = dataset_transform(transform, crop_size=crop_size, mask_ratio=mask_ratio)
        #: the image columns of the decoded rows (:func:`image_columns`)
        self.columns = image_columns(sample_transform)
        self.seed = check_seed(seed)
        self.shuffle = bool(shuffle)
        self.shuffle_seed = check_seed(shuffle_seed, "shuffle_seed")
        self.on_error = on_error
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype
        if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                        or concurrency < 1):
            raise ValueError(f"concurrency must be a positive int or None (the cluster's CPUs), got {concurrency!r}")
        if not num_cpus > 0:
            raise ValueError(f"num_cpus must be > 0, got {num_cpus!r}")
        self.concurrency = concurrency
        self.num_cpus = num_cpus
        self.map_batch_size = int(map_batch_size)
        self.drop_last = bool(drop_last)
        self.extensions = extensions
        self.epoch = 0
        self.skipped_indices: list[int] = []
        # make_loader's batch conversion (one thread on the CPU)
        self._batch_transform = batch_conversion(sample_transform, BatchOutput(dtype=dtype), transform=transform,
                                                 num_threads=1 if self.device.type == "cpu" else None)

    def __len__(self) -> int:
        """Batches per epoch if no file is skipped."""
        n = len(self.paths)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    @property
    def skipped(self) -> int:
        """Samples dropped by ``on_error="skip"`` in the last complete epoch."""
        return len(self.skipped_indices)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch`` (later ones continue from it)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self.epoch = epoch

    def dataset(self, epoch: int) -> ray.data.Dataset:
        """The decoded ``ray.data.Dataset`` of ``epoch`` (columns :attr:`columns` -- ``image``, or
        ``image_0`` ... for a MultiView --, ``label``, ``index``)."""
        shuffle_seed = None
        if self.shuffle:
            base = self.shuffle_seed if self.shuffle_seed is not None else (self.seed or 0)
            shuffle_seed = sample_key(base, epoch, 2**64 - 1)
        # one block per map batch: enough blocks to keep every decode task busy
        blocks = max(1, min(1000, -(-len(self.paths) // self.map_batch_size)))
        # read_jpegs' rows, the files read by the decode task itself (one task per block)
        rows = _rows(JpegDataset(self.paths, self.labels), None, shuffle_seed, blocks)
        options = dict(transform=self.transform, crop_size=self.crop_size, mask_ratio=self.mask_ratio,
                       seed=self.seed, epoch=epoch, on_error=self.on_error, num_threads=max(1, int(self.num_cpus)))
        # Ray tasks, not an actor pool: Ray Data hands its actors their constructor
        # arguments through the object store and restarts them (max_restarts=-1), which
        # Ray core logs at error level for every actor of every epoch ("has constructor
        # arguments in the object store and max_restarts > 0", ray-project/ray#53727,
        # #57733). Tasks are retried when their process dies, as the actors' batches were.
        return rows.map_batches(
            functools.partial(_decode_task, options=options, key=uuid.uuid4().hex), batch_format="numpy",
            batch_size=self.map_batch_size,
            compute=ray.data.TaskPoolStrategy(size=self.actors()), num_cpus=self.num_cpus)

    def actors(self) -> int:
        """Decode tasks an epoch runs at once (the name is from when they were actors):
        ``concurrency``, or the cluster's CPUs over ``num_cpus`` (Ray is started first if it
        is not running, as Ray Data itself would)."""
        if self.concurrency is not None:
            return self.concurrency
        if not ray.is_initialized():
            ray.init()
        cpus = ray.cluster_resources().get("CPU", 1)
        return max(1, int(cpus // self.num_cpus))

    def _batches(self, ds, epoch):
        seen = torch.zeros(len(self.paths), dtype=torch.int32)
        pin = self.device.type == "cuda"
        for batch in ds.iter_torch_batches(batch_size=self.batch_size, device="cpu", pin_memory=pin,
                                           drop_last=self.drop_last):
            idx = batch["index"]
            seen.index_add_(0, idx, torch.ones_like(idx, dtype=torch.int32))
            images = [batch[name] for name in self.columns]
            yield (images[0] if self.columns == ["image"] else images), batch["label"]
        if int(seen.max()) > 1:
            dup = torch.nonzero(seen > 1).flatten().tolist()
            raise RuntimeError(f"epoch {epoch}: Ray delivered samples more than once: indices {dup[:10]}")
        if not self.drop_last:
            self.skipped_indices = torch.nonzero(seen == 0).flatten().tolist()

    def __iter__(self):
        epoch = self.epoch
        self.epoch = epoch + 1
        ds = self.dataset(epoch)
        yield from DevicePrefetcher(self._batches(ds, epoch), self.device, batch_transform=self._batch_transform)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(files={len(self.paths)}, batch_size={self.batch_size}, "
                f"seed={self.seed}, concurrency={self.concurrency}, on_error={self.on_error!r})")
