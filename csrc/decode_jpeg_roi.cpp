// torch.ops.fastprep.decode_jpeg_roi: a window of the image at scale_num/8 of its size
// (window in scaled coordinates), bit-identical to a full decode at that scale sliced to
// the same window (see jpeg_decoder.cpp for how).
#include <torch/library.h>

#include "jpeg_ops.h"

namespace fastprep {

at::Tensor decode_jpeg_roi(const at::Tensor& data, int64_t top, int64_t left, int64_t height,
                           int64_t width, int64_t mode, int64_t max_pixels, bool strict,
                           int64_t scale_num, int64_t max_scans) {
  check_data(data);
  check_mode(mode);
  check_scale(scale_num);
  check_max_scans(max_scans);
  TORCH_CHECK_VALUE(height > 0 && width > 0, "window height and width must be positive, got ",
                    height, "x", width);
  TORCH_CHECK_VALUE(top >= 0 && left >= 0, "window top and left must be >= 0, got top=", top,
                    ", left=", left);
  Decoder dec(strict);
  const fp_info info = read_header(dec, data);
  const int64_t h = fp_scaled_size(info.height, (int)scale_num);
  const int64_t w = fp_scaled_size(info.width, (int)scale_num);
  TORCH_CHECK_VALUE(top < h && height <= h - top && left < w && width <= w - left, "window (top=",
                    top, ", left=", left, ", height=", height, ", width=", width,
                    ") does not fit in the ", h, "x", w, " image",
                    scale_num == 8 ? "" : " (its size at the requested DCT scale)");
  return decode_window(dec, info, mode, top, left, height, width, max_pixels, scale_num, max_scans);
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("decode_jpeg_roi", &decode_jpeg_roi); }

}  // namespace fastprep
