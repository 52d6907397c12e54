"""Every public torchvision v2 transform class, in its documented parameter forms, through
``make_loader(folder, transform=...)``: the compiler never fails on a valid pipeline.

Each case runs after ``RandomResizedCrop(32)`` (a fixed size first, as training pipelines
are) and alone. The loader must either run it on the threads engine, or fall back to the
processes engine with a non-empty ``engine_reason``; either way its batches equal
torchvision's own output: the pipeline on ``torchvision.io.decode_jpeg`` of each file under
``keyed_default_rng(sample_key(seed, 0, i))``, computed here. Where torchvision itself
raises, the compiler must have refused the pipeline (a native run would invent a result)
and the loader raises as torchvision does; where torchvision returns what a batch cannot
hold (PIL images, tuples, integer tensors), the compiler must have refused it too.

The full sweep is marked ``slow`` (``pytest -m "not slow"`` leaves it out); a subset that
covers the classes the compiler accepts and the known former crashes runs by default.
"""

from __future__ import annotations

import inspect
import os
import warnings

import pytest
import torch
import torchvision.io as tvio
from torchvision import tv_tensors
from torchvision.datasets.folder import default_loader
from torchvision.transforms import v2

import fastprep.data as D
import fastprep.io as fio
from fastprep._seeding import keyed_default_rng, sample_key
from fastprep.bench.synthetic import encode_jpeg, photo_like

from _torchvision_oracle import torchvision_decode
from fastprep.data.native import NativePipeline
from fastprep.data.loader import dataset_transform
from fastprep.transforms import OnPIL
from fastprep.transforms._compile import input_kind
from fastprep.transforms._native import Unsupported

SEED = 5
N = 3
IM = v2.InterpolationMode


def _f32():
    return v2.ToDtype(torch.float32, scale=True)


def _cases_a_to_f(c: dict) -> None:
    c["AugMix()"] = v2.AugMix()
    c["AugMix(1,2,1,.5,False,'bilinear',fill=0)"] = v2.AugMix(1, 2, 1, 0.5, False, interpolation="bilinear", fill=0)
    for policy in v2.AutoAugmentPolicy:
        c[f"AutoAugment({policy.name})"] = v2.AutoAugment(policy)
    c["AutoAugment(interpolation=2,fill=[1,2,3])"] = v2.AutoAugment(interpolation=2, fill=[1, 2, 3])
    c["AutoAugment('bilinear',fill={Image:5,'others':0})"] = v2.AutoAugment(
        interpolation="bilinear", fill={tv_tensors.Image: 5, "others": 0})
    c["CenterCrop(16)"] = v2.CenterCrop(16)
    c["CenterCrop([16])"] = v2.CenterCrop([16])
    c["CenterCrop((16,20))"] = v2.CenterCrop((16, 20))
    c["CenterCrop(40)"] = v2.CenterCrop(40)
    c["ClampBoundingBoxes()"] = v2.ClampBoundingBoxes()
    c["ClampKeyPoints()"] = v2.ClampKeyPoints()
    c["ColorJitter(.4,.4,.4,.1)"] = v2.ColorJitter(0.4, 0.4, 0.4, 0.1)
    c["ColorJitter(pairs)"] = v2.ColorJitter((0.5, 1.5), [0.6, 1.4], (0.8, 1.2), (-0.1, 0.1))
    c["ColorJitter(hue=[-.2,.3])"] = v2.ColorJitter(hue=[-0.2, 0.3])
    c["ColorJitter()"] = v2.ColorJitter()
    c["ConvertBoundingBoxFormat('XYXY')"] = v2.ConvertBoundingBoxFormat("XYXY")
    c["ConvertImageDtype(float32)"] = v2.ConvertImageDtype(torch.float32)
    c["ConvertImageDtype(uint8)"] = v2.ConvertImageDtype(torch.uint8)
    c["ConvertImageDtype(float64)"] = v2.ConvertImageDtype(torch.float64)
    c["CutMix(num_classes=3)"] = v2.CutMix(num_classes=3)
    c["ElasticTransform()"] = v2.ElasticTransform()
    c["ElasticTransform(sequences,fill=(1,2,3))"] = v2.ElasticTransform(alpha=[20.0, 30.0], sigma=(3.0, 4.0),
                                                                       fill=(1, 2, 3))
    c["FiveCrop(16)"] = v2.FiveCrop(16)


