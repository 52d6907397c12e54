"""pytorch/examples' ImageNet pipelines on PIL images: ``ImageFolder`` + torch's DataLoader
against ``make_loader(folder, transform=<the same pipeline>)``, in one run.

    python bench/bench_pil_loader.py --photos /work/cuts [--root /tmp/pil/imagefolder]
                                     [--batch-size 32] [--workers 2] [--batches 12] [--runs 3]

Inputs: the JPEGs of ``--photos`` arranged as an ImageFolder under ``--root`` (symlinks into
4 class folders). Pipelines, unchanged from pytorch/examples' ``imagenet/main.py``:

* train: ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``, ``ToTensor()``,
  ``Normalize(mean, std)``;
* val: ``Resize(256)``, ``CenterCrop(224)``, ``ToTensor()``, ``Normalize(mean, std)``.

Rows: ``torchvision.datasets.ImageFolder(root, transform)`` in ``torch.utils.data.DataLoader
(batch_size, shuffle=True, num_workers=--workers)``; ``fastprep.data.make_loader(root,
transform=..., engine="threads", num_workers=--workers, device="cpu", seed=0)`` (the same
pixels, bit for bit: tests/test_pil_exact.py). Each run times ``--batches`` batches after one
warm-up batch, for each loader in turn; the median of ``--runs`` runs is reported, with the
ratio fastprep / torch of the same run. Prints the CPU model and ISA.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

from fastprep._platform import describe
from fastprep.data import make_loader

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PIPELINES = {
    "train": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                                T.Normalize(MEAN, STD)]),
    "val": lambda: T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]),
}


def image_folder(photos: str, root: str, classes: int = 4) -> str:
    """``root`` as an ImageFolder of symlinks to the JPEGs of ``photos``."""
    names = sorted(n for n in os.listdir(photos) if n.lower().endswith((".jpg", ".jpeg")))
    for k, name in enumerate(names):
        folder = os.path.join(root, f"class{k % classes}")
        os.makedirs(folder, exist_ok=True)
        link = os.path.join(folder, name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(photos, name)), link)
    return root


def rate(loader, batches: int) -> float:
    it = iter(loader)
    next(it)  # warm-up: workers started, buffers made
    start, n = time.perf_counter(), 0
    for _ in range(batches):
        images, _ = next(it)
        n += images.shape[0]
    elapsed = time.perf_counter() - start
    del it
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", required=True)
    ap.add_argument("--root", default="/tmp/pil/imagefolder")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    root = image_folder(args.photos, args.root)
    print(f"{describe()}; {args.photos} as an ImageFolder ({root}), batch {args.batch_size}, "
          f"{args.workers} workers, {args.batches} batches per run, median of {args.runs} runs")
    for name, make in PIPELINES.items():
        torch_rates, fp_rates, ratios = [], [], []
        fp = make_loader(root, transform=make(), engine="threads", num_workers=args.workers, device="cpu", seed=0,
                         batch_size=args.batch_size)
        for _ in range(args.runs):
            ref = torch.utils.data.DataLoader(ImageFolder(root, make()), batch_size=args.batch_size, shuffle=True,
                                              num_workers=args.workers)
            a, b = rate(ref, args.batches), rate(fp, args.batches)
            torch_rates.append(a)
            fp_rates.append(b)
            ratios.append(b / a)
        print(f"{name:5s}  torch DataLoader(ImageFolder) {statistics.median(torch_rates):7.1f}/s   fastprep "
              f"make_loader(threads) {statistics.median(fp_rates):7.1f}/s   ratio {statistics.median(ratios):.2f}x "
              f"(runs: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
