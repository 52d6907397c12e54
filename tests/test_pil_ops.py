"""PIL twins of the colour and point kernels (fastprep/transforms/_pil_ops.py,
csrc/ops/pil_color.cpp), against Pillow itself, and the transforms that use them on PIL images
through the threads engine, against the dataset run literally.

The oracles are written here: Pillow's ``ImageEnhance``, ``ImageOps`` and ``convert`` (the hue
through ``convert("HSV")`` and numpy's uint8 wraparound, as torchvision does it) for the
kernels; for the loader, ``default_collate`` of ``with sample_rng(S, 0, i): dataset[i]`` --
torchvision's ``ImageFolder`` and the user's transforms on Pillow. No fastprep path is a
reference.
"""

from __future__ import annotations

import io

import numpy as np
import PIL.Image
import pytest
import torch
import torchvision.transforms as T
from PIL import ImageEnhance, ImageOps
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from test_dataloader import assert_batches_equal, reference
from conftest import make_image_folder, make_jpeg
from fastprep.bench.synthetic import photo_like
from fastprep.data import IMAGENET_MEAN, IMAGENET_STD, DataLoader
from fastprep.transforms import OnPIL, _compile
from fastprep.transforms._native import NativeTransform, Unsupported, f32_above, f32_ceil, to_native
from fastprep.transforms._pil_ops import pil_twins, twin_reason

SEED = 11


def _rgb_of_jpeg(encoding: str, h: int, w: int, seed: int) -> PIL.Image.Image:
    with PIL.Image.open(io.BytesIO(make_jpeg(encoding, h, w, seed=seed))) as im:
        return im.convert("RGB")


