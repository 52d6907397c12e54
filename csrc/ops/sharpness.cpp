// torchvision v2's adjust_sharpness on uint8 images (functional/_color.py,
// adjust_sharpness_image) and the draw of v2.RandomAdjustSharpness.
//
// The reference is torchvision's code in ATen: a depthwise conv2d of the float32 image with the
// 3x3 kernel (a a a / a b a / a a a), a = f32(1/13), b = f32(5/13), round_, then on the interior
// `view.add_(blurred.sub_(view), alpha=1 - factor)`, clamp_(0, 255), truncation to uint8 (the
// one-pixel border keeps its values).
//
// The fast kernel computes the rounded convolution from integers, which gives the same value
// whatever order ATen's convolution sums in. With k = (sum of the 8 neighbours) + 5 * centre
// (an integer <= 3315), the exact value of the convolution with weights 1/13 and 5/13 is k / 13.
// k / 13 is never a half-integer (13 (2m + 1) is odd, 2k even) and is at least 1/26 from one;
// the float32 convolution differs from k / 13 by the rounding of its weights (< 2**-24 relative)
// and of its nine products and eight sums (each < 2**-24 times a magnitude <= 255), in all
// < 3e-4, whatever the order or blocking of the sums. So round_() of ATen's float32 result is
// the integer nearest to k / 13, which the fast kernel computes as floor(k * f32(1/13) + 0.5)
// (the weight's rounding and the product's and the sum's move it by < 1e-4). The blend is then
// ATen's float32 arithmetic: fma(blurred - v, f32(1 - factor), v) (add_ with alpha is a fused
// multiply-add), clamped, truncated.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa.h"
#include "ops/native_draw.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

void check_sharpness_input(const Image& im) {
  TORCH_CHECK_TYPE(im.dtype == at::kByte, "adjust_sharpness: the native kernel takes uint8 images, got ", im.dtype);
  TORCH_CHECK_TYPE(im.channels == 1 || im.channels == 3,
                   "adjust_sharpness: input image tensor can have 1 or 3 channels, but found ", im.channels);
}

bool sharpness_is_identity(const Image& im) { return im.numel() == 0 || im.height <= 2 || im.width <= 2; }

void sharpness_ref(const PixelStep& s, Image& im, KernelScratch&) {
  check_sharpness_input(im);
  if (sharpness_is_identity(im)) return;
  const double factor = s.f[0];
  const double a = 1.0 / 13.0, b = 5.0 / 13.0;
  const at::Tensor kernel =
      at::tensor({a, a, a, a, b, a, a, a, a}, at::kFloat).view({3, 3}).expand({im.channels, 1, 3, 3});
  at::Tensor output = im.tensor().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  const int64_t one[2] = {1, 1}, zero[2] = {0, 0};  // stride, padding, dilation: conv2d's defaults
  at::Tensor blurred = at::conv2d(output, kernel, {}, one, zero, one, im.channels);
  blurred.round_();
  using at::indexing::Slice;
  at::Tensor view = output.index({"...", Slice(1, -1), Slice(1, -1)});
  view.add_(blurred.sub_(view), 1.0 - factor);
  output.clamp_(0, 255);
  im.assign(output.to(at::kByte));
}

// One interior row: `above`, `row`, `below` are the original rows (width n + 2), `out` the
// row's pixels 1..n written in place.
FP_ALWAYS_INLINE void sharpness_row_span_body(const uint8_t* __restrict above, const uint8_t* __restrict row,
                                              const uint8_t* __restrict below, uint8_t* __restrict out, int64_t n,
                                              float alpha) {
  for (int64_t x = 0; x < n; x++) {
    const uint16_t k = (uint16_t)(above[x] + above[x + 1] + above[x + 2] + row[x] + 5 * row[x + 1] + row[x + 2] +
                                  below[x] + below[x + 1] + below[x + 2]);
    const float blurred = std::floor((float)k * (1.0f / 13.0f) + 0.5f);  // round(k / 13), see the top
    const float centre = (float)row[x + 1];
    const float v = std::fma(blurred - centre, alpha, centre);
    out[x] = (uint8_t)(int32_t)std::min(std::max(v, 0.0f), 255.0f);
  }
}

FP_VARIANTS(sharpness_row_span,
            (const uint8_t* above, const uint8_t* row, const uint8_t* below, uint8_t* out, int64_t n, float alpha),
            (above, row, below, out, n, alpha))

void sharpness_fast(const PixelStep& s, Image& im, KernelScratch& scratch) {
  check_sharpness_input(im);
  if (sharpness_is_identity(im)) return;
  const float alpha = (float)(1.0 - s.f[0]);
  const int64_t h = im.height, w = im.width, plane = im.plane();
  uint8_t* original = grown(scratch.u8, (size_t)plane);
  for (int64_t c = 0; c < im.channels; c++) {
    uint8_t* p = im.u8() + c * plane;
    std::memcpy(original, p, (size_t)plane);
    for (int64_t y = 1; y < h - 1; y++)
      sharpness_row_span(original + (y - 1) * w, original + y * w, original + (y + 1) * w, p + y * w + 1, w - 2,
                         alpha);
  }
}

// Factors as the transforms give them: RandomAdjustSharpness's (any >= 0), the auto-augments'
// 1 +- magnitude (float32 table values widened to double), and values whose blend hits the
// clamps and ties.
std::vector<PixelStep> sharpness_probes() {
  std::vector<PixelStep> out;
  for (double v : {0.0, 1.0, 2.0, 0.5, 1.899999976158142, 0.10000002384185791, 1.99000000953674316, 0.01, 1.3, 7.25,
                   100.0, 1.0 + 0.8999999761581421, 1.0 - 0.30000001192092896}) {
    PixelStep s;
    s.f[0] = v;
    out.push_back(s);
  }
  return out;
}

FP_REGISTER_PIXEL_KERNEL({"adjust_sharpness", "f0=sharpness_factor", sharpness_ref, sharpness_fast,
                          sharpness_probes});

// v2.RandomAdjustSharpness(sharpness_factor, p): `torch.rand(1) >= p` skips. floats: p, factor.
void draw_random_adjust_sharpness(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("adjust_sharpness");
  const double* f = ctx.floats(node);
  if (ctx.draws.rand() >= as_f32(f[0])) return;
  ctx.emit(kernel).f[0] = f[1];
}

FP_REGISTER_NODE_DRAW("RandomAdjustSharpness", draw_random_adjust_sharpness);

}  // namespace
}  // namespace fastprep
