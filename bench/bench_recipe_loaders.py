"""Loader throughput of the ImageNet train recipe: torchvision v2 DataLoader vs fastprep's
make_loader vs a DALI CPU pipeline, in one run.

    python bench/bench_recipe_loaders.py [--files 256] [--epochs 3] [--batch-size 64] [--workers 2]
                                         [--size 500x375|4000x3000] [--json FILE] [--no-dali]
                                         [--engines threads,processes] [--folder DIR] [--rss-epochs 5]
                                         [--shards 16MB] [--augment]

The recipe: decode + RandomResizedCrop(224) (scale (0.08, 1), ratio (3/4, 4/3),
antialiased bilinear) + horizontal flip with p = 0.5, batches of ``--batch-size``,
``--workers`` worker processes (DALI: threads), shuffled, consumer doing nothing. Inputs:
``--files`` photo-like JPEGs (``fastprep.bench.synthetic.photo_like``, q90 4:2:0) of
``--size`` written to a temporary folder (beyond ``--distinct`` images the files are byte
copies under other names: same decode work, and 12 MP images are slow to synthesise), or
with ``--folder DIR`` byte copies of the JPEGs in ``DIR`` (real photographs, say).

Output. ``make_loader`` has no uint8 output: with a recipe it always delivers float32 RGB
normalised with ImageNet's mean/std, converted once per batch in the main process
(``BatchConvert``: one pass of ``fastprep.functional.scale_normalize`` into a recycled
buffer, one thread since the workers use the cores). So the main comparison is on that
output, and the torchvision reference does the same work in the same place: its uint8
batches go through ``v2.ToDtype(float32, scale=True)`` + ``v2.Normalize(mean, std)`` in
the main process. The uint8 rows (the recipe alone) are
there for DALI's plain pipeline and are compared with the uint8 torchvision loader.

Pipelines (ratios are to the torchvision row with the same output, same run):

float32 NCHW, normalised:

* ``torchvision v2 DataLoader``: a Dataset over the paths doing
  ``torchvision.io.read_file`` + ``decode_jpeg(mode=RGB)`` + ``v2.RandomResizedCrop(224)``
  + ``v2.RandomHorizontalFlip()`` (what an ImageFolder + v2 script does, with torchvision's
  decoder instead of PIL), ``DataLoader(num_workers, batch_size, shuffle=True)`` with its
  ``default_collate`` (uint8, into shared memory); then the batch ToDtype + Normalize above.
* ``fastprep make_loader, processes engine``: ``make_loader(paths, recipe="imagenet-train",
  device="cpu", engine="processes", ...)``: ``DecodeRandomResizedCrop(224, flip_p=0.5)``
  (ROI decode, DCT scaling where a scale applies: none at 500x375, 1/8 or 2/8 at 12 MP) in
  ``--workers`` worker processes, pooled shared-memory collate, batch conversion to
  normalised float32 in the main process.
* ``fastprep make_loader, threads engine``: the same with ``engine="threads"``: reader
  threads plan each sample, one native call per batch decodes it on ``--workers`` threads
  with the conversion to normalised float32 fused into the write (CPU delivery), into a
  recycled buffer (``docs/engine.md``).
* ``..., packed files``: the same on copies written by ``fastprep.pack.pack_folder``
  (lossless: same pixels, restart markers).
* ``..., packed shards`` (``--shards SIZE``): the packed samples read from WebDataset tar
  shards (``fastprep.pack --format wds``) instead of one file each.

Efficiency (fastprep rows): samples/s divided by what ``--workers`` cores running the
per-sample kernel alone could deliver, ``cores / kernel time``, where the kernel time is
the mean thread-CPU time of ``DecodeRandomResizedCrop(224, flip_p=0.5)`` on one sample (the
same files' bytes in memory, one thread, measured in every round between the epochs, the
median used). 1.0 would be a loader costing nothing beyond the kernel on every core; the
batch conversion, reading, collation, process or thread overheads, and other load on the
machine all lower it.
CPU efficiency (fastprep rows): that kernel time divided by the CPU time the pipeline
spent per sample -- the share of its CPU that was the kernel, which other load on the
machine does not lower (the wall-clock efficiency above needs the cores to itself).

Threads engine overhead (printed under the table): its Python CPU per batch with the GIL
held (``ThreadLoader.cpu_seconds()``: the reader threads' routing and planning, the
builder thread outside the native call; the file reads are reported apart) as a share
of the batch's kernel time (the native batch call alone, one thread, per sample, times
the batch size); the seconds from
``make_loader`` to the first batch (warm imports, median of 3); the process's RSS after
each of ``--rss-epochs`` epochs of one loader.
* ``DALI CPU pipeline, N threads, crop_mirror_normalize``: ``fn.readers.file`` +
  ``fn.decoders.image_random_crop(device="cpu")`` + ``fn.resize(size=(224, 224))``
  (DALI's defaults: linear, ``antialias=True``) + ``fn.crop_mirror_normalize(mirror=
  fn.random.coin_flip(), dtype=FLOAT, output_layout="CHW")`` (normalise and flip fused),
  ``batch_size``, ``num_threads=--workers``, ``device_id=None`` (CPU only).

With ``--augment``, the TrivialAugment recipe (``fastprep.bench.recipes.AUGMENT_RECIPES
["trivialaugment"]``: RandomResizedCrop(224), flip, TrivialAugmentWide (bilinear), ToDtype,
Normalize, RandomErasing(0.25)), compared with each other and with the plain recipe:

* ``torchvision v2 DataLoader, TrivialAugment recipe``: per sample ``decode_jpeg`` then the
  v2 pipeline, float32 ``default_collate``.
* ``fastprep make_loader(transform=<TrivialAugment recipe>), threads engine``: the same
  pipeline object, compiled by the threads engine into native steps (torchvision's bits,
  ``docs/augment.md``); its rate is also given against ``fastprep make_loader, threads
  engine`` (the plain recipe) in the same run.

uint8:

* ``torchvision v2 DataLoader, uint8``: the torchvision loader without the batch
  conversion (uint8 NCHW).
* ``DALI CPU pipeline, N threads``: the DALI graph above with ``fn.flip(horizontal=
  fn.random.coin_flip())`` instead of ``crop_mirror_normalize``: uint8 **HWC** batches
  (``[N, 224, 224, 3]``, DALI's layout; not transposed to NCHW).

DALI and the threads engine run in this process (their threads), the DataLoaders in worker
processes, all
non-persistent (a DataLoader forks its workers each epoch, as ``DataLoader`` and
``make_loader`` do by default; the DALI pipeline is built once, before the timing). DALI is
exposed as an iterator over ``share_outputs()`` batches (tensors by DLPack, or copied with
the legacy executor, as DALI's PyTorch iterator does) that keeps DALI's prefetch queue full
(depth 2, DALI's default) but schedules no run past the epoch's last batch: DALI's own
``DALIGenericIterator`` schedules a run after every batch, the last one included, so the
next epoch's first batches would be decoded during the other pipelines' epochs and their
CPU time charged to those (DALI 2.4, 128 files in batches of 64: the whole next epoch is
decoded in the gap, 0.22 CPU-s, and then "takes" 1 ms). DALI's reader pads a last partial
batch (``pad_last_batch=True``); only the epoch's samples are counted and yielded.

Epochs of the pipelines are interleaved (round ``r`` starts at pipeline ``r mod P``);
round 0 is a warm-up, reported separately; the table gives medians over the ``--epochs``
rounds after it. Per epoch: samples/s (wall, from ``iter()`` to the last batch), the
seconds to the first batch (a DataLoader forks its workers in it; with a few batches per
epoch that start is a large share of the epoch: raise ``--files`` for steadier rates), and
CPU time per sample: DataLoader workers from ``RUSAGE_CHILDREN`` (read after the epoch's
workers are joined) plus the main process from ``RUSAGE_SELF``; DALI all in-process
(``RUSAGE_SELF``). After each epoch the script sleeps ``--settle`` seconds, not timed, whose
CPU time is added to that epoch, so work trailing an epoch (none is expected) is charged to
it and not to the next pipeline.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision
from torch.utils.data import DataLoader, Dataset
from torchvision.io import ImageReadMode, decode_jpeg, read_file
from torchvision.transforms import v2

# bench_loader (next to this file) has the epoch timer; importing it also makes fastprep
# importable from a source checkout.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_loader import _cpu_seconds, _epoch  # noqa: E402

import fastprep  # noqa: E402
from fastprep._platform import describe  # noqa: E402
from fastprep.bench.synthetic import encode_jpeg, photo_like  # noqa: E402
from fastprep.data import IMAGENET_MEAN, IMAGENET_STD, make_loader  # noqa: E402
from fastprep.data.engine import available_cpus  # noqa: E402
from fastprep.transforms import DecodeRandomResizedCrop  # noqa: E402
from fastprep.pack import pack_folder, pack_shards  # noqa: E402

CROP = 224
FLOAT_OUT = "float32 NCHW, normalised"
UINT8_OUT = "uint8"
TV_FLOAT = "torchvision v2 DataLoader"
TV_UINT8 = "torchvision v2 DataLoader, uint8"
AUG_OUT = "float32 NCHW, normalised, augmented"
TV_AUG = "torchvision v2 DataLoader, TrivialAugment recipe"
FP_AUG = "fastprep make_loader(transform=<TrivialAugment recipe>), threads engine"


def fastprep_row(engine: str) -> str:
    """The name of make_loader's plain-recipe row on ``engine`` (the packed rows add to it)."""
    return f"fastprep make_loader, {engine} engine"


