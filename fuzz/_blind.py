"""Coverage-blind mutation fuzzing: every seed stays in play.

libFuzzer keeps an input only when it reaches new coverage, and the C++ op and
libjpeg-turbo carry no coverage counters, so a libFuzzer run shrinks the corpus to the
handful of seeds that reach new *Python* lines and mutates those. This runner instead
takes the seeds in turn, forever: each round runs every seed once, mutated by a few
random byte-level and JPEG-marker-aware mutations drawn from a fixed-seed RNG (the first
round runs the seeds unmutated). Same seeds, same ``--seed``: same inputs in the same
order.

Usage (through a target's ``main``)::

    python fuzz/fuzz_x.py --blind SECONDS CORPUS_DIR_OR_FILE... [--seed N]
        [--artifact-prefix PREFIX] [--timeout S] [--rss-limit-mb MB] [--keep-going]

A finding (any exception from the target, an input running past ``--timeout`` seconds,
peak memory past ``--rss-limit-mb``) is written to ``PREFIX crash-<sha1>`` (or
``timeout-<sha1>``/``oom-<sha1>``), as libFuzzer names them, so
``python fuzz/fuzz_x.py PREFIXcrash-<sha1>`` replays it; the run stops with exit status 1
(``--keep-going``: goes on, one artifact per distinct kind of finding, exit 1 at the end).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import resource
import sys
import threading
import time
import traceback

_INTERESTING = (0x00, 0x01, 0x02, 0x07, 0x08, 0x0F, 0x10, 0x11, 0x7F, 0x80, 0xFE, 0xFF)
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # SOFn (not DHT, JPG, DAC)
_RST = re.compile(rb"\xff[\xd0-\xd7]")


# ------------------------------------------------------------------------------------
# JPEG structure (best effort: mutated files are anything)


def segments(jpeg: bytes):
    """``(marker, start, end)`` of the marker segments after SOI, ``start`` at the 0xFF and
    ``end`` past the segment's payload; for SOS, ``end`` is past its entropy-coded data.
    Stops at EOI or at the first thing that is not a marker."""
    out, i, n = [], 2, len(jpeg)
    while i + 1 < n and jpeg[i] == 0xFF:
        marker = jpeg[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker == 0xD9 or 0xD0 <= marker <= 0xD7 or marker == 0x01:
            out.append((marker, i, i + 2))
            if marker == 0xD9:
                break
            i += 2
            continue
        if i + 4 > n:
            break
        end = min(n, i + 2 + int.from_bytes(jpeg[i + 2:i + 4], "big"))
        if marker == 0xDA:
            j = end
            while True:
                j = jpeg.find(b"\xff", j)
                if j < 0 or j + 1 >= n:
                    j = n
                    break
                if jpeg[j + 1] == 0 or 0xD0 <= jpeg[j + 1] <= 0xD7:
                    j += 2
                    continue
                break
            out.append((marker, i, j))
            i = j
            continue
        out.append((marker, i, end))
        i = end
    return out


def _find(segs, markers):
    return [s for s in segs if s[0] in markers]


# ------------------------------------------------------------------------------------
# mutators: (rng, jpeg: bytearray, pool) -> bytearray; the JPEG part only


def _bit_flip(rng, b, pool):
    if b:
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return b


def _set_byte(rng, b, pool):
    if b:
        b[rng.randrange(len(b))] = rng.choice(_INTERESTING) if rng.random() < 0.5 else rng.randrange(256)
    return b


def _truncate(rng, b, pool):
    return b[:rng.randrange(len(b) + 1)]


def _chunk(rng, b, longest=256):
    if not b:
        return 0, 0
    start = rng.randrange(len(b))
    return start, min(len(b), start + rng.randint(1, longest))


def _duplicate_chunk(rng, b, pool):
    start, end = _chunk(rng, b)
    at = rng.randrange(len(b) + 1)
    return b[:at] + b[start:end] + b[at:]


def _delete_chunk(rng, b, pool):
    start, end = _chunk(rng, b)
    return b[:start] + b[end:]


def _splice(rng, b, pool):
    """Overwrite a chunk with bytes from another seed's JPEG at the same offset."""
    other = rng.choice(pool)
    start, end = _chunk(rng, b)
    b[start:end] = other[start:end] + b[start + len(other[start:end]):end]
    return b


def _dri(rng, b, pool):
    """Change the restart interval, or add a DRI segment before the first scan."""
    value = rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, rng.randrange(65536)))
    segs = segments(bytes(b))
    dri = _find(segs, {0xDD})
    if dri:
        _, start, end = rng.choice(dri)
        if end - start >= 6:
            b[start + 4:start + 6] = value.to_bytes(2, "big")
        return b
    sos = _find(segs, {0xDA})
    at = sos[0][1] if sos else rng.randrange(len(b) + 1)
    return b[:at] + b"\xff\xdd\x00\x04" + value.to_bytes(2, "big") + b[at:]


