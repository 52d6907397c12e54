// torch.ops.fastprep.jpeg_info: header fields without entropy decoding.
#include <torch/library.h>

#include "jpeg_ops.h"

namespace fastprep {

std::vector<int64_t> jpeg_info(const at::Tensor& data) {
  check_data(data);
  Decoder dec(false);
  const fp_info info = read_header(dec, data);
  std::vector<int64_t> out = {info.height, info.width, info.components, info.color_space,
                              info.progressive, info.arithmetic, info.adobe};
  for (int c = 0; c < 4; c++) {
    out.push_back(info.h_samp[c]);
    out.push_back(info.v_samp[c]);
  }
  return out;
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("jpeg_info", &jpeg_info); }

}  // namespace fastprep
