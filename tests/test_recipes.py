"""DecodeRandomResizedCrop, DecodeResize, DecodeResizeCenterCrop against torchvision v2 on the
full decode: the same RNG draws, the same pixels (dct_scaling=False) or a PSNR floor
(dct_scaling=True), and the transform contract (structures, pickling, errors)."""

import math
import pickle

import numpy as np
import PIL.Image
import pytest
import torch
from torchvision.transforms import v2

import fastprep.io as fio
from conftest import make_jpeg
from fastprep import decode_transforms as dt
from fastprep.resize import resize
from fastprep.transforms import DecodeRandomCrop, DecodeRandomResizedCrop, DecodeResize, DecodeResizeCenterCrop

PHOTO = make_jpeg("420", 150, 200, seed=4)
FULL = fio.decode_jpeg(PHOTO)
# v2 resizes uint8 natively (the kernel fastprep uses) on AVX2/AVX-512 and aarch64 CPUs,
# through float32 elsewhere (within 1 level of it).
TOL = 0 if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") else 1


def close(a, b, tol=TOL):
    return a.shape == b.shape and int((a.int() - b.int()).abs().max()) <= tol


def v2_window(t, height, width):
    """The window v2 RandomResizedCrop draws for an image of this size (from its make_params)."""
    return t.make_params([torch.empty(3, height, width, dtype=torch.uint8)])


