// libjpeg-turbo glue for lossless transcoding, written in the C subset: no C++ object with
// a destructor may live in a frame that calls setjmp (libjpeg's errors longjmp back to it).
// All state lives in one calloc'ed struct so the error path can free everything.

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg/jpeg_decoder.h"
#include "jpeg/jpeg_transcoder.h"

// The size of fp_transcode_result's message, which fp_tc_error_mgr's `message` points into.
#define FP_TC_MESSAGE_SIZE sizeof(((fp_transcode_result*)NULL)->message)

struct fp_tc_error_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char* message;  // the result's buffer
};

struct fp_tc_dest_mgr {
  struct jpeg_destination_mgr pub;
  uint8_t* buf;
  size_t cap;
  size_t len;  // bytes finished (set by term_destination)
  int failed;  // realloc failed
};

// Refuses, before their data, the scans the decoder refuses (fp_scan_refused): a file
// decode_jpeg would not decode is not packed either.
struct fp_tc_progress_mgr {
  struct jpeg_progress_mgr pub;
  fp_scan_tracker scans;
};

struct fp_transcoder {
  struct jpeg_decompress_struct src;
  struct jpeg_compress_struct dst;
  struct fp_tc_error_mgr err;
  struct fp_tc_dest_mgr dest;
  struct fp_tc_progress_mgr progress;
  int src_created;
  int dst_created;
};

static void fp_tc_error_exit(j_common_ptr cinfo) {
  struct fp_tc_error_mgr* err = (struct fp_tc_error_mgr*)cinfo->err;
  char buf[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, buf);
  snprintf(err->message, FP_TC_MESSAGE_SIZE, "%s", buf);
  longjmp(err->jump, 1);
}

// Warnings mean corrupt data: the coefficients libjpeg would hand over are its guess, and
// writing them into a clean file would hide the damage. Refuse.
static void fp_tc_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) fp_tc_error_exit(cinfo);
}

static void fp_tc_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void fp_tc_progress_monitor(j_common_ptr cinfo) {
  struct fp_transcoder* t = (struct fp_transcoder*)cinfo->client_data;
  if (fp_new_scan(&t->progress.scans, &t->src) == 0) return;
  if (fp_scan_refused(&t->progress.scans, &t->src, t->err.message, FP_TC_MESSAGE_SIZE))
    longjmp(t->err.jump, 1);
}

static void fp_tc_init_destination(j_compress_ptr cinfo) {
  struct fp_tc_dest_mgr* d = (struct fp_tc_dest_mgr*)cinfo->dest;
  d->pub.next_output_byte = d->buf;
  d->pub.free_in_buffer = d->cap;
}

static boolean fp_tc_empty_output_buffer(j_compress_ptr cinfo) {
  struct fp_tc_dest_mgr* d = (struct fp_tc_dest_mgr*)cinfo->dest;
  size_t used = d->cap;  // libjpeg calls this only when the buffer is full
  size_t cap = d->cap * 2;
  uint8_t* grown = (uint8_t*)realloc(d->buf, cap);
  if (grown == NULL) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 100);
  d->buf = grown;
  d->cap = cap;
  d->pub.next_output_byte = grown + used;
  d->pub.free_in_buffer = cap - used;
  return TRUE;
}

static void fp_tc_term_destination(j_compress_ptr cinfo) {
  struct fp_tc_dest_mgr* d = (struct fp_tc_dest_mgr*)cinfo->dest;
  d->len = d->cap - d->pub.free_in_buffer;
}

static int is_app_with_id(const jpeg_saved_marker_ptr m, int code, const char* id, unsigned idlen) {
  return m->marker == code && m->data_length >= idlen && memcmp(m->data, id, idlen) == 0;
}

