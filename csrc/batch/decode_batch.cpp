// torch.ops.fastprep.decode_batch: the per-sample work of the built-in decode pipelines
// for a whole batch in one call, on a pool of native threads, each sample written straight
// into its slot of a preallocated batch.
//
// Per sample i (its SamplePlan, batch/plan.h, written by fastprep/data/native.py from the
// transforms' own geometry and draws): read the header; decode a window at a DCT scale
// (decode_roi_into: the restart-interval path on packed files, else libjpeg); optionally
// resize it with resize_aa's kernel (a window of a virtual full-image grid, hflip fused);
// place the result on the sample's canvas, the rest of which is padding; optionally apply
// RandomMask's random, cross-dilated mask (the same bits as fastprep/_kernels/_mask.py for
// the same seed); run the sample's pixel steps (the native augmentations, ops/pixel_kernel.h);
// write out[i]: uint8, or float with the batch's conversion fused into the write
// (fastprep.data.BatchConvert's, or v2 ToDtype + Normalize's: the same float32 operations in
// the same order, so the same bits), then the float steps (RandomErasing after Normalize).
//
// Errors never abort the batch: each sample gets a status (0 ok, 1 ok with a libjpeg
// warning, 2 error) and a message. Threads take samples from an atomic counter: the calling
// thread and helpers from a process-wide pool that persists across calls (HelperPool), each
// with scratch buffers that persist too. Everything here runs without the GIL (torch.ops
// releases it).
#include <ATen/ATen.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "exit_gate.h"
#include "jpeg/decode_jpeg_roi.h"
#include "jpeg/jpeg_decoder.h"
#if defined(__linux__)
#include <pthread.h>
#endif

#include "batch/plan.h"
#include "isa.h"
#include "jpeg/jpeg_ops.h"
#include "ops/pixel_kernel.h"
#include "ops/resize_aa.h"
#include "ops/pil_resample.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#include <immintrin.h>
#define FP_X86_64 1
// Leaf loops written to auto-vectorize, compiled for AVX2 and the baseline (picked at load).
#define FP_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FP_X86_64 0
#define FP_VECTOR_CLONES
#endif

