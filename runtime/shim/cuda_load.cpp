// libtorch has CUDA but the CUDA headers were not found at build time. Referencing one symbol
// of libtorch_cuda keeps the linker from dropping it (it links with --as-needed), so that
// libtorch's CUDA registrations run and tch sees the GPU. Without the headers gpu-scope cannot
// attach its allocator tracker or list cuBLAS workspaces.
#include "backend.h"

#include <cstddef>

namespace at::cuda {
size_t getChosenWorkspaceSize();  // exported by libtorch_cuda
}

namespace {
// Read through a volatile pointer so that the reference survives optimisation.
size_t (*volatile keep_libtorch_cuda)() = &at::cuda::getChosenWorkspaceSize;
const gpu_scope::Backend cuda_without_headers{"cuda (built without CUDA headers)", nullptr,
                                              nullptr, nullptr};
}  // namespace

const gpu_scope::Backend* gpu_scope::backend() {
  (void)keep_libtorch_cuda;
  return &cuda_without_headers;
}
