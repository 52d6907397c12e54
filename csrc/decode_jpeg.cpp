// torch.ops.fastprep.decode_jpeg: the whole image.
#include <torch/library.h>

#include "jpeg_ops.h"

namespace fastprep {

at::Tensor decode_jpeg(const at::Tensor& data, int64_t mode, int64_t max_pixels, bool strict) {
  check_data(data);
  check_mode(mode);
  Decoder dec(strict);
  const fp_info info = read_header(dec, data);
  return decode_window(dec, info, mode, 0, 0, info.height, info.width, max_pixels);
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("decode_jpeg", &decode_jpeg); }

}  // namespace fastprep
