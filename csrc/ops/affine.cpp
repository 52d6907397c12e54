// torchvision v2's affine_image and rotate_image on uint8 images (functional/_geometry.py), as
// the auto-augment ops call them (output size = input size: rotate with expand=False), and
// rotate_image's torch.rot90 shortcut.
//
// Reference only: the sampling grid is a float32 bmm (ATen's GEMM sums three products in its
// own order) and grid_sample's coordinates and weights follow from it, so the kernel is
// torchvision's code in ATen: _affine_grid (linspace base grid, theta / (w/2, h/2), bmm), then
// _apply_grid_transform (the image in float32 with a ones mask channel when a fill is given,
// grid_sample with zeros padding and align_corners=False, the fill where the mask says, round_,
// cast to uint8). Only the last cast is written here, where it is exact by construction (whole
// numbers in [0, 255]; ATen's float-to-uint8 cast costs as much as the grid_sample); with fill
// values outside [0, 255] ATen casts.
#include "ops/affine.h"

#include <cmath>

#include "isa.h"
#include "ops/pixel_kernel.h"

namespace fastprep {

namespace {

// The C library's functions, called as CPython's math module calls them (through a pointer,
// so that the compiler neither evaluates them itself nor merges sin and cos into sincos).
double (*volatile const libm_sin)(double) = ::sin;
double (*volatile const libm_cos)(double) = ::cos;
double (*volatile const libm_tan)(double) = ::tan;
double (*volatile const libm_atan)(double) = ::atan;

// CPython's math.radians: x * (pi / 180), the constant rounded once.
double radians(double x) {
  constexpr double kDegToRad = 3.14159265358979323846 / 180.0;
  return x * kDegToRad;
}

}  // namespace

double math_degrees(double x) {
  constexpr double kRadToDeg = 180.0 / 3.14159265358979323846;
  return x * kRadToDeg;
}

double math_atan(double x) { return libm_atan(x); }

void inverse_affine_matrix(const double center[2], double angle, const double translate[2], double scale,
                           const double shear[2], double matrix[6]) {
  const double rot = radians(angle);
  const double sx = radians(shear[0]);
  const double sy = radians(shear[1]);
  const double cx = center[0], cy = center[1];
  const double tx = translate[0], ty = translate[1];
  const double cos_sy = libm_cos(sy);
  const double tan_sx = libm_tan(sx);
  const double rot_minus_sy = rot - sy;
  const double cx_plus_tx = cx + tx;
  const double cy_plus_ty = cy + ty;
  const double a = libm_cos(rot_minus_sy) / cos_sy;
  const double b = -(a * tan_sx + libm_sin(rot));
  const double c = libm_sin(rot_minus_sy) / cos_sy;
  const double d = libm_cos(rot) - c * tan_sx;
  matrix[0] = d / scale;
  matrix[1] = -b / scale;
  matrix[2] = 0.0;
  matrix[3] = -c / scale;
  matrix[4] = a / scale;
  matrix[5] = 0.0;
  matrix[2] += cx - matrix[0] * cx_plus_tx - matrix[1] * cy_plus_ty;
  matrix[5] += cy - matrix[3] * cx_plus_tx - matrix[4] * cy_plus_ty;
}

void inverse_affine_matrix_v1(const double center[2], double angle, const double translate[2], double scale,
                              const double shear[2], double matrix[6]) {
  const double rot = radians(angle);
  const double sx = radians(shear[0]);
  const double sy = radians(shear[1]);
  const double cx = center[0], cy = center[1];
  const double tx = translate[0], ty = translate[1];
  // each expression as written in torchvision/transforms/functional.py, left to right
  const double a = libm_cos(rot - sy) / libm_cos(sy);
  const double b = -libm_cos(rot - sy) * libm_tan(sx) / libm_cos(sy) - libm_sin(rot);
  const double c = libm_sin(rot - sy) / libm_cos(sy);
  const double d = -libm_sin(rot - sy) * libm_tan(sx) / libm_cos(sy) + libm_cos(rot);
  const double m[6] = {d, -b, 0.0, -c, a, 0.0};
  for (int k = 0; k < 6; k++) matrix[k] = m[k] / scale;
  matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty);
  matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty);
  matrix[2] += cx;
  matrix[5] += cy;
}

double python_float_mod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

