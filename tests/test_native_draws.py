"""Native sides of v2 transforms (fastprep/transforms/_native*.py, csrc/ops/*.cpp draws): for
random images and keys, the Python draws and the C++ draws make the same steps (equal bytes),
and the steps' pixels equal ``v2.Compose(pipe)`` run after ``torch.manual_seed(key)``."""

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from fastprep._layout import as_bytes
from fastprep.transforms import DecodeCenterCrop
from fastprep.transforms import _compile as C
from fastprep.transforms import _native as N

POINT_PIPES = [
    [v2.RandomPosterize(bits=3, p=0.5), v2.RandomSolarize(threshold=128.5, p=0.5), v2.RandomInvert(p=0.5)],
    [v2.RandomAutocontrast(p=0.6), v2.RandomEqualize(p=0.6), v2.RandomPosterize(bits=0, p=0.3)],
    [v2.RandomSolarize(threshold=-1, p=0.7), v2.RandomSolarize(threshold=200, p=0.7)],  # int thresholds
    [v2.RandomApply([v2.RandomEqualize(1.0), v2.ColorJitter(0.4, 0.4)], p=0.7),
     v2.RandomOrder([v2.RandomInvert(0.5), v2.RandomAutocontrast(0.5), v2.RandomPosterize(6, 0.5)])],
    [v2.RandomChoice([v2.RandomSolarize(100.0, 1.0), v2.RandomEqualize(1.0), v2.RandomGrayscale(1.0)])],
]

ERASE_PIPES = [
    [v2.RandomErasing(p=0.8)],
    [v2.RandomErasing(p=0.9, value="random")],
    [v2.RandomErasing(p=0.9, scale=(0.1, 0.6), ratio=(0.5, 2.0), value=(10, 250.5, 300.0))],
    [v2.RandomErasing(p=1.0, scale=(0.5, 0.9), ratio=(0.2, 5.0), value=7)],  # often no rectangle fits
    [v2.RandomErasing(p=1.0, scale=(0.3, 0.3), ratio=(1.0, 1.0), value="random", inplace=True),
     v2.RandomErasing(p=0.5, value=-3.5)],
    [v2.RandomInvert(0.5), v2.RandomErasing(p=0.7, value="random"), v2.RandomAutocontrast(0.5)],
    # mostly no rectangle fits: all 10 attempts drawn, nothing erased, then the next transform's draw
    [v2.RandomErasing(p=1.0, scale=(0.85, 1.0), value="random"), v2.RandomInvert(0.5)],
]


def image_for(key, channels=3, dtype=torch.uint8):
    g = torch.Generator().manual_seed(10_000 + key)
    h, w = 9 + key * 7 % 53, 11 + key * 5 % 61
    img = torch.randint(0, 256, (channels, h, w), dtype=torch.uint8, generator=g)
    if key % 5 == 0:
        img[:, : h // 2] = 90  # a flat half: ties in equalize, autocontrast
    if dtype == torch.float32:
        return v2.Normalize([0.485, 0.456, 0.406][:channels], [0.229, 0.224, 0.225][:channels])(img.float() / 255)
    return img


def check_pipe(pipe, keys, channels=3, dtype=torch.uint8):
    roots = [N.to_native(t) for t in pipe]
    prog = N.build_program(roots)
    for key in keys:
        img = image_for(key, channels, dtype)
        c, h, w = img.shape
        torch.manual_seed(key)
        ref = v2.Compose(pipe)(img.clone())
        steps = N.draw_steps(roots, N.TorchDraws(torch.Generator().manual_seed(key)), c, h, w)
        py = torch.from_numpy(steps.records().view(np.uint8).copy())
        cpp, extras = torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, key, c, h, w)
        assert torch.equal(py, cpp), (pipe, key, steps.items)
        assert len(extras) == len(steps.extras)
        for a, b in zip(extras, steps.extras):
            assert torch.equal(a, b)
        for kept in (extras, steps.extras):
            out = torch.ops.fastprep.apply_pixel_steps(img, cpp, list(kept))
            assert out.dtype == ref.dtype and torch.equal(out, ref), (pipe, key, steps.items)


