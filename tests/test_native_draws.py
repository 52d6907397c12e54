"""Native sides of v2 transforms (fastprep/transforms/_native*.py and their C++ draws): for
random images and keys, torchvision's transform under ``torch.manual_seed(key)``, the Python
draws on an explicit generator and the C++ draws (``torch.ops.fastprep.native_draws``) give
the same steps (equal PixelStep bytes), and the steps run natively
(``torch.ops.fastprep.apply_pixel_steps``) give torchvision's pixels."""

import pytest
import torch
from torchvision.transforms import v2

from fastprep._layout import as_bytes
from fastprep.transforms import _compile  # noqa: F401  (registers the native sides)
from fastprep.transforms import _native as N


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
        out = torch.ops.fastprep.apply_pixel_steps(img, cpp, extras)
        assert torch.equal(out, reference(pipe, img, key)), (key, shape, steps.items)


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


_AUTO_KERNELS = ("posterize", "solarize", "autocontrast", "equalize", "invert")
_MISSING = sorted(set(_AUTO_KERNELS) - set(torch.ops.fastprep.pixel_kernel_names().split()))
needs_point_kernels = pytest.mark.skipif(bool(_MISSING), reason=f"pixel kernels {_MISSING} are not built in")


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
        kind = tuple((name, ints[:1] if name == "rotate90" else ()) for name, ints, _ in steps.items)
        chosen.setdefault(kind, [])
        if len(chosen[kind]) < picks:
            chosen[kind].append(key)
    return sorted(k for keys in chosen.values() for k in keys)


@needs_point_kernels
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
        check(pipe, keys[:40], [self.OBLONG, (3, 40, 21)])

    @pytest.mark.parametrize("policy", list(v2.AutoAugmentPolicy))
    def test_auto_augment(self, policy):
        pipe = [v2.AutoAugment(policy, interpolation="bilinear")]
        keys = covering_keys(pipe, range(600), self.OBLONG, picks=1)
        check(pipe, keys[:40], [self.OBLONG, (1, 23, 30)])

    def test_translations_follow_the_image_size(self):
        # AutoAugment's and RandAugment's translations are 150/331 of the image's width/height
        pipe = [v2.RandAugment(num_ops=4, magnitude=30)]
        check(pipe, range(8), [(3, 17, 300), (3, 300, 17), (1, 97, 64)])


@needs_point_kernels
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