namespace {

// _affine_grid(theta, w, h, ow=w, oh=h).
at::Tensor affine_grid(const at::Tensor& theta, int64_t w, int64_t h) {
  const int64_t ow = w, oh = h;
  at::Tensor base_grid = at::empty({1, oh, ow, 3}, at::kFloat);
  const at::Tensor x_grid = at::linspace((1.0 - (double)ow) * 0.5, ((double)ow - 1.0) * 0.5, ow, at::kFloat);
  base_grid.select(-1, 0).copy_(x_grid);
  const at::Tensor y_grid =
      at::linspace((1.0 - (double)oh) * 0.5, ((double)oh - 1.0) * 0.5, oh, at::kFloat).unsqueeze_(-1);
  base_grid.select(-1, 1).copy_(y_grid);
  base_grid.select(-1, 2).fill_(1);
  const at::Tensor rescaled_theta =
      theta.transpose(1, 2).div_(at::tensor({0.5 * (double)w, 0.5 * (double)h}, at::kFloat));
  const at::Tensor output_grid = base_grid.view({1, oh * ow, 3}).bmm(rescaled_theta);
  return output_grid.view({1, oh, ow, 2});
}

// _apply_grid_transform(img, grid, mode, fill) for a [C, H, W] uint8 image, up to its round_()
// (the [1, C, H, W] float32 result; the cast to uint8 is the caller's).
at::Tensor apply_grid_transform_rounded(const at::Tensor& img, const at::Tensor& grid, bool bilinear, const double* fill,
                                int64_t fill_count) {
  const int64_t c = img.size(0), h = img.size(1), w = img.size(2);
  at::Tensor float_img = img.reshape({-1, c, h, w}).to(at::kFloat);
  if (fill != nullptr) {
    const at::Tensor mask = at::ones({1, 1, h, w}, at::kFloat);
    float_img = at::cat({float_img, mask}, 1);
  }
  float_img = at::grid_sampler(float_img, grid, bilinear ? 0 : 1, /*padding_mode=zeros*/ 0, /*align_corners=*/false);
  if (fill != nullptr) {
    const std::vector<at::Tensor> parts = float_img.tensor_split(std::vector<int64_t>{-1}, -3);
    float_img = parts[0];
    const at::Tensor mask = parts[1].expand_as(float_img);
    const at::Tensor fill_img = at::tensor(at::ArrayRef<double>(fill, (size_t)fill_count), at::kFloat).view({1, -1, 1, 1});
    if (!bilinear)
      float_img = at::where(mask < 0.5, fill_img.expand_as(float_img), float_img);
    else
      float_img = float_img.sub_(fill_img).mul_(mask).add_(fill_img);
  }
  return float_img.round_();
}

// Whole numbers in [0, 255] to uint8: exact in any implementation, as ATen's cast.
FP_ALWAYS_INLINE void whole_to_u8_span_body(const float* __restrict in, uint8_t* __restrict out, int64_t n) {
  for (int64_t k = 0; k < n; k++) out[k] = (uint8_t)(int32_t)in[k];
}

FP_VARIANTS(whole_to_u8_span, (const float* in, uint8_t* out, int64_t n), (in, out, n))

// Whether the grid transform's rounded values lie in [0, 255]: grid_sample of uint8 values
// (nearest: the values or 0; bilinear: non-negative weights that sum to 1 within float32
// rounding) and, with a fill, the fill values (nearest) or blends between a value and the fill
// (bilinear), so whenever every fill value is in [0, 255]. Then the cast to uint8 is exact.
bool rounded_values_fit_u8(const double* fill, int64_t fill_count) {
  for (int64_t k = 0; k < fill_count; k++)
    if (!((float)fill[k] >= 0.0f && (float)fill[k] <= 255.0f)) return false;
  return true;
}

void affine_ref(const PixelStep& s, Image& im, KernelScratch&) {
  TORCH_CHECK_TYPE(im.dtype == at::kByte, "affine: the native kernel takes uint8 images, got ", im.dtype);
  const bool bilinear = s.i[0] != 0;
  const bool has_fill = s.i[1] != 0;
  const int64_t fill_count = s.i[2];
  TORCH_CHECK_VALUE(s.i[0] == 0 || s.i[0] == 1, "affine: interpolation must be 0 (nearest) or 1 (bilinear), got ",
                    s.i[0]);
  if (has_fill) {
    TORCH_CHECK_VALUE(fill_count >= 1 && fill_count <= GridFill::kMaxValues && 6 + fill_count <= kStepFloats,
                      "affine: 1 to ", GridFill::kMaxValues, " fill values, got ", fill_count);
    TORCH_CHECK_VALUE(fill_count == 1 || fill_count == im.channels,
                      "The number of elements in 'fill' cannot broadcast to match the number of channels of the "
                      "image (",
                      fill_count, " != ", im.channels, ")");
  }
  if (im.numel() == 0) return;
  const at::Tensor theta = at::tensor(at::ArrayRef<double>(s.f, 6), at::kFloat).reshape({1, 2, 3});
  const at::Tensor grid = affine_grid(theta, im.width, im.height);
  const double* fill = has_fill ? s.f + 6 : nullptr;
  const at::Tensor rounded = apply_grid_transform_rounded(im.tensor(), grid, bilinear, fill, fill_count).contiguous();
  if (rounded_values_fit_u8(fill, has_fill ? fill_count : 0))
    whole_to_u8_span(rounded.data_ptr<float>(), im.u8(), im.numel());
  else  // values outside uint8's range: ATen's cast, whatever it makes of them
    im.assign(rounded.to(at::kByte).reshape({im.channels, im.height, im.width}));
}

void rotate90_ref(const PixelStep& s, Image& im, KernelScratch&) {
  const int64_t k = s.i[0];
  TORCH_CHECK_VALUE(k >= 1 && k <= 3, "rotate90: i0 must be 1, 2 or 3 quarter turns, got ", k);
  TORCH_CHECK_VALUE(k == 2 || im.height == im.width, "rotate90: ", k, " quarter turns of a ", im.height, "x",
                    im.width, " image change its size");
  im.assign(at::rot90(im.tensor(), k, {-2, -1}));
}

}  // namespace

