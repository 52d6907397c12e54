// torch.ops.fastprep.resize_aa: bilinear, bicubic or nearest resize of a uint8 channels-last
// image (C = 1, 3, 4), bit-identical to torch's uint8 kernels (aten::_upsample_bilinear2d_aa,
// aten::_upsample_bicubic2d_aa, and with antialias=False aten::upsample_bilinear2d /
// aten::upsample_bicubic2d; aten::upsample_nearest2d, aten::_upsample_nearest_exact2d), for a
// window of the output grid of a virtual image of which `image` holds a window.
//
// Arithmetic (the same as torch's, so that the bytes are the same):
// * per output index i of a dimension, double weights: with s = input px per output px
//   (1/scale when a scale is given, in/out otherwise) and the filter's half-width r (1
//   bilinear: the triangle; 2 bicubic: Keys' cubic convolution, a = -0.5 antialiased, -0.75
//   not), antialiased: the filter stretched to support r * max(s, 1), centred at s*(i+0.5),
//   taps [trunc(c - support + 0.5) clamped to 0, trunc(c + support + 0.5) clamped to in),
//   normalised by their sum; not antialiased: source s*(i+0.5)-0.5 (bilinear: clamped at 0),
//   floorf'd index and lambda, 2r taps, those outside the image folded onto the edge taps;
// * the dimension's precision p: the largest p < 22 with round(wmax * 2^(p+1)) < 2^15, wmax
//   the largest weight over *all* output indices of the dimension; weights round(w * 2^p);
// * horizontal pass first (only over the rows the vertical pass reads) into uint8, then the
//   vertical pass; each value (sum w*x + 2^(p-1)) >> p clamped to [0, 255];
// * a dimension whose output size equals its input size is not resampled (as torch does,
//   whatever the scale);
// * nearest: one tap of weight 2^14 (an exact copy) at min(floorf(i * f), in - 1) (i = 2 j:
//   j >> 1), nearest-exact at min(floorf((i + 0.5) * f), in - 1), f = float32 in/out (or
//   1/scale), as aten's nearest_idx / nearest_exact_idx.
// Integer sums are exact, so every ISA variant below gives the same bytes.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <immintrin.h>

#include "exit_gate.h"
#include "ops/resize_aa.h"

