// Colour adjustments of torchvision v2 on uint8 images (torchvision/transforms/v2/functional/
// _color.py): adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue and
// rgb_to_grayscale, each as a reference (ATen's ops in torchvision's order) and a fast single
// pass that performs the same float32 operations per pixel:
//
// * grayscale (float): r * 0.2989, then two `add_(x, alpha=w)`, which ATen computes as fused
//   multiply-adds: fma(b, 0.114, fma(g, 0.587, r * 0.2989)), floored for contrast/saturation,
//   truncated to uint8 by rgb_to_grayscale;
// * _blend(a, b, r): `a.mul(r).add_(b, alpha=1 - r)` -> fma(b, f32(1 - r), a * f32(r)), clamped
//   to [0, 255], truncated to uint8;
// * contrast's mean: the floored gray values are integers, so their float32 sum is exact in any
//   order while it stays below 2**24; larger images take ATen's reduction;
// * hue: v2's RGB -> HSV -> RGB chain (about 40 elementwise float32 operations), per pixel.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa.h"

#if FP_HAVE_AVX2_TARGET
#include <immintrin.h>
#endif
#include "ops/native_draw.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

// ------------------------------------------------------------------------------------
// References: ATen, as torchvision calls it.

at::Tensor gray_float_ref(const at::Tensor& img) {  // _rgb_to_grayscale_image(preserve_dtype=False)
  const std::vector<at::Tensor> ch = img.unbind(-3);
  return ch[0].mul(0.2989).add_(ch[1], 0.587).add_(ch[2], 0.114).unsqueeze(-3);
}

at::Tensor blend_ref(const at::Tensor& a, const at::Tensor& b, double ratio) {
  return a.mul(ratio).add_(b, 1.0 - ratio).clamp_(0, 255).to(at::kByte);
}

void brightness_ref(const PixelStep& s, Image& im, KernelScratch&) {
  im.assign(im.tensor().mul(s.f[0]).clamp_(0, 255).to(at::kByte));
}

void saturation_ref(const PixelStep& s, Image& im, KernelScratch&) {
  if (im.channels == 1) return;
  const at::Tensor t = im.tensor();
  im.assign(blend_ref(t, gray_float_ref(t).floor_(), s.f[0]));
}

void contrast_ref(const PixelStep& s, Image& im, KernelScratch&) {
  const at::Tensor t = im.tensor();
  const at::Tensor gray = im.channels == 3 ? gray_float_ref(t).floor_() : t.to(at::kFloat);
  const at::Tensor mean = at::mean(gray, {-3, -2, -1}, true);
  im.assign(blend_ref(t, mean, s.f[0]));
}

void grayscale_ref(const PixelStep& s, Image& im, KernelScratch&) {  // rgb_to_grayscale_image
  const int64_t out_channels = s.i[0];
  const at::Tensor t = im.tensor();
  if (im.channels == 1) {
    if (out_channels == 3) im.assign(t.repeat({3, 1, 1}));
    return;
  }
  const at::Tensor gray = gray_float_ref(t).to(at::kByte);
  im.assign(out_channels == 3 ? gray.expand(t.sizes()) : gray);
}

at::Tensor rgb_to_hsv_ref(const at::Tensor& image) {  // v2 _rgb_to_hsv
  const std::vector<at::Tensor> rgb = image.unbind(-3);
  const at::Tensor &r = rgb[0], &g = rgb[1];
  auto [minc, maxc] = at::aminmax(image, -3);
  const at::Tensor eqc = maxc == minc;
  const at::Tensor channels_range = maxc - minc;
  const at::Tensor ones = at::ones_like(maxc);
  const at::Tensor s = channels_range / at::where(eqc, ones, maxc);
  const at::Tensor divisor = at::where(eqc, ones, channels_range).unsqueeze_(-3);
  const std::vector<at::Tensor> c = ((maxc.unsqueeze(-3) - image) / divisor).unbind(-3);
  at::Tensor rc = c[0], gc = c[1], bc = c[2];
  at::Tensor mask_maxc_neq_r = maxc != r;
  at::Tensor mask_maxc_eq_g = maxc == g;
  const at::Tensor hg = rc.add(2.0).sub_(bc).mul_(mask_maxc_eq_g & mask_maxc_neq_r);
  const at::Tensor hr = bc.sub_(gc).mul_(~mask_maxc_neq_r);
  const at::Tensor hb = gc.add_(4.0).sub_(rc).mul_(mask_maxc_neq_r.logical_and_(mask_maxc_eq_g.logical_not_()));
  at::Tensor h = hr.add_(hg).add_(hb);
  h = h.mul_(1.0 / 6.0).add_(1.0).fmod_(1.0);
  return at::stack({h, s, maxc}, -3);
}

