// torchvision v2's erase (functional/_augment.py: erase_image, `image[..., i:i+h, j:j+w] = v`)
// on uint8 and float32 images, and the draw of v2.RandomErasing.
//
// `v` is float32: RandomErasing's values as torch.tensor(value)[:, None, None] (one per
// channel, or one for all), or its 'random' noise (a [C, h, w] normal_ draw, kept in the
// step's extras). Into a float32 image the values are copied; into a uint8 image torch
// converts each float32 to uint8 as its copy_ does, which the fast kernel reproduces per value
// (float32_to_u8 below; the proof checks it on out-of-range values too).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "native_draw.h"
#include "pixel_kernel.h"

namespace fastprep {
namespace {

// The erased rectangle, ends clamped to the image as Python's slices clamp them.
struct Region {
  int64_t top, left, height, width;
};

// i0..i3 = i, j, h, w; i4 = index of the noise in the step's extras, or -1; i5 = number of
// values in f (1 or the image's channels).
Region erase_region(const PixelStep& s, const Image& im) {
  TORCH_CHECK_VALUE(s.i[0] >= 0 && s.i[1] >= 0 && s.i[2] >= 0 && s.i[3] >= 0,
                    "erase: i, j, h, w must not be negative, got ", s.i[0], ", ", s.i[1], ", ", s.i[2], ", ", s.i[3]);
  Region r;
  r.top = std::min(s.i[0], im.height);
  r.left = std::min(s.i[1], im.width);
  r.height = std::min(s.i[2], im.height - r.top);
  r.width = std::min(s.i[3], im.width - r.left);
  return r;
}

// The noise tensor of a 'random' erase, checked against the region; nullptr for values.
const at::Tensor* erase_noise(const PixelStep& s, const Image& im, const Region& r, const KernelScratch& scratch) {
  if (s.i[4] < 0) return nullptr;
  TORCH_CHECK_VALUE(s.i[4] < scratch.extras.count, "erase: noise tensor ", s.i[4], " of ", scratch.extras.count,
                    " kept by the draws");
  const at::Tensor& v = scratch.extras.tensors[s.i[4]];
  TORCH_CHECK_VALUE(v.device().is_cpu() && v.scalar_type() == at::kFloat && v.dim() == 3 && v.size(0) == im.channels &&
                        v.size(1) == r.height && v.size(2) == r.width && v.is_contiguous(),
                    "erase: the noise must be a contiguous float32 [", im.channels, ", ", r.height, ", ", r.width,
                    "] CPU tensor, got ", v.scalar_type(), " ", v.sizes());
  return &v;
}

int64_t erase_value_count(const PixelStep& s, const Image& im) {
  const int64_t count = s.i[5];
  TORCH_CHECK_VALUE((count == 1 || count == im.channels) && count <= kStepFloats, "erase: ", count,
                    " values for an image of ", im.channels, " channels (1 or one per channel)");
  return count;
}

// ------------------------------------------------------------------------------------
// Reference: ATen, as torchvision calls it.

void erase_ref(const PixelStep& s, Image& im, KernelScratch& scratch) {
  const Region r = erase_region(s, im);
  const at::Tensor* noise = erase_noise(s, im, r, scratch);
  at::Tensor v;
  if (noise != nullptr) {
    v = *noise;
  } else {
    const int64_t count = erase_value_count(s, im);
    std::vector<float> values((size_t)count);
    for (int64_t k = 0; k < count; k++) values[(size_t)k] = (float)s.f[k];
    v = at::tensor(values).view({count, 1, 1});  // torch.tensor(value)[:, None, None]
  }
  im.tensor().slice(-2, r.top, r.top + r.height).slice(-1, r.left, r.left + r.width).copy_(v);
}

// ------------------------------------------------------------------------------------
// Fast kernel.

// A float32 converted to uint8 as torch's copy_ converts it on x86: truncated to a 32-bit
// integer (the value cvttss2si gives, INT32_MIN for NaN and beyond the range: its low byte is
// 0, as it is for every float32 of magnitude >= 2**31, a multiple of 256), then its low byte.
inline uint8_t float32_to_u8(float v) {
  const bool in_range = (v >= -2147483648.0f) & (v < 2147483648.0f);
  return (uint8_t)(in_range ? (int32_t)v : INT32_MIN);
}

template <typename T>
void fill_rect(T* plane, int64_t stride, const Region& r, T value) {
  for (int64_t y = 0; y < r.height; y++) std::fill_n(plane + (r.top + y) * stride + r.left, r.width, value);
}

void erase_fast(const PixelStep& s, Image& im, KernelScratch& scratch) {
  const Region r = erase_region(s, im);
  const at::Tensor* noise = erase_noise(s, im, r, scratch);
  const int64_t plane = im.plane(), w = im.width;
  if (noise != nullptr) {
    const float* src = noise->data_ptr<float>();
    for (int64_t c = 0; c < im.channels; c++)
      for (int64_t y = 0; y < r.height; y++) {
        const float* from = src + (c * r.height + y) * r.width;
        const int64_t at = c * plane + (r.top + y) * w + r.left;
        if (im.dtype == at::kFloat) {
          std::memcpy(im.f32() + at, from, (size_t)r.width * sizeof(float));
        } else {
          uint8_t* to = im.u8() + at;
          for (int64_t x = 0; x < r.width; x++) to[x] = float32_to_u8(from[x]);
        }
      }
    return;
  }
  const int64_t count = erase_value_count(s, im);
  for (int64_t c = 0; c < im.channels; c++) {
    const float value = (float)s.f[count == 1 ? 0 : c];
    if (im.dtype == at::kFloat)
      fill_rect(im.f32() + c * plane, w, r, value);
    else
      fill_rect(im.u8() + c * plane, w, r, float32_to_u8(value));
  }
}

// Rectangles inside, across and beyond the probe images' edges (5x7 to 64x67); one value (the
// probes include 1-channel images), in range, fractional, negative, beyond uint8 and int32, NaN.
std::vector<PixelStep> erase_probes() {
  const int64_t rects[][4] = {{0, 0, 3, 4}, {1, 2, 2, 3}, {2, 3, 30, 40}, {0, 0, 100, 100}, {4, 6, 1, 1}, {3, 1, 0, 5}};
  const double values[] = {0.0, 1.0, 0.5, 127.9, 255.0, 255.99, 256.0, 300.7, -0.5, -1.0, -1.5, -300.0, 3.0e9, -1e20,
                           INFINITY, NAN};
  std::vector<PixelStep> out;
  size_t k = 0;
  for (const auto& rect : rects)
    for (int repeat = 0; repeat < 3; repeat++) {
      PixelStep s;
      for (int f = 0; f < 4; f++) s.i[f] = rect[f];
      s.i[4] = -1;
      s.i[5] = 1;
      s.f[0] = values[k++ % (sizeof(values) / sizeof(values[0]))];
      out.push_back(s);
    }
  return out;
}

FP_REGISTER_PIXEL_KERNEL({"erase", "i0..i3=i, j, h, w; i4=noise index in the extras or -1; i5=number of values; "
                          "f0..=values", erase_ref, erase_fast, erase_probes});

}  // namespace
}  // namespace fastprep

