"""ROI JPEG decode benchmark: fastprep.io.decode_jpeg_roi vs whole-image decoders + slice.

Per sample: a 256x256 window drawn at random from a 533x800 q90 photo-like JPEG (4:2:0,
then 4:4:4), one thread. Methods take turns in blocks of --block windows (the same windows
for all) so machine noise hits all of them alike; the table gives the median per-sample
time over --runs samples and the
ratio to fastprep's ROI decode measured in the same run. "image MPix/s" counts the whole
image's pixels per second of a sample (throughput as if the whole image were delivered);
"max diff" is the largest difference from fastprep's full decode, checked on the first
window of each table (fastprep's own exactness is tested on every window in tests/).

Packed files (``fastprep.io.transcode_jpeg`` / ``python -m fastprep.pack``): the same
ROI decode on the original and on losslessly transcoded copies with restart intervals of
several lengths, same windows, same run (533x800 q90 4:2:0 with 256x256 windows, and a
12-megapixel 4000x3000 q90 4:2:0 image with 224x224 windows); then the size of packed vs
original files over a set of photo-like images and the pack throughput on --pack-workers
processes.

Real photographs (``--real DIR``): the interval index of packed files. For the JPEGs of
DIR whose packed size is closest to each of ``--real-sizes`` (default 1 MB, 4 MB, 16 MB),
a 224x224 random window decoded from
the packed file without its interval index (a scan of the whole file for markers) and with
it (only the window's intervals are read), next to the full decode of a 240x240 lossless
cut of the packed file (``jpegtran -crop``, the window plus context: what decoding only the
window's data costs) and the ROI decode of the original (files up to 5 MB: a large
progressive original takes a second per window). Same windows for all, in turns; the load
average is printed before and after.

Input types (``--inputs PHOTO``): ``fastprep.io`` reads ``bytes``, memoryviews, numpy
arrays and tensors in place, so a packed-ROI decode and a ``jpeg_info`` must cost the same
whatever the type holding the file; a copy of the file per call would show here as a gap
that grows with the file (0.58 ms against 0.34 ms for a 224x224 window of a 4.2 MB packed
photo given as ``bytes`` before the copy went). PHOTO is packed with ``transcode_jpeg``;
the same random windows for every input type, the methods in turns.

    python bench/bench_decode.py [--runs 300] [--json out.json] [--packed-only]
    python bench/bench_decode.py --real PHOTOS_DIR [--real-sizes 1MB,4MB,16MB] [--runs 300]
    python bench/bench_decode.py --inputs PHOTO [--runs 300]
    python bench/bench_decode.py --full CUTS_DIR [--files 200] [--rounds 15]

Whole-image decode against torchvision (``--full DIR``): ``fastprep.io.decode_jpeg`` (its
default, interleaved output, and ``channels_last=False``, planar) and
``torchvision.io.decode_jpeg`` on the same files of DIR (e.g. ``bench/make_photo_cuts.py``'s
cuts), one thread. Each round decodes every file once per method, the methods in a rotating
order; the table gives the median over the rounds of the mean time per file, and its ratio
to torchvision's in the same run. Every file's values are checked equal first.
"""

import argparse
import functools
import io
import json
import platform
import statistics
import time

import numpy as np
import torch

import fastprep.io as fio
from fastprep import _C, _ops, _platform
from fastprep.bench.synthetic import encode_jpeg, photo_like


