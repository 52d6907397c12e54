// torchvision v2's gaussian_blur on uint8 images (functional/_misc.py, gaussian_blur_image) and
// the draw of v2.GaussianBlur.
//
// Reference only: the result is ATen's float32 conv2d with the dense 2-D kernel, rounded, and
// the rounding of a sum of float products near a half-integer depends on the order in which
// ATen's convolution (oneDNN's depthwise kernel, or im2col + GEMM) sums them, which no other
// kernel can be proved to reproduce. The steps are torchvision's: each 1-D kernel is
// softmax(-(linspace(-lim, lim, k) / sigma)**2) in float32 with lim = (k - 1) / (2 sqrt 2), the
// 2-D kernel their outer product, the image padded by reflection, convolved per channel,
// rounded (round_) and cast to uint8.
#include <algorithm>
#include <cmath>
#include <vector>

#include "isa.h"
#include "ops/native_draw.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

at::Tensor gaussian_kernel1d(int64_t kernel_size, double sigma) {  // _get_gaussian_kernel1d
  const double lim = (double)(kernel_size - 1) / (2.0 * std::sqrt(2.0));
  const at::Tensor x = at::linspace(-lim, lim, kernel_size, at::kFloat);
  return at::softmax(x.div(sigma).pow(2).neg(), 0);
}

void gaussian_blur_ref(const PixelStep& s, Image& im, KernelScratch&) {
  TORCH_CHECK_TYPE(im.dtype == at::kByte, "gaussian_blur: the native kernel takes uint8 images, got ", im.dtype);
  const int64_t kx = s.i[0], ky = s.i[1];
  const double sigma_x = s.f[0], sigma_y = s.f[1];
  TORCH_CHECK_VALUE(kx > 0 && ky > 0 && kx % 2 == 1 && ky % 2 == 1,
                    "gaussian_blur: kernel_size should have odd and positive integers, got [", kx, ", ", ky, "]");
  TORCH_CHECK_VALUE(sigma_x > 0.0 && sigma_y > 0.0, "gaussian_blur: sigma should have positive values, got [",
                    sigma_x, ", ", sigma_y, "]");
  if (im.numel() == 0) return;
  const at::Tensor kernel1d_x = gaussian_kernel1d(kx, sigma_x);
  const at::Tensor kernel1d_y = gaussian_kernel1d(ky, sigma_y);
  const at::Tensor kernel2d = kernel1d_y.unsqueeze(-1) * kernel1d_x;
  const at::Tensor kernel = kernel2d.expand({im.channels, 1, ky, kx});
  at::Tensor output = im.tensor().unsqueeze(0).to(at::kFloat);
  output = at::pad(output, {kx / 2, kx / 2, ky / 2, ky / 2}, "reflect");
  const int64_t one[2] = {1, 1}, zero[2] = {0, 0};  // stride, padding, dilation: conv2d's defaults
  output = at::conv2d(output, kernel, {}, one, zero, one, im.channels);
  output = output.squeeze(0);
  im.assign(output.round_().to(at::kByte));
}

FP_REGISTER_PIXEL_KERNEL({"gaussian_blur", "i0=kernel_size_x i1=kernel_size_y f0=sigma_x f1=sigma_y",
                          gaussian_blur_ref, nullptr, nullptr});

// ------------------------------------------------------------------------------------
// fastprep's fast mode (fastprep.transforms.SeparableGaussianBlur): the same Gaussian -- the
// same float32 1-D weights, reflection padding, rounding to nearest even -- applied as two 1-D
// passes (rows, then columns) in float32, kx + ky multiply-adds a pixel instead of kx * ky. Its
// own arithmetic, not torchvision's (the summation differs; docs/multiview.md gives the largest
// difference measured against v2.GaussianBlur); both engines run this kernel, so they agree.

// Index i of a row of n pixels, reflected at the edges as torch's "reflect" padding does (the
// edge pixel itself is not repeated); repeated for pads wider than the image.
inline int64_t reflect(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i %= period;
  if (i < 0) i += period;
  return i < n ? i : period - i;
}

FP_ALWAYS_INLINE void taps_span_body(const float* __restrict in, const float* __restrict w, int64_t taps, int64_t n,
                                     int64_t step, float* __restrict out) {
  for (int64_t x = 0; x < n; x++) out[x] = 0.0f;
  for (int64_t j = 0; j < taps; j++) {
    const float wj = w[j];
    const float* src = in + j * step;
    for (int64_t x = 0; x < n; x++) out[x] = out[x] + wj * src[x];
  }
}

