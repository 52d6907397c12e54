"""torch.ops.fastprep.resize_aa and fastprep.resize: bit-identity with torch's uint8 bilinear
kernels (aten._upsample_bilinear2d_aa / aten.upsample_bilinear2d, which v2.functional.resize
uses), windows of a virtual image, explicit scales, hflip, every compiled ISA variant, errors."""

import random

import pytest
import torch
from torchvision.transforms.v2 import functional as F

import fastprep._ops  # noqa: F401
from fastprep import _C
from fastprep.resize import resize, resize_window

op = torch.ops.fastprep.resize_aa
LEVELS = [lvl for lvl in (0, 1) if _C.native_isa(-1) >= lvl or lvl == 0]


@pytest.fixture(autouse=True)
def _restore_isa():
    saved = _C.native_isa(-1)
    yield
    _C.native_isa(saved)


def _cl(img_hwc):
    return img_hwc.permute(2, 0, 1)


def _rand(h, w, c, gen):
    return _cl(torch.randint(0, 256, (h, w, c), dtype=torch.uint8, generator=gen))


def _torch(img, oh, ow, sh, sw, aa):
    c, h, w = img.shape
    x = img.as_strided((1, c, h, w), (c * h * w + 1,) + tuple(img.stride()))
    f = torch.ops.aten._upsample_bilinear2d_aa if aa else torch.ops.aten.upsample_bilinear2d
    return f(x, [oh, ow], False, sh, sw)[0]


def _ours(img, oh, ow, sh, sw, aa, hflip=False):
    _, h, w = img.shape
    return op(img, (oh, ow), (0, 0, oh, ow), (h, w), (0, 0), (sh or 0.0, sw or 0.0), aa, hflip)


def _cases(n, seed):
    rng = random.Random(seed)
    for _ in range(n):
        c = rng.choice([1, 3, 4])
        h, w = rng.randint(1, 600), rng.randint(1, 600)
        oh = h if rng.random() < 0.1 else rng.randint(1, 400)
        ow = w if rng.random() < 0.1 else rng.randint(1, 400)
        aa = rng.random() < 0.75
        if rng.random() < 0.3:
            sh, sw = oh / h * rng.uniform(0.8, 1.2), ow / w * rng.uniform(0.8, 1.2)
        else:
            sh = sw = None
        yield c, h, w, oh, ow, sh, sw, aa, rng.random() < 0.3


@pytest.mark.parametrize("level", LEVELS)
def test_bit_identical_to_torch(level):
    assert _C.native_isa(level) == level
    gen = torch.Generator().manual_seed(level)
    for c, h, w, oh, ow, sh, sw, aa, hflip in _cases(1500, 1 + level):
        img = _rand(h, w, c, gen)
        ref = _torch(img, oh, ow, sh, sw, aa)
        if hflip:
            ref = ref.flip(-1)
        got = _ours(img, oh, ow, sh, sw, aa, hflip)
        assert got.shape == ref.shape and got.stride() == (1, ow * c, c) or c == 1
        assert torch.equal(got, ref), (c, h, w, oh, ow, sh, sw, aa, hflip)


