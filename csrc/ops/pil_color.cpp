// PIL twins of the colour and point kernels: what torchvision's transforms compute on a PIL
// image (v1 ops before ToTensor, v2 ops before PILToTensor), which is Pillow's arithmetic, not
// ATen's. Each `pil_<name>` kernel reads the same PixelStep fields as the kernel `<name>` it
// stands in for (adjust_color.cpp, point_ops.cpp, sharpness.cpp), so the same draws serve
// both numerics; a pipeline on PIL images swaps the ids through its kernel map
// (native_draw.h: DrawContext::set_kernel_map).
//
// Written from Pillow's libImaging (Blend.c, Convert.c, Filter.c, the point op) and PIL's
// ImageEnhance / ImageOps, as torchvision's _functional_pil calls them:
//
// * ImageEnhance (brightness, contrast, colour, sharpness) is Image.blend(degenerate, image,
//   factor): `in1 + alpha * (in2 - in1)` in float32 (alpha = (float)factor), clamped to
//   [0, 255] and truncated;
// * convert("L") is `(r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16`;
// * the hue goes through convert("HSV") and back (Convert.c's rgb2hsv / hsv2rgb, their mix
//   of float and double), with numpy's uint8 wraparound on H;
// * ImageOps' point ops are per-channel lookup tables (Python ints clipped to [0, 255]).
//
// Pillow's numerics are not a standard (Pillow-SIMD rounds otherwise), so these kernels are
// used only after fastprep/transforms/_pil_ops.py has proved each against the installed
// Pillow (through torchvision's functional) on probe images. Build flags keep float
// expressions unfused (-ffp-contract=off), as Pillow's baseline builds compute them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

constexpr int32_t kLumaR = 19595, kLumaG = 38470, kLumaB = 7471, kLumaRound = 0x8000;

FP_ALWAYS_INLINE uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {
  return (uint8_t)(((int32_t)r * kLumaR + (int32_t)g * kLumaG + (int32_t)b * kLumaB + kLumaRound) >> 16);
}

// Blend.c: in1 + alpha * (in2 - in1) in float32, clamped, truncated.
FP_ALWAYS_INLINE uint8_t blend(int32_t in1, int32_t in2, float alpha) {
  float t = (float)in1 + alpha * (float)(in2 - in1);
  t = t < 0.0f ? 0.0f : t;
  t = t > 255.0f ? 255.0f : t;
  return (uint8_t)t;
}

void check_uint8(const Image& image, const char* name) {
  TORCH_CHECK(image.dtype == at::kByte, name, " runs on uint8 images, got ", image.dtype);
  TORCH_CHECK(image.channels == 1 || image.channels == 3, name, " runs on 1- or 3-channel images, got ",
              image.channels);
}

// Applies `lut` (256 entries per channel, channel c at lut + 256 * c) to every channel.
void apply_luts(Image& image, const uint8_t* lut) {
  const int64_t n = image.plane();
  for (int64_t c = 0; c < image.channels; c++) lut_span(image.u8() + c * n, n, lut + 256 * c);
}

// out[k] = luma of pixel k (out may be r).
FP_ALWAYS_INLINE void luma_rows_body(const uint8_t* r, const uint8_t* g, const uint8_t* b, int64_t n, uint8_t* out) {
  for (int64_t k = 0; k < n; k++) out[k] = luma(r[k], g[k], b[k]);
}
FP_VARIANTS(luma_rows, (const uint8_t* r, const uint8_t* g, const uint8_t* b, int64_t n, uint8_t* out),
            (r, g, b, n, out))

// The sum of the luma of n pixels (32-bit partial sums of at most 2^24 values of <= 255).
FP_ALWAYS_INLINE int64_t luma_sum_body(const uint8_t* __restrict r, const uint8_t* __restrict g,
                                       const uint8_t* __restrict b, int64_t n) {
  int64_t total = 0;
  for (int64_t k0 = 0; k0 < n; k0 += (int64_t)1 << 24) {
    const int64_t k1 = std::min(n, k0 + ((int64_t)1 << 24));
    uint32_t part = 0;
    for (int64_t k = k0; k < k1; k++) part += luma(r[k], g[k], b[k]);
    total += part;
  }
  return total;
}
FP_VARIANTS_RET(int64_t, luma_sum, (const uint8_t* __restrict r, const uint8_t* __restrict g,
                                    const uint8_t* __restrict b, int64_t n), (r, g, b, n))

