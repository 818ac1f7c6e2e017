// The part of gpu-scope that only C++ can do: wrap the CPU allocator, install the per-thread
// memory reporter and operator callback, read a tensor's storage, and reach the accelerator's
// caching allocator. Policy and bookkeeping live in Rust.
#include "shim.h"

#include <ATen/DeviceAccelerator.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <exception>
#include <mutex>
#include <string>
#include <vector>

namespace {

thread_local std::string last_error;

template <typename F>
int protect(F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return -1;
}

// Receives the accelerator caching allocator's reports on threads inside a scope (and on the
// intra-op threads that inherit its debug info). It claims profiling is off so that the CPU
// allocator's own reporter stays idle: no size table, no "unknown size" warnings.
struct Reporter final : c10::MemoryReportingInfoBase {
  explicit Reporter(uint64_t owner) : owner(owner) {}
  void reportMemoryUsage(void* ptr, int64_t size, size_t, size_t, c10::Device d) override;
  bool memoryProfilingEnabled() const override { return false; }
  uint64_t owner;
};

Reporter* current_reporter() {
  auto* info = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  return info == nullptr ? nullptr : dynamic_cast<Reporter*>(info);
}

// The outermost operator running on this thread, and how many allocations it made.
thread_local int op_depth = 0;
thread_local const char* op_name = nullptr;
thread_local uint64_t allocs_seen = 0;
thread_local uint64_t allocs_at_op_start = 0;

int device_index(c10::Device d) { return d.has_index() ? d.index() : -1; }

void Reporter::reportMemoryUsage(void* ptr, int64_t size, size_t, size_t, c10::Device d) {
  if (d.is_cpu() || ptr == nullptr) return;  // the CPU is covered by TrackingAllocator
  if (size > 0) {
    ++allocs_seen;
    gs_rust_on_alloc(owner, ptr, static_cast<size_t>(size), static_cast<int>(d.type()),
                     device_index(d), op_name, nullptr, nullptr);
  } else if (size < 0) {
    gs_rust_on_free(ptr, static_cast<int>(d.type()), device_index(d));
  }
}

void tracked_delete(void* data) {
  gs_deleter del = nullptr;
  void* ctx = gs_rust_on_cpu_free(data, &del);
  if (del != nullptr) del(ctx);
}

c10::DeleterFnPtr inner_raw_deleter = nullptr;

// raw_allocate hands out blocks whose context is their address; they come back here, tracked
// or not (oneDNN's scratch buffers take this path).
void raw_delete(void* data) {
  gs_deleter del = nullptr;
  void* ctx = gs_rust_on_cpu_free(data, &del);
  if (del != nullptr) {
    del(ctx);
  } else if (inner_raw_deleter != nullptr) {
    inner_raw_deleter(data);
  }
}

// Wraps libtorch's CPU allocator. Outside scopes it adds one thread-local read; inside, it
// hands the original deleter to Rust and keeps context == data, as the default allocator does.
struct TrackingAllocator final : c10::Allocator {
  explicit TrackingAllocator(c10::Allocator* inner) : inner(inner) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr p = inner->allocate(n);
    Reporter* r = current_reporter();
    void* data = p.get();
    if (r == nullptr || data == nullptr || n == 0) return p;
    c10::Device device = p.device();
    gs_deleter del = p.get_deleter();
    void* ctx = p.release_context();
    ++allocs_seen;
    if (gs_rust_on_alloc(r->owner, data, n, static_cast<int>(device.type()), -1, op_name, ctx,
                         del) == 0) {
      return c10::DataPtr(data, ctx, del, device);
    }
    return c10::DataPtr(data, data, &tracked_delete, device);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return inner_raw_deleter == nullptr ? nullptr : &raw_delete;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner->copy_data(dest, src, count);
  }
  c10::Allocator* inner;
};

void note_outputs(const at::RecordFunction& fn) {
  for (const c10::IValue& v : fn.outputs()) {
    std::vector<at::Tensor> tensors;
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) tensors.push_back(t);
    }
    for (const at::Tensor& t : tensors) {
      if (!t.defined() || !t.has_storage()) continue;
      auto sizes = t.sizes();
      gs_rust_note_tensor(t.storage().data_ptr().get(), static_cast<int>(t.device().type()),
                          device_index(t.device()), sizes.data(), sizes.size(),
                          c10::toString(t.scalar_type()));
    }
  }
}