namespace fastprep {
namespace {


constexpr int64_t kMaskPrecisionBits = 16;

struct Batch {
  std::vector<const uint8_t*> bytes;
  std::vector<size_t> sizes;
  const SamplePlan* plans = nullptr;
  int64_t plan_stride = 1;  // plans of one view are every plan_stride-th (sample-major, one per view)
  const PixelStep* steps = nullptr;
  int64_t num_steps = 0;
  StepExtras extras;
  int64_t mode = 0, max_pixels = 0, max_scans = 0;
  bool strict = false;
  int64_t C = 0, H = 0, W = 0;  // out's channels and size
  int64_t DC = 0;               // channels of the decoded canvas (C unless a step changes it)
  at::ScalarType dtype = at::kByte;
  char* out = nullptr;
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;  // out strides, in elements
  uint8_t pad[4] = {0, 0, 0, 0};
  uint8_t mask_fill[4] = {0, 0, 0, 0};
  int64_t convert = kNoConvert;
  float coef[3][4] = {};
  float gain[4] = {}, bias[4] = {};
  float scale = 0, mean[4] = {}, std_[4] = {};
  // The sample goes through a planar float32 image (the v2 conversions, float steps).
  bool via_float = false;
};

// A sample's uint8 pixels: channel c, row y, column x at p[c * cs + y * ys + x * xs].
struct Canvas {
  uint8_t* p;
  int64_t cs, ys, xs;
};

// Per-thread buffers, grown as needed and reused across samples.
struct Scratch {
  std::vector<uint8_t> decoded, region, canvas, mask_row;
  std::vector<uint64_t> bits, dilated;
  std::vector<float> rows, image;
  std::vector<uint16_t> half_rows;
  std::vector<int32_t> pad_map;
  KernelScratch kernels;
};

// ------------------------------------------------------------------------------------
// Random mask: fastprep/_kernels/_mask.py ported word for word (same counters, same bits).

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

void trim_bits(uint64_t* words, int64_t height, int64_t nw, int64_t width) {
  const int64_t tail = width % 64;
  if (tail == 0) return;
  const uint64_t keep = (uint64_t(1) << tail) - 1;
  for (int64_t r = 0; r < height; r++) words[r * nw + nw - 1] &= keep;
}

// Packed mask [height, ceil(width / 64)]: bit j of word w of a row is column 64 w + j, set
// with probability m / 2**16 (random_bits in _mask.py).
void random_bits(uint64_t seed, int64_t m, int64_t height, int64_t width, uint64_t* words) {
  const int64_t nw = (width + 63) / 64, n = height * nw;
  if (m >= (int64_t(1) << kMaskPrecisionBits)) {
    std::fill(words, words + n, ~uint64_t(0));
  } else if (m > 0) {
    int64_t low = 0;
    while (((m >> low) & 1) == 0) low++;
    for (int64_t i = 0; i < n; i++) words[i] = mix64(seed + uint64_t(i + 1) * kGolden);
    for (int64_t level = low + 1; level < kMaskPrecisionBits; level++) {
      const uint64_t base = seed + uint64_t((level - low) * n) * kGolden;
      if ((m >> level) & 1) {
        for (int64_t i = 0; i < n; i++) words[i] |= mix64(base + uint64_t(i + 1) * kGolden);
      } else {
        for (int64_t i = 0; i < n; i++) words[i] &= mix64(base + uint64_t(i + 1) * kGolden);
      }
    }
  } else {
    std::fill(words, words + n, uint64_t(0));
  }
  trim_bits(words, height, nw, width);
}

// 4-neighbour (cross) dilation of a packed mask, zero padding (dilate_bits in _mask.py).
void dilate_bits(const uint64_t* words, int64_t height, int64_t width, uint64_t* out) {
  const int64_t nw = (width + 63) / 64;
  for (int64_t r = 0; r < height; r++) {
    const uint64_t* row = words + r * nw;
    const uint64_t* up = words + (r > 0 ? r - 1 : r) * nw;
    const uint64_t* down = words + (r + 1 < height ? r + 1 : r) * nw;
    for (int64_t w = 0; w < nw; w++) {
      const uint64_t x = row[w];
      const uint64_t left = w > 0 ? row[w - 1] >> 63 : 0;
      const uint64_t right = w + 1 < nw ? row[w + 1] << 63 : 0;
      out[r * nw + w] = x | (x << 1) | left | (x >> 1) | right | up[w] | down[w];
    }
  }
  trim_bits(out, height, nw, width);
}

// mask[x] = bit x of the packed row, 0/1, for x < n.
FP_VECTOR_CLONES void unpack_mask_row(const uint64_t* __restrict words, int64_t n, uint8_t* __restrict mask) {
  for (int64_t x = 0; x < n; x++) mask[x] = (uint8_t)((words[x >> 6] >> (x & 63)) & 1);
}

// p[x * step] = f where mask[x], for x < n.
FP_VECTOR_CLONES void blend_row(uint8_t* __restrict p, int64_t step, const uint8_t* __restrict mask, int64_t n,
                                uint8_t f) {
  if (step == 1) {
    // load, then select: a blend on every SIMD level
    for (int64_t x = 0; x < n; x++) {
      const uint8_t v = p[x];
      p[x] = mask[x] ? f : v;
    }
  } else {
    for (int64_t x = 0; x < n; x++) {
      const uint8_t v = p[x * step];
      p[x * step] = mask[x] ? f : v;
    }
  }
}

void apply_mask(const Canvas& cv, const Batch& b, uint64_t seed, int64_t m, Scratch& s) {
  const int64_t H = b.H, W = b.W, nw = (W + 63) / 64;
  uint64_t* bits = grown(s.bits, (size_t)(H * nw));
  uint64_t* dil = grown(s.dilated, (size_t)(H * nw));
  random_bits(seed, m, H, W, bits);
  dilate_bits(bits, H, W, dil);
  uint8_t* mask = grown(s.mask_row, (size_t)W);
  for (int64_t y = 0; y < H; y++) {
    unpack_mask_row(dil + y * nw, W, mask);
    for (int64_t c = 0; c < b.DC; c++) blend_row(cv.p + c * cv.cs + y * cv.ys, cv.xs, mask, W, b.mask_fill[c]);
  }
}

// ------------------------------------------------------------------------------------
// Canvas assembly.

void fill_canvas(const Canvas& cv, const Batch& b) {
  for (int64_t c = 0; c < b.DC; c++)
    for (int64_t y = 0; y < b.H; y++) {
      uint8_t* p = cv.p + c * cv.cs + y * cv.ys;
      if (cv.xs == 1) {
        std::memset(p, b.pad[c], (size_t)b.W);
      } else {
        for (int64_t x = 0; x < b.W; x++) p[x * cv.xs] = b.pad[c];
      }
    }
}

// ------------------------------------------------------------------------------------
// Padding by index (SamplePlan.pad_stages > 0).

// The sources of `count` pixels from `start` on along one axis (0: rows, 1: columns) of an
// image `length` pixels long padded by p's stages: the image's index, or -(k + 1) for a pixel
// of stage k's constant border (fastprep/transforms/_plan.py: axis_map).
void pad_axis_map(const SamplePlan& p, int axis, int64_t length, int64_t start, int64_t count, int32_t* out) {
  const int before = 1 - axis;  // pad_ltrb's top (rows) or left (columns); + 2: bottom or right
  int64_t lengths[kMaxPadStages + 1];
  lengths[0] = length;
  for (int64_t k = 0; k < p.pad_stages; k++)
    lengths[k + 1] = lengths[k] + p.pad_ltrb[k][before] + p.pad_ltrb[k][before + 2];
  TORCH_CHECK_VALUE(start >= 0 && start + count <= lengths[p.pad_stages], "decode_batch: the padded window [", start,
                    ", +", count, ") leaves the padded image (", lengths[p.pad_stages], " pixels)");
  for (int64_t t = 0; t < count; t++) {
    int64_t u = start + t;
    for (int64_t k = p.pad_stages - 1; k >= 0; k--) {
      const int64_t n = lengths[k];
      u -= p.pad_ltrb[k][before];
      if (u >= 0 && u < n) continue;
      const int64_t mode = p.pad_mode[k];
      if (mode == kPadConstant) {
        u = -(k + 1);
        break;
      }
      if (mode == kPadEdge) {
        u = u < 0 ? 0 : n - 1;
      } else if (mode == kPadReflect) {
        u = u < 0 ? -u : 2 * (n - 1) - u;
      } else {  // symmetric
        u = u < 0 ? -u - 1 : 2 * n - 1 - u;
      }
      TORCH_CHECK_VALUE(u >= 0 && u < n, "decode_batch: padding stage ", k, " mirrors past its input of ", n,
                        " pixels (torch refuses such padding)");
    }
    out[t] = (int32_t)u;
  }
}

// Sources relative to the decoded window [first, first + size); throws when one is outside.
void pad_map_to_window(int32_t* map, int64_t count, int64_t first, int64_t size) {
  for (int64_t t = 0; t < count; t++) {
    if (map[t] < 0) continue;
    const int64_t r = map[t] - first;
    TORCH_CHECK_VALUE(r >= 0 && r < size, "decode_batch: the padding reads pixel ", map[t],
                      " outside the decoded window [", first, ", +", size, ")");
    map[t] = (int32_t)r;
  }
}

// The whole canvas of a plan with pad_stages > 0, read by index from the decoded window `src`
// (interleaved, `row_stride` bytes a row).
void place_mapped(const Batch& b, const SamplePlan& p, const uint8_t* src, int64_t row_stride, const Canvas& cv,
                  Scratch& s) {
  const int64_t H = b.H, W = b.W, DC = b.DC;
  int32_t* rows = grown(s.pad_map, (size_t)(H + W));
  int32_t* cols = rows + H;
  pad_axis_map(p, 0, p.pad_image_h, p.pad_origin_top, H, rows);
  pad_axis_map(p, 1, p.pad_image_w, p.pad_origin_left, W, cols);
  pad_map_to_window(rows, H, p.top, p.height);
  pad_map_to_window(cols, W, p.left, p.width);
  uint8_t fill[kMaxPadStages][4];
  for (int64_t k = 0; k < kMaxPadStages; k++)
    for (int64_t c = 0; c < 4; c++) fill[k][c] = (uint8_t)((p.pad_fill[k] >> (8 * c)) & 0xFF);
  for (int64_t y = 0; y < H; y++) {
    const int32_t ry = rows[y];
    const uint8_t* line = src + (ry >= 0 ? ry : 0) * row_stride;
    for (int64_t x = 0; x < W; x++) {
      const int32_t rx = cols[x];
      uint8_t* d = cv.p + y * cv.ys + x * cv.xs;
      if (ry >= 0 && rx >= 0) {
        const uint8_t* sp = line + rx * DC;
        for (int64_t c = 0; c < DC; c++) d[c * cv.cs] = sp[c];
      } else {  // the outermost constant stage either coordinate lies in
        const int64_t k = std::max<int64_t>(ry < 0 ? -ry - 1 : -1, rx < 0 ? -rx - 1 : -1);
        for (int64_t c = 0; c < DC; c++) d[c * cv.cs] = fill[k][c];
      }
    }
  }
}

// Pixels [h, w] (planar [C, h, w], or interleaved [h, w, C]) onto the canvas at (top, left).
template <int C>
void place_region_c(const uint8_t* src, bool interleaved, int64_t h, int64_t w, const Canvas& cv, int64_t top,
                    int64_t left) {
  for (int64_t y = 0; y < h; y++) {
    if (interleaved && cv.cs == 1 && cv.xs == C) {
      std::memcpy(cv.p + (top + y) * cv.ys + left * C, src + y * w * C, (size_t)(w * C));
      continue;
    }
    if (C == 3 && interleaved && cv.xs == 1) {
      uint8_t* d = cv.p + (top + y) * cv.ys + left;
      fp_deinterleave3(src + y * w * 3, w, d, d + cv.cs, d + 2 * cv.cs);
      continue;
    }
    for (int c = 0; c < C; c++) {
      uint8_t* d = cv.p + c * cv.cs + (top + y) * cv.ys + left * cv.xs;
      if (!interleaved && cv.xs == 1) {
        std::memcpy(d, src + (c * h + y) * w, (size_t)w);
      } else if (interleaved) {
        const uint8_t* sp = src + y * w * C + c;
        for (int64_t x = 0; x < w; x++) d[x * cv.xs] = sp[x * C];
      } else {
        const uint8_t* sp = src + (c * h + y) * w;
        for (int64_t x = 0; x < w; x++) d[x * cv.xs] = sp[x];
      }
    }
  }
}

void place_region(int64_t C, const uint8_t* src, bool interleaved, int64_t h, int64_t w, const Canvas& cv,
                  int64_t top, int64_t left) {
  switch (C) {
    case 1: return place_region_c<1>(src, interleaved, h, w, cv, top, left);
    case 3: return place_region_c<3>(src, interleaved, h, w, cv, top, left);
    case 4: return place_region_c<4>(src, interleaved, h, w, cv, top, left);
    default: return place_region_c<2>(src, interleaved, h, w, cv, top, left);
  }
}

// ------------------------------------------------------------------------------------
// The float write: BatchConvert's arithmetic on one row of the planar uint8 canvas.
// (The extension is compiled with -ffp-contract=off: no multiply-add is fused unless
// written as fmaf.)

// Inlined into each ISA variant below, so that its loops are compiled for that ISA.
template <bool FMA>
__attribute__((always_inline)) inline void convert_row_impl(const Batch& b, const uint8_t* const* in, int64_t n, float* const* out) {
  switch (b.convert) {
    case kToFloat:
      for (int64_t c = 0; c < b.C; c++)
        for (int64_t x = 0; x < n; x++) out[c][x] = (float)in[c][x] * b.scale;
      break;
    case kToFloatNormalize:  // v2: image.sub(mean).div_(std) after the scale
      for (int64_t c = 0; c < b.C; c++) {
        const float m = b.mean[c], d = b.std_[c];
        for (int64_t x = 0; x < n; x++) out[c][x] = ((float)in[c][x] * b.scale - m) / d;
      }
      break;
    case kDivToFloat:  // v1 convert_image_dtype: image.to(float32) / 255
      for (int64_t c = 0; c < b.C; c++)
        for (int64_t x = 0; x < n; x++) out[c][x] = (float)in[c][x] / 255.0f;
      break;
    case kDivToFloatNormalize:
      for (int64_t c = 0; c < b.C; c++) {
        const float m = b.mean[c], d = b.std_[c];
        for (int64_t x = 0; x < n; x++) out[c][x] = ((float)in[c][x] / 255.0f - m) / d;
      }
      break;
    case kDiv255:
      for (int64_t c = 0; c < b.C; c++)
        for (int64_t x = 0; x < n; x++) out[c][x] = (float)in[c][x] / 255.0f;
      break;
    case kAffine:
      for (int64_t c = 0; c < b.C; c++) {
        const float g = b.gain[c], o = b.bias[c];
        for (int64_t x = 0; x < n; x++) out[c][x] = (float)in[c][x] * g + o;
      }
      break;
    default: {  // the YUV kinds (3 channels)
      const uint8_t *r = in[0], *g = in[1], *bl = in[2];
      for (int64_t c = 0; c < 3; c++) {
        const float m0 = b.coef[c][0], m1 = b.coef[c][1], m2 = b.coef[c][2], o = b.coef[c][3];
        const float ga = b.gain[c], bi = b.bias[c];
        float* d = out[c];
        if (b.convert == kYuv) {
          for (int64_t x = 0; x < n; x++) d[x] = m0 * (float)r[x] + m1 * (float)g[x] + m2 * (float)bl[x] + o;
        } else if (b.convert == kYuvAffine) {
          for (int64_t x = 0; x < n; x++) {
            const float t = m0 * (float)r[x] + m1 * (float)g[x] + m2 * (float)bl[x] + o;
            d[x] = t * ga + bi;
          }
        } else {
          for (int64_t x = 0; x < n; x++) {
            const float t = m0 * (float)r[x] + m1 * (float)g[x] + m2 * (float)bl[x] + o;
            d[x] = FMA ? __builtin_fmaf(t, ga, bi) : std::fma(t, ga, bi);
          }
        }
      }
    }
  }
}

void convert_row_base(const Batch& b, const uint8_t* const* in, int64_t n, float* const* out) {
  convert_row_impl<false>(b, in, n, out);
}

#if FP_X86_64
__attribute__((target("avx2,fma"))) void convert_row_avx2(const Batch& b, const uint8_t* const* in, int64_t n,
                                                          float* const* out) {
  convert_row_impl<true>(b, in, n, out);
}

// The AVX2 variants run where the CPU has the instructions and the one ISA switch (isa.h:
// FASTPREP_ISA, fastprep._kernels.isa.set_isa) has not chosen the baseline; read at every call.
bool cpu_has_avx2_fma() { return isa_level() >= kIsaAvx2; }
#endif

void convert_row(const Batch& b, const uint8_t* const* in, int64_t n, float* const* out) {
#if FP_X86_64
  if (cpu_has_avx2_fma()) return convert_row_avx2(b, in, n, out);
#endif
  convert_row_base(b, in, n, out);
}

// float32 -> float16 / bfloat16 bits, rounded to nearest even: what Tensor.to(dtype) does
// (c10::Half and c10::BFloat16's conversions; bfloat16 NaN -> 0x7FC0, as c10's).
void to_half_base(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t x = 0; x < n; x++) dst[x] = c10::Half(src[x]).x;
}

#if FP_X86_64
__attribute__((target("avx2,f16c"))) void to_half_f16c(const float* src, int64_t n, uint16_t* dst) {
  int64_t x = 0;
  for (; x + 8 <= n; x += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + x),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + x), _MM_FROUND_TO_NEAREST_INT));
  for (; x < n; x++) dst[x] = c10::Half(src[x]).x;
}

