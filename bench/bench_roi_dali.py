"""Unpacked ROI JPEG decode: fastprep.io.decode_jpeg_roi vs DALI's CPU decoder, same run.

Inputs are real photographs (``--photos DIR``, e.g. the Debian wallpapers): every
sequential JPEG there is resized with Pillow to ``--long-side`` px on its long side and
saved at q90 4:2:0 (ImageNet-sized files), plus the ``--full`` originals as stored (no
restart markers anywhere: the file as downloaded, not a packed one). Each file is decoded
at a few fixed window positions (top-left, centre, bottom-right) for 256x256 and 224x224
windows, by

* ``fastprep.io.decode_jpeg_roi`` (the public wrapper),
* ``torch.ops.fastprep.decode_jpeg_roi`` (the op itself: the wrapper's cost is the
  difference), and
* DALI's ``fn.decoders.image_slice(device="cpu")`` (libjpeg-turbo bundled in nvImageCodec),
  the window given in pixels, in a CPU-only pipeline (``device_id=None``, one thread).

Per-sample cost. A DALI ``run()`` has a fixed overhead (executor, external source, output
buffers), so every method is timed over a *block* of ``--batch`` samples (DALI: one
``run()`` of a ``--batch``-sample batch; fastprep: ``--batch`` consecutive calls) and the
per-sample time is the block time / ``--batch``. ``--batch 1`` gives the per-call cost
including DALI's whole per-run overhead. Methods take turns block by block (so drifts of a
shared machine hit all alike; the order rotates every block, since the method after a DALI
run finds the caches cold); the table gives the median over ``--reps`` blocks and the
ratio to DALI in the same run. Every output is compared with fastprep's full decode sliced
to the window ("max diff": 0 means bit-identical).

A second table separates the libraries' entropy decoding (libjpeg-turbo 2.1.5 here, DALI's
bundled 3.1.x there): a 16x16 window at the bottom-left minus one at the top-left is the
cost of Huffman-decoding every row above it, which neither can avoid in a file without
restart markers.

    python bench/bench_roi_dali.py --photos PHOTOS_DIR [--batch 8] [--reps 60]
        [--long-side 800] [--full 1080x1920.jpg,LadyBird.jpg] [--json FILE]
"""

import argparse
import io
import json
import os
import statistics
import time

import numpy as np
import torch

import fastprep.io as fio
from fastprep import _ops, _platform

POSITIONS = ("top-left", "centre", "bottom-right")


def resized_q90(path: str, long_side: int) -> bytes:
    """The photo at ``path`` resized to ``long_side`` px on its long side, q90 4:2:0."""
    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("RGB")
        scale = long_side / max(img.size)
        size = (max(1, round(img.size[0] * scale)), max(1, round(img.size[1] * scale)))
        img = img.resize(size, Image.BICUBIC)
        out = io.BytesIO()
        img.save(out, "JPEG", quality=90, subsampling=2)
    return out.getvalue()


def load_inputs(folder: str, long_side: int, full: list) -> list:
    """``[(label, bytes)]``: the resized cuts of the sequential JPEGs of ``folder``, then the
    ``full`` originals as stored."""
    inputs = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(b"\xff\xd8") or fio.jpeg_info(data).progressive:
            continue
        inputs.append((f"{name} -> {long_side} px q90 4:2:0", resized_q90(path, long_side)))
    for name in full:
        with open(os.path.join(folder, name), "rb") as f:
            inputs.append((f"{name} (original)", f.read()))
    return inputs


