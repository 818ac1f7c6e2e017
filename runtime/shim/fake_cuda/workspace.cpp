// The fake cuBLAS workspace. Real matrix products get a cuBLAS handle per (thread, device) from
// a pool and, the first time a handle is used, a workspace allocated through the caching
// allocator inside the operator; the workspace stays in a map, keyed by handle and stream,
// until at::cuda::clearCublasWorkspaces(). When a thread exits its handles go back to the pool
// and a later thread reuses them, workspace included. This file does the same with a handle
// number in place of a cublasHandle_t, then runs the product on the CPU.
#include "allocator.h"
#include "fake_cuda.h"

#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpu_scope::fake_cuda {

void link_workspace() {}

namespace {

// at::cuda's DeviceThreadHandlePool, with handle numbers. Leaked: threads may exit after
// static destructors ran.
struct HandlePool {
  std::mutex mutex;
  std::vector<std::vector<int>> available;  // per device
  std::vector<int> created;                 // per device
};

HandlePool& handle_pool() {
  static auto* pool = new HandlePool();
  return *pool;
}

// A thread's reserved handles, returned to the pool when the thread exits.
struct PoolWindow {
  std::unordered_map<c10::DeviceIndex, int> mine;

  int reserve(c10::DeviceIndex device) {
    auto it = mine.find(device);
    if (it != mine.end()) return it->second;
    HandlePool& pool = handle_pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    const auto d = static_cast<size_t>(device);
    if (pool.available.size() <= d) {
      pool.available.resize(d + 1);
      pool.created.resize(d + 1, 0);
    }
    int handle = 0;
    if (!pool.available[d].empty()) {
      handle = pool.available[d].back();
      pool.available[d].pop_back();
    } else {
      handle = pool.created[d]++;
    }
    mine.emplace(device, handle);
    return handle;
  }

  ~PoolWindow() {
    if (mine.empty()) return;
    HandlePool& pool = handle_pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    for (const auto& [device, handle] : mine) {
      pool.available[static_cast<size_t>(device)].push_back(handle);
    }
  }
};

thread_local PoolWindow t_window;

// cublas_handle_stream_to_workspace(): (device, handle) -> workspace. Leaked like the pool.
struct WorkspaceMap {
  std::map<std::pair<int, int>, at::DataPtr> map;
  std::shared_mutex mutex;
};

WorkspaceMap& workspace_map() {
  static auto* map = new WorkspaceMap();
  return *map;
}

// The cuBLAS products (mm, addmm, bmm, baddbmm, addmv, dot, vdot, with their in-place and
// out= forms) on the fake device.
void blas_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& arguments = op.schema().arguments();
  const auto inputs = torch::jit::last(*stack, arguments.size());
  std::optional<c10::Device> device;
  bool empty = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor()) continue;
    const at::Tensor& t = inputs[i].toTensor();
    if (!t.defined()) continue;
    if (!device && t.is_cuda()) device = t.device();
    const auto* alias = arguments[i].alias_info();
    const bool out = alias != nullptr && alias->isWrite() && arguments[i].kwarg_only();
    // An empty operand means no GEMM, and the real kernels then never touch cuBLAS.
    if (!out && t.numel() == 0) empty = true;
  }
  if (device && !empty) ensure_workspace(device->index());
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace

void ensure_workspace(c10::DeviceIndex device) {
  const int handle = t_window.reserve(device);
  const auto key = std::make_pair(static_cast<int>(device), handle);
  WorkspaceMap& workspaces = workspace_map();
  {
    std::shared_lock<std::shared_mutex> lock(workspaces.mutex);
    if (workspaces.map.count(key) != 0) return;
  }
  // Allocated outside the map's lock, as in the real setWorkspace, on the operator's device.
  at::DataPtr fresh;
  {
    const c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, device));
    fresh = allocator().allocate(workspace_size());
  }
  std::unique_lock<std::shared_mutex> lock(workspaces.mutex);
  workspaces.map.try_emplace(key, std::move(fresh));
}

void for_each_workspace(void (*visit)(void* ctx, const void* ptr, int device), void* ctx) {
  WorkspaceMap& workspaces = workspace_map();
  std::shared_lock<std::shared_mutex> lock(workspaces.mutex);
  for (const auto& [key, data] : workspaces.map) visit(ctx, data.get(), key.first);
}

size_t workspace_count() {
  WorkspaceMap& workspaces = workspace_map();
  std::shared_lock<std::shared_mutex> lock(workspaces.mutex);
  return workspaces.map.size();
}

void clear_workspaces() {
  std::map<std::pair<int, int>, at::DataPtr> doomed;
  WorkspaceMap& workspaces = workspace_map();
  {
    std::unique_lock<std::shared_mutex> lock(workspaces.mutex);
    doomed.swap(workspaces.map);
  }
  // The blocks are freed here, on the calling thread, as clearCublasWorkspaces() frees them.
}

}  // namespace gpu_scope::fake_cuda

TORCH_LIBRARY_IMPL(aten, CUDA, m) {
  const auto blas = [] {
    return torch::CppFunction::makeFromBoxedFunction<&gpu_scope::fake_cuda::blas_kernel>();
  };
  // Every product that calls cuBLAS on a GPU (matrix-vector through addmv, which `mv` and a
  // 2-D by 1-D `matmul` reach; dot products) takes its handle, and so makes the workspace.
  for (const char* name : {"mm", "mm.out", "addmm", "addmm.out", "addmm_", "bmm", "bmm.out",
                           "baddbmm", "baddbmm.out", "baddbmm_", "addmv", "addmv.out", "addmv_",
                           "dot", "vdot"}) {
    m.impl(name, blas());
  }
}