#include "isa.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace fastprep {
namespace {


// ------------------------------------------------------------------------------------
// Weights of one dimension, for the output indices [out_start, out_start + out_len),
// with input indices local to the window [in_start, in_start + in_len). Every output index
// reads taps start[j] .. start[j] + K - 1 (K the same for all; zero weights pad), all
// inside the window.

struct Axis {
  int K = 0;
  int prec = 0;
  std::vector<int32_t> start;
  std::vector<int16_t> w;
  int lo = 0, hi = 0;  // input range [lo, hi) (local) that the outputs read
};

inline double tri(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution kernel with parameter a (the polynomials in aten's UpSample.h order).
inline double keys_cubic(double x, double a) {
  x = std::abs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

inline double filter_weight(int filter, bool antialias, double x) {
  if (filter == kResizeBicubic) return keys_cubic(x, antialias ? -0.5 : -0.75);
  return tri(x);
}

// Nearest / nearest-exact: output j reads input idx(out_start + j), one tap of weight 2^14.
void nearest_axis(Axis& ax, int64_t full_in, int64_t full_out, double scale_opt, int filter, int64_t out_start,
                  int64_t out_len, int64_t in_start, int64_t in_len, const char* dim) {
  const float f = scale_opt > 0.0 ? (float)(1.0 / scale_opt) : (float)full_in / (float)full_out;
  ax.K = 1;
  ax.prec = 14;
  ax.start.resize(out_len);
  ax.w.assign(out_len, (int16_t)(1 << 14));
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int64_t j = 0; j < out_len; j++) {
    const int64_t i = out_start + j;
    int64_t src;
    if (filter == kResizeNearestExact)
      src = std::min((int64_t)floorf((float)((i + 0.5) * f)), full_in - 1);
    else if (scale_opt <= 0.0 && full_out == 2 * full_in)
      src = i >> 1;
    else
      src = std::min((int64_t)floorf((float)i * f), full_in - 1);
    lo = std::min(lo, src);
    hi = std::max(hi, src + 1);
    ax.start[j] = (int32_t)(src - in_start);
  }
  TORCH_CHECK_VALUE(lo >= in_start && hi <= in_start + in_len, "resize_aa: output ", dim, "s [", out_start, ", ",
                    out_start + out_len, ") read input ", dim, "s [", lo, ", ", hi, "), outside the given window [",
                    in_start, ", ", in_start + in_len, ")");
  ax.lo = (int)(lo - in_start);
  ax.hi = (int)(hi - in_start);
}

// Identity (the dimension is not resampled): output j reads input out_start + j.
void identity_axis(Axis& ax, int64_t out_start, int64_t out_len, int64_t in_start, int64_t in_len,
                   const char* dim) {
  const int64_t first = out_start - in_start, last = first + out_len;
  TORCH_CHECK_VALUE(first >= 0 && last <= in_len, "resize_aa: the output ", dim, " [", out_start, ", ",
                    out_start + out_len, ") read input ", dim, " [", out_start, ", ", out_start + out_len,
                    "), outside the given window [", in_start, ", ", in_start + in_len, ")");
  ax.K = 1;
  ax.prec = 14;
  ax.start.resize(out_len);
  ax.w.assign(out_len, (int16_t)(1 << 14));
  for (int64_t j = 0; j < out_len; j++) ax.start[j] = (int32_t)(first + j);
  ax.lo = (int)first;
  ax.hi = (int)last;
}

void compute_axis(Axis& ax, int64_t full_in, int64_t full_out, double scale_opt, bool antialias, int filter,
                  int64_t out_start, int64_t out_len, int64_t in_start, int64_t in_len, const char* dim) {
  if (filter == kResizeNearest || filter == kResizeNearestExact)
    return nearest_axis(ax, full_in, full_out, scale_opt, filter, out_start, out_len, in_start, in_len, dim);
  const double s = scale_opt > 0.0 ? 1.0 / scale_opt : (double)full_in / (double)full_out;
  const int64_t half = filter == kResizeBicubic ? 2 : 1;  // the filter's half-width (interp_size / 2)
  double support;
  int64_t maxk;
  if (antialias) {
    support = s >= 1.0 ? (double)half * s : (double)half;
    maxk = (int64_t)std::ceil(support) * 2 + 1;
  } else {
    support = (double)half;
    maxk = 2 * half;
  }
  const double invscale = s >= 1.0 ? 1.0 / s : 1.0;
  // scratch reused across calls of this thread (every entry read is written first)
  static thread_local std::vector<double> wd, tmp;
  static thread_local std::vector<int64_t> xmin_v, xsize_v, first, cnt;
  static thread_local std::vector<int16_t> wi16;
  wd.resize((size_t)(out_len * maxk));
  tmp.resize((size_t)maxk);
  xmin_v.resize(out_len);
  xsize_v.resize(out_len);
  first.resize(out_len);
  cnt.resize(out_len);
  wi16.resize((size_t)(out_len * maxk));
  double wt_max = 0.0;
  for (int64_t i = 0; i < full_out; i++) {
    const bool keep = i >= out_start && i < out_start + out_len;
    double* wp = keep ? &wd[(size_t)((i - out_start) * maxk)] : tmp.data();
    int64_t xmin, xsize;
    double wmax_i = 0.0;
    if (antialias) {
      const double center = s * (i + 0.5);
      xmin = std::max((int64_t)(center - support + 0.5), (int64_t)0);
      xsize = std::min((int64_t)(center + support + 0.5), full_in) - xmin;
      xsize = std::clamp(xsize, (int64_t)0, maxk);
      double total = 0.0, wbig = 0.0;
      for (int64_t j = 0; j < xsize; j++) {
        const double w = filter_weight(filter, true, ((double)(j + xmin) - center + 0.5) * invscale);
        wp[j] = w;
        total += w;
        wbig = std::max(wbig, w);
      }
      if (!keep) {
        // only the largest normalised weight matters here; division is monotonic, so it
        // is the largest raw weight divided by the total
        if (total != 0.0) wmax_i = wbig / total;
      } else if (total != 0.0) {
        for (int64_t j = 0; j < xsize; j++) {
          wp[j] /= total;
          wmax_i = std::max(wmax_i, wp[j]);
        }
      }
      if (keep)
        for (int64_t j = xsize; j < maxk; j++) wp[j] = 0.0;
    } else {
      double real = s * (i + 0.5) - 0.5;
      if (real < 0.0 && filter == kResizeBilinear) real = 0.0;
      const int64_t idx = std::min((int64_t)floorf((float)real), full_in - 1);
      const double lambda = std::min(std::max(real - (double)idx, 0.0), 1.0);
      const int64_t sup = half;
      const int64_t umin = idx - sup + 1, umax = idx + sup + 1;
      xmin = std::max(umin, (int64_t)0);
      xsize = std::clamp(std::min(umax, full_in) - xmin, (int64_t)0, maxk);
      int64_t wi = 0;
      for (int64_t j = 0; j < maxk; j++) {
        wp[j] = 0.0;
        const double w = filter_weight(filter, false, (double)(j + 1 - sup) - lambda);
        if (umin + j <= 0) {
          wi = 0;
        } else if (umin + j >= full_in - 1) {
          wi = xsize - 1;
        }
        wp[wi] += w;
        wi++;
      }
      for (int64_t j = 0; j < maxk; j++) wmax_i = std::max(wmax_i, wp[j]);  // after folding
    }
    wt_max = std::max(wt_max, wmax_i);
    if (keep) {
      xmin_v[i - out_start] = xmin;
      xsize_v[i - out_start] = xsize;
    }
  }
  int prec = 0;
  for (prec = 0; prec < 22; ++prec) {
    const int next = (int)(0.5 + wt_max * (1 << (prec + 1)));
    if (next >= (1 << 15)) break;
  }
  ax.prec = prec;
  // int16 weights; trim zero taps at both ends (they read nothing).
  int K = 1;
  for (int64_t j = 0; j < out_len; j++) {
    int64_t a = 0, b = xsize_v[j];
    for (int64_t k = 0; k < xsize_v[j]; k++) {
      const double v = wd[(size_t)(j * maxk + k)] * (1 << prec);
      wi16[(size_t)(j * maxk + k)] = (int16_t)((v < 0) ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    while (a < b && wi16[(size_t)(j * maxk + a)] == 0) a++;
    while (b > a && wi16[(size_t)(j * maxk + b - 1)] == 0) b--;
    if (a == b) a = b = 0;  // all weights zero (or no taps): the output reads nothing
    first[j] = a;
    cnt[j] = b - a;
    K = std::max<int>(K, (int)(b - a));
  }
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int64_t j = 0; j < out_len; j++) {
    if (cnt[j] == 0) continue;
    const int64_t g0 = xmin_v[j] + first[j], g1 = g0 + cnt[j];
    lo = std::min(lo, g0);
    hi = std::max(hi, g1);
  }
  if (lo > hi) lo = hi = in_start;  // nothing read at all
  TORCH_CHECK_VALUE(lo >= in_start && hi <= in_start + in_len, "resize_aa: output ", dim, "s [", out_start,
                    ", ", out_start + out_len, ") read input ", dim, "s [", lo, ", ", hi,
                    "), outside the given window [", in_start, ", ", in_start + in_len, ")");
  int Kp = K + (K & 1);
  if (Kp > in_len) Kp = K;
  ax.K = Kp;
  ax.start.resize(out_len);
  ax.w.assign((size_t)(out_len * Kp), 0);
  for (int64_t j = 0; j < out_len; j++) {
    int64_t st = cnt[j] == 0 ? 0 : xmin_v[j] + first[j] - in_start;
    int64_t shift = 0;
    if (st + Kp > in_len) {
      shift = st + Kp - in_len;
      st -= shift;
    }
    ax.start[j] = (int32_t)st;
    for (int64_t k = 0; k < cnt[j]; k++) ax.w[(size_t)(j * Kp + shift + k)] = wi16[(size_t)(j * maxk + first[j] + k)];
  }
  // rows the kernels touch (zero-weight taps included)
  ax.lo = *std::min_element(ax.start.begin(), ax.start.end());
  int mx = 0;
  for (int64_t j = 0; j < out_len; j++) mx = std::max<int>(mx, ax.start[j] + Kp);
  ax.hi = mx;
}

void reverse_axis(Axis& ax) {
  const int64_t n = (int64_t)ax.start.size();
  std::reverse(ax.start.begin(), ax.start.end());
  for (int64_t a = 0, b = n - 1; a < b; a++, b--)
    std::swap_ranges(ax.w.begin() + a * ax.K, ax.w.begin() + (a + 1) * ax.K, ax.w.begin() + b * ax.K);
}

inline uint8_t clamp_u8(int32_t v) { return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// ------------------------------------------------------------------------------------
// Baseline kernels.

// One row: out[j*C + c] = sum_k w[j,k] * in[(start[j]+k)*C + c].
template <int C, int KT>
void h_row_base_k(const uint8_t* in, uint8_t* out, const Axis& ax) {
  const int K = KT ? KT : ax.K, n = (int)ax.start.size();
  const int32_t init = 1 << (ax.prec - 1);
  for (int j = 0; j < n; j++) {
    const uint8_t* p = in + (int64_t)ax.start[j] * C;
    const int16_t* w = &ax.w[(size_t)j * K];
    int32_t acc[C];
    for (int c = 0; c < C; c++) acc[c] = init;
    for (int k = 0; k < K; k++)
      for (int c = 0; c < C; c++) acc[c] += (int32_t)w[k] * p[k * C + c];
    for (int c = 0; c < C; c++) out[j * C + c] = clamp_u8(acc[c] >> ax.prec);
  }
}

template <int C>
void h_row_base(const uint8_t* in, uint8_t* out, const Axis& ax) {
  switch (ax.K) {
    case 2: return h_row_base_k<C, 2>(in, out, ax);
    case 4: return h_row_base_k<C, 4>(in, out, ax);
    case 6: return h_row_base_k<C, 6>(in, out, ax);
    default: return h_row_base_k<C, 0>(in, out, ax);
  }
}

template <int KT>
void v_row_base_k(const uint8_t* src, int64_t stride, uint8_t* out, int64_t n, const int16_t* w, int K_,
                  int prec) {
  const int K = KT ? KT : K_;
  const int32_t init = 1 << (prec - 1);
  for (int64_t x = 0; x < n; x++) {
    int32_t acc = init;
    for (int k = 0; k < K; k++) acc += (int32_t)w[k] * src[k * stride + x];
    out[x] = clamp_u8(acc >> prec);
  }
}

void v_row_base(const uint8_t* src, int64_t stride, uint8_t* out, int64_t n, const int16_t* w, int K, int prec) {
  switch (K) {
    case 2: return v_row_base_k<2>(src, stride, out, n, w, K, prec);
    case 4: return v_row_base_k<4>(src, stride, out, n, w, K, prec);
    case 6: return v_row_base_k<6>(src, stride, out, n, w, K, prec);
    default: return v_row_base_k<0>(src, stride, out, n, w, K, prec);
  }
}

// ------------------------------------------------------------------------------------
// AVX2 kernels.

#if defined(__x86_64__)
#define FP_AVX2 __attribute__((target("avx2")))

#define FP_AVX2_INLINE static inline __attribute__((target("avx2"), always_inline))

template <int C>
struct HMasks {
  __m256i lo, hi;
};

// The taps of output pixel j for four rows: a01 = [row 0 | row 1], a23 = [row 2 | row 3],
// each lane the 4 channel sums (int32) shifted down by the precision. `in[r]` may be read up
// to 4 bytes past the last tap (the caller pads the buffer's last row).
template <int C, int KT>
FP_AVX2_INLINE void h_acc4(const uint8_t* const in[4], const Axis& ax, int j, __m256i init, __m256i m_lo,
                           __m256i m_hi, __m128i shift, __m256i& r01, __m256i& r23) {
  const int K = KT ? KT : ax.K;
  const int64_t off = (int64_t)ax.start[j] * C;
  const int16_t* w = &ax.w[(size_t)j * K];
  const uint8_t *p0 = in[0] + off, *p1 = in[1] + off, *p2 = in[2] + off, *p3 = in[3] + off;
  __m256i a01 = init, a23 = init;
  int k = 0;
  for (; k + 4 <= K; k += 4) {
    int32_t wa, wb;
    std::memcpy(&wa, w + k, 4);
    std::memcpy(&wb, w + k + 2, 4);
    const __m256i k0 = _mm256_set1_epi32(wa), k1 = _mm256_set1_epi32(wb);
    const __m256i s01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(p0 + k * C))),
                                                _mm_loadu_si128((const __m128i*)(p1 + k * C)), 1);
    const __m256i s23 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(p2 + k * C))),
                                                _mm_loadu_si128((const __m128i*)(p3 + k * C)), 1);
    a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(_mm256_shuffle_epi8(s01, m_lo), k0));
    a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(_mm256_shuffle_epi8(s23, m_lo), k0));
    a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(_mm256_shuffle_epi8(s01, m_hi), k1));
    a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(_mm256_shuffle_epi8(s23, m_hi), k1));
  }
  for (; k + 2 <= K; k += 2) {
    int32_t wa;
    std::memcpy(&wa, w + k, 4);
    const __m256i k0 = _mm256_set1_epi32(wa);
    const __m256i s01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i*)(p0 + k * C))),
                                                _mm_loadl_epi64((const __m128i*)(p1 + k * C)), 1);
    const __m256i s23 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i*)(p2 + k * C))),
                                                _mm_loadl_epi64((const __m128i*)(p3 + k * C)), 1);
    a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(_mm256_shuffle_epi8(s01, m_lo), k0));
    a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(_mm256_shuffle_epi8(s23, m_lo), k0));
  }
  if (k < K) {  // one tap: (pixel, 0) pairs times (w, 0)
    const __m256i k0 = _mm256_set1_epi32((int32_t)(uint16_t)w[k]);
    int32_t v0, v1, v2, v3;
    std::memcpy(&v0, p0 + k * C, 4);
    std::memcpy(&v1, p1 + k * C, 4);
    std::memcpy(&v2, p2 + k * C, 4);
    std::memcpy(&v3, p3 + k * C, 4);
    const __m256i s01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(v0))),
                                                _mm_cvtepu8_epi32(_mm_cvtsi32_si128(v1)), 1);
    const __m256i s23 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(v2))),
                                                _mm_cvtepu8_epi32(_mm_cvtsi32_si128(v3)), 1);
    a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(s01, k0));
    a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(s23, k0));
  }
  r01 = _mm256_sra_epi32(a01, shift);
  r23 = _mm256_sra_epi32(a23, shift);
}

