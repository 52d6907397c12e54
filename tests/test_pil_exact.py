"""PIL-exact kernels and pipelines on PIL images, against Pillow and torchvision themselves.

The oracles are written here: ``Image.resize`` of the installed Pillow for the resampling
kernel, ``Image.open(f).convert("RGB")`` for the decode, and for the loader the user's
pipeline run literally on ``Image.open(f).convert("RGB")`` (what ``ImageFolder`` gives it)
under ``keyed_default_rng(sample_key(seed, 0, i))``. No other fastprep path is a reference.
"""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
import PIL.Image
import pytest
import torch
import torchvision.transforms as T
from torchvision.transforms import v2

import fastprep.data as D
import fastprep.io as fio
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.bench.synthetic import photo_like
from fastprep.transforms import OnPIL, _compile
from fastprep.transforms._pil import PIL_FILTERS, needs_pil, pil_exact_reason

SEED = 5
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _image(h, w, c, seed, kind="photo"):
    if kind == "photo":
        arr = photo_like(h, w, seed=seed)
    else:
        arr = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return arr[..., :1] if c == 1 else arr


def _pil_of(arr):
    return PIL.Image.fromarray(arr[..., 0], "L") if arr.shape[2] == 1 else PIL.Image.fromarray(arr, "RGB")


def _resize(arr, out_hw, fid, window=None, origin=(0, 0), full_in=None, hflip=False):
    h, w = arr.shape[:2]
    oh, ow = out_hw
    window = window or (0, 0, oh, ow)
    t = torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1)
    got = torch.ops.fastprep.pil_resize(t, [oh, ow], list(window), list(full_in or (h, w)), list(origin), fid, hflip)
    return got.permute(1, 2, 0).numpy()


# (in h, w) -> (out h, w): down and up by many factors, one side kept, tiny, very wide and tall
SIZES = [((37, 53), (20, 31)), ((11, 7), (29, 16)), ((40, 9), (40, 23)), ((3, 700), (2, 224)),
         ((500, 375), (224, 224)), ((375, 500), (256, 341)), ((1, 1), (5, 3)), ((2, 900), (7, 13)),
         ((600, 4), (224, 3)), ((97, 131), (96, 130)), ((64, 48), (65, 49)), ((300, 200), (17, 290))]


class TestPilResize:
    @pytest.mark.parametrize("name", [f.name for f in PIL_FILTERS])
    @pytest.mark.parametrize("c", [1, 3])
    @pytest.mark.parametrize("kind", ["photo", "random"])
    def test_equals_pillow(self, name, c, kind):
        flt = PIL.Image.Resampling[name]
        for k, ((h, w), (oh, ow)) in enumerate(SIZES):
            arr = _image(h, w, c, k, kind)
            want = np.asarray(_pil_of(arr).resize((ow, oh), flt)).reshape(oh, ow, c)
            got = _resize(arr, (oh, ow), PIL_FILTERS[flt])
            assert np.array_equal(got, want), f"{name} {h}x{w}x{c} -> {oh}x{ow}: {(got != want).sum()} values differ"

    @pytest.mark.parametrize("name", ["BILINEAR", "BICUBIC", "LANCZOS"])
    def test_random_sizes(self, name):
        """Many scale factors, up and down in each dimension (Pillow 13 orders its passes by
        the sizes: both orders are met)."""
        flt = PIL.Image.Resampling[name]
        rng = np.random.default_rng(7)
        for k in range(40):
            h, w, oh, ow = (int(v) for v in rng.integers(1, 160, 4))
            arr = _image(h, w, 3, k, "random" if k % 2 else "photo")
            want = np.asarray(_pil_of(arr).resize((ow, oh), flt))
            assert np.array_equal(_resize(arr, (oh, ow), PIL_FILTERS[flt]), want), f"{h}x{w} -> {oh}x{ow}"

    @pytest.mark.parametrize("name", [f.name for f in PIL_FILTERS])
    def test_window_of_full_resize(self, name):
        """A window of the output from a window of the input (the batch op's use): Pillow's
        full resize, cropped."""
        flt = PIL.Image.Resampling[name]
        arr = _image(120, 90, 3, 3)
        full = np.asarray(PIL.Image.fromarray(arr).resize((70, 100), flt))
        top, left, wh, ww = 31, 17, 40, 33
        got = _resize(arr, (100, 70), PIL_FILTERS[flt], window=(top, left, wh, ww))
        assert np.array_equal(got, full[top:top + wh, left:left + ww])
        # the same from the rows and columns it reads only (a window decode)
        y0, x0 = 20, 10
        got = _resize(arr[y0:y0 + 80, x0:x0 + 70], (100, 70), PIL_FILTERS[flt], window=(top, left, wh, ww),
                      origin=(y0, x0), full_in=(120, 90), hflip=True)
        assert np.array_equal(got, full[top:top + wh, left:left + ww][:, ::-1])

    def test_opcheck(self):
        arr = torch.from_numpy(_image(13, 17, 3, 2)).permute(2, 0, 1)
        torch.library.opcheck(torch.ops.fastprep.pil_resize.default,
                              (arr, [7, 9], [1, 2, 5, 6], [13, 17], [0, 0], 4, True))

    def test_reads_outside_the_window_raise(self):
        arr = _image(30, 30, 3, 1)
        with pytest.raises(ValueError, match="reads rows"):
            _resize(arr[5:], (10, 10), 2, origin=(5, 0), full_in=(30, 30))

    @pytest.mark.parametrize("bad, match", [({"fid": 0}, "filter must be"), ({"fid": 6}, "filter must be"),
                                            ({"window": (0, 0, 11, 3)}, "out_window")])
    def test_bad_arguments(self, bad, match):
        arr = _image(8, 8, 3, 1)
        with pytest.raises(ValueError, match=match):
            _resize(arr, (10, 10), bad.get("fid", 2), window=bad.get("window"))