FP_REGISTER_PIXEL_KERNEL({"affine",
                          "f0..f5=inverse matrix (_get_inverse_affine_matrix) i0=interpolation (0 nearest, 1 bilinear) "
                          "i1=has fill i2=fill count (1 or C) f6..=fill; for the PIL twin pil_affine only (AffineArgs): "
                          "i3=has center i4=kind (0 F.affine, 1 F.rotate) f10=angle f11, f12=translate f13=scale "
                          "f14, f15=shear f16, f17=center in pixels",
                          affine_ref, nullptr, nullptr});
FP_REGISTER_PIXEL_KERNEL({"rotate90", "i0=quarter turns (torch.rot90 k, dims (-2, -1))", rotate90_ref, nullptr,
                          nullptr});

void emit_affine(DrawContext& ctx, const double matrix[6], const GridFill& fill, const AffineArgs& args) {
  static const int64_t kernel = pixel_kernel_id("affine");
  PixelStep& step = ctx.emit(kernel);
  for (int k = 0; k < 6; k++) step.f[k] = matrix[k];
  step.i[0] = fill.bilinear;
  step.i[1] = fill.count > 0 ? 1 : 0;
  step.i[2] = fill.count;
  for (int64_t k = 0; k < fill.count; k++) step.f[6 + k] = fill.values[k];
  step.i[3] = args.center != nullptr;
  step.i[4] = args.kind;
  const double fields[8] = {args.angle, args.translate[0], args.translate[1], args.scale, args.shear[0], args.shear[1],
                            args.center ? args.center[0] : 0.0, args.center ? args.center[1] : 0.0};
  for (int k = 0; k < 8; k++) step.f[10 + k] = fields[k];
}

void emit_rotate(DrawContext& ctx, double angle, const GridFill& fill) {
  static const int64_t rotate90 = pixel_kernel_id("rotate90");
  AffineArgs args;
  args.kind = AffineArgs::kRotate;
  args.angle = angle;
  angle = python_float_mod(angle, 360.0);
  if (angle == 0.0) return;  // image.clone()
  int64_t quarter_turns = 0;
  if (angle == 180.0) quarter_turns = 2;
  if (ctx.height == ctx.width) {
    if (angle == 90.0) quarter_turns = 1;
    if (angle == 270.0) quarter_turns = 3;
  }
  if (quarter_turns != 0) {
    ctx.emit(rotate90).i[0] = quarter_turns;
    return;
  }
  // The affine of -angle about the image's centre (torchvision: "due to current incoherence of
  // rotation angle direction between affine and rotate implementations").
  const double zero[2] = {0.0, 0.0};
  double matrix[6];
  inverse_affine_matrix(zero, -angle, zero, 1.0, zero, matrix);
  emit_affine(ctx, matrix, fill, args);
}

}  // namespace fastprep

