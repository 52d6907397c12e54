"""Training from S3-compatible object storage against the same files on local disk, in one run.

    python bench/bench_s3.py [--data /work/cuts] [--copies 4] [--work DIR] [--latency-ms 25] [--runs 3]
                             [--epochs 2] [--max-in-flight 128] [--shuffle-block 16[,64]] [--per-batch] [--processes]
                             [--layouts folder,packed,shards] [--clients auto|native,obstore] [--peers]
                             [--json FILE]

The plain train recipe (``make_loader(SRC, recipe="imagenet-train")``, threads engine, its
default workers, CPU batches) over ``--data`` (default: the real-photo cuts, 600 JPEGs of 500
px long side), in three layouts, each read from local disk and from ``s3://``:

* ``folder``: the JPEG files (a copy of ``--data``), one whole-object GET per sample;
* ``packed``: ``python -m fastprep.pack DATA WORK/packed`` (restart intervals), whole objects;
* ``shards``: ``python -m fastprep.pack DATA WORK/shards --format wds --shard-size 8MB``, one
  range GET per sample.

``--clients native,obstore`` reads each ``s3://`` row with each client
(``StorageOptions.client``; default ``auto``: the native client on this plain-http server),
``--layouts`` picks layouts, ``--tls`` serves HTTPS (a CA made for the run). ``--copies N``
makes every file N times (a longer epoch, whose first round trip weighs less);
``--shuffle-block B`` adds the shards read with a block shuffle of B (one range read per
block), ``--per-batch`` the shards without read-ahead (each batch's reads issued when a
reader takes it), ``--processes`` the shards on the processes engine, ``--peers`` LitData,
Mosaic streaming and WebDataset on the same server and images (bench/s3_peers.py, each in its
own process; one that is not installed or fails is reported in its rows, the others still
run).

The object store is :class:`fastprep.bench.s3server.LocalS3Server` on 127.0.0.1 in a
subprocess (its own GIL, but the same 2 cores as the loader), adding ``--latency-ms`` to every
request: a stand-in for the first-byte latency of object storage. Per row: samples/s (the
median of ``--runs`` runs of ``--epochs`` epochs, after one warm-up epoch; the rows of a run
are interleaved), its ratio to the same layout read locally in the same run, and from the
client's counters per epoch: requests, MB moved, requests in flight (mean, max) and retries.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import fastprep.data as D
from fastprep._platform import describe


#: rows: (layout, its folder, make_loader keywords); the block-shuffle row reads the shards
ROWS = {"folder": ("folder", {}), "packed": ("packed", {}), "shards": ("shards", {})}


def _prepare(data: str, work: str, copies: int) -> None:
    os.makedirs(work, exist_ok=True)
    if copies > 1 and not os.path.isdir(os.path.join(work, "source")):
        # an epoch of `copies` times the files (a longer epoch: its start-up weighs less)
        os.makedirs(os.path.join(work, "source.tmp"))
        for k in range(copies):
            for name in sorted(os.listdir(data)):
                shutil.copyfile(os.path.join(data, name), os.path.join(work, "source.tmp", f"c{k}_{name}"))
        os.rename(os.path.join(work, "source.tmp"), os.path.join(work, "source"))
    if copies > 1:
        data = os.path.join(work, "source")
    if not os.path.isdir(os.path.join(work, "folder")):
        shutil.copytree(data, os.path.join(work, "folder"))
    for layout, extra in (("packed", []), ("shards", ["--format", "wds", "--shard-size", "8MB"])):
        if not os.path.isdir(os.path.join(work, layout)):
            subprocess.run([sys.executable, "-m", "fastprep.pack", data, os.path.join(work, layout), "-q", *extra],
                           check=True)


def _server(work: str, latency_ms: float, lifetime_s: float, tls: bool = False) -> tuple[subprocess.Popen, str]:
    extra = []
    if tls:  # a CA of the bench's own; the clients trust it through AWS_CA_BUNDLE
        from fastprep.bench.s3server import local_certificates

        folder = work.rstrip("/") + "-tls"  # beside the served folder, not in it
        os.makedirs(folder, exist_ok=True)
        cert, key, ca = local_certificates(folder)
        extra = ["--tls", cert, key]
        os.environ["AWS_CA_BUNDLE"] = ca
    proc = subprocess.Popen([sys.executable, "-m", "fastprep.bench.s3server", work, "--bucket", "data",
                             "--latency-ms", str(latency_ms), "--lifetime-s", str(lifetime_s), *extra],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    endpoint = proc.stdout.readline().split()[0]
    return proc, endpoint


def _store(dataset):
    if not isinstance(dataset, D.JpegDataset):  # a peer's
        return None
    return getattr(dataset, "store", None) or getattr(getattr(dataset, "_storage", None), "objects", None)


def _cpu_s(pid: int | None = None) -> float:
    """CPU seconds of this process (``pid`` None) or of process ``pid`` (from /proc)."""
    if pid is None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _epochs(loader, epochs: int, server_pid: int) -> tuple[float, int, float, float]:
    """(seconds, samples, loader CPU s, server CPU s) for ``epochs`` epochs of ``loader``."""
    n = 0
    cpu, server = _cpu_s(), _cpu_s(server_pid)
    start = time.perf_counter()
    for _ in range(epochs):
        for _, y in loader:
            n += len(y)
    return time.perf_counter() - start, n, _cpu_s() - cpu, _cpu_s(server_pid) - server


#: bench/s3_peers.py's peers and their layouts
PEERS = {"litdata": "16 MB chunks", "mosaic": "16 MB shards", "webdataset": "whole shards"}

#: a peer's run that takes longer than this fails (its rows then say so)
PEER_TIMEOUT_S = 900


def _peer_run(key, args, endpoint: str, server_pid: int, size: int, rates: list, cpu: list) -> str | None:
    """One run of a peer in its own process (bench/s3_peers.py): its epochs' median rate, or
    why it failed (not installed, an error, a timeout): the other rows still run."""
    peer, where = key[0].split(" ")[0], key[1]
    server = _cpu_s(server_pid)
    try:
        out = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3_peers.py"),
                              peer, where, "--work", args.work, "--endpoint", endpoint, "--epochs", str(args.epochs),
                              "--batch-size", str(args.batch_size)], check=True, capture_output=True, text=True,
                             timeout=PEER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no result within {PEER_TIMEOUT_S} s"
    except subprocess.CalledProcessError as e:
        lines = [x for x in e.stderr.strip().splitlines() if x.strip()]
        return lines[-1] if lines else f"exit status {e.returncode}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    rates.append(statistics.median(result["rates"]))
    n = (len(result["rates"]) + 1) * size  # the server's CPU over the warm-up and measured epochs
    cpu.append((statistics.median(result["cpu_ms"]), 1000 * (_cpu_s(server_pid) - server) / n))
    return None


def _table(rates: dict, cpu: dict, counters: dict, failed: dict) -> list[dict]:
    """Print the rows (a peer that failed: why) and return them for ``--json``."""
    print("| layout | source | samples/s | vs local | CPU ms/sample (loader + server) | requests/epoch | MB/epoch "
          "| in flight (mean / max) | retries |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    table: list[dict] = []
    for layout, where in rates:
        if not rates[layout, where]:
            why = failed.get((layout, where), "no run")
            print(f"| {layout} | {where} | failed: {why.replace('|', '/')} | | | | | | |")
            table.append({"layout": layout, "source": where, "failed": why})
            continue
        local = statistics.median(rates[layout, "local"]) if rates[layout, "local"] else None
        rate = statistics.median(rates[layout, where])
        client_ms = statistics.median(c for c, _ in cpu[layout, where])
        server_ms = statistics.median(s for _, s in cpu[layout, where])
        c = counters.get((layout, where))
        extra = ("| - | - | - | - |" if c is None else
                 f"| {c['requests']:.0f} | {c['bytes'] / 1e6:.1f} | {c['mean_in_flight']:.1f} / "
                 f"{c['max_in_flight']:.0f} | {c['retries']:.0f} |")
        used = f"{client_ms:.2f}" + (f" + {server_ms:.2f}" if where != "local" else "")
        ratio = "-" if local is None else f"{rate / local:.2f}x"
        print(f"| {layout} | {where} | {rate:,.0f} | {ratio} | {used} " + extra)
        table.append({"layout": layout, "source": where, "samples_per_s": rates[layout, where], "median": rate,
                     "ratio_vs_local": None if local is None else rate / local, "cpu_ms_per_sample": cpu[layout, where],
                     "counters": c})
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="/work/cuts")
    parser.add_argument("--work", help="where the layouts are written (default /tmp/s3/bench, "
                        "/tmp/s3/bench-xN with --copies N)")
    parser.add_argument("--copies", type=int, default=1, help="each file this many times (a longer epoch)")
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-in-flight", type=int, default=128)
    parser.add_argument("--serial", action=argparse.BooleanOptionalAction, default=True,
                        help="also one epoch of s3:// shards with one request in flight")
    parser.add_argument("--shuffle-block", default="16",
                        help="also the shards with these block shuffles (comma-separated sizes; 0: none)")
    parser.add_argument("--per-batch", action="store_true",
                        help="also the shards without read-ahead (each batch's reads issued when it is taken)")
    parser.add_argument("--processes", action="store_true",
                        help="also the shards on the processes engine (DataLoader workers, a batch's reads "
                        "in flight together)")
    parser.add_argument("--peers", action="store_true",
                        help="also LitData, Mosaic streaming and WebDataset on the same server and images "
                        "(bench/s3_peers.py)")
    parser.add_argument("--clients", default="auto",
                        help="comma-separated StorageOptions.client values, a row each (auto, native, obstore)")
    parser.add_argument("--tls", action="store_true",
                        help="the server speaks HTTPS (a CA made for the run; needs cryptography)")
    parser.add_argument("--layouts", default="folder,packed,shards",
                        help="comma-separated layouts to run (default: all three)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    layouts = [x for x in args.layouts.split(",") if x]
    if not layouts or any(x not in ROWS for x in layouts):
        parser.error(f"--layouts takes some of {', '.join(ROWS)}, got {args.layouts!r}")
    if args.work is None:
        args.work = "/tmp/s3/bench" if args.copies == 1 else f"/tmp/s3/bench-x{args.copies}"
    _prepare(args.data, args.work, args.copies)
    proc, endpoint = _server(args.work, args.latency_ms, lifetime_s=1800, tls=args.tls)
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_REGION="us-east-1")
    storage = D.StorageOptions(max_in_flight=args.max_in_flight)
    try:
        loaders = {}
        rows = {k: v for k, v in ROWS.items() if k in layouts}
        if args.per_batch and "shards" in layouts:
            rows["shards, per batch"] = ("shards", {"storage": D.StorageOptions(max_in_flight=args.max_in_flight,
                                                                               read_ahead=False)})
        if args.processes and "shards" in layouts:
            rows["shards, processes engine"] = ("shards", {"engine": "processes"})
        for block in (int(b) for b in args.shuffle_block.split(",") if b):
            if block > 1 and "shards" in layouts:
                rows[f"shards, blocks of {block}"] = ("shards", {"shuffle_block": block})
        clients = [c for c in args.clients.split(",") if c]
        for layout, (folder, options) in rows.items():
            sources = [("local", os.path.join(args.work, folder), None)]
            sources += [("s3" if clients == ["auto"] else f"s3, {c}", f"s3://data/{folder}/", c) for c in clients]
            for where, source, client in sources:
                kwargs = {k: v for k, v in options.items() if k != "storage"}
                if client is not None:
                    kwargs["storage"] = dataclasses.replace(options.get("storage", storage), client=client)
                loader = D.make_loader(source, recipe="imagenet-train", batch_size=args.batch_size, device="cpu",
                                       seed=0, **kwargs)
                _epochs(loader, 1, proc.pid)  # warm-up: connections, page cache, kernels
                loaders[layout, where] = loader
        peers = [(f"{peer} ({what})", where) for peer, what in PEERS.items() for where in ("local", "s3")] \
            if args.peers else []
        rates: dict[tuple[str, str], list[float]] = {key: [] for key in loaders}
        cpu: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in loaders}
        counters: dict[tuple[str, str], dict] = {}
        failed: dict[tuple[str, str], str] = {}
        runs = [(key, args.epochs) for key in [*loaders, *peers]] * args.runs
        for key in peers:
            rates[key], cpu[key] = [], []
        size = len(next(iter(loaders.values())).dataset)
        if args.serial and "shards" in layouts:
            loaders["shards", "s3, 1 in flight"] = D.make_loader(
                "s3://data/shards/", recipe="imagenet-train", batch_size=args.batch_size, device="cpu", seed=0,
                storage=D.StorageOptions(max_in_flight=1))
            rates["shards", "s3, 1 in flight"], cpu["shards", "s3, 1 in flight"] = [], []
            runs.append((("shards", "s3, 1 in flight"), 1))
        for key, epochs in runs:
            if key in peers:
                if key not in failed:
                    why = _peer_run(key, args, endpoint, proc.pid, size, rates[key], cpu[key])
                    if why is not None:
                        failed[key] = why
                        print(f"{key[0]}, {key[1]}: failed: {why}", file=sys.stderr)
                continue
            loader = loaders[key]
            # the processes engine's requests are counted in its workers, out of reach here
            store = None if getattr(loader, "engine", None) == "processes" else _store(loader.dataset)
            if store is not None:
                store.reset_stats()
            seconds, n, client_s, server_s = _epochs(loader, epochs, proc.pid)
            rates[key].append(n / seconds)
            cpu[key].append((1000 * client_s / n, 1000 * server_s / n))
            if store is not None:
                counters[key] = {k: v / epochs if k in ("requests", "bytes", "retries") else v
                                 for k, v in store.stats.items()}
    finally:
        proc.terminate()
        proc.wait(10)
    print(describe())
    print(f"inputs: {args.data} x {args.copies} ({size} files); plain train recipe "
          f"(imagenet-train), threads engine, batch {args.batch_size}; server: LocalS3Server, +{args.latency_ms:g} "
          f"ms per request; median of {args.runs} runs x {args.epochs} epochs; max_in_flight={args.max_in_flight}")
    table = _table(rates, cpu, counters, failed)
    if any("processes" in layout for layout, _ in rates):
        print("processes engine rows: from s3:// the loader's CPU is the main process's alone (its DataLoader "
              "workers, started from a forkserver, are not its children; from disk they are, and are counted); the "
              "request counters are the workers' and not shown")
    print(f"load average during the run (1, 5, 15 min): {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"platform": describe(), "args": vars(args), "rows": table}, f, indent=1)


if __name__ == "__main__":
    main()
