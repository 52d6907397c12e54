"""Hugging Face ``datasets`` in the DataLoader drop-in (fastprep.data.hf).

The reference is always the Hugging Face dataset itself: ``default_collate([with
sample_rng(S, e, i): ds[i] ...])`` -- datasets' own Arrow extraction, its Image feature's
Pillow decode (modes, EXIF transpose), the user's transform as written.
"""

import io
import random

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image

from conftest import make_jpeg
from test_dataloader import reference as dataloader_reference
from fastprep.bench.synthetic import photo_like
from fastprep.data import DataLoader

datasets = pytest.importorskip("datasets")

SEED = 5
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _exif_rotated() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90
    out = io.BytesIO()
    Image.fromarray(photo_like(60, 90, 7)).save(out, "JPEG", quality=90, exif=exif)
    return out.getvalue()


def _png() -> bytes:
    out = io.BytesIO()
    Image.fromarray(photo_like(50, 70, 8)).save(out, "PNG")
    return out.getvalue()


def _images() -> list[bytes]:
    """Plain RGB JPEGs of several encodings, and samples datasets gives otherwise: gray
    ("L"), CMYK, EXIF-rotated, a PNG, a 1x1."""
    return [make_jpeg("420", 90, 120, 1), make_jpeg("gray", 64, 96, 2), make_jpeg("444", 77, 101, 3),
            make_jpeg("cmyk", 81, 70, 4), make_jpeg("420-progressive", 100, 66, 5), _exif_rotated(), _png(),
            make_jpeg("422", 40, 300, 6), make_jpeg("420", 1, 1, 9), make_jpeg("420", 70, 70, 10)]


def _dataset(images=None, **features):
    images = _images() if images is None else images
    feats = datasets.Features({"image": datasets.Image(**features),
                               "label": datasets.ClassLabel(num_classes=3), "id": datasets.Value("string")})
    return datasets.Dataset.from_dict({"image": [{"bytes": b, "path": None} for b in images],
                                       "label": [k % 3 for k in range(len(images))],
                                       "id": [f"img{k}" for k in range(len(images))]}, features=feats)