bool cpu_has_avx2_f16c() { return isa_level() >= kIsaAvx2; }
#endif

void to_half(const float* src, int64_t n, uint16_t* dst) {
#if FP_X86_64
  if (cpu_has_avx2_f16c()) return to_half_f16c(src, n, dst);
#endif
  to_half_base(src, n, dst);
}

FP_VECTOR_CLONES void to_bfloat16(const float* __restrict src, int64_t n, uint16_t* __restrict dst) {
  for (int64_t x = 0; x < n; x++) {
    uint32_t u;
    std::memcpy(&u, &src[x], 4);
    const uint16_t rounded = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    dst[x] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)0x7FC0 : rounded;
  }
}

// dst[3 x + c] = rows c[x], x < n (3 channels into interleaved memory).
FP_VECTOR_CLONES void interleave3_f32(const float* __restrict a, const float* __restrict b, const float* __restrict c,
                                      int64_t n, float* __restrict dst) {
  for (int64_t x = 0; x < n; x++) {
    dst[3 * x] = a[x];
    dst[3 * x + 1] = b[x];
    dst[3 * x + 2] = c[x];
  }
}

FP_VECTOR_CLONES void interleave3_u16(const uint16_t* __restrict a, const uint16_t* __restrict b,
                                      const uint16_t* __restrict c, int64_t n, uint16_t* __restrict dst) {
  for (int64_t x = 0; x < n; x++) {
    dst[3 * x] = a[x];
    dst[3 * x + 1] = b[x];
    dst[3 * x + 2] = c[x];
  }
}

