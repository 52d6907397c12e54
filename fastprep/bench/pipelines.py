"""The input pipelines the benchmark compares.

Every pipeline turns JPEG files into ``(images float32 [N, 3, S, S] YUV, targets int64
[N])`` on the trainer's device, with the same semantics: a random ``S x S`` crop, a random
mask (probability ``mask_ratio``, dilated with the 4-neighbour cross) whose pixels become 0
in RGB, BT.601 full-range RGB->YUV (JFIF), then ``/ 255``. Y lies in [0, 1]; U and V in
[0.5/255, 255.5/255] (saturated blue gives U = (0.5 * 255 + 128) / 255), see
:func:`yuv_range`.

* ``reference`` -- what a typical training script does today, written here with plain
  PIL/torch/scipy: PIL open -> ``PILToTensor`` -> ``RandomCrop`` -> mask dilated with
  ``scipy.signal.convolve2d`` -> YUV by a 3x3 matmul -> ``/ 255``; ``default_collate``
  ships float32 batches from the workers; ``.to(device)`` in the training loop.
* ``reference-optimized`` -- a careful hand-tuned version: ROI decode of only the crop
  (fastprep's decode op), mask dilated with numpy shifts on uint8, then YUV and scale once
  per batch inside the collate (still in the worker, still float32 across the boundary).
* ``fastprep`` -- :func:`fastprep.data.make_loader` on its default engine, ``threads``: per
  batch one native call in which native threads ROI-decode, mask and (on the CPU) convert
  to YUV / 255 straight into a reused batch buffer; ``--workers`` native threads.
* ``fastprep-processes`` -- the same per-sample work on make_loader's ``processes`` engine:
  DataLoader worker processes, uint8 collate into shared memory,
  :class:`~fastprep.data.DevicePrefetcher`, YUV + scale once per batch.
* ``fastprep-packed`` -- ``fastprep`` on copies of the files made once by
  :func:`fastprep.pack.pack_folder` (cached, see :func:`~fastprep.bench.dataset.packed_copy`):
  same pixels, but restart markers let the ROI decode entropy-decode only the intervals
  the crop needs. The packing is done before timing and is not counted.
* ``fastprep-ycbcr`` -- as ``fastprep`` but the decoder outputs JFIF YCbCr directly
  (``mode="YCbCr"``), skipping the YCbCr->RGB->YCbCr round trip; the mask sets
  (Y, Cb, Cr) = (0, 128, 128), the YCbCr of RGB black, so masking means the same as in
  RGB; the device only divides by 255. The values differ from RGB-decode-then-convert by
  rounding and RGB clamping (mean about 0.2, at most about 20 levels of 255 on a photo),
  which is why this is an opt-in pipeline and not what ``fastprep`` does.

Each pipeline also exposes its :class:`Parts` (read, per-sample transform, collate, H2D,
device batch transform) so ``diagnose`` can cache at each stage and ``--profile`` can label
each one, and a :meth:`Pipeline.check` that tells whether it can use a file (the bench runs
it on every file of a ``--data`` folder and leaves out, and lists, the files that fail).

Adding a pipeline: subclass :class:`Pipeline`, set ``name`` and ``summary``, implement
:meth:`~Pipeline.parts`; override :meth:`~Pipeline.loader_from` when the pipeline builds its
own loader around a dataset (as ``fastprep`` does with :func:`fastprep.data.make_loader`),
:meth:`~Pipeline.prepare_files` when it reads prepared copies of the files (as
``fastprep-packed`` does),
:meth:`~Pipeline.check` and ``check_key`` when it reads files differently, and
:meth:`~Pipeline.unavailable` when it needs optional packages; then
``register_pipeline(MyPipeline())``. ``docs/bench.md`` walks through an example.
"""

from __future__ import annotations

import io as _io
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from .._kernels.coeffs import YUV_COEFFS
from .profiling import Labelled, LabelledCompose

__all__ = ["PIPELINES", "Parts", "Pipeline", "PipelineConfig", "SampleError", "get_pipeline", "label_parts",
           "register_pipeline", "yuv_range"]

# JFIF 1.02 (ITU-T T.871) section 7, BT.601 full range: rows Y, U (Cb), V (Cr), from the one
# source of the coefficients.
YUV_MATRIX = tuple(row[:3] for row in YUV_COEFFS)
YUV_OFFSET = tuple(row[3] for row in YUV_COEFFS)
CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=np.uint8)


