// torch.ops.fastprep.pil_resize: Pillow's Image.resize (BOX, BILINEAR, HAMMING, BICUBIC,
// LANCZOS) of a uint8 channels-last image, bit for bit, for a window of the output grid of a
// virtual image of which `image` holds a window.
//
// Arithmetic (Pillow's libImaging/Resample.c, reproduced so the bytes are the same; read
// there, not copied):
// * per dimension, scale = in / out (the input extent as a float, as Pillow's box is),
//   filterscale = max(scale, 1), support = filter support * filterscale; output index i has
//   centre (i + 0.5) * scale, taps [trunc(centre - support + 0.5) clamped to 0,
//   trunc(centre + support + 0.5) clamped to in), double weights
//   filter((tap - centre + 0.5) / filterscale) normalised by their sum (unless it is 0);
// * weights to fixed point with 22 fraction bits, rounded half away from zero
//   (trunc(w * 2^22 +- 0.5));
// * a dimension whose output size equals its input size is not resampled; otherwise one pass
//   runs first (over the rows or columns the other reads) into uint8, then the other
//   (vertical_first says which); each value is (2^21 + sum w * x) >> 22 (arithmetic shift)
//   clamped to [0, 255].
// Pillow's numerics are its own (a fork or another version may round differently), so the
// Python side proves this kernel against the installed Pillow before using it
// (fastprep/transforms/_pil.py).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "exit_gate.h"
#include "ops/pil_resample.h"

#include "isa.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#if FP_HAVE_AVX2_TARGET
#include <immintrin.h>
#endif

namespace fastprep {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double box_filter(double x) { return (x > -0.5 && x <= 0.5) ? 1.0 : 0.0; }

double bilinear_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double hamming_filter(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x = x * M_PI;
  // Pillow's constants are float literals, promoted to double
  return std::sin(x) / x * ((double)0.54f + (double)0.46f * std::cos(x));
}

double bicubic_filter(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double lanczos_filter(double x) { return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3) : 0.0; }

struct Filter {
  double (*fn)(double);
  double support;
};

Filter filter_of(int64_t id) {
  switch (id) {
    case kPilBox: return {box_filter, 0.5};
    case kPilBilinear: return {bilinear_filter, 1.0};
    case kPilHamming: return {hamming_filter, 1.0};
    case kPilBicubic: return {bicubic_filter, 2.0};
    default: return {lanczos_filter, 3.0};
  }
}

// Fixed-point taps of output indices [out_start, out_start + n) of one dimension: output j
// reads `count[j]` inputs from `first[j]` (in full-image coordinates) with weights
// w[j * K ...]. An identity dimension has K = 1, weight 1 << 22.
struct Taps {
  int K = 1;
  std::vector<int> first, count;
  std::vector<int32_t> w;
  int64_t lo = 0, hi = 0;  // inputs [lo, hi) that the outputs read
};

void resampled_taps(Taps& t, int64_t in_size, int64_t out_size, int64_t out_start, int64_t n, const Filter& f) {
  const float in0 = 0.0f, in1 = (float)in_size;
  const double scale = (double)(in1 - in0) / (double)out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = f.support * filterscale;
  const int K = (int)std::ceil(support) * 2 + 1;
  const double inv_filterscale = 1.0 / filterscale;
  t.K = K;
  t.first.assign((size_t)n, 0);
  t.count.assign((size_t)n, 0);
  t.w.assign((size_t)(n * K), 0);
  std::vector<double> k((size_t)K);
  for (int64_t j = 0; j < n; j++) {
    const int64_t xx = out_start + j;
    const double center = (double)in0 + ((double)xx + 0.5) * scale;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_size) xmax = (int)in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) {
      const double w = f.fn(((double)(x + xmin) - center + 0.5) * inv_filterscale);
      k[(size_t)x] = w;
      ww += w;
    }
    if (ww != 0.0)
      for (int x = 0; x < xmax; x++) k[(size_t)x] /= ww;
    for (int x = 0; x < xmax; x++) {
      const double v = k[(size_t)x];
      t.w[(size_t)(j * K + x)] = v < 0 ? (int32_t)(-0.5 + v * (1 << kPrecisionBits))
                                       : (int32_t)(0.5 + v * (1 << kPrecisionBits));
    }
    t.first[(size_t)j] = xmin;
    t.count[(size_t)j] = xmax;
  }
  t.lo = n ? t.first[0] : 0;
  t.hi = n ? (int64_t)t.first[(size_t)(n - 1)] + t.count[(size_t)(n - 1)] : 0;
}