FP_PLAIN = fastprep_row("threads")


def copy_files(folder, count, source):
    """``count`` JPEGs in ``folder``: byte copies of the ``*.jpg``/``*.jpeg`` files of
    ``source`` (sorted), file ``i`` a copy of source file ``i % len``."""
    names = sorted(f for f in os.listdir(source) if f.lower().endswith((".jpg", ".jpeg")))
    if not names:
        raise SystemExit(f"--folder {source!r} has no .jpg/.jpeg files")
    blobs = []
    for name in names[:count]:
        with open(os.path.join(source, name), "rb") as f:
            blobs.append(f.read())
    return _write_cycled(folder, count, blobs), len(blobs)


def make_files(folder, count, width, height, distinct):
    """``count`` JPEGs in ``folder``; file ``i`` holds photo-like image ``i % distinct``."""
    blobs = [encode_jpeg(photo_like(height, width, seed=i), quality=90, subsampling="4:2:0")
             for i in range(min(distinct, count))]
    return _write_cycled(folder, count, blobs)


def _write_cycled(folder, count, blobs):
    """Write ``count`` files ``00000.jpg``... in ``folder``, file ``i`` holding ``blobs[i % len]``."""
    paths = []
    for i in range(count):
        path = os.path.join(folder, f"{i:05d}.jpg")
        with open(path, "wb") as f:
            f.write(blobs[i % len(blobs)])
        paths.append(path)
    return paths


