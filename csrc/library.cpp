// Schemas of torch.ops.fastprep.* and the Python module object for fastprep._C.
#include <Python.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "exit_gate.h"
#include "isa.h"
#include "jpeg/jpeg_decoder.h"
#include "jpeg/jpeg_info.h"
#include "jpeg/jpeg_ops.h"
#include "ops/resize_aa.h"
#include "jpeg/restart_index.h"

TORCH_LIBRARY(fastprep, m) {
  // int64 [17], the fields of jpeg_info.h in order (a tensor, so fake kernels can describe it)
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
  // Bilinear (filter 0), bicubic (1), nearest (2) or nearest-exact (3) resize of a uint8
  // channels-last [C, H, W] image (C = 1, 3, 4), bit-identical to torch's uint8 kernels
  // (aten::_upsample_bilinear2d_aa / upsample_bilinear2d and the bicubic and nearest ones):
  // output pixels out_window = [top, left, height, width] of resizing a virtual
  // full_in = [height, width] image to full_out = [height, width], of which `image` holds the
  // H x W pixels from in_origin = [top, left] on. scale = [h, w]: output px per input px
  // (<= 0: full_out/full_in). hflip: the output mirrored. Result channels-last.
  m.def(
      "resize_aa(Tensor image, int[2] full_out, int[4] out_window, int[2] full_in, int[2] in_origin, "
      "float[2] scale, bool antialias, bool hflip, int filter=0) -> Tensor");
  // Pillow's Image.resize (filter 1..5: box, bilinear, hamming, bicubic, lanczos), bit for
  // bit, of a uint8 [C, H, W] image (C = 1, 3, 4): the same windows as resize_aa (no scale
  // argument: Pillow's is full_in / full_out). Result channels-last.
  m.def(
      "pil_resize(Tensor image, int[2] full_out, int[4] out_window, int[2] full_in, int[2] in_origin, int filter, "
      "bool hflip) -> Tensor");
  // The native pipelines for a batch (decode_batch.cpp): per sample and view (plans: SamplePlan
  // records, batch/plan.h; sample-major, one per view), decode + resize + pad + mask, the pixel
  // steps of steps (PixelStep records, ops/pixel_kernel.h; extras: tensors they refer to) into
  // outs[v][i] (uint8, or float32/float16/bfloat16 through the view's conversion, a ConvertSpec
  // record of converts), on num_threads threads; the views of a sample that decode at the same
  // scale share one decode. fills [2 V, decode_channels] int64: each view's padding and mask
  // values. Returns (status [N, 3] int64: code (0 ok, 1 warning, 2 error), offset and length of
  // the sample's message in messages, a uint8 [M] UTF-8 buffer).
  m.def(
      "decode_batch(Tensor[] data, Tensor plans, Tensor steps, Tensor[] extras, Tensor fills, Tensor(a!)[] outs, "
      "int decode_channels, int decode_mode, int max_pixels, bool strict, int max_scans, Tensor converts, "
      "int num_threads) -> (Tensor, Tensor)");
  // The threads engine's readers (plan_batch.cpp). read_files: the bytes of each regular file
  // (uint8 1-D), and per path 0, an errno value, or a negative code for a path that is not a
  // regular file (never opened when stat says so).
  m.def("read_files(str[] paths) -> (Tensor[], Tensor)");
  // read_tar_members: the data of tar members (a shard dataset's samples) located by their
  // index (data offset and size), each checked against the tar header before it: per member
  // its bytes and 0, or an empty tensor and 1 (the caller's Python path then names the error).
  m.def("read_tar_members(str[] shards, int[] offsets, int[] sizes, str[] members) -> (Tensor[], Tensor)");
  // http_get (readers/http_get.cpp): GET requests, written out whole by the caller, to one
  // server at a numeric address, `concurrency` at a time on pooled keep-alive connections:
  // per request its body, its HTTP status or a negative failure code, the failure's reason, what
  // its head said (N x 4: Content-Range's first, last, size; whether the body's end was framed
  // rather than the connection's close), and [requests started, their sum of requests in flight
  // at the start, the most in flight]. With tls (built with OpenSSL: http_tls()), HTTPS:
  // the certificate verified against the system's CAs or ca_file, and against server_name (also
  // the SNI). tunnel: a CONNECT request, written out whole, sent first on each new connection
  // (the address is then a proxy's).
  m.def("http_get(str host, int port, str[] heads, int concurrency, float timeout_s, int max_body, "
        "bool tls=False, str server_name=\"\", str ca_file=\"\", str tunnel=\"\") "
        "-> (Tensor[], Tensor, str[], Tensor, Tensor)");
  m.def("http_tls() -> bool");
  // plan_batch: per sample its route (status code 0 planned, 1 left to the Python path, 2 error
  // with its message), then per view its SamplePlan record (plans: N x V, sample-major), the
  // pixel steps the augmentations' draws emitted (per view a program: nodes, ints, floats,
  // num_roots, the last num_float_roots of which run on the float image; ops/native_draw.h)
  // and the tensors they keep, and the image's (height, width); the draws are those of the
  // views in order under the sample's key (specs: one DecodeSpec per view), or, given a
  // generator, on it (every sample's draws in turn; keys unused: the per-sample MultiView call
  // passes torch's default generator). whole_file: a view decodes the whole file (a v2
  // pipeline), so a file not ending in EOI is left to Python.
  m.def(
      "plan_batch(Tensor[] data, Tensor keys, Tensor specs, Tensor[] nodes, Tensor[] ints, Tensor[] floats, "
      "int[] num_roots, int[] num_float_roots, int[] dct_scales, int max_pixels, bool exif, bool whole_file, "
      "Generator? generator=None) -> (Tensor, Tensor, Tensor[], Tensor, Tensor, Tensor)");
}

