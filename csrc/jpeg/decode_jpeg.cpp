// torch.ops.fastprep.decode_jpeg: the whole image, at scale_num/8 of its size.
#include <torch/library.h>

#include "exit_gate.h"
#include "jpeg/jpeg_ops.h"

namespace fastprep {

at::Tensor decode_jpeg(const at::Tensor& data, int64_t mode, int64_t max_pixels, bool strict,
                       int64_t scale_num, int64_t max_scans, bool channels_last) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  check_data(data);
  check_mode(mode);
  check_scale(scale_num);
  check_max_scans(max_scans);
  Decoder dec(strict);
  const fp_info info = read_header(dec, data);
  return decode_window(dec, info, mode, 0, 0, fp_scaled_size(info.height, (int)scale_num),
                       fp_scaled_size(info.width, (int)scale_num), max_pixels, scale_num,
                       max_scans, channels_last);
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("decode_jpeg", &decode_jpeg); }

}  // namespace fastprep
