"""fastprep.io.transcode_jpeg and python -m fastprep.pack: lossless (pixels identical with
fastprep and with Pillow), restart intervals that enable the fast ROI path, metadata kept,
bad data reported."""

import fractions
import io
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

import fastprep.io as fio
from fastprep import _C
from fastprep.bench.synthetic import photo_like
from conftest import ENCODINGS, cjpeg, make_jpeg, pil_jpeg


def pil_pixels(data: bytes) -> np.ndarray:
    img = Image.open(io.BytesIO(data))
    img.load()
    return np.array(img)


def _auto_interval(info, source_bytes: int) -> int:
    """The documented automatic choice (docs/pack.md), written out plainly: the widest
    divisor of the MCUs per row no wider than 0.3 x window / skip_cost, where window =
    min(224, 28 % of the shorter side) and skip_cost = (0.9 b + 0.15) / (0.9 b + 1) at b =
    source bytes per pixel; if that makes more than 3 % of the source's bytes / 8 intervals,
    the narrowest divisor that does not, short of whole rows; else whole MCU rows, as few
    per interval as keep within that count (at most 65535 MCUs). Then, if that choice is
    wider than 0.5 x window / skip_cost (about 1.5x the window's own decode), the widest
    divisor within that width instead, if it makes at most 7 % of the source's bytes / 8
    intervals."""
    hmax = max(h for h, _ in info.sampling_factors)
    vmax = max(v for _, v in info.sampling_factors)
    mcu_w, mcu_h = (8, 8) if info.num_components == 1 else (8 * hmax, 8 * vmax)
    mpr, rows = -(-info.width // mcu_w), -(-info.height // mcu_h)
    frac = fractions.Fraction  # exact: the C++ rule uses integers
    b, p = frac(source_bytes), frac(info.width * info.height)
    window = min(224, min(info.width, info.height) * 28 // 100)
    skip_cost = (frac(9, 10) * b / p + frac(15, 100)) / (frac(9, 10) * b / p + 1)
    max_width = frac(3, 10) * window / skip_cost
    max_intervals = source_bytes * 3 // 800
    divisors = [d for d in range(1, mpr) if mpr % d == 0]
    fits = [d for d in divisors if d * mcu_w <= math.floor(max_width)] or [1]
    within_budget = [d for d in divisors if d >= max(fits) and (mpr // d) * rows <= max_intervals]
    if 1 in divisors and within_budget:
        choice = min(within_budget)
    else:
        rows_per_interval = min(rows if max_intervals < 1 else -(-rows // max_intervals), 65535 // mpr)
        choice = rows_per_interval * mpr
    limit_width = frac(1, 2) * window / skip_cost
    if min(choice, mpr) * mcu_w > math.floor(limit_width):
        narrower = [d for d in divisors if d * mcu_w <= math.floor(limit_width)]
        if narrower and (mpr // max(narrower)) * rows <= source_bytes * 7 // 800:
            return max(narrower)
    return choice


def scan_ends(data: bytes) -> list:
    """Offsets just past each scan's entropy-coded data (where the next marker starts)."""
    ends, i = [], 2
    while i + 1 < len(data):
        assert data[i] == 0xFF, f"no marker at offset {i}"
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:
            break
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
        if marker == 0xDA:
            while True:  # entropy data ends at the first 0xFF that is neither stuffing nor RSTn
                i = data.index(b"\xff", i)
                if data[i + 1] == 0 or 0xD0 <= data[i + 1] <= 0xD7:
                    i += 2
                    continue
                break
            ends.append(i)
    return ends


def cut_after_each_scan(data: bytes) -> list:
    """The progressive file stopped after each of its scans but the last, with a proper EOI:
    valid files whose later refinement scans are missing."""
    return [data[:end] + b"\xff\xd9" for end in scan_ends(data)[:-1]]


def cjpeg_scans(rgb, script: str, *args) -> bytes:
    return cjpeg(rgb, *args, scans=script)


# Progressive encodings beyond conftest's: other samplings and restart markers in the scans.
EXTRA_PROGRESSIVE = {
    "440-progressive": lambda a: cjpeg(a, "-progressive", "-sample", "1x2,1x1,1x1"),
    "411-progressive": lambda a: cjpeg(a, "-progressive", "-sample", "4x1,1x1,1x1"),
    "420-progressive-restart": lambda a: cjpeg(a, "-progressive", "-restart", "1B"),
    "444-arith-progressive-restart": lambda a: cjpeg(a, "-progressive", "-arithmetic", "-sample", "1x1",
                                                     "-restart", "2B"),
}


def _pixels_or_refused(src: bytes) -> bool:
    """Transcode `src`: True when refused with DecodeError, else assert the copy decodes to
    the original's pixels with fastprep and with Pillow and return False."""
    try:
        out = fio.transcode_jpeg(src)
    except fio.DecodeError:
        return True
    for mode in ("UNCHANGED", "RGB"):
        got, want = fio.decode_jpeg(out, mode), fio.decode_jpeg(src, mode)
        assert torch.equal(got, want), f"mode {mode}: {int((got != want).sum())} of {want.numel()} values differ"
    got, want = pil_pixels(out), pil_pixels(src)
    assert np.array_equal(got, want), f"Pillow: {int((got != want).sum())} of {want.size} values differ"
    return False


class TestTranscodeProperty:
    """Property: the transcoded file decodes to the original's pixels, or the transcode is
    refused -- over every test encoding and every progressive file cut after each scan."""

    @pytest.mark.parametrize("encoding", sorted(ENCODINGS) + sorted(EXTRA_PROGRESSIVE))
    @pytest.mark.parametrize("size", [(53, 71), (17, 9)])
    def test_identical_pixels_or_refused(self, encoding, size):
        if encoding in EXTRA_PROGRESSIVE:
            src = EXTRA_PROGRESSIVE[encoding](photo_like(*size, 7))
        else:
            src = make_jpeg(encoding, *size, seed=7)
        # complete files are transcoded (the property is not met by refusing everything)
        assert not _pixels_or_refused(src)
        cuts = cut_after_each_scan(src) if fio.jpeg_info(src).progressive else []
        assert len(cuts) >= 5 or not fio.jpeg_info(src).progressive
        for cut in cuts:
            _pixels_or_refused(cut)  # raises on a pixel difference
            # every libjpeg progressive script refines some coefficient in its last scan
            with pytest.raises(fio.DecodeError, match="incomplete progressive scans"):
                fio.transcode_jpeg(cut)

    @pytest.mark.parametrize("script,why", [
        ("0,1,2: 0-0, 0, 0;", "component 0 coefficient 1 never sent"),
        ("0,1,2: 0-0, 0, 1; 0: 1-63, 0, 0; 1: 1-63, 0, 0; 2: 1-63, 0, 0;",
         "component 0 coefficient 0 lacks its 1 low bit"),
        ("0,1,2: 0-0, 0, 0; 0: 1-63, 0, 0; 1: 1-63, 0, 0; 2: 1-62, 0, 0;", "component 2 coefficient 63 never sent"),
    ])
    def test_incomplete_progressive_refused(self, script, why):
        src = cjpeg_scans(photo_like(80, 96, 0), script, "-sample", "1x1,1x1,1x1")
        fio.decode_jpeg(src)  # a valid file: decodes without a warning (filterwarnings=error)
        with pytest.raises(fio.DecodeError, match=f"cannot be transcoded losslessly: incomplete progressive "
                                                  f"scans \\({why}"):
            fio.transcode_jpeg(src)

    def test_complete_custom_script_transcoded(self):
        script = "0,1,2: 0-0, 0, 1; 0: 1-63, 0, 0; 1: 1-63, 0, 0; 2: 1-63, 0, 0; 0,1,2: 0-0, 1, 0;"
        src = cjpeg_scans(photo_like(80, 96, 0), script, "-sample", "1x1,1x1,1x1")
        assert not _pixels_or_refused(src)


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes((0xFF, marker)) + (len(payload) + 2).to_bytes(2, "big") + payload


def handmade_gray_jpeg(dc_diffs) -> bytes:
    """A baseline grayscale JPEG 8 pixels high, one 8x8 block per DC difference (each
    within 11 bits, so any Huffman decoder reads it), no AC coefficients, quantizers 1.
    DC values are the running sums of the differences: they can leave the range that
    8-bit data gives, which the format does not forbid."""
    dqt = _segment(0xDB, bytes([0]) + bytes([1] * 64))
    sof = _segment(0xC0, bytes([8, 0, 8]) + (8 * len(dc_diffs)).to_bytes(2, "big") + bytes([1, 1, 0x11, 0]))
    # DC table: categories 0..11 coded on 4 bits (0000..1011); AC table: EOB only, coded '0'.
    dht = _segment(0xC4, bytes([0x00, 0, 0, 0, 12] + [0] * 12) + bytes(range(12)) +
                   bytes([0x10, 1] + [0] * 15) + bytes([0x00]))
    sos = _segment(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
    bits = ""
    for d in dc_diffs:
        size = abs(d).bit_length()
        bits += format(size, "04b") + (format(d if d >= 0 else d + (1 << size) - 1, f"0{size}b") if size else "")
        bits += "0"  # EOB
    bits += "1" * (-len(bits) % 8)
    entropy = bytearray()
    for i in range(0, len(bits), 8):
        entropy.append(int(bits[i:i + 8], 2))
        if entropy[-1] == 0xFF:
            entropy.append(0)  # byte stuffing
    return b"\xff\xd8" + dqt + sof + dht + sos + bytes(entropy) + b"\xff\xd9"


class TestCoefficientRange:
    """Coefficients beyond what 8-bit data gives decode without a warning, but libjpeg's
    encoder writes a corrupt scan for those a sequential Huffman scan cannot code (it checks
    only when it optimizes the tables): refused, never a corrupt copy."""

    def test_handmade_file_in_range_transcodes(self):
        src = handmade_gray_jpeg([-1024, 50, 900, -20, 1])  # DC -1024 (the lowest 8-bit data gives) ...
        want = fio.decode_jpeg(src, "GRAY")
        assert want[0, 0, ::8].tolist() == [0, 6, 119, 116, 116]
        for interval in (0, 1, 2):
            out = fio.transcode_jpeg(src, restart_interval=interval, optimize=False)
            assert torch.equal(fio.decode_jpeg(out, "GRAY", strict=True), want)
            assert np.array_equal(pil_pixels(out), pil_pixels(src))

    @pytest.mark.parametrize("optimize", [False, True])
    @pytest.mark.parametrize("interval", [0, 1])
    def test_dc_out_of_range_refused(self, optimize, interval):
        src = handmade_gray_jpeg([2047, 2047])  # DC 2047 then 4094: a restart makes the difference 4094
        assert fio.decode_jpeg(src, "GRAY", strict=True)[0, 0, ::8].tolist() == [255, 255]  # no warning
        with pytest.raises(fio.DecodeError, match=r"DCT coefficient out of range: component 0 block \(0, 0\) "
                                                  r"coefficient 0 is 2047, outside what 8-bit data gives"):
            fio.transcode_jpeg(src, restart_interval=interval, optimize=optimize)


class TestTranscode:
    @pytest.mark.parametrize("encoding", sorted(ENCODINGS))
    @pytest.mark.parametrize("size", [(53, 71), (64, 48), (40, 800)])
    def test_pixels_identical(self, encoding, size):
        src = make_jpeg(encoding, *size, seed=2)
        out = fio.transcode_jpeg(src)
        modes = ["UNCHANGED", "RGB"] if encoding.startswith(("gray", "cmyk")) else ["RGB", "YCbCr", "GRAY"]
        for mode in modes:
            assert torch.equal(fio.decode_jpeg(out, mode), fio.decode_jpeg(src, mode)), mode
        assert np.array_equal(pil_pixels(out), pil_pixels(src))
        info, src_info = fio.jpeg_info(out), fio.jpeg_info(src)
        assert not info.progressive and not info.arithmetic
        assert info.sampling_factors == src_info.sampling_factors and info.color_space == src_info.color_space
        assert info.restart_interval == _auto_interval(src_info, len(src))
        assert info.restart_roi

    def test_roi_on_packed_file_equals_original(self):
        src = make_jpeg("420-progressive", 301, 457, seed=5)
        out = fio.transcode_jpeg(src)
        full = fio.decode_jpeg(src)
        g = torch.Generator().manual_seed(1)
        taken0 = _C.restart_stats()[0]
        for _ in range(80):
            hh, ww = (int(v) for v in torch.randint(1, 200, (2,), generator=g))
            t = int(torch.randint(0, 301 - hh + 1, (1,), generator=g))
            l = int(torch.randint(0, 457 - ww + 1, (1,), generator=g))
            assert torch.equal(fio.decode_jpeg_roi(out, t, l, hh, ww), full[:, t:t + hh, l:l + ww]), (t, l, hh, ww)
        assert _C.restart_stats()[0] > taken0

    @pytest.mark.parametrize("interval", [0, 1, 3, 29, 58])
    def test_explicit_interval(self, interval):
        src = make_jpeg("420", 100, 457, seed=1)  # 29 MCUs per row
        out = fio.transcode_jpeg(src, restart_interval=interval)
        info = fio.jpeg_info(out)
        assert info.restart_interval == interval
        assert info.restart_roi == (interval in (1, 29, 58))
        assert torch.equal(fio.decode_jpeg(out), fio.decode_jpeg(src))

    def test_optimize_smaller(self):
        src = make_jpeg("420", 200, 300, seed=1)
        assert len(fio.transcode_jpeg(src, optimize=True)) < len(fio.transcode_jpeg(src, optimize=False))

    def test_metadata(self):
        rgb = photo_like(40, 56, 0)
        exif = Image.Exif()
        exif[0x010F] = "fastprep test camera"
        icc = b"\x00\x00\x02\x0cfake icc profile bytes" * 4
        src = pil_jpeg(rgb, quality=90, exif=exif.tobytes(), icc_profile=icc, comment=b"a comment")
        kept = Image.open(io.BytesIO(fio.transcode_jpeg(src)))
        assert kept.info.get("icc_profile") == icc
        assert kept.getexif()[0x010F] == "fastprep test camera"
        assert kept.info.get("comment") == b"a comment"
        assert kept.info.get("jfif") is not None
        stripped = Image.open(io.BytesIO(fio.transcode_jpeg(src, keep_metadata=False)))
        assert "icc_profile" not in stripped.info and "exif" not in stripped.info
        assert np.array_equal(np.array(stripped), np.array(kept))
        # one JFIF APP0 only (the source's is not copied a second time)
        assert fio.transcode_jpeg(src).count(b"JFIF\x00") == 1

    def test_cmyk_adobe_marker_kept(self):
        src = make_jpeg("cmyk", 40, 40)
        out = fio.transcode_jpeg(src)
        assert out.count(b"Adobe") == 1 and src.count(b"Adobe") == 1

    @pytest.mark.parametrize("bad", [b"", b"\xff\xd8", b"not a jpeg at all", b"\xff\xd8\xff\xe0" + b"\x00" * 40])
    def test_bad_data(self, bad):
        with pytest.raises(fio.DecodeError):
            fio.transcode_jpeg(bad)

    def test_truncated_and_corrupt_raise(self):
        src = make_jpeg("420", 100, 120, seed=4)
        with pytest.raises(fio.DecodeError):
            fio.transcode_jpeg(src[: len(src) // 2])
        b = bytearray(src)
        sos = src.index(b"\xff\xda")
        b[sos + 200:sos + 260] = b"\xff\xd3" * 30
        with pytest.raises(fio.DecodeError):
            fio.transcode_jpeg(bytes(b))

    def test_max_pixels(self):
        src = make_jpeg("420", 100, 120)
        with pytest.raises(fio.DecodeError, match="max_pixels"):
            fio.transcode_jpeg(src, max_pixels=100 * 120 - 1)

    def test_arguments(self):
        src = make_jpeg("420", 16, 16)
        with pytest.raises(ValueError, match="restart_interval"):
            fio.transcode_jpeg(src, restart_interval=-2)
        with pytest.raises(ValueError, match="restart_interval"):
            fio.transcode_jpeg(src, restart_interval="rows")
        with pytest.raises(TypeError, match="restart_interval"):
            fio.transcode_jpeg(src, restart_interval=2.0)
        with pytest.raises(TypeError, match="data"):
            fio.transcode_jpeg("file.jpg")

    def test_opcheck(self):
        data = fio._as_tensor(make_jpeg("420", 20, 30))
        torch.library.opcheck(torch.ops.fastprep.transcode_jpeg.default, (data, -1, True, True, 0),
                              test_utils=("test_schema", "test_faketensor"))


def _policy_image(content: str, height: int, width: int, seed: int) -> np.ndarray:
    """photo: photo-like; noise: every pixel random (dense: 1-3 bytes per pixel); flat: a
    faint gradient (sparse: a few hundredths of a byte per pixel); blank: one grey level
    (a few bits per block)."""
    if content == "photo":
        return photo_like(height, width, seed)
    if content == "noise":
        return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    if content == "blank":
        return np.full((height, width, 3), 120, np.uint8)
    ramp = (np.arange(width, dtype=np.float32) * 64 / width + 96).astype(np.uint8)
    return np.broadcast_to(ramp[None, :, None], (height, width, 3)).copy()


# (height, width, subsampling or "gray", content, quality, what the automatic choice must be)
_POLICY_CASES = [
    (375, 500, "4:2:0", "photo", 90, "within a row"),     # ImageNet-sized
    (333, 500, "4:4:4", "photo", 95, "within a row"),
    (1440, 2560, "4:2:2", "photo", 90, "within a row"),
    (64, 5640, "4:2:2", "noise", 100, "one MCU"),         # 353 MCUs per row (prime), dense
    (1080, 1920, "4:2:2", "flat", 90, "within a row"),    # sparse: 3 % allows only whole rows, 7 % 640 px
    (2000, 3200, "4:4:4", "flat", 95, "within a row"),    # sparse: 1600 px at 3 %, 640 px at 7 %
    (800, 776, "4:4:4", "noise", 95, "one MCU"),          # 97 MCUs per row (prime): rows at 3 %, 1 MCU at 7 %
    (2400, 3840, "4:4:4", "flat", 75, "within a row"),
    (2400, 3840, "gray", "blank", 75, "whole rows"),      # several rows per interval
    (600, 800, "gray", "noise", 90, "within a row"),
]


class TestAutoInterval:
    """``restart_interval="auto"`` follows the documented formula (``_auto_interval``) on
    representative image and file sizes, stays a fast-path layout, and the override wins."""

    @pytest.mark.parametrize("case", _POLICY_CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}-{c[3]}")
    def test_follows_the_formula(self, case):
        height, width, subsampling, content, quality, expected = case
        rgb = _policy_image(content, height, width, seed=3)
        if subsampling == "gray":
            src = pil_jpeg(rgb[..., 0], quality=quality, optimize=True)
        else:
            src = pil_jpeg(rgb, quality=quality, subsampling=subsampling)
        src_info = fio.jpeg_info(src)
        out = fio.transcode_jpeg(src)
        info = fio.jpeg_info(out)
        want = _auto_interval(src_info, len(src))
        assert info.restart_interval == want
        mcu_w = 8 if src_info.num_components == 1 else 8 * max(h for h, _ in src_info.sampling_factors)
        mpr = -(-width // mcu_w)
        kind = ("one MCU" if want == 1 else "within a row" if mpr % want == 0 and want < mpr
                else "whole rows" if want % mpr == 0 else "neither")
        assert kind == expected, (want, mpr)
        assert info.restart_roi
        full = fio.decode_jpeg(src)
        assert torch.equal(fio.decode_jpeg(out), full)
        g = torch.Generator().manual_seed(0)
        for _ in range(4):
            t = int(torch.randint(0, height - min(height, 64) + 1, (1,), generator=g))
            l = int(torch.randint(0, width - min(width, 224) + 1, (1,), generator=g))
            hh, ww = min(height, 64), min(width, 224)
            assert torch.equal(fio.decode_jpeg_roi(out, t, l, hh, ww), full[:, t:t + hh, l:l + ww]), (t, l)

    def test_sparse_file_gets_several_rows_per_interval(self):
        # 2400x3840 grey, one level: a few bits per block, 300 MCU rows of 480 MCUs; one
        # marker per row (8 bytes each) would cost more than 3 % of the file
        src = pil_jpeg(_policy_image("blank", 2400, 3840, 0)[..., 0], quality=75, optimize=True)
        rows_per_interval = -(-300 * 8 // (len(src) * 3 // 100))
        assert rows_per_interval >= 2
        assert fio.jpeg_info(fio.transcode_jpeg(src)).restart_interval == rows_per_interval * 480

    @pytest.mark.parametrize("override", [0, 2, 120])
    def test_override_wins(self, tmp_path, override):
        src = pil_jpeg(photo_like(400, 1920, seed=4), quality=90, subsampling="4:2:2")  # 120 MCUs per row
        auto = _auto_interval(fio.jpeg_info(src), len(src))
        assert auto != override
        assert fio.jpeg_info(fio.transcode_jpeg(src)).restart_interval == auto
        out = fio.transcode_jpeg(src, restart_interval=override)
        assert fio.jpeg_info(out).restart_interval == override
        assert torch.equal(fio.decode_jpeg(out), fio.decode_jpeg(src))
        # and through fastprep.pack (the CLI's --restart-interval: TestPackCli)
        from fastprep.pack import pack_folder

        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "a.jpg").write_bytes(src)
        for interval, want in ((override, override), ("auto", auto)):
            dst = tmp_path / f"dst-{interval}"
            pack_folder(tmp_path / "src", dst, workers=1, restart_interval=interval, progress=False)
            assert fio.jpeg_info((dst / "a.jpg").read_bytes()).restart_interval == want


def _run_pack(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(fio.__file__)))] +
        ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    return subprocess.run([sys.executable, "-m", "fastprep.pack", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "cat").mkdir(parents=True)
    (src / "dog" / "deep").mkdir(parents=True)
    files = {
        "cat/a.jpg": make_jpeg("420", 60, 80, seed=1),
        "cat/b.JPEG": make_jpeg("420-progressive", 50, 70, seed=2),
        "dog/c.jpeg": make_jpeg("gray", 33, 45, seed=3),
        "dog/deep/d.jpg": make_jpeg("cmyk", 40, 40, seed=4),
        "dog/notes.txt": b"not an image\n",
        "dog/broken.jpg": b"\xff\xd8\xff\xe0" + b"\x00" * 100,
        "dog/deep/no-extension": make_jpeg("444", 20, 30, seed=5),
    }
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    return src, files


class TestPackCli:
    def test_mirror_and_resume(self, tmp_path, tree):
        src, files = tree
        dst = tmp_path / "dst"
        res = _run_pack(src, dst, "-j", "2", "--quiet")
        assert res.returncode == 0, res.stderr
        assert "packed: 5" in res.stdout and "failed: 1" in res.stdout and "dog/broken.jpg" in res.stdout
        for rel, data in files.items():
            out = (dst / rel).read_bytes()
            if rel.endswith(("txt", "broken.jpg")):
                assert out == data  # copied unchanged / as-is
            else:
                assert fio.jpeg_info(out).restart_roi
                assert torch.equal(fio.decode_jpeg(out, "UNCHANGED"), fio.decode_jpeg(data, "UNCHANGED")), rel
                assert np.array_equal(pil_pixels(out), pil_pixels(data)), rel
            assert os.stat(dst / rel).st_mtime_ns == os.stat(src / rel).st_mtime_ns
        assert not [p for p in dst.rglob("*") if "tmp" in p.name]
        # resumable: nothing to do the second time, one new file the third
        res = _run_pack(src, dst, "--quiet")
        assert res.returncode == 0 and "up to date: 7" in res.stdout, res.stdout
        (src / "cat" / "e.jpg").write_bytes(make_jpeg("422", 30, 30))
        res = _run_pack(src, dst, "--quiet")
        assert "packed: 1" in res.stdout and "up to date: 7" in res.stdout, res.stdout

    def test_skip_failures_and_options(self, tmp_path, tree):
        src, _ = tree
        dst = tmp_path / "dst"
        res = _run_pack(src, dst, "--quiet", "--on-error", "skip", "--restart-interval", "1", "--strip-metadata",
                        "-j", "1")
        assert res.returncode == 0, res.stderr
        assert not (dst / "dog" / "broken.jpg").exists() and "left out" in res.stdout
        assert fio.jpeg_info((dst / "cat" / "a.jpg").read_bytes()).restart_interval == 1

    def test_progress_bar_on_stderr(self, tmp_path, tree):
        """On a terminal's stderr a bar; into a pipe or a log file none (no carriage-return
        lines in logs)."""
        src, _ = tree
        res = _run_pack(src, tmp_path / "dst", "-j", "2")
        assert res.returncode == 0 and "fastprep.pack" not in res.stderr
        import struct

        fcntl, termios = pytest.importorskip("fcntl"), pytest.importorskip("termios")  # a pseudo-terminal: Unix
        primary, secondary = os.openpty()
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal's size
        try:
            env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(fio.__file__))))
            done = subprocess.run([sys.executable, "-m", "fastprep.pack", str(src), str(tmp_path / "dst2"), "-j", "2"],
                                  stdout=subprocess.DEVNULL, stderr=secondary, env=env, timeout=600)
            os.close(secondary)
            chunks = []
            while True:
                try:
                    chunk = os.read(primary, 1 << 16)
                except OSError:  # EIO: the terminal's other end is closed and drained
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(primary)
        assert done.returncode == 0 and b"fastprep.pack" in b"".join(chunks)

    def test_real_failures_exit_nonzero(self, tmp_path, tree):
        src, _ = tree
        blocker = tmp_path / "a-file"
        blocker.write_bytes(b"x")
        res = _run_pack(src, blocker / "dst", "--quiet")  # DST cannot be created
        assert res.returncode != 0 and "error" in res.stderr
        res = _run_pack(tmp_path / "missing", tmp_path / "dst2", "--quiet")
        assert res.returncode != 0 and "src must be a folder" in res.stderr
        # an output path blocked by a folder of the same name: an I/O error, reported, exit 1
        dst = tmp_path / "dst3"
        (dst / "cat" / "a.jpg").mkdir(parents=True)
        res = _run_pack(src, dst, "--quiet")
        assert res.returncode == 1 and "I/O errors (1)" in res.stdout and "cat/a.jpg" in res.stdout
        assert (dst / "dog" / "c.jpeg").exists()  # the rest went on

    def test_incomplete_progressive_kept_as_is(self, tmp_path, tree):
        """Valid files a transcode would change are copied byte for byte and listed with
        their reason, even with --on-error skip (which leaves out only corrupt files)."""
        src, _ = tree
        dc_only = cjpeg_scans(photo_like(80, 96, 0), "0,1,2: 0-0, 0, 0;", "-sample", "1x1,1x1,1x1")
        cut = cut_after_each_scan(make_jpeg("420-progressive", 50, 70, seed=2))[3]
        (src / "cat" / "dc-only.jpg").write_bytes(dc_only)
        (src / "cat" / "cut.jpg").write_bytes(cut)
        dst = tmp_path / "dst"
        res = _run_pack(src, dst, "--quiet", "--on-error", "skip")
        assert res.returncode == 0, res.stderr
        assert (dst / "cat" / "dc-only.jpg").read_bytes() == dc_only
        assert (dst / "cat" / "cut.jpg").read_bytes() == cut
        assert not (dst / "dog" / "broken.jpg").exists()
        assert "packed: 5" in res.stdout and "kept as-is: 2" in res.stdout and "failed: 1" in res.stdout, res.stdout
        kept_section = res.stdout.split("kept as-is, valid JPEG but a transcode would change its pixels (2):\n")[1]
        listed = kept_section.splitlines()[:2]
        assert [line.split(":")[0].strip() for line in listed] == ["cat/cut.jpg", "cat/dc-only.jpg"], res.stdout
        assert all("incomplete progressive scans" in line for line in listed), res.stdout
        assert "could not transcode (corrupt, truncated or too large) (1):\n  dog/broken.jpg" in res.stdout

    def test_kept_in_summary(self, tmp_path):
        from fastprep.pack import pack_folder

        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "a.jpg").write_bytes(
            cjpeg_scans(photo_like(20, 30, 0), "0: 0-0, 0, 0; 1: 0-0, 0, 0; 2: 0-0, 0, 0;", "-sample", "1x1"))
        summary = pack_folder(tmp_path / "src", tmp_path / "dst", workers=1, progress=False, on_error="skip")
        assert summary.packed == 0 and not summary.failed and summary.bytes_after == summary.bytes_before
        assert [rel for rel, _ in summary.kept] == ["a.jpg"]
        assert summary.kept[0][1].startswith("cannot be transcoded losslessly: incomplete progressive scans")

    def test_dst_inside_src(self, tmp_path, tree):
        src, _ = tree
        res = _run_pack(src, src / "packed", "--quiet")
        assert res.returncode == 0 and "files: 7" in res.stdout, res.stdout
        res = _run_pack(src, src / "packed", "--quiet")
        assert "up to date: 7" in res.stdout, res.stdout
