"""A user's own transform (multi-crop classes, user steps on PIL images) traced on the threads
engine: fastprep.data.traced and fastprep.transforms._trace.

The reference is always the user's dataset run literally: ``default_collate([with sample_rng(S,
e, i): dataset[i] ...])`` -- torchvision's ImageFolder opening the files with Pillow, the user's
classes drawing from torch, Python's ``random`` and NumPy -- never another fastprep path.
"""

import random

import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image, ImageEnhance, ImageFilter, ImageOps
from torch.utils.data import Subset
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from test_dataloader import reference as dataloader_reference
from conftest import make_image_folder, make_jpeg
from fastprep.bench.synthetic import photo_like
from fastprep.data import DataLoader, sample_rng
from fastprep.transforms._trace import LazyImage, PixelRead, install_hooks

SEED = 11
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# (encoding, height, width): gray, CMYK, progressive, tiny, very wide; one PNG
_FILES = [("420", 90, 120), ("gray", 64, 96), ("cmyk", 81, 70), ("420-progressive", 100, 66),
          ("444", 77, 101), ("png", 72, 88), ("420", 3, 2), ("gray-progressive", 1, 1), ("422", 20, 300)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("traced"), _FILES, classes=2)


# --- DINO's multi-crop, as its repository writes it (utils.py / main_dino.py) --------------

class GaussianBlur:
    def __init__(self, p=0.5, radius_min=0.1, radius_max=2.0):
        self.prob, self.radius_min, self.radius_max = p, radius_min, radius_max

    def __call__(self, img):
        if not random.random() <= self.prob:
            return img
        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(self.radius_min, self.radius_max)))


class Solarization:
    def __init__(self, p):
        self.p = p

    def __call__(self, img):
        if random.random() < self.p:
            return ImageOps.solarize(img)
        return img


class DataAugmentationDINO:
    def __init__(self, global_crops_scale=(0.4, 1.0), local_crops_scale=(0.05, 0.4), local_crops_number=8):
        flip_and_color_jitter = T.Compose([
            T.RandomHorizontalFlip(p=0.5),
            T.RandomApply([T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)], p=0.8),
            T.RandomGrayscale(p=0.2),
        ])
        normalize = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
        bicubic = T.InterpolationMode.BICUBIC
        self.global_transfo1 = T.Compose([T.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
                                          flip_and_color_jitter, GaussianBlur(1.0), normalize])
        self.global_transfo2 = T.Compose([T.RandomResizedCrop(224, scale=global_crops_scale, interpolation=bicubic),
                                          flip_and_color_jitter, GaussianBlur(0.1), Solarization(0.2), normalize])
        self.local_crops_number = local_crops_number
        self.local_transfo = T.Compose([T.RandomResizedCrop(96, scale=local_crops_scale, interpolation=bicubic),
                                        flip_and_color_jitter, GaussianBlur(p=0.5), normalize])

    def __call__(self, image):
        crops = [self.global_transfo1(image), self.global_transfo2(image)]
        for _ in range(self.local_crops_number):
            crops.append(self.local_transfo(image))
        return crops


# --- another multi-crop, with steps invented here ----------------------------------------

class LevelsAndEdges:
    """A user step: a NumPy coin, then a Pillow point table from a Python draw and a filter
    chosen by ``random.choice``."""

    def __call__(self, img):
        if np.random.rand() < 0.3:
            return img
        gain = random.uniform(0.7, 1.3)
        img = img.point(lambda v: min(255, int(v * gain)))
        return img.filter(random.choice([ImageFilter.SHARPEN, ImageFilter.EDGE_ENHANCE, ImageFilter.SMOOTH]))


class ThreeViews:
    """A tuple of three views of other sizes: bilinear and lanczos crops, v1 Resize + CenterCrop,
    posterize through ImageOps, grayscale, vertical flips, PILToTensor-free float output."""

    def __init__(self):
        self.a = T.Compose([T.RandomResizedCrop(64, scale=(0.2, 1.0)), T.RandomVerticalFlip(), LevelsAndEdges(),
                            T.ToTensor(), T.Normalize((0.5,), (0.25,))])
        self.b = T.Compose([T.Resize(56), T.CenterCrop(48), T.RandomApply([T.ColorJitter(0.3, 0.3, 0.3, 0.05)]),
                            T.Grayscale(3), T.ToTensor()])
        self.c = T.Compose([T.RandomResizedCrop((40, 30), interpolation=T.InterpolationMode.LANCZOS),
                            LevelsAndEdges(), T.ToTensor(), T.Normalize(MEAN, STD, inplace=True)])

    def __call__(self, img):
        posterized = ImageOps.posterize(img, random.choice([3, 5]))
        return self.a(img), self.b(posterized), self.c(img)


