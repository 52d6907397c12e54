"""fastprep.data: datasets, collate_uint8, batch transforms, DevicePrefetcher, make_loader.

Images are tiny (tens of pixels) so DataLoader workers start and finish fast; one test
uses the spawn start method (slow: each worker re-imports torch).
"""

import os
import pickle
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import fastprep.data as D
from fastprep.data.batch import _yuv_torch
from fastprep.transforms import RandomMask
from fastprep import io as fio
from fastprep.transforms import DecodeCenterCrop, DecodeRandomCrop
from fastprep.bench.synthetic import encode_jpeg, photo_like

CROP = 32
# (height, width): larger than the crop, equal to it, and smaller (pad_if_needed).
SIZES = [(40, 56), (48, 37), (32, 32), (24, 44), (61, 33), (35, 70), (50, 50)]

def _write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


@pytest.fixture(scope="module")
def jpeg_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs")
    return [_write(str(root), f"img{i:02d}.jpg", encode_jpeg(photo_like(h, w, seed=i)))
            for i, (h, w) in enumerate(SIZES)]


CORRUPT = {"empty.jpg": b"", "text.jpg": b"not a jpeg at all" * 8}


@pytest.fixture(scope="module")
def folder_with_corrupt(tmp_path_factory, jpeg_files):
    """root/a: 4 good + 1 corrupt, root/b: 3 good + 1 corrupt."""
    root = str(tmp_path_factory.mktemp("folder"))
    for i, path in enumerate(jpeg_files):
        with open(path, "rb") as f:
            _write(os.path.join(root, "a" if i < 4 else "b"), f"{i}.jpg", f.read())
    _write(os.path.join(root, "a"), "empty.jpg", CORRUPT["empty.jpg"])
    _write(os.path.join(root, "b"), "text.jpg", CORRUPT["text.jpg"])
    return root


# ------------------------------------------------------------------------- references


def _yuv_reference(rgb_uint8):
    """Plain-torch BT.601 full-range YUV / 255 of [3, H, W] uint8 (JFIF / BT.601 full-range formulas)."""
    r, g, b = rgb_uint8.double()
    y = 0.299 * r + 0.587 * g + 0.114 * b
    u = -0.16874 * r - 0.33126 * g + 0.5 * b + 128
    v = 0.5 * r - 0.41869 * g - 0.08131 * b + 128
    return (torch.stack([y, u, v]) / 255).float()


def _reference_sample(path, crop, mask_transform):
    """Replay the RNG draws of crop then mask, and build the sample the slow way:
    full decode -> pad -> crop at that window -> same mask -> YUV -> / 255."""
    data = fio.read_file(path)
    pad, (top, left, h, w) = crop.get_params(fio.jpeg_info(data))
    # The mask transform draws its randomness from torch's RNG independently of the
    # pixels, so masking an all-255 image reveals the mask it draws at this point.
    probe = mask_transform(torch.full((3, h, w), 255, dtype=torch.uint8))
    mask = probe[0] == 0
    full = fio.decode_jpeg(data)
    full = torch.nn.functional.pad(full, (pad[0], pad[2], pad[1], pad[3]), value=0)
    img = full[:, top:top + h, left:left + w].clone()
    img[:, mask] = 0
    return _yuv_reference(img), mask


def _seed_worker(worker_id):
    torch.manual_seed(100 + worker_id)


# ------------------------------------------------------------------------- datasets


class TestJpegDataset:
    def test_item_is_transform_of_encoded_bytes(self, jpeg_files):
        seen = []

        def transform(data):
            seen.append(data)
            return data.numel()

        ds = D.JpegDataset(jpeg_files, targets=range(len(jpeg_files)), transform=transform)
        assert len(ds) == len(jpeg_files)
        value, target = ds[3]
        assert target == 3
        assert seen[0].dtype == torch.uint8 and seen[0].dim() == 1
        assert value == os.path.getsize(jpeg_files[3])
        raw, t = D.JpegDataset(jpeg_files)[2]
        assert t == 0  # targets=None
        assert torch.equal(raw, fio.read_file(jpeg_files[2]))

    def test_decode_crop_transform(self, jpeg_files):
        ds = D.JpegDataset(jpeg_files, transform=DecodeRandomCrop(CROP, pad_if_needed=True))
        for i in range(len(ds)):
            img, _ = ds[i]
            assert img.shape == (3, CROP, CROP) and img.dtype == torch.uint8

    def test_bad_arguments(self, jpeg_files):
        with pytest.raises(ValueError, match="one entry per file"):
            D.JpegDataset(jpeg_files, targets=[0])
        with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip', got 'ignore'"):
            D.JpegDataset(jpeg_files, on_error="ignore")
        with pytest.raises(TypeError, match="single path"):
            D.JpegDataset(jpeg_files[0])

    @pytest.mark.parametrize("name", sorted(CORRUPT))
    def test_raise_names_the_file(self, tmp_path, jpeg_files, name):
        bad = _write(str(tmp_path), name, CORRUPT[name])
        ds = D.JpegDataset([jpeg_files[0], bad], transform=DecodeRandomCrop(CROP, pad_if_needed=True))
        with pytest.raises(fio.DecodeError, match=name) as info:
            ds[1]
        assert isinstance(info.value.__cause__, fio.DecodeError)
        assert "index 1" in str(info.value)

    def test_missing_file_raises_decode_error(self, tmp_path):
        ds = D.JpegDataset([str(tmp_path / "nope.jpg")])
        with pytest.raises(fio.DecodeError, match="nope.jpg") as info:
            ds[0]
        assert isinstance(info.value.__cause__, FileNotFoundError)

    def test_skip_is_deterministic_and_counted(self, tmp_path, jpeg_files):
        bad = _write(str(tmp_path), "text.jpg", CORRUPT["text.jpg"])
        files = jpeg_files[:3] + [bad] + jpeg_files[3:]
        ds = D.JpegDataset(files, targets=range(len(files)), transform=DecodeCenterCrop(CROP), on_error="skip")
        img, target = ds[3]
        assert target != 3 and torch.equal(img, ds[target][0])
        assert ds[3][1] == target  # same substitute every time
        assert ds.skipped == 2  # two samples replaced
        assert ds[0][1] == 0 and ds.skipped == 2
        ds.reset_skipped()
        assert ds.skipped == 0

    def test_skip_gives_up(self, tmp_path):
        bad = [_write(str(tmp_path), f"{i}.jpg", b"junk") for i in range(3)]
        ds = D.JpegDataset(bad, transform=DecodeCenterCrop(CROP), on_error="skip", max_skip_attempts=4)
        with pytest.raises(fio.DecodeError, match=r"0.jpg.*none of the 2 substitutes") as info:
            ds[0]
        assert isinstance(info.value.__cause__, fio.DecodeError) and "0.jpg" in str(info.value.__cause__)
        assert ds.skipped == 0  # nothing was replaced

    @pytest.mark.parametrize("n", [2, 3, 17, 100, 241, 256, 257])
    def test_substitutes_visit_every_other_index_once(self, n):
        ds = D.JpegDataset([f"f{i}.jpg" for i in range(n)], on_error="skip")
        for index in range(n):
            order = [ds.substitute(index, a) for a in range(n - 1)]
            assert sorted(order) == [i for i in range(n) if i != index], (n, index)

    @pytest.mark.parametrize("n", [17, 241, 256])
    def test_skip_with_the_first_half_unreadable(self, tmp_path, jpeg_files, n):
        # Half the indices are missing files; every index must still resolve, and
        # ``skipped`` counts replaced samples (not attempts).
        bad = n // 2
        files = [str(tmp_path / f"missing{i}.jpg") for i in range(bad)] + [jpeg_files[0]] * (n - bad)
        ds = D.JpegDataset(files, targets=range(n), on_error="skip")
        for index in range(n):
            data, target = ds[index]
            assert target >= bad and (index < bad or target == index)
        assert ds.skipped == bad

    def test_skip_finds_the_only_good_file(self, tmp_path, jpeg_files):
        n = 17
        files = [str(tmp_path / f"missing{i}.jpg") for i in range(n)]
        files[5] = jpeg_files[0]
        ds = D.JpegDataset(files, targets=range(n), on_error="skip")
        assert all(ds[i][1] == 5 for i in range(n))
        assert ds.skipped == n - 1

    def test_pickles(self, jpeg_files):
        ds = D.JpegDataset(jpeg_files, transform=DecodeCenterCrop(CROP), on_error="skip")
        ds2 = pickle.loads(pickle.dumps(ds))
        assert torch.equal(ds2[1][0], ds[1][0])