class TestPointDraws:
    @pytest.mark.parametrize("k", range(len(POINT_PIPES)))
    def test_rgb(self, k):
        check_pipe(POINT_PIPES[k], range(25))

    @pytest.mark.parametrize("k", [0, 1, 2])
    def test_gray(self, k):
        check_pipe(POINT_PIPES[k], range(10), channels=1)

    def test_unsupported_parameters(self):
        for t in [v2.RandomPosterize(bits=9), v2.RandomPosterize(bits=2.0), v2.RandomSolarize(threshold=255.5),
                  v2.RandomSolarize(threshold=256), v2.RandomSolarize(threshold="128")]:
            with pytest.raises(N.Unsupported, match=type(t).__name__):
                N.to_native(t)
        N.to_native(v2.RandomSolarize(threshold=255))


class TestErasingDraws:
    @pytest.mark.parametrize("k", range(len(ERASE_PIPES)))
    def test_uint8(self, k):
        check_pipe(ERASE_PIPES[k], range(20))

    @pytest.mark.parametrize("k", [0, 1, 2, 4])
    def test_float_after_normalize(self, k):
        check_pipe(ERASE_PIPES[k], range(12), dtype=torch.float32)

    def test_gray(self):
        check_pipe([v2.RandomErasing(p=0.9, value="random"), v2.RandomErasing(p=0.9, value=(5.0,))], range(10),
                   channels=1)

    def test_three_values_on_a_gray_image_raise_as_v2(self):
        pipe = [v2.RandomErasing(p=1.0, value=(1.0, 2.0, 3.0))]
        img = image_for(1, channels=1)
        with pytest.raises(ValueError, match="single value or 1"):
            v2.Compose(pipe)(img)
        roots = [N.to_native(t) for t in pipe]
        with pytest.raises(ValueError, match="single value or 1"):
            N.draw_steps(roots, N.TorchDraws(torch.Generator().manual_seed(0)), *img.shape)
        prog = N.build_program(roots)
        with pytest.raises(ValueError, match="single value or 1"):
            torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, 0, *img.shape)

    def test_unsupported_parameters(self):
        with pytest.warns(UserWarning, match="Scale and ratio"):
            reversed_scale = v2.RandomErasing(scale=(0.3, 0.1))
        with pytest.warns(UserWarning, match="Scale and ratio"):
            reversed_ratio = v2.RandomErasing(ratio=(3.0, 0.3))
        for t in [reversed_scale, reversed_ratio, v2.RandomErasing(ratio=(0.0, 1.0)), v2.RandomErasing(value=(1, 2)),
                  v2.RandomErasing(value=np.float32(1.0)), v2.RandomErasing(value=[])]:
            with pytest.raises(N.Unsupported, match="RandomErasing"):
                N.to_native(t)
        with pytest.warns(UserWarning, match="Scale and ratio"):
            never_applied = v2.RandomErasing(p=0.0, scale=(0.3, 0.1))
        check_pipe([never_applied], range(3))


class TestCompileStages:
    """RandomErasing runs on the uint8 image or after ToDtype + Normalize; the point transforms
    on the uint8 image only."""

    def test_erasing_before_and_after_to_dtype(self):
        erasing = v2.RandomErasing(p=0.5)
        to_float = v2.ToDtype(torch.float32, scale=True)
        normalize = v2.Normalize([0.5] * 3, [0.25] * 3)
        crop = DecodeCenterCrop(32)
        before = C.compile_pipeline(v2.Compose([crop, erasing, to_float, normalize]))
        assert [type(t.transform) for t in before.augment] == [v2.RandomErasing] and before.after_float == ()
        after = C.compile_pipeline(v2.Compose([crop, v2.RandomInvert(), to_float, normalize, erasing]))
        assert [type(t.transform) for t in after.after_float] == [v2.RandomErasing]
        assert [type(t.transform) for t in after.augment] == [v2.RandomInvert]
        with pytest.raises(N.Unsupported, match="RandomEqualize after ToDtype"):
            C.compile_pipeline(v2.Compose([crop, to_float, v2.RandomEqualize()]))


# Sharpness, blur and the auto-augments.


def reference(pipe, img, key):
    with torch.random.fork_rng():
        torch.manual_seed(key)
        return v2.Compose(pipe)(img)


def python_steps(roots, key, shape):
    return N.draw_steps(roots, N.TorchDraws(torch.Generator().manual_seed(key)), *shape)


def cpp_steps(prog, key, shape):
    return torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, key, *shape)


def random_image(key, shape):
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(10_000 + key))


