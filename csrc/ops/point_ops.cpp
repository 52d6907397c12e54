// Point operations of torchvision v2 on uint8 images (torchvision/transforms/v2/functional/
// _color.py): posterize, solarize, autocontrast, equalize and invert, each as a reference (ATen's
// ops in torchvision's order) and a fast single pass, and the draws of RandomPosterize,
// RandomSolarize, RandomAutocontrast, RandomEqualize and RandomInvert.
//
// Why the fast kernels give the reference's bits:
// * posterize, invert: bitwise operations on the uint8 values;
// * solarize: `image >= threshold` is a comparison in float32 for a float threshold (an int one
//   compares in uint8, wrapped as torch converts it); both are monotone in the pixel, so they
//   select the pixels from the first value that passes the same comparison, found once;
// * autocontrast: per-channel minimum and maximum are exact in any order; each pixel then goes
//   through the same float32 subtraction, division, clamp and truncation as ATen's;
// * equalize: integer histogram, cumulative sum and floor divisions (no float at all).
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

void check_u8(const Image& im, const char* op) {
  TORCH_CHECK_TYPE(im.dtype == at::kByte, op, ": the native kernel takes uint8 images, got ", im.dtype);
}

// posterize_image's check of `bits` (i0), as torchvision words it.
int64_t posterize_bits(const PixelStep& s) {
  const int64_t bits = s.i[0];
  TORCH_CHECK_TYPE(bits >= 0 && bits <= 8, "bits must be a positive integer in the range [0, 8], got ", bits,
                   " instead.");
  return bits;
}

// solarize's threshold (f0): a Python int when i0 is 1 (then an integral double), else a float.
bool solarize_int_threshold(const PixelStep& s) { return s.i[0] != 0; }

void check_solarize_threshold(const PixelStep& s) {
  // `threshold > _max_value(uint8)`, in Python's int or float comparison
  const bool above = solarize_int_threshold(s) ? (int64_t)s.f[0] > 255 : s.f[0] > 255.0;
  TORCH_CHECK_TYPE(!above, "Threshold should be less or equal the maximum value of the dtype, but got ", s.f[0]);
}

void check_autocontrast_channels(const Image& im) {
  TORCH_CHECK_TYPE(im.channels == 1 || im.channels == 3,
                   "Input image tensor permitted channel values are 1 or 3, but found ", im.channels);
}

// ------------------------------------------------------------------------------------
// References: ATen, as torchvision calls it.

void posterize_ref(const PixelStep& s, Image& im, KernelScratch&) {  // posterize_image
  check_u8(im, "posterize");
  const int64_t bits = posterize_bits(s);
  const int64_t num_value_bits = 8;
  if (bits >= num_value_bits) return;
  const int64_t mask = ((int64_t(1) << bits) - 1) << (num_value_bits - bits);
  im.assign(im.tensor().bitwise_and(mask));
}

void invert_ref(const PixelStep&, Image& im, KernelScratch&) {  // invert_image
  check_u8(im, "invert");
  im.assign(im.tensor().bitwise_not());
}

void solarize_ref(const PixelStep& s, Image& im, KernelScratch&) {  // solarize_image
  check_u8(im, "solarize");
  check_solarize_threshold(s);
  const at::Scalar threshold = solarize_int_threshold(s) ? at::Scalar((int64_t)s.f[0]) : at::Scalar(s.f[0]);
  const at::Tensor image = im.tensor();
  im.assign(at::where(image.ge(threshold), image.bitwise_not(), image));
}

void autocontrast_ref(const PixelStep&, Image& im, KernelScratch&) {  // autocontrast_image
  check_u8(im, "autocontrast");
  check_autocontrast_channels(im);
  if (im.numel() == 0) return;
  const int64_t bound = 255;
  const at::Tensor float_image = im.tensor().to(at::kFloat);
  at::Tensor minimum = float_image.amin({-2, -1}, true);
  at::Tensor maximum = float_image.amax({-2, -1}, true);
  const at::Tensor eq_idxs = maximum == minimum;
  at::Tensor inv_scale = maximum.sub_(minimum).mul_(1.0 / (double)bound);
  minimum.masked_fill_(eq_idxs, 0.0);  // minimum[eq_idxs] = 0.0
  inv_scale.masked_fill_(eq_idxs, 1.0);
  const at::Tensor diff = float_image.sub_(minimum);
  im.assign(diff.div_(inv_scale).clamp_(0, bound).to(at::kByte));
}

