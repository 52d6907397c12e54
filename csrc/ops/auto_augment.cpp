// The draws of torchvision v2's AutoAugment, RandAugment and TrivialAugmentWide
// (transforms/v2/_auto_augment.py): the same torch draws in the same order, and the steps of
// _AutoAugmentBase._apply_image_or_video_transform for the op and magnitude drawn.
//
// fastprep/transforms/_native_auto.py lays each transform out as one node:
//
//   ints:   [0] interpolation (0 nearest, 1 bilinear), [1] fill values (0: fill=None),
//           [2] ops in the augmentation space, [3] magnitude bins, [4], [5] per transform
//           (RandAugment: num_ops, magnitude index; AutoAugment: number of sub-policies),
//           then per op of the space, in its dict order: op code (Op below), signed,
//           magnitudes (Magnitudes below), where its magnitudes start in floats;
//           AutoAugment then: per sub-policy, two (space index, magnitude index or -1).
//   floats: [0, 4) fill values, then the magnitude tables (torchvision's own lambdas evaluated
//           by the compiler, float32 values widened to double), AutoAugment's probabilities.
//
// The translations of AutoAugment and RandAugment depend on the image size,
// torch.linspace(0.0, 150.0 / 331.0 * width, num_bins): the draw evaluates that linspace with
// ATen (the stored float is the coefficient).
#include <cmath>

#include "ops/affine.h"
#include "ops/native_draw.h"
#include "ops/pixel_kernel.h"

namespace fastprep {
namespace {

// The transform ids of _apply_image_or_video_transform; fastprep/transforms/_native_auto.py's
// _OPS lists them in this order.
enum Op : int64_t {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
  kNumOps
};

// Where an op's magnitudes come from.
enum Magnitudes : int64_t {
  kNoMagnitudes,   // the lambda returns None: magnitude 0.0, no draw
  kTable,          // num_bins stored values
  kWidthLinspace,  // torch.linspace(0.0, coefficient * width, num_bins)
  kHeightLinspace, // torch.linspace(0.0, coefficient * height, num_bins)
};

constexpr int64_t kHeaderInts = 6, kIntsPerOp = 4, kFillFloats = GridFill::kMaxValues;

class AugmentSpace {
 public:
  AugmentSpace(const NodeSpec& node, const DrawContext& ctx) : ints_(ctx.ints(node)), floats_(ctx.floats(node)) {
    TORCH_CHECK_VALUE(node.num_ints >= kHeaderInts && node.num_floats >= kFillFloats,
                      "auto-augment node: malformed parameters");
    fill_.bilinear = ints_[0];
    fill_.count = ints_[1];
    TORCH_CHECK_VALUE(fill_.count >= 0 && fill_.count <= GridFill::kMaxValues, "auto-augment node: ", fill_.count,
                      " fill values");
    for (int64_t k = 0; k < fill_.count; k++) fill_.values[k] = floats_[k];
    num_ops_ = ints_[2];
    num_bins_ = ints_[3];
    TORCH_CHECK_VALUE(num_ops_ > 0 && num_bins_ > 0 && node.num_ints >= kHeaderInts + num_ops_ * kIntsPerOp,
                      "auto-augment node: malformed augmentation space");
    for (int64_t k = 0; k < num_ops_; k++) {
      const int64_t* op = ints_ + kHeaderInts + k * kIntsPerOp;
      const int64_t need = op[2] == kTable ? num_bins_ : op[2] == kNoMagnitudes ? 0 : 1;
      TORCH_CHECK_VALUE(op[0] >= 0 && op[0] < kNumOps && op[2] >= kNoMagnitudes && op[2] <= kHeightLinspace &&
                            op[3] >= 0 && op[3] + need <= node.num_floats,
                        "auto-augment node: malformed op ", k);
    }
  }

  int64_t num_ops() const { return num_ops_; }
  int64_t num_bins() const { return num_bins_; }
  int64_t header(int k) const { return ints_[4 + k]; }
  const int64_t* tail() const { return ints_ + kHeaderInts + num_ops_ * kIntsPerOp; }
  const double* floats() const { return floats_; }
  const GridFill& fill() const { return fill_; }
  Op op(int64_t k) const { return (Op)ints_[kHeaderInts + k * kIntsPerOp]; }
  bool is_signed(int64_t k) const { return ints_[kHeaderInts + k * kIntsPerOp + 1] != 0; }
  bool has_magnitudes(int64_t k) const { return ints_[kHeaderInts + k * kIntsPerOp + 2] != kNoMagnitudes; }

