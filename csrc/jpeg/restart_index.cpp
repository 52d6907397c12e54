// Finding restart intervals and splicing them into a smaller JPEG (see restart_index.h).
#include "jpeg/restart_index.h"

#include <string.h>

#include <algorithm>

namespace fastprep {

namespace {

inline unsigned be16(const uint8_t* p) { return ((unsigned)p[0] << 8) | p[1]; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Interval index segments: APP9, payload = signature (with its NUL), version, chunk number,
// chunk count, then a chunk of the index. The chunks concatenated (all big-endian):
//   u32 intervals N, u32 groups G, u32 intervals per group n (N = G n), u8 delta width w
//   (1..4; 0 when n = 1), u32 offset of the EOI marker,
//   G x u32 offset where group g's first interval starts,
//   G x (n - 1) x w-byte distance from each interval's start to the next one's in its group.
// Offsets are relative to the first byte of the scan's entropy-coded data, so the segments
// can sit anywhere before SOS. Groups are MCU rows (or single intervals spanning whole
// rows), so a window's entries are found without reading the others.
constexpr unsigned kIndexMarker = 0xE9;
constexpr char kIndexSignature[] = "fastprep.rst";  // 13 bytes with the NUL
constexpr size_t kSignatureSize = sizeof(kIndexSignature);
constexpr unsigned kIndexVersion = 1;
constexpr size_t kChunkHeader = kSignatureSize + 3;
constexpr size_t kMaxChunk = 65533 - kChunkHeader;  // a segment's payload is at most 65533 bytes
constexpr size_t kBlobHeader = 17;

bool is_index_segment(const uint8_t* payload, size_t len) {
  return len >= kChunkHeader && memcmp(payload, kIndexSignature, kSignatureSize) == 0;
}

inline void put_be(uint8_t* p, uint64_t v, int width) {
  for (int k = width - 1; k >= 0; k--, v >>= 8) p[k] = (uint8_t)v;
}

// The concatenated chunks of an index, read front to back without copying them together:
// a cursor that keeps its chunk, so a walk over every entry costs O(entries) whatever the
// number of chunks. The caller keeps every read inside the blob (its size is checked first).
class BlobCursor {
 public:
  BlobCursor(const uint8_t* data, const std::vector<std::pair<size_t, size_t>>& chunks, size_t pos)
      : data_(data), chunks_(chunks) {
    while (chunk_ < chunks_.size() && pos >= chunks_[chunk_].second) pos -= chunks_[chunk_++].second;
    enter(pos);
  }
  // The next `len` bytes, in place when they lie in one chunk, else copied into `spill`.
  const uint8_t* take(size_t len, std::vector<uint8_t>* spill) {
    if ((size_t)(end_ - p_) >= len) {
      const uint8_t* at = p_;
      p_ += len;
      return at;
    }
    spill->resize(len);
    for (size_t k = 0; k < len; k++) (*spill)[k] = (uint8_t)next(1);
    return spill->data();
  }
  // The next `width` bytes (0..4) as a big-endian unsigned.
  uint64_t next(int width) {
    uint64_t v = 0;
    if (end_ - p_ >= width) {
      for (int k = 0; k < width; k++) v = (v << 8) | p_[k];
      p_ += width;
      return v;
    }
    for (int k = 0; k < width; k++) {  // straddles a chunk boundary
      while (p_ == end_) {
        if (++chunk_ >= chunks_.size()) return v;  // past the blob: never, the caller checked its size
        enter(0);
      }
      v = (v << 8) | *p_++;
    }
    return v;
  }

 private:
  void enter(size_t offset) {
    if (chunk_ < chunks_.size()) {
      p_ = data_ + chunks_[chunk_].first + offset;
      end_ = data_ + chunks_[chunk_].first + chunks_[chunk_].second;
    } else {
      p_ = end_ = nullptr;  // at the blob's end: nothing may be read
    }
  }
  const uint8_t* data_;
  const std::vector<std::pair<size_t, size_t>>& chunks_;
  size_t chunk_ = 0;
  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
};

// Whether a frame `width` pixels wide gives every horizontally subsampled component at
// least 3 samples per row at scale s/8. libjpeg (jdsample.c, jinit_upsampler) uses fancy
// upsampling for a component upsampled 2x horizontally only when its downsampled width is
// above 2, and plain replication otherwise; the spliced frame is narrower than the image,
// so it must stay on the same side of that threshold or its chroma is interpolated
// differently everywhere (4:2:2 at 2/8 with one 16-pixel interval spliced: 2 samples). A
// component's downsampled width is ceil(width * h * DCT_scaled_size / (hmax * 8)) and its
// DCT_scaled_size is at least s (libjpeg enlarges it for some chroma), so the bound below
// with s in its place suffices whatever the component's upsampling turns out to be.
bool upsampling_as_in_image(const RestartLayout& layout, int64_t width, int64_t s) {
  for (int c = 0; c < layout.num_components; c++) {
    const int64_t h = layout.h_samp[c], hmax = layout.max_h_samp;
    if (h < hmax && width * h * s <= 2 * hmax * 8) return false;
  }
  return true;
}

}  // namespace

int64_t restart_interval_count(const RestartLayout& layout) {
  if (!layout.eligible) return 0;
  return ceil_div(layout.mcus_per_row * layout.mcu_rows, (int64_t)layout.restart_interval);
}

int64_t restart_intervals_per_group(const RestartLayout& layout) {
  const int64_t r = layout.restart_interval, mpr = layout.mcus_per_row;
  return r % mpr == 0 ? 1 : mpr / r;
}

RestartStats& restart_stats() {
  static thread_local RestartStats stats;
  return stats;
}

RestartLayout parse_restart_layout(const uint8_t* data, size_t size) {
  RestartLayout layout;
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) return layout;
  std::string& header = layout.header;
  header.reserve(1024);
  header.append((const char*)data, 2);
  bool sequential_sof = false, other_sof = false, unusual = false;
  int precision = 0, nf = 0, ns = 0, dri_count = 0;
  int hs[4] = {0, 0, 0, 0}, vs[4] = {0, 0, 0, 0};
  int index_count = -1;  // chunks the index announces; -2 once it proved malformed
  size_t pos = 2;
  for (;;) {
    // Markers must follow each other directly; libjpeg skips stray bytes with a warning,
    // which the sequential path reports, so leave such files to it.
    if (pos >= size || data[pos] != 0xFF) return layout;
    const size_t marker_at = pos;
    while (pos < size && data[pos] == 0xFF) pos++;
    if (pos + 2 >= size) return layout;
    const unsigned code = data[pos++];
    if (code == 0xD8 || code == 0xD9 || code == 0x01 || (code >= 0xD0 && code <= 0xD7) || code == 0x00)
      return layout;
    const size_t len = be16(data + pos);
    if (len < 2 || pos + len > size) return layout;
    const uint8_t* seg = data + pos;  // length field, then the payload
    bool keep = true;
    size_t sof_at = 0;
    if (code == 0xC0 || code == 0xC1 || code == 0xC9) {
      if (sequential_sof || other_sof || len < 8) return layout;
      sequential_sof = true;
      precision = seg[2];
      layout.height = be16(seg + 3);
      layout.width = be16(seg + 5);
      nf = seg[7];
      if (nf < 1 || nf > 4 || len != (size_t)(8 + 3 * nf)) return layout;
      for (int c = 0; c < nf; c++) {
        hs[c] = seg[8 + 3 * c + 1] >> 4;
        vs[c] = seg[8 + 3 * c + 1] & 15;
      }
      sof_at = header.size() + 2 + 3;
    } else if (code >= 0xC0 && code <= 0xCF && code != 0xC4 && code != 0xC8 && code != 0xCC) {
      other_sof = true;  // progressive, lossless, hierarchical
    } else if (code == 0xDD) {
      if (len != 4) return layout;
      layout.restart_interval = (int)be16(seg + 2);
      dri_count++;
    } else if (code == 0xDA) {
      if (len < 3) return layout;
      ns = seg[2];
      if (len != (size_t)(6 + 2 * ns)) return layout;
      layout.sos_at = marker_at;
    } else if (code == kIndexMarker && is_index_segment(seg + 2, len - 2)) {
      keep = false;
      const uint8_t* h = seg + 2 + kSignatureSize;  // version, chunk number, chunk count
      if (index_count == -1) index_count = h[2];
      if (h[0] != kIndexVersion || h[2] != index_count || h[1] != layout.index_chunks.size()) index_count = -2;
      if (index_count >= 0) layout.index_chunks.emplace_back(pos + 2 + kChunkHeader, len - 2 - kChunkHeader);
    } else if ((code >= 0xE1 && code <= 0xED) || code == 0xEF || code == 0xFE) {
      keep = false;  // metadata that does not change decoding (JFIF APP0 and Adobe APP14 stay)
    } else if (code != 0xC4 && code != 0xCC && code != 0xDB && code != 0xE0 && code != 0xEE) {
      unusual = true;  // DNL, DHP, EXP, JPGn...: leave to the sequential path
    }
    if (keep) {
      if (sof_at) layout.sof_size_at = sof_at;
      header.push_back((char)0xFF);
      header.push_back((char)code);
      header.append((const char*)seg, len);
    }
    pos += len;
    if (code == 0xDA) break;
  }
  layout.scan_start = pos;
  layout.parsed = true;
  layout.has_index_segment = index_count != -1;
  if (index_count < 0 || (size_t)index_count != layout.index_chunks.size()) layout.index_chunks.clear();
  if (!sequential_sof || other_sof || unusual || precision != 8 || dri_count != 1 || ns != nf ||
      layout.height <= 0 || layout.width <= 0 || layout.restart_interval <= 0)
    return layout;
  int hmax = 1, vmax = 1;
  for (int c = 0; c < nf; c++) {
    if (hs[c] < 1 || hs[c] > 4 || vs[c] < 1 || vs[c] > 4) return layout;
    if (hs[c] > hmax) hmax = hs[c];
    if (vs[c] > vmax) vmax = vs[c];
  }
  layout.num_components = nf;
  for (int c = 0; c < nf; c++) layout.h_samp[c] = hs[c];
  layout.max_h_samp = hmax;
  // A single-component scan is non-interleaved: one 8x8 block per MCU, whatever the factors.
  layout.mcu_w = nf == 1 ? 8 : 8 * hmax;
  layout.mcu_h = nf == 1 ? 8 : 8 * vmax;
  layout.mcus_per_row = ceil_div(layout.width, layout.mcu_w);
  layout.mcu_rows = ceil_div(layout.height, layout.mcu_h);
  const int64_t r = layout.restart_interval, mpr = layout.mcus_per_row;
  layout.eligible = (r % mpr == 0) || (mpr % r == 0);
  return layout;
}

bool find_restart_intervals(const uint8_t* data, size_t size, const RestartLayout& layout,
                            std::vector<size_t>* starts, std::vector<size_t>* ends) {
  const int64_t expected =
      ceil_div(layout.mcus_per_row * layout.mcu_rows, (int64_t)layout.restart_interval);
  starts->clear();
  ends->clear();
  starts->reserve((size_t)expected);
  ends->reserve((size_t)expected);
  starts->push_back(layout.scan_start);
  const uint8_t* const end = data + size;
  const uint8_t* p = data + layout.scan_start;
  for (;;) {
    // 0xFF occurs in entropy-coded data only as a stuffed 0xFF 0x00 or in a marker.
    const uint8_t* q = (const uint8_t*)memchr(p, 0xFF, (size_t)(end - p));
    if (q == nullptr) return false;  // no EOI: truncated, the sequential path reports it
    const uint8_t* r = q + 1;
    while (r < end && *r == 0xFF) r++;  // fill bytes
    if (r == end) return false;
    const unsigned code = *r;
    if (code == 0x00) {
      p = r + 1;
      continue;
    }
    if (code >= 0xD0 && code <= 0xD7) {
      const int64_t seen = (int64_t)ends->size();  // markers so far
      if (seen + 1 >= expected || (int64_t)(code - 0xD0) != seen % 8) return false;
      ends->push_back((size_t)(q - data));
      starts->push_back((size_t)(r + 1 - data));
      p = r + 1;
      continue;
    }
    if (code != 0xD9) return false;  // DNL, a second scan, junk: not the simple layout we handle
    ends->push_back((size_t)(q - data));
    return (int64_t)ends->size() == expected;
  }
}

bool plan_splice(const RestartLayout& layout, int64_t top, int64_t left, int64_t height,
                 int64_t width, int scale_num, SplicePlan* plan) {
  const int64_t H = layout.height, W = layout.width, mw = layout.mcu_w, mh = layout.mcu_h;
  const int64_t R = layout.restart_interval, mpr = layout.mcus_per_row, s = scale_num;
  // One pixel of context (at the output scale) on every side: fancy upsampling treats the
  // spliced image's edges as image edges, so none of them may be a needed pixel unless it
  // is one in the original. The window and its context are mapped to full-scale pixels;
  // rounding them out to whole MCUs (mw, mh >= 8) covers every block they touch, and the
  // MCU boundaries map to whole output pixels at every scale. (An upsampled pixel blends
  // its own sample with the nearest one on one side, whose pixels are adjacent to it.)
  const int64_t sx0 = left > 0 ? left - 1 : 0, sy0 = top > 0 ? top - 1 : 0;
  const int64_t px0 = sx0 * 8 / s, py0 = sy0 * 8 / s;
  const int64_t px1 = std::min(ceil_div((left + width + 1) * 8, s), W);
  const int64_t py1 = std::min(ceil_div((top + height + 1) * 8, s), H);
  const int64_t c0 = px0 / mw, c1 = ceil_div(px1, mw), r0 = py0 / mh, r1 = ceil_div(py1, mh);
  plan->intervals.clear();
  if (R % mpr == 0) {  // k whole rows per interval: skip the intervals above the window
    const int64_t k = R / mpr, i0 = r0 / k, i1 = ceil_div(r1, k);
    if (i0 == 0) return false;  // rows below the window are never decoded anyway
    plan->y0 = i0 * k * mh;
    plan->height = (i1 * k * mh < H ? i1 * k * mh : H) - plan->y0;
    plan->x0 = 0;
    plan->width = W;
    for (int64_t i = i0; i < i1; i++) plan->intervals.push_back(i);
    return true;
  }
  const int64_t n = mpr / R;  // n intervals per row
  int64_t j0 = c0 / R, j1 = ceil_div(c1, R);
  const auto span = [&](int64_t a, int64_t b) { return std::min(b * R * mw, W) - a * R * mw; };
  // Widen by whole intervals (right first, then left) until the frame's upsampling is the
  // image's; at full width it is.
  while ((j0 > 0 || j1 < n) && !upsampling_as_in_image(layout, span(j0, j1), s)) {
    if (j1 < n)
      j1++;
    else
      j0--;
  }
  if (r0 == 0 && j0 == 0 && j1 == n) return false;
  plan->y0 = r0 * mh;
  plan->height = (r1 * mh < H ? r1 * mh : H) - plan->y0;
  plan->x0 = j0 * R * mw;
  plan->width = span(j0, j1);
  plan->intervals.reserve((size_t)((r1 - r0) * (j1 - j0)));
  for (int64_t r = r0; r < r1; r++)
    for (int64_t j = j0; j < j1; j++) plan->intervals.push_back(r * n + j);
  return true;
}

void spans_from_scan(const std::vector<size_t>& starts, const std::vector<size_t>& ends, const SplicePlan& plan,
                     std::vector<IntervalSpan>* spans) {
  spans->resize(plan.intervals.size());
  for (size_t m = 0; m < plan.intervals.size(); m++) {
    const size_t i = (size_t)plan.intervals[m];
    (*spans)[m] = {starts[i], ends[i]};
  }
}

namespace {

// offs[k + 1] = offs[k] + the k-th of `count` big-endian W-byte distances at `d`; returns
// the smallest distance (UINT64_MAX when there is none).
template <int W>
uint64_t add_distances(const uint8_t* d, uint64_t count, uint64_t* offs) {
  uint64_t off = offs[0], smallest = UINT64_MAX;
  for (uint64_t k = 0; k < count; k++, d += W) {
    uint64_t v = 0;
    for (int b = 0; b < W; b++) v = (v << 8) | d[b];
    off += v;
    offs[k + 1] = off;
    smallest = v < smallest ? v : smallest;
  }
  return smallest;
}

uint64_t add_distances(int width, const uint8_t* d, uint64_t count, uint64_t* offs) {
  switch (width) {
    case 1: return add_distances<1>(d, count, offs);
    case 2: return add_distances<2>(d, count, offs);
    case 3: return add_distances<3>(d, count, offs);
    case 4: return add_distances<4>(d, count, offs);
    default: return UINT64_MAX;  // no distances (one interval per group)
  }
}

}  // namespace

bool spans_from_index(const uint8_t* data, size_t size, const RestartLayout& layout, const SplicePlan& plan,
                      std::vector<IntervalSpan>* spans) {
  if (layout.index_chunks.empty() || !layout.eligible || layout.scan_start >= size || plan.intervals.empty())
    return false;
  size_t blob_size = 0;
  for (const auto& c : layout.index_chunks) blob_size += c.second;
  if (blob_size < kBlobHeader) return false;
  BlobCursor head(data, layout.index_chunks, 0);
  const uint64_t N = head.next(4), G = head.next(4), n = head.next(4), w = head.next(1), eoi = head.next(4);
  if ((int64_t)N != restart_interval_count(layout) || (int64_t)n != restart_intervals_per_group(layout) ||
      G * n != N || (n == 1 ? w != 0 : (w < 1 || w > 4)) || blob_size != kBlobHeader + 4 * G + G * (n - 1) * w)
    return false;
  const size_t scan = layout.scan_start;
  const uint64_t limit = size - scan;  // relative offsets must stay below (markers: 2 bytes)
  // The scan must end where the index says: a truncated file is left to the scan (and then
  // to the sequential path, which reports it), as without an index.
  if (eoi + 2 > limit || data[scan + eoi] != 0xFF || data[scan + eoi + 1] != 0xD9) return false;
  const uint64_t last = (uint64_t)plan.intervals.back();  // plan order is stream order
  if (last >= N) return false;
  // Every marker from the scan's start to the end of the window's last interval is checked
  // at the offset the index gives (2 bytes each, no decode), not only the window's own: a
  // full decode reads them all, in stream order, and a damaged one (renumbered, or no
  // longer a marker) makes libjpeg resynchronize and put later intervals in other places,
  // so the window's pixels would differ from the full decode's. Markers after that cannot
  // change the window: libjpeg reaches them only after it has decoded every interval the
  // plan holds, and the plan already holds all the context the window's pixels depend on.
  // What this cannot see is a marker that damage created inside entropy-coded data outside
  // the window (only a pass over every byte can; strict decodes make it, decode_jpeg_roi.cpp).
  BlobCursor bases(data, layout.index_chunks, kBlobHeader);
  BlobCursor deltas(data, layout.index_chunks, kBlobHeader + 4 * G);
  spans->clear();
  spans->reserve(plan.intervals.size());
  // Group by group (an MCU row, or one interval): offs = where its intervals start, then
  // where the next group starts (after the last group: the end of EOI). The markers are
  // read with no branch per interval, so the walk runs at the speed of the reads.
  std::vector<uint64_t> offs((size_t)n + 1);
  std::vector<uint8_t> spill;  // a group's distances when they straddle two segments
  uint64_t base = bases.next(4);
  if (base != 0) return false;  // the first interval starts with the scan
  size_t planned = 0;          // the next plan entry
  for (uint64_t g = 0, i0 = 0; g <= last / n; g++, i0 += n) {
    offs[0] = base;
    const uint64_t shortest = add_distances((int)w, deltas.take((size_t)((n - 1) * w), &spill), n - 1, offs.data());
    base = g + 1 < G ? bases.next(4) : eoi + 2;
    offs[n] = base;
    // Every interval holds at least a byte and its marker; all of them inside the buffer.
    if (shortest < 3 || base < offs[n - 1] + 3 || base > limit) return false;
    const uint64_t checked = std::min(n, last - i0 + 1);  // the group's intervals up to the window's last
    unsigned bad = 0;
    for (uint64_t j = 0; j < checked; j++) {
      const uint8_t* marker = data + scan + offs[j + 1] - 2;
      const uint64_t i = i0 + j;
      bad |= (marker[0] ^ 0xFFu) | (marker[1] ^ (i + 1 == N ? 0xD9u : 0xD0u + (unsigned)(i & 7)));
    }
    if (bad != 0) return false;
    for (; planned < plan.intervals.size() && (uint64_t)plan.intervals[planned] < i0 + n; planned++) {
      const uint64_t i = (uint64_t)plan.intervals[planned];
      if (i < i0 || (planned > 0 && i <= (uint64_t)plan.intervals[planned - 1])) return false;  // not stream order
      const size_t s = scan + (size_t)offs[i - i0];
      size_t e = scan + (size_t)offs[i - i0 + 1] - 2;
      while (e > s && data[e - 1] == 0xFF) e--;  // fill bytes before the marker
      // No marker inside: every 0xFF of entropy-coded data is a stuffed 0xFF 0x00.
      for (const uint8_t* p = data + s;;) {
        const uint8_t* q = (const uint8_t*)memchr(p, 0xFF, (size_t)(data + e - p));
        if (q == nullptr) break;
        if (q + 1 >= data + e || q[1] != 0x00) return false;
        p = q + 2;
      }
      spans->push_back({s, e});
    }
  }
  return planned == plan.intervals.size();
}

void write_splice(const uint8_t* data, const RestartLayout& layout, const std::vector<IntervalSpan>& spans,
                  const SplicePlan& plan, std::vector<uint8_t>* out) {
  size_t total = layout.header.size() + 2;
  for (const IntervalSpan& span : spans) total += span.end - span.start + 2;
  out->resize(total);
  uint8_t* o = out->data();
  memcpy(o, layout.header.data(), layout.header.size());
  uint8_t* sof = o + layout.sof_size_at;
  sof[0] = (uint8_t)(plan.height >> 8);
  sof[1] = (uint8_t)plan.height;
  sof[2] = (uint8_t)(plan.width >> 8);
  sof[3] = (uint8_t)plan.width;
  o += layout.header.size();
  for (size_t m = 0; m < spans.size(); m++) {
    const size_t len = spans[m].end - spans[m].start;
    memcpy(o, data + spans[m].start, len);
    o += len;
    o[0] = 0xFF;
    o[1] = m + 1 < spans.size() ? (uint8_t)(0xD0 + m % 8) : 0xD9;
    o += 2;
  }
}

bool add_interval_index(const uint8_t* data, size_t size, std::vector<uint8_t>* out) {
  const RestartLayout layout = parse_restart_layout(data, size);
  if (!layout.parsed || !layout.eligible || layout.has_index_segment) return false;
  std::vector<size_t> starts, ends;
  if (!find_restart_intervals(data, size, layout, &starts, &ends)) return false;
  const size_t scan = layout.scan_start;
  size_t eoi = ends.back();
  while (data[eoi + 1] == 0xFF) eoi++;  // fill bytes before EOI
  const uint64_t N = starts.size(), n = (uint64_t)restart_intervals_per_group(layout), G = N / n;
  if (eoi - scan > UINT32_MAX || G * n != N) return false;
  uint64_t max_delta = 0;
  for (uint64_t i = 0; i + 1 < N; i++)
    if ((i + 1) % n) max_delta = std::max<uint64_t>(max_delta, starts[i + 1] - starts[i]);
  const int w = n == 1 ? 0 : max_delta < (1u << 8) ? 1 : max_delta < (1u << 16) ? 2 : max_delta < (1u << 24) ? 3 : 4;
  std::vector<uint8_t> blob(kBlobHeader + 4 * G + G * (n - 1) * (uint64_t)w);
  uint8_t* b = blob.data();
  put_be(b, N, 4);
  put_be(b + 4, G, 4);
  put_be(b + 8, n, 4);
  put_be(b + 12, (uint64_t)w, 1);
  put_be(b + 13, eoi - scan, 4);
  uint8_t* d = b + kBlobHeader + 4 * G;
  for (uint64_t g = 0; g < G; g++) {
    put_be(b + kBlobHeader + 4 * g, starts[g * n] - scan, 4);
    for (uint64_t k = 0; k + 1 < n; k++, d += w) put_be(d, starts[g * n + k + 1] - starts[g * n + k], w);
  }
  const size_t chunks = (blob.size() + kMaxChunk - 1) / kMaxChunk;
  if (chunks > 255) return false;
  out->clear();
  out->reserve(size + blob.size() + chunks * (4 + kChunkHeader));
  out->insert(out->end(), data, data + layout.sos_at);
  for (size_t c = 0; c < chunks; c++) {
    const size_t from = c * kMaxChunk, len = std::min(kMaxChunk, blob.size() - from);
    const size_t seg_len = 2 + kChunkHeader + len;
    const uint8_t head[4] = {0xFF, (uint8_t)kIndexMarker, (uint8_t)(seg_len >> 8), (uint8_t)seg_len};
    out->insert(out->end(), head, head + 4);
    out->insert(out->end(), kIndexSignature, kIndexSignature + kSignatureSize);
    const uint8_t chunk_head[3] = {(uint8_t)kIndexVersion, (uint8_t)c, (uint8_t)chunks};
    out->insert(out->end(), chunk_head, chunk_head + 3);
    out->insert(out->end(), blob.begin() + from, blob.begin() + from + len);
  }
  out->insert(out->end(), data + layout.sos_at, data + size);
  return true;
}

}  // namespace fastprep
