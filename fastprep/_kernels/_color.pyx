# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Cython kernels: RGB -> YUV (BT.601 full range), scale by 1/255, and the fused paths.

Private: callers (:mod:`fastprep.functional`) pass validated, C-contiguous arrays of the
documented shapes. Every kernel writes each output element exactly once and releases
the GIL. ``nthreads`` > 1 splits the work with OpenMP; 1 runs serially without entering
OpenMP at all (:func:`fastprep.functional.kernel_threads` picks 1 for per-sample sizes).
Parallel loops hand out tasks dynamically, so a thread that the OS does not schedule
(another process busy on its core) leaves its share to the threads that run instead of
making them wait for it (see docs/kernels.md).

The span kernels exist in baseline (SSE2), AVX2 and AVX-512 builds; one set is chosen at
import from the CPU, capped by ``FASTPREP_ISA`` (``auto``, ``baseline``, ``avx2``,
``avx512``); :func:`active_isa` names it. All variants give bit-identical results.

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
    #include <string.h>
    /* Runtime ISA dispatch. Every span kernel is compiled three times from one macro:
       for AVX-512 (F/BW/VL/DQ), for AVX2 and for the x86-64 baseline (SSE2). fp_select
       picks one set at import, from the CPU (__builtin_cpu_supports also checks that the
       OS saves the vector state) capped by a requested level; callers go through the
       fp_k table. The setup.py flags include -ffp-contract=off, and no variant enables
       FMA, so each element is the same sequence of float32 roundings on every variant:
       outputs are bit-identical across ISAs. Plain C so that `restrict` tells the
       compiler the planes do not alias and the loops vectorise. */
    #if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    #define FP_X86 1
    #define FP_T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
    #define FP_T_AVX2 __attribute__((target("avx2")))
    #else
    #define FP_X86 0
    #define FP_T_AVX512
    #define FP_T_AVX2
    #endif
    #define FP_T_BASE

    static inline float fp_blend(float a, float b, uint32_t take_b) {
        uint32_t ua, ub, r;
        float out;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        r = (ua & ~take_b) | (ub & take_b);
        memcpy(&out, &r, 4);
        return out;
    }
    #define FP_YUV_SPAN(NAME, T, ATTR)                                                  \\
    ATTR static void NAME(const T *restrict r, const T *restrict g,                     \\
                          const T *restrict b, float *restrict y,                       \\
                          float *restrict u, float *restrict v, ptrdiff_t n,            \\
                          const float *restrict c) {                                    \\
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
    #define FP_YUV_SPAN_MASKED(NAME, T, ATTR)                                           \\
    ATTR static void NAME(const T *restrict r, const T *restrict g,                     \\
                          const T *restrict b, const uint8_t *restrict mask,            \\
                          float *restrict y, float *restrict u, float *restrict v,      \\
                          ptrdiff_t n, const float *restrict c) {                       \\
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
    #define FP_SCALE_SPAN(NAME, T, ATTR)                                                \\
    ATTR static void NAME(const T *restrict src, float *restrict dst, ptrdiff_t n) {    \\
        /* a true division, not a reciprocal multiply, so the result equals x / 255 */  \\
        for (ptrdiff_t i = 0; i < n; ++i) dst[i] = (float)src[i] / 255.0f;             \\
    }
    #define FP_AFFINE_SPAN(NAME, T, ATTR)                                               \\
    ATTR static void NAME(const T *restrict src, float *restrict dst, ptrdiff_t n,      \\
                          float gain, float bias) {                                     \\
        for (ptrdiff_t i = 0; i < n; ++i) dst[i] = (float)src[i] * gain + bias;        \\
    }
    #define FP_VARIANT(SUFFIX, ATTR)                                                    \\
    FP_YUV_SPAN(fp_yuv_u8_##SUFFIX, uint8_t, ATTR)                                     \\
    FP_YUV_SPAN(fp_yuv_f32_##SUFFIX, float, ATTR)                                      \\
    FP_YUV_SPAN_MASKED(fp_yuv_masked_u8_##SUFFIX, uint8_t, ATTR)                       \\
    FP_YUV_SPAN_MASKED(fp_yuv_masked_f32_##SUFFIX, float, ATTR)                        \\
    FP_SCALE_SPAN(fp_scale_u8_##SUFFIX, uint8_t, ATTR)                                 \\
    FP_SCALE_SPAN(fp_scale_f32_##SUFFIX, float, ATTR)                                  \\
    FP_AFFINE_SPAN(fp_affine_u8_##SUFFIX, uint8_t, ATTR)                               \\
    FP_AFFINE_SPAN(fp_affine_f32_##SUFFIX, float, ATTR)
    FP_VARIANT(base, FP_T_BASE)
    #if FP_X86
    FP_VARIANT(avx2, FP_T_AVX2)
    FP_VARIANT(avx512, FP_T_AVX512)
    #endif

    typedef struct {
        void (*yuv_u8)(const uint8_t *, const uint8_t *, const uint8_t *, float *, float *,
                       float *, ptrdiff_t, const float *);
        void (*yuv_f32)(const float *, const float *, const float *, float *, float *,
                        float *, ptrdiff_t, const float *);
        void (*yuv_masked_u8)(const uint8_t *, const uint8_t *, const uint8_t *,
                              const uint8_t *, float *, float *, float *, ptrdiff_t,
                              const float *);
        void (*yuv_masked_f32)(const float *, const float *, const float *, const uint8_t *,
                               float *, float *, float *, ptrdiff_t, const float *);
        void (*scale_u8)(const uint8_t *, float *, ptrdiff_t);
        void (*scale_f32)(const float *, float *, ptrdiff_t);
        void (*affine_u8)(const uint8_t *, float *, ptrdiff_t, float, float);
        void (*affine_f32)(const float *, float *, ptrdiff_t, float, float);
    } fp_table;
    #define FP_TABLE(SUFFIX)                                                            \\
        {fp_yuv_u8_##SUFFIX, fp_yuv_f32_##SUFFIX, fp_yuv_masked_u8_##SUFFIX,           \\
         fp_yuv_masked_f32_##SUFFIX, fp_scale_u8_##SUFFIX, fp_scale_f32_##SUFFIX,      \\
         fp_affine_u8_##SUFFIX, fp_affine_f32_##SUFFIX}
    /* levels: 0 baseline, 1 AVX2, 2 AVX-512 */
    static const fp_table fp_tables[3] = {
        FP_TABLE(base),
    #if FP_X86
        FP_TABLE(avx2), FP_TABLE(avx512),
    #else
        FP_TABLE(base), FP_TABLE(base),
    #endif
    };
    static fp_table fp_k = FP_TABLE(base);

    /* The highest level this CPU (and OS) supports. */
    static int fp_cpu_level(void) {
    #if FP_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
            return 2;
        if (__builtin_cpu_supports("avx2"))
            return 1;
    #endif
        return 0;
    }
    /* Use min(requested, supported); return the level now in use. */
    static int fp_select(int requested) {
        int level = fp_cpu_level();
        if (requested < level) level = requested;
        if (level < 0) level = 0;
        fp_k = fp_tables[level];
        return level;
    }
    """
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


ISA_LEVELS = ("baseline", "avx2", "avx512")
"""Names of the compiled variants, lowest first (``FASTPREP_ISA`` takes one, or ``auto``)."""


def supported_isas():
    """The variants this CPU can run, lowest first."""
    return ISA_LEVELS[:fp_cpu_level() + 1]


def set_isa(name):
    """Use variant ``name`` (``auto``: the best this CPU supports); return the variant in
    use, which is lower than ``name`` when the CPU lacks it. Not thread-safe: call it
    before kernels run (it exists for tests and benchmarks)."""
    if name == "auto":
        level = len(ISA_LEVELS) - 1
    elif name in ISA_LEVELS:
        level = ISA_LEVELS.index(name)
    else:
        raise ValueError(f"FASTPREP_ISA must be one of auto, {', '.join(ISA_LEVELS)}; got {name!r}")
    _active[0] = ISA_LEVELS[fp_select(level)]
    return _active[0]


def active_isa():
    """The variant the kernels use now: ``baseline``, ``avx2`` or ``avx512``."""
    return _active[0]


_active = [None]


def _init_isa():
    import os
    import warnings

    requested = os.environ.get("FASTPREP_ISA", "auto").strip().lower() or "auto"
    try:
        set_isa(requested)
    except ValueError as exc:
        # an import must not fail on a typo in an environment variable
        warnings.warn(f"{exc}; using auto", RuntimeWarning, stacklevel=2)
        set_isa("auto")


_init_isa()


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


cdef inline void _yuv_task(const pixel_t[:, :, :] src, float[:, :, :] dst,
                           Py_ssize_t task, Py_ssize_t per_image,
                           const float* c) noexcept nogil:
    cdef Py_ssize_t n = task // per_image
    cdef Py_ssize_t start = (task % per_image) * CHUNK
    cdef Py_ssize_t count = src.shape[2] - start
    if count > CHUNK:
        count = CHUNK
    _yuv_span(&src[n, 0, start], &src[n, 1, start], &src[n, 2, start],
              &dst[n, 0, start], &dst[n, 1, start], &dst[n, 2, start], count, c)


def yuv(const pixel_t[:, :, :] src, float[:, :, :] dst, double gain, int nthreads):
    """dst[N, 3, P] = gain * YUV(src[N, 3, P]), float32.

    The last axis must be contiguous; the others may be strided (a slice of pixels of a
    C-contiguous batch, as :mod:`fastprep.functional` hands to its threads).
    """
    _check_last_axis(src.strides[2], sizeof(pixel_t), dst.strides[2], src.shape[2])
    cdef Coeffs c = _coeffs(gain, 0.0)
    cdef Py_ssize_t per_image = (src.shape[2] + CHUNK - 1) // CHUNK
    cdef Py_ssize_t tasks = src.shape[0] * per_image
    cdef Py_ssize_t t
    if nthreads > 1 and tasks > 1:
        for t in prange(tasks, nogil=True, schedule="dynamic", chunksize=1, num_threads=nthreads):
            _yuv_task(src, dst, t, per_image, c.k)
    else:
        with nogil:
            for t in range(tasks):
                _yuv_task(src, dst, t, per_image, c.k)


cdef inline void _masked_row(const pixel_t[:, :, :, :] src, const uint8_t[:, ::1] mask,
                             float[:, :, :, :] dst, Py_ssize_t task, const float* c) noexcept nogil:
    cdef Py_ssize_t height = src.shape[2]
    cdef Py_ssize_t n = task // height
    cdef Py_ssize_t row = task % height
    _yuv_span_masked(&src[n, 0, row, 0], &src[n, 1, row, 0], &src[n, 2, row, 0],
                     &mask[row, 0], &dst[n, 0, row, 0], &dst[n, 1, row, 0],
                     &dst[n, 2, row, 0], src.shape[3], c)


def mask_yuv(const pixel_t[:, :, :, :] src, const uint8_t[:, ::1] mask,
             float[:, :, :, :] dst, double fill, double gain, int nthreads):
    """dst[N, 3, H, W] = gain * YUV(fill where mask[H, >=W] else src[N, 3, H, W]).

    Rows (W) must be contiguous; the other axes may be strided.

    Masked pixels get the transform of (fill, fill, fill) computed with the same float32
    coefficients, so they equal the unfused mask-then-convert result.
    """
    cdef Coeffs c = _coeffs(gain, fill)
    cdef Py_ssize_t tasks = src.shape[0] * src.shape[2]
    cdef Py_ssize_t t
    if src.shape[3] == 0:
        return
    _check_last_axis(src.strides[3], sizeof(pixel_t), dst.strides[3], src.shape[3])
    if nthreads > 1 and tasks > 1:
        for t in prange(tasks, nogil=True, schedule="dynamic", chunksize=4, num_threads=nthreads):
            _masked_row(src, mask, dst, t, c.k)
    else:
        with nogil:
            for t in range(tasks):
                _masked_row(src, mask, dst, t, c.k)


cdef inline void _scale_span(const pixel_t* src, float* dst, Py_ssize_t n) noexcept nogil:
    if pixel_t is uint8_t:
        fp_k.scale_u8(src, dst, n)
    else:
        fp_k.scale_f32(src, dst, n)


def scale(const pixel_t[::1] src, float[::1] dst, int nthreads):
    """dst = src / 255 (float32), flat arrays."""
    cdef Py_ssize_t n = src.shape[0]
    cdef Py_ssize_t tasks = (n + CHUNK - 1) // CHUNK
    cdef Py_ssize_t t, start, count
    if nthreads > 1 and tasks > 1:
        for t in prange(tasks, nogil=True, schedule="dynamic", chunksize=1, num_threads=nthreads):
            start = t * CHUNK
            count = n - start
            if count > CHUNK:
                count = CHUNK
            _scale_span(&src[start], &dst[start], count)
    elif n:
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
