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
from conftest import ENCODINGS, make_jpeg

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
        with pytest.raises(fio.DecodeError, match="max_pixels=1000"):
            fio.decode_jpeg(PHOTO, max_pixels=1000)
        assert fio.decode_jpeg(PHOTO, max_pixels=120 * 160).shape == (3, 120, 160)
        assert fio.decode_jpeg(PHOTO, max_pixels=0).shape == (3, 120, 160)
        with pytest.raises(ValueError, match="max_pixels must be >= 0"):
            fio.decode_jpeg(PHOTO, max_pixels=-1)


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
        with pytest.raises(fio.DecodeError, match="mode 4"):
            fio.decode_jpeg(make_jpeg("cmyk", 16, 16), "YCbCr")


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
