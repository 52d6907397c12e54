"""Transforms written as their users write them, unchanged, in an ImageFolder -- DINO's multi-crop
class (``--transform dino``), timm's ``create_transform`` train (``rand-m9-mstd0.5``,
``re_prob=0.25``, ``re_mode="pixel"``) and eval pipelines (``timm-train``, ``timm-eval``; timm
installed) -- through fastprep.data.DataLoader (the transform traced per sample, its ops
replayed on the threads engine) against torch.utils.data.DataLoader, a shuffled Subset, the same
batch size and workers; samples/s and their ratio, measured in one run.

    python bench/bench_multicrop.py --photos /work/cuts --runs 3 --transform dino

``--photos``: a folder of JPEGs (e.g. the real-photo cuts of ``bench/make_photo_cuts.py``),
linked into 4 class folders in a temporary directory; without it, synthetic photo-like JPEGs.
Loaders alternate run by run; the median of ``--runs`` epochs is reported per loader, with the
threads engine's per-sample fallbacks (``literal_samples``) and the CPU.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
from PIL import Image
from torch.utils.data import Subset
from torchvision.datasets import ImageFolder

import fastprep.data as fd
from fastprep._platform import describe
from fastprep.bench.synthetic import photo_like
# DINO's multi-crop class and timm's pipelines, shared with `python -m fastprep.bench --recipe dino-pil`
from fastprep.bench.unchanged import DataAugmentationDINO, timm_eval, timm_train


def _cpu() -> str:
    """The CPU, its ISA level and CPUs (fastprep._platform.describe), and the load average."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    return f"{describe().removeprefix('CPU: ')}, load {' '.join(f'{x:.1f}' for x in load)}"


def _folder(top: str, photos: str | None, count: int) -> str:
    files = sorted(glob.glob(os.path.join(photos, "**", "*.jpg"), recursive=True))[:count] if photos else []
    for k in range(count if not photos else len(files)):
        folder = os.path.join(top, f"class{k % 4}")
        os.makedirs(folder, exist_ok=True)
        if photos:
            os.symlink(os.path.abspath(files[k]), os.path.join(folder, f"{k:04d}.jpg"))
        else:
            Image.fromarray(photo_like(375, 500, k)).save(os.path.join(folder, f"{k:04d}.jpg"), quality=90)
    return top


def _transform(name: str):
    if name == "dino":
        return DataAugmentationDINO(), "DINO multi-crop (2x224 + 8x96)"
    if name == "timm-train":
        return timm_train(224), "timm create_transform train rand-m9-mstd0.5, re_prob=0.25"
    return timm_eval(224), "timm create_transform eval"


def _epoch(loader, limit: int, count) -> float:
    """Samples/s of ``loader`` over its first ``limit`` samples (``count(batch)``: a batch's)."""
    start = time.perf_counter()
    n = 0
    for batch in loader:
        n += count(batch)
        if n >= limit:
            break
    return n / (time.perf_counter() - start)


def compare(fast, ref, *, limit: int, warmup: int, runs: int, count=lambda batch: batch[1].shape[0]) -> dict:
    """Alternating epochs of torch's loader ``ref`` and fastprep's ``fast`` (after a warm-up of
    ``warmup`` samples each: page cache, workers), their medians printed; the report dict."""
    _epoch(fast, warmup, count)
    _epoch(ref, warmup, count)
    ours, theirs = [], []
    for _ in range(runs):
        theirs.append(_epoch(ref, limit, count))
        ours.append(_epoch(fast, limit, count))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"torch DataLoader      {b:7.1f} samples/s  (runs: {', '.join(f'{x:.1f}' for x in theirs)})")
    print(f"fastprep [{fast.engine}]   {a:7.1f} samples/s  (runs: {', '.join(f'{x:.1f}' for x in ours)})  "
          f"{a / b:.2f}x")
    print(f"engine_reason: {fast.engine_reason}; samples run as written: {fast.literal_samples}")
    return {"engine": fast.engine, "fastprep_per_s": a, "torch_per_s": b, "ratio": a / b}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", help="a folder of JPEGs (default: synthetic)")
    parser.add_argument("--count", type=int, default=600, help="images in the ImageFolder")
    parser.add_argument("--samples", type=int, default=320, help="samples per measured epoch (a shuffled Subset)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--transform", choices=("dino", "timm-train", "timm-eval"), default="dino")
    parser.add_argument("--quick", action="store_true", help="24 synthetic images, one run")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.count, args.samples, args.photos, args.batch_size = 1, 24, 16, None, 8
    with tempfile.TemporaryDirectory() as tmp:
        root = _folder(tmp, args.photos, args.count)
        transform, described = _transform(args.transform)
        dataset = ImageFolder(root, transform)
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:args.samples].tolist()
        subset = Subset(dataset, order)
        print(f"CPU: {_cpu()}; Python {platform.python_version()}, torch {torch.__version__}")
        print(f"ImageFolder of {len(dataset)} images from {args.photos or '(synthetic)'}, shuffled Subset of "
              f"{len(subset)}, {described}, batch {args.batch_size}, num_workers={args.workers}, "
              f"{args.runs} runs per loader (alternating), median samples/s")
        fast = fd.DataLoader(subset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, seed=0)
        ref = torch.utils.data.DataLoader(subset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                          persistent_workers=args.workers > 0)
        return compare(fast, ref, limit=len(subset), warmup=args.batch_size * 2, runs=args.runs)


if __name__ == "__main__":
    main(sys.argv[1:])
