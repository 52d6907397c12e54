"""Fuzz target: the recipe transforms on packed files.

``DecodeRandomResizedCrop(224, flip_p=0.5)`` (training) and ``DecodeResizeCenterCrop(256,
224)`` (evaluation), with the default DCT scaling, on the input file and on its packed
copy (``transcode_jpeg`` at an interval the parameters pick: 1..8 MCUs or automatic). The
parameters also pick the mode and the torch seed. Packed files take the restart-interval
ROI path (at reduced DCT scales), the originals the ordinary one.

Oracle, when the input transcodes (a refusal ends the check): under the same torch seed
each transform gives exactly the same output on the packed file as on the original (the
packed file has the same pixels, and the transforms draw their windows from the header's
size alone), or both raise (a mode the colour space does not allow). One raising and the
other not, or either warning, is a finding too: the transcoder read the original without a
warning, and the packed copy is clean. Both run with ``max_scans=0`` (the transcoder has no
scan limit).

Run: ``python fuzz/fuzz_pack_recipes.py CORPUS_DIR [libFuzzer flags]`` or
``--blind SECONDS CORPUS...`` (see docs/fuzzing.md).
"""

import torch

import _harness as h
from _harness import Finding, fio
from fastprep.transforms import DecodeRandomResizedCrop, DecodeResizeCenterCrop


def recipes(mode):
    kw = {"mode": mode, "max_pixels": h.MAX_PIXELS, "max_scans": 0}
    return (DecodeRandomResizedCrop(224, flip_p=0.5, **kw), DecodeResizeCenterCrop(256, 224, **kw))


RECIPES = {mode: recipes(mode) for mode in h.MODES}


def check(jpeg: bytes, mode, interval, seed: int, transcode=fio.transcode_jpeg) -> None:
    """The oracle; ``transcode`` is a parameter so a test can show that a wrong transcoder
    is caught."""
    packed, _ = h.quiet(transcode, jpeg, restart_interval=interval, max_pixels=h.MAX_PIXELS)
    if packed is None:
        return
    for t in RECIPES[mode]:
        outs = []
        for what, data in (("original", jpeg), ("packed file", packed)):
            torch.manual_seed(seed)
            out, warned = h.quiet(t, data)
            if warned:
                raise Finding(f"{t} on the {what} warned (the input transcoded)")
            outs.append(out)
        if (outs[0] is None) != (outs[1] is None):
            raise Finding(f"{t} raised on the {'original' if outs[0] is None else 'packed file'} only")
        if outs[0] is not None and not torch.equal(outs[0], outs[1]):
            diff = (outs[0].int() - outs[1].int()).abs()
            raise Finding(f"{t} differs between the original and the packed file (seed {seed}, interval "
                          f"{interval}): {int((diff > 0).sum())} values, max {int(diff.max())}")


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None or info.height * info.width > h.MAX_PIXELS:
        return
    mode = fdp.PickValueInList(h.MODES)
    interval = fdp.ConsumeIntInRange(0, 8)
    check(jpeg, mode, interval or "auto", fdp.ConsumeIntInRange(0, 2**31))


if __name__ == "__main__":
    h.main(test_one_input)
