"""Bicubic, nearest and nearest-exact resizing: ``fastprep::resize_aa``'s filters against
torch's own uint8 kernels (through ``torchvision.transforms.v2.functional.resize``), every
compiled ISA variant, windows of a virtual image, and v2 ``RandomResizedCrop`` / ``Resize``
(+ ``CenterCrop``) with those interpolations through the threads engine against torchvision
itself (the pipeline on ``torchvision.io.decode_jpeg`` under the sample's keyed RNG).

Inputs: random images with saturated stripes (bicubic's negative lobes overshoot [0, 255]),
and JPEGs made here from photo-like content: tiny, very wide, odd sizes, up- and downscaled.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import fastprep._ops  # noqa: F401
import fastprep.data as D
from fastprep import _C
from fastprep.bench.synthetic import encode_jpeg, photo_like
from fastprep.resize import resize, resize_window

from _torchvision_oracle import assert_threads_equal_torchvision

IM = v2.InterpolationMode
FILTERS = {"bicubic": 1, "nearest": 2, "nearest-exact": 3}
LEVELS = [lvl for lvl in (0, 1) if _C.native_isa(-1) >= lvl or lvl == 0]
SEED = 5


@pytest.fixture(autouse=True)
def _restore_isa():
    saved = _C.native_isa(-1)
    yield
    _C.native_isa(saved)


def _image(c, h, w, gen):
    img = torch.randint(0, 256, (c, h, w), dtype=torch.uint8, generator=gen)
    img[:, ::3] = 255
    img[:, :, 1::5] = 0
    return img


def _v2(img, size, mode, aa):
    return F.resize(img, list(size), interpolation=IM(mode), antialias=aa)


class TestKernel:
    SIZES = [(7, 5), (31, 47), (100, 3), (1, 9), (2, 2), (64, 400), (333, 17)]

    @pytest.mark.parametrize("level", LEVELS)
    @pytest.mark.parametrize("mode", list(FILTERS))
    def test_equals_torch(self, level, mode):
        _C.native_isa(level)
        gen = torch.Generator().manual_seed(1)
        for (H, W) in self.SIZES:
            for c in (1, 3, 4):
                img = _image(c, H, W, gen)
                for (h, w) in [(5, 3), (13, 90), (2 * H, 2 * W), (H, 2 * W + 1), (3 * H + 1, max(2, W // 3))]:
                    for aa in (True, False):
                        want = _v2(img, (h, w), mode, aa)
                        got = resize(img, (h, w), antialias=aa, interpolation=mode)
                        assert torch.equal(got, want), (level, mode, c, H, W, h, w, aa)

    @pytest.mark.parametrize("mode", list(FILTERS))
    def test_windows_equal_slices_of_full_resize(self, mode):
        rng = random.Random(7)
        gen = torch.Generator().manual_seed(7)
        for _ in range(60):
            c = rng.choice([1, 3, 4])
            H, W = rng.randint(4, 300), rng.randint(4, 300)
            oh, ow = rng.randint(2, 260), rng.randint(2, 260)
            aa = rng.random() < 0.7
            full = _image(c, H, W, gen).permute(1, 2, 0).contiguous().permute(2, 0, 1)
            ref_full = _v2(full, (oh, ow), mode, aa)
            t, l = rng.randint(0, oh - 1), rng.randint(0, ow - 1)
            h, w = rng.randint(1, oh - t), rng.randint(1, ow - l)
            s_h, s_w = (1.0 if oh == H else oh / H), (1.0 if ow == W else ow / W)
            y0 = min(max(int(t / s_h) - int(4 / s_h) - 3, 0), H - 1)
            y1 = max(min(int((t + h) / s_h) + int(4 / s_h) + 3, H), y0 + 1)
            x0 = min(max(int(l / s_w) - int(4 / s_w) - 3, 0), W - 1)
            x1 = max(min(int((l + w) / s_w) + int(4 / s_w) + 3, W), x0 + 1)
            got = resize_window(full[:, y0:y1, x0:x1], (H, W), (y0, x0), (oh, ow), (t, l, h, w), antialias=aa,
                                interpolation=mode)
            assert torch.equal(got, ref_full[:, t:t + h, l:l + w]), (mode, c, H, W, oh, ow, aa, t, l, h, w)

    def test_errors(self):
        img = torch.zeros(3, 8, 8, dtype=torch.uint8)
        with pytest.raises(ValueError, match="interpolation must be one of .* got 'lanczos'"):
            resize(img, (4, 4), interpolation="lanczos")
        with pytest.raises(ValueError, match="takes 1, 3 or 4 channels, got 2"):
            resize(torch.zeros(2, 8, 8, dtype=torch.uint8), (4, 4), interpolation="bicubic")
        with pytest.raises(ValueError, match="filter must be 0 .* got 7"):
            torch.ops.fastprep.resize_aa(img.permute(1, 2, 0).contiguous().permute(2, 0, 1), (4, 4), (0, 0, 4, 4),
                                         (8, 8), (0, 0), (0.0, 0.0), True, False, 7)

    def test_window_must_cover_the_bicubic_support(self):
        full = torch.zeros(40, 40, 3, dtype=torch.uint8).permute(2, 0, 1)
        # bilinear output rows 10..12 of a 40 -> 20 resize read rows 19..26; bicubic reads 17..28
        with pytest.raises(ValueError, match="outside the given window"):
            resize_window(full[:, 19:27], (40, 40), (19, 0), (20, 20), (10, 0, 3, 20), interpolation="bicubic")


# ---------------------------------------------------------------------------------------
# v2 pipelines through the threads engine, against torchvision itself

SHAPES = [(3, 5), (1, 1), (9, 640), (37, 71), (120, 90), (211, 163)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("resample")
    for i, (h, w) in enumerate(SHAPES):
        with open(os.path.join(root, f"{i:02d}.jpg"), "wb") as f:
            f.write(encode_jpeg(photo_like(h, w, seed=40 + i), quality=85))
    return str(root)


def _check(folder, transform):
    assert_threads_equal_torchvision(folder, transform, SEED, len(SHAPES))


# Each mode in its accepted forms: the enum, its string value, Pillow's int constant.
MODES = [IM.BICUBIC, "bicubic", 3, IM.NEAREST, 0, IM.NEAREST_EXACT, "nearest-exact"]


class TestPipelines:
    @pytest.mark.parametrize("mode", MODES, ids=repr)
    def test_random_resized_crop(self, folder, mode):
        _check(folder, v2.Compose([v2.RandomResizedCrop(48, interpolation=mode), v2.RandomHorizontalFlip()]))

    @pytest.mark.parametrize("antialias", [False, None])
    def test_random_resized_crop_without_antialias(self, folder, antialias):
        _check(folder, v2.Compose([v2.RandomResizedCrop((33, 57), scale=(0.3, 1.0), interpolation=IM.BICUBIC,
                                                        antialias=antialias)]))

    @pytest.mark.parametrize("mode", [IM.BICUBIC, IM.NEAREST, IM.NEAREST_EXACT], ids=repr)
    @pytest.mark.parametrize("antialias", [True, False])
    def test_resize_to_size(self, folder, mode, antialias):
        _check(folder, v2.Compose([v2.Resize((29, 300), interpolation=mode, antialias=antialias)]))

    @pytest.mark.parametrize("mode", [IM.BICUBIC, "nearest", IM.NEAREST_EXACT], ids=repr)
    @pytest.mark.parametrize("sizes", [(64, 56), (30, 41), ([23], (9, 20))], ids=repr)
    def test_resize_center_crop(self, folder, mode, sizes):
        _check(folder, v2.Compose([v2.Resize(sizes[0], interpolation=mode), v2.CenterCrop(sizes[1])]))

    def test_lanczos_falls_back_with_its_reason(self, folder):
        loader = D.make_loader(folder, transform=v2.Compose([v2.RandomResizedCrop(32, interpolation=IM.LANCZOS)]),
                               seed=SEED, batch_size=2, num_workers=1, device="cpu")
        assert loader.engine != "threads"


class TestAffinePipelines:
    """v2.RandomAffine / RandomRotation after the geometry, through the threads engine."""

    @pytest.mark.parametrize("step", [
        v2.RandomAffine(25, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=(-8, 8, -3, 3), fill=(10, 128, 250)),
        v2.RandomAffine((-5, 5), interpolation=v2.InterpolationMode.BILINEAR, center=(7, 3.5)),
        v2.RandomRotation(30, interpolation="bilinear", fill=99),
        v2.RandomRotation((-180, 180), center=[20, 10]),
    ], ids=repr)
    def test_against_torchvision(self, folder, step):
        _check(folder, v2.Compose([v2.RandomResizedCrop((40, 36), interpolation=IM.BICUBIC), step,
                                   v2.RandomHorizontalFlip()]))

    def test_expand_falls_back_with_its_reason(self, folder):
        loader = D.make_loader(folder, transform=v2.Compose([v2.CenterCrop(8), v2.RandomRotation(10, expand=True)]),
                               seed=SEED, batch_size=2, num_workers=1, device="cpu")
        assert loader.engine != "threads" and "expand=True" in loader.engine_reason
