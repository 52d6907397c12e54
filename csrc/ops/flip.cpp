// v2.RandomHorizontalFlip and v2.RandomVerticalFlip: the kernels (torchvision's
// horizontal_flip_image / vertical_flip_image are Tensor.flip(-1) / flip(-2): pure data
// movement, so the fast kernel's bits equal the reference's by construction, and the proof
// checks it) and their draws (`torch.rand(1) >= p` skips).
#include <algorithm>
#include <cstring>

#include "ops/native_draw.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

void hflip_ref(const PixelStep&, Image& im, KernelScratch&) { im.assign(im.tensor().flip(-1)); }
void vflip_ref(const PixelStep&, Image& im, KernelScratch&) { im.assign(im.tensor().flip(-2)); }

template <typename T>
void reverse_rows(T* p, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; r++) std::reverse(p + r * width, p + (r + 1) * width);
}

void hflip_fast(const PixelStep&, Image& im, KernelScratch&) {
  const int64_t rows = im.channels * im.height;
  if (im.dtype == at::kByte)
    reverse_rows(im.u8(), rows, im.width);
  else
    reverse_rows(im.f32(), rows, im.width);
}

void vflip_fast(const PixelStep&, Image& im, KernelScratch& scratch) {
  const size_t row = (size_t)im.width * (im.dtype == at::kByte ? 1 : sizeof(float));
  uint8_t* tmp = grown(scratch.u8, row);
  uint8_t* base = static_cast<uint8_t*>(im.data);
  for (int64_t c = 0; c < im.channels; c++) {
    uint8_t* plane = base + (size_t)(c * im.height) * row;
    for (int64_t a = 0, b = im.height - 1; a < b; a++, b--) {
      std::memcpy(tmp, plane + a * row, row);
      std::memcpy(plane + a * row, plane + b * row, row);
      std::memcpy(plane + b * row, tmp, row);
    }
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
