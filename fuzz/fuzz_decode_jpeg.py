"""Fuzz target: ``fastprep.io.decode_jpeg`` in every mode, strict on and off.

The parameters pick the mode, ``strict``, ``max_pixels`` (the target's limit, or a small
one to exercise the refusal) and the buffer type. Checks: the output is a uint8
``[C, H, W]`` view of contiguous ``[H, W, C]`` memory (torchvision's layout) with
the header's size and the mode's channel count; with ``strict=True`` no
DecodeWarning is emitted (strict turns warnings into DecodeError); a strict decode that
succeeds equals the non-strict decode.

Run: ``python fuzz/fuzz_decode_jpeg.py CORPUS_DIR [libFuzzer flags]`` (see docs/fuzzing.md).
"""

import numpy as np
import torch

import _harness as h
from _harness import Finding, fio


def _buffer(kind: int, jpeg: bytes):
    if kind == 0:
        return jpeg
    if kind == 1:
        return bytearray(jpeg)
    if kind == 2:
        return np.frombuffer(jpeg, dtype=np.uint8)  # read-only, read in place (no warning may come)
    if kind == 3:
        return memoryview(jpeg)
    return torch.frombuffer(bytearray(jpeg), dtype=torch.uint8) if jpeg else torch.empty(0, dtype=torch.uint8)


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    mode = fdp.PickValueInList(h.MODES)
    strict = fdp.ConsumeBool()
    max_pixels = h.MAX_PIXELS if fdp.ConsumeBool() else fdp.ConsumeIntInRange(1, 4096)
    buf = _buffer(fdp.ConsumeIntInRange(0, 4), jpeg)
    out, warned = h.quiet(fio.decode_jpeg, buf, mode, max_pixels=max_pixels, strict=strict)
    if strict and warned:
        raise Finding("strict=True emitted a DecodeWarning instead of raising")
    if out is None:
        return
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None:
        raise Finding("decode_jpeg succeeded but jpeg_info raised")
    expected = (h.channels(mode, info), info.height, info.width)
    interleaved = out.permute(1, 2, 0).is_contiguous()
    if out.dtype != torch.uint8 or tuple(out.shape) != expected or not interleaved:
        raise Finding(f"output {out.dtype} {tuple(out.shape)} (strides {out.stride()}, HWC memory={interleaved}), "
                      f"expected uint8 {expected} for {info} in mode {mode!r}")
    if info.height * info.width > max_pixels:
        raise Finding(f"{info.height}x{info.width} decoded although max_pixels={max_pixels}")
    if strict:
        loose, _ = h.quiet(fio.decode_jpeg, jpeg, mode, max_pixels=max_pixels)
        if loose is None or not torch.equal(loose, out):
            raise Finding("strict decode succeeded but the non-strict decode differs")


if __name__ == "__main__":
    h.main(test_one_input)
