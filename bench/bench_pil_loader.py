"""pytorch/examples' ImageNet pipelines on PIL images: ``ImageFolder`` + torch's DataLoader
against ``make_loader(folder, transform=<the same pipeline>)``, in one run.

    python bench/bench_pil_loader.py --photos /work/cuts [--root /tmp/pil/imagefolder]
                                     [--batch-size 32] [--workers 2] [--batches 12] [--runs 3]

Inputs: the JPEGs of ``--photos`` arranged as an ImageFolder under ``--root`` (symlinks into
4 class folders). Pipelines, unchanged from pytorch/examples' ``imagenet/main.py``:

* train: ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``, ``ToTensor()``,
  ``Normalize(mean, std)``;
* val: ``Resize(256)``, ``CenterCrop(224)``, ``ToTensor()``, ``Normalize(mean, std)``;
* train-color (``--pipelines``): train with ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` and
  ``RandomGrayscale(0.2)`` after the flip (Pillow's colour arithmetic: the PIL twins);
* presets-ta (``--pipelines``): torchvision's references/classification/presets.py
  ``ClassificationPresetTrain(crop_size=224, auto_augment_policy="ta_wide",
  random_erase_prob=0.25, backend="pil", use_v2=True)`` as it builds it: v2
  ``RandomResizedCrop(224, BILINEAR, antialias=True)``, ``RandomHorizontalFlip(0.5)``,
  ``TrivialAugmentWide(BILINEAR)``, ``PILToTensor``, ``ToDtype(float, scale=True)``, ``Normalize``,
  ``RandomErasing(0.25)``, ``ToPureTensor`` (Pillow's affine, colour and point arithmetic).

Rows: ``torchvision.datasets.ImageFolder(root, transform)`` in ``torch.utils.data.DataLoader
(batch_size, shuffle=True, num_workers=--workers)``; ``fastprep.data.make_loader(root,
transform=..., engine="threads", num_workers=--workers, device="cpu", seed=0)`` (the same
pixels, bit for bit: tests/test_pil_exact.py, tests/test_pil_ops.py), or with ``--dataloader``
``fastprep.data.DataLoader(ImageFolder(root, transform), batch_size, shuffle=True,
num_workers=--workers, seed=0)``, the drop-in (checked to be on the threads engine). Each run
times ``--batches`` batches after one warm-up batch, for each loader in turn; the median of
``--runs`` runs is reported, with the ratio fastprep / torch of the same run. Prints the CPU model and ISA.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from fastprep._platform import describe
from fastprep.data import DataLoader, make_loader

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
PIPELINES = {
    "train": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                                T.Normalize(MEAN, STD)]),
    "val": lambda: T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)]),
    "train-color": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                      T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(0.2), T.ToTensor(),
                                      T.Normalize(MEAN, STD)]),
    "presets-ta": lambda: v2.Compose([
        v2.RandomResizedCrop(224, interpolation=v2.InterpolationMode.BILINEAR, antialias=True),
        v2.RandomHorizontalFlip(0.5), v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
        v2.PILToTensor(), v2.ToDtype(torch.float, scale=True), v2.Normalize(MEAN, STD), v2.RandomErasing(0.25),
        v2.ToPureTensor()]),
}


def fastprep_loader(root: str, make, args: argparse.Namespace):
    """fastprep's loader of the pipeline: ``make_loader`` or, with ``--dataloader``, the drop-in."""
    if not args.dataloader:
        return make_loader(root, transform=make(), engine="threads", num_workers=args.workers, device="cpu", seed=0,
                           batch_size=args.batch_size)
    loader = DataLoader(ImageFolder(root, make()), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, seed=0)
    if loader.engine != "threads":
        raise SystemExit(f"fastprep.data.DataLoader is not on the threads engine: {loader.engine_reason}")
    return loader


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
    ap.add_argument("--pipelines", default="train,val", help=f"comma-separated, of {', '.join(PIPELINES)}")
    ap.add_argument("--dataloader", action="store_true", help="fastprep.data.DataLoader instead of make_loader")
    args = ap.parse_args()
    names = args.pipelines.split(",")
    unknown = [n for n in names if n not in PIPELINES]
    if unknown:
        ap.error(f"unknown pipelines {unknown}; choose from {list(PIPELINES)}")
    root = image_folder(args.photos, args.root)
    print(f"{describe()}; {args.photos} as an ImageFolder ({root}), batch {args.batch_size}, "
          f"{args.workers} workers, {args.batches} batches per run, median of {args.runs} runs")
    kind = "DataLoader" if args.dataloader else "make_loader"
    for name in names:
        make = PIPELINES[name]
        torch_rates, fp_rates, ratios = [], [], []
        fp = fastprep_loader(root, make, args)
        for _ in range(args.runs):
            ref = torch.utils.data.DataLoader(ImageFolder(root, make()), batch_size=args.batch_size, shuffle=True,
                                              num_workers=args.workers)
            a, b = rate(ref, args.batches), rate(fp, args.batches)
            torch_rates.append(a)
            fp_rates.append(b)
            ratios.append(b / a)
        print(f"{name:5s}  torch DataLoader(ImageFolder) {statistics.median(torch_rates):7.1f}/s   fastprep "
              f"{kind}(threads) {statistics.median(fp_rates):7.1f}/s   ratio {statistics.median(ratios):.2f}x "
              f"(runs: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
