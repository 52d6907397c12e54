"""timm's ``create_transform`` pipelines in an ``ImageFolder``, unchanged, through
``fastprep.data.DataLoader``.

The reference is the user's own dataset run literally under ``sample_rng`` (timm's classes
drawing from Python's ``random`` and NumPy, Pillow computing), never a fastprep path.
"""

import pytest
import torch
from torchvision.datasets import ImageFolder

from conftest import make_image_folder
from fastprep.data import DataLoader, sample_rng
from test_dataloader import assert_batches_equal, reference

timm_data = pytest.importorskip("timm.data")

SEED = 11
SIZE = 32

# (encoding, height, width): gray, CMYK, progressive, tiny and very wide among them
_FILES = [("420", 60, 80), ("gray", 48, 64), ("cmyk", 51, 40), ("420-progressive", 70, 46), ("444", 9, 7),
          ("422", 20, 300), ("png", 40, 52), ("420", 44, 90)]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_image_folder(tmp_path_factory.mktemp("timm_folder"), _FILES, classes=2)


def _train(**kwargs):
    options = {"auto_augment": "rand-m9-mstd0.5", "re_prob": 0.25, "re_mode": "pixel", **kwargs}
    return timm_data.create_transform(SIZE, is_training=True, **options)


def test_eval_runs_natively(root):
    """timm's eval transform (Resize, CenterCrop, MaybeToTensor, Normalize) is torchvision's
    val pipeline on PIL images: the threads engine, Pillow's bits."""
    ds = ImageFolder(root, timm_data.create_transform(SIZE, is_training=False))
    loader = DataLoader(ds, batch_size=3, seed=SEED, num_workers=2)
    assert loader.engine == "threads", loader.engine_reason
    assert_batches_equal(list(loader), reference(ds, list(range(len(ds))), 3, seed=SEED))


@pytest.mark.parametrize("kwargs", [{}, {"interpolation": "random"}, {"re_mode": "rand", "re_count": 2}])
def test_train_equals_dataset(root, kwargs):
    """RandAugment (op choice from NumPy, magnitudes from ``random``), random interpolation
    and timm's RandomErasing (per-pixel normal noise from torch): sample i of epoch e is the
    dataset's own ``with sample_rng(S, e, i): dataset[i]``, on whatever engine runs it."""
    ds = ImageFolder(root, _train(**kwargs))
    loader = DataLoader(ds, batch_size=4, shuffle=True, seed=SEED, num_workers=2)
    got = list(loader)
    order = list(loader.sampler)
    assert_batches_equal(got, reference(ds, order, 4, seed=SEED))
    assert_batches_equal(list(loader), reference(ds, list(loader.sampler), 4, seed=SEED, epoch=1))


def _refusing_sample(ds):
    """A ``(seed, index)`` whose sample timm's own code refuses (DeiT's increasing posterize
    drawing 0 bits, which Pillow rejects), found by running the dataset literally."""
    for seed in range(4000):
        for index in range(len(ds)):
            try:
                with sample_rng(seed, 0, index):
                    ds[index]
            except ValueError as e:
                assert "bits must be between or equal to 1 and 8" in str(e)
                return seed, index
    raise AssertionError("no sample draws posterize with 0 bits")


@pytest.fixture(scope="module")
def deit(root):
    ds = ImageFolder(root, timm_data.create_transform(8, is_training=True, auto_augment="rand-m9-mstd0.5-inc1"))
    return ds, *_refusing_sample(ds)


@pytest.mark.parametrize("engine", [None, "processes"])
def test_posterize_zero_bits_raises_as_the_dataset_does(deit, engine):
    """The user's code raises for that sample: fastprep raises the same error for it, naming
    the file, and never "fixes" the draw."""
    ds, seed, index = deit
    loader = DataLoader(ds, batch_size=len(ds), seed=seed, engine=engine)
    with pytest.raises(ValueError, match="bits must be between or equal to 1 and 8") as info:
        list(loader)
    assert ds.samples[index][0] in str(info.value).splitlines()[0]


def test_posterize_zero_bits_skipped_and_named(deit):
    ds, seed, index = deit
    loader = DataLoader(ds, batch_size=len(ds), seed=seed, on_error="skip")
    (images, targets), = list(loader)
    assert images.shape == (len(ds), 3, 8, 8) and loader.skipped == 1
    (record,) = loader.skipped_files
    assert record.index == index and record.path == ds.samples[index][0]
    assert "bits must be between or equal to 1 and 8" in record.reason
    # every other sample is the dataset's own
    for k in range(len(ds)):
        if k != index:
            with sample_rng(seed, 0, k):
                image, target = ds[k]
            assert torch.equal(images[k], image) and int(targets[k]) == target
