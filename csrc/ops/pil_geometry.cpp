// PIL-exact geometry and blur: Pillow's Image.transform(size, AFFINE, data, resample,
// fillcolor) at the image's own size (pil_transform_affine), Image.rotate(angle, resample,
// expand=False, center, fillcolor) (pil_rotate) and Image.filter(ImageFilter.GaussianBlur(
// radius)) (pil_gaussian_blur) on uint8 images of 1 to 4 channels (planar [C, H, W]; Pillow's
// "L" and "RGB"), bit for bit; and pil_affine, the PIL twin of the tensor kernel "affine": what
// torchvision's F.affine / F.rotate compute on a PIL image, from the arguments the draws record
// in the step (csrc/ops/affine.h: AffineArgs).
//
// Arithmetic (Pillow's libImaging/Geometry.c and BoxBlur.c and PIL/Image.py, read there and
// written here; nothing is copied):
// * affine, NEAREST: output pixel (x, y) reads input (floor-ish of a0 (x + 0.5) + a1 (y + 0.5)
//   + a2, same for a3..a5), in one of three engines: a pure scale (a1 == a3 == 0) with
//   positions accumulated in double from a2 + a0 / 2 (truncation toward zero, negatives
//   outside); otherwise, when the four corners map within +-32768, 16.16 fixed point
//   accumulated in 32-bit integers (coefficients rounded as floor(v * 65536 + 0.5));
//   otherwise positions accumulated in double;
// * affine, BILINEAR / BICUBIC: each output pixel's position computed afresh in double; a
//   position outside [0, size) in either axis is outside; else the 2x2 (4x4) neighbourhood of
//   position - 0.5, columns clamped to the image, missing rows repeating the last one read,
//   interpolated in double (bicubic with a = -0.5 in Pillow's factored form, the first pass
//   on integer differences), truncated to uint8 (bicubic clamped to [0, 255] first);
// * outside pixels take the fill colour (what Image.new(mode, size, fillcolor) holds; the
//   caller resolves torchvision's fill to bytes);
// * rotate: angle % 360 (Python's), no change for 0, a half turn for 180 and quarter turns for
//   90 / 270 on square images when no centre is given; else the affine of the matrix
//   [cos, sin, 0, -sin, cos, 0] of -radians(angle), each rounded to 15 decimals (Python's
//   round), translated about the centre (default (w / 2, h / 2));
// * GaussianBlur(radius): radius 0 is a copy; else the radius of each axis, as a C float, is
//   turned into an extended box radius (sigma^2 = r^2 / 3; L = sqrt(12 sigma^2 + 1); l =
//   floor((L - 1) / 2); fraction a = (2l + 1)(l(l + 1) - 3 sigma^2) / (6 (sigma^2 - (l + 1)^2)),
//   float arithmetic as Pillow's) and three box passes run per axis, rows first then columns
//   (an axis of box radius 0.0 is skipped): a sliding sum in 32-bit unsigned integers with
//   edge pixels repeated, weights ww = 2^24 / (2 r + 1) (float, truncated) for the 2 floor(r)
//   + 1 inner taps and fw = (2^24 - (2 floor(r) + 1) ww) / 2 for the two outer ones, each
//   output (sum + 2^23) >> 24.
// Pillow's numerics are its own (a fork or another version may round differently): the
// Python side proves these kernels against the installed Pillow before using them
// (fastprep/transforms/_pil.py).
#include <ATen/ATen.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa.h"
#include "ops/affine.h"
#include "ops/pixel_kernel.h"
#include "ops/pil_geometry.h"