class AutoLevel:
    """A user step that reads pixels (``getextrema``)."""

    def __init__(self, small_only=False):
        self.small_only = small_only

    def __call__(self, img):
        if self.small_only and min(img.size) > 10:
            return img
        lo, hi = img.convert("L").getextrema()
        return img.point(lambda v: (v - lo) * 255 // max(1, hi - lo))


def reference(dataset, order, batch_size, seed=SEED, epoch=0):
    """The dataset's own samples under sample_rng, collated batch by batch (test_dataloader's)."""
    return dataloader_reference(dataset, order, batch_size, seed=seed, epoch=epoch)


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and len(g) == len(w)
        views_g, views_w = g[0], w[0]
        assert type(views_g) is type(views_w)
        if isinstance(views_w, torch.Tensor):
            views_g, views_w = [views_g], [views_w]
        assert len(views_g) == len(views_w)
        for a, b in zip(views_g, views_w):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b)
        assert torch.equal(g[1], w[1])


class TestMultiCrop:
    def test_dino_unchanged_runs_on_threads_bit_for_bit(self, root):
        ds = ImageFolder(root, DataAugmentationDINO())
        loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        got = list(loader)
        assert len(got[0][0]) == 10
        assert [tuple(v.shape[1:]) for v in got[0][0]] == [(3, 224, 224)] * 2 + [(3, 96, 96)] * 8
        assert_same(got, reference(ds, list(range(len(ds))), 4))
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))  # the next epoch

    def test_dino_shuffled_subset(self, root):
        ds = ImageFolder(root, DataAugmentationDINO(local_crops_number=2))
        sub = Subset(ds, [8, 0, 3, 5, 2, 7])
        loader = DataLoader(sub, batch_size=4, shuffle=True, num_workers=1, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        it = iter(loader)
        order = list(loader.sampler)
        assert_same(list(it), reference(sub, order, 4))

    @pytest.mark.parametrize("workers", [0, 2])
    def test_other_views_and_user_steps(self, root, workers):
        ds = ImageFolder(root, ThreeViews())
        loader = DataLoader(ds, batch_size=3, num_workers=workers, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        got = list(loader)
        assert [tuple(v.shape[1:]) for v in got[0][0]] == [(3, 64, 64), (3, 48, 48), (3, 40, 30)]
        assert_same(got, reference(ds, list(range(len(ds))), 3))
        if workers:  # resume mid-epoch 1: the batches the saving loader would have given
            it = iter(loader)
            next(it)
            state = loader.state_dict()
            resumed = DataLoader(ds, batch_size=3, num_workers=workers, seed=SEED)
            resumed.load_state_dict(state)
            assert_same(list(resumed), reference(ds, list(range(3, len(ds))), 3, epoch=1))

    def test_single_view_pil_colour_pipeline(self, root):
        ds = ImageFolder(root, T.Compose([T.RandomResizedCrop(32), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                                          T.RandomGrayscale(0.5), T.ToTensor()]))
        loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4))


    @pytest.mark.parametrize("normalize", [False, True])
    def test_v2_pil_to_tensor_and_to_dtype_views(self, root, normalize):
        """A list of views that end in v2 PILToTensor + ToDtype(float32, scale=True) (+ v2
        Normalize): traced, with v2's product by float32(1 / 255), bit for bit."""
        tail = [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True)] + ([v2.Normalize(MEAN, STD)] if normalize
                                                                            else [])
        views = [v2.Compose([v2.RandomResizedCrop(40), v2.RandomHorizontalFlip(), v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
                             *tail]),
                 v2.Compose([v2.RandomResizedCrop(24, interpolation=v2.InterpolationMode.BICUBIC), *tail])]

        class Views:
            def __call__(self, image):
                return [view(image) for view in views]

        ds = ImageFolder(root, Views())
        loader = DataLoader(ds, batch_size=3, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        assert_same(list(loader), reference(ds, list(range(len(ds))), 3))


TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
TRAIN_V2 = v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(28, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


class Wraps:
    """A user class around a Compose the native compiler takes whole."""

    def __init__(self, inner, before=False, after=False, python_draw=False):
        self.inner, self.before, self.after, self.python_draw = inner, before, after, python_draw

    def __call__(self, img):
        if self.python_draw and random.random() < 0.5:  # Python's random: no torch draw
            img = img.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
        if self.before and torch.rand(()) < 0.5:  # a torch draw first: the Compose's draws follow it
            img = img.rotate(90)
        out = self.inner(img)
        if self.after and torch.rand(()) < 0.5:  # a torch draw after: the Compose's draws come first
            out = self.inner(img)
        return out


class TestCompiledCompose:
    """A whole Compose the native compiler takes, called on the untouched image as the sample's
    first torch draw, is planned and run natively; everything else is traced op by op. The
    reference is the dataset itself either way."""

    @pytest.mark.parametrize("inner", [TRAIN, TRAIN_V2], ids=["v1", "v2"])
    def test_wrapped_compose_runs_natively_and_exactly(self, root, inner):
        ds = ImageFolder(root, Wraps(inner))
        loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        pipeline = loader._thread_loader.pipeline
        with open(ds.samples[0][0], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        assert pipeline.plan(data, key=7).native is not None, "the Compose was traced op by op"
        for epoch in range(2):
            it = iter(loader)
            order = list(loader.sampler)
            assert_same(list(it), reference(ds, order, 4, epoch=epoch))

    @pytest.mark.parametrize("kwargs", [dict(before=True), dict(after=True), dict(python_draw=True)],
                             ids=["torch-draw-before", "torch-draw-after", "python-draw-before"])
    def test_other_draws_keep_exactness(self, root, kwargs):
        ds = ImageFolder(root, Wraps(TRAIN, **kwargs))
        loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        pipeline = loader._thread_loader.pipeline
        with open(ds.samples[0][0], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        native = [pipeline.plan(data, key=k).native is not None for k in range(16)]
        if kwargs.get("python_draw"):
            assert any(native) and not all(native)  # flipped first: traced; else native
        else:
            assert not any(native)
        it = iter(loader)
        order = list(loader.sampler)
        assert_same(list(it), reference(ds, order, 3))

    @pytest.mark.parametrize("views", [(TRAIN, TRAIN), (TRAIN_V2, TRAIN_V2, TRAIN_V2),
                                       (TRAIN, T.Compose([T.Resize(40), T.CenterCrop(36), T.ToTensor()]))],
                             ids=["two-v1", "three-v2", "v1-crop-and-center"])
    def test_several_compiled_composes_run_as_one_multiview(self, root, views):
        """A SimCLR-style class: each view a whole compiled Compose of the untouched image, drawn
        one after the other (a MultiViewPipeline of theirs)."""
        ds = ImageFolder(root, lambda img: [v(img) for v in views])
        loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        with open(ds.samples[0][0], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        assert loader._thread_loader.pipeline.plan(data, key=3).native is not None
        it = iter(loader)
        order = list(loader.sampler)
        assert_same(list(it), reference(ds, order, 3))

    def test_compiled_views_out_of_call_order_are_traced(self, root):
        def swapped(img):
            first = TRAIN(img)
            second = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])(img)
            return [second, first]

        ds = ImageFolder(root, swapped)
        loader = DataLoader(ds, batch_size=3, num_workers=2, seed=SEED)
        with open(ds.samples[0][0], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        assert loader._thread_loader.pipeline.plan(data, key=3).native is None
        assert_same(list(loader), reference(ds, list(range(len(ds))), 3))

    def test_compose_output_computed_on_is_traced(self, root):
        ds = ImageFolder(root, T.Compose([T.Lambda(lambda im: TRAIN(im)), T.Normalize((0.1,) * 3, (2.0,) * 3)]))
        loader = DataLoader(ds, batch_size=3, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        assert_same(list(loader), reference(ds, list(range(len(ds))), 3))

    def test_a_full_table_makes_room(self, root, monkeypatch):
        """A long-lived process that built many loaders still compiles the next Compose."""
        from fastprep.data import traced

        table = traced._CompiledComposes()
        monkeypatch.setattr(traced, "_COMPOSES", table)
        kept = [T.Compose([T.CenterCrop(8 + k), T.ToTensor()]) for k in range(traced._MAX_COMPOSES + 8)]
        for compose in kept:  # used twice each, kept alive: none is a Compose made per call
            assert table.get(compose) is not None and table.get(compose) is not None
        assert len(table._known) == traced._MAX_COMPOSES and table._single_use == 0
        ds = ImageFolder(root, Wraps(TRAIN))
        loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
        with open(ds.samples[0][0], "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        assert loader.engine == "threads", loader.engine_reason
        assert loader._thread_loader.pipeline.plan(data, key=7).native is not None
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4))

    def test_multiview_table_keeps_the_recent_combinations(self, monkeypatch):
        """Past _MAX_COMPOSES combinations the newest is still kept (the oldest leaves)."""
        from fastprep.data import traced

        table = traced._CompiledComposes()
        monkeypatch.setattr(traced, "_COMPOSES", table)
        n = traced._MAX_COMPOSES + 4
        pipes = [table.get(T.Compose([T.CenterCrop(8 + k), T.ToTensor()])) for k in range(n)]
        for k in range(n):  # n distinct pairs, the last (pipes[-1], pipes[0])
            table.multi([pipes[k], pipes[(k + 1) % n]])
        newest = [pipes[-1], pipes[0]]
        assert table.multi(newest) is table.multi(newest)
        assert len(table._multi) == traced._MAX_COMPOSES

    def test_composes_made_per_call_stop_compiling(self, monkeypatch):
        from fastprep.data import traced

        table = traced._CompiledComposes()
        monkeypatch.setattr(traced, "_COMPOSES", table)
        compiled = [table.get(T.Compose([T.CenterCrop(16), T.ToTensor()])) is not None
                    for _ in range(3 * traced._MAX_COMPOSES)]
        assert len(table._known) <= traced._MAX_COMPOSES
        # the first _MAX_COMPOSES and those that evicted the single-use ones are compiled, then none
        assert all(compiled[:2 * traced._MAX_COMPOSES]) and not any(compiled[2 * traced._MAX_COMPOSES:])

    def test_composes_made_per_call_are_bounded(self, root):
        from fastprep.data.traced import _COMPOSES, _MAX_COMPOSES

        ds = ImageFolder(root, lambda im: T.Compose([T.CenterCrop(16), T.ToTensor()])(im))
        loader = DataLoader(ds, batch_size=3, num_workers=2, seed=SEED)
        for _ in range(3):
            assert_same(list(loader), reference(ds, list(range(len(ds))), 3))
        assert len(_COMPOSES._known) <= _MAX_COMPOSES


class TestKeyedDrawTwins:
    """The trace's own forms of torchvision's v1 random draws (on the trace's generator, torch
    functions disabled) draw what torchvision's methods draw from a generator seeded alike."""

    SIZES = [(1, 1), (3, 2), (4000, 16), (16, 4000), (500, 375)]

    def test_random_resized_crop_params(self):
        from fastprep._seeding import keyed_thread_rng

        install_hooks()
        original = T.RandomResizedCrop.get_params.__wrapped__
        for w, h in self.SIZES:
            for scale, ratio in [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.9, 1.0), (10.0, 20.0)), ((0.5, 0.5), (1.0, 1.0))]:
                for key in range(40):
                    with keyed_thread_rng(key):
                        got = T.RandomResizedCrop.get_params(LazyImage("RGB", (w, h), object()), scale, ratio)
                        after = torch.rand(())  # the generator left where torchvision leaves it
                    torch.manual_seed(key)
                    want = original(Image.new("RGB", (w, h)), scale, ratio)
                    assert got == want and torch.equal(after, torch.rand(())), (w, h, scale, ratio, key)

    @pytest.mark.parametrize("make", [lambda: T.RandomHorizontalFlip(0.3), lambda: T.RandomVerticalFlip(0.7),
                                      lambda: T.RandomGrayscale(0.1), lambda: T.RandomApply([T.RandomVerticalFlip(1.0)],
                                                                                            p=0.6),
                                      lambda: T.ColorJitter(0.4, (0.5, 1.5), 0.2, 0.1),
                                      lambda: T.ColorJitter(hue=0.3)])
    def test_draw_and_apply_like_torchvision(self, make):
        from fastprep._seeding import keyed_thread_rng
        from fastprep.data.traced import _Decoded, _replay

        install_hooks()
        t = make()
        img = Image.fromarray(photo_like(24, 30, 3))
        for key in range(60):
            source = object()
            with keyed_thread_rng(key):
                lazy = t(LazyImage("RGB", img.size, source))
                after = torch.rand(())
            torch.manual_seed(key)
            want = t(img)
            assert torch.equal(after, torch.rand(()))
            # the recorded ops, replayed by Pillow's own calls, give torchvision's image
            replayed = _replay(lazy.ops, _Decoded(None, (0, 0), img))
            assert replayed.mode == want.mode and np.array_equal(np.asarray(replayed), np.asarray(want)), key


class TestFallback:
    def test_pixel_reading_transform_runs_as_written(self, root):
        ds = ImageFolder(root, T.Compose([T.RandomResizedCrop(32), AutoLevel(), T.ToTensor()]))
        loader = DataLoader(ds, batch_size=4, seed=SEED)
        assert loader.engine == "processes"
        assert "reads the image's pixels" in loader.engine_reason and "runs as written" in loader.engine_reason
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4))

    def test_pixel_read_on_some_samples_runs_them_as_written(self, root):
        ds = ImageFolder(root, T.Compose([AutoLevel(small_only=True), T.RandomResizedCrop(32), T.ToTensor()]))
        loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4))
        assert loader.literal_samples, "the tiny images read pixels"
        assert all("pixels" in reason for reason in loader.literal_samples)

    def test_user_error_surfaces(self, root):
        class Fails:
            def __call__(self, img):
                if img.size == (2, 3):
                    raise ValueError("no tiny images here")
                return F.to_tensor(F.resize(img, [8, 8]))

        ds = ImageFolder(root, Fails())
        loader = DataLoader(ds, batch_size=3, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        with pytest.raises(ValueError, match="no tiny images here"):
            list(loader)

    def test_output_of_another_kind_is_not_traced(self, root):
        ds = ImageFolder(root, T.Compose([T.RandomResizedCrop(32)]))  # PIL images out
        loader = DataLoader(ds, batch_size=None, seed=SEED)
        assert loader.engine == "processes"


class TestLazyImage:
    def test_pixel_reads_raise(self):
        img = LazyImage("RGB", (10, 8), object())
        for read in (lambda: np.asarray(img), img.histogram, lambda: img.getpixel((0, 0)), img.tobytes,
                     lambda: Image.blend(img, img, 0.5), lambda: img.rotate(10, expand=True)):
            with pytest.raises(PixelRead):
                read()

    def test_records_sizes_and_modes(self):
        img = LazyImage("RGB", (10, 8), object())
        out = img.crop((1, 2, 7, 8)).resize((5, 4)).transpose(Image.Transpose.ROTATE_90).convert("L")
        assert (out.size, out.mode) == ((4, 5), "L")
        assert [op[0] for op in out.ops] == ["crop", "method", "method", "method"]

    def test_hooks_leave_real_images_alone(self):
        install_hooks()
        arr = photo_like(20, 30, 3)
        im = Image.fromarray(arr)
        got = np.asarray(F.adjust_hue(F.adjust_contrast(im, 1.3), 0.1))
        import torchvision.transforms._functional_pil as F_pil

        want = np.asarray(F_pil.adjust_hue.__wrapped__(F_pil.adjust_contrast.__wrapped__(im, 1.3), 0.1))
        assert np.array_equal(got, want)
        assert torch.equal(F.normalize(F.to_tensor(im), MEAN, STD),
                           (torch.from_numpy(arr).permute(2, 0, 1).float() / 255 - torch.tensor(MEAN).view(3, 1, 1))
                           / torch.tensor(STD).view(3, 1, 1))

    def test_lazy_tensor_refuses_computation(self):
        """A v2 transform would pass an object it does not know through unchanged: the stand-in
        tensor is a torch.Tensor whose every computation raises instead."""
        install_hooks()
        t = F.to_tensor(LazyImage("RGB", (10, 8), object()))
        assert t.shape == (3, 8, 10) and t.dtype == torch.float32
        for compute in (lambda: v2.GaussianBlur(3)(t), lambda: t + 1, lambda: torch.stack([t])):
            with pytest.raises(PixelRead):
                compute()

    def test_v1_to_tensor_then_v2_normalize_is_exact(self, root):
        ds = ImageFolder(root, T.Compose([T.RandomResizedCrop(24), T.ToTensor(), v2.Normalize(MEAN, STD)]))
        loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4))


