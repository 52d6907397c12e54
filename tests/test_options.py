"""make_loader's grouped options (fastprep/data/options.py): DecodeOptions, BatchOutput and
the pass-through keywords, against the flat keywords they group."""

import os

import pytest
import torch

import fastprep.data as D
from fastprep import io as fio
from fastprep.bench.synthetic import encode_jpeg, photo_like


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("options")
    for i, (h, w) in enumerate([(40, 52), (33, 61), (64, 48), (50, 50), (45, 39), (70, 30)]):
        os.makedirs(root / f"c{i}", exist_ok=True)
        (root / f"c{i}" / "x.jpg").write_bytes(encode_jpeg(photo_like(h, w, seed=i)))
    return str(root)


def _batches(loader):
    return [(x.clone(), t.clone()) for x, t in loader]


def _assert_same(got, want):
    assert len(got) == len(want) and got
    for (a, ta), (b, tb) in zip(got, want):
        assert torch.equal(ta, tb) and a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_groups_equal_flat_keywords(folder, engine):
    common = dict(batch_size=3, crop_size=24, device="cpu", seed=3, engine=engine, num_workers=1)
    if engine == "processes":
        common["multiprocessing_context"] = "fork"
    flat = D.make_loader(folder, color="rgb", mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), dtype=torch.bfloat16,
                         channels_last=True, max_pixels=10_000, strict=True, max_scans=50, drop_last=True, **common)
    grouped = D.make_loader(folder, output=D.BatchOutput("rgb", (0.5, 0.4, 0.3), (0.2, 0.25, 0.3), torch.bfloat16,
                                                         channels_last=True),
                            decode=D.DecodeOptions(max_pixels=10_000, strict=True, max_scans=50), drop_last=True,
                            **common)
    want = _batches(flat)
    got = _batches(grouped)
    _assert_same(got, want)
    assert len(got) == 2  # drop_last passed through: 6 samples, batches of 3
    x = got[0][0]
    assert x.dtype == torch.bfloat16 and x.is_contiguous(memory_format=torch.channels_last)


def test_decode_options_reach_the_decode(folder):
    # 40x52 = 2080 pixels and up: a limit of 2000 refuses every file, naming it
    loader = D.make_loader(folder, batch_size=2, crop_size=24, device="cpu", seed=0,
                           decode=D.DecodeOptions(max_pixels=2000))
    with pytest.raises(fio.DecodeError, match=r"cannot decode '.*x\.jpg'"):
        next(iter(loader))


def test_decode_transform_kwargs_only_what_is_set():
    assert D.DecodeOptions().transform_kwargs() == {}
    assert D.DecodeOptions(max_pixels=0, strict=True, max_scans=7).transform_kwargs() == {
        "max_pixels": 0, "strict": True, "max_scans": 7}


def test_recipe_defaults_fill_an_empty_output(folder):
    loader = D.make_loader(folder, recipe="imagenet-eval", device="cpu", batch_size=2, shuffle=False)
    convert = loader.loader.convert if loader.batch_transform is None else loader.batch_transform
    assert convert.color == "rgb" and convert.mean == D.IMAGENET_MEAN and convert.std == D.IMAGENET_STD
    yuv = D.make_loader(folder, recipe="imagenet-eval", device="cpu", output=D.BatchOutput(color="yuv"))
    convert = yuv.loader.convert if yuv.batch_transform is None else yuv.batch_transform
    assert convert.color == "yuv" and convert.mean == D.IMAGENET_MEAN


class TestBadOptions:
    def test_unknown_keyword(self, folder):
        with pytest.raises(TypeError, match="unexpected keyword argument.*colour"):
            D.make_loader(folder, colour="rgb")

    def test_group_and_flat_together(self, folder):
        with pytest.raises(ValueError, match=r"max_pixels inside decode=DecodeOptions"):
            D.make_loader(folder, decode=D.DecodeOptions(strict=True), max_pixels=5)
        with pytest.raises(ValueError, match=r"dtype inside output=BatchOutput"):
            D.make_loader(folder, output=D.BatchOutput(), dtype=torch.float16)

    def test_wrong_group_type(self, folder):
        with pytest.raises(TypeError, match="decode must be a DecodeOptions or None, got dict"):
            D.make_loader(folder, decode={"max_pixels": 5})
        with pytest.raises(TypeError, match="output must be a BatchOutput or None, got str"):
            D.make_loader(folder, output="rgb")

    def test_bad_values_keep_their_messages(self, folder):
        with pytest.raises(ValueError, match="color must be 'yuv' or 'rgb'"):
            D.make_loader(folder, output=D.BatchOutput(color="hsv"))
        with pytest.raises(ValueError, match="dtype must be"):
            D.make_loader(folder, output=D.BatchOutput(dtype=torch.int32))
