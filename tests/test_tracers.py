"""Traces in tracing processes (fastprep.data._tracers): a traced pipeline's per-sample Python
run in other interpreters, its records replayed in the loader.

The reference is the user's dataset run literally under ``sample_rng`` (test_traced's), never
another fastprep path. Each test lowers ``TRACE_AFTER`` to 0 and waits until a tracing process
holds the pipeline, then checks that the samples really were traced there.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

from conftest import make_image_folder
from fastprep.data import DataLoader
from fastprep.data import traced as traced_module
from fastprep.data._tracers import tracers
from test_traced import SEED, DataAugmentationDINO, GaussianBlur, ThreeViews, assert_same, reference

# JPEGs of every kind (traced elsewhere; the loader decodes them to RGB as Pillow's convert does)
# and a PNG, which the loader's process traces itself
_FILES = [("420", 90, 120), ("444", 77, 101), ("420-progressive", 100, 66), ("422", 20, 300), ("420", 64, 64),
          ("gray", 64, 96), ("cmyk", 81, 70), ("png", 72, 88), ("gray-progressive", 1, 1), ("420", 120, 90),
          ("444", 33, 47), ("420", 101, 99)]
_JPEGS = sum(encoding != "png" for encoding, _, _ in _FILES)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("tracers"), _FILES, classes=3)


@pytest.fixture
def elsewhere(monkeypatch):
    monkeypatch.setattr(traced_module, "TRACE_AFTER", 0)


def _pipeline(loader):
    return loader._thread_loader.pipeline


def _started(loader, ds) -> object:
    """Run one epoch (which gives the pipeline to the tracing processes), then wait until one
    holds it. Returns the pipeline."""
    pipeline = _pipeline(loader)
    list(loader)
    pool, token = pipeline._tracers
    assert pool.wait(token, 120), pool.reason
    return pipeline


def test_traced_elsewhere_bit_for_bit(root, elsewhere):
    ds = ImageFolder(root, DataAugmentationDINO())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    pipeline = _started(loader, ds)
    before = pipeline.traced_elsewhere
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))
    assert pipeline.traced_elsewhere - before == _JPEGS  # every JPEG of the epoch
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=2))


def test_a_window_libjpeg_warns_on_is_traced_here_from_pillows_decode(tmp_path, elsewhere):
    """A file that Pillow decodes but libjpeg warns on (its scan ends half-way): the replay's
    strict window decode fails, and the sample is traced in the loader's process from
    Pillow's decode, as the dataset itself does."""
    top = make_image_folder(tmp_path, _FILES[:6], classes=2)
    path = os.path.join(top, "class1", "img03.jpg")
    with open(path, "rb") as f:
        data = f.read()
    scan = data.index(b"\xff\xda")
    cut = scan + (len(data) - scan) // 2
    with open(path, "wb") as f:
        f.write(data[:cut] + b"\xff\xd9")
    ds = ImageFolder(top, DataAugmentationDINO())
    loader = DataLoader(ds, batch_size=3, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    _started(loader, ds)
    assert_same(list(loader), reference(ds, list(range(len(ds))), 3, epoch=1))


def test_a_transform_changed_between_epochs_is_traced_as_changed(root, elsewhere):
    """The traces follow the transform as the loader's process holds it: a change made between
    epochs (a crop scale schedule) reaches the tracing processes."""
    transform = DataAugmentationDINO()
    ds = ImageFolder(root, transform)
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    pipeline = _started(loader, ds)
    transform.local_transfo.transforms[0].scale = (0.3, 0.35)
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))
    pool, token = pipeline._tracers
    assert pool.wait(token, 120), pool.reason
    before = pipeline.traced_elsewhere
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=2))
    assert pipeline.traced_elsewhere - before == _JPEGS


def test_views_without_records_are_traced_here_exactly(root, elsewhere):
    """ThreeViews' steps have no pixel step (a point function, filters): a tracing process
    answers that, and the loader traces and replays those samples itself."""
    ds = ImageFolder(root, ThreeViews())
    loader = DataLoader(ds, batch_size=3, num_workers=2, seed=SEED)
    _started(loader, ds)
    assert_same(list(loader), reference(ds, list(range(len(ds))), 3, epoch=1))


def test_compiled_composes_stay_on_their_native_route(root, elsewhere):
    """A class whose views are whole Composes the native compiler takes is planned natively,
    not sent to tracing processes."""

    class Two:
        def __init__(self):
            self.a = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor()])

        def __call__(self, img):
            return [self.a(img), self.a(img)]

    ds = ImageFolder(root, Two())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4))
    assert _pipeline(loader)._tracers is False and _pipeline(loader).traced_elsewhere == 0


def test_timm_traced_elsewhere_bit_for_bit(root, elsewhere):
    timm_data = pytest.importorskip("timm.data")
    t = timm_data.create_transform(48, is_training=True, auto_augment="rand-m9-mstd0.5", re_prob=0.5,
                                   re_mode="pixel", interpolation="random")
    ds = ImageFolder(root, t)
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    pipeline = _started(loader, ds)
    before = pipeline.traced_elsewhere
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))
    assert pipeline.traced_elsewhere > before


