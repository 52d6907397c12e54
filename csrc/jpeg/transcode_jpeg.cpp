// torch.ops.fastprep.transcode_jpeg: lossless re-encoding for restart-interval ROI decode.
#include <torch/library.h>

#include <string.h>

#include <vector>

#include "exit_gate.h"
#include "jpeg/jpeg_ops.h"
#include "jpeg/jpeg_transcoder.h"
#include "jpeg/restart_index.h"

namespace fastprep {

at::Tensor transcode_jpeg(const at::Tensor& data, int64_t restart_interval, bool optimize,
                          bool keep_metadata, int64_t max_pixels, bool interval_index) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  check_data(data);
  TORCH_CHECK_VALUE(restart_interval >= -1 && restart_interval <= 65535,
                    "restart_interval must be in [0, 65535] MCUs or -1 (automatic), got ",
                    restart_interval);
  fp_transcode_result res;
  if (fp_transcode(data.data_ptr<uint8_t>(), (size_t)data.numel(), (int)restart_interval,
                   optimize ? 1 : 0, keep_metadata ? 1 : 0, max_pixels, &res) != FP_OK)
    TORCH_CHECK(false, FASTPREP_DECODE_ERROR_PREFIX, res.message);
  // Files the restart-interval path cannot take get no index (add_interval_index says no).
  std::vector<uint8_t> indexed;
  const bool has_index = interval_index && add_interval_index(res.data, res.size, &indexed);
  const uint8_t* bytes = has_index ? indexed.data() : res.data;
  const size_t size = has_index ? indexed.size() : res.size;
  at::Tensor out = at::empty({(int64_t)size}, at::kByte);
  memcpy(out.data_ptr<uint8_t>(), bytes, size);
  fp_transcode_free(&res);
  return out;
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("transcode_jpeg", &transcode_jpeg); }

}  // namespace fastprep