void identity_taps(Taps& t, int64_t out_start, int64_t n) {
  t.K = 1;
  t.first.resize((size_t)n);
  t.count.assign((size_t)n, 1);
  t.w.assign((size_t)n, 1 << kPrecisionBits);
  for (int64_t j = 0; j < n; j++) t.first[(size_t)j] = (int)(out_start + j);
  t.lo = out_start, t.hi = out_start + n;
}

FP_ALWAYS_INLINE uint8_t clip8(int32_t v) {
  v >>= kPrecisionBits;  // arithmetic shift, as Pillow's (floor)
  return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

// One output pixel of the horizontal pass: `count` taps (or, with K > 0, exactly K taps, the
// weights past `count` being 0: a loop the compiler unrolls; integer sums, so the same bytes).
template <int C, int K>
inline void h_pixel(const uint8_t* p, const int32_t* w, int count, uint8_t* d) {
  int32_t s[C];
  for (int c = 0; c < C; c++) s[c] = 1 << (kPrecisionBits - 1);
  const int n = K > 0 ? K : count;
  for (int x = 0; x < n; x++)
    for (int c = 0; c < C; c++) s[c] += (int32_t)p[x * C + c] * w[x];
  for (int c = 0; c < C; c++) d[c] = clip8(s[c]);
}

// Horizontal pass of `rows` rows of `width` pixels: out[r][j] = taps of in[r] (in columns
// relative to `in`, which starts at column col0).
template <int C, int K>
void h_pass_k(const uint8_t* in, int64_t in_stride, int64_t rows, int64_t width, const Taps& t, int64_t col0,
              uint8_t* out, int64_t n, bool reverse) {
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t* line = in + r * in_stride;
    uint8_t* o = out + r * n * C;
    for (int64_t j = 0; j < n; j++) {
      const int64_t at = t.first[(size_t)j] - col0;
      const uint8_t* p = line + at * C;
      const int32_t* w = &t.w[(size_t)(j * t.K)];
      uint8_t* d = o + (reverse ? n - 1 - j : j) * C;
      if (K > 0 && at + K <= width)  // all K taps inside the row
        h_pixel<C, K>(p, w, t.count[(size_t)j], d);
      else
        h_pixel<C, 0>(p, w, t.count[(size_t)j], d);
    }
  }
}

#if FP_HAVE_AVX2_TARGET
// The horizontal pass of RGB rows on AVX2, Pillow's integer sums unchanged. The taps go four
// at a time: one 16-byte load, shuffled to [R0 R1 G0 G1 B0 B1 0 0 | R2 R3 G2 G3 B2 B3 0 0] as
// int16, and multiplied pairwise (vpmaddwd) by the weights split into w = hi * 2^12 + lo
// (lo in [0, 4096), both int16): sum w x = 2^12 sum hi x + sum lo x exactly, in int32 as
// Pillow sums. The halves then added, shifted and clamped as clip8 does, four output pixels
// at a time into a row of 4-byte pixels, then packed to RGB (mirrored when asked). An output
// pixel whose load would pass the row's end takes the scalar loop.
constexpr int kSplitBits = 12;
constexpr int kMaxQuads = 64;  // the most taps the vector path takes: 4 * kMaxQuads

// The sum of one output pixel's taps (without Pillow's rounding half), [R G B 0] in int32.
FP_TARGET_AVX2 FP_ALWAYS_INLINE __m128i rgb_taps(const uint8_t* p, const int16_t* w, int Q) {
  const __m128i gather = _mm_setr_epi8(0, 3, 1, 4, 2, 5, -1, -1, 6, 9, 7, 10, 8, 11, -1, -1);
  __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
  for (int q = 0; q < Q; q++) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12 * q));
    const __m256i x = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(b, gather));
    const __m256i* wq = reinterpret_cast<const __m256i*>(w + 32 * q);
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(x, _mm256_loadu_si256(wq)));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(x, _mm256_loadu_si256(wq + 1)));
  }
  const __m256i s = _mm256_add_epi32(_mm256_slli_epi32(hi, kSplitBits), lo);
  return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// Pillow's rounding of a sum: (2^21 + s) >> 22 (arithmetic), kept as int32 lanes.
