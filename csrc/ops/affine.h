// The affine steps of torchvision v2's F.affine and F.rotate on uint8 images, as draws emit
// them (csrc/ops/affine.cpp holds the kernels): the inverse matrix computed in double exactly
// as torchvision's _get_inverse_affine_matrix computes it in CPython, and rotate_image's
// shortcuts (no step for 0 degrees, torch.rot90 for 180, and for 90 and 270 on square images).
#pragma once

#include <cstdint>

#include "ops/native_draw.h"

namespace fastprep {

// The interpolation and fill of a grid transform (_apply_grid_transform): nearest or bilinear,
// and the fill values (none, or 1 or C values: torch.tensor(fill, dtype=float32)).
struct GridFill {
  static constexpr int kMaxValues = 4;
  int64_t bilinear = 0;
  int64_t count = 0;  // 0: fill=None
  double values[kMaxValues] = {};
};

// torchvision's _get_inverse_affine_matrix(center, angle, translate, scale, shear) (inverted):
// math.radians/degrees as CPython computes them and the C library's cos, sin and tan.
void inverse_affine_matrix(const double center[2], double angle, const double translate[2], double scale,
                           const double shear[2], double matrix[6]);
// The same matrix as torchvision.transforms.functional (v1) computes it: another order of the
// same operations (b and d from cos * tan / cos, the centre added last), so the last bits can
// differ from v2's -- which decides a pixel whose source lies exactly on a boundary.
void inverse_affine_matrix_v1(const double center[2], double angle, const double translate[2], double scale,
                              const double shear[2], double matrix[6]);

// CPython's math.degrees (x * (180 / pi), the constant rounded once) and math.atan (the C
// library's atan).
double math_degrees(double x);
double math_atan(double x);

// Python's `x % y` on floats (the sign of y; 0.0 for a zero remainder).
double python_float_mod(double x, double y);

// The arguments F.affine / F.rotate received, which the affine step carries besides the
// matrix (its PIL twin, csrc/ops/pil_geometry.cpp, computes Pillow's matrix from them):
// i3=has center, i4=kind, f10=angle, f11, f12=translate, f13=scale, f14, f15=shear,
// f16, f17=center (x, y) in pixels as given.
struct AffineArgs {
  // F.affine(angle, translate, scale, shear, center) / F.rotate(angle, center) / v1's F.affine
  // (torchvision.transforms.functional, whose matrix rounds otherwise on PIL images)
  static constexpr int64_t kAffine = 0, kRotate = 1, kAffineV1 = 2;
  int64_t kind = kAffine;
  double angle = 0.0;
  double translate[2] = {0.0, 0.0};
  double scale = 1.0;
  double shear[2] = {0.0, 0.0};
  const double* center = nullptr;  // null: None
};

// The step of affine_image on the current image with the inverse matrix `matrix` (of `args`).
void emit_affine(DrawContext& ctx, const double matrix[6], const GridFill& fill, const AffineArgs& args);

// rotate_image(image, angle, interpolation, expand=False, center=None, fill) (F.rotate's angle).
void emit_rotate(DrawContext& ctx, double angle, const GridFill& fill);

}  // namespace fastprep
