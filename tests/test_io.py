"""fastprep.io: header parsing, full decode and exact ROI decode."""

import array
import io
import mmap
import subprocess
import threading
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import fastprep.io as fio
from fastprep._checks import encoded_tensor, encoded_view
from conftest import ENCODINGS, _need_tool, cjpeg, make_jpeg

ALL = sorted(ENCODINGS)
COLOR = [e for e in ALL if not e.startswith(("gray", "cmyk"))]


def pil_rgb(data) -> torch.Tensor:
    img = Image.open(io.BytesIO(data))
    return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)


class TestJpegInfo:
    @pytest.mark.parametrize("encoding,subsampling", [
        ("444", "4:4:4"), ("422", "4:2:2"), ("420", "4:2:0"), ("440", "4:4:0"), ("411", "4:1:1"),
        ("gray", None), ("cmyk", "4:4:4"),
    ])
    def test_subsampling(self, encoding, subsampling):
        info = fio.jpeg_info(make_jpeg(encoding, 45, 67))
        assert (info.height, info.width) == (45, 67)
        assert info.subsampling == subsampling

    def test_fields(self):
        info = fio.jpeg_info(make_jpeg("420-arith-progressive", 30, 20))
        assert info.progressive and info.arithmetic
        assert info.num_components == 3 and info.color_space == "YCbCr"
        assert fio.jpeg_info(make_jpeg("gray", 30, 20)).color_space == "GRAY"
        cmyk = fio.jpeg_info(make_jpeg("cmyk", 30, 20))
        assert cmyk.num_components == 4 and cmyk.color_space in ("CMYK", "YCCK")
        assert not fio.jpeg_info(make_jpeg("420", 30, 20)).progressive

    def test_header_only(self):
        """Headers parse even when the entropy-coded data is cut off right after SOS."""
        data = make_jpeg("420", 64, 64)
        sos = data.index(b"\xff\xda")
        info = fio.jpeg_info(data[: sos + 20])
        assert (info.height, info.width) == (64, 64)


def _windows(h, w):
    """Every top offset; left offsets around iMCU boundaries and edges; several sizes,
    including windows that end exactly on the 8/16/32-pixel grid (iMCU edges)."""
    lefts = sorted({0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, w // 2, w - 17, w - 16, w - 9, w - 8, w - 2, w - 1} &
                   set(range(w)))
    def to_grid(start, size, grid):  # a length that ends the window on the next grid line
        return min((start // grid + 1) * grid - start, size - start)

    for top in range(h):
        for left in lefts:
            shapes = {(1, 1), (h - top, w - left), (min(9, h - top), min(21, w - left)), (min(33, h - top), 1),
                      (1, w - left)}
            shapes |= {(to_grid(top, h, g), to_grid(left, w, g)) for g in (8, 16, 32)}
            for hh, ww in sorted(shapes):
                yield top, left, hh, ww


class TestDecodeRoiExact:
    """Croptest-style sweep: decode_jpeg_roi == decode_jpeg sliced, bit for bit."""

    @pytest.mark.parametrize("encoding", ALL)
    def test_sweep(self, encoding):
        h, w = (53, 71) if "progressive" not in encoding else (37, 45)
        data = encoded_tensor(make_jpeg(encoding, h, w, seed=3))
        modes = ["RGB", "UNCHANGED"] if encoding.startswith(("gray", "cmyk")) else ["RGB", "GRAY", "YCbCr"]
        for mode in modes:
            full = fio.decode_jpeg(data, mode)
            bad = [(t, l, hh, ww) for t, l, hh, ww in _windows(h, w)
                   if not torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww, mode), full[:, t:t + hh, l:l + ww])]
            assert not bad, f"{encoding}/{mode}: {len(bad)} windows differ, e.g. {bad[:5]}"

    @pytest.mark.parametrize("encoding", ["420", "422", "444", "411", "440", "420-progressive"])
    def test_large_image_random_windows(self, encoding):
        data = make_jpeg(encoding, 301, 457, seed=5)
        full = fio.decode_jpeg(data)
        g = torch.Generator().manual_seed(0)
        for _ in range(150):
            hh, ww = (int(v) for v in torch.randint(1, 200, (2,), generator=g))
            t = int(torch.randint(0, 301 - hh + 1, (1,), generator=g))
            l = int(torch.randint(0, 457 - ww + 1, (1,), generator=g))
            assert torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww), full[:, t:t + hh, l:l + ww]), (t, l, hh, ww)

    @pytest.mark.parametrize("size", [(1, 1), (7, 13), (13, 7), (1, 40), (40, 1)])
    @pytest.mark.parametrize("encoding", ["420", "422", "444-progressive", "gray"])
    def test_tiny_images_every_window(self, size, encoding):
        h, w = size
        data = make_jpeg(encoding, h, w, seed=7)
        full = fio.decode_jpeg(data)
        assert full.shape == (3, h, w)
        for t in range(h):
            for l in range(w):
                for hh in range(1, h - t + 1):
                    for ww in {1, 2, w - l} & set(range(1, w - l + 1)):
                        assert torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww), full[:, t:t + hh, l:l + ww])

    def test_output_layout(self, photo_420):
        out = fio.decode_jpeg_roi(photo_420, 10, 20, 256, 256)
        assert out.dtype == torch.uint8 and out.shape == (3, 256, 256) and out.is_contiguous()