class TestTimm:
    """timm's create_transform pipelines (its own classes on PIL images: random interpolation,
    RandAugment drawing from random and NumPy, MaybeToTensor, RandomErasing on the tensor)."""

    @pytest.mark.parametrize("training", [True, False])
    def test_create_transform_traced_bit_for_bit(self, root, training):
        timm_data = pytest.importorskip("timm.data")
        t = timm_data.create_transform(48, is_training=training, auto_augment="rand-m9-mstd0.5", re_prob=0.5,
                                       re_mode="pixel", interpolation="random" if training else "bicubic")
        ds = ImageFolder(root, t)
        loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4))
        assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))

    def test_posterize_zero_bits_raises_as_the_dataset_does(self, tmp_path):
        """DeiT's rand-m9-mstd0.5-inc1 can ask Pillow to posterize to 0 bits, which it refuses: the
        loader raises the same error for the same sample, never "fixes" it."""
        timm_data = pytest.importorskip("timm.data")
        path = tmp_path / "img.jpg"
        path.write_bytes(make_jpeg("420", 20, 20, seed=1))

        class Repeated(torch.utils.data.Dataset):
            def __init__(self, transform):
                self.files, self.targets, self.transform = [str(path)] * 3000, [0] * 3000, transform

            def __len__(self):
                return len(self.files)

            def __getitem__(self, i):
                return self.transform(Image.open(self.files[i]).convert("RGB")), self.targets[i]

            def __fastprep_source__(self):
                return self.files, self.targets, self.transform

        ds = Repeated(timm_data.create_transform(16, is_training=True, auto_augment="rand-m9-mstd0.5-inc1",
                                                 interpolation="bicubic"))
        failing = None
        for i in range(len(ds)):
            try:
                with sample_rng(SEED, 0, i):
                    ds[i]
            except ValueError as e:
                failing, message = i, str(e)
                break
        assert failing is not None and "bits must be between" in message
        for engine in ("threads", "processes"):
            loader = DataLoader(ds, batch_size=2, sampler=[failing - 1, failing], seed=SEED, engine=engine)
            assert loader.engine == engine
            with pytest.raises(ValueError, match="bits must be between") as info:
                list(loader)
            assert str(path) in str(info.value)