  // float(magnitudes_fn(num_bins, height, width)[index]) of op k.
  double magnitude(int64_t k, int64_t index, const DrawContext& ctx) const {
    const int64_t* op = ints_ + kHeaderInts + k * kIntsPerOp;
    TORCH_CHECK_VALUE(index >= 0 && index < num_bins_, "auto-augment: magnitude index ", index, " out of ",
                      num_bins_, " bins");
    const double* values = floats_ + op[3];
    if (op[2] == kTable) return values[index];
    const double size = (double)(op[2] == kWidthLinspace ? ctx.width : ctx.height);
    const at::Tensor table = at::linspace(0.0, values[0] * size, num_bins_, at::kFloat);
    return (double)table.data_ptr<float>()[index];
  }

 private:
  const int64_t* ints_;
  const double* floats_;
  GridFill fill_;
  int64_t num_ops_ = 0, num_bins_ = 0;
};

// F.affine(image, angle, translate, scale=1.0, shear, center) as affine_image computes its
// matrix: center (in pixels) shifted so that (0, 0) is the image's centre.
void emit_op_affine(DrawContext& ctx, const double* center, const double translate[2], const double shear[2],
                    const GridFill& fill, bool v1) {
  double center_f[2] = {0.0, 0.0};
  if (center != nullptr) {
    center_f[0] = center[0] - (double)ctx.width * 0.5;
    center_f[1] = center[1] - (double)ctx.height * 0.5;
  }
  double matrix[6];
  inverse_affine_matrix(center_f, 0.0, translate, 1.0, shear, matrix);
  AffineArgs args;
  args.translate[0] = translate[0], args.translate[1] = translate[1];
  args.shear[0] = shear[0], args.shear[1] = shear[1];
  args.center = center;
  args.kind = v1 ? AffineArgs::kAffineV1 : AffineArgs::kAffine;  // v1's F.affine (PIL images only)
  emit_affine(ctx, matrix, fill, args);
}

// _apply_image_or_video_transform(image, transform_id, magnitude, interpolation, fill).
// v1: torchvision.transforms' _apply_op, whose Solarize threshold is the magnitude itself (its
// table runs from 255.0 down) where v2 multiplies the magnitude by 255.
void apply_op(Op op, double magnitude, DrawContext& ctx, const GridFill& fill, bool v1 = false) {
  static const int64_t brightness = pixel_kernel_id("adjust_brightness"),
                       saturation = pixel_kernel_id("adjust_saturation"),
                       contrast = pixel_kernel_id("adjust_contrast"), sharpness = pixel_kernel_id("adjust_sharpness"),
                       posterize = pixel_kernel_id("posterize"), solarize = pixel_kernel_id("solarize"),
                       autocontrast = pixel_kernel_id("autocontrast"), equalize = pixel_kernel_id("equalize"),
                       invert = pixel_kernel_id("invert");
  const double zero[2] = {0.0, 0.0};
  const double origin[2] = {0.0, 0.0};  // center=[0, 0]: the top-left corner
  switch (op) {
    case kIdentity:
      return;
    case kShearX: {
      const double shear[2] = {math_degrees(math_atan(magnitude)), 0.0};
      emit_op_affine(ctx, origin, zero, shear, fill, v1);
      return;
    }
    case kShearY: {
      const double shear[2] = {0.0, math_degrees(math_atan(magnitude))};
      emit_op_affine(ctx, origin, zero, shear, fill, v1);
      return;
    }
    case kTranslateX: {
      const double translate[2] = {(double)(int64_t)magnitude, 0.0};  // int(magnitude)
      emit_op_affine(ctx, nullptr, translate, zero, fill, v1);
      return;
    }
    case kTranslateY: {
      const double translate[2] = {0.0, (double)(int64_t)magnitude};
      emit_op_affine(ctx, nullptr, translate, zero, fill, v1);
      return;
    }
    case kRotate:
      emit_rotate(ctx, magnitude, fill);
      return;
    case kBrightness:
      ctx.emit(brightness).f[0] = 1.0 + magnitude;
      return;
    case kColor:
      ctx.emit(saturation).f[0] = 1.0 + magnitude;
      return;
    case kContrast:
      ctx.emit(contrast).f[0] = 1.0 + magnitude;
      return;
    case kSharpness:
      ctx.emit(sharpness).f[0] = 1.0 + magnitude;
      return;
    case kPosterize:
      ctx.emit(posterize).i[0] = (int64_t)magnitude;  // int(magnitude)
      return;
    case kSolarize:
      ctx.emit(solarize).f[0] = v1 ? magnitude : 255.0 * magnitude;  // v2: _max_value(uint8) * magnitude
      return;
    case kAutoContrast:
      ctx.emit(autocontrast);
      return;
    case kEqualize:
      ctx.emit(equalize);
      return;
    case kInvert:
      ctx.emit(invert);
      return;
    case kNumOps:
      break;
  }
  TORCH_CHECK_VALUE(false, "auto-augment: unknown op ", (int64_t)op);
}

// The magnitude of op k at `index`, negated when the op is signed and torch.rand(()) <= 0.5.
double signed_magnitude(const AugmentSpace& space, int64_t k, int64_t index, DrawContext& ctx) {
  double magnitude = space.magnitude(k, index, ctx);
  if (space.is_signed(k) && ctx.draws.rand() <= 0.5f) magnitude *= -1;
  return magnitude;
}

// v2.TrivialAugmentWide: op = randint(len(space), ()), then for an op with magnitudes
// index = randint(num_magnitude_bins, ()) and the sign.
void draw_trivial_augment_wide(const NodeSpec& node, DrawContext& ctx) {
  const AugmentSpace space(node, ctx);
  const int64_t k = ctx.draws.randint(0, space.num_ops());
  double magnitude = 0.0;
  if (space.has_magnitudes(k)) magnitude = signed_magnitude(space, k, ctx.draws.randint(0, space.num_bins()), ctx);
  apply_op(space.op(k), magnitude, ctx, space.fill());
}

// v2.RandAugment: num_ops times, op = randint(len(space), ()), magnitude at the fixed index,
// the sign. header: num_ops, magnitude index (in [0, num_bins)).
void draw_rand_augment(const NodeSpec& node, DrawContext& ctx) {
  const AugmentSpace space(node, ctx);
  const int64_t num_ops = space.header(0), index = space.header(1);
  for (int64_t n = 0; n < num_ops; n++) {
    const int64_t k = ctx.draws.randint(0, space.num_ops());
    double magnitude = 0.0;
    if (space.has_magnitudes(k)) magnitude = signed_magnitude(space, k, index, ctx);
    apply_op(space.op(k), magnitude, ctx, space.fill());
  }
}

// v2.AutoAugment: policy = randint(len(policies), ()); per sub-policy op: `torch.rand(()) <=
// probability` applies it, then its magnitude and the sign. header: number of sub-policies;
// tail: per sub-policy two (space index, magnitude index); floats after the fill: two
// probabilities per sub-policy.
void draw_auto_augment(const NodeSpec& node, DrawContext& ctx) {
  const AugmentSpace space(node, ctx);
  const int64_t num_policies = space.header(0);
  const int64_t used_ints = (int64_t)(space.tail() - ctx.ints(node));
  TORCH_CHECK_VALUE(num_policies > 0 && node.num_ints >= used_ints + 4 * num_policies &&
                        node.num_floats >= kFillFloats + 2 * num_policies,
                    "AutoAugment node: malformed policies");
  const int64_t policy = ctx.draws.randint(0, num_policies);
  for (int64_t j = 0; j < 2; j++) {
    const int64_t* entry = space.tail() + 4 * policy + 2 * j;
    const double probability = space.floats()[kFillFloats + 2 * policy + j];
    if (!(ctx.draws.rand() <= as_f32(probability))) continue;
    const int64_t k = entry[0];
    TORCH_CHECK_VALUE(k >= 0 && k < space.num_ops(), "AutoAugment node: op index ", k, " out of range");
    double magnitude = 0.0;
    if (space.has_magnitudes(k)) magnitude = signed_magnitude(space, k, entry[1], ctx);
    apply_op(space.op(k), magnitude, ctx, space.fill());
  }
}

// v1 (torchvision.transforms.autoaugment; native on PIL images): the sign is `torch.randint(2,
// (1,))` (nonzero negates) where v2 draws torch.rand; the node is laid out as v2's.
void draw_trivial_augment_wide_v1(const NodeSpec& node, DrawContext& ctx) {
  const AugmentSpace space(node, ctx);
  const int64_t k = ctx.draws.randint(0, space.num_ops());
  double magnitude = 0.0;
  if (space.has_magnitudes(k)) magnitude = space.magnitude(k, ctx.draws.randint(0, space.num_bins()), ctx);
  if (space.is_signed(k) && ctx.draws.randint(0, 2) != 0) magnitude *= -1.0;
  apply_op(space.op(k), magnitude, ctx, space.fill(), true);
}

void draw_rand_augment_v1(const NodeSpec& node, DrawContext& ctx) {
  const AugmentSpace space(node, ctx);
  const int64_t num_ops = space.header(0), index = space.header(1);
  for (int64_t n = 0; n < num_ops; n++) {
    const int64_t k = ctx.draws.randint(0, space.num_ops());
    double magnitude = 0.0;
    if (space.has_magnitudes(k)) magnitude = space.magnitude(k, index, ctx);
    if (space.is_signed(k) && ctx.draws.randint(0, 2) != 0) magnitude *= -1.0;
    apply_op(space.op(k), magnitude, ctx, space.fill(), true);
  }
}

// v1 AutoAugment.get_params first: policy = randint(n, (1,)), probs = torch.rand((2,)), signs =
// torch.randint(2, (2,)) (the same draws as two of each, in that order); op j applies when
// probs[j] <= probability (float32) and its magnitude is negated when signs[j] == 0.
void draw_auto_augment_v1(const NodeSpec& node, DrawContext& ctx) {
  const AugmentSpace space(node, ctx);
  const int64_t num_policies = space.header(0);
  const int64_t used_ints = (int64_t)(space.tail() - ctx.ints(node));
  TORCH_CHECK_VALUE(num_policies > 0 && node.num_ints >= used_ints + 4 * num_policies &&
                        node.num_floats >= kFillFloats + 2 * num_policies,
                    "AutoAugment node: malformed policies");
  const int64_t policy = ctx.draws.randint(0, num_policies);
  float probs[2];
  int64_t signs[2];
  for (float& p : probs) p = ctx.draws.rand();
  for (int64_t& v : signs) v = ctx.draws.randint(0, 2);
  for (int64_t j = 0; j < 2; j++) {
    const int64_t* entry = space.tail() + 4 * policy + 2 * j;
    const double probability = space.floats()[kFillFloats + 2 * policy + j];
    if (!(probs[j] <= as_f32(probability))) continue;
    const int64_t k = entry[0];
    TORCH_CHECK_VALUE(k >= 0 && k < space.num_ops(), "AutoAugment node: op index ", k, " out of range");
    double magnitude = 0.0;
    if (space.has_magnitudes(k)) magnitude = space.magnitude(k, entry[1], ctx);
    if (space.is_signed(k) && signs[j] == 0) magnitude *= -1.0;
    apply_op(space.op(k), magnitude, ctx, space.fill(), true);
  }
}

FP_REGISTER_NODE_DRAW("TrivialAugmentWide", draw_trivial_augment_wide);
FP_REGISTER_NODE_DRAW("TrivialAugmentWideV1", draw_trivial_augment_wide_v1);
FP_REGISTER_NODE_DRAW("RandAugmentV1", draw_rand_augment_v1);
FP_REGISTER_NODE_DRAW("AutoAugmentV1", draw_auto_augment_v1);
FP_REGISTER_NODE_DRAW("RandAugment", draw_rand_augment);
FP_REGISTER_NODE_DRAW("AutoAugment", draw_auto_augment);

}  // namespace
}  // namespace fastprep