// Horizontal pass of four rows, C = 3 or 4. GRAY: each "row" is 4 rows of a 1-channel image
// interleaved as 4 channels, and out holds the 16 output rows (4 per input pointer).
template <int C, bool GRAY, int KT>
FP_AVX2 void h_rows4_avx2_k(const uint8_t* const in[4], uint8_t* const* out, const Axis& ax, int nout) {
  const __m256i init = _mm256_set1_epi32(1 << (ax.prec - 1));
  // pairs (pixel k, pixel k+1) of each channel as int16, from bytes 0..7 (lo) / 8..15 (hi)
  const __m256i m_lo = C == 4 ? _mm256_set_epi8(-1, 7, -1, 3, -1, 6, -1, 2, -1, 5, -1, 1, -1, 4, -1, 0, -1, 7, -1, 3,
                                                -1, 6, -1, 2, -1, 5, -1, 1, -1, 4, -1, 0)
                              : _mm256_set_epi8(-1, -1, -1, -1, -1, 5, -1, 2, -1, 4, -1, 1, -1, 3, -1, 0, -1, -1,
                                                -1, -1, -1, 5, -1, 2, -1, 4, -1, 1, -1, 3, -1, 0);
  const __m256i m_hi = C == 4 ? _mm256_set_epi8(-1, 15, -1, 11, -1, 14, -1, 10, -1, 13, -1, 9, -1, 12, -1, 8, -1, 15,
                                                -1, 11, -1, 14, -1, 10, -1, 13, -1, 9, -1, 12, -1, 8)
                              : _mm256_set_epi8(-1, -1, -1, -1, -1, 11, -1, 8, -1, 10, -1, 7, -1, 9, -1, 6, -1, -1,
                                                -1, -1, -1, 11, -1, 8, -1, 10, -1, 7, -1, 9, -1, 6);
  // 4 pixels of 4 bytes -> 4 pixels of 3 bytes (C == 3), per lane
  const __m256i m_pack3 = _mm256_set_epi8(-1, -1, -1, -1, 14, 13, 12, 10, 9, 8, 6, 5, 4, 2, 1, 0, -1, -1, -1, -1, 14,
                                          13, 12, 10, 9, 8, 6, 5, 4, 2, 1, 0);
  const __m128i shift = _mm_cvtsi32_si128(ax.prec);
  int j = 0;
  if (!GRAY) {
    // Four output pixels at a time: one 16-byte store per row.
    for (; j + 4 <= nout; j += 4) {
      __m256i A[4], B[4];
      for (int q = 0; q < 4; q++) h_acc4<C, KT>(in, ax, j + q, init, m_lo, m_hi, shift, A[q], B[q]);
      // lane 0: row 0 (A) / row 2 (B) pixels j..j+3; lane 1: row 1 / row 3
      __m256i X = _mm256_packus_epi16(_mm256_packs_epi32(A[0], A[1]), _mm256_packs_epi32(A[2], A[3]));
      __m256i Y = _mm256_packus_epi16(_mm256_packs_epi32(B[0], B[1]), _mm256_packs_epi32(B[2], B[3]));
      if (C == 3) {
        X = _mm256_shuffle_epi8(X, m_pack3);
        Y = _mm256_shuffle_epi8(Y, m_pack3);
      }
      const __m128i x0 = _mm256_castsi256_si128(X), x1 = _mm256_extracti128_si256(X, 1);
      const __m128i y0 = _mm256_castsi256_si128(Y), y1 = _mm256_extracti128_si256(Y, 1);
      if (C == 4 || (j + 4) * C + 4 <= nout * C) {
        _mm_storeu_si128((__m128i*)(out[0] + j * C), x0);
        _mm_storeu_si128((__m128i*)(out[1] + j * C), x1);
        _mm_storeu_si128((__m128i*)(out[2] + j * C), y0);
        _mm_storeu_si128((__m128i*)(out[3] + j * C), y1);
      } else {
        alignas(16) uint8_t t[4][16];
        _mm_store_si128((__m128i*)t[0], x0);
        _mm_store_si128((__m128i*)t[1], x1);
        _mm_store_si128((__m128i*)t[2], y0);
        _mm_store_si128((__m128i*)t[3], y1);
        for (int q = 0; q < 4; q++) std::memcpy(out[q] + j * C, t[q], 4 * C);
      }
    }
  }
  for (; j < nout; j++) {
    __m256i a01, a23;
    h_acc4<C, KT>(in, ax, j, init, m_lo, m_hi, shift, a01, a23);
    // [r0 | r1] int32 -> int16 (saturating) -> uint8 (saturating): bytes 0..3 of each lane
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a01, a23), _mm256_setzero_si256());
    // lane 0: r0 (bytes 0..3), r2 (bytes 4..7); lane 1: r1, r3
    const uint32_t o0 = (uint32_t)_mm256_extract_epi32(b, 0), o2 = (uint32_t)_mm256_extract_epi32(b, 1);
    const uint32_t o1 = (uint32_t)_mm256_extract_epi32(b, 4), o3 = (uint32_t)_mm256_extract_epi32(b, 5);
    if (GRAY) {
      const uint32_t o[4] = {o0, o1, o2, o3};
      for (int q = 0; q < 4; q++)
        for (int b2 = 0; b2 < 4; b2++) out[q * 4 + b2][j] = (uint8_t)(o[q] >> (8 * b2));
    } else if (C == 4 || j + 1 < nout) {  // C == 3: the 4th byte is overwritten by the next pixel
      std::memcpy(out[0] + j * C, &o0, 4);
      std::memcpy(out[1] + j * C, &o1, 4);
      std::memcpy(out[2] + j * C, &o2, 4);
      std::memcpy(out[3] + j * C, &o3, 4);
    } else {
      std::memcpy(out[0] + j * C, &o0, C);
      std::memcpy(out[1] + j * C, &o1, C);
      std::memcpy(out[2] + j * C, &o2, C);
      std::memcpy(out[3] + j * C, &o3, C);
    }
  }
}