at::Tensor hsv_to_rgb_ref(const at::Tensor& img) {  // v2 _hsv_to_rgb
  const std::vector<at::Tensor> hsv = img.unbind(-3);
  const at::Tensor &h = hsv[0], &s = hsv[1], &v = hsv[2];
  at::Tensor h6 = h.mul(6);
  at::Tensor i = at::floor(h6);
  const at::Tensor f = h6.sub_(i);
  i = i.to(at::kInt);
  at::Tensor sxf = s * f;
  at::Tensor one_minus_s = 1.0 - s;
  const at::Tensor q = (1.0 - sxf).mul_(v).clamp_(0.0, 1.0);
  const at::Tensor t = sxf.add_(one_minus_s).mul_(v).clamp_(0.0, 1.0);
  const at::Tensor p = one_minus_s.mul_(v).clamp_(0.0, 1.0);
  i.remainder_(6);
  const at::Tensor vpqt = at::stack({v, p, q, t}, -3);
  const at::Tensor select =
      at::tensor({0, 2, 1, 1, 3, 0, 3, 0, 0, 2, 1, 1, 1, 1, 3, 0, 0, 2}, at::kLong).view({3, 6});
  const at::Tensor index = select.index({at::indexing::Slice(), i});
  return vpqt.gather(-3, index);
}

void hue_ref(const PixelStep& s, Image& im, KernelScratch&) {  // adjust_hue_image
  if (im.channels == 1 || im.numel() == 0) return;
  at::Tensor image = im.tensor().to(at::kFloat).mul_(1.0 / 255);
  image = rgb_to_hsv_ref(image);
  std::vector<at::Tensor> hsv = image.unbind(-3);
  hsv[0].add_(s.f[0]).remainder_(1.0);
  image = at::stack({hsv[0], hsv[1], hsv[2]}, -3);
  const at::Tensor rgb = hsv_to_rgb_ref(image);
  im.assign(rgb.mul(255.0 + 1.0 - 1e-3).to(at::kByte));
}

// ------------------------------------------------------------------------------------
// Fast kernels: the same float32 operations per pixel, in one pass.

// The clamp bounds of torchvision's `clamp_(0, 255).to(uint8)`. They reach the loops through an
// empty asm statement so that the compiler does not know them: with constant bounds GCC folds
// `(uint8_t)(int32_t)min(max(v, 0), 255)` into compares and byte selects (about three times the
// instructions per vector) instead of a vmaxps and a vminps. The values, and so the bits, are
// the same.
struct U8Bounds {
  float lo = 0.0f, hi = 255.0f;
};

FP_ALWAYS_INLINE U8Bounds u8_bounds() {
  U8Bounds b;
#if defined(__GNUC__)
  __asm__("" : "+m"(b));
#endif
  return b;
}

// clamp_(0, 255) then the truncating cast of to(uint8) (NaN, which neither path meets for finite
// factors, gives 0 both ways on x86: max(NaN, 0) keeps NaN, and its conversion is 0x80000000).
FP_ALWAYS_INLINE uint8_t to_u8(float v, U8Bounds b) { return (uint8_t)(int32_t)std::min(std::max(v, b.lo), b.hi); }

FP_ALWAYS_INLINE float gray_floor(float r, float g, float b) {
  return std::floor(std::fma(b, 0.114f, std::fma(g, 0.587f, r * 0.2989f)));
}

