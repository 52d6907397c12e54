// libjpeg-turbo glue, written in the C subset: no C++ object with a destructor may live
// in a frame that calls setjmp, because libjpeg's error path longjmps back to it.
//
// ROI decoding is exact (bit-identical to a full decode at the same DCT scale, sliced):
// the decoder is asked for a window aligned to the iMCU grid (at the output scale) and
// padded so that the crop's first and last columns and the first row after the skip --
// where fancy upsampling lacks neighbours -- are never needed pixels, and rows are skipped
// only in whole iMCU rows (libjpeg-turbo 2.1's jpeg_skip_scanlines returns wrong context
// when a skip does not end on a row-group boundary). Progressive files whose first AC
// coefficients are not all fully refined go through libjpeg's block smoothing, which
// estimates them from the DC values of the blocks up to two block columns and rows away
// and treats the crop's left edge as an image edge: there the crop starts two iMCU
// columns further left, so that every block of every component holding a needed pixel
// sees the same neighbours as in the full decode. (Rows need nothing: the coefficient
// buffer holds every row, and the right side reads blocks beyond the crop.) Rows below
// the window are never decoded (jpeg_abort_decompress).

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg/jpeg_decoder.h"

static_assert(MAX_COMPONENTS == FP_SCAN_COMPONENTS, "fp_scan_tracker holds MAX_COMPONENTS components");

#ifndef FASTPREP_LIBJPEG_VERSION
#define FASTPREP_LIBJPEG_VERSION "unknown"
#endif

struct fp_error_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
};

struct fp_source_mgr {
  struct jpeg_source_mgr pub;
  int eof_hit;              // the decoder asked for bytes past the end of the buffer
  JDIMENSION eof_imcu_row;  // the iMCU row being entropy-decoded when that first happened
};

// Scans: counted and checked by the progress monitor, which libjpeg calls before each
// step of input; a new scan shows up there after its header is parsed, before its data.
struct fp_progress_mgr {
  struct jpeg_progress_mgr pub;
  int max_scans;  // 0: no limit
  fp_scan_tracker scans;
};

struct fp_decoder {
  struct jpeg_decompress_struct cinfo;
  struct fp_error_mgr err;
  struct fp_source_mgr src;
  struct fp_progress_mgr progress;
  int created;
  int strict;
  int scale_num;
  int header_read;
  int decoding;
  int whole_image;  // the window being decoded is the whole (scaled) image: errors say "image"
  int warnings;
  char message[JMSG_LENGTH_MAX + 96];
  char first_warning[JMSG_LENGTH_MAX];
  fp_info info;
};

static const JOCTET fp_fake_eoi[2] = {0xFF, JPEG_EOI};

static fp_decoder* decoder_of(j_common_ptr cinfo) {
  return (fp_decoder*)cinfo->client_data;
}

// A truncated file, in the terms of what was asked: a whole image (decode_jpeg) or a window.
static const char* truncation_message(const fp_decoder* dec, int window_rows_missing) {
  if (dec->whole_image)
    return "truncated JPEG data: premature end of data, the file ends before the end of the image";
  return window_rows_missing ? "truncated JPEG data: the file ends before the data the window needs"
                             : "truncated JPEG data: the requested window needs data past the end of the buffer";
}

static void fp_error_exit(j_common_ptr cinfo) {
  fp_decoder* dec = decoder_of(cinfo);
  (*cinfo->err->format_message)(cinfo, dec->message);
  longjmp(dec->err.jump, 1);
}

static void fp_fail(fp_decoder* dec, const char* msg) {
  snprintf(dec->message, sizeof(dec->message), "%s", msg);
  longjmp(dec->err.jump, 1);
}

// Never print: libjpeg's default writes warnings and traces to stderr.
static void fp_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void fp_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace messages
  fp_decoder* dec = decoder_of(cinfo);
  // Past the end of the buffer: Huffman decoding needed bits that are not there, or a
  // restart marker is missing.
  if ((cinfo->err->msg_code == JWRN_HIT_MARKER || cinfo->err->msg_code == JWRN_MUST_RESYNC) &&
      dec->src.eof_hit)
    fp_fail(dec, truncation_message(dec, 0));
  if (dec->strict) {
    char buf[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, buf);
    snprintf(dec->message, sizeof(dec->message), "%s (strict=True turns libjpeg warnings into errors)", buf);
    longjmp(dec->err.jump, 1);
  }
  if (dec->warnings++ == 0) (*cinfo->err->format_message)(cinfo, dec->first_warning);
}

