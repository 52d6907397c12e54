"""Numba kernels for the random mask: bulk random bits, 4-neighbour dilation, apply.

Private: every function assumes validated, C-contiguous input of the documented dtype.
The public entry points are in :mod:`fastprep.functional`.

Randomness. A mask pixel is a bit of a 64-bit word; words are produced by the SplitMix64
output function applied to ``seed + (counter + 1) * GOLDEN`` (Steele, Lea & Flood,
"Fast splittable pseudorandom number generators", OOPSLA 2014), i.e. a counter-based
stream: word ``i`` of level ``l`` uses counter ``l * n_words + i``, independent of any
global state. A pixel is True with probability ``m / 2**PRECISION_BITS``,
``m = round(ratio * 2**PRECISION_BITS)``, built from ``m``'s binary expansion: starting
from the lowest set bit of ``m``, each more significant bit ``b`` combines a fresh random
word ``r`` into the running word ``x`` as ``x | r`` (b = 1) or ``x & r`` (b = 0), which
maps the per-bit probability ``P`` to ``1/2 + P/2`` or ``P/2``. So 64 pixels cost at most
``PRECISION_BITS`` random words, and ratio 0.25 costs two.

Packed layout. ``words[r, w]`` holds columns ``64 * w + j`` in bit ``j``; bits beyond the
image width are always zero, so shifts never leak them into the image.
"""

import numpy as np
from numba import config, njit

