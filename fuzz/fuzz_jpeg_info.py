"""Fuzz target: ``fastprep.io.jpeg_info`` (header parsing only).

Checks beyond "no crash": a header that parses describes a plausible image (sizes in
1..65535, 1/3/4 components, one sampling-factor pair per component), and a file whose
header parses can be asked for a decode that either succeeds with that size or raises
DecodeError.

Run: ``python fuzz/fuzz_jpeg_info.py CORPUS_DIR [libFuzzer flags]`` (see docs/fuzzing.md).
"""

import _harness as h
from _harness import Finding, fio


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None:
        return
    if not (1 <= info.height <= 65535 and 1 <= info.width <= 65535):
        raise Finding(f"implausible size {info.height}x{info.width}")
    if info.num_components not in (1, 3, 4) or len(info.sampling_factors) != info.num_components:
        raise Finding(f"implausible components: {info}")
    if fdp.ConsumeBool():
        mode = fdp.PickValueInList(h.MODES)
        out, _ = h.quiet(fio.decode_jpeg, jpeg, mode, max_pixels=h.MAX_PIXELS)
        if out is not None and tuple(out.shape) != (h.channels(mode, info), info.height, info.width):
            raise Finding(f"decode shape {tuple(out.shape)} disagrees with header {info} in mode {mode!r}")


if __name__ == "__main__":
    h.main(test_one_input)