def _images() -> list[tuple[str, PIL.Image.Image]]:
    """RGB images as ImageFolder gives them (gray, CMYK, progressive JPEGs), tiny, thin, very
    wide and tall, and "L" images."""
    rng = np.random.default_rng(3)
    out = [(enc, _rgb_of_jpeg(enc, 45, 61, k)) for k, enc in enumerate(("gray", "cmyk", "420-progressive", "444"))]
    for h, w in ((1, 1), (1, 7), (7, 1), (2, 2), (3, 2000), (2000, 3)):
        out.append((f"rgb{h}x{w}", PIL.Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")))
    out.append(("photo-rgb", PIL.Image.fromarray(photo_like(33, 47, seed=4), "RGB")))
    out.append(("grey-rgb", PIL.Image.fromarray(np.repeat(rng.integers(0, 256, (9, 11, 1), dtype=np.uint8), 3, 2))))
    out.append(("flat-rgb", PIL.Image.new("RGB", (5, 4), (77, 77, 77))))
    for h, w in ((1, 1), (1, 9), (23, 29), (3, 2000)):
        out.append((f"L{h}x{w}", PIL.Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")))
    out.append(("gray-jpeg-L", _rgb_of_jpeg("gray", 30, 40, 9).convert("L")))
    return out


IMAGES = _images()


def _hue(image: PIL.Image.Image, factor: float) -> PIL.Image.Image:
    if image.mode == "L":
        return image
    h, s, v = image.convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    with np.errstate(over="ignore"):
        np_h += np.array(factor * 255).astype(np.uint8)
    return PIL.Image.merge("HSV", (PIL.Image.fromarray(np_h, "L"), s, v)).convert("RGB")


def _grayscale(image: PIL.Image.Image, channels: int) -> PIL.Image.Image:
    gray = image.convert("L")
    return gray if channels == 1 else PIL.Image.fromarray(np.dstack([np.asarray(gray)] * 3), "RGB")


FACTORS = (0.0, 1.0, 0.5, 0.123, 1.7, 3.0)
#: kernel -> [(ints, floats, Pillow's computation)]
CASES = {
    "adjust_brightness": [((), (f,), lambda im, f=f: ImageEnhance.Brightness(im).enhance(f)) for f in FACTORS],
    "adjust_contrast": [((), (f,), lambda im, f=f: ImageEnhance.Contrast(im).enhance(f)) for f in FACTORS],
    "adjust_saturation": [((), (f,), lambda im, f=f: ImageEnhance.Color(im).enhance(f)) for f in FACTORS],
    "adjust_sharpness": [((), (f,), lambda im, f=f: ImageEnhance.Sharpness(im).enhance(f)) for f in FACTORS],
    "adjust_hue": [((), (f,), lambda im, f=f: _hue(im, f)) for f in (0.0, 0.5, -0.5, 0.07, -0.21, 0.33)],
    "rgb_to_grayscale": [((c,), (), lambda im, c=c: _grayscale(im, c)) for c in (1, 3)],
    "posterize": [((b,), (), lambda im, b=b: ImageOps.posterize(im, b)) for b in (1, 4, 7, 8)],
    "solarize": ([((1,), (float(t),), lambda im, t=t: ImageOps.solarize(im, t)) for t in (0, 100, 255, 256, -3)]
                 + [((0,), (t,), lambda im, t=t: ImageOps.solarize(im, t)) for t in (99.5, 0.25)]),
    "invert": [((), (), ImageOps.invert)],
    "autocontrast": [((), (), ImageOps.autocontrast)],
    "equalize": [((), (), ImageOps.equalize)],
}


def _tensor(image: PIL.Image.Image) -> torch.Tensor:
    arr = np.asarray(image)
    arr = arr[..., None] if arr.ndim == 2 else arr
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()


class TestTwinsEqualPillow:
    def test_every_twin_is_tested_and_proved(self):
        assert set(pil_twins()) == set(CASES) | {"affine", "rotate90", "gaussian_blur"}  # tests/test_pil_geometry.py
        for kernel in pil_twins():
            assert twin_reason(kernel) is None, twin_reason(kernel)

    @pytest.mark.parametrize("kernel", sorted(CASES))
    def test_kernel(self, kernel):
        twin = pil_twins()[kernel].twin
        for name, image in IMAGES:
            if image.mode == "L" and kernel == "rgb_to_grayscale":
                continue  # Grayscale of an "L" image is refused by the compiler where it changes channels
            for ints, floats, pillow in CASES[kernel]:
                want = _tensor(pillow(image))
                got = torch.ops.fastprep.apply_pixel_kernel(_tensor(image), twin, list(ints), list(floats))
                assert torch.equal(got, want), (f"{twin} {ints} {floats} on {name}: "
                                                f"{int((got != want).sum()) if got.shape == want.shape else got.shape}")

    @pytest.mark.parametrize("kernel", ["adjust_saturation", "adjust_sharpness", "adjust_hue", "adjust_brightness",
                                        "adjust_contrast", "rgb_to_grayscale", "autocontrast", "equalize"])
    def test_every_isa_variant(self, kernel):
        """The kernels with per-ISA variants (csrc/isa.h): each variant against Pillow."""
        from fastprep._kernels import isa as kernel_isa

        twin = pil_twins()[kernel].twin
        try:
            for isa in kernel_isa.supported_isas():
                assert kernel_isa.set_isa(isa) == isa
                for name, image in IMAGES:
                    if image.mode == "L" and kernel == "rgb_to_grayscale":
                        continue
                    for ints, floats, pillow in CASES[kernel]:
                        got = torch.ops.fastprep.apply_pixel_kernel(_tensor(image), twin, list(ints), list(floats))
                        assert torch.equal(got, _tensor(pillow(image))), (isa, name, floats)
        finally:
            kernel_isa.set_isa("auto")

    def test_hue_of_every_colour_on_every_isa_variant(self):
        """The vectorized hue (gathers and selects for Convert.c's branches) against Pillow on every
        colour of a 64-level cube, with a tail shorter than a vector, for each ISA variant."""
        from fastprep._kernels import isa as kernel_isa

        levels = np.arange(0, 256, 4, dtype=np.uint8)
        cube = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(-1, 3)
        image = PIL.Image.fromarray(np.concatenate([cube, cube[:5]]).reshape(1, -1, 3), "RGB")
        try:
            for isa in kernel_isa.supported_isas():
                assert kernel_isa.set_isa(isa) == isa
                for f in (0.1, -0.5, 0.5, 0.23):
                    got = torch.ops.fastprep.apply_pixel_kernel(_tensor(image), "pil_adjust_hue", [], [f])
                    assert torch.equal(got, _tensor(_hue(image, f))), (isa, f)
        finally:
            kernel_isa.set_isa("auto")

    def test_grayscale_keeps_an_l_image(self):
        image = IMAGES[-1][1]
        got = torch.ops.fastprep.apply_pixel_kernel(_tensor(image), "pil_rgb_to_grayscale", [1], [])
        assert torch.equal(got, _tensor(image.convert("L")))

    @pytest.mark.slow
    @pytest.mark.parametrize("kernel", ["adjust_brightness", "adjust_contrast", "adjust_saturation",
                                        "adjust_sharpness", "adjust_hue"])
    def test_factor_sweep(self, kernel):
        """Many factors on photo-like and noise images (hue: every colour of a 64-level cube)."""
        pillow = {"adjust_brightness": lambda im, f: ImageEnhance.Brightness(im).enhance(f),
                  "adjust_contrast": lambda im, f: ImageEnhance.Contrast(im).enhance(f),
                  "adjust_saturation": lambda im, f: ImageEnhance.Color(im).enhance(f),
                  "adjust_sharpness": lambda im, f: ImageEnhance.Sharpness(im).enhance(f),
                  "adjust_hue": _hue}[kernel]
        rng = np.random.default_rng(8)
        levels = np.arange(0, 256, 4, dtype=np.uint8)
        cube = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1).reshape(512, 512, 3)
        images = [PIL.Image.fromarray(photo_like(97, 131, seed=2), "RGB"), PIL.Image.fromarray(cube, "RGB")]
        lo, hi = (-0.5, 0.5) if kernel == "adjust_hue" else (0.0, 4.0)
        for f in rng.uniform(lo, hi, 60):
            f = float(np.float32(f))
            for image in images:
                got = torch.ops.fastprep.apply_pixel_kernel(_tensor(image), "pil_" + kernel, [], [f])
                assert torch.equal(got, _tensor(pillow(image, f))), f"{kernel} {f}"


class TestProof:
    def test_unknown_kernel(self):
        assert "has no PIL twin" in twin_reason("gaussian_blur_separable")

    def test_a_twin_that_differs_is_refused(self, monkeypatch):
        from fastprep.transforms import _pil_ops

        entry = pil_twins()["invert"]
        monkeypatch.setitem(_pil_ops._TWINS, "invert", entry._replace(reference=lambda im, i, f: im))
        twin_reason.cache_clear()
        try:
            reason = twin_reason("invert")
            assert reason is not None and "computes otherwise" in reason and "pil_invert" in reason
            with pytest.raises(Unsupported, match="RandomInvert: on PIL images, installed Pillow"):
                _compile.compile_pil(OnPIL(T.Compose([T.CenterCrop(8), T.RandomInvert(), T.ToTensor()])))
        finally:
            monkeypatch.undo()
            twin_reason.cache_clear()

    def test_posterize_0_is_left_to_pillow(self):
        with pytest.raises(Unsupported, match="bits=0 on PIL images"):
            _compile.compile_pil(OnPIL(T.Compose([T.CenterCrop(8), T.RandomPosterize(0), T.ToTensor()])))

    def test_v1_classes_are_native_on_pil_only(self):
        with pytest.raises(Unsupported, match="on PIL images only"):
            to_native(T.ColorJitter(0.4))

    def test_v1_random_choice_is_refused(self):
        with pytest.raises(Unsupported, match="Python's random"):
            _compile.compile_pil(OnPIL(T.Compose([T.CenterCrop(8), T.RandomChoice([T.RandomInvert()]),
                                                  T.ToTensor()])))

    def test_undeclared_kernels_are_refused(self, monkeypatch):
        from fastprep.transforms import _native

        class Undeclared(v2.RandomInvert):
            pass

        class NativeUndeclared(NativeTransform):
            draw_name = "RandomInvert"

        monkeypatch.setitem(_native._REGISTRY, Undeclared, NativeUndeclared)
        with pytest.raises(Unsupported, match="Undeclared: its native side does not declare the kernels"):
            _compile.compile_pil(OnPIL(T.Compose([T.CenterCrop(8), Undeclared(), T.ToTensor()])))

    def test_grayscale3_of_grayscale1_is_refused(self):
        with pytest.raises(Unsupported, match="Grayscale"):
            _compile.compile_pil(OnPIL(T.Compose([T.CenterCrop(8), T.Grayscale(1), T.Grayscale(3), T.ToTensor()])))

    def test_probability_conversions(self):
        """v1's comparisons as the draws' float32 ``r < p'``: over float32 values around p."""
        for p in (0.1, 0.2, 0.5, 0.3333333333, 1 / 3, 0.7, float(np.float32(0.1)), 0.0, 1.0):
            centre = np.float32(p)
            rs = [centre]
            for _ in range(3):
                rs = [np.nextafter(rs[0], np.float32(0)), *rs, np.nextafter(rs[-1], np.float32(1))]
            for r in rs:
                t = torch.tensor([r], dtype=torch.float32)
                assert (t.item() < p) == (float(r) < f32_ceil(p)), (p, r)
                assert (not bool(p < t)) == (float(r) < f32_above(p)), (p, r)


# ---------------------------------------------------------------------------------------
# The draws under a kernel map: Python == C++, and the steps' pixels == the transforms on the PIL image


DRAW_PIPES = [
    [T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(0.3)],
    [v2.ColorJitter((0.0, 2.0), (0.5, 1.5), 0.9, 0.5), v2.RandomAdjustSharpness(1.7, 0.5)],
    [T.RandomApply([T.RandomSolarize(99, 0.7), T.RandomPosterize(2, 0.7)], p=0.5), T.RandomEqualize(0.4),
     T.RandomAutocontrast(0.4), T.RandomInvert(0.4), T.RandomAdjustSharpness(0.2, 0.6)],
    [v2.RandomChoice([v2.Grayscale(3), v2.RandomInvert(1.0)], p=[0.3, 0.7]),
     v2.RandomOrder([v2.ColorJitter(hue=0.3), v2.RandomSolarize(140.5, 0.5)])],
]


@pytest.mark.parametrize("k", range(len(DRAW_PIPES)))
def test_draws_under_the_kernel_map(k):
    from fastprep.transforms import _native as N
    from fastprep.transforms._pil_ops import kernel_map_node

    pipe = DRAW_PIPES[k]
    with N.on_pil_images():
        natives = [N.to_native(t) for t in pipe]
    roots = [kernel_map_node(natives), *natives]
    prog = N.build_program(roots)
    for key in range(30):
        arr = photo_like(19 + key % 7, 23 + key % 5, seed=key)
        image = PIL.Image.fromarray(arr, "RGB")
        torch.manual_seed(key)
        want = _tensor(T.Compose(pipe)(image))
        steps = N.draw_steps(roots, N.TorchDraws(torch.Generator().manual_seed(key)), 3, *arr.shape[:2])
        assert all(name.startswith("pil_") for name, *_ in steps.items)
        py = torch.from_numpy(steps.records().view(np.uint8).copy())
        cpp, _ = torch.ops.fastprep.native_draws(prog.nodes, prog.ints, prog.floats, prog.num_roots, key, 3,
                                                 *arr.shape[:2])
        assert torch.equal(py, cpp), (k, key, steps.items)
        got = torch.ops.fastprep.apply_pixel_steps(_tensor(image), cpp, [])
        assert torch.equal(got, want), (k, key, steps.items)


# ---------------------------------------------------------------------------------------
# Through the loader: the threads engine against the dataset run literally

_FILES = [("420", 90, 120), ("gray", 64, 96), ("cmyk", 81, 70), ("420-progressive", 100, 66),
          ("444", 77, 101), ("gray-progressive", 70, 70), ("422", 120, 90), ("png", 72, 88)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("pilops"), _FILES, classes=2)


def _v1(*augment, size=36):
    return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *augment, T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def _v2(*augment, size=36):
    return v2.Compose([v2.RandomResizedCrop(size), v2.RandomHorizontalFlip(), *augment, v2.PILToTensor(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


PIPELINES = {
    "v1-jitter-gray": lambda: _v1(T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.RandomGrayscale(0.5)),
    "v2-jitter-gray": lambda: _v2(v2.ColorJitter(0.4, 0.4, 0.4, 0.1), v2.RandomGrayscale(0.5)),
    "v1-jitter-bc": lambda: _v1(T.ColorJitter(brightness=(0.0, 2.5), contrast=0.9)),
    "v1-hue": lambda: _v1(T.ColorJitter(hue=0.5)),
    "v1-point": lambda: _v1(T.RandomSolarize(128, 0.5), T.RandomPosterize(3, 0.5), T.RandomEqualize(0.5),
                            T.RandomAutocontrast(0.5), T.RandomInvert(0.5)),
    "v2-point": lambda: _v2(v2.RandomSolarize(100.5, 0.5), v2.RandomPosterize(2, 0.5), v2.RandomEqualize(0.5),
                            v2.RandomAutocontrast(0.5), v2.RandomInvert(0.5)),
    "v1-sharpness": lambda: _v1(T.RandomAdjustSharpness(2.0, 0.5), T.RandomAdjustSharpness(0.3, 0.7)),
    "v2-sharpness": lambda: _v2(v2.RandomAdjustSharpness(2.0, 0.5)),
    "v1-grayscale1": lambda: T.Compose([T.Resize(40), T.CenterCrop(32), T.Grayscale(), T.ToTensor(),
                                        T.Normalize([0.5], [0.25])]),
    "v2-grayscale3": lambda: _v2(v2.Grayscale(3)),
    "v1-random-apply": lambda: _v1(T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                                   T.RandomGrayscale(p=0.2)),
    "v2-containers": lambda: _v2(v2.RandomApply([v2.ColorJitter(0.4, 0.4)], p=0.6),
                                 v2.RandomChoice([v2.RandomInvert(1.0), v2.RandomSolarize(64, 1.0)]),
                                 v2.RandomOrder([v2.RandomEqualize(0.5), v2.RandomPosterize(4, 0.5)])),
}


def _reference(dataset, batch_size):
    """The dataset's own samples under sample_rng, collated batch by batch."""
    return reference(dataset, list(range(len(dataset))), batch_size, seed=SEED)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_threads_engine_equals_dataset(root, name):
    dataset = ImageFolder(root, transform=PIPELINES[name]())
    loader = DataLoader(dataset, batch_size=4, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    assert_batches_equal(list(loader), _reference(dataset, 4))
