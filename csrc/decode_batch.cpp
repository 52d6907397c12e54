// torch.ops.fastprep.decode_batch: the per-sample work of the built-in decode pipelines
// for a whole batch in one call, on a pool of native threads, each sample written straight
// into its slot of a preallocated batch.
//
// Per sample i (plan row i, written by fastprep/data/native.py from the transforms' own
// geometry): read the header; decode a window at a DCT scale (decode_roi_into: the
// restart-interval path on packed files, else libjpeg); optionally resize it with
// resize_aa's kernel (a window of a virtual full-image grid, hflip fused); place the result
// on the sample's canvas, the rest of which is padding; optionally apply RandomMask's
// random, cross-dilated mask (the same bits as fastprep/_kernels/_mask.py for the same
// seed); write out[i]: uint8, or float with the batch conversion of
// fastprep.data.BatchConvert fused into the write (same float32 operations in the same
// order, so the same bits).
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

#include "decode_jpeg_roi.h"
#if defined(__linux__)
#include <pthread.h>
#endif

#include "decode_batch.h"
#include "jpeg_ops.h"
#include "resize_aa.h"

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


// Conversion fused into the write of a float batch (fastprep/data/native.py picks it; the
// params rows are per output channel: m0, m1, m2, offset, gain, bias).
enum Convert : int64_t {
  kNoConvert = 0,     // uint8 out
  kDiv255 = 1,        // x / 255
  kAffine = 2,        // x * gain + bias (two roundings)
  kYuv = 3,           // ((m0 r + m1 g) + m2 b) + offset (each step rounded)
  kYuvAffine = 4,     // kYuv, then * gain + bias (two roundings)
  kYuvAffineFma = 5,  // kYuv, then fma(., gain, bias) (one rounding)
};
constexpr int64_t kParamColumns = 6;
constexpr int64_t kMaskPrecisionBits = 16;

struct Batch {
  std::vector<const uint8_t*> bytes;
  std::vector<size_t> sizes;
  const int64_t* plans = nullptr;
  const double* scales = nullptr;
  int64_t mode = 0, max_pixels = 0, max_scans = 0;
  bool strict = false;
  int64_t C = 0, H = 0, W = 0;
  at::ScalarType dtype = at::kByte;
  char* out = nullptr;
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;  // out strides, in elements
  uint8_t pad[4] = {0, 0, 0, 0};
  uint8_t mask_fill[4] = {0, 0, 0, 0};
  int64_t convert = kNoConvert;
  float coef[3][4] = {};
  float gain[3] = {}, bias[3] = {};
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
  std::vector<float> rows;
  std::vector<uint16_t> half_rows;
};

template <typename T>
T* grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

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
    for (int64_t c = 0; c < b.C; c++) blend_row(cv.p + c * cv.cs + y * cv.ys, cv.xs, mask, W, b.mask_fill[c]);
  }
}

// ------------------------------------------------------------------------------------
// Canvas assembly.

void fill_canvas(const Canvas& cv, const Batch& b) {
  for (int64_t c = 0; c < b.C; c++)
    for (int64_t y = 0; y < b.H; y++) {
      uint8_t* p = cv.p + c * cv.cs + y * cv.ys;
      if (cv.xs == 1) {
        std::memset(p, b.pad[c], (size_t)b.W);
      } else {
        for (int64_t x = 0; x < b.W; x++) p[x * cv.xs] = b.pad[c];
      }
    }
}

