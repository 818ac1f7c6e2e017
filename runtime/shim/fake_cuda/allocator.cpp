// The fake caching allocator. Its logic follows libtorch 2.11's
// c10/cuda/CUDACachingAllocator.cpp (DeviceCachingAllocator and NativeCachingAllocator) with the
// default settings: no max_split_size, no expandable segments, no garbage collection threshold,
// one stream per device, no CUDA graphs. Function names match the real ones so that the two can
// be compared side by side.
#include "allocator.h"

#include "fake_cuda.h"

#include <c10/core/Allocator.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>

namespace gpu_scope::fake_cuda {

using c10::CachingDeviceAllocator::AllocatorTraceTracker;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::TraceEntry;
using c10::CachingAllocator::StatType;
using c10::CachingAllocator::StatTypes;

namespace {

// The real allocator's constants (CUDACachingAllocator.h / AllocatorConfig.h).
constexpr size_t kMinBlockSize = 512;         // every block is a multiple of this
constexpr size_t kSmallSize = 1048576;        // largest request served by the small pool
constexpr size_t kSmallBuffer = 2097152;      // small pool segments
constexpr size_t kLargeBuffer = 20971520;     // large pool segments for requests < kMinLargeAlloc
constexpr size_t kMinLargeAlloc = 10485760;   // from here a segment is the request, rounded...
constexpr size_t kRoundLarge = 2097152;       // ...up to a multiple of this
// cudaMalloc returns 256-byte aligned memory; 512 keeps every block boundary aligned too.
constexpr size_t kAlignment = 512;
// The made-up capacity of each fake device (an 80 GiB card); also the limit of what it reserves.
constexpr size_t kTotalMemory = size_t{80} << 30;

constexpr size_t kAggregate = static_cast<size_t>(StatType::AGGREGATE);

struct BlockPool;

struct Block {
  c10::DeviceIndex device;
  size_t size;            // block size in bytes
  size_t requested_size;  // what the caller asked for
  BlockPool* pool;
  char* ptr;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Best fit: free blocks ordered by size, then address (the real BlockComparatorSize, which
// orders by stream first; the fake has one stream).
struct BlockComparatorSize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return std::less<const char*>()(a->ptr, b->ptr);
  }
};

struct BlockPool {
  explicit BlockPool(bool small) : is_small(small) {}
  std::set<Block*, BlockComparatorSize> blocks;
  const bool is_small;
};

size_t address(const void* ptr) { return reinterpret_cast<size_t>(ptr); }

size_t round_size(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t get_allocation_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

// The real format_size, for the out-of-memory message.
std::string format_size(uint64_t size) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (size <= 1024) {
    os << size << " bytes";
  } else if (size <= 1048576) {
    os << (static_cast<double>(size) / 1024.0) << " KiB";
  } else if (size <= 1073741824ULL) {
    os << static_cast<double>(size) / 1048576.0 << " MiB";
  } else {
    os << static_cast<double>(size) / 1073741824.0 << " GiB";
  }
  return os.str();
}

// Live allocations by address, for the deleter (the real NativeCachingAllocator's
// allocated_blocks). Leaked, like the allocator.
struct LiveBlocks {
  std::mutex mutex;
  std::unordered_map<void*, Block*> map;
};
LiveBlocks& live_blocks() {
  static auto* live = new LiveBlocks();
  return *live;
}

}  // namespace

// One device's share of the allocator: the real DeviceCachingAllocator, minus streams, events,
// graphs and history. Every public method takes the device mutex; trackers and profiler
// reports are called under it, on the calling thread, as in the real one.
class DeviceCache {
 public:
  explicit DeviceCache(c10::DeviceIndex index) : index_(index) {
    // The real one stores AcceleratorAllocatorConfig::max_split_size() (SIZE_MAX by default).
    stats_.max_split_size = static_cast<int64_t>(std::numeric_limits<size_t>::max());
  }

  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    trace_trackers_.push_back(std::move(tracker));
  }

  Block* malloc(size_t orig_size) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    size_t size = round_size(orig_size);
    BlockPool& pool = get_pool(size);
    const size_t alloc_size = get_allocation_size(size);
    const StatTypes stat_types = get_stat_types_for_pool(pool);

