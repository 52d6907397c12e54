"""Engine throughput: fastprep's pipeline through DataLoader workers vs Ray Data actors.

    python bench/bench_engines.py [--files 256] [--workers 2] [--epochs 2] [--batch-size 32]

The same photo-like 533x800 q90 4:2:0 JPEGs, the same per-sample work (ROI decode of a
random 256x256 crop + uint8 RandomMask(0.25), sample-keyed seed) and the same batch
conversion (BatchYuvScale, float32) on the CPU, consumer doing nothing:

* ``dataloader``: :func:`fastprep.data.make_loader` with ``--workers`` worker processes
  (persistent, so later epochs do not restart them).
* ``ray``: :class:`fastprep.ray.RayLoader` with ``--workers`` decode actors on a local
  ``ray.init(num_cpus=--workers)`` (``ray.init`` itself is timed separately and excluded).

Per engine and epoch: the time to the first batch (starting workers/actors: Ray starts a
new actor pool for each epoch's dataset, so every Ray epoch pays it) and the samples/s
from the first batch to the last, and over the whole epoch; medians over epochs. (Where
the first batch arrives only after most of the work, the after-first-batch rate only
measures draining what was buffered: read the whole-epoch rate.)
Both engines must deliver the same multiset of samples (checked: digests, epoch 0).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time

import torch

from fastprep._platform import describe
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.data import make_loader


def _folder(root, n):
    for i in range(n):
        sub = os.path.join(root, f"c{i % 4}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"{i:05d}.jpg"), "wb") as f:
            f.write(encode_jpeg(photo_like(533, 800, seed=i % 16), quality=90))
    return root


def _epochs(loader, epochs):
    """Per epoch: time to the first batch, samples/s after it, samples/s over the epoch."""
    firsts, rates, whole, digests = [], [], [], None
    for e in range(epochs):
        t, total, d, t1, n1 = time.perf_counter(), 0, [], None, 0
        for x, _ in loader:
            if t1 is None:
                t1, n1 = time.perf_counter(), x.shape[0]
                firsts.append(t1 - t)
            total += x.shape[0]
            if e == 0:
                d += [hashlib.sha256(x[k].numpy().tobytes()).hexdigest() for k in range(x.shape[0])]
        t2 = time.perf_counter()
        rates.append((total - n1) / (t2 - t1))
        whole.append(total / (t2 - t))
        if e == 0:
            digests = sorted(d)
    return firsts, rates, whole, digests


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    print(describe())
    print(f"{args.files} files 533x800 q90 4:2:0, crop 256, mask 0.25, batch {args.batch_size}, "
          f"{args.workers} workers/actors, {args.epochs} epochs, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as root:
        _folder(root, args.files)
        dl = make_loader(root, batch_size=args.batch_size, num_workers=args.workers, device="cpu", seed=1,
                         persistent_workers=True)
        dl_first, dl_rates, dl_whole, dl_digests = _epochs(dl, args.epochs)
        del dl

        import ray

        from fastprep.ray import RayLoader
        t = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        init_s = time.perf_counter() - t
        rl = RayLoader(root, batch_size=args.batch_size, device="cpu", seed=1, concurrency=args.workers)
        ray_first, ray_rates, ray_whole, ray_digests = _epochs(rl, args.epochs)
        ray.shutdown()
    print(f"ray.init: {init_s:.1f} s (excluded)")
    print(f"same samples from both engines (epoch 0): {dl_digests == ray_digests}")
    print("| engine | samples/s over the epoch | time to first batch, s | samples/s after the first batch |")
    print("|---|---|---|---|")
    for name, f, r, w in (("dataloader", dl_first, dl_rates, dl_whole), ("ray", ray_first, ray_rates, ray_whole)):
        print(f"| {name} | {statistics.median(w):.1f} | {statistics.median(f):.1f} | {statistics.median(r):.0f} |")


if __name__ == "__main__":
    main()