FP_ALWAYS_INLINE void brightness_span_body(uint8_t* __restrict p, int64_t n, float factor) {
  const U8Bounds bounds = u8_bounds();
  for (int64_t k = 0; k < n; k++) p[k] = to_u8((float)p[k] * factor, bounds);
}

// The sum of the floored gray values of n <= kGraySumBlock pixels (each at most 255, so the
// int32 lanes cannot overflow).
constexpr int64_t kGraySumBlock = int64_t(1) << 22;

FP_ALWAYS_INLINE int32_t gray_sum_span_body(const uint8_t* __restrict r, const uint8_t* __restrict g,
                                            const uint8_t* __restrict b, int64_t n) {
  int32_t sum = 0;
  for (int64_t k = 0; k < n; k++) sum += (int32_t)gray_floor((float)r[k], (float)g[k], (float)b[k]);
  return sum;
}

FP_ALWAYS_INLINE int32_t byte_sum_span_body(const uint8_t* __restrict p, int64_t n) {
  int32_t sum = 0;
  for (int64_t k = 0; k < n; k++) sum += p[k];
  return sum;
}

// Saturation in one pass: each pixel's floored gray, and each channel blended with it.
FP_ALWAYS_INLINE void saturation_span_body(uint8_t* __restrict r, uint8_t* __restrict g, uint8_t* __restrict b,
                                           int64_t n, float ratio, float alpha) {
  const U8Bounds bounds = u8_bounds();
  for (int64_t k = 0; k < n; k++) {
    const float vr = (float)r[k], vg = (float)g[k], vb = (float)b[k];
    const float gray = gray_floor(vr, vg, vb);
    r[k] = to_u8(std::fma(gray, alpha, vr * ratio), bounds);
    g[k] = to_u8(std::fma(gray, alpha, vg * ratio), bounds);
    b[k] = to_u8(std::fma(gray, alpha, vb * ratio), bounds);
  }
}

// rgb_to_grayscale's uint8 gray (not floored: truncated by to(uint8); at most 254.97), into `out`,
// which may be `r`.
FP_ALWAYS_INLINE void gray_u8_span_body(const uint8_t* r, const uint8_t* __restrict g, const uint8_t* __restrict b,
                                        int64_t n, uint8_t* out) {
  for (int64_t k = 0; k < n; k++) {
    out[k] = (uint8_t)(int32_t)std::fma((float)b[k], 0.114f, std::fma((float)g[k], 0.587f, (float)r[k] * 0.2989f));
  }
}

// Each pixel blended with one value (contrast's mean).
FP_ALWAYS_INLINE void blend_scalar_span_body(uint8_t* __restrict p, int64_t n, float other, float ratio, float alpha) {
  const U8Bounds bounds = u8_bounds();
  for (int64_t k = 0; k < n; k++) p[k] = to_u8(std::fma(other, alpha, (float)p[k] * ratio), bounds);
}

// fmod(x, 1) for finite x: the fractional part, which x - trunc(x) gives exactly (and which
// vectorizes, unlike a call of fmodf).
FP_ALWAYS_INLINE float fmod1(float x) { return x - std::trunc(x); }

