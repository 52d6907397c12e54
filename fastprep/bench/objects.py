"""``python -m fastprep.bench --data s3://bucket/prefix/``: the loader reading object storage.

The plain train recipe (``make_loader(URL, recipe="imagenet-train")``, threads engine, CPU
batches) over an ``s3://`` URL (a class-folder of images, packed files, or shards from
``fastprep.pack --format wds``: the layout is recognised as :func:`fastprep.data.make_loader`
does), ``--epochs`` epochs after one warm-up epoch; per epoch: samples/s, requests, bytes
moved, requests in flight (mean and max) and retries, from the client's counters. With
``--local DIR`` (the same files on disk) the same loader on DIR is measured in the same run,
epochs interleaved, and the ratio printed.

``--serve DIR`` serves DIR itself as the URL's bucket on 127.0.0.1
(:class:`fastprep.bench.s3server.LocalS3Server` in a subprocess, adding ``--latency-ms`` to
every request): a stand-in for object storage with its first-byte latency, no credentials
needed. Otherwise the endpoint and credentials come from the AWS environment variables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from fastprep._platform import describe

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fastprep.bench --data s3://...", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, metavar="s3://BUCKET/PREFIX/", help="the URL to read")
    p.add_argument("--serve", metavar="DIR", help="serve DIR as the URL's bucket on 127.0.0.1 (LocalS3Server)")
    p.add_argument("--latency-ms", type=float, default=25.0, help="with --serve: added to every request")
    p.add_argument("--local", metavar="DIR", help="the same files on disk: measured beside, ratio printed")
    p.add_argument("--recipe", default="imagenet-train", choices=("imagenet-train", "imagenet-eval"))
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=3, help="measured epochs (after one warm-up epoch)")
    p.add_argument("--max-in-flight", type=int, default=None, help="StorageOptions.max_in_flight (default 128)")
    p.add_argument("--shuffle-block", type=int, default=1, help="a block shuffle (make_loader's shuffle_block)")
    return p


def _serve(root: str, bucket: str, latency_ms: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "fastprep.bench.s3server", root, "--bucket", bucket,
                             "--latency-ms", str(latency_ms), "--lifetime-s", "3600"], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()[0]


def _epoch(loader) -> tuple[float, int]:
    n, start = 0, time.perf_counter()
    for _, y in loader:
        n += len(y)
    return time.perf_counter() - start, n


def _measure(args) -> tuple[dict[str, list], str]:
    import fastprep.data as D

    storage = D.StorageOptions() if args.max_in_flight is None else D.StorageOptions(max_in_flight=args.max_in_flight)
    common = dict(recipe=args.recipe, batch_size=args.batch_size, device="cpu", seed=0,
                  shuffle_block=args.shuffle_block)
    loaders = {"s3": D.make_loader(args.data, storage=storage, **common)}
    if args.local:
        loaders["local"] = D.make_loader(args.local, **common)
    for loader in loaders.values():
        _epoch(loader)  # warm-up: connections, page cache, kernels
    rows: dict[str, list] = {key: [] for key in loaders}
    store = loaders["s3"].dataset.object_store
    for _ in range(args.epochs):
        for key, loader in loaders.items():
            if key == "s3":
                store.reset_stats()
            seconds, n = _epoch(loader)
            rows[key].append((n / seconds, dict(store.stats) if key == "s3" else None))
    return rows, store.client_name


def main(argv: list[str]) -> int:
    """Run the measurement and print its table; returns the exit status."""
    from fastprep.data.objects import split_url

    args = build_parser().parse_args(argv)
    try:
        bucket, _ = split_url(args.data)
    except ValueError as e:
        print(f"python -m fastprep.bench: error: {e}", file=sys.stderr)
        return 2
    proc = None
    if args.serve:
        proc, endpoint = _serve(args.serve, bucket, args.latency_ms)
        os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                          AWS_REGION="us-east-1")
    try:
        rows, client = _measure(args)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
    print(describe())
    where = f"LocalS3Server serving {args.serve}, +{args.latency_ms:g} ms per request" if args.serve else \
        f"endpoint {os.environ.get('AWS_ENDPOINT_URL', 'AWS')}"
    print(f"{args.data} ({where}); client {client}; recipe {args.recipe}, threads engine, batch {args.batch_size}, "
          f"shuffle_block {args.shuffle_block}; median of {args.epochs} epochs")
    print("| source | samples/s | vs local | requests/epoch | MB/epoch | in flight (mean / max) | retries |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    local = statistics.median(r for r, _ in rows["local"]) if "local" in rows else None
    for key, runs in rows.items():
        rate = statistics.median(r for r, _ in runs)
        ratio = f"{rate / local:.2f}x" if local else "-"
        if key == "s3":
            s = runs[len(runs) // 2][1]
            print(f"| {args.data} | {rate:,.0f} | {ratio} | {s['requests']:.0f} | {s['bytes'] / 1e6:.1f} | "
                  f"{s['mean_in_flight']:.1f} / {s['max_in_flight']:.0f} | {s['retries']:.0f} |")
        else:
            print(f"| {args.local} | {rate:,.0f} | 1.00x | - | - | - | - |")
    return 0
