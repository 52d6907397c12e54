"""The restart-interval policy of ``fastprep.pack`` on real photographs: size and ROI speed.

For every JPEG of ``--photos DIR``:

* **Size.** The packed size (``fastprep.io.transcode_jpeg``, interval index included)
  relative to the original, for the current ``"auto"`` policy and for the previous one
  (intervals about 64 px wide whatever the file, re-implemented here as
  :func:`previous_auto_interval`); and, for progressive originals, the cost of turning
  them into one sequential scan on its own (``restart_interval=0``: no markers, no index).
* **ROI speed** (``--roi``, default on). A 224x224 window at random positions, decoded with
  ``decode_jpeg_roi`` from the file packed by each policy, next to the full decode of a
  240x240 lossless cut around the window (``jpegtran -crop`` of the file packed without
  restart markers: what decoding only the window's data costs). One thread, the same
  windows for every method, methods in turns (blocks of ``--block`` windows) so the
  machine's load hits them alike; each call's thread CPU time (wall time on a loaded
  machine counts preemptions); medians and means compared within the run.
* **Sweep** (``--sweep NAME[,NAME...]``): for those photos, size and ROI time for a range
  of fixed intervals (about 32 to 512 px wide, and whole MCU rows): the trade-off the
  policy chooses from.

    python bench/bench_pack_policy.py --photos PHOTOS_DIR --runs 200
    python bench/bench_pack_policy.py --photos PHOTOS_DIR --no-roi            # sizes only
    python bench/bench_pack_policy.py --photos PHOTOS_DIR --sweep 5120x2880.jpg,the-mouse.jpg

Prints Markdown tables and, with ``--json PATH``, writes the raw numbers.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time

import torch

import fastprep.io as fio
from fastprep import _platform

from bench_decode import jpegtran, jpegtran_cut  # same folder: the script's directory is on sys.path

WINDOW = 224
CUT = 240


def as_tensor(data: bytes) -> torch.Tensor:
    """The bytes as a uint8 tensor, converted once rather than on every decode call."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def mcu_size(info) -> tuple[int, int]:
    """(MCU width, MCU height) in pixels."""
    if info.num_components == 1:
        return 8, 8
    return 8 * max(h for h, _ in info.sampling_factors), 8 * max(v for _, v in info.sampling_factors)


