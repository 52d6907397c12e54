"""Fuzz target: random v1 and v2 pipelines on PIL images (what ``ImageFolder`` gives its
transform) on the threads engine's PIL-exact native path.

The parameter bytes seed a random pipeline, v1 (``torchvision.transforms``) or v2, built from
the op tables below -- a geometry (RandomResizedCrop [+ a flip], Resize + CenterCrop,
Resize((h, w)), CenterCrop) with the interpolation in every form torchvision
takes (the enum, Pillow's int constant or ``Image.Resampling``, the string; bilinear,
bicubic, lanczos, nearest, box, hamming), zero to two ops on the PIL image (flips, colour
and point ops, affine, rotation, the auto-augment policies, blur; mostly none), then
the conversion to a tensor (``ToTensor``, ``PILToTensor`` [+ ``ConvertImageDtype`` /
``ToDtype``], ``ToImage`` + ``ToDtype``) and optionally ``Normalize`` -- plus the dataloader
seed and the sample's index.

Oracle: the pipeline run literally, as ``torch.utils.data.DataLoader`` over ``ImageFolder``
runs it: ``Image.open(f).convert("RGB")`` then the pipeline, under
``fastprep.data.sample_rng(seed, 0, index)``. The native path is ``OnPIL(pipeline)``
compiled by ``NativePipeline`` (what the threads engine of ``fastprep.data.DataLoader``
runs), planned both ways (``plan_batch``, the batch planner, and ``plan``, the Python draws)
under the same sample key and run by the batch op: the plans must be equal and the output the
same bits. A pipeline the compiler refuses must be refused with :class:`Unsupported` (never
another error); a file Pillow cannot open must fail the native run too.

Extending: an op that runs natively on PIL images goes into :data:`PIL_OPS` (or
:data:`GEOMETRY` / :data:`TO_TENSOR`) as one row, ``name -> builder(rng, ns)``, ``ns`` being
the torchvision namespace (v1 or v2) the pipeline is written in; the builder returns the
steps (a list) or ``None`` where that namespace has no such op.

Run: ``python fuzz/fuzz_pil_pipelines.py CORPUS_DIR [libFuzzer flags]`` (docs/fuzzing.md).
"""

import random

import _harness as h
import numpy as np
import PIL.Image
import torch
import torchvision.transforms as T1
from _harness import Finding, fio
from torchvision.transforms import v2

from fastprep._seeding import sample_key, sample_rng
from fastprep.data.native import NativePipeline, PlanRef, Unsupported
from fastprep.transforms import OnPIL
from fastprep.transforms._pil import open_rgb

#: images larger than this are skipped (the reference decodes and resizes the whole image)
MAX_PIXELS = 1 << 20

IM = T1.InterpolationMode
R = PIL.Image.Resampling

#: every interpolation in the forms torchvision accepts on PIL images: the enum, Pillow's int
#: constant or its enum, the string (v2 only: v1 takes a string but fails on it when called)
INTERPOLATIONS = {
    "bilinear": [IM.BILINEAR, 2, R.BILINEAR, "bilinear"],
    "bicubic": [IM.BICUBIC, 3, R.BICUBIC, "bicubic"],
    "lanczos": [IM.LANCZOS, 1, R.LANCZOS, "lanczos"],
    "nearest": [IM.NEAREST, 0, R.NEAREST, "nearest"],
    "box": [IM.BOX, 4, R.BOX, "box"],
    "hamming": [IM.HAMMING, 5, R.HAMMING, "hamming"],
}


_seq, _range = h.seq, h.sorted_pair


def _p(rng):
    return rng.choice([0, 1, 0.0, 0.5, 1.0, rng.random()])


def _size(rng, n):
    """A size ``n`` as an int, ``[n]``, or a pair near it."""
    return rng.choice([n, [n], _seq(rng, (n, max(1, n + rng.randint(-8, 8))))])


def _interp(rng, ns):
    """A default (no argument) or an interpolation in one of its forms."""
    if rng.random() < 0.3:
        return {}
    forms = INTERPOLATIONS[rng.choice(sorted(INTERPOLATIONS))]
    return {"interpolation": rng.choice(forms if ns is v2 else [f for f in forms if not isinstance(f, str)])}


def _resample(rng, ns):
    kwargs = _interp(rng, ns)
    if ns is v2 and rng.random() < 0.5:
        kwargs["antialias"] = True  # PIL images are always antialiased; False/None warn on them
    return kwargs


def _rrc(rng, ns, size):
    return [ns.RandomResizedCrop(_size(rng, size), scale=_range(rng, 0.05, 1.0, 0.01),
                                 ratio=rng.choice([(3 / 4, 4 / 3), _range(rng, 0.3, 3.0, 0.1)]),
                                 **_resample(rng, ns))]


#: The first steps: name -> builder(rng, ns, size).
GEOMETRY = {
    "RandomResizedCrop": _rrc,
    "Resize+CenterCrop": lambda rng, ns, size: [
        ns.Resize(rng.choice([size + rng.randint(0, 32), [size + rng.randint(0, 32)]]), **_resample(rng, ns)),
        ns.CenterCrop(_size(rng, size))],
    "Resize(h, w)": lambda rng, ns, size: [
        ns.Resize(_seq(rng, (size, max(1, size + rng.randint(-8, 8)))), **_resample(rng, ns))],
    "CenterCrop": lambda rng, ns, size: [ns.CenterCrop(_size(rng, size))],
}

