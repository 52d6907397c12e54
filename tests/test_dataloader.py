"""fastprep.data.DataLoader (a drop-in for torch's) and fastprep.data.sample_rng.

The reference is always the user's own dataset run literally: ``default_collate([with
sample_rng(S, e, i): dataset[i] for i in the batch])`` -- torchvision's ImageFolder opening the
files with Pillow and the user's transforms, never another fastprep path.
"""

import os
import random

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import ConcatDataset, Dataset, Subset, default_collate, random_split
from torchvision.datasets import ImageFolder
from torchvision.transforms import v2

from conftest import make_image_folder, make_jpeg
from fastprep import io as fio
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.data import IMAGENET_MEAN, IMAGENET_STD, DataLoader, sample_rng

SEED = 7

# (encoding, height, width): gray, CMYK and progressive among them; one PNG
_FILES = [("420", 90, 120), ("444", 77, 101), ("gray", 64, 96), ("cmyk", 81, 70), ("420-progressive", 100, 66),
          ("gray-progressive", 70, 70), ("422-progressive", 96, 128), ("422", 120, 90), ("png", 72, 88),
          ("420", 66, 140), ("444-progressive", 88, 88), ("cmyk", 64, 64)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("imagefolder"), _FILES, classes=3)


def v2_float():
    return v2.Compose([v2.ToImage(), v2.RandomResizedCrop(40, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def v2_uint8():
    return v2.Compose([v2.PILToTensor(), v2.Resize(48), v2.CenterCrop(40)])


def references_tensor_v2():
    """torchvision references/classification/presets.py, ClassificationPresetTrain(backend="tensor",
    use_v2=True, auto_augment_policy="ta_wide", random_erase_prob=0.5)'s Compose."""
    return v2.Compose([v2.PILToTensor(), v2.RandomResizedCrop(36, interpolation=v2.InterpolationMode.BILINEAR,
                                                                antialias=True),
                       v2.RandomHorizontalFlip(0.5), v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR),
                       v2.ToDtype(torch.float, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                       v2.RandomErasing(p=0.5), v2.ToPureTensor()])


def v1_convert_image_dtype():
    """v2 geometry, then v1's ConvertImageDtype (x / 255, not v2's x * (1/255)) and Normalize."""
    return T.Compose([v2.ToImage(), v2.RandomResizedCrop(36), v2.RandomHorizontalFlip(),
                      T.ConvertImageDtype(torch.float32), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def v1_tensor():
    return T.Compose([T.PILToTensor(), T.RandomResizedCrop(40, antialias=True), T.RandomHorizontalFlip(),
                      T.ConvertImageDtype(torch.float32), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def reference(dataset, order, batch_size, seed=SEED, epoch=0, drop_last=False):
    """default_collate of the dataset's own samples under sample_rng, batch by batch."""
    out = []
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        if drop_last and len(chunk) < batch_size:
            break
        samples = []
        for i in chunk:
            with sample_rng(seed, epoch, i):
                samples.append(dataset[i])
        out.append(default_collate(samples))
    return out


def assert_batches_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w)
        assert len(g) == len(w)
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b)


class TestDecodeIsPillows:
    def test_fastprep_decode_equals_pil_convert_rgb(self, root):
        """The premise of the native path: fastprep's RGB decode equals ImageFolder's loader
        (Image.open(f).convert("RGB")) bit for bit, gray, CMYK and progressive included."""
        ds = ImageFolder(root)
        for path, _ in ds.samples:
            if path.endswith(".png"):
                continue
            want = torch.from_numpy(np.array(Image.open(path).convert("RGB"))).permute(2, 0, 1)
            assert torch.equal(fio.decode_jpeg(fio.read_file(path), "RGB"), want), path


class TestImageFolder:
    @pytest.mark.parametrize("make", [v2_float, v2_uint8, references_tensor_v2, v1_convert_image_dtype])
    def test_threads_equal_dataset(self, root, make):
        ds = ImageFolder(root, make())
        loader = DataLoader(ds, batch_size=5, seed=SEED, num_workers=2)
        assert loader.engine == "threads", loader.engine_reason
        assert loader.engine_reason is None
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 5))
        # the next epoch is epoch 1's samples
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 5, epoch=1))

    def test_processes_equal_dataset(self, root):
        ds = ImageFolder(root, v2_float())
        loader = DataLoader(ds, batch_size=4, seed=SEED, num_workers=2, engine="processes")
        assert loader.engine == "processes"
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 4))

    def test_v1_tensor_pipeline_runs_literally(self, root):
        ds = ImageFolder(root, v1_tensor())
        loader = DataLoader(ds, batch_size=5, seed=SEED)
        assert loader.engine == "processes"
        assert "PILToTensor" in loader.engine_reason
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 5))

    def test_pil_pipeline_runs_natively(self, root):
        """pytorch/examples' ImageNet train pipeline on PIL images: Pillow-exact kernels on the
        threads engine, the dataset's own samples bit for bit."""
        ds = ImageFolder(root, T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(),
                                          T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]))
        loader = DataLoader(ds, batch_size=6, seed=SEED, num_workers=2)
        assert loader.engine == "threads", loader.engine_reason
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 6))

    def test_pil_val_pipeline_runs_natively(self, root):
        ds = ImageFolder(root, T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(),
                                          T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]))
        loader = DataLoader(ds, batch_size=6, seed=SEED, num_workers=2)
        assert loader.engine == "threads", loader.engine_reason
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 6))

    def test_pil_op_without_native_side_is_traced(self, root):
        """A PIL op the compiler has no native side for (RandomOrder): the pipeline is traced (its
        ops replayed with Pillow's own calls) on the threads engine, the dataset's samples bit for bit."""
        ds = ImageFolder(root, T.Compose([T.RandomResizedCrop(32), T.RandomOrder([T.ColorJitter(0.4, 0.4)]),
                                          T.ToTensor()]))
        loader = DataLoader(ds, batch_size=6, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 6))

    def test_callable_object_is_traced(self, root):
        class Preset:  # torchvision's references/classification/presets.py shape
            def __init__(self):
                self.transforms = v2_float()

            def __call__(self, img):
                return self.transforms(img)

        ds = ImageFolder(root, Preset())
        loader = DataLoader(ds, batch_size=6, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 6))

    def test_callable_object_reading_pixels_runs_literally(self, root):
        class Preset:
            def __init__(self):
                self.transforms = v2_float()

            def __call__(self, img):
                brightness = float(np.asarray(img).mean()) / 255
                return self.transforms(img) + brightness

        ds = ImageFolder(root, Preset())
        loader = DataLoader(ds, batch_size=6, seed=SEED)
        assert loader.engine == "processes" and "a Preset, a callable" in loader.engine_reason
        assert "reads the image's pixels" in loader.engine_reason
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 6))

    def test_shuffle_drop_last_len(self, root):
        ds = ImageFolder(root, v2_uint8())
        torch_len = len(torch.utils.data.DataLoader(ds, batch_size=5, drop_last=True))
        loader = DataLoader(ds, batch_size=5, shuffle=True, drop_last=True, seed=SEED)
        assert loader.engine == "threads" and len(loader) == torch_len == 2
        batches = list(loader)
        assert len(batches) == 2 and all(b[0].shape[0] == 5 for b in batches)
        # the order is the sampler's (a permutation keyed by the seed and epoch)
        order = list(loader.sampler)
        assert sorted(order) == list(range(len(ds))) and order != list(range(len(ds)))
        # each epoch's sampler order was replaced by the next: rebuild epoch 0's
        fresh = DataLoader(ds, batch_size=5, shuffle=True, drop_last=True, seed=SEED)
        it = iter(fresh)
        order0 = list(fresh.sampler)
        assert_batches_equal(list(it), reference(ds, order0, 5, drop_last=True))

    def test_custom_sampler_keeps_threads(self, root):
        ds = ImageFolder(root, v2_float())
        order = [3, 1, 4, 1, 5, 9, 2, 6]
        loader = DataLoader(ds, batch_size=3, sampler=order, seed=SEED)
        assert loader.engine == "threads"
        assert_batches_equal(list(loader), reference(ds, order, 3))

    def test_collate_fn_runs_on_processes(self, root):
        ds = ImageFolder(root, v2_uint8())

        def collate(samples):
            return {"x": torch.stack([s[0] for s in samples]), "y": [s[1] for s in samples]}

        loader = DataLoader(ds, batch_size=4, collate_fn=collate, seed=SEED)
        assert loader.engine == "processes" and "collate_fn" in loader.engine_reason
        got = list(loader)
        assert [b["y"] for b in got] == [[t for _, t in ds.samples[k:k + 4]] for k in range(0, len(ds), 4)]


