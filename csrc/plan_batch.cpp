// torch.ops.fastprep.read_files, read_tar_members and plan_batch: the per-sample Python of
// the threads engine's readers (read the file, route it, read its header, draw its random
// parameters, plan its decode) as two calls per batch, without the GIL.
//
// plan_batch makes the draws of fastprep/data/native.py's keyed draws (themselves those of
// the decode transforms, which are torchvision v2's) with the same distributions on the same
// generator: torch's CPU Mersenne Twister seeded with the sample's key, drawn through
// ATen's own distribution templates (the ones torch's uniform_ and randint kernels use), so
// the numbers are the same, and the geometry of fastprep/transforms/_plan.py in integers.
// Anything it does not plan (not a JPEG, an EXIF rotation, a header warning, a crop larger
// than the image) is routed back to the Python path, which then does exactly what it did.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <torch/library.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "decode_batch.h"
#include "jpeg_ops.h"

namespace fastprep {
namespace {

// ------------------------------------------------------------------------------------
// read_files

// Codes for a path that is not a regular file (fastprep/data/datasets.py names the kinds).
enum NotRegular : int64_t {
  kDirectory = -1,
  kFifo = -2,
  kCharDevice = -3,
  kBlockDevice = -4,
  kSocket = -5,
  kOtherKind = -6
};

int64_t not_regular_code(mode_t mode) {
  if (S_ISDIR(mode)) return kDirectory;
  if (S_ISFIFO(mode)) return kFifo;
  if (S_ISCHR(mode)) return kCharDevice;
  if (S_ISBLK(mode)) return kBlockDevice;
  if (S_ISSOCK(mode)) return kSocket;
  return kOtherKind;
}

// Opens the regular file `path` into `fd` (with its fstat in `st`); 0, an errno value, or a
// NotRegular code (then no descriptor is left open). As datasets._read_regular_file: a FIFO
// or device is refused by stat before it is opened, and by fstat of the non-blocking
// descriptor after, so it never blocks.
int64_t open_regular(const std::string& path, int& fd, struct stat& st) {
  fd = -1;
  if (::stat(path.c_str(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return not_regular_code(st.st_mode);
  fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno;
  int64_t code = 0;
  if (::fstat(fd, &st) != 0) {
    code = errno;
  } else if (!S_ISREG(st.st_mode)) {
    code = not_regular_code(st.st_mode);
  }
  if (code != 0) {
    ::close(fd);
    fd = -1;
  }
  return code;
}

// The bytes of the regular file `path` into `out`; 0, an errno value, or a NotRegular code.
int64_t read_one(const std::string& path, at::Tensor& out) {
  struct stat st;
  int fd;
  int64_t code = open_regular(path, fd, st);
  if (code != 0) return code;
  std::vector<uint8_t> grown;  // only when the file grew since fstat
  int64_t size = (int64_t)st.st_size, have = 0;
  out = at::empty({size}, at::kByte);
  uint8_t* p = out.data_ptr<uint8_t>();
  for (;;) {
    uint8_t chunk[1 << 14];
    const bool inside = have < size;
    const ssize_t n = inside ? ::read(fd, p + have, (size_t)(size - have)) : ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      code = errno;
      break;
    }
    if (n == 0) break;
    if (inside) {
      have += n;
    } else {
      grown.insert(grown.end(), chunk, chunk + n);
    }
  }
  if (code == 0 && (have < size || !grown.empty())) {  // shrank or grew: what was read
    at::Tensor exact = at::empty({have + (int64_t)grown.size()}, at::kByte);
    std::memcpy(exact.data_ptr<uint8_t>(), p, (size_t)have);
    if (!grown.empty()) std::memcpy(exact.data_ptr<uint8_t>() + have, grown.data(), grown.size());
    out = exact;
  }
  ::close(fd);
  if (code != 0) out = at::Tensor();
  return code;
}

std::tuple<std::vector<at::Tensor>, at::Tensor> read_files(const std::vector<std::string>& paths) {
  const int64_t N = (int64_t)paths.size();
  std::vector<at::Tensor> datas((size_t)N);
  at::Tensor codes = at::empty({N}, at::kLong);
  int64_t* cv = codes.data_ptr<int64_t>();
  for (int64_t i = 0; i < N; i++) {
    cv[i] = read_one(paths[i], datas[i]);
    if (cv[i] != 0) datas[i] = at::empty({0}, at::kByte);
  }
  return {datas, codes};
}

// ------------------------------------------------------------------------------------
// read_tar_members

constexpr int64_t kTarBlock = 512;

// The value of a tar numeric field: octal text (NUL/space padded), or GNU base-256 when its
// first byte is 0x80 (positive) or 0xff (negative). False when the text is not octal.
bool tar_number(const uint8_t* field, int len, int64_t& value) {
  if (field[0] == 0x80 || field[0] == 0xff) {
    uint64_t v = 0;
    for (int i = 1; i < len; i++) v = (v << 8) | field[i];
    value = field[0] == 0xff ? (int64_t)(v - ((uint64_t)1 << (8 * (len - 1)))) : (int64_t)v;
    return true;
  }
  int end = 0;
  while (end < len && field[end] != 0) end++;
  int begin = 0;
  while (begin < end && field[begin] == ' ') begin++;
  while (end > begin && field[end - 1] == ' ') end--;
  value = 0;
  for (int i = begin; i < end; i++) {
    if (field[i] < '0' || field[i] > '7') return false;
    value = value * 8 + (field[i] - '0');
  }
  return true;
}

// Whether the 512-byte header `h` describes the regular member `member` of `size` bytes, by
// fastprep/data/shards.py's _check_header rules (checksum signed or unsigned, type, size,
// and the ustar name where `member` is a short ASCII name; an empty `member` skips the name).
bool tar_header_matches(const uint8_t* h, const std::string& member, int64_t size) {
  int64_t stored, header_size;
  if (!tar_number(h + 148, 8, stored)) return false;
  int64_t unsigned_sum = 256, signed_sum = 256;
  for (int i = 0; i < kTarBlock; i++) {
    if (i >= 148 && i < 156) continue;
    unsigned_sum += h[i];
    signed_sum += (int8_t)h[i];
  }
  if (stored != unsigned_sum && stored != signed_sum) return false;
  if (h[156] != '0' && h[156] != 0 && h[156] != '7') return false;
  if (!tar_number(h + 124, 12, header_size) || header_size != size) return false;
  if (member.empty() || member.size() > 100) return true;
  std::string name((const char*)h, strnlen((const char*)h, 100));
  if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != 0) {
    name = std::string((const char*)h + 345, strnlen((const char*)h + 345, 155)) + "/" + name;
  }
  return name == member;
}

// Member i of a batch: its header and data read with one preadv from the open shard `fd`.
// 0 when the header matches; 1 for anything else (the Python path then says what).
int64_t read_member(int fd, int64_t offset, int64_t size, const std::string& member, at::Tensor& out) {
  if (offset < kTarBlock || size < 0) return 1;
  uint8_t header[kTarBlock];
  out = at::empty({size}, at::kByte);
  struct iovec iov[2] = {{header, (size_t)kTarBlock}, {out.data_ptr<uint8_t>(), (size_t)size}};
  const int64_t want = kTarBlock + size;
  int64_t got = 0;
  while (got < want) {
    ssize_t n;
    if (got < kTarBlock) {
      struct iovec rest[2] = {{header + got, (size_t)(kTarBlock - got)}, iov[1]};
      n = ::preadv(fd, rest, 2, offset - kTarBlock + got);
    } else {
      struct iovec rest = {out.data_ptr<uint8_t>() + (got - kTarBlock), (size_t)(want - got)};
      n = ::preadv(fd, &rest, 1, offset - kTarBlock + got);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 1;
    got += n;
  }
  return tar_header_matches(header, member, size) ? 0 : 1;
}

// Per member: its data (uint8 1-D) and 0, or an empty tensor and 1 when the read or the check
// failed. Each distinct shard is opened once per call; a shard that is not a regular file is
// never read (as read_files).
std::tuple<std::vector<at::Tensor>, at::Tensor> read_tar_members(const std::vector<std::string>& shards,
                                                                 const std::vector<int64_t>& offsets,
                                                                 const std::vector<int64_t>& sizes,
                                                                 const std::vector<std::string>& members) {
  const int64_t N = (int64_t)shards.size();
  TORCH_CHECK(offsets.size() == shards.size() && sizes.size() == shards.size() && members.size() == shards.size(),
              "read_tar_members: shards, offsets, sizes and members must have the same length, got ", N, ", ",
              offsets.size(), ", ", sizes.size(), " and ", members.size());
  std::vector<at::Tensor> datas((size_t)N);
  at::Tensor codes = at::empty({N}, at::kLong);
  int64_t* cv = codes.data_ptr<int64_t>();
  std::vector<int64_t> order((size_t)N);
  for (int64_t i = 0; i < N; i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return shards[a] < shards[b]; });
  int fd = -1;
  const std::string* open_path = nullptr;
  for (int64_t i : order) {
    if (open_path == nullptr || *open_path != shards[i]) {
      if (fd >= 0) ::close(fd);
      open_path = &shards[i];
      struct stat st;
      open_regular(*open_path, fd, st);  // fd < 0 on any failure: the Python path names it
    }
    cv[i] = fd < 0 ? 1 : read_member(fd, offsets[i], sizes[i], members[i], datas[i]);
    if (cv[i] != 0) datas[i] = at::empty({0}, at::kByte);
  }
  if (fd >= 0) ::close(fd);
  return {datas, codes};
}

// ------------------------------------------------------------------------------------
// plan_batch

// What plan_batch plans (fastprep/data/native.py picks it from the decode transform).
enum Kind : int64_t {
  kNoDraw = 0,       // no random window: the header only (and the mask's seed); Python plans
  kResizedCrop = 1,  // DecodeRandomResizedCrop (v2 RandomResizedCrop, then the flip)
  kRandomCrop = 2    // DecodeRandomCrop without padding (v2 RandomCrop's offsets)
};
// iparams: output size, flags and the mask's numerator; fparams: RandomResizedCrop's bounds.
enum IntParam : int64_t { kOutH, kOutW, kAntialiasFlag, kDctScaling, kPadIfNeeded, kHasMask, kMaskNum, kIntParams };
enum FloatParam : int64_t {
  kScaleLo, kScaleHi, kLogRatioLo, kLogRatioHi, kRatioLo, kRatioHi, kFlipP, kFlipBelow, kFloatParams
};
// A sample's status.
enum Route : int8_t { kPlanned = 0, kPython = 1, kError = 2 };

// The EXIF orientation of a JPEG (1-8), 0 when absent or unreadable: the marker segments
// before the first scan, within the first 64 KiB (fastprep.data.fallback.exif_orientation
// of data[:65536]).
int exif_orientation(const uint8_t* d, size_t size) {
  const size_t n = std::min<size_t>(size, 1 << 16);
  size_t pos = 2;
  while (pos + 4 <= n && d[pos] == 0xFF) {
    const uint8_t marker = d[pos + 1];
    if (marker == 0xFF) {
      pos += 1;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
      pos += 2;
      continue;
    }
    if (marker == 0xDA) return 0;
    const size_t length = ((size_t)d[pos + 2] << 8) | d[pos + 3];
    if (length < 2) return 0;
    if (marker == 0xE1 && pos + 10 <= n && std::memcmp(d + pos + 4, "Exif\0\0", 6) == 0) {
      const uint8_t* t = d + pos + 10;  // the TIFF structure, to the segment's end
      const size_t end = std::min(pos + 2 + length, n);
      const size_t tn = end > pos + 10 ? end - (pos + 10) : 0;
      if (tn < 2) return 0;
      const bool le = t[0] == 'I' && t[1] == 'I';
      if (!le && !(t[0] == 'M' && t[1] == 'M')) return 0;
      auto u16 = [&](size_t at) -> int64_t {
        if (at + 2 > tn) return -1;
        return le ? (t[at] | (t[at + 1] << 8)) : ((t[at] << 8) | t[at + 1]);
      };
      auto u32 = [&](size_t at) -> int64_t {
        if (at + 4 > tn) return -1;
        const uint32_t v = le ? (uint32_t)t[at] | ((uint32_t)t[at + 1] << 8) | ((uint32_t)t[at + 2] << 16) |
                                    ((uint32_t)t[at + 3] << 24)
                              : ((uint32_t)t[at] << 24) | ((uint32_t)t[at + 1] << 16) | ((uint32_t)t[at + 2] << 8) |
                                    (uint32_t)t[at + 3];
        return (int64_t)v;
      };
      const int64_t ifd = u32(4);
      if (ifd < 0) return 0;
      const int64_t count = u16((size_t)ifd);
      if (count < 0) return 0;
      for (int64_t k = 0; k < count; k++) {
        const size_t entry = (size_t)ifd + 2 + 12 * (size_t)k;
        if (entry + 12 > tn) return 0;
        if (u16(entry) == 0x0112 && u16(entry + 2) == 3) {
          const int64_t v = u16(entry + 8);
          return v >= 1 && v <= 8 ? (int)v : 0;
        }
      }
      return 0;
    }
    pos += 2 + length;
  }
  return 0;
}

// A torch CPU generator seeded as torch.Generator().manual_seed(key), and the draws of
// torch's CPU kernels on it: uniform_ on a float32 tensor, randint on int64, exp of float32.
class Draws {
 public:
  explicit Draws(uint64_t key) : gen_(key) {}

  float uniform(double from, double to) {  // Tensor.uniform_(from, to), float32
    const float lo = (float)from, hi = (float)to;
    at::uniform_real_distribution<float> u(lo, hi);
    const float v = (float)u(&gen_);
    return v == hi ? lo : v;  // as the kernel: a value rounded up to `to` becomes `from`
  }

  int64_t randint(int64_t low, int64_t high) {  // torch.randint(low, high, ...), int64
    at::uniform_int_from_to_distribution<int64_t> r((uint64_t)(high - low), low);
    return r(&gen_);
  }

  static float exp(float x) {  // torch.exp on a one-element float32 tensor
    return at::exp(at::scalar_tensor(x, at::kFloat)).item<float>();
  }

 private:
  at::CPUGeneratorImpl gen_;
};

inline int64_t round_half_even(double x) { return (int64_t)std::nearbyint(x); }

struct Window {
  int64_t top, left, h, w;
};

// v2 RandomResizedCrop's window (native.py _ResizedCropDraw, _plan.centered_ratio_window).
Window resized_crop_window(Draws& g, int64_t height, int64_t width, const double* f) {
  const double area = (double)(height * width);
  for (int attempt = 0; attempt < 10; attempt++) {
    const double target_area = area * (double)g.uniform(f[kScaleLo], f[kScaleHi]);
    const double aspect = (double)Draws::exp(g.uniform(f[kLogRatioLo], f[kLogRatioHi]));
    const int64_t w = round_half_even(std::sqrt(target_area * aspect));
    const int64_t h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = g.randint(0, height - h + 1);
      const int64_t left = g.randint(0, width - w + 1);
      return {top, left, h, w};
    }
  }
  const double in_ratio = (double)width / (double)height;
  int64_t h = height, w = width;
  if (in_ratio < f[kRatioLo]) {
    h = round_half_even((double)width / f[kRatioLo]);
  } else if (in_ratio > f[kRatioHi]) {
    w = round_half_even((double)height * f[kRatioHi]);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// _plan.plan_scaled_window: the smallest DCT scale whose rounded window is still `out`.
int64_t scaled_window(int64_t height, int64_t width, Window& win, int64_t oh, int64_t ow,
                      const std::vector<int64_t>& scales) {
  for (const int64_t num : scales) {
    const int64_t hs = (height * num + 7) / 8, ws = (width * num + 7) / 8;
    const int64_t y0 = (win.top * num + 4) / 8, x0 = (win.left * num + 4) / 8;
    const int64_t y1 = std::min(((win.top + win.h) * num + 4) / 8, hs);
    const int64_t x1 = std::min(((win.left + win.w) * num + 4) / 8, ws);
    if (y1 - y0 >= oh && x1 - x0 >= ow) {
      win = {y0, x0, y1 - y0, x1 - x0};
      return num;
    }
  }
  return 8;
}

// The plan row of DecodeRandomResizedCrop: the (scaled) window resized to the output, then
// maybe mirrored, placed at (0, 0).
void resized_crop_row(int64_t* p, int64_t height, int64_t width, Draws& g, const int64_t* ip, const double* f,
                      const std::vector<int64_t>& scales) {
  Window win = resized_crop_window(g, height, width, f);
  bool flip = false;
  if (f[kFlipP] > 0) flip = (double)g.uniform(0.0, 1.0) < f[kFlipBelow];
  const int64_t oh = ip[kOutH], ow = ip[kOutW];
  p[kNum] = ip[kDctScaling] ? scaled_window(height, width, win, oh, ow, scales) : 8;
  p[kDecTop] = win.top, p[kDecLeft] = win.left, p[kDecH] = win.h, p[kDecW] = win.w;
  p[kResize] = 1;
  p[kFullInH] = win.h, p[kFullInW] = win.w, p[kInTop] = 0, p[kInLeft] = 0;
  p[kFullOutH] = oh, p[kFullOutW] = ow, p[kOutTop] = 0, p[kOutLeft] = 0, p[kRegionH] = oh, p[kRegionW] = ow;
  p[kAntialias] = ip[kAntialiasFlag] ? 1 : 0;
  p[kHflip] = flip ? 1 : 0;
  p[kPlaced] = 1, p[kPlaceTop] = 0, p[kPlaceLeft] = 0;
}

// The plan row of DecodeRandomCrop without padding (v2 RandomCrop, then _plan.padded_plan);
// false where the transform raises (the image is smaller than the crop).
bool random_crop_row(int64_t* p, int64_t height, int64_t width, Draws& g, const int64_t* ip) {
  const int64_t th = ip[kOutH], tw = ip[kOutW];
  int64_t h = height, w = width, pl = 0, pt = 0;
  if (ip[kPadIfNeeded] && w < tw) pl = tw - w, w += 2 * (tw - w);
  if (ip[kPadIfNeeded] && h < th) pt = th - h, h += 2 * (th - h);
  if (h < th || w < tw) return false;
  const int64_t i = h > th ? g.randint(0, h - th + 1) : 0;
  const int64_t j = w > tw ? g.randint(0, w - tw + 1) : 0;
  const int64_t y0 = std::max<int64_t>(i - pt, 0), x0 = std::max<int64_t>(j - pl, 0);
  const int64_t y1 = std::min(i - pt + th, height), x1 = std::min(j - pl + tw, width);
  p[kNum] = 8;
  if (y1 <= y0 || x1 <= x0) {  // all padding: decode one pixel only to check the file
    p[kDecTop] = 0, p[kDecLeft] = 0, p[kDecH] = 1, p[kDecW] = 1, p[kRegionH] = 1, p[kRegionW] = 1;
    return true;
  }
  p[kDecTop] = y0, p[kDecLeft] = x0, p[kDecH] = y1 - y0, p[kDecW] = x1 - x0;
  p[kRegionH] = y1 - y0, p[kRegionW] = x1 - x0;
  p[kPlaced] = 1, p[kPlaceTop] = y0 - (i - pt), p[kPlaceLeft] = x0 - (j - pl);
  return true;
}

// Sample i: route, header, limits, draws. Returns its route; `message` holds an error's text.
Route plan_one(const at::Tensor& data, uint64_t key, int64_t kind, const int64_t* ip, const double* f,
               const std::vector<int64_t>& scales, int64_t max_pixels, bool exif, int64_t* p,
               int64_t* hw, std::string& message) {
  const uint8_t* d = data.data_ptr<uint8_t>();
  const size_t n = (size_t)data.numel();
  if (n < 3 || d[0] != 0xFF || d[1] != 0xD8 || d[2] != 0xFF) return kPython;  // not a JPEG's signature
  if (exif) {
    const int orientation = exif_orientation(d, n);
    if (orientation > 1) return kPython;  // the dataset's EXIF-rotation fallback
  }
  fp_info info;
  try {
    const Decoder dec(false);  // a decoder reads one header
    info = read_header(dec, d, n);
  } catch (const c10::Error& e) {
    thread_warning().clear();
    message = decode_error_text(e.what_without_backtrace());
    return kError;
  }
  if (!thread_warning().empty()) {  // the Python path issues its DecodeWarning
    thread_warning().clear();
    return kPython;
  }
  const int64_t height = info.height, width = info.width;
  if (max_pixels > 0 && height * width > max_pixels) {
    message = "image of " + std::to_string(height) + "x" + std::to_string(width) + " = " +
              std::to_string(height * width) + " pixels exceeds max_pixels=" + std::to_string(max_pixels);
    return kError;
  }
  hw[0] = height, hw[1] = width;
  Draws g(key);
  if (kind == kResizedCrop) {
    resized_crop_row(p, height, width, g, ip, f, scales);
  } else if (kind == kRandomCrop) {
    if (!random_crop_row(p, height, width, g, ip)) return kPython;  // the transform raises
  }
  if (ip[kHasMask]) {  // RandomMask.get_params: torch.randint(0, 2**63 - 1, ())
    p[kMask] = 1;
    p[kMaskSeed] = g.randint(0, INT64_MAX);
    p[kMaskM] = ip[kMaskNum];
  }
  return kPlanned;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> plan_batch(
    const std::vector<at::Tensor>& data, const at::Tensor& keys, int64_t kind, const std::vector<int64_t>& iparams,
    const std::vector<double>& fparams, const std::vector<int64_t>& dct_scales, int64_t max_pixels, bool exif) {
  const int64_t N = (int64_t)data.size();
  TORCH_CHECK_VALUE(kind == kNoDraw || kind == kResizedCrop || kind == kRandomCrop, "plan_batch: unknown kind ",
                    kind);
  TORCH_CHECK_VALUE((int64_t)iparams.size() == kIntParams && (int64_t)fparams.size() == kFloatParams,
                    "plan_batch: iparams must have ", (int64_t)kIntParams, " values and fparams ",
                    (int64_t)kFloatParams, ", got ", iparams.size(), " and ", fparams.size());
  TORCH_CHECK_VALUE(keys.scalar_type() == at::kLong && keys.dim() == 1 && keys.numel() == N && keys.is_contiguous() &&
                        keys.device().is_cpu(),
                    "plan_batch: keys must be a contiguous int64 CPU tensor [", N, "]");
  TORCH_CHECK_VALUE(max_pixels >= 0, "plan_batch: max_pixels must be >= 0, got ", max_pixels);
  TORCH_CHECK_VALUE(iparams[kOutH] > 0 && iparams[kOutW] > 0 && iparams[kMaskNum] >= 0,
                    "plan_batch: bad output size or mask numerator");
  for (const int64_t s : dct_scales) TORCH_CHECK_VALUE(s >= 1 && s <= 8, "plan_batch: DCT scales are 1..8, got ", s);
  if (kind == kResizedCrop)
    TORCH_CHECK_VALUE(fparams[kScaleLo] <= fparams[kScaleHi] && fparams[kLogRatioLo] <= fparams[kLogRatioHi] &&
                          fparams[kRatioLo] > 0,
                      "plan_batch: bad RandomResizedCrop bounds");
  for (int64_t i = 0; i < N; i++) {
    const at::Tensor& d = data[i];
    TORCH_CHECK_TYPE(d.scalar_type() == at::kByte, "plan_batch: data[", i, "] must be uint8, got ", d.scalar_type());
    TORCH_CHECK_VALUE(d.dim() == 1 && d.device().is_cpu() && d.is_contiguous(), "plan_batch: data[", i,
                      "] must be a contiguous 1-D CPU tensor");
  }
  at::Tensor plans = at::zeros({N, kPlanColumns}, at::kLong);
  at::Tensor scales = at::zeros({N, kScaleColumns}, at::kDouble);
  at::Tensor hw = at::zeros({N, 2}, at::kLong);
  int64_t* pv = plans.data_ptr<int64_t>();
  int64_t* hv = hw.data_ptr<int64_t>();
  const int64_t* kv = keys.data_ptr<int64_t>();
  std::vector<int8_t> codes((size_t)N, kPlanned);
  std::vector<std::string> messages((size_t)N);
  for (int64_t i = 0; i < N; i++) {
    codes[i] = plan_one(data[i], (uint64_t)kv[i], kind, iparams.data(), fparams.data(), dct_scales, max_pixels, exif,
                        pv + i * kPlanColumns, hv + 2 * i, messages[i]);
  }
  auto [status, text] = status_table(codes, messages);
  return {plans, scales, hw, status, text};
}

}  // namespace

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("plan_batch", &plan_batch); }
// No tensor arguments to dispatch on: one kernel for every backend.
TORCH_LIBRARY_IMPL(fastprep, CompositeImplicitAutograd, m) {
  m.impl("read_files", &read_files);
  m.impl("read_tar_members", &read_tar_members);
}

}  // namespace fastprep