// v2's hue chain for one pixel, in its order of operations (see hue_ref); branch-free, so
// that the loop vectorizes.
FP_ALWAYS_INLINE void hue_pixel(uint8_t& R, uint8_t& G, uint8_t& B, float hue) {
  const float scale = (float)(1.0 / 255);
  const float r = (float)R * scale, g = (float)G * scale, b = (float)B * scale;
  const float maxc = std::max(std::max(r, g), b), minc = std::min(std::min(r, g), b);
  const bool eqc = maxc == minc;
  const float range = maxc - minc;
  const float s = range / (eqc ? 1.0f : maxc);
  const float divisor = eqc ? 1.0f : range;
  const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  // the masks as 1.0 / 0.0, as ATen multiplies by a bool tensor (& not &&: no branches)
  const bool neq_r = maxc != r, eq_g = maxc == g;
  const float hg = ((rc + 2.0f) - bc) * ((eq_g & neq_r) ? 1.0f : 0.0f);
  const float hr = (bc - gc) * (neq_r ? 0.0f : 1.0f);
  const float hb = ((gc + 4.0f) - rc) * ((neq_r & !eq_g) ? 1.0f : 0.0f);
  float h = (hr + hg) + hb;
  h = fmod1(h * (float)(1.0 / 6.0) + 1.0f);
  // Tensor.add_(hue).remainder_(1.0): fmod, then + 1 where it is negative
  h = fmod1(h + hue);
  h = h + (h < 0.0f ? 1.0f : 0.0f);
  // _hsv_to_rgb
  const float h6 = h * 6.0f;
  const float fi = std::floor(h6);
  const float f = h6 - fi;
  // h is in [0, 1] here, so floor(6 h) is in [0, 6]: remainder(6) maps 6 to 0 (kept in
  // float, exact for these integers, so the selects below vectorize)
  const float i = fi - (fi >= 6.0f ? 6.0f : 0.0f);
  const float sxf = s * f;
  const float one_minus_s = 1.0f - s;
  const float v = maxc;
  const float q = std::min(std::max((1.0f - sxf) * v, 0.0f), 1.0f);
  const float t = std::min(std::max((sxf + one_minus_s) * v, 0.0f), 1.0f);
  const float p = std::min(std::max(one_minus_s * v, 0.0f), 1.0f);
  // torchvision's table: R = (v q p p t v)[i], G = (t v v q p p)[i], B = (p p t v v q)[i]
  // written as a sequence of selects, which the compiler turns into blends
  float ro = p, go = p, bo = p;
  ro = i == 4.0f ? t : ro;
  ro = i == 1.0f ? q : ro;
  ro = ((i == 0.0f) | (i == 5.0f)) ? v : ro;
  go = i == 3.0f ? q : go;
  go = i == 0.0f ? t : go;
  go = ((i == 1.0f) | (i == 2.0f)) ? v : go;
  bo = i == 5.0f ? q : bo;
  bo = i == 2.0f ? t : bo;
  bo = ((i == 3.0f) | (i == 4.0f)) ? v : bo;
  const float to_u8_scale = (float)(255.0 + 1.0 - 1e-3);
  R = (uint8_t)(int32_t)(ro * to_u8_scale);
  G = (uint8_t)(int32_t)(go * to_u8_scale);
  B = (uint8_t)(int32_t)(bo * to_u8_scale);
}

FP_ALWAYS_INLINE void hue_span_body(uint8_t* __restrict r, uint8_t* __restrict g, uint8_t* __restrict b, int64_t n,
                               float hue) {
  for (int64_t k = 0; k < n; k++) hue_pixel(r[k], g[k], b[k], hue);
}

// The spans compiled for AVX2+FMA and for the baseline (isa.h: FP_VARIANTS).
FP_VARIANTS_RET(int32_t, byte_sum_span, (const uint8_t* p, int64_t n), (p, n))
FP_VARIANTS(hue_span, (uint8_t * r, uint8_t* g, uint8_t* b, int64_t n, float hue), (r, g, b, n, hue))

// Brightness, contrast's blend, saturation and the gray sum are written out in AVX2 as well:
// GCC's vectorization of the bodies above widens bytes to floats in three steps and narrows
// them back with a mask per step (45 instructions per 32 pixels for brightness against 31
// here, 1.4x the time). The operations per pixel, and so the bits, are the bodies'
// (tests/test_pixel_kernels.py runs both variants); the bodies handle the last n % 32 pixels.
#if FP_HAVE_AVX2_TARGET
// Eight pixels as float32.
FP_TARGET_AVX2 FP_ALWAYS_INLINE __m256 load8_f32(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// to_u8's clamp and truncation to int32: std::max(x, 0) is vmaxps(0, x) and std::min(x, 255)
// vminps(255, x) (both give x where unordered).
FP_TARGET_AVX2 FP_ALWAYS_INLINE __m256i clamp_to_i32(__m256 x) {
  x = _mm256_max_ps(_mm256_setzero_ps(), x);
  return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_set1_ps(255.0f), x));
}

