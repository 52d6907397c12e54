"""A Hugging Face ``datasets`` image dataset as its users load it -- ``save_to_disk`` /
``load_from_disk`` (memory-mapped Arrow, the JPEG bytes in an ``Image()`` column) and
``with_transform`` running pytorch/examples' ImageNet train pipeline (RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor, Normalize) the way Hugging Face's image-classification example
writes it -- through fastprep.data.DataLoader (the image bytes read from Arrow, the transform
traced and replayed on the threads engine) against torch.utils.data.DataLoader, the same batch
size and workers; samples/s and their ratio, measured in one run.

    python bench/bench_hf.py --photos /work/cuts --runs 3

``--photos``: a folder of JPEGs (e.g. the real-photo cuts of ``bench/make_photo_cuts.py``);
without it, synthetic photo-like JPEGs. Loaders alternate run by run; the median of ``--runs``
epochs is reported per loader, with the CPU and the load average. Needs ``pip install datasets``.
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import platform
import sys
import tempfile

import torch
import torchvision.transforms as T
from PIL import Image

import fastprep.data as fd
from fastprep._platform import describe
from fastprep.bench.synthetic import photo_like

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_multicrop import compare  # noqa: E402  (the loop both scripts time)

TRAIN = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                   T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])


def preprocess(batch):
    """Hugging Face's image-classification example, with pytorch/examples' train pipeline."""
    batch["pixel_values"] = [TRAIN(image.convert("RGB")) for image in batch["image"]]
    del batch["image"]
    return batch


def _cpu() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ()
    return f"{describe().removeprefix('CPU: ')}, load {' '.join(f'{x:.1f}' for x in load)}"


def _images(photos: str | None, count: int) -> list[bytes]:
    if photos:
        files = sorted(glob.glob(os.path.join(photos, "**", "*.jpg"), recursive=True))[:count]
        out = []
        for path in files:
            with open(path, "rb") as f:
                out.append(f.read())
        return out
    out = []
    for k in range(count):
        buf = io.BytesIO()
        Image.fromarray(photo_like(375, 500, k)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", help="a folder of JPEGs (default: synthetic)")
    parser.add_argument("--count", type=int, default=600, help="images in the dataset")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="24 synthetic images, one run")
    args = parser.parse_args(argv)
    import datasets

    if args.quick:
        args.runs, args.count, args.photos, args.batch_size = 1, 24, None, 8
    with tempfile.TemporaryDirectory() as tmp:
        images = _images(args.photos, args.count)
        features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=4)})
        datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in images],
                                    "label": [k % 4 for k in range(len(images))]},
                                   features=features).save_to_disk(os.path.join(tmp, "ds"))
        dataset = datasets.load_from_disk(os.path.join(tmp, "ds")).with_transform(preprocess)
        print(f"CPU: {_cpu()}; Python {platform.python_version()}, torch {torch.__version__}, "
              f"datasets {datasets.__version__}")
        print(f"load_from_disk dataset of {len(dataset)} JPEGs from {args.photos or '(synthetic)'}, with_transform("
              f"pytorch/examples train), batch {args.batch_size}, num_workers={args.workers}, shuffle, "
              f"{args.runs} runs per loader (alternating), median samples/s")
        fast = fd.DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, seed=0)
        ref = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                          num_workers=args.workers, persistent_workers=args.workers > 0)
        return compare(fast, ref, limit=len(dataset), warmup=args.batch_size * 2, runs=args.runs,
                       count=lambda batch: batch["label"].shape[0])


if __name__ == "__main__":
    main(sys.argv[1:])
