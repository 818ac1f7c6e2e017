// The device backend: what gpu-scope needs from an accelerator's caching allocator that the
// device-generic API (ATen/DeviceAccelerator.h) does not offer. Exactly one translation unit
// defines gpu_scope::backend(), chosen by build.rs:
//   cuda_backend.cpp  libtorch has CUDA and the CUDA headers were found;
//   cuda_load.cpp     libtorch has CUDA, no CUDA headers: only keeps libtorch_cuda loaded;
//   fake_cuda/        the fake CUDA device of the tests (feature `fake-cuda`);
//   no_backend.cpp    a CPU-only libtorch.
#pragma once
#include <c10/core/CachingDeviceAllocator.h>

namespace gpu_scope {

// Called once per workspace block: its address, device index and what keeps it.
using WorkspaceVisitor = void (*)(void* ctx, const void* ptr, int device_index,
                                  const char* kind);

struct Backend {
  // "cuda", "cuda (no headers)", "fake-cuda".
  const char* name;
  // Attaches `tracker` to the caching allocator of every device; false (and nothing attached)
  // while the allocator is not initialized yet, so the caller retries later. The allocator calls
  // the tracker on the calling thread, under its lock, for every ALLOC, FREE_REQUESTED and
  // FREE_COMPLETED (size: requested bytes, as libtorch 2.11 does), SEGMENT_ALLOC and
  // SEGMENT_FREE. Throws where the allocator takes no trackers (cudaMallocAsync's); the caller
  // then never tries again.
  // May be null: frees on threads outside scopes then go unseen.
  bool (*attach_tracker)(c10::CachingDeviceAllocator::AllocatorTraceTracker tracker);
  // Calls `visit` for each block that a library keeps allocated on purpose (cuBLAS and
  // cuBLASLt workspaces), alive now on any device. May be null.
  void (*workspaces)(WorkspaceVisitor visit, void* ctx);
  // Frees those blocks (at::cuda::clearCublasWorkspaces()). May be null.
  void (*clear_workspaces)();
};

// The backend linked into this build; nullptr for a CPU-only libtorch.
const Backend* backend();

}  // namespace gpu_scope
