"""Bad input: one exception type for undecodable data, ValueError/TypeError for bad
arguments; never an abort, a hang, a leak or text on stderr."""

import resource
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import fastprep.io as fio
from conftest import ENCODINGS, cjpeg, make_jpeg

PHOTO = make_jpeg("420", 120, 160, seed=4)
PROGRESSIVE = make_jpeg("420-progressive", 120, 160, seed=4)


def entropy_start(data: bytes) -> int:
    sos = data.index(b"\xff\xda")
    return sos + 2 + (data[sos + 2] << 8 | data[sos + 3])


def with_frame_size(data: bytes, height: int, width: int) -> bytes:
    """Rewrite the SOF0/SOF2 frame header's declared size."""
    out = bytearray(data)
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = out.find(marker)
        if at >= 0:
            out[at + 5:at + 9] = bytes([height >> 8, height & 255, width >> 8, width & 255])
            return bytes(out)
    raise AssertionError("no SOF marker")


def warning_flip(data: bytes) -> bytes:
    """The first single-bit flip in the entropy data that libjpeg reports as corrupt."""
    start = entropy_start(data)
    for pos in range(start + 4, len(data) - 4):
        for bit in (0x10, 0x01, 0x80):
            if 0xFF in data[pos - 1:pos + 2] or data[pos] ^ bit == 0xFF:
                continue
            out = bytearray(data)
            out[pos] ^= bit
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    fio.decode_jpeg(out)
                except fio.DecodeError:
                    continue
            if any(issubclass(w.category, fio.DecodeWarning) for w in caught):
                return bytes(out)
    raise AssertionError("no bit flip produced a libjpeg warning")


