"""Native geometry, blur and sharpness kernels and the auto-augments, against torchvision v2,
one thread, 3x224x224 uint8 images (centre crops of real photos when --photos is given).

* Kernels: torchvision's functional vs ``torch.ops.fastprep.apply_pixel_kernel`` (variant 1:
  the ATen reference; 2: the fast kernel where there is one). apply_pixel_kernel itself
  clones the image and dispatches; that overhead is measured with a kernel that returns at
  once (adjust_saturation of a 1-channel image) plus the extra cost of cloning 3 channels,
  and the table also gives the kernel times net of it.
* Auto-augments per sample: torchvision's transform(img) vs the native path
  (``native_draws`` for the sample's key + ``apply_pixel_steps``, which also clones), over
  the same keys (each key draws its own ops), mean and median per sample.

Methods alternate in blocks of 25 calls so machine noise hits all alike; medians of --runs
calls per method.

    python bench/bench_native_augment.py [--runs 400] [--samples 600] [--photos /path/to/jpegs]
"""

import argparse
import functools
import glob
import math
import os
import statistics
import time

import numpy as np
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

import fastprep.io as fio
from fastprep._platform import describe
from fastprep.bench.synthetic import photo_like
from fastprep.transforms import _compile  # noqa: F401  (registers the native sides)
from fastprep.transforms import _native as N

BLOCK = 25


def load_images(photos: str | None, count: int) -> list[torch.Tensor]:
    """``count`` 3x224x224 uint8 images: centre crops of the photos, or synthetic ones."""
    if photos:
        files = sorted(glob.glob(os.path.join(photos, "*.jpg")))[:count]
        out = []
        for path in files:
            img = fio.decode_jpeg(open(path, "rb").read())
            out.append(F.center_crop(F.resize(img, 256, antialias=True), [224, 224]).contiguous())
        if out:
            return out
    return [torch.from_numpy(photo_like(224, 224, seed=k)).permute(2, 0, 1).contiguous() for k in range(count)]