// Stores 4 x 8 int32 lanes as 32 bytes. Each lane is in [0, 255] (the saturating packs keep
// it) or, from NaN, INT_MIN, which they make 0 as the scalar cast's low byte is.
FP_TARGET_AVX2 FP_ALWAYS_INLINE void store32_u8(uint8_t* p, const __m256i (&v)[4]) {
  const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(v[0], v[1]), _mm256_packus_epi32(v[2], v[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// The float gray of eight pixels, and gray_floor.
FP_TARGET_AVX2 FP_ALWAYS_INLINE __m256 gray8(__m256 r, __m256 g, __m256 b) {
  const __m256 rg = _mm256_fmadd_ps(g, _mm256_set1_ps(0.587f), _mm256_mul_ps(r, _mm256_set1_ps(0.2989f)));
  return _mm256_fmadd_ps(b, _mm256_set1_ps(0.114f), rg);
}

FP_TARGET_AVX2 FP_ALWAYS_INLINE __m256 gray_floor8(__m256 r, __m256 g, __m256 b) {
  return _mm256_floor_ps(gray8(r, g, b));
}

// Reads each block of 32 pixels before it writes it, so `out` may be `r`.
FP_TARGET_AVX2 void gray_u8_span_avx2(const uint8_t* r, const uint8_t* g, const uint8_t* b, int64_t n, uint8_t* out) {
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    __m256i gray[4];
    for (int q = 0; q < 4; q++) {
      const int64_t at = k + 8 * q;
      gray[q] = _mm256_cvttps_epi32(gray8(load8_f32(r + at), load8_f32(g + at), load8_f32(b + at)));
    }
    store32_u8(out + k, gray);
  }
  gray_u8_span_body(r + k, g + k, b + k, n - k, out + k);
}

FP_TARGET_AVX2 void brightness_span_avx2(uint8_t* p, int64_t n, float factor) {
  const __m256 f = _mm256_set1_ps(factor);
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    __m256i out[4];
    for (int q = 0; q < 4; q++) out[q] = clamp_to_i32(_mm256_mul_ps(load8_f32(p + k + 8 * q), f));
    store32_u8(p + k, out);
  }
  brightness_span_body(p + k, n - k, factor);
}

FP_TARGET_AVX2 void blend_scalar_span_avx2(uint8_t* p, int64_t n, float other, float ratio, float alpha) {
  const __m256 o = _mm256_set1_ps(other), r = _mm256_set1_ps(ratio), a = _mm256_set1_ps(alpha);
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    __m256i out[4];
    for (int q = 0; q < 4; q++) out[q] = clamp_to_i32(_mm256_fmadd_ps(o, a, _mm256_mul_ps(load8_f32(p + k + 8 * q), r)));
    store32_u8(p + k, out);
  }
  blend_scalar_span_body(p + k, n - k, other, ratio, alpha);
}

FP_TARGET_AVX2 void saturation_span_avx2(uint8_t* r, uint8_t* g, uint8_t* b, int64_t n, float ratio, float alpha) {
  const __m256 vr = _mm256_set1_ps(ratio), va = _mm256_set1_ps(alpha);
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    __m256i out_r[4], out_g[4], out_b[4];
    for (int q = 0; q < 4; q++) {
      const __m256 R = load8_f32(r + k + 8 * q), G = load8_f32(g + k + 8 * q), B = load8_f32(b + k + 8 * q);
      const __m256 gray = gray_floor8(R, G, B);
      out_r[q] = clamp_to_i32(_mm256_fmadd_ps(gray, va, _mm256_mul_ps(R, vr)));
      out_g[q] = clamp_to_i32(_mm256_fmadd_ps(gray, va, _mm256_mul_ps(G, vr)));
      out_b[q] = clamp_to_i32(_mm256_fmadd_ps(gray, va, _mm256_mul_ps(B, vr)));
    }
    store32_u8(r + k, out_r);
    store32_u8(g + k, out_g);
    store32_u8(b + k, out_b);
  }
  saturation_span_body(r + k, g + k, b + k, n - k, ratio, alpha);
}