// ------------------------------------------------------------------------------------
// The draw of v2.RandomErasing (native_draw.h).

namespace fastprep {
namespace {

// torch.exp of a one-element float32 tensor, as v2 takes the exponential of the log-ratio draw:
// ATen's own kernel, so the bits are the same whichever exp it uses.
double exp_like_torch(float x) { return (double)at::exp(at::full({1}, x, at::kFloat)).item<float>(); }

// v2.RandomErasing(p, scale, ratio, value): `torch.rand(1) >= p` skips; up to 10 attempts of
// a scale and a log-ratio uniform_; the first rectangle that fits draws its noise ('random'),
// then its top and left with randint; none fits: nothing is erased.
// ints: number of values (0: 'random'); floats: p, scale (2), log ratio (2: the float32 values of
// torch.log(torch.tensor(ratio))), the values.
void draw_random_erasing(const NodeSpec& node, DrawContext& ctx) {
  static const int64_t kernel = pixel_kernel_id("erase");
  const double* f = ctx.floats(node);
  const int64_t count = ctx.ints(node)[0];
  if (ctx.draws.rand() >= as_f32(f[0])) return;
  const int64_t c = ctx.channels, h = ctx.height, w = ctx.width;
  TORCH_CHECK_VALUE(count == 0 || count == 1 || count == c,
                    "If value is a sequence, it should have either a single value or ", c,
                    " (number of inpt channels)");
  const double area = (double)(h * w);
  for (int attempt = 0; attempt < 10; attempt++) {
    const double erase_area = area * (double)ctx.draws.uniform(f[1], f[2]);
    const double aspect_ratio = exp_like_torch(ctx.draws.uniform(f[3], f[4]));
    // int(round(math.sqrt(...))): round half to even, as std::nearbyint in the default mode
    const int64_t eh = (int64_t)std::nearbyint(std::sqrt(erase_area * aspect_ratio));
    const int64_t ew = (int64_t)std::nearbyint(std::sqrt(erase_area / aspect_ratio));
    if (!(eh < h && ew < w)) continue;
    const int64_t noise = count == 0 ? ctx.keep(ctx.draws.normal({c, eh, ew})) : -1;
    const int64_t i = ctx.draws.randint(0, h - eh + 1);
    const int64_t j = ctx.draws.randint(0, w - ew + 1);
    PixelStep& s = ctx.emit(kernel);
    const int64_t ints[kStepInts] = {i, j, eh, ew, noise, count};
    std::copy(ints, ints + kStepInts, s.i);
    for (int64_t k = 0; k < count; k++) s.f[k] = f[5 + k];
    return;
  }
}

FP_REGISTER_NODE_DRAW("RandomErasing", draw_random_erasing);

}  // namespace
}  // namespace fastprep
