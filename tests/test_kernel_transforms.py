"""Transform contract for RandomMask, ConvertColor, Scale and the fusing Compose."""

import pickle

import numpy as np
import PIL.Image
import pytest
import torch
import torchvision.transforms as T
from scipy.signal import convolve2d
from torchvision import tv_tensors
from torchvision.transforms import v2

import fastprep.functional as F
import fastprep.transforms as FT

CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])


def ref_yuv_scale(img):
    x = torch.as_tensor(img).to(torch.float32)
    r, g, b = x.unbind(-3)
    yuv = torch.stack([0.299 * r + 0.587 * g + 0.114 * b,
                       -0.16874 * r - 0.33126 * g + 0.5 * b + 128,
                       0.5 * r - 0.41869 * g - 0.08131 * b + 128], dim=-3)
    return yuv / 255


def ref_random_mask(img, ratio, fill, seed):
    """The reference RandomMask for a given seed: scipy dilation + boolean assignment."""
    m = F.random_mask(img.shape[-2], img.shape[-1], ratio, seed=seed).numpy()
    dilated = torch.from_numpy(convolve2d(m.astype(np.int32), CROSS, mode="same") > 0)
    out = img.clone()
    out[..., dilated] = fill
    return out, dilated


def image(shape=(3, 48, 70), seed=0, low=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, 256, shape, generator=g, dtype=torch.uint8)


def masked_yuv(out):
    """Where a YUV/255 output holds the masked value (0, 128/255, 128/255)."""
    half = torch.tensor(128.0) / 255
    return (out[..., 0, :, :] == 0) & (out[..., 1, :, :] == half) & (out[..., 2, :, :] == half)


class TestRandomMask:
    @pytest.mark.parametrize("fill", [0, 255])
    @pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 1.0])
    def test_matches_reference_for_same_mask(self, ratio, fill):
        img = image()
        torch.manual_seed(7)
        got = FT.RandomMask(ratio, fill)(img)
        torch.manual_seed(7)
        seed = FT.RandomMask.get_params()
        ref, dilated = ref_random_mask(img, ratio, fill, seed)
        assert torch.equal(got, ref)
        assert torch.equal(got[:, ~dilated], img[:, ~dilated])

    def test_float_and_batch(self):
        img = image((2, 3, 20, 30)).float() / 3
        torch.manual_seed(1)
        got = FT.RandomMask(0.3, fill=-1.5)(img)
        torch.manual_seed(1)
        ref, _ = ref_random_mask(img, 0.3, -1.5, FT.RandomMask.get_params())
        assert got.dtype == torch.float32 and torch.equal(got, ref)

    def test_types_preserved(self):
        img = image()
        t = FT.RandomMask(0.3)
        assert type(t(img)) is torch.Tensor
        out = t(tv_tensors.Image(img))
        assert type(out) is tv_tensors.Image and out.dtype == torch.uint8
        arr = t(img.numpy())
        assert isinstance(arr, np.ndarray) and arr.dtype == np.uint8

    @pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
    def test_pil(self, mode):
        pil = PIL.Image.fromarray(image((48, 70, 3)).numpy()).convert(mode)
        torch.manual_seed(3)
        out = FT.RandomMask(0.2, fill=9)(pil)
        assert isinstance(out, PIL.Image.Image) and out.mode == mode and out.size == pil.size
        torch.manual_seed(3)
        chw = torch.from_numpy(np.array(pil)).reshape(pil.size[1], pil.size[0], -1).permute(2, 0, 1)
        ref, _ = ref_random_mask(chw, 0.2, 9, FT.RandomMask.get_params())
        got = torch.from_numpy(np.array(out)).reshape(pil.size[1], pil.size[0], -1).permute(2, 0, 1)
        assert torch.equal(got, ref)

    def test_seeds_differ_and_reproduce(self):
        img = image()
        t = FT.RandomMask(0.25)
        torch.manual_seed(0)
        a, b = t(img), t(img)
        assert not torch.equal(a, b)
        torch.manual_seed(0)
        assert torch.equal(t(img), a)

    def test_errors(self):
        with pytest.raises(ValueError, match=r"ratio must be in \[0, 1\], got 1.5"):
            FT.RandomMask(1.5)
        with pytest.raises(TypeError, match="fill must be a real number, got 'x'"):
            FT.RandomMask(0.5, fill="x")
        with pytest.raises(ValueError, match="fill must be an integer in"):
            FT.RandomMask(0.5, fill=0.5)(image())
        with pytest.raises(TypeError, match="palette mode 'P'"):
            FT.RandomMask()(PIL.Image.new("P", (4, 4)))


