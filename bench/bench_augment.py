"""The native augmentations against torchvision v2, one thread: every pixel kernel against
torchvision's functional, and the per-sample transforms (draws + steps) against the v2
transform, on 3xSxS uint8 crops (224: the ImageNet size; 96: the SSL local-view size).

Kernels (``torch.ops.fastprep.pixel_kernel_names()``, each case with representative parameters),
per size:

* ``torchvision``: the functional (``F.adjust_hue(img, 0.1)``, ...), which allocates its output;
  for a PIL twin (``pil_*``), the functional on the PIL image of the same pixels (Pillow);
* ``reference`` / ``fast``: ``apply_pixel_kernel(img, name, ..., variant)`` (1: the ATen
  reference, 2: the fast kernel where there is one), less ``apply_pixel_kernel``'s own cost
  (copy + dispatch: the same call of a kernel that returns at once, posterize with 8 bits, or
  an empty erase on float images), measured in the same rounds;
* ``per step``: the kernel as the engine runs it, in place: ``apply_pixel_steps`` on a chain of
  ``k`` identical steps and on no step (one copy each), ``(t(k) - t(0)) / k``. ``k`` is
  ``--chain`` for kernels under ``--chain-budget`` microseconds, fewer for slower ones (1 for a
  kernel whose step changes the channel count). The registry's choice runs (fast where proven).
  ``ns/px`` gives the torchvision (or Pillow) call and the per-step time per pixel (all its
  channels), the figure that carries over between sizes.

Per-sample transforms: ``torchvision``: ``torch.manual_seed(key); t(img)``; ``native``:
``native_draws`` for the key + ``apply_pixel_steps`` (which copies the image once; ``copy``
gives that copy's cost, which the batch op does not pay: it runs the steps in place; ``draws``
the ``native_draws`` call alone, which the batch op makes in its C++ planner), over the same
keys, each key's median of ``--runs-per-key`` calls, methods alternating per key; the table
gives the mean over the keys (the expected cost per sample).

Every kernel case and transform is checked bit-equal with torchvision before it is timed (the
separable blur of fast mode, which is not torchvision's arithmetic: within one level).
Methods alternate in ``--rounds`` blocks so that a change of load falls on all alike; each time is
a median of ``--runs`` calls after a warm-up. Prints the CPU (``fastprep._platform.describe()``)
and the load average; ``--json`` writes every number.

    python bench/bench_augment.py [--photos /work/cuts500] [--sizes 224,96] [--runs 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFilter
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

# the checkout's fastprep (its kernels), not an installed one
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fastprep.io as fio  # noqa: E402
from fastprep._platform import describe  # noqa: E402
from fastprep.bench.synthetic import photo_like  # noqa: E402
from fastprep.transforms import _compile  # noqa: E402,F401  (registers the native sides)
from fastprep.transforms import _native as N  # noqa: E402

NUM_IMAGES = 16
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def load_images(photos: str | None, size: int, count: int = NUM_IMAGES) -> list[torch.Tensor]:
    """``count`` 3 x size x size uint8 crops: each photo resized (antialiased) so that its short
    side is size * 8 / 7, then centre-cropped; synthetic photo-like images without ``photos``."""
    if photos:
        files = sorted(f for f in glob.glob(os.path.join(photos, "*")) if f.lower().endswith((".jpg", ".jpeg")))
        step = max(1, len(files) // count)
        out = []
        for path in files[::step][:count]:
            with open(path, "rb") as f:
                img = fio.decode_jpeg(f.read())
            if img.shape[0] != 3:
                continue
            resized = F.resize(img, round(size * 8 / 7), antialias=True)
            out.append(F.center_crop(resized, [size, size]).contiguous())
        if out:
            return out
    return [torch.from_numpy(photo_like(size, size, seed=k)).permute(2, 0, 1).contiguous() for k in range(count)]


def normalized(img: torch.Tensor) -> torch.Tensor:
    """The float32 image the engine erases after ToDtype + Normalize."""
    return F.normalize(img.float() / 255, MEAN, STD).contiguous()


def medians_us(fns: dict[str, Callable[[int], object]], runs: int, rounds: int, warmup: float) -> dict[str, float]:
    """Median microseconds per call of each ``fn(i)`` (``i``: the call's index, which picks the
    image), over ``runs`` calls in ``rounds`` blocks taken in turn after a warm-up (at least 3
    calls and ``warmup`` seconds per function: first-use proofs, allocator and oneDNN caches)."""
    for fn in fns.values():
        start, calls = time.perf_counter(), 0
        while calls < 3 or time.perf_counter() - start < warmup:
            fn(calls)
            calls += 1
    block = max(1, runs // rounds)
    times: dict[str, list[int]] = {name: [] for name in fns}
    for r in range(max(1, min(rounds, runs))):
        for name, fn in fns.items():
            for b in range(block):
                t0 = time.perf_counter_ns()
                fn(r * block + b)
                times[name].append(time.perf_counter_ns() - t0)
    return {name: statistics.median(t) / 1000 for name, t in times.items()}


# ---------------------------------------------------------------------------------------------
# Kernel cases


@dataclass
class KernelCase:
    """One kernel with one parameter set, and torchvision's call that it reproduces."""

    label: str
    kernel: str
    torchvision: Callable[[torch.Tensor], torch.Tensor]
    ints: list[int] = field(default_factory=list)
    floats: list[float] = field(default_factory=list)
    dtype: str = "uint8"  # or "float": the image after ToDtype + Normalize
    noise: bool = False  # erase: the step's noise, a [3, h, w] normal_ draw, in the extras
    table: bool = False  # pil_point: the step's table (_POINT_TABLE, 256 entries a band), in the extras
    keeps_shape: bool = True  # False: a step changes the channel count (chains of 1 step)
    max_diff: int = 0  # fast mode's kernels: the largest difference from torchvision allowed (0: its bits)
    pil: bool = False  # a PIL twin: ``torchvision`` takes and returns PIL images (Pillow's arithmetic)