// K known at compile time for the common tap counts.
template <int C, bool GRAY = false>
FP_AVX2 void h_rows4_avx2(const uint8_t* const in[4], uint8_t* const* out, const Axis& ax, int nout) {
  switch (ax.K) {
    case 2: return h_rows4_avx2_k<C, GRAY, 2>(in, out, ax, nout);
    case 4: return h_rows4_avx2_k<C, GRAY, 4>(in, out, ax, nout);
    case 6: return h_rows4_avx2_k<C, GRAY, 6>(in, out, ax, nout);
    case 8: return h_rows4_avx2_k<C, GRAY, 8>(in, out, ax, nout);
    default: return h_rows4_avx2_k<C, GRAY, 0>(in, out, ax, nout);
  }
}

// dst[4x + b] = src[b][x], x < n.
FP_AVX2 void interleave4_avx2(const uint8_t* const src[4], uint8_t* dst, int64_t n) {
  int64_t x = 0;
  for (; x + 16 <= n; x += 16) {
    const __m128i a = _mm_loadu_si128((const __m128i*)(src[0] + x));
    const __m128i b = _mm_loadu_si128((const __m128i*)(src[1] + x));
    const __m128i c = _mm_loadu_si128((const __m128i*)(src[2] + x));
    const __m128i d = _mm_loadu_si128((const __m128i*)(src[3] + x));
    const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
    const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
    _mm_storeu_si128((__m128i*)(dst + 4 * x), _mm_unpacklo_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i*)(dst + 4 * x + 16), _mm_unpackhi_epi16(ab0, cd0));
    _mm_storeu_si128((__m128i*)(dst + 4 * x + 32), _mm_unpacklo_epi16(ab1, cd1));
    _mm_storeu_si128((__m128i*)(dst + 4 * x + 48), _mm_unpackhi_epi16(ab1, cd1));
  }
  for (; x < n; x++)
    for (int b = 0; b < 4; b++) dst[4 * x + b] = src[b][x];
}