namespace fastprep {

namespace {

// Pillow's resampling ids for transforms.
constexpr int64_t kNearest = 0, kBilinear = 2, kBicubic = 3;

// C's (int)v as x86-64 computes it: truncation toward zero, INT_MIN for values out of range
// (and NaN), where C leaves it undefined.
inline int c_int(double v) {
  if (!(v > -2147483649.0 && v < 2147483648.0)) return INT_MIN;
  return (int)v;
}

// Geometry.c's COORD and FLOOR.
inline int coord(double v) { return v < 0.0 ? -1 : c_int(v); }
inline int floor_int(double v) { return v < 0.0 ? c_int(std::floor(v)) : c_int(v); }

// The C library's functions called through a pointer, as CPython's math module calls them (the
// compiler neither folds them nor merges sin and cos into sincos).
double (*volatile const libm_sin)(double) = ::sin;
double (*volatile const libm_cos)(double) = ::cos;

struct Planes {
  const uint8_t* in;
  uint8_t* out;
  int64_t channels, height, width;
  int64_t plane() const { return height * width; }
};

void fill_output(const Planes& p, const uint8_t* fill) {
  for (int64_t c = 0; c < p.channels; c++) std::memset(p.out + c * p.plane(), fill[c], (size_t)p.plane());
}

inline void copy_pixel(const Planes& p, int64_t from, int64_t to) {
  for (int64_t c = 0; c < p.channels; c++) p.out[c * p.plane() + to] = p.in[c * p.plane() + from];
}

// ImagingScaleAffine: a1 == a3 == 0.
void nearest_scale(const Planes& p, const double a[6], std::vector<int32_t>& tab) {
  const int64_t W = p.width, H = p.height;
  tab.assign((size_t)W, 0);
  double xo = a[2] + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5;
  int64_t xmin = W, xmax = 0;
  for (int64_t x = 0; x < W; x++) {
    const int xin = coord(xo);
    if (xin >= 0 && xin < W) {
      xmax = x + 1;
      if (x < xmin) xmin = x;
      tab[(size_t)x] = xin;
    }
    xo += a[0];
  }
  for (int64_t y = 0; y < H; y++) {
    const int yi = coord(yo);
    if (yi >= 0 && yi < H)
      for (int64_t x = xmin; x < xmax; x++) copy_pixel(p, (int64_t)yi * W + tab[(size_t)x], y * W + x);
    yo += a[4];
  }
}

bool fixed_ok(const double a[6], int x, int y) {
  return std::fabs(x * a[0] + y * a[1] + a[2]) < 32768.0 && std::fabs(x * a[3] + y * a[4] + a[5]) < 32768.0;
}

// 32-bit two's complement arithmetic, as the C code's int overflow behaves on x86-64.
inline int32_t wrap_add(int32_t x, int32_t y) { return (int32_t)((uint32_t)x + (uint32_t)y); }

// affine_fixed: 16.16 fixed point.
void nearest_fixed(const Planes& p, const double a[6]) {
  const int64_t W = p.width, H = p.height;
  auto fix = [](double v) { return (int32_t)floor_int(v * 65536.0 + 0.5); };
  const int32_t a0 = fix(a[0]), a1 = fix(a[1]), a3 = fix(a[3]), a4 = fix(a[4]);
  int32_t a2 = fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
  int32_t a5 = fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
  for (int64_t y = 0; y < H; y++) {
    int32_t xx = a2, yy = a5;
    for (int64_t x = 0; x < W; x++) {
      const int32_t xin = xx >> 16;
      if (xin >= 0 && xin < W) {
        const int32_t yin = yy >> 16;
        if (yin >= 0 && yin < H) copy_pixel(p, (int64_t)yin * W + xin, y * W + x);
      }
      xx = wrap_add(xx, a0);
      yy = wrap_add(yy, a3);
    }
    a2 = wrap_add(a2, a1);
    a5 = wrap_add(a5, a4);
  }
}

// ImagingTransformAffine's floating-point nearest loop.
void nearest_float(const Planes& p, const double a[6]) {
  const int64_t W = p.width, H = p.height;
  double xo = a[2] + a[1] * 0.5 + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
  for (int64_t y = 0; y < H; y++) {
    double xx = xo, yy = yo;
    for (int64_t x = 0; x < W; x++) {
      const int xin = coord(xx);
      if (xin >= 0 && xin < W) {
        const int yin = coord(yy);
        if (yin >= 0 && yin < H) copy_pixel(p, (int64_t)yin * W + xin, y * W + x);
      }
      xx += a[0];
      yy += a[3];
    }
    xo += a[1];
    yo += a[4];
  }
}

inline int64_t clip(int64_t v, int64_t size) { return v < 0 ? 0 : (v < size ? v : size - 1); }

// BILINEAR(v, a, b, d): a + (b - a) * d, the difference in the operands' type.
inline double lerp_int(int a, int b, double d) { return (double)a + (double)(b - a) * d; }
inline double lerp(double a, double b, double d) { return a + (b - a) * d; }

// The neighbourhood of a position (Pillow's filters compute it per band; it is the same for
// every band, so it is computed once per pixel here): rows (-1: repeat the previous value),
// clamped columns and the fractions.
struct Taps2 {
  int64_t row0, row1;  // row1 < 0: v2 = v1
  int64_t x0, x1;
  double dx, dy;
};

inline Taps2 bilinear_taps(int64_t W, int64_t H, double xin, double yin) {
  xin -= 0.5;
  yin -= 0.5;
  const int x = floor_int(xin), y = floor_int(yin);
  Taps2 t;
  t.dx = xin - x;
  t.dy = yin - y;
  t.x0 = clip(x, W);
  t.x1 = clip((int64_t)x + 1, W);
  t.row0 = clip(y, H) * W;
  t.row1 = ((int64_t)y + 1 >= 0 && (int64_t)y + 1 < H) ? ((int64_t)y + 1) * W : -1;
  return t;
}

inline uint8_t bilinear_at(const uint8_t* plane, const Taps2& t) {
  const uint8_t* row = plane + t.row0;
  double v1 = lerp_int(row[t.x0], row[t.x1], t.dx);
  double v2 = v1;
  if (t.row1 >= 0) {
    row = plane + t.row1;
    v2 = lerp_int(row[t.x0], row[t.x1], t.dx);
  }
  v1 = lerp(v1, v2, t.dy);
  return (uint8_t)v1;
}

// BICUBIC(v, v1, v2, v3, v4, d) on integer samples (the differences are C ints) and on doubles.
inline double cubic_int(int v1, int v2, int v3, int v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}
inline double cubic(double v1, double v2, double v3, double v4, double d) {
  const double p1 = v2;
  const double p2 = -v1 + v3;
  const double p3 = 2 * (v1 - v2) + v3 - v4;
  const double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

struct Taps4 {
  int64_t rows[4];  // rows[k] < 0 (k > 0): repeat the previous row's value
  int64_t xs[4];
  double dx, dy;
};

inline Taps4 bicubic_taps(int64_t W, int64_t H, double xin, double yin) {
  xin -= 0.5;
  yin -= 0.5;
  int64_t x = floor_int(xin), y = floor_int(yin);
  Taps4 t;
  t.dx = xin - (double)x;
  t.dy = yin - (double)y;
  x--;
  y--;
  for (int k = 0; k < 4; k++) t.xs[k] = clip(x + k, W);
  t.rows[0] = clip(y, H) * W;
  for (int k = 1; k < 4; k++) t.rows[k] = (y + k >= 0 && y + k < H) ? (y + k) * W : -1;
  return t;
}

inline uint8_t bicubic_at(const uint8_t* plane, const Taps4& t) {
  double v[4];
  for (int k = 0; k < 4; k++) {
    if (k > 0 && t.rows[k] < 0) {
      v[k] = v[k - 1];
      continue;
    }
    const uint8_t* row = plane + t.rows[k];
    v[k] = cubic_int(row[t.xs[0]], row[t.xs[1]], row[t.xs[2]], row[t.xs[3]], t.dx);
  }
  const double out = cubic(v[0], v[1], v[2], v[3], t.dy);
  if (out <= 0.0) return 0;
  if (out >= 255.0) return 255;
  return (uint8_t)out;
}

// The position in the input of output pixel (x, y)'s centre, computed afresh in double (as
// ImagingGenericTransform does for the filtered samplers); false where it lies outside.
FP_ALWAYS_INLINE bool affine_source(const double a[6], int64_t x, int64_t y, int64_t W, int64_t H, double& xin,
                                    double& yin) {
  const double xi = (double)x + 0.5, yi = (double)y + 0.5;
  xin = a[0] * xi + a[1] * yi + a[2];
  yin = a[3] * xi + a[4] * yi + a[5];
  return !(xin < 0.0 || xin >= (double)W || yin < 0.0 || yin >= (double)H);
}

#if FP_HAVE_AVX2_TARGET
// bicubic_at for up to 4 bands at once, one band a lane: the same C int differences and double
// operations in the same order as cubic_int / cubic, lane by lane.
FP_TARGET_AVX2 inline __m256d cubic_lanes(__m256d v1, __m256d v2, __m256d v3, __m256d v4, __m256d d) {
  const __m256d p2 = _mm256_add_pd(_mm256_sub_pd(_mm256_setzero_pd(), v1), v3);
  const __m256d p3 = _mm256_sub_pd(
      _mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(2.0), _mm256_sub_pd(v1, v2)), v3), v4);
  const __m256d p4 = _mm256_add_pd(_mm256_sub_pd(_mm256_add_pd(_mm256_sub_pd(_mm256_setzero_pd(), v1), v2), v3), v4);
  return _mm256_add_pd(v2, _mm256_mul_pd(d, _mm256_add_pd(p2, _mm256_mul_pd(d, _mm256_add_pd(p3, _mm256_mul_pd(d, p4))))));
}

// cubic_int of a row's 4 columns (the ints c0..c3, one band a lane).
FP_TARGET_AVX2 inline __m256d cubic_int_lanes(__m128i c0, __m128i c1, __m128i c2, __m128i c3, __m256d d) {
  const __m256d p1 = _mm256_cvtepi32_pd(c1);
  const __m256d p2 = _mm256_cvtepi32_pd(_mm_add_epi32(_mm_sub_epi32(_mm_setzero_si128(), c0), c2));
  const __m256d p3 = _mm256_cvtepi32_pd(
      _mm_sub_epi32(_mm_add_epi32(_mm_slli_epi32(_mm_sub_epi32(c0, c1), 1), c2), c3));
  const __m256d p4 = _mm256_cvtepi32_pd(
      _mm_add_epi32(_mm_sub_epi32(_mm_add_epi32(_mm_sub_epi32(_mm_setzero_si128(), c0), c1), c2), c3));
  return _mm256_add_pd(p1, _mm256_mul_pd(d, _mm256_add_pd(p2, _mm256_mul_pd(d, _mm256_add_pd(p3, _mm256_mul_pd(d, p4))))));
}

// filtered() with the bicubic filter, the bands of a pixel in the lanes of one vector.
FP_TARGET_AVX2 void filtered_bicubic_avx2(const Planes& p, const double a[6]) {
  const int64_t W = p.width, H = p.height, P = p.plane();
  const uint8_t* band[4];
  for (int64_t c = 0; c < 4; c++) band[c] = p.in + (c < p.channels ? c : 0) * P;
  for (int64_t y = 0; y < H; y++) {
    for (int64_t x = 0; x < W; x++) {
      double xin, yin;
      if (!affine_source(a, x, y, W, H, xin, yin)) continue;  // the fill
      const Taps4 t = bicubic_taps(W, H, xin, yin);
      const __m256d dx = _mm256_set1_pd(t.dx);
      __m256d v[4];
      for (int k = 0; k < 4; k++) {
        if (k > 0 && t.rows[k] < 0) {
          v[k] = v[k - 1];
          continue;
        }
        __m128i col[4];
        for (int j = 0; j < 4; j++) {
          const int64_t at = t.rows[k] + t.xs[j];
          col[j] = _mm_setr_epi32(band[0][at], band[1][at], band[2][at], band[3][at]);
        }
        v[k] = cubic_int_lanes(col[0], col[1], col[2], col[3], dx);
      }
      __m256d out = cubic_lanes(v[0], v[1], v[2], v[3], _mm256_set1_pd(t.dy));
      out = _mm256_min_pd(_mm256_max_pd(out, _mm256_setzero_pd()), _mm256_set1_pd(255.0));
      alignas(16) int32_t level[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(level), _mm256_cvttpd_epi32(out));
      uint8_t* o = p.out + y * W + x;
      for (int64_t c = 0; c < p.channels; c++) o[c * P] = (uint8_t)level[c];
    }
  }
}

#endif

// ImagingGenericTransform with affine_transform and the bilinear / bicubic filter.
void filtered(const Planes& p, const double a[6], bool bicubic) {
#if FP_HAVE_AVX2_TARGET
  // (bilinear's few operations a band gain nothing from the lanes: measured slower)
  if (bicubic && p.channels <= 4 && isa_level() >= kIsaAvx2) return filtered_bicubic_avx2(p, a);
#endif
  const int64_t W = p.width, H = p.height, P = p.plane();
  for (int64_t y = 0; y < H; y++) {
    for (int64_t x = 0; x < W; x++) {
      double xin, yin;
      if (!affine_source(a, x, y, W, H, xin, yin)) continue;  // the fill
      uint8_t* out = p.out + y * W + x;
      if (bicubic) {
        const Taps4 t = bicubic_taps(W, H, xin, yin);
        for (int64_t c = 0; c < p.channels; c++) out[c * P] = bicubic_at(p.in + c * P, t);
      } else {
        const Taps2 t = bilinear_taps(W, H, xin, yin);
        for (int64_t c = 0; c < p.channels; c++) out[c * P] = bilinear_at(p.in + c * P, t);
      }
    }
  }
}

void check_image(const Image& im, const char* name) {
  TORCH_CHECK_TYPE(im.dtype == at::kByte, name, ": the PIL-exact kernels take uint8 images, got ", im.dtype);
  TORCH_CHECK_VALUE(im.channels >= 1 && im.channels <= 4, name, ": images of 1 to 4 channels, got ", im.channels);
}

// The fill bytes of a step: `count` values from f[first] (1 broadcast, or one per channel),
// each a whole number in [0, 255].
void step_fill(const PixelStep& s, const Image& im, int64_t count, int first, uint8_t fill[4], const char* name) {
  TORCH_CHECK_VALUE(count == 1 || count == im.channels, name, ": 1 or ", im.channels,
                    " fill values (one per channel), got ", count);
  for (int64_t c = 0; c < im.channels; c++) {
    const double v = s.f[first + (count == 1 ? 0 : c)];
    TORCH_CHECK_VALUE(v >= 0.0 && v <= 255.0 && v == std::floor(v), name,
                      ": fill values must be whole numbers in [0, 255] (Pillow's ink), got ", v);
    fill[c] = (uint8_t)v;
  }
}

// Image.transform(size, AFFINE, a, resample, fillcolor) at the image's size, into `out`.
void transform_into(const Image& im, uint8_t* out, const double a[6], int64_t resample, const uint8_t fill[4],
                    std::vector<int32_t>& tab) {
  const Planes p{im.u8(), out, im.channels, im.height, im.width};
  fill_output(p, fill);
  if (resample != kNearest) return filtered(p, a, resample == kBicubic);
  if (a[1] == 0 && a[3] == 0) return nearest_scale(p, a, tab);
  const int w = (int)im.width, h = (int)im.height;
  if (fixed_ok(a, 0, 0) && fixed_ok(a, w, h) && fixed_ok(a, 0, h) && fixed_ok(a, w, 0)) return nearest_fixed(p, a);
  nearest_float(p, a);
}

void check_resample(int64_t resample, const char* name) {
  TORCH_CHECK_VALUE(resample == kNearest || resample == kBilinear || resample == kBicubic, name,
                    ": resample must be Pillow's NEAREST (0), BILINEAR (2) or BICUBIC (3), got ", resample);
}

void run_transform(const Image& im, const double a[6], int64_t resample, const uint8_t fill[4],
                   KernelScratch& scratch) {
  if (im.numel() == 0) return;
  uint8_t* out = grown(scratch.u8, (size_t)im.numel());
  transform_into(im, out, a, resample, fill, scratch.i32);
  std::memcpy(im.u8(), out, (size_t)im.numel());
}

void pil_transform_affine(const PixelStep& s, Image& im, KernelScratch& scratch) {
  check_image(im, "pil_transform_affine");
  check_resample(s.i[0], "pil_transform_affine");
  uint8_t fill[4] = {};
  step_fill(s, im, s.i[1], 6, fill, "pil_transform_affine");
  double a[6];
  for (int k = 0; k < 6; k++) a[k] = s.f[k];
  run_transform(im, a, s.i[0], fill, scratch);
}

// Python's round(x, 15): the correctly rounded decimal, read back (glibc's printf and strtod
// are correctly rounded, as CPython's dtoa is).
double round15(double x) {
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.15f", x);
  return std::strtod(buf, nullptr);
}

// A half turn, or a quarter turn (counter-clockwise: Pillow's ROTATE_90; k = 3: ROTATE_270)
// of a square image, into `out`.
void turn_into(const Image& im, uint8_t* out, int k) {
  const int64_t H = im.height, W = im.width, P = im.plane();
  for (int64_t c = 0; c < im.channels; c++) {
    const uint8_t* in = im.u8() + c * P;
    uint8_t* o = out + c * P;
    for (int64_t y = 0; y < H; y++)
      for (int64_t x = 0; x < W; x++) {
        int64_t from = 0;
        if (k == 2) from = (H - 1 - y) * W + (W - 1 - x);
        if (k == 1) from = x * W + (W - 1 - y);
        if (k == 3) from = (H - 1 - x) * W + y;
        o[y * W + x] = in[from];
      }
  }
}

}  // namespace