def _cases_g_to_r(c: dict) -> None:
    c["GaussianBlur(3)"] = v2.GaussianBlur(3)
    c["GaussianBlur((3,5),sigma=(.1,2))"] = v2.GaussianBlur((3, 5), sigma=(0.1, 2.0))
    c["GaussianBlur([5,3],sigma=1)"] = v2.GaussianBlur([5, 3], sigma=1)
    c["GaussianBlur(5,sigma=[.5,.5])"] = v2.GaussianBlur(5, sigma=[0.5, 0.5])
    c["GaussianNoise()"] = v2.GaussianNoise()
    c["f32+GaussianNoise(0,.05,clip=False)"] = v2.Compose([_f32(), v2.GaussianNoise(0.0, 0.05, clip=False)])
    c["Grayscale()"] = v2.Grayscale()
    c["Grayscale(3)"] = v2.Grayscale(3)
    c["Identity()"] = v2.Identity()
    c["JPEG(50)"] = v2.JPEG(50)
    c["JPEG((30,90))"] = v2.JPEG((30, 90))
    c["Lambda(flip)"] = v2.Lambda(lambda x: x.flip(-1))
    c["Resize((4,4))+f32+LinearTransformation"] = v2.Compose([
        v2.Resize((4, 4)), _f32(), v2.LinearTransformation(torch.eye(48) * 0.5, torch.full((48,), 0.25))])
    c["MixUp(num_classes=3)"] = v2.MixUp(num_classes=3)
    c["f32+Normalize(lists)"] = v2.Compose([_f32(), v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])])
    c["f32+Normalize(tuples,inplace)"] = v2.Compose([_f32(), v2.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3),
                                                                          inplace=True)])
    c["f32+Normalize([.5],[.2])"] = v2.Compose([_f32(), v2.Normalize([0.5], [0.2])])
    c["Normalize(on uint8)"] = v2.Normalize([0.5] * 3, [0.2] * 3)
    c["PILToTensor()"] = v2.PILToTensor()
    for padding in (2, [3], (1, 2), [1, 2, 3, 4]):
        for mode in ("constant", "edge", "reflect", "symmetric"):
            c[f"Pad({padding!r},{mode!r})"] = v2.Pad(padding, padding_mode=mode)
    c["Pad(2,fill=(1,2,3))"] = v2.Pad(2, fill=(1, 2, 3))
    c["Pad(2,fill={Image:7,'others':0})"] = v2.Pad(2, fill={tv_tensors.Image: 7, "others": 0})
    c["RGB()"] = v2.RGB()
    c["RandAugment()"] = v2.RandAugment()
    c["RandAugment(1,5,11,BILINEAR,[1,2,3])"] = v2.RandAugment(1, 5, 11, interpolation=IM.BILINEAR, fill=[1, 2, 3])


