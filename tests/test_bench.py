"""python -m fastprep.bench: data cache, pipelines' semantics, the simulated accelerator's
accounting, the CLI (quick mode), diagnose, profile. No timings are asserted except the
simulated accelerator's, whose clock is the test's own."""

import json
import os
import pickle
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from fastprep.bench import cli
from fastprep.bench.dataset import BenchDataError, BuiltinSpec, builtin_dataset, folder_dataset, packed_copy
from fastprep.bench.pipelines import (PIPELINES, DivideScale, MatmulConvertColor, NumpyRandomMask, PipelineConfig,
                                      SampleDataset, SampleError, ScipyRandomMask, StackYuvScale)
from fastprep.bench.profiling import Labelled, LabelledCompose
from fastprep.bench.runner import ConfigResult, check_batch, measure, one_line_error
from fastprep.bench.trainer import RealTrainer, SimulatedAccelerator, ToyNet, default_step_ms, train_step_flops

import fastprep
import fastprep.bench.pipelines

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
        with pytest.raises(BenchDataError, match="no image files"):
            folder_dataset(self._empty(tmp_path))
        with pytest.raises(BenchDataError, match="must be a folder"):
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
    files = pipe.prepare_files(data.files, progress=False)
    torch.manual_seed(0)
    images, targets = next(iter(pipe.loader(files, data.targets, 4, cfg)))
    assert images.dtype == torch.float32 and images.shape == (4, 3, 64, 64)
    assert targets.dtype == torch.int64 and sorted(targets.tolist()) == [0, 1, 2, 3]
    for c, (lo, hi) in enumerate(((0, 255), (0, 255.5), (0, 255.5))):  # YUV of RGB in [0, 255]^3, or uint8 YCbCr
        assert images[:, c].min() >= lo / 255 and images[:, c].max() <= hi / 255 + 1e-6
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


def test_measure_goes_on_until_the_minimum_window_up_to_max_steps():
    """min_window_s: measuring continues past ``steps`` until the window lasts that long
    (the device's 20 ms steps put a floor under the time, so the count's floor holds on any
    machine), never past ``max_steps``; ``result.steps`` is the count measured."""
    batch = (torch.zeros(2, 3, 4, 4), torch.zeros(2, dtype=torch.int64))

    def run(min_window_s, max_steps):
        res = ConfigResult("clock", 1, 2, 2, 1)
        return measure(lambda: _Clock(1 + max_steps, 0.0, batch), SimulatedAccelerator(20), steps=2, warmup=1,
                       result=res, min_window_s=min_window_s, max_steps=max_steps)

    longer = run(0.1, 40)
    assert 6 <= longer.steps <= 40  # the 6th step cannot start before 5 x 20 ms have passed
    assert longer.samples_per_s == pytest.approx(longer.steps * 2 / longer.window_s)
    assert run(100.0, 5).steps == 5  # the cap
    assert run(0.0, 5).steps == 2  # no minimum: exactly the steps asked for


def test_default_step_and_toy_net():
    assert train_step_flops(64, 256) == pytest.approx(292.17e9, rel=1e-3)
    assert default_step_ms() == 49
    assert ToyNet(256)(torch.zeros(1, 3, 256, 256)).shape == (1, 10)
    assert ToyNet(40)(torch.zeros(2, 3, 40, 40)).shape == (2, 10)


def _reference_metrics(trainer, batches):
    """Loss and accuracy the trainer must report, from a copy of its model run by the test:
    each batch is scored by the model as it was before that batch's update."""
    import copy

    total_loss, correct, seen = 0.0, 0, 0
    for images, targets in batches:
        with torch.no_grad():
            logits = copy.deepcopy(trainer.model)(images)
        total_loss += torch.nn.functional.cross_entropy(logits, targets).item() * len(targets)
        correct += int((logits.argmax(1) == targets).sum())
        seen += len(targets)
        trainer.step(images, targets)
    return total_loss / seen, correct / seen


def test_real_trainer_metrics_are_exactly_what_the_model_scored():
    t = RealTrainer("cpu", size=16)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.rand(6, 3, 16, 16, generator=g), torch.randint(0, 10, (6,), generator=g)) for _ in range(3)]
    t.begin_window()
    loss, accuracy = _reference_metrics(t, batches)
    busy, _ = t.end_window()
    assert busy > 0
    m = t.metrics()
    assert m["accuracy"] == accuracy
    assert m["mean_loss"] == pytest.approx(loss, rel=1e-5)


def test_real_trainer_learns_a_separable_task():
    """Two classes told apart by brightness: after training, the model scores (as the
    trainer counts it) far above chance (0.5) on the last batches."""
    t = RealTrainer("cpu", size=8, lr=0.05)
    g = torch.Generator().manual_seed(1)
    for _ in range(25):
        targets = torch.randint(0, 2, (16,), generator=g)
        images = targets.float()[:, None, None, None].expand(16, 3, 8, 8) + 0.1 * torch.rand(16, 3, 8, 8,
                                                                                            generator=g)
        t.step(images, targets)
    t.correct.zero_()
    t.loss_sum.zero_()
    t.seen = 0
    for _ in range(5):
        targets = torch.randint(0, 2, (16,), generator=g)
        t.step(targets.float()[:, None, None, None].expand(16, 3, 8, 8).contiguous(), targets)
    assert t.metrics()["accuracy"] >= 0.9


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
    # the threads engine's rows name the stage that held them (with threads only)
    for r in results:
        threads = r["pipeline"] in ("fastprep", "fastprep-packed") and r["workers"] > 0
        assert (r["engine_stage"] is not None) == threads, r
        if threads:
            assert r["engine_stage"][0] in ("read", "decode", "hand-over")
    # the line names the best configuration *with threads* (here the only one: 1 worker), so
    # it is there whichever worker count was fastest on a noisy machine
    assert "Engine stage, fastprep (1 worker" in proc.stdout
    assert "%|" not in proc.stderr  # no progress bar written into a pipe
    # each pipeline alone, at the worker count of its best row, and the cores it needs
    assert set(report["uncapped"]) == set(PIPELINES)
    target = report["target"]
    assert target["samples_per_s"] == 2470 and "A100" in target["source"] and "NVIDIA" in target["source"]
    for name, u in report["uncapped"].items():
        rows = {r["workers"]: r for r in results if r["pipeline"] == name}
        assert u["error"] is None and u["workers"] in rows and u["steps"] == 2, u
        assert u["fed_samples_per_s"] == rows[u["workers"]]["samples_per_s"]
        assert u["samples_per_s"] > 0 and u["cpu_ms_per_sample"] > 0, u
        assert u["cores_for_target"] == pytest.approx(2470 * u["cpu_ms_per_sample"] / 1e3)
        assert u["cores_used"] == pytest.approx(u["cpu_ms_per_sample"] / 1e3 * u["samples_per_s"])
    assert report["uncapped"]["reference"]["speedup_vs_reference"] == 1.0
    assert set(report["best_vs_reference"]) == set(PIPELINES) - {"reference"}
    assert all(isinstance(r["capped_by_accelerator"], bool) for r in results)
    assert "Best vs best reference" in proc.stdout and "uncapped" in proc.stdout
    assert "cores for 2470/s" in proc.stdout and "NVIDIA's published figure" in proc.stdout
    machine = report["machine"]
    for key in ("cpu_model", "logical_cores", "torch", "numba", "libjpeg_turbo"):
        assert machine[key], key
    assert report["settings"]["step_ms"] == 3.0  # the toy CNN, batch 4 at 256x256
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_diagnose_returns_five_rungs(cache, tmp_path, capsys):
    out = tmp_path / "d.json"
    rc = cli.main(["diagnose", "--num-images", "4", "--batch-size", "2", "--crop-size", "64", "--steps", "2",
                   "--warmup", "1", "--workers", "0", "--pipelines", "reference,fastprep-packed", "--step-ms", "1",
                   "--no-progress", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    for name in ("reference", "fastprep-packed"):
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
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["--on-error", "ignore"])
    assert "--on-error" in capsys.readouterr().err


def test_real_trainer_takes_more_than_ten_classes():
    from fastprep.bench.trainer import make_trainer

    trainer = make_trainer("cpu", None, 4, 32, num_classes=13)
    images = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        assert trainer.model(images).shape == (4, 13)
    loss, accuracy = _reference_metrics(trainer, [(images, torch.tensor([0, 5, 12, 3]))])
    assert trainer.metrics()["accuracy"] == accuracy
    assert trainer.metrics()["mean_loss"] == pytest.approx(loss, rel=1e-5)


def test_folder_dataset_skips_files_that_are_not_jpegs(tmp_path):
    from fastprep.bench.dataset import folder_dataset
    from fastprep.bench.synthetic import encode_jpeg, photo_like

    for k in range(2):
        (tmp_path / f"c{k}").mkdir()
        (tmp_path / f"c{k}" / "a.jpg").write_bytes(encode_jpeg(photo_like(20, 30, k)))
    (tmp_path / "c1" / "broken.jpg").write_bytes(b"not a jpeg")
    data = folder_dataset(tmp_path)
    assert [os.path.basename(f) for f in data.files] == ["a.jpg", "a.jpg"] and data.targets == [0, 1]
    assert data.skipped == [(str(tmp_path / "c1" / "broken.jpg"), "not a JPEG (no SOI marker at the start)")]


# ------------------------------------------------------------------- output bounds (YUV)


SATURATED = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 255, 255), (255, 0, 255), (255, 255, 0), (0, 0, 0),
             (255, 255, 255)]


