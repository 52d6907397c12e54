// torch.ops.fastprep.plan_batch: the per-sample Python of the threads engine's readers (route
// the file, read its header, draw its random parameters, plan its decode and its pixel steps)
// as one call per batch, without the GIL. (The reads themselves: readers/.)
//
// plan_batch makes the draws of the pipeline -- the decode transform's (those of
// fastprep/data/native.py's keyed draws, themselves torchvision v2's), the mask's seed, then
// the augmentations' draw program (ops/native_draw.h) -- on one generator per sample:
// torch's CPU Mersenne Twister seeded with the sample's key, drawn with the distributions of
// torch's own kernels, so the numbers are the same, and the geometry of
// fastprep/transforms/_plan.py in integers. Anything it does not plan (not a JPEG, an EXIF
// rotation, a header warning, a crop larger than the image) is routed back to the Python
// path, which then does exactly what it did.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "exit_gate.h"
#include "batch/plan.h"
#include "jpeg/jpeg_ops.h"
#include "ops/native_draw.h"

namespace fastprep {
namespace {

// ------------------------------------------------------------------------------------
// plan_batch

// A sample's status.
enum Route : int8_t { kPlanned = 0, kPython = 1, kError = 2 };

// The EXIF orientation of a JPEG (1-8), 0 when absent or unreadable: the marker segments
// before the first scan, within the first 64 KiB (fastprep.data.fallback.exif_orientation
// of data[:65536]).
int exif_orientation(const uint8_t* d, size_t size) {
  const size_t n = std::min<size_t>(size, 1 << 16);
  size_t pos = 2;
  while (pos + 4 <= n && d[pos] == 0xFF) {
    const uint8_t marker = d[pos + 1];
    if (marker == 0xFF) {
      pos += 1;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
      pos += 2;
      continue;
    }
    if (marker == 0xDA) return 0;
    const size_t length = ((size_t)d[pos + 2] << 8) | d[pos + 3];
    if (length < 2) return 0;
    if (marker == 0xE1 && pos + 10 <= n && std::memcmp(d + pos + 4, "Exif\0\0", 6) == 0) {
      const uint8_t* t = d + pos + 10;  // the TIFF structure, to the segment's end
      const size_t end = std::min(pos + 2 + length, n);
      const size_t tn = end > pos + 10 ? end - (pos + 10) : 0;
      if (tn < 2) return 0;
      const bool le = t[0] == 'I' && t[1] == 'I';
      if (!le && !(t[0] == 'M' && t[1] == 'M')) return 0;
      auto u16 = [&](size_t at) -> int64_t {
        if (at + 2 > tn) return -1;
        return le ? (t[at] | (t[at + 1] << 8)) : ((t[at] << 8) | t[at + 1]);
      };
      auto u32 = [&](size_t at) -> int64_t {
        if (at + 4 > tn) return -1;
        const uint32_t v = le ? (uint32_t)t[at] | ((uint32_t)t[at + 1] << 8) | ((uint32_t)t[at + 2] << 16) |
                                    ((uint32_t)t[at + 3] << 24)
                              : ((uint32_t)t[at] << 24) | ((uint32_t)t[at + 1] << 16) | ((uint32_t)t[at + 2] << 8) |
                                    (uint32_t)t[at + 3];
        return (int64_t)v;
      };
      const int64_t ifd = u32(4);
      if (ifd < 0) return 0;
      const int64_t count = u16((size_t)ifd);
      if (count < 0) return 0;
      for (int64_t k = 0; k < count; k++) {
        const size_t entry = (size_t)ifd + 2 + 12 * (size_t)k;
        if (entry + 12 > tn) return 0;
        if (u16(entry) == 0x0112 && u16(entry + 2) == 3) {
          const int64_t v = u16(entry + 8);
          return v >= 1 && v <= 8 ? (int)v : 0;
        }
      }
      return 0;
    }
    pos += 2 + length;
  }
  return 0;
}

inline int64_t round_half_even(double x) { return (int64_t)std::nearbyint(x); }

// torch.exp on a one-element float32 tensor (v2 RandomResizedCrop's aspect ratio).
float torch_exp(float x) { return at::exp(at::scalar_tensor(x, at::kFloat)).item<float>(); }

struct Window {
  int64_t top, left, h, w;
};

// v2 RandomResizedCrop's window (native.py _ResizedCropDraw, _plan.centered_ratio_window).
Window resized_crop_window(Draws& g, int64_t height, int64_t width, const DecodeSpec& d) {
  const double area = (double)(height * width);
  for (int attempt = 0; attempt < 10; attempt++) {
    const double target_area = area * (double)g.uniform(d.scale_lo, d.scale_hi);
    const double aspect = (double)torch_exp(g.uniform(d.log_ratio_lo, d.log_ratio_hi));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = g.randint(0, height - h + 1);
      const int64_t left = g.randint(0, width - w + 1);
      return {top, left, h, w};
    }
  }
  const double in_ratio = (double)width / (double)height;
  int64_t h = height, w = width;
  if (in_ratio < d.ratio_lo) {
    h = round_half_even((double)width / d.ratio_lo);
  } else if (in_ratio > d.ratio_hi) {
    w = round_half_even((double)height * d.ratio_hi);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// _plan.plan_scaled_window: the smallest DCT scale whose rounded window is still `out`.
int64_t scaled_window(int64_t height, int64_t width, Window& win, int64_t oh, int64_t ow,
                      const std::vector<int64_t>& scales) {
  for (const int64_t num : scales) {
    const int64_t hs = (height * num + 7) / 8, ws = (width * num + 7) / 8;
    const int64_t y0 = (win.top * num + 4) / 8, x0 = (win.left * num + 4) / 8;
    const int64_t y1 = std::min(((win.top + win.h) * num + 4) / 8, hs);
    const int64_t x1 = std::min(((win.left + win.w) * num + 4) / 8, ws);
    if (y1 - y0 >= oh && x1 - x0 >= ow) {
      win = {y0, x0, y1 - y0, x1 - x0};
      return num;
    }
  }
  return 8;
}

// The plan of DecodeRandomResizedCrop: the (scaled) window resized to the output, then maybe
// mirrored, placed at (0, 0).
void resized_crop_plan(SamplePlan& p, int64_t height, int64_t width, Draws& g, const DecodeSpec& d,
                       const std::vector<int64_t>& scales) {
  Window win = resized_crop_window(g, height, width, d);
  bool flip = false;
  if (d.flip_p > 0) flip = (double)g.rand() < d.flip_below;
  const int64_t oh = d.out_h, ow = d.out_w;
  p.scale_num = d.dct_scaling ? scaled_window(height, width, win, oh, ow, scales) : 8;
  p.top = win.top, p.left = win.left, p.height = win.h, p.width = win.w;
  p.resize = 1;
  p.full_in_h = win.h, p.full_in_w = win.w, p.in_top = 0, p.in_left = 0;
  p.full_out_h = oh, p.full_out_w = ow, p.out_top = 0, p.out_left = 0, p.region_h = oh, p.region_w = ow;
  p.antialias = d.antialias ? 1 : 0;
  p.pil_filter = d.pil_filter;
  p.filter = d.filter;
  p.hflip = flip ? 1 : 0;
  p.placed = 1, p.place_top = 0, p.place_left = 0;
}

// The plan of DecodeRandomCrop without padding (v2 RandomCrop, then _plan.padded_plan);
// false where the transform raises (the image is smaller than the crop).
bool random_crop_plan(SamplePlan& p, int64_t height, int64_t width, Draws& g, const DecodeSpec& d) {
  const int64_t th = d.out_h, tw = d.out_w;
  int64_t h = height, w = width, pl = 0, pt = 0;
  if (d.pad_if_needed && w < tw) pl = tw - w, w += 2 * (tw - w);
  if (d.pad_if_needed && h < th) pt = th - h, h += 2 * (th - h);
  if (h < th || w < tw) return false;
  const int64_t i = h > th ? g.randint(0, h - th + 1) : 0;
  const int64_t j = w > tw ? g.randint(0, w - tw + 1) : 0;
  const int64_t y0 = std::max<int64_t>(i - pt, 0), x0 = std::max<int64_t>(j - pl, 0);
  const int64_t y1 = std::min(i - pt + th, height), x1 = std::min(j - pl + tw, width);
  p.scale_num = 8;
  if (y1 <= y0 || x1 <= x0) {  // all padding: decode one pixel only to check the file
    p.top = 0, p.left = 0, p.height = 1, p.width = 1, p.region_h = 1, p.region_w = 1;
    return true;
  }
  p.top = y0, p.left = x0, p.height = y1 - y0, p.width = x1 - x0;
  p.region_h = y1 - y0, p.region_w = x1 - x0;
  p.placed = 1, p.place_top = y0 - (i - pt), p.place_left = x0 - (j - pl);
  return true;
}

// One view of the pipeline: its decode's spec and its augmentations' draw program.
struct ViewInputs {
  const DecodeSpec* spec;
  Program program;
  int64_t num_float_roots;
};

// What plan_one needs besides the sample.
struct PlanInputs {
  const std::vector<ViewInputs>& views;
  const std::vector<int64_t>& scales;
  int64_t max_pixels;
  bool exif;
  bool whole_file;  // a view decodes the whole file first (a v2 pipeline): its decode must reach the end
};

// One view's draws (the decode's, the mask's seed, then the augmentations') on the sample's
// generator, continuing where the previous view left it. False where the transform raises.
bool plan_view(const ViewInputs& view, int64_t height, int64_t width, Draws& g, const std::vector<int64_t>& scales,
               SamplePlan& p, std::vector<PixelStep>& steps, std::vector<at::Tensor>& extras) {
  const DecodeSpec& spec = *view.spec;
  if (spec.kind == kResizedCrop) {
    resized_crop_plan(p, height, width, g, spec, scales);
    // an empty centred fallback window (a tiny image, a ratio far from its own): torchvision
    // raises on it, and so does the Python path, naming the file
    if (p.height <= 0 || p.width <= 0) return false;
  } else if (spec.kind == kRandomCrop) {
    if (!random_crop_plan(p, height, width, g, spec)) return false;
  }
  if (spec.has_mask) {  // RandomMask.get_params: torch.randint(0, 2**63 - 1, ())
    p.mask = 1;
    p.mask_seed = g.randint(0, INT64_MAX);
    p.mask_m = spec.mask_m;
  }
  p.first_step = (int64_t)steps.size();
  DrawContext ctx(g, view.program, spec.channels, spec.out_h, spec.out_w, &steps, &extras);
  const int64_t uint8_roots = view.program.num_roots - view.num_float_roots;
  for (int64_t k = 0; k < uint8_roots; k++) ctx.draw(k);
  p.num_steps = (int64_t)steps.size() - p.first_step;
  for (int64_t k = uint8_roots; k < view.program.num_roots; k++) ctx.draw(k);
  p.num_float_steps = (int64_t)steps.size() - p.first_step - p.num_steps;
  return true;
}

// Sample i: route, header, limits, then each view's draws in order on one generator (the
// draws of `[view(data) for view in views]`), its plans in `plans` (one per view). Returns its
// route; `message` holds an error's text.
Route plan_one(const at::Tensor& data, uint64_t key, const std::optional<at::Generator>& generator,
               const PlanInputs& in, SamplePlan* plans, int64_t* hw, std::vector<PixelStep>& steps,
               std::vector<at::Tensor>& extras, std::string& message) {
  const uint8_t* d = data.data_ptr<uint8_t>();
  const size_t n = (size_t)data.numel();
  if (n < 3 || d[0] != 0xFF || d[1] != 0xD8 || d[2] != 0xFF) return kPython;  // not a JPEG's signature
  // The whole-file decode of a v2 view fails on a truncated file even where the window decode
  // would not; a file that does not end in EOI goes to the Python path, which checks it.
  if (in.whole_file && (d[n - 2] != 0xFF || d[n - 1] != 0xD9)) return kPython;
  if (in.exif) {
    const int orientation = exif_orientation(d, n);
    if (orientation > 1) return kPython;  // the dataset's EXIF-rotation fallback
  }
  fp_info info;
  try {
    const Decoder dec(false);  // a decoder reads one header
    info = read_header(dec, d, n);
  } catch (const c10::Error& e) {
    thread_warning().clear();
    message = decode_error_text(e.what_without_backtrace());
    return kError;
  }
  if (!thread_warning().empty()) {  // the Python path issues its DecodeWarning
    thread_warning().clear();
    return kPython;
  }
  const int64_t height = info.height, width = info.width;
  if (in.max_pixels > 0 && height * width > in.max_pixels) {
    message = "image of " + std::to_string(height) + "x" + std::to_string(width) + " = " +
              std::to_string(height * width) + " pixels exceeds max_pixels=" + std::to_string(in.max_pixels);
    return kError;
  }
  hw[0] = height, hw[1] = width;
  Draws g = generator.has_value() ? Draws(*generator) : Draws(key);
  for (size_t v = 0; v < in.views.size(); v++)
    if (!plan_view(in.views[v], height, width, g, in.scales, plans[v], steps, extras)) return kPython;
  return kPlanned;
}

template <typename T>
at::Tensor as_bytes(const std::vector<T>& v) {
  at::Tensor out = at::empty({(int64_t)(v.size() * sizeof(T))}, at::kByte);
  if (!v.empty()) std::memcpy(out.data_ptr<uint8_t>(), v.data(), v.size() * sizeof(T));
  return out;
}

// The views' inputs, checked: one DecodeSpec record and one draw program per view.
std::vector<ViewInputs> view_inputs(const at::Tensor& specs, const std::vector<at::Tensor>& nodes,
                                    const std::vector<at::Tensor>& ints, const std::vector<at::Tensor>& floats,
                                    const std::vector<int64_t>& num_roots, const std::vector<int64_t>& num_float_roots) {
  const int64_t V = (int64_t)nodes.size();
  TORCH_CHECK_VALUE(V >= 1 && (int64_t)ints.size() == V && (int64_t)floats.size() == V &&
                        (int64_t)num_roots.size() == V && (int64_t)num_float_roots.size() == V,
                    "plan_batch: one program per view: nodes, ints, floats, num_roots and num_float_roots must have "
                    "the same length >= 1");
  TORCH_CHECK_VALUE(specs.scalar_type() == at::kByte && specs.dim() == 1 && specs.is_contiguous() &&
                        specs.numel() == V * (int64_t)sizeof(DecodeSpec),
                    "plan_batch: specs must be ", V, " DecodeSpec records (", sizeof(DecodeSpec), " bytes each)");
  const DecodeSpec* spec = reinterpret_cast<const DecodeSpec*>(specs.data_ptr<uint8_t>());
  std::vector<ViewInputs> views;
  for (int64_t v = 0; v < V; v++) {
    const DecodeSpec& d = spec[v];
    TORCH_CHECK_VALUE(d.kind == kNoDraw || d.kind == kResizedCrop || d.kind == kRandomCrop,
                      "plan_batch: unknown decode kind ", d.kind);
    TORCH_CHECK_VALUE(d.out_h > 0 && d.out_w > 0 && d.mask_m >= 0 && d.channels >= 1 && d.channels <= 4,
                      "plan_batch: bad output size, channels or mask numerator");
    TORCH_CHECK_VALUE(d.filter >= 0 && d.filter <= 3, "plan_batch: filter must be in [0, 3], got ", d.filter);
    if (d.kind == kResizedCrop)
      TORCH_CHECK_VALUE(d.scale_lo <= d.scale_hi && d.log_ratio_lo <= d.log_ratio_hi && d.ratio_lo > 0,
                        "plan_batch: bad RandomResizedCrop bounds");
    const Program program = program_of(nodes[v], ints[v], floats[v], num_roots[v], "plan_batch");
    TORCH_CHECK_VALUE(num_float_roots[v] >= 0 && num_float_roots[v] <= num_roots[v],
                      "plan_batch: num_float_roots must be in [0, ", num_roots[v], "], got ", num_float_roots[v]);
    views.push_back({&d, program, num_float_roots[v]});
  }
  return views;
}

std::tuple<at::Tensor, at::Tensor, std::vector<at::Tensor>, at::Tensor, at::Tensor, at::Tensor> plan_batch(
    const std::vector<at::Tensor>& data, const at::Tensor& keys, const at::Tensor& specs,
    const std::vector<at::Tensor>& nodes, const std::vector<at::Tensor>& ints, const std::vector<at::Tensor>& floats,
    const std::vector<int64_t>& num_roots, const std::vector<int64_t>& num_float_roots,
    const std::vector<int64_t>& dct_scales, int64_t max_pixels, bool exif, bool whole_file,
    const std::optional<at::Generator>& generator) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  const int64_t N = (int64_t)data.size();
  const std::vector<ViewInputs> views = view_inputs(specs, nodes, ints, floats, num_roots, num_float_roots);
  const int64_t V = (int64_t)views.size();
  TORCH_CHECK_VALUE(keys.scalar_type() == at::kLong && keys.dim() == 1 && keys.numel() == N && keys.is_contiguous() &&
                        keys.device().is_cpu(),
                    "plan_batch: keys must be a contiguous int64 CPU tensor [", N, "]");
  TORCH_CHECK_VALUE(max_pixels >= 0, "plan_batch: max_pixels must be >= 0, got ", max_pixels);
  for (const int64_t s : dct_scales) TORCH_CHECK_VALUE(s >= 1 && s <= 8, "plan_batch: DCT scales are 1..8, got ", s);
  for (int64_t i = 0; i < N; i++) {
    const at::Tensor& d = data[i];
    TORCH_CHECK_TYPE(d.scalar_type() == at::kByte, "plan_batch: data[", i, "] must be uint8, got ", d.scalar_type());
    TORCH_CHECK_VALUE(d.dim() == 1 && d.device().is_cpu() && d.is_contiguous(), "plan_batch: data[", i,
                      "] must be a contiguous 1-D CPU tensor");
  }
  std::vector<SamplePlan> plans((size_t)(N * V));
  std::vector<PixelStep> steps;
  std::vector<at::Tensor> extras;
  at::Tensor hw = at::zeros({N, 2}, at::kLong);
  int64_t* hv = hw.data_ptr<int64_t>();
  const int64_t* kv = keys.data_ptr<int64_t>();
  std::vector<int8_t> codes((size_t)N, kPlanned);
  std::vector<std::string> messages((size_t)N);
  const PlanInputs in{views, dct_scales, max_pixels, exif, whole_file};
  for (int64_t i = 0; i < N; i++) {
    const size_t before = steps.size(), kept = extras.size();
    SamplePlan* mine = plans.data() + i * V;
    codes[i] = plan_one(data[i], (uint64_t)kv[i], generator, in, mine, hv + 2 * i, steps, extras, messages[i]);
    if (codes[i] != kPlanned) {  // a sample left to Python or failed has no steps here
      steps.resize(before);
      extras.resize(kept);
      for (int64_t v = 0; v < V; v++) mine[v] = SamplePlan();
    }
  }
  auto [status, text] = status_table(codes, messages);
  return {as_bytes(plans), as_bytes(steps), extras, hw, status, text};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("plan_batch", &plan_batch); }

}  // namespace fastprep
