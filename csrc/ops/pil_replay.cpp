// pil_replay_views: the views of one sample of a traced PIL pipeline (fastprep/data/traced.py) in
// one call, the GIL released throughout; per view, Pillow's resize of its crop read straight
// from the decoded window (no copy of the crop), its PIL-twin pixel steps in place on one
// planar buffer, and ToTensor (+ Normalize) written into its row of the batch.
//
// The write is torchvision's arithmetic in float32, each operation rounded as torch rounds it:
// ToTensor's `x.to(float32).div(255)` or v2 ToDtype(float32, scale=True)'s
// `x.to(float32).mul_(1 / 255)` (a product with the float32 of 1 / 255), then Normalize's
// `sub_(mean).div_(std)` (the extension is built with -ffp-contract=off, so nothing is fused).
//
// Also the PIL twin of Image.point(lut) on 8-bit images ("pil_point": the table, 256 entries
// per band, is the step's extra tensor).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "exit_gate.h"
#include "isa.h"
#include "jpeg/jpeg_decoder.h"
#include "ops/pil_resample.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

// Image.point(lut) of an 8-bit image: band c maps v to lut[256 c + v] (extra: uint8 [256 C]).
void pil_point(const PixelStep& s, Image& im, KernelScratch& scratch) {
  TORCH_CHECK_VALUE(im.dtype == at::kByte, "pil_point runs on uint8 images, got ", im.dtype);
  TORCH_CHECK_VALUE(s.extra >= 0 && s.extra < scratch.extras.count, "pil_point: the step's table (extra ", s.extra,
                    ") is missing");
  const at::Tensor& lut = scratch.extras.tensors[s.extra];
  TORCH_CHECK_VALUE(lut.scalar_type() == at::kByte && lut.dim() == 1 && lut.is_contiguous() &&
                        lut.numel() == 256 * im.channels,
                    "pil_point: the table must be a contiguous uint8 tensor of 256 entries per band (",
                    256 * im.channels, "), got ", lut.sizes(), " ", lut.scalar_type());
  const int64_t n = im.plane();
  for (int64_t c = 0; c < im.channels; c++) lut_span(im.u8() + c * n, n, lut.data_ptr<uint8_t>() + 256 * c);
}

// How the float write scales: not (x), ToTensor's x / 255, or v2 ToDtype's x * f32(1 / 255).
enum WriteScale : int64_t { kUnscaled = 0, kDivide = 1, kMultiply = 2 };

// One plane of n values scaled as `scale` says, then Normalized when `normalize`.
FP_ALWAYS_INLINE void write_plane_body(const uint8_t* __restrict in, int64_t n, float* __restrict out, int64_t scale,
                                       bool normalize, float mean, float std) {
  const float product = (float)(1.0 / 255.0);
  if (scale == kUnscaled) {
    for (int64_t k = 0; k < n; k++) out[k] = (float)in[k];
  } else if (scale == kDivide && !normalize) {
    for (int64_t k = 0; k < n; k++) out[k] = (float)in[k] / 255.0f;
  } else if (scale == kDivide) {
    for (int64_t k = 0; k < n; k++) out[k] = ((float)in[k] / 255.0f - mean) / std;
  } else if (!normalize) {
    for (int64_t k = 0; k < n; k++) out[k] = (float)in[k] * product;
  } else {
    for (int64_t k = 0; k < n; k++) out[k] = ((float)in[k] * product - mean) / std;
  }
}
FP_VARIANTS(write_plane, (const uint8_t* __restrict in, int64_t n, float* __restrict out, int64_t scale,
                          bool normalize, float mean, float std),
            (in, n, out, scale, normalize, mean, std))

struct ReplayScratch {
  std::vector<uint8_t> planar, interleaved;
  KernelScratch kernels;
};

ReplayScratch& replay_scratch() {
  static thread_local ReplayScratch scratch;
  return scratch;
}