// Interleaved 3-channel pixels to three planes, x < n.
FP_VECTOR_CLONES void deinterleave3_row(const uint8_t* __restrict src, int64_t n, uint8_t* __restrict a,
                                        uint8_t* __restrict b, uint8_t* __restrict c) {
  for (int64_t x = 0; x < n; x++) {
    a[x] = src[3 * x];
    b[x] = src[3 * x + 1];
    c[x] = src[3 * x + 2];
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
      deinterleave3_row(src + y * w * 3, w, d, d + cv.cs, d + 2 * cv.cs);
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

// The AVX2 variants run where the CPU has the instructions and fastprep._kernels.isa (the
// one ISA switch: FASTPREP_ISA, set_isa) has not chosen the baseline; resize_aa keeps the
// switch's level, so it is read from there at every call.
bool isa_allows_avx2() { return resize_aa_isa(-1) >= 1; }

bool cpu_has_avx2_fma() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes && isa_allows_avx2();
}
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

bool cpu_has_avx2_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return yes && isa_allows_avx2();
}
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
}

// ------------------------------------------------------------------------------------
// One sample.

// Decodes, resizes, places, masks and writes sample i. Returns its libjpeg warning ("" for
// none); raises (c10::Error) on errors.
std::string run_sample(const Batch& b, int64_t i, Scratch& s) {
  const int64_t* p = b.plans + i * kPlanColumns;
  const double* f = b.scales + i * kScaleColumns;
  const int64_t C = b.C, H = b.H, W = b.W;
  thread_warning().clear();
  Decoder dec(b.strict);
  const fp_info info = read_header(dec, b.bytes[i], b.sizes[i]);
  const int64_t num = p[kNum], dh = p[kDecH], dw = p[kDecW];
  check_window_fits(info, p[kDecTop], p[kDecLeft], dh, dw, num);
  const int channels = decodable_channels(info, b.mode, b.max_pixels);
  TORCH_CHECK_VALUE(channels == C, "the image decodes to ", channels, " channels in this mode; the batch has ",
                    C);

  const bool u8 = b.dtype == at::kByte;
  Canvas cv = u8 ? Canvas{reinterpret_cast<uint8_t*>(b.out) + i * b.sn, b.sc, b.sh, b.sw}
                 : Canvas{grown(s.canvas, (size_t)(C * H * W)), H * W, W, 1};
  const bool placed = p[kPlaced] != 0;
  const int64_t rh = p[kRegionH], rw = p[kRegionW], top = p[kPlaceTop], left = p[kPlaceLeft];
  const bool covers = placed && top == 0 && left == 0 && rh == H && rw == W;
  const bool planar_dense = cv.xs == 1 && cv.ys == W && cv.cs == H * W;
  const bool interleaved_dense = cv.cs == 1 && cv.xs == C && cv.ys == W * C;
  if (!covers) fill_canvas(cv, b);

  auto decode = [&](bool channels_last, uint8_t* dst) {
    decode_roi_into(dec, info, b.bytes[i], b.sizes[i], b.mode, p[kDecTop], p[kDecLeft], dh, dw, b.max_pixels, num,
                    b.max_scans, channels_last, [dst]() { return dst; });
  };
  // slack after each buffer: the resize kernels may read a few bytes past a row
  constexpr size_t kSlack = 32;
  if (!placed) {
    decode(false, grown(s.decoded, (size_t)(C * dh * dw) + kSlack));
  } else if (!p[kResize]) {
    if (covers && (planar_dense || interleaved_dense)) {
      decode(interleaved_dense, cv.p);
    } else {
      const bool interleaved = cv.cs == 1;
      uint8_t* d = grown(s.decoded, (size_t)(C * dh * dw) + kSlack);
      decode(interleaved, d);
      place_region(C, d, interleaved, dh, dw, cv, top, left);
    }
  } else {
    const size_t in_bytes = (size_t)(C * dh * dw) + kSlack;
    uint8_t* d = grown(s.decoded, in_bytes);
    decode(true, d);
    const bool direct = covers && interleaved_dense;
    uint8_t* r = direct ? cv.p : grown(s.region, (size_t)(C * rh * rw) + kSlack);
    resize_aa_into(d, C, dh, dw, dw * C, (int64_t)in_bytes, p[kFullOutH], p[kFullOutW], p[kOutTop], p[kOutLeft], rh,
                   rw, p[kFullInH], p[kFullInW], p[kInTop], p[kInLeft], f[kScaleH], f[kScaleW], p[kAntialias] != 0,
                   p[kHflip] != 0, r);
    if (!direct) place_region(C, r, true, rh, rw, cv, top, left);
  }
  std::string warning = std::move(thread_warning());
  thread_warning().clear();

  if (p[kMask]) apply_mask(cv, b, (uint64_t)p[kMaskSeed], p[kMaskM], s);
  if (!u8) write_float(b, i, cv.p, s);
  return warning;
}