# 4:1:0 (4x2 luma per chroma sample): DCT scaling enlarges its chroma IDCT yet still
# upsamples horizontally, a case libjpeg-turbo < 3.0.1 crops wrongly (the decoder then
# decodes the full width).
SCALED_ENCODINGS = dict(ENCODINGS)
SCALED_ENCODINGS["410"] = lambda a: cjpeg(a, "-quality", "90", "-sample", "4x2,1x1,1x1")
SCALED_ENCODINGS["410-progressive"] = lambda a: cjpeg(a, "-quality", "90", "-sample", "4x2,1x1,1x1",
                                                      "-progressive")
_scaled_cache = {}


def make_scaled_test_jpeg(encoding, h, w, seed=3):
    key = (encoding, h, w, seed)
    if key not in _scaled_cache:
        from fastprep.bench.synthetic import photo_like

        _scaled_cache[key] = SCALED_ENCODINGS[encoding](photo_like(h, w, seed))
    return _scaled_cache[key]


def _sampled_windows(h, w, grid, seed):
    """Every top offset, each with a few left offsets drawn from the iMCU-boundary
    neighbourhoods (grid = the scaled iMCU widths) and the edges, and a few sizes: a
    subsample of the exhaustive sweep that still hits every row and every kind of column."""
    lefts = sorted({0, 1, w // 2, w - 2, w - 1} | {x for g in grid for k in range(1, w // g + 1)
                                                   for x in (k * g - 1, k * g, k * g + 1)} & set(range(w)))
    g = torch.Generator().manual_seed(seed)
    for top in range(h):
        picks = torch.randint(0, len(lefts), (3,), generator=g).tolist()
        for left in (lefts[i] for i in picks):
            hh = int(torch.randint(1, h - top + 1, (1,), generator=g))
            ww = int(torch.randint(1, w - left + 1, (1,), generator=g))
            for shape in {(1, 1), (hh, ww), (h - top, w - left), (min(3, h - top), min(2, w - left))}:
                yield (top, left) + shape


