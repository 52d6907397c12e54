// torch.ops.fastprep.jpeg_info: header fields without entropy decoding (jpeg_info.h names them).
#include "jpeg/jpeg_info.h"

#include <torch/library.h>

#include "jpeg/jpeg_ops.h"
#include "jpeg/restart_index.h"

namespace fastprep {

at::Tensor jpeg_info(const at::Tensor& data) {
  check_data(data);
  Decoder dec(false);
  const fp_info info = read_header(dec, data);
  at::Tensor out = at::empty({kJpegInfoFields}, at::kLong);
  int64_t* v = out.data_ptr<int64_t>();
  v[kInfo_height] = info.height;
  v[kInfo_width] = info.width;
  v[kInfo_components] = info.components;
  v[kInfo_color_space] = info.color_space;
  v[kInfo_progressive] = info.progressive;
  v[kInfo_arithmetic] = info.arithmetic;
  v[kInfo_adobe] = info.adobe;
  static_assert(kInfo_v_samp3 - kInfo_h_samp0 == 7, "h_samp0, v_samp0, ..., v_samp3 are consecutive");
  for (int c = 0; c < 4; c++) {
    v[kInfo_h_samp0 + 2 * c] = info.h_samp[c];
    v[kInfo_v_samp0 + 2 * c] = info.v_samp[c];
  }
  const RestartLayout layout =
      parse_restart_layout(data.data_ptr<uint8_t>(), (size_t)data.numel());
  v[kInfo_restart_interval] = layout.parsed ? layout.restart_interval : 0;
  v[kInfo_restart_roi] = layout.eligible && !info.progressive ? 1 : 0;
  return out;
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("jpeg_info", &jpeg_info); }

}  // namespace fastprep