// The automatic restart interval, in MCUs (docs/pack.md, "The restart interval"). Two
// limits, from the image's size in pixels and its source file's size in bytes:
// - ROI time: a window decodes, on average, one interval's width more than it needs,
//   entropy-decoded only. Relative to a decoded pixel such a pixel costs about
//   (0.9 b + 0.15) / (0.9 b + 1) at b bytes per pixel (fitted on real photographs), so an
//   interval at most 0.3 x window / that wide adds at most about 30 % to the window's
//   decode. window: the smallest the recipes draw: 224 px, or 28 % of the shorter side
//   (a random-resized crop keeps at least sqrt(0.08)) when that is smaller. The widest
//   divisor of the MCUs per row within that width (at least 1 MCU).
// - Size: each interval costs about 8 bytes (marker, padding, DC predictor reset, index
//   entry; 4-9 measured), at most 3 % of the source's size in all. When the interval
//   above needs more, the narrowest divisor that does not; when no divisor short of the
//   whole row does, whole MCU rows, as many per interval as that takes.
// - When that leaves the interval wider than 0.5 x window / that (the window's decode
//   would cost about 1.5x its own: sparse files, and MCU counts per row with no divisor in
//   range, such as a prime), the widest divisor within that width is taken instead if its
//   markers stay within 7 % of the source at the nominal 8 bytes per interval (a dense file
//   pays about half that: +3.6 % for 1-MCU intervals on a 16 MB 5640x3172 photo).
// Integer arithmetic only, so the choice is the same on every machine.
static int fp_auto_restart_interval(long width, long height, long mcu_w, long mcu_h, size_t source_bytes) {
  const long mcus_per_row = (width + mcu_w - 1) / mcu_w, mcu_rows = (height + mcu_h - 1) / mcu_h;
  const int64_t bytes = (int64_t)source_bytes, pixels = (int64_t)width * height;
  const long shorter = width < height ? width : height;
  const int64_t window = shorter * 28 / 100 < 224 ? shorter * 28 / 100 : 224;
  const int64_t max_width = 3 * window * (18 * bytes + 20 * pixels) / (10 * (18 * bytes + 3 * pixels));
  const int64_t limit_width = window * (18 * bytes + 20 * pixels) / (2 * (18 * bytes + 3 * pixels));
  const int64_t max_intervals = bytes * 3 / 800;
  long best = 1;
  for (long d = 1; d < mcus_per_row && d * mcu_w <= max_width; d++)
    if (mcus_per_row % d == 0) best = d;
  while (best < mcus_per_row && (int64_t)(mcus_per_row / best) * mcu_rows > max_intervals) {
    best++;
    while (mcus_per_row % best) best++;
  }
  if (best * mcu_w > limit_width) {
    long relaxed = 0;
    for (long d = 1; d < mcus_per_row && d * mcu_w <= limit_width; d++)
      if (mcus_per_row % d == 0) relaxed = d;
    if (relaxed > 0 && (int64_t)(mcus_per_row / relaxed) * mcu_rows <= bytes * 7 / 800) return (int)relaxed;
  }
  if (best < mcus_per_row) return (int)best;
  long rows = max_intervals < 1 ? mcu_rows : (long)((mcu_rows + max_intervals - 1) / max_intervals);
  if (rows > 65535 / mcus_per_row) rows = 65535 / mcus_per_row;
  return rows < 1 ? 0 : (int)(rows * mcus_per_row);
}

// A progressive file whose scans leave some coefficient of some component unsent or
// without its low bits is valid, but decoders estimate the missing values (libjpeg's block
// smoothing, in a way that differs between decoders and versions) and a sequential copy of
// the coefficients would decode to other pixels. libjpeg tracks, per component and
// coefficient, the successive-approximation bit still awaited (-1: nothing sent, 0:
// complete); valid after the whole file was consumed. Writes the first gap's reason into
// `message` and returns 1, or returns 0 when every coefficient is complete.
static int fp_incomplete_coefficients(j_decompress_ptr cinfo, char* message, size_t size) {
  if (!cinfo->progressive_mode || cinfo->coef_bits == NULL) return 0;
  for (int c = 0; c < cinfo->num_components; c++) {
    for (int k = 0; k < DCTSIZE2; k++) {
      const int bits = cinfo->coef_bits[c][k];
      if (bits == 0) continue;
      char what[64];
      if (bits < 0)
        snprintf(what, sizeof(what), "never sent");
      else
        snprintf(what, sizeof(what), "lacks its %d low bit%s", bits, bits == 1 ? "" : "s");
      snprintf(message, size,
               "cannot be transcoded losslessly: incomplete progressive scans (component %d coefficient %d %s); "
               "decoders estimate missing coefficients, a sequential copy would change pixels",
               c, k, what);
      return 1;
    }
  }
  return 0;
}