def _cases_random(c: dict) -> None:
    c["RandomAdjustSharpness(2)"] = v2.RandomAdjustSharpness(2)
    c["RandomAdjustSharpness(.5,p=1)"] = v2.RandomAdjustSharpness(0.5, p=1.0)
    c["RandomAffine(10)"] = v2.RandomAffine(10)
    c["RandomAffine((-5,15),translate,scale,shear=5,'bilinear',fill=7)"] = v2.RandomAffine(
        (-5, 15), translate=(0.1, 0.2), scale=(0.8, 1.2), shear=5, interpolation="bilinear", fill=7)
    c["RandomAffine([-5,5],shear=4 values,center,fill=[1,2,3])"] = v2.RandomAffine(
        [-5, 5], shear=(1, 2, 3, 4), center=[10.0, 12.0], fill=[1, 2, 3])
    c["RandomAutocontrast()"] = v2.RandomAutocontrast()
    c["RandomAutocontrast(p=1)"] = v2.RandomAutocontrast(p=1.0)
    c["RandomChannelPermutation()"] = v2.RandomChannelPermutation()
    c["RandomCrop(24)"] = v2.RandomCrop(24)
    c["RandomCrop(24,padding=4)"] = v2.RandomCrop(24, padding=4)
    c["RandomCrop((24,20),padding=[1,2],'reflect')"] = v2.RandomCrop((24, 20), padding=[1, 2], padding_mode="reflect")
    c["RandomCrop(40,pad_if_needed,fill=(1,2,3))"] = v2.RandomCrop(40, pad_if_needed=True, fill=(1, 2, 3))
    c["RandomEqualize()"] = v2.RandomEqualize()
    c["RandomErasing()"] = v2.RandomErasing()
    c["RandomErasing(1,lists,value=(1,2,3))"] = v2.RandomErasing(1.0, [0.1, 0.3], [0.5, 2.0], value=(1, 2, 3))
    c["RandomErasing(1,value='random')"] = v2.RandomErasing(1.0, value="random")
    c["RandomErasing(1,value=[9])"] = v2.RandomErasing(1.0, value=[9])
    c["f32+RandomErasing(1,value=.5)"] = v2.Compose([_f32(), v2.RandomErasing(1.0, value=0.5)])
    c["RandomGrayscale()"] = v2.RandomGrayscale()
    c["RandomGrayscale(1)"] = v2.RandomGrayscale(1.0)
    c["RandomHorizontalFlip()"] = v2.RandomHorizontalFlip()
    c["RandomHorizontalFlip(0)"] = v2.RandomHorizontalFlip(0.0)
    c["RandomInvert()"] = v2.RandomInvert()
    c["RandomIoUCrop()"] = v2.RandomIoUCrop()
    c["RandomPerspective()"] = v2.RandomPerspective()
    c["RandomPerspective(.3,1,'nearest',fill=[1,2,3])"] = v2.RandomPerspective(0.3, 1.0, interpolation="nearest",
                                                                              fill=[1, 2, 3])
    c["RandomPhotometricDistort()"] = v2.RandomPhotometricDistort()
    c["RandomPhotometricDistort(p=1)"] = v2.RandomPhotometricDistort(p=1.0)
    c["RandomPosterize(4)"] = v2.RandomPosterize(4)
    c["RandomPosterize(2,p=1)"] = v2.RandomPosterize(2, p=1.0)
    c["RandomResize(16,48)"] = v2.RandomResize(16, 48)
    c["RandomResizedCrop(16)"] = v2.RandomResizedCrop(16)
    c["RandomResizedCrop([16],lists)"] = v2.RandomResizedCrop([16], scale=[0.2, 0.9], ratio=[0.5, 2.0])
    c["RandomResizedCrop(16,scale=(0,1))"] = v2.RandomResizedCrop(16, scale=(0, 1))
    c["RandomResizedCrop((16,20),NEAREST)"] = v2.RandomResizedCrop((16, 20), interpolation=IM.NEAREST)
    c["RandomResizedCrop(16,'bicubic',antialias=False)"] = v2.RandomResizedCrop(16, interpolation="bicubic",
                                                                               antialias=False)
    c["RandomRotation(30)"] = v2.RandomRotation(30)
    c["RandomRotation((-10,20),'bilinear',fill=5)"] = v2.RandomRotation((-10, 20), interpolation="bilinear", fill=5)
    c["RandomRotation(30,expand=True)"] = v2.RandomRotation(30, expand=True)
    c["RandomRotation(30,center,fill=(1,2,3))"] = v2.RandomRotation(30, center=[4.0, 5.0], fill=(1, 2, 3))
    c["RandomShortestSize(16)"] = v2.RandomShortestSize(16)
    c["RandomShortestSize([16,20,24],max_size=30)"] = v2.RandomShortestSize([16, 20, 24], max_size=30)
    c["RandomSolarize(128)"] = v2.RandomSolarize(128)
    c["RandomSolarize(127.5,p=1)"] = v2.RandomSolarize(127.5, p=1.0)
    c["RandomVerticalFlip()"] = v2.RandomVerticalFlip()
    c["RandomZoomOut()"] = v2.RandomZoomOut()
    c["RandomZoomOut((1,2,3),(1,2),p=1)"] = v2.RandomZoomOut(fill=(1, 2, 3), side_range=(1.0, 2.0), p=1.0)


