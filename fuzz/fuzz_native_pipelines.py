"""Fuzz target: random torchvision v2 pipelines on the threads engine's native path.

The parameter bytes seed a random pipeline built from the supported v2 classes with random parameters, each
drawn in every form torchvision accepts for it (ints and floats, scalars and (min, max) pairs,
lists and tuples, interpolation as the enum, Pillow's int or the string, fills as None, a
number, one value, three values or a dict, ``p`` as an int or a float) -- a geometry
(RandomResizedCrop [+ RandomHorizontalFlip], Resize + CenterCrop, Resize((h, w)), CenterCrop,
RandomCrop), then zero to four augmentations (colour, point ops, blur, sharpness, flips,
grayscale, the auto-augment policies, RandomAffine, RandomRotation, RandomApply / RandomChoice
/ RandomOrder around some of them), the resizes in every interpolation the engine runs
(bilinear, bicubic, nearest, nearest-exact; antialias True, False or None), optionally
``Grayscale(1)``, ``ToDtype`` (float32 with ``scale=True``, as a dtype or a dict) +
``Normalize`` and ``RandomErasing`` -- and a 64-bit sample key.

Oracle: torchvision itself, the pipeline applied to ``torchvision.io.decode_jpeg(data,
mode=RGB)`` under ``keyed_default_rng(key)``, against the native path, planned both ways
(``NativePipeline.plan_batch``, the batch planner in C++, and ``NativePipeline.plan``, the
Python draws) and run by the batch op: the plans must be equal and the pixels the same bits.
The processes engine's path (``OnDecoded(pipeline)``, fastprep's decode then the pipeline)
decides which files decode at all: a file it cannot decode must fail the native run too, and
where it warns (corrupt data) the pixels are not compared. A pipeline the compiler refuses
must be refused with :class:`Unsupported` (never another error).

Run: ``python fuzz/fuzz_native_pipelines.py CORPUS_DIR [libFuzzer flags]`` (docs/fuzzing.md).
"""

import random
import warnings

import _harness as h
import torch
import torchvision.io as tvio
from _harness import Finding, fio
from torchvision import tv_tensors
from torchvision.transforms import v2

from fastprep._seeding import keyed_default_rng
from fastprep.data.native import NativePipeline, PlanRef, Unsupported
from fastprep.transforms import OnDecoded

#: images larger than this are skipped (the reference decodes and augments the whole image)
MAX_PIXELS = 1 << 20

IM = v2.InterpolationMode


_seq, _range = h.seq, h.sorted_pair


def _p(rng):
    return rng.choice([0, 1, 0.0, 0.3, 0.5, 1.0, rng.random()])


def _size(rng, n):
    """A size ``n`` as an int, ``[n]``, or a pair near it."""
    return rng.choice([n, [n], _seq(rng, (n, max(1, n + rng.randint(-8, 8))))])


def _interp(rng, bilinear=True):
    """An interpolation as the enum, Pillow's int constant or the string."""
    forms = [IM.NEAREST, 0, "nearest"] + ([IM.BILINEAR, 2, "bilinear"] if bilinear else [])
    return rng.choice(forms)


def _fill(rng):
    v = rng.randint(0, 255)
    return rng.choice([None, v, float(v), [v], _seq(rng, [rng.randint(0, 255) for _ in range(3)]),
                       {tv_tensors.Image: v, torch.Tensor: v}, {"others": _seq(rng, (v, 255 - v, 7))}])


def _center(rng):
    return rng.choice([None, [rng.randint(-5, 40), rng.uniform(-5, 40)]])


def _jitter(rng, center, spread, low=0.0):
    """A ColorJitter factor: None, 0, a scalar, or a (min, max) pair."""
    kind = rng.randint(0, 3)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([0, rng.uniform(0, spread), int(spread > 0.5)])
    return _range(rng, max(low, center - spread), center + spread, low)


def _color_jitter(rng):
    hue = rng.choice([None, 0, rng.uniform(0, 0.5), _range(rng, -0.5, 0.5, -0.5)])
    return v2.ColorJitter(_jitter(rng, 1, 0.9), _jitter(rng, 1, 0.9), _jitter(rng, 1, 0.9), hue=hue)


def _blur(rng):
    k = rng.choice([1, 3, 5, 9, 23])
    kernel = rng.choice([k, [k], _seq(rng, (k, rng.choice([1, 3, k])))])
    s = rng.uniform(0.1, 2.0)
    sigma = rng.choice([s, rng.randint(1, 2), _range(rng, 0.1, 2.0, 0.01), _seq(rng, (s, s))])
    return v2.GaussianBlur(kernel, sigma=sigma)