void check_replay_args(const at::Tensor& image, at::IntArrayRef resize, const at::Tensor& steps, const at::Tensor& out,
                       int64_t scale, at::ArrayRef<double> mean, at::ArrayRef<double> std) {
  TORCH_CHECK_VALUE(scale >= kUnscaled && scale <= kMultiply, "pil_replay_views: scale must be 0, 1 or 2, got ", scale);
  TORCH_CHECK_VALUE(image.device().is_cpu() && image.scalar_type() == at::kByte && image.dim() == 3,
                    "pil_replay_views: image must be a uint8 [C, H, W] CPU tensor, got ", image.scalar_type(), " ",
                    image.sizes());
  TORCH_CHECK_VALUE(image.size(0) >= 1 && image.size(0) <= 4, "pil_replay_views: image must have 1 to 4 channels, got ",
                    image.size(0));
  TORCH_CHECK_VALUE(resize.empty() || resize.size() == 4,
                    "pil_replay_views: resize must be [] or [height, width, filter, hflip], got ", resize.size(),
                    " numbers");
  TORCH_CHECK_VALUE(steps.scalar_type() == at::kByte && steps.dim() == 1 && steps.is_contiguous() &&
                        steps.numel() % (int64_t)sizeof(PixelStep) == 0,
                    "pil_replay_views: steps must be a contiguous uint8 tensor of PixelStep records");
  TORCH_CHECK_VALUE(out.device().is_cpu() && out.dim() == 3 && out.is_contiguous() &&
                        (out.scalar_type() == at::kFloat || out.scalar_type() == at::kByte),
                    "pil_replay_views: out must be a contiguous float32 or uint8 [C, H, W] CPU tensor, got ",
                    out.scalar_type(), " ", out.sizes());
  TORCH_CHECK_VALUE(mean.size() == std.size() && mean.size() <= 4,
                    "pil_replay_views: mean and std must have the same length (0, 1 or C), got ", mean.size(), " and ",
                    std.size());
}

// One view: `image` (uint8 [C, H, W],
// any strides: a crop of the decoded window) resized by Pillow's filter when `resize` =
// [height, width, filter, hflip] (PilFilter; hflip: mirrored, the FLIP_LEFT_RIGHT that follows),
// then `steps` (PixelStep records) in place, then written to `out`: uint8 as is, or float32
// scaled as `scale` (WriteScale) says and, with `mean`/`std` (1 or C values), Normalized.
void replay_view(const at::Tensor& image, at::IntArrayRef resize, const at::Tensor& steps,
                 const std::vector<at::Tensor>& extras, const at::Tensor& out, int64_t scale,
                 at::ArrayRef<double> mean, at::ArrayRef<double> std) {
  check_replay_args(image, resize, steps, out, scale, mean, std);
  const int64_t C = image.size(0), H = image.size(1), W = image.size(2);
  const int64_t OH = resize.empty() ? H : resize[0], OW = resize.empty() ? W : resize[1];
  ReplayScratch& scratch = replay_scratch();
  const int64_t P = OH * OW;
  uint8_t* planar = grown(scratch.planar, (size_t)std::max<int64_t>(C * P, 1));
  if (!resize.empty()) {
    check_pil_resample_args(C, H, W, OH, OW, 0, 0, OH, OW, H, W, 0, 0, resize[2]);
    // Pillow's resample reads interleaved rows: the window's own memory when the crop is a view
    // of it (channels last), else a copy.
    at::Tensor hwc = image.permute({1, 2, 0});
    if (!(hwc.stride(2) == 1 && hwc.stride(1) == C)) hwc = hwc.contiguous();
    uint8_t* inter = grown(scratch.interleaved, (size_t)std::max<int64_t>(C * P, 1));
    pil_resample_into(hwc.data_ptr<uint8_t>(), C, H, W, hwc.stride(0), OH, OW, 0, 0, OH, OW, H, W, 0, 0, resize[2],
                      resize[3] != 0, inter);
    if (C == 3) {
      for (int64_t y = 0; y < OH; y++)
        fp_deinterleave3(inter + y * OW * 3, OW, planar + y * OW, planar + P + y * OW, planar + 2 * P + y * OW);
    } else {
      for (int64_t c = 0; c < C; c++)
        for (int64_t k = 0; k < P; k++) planar[c * P + k] = inter[k * C + c];
    }
  } else {
    at::from_blob(planar, {C, H, W}, at::kByte).copy_(image);
  }
  Image img{planar, at::kByte, C, OH, OW, C * P};
  const int64_t n = steps.numel() / (int64_t)sizeof(PixelStep);
  const PixelStep* s = reinterpret_cast<const PixelStep*>(steps.data_ptr<uint8_t>());
  scratch.kernels.extras = {extras.data(), (int64_t)extras.size()};
  for (int64_t k = 0; k < n; k++) {
    check_pixel_step(s[k], "pil_replay_views");
    run_pixel_step(s[k], img, scratch.kernels);
  }
  scratch.kernels.extras = {};
  TORCH_CHECK_VALUE(out.size(0) == img.channels && out.size(1) == img.height && out.size(2) == img.width,
                    "pil_replay_views: the view is [", img.channels, ", ", img.height, ", ", img.width,
                    "], out is ", out.sizes());
  TORCH_CHECK_VALUE(mean.size() <= 1 || (int64_t)mean.size() == img.channels, "pil_replay_views: ", mean.size(),
                    " means for ", img.channels, " channels");
  const int64_t plane = img.plane();
  if (out.scalar_type() == at::kByte) {
    TORCH_CHECK_VALUE(scale == kUnscaled && mean.empty(),
                      "pil_replay_views: a uint8 out takes neither scaling nor Normalize");
    std::memcpy(out.data_ptr<uint8_t>(), planar, (size_t)(img.channels * plane));
    return;
  }
  TORCH_CHECK_VALUE(scale != kUnscaled || mean.empty(), "pil_replay_views: Normalize needs the scaled float image");
  for (int64_t c = 0; c < img.channels; c++) {
    const size_t m = mean.size() == 1 ? 0 : (size_t)c;
    write_plane(planar + c * plane, plane, out.data_ptr<float>() + c * plane, scale, !mean.empty(),
                mean.empty() ? 0.0f : (float)mean[m], std.empty() ? 1.0f : (float)std[m]);
  }
}