FP_TARGET_AVX2 FP_ALWAYS_INLINE __m128i rgb_round(__m128i s) {
  return _mm_srai_epi32(_mm_add_epi32(s, _mm_set1_epi32(1 << (kPrecisionBits - 1))), kPrecisionBits);
}

// Output pixel j of a row into px (R G B and a spare byte): the vector sum where its load
// stays inside the row, else the scalar loop.
FP_TARGET_AVX2 FP_ALWAYS_INLINE uint32_t rgb_pixel(const uint8_t* line, int64_t at, int64_t row_bytes,
                                                   const Taps& t, int64_t j, const int16_t* quads, int Q) {
  uint8_t d[4] = {0, 0, 0, 0};
  if (at * 3 + 12 * (int64_t)Q + 4 > row_bytes) {
    h_pixel<3, 0>(line + at * 3, &t.w[(size_t)(j * t.K)], t.count[(size_t)j], d);
    uint32_t px;
    std::memcpy(&px, d, 4);
    return px;
  }
  const __m128i v = rgb_round(rgb_taps(line + at * 3, quads + j * Q * 32, Q));
  const __m128i v16 = _mm_packs_epi32(v, v);  // then [0, 255] by saturation: clip8
  return (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(v16, v16));
}

// The row's pixels px[0..n) (4 bytes each) to `o` as RGB, mirrored when `reverse`.
FP_TARGET_AVX2 FP_ALWAYS_INLINE void rgb_compact(const uint32_t* px, int64_t n, bool reverse, uint8_t* o) {
  const __m128i fwd = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m128i rev = _mm_setr_epi8(12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, -1, -1, -1, -1);
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(px + k));
    const __m128i c = _mm_shuffle_epi8(v, reverse ? rev : fwd);
    uint8_t* d = o + (reverse ? n - 4 - k : k) * 3;
    _mm_storel_epi64(reinterpret_cast<__m128i*>(d), c);
    const uint32_t tail = (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(c, 8));
    std::memcpy(d + 8, &tail, 4);
  }
  for (; k < n; k++) {
    uint8_t* d = o + (reverse ? n - 1 - k : k) * 3;
    std::memcpy(d, &px[k], 3);
  }
}

FP_TARGET_AVX2 void h_pass_rgb_avx2(const uint8_t* in, int64_t in_stride, int64_t rows, int64_t width,
                                    const Taps& t, const int16_t* quads, int Q, int64_t col0, uint8_t* out,
                                    int64_t n, bool reverse) {
  const int64_t row_bytes = width * 3;
  std::vector<uint32_t> px((size_t)n);
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t* line = in + r * in_stride;
    int64_t j = 0;
    // four output pixels a step, their roundings and packing done together; the taps'
    // first columns grow with j, so the fourth pixel's load is the one to check
    for (; j + 4 <= n && (t.first[(size_t)(j + 3)] - col0) * 3 + 12 * (int64_t)Q + 4 <= row_bytes; j += 4) {
      __m128i v[4];
      for (int k = 0; k < 4; k++)
        v[k] = rgb_round(rgb_taps(line + (t.first[(size_t)(j + k)] - col0) * 3, quads + (j + k) * Q * 32, Q));
      const __m128i b = _mm_packus_epi16(_mm_packs_epi32(v[0], v[1]), _mm_packs_epi32(v[2], v[3]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(px.data() + j), b);
    }
    for (; j < n; j++) px[(size_t)j] = rgb_pixel(line, t.first[(size_t)j] - col0, row_bytes, t, j, quads, Q);
    rgb_compact(px.data(), n, reverse, out + r * n * 3);
  }
}

