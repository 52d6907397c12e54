// Reading the threads engine's samples without the GIL (readers/read_files.cpp,
// readers/tar_members.cpp): regular files only, never blocking on a FIFO or a device.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace fastprep {

// Codes for a path that is not a regular file (fastprep/data/_files.py names the kinds).
enum NotRegular : int64_t {
  kDirectory = -1,
  kFifo = -2,
  kCharDevice = -3,
  kBlockDevice = -4,
  kSocket = -5,
  kOtherKind = -6
};

// Opens the regular file `path` into `fd` (with its fstat in `st`); 0, an errno value, or a
// NotRegular code (then no descriptor is left open). A FIFO or device is refused by stat
// before it is opened, and by fstat of the non-blocking descriptor after, so it never blocks.
int64_t open_regular(const std::string& path, int& fd, struct stat& st);

}  // namespace fastprep