class TestScaledDecode:
    """DCT-scaled decode: sizes, an independent reference (djpeg), and the exactness of
    scaled ROI decodes against the scaled full decode sliced."""

    @pytest.mark.parametrize("num", range(1, 9))
    def test_size(self, num):
        for h, w in [(1, 1), (7, 9), (53, 71), (16, 24), (301, 457)]:
            data = make_jpeg("420", h, w, seed=2)
            expect = (-(-h * num // 8), -(-w * num // 8))  # ceil
            assert fio.scaled_size(h, w, (num, 8)) == expect
            assert fio.jpeg_info(data).scaled_size(num) == expect
            assert tuple(fio.decode_jpeg(data, scale=(num, 8)).shape) == (3,) + expect

    @pytest.mark.parametrize("encoding", [e for e in ALL if not e.startswith("cmyk")])
    def test_matches_djpeg(self, encoding):
        """libjpeg-turbo's own djpeg -scale M/8 (same library, its own output code) is the
        reference, bit for bit, at every scale."""
        tool = _need_tool("djpeg")
        data = make_jpeg(encoding, 53, 71, seed=3)
        mode = "GRAY" if encoding.startswith("gray") else "RGB"
        for num in range(1, 9):
            pnm = subprocess.run([tool, "-scale", f"{num}/8", "-pnm"], input=data, capture_output=True,
                                 check=True).stdout
            magic, w, h, _, pixels = pnm.split(maxsplit=4)
            c = 3 if magic == b"P6" else 1
            ref = torch.from_numpy(
                np.frombuffer(pixels, np.uint8, int(h) * int(w) * c).reshape(int(h), int(w), c).copy())
            assert torch.equal(fio.decode_jpeg(data, mode, scale=(num, 8)), ref.permute(2, 0, 1)), (encoding, num)

    def test_scale_spellings(self):
        data = make_jpeg("422", 40, 56, seed=1)
        full = fio.decode_jpeg(data)
        assert torch.equal(fio.decode_jpeg(data, scale=None), full)
        assert torch.equal(fio.decode_jpeg(data, scale=(8, 8)), full)
        assert torch.equal(fio.decode_jpeg(data, scale=8), full)
        half = fio.decode_jpeg(data, scale=(4, 8))
        assert half.shape == (3, 20, 28)
        assert torch.equal(fio.decode_jpeg(data, scale=(1, 2)), half)
        assert torch.equal(fio.decode_jpeg(data, scale=4), half)
        assert torch.equal(fio.decode_jpeg(data, scale=np.int64(4)), half)
        assert torch.equal(fio.decode_jpeg(data, scale=(3, 4)), fio.decode_jpeg(data, scale=6))

    @pytest.mark.parametrize("bad,exc,match", [
        ((0, 8), ValueError, r"num/8 with 1 <= num <= 8.*\(0, 8\)"),
        ((9, 8), ValueError, r"\(9, 8\)"),
        ((1, 3), ValueError, r"\(1, 3\)"),
        ((3, 16), ValueError, r"\(3, 16\)"),
        ((1, 0), ValueError, r"\(1, 0\)"),
        ((1, 8, 2), ValueError, r"\(1, 8, 2\)"),
        ((1.0, 8), ValueError, r"\(1.0, 8\)"),
        (0, ValueError, "must be in \\[1, 8\\], got 0"),
        (16, ValueError, "got 16"),
        (0.5, TypeError, "got float 0.5"),
        ("1/2", TypeError, "got str '1/2'"),
        (True, TypeError, "got True"),
    ])
    def test_scale_errors(self, bad, exc, match):
        data = make_jpeg("420", 16, 16)
        with pytest.raises(exc, match=match):
            fio.decode_jpeg(data, scale=bad)
        with pytest.raises(exc, match=match):
            fio.decode_jpeg_roi(data, 0, 0, 1, 1, scale=bad)
        with pytest.raises(exc, match=match):
            fio.scaled_size(16, 16, bad)
        with pytest.raises(ValueError, match="scale_num must be in \\[1, 8\\]"):
            torch.ops.fastprep.decode_jpeg(encoded_tensor(data), 3, 0, False, 0)

    def test_window_in_scaled_coordinates(self):
        data = make_jpeg("420", 100, 60, seed=1)  # 1/4: 25 x 15
        quarter = fio.decode_jpeg(data, scale=(2, 8))
        assert quarter.shape == (3, 25, 15)
        assert torch.equal(fio.decode_jpeg_roi(data, 20, 10, 5, 5, scale=(2, 8)), quarter[:, 20:, 10:])
        with pytest.raises(ValueError, match="does not fit in the 25x15 image \\(its size at the requested DCT scale"):
            fio.decode_jpeg_roi(data, 20, 10, 6, 5, scale=(2, 8))
        with pytest.raises(ValueError, match="does not fit"):
            fio.decode_jpeg_roi(data, 0, 15, 1, 1, scale=(2, 8))

    def test_max_pixels_counts_the_stored_image(self):
        data = make_jpeg("420", 40, 40)
        with pytest.raises(fio.DecodeError, match="max_pixels=1000"):
            fio.decode_jpeg(data, max_pixels=1000, scale=(1, 8))

    @pytest.mark.parametrize("num", range(1, 8))
    @pytest.mark.parametrize("encoding", sorted(SCALED_ENCODINGS))
    def test_sweep(self, encoding, num):
        """Croptest at every DCT scale below 8/8 (8/8 is TestDecodeRoiExact): every top
        offset, left offsets around the scaled iMCU columns, random and edge sizes."""
        data = encoded_tensor(make_scaled_test_jpeg(encoding, 53, 71))
        mode = "UNCHANGED" if encoding.startswith(("gray", "cmyk")) else "RGB"
        full = fio.decode_jpeg(data, mode, scale=(num, 8))
        h, w = full.shape[1:]
        windows = list(_sampled_windows(h, w, (num, 2 * num, 4 * num), seed=num))
        bad = [(t, l, hh, ww) for t, l, hh, ww in windows
               if not torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww, mode, scale=(num, 8)),
                                  full[:, t:t + hh, l:l + ww])]
        assert not bad, f"{encoding} at {num}/8: {len(bad)} of {len(windows)} windows differ, e.g. {bad[:5]}"

    @pytest.mark.parametrize("num", [1, 2, 3, 4, 6])
    def test_large_image_random_windows(self, num):
        data = make_jpeg("420", 301, 457, seed=5)
        full = fio.decode_jpeg(data, "YCbCr", scale=num)
        h, w = full.shape[1:]
        g = torch.Generator().manual_seed(num)
        for _ in range(60):
            hh, ww = (int(torch.randint(1, n + 1, (1,), generator=g)) for n in (h, w))
            t = int(torch.randint(0, h - hh + 1, (1,), generator=g))
            l = int(torch.randint(0, w - ww + 1, (1,), generator=g))
            assert torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww, "YCbCr", scale=num), full[:, t:t + hh, l:l + ww])


