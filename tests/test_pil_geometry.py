"""PIL-exact geometry and blur kernels (csrc/ops/pil_geometry.cpp) against the installed Pillow.

The oracles are Pillow's own calls: ``Image.transform(size, AFFINE, data, resample, fillcolor)``,
``Image.rotate(angle, resample, center=..., fillcolor=...)`` and
``Image.filter(ImageFilter.GaussianBlur(radius))``, on "L" and "RGB" images of photo-like and
random pixels, tiny, very wide and odd sizes. The fill bytes a kernel receives are Pillow's ink
of the fill colour (``Image.new(mode, (1, 1), fillcolor)``).
"""

from __future__ import annotations

import math

import numpy as np
import PIL.Image
import pytest
import torch
from PIL import ImageFilter

from fastprep import _ops  # noqa: F401  (registers torch.ops.fastprep.*)
from fastprep.bench.synthetic import photo_like

RESAMPLES = {"NEAREST": 0, "BILINEAR": 2, "BICUBIC": 3}
#: (h, w): tiny, one row / column, very wide and tall, odd, square
SIZES = [(1, 1), (1, 7), (9, 1), (3, 2000), (2000, 3), (37, 53), (64, 64), (31, 30), (2, 2), (120, 97)]


def _array(h, w, c, seed):
    if seed % 2:
        arr = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    else:
        arr = photo_like(h, w, seed=seed)
    return arr[..., :c]


def _pil(arr):
    return PIL.Image.fromarray(arr[..., 0], "L") if arr.shape[2] == 1 else PIL.Image.fromarray(arr, "RGB")


def _ink(mode, fillcolor):
    """The bytes Pillow fills with: what ``Image.new(mode, size, fillcolor)`` holds (0 for None)."""
    return [float(v) for v in np.asarray(PIL.Image.new(mode, (1, 1), fillcolor)).reshape(-1)]


def _kernel(arr, name, ints, floats):
    t = torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1)
    out = torch.ops.fastprep.apply_pixel_kernel(t, name, list(ints), [float(v) for v in floats])
    return out.permute(1, 2, 0).numpy()


def _matrix(rng, w, h, kind):
    """Inverse affine data as torchvision's F.affine hands it to Pillow (its center (w/2, h/2)),
    or a pure scale, or coefficients far outside the image (the float paths of NEAREST)."""
    from torchvision.transforms.functional import _get_inverse_affine_matrix

    if kind == "scale":
        return [float(rng.uniform(-2, 2)), 0.0, float(rng.uniform(-w, w)), 0.0, float(rng.uniform(-2, 2)),
                float(rng.uniform(-h, h))]
    if kind == "far":
        return [float(v) for v in rng.uniform(-3, 3, 6) * np.array([1, 1, 40000, 1, 1, 40000])]
    angle = float(rng.uniform(-180, 180)) if kind != "shear" else 0.0
    translate = [int(round(rng.uniform(-0.3, 0.3) * w)), int(round(rng.uniform(-0.3, 0.3) * h))]
    scale = float(rng.uniform(0.6, 1.5)) if kind == "full" else 1.0
    shear = [float(rng.uniform(-40, 40)), float(rng.uniform(-40, 40))] if kind in ("full", "shear") else [0.0, 0.0]
    return _get_inverse_affine_matrix([w * 0.5, h * 0.5], angle, translate, scale, shear)


FILLS = [None, 0, 17, (200, 10, 255), (3,)]


def _fill_for(fill, c):
    if isinstance(fill, tuple) and c == 1:
        return fill[0]
    if isinstance(fill, tuple) and len(fill) == 1:
        return fill * c
    return fill


def _check_affine(arr, data, resample, fill):
    c = arr.shape[2]
    im = _pil(arr)
    fill = _fill_for(fill, c)
    want = np.asarray(im.transform(im.size, PIL.Image.Transform.AFFINE, data, PIL.Image.Resampling[resample],
                                   fillcolor=fill)).reshape(arr.shape)
    ink = _ink(im.mode, fill)
    got = _kernel(arr, "pil_affine", [RESAMPLES[resample], len(ink)], [*data, *ink])
    assert np.array_equal(got, want), (f"{resample} {arr.shape} {data} fill={fill}: "
                                       f"{(got != want).any(axis=2).sum()} pixels differ")


class TestAffine:
    @pytest.mark.parametrize("resample", sorted(RESAMPLES))
    @pytest.mark.parametrize("c", [1, 3])
    def test_equals_pillow(self, resample, c):
        rng = np.random.default_rng(1)
        for k, (h, w) in enumerate(SIZES):
            arr = _array(h, w, c, k)
            for j, kind in enumerate(("full", "shear", "rotate", "scale", "far")):
                _check_affine(arr, _matrix(rng, w, h, kind), resample, FILLS[(k + j) % len(FILLS)])

    def test_identity_and_pure_translation(self):
        arr = _array(20, 30, 3, 2)
        for resample in RESAMPLES:
            _check_affine(arr, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0], resample, None)
            _check_affine(arr, [1.0, 0.0, -5.0, 0.0, 1.0, 7.0], resample, (1, 2, 3))

    @pytest.mark.slow
    @pytest.mark.parametrize("resample", sorted(RESAMPLES))
    def test_sweep(self, resample):
        rng = np.random.default_rng(11)
        for k in range(300):
            h, w = (int(v) for v in rng.integers(1, 90, 2))
            c = 1 if k % 3 == 0 else 3
            kind = ("full", "shear", "rotate", "scale", "far")[k % 5]
            _check_affine(_array(h, w, c, k), _matrix(rng, w, h, kind), resample, FILLS[k % len(FILLS)])

    @pytest.mark.parametrize("ints, floats, match", [
        ([1, 1], [1, 0, 0, 0, 1, 0, 0], "resample must be"),
        ([0, 2], [1, 0, 0, 0, 1, 0, 0, 0], "fill values"),
        ([0, 1], [1, 0, 0, 0, 1, 0, 256], "whole numbers"),
        ([0, 1], [1, 0, 0, 0, 1, 0, 1.5], "whole numbers"),
    ])
    def test_bad_parameters(self, ints, floats, match):
        with pytest.raises(ValueError, match=match):
            _kernel(_array(5, 5, 3, 0), "pil_affine", ints, floats)

    def test_float_image_refused(self):
        with pytest.raises(TypeError, match="uint8"):
            torch.ops.fastprep.apply_pixel_kernel(torch.zeros(3, 4, 4), "pil_affine", [0, 1], [1, 0, 0, 0, 1, 0, 0])


