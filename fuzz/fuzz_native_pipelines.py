"""Fuzz target: random torchvision v2 pipelines on the threads engine's native path.

The parameter bytes seed a random pipeline built from the supported v2 classes with random
parameters -- a geometry (RandomResizedCrop, Resize + CenterCrop, CenterCrop, RandomCrop),
then zero to four augmentations (colour, point ops, blur, sharpness, flips, grayscale, the
auto-augment policies, RandomAffine, RandomRotation, RandomApply / RandomChoice / RandomOrder around some of them),
optionally ``ToDtype(torch.float32, scale=True)`` + ``Normalize`` and ``RandomErasing`` -- and
a 64-bit sample key. Oracle: what the processes engine runs, ``OnDecoded(pipeline)`` (the
file decoded by ``fastprep.io.decode_jpeg``, then torchvision's own code) under
``keyed_default_rng(key)``, against the native path, planned both ways
(``NativePipeline.plan_batch``, the batch planner in C++, and ``NativePipeline.plan``, the
Python draws) and run by the batch op: the plans must be equal and the pixels the same bits.
A pipeline the compiler refuses must be refused with :class:`Unsupported` (never another
error); a file the reference cannot decode must fail the native run too.

Run: ``python fuzz/fuzz_native_pipelines.py CORPUS_DIR [libFuzzer flags]`` (docs/fuzzing.md).
"""

import random

import _harness as h
import torch
from _harness import Finding, fio
from torchvision.transforms import v2

from fastprep._seeding import keyed_default_rng
from fastprep.data.native import NativePipeline, PlanRef, Unsupported
from fastprep.transforms import OnDecoded

#: images larger than this are skipped (the reference decodes and augments the whole image)
MAX_PIXELS = 1 << 20


def _range(rng, lo, hi, low_bound=0.0):
    a, b = sorted((rng.uniform(lo, hi), rng.uniform(lo, hi)))
    return (max(a, low_bound), max(b, low_bound))


def _interp(rng):
    return rng.choice([v2.InterpolationMode.NEAREST, v2.InterpolationMode.BILINEAR])


def _fill(rng):
    return rng.choice([None, rng.randint(0, 255), [rng.randint(0, 255) for _ in range(3)]])


def _center(rng):
    return rng.choice([None, [rng.randint(-5, 40), rng.uniform(-5, 40)]])