PRECISION_BITS = 16
"""The mask probability is ``ratio`` rounded to a multiple of ``2**-16`` (error <= 7.7e-6)."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_S63 = np.uint64(63)
_BYTE = np.uint64(0xFF)

# _UNPACK[v] is the 8 bytes (v >> k) & 1, k = 0..7, in memory order, read as a native uint64.
_UNPACK = np.ascontiguousarray(
    np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
).view(np.uint64).ravel()


def probability_numerator(ratio):
    """``m`` such that a pixel is True with probability ``m / 2**PRECISION_BITS``."""
    return int(round(float(ratio) * (1 << PRECISION_BITS)))


@njit(nogil=True, cache=True, inline="always")
def _mix(z):
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit(nogil=True, cache=True)
def random_bits(seed, m, height, width):
    """Packed random mask: uint64[height, ceil(width / 64)], bit True w.p. m / 2**16."""
    nw = (width + 63) // 64
    words = np.zeros((height, nw), dtype=np.uint64)
    flat = words.reshape(-1)
    n = flat.size
    s = np.uint64(seed)
    if m >= (1 << PRECISION_BITS):
        for i in range(n):
            flat[i] = _ALL
    elif m > 0:
        low = 0
        while (m >> low) & 1 == 0:
            low += 1
        base = s
        for i in range(n):
            flat[i] = _mix(base + np.uint64(i + 1) * _GOLDEN)
        for level in range(low + 1, PRECISION_BITS):
            base = s + np.uint64((level - low) * n) * _GOLDEN
            if (m >> level) & 1:
                for i in range(n):
                    flat[i] |= _mix(base + np.uint64(i + 1) * _GOLDEN)
            else:
                for i in range(n):
                    flat[i] &= _mix(base + np.uint64(i + 1) * _GOLDEN)
    _trim(words, width)
    return words


@njit(nogil=True, cache=True)
def dilate_bits(words, width):
    """4-neighbour (cross) dilation of a packed mask of ``width`` columns, zero padding."""
    height, nw = words.shape
    out = np.empty_like(words)
    for r in range(height):
        for w in range(nw):
            x = words[r, w]
            left = _ZERO
            right = _ZERO
            if w > 0:
                left = words[r, w - 1] >> _S63
            if w + 1 < nw:
                right = words[r, w + 1] << _S63
            # column c sets c + 1 (<< 1) and c - 1 (>> 1); carries cross word edges
            v = x | (x << _ONE) | left | (x >> _ONE) | right
            # rows outside the image: the row itself, already in v (as in dilate4)
            v |= words[r - 1 if r > 0 else r, w] | words[r + 1 if r + 1 < height else r, w]
            out[r, w] = v
    _trim(out, width)  # << 1 may have set column `width`
    return out


@njit(nogil=True, cache=True)
def _trim(words, width):
    """Clear the bits past column ``width`` in the last word of every row."""
    tail = width % 64
    if tail:
        nw = words.shape[1]
        keep = (_ONE << np.uint64(tail)) - _ONE
        for r in range(words.shape[0]):
            words[r, nw - 1] &= keep


@njit(nogil=True, cache=True)
def unpack_bits(words, out64):
    """Unpack ``words`` into bytes 0/1: ``out64`` is a uint64 view of uint8[H, 64 * nw]."""
    height, nw = words.shape
    for r in range(height):
        for w in range(nw):
            x = words[r, w]
            for k in range(8):
                out64[r, 8 * w + k] = _UNPACK[(x >> np.uint64(8 * k)) & _BYTE]


@njit(nogil=True, cache=True)
def random_dilated_mask(seed, m, height, width, out64):
    """Random mask, cross-dilated, unpacked into ``out64`` (see :func:`unpack_bits`)."""
    words = random_bits(seed, m, height, width)
    unpack_bits(dilate_bits(words, width), out64)


@njit(nogil=True, cache=True)
def dilate4(mask, out):
    """Cross dilation of a byte mask uint8[H, W] (nonzero = True) into uint8 0/1 ``out``."""
    # A neighbour outside the image is replaced by the pixel itself (clamped index), which
    # the OR already contains: the same result as zero padding, with unconditional loads
    # that vectorise (a conditional load per pixel would not on AVX2).
    height, width = mask.shape
    for r in range(height):
        up = r - 1 if r > 0 else r
        down = r + 1 if r + 1 < height else r
        last = width - 1
        for c in (0, last):  # the edge columns (the same one when width == 1)
            left = c - 1 if c > 0 else c
            right = c + 1 if c < last else c
            v = mask[r, c] | mask[r, left] | mask[r, right] | mask[up, c] | mask[down, c]
            out[r, c] = 1 if v != 0 else 0
        for c in range(1, last):
            v = mask[r, c - 1] | mask[r, c] | mask[r, c + 1] | mask[up, c] | mask[down, c]
            out[r, c] = 1 if v != 0 else 0


@njit(nogil=True, cache=True)
def apply_mask(img, mask, fill, out):
    """``out = where(mask, fill[c], img)`` for img/out[N, C, H, W] and mask uint8[H, >=W].

    ``fill`` is a 1-D array of img's dtype (np.uint8 / np.float32), one value per channel,
    so the select stays typed.
    """
    n, ch, height, width = img.shape
    for i in range(n):
        for c in range(ch):
            f = fill[c]
            for r in range(height):
                for x in range(width):
                    # Load, then select: `f if mask else img[...]` is a conditional load,
                    # which LLVM vectorises only with AVX-512 masked loads and leaves as a
                    # mispredicting scalar branch on AVX2. Both operands loaded, the select
                    # is a blend on every SIMD level.
                    v = img[i, c, r, x]
                    out[i, c, r, x] = f if mask[r, x] else v


@njit(nogil=True, cache=True)
def random_mask_apply(seed, m, img, fill, out, scratch8, scratch64):
    """Random mask, dilated, applied to img[N, C, H, W] (one mask for all N, C) into out.

    ``scratch8`` is uint8[H, 64 * ceil(W / 64)] and ``scratch64`` its uint64 view; they
    receive the mask.
    """
    random_dilated_mask(seed, m, img.shape[2], img.shape[3], scratch64)
    apply_mask(img, scratch8, fill, out)


if getattr(config, "DISABLE_JIT", False):  # pragma: no cover - exercised in a subprocess by the tests
    # Interpreted, numpy scalars warn on the uint64 wraparound that the PRNG relies on.
    import functools

    def _quiet(fn):
        @functools.wraps(fn)
        def wrapper(*args):
            with np.errstate(over="ignore"):
                return fn(*args)

        return wrapper

    random_bits = _quiet(random_bits)
    random_dilated_mask = _quiet(random_dilated_mask)
    random_mask_apply = _quiet(random_mask_apply)
