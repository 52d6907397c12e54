"""fastprep::resize_aa against torch's uint8 antialiased bilinear kernel
(aten._upsample_bilinear2d_aa, what v2.Resize runs), and against its bicubic one
(aten._upsample_bicubic2d_aa, v2.Resize(interpolation=BICUBIC)), one thread, same
channels-last input, median of many calls, each compiled variant of resize_aa (baseline, AVX2).

    python bench/bench_resize.py [--calls N]
"""

import argparse
import functools
import statistics
import time

import torch

import fastprep._ops  # noqa: F401
from fastprep import _C
from fastprep._platform import describe

BICUBIC_CASES = [
    ("bicubic 300x320 -> 224x224, RGB", 300, 320, 3, 224, 224),
    ("bicubic 500x375 -> 96x96, RGB", 500, 375, 3, 96, 96),
    ("bicubic 150x160 -> 224x224, RGB (up)", 150, 160, 3, 224, 224),
]

CASES = [
    ("300x320 -> 224x224, RGB", 300, 320, 3, 224, 224),
    ("400x500 -> 224x224, RGB", 400, 500, 3, 224, 224),
    ("150x160 -> 224x224, RGB (upscale)", 150, 160, 3, 224, 224),
    ("300x320 -> 224x224, RGBA", 300, 320, 4, 224, 224),
    ("300x320 -> 224x224, gray", 300, 320, 1, 224, 224),
]


def _median_us(f, calls):
    for _ in range(20):
        f()
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def _image(h, w, c):
    img = torch.randint(0, 256, (h, w, c), dtype=torch.uint8).permute(2, 0, 1)
    return img, img.as_strided((1, c, h, w), (c * h * w + 1,) + tuple(img.stride()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400)
    args = ap.parse_args()
    torch.set_num_threads(1)
    op = torch.ops.fastprep.resize_aa
    print(describe())
    print(f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), 1 thread, "
          f"median of {args.calls} calls, microseconds")
    best = _C.native_isa(-1)
    for level in range(best + 1):
        _C.native_isa(level)
        name = ("baseline", "avx2")[level]
        for label, h, w, c, oh, ow in CASES:
            img, x = _image(h, w, c)
            tt = _median_us(functools.partial(torch.ops.aten._upsample_bilinear2d_aa, x, [oh, ow], False, None, None),
                            args.calls)
            to = _median_us(functools.partial(op, img, (oh, ow), (0, 0, oh, ow), (h, w), (0, 0), (0.0, 0.0), True,
                                              False), args.calls)
            print(f"{name:8s} {label:36s} torch {tt:7.1f}  resize_aa {to:7.1f}  torch/ours {tt / to:5.2f}")
        for label, h, w, c, oh, ow in BICUBIC_CASES:
            img, x = _image(h, w, c)
            tt = _median_us(functools.partial(torch.ops.aten._upsample_bicubic2d_aa, x, [oh, ow], False, None, None),
                            args.calls)
            to = _median_us(functools.partial(op, img, (oh, ow), (0, 0, oh, ow), (h, w), (0, 0), (0.0, 0.0), True,
                                              False, 1), args.calls)
            print(f"{name:8s} {label:36s} torch {tt:7.1f}  resize_aa {to:7.1f}  torch/ours {tt / to:5.2f}")
        # eval: a 375x500 image resized to 256x341, centre 224x224 crop. torch resizes the
        # whole image and crops; resize_aa computes the crop from the window its filter reads.
        img, x = _image(375, 500, 3)
        win = img[:, 10:365, 50:450]
        tt = _median_us(lambda x=x: torch.ops.aten._upsample_bilinear2d_aa(x, [256, 341], False, None, None)
                        [:, :, 16:240, 58:282], args.calls)
        to = _median_us(functools.partial(op, win, (256, 341), (16, 58, 224, 224), (375, 500), (10, 50), (0.0, 0.0),
                                          True, False), args.calls)
        print(f"{name:8s} {'eval 375x500 -> 256x341, crop 224':36s} torch {tt:7.1f}  resize_aa {to:7.1f}  "
              f"torch/ours {tt / to:5.2f}")
    _C.native_isa(best)


if __name__ == "__main__":
    main()
