// The one ISA switch of the C++ kernels: which instruction-set variant of a kernel runs.
//
// Kernels with variants write their loop once, as an always-inline body, and instantiate it
// in wrappers compiled for each level (FP_TARGET_AVX2 below): the compiler vectorizes the
// same source for each target, so every variant performs the same IEEE operations in the
// same order and gives the same bits. The level in use is the best the CPU supports, capped
// by set_isa_level (fastprep._kernels.isa calls it from FASTPREP_ISA / set_isa).
#pragma once

#include <cstdint>

namespace fastprep {

enum IsaLevel : int64_t {
  kIsaBaseline = 0,  // x86-64 baseline (SSE2)
  kIsaAvx2 = 1,      // AVX2 + FMA + F16C
};

// The best level this CPU supports.
int64_t cpu_isa_level();
// The level in use.
int64_t isa_level();
// Use min(level, cpu_isa_level()); returns the level in use. Not thread-safe: call it before
// kernels run (tests and benchmarks switch it).
int64_t set_isa_level(int64_t level);

}  // namespace fastprep

#if defined(__x86_64__) && defined(__GNUC__)
#define FP_HAVE_AVX2_TARGET 1
// A function compiled for AVX2 with FMA and F16C (every AVX2 CPU has them).
#define FP_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define FP_HAVE_AVX2_TARGET 0
#define FP_TARGET_AVX2
#endif
// A kernel body instantiated inside each variant's wrapper.
#define FP_ALWAYS_INLINE inline __attribute__((always_inline))

// Defines `name params` that runs `name##_body args` compiled for AVX2+FMA when the CPU (and
// set_isa_level) allows, else for the baseline: the same always-inline body, vectorized for
// each target. Use it inside namespace fastprep.
#define FP_VARIANTS(name, params, args)                        \
  FP_TARGET_AVX2 void name##_avx2 params { name##_body args; } \
  void name##_base params { name##_body args; }                \
  void name params {                                           \
    if (FP_HAVE_AVX2_TARGET && isa_level() >= kIsaAvx2)        \
      name##_avx2 args;                                        \
    else                                                       \
      name##_base args;                                        \
  }

// FP_VARIANTS for a body that returns a value of type `ret`.
#define FP_VARIANTS_RET(ret, name, params, args)                         \
  FP_TARGET_AVX2 ret name##_avx2 params { return name##_body args; }    \
  ret name##_base params { return name##_body args; }                   \
  ret name params {                                                     \
    if (FP_HAVE_AVX2_TARGET && isa_level() >= kIsaAvx2) return name##_avx2 args; \
    return name##_base args;                                            \
  }
