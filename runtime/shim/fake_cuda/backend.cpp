// gpu-scope's view of the fake device (see ../backend.h). This is the object the rest of the
// shim references (gs_backend_name calls gpu_scope::backend()), so it also refers to every other
// object of the fake: their static registrations only run if the linker keeps them.
#include "../backend.h"

#include "allocator.h"
#include "fake_cuda.h"

namespace {

namespace fc = gpu_scope::fake_cuda;

bool attach_tracker(c10::CachingDeviceAllocator::AllocatorTraceTracker tracker) {
  return fc::allocator().attach_tracker(std::move(tracker));
}

struct Visit {
  gpu_scope::WorkspaceVisitor visit;
  void* ctx;
};

void workspaces(gpu_scope::WorkspaceVisitor visit, void* ctx) {
  Visit v{visit, ctx};
  fc::for_each_workspace(
      [](void* p, const void* ptr, int device) {
        auto* v = static_cast<Visit*>(p);
        v->visit(v->ctx, ptr, device, "cuBLAS workspace");
      },
      &v);
}

void clear_workspaces() { fc::clear_workspaces(); }

const gpu_scope::Backend kFakeCuda{"fake-cuda", &attach_tracker, &workspaces, &clear_workspaces};

}  // namespace

const gpu_scope::Backend* gpu_scope::backend() {
  fc::link_device();
  fc::link_kernels();
  fc::link_workspace();
  fc::link_probes();
  return &kFakeCuda;
}