// One output row of the vertical pass: out[x] = sum_k w[k] * src[k*stride + x].
template <int KT>
FP_AVX2 void v_row_avx2_k(const uint8_t* src, int64_t stride, uint8_t* out, int64_t n, const int16_t* w, int K_,
                          int prec) {
  const int K = KT ? KT : K_;
  const __m256i init = _mm256_set1_epi32(1 << (prec - 1));
  const __m128i shift = _mm_cvtsi32_si128(prec);
  int64_t x = 0;
  const __m256i z = _mm256_setzero_si256();
  for (; x + 32 <= n; x += 32) {
    // Per 128-bit lane: bytes of rows k, k+1 interleaved (U0: bytes 0..7, U1: 8..15), then
    // widened to (row k, row k+1) int16 pairs: 6 shuffles per pair of rows.
    __m256i a0 = init, a1 = init, a2 = init, a3 = init;
    int k = 0;
    for (; k < K; k += 2) {
      int32_t wp;
      if (k + 1 < K) {
        std::memcpy(&wp, w + k, 4);
      } else {
        wp = (int32_t)(uint16_t)w[k];
      }
      const __m256i kk = _mm256_set1_epi32(wp);
      const uint8_t* r0 = src + k * stride + x;
      const __m256i A = _mm256_loadu_si256((const __m256i*)r0);
      const __m256i B = k + 1 < K ? _mm256_loadu_si256((const __m256i*)(r0 + stride)) : z;
      const __m256i U0 = _mm256_unpacklo_epi8(A, B), U1 = _mm256_unpackhi_epi8(A, B);
      a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi8(U0, z), kk));
      a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi8(U0, z), kk));
      a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi8(U1, z), kk));
      a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi8(U1, z), kk));
    }
    a0 = _mm256_sra_epi32(a0, shift);  // lane bytes 0..3
    a1 = _mm256_sra_epi32(a1, shift);  // 4..7
    a2 = _mm256_sra_epi32(a2, shift);  // 8..11
    a3 = _mm256_sra_epi32(a3, shift);  // 12..15
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
    _mm256_storeu_si256((__m256i*)(out + x), b);
  }
  if (x < n) v_row_base(src + x, stride, out + x, n - x, w, K, prec);
}

