// fastprep::pil_resample_into: Pillow's Image.resize (libImaging/Resample.c) on raw memory,
// for the batch op and torch.ops.fastprep.pil_resize. See pil_resample.cpp for the arithmetic.
#pragma once

#include <stdint.h>

namespace fastprep {

// Pillow's filters, in this order (Python: fastprep/transforms/_pil.py PIL_FILTERS).
enum PilFilter : int64_t { kPilBox = 1, kPilBilinear = 2, kPilHamming = 3, kPilBicubic = 4, kPilLanczos = 5 };

// The argument checks of torch.ops.fastprep.pil_resize (ValueError naming the bad value).
void check_pil_resample_args(int64_t C, int64_t H, int64_t W, int64_t full_out_h, int64_t full_out_w,
                             int64_t out_top, int64_t out_left, int64_t out_h, int64_t out_w, int64_t full_in_h,
                             int64_t full_in_w, int64_t in_top, int64_t in_left, int64_t filter);

// Pixels out_window = (out_top, out_left, out_h, out_w) of Pillow's
// `img.resize((full_out_w, full_out_h), filter)` of a virtual full_in_h x full_in_w image, of
// which `image` (interleaved rows of W pixels of C channels, `row_stride` bytes apart) holds the
// H x W pixels from (in_top, in_left) on; written to `out` as contiguous [out_h, out_w, C],
// mirrored when `hflip`. Raises ValueError when the window's filter reads pixels outside `image`.
void pil_resample_into(const uint8_t* image, int64_t C, int64_t H, int64_t W, int64_t row_stride,
                       int64_t full_out_h, int64_t full_out_w, int64_t out_top, int64_t out_left, int64_t out_h,
                       int64_t out_w, int64_t full_in_h, int64_t full_in_w, int64_t in_top, int64_t in_left,
                       int64_t filter, bool hflip, uint8_t* out);

}  // namespace fastprep
