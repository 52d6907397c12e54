"""python -m fastprep.bench: data cache, pipelines' semantics, the simulated accelerator's
accounting, the CLI (quick mode), diagnose, profile. No timings are asserted except the
simulated accelerator's, whose clock is the test's own."""

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fastprep.bench import cli
from fastprep.bench.dataset import BuiltinSpec, builtin_dataset, folder_dataset
from fastprep.bench.pipelines import (PIPELINES, MatmulConvertColor, NumpyRandomMask, PipelineConfig,
                                      ScipyRandomMask, StackYuvScale)
from fastprep.bench.profiling import Labelled, LabelledCompose
from fastprep.bench.runner import ConfigResult, measure
from fastprep.bench.trainer import RealTrainer, SimulatedAccelerator, ToyNet, default_step_ms, train_step_flops

import fastprep

# The subprocess imports the same fastprep as this process (installed or built in place).
FASTPREP_PARENT = Path(fastprep.__file__).resolve().parents[1]
SMALL = BuiltinSpec(height=96, width=128)  # fast to generate; crops of 64


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTPREP_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ------------------------------------------------------------------------------------ data


class TestData:
    def test_builtin_is_cached_and_deterministic(self, cache):
        a = builtin_dataset(3, SMALL, processes=1, progress=False)
        assert len(a.files) == 3 and a.targets == [0, 1, 2]
        assert all(Path(f).is_relative_to(cache) for f in a.files)
        first = [Path(f).read_bytes() for f in a.files]
        mtimes = [os.stat(f).st_mtime_ns for f in a.files]
        b = builtin_dataset(4, SMALL, processes=2, progress=False)  # reuses 3, makes 1
        assert b.files[:3] == a.files
        assert [os.stat(f).st_mtime_ns for f in b.files[:3]] == mtimes
        for f in b.files[:3]:
            os.remove(f)
        c = builtin_dataset(3, SMALL, processes=1, progress=False)
        assert [Path(f).read_bytes() for f in c.files] == first

    def test_builtin_jpeg_parameters(self, cache):
        from fastprep.io import jpeg_info

        d = builtin_dataset(1, processes=1, progress=False)
        info = jpeg_info(Path(d.files[0]).read_bytes())
        assert (info.height, info.width, info.subsampling, info.progressive) == (533, 800, "4:2:0", False)
        assert "bench-" in d.root

    def test_folder_layouts(self, cache, tmp_path):
        src = builtin_dataset(4, SMALL, processes=1, progress=False)
        tree = tmp_path / "tree"
        for i, f in enumerate(src.files):
            (tree / ("b" if i % 2 else "a")).mkdir(parents=True, exist_ok=True)
            (tree / ("b" if i % 2 else "a") / f"{i}.jpg").write_bytes(Path(f).read_bytes())
        d = folder_dataset(tree)
        assert d.targets == [0, 0, 1, 1] and len(d.files) == 4
        flat = tmp_path / "flat"
        flat.mkdir()
        (flat / "x.JPEG").write_bytes(Path(src.files[0]).read_bytes())
        (flat / "notes.txt").write_text("not an image")
        assert folder_dataset(flat).targets == [0]
        with pytest.raises(ValueError, match="no JPEG files"):
            folder_dataset(self._empty(tmp_path))
        with pytest.raises(ValueError, match="must be a folder"):
            folder_dataset(tmp_path / "missing")

    @staticmethod
    def _empty(tmp_path):
        p = tmp_path / "empty"
        p.mkdir()
        return p

    def test_bad_count(self, cache):
        with pytest.raises(ValueError, match="num_images must be >= 1, got 0"):
            builtin_dataset(0, SMALL)


# ------------------------------------------------------------------------------ pipelines


class TestReferenceTransforms:
    def test_scipy_and_numpy_masks_agree(self):
        img = torch.randint(1, 256, (3, 40, 50), dtype=torch.uint8)
        torch.manual_seed(3)
        a = ScipyRandomMask(0.25)(img)
        torch.manual_seed(3)
        b = NumpyRandomMask(0.25)(img.clone())
        assert torch.equal(a, b)
        masked = (a == 0).all(0).float().mean().item()
        assert 0.6 < masked < 0.9  # 1 - 0.75**5 = 0.76 for a cross of 5 pixels

    def test_matmul_convert_color_formula(self):
        img = torch.randint(0, 256, (3, 5, 7), dtype=torch.uint8)
        r, g, b = img.double()
        want = torch.stack([0.299 * r + 0.587 * g + 0.114 * b,
                            -0.16874 * r - 0.33126 * g + 0.5 * b + 128,
                            0.5 * r - 0.41869 * g - 0.08131 * b + 128])
        got = MatmulConvertColor()(img)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=0)
        batch = StackYuvScale()([(img, 1), (img, 2)])
        torch.testing.assert_close(batch[0][1].double(), want / 255, atol=1e-6, rtol=0)
        assert batch[1].tolist() == [1, 2]

    def test_ycbcr_mask_fill_and_same_mask_as_rgb(self):
        from fastprep import functional as F
        from fastprep.transforms import RandomMask

        img = torch.randint(1, 256, (3, 33, 70), dtype=torch.uint8)
        torch.manual_seed(5)
        out = RandomMask(0.3, fill=(0, 128, 128))(img)  # what the fastprep-ycbcr pipeline runs
        torch.manual_seed(5)
        seed = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
        ref = F.apply_random_mask(img, 0.3, fill=0, seed=seed)
        mask = (ref == 0).all(0) & (img != 0).any(0)
        assert mask.any() and not mask.all()
        assert (out[0][mask] == 0).all() and (out[1:][:, mask] == 128).all()
        assert torch.equal(out[:, ~mask], img[:, ~mask])