FP_ALWAYS_INLINE int64_t byte_sum_body(const uint8_t* __restrict p, int64_t n) {
  int64_t total = 0;
  for (int64_t k0 = 0; k0 < n; k0 += (int64_t)1 << 24) {
    const int64_t k1 = std::min(n, k0 + ((int64_t)1 << 24));
    uint32_t part = 0;
    for (int64_t k = k0; k < k1; k++) part += p[k];
    total += part;
  }
  return total;
}
FP_VARIANTS_RET(int64_t, byte_sum, (const uint8_t* __restrict p, int64_t n), (p, n))

// ImageEnhance.Brightness: blend(black, image, factor).
void pil_brightness(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_adjust_brightness");
  const float alpha = (float)step.f[0];
  uint8_t lut[256];
  for (int v = 0; v < 256; v++) lut[v] = blend(0, v, alpha);
  lut_span(image.u8(), image.numel(), lut);
}

// ImageEnhance.Contrast: blend(the mean grey, image, factor); the mean is
// int(ImageStat.Stat(image.convert("L")).mean[0] + 0.5).
void pil_contrast(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_adjust_contrast");
  const int64_t n = image.plane();
  const uint8_t* px = image.u8();
  const int64_t sum = image.channels == 1 ? byte_sum(px, n) : luma_sum(px, px + n, px + 2 * n, n);
  const int32_t mean = n > 0 ? (int32_t)((double)sum / (double)n + 0.5) : 0;
  const float alpha = (float)step.f[0];
  uint8_t lut[256];
  for (int v = 0; v < 256; v++) lut[v] = blend(mean, v, alpha);
  lut_span(image.u8(), image.numel(), lut);
}

FP_ALWAYS_INLINE void saturation_rows_body(uint8_t* __restrict r, uint8_t* __restrict g, uint8_t* __restrict b,
                                           int64_t n, float alpha) {
  for (int64_t k = 0; k < n; k++) {
    const int32_t l = luma(r[k], g[k], b[k]);
    r[k] = blend(l, r[k], alpha);
    g[k] = blend(l, g[k], alpha);
    b[k] = blend(l, b[k], alpha);
  }
}
FP_VARIANTS(saturation_rows, (uint8_t* __restrict r, uint8_t* __restrict g, uint8_t* __restrict b, int64_t n,
                              float alpha), (r, g, b, n, alpha))

// ImageEnhance.Color: blend(image.convert("L").convert("RGB"), image, factor); an "L" image is
// its own degenerate (a copy).
void pil_saturation(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_adjust_saturation");
  if (image.channels == 1) return;
  const int64_t n = image.plane();
  uint8_t* r = image.u8();
  saturation_rows(r, r + n, r + 2 * n, n, (float)step.f[0]);
}

// C's round() (half away from zero) of x >= 0, without a libm call: the fraction x - trunc(x)
// is exact.
FP_ALWAYS_INLINE int round_nonnegative(double x) {
  const int t = (int)x;
  return t + (int)(x - (double)t >= 0.5);
}

// Convert.c's per-value steps of rgb2hsv / hsv2rgb, tabulated once (each entry computed with
// Pillow's own expression, so the tables hold its bits).
struct HsvTables {
  float quotient[256][256];    // [cr][d]: (float)d / (float)cr, rgb2hsv's rc, gc, bc
  int32_t saturation[256][256];  // [maxc][cr]: CLIP8((int)(s * 255.0)), s = cr / (float)maxc
  int32_t sector[256];         // [h]: (int)floor((float)h * 6.0 / 255.0) % 6
  float fraction[256];         // [h]: (float)((float)h * 6.0 / 255.0 - (float)i)
  float fs[256];               // [s]: (float)(((float)s) / 255.0)
  HsvTables() {
    for (int cr = 0; cr < 256; cr++)
      for (int d = 0; d < 256; d++) quotient[cr][d] = cr == 0 ? 0.0f : (float)d / (float)cr;
    for (int maxc = 0; maxc < 256; maxc++)
      for (int cr = 0; cr < 256; cr++) {
        const float sat = maxc == 0 ? 0.0f : (float)cr / (float)maxc;
        const int v = (int)((double)sat * 255.0);
        saturation[maxc][cr] = v < 0 ? 0 : v > 255 ? 255 : v;
      }
    for (int h = 0; h < 256; h++) {
      const double x = (double)(float)h * 6.0 / 255.0;
      const int i = (int)x;  // floor of a value >= 0
      sector[h] = i % 6;
      fraction[h] = (float)(x - (double)(float)i);
      fs[h] = (float)((double)(float)h / 255.0);
    }
  }
};