class _Bits:
    """MSB-first bit writer with JPEG byte stuffing (0xFF -> 0xFF 0x00), padded with 1s."""

    def __init__(self):
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, value, nbits):
        for i in range(nbits - 1, -1, -1):
            self.acc = (self.acc << 1) | ((value >> i) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                if self.acc == 0xFF:
                    self.out.append(0)
                self.acc, self.n = 0, 0

    def data(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)
        return bytes(self.out)


def _segment(marker, payload):
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def progressive_gray(height, width, scans, dc_scan=True):
    """A hand-written progressive grayscale JPEG whose scans carry no image data.

    Huffman tables have one 1-bit code each: DC category 0 (a zero difference, one bit per
    block) and the AC symbol EOB14, so any AC scan over all blocks is a few EOB runs of
    32767 blocks (15 bits each): a scan costs a pass over every block for a few bytes.

    Args:
        height, width: frame size.
        scans: (Ss, Se, Ah, Al) of each AC scan, in order.
        dc_scan: start with a DC scan (one bit per block); without it the AC scans come
            first, which libjpeg decodes with a warning.
    """
    blocks = -(-height // 8) * -(-width // 8)
    out = bytearray(b"\xff\xd8")
    out += _segment(0xDB, bytes([0]) + bytes([1] * 64))  # 8-bit quantizers, all 1
    out += _segment(0xC2, bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([1, 1, 0x11, 0]))
    one_code = bytes([1] + [0] * 15)
    out += _segment(0xC4, bytes([0x00]) + one_code + bytes([0x00]))  # DC table 0: category 0
    out += _segment(0xC4, bytes([0x10]) + one_code + bytes([0xE0]))  # AC table 0: EOB14

    def sos(ss, se, ah, al):
        return _segment(0xDA, bytes([1, 1, 0x00, ss, se, (ah << 4) | al]))

    if dc_scan:
        bits = _Bits()
        for _ in range(blocks):
            bits.put(0, 1)
        out += sos(0, 0, 0, 0) + bits.data()
    runs = _Bits()
    for _ in range(-(-blocks // 32767)):
        runs.put(0, 1)
        runs.put(32767 - 16384, 14)
    ac = runs.data()
    for ss, se, ah, al in scans:
        out += sos(ss, se, ah, al) + ac
    return bytes(out + b"\xff\xd9")


def many_scans_bomb():
    """A valid ~50 KB progressive 3584x4096 file with 883 scans: every AC coefficient on its
    own, sent from bit 13 down to bit 0 (each scan adds a bit)."""
    scans = [(k, k, 0, 13) for k in range(1, 64)]
    scans += [(k, k, al + 1, al) for al in range(12, -1, -1) for k in range(1, 64)]
    return progressive_gray(3584, 4096, scans)


def repeated_scans_bomb():
    """A ~35 KB 16384x16384 file of 139 identical AC scans (no DC scan)."""
    return progressive_gray(16384, 16384, [(1, 63, 0, 0)] * 139, dc_scan=False)


UNDECODABLE = {
    "empty": b"",
    "two-bytes": b"\xff\xd8",
    "one-byte": b"\xff",
    "text": b"hello, this is not a JPEG file at all" * 3,
    "png": b"\x89PNG\r\n\x1a\n" + bytes(64),
    "random-after-soi": b"\xff\xd8" + np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes(),
    "truncated-header": PHOTO[:100],
    "truncated-before-sos-data": PHOTO[:entropy_start(PHOTO)],
    "truncated-mid-scan": PHOTO[:len(PHOTO) // 2],
    "progressive-truncated": PROGRESSIVE[:len(PROGRESSIVE) * 2 // 3],
    "progressive-no-eoi": PROGRESSIVE[:-2],
    "zero-height": with_frame_size(PHOTO, 0, 160),
    "zero-width": with_frame_size(PHOTO, 120, 0),
}


class TestUndecodable:
    @pytest.mark.parametrize("name", sorted(UNDECODABLE))
    def test_raises_decode_error_repeatably(self, name):
        data = UNDECODABLE[name]
        try:  # the last pixel: a window that needs all of the data
            info = fio.jpeg_info(data)
            window = (info.height - 1, info.width - 1, 1, 1)
        except fio.DecodeError:
            window = (0, 0, 1, 1)
        for _ in range(2):  # the same call raises again
            with pytest.raises(fio.DecodeError) as e1:
                fio.decode_jpeg(data)
            with pytest.raises(fio.DecodeError) as e2:
                fio.decode_jpeg_roi(data, *window)
            assert str(e1.value) and str(e2.value)

    def test_messages(self):
        with pytest.raises(fio.DecodeError, match="empty"):
            fio.decode_jpeg(b"")
        with pytest.raises(fio.DecodeError, match="SOI"):
            fio.decode_jpeg(UNDECODABLE["png"])
        with pytest.raises(fio.DecodeError, match="truncated"):
            fio.decode_jpeg(UNDECODABLE["truncated-mid-scan"])
        with pytest.raises(fio.DecodeError, match="[Ee]mpty JPEG image"):
            fio.decode_jpeg(UNDECODABLE["zero-height"])
        with pytest.raises(fio.DecodeError):
            fio.jpeg_info(b"")

    def test_decode_error_is_runtime_error(self):
        assert issubclass(fio.DecodeError, RuntimeError)


class TestTruncation:
    def test_window_above_the_cut_decodes_exactly(self):
        data = PHOTO[:len(PHOTO) * 3 // 4]
        full = fio.decode_jpeg(PHOTO)
        out = fio.decode_jpeg_roi(data, 0, 0, 32, 160)
        assert torch.equal(out, full[:, :32])

    def test_window_below_the_cut_raises(self):
        with pytest.raises(fio.DecodeError, match="truncated"):
            fio.decode_jpeg_roi(PHOTO[:len(PHOTO) // 3], 100, 0, 20, 20)

    def test_missing_eoi_only(self):
        # All entropy data present, only the EOI marker missing: baseline decodes exactly,
        # strict mode refuses.
        cut = PHOTO[:-2]
        assert torch.equal(fio.decode_jpeg(cut), fio.decode_jpeg(PHOTO))
        with pytest.raises(fio.DecodeError, match="truncated"):
            fio.decode_jpeg(cut, strict=True)

    @pytest.mark.parametrize("encoding", sorted(ENCODINGS))
    def test_every_cut_point(self, encoding):
        """Every prefix of a file, full decode and a bottom and top window: DecodeError, or
        exactly the pixels of the complete file -- never silently wrong, never a hang."""
        data = make_jpeg(encoding, 40, 56, seed=1)
        full = fio.decode_jpeg(data, "UNCHANGED")
        windows = [(0, 0, 40, 56), (32, 40, 8, 16), (0, 8, 9, 20)]
        for cut in range(0, len(data) - 1, 5 if "progressive" in encoding else 3):
            for t, l, h, w in windows:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", fio.DecodeWarning)
                        out = fio.decode_jpeg_roi(data[:cut], t, l, h, w, "UNCHANGED")
                except fio.DecodeError:
                    continue
                assert torch.equal(out, full[:, t:t + h, l:l + w]), (encoding, cut, (t, l, h, w))


class TestCorruptEntropyData:
    def test_warns_or_raises_when_strict(self):
        bad = warning_flip(PHOTO)
        with pytest.warns(fio.DecodeWarning, match="Corrupt JPEG data"):
            out = fio.decode_jpeg(bad)
        assert out.shape == (3, 120, 160)
        with pytest.raises(fio.DecodeError, match="strict"):
            fio.decode_jpeg(bad, strict=True)
        with pytest.raises(fio.DecodeError, match="strict"):
            fio.decode_jpeg_roi(bad, 0, 0, 120, 160, strict=True)

    def test_no_stale_warning_after_a_direct_op_call(self):
        bad = fio._as_tensor(warning_flip(PHOTO))
        torch.ops.fastprep.decode_jpeg(bad, 3, 0, False)  # leaves its warning pending
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fio.decode_jpeg(PHOTO)  # a good file must not report the previous call's warning


class TestLimits:
    def test_huge_declared_size_refused_before_allocation(self):
        for data in (with_frame_size(PHOTO, 65500, 65500), with_frame_size(PROGRESSIVE, 65500, 65500)):
            assert fio.jpeg_info(data).height == 65500
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            with pytest.raises(fio.DecodeError, match="max_pixels"):
                fio.decode_jpeg(data)
            with pytest.raises(fio.DecodeError, match="max_pixels"):
                fio.decode_jpeg_roi(data, 0, 0, 8, 8)
            assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 100_000  # KiB

    def test_max_pixels_argument(self):
        with pytest.raises(fio.DecodeError, match=r"^image is 120x160 = 19200 pixels, more than max_pixels=1000; "
                                                  r"pass a larger max_pixels \(0: no limit\) to decode it$"):
            fio.decode_jpeg(PHOTO, max_pixels=1000)
        assert fio.decode_jpeg(PHOTO, max_pixels=120 * 160).shape == (3, 120, 160)
        assert fio.decode_jpeg(PHOTO, max_pixels=0).shape == (3, 120, 160)
        with pytest.raises(ValueError, match="max_pixels must be >= 0"):
            fio.decode_jpeg(PHOTO, max_pixels=-1)


class TestScanLimits:
    def test_handwritten_file_is_valid(self):
        """The hand-written progressive files decode (no data: every pixel is the level
        shift, 128) when they stay within the rules."""
        data = progressive_gray(40, 72, [(k, k, 0, 1) for k in range(1, 40)] + [(40, 63, 0, 1), (1, 63, 1, 0)])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = fio.decode_jpeg(data, "GRAY", strict=True)
        assert out.shape == (1, 40, 72) and bool((out == 128).all())

    def test_many_scans_bomb(self):
        data = many_scans_bomb()
        assert len(data) < 60_000 and data.count(b"\xff\xda") == 883
        for decode in (lambda: fio.decode_jpeg(data), lambda: fio.decode_jpeg_roi(data, 100, 200, 64, 64),
                       lambda: fio.decode_jpeg(data, scale=(1, 8))):
            with pytest.raises(fio.DecodeError, match="more than max_scans=64 scans \\(scan 65 found\\)"):
                decode()

    def test_repeated_scans_bomb(self):
        """16384x16384 (exactly DEFAULT_MAX_PIXELS) in ~50 KB: refused at the first scan's
        header, before the coefficient buffer is touched."""
        data = repeated_scans_bomb()
        assert len(data) < 64_000 and data.count(b"\xff\xda") == 139
        assert fio.jpeg_info(data).height * fio.jpeg_info(data).width == fio.DEFAULT_MAX_PIXELS
        for strict in (False, True):
            with pytest.raises(fio.DecodeError, match="before any DC scan" if not strict else "strict"):
                fio.decode_jpeg(data, strict=strict)
        with pytest.raises(fio.DecodeError, match="before any DC scan"):
            fio.decode_jpeg_roi(data, 0, 0, 8, 8, max_scans=0)

    @pytest.mark.parametrize("scans, libjpeg_warns", [
        ([(1, 63, 0, 0), (1, 63, 0, 0)], False),                # a first scan sent twice
        ([(1, 63, 0, 1), (1, 63, 1, 0), (1, 63, 1, 0)], True),  # a refinement sent twice
        ([(1, 5, 0, 0), (6, 63, 0, 0), (2, 4, 0, 0)], False),   # a sub-band of what was sent
    ])
    def test_repeated_scans_refused_whatever_the_limit(self, scans, libjpeg_warns):
        data = progressive_gray(256, 256, scans)
        repeat = f"scan {len(scans) + 1} repeats coefficient data"
        for max_scans in (0, 64):
            with pytest.raises(fio.DecodeError, match=repeat):
                fio.decode_jpeg(data, max_scans=max_scans)
        # The transcoder (what pack writes) refuses what the decoder refuses; a repeated
        # refinement already makes libjpeg warn, and the transcoder refuses every warning.
        # (It once copied a repeated first scan into a clean sequential file: fuzz finding.)
        with pytest.raises(fio.DecodeError, match="Inconsistent progression sequence" if libjpeg_warns else repeat):
            fio.transcode_jpeg(data)

    def test_limit_counts_every_scan(self):
        n = PROGRESSIVE.count(b"\xff\xda")
        assert n >= 6
        full = fio.decode_jpeg(PROGRESSIVE)
        assert torch.equal(fio.decode_jpeg(PROGRESSIVE, max_scans=n), full)
        assert torch.equal(fio.decode_jpeg(PROGRESSIVE, max_scans=0), full)
        with pytest.raises(fio.DecodeError, match=f"more than max_scans={n - 1} scans \\(scan {n} found\\)"):
            fio.decode_jpeg(PROGRESSIVE, max_scans=n - 1)
        with pytest.raises(fio.DecodeError, match="max_scans=1 "):
            fio.decode_jpeg_roi(PROGRESSIVE, 0, 0, 4, 4, max_scans=1)
        assert torch.equal(fio.decode_jpeg(PHOTO, max_scans=1), fio.decode_jpeg(PHOTO))  # baseline: 1 scan

    def test_max_scans_argument(self):
        with pytest.raises(ValueError, match="max_scans must be >= 0 \\(0 = no limit\\), got -1"):
            fio.decode_jpeg(PHOTO, max_scans=-1)
        with pytest.raises(TypeError, match="max_scans must be an int, got str"):
            fio.decode_jpeg_roi(PHOTO, 0, 0, 1, 1, max_scans="10")
        with pytest.raises(ValueError, match="max_scans must be >= 0"):
            torch.ops.fastprep.decode_jpeg(fio._as_tensor(PHOTO), 3, 0, False, 8, -5)


class TestBadArguments:
    @pytest.mark.parametrize("window", [
        (-1, 0, 10, 10), (0, -1, 10, 10), (0, 0, 0, 10), (0, 0, 10, 0), (0, 0, -5, 10),
        (120, 0, 1, 1), (0, 160, 1, 1), (100, 0, 21, 10), (0, 150, 10, 11),
        (2**31 - 1, 0, 1, 1), (0, 2**31 - 1, 1, 1), (0, 0, 2**31, 1), (0, 0, 1, 2**31 + 5),
        (2**62, 2**62, 2**62, 2**62), (0, 0, 2**63 - 1, 2**63 - 1),
    ])
    def test_window_value_errors(self, window):
        with pytest.raises(ValueError, match="window"):
            fio.decode_jpeg_roi(PHOTO, *window)

    def test_window_beyond_int64(self):
        with pytest.raises(ValueError, match="out of range"):
            fio.decode_jpeg_roi(PHOTO, 0, 0, 2**64, 1)

    @pytest.mark.parametrize("bad", [1.5, "3", None, True])
    def test_window_type_errors(self, bad):
        with pytest.raises(TypeError, match="must be an int"):
            fio.decode_jpeg_roi(PHOTO, bad, 0, 10, 10)

    def test_numpy_ints_accepted(self):
        assert fio.decode_jpeg_roi(PHOTO, np.int64(1), np.int32(2), np.uint8(3), 4).shape == (3, 3, 4)

    def test_data_errors(self):
        with pytest.raises(TypeError, match="uint8"):
            fio.decode_jpeg(torch.zeros(10, dtype=torch.float32))
        with pytest.raises(ValueError, match="1-D"):
            fio.decode_jpeg(torch.zeros(2, 5, dtype=torch.uint8))
        with pytest.raises(TypeError, match="uint8"):
            fio.decode_jpeg(np.zeros(10, np.int16))
        with pytest.raises(TypeError, match="read_file"):
            fio.decode_jpeg("photo.jpg")
        with pytest.raises(TypeError, match="got list"):
            fio.decode_jpeg([1, 2, 3])
        with pytest.raises(ValueError, match="mode must be one of"):
            fio.decode_jpeg(PHOTO, "RGBA")
        with pytest.raises(ValueError, match="mode must be"):
            torch.ops.fastprep.decode_jpeg(fio._as_tensor(PHOTO), 7, 0, False)

    def test_unsupported_mode_for_color_space(self):
        cmyk = make_jpeg("cmyk", 16, 16)
        expect = (r"^a (CMYK|YCCK) JPEG cannot be decoded to YCbCr; use mode='RGB' \(converted\) or "
                  r"mode='UNCHANGED' \(the 4 CMYK channels\)$")
        with pytest.raises(fio.DecodeError, match=expect):
            fio.decode_jpeg(cmyk, "YCbCr")
        with pytest.raises(fio.DecodeError, match=expect):
            fio.decode_jpeg_roi(cmyk, 0, 0, 4, 4, fio.ImageReadMode.YCbCr)
        # An RGB-coded (Adobe transform 0) file has no YCbCr to hand out either.
        rgb_coded = cjpeg(np.full((16, 16, 3), 90, np.uint8), "-rgb")
        assert fio.jpeg_info(rgb_coded).color_space == "RGB"
        with pytest.raises(fio.DecodeError, match=r"^an RGB JPEG cannot be decoded to YCbCr; use mode='RGB'$"):
            fio.decode_jpeg(rgb_coded, "YCbCr")
        assert fio.decode_jpeg(rgb_coded, "RGB").shape == (3, 16, 16)

    def test_unknown_color_space(self):
        """Two components (no colour space libjpeg knows): the message says what is supported."""
        data = bytearray(make_jpeg("gray", 16, 16))
        sof = data.index(b"\xff\xc0")
        # Frame with two components, both using table 0; a scan that codes only the first.
        two = bytes(data[sof + 4:sof + 9]) + bytes([2, 1, 0x11, 0, 2, 0x11, 0])
        data[sof:sof + 2 + 11] = b"\xff\xc0" + (len(two) + 2).to_bytes(2, "big") + two
        assert fio.jpeg_info(bytes(data)).color_space == "UNKNOWN"
        with pytest.raises(fio.DecodeError, match=r"^the JPEG has 2 components in a colour space libjpeg does not "
                                                  r"know, so it cannot be decoded \(mode='RGB'\); fastprep decodes "
                                                  r"grayscale, YCbCr, RGB, CMYK and YCCK JPEGs$"):
            fio.decode_jpeg(bytes(data), "RGB")


_QUIET_SCRIPT = r"""
import fastprep.io as fio, warnings, sys
sys.path.insert(0, "tests")
import test_decode_errors as t
warnings.simplefilter("ignore")
for data in list(t.UNDECODABLE.values()) + [t.warning_flip(t.PHOTO), t.with_frame_size(t.PHOTO, 65500, 65500)]:
    for strict in (False, True):
        try:
            fio.decode_jpeg(data, strict=strict)
            fio.decode_jpeg_roi(data, 0, 0, 4, 4, strict=strict)
        except fio.DecodeError:
            pass
print("done")
"""


def test_no_stderr_output():
    """libjpeg's default handlers print warnings to stderr; ours must not print anything."""
    proc = subprocess.run([sys.executable, "-c", _QUIET_SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    assert proc.stderr == ""


# The leak check over 20,000 failing decodes lives in test_leak.py (with a test that its
# detector catches a known leak).