static void fp_progress_monitor(j_common_ptr common) {
  j_decompress_ptr cinfo = (j_decompress_ptr)common;
  fp_decoder* dec = decoder_of(common);
  struct fp_progress_mgr* prog = &dec->progress;
  const int scan = fp_new_scan(&prog->scans, cinfo);
  if (scan == 0) return;
  if (prog->max_scans > 0 && scan > prog->max_scans) {
    snprintf(dec->message, sizeof(dec->message),
             "the JPEG has more than max_scans=%d scans (scan %d found); encoders write at most "
             "a few dozen, so this looks like a decode bomb. Pass a larger max_scans (0: no limit) "
             "to decode it anyway",
             prog->max_scans, scan);
    longjmp(dec->err.jump, 1);
  }
  if (fp_scan_refused(&prog->scans, cinfo, dec->message, sizeof(dec->message))) longjmp(dec->err.jump, 1);
}

static void fp_init_source(j_decompress_ptr cinfo) { (void)cinfo; }

// The whole image is in memory, so running out means the data is truncated. Never wait:
// feed a fake EOI so libjpeg stops, and remember that it happened.
static boolean fp_fill_input_buffer(j_decompress_ptr cinfo) {
  struct fp_source_mgr* src = (struct fp_source_mgr*)cinfo->src;
  if (!src->eof_hit) src->eof_imcu_row = cinfo->input_iMCU_row;
  src->eof_hit = 1;
  src->pub.next_input_byte = fp_fake_eoi;
  src->pub.bytes_in_buffer = 2;
  return TRUE;
}

static void fp_skip_input_data(j_decompress_ptr cinfo, long num_bytes) {
  struct jpeg_source_mgr* src = cinfo->src;
  if (num_bytes <= 0) return;
  if ((size_t)num_bytes > src->bytes_in_buffer) {
    fp_fill_input_buffer(cinfo);
    return;
  }
  src->next_input_byte += num_bytes;
  src->bytes_in_buffer -= (size_t)num_bytes;
}

static void fp_term_source(j_decompress_ptr cinfo) { (void)cinfo; }

