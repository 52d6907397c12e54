"""Fuzz target: ``fastprep.io.decode_jpeg_roi`` against the full decode sliced.

The parameters pick a mode and a window inside the header's image size. Oracle: when the
strict ROI decode and the strict full decode both succeed, the ROI must equal
``decode_jpeg(data, mode)[:, top:top+height, left:left+width]`` bit for bit (the
documented contract); a strict full decode that succeeds while the strict ROI decode of a
window of it raises is also a finding (the window needs a subset of the data). Warnings
make the comparison meaningless (corrupt data decodes differently depending on what is
read), hence ``strict=True``; when the strict ROI decode fails the non-strict one runs
too, to exercise the warning path.

Run: ``python fuzz/fuzz_decode_roi.py CORPUS_DIR [libFuzzer flags]`` (see docs/fuzzing.md).
"""

import torch

import _harness as h
from _harness import Finding, fio


def window(fdp, info):
    top = fdp.ConsumeIntInRange(0, info.height - 1)
    left = fdp.ConsumeIntInRange(0, info.width - 1)
    height = fdp.ConsumeIntInRange(1, info.height - top)
    width = fdp.ConsumeIntInRange(1, info.width - left)
    return top, left, height, width


def check(jpeg: bytes, mode, win, decode_roi=fio.decode_jpeg_roi, decode_full=fio.decode_jpeg, scale=None) -> None:
    """The oracle; ``decode_roi``/``decode_full`` are parameters so a test can show that a
    wrong ROI decoder is caught."""
    check_windows(jpeg, mode, [win], decode_roi, decode_full, scale)


def check_windows(jpeg: bytes, mode, wins, decode_roi=fio.decode_jpeg_roi, decode_full=fio.decode_jpeg,
                  scale=None) -> None:
    """The oracle for several windows (in pixels of the image at ``scale``) of one file."""
    full, _ = h.quiet(decode_full, jpeg, mode, max_pixels=h.MAX_PIXELS, strict=True, scale=scale)
    for win in wins:
        top, left, height, width = win
        roi, _ = h.quiet(decode_roi, jpeg, top, left, height, width, mode, max_pixels=h.MAX_PIXELS, strict=True,
                         scale=scale)
        where = f"ROI {win} mode {mode!r} scale {scale}"
        if roi is None:
            if full is not None:
                raise Finding(f"strict full decode succeeded, strict {where} raised")
            h.quiet(decode_roi, jpeg, top, left, height, width, mode, max_pixels=h.MAX_PIXELS, scale=scale)
            continue
        if tuple(roi.shape[1:]) != (height, width):
            raise Finding(f"{where} returned shape {tuple(roi.shape)}")
        if full is None:
            continue  # e.g. data truncated below the window: the ROI need not read it
        ref = full[:, top:top + height, left:left + width]
        if not torch.equal(roi, ref):
            diff = (roi.int() - ref.int()).abs()
            raise Finding(f"{where} differs from the full decode sliced: "
                          f"{int((diff > 0).sum())} values, max {int(diff.max())}")


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    mode = fdp.PickValueInList(h.MODES)
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None or info.height * info.width > h.MAX_PIXELS:
        return
    check(jpeg, mode, window(fdp, info))


if __name__ == "__main__":
    h.main(test_one_input)
