// C++ side shared by the JPEG ops: argument checks, the decoder handle, errors.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>

#include "jpeg_common.h"

namespace fastprep {

// Decode failures carry this prefix; fastprep/io.py turns them into fastprep.io.DecodeError.
#define FASTPREP_DECODE_ERROR_PREFIX "fastprep.DecodeError: "

// The calling thread's pending libjpeg warning (corrupt but decodable data). The ops run in
// the caller's thread; fastprep/io.py takes it right after the call (fastprep._C.take_warning)
// and issues a Python warning. TORCH_WARN is not used: calls through torch.ops do not route
// it to Python's warnings and it would print to stderr.
std::string& thread_warning();

class Decoder {
 public:
  explicit Decoder(bool strict) : dec_(fp_create(strict ? 1 : 0)) {
    TORCH_CHECK(dec_ != nullptr, FASTPREP_DECODE_ERROR_PREFIX, "could not allocate a JPEG decoder");
  }
  ~Decoder() { fp_destroy(dec_); }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
  fp_decoder* get() const { return dec_; }

 private:
  fp_decoder* dec_;
};

inline void check_data(const at::Tensor& data) {
  TORCH_CHECK_TYPE(data.scalar_type() == at::kByte, "data must be a uint8 tensor, got ",
                   data.scalar_type());
  TORCH_CHECK_VALUE(data.dim() == 1, "data must be a 1-D tensor, got ", data.dim(), " dimensions");
  TORCH_CHECK_VALUE(data.device().is_cpu(), "data must be on the CPU, got ", data.device());
  TORCH_CHECK_VALUE(data.is_contiguous(), "data must be contiguous, got strides ", data.strides());
}

inline void check_mode(int64_t mode) {
  TORCH_CHECK_VALUE(mode == FP_MODE_UNCHANGED || mode == FP_MODE_GRAY || mode == FP_MODE_RGB ||
                        mode == FP_MODE_YCBCR,
                    "mode must be 0 (UNCHANGED), 1 (GRAY), 3 (RGB) or 4 (YCbCr), got ", mode);
}

inline void check_scale(int64_t scale_num) {
  TORCH_CHECK_VALUE(scale_num >= 1 && scale_num <= 8,
                    "scale_num must be in [1, 8] (the output is scale_num/8 of the size), got ",
                    scale_num);
}

inline fp_info read_header(const Decoder& dec, const at::Tensor& data) {
  fp_info info;
  if (fp_read_header(dec.get(), data.data_ptr<uint8_t>(), (size_t)data.numel(), &info) != FP_OK)
    TORCH_CHECK(false, FASTPREP_DECODE_ERROR_PREFIX, fp_message(dec.get()));
  return info;
}

// Decode a window of an image whose header `dec` has read, at scale_num/8 of the size
// (window in scaled coordinates). Window bounds and scale_num must be checked.
inline at::Tensor decode_window(const Decoder& dec, const fp_info& info, int64_t mode,
                                int64_t top, int64_t left, int64_t height, int64_t width,
                                int64_t max_pixels, int64_t scale_num = 8) {
  // Before any allocation: headers can declare 65500x65500 in a few bytes of data.
  const int64_t pixels = info.height * info.width;
  TORCH_CHECK(max_pixels <= 0 || pixels <= max_pixels, FASTPREP_DECODE_ERROR_PREFIX, "image is ",
              info.height, "x", info.width, " = ", pixels, " pixels, more than max_pixels=",
              max_pixels);
  thread_warning().clear();  // a warning left by a direct torch.ops call must not leak into this one
  const int channels = fp_output_channels(&info, (int)mode);
  TORCH_CHECK(channels > 0, FASTPREP_DECODE_ERROR_PREFIX, "cannot decode a JPEG with ",
              info.components, " components (libjpeg colour space ", info.color_space,
              ") in mode ", mode);
  at::Tensor out = at::empty({channels, height, width}, at::kByte);
  fp_set_scale(dec.get(), (int)scale_num);
  if (fp_decode_window(dec.get(), (int)mode, top, left, height, width, out.data_ptr<uint8_t>()) !=
      FP_OK)
    TORCH_CHECK(false, FASTPREP_DECODE_ERROR_PREFIX, fp_message(dec.get()));
  const int nwarn = fp_warning_count(dec.get());
  if (nwarn > 0)
    thread_warning() = std::string(fp_first_warning(dec.get())) + " (" + std::to_string(nwarn) +
                       " libjpeg warning(s); the image may be damaged; strict=True raises instead)";
  return out;
}

}  // namespace fastprep