// Sample i's float rows into out[i] (3 channels): float32, or float16/bfloat16 bits.
void write_float(const Batch& b, int64_t i, const uint8_t* planes, Scratch& s) {
  const int64_t H = b.H, W = b.W;
  float* rows = grown(s.rows, (size_t)(3 * W));
  std::vector<uint16_t>& bits_v = s.half_rows;
  uint16_t* bits = grown(bits_v, (size_t)(3 * W));
  float* row[3] = {rows, rows + W, rows + 2 * W};
  uint16_t* brow[3] = {bits, bits + W, bits + 2 * W};
  const size_t esize = b.dtype == at::kFloat ? 4 : 2;
  char* base = b.out + i * b.sn * (int64_t)esize;
  const bool planar = b.sw == 1;
  for (int64_t y = 0; y < H; y++) {
    const uint8_t* in[3];
    for (int c = 0; c < 3; c++) in[c] = planes + (c * H + y) * W;
    char* dst[3];
    for (int c = 0; c < 3; c++) dst[c] = base + (c * b.sc + y * b.sh) * (int64_t)esize;
    if (b.dtype == at::kFloat) {
      if (planar) {
        float* direct[3] = {reinterpret_cast<float*>(dst[0]), reinterpret_cast<float*>(dst[1]),
                            reinterpret_cast<float*>(dst[2])};
        convert_row(b, in, W, direct);
      } else {
        convert_row(b, in, W, row);
        interleave3_f32(row[0], row[1], row[2], W, reinterpret_cast<float*>(dst[0]));
      }
      continue;
    }
    convert_row(b, in, W, row);
    for (int c = 0; c < 3; c++) {
      uint16_t* target = planar ? reinterpret_cast<uint16_t*>(dst[c]) : brow[c];
      if (b.dtype == at::kHalf)
        to_half(row[c], W, target);
      else
        to_bfloat16(row[c], W, target);
    }
    if (!planar) interleave3_u16(brow[0], brow[1], brow[2], W, reinterpret_cast<uint16_t*>(dst[0]));
  }
}


// ------------------------------------------------------------------------------------
// The path through a planar float32 image (the v2 conversions, and float steps): convert
// the canvas, run the float steps, then store the image into out[i].

// Whether out[i] is itself a contiguous planar float32 image (the steps then run in place).
bool out_is_planar_f32(const Batch& b) {
  return b.dtype == at::kFloat && b.sw == 1 && b.sh == b.W && b.sc == b.H * b.W;
}

// The canvas's planar uint8 image converted into `image` (planar float32, b.C channels).
void convert_image(const Batch& b, const uint8_t* planes, float* image) {
  const int64_t H = b.H, W = b.W, plane = H * W;
  const uint8_t* in[4];
  float* out[4];
  for (int64_t c = 0; c < b.C; c++) {
    in[c] = planes + c * plane;
    out[c] = image + c * plane;
  }
  convert_row(b, in, plane, out);  // the planes are contiguous: one "row" of H * W pixels
}

// A planar float32 image into out[i]: float32, float16 or bfloat16, planar or channels-last.
void store_image(const Batch& b, int64_t i, const float* image, Scratch& s) {
  const int64_t C = b.C, H = b.H, W = b.W;
  const size_t esize = b.dtype == at::kFloat ? 4 : 2;
  char* base = b.out + i * b.sn * (int64_t)esize;
  uint16_t* bits = grown(s.half_rows, (size_t)W);
  for (int64_t c = 0; c < C; c++)
    for (int64_t y = 0; y < H; y++) {
      const float* src = image + (c * H + y) * W;
      char* dst = base + (c * b.sc + y * b.sh) * (int64_t)esize;
      if (b.dtype == at::kFloat) {
        float* d = reinterpret_cast<float*>(dst);
        if (b.sw == 1) {
          if (d != src) std::memcpy(d, src, (size_t)W * sizeof(float));
        } else {
          for (int64_t x = 0; x < W; x++) d[x * b.sw] = src[x];
        }
        continue;
      }
      uint16_t* target = b.sw == 1 ? reinterpret_cast<uint16_t*>(dst) : bits;
      if (b.dtype == at::kHalf)
        to_half(src, W, target);
      else
        to_bfloat16(src, W, target);
      if (b.sw != 1) {
        uint16_t* d = reinterpret_cast<uint16_t*>(dst);
        for (int64_t x = 0; x < W; x++) d[x * b.sw] = bits[x];
      }
    }
}

// A planar uint8 image (b.C channels) into the uint8 out[i], whatever its strides.
void store_u8(const Batch& b, int64_t i, const uint8_t* planes) {
  uint8_t* base = reinterpret_cast<uint8_t*>(b.out) + i * b.sn;
  for (int64_t c = 0; c < b.C; c++)
    for (int64_t y = 0; y < b.H; y++) {
      const uint8_t* src = planes + (c * b.H + y) * b.W;
      uint8_t* dst = base + c * b.sc + y * b.sh;
      if (b.sw == 1) {
        std::memcpy(dst, src, (size_t)b.W);
      } else {
        for (int64_t x = 0; x < b.W; x++) dst[x * b.sw] = src[x];
      }
    }
}

// Runs steps [first, first + count) on `image`.
void run_steps(const Batch& b, int64_t first, int64_t count, Image& image, Scratch& s) {
  s.kernels.extras = b.extras;
  for (int64_t k = first; k < first + count; k++) run_pixel_step(b.steps[k], image, s.kernels);
}


// ------------------------------------------------------------------------------------
// Helper threads, created once and reused by every call (a call used to start and join
// its own threads, and their scratch buffers were allocated and page-faulted again).
//
// run(work, helpers) runs work() on the calling thread and on up to `helpers` pool
// threads, and returns once every thread that entered work() has left it. Caller-runs: a
// helper that has not picked the job up by the time the caller's own work() returns is not
// waited for (the job is withdrawn), so a helper the OS does not schedule never delays a
// call, and concurrent calls share the pool without waiting for each other.
class HelperPool {
 public:
  void run(const std::function<void()>& work, int64_t helpers) {
    Job job{&work, helpers};
    if (helpers > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      while (threads_ < helpers && threads_ < kMaxThreads) {
        try {
          std::thread(&HelperPool::loop, this).detach();
        } catch (const std::system_error&) {
          break;  // no more threads to be had: the ones there (and the caller) do the work
        }
        threads_++;
      }
      queue_.push_back(&job);
      wake_.notify_all();
    }
    work();
    if (helpers > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if (*it == &job) {
          queue_.erase(it);
          break;
        }
      }
      done_.wait(lock, [&] { return job.running == 0; });
    }
  }

 private:
  struct Job {
    const std::function<void()>* work;
    int64_t wanted;
    int64_t started = 0, running = 0;
  };
  static constexpr int64_t kMaxThreads = 1024;

  void loop() {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "fastprep-batch");
#endif
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return !queue_.empty(); });
      Job* job = queue_.front();
      if (++job->started >= job->wanted) queue_.pop_front();
      job->running++;
      lock.unlock();
      (*job->work)();  // never throws: the work catches per sample
      lock.lock();
      if (--job->running == 0) done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::deque<Job*> queue_;  // jobs still taking helpers, oldest first
  int64_t threads_ = 0;
};

// The process's pool. Never destroyed (its threads wait on it until the process exits); a
// forked child, which has none of the parent's threads (and maybe a locked mutex), starts
// a new one and leaks the old.
std::atomic<HelperPool*> g_pool{nullptr};
std::once_flag g_pool_once;

