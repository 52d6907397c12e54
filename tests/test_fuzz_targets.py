"""The fuzz targets in fuzz/: the seed corpus they start from, every target over every seed
(so a finding that a seed reaches fails the test suite, not only the fuzz smoke run), and
the oracles themselves: a wrong decoder must be reported, not pass.

Needs atheris (the ``fuzz`` extra); skipped without it unless ``FASTPREP_REQUIRE_FUZZ=1``
(set by CI's fuzz step, which installs atheris after the main test run).
"""

import glob
import importlib
import os
import sys

import pytest
import torch

import fastprep.io as fio

FUZZ_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz")
TARGETS = ["fuzz_jpeg_info", "fuzz_decode_jpeg", "fuzz_decode_roi", "fuzz_transforms", "fuzz_transcode",
           "fuzz_restart_roi", "fuzz_pack_recipes"]

try:
    import atheris  # noqa: F401
except ImportError:
    if os.environ.get("FASTPREP_REQUIRE_FUZZ") == "1":
        raise
    pytest.skip("atheris not installed (pip install atheris)", allow_module_level=True)

sys.path.insert(0, FUZZ_DIR)
import _harness  # noqa: E402
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
            warnings.warn("something else", RuntimeWarning)
            return torch.zeros(1)

        with pytest.raises(_harness.Finding, match="RuntimeWarning"):
            _harness.quiet(warns)


def _harness_roi():
    return importlib.import_module("fuzz_decode_roi")