class TestJpegFolder:
    def test_imagefolder_conventions(self, folder_with_corrupt):
        ds = D.JpegFolder(folder_with_corrupt)
        assert ds.classes == ["a", "b"]
        assert ds.class_to_idx == {"a": 0, "b": 1}
        assert len(ds.samples) == len(ds) == len(SIZES) + 2
        assert [t for _, t in ds.samples] == [0] * 5 + [1] * 4
        assert ds.samples == sorted(ds.samples)
        assert ds.targets == [t for _, t in ds.samples]

    def test_nested_and_extensions(self, tmp_path, jpeg_files):
        with open(jpeg_files[0], "rb") as f:
            data = f.read()
        _write(str(tmp_path / "cat" / "deep"), "x.JPEG", data)
        _write(str(tmp_path / "cat"), "y.jpg", data)
        _write(str(tmp_path / "cat"), "notes.txt", b"x")
        _write(str(tmp_path / "dog"), "z.jpg", data)
        _write(str(tmp_path), "stray.jpg", data)  # ignored, as ImageFolder does
        ds = D.JpegFolder(tmp_path)
        names = [os.path.relpath(p, tmp_path) for p, _ in ds.samples]
        # ImageFolder's order: sorted(os.walk(class folder)), then sorted file names
        assert names == [os.path.join("cat", "y.jpg"), os.path.join("cat", "deep", "x.JPEG"),
                         os.path.join("dog", "z.jpg")]
        with pytest.warns(UserWarning, match=r"ignored image files: 1 \.jpeg"):
            assert len(D.JpegFolder(tmp_path, extensions=".jpg")) == 2

    def test_flat_folder_gives_target_zero(self, tmp_path, jpeg_files):
        for i, p in enumerate(jpeg_files[:3]):
            with open(p, "rb") as f:
                _write(str(tmp_path), f"{i}.jpg", f.read())
        ds = D.JpegFolder(tmp_path, transform=DecodeCenterCrop(CROP))
        assert ds.classes == [] and ds.class_to_idx == {}
        assert len(ds) == 3 and all(ds[i][1] == 0 for i in range(3))

    @pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
    def test_special_files_named_jpg_are_never_listed(self, tmp_path, jpeg_files):
        with open(jpeg_files[0], "rb") as f:
            data = f.read()
        # class layout: a FIFO and a directory named like JPEGs inside a class folder
        _write(str(tmp_path / "cls" / "a"), "good.jpg", data)
        os.mkfifo(tmp_path / "cls" / "a" / "f.jpg")
        (tmp_path / "cls" / "a" / "d.jpg").mkdir()
        ds = D.JpegFolder(tmp_path / "cls")
        assert [os.path.basename(p) for p in ds.files] == ["good.jpg"]
        assert ds[0][0].equal(fio.read_file(ds.files[0]))
        # flat layout: 3 JPEGs, a FIFO and a directory named x.jpg (which must not turn
        # the folder into class mode)
        flat = tmp_path / "flat"
        for i in range(3):
            _write(str(flat), f"{i}.jpg", data)
        os.mkfifo(flat / "f.jpg")
        (flat / "x.jpg").mkdir()
        ds = D.JpegFolder(flat)
        assert ds.classes == [] and [os.path.basename(p) for p in ds.files] == ["0.jpg", "1.jpg", "2.jpg"]

    @pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
    def test_dataset_refuses_a_fifo_without_opening_it(self, tmp_path, jpeg_files):
        import threading

        fifo = str(tmp_path / "f.jpg")
        os.mkfifo(fifo)
        # Should the dataset open the FIFO, this writer unblocks it (with EOF) after a
        # while, so a regression fails on the message instead of hanging the run.
        def writer():
            with open(fifo, "wb"):
                time.sleep(2)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        ds = D.JpegDataset([fifo, str(tmp_path)], on_error="raise")
        with pytest.raises(fio.DecodeError, match=r"f\.jpg.*not a regular file \(a FIFO\)"):
            ds[0]
        with pytest.raises(fio.DecodeError, match=r"not a regular file \(a directory\)"):
            ds[1]
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer's open return
        t.join(10)
        os.close(fd)
        assert not t.is_alive()

    def test_empty_folder(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="no files ending in"):
            D.JpegFolder(tmp_path)
        with pytest.raises(FileNotFoundError, match="not a directory"):
            D.JpegFolder(tmp_path / "missing")


# ------------------------------------------------------------------------- non-JPEG files


def _png_bytes(h, w, seed):
    import io

    import PIL.Image

    buf = io.BytesIO()
    PIL.Image.fromarray(photo_like(h, w, seed=seed)).save(buf, "PNG")
    return buf.getvalue()


