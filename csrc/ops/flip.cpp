// v2.RandomHorizontalFlip and v2.RandomVerticalFlip: the kernels (torchvision's
// horizontal_flip_image / vertical_flip_image are Tensor.flip(-1) / flip(-2): pure data
// movement, so the fast kernel's bits equal the reference's by construction, and the proof
// checks it) and their draws (`torch.rand(1) >= p` skips).
#include <algorithm>
#include <cstring>

#include "isa.h"

#if FP_HAVE_AVX2_TARGET
#include <immintrin.h>
#endif
#include "ops/native_draw.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

void hflip_ref(const PixelStep&, Image& im, KernelScratch&) { im.assign(im.tensor().flip(-1)); }
void vflip_ref(const PixelStep&, Image& im, KernelScratch&) { im.assign(im.tensor().flip(-2)); }

template <typename T>
void reverse_rows_base(T* p, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; r++) std::reverse(p + r * width, p + (r + 1) * width);
}

#if FP_HAVE_AVX2_TARGET
// The 32 bytes of v in reverse order, as `sizeof(T)`-byte elements.
template <typename T>
FP_TARGET_AVX2 FP_ALWAYS_INLINE __m256i reversed32(__m256i v) {
  if constexpr (sizeof(T) == 1) {
    const __m256i in_lanes = _mm256_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,  //
                                              15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, in_lanes), 0x4E);
  } else {
    static_assert(sizeof(T) == 4, "bytes or 32-bit elements");
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  }
}

// Each row reversed in place: 32-byte blocks from both ends swapped and reversed. A middle of
// one to two blocks is finished by one more such swap of overlapping blocks: both are loaded
// before either is stored, and each store writes the reversed row's values wherever it lands.
// Bytes go on in 16-byte halves the same way; std::reverse takes what is left (under 16 bytes
// or 8 floats).
template <typename T>
FP_TARGET_AVX2 void reverse_rows_avx2(T* p, int64_t rows, int64_t width) {
  constexpr int64_t block = 32 / (int64_t)sizeof(T);
  for (int64_t r = 0; r < rows; r++) {
    T* row = p + r * width;
    int64_t a = 0, b = width;
    for (; b - a >= block; a += block, b -= block) {
      const __m256i left = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + a));
      const __m256i right = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b - block));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + a), reversed32<T>(right));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + b - block), reversed32<T>(left));
    }
    if constexpr (sizeof(T) == 1) {
      const __m128i reverse16 = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
      for (; b - a >= 16; a += 16, b -= 16) {
        const __m128i left = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + a));
        const __m128i right = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b - 16));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + a), _mm_shuffle_epi8(right, reverse16));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + b - 16), _mm_shuffle_epi8(left, reverse16));
      }
    }
    if (b > a) std::reverse(row + a, row + b);
  }
}
#endif

template <typename T>
void reverse_rows(T* p, int64_t rows, int64_t width) {
#if FP_HAVE_AVX2_TARGET
  if (isa_level() >= kIsaAvx2) return reverse_rows_avx2(p, rows, width);
#endif
  reverse_rows_base(p, rows, width);
}

void hflip_fast(const PixelStep&, Image& im, KernelScratch&) {
  const int64_t rows = im.channels * im.height;
  if (im.dtype == at::kByte)
    reverse_rows(im.u8(), rows, im.width);
  else
    reverse_rows(im.f32(), rows, im.width);
}

// Swaps two rows of n bytes.
FP_ALWAYS_INLINE void swap_span_body(uint8_t* __restrict x, uint8_t* __restrict y, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    const uint8_t t = x[k];
    x[k] = y[k];
    y[k] = t;
  }
}

FP_VARIANTS(swap_span, (uint8_t * x, uint8_t* y, int64_t n), (x, y, n))

void vflip_fast(const PixelStep&, Image& im, KernelScratch&) {
  const int64_t row = im.width * (im.dtype == at::kByte ? 1 : (int64_t)sizeof(float));
  uint8_t* base = static_cast<uint8_t*>(im.data);
  for (int64_t c = 0; c < im.channels; c++) {
    uint8_t* plane = base + c * im.height * row;
    for (int64_t a = 0, b = im.height - 1; a < b; a++, b--) swap_span(plane + a * row, plane + b * row, row);
  }
}

FP_REGISTER_PIXEL_KERNEL({"horizontal_flip", "", hflip_ref, hflip_fast, nullptr});
FP_REGISTER_PIXEL_KERNEL({"vertical_flip", "", vflip_ref, vflip_fast, nullptr});

// floats: p.
void draw_hflip(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("horizontal_flip");
  if (ctx.draws.rand() >= as_f32(ctx.floats(node)[0])) return;
  ctx.emit(kernel);
}

void draw_vflip(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("vertical_flip");
  if (ctx.draws.rand() >= as_f32(ctx.floats(node)[0])) return;
  ctx.emit(kernel);
}

FP_REGISTER_NODE_DRAW("RandomHorizontalFlip", draw_hflip);
FP_REGISTER_NODE_DRAW("RandomVerticalFlip", draw_vflip);

}  // namespace
}  // namespace fastprep
