/* The C span kernels of fastprep._kernels._color: _color.pyx includes this header (the
   sdist ships it beside the .pyx). */
#ifndef FASTPREP_COLOR_KERNELS_H
#define FASTPREP_COLOR_KERNELS_H
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
#define FP_YUV_SPAN(NAME, T, ATTR)                                                  \
ATTR static void NAME(const T *restrict r, const T *restrict g,                     \
                      const T *restrict b, float *restrict y,                       \
                      float *restrict u, float *restrict v, ptrdiff_t n,            \
                      const float *restrict c) {                                    \
    const float m00 = c[0], m01 = c[1], m02 = c[2], o0 = c[3];                     \
    const float m10 = c[4], m11 = c[5], m12 = c[6], o1 = c[7];                     \
    const float m20 = c[8], m21 = c[9], m22 = c[10], o2 = c[11];                   \
    for (ptrdiff_t i = 0; i < n; ++i) {                                             \
        const float fr = (float)r[i], fg = (float)g[i], fb = (float)b[i];           \
        y[i] = m00 * fr + m01 * fg + m02 * fb + o0;                                 \
        u[i] = m10 * fr + m11 * fg + m12 * fb + o1;                                 \
        v[i] = m20 * fr + m21 * fg + m22 * fb + o2;                                 \
    }                                                                               \
}
#define FP_YUV_SPAN_MASKED(NAME, T, ATTR)                                           \
ATTR static void NAME(const T *restrict r, const T *restrict g,                     \
                      const T *restrict b, const uint8_t *restrict mask,            \
                      float *restrict y, float *restrict u, float *restrict v,      \
                      ptrdiff_t n, const float *restrict c) {                       \
    const float m00 = c[0], m01 = c[1], m02 = c[2], o0 = c[3];                     \
    const float m10 = c[4], m11 = c[5], m12 = c[6], o1 = c[7];                     \
    const float m20 = c[8], m21 = c[9], m22 = c[10], o2 = c[11];                   \
    const float fy = c[12], fu = c[13], fv = c[14];                                 \
    for (ptrdiff_t i = 0; i < n; ++i) {                                             \
        const float fr = (float)r[i], fg = (float)g[i], fb = (float)b[i];           \
        const float ty = m00 * fr + m01 * fg + m02 * fb + o0;                       \
        const float tu = m10 * fr + m11 * fg + m12 * fb + o1;                       \
        const float tv = m20 * fr + m21 * fg + m22 * fb + o2;                       \
        /* select by bit blend: a ternary on floats blocks vectorisation */         \
        const uint32_t k = 0u - (uint32_t)(mask[i] != 0);                           \
        y[i] = fp_blend(ty, fy, k);                                                 \
        u[i] = fp_blend(tu, fu, k);                                                 \
        v[i] = fp_blend(tv, fv, k);                                                 \
    }                                                                               \
}
#define FP_SCALE_SPAN(NAME, T, ATTR)                                                \
ATTR static void NAME(const T *restrict src, float *restrict dst, ptrdiff_t n) {    \
    /* a true division, not a reciprocal multiply, so the result equals x / 255 */  \
    for (ptrdiff_t i = 0; i < n; ++i) dst[i] = (float)src[i] / 255.0f;             \
}
#define FP_AFFINE_SPAN(NAME, T, ATTR)                                               \
ATTR static void NAME(const T *restrict src, float *restrict dst, ptrdiff_t n,      \
                      float gain, float bias) {                                     \
    for (ptrdiff_t i = 0; i < n; ++i) dst[i] = (float)src[i] * gain + bias;        \
}
#define FP_VARIANT(SUFFIX, ATTR)                                                    \
FP_YUV_SPAN(fp_yuv_u8_##SUFFIX, uint8_t, ATTR)                                     \
FP_YUV_SPAN(fp_yuv_f32_##SUFFIX, float, ATTR)                                      \
FP_YUV_SPAN_MASKED(fp_yuv_masked_u8_##SUFFIX, uint8_t, ATTR)                       \
FP_YUV_SPAN_MASKED(fp_yuv_masked_f32_##SUFFIX, float, ATTR)                        \
FP_SCALE_SPAN(fp_scale_u8_##SUFFIX, uint8_t, ATTR)                                 \
FP_SCALE_SPAN(fp_scale_f32_##SUFFIX, float, ATTR)                                  \
FP_AFFINE_SPAN(fp_affine_u8_##SUFFIX, uint8_t, ATTR)                               \
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
#define FP_TABLE(SUFFIX)                                                            \
    {fp_yuv_u8_##SUFFIX, fp_yuv_f32_##SUFFIX, fp_yuv_masked_u8_##SUFFIX,           \
     fp_yuv_masked_f32_##SUFFIX, fp_scale_u8_##SUFFIX, fp_scale_f32_##SUFFIX,      \
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

#endif /* FASTPREP_COLOR_KERNELS_H */