const HsvTables& hsv_tables() {
  static const HsvTables tables;  // 518 KB, built at the first hue step
  return tables;
}

// One pixel through Convert.c's rgb2hsv_row (following colorsys.py; its float and double
// steps as written, the per-value ones from HsvTables), H += shift (uint8 wraparound), and
// hsv2rgb. Pillow's fmod(h / 6 + 1, 1) of a value in [5/6, 2) is an exact subtraction
// (Sterbenz), its round()s of values >= 0 round_nonnegative.
FP_ALWAYS_INLINE void hue_pixel(uint8_t& pr, uint8_t& pg, uint8_t& pb, int32_t shift, const HsvTables& tab) {
  const int32_t r = pr, g = pg, b = pb;
  const int32_t maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
  const int32_t cr = maxc - minc;
  int32_t uh = 0, us = 0;
  if (cr != 0) {
    const float* q = tab.quotient[cr];
    const float rc = q[maxc - r], gc = q[maxc - g], bc = q[maxc - b];
    float h;
    if (r == maxc) {
      h = bc - gc;
    } else if (g == maxc) {
      h = (float)(2.0 + (double)rc - (double)bc);
    } else {
      h = (float)(4.0 + (double)gc - (double)rc);
    }
    const double wrapped = (double)h / 6.0 + 1.0;
    const float hw = (float)(wrapped >= 1.0 ? wrapped - 1.0 : wrapped);
    uh = std::min(std::max((int32_t)((double)hw * 255.0), 0), 255);
    us = tab.saturation[maxc][cr];
  }
  const int32_t v = maxc;
  if (us == 0) {
    pr = pg = pb = (uint8_t)v;
    return;
  }
  const int32_t hh = (uh + shift) & 255;
  const float f = tab.fraction[hh], fs = tab.fs[us];
  const double vd = (double)(float)v;
  const int32_t p = std::min(std::max(round_nonnegative(vd * (1.0 - (double)fs)), 0), 255);
  const int32_t q = std::min(std::max(round_nonnegative(vd * (1.0 - (double)(fs * f))), 0), 255);
  const int32_t t = std::min(std::max(round_nonnegative(vd * (1.0 - (double)fs * (1.0 - (double)f))), 0), 255);
  int32_t outr, outg, outb;
  switch (tab.sector[hh]) {
    case 0: outr = v, outg = t, outb = p; break;
    case 1: outr = q, outg = v, outb = p; break;
    case 2: outr = p, outg = v, outb = t; break;
    case 3: outr = p, outg = q, outb = v; break;
    case 4: outr = t, outg = p, outb = v; break;
    default: outr = v, outg = p, outb = q; break;
  }
  pr = (uint8_t)outr, pg = (uint8_t)outg, pb = (uint8_t)outb;
}

#if FP_HAVE_AVX2_TARGET
// hue_pixel on 8 pixels at a time: the same float and double operations lane by lane, the
// table look-ups as gathers, every branch as a select. Its double steps run on two halves of
// 4 lanes.
namespace hue_avx2 {

FP_TARGET_AVX2 inline __m256d lo_pd(__m256 x) { return _mm256_cvtps_pd(_mm256_castps256_ps128(x)); }
FP_TARGET_AVX2 inline __m256d hi_pd(__m256 x) { return _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)); }
FP_TARGET_AVX2 inline __m256 join_ps(__m128 lo, __m128 hi) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}
FP_TARGET_AVX2 inline __m256i join_epi32(__m128i lo, __m128i hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

// round_nonnegative of 4 doubles >= 0: trunc(x), plus 1 where x - trunc(x) >= 0.5 (the
// difference is exact, and so is its double: (int)(2 d) is 1 exactly then).
FP_TARGET_AVX2 inline __m128i round_half_up(__m256d x) {
  const __m128i t = _mm256_cvttpd_epi32(x);
  const __m256d frac = _mm256_sub_pd(x, _mm256_cvtepi32_pd(t));
  return _mm_add_epi32(t, _mm256_cvttpd_epi32(_mm256_add_pd(frac, frac)));
}

// v * (1.0 - k) for 4 lanes of v (as double) and k (double), rounded and clipped to [0, 255].
FP_TARGET_AVX2 inline __m128i scaled_level(__m256d vd, __m256d k) {
  const __m128i x = round_half_up(_mm256_mul_pd(vd, _mm256_sub_pd(_mm256_set1_pd(1.0), k)));
  return _mm_min_epi32(_mm_max_epi32(x, _mm_setzero_si128()), _mm_set1_epi32(255));
}

FP_TARGET_AVX2 inline __m256i load8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

FP_TARGET_AVX2 inline void store8(uint8_t* p, __m256i x) {
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(words, words));
}