void equalize_ref(const PixelStep&, Image& im, KernelScratch&) {  // equalize_image
  check_u8(im, "equalize");
  if (im.numel() == 0) return;
  const at::Tensor image = im.tensor();  // to_dtype_image(image, torch.uint8) returns a uint8 image as is
  const int64_t channels = im.channels;
  const at::Tensor flat_image = image.flatten(-2).to(at::kLong);
  const at::Tensor hist = at::zeros({channels, 256}, flat_image.options().dtype(at::kInt));
  hist.scatter_add_(-1, flat_image, at::ones({1}, hist.options()).expand_as(flat_image));
  at::Tensor cum_hist = hist.cumsum(-1);
  at::Tensor index = cum_hist.argmax(-1);
  at::Tensor num_non_max_pixels = at::rsub(hist.gather(-1, index.unsqueeze_(-1)), flat_image.size(-1));
  at::Tensor step = num_non_max_pixels.div_(255, "floor");
  const at::Tensor valid_equalization = step.ne(0).unsqueeze_(-1);
  cum_hist = cum_hist.slice(-1, 0, -1);
  const at::Tensor half_step = step.floor_divide(2);  // `step // 2`, taken before step.clamp_
  cum_hist.add_(half_step).div_(step.clamp_min_(1), "floor").clamp_(0, 255);
  at::Tensor lut = cum_hist.to(at::kByte);
  lut = at::cat({at::zeros({1}, lut.options()).expand({channels, 1}), lut}, -1);
  const at::Tensor equalized_image = lut.gather(-1, flat_image).view_as(image);
  im.assign(at::where(valid_equalization, equalized_image, image));
}

// ------------------------------------------------------------------------------------
// Fast kernels.

FP_ALWAYS_INLINE void and_span_body(uint8_t* __restrict p, int64_t n, uint8_t mask) {
  for (int64_t k = 0; k < n; k++) p[k] = p[k] & mask;
}

FP_ALWAYS_INLINE void not_span_body(uint8_t* __restrict p, int64_t n) {
  for (int64_t k = 0; k < n; k++) p[k] = (uint8_t)~p[k];
}

// Inverts the pixels >= first.
FP_ALWAYS_INLINE void solarize_span_body(uint8_t* __restrict p, int64_t n, uint8_t first) {
  for (int64_t k = 0; k < n; k++) p[k] = p[k] >= first ? (uint8_t)~p[k] : p[k];
}

FP_ALWAYS_INLINE void min_max_span_body(const uint8_t* __restrict p, int64_t n, uint8_t* lo, uint8_t* hi) {
  uint8_t a = 255, b = 0;
  for (int64_t k = 0; k < n; k++) {
    a = std::min(a, p[k]);
    b = std::max(b, p[k]);
  }
  *lo = a;
  *hi = b;
}

// autocontrast_ref's float32 arithmetic for one pixel value: ((float)v - minimum) / inv_scale,
// clamped to [0, 255] and truncated.
inline uint8_t autocontrast_value(uint8_t v, float minimum, float inv_scale) {
  return (uint8_t)(int32_t)std::min(std::max(((float)v - minimum) / inv_scale, 0.0f), 255.0f);
}

// The spans compiled for AVX2+FMA and for the baseline (isa.h: FP_VARIANTS).
FP_VARIANTS(and_span, (uint8_t * p, int64_t n, uint8_t mask), (p, n, mask))
FP_VARIANTS(not_span, (uint8_t * p, int64_t n), (p, n))
FP_VARIANTS(solarize_span, (uint8_t * p, int64_t n, uint8_t first), (p, n, first))
FP_VARIANTS(min_max_span, (const uint8_t* p, int64_t n, uint8_t* lo, uint8_t* hi), (p, n, lo, hi))

}  // namespace