def check(pipe, keys, shapes):
    """Draws and pixels of ``pipe`` for every key (shape cycling through ``shapes``)."""
    roots = [N.to_native(t) for t in pipe]
    prog = N.build_program(roots)
    for n, key in enumerate(keys):
        shape = shapes[n % len(shapes)]
        img = random_image(key, shape)
        steps = python_steps(roots, key, shape)
        cpp, extras = cpp_steps(prog, key, shape)
        assert torch.equal(as_bytes(steps.records()), cpp), (key, shape, steps.items)
        try:
            want = reference(pipe, img, key)
        except ValueError as e:  # e.g. a fill of 3 values on a 1-channel image: natively too
            with pytest.raises(ValueError, match="fill"):
                torch.ops.fastprep.apply_pixel_steps(img, cpp, extras)
            assert "fill" in str(e)
            continue
        out = torch.ops.fastprep.apply_pixel_steps(img, cpp, extras)
        assert torch.equal(out, want), (key, shape, steps.items)


class TestSharpnessAndBlurDraws:
    def test_random_adjust_sharpness(self):
        check([v2.RandomAdjustSharpness(2.0, p=0.5)], range(12), [(3, 21, 34), (1, 17, 9)])
        check([v2.RandomAdjustSharpness(0.0, p=0.8), v2.RandomAdjustSharpness(1.7)], range(8), [(3, 40, 31)])

    def test_gaussian_blur(self):
        check([v2.GaussianBlur(23)], range(4), [(3, 64, 48)])
        check([v2.GaussianBlur((3, 7), sigma=(0.5, 3.0))], range(6), [(3, 21, 30), (1, 16, 16)])
        check([v2.GaussianBlur(5, sigma=1.5)], range(3), [(3, 12, 19)])

    def test_in_containers(self):
        pipe = [v2.RandomApply([v2.GaussianBlur(9)], p=0.5),
                v2.RandomChoice([v2.RandomAdjustSharpness(2.0, p=1.0), v2.ColorJitter(0.4)]),
                v2.RandomHorizontalFlip()]
        check(pipe, range(10), [(3, 33, 27)])


def covering_keys(pipe, candidates, shape, picks):
    """Keys among ``candidates`` whose Python draws together emit every kind of step the
    pipeline can (up to ``picks`` per kind), and the records of all candidates compared
    between the Python and the C++ draws on the way."""
    roots = [N.to_native(t) for t in pipe]
    prog = N.build_program(roots)
    chosen: dict[tuple, list[int]] = {}
    for key in candidates:
        steps = python_steps(roots, key, shape)
        cpp, _ = cpp_steps(prog, key, shape)
        assert torch.equal(as_bytes(steps.records()), cpp), (key, steps.items)
        # an affine step's kind: the signs of its matrix (which op, which direction)
        kind = tuple((name, ints[:1] if name == "rotate90" else (),
                      tuple((f > 0) - (f < 0) for f in floats[:6]) if name == "affine" else ())
                     for name, ints, floats, _ in steps.items)
        chosen.setdefault(kind, [])
        if len(chosen[kind]) < picks:
            chosen[kind].append(key)
    return sorted(k for keys in chosen.values() for k in keys)


class TestAutoAugmentDraws:
    SQUARE, OBLONG = (3, 24, 24), (3, 29, 37)

    @pytest.mark.parametrize("interpolation, fill", [("nearest", None), ("bilinear", 128), ("bilinear", [10, 200, 30]),
                                                     ("nearest", (5.5,))])
    def test_trivial_augment_wide(self, interpolation, fill):
        pipe = [v2.TrivialAugmentWide(interpolation=interpolation, fill=fill)]
        # 1500 keys' draws compared; pixels for keys covering each op (90 degrees on square images too)
        keys = covering_keys(pipe, range(1500), self.SQUARE, picks=1)
        check(pipe, keys, [self.SQUARE])
        check(pipe, range(20), [self.OBLONG, (1, 31, 16)])

    @pytest.mark.parametrize("num_ops, magnitude, bins", [(2, 9, 31), (3, 30, 31), (1, -1, 11), (0, 5, 10)])
    def test_rand_augment(self, num_ops, magnitude, bins):
        pipe = [v2.RandAugment(num_ops=num_ops, magnitude=magnitude, num_magnitude_bins=bins, fill=[1, 2, 3])]
        keys = covering_keys(pipe, range(300), self.OBLONG, picks=1)
        check(pipe, keys[:25], [self.OBLONG, (3, 40, 21)])

    @pytest.mark.parametrize("policy, interpolation, fill", [
        (v2.AutoAugmentPolicy.IMAGENET, "bilinear", None), (v2.AutoAugmentPolicy.IMAGENET, "nearest", [10, 200, 30]),
        (v2.AutoAugmentPolicy.CIFAR10, "nearest", None), (v2.AutoAugmentPolicy.CIFAR10, "bilinear", 77.5),
        (v2.AutoAugmentPolicy.SVHN, "bilinear", (255,)), (v2.AutoAugmentPolicy.SVHN, "nearest", 0),
    ])
    def test_auto_augment(self, policy, interpolation, fill):
        pipe = [v2.AutoAugment(policy, interpolation=interpolation, fill=fill)]
        keys = covering_keys(pipe, range(600), self.OBLONG, picks=1)
        check(pipe, keys[:30], [self.OBLONG, (1, 23, 30)])

    def test_translations_follow_the_image_size(self):
        # AutoAugment's and RandAugment's translations are 150/331 of the image's width/height
        pipe = [v2.RandAugment(num_ops=4, magnitude=30)]
        check(pipe, range(8), [(3, 17, 300), (3, 300, 17), (1, 97, 64)])


