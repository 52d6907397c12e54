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
#include <cmath>

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

// v2.GaussianBlur(kernel_size, sigma): sigma = torch.empty(1).uniform_(sigma_min, sigma_max),
// the same for both axes. ints: kernel_size (x, y); floats: sigma_min, sigma_max.
void draw_gaussian_blur(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("gaussian_blur");
  const int64_t* ks = ctx.ints(node);
  const double* range = ctx.floats(node);
  const double sigma = ctx.draws.uniform(range[0], range[1]);
  PixelStep& step = ctx.emit(kernel);
  step.i[0] = ks[0];
  step.i[1] = ks[1];
  step.f[0] = sigma;
  step.f[1] = sigma;
}

FP_REGISTER_NODE_DRAW("GaussianBlur", draw_gaussian_blur);

}  // namespace
}  // namespace fastprep