void pil_rotate_matrix(double angle, int64_t width, int64_t height, const double* center, double matrix[6]) {
  const double cx = center ? center[0] : (double)width / 2.0;
  const double cy = center ? center[1] : (double)height / 2.0;
  constexpr double kDegToRad = 3.14159265358979323846 / 180.0;  // CPython's math.radians
  const double rad = -(angle * kDegToRad);
  matrix[0] = round15(libm_cos(rad));
  matrix[1] = round15(libm_sin(rad));
  matrix[2] = 0.0;
  matrix[3] = round15(-libm_sin(rad));
  matrix[4] = round15(libm_cos(rad));
  matrix[5] = 0.0;
  const double x = -cx - 0.0, y = -cy - 0.0;  // -center - post_trans (0, 0)
  const double tx = matrix[0] * x + matrix[1] * y + matrix[2];
  const double ty = matrix[3] * x + matrix[4] * y + matrix[5];
  matrix[2] = tx + cx;
  matrix[5] = ty + cy;
}

int64_t pil_rotate_turns(double angle, int64_t width, int64_t height, bool has_center) {
  if (has_center) return -1;
  if (angle == 0.0) return 0;
  if (angle == 180.0) return 2;
  if ((angle == 90.0 || angle == 270.0) && width == height) return angle == 90.0 ? 1 : 3;
  return -1;
}

