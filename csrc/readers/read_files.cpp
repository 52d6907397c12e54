// torch.ops.fastprep.read_files: the bytes of each regular file of a batch (uint8 1-D), and
// per path 0, an errno value, or a negative code for a path that is not a regular file
// (never opened when stat says so). The threads engine's readers call it once per batch,
// without the GIL.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "exit_gate.h"
#include "readers/files.h"

namespace fastprep {
namespace {

int64_t not_regular_code(mode_t mode) {
  if (S_ISDIR(mode)) return kDirectory;
  if (S_ISFIFO(mode)) return kFifo;
  if (S_ISCHR(mode)) return kCharDevice;
  if (S_ISBLK(mode)) return kBlockDevice;
  if (S_ISSOCK(mode)) return kSocket;
  return kOtherKind;
}

}  // namespace

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

namespace {

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
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
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

}  // namespace

// No tensor arguments to dispatch on: one kernel for every backend.
TORCH_LIBRARY_IMPL(fastprep, CompositeImplicitAutograd, m) { m.impl("read_files", &read_files); }

}  // namespace fastprep
