// Test probes that gpu-scope's own tests call through FFI: the fake device's count of device
// synchronizations, and libtorch's profiler started and stopped on the calling thread (to
// check that gpu-scope never disturbs it). Fake builds only.
#include "fake_cuda.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <cstdio>

#include <atomic>
#include <cstdint>

namespace {
std::atomic<uint64_t> synchronizations{0};
}  // namespace

void gpu_scope::fake_cuda::count_synchronization() { synchronizations.fetch_add(1); }
void gpu_scope::fake_cuda::link_probes() {}

extern "C" {

// Device and stream synchronizations requested from the fake device so far.
uint64_t gs_fake_cuda_synchronizations(void) noexcept { return synchronizations.load(); }

// Starts libtorch's profiler on this thread: the CPU (legacy autograd) profiler, which holds
// the thread's PROFILER_STATE slot as every libtorch profiler does (Kineto's would reach for a
// GPU through CUPTI), recording memory with `profile_memory`. 0 on success; on failure the
// reason goes to stderr.
int gs_test_profiler_start(int profile_memory) noexcept {
  try {
    namespace p = torch::profiler::impl;
    torch::autograd::profiler::enableProfilerLegacy(
        p::ProfilerConfig(p::ProfilerState::CPU, false, profile_memory != 0));
    return 0;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "profiler start failed: %s\n", e.msg().c_str());
    return -1;
  }
}

// Stops the profiler started on this thread; the number of events it recorded, or -1.
int64_t gs_test_profiler_stop(void) noexcept {
  try {
    size_t events = 0;
    for (const auto& list : torch::autograd::profiler::disableProfilerLegacy()) {
      events += list.size();
    }
    return static_cast<int64_t>(events);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "profiler stop failed: %s\n", e.msg().c_str());
    return -1;
  }
}

}  // extern "C"