// hsv2rgb's choice by sector (0..5) of one of s0..s5; V where the saturation is 0.
FP_TARGET_AVX2 inline __m256i pick(__m256i sector, __m256i us, __m256i v, __m256i s0, __m256i s1, __m256i s2,
                                   __m256i s3, __m256i s4, __m256i s5) {
  __m256i out = s5;
  out = _mm256_blendv_epi8(out, s4, _mm256_cmpeq_epi32(sector, _mm256_set1_epi32(4)));
  out = _mm256_blendv_epi8(out, s3, _mm256_cmpeq_epi32(sector, _mm256_set1_epi32(3)));
  out = _mm256_blendv_epi8(out, s2, _mm256_cmpeq_epi32(sector, _mm256_set1_epi32(2)));
  out = _mm256_blendv_epi8(out, s1, _mm256_cmpeq_epi32(sector, _mm256_set1_epi32(1)));
  out = _mm256_blendv_epi8(out, s0, _mm256_cmpeq_epi32(sector, _mm256_setzero_si256()));
  return _mm256_blendv_epi8(out, v, _mm256_cmpeq_epi32(us, _mm256_setzero_si256()));
}

FP_TARGET_AVX2 void hue_rows(uint8_t* __restrict pr, uint8_t* __restrict pg, uint8_t* __restrict pb, int64_t n,
                             int32_t shift, const HsvTables& tab) {
  const __m256i zero = _mm256_setzero_si256(), byte = _mm256_set1_epi32(255);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256i r = load8(pr + k), g = load8(pg + k), b = load8(pb + k);
    const __m256i maxc = _mm256_max_epi32(r, _mm256_max_epi32(g, b));
    const __m256i minc = _mm256_min_epi32(r, _mm256_min_epi32(g, b));
    const __m256i cr = _mm256_sub_epi32(maxc, minc);
    // (float)d / (float)cr as HsvTables::quotient holds it (lanes with cr == 0 are gray: masked below)
    const __m256 crf = _mm256_cvtepi32_ps(cr);
    const __m256 rc = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(maxc, r)), crf);
    const __m256 gc = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(maxc, g)), crf);
    const __m256 bc = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(maxc, b)), crf);
    // h by the channel that is the maximum (r first, then g), as rgb2hsv's branches
    const __m256 h_r = _mm256_sub_ps(bc, gc);
    const __m256d two = _mm256_set1_pd(2.0), four = _mm256_set1_pd(4.0);
    const __m256 h_g = join_ps(_mm256_cvtpd_ps(_mm256_sub_pd(_mm256_add_pd(two, lo_pd(rc)), lo_pd(bc))),
                               _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_add_pd(two, hi_pd(rc)), hi_pd(bc))));
    const __m256 h_b = join_ps(_mm256_cvtpd_ps(_mm256_sub_pd(_mm256_add_pd(four, lo_pd(gc)), lo_pd(rc))),
                               _mm256_cvtpd_ps(_mm256_sub_pd(_mm256_add_pd(four, hi_pd(gc)), hi_pd(rc))));
    const __m256 is_r = _mm256_castsi256_ps(_mm256_cmpeq_epi32(r, maxc));
    const __m256 is_g = _mm256_castsi256_ps(_mm256_cmpeq_epi32(g, maxc));
    const __m256 h = _mm256_blendv_ps(_mm256_blendv_ps(h_b, h_g, is_g), h_r, is_r);
    // H = clip((int)(fmod(h / 6 + 1, 1) * 255)), the fmod as a subtraction
    __m128i uh_half[2];
    for (int half = 0; half < 2; half++) {
      const __m256d hd = half == 0 ? lo_pd(h) : hi_pd(h);
      const __m256d one = _mm256_set1_pd(1.0);
      const __m256d wrapped = _mm256_add_pd(_mm256_div_pd(hd, _mm256_set1_pd(6.0)), one);
      const __m256d ge = _mm256_cmp_pd(wrapped, one, _CMP_GE_OQ);
      const __m256d folded = _mm256_blendv_pd(wrapped, _mm256_sub_pd(wrapped, one), ge);
      const __m128 hw = _mm256_cvtpd_ps(folded);
      uh_half[half] = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(hw), _mm256_set1_pd(255.0)));
    }
    const __m256i gray = _mm256_cmpeq_epi32(cr, zero);
    __m256i uh = _mm256_min_epi32(_mm256_max_epi32(join_epi32(uh_half[0], uh_half[1]), zero), byte);
    uh = _mm256_andnot_si256(gray, uh);
    // S = clip((int)((double)(cr / (float)maxc) * 255.0)), as HsvTables::saturation
    const __m256 sat = _mm256_div_ps(_mm256_cvtepi32_ps(cr), _mm256_cvtepi32_ps(maxc));
    const __m256i s_raw = join_epi32(_mm256_cvttpd_epi32(_mm256_mul_pd(lo_pd(sat), _mm256_set1_pd(255.0))),
                                     _mm256_cvttpd_epi32(_mm256_mul_pd(hi_pd(sat), _mm256_set1_pd(255.0))));
    const __m256i us = _mm256_andnot_si256(gray, _mm256_min_epi32(_mm256_max_epi32(s_raw, zero), byte));
    // back to RGB with H shifted
    const __m256i hh = _mm256_and_si256(_mm256_add_epi32(uh, _mm256_set1_epi32(shift)), byte);
    const __m256 f = _mm256_i32gather_ps(tab.fraction, hh, 4);
    const __m256 fs = _mm256_i32gather_ps(tab.fs, us, 4);
    const __m256i sector = _mm256_i32gather_epi32(tab.sector, hh, 4);
    const __m256 fsf = _mm256_mul_ps(fs, f);
    __m128i p_half[2], q_half[2], t_half[2];
    for (int half = 0; half < 2; half++) {
      const __m128i v4 = half == 0 ? _mm256_castsi256_si128(maxc) : _mm256_extracti128_si256(maxc, 1);
      const __m256d vd = _mm256_cvtepi32_pd(v4);
      const __m256d fs_d = half == 0 ? lo_pd(fs) : hi_pd(fs);
      const __m256d f_d = half == 0 ? lo_pd(f) : hi_pd(f);
      const __m256d fsf_d = half == 0 ? lo_pd(fsf) : hi_pd(fsf);
      p_half[half] = scaled_level(vd, fs_d);
      q_half[half] = scaled_level(vd, fsf_d);
      t_half[half] = scaled_level(vd, _mm256_mul_pd(fs_d, _mm256_sub_pd(_mm256_set1_pd(1.0), f_d)));
    }
    const __m256i p = join_epi32(p_half[0], p_half[1]), q = join_epi32(q_half[0], q_half[1]),
                  t = join_epi32(t_half[0], t_half[1]), v = maxc;
    store8(pr + k, pick(sector, us, v, v, q, p, p, t, v));
    store8(pg + k, pick(sector, us, v, t, v, v, q, p, p));
    store8(pb + k, pick(sector, us, v, p, p, t, v, v, q));
  }
  for (; k < n; k++) hue_pixel(pr[k], pg[k], pb[k], shift, tab);
}

}  // namespace hue_avx2
#endif

