// The ISA switch of isa.h.
#include "isa.h"

#include <algorithm>

namespace fastprep {

int64_t cpu_isa_level() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int64_t level = [] {
    __builtin_cpu_init();
    return (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? kIsaAvx2 : kIsaBaseline;
  }();
  return level;
#else
  return kIsaBaseline;
#endif
}

namespace {
int64_t& active_level() {
  static int64_t level = cpu_isa_level();
  return level;
}
}  // namespace

int64_t isa_level() { return active_level(); }

int64_t set_isa_level(int64_t level) {
  active_level() = std::clamp<int64_t>(level, kIsaBaseline, cpu_isa_level());
  return active_level();
}

}  // namespace fastprep