# Progressive scan scripts (cjpeg -scans) that stop before the last refinement scans: valid
# files that libjpeg decodes through its block smoothing (it estimates the missing low AC
# coefficients from the DC values of the 5x5 neighbouring blocks).
INCOMPLETE_SCANS = {
    "no-ac-refinement": "0,1,2: 0-0, 0, 1; 0: 1-5, 0, 2; 2: 1-63, 0, 1; 1: 1-63, 0, 1; 0: 6-63, 0, 2;"
                        " 0: 1-63, 2, 1; 0,1,2: 0-0, 1, 0;",
    "dc-only": "0,1,2: 0-0, 0, 0;",
    "dc-first-bits": "0,1,2: 0-0, 0, 2;",
    "luma-low-band": "0,1,2: 0-0, 0, 0; 0: 1-9, 0, 0;",
    "chroma-missing-ac": "0,1,2: 0-0, 0, 0; 0: 1-63, 0, 0; 1: 1-2, 0, 0;",
}
GRAY_INCOMPLETE_SCANS = {
    "dc-only": "0: 0-0, 0, 0;",
    "no-ac-refinement": "0: 0-0, 0, 1; 0: 1-5, 0, 2; 0: 6-63, 0, 2; 0: 1-63, 2, 1;",
    "low-band": "0: 0-0, 0, 1; 0: 1-3, 0, 0; 0: 0-0, 1, 0;",
}