HelperPool& helper_pool() {
  std::call_once(g_pool_once, [] {
    g_pool.store(new HelperPool());
#if defined(__linux__)
    pthread_atfork(nullptr, nullptr, [] { g_pool.store(new HelperPool()); });
#endif
  });
  return *g_pool.load();
}

// Scratch buffers above this many bytes are released after a call, so one huge image does
// not pin memory in every thread for the life of the process.
constexpr size_t kKeepScratchBytes = size_t(64) << 20;

template <typename T>
void trim(std::vector<T>& v) {
  if (v.capacity() * sizeof(T) > kKeepScratchBytes) std::vector<T>().swap(v);
}

void trim(Scratch& s) {
  trim(s.decoded);
  trim(s.region);
  trim(s.canvas);
  trim(s.mask_row);
  trim(s.bits);
  trim(s.dilated);
  trim(s.rows);
  trim(s.half_rows);
  trim(s.image);
  for (auto& v : s.kernels.f32) trim(v);
  trim(s.kernels.u8);
  trim(s.kernels.i32);
}

// ------------------------------------------------------------------------------------
// One sample.

// slack after each buffer: the resize kernels may read a few bytes past a row
constexpr size_t kSlack = 32;

// The plan of sample i in view `b` (plans are sample-major: view v of sample i at i * V + v).
const SamplePlan& plan_of(const Batch& b, int64_t i) { return b.plans[i * b.plan_stride]; }

// The canvas of sample i: out[i] itself for a plain uint8 batch (no steps), else a planar
// scratch image; `in_out` says which.
Canvas canvas_of(const Batch& b, int64_t i, const SamplePlan& p, Scratch& s, bool& in_out) {
  const bool stepped = p.num_steps > 0 || p.num_float_steps > 0;
  in_out = b.dtype == at::kByte && !stepped;
  return in_out ? Canvas{reinterpret_cast<uint8_t*>(b.out) + i * b.sn, b.sc, b.sh, b.sw}
                : Canvas{grown(s.canvas, (size_t)(b.DC * b.H * b.W)), b.H * b.W, b.W, 1};
}

// After the pixels are on the canvas: the mask, the uint8 steps, the conversion and the float
// steps, and the write into out[i].
void finish_sample(const Batch& b, int64_t i, const SamplePlan& p, const Canvas& cv, bool in_out, Scratch& s) {
  const int64_t H = b.H, W = b.W;
  if (p.mask) apply_mask(cv, b, (uint64_t)p.mask_seed, p.mask_m, s);
  if (in_out) return;
  Image image{cv.p, at::kByte, b.DC, H, W, b.DC * H * W};
  run_steps(b, p.first_step, p.num_steps, image, s);
  TORCH_CHECK_VALUE(image.channels == b.C, "the sample's steps leave ", image.channels,
                    " channels; the batch has ", b.C);
  if (b.dtype == at::kByte) {
    store_u8(b, i, cv.p);
  } else if (!b.via_float && p.num_float_steps == 0) {
    write_float(b, i, cv.p, s);
  } else {
    const bool in_place = out_is_planar_f32(b);
    float* f = in_place ? reinterpret_cast<float*>(b.out) + i * b.sn : grown(s.image, (size_t)(b.C * H * W));
    convert_image(b, cv.p, f);
    Image fimage{f, at::kFloat, b.C, H, W, b.C * H * W};
    run_steps(b, p.first_step + p.num_steps, p.num_float_steps, fimage, s);
    TORCH_CHECK_VALUE(fimage.channels == b.C, "the sample's float steps changed its channels");
    if (!in_place) store_image(b, i, f, s);
  }
}

// The header of sample i, checked against the batch's decode mode.
fp_info checked_header(const Batch& b, const Decoder& dec, int64_t i) {
  const fp_info info = read_header(dec, b.bytes[i], b.sizes[i]);
  const int channels = decodable_channels(info, b.mode, b.max_pixels);
  TORCH_CHECK_VALUE(channels == b.DC, "the image decodes to ", channels, " channels in this mode; the batch has ",
                    b.DC);
  return info;
}

// The plan's resize of a decoded window (`h` x `w` pixels of `C` channels, interleaved rows
// `row_stride` bytes apart, `readable` bytes from `d` on) into `r`: torch's (resize_aa) or
// Pillow's (pil_filter).
void resize_window(const SamplePlan& p, int64_t C, const uint8_t* d, int64_t h, int64_t w, int64_t row_stride,
                   int64_t readable, uint8_t* r) {
  if (p.pil_filter) {
    pil_resample_into(d, C, h, w, row_stride, p.full_out_h, p.full_out_w, p.out_top, p.out_left, p.region_h,
                      p.region_w, p.full_in_h, p.full_in_w, p.in_top, p.in_left, p.pil_filter, p.hflip != 0, r);
    return;
  }
  resize_aa_into(d, C, h, w, row_stride, readable, p.full_out_h, p.full_out_w, p.out_top, p.out_left, p.region_h,
                 p.region_w, p.full_in_h, p.full_in_w, p.in_top, p.in_left, p.scale_h, p.scale_w, p.antialias != 0,
                 p.hflip != 0, r, p.filter);
}

// Decodes, resizes, places, masks, augments and writes sample i (one view). Returns its
// libjpeg warning ("" for none); raises (c10::Error) on errors.
std::string run_sample(const Batch& b, int64_t i, Scratch& s) {
  const SamplePlan& p = plan_of(b, i);
  const int64_t DC = b.DC, H = b.H, W = b.W;
  thread_warning().clear();
  Decoder dec(b.strict);
  const fp_info info = checked_header(b, dec, i);
  const int64_t num = p.scale_num, dh = p.height, dw = p.width;
  check_window_fits(info, p.top, p.left, dh, dw, num);

  bool in_out = false;
  const Canvas cv = canvas_of(b, i, p, s, in_out);
  const bool placed = p.placed != 0;
  const int64_t rh = p.region_h, rw = p.region_w, top = p.place_top, left = p.place_left;
  const bool mapped = p.pad_stages > 0;
  const bool covers = mapped || (placed && top == 0 && left == 0 && rh == H && rw == W);
  const bool planar_dense = cv.xs == 1 && cv.ys == W && cv.cs == H * W;
  const bool interleaved_dense = cv.cs == 1 && cv.xs == DC && cv.ys == W * DC;
  if (!covers) fill_canvas(cv, b);

  auto decode = [&](bool channels_last, uint8_t* dst) {
    decode_roi_into(dec, info, b.bytes[i], b.sizes[i], b.mode, p.top, p.left, dh, dw, b.max_pixels, num,
                    b.max_scans, channels_last, [dst]() { return dst; });
  };
  if (mapped) {
    uint8_t* d = grown(s.decoded, (size_t)(DC * dh * dw) + kSlack);
    decode(true, d);
    place_mapped(b, p, d, dw * DC, cv, s);
  } else if (!placed) {
    decode(false, grown(s.decoded, (size_t)(DC * dh * dw) + kSlack));
  } else if (!p.resize) {
    if (covers && (planar_dense || interleaved_dense)) {
      decode(interleaved_dense, cv.p);
    } else {
      const bool interleaved = cv.cs == 1;
      uint8_t* d = grown(s.decoded, (size_t)(DC * dh * dw) + kSlack);
      decode(interleaved, d);
      place_region(DC, d, interleaved, dh, dw, cv, top, left);
    }
  } else {
    const size_t in_bytes = (size_t)(DC * dh * dw) + kSlack;
    uint8_t* d = grown(s.decoded, in_bytes);
    decode(true, d);
    const bool direct = covers && interleaved_dense;
    uint8_t* r = direct ? cv.p : grown(s.region, (size_t)(DC * rh * rw) + kSlack);
    resize_window(p, DC, d, dh, dw, dw * DC, (int64_t)in_bytes, r);
    if (!direct) place_region(DC, r, true, rh, rw, cv, top, left);
  }
  std::string warning = std::move(thread_warning());
  thread_warning().clear();
  finish_sample(b, i, p, cv, in_out, s);
  return warning;
}

