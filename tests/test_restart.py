"""Restart-interval ROI decode: decode_jpeg_roi on files whose restart intervals tile the
MCU rows must equal the full decode sliced, bit for bit, and files whose markers lie must
fall back to the sequential path (same pixels, warnings and errors as without the fast
path)."""

import warnings

import numpy as np
import pytest
import torch

import fastprep.io as fio
from fastprep import _C
from fastprep.bench.synthetic import photo_like
from conftest import cjpeg, cmyk_jpeg, jpegtran, pil_jpeg

H, W = 61, 190  # 190 px = 24 8-px MCUs, 12 16-px MCUs, 6 32-px MCUs: divisible by 1, 2, 3, 4, 6


def _pil(subsampling, **restart):
    return lambda a: pil_jpeg(a, quality=90, subsampling=subsampling, **restart)


def _cmyk(**restart):
    return lambda a: cmyk_jpeg(a, **restart)


# name -> (builder(rgb) -> bytes, fast path expected)
RESTART_ENCODINGS = {
    "444-1mcu": (_pil("4:4:4", restart_marker_blocks=1), True),
    "444-3mcu": (_pil("4:4:4", restart_marker_blocks=3), True),
    "444-1row": (_pil("4:4:4", restart_marker_rows=1), True),
    "422-2mcu": (_pil("4:2:2", restart_marker_blocks=2), True),
    "422-4mcu": (_pil("4:2:2", restart_marker_blocks=4), True),
    "422-2rows": (_pil("4:2:2", restart_marker_rows=2), True),
    "420-1mcu": (_pil("4:2:0", restart_marker_blocks=1), True),
    "420-2mcu": (_pil("4:2:0", restart_marker_blocks=2), True),
    "420-3mcu": (_pil("4:2:0", restart_marker_blocks=3), True),
    "420-4mcu": (_pil("4:2:0", restart_marker_blocks=4), True),
    "420-1row": (_pil("4:2:0", restart_marker_rows=1), True),
    "420-2rows": (_pil("4:2:0", restart_marker_rows=2), True),
    "420-5mcu-notiling": (_pil("4:2:0", restart_marker_blocks=5), False),
    "444-7mcu-notiling": (_pil("4:4:4", restart_marker_blocks=7), False),
    "440-3mcu": (lambda a: cjpeg(a, "-quality", "90", "-sample", "1x2,1x1,1x1", "-restart", "3B"), True),
    "440-1row": (lambda a: cjpeg(a, "-quality", "90", "-sample", "1x2,1x1,1x1", "-restart", "1"), True),
    "411-2mcu": (lambda a: cjpeg(a, "-quality", "90", "-sample", "4x1,1x1,1x1", "-restart", "2B"), True),
    "420-arith-2mcu": (lambda a: cjpeg(a, "-quality", "90", "-arithmetic", "-sample", "2x2,1x1,1x1",
                                       "-restart", "2B"), True),
    "444-arith-1row": (lambda a: cjpeg(a, "-quality", "90", "-arithmetic", "-sample", "1x1,1x1,1x1",
                                       "-restart", "1"), True),
    "gray-arith-4mcu": (lambda a: cjpeg(a, "-quality", "90", "-arithmetic", "-grayscale", "-restart", "4B"), True),
    "gray-1mcu": (lambda a: pil_jpeg(np.ascontiguousarray(a[..., 1]), quality=90, restart_marker_blocks=1), True),
    "gray-2rows": (lambda a: pil_jpeg(np.ascontiguousarray(a[..., 1]), quality=90, restart_marker_rows=2), True),
    "gray-5mcu-notiling": (lambda a: pil_jpeg(np.ascontiguousarray(a[..., 1]), quality=90,
                                              restart_marker_blocks=5), False),
    "cmyk-2mcu": (_cmyk(restart_marker_blocks=2), True),
    "cmyk-1row": (_cmyk(restart_marker_rows=1), True),
    "jpegtran-420-4mcu": (lambda a: jpegtran(pil_jpeg(a, quality=90), "-restart", "4B"), True),
    "jpegtran-progressive-420-4mcu": (
        lambda a: jpegtran(pil_jpeg(a, quality=90), "-progressive", "-restart", "4B"), False),
}

_cache = {}


def restart_jpeg(name, h=H, w=W, seed=3) -> bytes:
    key = (name, h, w, seed)
    if key not in _cache:
        _cache[key] = RESTART_ENCODINGS[name][0](photo_like(h, w, seed))
    return _cache[key]


