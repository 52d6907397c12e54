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
  // interval_index: record where each restart interval starts (an APP9 segment, see
  // restart_index.h) so decode_jpeg_roi reads only a window's intervals.
  m.def(
      "transcode_jpeg(Tensor data, int restart_interval, bool optimize, bool keep_metadata, "
      "int max_pixels, bool interval_index=True) -> Tensor");
  // Bilinear resize of a uint8 channels-last [C, H, W] image (C = 1, 3, 4), bit-identical to
  // aten::_upsample_bilinear2d_aa (antialias) / aten::upsample_bilinear2d (uint8 kernels):
  // output pixels [out_top, out_top+out_h) x [out_left, out_left+out_w) of resizing a virtual
  // full_in_h x full_in_w image to full_out_h x full_out_w, of which `image` holds rows
  // [in_top, in_top+H) and columns [in_left, in_left+W). scale_h/scale_w: output px per input
  // px (<= 0: full_out/full_in). hflip: the output mirrored. Result channels-last.
  m.def(
      "resize_aa(Tensor image, int full_out_h, int full_out_w, int out_top, int out_left, int out_h, "
      "int out_w, int full_in_h, int full_in_w, int in_top, int in_left, float scale_h, float scale_w, "
      "bool antialias, bool hflip) -> Tensor");
  // The built-in decode pipelines for a batch (decode_batch.cpp, which defines the columns of
  // plans [N, 24] int64 and scales [N, 2] float64): decode + resize + pad + mask of sample i
  // into out[i] (uint8, or float32/float16/bfloat16 through conversion `convert` with
  // params [3, 6] float64), on num_threads threads. fills [2, C] int64: padding and mask
  // values per channel. Returns (status [N, 3] int64: code (0 ok, 1 warning, 2 error),
  // offset and length of the sample's message in messages, a uint8 [M] UTF-8 buffer).
  m.def(
      "decode_batch(Tensor[] data, Tensor plans, Tensor scales, Tensor fills, Tensor(a!) out, int decode_mode, "
      "int max_pixels, bool strict, int max_scans, int convert, Tensor params, int num_threads) "
      "-> (Tensor, Tensor)");
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

// interval_index_stats() -> (used, rejected): this thread's restart-interval ROI decodes
// that took their intervals from the interval index, and files whose index failed
// validation (they were scanned instead). For tests.
static PyObject* interval_index_stats(PyObject*, PyObject*) {
  const fastprep::RestartStats& s = fastprep::restart_stats();
  return Py_BuildValue("(LL)", (long long)s.index_used, (long long)s.index_rejected);
}

namespace fastprep {
int64_t resize_aa_isa(int64_t level);
}

// resize_isa(level) -> int: resize_aa's kernel variant (0 baseline, 1 AVX2); level -1 only
// reads it, 0/1 select one (capped by the CPU). For tests and benchmarks; not thread-safe.
static PyObject* resize_isa(PyObject*, PyObject* arg) {
  long level = PyLong_AsLong(arg);
  if (level == -1 && PyErr_Occurred()) return nullptr;
  return PyLong_FromLongLong((long long)fastprep::resize_aa_isa(level));
}

static PyMethodDef methods[] = {
    {"take_warning", take_warning, METH_NOARGS, "Pending libjpeg warning of this thread, cleared."},
    {"restart_stats", restart_stats, METH_NOARGS,
     "This thread's (restart-interval ROI decodes taken, eligible files that fell back)."},
    {"interval_index_stats", interval_index_stats, METH_NOARGS,
     "This thread's (ROI decodes that used the interval index, files whose index was rejected)."},
    {"resize_isa", resize_isa, METH_O, "resize_aa's kernel variant: -1 reads, 0 baseline, 1 AVX2 selects."},
    {nullptr, nullptr, 0, nullptr}};

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fastprep's compiled ops", -1,
                                          methods};
  PyObject* module = PyModule_Create(&module_def);
  if (module != nullptr) PyModule_AddStringConstant(module, "libjpeg_turbo_version", fp_libjpeg_version());
  return module;
}
