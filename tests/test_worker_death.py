"""A DataLoader worker killed with SIGKILL under ``fastprep.data.make_loader``: the main
process must raise promptly (not hang waiting for the dead worker's batches) and a new
iteration of the same loader must then deliver a complete epoch.

The scenario runs in a subprocess with a timeout, so a hang fails the test instead of
blocking the suite. Only public APIs are used: the worker kills itself from a
user-supplied ``transform`` (``make_loader(..., transform=...)``), the first time any
worker runs it.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from fastprep.transforms import DecodeCenterCrop

HERE = os.path.dirname(os.path.abspath(__file__))
N_FILES, BATCH, CROP = 24, 4, 16


class KillOnce:
    """``DecodeCenterCrop(CROP)``, except that the first call in any process that finds no
    ``flag`` file creates it and SIGKILLs its own process (a worker dying mid-epoch)."""

    def __init__(self, flag: str):
        self.flag = flag
        self.crop = DecodeCenterCrop(CROP)

    def __call__(self, data):
        try:
            fd = os.open(self.flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return self.crop(data)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


_CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {here!r})
    import torch
    from fastprep.data import make_loader
    from test_worker_death import KillOnce, BATCH, CROP

    paths, flag, persistent = {paths!r}, {flag!r}, {persistent!r}
    loader = make_loader(paths, batch_size=BATCH, num_workers=2, crop_size=CROP, mask_ratio=0,
                         transform=KillOnce(flag), device="cpu", shuffle=False,
                         persistent_workers=persistent)
    out = {{}}
    t0 = time.monotonic()
    try:
        for _ in loader:
            pass
        out["first"] = "completed"
    except Exception as e:
        out["first"] = type(e).__name__ + ": " + str(e)
    out["seconds_to_raise"] = time.monotonic() - t0
    out["killed_pid"] = int(open(flag).read())
    t0 = time.monotonic()
    try:
        shapes, n = [], 0
        for images, targets in loader:
            shapes.append(tuple(images.shape))
            n += len(targets)
        out["second"] = {{"samples": n, "shapes": sorted(set(shapes))}}
    except Exception as e:
        out["second"] = type(e).__name__ + ": " + str(e)
    out["seconds_second"] = time.monotonic() - t0
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("death")
    rng = np.random.default_rng(0)
    out = []
    for i in range(N_FILES):
        p = root / f"{i:03d}.jpg"
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(p, quality=90)
        out.append(str(p))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL and fork-based workers")
# persistent: the prefetcher must drop torch's broken persistent iterator (and its dead
# worker) so the next epoch starts fresh workers instead of failing again.
@pytest.mark.parametrize("persistent", [False, True])
def test_killed_worker_raises_then_next_epoch_works(paths, tmp_path, persistent):
    flag = str(tmp_path / "killed")
    code = _CHILD.format(here=HERE, paths=paths, flag=flag, persistent=persistent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the loader hung after a worker was killed (no result in {e.timeout} s)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    # The main process reports the dead worker by its pid instead of waiting for its batches.
    assert res["first"].startswith("RuntimeError"), res
    assert "DataLoader worker" in res["first"] and str(res["killed_pid"]) in res["first"], res
    # Generous bound that still tells "promptly" from "only after a long timeout".
    assert res["seconds_to_raise"] < 60, res
    assert res["second"] == {"samples": N_FILES, "shapes": [[BATCH, 3, CROP, CROP]]}, res