def _recorded(fn, size=(7, 5)):
    """The op a lazy image of ``size`` (W, H) records for ``fn(image)``."""
    install_hooks()
    return fn(LazyImage("RGB", size, object())).ops[-1]


@pytest.mark.parametrize("make", [
    lambda im: F.adjust_hue(im, 0.23), lambda im: F.adjust_contrast(im, 1.7), lambda im: F.adjust_saturation(im, 0.4),
    lambda im: F.adjust_brightness(im, 1.3), lambda im: F.adjust_sharpness(im, 1.9),
    lambda im: F.rgb_to_grayscale(im, 3), lambda im: F.rgb_to_grayscale(im, 1), lambda im: F.autocontrast(im),
    lambda im: F.equalize(im),
    lambda im: ImageOps.autocontrast(im), lambda im: ImageOps.equalize(im), lambda im: ImageOps.solarize(im, 100),
    lambda im: ImageOps.posterize(im, 3), lambda im: im.filter(ImageFilter.GaussianBlur(1.3)),
    lambda im: im.filter(ImageFilter.GaussianBlur((0.4, 2.2))), lambda im: im.convert("L"),
    lambda im: im.transpose(Image.Transpose.FLIP_LEFT_RIGHT), lambda im: im.transpose(Image.Transpose.FLIP_TOP_BOTTOM),
    lambda im: ImageEnhance.Color(im).enhance(0.3), lambda im: ImageEnhance.Contrast(im).enhance(0.3),
    # timm's auto-augment geometry: its fill is the dataset mean, its resample drawn
    lambda im: im.rotate(17.5, resample=Image.Resampling.BICUBIC, fillcolor=(124, 116, 104)),
    lambda im: im.rotate(-30, resample=Image.Resampling.NEAREST),
    lambda im: im.rotate(200.25, resample=Image.Resampling.BILINEAR, center=(1.5, 2.0), fillcolor=(9, 0, 255)),
    lambda im: im.transform(im.size, Image.Transform.AFFINE, (1, 0.3, 0, 0, 1, 0), resample=Image.Resampling.BILINEAR,
                            fillcolor=(124, 116, 104)),
    lambda im: im.transform(im.size, Image.Transform.AFFINE, (1, 0, -3.7, 0, 1, 2), resample=Image.Resampling.BICUBIC),
])
@pytest.mark.parametrize("shape", [(1, 1), (3, 2), (2, 300), (41, 37)])
def test_tensor_replay_equals_pillow(make, shape):
    """Each op the replay runs on a view's tensor (a PIL twin, a flip, a table) gives what Pillow
    itself gives, on tiny, thin, very wide and odd images."""
    from fastprep.data.traced import _fill_call_twins, _tensor_op, _to_pil

    h, w = shape
    op = _recorded(make, (w, h))
    _fill_call_twins()
    arr = photo_like(max(h, 8), max(w, 8), h * w)[:h, :w]
    want = np.asarray(make(Image.fromarray(arr)))
    got = _tensor_op(op, torch.from_numpy(arr).permute(2, 0, 1))
    assert got is not None, f"{op[:2]} has no kernel"
    assert np.array_equal(np.asarray(_to_pil(got)), want)