class TestConvertColorScale:
    @pytest.mark.parametrize("shape", [(3, 20, 30), (2, 3, 5, 7)])
    def test_values(self, shape):
        img = image(shape, low=0)
        yuv = FT.ConvertColor()(img)
        torch.testing.assert_close(yuv / 255, ref_yuv_scale(img), rtol=0, atol=1e-5)
        assert torch.equal(FT.Scale()(img), img.float() / 255)
        torch.testing.assert_close(FT.Scale()(yuv), ref_yuv_scale(img), rtol=0, atol=1e-5)

    def test_types(self):
        img = image()
        pil = PIL.Image.fromarray(img.permute(1, 2, 0).numpy())
        for t in (FT.ConvertColor(), FT.Scale(), FT.YUVScale(), FT.MaskYUVScale()):
            out = t(pil)
            assert type(out) is tv_tensors.Image and out.dtype == torch.float32 and out.shape == img.shape
            assert type(t(tv_tensors.Image(img))) is tv_tensors.Image
            assert type(t(img)) is torch.Tensor
        torch.testing.assert_close(FT.ConvertColor()(pil).as_subclass(torch.Tensor), FT.ConvertColor()(img))
        assert FT.Scale()(PIL.Image.fromarray(img[0].numpy())).shape == (1, 48, 70)

    def test_errors(self):
        with pytest.raises(ValueError, match="expected an RGB PIL image, got mode 'L'"):
            FT.ConvertColor()(PIL.Image.new("L", (4, 4)))
        with pytest.raises(ValueError, match=r"3 channels.*\(4, 5, 5\)"):
            FT.ConvertColor()(torch.zeros(4, 5, 5, dtype=torch.uint8))
        with pytest.raises(TypeError, match="got torch.float64"):
            FT.Scale()(torch.zeros(3, 5, 5, dtype=torch.float64))