// The weights of `t` laid out for h_pass_rgb_avx2: Q quads per output pixel, each the hi and
// the lo halves of four taps as 16 int16 lanes [a b a b a b 0 0 | c d c d c d 0 0]; taps past
// an output's count are 0. False when a weight does not split into int16 halves (|w| >= 2^23:
// not met with Pillow's normalised filters; the scalar loop runs then).
bool rgb_quads(const Taps& t, int64_t n, int Q, std::vector<int16_t>& quads) {
  quads.assign((size_t)(n * Q * 32), 0);
  for (int64_t j = 0; j < n; j++) {
    const int32_t* w = &t.w[(size_t)(j * t.K)];
    for (int x = 0; x < t.count[(size_t)j]; x++) {
      if (w[x] >= (1 << 23) || w[x] < -(1 << 23)) return false;
      const int32_t lo = w[x] & ((1 << kSplitBits) - 1), hi = (w[x] - lo) / (1 << kSplitBits);
      int16_t* lane = &quads[(size_t)((j * Q + x / 4) * 32 + (x % 4 / 2) * 8 + x % 2)];
      for (int c = 0; c < 3; c++) lane[2 * c] = (int16_t)hi, lane[16 + 2 * c] = (int16_t)lo;
    }
  }
  return true;
}
#endif

template <int C>
void h_pass(const uint8_t* in, int64_t in_stride, int64_t rows, int64_t width, const Taps& t, int64_t col0,
            uint8_t* out, int64_t n, bool reverse) {
  if (t.K == 1 && !reverse) {  // identity: the columns copied
    for (int64_t r = 0; r < rows; r++)
      std::memcpy(out + r * n * C, in + r * in_stride + (t.first[0] - col0) * C, (size_t)(n * C));
    return;
  }
#if FP_HAVE_AVX2_TARGET
  if (C == 3 && t.K > 1 && isa_level() >= kIsaAvx2) {
    const int taps = n ? *std::max_element(t.count.begin(), t.count.begin() + n) : 1;  // often K - 1 or K - 2
    const int Q = (taps + 3) / 4;
    std::vector<int16_t> quads;  // 4x the bytes of t.w: past kMaxQuads (a downscale past ~100x) the scalar loop
    if (Q <= kMaxQuads && rgb_quads(t, n, Q, quads))
      return h_pass_rgb_avx2(in, in_stride, rows, width, t, quads.data(), Q, col0, out, n, reverse);
  }
#endif
  switch (t.K) {
    case 3: return h_pass_k<C, 3>(in, in_stride, rows, width, t, col0, out, n, reverse);
    case 5: return h_pass_k<C, 5>(in, in_stride, rows, width, t, col0, out, n, reverse);
    case 7: return h_pass_k<C, 7>(in, in_stride, rows, width, t, col0, out, n, reverse);
    default: return h_pass_k<C, 0>(in, in_stride, rows, width, t, col0, out, n, reverse);
  }
}

// One output row of the vertical pass: `count` input rows `in_stride` apart, weights `w`, `len`
// bytes; in blocks of kBlock bytes whose sums stay in registers, the last block ending at the
// row's end (overlapping the one before: those bytes are computed again, the same values).
// Integer sums, so each ISA variant gives the same bytes.
constexpr int64_t kBlock = 64;

FP_ALWAYS_INLINE void v_block(const uint8_t* in, int64_t in_stride, const int32_t* w, int count, int64_t x0,
                              uint8_t* __restrict o) {
  int32_t a[kBlock];
  for (int64_t x = 0; x < kBlock; x++) a[x] = 1 << (kPrecisionBits - 1);
  for (int y = 0; y < count; y++) {
    const uint8_t* __restrict line = in + y * in_stride + x0;
    const int32_t wy = w[y];
    for (int64_t x = 0; x < kBlock; x++) a[x] += (int32_t)line[x] * wy;
  }
  for (int64_t x = 0; x < kBlock; x++) o[x0 + x] = clip8(a[x]);
}

FP_ALWAYS_INLINE void v_row_body(const uint8_t* in, int64_t in_stride, const int32_t* w, int count, int64_t len,
                                 uint8_t* __restrict o) {
  if (len < kBlock) {
    for (int64_t x = 0; x < len; x++) {
      int32_t a = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < count; y++) a += (int32_t)in[y * in_stride + x] * w[y];
      o[x] = clip8(a);
    }
    return;
  }
  int64_t x0 = 0;
  for (; x0 + kBlock <= len; x0 += kBlock) v_block(in, in_stride, w, count, x0, o);
  if (x0 < len) v_block(in, in_stride, w, count, len - kBlock, o);
}

FP_VARIANTS(v_row, (const uint8_t* in, int64_t in_stride, const int32_t* w, int count, int64_t len, uint8_t* o),
            (in, in_stride, w, count, len, o))