class TestRandomResizedCropRNG:
    @pytest.mark.parametrize("hw", [(375, 500), (500, 375), (3000, 4000), (37, 1000), (1000, 9), (1, 1), (7, 3)])
    @pytest.mark.parametrize("scale,ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 1.0), (0.2, 5.0)),
                                             ((0.9, 1.0), (3.0, 4.0)), ((0.9, 1.0), (0.1, 0.2)),
                                             ((0.3, 0.3), (1.0, 1.0))])
    def test_same_window_as_v2(self, hw, scale, ratio):
        ours = DecodeRandomResizedCrop(224, scale=scale, ratio=ratio)
        theirs = v2.RandomResizedCrop(224, scale=scale, ratio=ratio)
        for seed in range(60):
            torch.manual_seed(seed)
            a = ours.get_params(*hw)
            after_a = torch.rand(1)
            torch.manual_seed(seed)
            b = v2_window(theirs, *hw)
            after_b = torch.rand(1)
            assert a == (b["top"], b["left"], b["height"], b["width"]), (seed, hw)
            assert torch.equal(after_a, after_b)  # the same number of draws

    def test_fallback_is_exercised(self):
        # A 1000x9 image with ratio (3, 4) never fits: the centred fallback after 10 attempts.
        t = DecodeRandomResizedCrop(8, scale=(0.9, 1.0), ratio=(3.0, 4.0))
        torch.manual_seed(0)
        assert t.get_params(1000, 9) == ((1000 - 3) // 2, 0, 3, 9)


class TestRandomResizedCrop:
    @pytest.mark.parametrize("size", [64, (48, 80), 224, (150, 200)])
    @pytest.mark.parametrize("antialias", [True, False])
    def test_equals_v2_without_dct_scaling(self, size, antialias):
        ours = DecodeRandomResizedCrop(size, antialias=antialias, dct_scaling=False)
        theirs = v2.RandomResizedCrop(size, antialias=antialias)
        for seed in range(15):
            torch.manual_seed(seed)
            a = ours(PHOTO)
            torch.manual_seed(seed)
            b = theirs(FULL)
            assert a.shape == b.shape and a.dtype == torch.uint8
            assert (a.int() - b.int()).abs().max() <= 1, seed

    @pytest.mark.parametrize("p", [0.5, 1.0, 0.3])
    def test_flip_matches_v2_compose(self, p):
        ours = DecodeRandomResizedCrop(64, dct_scaling=False, flip_p=p)
        theirs = v2.Compose([v2.RandomResizedCrop(64), v2.RandomHorizontalFlip(p)])
        flips = 0
        for seed in range(30):
            torch.manual_seed(seed)
            a = ours(PHOTO)
            after_a = torch.rand(1)
            torch.manual_seed(seed)
            b = theirs(FULL)
            after_b = torch.rand(1)
            assert (a.int() - b.int()).abs().max() <= 1, seed
            assert torch.equal(after_a, after_b)
            torch.manual_seed(seed)
            flips += not torch.equal(a, DecodeRandomResizedCrop(64, dct_scaling=False)(PHOTO))
        assert flips > 0 and (flips == 30) == (p == 1.0)

    def test_structures_and_pickle(self, tmp_path):
        path = tmp_path / "a.jpg"
        path.write_bytes(PHOTO)
        t = pickle.loads(pickle.dumps(DecodeRandomResizedCrop(32, flip_p=0.5)))
        torch.manual_seed(2)
        ref = t(PHOTO)
        for sample in [(str(path), 3), {"image": path, "label": "cat"}, (bytearray(PHOTO), torch.tensor(5))]:
            torch.manual_seed(2)
            out = t(sample)
            img = out[0] if isinstance(out, tuple) else out["image"]
            assert torch.equal(img, ref)
            rest = out[1] if isinstance(out, tuple) else out["label"]
            assert rest is (sample[1] if isinstance(sample, tuple) else sample["label"])
        torch.manual_seed(2)
        piped = v2.Compose([t, v2.ToDtype(torch.float32, scale=True)])(PHOTO)
        assert torch.allclose(piped, ref.float() / 255)

    @pytest.mark.parametrize("kwargs,match", [
        ({"size": 0}, "size must be positive"),
        ({"size": (3, 0)}, "size must be positive"),
        ({"size": 8, "ratio": (2.0, 1.0)}, r"ratio must be \(min, max\) with min <= max"),
        ({"size": 8, "ratio": (0.0, 1.0)}, "ratio values must be > 0"),
        ({"size": 8, "scale": (0.0, 1.0)}, "scale values must be > 0"),
        ({"size": 8, "scale": (0.5, 1.5)}, "scale values must be <= 1"),
        ({"size": 8, "scale": (0.9, 0.5)}, "min <= max"),
        ({"size": 8, "scale": (0.5, float("nan"))}, "finite"),
        ({"size": 8, "flip_p": 2}, "flip_p must be a number in"),
        ({"size": 8, "mode": "nope"}, "mode"),
        ({"size": 8, "max_pixels": -1}, "max_pixels"),
    ])
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            DecodeRandomResizedCrop(**kwargs)


class TestDecodedImageErrors:
    @pytest.mark.parametrize("cls,args", [(DecodeRandomResizedCrop, (8,)), (DecodeRandomCrop, (8,)),
                                          (DecodeResizeCenterCrop, ()), (DecodeResize, (8,))])
    @pytest.mark.parametrize("image", [
        PIL.Image.new("RGB", (20, 20)),
        np.zeros((20, 20, 3), np.uint8),
        torch.zeros(3, 20, 20, dtype=torch.uint8),
        torch.zeros(100, dtype=torch.float32),
    ])
    def test_decoded_image_says_encoded_bytes(self, cls, args, image):
        match = r"takes encoded JPEG bytes \(a path, bytes or a 1-D uint8 tensor\), not a decoded image"
        with pytest.raises(TypeError, match=match):
            cls(*args)(image)
        with pytest.raises(TypeError, match=match):
            cls(*args)((image, 1))

    def test_other_object(self):
        with pytest.raises(TypeError, match="got a int"):
            DecodeRandomResizedCrop(8)(5)

    def test_too_small_mentions_pad_if_needed(self):
        with pytest.raises(ValueError, match="pad_if_needed=True"):
            DecodeRandomCrop(1000)(PHOTO)

    def test_decode_error_names_the_file(self, tmp_path):
        path = tmp_path / "broken.jpg"
        path.write_bytes(b"not a jpeg at all")
        with pytest.raises(fio.DecodeError, match="broken.jpg"):
            DecodeRandomResizedCrop(8)(str(path))


class TestEval:
    @pytest.mark.parametrize("hw", [(150, 200), (200, 150), (97, 131), (40, 300)])
    @pytest.mark.parametrize("size,max_size", [(64, None), ((50, 70), None), (64, 80), (300, None)])
    @pytest.mark.parametrize("antialias", [True, False])
    def test_resize_equals_v2_without_dct_scaling(self, hw, size, max_size, antialias):
        data = make_jpeg("420", *hw, seed=11)
        full = fio.decode_jpeg(data)
        ours = DecodeResize(size, max_size=max_size, antialias=antialias, dct_scaling=False)(data)
        ref = v2.Resize(size, max_size=max_size, antialias=antialias)(full)
        assert close(ours, ref)

    @pytest.mark.parametrize("hw", [(150, 200), (200, 150), (97, 131), (40, 300), (375, 500)])
    @pytest.mark.parametrize("rs,cs", [(64, 56), (256, 224), ((60, 90), (40, 33)), (64, 80), (32, (10, 70))])
    @pytest.mark.parametrize("antialias", [True, False])
    def test_resize_center_crop_within_one_level_of_v2(self, hw, rs, cs, antialias):
        data = make_jpeg("420", *hw, seed=12)
        full = fio.decode_jpeg(data)
        ours = DecodeResizeCenterCrop(rs, cs, antialias=antialias, dct_scaling=False)(data)
        ref = v2.Compose([v2.Resize(rs, antialias=antialias), v2.CenterCrop(cs)])(full)
        assert ours.shape == ref.shape
        assert (ours.int() - ref.int()).abs().max() <= 1

    def test_eval_pickle_and_tuple(self):
        t = pickle.loads(pickle.dumps(DecodeResizeCenterCrop(64, 56)))
        img, label = t((PHOTO, 7))
        assert label == 7 and torch.equal(img, DecodeResizeCenterCrop(64, 56)(PHOTO))

    @pytest.mark.parametrize("kwargs,match", [({"resize_size": 0}, "size must be positive"),
                                              ({"crop_size": 0}, "crop_size must be positive"),
                                              ({"resize_size": "a"}, "size must be an int")])
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            DecodeResizeCenterCrop(**kwargs)


class TestResize:
    @pytest.mark.parametrize("out", [(224, 224), (100, 300), (400, 500), (375, 500)])
    @pytest.mark.parametrize("antialias", [True, False])
    def test_equals_v2_resize(self, out, antialias):
        img = fio.decode_jpeg(make_jpeg("420", 375, 500, seed=3))
        for src in (img, img[:, 10:300, 33:400], img.permute(1, 2, 0).contiguous().permute(2, 0, 1)):
            ref = v2.functional.resize(src, list(out), antialias=antialias)
            assert close(resize(src, out, antialias=antialias), ref)
            assert close(resize(src, out, antialias=antialias, hflip=True), ref.flip(-1))

    @pytest.mark.parametrize("channels", [1, 2, 4])
    def test_other_channel_counts_equal_v2(self, channels):
        img = torch.from_numpy(np.random.default_rng(channels).integers(0, 256, (channels, 90, 70), np.uint8))
        assert close(resize(img, (40, 33)), v2.functional.resize(img, [40, 33]))

    @pytest.mark.parametrize("mode,encoding,channels", [("GRAY", "420", 1), ("UNCHANGED", "cmyk", 4),
                                                        ("YCbCr", "444", 3)])
    def test_modes_through_the_recipe(self, mode, encoding, channels):
        data = make_jpeg(encoding, 120, 100, seed=1)
        full = fio.decode_jpeg(data, mode)
        torch.manual_seed(0)
        a = DecodeRandomResizedCrop(48, dct_scaling=False, mode=mode)(data)
        torch.manual_seed(0)
        b = v2.RandomResizedCrop(48)(full)
        assert a.shape == (channels, 48, 48) and close(a, b)

    def test_scale_gives_rows_of_the_full_resize(self):
        img = fio.decode_jpeg(make_jpeg("420", 375, 500, seed=3))
        full = resize(img, (256, 341))
        part = resize(img[:, :300, :400], (200, 270), scale=(256 / 375, 341 / 500))
        assert (part.int() - full[:, :200, :270].int()).abs().max() <= 1

    def test_bad_input(self):
        with pytest.raises(TypeError, match="uint8 tensor"):
            resize(torch.zeros(3, 4, 4), (2, 2))
        with pytest.raises(ValueError, match="size must be a pair"):
            resize(torch.zeros(3, 4, 4, dtype=torch.uint8), (0, 2))


def psnr(a, b):
    mse = ((a.double() - b.double()) ** 2).mean().item()
    return math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse)