def incomplete_progressive(script, sample, arithmetic, h=45, w=67, seed=6):
    """A cjpeg-encoded progressive JPEG whose scans follow `script` (sample=None: gray)."""
    key = ("incomplete", script, sample, arithmetic, h, w, seed)
    if key not in _scaled_cache:
        from fastprep.bench.synthetic import photo_like

        rgb = photo_like(h, w, seed)
        args = ["-quality", "90"] + (["-arithmetic"] if arithmetic else [])
        if sample is None:
            out = cjpeg(rgb, *args, gray=True, scans=script)
        else:
            out = cjpeg(rgb, *args, "-sample", sample, scans=script)
        _scaled_cache[key] = out
    return _scaled_cache[key]


_SAMPLINGS = {"444": "1x1", "422": "2x1", "420": "2x2", "440": "1x2", "411": "4x1"}
_INCOMPLETE_CASES = ([(name, sub, arith) for name in INCOMPLETE_SCANS for sub in _SAMPLINGS for arith in (0, 1)] +
                     [(name, "gray", arith) for name in GRAY_INCOMPLETE_SCANS for arith in (0, 1)])


class TestIncompleteProgressive:
    """Croptest over valid progressive files with missing refinement scans: libjpeg's block
    smoothing reads neighbouring blocks' DC values, and a cropped decode must see the same
    neighbours as the full decode."""

    @pytest.mark.parametrize("name,sampling,arithmetic", _INCOMPLETE_CASES)
    def test_sweep(self, name, sampling, arithmetic):
        if sampling == "gray":
            data = incomplete_progressive(GRAY_INCOMPLETE_SCANS[name], None, arithmetic)
        else:
            data = incomplete_progressive(INCOMPLETE_SCANS[name], _SAMPLINGS[sampling] + ",1x1,1x1", arithmetic)
        info = fio.jpeg_info(data)
        assert info.progressive and bool(info.arithmetic) == bool(arithmetic)
        data = encoded_tensor(data)
        bad = []
        for num in (8, 5, 4, 2):  # full size and scales with and without chroma IDCT enlargement
            full = fio.decode_jpeg(data, scale=num)
            h, w = full.shape[1:]
            grid = (num, 2 * num, 4 * num)
            for t, l, hh, ww in _sampled_windows(h, w, grid, seed=num):
                if not torch.equal(fio.decode_jpeg_roi(data, t, l, hh, ww, scale=num), full[:, t:t + hh, l:l + ww]):
                    bad.append((num, t, l, hh, ww))
        assert not bad, f"{len(bad)} windows differ (scale, top, left, h, w), e.g. {bad[:5]}"

    def test_smoothing_is_applied(self):
        """The files above do go through block smoothing: a file that stops before its DC
        refinement decodes differently from the same scans plus the refinement, in
        blocks other than those whose data changed (a check that the sweep tests smoothing)."""
        dc_only = fio.decode_jpeg(incomplete_progressive("0: 0-0, 0, 0;", None, 0)).float()
        # Without smoothing every 8x8 block of a DC-only decode would be flat.
        blocks = dc_only[0, :40, :64].reshape(5, 8, 8, 8).permute(0, 2, 1, 3).reshape(5, 8, 64)
        assert bool((blocks.amax(-1) != blocks.amin(-1)).any())


class TestAgreesWithPillow:
    @pytest.mark.parametrize("encoding", [e for e in ALL if not e.startswith("gray")])
    def test_mean_abs_diff(self, encoding):
        data = make_jpeg(encoding, 97, 131, seed=11)
        ours, ref = fio.decode_jpeg(data, "RGB"), pil_rgb(data)
        assert ours.shape == ref.shape
        assert (ours.float() - ref.float()).abs().mean() <= 1.0

    def test_gray(self):
        data = make_jpeg("gray", 50, 60)
        ref = torch.from_numpy(np.array(Image.open(io.BytesIO(data))))[None]
        assert torch.equal(fio.decode_jpeg(data, "GRAY"), ref)
        rgb = fio.decode_jpeg(data, "RGB")
        assert rgb.shape == (3, 50, 60) and torch.equal(rgb, ref.expand(3, -1, -1))


