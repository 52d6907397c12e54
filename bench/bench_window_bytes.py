"""How many bytes of a packed JPEG a random window needs: the figures behind docs/pack.md's
note on fetching only a window's byte ranges from object storage.

For every JPEG of ``--photos DIR`` (and, with ``--long-side``, a copy of each resized to that
long side, q90 4:2:0, e.g. ImageNet-sized), the file is packed in memory
(``fastprep.io.transcode_jpeg``, the ``auto`` interval, interval index included) and parsed:
the header (everything before the scan's entropy-coded data, without the interval index),
the index, and where every restart interval starts and ends. Then for ``--windows`` random
``--size`` x ``--size`` windows:

* **window bytes**: the intervals the window's MCUs fall in (one pixel of context on every
  side, as the ROI decode reads for upsampling), summed: what a reader must fetch besides
  the header and index, which it can cache per file;
* **ranges**: how many contiguous byte runs those intervals form (one per MCU row the
  window touches, fewer when intervals span whole rows): the number of ranged GETs when a
  store serves one range per request (S3's GetObject does);
* **span**: from the first needed byte to the last: what a single ranged GET would fetch.

Counts only, no timing: the bytes are what they are on any machine. Medians over the
windows, per file.

    python bench/bench_window_bytes.py --photos PHOTOS_DIR [--long-side 500] [--windows 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

try:
    import fastprep  # noqa: F401
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastprep.io as fio  # noqa: E402
from bench_pack_policy import load_photos  # noqa: E402  (same folder: on sys.path when run as a script)
from bench_roi_dali import resized_q90  # noqa: E402

_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def parse_packed(data: bytes) -> dict:
    """Header layout and interval boundaries of a sequential, single-scan JPEG with restart
    markers: MCU size, MCUs per row and rows, the interval in MCUs, header bytes, interval
    index bytes (APP9 ``fastprep.rst``), and the offsets where each interval starts plus the
    offset where the last one ends."""
    i, index_bytes, interval, mcu = 2, 0, 0, None
    while True:
        if data[i] != 0xFF:
            raise ValueError(f"no marker at offset {i}")
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        body = data[i + 4:i + 2 + length]
        if marker == 0xE9 and body.startswith(b"fastprep.rst"):
            index_bytes += 2 + length
        elif marker == 0xDD:
            interval = int.from_bytes(body[:2], "big")
        elif marker in _SOF:
            height, width, ncomp = int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big"), body[5]
            factors = [(body[7 + 3 * c] >> 4, body[7 + 3 * c] & 15) for c in range(ncomp)]
            mcu = (8, 8) if ncomp == 1 else (8 * max(h for h, _ in factors), 8 * max(v for _, v in factors))
        i += 2 + length
        if marker == 0xDA:
            break
    if mcu is None or interval == 0:
        raise ValueError("not a sequential JPEG with restart markers")
    starts, j = [i], i
    while True:
        j = data.index(b"\xff", j)
        nxt = data[j + 1]
        if nxt == 0x00 or nxt == 0xFF:
            j += 1 if nxt == 0xFF else 2
        elif 0xD0 <= nxt <= 0xD7:
            starts.append(j + 2)
            j += 2
        else:
            break
    return {"width": width, "height": height, "mcu": mcu, "interval": interval,
            "mcus_per_row": -(-width // mcu[0]), "mcu_rows": -(-height // mcu[1]),
            "header_bytes": i - index_bytes, "index_bytes": index_bytes, "starts": starts, "end": j,
            "file_bytes": len(data)}


def window_cost(layout: dict, top: int, left: int, size: int) -> tuple[int, int, int]:
    """(window bytes, contiguous ranges, first-to-last span) of the intervals a window needs."""
    (mw, mh), mpr, r = layout["mcu"], layout["mcus_per_row"], layout["interval"]
    rows = range(max(top - 1, 0) // mh, min(top + size, layout["height"] - 1) // mh + 1)
    c0, c1 = max(left - 1, 0) // mw, min(left + size, layout["width"] - 1) // mw
    needed = sorted({k for row in rows for k in range((row * mpr + c0) // r, (row * mpr + c1) // r + 1)})
    bounds = layout["starts"] + [layout["end"]]
    total = sum(bounds[k + 1] - bounds[k] for k in needed)
    ranges = 1 + sum(1 for a, b in zip(needed, needed[1:]) if b != a + 1)
    return total, ranges, bounds[needed[-1] + 1] - bounds[needed[0]]


def measure(name: str, data: bytes, windows: int, size: int, rng) -> dict | None:
    packed = fio.transcode_jpeg(data)
    layout = parse_packed(packed)
    if min(layout["width"], layout["height"]) < size:
        return None
    costs = [window_cost(layout, int(rng.integers(0, layout["height"] - size + 1)),
                         int(rng.integers(0, layout["width"] - size + 1)), size) for _ in range(windows)]
    return {"name": name, "width": layout["width"], "height": layout["height"], "file_bytes": layout["file_bytes"],
            "header_bytes": layout["header_bytes"], "index_bytes": layout["index_bytes"],
            "interval_px": layout["interval"] * layout["mcu"][0] if layout["interval"] < layout["mcus_per_row"]
            else None,
            "window_bytes": statistics.median(c[0] for c in costs), "ranges": statistics.median(c[1] for c in costs),
            "span_bytes": statistics.median(c[2] for c in costs)}


def table(rows: list[dict], size: int) -> str:
    out = [f"| photo | file | header | index | {size}x{size} window: bytes (median) | of the file | ranges | "
           "one-GET span | of the file |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: r["width"] * r["height"]):
        out.append(f"| {r['name']} {r['width']}x{r['height']} | {r['file_bytes'] / 1e3:,.0f} kB | "
                   f"{r['header_bytes'] / 1e3:.1f} kB | {r['index_bytes'] / 1e3:.1f} kB | "
                   f"{r['window_bytes'] / 1e3:,.1f} kB | {100 * r['window_bytes'] / r['file_bytes']:.1f} % | "
                   f"{r['ranges']:.0f} | {r['span_bytes'] / 1e3:,.0f} kB | "
                   f"{100 * r['span_bytes'] / r['file_bytes']:.0f} % |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--photos", required=True, help="folder of real JPEG photographs")
    ap.add_argument("--long-side", type=int, default=0, help="also measure q90 copies resized to this long side")
    ap.add_argument("--windows", type=int, default=200, help="random windows per file (default 200)")
    ap.add_argument("--size", type=int, default=224, help="window side in pixels (default 224)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    for n, data in load_photos(args.photos):
        stem = n.rsplit(".", 1)[0]
        variants = [(stem, data)]
        if args.long_side:
            variants.append((f"{stem} @{args.long_side}", resized_q90(os.path.join(args.photos, n), args.long_side)))
        for label, blob in variants:
            r = measure(label, blob, args.windows, args.size, rng)
            if r is not None:
                rows.append(r)
    print(table(rows, args.size))
    return rows


if __name__ == "__main__":
    main()
