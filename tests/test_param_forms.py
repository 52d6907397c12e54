"""Every accepted parameter form of the compiled torchvision transforms, through the threads
engine, against torchvision's own output.

The oracle is torchvision itself: the same pipeline applied to ``torchvision.io.decode_jpeg``
of each file under ``keyed_default_rng(sample_key(seed, 0, i))``, computed here. No other
fastprep path is the reference (a swapped parameter looks right when both sides share it).

Inputs: JPEGs made in the test from photo-like content of several sizes (odd ones included).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

import fastprep.data as D
from fastprep.bench.synthetic import encode_jpeg, photo_like

from _torchvision_oracle import assert_threads_equal_torchvision, torchvision_batch

SEED = 11
N = 6
SIZE = 40


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms")
    for i in range(N):
        h, w = 37 + 9 * i, 71 - 5 * i
        with open(os.path.join(root, f"{i:02d}.jpg"), "wb") as f:
            f.write(encode_jpeg(photo_like(h, w, seed=100 + i), quality=80 + 3 * i))
    return str(root)


def _torchvision(folder, transform):
    return torchvision_batch(folder, transform, SEED)


def _check(folder, transform):
    assert_threads_equal_torchvision(folder, transform, SEED, N)


PADDINGS = [3, [3], (2, 6), [2, 6], (1, 2, 3, 4), [5, 0, 0, 7], [0, 9, 4, 1]]


class TestRandomCropPadding:
    @pytest.mark.parametrize("padding", PADDINGS, ids=repr)
    @pytest.mark.parametrize("fill", [0, 173])
    def test_constant(self, folder, padding, fill):
        _check(folder, v2.Compose([v2.RandomCrop(SIZE, padding=padding, pad_if_needed=True, fill=fill)]))


# ---------------------------------------------------------------------------------------
# Every other class the compiler accepts, in each parameter form it accepts (docs/augment.md).
# Each case is checked twice: the engine must run it natively, and its pixels equal torchvision's.

IM = v2.InterpolationMode


def _after_crop(*steps):
    return v2.Compose([v2.RandomResizedCrop(SIZE), *steps])


def _f32():
    return v2.ToDtype(torch.float32, scale=True)


#: one interpolation in each form torchvision takes: the enum, Pillow's int constant, the string
BILINEAR_FORMS = [IM.BILINEAR, 2, "bilinear"]
NEAREST_FORMS = [IM.NEAREST, 0, "nearest"]

GEOMETRY = {
    "RandomResizedCrop(int)": v2.RandomResizedCrop(SIZE),
    "RandomResizedCrop([int])": v2.RandomResizedCrop([SIZE]),
    "RandomResizedCrop((h,w))": v2.RandomResizedCrop((SIZE, SIZE - 7)),
    "RandomResizedCrop([h,w])": v2.RandomResizedCrop([SIZE - 9, SIZE]),
    "RandomResizedCrop(scale,ratio lists)": v2.RandomResizedCrop(SIZE, scale=[0.3, 0.9], ratio=[0.5, 2.0]),
    "RandomResizedCrop(scale,ratio tuples)": v2.RandomResizedCrop(SIZE, scale=(0.3, 0.9), ratio=(0.5, 2.0)),
    "RandomResizedCrop(int bounds)": v2.RandomResizedCrop(SIZE, scale=(0.25, 1), ratio=(1, 2)),
    "RandomResizedCrop(antialias=False)": v2.RandomResizedCrop(SIZE, antialias=False),
    "RandomResizedCrop+RandomHorizontalFlip()": v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip()]),
    "RandomResizedCrop+RandomHorizontalFlip(1)": v2.Compose([v2.RandomResizedCrop(SIZE), v2.RandomHorizontalFlip(1)]),
    "RandomResizedCrop+RandomHorizontalFlip(0.0)": v2.Compose([v2.RandomResizedCrop(SIZE),
                                                               v2.RandomHorizontalFlip(0.0)]),
    "Resize(int)+CenterCrop(int)": v2.Compose([v2.Resize(SIZE + 5), v2.CenterCrop(SIZE)]),
    "Resize([int])+CenterCrop([int])": v2.Compose([v2.Resize([SIZE + 5]), v2.CenterCrop([SIZE])]),
    "Resize(int)+CenterCrop((h,w))": v2.Compose([v2.Resize(SIZE), v2.CenterCrop((SIZE - 4, SIZE))]),
    "Resize(int)+CenterCrop(larger)": v2.Compose([v2.Resize(SIZE - 10), v2.CenterCrop(SIZE)]),
    "Resize(antialias=False)+CenterCrop": v2.Compose([v2.Resize(SIZE + 3, antialias=False), v2.CenterCrop(SIZE)]),
    "Resize((h,w))": v2.Resize((SIZE, SIZE + 3)),
    "Resize([h,w])": v2.Resize([SIZE - 3, SIZE]),
    "CenterCrop(int)": v2.CenterCrop(SIZE - 8),
    "CenterCrop([int])": v2.CenterCrop([SIZE - 8]),
    "CenterCrop((h,w))": v2.CenterCrop((SIZE - 8, SIZE - 15)),
    "CenterCrop(larger than the image)": v2.CenterCrop((80, 90)),
    "RandomCrop(int)": v2.RandomCrop(SIZE - 10),
    "RandomCrop((h,w))": v2.RandomCrop((SIZE - 10, SIZE - 12)),
    "RandomCrop([h,w],pad_if_needed)": v2.RandomCrop([SIZE + 20, SIZE], pad_if_needed=True),
}
for _k, _mode in enumerate(BILINEAR_FORMS):
    GEOMETRY[f"RandomResizedCrop(interpolation={_mode!r})"] = v2.RandomResizedCrop(SIZE, interpolation=_mode)
    GEOMETRY[f"Resize(interpolation={_mode!r})+CenterCrop"] = v2.Compose([v2.Resize(SIZE + 2 * _k, interpolation=_mode),
                                                                         v2.CenterCrop(SIZE)])
    GEOMETRY[f"Resize((h,w),interpolation={_mode!r})"] = v2.Resize((SIZE, SIZE + _k), interpolation=_mode)


def _auto_augments():
    out = {}
    fills = [None, 0, 128, 77.0, (10, 20, 30), [10, 20, 30], [200], {tv_tensors.Image: 9, torch.Tensor: 9},
             {"others": (1, 2, 3)}]
    for k, mode in enumerate([*NEAREST_FORMS, *BILINEAR_FORMS]):
        fill = fills[k % len(fills)]
        out[f"TrivialAugmentWide(interpolation={mode!r},fill={fill!r})"] = v2.TrivialAugmentWide(
            interpolation=mode, fill=fill)
        out[f"RandAugment(2,{9 + k},interpolation={mode!r},fill={fill!r})"] = v2.RandAugment(
            2, 9 + k, interpolation=mode, fill=fill)
    for k, fill in enumerate(fills):
        out[f"TrivialAugmentWide(fill={fill!r})"] = v2.TrivialAugmentWide(fill=fill)
        policy = list(v2.AutoAugmentPolicy)[k % 3]
        out[f"AutoAugment({policy.name},fill={fill!r})"] = v2.AutoAugment(policy, fill=fill)
    for policy in v2.AutoAugmentPolicy:
        for mode in (IM.BILINEAR, "nearest", 2):
            out[f"AutoAugment({policy.name},interpolation={mode!r})"] = v2.AutoAugment(policy, interpolation=mode)
    out["TrivialAugmentWide(num_magnitude_bins=11)"] = v2.TrivialAugmentWide(11)
    out["RandAugment(num_ops=1,magnitude=3,num_magnitude_bins=5)"] = v2.RandAugment(1, 3, 5)
    out["RandAugment(num_ops=0)"] = v2.RandAugment(0)
    return out


AUGMENT = {
    "ColorJitter(scalars)": v2.ColorJitter(0.4, 0.3, 0.2, 0.1),
    "ColorJitter(int scalars)": v2.ColorJitter(1, 1, 1),
    "ColorJitter((min,max) tuples)": v2.ColorJitter((0.6, 1.3), (0.7, 1.2), (0.5, 1.5), (-0.2, 0.1)),
    "ColorJitter([min,max] lists)": v2.ColorJitter([0.6, 1.3], [0.7, 1.2], [0.5, 1.5], [-0.2, 0.1]),
    "ColorJitter(zeros: None)": v2.ColorJitter(0, 0.0, 0, 0),
    "ColorJitter(hue=0.5)": v2.ColorJitter(hue=0.5),
    "ColorJitter(hue=(-0.5,0.5))": v2.ColorJitter(hue=(-0.5, 0.5)),
    "ColorJitter(hue=[0,0.3])": v2.ColorJitter(hue=[0, 0.3]),
    "ColorJitter(brightness=(1,1))": v2.ColorJitter(brightness=(1, 1), saturation=(0, 2)),
    "Grayscale()": v2.Grayscale(),
    "Grayscale(3)": v2.Grayscale(3),
    "Grayscale(1)+ColorJitter": v2.Compose([v2.Grayscale(1), v2.ColorJitter(0.4, 0.4, 0.4, 0.1)]),
    "Grayscale(1)+Grayscale(3)": v2.Compose([v2.Grayscale(1), v2.Grayscale(3)]),
    "RandomGrayscale()": v2.RandomGrayscale(),
    "RandomGrayscale(1)": v2.RandomGrayscale(1),
    "RandomHorizontalFlip(0.5)+RandomVerticalFlip(1)": v2.Compose([v2.RandomHorizontalFlip(0.5),
                                                                   v2.RandomVerticalFlip(1)]),
    "RandomSolarize(128)": v2.RandomSolarize(128, p=1),
    "RandomSolarize(127.5)": v2.RandomSolarize(127.5, p=1.0),
    "RandomSolarize(0)": v2.RandomSolarize(0, p=0.7),
    "RandomSolarize(-3)": v2.RandomSolarize(-3, p=1),
    "RandomSolarize(255.0)": v2.RandomSolarize(255.0, p=1),
    "RandomPosterize(0)": v2.RandomPosterize(0, p=1),
    "RandomPosterize(3)": v2.RandomPosterize(3),
    "RandomPosterize(8)": v2.RandomPosterize(8, p=1.0),
    "RandomAutocontrast(1)+RandomEqualize(1)+RandomInvert(1)": v2.Compose([
        v2.RandomAutocontrast(1), v2.RandomEqualize(1), v2.RandomInvert(1)]),
    "RandomAdjustSharpness(2)": v2.RandomAdjustSharpness(2, p=1),
    "RandomAdjustSharpness(0.3)": v2.RandomAdjustSharpness(0.3, p=0.6),
    "GaussianBlur(3)": v2.GaussianBlur(3),
    "GaussianBlur((5,3))": v2.GaussianBlur((5, 3)),
    "GaussianBlur([3,7],sigma=1)": v2.GaussianBlur([3, 7], sigma=1),
    "GaussianBlur(5,sigma=0.8)": v2.GaussianBlur(5, sigma=0.8),
    "GaussianBlur(5,sigma=(0.5,1.5))": v2.GaussianBlur(5, sigma=(0.5, 1.5)),
    "GaussianBlur(5,sigma=[1.0,2.0])": v2.GaussianBlur(5, sigma=[1.0, 2.0]),
    "RandomErasing()": v2.RandomErasing(),
    "RandomErasing(value=7)": v2.RandomErasing(1, value=7),
    "RandomErasing(value=7.0)": v2.RandomErasing(1.0, value=7.0),
    "RandomErasing(value=(1,2,3))": v2.RandomErasing(1, value=(1, 2, 3)),
    "RandomErasing(value=[1,2,3])": v2.RandomErasing(1, value=[1, 2, 3]),
    "RandomErasing(value=[9])": v2.RandomErasing(1, value=[9]),
    "RandomErasing(value='random')": v2.RandomErasing(1, value="random"),
    "RandomErasing(scale,ratio lists)": v2.RandomErasing(1, scale=[0.1, 0.4], ratio=[0.5, 2]),
    "RandomErasing(scale,ratio tuples)": v2.RandomErasing(1, scale=(0.1, 0.4), ratio=(0.5, 2), inplace=True),
    "Grayscale(1)+RandomErasing(value=[5])": v2.Compose([v2.Grayscale(1), v2.RandomErasing(1, value=[5])]),
    "RandomApply([list])": v2.RandomApply([v2.RandomInvert(1), v2.RandomPosterize(2, 1)]),
    "RandomApply(ModuleList,p=0.3)": v2.RandomApply(torch.nn.ModuleList([v2.RandomInvert(1)]), p=0.3),
    "RandomChoice()": v2.RandomChoice([v2.RandomInvert(1), v2.RandomEqualize(1), v2.Grayscale(3)]),
    "RandomChoice(p=[1,3])": v2.RandomChoice([v2.RandomInvert(1), v2.RandomEqualize(1)], p=[1, 3]),
    "RandomOrder()": v2.RandomOrder([v2.RandomInvert(1), v2.RandomPosterize(3, 1), v2.ColorJitter(0.5)]),
    "ToImage+ToPureTensor+Identity": v2.Compose([v2.ToImage(), v2.ToPureTensor(), v2.Identity()]),
    "ToDtype(uint8)": v2.ToDtype(torch.uint8),
    **_auto_augments(),
}

OUTPUT = {
    "ToDtype(float32,scale=True)": [_f32()],
    "ToDtype+Normalize(lists)": [_f32(), v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])],
    "ToDtype+Normalize(tuples)": [_f32(), v2.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))],
    "ToDtype+Normalize([m],[s])": [_f32(), v2.Normalize([0.5], [0.25])],
    "ToDtype+Normalize(inplace)": [_f32(), v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.3, 0.4], inplace=True)],
    "ToDtype({Tensor:float32})": [v2.ToDtype({torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64},
                                             scale=True)],
    "ToDtype({'others':float32})+Normalize": [v2.ToDtype({"others": torch.float32}, scale=True),
                                              v2.Normalize([0.5] * 3, [0.2] * 3)],
    "ToImage+ToDtype({Image:float32,'others':None})": [
        v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)],
    "ToImage+ToDtype({Image:uint8,'others':None})+ToDtype(float32)": [
        v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.uint8, "others": None}), _f32()],
    "ToDtype+RandomErasing(value=0.5)": [_f32(), v2.RandomErasing(1, value=0.5)],
    "ToDtype+Normalize+RandomErasing('random')": [_f32(), v2.Normalize([0.5] * 3, [0.2] * 3),
                                                  v2.RandomErasing(1, value="random")],
    "ToDtype+RandomErasing((0.1,0.2,0.3))": [_f32(), v2.RandomErasing(1, value=(0.1, 0.2, 0.3))],
    "Grayscale(1)+ToDtype+Normalize([m],[s])": [v2.Grayscale(1), _f32(), v2.Normalize([0.5], [0.25])],
}


def _native(transform):
    from fastprep.data.native import NativePipeline
    from fastprep.transforms import OnDecoded

    return NativePipeline.compile(OnDecoded(transform))  # raises Unsupported with the reason


class TestGeometryForms:
    @pytest.mark.parametrize("name", list(GEOMETRY))
    def test_form(self, folder, name):
        _native(GEOMETRY[name])
        _check(folder, GEOMETRY[name])


class TestAugmentForms:
    @pytest.mark.parametrize("name", list(AUGMENT))
    def test_form(self, folder, name):
        transform = _after_crop(AUGMENT[name])
        _native(transform)
        _check(folder, transform)


class TestOutputForms:
    @pytest.mark.parametrize("name", list(OUTPUT))
    def test_form(self, folder, name):
        transform = _after_crop(v2.RandomHorizontalFlip(), *OUTPUT[name])
        _native(transform)
        with warnings.catch_warnings():
            # ToDtype({...: None}, scale=True): torchvision's notice that nothing is scaled
            warnings.filterwarnings("ignore", "scale was set to True", UserWarning)
            _check(folder, transform)


def test_empty_fallback_window_raises_as_torchvision_does(tmp_path):
    """RandomResizedCrop on a 1x1 image with ratios far from 1: none of the 10 draws fits and the
    centred fallback window is empty, on which torchvision's resize raises. The threads engine
    raises for that file too, naming it (the batch planner leaves it to the per-sample path)."""
    with open(tmp_path / "tiny.jpg", "wb") as f:
        f.write(encode_jpeg(photo_like(1, 1, seed=3), quality=90))
    transform = v2.Compose([v2.RandomResizedCrop(16, scale=(0.1, 0.5), ratio=(2.4, 2.5),
                                                  interpolation=v2.InterpolationMode.BICUBIC)])
    with pytest.raises((RuntimeError, ValueError)):
        _torchvision(str(tmp_path), transform)
    loader = D.make_loader(str(tmp_path), transform=transform, engine="threads", seed=SEED, batch_size=1,
                           shuffle=False, num_workers=0, device="cpu")
    with pytest.raises(Exception, match="tiny.jpg"):
        list(loader)
