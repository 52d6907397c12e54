"""Timestamps from inside DataLoader worker 0 for bench_first_batch.py (a module of its
own so that spawned workers can unpickle the hooks by reference)."""

import json
import os
import time

from torch.utils.data import get_worker_info


def _write(key: str, value: float) -> None:
    folder = os.environ.get("FASTPREP_PROBE_DIR")
    if folder:
        with open(os.path.join(folder, key), "w") as f:
            f.write(json.dumps(value))


def stamp_init(worker_id: int) -> None:
    """worker_init_fn: when worker 0 is up (started, imported, dataset unpickled)."""
    if worker_id == 0:
        _write("init", time.time())


class StampSample:
    """Wraps a per-sample transform; worker 0 records how long its first sample took."""

    def __init__(self, transform):
        self.transform = transform
        self.done = False

    def __call__(self, data):
        t0 = time.perf_counter()
        out = self.transform(data)
        info = get_worker_info()
        if not self.done and info is not None and info.id == 0:
            self.done = True
            _write("sample", time.perf_counter() - t0)
        return out


def read_stamps(t0: float) -> dict:
    folder = os.environ["FASTPREP_PROBE_DIR"]
    with open(os.path.join(folder, "init")) as f:
        init = json.load(f)
    with open(os.path.join(folder, "sample")) as f:
        sample = json.load(f)
    return {"init_s": init - t0, "sample_s": sample}
