"""Numba kernel: planar ``[3, H, W]`` uint8 to interleaved ``[H, W, 3]``.

Private: assumes validated input. torch's uint8 bilinear resize works on interleaved
pixels; given planar input it interleaves with a generic strided copy that costs about as
much as the resize, this loop a fraction of it.
"""

from numba import njit


@njit(nogil=True, cache=True)
def planar3_to_interleaved(src, dst):
    """``dst[y, x, c] = src[c, y, x]`` for a ``[3, H, W]`` source (rows may be strided)."""
    h, w = src.shape[1], src.shape[2]
    for y in range(h):
        r, g, b, o = src[0, y], src[1, y], src[2, y], dst[y]
        for x in range(w):
            o[x, 0] = r[x]
            o[x, 1] = g[x]
            o[x, 2] = b[x]