class TorchvisionRecipe(Dataset):
    """Per sample: read the file, ``torchvision.io.decode_jpeg`` (RGB), v2
    ``RandomResizedCrop(224)`` + ``RandomHorizontalFlip()``; ``(uint8 [3, 224, 224], 0)``."""

    def __init__(self, paths):
        self.paths = list(paths)
        self.transform = v2.Compose([v2.RandomResizedCrop(CROP), v2.RandomHorizontalFlip()])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        img = decode_jpeg(read_file(self.paths[i]), mode=ImageReadMode.RGB)
        return self.transform(img), 0


class TorchvisionAugmented(Dataset):
    """Per sample: read the file, ``torchvision.io.decode_jpeg`` (RGB), then the v2 pipeline
    ``recipe`` (which ends in ToDtype + Normalize); ``(float32 [3, 224, 224], 0)``."""

    def __init__(self, paths, recipe):
        self.paths, self.recipe = list(paths), recipe

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.recipe(decode_jpeg(read_file(self.paths[i]), mode=ImageReadMode.RGB)), 0


class BatchTransformed:
    """A loader whose image batches go through ``transform`` in the consumer's process."""

    def __init__(self, loader, transform):
        self.loader, self.transform = loader, transform

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for images, targets in self.loader:
            yield self.transform(images), targets


class DaliEpochs:
    """A built DALI pipeline as an iterable of ``(images, labels)`` epochs of ``samples``.

    Keeps ``prefetch_queue_depth`` runs in flight, as DALI's PyTorch iterator does, but
    schedules none past the epoch's last batch (see the module docstring). The pipeline's
    first ``schedule_run()`` fills the whole prefetch queue, later ones schedule one run
    each; build it with a depth of at most the epoch's batch count. Outputs are torch
    tensors: by DLPack with the dynamic executor, else copied out of DALI's buffers.
    """

    def __init__(self, pipe, samples, batch_size):
        self.pipe, self.samples, self.batch_size = pipe, samples, batch_size
        depth = pipe.prefetch_queue_depth
        depth = depth if isinstance(depth, int) else max(depth.values())
        self.depth = depth if pipe.exec_pipelined else 1  # runs the first schedule_run() starts
        if self.depth > len(self):
            raise ValueError(f"prefetch depth {self.depth} exceeds the {len(self)} batches of an epoch")
        self.copy = not getattr(pipe, "exec_dynamic", False)
        self._primed = False

    def __len__(self):
        return math.ceil(self.samples / self.batch_size)

    def _tensor(self, out):
        t = out.as_tensor()
        return torch.from_numpy(np.array(t)) if self.copy else torch.from_dlpack(t)

    def __iter__(self):
        batches = len(self)
        if not self._primed:
            self.pipe.schedule_run()  # fills the queue: self.depth runs
            self._primed, scheduled = True, self.depth
        else:
            for _ in range(self.depth):
                self.pipe.schedule_run()
            scheduled = self.depth
        for k in range(batches):
            images, labels = self.pipe.share_outputs()
            images, labels = self._tensor(images), self._tensor(labels)
            self.pipe.release_outputs()
            if scheduled < batches:
                self.pipe.schedule_run()
                scheduled += 1
            keep = min(self.batch_size, self.samples - k * self.batch_size)
            yield images[:keep], labels[:keep].view(-1)