def _pil_rgb(path, exif_transpose=False):
    """Independent full decode: Pillow, optionally EXIF-transposed, as uint8 [3, H, W]."""
    import PIL.Image
    import PIL.ImageOps

    with PIL.Image.open(path) as im:
        if exif_transpose:
            im = PIL.ImageOps.exif_transpose(im)
        return torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1)


def _window_reference(full, crop, seed):
    """The window DecodeRandomCrop draws for ``full``'s size under ``seed``, sliced from the
    padded full decode."""
    from collections import namedtuple

    torch.manual_seed(seed)
    info = namedtuple("Info", "height width")(full.shape[1], full.shape[2])
    pad, (top, left, h, w) = crop.get_params(info)
    padded = torch.nn.functional.pad(full, (pad[0], pad[2], pad[1], pad[3]), value=0)
    return padded[:, top:top + h, left:left + w]


class TestNonJpegFiles:
    @pytest.mark.parametrize("name", ["a.png", "renamed.JPEG"])
    def test_png_goes_through_the_counted_fallback(self, tmp_path, name):
        path = _write(str(tmp_path), name, _png_bytes(45, 60, seed=3))
        crop = DecodeRandomCrop(CROP, pad_if_needed=True)
        ds = D.JpegDataset([path], transform=crop)
        torch.manual_seed(7)
        with pytest.warns(UserWarning, match=r"is a PNG file; decoded in full"):
            img, _ = ds[0]
        assert torch.equal(img, _window_reference(_pil_rgb(path), crop, 7))
        torch.manual_seed(8)
        img2, _ = ds[0]  # warned once: a second warning would fail (warnings are errors)
        assert torch.equal(img2, _window_reference(_pil_rgb(path), crop, 8))
        assert ds.fallbacks == 2 and ds.skipped == 0

    def test_jpeg_only_refuses_and_names_the_file(self, tmp_path):
        path = _write(str(tmp_path), "x.jpg", _png_bytes(20, 20, seed=1))
        ds = D.JpegDataset([path], transform=DecodeCenterCrop(8), jpeg_only=True)
        with pytest.raises(fio.DecodeError, match=r"x\.jpg.*not a JPEG \(PNG data\) and jpeg_only=True"):
            ds[0]
        assert ds.fallbacks == 0

    def test_transform_without_equivalent_names_the_file(self, tmp_path):
        path = _write(str(tmp_path), "p.png", _png_bytes(20, 20, seed=1))
        ds = D.JpegDataset([path], transform=lambda data: data.numel())
        with pytest.raises(fio.DecodeError, match=r"p\.png.*a PNG file needs a full decode, and function has no"):
            ds[0]

    def test_truncated_png_is_a_decode_error(self, tmp_path):
        path = _write(str(tmp_path), "t.png", _png_bytes(40, 40, seed=2)[:200])
        ds = D.JpegDataset([path], transform=DecodeCenterCrop(8))
        with pytest.raises(fio.DecodeError, match=r"t\.png"):
            ds[0]

    def test_max_pixels(self, tmp_path, jpeg_files):
        png = _write(str(tmp_path), "big.png", _png_bytes(40, 40, seed=2))
        ds = D.JpegDataset([jpeg_files[0], png], transform=DecodeCenterCrop(8), max_pixels=1000)
        with pytest.raises(fio.DecodeError, match=r"img00\.jpg.*40x56 = 2240 pixels exceeds max_pixels=1000"):
            ds[0]
        with pytest.raises(fio.DecodeError, match=r"big\.png.*exceeds max_pixels=1000"):
            ds[1]
        with pytest.raises(ValueError, match="max_pixels must be"):
            D.JpegDataset([png], max_pixels=-1)

    def test_exif_orientation(self, tmp_path):
        import PIL.Image

        pil = PIL.Image.fromarray(photo_like(40, 56, seed=4))
        exif = PIL.Image.Exif()
        exif[0x0112] = 6  # rotate 90 degrees clockwise to display
        path = str(tmp_path / "rot.jpg")
        pil.save(path, "JPEG", quality=90, exif=exif.tobytes())
        crop = DecodeRandomCrop(CROP, pad_if_needed=True)
        plain = D.JpegDataset([path], transform=crop)
        torch.manual_seed(3)
        assert torch.equal(plain[0][0], _window_reference(fio.decode_jpeg(fio.read_file(path)), crop, 3))
        assert plain.fallbacks == 0  # default off, as torchvision
        rotated = D.JpegDataset([path], transform=crop, apply_exif_orientation=True)
        torch.manual_seed(3)
        with pytest.warns(UserWarning, match="EXIF-rotated JPEG"):
            img, _ = rotated[0]
        full = _pil_rgb(path, exif_transpose=True)
        assert full.shape == (3, 56, 40)
        assert torch.equal(img, _window_reference(full, crop, 3))
        assert rotated.fallbacks == 1

    def test_folder_lists_pngs_and_make_loader_decodes_them(self, tmp_path, jpeg_files):
        for i, p in enumerate(jpeg_files[:3]):
            with open(p, "rb") as f:
                _write(str(tmp_path / "jpg"), f"{i}.jpg", f.read())
        _write(str(tmp_path / "png"), "p.png", _png_bytes(50, 50, seed=5))
        _write(str(tmp_path / "png"), "q.gif", b"GIF89a")  # not listed by default: reported
        with pytest.warns(UserWarning, match=r"ignored image files: 1 \.gif"):
            ds = D.JpegFolder(tmp_path)
        assert [os.path.basename(p) for p in ds.files] == ["0.jpg", "1.jpg", "2.jpg", "p.png"]
        with pytest.warns(UserWarning, match=r"ignored image files: 1 \.gif, 1 \.png"):
            assert len(D.JpegFolder(tmp_path, jpeg_only=True)) == 3
        with pytest.warns(UserWarning):
            loader = D.make_loader(str(tmp_path), batch_size=4, num_workers=0, crop_size=CROP, device="cpu",
                                   shuffle=False)
        with pytest.warns(UserWarning, match="is a PNG file"):
            (images, targets), = list(loader)
        assert images.shape == (4, 3, CROP, CROP) and targets.tolist() == [0, 0, 0, 1]
        assert loader.loader.dataset.fallbacks == 1


# ------------------------------------------------------------------------- collate
# ------------------------------------------------------------------------- collate


