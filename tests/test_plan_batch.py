"""torch.ops.fastprep.plan_batch / read_files (NativePipeline.plan_batch,
JpegDataset.read_encoded_batch): the threads engine's readers in two native calls per batch.
The reference is the per-sample Python path they replace: NativePipeline.plan (whose draws
tests/test_native.py checks against the transforms themselves), the dataset's
fallback_reason, and fastprep.data._files.read_regular_file."""

import io
import os
import random
import struct

import numpy as np
import PIL.Image
import pytest
import torch
from torchvision.transforms import v2

import fastprep.io as fio
from conftest import make_jpeg
from fastprep.data import JpegDataset, default_transform
from fastprep.data._files import read_regular_file
from fastprep.data import fallback as fb
from fastprep.data.native import NativePipeline, PlanRef
from fastprep.transforms import (
    DecodeCenterCrop,
    DecodeRandomCrop,
    DecodeRandomResizedCrop,
    DecodeResize,
    DecodeResizeCenterCrop,
    RandomMask,
)


def _tensor(b: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.empty(0, dtype=torch.uint8)


# sizes around the crops: smaller, equal, larger, odd, very wide and very tall
SIZES = [(120, 160), (97, 131), (224, 224), (33, 45), (17, 150), (300, 40), (250, 333), (64, 64), (1, 1), (8, 500)]
ENCODINGS = ["420", "444", "422", "gray", "420-progressive", "420-restart", "cmyk"]
DATAS = [_tensor(make_jpeg(ENCODINGS[i % len(ENCODINGS)], h, w, seed=i)) for i, (h, w) in enumerate(SIZES)]

TRANSFORMS = {
    "rrc": DecodeRandomResizedCrop(96, flip_p=0.5),
    "rrc-rect": DecodeRandomResizedCrop((40, 70), scale=(0.05, 0.6), ratio=(0.5, 2.5), antialias=False),
    "rrc-no-dct": DecodeRandomResizedCrop(56, dct_scaling=False, flip_p=0.0),
    # no draw fits: v2's centred fallback window
    "rrc-fallback": DecodeRandomResizedCrop(32, scale=(0.95, 1.0), ratio=(7.0, 9.0)),
    "rrc-mask": v2.Compose([DecodeRandomResizedCrop(48, flip_p=1.0), RandomMask(0.25)]),
    "rrc-ycbcr": DecodeRandomResizedCrop(64, mode="YCbCr"),
    "crop-pad": DecodeRandomCrop(100, pad_if_needed=True),
    "crop-default": default_transform((60, 80)),
    "crop-mask": v2.Compose([DecodeRandomCrop((16, 24)), RandomMask(0.5, fill=7)]),
    "center": DecodeCenterCrop(90),
    "center-mask": v2.Compose([DecodeCenterCrop((50, 30), mode="GRAY"), RandomMask(0.1)]),
    "resize-center": DecodeResizeCenterCrop(72, 64),
    "resize": DecodeResize((50, 90)),
}


def _row(plan):
    return (plan.resolve() if isinstance(plan, PlanRef) else plan).key()


def _python_plan(pipeline, data, key):
    try:
        return "plan", _row(pipeline.plan(data, key=key))
    except fio.DecodeError as e:
        return "error", str(e)
    except ValueError:  # e.g. a crop larger than the image: plan_batch leaves it to Python
        return "python", None


def _keys(n, seed):
    rng = random.Random(seed)
    # keys across the whole uint64 range, including those >= 2**63
    return [rng.getrandbits(64) for _ in range(n - 2)] + [0, 2 ** 64 - 1]


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_plans_equal_the_python_plans(name):
    pipeline = NativePipeline.from_transform(TRANSFORMS[name])
    assert pipeline is not None
    for rep in range(4):
        keys = _keys(len(DATAS), seed=rep)
        got = pipeline.plan_batch(DATAS, keys)
        for data, key, (route, value) in zip(DATAS, keys, got):
            want = _python_plan(pipeline, data, key)
            if route == "plan":
                assert want == ("plan", _row(value))
            else:
                assert (route, value) == want


def test_whole_batch_is_used_as_is():
    pipeline = NativePipeline.from_transform(TRANSFORMS["rrc"])
    got = pipeline.plan_batch(DATAS, range(len(DATAS)))
    refs = [v for _, v in got]
    assert all(isinstance(v, PlanRef) and v.batch is refs[0].batch for v in refs)
    out = torch.empty((len(DATAS), 3, 96, 96), dtype=torch.uint8)
    out2 = torch.empty_like(out)
    pipeline.run(DATAS, refs, out)
    pipeline.run(DATAS, [pipeline.plan(d, key=k) for k, d in enumerate(DATAS)], out2)
    assert torch.equal(out, out2)
    # a subset or a mix with Plan objects is rebuilt row by row
    mixed = [refs[0], pipeline.plan(DATAS[1], key=1), refs[2]]
    out3 = torch.empty((3, 3, 96, 96), dtype=torch.uint8)
    pipeline.run(DATAS[:3], mixed, out3)
    assert torch.equal(out3, out[:3])


def test_many_random_images_and_keys():
    """Random sizes and crop parameters: every plan equals the Python plan."""
    rng = random.Random(7)
    for trial in range(6):
        h, w = rng.randint(1, 400), rng.randint(1, 400)
        data = _tensor(make_jpeg("420", h, w, seed=trial))
        lo = rng.uniform(0.01, 1.0)
        t = DecodeRandomResizedCrop((rng.randint(1, 300), rng.randint(1, 300)), scale=(lo, rng.uniform(lo, 1.0)),
                                    ratio=(rng.uniform(0.2, 1.0), rng.uniform(1.0, 5.0)), flip_p=rng.random())
        pipeline = NativePipeline.from_transform(t)
        keys = _keys(40, seed=trial)
        for key, (route, value) in zip(keys, pipeline.plan_batch([data] * len(keys), keys)):
            assert route == "plan"
            assert _row(value) == _row(pipeline.plan(data, key=key))


def _exif_jpeg(orientation, size=(40, 56)) -> bytes:
    exif = PIL.Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    PIL.Image.fromarray(np.full(size + (3,), 90, np.uint8)).save(buf, "JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def test_routes():
    pipeline = NativePipeline.from_transform(TRANSFORMS["crop-pad"])
    png = io.BytesIO()
    PIL.Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png, "PNG")
    samples = {
        "png": png.getvalue(), "rotated": _exif_jpeg(6), "upright": _exif_jpeg(1), "bad-orientation": _exif_jpeg(9),
        "garbage": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00garbage", "empty-after-soi": b"\xff\xd8\xff",
        "not-an-image": b"hello world",
    }
    datas = [_tensor(b) for b in samples.values()]
    routes = dict(zip(samples, pipeline.plan_batch(datas, range(len(datas)), exif=True)))
    assert routes["png"] == ("python", None)
    assert routes["not-an-image"] == ("python", None)  # the dataset's routing decides: Python
    assert routes["rotated"] == ("python", None)
    assert routes["upright"][0] == "plan"
    assert routes["bad-orientation"][0] == "plan"  # not 1-8: ignored, as fallback.exif_orientation does
    for name in ("garbage", "empty-after-soi"):
        with pytest.raises(fio.DecodeError) as e:
            fio.jpeg_info(_tensor(samples[name]))
        assert routes[name] == ("error", str(e.value))
    # without the dataset's EXIF handling a rotated JPEG is planned as it is stored
    assert pipeline.plan_batch([_tensor(samples["rotated"])], [0], exif=False)[0][0] == "plan"


def test_max_pixels_message_is_the_datasets():
    data = DATAS[0]
    pipeline = NativePipeline.from_transform(TRANSFORMS["rrc"])
    ds = JpegDataset([], max_pixels=100)
    with pytest.raises(fio.DecodeError) as e:
        ds.fallback_reason(data)
    assert pipeline.plan_batch([data], [0], max_pixels=100) == [("error", str(e.value))]
    assert pipeline.plan_batch([data], [0], max_pixels=120 * 160)[0][0] == "plan"


def test_exif_routing_matches_python_on_mutations():
    """Random byte changes inside the EXIF segment: the native routing agrees with
    fallback.exif_orientation (read from the first 64 KiB, as the dataset does)."""
    pipeline = NativePipeline.from_transform(TRANSFORMS["center"])
    base = bytearray(_exif_jpeg(6, size=(16, 16)))
    start = base.index(b"Exif\x00\x00")
    seg_len = struct.unpack(">H", bytes(base[start - 2:start]))[0]
    rng = random.Random(3)
    datas, want = [], []
    for _ in range(600):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            pos = start + 6 + rng.randrange(seg_len - 8)
            b[pos] = rng.choice([0, 1, 2, 3, 6, 8, 0x12, 0x01, 0xFF, rng.randrange(256)])
        datas.append(_tensor(bytes(b)))
        want.append(fb.exif_orientation(bytes(b[:1 << 16])) not in (None, 1))
    got = pipeline.plan_batch(datas, range(len(datas)), exif=True)
    assert [route == "python" for route, _ in got] == want
    assert 0 < sum(want) < len(want)  # both routes were exercised


def test_bad_arguments():
    pipeline = NativePipeline.from_transform(TRANSFORMS["rrc"])
    with pytest.raises(ValueError, match="same length"):
        pipeline.plan_batch(DATAS[:2], [1])
    with pytest.raises(TypeError, match="uint8"):
        pipeline.plan_batch([torch.zeros(4, dtype=torch.int32)], [1])
    with pytest.raises(TypeError, match="Plan or PlanRef"):
        pipeline.run(DATAS[:1], [("not", "a plan")], torch.empty((1, 3, 96, 96), dtype=torch.uint8))
    assert pipeline.plan_batch([], []) == []


# ----------------------------------------------------------------------------- read_files


def _python_read(path):
    try:
        return read_regular_file(path)
    except OSError as e:
        return e


def test_read_files_equals_the_python_read(tmp_path):
    good = tmp_path / "a.jpg"
    good.write_bytes(make_jpeg("420", 20, 30))
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    big = tmp_path / "big.jpg"
    big.write_bytes(os.urandom(3 << 20))
    (tmp_path / "dir.jpg").mkdir()
    fifo = tmp_path / "fifo.jpg"
    os.mkfifo(fifo)
    link = tmp_path / "link.jpg"
    link.symlink_to(good)
    dangling = tmp_path / "dangling.jpg"
    dangling.symlink_to(tmp_path / "nowhere")
    paths = [str(p) for p in (good, empty, big, tmp_path / "dir.jpg", fifo, link, dangling, tmp_path / "missing.jpg")]
    ds = JpegDataset(paths)
    got = ds.read_encoded_batch(range(len(paths)))  # never blocks on the FIFO
    for path, (data, name) in zip(paths, got):
        want = _python_read(path)
        if isinstance(want, OSError):
            assert isinstance(data, OSError) and name == ""
            assert str(data) == str(want)
        else:
            assert name == path
            assert torch.equal(data, want)


def test_read_encoded_batch_of_a_subclass_calls_read_encoded(tmp_path):
    class Counting(JpegDataset):
        calls = 0

        def read_encoded(self, index):
            Counting.calls += 1
            if index == 1:
                raise OSError("gone")
            return torch.tensor([index], dtype=torch.uint8), f"s{index}"

    got = Counting(["x", "y", "z"]).read_encoded_batch([0, 1, 2])
    assert Counting.calls == 3
    assert [n for _, n in got] == ["s0", "", "s2"]
    assert isinstance(got[1][0], OSError)
