"""Pixel kernels (csrc/ops/pixel_kernel.h), one thread: torchvision v2's functional against
``torch.ops.fastprep.apply_pixel_kernel``'s ATen reference (variant 1) and fast kernel (variant 2),
on one image (default 224x224, 3 channels, uint8; erase also float32).

``apply_pixel_kernel`` copies the image and dispatches by name; its own cost is measured on the
same image with an erase of an empty rectangle (a kernel that returns at once), and the "net"
columns subtract it. The four calls of a case (torchvision, reference, fast, empty erase) are
timed in blocks taken in turn (10 rounds), so that the load of the machine falls on all alike. Every case is
checked bit-equal with torchvision before it is timed. Each time is the median of ``--runs``
calls (after 20 warm-up calls).

    python bench/bench_pixel_kernels.py [--runs 300] [--size 224x224] [--kernels posterize,erase]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torchvision.transforms.v2.functional as F

# the checkout's fastprep (its kernels), not an installed one
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fastprep._platform as platform_info  # noqa: E402
from fastprep import _ops  # noqa: E402,F401  (registers torch.ops.fastprep.*)


def _cases(img: torch.Tensor) -> dict[str, tuple[Callable, torch.Tensor, list[int], list[float], list]]:
    """name -> (torchvision call, image, ints, floats, extras)."""
    h, w = img.shape[-2:]
    i, j, eh, ew = h // 5, w // 4, h // 2, w // 3  # a rectangle of 1/6 of the image
    value = torch.tensor([0.5, -1.2, 0.3])[:, None, None]
    noise = torch.empty(3, eh, ew).normal_(generator=torch.Generator().manual_seed(0))
    flt = (img.float() / 255 - 0.45) / 0.225
    return {
        "posterize": (lambda x: F.posterize(x, 4), img, [4], [], []),
        "solarize": (lambda x: F.solarize(x, 128.0), img, [0], [128.0], []),
        "autocontrast": (F.autocontrast, img, [], [], []),
        "equalize": (F.equalize, img, [], [], []),
        "invert": (F.invert, img, [], [], []),
        "erase": (lambda x: F.erase(x, i, j, eh, ew, value), img, [i, j, eh, ew, -1, 3], value.flatten().tolist(), []),
        "erase(noise)": (lambda x: F.erase(x, i, j, eh, ew, noise), img, [i, j, eh, ew, 0, 0], [], [noise]),
        "erase(float32)": (lambda x: F.erase(x, i, j, eh, ew, value), flt, [i, j, eh, ew, -1, 3],
                           value.flatten().tolist(), []),
        "erase(float32, noise)": (lambda x: F.erase(x, i, j, eh, ew, noise), flt, [i, j, eh, ew, 0, 0], [], [noise]),
    }


def _medians_us(fns: list[Callable[[], object]], runs: int, rounds: int = 10) -> list[float]:
    """Median time of each of ``fns``, in microseconds, over ``runs`` calls each: ``rounds``
    rounds of a block of calls of each function in turn (so that a change of load on the
    machine falls on all of them alike, while each block runs in its own steady state)."""
    for fn in fns:
        for _ in range(20):
            fn()
    block = max(1, runs // rounds)
    times: list[list[int]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, t in zip(fns, times):
            for _ in range(block):
                t0 = time.perf_counter_ns()
                fn()
                t.append(time.perf_counter_ns() - t0)
    return [statistics.median(t) / 1000 for t in times]


def _measure(tv: Callable, x: torch.Tensor, kernel: str, ints: list[int], floats: list[float], extras: list,
             runs: int) -> list[float]:
    """Medians of torchvision, the reference, the fast kernel and an empty erase (the op's own cost)."""
    apply = torch.ops.fastprep.apply_pixel_kernel
    return _medians_us([
        lambda: tv(x),
        lambda: apply(x, kernel, ints, floats, 1, extras),
        lambda: apply(x, kernel, ints, floats, 2, extras),
        lambda: apply(x, "erase", [0, 0, 0, 0, -1, 1], [0.0], 2, []),
    ], runs)


def _kernel(name: str) -> str:
    return name.split("(")[0]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="timed calls per measurement (median)")
    parser.add_argument("--size", default="224x224", help="HxW of the 3-channel image")
    parser.add_argument("--kernels", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args(argv)
    h, w = (int(v) for v in args.size.split("x"))
    torch.set_num_threads(1)
    img = torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    cases = _cases(img)
    names = [n for n in args.kernels.split(",") if n] or list(cases)
    apply = torch.ops.fastprep.apply_pixel_kernel

    print(platform_info.describe())
    print(f"torch {torch.__version__}, 1 thread, {h}x{w}x3, median of {args.runs} calls in 10 interleaved rounds; "
          "net: less apply_pixel_kernel's own cost (copy + dispatch: an empty erase on the same image)")
    print(f"{'kernel':24s} {'torchvision':>11s} {'reference':>10s} {'fast':>8s} {'overhead':>9s} {'fast net':>9s} "
          f"{'tv/fast':>8s} {'tv/net':>7s}  status")
    results = {}
    for name in names:
        tv, x, ints, floats, extras = cases[name]
        want = tv(x)
        for variant in (1, 2):
            got = apply(x, _kernel(name), ints, floats, variant, extras)
            if not torch.equal(got, want):
                raise AssertionError(f"{name}: variant {variant} differs from torchvision")
        t_tv, t_ref, t_fast, overhead = _measure(tv, x, _kernel(name), ints, floats, extras, args.runs)
        net = max(t_fast - overhead, 0.0)
        status = torch.ops.fastprep.pixel_kernel_info(_kernel(name)).split("\t")[1]
        results[name] = {"torchvision_us": t_tv, "reference_us": t_ref, "fast_us": t_fast, "overhead_us": overhead,
                         "fast_net_us": net, "status": status}
        net_ratio = f"{t_tv / net:7.1f}" if net > 0 else "      -"
        print(f"{name:24s} {t_tv:11.1f} {t_ref:10.1f} {t_fast:8.1f} {overhead:9.1f} {net:9.1f} {t_tv / t_fast:8.1f} "
              f"{net_ratio}  "
              f"{status}")
    return {"results": results}


if __name__ == "__main__":
    main()
