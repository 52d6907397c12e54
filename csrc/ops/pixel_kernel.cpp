// The pixel-kernel registry (pixel_kernel.h): registration, the proof of fast kernels, and the
// ops that expose single kernels to Python (torch.ops.fastprep.apply_pixel_kernel,
// pixel_kernel_info) for fastprep.functional and the tests.
#include "exit_gate.h"
#include "ops/pixel_kernel.h"

#include <c10/util/ParallelGuard.h>
#include <torch/library.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

// The OpenMP runtime torch loads and the MKL inside libtorch_cpu, if any (weak: null when absent;
// MKL_Set_Num_Threads_Local is the C entry point that mkl_service.h names mkl_set_num_threads_local).
extern "C" {
int omp_get_max_threads() __attribute__((weak));
void omp_set_num_threads(int) __attribute__((weak));
int MKL_Set_Num_Threads_Local(int) __attribute__((weak));
}

namespace fastprep {

at::Tensor Image::tensor() const {
  return at::from_blob(data, {channels, height, width}, at::TensorOptions().dtype(dtype));
}

void Image::assign(const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 3 && t.size(1) == height && t.size(2) == width && t.scalar_type() == dtype &&
                  t.numel() <= capacity,
              "pixel kernel produced ", t.sizes(), " ", t.scalar_type(), " for a ", channels, "x", height, "x",
              width, " ", dtype, " image");
  const at::Tensor c = t.contiguous();
  if (c.data_ptr() != data) std::memcpy(data, c.data_ptr(), (size_t)c.nbytes());
  channels = t.size(0);
}