// p[k] = lut[p[k]]. AVX2: pshufb looks up 16 entries by an index's low nibble and gives 0
// where the index's bit 7 is set. Take the half of the table v falls in (v < 128, or v - 128
// for v >= 128) and H, the high nibble of that 7-bit value: for h = 0..7, the index
// v + 0x70 - 16 h keeps v's low nibble and has bit 7 clear exactly when H <= h, so XOR-ing the
// lookups of the differences D_h = T_h ^ T_{h+1} (T_h: the 16 entries of high nibble h in that
// half; T_8 read as 0) telescopes to T_H. Both halves are computed; bit 7 of v picks one.
#if FP_HAVE_AVX2_TARGET
FP_TARGET_AVX2 static void lut_span_avx2(uint8_t* p, int64_t n, const uint8_t* lut) {
  __m256i diff[16];
  for (int h = 0; h < 16; h++) {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lut + 16 * h));
    const __m128i next =
        h % 8 == 7 ? _mm_setzero_si128() : _mm_loadu_si128(reinterpret_cast<const __m128i*>(lut + 16 * (h + 1)));
    diff[h] = _mm256_broadcastsi128_si256(_mm_xor_si128(t, next));
  }
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k));
    const __m256i upper = _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80));  // v - 128 for v >= 128
    __m256i low_half = _mm256_setzero_si256(), high_half = _mm256_setzero_si256();
    for (int h = 0; h < 8; h++) {
      const __m256i offset = _mm256_set1_epi8((char)(0x70 - 16 * h));
      low_half = _mm256_xor_si256(low_half, _mm256_shuffle_epi8(diff[h], _mm256_add_epi8(v, offset)));
      high_half = _mm256_xor_si256(high_half, _mm256_shuffle_epi8(diff[h + 8], _mm256_add_epi8(upper, offset)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + k), _mm256_blendv_epi8(low_half, high_half, v));
  }
  for (; k < n; k++) p[k] = lut[p[k]];
}
#endif

static void lut_span_base(uint8_t* p, int64_t n, const uint8_t* lut) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {  // eight lookups, one store
    uint8_t out[8];
    for (int b = 0; b < 8; b++) out[b] = lut[p[k + b]];
    std::memcpy(p + k, out, 8);
  }
  for (; k < n; k++) p[k] = lut[p[k]];
}

void lut_span(uint8_t* p, int64_t n, const uint8_t* lut) {
#if FP_HAVE_AVX2_TARGET
  if (isa_level() >= kIsaAvx2) return lut_span_avx2(p, n, lut);
#endif
  lut_span_base(p, n, lut);
}

namespace {

void posterize_fast(const PixelStep& s, Image& im, KernelScratch&) {
  check_u8(im, "posterize");
  const int64_t bits = posterize_bits(s);
  if (bits >= 8) return;
  and_span(im.u8(), im.numel(), (uint8_t)(((1 << bits) - 1) << (8 - bits)));
}

void invert_fast(const PixelStep&, Image& im, KernelScratch&) {
  check_u8(im, "invert");
  not_span(im.u8(), im.numel());
}

// The smallest uint8 value v for which `v >= threshold` holds as torch compares them (256: none).
int solarize_first_value(const PixelStep& s) {
  if (solarize_int_threshold(s)) return (uint8_t)(int64_t)s.f[0];  // the int, converted to uint8
  const float threshold = (float)s.f[0];                            // the comparison's float32 operand
  for (int v = 0; v < 256; v++)
    if ((float)v >= threshold) return v;
  return 256;
}

void solarize_fast(const PixelStep& s, Image& im, KernelScratch&) {
  check_u8(im, "solarize");
  check_solarize_threshold(s);
  const int first = solarize_first_value(s);
  if (first < 256) solarize_span(im.u8(), im.numel(), (uint8_t)first);
}

void autocontrast_fast(const PixelStep&, Image& im, KernelScratch&) {
  check_u8(im, "autocontrast");
  check_autocontrast_channels(im);
  const int64_t n = im.plane();
  if (n == 0) return;
  for (int64_t c = 0; c < im.channels; c++) {
    uint8_t* p = im.u8() + c * n;
    uint8_t lo, hi;
    min_max_span(p, n, &lo, &hi);
    float minimum = (float)lo, inv_scale = ((float)hi - (float)lo) * (float)(1.0 / 255.0);
    if (lo == hi) {
      minimum = 0.0f;
      inv_scale = 1.0f;
    }
    uint8_t lut[256];
    for (int v = 0; v < 256; v++) lut[v] = autocontrast_value((uint8_t)v, minimum, inv_scale);
    lut_span(p, n, lut);
  }
}

// One channel's histogram, counted into four tables in turn so that runs of equal pixels do not
// wait on one counter.
void histogram(const uint8_t* p, int64_t n, int64_t* hist) {
  uint32_t part[4][256] = {};
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    part[0][p[k]]++;
    part[1][p[k + 1]]++;
    part[2][p[k + 2]]++;
    part[3][p[k + 3]]++;
  }
  for (; k < n; k++) part[0][p[k]]++;
  for (int v = 0; v < 256; v++) hist[v] = (int64_t)part[0][v] + part[1][v] + part[2][v] + part[3][v];
}

