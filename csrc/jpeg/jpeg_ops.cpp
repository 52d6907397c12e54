// The out-of-line part of jpeg_ops.h.
#include "jpeg/jpeg_ops.h"

#include <string>

namespace fastprep {

std::string& thread_warning() {
  static thread_local std::string pending;
  return pending;
}

}  // namespace fastprep