def _jitter(rng, ns):
    """ColorJitter with each factor absent, a number or a (min, max) pair."""
    def factor(lo, hi):
        return rng.choice([0, rng.uniform(lo, hi), _range(rng, lo, hi)])
    return ns.ColorJitter(brightness=factor(0.0, 0.8), contrast=factor(0.0, 0.8), saturation=factor(0.0, 0.8),
                          hue=rng.choice([0, rng.uniform(0.0, 0.5), _range(rng, -0.5, 0.5, -0.5)]))


def _fill(rng):
    return rng.choice([None, 0, rng.randint(0, 255), [rng.randint(0, 255) for _ in range(3)]])


def _affine_interp(rng):
    return rng.choice([IM.NEAREST, IM.BILINEAR, IM.BICUBIC])


def _affine(rng, ns):
    return [ns.RandomAffine(rng.uniform(0, 45), translate=rng.choice([None, (rng.random() * 0.3, rng.random() * 0.3)]),
                            scale=rng.choice([None, _range(rng, 0.7, 1.3, 0.1)]),
                            shear=rng.choice([None, rng.uniform(0, 20), _range(rng, -20, 20, -20)]),
                            interpolation=_affine_interp(rng), fill=_fill(rng))]


def _policy(rng, ns):
    kind = rng.choice(["ta", "ra", "aa"])
    interpolation = rng.choice([IM.NEAREST, IM.BILINEAR])
    if kind == "ta":
        return [ns.TrivialAugmentWide(interpolation=interpolation, fill=_fill(rng))]
    if kind == "ra":
        return [ns.RandAugment(rng.randint(1, 3), rng.randint(0, 30), interpolation=interpolation, fill=_fill(rng))]
    policy = rng.choice(list(T1.AutoAugmentPolicy))
    return [ns.AutoAugment(policy, interpolation=interpolation, fill=_fill(rng))]


#: Ops on the PIL image between the geometry and the conversion: name -> builder(rng, ns).
PIL_OPS = {
    "RandomHorizontalFlip": lambda rng, ns: [ns.RandomHorizontalFlip(_p(rng))],
    "RandomVerticalFlip": lambda rng, ns: [ns.RandomVerticalFlip(_p(rng))],
    "ColorJitter": lambda rng, ns: [_jitter(rng, ns)],
    "RandomApply(ColorJitter)": lambda rng, ns: [ns.RandomApply([_jitter(rng, ns)], p=_p(rng))],
    "RandomGrayscale": lambda rng, ns: [ns.RandomGrayscale(_p(rng))],
    "Grayscale(3)": lambda rng, ns: [ns.Grayscale(3)],
    "RandomSolarize": lambda rng, ns: [ns.RandomSolarize(rng.randint(0, 255), _p(rng))],
    "RandomPosterize": lambda rng, ns: [ns.RandomPosterize(rng.randint(1, 8), _p(rng))],
    "RandomEqualize": lambda rng, ns: [ns.RandomEqualize(_p(rng))],
    "RandomAutocontrast": lambda rng, ns: [ns.RandomAutocontrast(_p(rng))],
    "RandomInvert": lambda rng, ns: [ns.RandomInvert(_p(rng))],
    "RandomAdjustSharpness": lambda rng, ns: [ns.RandomAdjustSharpness(rng.uniform(0, 3), _p(rng))],
    "RandomAffine": _affine,
    "RandomRotation": lambda rng, ns: [ns.RandomRotation(rng.uniform(0, 180), interpolation=_affine_interp(rng),
                                                         fill=_fill(rng))],
    "policy": _policy,
    "GaussianBlur": lambda rng, ns: [ns.GaussianBlur(rng.choice([1, 3, 5]), sigma=_range(rng, 0.1, 2.0, 0.1))],
}


def _float(rng, ns):
    """A conversion of a uint8 tensor to float32 in [0, 1]."""
    if ns is v2 and rng.random() < 0.5:
        return v2.ToDtype(rng.choice([torch.float32, {"others": torch.float32}]), scale=True)
    return ns.ConvertImageDtype(torch.float32)


#: The conversion to a tensor: name -> builder(rng, ns) -> (steps, float output) or None.
TO_TENSOR = {
    "ToTensor": lambda rng, ns: ([T1.ToTensor()], True),
    "PILToTensor": lambda rng, ns: ([ns.PILToTensor()], False),
    "PILToTensor+float": lambda rng, ns: ([ns.PILToTensor(), _float(rng, ns)], True),
    "ToImage+ToDtype": lambda rng, ns: ([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)], True)
    if ns is v2 else None,
}