namespace {

// A kernel runs on the calling thread alone: at::parallel_for inline (ParallelGuard), and the
// thread's OpenMP and MKL thread counts at 1, which oneDNN's convolutions (gaussian_blur's and
// adjust_sharpness's references) and MKL's GEMM (affine's grid) read directly, past the
// ParallelGuard. Both counts are per thread and restored on exit, so the caller's torch
// threads are unchanged.
class SingleThreaded {
 public:
  SingleThreaded() : inline_aten_(true) {
    if (omp_get_max_threads != nullptr && omp_set_num_threads != nullptr) {
      omp_threads_ = omp_get_max_threads();
      if (omp_threads_ != 1) omp_set_num_threads(1);
    }
    if (MKL_Set_Num_Threads_Local != nullptr) mkl_threads_ = MKL_Set_Num_Threads_Local(1);
  }
  ~SingleThreaded() {
    if (omp_threads_ > 1) omp_set_num_threads(omp_threads_);
    if (MKL_Set_Num_Threads_Local != nullptr) MKL_Set_Num_Threads_Local(mkl_threads_);
  }
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  c10::ParallelGuard inline_aten_;
  int omp_threads_ = 0;
  int mkl_threads_ = 0;  // 0: the thread follows MKL's global count
};

struct Entry {
  PixelKernelDef def;
  std::once_flag proved;
  bool use_fast = false;
  std::string status;
};

std::vector<std::unique_ptr<Entry>>& registry() {
  static std::vector<std::unique_ptr<Entry>> kernels;
  return kernels;
}

// Deterministic probe pixels (SplitMix64), with flat and two-level regions so that kernels
// meet their special cases (equal channels, a constant image, ties).
void fill_probe(uint8_t* p, int64_t n, uint64_t seed, int kind) {
  uint64_t s = seed;
  for (int64_t k = 0; k < n; k++) {
    s += 0x9E3779B97F4A7C15ULL;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    switch (kind) {
      case 0: p[k] = (uint8_t)z; break;                        // noise
      case 1: p[k] = (uint8_t)(k % 7 == 0 ? z : 128); break;  // mostly flat
      case 2: p[k] = (uint8_t)((z & 1) ? 200 : 40); break;   // two levels
      default: p[k] = 77; break;                              // constant
    }
  }
}

struct ProbeShape {
  int64_t c, h, w;
  int kind;
};

// Odd sizes, so vectorized loops have tails; gray and RGB.
const ProbeShape kProbeShapes[] = {{3, 37, 41, 0}, {3, 16, 16, 0}, {3, 19, 23, 1}, {3, 9, 13, 2},
                                   {3, 5, 7, 3},   {1, 21, 17, 0}, {3, 64, 67, 0}};

// Runs the proof of kernel `e`: the fast kernel against the reference on every probe image and
// parameter set.
void prove(Entry& e) {
  const PixelKernelDef& d = e.def;
  if (d.fast == nullptr) {
    e.status = "reference";
    return;
  }
  const std::vector<PixelStep> steps = d.probes != nullptr ? d.probes() : std::vector<PixelStep>{PixelStep{}};
  KernelScratch scratch;
  uint64_t seed = 1;
  for (const ProbeShape& shape : kProbeShapes) {
    const int64_t n = shape.c * shape.h * shape.w;
    std::vector<uint8_t> input((size_t)n), a((size_t)n), b((size_t)n);
    fill_probe(input.data(), n, seed++, shape.kind);
    for (const PixelStep& step : steps) {
      std::memcpy(a.data(), input.data(), (size_t)n);
      std::memcpy(b.data(), input.data(), (size_t)n);
      Image ia{a.data(), at::kByte, shape.c, shape.h, shape.w, n};
      Image ib{b.data(), at::kByte, shape.c, shape.h, shape.w, n};
      try {
        d.reference(step, ia, scratch);
        d.fast(step, ib, scratch);
      } catch (const std::exception& ex) {
        e.status = std::string("reference: the fast kernel's proof raised: ") + ex.what();
        return;
      }
      if (ia.channels != ib.channels || std::memcmp(a.data(), b.data(), (size_t)ia.numel()) != 0) {
        std::ostringstream why;
        why << "reference: the fast kernel differs from ATen's arithmetic on this machine (probe " << shape.c << "x"
            << shape.h << "x" << shape.w << ", f0=" << step.f[0] << ", i0=" << step.i[0] << ")";
        e.status = why.str();
        return;
      }
    }
  }
  e.use_fast = true;
  e.status = "fast";
}

Entry& entry(int64_t id) {
  auto& kernels = registry();
  TORCH_CHECK_VALUE(id >= 0 && id < (int64_t)kernels.size(), "unknown pixel kernel id ", id);
  Entry& e = *kernels[(size_t)id];
  std::call_once(e.proved, [&] {
    const SingleThreaded single_threaded;
    prove(e);
  });
  return e;
}

}  // namespace

int64_t register_pixel_kernel(const PixelKernelDef& def) {
  auto& kernels = registry();
  auto e = std::make_unique<Entry>();
  e->def = def;
  kernels.push_back(std::move(e));
  return (int64_t)kernels.size() - 1;
}

int64_t pixel_kernel_id(const std::string& name) {
  const auto& kernels = registry();
  for (size_t k = 0; k < kernels.size(); k++)
    if (name == kernels[k]->def.name) return (int64_t)k;
  return -1;
}

void check_pixel_step(const PixelStep& step, const char* where) {
  TORCH_CHECK_VALUE(step.kernel >= 0 && step.kernel < (int64_t)registry().size(), where, ": unknown pixel kernel id ",
                    step.kernel);
}

void run_pixel_step(const PixelStep& step, Image& image, KernelScratch& scratch) {
  Entry& e = entry(step.kernel);
  const SingleThreaded single_threaded;
  (e.use_fast ? e.def.fast : e.def.reference)(step, image, scratch);
}

std::string pixel_kernel_status(int64_t id) { return entry(id).status; }