DCT_HW = (1500, 2000)  # windows at 2/8 and 4/8 (1/8 needs a side of 1792)


class TestDCTScaling:
    HW = DCT_HW
    PHOTOS = [make_jpeg(enc, *DCT_HW, seed=s) for s, enc in enumerate(["420", "422", "420-progressive"])]

    def test_plan_uses_smaller_scale_and_keeps_size(self):
        num, (top, left, h, w) = dt.plan_scaled_window(3000, 4000, (100, 200, 2000, 2400), (224, 224))
        assert num == 1 and h >= 224 and w >= 224
        assert (top, left) == (math.floor(100 / 8 + 0.5), math.floor(200 / 8 + 0.5))  # halves up
        assert dt.plan_scaled_window(375, 500, (0, 0, 230, 230), (224, 224))[0] == 8

    def test_rrc_psnr_floor_per_scale(self):
        t_dct = DecodeRandomResizedCrop(224, dct_scaling=True)
        t_ref = v2.RandomResizedCrop(224)
        per_scale = {}
        for data in self.PHOTOS:
            full = fio.decode_jpeg(data)
            for seed in range(25):
                torch.manual_seed(seed)
                window = t_dct.get_params(*self.HW)
                num = dt.plan_scaled_window(*self.HW, window, (224, 224))[0]
                torch.manual_seed(seed)
                a = t_dct(data)
                torch.manual_seed(seed)
                b = t_ref(full)
                per_scale.setdefault(num, []).append(psnr(a, b))
        scaled = [v for num, vals in per_scale.items() if num < 8 for v in vals]
        assert {2, 4} <= set(per_scale), per_scale.keys()
        assert np.median(scaled) >= 30, {k: np.median(v) for k, v in per_scale.items()}
        assert min(per_scale.get(8, [math.inf])) >= 48.1  # unscaled windows: within 1 level

    @pytest.mark.parametrize("dct_scaling", [True, False])
    def test_packed_file_gives_the_same_pixels_from_fewer_intervals(self, dct_scaling):
        """On a file packed with restart intervals the recipes decode only the intervals
        their window needs (also DCT-scaled) and return exactly what they return on the
        original file."""
        from fastprep import _C

        orig = make_jpeg("420", 1200, 1600, seed=6)
        packed = fio.transcode_jpeg(orig)
        assert fio.jpeg_info(packed).restart_roi
        train = DecodeRandomResizedCrop(224, flip_p=0.5, dct_scaling=dct_scaling)
        scales = set()
        taken0 = _C.restart_stats()[0]
        for seed in range(12):
            torch.manual_seed(seed)
            scales.add(dt.plan_scaled_window(1200, 1600, train.get_params(1200, 1600), (224, 224))[0]
                       if dct_scaling else 8)
            torch.manual_seed(seed)
            a = train(orig)
            torch.manual_seed(seed)
            assert torch.equal(train(packed), a), seed
        assert _C.restart_stats()[0] - taken0 >= 12
        for evaluate in (DecodeResizeCenterCrop(256, 224, dct_scaling=dct_scaling),
                         DecodeResizeCenterCrop(300, 224, dct_scaling=dct_scaling)):
            taken0 = _C.restart_stats()[0]
            assert torch.equal(evaluate(packed), evaluate(orig))
            assert _C.restart_stats()[0] == taken0 + 1  # the packed decode only
        if dct_scaling:
            assert len(scales - {8}) >= 1, scales

    def test_eval_psnr_floor(self):
        big = make_jpeg("420", 1200, 1600, seed=5)
        full = fio.decode_jpeg(big)
        ref = v2.Compose([v2.Resize(256), v2.CenterCrop(224)])(full)
        assert psnr(DecodeResizeCenterCrop()(big), ref) >= 30
        assert psnr(DecodeResize(256)(big), v2.Resize(256)(full)) >= 30


class _Samples(torch.utils.data.Dataset):
    def __init__(self, datas, transform):
        self.datas, self.transform = datas, transform

    def __len__(self):
        return len(self.datas)

    def __getitem__(self, i):
        return self.transform((self.datas[i], i))


def test_dataloader_workers_train_recipe():
    datas = [make_jpeg("420", 60 + 7 * s, 80, seed=s) for s in range(4)] * 2
    ds = _Samples(datas, DecodeRandomResizedCrop(32, flip_p=0.5))

    def run():
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2,
                                             generator=torch.Generator().manual_seed(3))
        imgs, labels = zip(*loader)
        return torch.cat(imgs), torch.cat(labels)

    (a, la), (b, lb) = run(), run()
    assert a.shape == (8, 3, 32, 32) and a.dtype == torch.uint8
    assert torch.equal(a, b) and torch.equal(la, torch.arange(8)) and torch.equal(lb, la)
    assert not all(torch.equal(a[i], a[i + 4]) for i in range(4))  # workers draw differently