class TestSources:
    def test_subset_concat_random_split(self, root):
        ds = ImageFolder(root, v2_float())
        subset = Subset(ds, [5, 0, 11, 2, 8])
        parts = random_split(ds, [7, 5], generator=torch.Generator().manual_seed(0))
        concat = ConcatDataset([subset, parts[1]])
        for source in (subset, parts[0], concat):
            loader = DataLoader(source, batch_size=4, seed=SEED)
            assert loader.engine == "threads", loader.engine_reason
            assert_batches_equal(list(loader), reference(source, list(range(len(source))), 4))

    def test_concat_of_different_transforms_runs_literally(self, root):
        concat = ConcatDataset([ImageFolder(root, v2_float()), ImageFolder(root, v2_float())])
        loader = DataLoader(concat, batch_size=6, seed=SEED)
        assert loader.engine == "processes" and "different transforms" in loader.engine_reason
        assert_batches_equal(list(loader), reference(concat, list(range(len(concat))), 6))

    def test_protocol(self, root):
        folder = ImageFolder(root)

        class Declared(Dataset):
            def __init__(self, transform):
                self.files = [p for p, _ in folder.samples]
                self.targets = [t for _, t in folder.samples]
                self.transform = transform

            def __len__(self):
                return len(self.files)

            def __getitem__(self, i):
                return self.transform(Image.open(self.files[i]).convert("RGB")), self.targets[i]

            def __fastprep_source__(self):
                return self.files, self.targets, self.transform

        ds = Declared(v2_float())
        loader = DataLoader(ds, batch_size=5, seed=SEED)
        assert loader.engine == "threads"
        assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 5))


