// Pixel kernels: the native implementations of torchvision v2's image operations (colour
// adjustments, autocontrast, equalize, posterize, solarize, invert, sharpness, blur, affine,
// flips, erasing), each giving torchvision's bits on the same input.
//
// A kernel is registered once, by name, with up to two implementations:
//
// * `reference`: ATen's own operations called from C++ in the order torchvision's functional
//   calls them (same ops, same arguments, same dtypes), so the same kernels run and the result
//   is torchvision's by construction, on any CPU and torch build;
// * `fast` (optional): a hand-written single pass. Whether it gives the reference's bits can
//   depend on how this torch build rounds (ATen computes `a.add_(b, alpha=x)` as one fused
//   multiply-add on FMA CPUs, as two roundings elsewhere), so the first call of a kernel runs
//   both on its probe images and parameters and keeps the fast one only when every output is
//   equal; otherwise the reference runs for the life of the process
//   (pixel_kernel_status() says which, and why).
//
// Kernels run inside the batch op's native threads without the GIL, each on its calling thread
// alone, as in a DataLoader worker, which torch limits to one thread: a c10::ParallelGuard
// makes at::parallel_for run inline, and the thread's OpenMP and MKL thread counts are 1 while
// a kernel runs (oneDNN's convolutions and MKL's GEMM thread with OpenMP directly).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fastprep {

// An image in planar [C, H, W] layout, contiguous: uint8 (the augmentations) or float32 (what
// runs after ToDtype + Normalize: RandomErasing).
struct Image {
  void* data = nullptr;
  at::ScalarType dtype = at::kByte;
  int64_t channels = 0, height = 0, width = 0;
  // Capacity of `data` in elements: a kernel may change the channel count (Grayscale) but
  // never needs more than the image had.
  int64_t capacity = 0;

  int64_t plane() const { return height * width; }
  int64_t numel() const { return channels * height * width; }
  uint8_t* u8() const { return static_cast<uint8_t*>(data); }
  float* f32() const { return static_cast<float*>(data); }
  // The pixels as a CPU tensor that shares the memory (no copy).
  at::Tensor tensor() const;
  // Replace the pixels with `t` ([C', H, W] of the image's dtype, C' <= capacity / plane).
  void assign(const at::Tensor& t);
};

// One applied step of a sample's plan: which kernel, and the parameters its transform's draw
// chose. Each kernel names its fields (pixel_kernel_params); unused ones are 0. The same
// layout is fastprep/transforms/_native.py's STEP_DTYPE (checked against struct_layout()).
constexpr int kStepInts = 6;
constexpr int kStepFloats = 18;
struct PixelStep {
  int64_t kernel = -1;
  int64_t extra = -1;  // index of a tensor the step needs in the sample's extras (StepExtras), or -1
  int64_t i[kStepInts] = {};
  double f[kStepFloats] = {};
};

// Tensors a sample's steps refer to by index (RandomErasing's noise), kept by the draw.
struct StepExtras {
  const at::Tensor* tensors = nullptr;
  int64_t count = 0;
};

// Per-thread scratch, grown on demand and reused across samples; `extras` is set per sample.
struct KernelScratch {
  std::vector<float> f32[4];
  std::vector<uint8_t> u8;
  std::vector<int32_t> i32;
  StepExtras extras;
};

using KernelFn = void (*)(const PixelStep& step, Image& image, KernelScratch& scratch);

struct PixelKernelDef {
  const char* name;    // the kernel's name (fastprep/transforms/_native.py looks kernels up by it)
  const char* params;  // what i[] and f[] hold, e.g. "f0=factor"
  KernelFn reference;  // ATen's arithmetic (always set)
  KernelFn fast;       // optional hand-written kernel; nullptr: the reference always runs
  // Parameter sets for the proof of `fast` (run on uint8 probe images of several odd sizes).
  std::vector<PixelStep> (*probes)();
};

// Registers a kernel (at static-initialisation time, FP_REGISTER_PIXEL_KERNEL) and returns its id.
int64_t register_pixel_kernel(const PixelKernelDef& def);
// The id of kernel `name`, or -1.
int64_t pixel_kernel_id(const std::string& name);
// Runs `step` (kernel id already validated) on `image`.
void run_pixel_step(const PixelStep& step, Image& image, KernelScratch& scratch);
// "fast", "reference" (no fast kernel), or "reference: <why the fast kernel is not used>".
std::string pixel_kernel_status(int64_t id);
// Validates a step's kernel id (TORCH_CHECK naming `where`).
void check_pixel_step(const PixelStep& step, const char* where);

#define FP_CONCAT_INNER(a, b) a##b
#define FP_CONCAT(a, b) FP_CONCAT_INNER(a, b)
// Registers a kernel from a PixelKernelDef initializer at static-initialisation time.
#define FP_REGISTER_PIXEL_KERNEL(...) \
  static const int64_t FP_CONCAT(fp_pixel_kernel_, __LINE__) = ::fastprep::register_pixel_kernel(__VA_ARGS__)

// Shared helpers for kernels.

// torchvision's _max_value for the image's dtype: 255 for uint8, 1 for float.
inline double max_value(const Image& image) { return image.dtype == at::kByte ? 255.0 : 1.0; }

// p[k] = lut[p[k]] for k < n: a 256-entry table looked up with AVX2 shuffles where the CPU (and
// isa.h's switch) allows, else one value at a time (point_ops.cpp).
void lut_span(uint8_t* p, int64_t n, const uint8_t* lut);

template <typename T>
T* grown(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace fastprep