extern "C" {

const char* fp_libjpeg_version(void) { return FASTPREP_LIBJPEG_VERSION; }

void fp_scan_tracker_init(fp_scan_tracker* t) {
  t->seen_scans = 0;
  memset(t->known, -1, sizeof(t->known));
}

int fp_new_scan(fp_scan_tracker* t, struct jpeg_decompress_struct* cinfo) {
  const int scan = cinfo->input_scan_number;
  if (scan <= t->seen_scans || cinfo->comps_in_scan <= 0) return 0;
  t->seen_scans = scan;
  return scan;
}

int fp_scan_refused(fp_scan_tracker* t, struct jpeg_decompress_struct* cinfo, char* message, size_t size) {
  // Sequential files: every scan carries all coefficient bits of its components.
  const int ss = cinfo->progressive_mode ? cinfo->Ss : 0;
  const int se = cinfo->progressive_mode ? cinfo->Se : DCTSIZE2 - 1;
  const int al = cinfo->progressive_mode ? cinfo->Al : 0;
  if (ss < 0 || se >= DCTSIZE2 || ss > se || al < 0) return 0;  // libjpeg rejects these itself
  const int scan = cinfo->input_scan_number;
  int adds = 0;
  for (int i = 0; i < cinfo->comps_in_scan; i++) {
    const int c = cinfo->cur_comp_info[i]->component_index;
    if (c < 0 || c >= FP_SCAN_COMPONENTS) return 0;
    // libjpeg only warns and decodes on without DC; such a scan is also the cheapest way
    // to make a pass over millions of blocks (no per-block DC bit), so refuse it here,
    // before any data of the scan is decoded.
    if (ss > 0 && t->known[c][0] < 0) {
      snprintf(message, size,
               "scan %d carries AC coefficients of component %d before any DC scan of it; a "
               "valid progressive JPEG sends DC first (corrupt data or a decode bomb)",
               scan, c + 1);
      return 1;
    }
    for (int k = ss; k <= se; k++) {
      signed char* bit = &t->known[c][k];
      if (*bit < 0 || al < *bit) {
        adds = 1;
        *bit = (signed char)(al < 127 ? al : 127);
      }
    }
  }
  if (adds) return 0;
  snprintf(message, size,
           "scan %d repeats coefficient data that earlier scans already carried (coefficients "
           "%d-%d, bit %d); no encoder writes this and decoding it costs a full pass over the "
           "image, so the file is refused as a decode bomb",
           scan, ss, se, al);
  return 1;
}

fp_decoder* fp_create(int strict) {
  fp_decoder* dec = (fp_decoder*)calloc(1, sizeof(fp_decoder));
  if (dec == NULL) return NULL;
  dec->strict = strict;
  dec->scale_num = 8;
  fp_scan_tracker_init(&dec->progress.scans);
  dec->progress.pub.progress_monitor = fp_progress_monitor;
  dec->cinfo.err = jpeg_std_error(&dec->err.pub);
  dec->err.pub.error_exit = fp_error_exit;
  dec->err.pub.emit_message = fp_emit_message;
  dec->err.pub.output_message = fp_output_message;
  dec->cinfo.client_data = dec;
  if (setjmp(dec->err.jump)) {
    free(dec);
    return NULL;
  }
  jpeg_create_decompress(&dec->cinfo);
  dec->cinfo.client_data = dec;
  dec->cinfo.progress = &dec->progress.pub;
  dec->created = 1;
  return dec;
}

int fp_is_strict(const fp_decoder* dec) { return dec->strict; }

void fp_destroy(fp_decoder* dec) {
  if (dec == NULL) return;
  if (dec->created) jpeg_destroy_decompress(&dec->cinfo);
  free(dec);
}

const char* fp_message(const fp_decoder* dec) { return dec->message; }

void fp_set_scale(fp_decoder* dec, int scale_num) {
  dec->scale_num = (scale_num >= 1 && scale_num <= 8) ? scale_num : 8;
}

int64_t fp_scaled_size(int64_t dimension, int scale_num) {
  return (dimension * scale_num + 7) / 8;
}

void fp_set_max_scans(fp_decoder* dec, int max_scans) {
  dec->progress.max_scans = max_scans > 0 ? max_scans : 0;
}

int fp_warning_count(const fp_decoder* dec) { return dec->warnings; }
const char* fp_first_warning(const fp_decoder* dec) { return dec->first_warning; }

int fp_read_header(fp_decoder* dec, const uint8_t* data, size_t size, fp_info* info) {
  struct jpeg_decompress_struct* cinfo = &dec->cinfo;
  if (dec->header_read) {
    snprintf(dec->message, sizeof(dec->message), "internal error: header already read");
    return FP_ERROR;
  }
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    if (size == 0)
      snprintf(dec->message, sizeof(dec->message), "not a JPEG: the data is empty");
    else if (size < 2)
      snprintf(dec->message, sizeof(dec->message), "not a JPEG: only %zu byte of data", size);
    else
      snprintf(dec->message, sizeof(dec->message),
               "not a JPEG: data starts with 0x%02x 0x%02x, expected the SOI marker 0xff 0xd8",
               data[0], data[1]);
    return FP_ERROR;
  }
  dec->src.pub.init_source = fp_init_source;
  dec->src.pub.fill_input_buffer = fp_fill_input_buffer;
  dec->src.pub.skip_input_data = fp_skip_input_data;
  dec->src.pub.resync_to_restart = jpeg_resync_to_restart;
  dec->src.pub.term_source = fp_term_source;
  dec->src.pub.next_input_byte = (const JOCTET*)data;
  dec->src.pub.bytes_in_buffer = size;
  dec->src.eof_hit = 0;
  cinfo->src = &dec->src.pub;

  if (setjmp(dec->err.jump)) return FP_ERROR;
  jpeg_read_header(cinfo, TRUE);
  dec->header_read = 1;

  memset(&dec->info, 0, sizeof(fp_info));
  dec->info.height = cinfo->image_height;
  dec->info.width = cinfo->image_width;
  dec->info.components = cinfo->num_components;
  dec->info.color_space = cinfo->jpeg_color_space;
  dec->info.progressive = cinfo->progressive_mode ? 1 : 0;
  dec->info.arithmetic = cinfo->arith_code ? 1 : 0;
  dec->info.adobe = cinfo->saw_Adobe_marker ? 1 : 0;
  for (int c = 0; c < cinfo->num_components && c < 4; c++) {
    dec->info.h_samp[c] = cinfo->comp_info[c].h_samp_factor;
    dec->info.v_samp[c] = cinfo->comp_info[c].v_samp_factor;
  }
  *info = dec->info;
  return FP_OK;
}