#: the vectorized passes' edges: 1-pixel and 2-pixel rows, widths around the vector loads'
#: reach (outputs whose taps end at the row's end take the scalar loop), very wide, tall, and a
#: downscale with more taps than the vector path takes
EDGE_SIZES = [((1, 1), (3, 4)), ((1, 2), (1, 7)), ((2, 1), (9, 1)), ((5, 3), (4, 2)), ((9, 4), (7, 3)),
              ((6, 5), (6, 11)), ((13, 6), (13, 2)), ((7, 2000), (3, 224)), ((4, 3001), (4, 17)),
              ((900, 3), (224, 5)), ((31, 33), (31, 32)), ((8, 16), (8, 15)), ((17, 10), (17, 9)),
              ((2, 5000), (2, 9))]


@pytest.fixture(params=["baseline", "avx2"])
def isa_level(request):
    """Each ISA variant of the kernels this CPU runs (csrc/isa.h), restored afterwards."""
    from fastprep._kernels import isa as kernel_isa

    if request.param not in kernel_isa.supported_isas():
        pytest.skip(f"this CPU has no {request.param}")
    kernel_isa.set_isa(request.param)
    yield request.param
    kernel_isa.set_isa("auto")


class TestPilResizeVariants:
    """Every ISA variant of the resampling passes (the AVX2 one: tap pairs as int32 lanes)
    against Pillow itself, at their edges: tails, 1-pixel images, very wide rows, windows,
    mirrored output."""

    @pytest.mark.parametrize("name", [f.name for f in PIL_FILTERS])
    def test_edges_equal_pillow(self, isa_level, name):
        flt = PIL.Image.Resampling[name]
        for k, ((h, w), (oh, ow)) in enumerate(EDGE_SIZES):
            for c in (1, 3):
                arr = _image(h, w, c, k, "random")
                want = np.asarray(_pil_of(arr).resize((ow, oh), flt)).reshape(oh, ow, c)
                got = _resize(arr, (oh, ow), PIL_FILTERS[flt])
                assert np.array_equal(got, want), f"{isa_level} {name} {h}x{w}x{c} -> {oh}x{ow}"

    @pytest.mark.parametrize("name", ["BILINEAR", "BICUBIC", "LANCZOS", "BOX"])
    def test_random_windows_mirrored(self, isa_level, name):
        """Windows of the output from windows of the input, mirrored or not, at random sizes
        and scales: Pillow's full resize cropped (and flipped)."""
        flt = PIL.Image.Resampling[name]
        rng = np.random.default_rng(11)
        for k in range(12):
            h, w, oh, ow = (int(v) for v in rng.integers(2, 120, 4))
            arr = _image(h, w, 3, k, "random" if k % 2 else "photo")
            full = np.asarray(PIL.Image.fromarray(arr).resize((ow, oh), flt))
            top, left = int(rng.integers(0, oh)), int(rng.integers(0, ow))
            wh, ww = int(rng.integers(1, oh - top + 1)), int(rng.integers(1, ow - left + 1))
            flip = bool(k % 3 == 0)
            got = _resize(arr, (oh, ow), PIL_FILTERS[flt], window=(top, left, wh, ww), hflip=flip)
            want = full[top:top + wh, left:left + ww]
            assert np.array_equal(got, want[:, ::-1] if flip else want), f"{isa_level} {h}x{w} -> {oh}x{ow}"


def _jpeg(arr, mode="RGB", **kwargs):
    buf = io.BytesIO()
    PIL.Image.fromarray(arr, "RGB").convert(mode).save(buf, "JPEG", quality=kwargs.pop("quality", 88), **kwargs)
    return buf.getvalue()