void equalize_fast(const PixelStep&, Image& im, KernelScratch&) {
  check_u8(im, "equalize");
  const int64_t n = im.plane();
  if (n == 0) return;
  TORCH_CHECK_VALUE(n < (int64_t(1) << 31), "equalize: ", n, " pixels per channel overflow torchvision's int32 "
                    "histogram");
  for (int64_t c = 0; c < im.channels; c++) {
    uint8_t* p = im.u8() + c * n;
    int64_t hist[256];
    histogram(p, n, hist);
    // the argmax of the cumulative histogram: the first bin that reaches n, the last non-empty one
    int last = 255;
    while (hist[last] == 0) last--;
    const int64_t step = (n - hist[last]) / 255;
    if (step == 0) continue;  // torchvision keeps the channel as it is
    uint8_t lut[256];
    lut[0] = 0;
    int64_t cum = 0;
    for (int v = 0; v < 255; v++) {
      cum += hist[v];
      lut[v + 1] = (uint8_t)std::min<int64_t>((cum + step / 2) / step, 255);
    }
    lut_span(p, n, lut);
  }
}

std::vector<PixelStep> posterize_probes() {
  std::vector<PixelStep> out;
  for (int64_t bits = 0; bits <= 8; bits++) {
    PixelStep s;
    s.i[0] = bits;
    out.push_back(s);
  }
  return out;
}

// Float thresholds (the auto-augment ones, float32 ties, beyond the range, NaN) and int ones
// (wrapped to uint8 by torch's comparison).
std::vector<PixelStep> solarize_probes() {
  std::vector<PixelStep> out;
  const double floats[] = {0.0,   0.5,   1.0,   40.0, 127.5,  128.0,     128.000001, 127.99999999,
                           199.99, 200.0, 254.5, 255.0, -1.0, -300.0, -INFINITY, NAN};
  for (double t : floats) {
    PixelStep s;
    s.f[0] = t;
    out.push_back(s);
  }
  for (double t : {0.0, 1.0, 128.0, 200.0, 255.0, -1.0, -255.0, -256.0, -300.0}) {
    PixelStep s;
    s.i[0] = 1;
    s.f[0] = t;
    out.push_back(s);
  }
  return out;
}

FP_REGISTER_PIXEL_KERNEL({"posterize", "i0=bits (0..8)", posterize_ref, posterize_fast, posterize_probes});
FP_REGISTER_PIXEL_KERNEL({"solarize", "f0=threshold, i0=1 when the threshold is a Python int", solarize_ref,
                          solarize_fast, solarize_probes});
FP_REGISTER_PIXEL_KERNEL({"autocontrast", "", autocontrast_ref, autocontrast_fast, nullptr});
FP_REGISTER_PIXEL_KERNEL({"equalize", "", equalize_ref, equalize_fast, nullptr});
FP_REGISTER_PIXEL_KERNEL({"invert", "", invert_ref, invert_fast, nullptr});

}  // namespace
}  // namespace fastprep

// ------------------------------------------------------------------------------------
// Draws of the transforms these kernels serve (native_draw.h): each is a
// _RandomApplyTransform, `if torch.rand(1) >= p: skip`, then its kernel with static parameters.

namespace fastprep {
namespace {

bool skipped(const NodeSpec& node, DrawContext& ctx) { return ctx.draws.rand() >= as_f32(ctx.floats(node)[0]); }

// v2.RandomPosterize(bits, p). ints: bits; floats: p.
void draw_random_posterize(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("posterize");
  if (skipped(node, ctx)) return;
  ctx.emit(kernel).i[0] = ctx.ints(node)[0];
}

// v2.RandomSolarize(threshold, p). ints: 1 for an int threshold; floats: p, threshold.
void draw_random_solarize(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("solarize");
  if (skipped(node, ctx)) return;
  PixelStep& s = ctx.emit(kernel);
  s.i[0] = ctx.ints(node)[0];
  s.f[0] = ctx.floats(node)[1];
}

// v2.RandomAutocontrast(p), v2.RandomEqualize(p), v2.RandomInvert(p). floats: p.
void draw_random_autocontrast(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("autocontrast");
  if (!skipped(node, ctx)) ctx.emit(kernel);
}

void draw_random_equalize(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("equalize");
  if (!skipped(node, ctx)) ctx.emit(kernel);
}

void draw_random_invert(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("invert");
  if (!skipped(node, ctx)) ctx.emit(kernel);
}

FP_REGISTER_NODE_DRAW("RandomPosterize", draw_random_posterize);
FP_REGISTER_NODE_DRAW("RandomSolarize", draw_random_solarize);
FP_REGISTER_NODE_DRAW("RandomAutocontrast", draw_random_autocontrast);
FP_REGISTER_NODE_DRAW("RandomEqualize", draw_random_equalize);
FP_REGISTER_NODE_DRAW("RandomInvert", draw_random_invert);

}  // namespace
}  // namespace fastprep
