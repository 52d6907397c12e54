"""Native pixel kernels (csrc/ops/*.cpp) against torchvision v2's functional, bit for bit:
``torch.ops.fastprep.apply_pixel_kernel(image, name, ints, floats, variant)`` with variant 0
(what runs), 1 (the ATen reference) and 2 (the fast kernel, where there is one)."""

import math

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

import fastprep  # noqa: F401  (registers torch.ops.fastprep.*)
from fastprep._kernels import isa


def apply(image, name, ints=(), floats=(), variant=0):
    return torch.ops.fastprep.apply_pixel_kernel(image, name, list(ints), [float(v) for v in floats], variant)


def variants(name):
    """The variants to compare: 0 and 1, and 2 when the kernel has a fast one."""
    status = torch.ops.fastprep.pixel_kernel_info(name).split("\t")[1]
    return (0, 1, 2) if status != "reference" else (0, 1)


def images(rng, sizes, channels=(1, 3)):
    """uint8 [C, H, W] images: noise, mostly flat, two-level, constant, and the extremes."""
    out = []
    for k, (h, w) in enumerate(sizes):
        c = channels[k % len(channels)]
        kind = k % 5
        if kind == 0:
            img = rng.integers(0, 256, (c, h, w))
        elif kind == 1:
            img = np.where(rng.random((c, h, w)) < 0.1, rng.integers(0, 256, (c, h, w)), 128)
        elif kind == 2:
            img = np.where(rng.random((c, h, w)) < 0.5, 200, 40)
        elif kind == 3:
            img = np.full((c, h, w), int(rng.integers(0, 256)))
        else:
            img = np.where(rng.random((c, h, w)) < 0.5, 255, 0)
        out.append(torch.from_numpy(img.astype(np.uint8)))
    return out


SIZES = [(1, 1), (2, 5), (3, 3), (5, 2), (7, 9), (16, 16), (31, 17), (37, 41), (64, 67), (120, 97), (9, 120),
         (33, 33)]


class TestSharpnessKernel:
    """adjust_sharpness: the integer convolution of the fast kernel is the rounded float32
    convolution whatever ATen's order of summation (csrc/ops/sharpness.cpp)."""

    def test_fast_kernel_is_in_use(self):
        assert torch.ops.fastprep.pixel_kernel_info("adjust_sharpness").split("\t")[1] == "fast"

    def test_equals_torchvision(self):
        rng = np.random.default_rng(0)
        # RandomAdjustSharpness takes any factor >= 0; the auto-augments 1 +- float32 magnitudes
        factors = [0.0, 1.0, 2.0, 0.5, 1.0 + float(np.float32(0.9)), 1.0 - float(np.float32(0.99)), 7.3, 100.0]
        for k, img in enumerate(images(rng, SIZES)):
            for factor in factors[k % 3::3] + [float(rng.uniform(0, 3))]:
                expected = F.adjust_sharpness(img, factor)
                for variant in variants("adjust_sharpness"):
                    got = apply(img, "adjust_sharpness", floats=[factor], variant=variant)
                    assert torch.equal(got, expected), (tuple(img.shape), factor, variant)

    def test_every_isa_variant_of_the_fast_kernel(self):
        rng = np.random.default_rng(5)
        imgs = images(rng, [(37, 41), (9, 70), (16, 16)])
        try:
            for name in isa.supported_isas():
                isa.set_isa(name)
                for img in imgs:
                    for factor in (0.0, 0.6, 1.0 + float(np.float32(0.99))):
                        got = apply(img, "adjust_sharpness", floats=[factor], variant=2)
                        assert torch.equal(got, F.adjust_sharpness(img, factor)), (name, tuple(img.shape), factor)
        finally:
            isa.set_isa("auto")

    def test_every_neighbourhood_sum(self):
        # One 3x3 block per k = ring + 5 * centre in 0..3315, side by side: the block centres
        # meet every rounding of k / 13.
        ks = np.arange(0, 13 * 255 + 1)
        centre = np.minimum(255, ks // 5)
        ring = ks - 5 * centre
        blocks = np.zeros((len(ks), 3, 3), dtype=np.int64)
        neighbours = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1), (2, 2)]
        for n, (y, x) in enumerate(neighbours):
            blocks[:, y, x] = ring // 8 + (n < ring % 8)
        blocks[:, 1, 1] = centre
        img = torch.from_numpy(blocks.transpose(1, 0, 2).reshape(1, 3, -1).astype(np.uint8))
        for factor in (0.0, 0.37, 1.5):
            expected = F.adjust_sharpness(img, factor)
            for variant in variants("adjust_sharpness"):
                assert torch.equal(apply(img, "adjust_sharpness", floats=[factor], variant=variant), expected)

    def test_four_channels_raise_as_torchvision(self):
        img = torch.zeros((4, 8, 8), dtype=torch.uint8)
        with pytest.raises(TypeError, match="1 or 3 channels"):
            F.adjust_sharpness(img, 0.5)
        with pytest.raises(TypeError, match="1 or 3 channels"):
            apply(img, "adjust_sharpness", floats=[0.5])


