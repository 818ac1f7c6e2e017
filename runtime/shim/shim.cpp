// The part of gpu-scope that only C++ can do: wrap the CPU allocator, install the per-thread
// memory reporter and operator callbacks, attach a tracker to the device backend, read a
// tensor's storages, and reach the accelerator's caching allocator. Policy and bookkeeping live
// in Rust (runtime/src).
#include "shim.h"

#include "backend.h"

#include <ATen/DeviceAccelerator.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/SequenceNumber.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <caffe2/core/common.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Exported by libtorch_cpu; declared in headers that need much more (ideep, autograd).
namespace at::native {
void* data_ptr_from_mkldnn(const at::Tensor& mkldnn_tensor);
}  // namespace at::native
namespace torch::autograd {
int get_current_graph_task_id();  // -1 outside autograd's backward pass
}  // namespace torch::autograd

namespace {

thread_local std::string last_error;

template <typename F>
int protect(F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    // msg(), not what(): the message may hold NUL bytes (a device index printed as a char).
    last_error = e.msg();
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return -1;
}

// --- What the current thread is doing -----------------------------------------------------

// The owner of the thread's open scopes (set while any is open on this thread).
thread_local const void* thread_owner = nullptr;
// The outermost operator running on this thread, and how many allocations it made.
thread_local int op_depth = 0;
thread_local const char* op_name = nullptr;
thread_local uint64_t allocs_seen = 0;
thread_local uint64_t allocs_at_op_start = 0;
// The requested size of the block the backend's tracker announced last on this thread; the
// caching allocator reports the same block right after, with its block size.
thread_local uintptr_t pending_ptr = 0;
thread_local size_t pending_requested = 0;
// The debug-info node that holds the thread's reporter over an otherwise empty debug-info
// stack: later outermost scopes reinstall it as it is (what a push would build again) instead
// of allocating a node per scope.
thread_local std::shared_ptr<c10::ThreadLocalDebugInfo> reporter_node;
// The node that holds the thread's reporter while its scopes are open. Other threads that copy
// the thread's libtorch state hold it too (at::launch tasks such as TorchScript's fork, and
// autograd's threads), until their task object is destroyed.
struct Installed {
  std::weak_ptr<c10::ThreadLocalDebugInfo> node;
  // The thread's debug-info chain holds it (it is installed).
  bool on = false;
  // Copies held past a wait that gave up on them (the node could not be replaced then).
  long stale = 0;
};
thread_local Installed installed;

// Whether `node` is reporter_node.
bool is_reporter_node(const std::weak_ptr<c10::ThreadLocalDebugInfo>& node) {
  return reporter_node != nullptr && !node.owner_before(reporter_node) &&
         !reporter_node.owner_before(node);
}

// The references to the node that are this thread's own: its chain's, and reporter_node's.
long own_refs(const Installed& i) { return (i.on ? 1 : 0) + (is_reporter_node(i.node) ? 1 : 0); }

// After a wait that gave up: the node, still on top of the thread's chain, is replaced by a
// fresh one holding the same reporter, so that later scopes wait only for copies of the new
// one. Where something sits above it, the copies left are remembered instead.
void replace_node(Installed& i, long extra) {
  using Info = c10::ThreadLocalDebugInfo;
  auto node = i.node.lock();
  if (!i.on || node == nullptr || Info::current() != node) {
    i.stale = extra;
    return;
  }
  const bool kept = node == reporter_node;
  Info::_push(c10::DebugInfoKind::PROFILER_STATE, Info::_pop(c10::DebugInfoKind::PROFILER_STATE));
  i.node = Info::current();
  if (kept) reporter_node = Info::current();
  i.stale = 0;
}
// gs_probe_reports is allocating: reports go to it, not to Rust.
thread_local bool probing = false;
thread_local bool probe_seen = false;

std::atomic<bool> tracker_attached{false};
// The allocator refused the tracker (cudaMallocAsync's does): it is not asked again.
std::atomic<bool> tracker_refused{false};
// The process is ending: threads still running call nothing of libtorch's accelerator (its
// hooks, allocators and caches), whose static objects the exit destroys. `exit` runs its
// handlers and those destructors together, in the reverse order of their registration, and
// libtorch makes some of those objects lazily, on first use: `begin_exit` is registered at
// start and again after the first call of each entry that reaches the accelerator
// (`accelerator_call`), so that it runs before whatever those calls had libtorch make. It waits
// a little for calls already under way.
std::atomic<bool> exiting{false};
std::atomic<int> accelerator_calls{0};

void begin_exit() {
  exiting.store(true);
  // Bounded: a call waiting on something the exiting thread holds must not hang the exit.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (accelerator_calls.load() != 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// `protect(f)` for an `f` that calls into libtorch's accelerator: skipped once the exit has
// begun (the caller's outputs keep their defaults), counted while under way, and followed by
// a registration of `begin_exit` after its first call (each call site's lambda is a type of its
// own, with its own `first`).
template <typename F>
int accelerator_call(F&& f) noexcept {
  static std::once_flag first;
  return protect([&] {
    accelerator_calls.fetch_add(1);
    struct Done {
      ~Done() { accelerator_calls.fetch_sub(1); }
    } done;
    if (exiting.load()) return;
    f();
    std::call_once(first, [] { std::atexit(begin_exit); });
  });
}
bool try_attach_tracker() noexcept;
bool accelerator_initialized();
std::atomic<uint64_t> empty_cache_calls{0};

int made_flags() {
  return (c10::GradMode::is_enabled() ? 0 : GS_MADE_GRAD_OFF) |
         (torch::autograd::get_current_graph_task_id() != -1 ? GS_MADE_IN_BACKWARD : 0);
}

int device_index(c10::Device d) { return d.has_index() ? d.index() : -1; }

// --- The reporter -------------------------------------------------------------------------

// Receives the accelerator caching allocator's reports on a thread inside a scope (and on the
// threads that inherit its debug info with libtorch's thread-local state: autograd's,
// at::launch's; parallel_for's workers carry none). libtorch's profiler code
// static_casts whatever sits in the PROFILER_STATE slot to ProfilerStateBase, so the reporter is
// one, with a disabled configuration: code asking whether a profiler runs is told no, and a
// profiler asked to start while the reporter holds the slot refuses cleanly ("already enabled")
// instead of misreading it. Memory profiling is off, so the CPU allocator's own reporter stays
// idle (no size table, no "unknown size" warnings).
struct Reporter final : torch::profiler::impl::ProfilerStateBase {
  explicit Reporter(const void* owner)
      : ProfilerStateBase(torch::profiler::impl::ProfilerConfig(
            torch::profiler::impl::ProfilerState::Disabled)),
        owner(owner) {
    gs_rust_owner_retain(owner);
  }
  ~Reporter() override { gs_rust_owner_release(owner); }
  void reportMemoryUsage(void* ptr, int64_t size, size_t, size_t, c10::Device d) override;
  torch::profiler::impl::ActiveProfilerType profilerType() override {
    return torch::profiler::impl::ActiveProfilerType::NONE;
  }
  const void* owner;
};

// Every Reporter shares this vtable pointer: comparing it is how a slot's content is recognised
// without a dynamic_cast on each CPU allocation.
const void* reporter_vtable() {
  static const void* vtable = [] {
    Reporter probe(nullptr);
    const void* v = *reinterpret_cast<const void* const*>(&probe);
    probe.owner = nullptr;
    return v;
  }();
  return vtable;
}

c10::DebugInfoBase* slot() {
  return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
}

Reporter* as_reporter(c10::DebugInfoBase* info) {
  if (info == nullptr || *reinterpret_cast<const void* const*>(info) != reporter_vtable()) {
    return nullptr;
  }
  return static_cast<Reporter*>(info);
}

// Whose scope an allocation on this thread belongs to: the thread's own, or that of the thread
// whose reporter it inherited (autograd's and at::launch's threads).
const void* current_owner() {
  if (thread_owner != nullptr) return thread_owner;
  Reporter* r = as_reporter(slot());
  return r == nullptr ? nullptr : r->owner;
}

void Reporter::reportMemoryUsage(void* ptr, int64_t size, size_t, size_t, c10::Device d) {
  if (d.is_cpu() || ptr == nullptr || owner == nullptr) return;  // CPU: TrackingAllocator
  if (probing) {
    probe_seen = true;
    return;
  }
  if (size > 0) {
    // The allocator is initialized now (it just allocated): the tracker can attach. This runs
    // under the allocator's (recursive) device lock; try_attach_tracker never waits for a lock
    // another allocating thread could hold.
    if (!tracker_attached.load(std::memory_order_relaxed)) try_attach_tracker();
    size_t requested = 0;
    if (pending_ptr == reinterpret_cast<uintptr_t>(ptr)) requested = pending_requested;
    pending_ptr = 0;
    ++allocs_seen;
    int tracked = 0;
    gs_rust_on_alloc(owner, ptr, static_cast<size_t>(size), requested,
                     static_cast<int>(d.type()), device_index(d), op_name, made_flags(),
                     nullptr, nullptr, &tracked);
  } else if (size < 0 && !tracker_attached.load(std::memory_order_relaxed)) {
    // With the tracker attached, it reports every free, on every thread.
    gs_rust_on_free(ptr, static_cast<int>(d.type()), device_index(d));
  }
}

// Sees every allocation and free of the backend's caching allocator, on every thread.
void on_trace(const c10::CachingDeviceAllocator::TraceEntry& entry) {
  using Action = c10::CachingDeviceAllocator::TraceEntry::Action;
  if (entry.action_ == Action::ALLOC) {
    pending_ptr = entry.addr_;
    pending_requested = entry.size_;
  } else if (entry.action_ == Action::FREE_REQUESTED && !probing) {
    // Both backends (the real one and the fake) are CUDA.
    gs_rust_on_free(reinterpret_cast<void*>(entry.addr_),
                    static_cast<int>(c10::DeviceType::CUDA), entry.device_);
  }
}

// --- The CPU allocator wrapper ------------------------------------------------------------

void tracked_delete(void* data) {
  void* ctx = nullptr;
  gs_deleter del = nullptr;
  int found = 0;
  // A block whose original deleter cannot be found is leaked rather than freed wrongly.
  if (gs_rust_on_cpu_free(data, 0, &ctx, &del, &found) == 0 && found != 0 && del != nullptr) {
    del(ctx);
  }
}

c10::DeleterFnPtr inner_raw_deleter = nullptr;

// raw_allocate hands out blocks whose context is their address; they come back here, tracked
// or not (oneDNN's scratch buffers take this path).
void raw_delete(void* data) {
  void* ctx = nullptr;
  gs_deleter del = nullptr;
  int found = 0;
  if (gs_rust_on_cpu_free(data, 1, &ctx, &del, &found) == 0 && found != 0) {
    if (del != nullptr) del(ctx);
  } else if (inner_raw_deleter != nullptr) {
    inner_raw_deleter(data);
  }
}

// Wraps libtorch's CPU allocator. Outside scopes it adds two thread-local reads; inside, it
// hands the original deleter to Rust and keeps context == data, as the default allocator does.
struct TrackingAllocator final : c10::Allocator {
  explicit TrackingAllocator(c10::Allocator* inner) : inner(inner) {}
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr p = inner->allocate(n);
    const void* owner = current_owner();
    void* data = p.get();
    if (owner == nullptr || data == nullptr || n == 0) return p;
    c10::Device device = p.device();
    gs_deleter del = p.get_deleter();
    void* ctx = p.release_context();
    ++allocs_seen;
    int tracked = 0;
    if (gs_rust_on_alloc(owner, data, n, n, static_cast<int>(device.type()), -1, op_name,
                         made_flags(), ctx, del, &tracked) == 0 &&
        tracked != 0) {
      return c10::DataPtr(data, data, &tracked_delete, device);
    }
    return c10::DataPtr(data, ctx, del, device);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return inner_raw_deleter == nullptr ? nullptr : &raw_delete;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner->copy_data(dest, src, count);
  }
  c10::Allocator* inner;
};

// --- Operator callbacks -------------------------------------------------------------------

void note_outputs(const at::RecordFunction& fn) {
  for (const c10::IValue& v : fn.outputs()) {
    std::vector<at::Tensor> tensors;
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) tensors.push_back(t);
    }
    for (const at::Tensor& t : tensors) {
      // A nested tensor has no single shape (its `sizes()` throws).
      if (!t.defined() || !t.has_storage() || t.is_nested()) continue;
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

// Never throws: it runs inside allocations (from the reporter) and at scope entry, and an
// allocator that refuses trackers is no error (its scopes are reported "not tracked").
bool try_attach_tracker() noexcept {
  if (tracker_attached.load()) return true;
  if (tracker_refused.load(std::memory_order_relaxed)) return false;
  const gpu_scope::Backend* b = gpu_scope::backend();
  if (b == nullptr || b->attach_tracker == nullptr) return false;
  try {
    // Cheap and lock-free: nothing to attach to before the allocator's lazy init.
    if (!accelerator_initialized()) return false;
    static std::mutex once;
    std::unique_lock<std::mutex> lock(once, std::try_to_lock);
    if (!lock.owns_lock()) return false;  // another thread is attaching: it will be attached
    if (!tracker_attached.load() && b->attach_tracker(&on_trace)) tracker_attached.store(true);
  } catch (const c10::Error&) {
    tracker_refused.store(true);  // libtorch's "does not yet support" (a TORCH_CHECK)
  } catch (...) {
    return false;  // anything else (std::bad_alloc): tried again later
  }
  return tracker_attached.load();
}

// The storages a tensor owns, written to out[0..cap) and counted in *n (which may exceed cap).
struct Storages {
  gs_storage* out;
  size_t cap;
  size_t n = 0;
  void add(const void* ptr, c10::Device d) {
    if (n < cap) out[n] = {ptr, static_cast<int>(d.type()), device_index(d)};
    ++n;
  }
};

void add_storage(const at::Tensor& t, Storages& out) {
  if (!t.defined()) return;
  switch (t.layout()) {
    case at::kSparse:
      add_storage(t._indices(), out);
      add_storage(t._values(), out);
      return;
    case at::kSparseCsr:
    case at::kSparseBsr:
      add_storage(t.crow_indices(), out);
      add_storage(t.col_indices(), out);
      add_storage(t.values(), out);
      return;
    case at::kSparseCsc:
    case at::kSparseBsc:
      add_storage(t.ccol_indices(), out);
      add_storage(t.row_indices(), out);
      add_storage(t.values(), out);
      return;
    case at::kMkldnn:
      out.add(at::native::data_ptr_from_mkldnn(t), c10::Device(c10::kCPU));
      return;
    default:
      if (t.is_nested()) {
        // Its buffer, and the tensors that say where each component lies in it.
        const at::native::NestedTensorImpl* nt = at::native::get_nested_tensor_impl(t);
        add_storage(nt->get_nested_sizes(), out);
        add_storage(nt->get_nested_strides(), out);
        add_storage(nt->get_storage_offsets(), out);
      }
      if (t.has_storage() && t.storage().data_ptr().get() != nullptr) {
        out.add(t.storage().data_ptr().get(), t.device());
      }
  }
}

// What a tensor keeps alive beside its own storages.
void add_held(const at::Tensor& t, Storages& out) {
  // A view keeps its base alive: a sparse tensor's `values()` keeps its indices, a view of a
  // nested tensor its sizes, strides and offsets, and a strided view its base's storage, which
  // the base may have been given since (`set_data`, `set_`, `VarStore::half`).
  if (t.is_view()) {
    const at::TensorBase& base = t._base();
    if (base.layout() != at::kStrided || base.is_nested() ||
        (base.has_storage() &&
         (!t.has_storage() || !base.storage().is_alias_of(t.storage())))) {
      add_storage(at::Tensor(base), out);
    }
  }
  // A per-channel quantized tensor's quantizer holds its scales and zero points.
  if (t.is_quantized() && (t.qscheme() == at::kPerChannelAffine ||
                           t.qscheme() == at::kPerChannelAffineFloatQParams)) {
    add_storage(t.q_per_channel_scales(), out);
    add_storage(t.q_per_channel_zero_points(), out);
  }
}

// Whether `t` has a graph, and a leaf's .grad (only a leaf's: on other tensors libtorch warns
// on stderr). libtorch refuses to read the graph of some views whose base was changed in place
// since (made with autograd off, or by an operator with several outputs): such a view is no
// leaf, its storage is already added, and the graph its base has (which it keeps) stands for
// its own.
void add_autograd(const at::Tensor& t, Storages& out, int& flags) {
  try {
    if (t.grad_fn() != nullptr) flags |= GS_TENSOR_HAS_GRAPH;
    if (t.requires_grad() && t.is_leaf()) add_storage(t.grad(), out);
  } catch (const c10::Error&) {
    if (t.is_view() && t._base().grad_fn() != nullptr) flags |= GS_TENSOR_HAS_GRAPH;
  }
}

const c10::TensorImpl* impl_of(const void* tensor) {
  return static_cast<const at::Tensor*>(tensor)->unsafeGetTensorImpl();
}

// Which accelerator the process has, and its allocator, are settled once libtorch and its
// backends are loaded (before any call here); asking libtorch each time (a walk over the
// backends' hooks, and a dynamic_cast for the allocator) cost twice per outermost scope.
std::optional<c10::DeviceType> accelerator() {
  static const std::optional<c10::DeviceType> acc = at::accelerator::getAccelerator(false);
  return acc;
}

c10::DeviceType accelerator_type() {
  auto acc = accelerator();
  TORCH_CHECK(acc.has_value(), "this process has no accelerator");
  return *acc;
}

bool accelerator_initialized() {
  // Not counted as a call under way (every outermost scope asks, from every thread): a read of
  // one flag of the allocator, which a CUDA libtorch makes when loaded, before this library.
  if (exiting.load(std::memory_order_relaxed)) return false;
  static c10::DeviceAllocator* const allocator = [] {
    auto acc = accelerator();
    auto* found = acc.has_value() ? c10::getDeviceAllocator(*acc) : nullptr;
    // After what finding the accelerator made libtorch make.
    std::atexit(begin_exit);
    return found;
  }();
  return allocator != nullptr && allocator->initialized();
}

}  // namespace

extern "C" {

void gs_last_error(const char** message, size_t* len) noexcept {
  *message = last_error.data();
  *len = last_error.size();
}

int gs_install(void) noexcept {
  return protect([] {
    static std::once_flag once;
    std::call_once(once, [] {
      // Never destroyed: threads still running while the process ends allocate through it.
      auto* tracking = new TrackingAllocator(c10::GetCPUAllocator());
      inner_raw_deleter = tracking->inner->raw_deleter();
      c10::SetCPUAllocator(tracking, UINT8_MAX);
      reporter_vtable();
      // Registered after libtorch's libraries made the static objects they make when loaded
      // (their allocators among them): runs before those are destroyed.
      std::atexit(begin_exit);
    });
  });
}

}  // extern "C"

namespace {
// The CPU allocator is wrapped when the program starts, before any tensor exists: a storage
// keeps the allocator it was made with, so a tensor made before the first scope and grown
// inside one (`resize_`, an `out=` operator) would otherwise allocate past the wrapper, unseen.
// libc10, which this program links, registered its allocator before this runs; a failure here
// is reported by the first scope's own call.
[[maybe_unused]] const int installed_at_start = gs_install();

// A thread that ends with a scope still open (a guard given to mem::forget, or kept in a
// thread-local) removes what gs_thread_enter installed as its thread-locals are destroyed, in
// the reverse order of their making: one of these is made (in gs_thread_enter) after those it
// reads (libtorch's debug info, this file's thread-locals, which are made together), so it goes
// before them, and before the destructors of thread-locals made earlier run. Those may
// allocate: they must find neither this thread's owner (freed with gpu-scope's thread state)
// nor a node freed with libtorch's debug info. (A profiler started inside the scope and still
// running sits above the reporter and stays: libtorch's own hazard then.)
struct LeaveAtThreadEnd {
  ~LeaveAtThreadEnd();
};

}  // namespace

extern "C" {

int gs_thread_enter(const void* owner, int* stepped_aside) noexcept {
  return protect([&] {
    thread_local std::shared_ptr<Reporter> reporter = std::make_shared<Reporter>(owner);
    *stepped_aside = 0;
    // libtorch's debug info, then this file's thread-locals, then the leave that reads them:
    // destroyed in the reverse order.
    c10::DebugInfoBase* top = slot();
    (void)installed;
    thread_local LeaveAtThreadEnd leave_at_thread_end;
    if (top == nullptr) {
      using Info = c10::ThreadLocalDebugInfo;
      bool bare = Info::current() == nullptr;
      if (bare && reporter_node != nullptr) {
        Info::_forceCurrentDebugInfo(reporter_node);
        Installed& i = installed;
        if (!is_reporter_node(i.node)) {
          i.node = reporter_node;
          i.stale = 0;
        }
        i.on = true;
      } else {
        Info::_push(c10::DebugInfoKind::PROFILER_STATE, reporter);
        if (bare) reporter_node = Info::current();
        installed = Installed{Info::current(), true, 0};
      }
    } else if (top != reporter.get()) {
      // A profiler (or another reporter) holds the slot: never push over it.
      *stepped_aside = 1;
    }
    thread_owner = owner;
    try_attach_tracker();
  });
}

int gs_ops_begin(uint64_t* callback) noexcept {
  return protect([&] {
    auto ops = at::RecordFunctionCallback(&on_op_start, &on_op_end)
                   .needsOutputs(true)
                   .scopes({at::RecordScope::FUNCTION});
    *callback = at::addThreadLocalCallback(ops);
  });
}

int gs_ops_end(uint64_t callback) noexcept {
  return protect([&] {
    at::removeCallback(callback);
    op_depth = 0;
    op_name = nullptr;
  });
}

int gs_attach_tracker(int* attached) noexcept {
  return protect([&] { *attached = try_attach_tracker() ? 1 : 0; });
}

int gs_thread_leave(void) noexcept {
  return protect([&] {
    // First: allocations after a failed pop below must not be charged to the ended scope.
    thread_owner = nullptr;
    // Pop only our own reporter: a profiler started inside the scope may sit on top of it,
    // and then it stays below until a later scope finds it on top.
    if (as_reporter(slot()) != nullptr) {
      using Info = c10::ThreadLocalDebugInfo;
      if (reporter_node != nullptr && Info::current() == reporter_node) {
        Info::_forceCurrentDebugInfo(nullptr);
      } else {
        Info::_pop(c10::DebugInfoKind::PROFILER_STATE);
      }
      installed.on = false;
    }
    try_attach_tracker();
  });
}

}  // extern "C"

// Also the thread's owner, its scope ended with gpu-scope's thread state (after this).
LeaveAtThreadEnd::~LeaveAtThreadEnd() {
  if (thread_owner != nullptr) gs_thread_leave();
}

extern "C" {

void gs_await_inherited(int max_ms) noexcept {
  Installed& i = installed;
  long extra = i.node.use_count() - own_refs(i);
  if (extra <= i.stale) {
    if (extra < i.stale) i.stale = std::max(extra, 0L);
    return;
  }
  // A task lets go of its copy when its function object is destroyed, after it handed its
  // result over (TorchScript's `wait` returns before the task's own reference to the result
  // is dropped): what it frees then is the scope's, and must be seen before the check.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_ms);
  for (int round = 0; (extra = i.node.use_count() - own_refs(i)) > i.stale; ++round) {
    if (std::chrono::steady_clock::now() >= until) {
      // Held for longer (a task still running): not waited for again.
      protect([&] { replace_node(i, extra); });
      break;
    }
    if (round < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  std::atomic_thread_fence(std::memory_order_acquire);
}

int gs_set_grad_enabled(int enabled, int* previous) noexcept {
  return protect([&] {
    const bool was = c10::GradMode::is_enabled();
    *previous = was ? 1 : 0;
    // A nested scope finds autograd off already: no second thread-local write.
    if (was != (enabled != 0)) c10::GradMode::set_enabled(enabled != 0);
  });
}

int gs_grad_enabled(void) noexcept { return c10::GradMode::is_enabled() ? 1 : 0; }

int gs_in_backward(void) noexcept { return torch::autograd::get_current_graph_task_id() != -1; }

uint64_t gs_graph_nodes(void) noexcept { return at::sequence_number::peek(); }

uint64_t gs_thread_id(void) noexcept { return at::RecordFunction::currentThreadId(); }

int gs_tensor_graph(const void* tensor, uint64_t* thread, uint64_t* node) noexcept {
  return protect([&] {
    const auto& fn = static_cast<const at::Tensor*>(tensor)->grad_fn();
    *thread = fn ? fn->thread_id() : 0;
    *node = fn ? fn->sequence_nr() : UINT64_MAX;
  });
}

int gs_tensor_storages(const void* const* tensors, size_t count, gs_storage* out, size_t cap,
                       size_t* n, int* flags) noexcept {
  return protect([&] {
    Storages found{out, cap};
    for (size_t i = 0; i < count; ++i) {
      // A long run of kept tensors would wait on each load in turn: each step of the chain
      // that the next tensors need (the at::Tensor, its TensorImpl, its StorageImpl) starts
      // loading a few tensors ahead, once the step before it has had time to arrive. (Written
      // here, not in a function: GCC drops a call to one that only prefetches.)
      if (i + 32 < count) __builtin_prefetch(tensors[i + 32]);
      // The lines of the fields read below (offsets in libtorch 2.13: the vtable, storage and
      // autograd pointers; the layout and key set bits; the storage's data pointer and flags).
      // Another layout costs only the misses.
      if (i + 16 < count) {
        const auto* impl = reinterpret_cast<const char*>(impl_of(tensors[i + 16]));
        for (int at : {0, 0x20, 0xa0, 0xaa}) __builtin_prefetch(impl + at);
      }
      if (i + 8 < count) {
        // Null without storage: a prefetch never faults.
        const auto* storage = reinterpret_cast<const char*>(
            impl_of(tensors[i + 8])->unsafe_storage().unsafeGetStorageImpl());
        for (int at : {0, 0x3d}) __builtin_prefetch(storage + at);
      }
      const auto& t = *static_cast<const at::Tensor*>(tensors[i]);
      flags[i] = 0;
      if (!t.defined()) continue;
      add_storage(t, found);
      add_held(t, found);
      add_autograd(t, found, flags[i]);
    }
    *n = found.n;
  });
}

// An owned tensor argument as the caller may still hold it: the tensor itself (a shallow
// clone), or only its storage (a view, a `detach()`), which a body may grow (`resize_`, `out=`).
struct WeakTensor {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> tensor;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
};

int gs_tensor_weak(const void* tensor, void** weak) noexcept {
  return protect([&] {
    const auto& t = *static_cast<const at::Tensor*>(tensor);
    *weak = nullptr;
    if (!t.defined()) return;
    // Each only where the caller shares it: the tensor object (a shallow clone), the storage
    // (a view, a detach()). A caller holding a view does not hold the argument's object,
    // which the body may give new storage and stash.
    const bool tensor_shared = t.use_count() > 1;
    const bool storage_shared = t.has_storage() && t.storage().use_count() > 1;
    if (tensor_shared || storage_shared) {
      *weak = new WeakTensor{
          tensor_shared ? c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(
                              t.getIntrusivePtr())
                        : c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(
                              c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()),
          storage_shared ? c10::weak_intrusive_ptr<c10::StorageImpl>(
                               t.storage().getWeakStorageImpl())
                         : c10::weak_intrusive_ptr<c10::StorageImpl>(
                               c10::intrusive_ptr<c10::StorageImpl>())};
    }
  });
}

int gs_tensor_weak_lock(void* weak, void** tensor, void** storage_tensor) noexcept {
  return protect([&] {
    auto* w = static_cast<WeakTensor*>(weak);
    *tensor = *storage_tensor = nullptr;
    if (auto impl = w->tensor.lock()) {
      *tensor = new at::Tensor(std::move(impl));
    }
    if (auto storage = w->storage.lock()) {
      // The storage the caller shares, whatever the argument holds now: a plain byte tensor
      // over it (no data of its own; not the argument's keys, which may say quantized or
      // nested, kinds of tensor object this is not).
      const auto device = storage->device();
      const auto key = c10::computeDispatchKey(at::kByte, at::kStrided, device);
      *storage_tensor = new at::Tensor(at::detail::make_tensor<c10::TensorImpl>(
          c10::Storage(std::move(storage)), c10::DispatchKeySet(key),
          caffe2::TypeMeta::Make<uint8_t>()));
    }
  });
}

void gs_tensor_weak_free(void* weak) noexcept { delete static_cast<WeakTensor*>(weak); }

int gs_accelerator(int* dev_type, int* count) noexcept {
  *dev_type = -1;
  *count = 0;
  return accelerator_call([&] {
    auto acc = accelerator();
    *dev_type = acc ? static_cast<int>(*acc) : -1;
    *count = acc ? static_cast<int>(at::accelerator::deviceCount()) : 0;
  });
}

int gs_accelerator_initialized(int* initialized) noexcept {
  return protect([&] { *initialized = accelerator_initialized() ? 1 : 0; });
}

int gs_empty_cache(void) noexcept {
  return accelerator_call([] {
    empty_cache_calls.fetch_add(1, std::memory_order_relaxed);
    at::accelerator::emptyCache();
  });
}

int gs_device_stats_unchecked(int dev_index, int64_t* allocated, int64_t* reserved,
                              int64_t* peak, int64_t* releasable) noexcept {
  *allocated = *reserved = *peak = *releasable = 0;
  return accelerator_call([&] {
    auto stats = at::accelerator::getDeviceStats(static_cast<c10::DeviceIndex>(dev_index));
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *allocated = stats.allocated_bytes[all].current;
    *reserved = stats.reserved_bytes[all].current;
    *peak = stats.allocated_bytes[all].peak;
    // Free bytes inside segments that are partly in use cannot be released.
    *releasable = stats.reserved_bytes[all].current - stats.active_bytes[all].current -
                  stats.inactive_split_bytes[all].current;
  });
}

int gs_device_stats(int dev_index, int64_t* allocated, int64_t* reserved, int64_t* peak,
                    int64_t* releasable) noexcept {
  *allocated = *reserved = *peak = *releasable = 0;
  // Before the device's lazy init libtorch throws "Invalid device argument": nothing has been
  // allocated yet, so the answer is zeros.
  int initialized = 0;
  if (gs_accelerator_initialized(&initialized) != 0) return -1;
  return initialized != 0
             ? gs_device_stats_unchecked(dev_index, allocated, reserved, peak, releasable)
             : 0;
}

int gs_reset_peak(int dev_index) noexcept {
  return accelerator_call([&] {
    if (accelerator_initialized()) {
      at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(dev_index));
    }
  });
}

int gs_memory_info(int dev_index, uint64_t* free_bytes, uint64_t* total_bytes) noexcept {
  *free_bytes = *total_bytes = 0;
  return accelerator_call([&] {
    auto [free, total] = at::accelerator::getMemoryInfo(static_cast<c10::DeviceIndex>(dev_index));
    *free_bytes = free;
    *total_bytes = total;
  });
}

int gs_workspaces(void (*visit)(void* ctx, const void* ptr, int dev_index, const char* kind),
                  void* ctx) noexcept {
  return accelerator_call([&] {
    const gpu_scope::Backend* b = gpu_scope::backend();
    if (b != nullptr && b->workspaces != nullptr) b->workspaces(visit, ctx);
  });
}

int gs_clear_workspaces(void) noexcept {
  return accelerator_call([] {
    const gpu_scope::Backend* b = gpu_scope::backend();
    if (b != nullptr && b->clear_workspaces != nullptr) b->clear_workspaces();
  });
}

int gs_autocast_clear(int* cleared) noexcept {
  *cleared = 0;
  return accelerator_call([&] {
    auto acc = accelerator();
    if (acc && at::autocast::is_autocast_enabled(*acc) &&
        at::autocast::is_autocast_cache_enabled()) {
      at::autocast::clear_cache();
      *cleared = 1;
    }
  });
}

// Whether a one-byte request on device `d` can be served without running its allocator out of
// memory: from a free block of its small pool, or from a new 2 MiB segment that fits. On a full
// device the caching allocator would first give back every cached segment (a synchronizing
// free) and count an out-of-memory that the program never had. An allocator without those
// pools (cudaMallocAsync's) has no such cache; one that cannot say what is free is probed.
static bool room_for_probe(c10::DeviceIndex d,
                           const c10::CachingDeviceAllocator::DeviceStats& stats) {
  using c10::CachingAllocator::StatType;
  const auto& small = stats.reserved_bytes[static_cast<size_t>(StatType::SMALL_POOL)];
  const auto& large = stats.reserved_bytes[static_cast<size_t>(StatType::LARGE_POOL)];
  if (small.current == 0 && large.current == 0) return true;
  if (small.current > stats.allocated_bytes[static_cast<size_t>(StatType::SMALL_POOL)].current)
    return true;
  try {
    return at::accelerator::getMemoryInfo(d).first >= (size_t{4} << 20);
  } catch (const c10::Error&) {
    return true;
  }
}

// A device the process already works on, with room for the probe: the first that holds
// memory, else the first with a context (an allocator that keeps no statistics); -1 when there
// is none, so that the probe creates no context and reserves nothing on a device the program
// never uses, and runs no device out of memory.
static int probe_device(c10::DeviceType type) {
  const auto count = static_cast<int>(at::accelerator::deviceCount());
  for (int i = 0; i < count; ++i) {
    const auto d = static_cast<c10::DeviceIndex>(i);
    try {
      const auto stats = at::accelerator::getDeviceStats(d);
      constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
      if (stats.reserved_bytes[all].current > 0 && room_for_probe(d, stats)) return i;
    } catch (const c10::Error&) {
    }
  }
  const auto& hooks = at::globalContext().getAcceleratorHooksInterface(type);
  for (int i = 0; i < count; ++i) {
    const auto d = static_cast<c10::DeviceIndex>(i);
    if (!hooks.hasPrimaryContext(d)) continue;
    try {
      if (!room_for_probe(d, at::accelerator::getDeviceStats(d))) continue;
    } catch (const c10::Error&) {
      // No statistics: nothing says it is full.
    }
    return i;
  }
  return -1;
}

int gs_probe_reports(int* reported) noexcept {
  *reported = -1;
  return accelerator_call([&] {
    c10::DeviceType type = accelerator_type();
    const int dev_index = probe_device(type);
    // None in use, or none with room: a later scope asks again.
    if (dev_index < 0) return;
    probing = true;
    probe_seen = false;
    try {
      c10::DeviceGuard guard(c10::Device(type, static_cast<c10::DeviceIndex>(dev_index)));
      c10::DataPtr block = c10::GetAllocator(type)->allocate(1);
    } catch (...) {
      probing = false;
      throw;
    }
    probing = false;
    *reported = probe_seen ? 1 : 0;
  });
}

const char* gs_backend_name(void) noexcept {
  const gpu_scope::Backend* b = gpu_scope::backend();
  return b == nullptr ? "" : b->name;
}

uint64_t gs_empty_cache_calls(void) noexcept { return empty_cache_calls.load(); }

int gs_build_option(const char* key, const char** value) noexcept {
  return protect([&] {
    *value = nullptr;
    // The running library's own record (torch.__config__.show()'s "Build settings"), not the
    // headers gpu-scope was compiled with. A static map: its strings live as long as libtorch.
    const auto& options = caffe2::GetBuildOptions();
    auto it = options.find(key);
    if (it != options.end() && !it->second.empty()) *value = it->second.c_str();
  });
}

}  // extern "C"