class TestCollateUint8:
    def test_stacks(self):
        imgs = [torch.randint(0, 256, (3, 5, 4), dtype=torch.uint8) for _ in range(3)]
        images, targets = D.collate_uint8([(img, i + 1) for i, img in enumerate(imgs)])
        assert images.dtype == torch.uint8 and images.shape == (3, 3, 5, 4) and images.is_contiguous()
        assert torch.equal(images, torch.stack(imgs))
        assert targets.dtype == torch.int64 and targets.tolist() == [1, 2, 3]
        _, t = D.collate_uint8([(imgs[0], torch.tensor(7))])
        assert t.tolist() == [7]

    def test_errors(self):
        a = torch.zeros((3, 4, 4), dtype=torch.uint8)
        with pytest.raises(ValueError, match=r"^sample 1 of the batch: the per-sample transform gave \(3, 4, 5\) "
                                             r"torch.uint8, the batch's other images are \(3, 4, 4\) torch.uint8"):
            D.collate_uint8([(a, 0), (torch.zeros((3, 4, 5), dtype=torch.uint8), 0)])
        with pytest.raises(ValueError, match="empty batch"):
            D.collate_uint8([])
        with pytest.raises(TypeError, match="expects \\(image tensor, target\\) samples, got Tensor"):
            D.collate_uint8([a, a])

    def test_shared_memory_in_workers(self):
        ds = TensorDataset(torch.arange(6 * 12, dtype=torch.uint8).view(6, 3, 2, 2), torch.arange(6))
        loader = DataLoader(ds, batch_size=4, num_workers=1, collate_fn=D.collate_uint8,
                            multiprocessing_context="fork")
        batches = list(loader)
        assert [b[0].shape[0] for b in batches] == [4, 2]
        assert all(b[0].is_shared() for b in batches)
        assert torch.equal(torch.cat([b[0] for b in batches]), ds.tensors[0])
        images, _ = D.collate_uint8([ds[0], ds[1]])
        assert not images.is_shared()  # main process: plain memory


# ------------------------------------------------------------------------- batch transforms


def _yuv_batch_reference(x):
    return torch.stack([_yuv_reference(img.round().to(torch.uint8)) if x.dtype != torch.uint8
                        else _yuv_reference(img) for img in x])