// ------------------------------------------------------------------------------------
// Several views of one sample (MultiView): the views that decode at the same DCT scale share
// one decode of the union of their windows (interleaved), and each view's region is cut
// (or resized) from it. A ROI decode equals the full decode sliced, so a view's pixels are
// those of its own window decode, bit for bit; the file's entropy data is read once per
// scale instead of once per view.

struct UnionWindow {
  int64_t top = 0, left = 0, bottom = 0, right = 0;
  bool any = false;
  void add(const SamplePlan& p) {
    if (!any) {
      top = p.top, left = p.left, bottom = p.top + p.height, right = p.left + p.width, any = true;
      return;
    }
    top = std::min(top, p.top), left = std::min(left, p.left);
    bottom = std::max(bottom, p.top + p.height), right = std::max(right, p.left + p.width);
  }
  int64_t height() const { return bottom - top; }
  int64_t width() const { return right - left; }
};

// View `b`'s region of sample i from the union decode `u` (interleaved, `uw` pixels a row,
// `readable` bytes from `u` on), then the rest of the sample.
void view_from_union(const Batch& b, int64_t i, const SamplePlan& p, const uint8_t* u, const UnionWindow& uni,
                     size_t readable, Scratch& s) {
  const int64_t DC = b.DC, H = b.H, W = b.W, uw = uni.width();
  bool in_out = false;
  const Canvas cv = canvas_of(b, i, p, s, in_out);
  const int64_t rh = p.region_h, rw = p.region_w, top = p.place_top, left = p.place_left;
  const bool covers = p.pad_stages > 0 || (top == 0 && left == 0 && rh == H && rw == W);
  if (!covers) fill_canvas(cv, b);
  const size_t offset = (size_t)(((p.top - uni.top) * uw + (p.left - uni.left)) * DC);
  const uint8_t* src = u + offset;
  if (p.pad_stages > 0) {
    place_mapped(b, p, src, uw * DC, cv, s);
  } else if (!p.resize) {
    uint8_t* d = grown(s.region, (size_t)(DC * p.height * p.width) + kSlack);
    for (int64_t y = 0; y < p.height; y++)
      std::memcpy(d + y * p.width * DC, src + y * uw * DC, (size_t)(p.width * DC));
    place_region(DC, d, true, p.height, p.width, cv, top, left);
  } else {
    const bool interleaved_dense = cv.cs == 1 && cv.xs == DC && cv.ys == W * DC;
    const bool direct = covers && interleaved_dense;
    uint8_t* r = direct ? cv.p : grown(s.region, (size_t)(DC * rh * rw) + kSlack);
    resize_window(p, DC, src, p.height, p.width, uw * DC, (int64_t)(readable - offset), r);
    if (!direct) place_region(DC, r, true, rh, rw, cv, top, left);
  }
  finish_sample(b, i, p, cv, in_out, s);
}

// All views of sample i (views.size() > 1). Returns the warnings of its decodes ("" for none).
std::string run_views(const std::vector<Batch>& views, int64_t i, Scratch& s) {
  const Batch& b0 = views[0];
  thread_warning().clear();
  std::string warning;
  const int64_t V = (int64_t)views.size();
  std::vector<char> done((size_t)V, 0);
  bool decoded_any = false;
  fp_info info;
  {
    const Decoder dec(b0.strict);
    info = checked_header(b0, dec, i);
  }
  for (int64_t first = 0; first < V; first++) {
    const SamplePlan& pf = plan_of(views[first], i);
    if (done[first] || !pf.placed) continue;
    UnionWindow uni;  // the views at this view's scale
    for (int64_t v = first; v < V; v++) {
      const SamplePlan& p = plan_of(views[v], i);
      if (!done[v] && p.placed && p.scale_num == pf.scale_num) uni.add(p);
    }
    check_window_fits(info, uni.top, uni.left, uni.height(), uni.width(), pf.scale_num);
    const size_t bytes = (size_t)(b0.DC * uni.height() * uni.width()) + kSlack;
    uint8_t* u = grown(s.decoded, bytes);
    {
      const Decoder dec(b0.strict);
      read_header(dec, b0.bytes[i], b0.sizes[i]);
      decode_roi_into(dec, info, b0.bytes[i], b0.sizes[i], b0.mode, uni.top, uni.left, uni.height(), uni.width(),
                      b0.max_pixels, pf.scale_num, b0.max_scans, true, [u]() { return u; });
    }
    if (!thread_warning().empty() && warning.empty()) warning = thread_warning();
    thread_warning().clear();
    decoded_any = true;
    for (int64_t v = first; v < V; v++) {
      const SamplePlan& p = plan_of(views[v], i);
      if (done[v] || !p.placed || p.scale_num != pf.scale_num) continue;
      view_from_union(views[v], i, p, u, uni, bytes, s);
      done[v] = 1;
    }
  }
  for (int64_t v = 0; v < V; v++) {
    if (done[v]) continue;
    if (!decoded_any) {  // no view needs pixels: still decode one window, to check the file
      warning = run_sample(views[v], i, s);
      decoded_any = true;
      continue;
    }
    const SamplePlan& p = plan_of(views[v], i);
    bool in_out = false;
    const Canvas cv = canvas_of(views[v], i, p, s, in_out);
    fill_canvas(cv, views[v]);  // all padding
    finish_sample(views[v], i, p, cv, in_out, s);
  }
  return warning;
}

// ------------------------------------------------------------------------------------
// Argument checks (on the calling thread, before any work).

void check_pad_stages(const SamplePlan& p, int64_t i) {
  TORCH_CHECK_VALUE(p.pad_stages >= 0 && p.pad_stages <= kMaxPadStages, "decode_batch: plan ", i,
                    ": pad_stages must be in [0, ", kMaxPadStages, "], got ", p.pad_stages);
  if (p.pad_stages == 0) return;
  TORCH_CHECK_VALUE(p.placed == 1 && p.resize == 0, "decode_batch: plan ", i,
                    ": padding by index takes a placed window without a resize");
  constexpr int64_t kMaxSide = int64_t(1) << 24;  // keeps every padded length far inside int32
  TORCH_CHECK_VALUE(p.pad_image_h > 0 && p.pad_image_h <= kMaxSide && p.pad_image_w > 0 && p.pad_image_w <= kMaxSide,
                    "decode_batch: plan ", i, ": bad padded image size ", p.pad_image_h, "x", p.pad_image_w);
  for (int64_t k = 0; k < p.pad_stages; k++) {
    TORCH_CHECK_VALUE(p.pad_mode[k] >= kPadConstant && p.pad_mode[k] <= kPadSymmetric, "decode_batch: plan ", i,
                      ": unknown padding mode ", p.pad_mode[k]);
    for (int64_t e = 0; e < 4; e++)
      TORCH_CHECK_VALUE(p.pad_ltrb[k][e] >= 0 && p.pad_ltrb[k][e] <= kMaxSide, "decode_batch: plan ", i,
                        ": padding must be in [0, ", kMaxSide, "], got ", p.pad_ltrb[k][e]);
  }
}