int fp_output_channels(const fp_info* info, int mode) {
  int cs = info->color_space;
  switch (mode) {
    case FP_MODE_GRAY:
      return (cs == JCS_GRAYSCALE || cs == JCS_YCbCr || cs == JCS_RGB || cs == JCS_CMYK ||
              cs == JCS_YCCK) ? 1 : 0;
    case FP_MODE_RGB:
      return (cs == JCS_GRAYSCALE || cs == JCS_YCbCr || cs == JCS_RGB || cs == JCS_CMYK ||
              cs == JCS_YCCK) ? 3 : 0;
    case FP_MODE_YCBCR:
      return (cs == JCS_GRAYSCALE || cs == JCS_YCbCr) ? 3 : 0;
    case FP_MODE_UNCHANGED:
      if (cs == JCS_GRAYSCALE) return 1;
      if (cs == JCS_YCbCr || cs == JCS_RGB) return 3;
      if (cs == JCS_CMYK || cs == JCS_YCCK) return 4;
      return 0;
    default:
      return 0;
  }
}

// x * y / 255, rounded, for 8-bit x and y.
static inline int mul_div255(int x, int y) {
  int t = x * y + 128;
  return (t + (t >> 8)) >> 8;
}

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define FP_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FP_VECTOR_CLONES
#endif

// Interleaved RGB -> three planes. Written so the compiler vectorizes it (about 20x faster
// than the scalar loop it replaced; it matters for whole-image decodes).
FP_VECTOR_CLONES
void fp_deinterleave3(const uint8_t* __restrict row, int64_t width, uint8_t* __restrict o0,
                      uint8_t* __restrict o1, uint8_t* __restrict o2) {
  for (int64_t x = 0; x < width; x++) {
    o0[x] = row[3 * x];
    o1[x] = row[3 * x + 1];
    o2[x] = row[3 * x + 2];
  }
}

FP_VECTOR_CLONES
static void deinterleave4(const JSAMPLE* __restrict row, int64_t width, uint8_t* __restrict o0,
                          uint8_t* __restrict o1, uint8_t* __restrict o2, uint8_t* __restrict o3) {
  for (int64_t x = 0; x < width; x++) {
    o0[x] = row[4 * x];
    o1[x] = row[4 * x + 1];
    o2[x] = row[4 * x + 2];
    o3[x] = row[4 * x + 3];
  }
}

// CMYK (Adobe files store it inverted) -> RGB, or gray when `g` and `b` are null. Output
// sample x of each channel goes to r[x * step] (g, b likewise).
static void cmyk_row(const JSAMPLE* row, int inverted_cmyk, int64_t width, uint8_t* r_out,
                     uint8_t* g_out, uint8_t* b_out, int64_t step) {
  for (int64_t x = 0; x < width; x++) {
    int c = row[4 * x], m = row[4 * x + 1], y = row[4 * x + 2], k = row[4 * x + 3];
    if (!inverted_cmyk) {
      c = 255 - c; m = 255 - m; y = 255 - y; k = 255 - k;
    }
    int r = mul_div255(c, k), g = mul_div255(m, k), b = mul_div255(y, k);
    if (g_out == nullptr) {
      // libjpeg's rgb->gray weights (0.29900, 0.58700, 0.11400) in 16-bit fixed point.
      r_out[x * step] = (uint8_t)((19595 * r + 38470 * g + 7471 * b + 32768) >> 16);
    } else {
      r_out[x * step] = (uint8_t)r;
      g_out[x * step] = (uint8_t)g;
      b_out[x * step] = (uint8_t)b;
    }
  }
}

