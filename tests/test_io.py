"""fastprep.io: header parsing, full decode and exact ROI decode."""

import io
import threading

import numpy as np
import pytest
import torch
from PIL import Image

import fastprep.io as fio
from conftest import ENCODINGS, make_jpeg

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
        data = fio._as_tensor(make_jpeg(encoding, h, w, seed=3))
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
        assert fio._as_tensor(ba).data_ptr() == torch.frombuffer(ba, dtype=torch.uint8).data_ptr()
        t = torch.frombuffer(bytearray(photo_420), dtype=torch.uint8)
        assert fio._as_tensor(t).data_ptr() == t.data_ptr()

    def test_read_file(self, tmp_path, photo_420):
        p = tmp_path / "a.jpg"
        p.write_bytes(photo_420)
        t = fio.read_file(p)
        assert t.dtype == torch.uint8 and t.dim() == 1 and bytes(t.numpy()) == photo_420
        assert torch.equal(fio.decode_jpeg(fio.read_file(str(p))), fio.decode_jpeg(photo_420))


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
        data = fio._as_tensor(photo_420)
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 10, 20, 64, 48, 3, 0, False))
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg_roi.default, (data, 0, 0, 5, 5, 1, 0, True))
        torch.library.opcheck(torch.ops.fastprep.decode_jpeg.default, (data, 3, 0, False))
        torch.library.opcheck(torch.ops.fastprep.jpeg_info.default, (data,))

    def test_compile(self, photo_420):
        data = fio._as_tensor(photo_420)

        def f(d):
            x = torch.ops.fastprep.decode_jpeg_roi(d, 100, 200, 64, 64, 3, 0, False)
            return x.float().mean(dim=0) / 255

        compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
        assert torch.allclose(compiled(data), f(data))