namespace {

// Image.rotate(angle, resample, expand=False, center, fillcolor) of the image.
void rotate_image(Image& im, double angle, int64_t resample, const double* center, const uint8_t fill[4],
                  KernelScratch& scratch) {
  TORCH_CHECK_VALUE(std::isfinite(angle), "pil_rotate: the angle must be finite, got ", angle);
  if (im.numel() == 0) return;
  angle = python_float_mod(angle, 360.0);
  const int64_t turns = pil_rotate_turns(angle, im.width, im.height, center != nullptr);
  if (turns == 0) return;
  if (turns > 0) {
    uint8_t* out = grown(scratch.u8, (size_t)im.numel());
    turn_into(im, out, (int)turns);
    std::memcpy(im.u8(), out, (size_t)im.numel());
    return;
  }
  double a[6];
  pil_rotate_matrix(angle, im.width, im.height, center, a);
  run_transform(im, a, resample, fill, scratch);
}

void pil_rotate(const PixelStep& s, Image& im, KernelScratch& scratch) {
  check_image(im, "pil_rotate");
  check_resample(s.i[0], "pil_rotate");
  uint8_t fill[4] = {};
  step_fill(s, im, s.i[1], 3, fill, "pil_rotate");
  rotate_image(im, s.f[0], s.i[0], s.i[2] != 0 ? s.f + 1 : nullptr, fill, scratch);
}

// The PIL twin of the tensor kernel "affine" (csrc/ops/affine.cpp), from the same step: what
// torchvision's F.affine / F.rotate do on a PIL image with the arguments the draw recorded
// (AffineArgs: i3, i4, f10..f17). F.affine: _get_inverse_affine_matrix about the centre in
// pixels (default (w / 2, h / 2)), then Image.transform; F.rotate: Image.rotate. Interpolation
// i0: 0 nearest, 1 bilinear, 2 bicubic; fill (i1, i2, f6..): torchvision's _parse_fill (None:
// 0; int() of each value, one broadcast to every channel) and Pillow's ink (clamped to [0, 255]).
void pil_affine_twin(const PixelStep& s, Image& im, KernelScratch& scratch) {
  check_image(im, "pil_affine");
  TORCH_CHECK_VALUE(s.i[0] >= 0 && s.i[0] <= 2, "pil_affine: interpolation must be 0 (nearest), 1 (bilinear) or 2 "
                    "(bicubic), got ", s.i[0]);
  TORCH_CHECK_VALUE(s.i[4] == AffineArgs::kAffine || s.i[4] == AffineArgs::kRotate || s.i[4] == AffineArgs::kAffineV1,
                    "pil_affine: i4 must be 0 (F.affine), 1 (F.rotate) or 2 (v1's F.affine), got ", s.i[4]);
  const int64_t resample = s.i[0] == 0 ? kNearest : (s.i[0] == 1 ? kBilinear : kBicubic);
  uint8_t fill[4] = {};
  if (s.i[1] != 0) {
    const int64_t count = s.i[2];
    TORCH_CHECK_VALUE(count >= 1 && count <= 4 && (count == 1 || count == im.channels),
                      "The number of elements in 'fill' does not match the number of channels of the image (", count,
                      " != ", im.channels, ")");
    for (int64_t c = 0; c < im.channels; c++) {
      const double v = s.f[6 + (count == 1 ? 0 : c)];
      TORCH_CHECK_VALUE(std::isfinite(v), "pil_affine: fill values must be finite, got ", v);
      const double t = std::trunc(v);  // Python's int()
      fill[c] = (uint8_t)(t <= 0.0 ? 0.0 : (t >= 255.0 ? 255.0 : t));
    }
  }
  const double* center = s.i[3] != 0 ? s.f + 16 : nullptr;
  if (s.i[4] == AffineArgs::kRotate) return rotate_image(im, s.f[10], resample, center, fill, scratch);
  const double c[2] = {center ? center[0] : (double)im.width * 0.5, center ? center[1] : (double)im.height * 0.5};
  double a[6];
  if (s.i[4] == AffineArgs::kAffineV1) {
    inverse_affine_matrix_v1(c, s.f[10], s.f + 11, s.f[13], s.f + 14, a);
  } else {
    inverse_affine_matrix(c, s.f[10], s.f + 11, s.f[13], s.f + 14, a);
  }
  run_transform(im, a, resample, fill, scratch);
}

// ---------------------------------------------------------------------------------------
// GaussianBlur

// One output row of a vertical box pass: the running column sums `acc` take row `add` in and
// row `sub` out, and each output is the weighted sum with the outer taps `left` and `right`.
FP_ALWAYS_INLINE void box_step_body(uint32_t* __restrict acc, const uint8_t* __restrict add,
                                    const uint8_t* __restrict sub, const uint8_t* __restrict left,
                                    const uint8_t* __restrict right, uint8_t* __restrict out, int64_t w, uint32_t ww,
                                    uint32_t fw) {
  for (int64_t x = 0; x < w; x++) {
    acc[x] += (uint32_t)((int32_t)add[x] - (int32_t)sub[x]);
    const uint32_t bulk = acc[x] * ww + (uint32_t)(left[x] + right[x]) * fw;
    out[x] = (uint8_t)((bulk + (1u << 23)) >> 24);
  }
}
FP_VARIANTS(box_step, (uint32_t* __restrict acc, const uint8_t* __restrict add, const uint8_t* __restrict sub,
                       const uint8_t* __restrict left, const uint8_t* __restrict right, uint8_t* __restrict out,
                       int64_t w, uint32_t ww, uint32_t fw),
            (acc, add, sub, left, right, out, w, ww, fw))

// `passes` box passes of radius `r` down the columns of an h x w plane, in place: every column
// at once, each with Pillow's sliding sum over its line (edge values repeated). `acc` holds w
// sums, `out` an h x w plane.
void box_columns(uint8_t* data, int64_t h, int64_t w, float r, int passes, uint32_t* acc, uint8_t* out) {
  const int n = (int)h;
  const int radius = (int)r;
  const uint32_t ww = (uint32_t)((float)(uint32_t)(1 << 24) / (r * 2 + 1));
  const uint32_t fw = ((uint32_t)(1 << 24) - (uint32_t)(radius * 2 + 1) * ww) / 2;
  const int edge_a = std::min(radius + 1, n);
  const int edge_b = std::max(n - radius - 1, 0);
  const int last = n - 1;
  auto row = [&](int k) { return data + (int64_t)k * w; };
  auto step = [&](int y, int sub, int add, int left, int right) {
    box_step(acc, row(add), row(sub), row(left), row(right), out + (int64_t)y * w, w, ww, fw);
  };
  for (int p = 0; p < passes; p++) {
    for (int64_t x = 0; x < w; x++) acc[x] = (uint32_t)row(0)[x] * (uint32_t)(radius + 1);
    for (int k = 0; k < edge_a - 1; k++)
      for (int64_t x = 0; x < w; x++) acc[x] += row(k)[x];
    for (int64_t x = 0; x < w; x++) acc[x] += (uint32_t)row(last)[x] * (uint32_t)(radius - edge_a + 1);
    if (edge_a <= edge_b) {
      for (int y = 0; y < edge_a; y++) step(y, 0, y + radius, 0, y + radius + 1);
      for (int y = edge_a; y < edge_b; y++) step(y, y - radius - 1, y + radius, y - radius - 1, y + radius + 1);
      for (int y = edge_b; y <= last; y++) step(y, y - radius - 1, last, y - radius - 1, last);
    } else {
      for (int y = 0; y < edge_b; y++) step(y, 0, y + radius, 0, y + radius + 1);
      for (int y = edge_b; y < edge_a; y++) step(y, 0, last, 0, last);
      for (int y = edge_a; y <= last; y++) step(y, y - radius - 1, last, y - radius - 1, last);
    }
    std::memcpy(data, out, (size_t)(h * w));
  }
}

// out (w x h) = the transpose of in (h x w), in 32 x 32 tiles.
void transpose_plane(const uint8_t* __restrict in, int64_t h, int64_t w, uint8_t* __restrict out) {
  constexpr int64_t kTile = 32;
  for (int64_t y0 = 0; y0 < h; y0 += kTile) {
    const int64_t y1 = std::min(y0 + kTile, h);
    for (int64_t x0 = 0; x0 < w; x0 += kTile) {
      const int64_t x1 = std::min(x0 + kTile, w);
      for (int64_t x = x0; x < x1; x++)
        for (int64_t y = y0; y < y1; y++) out[x * h + y] = in[y * w + x];
    }
  }
}

void pil_gaussian_blur(const PixelStep& s, Image& im, KernelScratch& scratch) {
  check_image(im, "pil_gaussian_blur");
  const int64_t passes = s.i[0];
  TORCH_CHECK_VALUE(passes >= 1 && passes <= 16, "pil_gaussian_blur: passes must be 1..16 (GaussianBlur: 3), got ",
                    passes);
  for (int k = 0; k < 2; k++)
    TORCH_CHECK_VALUE(std::isfinite(s.f[k]) && std::fabs(s.f[k]) < 1e18, "pil_gaussian_blur: radius must be finite, got ",
                      s.f[k]);
  if (im.numel() == 0 || (s.f[0] == 0.0 && s.f[1] == 0.0)) return;  // GaussianBlur(0): a copy
  const float rx = pil_box_radius((float)s.f[0], (int)passes);
  const float ry = pil_box_radius((float)s.f[1], (int)passes);
  TORCH_CHECK_VALUE(rx >= 0 && ry >= 0, "pil_gaussian_blur: radius out of range (box radius ", rx, ", ", ry, ")");
  const int64_t H = im.height, W = im.width, P = im.plane();
  TORCH_CHECK_VALUE(H < INT_MAX && W < INT_MAX, "pil_gaussian_blur: image too large");
  // The horizontal passes run as vertical ones on the transposed plane: the sliding sums of
  // every row advance together (vectorized) instead of one row at a time.
  uint8_t* turned = grown(scratch.u8, (size_t)(2 * P));
  uint8_t* out = turned + P;
  uint32_t* acc = reinterpret_cast<uint32_t*>(grown(scratch.i32, (size_t)std::max(H, W)));
  for (int64_t c = 0; c < im.channels; c++) {
    uint8_t* plane = im.u8() + c * P;
    if (rx != 0) {
      transpose_plane(plane, H, W, turned);
      box_columns(turned, W, H, rx, (int)passes, acc, out);
      transpose_plane(turned, W, H, plane);
    }
    if (ry != 0) box_columns(plane, H, W, ry, (int)passes, acc, out);
  }
}

}  // namespace