def _pipeline(rng):
    """A random pipeline on PIL images, v1 or v2, and its name's parts."""
    ns = rng.choice([T1, v2])
    steps = GEOMETRY[rng.choice(sorted(GEOMETRY))](rng, ns, rng.randint(1, 80))
    if steps and type(steps[0]).__name__ == "RandomResizedCrop" and rng.random() < 0.3:
        steps.append(ns.RandomHorizontalFlip(_p(rng)))
    for _ in range(rng.choice([0, 0, 0, 1, 2])):  # mostly none: most pipelines compile, the rest are refused
        steps += PIL_OPS[rng.choice(sorted(PIL_OPS))](rng, ns)
    made = None
    while made is None:  # a float output mostly: the native path's (a uint8 one is refused)
        made = TO_TENSOR[rng.choice(sorted(TO_TENSOR) + ["ToTensor", "PILToTensor+float"])](rng, ns)
    tail, is_float = made
    steps += tail
    if is_float and rng.random() < 0.7:
        mean, std = rng.uniform(0.3, 0.6), rng.uniform(0.1, 0.3)
        one = rng.random() < 0.3
        steps.append(ns.Normalize(_seq(rng, [mean] * (1 if one else 3)), _seq(rng, [std] * (1 if one else 3))))
    return ns.Compose(steps)


def literal(pipeline, jpeg: bytes, seed: int, index: int):
    """The pipeline as torch's DataLoader over ImageFolder runs it: ``None`` where Pillow
    cannot open the file or the pipeline raises on this sample (an empty crop, ...)."""
    try:
        image = open_rgb(jpeg, MAX_PIXELS)
    except (OSError, fio.DecodeError, SyntaxError, ValueError):
        return None
    with sample_rng(seed, 0, index):
        try:
            return pipeline(image)
        except (RuntimeError, ValueError):
            return None


def _native_output(native, tensor, key, pipeline):
    """``(status, message, output)`` of the native run of the batch planner's plan, checked
    against the per-sample planner's; ``None`` where the batch planner routes the sample to
    Python (the engine then runs the pipeline as written: nothing native to compare) and
    ``"error"`` where it plans the sample's own error."""
    route, planned = native.plan_batch([tensor], [key])[0]
    if route == "python":
        return None
    if route == "error":
        return "error"
    try:
        per_sample, _ = h.quiet(native.plan, tensor, key=key)
    except (ValueError, RuntimeError, OSError) as e:
        raise Finding(f"the per-sample plan raised {e!r} where the batch planner planned ({pipeline})") from e
    plan = planned.resolve() if isinstance(planned, PlanRef) else planned
    if plan != per_sample:
        raise Finding(f"plan_batch and plan differ for {pipeline} (key {key})")
    out = torch.empty((1, native.channels, *native.size), dtype=torch.float32 if native.float_output else torch.uint8)
    ((status, message),) = native.run([tensor], [planned], out)
    return status, message, out[0]


def _same_decode(jpeg: bytes, tensor: torch.Tensor) -> bool:
    """Whether fastprep's full decode of the file is Pillow's ``convert("RGB")``. Not on every
    legal file: the system's libjpeg-turbo and the one Pillow's wheel bundles smooth the
    blocks of a progressive file whose scans stop early differently (by 1 level), which the
    probe of ``fastprep.transforms._pil`` (complete files) does not see. A mismatch there is the
    decode's, not the pipeline's, and is not reported by this target."""
    decoded, warned = h.quiet(fio.decode_jpeg, tensor, "RGB", max_pixels=MAX_PIXELS)
    if decoded is None or warned:
        return False
    return torch.equal(decoded.permute(1, 2, 0), torch.from_numpy(np.array(open_rgb(jpeg, MAX_PIXELS))))


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None or info.height * info.width > MAX_PIXELS:
        return
    rng = random.Random(fdp.ConsumeBytes(16))
    pipeline = _pipeline(rng)
    seed, index = rng.getrandbits(64), rng.randint(0, 1 << 20)
    try:
        native = NativePipeline.compile(OnPIL(pipeline, max_pixels=MAX_PIXELS))
    except Unsupported:
        return
    want = literal(pipeline, jpeg, seed, index)
    tensor = torch.frombuffer(bytearray(jpeg), dtype=torch.uint8)
    got = _native_output(native, tensor, sample_key(seed, 0, index), pipeline)
    if got is None:
        return
    if got == "error":
        if want is not None:
            raise Finding(f"the native planner raises on a sample the literal run gives ({pipeline})")
        return
    status, message, out = got
    if status != 0:  # a decode error or a libjpeg warning (corrupt data): Pillow decodes past some
        if status == 2 and want is not None and h.quiet(fio.decode_jpeg, tensor, max_pixels=MAX_PIXELS)[0] is not None:
            raise Finding(f"the native run failed ({message}) where Pillow and the full decode succeed ({pipeline})")
        return
    if want is None:
        return  # Pillow refuses a file libjpeg decodes with no warning (its own stricter checks)
    if out.dtype != want.dtype or out.shape != want.shape or not torch.equal(out, want):
        if not _same_decode(jpeg, tensor):
            return  # fastprep's decode is not Pillow's on this file (see _same_decode): not this target's question
        raise Finding(f"native output differs from the literal run of {pipeline} on {info} "
                      f"(seed {seed}, index {index})")


if __name__ == "__main__":
    h.main(test_one_input)
