"""Fuzz target: ``NativePipeline.plan_batch`` (torch.ops.fastprep.plan_batch), the threads
engine's native routing, header reading and keyed draws.

Oracle: the per-sample Python path it replaces, on the same bytes and key -- the dataset's
routing (``JpegDataset.fallback_reason``: signature, EXIF orientation, ``max_pixels``) and
``NativePipeline.plan``. A sample the native call plans must get exactly the Python plan;
one it reports as an error must be one the Python path refuses with the same message. One
it leaves to Python is then run by that path, so any outcome there is right; but a file with
a JPEG's signature must then be one the Python path also routes elsewhere (EXIF-rotated),
refuses for another reason than a bad header (a crop larger than the image), or reads with a
header warning -- else the engine would silently lose its fast path.

Run: ``python fuzz/fuzz_plan_batch.py CORPUS_DIR [libFuzzer flags]`` (see docs/fuzzing.md).
"""

import warnings

import _harness as h
import torch
from _harness import Finding, fio

from fastprep.data import JpegDataset
from fastprep.data.native import NativePipeline, PlanRef
from fastprep.transforms import DecodeCenterCrop, DecodeRandomCrop, DecodeRandomResizedCrop, RandomMask
from torchvision.transforms import v2


def _transform(fdp):
    size = (fdp.ConsumeIntInRange(1, 300), fdp.ConsumeIntInRange(1, 300))
    kind = fdp.ConsumeIntInRange(0, 3)
    if kind == 0:
        lo = fdp.ConsumeIntInRange(1, 100) / 100
        t = DecodeRandomResizedCrop(size, scale=(lo, max(lo, fdp.ConsumeIntInRange(1, 100) / 100)),
                                    flip_p=fdp.ConsumeIntInRange(0, 2) / 2, dct_scaling=fdp.ConsumeBool())
    elif kind == 1:
        t = DecodeRandomCrop(size, pad_if_needed=fdp.ConsumeBool())
    elif kind == 2:
        t = DecodeCenterCrop(size)
    else:
        t = v2.Compose([DecodeRandomCrop(size, pad_if_needed=True), RandomMask(0.25)])
    return t


def _python_route(dataset, pipeline, data, key):
    """``(route, value)`` of the Python path: ("plan", row), ("error", message) or
    ("python", why)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", fio.DecodeWarning)
        try:
            if dataset.fallback_reason(data) is not None:
                return "python", "fallback"
            plan = pipeline.plan(data, key=key)
        except fio.DecodeWarning:
            return "python", "header warning"
        except fio.DecodeError as e:
            return "error", str(e)
        except ValueError as e:  # a crop larger than the image: the transform's own error
            return "python", str(e)
    return "plan", plan.key()


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    pipeline = NativePipeline.from_transform(_transform(fdp))
    key = fdp.ConsumeIntInRange(0, 2 ** 64 - 1)
    max_pixels = fdp.PickValueInList([0, 64 * 64, h.MAX_PIXELS])
    dataset = JpegDataset([], max_pixels=max_pixels or None, apply_exif_orientation=True)
    tensor = torch.frombuffer(bytearray(jpeg), dtype=torch.uint8) if jpeg else torch.empty(0, dtype=torch.uint8)
    ((route, value),) = pipeline.plan_batch([tensor], [key], max_pixels=max_pixels, exif=True)
    want = _python_route(dataset, pipeline, tensor, key)
    if route == "plan":
        got = (value.resolve() if isinstance(value, PlanRef) else value).key()
        if want != ("plan", got):
            raise Finding(f"native plan {got} but the Python path gives {want}")
    elif route == "error":  # the same refusal, with the same message
        if want != ("error", value):
            raise Finding(f"native error {value!r} but the Python path gives {want}")
    elif want[0] != "python" and jpeg[:3] == b"\xff\xd8\xff":
        # Left to Python, the engine runs the Python path, so its result is right whatever it
        # is; but a file with a JPEG's signature that Python plans or refuses as it is must
        # be planned or refused natively (else the engine silently loses its fast path).
        raise Finding(f"left to Python, but the Python path gives {want}")


if __name__ == "__main__":
    h.main(test_one_input)