def _auto(rng, k):
    if k == 0:
        return v2.TrivialAugmentWide(num_magnitude_bins=rng.choice([31, 11]), interpolation=_interp(rng),
                                     fill=_fill(rng))
    if k == 1:
        return v2.RandAugment(rng.randint(0, 3), rng.randint(0, 30), interpolation=_interp(rng), fill=_fill(rng))
    policy = rng.choice(list(v2.AutoAugmentPolicy))
    return v2.AutoAugment(policy, interpolation=_interp(rng), fill=_fill(rng))


def _point(rng, k, p):
    """The one-kernel point ops and flips."""
    if k == 0:
        return v2.RandomGrayscale(p)
    if k == 1:
        return v2.Grayscale(3)
    if k == 2:
        return v2.RandomHorizontalFlip(p)
    if k == 3:
        return v2.RandomVerticalFlip(p)
    if k == 4:
        return v2.RandomSolarize(rng.choice([rng.uniform(0, 255), rng.randint(0, 255)]), p)
    if k == 5:
        return v2.RandomPosterize(rng.randint(0, 8), p)
    if k == 6:
        return v2.RandomAutocontrast(p)
    if k == 7:
        return v2.RandomEqualize(p)
    if k == 8:
        return v2.RandomInvert(p)
    return v2.RandomAdjustSharpness(rng.choice([rng.uniform(0, 3), rng.randint(0, 3)]), p)


def _geometric(rng, k):
    """RandomAffine or RandomRotation, every parameter in one of its forms."""
    if k == 0:
        return v2.RandomAffine(rng.choice([rng.uniform(0, 180), _range(rng, -180, 180)]),
                               translate=rng.choice([None, _range(rng, 0, 1)]),
                               scale=rng.choice([None, _range(rng, 0.3, 2.0, 0.05)]),
                               shear=rng.choice([None, rng.uniform(0, 40), _range(rng, -40, 40),
                                                 _seq(rng, [*_range(rng, -40, 40), *_range(rng, -40, 40)])]),
                               interpolation=_interp(rng), fill=_fill(rng), center=_center(rng))
    return v2.RandomRotation(rng.choice([rng.uniform(0, 360), _range(rng, -360, 360), (90, 90), (180, 180)]),
                             interpolation=_interp(rng), fill=_fill(rng), center=_center(rng))


