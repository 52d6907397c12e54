// torch.ops.fastprep.jpeg_info: header fields without entropy decoding.
#include <torch/library.h>

#include "jpeg_ops.h"
#include "restart_index.h"

namespace fastprep {

at::Tensor jpeg_info(const at::Tensor& data) {
  check_data(data);
  Decoder dec(false);
  const fp_info info = read_header(dec, data);
  at::Tensor out = at::empty({17}, at::kLong);
  int64_t* v = out.data_ptr<int64_t>();
  const int64_t head[7] = {info.height, info.width, info.components, info.color_space,
                           info.progressive, info.arithmetic, info.adobe};
  for (int i = 0; i < 7; i++) v[i] = head[i];
  for (int c = 0; c < 4; c++) {
    v[7 + 2 * c] = info.h_samp[c];
    v[8 + 2 * c] = info.v_samp[c];
  }
  const RestartLayout layout =
      parse_restart_layout(data.data_ptr<uint8_t>(), (size_t)data.numel());
  v[15] = layout.parsed ? layout.restart_interval : 0;
  v[16] = layout.eligible && !info.progressive ? 1 : 0;
  return out;
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("jpeg_info", &jpeg_info); }

}  // namespace fastprep