#: files as ImageFolder meets them: baseline 4:2:0 / 4:4:4, progressive, gray, CMYK, odd and
#: very wide sizes, and a PNG behind a .jpg name (Pillow decodes it)
FILES = [("RGB", {"subsampling": 2}, (375, 500)), ("RGB", {"progressive": True}, (301, 257)),
         ("L", {}, (240, 333)), ("CMYK", {}, (257, 260)), ("RGB", {"subsampling": 0}, (229, 231)),
         ("RGB", {"subsampling": 1}, (60, 900)), ("RGB", {"progressive": True, "subsampling": 0}, (500, 300)),
         ("PNG", {}, (260, 250))]


def _file_bytes(k, mode, kwargs, hw):
    arr = photo_like(*hw, seed=40 + k)
    if mode == "PNG":
        buf = io.BytesIO()
        PIL.Image.fromarray(arr).save(buf, "PNG")
        return buf.getvalue()
    return _jpeg(arr, mode, **dict(kwargs))


class TestDecode:
    @pytest.mark.parametrize("k", range(len(FILES) - 1))
    def test_equals_pillow_rgb(self, k):
        mode, kwargs, hw = FILES[k]
        data = _file_bytes(k, mode, kwargs, hw)
        want = np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))
        got = fio.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), "RGB")
        assert np.array_equal(got.permute(1, 2, 0).numpy(), want)

    def test_probe_passes_on_this_pillow(self):
        assert pil_exact_reason() is None


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("pil_folder")
    for k, (mode, kwargs, hw) in enumerate(FILES):
        with open(os.path.join(root, f"{k:02d}.jpg"), "wb") as f:
            f.write(_file_bytes(k, mode, kwargs, hw))
    return str(root)


def _literal(folder, transform, seed=SEED):
    """The pipeline as ImageFolder + DataLoader(seed) run it: each file opened by torchvision's
    default loader, under the sample's keyed RNG."""
    from torchvision.datasets.folder import default_loader

    out = []
    for i, name in enumerate(sorted(os.listdir(folder))):
        image = default_loader(os.path.join(folder, name))
        with keyed_default_rng(sample_key(seed, 0, i)):
            out.append(transform(image))
    return torch.stack(out)


def _loaded(folder, transform, engine):
    loader = D.make_loader(folder, transform=transform, engine=engine, seed=SEED, batch_size=len(FILES),
                           shuffle=False, num_workers=2, device="cpu")
    with warnings.catch_warnings():  # the PNG behind a .jpg name, decoded by Pillow (warned once)
        warnings.filterwarnings("ignore", message=".*decoded in full by Pillow", category=UserWarning)
        (images, _), = list(loader)
    return loader, images


def _train(v=T, flt=T.InterpolationMode.BILINEAR):
    return v.Compose([v.RandomResizedCrop(64, interpolation=flt), v.RandomHorizontalFlip(), T.ToTensor(),
                      v.Normalize(MEAN, STD)])


def _val(v=T, flt=T.InterpolationMode.BILINEAR):
    return v.Compose([v.Resize(72, interpolation=flt), v.CenterCrop(64), T.ToTensor(), v.Normalize(MEAN, STD)])


PIPELINES = {
    "examples-train": _train,
    "examples-val": _val,
    "train-bicubic": lambda: _train(flt=T.InterpolationMode.BICUBIC),
    "train-lanczos": lambda: _train(flt=T.InterpolationMode.LANCZOS),
    "val-no-normalize": lambda: T.Compose([T.Resize(72), T.CenterCrop((64, 60)), T.ToTensor()]),
    "val-pad": lambda: T.Compose([T.Resize(40), T.CenterCrop(64), T.ToTensor()]),
    "resize-hw": lambda: T.Compose([T.Resize((50, 70)), T.ToTensor(), T.Normalize(MEAN, STD)]),
    "presets-pil-v2": lambda: v2.Compose([v2.RandomResizedCrop(64, antialias=True), v2.RandomHorizontalFlip(0.5),
                                          v2.PILToTensor(), v2.ToDtype(torch.float, scale=True),
                                          v2.Normalize(MEAN, STD)]),
    "presets-pil-v1": lambda: T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(0.5), T.PILToTensor(),
                                         T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)]),
}