def _cases_r_to_z(c: dict) -> None:
    c["Resize(16)"] = v2.Resize(16)
    c["Resize([16])"] = v2.Resize([16])
    c["Resize((16,20))"] = v2.Resize((16, 20))
    c["Resize(None,max_size=40)"] = v2.Resize(None, max_size=40)
    c["Resize(16,max_size=40)"] = v2.Resize(16, max_size=40)
    c["Resize((16,20),NEAREST_EXACT)"] = v2.Resize((16, 20), interpolation=IM.NEAREST_EXACT)
    c["Resize((16,20),antialias=False)"] = v2.Resize((16, 20), antialias=False)
    c["SanitizeBoundingBoxes()"] = v2.SanitizeBoundingBoxes()
    c["SanitizeKeyPoints()"] = v2.SanitizeKeyPoints()
    c["ScaleJitter((32,32))"] = v2.ScaleJitter((32, 32))
    c["ScaleJitter((24,24),(.5,1.5))"] = v2.ScaleJitter((24, 24), scale_range=(0.5, 1.5))
    c["SetClampingMode('soft')"] = v2.SetClampingMode("soft")
    c["TenCrop(16)"] = v2.TenCrop(16)
    c["TenCrop(16,vertical_flip=True)"] = v2.TenCrop(16, vertical_flip=True)
    c["ToDtype(float32,scale=True)"] = _f32()
    c["ToDtype(float32)"] = v2.ToDtype(torch.float32)
    c["ToDtype(uint8)"] = v2.ToDtype(torch.uint8)
    c["ToDtype(float64,scale=True)"] = v2.ToDtype(torch.float64, scale=True)
    c["ToDtype(int32)"] = v2.ToDtype(torch.int32)
    c["ToDtype({Tensor:float32})"] = v2.ToDtype({torch.Tensor: torch.float32}, scale=True)
    c["ToDtype({'others':float32})"] = v2.ToDtype({"others": torch.float32}, scale=True)
    c["ToDtype({Image:float32})"] = v2.ToDtype({tv_tensors.Image: torch.float32}, scale=True)
    c["ToDtype({Image:uint8,'others':None})"] = v2.ToDtype({tv_tensors.Image: torch.uint8, "others": None})
    c["ToImage+ToDtype({Image:float32,'others':None})"] = v2.Compose([
        v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)])
    c["ToImage+ToDtype({Image:float32})+ToPureTensor+Normalize"] = v2.Compose([
        v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64}, scale=True),
        v2.ToPureTensor(), v2.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])])
    c["ToImage()"] = v2.ToImage()
    c["ToPILImage()"] = v2.ToPILImage()
    c["ToPureTensor()"] = v2.ToPureTensor()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "ToTensor() is deprecated"
        c["ToTensor()"] = v2.ToTensor()
    c["Transform()"] = v2.Transform()
    c["TrivialAugmentWide()"] = v2.TrivialAugmentWide()
    c["TrivialAugmentWide(11,'bilinear',fill=(1,2,3))"] = v2.TrivialAugmentWide(11, interpolation="bilinear",
                                                                               fill=(1, 2, 3))
    c["UniformTemporalSubsample(2)"] = v2.UniformTemporalSubsample(2)
    c["Compose([HorizontalFlip,Invert])"] = v2.Compose([v2.RandomHorizontalFlip(), v2.RandomInvert()])
    c["RandomApply([Invert])"] = v2.RandomApply([v2.RandomInvert(1.0)])
    c["RandomApply(ModuleList,p=.3)"] = v2.RandomApply(torch.nn.ModuleList([v2.RandomInvert(1.0)]), p=0.3)
    c["RandomApply([Grayscale(1)],p=.5)"] = v2.RandomApply([v2.Grayscale(1)])
    c["RandomChoice([Invert,Equalize])"] = v2.RandomChoice([v2.RandomInvert(1.0), v2.RandomEqualize(1.0)])
    c["RandomChoice(...,p=[.2,.8])"] = v2.RandomChoice([v2.RandomInvert(1.0), v2.RandomEqualize(1.0)], p=[0.2, 0.8])
    c["RandomOrder([Invert,Posterize])"] = v2.RandomOrder([v2.RandomInvert(1.0), v2.RandomPosterize(3, 1.0)])
    c["Grayscale(1)+ColorJitter"] = v2.Compose([v2.Grayscale(1), v2.ColorJitter(0.4, 0.4, 0.4, 0.1)])
    c["Grayscale(1)+f32+Normalize([.5],[.2])"] = v2.Compose([v2.Grayscale(1), _f32(), v2.Normalize([0.5], [0.2])])
    c["Grayscale(1)+RandomErasing(1,value=(1,2,3))"] = v2.Compose([v2.Grayscale(1),
                                                                    v2.RandomErasing(1.0, value=(1, 2, 3))])
    c["Grayscale(1)+RGB()"] = v2.Compose([v2.Grayscale(1), v2.RGB()])
    c["Grayscale(1)+Grayscale(3)"] = v2.Compose([v2.Grayscale(1), v2.Grayscale(3)])