    Block* block = get_free_block(pool, size);
    if (block == nullptr) {
      // As in the real malloc: a new segment, else give every cached segment back and retry
      // once, else out of memory. (release_available_cached_blocks does nothing without
      // max_split_size, and there are no free-memory callbacks.)
      block = alloc_block(pool, alloc_size, stat_types, /*is_retry=*/false);
      if (block == nullptr) {
        release_cached_blocks();
        block = alloc_block(pool, alloc_size, stat_types, /*is_retry=*/true);
      }
      if (block == nullptr) out_of_memory(size, alloc_size);
    }
    const bool split_remainder = should_split(block, size);
    return alloc_found_block(block, size, orig_size, split_remainder, stat_types);
  }

  void free(Block* block) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    block->allocated = false;
    // free_block may merge the block with its neighbours: report what was handed out.
    char* orig_block_ptr = block->ptr;
    const size_t orig_block_size = block->size;

    const StatTypes stat_types = get_stat_types_for_pool(*block->pool);
    c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
      stats_.allocation[stat_type].decrease(1);
      stats_.allocated_bytes[stat_type].decrease(block->size);
    });
    // The real one reports the requested size here, not the block size.
    record_trace(TraceEntry::FREE_REQUESTED, address(block->ptr), block->requested_size);
    free_block(block);
    report(orig_block_ptr, -static_cast<int64_t>(orig_block_size));
  }

  void emptyCache() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    release_cached_blocks();
  }

  DeviceStats getStats() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return stats_;
  }

  void resetAccumulatedStats() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    for (const auto t : c10::irange(static_cast<size_t>(StatType::NUM_TYPES))) {
      stats_.allocation[t].reset_accumulated();
      stats_.segment[t].reset_accumulated();
      stats_.active[t].reset_accumulated();
      stats_.inactive_split[t].reset_accumulated();
      stats_.allocated_bytes[t].reset_accumulated();
      stats_.reserved_bytes[t].reset_accumulated();
      stats_.active_bytes[t].reset_accumulated();
      stats_.inactive_split_bytes[t].reset_accumulated();
      stats_.requested_bytes[t].reset_accumulated();
    }
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_sync_all_streams = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
    stats_.oversize_allocations.reset_accumulated();
    stats_.oversize_segments.reset_accumulated();
  }

  void resetPeakStats() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    for (const auto t : c10::irange(static_cast<size_t>(StatType::NUM_TYPES))) {
      stats_.allocation[t].reset_peak();
      stats_.segment[t].reset_peak();
      stats_.active[t].reset_peak();
      stats_.inactive_split[t].reset_peak();
      stats_.allocated_bytes[t].reset_peak();
      stats_.reserved_bytes[t].reset_peak();
      stats_.active_bytes[t].reset_peak();
      stats_.inactive_split_bytes[t].reset_peak();
      stats_.requested_bytes[t].reset_peak();
    }
    stats_.oversize_allocations.reset_peak();
    stats_.oversize_segments.reset_peak();
  }

  size_t reserved() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return total_allocated_memory_;
  }

 private:
  BlockPool& get_pool(size_t size) { return size <= kSmallSize ? small_blocks_ : large_blocks_; }

  static StatTypes get_stat_types_for_pool(const BlockPool& pool) {
    StatTypes stat_types = {false};
    stat_types[kAggregate] = true;
    stat_types[static_cast<size_t>(pool.is_small ? StatType::SMALL_POOL : StatType::LARGE_POOL)] =
        true;
    return stat_types;
  }

  // Small pool: split when a minimal block remains; large pool: only when more than 1 MiB
  // would remain, so a large block may exceed its request by up to 1 MiB (or by up to the 2 MiB
  // rounding of a segment of its own).
  static bool should_split(const Block* block, size_t size) {
    const size_t remaining = block->size - size;
    if (block->pool->is_small) return remaining >= kMinBlockSize;
    return remaining > kSmallSize;
  }

  // The smallest cached block that fits.
  static Block* get_free_block(BlockPool& pool, size_t size) {
    Block key{0, size, 0, &pool, nullptr};
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end()) return nullptr;
    Block* block = *it;
    pool.blocks.erase(it);
    return block;
  }

  // cudaMalloc of a new segment (host memory here), or nullptr when the device is "full".
  Block* alloc_block(BlockPool& pool, size_t size, const StatTypes& stat_types, bool is_retry) {
    if (is_retry) stats_.num_alloc_retries += 1;
    if (total_allocated_memory_ + size > kTotalMemory) return nullptr;
    void* ptr = std::aligned_alloc(kAlignment, size);  // size is a multiple of 2 MiB
    if (ptr == nullptr) return nullptr;
    total_allocated_memory_ += size;
    auto* block = new Block{index_, size, 0, &pool, static_cast<char*>(ptr)};
    c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
      stats_.segment[stat_type].increase(1);
      stats_.reserved_bytes[stat_type].increase(size);
    });
    stats_.num_device_alloc++;
    record_trace(TraceEntry::SEGMENT_ALLOC, address(block->ptr), block->size);
    return block;
  }

  Block* alloc_found_block(Block* block, size_t size, size_t orig_size, bool split_remainder,
                           const StatTypes& stat_types) {
    BlockPool* pool = block->pool;
    const bool already_split = block->is_split();
    if (split_remainder) {
      Block* remaining = block;
      block = new Block{index_, size, 0, pool, remaining->ptr};
      block->prev = remaining->prev;
      if (block->prev) block->prev->next = block;
      block->next = remaining;
      remaining->prev = block;
      remaining->ptr += size;
      remaining->size -= size;
      pool->blocks.insert(remaining);
      if (already_split) {
        // An already-split inactive block is being shrunk by size bytes.
        c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
          stats_.inactive_split_bytes[stat_type].decrease(block->size);
        });
      } else {
        // A new split inactive block is being created from a previously unsplit block.
        c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
          stats_.inactive_split_bytes[stat_type].increase(remaining->size);
          stats_.inactive_split[stat_type].increase(1);
        });
      }
    } else if (already_split) {
      // An already-split block is becoming active.
      c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
        stats_.inactive_split_bytes[stat_type].decrease(block->size);
        stats_.inactive_split[stat_type].decrease(1);
      });
    }

    block->allocated = true;
    block->requested_size = orig_size;
    record_trace(TraceEntry::ALLOC, address(block->ptr), orig_size);
    c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
      stats_.allocation[stat_type].increase(1);
      stats_.allocated_bytes[stat_type].increase(block->size);
      stats_.active[stat_type].increase(1);
      stats_.active_bytes[stat_type].increase(block->size);
      stats_.requested_bytes[stat_type].increase(block->requested_size);
    });
    report(block->ptr, static_cast<int64_t>(block->size));
    return block;
  }

  // Returns a block to its pool, merged with free neighbours.
  void free_block(Block* block) {
    record_trace(TraceEntry::FREE_COMPLETED, address(block->ptr), block->requested_size);
    const size_t original_block_size = block->size;
    const size_t requested_size = block->requested_size;
    BlockPool& pool = *block->pool;
    int64_t net_change_inactive_split_blocks = 0;
    int64_t net_change_inactive_split_size = 0;

    const std::array<Block*, 2> merge_candidates = {block->prev, block->next};
    for (Block* merge_candidate : merge_candidates) {
      const size_t subsumed_size = try_merge_blocks(block, merge_candidate, pool);
      if (subsumed_size > 0) {
        net_change_inactive_split_blocks -= 1;
        net_change_inactive_split_size -= static_cast<int64_t>(subsumed_size);
      }
    }
    pool.blocks.insert(block);
    if (block->is_split()) {
      net_change_inactive_split_blocks += 1;
      net_change_inactive_split_size += static_cast<int64_t>(block->size);
    }

    const StatTypes stat_types = get_stat_types_for_pool(pool);
    c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
      if (net_change_inactive_split_blocks > 0) {
        stats_.inactive_split[stat_type].increase(
            static_cast<size_t>(net_change_inactive_split_blocks));
      } else if (net_change_inactive_split_blocks < 0) {
        stats_.inactive_split[stat_type].decrease(
            static_cast<size_t>(-net_change_inactive_split_blocks));
      }
      if (net_change_inactive_split_size > 0) {
        stats_.inactive_split_bytes[stat_type].increase(
            static_cast<size_t>(net_change_inactive_split_size));
      } else if (net_change_inactive_split_size < 0) {
        stats_.inactive_split_bytes[stat_type].decrease(
            static_cast<size_t>(-net_change_inactive_split_size));
      }
      stats_.active[stat_type].decrease(1);
      stats_.active_bytes[stat_type].decrease(original_block_size);
      stats_.requested_bytes[stat_type].decrease(requested_size);
    });
  }

  // Merges the free block `src` into its neighbour `dst`; returns the bytes gained.
  static size_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
    if (src == nullptr || src->allocated) return 0;
    if (dst->prev == src) {  // [src dst]
      dst->ptr = src->ptr;
      dst->prev = src->prev;
      if (dst->prev) dst->prev->next = dst;
    } else {  // [dst src]
      dst->next = src->next;
      if (dst->next) dst->next->prev = dst;
    }
    const size_t subsumed_size = src->size;
    dst->size += subsumed_size;
    pool.blocks.erase(src);
    delete src;
    return subsumed_size;
  }

  // emptyCache: every segment that is one free block (entirely free) goes back.
  void release_cached_blocks() {
    stats_.num_sync_all_streams++;  // synchronize_and_free_events
    release_blocks(large_blocks_);
    release_blocks(small_blocks_);
  }

  void release_blocks(BlockPool& pool) {
    auto it = pool.blocks.begin();
    while (it != pool.blocks.end()) {
      Block* block = *it;
      ++it;
      if (!block->prev && !block->next) release_block(block);
    }
  }

  void release_block(Block* block) {
    stats_.num_device_free++;
    count_synchronization();  // the real one's cudaFree synchronizes the device
    record_trace(TraceEntry::SEGMENT_FREE, address(block->ptr), block->size);
    BlockPool* pool = block->pool;
    pool->blocks.erase(block);
    std::free(block->ptr);
    total_allocated_memory_ -= block->size;
    const StatTypes stat_types = get_stat_types_for_pool(*pool);
    c10::CachingAllocator::for_each_selected_stat_type(stat_types, [&](size_t stat_type) {
      stats_.segment[stat_type].decrease(1);
      stats_.reserved_bytes[stat_type].decrease(block->size);
    });
    delete block;
  }

  [[noreturn]] void out_of_memory(size_t size, size_t alloc_size) {
    const size_t device_free = kTotalMemory - total_allocated_memory_;
    // For OOM the trace's address is the device's free memory.
    record_trace(TraceEntry::OOM, device_free, size);
    stats_.num_ooms += 1;
    const auto allocated = stats_.allocated_bytes[kAggregate].current;
    const auto reserved = stats_.reserved_bytes[kAggregate].current;
    if (reports_enabled()) {
      c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(size), allocated, reserved,
                                       c10::Device(c10::DeviceType::CUDA, index_));
    }
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ",
                     format_size(alloc_size), ". GPU ", static_cast<int>(index_),
                     " has a total capacity of ", format_size(kTotalMemory), " of which ",
                     format_size(device_free), " is free. Of the allocated memory ",
                     format_size(allocated), " is allocated by PyTorch, and ",
                     format_size(reserved - allocated),
                     " is reserved by PyTorch but unallocated. (gpu-scope fake CUDA device)");
  }

  // Trackers see every action on the calling thread, under the device mutex.
  void record_trace(TraceEntry::Action action, size_t addr, size_t size) {
    if (trace_trackers_.empty()) return;
    TraceEntry te(action, index_, addr, size, /*stream=*/nullptr,
                  /*mempool=*/{0, 0}, c10::getApproximateTime(), /*context=*/nullptr,
                  /*compile_context=*/"N/A");
    for (const auto& cb : trace_trackers_) cb(te);
  }

  // The thread's profiler state (c10::MemoryReportingInfoBase), if any, hears of it.
  void report(void* ptr, int64_t alloc_size) {
    if (!reports_enabled()) return;
    c10::reportMemoryUsageToProfiler(
        ptr, alloc_size, static_cast<size_t>(stats_.allocated_bytes[kAggregate].current),
        static_cast<size_t>(stats_.reserved_bytes[kAggregate].current),
        c10::Device(c10::DeviceType::CUDA, index_));
  }

  std::recursive_mutex mutex_;
  const c10::DeviceIndex index_;
  DeviceStats stats_;
  BlockPool large_blocks_{false};
  BlockPool small_blocks_{true};
  size_t total_allocated_memory_ = 0;  // bytes in segments (the real name)
  std::vector<AllocatorTraceTracker> trace_trackers_;
};

