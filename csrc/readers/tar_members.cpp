// torch.ops.fastprep.read_tar_members: the samples of WebDataset shards (tar members located
// by their index), each shard opened once per call, every member's header and data read with
// one preadv and the header checked as fastprep/data/shards.py's _check_header does.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "exit_gate.h"
#include "readers/files.h"

namespace fastprep {
namespace {

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
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
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

}  // namespace

// No tensor arguments to dispatch on: one kernel for every backend.
TORCH_LIBRARY_IMPL(fastprep, CompositeImplicitAutograd, m) { m.impl("read_tar_members", &read_tar_members); }

}  // namespace fastprep