FP_TARGET_AVX2 int32_t gray_sum_span_avx2(const uint8_t* r, const uint8_t* g, const uint8_t* b, int64_t n) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    for (int q = 0; q < 4; q++) {
      const int64_t at = k + 8 * q;
      const __m256 gray = gray_floor8(load8_f32(r + at), load8_f32(g + at), load8_f32(b + at));
      acc[q] = _mm256_add_epi32(acc[q], _mm256_cvttps_epi32(gray));
    }
  }
  const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
  __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
  sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4E));
  sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0xB1));
  return _mm_cvtsi128_si32(sum4) + gray_sum_span_body(r + k, g + k, b + k, n - k);
}
#endif

// The baseline variant (the bodies) or the AVX2 one above.
#if FP_HAVE_AVX2_TARGET
#define FP_AVX2_OR_BODY(name, args)                   \
  if (isa_level() >= kIsaAvx2) return name##_avx2 args; \
  return name##_body args;
#else
#define FP_AVX2_OR_BODY(name, args) return name##_body args;
#endif

void brightness_span(uint8_t* p, int64_t n, float factor) { FP_AVX2_OR_BODY(brightness_span, (p, n, factor)) }
void blend_scalar_span(uint8_t* p, int64_t n, float other, float ratio, float alpha) {
  FP_AVX2_OR_BODY(blend_scalar_span, (p, n, other, ratio, alpha))
}
void saturation_span(uint8_t* r, uint8_t* g, uint8_t* b, int64_t n, float ratio, float alpha) {
  FP_AVX2_OR_BODY(saturation_span, (r, g, b, n, ratio, alpha))
}
int32_t gray_sum_span(const uint8_t* r, const uint8_t* g, const uint8_t* b, int64_t n) {
  FP_AVX2_OR_BODY(gray_sum_span, (r, g, b, n))
}
void gray_u8_span(const uint8_t* r, const uint8_t* g, const uint8_t* b, int64_t n, uint8_t* out) {
  FP_AVX2_OR_BODY(gray_u8_span, (r, g, b, n, out))
}

void brightness_fast(const PixelStep& s, Image& im, KernelScratch&) {
  brightness_span(im.u8(), im.numel(), (float)s.f[0]);
}

void saturation_fast(const PixelStep& s, Image& im, KernelScratch&) {
  if (im.channels == 1) return;
  const int64_t n = im.plane();
  uint8_t* p = im.u8();
  saturation_span(p, p + n, p + 2 * n, n, (float)s.f[0], (float)(1.0 - s.f[0]));
}

void contrast_fast(const PixelStep& s, Image& im, KernelScratch&) {
  const int64_t n = im.plane();
  uint8_t* p = im.u8();
  int64_t sum = 0;
  for (int64_t k = 0; k < n; k += kGraySumBlock) {
    const int64_t m = std::min(kGraySumBlock, n - k);
    sum += im.channels == 3 ? gray_sum_span(p + k, p + n + k, p + 2 * n + k, m) : byte_sum_span(p + k, m);
  }
  float mean;
  if (sum < (int64_t(1) << 24)) {
    mean = (float)sum / (float)n;  // every partial sum is an exact float32 integer
  } else {
    // The order of ATen's float32 reduction decides the sum: let it compute it.
    const at::Tensor t = im.tensor();
    const at::Tensor gray = im.channels == 3 ? gray_float_ref(t).floor_() : t.to(at::kFloat);
    mean = at::mean(gray, {-3, -2, -1}, true).item<float>();
  }
  blend_scalar_span(p, im.numel(), mean, (float)s.f[0], (float)(1.0 - s.f[0]));
}

void grayscale_fast(const PixelStep& s, Image& im, KernelScratch& scratch) {
  if (im.channels != 3) return grayscale_ref(s, im, scratch);  // 1: a copy or nothing; else torchvision's error
  const int64_t n = im.plane();
  uint8_t* p = im.u8();
  gray_u8_span(p, p + n, p + 2 * n, n, p);
  if (s.i[0] == 3) {
    std::memcpy(p + n, p, (size_t)n);
    std::memcpy(p + 2 * n, p, (size_t)n);
  }
  im.channels = s.i[0];
}

void hue_fast(const PixelStep& s, Image& im, KernelScratch&) {
  if (im.channels == 1) return;
  const int64_t n = im.plane();
  uint8_t* p = im.u8();
  hue_span(p, p + n, p + 2 * n, n, (float)s.f[0]);
}