FP_AVX2 void v_row_avx2(const uint8_t* src, int64_t stride, uint8_t* out, int64_t n, const int16_t* w, int K,
                        int prec) {
  switch (K) {
    case 2: return v_row_avx2_k<2>(src, stride, out, n, w, K, prec);
    case 4: return v_row_avx2_k<4>(src, stride, out, n, w, K, prec);
    case 6: return v_row_avx2_k<6>(src, stride, out, n, w, K, prec);
    case 8: return v_row_avx2_k<8>(src, stride, out, n, w, K, prec);
    default: return v_row_avx2_k<0>(src, stride, out, n, w, K, prec);
  }
}
#endif

// ------------------------------------------------------------------------------------
// Passes.

// Horizontal pass of `nrows` rows (row r at in + r*in_stride, window-local column 0) into
// out (row stride out_stride).
void h_pass(int C, const uint8_t* in, int64_t in_stride, int64_t nrows, bool last_is_end, int64_t in_w,
            uint8_t* out, int64_t out_stride, const Axis& ax, int level) {
  const int nout = (int)ax.start.size();
#if defined(__x86_64__)
  if (level >= 1 && C == 1 && in_w >= 4) {
    // 16 rows at a time: 4 groups of 4 rows interleaved as 4-channel pixels.
    std::vector<uint8_t> buf((size_t)(4 * (in_w * 4 + 16)));
    const int64_t bstride = in_w * 4 + 16;
    for (int64_t r = 0; r < nrows; r += 16) {
      const uint8_t* rin[4];
      uint8_t* rout[16];
      for (int q = 0; q < 4; q++) {
        uint8_t* b = buf.data() + q * bstride;
        const uint8_t* src[4];
        for (int b2 = 0; b2 < 4; b2++) {
          const int64_t rr = std::min<int64_t>(r + q * 4 + b2, nrows - 1);
          src[b2] = in + rr * in_stride;
          rout[q * 4 + b2] = out + rr * out_stride;
        }
        interleave4_avx2(src, b, in_w);
        rin[q] = b;
      }
      h_rows4_avx2<4, true>(rin, rout, ax, nout);
    }
    return;
  }
  if (level >= 1 && (C == 3 || C == 4)) {
    // The window's last row may be the last bytes of the buffer: read it from a padded copy.
    std::vector<uint8_t> pad;
    const uint8_t* last_row = in + (nrows - 1) * in_stride;
    if (C == 3 && last_is_end) {
      const size_t nb = (size_t)in_w * (size_t)C;
      pad.assign(nb + 32, 0);
      std::memcpy(pad.data(), last_row, nb);
      last_row = pad.data();
    }
    for (int64_t r = 0; r < nrows; r += 4) {
      const uint8_t* rin[4];
      uint8_t* rout[4];
      for (int q = 0; q < 4; q++) {
        const int64_t rr = std::min(r + q, nrows - 1);
        rin[q] = rr == nrows - 1 ? last_row : in + rr * in_stride;
        rout[q] = out + rr * out_stride;
      }
      if (C == 3)
        h_rows4_avx2<3>(rin, rout, ax, nout);
      else
        h_rows4_avx2<4>(rin, rout, ax, nout);
    }
    return;
  }
#endif
  for (int64_t r = 0; r < nrows; r++) {
    const uint8_t* ri = in + r * in_stride;
    uint8_t* ro = out + r * out_stride;
    if (C == 1)
      h_row_base<1>(ri, ro, ax);
    else if (C == 3)
      h_row_base<3>(ri, ro, ax);
    else
      h_row_base<4>(ri, ro, ax);
  }
}

