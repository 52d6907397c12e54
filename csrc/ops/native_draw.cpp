// Draw programs (native_draw.h): the registry of node draws, the torch draws, and the
// containers' draws (v2 Compose is flattened by the compiler; RandomApply, RandomChoice and
// RandomOrder are nodes with children).
#include "exit_gate.h"
#include "ops/native_draw.h"

#include <ATen/core/DistributionsHelper.h>
#include <torch/library.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <tuple>

namespace fastprep {

Draws::Draws(uint64_t key) : gen_(at::make_generator<at::CPUGeneratorImpl>(key)) {
  impl_ = gen_.get<at::CPUGeneratorImpl>();
}

Draws::Draws(const at::Generator& generator) : gen_(generator), shared_(true) {
  impl_ = at::check_generator<at::CPUGeneratorImpl>(gen_);
}

namespace {

// torch's uniform_ kernel on float32 maps a 24-bit random integer r to
// `x * (to - from) + from` with x = r / 2**24 in double (transformation::uniform_real). Whether
// that multiply-add is fused depends on how torch's kernel was compiled (its AVX2/AVX-512
// kernels contract it into an FMA; a baseline build does not), so the first draw asks torch:
// the same stream drawn through Tensor.uniform_ and computed both ways.
double uniform_value(uint32_t random, float lo, float hi, bool fused) {
  const double x = (double)(random & ((1u << 24) - 1)) * (1.0 / (double)(1u << 24));
  const double span = (double)(hi - lo);
  return fused ? std::fma(x, span, (double)lo) : x * span + (double)lo;
}

bool torch_uniform_is_fused() {
  static const bool fused = [] {
    constexpr int64_t n = 4096;
    const float ranges[3][2] = {{0.6f, 1.4f}, {-0.1f, 0.1f}, {0.08f, 1.0f}};
    bool fma_ok = true, plain_ok = true;
    for (const auto& r : ranges) {
      at::Generator a = at::make_generator<at::CPUGeneratorImpl>(20240607);
      at::Generator b = at::make_generator<at::CPUGeneratorImpl>(20240607);
      const at::Tensor t = at::empty({n}, at::kFloat).uniform_(r[0], r[1], a);
      const float* v = t.data_ptr<float>();
      at::CPUGeneratorImpl* impl = b.get<at::CPUGeneratorImpl>();
      for (int64_t k = 0; k < n; k++) {
        const uint32_t random = impl->random();
        fma_ok = fma_ok && (float)uniform_value(random, r[0], r[1], true) == v[k];
        plain_ok = plain_ok && (float)uniform_value(random, r[0], r[1], false) == v[k];
      }
    }
    TORCH_CHECK(fma_ok || plain_ok, "fastprep: torch's uniform_ matches neither a fused nor a plain multiply-add; "
                "the native draws cannot reproduce it on this torch build");
    return fma_ok;
  }();
  return fused;
}

}  // namespace

float Draws::uniform(double from, double to) {
  const float lo = (float)from, hi = (float)to;
  const bool fused = torch_uniform_is_fused();
  uint32_t random;
  if (shared_) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    random = impl_->random();
  } else {
    random = impl_->random();
  }
  const float v = (float)uniform_value(random, lo, hi, fused);
  return v == hi ? lo : v;  // as torch's kernel: a value rounded up to `to` becomes `from`
}

int64_t Draws::randint(int64_t low, int64_t high) {
  at::uniform_int_from_to_distribution<int64_t> r((uint64_t)(high - low), low);
  if (shared_) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    return r(impl_);
  }
  return r(impl_);
}

std::vector<int64_t> Draws::randperm(int64_t n) {
  const at::Tensor p = at::randperm(n, gen_, at::kLong);
  const int64_t* v = p.data_ptr<int64_t>();
  return std::vector<int64_t>(v, v + n);
}

int64_t Draws::multinomial(const std::vector<float>& weights) {
  const at::Tensor w = at::from_blob(const_cast<float*>(weights.data()), {(int64_t)weights.size()}, at::kFloat);
  return at::multinomial(w, 1, false, gen_).item<int64_t>();
}

at::Tensor Draws::normal(at::IntArrayRef shape) { return at::empty(shape, at::kFloat).normal_(0.0, 1.0, gen_); }

namespace {

struct DrawEntry {
  std::string name;
  DrawFn fn;
};

std::vector<DrawEntry>& draw_registry() {
  static std::vector<DrawEntry> draws;
  return draws;
}

}  // namespace

int64_t register_node_draw(const char* name, DrawFn fn) {
  auto& draws = draw_registry();
  draws.push_back({name, fn});
  return (int64_t)draws.size() - 1;
}

int64_t node_draw_id(const std::string& name) {
  const auto& draws = draw_registry();
  for (size_t k = 0; k < draws.size(); k++)
    if (draws[k].name == name) return (int64_t)k;
  return -1;
}

