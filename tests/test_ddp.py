"""examples/ddp_train.py under ``torchrun --nproc_per_node=2`` on the CPU (gloo).

The reference is the same script run in one process (no process group): with a sample
seed every sample's delivered tensor is keyed by ``(seed, epoch, index)``, so the per-index
digests of the two ranks together must equal the one-process digests exactly, the ranks'
index sets must be disjoint and cover the dataset, and a corrupt file must be skipped (or
named) as in one process. Each torchrun launch starts three Python processes plus one
DataLoader worker per rank: tens of seconds on a small machine, hence few launches.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from fastprep.bench.synthetic import encode_jpeg, photo_like

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "ddp_train.py")
SIZES = [(40, 56), (48, 37), (33, 60), (52, 44), (61, 33), (35, 70), (50, 50), (44, 29), (30, 41), (37, 38), (45, 45)]
ARGS = ["--epochs", "2", "--batch-size", "3", "--crop", "24", "--seed", "5", "--device", "cpu"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """11 good JPEGs + 1 corrupt in two classes: 12 files, divisible by 2 ranks (no padding)."""
    root = tmp_path_factory.mktemp("ddp")
    for i, (h, w) in enumerate(SIZES):
        sub = root / ("cat" if i % 2 else "dog")
        sub.mkdir(exist_ok=True)
        (sub / f"{i:02d}.jpg").write_bytes(encode_jpeg(photo_like(h, w, seed=i)))
    (root / "cat" / "07-corrupt.jpg").write_bytes(b"\xff\xd8\xff\xdb" + b"\x00" * 40)
    return str(root)


def _load_example():
    spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _single_process(folder, dump, *extra):
    threads = torch.get_num_threads()
    try:
        assert _load_example().main([folder, *ARGS, "--workers", "0", "--dump", dump, *extra]) == 0
    finally:
        torch.set_num_threads(threads)
    with open(os.path.join(dump, "rank0.json")) as f:
        return json.load(f)


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def _torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", EXAMPLE, *args]


def _session_pids(sid):
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # fields[3]: session id
                pids.append(int(p))
    return pids


def _example_pids(folder):
    """Live processes running the example on ``folder`` (ranks and their DataLoader workers,
    which torchrun puts in sessions of their own)."""
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{p}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z" and EXAMPLE.encode() in argv[:3] and folder.encode() in argv:
                pids.append(int(p))
    return pids


def _shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _run(cmd, timeout):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                            cwd=ROOT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"torchrun did not finish in {timeout} s (hang)")
    return proc.returncode, out, proc.pid


def test_torchrun_two_ranks_match_one_process(folder, tmp_path):
    single = _single_process(folder, str(tmp_path / "single"), "--on-error", "skip")
    shm_before = _shm()
    rc, out, sid = _run(_torchrun(folder, *ARGS, "--workers", "1", "--on-error", "skip",
                                  "--dump", str(tmp_path / "ddp")), timeout=90)
    assert rc == 0, out
    ranks = []
    for r in range(2):
        with open(tmp_path / "ddp" / f"rank{r}.json") as f:
            ranks.append(json.load(f))
    n = 12
    for epoch in ("0", "1"):
        a, b = ranks[0]["digests"][epoch], ranks[1]["digests"][epoch]
        assert not set(a) & set(b), "ranks saw the same index"
        assert sorted(int(i) for i in set(a) | set(b)) == list(range(n))
        assert {**a, **b} == single["digests"][epoch]
    assert single["digests"]["0"] != single["digests"]["1"]
    # one corrupt file, replaced once per epoch: counted once per epoch over the ranks
    assert single["skipped"] == 2
    assert ranks[0]["skipped"] + ranks[1]["skipped"] == 2
    assert "skipped (all ranks, so far) 2" in out
    assert not _session_pids(sid), "processes left behind"
    assert not {s for s in _shm() - shm_before if s.startswith("torch_")}


def test_torchrun_corrupt_file_raises_naming_it(folder):
    with pytest.raises(Exception, match="07-corrupt.jpg"):
        _single_process(folder, "/nonexistent-dump-unused", "--on-error", "raise")
    rc, out, sid = _run(_torchrun(folder, *ARGS, "--workers", "0", "--on-error", "raise"), timeout=90)
    assert rc != 0
    assert "DecodeError" in out and "07-corrupt.jpg" in out
    assert not _session_pids(sid), "processes left behind"


def test_torchrun_interrupted_leaves_nothing(folder):
    shm_before = _shm()
    # The folder's corrupt file (on_error="raise") usually ends a rank within the first
    # epoch, so the SIGINT lands while torchrun tears the job down or just after: this checks
    # that an interrupted (or failed) job leaves nothing behind, not how long ranks blocked
    # in a gloo collective take to honour Ctrl-C (they cannot take the KeyboardInterrupt until
    # the collective returns; torchrun SIGKILLs them after its 30 s grace period).
    proc = subprocess.Popen(_torchrun(folder, *ARGS[2:], "--epochs", "1000", "--workers", "1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(), cwd=ROOT,
                            start_new_session=True)
    started, deadline = 0, time.monotonic() + 60
    lines = []
    while started < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        # the ranks share the pipe, and print writes the text and its newline separately,
        # so both ranks' lines can arrive as one
        started += line.count("epoch 0 started")
    assert started == 2, "".join(lines)
    time.sleep(1.0)  # mid-epoch, workers running
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    try:
        proc.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        left = _example_pids(folder)
        for pid in left:  # torchrun starts each rank in a session of its own
            os.kill(pid, signal.SIGKILL)
        proc.stdout.close()  # the ranks held the pipe: communicate() would wait for them
        proc.wait()
        pytest.fail(f"torchrun did not stop within 45 s of SIGINT (ranks left: {left})")
    deadline = time.monotonic() + 10
    while (_session_pids(proc.pid) or _example_pids(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _session_pids(proc.pid), "processes left behind after SIGINT"
    assert not _example_pids(folder), "ranks or their workers left behind after SIGINT"
    assert not {s for s in _shm() - shm_before if s.startswith("torch_")}