def test_isa_variants_identical():
    if len(LEVELS) < 2:
        pytest.skip("no AVX2 on this CPU")
    gen = torch.Generator().manual_seed(7)
    for c, h, w, oh, ow, sh, sw, aa, hflip in _cases(120, 11):
        img = _rand(h, w, c, gen)
        outs = []
        for level in LEVELS:
            _C.native_isa(level)
            outs.append(_ours(img, oh, ow, sh, sw, aa, hflip))
        assert all(torch.equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("level", LEVELS)
def test_windows_equal_slices_of_full_resize(level):
    _C.native_isa(level)
    rng = random.Random(3)
    gen = torch.Generator().manual_seed(3)
    for _ in range(250):
        c = rng.choice([1, 3, 4])
        H, W = rng.randint(8, 500), rng.randint(8, 500)
        oh = H if rng.random() < 0.1 else rng.randint(1, 300)
        ow = W if rng.random() < 0.1 else rng.randint(1, 300)
        aa = rng.random() < 0.8
        sh, sw = ((oh / H * rng.uniform(0.9, 1.1), ow / W * rng.uniform(0.9, 1.1)) if rng.random() < 0.4
                  else (None, None))
        hflip = rng.random() < 0.3
        full = _rand(H, W, c, gen)
        ref_full = _torch(full, oh, ow, sh, sw, aa)
        t, l = rng.randint(0, oh - 1), rng.randint(0, ow - 1)
        h, w = rng.randint(1, oh - t), rng.randint(1, ow - l)
        ref = ref_full[:, t:t + h, l:l + w]
        # the input window: everything the filter might read (generous), clipped
        # (a dimension whose size is unchanged is copied, whatever the scale: torch's rule)
        s_h = 1.0 if oh == H else (sh or oh / H)
        s_w = 1.0 if ow == W else (sw or ow / W)
        y0 = min(max(int(t / s_h) - int(2 / s_h) - 3, 0), H - 1)
        y1 = max(min(int((t + h) / s_h) + int(2 / s_h) + 3, H), y0 + 1)
        x0 = min(max(int(l / s_w) - int(2 / s_w) - 3, 0), W - 1)
        x1 = max(min(int((l + w) / s_w) + int(2 / s_w) + 3, W), x0 + 1)
        win = full[:, y0:y1, x0:x1]  # a view: row stride > W*C
        got = op(win, (oh, ow), (t, l, h, w), (H, W), (y0, x0), (sh or 0.0, sw or 0.0), aa, hflip)
        assert torch.equal(got, ref.flip(-1) if hflip else ref), (c, H, W, oh, ow, sh, sw, aa, t, l, h, w)
        got2 = resize_window(win, (H, W), (y0, x0), (oh, ow), (t, l, h, w),
                             scale=None if sh is None else (sh, sw), antialias=aa)
        assert torch.equal(got2, ref)


def test_window_too_small_raises():
    img = _cl(torch.zeros((100, 100, 3), dtype=torch.uint8))
    win = img[:, 10:50, 10:50]
    with pytest.raises(ValueError, match="outside the given window"):
        op(win, (50, 50), (0, 0, 50, 50), (100, 100), (10, 10), (0.0, 0.0), True, False)
    with pytest.raises(ValueError, match="outside the given window"):  # unchanged dimension
        op(win, (100, 50), (0, 0, 60, 50), (100, 100), (10, 0), (0.0, 0.0), True, False)
    # the window covers exactly what outputs 10..14 read
    op(img[:, 15:35, 15:35], (50, 50), (10, 10, 5, 5), (100, 100), (15, 15), (0.0, 0.0), True, False)


def test_errors():
    good = _cl(torch.zeros((10, 10, 3), dtype=torch.uint8))
    with pytest.raises(ValueError, match="1, 3 or 4 channels"):
        op(_cl(torch.zeros((10, 10, 2), dtype=torch.uint8)), (5, 5), (0, 0, 5, 5), (10, 10), (0, 0), (0.0, 0.0),
           True, False)
    with pytest.raises(ValueError, match="uint8"):
        op(good.float(), (5, 5), (0, 0, 5, 5), (10, 10), (0, 0), (0.0, 0.0), True, False)
    with pytest.raises(ValueError, match="channels-last"):
        op(good.contiguous(), (5, 5), (0, 0, 5, 5), (10, 10), (0, 0), (0.0, 0.0), True, False)
    with pytest.raises(ValueError, match="output window"):
        op(good, (5, 5), (3, 0, 5, 5), (10, 10), (0, 0), (0.0, 0.0), True, False)
    with pytest.raises(ValueError, match="not inside"):
        op(good, (5, 5), (0, 0, 5, 5), (8, 10), (0, 0), (0.0, 0.0), True, False)


def test_resize_matches_v2_and_planar_fallbacks():
    gen = torch.Generator().manual_seed(5)
    rng = random.Random(5)
    for _ in range(40):
        c = rng.choice([1, 2, 3, 4])
        h, w, oh, ow = rng.randint(1, 300), rng.randint(1, 300), rng.randint(1, 250), rng.randint(1, 250)
        aa, hflip = rng.random() < 0.7, rng.random() < 0.3
        planar = torch.randint(0, 256, (c, h, w), dtype=torch.uint8, generator=gen)
        ref = F.resize(planar, [oh, ow], antialias=aa)
        if hflip:
            ref = ref.flip(-1)
        for img in (planar, planar.permute(1, 2, 0).contiguous().permute(2, 0, 1)):
            got = resize(img, (oh, ow), antialias=aa, hflip=hflip)
            assert torch.equal(got, ref), (c, h, w, oh, ow, aa, hflip)


def test_opcheck():
    img = _cl(torch.randint(0, 256, (40, 50, 3), dtype=torch.uint8))
    torch.library.opcheck(op, (img, [20, 30], [2, 3, 10, 20], [40, 50], [0, 0], [0.0, 0.0], True, True))
    g = torch.randint(0, 256, (1, 40, 50), dtype=torch.uint8)
    torch.library.opcheck(op, (g, [60, 70], [0, 0, 60, 70], [40, 50], [0, 0], [0.0, 0.0], False, False))


def test_env_caps_isa():
    import subprocess
    import sys

    code = "import fastprep._ops; from fastprep import _C; print(_C.native_isa(-1))"
    out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "FASTPREP_ISA": "baseline"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "0"


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                    reason="v2 resizes uint8 through float32 on CPUs without AVX2 "
                           "(within 1 level: tests/test_recipes.py)")