def yuv_range(scale: float = 1 / 255) -> tuple[tuple[float, float], ...]:
    """``((lo, hi) for Y, U, V)``: the extremes of :data:`YUV_MATRIX` applied to RGB in
    ``[0, 255]^3`` plus :data:`YUV_OFFSET`, times ``scale``.

    Each output is linear in (R, G, B), so its extremes lie at corners of the cube: the
    minimum takes 255 where a coefficient is negative, the maximum where it is positive.
    Y: [0, 255]; U and V: [0.5, 255.5] (e.g. V of saturated red = 0.5 * 255 + 128).
    """
    out = []
    for row, offset in zip(YUV_MATRIX, YUV_OFFSET):
        lo = offset + 255 * sum(c for c in row if c < 0)
        hi = offset + 255 * sum(c for c in row if c > 0)
        out.append((lo * scale, hi * scale))
    return tuple(out)


@dataclass
class PipelineConfig:
    """What every pipeline needs to build a loader."""

    crop_size: int = 256
    mask_ratio: float = 0.25
    batch_size: int = 64
    num_workers: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    seed: int = 0
    multiprocessing_context: str | None = None
    labelled: bool = False  # wrap every piece in record_function (for --profile)

    @property
    def pin_memory(self) -> bool:
        return self.device.type == "cuda"

    def mp_context(self):
        if self.num_workers == 0 or self.multiprocessing_context is None:
            return None
        return multiprocessing.get_context(self.multiprocessing_context)


@dataclass
class Parts:
    """A pipeline cut at its stages (used by ``diagnose`` and ``--profile``).

    ``read(path)`` gives the raw input (encoded bytes); ``transform(raw)`` the processed
    sample; ``collate(list of (sample, target))`` a host batch; ``to_device(batch)`` the
    batch on the device (``.to()`` only); ``batch_transform(images)`` runs on the device
    (``None`` for none); ``prefetch`` says whether the loop uses DevicePrefetcher.
    """

    read: Callable
    transform: Callable
    collate: Callable
    to_device: Callable
    batch_transform: Callable | None = None
    prefetch: bool = False


# ------------------------------------------------------------------------------------------
# Reference transforms (plain PIL / torch / numpy / scipy, as users write them today)
# ------------------------------------------------------------------------------------------


def read_bytes(path) -> bytes:
    """The whole file (what ``PIL.Image.open(path)`` reads anyway)."""
    with open(path, "rb") as f:
        return f.read()


def read_tensor(path) -> torch.Tensor:
    """The whole file as a uint8 1-D tensor (fastprep's input to decoding transforms)."""
    from fastprep.io import read_file

    return read_file(path)


class PILOpen(torch.nn.Module):
    """Encoded bytes -> RGB ``PIL.Image`` (decodes the whole image)."""

    def forward(self, data):
        from PIL import Image

        with Image.open(_io.BytesIO(data)) as im:
            return im.convert("RGB")


class ScipyRandomMask(torch.nn.Module):
    """RandomMask with ``scipy.signal.convolve2d`` dilation: each pixel is masked with
    probability ``ratio``, the mask is dilated with the cross ``[[0,1,0],[1,1,1],[0,1,0]]``
    (``convolve2d(mask, cross, mode="same") > 0``, zero outside the image), and every channel
    under it becomes 0."""

    def __init__(self, ratio: float = 0.25):
        super().__init__()
        self.ratio = float(ratio)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        from scipy.signal import convolve2d

        mask = (torch.rand(img.shape[-2:]) < self.ratio).numpy()
        dilated = convolve2d(mask, CROSS, mode="same") > 0
        return img.masked_fill(torch.from_numpy(dilated), 0)


class MatmulConvertColor(torch.nn.Module):
    """RGB -> YUV (BT.601 full range) of ``[3, H, W]`` by a 3x3 matmul, float32."""

    matrix: torch.Tensor
    offset: torch.Tensor

    def __init__(self):
        super().__init__()
        self.register_buffer("matrix", torch.tensor(YUV_MATRIX, dtype=torch.float32), persistent=False)
        self.register_buffer("offset", torch.tensor(YUV_OFFSET, dtype=torch.float32), persistent=False)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        c, h, w = img.shape
        yuv = self.matrix @ img.float().reshape(c, h * w)
        return (yuv + self.offset[:, None]).reshape(c, h, w)


