// The fake device's memory: a c10::DeviceAllocator that mirrors libtorch 2.11's native CUDA
// caching allocator (c10/cuda/CUDACachingAllocator.cpp, default settings) on host memory.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace gpu_scope::fake_cuda {

class DeviceCache;  // one device's pools, statistics and trackers (allocator.cpp)

class FakeCachingAllocator final : public c10::DeviceAllocator {
 public:
  FakeCachingAllocator();
  ~FakeCachingAllocator() override;

  // c10::Allocator
  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // CUDA's lazy init: creates every device's cache (CUDAHooks::init calls this, as the real
  // one calls CUDACachingAllocator::init; so does the first allocation).
  void init();
  // Attaches to every device, like CUDAAllocator::attachAllocatorTraceTracker; false (nothing
  // attached) before init, when the real allocator has no device to attach to.
  bool attach_tracker(c10::CachingDeviceAllocator::AllocatorTraceTracker tracker);
  // The device of a live allocation, if this allocator made it.
  std::optional<c10::DeviceIndex> device_of(const void* ptr);
  // Whether `index` has a context: the real driver makes one at a device's first use (its
  // first allocation here), and never on a device the process did not touch.
  bool has_context(c10::DeviceIndex index) const;

  // The DataPtr deleter: frees on whichever thread drops the last reference.
  static void raw_delete(void* ptr);

 private:
  DeviceCache* device(c10::DeviceIndex index);  // throws like the real one when invalid

  std::once_flag init_once_;
  std::atomic<bool> initialized_{false};
  std::vector<std::unique_ptr<DeviceCache>> devices_;  // filled once, by init()
  std::array<std::atomic<bool>, 128> context_{};       // per device index (an int8_t)
};

// The process's allocator. Never destroyed: tensors may be freed by static destructors.
FakeCachingAllocator& allocator();

}  // namespace gpu_scope::fake_cuda