def _as_bytes_tensor(data: bytes) -> torch.Tensor:
    """The encoded file as the uint8 tensor the decoders take (made once, outside the timing)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def make_methods(data: bytes, info):
    tensor = _as_bytes_tensor(data)
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
    # Methods take turns in blocks of `block` windows: each is timed in steady state (as a
    # worker decoding a stream of images), and slow drifts of the machine hit all alike.
    times = _timed_turns(methods, windows, block)
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


def _timed_turns(methods, windows, block):
    times = {name: [] for name in methods}
    for start in range(0, len(windows), block):
        for name, fn in methods.items():
            for win in windows[start:start + block]:
                t0 = time.perf_counter()
                fn(*win)
                times[name].append(time.perf_counter() - t0)
    return times


def bench_packed(height: int, width: int, window: int, runs: int, block: int = 25, seed: int = 0):
    """ROI decode of the original vs packed copies (restart every 1, 2, auto MCUs, every
    row), the same random windows for all, in turns."""
    rgb = photo_like(height, width, seed=1)
    data = encode_jpeg(rgb, quality=90, subsampling="4:2:0")
    info = fio.jpeg_info(data)
    mpr = -(-width // 16)
    variants = {"original (no restart markers)": data}
    for label, interval in (("packed, restart every MCU", 1), ("packed, restart every 2 MCUs", 2),
                            ("packed, restart auto (default)", "auto"), ("packed, restart every MCU row", mpr)):
        variants[label] = fio.transcode_jpeg(data, restart_interval=interval)
    g = torch.Generator().manual_seed(seed)
    windows = [(int(torch.randint(0, height - window + 1, (1,), generator=g)),
                int(torch.randint(0, width - window + 1, (1,), generator=g)), window, window) for _ in range(runs)]
    ref = fio.decode_jpeg(data)
    methods = {}
    for label, blob in variants.items():
        tensor = _as_bytes_tensor(blob)
        methods[label] = functools.partial(fio.decode_jpeg_roi, tensor)
        for t, l, h, w in windows[:20]:  # exactness on the same windows
            if not torch.equal(methods[label](t, l, h, w), ref[:, t:t + h, l:l + w]):
                raise AssertionError(f"{label}: not equal to the original's full decode")
    taken0 = _C.restart_stats()[0]
    times = _timed_turns(methods, windows, block)
    taken = _C.restart_stats()[0] - taken0
    base = statistics.median(times["original (no restart markers)"])
    rows = []
    for label, ts in times.items():
        med = statistics.median(ts)
        rows.append({"file": label, "restart_interval": fio.jpeg_info(variants[label]).restart_interval,
                     "bytes": len(variants[label]), "size_vs_original": len(variants[label]) / len(data),
                     "median_ms": med * 1e3, "time_vs_original_roi": med / base})
    return {"shape": [height, width], "window": window, "runs": runs, "block": block,
            "subsampling": info.subsampling, "fast_path_decodes": taken, "rows": rows}


def jpegtran(data: bytes, *args: str) -> bytes:
    """``data`` transformed losslessly by ``jpegtran -copy none -optimize ARGS``."""
    import shutil
    import subprocess

    tool = shutil.which("jpegtran")
    if tool is None:
        raise SystemExit("the lossless-cut timing needs jpegtran (apt-get install libjpeg-turbo-progs)")
    return subprocess.run([tool, "-copy", "none", "-optimize", *args], input=data, capture_output=True,
                          check=True).stdout


def jpegtran_cut(data: bytes, top: int, left: int, size: int) -> bytes:
    """A ``size`` x ``size`` window of ``data`` at (top, left), cut losslessly by jpegtran:
    the smallest JPEG holding that window, the physical limit of its decode."""
    return jpegtran(data, "-crop", f"{size}x{size}+{left}+{top}")


def pick_real_files(folder: str, targets):
    """``{target: (path, original bytes, packed bytes)}``: the JPEGs of ``folder`` whose packed
    size is closest to each target."""
    import os

    packed = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(b"\xff\xd8\xff"):
            continue
        try:
            packed.append((path, data, fio.transcode_jpeg(data, max_pixels=0)))
        except fio.DecodeError:
            continue
    if not packed:
        raise SystemExit(f"no JPEG that can be packed in {folder!r}")
    return {t: min(packed, key=lambda p: abs(len(p[2]) - t)) for t in targets}


def bench_real(path: str, data: bytes, packed: bytes, runs: int, block: int, window: int = 224, cut: int = 240,
               seed: int = 0, distinct_cuts: int = 60):
    """Packed ROI without / with the interval index vs the full decode of a jpegtran cut."""
    info = fio.jpeg_info(packed)
    plain = fio.transcode_jpeg(data, interval_index=False, max_pixels=0)
    g = torch.Generator().manual_seed(seed)
    h, w = info.height, info.width
    margin = (cut - window) // 2
    windows = [(int(torch.randint(margin, h - window - margin + 1, (1,), generator=g)),
                int(torch.randint(margin, w - window - margin + 1, (1,), generator=g)), window, window)
               for _ in range(runs)]
    cuts = [_as_bytes_tensor(jpegtran_cut(plain, t - margin, l - margin, cut))
            for t, l, _, _ in windows[:distinct_cuts]]
    tensors = {name: _as_bytes_tensor(blob)
               for name, blob in (("original", data), ("plain", plain), ("packed", packed))}
    methods = {
        "packed, no interval index (scan), decode_jpeg_roi": lambda t, l, hh, ww: fio.decode_jpeg_roi(
            tensors["plain"], t, l, hh, ww, max_pixels=0),
        "packed, interval index, decode_jpeg_roi": lambda t, l, hh, ww: fio.decode_jpeg_roi(
            tensors["packed"], t, l, hh, ww, max_pixels=0),
    }
    if len(data) <= 5_000_000:
        methods["original (as downloaded), decode_jpeg_roi"] = lambda t, l, hh, ww: fio.decode_jpeg_roi(
            tensors["original"], t, l, hh, ww, max_pixels=0)
    turn = {"k": 0}

    def decode_cut(t, l, hh, ww):
        turn["k"] += 1
        return fio.decode_jpeg(cuts[turn["k"] % len(cuts)])

    methods[f"{cut}x{cut} jpegtran -crop cut, decode_jpeg (whole cut)"] = decode_cut
    full = fio.decode_jpeg(tensors["packed"], max_pixels=0)
    used0 = _C.interval_index_stats()[0]
    for t, l, hh, ww in windows[:20]:  # exactness on the same windows
        for name in [m for m in methods if "decode_jpeg_roi" in m]:
            if not torch.equal(methods[name](t, l, hh, ww), full[:, t:t + hh, l:l + ww]):
                raise AssertionError(f"{name}: not equal to the full decode")
    if _C.interval_index_stats()[0] - used0 != 20:
        raise AssertionError("the packed file's interval index was not used")
    times = _timed_turns(methods, windows, block)
    base = statistics.median(times["packed, interval index, decode_jpeg_roi"])
    rows = [{"method": name, "median_ms": statistics.median(ts) * 1e3,
             "time_vs_indexed_roi": statistics.median(ts) / base} for name, ts in times.items()]
    import os

    return {"file": os.path.basename(path), "shape": [h, w], "subsampling": info.subsampling,
            "restart_interval": info.restart_interval, "bytes_original": len(data), "bytes_packed": len(packed),
            "bytes_packed_without_index": len(plain), "window": window, "cut": cut, "runs": runs, "rows": rows}


def run_real(folder: str, sizes, runs: int, block: int) -> list:
    import os

    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    results, seen = [], set()
    for path, data, packed in pick_real_files(folder, sizes).values():
        if path in seen:
            continue
        seen.add(path)
        res = bench_real(path, data, packed, runs, block)
        results.append(res)
        print(f"\n{res['file']}: {res['shape'][0]}x{res['shape'][1]} {res['subsampling']}, original "
              f"{res['bytes_original'] / 1e6:.2f} MB, packed {res['bytes_packed'] / 1e6:.2f} MB (index "
              f"{res['bytes_packed'] - res['bytes_packed_without_index']} bytes, restart every "
              f"{res['restart_interval']} MCUs); {res['window']}x{res['window']} random window, 1 thread, median of "
              f"{res['runs']} samples")
        print("| method | ms/sample | time vs indexed ROI |")
        print("|---|---:|---:|")
        for r in res["rows"]:
            print(f"| {r['method']} | {r['median_ms']:.3f} | {r['time_vs_indexed_roi']:.2f}x |")
    print(f"\nload average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return results


def bench_inputs(path: str, runs: int, block: int, window: int = 224, seed: int = 0) -> dict:
    """The packed-ROI decode and jpeg_info of one packed photo held as a tensor, ``bytes``, a
    memoryview and numpy arrays: the same windows for all, in turns; ratios to the tensor."""
    with open(path, "rb") as f:
        packed = fio.transcode_jpeg(f.read(), max_pixels=0)
    info = fio.jpeg_info(packed)
    inputs = {"tensor": _as_bytes_tensor(packed), "bytes": packed, "memoryview of bytes": memoryview(packed),
              "numpy array (np.frombuffer of bytes, read-only)": np.frombuffer(packed, np.uint8),
              "numpy array (writable)": np.frombuffer(bytearray(packed), np.uint8)}
    g = torch.Generator().manual_seed(seed)
    windows = [(int(torch.randint(0, info.height - window + 1, (1,), generator=g)),
                int(torch.randint(0, info.width - window + 1, (1,), generator=g)), window, window)
               for _ in range(runs)]
    methods = {}
    for name, buf in inputs.items():
        methods[("decode_jpeg_roi", name)] = functools.partial(fio.decode_jpeg_roi, buf, max_pixels=0)
        methods[("jpeg_info", name)] = lambda t, l, hh, ww, buf=buf: fio.jpeg_info(buf)
    full = fio.decode_jpeg(packed, max_pixels=0)
    for t, l, hh, ww in windows[:10]:  # exactness on the same windows, whatever the input type
        for (op, name), fn in methods.items():
            if op == "decode_jpeg_roi" and not torch.equal(fn(t, l, hh, ww), full[:, t:t + hh, l:l + ww]):
                raise AssertionError(f"{op} on {name}: not equal to the full decode")
    times = _timed_turns(methods, windows, block)
    rows = []
    for (op, name), ts in times.items():
        med, base = statistics.median(ts), statistics.median(times[(op, "tensor")])
        rows.append({"call": op, "input": name, "median_us": med * 1e6, "time_vs_tensor": med / base})
    import os

    return {"file": os.path.basename(path), "shape": [info.height, info.width], "bytes_packed": len(packed),
            "window": window, "runs": runs, "block": block, "rows": rows}


def bench_full(folder: str, files: int, rounds: int) -> dict:
    """``fastprep.io.decode_jpeg`` vs ``torchvision.io.decode_jpeg`` on the JPEGs of ``folder``."""
    import os
    import warnings

    import torchvision.io as tvio

    names = sorted(n for n in os.listdir(folder) if n.lower().endswith((".jpg", ".jpeg")))[:files]
    if not names:
        raise SystemExit(f"no JPEG files in {folder!r}")
    datas = [fio.read_file(os.path.join(folder, n)) for n in names]

    def tv(d):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoder notice
            return tvio.decode_jpeg(d, mode=tvio.ImageReadMode.RGB)

    methods = {"torchvision.io.decode_jpeg": tv,
               "fastprep.io.decode_jpeg (default: [H, W, C] memory)": fio.decode_jpeg,
               "fastprep.io.decode_jpeg(channels_last=False) (planar)": functools.partial(
                   fio.decode_jpeg, channels_last=False)}
    for d, name in zip(datas, names):  # equal values (and torchvision's layout) on every file
        want = tv(d)
        for label, fn in methods.items():
            got = fn(d)
            if not torch.equal(got, want):
                raise AssertionError(f"{label} differs from torchvision on {name}")
    got = fio.decode_jpeg(datas[0])
    same_layout = got.stride() == tv(datas[0]).stride()
    names_order = list(methods)
    times: dict = {label: [] for label in methods}
    for r in range(rounds):
        for label in names_order[r % 3:] + names_order[:r % 3]:
            fn = methods[label]
            t0 = time.perf_counter()
            for d in datas:
                fn(d)
            times[label].append((time.perf_counter() - t0) / len(datas))
    base = statistics.median(times["torchvision.io.decode_jpeg"])
    rows = [{"method": label, "median_ms": statistics.median(ts) * 1e3,
             "time_vs_torchvision": statistics.median(ts) / base} for label, ts in times.items()]
    return {"folder": folder, "files": len(datas), "rounds": rounds, "same_strides_as_torchvision": same_layout,
            "rows": rows}


def bench_pack_size_and_speed(workers: int):
    """Packed vs original size over photo-like images of several sizes, qualities and
    subsamplings; pack throughput of fastprep.pack on `workers` processes."""
    import os
    import tempfile

    from fastprep.pack import pack_folder

    shapes = [(375, 500), (500, 375), (333, 500), (533, 800), (480, 640), (768, 1024), (1200, 1600)]
    encodings = [(90, "4:2:0"), (75, "4:2:0"), (95, "4:4:4"), (85, "4:2:2")]
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        n = 0
        for si, (h, w) in enumerate(shapes):
            for q, sub in encodings:
                for seed in range(3):
                    blob = encode_jpeg(photo_like(h, w, seed=100 * si + seed), quality=q, subsampling=sub)
                    ratios.append(len(fio.transcode_jpeg(blob)) / len(blob))
                    with open(os.path.join(src, f"{n:04d}.jpg"), "wb") as f:
                        f.write(blob)
                    n += 1
        # throughput: ImageNet-sized files (the first three shapes), repeated
        tsrc = os.path.join(tmp, "tsrc")
        os.makedirs(tsrc)
        for i in range(240):
            h, w = shapes[i % 3]
            with open(os.path.join(tsrc, f"{i:04d}.jpg"), "wb") as f:
                f.write(encode_jpeg(photo_like(h, w, seed=i), quality=90, subsampling="4:2:0"))
        t0 = time.perf_counter()
        summary = pack_folder(tsrc, os.path.join(tmp, "tdst"), workers=workers, progress=False)
        elapsed = time.perf_counter() - t0
    ratios.sort()
    return {"images": len(ratios), "size_ratio_median": statistics.median(ratios), "size_ratio_min": ratios[0],
            "size_ratio_max": ratios[-1], "pack_images": summary.packed, "pack_workers": workers,
            "pack_images_per_s": summary.packed / elapsed}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300, help="samples (windows) per method")
    ap.add_argument("--block", type=int, default=25, help="consecutive windows per method per turn")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--packed-only", action="store_true", help="only the packed-file tables")
    ap.add_argument("--pack-workers", type=int, default=2, help="processes for the pack throughput row")
    ap.add_argument("--real", metavar="DIR", help="only the interval-index tables, on the JPEGs of DIR")
    ap.add_argument("--inputs", metavar="PHOTO", help="only the input-type table, on PHOTO packed")
    ap.add_argument("--real-sizes", default="1MB,4MB,16MB",
                    help="with --real: packed sizes to pick files by, comma-separated (default 1MB,4MB,16MB)")
    ap.add_argument("--full", metavar="DIR", help="only the whole-image decode vs torchvision, on the JPEGs of DIR")
    ap.add_argument("--files", type=int, default=200, help="with --full: files of DIR (default 200)")
    ap.add_argument("--rounds", type=int, default=15, help="with --full: rounds (default 15)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(_platform.describe())
    results = {"machine": {"cpu": platform.processor() or platform.machine(), "describe": _platform.describe(),
                           "torch": torch.__version__, "libjpeg_turbo": _ops.libjpeg_turbo_version},
               "tables": [], "packed": []}
    if args.full:
        import os

        load = os.getloadavg()[0]
        res = results["full"] = bench_full(args.full, args.files, args.rounds)
        print(f"\nwhole-image RGB decode, {res['files']} files of {args.full}, 1 thread, median of {res['rounds']} "
              f"rounds (methods in turns), equal values on every file, same strides as torchvision: "
              f"{res['same_strides_as_torchvision']}; load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
        print("| method | ms/file | time vs torchvision |")
        print("|---|---:|---:|")
        for r in res["rows"]:
            print(f"| {r['method']} | {r['median_ms']:.3f} | {r['time_vs_torchvision']:.3f}x |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        return
    if args.inputs:
        res = results["inputs"] = bench_inputs(args.inputs, args.runs, args.block)
        print(f"\n{res['file']} packed ({res['shape'][0]}x{res['shape'][1]}, {res['bytes_packed'] / 1e6:.2f} MB), "
              f"{res['window']}x{res['window']} random window, 1 thread, median of {res['runs']} calls, in turns")
        print("| call | input | us/call | time vs tensor |")
        print("|---|---|---:|---:|")
        for r in res["rows"]:
            print(f"| {r['call']} | {r['input']} | {r['median_us']:.1f} | {r['time_vs_tensor']:.3f}x |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        return
    if args.real:
        from fastprep.pack.shards import parse_size

        sizes = [parse_size(v) for v in args.real_sizes.split(",")]
        results["real"] = run_real(args.real, sizes, args.runs, args.block)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        return
    for height, width, window in ((533, 800, 256), (3000, 4000, 224)):
        res = bench_packed(height, width, window, args.runs, args.block)
        results["packed"].append(res)
        print(f"\n{height}x{width} q90 4:2:0, {window}x{window} random window, ROI decode of the original vs "
              f"packed copies, 1 thread, median of {res['runs']} samples (same windows, same run; "
              f"{res['fast_path_decodes']} restart-interval decodes)")
        print("| file | restart interval (MCUs) | KiB | size vs original | ms/sample | time vs original ROI |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in res["rows"]:
            print(f"| {r['file']} | {r['restart_interval']} | {r['bytes'] / 1024:.1f} | {r['size_vs_original']:.3f} | "
                  f"{r['median_ms']:.3f} | {r['time_vs_original_roi']:.2f}x |")
    pack = bench_pack_size_and_speed(args.pack_workers)
    results["pack"] = pack
    print(f"\npacked vs original size over {pack['images']} photo-like images (7 sizes 333x500..1200x1600, "
          f"q75-95, 4:2:0/4:2:2/4:4:4): median {pack['size_ratio_median']:.4f}, min {pack['size_ratio_min']:.4f}, "
          f"max {pack['size_ratio_max']:.4f}")
    print(f"pack throughput: {pack['pack_images_per_s']:.1f} images/s ({pack['pack_images']} images of "
          f"ImageNet size, {pack['pack_workers']} processes)")
    for subsampling in () if args.packed_only else ("4:2:0", "4:4:4"):
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
