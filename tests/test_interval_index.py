"""The interval index of packed files: transcode_jpeg records where every restart interval
starts (APP9 "fastprep.rst" segments), decode_jpeg_roi reads a window's intervals from it
without scanning the file, and an index that is wrong, stale, truncated, hostile or from
another file never changes pixels: it is rejected and the file scanned."""

import io
import struct
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import fastprep.io as fio
from fastprep import _C
from fastprep.bench.synthetic import photo_like
from conftest import make_jpeg, pil_jpeg

SIGNATURE = b"fastprep.rst\x00"
CHUNK = 65533 - len(SIGNATURE) - 3


# --------------------------------------------------------------- an independent reader


def segments(data: bytes):
    """``[(marker, offset of the 0xFF, payload bytes)]`` of the segments before SOS."""
    out, i = [], 2
    while True:
        assert data[i] == 0xFF
        marker = data[i + 1]
        length = int.from_bytes(data[i + 2:i + 4], "big")
        out.append((marker, i, data[i + 4:i + 2 + length]))
        if marker == 0xDA:
            return out
        i += 2 + length


def index_segments(data: bytes):
    return [(at, payload) for marker, at, payload in segments(data)
            if marker == 0xE9 and payload.startswith(SIGNATURE)]


def strip_index(data: bytes) -> bytes:
    for at, payload in reversed(index_segments(data)):
        data = data[:at] + data[at + 4 + len(payload):]
    return data


def read_index(data: bytes) -> dict:
    """The documented format (docs/pack.md), decoded by the test itself."""
    chunks = index_segments(data)
    assert chunks
    blob = b""
    for k, (_, payload) in enumerate(chunks):
        version, number, count = payload[len(SIGNATURE):len(SIGNATURE) + 3]
        assert (version, number, count) == (1, k, len(chunks))
        blob += payload[len(SIGNATURE) + 3:]
    n_intervals, groups, per_group, width, eoi = struct.unpack(">IIIBI", blob[:17])
    bases = list(struct.unpack(f">{groups}I", blob[17:17 + 4 * groups]))
    deltas = blob[17 + 4 * groups:]
    assert len(deltas) == groups * (per_group - 1) * width
    starts = []
    for g in range(groups):
        start = bases[g]
        starts.append(start)
        for k in range(per_group - 1):
            at = (g * (per_group - 1) + k) * width
            start += int.from_bytes(deltas[at:at + width], "big")
            starts.append(start)
    assert len(starts) == n_intervals
    return {"starts": starts, "eoi": eoi, "per_group": per_group, "width": width}


