// Shared libjpeg-turbo helpers for the fastprep ops.
//
// Every libjpeg call lives in jpeg_decoder.cpp behind this C interface. libjpeg reports
// fatal errors by longjmp; the setjmp for each entry point is in that file, in frames that
// hold no C++ objects with destructors, so a longjmp never skips a destructor. The C++ op
// wrappers call these functions, check the returned status and raise.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Output modes; the numbers are part of the op schema (fastprep/io.py mirrors them).
enum fp_mode {
  FP_MODE_UNCHANGED = 0,  // channels as stored: gray 1, YCbCr/RGB -> RGB 3, CMYK/YCCK -> CMYK 4
  FP_MODE_GRAY = 1,       // 1 channel
  FP_MODE_RGB = 3,        // 3 channels; gray expanded, CMYK/YCCK converted
  FP_MODE_YCBCR = 4,      // 3 channels, JFIF YCbCr straight from the decoder (no RGB round trip)
};

enum fp_status {
  FP_OK = 0,
  FP_ERROR = 1,  // libjpeg error or corrupt/truncated data; message in fp_message()
};

typedef struct fp_info {
  int64_t height;
  int64_t width;
  int components;     // components in the file
  int color_space;    // libjpeg J_COLOR_SPACE of the file
  int progressive;
  int arithmetic;
  int adobe;          // an Adobe APP14 marker was seen (CMYK stored inverted)
  int h_samp[4];
  int v_samp[4];
} fp_info;

typedef struct fp_decoder fp_decoder;

// Progression checks, run on each scan's header before its data by the decoder and by the
// transcoder alike, so that a file one of them refuses the other refuses too: an AC scan
// of a component before any DC scan of it, and a scan that adds no coefficient bit (a
// repeat: valid to libjpeg, written by no encoder, and a full pass over the image each).
#define FP_SCAN_COMPONENTS 10  // libjpeg's MAX_COMPONENTS
typedef struct fp_scan_tracker {
  int seen_scans;  // input_scan_number already checked
  // Lowest successive-approximation bit received so far per component and coefficient
  // (-1: none yet).
  signed char known[FP_SCAN_COMPONENTS][64];
} fp_scan_tracker;
struct jpeg_decompress_struct;
void fp_scan_tracker_init(fp_scan_tracker* t);
// The number of the scan whose header was just read, once per scan; else 0.
int fp_new_scan(fp_scan_tracker* t, struct jpeg_decompress_struct* cinfo);
// 1 with the reason in `message` when the current scan is refused (above); else 0.
int fp_scan_refused(fp_scan_tracker* t, struct jpeg_decompress_struct* cinfo, char* message, size_t size);

// All functions are thread-safe for distinct decoders; nothing is global.
fp_decoder* fp_create(int strict);
void fp_destroy(fp_decoder* dec);
// Whether the decoder turns libjpeg warnings into errors (fp_create's `strict`).
int fp_is_strict(const fp_decoder* dec);

// Parse the headers of `data` (no entropy decoding). The buffer must outlive the decoder.
int fp_read_header(fp_decoder* dec, const uint8_t* data, size_t size, fp_info* info);

// Number of output channels for `mode` given the parsed header (0 if unsupported).
int fp_output_channels(const fp_info* info, int mode);

// DCT scaling: decode at scale_num/8 of the size (1 <= scale_num <= 8; default 8). The
// output is ceil(dimension * scale_num / 8) pixels in each direction (libjpeg's rule,
// fp_scaled_size). Set before fp_decode_window; window coordinates are then scaled ones.
void fp_set_scale(fp_decoder* dec, int scale_num);
int64_t fp_scaled_size(int64_t dimension, int scale_num);

// Interleaved 3-channel pixels (`width` of them) to three planes; vectorized for the CPU at
// run time (isa.h's FP_VECTOR_CLONES).
void fp_deinterleave3(const uint8_t* row, int64_t width, uint8_t* o0, uint8_t* o1, uint8_t* o2);

// Refuse files with more than `max_scans` scans (0: no limit), counted as each scan's
// header is read, before its data is decoded. Whatever the limit, a scan that adds no
// coefficient bit to what earlier scans carried (a repeat) and a progressive AC scan of a
// component before its DC scan are refused. Set before fp_decode_window.
void fp_set_max_scans(fp_decoder* dec, int max_scans);


// Decode rows [top, top+height) and columns [left, left+width) into `out`, a contiguous
// uint8 buffer: channels x height x width (planar), or height x width x channels
// (interleaved, libjpeg's own scanline layout: copied, not rearranged) when channels_last.
// The window must lie inside the image. Call after fp_read_header, at most once.
int fp_decode_window(fp_decoder* dec, int mode, int64_t top, int64_t left, int64_t height,
                     int64_t width, uint8_t* out, int channels_last);

// Last error message (valid until fp_destroy).
const char* fp_message(const fp_decoder* dec);
// Number of corrupt-data warnings seen (non-strict mode) and the first one's text.
int fp_warning_count(const fp_decoder* dec);
const char* fp_first_warning(const fp_decoder* dec);

const char* fp_libjpeg_version(void);

#ifdef __cplusplus
}
#endif
