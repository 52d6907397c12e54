// The plan rows of torch.ops.fastprep.decode_batch (decode_batch.cpp runs them) and
// torch.ops.fastprep.plan_batch (plan_batch.cpp draws them): the one place that defines
// their columns. fastprep/data/native.py (_plan_row) writes them in the same order.
#pragma once

#include <cstdint>

namespace fastprep {

// Columns of a sample's int64 plan row.
enum PlanColumn : int64_t {
  kNum,          // DCT scale: decode at num/8 of the size (1..8)
  kDecTop,       // decode window in scaled pixels: top, left, height, width
  kDecLeft,
  kDecH,
  kDecW,
  kResize,       // 1: resize the decoded window (columns kFullInH..kHflip), 0: use it as is
  kFullInH,      // resize input grid (a virtual image) and the decoded window's place on it
  kFullInW,
  kInTop,
  kInLeft,
  kFullOutH,     // resize output grid and the window of it that is computed
  kFullOutW,
  kOutTop,
  kOutLeft,
  kRegionH,      // size of what is placed: the resize output window, or the decoded window
  kRegionW,
  kAntialias,    // 1: antialiased bilinear, 0: plain bilinear
  kHflip,        // 1: the resize output mirrored
  kPlaced,       // 1: the region goes on the canvas at (kPlaceTop, kPlaceLeft); 0: the
  kPlaceTop,     //    decode only checks the file (the canvas is all padding)
  kPlaceLeft,
  kMask,         // 1: apply the random mask (seed, probability numerator m / 2**16)
  kMaskSeed,
  kMaskM,
  kPlanColumns
};
// Columns of a sample's float64 row: resize_aa's scale_h, scale_w (output px per input px;
// <= 0: full_out / full_in).
enum ScaleColumn : int64_t { kScaleH, kScaleW, kScaleColumns };

}  // namespace fastprep
