"""Fuzz target: scaled ``decode_jpeg_roi`` on restart-marked files (the restart-interval
fast path that packed files take).

The parameters pick a mode, a DCT scale ``num/8`` (1..8) and up to three windows inside
the scaled image. A file without restart markers is first packed with
``transcode_jpeg`` at an interval the parameters pick (1..8 MCUs or automatic), so every
seed reaches the fast path; a file with markers (a restart seed, a packed seed, or a
mutation of one: renumbered, missing or extra markers, a changed DRI or sampling) is used
as it is.

Oracle, the same rules as ``fuzz_decode_roi.py`` at each scale: when the strict ROI decode
and the strict full decode ``decode_jpeg(data, scale=num)`` both succeed, the ROI equals
the full decode sliced bit for bit; a strict full decode that succeeds while the strict
ROI of a window of it raises is a finding; a ROI that succeeds where the full decode
raises is not (the fast path does not read intervals the window does not need, so
corruption or truncation there goes unnoticed, as documented).

Run: ``python fuzz/fuzz_restart_roi.py CORPUS_DIR [libFuzzer flags]`` or
``--blind SECONDS CORPUS...`` (see docs/fuzzing.md).
"""

import _harness as h
import fuzz_decode_roi
from _harness import fio


def windows(fdp, height: int, width: int, count: int):
    out = []
    for _ in range(count):
        top = fdp.ConsumeIntInRange(0, height - 1)
        left = fdp.ConsumeIntInRange(0, width - 1)
        out.append((top, left, fdp.ConsumeIntInRange(1, height - top), fdp.ConsumeIntInRange(1, width - left)))
    return out


def test_one_input(data: bytes, transcode=fio.transcode_jpeg, decode_roi=fio.decode_jpeg_roi) -> None:
    fdp, jpeg = h.split(data)
    mode = fdp.PickValueInList(h.MODES)
    num = fdp.ConsumeIntInRange(1, 8)
    interval = fdp.ConsumeIntInRange(0, 8)
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None or info.height * info.width > h.MAX_PIXELS:
        return
    if info.restart_interval == 0:
        jpeg, _ = h.quiet(transcode, jpeg, restart_interval=interval or "auto", max_pixels=h.MAX_PIXELS)
        if jpeg is None:
            return  # corrupt, or a valid file that cannot be transcoded losslessly
        info, _ = h.quiet(fio.jpeg_info, jpeg)
    height, width = fio.scaled_size(info.height, info.width, num)
    wins = windows(fdp, height, width, fdp.ConsumeIntInRange(1, 3))
    fuzz_decode_roi.check_windows(jpeg, mode, wins, decode_roi=decode_roi, scale=num)


if __name__ == "__main__":
    h.main(test_one_input)