void hue_rows(uint8_t* __restrict r, uint8_t* __restrict g, uint8_t* __restrict b, int64_t n, int32_t shift) {
  const HsvTables& tab = hsv_tables();
#if FP_HAVE_AVX2_TARGET
  if (isa_level() >= kIsaAvx2) return hue_avx2::hue_rows(r, g, b, n, shift, tab);
#endif
  for (int64_t k = 0; k < n; k++) hue_pixel(r[k], g[k], b[k], shift, tab);
}

// torchvision's adjust_hue on PIL: convert("HSV"), H += uint8(hue_factor * 255) with uint8
// wraparound (numpy's cast of the double: truncation, then modulo 256), back to RGB; an "L"
// image is returned as is.
void pil_hue(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_adjust_hue");
  if (image.channels == 1) return;
  const int32_t shift = (uint8_t)(int32_t)(step.f[0] * 255.0);
  const int64_t n = image.plane();
  uint8_t* r = image.u8();
  hue_rows(r, r + n, r + 2 * n, n, shift);
}

// torchvision's to_grayscale on PIL: convert("L"), stacked three times for 3 output channels.
// i0 = output channels (1 or 3); an "L" image stays one channel (convert("L") copies it).
void pil_grayscale(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_rgb_to_grayscale");
  const int64_t out = step.i[0];
  TORCH_CHECK(out == 1 || out == 3, "pil_rgb_to_grayscale: i0 must be 1 or 3, got ", out);
  TORCH_CHECK(image.channels == 3 || out == 1, "pil_rgb_to_grayscale: 3 output channels of a 1-channel image");
  if (image.channels == 1) return;
  const int64_t n = image.plane();
  uint8_t *r = image.u8(), *g = r + n, *b = r + 2 * n;
  luma_rows(r, g, b, n, r);
  if (out == 3) {
    std::memcpy(g, r, (size_t)n);
    std::memcpy(b, r, (size_t)n);
  }
  image.channels = out;
}

