// Restart-interval ROI decode: find a sequential JPEG's restart intervals and splice the
// ones a window needs into a smaller, self-contained JPEG.
//
// Pure byte parsing (no libjpeg calls, so no longjmp): plain C++ is fine here.
//
// A restart interval starts byte-aligned with the DC predictors (and the arithmetic
// coder's state) reset, so it decodes on its own. When the interval tiles the MCU rows
// (k whole rows per interval, or n intervals per row), the intervals covering a window
// plus the context that fancy upsampling needs form a smaller image: the original header
// with the frame size changed, then those intervals with their RST markers renumbered.
// Its decode equals the original's decode in that region, bit for bit.
//
// Interval index: fastprep's transcoder records where every interval starts in an APP9
// segment (signature "fastprep.rst", see add_interval_index), so a window's intervals are
// found without scanning the file for markers. Other decoders skip the segment.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <utility>
#include <vector>

namespace fastprep {

struct RestartLayout {
  // Header facts (valid when parsed is true).
  bool parsed = false;
  int restart_interval = 0;  // MCUs per interval (DRI), 0 when there is none
  bool eligible = false;     // sequential, one scan with every component, DRI tiles rows
  int64_t height = 0, width = 0;
  int64_t mcu_w = 0, mcu_h = 0;     // MCU size in pixels
  int64_t mcus_per_row = 0, mcu_rows = 0;
  int num_components = 0;
  int h_samp[4] = {0, 0, 0, 0};  // horizontal sampling factor of each component
  int max_h_samp = 0;
  // The header to splice: SOI..SOS with the APPn/COM segments that do not affect decoding
  // left out. The SOF's height and width are big-endian 16-bit at sof_size_at.
  std::string header;
  size_t sof_size_at = 0;
  size_t sos_at = 0;      // the SOS marker's 0xFF
  size_t scan_start = 0;  // first byte of entropy-coded data in the original
  // Interval index: the payloads (after signature and chunk header) of its APP9 segments in
  // order, as (offset, length); empty when there is none or its chunks are not numbered
  // 0..count-1 in file order.
  std::vector<std::pair<size_t, size_t>> index_chunks;
  bool has_index_segment = false;  // any APP9 segment with the index signature, valid or not
};

// Intervals of the image (0 if the layout is not eligible), and how many make one group of
// the index: the intervals of one MCU row, or 1 when an interval spans whole rows.
int64_t restart_interval_count(const RestartLayout& layout);
int64_t restart_intervals_per_group(const RestartLayout& layout);

// Parse the markers before the first SOS. Never throws; leaves parsed false on anything
// it does not understand.
RestartLayout parse_restart_layout(const uint8_t* data, size_t size);

// Locate every restart interval: starts[i], ends[i] delimit interval i's entropy-coded
// bytes (RST markers and fill bytes excluded). Returns false unless the markers are
// exactly as the header promises: RST0..RST7 in cyclic order, as many intervals as the
// image has, the scan ends with EOI inside the buffer.
bool find_restart_intervals(const uint8_t* data, size_t size, const RestartLayout& layout,
                            std::vector<size_t>* starts, std::vector<size_t>* ends);

// The region of the original image that a spliced stream covers.
struct SplicePlan {
  int64_t y0 = 0, x0 = 0, height = 0, width = 0;  // pixels
  std::vector<int64_t> intervals;                  // interval indices, in stream order
};

// Choose the intervals covering the window [top, top+height) x [left, left+width) of the
// decode at scale_num/8 (window in scaled pixels) plus one scaled pixel of context on each
// side, widened when needed so that libjpeg picks the same upsampling method for the
// spliced frame as for the whole image. The plan's region is in full-scale pixels; its
// origin is a multiple of the MCU size, so it falls on whole pixels of the scaled decode
// too. Returns false when splicing would save nothing.
bool plan_splice(const RestartLayout& layout, int64_t top, int64_t left, int64_t height,
                 int64_t width, int scale_num, SplicePlan* plan);

// The entropy-coded bytes of one interval: [start, end) in the original (markers and fill
// bytes excluded).
struct IntervalSpan {
  size_t start = 0, end = 0;
};

// The spans of the plan's intervals (in plan order) from the full lists of
// find_restart_intervals.
void spans_from_scan(const std::vector<size_t>& starts, const std::vector<size_t>& ends, const SplicePlan& plan,
                     std::vector<IntervalSpan>* spans);

// The spans of the plan's intervals read from the file's interval index, touching only the
// index entries up to the plan's last interval, the 2 bytes of every marker up to the end of
// that interval, and the bytes of the planned intervals: O(intervals) reads, no scan of the
// entropy-coded data. Returns false -- the caller then scans -- when the file has no index
// or anything about it disagrees with the bytes: every interval from the first to the
// plan's last must end at the RST marker of its own number (EOI for the last of the image)
// where the index says, the first start at the scan's start, and the planned ones must hold
// no other marker (fill bytes before their end allowed); all inside the buffer, in order.
// So a wrong, stale or foreign index, or a damaged marker anywhere before the window's end,
// can only make the decode scan; every span it yields is one real interval of the file
// (docs/pack.md: the RST numbering identifies an interval modulo 8 only). A marker that
// damage created inside entropy-coded data outside the window goes unseen (only a pass over
// every byte finds it; docs/pack.md says what the window is then).
bool spans_from_index(const uint8_t* data, size_t size, const RestartLayout& layout, const SplicePlan& plan,
                      std::vector<IntervalSpan>* spans);

// Write the spliced JPEG into `out` (resized): header with the plan's frame size, the
// planned intervals (`spans`, in plan order) separated by RST markers numbered 0..7
// cyclically, EOI.
void write_splice(const uint8_t* data, const RestartLayout& layout, const std::vector<IntervalSpan>& spans,
                  const SplicePlan& plan, std::vector<uint8_t>* out);

// `data` (a complete JPEG) with an interval index inserted before its SOS marker, into
// `out`; false (out untouched) when the file is not eligible for the restart-interval path,
// its markers are not exactly as the header promises, it already has an index, or the
// index would not fit in 255 segments.
bool add_interval_index(const uint8_t* data, size_t size, std::vector<uint8_t>* out);

// Counters of the calling thread (for tests): fast-path decodes taken, and attempts that
// fell back to the sequential path after finding the file eligible.
struct RestartStats {
  int64_t taken = 0;
  int64_t fallbacks = 0;
  int64_t index_used = 0;      // windows whose intervals came from the interval index
  int64_t index_rejected = 0;  // files with an index that failed validation (scanned instead)
};
RestartStats& restart_stats();

}  // namespace fastprep
