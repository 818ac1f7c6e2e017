// The fake device's operators. A few kernels make CUDA tensors (allocation, views, copies,
// resizing, filling, reading a scalar); everything else runs on the CPU through libtorch's
// boxed CPU fallback, which copies the arguments to the CPU and the results back. Device memory
// is host memory, so a copy between the devices is a CPU copy between two views of host memory.
#include "allocator.h"
#include "fake_cuda.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace gpu_scope::fake_cuda {

void link_kernels() {}

namespace {

const c10::DispatchKeySet kCudaKeys(c10::DispatchKey::CUDA);

// Where a factory function allocates: the requested index, else the current device.
c10::Device target(std::optional<c10::Device> device) {
  const c10::DeviceIndex index =
      device && device->has_index() ? device->index() : current_device();
  return {c10::DeviceType::CUDA, index};
}

void check_factory_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "the fake CUDA device only has strided tensors");
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  // Like at::detail::empty_cuda: the first CUDA tensor runs CUDA's lazy init.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  check_factory_options(layout, pin_memory);
  const c10::DeviceGuard guard(target(device));
  return at::detail::empty_generic(size, &allocator(), kCudaKeys, c10::dtype_or_default(dtype),
                                   memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  check_factory_options(layout, pin_memory);
  const c10::DeviceGuard guard(target(device));
  return at::detail::empty_strided_generic(size, stride, &allocator(), kCudaKeys,
                                           c10::dtype_or_default(dtype));
}

// A CPU tensor over the same (host) memory as `t`: no copy, no allocation.
at::Tensor host_view(const at::Tensor& t) {
  if (t.device().is_cpu()) return t;
  TORCH_CHECK(t.is_cuda() && t.layout() == c10::kStrided,
              "the fake CUDA device cannot copy to or from ", t.device(), " ", t.layout());
  at::Tensor view = at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                                  at::TensorOptions().dtype(t.dtype()).device(c10::kCPU));
  view._set_conj(t.is_conj());
  view._set_neg(t.is_neg());
  return view;
}

// dst <- src for any pair of CPU and fake CUDA tensors (broadcasting and casting as copy_ does).
void copy_between(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0 || src.numel() == 0) {
    // Nothing to move (and nothing to point a view at), but the shapes must still agree.
    TORCH_CHECK(at::is_expandable_to(src.sizes(), dst.sizes()), "The size of tensor ",
                src.sizes(), " cannot be copied into a tensor of size ", dst.sizes());
    return;
  }
  host_view(dst).copy_(host_view(src));
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool /*non_blocking*/) {
  copy_between(self, src);
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  copy_between(dst, self);
  return dst;
}

// The CPU fallback writes results back into device tensors with this.
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  copy_between(dst, self);
  return dst;
}

// Growing a tensor allocates through the storage's allocator, which allocates on the current
// device: make that the tensor's device.
const at::Tensor& resize_(const at::Tensor& self, at::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                        at::IntArrayRef size, at::IntArrayRef stride) {
  const c10::DeviceGuard guard(source.device());
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset, size, stride);
}

at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &allocator(), /*resizable=*/true);
  self.set_(storage, 0, {0}, {});
  return self;
}

// Filling in place, as a CUDA kernel would: no copy to the CPU and back (the fallback's), so
// `zeros`, `ones` and `full` allocate on the device only, as on a GPU.
at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() != 0) host_view(self).fill_(value);
  return self;
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

void record_stream(at::Tensor& self, c10::Stream stream) {
  allocator().recordStream(self.storage().data_ptr(), stream);
}

// Everything without a kernel above. Views cannot fall back (the CPU result would be a copy),
// so a view operator without a kernel here is an error rather than a silent copy.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace
}  // namespace gpu_scope::fake_cuda

TORCH_LIBRARY_IMPL(aten, CUDA, m) {
  namespace fc = gpu_scope::fake_cuda;
  m.impl("empty.memory_format", TORCH_FN(fc::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(fc::empty_strided));
  m.impl("copy_", TORCH_FN(fc::copy_));
  m.impl("_copy_from", TORCH_FN(fc::copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(fc::copy_from_and_resize));
  m.impl("resize_", TORCH_FN(fc::resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(fc::set_storage));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("set_", TORCH_FN(fc::set_empty));
  m.impl("fill_.Scalar", TORCH_FN(fc::fill_scalar));
  m.impl("zero_", TORCH_FN(fc::zero_));
  m.impl("record_stream", TORCH_FN(fc::record_stream));
  m.impl("_local_scalar_dense", TORCH_FN(at::native::_local_scalar_dense_cpu));
  // Views with a kernel per backend in libtorch (the generic ones, shared with the CPU).
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

TORCH_LIBRARY_IMPL(_, CUDA, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&gpu_scope::fake_cuda::cpu_fallback>());
}