def previous_auto_interval(info) -> int:
    """The ``"auto"`` interval before the size-aware policy: the divisor of the MCUs per row
    closest to 64 px wide (ties: the wider; at most 128 px); whole rows under 32 px."""
    mcu_w, _ = mcu_size(info)
    mpr = -(-info.width // mcu_w)
    divisors = [d for d in range(1, mpr + 1) if mpr % d == 0 and d * mcu_w <= 128]
    best = min(divisors, key=lambda d: (abs(d * mcu_w - 64), -d))
    return best if best * mcu_w >= 32 else mpr


def interval_label(info, interval: int) -> str:
    mcu_w, _ = mcu_size(info)
    mpr = -(-info.width // mcu_w)
    if interval == 0:
        return "none"
    if interval % mpr == 0:
        return "row" if interval == mpr else f"{interval // mpr} rows"
    return f"{interval * mcu_w} px"


def load_photos(folder: str, names=None) -> list:
    """``[(name, bytes)]``: the JPEGs of ``folder`` (by their first bytes), sorted by name."""
    out = []
    for name in sorted(os.listdir(folder)):
        if names is not None and name not in names:
            continue
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        if data.startswith(b"\xff\xd8\xff"):
            out.append((name, data))
    if not out:
        raise SystemExit(f"no JPEG in {folder!r}" + (f" named {sorted(names)}" if names else ""))
    return out


def size_row(name: str, data: bytes) -> dict:
    """Sizes of one photo packed by both policies and without markers."""
    info = fio.jpeg_info(data)
    new = fio.transcode_jpeg(data, max_pixels=0)
    old = fio.transcode_jpeg(data, restart_interval=previous_auto_interval(info), max_pixels=0)
    plain = fio.transcode_jpeg(data, restart_interval=0, max_pixels=0)
    new_info = fio.jpeg_info(new)
    return {"file": name, "height": info.height, "width": info.width, "subsampling": info.subsampling,
            "progressive": info.progressive, "bytes_original": len(data), "bytes_no_markers": len(plain),
            "bytes_previous": len(old), "interval_previous": previous_auto_interval(info),
            "label_previous": interval_label(info, previous_auto_interval(info)),
            "bytes_new": len(new), "interval_new": new_info.restart_interval,
            "label_new": interval_label(new_info, new_info.restart_interval)}


def random_windows(h: int, w: int, runs: int, seed: int) -> list:
    """Windows with room for the cut's margin on every side."""
    g = torch.Generator().manual_seed(seed)
    m = (CUT - WINDOW) // 2
    return [(int(torch.randint(m, h - WINDOW - m + 1, (1,), generator=g)),
             int(torch.randint(m, w - WINDOW - m + 1, (1,), generator=g)), WINDOW, WINDOW) for _ in range(runs)]


def timed_turns(methods: dict, windows: list, block: int) -> dict:
    """``{name: [seconds of this thread's CPU time per call]}``. CPU time, not wall time: on
    a loaded machine a call of a few ms is often preempted, which inflates wall times the
    more the longer the call."""
    times: dict = {name: [] for name in methods}
    for start in range(0, len(windows), block):
        for name, fn in methods.items():
            for win in windows[start:start + block]:
                t0 = time.thread_time()
                fn(*win)
                times[name].append(time.thread_time() - t0)
    return times


def roi_ratios(data: bytes, variants: dict, runs: int, block: int, seed: int, distinct_cuts: int) -> dict:
    """``{label: median ROI time / median cut-decode time}``, the same with means as
    ``"<label> (mean)"``, and ``"cut_ms"`` (median): a 224x224 window from each packed
    variant vs the full decode of a 240x240 lossless cut, in turns. The median is the
    typical window; the mean counts the windows that span one interval more (the cost of
    a window is bimodal when intervals are about as wide as it)."""
    plain = fio.transcode_jpeg(data, restart_interval=0, max_pixels=0)
    info = fio.jpeg_info(plain)
    windows = random_windows(info.height, info.width, runs, seed)
    m = (CUT - WINDOW) // 2
    cuts = [as_tensor(jpegtran_cut(plain, t - m, l - m, CUT)) for t, l, _, _ in windows[:distinct_cuts]]
    full = fio.decode_jpeg(plain, max_pixels=0)
    methods = {}
    for label, blob in variants.items():
        methods[label] = functools.partial(fio.decode_jpeg_roi, as_tensor(blob), max_pixels=0)
        for t, l, h, w in windows[:5]:  # exactness on the timed windows
            if not torch.equal(methods[label](t, l, h, w), full[:, t:t + h, l:l + w]):
                raise AssertionError(f"{label}: the window differs from the full decode")
    turn = [0]

    def decode_cut(t, l, h, w):
        turn[0] += 1
        return fio.decode_jpeg(cuts[turn[0] % len(cuts)])

    methods["cut"] = decode_cut
    times = timed_turns(methods, windows, block)
    cut = times.pop("cut")
    out = {label: statistics.median(ts) / statistics.median(cut) for label, ts in times.items()}
    out.update({f"{label} (mean)": statistics.fmean(ts) / statistics.fmean(cut) for label, ts in times.items()})
    out["cut_ms"] = statistics.median(cut) * 1e3
    return out


def restart_cost(data: bytes, runs: int, block: int, seed: int, distinct_cuts: int) -> dict:
    """The cost of libjpeg-turbo's slower Huffman path on a window's data: with restart
    markers it decodes every MCU of the scan on its slower path (and reads each marker).
    The same 240x240 lossless cuts decoded in full without markers, with the packed file's
    interval, and with a marker every MCU, in turns: ``{label: median time / median time
    without markers}`` and ``"cut_ms"``. Every version must decode to the same pixels."""
    plain = fio.transcode_jpeg(data, restart_interval=0, max_pixels=0)
    interval = fio.jpeg_info(fio.transcode_jpeg(data, max_pixels=0)).restart_interval
    info = fio.jpeg_info(plain)
    m = (CUT - WINDOW) // 2
    cuts = [jpegtran_cut(plain, t - m, l - m, CUT) for t, l, _, _ in random_windows(info.height, info.width,
                                                                                    distinct_cuts, seed)]
    versions = {"none": cuts, "packed interval": [jpegtran(c, "-restart", f"{interval}B") for c in cuts],
                "every MCU": [jpegtran(c, "-restart", "1B") for c in cuts]}
    tensors = {label: [as_tensor(c) for c in blobs] for label, blobs in versions.items()}
    for k in range(len(cuts)):
        want = fio.decode_jpeg(tensors["none"][k])
        for label in ("packed interval", "every MCU"):
            if fio.jpeg_info(versions[label][k]).restart_interval == 0 or \
                    not torch.equal(fio.decode_jpeg(tensors[label][k]), want):
                raise AssertionError(f"{label}: cut {k} lacks markers or decodes to other pixels")
    methods = {label: functools.partial(lambda ts, k: fio.decode_jpeg(ts[k % len(ts)]), ts)
               for label, ts in tensors.items()}
    times = timed_turns(methods, [(k,) for k in range(runs)], block)
    base = statistics.median(times["none"])
    return {"packed interval": statistics.median(times["packed interval"]) / base,
            "every MCU": statistics.median(times["every MCU"]) / base, "cut_ms": base * 1e3, "interval": interval}


def sweep(name: str, data: bytes, runs: int, block: int, seed: int, distinct_cuts: int) -> list:
    """Size and ROI-vs-cut ratio for fixed intervals of about 32-512 px and whole rows."""
    info = fio.jpeg_info(data)
    mcu_w, _ = mcu_size(info)
    mpr = -(-info.width // mcu_w)
    divisors = [d for d in range(1, mpr + 1) if mpr % d == 0]
    chosen = []
    for px in (32, 64, 96, 128, 192, 256, 384, 512):
        d = min(divisors, key=lambda d: abs(d * mcu_w - px))
        chosen.append(d)
    auto = fio.jpeg_info(fio.transcode_jpeg(data, max_pixels=0)).restart_interval
    chosen = sorted(set(chosen) | {mpr, auto})
    variants = {interval_label(info, d): fio.transcode_jpeg(data, restart_interval=d, max_pixels=0) for d in chosen}
    auto_label = interval_label(info, auto)
    ratios = roi_ratios(data, variants, runs, block, seed, distinct_cuts)
    return [{"file": name, "interval": d, "label": label, "auto": label == auto_label,
             "size_vs_original": len(blob) / len(data), "roi_vs_cut": ratios[label],
             "roi_vs_cut_mean": ratios[f"{label} (mean)"], "cut_ms": ratios["cut_ms"]}
            for d, (label, blob) in zip(chosen, variants.items())]


def pct(x: float) -> str:
    return f"{100 * (x - 1):+.2f} %"


def print_sizes(rows: list) -> None:
    print("| photo | size | original | previous auto | size vs original | new auto | size vs original |"
          " no markers vs original |")
    print("|---|---|---:|---|---:|---|---:|---:|")
    for r in rows:
        kind = r["subsampling"] + (" prog." if r["progressive"] else "")
        print(f"| {r['file']} | {r['width']}x{r['height']} {kind} | {r['bytes_original'] / 1e6:.2f} MB | "
              f"{r['label_previous']} | {pct(r['bytes_previous'] / r['bytes_original'])} | {r['label_new']} | "
              f"{pct(r['bytes_new'] / r['bytes_original'])} | {pct(r['bytes_no_markers'] / r['bytes_original'])} |")
    print()
    summary = size_summary(rows)
    for key, label in (("previous", "previous auto"), ("new", "new auto"), ("markers_new", "new auto vs no markers"),
                       ("progressive_to_sequential", "progressive -> sequential (no markers)")):
        s = summary[key]
        if s["n"]:
            print(f"{label}: median {pct(s['median'])}, worst {pct(s['worst'])} ({s['worst_file']}), n={s['n']}")


def size_summary(rows: list) -> dict:
    def stats(pairs):
        if not pairs:
            return {"n": 0}
        vals = [v for _, v in pairs]
        worst = max(pairs, key=lambda p: p[1])
        return {"n": len(vals), "median": statistics.median(vals), "worst": worst[1], "worst_file": worst[0]}

    return {
        "previous": stats([(r["file"], r["bytes_previous"] / r["bytes_original"]) for r in rows]),
        "new": stats([(r["file"], r["bytes_new"] / r["bytes_original"]) for r in rows]),
        "markers_new": stats([(r["file"], r["bytes_new"] / r["bytes_no_markers"]) for r in rows]),
        "progressive_to_sequential": stats([(r["file"], r["bytes_no_markers"] / r["bytes_original"])
                                            for r in rows if r["progressive"]]),
    }


def finish(results: dict, json_path: str | None) -> int:
    """The run's closing load average, and its numbers written to ``json_path`` if given."""
    print(f"\nload average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def print_restart_cost(photos: list, args, results: dict) -> int:
    print(f"\n240x240 lossless cuts decoded in full with restart markers / without, median of {args.runs} "
          f"decodes of {args.cuts} cuts per photo, 1 thread\n")
    print("| photo | cut decode, no markers | packed interval | markers at that interval | a marker every MCU |")
    print("|---|---:|---|---:|---:|")
    rows = []
    for name, data in photos:
        r = restart_cost(data, args.runs, args.block, args.seed, args.cuts)
        rows.append({"file": name, **r})
        print(f"| {name} | {r['cut_ms']:.3f} ms | {r['interval']} MCUs | {r['packed interval']:.3f}x | "
              f"{r['every MCU']:.3f}x |", flush=True)
    for key in ("packed interval", "every MCU"):
        vals = [r[key] for r in rows]
        print(f"{key}: median {statistics.median(vals):.3f}x, min {min(vals):.3f}x, max {max(vals):.3f}x")
    results["restart_cost"] = rows
    return finish(results, args.json)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--photos", required=True, help="folder of JPEG photographs")
    ap.add_argument("--runs", type=int, default=200, help="random windows per photo (default 200)")
    ap.add_argument("--block", type=int, default=20, help="windows per turn (default 20)")
    ap.add_argument("--cuts", type=int, default=20, help="distinct jpegtran cuts per photo (default 20)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-roi", action="store_true", help="sizes only")
    ap.add_argument("--sweep", default="", help="comma-separated photo names: size and ROI time per fixed interval")
    ap.add_argument("--only", default="", help="comma-separated photo names (default: all)")
    ap.add_argument("--restart-cost", action="store_true",
                    help="only the slow-Huffman-path cost: the same lossless cuts decoded with and without "
                         "restart markers")
    ap.add_argument("--json", help="write the raw numbers here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(_platform.describe())
    print(f"libjpeg-turbo via fastprep; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    results: dict = {"cpu": _platform.describe(), "runs": args.runs}
    photos = load_photos(args.photos, set(args.only.split(",")) if args.only else None)
    if args.restart_cost:
        return print_restart_cost(photos, args, results)
    if args.sweep:
        results["sweep"] = []
        for name, data in load_photos(args.photos, set(args.sweep.split(","))):
            rows = sweep(name, data, args.runs, args.block, args.seed, args.cuts)
            results["sweep"] += rows
            info = fio.jpeg_info(data)
            print(f"\n{name} ({info.width}x{info.height} {info.subsampling}, {len(data) / 1e6:.2f} MB): "
                  f"224x224 ROI vs 240x240 cut decode ({rows[0]['cut_ms']:.3f} ms), median of {args.runs}")
            print("| interval | size vs original | ROI / cut, median | ROI / cut, mean |")
            print("|---|---:|---:|---:|")
            for r in rows:
                mark = " (auto)" if r["auto"] else ""
                print(f"| {r['label']}{mark} | {pct(r['size_vs_original'])} | {r['roi_vs_cut']:.2f}x | "
                      f"{r['roi_vs_cut_mean']:.2f}x |")
        return finish(results, args.json)
    rows = []
    for name, data in photos:
        rows.append(size_row(name, data))
    results["sizes"] = rows
    results["size_summary"] = size_summary(rows)
    print(f"\nPacked size vs original, {len(rows)} photos (interval index included)\n")
    print_sizes(rows)
    if not args.no_roi:
        print(f"\n224x224 ROI decode of the packed file / full decode of a 240x240 jpegtran cut, median of "
              f"{args.runs} random windows, 1 thread\n")
        print("| photo | cut decode | previous auto | ROI / cut (median, mean) | new auto | ROI / cut (median, mean) |")
        print("|---|---:|---|---:|---|---:|")
        for name, data in photos:
            r = next(r for r in rows if r["file"] == name)
            info = fio.jpeg_info(data)
            variants = {"previous": fio.transcode_jpeg(data, restart_interval=r["interval_previous"], max_pixels=0),
                        "new": fio.transcode_jpeg(data, max_pixels=0)}
            ratios = roi_ratios(data, variants, args.runs, args.block, args.seed, args.cuts)
            r.update(roi_previous=ratios["previous"], roi_new=ratios["new"], cut_ms=ratios["cut_ms"],
                     roi_previous_mean=ratios["previous (mean)"], roi_new_mean=ratios["new (mean)"])
            print(f"| {name} ({info.width}x{info.height}) | {ratios['cut_ms']:.3f} ms | {r['label_previous']} | "
                  f"{ratios['previous']:.2f}x, {ratios['previous (mean)']:.2f}x | {r['label_new']} | "
                  f"{ratios['new']:.2f}x, {ratios['new (mean)']:.2f}x |", flush=True)
        for key in ("roi_previous", "roi_new", "roi_previous_mean", "roi_new_mean"):
            vals = [r[key] for r in rows]
            print(f"{key}: median {statistics.median(vals):.2f}x, worst {max(vals):.2f}x")
    return finish(results, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