std::unique_ptr<at::ObserverContext> on_op_start(const at::RecordFunction& fn) {
  if (op_depth++ == 0) {
    op_name = fn.name();
    allocs_at_op_start = allocs_seen;
  }
  return nullptr;
}

void on_op_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (--op_depth != 0) return;
  if (allocs_seen != allocs_at_op_start) note_outputs(fn);
  op_name = nullptr;
}

}  // namespace

extern "C" {

const char* gs_last_error(void) { return last_error.c_str(); }

int gs_install_cpu_allocator(void) {
  return protect([] {
    static std::once_flag once;
    std::call_once(once, [] {
      static TrackingAllocator tracking(c10::GetCPUAllocator());
      inner_raw_deleter = tracking.inner->raw_deleter();
      c10::SetCPUAllocator(&tracking, UINT8_MAX);
    });
  });
}

// `operators`: also install the operator callback (names and shapes of allocations); its
// handle (0 for none) goes to `callback`. The thread's reporter is made once and reused.
int gs_thread_begin(uint64_t owner, int operators, uint64_t* callback) {
  return protect([&] {
    thread_local std::shared_ptr<Reporter> reporter = std::make_shared<Reporter>(owner);
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter);
    *callback = 0;
    if (operators != 0) {
      auto cb = at::RecordFunctionCallback(&on_op_start, &on_op_end)
                    .needsOutputs(true)
                    .scopes({at::RecordScope::FUNCTION});
      *callback = at::addThreadLocalCallback(cb);
    }
  });
}

int gs_thread_end(uint64_t callback) {
  return protect([&] {
    if (callback != 0) at::removeCallback(callback);
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    op_depth = 0;
    op_name = nullptr;
  });
}

int gs_tensor_info(const void* tensor, void** storage, size_t* nbytes, int* dev_type,
                   int* dev_index, int* flags) {
  return protect([&] {
    const auto& t = *static_cast<const at::Tensor*>(tensor);
    *storage = nullptr;
    *nbytes = 0;
    *flags = 0;
    if (!t.defined()) return;
    *dev_type = static_cast<int>(t.device().type());
    *dev_index = device_index(t.device());
    if (t.has_storage()) {
      *storage = t.storage().data_ptr().get();
      *nbytes = t.storage().nbytes();
    }
    if (t.requires_grad()) *flags |= 1;
    if (t.grad_fn() != nullptr) *flags |= 2;
  });
}

int gs_accelerator(int* dev_type, int* count) {
  return protect([&] {
    auto acc = at::accelerator::getAccelerator(false);
    *dev_type = acc ? static_cast<int>(*acc) : -1;
    *count = acc ? static_cast<int>(at::accelerator::deviceCount()) : 0;
  });
}

int gs_set_grad_enabled(int enabled) {
  bool previous = c10::GradMode::is_enabled();
  c10::GradMode::set_enabled(enabled != 0);
  return previous ? 1 : 0;
}

int gs_empty_cache(void) { return protect([] { at::accelerator::emptyCache(); }); }

int gs_device_stats(int dev_index, int64_t* allocated, int64_t* reserved, int64_t* peak) {
  return protect([&] {
    auto stats = at::accelerator::getDeviceStats(static_cast<c10::DeviceIndex>(dev_index));
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *allocated = stats.allocated_bytes[all].current;
    *reserved = stats.reserved_bytes[all].current;
    *peak = stats.allocated_bytes[all].peak;
  });
}

int gs_reset_peak(int dev_index) {
  return protect(
      [&] { at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(dev_index)); });
}

int gs_synchronize(int dev_index) {
  return protect(
      [&] { at::accelerator::synchronizeDevice(static_cast<c10::DeviceIndex>(dev_index)); });
}

}  // extern "C"

#include "backend.h"
extern "C" const char* gs_backend_name(void) {
  const gpu_scope::Backend* b = gpu_scope::backend();
  return b == nullptr ? "" : b->name;
}