class TestBatchTransforms:
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_yuv_scale_matches_formula(self, dtype):
        x = torch.randint(0, 256, (3, 3, 9, 13), dtype=torch.uint8)
        x[:, :, 0, 0] = 0  # a masked pixel
        out = D.BatchYuvScale()(x.to(dtype))
        assert out.dtype == torch.float32 and out.shape == x.shape
        torch.testing.assert_close(out, _yuv_batch_reference(x), rtol=0, atol=1e-6)
        assert torch.allclose(out[:, :, 0, 0], torch.tensor([0.0, 128 / 255, 128 / 255]), rtol=0, atol=1e-7)

    def test_convert_color_and_scale(self):
        x = torch.randint(0, 256, (2, 3, 7, 5), dtype=torch.uint8)
        torch.testing.assert_close(D.BatchConvertColor()(x), _yuv_batch_reference(x) * 255, rtol=0, atol=1e-4)
        assert torch.equal(D.BatchScale()(x), x.float() / 255)
        assert torch.equal(D.BatchScale()(x.double()), x.float() / 255)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_low_precision_output(self, dtype):
        x = torch.randint(0, 256, (2, 3, 6, 6), dtype=torch.uint8)
        out = D.BatchYuvScale(dtype)(x)
        assert out.dtype == dtype
        assert torch.equal(out, D.BatchYuvScale()(x).to(dtype))

    def test_torch_path_matches_cpu_kernels(self):
        # The CUDA path (plain torch ops) run on the CPU: same result as the Cython path.
        x = torch.randint(0, 256, (4, 3, 17, 11), dtype=torch.uint8)
        torch.testing.assert_close(_yuv_torch(x, 255.0), D.BatchYuvScale()(x), rtol=0, atol=1e-6)
        torch.testing.assert_close(_yuv_torch(x, None), D.BatchConvertColor()(x), rtol=0, atol=1e-4)

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_cuda_matches_cpu(self):
        x = torch.randint(0, 256, (4, 3, 17, 11), dtype=torch.uint8)
        torch.testing.assert_close(D.BatchYuvScale()(x.cuda()).cpu(), D.BatchYuvScale()(x), rtol=0, atol=1e-5)

    def test_buffer_reuse_never_overwrites_a_live_batch(self):
        f = D.BatchYuvScale(num_threads=1)
        x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
        y = torch.zeros_like(x)
        a = f(x)
        ptr = a.data_ptr()
        view = a[1, 0]
        del a
        b = f(y)  # the view still holds a's storage: a new buffer
        assert b.data_ptr() != ptr
        torch.testing.assert_close(view, D.BatchYuvScale()(x)[1, 0], rtol=0, atol=0)
        del view
        c = f(x)  # now a's buffer is free again
        assert c.data_ptr() == ptr
        assert torch.equal(b, D.BatchYuvScale(reuse_buffers=0)(y))
        kept = [f(x) for _ in range(5)]  # more live batches than the pool holds: all distinct
        assert len({t.data_ptr() for t in kept + [b, c]}) == 7
        assert all(torch.equal(t, c) for t in kept)
        g = pickle.loads(pickle.dumps(f))
        assert torch.equal(g(x), c)

    def test_one_source_for_the_coefficients(self):
        # The Cython kernel and the benchmark's torch pipelines take the tuple of
        # fastprep._kernels.coeffs; the JFIF values are written out here independently.
        from fastprep._kernels import _color
        from fastprep._kernels.coeffs import YUV_COEFFS
        from fastprep.bench import pipelines

        assert tuple(map(tuple, _color.COEFFS)) == YUV_COEFFS
        assert tuple(tuple(r) + (o,) for r, o in zip(pipelines.YUV_MATRIX, pipelines.YUV_OFFSET)) == YUV_COEFFS
        assert YUV_COEFFS == ((0.299, 0.587, 0.114, 0.0), (-0.16874, -0.33126, 0.5, 128.0),
                              (0.5, -0.41869, -0.08131, 128.0))  # JFIF 1.02 section 7

    def test_functional_out_writes_into_the_buffer(self):
        import fastprep.functional as F

        x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8)
        buf = torch.full((2, 3, 5, 7), -1.0)
        assert F.yuv_scale(x, out=buf, num_threads=1) is buf
        torch.testing.assert_close(buf, torch.stack([_yuv_reference(i) for i in x]), rtol=0, atol=1e-6)
        sbuf = torch.full((2, 3, 5, 7), -1.0)
        assert F.scale(x, out=sbuf) is sbuf and torch.equal(sbuf, x.float() / 255)
        with pytest.raises(ValueError, match=r"shape \(2, 3, 5, 7\), got \(2, 3, 5, 6\)"):
            F.yuv_scale(x, out=torch.empty((2, 3, 5, 6)))
        with pytest.raises(TypeError, match="out must be float32, got torch.float16"):
            F.scale(x, out=torch.empty((2, 3, 5, 7), dtype=torch.float16))
        with pytest.raises(ValueError, match="C-contiguous"):
            F.scale(x, out=torch.empty((2, 3, 7, 5)).transpose(-1, -2))
        with pytest.raises(TypeError, match="out must be a numpy.ndarray"):
            F.scale(x.numpy(), out=buf)
        with pytest.raises(ValueError, match="num_threads must be"):
            F.yuv_scale(x, num_threads=0)

    def test_buffer_reuse_does_not_read_reference_counts(self, monkeypatch):
        # CPython 3.14 reports lower reference counts (borrowed references on the
        # stack); a pool that trusted them would recycle a batch the caller still holds.
        import sys

        monkeypatch.setattr(sys, "getrefcount", lambda obj: 1)
        for f in (D.BatchYuvScale(num_threads=1), D.BatchScale(num_threads=1)):
            x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
            held = f(x)
            as_numpy = f(x).numpy()  # held only through a numpy view of the tensor
            expected = held.clone()
            for _ in range(4):
                f(torch.zeros_like(x))
            assert torch.equal(held, expected) and np.array_equal(as_numpy, expected.numpy())
            ptrs = {held.data_ptr(), as_numpy.ctypes.data}
            assert len(ptrs) == 2 and f(x).data_ptr() not in ptrs

    def test_buffer_pool_is_thread_safe(self):
        import threading

        f = D.BatchYuvScale(num_threads=1)
        x = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
        want = D.BatchYuvScale(reuse_buffers=0)(x)
        results, errors = [], []

        def work():
            try:
                for _ in range(50):
                    out = f(x)
                    results.append(out)  # held: no other thread may reuse it
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len({r.data_ptr() for r in results}) == len(results)
        assert all(torch.equal(r, want) for r in results)

    def test_batch_scale_buffer_reuse(self):
        f = D.BatchScale(num_threads=1)
        x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
        a = f(x)
        ptr = a.data_ptr()
        b = f(x)  # a is alive: a different buffer
        assert b.data_ptr() != ptr and torch.equal(a, x.float() / 255) and torch.equal(b, a)
        del a
        assert f(x.flip(0)).data_ptr() == ptr  # a's buffer is free again
        assert torch.equal(b, x.float() / 255)
        with pytest.raises(ValueError, match="num_threads must be"):
            D.BatchScale(num_threads=0)

    def test_old_names_are_batch_convert(self):
        x = torch.randint(0, 256, (2, 3, 6, 5), dtype=torch.uint8)
        for old, new in ((D.BatchYuvScale(torch.float16), D.BatchConvert("yuv", dtype=torch.float16)),
                         (D.BatchScale(), D.BatchConvert("rgb")),
                         (D.BatchConvertColor(), D.BatchConvert("yuv", scale=False))):
            assert isinstance(old, D.BatchConvert)
            assert torch.equal(old(x), new(x))
        assert torch.equal(D.BatchScale()(x[:, :1]), x[:, :1].float() / 255)  # any shape, as before
        # "rgb" takes 1 to 4 channels (a Grayscale(1) pipeline's batches), "yuv" 3
        assert torch.equal(D.BatchConvert("rgb")(x[:, :1]), x[:, :1].float() / 255)
        with pytest.raises(ValueError, match=r"\[N, C, H, W\] \(C 1 to 4\), got shape \(2, 6, 6, 5\)"):
            D.BatchConvert("rgb")(torch.cat([x, x], 1))
        with pytest.raises(ValueError, match=r"shape \(2, 1, 6, 5\)"):
            D.BatchConvert("yuv")(x[:, :1])
        with pytest.raises(ValueError, match="scale=False is the colour conversion alone"):
            D.BatchConvert("rgb", scale=False)
        with pytest.raises(ValueError, match="scale=False is the colour conversion alone"):
            D.BatchConvert("yuv", (0.5,) * 3, (0.2,) * 3, scale=False)

    def test_errors(self):
        with pytest.raises(ValueError, match="num_threads must be"):
            D.BatchYuvScale(num_threads=0)
        with pytest.raises(ValueError, match=r"\[N, 3, H, W\], got shape \(3, 4, 4\)"):
            D.BatchYuvScale()(torch.zeros((3, 4, 4), dtype=torch.uint8))
        with pytest.raises(ValueError, match="dtype must be"):
            D.BatchYuvScale(torch.int32)
        with pytest.raises(TypeError, match="got list"):
            D.BatchConvertColor()([1, 2])


# ------------------------------------------------------------------------- prefetcher


def _range_loader(n=10, batch_size=4, **kwargs):
    ds = TensorDataset(torch.arange(n * 3, dtype=torch.uint8).view(n, 3, 1, 1), torch.arange(n))
    return DataLoader(ds, batch_size=batch_size, collate_fn=D.collate_uint8, **kwargs)


def _check_epoch(pf, n=10, batch_size=4):
    got = [t.tolist() for _, t in pf]
    want = [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]
    assert got == want  # every batch once, in order, last partial batch included
    assert len(pf) == len(want)