class _UserDataset(Dataset):
    """User code drawing from Python's random, NumPy's global RNG and torch."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return {"r": random.random(), "n": np.random.rand(3).astype(np.float32), "t": torch.rand(2), "i": i}


class _Raises(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 3:
            raise KeyError(f"no sample {i} here")
        return torch.zeros(2)


class TestUserDataset:
    @pytest.mark.parametrize("num_workers", [0, 2])
    def test_equal_sample_rng(self, num_workers):
        ds = _UserDataset()
        loader = DataLoader(ds, batch_size=4, shuffle=True, seed=SEED, num_workers=num_workers)
        assert loader.engine == "processes" and "__getitem__" in loader.engine_reason
        it = iter(loader)
        order = list(loader.sampler)
        got = list(it)
        want = reference(ds, order, 4)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.keys() == w.keys()
            for k in g:
                assert torch.equal(g[k], w[k]), k
        assert len(set(torch.cat([b["r"] for b in got]).tolist())) == 10  # the draws differ per sample

    def test_error_surfaces_as_torchs(self):
        loader = DataLoader(_Raises(), batch_size=2, num_workers=2, seed=SEED)
        with pytest.raises(KeyError, match="no sample 3 here"):
            list(loader)
        with pytest.raises(KeyError, match="no sample 3 here"):
            list(torch.utils.data.DataLoader(_Raises(), batch_size=2, num_workers=2))


class TestResume:
    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_mid_epoch(self, root, engine):
        ds = ImageFolder(root, v2_float())
        whole = list(DataLoader(ds, batch_size=3, shuffle=True, seed=SEED, engine=engine))
        first = DataLoader(ds, batch_size=3, shuffle=True, seed=SEED, engine=engine)
        it = iter(first)
        head = [next(it), next(it)]
        state = first.state_dict()
        del it
        second = DataLoader(ds, batch_size=3, shuffle=True, seed=SEED, engine=engine)
        second.load_state_dict(state)
        assert_batches_equal(head + list(second), whole)


class TestErrors:
    @pytest.fixture
    def broken(self, root, tmp_path):
        top = tmp_path / "broken"
        for name in ("a", "b"):
            (top / name).mkdir(parents=True)
        for k in range(4):
            (top / "a" / f"{k}.jpg").write_bytes(make_jpeg("420", 64, 64, seed=k))
        bad = top / "b" / "bad.jpg"
        bad.write_bytes(make_jpeg("420", 64, 64, seed=9)[:200])
        return str(top), str(bad)

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_corrupt_file_named_first_line(self, broken, engine):
        top, bad = broken
        loader = DataLoader(ImageFolder(top, v2_uint8()), batch_size=5, seed=SEED, engine=engine)
        with pytest.raises(Exception) as info:
            list(loader)
        assert bad in str(info.value).splitlines()[0]

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_skip(self, broken, engine):
        top, _ = broken
        ds = ImageFolder(top, v2_uint8())
        loader = DataLoader(ds, batch_size=5, seed=SEED, engine=engine, on_error="skip")
        (images, targets), = list(loader)
        assert images.shape == (5, 3, 40, 40) and loader.skipped == 1
        assert targets.tolist()[:4] == [0, 0, 0, 0]

    def test_arguments(self, root):
        ds = ImageFolder(root, v2_uint8())
        with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
            DataLoader(ds, bogus=1)
        with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
            DataLoader(ds, sampler=[0, 1], shuffle=True)
        with pytest.raises(ValueError, match="on_error"):
            DataLoader(ds, on_error="ignore")
        with pytest.raises(ValueError, match="engine='threads' cannot run"):
            DataLoader(ImageFolder(root, v1_tensor()), engine="threads")


class TestSampleRng:
    def test_restores_the_three_states(self):
        torch.manual_seed(1)
        random.seed(2)
        np.random.seed(3)
        before = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
        with sample_rng(SEED, 2, 5):
            inside = (torch.rand(3), random.random(), np.random.rand())
        assert torch.equal(torch.get_rng_state(), before[0])
        assert random.getstate() == before[1]
        assert np.array_equal(np.random.get_state()[1], before[2])
        with pytest.raises(RuntimeError):
            with sample_rng(SEED, 2, 5):
                random.random()
                raise RuntimeError("inside")
        assert random.getstate() == before[1]
        with sample_rng(SEED, 2, 5):
            again = (torch.rand(3), random.random(), np.random.rand())
        assert torch.equal(inside[0], again[0]) and inside[1:] == again[1:]
        with sample_rng(SEED, 2, 6):
            other = (torch.rand(3), random.random(), np.random.rand())
        assert not torch.equal(inside[0], other[0]) and inside[1] != other[1] and inside[2] != other[2]

    def test_torch_seeded_as_keyed_default_rng(self):
        """The native planner re-draws torch's calls from sample_key: sample_rng must seed
        torch exactly as keyed_default_rng did."""
        with keyed_default_rng(sample_key(SEED, 1, 4)):
            want = torch.rand(5)
        with sample_rng(SEED, 1, 4):
            got = torch.rand(5)
        assert torch.equal(got, want)

    def test_bad_arguments(self):
        with pytest.raises(TypeError, match="seed"):
            with sample_rng(None, 0, 0):
                pass
        with pytest.raises(ValueError, match="index must be an int >= 0, got -1"):
            with sample_rng(1, 0, -1):
                pass


def test_png_counted_not_warned(root):
    """A PNG in the folder is decoded by Pillow (as the dataset does), without a warning."""
    assert any(name.endswith(".png") for _, _, names in os.walk(root) for name in names)
    loader = DataLoader(ImageFolder(root, v2_float()), batch_size=12, seed=SEED)
    assert loader.engine == "threads"
    list(loader)


class TestCompileV1Output:
    def test_convert_image_dtype_kinds(self):
        from fastprep.transforms import OnDecoded
        from fastprep.transforms._compile import compile_pipeline
        from fastprep.transforms._native import Unsupported

        geometry = [v2.ToImage(), v2.CenterCrop(8)]
        v1_div = compile_pipeline(OnDecoded(T.Compose(geometry + [T.ConvertImageDtype(torch.float32),
                                                                  T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])))
        assert v1_div.to_float and v1_div.divide and v1_div.mean == tuple(IMAGENET_MEAN)
        v2_mul = compile_pipeline(OnDecoded(v2.Compose(geometry + [v2.ConvertImageDtype(torch.float32)])))
        assert v2_mul.to_float and not v2_mul.divide
        with pytest.raises(Unsupported, match=r"ConvertImageDtype\(torch.float16\)"):
            compile_pipeline(OnDecoded(T.Compose(geometry + [T.ConvertImageDtype(torch.float16)])))

    def test_v1_and_v2_float_conversions_differ(self):
        """Why v1 ConvertImageDtype has its own native write: x / 255 is not x * (1 / 255)."""
        x = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 256)
        v1_out = T.ConvertImageDtype(torch.float32)(x)
        assert torch.equal(v1_out, x.float() / 255)
        assert not torch.equal(v1_out, v2.ToDtype(torch.float32, scale=True)(x))