@pytest.mark.parametrize("name", list(PIPELINES))
def test_pipeline_batches_have_the_same_semantics(name, cache):
    """Every pipeline delivers float32 [N, 3, S, S] YUV in [0, 1] with ~76% of pixels masked
    to (0, 128/255, 128/255)."""
    pipe = PIPELINES[name]
    if pipe.unavailable():
        pytest.skip(pipe.unavailable())
    data = builtin_dataset(4, SMALL, processes=1, progress=False)
    cfg = PipelineConfig(crop_size=64, batch_size=4, num_workers=0)
    torch.manual_seed(0)
    images, targets = next(iter(pipe.loader(data.files, data.targets, 4, cfg)))
    assert images.dtype == torch.float32 and images.shape == (4, 3, 64, 64)
    assert targets.dtype == torch.int64 and sorted(targets.tolist()) == [0, 1, 2, 3]
    assert images.min() >= 0 and images.max() <= 1
    masked = ((images[:, 0] == 0) & ((images[:, 1:] - 128 / 255).abs() < 1e-6).all(1)).float().mean().item()
    assert 0.65 < masked < 0.87


def test_reference_and_optimized_decode_the_same_crop_and_mask(cache):
    """Same torch RNG calls in the same order: the same crop and mask, so the outputs agree up
    to the two decoders (Pillow's and the system libjpeg-turbo) and float rounding."""
    data = builtin_dataset(1, SMALL, processes=1, progress=False)
    cfg = PipelineConfig(crop_size=64)
    ref, opt = PIPELINES["reference"].parts(cfg), PIPELINES["reference-optimized"].parts(cfg)
    torch.manual_seed(11)
    a = ref.transform(ref.read(data.files[0]))
    torch.manual_seed(11)
    b = opt.collate([(opt.transform(opt.read(data.files[0])), 0)])[0][0]
    diff = (a - b).abs() * 255
    assert diff.mean() < 0.5 and diff.max() < 8


# --------------------------------------------------------------------------------- trainer


class _Clock:
    """A producer that makes batch k available at ``start + k * period`` (like workers
    running in the background) and costs no CPU."""

    def __init__(self, n, period_s, batch):
        self.n, self.period_s, self.batch = n, period_s, batch

    def __iter__(self):
        start = time.perf_counter()
        for k in range(self.n):
            wait = start + k * self.period_s - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            yield self.batch


def _run_sim(step_ms, period_ms, steps=6, warmup=1):
    batch = (torch.zeros(2, 3, 4, 4), torch.zeros(2, dtype=torch.int64))
    res = ConfigResult("clock", 1, 2, steps, warmup)
    return measure(lambda: _Clock(steps + warmup, period_ms / 1e3, batch), SimulatedAccelerator(step_ms),
                   steps=steps, warmup=warmup, result=res)


def test_simulated_accelerator_data_wait_extremes():
    slow_device = _run_sim(step_ms=60, period_ms=2)  # data far faster than the device
    assert slow_device.data_wait_fraction < 0.1
    assert slow_device.starvation_fraction < 0.15
    assert slow_device.steps_per_s == pytest.approx(1 / 0.060, rel=0.3)
    fast_device = _run_sim(step_ms=0.1, period_ms=40)  # the device waits for data
    assert fast_device.data_wait_fraction > 0.8
    assert fast_device.starvation_fraction > 0.9


def test_default_step_and_toy_net():
    assert train_step_flops(64, 256) == pytest.approx(292.17e9, rel=1e-3)
    assert default_step_ms() == 49
    assert ToyNet(256)(torch.zeros(1, 3, 256, 256)).shape == (1, 10)
    assert ToyNet(40)(torch.zeros(2, 3, 40, 40)).shape == (2, 10)


def test_real_trainer_on_cpu_accumulates_on_device():
    t = RealTrainer("cpu", size=16)
    t.begin_window()
    for _ in range(2):
        t.step(torch.rand(4, 3, 16, 16), torch.tensor([0, 1, 2, 3]))
    busy, _ = t.end_window()
    assert busy > 0
    m = t.metrics()
    assert m["mean_loss"] > 0 and 0 <= m["accuracy"] <= 1


# ---------------------------------------------------------------------------------- labels