class TestDevicePrefetcher:
    @pytest.mark.parametrize("kwargs", [
        {"num_workers": 0},
        {"num_workers": 2, "multiprocessing_context": "fork"},
        {"num_workers": 2, "multiprocessing_context": "fork", "persistent_workers": True},
    ], ids=["main", "fork", "fork-persistent"])
    def test_every_batch_once_in_order_and_break(self, kwargs):
        pf = D.DevicePrefetcher(_range_loader(**kwargs), "cpu")
        _check_epoch(pf)
        for k, _ in enumerate(pf):  # early break, then a full epoch again
            if k == 1:
                break
        _check_epoch(pf)
        _check_epoch(pf)

    def test_early_break_stops_the_workers(self):
        import multiprocessing

        before = set(multiprocessing.active_children())
        pf = D.DevicePrefetcher(_range_loader(num_workers=2), "cpu")
        for k, _ in enumerate(pf):
            if k == 0:
                assert len(set(multiprocessing.active_children()) - before) == 2
                break
        deadline = time.monotonic() + 10
        while set(multiprocessing.active_children()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not set(multiprocessing.active_children()) - before

    def test_batch_transform_and_device(self):
        pf = D.DevicePrefetcher(_range_loader(), torch.device("cpu"), batch_transform=D.BatchYuvScale())
        images, targets = next(iter(pf))
        assert images.dtype == torch.float32 and images.device.type == "cpu"
        assert targets.dtype == torch.int64
        raw = _range_loader().dataset.tensors[0][:4]
        torch.testing.assert_close(images, D.BatchYuvScale()(raw))

    def test_any_iterable(self):
        batches = [(torch.full((1, 3, 2, 2), i, dtype=torch.uint8), torch.tensor([i])) for i in range(3)]
        pf = D.DevicePrefetcher(batches, "cpu")
        assert [t.item() for _, t in pf] == [0, 1, 2] and len(pf) == 3
        assert list(D.DevicePrefetcher([], "cpu")) == []

    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    def test_cuda(self):
        pf = D.DevicePrefetcher(_range_loader(num_workers=2, pin_memory=True), "cuda",
                                batch_transform=D.BatchYuvScale())
        out = [(x.cpu(), t.cpu()) for x, t in pf]
        ref = [(D.BatchYuvScale()(x), t) for x, t in _range_loader()]
        for (a, ta), (b, tb) in zip(out, ref, strict=True):
            assert torch.equal(ta, tb)
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------- make_loader


def _replay(files, order_by_rng_stream, crop_size=CROP, ratio=0.25):
    """Reference samples for ``files``; ``order_by_rng_stream`` is a list of
    (seed, [file indices in the order that RNG stream processes them])."""
    crop = DecodeRandomCrop(crop_size, pad_if_needed=True)
    mask_transform = RandomMask(ratio)
    ref = {}
    for seed, indices in order_by_rng_stream:
        torch.manual_seed(seed)
        for i in indices:
            ref[i] = _reference_sample(files[i], crop, mask_transform)
    return ref


class TestMakeLoader:
    def test_end_to_end_main_process(self, jpeg_files):
        bs = 3
        # the DataLoader in this process: the samples draw from torch's default generator
        loader = D.make_loader(jpeg_files, batch_size=bs, num_workers=0, crop_size=CROP, shuffle=False,
                               device="cpu", generator=torch.Generator().manual_seed(0), engine="processes")
        assert isinstance(loader, D.DevicePrefetcher) and len(loader) == 3
        torch.manual_seed(7)
        batches = list(loader)
        ref = _replay(jpeg_files, [(7, range(len(jpeg_files)))])
        self._compare(batches, ref, bs)

    def test_end_to_end_workers(self, jpeg_files):
        # DataLoader hands batch k to worker k % num_workers; each worker's RNG is seeded
        # by _seed_worker, so the reference replays each worker's stream in order.
        bs, workers = 2, 2
        loader = D.make_loader(jpeg_files, batch_size=bs, num_workers=workers, crop_size=CROP, shuffle=False,
                               device="cpu", worker_init_fn=_seed_worker, multiprocessing_context="fork")
        batches = list(loader)
        n_batches = len(batches)
        streams = [(100 + w, [i for k in range(w, n_batches, workers)
                              for i in range(k * bs, min((k + 1) * bs, len(jpeg_files)))])
                   for w in range(workers)]
        self._compare(batches, _replay(jpeg_files, streams), bs)

    @staticmethod
    def _compare(batches, ref, bs):
        assert sum(x.shape[0] for x, _ in batches) == len(ref)
        masked_total = 0
        for k, (images, targets) in enumerate(batches):
            assert images.dtype == torch.float32 and images.shape[1:] == (3, CROP, CROP)
            assert targets.dtype == torch.int64 and targets.tolist() == [0] * images.shape[0]
            for j in range(images.shape[0]):
                want, mask = ref[k * bs + j]
                torch.testing.assert_close(images[j], want, rtol=0, atol=1e-5)
                masked_total += int(mask.sum())
        assert masked_total > 0  # the masks were really applied

    def test_folder_shuffle_seeded_and_dtype(self, tmp_path, jpeg_files):
        for i, p in enumerate(jpeg_files):
            with open(p, "rb") as f:
                _write(str(tmp_path / ("x" if i % 2 else "y")), f"{i}.jpg", f.read())

        def epoch():
            torch.manual_seed(3)
            return list(D.make_loader(str(tmp_path), batch_size=4, num_workers=0, crop_size=(16, 24),
                                      dtype=torch.bfloat16, device="cpu"))

        a, b = epoch(), epoch()
        assert len(a) == 2 and [x.shape[0] for x, _ in a] == [4, 3]
        assert all(x.dtype == torch.bfloat16 and x.shape[1:] == (3, 16, 24) for x, _ in a)
        assert sorted(torch.cat([t for _, t in a]).tolist()) == [0, 0, 0, 1, 1, 1, 1]
        for (x1, t1), (x2, t2) in zip(a, b, strict=True):
            assert torch.equal(x1, x2) and torch.equal(t1, t2)

    def test_no_mask_and_custom_transform(self, jpeg_files):
        loader = D.make_loader(jpeg_files, batch_size=8, num_workers=0, mask_ratio=0, shuffle=False, device="cpu",
                               transform=DecodeCenterCrop(CROP))
        (images, _), = list(loader)
        for j, path in enumerate(jpeg_files):
            want = DecodeCenterCrop(CROP)(path).float() / 255  # transform=: RGB by default
            torch.testing.assert_close(images[j], want, rtol=0, atol=1e-6)

    def test_decode_options_reach_the_decode(self, jpeg_files):
        t = D.default_transform(CROP, 0.25, max_pixels=1000, strict=True)
        assert t.crop.max_pixels == 1000 and t.crop.strict is True
        assert D.default_transform(CROP).crop.max_pixels == fio.DEFAULT_MAX_PIXELS
        loader = D.make_loader(jpeg_files, batch_size=2, num_workers=0, crop_size=CROP, device="cpu", max_pixels=1000)
        with pytest.raises(fio.DecodeError, match="exceeds max_pixels=1000"):
            next(iter(loader))
        with pytest.raises(ValueError, match="strict and max_scans configure"):
            D.make_loader(jpeg_files, num_workers=0, transform=DecodeCenterCrop(CROP), strict=True)

    def test_bad_source(self):
        with pytest.raises(TypeError, match="source must be"):
            D.make_loader(42)

    def test_raise_in_worker_names_file(self, folder_with_corrupt):
        loader = D.make_loader(folder_with_corrupt, batch_size=4, num_workers=1, crop_size=CROP, device="cpu",
                               multiprocessing_context="fork", shuffle=False)
        with pytest.raises(fio.DecodeError, match="empty.jpg"):
            list(loader)

    def test_skip_in_spawned_persistent_workers(self, folder_with_corrupt):
        # One spawn test: skips counted across processes via the shared counter, every
        # batch delivered, a second epoch on the same (persistent) workers.
        loader = D.make_loader(folder_with_corrupt, batch_size=3, num_workers=2, crop_size=CROP, device="cpu",
                               multiprocessing_context="spawn", persistent_workers=True, on_error="skip",
                               generator=torch.Generator().manual_seed(1))
        ds = loader.loader.dataset
        n = len(ds)
        probe = D.JpegFolder(folder_with_corrupt, transform=DecodeCenterCrop(CROP), on_error="skip")
        for i in range(n):
            probe[i]
        per_epoch = probe.skipped  # the substitutes are deterministic, so is the count
        assert per_epoch >= 2
        for epoch in (1, 2):
            batches = list(loader)
            assert sum(x.shape[0] for x, _ in batches) == n
            assert all(x.shape[1:] == (3, CROP, CROP) for x, _ in batches)
            assert ds.skipped == per_epoch * epoch
        targets = torch.cat([t for _, t in batches]).tolist()
        assert targets.count(0) + targets.count(1) == n


class TestLoaderOutputs:
    MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

    def _normalized(self, x):
        mean = torch.tensor(self.MEAN).view(1, 3, 1, 1)
        std = torch.tensor(self.STD).view(1, 3, 1, 1)
        return (x.double() / 255 - mean.double()) / std.double()

    def test_batch_convert_formulas(self):
        x = torch.randint(0, 256, (3, 3, 9, 7), dtype=torch.uint8)
        rgb = D.BatchConvert("rgb", self.MEAN, self.STD)(x)
        torch.testing.assert_close(rgb.double(), self._normalized(x), rtol=0, atol=2e-6)
        yuv = D.BatchConvert("yuv", self.MEAN, self.STD)(x)
        ref = torch.stack([_yuv_reference(i) for i in x]).double() * 255
        torch.testing.assert_close(yuv.double(), self._normalized(ref), rtol=0, atol=1e-5)
        torch.testing.assert_close(D.BatchConvert("rgb")(x), x.float() / 255, rtol=0, atol=0)
        plain = D.BatchConvert()(x)
        assert torch.equal(plain, D.BatchYuvScale()(x))
        cl = D.BatchConvert("rgb", dtype=torch.bfloat16, channels_last=True)(x)
        assert cl.dtype == torch.bfloat16 and cl.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(cl.float(), (x.float() / 255).to(torch.bfloat16).float())

    def test_batch_convert_rgb_cpu_kernel_recycles_only_free_buffers(self):
        convert = D.BatchConvert("rgb", self.MEAN, self.STD)
        a = torch.randint(0, 256, (4, 3, 16, 20), dtype=torch.uint8)
        b = 255 - a
        first = convert(a)
        kept = first.clone()
        second = convert(b)  # `first` is alive: its buffer must not be reused
        assert torch.equal(first, kept)
        assert first.data_ptr() != second.data_ptr()
        torch.testing.assert_close(second.double(), self._normalized(b), rtol=0, atol=2e-6)
        ptrs = {first.data_ptr(), second.data_ptr()}
        del first, kept, second
        assert convert(a).data_ptr() in ptrs  # a freed buffer comes back
        # the kernel path agrees with the plain torch formula (the non-CPU path) to float32 rounding
        gain = torch.tensor([1 / (255 * s) for s in self.STD]).view(1, 3, 1, 1)
        bias = torch.tensor([-m / s for m, s in zip(self.MEAN, self.STD)]).view(1, 3, 1, 1)
        torch.testing.assert_close(convert(a), torch.addcmul(bias, a.float(), gain), rtol=0, atol=5e-7)

    def test_batch_convert_errors(self):
        with pytest.raises(ValueError, match="color must be 'yuv' or 'rgb', got 'hsv'"):
            D.BatchConvert("hsv")
        with pytest.raises(ValueError, match="mean and std go together"):
            D.BatchConvert("rgb", mean=self.MEAN)
        with pytest.raises(ValueError, match="std must be nonzero"):
            D.BatchConvert("rgb", mean=0.5, std=0)
        with pytest.raises(ValueError, match="mean must have 3 values"):
            D.BatchConvert("rgb", mean=(0.5, 0.5), std=1)
        with pytest.raises(TypeError, match=r"must output uint8 images \[3, H, W\]; got a batch of torch.float32"):
            D.BatchConvert(require_uint8=True)(torch.zeros((1, 3, 2, 2)))

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_float_per_sample_transform_delivered_as_it_is(self, jpeg_files, engine):
        from torchvision.transforms import v2

        transform = v2.Compose([DecodeCenterCrop(CROP), v2.ToDtype(torch.float32, scale=True),
                                v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.3, 0.4])])
        loader = D.make_loader(jpeg_files, batch_size=len(jpeg_files), num_workers=0, device="cpu", shuffle=False,
                               transform=transform, engine=engine, dtype=torch.bfloat16)
        (images, _), = list(loader)
        want = torch.stack([transform(fio.read_file(f)) for f in jpeg_files]).to(torch.bfloat16)
        assert images.dtype == torch.bfloat16 and torch.equal(images, want)
        with pytest.raises(ValueError, match="converts its images to float itself .*mean, std of BatchOutput"):
            D.make_loader(jpeg_files, transform=transform, mean=0.5, std=0.2)

    def test_rgb_normalized_channels_last(self, jpeg_files):
        loader = D.make_loader(jpeg_files, batch_size=len(jpeg_files), num_workers=0, device="cpu", shuffle=False,
                               transform=DecodeCenterCrop(CROP), color="rgb", mean=self.MEAN, std=self.STD,
                               channels_last=True)
        (images, _), = list(loader)
        ref = torch.stack([DecodeCenterCrop(CROP)(fio.read_file(f)) for f in jpeg_files])
        assert images.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(images.double(), self._normalized(ref), rtol=0, atol=2e-6)

    @pytest.mark.parametrize("recipe", ["imagenet-train", "imagenet-eval"])
    def test_recipes(self, jpeg_files, recipe):
        from fastprep.transforms import DecodeRandomResizedCrop, DecodeResizeCenterCrop

        make = {"imagenet-train": lambda: DecodeRandomResizedCrop(224, flip_p=0.5),
                "imagenet-eval": lambda: DecodeResizeCenterCrop(256, 224)}[recipe]
        # the DataLoader in this process: the samples draw from torch's default generator
        loader = D.make_loader(jpeg_files[:4], batch_size=4, num_workers=0, device="cpu", shuffle=False,
                               recipe=recipe, engine="processes")
        torch.manual_seed(5)
        (images, _), = list(loader)
        torch.manual_seed(5)
        t = make()
        ref = torch.stack([t(fio.read_file(f)) for f in jpeg_files[:4]])
        assert images.shape == (4, 3, 224, 224) and images.dtype == torch.float32
        torch.testing.assert_close(images.double(), self._normalized(ref), rtol=0, atol=2e-6)
        with pytest.raises(ValueError, match="either recipe= or transform="):
            D.make_loader(jpeg_files, num_workers=0, recipe=recipe, transform=DecodeCenterCrop(CROP))
        with pytest.raises(ValueError, match="recipe must be one of"):
            D.make_loader(jpeg_files, num_workers=0, recipe="imagenet")


