// fastprep::resize_aa's kernel on raw memory, for callers that own their buffers (the
// batch op), and its ISA switch. See resize_aa.cpp for the arithmetic.
#pragma once

#include <stdint.h>

namespace fastprep {

// resize_aa's filters (the `filter` argument; SamplePlan::filter).
enum ResizeFilter : int64_t { kResizeBilinear = 0, kResizeBicubic = 1, kResizeNearest = 2, kResizeNearestExact = 3 };

// ValueError unless `filter` is one of ResizeFilter.
void check_resize_filter(int64_t filter);

// The argument checks of torch.ops.fastprep.resize_aa on an image of C channels and
// H x W pixels (ValueError naming the bad value).
void check_resize_args(int64_t C, int64_t H, int64_t W, int64_t full_out_h, int64_t full_out_w, int64_t out_top,
                       int64_t out_left, int64_t out_h, int64_t out_w, int64_t full_in_h, int64_t full_in_w,
                       int64_t in_top, int64_t in_left, double scale_h, double scale_w);

// resize_aa's output pixels, written to `out` as contiguous [out_h, out_w, C]. `image`:
// interleaved rows of W pixels, `row_stride` bytes apart; `readable` bytes may be read from
// `image` on (the kernels read up to 16 bytes past a row's last pixel where that stays
// inside). Arguments as checked by check_resize_args; raises ValueError when the output
// window's filter reads pixels outside the image.
void resize_aa_into(const uint8_t* image, int64_t C, int64_t H, int64_t W, int64_t row_stride, int64_t readable,
                    int64_t full_out_h, int64_t full_out_w, int64_t out_top, int64_t out_left, int64_t out_h,
                    int64_t out_w, int64_t full_in_h, int64_t full_in_w, int64_t in_top, int64_t in_left,
                    double scale_h, double scale_w, bool antialias, bool hflip, uint8_t* out,
                    int64_t filter = kResizeBilinear);


}  // namespace fastprep
