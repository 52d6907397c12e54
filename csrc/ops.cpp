// Schemas of torch.ops.fastprep.* and the Python module object for fastprep._C.
#include <Python.h>
#include <torch/library.h>

#include <string>

#include "jpeg_common.h"
#include "jpeg_ops.h"

namespace fastprep {
std::string& thread_warning() {
  static thread_local std::string pending;
  return pending;
}
}  // namespace fastprep

TORCH_LIBRARY(fastprep, m) {
  // int64 [15]: height, width, components, colour space, progressive, arithmetic, adobe,
  // then h, v sampling factors of components 0..3 (a tensor, so fake kernels can describe it)
  m.def("jpeg_info(Tensor data) -> Tensor");
  // scale_num: decode at scale_num/8 of the size (DCT scaling); ROI windows are in scaled
  // coordinates. max_scans: refuse files with more scans (0: no limit).
  m.def(
      "decode_jpeg(Tensor data, int mode, int max_pixels, bool strict, int scale_num=8, "
      "int max_scans=0) -> Tensor");
  m.def(
      "decode_jpeg_roi(Tensor data, int top, int left, int height, int width, int mode, "
      "int max_pixels, bool strict, int scale_num=8, int max_scans=0) -> Tensor");
}

// take_warning() -> str | None: the pending libjpeg warning of this thread, cleared.
static PyObject* take_warning(PyObject*, PyObject*) {
  std::string& pending = fastprep::thread_warning();
  if (pending.empty()) Py_RETURN_NONE;
  PyObject* out = PyUnicode_DecodeUTF8(pending.data(), (Py_ssize_t)pending.size(), "replace");
  pending.clear();
  return out;
}

static PyMethodDef methods[] = {
    {"take_warning", take_warning, METH_NOARGS, "Pending libjpeg warning of this thread, cleared."},
    {nullptr, nullptr, 0, nullptr}};

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fastprep's compiled ops", -1,
                                          methods};
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr) PyModule_AddStringConstant(module, "libjpeg_turbo_version", fp_libjpeg_version());
  return module;
}