def _saturated_batch(n=4, size=8):
    """uint8 [n, 3, 8, size]: row i is the i-th corner of the RGB cube."""
    rows = torch.tensor(SATURATED, dtype=torch.uint8)  # [8, 3]
    img = rows.T[:, :, None].expand(3, len(SATURATED), size)
    return img[None].expand(n, 3, len(SATURATED), size).contiguous()


class TestOutputBounds:
    """U and V of saturated blue and red reach (0.5 * 255 + 128) / 255 = 255.5 / 255: valid."""

    def _formula(self, rgb):
        r, g, b = rgb.double().unbind(1)
        return torch.stack([0.299 * r + 0.587 * g + 0.114 * b, -0.16874 * r - 0.33126 * g + 0.5 * b + 128,
                            0.5 * r - 0.41869 * g - 0.08131 * b + 128], 1) / 255

    def test_saturated_colours_pass(self):
        from fastprep import data as D

        rgb = _saturated_batch()
        want = self._formula(rgb)
        assert want[:, 1].max() == pytest.approx(255.5 / 255) and want[:, 2].max() == pytest.approx(255.5 / 255)
        targets = torch.zeros(4, dtype=torch.int64)
        cpu = torch.device("cpu")
        check_batch(want.float(), targets, 4, 8, cpu)
        # what the pipelines' own colour stages make of it
        ref = torch.stack([DivideScale()(MatmulConvertColor()(x)) for x in rgb])
        opt = StackYuvScale()([(x, 0) for x in rgb])[0]
        fast = D.BatchYuvScale()(rgb)
        for out in (ref, opt, fast):
            torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=0)
            check_batch(out, targets, 4, 8, cpu)

    @pytest.mark.parametrize("channel,value", [(0, 1 + 1e-3), (0, -1e-3), (1, 255.5 / 255 + 1e-3), (2, -1e-3),
                                               (2, float("nan"))])
    def test_values_outside_the_formula_range_fail(self, channel, value):
        images = torch.full((2, 3, 4, 4), 0.5)
        images[1, channel, 2, 3] = value
        with pytest.raises(ValueError, match="YUV"[channel] + " values in"):
            check_batch(images, torch.zeros(2, dtype=torch.int64), 2, 4, torch.device("cpu"))


# --------------------------------------------------------------- a real, messy --data folder


