// C++ side shared by the JPEG ops: argument checks, the decoder handle, errors
// (jpeg_ops.cpp holds the out-of-line part).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "jpeg/jpeg_decoder.h"

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

// Why a file cannot be decoded in `mode`, in the user's terms (mode and colour space
// names, what to pass instead). Colour space numbers are libjpeg's J_COLOR_SPACE.
inline std::string unsupported_mode_message(const fp_info& info, int64_t mode) {
  static const char* const spaces[] = {"unknown", "grayscale", "RGB", "YCbCr", "CMYK", "YCCK"};
  const char* mode_name = mode == FP_MODE_UNCHANGED ? "UNCHANGED"
                          : mode == FP_MODE_GRAY    ? "GRAY"
                          : mode == FP_MODE_RGB     ? "RGB"
                                                    : "YCbCr";
  const int cs = info.color_space;
  if (cs < 1 || cs > 5)
    return "the JPEG has " + std::to_string(info.components) +
           " components in a colour space libjpeg does not know, so it cannot be decoded (mode='" +
           mode_name + "'); fastprep decodes grayscale, YCbCr, RGB, CMYK and YCCK JPEGs";
  std::string out = std::string(cs == 2 ? "an " : "a ") + spaces[cs] + " JPEG cannot be decoded to " +
                    (mode == FP_MODE_YCBCR ? "YCbCr" : mode_name) + "; use mode='RGB'";
  if (cs == 4 || cs == 5) out += " (converted) or mode='UNCHANGED' (the 4 CMYK channels)";
  return out;
}

inline void check_max_scans(int64_t max_scans) {
  TORCH_CHECK_VALUE(max_scans >= 0, "max_scans must be >= 0 (0 = no limit), got ", max_scans);
}

// What fastprep.io.DecodeError says for an error whose text is `what`: the text after the
// prefix (or all of it), first line, trimmed.
inline std::string decode_error_text(const char* what) {
  std::string msg(what);
  const std::string prefix = FASTPREP_DECODE_ERROR_PREFIX;
  const size_t at = msg.find(prefix);
  if (at != std::string::npos) msg = msg.substr(at + prefix.size());
  const size_t nl = msg.find('\n');
  if (nl != std::string::npos) msg.resize(nl);
  const size_t a = msg.find_first_not_of(" \t\r"), z = msg.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : msg.substr(a, z - a + 1);
}

// The per-sample statuses of a batch op as (status [N, 3] int64: code, offset and length of
// the sample's message in text; text: a uint8 [M] buffer of the UTF-8 messages).
inline std::tuple<at::Tensor, at::Tensor> status_table(const std::vector<int8_t>& codes,
                                                       const std::vector<std::string>& messages) {
  const int64_t N = (int64_t)codes.size();
  at::Tensor status = at::empty({N, 3}, at::kLong);
  int64_t* sv = status.data_ptr<int64_t>();
  int64_t total = 0;
  for (int64_t i = 0; i < N; i++) {
    sv[3 * i] = codes[i];
    sv[3 * i + 1] = total;
    sv[3 * i + 2] = (int64_t)messages[i].size();
    total += (int64_t)messages[i].size();
  }
  at::Tensor text = at::empty({total}, at::kByte);
  uint8_t* tp = text.data_ptr<uint8_t>();
  for (int64_t i = 0; i < N; i++)
    if (!messages[i].empty()) std::memcpy(tp + sv[3 * i + 1], messages[i].data(), messages[i].size());
  return {status, text};
}

inline fp_info read_header(const Decoder& dec, const uint8_t* bytes, size_t size) {
  fp_info info;
  if (fp_read_header(dec.get(), bytes, size, &info) != FP_OK)
    TORCH_CHECK(false, FASTPREP_DECODE_ERROR_PREFIX, fp_message(dec.get()));
  return info;
}

inline fp_info read_header(const Decoder& dec, const at::Tensor& data) {
  return read_header(dec, data.data_ptr<uint8_t>(), (size_t)data.numel());
}

