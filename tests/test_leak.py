"""Memory leaks in the decode paths, with a detector that is itself tested.

The detector reads two counters before and after many calls (after a warm-up that lets
allocator pools and caches settle):

* glibc's ``mallinfo2()``: bytes the main arena has handed out (``uordblks``) plus bytes in
  mmap'd chunks (``hblkhd``). Byte-exact for malloc/new/posix_memalign in this thread,
  which is where libjpeg's pools, the op's buffers and tensor storage come from.
* current RSS from ``/proc/self/statm`` (page granular, but it sees every allocator,
  Python's object arenas included).

A leak of ``b`` bytes per call grows the heap counter by about ``b * calls``.

Measured on this decoder (loaded 2-core machine, several runs): after the warm-up, 20,000
failing decodes, and 20,000 successful/warning ROI decodes, moved the heap counter by 0
bytes and RSS by 0 KiB. The deliberately leaking variants below moved them by 819,008 bytes
/ 628 KiB (``malloc(16)`` per call: a 32-byte chunk plus the list slot keeping it) and
1,900,016 bytes / 1,776 KiB (a 1x1 tensor kept every 4th call). Tolerances:

* heap: 160 KiB over 20,000 calls (8 bytes per call): one leaked malloc per call fails,
  whatever its size (glibc's smallest chunk is 32 bytes);
* RSS: 4 MiB, a backstop for allocations outside glibc's main arena (Python's object
  arenas, other threads' arenas, direct mmap).

``TestDetector`` asserts that the detector fails on those known leaks, so the real checks
below cannot pass vacuously.
"""

import ctypes
import gc
import io
import resource
import sys
import warnings

import numpy as np
import pytest
from PIL import Image

import fastprep.io as fio

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and glibc's mallinfo2")

CALLS = 20_000
WARMUP = 2_000
HEAP_TOLERANCE = 160 * 1024  # bytes over CALLS: 8 bytes per call
RSS_TOLERANCE = 4 * 1024  # KiB over CALLS


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_libc = ctypes.CDLL(None)
if hasattr(_libc, "mallinfo2"):
    _libc.mallinfo2.restype = _Mallinfo2
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]


def heap_bytes() -> int:
    """Bytes currently allocated through glibc malloc (main arena + mmap'd chunks)."""
    m = _libc.mallinfo2()
    return m.uordblks + m.hblkhd


def rss_kib() -> int:
    """Current (not peak) resident set size in KiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (resource.getpagesize() // 1024)


def growth(fn, calls=CALLS, warmup=WARMUP):
    """``(heap bytes, RSS KiB)`` gained over ``calls`` calls of ``fn(i)`` after ``warmup``."""
    for i in range(warmup):
        fn(i)
    gc.collect()
    heap0, rss0 = heap_bytes(), rss_kib()
    for i in range(calls):
        fn(i)
    gc.collect()
    return heap_bytes() - heap0, rss_kib() - rss0


def assert_no_leak(fn, what: str) -> None:
    heap, rss = growth(fn)
    assert heap < HEAP_TOLERANCE and rss < RSS_TOLERANCE, (
        f"leak: {what}: heap grew by {heap} bytes ({heap / CALLS:.1f} per call), RSS by {rss} KiB "
        f"over {CALLS} calls (tolerance {HEAP_TOLERANCE} bytes, {RSS_TOLERANCE} KiB)")


def _jpeg(height, width, seed, **kwargs) -> bytes:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=90, **kwargs)
    return buf.getvalue()


def _with_frame_size(data: bytes, height: int, width: int) -> bytes:
    out = bytearray(data)
    at = max(out.find(b"\xff\xc0"), out.find(b"\xff\xc2"))
    out[at + 5:at + 9] = bytes([height >> 8, height & 255, width >> 8, width & 255])
    return bytes(out)


SMALL = _jpeg(24, 40, seed=1)
SMALL_PROGRESSIVE = _jpeg(24, 40, seed=2, progressive=True)
FAILING = [fio._as_tensor(b) for b in (
    b"this is not a jpeg",
    b"\xff\xd8" + bytes(np.random.default_rng(3).integers(0, 256, 200, dtype=np.uint8)),
    SMALL[:40],  # truncated header
    SMALL[:len(SMALL) // 2],  # truncated entropy data
    SMALL_PROGRESSIVE[:len(SMALL_PROGRESSIVE) // 2],
    _with_frame_size(SMALL, 65500, 65500),  # refused by max_pixels
)]


def _failing_decode(i):
    data = FAILING[i % len(FAILING)]
    try:
        if i & 1:
            fio.decode_jpeg_roi(data, 0, 0, 8, 8)
        else:
            fio.decode_jpeg(data, strict=True)
    except fio.DecodeError:
        pass


class TestDetector:
    """The detector must see leaks that are smaller than any real one would be."""

    def test_detects_16_bytes_of_malloc_per_call(self):
        kept = []

        def leaky(i):
            _failing_decode(i)
            kept.append(_libc.malloc(16))  # never freed

        heap, _ = growth(leaky)
        assert heap >= 16 * CALLS  # each malloc(16) takes a 32-byte chunk
        with pytest.raises(AssertionError, match="leak"):
            assert_no_leak(leaky, "malloc(16) per call")

    def test_detects_a_kept_tensor_per_call(self):
        kept = []
        good = fio._as_tensor(SMALL)

        def leaky(i):
            _failing_decode(i)
            if i % 4 == 0:
                kept.append(fio.decode_jpeg_roi(good, 0, 0, 1, 1))  # 3 bytes of pixels + a tensor

        with pytest.raises(AssertionError, match="leak"):
            assert_no_leak(leaky, "one 1x1 tensor kept every 4th call")


def test_failing_decodes_do_not_leak():
    assert_no_leak(_failing_decode, "failing decodes")


def _warning_input() -> bytes:
    """SMALL with one entropy byte changed so that libjpeg warns (corrupt data) and decodes."""
    sos = SMALL.index(b"\xff\xda")
    for pos in range(sos + 20, len(SMALL) - 4):
        for value in (0x00, 0x5A, 0xA5):
            data = SMALL[:pos] + bytes([value]) + SMALL[pos + 1:]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    fio.decode_jpeg(data)
                except fio.DecodeError:
                    continue
            if any(issubclass(w.category, fio.DecodeWarning) for w in caught):
                return data
    raise AssertionError("no single-byte change made libjpeg warn")


def test_decodes_with_warnings_and_successful_rois_do_not_leak():
    inputs = [fio._as_tensor(SMALL), fio._as_tensor(SMALL_PROGRESSIVE), fio._as_tensor(_warning_input())]

    def decode(i):
        data = inputs[i % 3]
        try:
            fio.decode_jpeg_roi(data, i % 16, i % 32, 8, 8)
        except fio.DecodeError:
            pass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fio.DecodeWarning)
        assert_no_leak(decode, "successful and warning decodes")