def _messy_folder(root, good=6, size=(48, 64)):
    """``good`` JPEGs in two classes, then the kinds of bad files real folders have."""
    import io as _io

    from PIL import Image

    from fastprep.bench.synthetic import encode_jpeg, photo_like

    for k in range(good):
        d = root / f"class{k % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{k}.jpg").write_bytes(encode_jpeg(photo_like(*size, seed=k)))
    whole = encode_jpeg(photo_like(*size, seed=99))
    bad = {
        "class0/truncated.jpg": whole[:len(whole) // 2],
        "class0/empty.jpg": b"",
    }
    buf = _io.BytesIO()
    Image.fromarray(photo_like(*size, seed=98)).convert("CMYK").save(buf, "JPEG")
    bad["class1/cmyk.jpg"] = buf.getvalue()
    buf = _io.BytesIO()
    Image.fromarray(photo_like(*size, seed=97)).save(buf, "PNG")
    bad["class1/photo.png"] = buf.getvalue()
    bad["class1/png_behind_a.jpg"] = buf.getvalue()
    for rel, data in bad.items():
        (root / rel).write_bytes(data)
    return sorted(bad)


def _bench(args, cwd, cache, timeout=240):
    env = {**os.environ, "FASTPREP_CACHE": str(cache), "PYTHONPATH": str(FASTPREP_PARENT)}
    return subprocess.run([sys.executable, "-m", "fastprep.bench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


SMALL_RUN = ["--batch-size", "2", "--crop-size", "32", "--steps", "1", "--warmup", "0", "--step-ms", "1",
             "--no-progress"]


def test_cli_on_a_messy_folder_skips_lists_once_and_runs_everything(cache, tmp_path):
    from fastprep._platform import describe

    data = tmp_path / "data"
    bad = _messy_folder(data)
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    proc = _bench(["--data", str(data), "--workers", "0", *SMALL_RUN, "--json", str(out), "--plot", str(plot)],
                  tmp_path, cache)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stderr == ""  # no traceback, no warning
    assert proc.stdout.splitlines()[0] == describe()
    assert f"Left out {len(bad)} files" in proc.stdout
    for rel in bad:
        assert proc.stdout.count(rel) == 1, rel  # listed once, by its path
    lines = {line.split(": ", 1)[0].strip(): line for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert lines["class1/cmyk.jpg"].split(": ")[1] == "fastprep-ycbcr"  # the only pipeline that cannot take CMYK
    assert "PNG data, not a JPEG" in lines["class1/png_behind_a.jpg"]
    assert "empty file" in lines["class0/empty.jpg"]
    assert "Data: " in proc.stdout and "6 JPEGs (2 classes)" in proc.stdout
    report = json.loads(out.read_text())
    assert report["platform"] == describe() and report["machine"]["cpu"] == describe()
    assert sorted(os.path.relpath(s["path"], data) for s in report["settings"]["skipped_files"]) == bad
    assert report["settings"]["num_images"] == 6
    assert [r["error"] for r in report["results"]] == [None] * len(PIPELINES)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_on_error_raise_stops_at_the_first_bad_file(cache, tmp_path, capsys):
    data = tmp_path / "data"
    _messy_folder(data, good=2)
    assert cli.main(["--data", str(data), "--on-error", "raise", *SMALL_RUN]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    # sorted order: class0/0.jpg, class0/empty.jpg, ...
    assert line.startswith("python -m fastprep.bench: error: ") and str(data / "class0" / "empty.jpg") in line
    assert "empty file" in line and "Traceback" not in captured.out


@pytest.mark.parametrize("kind", ["pngs", "empty", "missing"])
def test_cli_folder_without_usable_images_is_one_line_and_exit_2(cache, tmp_path, kind, capsys):
    data = tmp_path / "data"
    if kind != "missing":
        data.mkdir()
    if kind == "pngs":
        from PIL import Image

        for k in range(2):
            Image.new("RGB", (40, 30), (k, 0, 0)).save(data / f"{k}.png")
    plot = tmp_path / "p.png"
    assert cli.main(["--data", str(data), "--plot", str(plot), *SMALL_RUN]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert str(data) in line and not plot.exists()
    assert {"pngs": "PNG data, not a JPEG", "empty": "no image files", "missing": "must be a folder"}[kind] in line


def test_folder_dataset_checks_every_pipeline_and_keeps_num_images_usable(tmp_path):
    from fastprep.bench.pipelines import check_fastprep

    data = tmp_path / "data"
    bad = _messy_folder(data, good=4)
    checks = {"RGB": (check_fastprep, ["fastprep"]),
              "YCbCr": (lambda b: check_fastprep(b, "YCbCr"), ["fastprep-ycbcr"])}
    d = folder_dataset(data, checks=checks)
    assert sorted(os.path.relpath(p, data) for p, _ in d.skipped) == bad
    assert len(d.files) == 4 and d.targets == [0, 0, 1, 1]
    # fill num_images with usable files, past the bad ones (class0's bad files sort after 2.jpg)
    three = folder_dataset(data, 3, checks=checks)
    assert [os.path.relpath(f, data) for f in three.files] == ["class0/0.jpg", "class0/2.jpg", "class1/1.jpg"]
    with pytest.raises(BenchDataError, match="class0/empty.jpg: empty file"):
        folder_dataset(data, checks=checks, on_error="raise")
    with pytest.raises(ValueError, match="on_error must be"):
        folder_dataset(data, on_error="ignore")


def test_sample_errors_name_the_file_not_an_index(tmp_path):
    good, bad = tmp_path / "good.jpg", tmp_path / "bad.jpg"
    from fastprep.bench.synthetic import encode_jpeg, photo_like

    good.write_bytes(encode_jpeg(photo_like(40, 40)))
    bad.write_bytes(b"\xff\xd8 not really")
    parts = PIPELINES["reference-optimized"].parts(PipelineConfig(crop_size=16))
    ds = SampleDataset([str(good), str(bad)], [0, 1], parts.read, parts.transform, length=50)
    ds[48]  # noqa: B018 - good.jpg
    with pytest.raises(SampleError, match=f"^{bad}: DecodeError: ") as e:
        ds[49]
    assert "49" not in str(e.value).replace(str(bad), "")  # the temporary path may hold any digits
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1, collate_fn=parts.collate)
    with pytest.raises(SampleError) as e:
        list(loader)
    assert "Traceback" in str(e.value)  # a worker's error carries its traceback text
    summary = one_line_error(e.value)
    assert summary.startswith(f"SampleError: {bad}: DecodeError: ") and "\n" not in summary


# -------------------------------------------------------------------------- diagnose ladder


class _TinyPipeline(fastprep.bench.pipelines.Pipeline):
    name = "tiny"

    def parts(self, cfg):
        from fastprep.bench.pipelines import Parts, ToDevice

        return Parts(read=lambda f: f, transform=lambda raw: torch.zeros(3, 4, 4),
                     collate=torch.utils.data.default_collate, to_device=ToDevice(cfg.device))


def test_ladder_remeasures_inverted_rungs_and_warns_when_they_persist(monkeypatch):
    from fastprep.bench import diagnose
    from fastprep.bench.dataset import BenchData

    # rungs 1-5, then the re-measurements of the inverted rungs (4 and 5: 70 > 50 * 1.05)
    script = iter([100.0, 90.0, 80.0, 50.0, 70.0, 60.0, 65.0])
    calls = []

    def fake_measure(make, trainer, *, steps, warmup, result, crop=None, on_step=None, bounds=None):
        calls.append(make)
        result.samples_per_s = next(script)
        result.starvation_fraction = 0.0
        return result

    monkeypatch.setattr(diagnose, "measure", fake_measure)
    data = BenchData(["a", "b"], [0, 1], "two", ".")
    rungs = diagnose.ladder(_TinyPipeline(), data, PipelineConfig(batch_size=2), lambda: SimulatedAccelerator(0),
                            steps=1, warmup=0, crop=4)
    assert len(calls) == 7
    assert [r["samples_per_s"] for r in rungs] == [100, 90, 80, 60, 70]  # each keeps its faster run
    assert [r["remeasured"] for r in rungs] == [False, False, False, True, True]
    assert rungs[3]["samples_per_s_runs"] == [50, 60] and rungs[4]["samples_per_s_runs"] == [70, 65]
    assert diagnose.inversions(rungs) == [(3, 4)]
    lines = diagnose.explain("tiny", rungs)
    assert "re-measured once" in lines[0] and "(4) bytes cached: 50, 60" in lines[0]
    assert lines[1].startswith("warning: tiny: (5) full is still faster than (4) bytes cached")
    assert "*" in diagnose.format_ladder({"tiny": rungs})
    # a monotonic ladder is measured once and not flagged
    script = iter([100.0, 90.0, 80.0, 50.0, 52.0])
    calls.clear()
    rungs = diagnose.ladder(_TinyPipeline(), data, PipelineConfig(batch_size=2), lambda: SimulatedAccelerator(0),
                            steps=1, warmup=0, crop=4)
    assert len(calls) == 5 and not any(r["remeasured"] for r in rungs)
    assert not any("warning" in line or "re-measured" in line for line in diagnose.explain("tiny", rungs))


# ------------------------------------------------------------------------------- config


def test_bench_config_validates_and_parses():
    from fastprep.bench.config import DEFAULTS, QUICK_MAX_STEPS, QUICK_MIN_WINDOW_S, BenchConfig

    args = cli.build_parser().parse_args(["--quick", "--on-error", "skip", "--workers", "0,2"])
    cfg = cli.config_from_args(args, ["--quick"])
    assert (cfg.num_images, cfg.steps, cfg.on_error, cfg.workers) == (128, 8, "skip", (0, 2))
    assert cfg.pipelines == tuple(PIPELINES)
    # --quick measures until a minimum window, unless the steps are given
    assert (cfg.min_window_s, cfg.max_steps) == (QUICK_MIN_WINDOW_S, QUICK_MAX_STEPS)
    mine = cli.config_from_args(cli.build_parser().parse_args(["--quick", "--steps", "3"]), [])
    assert (mine.min_window_s, mine.max_steps) == (0, 3)
    assert (BenchConfig().min_window_s, BenchConfig().max_steps) == (0, DEFAULTS["steps"])
    assert BenchConfig().target_rate == 2470
    assert cli.config_from_args(cli.build_parser().parse_args(["--target-rate", "1000"]), []).target_rate == 1000
    for bad in ({"on_error": "ignore"}, {"pipelines": ("nope",)}, {"workers": (-1,)}, {"mask_ratio": 2.0},
                {"target_rate": 0.0}, {"min_window_s": -1.0}):
        with pytest.raises(ValueError):
            BenchConfig(**bad)


def test_a_registered_pipeline_is_usable_everywhere(cache):
    """The docs/bench.md example: register, select by name, load batches that pass the check."""
    from fastprep import data as D
    from fastprep.bench.config import BenchConfig
    from fastprep.bench.pipelines import (Parts, Pipeline, ToDevice, get_pipeline, label_parts, read_tensor,
                                          register_pipeline)
    from fastprep.transforms import DecodeRandomCrop

    class CropOnly(Pipeline):
        name = "crop-only"
        summary = "ROI decode, no mask, device YUV + scale"

        def parts(self, cfg):
            steps = [DecodeRandomCrop(cfg.crop_size, pad_if_needed=True)]
            parts = Parts(read=read_tensor, transform=None, collate=D.collate_uint8, to_device=ToDevice(cfg.device),
                          batch_transform=D.BatchYuvScale(), prefetch=True)
            return label_parts(parts, cfg, ["DecodeRandomCrop"], steps)

    pipe = register_pipeline(CropOnly())
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_pipeline(CropOnly())
        assert get_pipeline("crop-only") is pipe and "crop-only" in BenchConfig().pipelines
        args = cli.build_parser().parse_args(["--pipelines", "crop-only,reference"])
        assert cli.config_from_args(args, []).pipelines == ("crop-only", "reference")
        data = builtin_dataset(2, SMALL, processes=1, progress=False)
        images, targets = next(iter(pipe.loader(data.files, data.targets, 2, PipelineConfig(crop_size=32,
                                                                                             batch_size=2))))
        check_batch(images, targets, 2, 32, torch.device("cpu"))
        ref = D.BatchYuvScale()(torch.stack([DecodeRandomCrop(32)(read_tensor(f)) for f in data.files]))
        assert images.shape == ref.shape  # same op chain; windows differ (random)
    finally:
        PIPELINES.pop("crop-only")
    with pytest.raises(TypeError, match="Pipeline instance"):
        register_pipeline("crop-only")


def _pil_rgb(path):
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_packed_copy_is_pixel_identical_has_restart_markers_and_is_cached(cache, tmp_path):
    """Only the selected files are packed, at their relative paths under the cache; Pillow
    (an independent decoder) gives the original's pixels; the copies carry a restart
    interval the ROI fast path uses; a second call transcodes nothing."""
    from fastprep.io import jpeg_info

    data = builtin_dataset(12, SMALL, processes=1, progress=False)
    chosen = data.files[:5] + data.files[7:9]
    out = packed_copy(chosen, progress=False, workers=1)
    assert len(out) == len(chosen)
    root = Path(os.path.commonpath(chosen))
    for src, dst in zip(chosen, out):
        assert Path(dst).is_relative_to(cache) and dst.endswith(os.path.relpath(src, root))
        assert np.array_equal(_pil_rgb(dst), _pil_rgb(src))
        info = jpeg_info(Path(dst).read_bytes())
        assert info.restart_interval > 0 and info.restart_roi
        assert jpeg_info(Path(src).read_bytes()).restart_interval == 0
    packed_root = Path(os.path.commonpath(out))
    packed_all = sorted(str(p.relative_to(packed_root)) for p in packed_root.rglob("*.jpg"))
    assert packed_all == sorted(os.path.relpath(d, packed_root) for d in out)  # files 5, 6, 9.. left alone
    stamps = [os.stat(d).st_mtime_ns for d in out]
    inodes = [os.stat(d).st_ino for d in out]
    assert packed_copy(chosen, progress=False, workers=1) == out
    assert [os.stat(d).st_mtime_ns for d in out] == stamps and [os.stat(d).st_ino for d in out] == inodes
    with pytest.raises(ValueError, match="at least one file"):
        packed_copy([])


def test_fastprep_packed_gives_exactly_the_fastprep_batches(cache):
    """Packing is lossless and the ROI fast path exact: with the same seed, fastprep-packed
    yields the very same tensors as fastprep on the original files."""
    data = builtin_dataset(8, SMALL, processes=1, progress=False)
    cfg = PipelineConfig(crop_size=64, batch_size=4, num_workers=0)
    batches = {}
    for name in ("fastprep", "fastprep-packed"):
        pipe = PIPELINES[name]
        files = pipe.prepare_files(data.files, progress=False)
        assert (files == data.files) == (name == "fastprep")
        torch.manual_seed(3)
        batches[name] = [(x.clone(), y.clone()) for x, y in pipe.loader(files, data.targets, 8, cfg)]
    assert len(batches["fastprep"]) == 2
    for (a, ta), (b, tb) in zip(batches["fastprep"], batches["fastprep-packed"]):
        assert torch.equal(a, b) and torch.equal(ta, tb)


def test_cli_reports_a_pipeline_whose_files_cannot_be_prepared(cache, tmp_path, monkeypatch, capsys):
    """A failing prepare_files is one error line for that pipeline; the others still run."""

    def broken(files, *, progress=True):
        raise BenchDataError("packing into /nowhere failed")

    monkeypatch.setattr(PIPELINES["fastprep-packed"], "prepare_files", broken)
    out = tmp_path / "r.json"
    rc = cli.main(["--num-images", "2", "--batch-size", "2", "--crop-size", "64", "--steps", "1", "--warmup", "0",
                   "--workers", "0", "--pipelines", "fastprep,fastprep-packed", "--step-ms", "1", "--no-progress",
                   "--json", str(out)])
    assert rc != 0
    results = {r["pipeline"]: r for r in json.loads(out.read_text())["results"]}
    assert results["fastprep"]["error"] is None and results["fastprep"]["samples_per_s"] > 0
    assert "packing into /nowhere failed" in results["fastprep-packed"]["error"]
    assert "fastprep-packed with 0 workers failed" in capsys.readouterr().err


IMAGENET_SIZED = BuiltinSpec(height=375, width=500)


def test_recipe_eval_pipelines_match_torchvision_and_the_decode_transform(cache):
    """imagenet-eval: fastprep's batch is DecodeResizeCenterCrop's uint8 output normalised by
    the plain formula (exactly), and close to torchvision v2 Resize(256)+CenterCrop(224) on
    the full decode (the reference pipeline) -- PSNR >= 30 dB in uint8 units."""
    from torchvision.io import decode_jpeg
    from torchvision.transforms import v2

    from fastprep.bench.recipes import RECIPE_PIPELINES
    from fastprep.transforms import DecodeResizeCenterCrop

    data = builtin_dataset(4, IMAGENET_SIZED, processes=1, progress=False)
    cfg = PipelineConfig(batch_size=4, num_workers=0)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    out = {}
    for name, pipe in RECIPE_PIPELINES["imagenet-eval"].items():
        (images, targets), = list(pipe.loader(data.files, data.targets, 4, cfg))
        assert images.dtype == torch.float32 and images.shape == (4, 3, 224, 224)
        order = targets.argsort()  # shuffled: compare by file (targets 0..3 are distinct)
        out[name] = images[order] * std + mean  # back to [0, 1]
    raws = [torch.from_numpy(np.fromfile(f, dtype=np.uint8)) for f in data.files]
    direct = torch.stack([DecodeResizeCenterCrop(256, 224)(r) for r in raws]).float() / 255
    torch.testing.assert_close(out["fastprep"], direct, atol=1e-5, rtol=0)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # torchvision 0.29's decoder notice
        full = [decode_jpeg(r) for r in raws]
    tv = torch.stack([v2.CenterCrop(224)(v2.Resize(256, antialias=True)(x)) for x in full]).float() / 255
    torch.testing.assert_close(out["reference"], tv, atol=1e-5, rtol=0)
    mse = ((out["fastprep"] - tv) * 255).pow(2).mean().item()
    assert 10 * np.log10(255 ** 2 / mse) >= 30


@pytest.mark.parametrize("recipe", ["imagenet-train", "imagenet-eval", "trivialaugment"])
def test_cli_recipe_runs_its_pipelines(recipe, cache, tmp_path):
    out = tmp_path / "r.json"
    rc = cli.main(["--recipe", recipe, "--num-images", "4", "--batch-size", "2", "--steps", "1", "--warmup", "0",
                   "--workers", "0", "--step-ms", "1", "--no-progress", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["settings"]["recipe"] == recipe and report["settings"]["crop_size"] == 224
    pipelines = {r["pipeline"] for r in report["results"]}
    assert pipelines == {"reference", "fastprep", "fastprep-processes", "fastprep-packed"}
    assert all(r["error"] is None and r["samples_per_s"] > 0 for r in report["results"])
    engines = {r["pipeline"]: (r["engine"], r["engine_fallback"]) for r in report["results"]}
    assert engines == {"reference": (None, None), "fastprep": ("threads", None),
                       "fastprep-processes": ("processes", None), "fastprep-packed": ("threads", None)}
    assert set(report["uncapped"]) == pipelines
    assert "500x375" in report["settings"]["data"] and report["settings"]["builtin_size"] == "imagenet"
    with pytest.raises(SystemExit):
        cli.main(["--recipe", "imagenet-test"])


def test_cli_augment_recipe_without_a_native_form_is_marked(cache, tmp_path, monkeypatch, capsys):
    """An augmentation recipe the threads engine cannot compile runs on processes, as
    make_loader's default would: the row says so and why, in the table and the JSON."""
    from torchvision.transforms import v2

    from fastprep.bench import recipes

    def untraceable():
        return v2.Compose([v2.RandomResizedCrop(224), v2.Lambda(lambda x: x.flip(-1)),
                           v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.5] * 3)])

    monkeypatch.setitem(recipes.AUGMENT_RECIPES, "trivialaugment", untraceable)
    out = tmp_path / "r.json"
    rc = cli.main(["--recipe", "trivialaugment", "--pipelines", "fastprep", "--num-images", "2", "--batch-size", "2",
                   "--steps", "1", "--warmup", "0", "--workers", "0", "--step-ms", "1", "--no-progress",
                   "--json", str(out)])
    assert rc == 0
    row, = json.loads(out.read_text())["results"]
    assert row["engine"] == "processes" and "Lambda has no native implementation" in row["engine_fallback"]
    text = capsys.readouterr().out
    assert "fastprep [processes]        0" in text
    assert "fastprep [processes]: asked for make_loader's threads engine, ran on processes: " in text


def test_cli_multiview_recipe_runs_every_row(cache, tmp_path):
    """--recipe simclr: every row delivers a list of 2 checked [N, 3, 224, 224] views, fastprep's
    rows on the engine they ask for; the simulated step covers both views."""
    out = tmp_path / "r.json"
    rc = cli.main(["--recipe", "simclr", "--num-images", "4", "--batch-size", "2", "--steps", "1", "--warmup", "0",
                   "--workers", "0", "--no-progress", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    engines = {r["pipeline"]: (r["engine"], r["engine_fallback"], r["error"]) for r in report["results"]}
    assert engines == {"reference": (None, None, None), "fastprep": ("threads", None, None),
                       "fastprep-fast": ("threads", None, None), "fastprep-processes": ("processes", None, None),
                       "fastprep-packed": ("threads", None, None)}
    from fastprep.bench.config import BenchConfig

    one, two = (BenchConfig(recipe=r, data=None).make_trainer() for r in ("trivialaugment", "simclr"))
    assert two.step_s == pytest.approx(2 * one.step_s, rel=0.1)


def test_check_views_names_the_view():
    from fastprep.bench.recipes import normalized_bounds
    from fastprep.bench.runner import check_views

    good = [torch.zeros(2, 3, 8, 8), torch.zeros(2, 3, 4, 4)]
    targets, cpu = torch.zeros(2, dtype=torch.int64), torch.device("cpu")
    check_views(good, targets, 2, (8, 4), cpu, normalized_bounds())
    with pytest.raises(ValueError, match="expected a list of 3 views"):
        check_views(good, targets, 2, (8, 4, 4), cpu, normalized_bounds())
    with pytest.raises(ValueError, match=r"view 1: pipeline produced images of shape \(2, 3, 4, 4\)"):
        check_views(good, targets, 2, (8, 8), cpu, normalized_bounds())
    with pytest.raises(ValueError, match="expected a list of 2 views"):
        check_views(good[0], targets, 2, (8, 4), cpu, normalized_bounds())


def test_builtin_size_presets_and_spec():
    """--builtin-size picks the built-in spec and, for 12mp, its own (smaller) presets;
    explicit counts win over the presets."""
    from fastprep.bench.config import BUILTIN_SIZES, LARGE_DEFAULTS, LARGE_QUICK

    def cfg(*argv):
        return cli.config_from_args(cli.build_parser().parse_args(list(argv)), list(argv))

    default = cfg("--recipe", "imagenet-train")
    assert default.builtin_size == "imagenet" and (default.num_images, default.steps, default.warmup) == (512, 30, 5)
    spec = default.builtin_spec()
    assert (spec.width, spec.height) == (500, 375) == BUILTIN_SIZES["imagenet"]
    large = cfg("--recipe", "imagenet-eval", "--builtin-size", "12mp")
    assert (large.num_images, large.steps, large.warmup) == tuple(LARGE_DEFAULTS.values())
    spec = large.builtin_spec()
    assert (spec.width, spec.height) == (4000, 3000) and (spec.quality, spec.subsampling) == (90, "4:2:0")
    assert spec.digest() != default.builtin_spec().digest()  # its own cache folder
    quick = cfg("--recipe", "imagenet-train", "--builtin-size", "12mp", "--quick")
    assert (quick.num_images, quick.steps, quick.warmup) == tuple(LARGE_QUICK.values())
    mine = cfg("--recipe", "imagenet-train", "--builtin-size", "12mp", "--quick", "--num-images", "5", "--steps", "2")
    assert (mine.num_images, mine.steps, mine.warmup) == (5, 2, LARGE_QUICK["warmup"])
    seed = cfg()
    assert seed.builtin_size is None and (seed.builtin_spec().width, seed.builtin_spec().height) == (800, 533)
    assert cfg("--recipe", "imagenet-train", "--data", "somewhere").builtin_size is None


def test_quick_fits_a_folder_of_large_photos(tmp_path):
    """--quick on a folder of large images lowers the preset counts (never the ones given)
    to about QUICK_MEGAPIXELS per configuration, says so, and leaves small images alone."""
    from PIL import Image

    from fastprep.bench.config import QUICK, QUICK_FLOOR, QUICK_MEGAPIXELS
    from fastprep.bench.dataset import mean_megapixels

    for k, (w, h) in enumerate([(4000, 3000), (2000, 1500)]):
        Image.new("RGB", (w, h), (k, 0, 0)).save(tmp_path / f"{k}.jpg", quality=50)
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    mp = mean_megapixels(tmp_path)
    assert mp == pytest.approx((12e6 + 3e6) / 2 / 1e6)  # the unreadable file is left out

    def cfg(*argv):
        argv = ["--data", str(tmp_path), *argv]
        return cli.config_from_args(cli.build_parser().parse_args(argv), argv)

    quick = cfg("--quick")
    note = quick.fit_quick(mp)
    assert note.startswith("--quick: your images average 7.5 MP") and "batch size 64 ->" in note
    floor = QUICK_FLOOR["batch_size"] * (QUICK_FLOOR["steps"] + QUICK_FLOOR["warmup"]) * mp
    assert quick.batch_size * (quick.steps + quick.warmup) * mp <= max(QUICK_MEGAPIXELS, floor)
    assert (quick.warmup, quick.steps) == (QUICK_FLOOR["warmup"], QUICK_FLOOR["steps"])
    assert quick.steps >= 4 and quick.min_window_s > 0  # short, but not two steps
    assert QUICK_FLOOR["num_images"] <= quick.num_images < QUICK["num_images"]
    mine = cfg("--quick", "--batch-size", "32", "--steps", "5")
    mine.fit_quick(mp)
    assert (mine.batch_size, mine.steps) == (32, 5)  # given explicitly: kept
    huge = cfg("--quick")
    huge.fit_quick(1000.0)  # never below the floor
    assert (huge.batch_size, huge.steps, huge.warmup, huge.num_images) == tuple(
        QUICK_FLOOR[k] for k in ("batch_size", "steps", "warmup", "num_images"))
    assert cfg("--quick").fit_quick(0.4) is None  # ImageNet-size photos: the preset as it is
    assert cfg().fit_quick(mp) is None  # without --quick nothing changes
    assert cfg().batch_size == 64


def test_bench_from_the_folder_holding_the_checkout_says_why(tmp_path):
    """``python -m fastprep.bench`` run beside a checkout named ``fastprep`` imports the
    checkout as a namespace package; the command then fails with one line saying so."""
    (tmp_path / "fastprep").symlink_to(FASTPREP_PARENT, target_is_directory=True)
    if not (FASTPREP_PARENT / "bench" / "__main__.py").exists():
        pytest.skip("fastprep is installed, not a checkout: no bench/ folder to shadow it")
    proc = subprocess.run([sys.executable, "-m", "fastprep.bench", "--quick"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "hides the installed package" in lines[0], proc.stderr
    assert proc.stdout == ""


def test_cli_builtin_size_reaches_the_generated_files(cache, tmp_path, monkeypatch):
    """--builtin-size 12mp generates (and caches) photos of BUILTIN_SIZES["12mp"] (shrunk
    here so the test is fast) and every recipe pipeline runs on them."""
    from fastprep.bench import config
    from fastprep.io import jpeg_info

    monkeypatch.setitem(config.BUILTIN_SIZES, "12mp", (160, 120))
    out = tmp_path / "r.json"
    rc = cli.main(["--recipe", "imagenet-train", "--builtin-size", "12mp", "--num-images", "3", "--batch-size", "2",
                   "--steps", "1", "--warmup", "0", "--workers", "0", "--step-ms", "1", "--no-progress",
                   "--json", str(out)])
    assert rc == 0
    settings = json.loads(out.read_text())["settings"]
    assert settings["builtin_size"] == "12mp" and settings["num_images"] == 3
    assert "3 synthetic JPEGs 160x120 q90 4:2:0" in settings["data"]
    files = sorted(Path(settings["data_root"]).rglob("*.jpg"))
    assert len(files) == 3 and Path(settings["data_root"]).is_relative_to(cache)
    for f in files:
        info = jpeg_info(f.read_bytes())
        assert (info.width, info.height, info.subsampling) == (160, 120, "4:2:0")
    assert all(r["error"] is None for r in json.loads(out.read_text())["results"])


@pytest.mark.parametrize("argv,message", [
    (["--builtin-size", "12mp"], "--builtin-size applies to the ImageNet recipes"),
    (["--recipe", "seed", "--builtin-size", "imagenet"], "seed recipe always uses its 800x533"),
    (["diagnose", "--builtin-size", "12mp"], "--builtin-size applies to the ImageNet recipes"),
    (["--recipe", "imagenet-train", "--builtin-size", "12mp", "--data", "DATA"], "does not apply to --data DIR"),
    (["--recipe", "imagenet-eval", "--builtin-size", "4k"], "invalid choice: '4k'"),
])
def test_cli_builtin_size_bad_combinations_exit_2(argv, message, tmp_path, capsys):
    argv = [str(tmp_path) if a == "DATA" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bench_config_rejects_builtin_size_where_it_does_not_apply():
    from fastprep.bench.config import BenchConfig

    for bad in ({"builtin_size": "12mp"}, {"recipe": "imagenet-train", "builtin_size": "12mp", "data": "x"},
                {"recipe": "imagenet-train", "builtin_size": "8k"}):
        with pytest.raises(ValueError, match="builtin-size"):
            BenchConfig(**bad)
    cfg = BenchConfig(recipe="imagenet-eval", builtin_size="12mp", quick=True)
    assert (cfg.num_images, cfg.steps, cfg.warmup) == (12, 3, 1)


@pytest.mark.parametrize("recipe", ["imagenet-train", "imagenet-eval", "trivialaugment", "dino"])
def test_recipe_fastprep_packed_gives_exactly_the_fastprep_batches(recipe, cache):
    """As for the seed recipe: packing is lossless and the window decode exact, so with the
    same seed the recipe's fastprep-packed yields the very same tensors as its fastprep
    (for dino: the same 10 views)."""
    from fastprep.bench.recipes import RECIPE_PIPELINES, view_sizes
    from fastprep.io import jpeg_info

    data = builtin_dataset(8, IMAGENET_SIZED, processes=1, progress=False)
    cfg = PipelineConfig(batch_size=4, num_workers=0)
    batches = {}
    for name in ("fastprep", "fastprep-packed"):
        pipe = RECIPE_PIPELINES[recipe][name]
        files = pipe.prepare_files(data.files, progress=False)
        assert (files == data.files) == (name == "fastprep")
        if name == "fastprep-packed":
            assert all(jpeg_info(Path(f).read_bytes()).restart_interval > 0 for f in files)
        torch.manual_seed(3)
        batches[name] = [([v.clone() for v in x] if isinstance(x, list) else [x.clone()], y.clone())
                         for x, y in pipe.loader(files, data.targets, 8, cfg)]
    assert len(batches["fastprep"]) == 2
    sizes = view_sizes(recipe) or (224,)
    for (a, ta), (b, tb) in zip(batches["fastprep"], batches["fastprep-packed"]):
        assert [v.shape for v in a] == [(4, 3, s, s) for s in sizes]
        assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True)) and torch.equal(ta, tb)


def test_recipe_pipelines_have_no_ray_engine():
    """The seed pipelines' Ray loader runs crop + mask + YUV: --engine ray must skip the
    recipe pipelines rather than measure that under their names."""
    from fastprep.bench.recipes import RECIPE_PIPELINES

    for pipes in RECIPE_PIPELINES.values():
        for pipe in pipes.values():
            assert "no Ray Data engine" in cli._ray_reason(pipe)


def test_cli_engine_ray_runs_the_fastprep_pipelines_and_skips_the_others(cache, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "r.json"
    proc = _bench(["--engine", "ray", "--pipelines", "reference,fastprep-packed", "--num-images", "4",
                   "--batch-size", "2", "--steps", "2", "--warmup", "1", "--workers", "1", "--step-ms", "1",
                   "--no-progress", "--json", str(out)], tmp_path, cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["settings"]["engine"] == "ray"
    results = {r["pipeline"]: r for r in report["results"]}
    assert "no Ray Data engine" in results["reference"]["skipped"]
    packed = results["fastprep-packed"]
    assert packed["error"] is None and packed["samples_per_s"] > 0 and packed["worker_cpu_cores"] is None


def test_diagnosis_advice_for_a_pipeline_that_still_starves():
    from fastprep.bench.report import diagnosis

    def row(name, sps, starved):
        return {"pipeline": name, "workers": 2, "samples_per_s": sps, "starvation_fraction": starved}

    text = diagnosis([row("reference", 35, 0.98), row("fastprep", 119, 0.93)], 1730)
    assert "fastprep is 3.4x faster but still starves 93%" in text
    assert "more CPU cores" in text and "python -m fastprep.pack" in text
    text = diagnosis([row("reference", 35, 0.98), row("fastprep", 119, 0.93), row("fastprep-packed", 183, 0.89)],
                     1730)
    assert "fastprep-packed is 5.2x faster but still starves 89% (more CPU cores for the workers would help)" in text
    text = diagnosis([row("reference", 983, 0.43), row("fastprep-packed", 1686, 0.025)], 1730)
    assert "fastprep-packed removes the bottleneck (2% starved, 1.7x reference)" in text


# ---------------------------------------------------------------- uncapped rates and headline


def test_engine_stage_shares_are_of_the_builder_threads_own_time():
    """The engine adds a batch's building time when the batch is done, so a short window
    counts the whole batch begun before it: 1.09 s of building in a 1 s window (the
    "builder building 109%" of a --quick run). The builder is one thread: its shares are
    taken over its own cycles, so they are at most 100 % and sum to it."""
    import re

    from fastprep.bench.runner import engine_stage

    zero = dict.fromkeys(("consumer_wait", "building", "builder_wait_readers", "builder_wait_consumer"), 0.0)

    def shares(**after):
        stage, text = engine_stage(zero, {**zero, **after}, 1.0)
        return stage, {k: int(v) for k, v in re.findall(r"(building|readers|consumer) (\d+)%", text)}

    stage, got = shares(consumer_wait=0.7, building=1.09)
    assert stage == "decode" and got == {"consumer": 0, "building": 100, "readers": 0}, got
    stage, got = shares(consumer_wait=0.5, building=0.66, builder_wait_readers=0.44)  # 1.1 s of cycles
    assert stage == "read" and (got["building"], got["readers"]) == (60, 40), got
    stage, got = shares(consumer_wait=0.01, building=0.3, builder_wait_consumer=0.7)  # exactly the window: as is
    assert stage == "hand-over" and (got["building"], got["consumer"]) == (30, 70), got


def _row(name, workers, sps, starved, **extra):
    return {"pipeline": name, "workers": workers, "samples_per_s": sps, "starvation_fraction": starved, **extra}


def test_uncapped_worker_count_and_cores():
    from fastprep.bench.uncapped import is_capped, uncapped_entry, uncapped_workers

    # capped rows tie at the accelerator's rate: the one with the most workers
    assert uncapped_workers([_row("p", 0, 700, 0.4), _row("p", 1, 1290, 0.02), _row("p", 2, 1288, 0.01)]) == 2
    assert uncapped_workers([_row("p", 0, 70, 0.9), _row("p", 1, 90, 0.8), _row("p", 2, 80, 0.85)]) == 1
    assert uncapped_workers([{"pipeline": "p", "workers": 0, "samples_per_s": None}]) is None
    assert is_capped(_row("p", 2, 1288, 0.01)) and not is_capped(_row("p", 2, 900, 0.3))
    run = {"workers": 2, "steps": 30, "samples_per_s": 1000.0, "window_s": 1.92, "worker_cpu_cores": 1.5,
           "main_cpu_cores": 0.5, "engine_stage": None, "error": None}
    entry = uncapped_entry(run, _row("p", 2, 900.0, 0.01), 2470.0)
    # 2 cores at 1000 samples/s: 2 ms of CPU per sample; 2470/s needs 4.94 cores
    assert entry["cpu_ms_per_sample"] == pytest.approx(2.0) and entry["cores_used"] == pytest.approx(2.0)
    assert entry["cores_for_target"] == pytest.approx(4.94) and entry["samples_per_cpu_s"] == pytest.approx(500)
    assert entry["fed_samples_per_s"] == 900.0 and entry["fed_capped_by_accelerator"] is True
    threads = uncapped_entry({**run, "worker_cpu_cores": None, "main_cpu_cores": 1.0}, _row("p", 2, 900, 0.5), 1000)
    assert threads["cores_for_target"] == pytest.approx(1.0)  # everything in this process
    ray = uncapped_entry(run, _row("p", 2, 900.0, 0.5), 2470.0, cpu_measured=False)
    assert ray["cores_for_target"] is None and ray["cpu_ms_per_sample"] is None


def test_headline_shows_the_uncapped_ratio_and_says_when_a_row_was_capped():
    from fastprep.bench.report import diagnosis
    from fastprep.bench.uncapped import best_vs_reference, packed_gap_line

    best = {"reference": _row("reference", 2, 358.0, 0.73), "fastprep": _row("fastprep", 2, 1290.0, 0.01),
            "fastprep-packed": _row("fastprep-packed", 1, 1200.0, 0.08)}
    alone = {"reference": {"workers": 2, "samples_per_s": 360.0}, "fastprep": {"workers": 2, "samples_per_s": 2160.0},
             "fastprep-packed": {"workers": 1, "samples_per_s": 1500.0}}
    lines, doc = best_vs_reference(best, alone, "accelerator")
    fast = next(line for line in lines if "fastprep " in line)
    assert "fed 3.60x (2 workers, capped by the accelerator: a floor)" in fast
    assert "uncapped 6.00x (2 workers, 2160 vs 360 samples/s)" in fast
    packed = next(line for line in lines if "fastprep-packed" in line)
    assert "capped by" not in packed and "uncapped 4.17x" in packed
    assert doc["fastprep"] == {"fed": pytest.approx(1290 / 358), "fed_workers": 2, "fed_capped_by_accelerator": True,
                               "uncapped": pytest.approx(6.0), "uncapped_workers": 2}
    text = diagnosis(list(best.values()), 1306, alone)
    assert "fastprep removes the bottleneck (1% starved, 3.6x reference, a floor set by the accelerator's rate: " \
           "alone it delivers 2160 samples/s, 6.0x reference alone)" in text
    assert packed_gap_line(best, alone) is None  # packed slower here: nothing to explain
    alone["fastprep-packed"]["samples_per_s"] = 3 * 2160.0
    gap = packed_gap_line(best, alone)
    assert gap.startswith("Packed vs unpacked: fastprep-packed is 3.0x fastprep here (uncapped, 6480 vs 2160")
    assert "restart intervals" in gap


def _help(parser) -> dict[str, str]:
    """``{option: its help as printed}``."""
    formatter = parser._get_formatter()
    return {a.option_strings[0]: " ".join(formatter._expand_help(a).split())
            for a in parser._actions if a.option_strings and a.help}


def test_help_states_one_default_and_what_workers_are():
    for parser in (cli.build_parser(), cli.build_diagnose_parser()):
        texts = _help(parser)
        for option, text in texts.items():  # argparse's "(default: X)" only where the text states none
            assert "(default: " not in text or text.count("default") == 1, (option, text)
            assert "(default: None)" not in text, (option, text)
        assert "native decode threads" in texts["--workers"] and "DataLoader worker" in texts["--workers"]
    engine = _help(cli.build_parser())["--engine"]
    assert "threads engine" in engine and "native decode threads" in engine
    assert "(default: 4)" in _help(cli.build_parser())["--profile-steps"]  # defaults not in the text still shown


def test_ddp_example_help_says_what_workers_are(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("ddp_train", FASTPREP_PARENT / "examples" / "ddp_train.py")
    if spec is None or not (FASTPREP_PARENT / "examples" / "ddp_train.py").exists():
        pytest.skip("fastprep is installed, not a checkout: no examples/")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "DataLoader workers" not in text and "native decode threads" in text


# ------------------------------------------------------------------- folder recipes (scripts unchanged)


@pytest.mark.parametrize("recipe", ["examples-train", "dino-pil", "timm-rand-m9"])
def test_cli_folder_recipe_runs_torch_and_fastprep_dataloaders(recipe, cache, tmp_path, capsys):
    """--recipe examples-train / dino-pil / timm-rand-m9: torch's DataLoader and
    fastprep.data.DataLoader on the same ImageFolder, fastprep's row on the threads engine and
    checked bit for bit against `with sample_rng(S, 0, i): dataset[i]` before it is timed;
    dino-pil's batches are its 10 checked views."""
    if recipe.startswith("timm"):
        pytest.importorskip("timm")
    out = tmp_path / "r.json"
    rc = cli.main(["--recipe", recipe, "--num-images", "4", "--batch-size", "2", "--steps", "1", "--warmup", "0",
                   "--workers", "0", "--step-ms", "1", "--no-progress", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    rows = {r["pipeline"]: r for r in report["results"]}
    assert set(rows) == {"reference", "fastprep"}
    assert all(r["error"] is None and r["samples_per_s"] > 0 for r in rows.values())
    assert (rows["reference"]["engine"], rows["reference"]["exactness"]) == (None, None)
    assert (rows["fastprep"]["engine"], rows["fastprep"]["engine_fallback"]) == ("threads", None)
    assert rows["fastprep"]["exactness"].startswith("4 samples equal `with sample_rng(0, 0, i): dataset[i]` bit for "
                                                    "bit, targets included (engine threads")
    assert f"fastprep ({recipe}): 4 samples equal" in capsys.readouterr().out


def test_cli_folder_recipe_needing_a_missing_package_is_skipped(cache, tmp_path, monkeypatch, capsys):
    import dataclasses

    from fastprep.bench import unchanged

    recipe = unchanged.FOLDER_RECIPES["timm-rand-m9"]
    monkeypatch.setitem(unchanged.FOLDER_RECIPES, "timm-rand-m9",
                        dataclasses.replace(recipe, needs="no_such_package_for_fastprep"))
    out = tmp_path / "r.json"
    cli.main(["--recipe", "timm-rand-m9", "--num-images", "2", "--batch-size", "2", "--steps", "1", "--warmup", "0",
              "--workers", "0", "--step-ms", "1", "--no-progress", "--json", str(out)])
    rows = json.loads(out.read_text())["results"]
    assert {r["pipeline"] for r in rows} == {"reference", "fastprep"}
    assert all(r["skipped"] == "no_such_package_for_fastprep not installed (pip install no_such_package_for_fastprep)"
               and r["samples_per_s"] is None for r in rows)
    assert "Skipping fastprep: no_such_package_for_fastprep not installed" in capsys.readouterr().out


def test_check_exact_compares_with_sample_rng_and_names_a_difference():
    from torch.utils.data import Dataset

    from fastprep.bench.unchanged import check_exact

    class Drawn(Dataset):  # draws from torch's, Python's and NumPy's RNGs: equal under sample_rng
        def __len__(self):
            return 6

        def __getitem__(self, i):
            import random

            return torch.rand(2, 3) + random.random() + float(np.random.rand()), i % 2

    class Counter(Dataset):  # each call returns a new value: never equal to a second call
        calls = 0

        def __len__(self):
            return 6

        def __getitem__(self, i):
            self.calls += 1
            return torch.full((2,), float(self.calls)), 0

    assert check_exact(Drawn(), workers=0, seed=3).startswith("4 samples equal `with sample_rng(3, 0, i): "
                                                               "dataset[i]` bit for bit, targets included (engine ")
    with pytest.raises(RuntimeError, match=r"sample 0 differs from `with sample_rng\(0, 0, 0\): dataset\[0\]`"):
        check_exact(Counter(), workers=0)


def test_imagefolder_copy_keeps_the_classes_and_is_cached(cache, tmp_path):
    from torchvision.datasets import ImageFolder

    from fastprep.bench.unchanged import imagefolder_copy

    files = []
    for k, cls in enumerate(["cat", "dog", "cat"]):
        (tmp_path / "src" / cls).mkdir(parents=True, exist_ok=True)
        path = tmp_path / "src" / cls / f"{k}.jpg"
        path.write_bytes(b"x" * (k + 1))
        files.append(str(path))
    links = imagefolder_copy(files)
    assert [os.path.realpath(p) for p in links] == [os.path.realpath(f) for f in files]
    assert [Path(p).parent.name for p in links] == ["cat", "dog", "cat"]
    folder = ImageFolder(os.path.dirname(os.path.dirname(links[0])), loader=lambda p: Path(p).read_bytes())
    assert folder.classes == ["cat", "dog"] and sorted(folder.targets) == [0, 0, 1]
    assert sorted(len(folder[i][0]) for i in range(3)) == [1, 2, 3]
    stamps = [os.lstat(p).st_mtime_ns for p in links]
    assert imagefolder_copy(files) == links and [os.lstat(p).st_mtime_ns for p in links] == stamps
    assert Path(links[0]).is_relative_to(cache)
    with pytest.raises(ValueError, match="at least one file"):
        imagefolder_copy([])


def test_recipe_bounds_leave_timm_noise_unbounded():
    from fastprep.bench.recipes import normalized_bounds, recipe_bounds, view_sizes

    assert recipe_bounds("examples-train") == recipe_bounds("dino-pil") == normalized_bounds()
    assert recipe_bounds("timm-rand-m9") == ((-float("inf"), float("inf")),) * 3
    assert view_sizes("dino-pil") == (224, 224) + (96,) * 8 and view_sizes("examples-train") is None
