"""GPU check of fastprep.data.DevicePrefetcher (run where CUDA exists; exits 0 with a note
elsewhere).

    python bench/check_prefetcher_cuda.py [--json FILE]

1. Exactness: make_loader on CUDA gives the same batches (<= 1e-5) as the same loader on
   the CPU path, for the same seeds (num_workers=0, a seeded generator).
2. Overlap: with a consumer whose GPU step takes a fixed time longer than the loader
   needs per batch, the time the consumer waits in ``next()`` (data wait) is ~0 after the
   first batch, and the H2D copy + YUV of batch N+1 ran while batch N was consumed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

try:
    import fastprep  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastprep.data as D  # noqa: E402
from fastprep.bench.synthetic import encode_jpeg, photo_like  # noqa: E402


def _files(folder, n):
    out = []
    for i in range(n):
        p = os.path.join(folder, f"{i}.jpg")
        with open(p, "wb") as f:
            f.write(encode_jpeg(photo_like(533, 800, seed=i)))
        out.append(p)
    return out


def _epoch(device, files, **kw):
    torch.manual_seed(5)
    return [(x.cpu(), t.cpu()) for x, t in D.make_loader(files, device=device, shuffle=False, num_workers=0,
                                                          generator=torch.Generator().manual_seed(0), **kw)]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--step-ms", type=float, default=150.0, help="consumer GPU time per batch")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    report = {"device": torch.cuda.get_device_name()}
    with tempfile.TemporaryDirectory() as tmp:
        files = _files(tmp, 16)
        cpu, gpu = _epoch("cpu", files, batch_size=5), _epoch("cuda", files, batch_size=5)
        err = max((a - b).abs().max().item() for (a, _), (b, _) in zip(cpu, gpu, strict=True))
        report["max_abs_diff_cuda_vs_cpu"] = err
        assert err <= 1e-5, err

        # Consumer: a matmul loop calibrated to --step-ms of GPU time per batch.
        a = torch.randn(2048, 2048, device="cuda")
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        reps = max(1, int(args.step_ms / ((time.perf_counter() - t) / 10 * 1e3)))
        loader = D.make_loader(files * 40, batch_size=64, num_workers=min(8, os.cpu_count()), device="cuda",
                               persistent_workers=True)
        for _ in loader:  # warm the workers
            break
        waits = []
        t_prev = time.perf_counter()
        it = iter(loader)
        while True:
            try:
                x, _ = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t_prev)
            for _ in range(reps):
                a @ a
            x.sum()
            torch.cuda.synchronize()  # a trainer that syncs each step: worst case for overlap
            t_prev = time.perf_counter()
        report.update(batches=len(waits), step_ms=args.step_ms,
                      first_wait_ms=waits[0] * 1e3,
                      median_data_wait_ms_after_first=statistics.median(waits[1:]) * 1e3,
                      max_data_wait_ms_after_first=max(waits[1:]) * 1e3)
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
