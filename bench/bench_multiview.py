"""Multi-crop geometry per image, one thread: DINO's 2 x 224 + 8 x 96 views (or SimCLR's 2 x 224).

Methods, on the same files, in blocks that take turns (median ms per image over --reps blocks
of --batch images):

* ``torchvision``: ``torchvision.io.decode_jpeg`` of the file, then per view
  ``RandomResizedCrop(size, scale) + RandomHorizontalFlip()`` (v2, uint8);
* ``fastprep MultiView``: ``MultiView`` of ``DecodeRandomResizedCrop(size, scale, flip_p=0.5)``
  views, planned and run as the threads engine does (``MultiViewPipeline.plan_batch`` +
  ``run``, one native thread): default settings (DCT scaling) and exact (``dct_scaling=False``);
* ``fastprep, one decode per view``: the same views called one by one on the file (what a
  pipeline of separate decode transforms costs: a decode per view);
* ``fastprep MultiView(v2 views)(data), per sample``: the torchvision views unchanged in a
  ``MultiView``, called per sample (the processes engine's path): the loader's union plan for
  a batch of one, its draws on the default generator, on the calling thread;
* ``DALI CPU``: one ``fn.decoders.image`` per file, then per view ``fn.random_resized_crop`` and
  ``fn.flip`` (DALI's documented multi-crop recipe), one CPU thread, when DALI is installed.

    python bench/bench_multiview.py --photos CUTS_DIR [--views dino|simclr] [--batch 32] [--reps 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch
from torchvision.transforms import v2

from fastprep import _platform
from fastprep.data.native import MultiViewPipeline
from fastprep.transforms import DecodeRandomResizedCrop, MultiView

VIEWS = {"dino": [(224, (0.4, 1.0))] * 2 + [(96, (0.05, 0.4))] * 8, "simclr": [(224, (0.08, 1.0))] * 2}


def load_files(folder: str, count: int) -> list[bytes]:
    names = sorted(n for n in os.listdir(folder) if n.lower().endswith((".jpg", ".jpeg")))[:count]
    if not names:
        raise SystemExit(f"bench_multiview: no JPEG files in {folder}")
    out = []
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            out.append(f.read())
    return out


def torchvision_method(spec, datas):
    import torchvision.io as tvio

    views = [v2.Compose([v2.RandomResizedCrop(size, scale=scale), v2.RandomHorizontalFlip()]) for size, scale in spec]

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoder notice
            for data in datas:
                image = tvio.decode_jpeg(data, mode=tvio.ImageReadMode.RGB)
                [view(image) for view in views]
    return run


def multiview_method(spec, datas, dct_scaling: bool):
    mv = MultiView([DecodeRandomResizedCrop(size, scale=scale, flip_p=0.5, dct_scaling=dct_scaling)
                    for size, scale in spec])
    pipe = MultiViewPipeline.compile(mv)
    outs = [torch.empty((len(datas), c, *size), dtype=torch.uint8) for c, size in zip(pipe.channels, pipe.size)]
    keys = iter(range(1 << 62))

    def run():
        routes = pipe.plan_batch(datas, [next(keys) for _ in datas])
        pipe.run(datas, [value for _, value in routes], outs, num_threads=1)
    return run


def per_view_method(spec, datas):
    views = [DecodeRandomResizedCrop(size, scale=scale, flip_p=0.5) for size, scale in spec]

    def run():
        for data in datas:
            [view(data) for view in views]
    return run


def per_sample_v2_method(spec, datas):
    views = [v2.Compose([v2.RandomResizedCrop(size, scale=scale), v2.RandomHorizontalFlip()]) for size, scale in spec]
    mv = MultiView(views)

    def run():
        for data in datas:
            mv(data)
    return run


def dali_method(spec, raw: list[bytes]):
    try:
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def
    except ImportError:
        return None
    encoded = [np.frombuffer(data, np.uint8) for data in raw]

    @pipeline_def(batch_size=len(raw), num_threads=1, device_id=None, prefetch_queue_depth=1, exec_async=False,
                  exec_pipelined=False)
    def pipe():
        images = fn.decoders.image(fn.external_source(source=lambda: encoded, dtype=types.UINT8), device="cpu",
                                   output_type=types.RGB)
        outs = []
        for size, scale in spec:
            crop = fn.random_resized_crop(images, size=[size, size], random_area=list(scale))
            outs.append(fn.flip(crop, horizontal=fn.random.coin_flip()))
        return tuple(outs)

    p = pipe()
    p.build()
    return p.run


def timed(methods: dict, reps: int, batch: int) -> dict:
    names = list(methods)
    for fn in methods.values():  # warm-up: first-use proofs, allocations, DALI's setup
        fn()
    times: dict = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            t0 = time.perf_counter()
            methods[name]()
            times[name].append((time.perf_counter() - t0) / batch * 1e3)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", required=True, help="folder of JPEGs (e.g. bench/make_photo_cuts.py's cuts)")
    p.add_argument("--views", choices=sorted(VIEWS), default="dino")
    p.add_argument("--batch", type=int, default=32, help="images per block (default 32)")
    p.add_argument("--reps", type=int, default=15, help="blocks per method (default 15)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    raw = load_files(args.photos, args.batch)
    datas = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in raw]
    spec = VIEWS[args.views]
    methods = {"torchvision decode_jpeg + v2 per view": torchvision_method(spec, datas),
               "fastprep MultiView, default (DCT scaling)": multiview_method(spec, datas, True),
               "fastprep MultiView, exact (dct_scaling=False)": multiview_method(spec, datas, False),
               "fastprep, one decode per view": per_view_method(spec, datas),
               "fastprep MultiView(v2 views)(data), per sample": per_sample_v2_method(spec, datas)}
    dali = dali_method(spec, raw)
    if dali is not None:
        methods["DALI CPU: one decode + random_resized_crop per view"] = dali
    print(_platform.describe())
    print(f"{args.views}: {len(spec)} views, {len(raw)} images from {args.photos}, {args.reps} blocks, one thread, "
          f"load average {os.getloadavg()[0]:.1f}")
    med = timed(methods, args.reps, len(raw))
    base = med["torchvision decode_jpeg + v2 per view"]
    print(f"{'method':55s} {'ms/image':>9s} {'vs torchvision':>15s}")
    for name, ms in med.items():
        print(f"{name:55s} {ms:9.2f} {ms / base:14.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": _platform.describe(), "views": args.views, "images": len(raw), "reps": args.reps,
                       "ms_per_image": med}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