// ImageOps.posterize: i & ~(2 ** (8 - bits) - 1). i0 = bits (0..8).
void pil_posterize(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_posterize");
  const int64_t bits = step.i[0];
  TORCH_CHECK(bits >= 0 && bits <= 8, "pil_posterize: bits must be in [0, 8], got ", bits);
  const uint8_t mask = (uint8_t)~((1 << (8 - bits)) - 1);
  uint8_t* __restrict p = image.u8();
  const int64_t n = image.numel();
  for (int64_t k = 0; k < n; k++) p[k] &= mask;
}

// ImageOps.solarize: i if i < threshold else 255 - i (Python compares the int with the
// threshold exactly: no wrap of a negative int). f0 = threshold.
void pil_solarize(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_solarize");
  const double threshold = step.f[0];
  // the least level inverted: i < threshold keeps i (256: none inverted)
  int first = 0;
  while (first < 256 && (double)first < threshold) first++;
  const int16_t from = (int16_t)first;
  uint8_t* __restrict p = image.u8();
  const int64_t n = image.numel();
  for (int64_t k = 0; k < n; k++) p[k] = (int16_t)p[k] < from ? p[k] : (uint8_t)(255 - p[k]);
}

// ImageOps.invert: 255 - i.
void pil_invert(const PixelStep&, Image& image, KernelScratch&) {
  check_uint8(image, "pil_invert");
  uint8_t* __restrict p = image.u8();
  const int64_t n = image.numel();
  for (int64_t k = 0; k < n; k++) p[k] = (uint8_t)(255 - p[k]);
}

void histograms(const Image& image, int64_t hist[3][256]) {
  const int64_t n = image.plane();
  for (int64_t c = 0; c < image.channels; c++) {
    for (int v = 0; v < 256; v++) hist[c][v] = 0;
    const uint8_t* p = image.u8() + c * n;
    for (int64_t k = 0; k < n; k++) hist[c][p[k]]++;
  }
}

// ImageOps.autocontrast(image) (no cutoff): per channel, the lowest and highest levels present
// map to 0 and 255 through int(i * scale + offset) in double, clamped.
void pil_autocontrast(const PixelStep&, Image& image, KernelScratch&) {
  check_uint8(image, "pil_autocontrast");
  int64_t hist[3][256];
  histograms(image, hist);
  uint8_t lut[3 * 256];
  for (int64_t c = 0; c < image.channels; c++) {
    int lo = 0, hi = 255;
    while (lo < 255 && hist[c][lo] == 0) lo++;
    while (hi > 0 && hist[c][hi] == 0) hi--;
    uint8_t* l = lut + 256 * c;
    if (hi <= lo) {
      for (int v = 0; v < 256; v++) l[v] = (uint8_t)v;
      continue;
    }
    const double scale = 255.0 / (double)(hi - lo);
    const double offset = -(double)lo * scale;
    for (int v = 0; v < 256; v++) {
      const double x = (double)v * scale + offset;
      const int64_t ix = (int64_t)x;  // Python's int(): truncation
      l[v] = (uint8_t)(ix < 0 ? 0 : ix > 255 ? 255 : ix);
    }
  }
  apply_luts(image, lut);
}