def test_iterating_inside_sample_rng_raises_instead_of_hanging(root, monkeypatch):
    """The threads engine's traces take the lock sample_rng holds: a loader iterated inside a
    sample_rng block raises (after a wait) rather than waiting forever."""
    import fastprep._seeding as seeding

    monkeypatch.setattr(seeding, "RNG_LOCK_TIMEOUT_S", 0.3)
    ds = ImageFolder(root, DataAugmentationDINO(local_crops_number=1))
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    with sample_rng(SEED, 0, 0):
        with pytest.raises(Exception, match="sample_rng") as info:
            list(loader)
    assert isinstance(info.value, seeding.RngBusy) or isinstance(info.value.__cause__, seeding.RngBusy)
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4, epoch=1))  # and works after it


class DINOv2Like:
    """DINOv2's augmentation shape: torchvision's own v1 GaussianBlur (a tensor computation inside
    torchvision) and RandomSolarize on PIL images, inside a RandomApply subclass."""

    class Blur(T.RandomApply):
        def __init__(self, p):
            super().__init__([T.GaussianBlur(kernel_size=9, sigma=(0.1, 2.0))], p=p)

    def __init__(self):
        self.view = T.Compose([T.RandomResizedCrop(40, interpolation=T.InterpolationMode.BICUBIC),
                               T.RandomHorizontalFlip(), self.Blur(0.5), T.RandomSolarize(128, p=0.5),
                               T.ToTensor(), T.Normalize(MEAN, STD)])

    def __call__(self, image):
        return {"views": [self.view(image), self.view(image)]}["views"]