def _augment(rng, depth=0):
    """One augmentation with random parameters."""
    k = rng.randint(0, 19 if depth == 0 else 16)
    p = rng.choice([0.0, 0.3, 0.5, 1.0, rng.random()])
    if k == 0:
        return v2.ColorJitter(*[rng.choice([None, rng.uniform(0, 0.9)]) for _ in range(3)],
                              hue=rng.choice([None, rng.uniform(0, 0.5)]))
    if k == 1:
        return v2.RandomGrayscale(p)
    if k == 2:
        return v2.Grayscale(3)
    if k == 3:
        return v2.RandomHorizontalFlip(p)
    if k == 4:
        return v2.RandomVerticalFlip(p)
    if k == 5:
        return v2.RandomSolarize(rng.uniform(0, 255), p)
    if k == 6:
        return v2.RandomPosterize(rng.randint(0, 8), p)
    if k == 7:
        return v2.RandomAutocontrast(p)
    if k == 8:
        return v2.RandomEqualize(p)
    if k == 9:
        return v2.RandomInvert(p)
    if k == 10:
        return v2.RandomAdjustSharpness(rng.uniform(0, 3), p)
    if k == 11:
        size = rng.choice([1, 3, 5, 9, 23])
        return v2.GaussianBlur((size, rng.choice([1, 3, size])), sigma=_range(rng, 0.1, 2.0, 0.01))
    if k == 12:
        return v2.TrivialAugmentWide(num_magnitude_bins=rng.choice([31, 11]), interpolation=_interp(rng),
                                     fill=_fill(rng))
    if k == 13:
        return v2.RandAugment(rng.randint(0, 3), rng.randint(0, 30), interpolation=_interp(rng), fill=_fill(rng))
    if k == 14:
        policy = rng.choice(list(v2.AutoAugmentPolicy))
        return v2.AutoAugment(policy, interpolation=_interp(rng), fill=_fill(rng))
    if k == 15:
        return v2.RandomAffine(_range(rng, -180, 180), translate=rng.choice([None, _range(rng, 0, 1)]),
                               scale=rng.choice([None, _range(rng, 0.3, 2.0, 0.05)]),
                               shear=rng.choice([None, rng.uniform(0, 40), _range(rng, -40, 40),
                                                 [*_range(rng, -40, 40), *_range(rng, -40, 40)]]),
                               interpolation=_interp(rng), fill=_fill(rng), center=_center(rng))
    if k == 16:
        return v2.RandomRotation(rng.choice([rng.uniform(0, 360), _range(rng, -360, 360), (90, 90), (180, 180)]),
                                 interpolation=_interp(rng), fill=_fill(rng), center=_center(rng))
    children = [_augment(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    if k == 17:
        return v2.RandomApply(children, p=p)
    if k == 18:
        return v2.RandomChoice(children, p=[rng.uniform(0.1, 1) for _ in children])
    return v2.RandomOrder(children)


def _resample(rng):
    """A resize's interpolation (each mode in one of its accepted forms) and antialias."""
    mode = rng.choice([v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC, "bicubic", 3,
                       v2.InterpolationMode.NEAREST, v2.InterpolationMode.NEAREST_EXACT, "nearest-exact"])
    return {"interpolation": mode, "antialias": rng.choice([True, False, None])}


def _pipeline(rng):
    size = rng.randint(8, 96)
    kind = rng.randint(0, 3)
    if kind == 0:
        steps = [v2.RandomResizedCrop(size, scale=_range(rng, 0.05, 1.0, 0.01), **_resample(rng))]
    elif kind == 1:
        steps = [v2.Resize(max(size + rng.randint(-8, 32), 2), **_resample(rng)), v2.CenterCrop(size)]
    elif kind == 2:
        steps = [v2.CenterCrop(size)]
    else:
        steps = [v2.RandomCrop(size, pad_if_needed=True)]
    steps += [_augment(rng) for _ in range(rng.randint(0, 4))]
    if rng.random() < 0.5:
        steps.append(v2.ToDtype(torch.float32, scale=True))
        if rng.random() < 0.7:
            steps.append(v2.Normalize([rng.uniform(0.3, 0.6)] * 3, [rng.uniform(0.1, 0.3)] * 3))
    if rng.random() < 0.4:
        steps.append(v2.RandomErasing(rng.choice([0.5, 1.0]), value=rng.choice([0, 0.5, "random"])))
    return v2.Compose(steps)


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None or info.height * info.width > MAX_PIXELS:
        return
    rng = random.Random(fdp.ConsumeBytes(16))
    transform = OnDecoded(_pipeline(rng), max_pixels=MAX_PIXELS)
    key = rng.getrandbits(64)
    try:
        native = NativePipeline.compile(transform)
    except Unsupported:
        return
    tensor = torch.frombuffer(bytearray(jpeg), dtype=torch.uint8)
    with keyed_default_rng(key):
        ref, warned = h.quiet(transform, tensor)
    if warned:
        return  # corrupt data decoded past: pixels of a damaged region are the decoder's business
    planned = native.plan_batch([tensor], [key])[0]
    per_sample, _ = h.quiet(native.plan, tensor, key=key)
    if planned[0] == "plan" and per_sample is not None:
        batch_plan = planned[1].resolve() if isinstance(planned[1], PlanRef) else planned[1]
        if batch_plan != per_sample:
            raise Finding(f"plan_batch and plan differ for {transform.pipeline} (key {key})")
    plan = planned[1] if planned[0] == "plan" else per_sample
    if plan is None:
        if ref is not None:
            raise Finding(f"the native planner refused a file the reference decodes ({transform.pipeline})")
        return
    out = torch.empty((1, native.channels, *native.size),
                      dtype=torch.float32 if native.float_output else torch.uint8)
    ((status, message),) = native.run([tensor], [plan], out)
    if ref is None:
        if status != 2:
            raise Finding(f"the reference failed but the native run gave status {status}")
        return
    if status == 2:
        raise Finding(f"the native run failed ({message}) where the reference decoded ({transform.pipeline})")
    if status == 0 and not torch.equal(out[0], ref):
        raise Finding(f"native pixels differ from torchvision's for {transform.pipeline} (key {key}, {info})")


if __name__ == "__main__":
    h.main(test_one_input)