class _Locked:
    """A transform holding a lock: it cannot be pickled."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inner = T.Compose([T.RandomResizedCrop(32), GaussianBlur(0.5), T.ToTensor()])

    def __call__(self, img):
        with self.lock:
            return self.inner(img)


def test_a_transform_that_cannot_be_pickled_is_traced_here(root, elsewhere):
    ds = ImageFolder(root, _Locked())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4))
    pipeline = _pipeline(loader)
    assert pipeline._tracers is False and "cannot be pickled" in pipeline.tracing_reason
    assert pipeline.traced_elsewhere == 0


def test_a_tracing_process_that_dies_fails_its_samples_by_name(root, elsewhere, monkeypatch):
    from fastprep.data import engine

    monkeypatch.setattr(engine, "_NEXT_EPOCH_BATCHES", 0)  # nothing of the next epoch planned before the kill
    ds = ImageFolder(root, DataAugmentationDINO())
    loader = DataLoader(ds, batch_size=len(ds), num_workers=2, seed=SEED)
    pipeline = _started(loader, ds)
    pool, token = pipeline._tracers
    for pid in pool.pids():
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(Exception) as raised:
        list(loader)
    message = str(raised.value)
    assert "tracing process" in message and "killed by signal 9" in message, message
    assert any(os.path.basename(path) in message for path, _ in ds.samples), message
    # a new process is started; the next epochs are exact again
    assert pool.wait(token, 120), pool.reason
    assert_same(list(loader), reference(ds, list(range(len(ds))), len(ds), epoch=2))
    assert pipeline.traced_elsewhere > 0


def test_a_process_that_cannot_start_leaves_the_traces_here(root, elsewhere, monkeypatch, capfd):
    """Tracing processes that fail to start (here: they exit at once) say why, quietly, and the
    loader traces its samples itself, exactly."""
    from fastprep.data import _tracers

    monkeypatch.setattr(_tracers, "_BOOT", "import sys; sys.stderr.write('no fastprep here\\n'); sys.exit(3)")
    monkeypatch.setattr(_tracers, "_TRACERS", None)  # a pool of its own, started with the failing boot
    ds = ImageFolder(root, DataAugmentationDINO())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    list(loader)
    deadline = time.monotonic() + 60
    while tracers().reason is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert tracers().reason == "a tracing process exited with status 3: no fastprep here"
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))
    assert _pipeline(loader).traced_elsewhere == 0
    assert "exited with status 3" in _pipeline(loader).tracing_reason
    tracers().close()
    assert capfd.readouterr().err == ""


def test_tracing_processes_end_with_the_loader_process(root, tmp_path):
    """A script that iterates a traced loader and exits (without closing anything): its tracing
    processes are gone soon after, and nothing reached stderr."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from torchvision.datasets import ImageFolder
        from fastprep.data import DataLoader, traced
        from test_traced import DataAugmentationDINO
        traced.TRACE_AFTER = 0
        loader = DataLoader(ImageFolder({root!r}, DataAugmentationDINO()), batch_size=4, num_workers=2, seed=1)
        list(loader)
        pool, token = loader._thread_loader.pipeline._tracers
        assert pool.wait(token, 120), pool.reason
        list(loader)
        assert loader._thread_loader.pipeline.traced_elsewhere > 0
        print(*pool.pids())
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    pids = [int(p) for p in done.stdout.split()]
    assert pids
    deadline = time.monotonic() + 30
    for pid in pids:
        while _alive(pid):
            assert time.monotonic() < deadline, f"tracing process {pid} outlived its loader"
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_trace_processes_setting(monkeypatch):
    from fastprep.data._tracers import default_processes

    monkeypatch.setenv("FASTPREP_TRACE_PROCESSES", "3")
    assert default_processes() == 3
    monkeypatch.setenv("FASTPREP_TRACE_PROCESSES", "0")
    assert default_processes() == 0
    monkeypatch.setenv("FASTPREP_TRACE_PROCESSES", "many")
    with pytest.raises(ValueError, match="FASTPREP_TRACE_PROCESSES"):
        default_processes()
    monkeypatch.setenv("FASTPREP_TRACE_PROCESSES", "-2")
    assert default_processes() == 0


def test_no_tracing_processes_when_set_to_zero(root, elsewhere, monkeypatch):
    monkeypatch.setenv("FASTPREP_TRACE_PROCESSES", "0")
    ds = ImageFolder(root, DataAugmentationDINO())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4))
    assert _pipeline(loader)._tracers is False
    assert _pipeline(loader).traced_elsewhere == 0


def test_the_pool_is_shared(root, elsewhere):
    """Two loaders use the same processes (one interpreter's start-up cost, not one per loader)."""
    a = DataLoader(ImageFolder(root, DataAugmentationDINO()), batch_size=4, num_workers=2, seed=SEED)
    b = DataLoader(ImageFolder(root, ThreeViews()), batch_size=4, num_workers=2, seed=SEED)
    list(a)
    list(b)
    assert _pipeline(a)._tracers[0] is _pipeline(b)._tracers[0] is tracers()


def test_forgetting_never_waits_for_a_busy_process(root, elsewhere):
    """A pipeline's finalizer may run (garbage collection) in a thread that is inside a call
    on the same process: forgetting then waits for nothing, and the drop goes with the next
    call."""
    ds = ImageFolder(root, DataAugmentationDINO())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    pipeline = _started(loader, ds)
    pool, token = pipeline._tracers
    spare = pool.give(pool.pickle(pipeline))
    assert pool.wait(spare, 120)
    holder = next(p for p in pool._processes if spare in p.given)
    with holder.lock:  # busy: the drop is queued, not sent (a blocking forget would never return here)
        pool.forget(spare)
        assert spare in holder.given and holder.dropped == [spare]
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))  # its calls send the drop
    assert spare not in holder.given and holder.dropped == []