// A sequential Huffman scan of 8-bit data codes AC coefficients of up to 10 bits and DC
// differences of up to 11 bits. libjpeg's decoders accept more (arithmetic coding codes up
// to 15 bits; Huffman DC differences accumulate), and its encoder checks the range only
// when it optimizes the tables: without that it silently writes a corrupt scan (with new
// restart intervals, DC differences change too). Every DC value in [-1024, 1023] keeps
// every difference in range, and an 8-bit encoder never makes a value outside (its DC lies
// in [-1024, 1016]). Writes the reason into `message` and returns 1 at the first
// coefficient out of range, else returns 0.
static int fp_coefficients_out_of_range(j_decompress_ptr cinfo, jvirt_barray_ptr* coefs, char* message,
                                        size_t size) {
  for (int c = 0; c < cinfo->num_components; c++) {
    jpeg_component_info* comp = &cinfo->comp_info[c];
    for (JDIMENSION row = 0; row < comp->height_in_blocks; row++) {
      JBLOCKARRAY rows = (*cinfo->mem->access_virt_barray)((j_common_ptr)cinfo, coefs[c], row, 1, FALSE);
      for (JDIMENSION col = 0; col < comp->width_in_blocks; col++) {
        const JCOEF* block = rows[0][col];
        int k = block[0] < -1024 || block[0] > 1023 ? 0 : -1;
        for (int i = 1; i < DCTSIZE2 && k < 0; i++)
          if (block[i] < -1023 || block[i] > 1023) k = i;
        if (k < 0) continue;
        snprintf(message, size,
                 "DCT coefficient out of range: component %d block (%u, %u) coefficient %d is %d, outside "
                 "what 8-bit data gives (DC -1024..1023, AC -1023..1023): the data is corrupt",
                 c, (unsigned)row, (unsigned)col, k, (int)block[k]);
        return 1;
      }
    }
  }
  return 0;
}

static void fp_tc_cleanup(struct fp_transcoder* t) {
  if (t->dst_created) jpeg_destroy_compress(&t->dst);
  if (t->src_created) jpeg_destroy_decompress(&t->src);
  free(t->dest.buf);
  free(t);
}

