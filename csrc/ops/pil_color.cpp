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

// p[k] = lut[p[k]] for k < n.
void apply_lut(uint8_t* __restrict p, int64_t n, const uint8_t* __restrict lut) {
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {  // four independent loads per iteration
    const uint8_t a = lut[p[k]], b = lut[p[k + 1]], c = lut[p[k + 2]], d = lut[p[k + 3]];
    p[k] = a, p[k + 1] = b, p[k + 2] = c, p[k + 3] = d;
  }
  for (; k < n; k++) p[k] = lut[p[k]];
}

// Applies `lut` (256 entries per channel, channel c at lut + 256 * c) to every channel.
void apply_luts(Image& image, const uint8_t* lut) {
  const int64_t n = image.plane();
  for (int64_t c = 0; c < image.channels; c++) apply_lut(image.u8() + c * n, n, lut + 256 * c);
}

// The "L" image of `image` (convert("L"), or the image itself when it has one channel).
const uint8_t* gray_of(const Image& image, KernelScratch& scratch) {
  if (image.channels == 1) return image.u8();
  const int64_t n = image.plane();
  uint8_t* g = grown(scratch.u8, (size_t)n);
  const uint8_t *r = image.u8(), *gr = r + n, *b = r + 2 * n;
  for (int64_t k = 0; k < n; k++) g[k] = luma(r[k], gr[k], b[k]);
  return g;
}

// ImageEnhance.Brightness: blend(black, image, factor).
void pil_brightness(const PixelStep& step, Image& image, KernelScratch&) {
  check_uint8(image, "pil_adjust_brightness");
  const float alpha = (float)step.f[0];
  uint8_t lut[256];
  for (int v = 0; v < 256; v++) lut[v] = blend(0, v, alpha);
  apply_lut(image.u8(), image.numel(), lut);
}

// ImageEnhance.Contrast: blend(the mean grey, image, factor); the mean is
// int(ImageStat.Stat(image.convert("L")).mean[0] + 0.5).
void pil_contrast(const PixelStep& step, Image& image, KernelScratch& scratch) {
  check_uint8(image, "pil_adjust_contrast");
  const int64_t n = image.plane();
  const uint8_t* g = gray_of(image, scratch);
  int64_t sum = 0;
  for (int64_t k = 0; k < n; k++) sum += g[k];
  const int32_t mean = n > 0 ? (int32_t)((double)sum / (double)n + 0.5) : 0;
  const float alpha = (float)step.f[0];
  uint8_t lut[256];
  for (int v = 0; v < 256; v++) lut[v] = blend(mean, v, alpha);
  apply_lut(image.u8(), image.numel(), lut);
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
  uint8_t saturation[256][256];  // [maxc][cr]: CLIP8((int)(s * 255.0)), s = cr / (float)maxc
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
        saturation[maxc][cr] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
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
  static const HsvTables tables;  // 325 KB, built at the first hue step
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

void hue_rows(uint8_t* __restrict r, uint8_t* __restrict g, uint8_t* __restrict b, int64_t n, int32_t shift) {
  const HsvTables& tab = hsv_tables();
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
  for (int64_t k = 0; k < n; k++) r[k] = luma(r[k], g[k], b[k]);
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
