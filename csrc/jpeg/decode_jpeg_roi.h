// decode_jpeg_roi's decode after its argument checks, for callers that own their output
// buffer (the batch op). See decode_jpeg_roi.cpp.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <functional>

#include "jpeg/jpeg_ops.h"

namespace fastprep {

// The window of the image in `bytes` (whose header `dec` has read into `info`) through the
// restart-interval path when the file allows it, else decode_window. out_buffer() is called
// once, right before pixels are written, and returns where the channels x height x width
// bytes go.
void decode_roi_into(const Decoder& dec, const fp_info& info, const uint8_t* bytes, size_t size,
                     int64_t mode, int64_t top, int64_t left, int64_t height, int64_t width,
                     int64_t max_pixels, int64_t scale_num, int64_t max_scans, bool channels_last,
                     const std::function<uint8_t*()>& out_buffer);

}  // namespace fastprep
