// Draw programs: the random draws of a compiled torchvision v2 pipeline, made natively.
//
// fastprep/transforms/_native.py compiles the augmentations of a pipeline into a program: a
// flat table of nodes (NodeSpec), one per transform, with each transform's static parameters
// in an int and a float pool and its children (RandomApply, RandomChoice, RandomOrder) as a
// range of nodes. Per sample, the planner runs the program's top-level nodes in order on the
// sample's generator; each node's draw (registered here by the transform's native name) makes
// exactly the torch RNG calls the v2 transform makes, in the same order, and emits the pixel
// steps (pixel_kernel.h) that the batch op then runs. The same draw is written once more in
// Python (fastprep/transforms/_native.py), with an explicit torch.Generator;
// tests/test_native_draws.py compares the two and both with torchvision's own calls.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ops/pixel_kernel.h"

namespace fastprep {

// One node of a program (the layout of fastprep/transforms/_native.py's NODE_DTYPE).
struct NodeSpec {
  int64_t draw = -1;                            // node_draw_id of the transform's draw
  int64_t first_child = 0, num_children = 0;    // children: nodes[first_child, first_child + num_children)
  int64_t ints_at = 0, num_ints = 0;            // static int parameters: ints[ints_at, ...)
  int64_t floats_at = 0, num_floats = 0;        // static float parameters: floats[floats_at, ...)
};

struct Program {
  const NodeSpec* nodes = nullptr;
  int64_t num_nodes = 0;
  const int64_t* ints = nullptr;
  int64_t num_ints = 0;
  const double* floats = nullptr;
  int64_t num_floats = 0;
  int64_t num_roots = 0;  // nodes[0, num_roots) run in order; the rest are children
};

// The torch draws of one sample, on torch's CPU generator (a Mersenne Twister) seeded with the
// sample's key: each method makes the same calls as the torch function it names, so it
// consumes the generator as that function does and returns its value.
class Draws {
 public:
  explicit Draws(uint64_t key);
  // Draws on an existing CPU generator (torch's default one: the per-sample MultiView call),
  // advancing it exactly as the same torch calls from Python would.
  explicit Draws(const at::Generator& generator);
  at::Generator& generator() { return gen_; }
  // Tensor.uniform_(from, to) on one float32 element (torch.empty(1).uniform_(from, to)).
  float uniform(double from, double to);
  // torch.rand(1) / torch.rand(()): uniform(0, 1).
  float rand() { return uniform(0.0, 1.0); }
  // torch.randint(low, high, (1,)) / torch.randint(high, ()) (int64).
  int64_t randint(int64_t low, int64_t high);
  // torch.randperm(n).
  std::vector<int64_t> randperm(int64_t n);
  // int(torch.multinomial(torch.tensor(p), 1)) for float32 weights p.
  int64_t multinomial(const std::vector<float>& weights);
  // torch.empty(shape, dtype=float32).normal_().
  at::Tensor normal(at::IntArrayRef shape);

 private:
  at::Generator gen_;
  at::CPUGeneratorImpl* impl_;
  bool shared_ = false;  // gen_ is not this object's own: lock its mutex around each raw draw
};

// What a node's draw sees and produces.
class DrawContext {
 public:
  DrawContext(Draws& draws, const Program& program, int64_t channels, int64_t height, int64_t width,
              std::vector<PixelStep>* steps, std::vector<at::Tensor>* extras)
      : draws(draws), program(program), channels(channels), height(height), width(width), steps_(steps),
        extras_(extras) {}

  Draws& draws;
  const Program& program;
  // The image the next step will see (a Grayscale(1) step changes the channels).
  int64_t channels, height, width;

  // Runs node k's draw.
  void draw(int64_t k);
  // Runs every child of `node`, in order.
  void draw_children(const NodeSpec& node);
  const int64_t* ints(const NodeSpec& node) const { return program.ints + node.ints_at; }
  const double* floats(const NodeSpec& node) const { return program.floats + node.floats_at; }
  // Appends a step for kernel `kernel` (pixel_kernel_id) and returns it, for its parameters;
  // under a kernel map, the step runs the kernel's twin instead.
  PixelStep& emit(int64_t kernel);
  // The numerics of the rest of the program: from here on, emit(k) emits twin t for each pair
  // (k, t) of `pairs` (`count` ints, pairs of kernel ids; the "KernelMap" node that a pipeline
  // on PIL images starts with, fastprep/transforms/_pil_ops.py); no pairs: kernels as drawn
  // again. Under a map, a kernel without a pair is an error: the compiler proves that every
  // kernel a transform may emit has its twin.
  void set_kernel_map(const int64_t* pairs, int64_t count);
  // Keeps a tensor a step needs (RandomErasing's noise) and returns its index.
  int64_t keep(at::Tensor t);

 private:
  std::vector<PixelStep>* steps_;
  std::vector<at::Tensor>* extras_;
  const int64_t* kernel_map_ = nullptr;  // (kernel, twin) pairs, or null: kernels as drawn
  int64_t kernel_map_pairs_ = 0;
};

using DrawFn = void (*)(const NodeSpec& node, DrawContext& ctx);

// Registers a draw by name (at static-initialisation time, FP_REGISTER_NODE_DRAW); returns its id.
int64_t register_node_draw(const char* name, DrawFn fn);
// The id of the draw `name`, or -1.
int64_t node_draw_id(const std::string& name);
// Checks a program's tables (node ids, ranges inside the pools, children after their parent).
void check_program(const Program& program, const char* where);
// Runs the program's top-level nodes in order.
void draw_program(DrawContext& ctx);
// The program in byte/int64/float64 tensors (fastprep/transforms/_native.py: Program), checked.
Program program_of(const at::Tensor& nodes, const at::Tensor& ints, const at::Tensor& floats, int64_t num_roots,
                   const char* where);

#define FP_REGISTER_NODE_DRAW(name, fn) \
  static const int64_t FP_CONCAT(fp_node_draw_, __LINE__) = ::fastprep::register_node_draw(name, fn)

// float(x) as torch rounds a Python float to float32 for a float32 comparison.
inline float as_f32(double x) { return (float)x; }

}  // namespace fastprep