void check_program(const Program& p, const char* where) {
  const int64_t num_draws = (int64_t)draw_registry().size();
  TORCH_CHECK_VALUE(p.num_roots >= 0 && p.num_roots <= p.num_nodes, where, ": ", p.num_roots,
                    " top-level nodes in a program of ", p.num_nodes);
  for (int64_t k = 0; k < p.num_nodes; k++) {
    const NodeSpec& n = p.nodes[k];
    TORCH_CHECK_VALUE(n.draw >= 0 && n.draw < num_draws, where, ": node ", k, " has unknown draw id ", n.draw);
    // children come after their parent, so a program cannot loop
    TORCH_CHECK_VALUE(n.num_children >= 0 && (n.num_children == 0 || n.first_child > k) &&
                          n.first_child + n.num_children <= p.num_nodes,
                      where, ": node ", k, " has children [", n.first_child, ", +", n.num_children, ") out of range");
    TORCH_CHECK_VALUE(n.ints_at >= 0 && n.num_ints >= 0 && n.ints_at + n.num_ints <= p.num_ints && n.floats_at >= 0 &&
                          n.num_floats >= 0 && n.floats_at + n.num_floats <= p.num_floats,
                      where, ": node ", k, "'s parameters lie outside the pools");
  }
}

void DrawContext::draw(int64_t k) {
  const NodeSpec& node = program.nodes[k];
  draw_registry()[(size_t)node.draw].fn(node, *this);
}

void DrawContext::draw_children(const NodeSpec& node) {
  for (int64_t c = 0; c < node.num_children; c++) draw(node.first_child + c);
}

PixelStep& DrawContext::emit(int64_t kernel) {
  if (kernel_map_ != nullptr) {
    int64_t twin = -1;
    for (int64_t k = 0; k < kernel_map_pairs_; k++)
      if (kernel_map_[2 * k] == kernel) twin = kernel_map_[2 * k + 1];
    TORCH_CHECK(twin >= 0, "fastprep: pixel kernel ", kernel, " has no twin in this program's kernel map");
    kernel = twin;
  }
  steps_->emplace_back();  // extra = -1 until the draw keeps a tensor for it
  PixelStep& s = steps_->back();
  s.kernel = kernel;
  return s;
}

void DrawContext::set_kernel_map(const int64_t* pairs, int64_t count) {
  TORCH_CHECK_VALUE(count % 2 == 0, "fastprep: a kernel map holds pairs, got ", count, " ints");
  for (int64_t k = 0; k < count; k++) {
    PixelStep s;
    s.kernel = pairs[k];
    check_pixel_step(s, "KernelMap");
  }
  kernel_map_ = count > 0 ? pairs : nullptr;
  kernel_map_pairs_ = count / 2;
}

int64_t DrawContext::keep(at::Tensor t) {
  extras_->push_back(std::move(t));
  return (int64_t)extras_->size() - 1;
}

void draw_program(DrawContext& ctx) {
  for (int64_t k = 0; k < ctx.program.num_roots; k++) ctx.draw(k);
}

Program program_of(const at::Tensor& nodes, const at::Tensor& ints, const at::Tensor& floats, int64_t num_roots,
                   const char* where) {
  TORCH_CHECK_VALUE(nodes.scalar_type() == at::kByte && nodes.dim() == 1 && nodes.is_contiguous() &&
                        nodes.numel() % (int64_t)sizeof(NodeSpec) == 0,
                    where, ": nodes must be a contiguous uint8 tensor of NodeSpec records");
  TORCH_CHECK_VALUE(ints.scalar_type() == at::kLong && ints.dim() == 1 && ints.is_contiguous(), where,
                    ": ints must be a contiguous int64 1-D tensor");
  TORCH_CHECK_VALUE(floats.scalar_type() == at::kDouble && floats.dim() == 1 && floats.is_contiguous(), where,
                    ": floats must be a contiguous float64 1-D tensor");
  Program p;
  p.nodes = reinterpret_cast<const NodeSpec*>(nodes.data_ptr<uint8_t>());
  p.num_nodes = nodes.numel() / (int64_t)sizeof(NodeSpec);
  p.ints = ints.data_ptr<int64_t>();
  p.num_ints = ints.numel();
  p.floats = floats.data_ptr<double>();
  p.num_floats = floats.numel();
  p.num_roots = num_roots;
  check_program(p, where);
  return p;
}