void v_pass(const uint8_t* src, int64_t src_stride, uint8_t* out, int64_t out_stride, int64_t nbytes,
            const Axis& ax, int level) {
  const int n = (int)ax.start.size();
  for (int j = 0; j < n; j++) {
    const uint8_t* s = src + (int64_t)ax.start[j] * src_stride;
    const int16_t* w = &ax.w[(size_t)j * ax.K];
#if defined(__x86_64__)
    if (level >= 1) {
      v_row_avx2(s, src_stride, out + j * out_stride, nbytes, w, ax.K, ax.prec);
      continue;
    }
#endif
    v_row_base(s, src_stride, out + j * out_stride, nbytes, w, ax.K, ax.prec);
  }
}

}  // namespace

void check_resize_args(int64_t C, int64_t H, int64_t W, int64_t full_out_h, int64_t full_out_w, int64_t out_top,
                       int64_t out_left, int64_t out_h, int64_t out_w, int64_t full_in_h, int64_t full_in_w,
                       int64_t in_top, int64_t in_left, double scale_h, double scale_w) {
  TORCH_CHECK_VALUE(C == 1 || C == 3 || C == 4, "resize_aa: image must have 1, 3 or 4 channels, got ", C);
  TORCH_CHECK_VALUE(H > 0 && W > 0, "resize_aa: image must not be empty");
  TORCH_CHECK_VALUE(full_out_h > 0 && full_out_w > 0 && full_in_h > 0 && full_in_w > 0,
                    "resize_aa: sizes must be positive");
  TORCH_CHECK_VALUE(out_h > 0 && out_w > 0 && out_top >= 0 && out_left >= 0 && out_top + out_h <= full_out_h &&
                        out_left + out_w <= full_out_w,
                    "resize_aa: output window [", out_top, ", ", out_top + out_h, ") x [", out_left, ", ",
                    out_left + out_w, ") is not inside the ", full_out_h, " x ", full_out_w, " output");
  TORCH_CHECK_VALUE(in_top >= 0 && in_left >= 0 && in_top + H <= full_in_h && in_left + W <= full_in_w,
                    "resize_aa: the image (", H, " x ", W, " at ", in_top, ", ", in_left, ") is not inside the ",
                    full_in_h, " x ", full_in_w, " input");
  TORCH_CHECK_VALUE(std::isfinite(scale_h) && std::isfinite(scale_w), "resize_aa: scales must be finite");
}