std::vector<PixelStep> factor_probes(std::initializer_list<double> factors) {
  std::vector<PixelStep> out;
  for (double v : factors) {
    PixelStep s;
    s.f[0] = v;
    out.push_back(s);
  }
  return out;
}

// Factors as v2 draws them (float32 values), the edges, and values that hit ties.
std::vector<PixelStep> factor_probes_positive() {
  return factor_probes({0.0, 1.0, 0.6000000238418579, 1.399999976158142, 0.03125, 1.9900000095367432,
                        0.8123456239700317, 1.1799999475479126, 0.5, 2.0});
}

std::vector<PixelStep> hue_probes() {
  return factor_probes({0.0, 0.10000000149011612, -0.10000000149011612, 0.5, -0.5, 0.0123456, -0.3333333432674408,
                        0.25});
}

FP_REGISTER_PIXEL_KERNEL({"adjust_brightness", "f0=brightness_factor", brightness_ref, brightness_fast,
                          factor_probes_positive});
FP_REGISTER_PIXEL_KERNEL({"adjust_contrast", "f0=contrast_factor", contrast_ref, contrast_fast,
                          factor_probes_positive});
FP_REGISTER_PIXEL_KERNEL({"adjust_saturation", "f0=saturation_factor", saturation_ref, saturation_fast,
                          factor_probes_positive});
FP_REGISTER_PIXEL_KERNEL({"adjust_hue", "f0=hue_factor", hue_ref, hue_fast, hue_probes});
// One output channel: the probes include 1-channel images, which three output channels would
// grow (both variants raise there). Three differ from one only by the copies of the gray plane.
std::vector<PixelStep> grayscale_probes() {
  std::vector<PixelStep> out(1);
  out[0].i[0] = 1;
  return out;
}

FP_REGISTER_PIXEL_KERNEL({"rgb_to_grayscale", "i0=num_output_channels (1 or 3)", grayscale_ref, grayscale_fast,
                          grayscale_probes});

}  // namespace
}  // namespace fastprep

// ------------------------------------------------------------------------------------
// Draws of the transforms these kernels serve (native_draw.h).

namespace fastprep {
namespace {

// v2.ColorJitter: fn_idx = torch.randperm(4); then one uniform_ per configured factor, in the
// order brightness, contrast, saturation, hue; the adjustments run in fn_idx's order.
// ints: has_brightness, has_contrast, has_saturation, has_hue; floats: their (min, max) pairs.
void draw_color_jitter(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernels[4] = {pixel_kernel_id("adjust_brightness"), pixel_kernel_id("adjust_contrast"),
                                     pixel_kernel_id("adjust_saturation"), pixel_kernel_id("adjust_hue")};
  const int64_t* has = ctx.ints(node);
  const double* range = ctx.floats(node);
  const std::vector<int64_t> order = ctx.draws.randperm(4);
  float factor[4] = {};
  for (int k = 0; k < 4; k++)
    if (has[k]) factor[k] = ctx.draws.uniform(range[2 * k], range[2 * k + 1]);
  for (const int64_t k : order) {
    if (has[k]) ctx.emit(kernels[k]).f[0] = factor[k];
  }
}

// v2.Grayscale(num_output_channels). ints: num_output_channels.
void draw_grayscale(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("rgb_to_grayscale");
  const int64_t out = ctx.ints(node)[0];
  ctx.emit(kernel).i[0] = out;
  ctx.channels = out;
}

// v2.RandomGrayscale(p): `if torch.rand(1) >= p: skip`, then the image's own channel count.
// floats: p.
void draw_random_grayscale(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("rgb_to_grayscale");
  if (ctx.draws.rand() >= as_f32(ctx.floats(node)[0])) return;
  ctx.emit(kernel).i[0] = ctx.channels;
}

FP_REGISTER_NODE_DRAW("ColorJitter", draw_color_jitter);
FP_REGISTER_NODE_DRAW("Grayscale", draw_grayscale);
FP_REGISTER_NODE_DRAW("RandomGrayscale", draw_random_grayscale);

}  // namespace
}  // namespace fastprep