def _restart_markers(rng, b, pool):
    """Renumber, delete or duplicate a restart marker, or insert a stray one."""
    found = [m.start() for m in _RST.finditer(b)]
    op = rng.randrange(4)
    if not found or op == 3:
        sos = _find(segments(bytes(b)), {0xDA})
        if not sos:
            return b
        _, start, end = rng.choice(sos)
        at = rng.randrange(start + 2, max(start + 3, end + 1))
        return b[:at] + bytes((0xFF, 0xD0 + rng.randrange(8))) + b[at:]
    at = rng.choice(found)
    if op == 0:
        b[at + 1] = 0xD0 + rng.randrange(8)
        return b
    if op == 1:
        return b[:at] + b[at + 2:]
    return b[:at] + b[at:at + 2] + b[at:]


def _sof(rng, b, pool):
    """Change a frame header field: a component's sampling factors (mostly), its
    quantization table, the component count, or the image size."""
    sof = _find(segments(bytes(b)), _SOF_MARKERS)
    if not sof:
        return b
    _, start, end = rng.choice(sof)
    if end - start < 10:
        return b
    ncomp = min(b[start + 9], (end - start - 10) // 3)
    op = rng.randrange(6)
    if op <= 2 and ncomp:
        at = start + 10 + 3 * rng.randrange(ncomp) + 1
        b[at] = (rng.randint(1, 4) << 4) | rng.randint(1, 4) if rng.random() < 0.9 else rng.randrange(256)
    elif op == 3 and ncomp:
        b[start + 10 + 3 * rng.randrange(ncomp) + 2] = rng.randrange(5)
    elif op == 4:
        b[start + 9] = rng.choice((1, 2, 3, 4, rng.randrange(256)))
    else:
        at = start + 5 + 2 * rng.randrange(2)
        size = int.from_bytes(b[at:at + 2], "big") + rng.randint(-17, 17)
        b[at:at + 2] = (size & 0xFFFF).to_bytes(2, "big")
    return b


def _sos(rng, b, pool):
    """Change a scan header byte: component selector, table selectors, Ss, Se or Ah/Al."""
    sos = _find(segments(bytes(b)), {0xDA})
    if not sos:
        return b
    _, start, _ = rng.choice(sos)
    length = int.from_bytes(b[start + 2:start + 4], "big")
    if length < 6 or start + 2 + length > len(b):
        return b
    at = start + 5 + rng.randrange(length - 3)
    b[at] = rng.choice(_INTERESTING) if rng.random() < 0.3 else (b[at] + rng.randint(-3, 3)) & 0xFF
    return b


def _end_early(rng, b, pool):
    """Stop the file after one of its scans (or inside one) with an EOI."""
    sos = _find(segments(bytes(b)), {0xDA})
    if not sos:
        return b
    if len(sos) > 1 and rng.random() < 0.7:
        at = rng.choice(sos[:-1])[2]  # after a scan that is not the last
    else:
        _, start, end = rng.choice(sos)
        at = rng.randrange(start, end + 1)
    return b[:at] + b"\xff\xd9"


def _table_byte(rng, b, pool):
    """Change a byte inside a DHT, DQT or DAC segment."""
    tables = _find(segments(bytes(b)), {0xC4, 0xDB, 0xCC})
    if not tables:
        return b
    _, start, end = rng.choice(tables)
    if end - start > 4:
        b[rng.randrange(start + 4, end)] = rng.randrange(256)
    return b


MUTATORS = [
    (_bit_flip, 4), (_set_byte, 3), (_truncate, 1), (_duplicate_chunk, 2), (_delete_chunk, 2), (_splice, 1),
    (_dri, 2), (_restart_markers, 3), (_sof, 2), (_sos, 2), (_end_early, 2), (_table_byte, 1),
]
_FUNCS = [f for f, _ in MUTATORS]
_WEIGHTS = [w for _, w in MUTATORS]


def mutate(data: bytes, rng: random.Random, pool, param_bytes: int) -> bytes:
    """A mutated copy of ``data`` (``param_bytes`` parameter bytes, then a JPEG): new
    parameters half of the time, then one to six mutations of the JPEG."""
    params = bytearray(data[:param_bytes])
    if rng.random() < 0.5:
        params = bytearray(rng.randrange(256) for _ in range(param_bytes))
    jpeg = bytearray(data[param_bytes:])
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4, 6))):
        jpeg = rng.choices(_FUNCS, _WEIGHTS)[0](rng, jpeg, pool)
    return bytes(params) + bytes(jpeg)


# ------------------------------------------------------------------------------------
# runner


def _seed_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, n) for n in os.listdir(p) if os.path.isfile(os.path.join(p, n)))
        else:
            files.append(p)
    return files