def dali_loader(paths, batch_size, threads, normalize, seed=0):
    """The DALI CPU recipe over ``paths`` as a :class:`DaliEpochs`."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def
    def graph():
        jpegs, labels = fn.readers.file(files=list(paths), labels=[0] * len(paths), random_shuffle=True,
                                        pad_last_batch=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, size=(CROP, CROP))  # defaults: linear, antialias=True
        flip = fn.random.coin_flip()
        if normalize:
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", mirror=flip,
                                              mean=[255 * m for m in IMAGENET_MEAN],
                                              std=[255 * s for s in IMAGENET_STD])
        else:
            images = fn.flip(images, horizontal=flip)
        return images, labels

    depth = min(2, math.ceil(len(paths) / batch_size))  # DALI's default 2, at most an epoch's batches
    pipe = graph(batch_size=batch_size, num_threads=threads, device_id=None, seed=seed, prefetch_queue_depth=depth)
    pipe.build()
    return DaliEpochs(pipe, len(paths), batch_size)


def dali_status():
    """(nvidia.dali version or None, a line saying whether DALI rows run or why not)."""
    try:
        import nvidia.dali as dali
        from nvidia.dali import fn, pipeline_def, types  # noqa: F401
    except Exception as e:  # not installed, or its import fails
        return None, f"DALI rows skipped: nvidia.dali does not import ({type(e).__name__}: {e})"
    return dali.__version__, f"DALI {dali.__version__}: CPU-only pipelines (device_id=None)"


def versions(dali_version):
    out = {"python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__,
           "numpy": np.__version__, "fastprep": getattr(fastprep, "__version__", "?")}
    try:
        import numba
        out["numba"] = numba.__version__
    except ImportError:
        pass
    if dali_version:
        out["nvidia-dali"] = dali_version
    return out


class _Observed:
    """Iterate ``inner``, recording in ``rec`` the seconds from the start of the iteration to
    the first batch and that batch's image shape and dtype."""

    def __init__(self, inner, rec):
        self.inner, self.rec = inner, rec

    def __iter__(self):
        t0 = time.perf_counter()
        for k, (images, targets) in enumerate(self.inner):
            if k == 0:
                self.rec.update(first_batch_s=time.perf_counter() - t0, shape=list(images.shape),
                                dtype=str(images.dtype).replace("torch.", ""))
            yield images, targets


ENGINE_NOTES = {
    "processes": ("recipe's batch conversion in the main process", "dataloader"),
    "threads": ("one native call per batch on --workers threads, conversion fused into it", "in-process"),
}


def fastprep_rows(args, files, packed, shards=None):
    """The make_loader rows: {name: (loader, output, note, kind, kernel: "orig" | "packed")}."""
    rows = {}
    for engine in args.engines:
        fp = dict(recipe="imagenet-train", device="cpu", batch_size=args.batch_size, num_workers=args.workers,
                  shuffle=True, engine=engine)
        note, kind = ENGINE_NOTES[engine]
        rows[fastprep_row(engine)] = (make_loader(files, **fp), FLOAT_OUT, note, kind, "orig")
        rows[f"{fastprep_row(engine)}, packed files"] = (
            make_loader(packed, **fp), FLOAT_OUT, "same, on pack_folder copies", kind, "packed")
        if shards is not None:
            rows[f"{fastprep_row(engine)}, packed shards"] = (
                make_loader(shards, **fp), FLOAT_OUT, "same packed samples, read from WebDataset shards", kind,
                "packed")
    return rows


def kernel_ms(datas):
    """Mean thread-CPU ms of the recipe's per-sample transform over ``datas`` (one thread)."""
    transform = DecodeRandomResizedCrop(CROP, flip_p=0.5)
    torch.manual_seed(0)
    t0 = time.thread_time()
    for data in datas:
        transform(data)
    return (time.thread_time() - t0) / len(datas) * 1e3


def engine_cpu(loader):
    """The threads engine's :meth:`~fastprep.data.engine.ThreadLoader.cpu_seconds` behind a
    make_loader result, or ``None`` for other loaders."""
    inner = getattr(loader, "loader", None)
    return inner.cpu_seconds() if hasattr(inner, "cpu_seconds") else None


