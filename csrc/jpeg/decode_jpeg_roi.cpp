// torch.ops.fastprep.decode_jpeg_roi: a window of the image at scale_num/8 of its size
// (window in scaled coordinates), bit-identical to a full decode at that scale sliced to
// the same window (see jpeg_decoder.cpp for how). Files whose restart intervals tile the
// MCU rows take a faster path at every scale (restart_index.h): only the intervals the
// window needs are decoded, and in files with an interval index (fastprep.pack) only their
// bytes are read.
#include <torch/library.h>

#include <functional>
#include <vector>

#include "exit_gate.h"
#include "jpeg/decode_jpeg_roi.h"
#include "jpeg/jpeg_ops.h"
#include "jpeg/restart_index.h"

namespace fastprep {

namespace {

// The window decoded from a spliced stream of the intervals it needs, into out_buffer(); false
// when the file does not allow it or anything about its markers is inconsistent (the
// buffer may hold a partial decode then); the caller then takes the sequential path, which
// reports errors and warnings as usual. The spliced stream is decoded strictly: any
// libjpeg warning means "fall back". A strict decode does not take the interval index
// alone: it scans the whole scan's markers, as for a file without an index, so that a
// marker created by damage outside the window (which no check of the index's offsets can
// see, restart_index.h) sends it to the sequential path, which raises where a full decode
// up to the window's rows would.
bool decode_restart_roi(const uint8_t* bytes, size_t size, const fp_info& info, int64_t mode, int64_t top,
                        int64_t left, int64_t height, int64_t width, int64_t scale_num, bool channels_last,
                        bool strict, const std::function<uint8_t*()>& out_buffer) {
  if (info.progressive) return false;
  const RestartLayout layout = parse_restart_layout(bytes, size);
  if (!layout.eligible || layout.height != info.height || layout.width != info.width) return false;
  SplicePlan plan;
  if (!plan_splice(layout, top, left, height, width, (int)scale_num, &plan)) return false;
  RestartStats& stats = restart_stats();
  // The interval index (packed files) gives the window's intervals without a scan of the
  // whole file; anything it gets wrong makes it scan instead.
  std::vector<IntervalSpan> spans;
  const bool indexed = !strict && spans_from_index(bytes, size, layout, plan, &spans);
  if (!indexed) {
    if (!strict && layout.has_index_segment) stats.index_rejected++;
    std::vector<size_t> starts, ends;
    if (!find_restart_intervals(bytes, size, layout, &starts, &ends)) {
      stats.fallbacks++;
      return false;
    }
    spans_from_scan(starts, ends, plan, &spans);
  }
  std::vector<uint8_t> spliced;
  write_splice(bytes, layout, spans, plan, &spliced);
  Decoder dec(true);
  fp_info sub;
  const int channels = fp_output_channels(&info, (int)mode);
  if (fp_read_header(dec.get(), spliced.data(), spliced.size(), &sub) != FP_OK || sub.progressive ||
      sub.height != plan.height || sub.width != plan.width || sub.color_space != info.color_space ||
      sub.adobe != info.adobe || channels <= 0 || fp_output_channels(&sub, (int)mode) != channels) {
    stats.fallbacks++;
    return false;
  }
  uint8_t* out = out_buffer();
  fp_set_scale(dec.get(), (int)scale_num);
  // The plan's origin is a multiple of the MCU size: a whole number of scaled pixels.
  const int64_t y0 = plan.y0 * scale_num / 8, x0 = plan.x0 * scale_num / 8;
  if (fp_decode_window(dec.get(), (int)mode, top - y0, left - x0, height, width, out,
                       channels_last ? 1 : 0) != FP_OK ||
      fp_warning_count(dec.get()) != 0) {
    stats.fallbacks++;
    return false;
  }
  stats.taken++;
  if (indexed) stats.index_used++;
  return true;
}

}  // namespace

void decode_roi_into(const Decoder& dec, const fp_info& info, const uint8_t* bytes, size_t size,
                     int64_t mode, int64_t top, int64_t left, int64_t height, int64_t width,
                     int64_t max_pixels, int64_t scale_num, int64_t max_scans, bool channels_last,
                     const std::function<uint8_t*()>& out_buffer) {
  if (max_pixels <= 0 || info.height * info.width <= max_pixels) {
    thread_warning().clear();
    if (decode_restart_roi(bytes, size, info, mode, top, left, height, width, scale_num, channels_last,
                           fp_is_strict(dec.get()) != 0, out_buffer))
      return;
  }
  decodable_channels(info, mode, max_pixels);
  decode_window_into(dec, mode, top, left, height, width, scale_num, max_scans, channels_last,
                     out_buffer());
}

at::Tensor decode_jpeg_roi(const at::Tensor& data, int64_t top, int64_t left, int64_t height,
                           int64_t width, int64_t mode, int64_t max_pixels, bool strict,
                           int64_t scale_num, int64_t max_scans, bool channels_last) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
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
  check_window_fits(info, top, left, height, width, scale_num);
  at::Tensor out;
  // allocated once, when decoding starts (after the header checks: no memory for bombs)
  auto buffer = [&]() -> uint8_t* {
    if (!out.defined())
      out = empty_image(fp_output_channels(&info, (int)mode), height, width, channels_last);
    return out.data_ptr<uint8_t>();
  };
  decode_roi_into(dec, info, data.data_ptr<uint8_t>(), (size_t)data.numel(), mode, top, left, height,
                  width, max_pixels, scale_num, max_scans, channels_last, buffer);
  return out;
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("decode_jpeg_roi", &decode_jpeg_roi); }

}  // namespace fastprep
