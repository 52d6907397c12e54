"""Pixel kernels (csrc/ops/pixel_kernel.h) against torchvision v2's functional, bit for bit:
every variant (0: what runs, 1: the ATen reference, 2: the fast kernel) on random, flat,
two-level and extreme images of odd sizes, 1 and 3 channels."""

import math
import platform

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as F
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

from fastprep import _ops  # noqa: F401  (registers torch.ops.fastprep.*)
from fastprep._kernels import isa


def apply_kernel(img, name, ints=(), floats=(), variant=0, extras=(), extra=-1):
    return torch.ops.fastprep.apply_pixel_kernel(img, name, list(ints), [float(f) for f in floats], variant,
                                                 list(extras), extra)


def kernel_status(name):
    return torch.ops.fastprep.pixel_kernel_info(name).split("\t")[1]


@pytest.mark.parametrize("name", ["posterize", "solarize", "autocontrast", "equalize", "invert", "erase",
                                  "adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue",
                                  "rgb_to_grayscale"])
def test_fast_kernel_proved(name):
    """On x86-64 the fast kernel passed its proof at first use and runs (elsewhere the fast
    kernel's proof may fail over to the reference)."""
    status = kernel_status(name)
    if platform.machine() in ("x86_64", "AMD64"):
        assert status == "fast", status
    else:
        assert status.startswith(("fast", "reference")), status