def engine_python(epochs, kernel_ms):
    """Medians over ``epochs`` of the threads engine's Python CPU per batch (GIL held: the
    readers' routing and planning, the builder outside the native call; the file reads,
    mostly outside the GIL, apart) and its share of the batch's kernel time (batch samples
    x the per-sample kernel)."""
    def per_batch(e, keys):
        c = e["engine_cpu"]
        return sum(c[k] for k in keys) / max(1, c["batches"]) * 1e3

    def share(e):
        c = e["engine_cpu"]
        kernel_batch_ms = c["samples"] / max(1, c["batches"]) * kernel_ms
        return per_batch(e, ("plan", "build_python")) / kernel_batch_ms

    return {"python_ms_per_batch": statistics.median(per_batch(e, ("plan", "build_python")) for e in epochs),
            "plan_ms_per_batch": statistics.median(per_batch(e, ("plan",)) for e in epochs),
            "read_ms_per_batch": statistics.median(per_batch(e, ("read",)) for e in epochs),
            "build_python_ms_per_batch": statistics.median(per_batch(e, ("build_python",)) for e in epochs),
            "share_of_kernel": statistics.median(share(e) for e in epochs)}


def _rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def engine_overhead(args, files):
    """Threads engine: seconds from ``make_loader`` to the first batch (warm imports; median
    of 3), and the process's RSS after each of ``--rss-epochs`` epochs of one loader."""
    fp = dict(recipe="imagenet-train", device="cpu", batch_size=args.batch_size, num_workers=args.workers,
              shuffle=True, engine="threads")
    firsts = []
    for _ in range(3):
        t0 = time.perf_counter()
        loader = make_loader(files, **fp)
        it = iter(loader)
        next(it)
        firsts.append(time.perf_counter() - t0)
        del it, loader
    rss = []
    if args.rss_epochs:
        loader = make_loader(files, **fp)
        for _ in range(args.rss_epochs):
            for _batch in loader:
                pass
            rss.append(_rss_mib())
        del loader
    return {"first_batch_after_make_loader_s": statistics.median(firsts), "first_batch_runs_s": firsts,
            "rss_mib_after_each_epoch": rss}


def inputs_text(args):
    if args.folder:
        return f"copies of the JPEGs in {args.folder}"
    w, h = args.size
    return f"photo-like {w}x{h} q90 4:2:0"


def batch_op_ms(datas):
    """Mean thread-CPU ms per sample of the threads engine's native batch call alone
    (``NativePipeline.run``, one thread, float32 normalised out as make_loader's CPU
    delivery) on ``datas``, planned beforehand."""
    from fastprep.data.native import NativePipeline

    pipe = NativePipeline.from_transform(DecodeRandomResizedCrop(CROP, flip_p=0.5))
    plans = [pipe.plan(d, key=i) for i, d in enumerate(datas)]
    out = torch.empty((len(datas), 3, CROP, CROP), dtype=torch.float32)
    t0 = time.thread_time()
    pipe.run(datas, plans, out, num_threads=1, color="rgb", mean=IMAGENET_MEAN, std=IMAGENET_STD)
    return (time.thread_time() - t0) / len(datas) * 1e3


def build_pipelines(args, files, packed, dali_version, shards=None):
    """{name: (iterable, output kind, what it outputs, "dataloader" | "in-process", kernel or None)}."""
    W, B = args.workers, args.batch_size
    common = dict(batch_size=B, num_workers=W, shuffle=True)
    normalize = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    p = {
        TV_FLOAT: (BatchTransformed(DataLoader(TorchvisionRecipe(files), **common), normalize), FLOAT_OUT,
                   "uint8 default_collate, then batch ToDtype+Normalize in the main process", "dataloader", None),
        **fastprep_rows(args, files, packed, shards),
    }
    dali_float = dali_uint8 = None
    if dali_version and not args.no_dali:
        try:
            dali_float = dali_loader(files, B, W, normalize=True)
            dali_uint8 = dali_loader(files, B, W, normalize=False)
        except Exception as e:  # imports, but a CPU-only pipeline does not build here
            dali_float = dali_uint8 = None
            print(f"DALI rows skipped: the CPU pipeline does not build ({type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''})")
    if args.augment:
        from fastprep.bench.recipes import AUGMENT_RECIPES

        p[TV_AUG] = (DataLoader(TorchvisionAugmented(files, AUGMENT_RECIPES["trivialaugment"]()), **common), AUG_OUT,
                     "decode_jpeg + the v2 pipeline per sample, float32 default_collate", "dataloader", None)
        if "threads" in args.engines:
            p[FP_AUG] = (make_loader(files, transform=AUGMENT_RECIPES["trivialaugment"](), device="cpu",
                                     engine="threads", **common), AUG_OUT,
                         "the same v2 pipeline, compiled to native steps", "in-process", None)
    if dali_float is not None:
        p[f"DALI CPU pipeline, {W} threads, crop_mirror_normalize"] = (
            dali_float, FLOAT_OUT, "crop_mirror_normalize (flip + normalise fused), CHW", "in-process", None)
    p[TV_UINT8] = (DataLoader(TorchvisionRecipe(files), **common), UINT8_OUT, "uint8 default_collate, NCHW",
                   "dataloader", None)
    if dali_uint8 is not None:
        p[f"DALI CPU pipeline, {W} threads"] = (dali_uint8, UINT8_OUT, "fn.flip; HWC layout", "in-process", None)
    return p