def test_dinov2_like_views(root):
    ds = ImageFolder(root, DINOv2Like())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4))


@pytest.mark.parametrize("make", [
    lambda: T.Compose([T.Resize((32, 32)), T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                       T.Normalize(MEAN, STD)]),
    lambda: T.Compose([T.Resize((30, 26)), T.Pad((3, 1), padding_mode="reflect"), T.RandomRotation(20),
                       T.RandomAffine(10, translate=(0.1, 0.1), shear=5), T.ToTensor(), T.RandomErasing(p=0.7)]),
    lambda: T.Compose([T.RandomResizedCrop(28), T.ToTensor(), T.Normalize(MEAN, STD),
                       T.RandomErasing(p=0.9, value="random")]),
])
def test_cifar_style_and_geometry_pipelines(root, make):
    """Padding (CIFAR's RandomCrop(32, padding=4)), rotation, affine and v1 RandomErasing (a copy,
    then a write of values drawn during the trace) on PIL images, traced."""
    ds = ImageFolder(root, make())
    loader = DataLoader(ds, batch_size=4, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    assert_same(list(loader), reference(ds, list(range(len(ds))), 4))


def _view_pipeline(size, interpolation):
    """A DINO-style view with every op the native view path takes (crop + resize + flip, colour,
    grayscale, blur, solarize through Image.point, ToTensor, Normalize)."""
    return T.Compose([T.RandomResizedCrop(size, scale=(0.05, 1.0), interpolation=interpolation),
                      T.RandomHorizontalFlip(p=0.5),
                      T.RandomApply([T.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)], p=0.8),
                      T.RandomGrayscale(p=0.2), GaussianBlur(p=0.5), Solarization(0.3), T.ToTensor(),
                      T.Normalize(MEAN, STD)])


