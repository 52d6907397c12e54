// Pillow's rotate and GaussianBlur arithmetic that draws need (csrc/ops/pil_geometry.cpp holds
// the kernels pil_affine, pil_rotate and pil_gaussian_blur and describes the arithmetic).
#pragma once

#include <cstdint>

namespace fastprep {

// Image.rotate's affine data (expand=False, no translate) for `angle` already reduced modulo
// 360 (Python's %), on a width x height image, about `center` (x, y), or (w / 2, h / 2) when null.
void pil_rotate_matrix(double angle, int64_t width, int64_t height, const double* center, double matrix[6]);

// Image.rotate's shortcut for `angle` (already % 360): 0 (a copy), 2 (a half turn), 1 / 3
// (ROTATE_90 / ROTATE_270 of a square image), or -1 (the affine transform).
int64_t pil_rotate_turns(double angle, int64_t width, int64_t height, bool has_center);

// libImaging's _gaussian_blur_radius: the extended box radius of a Gaussian of standard
// deviation `radius` made of `passes` box passes (float arithmetic, as Pillow's).
float pil_box_radius(float radius, int passes);

}  // namespace fastprep