// Vertical pass: out row j = taps over rows of `in` (rows relative to row0), `len` bytes a row.
void v_pass(const uint8_t* in, int64_t in_stride, int64_t row0, const Taps& t, int64_t rows_out, int64_t len,
            uint8_t* out) {
  for (int64_t j = 0; j < rows_out; j++)
    v_row(in + (t.first[(size_t)j] - row0) * in_stride, in_stride, &t.w[(size_t)(j * t.K)], t.count[(size_t)j], len,
          out + j * len);
}

void h_pass_any(int64_t C, const uint8_t* in, int64_t in_stride, int64_t rows, int64_t width, const Taps& t,
                int64_t col0, uint8_t* out, int64_t n, bool reverse) {
  switch (C) {
    case 1: return h_pass<1>(in, in_stride, rows, width, t, col0, out, n, reverse);
    case 3: return h_pass<3>(in, in_stride, rows, width, t, col0, out, n, reverse);
    default: return h_pass<4>(in, in_stride, rows, width, t, col0, out, n, reverse);
  }
}

void check_reads(const Taps& t, int64_t origin, int64_t size, const char* what) {
  TORCH_CHECK_VALUE(t.lo >= origin && t.hi <= origin + size, "pil_resize: the output window reads ", what,
                    "s [", t.lo, ", ", t.hi, ") of the full image, the image holds [", origin, ", ", origin + size,
                    ")");
}

// Which pass Pillow runs first when both dimensions change. Pillow 12 always ran the
// horizontal one first; Pillow 13 runs the vertical one first when the height shrinks and
// 2 (out_w - in_w) > out_h - in_h (found by measuring Pillow 13.0 on random sizes: no source
// was at hand). Either way the probe (fastprep/transforms/_pil.py) checks the installed
// Pillow against this kernel on sizes on both sides of the rule, and a Pillow that orders the
// passes otherwise falls back to itself.
bool vertical_first(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w) {
  if (out_h == in_h || out_w == in_w) return false;  // one pass only
  return out_h < in_h && 2 * (out_w - in_w) > out_h - in_h;
}

}  // namespace

void check_pil_resample_args(int64_t C, int64_t H, int64_t W, int64_t full_out_h, int64_t full_out_w,
                             int64_t out_top, int64_t out_left, int64_t out_h, int64_t out_w, int64_t full_in_h,
                             int64_t full_in_w, int64_t in_top, int64_t in_left, int64_t filter) {
  TORCH_CHECK_VALUE(C == 1 || C == 3 || C == 4, "pil_resize: image must have 1, 3 or 4 channels, got ", C);
  TORCH_CHECK_VALUE(filter >= kPilBox && filter <= kPilLanczos, "pil_resize: filter must be 1..5 (box, bilinear, "
                    "hamming, bicubic, lanczos), got ", filter);
  constexpr int64_t kMax = 1 << 24;  // Pillow's box is float: sizes stay exact below 2^24
  TORCH_CHECK_VALUE(full_out_h > 0 && full_out_w > 0 && full_out_h < kMax && full_out_w < kMax,
                    "pil_resize: full_out must be positive and < 2^24, got ", full_out_h, "x", full_out_w);
  TORCH_CHECK_VALUE(full_in_h > 0 && full_in_w > 0 && full_in_h < kMax && full_in_w < kMax,
                    "pil_resize: full_in must be positive and < 2^24, got ", full_in_h, "x", full_in_w);
  TORCH_CHECK_VALUE(out_h > 0 && out_w > 0 && out_top >= 0 && out_left >= 0 && out_top + out_h <= full_out_h &&
                        out_left + out_w <= full_out_w,
                    "pil_resize: out_window (", out_top, ", ", out_left, ", ", out_h, ", ", out_w,
                    ") must be a non-empty window of full_out ", full_out_h, "x", full_out_w);
  TORCH_CHECK_VALUE(H > 0 && W > 0 && in_top >= 0 && in_left >= 0 && in_top + H <= full_in_h &&
                        in_left + W <= full_in_w,
                    "pil_resize: the image (", H, "x", W, " at ", in_top, ", ", in_left,
                    ") must lie inside full_in ", full_in_h, "x", full_in_w);
}

