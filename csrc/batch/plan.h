// The records the threads engine's planner writes and its batch op reads: one per sample
// (SamplePlan), the planner's configuration (DecodeSpec) and the batch's output conversion
// (ConvertSpec). Each crosses into Python as bytes; fastprep/_layout.py builds a numpy dtype
// from struct_layout() (batch/layout.cpp), so both sides address fields by name.
#pragma once

#include <cstdint>

namespace fastprep {

// One sample's work in decode_batch: the decode window, the resize, the placement on the
// canvas, the mask, and its range of pixel steps in the batch's step table.
struct SamplePlan {
  int64_t scale_num = 8;                            // DCT scale: decode at scale_num/8 of the size (1..8)
  int64_t top = 0, left = 0, height = 0, width = 0;  // decode window, in scaled pixels
  int64_t resize = 0;                               // 1: resize the decoded window as below
  int64_t full_in_h = 0, full_in_w = 0;             // resize input grid (a virtual image) ...
  int64_t in_top = 0, in_left = 0;                  // ... and the decoded window's place on it
  int64_t full_out_h = 0, full_out_w = 0;           // resize output grid ...
  int64_t out_top = 0, out_left = 0;                // ... and the window of it computed
  int64_t region_h = 0, region_w = 0;               // what is placed: the resize output, or the decoded window
  int64_t antialias = 0, hflip = 0;                 // antialiased filter; the resize output mirrored
  int64_t filter = 0;                               // resize_aa's filter (ResizeFilter, ops/resize_aa.h)
  int64_t placed = 0;                               // 1: the region goes on the canvas at (place_top, place_left);
  int64_t place_top = 0, place_left = 0;            // 0: the decode only checks the file (all padding)
  int64_t mask = 0, mask_seed = 0, mask_m = 0;      // RandomMask: seed, probability numerator m / 2**16
  double scale_h = 0, scale_w = 0;                  // resize_aa's scales (<= 0: full_out / full_in)
  int64_t first_step = 0;                           // steps[first_step, + num_steps): uint8 stage,
  int64_t num_steps = 0;                            // then num_float_steps on the float image
  int64_t num_float_steps = 0;
  // Padding by index (edge/reflect/symmetric, or stages with other fills; pad_stages > 0):
  // the canvas is the window at (pad_origin_top, pad_origin_left) of the pad_image_h x
  // pad_image_w image padded by pad_stages stages, innermost first, stage k adding
  // pad_ltrb[k] = (left, top, right, bottom) pixels by pad_mode[k] (kPad*) -- a constant
  // stage's value in channel c is byte c of pad_fill[k]. Each canvas pixel is read from the
  // decoded window (top, left, height, width above, which must hold every image pixel the
  // map reads); region/place fields are unused. (fastprep/transforms/_plan.py: axis_map)
  int64_t pad_stages = 0;
  int64_t pad_image_h = 0, pad_image_w = 0;
  int64_t pad_origin_top = 0, pad_origin_left = 0;
  int64_t pad_mode[4] = {};
  int64_t pad_ltrb[4][4] = {};
  int64_t pad_fill[4] = {};
  int64_t pil_filter = 0;                           // 0: resize_aa; else Pillow's resize (ops/pil_resample.h)
};

// SamplePlan.pad_mode: torchvision's padding modes.
enum PadMode : int64_t { kPadConstant = 0, kPadEdge = 1, kPadReflect = 2, kPadSymmetric = 3 };
constexpr int64_t kMaxPadStages = 4;

// What plan_batch draws and plans (fastprep/data/native.py fills it from the pipeline).
enum DecodeKind : int64_t {
  kNoDraw = 0,       // no random window: the header only (Python adds the geometry)
  kResizedCrop = 1,  // DecodeRandomResizedCrop (v2 RandomResizedCrop, then the flip)
  kRandomCrop = 2    // DecodeRandomCrop without padding (v2 RandomCrop's offsets)
};

struct DecodeSpec {
  int64_t kind = kNoDraw;
  int64_t out_h = 0, out_w = 0;  // output size
  int64_t channels = 3;          // channels of the decoded image (what the steps see first)
  int64_t antialias = 1, dct_scaling = 0, pad_if_needed = 0;
  int64_t filter = 0;            // the resize's filter (ResizeFilter, ops/resize_aa.h)
  int64_t has_mask = 0, mask_m = 0;
  double scale_lo = 0, scale_hi = 0;          // RandomResizedCrop: area fraction
  double log_ratio_lo = 0, log_ratio_hi = 0;  // log aspect ratio (v2's float32 logs)
  double ratio_lo = 0, ratio_hi = 0;          // aspect ratio (the fallback window)
  double flip_p = 0, flip_below = 0;          // the flip's probability (and as float32)
  int64_t pil_filter = 0;                     // 0: resize_aa; else Pillow's resize (SamplePlan's)
};

// The conversion of a float batch, fused into the write.
enum ConvertKind : int64_t {
  kNoConvert = 0,     // uint8 out
  kDiv255 = 1,        // x / 255 (BatchConvert "rgb")
  kAffine = 2,        // x * gain + bias (two roundings)
  kYuv = 3,           // ((m0 r + m1 g) + m2 b) + offset (each step rounded)
  kYuvAffine = 4,     // kYuv, then * gain + bias (two roundings)
  kYuvAffineFma = 5,  // kYuv, then fma(., gain, bias) (one rounding)
  kToFloat = 6,       // v2 ToDtype(float32, scale=True): x * f32(1 / 255)
  kToFloatNormalize = 7,  // kToFloat, then v2 Normalize: (x - mean) / std
  kDivToFloat = 8,        // v1 ConvertImageDtype(float32): x / 255.0f (a division, not v2's product)
  kDivToFloatNormalize = 9,  // kDivToFloat, then Normalize (v1's sub_(mean).div_(std), as v2's)
};

struct ConvertSpec {
  int64_t kind = kNoConvert;
  double yuv[3][4] = {};  // YUV rows: m0, m1, m2, offset
  double gain[4] = {}, bias[4] = {};
  double scale = 0;       // kToFloat's factor
  double mean[4] = {}, std[4] = {};
};

}  // namespace fastprep