FakeCachingAllocator::FakeCachingAllocator() = default;
FakeCachingAllocator::~FakeCachingAllocator() = default;

void FakeCachingAllocator::init() {
  std::call_once(init_once_, [this] {
    const c10::DeviceIndex n = device_count();
    devices_.reserve(static_cast<size_t>(n));
    for (c10::DeviceIndex i = 0; i < n; ++i) devices_.emplace_back(new DeviceCache(i));
    initialized_.store(true, std::memory_order_release);
  });
}

bool FakeCachingAllocator::initialized() { return initialized_.load(std::memory_order_acquire); }

bool FakeCachingAllocator::has_context(c10::DeviceIndex index) const {
  return index >= 0 && context_[static_cast<size_t>(index)].load(std::memory_order_acquire);
}

// NativeCachingAllocator::assertValidDevice: the index is a c10::DeviceIndex (int8_t), so it
// prints as a character; device 0 prints a NUL byte.
DeviceCache* FakeCachingAllocator::device(c10::DeviceIndex index) {
  const auto count = initialized() ? static_cast<int64_t>(devices_.size()) : int64_t{0};
  TORCH_CHECK(0 <= index && index < count, "Invalid device argument ", index,
              ": did you call init?");
  return devices_[static_cast<size_t>(index)].get();
}

