// Schemas of torch.ops.fastprep.* and the Python module object for fastprep._C.
#include <Python.h>
#include <torch/library.h>

#include <string>

#include "jpeg_common.h"
#include "jpeg_ops.h"
#include "restart_index.h"

namespace fastprep {
std::string& thread_warning() {
  static thread_local std::string pending;
  return pending;
}
}  // namespace fastprep

TORCH_LIBRARY(fastprep, m) {
  // int64 [15]: height, width, components, colour space, progressive, arithmetic, adobe,
  // then h, v sampling factors of components 0..3 (a tensor, so fake kernels can describe it),
  // then the restart interval in MCUs (0: none) and whether decode_jpeg_roi's restart-interval
  // path applies (1/0)
  m.def("jpeg_info(Tensor data) -> Tensor");
  // scale_num: decode at scale_num/8 of the size (DCT scaling); ROI windows are in scaled
  // coordinates. max_scans: refuse files with more scans (0: no limit). channels_last: the
  // [C, H, W] result's memory is [H, W, C] (libjpeg's scanlines copied as they come).
  m.def(
      "decode_jpeg(Tensor data, int mode, int max_pixels, bool strict, int scale_num=8, "
      "int max_scans=0, bool channels_last=False) -> Tensor");
  m.def(
      "decode_jpeg_roi(Tensor data, int top, int left, int height, int width, int mode, "
      "int max_pixels, bool strict, int scale_num=8, int max_scans=0, "
      "bool channels_last=False) -> Tensor");
  // Lossless transcode; restart_interval in MCUs, -1 = automatic (see transcode_jpeg.cpp).
  m.def(
      "transcode_jpeg(Tensor data, int restart_interval, bool optimize, bool keep_metadata, "
      "int max_pixels) -> Tensor");
}

// take_warning() -> str | None: the pending libjpeg warning of this thread, cleared.
static PyObject* take_warning(PyObject*, PyObject*) {
  std::string& pending = fastprep::thread_warning();
  if (pending.empty()) Py_RETURN_NONE;
  PyObject* out = PyUnicode_DecodeUTF8(pending.data(), (Py_ssize_t)pending.size(), "replace");
  pending.clear();
  return out;
}

// restart_stats() -> (taken, fallbacks): this thread's restart-interval ROI decodes, and
// eligible files that fell back to the sequential path (for tests).
static PyObject* restart_stats(PyObject*, PyObject*) {
  const fastprep::RestartStats& s = fastprep::restart_stats();
  return Py_BuildValue("(LL)", (long long)s.taken, (long long)s.fallbacks);
}

static PyMethodDef methods[] = {
    {"take_warning", take_warning, METH_NOARGS, "Pending libjpeg warning of this thread, cleared."},
    {"restart_stats", restart_stats, METH_NOARGS,
     "This thread's (restart-interval ROI decodes taken, eligible files that fell back)."},
    {nullptr, nullptr, 0, nullptr}};

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fastprep's compiled ops", -1,
                                          methods};
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr) PyModule_AddStringConstant(module, "libjpeg_turbo_version", fp_libjpeg_version());
  return module;
}
