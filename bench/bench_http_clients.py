"""Client CPU per request: fastprep's own HTTP client (``torch.ops.fastprep.http_get``, one epoll
loop in C++) against libcurl's multi interface, on the same server, requests and concurrency.

    python bench/bench_http_clients.py [--rounds 5] [--requests 3000] [--large-requests 2000]
                                       [--concurrency 8 32 64] [--sizes 4k jpeg 1m] [--tls]
                                       [--photos /work/cuts] [--work /tmp/fastprep-http-clients]

The server: :class:`fastprep.bench.s3server.LocalS3Server` on 127.0.0.1 in its own process (its
CPU is not the client's), no added latency, serving three kinds of objects, each under as many
keys as a round has requests (hard links), so that every request of a round is signed afresh:

* ``4k``: 4 KiB of random bytes (64 distinct files);
* ``jpeg``: the real photos of ``--photos`` of 90,000 bytes or more (from ``/work/cuts``: 54
  JPEGs, 88-169 KiB, 109 KiB on average: about an ImageNet JPEG);
* ``1m``: 1 MiB of random bytes (16 distinct files).

The clients, all in this process, each with its keep-alive connections kept between calls:

* ``fetch``: ``NativeClient.fetch`` (fastprep/data/_native_s3.py): the request heads written and
  signed (SigV4) in Python, ``http_get``, each answer checked;
* ``http_get``: the op alone, on heads written and signed once before the rounds;
* ``curl poll``: libcurl's multi interface (bench/http_clients_curl.cpp, compiled here with g++
  and loaded through ctypes) driven by ``curl_multi_perform`` + ``curl_multi_poll``, on the same
  heads as ``http_get`` (each request's URL and header lines), HTTP/1.1, each body written by
  ``CURLOPT_WRITEFUNCTION`` into a buffer of its listed size;
* ``curl socket``: the same, driven by ``curl_multi_socket_action`` from an epoll set.

Per client, concurrency and size: ``--rounds`` rounds of N requests (``--requests``;
``--large-requests`` for ``1m``), the clients alternating round by round (their order rotated
each round) after one warm-up call each; per round the process's CPU time (getrusage
``RUSAGE_SELF``, user + system) and wall time around the call alone. Printed: the medians, CPU in
microseconds per request and requests per second, and each client's CPU as a ratio to
``http_get``'s, and the page faults per request. glibc's malloc is set to keep freed memory
(``--default-malloc``: not), so that every client's bodies reuse pages instead of faulting in
fresh ones depending on the allocator's history (the same cost for every client, but not the
same from run to run). Every answer is checked (status 200, the listed size); the warm-up's bodies are
compared with the files byte for byte. Without libcurl's headers (``apt-get install
libcurl4-openssl-dev``) or g++ it says so and exits 0.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from fastprep._platform import cpu_flags, describe
from fastprep.data import _native_s3

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "http_clients_curl.cpp")
BUCKET = "data"
CLIENTS = ("fetch", "http_get", "curl poll", "curl socket")


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=3000, help="requests per round (4k and jpeg)")
    p.add_argument("--large-requests", type=int, default=2000, help="requests per round of 1 MiB objects")
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    p.add_argument("--sizes", nargs="+", default=["4k", "jpeg", "1m"], choices=["4k", "jpeg", "1m"])
    p.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    p.add_argument("--photos", default="/work/cuts", help="a folder of JPEGs (those of 90,000 bytes or more are used)")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "fastprep-http-clients"))
    p.add_argument("--curl-buffer", type=int, default=512 << 10, help="CURLOPT_BUFFERSIZE (0: libcurl's 16 KiB)")
    p.add_argument("--tls", action="store_true", help="HTTPS (a CA and certificate made for the run)")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc as it is (its mmap threshold moving, the heap trimmed)")
    return p.parse_args(argv)


# ---------------------------------------------------------------- libcurl, through ctypes

def _compile(work: str) -> str | None:
    """The shared library built from SOURCE (cached by the source's hash), or None (printed why)."""
    gxx = shutil.which("g++")
    if gxx is None:
        print("SKIP: no g++ to build bench/http_clients_curl.cpp")
        return None
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    out = os.path.join(work, "build", f"libhttp_clients_curl-{digest}.so")
    if os.path.exists(out):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [gxx, "-O2", "-std=c++17", "-shared", "-fPIC", SOURCE, "-o", out + ".tmp", "-lcurl"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        if "curl/curl.h" in done.stderr or "-lcurl" in done.stderr:
            print("SKIP: libcurl's headers are missing (apt-get install libcurl4-openssl-dev)")
        else:
            print(f"SKIP: cannot build {SOURCE}:\n{done.stderr[-2000:]}")
        return None
    os.replace(out + ".tmp", out)
    return out


def _library(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    p, i64, pp = ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_char_p)
    lib.http_clients_version.restype = ctypes.c_char_p
    lib.http_clients_open.restype = p
    lib.http_clients_open.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_long]
    lib.http_clients_run.restype = i64
    lib.http_clients_run.argtypes = [p, i64, pp, pp, ctypes.POINTER(i64), i64, ctypes.c_double,
                                     ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(i64), ctypes.POINTER(i64)]
    lib.http_clients_connects.restype = i64
    lib.http_clients_connects.argtypes = [p]
    lib.http_clients_free.argtypes = [ctypes.POINTER(ctypes.c_void_p), i64]
    lib.http_clients_close.argtypes = [p]
    return lib


class CurlRequests:
    """The ctypes arrays of one list of requests: each head's URL and header lines (Host left to
    libcurl, which writes the same one), and the listed sizes; plus the output arrays."""

    def __init__(self, heads: list[str], sizes: list[int], origin: str):
        n = len(heads)
        self.n = n
        self._keep = []
        urls, lines = (ctypes.c_char_p * n)(), (ctypes.c_char_p * n)()
        for k, head in enumerate(heads):
            request, *fields = head.rstrip("\r\n").split("\r\n")
            url = (origin + request.split(" ")[1]).encode()
            block = b"".join(f.encode() + b"\0" for f in fields if not f.lower().startswith("host:")) + b"\0"
            self._keep += [url, block]
            urls[k], lines[k] = url, block
        self.urls, self.lines = urls, lines
        self.sizes = (ctypes.c_int64 * n)(*sizes)
        self.buffers = (ctypes.c_void_p * n)()
        self.status = (ctypes.c_int64 * n)()
        self.lengths = (ctypes.c_int64 * n)()


class CurlClient:
    def __init__(self, lib: ctypes.CDLL, mode: int, ca_file: str, buffer_size: int):
        self.lib = lib
        self.handle = lib.http_clients_open(mode, ca_file.encode(), buffer_size)
        if not self.handle:
            raise RuntimeError("curl_global_init failed")

    def run(self, r: CurlRequests, concurrency: int) -> int:
        return self.lib.http_clients_run(self.handle, r.n, r.urls, r.lines, r.sizes, concurrency, 30.0, r.buffers,
                                         r.status, r.lengths)

    def body(self, r: CurlRequests, k: int) -> bytes:
        return ctypes.string_at(r.buffers[k], r.lengths[k])

    def release(self, r: CurlRequests) -> None:
        self.lib.http_clients_free(r.buffers, r.n)
        for k in range(r.n):
            r.buffers[k] = None

    def connects(self) -> int:
        """Connections opened since the last call."""
        return self.lib.http_clients_connects(self.handle)

    def close(self) -> None:
        self.lib.http_clients_close(self.handle)


# ---------------------------------------------------------------- objects and server

def _objects(work: str, photos: str, sizes: list[str], keys: int) -> tuple[str, dict[str, list[tuple[str, int]]]]:
    """The served folder and, per size, ``keys`` objects ``(key, size)`` over its distinct files."""
    root = os.path.join(work, "bucket")
    out: dict[str, list[tuple[str, int]]] = {}
    for name in sizes:
        folder = os.path.join(root, name)
        originals = os.path.join(folder, "files")
        if not os.path.isdir(originals):
            os.makedirs(originals + ".tmp", exist_ok=True)
            if name == "jpeg":
                for f in sorted(os.listdir(photos)):
                    if f.lower().endswith((".jpg", ".jpeg")) and os.path.getsize(os.path.join(photos, f)) >= 90_000:
                        shutil.copyfile(os.path.join(photos, f), os.path.join(originals + ".tmp", f))
            else:
                count, size = (64, 4096) if name == "4k" else (16, 1 << 20)
                for k in range(count):
                    with open(os.path.join(originals + ".tmp", f"{k:03d}.bin"), "wb") as f:
                        f.write(os.urandom(size))
            os.replace(originals + ".tmp", originals)
        files = sorted(os.listdir(originals))
        if not files:
            raise SystemExit(f"no JPEGs of 90,000 bytes or more in {photos}")
        links = os.path.join(folder, "keys")
        os.makedirs(links, exist_ok=True)
        objects = []
        for k in range(keys):
            source = files[k % len(files)]
            target = os.path.join(links, f"{k:05d}-{source}")
            if not os.path.exists(target):
                os.link(os.path.join(originals, source), target)
            objects.append((f"{name}/keys/{k:05d}-{source}", os.path.getsize(target)))
        out[name] = objects
    return root, out


def _server(root: str, tls_files: tuple[str, str] | None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "fastprep.bench.s3server", root, "--bucket", BUCKET, "--latency-ms", "0",
           "--lifetime-s", "1800"]
    if tls_files:
        cmd += ["--tls", *tls_files]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()[0]


# ---------------------------------------------------------------- measuring

def _steady_malloc() -> str:
    """Makes glibc's malloc keep freed memory: bodies up to 32 MiB from the heap, never trimmed.
    Otherwise whether a round's bodies land in fresh pages (about 256 page faults per MiB, the
    same for every client) depends on the allocator's history, and swings a row by 2x."""
    try:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(-3, 32 << 20) and libc.mallopt(-1, -1)  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        ok = 0
    return "mmap threshold 32 MiB, no trimming" if ok else "as it was (mallopt failed)"


def _timed(call) -> tuple[tuple[float, float, int, float], object]:
    """((CPU seconds of this process, wall seconds, its page faults, user CPU seconds), the call's
    result) around ``call()`` alone."""
    gc.collect()
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    result = call()
    t1, after = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    faults = (after.ru_minflt - before.ru_minflt) + (after.ru_majflt - before.ru_majflt)
    return (cpu, t1 - t0, faults, after.ru_utime - before.ru_utime), result


def _check_native(kind: str, result, objects, root: str, full: bool) -> None:
    if kind == "fetch":
        bodies = result[0]
        bad = [b for b in bodies if isinstance(b, Exception)]
        if bad:
            raise SystemExit(f"fetch failed: {bad[0]}")
    else:
        bodies, status = result[0], result[1].tolist()
        if any(s != 200 for s in status):
            raise SystemExit(f"http_get: statuses {sorted(set(status))}")
    for (key, size), body in zip(objects, bodies):
        if body.numel() != size:
            raise SystemExit(f"{kind}: {key}: {body.numel()} bytes, not {size}")
    if full:
        for (key, _), body in zip(objects, bodies):
            with open(os.path.join(root, key), "rb") as f:
                if f.read() != bytes(body.numpy()):
                    raise SystemExit(f"{kind}: {key}: the body differs from the file")


def _check_curl(kind: str, client: CurlClient, good: int, r: CurlRequests, objects, root: str, full: bool) -> None:
    if good != r.n:
        status = sorted({r.status[k] for k in range(r.n)})
        raise SystemExit(f"{kind}: {r.n - good} of {r.n} requests failed (statuses {status})")
    if full:
        for k, (key, _) in enumerate(objects):
            with open(os.path.join(root, key), "rb") as f:
                if f.read() != client.body(r, k):
                    raise SystemExit(f"{kind}: {key}: the body differs from the file")


def _callers(native, curl: dict, objects, conc: int, root: str):
    """Per client, a function (full check?) -> (CPU s, wall s, page faults, user CPU s) of one call over
    ``objects``."""
    requests = [(key, None, size) for key, size in objects]
    heads = native._heads(requests)
    tls = native.tls is not None
    scheme = "https" if tls else "http"
    prepared = {kind: CurlRequests(heads, [s for _, s in objects], f"{scheme}://{native.host}") for kind in curl}

    def fetch(full):
        used, got = _timed(lambda: native.fetch(requests, lambda n: f"s3://{BUCKET}/{n}", concurrency=conc))
        _check_native("fetch", got, objects, root, full)
        return used

    def op(full):
        used, got = _timed(lambda: torch.ops.fastprep.http_get(
            native.address, native.port, heads, min(conc, len(heads)), native.timeout_s, _native_s3.MAX_BODY, tls,
            *(native.tls or ("", "")), ""))
        _check_native("http_get", got, objects, root, full)
        return used

    def curl_call(kind):
        def call(full):
            client, r = curl[kind], prepared[kind]
            used, good = _timed(lambda: client.run(r, conc))
            _check_curl(kind, client, good, r, objects, root, full)
            client.release(r)
            return used
        return call

    out = {"fetch": fetch, "http_get": op}
    out.update({kind: curl_call(kind) for kind in curl})
    return out


def _measure(native, curl: dict, objects, conc: int, rounds: int, root: str, clients: list[str]):
    """Per client: the per-round (µs CPU per request, requests/s, page faults per request, µs user
    CPU per request), the clients alternating; and
    the connections each libcurl client opened in the measured rounds."""
    callers = _callers(native, curl, objects, conc, root)
    order = [c for c in clients if c in callers]
    for kind in order:  # warm-up: connections opened, bodies checked byte for byte
        callers[kind](True)
    for client in curl.values():
        client.connects()
    per: dict[str, list[tuple[float, ...]]] = {kind: [] for kind in order}
    n = len(objects)
    for r in range(rounds):
        for kind in order[r % len(order):] + order[:r % len(order)]:
            cpu, wall, faults, user = callers[kind](False)
            per[kind].append((cpu / n * 1e6, n / wall, faults / n, user / n * 1e6))
    return per, {kind: client.connects() for kind, client in curl.items()}


# ---------------------------------------------------------------- report

def _machine(lib) -> None:
    flags = cpu_flags()
    print(describe())
    print(f"ISA flags: avx2={'avx2' in flags} avx512f={'avx512f' in flags}")
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"torch {torch.__version__}; Python {sys.version.split()[0]}")
    if lib is not None:
        print(f"libcurl: {lib.http_clients_version().decode()}")