FP_ALWAYS_INLINE void to_u8_span_body(const float* __restrict in, int64_t n, uint8_t* __restrict out) {
  for (int64_t x = 0; x < n; x++) out[x] = (uint8_t)(int32_t)std::min(std::max(std::nearbyint(in[x]), 0.0f), 255.0f);
}

FP_VARIANTS(taps_span, (const float* in, const float* w, int64_t taps, int64_t n, int64_t step, float* out),
            (in, w, taps, n, step, out))
FP_VARIANTS(to_u8_span, (const float* in, int64_t n, uint8_t* out), (in, n, out))

void gaussian_blur_separable(const PixelStep& s, Image& im, KernelScratch& scratch) {
  TORCH_CHECK_TYPE(im.dtype == at::kByte, "gaussian_blur_separable takes uint8 images, got ", im.dtype);
  const int64_t kx = s.i[0], ky = s.i[1];
  TORCH_CHECK_VALUE(kx > 0 && ky > 0 && kx % 2 == 1 && ky % 2 == 1,
                    "gaussian_blur_separable: kernel_size should have odd and positive integers, got [", kx, ", ", ky,
                    "]");
  TORCH_CHECK_VALUE(s.f[0] > 0.0 && s.f[1] > 0.0, "gaussian_blur_separable: sigma should have positive values, got [",
                    s.f[0], ", ", s.f[1], "]");
  if (im.numel() == 0) return;
  const at::Tensor wx_t = gaussian_kernel1d(kx, s.f[0]), wy_t = gaussian_kernel1d(ky, s.f[1]);
  const float* wx = wx_t.data_ptr<float>();
  const float* wy = wy_t.data_ptr<float>();
  const int64_t H = im.height, W = im.width, rx = kx / 2, ry = ky / 2;
  float* padded = grown(scratch.f32[0], (size_t)(W + 2 * rx));
  float* rows = grown(scratch.f32[1], (size_t)((H + 2 * ry) * W));  // the row pass, rows reflected
  float* out = grown(scratch.f32[2], (size_t)W);
  uint8_t* p = im.u8();
  for (int64_t c = 0; c < im.channels; c++) {
    uint8_t* plane = p + c * H * W;
    for (int64_t y = 0; y < H; y++) {
      const uint8_t* row = plane + y * W;
      for (int64_t x = 0; x < W + 2 * rx; x++) padded[x] = (float)row[reflect(x - rx, W)];
      taps_span(padded, wx, kx, W, 1, rows + (y + ry) * W);
    }
    for (int64_t y = 0; y < ry; y++) {  // reflected rows above and below
      std::copy_n(rows + (reflect(y - ry, H) + ry) * W, W, rows + y * W);
      std::copy_n(rows + (reflect(H + y, H) + ry) * W, W, rows + (H + ry + y) * W);
    }
    for (int64_t y = 0; y < H; y++) {
      taps_span(rows + y * W, wy, ky, W, W, out);
      to_u8_span(out, W, plane + y * W);
    }
  }
}

FP_REGISTER_PIXEL_KERNEL({"gaussian_blur_separable", "i0=kernel_size_x i1=kernel_size_y f0=sigma_x f1=sigma_y",
                          gaussian_blur_separable, nullptr, nullptr});

// v2.GaussianBlur(kernel_size, sigma): sigma = torch.empty(1).uniform_(sigma_min, sigma_max),
// the same for both axes; a step of `kernel`. ints: kernel_size (x, y); floats: sigma_min, sigma_max.
void emit_blur(const NodeSpec& node, DrawContext& ctx, int64_t kernel) {
  const int64_t* ks = ctx.ints(node);
  const double* range = ctx.floats(node);
  const double sigma = ctx.draws.uniform(range[0], range[1]);
  PixelStep& step = ctx.emit(kernel);
  step.i[0] = ks[0];
  step.i[1] = ks[1];
  step.f[0] = sigma;
  step.f[1] = sigma;
}

void draw_gaussian_blur(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("gaussian_blur");
  emit_blur(node, ctx, kernel);
}

FP_REGISTER_NODE_DRAW("GaussianBlur", draw_gaussian_blur);

// fastprep.transforms.SeparableGaussianBlur: v2.GaussianBlur's draw, the separable kernel.
void draw_separable_gaussian_blur(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("gaussian_blur_separable");
  emit_blur(node, ctx, kernel);
}

FP_REGISTER_NODE_DRAW("SeparableGaussianBlur", draw_separable_gaussian_blur);

}  // namespace
}  // namespace fastprep