class TestGaussianBlurKernel:
    """gaussian_blur: ATen's reference (the dense 2-D kernel, reflect padding, conv2d)."""

    def test_reference_only(self):
        assert variants("gaussian_blur") == (0, 1)

    @pytest.mark.parametrize("threads", [1, 2])
    def test_equals_torchvision(self, threads):
        rng = np.random.default_rng(1)
        kernel_sizes = [(1, 1), (3, 3), (5, 5), (3, 7), (9, 1), (23, 23), (11, 5)]
        sizes = [(h, w) for h, w in SIZES if min(h, w) >= 12] + [(12, 15), (40, 23), (224, 30)]
        previous = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            for k, img in enumerate(images(rng, sizes)):
                kx, ky = kernel_sizes[k % len(kernel_sizes)]
                # GaussianBlur's sigma is a float32 draw, the default sigma (0.1, 2.0) or wider
                sigma = float(torch.empty(1).uniform_(0.1, 5.0, generator=torch.Generator().manual_seed(k)))
                expected = F.gaussian_blur(img, [kx, ky], [sigma, sigma])
                got = apply(img, "gaussian_blur", ints=[kx, ky], floats=[sigma, sigma])
                assert torch.equal(got, expected), (tuple(img.shape), kx, ky, sigma)
        finally:
            torch.set_num_threads(previous)

    def test_kernel_larger_than_the_image_raises_as_torchvision(self):
        img = torch.zeros((3, 3, 30), dtype=torch.uint8)
        with pytest.raises(RuntimeError, match="Padding size"):
            F.gaussian_blur(img, [7, 7], [1.0, 1.0])
        with pytest.raises(RuntimeError, match="Padding size"):
            apply(img, "gaussian_blur", ints=[7, 7], floats=[1.0, 1.0])


def affine_step(matrix, interpolation, fill):
    values = [] if fill is None else ([float(fill)] if isinstance(fill, (int, float)) else [float(v) for v in fill])
    ints = [int(interpolation == "bilinear"), int(fill is not None), len(values)]
    return ints, list(matrix) + values