def test_eval_recipe_bit_exact_with_v2_without_dct_scaling():
    from conftest import make_jpeg
    from torchvision.transforms import v2

    import fastprep.io as fio
    from fastprep.transforms import DecodeResize, DecodeResizeCenterCrop

    for h, w in ((375, 500), (500, 333), (213, 171), (120, 640)):
        data = torch.frombuffer(bytearray(make_jpeg("420", h, w, seed=h)), dtype=torch.uint8)
        full = fio.decode_jpeg(data)
        for rs, cs in ((256, 224), (160, 200)):
            ref = v2.CenterCrop(cs)(v2.Resize(rs)(full))
            assert torch.equal(DecodeResizeCenterCrop(rs, cs, dct_scaling=False)(data), ref)
        assert torch.equal(DecodeResize(256, dct_scaling=False)(data), v2.Resize(256)(full))


@pytest.mark.parametrize("level", LEVELS)
def test_tiny_images(level):
    # sizes where taps pad past the row end and windows are shorter than the tap count
    _C.native_isa(level)
    rng = random.Random(20 + level)
    gen = torch.Generator().manual_seed(20 + level)
    for _ in range(400):
        c = rng.choice([1, 3, 4])
        h, w, oh, ow = rng.randint(1, 12), rng.randint(1, 12), rng.randint(1, 24), rng.randint(1, 24)
        aa, hflip = rng.random() < 0.7, rng.random() < 0.5
        img = _rand(h, w, c, gen)
        ref = _torch(img, oh, ow, None, None, aa)
        assert torch.equal(_ours(img, oh, ow, None, None, aa, hflip), ref.flip(-1) if hflip else ref)


def test_resize_window_argument_errors():
    img = torch.zeros((2, 8, 8), dtype=torch.uint8)
    with pytest.raises(ValueError, match="resize_window takes 1, 3 or 4 channels, got 2"):
        resize_window(img, (8, 8), (0, 0), (4, 4), (0, 0, 4, 4))
    with pytest.raises(TypeError, match="uint8 tensor"):
        resize_window(img.float(), (8, 8), (0, 0), (4, 4), (0, 0, 4, 4))


def test_planar_four_channels_use_the_op():
    g = torch.Generator().manual_seed(3)
    img = torch.randint(0, 256, (4, 37, 53), dtype=torch.uint8, generator=g)  # planar memory
    ref = torch.ops.aten._upsample_bilinear2d_aa(img[None].contiguous(memory_format=torch.channels_last),
                                                 [20, 30], False, None, None)[0]
    assert torch.equal(resize(img, (20, 30)), ref)
    assert torch.equal(resize(img, (20, 30), hflip=True), ref.flip(-1))