class TestCompose:
    def test_fused_equals_unfused(self):
        img = image((3, 64, 96))
        fused = FT.Compose([FT.RandomMask(0.25), FT.ConvertColor(), FT.Scale()])
        assert [type(t) for t in fused.fused_transforms] == [FT.MaskYUVScale]
        unfused = v2.Compose([FT.RandomMask(0.25), FT.ConvertColor(), FT.Scale()])
        for s in range(3):
            torch.manual_seed(s)
            a = fused(img)
            torch.manual_seed(s)
            b = unfused(img)
            assert torch.equal(masked_yuv(a), masked_yuv(b))
            assert masked_yuv(a).any() and not masked_yuv(a).all()
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)

    def test_fill_batch_and_other_transforms(self):
        img = image((2, 3, 30, 40))
        steps = [v2.RandomHorizontalFlip(p=1.0), FT.RandomMask(0.4, fill=30), FT.ConvertColor(), FT.Scale(),
                 FT.RandomMask(0.1), FT.ConvertColor(), FT.Scale()]
        fused = FT.Compose(steps)
        assert [type(t) for t in fused.fused_transforms] == [v2.RandomHorizontalFlip, FT.MaskYUVScale,
                                                             FT.MaskYUVScale]
        torch.manual_seed(4)
        a = fused(img)
        torch.manual_seed(4)
        b = v2.Compose(steps)(img)
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)

    def test_structured_inputs_and_passthrough(self):
        img = tv_tensors.Image(image())
        mask = tv_tensors.Mask(torch.ones(48, 70, dtype=torch.uint8))
        c = FT.Compose([FT.RandomMask(0.3), FT.ConvertColor(), FT.Scale()])
        torch.manual_seed(2)
        out = c({"image": img, "mask": mask, "label": 3})
        assert type(out["image"]) is tv_tensors.Image and out["image"].dtype == torch.float32
        assert out["mask"] is mask and out["label"] == 3
        torch.manual_seed(2)
        out2, label = c(img, 5)
        assert label == 5 and torch.equal(out2, out["image"])

    def test_not_fused_when_not_a_run(self):
        steps = [FT.RandomMask(), FT.Scale(), FT.ConvertColor()]
        assert FT.Compose(steps).fused_transforms == steps
        assert [type(t) for t in FT.Compose([FT.ConvertColor(), FT.Scale()]).fused_transforms] == [FT.YUVScale]

    def test_repr(self):
        assert repr(FT.RandomMask(0.3, fill=7)) == "RandomMask(ratio=0.3, fill=7)"
        assert repr(FT.ConvertColor()) == "ConvertColor()"
        assert repr(FT.Scale()) == "Scale()"
        r = repr(FT.Compose([FT.RandomMask(), FT.ConvertColor(), FT.Scale()]))
        assert "RandomMask(ratio=0.25, fill=0)" in r and "runs as:" in r and "MaskYUVScale(ratio=0.25, fill=0)" in r

    def test_errors(self):
        with pytest.raises(TypeError, match="sequence of callables, got int"):
            FT.Compose(5)
        with pytest.raises(TypeError, match="must be callables, got 1"):
            FT.Compose([1])

    def test_empty_is_identity(self):
        img = image()
        assert FT.Compose([])(img) is img


class TestContract:
    @pytest.mark.parametrize("make", [lambda: FT.RandomMask(0.3, fill=5), FT.ConvertColor, FT.Scale,
                                      lambda: FT.MaskYUVScale(0.2), FT.YUVScale,
                                      lambda: FT.Compose([FT.RandomMask(), FT.ConvertColor(), FT.Scale()])])
    def test_pickle_and_compose(self, make):
        t = make()
        t2 = pickle.loads(pickle.dumps(t))
        assert repr(t2) == repr(t)
        img = image()
        for wrapped in (t2, T.Compose([t]), v2.Compose([t])):
            torch.manual_seed(0)
            a = t(img)
            torch.manual_seed(0)
            assert torch.equal(wrapped(img), a)


class MaskDataset(torch.utils.data.Dataset):
    """Constant images through a fused pipeline: any variation is the mask."""

    def __init__(self, n):
        self.n = n
        self.transform = FT.Compose([FT.RandomMask(0.3), FT.ConvertColor(), FT.Scale()])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        out = self.transform(torch.full((3, 24, 24), 200, dtype=torch.uint8))
        return masked_yuv(out), torch.get_num_threads()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers(context):
    ds = MaskDataset(4)

    def run():
        loader = torch.utils.data.DataLoader(ds, batch_size=1, num_workers=2, multiprocessing_context=context)
        return list(loader)

    torch.manual_seed(0)
    first = run()
    masks = [m[0] for m, _ in first]
    assert all(int(n) == 1 for _, n in first)  # torch sets one thread per worker
    assert not torch.equal(masks[0], masks[1])  # items 0 and 1 come from different workers
    assert len({m.numpy().tobytes() for m in masks}) == 4
    if context == "fork":  # spawn start-up costs seconds per worker; one run shows it works
        torch.manual_seed(0)
        again = [m[0] for m, _ in run()]
        assert all(torch.equal(a, b) for a, b in zip(masks, again))
