// Schemas of torch.ops.fastprep.* and the Python module object for fastprep._C.
#include <Python.h>
#include <torch/library.h>

#include "jpeg_common.h"

TORCH_LIBRARY(fastprep, m) {
  // [height, width, components, colour space, progressive, arithmetic, adobe, h0, v0, ... h3, v3]
  m.def("jpeg_info(Tensor data) -> int[]");
  m.def("decode_jpeg(Tensor data, int mode, int max_pixels, bool strict) -> Tensor");
  m.def(
      "decode_jpeg_roi(Tensor data, int top, int left, int height, int width, int mode, "
      "int max_pixels, bool strict) -> Tensor");
}

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fastprep's compiled ops", -1,
                                          nullptr};
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr) PyModule_AddStringConstant(module, "libjpeg_turbo_version", fp_libjpeg_version());
  return module;
}