void check_plan(const SamplePlan& p, int64_t i, int64_t C, int64_t H, int64_t W, int64_t num_steps) {
  auto flag = [&](int64_t v, const char* name) {
    TORCH_CHECK_VALUE(v == 0 || v == 1, "decode_batch: plan ", i, ": ", name, " must be 0 or 1, got ", v);
  };
  flag(p.resize, "resize");
  flag(p.antialias, "antialias");
  TORCH_CHECK_VALUE(p.filter >= kResizeBilinear && p.filter <= kResizeNearestExact, "decode_batch: plan ", i,
                    ": filter must be in [0, 3], got ", p.filter);
  flag(p.hflip, "hflip");
  flag(p.placed, "placed");
  flag(p.mask, "mask");
  TORCH_CHECK_VALUE(p.scale_num >= 1 && p.scale_num <= 8, "decode_batch: plan ", i,
                    ": the DCT scale must be in [1, 8], got ", p.scale_num);
  TORCH_CHECK_VALUE(p.top >= 0 && p.left >= 0 && p.height > 0 && p.width > 0, "decode_batch: plan ", i,
                    ": bad decode window (top=", p.top, ", left=", p.left, ", height=", p.height, ", width=", p.width,
                    ")");
  TORCH_CHECK_VALUE(p.first_step >= 0 && p.num_steps >= 0 && p.num_float_steps >= 0 &&
                        p.first_step + p.num_steps + p.num_float_steps <= num_steps,
                    "decode_batch: plan ", i, ": steps [", p.first_step, ", +", p.num_steps + p.num_float_steps,
                    ") outside the ", num_steps, " steps given");
  TORCH_CHECK_VALUE(p.mask_m >= 0, "decode_batch: plan ", i, ": the mask numerator must be >= 0, got ", p.mask_m);
  check_pad_stages(p, i);
  if (!p.placed || p.pad_stages > 0) return;
  const int64_t rh = p.region_h, rw = p.region_w;
  TORCH_CHECK_VALUE(p.pil_filter >= 0 && p.pil_filter <= kPilLanczos, "decode_batch: plan ", i,
                    ": pil_filter must be in [0, ", (int64_t)kPilLanczos, "], got ", p.pil_filter);
  if (p.resize && p.pil_filter) {
    check_pil_resample_args(C, p.height, p.width, p.full_out_h, p.full_out_w, p.out_top, p.out_left, rh, rw,
                            p.full_in_h, p.full_in_w, p.in_top, p.in_left, p.pil_filter);
  } else if (p.resize) {
    check_resize_args(C, p.height, p.width, p.full_out_h, p.full_out_w, p.out_top, p.out_left, rh, rw, p.full_in_h,
                      p.full_in_w, p.in_top, p.in_left, p.scale_h, p.scale_w);
  } else {
    TORCH_CHECK_VALUE(rh == p.height && rw == p.width, "decode_batch: plan ", i, ": without a resize the region (",
                      rh, "x", rw, ") must be the decoded window (", p.height, "x", p.width, ")");
  }
  TORCH_CHECK_VALUE(p.place_top >= 0 && p.place_left >= 0 && rh <= H - p.place_top && rw <= W - p.place_left,
                    "decode_batch: plan ", i, ": the ", rh, "x", rw, " region at (", p.place_top, ", ", p.place_left,
                    ") does not fit in the ", H, "x", W, " output");
}

void check_out(const at::Tensor& out) {
  TORCH_CHECK_VALUE(out.device().is_cpu(), "decode_batch: out must be on the CPU, got ", out.device());
  TORCH_CHECK_TYPE(out.scalar_type() == at::kByte || out.scalar_type() == at::kFloat ||
                       out.scalar_type() == at::kHalf || out.scalar_type() == at::kBFloat16,
                   "decode_batch: out must be uint8, float32, float16 or bfloat16, got ", out.scalar_type());
  TORCH_CHECK_VALUE(out.dim() == 4, "decode_batch: out must be [N, C, H, W], got shape ", out.sizes());
  TORCH_CHECK_VALUE(out.size(1) >= 1 && out.size(1) <= 4, "decode_batch: out must have 1 to 4 channels, got ",
                    out.size(1));
  TORCH_CHECK_VALUE(out.size(2) > 0 && out.size(3) > 0, "decode_batch: out images must not be empty, got shape ",
                    out.sizes());
  TORCH_CHECK_VALUE(out.is_contiguous() || out.is_contiguous(at::MemoryFormat::ChannelsLast),
                    "decode_batch: out must be contiguous or channels_last, got strides ", out.strides());
}

// A record table given as bytes: `count` records of T (count < 0: any number); returns them.
template <typename T>
const T* records(const at::Tensor& t, int64_t count, const char* name) {
  TORCH_CHECK_VALUE(t.scalar_type() == at::kByte && t.dim() == 1 && t.device().is_cpu() && t.is_contiguous() &&
                        t.numel() % (int64_t)sizeof(T) == 0 &&
                        (count < 0 || t.numel() == count * (int64_t)sizeof(T)),
                    "decode_batch: ", name, " must be a contiguous uint8 CPU tensor of ",
                    count < 0 ? std::string("whole") : std::to_string(count), " records of ", sizeof(T),
                    " bytes, got shape ", t.sizes(), " ", t.scalar_type());
  return reinterpret_cast<const T*>(t.data_ptr<uint8_t>());
}

// The output conversion of a float batch (ConvertSpec), checked, into `b`.
void set_conversion(Batch& b, const ConvertSpec& cs) {
  const int64_t kind = cs.kind;
  TORCH_CHECK_VALUE(kind >= kNoConvert && kind <= kDivToFloatNormalize, "decode_batch: unknown conversion ", kind);
  TORCH_CHECK_VALUE((kind == kNoConvert) == (b.dtype == at::kByte),
                    "decode_batch: a uint8 out takes no conversion and a float out one, got conversion ", kind,
                    " for ", b.dtype);
  // the pipeline's own float conversion (v2 ToDtype or v1 ConvertImageDtype), any channel count
  const bool v2_kind = kind == kToFloat || kind == kToFloatNormalize || kind == kDivToFloat ||
                       kind == kDivToFloatNormalize;
  const bool per_channel = v2_kind || kind == kDiv255 || kind == kAffine;  // any channel count
  TORCH_CHECK_VALUE(kind == kNoConvert || per_channel || b.C == 3,
                    "decode_batch: the YUV conversions take 3 channels, got ", b.C);
  const double* all = &cs.yuv[0][0];
  for (size_t k = 0; k < (sizeof(ConvertSpec) - sizeof(int64_t)) / sizeof(double); k++)
    TORCH_CHECK_VALUE(std::isfinite(all[k]), "decode_batch: the conversion's parameters must be finite");
  b.convert = kind;
  // write_float's row pass is written for 3 channels; other counts go through the planar image
  b.via_float = v2_kind || b.C != 3;
  for (int c = 0; c < 3; c++)
    for (int k = 0; k < 4; k++) b.coef[c][k] = (float)cs.yuv[c][k];
  for (int c = 0; c < 4; c++) {
    b.gain[c] = (float)cs.gain[c];
    b.bias[c] = (float)cs.bias[c];
    b.mean[c] = (float)cs.mean[c];
    b.std_[c] = (float)cs.std[c];
  }
  b.scale = (float)cs.scale;
}

