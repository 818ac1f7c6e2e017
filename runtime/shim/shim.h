// The C ABI between the Rust runtime and libtorch.
//
// C++ → Rust: the gs_rust_* callbacks, implemented in runtime/src/hooks.rs. They never unwind:
// each returns 0, or -1 when it failed (the Rust side records why), and the shim then treats
// the block as untracked.
//
// Rust → C++: the other functions, implemented in shim.cpp. All are noexcept: they return 0,
// or -1 with a message readable through gs_last_error (which may contain NUL bytes).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define GS_NOEXCEPT noexcept
#else
#define GS_NOEXCEPT
#endif

typedef void (*gs_deleter)(void*);

// What libtorch was doing when it allocated (the `flags` of gs_rust_on_alloc).
#define GS_MADE_GRAD_OFF 1
#define GS_MADE_IN_BACKWARD 2  // autograd's engine was running a backward pass

// A storage that a tensor owns (see gs_tensor_storages).
typedef struct {
  const void* ptr;
  int dev_type;
  int dev_index;
} gs_storage;

// What gs_tensor_storages says of the tensor itself.
#define GS_TENSOR_HAS_GRAPH 2

int gs_rust_on_alloc(const void* owner, void* ptr, size_t bytes, size_t requested, int dev_type,
                     int dev_index, const char* op, int flags, void* orig_ctx,
                     gs_deleter orig_deleter, int* tracked);
// `raw`: freed through the raw deleter, which every raw block takes, tracked or not.
int gs_rust_on_cpu_free(void* ptr, int raw, void** orig_ctx, gs_deleter* orig_deleter,
                        int* found);
int gs_rust_on_free(void* ptr, int dev_type, int dev_index);
int gs_rust_note_tensor(void* ptr, int dev_type, int dev_index, const int64_t* dims, size_t ndim,
                        const char* dtype);
// The reporter holding `owner` takes a reference to it, and gives it back when it dies.
void gs_rust_owner_retain(const void* owner);
void gs_rust_owner_release(const void* owner);

void gs_last_error(const char** message, size_t* len) GS_NOEXCEPT;
// Wraps the CPU allocator (once per process).
int gs_install(void) GS_NOEXCEPT;
// The thread's first scope opens: installs its reporter (unless a profiler holds the slot:
// then *stepped_aside = 1). `owner` identifies the thread's Rust state; the reporter keeps a
// reference.
int gs_thread_enter(const void* owner, int* stepped_aside) GS_NOEXCEPT;
// Attribution on this thread: installs the operator callback (its handle in *callback) that
// names the outermost operator of each allocation and the shape of the tensors it returned.
int gs_ops_begin(uint64_t* callback) GS_NOEXCEPT;
int gs_ops_end(uint64_t callback) GS_NOEXCEPT;
// Attaches gpu-scope's tracker to the backend's allocator if that is initialized; *attached
// says whether it is attached now.
int gs_attach_tracker(int* attached) GS_NOEXCEPT;
// The thread's last scope closes: removes what gs_thread_enter installed.
int gs_thread_leave(void) GS_NOEXCEPT;
// Waits up to max_ms for the copies of this thread's libtorch state that other threads took
// while its scopes were open (at::launch tasks, autograd's threads) to be let go of.
void gs_await_inherited(int max_ms) GS_NOEXCEPT;
int gs_set_grad_enabled(int enabled, int* previous) GS_NOEXCEPT;
// Whether autograd is on for this thread.
int gs_grad_enabled(void) GS_NOEXCEPT;
// Whether autograd's engine runs a backward pass on this thread.
int gs_in_backward(void) GS_NOEXCEPT;
// How many autograd graph nodes this thread has made: unchanged over a span of code, it made
// no graph that could hold tensors.
uint64_t gs_graph_nodes(void) GS_NOEXCEPT;
// The thread's id as autograd's nodes record it (at::RecordFunction::currentThreadId).
uint64_t gs_thread_id(void) GS_NOEXCEPT;
// The thread that made a tensor's grad_fn and its sequence number there (UINT64_MAX: none).
int gs_tensor_graph(const void* tensor, uint64_t* thread, uint64_t* node) GS_NOEXCEPT;
// The storages that tensors[0..count] own, whatever their layout (dense, sparse, MKLDNN), and
// their gradients'; at most `cap` in `out`, their number in *n; flags[i] for tensors[i].
int gs_tensor_storages(const void* const* tensors, size_t count, gs_storage* out, size_t cap,
                       size_t* n, int* flags) GS_NOEXCEPT;
// Weak references in *weak to what another tensor shares with this one: the tensor object (a
// shallow clone the caller kept), its storage at the call (a view, a detach()), or both; null
// when neither is shared. gs_tensor_weak_lock gives back the tensor while someone still holds
// it, and a byte tensor over the shared storage while that lives (new at::Tensors in *tensor
// and *storage_tensor, for tch to own; null where gone or not shared).
int gs_tensor_weak(const void* tensor, void** weak) GS_NOEXCEPT;
int gs_tensor_weak_lock(void* weak, void** tensor, void** storage_tensor) GS_NOEXCEPT;
void gs_tensor_weak_free(void* weak) GS_NOEXCEPT;
int gs_accelerator(int* dev_type, int* count) GS_NOEXCEPT;
int gs_accelerator_initialized(int* initialized) GS_NOEXCEPT;
int gs_empty_cache(void) GS_NOEXCEPT;
// The caching allocator's counters of a device (zeros before its first allocation). `releasable`
// is what emptyCache would give back: reserved memory in segments nothing uses at all.
int gs_device_stats(int dev_index, int64_t* allocated, int64_t* reserved, int64_t* peak,
                    int64_t* releasable) GS_NOEXCEPT;
// For tests: the same without the initialized check, to see libtorch's own error.
int gs_device_stats_unchecked(int dev_index, int64_t* allocated, int64_t* reserved,
                              int64_t* peak, int64_t* releasable) GS_NOEXCEPT;
int gs_reset_peak(int dev_index) GS_NOEXCEPT;
// The driver's free and total memory of accelerator device `dev_index`.
int gs_memory_info(int dev_index, uint64_t* free_bytes, uint64_t* total_bytes) GS_NOEXCEPT;
// Calls visit(ctx, ptr, dev_index, kind) for each library workspace alive now.
int gs_workspaces(void (*visit)(void* ctx, const void* ptr, int dev_index, const char* kind),
                  void* ctx) GS_NOEXCEPT;
int gs_clear_workspaces(void) GS_NOEXCEPT;
// Clears autocast's cast cache (one for the process) if autocast is on on this thread;
// *cleared says whether.
int gs_autocast_clear(int* cleared) GS_NOEXCEPT;
// Allocates one byte on an accelerator device the process already works on (the first that
// holds memory, else the first with a context) and says whether the allocator reported it to
// this thread's reporter (1 or 0); -1, and no probe, when the process works on none.
int gs_probe_reports(int* reported) GS_NOEXCEPT;
// "cuda", "fake-cuda", ... or "" when no device backend is linked.
const char* gs_backend_name(void) GS_NOEXCEPT;
// How many times gpu-scope called emptyCache.
uint64_t gs_empty_cache_calls(void) GS_NOEXCEPT;
// The running libtorch's build option `key` (e.g. "TORCH_VERSION", "CUDA_VERSION"): a string
// that lives as long as the process, or NULL where libtorch has none.
int gs_build_option(const char* key, const char** value) GS_NOEXCEPT;

#ifdef __cplusplus
}
#endif