// One decoded scanline (interleaved, `nc` samples per pixel, already offset to the first
// needed column) to `nout` planes of the CHW output.
static void scatter_row(const JSAMPLE* row, int nc, int mode, int inverted_cmyk, int64_t width,
                        uint8_t* out, int64_t plane) {
  if (nc == 1 && mode == FP_MODE_YCBCR) {
    memcpy(out, row, (size_t)width);
    memset(out + plane, 128, (size_t)width);
    memset(out + 2 * plane, 128, (size_t)width);
  } else if (nc == 1) {
    memcpy(out, row, (size_t)width);
  } else if (nc == 3) {
    fp_deinterleave3(row, width, out, out + plane, out + 2 * plane);
  } else if (mode == FP_MODE_UNCHANGED) {  // nc == 4, raw CMYK as stored
    deinterleave4(row, width, out, out + plane, out + 2 * plane, out + 3 * plane);
  } else if (mode == FP_MODE_GRAY) {
    cmyk_row(row, inverted_cmyk, width, out, nullptr, nullptr, 1);
  } else {
    cmyk_row(row, inverted_cmyk, width, out, out + plane, out + 2 * plane, 1);
  }
}

// One decoded scanline to one row of an HWC (interleaved) output: a copy when the decoder
// already produces the output channels.
static void copy_row(const JSAMPLE* row, int nc, int mode, int inverted_cmyk, int64_t width,
                     uint8_t* out) {
  if (nc == 1 && mode == FP_MODE_YCBCR) {
    for (int64_t x = 0; x < width; x++) {
      out[3 * x] = row[x];
      out[3 * x + 1] = 128;
      out[3 * x + 2] = 128;
    }
  } else if (nc == 1 || nc == 3 || mode == FP_MODE_UNCHANGED) {
    memcpy(out, row, (size_t)(width * nc));
  } else if (mode == FP_MODE_GRAY) {
    cmyk_row(row, inverted_cmyk, width, out, nullptr, nullptr, 1);
  } else {
    cmyk_row(row, inverted_cmyk, width, out, out + 1, out + 2, 3);
  }
}

// Whether libjpeg's coefficient controller may smooth blocks in the output pass (a
// superset of its own test in jdcoefct.c, which also needs nonzero quantizers): a
// progressive file in which some of the first nine AC coefficients of some component are
// missing or not fully refined. Valid once jpeg_start_decompress has absorbed all scans.
static int block_smoothing_possible(j_decompress_ptr cinfo) {
  if (!cinfo->progressive_mode || !cinfo->do_block_smoothing || cinfo->coef_bits == NULL) return 0;
  for (int c = 0; c < cinfo->num_components; c++)
    for (int k = 1; k <= 9; k++)
      if (cinfo->coef_bits[c][k] != 0) return 1;
  return 0;
}