// pil_replay_views(images, resizes, steps, extras, outs, scales, means, stds, norm_counts, crops):
// the views of one sample, each as replay_view, in one call (one return to Python, whose GIL the
// trace of the next samples may hold): view v is images[v], resizes[4 v .. 4 v + 4) ([0, 0, 0,
// 0]: no resize), steps[v], outs[v], scales[v], and norm_counts[v] (0, 1 or C) values of
// means/stds, taken in order. `extras` are shared by all views (the steps' extra indices).
// With `crops` (4 per view: x0, y0, x1, y1), `images` is the one decoded window and view v is
// its crop (no slicing per view in Python).
void pil_replay_views(const std::vector<at::Tensor>& images, at::IntArrayRef resizes,
                      const std::vector<at::Tensor>& steps, const std::vector<at::Tensor>& extras,
                      const std::vector<at::Tensor>& outs, at::IntArrayRef scales, at::ArrayRef<double> means,
                      at::ArrayRef<double> stds, at::IntArrayRef norm_counts, at::IntArrayRef crops) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  const bool cropped = !crops.empty();
  TORCH_CHECK_VALUE(!cropped || (images.size() == 1 && crops.size() % 4 == 0),
                    "pil_replay_views: with crops, one image (the window) and 4 crop numbers per view; got ",
                    images.size(), " images and ", crops.size(), " crop numbers");
  const size_t V = cropped ? crops.size() / 4 : images.size();
  TORCH_CHECK_VALUE(resizes.size() == 4 * V && steps.size() == V && outs.size() == V && scales.size() == V &&
                        norm_counts.size() == V,
                    "pil_replay_views: per view one image, 4 resize numbers, steps, out, scale and norm count; got ",
                    V, " images, ", resizes.size(), " resize numbers, ", steps.size(), " steps, ", outs.size(),
                    " outs, ", scales.size(), " scales, ", norm_counts.size(), " norm counts");
  TORCH_CHECK_VALUE(means.size() == stds.size(), "pil_replay_views: ", means.size(), " means and ", stds.size(),
                    " stds");
  size_t taken = 0;
  for (size_t v = 0; v < V; v++) {
    const int64_t count = norm_counts[v];
    TORCH_CHECK_VALUE(count >= 0 && taken + (size_t)count <= means.size(), "pil_replay_views: view ", v, " takes ",
                      count, " of the ", means.size() - taken, " means left");
    const at::IntArrayRef resize =
        resizes[4 * v] == 0 ? at::IntArrayRef() : resizes.slice(4 * v, 4);
    at::Tensor image = images[cropped ? 0 : v];
    if (cropped) {
      const int64_t x0 = crops[4 * v], y0 = crops[4 * v + 1], x1 = crops[4 * v + 2], y1 = crops[4 * v + 3];
      TORCH_CHECK_VALUE(image.dim() == 3 && 0 <= x0 && x0 < x1 && x1 <= image.size(2) && 0 <= y0 && y0 < y1 &&
                            y1 <= image.size(1),
                        "pil_replay_views: view ", v, "'s crop [", x0, ", ", y0, ", ", x1, ", ", y1,
                        "] is not within the image ", image.sizes());
      image = image.slice(1, y0, y1).slice(2, x0, x1);
    }
    replay_view(image, resize, steps[v], extras, outs[v], scales[v], means.slice(taken, (size_t)count),
                stds.slice(taken, (size_t)count));
    taken += (size_t)count;
  }
}

}  // namespace

FP_REGISTER_PIXEL_KERNEL({"pil_point", "extra=table (uint8 [256 * C])", pil_point, nullptr, nullptr});

}  // namespace fastprep

TORCH_LIBRARY_FRAGMENT(fastprep, m) {
  m.def("pil_replay_views(Tensor[] images, int[] resizes, Tensor[] steps, Tensor[] extras, Tensor(a!)[] outs, "
        "int[] scales, float[] means, float[] stds, int[] norm_counts, int[] crops=[]) -> ()");
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("pil_replay_views", &fastprep::pil_replay_views); }