def point_images(seed=0):
    """uint8 [C, H, W] images: noise at odd sizes (1..~120), flat, two-level, 0/255 only, a
    narrow range, one pixel."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for c, h, w in [(3, 37, 41), (1, 21, 17), (3, 1, 1), (3, 120, 97), (1, 5, 123), (3, 16, 16), (3, 2, 65)]:
        out.append(torch.randint(0, 256, (c, h, w), dtype=torch.uint8, generator=g))
    out.append(torch.full((3, 13, 11), 77, dtype=torch.uint8))                                     # flat
    out.append(torch.where(torch.rand(3, 19, 23, generator=g) < 0.5, 40, 200).to(torch.uint8))    # two levels
    out.append((torch.rand(1, 31, 29, generator=g) < 0.3).to(torch.uint8) * 255)                   # 0 and 255
    out.append(torch.randint(100, 104, (3, 33, 9), dtype=torch.uint8, generator=g))                # narrow range
    mixed = torch.randint(0, 256, (3, 25, 27), dtype=torch.uint8, generator=g)
    mixed[1] = 9  # one flat channel beside noisy ones
    out.append(mixed)
    return out


IMAGES = point_images()
VARIANTS = (0, 1, 2)


def check_all_variants(name, want, img, ints=(), floats=(), extras=(), extra=-1):
    for variant in VARIANTS:
        got = apply_kernel(img, name, ints, floats, variant, extras, extra)
        assert got.dtype == want.dtype and torch.equal(got, want), (name, ints, floats, variant, tuple(img.shape))


class TestPointKernels:
    def test_posterize(self):
        for img in IMAGES:
            for bits in range(9):
                check_all_variants("posterize", F.posterize(img, bits), img, ints=(bits,))

    def test_solarize_float_and_int_thresholds(self):
        g = torch.Generator().manual_seed(1)
        drawn = (torch.rand(6, generator=g) * 255).tolist()  # the magnitudes auto-augment reaches
        floats = [0.0, 0.5, 127.5, 128.0, 128.000001, 127.99999999, 254.9, 255.0, -1.0, -1e300, float("nan"), *drawn]
        ints = [0, 1, 128, 200, 255, -1, -255, -256, -300]  # int thresholds compare in uint8 (wrapped)
        for img in IMAGES:
            for t in floats:
                check_all_variants("solarize", F.solarize(img, t), img, ints=(0,), floats=(t,))
            for t in ints:
                check_all_variants("solarize", F.solarize(img, t), img, ints=(1,), floats=(t,))

    def test_autocontrast_equalize_invert(self):
        for img in IMAGES:
            check_all_variants("autocontrast", F.autocontrast(img), img)
            check_all_variants("equalize", F.equalize(img), img)
            check_all_variants("invert", F.invert(img), img)

    def test_large_image(self):
        """Sums past 2**24 and a full histogram: 3x300x301."""
        img = torch.randint(0, 256, (3, 300, 301), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
        for name, fn in [("autocontrast", F.autocontrast), ("equalize", F.equalize), ("invert", F.invert)]:
            check_all_variants(name, fn(img), img)

    def test_empty_image(self):
        img = torch.zeros(3, 0, 5, dtype=torch.uint8)
        for name, fn in [("autocontrast", F.autocontrast), ("equalize", F.equalize), ("invert", F.invert)]:
            check_all_variants(name, fn(img), img)

    def test_errors_as_torchvision(self):
        img = IMAGES[0]
        two_channels = img[:2].contiguous()
        cases = [
            ("posterize", (9,), (), lambda: F.posterize(img, 9)),
            ("solarize", (0,), (255.5,), lambda: F.solarize(img, 255.5)),
            ("solarize", (1,), (256,), lambda: F.solarize(img, 256)),
        ]
        for name, ints, floats, tv in cases:
            with pytest.raises(TypeError):
                tv()
            for variant in VARIANTS:
                with pytest.raises(TypeError):
                    apply_kernel(img, name, ints, floats, variant)
        with pytest.raises(TypeError, match="permitted channel values are 1 or 3"):
            F.autocontrast(two_channels)
        for variant in VARIANTS:
            with pytest.raises(TypeError, match="permitted channel values are 1 or 3"):
                apply_kernel(two_channels, "autocontrast", variant=variant)
            with pytest.raises(TypeError, match="uint8"):
                apply_kernel(img.float(), "equalize", variant=variant)


def erase_regions(h, w, g):
    """(i, j, eh, ew) inside an h x w image: random, empty, a corner, one pixel, all but one row."""
    out = [(0, 0, 0, 0), (h - 1, w - 1, 1, 1), (0, 0, h - 1, w - 1), (1 % h, 0, h - 1 - 1 % h, w)]
    for _ in range(3):
        eh = int(torch.randint(0, h, (1,), generator=g))
        ew = int(torch.randint(0, w, (1,), generator=g))
        out.append((int(torch.randint(0, h - eh + 1, (1,), generator=g)),
                    int(torch.randint(0, w - ew + 1, (1,), generator=g)), eh, ew))
    return out


class TestEraseKernel:
    """``F.erase(image, i, j, h, w, v)`` with v as RandomErasing makes it: values
    ``torch.tensor(value)[:, None, None]`` (1 or C), or normal noise ``[C, h, w]``."""

    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_values_and_noise(self, dtype):
        g = torch.Generator().manual_seed(4)
        # values in and beyond uint8's range, fractional, negative (torch's float -> uint8 conversion)
        value_sets = [[0.0], [255.0], [127.7], [-1.5], [300.25], [-0.4], [1e10], [0.5, -2.5, 260.0], [1.0, 2.0, 3.0]]
        for img in IMAGES[:5] + IMAGES[7:9]:
            img = img if dtype == torch.uint8 else (img.float() / 255 - 0.45) / 0.225
            c, h, w = img.shape
            for k, (i, j, eh, ew) in enumerate(erase_regions(h, w, g)):
                for values in value_sets:
                    if len(values) not in (1, c):
                        continue
                    v = torch.tensor(values)[:, None, None]
                    check_all_variants("erase", F.erase(img, i, j, eh, ew, v), img,
                                       ints=(i, j, eh, ew, -1, len(values)), floats=values)
                noise = torch.empty([c, eh, ew], dtype=torch.float32).normal_(generator=g) * (1 + 60 * (k % 2))
                check_all_variants("erase", F.erase(img, i, j, eh, ew, noise), img, ints=(i, j, eh, ew, 0, 0),
                                   extras=(noise,), extra=0)

    def test_rectangle_past_the_edges_is_clipped_as_python_slices(self):
        for img in (IMAGES[0], IMAGES[0].float()):
            c, h, w = img.shape
            for i, j, eh, ew in [(h - 2, w - 3, 10, 10), (h, 0, 5, w), (0, w + 4, 3, 3), (0, 0, h + 100, w + 100)]:
                v = torch.tensor([-7.25])[:, None, None]
                check_all_variants("erase", F.erase(img, i, j, eh, ew, v), img, ints=(i, j, eh, ew, -1, 1),
                                   floats=(-7.25,))

    def test_bad_steps(self):
        img = IMAGES[0]
        for variant in VARIANTS:
            with pytest.raises(ValueError, match="not be negative"):
                apply_kernel(img, "erase", (-1, 0, 2, 2, -1, 1), (0.0,), variant)
            with pytest.raises(ValueError, match="values for an image of 3 channels"):
                apply_kernel(img, "erase", (0, 0, 2, 2, -1, 2), (0.0, 1.0), variant)
            with pytest.raises(ValueError, match="noise tensor 0 of 0"):
                apply_kernel(img, "erase", (0, 0, 2, 2, 0, 0), (), variant, extra=0)
            with pytest.raises(ValueError, match=r"float32 \[3, 2, 2\]"):
                apply_kernel(img, "erase", (0, 0, 2, 2, 0, 0), (), variant, extras=(torch.zeros(3, 2, 3),), extra=0)


# Sharpness, Gaussian blur, affine (csrc/ops/sharpness.cpp, gaussian_blur.cpp, affine.cpp).


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

    def test_the_callers_thread_count_is_restored(self):
        # the kernels set the thread's OpenMP count (what torch.get_num_threads reads) to 1
        # while they run
        previous = torch.get_num_threads()
        img = torch.zeros((3, 20, 20), dtype=torch.uint8)
        try:
            torch.set_num_threads(2)
            apply(img, "gaussian_blur", ints=[5, 5], floats=[1.0, 1.0])
            apply(img, "affine", [1, 0, 0], [1.0, 0.0, 3.0, 0.0, 1.0, 0.0])
            assert torch.get_num_threads() == 2
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
        sizes = [(1, 1), (2, 3), (7, 9), (16, 16), (31, 17), (37, 41), (33, 33), (90, 47)]
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


def f32(x):
    return float(np.float32(x))


COLOR_KERNELS = {"adjust_brightness": F.adjust_brightness, "adjust_contrast": F.adjust_contrast,
                 "adjust_saturation": F.adjust_saturation, "adjust_hue": F.adjust_hue}
# factors as ColorJitter draws them (float32), the edges, and large ones that saturate
COLOR_FACTORS = {
    "adjust_brightness": [0.0, 1.0, f32(0.6), f32(1.4), 1.3, 2.0, 7.3, 1e6],
    "adjust_contrast": [0.0, 1.0, f32(0.6), f32(1.4), 0.7, 2.0, 7.3],
    "adjust_saturation": [0.0, 1.0, f32(0.8), f32(1.2), 0.5, 2.0, 7.3],
    "adjust_hue": [0.0, f32(0.1), f32(-0.1), 0.5, -0.5, 0.0123456, f32(-1 / 3), 0.25],
}


class TestColorKernels:
    """adjust_brightness / contrast / saturation / hue and rgb_to_grayscale (csrc/ops/adjust_color.cpp):
    every variant, and the fast kernel's every ISA variant, against torchvision's functional."""

    @pytest.mark.parametrize("name", list(COLOR_KERNELS))
    def test_equals_torchvision(self, name):
        for img in IMAGES:
            for factor in COLOR_FACTORS[name]:
                check_all_variants(name, COLOR_KERNELS[name](img, factor), img, floats=(factor,))

    def test_grayscale(self):
        for img in IMAGES:
            for out in (1, 3) if img.shape[0] == 3 else (1,):  # a kernel never grows the image
                want = F.rgb_to_grayscale(img, out)
                for variant in variants("rgb_to_grayscale"):
                    got = apply_kernel(img, "rgb_to_grayscale", (out,), (), variant)
                    assert torch.equal(got, want), (tuple(img.shape), out, variant)

    def test_every_isa_variant_of_the_fast_kernels(self):
        imgs = [IMAGES[0], IMAGES[3], IMAGES[5], IMAGES[8]]
        try:
            for isa_name in isa.supported_isas():
                isa.set_isa(isa_name)
                for name, fn in COLOR_KERNELS.items():
                    for img in imgs:
                        for factor in COLOR_FACTORS[name][2:5]:
                            got = apply_kernel(img, name, (), (factor,), 2)
                            assert torch.equal(got, fn(img, factor)), (isa_name, name, tuple(img.shape), factor)
                for img in imgs:
                    for out in (1, 3) if img.shape[0] == 3 else (1,):
                        got = apply_kernel(img, "rgb_to_grayscale", (out,), (), 2)
                        assert torch.equal(got, F.rgb_to_grayscale(img, out)), (isa_name, tuple(img.shape), out)
        finally:
            isa.set_isa("auto")

    def test_contrast_mean_of_large_images(self):
        """The gray sum in blocks of 2**22 pixels: a dark image (sum below 2**24, the exact
        mean) and a bright one (ATen's reduction) past one block, 1 and 3 channels."""
        g = torch.Generator().manual_seed(4)
        for channels, high in ((1, 8), (3, 8), (1, 256)):
            img = torch.randint(0, high, (channels, 2050, 2050), dtype=torch.uint8, generator=g)
            for factor in (f32(0.6), 1.7):
                check_all_variants("adjust_contrast", F.adjust_contrast(img, factor), img, floats=(factor,))


class TestFlipKernels:
    """horizontal_flip / vertical_flip (csrc/ops/flip.cpp): torchvision's flips on uint8 and
    float32 images whose rows are shorter than, equal to and longer than the AVX2 blocks."""

    @pytest.mark.parametrize("name", ["horizontal_flip", "vertical_flip"])
    def test_fast_kernel_proved(self, name):
        status = kernel_status(name)
        assert status == "fast", status

    def test_equal_torchvision_on_every_isa(self):
        g = torch.Generator().manual_seed(6)
        widths = [1, 7, 8, 31, 32, 63, 64, 65, 97, 130]
        imgs = [torch.randint(0, 256, (c, h, w), dtype=torch.uint8, generator=g)
                for k, w in enumerate(widths) for c, h in [((1, 3)[k % 2], 1 + k % 4)]]
        imgs += [img.float() - 100.5 for img in imgs]
        try:
            for isa_name in isa.supported_isas():
                isa.set_isa(isa_name)
                for img in imgs:
                    check_all_variants("horizontal_flip", F.horizontal_flip(img), img)
                    check_all_variants("vertical_flip", F.vertical_flip(img), img)
        finally:
            isa.set_isa("auto")
