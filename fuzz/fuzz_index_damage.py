"""Fuzz target: damaged packed files -- restart markers and entropy-coded bytes changed
after packing -- decoded through the interval index (``decode_jpeg_roi``).

The input is packed with ``transcode_jpeg`` (an interval of 1-8 MCUs or automatic, so the
file has restart markers and an interval index); then one to four bytes of its scan are
changed: at or next to a restart marker (renumbered, a bit flipped, set to 0x00, 0xFF or
another value), or anywhere in the entropy-coded data (a bit flip or a new value). Up to
three windows at a DCT scale of 1-8 eighths. The parameters seed the choice of damage
and windows.

Oracle (docs/pack.md, "Damage outside the window"):

- no new marker (no ``0xFF`` followed by a byte other than ``0x00``/``0xFF`` where the
  packed file had none): the ROI decode without ``strict`` equals the full decode
  without ``strict`` sliced, bit for bit, whatever the damage did to the markers (a damaged
  marker before the window must not leave the clean pixels there silently);
- a new marker: the window without ``strict`` is the decode of its own intervals where
  the index locates them -- the full decode of the file with the new markers' bytes put
  back, sliced -- or, when it fell back, the full decode's;
- ``strict=True``: a ROI decode that returns equals the full decode without ``strict``
  sliced; one that raises has a strict full decode that raises too;
- a ROI decode without ``strict`` that raises where the full decode returns is a finding.

Run: ``python fuzz/fuzz_index_damage.py CORPUS_DIR [libFuzzer flags]`` or
``--blind SECONDS CORPUS...`` (see docs/fuzzing.md).
"""

import random

import torch

import _harness as h
from _harness import Finding, fio


def scan_range(jpeg: bytes):
    """``(first byte of the entropy-coded data, offset of the EOI marker, RST offsets)`` of
    a packed file (one scan that ends with EOI), or None."""
    at = 2
    while at + 4 <= len(jpeg) and jpeg[at] == 0xFF:
        marker, length = jpeg[at + 1], int.from_bytes(jpeg[at + 2:at + 4], "big")
        at += 2 + length
        if marker == 0xDA:
            end = jpeg.rfind(b"\xff\xd9")
            return (at, end, marker_offsets(jpeg, at, end, restart_only=True)) if end > at else None
    return None


def marker_offsets(data: bytes, start: int, end: int, restart_only: bool = False) -> set:
    """Offsets in ``[start, end)`` of a ``0xFF`` that starts a marker: followed by a byte
    other than ``0x00`` and ``0xFF`` (a run of ``0xFF`` is fill before the last one)."""
    out, at = set(), data.find(b"\xff", start, end)
    while at >= 0:
        code = data[at + 1] if at + 1 < len(data) else 0
        if code not in (0x00, 0xFF) and (not restart_only or 0xD0 <= code <= 0xD7):
            out.add(at)
        at = data.find(b"\xff", at + 1, end)
    return out


def damage(packed: bytes, rng: random.Random):
    """``(packed with one to four bytes of its scan changed, the same without its new
    markers)``: the second has the bytes of every marker the damage created put back (None
    when there is none). None when the file is not as packing writes it."""
    found = scan_range(packed)
    if found is None:
        return None
    start, end, restarts = found
    bad = bytearray(packed)
    rst = sorted(restarts)
    for _ in range(rng.randint(1, 4)):
        if rst and rng.random() < 0.6:  # at or next to a restart marker
            m = rng.choice(rst)
            at = min(max(m + rng.randint(-2, 3), start), end - 1)
        else:
            at = rng.randrange(start, end)
        choice = rng.randrange(4)
        if choice == 0 and at in restarts:
            bad[at + 1] = 0xD0 + (bad[at + 1] - 0xD0 + rng.randint(1, 7)) % 8  # renumbered
        elif choice <= 1:
            bad[at] ^= 1 << rng.randrange(8)
        elif choice == 2:
            bad[at] = rng.choice((0x00, 0xFF, 0xD9, 0xC4, rng.randrange(0xD0, 0xD8)))
        else:
            bad[at] = rng.randrange(256)
    bad = bytes(bad)
    old = marker_offsets(packed, start, end)
    undone = bytearray(bad)
    while new := marker_offsets(undone, start, end) - old:  # putting bytes back can make one
        for at in new:
            undone[at:at + 2] = packed[at:at + 2]
    return bad, (None if undone == bad else bytes(undone))


def check(bad: bytes, undone: bytes | None, mode, wins, scale: int, decode_roi=fio.decode_jpeg_roi) -> None:
    """The oracle for windows (in pixels of the image at ``scale``) of the damaged file
    ``bad``; ``undone``: ``bad`` without the markers the damage created (None: it created
    none). ``decode_roi`` is a parameter so a test can show that a wrong ROI decoder is
    caught."""
    kwargs = {"max_pixels": h.MAX_PIXELS, "scale": scale}
    full, _ = h.quiet(fio.decode_jpeg, bad, mode, **kwargs)
    full_strict, _ = h.quiet(fio.decode_jpeg, bad, mode, strict=True, **kwargs)
    own = None
    for top, left, height, width in wins:
        where = f"ROI {(top, left, height, width)} mode {mode!r} scale {scale}"
        ref = None if full is None else full[:, top:top + height, left:left + width]
        roi, _ = h.quiet(decode_roi, bad, top, left, height, width, mode, **kwargs)
        if roi is None and full is not None:
            raise Finding(f"{where} raised, the full decode did not")
        if roi is not None and ref is not None and not torch.equal(roi, ref):
            if undone is not None and own is None:
                own, _ = h.quiet(fio.decode_jpeg, undone, mode, **kwargs)
            if own is None or not torch.equal(roi, own[:, top:top + height, left:left + width]):
                diff = (roi.int() - ref.int()).abs()
                raise Finding(f"{where} differs from the full decode sliced ({int((diff > 0).sum())} values, max "
                              f"{int(diff.max())}){'' if undone is None else ' and from that without the new markers'}")
        strict, _ = h.quiet(decode_roi, bad, top, left, height, width, mode, strict=True, **kwargs)
        if strict is None and full_strict is not None:
            raise Finding(f"strict {where} raised, the strict full decode did not")
        if strict is not None and ref is not None and not torch.equal(strict, ref):
            raise Finding(f"strict {where} differs from the full decode sliced")


def test_one_input(data: bytes, decode_roi=fio.decode_jpeg_roi) -> None:
    fdp, jpeg = h.split(data)
    mode = fdp.PickValueInList(h.MODES)
    interval = fdp.ConsumeIntInRange(0, 8)
    rng = random.Random(fdp.ConsumeInt(8))
    info, _ = h.quiet(fio.jpeg_info, jpeg)
    if info is None or info.height * info.width > h.MAX_PIXELS:
        return
    packed, _ = h.quiet(fio.transcode_jpeg, jpeg, restart_interval=interval or "auto", max_pixels=h.MAX_PIXELS)
    if packed is None or not fio.jpeg_info(packed).restart_roi:
        return  # a refusal, or an interval that does not tile the rows (no index)
    damaged = damage(packed, rng)
    if damaged is None:
        return
    bad, undone = damaged
    scale = rng.randint(1, 8)
    height, width = fio.scaled_size(info.height, info.width, scale)
    wins = []
    for _ in range(rng.randint(1, 3)):
        top, left = rng.randrange(height), rng.randrange(width)
        wins.append((top, left, rng.randint(1, height - top), rng.randint(1, width - left)))
    check(bad, undone, mode, wins, scale, decode_roi=decode_roi)


if __name__ == "__main__":
    h.main(test_one_input)
