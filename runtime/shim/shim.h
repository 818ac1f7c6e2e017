// The C ABI between the Rust runtime and libtorch. Every function here is noexcept and
// returns 0 on success or -1 with a message readable through gs_last_error().
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*gs_deleter)(void*);

// Implemented in Rust (runtime/src/hooks.rs).
int gs_rust_on_alloc(uint64_t owner, void* ptr, size_t nbytes, int dev_type, int dev_index,
                     const char* op, void* orig_ctx, gs_deleter orig_deleter);
void* gs_rust_on_cpu_free(void* ptr, gs_deleter* orig_deleter);
void gs_rust_on_free(void* ptr, int dev_type, int dev_index);
void gs_rust_note_tensor(void* ptr, int dev_type, int dev_index, const int64_t* dims,
                         size_t ndim, const char* dtype);

// Implemented in C++ (shim.cpp).
const char* gs_last_error(void);
int gs_install_cpu_allocator(void);
int gs_thread_begin(uint64_t owner, int operators, uint64_t* callback);
int gs_thread_end(uint64_t callback);
// Sets autograd on or off for this thread; returns whether it was on. Cannot fail.
int gs_set_grad_enabled(int enabled);
int gs_tensor_info(const void* tensor, void** storage, size_t* nbytes, int* dev_type,
                   int* dev_index, int* flags);
int gs_accelerator(int* dev_type, int* count);
int gs_empty_cache(void);
int gs_device_stats(int dev_index, int64_t* allocated, int64_t* reserved, int64_t* peak);
int gs_reset_peak(int dev_index);
int gs_synchronize(int dev_index);

#ifdef __cplusplus
}
#endif
