// Lossless JPEG transcoding (libjpeg read_coefficients -> write_coefficients), behind a C
// interface like jpeg_decoder.h: the libjpeg calls and their setjmp live in
// jpeg_transcoder.cpp, in frames without C++ objects that have destructors.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fp_transcode_result {
  uint8_t* data;  // malloc'ed output (free with fp_transcode_free); NULL on error
  size_t size;
  int restart_interval;  // the interval written, in MCUs
  char message[256];     // the reason on error
} fp_transcode_result;

// Re-encode `data` without touching its DCT coefficients: one sequential scan, Huffman
// tables optimized if `optimize`, a restart marker every `restart_interval` MCUs (0: none;
// -1: automatic, intervals about 64 pixels wide that tile the MCU rows), APPn/COM
// markers copied if `keep_metadata`. Images with more than `max_pixels` pixels (if > 0)
// are refused. Any libjpeg warning (corrupt data) is an error, and so is a progressive file
// whose scans leave coefficients incomplete (decoders estimate those; a sequential copy
// would decode differently). Returns FP_OK or FP_ERROR.
int fp_transcode(const uint8_t* data, size_t size, int restart_interval, int optimize,
                 int keep_metadata, int64_t max_pixels, fp_transcode_result* result);

void fp_transcode_free(fp_transcode_result* result);

#ifdef __cplusplus
}
#endif