def _record_warm_state(worker_id):
    import fastprep.data.loader as L

    torch.utils.data.get_worker_info().dataset.warm_at_start = L._warmed
    torch.manual_seed(100 + worker_id)


class _WarmProbe(torch.utils.data.Dataset):
    """Reports whether the worker had the mask kernels loaded before its first sample."""

    def __init__(self):
        self.warm_at_start = None

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return torch.full((3, 2, 2), int(bool(self.warm_at_start)), dtype=torch.uint8), i


class TestWorkerStart:
    def test_spawn_runs_on_a_preloaded_forkserver(self, jpeg_files):
        import multiprocessing

        if "forkserver" not in multiprocessing.get_all_start_methods():
            pytest.skip("no forkserver on this platform")
        loader = D.make_loader(_WarmProbe(), batch_size=2, num_workers=1, device="cpu", shuffle=False,
                               multiprocessing_context="spawn", worker_init_fn=_record_warm_state)
        assert loader.loader.multiprocessing_context.get_start_method() == "forkserver"
        (images, targets), = list(loader)
        # the worker was forked from a server that had already loaded the kernels
        assert targets.tolist() == [0, 1]
        assert (images[:, 0] > 0.5 / 255).all()  # Y of pixel value 1, not 0
        plain = D.make_loader(_WarmProbe(), num_workers=1, device="cpu", multiprocessing_context="spawn",
                              spawn_via_forkserver=False)
        assert plain.loader.multiprocessing_context.get_start_method() == "spawn"
        ctx = multiprocessing.get_context("fork")
        assert D.make_loader(_WarmProbe(), num_workers=1, device="cpu",
                             multiprocessing_context=ctx).loader.multiprocessing_context is ctx