def _pil_cases() -> list[KernelCase]:
    """The PIL twins (csrc/ops/pil_color.cpp) against torchvision's functional on PIL images."""
    cases = [("adjust_brightness(1.3)", "adjust_brightness", lambda x: F.adjust_brightness(x, 1.3), [], [1.3]),
             ("adjust_contrast(0.7)", "adjust_contrast", lambda x: F.adjust_contrast(x, 0.7), [], [0.7]),
             ("adjust_saturation(1.2)", "adjust_saturation", lambda x: F.adjust_saturation(x, 1.2), [], [1.2]),
             ("adjust_hue(0.1)", "adjust_hue", lambda x: F.adjust_hue(x, 0.1), [], [0.1]),
             ("rgb_to_grayscale(3)", "rgb_to_grayscale", lambda x: F.rgb_to_grayscale(x, 3), [3], []),
             ("posterize(4)", "posterize", lambda x: F.posterize(x, 4), [4], []),
             ("solarize(128)", "solarize", lambda x: F.solarize(x, 128), [1], [128.0]),
             ("autocontrast", "autocontrast", F.autocontrast, [], []),
             ("equalize", "equalize", F.equalize, [], []),
             ("invert", "invert", F.invert, [], []),
             ("adjust_sharpness(2.0)", "adjust_sharpness", lambda x: F.adjust_sharpness(x, 2.0), [], [2.0])]
    geometry = [  # csrc/ops/pil_geometry.cpp: Pillow's own calls, and torchvision's affine on PIL
        ("gaussian_blur(1.3)", "gaussian_blur", lambda x: x.filter(ImageFilter.GaussianBlur(1.3)), [3], [1.3, 1.3]),
        ("transform AFFINE bilinear", "transform_affine",
         lambda x: x.transform(x.size, Image.Transform.AFFINE, _SHEAR_DATA, Image.Resampling.BILINEAR),
         [2, 1], [*_SHEAR_DATA, 0.0]),
        ("rotate(17, bicubic)", "rotate", lambda x: x.rotate(17.0, Image.Resampling.BICUBIC), [3, 1, 0],
         [17.0, 0.0, 0.0, 0.0]),
        ("affine(rotate 17, bilinear)", "affine", lambda x: F.rotate(x, 17.0, F.InterpolationMode.BILINEAR),
         [1, 0, 1, 0, 1], [0.0] * 10 + [17.0, 0.0, 0.0, 1.0, 0.0, 0.0]),
    ]
    return [*(KernelCase(f"pil {label}", f"pil_{kernel}", fn, ints, floats, pil=True)
              for label, kernel, fn, ints, floats in (*cases, *geometry)),
            KernelCase("pil point(table)", "pil_point", lambda x: x.point(_POINT_TABLE.tolist()), pil=True,
                       table=True)]


