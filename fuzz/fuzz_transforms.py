"""Fuzz target: the decode transforms ``DecodeRandomCrop`` and ``DecodeCenterCrop``.

The parameters pick the transform, crop size, padding, ``pad_if_needed``, fill, mode and
the torch seed. Checks: the output is uint8 ``[C, *size]``; ``ValueError`` only where the
crop does not fit and no padding was asked for; and, when no DecodeWarning was emitted,
the output equals torchvision's ``RandomCrop``/``CenterCrop`` applied to the full decode
under the same seed (the transforms' documented contract).

Run: ``python fuzz/fuzz_transforms.py CORPUS_DIR [libFuzzer flags]`` (see docs/fuzzing.md).
"""

import torch
from torchvision.transforms import v2

import _harness as h
from _harness import Finding, fio
from fastprep.transforms import DecodeCenterCrop, DecodeRandomCrop


def _padding(fdp):
    kind = fdp.ConsumeIntInRange(0, 3)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeIntInRange(0, 9)
    if kind == 2:
        return [fdp.ConsumeIntInRange(0, 9) for _ in range(2)]
    return [fdp.ConsumeIntInRange(0, 9) for _ in range(4)]


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None or info.height * info.width > h.MAX_PIXELS:
        return
    mode = fdp.PickValueInList(h.MODES)
    size = (fdp.ConsumeIntInRange(1, 80), fdp.ConsumeIntInRange(1, 80))
    seed = fdp.ConsumeIntInRange(0, 2**31)
    if fdp.ConsumeBool():
        padding, pad_if_needed, fill = _padding(fdp), fdp.ConsumeBool(), fdp.ConsumeIntInRange(0, 255)
        t = DecodeRandomCrop(size, padding=padding, pad_if_needed=pad_if_needed, fill=fill, mode=mode)
        fill_ref = (fill, 128, 128) if mode == fio.ImageReadMode.YCbCr else fill
        ref_t = v2.RandomCrop(size, padding=padding, pad_if_needed=pad_if_needed, fill=fill_ref)
    else:
        t = DecodeCenterCrop(size, mode=mode)
        ref_t = v2.CenterCrop(size)
    torch.manual_seed(seed)
    try:
        out, warned = h.quiet(t, jpeg)
    except ValueError as e:
        if "larger than input image size" not in str(e) or isinstance(t, DecodeCenterCrop):
            raise
        return
    if out is None:
        return
    if out.dtype != torch.uint8 or tuple(out.shape[1:]) != size:
        raise Finding(f"{t} returned {out.dtype} {tuple(out.shape)}")
    if warned:
        return
    full, warned = h.quiet(fio.decode_jpeg, jpeg, mode, max_pixels=h.MAX_PIXELS)
    if full is None or warned:
        return  # the window decoded cleanly but other parts of the file are corrupt
    torch.manual_seed(seed)
    ref = ref_t(full)
    if isinstance(t, DecodeCenterCrop) and mode == fio.ImageReadMode.YCbCr:
        ref = _recolour_padding(ref, full, size)
    if not torch.equal(out, ref):
        raise Finding(f"{t} differs from torchvision on the full decode (seed {seed}, {info})")


def _recolour_padding(ref, full, size):
    """torchvision's CenterCrop pads with zeros; the decode transform pads YCbCr output
    with (0, 128, 128) so padding is black in every mode. Apply that to the reference."""
    th, tw = size
    h_, w_ = full.shape[1:]
    if th <= h_ and tw <= w_:
        return ref
    mask = torch.zeros((th, tw), dtype=torch.bool)
    top = (th - h_) // 2 if th > h_ else 0
    left = (tw - w_) // 2 if tw > w_ else 0
    inner_h, inner_w = min(th, h_), min(tw, w_)
    mask[:] = True
    mask[top:top + inner_h, left:left + inner_w] = False
    ref = ref.clone()
    ref[1:, mask] = 128
    return ref


if __name__ == "__main__":
    h.main(test_one_input)