void resize_aa_into(const uint8_t* ip, int64_t C, int64_t H, int64_t W, int64_t rs, int64_t readable,
                    int64_t full_out_h, int64_t full_out_w, int64_t out_top, int64_t out_left, int64_t out_h,
                    int64_t out_w, int64_t full_in_h, int64_t full_in_w, int64_t in_top, int64_t in_left,
                    double scale_h, double scale_w, bool antialias, bool hflip, uint8_t* op, int64_t filter) {
  const int64_t level = isa_level();
  const bool need_h = full_out_w != full_in_w, need_v = full_out_h != full_in_h;
  Axis ah, av;
  if (need_h)
    compute_axis(ah, full_in_w, full_out_w, scale_w, antialias, (int)filter, out_left, out_w, in_left, W, "column");
  else
    identity_axis(ah, out_left, out_w, in_left, W, "column");
  if (need_v)
    compute_axis(av, full_in_h, full_out_h, scale_h, antialias, (int)filter, out_top, out_h, in_top, H, "row");
  else
    identity_axis(av, out_top, out_h, in_top, H, "row");
  const bool do_h = need_h || hflip;
  if (hflip) reverse_axis(ah);

  const int64_t orow = out_w * C;
  // Whether the window's last row ends the readable memory (a read past it would leave it).
  auto row_is_end = [&](int64_t r) { return r * rs + W * C + 16 > readable; };

  if (do_h && need_v) {
    const int64_t r0 = av.lo, r1 = av.hi;
    // intermediate rows, uninitialised (every byte read is written first)
    std::unique_ptr<uint8_t[]> tmp(new uint8_t[(size_t)((r1 - r0) * orow + 32)]);
    h_pass((int)C, ip + r0 * rs, rs, r1 - r0, row_is_end(r1 - 1), W, tmp.get(), orow, ah, level);
    Axis avl = av;
    for (auto& s : avl.start) s -= r0;
    v_pass(tmp.get(), orow, op, orow, orow, avl, level);
  } else if (do_h) {
    // rows: identity
    const int64_t r0 = av.start[0];
    h_pass((int)C, ip + r0 * rs, rs, out_h, row_is_end(r0 + out_h - 1), W, op, orow, ah, level);
  } else if (need_v) {
    v_pass(ip + (int64_t)ah.start[0] * C, rs, op, orow, orow, av, level);
  } else {
    for (int64_t r = 0; r < out_h; r++)
      std::memcpy(op + r * orow, ip + (av.start[r]) * rs + (int64_t)ah.start[0] * C, (size_t)orow);
  }
}

void check_resize_filter(int64_t filter) {
  TORCH_CHECK_VALUE(filter >= kResizeBilinear && filter <= kResizeNearestExact,
                    "resize_aa: filter must be 0 (bilinear), 1 (bicubic), 2 (nearest) or 3 (nearest-exact), got ",
                    filter);
}

static void check_group(c10::ArrayRef<int64_t> values, size_t expected, const char* name, const char* fields) {
  TORCH_CHECK_VALUE(values.size() == expected, "resize_aa: ", name, " must hold ", expected, " numbers (", fields,
                    "), got ", values.size());
}

at::Tensor resize_aa(const at::Tensor& image, at::IntArrayRef full_out, at::IntArrayRef out_window,
                     at::IntArrayRef full_in, at::IntArrayRef in_origin, at::ArrayRef<double> scale, bool antialias,
                     bool hflip, int64_t filter) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  check_group(full_out, 2, "full_out", "height, width");
  check_group(out_window, 4, "out_window", "top, left, height, width");
  check_group(full_in, 2, "full_in", "height, width");
  check_group(in_origin, 2, "in_origin", "top, left");
  TORCH_CHECK_VALUE(scale.size() == 2, "resize_aa: scale must hold 2 numbers (h, w), got ", scale.size());
  const int64_t full_out_h = full_out[0], full_out_w = full_out[1];
  const int64_t out_top = out_window[0], out_left = out_window[1], out_h = out_window[2], out_w = out_window[3];
  const int64_t full_in_h = full_in[0], full_in_w = full_in[1], in_top = in_origin[0], in_left = in_origin[1];
  const double scale_h = scale[0], scale_w = scale[1];
  TORCH_CHECK_VALUE(image.device().is_cpu(), "resize_aa: image must be a CPU tensor");
  TORCH_CHECK_VALUE(image.scalar_type() == at::kByte, "resize_aa: image must be uint8, got ", image.scalar_type());
  TORCH_CHECK_VALUE(image.dim() == 3, "resize_aa: image must be [C, H, W], got ", image.dim(), " dims");
  const int64_t C = image.size(0), H = image.size(1), W = image.size(2);
  TORCH_CHECK_VALUE(C == 1 || C == 3 || C == 4, "resize_aa: image must have 1, 3 or 4 channels, got ", C);
  check_resize_filter(filter);
  TORCH_CHECK_VALUE(H > 0 && W > 0, "resize_aa: image must not be empty");
  const int64_t rs = image.stride(1);
  TORCH_CHECK_VALUE(image.stride(2) == C && (C == 1 || image.stride(0) == 1) && rs >= W * C,
                    "resize_aa: image must be channels-last (strides (1, >= W*C, C)), got strides ",
                    image.strides());
  check_resize_args(C, H, W, full_out_h, full_out_w, out_top, out_left, out_h, out_w, full_in_h, full_in_w, in_top,
                    in_left, scale_h, scale_w);
  at::Tensor out = at::empty({out_h, out_w, C}, image.options()).permute({2, 0, 1});
  const int64_t readable = (int64_t)image.storage().nbytes() - image.storage_offset();
  resize_aa_into(image.data_ptr<uint8_t>(), C, H, W, rs, readable, full_out_h, full_out_w, out_top, out_left, out_h,
                 out_w, full_in_h, full_in_w, in_top, in_left, scale_h, scale_w, antialias, hflip,
                 out.data_ptr<uint8_t>(), filter);
  return out;
}


TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("resize_aa", &resize_aa); }

}  // namespace fastprep