def window_at(position: str, height: int, width: int, size: int) -> tuple:
    """``(top, left)`` of a ``size`` x ``size`` window at ``position``; off the 16-pixel grid
    by a few pixels, as a random crop would be."""
    top = {"top-left": 5, "centre": (height - size) // 2, "bottom-right": height - size - 3}[position]
    left = {"top-left": 7, "centre": (width - size) // 2, "bottom-right": width - size - 1}[position]
    return top, left


class DaliSlice:
    """A CPU-only DALI pipeline decoding ``batch`` windows (in pixels) of one file per run."""

    def __init__(self, data: bytes, batch: int):
        import nvidia.dali.fn as fn
        import nvidia.dali.types as types
        from nvidia.dali import pipeline_def

        self.batch = batch
        encoded = np.frombuffer(data, np.uint8)
        self.anchors = [np.zeros(2, np.float32)] * batch
        self.shapes = [np.ones(2, np.float32)] * batch

        @pipeline_def(batch_size=batch, num_threads=1, device_id=None, prefetch_queue_depth=1, exec_async=False,
                      exec_pipelined=False)
        def pipe():
            enc = fn.external_source(source=lambda: [encoded] * batch, dtype=types.UINT8)
            anchor = fn.external_source(source=lambda: self.anchors, dtype=types.FLOAT)
            shape = fn.external_source(source=lambda: self.shapes, dtype=types.FLOAT)
            return fn.decoders.image_slice(enc, anchor, shape, device="cpu", axes=[0, 1], output_type=types.RGB,
                                           normalized_anchor=False, normalized_shape=False)

        self.pipe = pipe()
        self.pipe.build()

    def set_windows(self, windows: list) -> None:
        self.anchors = [np.array([t, l], np.float32) for t, l, _, _ in windows]
        self.shapes = [np.array([h, w], np.float32) for _, _, h, w in windows]

    def run(self):
        """One run: the batch's decoded windows, left in DALI's output (no copy)."""
        (out,) = self.pipe.run()
        return out

    @staticmethod
    def sample(out, index: int) -> torch.Tensor:
        """Sample ``index`` of a run's output as a ``[3, H, W]`` tensor (a copy)."""
        return torch.from_numpy(np.array(out[index])).permute(2, 0, 1)


def _timed_in_turns(methods: dict, batch: int, reps: int) -> dict:
    """Per-sample times of ``reps`` blocks of each method, the methods taking turns in an
    order rotated every block: whichever runs right after a DALI run finds the caches
    full of DALI's data (about 0.05-0.1 ms per block here), so no method always pays it."""
    names = list(methods)
    times: dict = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            t0 = time.perf_counter()
            methods[name]()
            times[name].append((time.perf_counter() - t0) / batch)
    return times


def measure(data: bytes, size: int, position: str, batch: int, reps: int, packed: bytes | None = None) -> dict:
    """Per-sample medians of the three methods on ``batch`` copies of one window (and, with
    ``packed``, of fastprep on that packed copy of the file: a fourth row)."""
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    info = fio.jpeg_info(data)
    top, left = window_at(position, info.height, info.width, size)
    win = (top, left, size, size)
    dali = DaliSlice(data, batch)
    dali.set_windows([win] * batch)
    op = torch.ops.fastprep.decode_jpeg_roi
    ref = fio.decode_jpeg(tensor, max_pixels=0)[:, top:top + size, left:left + size]
    args = (top, left, size, size, int(fio.ImageReadMode.RGB), 0, False, 8, fio.DEFAULT_MAX_SCANS, False)
    methods = {
        "fastprep.io.decode_jpeg_roi": lambda: [fio.decode_jpeg_roi(tensor, *win, max_pixels=0) for _ in range(batch)],
        "torch.ops.fastprep.decode_jpeg_roi": lambda: [op(tensor, *args) for _ in range(batch)],
        "DALI decoders.image_slice (cpu)": dali.run,
    }
    if packed is not None:
        packed_tensor = torch.frombuffer(bytearray(packed), dtype=torch.uint8)
        methods["fastprep.io.decode_jpeg_roi, packed copy"] = (
            lambda: [fio.decode_jpeg_roi(packed_tensor, *win, max_pixels=0) for _ in range(batch)])
    maxdiff = {}
    for name, fn in methods.items():
        out = fn()
        out = out[0] if isinstance(out, list) else DaliSlice.sample(out, 0)
        maxdiff[name] = int((out.int() - ref.int()).abs().max())
    times = _timed_in_turns(methods, batch, reps)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    dali_med = med["DALI decoders.image_slice (cpu)"]
    return {"window": [top, left, size, size], "position": position, "batch": batch, "reps": reps,
            "rows": [{"method": name, "median_ms": med[name] * 1e3, "time_vs_dali": med[name] / dali_med,
                      "max_abs_diff_vs_full_decode": maxdiff[name]} for name in methods]}


def measure_skip(data: bytes, batch: int, reps: int) -> dict:
    """The cost of entropy-decoding the rows above a window, per library: a 16x16 window at
    the bottom-left minus one at the top-left (both decode one iMCU row of pixels; the first
    also Huffman-decodes every row above it, which jpeg_skip_scanlines does in both)."""
    info = fio.jpeg_info(data)
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    op = torch.ops.fastprep.decode_jpeg_roi
    wins = {"top": (0, 0, 16, 16), "bottom": (info.height - 16, 0, 16, 16)}
    methods = {}
    for where, win in wins.items():
        args = win + (int(fio.ImageReadMode.RGB), 0, False, 8, fio.DEFAULT_MAX_SCANS, False)
        methods[("fastprep op", where)] = lambda args=args: [op(tensor, *args) for _ in range(batch)]
        dali = DaliSlice(data, batch)
        dali.set_windows([win] * batch)
        methods[("DALI", where)] = dali.run
    for fn in methods.values():
        fn()
    times = _timed_in_turns(methods, batch, reps)
    med = {key: statistics.median(ts) for key, ts in times.items()}
    skip = {lib: med[(lib, "bottom")] - med[(lib, "top")] for lib in ("fastprep op", "DALI")}
    return {"top_ms": {lib: med[(lib, "top")] * 1e3 for lib in skip},
            "skip_ms": {lib: v * 1e3 for lib, v in skip.items()},
            "entropy_mb_per_s": {lib: len(data) / v / 1e6 for lib, v in skip.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", required=True, help="folder of real JPEG photographs")
    ap.add_argument("--long-side", type=int, default=800, help="long side of the resized q90 cuts (px)")
    ap.add_argument("--full", default="1080x1920.jpg,LadyBird.jpg",
                    help="comma-separated files of --photos also timed as stored (full size); '' for none")
    ap.add_argument("--limit", type=int, default=4, help="resized photos to time (the first N by name)")
    ap.add_argument("--sizes", default="256,224", help="window sizes, comma-separated")
    ap.add_argument("--batch", type=int, default=8, help="samples per timed block (DALI: per run())")
    ap.add_argument("--reps", type=int, default=60, help="timed blocks per method and window")
    ap.add_argument("--packed", action="store_true",
                    help="also time fastprep on a packed copy of each file (fastprep.io.transcode_jpeg, lossless)")
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import nvidia.dali

    print(_platform.describe())
    print(f"fastprep libjpeg-turbo {_ops.libjpeg_turbo_version}; DALI {nvidia.dali.__version__}; "
          f"per-sample time = block of {args.batch} samples / {args.batch}, median of {args.reps} blocks")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    full = [n for n in args.full.split(",") if n]
    inputs = load_inputs(args.photos, args.long_side, full)
    inputs = inputs[:args.limit] + inputs[len(inputs) - len(full):] if full else inputs[:args.limit]
    results = []
    extra = (" packed ms | DALI / packed |", "---:|---:|") if args.packed else ("", "")
    print("| file | HxW | window (top, left, size) | fastprep.io ms | op ms | DALI ms | fastprep.io / DALI | "
          "op / DALI | max diff (fp, DALI) |" + extra[0])
    print("|---|---|---|---:|---:|---:|---:|---:|---|" + extra[1])
    for label, data in inputs:
        info = fio.jpeg_info(data)
        packed = fio.transcode_jpeg(data, max_pixels=0) if args.packed else None
        for size in (int(s) for s in args.sizes.split(",")):
            for position in POSITIONS:
                res = measure(data, size, position, args.batch, args.reps, packed)
                res.update(file=label, shape=[info.height, info.width], bytes=len(data))
                results.append(res)
                io_row, op_row, dali_row = res["rows"][:3]
                t, l, s, _ = res["window"]
                tail = ""
                if packed is not None:
                    packed_row = res["rows"][3]
                    tail = (f" {packed_row['median_ms']:.3f} | {dali_row['median_ms'] / packed_row['median_ms']:.1f}x "
                            f"(diff {packed_row['max_abs_diff_vs_full_decode']}) |")
                print(f"| {label} | {info.height}x{info.width} | {t}, {l}, {s} | {io_row['median_ms']:.3f} | "
                      f"{op_row['median_ms']:.3f} | {dali_row['median_ms']:.3f} | {io_row['time_vs_dali']:.2f}x | "
                      f"{op_row['time_vs_dali']:.2f}x | {io_row['max_abs_diff_vs_full_decode']}, "
                      f"{dali_row['max_abs_diff_vs_full_decode']} |{tail}", flush=True)
    print("\nEntropy decoding of the rows above a window (16x16 window at the bottom-left minus at the "
          "top-left; the file's bytes per second of that difference)")
    print("| file | bytes | fastprep op top-left ms | DALI top-left ms | fastprep skip ms | DALI skip ms | "
          "fastprep MB/s | DALI MB/s | skip fastprep / DALI |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    skips = []
    for label, data in inputs:
        res = measure_skip(data, args.batch, args.reps)
        res.update(file=label, bytes=len(data))
        skips.append(res)
        top, skip, rate = res["top_ms"], res["skip_ms"], res["entropy_mb_per_s"]
        print(f"| {label} | {len(data)} | {top['fastprep op']:.3f} | {top['DALI']:.3f} | {skip['fastprep op']:.3f} | "
              f"{skip['DALI']:.3f} | {rate['fastprep op']:.1f} | {rate['DALI']:.1f} | "
              f"{skip['fastprep op'] / skip['DALI']:.2f}x |", flush=True)
    ratios = [r["rows"][0]["time_vs_dali"] for r in results]
    print(f"\nfastprep.io / DALI over {len(ratios)} (file, window) cases: median {statistics.median(ratios):.2f}x, "
          f"min {min(ratios):.2f}x, max {max(ratios):.2f}x")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"describe": _platform.describe(), "libjpeg_turbo": _ops.libjpeg_turbo_version,
                       "batch": args.batch, "reps": args.reps, "results": results, "skip": skips}, f, indent=2)


if __name__ == "__main__":
    main()