extern "C" {

void fp_transcode_free(fp_transcode_result* result) {
  free(result->data);
  result->data = NULL;
  result->size = 0;
}

int fp_transcode(const uint8_t* data, size_t size, int restart_interval, int optimize,
                 int keep_metadata, int64_t max_pixels, fp_transcode_result* result) {
  memset(result, 0, sizeof(*result));
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8) {
    snprintf(result->message, sizeof(result->message), "not a JPEG: the data does not start with the SOI marker");
    return FP_ERROR;
  }
  struct fp_transcoder* t = (struct fp_transcoder*)calloc(1, sizeof(struct fp_transcoder));
  if (t == NULL) {
    snprintf(result->message, sizeof(result->message), "out of memory");
    return FP_ERROR;
  }
  t->err.message = result->message;
  t->src.err = jpeg_std_error(&t->err.pub);
  t->dst.err = &t->err.pub;
  t->err.pub.error_exit = fp_tc_error_exit;
  t->err.pub.emit_message = fp_tc_emit_message;
  t->err.pub.output_message = fp_tc_output_message;
  if (setjmp(t->err.jump)) {
    fp_tc_cleanup(t);
    return FP_ERROR;
  }
  jpeg_create_decompress(&t->src);
  t->src_created = 1;
  t->src.client_data = t;
  fp_scan_tracker_init(&t->progress.scans);
  t->progress.pub.progress_monitor = fp_tc_progress_monitor;
  t->src.progress = &t->progress.pub;
  jpeg_mem_src(&t->src, (unsigned char*)data, (unsigned long)size);
  if (keep_metadata) {
    jpeg_save_markers(&t->src, JPEG_COM, 0xFFFF);
    for (int i = 0; i < 16; i++) jpeg_save_markers(&t->src, JPEG_APP0 + i, 0xFFFF);
  }
  jpeg_read_header(&t->src, TRUE);
  if (max_pixels > 0 && (int64_t)t->src.image_width * (int64_t)t->src.image_height > max_pixels) {
    snprintf(result->message, sizeof(result->message), "image is %ux%u pixels, more than max_pixels=%lld",
             (unsigned)t->src.image_height, (unsigned)t->src.image_width, (long long)max_pixels);
    fp_tc_cleanup(t);
    return FP_ERROR;
  }
  jvirt_barray_ptr* coefs = jpeg_read_coefficients(&t->src);  // consumes every scan up to EOI
  if (fp_incomplete_coefficients(&t->src, result->message, sizeof(result->message)) ||
      fp_coefficients_out_of_range(&t->src, coefs, result->message, sizeof(result->message))) {
    fp_tc_cleanup(t);
    return FP_ERROR;
  }

  jpeg_create_compress(&t->dst);
  t->dst_created = 1;
  t->dest.cap = 65536;
  t->dest.buf = (uint8_t*)malloc(t->dest.cap);
  if (t->dest.buf == NULL) ERREXIT1(&t->dst, JERR_OUT_OF_MEMORY, 101);
  t->dest.pub.init_destination = fp_tc_init_destination;
  t->dest.pub.empty_output_buffer = fp_tc_empty_output_buffer;
  t->dest.pub.term_destination = fp_tc_term_destination;
  t->dst.dest = &t->dest.pub;
  jpeg_copy_critical_parameters(&t->src, &t->dst);
  // Keep the colour-space signalling exactly as in the source: a CMYK file without an
  // Adobe marker is decoded as non-inverted, with one as inverted.
  t->dst.write_JFIF_header = t->src.saw_JFIF_marker;
  t->dst.write_Adobe_marker = t->src.saw_Adobe_marker;
  t->dst.optimize_coding = optimize ? TRUE : FALSE;
  t->dst.arith_code = FALSE;
  if (restart_interval < 0) {
    // Automatic: from the image's size and the source's size (fp_auto_restart_interval).
    int hmax = 1, vmax = 1;
    for (int c = 0; c < t->src.num_components; c++) {
      if (t->src.comp_info[c].h_samp_factor > hmax) hmax = t->src.comp_info[c].h_samp_factor;
      if (t->src.comp_info[c].v_samp_factor > vmax) vmax = t->src.comp_info[c].v_samp_factor;
    }
    const long mcu_w = t->src.num_components == 1 ? 8 : 8L * hmax;
    const long mcu_h = t->src.num_components == 1 ? 8 : 8L * vmax;
    restart_interval = fp_auto_restart_interval((long)t->src.image_width, (long)t->src.image_height, mcu_w, mcu_h,
                                                size);
  }
  t->dst.restart_interval = (unsigned)restart_interval;
  t->dst.restart_in_rows = 0;
  jpeg_write_coefficients(&t->dst, coefs);
  for (jpeg_saved_marker_ptr m = t->src.marker_list; m != NULL; m = m->next) {
    // A source's interval index describes its own scan, not the one written here.
    if (is_app_with_id(m, JPEG_APP0 + 9, "fastprep.rst", 13)) continue;
    if (t->dst.write_JFIF_header && is_app_with_id(m, JPEG_APP0, "JFIF", 5)) continue;
    if (t->dst.write_Adobe_marker && is_app_with_id(m, JPEG_APP0 + 14, "Adobe", 5)) continue;
    jpeg_write_marker(&t->dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&t->dst);
  jpeg_finish_decompress(&t->src);
  result->restart_interval = restart_interval;
  result->size = t->dest.len;
  result->data = t->dest.buf;
  t->dest.buf = NULL;
  fp_tc_cleanup(t);
  return FP_OK;
}

}  // extern "C"
