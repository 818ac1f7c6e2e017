// The real CUDA backend: libtorch's caching allocator and cuBLAS workspaces. Compiled only when
// libtorch has CUDA and its headers are found; the symbols used here also keep libtorch_cuda
// and libc10_cuda loaded (the linker would drop them otherwise: it links with --as-needed).
#include "backend.h"

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <map>
#include <mutex>
#include <shared_mutex>
#include <tuple>

// As declared in ATen/cuda/CUDAContextLight.h, which would also need the cuBLAS, cuSPARSE and
// CCCL headers; exported by libtorch_cuda.
namespace at::cuda {
struct WorkspaceMapWithMutex {
  std::map<std::tuple<void*, void*>, at::DataPtr> map;
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
  for (const auto& [handle_and_stream, data] : workspaces.map) {
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
