"""ROI JPEG decode benchmark: fastprep.io.decode_jpeg_roi vs whole-image decoders + slice.

Per sample: a 256x256 window drawn at random from a 533x800 q90 photo-like JPEG (4:2:0,
then 4:4:4), one thread. Methods take turns in blocks of --block windows (the same windows
for all) so machine noise hits all of them alike; the table gives the median per-sample
time over --runs samples and the
ratio to fastprep's ROI decode measured in the same run. "image MPix/s" counts the whole
image's pixels per second of a sample (throughput as if the whole image were delivered);
"max diff" is the largest difference from fastprep's full decode, checked on the first
window of each table (fastprep's own exactness is tested on every window in tests/).

    python bench/bench_decode.py [--runs 300] [--json out.json]
"""

import argparse
import io
import json
import platform
import statistics
import time

import numpy as np
import torch

import fastprep.io as fio
from fastprep.bench.synthetic import encode_jpeg, photo_like


def make_methods(data: bytes, info):
    tensor = fio._as_tensor(data)
    methods = {
        "fastprep decode_jpeg_roi": lambda t, l, h, w: fio.decode_jpeg_roi(tensor, t, l, h, w),
        "fastprep decode_jpeg + slice": lambda t, l, h, w: fio.decode_jpeg(tensor)[:, t:t + h, l:l + w].contiguous(),
    }
    from PIL import Image
    from torchvision.transforms.functional import pil_to_tensor

    def pil(t, l, h, w):
        img = Image.open(io.BytesIO(data))
        return pil_to_tensor(img)[:, t:t + h, l:l + w].contiguous()

    methods["Pillow open + PILToTensor + crop"] = pil
    import torchvision.io

    methods["torchvision.io.decode_jpeg + slice"] = (
        lambda t, l, h, w: torchvision.io.decode_jpeg(tensor)[:, t:t + h, l:l + w].contiguous())
    try:
        import simplejpeg

        methods["simplejpeg + slice"] = (
            lambda t, l, h, w: torch.from_numpy(simplejpeg.decode_jpeg(data)[t:t + h, l:l + w]).permute(2, 0, 1)
            .contiguous())
    except ImportError:
        pass
    dali = _dali_method(data)
    if dali is not None:
        methods["DALI CPU decoders.image_slice (ROI)"] = dali
    return methods


def _dali_method(data: bytes):
    """NVIDIA DALI's CPU ROI decoder (optional: pip install nvidia-dali-cuda130)."""
    try:
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def
    except ImportError:
        return None
    buf = np.frombuffer(data, np.uint8)
    window = {"anchor": np.zeros(2, np.float32), "shape": np.ones(2, np.float32)}

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_async=False,
                  exec_pipelined=False)
    def pipe():
        enc = fn.external_source(source=lambda: [buf], dtype=types.UINT8)
        anchor = fn.external_source(source=lambda: [window["anchor"]], dtype=types.FLOAT)
        shape = fn.external_source(source=lambda: [window["shape"]], dtype=types.FLOAT)
        # ROI decode: DALI's CPU decoder is given the window and decodes only what it needs.
        return fn.decoders.image_slice(enc, anchor, shape, device="cpu", axes=[0, 1], output_type=types.RGB,
                                       normalized_anchor=False, normalized_shape=False)

    try:
        p = pipe()
        p.build()
    except Exception:  # noqa: BLE001 - DALI raises many types; report it as unavailable
        return None

    def run(t, l, h, w):
        window["anchor"] = np.array([t, l], np.float32)
        window["shape"] = np.array([h, w], np.float32)
        (out,) = p.run()
        return torch.from_numpy(np.array(out.as_tensor())[0]).permute(2, 0, 1)

    return run


def bench(subsampling: str, runs: int, block: int = 25, seed: int = 0):
    rgb = photo_like(533, 800, seed=1)
    data = encode_jpeg(rgb, quality=90, subsampling=subsampling)
    info = fio.jpeg_info(data)
    methods = make_methods(data, info)
    g = torch.Generator().manual_seed(seed)
    windows = [(int(torch.randint(0, 533 - 256 + 1, (1,), generator=g)),
                int(torch.randint(0, 800 - 256 + 1, (1,), generator=g)), 256, 256) for _ in range(runs)]
    ref = fio.decode_jpeg(data)
    maxdiff = {}
    for name, fn in methods.items():  # warm-up, and agreement with fastprep's full decode
        t, l, h, w = windows[0]
        out = fn(t, l, h, w)
        maxdiff[name] = int((out.int() - ref[:, t:t + h, l:l + w].int()).abs().max())
        if name.startswith("fastprep") and maxdiff[name] != 0:
            raise AssertionError(f"{name} is not exact")
    times = {name: [] for name in methods}
    # Methods take turns in blocks of `block` windows: each is timed in steady state (as a
    # worker decoding a stream of images), and slow drifts of the machine hit all alike.
    for start in range(0, len(windows), block):
        for name, fn in methods.items():
            for win in windows[start:start + block]:
                t0 = time.perf_counter()
                fn(*win)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["fastprep decode_jpeg_roi"])
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({
            "method": name, "median_ms": med * 1e3, "time_vs_fastprep_roi": med / base,
            "window_mpix_s": 256 * 256 / med / 1e6, "image_mpix_s": 533 * 800 / med / 1e6,
            "max_abs_diff_vs_full_decode": maxdiff[name],
        })
    return {"subsampling": subsampling, "bytes": len(data), "runs": runs, "block": block, "rows": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300, help="samples (windows) per method")
    ap.add_argument("--block", type=int, default=25, help="consecutive windows per method per turn")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = {"machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
                           "libjpeg_turbo": fio._ops.libjpeg_turbo_version}, "tables": []}
    for subsampling in ("4:2:0", "4:4:4"):
        res = bench(subsampling, args.runs, args.block)
        results["tables"].append(res)
        print(f"\n533x800 q90 {subsampling} ({res['bytes'] // 1024} KiB), 256x256 random window, "
              f"1 thread, median of {res['runs']} samples")
        print("| method | ms/sample | time vs ROI | window MPix/s | image MPix/s | max diff |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in res["rows"]:
            print(f"| {r['method']} | {r['median_ms']:.3f} | {r['time_vs_fastprep_roi']:.2f}x | "
                  f"{r['window_mpix_s']:.1f} | {r['image_mpix_s']:.1f} | {r['max_abs_diff_vs_full_decode']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