TRAIN = T.Compose([T.RandomResizedCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def examples_transform(batch):
    """Hugging Face's image-classification example: replace the image by its tensor."""
    batch["pixel_values"] = [TRAIN(image.convert("RGB")) for image in batch["image"]]
    del batch["image"]
    return batch


def labels_transform(batch):
    """Another common form: a new dict, the label renamed, two views of the image."""
    crops = [(TRAIN(im.convert("RGB")), T.Compose([T.Resize(40), T.CenterCrop(36), T.ToTensor()])(im.convert("RGB")))
             for im in batch["image"]]
    return {"pixel_values": [c[0] for c in crops], "labels": batch["label"], "center": [c[1] for c in crops]}


def reference(ds, order, batch_size, epoch=0):
    """default_collate of the dataset's own samples under sample_rng (test_dataloader's)."""
    return dataloader_reference(ds, order, batch_size, seed=SEED, epoch=epoch)


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for key in w:
            a, b = g[key], w[key]
            if isinstance(b, torch.Tensor):
                assert a.dtype == b.dtype and a.shape == b.shape, key
                assert torch.equal(a, b), key
            else:
                assert a == b, key


def _epoch(loader):
    it = iter(loader)  # the epoch's order is set when its iterator starts
    order = list(loader.sampler)
    return [dict(b) for b in it], order


@pytest.mark.parametrize("transform", [examples_transform, labels_transform])
def test_with_transform_bit_exact_on_threads(transform):
    ds = _dataset().with_transform(transform)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    for epoch in range(2):
        got, order = _epoch(loader)
        assert sorted(order) == list(range(len(ds)))
        assert_same(got, reference(ds, order, 4, epoch))
    reasons = loader.literal_samples
    assert any("EXIF" in r for r in reasons) and any("not a JPEG" in r for r in reasons)
    assert any("1-component" in r for r in reasons) and any("4-component" in r for r in reasons)


def test_set_transform_rgb_mode_and_indices():
    """Image(mode="RGB") (gray and CMYK JPEGs native too), a shuffled and selected dataset
    (an indices mapping over the table), set_transform in place."""
    ds = _dataset(mode="RGB").shuffle(seed=1).select([7, 0, 3, 5, 1, 9, 2])
    ds.set_transform(examples_transform)
    loader = DataLoader(ds, batch_size=3, shuffle=False, num_workers=1, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    got, order = _epoch(loader)
    assert_same(got, reference(ds, order, 3))
    assert not any("component" in r for r in loader.literal_samples)


def test_output_all_columns_and_columns():
    ds = _dataset()
    ds.set_transform(examples_transform, columns=["image"], output_all_columns=True)
    loader = DataLoader(ds, batch_size=5, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    got, order = _epoch(loader)
    want = reference(ds, order, 5)
    assert list(got[0]) == ["pixel_values", "label", "id"] == list(want[0])
    assert_same(got, want)


def test_saved_to_disk_parquet_and_paths(tmp_path):
    """load_from_disk (memory-mapped Arrow), parquet files, and rows that hold only a path."""
    images = _images()[:6]
    _dataset(images).save_to_disk(str(tmp_path / "saved"))
    _dataset(images).to_parquet(str(tmp_path / "data.parquet"))
    for k, b in enumerate(images):
        (tmp_path / f"{k}.jpg").write_bytes(b)
    by_path = datasets.Dataset.from_dict({"image": [str(tmp_path / f"{k}.jpg") for k in range(6)],
                                          "label": [k % 3 for k in range(6)], "id": [str(k) for k in range(6)]},
                                         features=datasets.Features({"image": datasets.Image(),
                                                                     "label": datasets.ClassLabel(num_classes=3),
                                                                     "id": datasets.Value("string")}))
    for ds in (datasets.load_from_disk(str(tmp_path / "saved")),
               datasets.load_dataset("parquet", data_files=str(tmp_path / "data.parquet"), split="train"),
               by_path):
        ds = ds.with_transform(examples_transform)
        loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, seed=SEED)
        assert loader.engine == "threads", loader.engine_reason
        got, order = _epoch(loader)
        assert_same(got, reference(ds, order, 4))


def test_resume_is_exact():
    ds = _dataset().with_transform(examples_transform)
    loader = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, seed=SEED)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    rest = [dict(b) for b in it]
    again = DataLoader(ds, batch_size=3, shuffle=True, num_workers=2, seed=SEED)
    again.load_state_dict(state)
    assert_same([dict(b) for b in again], rest)


def reads_label(batch):
    batch["pixel_values"] = [TRAIN(im.convert("RGB")) for im in batch["image"]]
    batch["label"] = [lab + 1 for lab in batch["label"]]
    del batch["image"]
    return batch


def compares_label(batch):
    p = 1.0 if batch["label"][0] == 1 else 0.0
    batch["pixel_values"] = [T.RandomHorizontalFlip(p)(T.ToTensor()(T.Resize((16, 16))(im.convert("RGB"))))
                             for im in batch["image"]]
    del batch["image"]
    return batch


def uses_random(batch):
    """A draw from Python's random inside the batch function: traced too."""
    size = random.choice([16, 24])
    batch["pixel_values"] = [T.ToTensor()(im.convert("RGB").resize((size, size))) for im in batch["image"]]
    del batch["image"]
    return batch


@pytest.mark.parametrize("transform,why", [(reads_label, "reads column 'label'"),
                                           (compares_label, "reads column 'label'")])
def test_transform_reading_columns_runs_as_written(transform, why):
    ds = _dataset().with_transform(transform)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, seed=SEED)
    assert loader.engine == "processes" and why in loader.engine_reason
    got, order = _epoch(loader)
    assert_same(got, reference(ds, order, 4))


def test_shapes_that_vary_run_as_written():
    ds = _dataset().with_transform(uses_random)
    loader = DataLoader(ds, batch_size=1, num_workers=0, seed=SEED)
    assert loader.engine == "processes" and "change shape" in loader.engine_reason


@pytest.mark.parametrize("make,why", [
    (lambda: _dataset(), "no format"),
    (lambda: _dataset().with_format("torch"), "with_format('torch')"),
    (lambda: _dataset(decode=False).with_transform(lambda b: b), "decode=False"),
    (lambda: _dataset(mode="L").with_transform(examples_transform), "mode='L'"),
])
def test_not_native_says_why(make, why):
    loader = DataLoader(make(), batch_size=2, num_workers=0)
    assert loader.engine == "processes" and why in loader.engine_reason
    with pytest.raises(ValueError, match="engine='threads' cannot run"):
        DataLoader(make(), batch_size=2, engine="threads")


def test_bad_image_bytes_named_and_skipped():
    images = _images()[:5]
    images[2] = b"\xff\xd8\xff\xe0 not really a jpeg" + bytes(200)
    ds = _dataset(images).with_transform(examples_transform)
    loader = DataLoader(ds, batch_size=5, num_workers=2, seed=SEED)
    assert loader.engine == "threads", loader.engine_reason
    with pytest.raises(Exception, match=r"image\[2\]"):
        list(loader)
    skipping = DataLoader(ds, batch_size=5, num_workers=2, seed=SEED, on_error="skip")
    batches = list(skipping)
    assert skipping.skipped == 1 and skipping.skipped_files[0].index == 2
    assert batches[0]["pixel_values"].shape == (5, 3, 32, 32)


def test_streaming_runs_as_written(tmp_path):
    _dataset(_images()[:4]).to_parquet(str(tmp_path / "data.parquet"))
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "data.parquet"), split="train", streaming=True)
    ds = ds.map(examples_transform, batched=True, batch_size=1, remove_columns=["image"])
    loader = DataLoader(ds, batch_size=2)
    assert loader.engine == "processes" and "streaming=True" in loader.engine_reason
    batches = list(loader)
    assert sum(len(b["label"]) for b in batches) == 4


def test_column_stand_in_refuses_every_read():
    from fastprep.data.hf import _Column, _ColumnRead

    col = _Column("label")
    for use in (lambda c: c == 1, lambda c: bool(c), lambda c: c + 1, lambda c: int(c), lambda c: hash(c),
                lambda c: str(c), lambda c: f"{c}", lambda c: c.real, lambda c: np.asarray(c) + 0,
                lambda c: torch.tensor([c])):
        with pytest.raises((_ColumnRead, TypeError)):
            use(col)