class TestModes:
    def test_gray_is_luma_of_ycbcr(self):
        data = make_jpeg("420", 64, 80)
        assert torch.equal(fio.decode_jpeg(data, "GRAY")[0], fio.decode_jpeg(data, "YCbCr")[0])

    def test_ycbcr_close_to_converted_rgb(self):
        data = make_jpeg("420", 96, 128)
        rgb = fio.decode_jpeg(data, "RGB").float()
        r, g, b = rgb
        ref = torch.stack([0.299 * r + 0.587 * g + 0.114 * b,
                           -0.16874 * r - 0.33126 * g + 0.5 * b + 128,
                           0.5 * r - 0.41869 * g - 0.08131 * b + 128])
        diff = (fio.decode_jpeg(data, "YCbCr").float() - ref).abs()
        assert diff.mean() < 1.0 and diff.max() < 32

    def test_unchanged_channels(self):
        assert fio.decode_jpeg(make_jpeg("gray", 20, 20), "UNCHANGED").shape[0] == 1
        assert fio.decode_jpeg(make_jpeg("420", 20, 20), "UNCHANGED").shape[0] == 3
        assert fio.decode_jpeg(make_jpeg("cmyk", 20, 20), "UNCHANGED").shape[0] == 4

    def test_ycbcr_of_gray(self):
        out = fio.decode_jpeg(make_jpeg("gray", 20, 30), "YCbCr")
        assert out.shape == (3, 20, 30) and bool((out[1:] == 128).all())

    @pytest.mark.parametrize("mode", ["rgb", "RGB", fio.ImageReadMode.RGB, fio.ImageReadMode(3)])
    def test_mode_spellings(self, mode):
        assert fio.decode_jpeg(make_jpeg("420", 16, 16), mode).shape[0] == 3

    def test_torchvision_mode(self):
        from torchvision.io import ImageReadMode as TV

        assert fio.decode_jpeg(make_jpeg("420", 16, 16), TV.GRAY).shape[0] == 1
        with pytest.raises(ValueError, match="mode must be one of"):
            fio.decode_jpeg(make_jpeg("420", 16, 16), TV.RGB_ALPHA)