namespace {

// v2.RandomApply(transforms, p): `if torch.rand(1) >= p: skip`, then every transform.
// floats: p.
void draw_random_apply(const NodeSpec& node, DrawContext& ctx) {
  if (ctx.draws.rand() >= as_f32(ctx.floats(node)[0])) return;
  ctx.draw_children(node);
}

// v2.RandomChoice(transforms, p): torch.multinomial(torch.tensor(p), 1) picks one.
// floats: the normalised weights (float32 values, as torch.tensor(p) holds them).
void draw_random_choice(const NodeSpec& node, DrawContext& ctx) {
  const double* p = ctx.floats(node);
  std::vector<float> weights((size_t)node.num_floats);
  for (int64_t k = 0; k < node.num_floats; k++) weights[(size_t)k] = (float)p[k];
  ctx.draw(node.first_child + ctx.draws.multinomial(weights));
}

// v2.RandomOrder(transforms): the transforms in the order of torch.randperm(n).
void draw_random_order(const NodeSpec& node, DrawContext& ctx) {
  for (const int64_t k : ctx.draws.randperm(node.num_children)) ctx.draw(node.first_child + k);
}

// The kernel map of a pipeline on PIL images (DrawContext::set_kernel_map): no draw.
// ints: (kernel id, twin id) pairs.
void draw_kernel_map(const NodeSpec& node, DrawContext& ctx) { ctx.set_kernel_map(ctx.ints(node), node.num_ints); }

FP_REGISTER_NODE_DRAW("RandomApply", draw_random_apply);
FP_REGISTER_NODE_DRAW("KernelMap", draw_kernel_map);
FP_REGISTER_NODE_DRAW("RandomChoice", draw_random_choice);
FP_REGISTER_NODE_DRAW("RandomOrder", draw_random_order);

}  // namespace
}  // namespace fastprep

// ------------------------------------------------------------------------------------
// Ops for fastprep/transforms/_native.py and the tests.

namespace fastprep {
namespace {

std::string node_draw_names() {
  std::string out;
  for (const DrawEntry& e : draw_registry()) out += e.name + "\n";
  return out;
}

// native_draws(...): the steps (PixelStep records as bytes) and kept tensors of one sample's
// draws with generator seed `key`, on a channels x height x width image. For the tests.
std::tuple<at::Tensor, std::vector<at::Tensor>> native_draws(const at::Tensor& nodes, const at::Tensor& ints,
                                                              const at::Tensor& floats, int64_t num_roots, int64_t key,
                                                              int64_t channels, int64_t height, int64_t width) {
  const Program p = program_of(nodes, ints, floats, num_roots, "native_draws");
  Draws draws((uint64_t)key);
  std::vector<PixelStep> steps;
  std::vector<at::Tensor> extras;
  DrawContext ctx(draws, p, channels, height, width, &steps, &extras);
  draw_program(ctx);
  at::Tensor out = at::empty({(int64_t)(steps.size() * sizeof(PixelStep))}, at::kByte);
  if (!steps.empty()) std::memcpy(out.data_ptr<uint8_t>(), steps.data(), steps.size() * sizeof(PixelStep));
  return {out, extras};
}

// apply_pixel_steps(image [C, H, W], steps bytes, extras): the steps run in order on a copy.
at::Tensor apply_pixel_steps(const at::Tensor& image, const at::Tensor& steps, const std::vector<at::Tensor>& extras) {
  const fastprep::ExitGate gate;  // parks this thread if the interpreter is exiting (exit_gate.h)
  TORCH_CHECK_VALUE(image.dim() == 3 && image.device().is_cpu(), "image must be a [C, H, W] CPU tensor");
  TORCH_CHECK_TYPE(image.scalar_type() == at::kByte || image.scalar_type() == at::kFloat,
                   "image must be uint8 or float32, got ", image.scalar_type());
  TORCH_CHECK_VALUE(steps.scalar_type() == at::kByte && steps.dim() == 1 && steps.is_contiguous() &&
                        steps.numel() % (int64_t)sizeof(PixelStep) == 0,
                    "steps must be a contiguous uint8 tensor of PixelStep records");
  const int64_t n = steps.numel() / (int64_t)sizeof(PixelStep);
  const PixelStep* s = reinterpret_cast<const PixelStep*>(steps.data_ptr<uint8_t>());
  at::Tensor out = image.contiguous().clone();
  Image img{out.data_ptr(), out.scalar_type(), out.size(0), out.size(1), out.size(2), out.numel()};
  KernelScratch scratch;
  scratch.extras = {extras.data(), (int64_t)extras.size()};
  for (int64_t k = 0; k < n; k++) {
    check_pixel_step(s[k], "apply_pixel_steps");
    run_pixel_step(s[k], img, scratch);
  }
  return out.narrow(0, 0, img.channels);
}

}  // namespace
}  // namespace fastprep

TORCH_LIBRARY_FRAGMENT(fastprep, m) {
  m.def("node_draw_names() -> str");
  m.def(
      "native_draws(Tensor nodes, Tensor ints, Tensor floats, int num_roots, int key, int channels, int height, "
      "int width) -> (Tensor, Tensor[])");
  m.def("apply_pixel_steps(Tensor image, Tensor steps, Tensor[] extras) -> Tensor");
}

TORCH_LIBRARY_IMPL(fastprep, CPU, m) {
  m.impl("native_draws", &fastprep::native_draws);
  m.impl("apply_pixel_steps", &fastprep::apply_pixel_steps);
}
TORCH_LIBRARY_IMPL(fastprep, CompositeImplicitAutograd, m) {
  m.impl("node_draw_names", &fastprep::node_draw_names);
}