c10::DataPtr FakeCachingAllocator::allocate(size_t n) {
  constexpr size_t one_exa_bytes = 1152921504606846976ULL;
  TORCH_CHECK_WITH(OutOfMemoryError, n < one_exa_bytes,
                   "CUDA out of memory. Tried to allocate more than 1EB memory.");
  const c10::DeviceIndex index = current_device();
  const c10::Device where(c10::DeviceType::CUDA, index);
  // Like the real allocate(): a zero-byte request touches no block and reports nothing.
  if (n == 0) return {nullptr, nullptr, &raw_delete, where};
  init();
  context_[static_cast<size_t>(index)].store(true, std::memory_order_release);
  Block* block = devices_[static_cast<size_t>(index)]->malloc(n);
  {
    auto& live = live_blocks();
    std::lock_guard<std::mutex> lock(live.mutex);
    live.map[block->ptr] = block;
  }
  return {block->ptr, block->ptr, &raw_delete, where};
}

void FakeCachingAllocator::raw_delete(void* ptr) {
  if (ptr == nullptr) return;
  Block* block = nullptr;
  {
    auto& live = live_blocks();
    std::lock_guard<std::mutex> lock(live.mutex);
    auto it = live.map.find(ptr);
    TORCH_CHECK(it != live.map.end(), "invalid device pointer: ", ptr);
    block = it->second;
    live.map.erase(it);
  }
  allocator().devices_[static_cast<size_t>(block->device)]->free(block);
}

