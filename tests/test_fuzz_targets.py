"""The fuzz targets in fuzz/: the seed corpus they start from, every target over every seed
(so a finding that a seed reaches fails the test suite, not only the fuzz smoke run), and
the oracles themselves: a wrong decoder must be reported, not pass.

Needs atheris (the ``fuzz`` extra); skipped without it unless ``FASTPREP_REQUIRE_FUZZ=1``
(set by CI's fuzz step, which installs atheris after the main test run).
"""

import glob
import importlib
import os
import random
import subprocess
import sys

import pytest
import torch

import fastprep.io as fio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fio.__file__)))
FUZZ_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz")
TARGETS = ["fuzz_jpeg_info", "fuzz_decode_jpeg", "fuzz_decode_roi", "fuzz_transforms", "fuzz_transcode",
           "fuzz_plan_batch", "fuzz_restart_roi", "fuzz_pack_recipes", "fuzz_index_damage", "fuzz_native_pipelines",
           "fuzz_pil_pipelines"]

try:
    import atheris  # noqa: F401
except ImportError:
    if os.environ.get("FASTPREP_REQUIRE_FUZZ") == "1":
        raise
    pytest.skip("atheris not installed (pip install atheris)", allow_module_level=True)

sys.path.insert(0, FUZZ_DIR)
import _blind  # noqa: E402
import _harness  # noqa: E402
import _jpegs  # noqa: E402
import make_corpus  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("seeds"))
    make_corpus.write_corpus(out, require_cjpeg=bool(os.environ.get("CI")))
    return sorted(glob.glob(os.path.join(out, "*")))


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_corpus_covers_the_encodings(corpus):
    infos = [fio.jpeg_info(_read(p)[_harness.PARAM_BYTES:]) for p in corpus]
    assert {i.subsampling for i in infos} >= {"4:4:4", "4:2:2", "4:2:0", None}
    assert {i.color_space for i in infos} >= {"YCbCr", "GRAY", "CMYK"}
    assert any(i.progressive for i in infos)
    assert {(i.height, i.width) for i in infos} >= set(make_corpus.SIZES)
    names = {os.path.basename(p).rsplit("-", 1)[0] for p in corpus}
    assert any("restart" in n for n in names)
    if any(i.arithmetic for i in infos) or os.environ.get("CI"):  # cjpeg-made seeds
        assert {i.subsampling for i in infos} >= {"4:4:0", "4:1:1"}
        assert any(i.arithmetic and i.progressive for i in infos)
        assert any("incomplete-progressive" in n for n in names)
        # restart markers every 1..8 MCUs in every sampling, and packed files
        restart = {}
        for i in infos:
            restart.setdefault(i.sampling_factors, set()).add(i.restart_interval)
        for sampling in ("1x1", "2x1", "2x2", "1x2", "4x1", "4x2", "1x4"):
            factors = ((int(sampling[0]), int(sampling[2])), (1, 1), (1, 1))
            assert restart[factors] >= set(range(1, 9)), (sampling, restart[factors])
        assert restart[((1, 1),)] >= set(range(1, 9))
        auto_packed = [i for p, i in zip(corpus, infos)
                       if "packed" in os.path.basename(p) and "interval" not in os.path.basename(p)]
        assert len(auto_packed) >= 18 and all(i.restart_roi for i in auto_packed)


@pytest.mark.parametrize("target", TARGETS)
def test_target_passes_every_seed(target, corpus):
    """A seed that makes a target raise is a finding the fuzzer would report at once."""
    test_one_input = importlib.import_module(target).test_one_input
    failures = []
    for path in corpus:
        data = _read(path)
        # A few parameter variations per seed: every mode, strict on and off, other windows.
        for variant in range(4):
            params = bytes((b + 61 * variant) & 255 for b in data[:_harness.PARAM_BYTES])
            try:
                test_one_input(params + data[_harness.PARAM_BYTES:])
            except Exception as e:  # noqa: BLE001 - every exception type is a finding here
                failures.append(f"{os.path.basename(path)} variant {variant}: {type(e).__name__}: {e}")
    assert not failures, f"{len(failures)} findings, first ones:\n" + "\n".join(failures[:8])