class TestAutoAugmentUnsupported:
    def test_reasons(self):
        cases = [
            (v2.TrivialAugmentWide(interpolation="bicubic"), "interpolation"),
            (v2.RandAugment(magnitude=31), "magnitude=31"),
            (v2.TrivialAugmentWide(num_magnitude_bins=1), "num_magnitude_bins"),
            (v2.AutoAugment(fill={torch.Tensor: 1, "others": 2}), "fill"),
        ]
        for transform, reason in cases:
            with pytest.raises(N.Unsupported, match=reason):
                N.to_native(transform)



class TestAffineDraws:
    """v2.RandomAffine and v2.RandomRotation: every parameter's forms, nearest and bilinear,
    fills None / scalar / per channel, with and without a centre; odd and square sizes."""

    AFFINE = [
        v2.RandomAffine(30),
        v2.RandomAffine((-10, 45.5), translate=(0.2, 0.1), interpolation="bilinear", fill=128),
        v2.RandomAffine(0, translate=[0.5, 0.5], scale=(0.7, 1.3), fill=[10, 200, 30]),
        v2.RandomAffine(15, scale=[0.5, 2], shear=20, interpolation=v2.InterpolationMode.BILINEAR),
        v2.RandomAffine(15, shear=(-5, 10), center=(3, 4.5), fill=(7.5,)),
        v2.RandomAffine([5, 5], shear=[-5, 10, 2, 30], translate=(0.1, 0.3), scale=(1.0, 1.0),
                        interpolation=2, center=[0, 0]),
    ]
    ROTATION = [
        v2.RandomRotation(45),
        v2.RandomRotation((-90, 90), interpolation="bilinear", fill=77),
        v2.RandomRotation([180, 180]),  # torch.rot90
        v2.RandomRotation((90, 90), fill=[1, 2, 3]),  # rot90 on square images, the affine otherwise
        v2.RandomRotation(30, center=(2, 7.5), interpolation=v2.InterpolationMode.BILINEAR, fill=(9,)),
        v2.RandomRotation((0, 0), center=[5, 5]),  # a centre: no shortcut, the affine even at 0 degrees
    ]

    @pytest.mark.parametrize("k", range(len(AFFINE)))
    def test_random_affine(self, k):
        check_pipe([self.AFFINE[k]], range(12))
        if not isinstance(self.AFFINE[k].fill, (list, tuple)) or len(self.AFFINE[k].fill) == 1:
            check_pipe([self.AFFINE[k]], [3, 8], channels=1)  # (3 fill values: torchvision raises on gray)

    @pytest.mark.parametrize("k", range(len(ROTATION)))
    def test_random_rotation(self, k):
        check_pipe([self.ROTATION[k]], range(12))
        if not isinstance(self.ROTATION[k].fill, (list, tuple)) or len(self.ROTATION[k].fill) == 1:
            check_pipe([self.ROTATION[k]], [3, 8], channels=1)  # (3 fill values: torchvision raises on gray)

    def test_unsupported(self):
        for t, why in [(v2.RandomRotation(10, expand=True), "expand=True"),
                       (v2.RandomAffine(10, interpolation="bicubic"), "interpolation"),
                       (v2.RandomRotation(10, fill={tv_tensors.Image: 1, "others": 2}), "differs")]:
            with pytest.raises(N.Unsupported, match=why):
                N.to_native(t)
