"""Time to the first batch of ``fastprep.data.make_loader`` by worker start method.

A new DataLoader iteration starts its workers (unless persistent); with ``fork`` they
inherit the parent's imports and compiled kernels, with ``spawn`` each starts a fresh
interpreter, imports torch, torchvision, fastprep and Numba and loads the mask kernels
from Numba's on-disk cache. This script measures, per start method, the wall time from
``iter(loader)`` to the first batch, and inside the first worker where that time went:

* ``start+import``: process start, imports and unpickling of the dataset, up to
  ``worker_init_fn``;
* ``first sample``: decode + mask of the first sample (the mask kernels' first call
  includes loading them);
* ``2nd epoch``: the first batch of a second iteration (new workers, same process).

``spawn`` is make_loader's default handling of ``multiprocessing_context="spawn"`` (a
forkserver preloaded with fastprep); ``plain-spawn`` passes ``spawn_via_forkserver=False``.

Each method runs ``--runs`` times, each in a fresh Python process (so a run pays what a
new training job pays, with Numba's cache already on disk: one untimed warm-up process
writes it first); the median is printed with the ratio to ``fork`` from the same run.

    python bench/bench_first_batch.py [--runs 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, os, sys, time
t_launch = float(sys.argv[1])
method, workers, folder = sys.argv[2], int(sys.argv[3]), sys.argv[4]
plain = method == "plain-spawn"
method = "spawn" if plain else method
import tempfile
import torch
import fastprep.data as D
from _first_batch_probe import StampSample, read_stamps, stamp_init

os.environ["FASTPREP_PROBE_DIR"] = tempfile.mkdtemp()
t_ready = time.time()
D.warm_up_kernels()  # what make_loader does for its default transform
loader = D.make_loader(folder, batch_size=8, num_workers=workers, crop_size=64, device="cpu",
                       multiprocessing_context=method, spawn_via_forkserver=not plain,
                       shuffle=False, worker_init_fn=stamp_init,
                       transform=StampSample(D.default_transform(64, 0.25)))
t0 = time.time()
it = iter(loader)
first = next(it)
t1 = time.time()
for _ in it:
    pass
stamps = read_stamps(t0)
t2 = time.time()
next(iter(loader))  # second epoch: new (non-persistent) workers
t3 = time.time()
print(json.dumps({"first_batch_s": t1 - t0, "second_epoch_s": t3 - t2, "import_main_s": t_ready - t_launch,
                  **stamps}))
"""


def run_child(method: str, workers: int, folder: str) -> dict:
    import time

    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(here), here, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", _CHILD, repr(time.time()), method, str(workers), folder],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--methods", default="fork,spawn,plain-spawn",
                        help="fork, forkserver, spawn (make_loader: forkserver preloaded with fastprep), "
                             "plain-spawn (spawn_via_forkserver=False)")
    args = parser.parse_args()

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fastprep._platform import describe
    from fastprep.bench.synthetic import encode_jpeg, photo_like

    print(describe())
    print(f"python {sys.version.split()[0]}; {args.workers} workers; median of {args.runs} fresh processes "
          "per method (Numba cache warm)")
    with tempfile.TemporaryDirectory() as folder:
        for i in range(32):
            with open(os.path.join(folder, f"{i:03d}.jpg"), "wb") as f:
                f.write(encode_jpeg(photo_like(120, 160, seed=i)))
        methods = args.methods.split(",")
        run_child(methods[0], args.workers, folder)  # warm-up: Numba's cache on disk
        results = {m: [] for m in methods}
        for _ in range(args.runs):
            for m in methods:  # interleaved, so load changes hit every method alike
                results[m].append(run_child(m, args.workers, folder))
    base = statistics.median(r["first_batch_s"] for r in results[methods[0]])
    print(f"{'method':<11} {'first batch s':>13} {'x ' + methods[0]:>9} {'worker start+import s':>22} "
          f"{'first sample s':>15} {'2nd epoch s':>12}")
    for m in methods:
        rs = results[m]
        fb = statistics.median(r["first_batch_s"] for r in rs)
        init = statistics.median(r["init_s"] for r in rs)
        sample = statistics.median(r["sample_s"] for r in rs)
        second = statistics.median(r["second_epoch_s"] for r in rs)
        print(f"{m:<11} {fb:>13.3f} {fb / base:>9.2f} {init:>22.3f} {sample:>15.3f} {second:>12.3f}")


if __name__ == "__main__":
    main()
