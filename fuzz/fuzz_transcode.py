"""Fuzz target: ``fastprep.io.transcode_jpeg`` (what ``python -m fastprep.pack`` writes).

The parameters pick the restart interval (automatic or 0..9 MCUs), ``optimize``,
``keep_metadata``, a decode mode and a window. Oracle: the transcode either raises
``DecodeError`` (a refusal: corrupt data, or a valid file it cannot copy losslessly) or
returns a file that

- parses as one sequential Huffman scan with the source's size and sampling factors and
  the requested restart interval (automatic: one the fast ROI path takes);
- decodes (strict full decode, ``max_scans`` lifted: the transcoder has no scan limit) to
  exactly the source's pixels, or raises where the source's decode raises (a mode the
  file's colour space or sampling does not allow; the check then moves on to mode
  UNCHANGED, then GRAY);
- gives, for the window, a strict ROI decode equal to its full decode sliced;
- transcodes again (a packed file is never refused) to the same pixels.

Anything else -- another exception, a warning, a crash, a pixel difference -- is a finding.

Run: ``python fuzz/fuzz_transcode.py CORPUS_DIR [libFuzzer flags]`` or
``--blind SECONDS CORPUS...`` (see docs/fuzzing.md).
"""

import atheris
import torch

import _harness as h
from _harness import Finding, fio


def _decode(jpeg, mode):
    out, _ = h.quiet(fio.decode_jpeg, jpeg, mode, max_pixels=h.MAX_PIXELS, strict=True, max_scans=0)
    return out


def _check_layout(src_info, info, interval):
    if info.progressive or info.arithmetic:
        raise Finding(f"transcoded file is not sequential Huffman: {info}")
    if ((info.height, info.width, info.num_components, info.sampling_factors, info.color_space) !=
            (src_info.height, src_info.width, src_info.num_components, src_info.sampling_factors,
             src_info.color_space)):
        raise Finding(f"transcoded file's header {info} differs from the source's {src_info}")
    if interval == "auto" and not info.restart_roi:
        raise Finding(f"automatic restart interval {info.restart_interval} not taken by the ROI fast path: {info}")
    if interval != "auto" and info.restart_interval != interval:
        raise Finding(f"restart interval {info.restart_interval} written, {interval} asked for")


def _same_pixels(jpeg, out, mode, src_info):
    """``(mode, source pixels, copy pixels)``, equal, in ``mode``, else in the file's own
    colour space, else luma: a mode the file's colour space or sampling does not allow
    raises for the source and the copy alike. None when every mode raises for both."""
    for mode in (mode, fio.ImageReadMode.UNCHANGED, fio.ImageReadMode.GRAY):
        want, got = _decode(jpeg, mode), _decode(out, mode)
        if (want is None) != (got is None):
            raise Finding(f"strict full decode in mode {mode!r} of the "
                          f"{'source' if want is None else 'transcoded file'} raised, of the other not ({src_info})")
        if want is None:
            continue
        if not torch.equal(got, want):
            diff = (got.int() - want.int()).abs()
            raise Finding(f"transcoded file decodes differently in mode {mode!r}: {int((diff > 0).sum())} values, "
                          f"max {int(diff.max())} ({src_info})")
        return mode, want, got
    return None


def check(jpeg: bytes, mode, interval, optimize: bool, keep_metadata: bool, win_bytes: bytes,
          transcode=fio.transcode_jpeg) -> None:
    """The oracle; ``transcode`` is a parameter so a test can show that a wrong transcoder
    is caught."""
    kwargs = {"restart_interval": interval, "optimize": optimize, "keep_metadata": keep_metadata,
              "max_pixels": h.MAX_PIXELS}
    out, warned = h.quiet(transcode, jpeg, **kwargs)
    if warned:
        raise Finding("transcode_jpeg emitted a DecodeWarning (corrupt data must be refused)")
    if out is None:
        return  # refused
    src_info, _ = h.quiet(fio.jpeg_info, jpeg)
    info, _ = h.quiet(fio.jpeg_info, out)
    if src_info is None or info is None:
        raise Finding(f"transcode_jpeg succeeded but jpeg_info raised on the {'source' if info else 'output'}")
    _check_layout(src_info, info, interval)
    decoded = _same_pixels(jpeg, out, mode, src_info)
    if decoded is None:  # decodable in no mode, the source and the copy alike
        if h.quiet(transcode, out, **kwargs)[0] is None:
            raise Finding("transcoding the transcoded file was refused")
        return
    mode, want, got = decoded
    fdp = atheris.FuzzedDataProvider(win_bytes)
    top, left = fdp.ConsumeIntInRange(0, info.height - 1), fdp.ConsumeIntInRange(0, info.width - 1)
    height, width = fdp.ConsumeIntInRange(1, info.height - top), fdp.ConsumeIntInRange(1, info.width - left)
    roi, _ = h.quiet(fio.decode_jpeg_roi, out, top, left, height, width, mode, max_pixels=h.MAX_PIXELS, strict=True)
    if roi is None or not torch.equal(roi, got[:, top:top + height, left:left + width]):
        raise Finding(f"ROI {(top, left, height, width)} of the transcoded file "
                      f"{'raised' if roi is None else 'differs from its full decode sliced'}")
    again, _ = h.quiet(transcode, out, **kwargs)
    again_pixels = None if again is None else _decode(again, mode)
    if again_pixels is None or not torch.equal(again_pixels, want):
        raise Finding(f"transcoding the transcoded file {'was refused' if again is None else 'changed pixels'}")


def test_one_input(data: bytes) -> None:
    fdp, jpeg = h.split(data)
    mode = fdp.PickValueInList(h.MODES)
    interval = fdp.ConsumeIntInRange(-1, 9)
    optimize, keep_metadata = fdp.ConsumeBool(), fdp.ConsumeBool()
    check(jpeg, mode, "auto" if interval < 0 else interval, optimize, keep_metadata, fdp.ConsumeBytes(8))


if __name__ == "__main__":
    h.main(test_one_input)
