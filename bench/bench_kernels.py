"""Mask, colour and scale kernels vs the reference implementations, one thread, 3x256x256.

Every method runs on the same images, alternating in blocks of 50 calls so machine noise
hits all alike; the table gives the median per-call time over --runs calls and the ratio
to the reference measured in the same run:

* RandomMask: numpy reference (np.random.uniform mask, pad-and-or dilation, boolean-index
  assignment) and scipy reference (convolve2d with the cross) vs fastprep.transforms.RandomMask.
* ConvertColor + Scale: torch reference (3x3 matmul + offset, then / 255) vs fastprep's
  ConvertColor then Scale, and the fused YUVScale.
* Mask -> ConvertColor -> Scale: numpy mask + torch colour reference vs the fused
  MaskYUVScale (what fastprep.transforms.Compose runs), also as a fraction of
  fastprep.io.decode_jpeg_roi for a 256x256 window of a 533x800 JPEG.
* Time to the first mask call in a fresh process (import of fastprep.functional, Numba
  compile or cache load, first call), with a cold and then a warm on-disk Numba cache.
* With the other cores busy (one busy-loop process per other usable CPU): mean time per
  call of the per-sample mask_yuv_scale at default settings vs one thread, plus a batch.

Each code path runs in its own process: ``native`` (the kernels this CPU selects) and
``avx2`` (an AVX2-only CPU such as AMD Zen 3, emulated: Numba compiled for haswell with
NUMBA_CPU_NAME/NUMBA_CPU_FEATURES, the C kernels' AVX2 variant with FASTPREP_ISA=avx2).

    python bench/bench_kernels.py [--runs 2000] [--target both|native|avx2] [--json out.json]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from scipy.signal import convolve2d

import fastprep.functional as F
import fastprep.transforms as FT
from fastprep._platform import describe
from fastprep.bench.synthetic import photo_like

# An AVX2-only CPU emulated on any x86-64 host (see docs/kernels.md). NUMBA_CPU_NAME alone
# would keep the host's AVX-512 features.
TARGET_ENV = {
    "native": {},
    "avx2": {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+avx2,+fma", "FASTPREP_ISA": "avx2"},
}

H = W = 256
RATIO = 0.25
CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])
YUV = torch.tensor([[0.299, 0.587, 0.114], [-0.16874, -0.33126, 0.5], [0.5, -0.41869, -0.08131]])
OFFSET = torch.tensor([0.0, 128.0, 128.0])[:, None, None]


# ----------------------------------------------------------------------- references

def numpy_random_mask(img):
    mask = np.random.uniform(size=img.shape[-2:]) < RATIO
    p = np.pad(mask, 1)
    dilated = p[1:-1, 1:-1] | p[:-2, 1:-1] | p[2:, 1:-1] | p[1:-1, :-2] | p[1:-1, 2:]
    out = img.clone()
    out[:, torch.from_numpy(dilated)] = 0
    return out


def scipy_random_mask(img):
    mask = np.random.uniform(size=img.shape[-2:]) < RATIO
    dilated = convolve2d(mask, CROSS, mode="same") > 0
    out = img.clone()
    out[:, torch.from_numpy(dilated)] = 0
    return out


def torch_convert_scale(img):
    yuv = (YUV @ img.float().reshape(3, -1)).reshape(img.shape) + OFFSET
    return yuv / 255


# ------------------------------------------------------------------------ measuring

def measure(groups, runs, images, block=50):
    """Median seconds per call for every method.

    Methods alternate in blocks of ``block`` calls, so slow drifts of the machine hit all of
    them alike while each is timed in its steady state: a call right after a reference
    that frees hundreds of KiB pays the page faults of re-growing the heap, which says more
    about the previous call than about this one.
    """
    times = {name: [] for methods in groups.values() for name in methods}
    calls = [(name, fn) for methods in groups.values() for name, fn in methods.items()]
    for _, fn in calls:  # warm-up: compile, caches, allocator
        for img in images[:5]:
            fn(img)
    done = 0
    while done < runs:
        n = min(block, runs - done)
        for name, fn in calls:
            for i in range(done, done + n):
                img = images[i % len(images)]
                t0 = time.perf_counter()
                fn(img)
                times[name].append(time.perf_counter() - t0)
        done += n
    return {name: statistics.median(ts) for name, ts in times.items()}


def roi_decode_time(runs):
    try:
        import fastprep.io as fio
        from fastprep.bench.synthetic import encode_jpeg
    except Exception as exc:  # the io extension is optional for this benchmark
        print(f"(decode_jpeg_roi not measured: {exc})", file=sys.stderr)
        return None
    jpeg = encode_jpeg(photo_like(533, 800, seed=1), quality=90, subsampling="4:2:0")
    data = torch.frombuffer(bytearray(jpeg), dtype=torch.uint8)
    rng = np.random.default_rng(0)
    windows = [(int(rng.integers(0, 533 - H)), int(rng.integers(0, 800 - W))) for _ in range(64)]
    for t, l in windows[:5]:
        fio.decode_jpeg_roi(data, t, l, H, W)
    ts = []
    for i in range(runs):
        t, l = windows[i % len(windows)]
        t0 = time.perf_counter()
        fio.decode_jpeg_roi(data, t, l, H, W)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


_FIRST_CALL = r"""
import time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import fastprep.functional as F
t2 = time.perf_counter()
img = torch.zeros(3, 256, 256, dtype=torch.uint8)
F.apply_random_mask(img, 0.25)
t3 = time.perf_counter()
F.mask_yuv_scale(img, 0.25)
t4 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
"""


def first_call_times():
    """Seconds in a fresh process, with a cold then a warm Numba cache: import torch,
    import fastprep (with torchvision), first apply_random_mask (Numba import and compile or
    cache load), first mask_yuv_scale."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache,
                   PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
        out = {}
        for state in ("cold", "warm"):
            proc = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, cwd=cache, capture_output=True,
                                  text=True, check=True)
            out[state] = dict(zip(("import_torch", "import_fastprep", "first_mask", "first_fused"),
                                  (float(x) for x in proc.stdout.split())))
    return out