// ---------------------------------------------------------------- the exit gate (exit_gate.h)

namespace fastprep {
namespace {
std::atomic<bool> g_exiting{false};
std::atomic<int64_t> g_ops_in_flight{0};
std::thread::id g_exit_thread;  // the thread that closed the gate (runs atexit; never parked)

// Whether the calling thread is one the gate parks: any but the one running the exit.
bool parks_here() { return exiting() && std::this_thread::get_id() != g_exit_thread; }
}  // namespace

bool exiting() { return g_exiting.load(std::memory_order_acquire); }

void park_thread() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
}

ExitGate::ExitGate() {
  if (parks_here()) park_thread();
  g_ops_in_flight.fetch_add(1, std::memory_order_acq_rel);
}

ExitGate::~ExitGate() {
  g_ops_in_flight.fetch_sub(1, std::memory_order_acq_rel);
  if (parks_here()) park_thread();
}

}  // namespace fastprep

// close_exit_gate() -> int: from now on an op that starts or ends in another thread than this
// one parks that thread (this one goes on running atexit handlers and finalizers); waits
// (without the GIL) up to 200 ms for the ops in flight to end, then 2 ms for the threads they
// ran on to take the GIL back. Returns the ops still in flight (they park when they end).
static PyObject* close_exit_gate(PyObject*, PyObject*) {
  if (fastprep::exiting()) return PyLong_FromLong(0);
  fastprep::g_exit_thread = std::this_thread::get_id();
  fastprep::g_exiting.store(true, std::memory_order_release);
  int64_t left = 0;
  Py_BEGIN_ALLOW_THREADS
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while ((left = fastprep::g_ops_in_flight.load(std::memory_order_acquire)) > 0 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(left);
}

// take_warning() -> str | None: the pending libjpeg warning of this thread, cleared.
static PyObject* take_warning(PyObject*, PyObject*) {
  std::string& pending = fastprep::thread_warning();
  if (pending.empty()) Py_RETURN_NONE;
  PyObject* out = PyUnicode_DecodeUTF8(pending.data(), (Py_ssize_t)pending.size(), "replace");
  pending.clear();
  return out;
}

// buffer_view(obj) -> Tensor: a uint8 1-D tensor over the bytes of `obj`, any C-contiguous
// buffer (bytes, bytearray, memoryview, mmap, numpy array), read in place: no copy, and no
// warning for read-only buffers, which torch.frombuffer and torch.from_numpy give. The
// tensor holds the buffer (and so `obj`) until it is freed. torch has no read-only tensors,
// so the caller (fastprep._checks.encoded_view) hands it only to ops that read their input
// and never lets it out.
static PyObject* buffer_view(PyObject*, PyObject* obj) {
  Py_buffer* view = new Py_buffer;
  if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
    delete view;
    return nullptr;
  }
  // Released when the last holder goes: the tensor's storage, or this frame if from_blob throws.
  const std::shared_ptr<Py_buffer> held(view, [](Py_buffer* v) {
    const PyGILState_STATE gil = PyGILState_Ensure();  // a tensor may be freed without the GIL
    PyBuffer_Release(v);
    PyGILState_Release(gil);
    delete v;
  });
  try {
    return THPVariable_Wrap(at::from_blob(view->buf, {(int64_t)view->len}, [held](void*) {},
                                          at::TensorOptions(at::kByte)));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
    return nullptr;
  }
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

// native_isa(level) -> int: the C++ kernels' variant (isa.h: 0 baseline, 1 AVX2 + FMA); level
// -1 only reads it, 0/1 select one (capped by the CPU). fastprep._kernels.isa calls it; not
// thread-safe.
static PyObject* native_isa(PyObject*, PyObject* arg) {
  long level = PyLong_AsLong(arg);
  if (level == -1 && PyErr_Occurred()) return nullptr;
  if (level >= 0) fastprep::set_isa_level(level);
  return PyLong_FromLongLong((long long)fastprep::isa_level());
}

static PyMethodDef methods[] = {
    {"take_warning", take_warning, METH_NOARGS, "Pending libjpeg warning of this thread, cleared."},
    {"buffer_view", buffer_view, METH_O, "A uint8 1-D tensor over a C-contiguous buffer's bytes, not copied."},
    {"restart_stats", restart_stats, METH_NOARGS,
     "This thread's (restart-interval ROI decodes taken, eligible files that fell back)."},
    {"interval_index_stats", interval_index_stats, METH_NOARGS,
     "This thread's (ROI decodes that used the interval index, files whose index was rejected)."},
    {"close_exit_gate", close_exit_gate, METH_NOARGS,
     "At interpreter exit: ops that start or end from now on park their threads (csrc/exit_gate.h)."},
    {"native_isa", native_isa, METH_O, "The C++ kernels' variant: -1 reads, 0 baseline, 1 AVX2 selects."},
    {nullptr, nullptr, 0, nullptr}};

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "fastprep's compiled ops", -1,
                                          methods};
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  PyObject* fields = PyTuple_New(fastprep::kJpegInfoFields);
  for (int i = 0; fields != nullptr && i < fastprep::kJpegInfoFields; i++) {
    PyObject* name = PyUnicode_FromString(fastprep::kJpegInfoFieldNames[i]);
    if (name == nullptr) Py_CLEAR(fields);
    else PyTuple_SET_ITEM(fields, i, name);
  }
  // PyModule_AddObject steals the reference only on success
  if (fields == nullptr || PyModule_AddObject(module, "jpeg_info_fields", fields) < 0 ||
      PyModule_AddStringConstant(module, "libjpeg_turbo_version", fp_libjpeg_version()) < 0) {
    Py_XDECREF(fields);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