class TestAffineKernel:
    """affine: F.affine / F.rotate as the auto-augment ops call them (output size = input
    size), ATen's reference; rotate90: rotate_image's torch.rot90 shortcut."""

    FILLS = [None, 0, 128, 37.6, [10, 200, 30], (1.5,), [300.0, -5.0, 255.49]]

    def test_reference_only(self):
        assert variants("affine") == (0, 1)

    def test_shear_translate_rotate_equal_torchvision(self):
        rng = np.random.default_rng(2)
        sizes = [(1, 1), (2, 3), (7, 9), (16, 16), (31, 17), (37, 41), (64, 67), (33, 33), (120, 97)]
        for k, img in enumerate(images(rng, sizes)):
            h, w = img.shape[-2:]
            c = img.shape[0]
            fill = self.FILLS[k % len(self.FILLS)]
            if isinstance(fill, list) and len(fill) != c:
                fill = fill[:1]
            for interpolation in ("nearest", "bilinear"):
                shear = math.degrees(math.atan(float(rng.uniform(-0.99, 0.99))))
                tx, ty = int(rng.integers(-40, 41)), int(rng.integers(-40, 41))
                angle = float(np.float32(rng.uniform(-135, 135))) % 360
                cases = [
                    # ShearX / ShearY: center=[0, 0]
                    (dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[shear, 0.0], center=[0, 0]),
                     _get_inverse_affine_matrix([0.0 - w * 0.5, 0.0 - h * 0.5], 0.0, [0.0, 0.0], 1.0, [shear, 0.0])),
                    (dict(angle=0.0, translate=[0, 0], scale=1.0, shear=[0.0, shear], center=[0, 0]),
                     _get_inverse_affine_matrix([0.0 - w * 0.5, 0.0 - h * 0.5], 0.0, [0.0, 0.0], 1.0, [0.0, shear])),
                    # TranslateX / TranslateY: center=None
                    (dict(angle=0.0, translate=[tx, 0], scale=1.0, shear=[0.0, 0.0]),
                     _get_inverse_affine_matrix([0.0, 0.0], 0.0, [float(tx), 0.0], 1.0, [0.0, 0.0])),
                    (dict(angle=0.0, translate=[0, ty], scale=1.0, shear=[0.0, 0.0]),
                     _get_inverse_affine_matrix([0.0, 0.0], 0.0, [0.0, float(ty)], 1.0, [0.0, 0.0])),
                ]
                for kwargs, matrix in cases:
                    expected = F.affine(img, interpolation=interpolation, fill=fill, **kwargs)
                    ints, floats = affine_step(matrix, interpolation, fill)
                    for variant in variants("affine"):
                        got = apply(img, "affine", ints, floats, variant)
                        assert torch.equal(got, expected), (tuple(img.shape), kwargs, interpolation, fill)
                # Rotate (expand=False, center=None): the affine of -angle
                if angle not in (0.0, 90.0, 180.0, 270.0):
                    expected = F.rotate(img, angle, interpolation=interpolation, fill=fill)
                    matrix = _get_inverse_affine_matrix([0.0, 0.0], -angle, [0.0, 0.0], 1.0, [0.0, 0.0])
                    ints, floats = affine_step(matrix, interpolation, fill)
                    assert torch.equal(apply(img, "affine", ints, floats), expected), (tuple(img.shape), angle)

    def test_rotate90_equals_torchvision_shortcuts(self):
        rng = np.random.default_rng(3)
        for img in images(rng, [(1, 1), (5, 5), (16, 16), (9, 13)]):
            square = img.shape[-1] == img.shape[-2]
            for angle, turns in ((90.0, 1), (180.0, 2), (270.0, 3), (-90.0, 3), (-180.0, 2)):
                if turns != 2 and not square:
                    continue
                expected = F.rotate(img, angle)
                assert torch.equal(apply(img, "rotate90", [turns]), expected), (tuple(img.shape), angle)

    def test_fill_of_the_wrong_length_raises(self):
        img = torch.zeros((3, 8, 8), dtype=torch.uint8)
        matrix = _get_inverse_affine_matrix([0.0, 0.0], 0.0, [3.0, 0.0], 1.0, [0.0, 0.0])
        with pytest.raises(ValueError, match="fill"):
            F.affine(img, 0.0, [3, 0], 1.0, [0.0, 0.0], fill=[1, 2])
        ints, floats = affine_step(matrix, "nearest", [1, 2])
        with pytest.raises(ValueError, match="fill"):
            apply(img, "affine", ints, floats)
