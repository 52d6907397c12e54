"""A crop window's bytes of a packed JPEG (``fastprep.pack``) by range reads: the header and
interval index first, then only the restart intervals the window's decode reads.

:func:`header_end` finds where a prefix's header ends; :func:`WindowLayout.parse` reads the
frame, the restart interval and the interval index (APP9 ``fastprep.rst``) from the header;
:meth:`WindowLayout.intervals` chooses the intervals a window needs exactly as the native
restart-interval decode does (``plan_splice`` in csrc/jpeg/restart_index.cpp: one scaled pixel
of context, whole MCUs, widened until the spliced frame upsamples as the image does; ``None``
where it would decode the whole file); :meth:`WindowLayout.ranges` gives their byte ranges,
neighbours merged; :meth:`WindowLayout.sparse` is a buffer of the file's size holding the
header, the fetched ranges and, everywhere else, zeros except the restart markers and the EOI
where the index places them (the decode checks them, docs/storage.md).
Pure byte parsing; the reads themselves are :meth:`fastprep.data.ObjectFolder.read_windows`.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["WINDOW_PREFIX", "WindowLayout", "header_end"]

#: bytes read first from each object at least: the header and interval index of packed files
#: up to about 12 MP (4:2:0); a longer header takes one more request, and the reads after it
#: start with the longest header seen
WINDOW_PREFIX = 16 << 10

_SIGNATURE = b"fastprep.rst\0"
_CHUNK_HEADER = len(_SIGNATURE) + 3
_BLOB_HEADER = 17
_STANDALONE = {0x01, 0xD8} | set(range(0xD0, 0xD8))


def header_end(head) -> int:
    """Where the entropy-coded data of a JPEG starts (just past its SOS segment), from a
    prefix ``head`` of the file: that offset when the prefix holds the whole header,
    ``-k`` when it needs at least ``k`` bytes to tell, ``0`` when it is not a JPEG's."""
    n = len(head)
    if n < 4:
        return -4
    if head[0] != 0xFF or head[1] != 0xD8:
        return 0
    i = 2
    while True:
        if i + 4 > n:
            return -(i + 4)
        if head[i] != 0xFF:
            return 0
        marker = head[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in _STANDALONE:
            i += 2
            continue
        end = i + 2 + int.from_bytes(head[i + 2:i + 4], "big")
        if end > n:
            return -end
        if marker == 0xDA:
            return end
        i = end


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class WindowLayout:
    """The facts of a packed JPEG's header a window's intervals follow from (see the module)."""

    def __init__(self, scan: int, height: int, width: int, h_samp: list[int], v: int, interval: int,
                 starts: np.ndarray, eoi: int):
        self.scan, self.height, self.width = scan, height, width
        self.h_samp, self.max_h = h_samp, max(h_samp)
        self.mcu_w = 8 if len(h_samp) == 1 else 8 * self.max_h
        self.mcu_h = 8 if len(h_samp) == 1 else 8 * v
        self.mcus_per_row = _ceil_div(width, self.mcu_w)
        self.interval = interval
        self.starts, self.eoi = starts, eoi  # relative to `scan`; interval i ends at starts[i + 1] (its marker)
        self.nexts = np.append(starts[1:], eoi + 2)

    @classmethod
    def parse(cls, head, scan: int) -> WindowLayout | None:
        """The layout of the header ``head[:scan]``, or ``None`` when it is not a baseline
        or extended sequential JPEG in one interleaved scan whose restart intervals tile its
        MCU rows, with a well-formed interval index."""
        i, frame, interval = 2, None, 0
        chunks: list[tuple[int, bytes]] = []
        while i < scan:
            marker = head[i + 1]
            if marker == 0xFF or marker in _STANDALONE:
                i += 1 if marker == 0xFF else 2
                continue
            end = i + 2 + int.from_bytes(head[i + 2:i + 4], "big")
            body = bytes(head[i + 4:end])
            if not body:
                return None
            if marker in (0xC0, 0xC1):
                frame = body
            elif 0xC2 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                return None  # progressive, lossless, arithmetic, hierarchical: not read by window
            elif marker == 0xDD and len(body) >= 2:
                interval = int.from_bytes(body[:2], "big")
            elif marker == 0xE9 and body.startswith(_SIGNATURE) and len(body) >= _CHUNK_HEADER:
                version, number, count = body[len(_SIGNATURE):_CHUNK_HEADER]
                if version != 1 or number != len(chunks):
                    return None
                chunks.append((count, body[_CHUNK_HEADER:]))
            elif marker == 0xDA:
                if frame is None or len(frame) < 6 or body[0] != frame[5]:
                    return None  # not one scan of every component
            i = end
        if frame is None or interval == 0 or not chunks or any(c != len(chunks) for c, _ in chunks):
            return None
        if len(frame) < 6 or len(frame) < 6 + 3 * frame[5]:
            return None
        height, width, nf = int.from_bytes(frame[1:3], "big"), int.from_bytes(frame[3:5], "big"), frame[5]
        if nf not in (1, 3, 4) or height == 0 or width == 0 or any(frame[7 + 3 * c] == 0 for c in range(nf)):
            return None
        h = [frame[7 + 3 * c] >> 4 for c in range(nf)]
        v = [frame[7 + 3 * c] & 15 for c in range(nf)]
        starts_eoi = _read_index(b"".join(c for _, c in chunks))
        if starts_eoi is None:
            return None
        layout = cls(scan, height, width, h, max(v), interval, *starts_eoi)
        mpr, rows = layout.mcus_per_row, _ceil_div(height, layout.mcu_h)
        if not (interval % mpr == 0 or mpr % interval == 0):
            return None
        if len(layout.starts) != _ceil_div(mpr * rows, interval) or layout.starts[0] != 0:
            return None
        return layout

    def fits(self, size: int) -> bool:
        """Whether the index places every interval and the EOI inside a file of ``size`` bytes."""
        return self.scan + self.eoi + 2 <= size

    def _upsamples_as_image(self, width: int, s: int) -> bool:
        return all(not (h < self.max_h and width * h * s <= 2 * self.max_h * 8) for h in self.h_samp)

    def intervals(self, top: int, left: int, height: int, width: int, scale_num: int) -> list[int] | None:
        """The intervals the restart-interval decode of this window (at ``scale_num``/8,
        window in scaled pixels) reads, in stream order; ``None`` when it reads the whole
        scan instead (``plan_splice`` returns false)."""
        H, W, mw, mh, s = self.height, self.width, self.mcu_w, self.mcu_h, scale_num
        R, mpr = self.interval, self.mcus_per_row
        sx0, sy0 = max(left - 1, 0), max(top - 1, 0)
        px0, py0 = sx0 * 8 // s, sy0 * 8 // s
        px1, py1 = min(_ceil_div((left + width + 1) * 8, s), W), min(_ceil_div((top + height + 1) * 8, s), H)
        c0, c1, r0, r1 = px0 // mw, _ceil_div(px1, mw), py0 // mh, _ceil_div(py1, mh)
        if R % mpr == 0:
            k = R // mpr
            i0, i1 = r0 // k, _ceil_div(r1, k)
            return None if i0 == 0 else list(range(i0, i1))
        n = mpr // R
        j0, j1 = c0 // R, _ceil_div(c1, R)
        while (j0 > 0 or j1 < n) and not self._upsamples_as_image(min(j1 * R * mw, W) - j0 * R * mw, s):
            if j1 < n:
                j1 += 1
            else:
                j0 -= 1
        if r0 == 0 and j0 == 0 and j1 == n:
            return None
        return [r * n + j for r in range(r0, r1) for j in range(j0, j1)]

    def ranges(self, intervals: list[int], gap: int) -> list[tuple[int, int]]:
        """``(start, length)`` in the file of the intervals' bytes (each with its marker),
        ranges at most ``gap`` bytes apart merged."""
        out: list[list[int]] = []
        for i in intervals:
            a, b = self.scan + int(self.starts[i]), self.scan + int(self.nexts[i])
            if out and a - out[-1][1] <= gap:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return [(a, b - a) for a, b in out]

    def sparse(self, size: int, head, last: int) -> torch.Tensor:
        """A zeroed buffer of ``size`` bytes with ``head`` at its start and the restart
        markers of intervals ``0 .. last`` and the EOI where the index puts them; the
        caller copies the fetched ranges in."""
        out = torch.zeros(size, dtype=torch.uint8)
        buf = out.numpy()
        ends = self.scan + self.nexts[:last + 1] - 2
        buf[ends] = 0xFF
        buf[ends + 1] = 0xD0 + (np.arange(last + 1) & 7)
        if last + 1 == len(self.starts):
            buf[ends[-1] + 1] = 0xD9
        buf[self.scan + self.eoi:self.scan + self.eoi + 2] = (0xFF, 0xD9)
        buf[:len(head)] = np.frombuffer(head, dtype=np.uint8)
        return out


def _read_index(blob: bytes) -> tuple[np.ndarray, int] | None:
    """Interval starts (relative to the scan) and the EOI's offset from an index blob."""
    if len(blob) < _BLOB_HEADER:
        return None
    N, G, n = (int.from_bytes(blob[k:k + 4], "big") for k in (0, 4, 8))
    w, eoi = blob[12], int.from_bytes(blob[13:17], "big")
    if G == 0 or n == 0 or G * n != N or (w != 0 if n == 1 else not 1 <= w <= 4) \
            or len(blob) != _BLOB_HEADER + 4 * G + G * (n - 1) * w:
        return None
    bases = np.frombuffer(blob, dtype=">u4", count=G, offset=_BLOB_HEADER).astype(np.int64)
    if n == 1:
        return bases, eoi
    d = np.frombuffer(blob, dtype=np.uint8, count=G * (n - 1) * w, offset=_BLOB_HEADER + 4 * G)
    d = d.reshape(G, n - 1, w).astype(np.int64)
    dist = sum(d[..., b] << (8 * (w - 1 - b)) for b in range(w))
    starts = np.concatenate([bases[:, None], bases[:, None] + np.cumsum(dist, axis=1)], axis=1).reshape(-1)
    if np.any(np.diff(starts) < 3) or eoi < starts[-1] + 1:
        return None
    return starts, eoi