@pytest.mark.parametrize("interpolation", [T.InterpolationMode.BICUBIC, T.InterpolationMode.BILINEAR])
@pytest.mark.parametrize("window", [False, True])
def test_native_views_equal_pillow_and_torchvision(interpolation, window):
    """pil_replay_views (a sample's views in one native call, each crop read from the decoded
    window) writes what the views' own Pillow + torchvision calls give on the real image, over
    many draws; with ``window``, from a decoded window of the image (the union of the views'
    crops) at its origin."""
    from fastprep._seeding import keyed_sample_rng
    from fastprep.data.traced import _Decoded, _fill_call_twins, _NativeViews, _union_window

    install_hooks()
    _fill_call_twins()
    arr = photo_like(150, 205, 3)
    image = Image.fromarray(arr)
    pipelines = [_view_pipeline(61, interpolation), _view_pipeline(23, interpolation)]
    for key in range(40):
        with keyed_sample_rng(key):
            views = [p(LazyImage("RGB", image.size, object())) for p in pipelines]
        with keyed_sample_rng(key):
            want = [p(image) for p in pipelines]
        top, left, h, w = _union_window(views, 205, 150) if window else (0, 0, 150, 205)
        rgb = torch.from_numpy(arr[top:top + h, left:left + w].copy()).permute(2, 0, 1)  # channels-last memory
        outs = [torch.full(w.shape, float("nan")) for w in want]
        native = _NativeViews()
        for view, out in zip(views, outs):
            assert native.add(view, _Decoded(rgb, (left, top)), "RGB", out), view.image.ops
        native.run()
        for view, out, expected in zip(views, outs, want):
            assert torch.equal(out, expected), (key, view.image.ops)


def test_native_view_declines_what_it_cannot_run():
    """A view with an op that has no pixel step (a perspective transform here) is left to the
    per-op replay, which writes nothing into the row."""
    from fastprep.data.traced import _Decoded, _fill_call_twins, _NativeViews

    install_hooks()
    _fill_call_twins()
    view = T.Compose([T.CenterCrop(20), T.RandomPerspective(p=1.0), T.ToTensor()])(LazyImage("RGB", (30, 30), object()))
    out = torch.zeros(3, 20, 20)
    rgb = torch.from_numpy(photo_like(30, 30, 1)).permute(2, 0, 1)
    native = _NativeViews()
    assert not native.add(view, _Decoded(rgb, (0, 0)), "RGB", out)
    native.run()
    assert not out.any()