def _check_rotate(arr, angle, resample, fill, center=None):
    c = arr.shape[2]
    im = _pil(arr)
    fill = _fill_for(fill, c)
    want = np.asarray(im.rotate(angle, PIL.Image.Resampling[resample], center=center, fillcolor=fill))
    ink = _ink(im.mode, fill)
    cx, cy = center if center is not None else (0.0, 0.0)
    got = _kernel(arr, "pil_rotate", [RESAMPLES[resample], len(ink), int(center is not None)],
                  [angle, cx, cy, *ink])
    assert np.array_equal(got, want.reshape(arr.shape)), f"{resample} {arr.shape} angle={angle} center={center}"


class TestRotate:
    ANGLES = [0.0, 90.0, 180.0, 270.0, -90.0, 360.0, 450.0, 30.0, -17.3, 1e-9, 89.99999, 135.0, 719.5, -180.0]

    @pytest.mark.parametrize("resample", sorted(RESAMPLES))
    @pytest.mark.parametrize("c", [1, 3])
    def test_equals_pillow(self, resample, c):
        for k, (h, w) in enumerate(SIZES):
            arr = _array(h, w, c, k)
            for j, angle in enumerate(self.ANGLES):
                _check_rotate(arr, angle, resample, FILLS[(k + j) % len(FILLS)])

    @pytest.mark.parametrize("resample", sorted(RESAMPLES))
    def test_center(self, resample):
        arr = _array(33, 40, 3, 4)
        for angle in (0.0, 90.0, 180.0, 23.5, -61.0):
            for center in ((0, 0), (10, 30), (39.5, 2.25)):
                _check_rotate(arr, angle, resample, (9, 8, 7), center=center)

    @pytest.mark.slow
    @pytest.mark.parametrize("resample", sorted(RESAMPLES))
    def test_sweep(self, resample):
        rng = np.random.default_rng(5)
        for k in range(300):
            h, w = (int(v) for v in rng.integers(1, 80, 2))
            if k % 4 == 0:
                w = h
            angle = float(rng.uniform(-400, 400)) if k % 5 else float(rng.integers(-4, 5) * 90)
            _check_rotate(_array(h, w, 1 if k % 3 == 0 else 3, k), angle, resample, FILLS[k % len(FILLS)])

    def test_infinite_angle_refused(self):
        with pytest.raises(ValueError, match="finite"):
            _kernel(_array(4, 4, 3, 0), "pil_rotate", [0, 1, 0], [math.inf, 0, 0, 0])


def _check_blur(arr, radius):
    want = np.asarray(_pil(arr).filter(ImageFilter.GaussianBlur(radius))).reshape(arr.shape)
    rx, ry = radius if isinstance(radius, tuple) else (radius, radius)
    got = _kernel(arr, "pil_gaussian_blur", [3], [rx, ry])
    assert np.array_equal(got, want), f"{arr.shape} radius={radius}: {(got != want).sum()} values differ"


class TestGaussianBlur:
    RADII = [0, 0.0, 0.1, 0.5, 1, 1.7, 2.0, 3.3, 10.0, 50.0, (0, 2.5), (1.5, 0), (0.3, 7.0), -2.0]

    @pytest.mark.parametrize("c", [1, 3])
    def test_equals_pillow(self, c):
        for k, (h, w) in enumerate(SIZES):
            arr = _array(h, w, c, k)
            for radius in self.RADII:
                _check_blur(arr, radius)

    def test_self_supervised_radii(self):
        """The repos' draw: ``random.uniform(0.1, 2.0)`` on photo-sized images."""
        rng = np.random.default_rng(3)
        arr = _array(224, 224, 3, 6)
        for _ in range(8):
            _check_blur(arr, float(rng.uniform(0.1, 2.0)))

    @pytest.mark.slow
    def test_sweep(self):
        rng = np.random.default_rng(9)
        for k in range(300):
            h, w = (int(v) for v in rng.integers(1, 120, 2))
            radius = float(rng.uniform(0, 4)) if k % 4 else float(rng.uniform(0, 60))
            _check_blur(_array(h, w, 1 if k % 3 == 0 else 3, k), radius)

    @pytest.mark.parametrize("ints, floats, match", [([0], [1, 1], "passes"), ([3], [math.nan, 1], "finite")])
    def test_bad_parameters(self, ints, floats, match):
        with pytest.raises(ValueError, match=match):
            _kernel(_array(5, 5, 3, 0), "pil_gaussian_blur", ints, floats)