int fp_decode_window(fp_decoder* dec, int mode, int64_t top, int64_t left, int64_t height,
                     int64_t width, uint8_t* out, int channels_last) {
  struct jpeg_decompress_struct* cinfo = &dec->cinfo;
  if (!dec->header_read || dec->decoding) {
    snprintf(dec->message, sizeof(dec->message), "internal error: decoder in wrong state");
    return FP_ERROR;
  }
  const int cs = cinfo->jpeg_color_space;
  const int is_cmyk = (cs == JCS_CMYK || cs == JCS_YCCK);
  const int64_t plane = height * width;
  // Variables that are modified after setjmp and read after a longjmp must be volatile;
  // everything below the setjmp is recomputed, so none is needed.
  dec->decoding = 1;
  dec->whole_image = top == 0 && left == 0 && height == fp_scaled_size(cinfo->image_height, dec->scale_num) &&
                     width == fp_scaled_size(cinfo->image_width, dec->scale_num);
  if (setjmp(dec->err.jump)) {
    jpeg_abort_decompress(cinfo);
    return FP_ERROR;
  }

  switch (mode) {
    case FP_MODE_UNCHANGED:
      cinfo->out_color_space = is_cmyk ? JCS_CMYK : (cs == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB);
      break;
    case FP_MODE_GRAY:
      cinfo->out_color_space = is_cmyk ? JCS_CMYK : JCS_GRAYSCALE;
      break;
    case FP_MODE_RGB:
      cinfo->out_color_space = is_cmyk ? JCS_CMYK : JCS_RGB;
      break;
    case FP_MODE_YCBCR:
      cinfo->out_color_space = cs == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_YCbCr;
      break;
    default:
      fp_fail(dec, "internal error: unknown mode");
  }
  cinfo->scale_num = (unsigned int)dec->scale_num;
  cinfo->scale_denom = 8;
  jpeg_start_decompress(cinfo);
  if ((int64_t)cinfo->output_width != fp_scaled_size(cinfo->image_width, dec->scale_num) ||
      (int64_t)cinfo->output_height != fp_scaled_size(cinfo->image_height, dec->scale_num))
    fp_fail(dec, "internal error: libjpeg chose an unexpected output size for the DCT scale");

  const int nc = cinfo->output_components;
  const int64_t full_w = cinfo->output_width;
  // Size of an iMCU at the output scale; single-component images are non-interleaved.
  // (jpeg_crop_scanline aligns to the same grid.)
  const int scaled = cinfo->min_DCT_scaled_size;
  const int64_t mcu_w = cinfo->num_components == 1 ? scaled : (int64_t)scaled * cinfo->max_h_samp_factor;
  const int64_t mcu_h = cinfo->num_components == 1 ? scaled : (int64_t)scaled * cinfo->max_v_samp_factor;

  // Horizontal: fancy upsampling treats the crop's first and last columns as image edges,
  // so neither may be a needed column unless it is one in the full image too. Widen to
  // the iMCU grid around [left - 1, left + width + 1).
  int64_t x0 = ((left > 0 ? left - 1 : 0) / mcu_w) * mcu_w;
  if (block_smoothing_possible(cinfo)) x0 = x0 > 2 * mcu_w ? x0 - 2 * mcu_w : 0;
  int64_t x1 = ((left + width + 1 + mcu_w - 1) / mcu_w) * mcu_w;
  if (x1 > full_w) x1 = full_w;
  // jpeg_crop_scanline re-selects the upsampling methods when the crop leaves a component
  // fewer than 2 samples per row, and then picks plain replication over fancy upsampling
  // (which for 2x2 chroma also blends rows): a crop that narrow -- the image's last,
  // partial iMCU column, at most max_h_samp_factor pixels -- starts an iMCU column earlier.
  if (x0 > 0 && x1 - x0 <= cinfo->max_h_samp_factor) x0 -= mcu_w;
  // When DCT scaling enlarges a component's IDCT output (libjpeg does so for chroma whose
  // subsampling is a power of two in both directions, to spare upsampling) but the
  // component still needs upsampling, horizontally or vertically, libjpeg-turbo before
  // 3.0.1 computes its cropped width wrongly (4x2 and 2x4 sampling; for 2x4 at 2/8 the
  // vertical upsampler then leaves half the cropped columns unwritten): decode the full
  // width then.
  int crop_ok = 1;
  for (int c = 0; c < cinfo->num_components; c++) {
    const jpeg_component_info* comp = &cinfo->comp_info[c];
    if (comp->DCT_scaled_size != scaled &&
        (comp->h_samp_factor * comp->DCT_scaled_size != cinfo->max_h_samp_factor * scaled ||
         comp->v_samp_factor * comp->DCT_scaled_size != cinfo->max_v_samp_factor * scaled))
      crop_ok = 0;
  }
  if (crop_ok && (x0 > 0 || x1 < full_w)) {
    JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
    jpeg_crop_scanline(cinfo, &xoff, &cw);
    x0 = xoff;
  }
  if (!crop_ok) x0 = 0;
  const int64_t col = left - x0;
  if (col < 0 || col + width > (int64_t)cinfo->output_width)
    fp_fail(dec, "internal error: crop window does not cover the requested columns");

  // Vertical: likewise the first row after a skip lacks its upsampling context, and skips
  // must end on an iMCU-row boundary (libjpeg-turbo 2.1 bug): skip whole iMCU rows up to
  // the one holding row top - 1.
  int64_t y0 = ((top > 0 ? top - 1 : 0) / mcu_h) * mcu_h;
  if (y0 > 0) {
    JDIMENSION skipped = jpeg_skip_scanlines(cinfo, (JDIMENSION)y0);
    if ((int64_t)skipped != y0) fp_fail(dec, "internal error: jpeg_skip_scanlines skipped too few rows");
  }

  // The buffer is filled with up to an iMCU row, never past the window's last row, before
  // its rows are copied out. jpeg_read_scanlines returns at most one row group (1 or 2
  // rows) per call; copying each group right after libjpeg wrote it made the ROI decode of
  // a 256x256 window 5-20 % slower (docs/decoding.md, "ROI decode vs DALI").
  const int buffer_rows = (int)(mcu_h > cinfo->rec_outbuf_height ? mcu_h : cinfo->rec_outbuf_height);
  JSAMPARRAY buf = (*cinfo->mem->alloc_sarray)((j_common_ptr)cinfo, JPOOL_IMAGE,
                                               (JDIMENSION)(cinfo->output_width * nc),
                                               (JDIMENSION)buffer_rows);
  const int64_t end = top + height;
  const int64_t row_bytes = width * fp_output_channels(&dec->info, mode);
  // Rows the decoder can write straight into the output (no copy): interleaved output of
  // the channels the decoder makes, over the decoder's whole (cropped) width -- a whole-image
  // channels-last decode, as torchvision's.
  const int direct = channels_last && col == 0 && width == (int64_t)cinfo->output_width &&
                     !(nc == 1 && mode == FP_MODE_YCBCR) && (nc == 1 || nc == 3 || mode == FP_MODE_UNCHANGED);
  JSAMPARRAY rows = (JSAMPARRAY)(*cinfo->mem->alloc_small)((j_common_ptr)cinfo, JPOOL_IMAGE,
                                                           (size_t)buffer_rows * sizeof(JSAMPROW));
  while ((int64_t)cinfo->output_scanline < end) {
    int64_t first = cinfo->output_scanline;
    const int64_t left_rows = end - first;
    const JDIMENSION wanted = (JDIMENSION)(left_rows < buffer_rows ? left_rows : buffer_rows);
    for (JDIMENSION r = 0; r < wanted; r++)
      rows[r] = direct && first + r >= top ? out + (first + r - top) * row_bytes : buf[r];
    JDIMENSION got = 0;
    while (got < wanted) {
      JDIMENSION n = jpeg_read_scanlines(cinfo, rows + got, wanted - got);
      if (n == 0) fp_fail(dec, "JPEG decoder returned no rows (corrupt data)");
      got += n;
    }
    for (JDIMENSION r = 0; r < got; r++) {
      int64_t y = first + r;
      if (y < top || y >= end || rows[r] != buf[r]) continue;
      if (channels_last)
        copy_row(buf[r] + col * nc, nc, mode, dec->info.adobe, width, out + (y - top) * row_bytes);
      else
        scatter_row(buf[r] + col * nc, nc, mode, dec->info.adobe, width, out + (y - top) * width, plane);
    }
  }
  // The data ended before the decoder was done with the rows we returned. Huffman
  // decoding reads ahead, so running out within the last iMCU row is harmless unless bits
  // were missing (caught above); anything earlier means missing rows. Arithmetic decoding
  // pads silently, and multi-scan files need every scan for every row: both always raise.
  if (dec->src.eof_hit &&
      (dec->strict || jpeg_has_multiple_scans(cinfo) || cinfo->arith_code ||
       (int64_t)dec->src.eof_imcu_row + 1 < (int64_t)cinfo->total_iMCU_rows))
    fp_fail(dec, truncation_message(dec, 1));
  jpeg_abort_decompress(cinfo);
  return FP_OK;
}

}  // extern "C"
