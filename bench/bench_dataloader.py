"""fastprep.data.DataLoader against torch.utils.data.DataLoader on the same ImageFolder, the same
transform, batch size and workers: samples/s and their ratio, measured in one run.

    python bench/bench_dataloader.py --root /tmp/cuts-folder --runs 3

``--root``: an ImageFolder tree (class subfolders), e.g. the real-photo cuts of
``bench/make_photo_cuts.py`` linked into a few class folders. Without it (or with
``--quick``) a small folder of synthetic photo-like JPEGs is made in a temporary directory.
Loaders alternate run by run; the median of ``--runs`` epochs is reported per loader, as
samples/s and as samples per CPU-second (the process's CPU time and its finished workers': on a
machine shared with other jobs the wall-clock ratio moves with their load, the CPU one much
less). Run it from the checkout it measures (``PYTHONPATH=.``): ``bench/`` is the script's own
folder, so an installed fastprep is imported otherwise.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time

import torch
from PIL import Image
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

import fastprep.data as fd
from fastprep._platform import describe
from fastprep.bench.synthetic import photo_like
# pytorch/examples' transforms, shared with `python -m fastprep.bench --recipe examples-train`
from fastprep.bench.unchanged import examples_train, examples_val

M, S = fd.IMAGENET_MEAN, fd.IMAGENET_STD


def pipelines(size: int) -> dict:
    """name -> transform factory: the scripts people have (docs/migrate.md)."""
    return {
        "v2 tensor train": lambda: v2.Compose([v2.ToImage(), v2.RandomResizedCrop(size, antialias=True),
                                               v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                                               v2.Normalize(M, S)]),
        "v2 tensor val": lambda: v2.Compose([v2.ToImage(), v2.Resize(size * 8 // 7, antialias=True),
                                             v2.CenterCrop(size), v2.ToDtype(torch.float32, scale=True),
                                             v2.Normalize(M, S)]),
        "pytorch/examples train (v1 PIL)": lambda: examples_train(size),
        "pytorch/examples val (v1 PIL)": lambda: examples_val(size),
    }


def _cpu() -> str:
    """The CPU, its ISA level and CPUs (fastprep._platform.describe), and the load average."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    return f"{describe().removeprefix('CPU: ')}, load {' '.join(f'{x:.1f}' for x in load)}"


def _synthetic_folder(top: str, count: int) -> str:
    for k in range(count):
        folder = os.path.join(top, f"class{k % 4}")
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(photo_like(240, 320, k)).save(os.path.join(folder, f"{k:04d}.jpg"), quality=90)
    return top


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (torch's workers, which exit at
    the end of each epoch)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _epoch(loader) -> tuple[int, float, float]:
    """(samples, samples/s, samples per CPU-second) of one epoch."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    n = 0
    for images, _ in loader:
        n += images.shape[0]
    return n, n / (time.perf_counter() - start), n / max(_cpu_seconds() - cpu, 1e-9)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", help="an ImageFolder tree (default: synthetic JPEGs in a temporary folder)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--quick", action="store_true", help="16 synthetic images, one run, 64-pixel crops")
    parser.add_argument("--only", default="", help="run only the pipelines whose name contains this text")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.size, args.root = 1, 64, None
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or _synthetic_folder(tmp, 16 if args.quick else 256)
        print(f"CPU: {_cpu()}; Python {platform.python_version()}, torch {torch.__version__}")
        print(f"ImageFolder {root if args.root else '(synthetic)'}, batch {args.batch_size}, "
              f"num_workers={args.workers}, {args.runs} runs per loader (alternating), median samples/s and "
              "samples per CPU-second")
        results = {}
        for name, make in pipelines(args.size).items():
            if args.only not in name:
                continue
            dataset = ImageFolder(root, make())
            fast = fd.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, seed=0)
            ref = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                              num_workers=args.workers)
            _epoch(fast)  # warm-up: page cache, kernels
            ours, theirs = [], []
            for _ in range(args.runs):
                theirs.append(_epoch(ref))
                ours.append(_epoch(fast))
            samples = ours[-1][0]
            a, b = statistics.median(r[1] for r in ours), statistics.median(r[1] for r in theirs)
            ac, bc = statistics.median(r[2] for r in ours), statistics.median(r[2] for r in theirs)
            results[name] = {"engine": fast.engine, "engine_reason": fast.engine_reason, "samples": samples,
                             "fastprep_per_s": a, "torch_per_s": b, "ratio": a / b,
                             "fastprep_per_cpu_s": ac, "torch_per_cpu_s": bc, "cpu_ratio": ac / bc}
            print(f"{name:34s} torch {b:7.1f}/s  fastprep [{fast.engine}] {a:7.1f}/s  {a / b:.2f}x   "
                  f"per CPU-second {bc:6.1f} vs {ac:6.1f}: {ac / bc:.2f}x")
    return {"results": results}


if __name__ == "__main__":
    main(sys.argv[1:])