float pil_box_radius(float radius, int passes) {
  const float sigma2 = radius * radius / (float)passes;
  const float L = (float)std::sqrt(12.0 * (double)sigma2 + 1.0);
  const float l = (float)std::floor(((double)L - 1.0) / 2.0);
  float a = (2 * l + 1) * (l * (l + 1) - 3 * sigma2);
  a /= 6 * (sigma2 - (l + 1) * (l + 1));
  return l + a;
}

FP_REGISTER_PIXEL_KERNEL({"pil_transform_affine",
                          "Image.transform(size, AFFINE, f0..f5, resample=i0, fillcolor) at the image's size: "
                          "i0=resample (Pillow's NEAREST 0, BILINEAR 2, BICUBIC 3) i1=fill count (1 or C) "
                          "f6..=fill bytes (Pillow's ink of the fillcolor; 0 for None)",
                          pil_transform_affine, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_affine",
                          "PIL twin of affine (same step): F.affine / F.rotate on a PIL image; i0=interpolation (0 "
                          "nearest, 1 bilinear, 2 bicubic) i1=has fill i2=fill count (1 or C) f6..f9=fill "
                          "i3=has center i4=kind (0 F.affine, 1 F.rotate) f10=angle f11, f12=translate f13=scale "
                          "f14, f15=shear f16, f17=center (x, y) in pixels",
                          pil_affine_twin, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_rotate",
                          "Image.rotate(f0 degrees, resample=i0, expand=False, center, fillcolor): i0=resample "
                          "(0, 2, 3) i1=fill count (1 or C) i2=has center f1, f2=center (x, y) f3..=fill bytes",
                          pil_rotate, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"pil_gaussian_blur",
                          "Image.filter(ImageFilter.GaussianBlur((f0, f1))): f0, f1=radius x, y (the filter's "
                          "radius, read as a C float as Pillow does; 0, 0: a copy) i0=box passes (3)",
                          pil_gaussian_blur, nullptr, nullptr});

}  // namespace fastprep
