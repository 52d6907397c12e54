"""DecodeRandomCrop / DecodeCenterCrop: torchvision's windows, only the window decoded."""

import pickle

import pytest
import torch
from torchvision import transforms as T
from torchvision.transforms import v2

import fastprep.io as fio
from conftest import make_jpeg
from fastprep.transforms import DecodeCenterCrop, DecodeRandomCrop

PHOTO = make_jpeg("420", 70, 90, seed=9)
FULL = fio.decode_jpeg(PHOTO)


def same_draws(ours, theirs, data, full, seeds=range(20)):
    for seed in seeds:
        torch.manual_seed(seed)
        a = ours(data)
        torch.manual_seed(seed)
        b = theirs(full)
        assert torch.equal(a, b), seed


class TestDecodeRandomCrop:
    # (70, 40) and (30, 90): as tall or as wide as the image, where v2 draws only one offset
    # (v1's RandomCrop draws both; the decoded-image fallback and the fuzz oracle are v2's)
    @pytest.mark.parametrize("size", [32, (20, 50), (70, 90), (1, 1), (70, 1), (70, 40), (30, 90)])
    def test_matches_torchvision_random_crop(self, size):
        same_draws(DecodeRandomCrop(size), v2.RandomCrop(size), PHOTO, FULL)

    @pytest.mark.parametrize("size,padding", [((80, 40), None), ((30, 120), None), ((100, 100), None),
                                              (64, 8), ((80, 95), (3, 5)), (40, (1, 2, 3, 4))])
    def test_pad_if_needed_and_padding(self, size, padding):
        ours = DecodeRandomCrop(size, padding=padding, pad_if_needed=True, fill=17)
        theirs = v2.RandomCrop(size, padding=padding, pad_if_needed=True, fill=17)
        same_draws(ours, theirs, PHOTO, FULL)

    def test_too_small_raises_like_torchvision(self):
        with pytest.raises(ValueError, match="larger than input image size"):
            DecodeRandomCrop(100)(PHOTO)
        with pytest.raises(ValueError, match="larger than input image size"):
            T.RandomCrop(100)(FULL)

    def test_inputs(self, tmp_path):
        p = tmp_path / "x.jpg"
        p.write_bytes(PHOTO)
        t = DecodeRandomCrop(16)
        outs = []
        for inp in (str(p), p, PHOTO, bytearray(PHOTO), fio.read_file(p)):
            torch.manual_seed(3)
            outs.append(t(inp))
        assert all(torch.equal(outs[0], o) for o in outs)
        assert outs[0].dtype == torch.uint8 and outs[0].shape == (3, 16, 16)

    def test_modes(self):
        torch.manual_seed(0)
        assert DecodeRandomCrop(8, mode="GRAY")(PHOTO).shape == (1, 8, 8)
        cmyk = make_jpeg("cmyk", 30, 30)
        torch.manual_seed(0)
        assert DecodeRandomCrop(8, mode="UNCHANGED")(cmyk).shape == (4, 8, 8)

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="size"):
            DecodeRandomCrop(0)
        with pytest.raises(ValueError, match="size"):
            DecodeRandomCrop((1, 2, 3))
        with pytest.raises(ValueError, match="fill"):
            DecodeRandomCrop(8, fill=300)
        with pytest.raises(ValueError, match="padding"):
            DecodeRandomCrop(8, padding=-1)
        with pytest.raises(ValueError, match="mode"):
            DecodeRandomCrop(8, mode="nope")
        with pytest.raises(fio.DecodeError):
            DecodeRandomCrop(8)(b"not a jpeg")

    def test_repr_and_pickle(self):
        t = DecodeRandomCrop((10, 20), pad_if_needed=True)
        assert "size=(10, 20)" in repr(t) and "pad_if_needed=True" in repr(t)
        t2 = pickle.loads(pickle.dumps(t))
        torch.manual_seed(1)
        a = t(PHOTO)
        torch.manual_seed(1)
        assert torch.equal(a, t2(PHOTO))

    @pytest.mark.parametrize("compose", [T.Compose, v2.Compose])
    def test_in_torchvision_compose(self, compose):
        pipe = compose([DecodeRandomCrop(32), T.ConvertImageDtype(torch.float32)])
        ref = T.Compose([T.RandomCrop(32), T.ConvertImageDtype(torch.float32)])
        same_draws(pipe, ref, PHOTO, FULL, seeds=range(5))


class TestDecodeCenterCrop:
    @pytest.mark.parametrize("size", [32, (20, 50), (70, 90), (71, 91), (100, 40), (10, 120), (1, 1)])
    def test_matches_torchvision_center_crop(self, size):
        assert torch.equal(DecodeCenterCrop(size)(PHOTO), T.CenterCrop(size)(FULL))

    def test_pickle(self):
        t = pickle.loads(pickle.dumps(DecodeCenterCrop(5)))
        assert torch.equal(t(PHOTO), T.CenterCrop(5)(FULL))


class _Files(torch.utils.data.Dataset):
    def __init__(self, datas, transform):
        self.datas, self.transform = datas, transform

    def __len__(self):
        return len(self.datas)

    def __getitem__(self, i):
        return self.transform(self.datas[i])


def test_dataloader_workers_reproducible_and_distinct():
    datas = [make_jpeg("420", 40, 48, seed=s) for s in range(4)] * 2
    ds = _Files(datas, DecodeRandomCrop(16))

    def run():
        loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=2,
                                             generator=torch.Generator().manual_seed(5))
        return torch.cat(list(loader))

    a, b = run(), run()
    assert torch.equal(a, b)  # DataLoader seeds workers from its generator
    # Samples 0 and 4 are the same file; different draws give different crops (almost surely).
    assert not all(torch.equal(a[i], a[i + 4]) for i in range(4))


def test_ycbcr_padding_is_the_ycbcr_of_the_fill():
    t = DecodeRandomCrop(100, pad_if_needed=True, fill=0, mode="YCbCr")  # image is 70x90
    torch.manual_seed(0)
    out = t(PHOTO)
    torch.manual_seed(0)
    rgb = DecodeRandomCrop(100, pad_if_needed=True, fill=0)(PHOTO)
    pad = (rgb == 0).all(0) & (out[0] == 0)  # padded pixels (and any black ones)
    assert pad.sum() > 100 and bool((out[1:, pad] == 128).all())


@pytest.mark.parametrize("size", ["ab", (8.7, 9), (True, 3), None])
def test_size_errors_name_the_value(size):
    with pytest.raises(ValueError, match="got"):
        DecodeRandomCrop(size)


def test_old_module_names_still_import():
    # fastprep.decode_transforms became a compatibility module when the transforms became
    # a package: what it offered imports from it, as the very objects fastprep.transforms has.
    import fastprep.decode_transforms as old
    import fastprep.transforms as new

    for name in old.__all__ + ["DCT_SCALES", "plan_scaled_window"]:
        assert getattr(old, name) is getattr(new, name), name
    assert old.scaled_size is fio.scaled_size
    assert old.scaled_size(375, 500, 3) == (141, 188)