namespace {

int64_t kernel_by_name(const std::string& name) {
  const int64_t id = pixel_kernel_id(name);
  TORCH_CHECK_VALUE(id >= 0, "unknown pixel kernel '", name, "'");
  return id;
}

PixelStep make_step(int64_t id, const std::vector<int64_t>& ints, const std::vector<double>& floats) {
  TORCH_CHECK_VALUE((int64_t)ints.size() <= kStepInts && (int64_t)floats.size() <= kStepFloats,
                    "a pixel step takes at most ", kStepInts, " ints and ", kStepFloats, " floats, got ", ints.size(),
                    " and ", floats.size());
  PixelStep step;
  step.kernel = id;
  for (size_t k = 0; k < ints.size(); k++) step.i[k] = ints[k];
  for (size_t k = 0; k < floats.size(); k++) step.f[k] = floats[k];
  return step;
}

// apply_pixel_kernel(image [C, H, W] uint8 or float32, name, ints, floats, variant, extras): the
// kernel on a copy of `image`; variant 0 what the batch op runs, 1 the reference, 2 the fast
// kernel (an error when it has none); `extras` are the sample's kept tensors (RandomErasing's
// noise) and `extra` the step's index into them (-1: none).
at::Tensor apply_pixel_kernel(const at::Tensor& image, const std::string& name, const std::vector<int64_t>& ints,
                              const std::vector<double>& floats, int64_t variant,
                              const std::optional<std::vector<at::Tensor>>& extras, int64_t extra) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  TORCH_CHECK_VALUE(image.dim() == 3 && image.device().is_cpu(), "image must be a [C, H, W] CPU tensor, got shape ",
                    image.sizes(), " on ", image.device());
  TORCH_CHECK_TYPE(image.scalar_type() == at::kByte || image.scalar_type() == at::kFloat,
                   "image must be uint8 or float32, got ", image.scalar_type());
  TORCH_CHECK_VALUE(variant >= 0 && variant <= 2, "variant must be 0, 1 or 2, got ", variant);
  const int64_t id = kernel_by_name(name);
  Entry& e = entry(id);
  TORCH_CHECK_VALUE(variant != 2 || e.def.fast != nullptr, "pixel kernel '", name, "' has no fast variant");
  at::Tensor out = image.contiguous().clone();
  Image img{out.data_ptr(), out.scalar_type(), out.size(0), out.size(1), out.size(2), out.numel()};
  PixelStep step = make_step(id, ints, floats);
  step.extra = extra;
  KernelScratch scratch;
  if (extras.has_value()) scratch.extras = {extras->data(), (int64_t)extras->size()};
  {
    const SingleThreaded single_threaded;
    const bool fast = variant == 2 || (variant == 0 && e.use_fast);
    (fast ? e.def.fast : e.def.reference)(step, img, scratch);
  }
  return out.narrow(0, 0, img.channels);
}

// pixel_kernel_info(name) -> "params\tstatus" (the proof runs if it has not).
std::string pixel_kernel_info(const std::string& name) {
  const int64_t id = kernel_by_name(name);
  Entry& e = entry(id);
  return std::string(e.def.params) + "\t" + e.status;
}

// pixel_kernel_names() -> the registered kernels, one name per line, in id order.
std::string pixel_kernel_names() {
  std::string out;
  for (const auto& e : registry()) out += std::string(e->def.name) + "\n";
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(fastprep, m) {
  m.def("apply_pixel_kernel(Tensor image, str name, int[] ints, float[] floats, int variant=0, Tensor[]? extras=None, "
        "int extra=-1) -> Tensor");
  m.def("pixel_kernel_info(str name) -> str");
  m.def("pixel_kernel_names() -> str");
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) { m.impl("apply_pixel_kernel", &apply_pixel_kernel); }
TORCH_LIBRARY_IMPL(fastprep, CompositeImplicitAutograd, m) {
  m.impl("pixel_kernel_info", &pixel_kernel_info);
  m.impl("pixel_kernel_names", &pixel_kernel_names);
}

}  // namespace fastprep