def write_index(data: bytes, starts, eoi, per_group, width=None) -> bytes:
    """``data`` with its index replaced by one listing ``starts`` (any values: hostile
    indexes too), in the documented format."""
    groups = len(starts) // per_group
    deltas = [starts[g * per_group + k + 1] - starts[g * per_group + k]
              for g in range(groups) for k in range(per_group - 1)]
    if width is None:
        width = 0 if per_group == 1 else max(1, (max(max(deltas), 1).bit_length() + 7) // 8)
    blob = struct.pack(">IIIBI", len(starts), groups, per_group, width, eoi)
    blob += b"".join(struct.pack(">I", starts[g * per_group] & 0xFFFFFFFF) for g in range(groups))
    blob += b"".join((d % (1 << (8 * width))).to_bytes(width, "big") for d in deltas)
    pieces = [blob[k:k + CHUNK] for k in range(0, len(blob), CHUNK)]
    seg = b"".join(b"\xff\xe9" + (2 + len(SIGNATURE) + 3 + len(p)).to_bytes(2, "big") + SIGNATURE
                   + bytes([1, k, len(pieces)]) + p for k, p in enumerate(pieces))
    plain = strip_index(data)
    sos = [at for marker, at, _ in segments(plain) if marker == 0xDA][0]
    return plain[:sos] + seg + plain[sos:]


def scan_offsets(data: bytes):
    """Interval starts found the slow way: every RSTn marker in the entropy-coded data."""
    sos = [(at, p) for marker, at, p in segments(data) if marker == 0xDA][0]
    scan = sos[0] + 4 + len(sos[1])
    starts, i = [0], scan
    while True:
        i = data.index(b"\xff", i)
        code = data[i + 1]
        if code == 0:
            i += 2
        elif 0xD0 <= code <= 0xD7:
            starts.append(i + 2 - scan)
            i += 2
        elif code == 0xD9:
            return scan, starts, i - scan
        else:
            i += 1


def pil_pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.array(img)


def index_stats():
    return _C.interval_index_stats()


def roi_matches(data, full, windows, mode="RGB", scale=None):
    kwargs = {} if scale is None else {"scale": scale}
    for t, l, h, w in windows:
        got = fio.decode_jpeg_roi(data, t, l, h, w, mode, **kwargs)
        if not torch.equal(got, full[:, t:t + h, l:l + w]):
            return (t, l, h, w)
    return None


def random_windows(h, w, count, seed, max_size=64):
    g = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        hh, ww = int(g.integers(1, min(max_size, h) + 1)), int(g.integers(1, min(max_size, w) + 1))
        out.append((int(g.integers(0, h - hh + 1)), int(g.integers(0, w - ww + 1)), hh, ww))
    return out


# ------------------------------------------------------------------------------ tests


class TestWritten:
    @pytest.mark.parametrize("encoding, interval", [
        ("420", "auto"), ("444", "auto"), ("422", 1), ("gray", 2), ("cmyk", "auto"), ("420-progressive", "auto"),
        ("420", 29), ("420", 58), ("444", 2)])
    def test_offsets_pixels_and_other_readers(self, encoding, interval):
        src = make_jpeg(encoding, 100, 457, seed=1)  # 29 16-px MCUs per row (prime), 58 8-px ones
        packed = fio.transcode_jpeg(src, restart_interval=interval)
        plain = fio.transcode_jpeg(src, restart_interval=interval, interval_index=False)
        assert not index_segments(plain)
        assert strip_index(packed) == plain  # the index is the only difference
        index = read_index(packed)
        scan, starts, eoi = scan_offsets(packed)
        assert index["starts"] == starts and index["eoi"] == eoi
        for mode in ("UNCHANGED", "RGB"):
            assert torch.equal(fio.decode_jpeg(packed, mode), fio.decode_jpeg(src, mode))
        assert np.array_equal(pil_pixels(packed), pil_pixels(src))

    def test_not_written_where_the_fast_path_does_not_apply(self):
        src = make_jpeg("420", 100, 457, seed=1)
        for interval in (0, 5):  # no markers; 5 MCUs do not tile a 29-MCU row
            out = fio.transcode_jpeg(src, restart_interval=interval)
            assert not index_segments(out) and not fio.jpeg_info(out).restart_roi

    def test_kept_without_metadata_and_never_copied(self):
        src = make_jpeg("420", 64, 200, seed=2)
        packed = fio.transcode_jpeg(src, keep_metadata=False)
        assert len(index_segments(packed)) == 1
        again = fio.transcode_jpeg(packed, restart_interval=1)  # the source's index is not copied
        assert len(index_segments(again)) == 1 and read_index(again)["starts"] == scan_offsets(again)[1]
        assert torch.equal(fio.decode_jpeg(again), fio.decode_jpeg(src))

    def test_several_segments(self):
        gray = np.ascontiguousarray(photo_like(2048, 2048, 4)[..., 0])
        src = pil_jpeg(gray, quality=75)
        packed = fio.transcode_jpeg(src, restart_interval=1)  # 65536 one-block intervals
        chunks = index_segments(packed)
        assert len(chunks) >= 2 and all(len(p) <= 65533 for _, p in chunks)
        index = read_index(packed)
        assert index["starts"] == scan_offsets(packed)[1]
        full = fio.decode_jpeg(packed, "UNCHANGED")
        used0 = index_stats()[0]
        windows = random_windows(2048, 2048, 12, seed=5) + [(2020, 2000, 24, 48), (0, 0, 9, 9)]
        assert roi_matches(packed, full, windows, "UNCHANGED") is None
        assert index_stats()[0] == used0 + len(windows)
        # a marker in the last segment's part of the index, damaged: windows below it fall
        # back (the walk crossed every segment boundary to get there), windows above keep it
        bad = _damage_marker(packed, len(index["starts"]) - 300, "renumbered")
        bad_full, warned = _decode(fio.decode_jpeg, bad, "UNCHANGED")
        assert warned == 1
        for t, l, h, w in [(2040, 0, 8, 64), (0, 100, 64, 64)]:
            used0 = index_stats()[0]
            roi, roi_warned = _decode(fio.decode_jpeg_roi, bad, t, l, h, w, "UNCHANGED")
            assert torch.equal(roi, bad_full[:, t:t + h, l:l + w]) and roi_warned == (t > 1000)
            assert index_stats()[0] == used0 + (t < 1000)


class TestRoi:
    @pytest.mark.parametrize("encoding", ["420", "422", "444", "gray", "cmyk", "440", "411"])
    @pytest.mark.parametrize("interval", ["auto", 1, "row", "2rows"])
    def test_windows_exact_via_index(self, encoding, interval):
        h, w = 83, 190
        src = make_jpeg(encoding, h, w, seed=7)
        info = fio.jpeg_info(src)
        hmax = max(hh for hh, _ in info.sampling_factors)
        mcus_per_row = -(-w // (8 if info.num_components == 1 else 8 * hmax))
        restart = {"row": mcus_per_row, "2rows": 2 * mcus_per_row}.get(interval, interval)
        packed = fio.transcode_jpeg(src, restart_interval=restart)
        assert index_segments(packed)
        mode = "UNCHANGED" if encoding in ("gray", "cmyk") else "RGB"
        used0, rejected0 = index_stats()
        taken0, fallbacks0 = _C.restart_stats()
        windows = random_windows(h, w, 40, seed=3) + [(0, 0, h, w), (h - 1, w - 1, 1, 1), (0, w - 9, 5, 9)]
        for scale in (None, (3, 8), (1, 8)):
            full = fio.decode_jpeg(packed, mode) if scale is None else fio.decode_jpeg(packed, mode, scale=scale)
            sh, sw = full.shape[1:]
            assert roi_matches(packed, full, random_windows(sh, sw, 40, seed=4) if scale else windows, mode,
                               scale) is None, scale
        used, rejected = index_stats()
        taken, fallbacks = _C.restart_stats()
        assert rejected == rejected0 and fallbacks == fallbacks0
        assert used - used0 == taken - taken0 > 0  # every fast-path decode took the index

    def test_index_absent_scans_as_before(self):
        src = make_jpeg("420", 83, 190, seed=8)
        plain = fio.transcode_jpeg(src, interval_index=False)
        full = fio.decode_jpeg(plain)
        used0 = index_stats()[0]
        taken0 = _C.restart_stats()[0]
        assert roi_matches(plain, full, random_windows(83, 190, 20, seed=1)) is None
        assert index_stats()[0] == used0 and _C.restart_stats()[0] > taken0


@pytest.fixture(scope="module")
def packed_pair():
    """Two packed files of the same size and layout (one index could pass for the other);
    the interval is explicit since ``auto`` also depends on each file's byte size."""
    a = fio.transcode_jpeg(make_jpeg("420", 120, 256, seed=21), restart_interval=4)
    b = fio.transcode_jpeg(make_jpeg("420", 120, 256, seed=22), restart_interval=4)
    return a, b


def _rejected_but_exact(data, reference_full, windows, all_rejected=True):
    """Every window equals the full decode of the reference pixels; the index was rejected
    (the file scanned) for each window -- or, with ``all_rejected=False``, for at least one,
    the others having found intact entries for their intervals."""
    used0, rejected0 = index_stats()
    assert roi_matches(data, reference_full, windows) is None
    used, rejected = index_stats()
    assert (used - used0) + (rejected - rejected0) == len(windows)
    assert rejected - rejected0 == len(windows) if all_rejected else rejected > rejected0


class TestBadIndex:
    WINDOWS = [(40, 100, 50, 60), (0, 0, 20, 20), (100, 200, 20, 56), (60, 0, 30, 256), (9, 130, 1, 1)]

    def _index(self, data):
        return read_index(data)

    def _damaged(self, data, change):
        index = read_index(data)
        starts = list(index["starts"])
        eoi = change(starts, index)
        return write_index(data, starts, index["eoi"] if eoi is None else eoi, index["per_group"])

    def test_rewritten_index_is_accepted(self, packed_pair):
        a, _ = packed_pair
        index = read_index(a)
        same = write_index(a, index["starts"], index["eoi"], index["per_group"])
        assert same == a
        used0 = index_stats()[0]
        assert roi_matches(same, fio.decode_jpeg(a), self.WINDOWS) is None
        assert index_stats()[0] == used0 + len(self.WINDOWS)

    @pytest.mark.parametrize("damage", [
        "past-the-end", "eoi-past-the-end", "eoi-elsewhere", "backwards", "zero-length", "non-marker",
        "wrong-marker-number", "shifted-by-one-interval", "merged-intervals", "first-not-at-scan-start",
        "everything-zero"])
    def test_hostile_offsets(self, packed_pair, damage):
        a, _ = packed_pair
        full = fio.decode_jpeg(a)
        n = len(read_index(a)["starts"])

        def change(starts, index):
            middle = [i for i in range(1, n - 1) if i % index["per_group"]]
            if damage == "past-the-end":
                for i in range(n // 3, n):
                    starts[i] += len(a) * 4
            elif damage == "eoi-past-the-end":
                return len(a) * 2
            elif damage == "eoi-elsewhere":
                return index["eoi"] - 7
            elif damage == "backwards":
                for i in middle:
                    starts[i] = starts[i - 1] - 5 if i % 2 else starts[i]
            elif damage == "zero-length":
                for i in middle:
                    starts[i] = starts[i - 1]
            elif damage == "non-marker":
                for i in range(1, n):
                    starts[i] += 1
            elif damage == "wrong-marker-number":  # every start right after a real RST, numbered wrongly
                starts[:] = [starts[0]] + starts[2:] + [starts[-1]]
            elif damage == "shifted-by-one-interval":
                starts[:] = [0] + starts[:-1]
            elif damage == "merged-intervals":  # an interval claims the next one's bytes too
                for i in range(1, n - 2, 3):
                    starts[i + 1] = starts[i + 2]
            elif damage == "first-not-at-scan-start":
                starts[0] = 2
            elif damage == "everything-zero":
                starts[:] = [0] * n
                return 0
            return None

        partial = damage in ("past-the-end", "merged-intervals", "first-not-at-scan-start")
        _rejected_but_exact(self._damaged(a, change), full, self.WINDOWS, all_rejected=not partial)

    def test_index_from_another_file(self, packed_pair):
        a, b = packed_pair
        index = read_index(b)
        assert len(index["starts"]) == len(read_index(a)["starts"])  # same layout: only the bytes can tell
        foreign = write_index(a, index["starts"], index["eoi"], index["per_group"])
        _rejected_but_exact(foreign, fio.decode_jpeg(a), self.WINDOWS)

    def test_stale_index_after_a_retranscode(self, packed_pair):
        a, _ = packed_pair
        other = fio.transcode_jpeg(a, restart_interval=2, interval_index=False)  # new markers, old index
        index = read_index(a)
        stale = write_index(other, index["starts"], index["eoi"], index["per_group"])
        full = fio.decode_jpeg(a)
        used0, rejected0 = index_stats()
        assert roi_matches(stale, full, self.WINDOWS) is None
        assert index_stats() == (used0, rejected0 + len(self.WINDOWS))  # wrong count of intervals per row

    @pytest.mark.parametrize("damage", ["version", "chunk-number", "chunk-count", "short", "long", "width",
                                        "count", "per-group"])
    def test_malformed_segments(self, packed_pair, damage):
        a, _ = packed_pair
        (at, payload), = index_segments(a)
        head, body = payload[:len(SIGNATURE)], bytearray(payload[len(SIGNATURE):])
        if damage == "version":
            body[0] = 2
        elif damage == "chunk-number":
            body[1] = 1
        elif damage == "chunk-count":
            body[2] = 2
        elif damage == "short":
            body = body[:-1]
        elif damage == "long":
            body += b"\x00"
        elif damage == "width":
            body[3 + 12] = 3
        elif damage == "count":
            body[3 + 3] += 1
        elif damage == "per-group":
            body[3 + 11] += 1
        seg = b"\xff\xe9" + (2 + len(head) + len(body)).to_bytes(2, "big") + head + bytes(body)
        bad = a[:at] + seg + a[at + 4 + len(payload):]
        assert torch.equal(fio.decode_jpeg(bad), fio.decode_jpeg(a))  # other readers: just an APP9 segment
        _rejected_but_exact(bad, fio.decode_jpeg(a), self.WINDOWS)

    def test_truncated_file_reported_as_without_index(self, packed_pair):
        """A truncated packed file: the index is rejected (its EOI is gone) and the decode
        behaves as on the same file without an index -- windows above the cut decode,
        windows that need the lost data raise."""
        a, _ = packed_pair
        full = fio.decode_jpeg(a)
        for data in (a[:len(a) - 300], strip_index(a)[:len(strip_index(a)) - 300]):
            rejected0 = index_stats()[1]
            assert torch.equal(fio.decode_jpeg_roi(data, 0, 0, 16, 16), full[:, :16, :16])
            with pytest.raises(fio.DecodeError, match="truncated"):
                fio.decode_jpeg_roi(data, 104, 200, 16, 56)
            assert index_stats()[1] - rejected0 == (2 if index_segments(data) else 0)


# ------------------------------------------- damage outside the window (issue 24, item A)


def _packed_photo(encoding):
    """A packed 96x256 Pillow JPEG with 2-MCU intervals: 8 per MCU row in 4:2:0 (32 px, 6
    rows), 16 per row in 4:4:4 (16 px, 12 rows)."""
    return fio.transcode_jpeg(make_jpeg(encoding, 96, 256, seed=3), restart_interval=2)


def _layout(encoding):
    mcu = 16 if encoding == "420" else 8
    return mcu, 256 // (2 * mcu)  # MCU size, intervals per row


def _damage_marker(data, k, how):
    """``data`` with the RST marker that ends interval ``k`` damaged."""
    scan, starts, _ = scan_offsets(data)
    at = scan + starts[k + 1] - 2
    assert data[at] == 0xFF and data[at + 1] == 0xD0 + k % 8
    b = bytearray(data)
    if how == "renumbered":  # two ahead: libjpeg's resync decodes the next intervals elsewhere
        b[at + 1] = 0xD0 + (k + 2) % 8
    elif how == "renumbered-far":  # four ahead: libjpeg discards it (a warning, same pixels)
        b[at + 1] = 0xD0 + (k + 4) % 8
    elif how == "other-marker":  # a bit flip: RSTn -> SOFn
        b[at + 1] ^= 0x10
    elif how == "not-a-marker":  # a bit flip of the 0xFF
        b[at] ^= 0x01
    return bytes(b)


def _decode(fn, *args, **kwargs):
    """``(result or the DecodeError, DecodeWarnings issued)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(*args, **kwargs)
        except fio.DecodeError as e:
            out = e
    assert all(issubclass(w.category, fio.DecodeWarning) for w in caught), caught
    return out, len(caught)


def _new_marker(data, intervals, stuffed):
    """``data`` with a marker created inside the entropy-coded data of the first of
    ``intervals`` that has room for one (its markers intact): a stuffed ``0xFF 0x00``
    whose ``0x00`` became an RST code, or a byte turned into ``0xFF`` before a non-zero
    byte."""
    scan, starts, _ = scan_offsets(data)
    b = bytearray(data)
    for interval in intervals:
        lo, hi = scan + starts[interval], scan + starts[interval + 1] - 2  # the interval's bytes
        for p in range(lo + 1, hi - 1):
            if stuffed and b[p] == 0xFF and b[p + 1] == 0x00:
                b[p + 1] = 0xD0 + (interval + 3) % 8
                return bytes(b)
            if not stuffed and 0xFF not in (b[p - 1], b[p], b[p + 1]) and b[p + 1] != 0x00:
                b[p] = 0xFF
                return bytes(b)
    raise AssertionError(f"no place for a new marker in intervals {intervals}")


@pytest.mark.parametrize("encoding", ["420", "444"])
class TestDamageOutsideTheWindow:
    """A damaged RST marker before the window makes libjpeg resynchronize, which can put
    other pixels in the window in a full decode: the indexed ROI must not keep the clean
    pixels silently, it must give the full decode's pixels and its warning (strict=True:
    raise). Damage after the window cannot change it: the index path stays (no warning)."""

    @pytest.mark.parametrize("how", ["renumbered", "renumbered-far", "other-marker", "not-a-marker"])
    def test_marker_before_the_window(self, encoding, how):
        data = _packed_photo(encoding)
        mcu, per_row = _layout(encoding)
        k = per_row + 3  # MCU row 1, the 4th interval's end marker
        bad = _damage_marker(data, k, how)
        clean = fio.decode_jpeg(data)
        full, warned = _decode(fio.decode_jpeg, bad)
        assert warned == 1
        x = (k + 2 - per_row) * 2 * mcu  # interval k + 2: decoded elsewhere after a resync
        windows = [(mcu + 2, x + 2, mcu - 4, 2 * mcu - 4),  # the same MCU row, after the marker
                   (2 * mcu + 4, 0, mcu // 2, 20),  # the next row, left of the marker's column
                   (96 - mcu, 100, mcu, 120),  # the last row
                   (40, 0, 30, 256)]  # full width, rows below
        if how == "renumbered":
            t, l, h, w = windows[0]
            assert not torch.equal(full[:, t:t + h, l:l + w], clean[:, t:t + h, l:l + w])  # the pixels move
        for t, l, h, w in windows:
            rejected0 = index_stats()[1]
            roi, roi_warned = _decode(fio.decode_jpeg_roi, bad, t, l, h, w)
            assert torch.equal(roi, full[:, t:t + h, l:l + w]), (how, (t, l, h, w))
            assert roi_warned == 1, (how, (t, l, h, w))  # the sequential path's DecodeWarning
            assert index_stats()[1] == rejected0 + 1
            err, _ = _decode(fio.decode_jpeg_roi, bad, t, l, h, w, strict=True)
            assert isinstance(err, fio.DecodeError) and "strict" in str(err)

    @pytest.mark.parametrize("how", ["renumbered", "other-marker", "not-a-marker"])
    def test_marker_after_the_window(self, encoding, how):
        data = _packed_photo(encoding)
        mcu, per_row = _layout(encoding)
        n = len(read_index(data)["starts"])
        bad = _damage_marker(data, n - per_row + 2, how)  # in the last MCU row
        full, warned = _decode(fio.decode_jpeg, bad)
        assert warned == 1
        for t, l, h, w in [(0, 0, mcu, 40), (mcu + 3, 60, 2 * mcu, 150), (5, 200, 3 * mcu, 56)]:
            used0 = index_stats()[0]
            for strict in (False, True):
                roi, roi_warned = _decode(fio.decode_jpeg_roi, bad, t, l, h, w, strict=strict)
                assert torch.equal(roi, full[:, t:t + h, l:l + w]) and roi_warned == 0
            assert index_stats()[0] == used0 + 1  # strict does not take the index alone

    @pytest.mark.parametrize("stuffed", [True, False])
    def test_new_marker_before_the_window(self, encoding, stuffed):
        """No check of the index's offsets sees a marker created in entropy-coded data
        outside the window (docs/pack.md): without strict the window is the decode of its
        own intervals, the pixels the file held before the damage; strict=True scans the
        whole file and raises, as the full decode does."""
        data = _packed_photo(encoding)
        mcu, per_row = _layout(encoding)
        bad = _new_marker(data, range(per_row, 2 * per_row), stuffed)  # MCU row 1
        _, warned = _decode(fio.decode_jpeg, bad)
        assert warned >= 1
        full_strict, _ = _decode(fio.decode_jpeg, bad, strict=True)
        assert isinstance(full_strict, fio.DecodeError)
        clean = fio.decode_jpeg(data)
        for t, l, h, w in [(96 - mcu, 100, mcu, 120), (3 * mcu, 0, 20, 256)]:
            used0 = index_stats()[0]
            roi, roi_warned = _decode(fio.decode_jpeg_roi, bad, t, l, h, w)
            assert torch.equal(roi, clean[:, t:t + h, l:l + w]) and roi_warned == 0
            assert index_stats()[0] == used0 + 1
            err, _ = _decode(fio.decode_jpeg_roi, bad, t, l, h, w, strict=True)
            assert isinstance(err, fio.DecodeError) and "strict" in str(err)

    def test_new_marker_after_the_window(self, encoding):
        data = _packed_photo(encoding)
        mcu, per_row = _layout(encoding)
        n = len(read_index(data)["starts"])
        bad = _new_marker(data, range(n - per_row, n - 1), stuffed=False)  # the last row
        clean = fio.decode_jpeg(data)
        for strict in (False, True):
            roi, roi_warned = _decode(fio.decode_jpeg_roi, bad, 2, 30, 2 * mcu, 100, strict=strict)
            assert torch.equal(roi, clean[:, 2:2 + 2 * mcu, 30:130]) and roi_warned == 0
