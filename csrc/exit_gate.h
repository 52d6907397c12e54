// Ops that run without the GIL and the interpreter's exit.
//
// torch.ops.fastprep.* run with the GIL released; the readers and the batch ops run in daemon
// threads (the prefetcher, the object-store read-ahead). When one returns after the interpreter
// has begun to finalize, CPython ends its thread with pthread_exit while it waits for the GIL
// inside torch's wrapper, whose GIL guard is a noexcept destructor: the forced unwind reaches
// it and std::terminate aborts the process ("terminate called without an active exception").
//
// An ExitGate in each op closes that door. fastprep._ops registers close_exit_gate() with
// atexit, which runs before finalization: from then on an op that starts, or ends, parks its
// thread for good instead of going back to Python (the process exits around it). The close
// waits, without the GIL, a short while for the ops in flight to end, so that those that end
// just before it take the GIL back while that is still allowed.
#pragma once

namespace fastprep {

// True once the interpreter has begun to exit (close_exit_gate ran).
bool exiting();

// Blocks the calling thread until the process ends. Holds no lock and never returns.
[[noreturn]] void park_thread();

class ExitGate {
 public:
  ExitGate();
  ~ExitGate();
  ExitGate(const ExitGate&) = delete;
  ExitGate& operator=(const ExitGate&) = delete;
};

}  // namespace fastprep