def _augment(rng, depth=0):
    """One augmentation with random parameters."""
    k = rng.randint(0, 18 if depth == 0 else 15)
    if k == 0:
        return _color_jitter(rng)
    if k <= 9:
        return _point(rng, k - 1, _p(rng))
    if k == 10:
        return _blur(rng)
    if k <= 13:
        return _auto(rng, k - 11)
    if k <= 15:
        return _geometric(rng, k - 14)
    children = [_augment(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    if k == 16:
        container = rng.choice([list, torch.nn.ModuleList])
        return v2.RandomApply(container(children), p=_p(rng))
    if k == 17:
        return v2.RandomChoice(children, p=rng.choice([None, [rng.uniform(0.1, 1) for _ in children]]))
    return v2.RandomOrder(children)


def _resample(rng):
    """A resize's interpolation (each mode in one of its accepted forms) and antialias."""
    mode = rng.choice([IM.BILINEAR, 2, "bilinear", IM.BICUBIC, "bicubic", 3, IM.NEAREST, "nearest",
                       IM.NEAREST_EXACT, "nearest-exact"])
    return {"interpolation": mode, "antialias": rng.choice([True, False, None])}


def _geometry(rng):
    size = rng.randint(8, 96)
    kind = rng.randint(0, 4)
    if kind == 0:
        steps = [v2.RandomResizedCrop(_size(rng, size), scale=_range(rng, 0.05, 1.0, 0.01),
                                      ratio=rng.choice([(3 / 4, 4 / 3), _range(rng, 0.3, 3.0, 0.1)]),
                                      **_resample(rng))]
        if rng.random() < 0.3:
            steps.append(v2.RandomHorizontalFlip(_p(rng)))
        return steps
    if kind == 1:
        return [v2.Resize(rng.choice([size + rng.randint(0, 32), [size + rng.randint(0, 32)]]), **_resample(rng)),
                v2.CenterCrop(_size(rng, size))]
    if kind == 2:  # torch's resize asserts on 1-pixel 3-channel outputs: at least 2 (the reference's bug)
        return [v2.Resize(_seq(rng, (size, max(2, size + rng.randint(-8, 8)))), **_resample(rng))]
    if kind == 3:
        return [v2.CenterCrop(_size(rng, size))]
    return [v2.RandomCrop(_size(rng, size), pad_if_needed=True)]


def _to_float(rng):
    """``ToDtype(torch.float32, scale=True)`` as a dtype or as a dict (with ToImage before it
    when the dict is keyed by tv_tensors.Image)."""
    kind = rng.randint(0, 3)
    if kind == 0:
        return [v2.ToDtype(torch.float32, scale=True)]
    if kind == 1:
        return [v2.ToDtype({torch.Tensor: torch.float32, tv_tensors.Mask: torch.int64}, scale=True)]
    if kind == 2:
        return [v2.ToDtype({"others": torch.float32}, scale=True)]
    return [v2.ToImage(), v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True)]


def _erasing(rng, channels):
    value = rng.choice([0, rng.randint(0, 255), 0.5, "random", [rng.randint(0, 255)],
                        _seq(rng, [rng.randint(0, 255) for _ in range(channels)])])
    return v2.RandomErasing(rng.choice([0.5, 1, 1.0]), scale=_range(rng, 0.02, 0.4, 0.01),
                            ratio=rng.choice([(0.3, 3.3), _range(rng, 0.3, 3.3, 0.1)]), value=value)


def _pipeline(rng):
    steps = _geometry(rng)
    steps += [_augment(rng) for _ in range(rng.randint(0, 4))]
    channels = 3
    if rng.random() < 0.15:
        steps.append(v2.Grayscale(1))
        channels = 1
    if rng.random() < 0.5:
        steps += _to_float(rng)
        if rng.random() < 0.7:
            mean, std = rng.uniform(0.3, 0.6), rng.uniform(0.1, 0.3)
            one = channels == 1 or rng.random() < 0.3
            steps.append(v2.Normalize(_seq(rng, [mean] * (1 if one else 3)), _seq(rng, [std] * (1 if one else 3))))
    if rng.random() < 0.4:
        steps.append(_erasing(rng, channels))
    return v2.Compose(steps)


def _torchvision(pipeline, tensor, key):
    """torchvision's own result: its decode (RGB), then the pipeline under the sample's key.
    ``None`` where its decoder raises or warns (corrupt data), or returns other pixels than
    fastprep's full decode: torchvision's wheel bundles its own libjpeg-turbo, whose block
    smoothing of incomplete progressive files differs from the system's by a few levels
    (fuzz_decode_jpeg.py's question, not this target's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", "The .* decoders", DeprecationWarning)  # torchvision 0.29's notice
        try:
            image = tvio.decode_jpeg(tensor, mode=tvio.ImageReadMode.RGB)
            ours = fio.decode_jpeg(tensor, max_pixels=MAX_PIXELS)
        except (RuntimeError, UserWarning, fio.DecodeError):
            return None
    if not torch.equal(image, ours):
        return None
    with keyed_default_rng(key):
        return pipeline(image)


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
    try:
        with keyed_default_rng(key):
            ref, warned = h.quiet(transform, tensor)
    except (RuntimeError, ValueError):  # torchvision raises on this sample (an empty crop window): so must we
        ref, warned = None, False
    if warned:
        return  # corrupt data decoded past: pixels of a damaged region are the decoder's business
    planned = native.plan_batch([tensor], [key])[0]
    try:
        per_sample, _ = h.quiet(native.plan, tensor, key=key)
    except (ValueError, RuntimeError) as e:  # the sample's own error (an empty crop window, ...)
        if ref is not None or planned[0] == "plan":
            raise Finding(f"the per-sample plan raised {e!r} where the reference or the batch planner did not "
                          f"({transform.pipeline})") from e
        return
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
    if status != 0:
        return  # corrupt data below the window (docs/augment.md): the reference warned, the window is intact
    want = _torchvision(transform.pipeline, tensor, key)
    if want is not None and not torch.equal(ref, want):
        raise Finding(f"the processes engine's result differs from torchvision's for {transform.pipeline} (key {key})")
    if not torch.equal(out[0], want if want is not None else ref):
        raise Finding(f"native pixels differ from torchvision's for {transform.pipeline} (key {key}, {info})")


if __name__ == "__main__":
    h.main(test_one_input)