class TestLoader:
    @pytest.mark.parametrize("name", sorted(PIPELINES))
    def test_threads_equal_literal(self, folder, name):
        transform = PIPELINES[name]()
        loader, got = _loaded(folder, transform, "threads")
        assert loader.engine == "threads", loader.engine_reason
        want = _literal(folder, transform)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert (got != want).sum().item() == 0

    def test_processes_equal_literal(self, folder):
        transform = _train()
        loader, got = _loaded(folder, transform, "processes")
        assert torch.equal(got, _literal(folder, transform))

    def test_probe_mismatch_runs_as_written(self, folder, monkeypatch):
        reason = "installed Pillow 0.0 rounds differently from fastprep's PIL-exact kernels (test): running your " \
                 "transforms as written"
        monkeypatch.setattr(_compile, "pil_exact_reason", lambda: reason)
        transform = _train()
        loader, got = _loaded(folder, transform, None)
        assert loader.engine == "processes"
        assert "rounds differently" in loader.engine_reason
        assert torch.equal(got, _literal(folder, transform))

    @pytest.mark.parametrize("transform, why", [
        (lambda: T.Compose([T.RandomResizedCrop(64), T.RandomChoice([T.ColorJitter(0.4)]), T.ToTensor()]),
         "RandomChoice draws from Python's random"),
        (lambda: T.Compose([T.RandomResizedCrop(64, interpolation=T.InterpolationMode.NEAREST), T.ToTensor()]),
         "interpolation"),
        (lambda: T.Compose([T.Resize(72, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(64),
                            T.ToTensor()]), "bicubic"),
    ])
    def test_refused_steps_run_as_written(self, folder, transform, why):
        transform = transform()
        loader, got = _loaded(folder, transform, None)
        assert loader.engine == "processes" and why in loader.engine_reason
        assert torch.equal(got, _literal(folder, transform))


class TestMultiView:
    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_views_equal_literal(self, folder, engine):
        """DINO-style views on PIL images: the views drawn one after the other on the same
        PIL image, under the sample's key."""
        from fastprep.transforms import MultiView

        views = [_train(), T.Compose([T.RandomResizedCrop(32, scale=(0.05, 0.4)), T.RandomHorizontalFlip(),
                                      T.ToTensor(), T.Normalize(MEAN, STD)])]
        loader = D.make_loader(folder, transform=MultiView(views), engine=engine, seed=SEED, batch_size=len(FILES),
                               shuffle=False, num_workers=2, device="cpu")
        if engine == "threads":
            assert loader.engine == "threads", loader.engine_reason
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*decoded in full by Pillow", category=UserWarning)
            (got, _), = list(loader)
        from torchvision.datasets.folder import default_loader

        want: list[list[torch.Tensor]] = [[], []]
        for i, name in enumerate(sorted(os.listdir(folder))):
            image = default_loader(os.path.join(folder, name))
            with keyed_default_rng(sample_key(SEED, 0, i)):
                for k, view in enumerate(views):
                    want[k].append(view(image))
        for k in range(2):
            assert torch.equal(got[k], torch.stack(want[k]))


class TestBadFiles:
    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_truncated_file_named_and_skipped(self, tmp_path, engine):
        """Pillow refuses a truncated file (the reference); both engines name it, and
        on_error="skip" replaces it."""
        for k in range(3):
            data = _jpeg(photo_like(100, 120, seed=k))
            (tmp_path / f"{k}.jpg").write_bytes(data[: len(data) // 2] if k == 1 else data)
        transform = T.Compose([T.RandomResizedCrop(32), T.ToTensor()])
        kw = dict(transform=transform, engine=engine, seed=0, batch_size=3, shuffle=False, num_workers=2,
                  device="cpu")
        with pytest.raises(fio.DecodeError, match=r"1\.jpg.*truncated"):
            list(D.make_loader(str(tmp_path), **kw))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (images, _), = list(D.make_loader(str(tmp_path), on_error="skip", **kw))
        assert images.shape == (3, 3, 32, 32)


class TestRecognition:
    @pytest.mark.parametrize("transform, pil", [
        (T.Compose([T.RandomResizedCrop(8), T.ToTensor()]), True),
        (v2.Compose([v2.RandomResizedCrop(8), v2.PILToTensor(), v2.ToDtype(torch.float, scale=True)]), True),
        (v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(8)]), False),
        (v2.Compose([v2.ToImage(), v2.RandomResizedCrop(8)]), False),
        (v2.Compose([v2.RandomResizedCrop(8), v2.ToDtype(torch.float, scale=True)]), False),
    ])
    def test_needs_pil(self, transform, pil):
        assert needs_pil(transform) is pil
        assert (_compile.input_kind(transform) == "pil") is pil

    def test_onpil_is_picklable_and_names_bad_input(self):
        import pickle

        t = pickle.loads(pickle.dumps(OnPIL(T.ToTensor())))
        with pytest.raises(TypeError, match="OnPIL"):
            t(PIL.Image.new("RGB", (4, 4)))
        with pytest.raises(fio.DecodeError, match="cannot identify"):
            t(torch.tensor([1, 2, 3, 4], dtype=torch.uint8))