def _table(rows: list[tuple[str, int, str, list[tuple[float, ...]]]]) -> None:
    print("\n| object size | in flight | client | µs CPU / request (median; min-max) | of which user | requests/s "
          "| CPU vs http_get | page faults / request |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    base: dict[tuple[str, int], float] = {}
    for size, conc, kind, samples in rows:
        if kind == "http_get":
            base[size, conc] = statistics.median(s[0] for s in samples)
    for size, conc, kind, samples in rows:
        cpus = [s[0] for s in samples]
        cpu, rate = statistics.median(cpus), statistics.median(s[1] for s in samples)
        ref = base.get((size, conc))
        ratio = f"{cpu / ref:.2f}x" if ref else "-"
        faults, user = statistics.median(s[2] for s in samples), statistics.median(s[3] for s in samples)
        print(f"| {size} | {conc} | {kind} | {cpu:.1f} ({min(cpus):.1f}-{max(cpus):.1f}) | {user:.1f} | {rate:,.0f} "
              f"| {ratio} | {faults:.1f} |")


def _clients(args, lib, endpoint: str, ca_file: str):
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret",
                       "AWS_REGION": "us-east-1"})
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        os.environ.pop(name, None)
    if ca_file:
        os.environ["AWS_CA_BUNDLE"] = ca_file
    native = _native_s3.native_client(endpoint, BUCKET, "", timeout_s=30, retries=0,
                                      max_in_flight=max(args.concurrency))
    if isinstance(native, str):
        raise SystemExit(f"no native client: {native}")
    curl = {}
    for mode, kind in enumerate(("curl poll", "curl socket")):
        if lib is not None and kind in args.clients:
            curl[kind] = CurlClient(lib, mode, ca_file, args.curl_buffer)
    return native, curl