class TestInputs:
    def test_buffer_types(self, photo_420):
        ref = fio.decode_jpeg_roi(photo_420, 5, 6, 30, 40)
        arr = np.frombuffer(photo_420, np.uint8)
        inputs = [photo_420, bytearray(photo_420), memoryview(photo_420), memoryview(bytearray(photo_420)),
                  arr, arr.copy(), torch.frombuffer(bytearray(photo_420), dtype=torch.uint8),
                  torch.tensor(list(b"\0" + photo_420), dtype=torch.uint8)[1:],
                  torch.from_numpy(np.repeat(arr, 2)[::2])]  # non-contiguous
        for data in inputs:
            assert torch.equal(fio.decode_jpeg_roi(data, 5, 6, 30, 40), ref), type(data)

    def test_writable_buffers_not_copied(self, photo_420):
        ba = bytearray(photo_420)
        assert encoded_tensor(ba).data_ptr() == torch.frombuffer(ba, dtype=torch.uint8).data_ptr()
        t = torch.frombuffer(bytearray(photo_420), dtype=torch.uint8)
        assert encoded_tensor(t).data_ptr() == t.data_ptr()

    def test_every_input_type_read_in_place(self, photo_420, tmp_path, monkeypatch):
        """Every buffer type the docs accept is read where it lies -- the tensor the op gets
        points at the caller's first byte, so no call copies the file -- with no warning,
        the tensor path's results, and the caller's bytes untouched."""
        packed = fio.transcode_jpeg(photo_420)
        path = tmp_path / "packed.jpg"
        path.write_bytes(packed)
        tensor = torch.frombuffer(bytearray(packed), dtype=torch.uint8)
        want = (fio.jpeg_info(tensor), fio.decode_jpeg(tensor), fio.decode_jpeg_roi(tensor, 300, 500, 224, 224),
                fio.transcode_jpeg(tensor, restart_interval=0))
        seen = []
        real_call_op = fio._call_op

        def spy(op, data, *args):
            seen.append(data.data_ptr())
            return real_call_op(op, data, *args)

        monkeypatch.setattr(fio, "_call_op", spy)
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as ro_map, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as copy_map:
            inputs = {"bytes": packed, "bytearray": bytearray(packed), "memoryview of bytes": memoryview(packed),
                      "memoryview of bytearray": memoryview(bytearray(packed)),
                      "read-only memoryview": memoryview(bytearray(packed)).toreadonly(),
                      "read-only array": np.frombuffer(packed, np.uint8), "array": np.fromfile(path, np.uint8),
                      "numpy.memmap": np.memmap(path, np.uint8, mode="r"), "read-only mmap": ro_map,
                      "copy-on-write mmap": copy_map, "tensor": tensor}
            for name, data in inputs.items():
                if isinstance(data, torch.Tensor):
                    address = data.data_ptr()
                else:
                    first = np.frombuffer(data, np.uint8)  # a view (read-only buffers stay read-only)
                    address = first.ctypes.data
                    del first
                seen.clear()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = (fio.jpeg_info(data), fio.decode_jpeg(data), fio.decode_jpeg_roi(data, 300, 500, 224, 224),
                           fio.transcode_jpeg(data, restart_interval=0))
                assert not caught, (name, [str(w.message) for w in caught])
                assert seen == [address] * 4, name
                assert got[0] == want[0] and got[3] == want[3], name
                assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2]), name
                assert bytes(data.numpy() if isinstance(data, torch.Tensor) else data) == packed, name
            del inputs, data

    def test_non_contiguous_buffers_are_copied(self, photo_420):
        ref = fio.decode_jpeg_roi(photo_420, 5, 6, 30, 40)
        spread = bytearray(2 * len(photo_420))
        spread[::2] = photo_420
        strided = memoryview(spread)[::2]
        assert not strided.c_contiguous
        for data in (strided, np.frombuffer(spread, np.uint8)[::2]):
            assert torch.equal(fio.decode_jpeg_roi(data, 5, 6, 30, 40), ref)
            assert encoded_view(data).data_ptr() != np.frombuffer(spread, np.uint8).ctypes.data

    def test_the_view_is_released_after_the_call(self, photo_420, tmp_path):
        """The op's view of the caller's buffer ends with the call: a bytearray can grow
        again and an mmap can be closed."""
        ba = bytearray(photo_420)
        fio.decode_jpeg_roi(ba, 5, 6, 30, 40)
        fio.jpeg_info(ba)
        ba.extend(b"\0")  # BufferError while a view is exported
        path = tmp_path / "a.jpg"
        path.write_bytes(photo_420)
        with open(path, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            fio.decode_jpeg_roi(m, 5, 6, 30, 40)
            m.close()  # BufferError while a view is exported

    def test_kept_tensors_never_alias_read_only_memory(self, photo_420):
        """encoded_tensor's result may be kept (and written to) by its caller: it copies
        read-only buffers; encoded_view, for one op call, does not."""
        address = np.frombuffer(photo_420, np.uint8).ctypes.data
        assert encoded_tensor(photo_420).data_ptr() != address
        assert encoded_view(photo_420).data_ptr() == address

    @pytest.mark.parametrize("bad, exc, match", [
        (array.array("B", b"\xff\xd8"), TypeError, "data must be a uint8 tensor, bytes, bytearray, memoryview, mmap "
                                                    "or numpy uint8 array, got array"),
        ([255, 216], TypeError, "got list"),
        ("photo.jpg", TypeError, "got a path; use fastprep.io.read_file"),
        (np.zeros(4, np.float32), TypeError, "data array must be uint8, got float32"),
        (np.zeros((2, 2), np.uint8), ValueError, r"data array must be 1-D, got shape \(2, 2\)"),
        (torch.zeros(4), TypeError, "data tensor must be uint8, got torch.float32"),
    ])
    def test_bad_input_types(self, bad, exc, match):
        for fn in (fio.jpeg_info, fio.decode_jpeg, lambda d: fio.decode_jpeg_roi(d, 0, 0, 1, 1)):
            with pytest.raises(exc, match=match):
                fn(bad)

    def test_read_file(self, tmp_path, photo_420):
        p = tmp_path / "a.jpg"
        p.write_bytes(photo_420)
        t = fio.read_file(p)
        assert t.dtype == torch.uint8 and t.dim() == 1 and bytes(t.numpy()) == photo_420
        assert torch.equal(fio.decode_jpeg(fio.read_file(str(p))), fio.decode_jpeg(photo_420))


class TestTruncatedMessages:
    """A truncated file: a full decode says the file ends before the image does; a window
    says the window needs data past the end."""

    @pytest.mark.parametrize("encoding", ["420", "420-progressive"])
    def test_full_decode_and_window(self, encoding):
        data = make_jpeg(encoding, 533, 800, seed=1)
        cut = data[:len(data) * 2 // 3]
        for kwargs in ({}, {"strict": True}, {"scale": (2, 8)}):
            with pytest.raises(fio.DecodeError, match="truncated JPEG data: premature end of data, the file ends "
                                                      "before the end of the image") as e:
                fio.decode_jpeg(cut, **kwargs)
            assert "window" not in str(e.value)
        with pytest.raises(fio.DecodeError, match="truncated JPEG data: .*window needs") as e:
            fio.decode_jpeg_roi(cut, 500, 0, 33, 64)
        # a window that is the whole image is the whole image
        with pytest.raises(fio.DecodeError, match="before the end of the image"):
            fio.decode_jpeg_roi(cut, 0, 0, 533, 800)


class TestThreads:
    def test_parallel_mixed_inputs_match_serial(self, photo_420):
        good = [make_jpeg(e, 61, 77, seed=i) for i, e in enumerate(["420", "422", "444-progressive", "gray"])]
        bad = [b"", b"\xff\xd8", photo_420[:3000], b"not a jpeg" * 10, photo_420[:2] + bytes(100)]
        jobs = [(d, (i * 3) % 20, (i * 5) % 30, 20, 25) for i, d in enumerate((good + bad) * 6)]

        def run(job):
            data, t, l, h, w = job
            try:
                return ("ok", fio.decode_jpeg_roi(data, t, l, h, w))
            except fio.DecodeError as e:
                return ("error", str(e))

        serial = [run(j) for j in jobs]
        results = [None] * len(jobs)

        def worker(k):
            for i in range(k, len(jobs), 8):
                results[i] = run(jobs[i])

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for (ks, vs), (kp, vp) in zip(serial, results):
            assert ks == kp
            assert torch.equal(vs, vp) if ks == "ok" else vs == vp
        assert {k for k, _ in serial} == {"ok", "error"}


class TestTorchLibrary:
    def test_opcheck(self, photo_420):
        data = encoded_tensor(photo_420)
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 10, 20, 64, 48, 3, 0, False))
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 0, 0, 5, 5, 1, 0, True))
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg.default, (data, 3, 0, False))
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg.default, (data, 3, 0, False, 3))
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 10, 20, 30, 40, 3, 0, False, 2))
        torch.library.opcheck(torch.ops.fastprep.jpeg_info.default, (data,))

    def test_compile(self, photo_420):
        data = encoded_tensor(photo_420)

        def f(d):
            x = torch.ops.fastprep.decode_jpeg_roi(d, 100, 200, 64, 64, 3, 0, False)
            return x.float().mean(dim=0) / 255

        compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
        assert torch.allclose(compiled(data), f(data))