def code_path():
    """The Numba target and the C kernels' variant in use in this process."""
    import llvmlite.binding as ll
    from numba.core import config

    from fastprep._kernels import isa

    cpu = config.CPU_NAME or ll.get_host_cpu_name()
    features = "host features" if config.CPU_FEATURES is None else config.CPU_FEATURES or "none"
    return f"Numba target {cpu} ({features}); C kernels {isa.active_isa()} variant"


def busy_cores_rows(runs, default_threads):
    """Mean per-call time with a busy-loop process on every other usable CPU."""
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    img = torch.from_numpy(np.ascontiguousarray(photo_like(H, W, seed=3).transpose(2, 0, 1)))
    batch = img.expand(64, 3, H, W).contiguous()

    cases = [
        ("mask_yuv_scale 3x256x256, default threads", img, lambda x: F.mask_yuv_scale(x, RATIO)),
        ("mask_yuv_scale 3x256x256, num_threads=1", img, lambda x: F.mask_yuv_scale(x, RATIO, num_threads=1)),
        ("yuv_scale 64x3x256x256, default threads", batch, lambda x: F.yuv_scale(x)),
        ("yuv_scale 64x3x256x256, num_threads=1", batch, lambda x: F.yuv_scale(x, num_threads=1)),
    ]
    prev = torch.get_num_threads()
    torch.set_num_threads(default_threads)  # the main process's default, not the benchmark's 1
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(1, ncpu - 1))]
    try:
        time.sleep(0.5)
        for _, x, fn in cases:  # warm-up
            fn(x)
        times = {name: [] for name, _, _ in cases}
        for _ in range(max(4, runs // 200)):  # alternate in blocks, as measure() does
            for name, x, fn in cases:
                for _ in range(50 if x is img else 1):
                    t0 = time.perf_counter()
                    fn(x)
                    times[name].append(time.perf_counter() - t0)
        means = {name: statistics.fmean(ts) for name, ts in times.items()}
    finally:
        for p in busy:
            p.kill()
            p.wait()
        torch.set_num_threads(prev)
    return means, len(busy), default_threads


# ------------------------------------------------------------------------------ main

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="timed calls per method (default 2000)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--target", choices=("both", "native", "avx2"), default="both",
                        help="code path: both (default; each in its own process), native, or avx2 "
                             "(an AVX2-only CPU emulated through NUMBA_CPU_NAME/FEATURES and FASTPREP_ISA)")
    args = parser.parse_args()

    if args.target == "both" or (args.target == "avx2" and os.environ.get("FASTPREP_ISA") != "avx2"):
        return run_targets(args)

    default_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    np.random.seed(0)
    torch.manual_seed(0)
    photo = photo_like(533, 800, seed=2)
    images = [torch.from_numpy(np.ascontiguousarray(photo[t:t + H, l:l + W].transpose(2, 0, 1)))
              for t, l in [(0, 0), (100, 300), (277, 544), (50, 120), (200, 400), (10, 500), (150, 30), (277, 0)]]

    random_mask = FT.RandomMask(RATIO)
    convert, scale_t = FT.ConvertColor(), FT.Scale()
    fused = FT.Compose([FT.RandomMask(RATIO), FT.ConvertColor(), FT.Scale()])
    yuv_scale = FT.Compose([FT.ConvertColor(), FT.Scale()])
    groups = {
        "mask": {
            "numpy reference": numpy_random_mask,
            "scipy reference": scipy_random_mask,
            "fastprep RandomMask": random_mask,
            "fastprep apply_random_mask": lambda x: F.apply_random_mask(x, RATIO),
        },
        "color": {
            "torch reference": torch_convert_scale,
            "fastprep ConvertColor + Scale": lambda x: scale_t(convert(x)),
            "fastprep YUVScale (fused)": yuv_scale,
        },
        "chain": {
            "numpy mask + torch colour reference": lambda x: torch_convert_scale(numpy_random_mask(x)),
            "fastprep Compose (MaskYUVScale)": fused,
            "fastprep mask_yuv_scale": lambda x: F.mask_yuv_scale(x, RATIO),
        },
    }
    med = measure(groups, args.runs, images)
    roi = roi_decode_time(min(args.runs, 1000))
    first = first_call_times()

    us = {k: v * 1e6 for k, v in med.items()}
    rows = [
        ("RandomMask", "numpy reference", us["numpy reference"], "", ""),
        ("RandomMask", "scipy reference", us["scipy reference"], "", ""),
        ("RandomMask", "fastprep RandomMask", us["fastprep RandomMask"],
         f"{us['numpy reference'] / us['fastprep RandomMask']:.1f}x numpy, "
         f"{us['scipy reference'] / us['fastprep RandomMask']:.1f}x scipy", ">= 15x numpy, >= 40x scipy"),
        ("RandomMask", "fastprep apply_random_mask", us["fastprep apply_random_mask"],
         f"{us['numpy reference'] / us['fastprep apply_random_mask']:.1f}x numpy", ""),
        ("ConvertColor+Scale", "torch reference", us["torch reference"], "", ""),
        ("ConvertColor+Scale", "fastprep ConvertColor + Scale", us["fastprep ConvertColor + Scale"],
         f"{us['torch reference'] / us['fastprep ConvertColor + Scale']:.1f}x torch", ">= 2x torch"),
        ("ConvertColor+Scale", "fastprep YUVScale (fused)", us["fastprep YUVScale (fused)"],
         f"{us['torch reference'] / us['fastprep YUVScale (fused)']:.1f}x torch", ""),
        ("Mask+Color+Scale", "numpy mask + torch colour reference", us["numpy mask + torch colour reference"], "", ""),
    ]
    for name in ("fastprep Compose (MaskYUVScale)", "fastprep mask_yuv_scale"):
        note = f"{us['numpy mask + torch colour reference'] / us[name]:.1f}x ref"
        if roi:
            note += f", {med[name] / roi:.3f}x ROI decode"
        rows.append(("Mask+Color+Scale", name, us[name], note, "<= 0.1x ROI decode" if "Compose" in name else ""))
    if roi:
        rows.append(("decode", "fastprep decode_jpeg_roi 256x256 of 533x800", roi * 1e6, "", ""))

    busy_means, n_busy, busy_threads = busy_cores_rows(args.runs, default_threads)

    print(f"\n{describe()}\nCode path: {code_path()}")
    print(f"\nfastprep kernels, 3x{H}x{W} uint8, ratio {RATIO}, one thread, median of {args.runs} calls "
          f"(torch {torch.__version__})\n")
    print("| step | method | median µs | ratio | target |")
    print("|---|---|---:|---|---|")
    for step, method, t, ratio, target in rows:
        print(f"| {step} | {method} | {t:.1f} | {ratio} | {target} |")
    print("\nTime to first call in a fresh process, seconds (NUMBA_CACHE_DIR cold, then warm):\n")
    print("| Numba cache | import torch | import fastprep | first RandomMask (Numba load) | first fused |")
    print("|---|---:|---:|---:|---:|")
    for state, f in first.items():
        print(f"| {state} | {f['import_torch']:.2f} | {f['import_fastprep']:.2f} | {f['first_mask']:.2f} | "
              f"{f['first_fused']:.3f} |")

    one = busy_means["mask_yuv_scale 3x256x256, num_threads=1"]
    one_batch = busy_means["yuv_scale 64x3x256x256, num_threads=1"]
    print(f"\nWith the other cores busy ({n_busy} busy-loop process(es), not pinned), torch threads "
          f"{busy_threads} (the main process's default); mean per call, ratio to 1 thread in the same run:\n")
    print("| kernel | mean µs | vs 1 thread | target |")
    print("|---|---:|---:|---|")
    for name, t in busy_means.items():
        ref = one_batch if name.startswith("yuv_scale") else one
        target = "<= 2x" if name == "mask_yuv_scale 3x256x256, default threads" else ""
        print(f"| {name} | {t * 1e6:.1f} | {t / ref:.2f}x | {target} |")

    if args.json:
        result = {
            "cpu": describe(), "code_path": code_path(), "target": args.target,
            "busy_cores_mean_us": {k: v * 1e6 for k, v in busy_means.items()},
            "shape": [3, H, W], "ratio": RATIO, "runs": args.runs, "threads": 1,
            "median_us": us, "roi_decode_us": roi * 1e6 if roi else None,
            "first_call_s": first,
            "ratios": {
                "randommask_vs_numpy": us["numpy reference"] / us["fastprep RandomMask"],
                "randommask_vs_scipy": us["scipy reference"] / us["fastprep RandomMask"],
                "convert_scale_vs_torch": us["torch reference"] / us["fastprep ConvertColor + Scale"],
                "fused_vs_roi_decode": med["fastprep Compose (MaskYUVScale)"] / roi if roi else None,
            },
            "platform": platform.platform(), "torch": torch.__version__,
            "busy_default_vs_one_thread": busy_means["mask_yuv_scale 3x256x256, default threads"] / one,
        }
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


def run_targets(args):
    """Run the benchmark once per code path, each in a fresh process with its overrides."""
    targets = ("native", "avx2") if args.target == "both" else (args.target,)
    results = {}
    for target in targets:
        env = dict(os.environ, **TARGET_ENV[target])
        cmd = [sys.executable, os.path.abspath(__file__), "--runs", str(args.runs), "--target", target]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.json")
            print(f"\n===== code path: {target} =====", flush=True)
            subprocess.run(cmd + ["--json", out], env=env, check=True)
            with open(out) as f:
                results[target] = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
