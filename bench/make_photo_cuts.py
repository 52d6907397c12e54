"""Make ImageNet-like JPEG cuts of real photographs, for the loader and recipe benchmarks.

Each cut is a random crop of one of the photos (aspect ratio between 3:4 and 4:3, at least
a third of the shorter side), resized with Pillow's Lanczos filter so that its long side is
``--long-side`` pixels, and saved as a baseline JPEG at a random quality in ``--quality``
with 4:2:0 chroma (Pillow's default), as most of ImageNet is. Photos are used in turn, so
every photo contributes about as many cuts. The choice of crops and qualities is seeded:
the same photos and arguments give the same files.

    python bench/make_photo_cuts.py PHOTOS_DIR CUTS_DIR --count 600 --long-side 500
"""

from __future__ import annotations

import argparse
import os
import random
import sys

from PIL import Image


def photo_paths(folder: str) -> list[str]:
    """The JPEG photos in ``folder``, sorted by name."""
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith((".jpg", ".jpeg")))
    return [os.path.join(folder, n) for n in names]


def random_box(rng: random.Random, width: int, height: int) -> tuple[int, int, int, int]:
    """A crop box ``(left, top, right, bottom)`` with aspect ratio in [3/4, 4/3] and a short side
    of at least a third of the photo's."""
    short = min(width, height)
    for _ in range(100):
        ratio = rng.uniform(3 / 4, 4 / 3)
        h = rng.randint(max(short // 3, 16), short)
        w = int(round(h * ratio))
        if w <= width and h <= height:
            left, top = rng.randint(0, width - w), rng.randint(0, height - h)
            return left, top, left + w, top + h
    return 0, 0, short, short


def make_cuts(photos: list[str], out: str, count: int, long_side: int, quality: tuple[int, int],
              seed: int) -> list[str]:
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    written = []
    for k in range(count):
        path = photos[k % len(photos)]
        with Image.open(path) as im:
            im = im.convert("RGB")
            box = random_box(rng, *im.size)
            crop = im.crop(box)
        w, h = crop.size
        scale = long_side / max(w, h)
        crop = crop.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.LANCZOS)
        name = os.path.join(out, f"{k:05d}_{os.path.splitext(os.path.basename(path))[0]}.jpg")
        crop.save(name, quality=rng.randint(*quality))
        written.append(name)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("photos", help="folder of JPEG photographs")
    p.add_argument("out", help="folder to write the cuts to (created)")
    p.add_argument("--count", type=int, default=600, help="cuts to write (default 600)")
    p.add_argument("--long-side", type=int, default=500, help="long side of each cut in pixels (default 500)")
    p.add_argument("--quality", type=int, nargs=2, default=(85, 95), metavar=("MIN", "MAX"),
                   help="JPEG quality range (default 85 95)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    photos = photo_paths(args.photos)
    if not photos:
        print(f"make_photo_cuts: no .jpg/.jpeg files in {args.photos}", file=sys.stderr)
        return 2
    written = make_cuts(photos, args.out, args.count, args.long_side, tuple(args.quality), args.seed)
    print(f"{len(written)} cuts of {len(photos)} photos in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
