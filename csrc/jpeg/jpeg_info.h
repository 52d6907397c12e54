// torch.ops.fastprep.jpeg_info's result: an int64 [kJpegInfoFields] tensor with one element
// per field below, in this order. fastprep/_ops.py's JpegHeader names the same fields in
// the same order; fastprep._C.jpeg_info_fields (from this list) lets a test compare them.
#pragma once

namespace fastprep {

// X(name): height, width: pixels; components: in the file; color_space: libjpeg's
// J_COLOR_SPACE of the file; progressive, arithmetic, adobe (an Adobe APP14 marker was seen):
// 1/0; h_sampN, v_sampN: sampling factors of component N (0 where absent);
// restart_interval: MCUs per interval (0: none); restart_roi: decode_jpeg_roi's
// restart-interval path applies (1/0).
#define FASTPREP_JPEG_INFO_FIELDS(X)                                                           \
  X(height) X(width) X(components) X(color_space) X(progressive) X(arithmetic) X(adobe)       \
  X(h_samp0) X(v_samp0) X(h_samp1) X(v_samp1) X(h_samp2) X(v_samp2) X(h_samp3) X(v_samp3)     \
  X(restart_interval) X(restart_roi)

enum JpegInfoField : int {
#define FASTPREP_JPEG_INFO_ENUM(name) kInfo_##name,
  FASTPREP_JPEG_INFO_FIELDS(FASTPREP_JPEG_INFO_ENUM)
#undef FASTPREP_JPEG_INFO_ENUM
  kJpegInfoFields
};

// The field names, indexed by JpegInfoField.
inline constexpr const char* kJpegInfoFieldNames[kJpegInfoFields] = {
#define FASTPREP_JPEG_INFO_NAME(name) #name,
    FASTPREP_JPEG_INFO_FIELDS(FASTPREP_JPEG_INFO_NAME)
#undef FASTPREP_JPEG_INFO_NAME
};

}  // namespace fastprep