// ImageOps.equalize(image): per channel, step = (count - count of the last level present) // 255,
// lut[i] = (step // 2 + count below i) // step, clipped to 255 (Pillow clips a point table's ints).
void pil_equalize(const PixelStep&, Image& image, KernelScratch&) {
  check_uint8(image, "pil_equalize");
  int64_t hist[3][256];
  histograms(image, hist);
  uint8_t lut[3 * 256];
  for (int64_t c = 0; c < image.channels; c++) {
    uint8_t* l = lut + 256 * c;
    int64_t total = 0, levels = 0, last = 0;
    for (int v = 0; v < 256; v++) {
      if (hist[c][v] == 0) continue;
      total += hist[c][v], levels++, last = hist[c][v];
    }
    const int64_t step_size = levels <= 1 ? 0 : (total - last) / 255;
    if (step_size == 0) {
      for (int v = 0; v < 256; v++) l[v] = (uint8_t)v;
      continue;
    }
    int64_t acc = step_size / 2;
    for (int v = 0; v < 256; v++) {
      const int64_t out = acc / step_size;
      l[v] = (uint8_t)(out > 255 ? 255 : out);
      acc += hist[c][v];
    }
  }
  apply_luts(image, lut);
}

// ImageFilter.SMOOTH (Filter.c's 3x3 path): weights 1/13 around, 5/13 at the centre (float32
// divisions), offset 0.5, rows summed next, current, previous; the border rows and columns,
// and images under 3x3, are copied.
// One output row of the filter, columns [1, w - 1), blended with the row itself.
FP_ALWAYS_INLINE void smooth_row_body(const uint8_t* __restrict above, const uint8_t* __restrict row,
                                      const uint8_t* __restrict below, uint8_t* __restrict out, int64_t w,
                                      float alpha) {
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
  for (int64_t x = 1; x < w - 1; x++) {
    float ss = 0.5f;
    ss += (float)below[x - 1] * k1 + (float)below[x] * k1 + (float)below[x + 1] * k1;
    ss += (float)row[x - 1] * k1 + (float)row[x] * k5 + (float)row[x + 1] * k1;
    ss += (float)above[x - 1] * k1 + (float)above[x] * k1 + (float)above[x + 1] * k1;
    ss = ss < 0.0f ? 0.0f : ss;
    ss = ss > 255.0f ? 255.0f : ss;
    out[x] = blend((uint8_t)ss, row[x], alpha);
  }
}
FP_VARIANTS(smooth_row, (const uint8_t* __restrict above, const uint8_t* __restrict row,
                         const uint8_t* __restrict below, uint8_t* __restrict out, int64_t w, float alpha),
            (above, row, below, out, w, alpha))

// ImageEnhance.Sharpness: blend(image.filter(SMOOTH), image, factor), per channel. Where the
// filter copies (the border, images under 3x3) the blend of a value with itself is that value.
void pil_sharpness(const PixelStep& step, Image& image, KernelScratch& scratch) {
  check_uint8(image, "pil_adjust_sharpness");
  const float alpha = (float)step.f[0];
  const int64_t n = image.plane(), h = image.height, w = image.width;
  if (h < 3 || w < 3) return;
  uint8_t* copy = grown(scratch.u8, (size_t)n);
  for (int64_t c = 0; c < image.channels; c++) {
    uint8_t* p = image.u8() + c * n;
    std::memcpy(copy, p, (size_t)n);
    for (int64_t y = 1; y < h - 1; y++) smooth_row(copy + (y - 1) * w, copy + y * w, copy + (y + 1) * w, p + y * w, w,
                                                   alpha);
  }
}

FP_REGISTER_PIXEL_KERNEL({"pil_adjust_brightness", "f0=brightness_factor", pil_brightness, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_adjust_contrast", "f0=contrast_factor", pil_contrast, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_adjust_saturation", "f0=saturation_factor", pil_saturation, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_adjust_hue", "f0=hue_factor", pil_hue, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_rgb_to_grayscale", "i0=num_output_channels (1 or 3)", pil_grayscale, nullptr,
                          nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_posterize", "i0=bits (0..8)", pil_posterize, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_solarize", "f0=threshold", pil_solarize, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_invert", "", pil_invert, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_autocontrast", "", pil_autocontrast, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_equalize", "", pil_equalize, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_adjust_sharpness", "f0=sharpness_factor", pil_sharpness, nullptr, nullptr});

}  // namespace
}  // namespace fastprep