c10::DeleterFnPtr FakeCachingAllocator::raw_deleter() const { return &raw_delete; }

void FakeCachingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

// All devices, like the real one; nothing before init. The fake has no private pools.
void FakeCachingAllocator::emptyCache(c10::MempoolId_t /*mempool_id*/) {
  if (!initialized()) return;
  for (auto& d : devices_) d->emptyCache();
}

// One stream per device: nothing to defer.
void FakeCachingAllocator::recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) {}

c10::CachingDeviceAllocator::DeviceStats FakeCachingAllocator::getDeviceStats(
    c10::DeviceIndex index) {
  return device(index)->getStats();
}

void FakeCachingAllocator::resetAccumulatedStats(c10::DeviceIndex index) {
  device(index)->resetAccumulatedStats();
}

void FakeCachingAllocator::resetPeakStats(c10::DeviceIndex index) {
  device(index)->resetPeakStats();
}

// cudaMemGetInfo: what the device has left after this process's segments.
std::pair<size_t, size_t> FakeCachingAllocator::getMemoryInfo(c10::DeviceIndex index) {
  check_device_index(index);
  const size_t reserved =
      initialized() ? devices_[static_cast<size_t>(index)]->reserved() : size_t{0};
  return {kTotalMemory - reserved, kTotalMemory};
}

bool FakeCachingAllocator::attach_tracker(AllocatorTraceTracker tracker) {
  if (!initialized()) return false;
  // With reports off the fake stands for cudaMallocAsync, which also refuses trackers.
  TORCH_CHECK(reports_enabled(),
              "cudaMallocAsync does not yet support attachAllocatorTraceTracker. "
              "(gpu-scope fake CUDA device, GPU_SCOPE_FAKE_CUDA_REPORTS=0)");
  for (auto& d : devices_) d->attachAllocatorTraceTracker(tracker);
  return true;
}

std::optional<c10::DeviceIndex> FakeCachingAllocator::device_of(const void* ptr) {
  auto& live = live_blocks();
  std::lock_guard<std::mutex> lock(live.mutex);
  auto it = live.map.find(const_cast<void*>(ptr));
  if (it == live.map.end()) return std::nullopt;
  return it->second->device;
}

FakeCachingAllocator& allocator() {
  static auto* instance = new FakeCachingAllocator();
  return *instance;
}

namespace {
// Priority UINT8_MAX: nothing registered later for CUDA replaces the fake.
struct RegisterAllocator {
  RegisterAllocator() { c10::SetAllocator(c10::DeviceType::CUDA, &allocator(), UINT8_MAX); }
} register_allocator;
}  // namespace

}  // namespace gpu_scope::fake_cuda