def test_labelled_compose_records_ranges_and_pickles():
    comp = LabelledCompose([lambda x: x + 1, torch.nn.ReLU()], names=["add", "relu"], prefix="p/")
    with torch.profiler.profile() as prof:
        out = comp(torch.zeros(3))
        Labelled(torch.neg, "negate")(out)
    names = {e.name for e in prof.events()}
    assert {"p/add", "p/relu", "negate"} <= names
    restored = pickle.loads(pickle.dumps(LabelledCompose([torch.nn.ReLU()])))
    assert restored.names == ["ReLU"]
    with pytest.raises(ValueError, match="one entry per transform"):
        LabelledCompose([torch.nn.ReLU()], names=["a", "b"])
    with pytest.raises(TypeError, match="must be callable"):
        LabelledCompose([3])


# ------------------------------------------------------------------------------------- CLI


def test_cli_quick_json_and_plot(cache, tmp_path):
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    env = {**os.environ, "FASTPREP_CACHE": str(cache), "PYTHONPATH": str(FASTPREP_PARENT)}
    proc = subprocess.run(
        [sys.executable, "-m", "fastprep.bench", "--quick", "--num-images", "8", "--batch-size", "4", "--steps", "2",
         "--warmup", "1", "--workers", "0,1", "--json", str(out), "--plot", str(plot)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Diagnosis:" in proc.stdout and "speed-up" in proc.stdout
    report = json.loads(out.read_text())
    results = report["results"]
    assert {r["pipeline"] for r in results} == set(PIPELINES)
    assert len(results) == 2 * len(PIPELINES)
    for r in results:
        assert r["skipped"] is None and r["error"] is None, r
        for key in ("samples_per_s", "steps_per_s", "data_wait_fraction", "time_to_first_batch_s",
                    "speedup_vs_reference", "starvation_fraction"):
            assert isinstance(r[key], float), (key, r)
        assert 0 <= r["data_wait_fraction"] <= 1
    assert all(r["speedup_vs_reference"] == 1.0 for r in results if r["pipeline"] == "reference")
    machine = report["machine"]
    for key in ("cpu_model", "logical_cores", "torch", "numba", "libjpeg_turbo"):
        assert machine[key], key
    assert report["settings"]["step_ms"] == 3.0  # the toy CNN, batch 4 at 256x256
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_diagnose_returns_five_rungs(cache, tmp_path, capsys):
    out = tmp_path / "d.json"
    rc = cli.main(["diagnose", "--num-images", "4", "--batch-size", "2", "--crop-size", "64", "--steps", "2",
                   "--warmup", "1", "--workers", "0", "--pipelines", "reference,fastprep", "--step-ms", "1",
                   "--no-progress", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    for name in ("reference", "fastprep"):
        rungs = report["ladders"][name]
        assert [r["rung"] for r in rungs] == ["device batch", "host batch", "sample cached", "bytes cached", "full"]
        assert all(r["error"] is None and r["samples_per_s"] > 0 for r in rungs)
    text = capsys.readouterr().out
    assert "(5) full" in text and "reference:" in text


def test_profile_trace_has_labels(cache, tmp_path, capsys):
    prof = tmp_path / "prof"
    rc = cli.main(["--num-images", "2", "--batch-size", "2", "--crop-size", "64", "--steps", "1", "--warmup", "0",
                   "--workers", "0", "--pipelines", "reference,fastprep", "--step-ms", "1", "--no-progress",
                   "--profile", str(prof), "--profile-steps", "1"])
    assert rc == 0
    want = {"reference": {"PILOpen", "RandomCrop", "RandomMask(scipy)", "ConvertColor(matmul)", "Scale"},
            "fastprep": {"DecodeRandomCrop", "RandomMask", "batch_transform"}}
    for name, labels in want.items():
        (trace,) = (prof / name).glob("*.pt.trace.json")
        names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
        assert labels | {"read_file", "collate", "h2d_copy", "train_step", "data_wait"} <= names, names


def test_cli_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--pipelines", "nope"])
    assert "unknown pipeline" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--workers", "-1"])


def test_real_trainer_takes_more_than_ten_classes():
    from fastprep.bench.trainer import make_trainer

    trainer = make_trainer("cpu", None, 4, 32, num_classes=13)
    images = torch.rand(4, 3, 32, 32)
    trainer.step(images, torch.tensor([0, 5, 12, 3]))
    assert trainer.metrics()["accuracy"] >= 0


def test_folder_dataset_skips_files_that_are_not_jpegs(tmp_path, capsys):
    from fastprep.bench.dataset import folder_dataset
    from fastprep.bench.synthetic import encode_jpeg, photo_like

    for k in range(2):
        (tmp_path / f"c{k}").mkdir()
        (tmp_path / f"c{k}" / "a.jpg").write_bytes(encode_jpeg(photo_like(20, 30, k)))
    (tmp_path / "c1" / "broken.jpg").write_bytes(b"not a jpeg")
    data = folder_dataset(tmp_path)
    assert [os.path.basename(f) for f in data.files] == ["a.jpg", "a.jpg"] and data.targets == [0, 1]
    assert "c1/broken.jpg" in capsys.readouterr().out
