# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Cython kernels: RGB -> YUV (BT.601 full range), scale by 1/255, and the fused paths.

Private: callers (:mod:`fastprep.functional`) pass validated, C-contiguous arrays of the
documented shapes. Every kernel writes each output element exactly once and releases
the GIL. ``nthreads`` > 1 splits the work with OpenMP; 1 (the value inside DataLoader
workers, where torch sets one thread) runs serially without entering OpenMP at all.

Coefficients: JPEG File Interchange Format 1.02 (ITU-T T.871), section 7, the
BT.601 full-range YCbCr transform:
    Y =  0.299   R + 0.587   G + 0.114   B
    U = -0.16874 R - 0.33126 G + 0.5     B + 128
    V =  0.5     R - 0.41869 G - 0.08131 B + 128
Arithmetic is float32; ``gain`` multiplies coefficients and offsets (computed in double,
rounded once to float32), so gain = 1/255 yields the scaled result in one pass.
"""

from cython.parallel cimport prange
from libc.stdint cimport uint8_t

ctypedef fused pixel_t:
    uint8_t
    float

COEFFS = (
    (0.299, 0.587, 0.114, 0.0),
    (-0.16874, -0.33126, 0.5, 128.0),
    (0.5, -0.41869, -0.08131, 128.0),
)

cdef enum:
    CHUNK = 8192   # pixels per parallel task in the unmasked kernels

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


cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    /* Plain C so that `restrict` tells the compiler the planes do not alias and the loops
       vectorise; the AVX2 clone is picked at load time (no FMA: results do not depend on
       the machine). */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    #define FP_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #define FP_CLONES
    #endif
    #include <string.h>
    static inline float fp_blend(float a, float b, uint32_t take_b) {
        uint32_t ua, ub, r;
        float out;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        r = (ua & ~take_b) | (ub & take_b);
        memcpy(&out, &r, 4);
        return out;
    }
    #define FP_YUV_SPAN(NAME, T)                                                        \\
    FP_CLONES static void NAME(const T *restrict r, const T *restrict g,                \\
                               const T *restrict b, float *restrict y,                  \\
                               float *restrict u, float *restrict v, ptrdiff_t n,       \\
                               const float *restrict c) {                               \\
        const float m00 = c[0], m01 = c[1], m02 = c[2], o0 = c[3];                     \\
        const float m10 = c[4], m11 = c[5], m12 = c[6], o1 = c[7];                     \\
        const float m20 = c[8], m21 = c[9], m22 = c[10], o2 = c[11];                   \\
        for (ptrdiff_t i = 0; i < n; ++i) {                                             \\
            const float fr = (float)r[i], fg = (float)g[i], fb = (float)b[i];           \\
            y[i] = m00 * fr + m01 * fg + m02 * fb + o0;                                 \\
            u[i] = m10 * fr + m11 * fg + m12 * fb + o1;                                 \\
            v[i] = m20 * fr + m21 * fg + m22 * fb + o2;                                 \\
        }                                                                               \\
    }
    #define FP_YUV_SPAN_MASKED(NAME, T)                                                 \\
    FP_CLONES static void NAME(const T *restrict r, const T *restrict g,                \\
                               const T *restrict b, const uint8_t *restrict mask,       \\
                               float *restrict y, float *restrict u, float *restrict v, \\
                               ptrdiff_t n, const float *restrict c) {                  \\
        const float m00 = c[0], m01 = c[1], m02 = c[2], o0 = c[3];                     \\
        const float m10 = c[4], m11 = c[5], m12 = c[6], o1 = c[7];                     \\
        const float m20 = c[8], m21 = c[9], m22 = c[10], o2 = c[11];                   \\
        const float fy = c[12], fu = c[13], fv = c[14];                                 \\
        for (ptrdiff_t i = 0; i < n; ++i) {                                             \\
            const float fr = (float)r[i], fg = (float)g[i], fb = (float)b[i];           \\
            const float ty = m00 * fr + m01 * fg + m02 * fb + o0;                       \\
            const float tu = m10 * fr + m11 * fg + m12 * fb + o1;                       \\
            const float tv = m20 * fr + m21 * fg + m22 * fb + o2;                       \\
            /* select by bit blend: a ternary on floats blocks vectorisation */         \\
            const uint32_t k = 0u - (uint32_t)(mask[i] != 0);                           \\
            y[i] = fp_blend(ty, fy, k);                                                 \\
            u[i] = fp_blend(tu, fu, k);                                                 \\
            v[i] = fp_blend(tv, fv, k);                                                 \\
        }                                                                               \\
    }
    #define FP_SCALE_SPAN(NAME, T)                                                      \\
    FP_CLONES static void NAME(const T *restrict src, float *restrict dst, ptrdiff_t n) { \\
        /* a true division, not a reciprocal multiply, so the result equals x / 255 */  \\
        for (ptrdiff_t i = 0; i < n; ++i) dst[i] = (float)src[i] / 255.0f;             \\
    }
    FP_YUV_SPAN(fp_yuv_span_u8, uint8_t)
    FP_YUV_SPAN(fp_yuv_span_f32, float)
    FP_YUV_SPAN_MASKED(fp_yuv_span_masked_u8, uint8_t)
    FP_YUV_SPAN_MASKED(fp_yuv_span_masked_f32, float)
    FP_SCALE_SPAN(fp_scale_span_u8, uint8_t)
    FP_SCALE_SPAN(fp_scale_span_f32, float)
    """
    void fp_yuv_span_u8(const uint8_t* r, const uint8_t* g, const uint8_t* b, float* y,
                        float* u, float* v, Py_ssize_t n, const float* c) noexcept nogil
    void fp_yuv_span_f32(const float* r, const float* g, const float* b, float* y,
                         float* u, float* v, Py_ssize_t n, const float* c) noexcept nogil
    void fp_yuv_span_masked_u8(const uint8_t* r, const uint8_t* g, const uint8_t* b,
                               const uint8_t* mask, float* y, float* u, float* v,
                               Py_ssize_t n, const float* c) noexcept nogil
    void fp_yuv_span_masked_f32(const float* r, const float* g, const float* b,
                                const uint8_t* mask, float* y, float* u, float* v,
                                Py_ssize_t n, const float* c) noexcept nogil
    void fp_scale_span_u8(const uint8_t* src, float* dst, Py_ssize_t n) noexcept nogil
    void fp_scale_span_f32(const float* src, float* dst, Py_ssize_t n) noexcept nogil


