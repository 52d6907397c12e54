"""Training from S3-compatible object storage against the same files on local disk, in one run.

    python bench/bench_s3.py [--data /work/cuts] [--work /tmp/s3/bench] [--latency-ms 25] [--runs 3]
                             [--epochs 2] [--max-in-flight 64] [--json FILE]

The plain train recipe (``make_loader(SRC, recipe="imagenet-train")``, threads engine, its
default workers, CPU batches) over ``--data`` (default: the real-photo cuts, 600 JPEGs of 500
px long side), in three layouts, each read from local disk and from ``s3://``:

* ``folder``: the JPEG files (a copy of ``--data``), one whole-object GET per sample;
* ``packed``: ``python -m fastprep.pack DATA WORK/packed`` (restart intervals), whole objects;
* ``shards``: ``python -m fastprep.pack DATA WORK/shards --format wds --shard-size 8MB``, one
  range GET per sample.

The object store is :class:`fastprep.bench.s3server.LocalS3Server` on 127.0.0.1 in a
subprocess (its own GIL, but the same 2 cores as the loader), adding ``--latency-ms`` to every
request: a stand-in for the first-byte latency of object storage. Per row: samples/s (the
median of ``--runs`` runs of ``--epochs`` epochs, after one warm-up epoch; the rows of a run
are interleaved), its ratio to the same layout read locally in the same run, and from the
client's counters per epoch: requests, MB moved, requests in flight (mean, max) and retries.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import fastprep.data as D
from fastprep._platform import describe

LAYOUTS = ("folder", "packed", "shards")


def _prepare(data: str, work: str) -> None:
    os.makedirs(work, exist_ok=True)
    if not os.path.isdir(os.path.join(work, "folder")):
        shutil.copytree(data, os.path.join(work, "folder"))
    for layout, extra in (("packed", []), ("shards", ["--format", "wds", "--shard-size", "8MB"])):
        if not os.path.isdir(os.path.join(work, layout)):
            subprocess.run([sys.executable, "-m", "fastprep.pack", data, os.path.join(work, layout), "-q", *extra],
                           check=True)


def _server(work: str, latency_ms: float, lifetime_s: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "fastprep.bench.s3server", work, "--bucket", "data",
                             "--latency-ms", str(latency_ms), "--lifetime-s", str(lifetime_s)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    endpoint = proc.stdout.readline().split()[0]
    return proc, endpoint


def _store(dataset):
    return getattr(dataset, "store", None) or getattr(getattr(dataset, "_storage", None), "objects", None)


def _epochs(loader, epochs: int) -> tuple[float, int]:
    """(seconds, samples) for ``epochs`` epochs of ``loader``."""
    n = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for _, y in loader:
            n += len(y)
    return time.perf_counter() - start, n


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="/work/cuts")
    parser.add_argument("--work", default="/tmp/s3/bench")
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    _prepare(args.data, args.work)
    proc, endpoint = _server(args.work, args.latency_ms, lifetime_s=1800)
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1")
    storage = D.StorageOptions(max_in_flight=args.max_in_flight)
    try:
        loaders = {}
        for layout in LAYOUTS:
            for where, source in (("local", os.path.join(args.work, layout)), ("s3", f"s3://data/{layout}/")):
                kwargs = {"storage": storage} if where == "s3" else {}
                loader = D.make_loader(source, recipe="imagenet-train", batch_size=args.batch_size, device="cpu",
                                       seed=0, **kwargs)
                _epochs(loader, 1)  # warm-up: connections, page cache, kernels
                loaders[layout, where] = loader
        rates: dict[tuple[str, str], list[float]] = {key: [] for key in loaders}
        counters: dict[tuple[str, str], dict] = {}
        for _ in range(args.runs):
            for key, loader in loaders.items():
                store = _store(loader.dataset)
                if store is not None:
                    store.reset_stats()
                seconds, n = _epochs(loader, args.epochs)
                rates[key].append(n / seconds)
                if store is not None:
                    stats = store.stats
                    counters[key] = {k: v / args.epochs if k in ("requests", "bytes", "retries") else v
                                     for k, v in stats.items()}
    finally:
        proc.terminate()
        proc.wait(10)
    print(describe())
    print(f"inputs: {args.data} ({len(loaders['folder', 'local'].dataset)} files); plain train recipe "
          f"(imagenet-train), threads engine, batch {args.batch_size}; server: LocalS3Server, +{args.latency_ms:g} "
          f"ms per request; median of {args.runs} runs x {args.epochs} epochs; max_in_flight={args.max_in_flight}")
    print("| layout | source | samples/s | vs local | requests/epoch | MB/epoch | in flight (mean / max) | retries |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for layout in LAYOUTS:
        local = statistics.median(rates[layout, "local"])
        for where in ("local", "s3"):
            rate = statistics.median(rates[layout, where])
            c = counters.get((layout, where))
            extra = ("| - | - | - | - |" if c is None else
                     f"| {c['requests']:.0f} | {c['bytes'] / 1e6:.1f} | {c['mean_in_flight']:.1f} / "
                     f"{c['max_in_flight']:.0f} | {c['retries']:.0f} |")
            print(f"| {layout} | {where} | {rate:,.0f} | {rate / local:.2f}x " + extra)
            rows.append({"layout": layout, "source": where, "samples_per_s": rates[layout, where],
                         "median": rate, "ratio_vs_local": rate / local, "counters": c})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"platform": describe(), "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