// View v's batch description: the shared inputs in `shared`, its own output, fills and conversion.
Batch view_batch(const Batch& shared, const at::Tensor& out, int64_t v, int64_t V, const int64_t* fills,
                 const ConvertSpec& convert) {
  check_out(out);
  Batch b = shared;
  b.plans = shared.plans + v;
  b.plan_stride = V;
  b.C = out.size(1);
  b.H = out.size(2);
  b.W = out.size(3);
  b.dtype = out.scalar_type();
  b.out = static_cast<char*>(out.data_ptr());
  b.sn = out.stride(0);
  b.sc = out.stride(1);
  b.sh = out.stride(2);
  b.sw = out.stride(3);
  const int64_t DC = b.DC;
  for (int64_t c = 0; c < DC; c++) {
    const int64_t pad = fills[2 * v * DC + c], mask = fills[(2 * v + 1) * DC + c];
    TORCH_CHECK_VALUE(pad >= 0 && pad <= 255 && mask >= 0 && mask <= 255, "decode_batch: fills must be in [0, 255], "
                      "got ", pad, " and ", mask);
    b.pad[c] = (uint8_t)pad;
    b.mask_fill[c] = (uint8_t)mask;
  }
  set_conversion(b, convert);
  return b;
}

std::tuple<at::Tensor, at::Tensor> decode_batch(const std::vector<at::Tensor>& data, const at::Tensor& plans,
                                                const at::Tensor& steps, const std::vector<at::Tensor>& extras,
                                                const at::Tensor& fills, at::TensorList outs,
                                                int64_t decode_channels, int64_t mode, int64_t max_pixels, bool strict,
                                                int64_t max_scans, const at::Tensor& converts, int64_t num_threads) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  const int64_t V = (int64_t)outs.size();
  TORCH_CHECK_VALUE(V >= 1, "decode_batch: outs must hold one output per view, got none");
  const int64_t N = outs[0].dim() == 4 ? outs[0].size(0) : -1;
  for (const at::Tensor& o : outs)
    TORCH_CHECK_VALUE(o.dim() == 4 && o.size(0) == N, "decode_batch: every out must be [N, C, H, W] with the same N");
  TORCH_CHECK_VALUE((int64_t)data.size() == N, "decode_batch: ", data.size(), " data tensors for a batch of ", N);
  check_mode(mode);
  TORCH_CHECK_VALUE(max_pixels >= 0, "decode_batch: max_pixels must be >= 0 (0 = no limit), got ", max_pixels);
  check_max_scans(max_scans);
  TORCH_CHECK_VALUE(num_threads >= 1, "decode_batch: num_threads must be >= 1, got ", num_threads);
  TORCH_CHECK_VALUE(decode_channels >= 1 && decode_channels <= 4, "decode_batch: decode_channels must be 1 to 4, got ",
                    decode_channels);
  TORCH_CHECK_TYPE(fills.scalar_type() == at::kLong, "decode_batch: fills must be int64, got ", fills.scalar_type());
  TORCH_CHECK_VALUE(fills.device().is_cpu() && fills.is_contiguous() && fills.dim() == 2 &&
                        fills.size(0) == 2 * V && fills.size(1) == decode_channels,
                    "decode_batch: fills must be a contiguous CPU tensor [", 2 * V, ", ", decode_channels,
                    "] (padding and mask values of each view), got shape ", fills.sizes());

  Batch shared;
  shared.plans = records<SamplePlan>(plans, N * V, "plans");
  shared.steps = records<PixelStep>(steps, -1, "steps");
  shared.num_steps = steps.numel() / (int64_t)sizeof(PixelStep);
  for (int64_t k = 0; k < shared.num_steps; k++) check_pixel_step(shared.steps[k], "decode_batch");
  shared.extras = {extras.data(), (int64_t)extras.size()};
  shared.mode = mode;
  shared.max_pixels = max_pixels;
  shared.max_scans = max_scans;
  shared.strict = strict;
  shared.DC = decode_channels;
  shared.bytes.resize(N);
  shared.sizes.resize(N);
  for (int64_t i = 0; i < N; i++) {
    const at::Tensor& d = data[i];
    TORCH_CHECK_TYPE(d.scalar_type() == at::kByte, "decode_batch: data[", i, "] must be uint8, got ",
                     d.scalar_type());
    TORCH_CHECK_VALUE(d.dim() == 1 && d.device().is_cpu() && d.is_contiguous(), "decode_batch: data[", i,
                      "] must be a contiguous 1-D CPU tensor, got shape ", d.sizes(), " on ", d.device());
    shared.bytes[i] = d.data_ptr<uint8_t>();
    shared.sizes[i] = (size_t)d.numel();
  }
  const ConvertSpec* convert = records<ConvertSpec>(converts, V, "converts");
  std::vector<Batch> views;
  for (int64_t v = 0; v < V; v++) {
    views.push_back(view_batch(shared, outs[v], v, V, fills.data_ptr<int64_t>(), convert[v]));
    const Batch& b = views.back();
    for (int64_t i = 0; i < N; i++) {
      const SamplePlan& p = plan_of(b, i);
      check_plan(p, i, decode_channels, b.H, b.W, b.num_steps);
      TORCH_CHECK_VALUE(p.num_steps + p.num_float_steps > 0 || decode_channels == b.C, "decode_batch: plan ", i,
                        " has no steps, so the decoded channels (", decode_channels, ") must be the batch's (", b.C,
                        ")");
    }
  }

  std::vector<int8_t> codes((size_t)N, 0);
  std::vector<std::string> messages((size_t)N);
  std::atomic<int64_t> next{0};
  const std::function<void()> work = [&]() {
    thread_local Scratch s;
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= N) break;
      try {
        messages[i] = V == 1 ? run_sample(views[0], i, s) : run_views(views, i, s);
        codes[i] = messages[i].empty() ? 0 : 1;
      } catch (const c10::Error& e) {
        codes[i] = 2;
        messages[i] = decode_error_text(e.what_without_backtrace());
      } catch (const std::exception& e) {
        codes[i] = 2;
        messages[i] = decode_error_text(e.what());
      } catch (...) {
        codes[i] = 2;
        messages[i] = "unknown error";
      }
      // A sample that did not decode always says why, so an empty text means every sample
      // decoded cleanly (NativePipeline.run reads it so, without a look at each code).
      if (codes[i] == 2 && messages[i].empty()) messages[i] = "the decoder gave no reason";
      thread_warning().clear();
    }
    trim(s);
  };
  helper_pool().run(work, std::min<int64_t>(num_threads, N) - 1);

  return status_table(codes, messages);
}

}  // namespace

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("decode_batch", &decode_batch); }

}  // namespace fastprep