// ------------------------------------------------------------------------------------
// Argument checks (on the calling thread, before any work).

void check_plan_row(const int64_t* p, const double* f, int64_t i, int64_t C, int64_t H, int64_t W) {
  auto flag = [&](int64_t col, const char* name) {
    TORCH_CHECK_VALUE(p[col] == 0 || p[col] == 1, "decode_batch: plan ", i, ": ", name, " must be 0 or 1, got ",
                      p[col]);
  };
  flag(kResize, "resize");
  flag(kAntialias, "antialias");
  flag(kHflip, "hflip");
  flag(kPlaced, "placed");
  flag(kMask, "mask");
  TORCH_CHECK_VALUE(p[kNum] >= 1 && p[kNum] <= 8, "decode_batch: plan ", i, ": the DCT scale must be in [1, 8], got ",
                    p[kNum]);
  TORCH_CHECK_VALUE(p[kDecTop] >= 0 && p[kDecLeft] >= 0 && p[kDecH] > 0 && p[kDecW] > 0, "decode_batch: plan ", i,
                    ": bad decode window (top=", p[kDecTop], ", left=", p[kDecLeft], ", height=", p[kDecH],
                    ", width=", p[kDecW], ")");
  if (!p[kPlaced]) return;
  const int64_t rh = p[kRegionH], rw = p[kRegionW];
  if (p[kResize]) {
    check_resize_args(C, p[kDecH], p[kDecW], p[kFullOutH], p[kFullOutW], p[kOutTop], p[kOutLeft], rh, rw,
                      p[kFullInH], p[kFullInW], p[kInTop], p[kInLeft], f[kScaleH], f[kScaleW]);
  } else {
    TORCH_CHECK_VALUE(rh == p[kDecH] && rw == p[kDecW], "decode_batch: plan ", i, ": without a resize the region (",
                      rh, "x", rw, ") must be the decoded window (", p[kDecH], "x", p[kDecW], ")");
  }
  TORCH_CHECK_VALUE(p[kPlaceTop] >= 0 && p[kPlaceLeft] >= 0 && rh <= H - p[kPlaceTop] && rw <= W - p[kPlaceLeft],
                    "decode_batch: plan ", i, ": the ", rh, "x", rw, " region at (", p[kPlaceTop], ", ",
                    p[kPlaceLeft], ") does not fit in the ", H, "x", W, " output");
  TORCH_CHECK_VALUE(p[kMaskM] >= 0, "decode_batch: plan ", i, ": the mask numerator must be >= 0, got ", p[kMaskM]);
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

std::tuple<at::Tensor, at::Tensor> decode_batch(const std::vector<at::Tensor>& data, const at::Tensor& plans,
                                                const at::Tensor& scales, const at::Tensor& fills,
                                                const at::Tensor& out, int64_t mode, int64_t max_pixels, bool strict,
                                                int64_t max_scans, int64_t convert, const at::Tensor& params,
                                                int64_t num_threads) {
  check_out(out);
  const int64_t N = out.size(0), C = out.size(1), H = out.size(2), W = out.size(3);
  TORCH_CHECK_VALUE((int64_t)data.size() == N, "decode_batch: ", data.size(), " data tensors for a batch of ", N);
  check_mode(mode);
  TORCH_CHECK_VALUE(max_pixels >= 0, "decode_batch: max_pixels must be >= 0 (0 = no limit), got ", max_pixels);
  check_max_scans(max_scans);
  TORCH_CHECK_VALUE(num_threads >= 1, "decode_batch: num_threads must be >= 1, got ", num_threads);
  auto check_table = [](const at::Tensor& t, at::ScalarType dtype, int64_t rows, int64_t cols, const char* name) {
    TORCH_CHECK_TYPE(t.scalar_type() == dtype, "decode_batch: ", name, " must be ", dtype, ", got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.device().is_cpu() && t.is_contiguous() && t.dim() == 2 && t.size(0) == rows &&
                          t.size(1) == cols,
                      "decode_batch: ", name, " must be a contiguous CPU tensor [", rows, ", ", cols, "], got shape ",
                      t.sizes(), " strides ", t.strides());
  };
  check_table(plans, at::kLong, N, kPlanColumns, "plans");
  check_table(scales, at::kDouble, N, kScaleColumns, "scales");
  check_table(fills, at::kLong, 2, C, "fills");
  check_table(params, at::kDouble, 3, kParamColumns, "params");

  Batch b;
  b.plans = plans.data_ptr<int64_t>();
  b.scales = scales.data_ptr<double>();
  b.mode = mode;
  b.max_pixels = max_pixels;
  b.max_scans = max_scans;
  b.strict = strict;
  b.C = C;
  b.H = H;
  b.W = W;
  b.dtype = out.scalar_type();
  b.out = static_cast<char*>(out.data_ptr());
  b.sn = out.stride(0);
  b.sc = out.stride(1);
  b.sh = out.stride(2);
  b.sw = out.stride(3);
  const int64_t* fv = fills.data_ptr<int64_t>();
  for (int64_t c = 0; c < C; c++) {
    TORCH_CHECK_VALUE(fv[c] >= 0 && fv[c] <= 255 && fv[C + c] >= 0 && fv[C + c] <= 255,
                      "decode_batch: fills must be in [0, 255], got ", fills);
    b.pad[c] = (uint8_t)fv[c];
    b.mask_fill[c] = (uint8_t)fv[C + c];
  }
  TORCH_CHECK_VALUE(convert >= kNoConvert && convert <= kYuvAffineFma, "decode_batch: unknown convert ", convert);
  TORCH_CHECK_VALUE((convert == kNoConvert) == (b.dtype == at::kByte),
                    "decode_batch: a uint8 out takes convert=0 and a float out a conversion, got convert=", convert,
                    " for ", b.dtype);
  TORCH_CHECK_VALUE(convert == kNoConvert || C == 3, "decode_batch: the float conversions take 3 channels, got ", C);
  const double* pv = params.data_ptr<double>();
  for (int64_t k = 0; k < 3 * kParamColumns; k++)
    TORCH_CHECK_VALUE(std::isfinite(pv[k]), "decode_batch: params must be finite, got ", params);
  b.convert = convert;
  for (int c = 0; c < 3; c++) {
    for (int k = 0; k < 4; k++) b.coef[c][k] = (float)pv[c * kParamColumns + k];
    b.gain[c] = (float)pv[c * kParamColumns + 4];
    b.bias[c] = (float)pv[c * kParamColumns + 5];
  }
  b.bytes.resize(N);
  b.sizes.resize(N);
  for (int64_t i = 0; i < N; i++) {
    const at::Tensor& d = data[i];
    TORCH_CHECK_TYPE(d.scalar_type() == at::kByte, "decode_batch: data[", i, "] must be uint8, got ",
                     d.scalar_type());
    TORCH_CHECK_VALUE(d.dim() == 1 && d.device().is_cpu() && d.is_contiguous(), "decode_batch: data[", i,
                      "] must be a contiguous 1-D CPU tensor, got shape ", d.sizes(), " on ", d.device());
    b.bytes[i] = d.data_ptr<uint8_t>();
    b.sizes[i] = (size_t)d.numel();
    check_plan_row(b.plans + i * kPlanColumns, b.scales + i * kScaleColumns, i, C, H, W);
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
        messages[i] = run_sample(b, i, s);
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