def _save(prefix: str, kind: str, data: bytes) -> str:
    path = f"{prefix}{kind}-{hashlib.sha1(data).hexdigest()}"
    with open(path, "wb") as f:
        f.write(data)
    return path


class _Watchdog(threading.Thread):
    """Ends the process (status 1) when one input runs past ``timeout`` seconds, after
    saving it: the ops release the GIL, so this thread runs while one is stuck."""

    def __init__(self, timeout: float, prefix: str):
        super().__init__(daemon=True)
        self.timeout, self.prefix = timeout, prefix
        self.current = None  # (start time, input) of the running input

    def run(self):
        while True:
            time.sleep(min(0.25, self.timeout / 4))
            current = self.current
            if current is not None and time.monotonic() - current[0] > self.timeout:
                path = _save(self.prefix, "timeout", current[1])
                print(f"blind: input ran past {self.timeout} s, written to {path}", flush=True)
                os._exit(1)


def _signature(e: BaseException) -> str:
    """The kind of a finding: its type and first line, numbers and reprs left out."""
    first = re.sub(r"<[^>]*>", "<>", str(e).split("\n", 1)[0])
    return f"{type(e).__name__}: " + re.sub(r"\d+", "#", first)[:160]


def run(test_one_input, seconds: float, paths, *, seed: int = 0, artifact_prefix: str = "./",
        timeout: float = 25.0, rss_limit_mb: int = 3072, keep_going: bool = False, param_bytes: int = 16,
        log=print) -> int:
    """Fuzz ``test_one_input`` blind for ``seconds``; return the exit status (0: no
    finding). See the module docstring."""
    files = _seed_files(paths)
    if not files:
        log("blind: no seed files")
        return 2
    pool = []
    for path in files:
        with open(path, "rb") as f:
            pool.append(f.read())
    jpegs = [d[param_bytes:] for d in pool]
    rng = random.Random(seed)
    watchdog = _Watchdog(timeout, artifact_prefix)
    watchdog.start()
    findings = {}  # signature -> [count, artifact path]
    execs, start = 0, time.monotonic()
    deadline, next_report = start + seconds, start + 30
    rounds = 0
    while time.monotonic() < deadline and not (findings and not keep_going):
        for original in pool:
            data = original if rounds == 0 else mutate(original, rng, jpegs, param_bytes)
            watchdog.current = (time.monotonic(), data)
            try:
                test_one_input(data)
            except Exception as e:  # noqa: BLE001 - every exception is a finding
                sig = _signature(e)
                if sig not in findings:
                    path = _save(artifact_prefix, "crash", data)
                    findings[sig] = [0, path]
                    log(f"blind: FINDING {sig}\n  input written to {path}\n" +
                        "".join(traceback.format_exception(e)).rstrip())
                findings[sig][0] += 1
            watchdog.current = None
            execs += 1
            if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > rss_limit_mb * 1024:
                path = _save(artifact_prefix, "oom", data)
                log(f"blind: peak memory past {rss_limit_mb} MB after this input, written to {path}")
                return 1
            now = time.monotonic()
            if (findings and not keep_going) or now >= deadline:
                break
            if now >= next_report:
                log(f"blind: {execs} executions, {now - start:.0f} s, round {rounds}, {len(findings)} findings")
                next_report = now + 30
        rounds += 1
    elapsed = time.monotonic() - start
    log(f"blind: {execs} executions over {len(pool)} seeds in {elapsed:.0f} s ({execs / max(elapsed, 1e-9):.0f}/s, "
        f"{rounds} rounds), {sum(c for c, _ in findings.values())} findings, {len(findings)} distinct")
    for sig, (count, path) in findings.items():
        log(f"blind:   {count}x {sig}  e.g. {path}")
    return 1 if findings else 0


def main(test_one_input, argv) -> int:
    ap = argparse.ArgumentParser(prog=f"{os.path.basename(sys.argv[0])} --blind",
                                 description="Coverage-blind mutation fuzzing over every seed (see fuzz/_blind.py).")
    ap.add_argument("seconds", type=float)
    ap.add_argument("corpus", nargs="+", help="seed files or folders")
    ap.add_argument("--seed", type=int, default=0, help="mutation RNG seed (default 0)")
    ap.add_argument("--artifact-prefix", default="./", help="where findings are written (default ./)")
    ap.add_argument("--timeout", type=float, default=25.0, help="seconds one input may take (default 25)")
    ap.add_argument("--rss-limit-mb", type=int, default=3072, help="peak memory limit (default 3072)")
    ap.add_argument("--keep-going", action="store_true", help="go on after a finding (one artifact per kind)")
    args = ap.parse_args(argv)
    return run(test_one_input, args.seconds, args.corpus, seed=args.seed, artifact_prefix=args.artifact_prefix,
               timeout=args.timeout, rss_limit_mb=args.rss_limit_mb, keep_going=args.keep_going,
               log=lambda s: print(s, flush=True))