class TestPooledCollate:
    """Workers reuse their shared-memory batch buffers once the prefetcher released them."""

    def _batches(self, pf):
        return [(x.clone(), t.clone()) for x, t in pf]

    def test_make_loader_same_batches_and_buffers_reused(self, jpeg_files):
        files = jpeg_files * 6
        kw = dict(batch_size=4, num_workers=2, crop_size=32, device="cpu", shuffle=True,
                  multiprocessing_context="fork")
        pooled = D.make_loader(files, generator=torch.Generator().manual_seed(1), **kw)
        assert isinstance(pooled.loader.collate_fn, D.PooledCollate)
        plain = D.make_loader(files, generator=torch.Generator().manual_seed(1), **kw)
        plain.loader.collate_fn = D.collate_uint8
        for _ in range(2):  # two epochs, new workers each time
            got, want = self._batches(pooled), self._batches(plain)
            assert len(got) == len(want) == -(-len(files) // 4)
            for (a, ta), (b, tb) in zip(got, want):
                assert torch.equal(ta, tb) and torch.equal(a, b)
        # 12 batches per epoch over 2 workers, 4 buffers each: reuse happened
        assert int(pooled.loader.collate_fn.allocations.sum()) <= 2 * 2 * 4

    def test_buffers_held_by_the_consumer_are_never_reused(self, jpeg_files):
        ds = D.JpegDataset(jpeg_files * 4, transform=D.default_transform(16, 0.0))
        kw = dict(batch_size=2, num_workers=2, multiprocessing_context="fork")
        held = [b for b in DataLoader(ds, collate_fn=D.PooledCollate(2),  # nobody releases
                                      generator=torch.Generator().manual_seed(2), **kw)]
        want = list(DataLoader(ds, collate_fn=D.collate_uint8, generator=torch.Generator().manual_seed(2), **kw))
        assert len(held) == len(want)
        for (a, ta, *_), (b, tb) in zip(held, want):
            assert torch.equal(a, b) and torch.equal(ta, tb)

    def test_prefetcher_without_transform_keeps_its_buffers(self, jpeg_files):
        ds = D.JpegDataset(jpeg_files * 4, transform=D.default_transform(16, 0.0))
        kw = dict(batch_size=2, num_workers=2, multiprocessing_context="fork")
        loader = DataLoader(ds, collate_fn=D.PooledCollate(2), generator=torch.Generator().manual_seed(3), **kw)
        got = [x for x, _ in D.DevicePrefetcher(loader, "cpu")]  # yields the buffers themselves
        want = [x for x, _ in DataLoader(ds, collate_fn=D.collate_uint8, generator=torch.Generator().manual_seed(3),
                                         **kw)]
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))

    def test_early_break_then_full_epoch(self, jpeg_files):
        pf = D.make_loader(jpeg_files * 4, batch_size=2, num_workers=2, crop_size=16, device="cpu",
                           shuffle=False, multiprocessing_context="fork")
        for k, _ in enumerate(pf):
            if k == 1:
                break
        ref = D.make_loader(jpeg_files * 4, batch_size=2, num_workers=0, crop_size=16, device="cpu",
                            shuffle=False, mask_ratio=0)
        assert len(self._batches(pf)) == len(self._batches(ref))
        assert not bool(pf.loader.collate_fn.busy.any())  # all released after a full epoch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_make_loader_cuda_pooled_matches_cpu(jpeg_files):
    kw = dict(batch_size=4, num_workers=2, crop_size=32, shuffle=True, multiprocessing_context="fork")
    cuda = D.make_loader(jpeg_files * 6, device="cuda", generator=torch.Generator().manual_seed(4), **kw)
    cpu = D.make_loader(jpeg_files * 6, device="cpu", generator=torch.Generator().manual_seed(4), **kw)
    for _ in range(2):
        got = [(x.cpu(), t.cpu()) for x, t in cuda]
        want = [(x.clone(), t) for x, t in cpu]
        assert len(got) == len(want)
        for (a, ta), (b, tb) in zip(got, want):
            assert torch.equal(ta, tb)
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