// A window (top, left >= 0; height, width > 0) inside the image at scale_num/8 of its size.
inline void check_window_fits(const fp_info& info, int64_t top, int64_t left, int64_t height,
                              int64_t width, int64_t scale_num) {
  const int64_t h = fp_scaled_size(info.height, (int)scale_num);
  const int64_t w = fp_scaled_size(info.width, (int)scale_num);
  TORCH_CHECK_VALUE(top < h && height <= h - top && left < w && width <= w - left, "window (top=",
                    top, ", left=", left, ", height=", height, ", width=", width,
                    ") does not fit in the ", h, "x", w, " image",
                    scale_num == 8 ? "" : " (its size at the requested DCT scale)");
}

// A [channels, height, width] uint8 tensor; its memory is [height, width, channels]
// (torch.channels_last for 3 and 4 channels) when channels_last.
inline at::Tensor empty_image(int64_t channels, int64_t height, int64_t width, bool channels_last) {
  if (channels_last) return at::empty({height, width, channels}, at::kByte).permute({2, 0, 1});
  return at::empty({channels, height, width}, at::kByte);
}

// The output channels of decoding the image in `mode`; raises the DecodeError of a file
// over max_pixels (0: no limit) or one that `mode` cannot take. Call before allocating
// pixel memory: headers can declare 65500x65500 in a few bytes of data.
inline int decodable_channels(const fp_info& info, int64_t mode, int64_t max_pixels) {
  const int64_t pixels = info.height * info.width;
  TORCH_CHECK(max_pixels <= 0 || pixels <= max_pixels, FASTPREP_DECODE_ERROR_PREFIX, "image is ",
              info.height, "x", info.width, " = ", pixels, " pixels, more than max_pixels=",
              max_pixels, "; pass a larger max_pixels (0: no limit) to decode it");
  const int channels = fp_output_channels(&info, (int)mode);
  TORCH_CHECK(channels > 0, FASTPREP_DECODE_ERROR_PREFIX, unsupported_mode_message(info, mode));
  return channels;
}

// decode_window into `out`: channels x height x width bytes (decodable_channels), planar
// or (channels_last) interleaved.
inline void decode_window_into(const Decoder& dec, int64_t mode, int64_t top, int64_t left,
                               int64_t height, int64_t width, int64_t scale_num,
                               int64_t max_scans, bool channels_last, uint8_t* out) {
  thread_warning().clear();  // a warning left by a direct torch.ops call must not leak into this one
  fp_set_scale(dec.get(), (int)scale_num);
  fp_set_max_scans(dec.get(), max_scans > INT32_MAX ? 0 : (int)max_scans);
  if (fp_decode_window(dec.get(), (int)mode, top, left, height, width, out, channels_last ? 1 : 0) !=
      FP_OK)
    TORCH_CHECK(false, FASTPREP_DECODE_ERROR_PREFIX, fp_message(dec.get()));
  const int nwarn = fp_warning_count(dec.get());
  if (nwarn > 0)
    thread_warning() = std::string(fp_first_warning(dec.get())) + " (" + std::to_string(nwarn) +
                       " libjpeg warning(s); the image may be damaged; strict=True raises instead)";
}

// Decode a window of an image whose header `dec` has read, at scale_num/8 of the size
// (window in scaled coordinates), refusing files with more than max_scans scans (0: no
// limit), into planar or (channels_last) interleaved memory. Window bounds and scale_num
// must be checked.
inline at::Tensor decode_window(const Decoder& dec, const fp_info& info, int64_t mode,
                                int64_t top, int64_t left, int64_t height, int64_t width,
                                int64_t max_pixels, int64_t scale_num = 8, int64_t max_scans = 0,
                                bool channels_last = false) {
  const int channels = decodable_channels(info, mode, max_pixels);
  at::Tensor out = empty_image(channels, height, width, channels_last);
  decode_window_into(dec, mode, top, left, height, width, scale_num, max_scans, channels_last,
                     out.data_ptr<uint8_t>());
  return out;
}

}  // namespace fastprep
