"""The checkout's benchmark scripts still run against the current API (tiny inputs, no
timing asserted): a script that breaks when the package changes is caught here."""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")

pytestmark = pytest.mark.skipif(not os.path.isdir(BENCH), reason="no bench/ folder (not a checkout)")


@pytest.fixture
def bench_path(monkeypatch):
    monkeypatch.syspath_prepend(BENCH)
    yield
    for name in [m for m in sys.modules if m.startswith("bench_")]:
        sys.modules.pop(name)


def test_bench_loader_quick(bench_path, capsys):
    import bench_loader

    report = bench_loader.main(["--quick", "--workers", "1", "--batch-size", "8"])
    names = set(report["results"])
    assert names == {"fastprep", "fastprep-packed", "fastprep-processes", "reference-optimized", "reference-plain"}
    for name, r in report["results"].items():
        assert r["epochs"][0]["samples"] == 16, name
        assert r["samples_per_s"] > 0
    assert report["results"]["fastprep"]["bytes_per_sample"] is None  # threads: nothing crosses processes
    # uint8 256x256 image + its int64 target, per sample, from the worker processes
    assert report["results"]["fastprep-processes"]["bytes_per_sample"] == 3 * 256 * 256 + 8
    assert "- (in-process)" in capsys.readouterr().out


def test_bench_window_bytes_counts(bench_path):
    """The window-bytes counter's parse and interval arithmetic, on a packed 4:2:0 image:
    one interval per restart, and a window covering the image needs every byte of the scan."""
    import bench_window_bytes as W

    import fastprep.io as fio
    from fastprep.bench.synthetic import encode_jpeg, photo_like

    src = encode_jpeg(photo_like(360, 360, seed=1), quality=90, subsampling="4:2:0")
    for interval in (1, 3, 23, 46):  # 23 MCUs per row: within a row, one row, two rows
        layout = W.parse_packed(fio.transcode_jpeg(src, restart_interval=interval))
        assert layout["mcu"] == (16, 16) and layout["mcus_per_row"] == layout["mcu_rows"] == 23
        assert len(layout["starts"]) == -(-23 * 23 // interval)
        whole, ranges, span = W.window_cost(layout, 0, 0, 360)
        assert whole == span == layout["end"] - layout["starts"][0] and ranges == 1
    layout = W.parse_packed(fio.transcode_jpeg(src, restart_interval=1))
    # a 16x16 window on MCU boundaries plus one pixel of context: 3x3 MCUs, 3 rows of 3
    nbytes, ranges, _ = W.window_cost(layout, 32, 48, 16)
    bounds = layout["starts"] + [layout["end"]]
    want = sum(bounds[k + 1] - bounds[k] for row in (1, 2, 3) for k in range(row * 23 + 2, row * 23 + 5))
    assert (nbytes, ranges) == (want, 3)


def test_bench_augment_quick(bench_path, capsys):
    """Every pixel kernel has a case, every case and transform runs and is bit-equal with
    torchvision (the script checks before timing), on two sizes."""
    import bench_augment

    import torch

    report = bench_augment.main(["--sizes", "48,31", "--runs", "1", "--rounds", "1", "--warmup", "0", "--chain", "2",
                                 "--samples", "2", "--runs-per-key", "1"])
    names = set(torch.ops.fastprep.pixel_kernel_names().split())
    for size in ("48", "31"):
        entry = report["sizes"][size]
        assert {r["kernel"] for r in entry["kernels"].values()} == names
        assert set(entry["transforms"]) == set(bench_augment.transforms())
        for r in entry["kernels"].values():
            assert r["per_step_us"] >= 0 and r["torchvision_us"] > 0
    out = capsys.readouterr().out
    assert "CPU:" in out and "load average" in out and "per sample (3x31x31)" in out


@pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision:DeprecationWarning")
def test_bench_recipe_loaders_augment(bench_path, tmp_path):
    """--augment adds the TrivialAugment rows: the torchvision DataLoader and make_loader on the
    threads engine, each float32 224x224, the latter also against the plain recipe."""
    import bench_recipe_loaders as R

    results = R.main(["--files", "8", "--epochs", "1", "--warmup", "0", "--batch-size", "4", "--workers", "1",
                      "--no-dali", "--engines", "threads", "--rss-epochs", "0", "--augment",
                      "--json", str(tmp_path / "r.json")])
    aug, plain = results[R.FP_AUG], results[R.FP_PLAIN]
    assert aug["batch"] == results[R.TV_AUG]["batch"] == {"shape": [4, 3, 224, 224], "dtype": "float32"}
    assert aug["reference"] == R.TV_AUG and results[R.TV_AUG]["samples_per_s"] > 0
    assert aug["vs_plain_recipe"] == pytest.approx(aug["samples_per_s"] / plain["samples_per_s"])


def test_bench_dataloader_quick(bench_path):
    import bench_dataloader

    report = bench_dataloader.main(["--quick", "--workers", "1", "--batch-size", "8"])
    results = report["results"]
    assert results["v2 tensor train"]["engine"] == "threads"
    # PIL pipelines run natively with Pillow's arithmetic (unless the installed Pillow fails the probe)
    assert results["pytorch/examples train (v1 PIL)"]["engine"] == "threads"
    assert results["pytorch/examples val (v1 PIL)"]["engine"] == "threads"
    assert all(r["samples"] == 16 and r["ratio"] > 0 and r["cpu_ratio"] > 0 for r in results.values())


def test_bench_multicrop_quick(bench_path, capsys):
    import bench_multicrop

    report = bench_multicrop.main(["--quick", "--workers", "1"])
    assert report["engine"] == "threads" and report["ratio"] > 0
    assert "CPU:" in capsys.readouterr().out


def test_bench_gil_quick(bench_path, capsys):
    """The GIL report runs a pipeline in a child process (py-spy left out: samples/s only)."""
    import bench_gil

    report = bench_gil.main(["--quick", "--no-gil"])
    (row,) = report["rows"]
    assert row["pipeline"] == "examples-train" and row["engine"] == "threads" and row["samples_per_s"] > 0
    assert row["gil_held"] is None and "examples-train" in capsys.readouterr().out


def test_bench_gil_median_row(bench_path):
    """--repeat's row: medians of each figure over the runs that gave one, the held range."""
    import bench_gil

    runs = [{"pipeline": "dino", "engine": "threads", "samples_per_s": rate, "gil_held": held,
             "gil_us_per_sample": None if held is None else held * 1e6 / rate,
             "ceiling_per_s": None if held is None else rate / held}
            for rate, held in ((100.0, 0.10), (300.0, 0.30), (200.0, None), (250.0, 0.12))]
    row = bench_gil._median_row(runs)
    assert row["samples_per_s"] == 225.0  # (200 + 250) / 2 over four rates
    assert row["gil_held"] == 0.12 and row["gil_held_range"] == (0.10, 0.30)
    assert row["gil_us_per_sample"] == 1000.0  # of 1000, 1000 and 480 us
    assert row["runs"] == 4 and row["pipeline"] == "dino"
    with pytest.raises(SystemExit):
        bench_gil.main(["--quick", "--no-gil", "--repeat", "0"])


def test_bench_hf_quick(bench_path, capsys):
    pytest.importorskip("datasets")
    import bench_hf

    report = bench_hf.main(["--quick", "--runs", "1"])
    assert report["engine"] == "threads" and report["fastprep_per_s"] > 0 and report["torch_per_s"] > 0
    assert "with_transform" in capsys.readouterr().out