#: an Image.point table of an RGB image (a gamma curve per band, as a user's point op)
_POINT_TABLE = torch.tensor([min(255, int(255 * (v / 255) ** g + 0.5)) for g in (0.8, 1.0, 1.25) for v in range(256)],
                            dtype=torch.uint8)


#: an AFFINE transform's data (a shear of 0.3 and a shift), for ``Image.transform``
_SHEAR_DATA = [1.0, 0.3, -4.0, 0.0, 1.0, 2.5]


def _affine_cases(size: int) -> list[KernelCase]:
    shear = math.degrees(math.atan(0.3))
    shear_m = _get_inverse_affine_matrix([-size * 0.5, -size * 0.5], 0.0, [0.0, 0.0], 1.0, [shear, 0.0])
    shift = int(150 / 331 * size * 0.5)  # half of auto-augment's largest translation
    trans_m = _get_inverse_affine_matrix([0.0, 0.0], 0.0, [float(shift), 0.0], 1.0, [0.0, 0.0])
    rot_m = _get_inverse_affine_matrix([0.0, 0.0], -13.5, [0.0, 0.0], 1.0, [0.0, 0.0])
    # a RandomAffine(20, translate=(0.1, 0.1), scale=(0.9, 1.1), shear=10) draw
    full_m = _get_inverse_affine_matrix([0.0, 0.0], 12.5, [float(shift // 3), -3.0], 1.07, [-6.0, 0.0])
    bil, near = F.InterpolationMode.BILINEAR, F.InterpolationMode.NEAREST
    out = []
    for mode, code in ((near, 0), (bil, 1)):
        name = mode.value
        out += [
            KernelCase(f"affine ShearX(0.3) {name}", "affine",
                       lambda x, m=mode: F.affine(x, 0.0, [0, 0], 1.0, [shear, 0.0], interpolation=m, center=[0, 0]),
                       [code, 0, 0], list(shear_m)),
            KernelCase(f"affine TranslateX({shift}) {name} fill 128", "affine",
                       lambda x, m=mode: F.affine(x, 0.0, [shift, 0], 1.0, [0.0, 0.0], interpolation=m, fill=128),
                       [code, 1, 1], list(trans_m) + [128.0]),
            KernelCase(f"rotate(13.5) {name}", "affine", lambda x, m=mode: F.rotate(x, 13.5, interpolation=m),
                       [code, 0, 0], list(rot_m)),
            KernelCase(f"affine RandomAffine draw {name}", "affine",
                       lambda x, m=mode: F.affine(x, 12.5, [shift // 3, -3], 1.07, [-6.0, 0.0], interpolation=m),
                       [code, 0, 0], list(full_m)),
        ]
    return out


def kernel_cases(size: int) -> list[KernelCase]:
    """The cases for 3 x size x size images (rectangles and matrices scale with the size)."""
    i, j, eh, ew = size // 5, size // 4, size // 2, size // 3  # erase 1/6 of the image
    values = [0.5, -1.2, 0.3]
    value_t = torch.tensor(values)[:, None, None]
    noise = torch.empty(3, eh, ew).normal_(generator=torch.Generator().manual_seed(0))
    erase_ints = [i, j, eh, ew, 0, 3]
    return [
        KernelCase("adjust_brightness(1.3)", "adjust_brightness", lambda x: F.adjust_brightness(x, 1.3), [], [1.3]),
        KernelCase("adjust_contrast(0.7)", "adjust_contrast", lambda x: F.adjust_contrast(x, 0.7), [], [0.7]),
        KernelCase("adjust_saturation(1.2)", "adjust_saturation", lambda x: F.adjust_saturation(x, 1.2), [], [1.2]),
        KernelCase("adjust_hue(0.1)", "adjust_hue", lambda x: F.adjust_hue(x, 0.1), [], [0.1]),
        KernelCase("rgb_to_grayscale(1)", "rgb_to_grayscale", lambda x: F.rgb_to_grayscale(x, 1), [1],
                   keeps_shape=False),
        KernelCase("rgb_to_grayscale(3)", "rgb_to_grayscale", lambda x: F.rgb_to_grayscale(x, 3), [3]),
        KernelCase("posterize(4)", "posterize", lambda x: F.posterize(x, 4), [4]),
        KernelCase("solarize(128.0)", "solarize", lambda x: F.solarize(x, 128.0), [0], [128.0]),
        KernelCase("autocontrast", "autocontrast", F.autocontrast),
        KernelCase("equalize", "equalize", F.equalize),
        KernelCase("invert", "invert", F.invert),
        KernelCase("adjust_sharpness(2.0)", "adjust_sharpness", lambda x: F.adjust_sharpness(x, 2.0), [], [2.0]),
        *[KernelCase(f"gaussian_blur({k}, {sigma})", "gaussian_blur",
                     lambda x, k=k, sigma=sigma: F.gaussian_blur(x, [k, k], [sigma, sigma]), [k, k], [sigma, sigma])
          for k, sigma in ((3, 1.0), (9, 1.5), (23, 1.05))],
        # fast mode (fast_ops), not torchvision's bits: compared with torchvision's dense blur
        KernelCase("gaussian_blur_separable(23, 1.05), fast mode", "gaussian_blur_separable",
                   lambda x: F.gaussian_blur(x, [23, 23], [1.05, 1.05]), [23, 23], [1.05, 1.05], max_diff=1),
        *_affine_cases(size),
        KernelCase("rotate(90)", "rotate90", lambda x: F.rotate(x, 90.0), [1]),
        KernelCase("horizontal_flip", "horizontal_flip", F.horizontal_flip),
        KernelCase("vertical_flip", "vertical_flip", F.vertical_flip),
        KernelCase("erase uint8 (3 values)", "erase", lambda x: F.erase(x, i, j, eh, ew, value_t), erase_ints, values),
        KernelCase("erase uint8 (noise)", "erase", lambda x: F.erase(x, i, j, eh, ew, noise), [i, j, eh, ew, 0, 0],
                   noise=True),
        KernelCase("erase float32 (3 values)", "erase", lambda x: F.erase(x, i, j, eh, ew, value_t), erase_ints,
                   values, dtype="float"),
        KernelCase("erase float32 (noise)", "erase", lambda x: F.erase(x, i, j, eh, ew, noise), [i, j, eh, ew, 0, 0],
                   dtype="float", noise=True),
        *_pil_cases(),
    ]


def _case_noise(case: KernelCase, size: int) -> list[torch.Tensor]:
    if case.table:
        return [_POINT_TABLE]
    if not case.noise:
        return []
    eh, ew = size // 2, size // 3
    return [torch.empty(3, eh, ew).normal_(generator=torch.Generator().manual_seed(0))]


def step_records(kernel: str, ints: list[int], floats: list[float], extra: int, count: int,
                 shape: tuple[int, int, int]) -> torch.Tensor:
    """``count`` identical PixelStep records, as the bytes ``apply_pixel_steps`` takes."""
    steps = N.Steps(*shape)
    for _ in range(count):
        steps.emit(kernel, ints, floats, extra)
    return torch.from_numpy(steps.records().view(np.uint8).copy())


def _check_case(case: KernelCase, images: list[torch.Tensor], extras: list[torch.Tensor], extra: int,
                variants: list[int]) -> None:
    apply = torch.ops.fastprep.apply_pixel_kernel
    one = step_records(case.kernel, case.ints, case.floats, extra, 1, tuple(images[0].shape))
    for img in images[:4]:
        want = F.pil_to_tensor(case.torchvision(F.to_pil_image(img))) if case.pil else case.torchvision(img)
        want = want.contiguous()
        got = [apply(img, case.kernel, case.ints, case.floats, v, extras, extra) for v in variants]
        got.append(torch.ops.fastprep.apply_pixel_steps(img, one, extras))
        for g in got:
            if case.max_diff:  # fast mode: every way of running it agrees, within max_diff of torchvision
                close = g.dtype == want.dtype and int((g.int() - want.int()).abs().max()) <= case.max_diff
                if not (close and torch.equal(g, got[0])):
                    raise AssertionError(f"{case.label}: the native kernel is not within {case.max_diff} of "
                                         "torchvision, or its variants disagree")
            elif g.dtype != want.dtype or not torch.equal(g, want):
                raise AssertionError(f"{case.label}: the native kernel differs from torchvision")


def measure_kernel(case: KernelCase, images: list[torch.Tensor], args: argparse.Namespace) -> dict[str, Any]:
    """Times of one case (microseconds): torchvision, the variants net of apply_pixel_kernel's own
    cost, and the per-step time of a chain."""
    apply = torch.ops.fastprep.apply_pixel_kernel
    size = images[0].shape[-1]
    extras = _case_noise(case, size)
    extra = 0 if extras else -1
    status = torch.ops.fastprep.pixel_kernel_info(case.kernel).split("\t")[1]
    has_fast = status != "reference"  # "reference: <why>": a fast kernel exists but its proof failed
    variants = [1, 2] if has_fast else [1]
    _check_case(case, images, extras, extra, variants)
    n = len(images)
    shape = tuple(images[0].shape)
    if case.dtype == "uint8":
        noop: Callable[[int], object] = lambda i: apply(images[i % n], "posterize", [8], [], 1, [], -1)  # noqa: E731
    else:
        noop = lambda i: apply(images[i % n], "erase", [0, 0, 0, 0, 0, 1], [0.0], 1, [], -1)  # noqa: E731

    # the chain's length: about --chain-budget microseconds of steps
    probe = medians_us({"step": lambda i: apply(images[i % n], case.kernel, case.ints, case.floats, 0, extras,
                                                extra)}, 5, 1, args.warmup)["step"]
    k = max(1, min(args.chain, int(args.chain_budget / max(probe, 1e-3)))) if case.keeps_shape else 1
    chain_k = step_records(case.kernel, case.ints, case.floats, extra, k, shape)
    chain_0 = step_records(case.kernel, case.ints, case.floats, extra, 0, shape)
    pil_images = [F.to_pil_image(img) for img in images] if case.pil else images
    fns: dict[str, Callable[[int], object]] = {
        "torchvision": lambda i: case.torchvision(pil_images[i % n]),
        "overhead": noop,
        "reference": lambda i: apply(images[i % n], case.kernel, case.ints, case.floats, 1, extras, extra),
        "chain_0": lambda i: torch.ops.fastprep.apply_pixel_steps(images[i % n], chain_0, extras),
        "chain_k": lambda i: torch.ops.fastprep.apply_pixel_steps(images[i % n], chain_k, extras),
    }
    if has_fast:
        fns["fast"] = lambda i: apply(images[i % n], case.kernel, case.ints, case.floats, 2, extras, extra)
    t = medians_us(fns, args.runs, args.rounds, args.warmup)
    out = {"kernel": case.kernel, "status": status, "chain_steps": k, "torchvision_us": t["torchvision"],
           "overhead_us": t["overhead"], "reference_us": t["reference"],
           "reference_net_us": max(t["reference"] - t["overhead"], 0.0),
           "fast_us": t.get("fast"), "fast_net_us": max(t["fast"] - t["overhead"], 0.0) if has_fast else None,
           "copy_us": t["chain_0"], "per_step_us": max((t["chain_k"] - t["chain_0"]) / k, 0.0)}
    out["ratio_per_step"] = t["torchvision"] / out["per_step_us"] if out["per_step_us"] > 0 else None
    return out


def _fmt(v: float | None, width: int, digits: int = 1) -> str:
    return f"{v:{width}.{digits}f}" if v is not None else f"{'-':>{width}s}"


def run_kernels(images: list[torch.Tensor], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    size = images[0].shape[-1]
    floats = [normalized(img) for img in images]
    cases = [c for c in kernel_cases(size) if not args.kernels or any(s in c.label for s in args.kernels.split(","))]
    covered = {c.kernel for c in kernel_cases(size)}
    missing = set(torch.ops.fastprep.pixel_kernel_names().split()) - covered
    if missing:
        print(f"kernels without a case here: {sorted(missing)}")
    print(f"\n{f'kernel (3x{size}x{size})':40s} {'torchvision':>11s} {'ref net':>9s} {'fast net':>9s} "
          f"{'per step':>9s} {'k':>3s} {'tv/step':>8s} {'ns/px tv':>9s} {'step':>6s}  status")
    results = {}
    pixels = size * size
    for case in cases:
        r = measure_kernel(case, floats if case.dtype == "float" else images, args)
        r["torchvision_ns_per_pixel"] = r["torchvision_us"] * 1e3 / pixels
        r["per_step_ns_per_pixel"] = r["per_step_us"] * 1e3 / pixels
        results[case.label] = r
        print(f"{case.label:40s} {r['torchvision_us']:11.1f} {r['reference_net_us']:9.1f} "
              f"{_fmt(r['fast_net_us'], 9)} {r['per_step_us']:9.2f} {r['chain_steps']:3d} "
              f"{_fmt(r['ratio_per_step'], 7)}x {r['torchvision_ns_per_pixel']:9.2f} {r['per_step_ns_per_pixel']:6.2f}"
              f"  {r['status'][:40]}")
    return results


def run_floors(images: list[torch.Tensor], args: argparse.Namespace) -> dict[str, float]:
    """What one pass over the image costs, for the cheapest kernels: ATen's bitwise_not in place
    and into a new tensor, torch's clone, apply_pixel_kernel's own cost."""
    n = len(images)
    scratch = [img.clone() for img in images]
    apply = torch.ops.fastprep.apply_pixel_kernel
    t = medians_us({
        "bitwise_not_ in place": lambda i: scratch[i % n].bitwise_not_(),
        "bitwise_not (new tensor)": lambda i: images[i % n].bitwise_not(),
        "clone": lambda i: images[i % n].clone(),
        "apply_pixel_kernel, kernel returning at once": lambda i: apply(images[i % n], "posterize", [8], [], 1, [],
                                                                        -1),
    }, args.runs, args.rounds, args.warmup)
    for name, v in t.items():
        print(f"  {name:48s} {v:7.1f} us")
    return t


# ---------------------------------------------------------------------------------------------
# Per-sample transforms


def transforms() -> dict[str, tuple[Any, str]]:
    """label -> (v2 transform, the image it runs on: "uint8" or "float")."""
    return {
        "ColorJitter(0.4, 0.4, 0.2, 0.1)": (v2.ColorJitter(0.4, 0.4, 0.2, 0.1), "uint8"),
        "ColorJitter(hue=0.1)": (v2.ColorJitter(hue=0.1), "uint8"),
        "ColorJitter(0.4, 0.4, 0.2)": (v2.ColorJitter(0.4, 0.4, 0.2), "uint8"),
        "GaussianBlur(23)": (v2.GaussianBlur(23), "uint8"),
        "RandomSolarize(128, p=1)": (v2.RandomSolarize(128, p=1.0), "uint8"),
        "TrivialAugmentWide()": (v2.TrivialAugmentWide(), "uint8"),
        "RandAugment(2, 9)": (v2.RandAugment(2, 9), "uint8"),
        "AutoAugment(IMAGENET)": (v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET), "uint8"),
        "RandomErasing(p=1) on float32": (v2.RandomErasing(p=1.0), "float"),
        "RandomAffine(20, (0.1, 0.1), (0.9, 1.1), 10)": (v2.RandomAffine(20, (0.1, 0.1), (0.9, 1.1), 10), "uint8"),
        "RandomRotation(30, bilinear)": (v2.RandomRotation(30, interpolation=v2.InterpolationMode.BILINEAR),
                                         "uint8"),
    }


def time_per_key(transform: Any, prog: N.Program, images: list[torch.Tensor], keys: int,
                 runs_per_key: int) -> dict[str, list[float]]:
    """Per key, the median microseconds of torchvision's transform, the native path, its draws
    alone (the native_draws call) and its copy (apply_pixel_steps with no step); the methods'
    order alternates per key."""

    def run_tv(key: int, img: torch.Tensor) -> object:
        torch.manual_seed(key)
        return transform(img)

    def run_native(key: int, img: torch.Tensor) -> object:
        steps, extras = torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, key,
                                                        *img.shape)
        return torch.ops.fastprep.apply_pixel_steps(img, steps, extras)

    def run_draws(key: int, img: torch.Tensor) -> object:
        return torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, key, *img.shape)

    no_step = torch.empty(0, dtype=torch.uint8)

    def run_copy(key: int, img: torch.Tensor) -> object:
        return torch.ops.fastprep.apply_pixel_steps(img, no_step, [])

    methods = (("torchvision", run_tv), ("native", run_native), ("draws", run_draws), ("copy", run_copy))
    per_key: list[dict[str, list[float]]] = [{name: [] for name, _ in methods} for _ in range(keys)]
    for run in range(runs_per_key + 1):  # the first round warms up
        for key in range(keys):
            img = images[key % len(images)]
            for name, fn in methods[:: 1 if (key + run) % 2 else -1]:
                t0 = time.perf_counter_ns()
                fn(key, img)
                if run:
                    per_key[key][name].append((time.perf_counter_ns() - t0) / 1000)
    return {name: [statistics.median(k[name]) for k in per_key] for name, _ in methods}


def _check_transform(transform: Any, prog: N.Program, images: list[torch.Tensor], keys: int) -> None:
    for key in range(min(keys, 24)):
        img = images[key % len(images)]
        torch.manual_seed(key)
        want = transform(img)
        steps, extras = torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, key,
                                                        *img.shape)
        if not torch.equal(torch.ops.fastprep.apply_pixel_steps(img, steps, extras), want):
            raise AssertionError(f"{transform}: the native path differs from torchvision under key {key}")


def run_transforms(images: list[torch.Tensor], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    size = images[0].shape[-1]
    floats = [normalized(img) for img in images]
    print(f"\n{f'per sample (3x{size}x{size})':34s} {'torchvision':>11s} {'native':>9s} {'ratio':>7s} "
          f"{'draws':>7s} {'copy':>7s} {'native-copy':>11s} {'ratio':>7s}   (mean over {args.samples} keys of "
          "each key's median)")
    results = {}
    for label, (transform, dtype) in transforms().items():
        if args.transforms and not any(s in label for s in args.transforms.split(",")):
            continue
        prog = N.build_program([N.to_native(transform)])
        imgs = floats if dtype == "float" else images
        _check_transform(transform, prog, imgs, args.samples)
        t = time_per_key(transform, prog, imgs, args.samples, args.runs_per_key)
        tv, native, draws, copy = (float(np.mean(t[k])) for k in ("torchvision", "native", "draws", "copy"))
        net = max(native - copy, 1e-9)
        results[label] = {"torchvision_us": tv, "native_us": native, "draws_us": draws, "copy_us": copy,
                          "native_net_us": net, "ratio": tv / native, "ratio_net": tv / net, "keys": args.samples}
        print(f"{label:34s} {tv:11.1f} {native:9.1f} {tv / native:6.2f}x {draws:7.1f} {copy:7.1f} {net:11.1f} "
              f"{tv / net:6.2f}x")
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", default=None, help="folder of JPEGs to crop the images from (default: synthetic)")
    parser.add_argument("--sizes", default="224,96", help="comma-separated image sizes S (3xSxS crops)")
    parser.add_argument("--runs", type=int, default=200, help="timed calls per kernel and method (median)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved blocks per measurement")
    parser.add_argument("--warmup", type=float, default=0.2, help="seconds of warm-up calls per method")
    parser.add_argument("--chain", type=int, default=16, help="most steps in a chain")
    parser.add_argument("--chain-budget", type=float, default=400.0, help="microseconds of steps per chain")
    parser.add_argument("--samples", type=int, default=200, help="keys per per-sample transform")
    parser.add_argument("--runs-per-key", type=int, default=3, help="calls per key and method (median)")
    parser.add_argument("--kernels", default="", help="comma-separated substrings of kernel cases (default: all)")
    parser.add_argument("--transforms", default="", help="comma-separated substrings of transforms (default: all)")
    parser.add_argument("--no-kernels", action="store_true", help="skip the kernel table")
    parser.add_argument("--no-transforms", action="store_true", help="skip the per-sample table")
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    load_before = os.getloadavg()
    print(describe())
    print(f"torch {torch.__version__}, torchvision {_tv_version()}, 1 thread; load average {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}; images: {args.photos or 'synthetic'}; median of {args.runs} "
          f"calls in {args.rounds} interleaved rounds (times in us)")
    report: dict[str, Any] = {"platform": describe(), "torch": torch.__version__, "torchvision": _tv_version(),
                              "photos": args.photos, "args": vars(args), "load_before": load_before, "sizes": {}}
    for size in sizes:
        images = load_images(args.photos, size)
        entry: dict[str, Any] = {"images": len(images)}
        print(f"\n== 3x{size}x{size} uint8, {len(images)} images")
        if not args.no_kernels:
            entry["floors"] = run_floors(images, args)
            entry["kernels"] = run_kernels(images, args)
        if not args.no_transforms:
            entry["transforms"] = run_transforms(images, args)
        report["sizes"][str(size)] = entry
    report["load_after"] = os.getloadavg()
    print(f"\nload average after: {report['load_after'][0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


def _tv_version() -> str:
    import torchvision

    return torchvision.__version__


if __name__ == "__main__":
    main()