class TestOracles:
    """The checks inside the targets must fire on a decoder that is wrong."""

    @staticmethod
    def _photo() -> bytes:
        return make_corpus.PIL_ENCODINGS["420"](make_corpus.synthetic_rgb(48, 64, seed=0))

    def test_roi_oracle_reports_an_off_by_one_level(self):
        roi = _harness_roi()

        def wrong_roi(*args, **kwargs):
            out = fio.decode_jpeg_roi(*args, **kwargs).clone()
            out[0, -1, -1] ^= 1
            return out

        with pytest.raises(_harness.Finding, match="differs from the full decode sliced: 1 values, max 1"):
            roi.check(self._photo(), fio.ImageReadMode.RGB, (3, 5, 20, 30), decode_roi=wrong_roi)
        roi.check(self._photo(), fio.ImageReadMode.RGB, (3, 5, 20, 30))  # the real decoder agrees

    def test_roi_oracle_reports_a_roi_failure_that_the_full_decode_does_not_have(self):
        roi = _harness_roi()

        def failing_roi(*args, **kwargs):
            raise fio.DecodeError("injected")

        with pytest.raises(_harness.Finding, match="strict ROI"):
            roi.check(self._photo(), fio.ImageReadMode.GRAY, (0, 0, 4, 4), decode_roi=failing_roi)

    def test_unexpected_exceptions_propagate(self):
        roi = _harness_roi()

        def broken_roi(*args, **kwargs):
            raise IndexError("injected")

        with pytest.raises(IndexError, match="injected"):
            roi.check(self._photo(), fio.ImageReadMode.RGB, (0, 0, 4, 4), decode_roi=broken_roi)

    def test_unexpected_warnings_are_findings(self):
        import warnings

        def warns():
            warnings.warn("something else", RuntimeWarning, stacklevel=1)
            return torch.zeros(1)

        with pytest.raises(_harness.Finding, match="RuntimeWarning"):
            _harness.quiet(warns)


    def test_scaled_roi_oracle_reports_a_wrong_scaled_window(self):
        target = importlib.import_module("fuzz_restart_roi")

        def wrong(*args, **kwargs):
            out = fio.decode_jpeg_roi(*args, **kwargs).clone()
            out[0, 0, 0] ^= 4
            return out

        for params in (bytes(16), bytes(range(16)), bytes(range(100, 116))):
            target.test_one_input(params + self._photo())  # the real decoder agrees
            differs = r"scale \d differs from the full decode sliced: 1 values, max 4"
            with pytest.raises(_harness.Finding, match=differs):
                target.test_one_input(params + self._photo(), decode_roi=wrong)

    def test_index_damage_oracle_reports_pixels_a_damaged_marker_moved(self):
        """A renumbered marker before the window makes libjpeg resynchronize and put other
        pixels in it: a ROI decoder that keeps the clean pixels (the index's intervals,
        the damage not looked at) must be reported."""
        target = importlib.import_module("fuzz_index_damage")
        packed = fio.transcode_jpeg(self._photo(), restart_interval=1)  # 4 16-px intervals per MCU row
        _, _, restarts = target.scan_range(packed)
        first = min(restarts)
        bad = bytearray(packed)
        bad[first + 1] = 0xD2  # RST0 -> RST2: the next intervals are decoded elsewhere
        bad = bytes(bad)
        window = (2, 34, 8, 8)  # interval 2

        def clean_roi(data, *args, **kwargs):
            return fio.decode_jpeg_roi(packed, *args, **kwargs)

        with pytest.raises(_harness.Finding, match=r"ROI \(2, 34, 8, 8\) mode .* differs from the full decode"):
            target.check(bad, None, fio.ImageReadMode.RGB, [window], 8, decode_roi=clean_roi)
        target.check(bad, None, fio.ImageReadMode.RGB, [window], 8)  # the real decoder agrees

    def test_transcode_oracle_reports_changed_pixels(self):
        target = importlib.import_module("fuzz_transcode")

        def lossy(data, **kwargs):
            return _jpegs.pil_jpeg(fio.decode_jpeg(data).permute(1, 2, 0).numpy(), quality=90)

        with pytest.raises(_harness.Finding, match="transcoded file decodes differently"):
            target.check(self._photo(), fio.ImageReadMode.RGB, 0, True, True, bytes(8), transcode=lossy)
        target.check(self._photo(), fio.ImageReadMode.RGB, "auto", True, True, bytes(8))

    def test_transcode_oracle_reports_a_wrong_interval(self):
        target = importlib.import_module("fuzz_transcode")

        def other_interval(data, **kwargs):
            return fio.transcode_jpeg(data, **dict(kwargs, restart_interval=2))

        with pytest.raises(_harness.Finding, match="restart interval 2 written, 3 asked for"):
            target.check(self._photo(), fio.ImageReadMode.RGB, 3, True, True, bytes(8), transcode=other_interval)

    def test_recipe_oracle_reports_a_packed_file_that_differs(self):
        target = importlib.import_module("fuzz_pack_recipes")

        def brighter(data, **kwargs):
            rgb = fio.decode_jpeg(data).permute(1, 2, 0).numpy()
            return fio.transcode_jpeg(_jpegs.pil_jpeg(rgb // 2 + 100, quality=95), **kwargs)

        with pytest.raises(_harness.Finding, match="differs between the original and the packed file"):
            target.check(self._photo(), fio.ImageReadMode.RGB, "auto", 5, transcode=brighter)
        target.check(self._photo(), fio.ImageReadMode.RGB, "auto", 5)


def _harness_roi():
    return importlib.import_module("fuzz_decode_roi")


class TestNativePipelinesOracle:
    """fuzz_native_pipelines reports a native path that drifts from torchvision's."""

    def _input(self, corpus):
        for path in corpus:
            data = _read(path)
            info = fio.jpeg_info(data[_harness.PARAM_BYTES:])
            if info.color_space == "YCbCr" and not info.progressive and info.height * info.width <= 1 << 16:
                return data
        pytest.skip("no small baseline YCbCr seed")

    def test_a_pixel_off_by_one_is_reported(self, corpus, monkeypatch):
        target = importlib.import_module("fuzz_native_pipelines")
        data = self._input(corpus)
        target.test_one_input(data)  # clean
        run = target.NativePipeline.run

        def off_by_one(self, datas, plans, out, **kw):
            results = run(self, datas, plans, out, **kw)
            out.view(-1)[0] += 1
            return results

        monkeypatch.setattr(target.NativePipeline, "run", off_by_one)
        with pytest.raises(_harness.Finding, match="native pixels differ"):
            for k in range(32):  # some seeds build pipelines the compiler refuses: try several
                target.test_one_input(bytes([k]) + data[1:])

    def test_a_drifting_draw_is_reported(self, corpus, monkeypatch):
        target = importlib.import_module("fuzz_native_pipelines")
        data = self._input(corpus)
        plan = target.NativePipeline.plan

        def drifted(self, data, key=None):
            return plan(self, data, key=None if key is None else key + 1)

        monkeypatch.setattr(target.NativePipeline, "plan", drifted)
        with pytest.raises(_harness.Finding, match="plan_batch and plan differ"):
            for k in range(32):
                target.test_one_input(bytes([k]) + data[1:])


class TestPilPipelinesOracle:
    """fuzz_pil_pipelines reports a native path that drifts from the literal run on PIL images."""

    @staticmethod
    def _inputs(corpus):
        """Small baseline YCbCr seeds with parameter bytes varied (some pipelines are refused)."""
        for path in corpus:
            data = _read(path)
            info = fio.jpeg_info(data[_harness.PARAM_BYTES:])
            if info.color_space == "YCbCr" and not info.progressive and 1 << 10 <= info.height * info.width <= 1 << 16:
                for k in range(32):
                    yield bytes([k]) + data[1:]

    def test_seeds_reach_the_comparison(self, corpus, monkeypatch):
        """The oracle runs: some inputs get as far as comparing native with literal bits."""
        target = importlib.import_module("fuzz_pil_pipelines")
        compared = []
        real = target.literal

        def counted(*args):
            out = real(*args)
            compared.append(out is not None)
            return out

        monkeypatch.setattr(target, "literal", counted)
        for data in self._inputs(corpus):
            target.test_one_input(data)
        assert sum(compared) >= 8

    def test_a_pixel_off_by_one_is_reported(self, corpus, monkeypatch):
        target = importlib.import_module("fuzz_pil_pipelines")
        run = target.NativePipeline.run

        def off_by_one(self, datas, plans, out, **kw):
            results = run(self, datas, plans, out, **kw)
            flat = out.view(-1)
            flat[0] = flat[0] + 1 if out.dtype == torch.uint8 else flat[0] + 1e-3
            return results

        monkeypatch.setattr(target.NativePipeline, "run", off_by_one)
        with pytest.raises(_harness.Finding, match="native output differs from the literal run"):
            for data in self._inputs(corpus):
                target.test_one_input(data)

    def test_a_drifting_draw_is_reported(self, corpus, monkeypatch):
        target = importlib.import_module("fuzz_pil_pipelines")
        plan = target.NativePipeline.plan

        def drifted(self, data, key=None):
            return plan(self, data, key=None if key is None else key + 1)

        monkeypatch.setattr(target.NativePipeline, "plan", drifted)
        with pytest.raises(_harness.Finding, match="plan_batch and plan differ"):
            for data in self._inputs(corpus):
                target.test_one_input(data)

    def test_a_pipeline_the_literal_run_refuses_is_not_compared(self, corpus):
        """A file Pillow cannot open gives no literal result: ``literal`` says None."""
        target = importlib.import_module("fuzz_pil_pipelines")
        assert target.literal(target.T1.Compose([target.T1.ToTensor()]), b"not a jpeg", 0, 0) is None


class TestBlindMode:
    """The coverage-blind runner: every seed in play, deterministic mutations, findings
    saved and reported through the exit status."""

    def test_mutations_deterministic_and_varied(self, corpus):
        pool = [_read(p) for p in corpus[:20]]
        jpegs = [d[_harness.PARAM_BYTES:] for d in pool]

        def run(seed):
            rng = random.Random(seed)
            return [_blind.mutate(d, rng, jpegs, _harness.PARAM_BYTES) for d in pool for _ in range(5)]

        first = run(7)
        assert first == run(7) and first != run(8)
        assert sum(m != d for m, d in zip(first, [d for d in pool for _ in range(5)])) >= 90

    @pytest.mark.parametrize("mutator", [f for f, _ in _blind.MUTATORS])
    def test_every_mutator_changes_some_seed(self, mutator, corpus):
        rng = random.Random(1)
        jpegs = [_read(p)[_harness.PARAM_BYTES:] for p in corpus]
        restart = [j for p, j in zip(corpus, jpegs) if "restart" in os.path.basename(p)]
        changed = sum(bytes(mutator(rng, bytearray(j), jpegs)) != j for j in restart)
        assert changed >= len(restart) // 2, f"{mutator.__name__} changed {changed} of {len(restart)}"

    def test_marker_mutations_do_what_they_say(self):
        jpeg = _jpegs.cjpeg(make_corpus.synthetic_rgb(17, 33, 0), "-sample", "2x1", "-restart", "1B")
        rng = random.Random(3)

        def segment(data, marker):
            return next(bytes(data[s:e]) for m, s, e in _blind.segments(bytes(data)) if m == marker)

        dri = segment(jpeg, 0xDD)
        assert any(segment(_blind._dri(rng, bytearray(jpeg), []), 0xDD) != dri for _ in range(5))
        sof = segment(jpeg, 0xC0)
        assert sof[11] == 0x21  # Y 2x1
        assert any(segment(_blind._sof(rng, bytearray(jpeg), []), 0xC0)[10:] != sof[10:] for _ in range(5))
        n = len(_blind._RST.findall(jpeg))
        assert n >= 8  # 3x3 MCUs
        counts = {len(_blind._RST.findall(_blind._restart_markers(rng, bytearray(jpeg), []))) for _ in range(40)}
        assert counts >= {n - 1, n, n + 1}  # deleted, renumbered, duplicated or inserted
        ended = _blind._end_early(random.Random(0), bytearray(jpeg), [])
        assert ended.endswith(b"\xff\xd9") and len(ended) <= len(jpeg)

    def test_every_seed_runs_and_findings_are_saved(self, corpus, tmp_path):
        originals = [_read(p) for p in corpus]
        seen = []

        def target(data):
            seen.append(data)
            if data not in originals:
                raise _harness.Finding("mutated")

        logs = []
        status = _blind.run(target, 600, [os.path.dirname(corpus[0])], artifact_prefix=f"{tmp_path}/",
                            log=logs.append)
        assert status == 1
        assert seen[:-1] == originals  # the first round: every seed as it is, in order
        artifacts = list(tmp_path.glob("crash-*"))
        assert len(artifacts) == 1 and artifacts[0].read_bytes() == seen[-1]
        assert any("FINDING Finding: mutated" in line for line in logs)

    def test_clean_run_exits_zero(self, corpus):
        logs = []
        assert _blind.run(lambda data: None, 1, corpus[:5], log=logs.append) == 0
        assert "executions over 5 seeds" in logs[-1] and ", 0 findings" in logs[-1]

    def test_command_line(self, corpus, tmp_path):
        """``python fuzz/<target>.py --blind SECONDS CORPUS...`` runs the target blind."""
        res = subprocess.run([sys.executable, os.path.join(FUZZ_DIR, "fuzz_jpeg_info.py"), "--blind", "2",
                              *corpus[:10], "--seed", "3", "--artifact-prefix", f"{tmp_path}/"],
                             check=False, capture_output=True, text=True, timeout=600,
                             env=dict(os.environ, PYTHONPATH=ROOT))
        assert res.returncode == 0, res.stdout + res.stderr
        assert "executions over 10 seeds" in res.stdout and "0 findings" in res.stdout