def _windows(h, w):
    """Top/left offsets around MCU, interval and image edges (a subsample of the full
    croptest); several sizes, including windows ending on the 8/16/32 grid."""
    edges = {0, 1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49, 63, 64, 65, 95, 96, 97}
    tops = sorted(({v for v in edges if v < h} | {h - 17, h - 16, h - 9, h - 8, h - 2, h - 1}) & set(range(h)))
    lefts = sorted(({v for v in edges} | {w // 2, w - 33, w - 17, w - 16, w - 9, w - 8, w - 2, w - 1}) & set(range(w)))

    def to_grid(start, size, grid):
        return min((start // grid + 1) * grid - start, size - start)

    for top in tops:
        for left in lefts:
            shapes = {(1, 1), (h - top, w - left), (min(9, h - top), min(21, w - left)), (1, w - left)}
            shapes |= {(to_grid(top, h, g), to_grid(left, w, g)) for g in (16, 32)}
            for hh, ww in sorted(shapes):
                yield top, left, hh, ww


def _stats():
    return _C.restart_stats()


class TestRestartInfo:
    def test_fields(self):
        info = fio.jpeg_info(restart_jpeg("420-3mcu"))
        assert info.restart_interval == 3 and info.restart_roi
        info = fio.jpeg_info(restart_jpeg("420-1row"))
        assert info.restart_interval == 12 and info.restart_roi  # 190 px / 16 px MCUs = 12 MCUs per row
        info = fio.jpeg_info(restart_jpeg("420-5mcu-notiling"))
        assert info.restart_interval == 5 and not info.restart_roi
        info = fio.jpeg_info(restart_jpeg("jpegtran-progressive-420-4mcu"))
        assert info.restart_interval == 4 and not info.restart_roi
        info = fio.jpeg_info(pil_jpeg(photo_like(30, 40, 0), quality=90))
        assert info.restart_interval == 0 and not info.restart_roi


class TestRestartRoiExact:
    """Croptest-style sweep on files with restart intervals."""

    @pytest.mark.parametrize("name", sorted(RESTART_ENCODINGS))
    def test_sweep(self, name):
        data = fio._as_tensor(restart_jpeg(name))
        fast_expected = RESTART_ENCODINGS[name][1]
        assert fio.jpeg_info(data).restart_roi == fast_expected
        modes = ["RGB", "UNCHANGED"] if name.startswith(("gray", "cmyk")) else ["RGB", "YCbCr"]
        taken0, fallbacks0 = _stats()
        for mode in modes:
            full = fio.decode_jpeg(data, mode)
            bad = [(t, l, hh, ww) for t, l, hh, ww in _windows(H, W)
                   if not torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww, mode), full[:, t:t + hh, l:l + ww])]
            assert not bad, f"{name}/{mode}: {len(bad)} windows differ, e.g. {bad[:5]}"
        taken, fallbacks = _stats()
        assert fallbacks == fallbacks0  # valid files never fall back
        if fast_expected:
            assert taken > taken0
        else:
            assert taken == taken0

    @pytest.mark.parametrize("name", sorted(n for n, (_, fast) in RESTART_ENCODINGS.items() if fast))
    def test_sweep_scaled(self, name):
        """At every DCT scale below 8/8 the window (in scaled pixels) is decoded from the
        intervals it needs and equals the full decode at that scale, sliced. The image is
        taller and wider than the unscaled sweep's so that scaled windows still skip
        intervals (at 1/8 a 16-px MCU is 2 pixels). Every third window of the sweep, to
        keep the 23 encodings x 7 scales affordable."""
        h, w = 122, 380
        data = fio._as_tensor(restart_jpeg(name, h, w))
        mode = "UNCHANGED" if name.startswith("cmyk") else "RGB"
        taken0, fallbacks0 = _stats()
        for num in range(1, 8):
            full = fio.decode_jpeg(data, mode, scale=(num, 8))
            hs, ws = full.shape[1:]
            assert (hs, ws) == fio.scaled_size(h, w, (num, 8))
            taken_before = _stats()[0]
            bad = [(t, l, hh, ww) for t, l, hh, ww in list(_windows(hs, ws))[::3]
                   if not torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww, mode, scale=(num, 8)),
                                      full[:, t:t + hh, l:l + ww])]
            assert not bad, f"{name} at {num}/8: {len(bad)} windows differ, e.g. {bad[:5]}"
            assert _stats()[0] > taken_before, f"{name} at {num}/8 never took the restart path"
        assert _stats()[1] == fallbacks0

    @pytest.mark.parametrize("interval", [1, 2, 3, 4, 6, 12, 24])
    def test_large_image_random_windows(self, interval):
        """4:2:0, 301x377: 24 MCUs of 16 px per row, so every interval here tiles the rows."""
        h, w = 301, 377  # 377 px = 24 MCUs of 16 px (last one partial)
        data = pil_jpeg(photo_like(h, w, 5), quality=90, subsampling="4:2:0", restart_marker_blocks=interval)
        full = fio.decode_jpeg(data)
        g = torch.Generator().manual_seed(interval)
        taken0 = _stats()[0]
        for _ in range(60):
            hh, ww = (int(v) for v in torch.randint(1, 160, (2,), generator=g))
            t = int(torch.randint(0, h - hh + 1, (1,), generator=g))
            l = int(torch.randint(0, w - ww + 1, (1,), generator=g))
            assert torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww), full[:, t:t + hh, l:l + ww]), (t, l, hh, ww)
        assert _stats()[0] > taken0

    @pytest.mark.parametrize("interval", [1, 2, 3])
    def test_422_random_windows_every_scale(self, interval):
        """4:2:2 photo, 213x283 (18 MCUs of 16 px per row, the last one 11 px), intervals of
        1-3 MCUs as packed files have them: at every scale, random windows, half of them at
        most 4 x 4 pixels (a window whose context fits in one 16-px interval must still get
        the chroma upsampling of the full decode)."""
        h, w = 213, 283
        data = pil_jpeg(photo_like(h, w, 9), quality=90, subsampling="4:2:2", restart_marker_blocks=interval)
        assert fio.jpeg_info(data).restart_roi
        taken0 = _stats()[0]
        for num in range(1, 9):
            full = fio.decode_jpeg(data, scale=(num, 8))
            hs, ws = full.shape[1:]
            for t, l, hh, ww in sorted(_random_windows(hs, ws, [interval, num], 80)):
                assert torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww, scale=(num, 8)),
                                   full[:, t:t + hh, l:l + ww]), (num, t, l, hh, ww)
        assert _stats()[0] > taken0

    def test_tiny_images(self):
        for h, w in [(1, 1), (7, 13), (17, 9), (1, 40), (40, 1)]:
            data = pil_jpeg(photo_like(h, w, 7), quality=90, subsampling="4:2:0", restart_marker_blocks=1)
            full = fio.decode_jpeg(data)
            for t in range(h):
                for l in range(w):
                    for hh in {1, h - t}:
                        for ww in {1, w - l}:
                            assert torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww), full[:, t:t + hh, l:l + ww])

    def test_data_after_eoi(self):
        data = restart_jpeg("420-2mcu") + b"trailing garbage \xff\xd0\xff\xd9"
        full = fio.decode_jpeg(data)
        taken0 = _stats()[0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = fio.decode_jpeg_roi(data, 40, 100, 20, 50)
        assert torch.equal(out, full[:, 40:60, 100:150])
        assert _stats()[0] == taken0 + 1


# --- croptest: every sampling, interval, scale and small size ---------------------------------

# cjpeg -sample factors for each way libjpeg upsamples: 2x horizontally (fancy only with
# more than 2 chroma samples per row), 2x vertically, 2x both ways, integer replication
# (4x), chroma whose IDCT DCT scaling enlarges (4x2, 2x4), and mixed per-component factors.
CROP_SAMPLINGS = ["1x1", "2x1", "1x2", "2x2", "4x1", "1x4", "4x2", "2x4",
                  "2x2,1x1,2x1", "2x2,2x1,1x1", "2x2,1x2,1x1", "4x1,2x1,1x1", "gray"]
CROP_RESTARTS = ["1B", "2B", "3B", "4B", "1"]  # intervals of 1-4 MCUs, of one MCU row
# (height, width): partial last MCUs of every width, 1 and 2 px ones included at some scale
CROP_SIZES = [(9, 17), (17, 9), (6, 34), (48, 5), (5, 48)]
EXHAUSTIVE_MAX = 200  # scaled images with at most this many windows are swept whole


def _crop_jpeg(sampling, restart, h, w):
    rgb = np.random.default_rng([h, w]).integers(0, 256, (h, w, 3), dtype=np.uint8)
    args = ["-grayscale"] if sampling == "gray" else ["-sample", sampling]
    return cjpeg(rgb, "-quality", "90", "-restart", restart, *args)


def _tiled_size(sampling, restart):
    """(height, width) of an image whose intervals tile it into at least two across (or,
    for row intervals, four down) and two MCU rows or more, with partial last MCUs."""
    factors = [(1, 1)] if sampling == "gray" else [tuple(map(int, f.split("x"))) for f in sampling.split(",")]
    mcu_w, mcu_h = 8 * max(f[0] for f in factors), 8 * max(f[1] for f in factors)
    if restart.endswith("B"):
        return 2 * mcu_h + 3, (2 * int(restart[:-1]) - 1) * mcu_w + 3
    return 3 * mcu_h + 3, 2 * mcu_w + 3


def _random_windows(hs, ws, seed, count):
    """`count` windows, half of them at most 4 x 4 pixels."""
    rng = np.random.default_rng(seed)
    wins = set()
    for i in range(count):
        hh = int(rng.integers(1, min(hs, 4) + 1 if i % 2 else hs + 1))
        ww = int(rng.integers(1, min(ws, 4) + 1 if i % 2 else ws + 1))
        wins.add((int(rng.integers(0, hs - hh + 1)), int(rng.integers(0, ws - ww + 1)), hh, ww))
    return wins


def _croptest_windows(hs, ws, seed):
    """Every window of a small (scaled) image. Otherwise every left offset with width 1 and
    with the width up to the right edge, in the last row; every top offset with height 1
    and with the height down to the bottom, in the last column and across the full width;
    and 10 random windows."""
    def every(n):
        return [(a, k) for a in range(n) for k in range(1, n - a + 1)]

    if len(every(hs)) * len(every(ws)) <= EXHAUSTIVE_MAX:
        return [(t, l, hh, ww) for t, hh in every(hs) for l, ww in every(ws)]
    wins = {(hs - 1, l, 1, ww) for l in range(ws) for ww in {1, ws - l}}
    wins |= {(t, l, hh, ww) for t in range(hs) for hh in {1, hs - t} for l, ww in ((ws - 1, 1), (0, ws))}
    return sorted(wins | _random_windows(hs, ws, seed, 10))


class TestRestartCroptest:
    """Exactness of decode_jpeg_roi windows against the full decode at the same scale,
    sliced, on small cjpeg files of every sampling, restart interval and scale: spliced
    frames are then a few MCUs wide or tall, where their edges, partial MCUs and libjpeg's
    choice of upsampling method (which depends on the frame's width) matter. The
    sequential path is checked on the same windows where the restart path does not apply."""

    @pytest.mark.parametrize("restart", CROP_RESTARTS)
    @pytest.mark.parametrize("sampling", CROP_SAMPLINGS)
    def test_croptest(self, sampling, restart):
        tiled = _tiled_size(sampling, restart)
        cases = [(h, w, _croptest_windows) for h, w in CROP_SIZES]
        cases.append((*tiled, lambda hs, ws, seed: sorted(_random_windows(hs, ws, seed, 40))))
        bad, checked = [], 0
        taken_at_scale = dict.fromkeys(range(1, 9), 0)
        fallbacks0 = _stats()[1]
        for h, w, windows in cases:
            data = fio._as_tensor(_crop_jpeg(sampling, restart, h, w))
            if (h, w) == tiled:
                assert fio.jpeg_info(data).restart_roi
            for num in range(1, 9):
                before = _stats()
                full = fio.decode_jpeg(data, "RGB", scale=(num, 8))
                assert _stats() == before  # the reference is a plain full decode
                hs, ws = full.shape[1:]
                for t, l, hh, ww in windows(hs, ws, [h, w, num]):
                    taken0 = _stats()[0]
                    out = fio.decode_jpeg_roi(data, t, l, hh, ww, "RGB", scale=(num, 8))
                    taken_at_scale[num] += _stats()[0] - taken0
                    checked += 1
                    if not torch.equal(out, full[:, t:t + hh, l:l + ww]):
                        bad.append((h, w, num, t, l, hh, ww))
        assert not bad, (f"{sampling} -restart {restart}: {len(bad)} of {checked} windows differ, e.g. "
                         f"(height, width, scale, top, left, h, w) = {bad[:5]}")
        assert _stats()[1] == fallbacks0  # valid files never fall back
        never = [num for num, taken in taken_at_scale.items() if taken == 0]
        assert not never, f"{sampling} -restart {restart}: the restart path was never taken at scales {never}/8"

# --- files whose markers lie ----------------------------------------------------------------

def _rst_positions(data: bytes):
    """Offsets of the RST markers in the (single) scan."""
    sos = data.index(b"\xff\xda")
    out, i = [], data.index(b"\xff", sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big"))
    while True:
        i = data.find(b"\xff", i)
        if i < 0:
            return out
        if 0xD0 <= data[i + 1] <= 0xD7:
            out.append(i)
        i += 2


BASE = "420-2mcu"  # 12 MCUs per row, 6 intervals per row, 4 rows of MCUs: 24 intervals


def _base():
    data = restart_jpeg(BASE)
    rst = _rst_positions(data)
    assert len(rst) == 23
    return data, rst


def _fallback_matches_sequential(bad: bytes, windows, *, expect_warning: bool):
    """The fast path must refuse `bad` (fallback counted, nothing taken) and return what
    the sequential path gives: the full decode sliced (libjpeg decodes rows in order, so
    the window's rows match the full decode's), with the same warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        full = fio.decode_jpeg(bad)
    full_warned = any(issubclass(w.category, fio.DecodeWarning) for w in caught)
    assert full_warned == expect_warning
    for t, l, hh, ww in windows:
        taken0, fallbacks0 = _stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fio.decode_jpeg_roi(bad, t, l, hh, ww)
        taken, fallbacks = _stats()
        assert taken == taken0, "the fast path decoded a file whose markers lie"
        assert fallbacks == fallbacks0 + 1
        assert torch.equal(out, full[:, t:t + hh, l:l + ww])
        assert all(issubclass(w.category, fio.DecodeWarning) for w in caught)


# windows below the first MCU row, so that splicing would always save something
WINDOWS = [(20, 30, 30, 100), (40, 120, 21, 70), (17, 2, 40, 50)]


class TestBadMarkers:
    def test_missing_marker(self):
        data, rst = _base()
        bad = data[:rst[10]] + data[rst[10] + 2:]
        _fallback_matches_sequential(bad, WINDOWS, expect_warning=True)

    def test_duplicated_marker(self):
        data, rst = _base()
        bad = data[:rst[10]] + data[rst[10]:rst[10] + 2] + data[rst[10]:]
        _fallback_matches_sequential(bad, WINDOWS, expect_warning=True)

    def test_out_of_order_markers(self):
        data, rst = _base()
        b = bytearray(data)
        b[rst[9] + 1], b[rst[10] + 1] = b[rst[10] + 1], b[rst[9] + 1]
        _fallback_matches_sequential(bytes(b), WINDOWS, expect_warning=True)

    def test_eight_missing_markers_keep_numbering(self):
        """Dropping 8 consecutive markers keeps the cyclic numbering: only the count gives
        it away."""
        data, rst = _base()
        bad = bytearray(data)
        for p in reversed(rst[4:12]):
            del bad[p:p + 2]
        _fallback_matches_sequential(bytes(bad), WINDOWS, expect_warning=True)

    @pytest.mark.parametrize("dri", [1, 3, 4, 6, 12])
    def test_dri_inconsistent_with_spacing(self, dri):
        data, _ = _base()
        at = data.index(b"\xff\xdd")
        bad = data[:at + 4] + dri.to_bytes(2, "big") + data[at + 6:]
        assert fio.jpeg_info(bad).restart_interval == dri
        _fallback_matches_sequential(bad, WINDOWS, expect_warning=True)

    @pytest.mark.parametrize("k,frac,n", [(13, 3, 6), (13, 2, 1), (16, 3, 6), (16, 3, 20), (16, 2, 1)])
    def test_interval_cut_short_inside_window(self, k, frac, n):
        """Bytes missing from an interval the window needs (interval k + 1). The markers are
        all there, so the splice goes ahead. libjpeg decodes such an interval the same way
        whatever precedes it (zeros once its data runs out, the predictors reset at the
        next marker), sometimes with a warning, sometimes silently: the window must equal
        the sequential decode of the damaged file, warn when it warns (the fast path falls
        back on any warning), and raise with strict=True then."""
        data, rst = _base()
        start = rst[k] + 2
        cut = start + (rst[k + 1] - start) // frac
        bad = data[:cut] + data[cut + n:]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ref_full = fio.decode_jpeg(bad)
        full_warned = bool(caught)
        assert not torch.equal(ref_full, fio.decode_jpeg(data))  # the damage shows
        row, col = divmod(k + 1, 6)  # MCU row, interval column (2 MCUs = 32 px each)
        l2 = max(col * 32 - 20, 0)
        for t, l, hh, ww in [(row * 16 + 2, col * 32 + 2, 10, 20), (row * 16 - 10, l2, 20, min(60, W - l2))]:
            taken0, fallbacks0 = _stats()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = fio.decode_jpeg_roi(bad, t, l, hh, ww)
            assert torch.equal(out, ref_full[:, t:t + hh, l:l + ww])
            # A warning about bytes left over at the end of the interval (libjpeg reports it
            # when it reads the next marker) is missed when the window's decode stops before
            # that marker: the pixels are right, and the leftover bytes lie outside the data
            # the window needs (documented with the other unnoticed corruption).
            roi_warned = bool(caught)
            assert roi_warned <= full_warned
            taken, fallbacks = _stats()
            assert (taken, fallbacks) == ((taken0, fallbacks0 + 1) if roi_warned else (taken0 + 1, fallbacks0))
            if roi_warned:
                with pytest.raises(fio.DecodeError, match="strict"):
                    fio.decode_jpeg_roi(bad, t, l, hh, ww, strict=True)

    def test_cut_short_cases_include_warnings(self):
        """The cases above must include ones where libjpeg warns inside the window."""
        data, rst = _base()
        start = rst[16] + 2  # interval 17: MCU row 2, pixels 160..189
        bad = data[:start + (rst[17] - start) // 3] + data[start + (rst[17] - start) // 3 + 20:]
        with pytest.warns(fio.DecodeWarning, match="premature end"):
            fio.decode_jpeg_roi(bad, 34, 162, 10, 20)

    def test_interval_cut_short_outside_window_goes_unnoticed(self):
        """Documented: corruption confined to intervals the window does not need is not
        looked at (the window's pixels are still right)."""
        data, rst = _base()
        start = rst[20] + 2  # interval 21: last MCU row, far right
        cut = start + (rst[21] - start) // 3
        bad = data[:cut] + data[cut + 6:]
        full = fio.decode_jpeg(data)
        taken0 = _stats()[0]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = fio.decode_jpeg_roi(bad, 0, 0, 20, 40, strict=True)
        assert torch.equal(out, full[:, :20, :40])
        assert _stats()[0] == taken0 + 1

    @pytest.mark.parametrize("code", [0x00, 0xD9, 0xC4, 0xD6])  # RST5 becomes a stuffed byte, EOI, DHT, RST6
    def test_corrupted_marker_inside_window(self, code):
        data, rst = _base()
        b = bytearray(data)
        b[rst[13] + 1] = code  # the marker before interval 14
        _fallback_matches_sequential(bytes(b), [(34, 66, 10, 20), (20, 40, 30, 100)], expect_warning=True)

    def test_truncated(self):
        data, rst = _base()
        bad = data[:rst[15]]  # ends inside MCU row 2
        full = fio.decode_jpeg(data)
        taken0, fallbacks0 = _stats()
        out = fio.decode_jpeg_roi(bad, 0, 10, 8, 50)  # needs only MCU row 0: the sequential path decodes it
        assert torch.equal(out, full[:, :8, 10:60])
        with pytest.raises(fio.DecodeError, match="truncated"):
            fio.decode_jpeg_roi(bad, 50, 10, 8, 50)
        assert _stats() == (taken0, fallbacks0 + 2)  # no EOI: both windows fall back

    def test_corrupt_header_after_sos_never_crashes(self):
        data, rst = _base()
        rng = np.random.default_rng(0)
        for _ in range(40):
            b = bytearray(data)
            for p in rng.integers(0, len(b), 3):
                b[p] = int(rng.integers(0, 256))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", fio.DecodeWarning)
                    out = fio.decode_jpeg_roi(bytes(b), 20, 30, 30, 100)
                assert out.shape == (3, 30, 100)
            except fio.DecodeError:
                pass


class TestRestartThreads:
    def test_parallel_windows_match_full_decode(self):
        from concurrent.futures import ThreadPoolExecutor

        data = fio._as_tensor(restart_jpeg("420-2mcu"))
        full = fio.decode_jpeg(data)
        windows = list(_windows(H, W))[::7]

        def run(win):
            t, l, hh, ww = win
            return torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww), full[:, t:t + hh, l:l + ww])

        with ThreadPoolExecutor(4) as pool:
            assert all(pool.map(run, windows))
