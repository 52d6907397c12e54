"""Loader throughput: fastprep's data path vs the reference pipelines, in one run.

    python bench/bench_loader.py [--workers 2] [--batch-size 64] [--epochs 3] [--json FILE]

Three DataLoader pipelines over the same photo-like 533x800 q90 4:2:0 JPEGs, consumer
doing nothing, every pipeline producing float32 YUV in [0, 1], 256x256, masked (0.25):

* ``fastprep``: :func:`fastprep.data.make_loader` with its default threads engine -- ROI
  decode + uint8 RandomMask, one native call per batch on ``--workers`` threads in this
  process, batch YUV/scale after it (CPU path: the Cython kernel; on CUDA it would run on
  the GPU). Nothing crosses a process boundary.
* ``fastprep-packed``: the same on copies made by :func:`fastprep.pack.pack_folder`
  (restart markers: the ROI decode entropy-decodes only the intervals the crop needs).
* ``fastprep-processes``: ``make_loader(engine="processes")``: the same transform per sample
  in DataLoader worker processes, ``collate_uint8`` into shared memory.
* ``reference-optimized``: ROI decode op + numpy mask (shift-OR dilation) + per-sample
  torch YUV (matmul) and /255 in the workers, ``default_collate`` of float32.
* ``reference-plain``: PIL decode of the whole image + torchvision RandomCrop + scipy
  ``convolve2d`` mask + torch matmul YUV + /255, ``default_collate``.

Per pipeline and epoch: samples/s (wall), CPU-ms per sample (workers, read from
``RUSAGE_CHILDREN`` after the epoch's workers are joined, plus the main process from
``RUSAGE_SELF``), and the bytes per sample crossing the worker boundary (one collated
batch's tensors). Epochs of the pipelines are interleaved; the table shows medians.
Also measured: ROI decode alone, in-process, as the per-sample floor, for the original
and the packed files, and its share of the fastprep pipelines' CPU per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

try:
    import fastprep  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastprep.data as D  # noqa: E402
from fastprep import io as fio  # noqa: E402
from fastprep._platform import describe  # noqa: E402
from fastprep.decode_transforms import DecodeRandomCrop  # noqa: E402
from fastprep.bench.synthetic import encode_jpeg, photo_like  # noqa: E402
from fastprep.pack import pack_folder  # noqa: E402

CROP = 256
RATIO = 0.25
_YUV_M = torch.tensor([[0.299, 0.587, 0.114], [-0.16874, -0.33126, 0.5], [0.5, -0.41869, -0.08131]])
_YUV_OFF = torch.tensor([0.0, 128.0, 128.0]).view(3, 1, 1)
_CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=np.uint8)


def _yuv_scale_per_sample(img_uint8: torch.Tensor) -> torch.Tensor:
    c, h, w = img_uint8.shape
    x = img_uint8.float()
    yuv = (_YUV_M @ x.reshape(3, -1)).reshape(3, h, w) + _YUV_OFF
    return yuv / 255


class ReferenceOptimized(Dataset):
    """ROI decode op, numpy mask, per-sample torch YUV + scale (float32 out)."""

    def __init__(self, files):
        self.files = files
        self.crop = DecodeRandomCrop(CROP, pad_if_needed=True)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        img = self.crop(fio.read_file(self.files[i]))
        h, w = img.shape[1:]
        m = (torch.rand(h, w) < RATIO).numpy()
        d = m.copy()
        d[1:] |= m[:-1]
        d[:-1] |= m[1:]
        d[:, 1:] |= m[:, :-1]
        d[:, :-1] |= m[:, 1:]
        arr = img.numpy()
        arr[:, d] = 0
        return _yuv_scale_per_sample(img), 0


class ReferencePlain(Dataset):
    """PIL full decode, torchvision RandomCrop, scipy convolve2d mask, torch YUV + scale."""

    def __init__(self, files):
        import torchvision.transforms as T

        self.files = files
        self.crop = T.RandomCrop(CROP, pad_if_needed=True)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image
        from scipy.signal import convolve2d

        with Image.open(self.files[i]) as im:
            arr = np.array(im.convert("RGB"))
        img = self.crop(torch.from_numpy(arr).permute(2, 0, 1))
        h, w = img.shape[1:]
        m = (torch.rand(h, w) < RATIO).numpy().astype(np.uint8)
        d = torch.from_numpy(convolve2d(m, _CROSS, mode="same") > 0)
        img = img.clone()
        img[:, d] = 0
        return _yuv_scale_per_sample(img), 0


def _bytes_per_sample(loader) -> float | None:
    """Bytes of one collated batch's tensors per sample: what a worker sends (``None`` for
    the threads engine, which has no worker processes)."""
    if not isinstance(loader, DataLoader):
        return None
    ds, collate = loader.dataset, loader.collate_fn
    n = min(8, len(ds))
    batch = collate([ds[i] for i in range(n)])
    return sum(t.numel() * t.element_size() for t in batch) / n


def _cpu_seconds(who):
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def _epoch(iterable):
    """(samples, wall s, main-process CPU s, worker CPU s) of one full pass."""
    self0, child0 = _cpu_seconds(resource.RUSAGE_SELF), _cpu_seconds(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    n = 0
    it = iter(iterable)
    for images, _ in it:
        n += images.shape[0]
    del it  # non-persistent workers are joined by now (their rusage is in CHILDREN)
    wall = time.perf_counter() - t0
    return (n, wall, _cpu_seconds(resource.RUSAGE_SELF) - self0,
            _cpu_seconds(resource.RUSAGE_CHILDREN) - child0)


def _decode_floor(files, n=200):
    crop = DecodeRandomCrop(CROP, pad_if_needed=True)
    t0 = time.process_time()
    for i in range(n):
        crop(fio.read_file(files[i % len(files)]))
    return (time.process_time() - t0) / n * 1e3


def make_files(folder, images):
    paths = []
    for i in range(images):
        path = os.path.join(folder, f"{i:04d}.jpg")
        with open(path, "wb") as f:
            f.write(encode_jpeg(photo_like(533, 800, seed=i), quality=90, subsampling="4:2:0"))
        paths.append(path)
    return paths


def run(args):
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="fastprep-bench-") as tmp:
        t0 = time.perf_counter()
        orig, packed_dir = os.path.join(tmp, "orig"), os.path.join(tmp, "packed")
        os.makedirs(orig)
        paths = make_files(orig, args.images)
        pack_folder(orig, packed_dir, progress=False)
        packed = [os.path.join(packed_dir, os.path.basename(p)) for p in paths]
        files = [paths[i % len(paths)] for i in range(args.samples)]
        packed_files = [packed[i % len(packed)] for i in range(args.samples)]
        print(f"wrote {len(paths)} JPEGs (533x800 q90 4:2:0) in {time.perf_counter() - t0:.1f} s; "
              f"{len(files)} samples per epoch", file=sys.stderr)
        common = dict(batch_size=args.batch_size, num_workers=args.workers, shuffle=True)
        pipelines = {
            "fastprep": D.make_loader(files, crop_size=CROP, mask_ratio=RATIO, device="cpu", **common),
            "fastprep-packed": D.make_loader(packed_files, crop_size=CROP, mask_ratio=RATIO, device="cpu", **common),
            "fastprep-processes": D.make_loader(files, crop_size=CROP, mask_ratio=RATIO, device="cpu",
                                                engine="processes", **common),
            "reference-optimized": DataLoader(ReferenceOptimized(files), **common),
            "reference-plain": DataLoader(ReferencePlain(files), **common),
        }
        bytes_ps = {name: _bytes_per_sample(p.loader if isinstance(p, D.DevicePrefetcher) else p)
                    for name, p in pipelines.items()}
        floor_ms = _decode_floor(paths)
        packed_floor_ms = _decode_floor(packed)
        runs = {name: [] for name in pipelines}
        for epoch in range(args.epochs):
            for name, p in pipelines.items():
                n, wall, main_cpu, worker_cpu = _epoch(p)
                runs[name].append({"samples": n, "wall_s": wall, "main_cpu_s": main_cpu, "worker_cpu_s": worker_cpu})
                print(f"epoch {epoch} {name}: {n / wall:.0f} samples/s", file=sys.stderr)
    results = {}
    for name, rs in runs.items():
        n = rs[0]["samples"]
        results[name] = {
            "samples_per_s": statistics.median(r["samples"] / r["wall_s"] for r in rs),
            "worker_cpu_ms_per_sample": statistics.median(r["worker_cpu_s"] / n * 1e3 for r in rs),
            "main_cpu_ms_per_sample": statistics.median(r["main_cpu_s"] / n * 1e3 for r in rs),
            "cpu_ms_per_sample": statistics.median((r["worker_cpu_s"] + r["main_cpu_s"]) / n * 1e3 for r in rs),
            "bytes_per_sample": bytes_ps[name],
            "epochs": rs,
        }
    fast = results["fastprep"]["samples_per_s"]
    for r in results.values():
        r["fastprep_speedup"] = fast / r["samples_per_s"]
    return {
        "config": {"workers": args.workers, "batch_size": args.batch_size, "samples_per_epoch": args.samples,
                   "distinct_images": args.images, "epochs": args.epochs, "crop": CROP, "mask_ratio": RATIO,
                   "image": "photo_like 533x800 q90 4:2:0", "cpu_count": os.cpu_count(),
                   "torch": torch.__version__, "python": platform.python_version(),
                   "main_torch_threads": torch.get_num_threads()},
        "roi_decode_only_cpu_ms_per_sample": floor_ms,
        "packed_roi_decode_only_cpu_ms_per_sample": packed_floor_ms,
        "decode_share_of_cpu": {"fastprep": floor_ms / results["fastprep"]["cpu_ms_per_sample"],
                                "fastprep-packed": packed_floor_ms / results["fastprep-packed"]["cpu_ms_per_sample"]},
        "platform": describe(),
        "results": results,
    }


def _bytes_cell(value: float | None) -> str:
    return "- (in-process)" if value is None else f"{value:,.0f}"


def table(report) -> str:
    lines = ["| pipeline | samples/s | fastprep speed-up | CPU ms/sample (workers + main) "
             "| bytes/sample across workers |",
             "|---|---:|---:|---:|---:|"]
    for name, r in report["results"].items():
        lines.append(f"| {name} | {r['samples_per_s']:.0f} | {r['fastprep_speedup']:.2f}x | "
                     f"{r['cpu_ms_per_sample']:.2f} ({r['worker_cpu_ms_per_sample']:.2f} + "
                     f"{r['main_cpu_ms_per_sample']:.2f}) | {_bytes_cell(r['bytes_per_sample'])} |")
    c = report["config"]
    lines.append("")
    lines.append(f"{c['workers']} workers, batch {c['batch_size']}, {c['samples_per_epoch']} samples/epoch, "
                 f"median of {c['epochs']} epochs; ROI decode alone: "
                 f"{report['roi_decode_only_cpu_ms_per_sample']:.2f} CPU-ms/sample (packed files: "
                 f"{report['packed_roi_decode_only_cpu_ms_per_sample']:.2f}); ROI decode's share of CPU/sample: "
                 f"fastprep {100 * report['decode_share_of_cpu']['fastprep']:.0f} %, fastprep-packed "
                 f"{100 * report['decode_share_of_cpu']['fastprep-packed']:.0f} %.")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--samples", type=int, default=1280, help="samples per epoch (files are reused)")
    p.add_argument("--images", type=int, default=64, help="distinct JPEGs written")
    p.add_argument("--epochs", type=int, default=3, help="epochs per pipeline (median reported)")
    p.add_argument("--quick", action="store_true", help="tiny run for a smoke test")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args(argv)
    if args.quick:
        args.samples, args.images, args.epochs = 2 * args.batch_size, 4, 1
    print(describe(), file=sys.stderr)
    report = run(args)
    print(table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()