void pil_resample_into(const uint8_t* ip, int64_t C, int64_t H, int64_t W, int64_t rs, int64_t full_out_h,
                       int64_t full_out_w, int64_t out_top, int64_t out_left, int64_t out_h, int64_t out_w,
                       int64_t full_in_h, int64_t full_in_w, int64_t in_top, int64_t in_left, int64_t filter,
                       bool hflip, uint8_t* op) {
  const Filter f = filter_of(filter);
  const bool need_h = full_out_w != full_in_w, need_v = full_out_h != full_in_h;
  Taps th, tv;
  if (need_h) resampled_taps(th, full_in_w, full_out_w, out_left, out_w, f);
  else identity_taps(th, out_left, out_w);
  if (need_v) resampled_taps(tv, full_in_h, full_out_h, out_top, out_h, f);
  else identity_taps(tv, out_top, out_h);
  check_reads(th, in_left, W, "column");
  check_reads(tv, in_top, H, "row");
  const int64_t orow = out_w * C;
  if (vertical_first(full_in_h, full_in_w, full_out_h, full_out_w)) {
    // The vertical pass over the columns the horizontal pass reads, then the horizontal pass.
    const int64_t c0 = th.lo, cols = th.hi - th.lo;
    std::unique_ptr<uint8_t[]> tmp(new uint8_t[(size_t)(out_h * cols * C)]);
    v_pass(ip + (tv.lo - in_top) * rs + (c0 - in_left) * C, rs, tv.lo, tv, out_h, cols * C, tmp.get());
    h_pass_any(C, tmp.get(), cols * C, out_h, cols, th, c0, op, out_w, hflip);
    return;
  }
  const int64_t r0 = tv.lo, rows = tv.hi - tv.lo;
  // The horizontal pass (identity taps copy) over the rows the vertical pass reads.
  std::unique_ptr<uint8_t[]> tmp(new uint8_t[(size_t)(rows * orow)]);
  h_pass_any(C, ip + (r0 - in_top) * rs, rs, rows, W, th, in_left, tmp.get(), out_w, hflip);
  if (!need_v) {
    std::memcpy(op, tmp.get(), (size_t)(rows * orow));
    return;
  }
  v_pass(tmp.get(), orow, r0, tv, out_h, orow, op);
}

static void check_group(c10::ArrayRef<int64_t> values, size_t expected, const char* name, const char* fields) {
  TORCH_CHECK_VALUE(values.size() == expected, "pil_resize: ", name, " must hold ", expected, " numbers (", fields,
                    "), got ", values.size());
}

at::Tensor pil_resize(const at::Tensor& image, at::IntArrayRef full_out, at::IntArrayRef out_window,
                      at::IntArrayRef full_in, at::IntArrayRef in_origin, int64_t filter, bool hflip) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  check_group(full_out, 2, "full_out", "height, width");
  check_group(out_window, 4, "out_window", "top, left, height, width");
  check_group(full_in, 2, "full_in", "height, width");
  check_group(in_origin, 2, "in_origin", "top, left");
  TORCH_CHECK_VALUE(image.device().is_cpu(), "pil_resize: image must be a CPU tensor");
  TORCH_CHECK_VALUE(image.scalar_type() == at::kByte, "pil_resize: image must be uint8, got ", image.scalar_type());
  TORCH_CHECK_VALUE(image.dim() == 3, "pil_resize: image must be [C, H, W], got ", image.dim(), " dims");
  const int64_t C = image.size(0), H = image.size(1), W = image.size(2);
  check_pil_resample_args(C, H, W, full_out[0], full_out[1], out_window[0], out_window[1], out_window[2],
                          out_window[3], full_in[0], full_in[1], in_origin[0], in_origin[1], filter);
  const at::Tensor hwc = image.permute({1, 2, 0}).contiguous();
  at::Tensor out = at::empty({out_window[2], out_window[3], C}, image.options());
  pil_resample_into(hwc.data_ptr<uint8_t>(), C, H, W, W * C, full_out[0], full_out[1], out_window[0], out_window[1],
                    out_window[2], out_window[3], full_in[0], full_in[1], in_origin[0], in_origin[1], filter, hflip,
                    out.data_ptr<uint8_t>());
  return out.permute({2, 0, 1});
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("pil_resize", &pil_resize); }

}  // namespace fastprep
