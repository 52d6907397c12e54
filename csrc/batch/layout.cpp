// torch.ops.fastprep.struct_layout(name): the layout of each struct that crosses into Python
// as bytes, for fastprep/_layout.py: "size;field:type:offset:count;..." (type i8 or f8).
#include <torch/library.h>

#include <cstddef>
#include <string>

#include "ops/native_draw.h"
#include "ops/pixel_kernel.h"
#include "batch/plan.h"

namespace fastprep {
namespace {

template <typename T>
struct Describe {
  std::string out = std::to_string(sizeof(T));
  void field(const char* name, const char* type, size_t offset, size_t bytes) {
    const size_t count = bytes / 8;  // every field is int64 or double (arrays of them)
    out += std::string(";") + name + ":" + type + ":" + std::to_string(offset) + ":" + std::to_string(count);
  }
};

#define FP_FIELD(d, T, name, type) d.field(#name, type, offsetof(T, name), sizeof(((T*)nullptr)->name))

std::string struct_layout(const std::string& name) {
  if (name == "PixelStep") {
    Describe<PixelStep> d;
    FP_FIELD(d, PixelStep, kernel, "i8");
    FP_FIELD(d, PixelStep, extra, "i8");
    FP_FIELD(d, PixelStep, i, "i8");
    FP_FIELD(d, PixelStep, f, "f8");
    return d.out;
  }
  if (name == "NodeSpec") {
    Describe<NodeSpec> d;
    FP_FIELD(d, NodeSpec, draw, "i8");
    FP_FIELD(d, NodeSpec, first_child, "i8");
    FP_FIELD(d, NodeSpec, num_children, "i8");
    FP_FIELD(d, NodeSpec, ints_at, "i8");
    FP_FIELD(d, NodeSpec, num_ints, "i8");
    FP_FIELD(d, NodeSpec, floats_at, "i8");
    FP_FIELD(d, NodeSpec, num_floats, "i8");
    return d.out;
  }
  if (name == "SamplePlan") {
    Describe<SamplePlan> d;
    FP_FIELD(d, SamplePlan, scale_num, "i8");
    FP_FIELD(d, SamplePlan, top, "i8");
    FP_FIELD(d, SamplePlan, left, "i8");
    FP_FIELD(d, SamplePlan, height, "i8");
    FP_FIELD(d, SamplePlan, width, "i8");
    FP_FIELD(d, SamplePlan, resize, "i8");
    FP_FIELD(d, SamplePlan, full_in_h, "i8");
    FP_FIELD(d, SamplePlan, full_in_w, "i8");
    FP_FIELD(d, SamplePlan, in_top, "i8");
    FP_FIELD(d, SamplePlan, in_left, "i8");
    FP_FIELD(d, SamplePlan, full_out_h, "i8");
    FP_FIELD(d, SamplePlan, full_out_w, "i8");
    FP_FIELD(d, SamplePlan, out_top, "i8");
    FP_FIELD(d, SamplePlan, out_left, "i8");
    FP_FIELD(d, SamplePlan, region_h, "i8");
    FP_FIELD(d, SamplePlan, region_w, "i8");
    FP_FIELD(d, SamplePlan, antialias, "i8");
    FP_FIELD(d, SamplePlan, hflip, "i8");
    FP_FIELD(d, SamplePlan, filter, "i8");
    FP_FIELD(d, SamplePlan, placed, "i8");
    FP_FIELD(d, SamplePlan, place_top, "i8");
    FP_FIELD(d, SamplePlan, place_left, "i8");
    FP_FIELD(d, SamplePlan, mask, "i8");
    FP_FIELD(d, SamplePlan, mask_seed, "i8");
    FP_FIELD(d, SamplePlan, mask_m, "i8");
    FP_FIELD(d, SamplePlan, scale_h, "f8");
    FP_FIELD(d, SamplePlan, scale_w, "f8");
    FP_FIELD(d, SamplePlan, first_step, "i8");
    FP_FIELD(d, SamplePlan, num_steps, "i8");
    FP_FIELD(d, SamplePlan, num_float_steps, "i8");
    FP_FIELD(d, SamplePlan, pad_stages, "i8");
    FP_FIELD(d, SamplePlan, pad_image_h, "i8");
    FP_FIELD(d, SamplePlan, pad_image_w, "i8");
    FP_FIELD(d, SamplePlan, pad_origin_top, "i8");
    FP_FIELD(d, SamplePlan, pad_origin_left, "i8");
    FP_FIELD(d, SamplePlan, pad_mode, "i8");
    FP_FIELD(d, SamplePlan, pad_ltrb, "i8");
    FP_FIELD(d, SamplePlan, pad_fill, "i8");
    FP_FIELD(d, SamplePlan, pil_filter, "i8");
    return d.out;
  }
  if (name == "DecodeSpec") {
    Describe<DecodeSpec> d;
    FP_FIELD(d, DecodeSpec, kind, "i8");
    FP_FIELD(d, DecodeSpec, out_h, "i8");
    FP_FIELD(d, DecodeSpec, out_w, "i8");
    FP_FIELD(d, DecodeSpec, channels, "i8");
    FP_FIELD(d, DecodeSpec, antialias, "i8");
    FP_FIELD(d, DecodeSpec, dct_scaling, "i8");
    FP_FIELD(d, DecodeSpec, filter, "i8");
    FP_FIELD(d, DecodeSpec, pad_if_needed, "i8");
    FP_FIELD(d, DecodeSpec, has_mask, "i8");
    FP_FIELD(d, DecodeSpec, mask_m, "i8");
    FP_FIELD(d, DecodeSpec, scale_lo, "f8");
    FP_FIELD(d, DecodeSpec, scale_hi, "f8");
    FP_FIELD(d, DecodeSpec, log_ratio_lo, "f8");
    FP_FIELD(d, DecodeSpec, log_ratio_hi, "f8");
    FP_FIELD(d, DecodeSpec, ratio_lo, "f8");
    FP_FIELD(d, DecodeSpec, ratio_hi, "f8");
    FP_FIELD(d, DecodeSpec, flip_p, "f8");
    FP_FIELD(d, DecodeSpec, flip_below, "f8");
    FP_FIELD(d, DecodeSpec, pil_filter, "i8");
    return d.out;
  }
  if (name == "ConvertSpec") {
    Describe<ConvertSpec> d;
    FP_FIELD(d, ConvertSpec, kind, "i8");
    FP_FIELD(d, ConvertSpec, yuv, "f8");
    FP_FIELD(d, ConvertSpec, gain, "f8");
    FP_FIELD(d, ConvertSpec, bias, "f8");
    FP_FIELD(d, ConvertSpec, scale, "f8");
    FP_FIELD(d, ConvertSpec, mean, "f8");
    FP_FIELD(d, ConvertSpec, std, "f8");
    return d.out;
  }
  TORCH_CHECK_VALUE(false, "struct_layout: unknown struct '", name, "'");
}

}  // namespace
}  // namespace fastprep

TORCH_LIBRARY_FRAGMENT(fastprep, m) { m.def("struct_layout(str name) -> str"); }
TORCH_LIBRARY_IMPL(fastprep, CompositeImplicitAutograd, m) { m.impl("struct_layout", &fastprep::struct_layout); }