def _cases() -> dict[str, object]:
    """One transform per documented parameter form, by name."""
    c: dict[str, object] = {}
    for part in (_cases_a_to_f, _cases_g_to_r, _cases_random, _cases_r_to_z):
        part(c)
    return c


CASES = _cases()
#: the default run: every class the compiler accepts (or used to crash on) and the fallbacks
#: of the issue that filed them; the rest is the slow sweep.
FAST = [
    "AutoAugment(interpolation=2,fill=[1,2,3])", "ColorJitter(pairs)", "GaussianBlur((3,5),sigma=(.1,2))",
    "Grayscale()", "Grayscale(1)+f32+Normalize([.5],[.2])", "Grayscale(1)+RandomErasing(1,value=(1,2,3))",
    "RandomApply([Grayscale(1)],p=.5)", "RandomErasing(1,lists,value=(1,2,3))", "RandomSolarize(127.5,p=1)",
    "Resize(None,max_size=40)", "Resize(16,max_size=40)", "ToDtype({Tensor:float32})", "ToDtype({Image:float32})",
    "ToImage+ToDtype({Image:float32,'others':None})", "ToImage+ToDtype({Image:float32})+ToPureTensor+Normalize",
    "f32+Normalize([.5],[.2])", "RandomChoice(...,p=[.2,.8])", "Lambda(flip)", "ToPILImage()", "FiveCrop(16)",
    "GaussianNoise()",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust")
    for i in range(N):
        h, w = 36 + 7 * i, 48 - 5 * i
        with open(os.path.join(root, f"{i:02d}.jpg"), "wb") as f:
            f.write(encode_jpeg(photo_like(h, w, seed=40 + i), quality=85))
    return str(root)


def _quiet():
    """torchvision's own notices (deprecations, ToDtype's 'no dtype' warning) are not at issue here."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.filterwarnings("ignore", module=r"torchvision\.")
    return ctx


def _input(path, transform):
    """What the loader gives ``transform``: a PIL image as ``ImageFolder``'s default loader
    opens it for a pipeline written for PIL images (``make_loader`` wraps it in ``OnPIL``), else
    torchvision's decode."""
    if isinstance(dataset_transform(transform), OnPIL):
        return default_loader(path)
    return torchvision_decode(path)


def _torchvision(folder, transform):
    """Each sample's output, or the exception torchvision raised on the first failing one."""
    out = []
    for i, name in enumerate(sorted(os.listdir(folder))):
        ctx = _quiet()
        try:
            image = _input(os.path.join(folder, name), transform)
            with keyed_default_rng(sample_key(SEED, 0, i)):
                out.append(transform(image))
        except Exception as e:  # torchvision refuses this pipeline
            return e
        finally:
            ctx.__exit__(None, None, None)
    return out


def _batchable(outputs) -> bool:
    """Whether torchvision's outputs are images a loader batch holds: uint8 or float tensors [C, H, W]."""
    return all(type(o) in (torch.Tensor, tv_tensors.Image) and o.dim() == 3
               and (o.dtype == torch.uint8 or o.is_floating_point()) for o in outputs)


def _compiles(transform) -> bool:
    """Whether the compiler takes ``transform``; a refusal must be Unsupported with a reason."""
    try:
        NativePipeline.compile(dataset_transform(transform))  # as make_loader wraps it
    except Unsupported as e:
        assert str(e).strip(), "Unsupported without a reason"
        return False
    return True


def _check(folder, transform):
    want = _torchvision(folder, transform)
    native = _compiles(transform)  # any other exception fails the test: the compiler crashed
    if isinstance(want, Exception) or not _batchable(want):
        assert not native, f"torchvision gives {want!r:.200}, but the compiler made a native pipeline of it"
        return
    same_shape = len({tuple(o.shape) for o in want}) == 1
    ctx = _quiet()
    try:
        loader = D.make_loader(folder, transform=transform, seed=SEED, batch_size=N if same_shape else 1,
                               shuffle=False, num_workers=0, device="cpu")
        assert loader.engine == ("threads" if native else "processes")
        assert (loader.engine_reason is None) == native and (native or loader.engine_reason.strip())
        got = [x for images, _ in loader for x in images]
    finally:
        ctx.__exit__(None, None, None)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.float() / 255 if w.dtype == torch.uint8 else w.to(g.dtype)  # the loader's uint8 -> RGB / 255
        assert g.shape == w.shape, f"sample {i}: shape {tuple(g.shape)}, torchvision's {tuple(w.shape)}"
        mismatch = (g != w).sum().item()
        assert mismatch == 0, f"sample {i}: {mismatch} values differ from torchvision ({loader.engine} engine)"


def _decode_layout_differs() -> bool:
    """Whether fastprep's decode (the processes engine's) returns other strides than
    torchvision's: then an op whose draws follow the input's memory layout
    (``torch.randn_like``) draws its noise in another order on the decoded image itself."""
    data = torch.frombuffer(bytearray(encode_jpeg(photo_like(8, 16, seed=1))), dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29's decoder notice
        theirs = tvio.decode_jpeg(data, mode=tvio.ImageReadMode.RGB)
    return fio.decode_jpeg(data).stride() != theirs.stride()


#: cases whose "alone" form applies a layout-following draw to the decoded image itself
_LAYOUT_DRAWS = {"GaussianNoise()", "f32+GaussianNoise(0,.05,clip=False)"}


def _pipeline(name, where):
    t = CASES[name]
    if where != "alone":
        return v2.Compose([v2.RandomResizedCrop(32), t])
    if input_kind(t) not in ("decoded", "pil"):
        pytest.skip(f"{name} alone takes the encoded file (docs/augment.md): torchvision's output is no reference")
    if name in _LAYOUT_DRAWS and _decode_layout_differs():
        pytest.xfail("fastprep.io.decode_jpeg returns other strides than torchvision's decode, and "
                     "GaussianNoise's randn_like follows them")
    return t


@pytest.mark.parametrize("where", ["after RandomResizedCrop(32)", "alone"])
@pytest.mark.parametrize("name", FAST)
def test_fast_subset(folder, name, where):
    _check(folder, _pipeline(name, where))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["after RandomResizedCrop(32)", "alone"])
@pytest.mark.parametrize("name", [n for n in CASES if n not in FAST])
def test_every_form(folder, name, where):
    _check(folder, _pipeline(name, where))


def _types(transform) -> set[type]:
    found = {type(transform)}
    for child in getattr(transform, "transforms", []) or []:
        found |= _types(child)
    return found


def test_every_public_v2_class_has_a_case():
    """A torchvision upgrade that adds a class fails here until the sweep covers it."""
    public = {obj for name in dir(v2) if not name.startswith("_")
              for obj in [getattr(v2, name)] if inspect.isclass(obj) and issubclass(obj, v2.Transform)}
    covered = set().union(*(_types(t) for t in CASES.values())) | {v2.Compose}
    assert public - covered == set(), sorted(c.__name__ for c in public - covered)


def test_former_crashes_fall_back_with_reasons():
    """``Resize(None, max_size=...)`` raised TypeError from the compiler."""
    for transform in (v2.Resize(None, max_size=180), v2.Compose([v2.Resize(None, max_size=40), v2.CenterCrop(20)])):
        with pytest.raises(Unsupported, match="max_size"):
            NativePipeline.compile(dataset_transform(transform))  # as make_loader wraps it


class TestOneChannel:
    """A pipeline that ends in ``Grayscale(1)`` delivers ``[N, 1, H, W]`` batches on both engines
    (it used to fail with "convert needs 3-channel batches")."""

    PIPELINE = [v2.RandomResizedCrop(32), v2.RandomHorizontalFlip(), v2.Grayscale(1)]

    def _want(self, folder):
        want = _torchvision(folder, v2.Compose(self.PIPELINE))
        assert not isinstance(want, Exception) and want[0].shape == (1, 32, 32)
        return torch.stack(want).float()

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_uint8_end_with_mean_and_std(self, folder, engine):
        # BatchConvert's arithmetic, written here: x * (1 / (255 std)) + (-mean / std), two float32 roundings
        gain, bias = torch.tensor(1.0 / (255.0 * 0.25)), torch.tensor(-0.5 / 0.25)
        want = self._want(folder) * gain + bias
        loader = D.make_loader(folder, transform=v2.Compose(self.PIPELINE), seed=SEED, batch_size=N, shuffle=False,
                               num_workers=0, device="cpu", engine=engine, mean=0.5, std=[0.25])
        (got, _), = list(loader)
        assert got.shape == (N, 1, 32, 32) and torch.equal(got, want)

    @pytest.mark.parametrize("engine", ["threads", "processes"])
    def test_float_end(self, folder, engine):
        pipeline = v2.Compose([*self.PIPELINE, _f32(), v2.Normalize([0.5], [0.25])])
        want = torch.stack(_torchvision(folder, pipeline))
        loader = D.make_loader(folder, transform=pipeline, seed=SEED, batch_size=N, shuffle=False, num_workers=0,
                               device="cpu", engine=engine)
        (got, _), = list(loader)
        assert got.shape == (N, 1, 32, 32) and torch.equal(got, want)

    def test_yuv_needs_three_channels(self, folder):
        with pytest.raises(ValueError, match="'yuv' needs 3-channel batches; the pipeline gives 1"):
            D.make_loader(folder, transform=v2.Compose(self.PIPELINE), engine="threads", color="yuv", device="cpu")

    def test_batch_convert_takes_one_value_per_batch_channel(self):
        x = torch.arange(2 * 1 * 3 * 4, dtype=torch.uint8).view(2, 1, 3, 4)
        out = D.BatchConvert("rgb", mean=0.5, std=0.25)(x)
        assert out.shape == x.shape
        torch.testing.assert_close(out, (x.float() / 255 - 0.5) / 0.25, rtol=0, atol=1e-6)
        with pytest.raises(ValueError, match=r"mean has 3 different values \(0.1, 0.2, 0.3\) for a 1-channel batch"):
            D.BatchConvert("rgb", mean=(0.1, 0.2, 0.3), std=1)(x)
        with pytest.raises(ValueError, match=r"expected a tensor \[N, 3, H, W\], got shape \(2, 1, 3, 4\)"):
            D.BatchConvert("yuv")(x)


@pytest.mark.parametrize("dtype", [{torch.Tensor: torch.float32}, {"others": torch.float32},
                                   {tv_tensors.Image: torch.float32, "others": None}], ids=repr)
@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_todtype_dict_on_both_engines(folder, dtype, engine):
    """The loader reads a dict ``ToDtype``'s output dtype as torchvision resolves it (float
    batches are not converted a second time), on either engine."""
    steps = [v2.RandomResizedCrop(32), v2.ToDtype(dtype, scale=True), v2.Normalize([0.5] * 3, [0.25] * 3)]
    if tv_tensors.Image in dtype:
        steps.insert(1, v2.ToImage())
    pipeline = v2.Compose(steps)
    want = torch.stack(_torchvision(folder, pipeline))
    assert want.dtype == torch.float32
    loader = D.make_loader(folder, transform=pipeline, seed=SEED, batch_size=N, shuffle=False, num_workers=0,
                           device="cpu", engine=engine)
    (got, _), = list(loader)
    assert torch.equal(got, want)