class TestReplayViewOp:
    def test_step_records_follow_the_cpp_layout(self):
        """The packed records hold each field where the C++ struct has it (struct_layout)."""
        from fastprep._layout import struct_dtype
        from fastprep.transforms._native import kernel_id, pack_steps

        steps = [("pil_adjust_hue", (), (0.1,), -1), ("pil_rotate", (3, 3, 1), (17.5, 1.5, 2.0, 9, 0, 255), -1),
                 ("pil_point", (), (), 0)]
        records = np.frombuffer(pack_steps(steps), dtype=np.uint8).view(struct_dtype("PixelStep"))
        for record, (name, ints, floats, extra) in zip(records, steps):
            assert record["kernel"] == kernel_id(name) and record["extra"] == extra
            assert list(record["i"]) == [*ints, *[0] * (len(record["i"]) - len(ints))]
            assert list(record["f"]) == [*floats, *[0.0] * (len(record["f"]) - len(floats))]

    def test_point_equals_pillow(self):
        rng = np.random.default_rng(2)
        arr = photo_like(33, 47, 5)
        lut = rng.integers(0, 256, 768).tolist()
        want = np.asarray(Image.fromarray(arr).point(lut))
        got = torch.ops.fastprep.apply_pixel_kernel(torch.from_numpy(arr).permute(2, 0, 1).contiguous(), "pil_point",
                                                    [], [], 0, [torch.tensor(lut, dtype=torch.uint8)], 0)
        assert np.array_equal(got.permute(1, 2, 0).numpy(), want)

    def test_crops_cut_the_window_as_slicing_does(self):
        """``crops`` (x0, y0, x1, y1 per view) against plain tensor slicing, on a window that is a
        channels-last view as the decode gives it, views of different boxes in one call."""
        rng = np.random.default_rng(4)
        window = torch.from_numpy(rng.integers(0, 256, (9, 13, 3), dtype=np.uint8)).permute(2, 0, 1)
        boxes = [(0, 0, 13, 9), (2, 1, 7, 8), (12, 8, 13, 9), (3, 0, 4, 9)]
        outs = [torch.empty(3, y1 - y0, x1 - x0, dtype=torch.uint8) for x0, y0, x1, y1 in boxes]
        steps = torch.empty(0, dtype=torch.uint8)
        torch.ops.fastprep.pil_replay_views([window], [0, 0, 0, 0] * 4, [steps] * 4, [], outs, [0] * 4, [], [],
                                            [0] * 4, [v for box in boxes for v in box])
        for (x0, y0, x1, y1), out in zip(boxes, outs):
            assert torch.equal(out, window[:, y0:y1, x0:x1])

    def test_bad_arguments_raise(self):
        image = torch.zeros(3, 8, 8, dtype=torch.uint8)
        steps = torch.zeros(0, dtype=torch.uint8)
        no_resize = [0, 0, 0, 0]

        def op(img, resize, stp, tables, out, scale, mean, std):
            torch.ops.fastprep.pil_replay_views([img], resize or no_resize, [stp], tables, [out], [scale], mean, std,
                                                [len(mean)])

        with pytest.raises(ValueError, match="out is"):
            op(image, [], steps, [], torch.zeros(3, 4, 4), 1, [], [])
        with pytest.raises(ValueError, match="per view one image"):
            op(image, [4, 4], steps, [], torch.zeros(3, 4, 4), 1, [], [])
        with pytest.raises(ValueError, match="1 means and 0 stds"):
            op(image, [], steps, [], torch.zeros(3, 8, 8), 1, [0.5], [])
        with pytest.raises(ValueError, match="image must be a uint8"):
            op(image.float(), [], steps, [], torch.zeros(3, 8, 8), 1, [], [])
        with pytest.raises(ValueError, match="scale must be"):
            op(image, [], steps, [], torch.zeros(3, 8, 8), 3, [], [])
        with pytest.raises(ValueError, match="PixelStep"):
            op(image, [], torch.zeros(5, dtype=torch.uint8), [], torch.zeros(3, 8, 8), 1, [], [])
        with pytest.raises(ValueError, match="table"):  # pil_point without its table
            from fastprep.transforms._native import pack_steps
            point = torch.frombuffer(pack_steps([("pil_point", (), (), 0)]), dtype=torch.uint8)
            op(image, [], point, [], torch.zeros(3, 8, 8), 1, [], [])
        views = torch.ops.fastprep.pil_replay_views
        with pytest.raises(ValueError, match="with crops, one image"):  # crops: the window once
            views([image, image], no_resize, [steps], [], [torch.zeros(3, 8, 8)], [1], [], [], [0], [0, 0, 8, 8])
        with pytest.raises(ValueError, match="crop \\[2, 0, 10, 8\\] is not within the image"):
            views([image], no_resize, [steps], [], [torch.zeros(3, 8, 8)], [1], [], [], [0], [2, 0, 10, 8])
        with pytest.raises(ValueError, match="crop \\[3, 3, 3, 5\\] is not within"):  # empty
            views([image], no_resize, [steps], [], [torch.zeros(3, 2, 0)], [1], [], [], [0], [3, 3, 3, 5])
        with pytest.raises(ValueError, match="takes 3 of the 0 means left"):
            torch.ops.fastprep.pil_replay_views([image], no_resize, [steps], [], [torch.zeros(3, 8, 8)], [1], [], [],
                                                [3])
