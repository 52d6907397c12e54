# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Cython kernels: RGB -> YUV (BT.601 full range), scale by 1/255, and the fused paths.

Private: callers (:mod:`fastprep.functional`) pass validated arrays of the documented
shapes. Every kernel writes each output element exactly once, runs on the calling thread
and releases the GIL; :mod:`fastprep.functional` splits large inputs into spans and runs
them on its helper threads (:func:`fastprep._threads.run_tasks`).

The span kernels (C, in ``_color_kernels.h``) exist in baseline (SSE2), AVX2 and AVX-512
builds; :mod:`fastprep._kernels.isa` chooses one set (``FASTPREP_ISA``, ``set_isa``). All
variants give bit-identical results.

Coefficients: :data:`fastprep._kernels.coeffs.YUV_COEFFS` (JFIF 1.02, section 7).
Arithmetic is float32; ``gain`` multiplies coefficients and offsets (computed in double,
rounded once to float32), so gain = 1/255 yields the scaled result in one pass.
"""

from libc.stdint cimport uint8_t

from fastprep._kernels.coeffs import YUV_COEFFS as COEFFS

ctypedef fused pixel_t:
    uint8_t
    float

cdef struct Coeffs:
    # rows (m0, m1, m2, offset) for Y, U, V, then the masked pixel's (Y, U, V)
    float k[15]


cdef Coeffs _coeffs(double gain, double fill):
    cdef Coeffs c
    cdef int i, j
    cdef float f = <float>fill
    for i in range(3):
        for j in range(4):
            c.k[4 * i + j] = <float>(COEFFS[i][j] * gain)
    # the masked pixel is (fill, fill, fill) pushed through the same float32 arithmetic
    for i in range(3):
        c.k[12 + i] = c.k[4 * i] * f + c.k[4 * i + 1] * f + c.k[4 * i + 2] * f + c.k[4 * i + 3]
    return c


cdef extern from "_color_kernels.h":
    int fp_cpu_level() noexcept nogil
    int fp_select(int requested) noexcept nogil
    ctypedef struct fp_table:
        void (*yuv_u8)(const uint8_t*, const uint8_t*, const uint8_t*, float*, float*,
                       float*, Py_ssize_t, const float*) noexcept nogil
        void (*yuv_f32)(const float*, const float*, const float*, float*, float*,
                        float*, Py_ssize_t, const float*) noexcept nogil
        void (*yuv_masked_u8)(const uint8_t*, const uint8_t*, const uint8_t*,
                              const uint8_t*, float*, float*, float*, Py_ssize_t,
                              const float*) noexcept nogil
        void (*yuv_masked_f32)(const float*, const float*, const float*, const uint8_t*,
                               float*, float*, float*, Py_ssize_t, const float*) noexcept nogil
        void (*scale_u8)(const uint8_t*, float*, Py_ssize_t) noexcept nogil
        void (*scale_f32)(const float*, float*, Py_ssize_t) noexcept nogil
        void (*affine_u8)(const uint8_t*, float*, Py_ssize_t, float, float) noexcept nogil
        void (*affine_f32)(const float*, float*, Py_ssize_t, float, float) noexcept nogil
    fp_table fp_k


def cpu_level():
    """The highest variant this CPU (and OS) supports: 0 baseline, 1 AVX2, 2 AVX-512."""
    return fp_cpu_level()


def select_level(int requested):
    """Use variant min(``requested``, :func:`cpu_level`); return the level now in use. Not
    thread-safe; :func:`fastprep._kernels.isa.set_isa` is the API that calls it."""
    return fp_select(requested)


cdef inline void _yuv_span(const pixel_t* r, const pixel_t* g, const pixel_t* b,
                           float* y, float* u, float* v, Py_ssize_t n,
                           const float* c) noexcept nogil:
    if pixel_t is uint8_t:
        fp_k.yuv_u8(r, g, b, y, u, v, n, c)
    else:
        fp_k.yuv_f32(r, g, b, y, u, v, n, c)


cdef inline void _yuv_span_masked(const pixel_t* r, const pixel_t* g, const pixel_t* b,
                                  const uint8_t* mask, float* y, float* u, float* v,
                                  Py_ssize_t n, const float* c) noexcept nogil:
    if pixel_t is uint8_t:
        fp_k.yuv_masked_u8(r, g, b, mask, y, u, v, n, c)
    else:
        fp_k.yuv_masked_f32(r, g, b, mask, y, u, v, n, c)


cdef _check_last_axis(Py_ssize_t src_stride, Py_ssize_t itemsize, Py_ssize_t dst_stride,
                      Py_ssize_t length):
    if length > 1 and (src_stride != itemsize or dst_stride != sizeof(float)):
        raise ValueError("the last axis of src and dst must be contiguous")


def yuv(const pixel_t[:, :, :] src, float[:, :, :] dst, double gain):
    """dst[N, 3, P] = gain * YUV(src[N, 3, P]), float32.

    The last axis must be contiguous; the others may be strided (a slice of pixels of a
    C-contiguous batch, as :mod:`fastprep.functional` hands to its threads).
    """
    _check_last_axis(src.strides[2], sizeof(pixel_t), dst.strides[2], src.shape[2])
    cdef Coeffs c = _coeffs(gain, 0.0)
    cdef Py_ssize_t n
    if src.shape[2] == 0:
        return
    with nogil:
        for n in range(src.shape[0]):
            _yuv_span(&src[n, 0, 0], &src[n, 1, 0], &src[n, 2, 0],
                      &dst[n, 0, 0], &dst[n, 1, 0], &dst[n, 2, 0], src.shape[2], c.k)


def mask_yuv(const pixel_t[:, :, :, :] src, const uint8_t[:, ::1] mask,
             float[:, :, :, :] dst, double fill, double gain):
    """dst[N, 3, H, W] = gain * YUV(fill where mask[H, >=W] else src[N, 3, H, W]).

    Rows (W) must be contiguous; the other axes may be strided.

    Masked pixels get the transform of (fill, fill, fill) computed with the same float32
    coefficients, so they equal the unfused mask-then-convert result.
    """
    cdef Coeffs c = _coeffs(gain, fill)
    cdef Py_ssize_t n, row
    if src.shape[3] == 0:
        return
    _check_last_axis(src.strides[3], sizeof(pixel_t), dst.strides[3], src.shape[3])
    with nogil:
        for n in range(src.shape[0]):
            for row in range(src.shape[2]):
                _yuv_span_masked(&src[n, 0, row, 0], &src[n, 1, row, 0], &src[n, 2, row, 0],
                                 &mask[row, 0], &dst[n, 0, row, 0], &dst[n, 1, row, 0],
                                 &dst[n, 2, row, 0], src.shape[3], c.k)


cdef inline void _scale_span(const pixel_t* src, float* dst, Py_ssize_t n) noexcept nogil:
    if pixel_t is uint8_t:
        fp_k.scale_u8(src, dst, n)
    else:
        fp_k.scale_f32(src, dst, n)


def scale(const pixel_t[::1] src, float[::1] dst):
    """dst = src / 255 (float32), flat arrays."""
    cdef Py_ssize_t n = src.shape[0]
    if n:
        with nogil:
            _scale_span(&src[0], &dst[0], n)


cdef inline void _affine_span(const pixel_t* src, float* dst, Py_ssize_t n, float gain,
                              float bias) noexcept nogil:
    if pixel_t is uint8_t:
        fp_k.affine_u8(src, dst, n, gain, bias)
    else:
        fp_k.affine_f32(src, dst, n, gain, bias)


def affine(const pixel_t[:, :, :] src, float[:, :, :] dst, gain, bias):
    """dst[N, C, P] = src[N, C, P] * gain[c] + bias[c] (float32: one rounding for the
    product, one for the sum), on the calling thread.

    ``gain`` and ``bias`` hold C numbers each, rounded to float32 here. The last axis must
    be contiguous; the others may be strided (a slice of pixels of a C-contiguous batch,
    as :mod:`fastprep.functional` hands to its threads).
    """
    cdef Py_ssize_t n, c
    cdef Py_ssize_t channels = src.shape[1], count = src.shape[2]
    if len(gain) != channels or len(bias) != channels:
        raise ValueError(f"gain and bias need {channels} values each, got {len(gain)} and {len(bias)}")
    if count == 0:
        return
    _check_last_axis(src.strides[2], sizeof(pixel_t), dst.strides[2], count)
    cdef float g[4]
    cdef float o[4]
    if channels > 4:
        raise ValueError(f"at most 4 channels, got {channels}")
    for c in range(channels):
        g[c] = <float>gain[c]
        o[c] = <float>bias[c]
    with nogil:
        for n in range(src.shape[0]):
            for c in range(channels):
                _affine_span(&src[n, c, 0], &dst[n, c, 0], count, g[c], o[c])