def timed(fns: dict, runs: int) -> dict:
    """Median seconds per call of each function, alternating in blocks."""
    times: dict = {name: [] for name in fns}
    for fn in fns.values():  # warm-up (first-use proofs, oneDNN primitives, allocations): 10 calls and 0.3 s
        start, calls = time.perf_counter(), 0
        while calls < 10 or time.perf_counter() - start < 0.3:
            fn()
            calls += 1
    while min(len(t) for t in times.values()) < runs:
        for name, fn in fns.items():
            for _ in range(min(BLOCK, runs)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def kernel_cases(img: torch.Tensor) -> list[tuple[str, object, str, list[int], list[float]]]:
    h, w = img.shape[-2:]
    shear = math.degrees(math.atan(0.3))
    shear_m = _get_inverse_affine_matrix([0.0 - w * 0.5, 0.0 - h * 0.5], 0.0, [0.0, 0.0], 1.0, [shear, 0.0])
    trans_m = _get_inverse_affine_matrix([0.0, 0.0], 0.0, [30.0, 0.0], 1.0, [0.0, 0.0])
    rot_m = _get_inverse_affine_matrix([0.0, 0.0], -13.5, [0.0, 0.0], 1.0, [0.0, 0.0])
    bil = F.InterpolationMode.BILINEAR
    return [
        ("adjust_sharpness(2.0)", lambda: F.adjust_sharpness(img, 2.0), "adjust_sharpness", [], [2.0]),
        *[(f"gaussian_blur({k}, {sigma})", functools.partial(F.gaussian_blur, img, [k, k], [sigma, sigma]),
           "gaussian_blur", [k, k], [sigma, sigma]) for k, sigma in ((3, 1.0), (9, 1.5), (23, 1.05))],
        ("affine ShearX nearest", lambda: F.affine(img, 0.0, [0, 0], 1.0, [shear, 0.0], center=[0, 0]), "affine",
         [0, 0, 0], list(shear_m)),
        ("affine TranslateX bilinear fill", lambda: F.affine(img, 0.0, [30, 0], 1.0, [0.0, 0.0], interpolation=bil,
                                                             fill=128), "affine", [1, 1, 1], list(trans_m) + [128.0]),
        ("rotate(13.5) bilinear", lambda: F.rotate(img, 13.5, interpolation=bil), "affine", [1, 0, 0], list(rot_m)),
        ("rotate(90) square", lambda: F.rotate(img, 90.0), "rotate90", [1], []),
    ]


def bench_kernels(img: torch.Tensor, runs: int) -> None:
    gray = img[:1].clone()
    apply = torch.ops.fastprep.apply_pixel_kernel
    base = timed({"noop": lambda: apply(gray, "adjust_saturation", [], [0.5], 0),
                  "clone3": lambda: img.clone(), "clone1": lambda: gray.clone()}, runs)
    overhead = base["noop"] + base["clone3"] - base["clone1"]
    print(f"apply_pixel_kernel overhead (1-channel no-op kernel + 3-channel clone): {overhead * 1e6:.1f} us")
    print(f"{'kernel (3x224x224 uint8)':34s} {'torchvision':>12s} {'reference':>12s} {'fast':>12s} "
          f"{'ratio ref':>10s} {'ratio fast':>10s} {'net fast':>10s}")
    for label, tv_fn, name, ints, floats in kernel_cases(img):
        status = torch.ops.fastprep.pixel_kernel_info(name).split("\t")[1]
        fns = {"tv": tv_fn, "ref": functools.partial(apply, img, name, ints, floats, 1)}
        if status == "fast":
            fns["fast"] = functools.partial(apply, img, name, ints, floats, 2)
        t = timed(fns, runs)
        fast = t.get("fast")
        fast_s = f"{fast * 1e6:10.1f}us" if fast else f"{'-':>12s}"
        ratio_fast = f"{t['tv'] / fast:9.2f}x" if fast else f"{'-':>10s}"
        net = f"{t['tv'] / max(fast - overhead, 1e-9):9.2f}x" if fast else f"{'-':>10s}"
        print(f"{label:34s} {t['tv'] * 1e6:10.1f}us {t['ref'] * 1e6:10.1f}us {fast_s} "
              f"{t['tv'] / t['ref']:9.2f}x {ratio_fast} {net}")


def time_per_key(transform, prog, images: list[torch.Tensor], samples: int, runs: int) -> tuple[list, list]:
    """Per key, the median time of torchvision's transform and of the native path."""

    def run_tv(key, img):
        torch.manual_seed(key)
        return transform(img)

    def run_native(key, img):
        steps, extras = torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, key,
                                                        *img.shape)
        return torch.ops.fastprep.apply_pixel_steps(img, steps, extras)

    per_key: list[dict] = [{"tv": [], "native": []} for _ in range(samples)]
    for run in range(runs + 1):  # the first round warms up
        for key in range(samples):
            img = images[key % len(images)]
            for name, fn in (("tv", run_tv), ("native", run_native))[:: 1 if key % 2 else -1]:
                t0 = time.perf_counter()
                fn(key, img)
                if run:
                    per_key[key][name].append(time.perf_counter() - t0)
    return ([statistics.median(k["tv"]) for k in per_key], [statistics.median(k["native"]) for k in per_key])


def bench_auto_augments(images: list[torch.Tensor], samples: int, runs_per_key: int) -> None:
    transforms = {
        "TrivialAugmentWide": v2.TrivialAugmentWide(),
        "RandAugment": v2.RandAugment(),
        "AutoAugment(IMAGENET)": v2.AutoAugment(),
        "TrivialAugmentWide(bilinear, fill)": v2.TrivialAugmentWide(interpolation="bilinear", fill=128),
    }
    print(f"\n{'per sample (3x224x224)':36s} {'torchvision':>12s} {'native':>12s} {'ratio':>8s}   "
          f"(mean over {samples} keys; median of the per-key ratios)")
    for label, t in transforms.items():
        try:
            roots = [N.to_native(t)]
        except N.Unsupported as e:
            print(f"{label:36s} not native here: {e}")
            continue
        tv_times, native_times = time_per_key(t, N.build_program(roots), images, samples, runs_per_key)
        ratios = [a / b for a, b in zip(tv_times, native_times)]
        print(f"{label:36s} {np.mean(tv_times) * 1e6:10.1f}us {np.mean(native_times) * 1e6:10.1f}us "
              f"{np.mean(tv_times) / np.mean(native_times):7.2f}x   median per-key {statistics.median(ratios):.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="calls per kernel and method (median)")
    parser.add_argument("--samples", type=int, default=600, help="keys per auto-augment")
    parser.add_argument("--runs-per-key", type=int, default=3, help="calls per key and method (median)")
    parser.add_argument("--photos", default=None, help="folder of JPEGs to crop the images from")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(describe())
    print(f"torch {torch.__version__}, one thread; median of {args.runs} calls per kernel")
    images = load_images(args.photos, 16)
    bench_kernels(images[0], args.runs)
    bench_auto_augments(images, args.samples, args.runs_per_key)


if __name__ == "__main__":
    main()