cdef inline void _yuv_span(const pixel_t* r, const pixel_t* g, const pixel_t* b,
                           float* y, float* u, float* v, Py_ssize_t n,
                           const float* c) noexcept nogil:
    if pixel_t is uint8_t:
        fp_yuv_span_u8(r, g, b, y, u, v, n, c)
    else:
        fp_yuv_span_f32(r, g, b, y, u, v, n, c)


cdef inline void _yuv_span_masked(const pixel_t* r, const pixel_t* g, const pixel_t* b,
                                  const uint8_t* mask, float* y, float* u, float* v,
                                  Py_ssize_t n, const float* c) noexcept nogil:
    if pixel_t is uint8_t:
        fp_yuv_span_masked_u8(r, g, b, mask, y, u, v, n, c)
    else:
        fp_yuv_span_masked_f32(r, g, b, mask, y, u, v, n, c)


cdef inline void _yuv_task(const pixel_t[:, :, ::1] src, float[:, :, ::1] dst,
                           Py_ssize_t task, Py_ssize_t per_image,
                           const float* c) noexcept nogil:
    cdef Py_ssize_t n = task // per_image
    cdef Py_ssize_t start = (task % per_image) * CHUNK
    cdef Py_ssize_t count = src.shape[2] - start
    if count > CHUNK:
        count = CHUNK
    _yuv_span(&src[n, 0, start], &src[n, 1, start], &src[n, 2, start],
              &dst[n, 0, start], &dst[n, 1, start], &dst[n, 2, start], count, c)


def yuv(const pixel_t[:, :, ::1] src, float[:, :, ::1] dst, double gain, int nthreads):
    """dst[N, 3, P] = gain * YUV(src[N, 3, P]), float32."""
    cdef Coeffs c = _coeffs(gain, 0.0)
    cdef Py_ssize_t per_image = (src.shape[2] + CHUNK - 1) // CHUNK
    cdef Py_ssize_t tasks = src.shape[0] * per_image
    cdef Py_ssize_t t
    if nthreads > 1 and tasks > 1:
        for t in prange(tasks, nogil=True, schedule="static", num_threads=nthreads):
            _yuv_task(src, dst, t, per_image, c.k)
    else:
        with nogil:
            for t in range(tasks):
                _yuv_task(src, dst, t, per_image, c.k)


cdef inline void _masked_row(const pixel_t[:, :, :, ::1] src, const uint8_t[:, ::1] mask,
                             float[:, :, :, ::1] dst, Py_ssize_t task, const float* c) noexcept nogil:
    cdef Py_ssize_t height = src.shape[2]
    cdef Py_ssize_t n = task // height
    cdef Py_ssize_t row = task % height
    _yuv_span_masked(&src[n, 0, row, 0], &src[n, 1, row, 0], &src[n, 2, row, 0],
                     &mask[row, 0], &dst[n, 0, row, 0], &dst[n, 1, row, 0],
                     &dst[n, 2, row, 0], src.shape[3], c)


def mask_yuv(const pixel_t[:, :, :, ::1] src, const uint8_t[:, ::1] mask,
             float[:, :, :, ::1] dst, double fill, double gain, int nthreads):
    """dst[N, 3, H, W] = gain * YUV(fill where mask[H, >=W] else src[N, 3, H, W]).

    Masked pixels get the transform of (fill, fill, fill) computed with the same float32
    coefficients, so they equal the unfused mask-then-convert result.
    """
    cdef Coeffs c = _coeffs(gain, fill)
    cdef Py_ssize_t tasks = src.shape[0] * src.shape[2]
    cdef Py_ssize_t t
    if src.shape[3] == 0:
        return
    if nthreads > 1 and tasks > 1:
        for t in prange(tasks, nogil=True, schedule="static", num_threads=nthreads):
            _masked_row(src, mask, dst, t, c.k)
    else:
        with nogil:
            for t in range(tasks):
                _masked_row(src, mask, dst, t, c.k)


cdef inline void _scale_span(const pixel_t* src, float* dst, Py_ssize_t n) noexcept nogil:
    if pixel_t is uint8_t:
        fp_scale_span_u8(src, dst, n)
    else:
        fp_scale_span_f32(src, dst, n)


def scale(const pixel_t[::1] src, float[::1] dst, int nthreads):
    """dst = src / 255 (float32), flat arrays."""
    cdef Py_ssize_t n = src.shape[0]
    cdef Py_ssize_t tasks = (n + CHUNK - 1) // CHUNK
    cdef Py_ssize_t t, start, count
    if nthreads > 1 and tasks > 1:
        for t in prange(tasks, nogil=True, schedule="static", num_threads=nthreads):
            start = t * CHUNK
            count = n - start
            if count > CHUNK:
                count = CHUNK
            _scale_span(&src[start], &dst[start], count)
    elif n:
        with nogil:
            _scale_span(&src[0], &dst[0], n)

