"""Packed files from ``s3://`` read by window against read whole, in one run: bytes moved and
samples/s for large photos and a small crop.

    python bench/bench_s3_windows.py --photos DIR [--work /tmp/packs3/windows] [--latency-ms 25]
                                     [--bandwidth-mbps 0]
                                     [--runs 3] [--epochs 4] [--batch-size 16] [--scale 0.02 0.08]

``--photos`` (JPEGs) are packed (``python -m fastprep.pack``) into ``WORK/packed`` and served
from :class:`fastprep.bench.s3server.LocalS3Server` on 127.0.0.1 (a subprocess on the same
cores) with ``--latency-ms`` added to every request (and, with ``--bandwidth-mbps``, its
bodies sent through an emulated link of that capacity: a node's share of the network). The loader: ``make_loader(URL,
transform=DecodeRandomResizedCrop(224, scale=SCALE), seed=0)``, threads engine, its default
workers, CPU batches; rows, interleaved in each run:

* ``local``: the packed folder on disk;
* ``s3, whole files``: ``StorageOptions(window_reads=False)`` (each file one GET, read ahead in
  the epoch's order);
* ``s3, default``: ``StorageOptions()`` (``window_reads="auto"``: by window the files of at
  least ``window_min_bytes``, whole the others);
* ``s3, by window, gap G``: ``StorageOptions(window_reads=True, window_gap=G)`` for each of
  ``--gaps`` (per batch: the header and interval index, then the window's intervals, ranges
  at most G bytes apart merged).

``--copies N`` links each packed file N times under other names (a longer epoch).

The epochs run on from run to run, and after each ``s3://`` row the bench waits for what its
loader reads of the next epoch as the run ends (4 batches of the largest file through the
link, plus two round trips) before the next row, so that those reads do not fall into the
next row's time; the requests and bytes per epoch include them.

Per row: samples/s (median of ``--runs`` runs of ``--epochs`` epochs after a warm-up epoch),
its ratio to the whole-file row of the same run, and from the client's counters per epoch
the requests and the bytes moved as a share of the files' bytes. The first epoch's batches of
the two ``s3://`` rows are checked against the local folder's (bit for bit) before timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

import fastprep.data as D
from fastprep._platform import describe
from fastprep.transforms import DecodeRandomResizedCrop


def _server(work: str, latency_ms: float, bandwidth_mbps: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "fastprep.bench.s3server", work, "--bucket", "data",
                             "--latency-ms", str(latency_ms), "--bandwidth-mbps", str(bandwidth_mbps),
                             "--lifetime-s", "3600"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()[0]


def _loader(source: str, args, storage=None):
    transform = DecodeRandomResizedCrop(224, scale=tuple(args.scale))
    kwargs = {} if storage is None else {"storage": storage}
    return D.make_loader(source, transform=transform, batch_size=args.batch_size, seed=0, device="cpu",
                         engine="threads", **kwargs)


def _first_epoch(loader) -> list:
    return [(x.clone(), y.clone()) for x, y in loader]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", required=True)
    parser.add_argument("--work", default="/tmp/packs3/windows")
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--bandwidth-mbps", type=float, default=0.0,
                        help="the server's emulated link, megabits per second (0: unlimited)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--scale", type=float, nargs=2, default=(0.02, 0.08))
    parser.add_argument("--gaps", type=int, nargs="+", default=[64 << 10],
                        help="StorageOptions.window_gap of each by-window row (bytes)")
    parser.add_argument("--copies", type=int, default=4, help="each packed file this many times (linked)")
    args = parser.parse_args(argv)
    packed = os.path.join(args.work, "packed")
    if not os.path.isdir(packed):
        subprocess.run([sys.executable, "-m", "fastprep.pack", args.photos, packed, "-q"], check=True)
    folder = f"packed-x{args.copies}"
    if not os.path.isdir(os.path.join(args.work, folder)):
        os.makedirs(os.path.join(args.work, folder + ".tmp"))
        for k in range(args.copies):
            for name in sorted(os.listdir(packed)):
                os.link(os.path.join(packed, name), os.path.join(args.work, folder + ".tmp", f"c{k}_{name}"))
        os.rename(os.path.join(args.work, folder + ".tmp"), os.path.join(args.work, folder))
    packed = os.path.join(args.work, folder)
    proc, endpoint = _server(args.work, args.latency_ms, args.bandwidth_mbps)
    for name in list(os.environ):
        if name.startswith("AWS_"):
            del os.environ[name]
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1")
    url = f"s3://data/{folder}/"
    rows = {"local": (packed, None), "s3, whole files": (url, D.StorageOptions(window_reads=False)),
            "s3, default (window_reads='auto')": (url, D.StorageOptions())}
    for gap in args.gaps:
        rows[f"s3, by window, gap {gap >> 10} kB"] = (url, D.StorageOptions(window_reads=True, window_gap=gap))
    try:
        loaders = {k: _loader(src, args, storage) for k, (src, storage) in rows.items()}
        ref = _first_epoch(loaders["local"])
        for key in list(rows)[1:]:
            got = _first_epoch(loaders[key])
            assert len(got) == len(ref) and all(torch.equal(x, rx) and torch.equal(y, ry)
                                                for (x, y), (rx, ry) in zip(got, ref)), key
        files_bytes = sum(loaders["s3, whole files"].dataset.sizes)
        rates: dict[str, list[float]] = {k: [] for k in rows}
        counts: dict[str, list[tuple[float, float]]] = {k: [] for k in rows}
        # the next epoch's reads a loader starts as its last epoch of a run ends (whole files;
        # docs/storage.md, "Across the epoch boundary") land before the next row starts
        settle_s = 2 * args.latency_ms / 1e3 + (4 * args.batch_size * max(loaders["s3, whole files"].dataset.sizes) * 8
                                                / (args.bandwidth_mbps * 1e6) if args.bandwidth_mbps else 0.0)
        for run in range(args.runs):
            for key, loader in loaders.items():
                store = getattr(loader.dataset, "store", None)
                if store is not None:
                    store.reset_stats()
                n, start = 0, time.perf_counter()
                for epoch in range(args.epochs):
                    loader.set_epoch(1 + run * args.epochs + epoch)  # run on: the next run takes those reads
                    for _, y in loader:
                        n += len(y)
                rates[key].append(n / (time.perf_counter() - start))
                if store is not None:
                    time.sleep(settle_s)
                    s = store.stats
                    counts[key].append((s["requests"] / args.epochs, s["bytes"] / args.epochs / files_bytes))
    finally:
        proc.terminate()
        proc.wait()
    n_files = len(loaders["local"].dataset)
    print(f"# {describe()}; {n_files} packed files, {files_bytes / 1e6:.1f} MB; +{args.latency_ms:g} ms per request; "
          + (f"a {args.bandwidth_mbps:g} Mb/s link; " if args.bandwidth_mbps else "")
          + f"DecodeRandomResizedCrop(224, scale={tuple(args.scale)}), batch {args.batch_size}; "
          f"median of {args.runs} runs x {args.epochs} epochs")
    print("| source | samples/s | vs whole files | requests/epoch | bytes moved, of the files' |")
    print("|---|---:|---:|---:|---:|")
    whole = statistics.median(rates["s3, whole files"])
    for key in rows:
        rate = statistics.median(rates[key])
        req = f"{statistics.median(c[0] for c in counts[key]):,.0f}" if counts[key] else "-"
        share = f"{100 * statistics.median(c[1] for c in counts[key]):.1f} %" if counts[key] else "-"
        print(f"| {key} | {rate:,.1f} | {rate / whole:.2f}x | {req} | {share} |")


if __name__ == "__main__":
    main()