class DivideScale(torch.nn.Module):
    """``x / 255`` as float32."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() / 255


class NumpyRandomMask(torch.nn.Module):
    """RandomMask on uint8 with a numpy shift-and-OR dilation (hand-optimised reference)."""

    def __init__(self, ratio: float = 0.25):
        super().__init__()
        self.ratio = float(ratio)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        mask = (torch.rand(img.shape[-2:]) < self.ratio).numpy()
        dil = mask.copy()
        dil[1:] |= mask[:-1]
        dil[:-1] |= mask[1:]
        dil[:, 1:] |= mask[:, :-1]
        dil[:, :-1] |= mask[:, 1:]
        out = img.numpy()  # the freshly decoded crop: safe to modify in place
        out[:, dil] = 0
        return img


class StackYuvScale:
    """Collate uint8 samples, then YUV (3x3 matmul) and ``/ 255`` once per batch."""

    def __init__(self):
        self.matrix = torch.tensor(YUV_MATRIX, dtype=torch.float32) / 255
        self.offset = torch.tensor(YUV_OFFSET, dtype=torch.float32) / 255

    def __call__(self, batch):
        images, targets = default_collate(batch)
        n, c, h, w = images.shape
        x = images.reshape(n, c, h * w).float()
        yuv = torch.matmul(self.matrix, x).add_(self.offset[:, None])
        return yuv.reshape(n, c, h, w), targets


class ToDevice:
    """Move an ``(images, targets)`` batch to ``device`` (non-blocking from pinned memory)."""

    def __init__(self, device):
        self.device = torch.device(device)

    def __call__(self, batch):
        images, targets = batch
        if self.device.type == "cpu":
            return images, targets
        if isinstance(images, list):  # one batch per view
            return [v.to(self.device, non_blocking=True) for v in images], targets.to(self.device, non_blocking=True)
        return images.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True)


# ------------------------------------------------------------------------------------------
# Datasets and loops shared by the pipelines
# ------------------------------------------------------------------------------------------


class SampleError(RuntimeError):
    """A sample failed; the message names the file (and the original error)."""


class SampleDataset(Dataset):
    """``length`` samples cycling over ``items``: ``(transform(read(item)), target)``.

    ``read=None`` means the items are already the raw inputs (cached bytes); ``names``
    (default: the items when they are paths) name them in errors. Any failure raises
    :class:`SampleError` ``"<name>: <error>"``, never an index into the cycled sequence.
    """

    def __init__(self, items: Sequence, targets: Sequence[int], read: Callable | None, transform: Callable,
                 length: int | None = None, names: Sequence[str] | None = None):
        if len(items) != len(targets) or not items:
            raise ValueError(f"need one target per item and at least one item, got {len(items)} items, "
                             f"{len(targets)} targets")
        self.items, self.targets = list(items), [int(t) for t in targets]
        self.read, self.transform = read, transform
        self.length = len(self.items) if length is None else int(length)
        if names is None and read is not None:
            names = [str(item) for item in self.items]
        if names is not None and len(names) != len(self.items):
            raise ValueError(f"need one name per item, got {len(names)} names for {len(self.items)} items")
        self.names = None if names is None else list(names)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        i = index % len(self.items)
        try:
            raw = self.items[i] if self.read is None else self.read(self.items[i])
            return self.transform(raw), self.targets[i]
        except Exception as e:
            name = self.names[i] if self.names is not None else f"cached item {i}"
            raise SampleError(f"{name}: {type(e).__name__}: {e}") from e


class FixedSampleDataset(Dataset):
    """The same processed sample ``length`` times (diagnose rung 3)."""

    def __init__(self, sample: torch.Tensor, target: int, length: int):
        self.sample, self.target, self.length = sample, int(target), int(length)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.sample, self.target


class DeviceLoop:
    """``for images, targets in loader: images.to(device)`` -- the plain training-loop copy,
    with an optional batch transform after it."""

    def __init__(self, loader, to_device: Callable, batch_transform: Callable | None = None):
        self.loader, self.to_device, self.batch_transform = loader, to_device, batch_transform

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            images, targets = self.to_device(batch)
            if self.batch_transform is not None:
                images = self.batch_transform(images)
            yield images, targets


def data_loader(dataset: Dataset, collate: Callable, cfg: PipelineConfig) -> DataLoader:
    """The DataLoader every pipeline uses: shuffled with a seeded generator, full batches."""
    kwargs = {}
    if cfg.num_workers > 0:
        kwargs["multiprocessing_context"] = cfg.mp_context()
    return DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True, num_workers=cfg.num_workers,
                      collate_fn=collate, pin_memory=cfg.pin_memory, drop_last=True,
                      generator=torch.Generator().manual_seed(cfg.seed), **kwargs)


def device_iterable(loader, parts: Parts, cfg: PipelineConfig):
    """Wrap a host loader so it yields device batches as the pipeline does.

    With ``cfg.labelled`` the plain loop replaces DevicePrefetcher so the H2D copy gets its
    own label (the prefetcher's copy happens inside it); on the CPU the two are the same.
    """
    if parts.prefetch and not cfg.labelled:
        from fastprep.data import DevicePrefetcher

        return DevicePrefetcher(loader, cfg.device, batch_transform=parts.batch_transform)
    return DeviceLoop(loader, parts.to_device, parts.batch_transform)


def label_parts(parts: Parts, cfg: PipelineConfig, names: Sequence[str], steps: Sequence[Callable]) -> Parts:
    """Set ``parts.transform`` to ``steps`` applied in order; with ``cfg.labelled`` (for
    ``--profile``) every step and stage runs inside ``record_function`` under ``names``."""
    if cfg.labelled:
        parts.transform = LabelledCompose(steps, names)
        parts.read = Labelled(parts.read, "read_file")
        parts.collate = Labelled(parts.collate, "collate")
        parts.to_device = Labelled(parts.to_device, "h2d_copy")
        if parts.batch_transform is not None:
            parts.batch_transform = Labelled(parts.batch_transform, "batch_transform")
    else:
        parts.transform = _Chain(steps)
    return parts


class _Chain(torch.nn.Module):
    """Plain compose (no labels)."""

    def __init__(self, steps):
        super().__init__()
        self.steps = list(steps)

    def forward(self, x):
        for s in self.steps:
            x = s(x)
        return x


# ------------------------------------------------------------------------------------------
# Pipelines
# ------------------------------------------------------------------------------------------


def check_pil(data: bytes) -> None:
    """Raise unless Pillow decodes the whole of ``data`` to RGB (the reference's reader)."""
    from PIL import Image

    with Image.open(_io.BytesIO(data)) as im:
        im.convert("RGB")


def check_fastprep(data: bytes, mode: str = "RGB") -> None:
    """Raise unless :func:`fastprep.io.decode_jpeg` decodes the whole of ``data`` in ``mode``
    with no libjpeg warning (``strict=True``: corrupt data libjpeg would decode past is an
    error). Thread-safe: no change to the process's warning filters."""
    from fastprep import io as fio

    fio.decode_jpeg(data, mode, strict=True)


class Pipeline:
    """A named way to get device batches from files.

    Subclasses set ``name`` (the ``--pipelines`` key), ``summary`` (one line) and implement
    :meth:`parts`; see the module doc for the optional hooks.
    """

    name = ""
    summary = ""
    #: Pipelines with the same key share one :meth:`check` per file.
    check_key = "fastprep-RGB"
    #: The :func:`fastprep.data.make_loader` engine the row asks for (``None``: not a
    #: make_loader row). A ``"threads"`` row that ran on another engine is marked.
    engine: str | None = None

    def unavailable(self) -> str | None:
        """Why this pipeline cannot run here, or ``None``."""
        return None

    def check(self, data: bytes) -> None:
        """Raise (any exception, with a message a user can act on) when this pipeline cannot
        use a file whose bytes are ``data``. Default: a whole RGB decode by fastprep, so a
        file damaged late in its data is caught even though a crop may not reach it."""
        check_fastprep(data, "RGB")

    #: Whether :meth:`ray_loader` is implemented (``--engine ray``).
    ray_capable = False

    def ray_loader(self, files: Sequence[str], targets: Sequence[int], length: int, cfg: PipelineConfig):
        """As :meth:`loader`, with the per-sample work on Ray Data actors (``--engine ray``;
        ``cfg.num_workers`` actors, at least one). Only where :attr:`ray_capable`."""
        raise NotImplementedError(f"{self.name} has no Ray Data engine")

    def prepare_files(self, files: Sequence[str], *, progress: bool = True) -> list[str]:
        """The files this pipeline reads in place of ``files`` (same order, same targets),
        prepared once before anything is timed. Default: ``files`` themselves."""
        return list(files)

    def parts(self, cfg: PipelineConfig) -> Parts:
        """The pipeline cut at its stages (see :class:`Parts`)."""
        raise NotImplementedError

    def loader_from(self, dataset: Dataset, parts: Parts, cfg: PipelineConfig):
        """Device batches from a dataset of ``(processed sample, target)``: the pipeline's
        own DataLoader, collate and host-to-device stage. ``diagnose`` feeds it cached
        datasets, so every rung runs the loader the pipeline runs."""
        return device_iterable(data_loader(dataset, parts.collate, cfg), parts, cfg)

    def loader(self, files: Sequence[str], targets: Sequence[int], length: int, cfg: PipelineConfig):
        """An iterable of ``length // batch_size`` device batches drawn from ``files``."""
        parts = self.parts(cfg)
        return self.loader_from(SampleDataset(files, targets, parts.read, parts.transform, length), parts, cfg)


class Reference(Pipeline):
    name = "reference"
    summary = "PIL decode + RandomCrop + scipy mask + matmul YUV + /255 per sample, default_collate"
    check_key = "PIL"

    def unavailable(self):
        try:
            import PIL  # noqa: F401
            import scipy.signal  # noqa: F401
            import torchvision  # noqa: F401
        except ImportError as e:
            return f"needs Pillow, scipy and torchvision ({e})"
        return None

    def check(self, data):
        check_pil(data)

    def parts(self, cfg):
        from torchvision import transforms as T

        steps = [PILOpen(), T.PILToTensor(), T.RandomCrop(cfg.crop_size, pad_if_needed=True),
                 ScipyRandomMask(cfg.mask_ratio), MatmulConvertColor(), DivideScale()]
        names = ["PILOpen", "PILToTensor", "RandomCrop", "RandomMask(scipy)", "ConvertColor(matmul)", "Scale"]
        parts = Parts(read_bytes, None, default_collate, ToDevice(cfg.device))
        return label_parts(parts, cfg, names, steps)


class ReferenceOptimized(Pipeline):
    name = "reference-optimized"
    summary = "ROI decode op + numpy mask per sample, YUV+scale per batch in collate (float32 IPC)"

    def parts(self, cfg):
        from fastprep.transforms import DecodeRandomCrop

        steps = [DecodeRandomCrop(cfg.crop_size, pad_if_needed=True), NumpyRandomMask(cfg.mask_ratio)]
        names = ["DecodeRandomCrop", "RandomMask(numpy)"]
        parts = Parts(read_tensor, None, StackYuvScale(), ToDevice(cfg.device))
        return label_parts(parts, cfg, names, steps)


def _fastprep_steps(cfg: PipelineConfig) -> list:
    """make_loader's per-sample steps: DecodeRandomCrop(pad_if_needed) then uint8 RandomMask."""
    from fastprep import data as D
    from fastprep.transforms import DecodeRandomCrop, RandomMask

    steps = [DecodeRandomCrop(cfg.crop_size, pad_if_needed=True)]
    if cfg.mask_ratio:
        steps.append(RandomMask(cfg.mask_ratio))
        D.warm_up_kernels()  # compile (or load) once before workers fork
    return steps


class Fastprep(Pipeline):
    name = "fastprep"
    summary = ("fastprep.data.make_loader, threads engine: one native call per batch (ROI decode + mask + YUV/scale "
               "into a reused buffer), prefetcher")
    #: make_loader's engine for this row (``--workers``: native threads or worker processes)
    engine = "threads"

    def parts(self, cfg):
        from fastprep import data as D

        steps = _fastprep_steps(cfg)
        names = ["DecodeRandomCrop", "RandomMask"][:len(steps)]
        parts = Parts(read_tensor, None, D.collate_uint8, ToDevice(cfg.device), D.BatchYuvScale(), prefetch=True)
        return label_parts(parts, cfg, names, steps)

    def loader_from(self, dataset, parts, cfg):
        if cfg.labelled:  # the plain loop, so the H2D copy and batch transform get labels
            return super().loader_from(dataset, parts, cfg)
        from fastprep import data as D

        # make_loader with a JpegDataset: its engine, prefetcher and batch conversion. The
        # cached datasets of diagnose's ladder are not JPEG datasets: they run on processes.
        engine = self.engine if isinstance(dataset, D.JpegDataset) else "processes"
        return D.make_loader(dataset, batch_size=cfg.batch_size, num_workers=cfg.num_workers, device=cfg.device,
                             shuffle=True, drop_last=True, generator=torch.Generator().manual_seed(cfg.seed),
                             **engine_options(engine, cfg))

    ray_capable = True

    def ray_loader(self, files, targets, length, cfg):
        from fastprep import data as D
        from fastprep.ray import RayLoader

        reps = -(-length // len(files))
        dataset = D.JpegDataset((list(files) * reps)[:length], (list(targets) * reps)[:length])
        return RayLoader(dataset, batch_size=cfg.batch_size, crop_size=cfg.crop_size, mask_ratio=cfg.mask_ratio,
                         seed=cfg.seed, shuffle=True, device=cfg.device, concurrency=max(1, cfg.num_workers),
                         drop_last=True)

    def loader(self, files, targets, length, cfg):
        if cfg.labelled:
            return super().loader(files, targets, length, cfg)
        from fastprep import data as D

        _fastprep_steps(cfg)  # compiles the mask kernels before any worker starts
        tf = D.default_transform(cfg.crop_size, cfg.mask_ratio)  # the same steps, as make_loader runs them
        reps = -(-length // len(files))
        dataset = D.JpegDataset((list(files) * reps)[:length], (list(targets) * reps)[:length], transform=tf)
        return self.loader_from(dataset, None, cfg)


def engine_options(engine: str, cfg: PipelineConfig) -> dict:
    """make_loader's engine arguments for a bench row: the engine, and for worker processes
    the configured start method."""
    if engine == "processes":
        return {"engine": engine, "multiprocessing_context": cfg.mp_context()}
    return {"engine": engine}


class FastprepProcesses(Fastprep):
    name = "fastprep-processes"
    summary = ("fastprep.data.make_loader, processes engine: ROI decode + uint8 mask in DataLoader workers, uint8 "
               "collate, prefetcher, YUV+scale per batch")
    engine = "processes"
    ray_capable = False  # the Ray engine's row is fastprep's


class FastprepYCbCr(Pipeline):
    name = "fastprep-ycbcr"
    summary = "as fastprep, decoding straight to YCbCr (mask fill 0,128,128), device /255 only"
    check_key = "fastprep-YCbCr"

    def check(self, data):
        check_fastprep(data, "YCbCr")

    def parts(self, cfg):
        from fastprep import data as D
        from fastprep.transforms import DecodeRandomCrop

        steps = [DecodeRandomCrop(cfg.crop_size, pad_if_needed=True, mode="YCbCr")]
        names = ["DecodeRandomCrop(YCbCr)"]
        if cfg.mask_ratio:
            from fastprep.transforms import RandomMask

            # masked pixels become (0, 128, 128): the YCbCr of RGB black, as RGB pipelines mask to 0
            steps.append(RandomMask(cfg.mask_ratio, fill=(0, 128, 128)))
            names.append("RandomMask(YCbCr)")
        parts = Parts(read_tensor, None, D.collate_uint8, ToDevice(cfg.device), D.BatchScale(), prefetch=True)
        return label_parts(parts, cfg, names, steps)


class FastprepPacked(Fastprep):
    name = "fastprep-packed"
    summary = ("as fastprep, on copies made by fastprep.pack (restart markers: the ROI decode skips what the crop "
               "misses)")

    def prepare_files(self, files, *, progress=True):
        from .dataset import packed_copy

        return packed_copy(list(files), progress=progress)


#: Every pipeline ``--pipelines`` knows, by name, in the order the report lists them.
PIPELINES: dict[str, Pipeline] = {}


def register_pipeline(pipe: Pipeline, *, replace: bool = False) -> Pipeline:
    """Add ``pipe`` to :data:`PIPELINES` (``replace=True`` to redefine a name); returns it."""
    if not isinstance(pipe, Pipeline):
        raise TypeError(f"pipe must be a Pipeline instance, got {type(pipe).__name__}")
    if not pipe.name or "," in pipe.name:
        raise ValueError(f"a pipeline needs a non-empty name without commas, got {pipe.name!r}")
    if pipe.name in PIPELINES and not replace:
        raise ValueError(f"a pipeline named {pipe.name!r} is already registered; pass replace=True")
    PIPELINES[pipe.name] = pipe
    return pipe


for _pipe in (Reference(), ReferenceOptimized(), Fastprep(), FastprepProcesses(), FastprepPacked(), FastprepYCbCr()):
    register_pipeline(_pipe)
del _pipe


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        raise ValueError(f"unknown pipeline {name!r}; choose from {', '.join(PIPELINES)}") from None