def main(argv=None) -> int:
    args = _args(argv)
    os.makedirs(args.work, exist_ok=True)
    path = _compile(args.work)
    lib = _library(path) if path else None
    _machine(lib)
    if lib is None:
        return 0
    print(f"malloc: {'as it is' if args.default_malloc else _steady_malloc()}")
    keys = max(args.requests if set(args.sizes) - {"1m"} else 0, args.large_requests if "1m" in args.sizes else 0)
    root, objects = _objects(args.work, args.photos, args.sizes, keys)
    tls_files, ca_file = None, ""
    if args.tls:
        from fastprep.bench.s3server import local_certificates
        cert, key, ca_file = local_certificates(args.work)
        tls_files = (cert, key)
    server, endpoint = _server(root, tls_files)
    print(f"server: {endpoint} (its own process); {args.rounds} rounds per row; curl buffer {args.curl_buffer}")
    rows = []
    started = time.perf_counter()
    try:
        native, curl = _clients(args, lib, endpoint, ca_file)
        for size in args.sizes:
            n = args.large_requests if size == "1m" else args.requests
            mean = statistics.mean(s for _, s in objects[size][:n])
            for conc in args.concurrency:
                per, opened = _measure(native, curl, objects[size][:n], conc, args.rounds, root, args.clients)
                for kind, samples in per.items():
                    rows.append((f"{size} ({mean / 1024:.0f} KiB)", conc, kind, samples))
                line = ", ".join(f"{k} {statistics.median(s[0] for s in v):.1f}" for k, v in per.items())
                print(f"{size} x{conc} ({n} requests/round): µs CPU/request {line}; "
                      f"connections libcurl opened while measured: {opened}", flush=True)
        for client in curl.values():
            client.close()
    finally:
        server.terminate()
        server.wait(10)
    _table(rows)
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
