// The real CUDA backend: libtorch's caching allocator and cuBLAS workspaces. Compiled only when
// libtorch has CUDA and its headers are found; the symbols used here also keep libtorch_cuda
// and libc10_cuda loaded (the linker would drop them otherwise: it links with --as-needed).
#include "backend.h"

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/version.h>

#include <map>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <utility>

// As declared in ATen/cuda/CUDAContextLight.h, which would also need the cuBLAS, cuSPARSE and
// CCCL headers; exported by libtorch_cuda. libtorch 2.13 keeps each workspace's size beside
// its block; 2.11 keeps the block alone.
namespace at::cuda {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
using Workspace = std::pair<at::DataPtr, size_t>;
inline const at::DataPtr& block_of(const Workspace& w) { return w.first; }
#else
using Workspace = at::DataPtr;
inline const at::DataPtr& block_of(const Workspace& w) { return w; }
#endif
struct WorkspaceMapWithMutex {
  std::map<std::tuple<void*, void*>, Workspace> map;
  std::shared_mutex mutex;
};
WorkspaceMapWithMutex& cublas_handle_stream_to_workspace();
WorkspaceMapWithMutex& cublaslt_handle_stream_to_workspace();
void clearCublasWorkspaces();
}  // namespace at::cuda

namespace {

namespace alloc = c10::cuda::CUDACachingAllocator;

bool attach_tracker(c10::CachingDeviceAllocator::AllocatorTraceTracker tracker) {
  auto* allocator = alloc::get();
  // Device allocators are created at CUDA's lazy init; a tracker attached before would be lost.
  if (allocator == nullptr || !allocator->initialized()) return false;
  allocator->attachAllocatorTraceTracker(std::move(tracker));
  return true;
}

void visit_map(at::cuda::WorkspaceMapWithMutex& workspaces, const char* kind,
               gpu_scope::WorkspaceVisitor visit, void* ctx) {
  std::shared_lock<std::shared_mutex> lock(workspaces.mutex);
  for (const auto& [handle_and_stream, workspace] : workspaces.map) {
    const at::DataPtr& data = at::cuda::block_of(workspace);
    visit(ctx, data.get(), data.device().index(), kind);
  }
}

void workspaces(gpu_scope::WorkspaceVisitor visit, void* ctx) {
  visit_map(at::cuda::cublas_handle_stream_to_workspace(), "cuBLAS workspace", visit, ctx);
  visit_map(at::cuda::cublaslt_handle_stream_to_workspace(), "cuBLASLt workspace", visit, ctx);
}

void clear_workspaces() { at::cuda::clearCublasWorkspaces(); }

const gpu_scope::Backend cuda{"cuda", &attach_tracker, &workspaces, &clear_workspaces};

}  // namespace

const gpu_scope::Backend* gpu_scope::backend() { return &cuda; }
