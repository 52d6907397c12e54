"""Pixel kernels (csrc/ops/pixel_kernel.h) against torchvision v2's functional, bit for bit:
every variant (0: what runs, 1: the ATen reference, 2: the fast kernel) on random, flat,
two-level and extreme images of odd sizes, 1 and 3 channels."""

import platform

import pytest
import torch
import torchvision.transforms.v2.functional as F

from fastprep import _ops  # noqa: F401  (registers torch.ops.fastprep.*)


def apply_kernel(img, name, ints=(), floats=(), variant=0, extras=(), extra=-1):
    return torch.ops.fastprep.apply_pixel_kernel(img, name, list(ints), [float(f) for f in floats], variant,
                                                 list(extras), extra)


def kernel_status(name):
    return torch.ops.fastprep.pixel_kernel_info(name).split("\t")[1]


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
    @pytest.mark.parametrize("name", ["posterize", "solarize", "autocontrast", "equalize", "invert"])
    def test_fast_kernel_proved(self, name):
        status = kernel_status(name)
        if platform.machine() in ("x86_64", "AMD64"):
            assert status == "fast", status
        else:
            assert status.startswith(("fast", "reference")), status

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

    def test_fast_kernel_proved(self):
        status = kernel_status("erase")
        assert status == "fast" or platform.machine() not in ("x86_64", "AMD64"), status

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