def run(args, dali_version):
    torch.manual_seed(0)
    width, height = args.size
    with tempfile.TemporaryDirectory(prefix="fastprep-recipe-loaders-") as tmp:
        t0 = time.perf_counter()
        orig, packed_dir = os.path.join(tmp, "orig"), os.path.join(tmp, "packed")
        os.makedirs(orig)
        if args.folder:
            files, args.distinct_used = copy_files(orig, args.files, args.folder)
        else:
            files = make_files(orig, args.files, width, height, args.distinct_used)
        pack_folder(orig, packed_dir, progress=False)
        packed = [os.path.join(packed_dir, os.path.basename(f)) for f in files]
        shards = None
        if args.shards:
            shards = os.path.join(tmp, "shards")
            pack_shards(orig, shards, shard_size=args.shards, progress=False)
        print(f"wrote {len(files)} JPEGs ({args.distinct_used} distinct, {inputs_text(args)}) "
              f"and their packed copies in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        pipelines = build_pipelines(args, files, packed, dali_version, shards)
        names = list(pipelines)
        runs = {name: {"warmup": [], "epochs": []} for name in names}
        meta = {name: {} for name in names}
        sample = range(min(len(files), 64))
        kernel_datas = {"orig": [read_file(files[i]) for i in sample], "packed": [read_file(packed[i]) for i in sample]}
        kernels = {"orig": [], "packed": []}
        batch_ops = {"orig": [], "packed": []}
        for r in range(args.warmup + args.epochs):
            if r >= args.warmup:
                for which, datas in kernel_datas.items():
                    kernels[which].append(kernel_ms(datas))
                    batch_ops[which].append(batch_op_ms(datas))
            for name in names[r % len(names):] + names[:r % len(names)]:
                rec = {}
                engine_cpu0 = engine_cpu(pipelines[name][0])
                n, wall, main_cpu, worker_cpu = _epoch(_Observed(pipelines[name][0], rec))
                engine_cpu1 = engine_cpu(pipelines[name][0])
                s0 = _cpu_seconds(resource.RUSAGE_SELF)
                time.sleep(args.settle)  # not timed; its CPU (threads winding down) counts for this epoch
                main_cpu += _cpu_seconds(resource.RUSAGE_SELF) - s0
                which = "warmup" if r < args.warmup else "epochs"
                runs[name][which].append({"samples": n, "wall_s": wall, "first_batch_s": rec["first_batch_s"],
                                          "main_cpu_s": main_cpu, "worker_cpu_s": worker_cpu})
                if engine_cpu0 is not None:
                    runs[name][which][-1]["engine_cpu"] = {k: engine_cpu1[k] - engine_cpu0[k] for k in engine_cpu0}
                meta[name] = {"shape": rec["shape"], "dtype": rec["dtype"]}
                print(f"{'warm-up' if which == 'warmup' else 'epoch'} {r} {name}: {n / wall:.0f} samples/s, "
                      f"first batch after {rec['first_batch_s']:.3f} s", file=sys.stderr)
                if n != args.files:
                    raise RuntimeError(f"{name} delivered {n} samples in an epoch, expected {args.files}")
                want = "uint8" if pipelines[name][1] == UINT8_OUT else "float32"
                if rec["dtype"] != want or CROP not in rec["shape"][1:2] + rec["shape"][3:] \
                        or rec["shape"].count(CROP) < 2:
                    raise RuntimeError(f"{name} delivered {rec['dtype']} {rec['shape']}, expected {want} "
                                       f"224x224 images")
        kernel = {which: statistics.median(v) for which, v in kernels.items()}
        batch_op = {which: statistics.median(v) for which, v in batch_ops.items()}
        overhead = engine_overhead(args, files) if "threads" in args.engines else None
    cores = min(args.workers, available_cpus())
    results = {}
    for name in names:
        _, out, note, kind, kernel_of = pipelines[name]
        rs = runs[name]["epochs"]
        results[name] = {
            "output": out, "note": note, "kind": kind, "batch": meta[name],
            "kernel_ms": kernel[kernel_of] if kernel_of else None, "cores": cores,
            "samples_per_s": statistics.median(x["samples"] / x["wall_s"] for x in rs),
            "warmup_samples_per_s": [x["samples"] / x["wall_s"] for x in runs[name]["warmup"]],
            "first_batch_s": statistics.median(x["first_batch_s"] for x in rs),
            "cpu_ms_per_sample": statistics.median((x["main_cpu_s"] + x["worker_cpu_s"]) / x["samples"] * 1e3
                                                   for x in rs),
            "worker_cpu_ms_per_sample": statistics.median(x["worker_cpu_s"] / x["samples"] * 1e3 for x in rs),
            "main_cpu_ms_per_sample": statistics.median(x["main_cpu_s"] / x["samples"] * 1e3 for x in rs),
            "epochs": rs, "warmup": runs[name]["warmup"],
        }
        if rs and "engine_cpu" in rs[0] and kernel_of:
            results[name]["batch_op_ms"] = batch_op[kernel_of]
            results[name]["engine_python"] = engine_python(rs, batch_op[kernel_of])
    for name, r in results.items():
        ref = {FLOAT_OUT: TV_FLOAT, UINT8_OUT: TV_UINT8, AUG_OUT: TV_AUG}[r["output"]]
        r["reference"] = ref
        r["vs_torchvision"] = r["samples_per_s"] / results[ref]["samples_per_s"]
        if name == FP_AUG and FP_PLAIN in results:
            r["vs_plain_recipe"] = r["samples_per_s"] / results[FP_PLAIN]["samples_per_s"]
        r["efficiency"] = None if r["kernel_ms"] is None else r["samples_per_s"] / (cores / (r["kernel_ms"] / 1e3))
        # load-independent: the share of the CPU the pipeline spent that the kernel alone would
        r["cpu_efficiency"] = None if r["kernel_ms"] is None else r["kernel_ms"] / r["cpu_ms_per_sample"]
    return results, overhead


def table(results) -> str:
    lines = ["| pipeline | output batch | samples/s | vs torchvision (same output) | efficiency (kernel ms) "
             "| CPU efficiency | warm-up epoch samples/s | first batch (s) | CPU ms/sample |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        b = r["batch"]
        shape = "x".join(str(s) for s in b.get("shape", []))
        if r["kind"] == "dataloader":
            cpu = (f"{r['cpu_ms_per_sample']:.2f} (workers {r['worker_cpu_ms_per_sample']:.2f} + main "
                   f"{r['main_cpu_ms_per_sample']:.2f})")
        else:
            cpu = f"{r['cpu_ms_per_sample']:.2f} (in-process)"
        warm = ", ".join(f"{v:.0f}" for v in r["warmup_samples_per_s"]) or "-"
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.2f} ({r['kernel_ms']:.2f})"
        cpu_eff = "-" if r["cpu_efficiency"] is None else f"{r['cpu_efficiency']:.2f}"
        lines.append(f"| {name} | {b.get('dtype', '?')} {shape}: {r['note']} | {r['samples_per_s']:.0f} | "
                     f"{r['vs_torchvision']:.2f}x | {eff} | {cpu_eff} | {warm} | {r['first_batch_s']:.3f} | {cpu} |")
    return "\n".join(lines)


def results_cores(results) -> int:
    return next(iter(results.values()))["cores"]


def _size(text):
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 500x375, got {text!r}") from None
    if w < 1 or h < 1:
        raise argparse.ArgumentTypeError(f"width and height must be >= 1, got {text!r}")
    return w, h


def _engines(text):
    engines = tuple(e.strip() for e in text.split(",") if e.strip())
    bad = [e for e in engines if e not in ENGINE_NOTES]
    if bad or not engines:
        raise argparse.ArgumentTypeError(f"engines are threads and/or processes, got {text!r}")
    return engines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring (and docs/recipes.md) for what each row does.")
    p.add_argument("--files", type=int, default=256, help="JPEG files = samples per epoch (default 256)")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per pipeline, after the warm-up (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up epochs per pipeline, reported apart (default 1)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers and DALI threads (default 2)")
    p.add_argument("--size", type=_size, default=(500, 375), help="WIDTHxHEIGHT of the JPEGs (default 500x375; "
                   "4000x3000 for 12 MP)")
    p.add_argument("--distinct", type=int, default=None, help="distinct images among the files (default: "
                   "min(files, 64), or min(files, 4) above 2 MP)")
    p.add_argument("--settle", type=float, default=0.25, help="untimed pause after each epoch, its CPU counted "
                   "(default 0.25 s)")
    p.add_argument("--no-dali", action="store_true", help="leave the DALI rows out even if DALI imports")
    p.add_argument("--engines", type=_engines, default=("threads", "processes"),
                   help="make_loader engines to run, comma-separated (default threads,processes)")
    p.add_argument("--folder", help="use copies of the JPEGs in this folder (sorted, cycled to --files) instead "
                   "of synthetic ones; --size and --distinct are then ignored")
    p.add_argument("--rss-epochs", type=int, default=5, help="threads engine epochs over which RSS is recorded "
                   "(default 5; 0: skip)")
    p.add_argument("--shards", metavar="SIZE", help="also read the packed samples from WebDataset shards of this "
                   "size (e.g. 16MB) written by fastprep.pack --format wds")
    p.add_argument("--augment", action="store_true", help="also the TrivialAugment recipe (RandomResizedCrop, flip, "
                   "TrivialAugmentWide, ToDtype, Normalize, RandomErasing: fastprep.bench's --recipe trivialaugment) "
                   "as a torchvision DataLoader and as make_loader(transform=...) on the threads engine")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args(argv)
    if args.files < 1 or args.epochs < 1 or args.warmup < 0 or args.batch_size < 1 or args.workers < 1:
        p.error("--files, --epochs, --batch-size, --workers must be >= 1 and --warmup >= 0")
    w, h = args.size
    args.distinct_used = min(args.files, args.distinct or (64 if w * h <= 2_000_000 else 4))
    load_start = os.getloadavg()
    print(describe())
    dali_version, dali_line = (None, "DALI rows skipped: --no-dali") if args.no_dali else dali_status()
    vers = versions(dali_version)
    print(", ".join(f"{k} {v}" for k, v in vers.items()))
    print(dali_line)
    results, overhead = run(args, dali_version)
    load_end = os.getloadavg()
    print()
    print(table(results))
    print()
    for name, r in results.items():
        e = r.get("engine_python")
        if e:
            print(f"{name}: Python CPU per batch (GIL held) {e['python_ms_per_batch']:.2f} ms = readers' planning "
                  f"{e['plan_ms_per_batch']:.2f} + builder {e['build_python_ms_per_batch']:.2f}, "
                  f"{100 * e['share_of_kernel']:.1f} % of the batch's kernel time (the native batch call alone: "
                  f"{r['batch_op_ms']:.2f} thread-CPU ms per sample); file reads {e['read_ms_per_batch']:.2f} ms "
                  f"per batch besides (read_encoded, mostly outside the GIL); medians of the timed epochs")
    if FP_AUG in results and "vs_plain_recipe" in results[FP_AUG]:
        print(f"TrivialAugment recipe on the threads engine: {results[FP_AUG]['vs_plain_recipe']:.2f}x the plain "
              f"recipe's rate ('{FP_PLAIN}'), {results[FP_AUG]['vs_torchvision']:.2f}x '{TV_AUG}'")
    if overhead:
        rss = ", ".join(f"{v:.0f}" for v in overhead["rss_mib_after_each_epoch"]) or "-"
        print(f"threads engine: first batch {overhead['first_batch_after_make_loader_s']:.3f} s after make_loader "
              f"(median of 3, warm imports); RSS after each of {len(overhead['rss_mib_after_each_epoch'])} epochs "
              f"(MiB): {rss}")
    print()
    print(f"ImageNet train recipe (decode + RandomResizedCrop(224) + flip), {args.files} JPEGs per epoch "
          f"({inputs_text(args)}; {args.distinct_used} distinct), batch {args.batch_size}, {args.workers} "
          f"DataLoader workers / DALI threads, consumer doing nothing; median of {args.epochs} interleaved epochs "
          f"after {args.warmup} warm-up. Ratios: to '{TV_FLOAT}' for the normalised float32 rows, to "
          f"'{TV_UINT8}' for the uint8 rows" + (f", to '{TV_AUG}' for the augmented rows" if args.augment else "")
          + f". make_loader has no uint8 output: its rows include the batch "
          f"normalisation, and so does the torchvision reference. Efficiency: samples/s / ({results_cores(results)} "
          f"cores / the recipe transform's mean thread-CPU ms per sample, in parentheses, measured in the same "
          f"rounds); it needs the cores to itself. CPU efficiency: that kernel time / the CPU ms the pipeline "
          f"spent per sample (what another load on the machine does not lower). Load average (1, 5, 15 min) at start "
          f"{', '.join(f'{v:.2f}' for v in load_start)}, at end {', '.join(f'{v:.2f}' for v in load_end)}.")
    if args.json:
        report = {"platform": describe(), "versions": vers, "dali": dali_line,
                  "config": {"files": args.files, "distinct_images": args.distinct_used, "inputs": inputs_text(args),
                             "size": None if args.folder else f"{w}x{h}",
                             "quality": 90, "subsampling": "4:2:0", "batch_size": args.batch_size,
                             "workers": args.workers, "engines": list(args.engines), "epochs": args.epochs,
                             "warmup": args.warmup, "augment": args.augment,
                             "settle_s": args.settle, "cpu_count": os.cpu_count(),
                             "main_torch_threads": torch.get_num_threads()},
                  "loadavg": {"start": load_start, "end": load_end}, "results": results,
                  "threads_engine_overhead": overhead}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return results


if __name__ == "__main__":
    main()