namespace fastprep {
namespace {

// The GridFill of a RandomAffine / RandomRotation node: ints[0] bilinear, ints[1] fill count;
// floats[0..4) the fill values.
GridFill node_fill(const NodeSpec& node, const DrawContext& ctx, int64_t min_ints, int64_t min_floats,
                   const char* name) {
  TORCH_CHECK_VALUE(node.num_ints >= min_ints && node.num_floats >= min_floats, name, " node: malformed parameters");
  const int64_t* ints = ctx.ints(node);
  GridFill fill;
  fill.bilinear = ints[0];
  fill.count = ints[1];
  TORCH_CHECK_VALUE(fill.count >= 0 && fill.count <= GridFill::kMaxValues, name, " node: ", fill.count,
                    " fill values");
  for (int64_t k = 0; k < fill.count; k++) fill.values[k] = ctx.floats(node)[k];
  return fill;
}

// v2.RandomAffine: make_params' draws (angle; translate x, y; scale; shear x, y), then
// affine_image's matrix. ints: bilinear, fill count, has translate, has scale, shear bounds
// (0, 2 or 4), has center, v1 class; floats: 4 fill slots, degrees lo/hi, translate fractions x/y,
// scale lo/hi, 4 shear bounds, center x/y.
void draw_random_affine(const NodeSpec& node, DrawContext& ctx) {
  const GridFill fill = node_fill(node, ctx, 7, 16, "RandomAffine");
  const int64_t* I = ctx.ints(node);
  const double* F = ctx.floats(node);
  Draws& g = ctx.draws;
  const double angle = g.uniform(F[4], F[5]);
  double translate[2] = {0.0, 0.0};
  if (I[2]) {
    const double max_dx = F[6] * (double)ctx.width, max_dy = F[7] * (double)ctx.height;
    // Python's int(round(x)): halves to even, and a zero without sign (+ 0.0 makes -0.0 +0.0)
    translate[0] = std::nearbyint((double)g.uniform(-max_dx, max_dx)) + 0.0;
    translate[1] = std::nearbyint((double)g.uniform(-max_dy, max_dy)) + 0.0;
  }
  const double scale = I[3] ? (double)g.uniform(F[8], F[9]) : 1.0;
  double shear[2] = {0.0, 0.0};
  if (I[4] >= 2) shear[0] = g.uniform(F[10], F[11]);
  if (I[4] == 4) shear[1] = g.uniform(F[12], F[13]);
  double center[2] = {0.0, 0.0};
  if (I[5]) center[0] = F[14] - (double)ctx.width * 0.5, center[1] = F[15] - (double)ctx.height * 0.5;
  double matrix[6];
  inverse_affine_matrix(center, angle, translate, scale, shear, matrix);
  AffineArgs args;
  args.angle = angle;
  args.translate[0] = translate[0], args.translate[1] = translate[1];
  args.scale = scale;
  args.shear[0] = shear[0], args.shear[1] = shear[1];
  args.center = I[5] ? F + 14 : nullptr;
  args.kind = I[6] ? AffineArgs::kAffineV1 : AffineArgs::kAffine;  // a v1 class (PIL images only)
  emit_affine(ctx, matrix, fill, args);
}

// v2.RandomRotation (expand=False): the angle, then rotate_image. ints: bilinear, fill count,
// has center; floats: 4 fill slots, degrees lo/hi, center x/y.
void draw_random_rotation(const NodeSpec& node, DrawContext& ctx) {
  const GridFill fill = node_fill(node, ctx, 3, 8, "RandomRotation");
  const double* F = ctx.floats(node);
  const double angle = ctx.draws.uniform(F[4], F[5]);
  if (!ctx.ints(node)[2]) return emit_rotate(ctx, angle, fill);
  // With a centre, rotate_image has no shortcut: always the affine of -(angle % 360).
  const double center[2] = {F[6] - (double)ctx.width * 0.5, F[7] - (double)ctx.height * 0.5};
  const double zero[2] = {0.0, 0.0};
  double matrix[6];
  inverse_affine_matrix(center, -python_float_mod(angle, 360.0), zero, 1.0, zero, matrix);
  AffineArgs args;
  args.kind = AffineArgs::kRotate;
  args.angle = angle;
  args.center = F + 6;
  emit_affine(ctx, matrix, fill, args);
}

FP_REGISTER_NODE_DRAW("RandomAffine", draw_random_affine);
FP_REGISTER_NODE_DRAW("RandomRotation", draw_random_rotation);

}  // namespace
}  // namespace fastprep
