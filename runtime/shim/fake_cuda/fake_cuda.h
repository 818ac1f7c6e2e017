// The fake CUDA device of gpu-scope's tests: libtorch's CUDA device type backed by host memory,
// with an allocator that behaves like libtorch 2.11's native CUDA caching allocator wherever
// gpu-scope can observe it (block sizes, caching, statistics, trace trackers, profiler reports,
// lazy init), a cuBLAS-like workspace that stays allocated across calls, and a pinned-memory
// host allocator that, like CUDA's, reports to nothing. Not modelled: streams other than the
// default one (`recordStream` defers nothing), allocator settings (`expandable_segments`,
// `max_split_size`), CUDA graphs, and the temporary buffers cuDNN or cuBLAS take inside an op.
//
// Built instead of the real CUDA backend when the cargo feature `fake-cuda` is on (see
// runtime/build.rs); it must never share a process with libtorch_cuda.so, which registers the
// same names. Settings, read once from the environment:
//   GPU_SCOPE_FAKE_CUDA_DEVICES=<n>      number of devices (default 2, at most 64)
//   GPU_SCOPE_FAKE_CUDA_REPORTS=0        no profiler reports, and trace trackers refused, as
//                                        with cudaMallocAsync
//   GPU_SCOPE_FAKE_CUDA_WORKSPACE=<n>    bytes of each cuBLAS workspace (default 4 MiB)
#pragma once

#include <c10/core/Device.h>

#include <cstddef>

namespace gpu_scope::fake_cuda {

// Settings (read from the environment on first use, then fixed for the process).
c10::DeviceIndex device_count();
bool reports_enabled();
size_t workspace_size();

// The calling thread's current fake device (the guard's state; 0 until set). The allocator
// allocates on it, as the real one allocates on cudaGetDevice().
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

// Throws like a CUDA runtime error unless 0 <= index < device_count().
void check_device_index(int64_t index);

// cuBLAS workspaces (workspace.cpp): allocates the calling thread's workspace on `device` the
// first time, then keeps it until clear_workspaces().
void ensure_workspace(c10::DeviceIndex device);
// Calls visit(ctx, ptr, device) for every live workspace.
void for_each_workspace(void (*visit)(void* ctx, const void* ptr, int device), void* ctx);
size_t workspace_count();
void clear_workspaces();

// Counts a device or stream synchronization (probes.cpp).
void count_synchronization();

// Empty functions, one per translation unit whose static registrations must run. backend.cpp
// refers to all of them: the linker only pulls the objects of a static library that something
// references, and gpu_scope::backend() is what the rest of the shim references.
void link_device();
void link_kernels();
void link_workspace();
void link_probes();

}  // namespace gpu_scope::fake_cuda
