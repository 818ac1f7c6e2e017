// Test-only: checks the parts of the fake that tch cannot reach (block sizes, the cache, stats
// before and after init, trackers and profiler reports on the right threads, workspaces).
// tests/fake_cuda_device.rs calls it in a fresh process, since it starts by checking the state
// before CUDA's lazy init. It needs at least two devices.
//
//   int gs_fake_cuda_selftest(char* message, size_t len)
//
// returns 0 when every check passed, 1 when one failed and 2 on an unexpected exception, and
// writes "ok" or what went wrong to `message` (NUL-terminated, cut to `len`).
#include "../backend.h"
#include "allocator.h"
#include "fake_cuda.h"

#include <ATen/ATen.h>
#include <ATen/DeviceAccelerator.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace fc = gpu_scope::fake_cuda;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::TraceEntry;

constexpr size_t MiB = size_t{1} << 20;
constexpr size_t kAgg = 0, kSmall = 1, kLarge = 2;  // c10::CachingAllocator::StatType
constexpr size_t kTotal = size_t{80} << 30;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define EXPECT(cond, ...)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      throw Failure(c10::str("selftest.cpp:", __LINE__, ": expected ", #cond, ". ", \
                             __VA_ARGS__));                                           \
    }                                                                                 \
  } while (0)

#define EXPECT_EQ(a, b, ...)                                                                  \
  do {                                                                                        \
    const auto va_ = (a);                                                                     \
    const auto vb_ = (b);                                                                     \
    if (!(va_ == vb_)) {                                                                      \
      throw Failure(c10::str("selftest.cpp:", __LINE__, ": expected ", #a, " == ", #b, ", got ", \
                             va_, " != ", vb_, ". ", __VA_ARGS__));                           \
    }                                                                                         \
  } while (0)

// --- What the trackers and reporters saw ----------------------------------------------------

// Threads by number: std::thread::id values are reused once a thread has exited.
using ThreadId = int;
ThreadId this_thread_id() {
  static std::atomic<int> next{0};
  thread_local const int id = ++next;
  return id;
}

struct Event {
  bool report;       // a profiler report (else a trace tracker call)
  int action;        // TraceEntry::Action of a trace
  int64_t size;      // trace size, or the report's signed size
  int device;
  size_t addr;
  ThreadId thread;
  int reporter;      // which Reporter got it (reports only)
  size_t total_allocated;
  size_t total_reserved;
};

struct Log {
  std::mutex mutex;
  std::vector<Event> events;
  std::atomic<bool> on{false};
};

Log& event_log() {
  static auto* log = new Log();
  return *log;
}

void record(const Event& e) {
  Log& log = event_log();
  if (!log.on.load()) return;
  std::lock_guard<std::mutex> lock(log.mutex);
  log.events.push_back(e);
}

// Records while alive; starts from an empty log.
struct Recording {
  Recording() {
    std::lock_guard<std::mutex> lock(event_log().mutex);
    event_log().events.clear();
    event_log().on = true;
  }
  ~Recording() { event_log().on = false; }
  std::vector<Event> take() {
    std::lock_guard<std::mutex> lock(event_log().mutex);
    return std::exchange(event_log().events, {});
  }
};

void tracker(const TraceEntry& te) {
  record({false, static_cast<int>(te.action_), static_cast<int64_t>(te.size_), te.device_,
          te.addr_, this_thread_id(), 0, 0, 0});
}

// A thread's profiler state. memoryProfilingEnabled() is false so that the CPU allocator stays
// quiet; the CUDA allocator reports without asking, as libtorch's does.
struct Reporter final : public c10::MemoryReportingInfoBase {
  explicit Reporter(int tag) : tag(tag) {}
  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t total_allocated,
                         size_t total_reserved, c10::Device device) override {
    if (!device.is_cuda()) return;
    record({true, -1, alloc_size, device.index(), reinterpret_cast<size_t>(ptr),
            this_thread_id(), tag, total_allocated, total_reserved});
  }
  bool memoryProfilingEnabled() const override { return false; }
  const int tag;
};

struct ReportingOn {
  explicit ReportingOn(int tag)
      : guard(c10::DebugInfoKind::PROFILER_STATE, std::make_shared<Reporter>(tag)) {}
  c10::DebugInfoGuard guard;
};

std::string describe(const std::vector<Event>& events) {
  std::string out = "[";
  for (const auto& e : events) {
    out += c10::str(e.report ? "report " : "trace ", e.action, " size ", e.size, " dev ",
                    e.device, "; ");
  }
  return out + "]";
}

void expect_trace(const Event& e, TraceEntry::Action action, int64_t size, int device,
                  ThreadId thread, const std::vector<Event>& all) {
  EXPECT(!e.report && e.action == static_cast<int>(action) && e.size == size &&
             e.device == device && e.thread == thread,
         "wanted trace ", static_cast<int>(action), " size ", size, " dev ", device,
         "; events: ", describe(all));
}

void expect_report(const Event& e, int64_t size, int device, int reporter,
                   ThreadId thread, const std::vector<Event>& all) {
  EXPECT(e.report && e.size == size && e.device == device && e.reporter == reporter &&
             e.thread == thread,
         "wanted report ", size, " dev ", device, " to reporter ", reporter,
         "; events: ", describe(all));
}

// --- Helpers --------------------------------------------------------------------------------

DeviceStats stats(int device) {
  return at::accelerator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
}

c10::Device cuda(int index) {
  return {c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)};
}

c10::DataPtr alloc_on(int device, size_t n) {
  const c10::DeviceGuard guard(cuda(device));
  return fc::allocator().allocate(n);
}

bool aligned(const c10::DataPtr& p) { return reinterpret_cast<uintptr_t>(p.get()) % 512 == 0; }

// The message of the c10::Error that `f` throws (msg(), which keeps NUL bytes), or "".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.msg();
  }
  return "";
}

std::string init_error(int device) {
  return std::string("Invalid device argument ") + static_cast<char>(device) +
         ": did you call init?";
}

// Runs `f` on a new thread and rethrows what it threw.
void on_thread(const std::function<void()>& f) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      f();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

struct Latch {
  explicit Latch(int n) : count(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex);
    if (--count == 0) {
      cv.notify_all();
    } else {
      cv.wait(lock, [this] { return count == 0; });
    }
  }
  std::mutex mutex;
  std::condition_variable cv;
  int count;
};

// A 4x4 matrix product on the fake device, checked against the CPU.
void product(int device) {
  const auto options = at::TensorOptions().dtype(at::kFloat).device(cuda(device));
  const at::Tensor a = at::arange(16, options).reshape({4, 4});
  const at::Tensor b = a + 1;
  const at::Tensor c = at::mm(a, b);
  EXPECT(c.device() == cuda(device), "mm result on ", c.device());
  EXPECT(at::equal(c.cpu(), at::mm(a.cpu(), b.cpu())), "mm result differs from the CPU's");
}

std::vector<std::pair<const void*, int>> live_workspaces() {
  std::vector<std::pair<const void*, int>> found;
  gpu_scope::backend()->workspaces(
      [](void* ctx, const void* ptr, int device, const char* kind) {
        EXPECT_EQ(std::string(kind), std::string("cuBLAS workspace"), "");
        static_cast<std::vector<std::pair<const void*, int>>*>(ctx)->emplace_back(ptr, device);
      },
      &found);
  return found;
}

// --- Checks ---------------------------------------------------------------------------------

void check_registrations() {
  EXPECT(fc::device_count() >= 2, "the self-test needs two devices");
  EXPECT(c10::GetAllocator(c10::DeviceType::CUDA) == &fc::allocator(), "");
  EXPECT(at::getAccelerator(false) == c10::DeviceType::CUDA, "");
  EXPECT_EQ(static_cast<int>(at::accelerator::deviceCount()), static_cast<int>(fc::device_count()),
            "");
  EXPECT(at::hasCUDA(), "");
  EXPECT_EQ(std::string(gpu_scope::backend()->name), std::string("fake-cuda"), "");
}

void check_before_init() {
  EXPECT(!fc::allocator().initialized(), "nothing may touch the fake device before the test");
  for (int d : {0, 1}) {
    const std::string stats_error = error_of([d] { stats(d); });
    EXPECT(stats_error.find(init_error(d)) != std::string::npos, "getDeviceStats(", d,
           ") before init threw \"", stats_error, "\"");
  }
  EXPECT(init_error(0).find('\0') != std::string::npos, "device 0 prints as a NUL byte");
  EXPECT(error_of([] { at::accelerator::resetPeakStats(1); }).find(init_error(1)) !=
             std::string::npos,
         "");
  EXPECT(error_of([] { at::accelerator::resetAccumulatedStats(0); }).find(init_error(0)) !=
             std::string::npos,
         "");
  EXPECT(!gpu_scope::backend()->attach_tracker(&tracker), "trackers attach only after init");
  at::accelerator::emptyCache();  // a no-op before init
  const c10::DataPtr none = fc::allocator().allocate(0);
  EXPECT(none.get() == nullptr && none.device() == cuda(0), "allocate(0): ", none.device());
  EXPECT(!fc::allocator().initialized(), "neither emptyCache nor allocate(0) initializes");
  const auto info = at::accelerator::getMemoryInfo(0);
  EXPECT(info.first == kTotal && info.second == kTotal, "getMemoryInfo: ", info.first);
  EXPECT(live_workspaces().empty(), "");
}

c10::DataPtr check_first_allocation() {
  c10::DataPtr first = alloc_on(0, 100);
  EXPECT(fc::allocator().initialized(), "the first allocation initializes");
  EXPECT(first.device() == cuda(0) && aligned(first), "");
  const DeviceStats s = stats(0);
  EXPECT_EQ(s.allocated_bytes[kAgg].current, 512, "100 B takes a 512 B block");
  EXPECT_EQ(s.requested_bytes[kAgg].current, 100, "");
  EXPECT_EQ(s.active_bytes[kAgg].current, 512, "");
  EXPECT_EQ(s.allocation[kAgg].current, 1, "");
  EXPECT_EQ(s.reserved_bytes[kAgg].current, static_cast<int64_t>(2 * MiB), "a 2 MiB segment");
  EXPECT_EQ(s.segment[kSmall].current, 1, "");
  EXPECT_EQ(s.segment[kLarge].current, 0, "");
  // Every device is initialized, not only the one allocated on.
  const DeviceStats s1 = stats(1);
  EXPECT_EQ(s1.reserved_bytes[kAgg].current, 0, "");
  EXPECT_EQ(s1.allocation[kAgg].allocated, 0, "");
  const int past = fc::device_count();
  EXPECT(error_of([past] { stats(past); }).find(init_error(past)) != std::string::npos, "");
  EXPECT(gpu_scope::backend()->attach_tracker(&tracker), "attach after init");
  return first;
}

// Allocates `request` bytes on device 0 and checks the block and reservation it took.
c10::DataPtr expect_block(size_t request, size_t block, size_t reserved_growth, size_t pool) {
  const DeviceStats before = stats(0);
  c10::DataPtr p = alloc_on(0, request);
  const DeviceStats after = stats(0);
  const auto grew = [&](const c10::CachingAllocator::StatArray DeviceStats::*field, size_t t) {
    return (after.*field)[t].current - (before.*field)[t].current;
  };
  EXPECT_EQ(grew(&DeviceStats::allocated_bytes, kAgg), static_cast<int64_t>(block),
            "block for a request of ", request);
  EXPECT_EQ(grew(&DeviceStats::allocated_bytes, pool), static_cast<int64_t>(block),
            "pool of a request of ", request);
  EXPECT_EQ(grew(&DeviceStats::requested_bytes, kAgg), static_cast<int64_t>(request), "");
  EXPECT_EQ(grew(&DeviceStats::reserved_bytes, kAgg), static_cast<int64_t>(reserved_growth),
            "reserved for a request of ", request);
  EXPECT(aligned(p), "");
  return p;
}

void check_rounding_cache_and_empty_cache(c10::DataPtr first) {
  auto* const base = static_cast<char*>(first.get());
  // Small pool: requests up to 1 MiB, rounded to 512 B, carved from one 2 MiB segment.
  c10::DataPtr b512 = expect_block(512, 512, 0, kSmall);
  c10::DataPtr b513 = expect_block(513, 1024, 0, kSmall);
  c10::DataPtr b1m = expect_block(MiB, MiB, 0, kSmall);
  EXPECT(static_cast<char*>(b1m.get()) == base + 2048, "small blocks are carved in order");
  // Large pool: a 20 MiB segment below 10 MiB, split when more than 1 MiB remains.
  c10::DataPtr b1_5m = expect_block(3 * MiB / 2, 3 * MiB / 2, 20 * MiB, kLarge);
  // 19.5 MiB: a segment of its own rounded to 2 MiB, 0.5 MiB left over stays in the block.
  c10::DataPtr b19_5m = expect_block(39 * MiB / 2, 20 * MiB, 20 * MiB, kLarge);
  // Exactly 1 MiB left over is not split off either.
  c10::DataPtr b19m = expect_block(19 * MiB, 20 * MiB, 20 * MiB, kLarge);
  // Best fit: the 18.5 MiB left in the first large segment.
  c10::DataPtr b18_5m = expect_block(37 * MiB / 2, 37 * MiB / 2, 0, kLarge);
  EXPECT(static_cast<char*>(b18_5m.get()) == static_cast<char*>(b1_5m.get()) + 3 * MiB / 2, "");
  c10::DataPtr b25m = expect_block(25 * MiB + 1, 26 * MiB, 26 * MiB, kLarge);
  c10::DataPtr b3m = expect_block(3 * MiB, 3 * MiB, 20 * MiB, kLarge);
  c10::DataPtr b2m = expect_block(2 * MiB, 2 * MiB, 0, kLarge);
  EXPECT(static_cast<char*>(b2m.get()) == static_cast<char*>(b3m.get()) + 3 * MiB, "");
  DeviceStats s = stats(0);
  EXPECT_EQ(s.reserved_bytes[kAgg].current, static_cast<int64_t>(108 * MiB), "");
  EXPECT_EQ(s.segment[kLarge].current, 5, "");
  EXPECT_EQ(s.inactive_split[kLarge].current, 1, "the 15 MiB after the 2 MiB block");
  EXPECT_EQ(s.inactive_split_bytes[kLarge].current, static_cast<int64_t>(15 * MiB), "");

  // The cache: a freed block stays reserved and comes back for the next request that fits.
  void* const old3 = b3m.get();
  b3m.clear();
  s = stats(0);
  EXPECT_EQ(s.reserved_bytes[kAgg].current, static_cast<int64_t>(108 * MiB), "kept after free");
  EXPECT(s.reserved_bytes[kAgg].current > s.allocated_bytes[kAgg].current, "");
  EXPECT_EQ(s.inactive_split[kLarge].current, 2, "");
  b3m = expect_block(3 * MiB, 3 * MiB, 0, kLarge);
  EXPECT(b3m.get() == old3, "the cached block is reused");

  // emptyCache gives back entirely free segments only, and tells the trackers.
  const void* const old19_5 = b19_5m.get();
  b19_5m.clear();
  b1_5m.clear();  // its segment still holds the 18.5 MiB block
  {
    Recording rec;
    at::accelerator::emptyCache();
    const auto events = rec.take();
    EXPECT_EQ(events.size(), size_t{1}, describe(events));
    expect_trace(events[0], TraceEntry::SEGMENT_FREE, 20 * MiB, 0, this_thread_id(),
                 events);
    EXPECT(events[0].addr == reinterpret_cast<size_t>(old19_5), "");
  }
  EXPECT_EQ(stats(0).reserved_bytes[kAgg].current, static_cast<int64_t>(88 * MiB), "");
  for (c10::DataPtr* p : {&b512, &b513, &b1m, &b19m, &b18_5m, &b25m, &b3m, &b2m}) p->clear();
  at::accelerator::emptyCache();
  s = stats(0);
  EXPECT_EQ(s.reserved_bytes[kAgg].current, static_cast<int64_t>(2 * MiB), "the live 100 B");
  EXPECT_EQ(s.segment[kLarge].current, 0, "");
  const auto info = at::accelerator::getMemoryInfo(0);
  EXPECT(info.first == kTotal - 2 * MiB && info.second == kTotal, "free: ", info.first);
  first.clear();
  at::accelerator::emptyCache();
  s = stats(0);
  EXPECT_EQ(s.reserved_bytes[kAgg].current, 0, "");
  EXPECT_EQ(s.allocated_bytes[kAgg].current, 0, "");
  EXPECT_EQ(s.requested_bytes[kAgg].current, 0, "");
  EXPECT_EQ(s.active_bytes[kAgg].current, 0, "");
  EXPECT_EQ(s.inactive_split[kAgg].current, 0, "");
  EXPECT_EQ(s.num_device_alloc, s.num_device_free, "");
  EXPECT_EQ(s.num_device_alloc, 6, "six segments in all");
  EXPECT_EQ(s.allocated_bytes[kAgg].allocated, s.allocated_bytes[kAgg].freed, "");
  EXPECT(s.allocated_bytes[kAgg].peak >= static_cast<int64_t>(92 * MiB),
         "the blocks above were all live at once");
}

void check_reports_across_threads() {
  const auto main_thread = this_thread_id();
  const DeviceStats before0 = stats(0);
  c10::DataPtr p;
  {
    Recording rec;
    {
      ReportingOn reporting(1);
      p = alloc_on(1, 3000);  // allocates on the calling thread's current device
    }
    const auto events = rec.take();
    EXPECT_EQ(events.size(), size_t{3}, describe(events));
    expect_trace(events[0], TraceEntry::SEGMENT_ALLOC, 2 * MiB, 1, main_thread, events);
    expect_trace(events[1], TraceEntry::ALLOC, 3000, 1, main_thread, events);
    EXPECT(events[1].addr == reinterpret_cast<size_t>(p.get()), "");
    expect_report(events[2], 3072, 1, 1, main_thread, events);
    EXPECT(events[2].total_allocated == 3072 && events[2].total_reserved == 2 * MiB, "totals ",
           events[2].total_allocated, " ", events[2].total_reserved);
  }
  EXPECT_EQ(static_cast<int>(fc::current_device()), 0, "the guard restored the device");
  {
    Recording rec;
    ThreadId freer;
    on_thread([&] {
      ReportingOn reporting(2);
      freer = this_thread_id();
      p.clear();  // the last reference goes on another thread
    });
    const auto events = rec.take();
    EXPECT_EQ(events.size(), size_t{3}, describe(events));
    // Both free events carry the requested size, as in libtorch.
    expect_trace(events[0], TraceEntry::FREE_REQUESTED, 3000, 1, freer, events);
    expect_trace(events[1], TraceEntry::FREE_COMPLETED, 3000, 1, freer, events);
    expect_report(events[2], -3072, 1, 2, freer, events);
    EXPECT(events[2].total_allocated == 0 && events[2].total_reserved == 2 * MiB, "");
  }
  {
    // A tensor made from device 0 for device 1; freed on a thread without a reporter: the
    // trackers hear of it, no reporter does.
    Recording rec;
    at::Tensor t;
    {
      ReportingOn reporting(3);
      t = at::empty({10}, at::TensorOptions().dtype(at::kFloat).device(cuda(1)));
    }
    ThreadId freer;
    on_thread([&] {
      freer = this_thread_id();
      t = at::Tensor();
    });
    const auto events = rec.take();
    EXPECT_EQ(events.size(), size_t{4}, describe(events));
    expect_trace(events[0], TraceEntry::ALLOC, 40, 1, main_thread, events);
    expect_report(events[1], 512, 1, 3, main_thread, events);
    expect_trace(events[2], TraceEntry::FREE_REQUESTED, 40, 1, freer, events);
    expect_trace(events[3], TraceEntry::FREE_COMPLETED, 40, 1, freer, events);
  }
  const DeviceStats after0 = stats(0);
  EXPECT_EQ(after0.allocation[kAgg].allocated, before0.allocation[kAgg].allocated,
            "device 0 untouched");

  // Peaks and accumulated counters reset like the real ones.
  DeviceStats s = stats(1);
  EXPECT(s.allocated_bytes[kAgg].peak >= 3072 && s.allocated_bytes[kAgg].current == 0, "");
  EXPECT_EQ(s.allocation[kAgg].allocated, 2, "");
  at::accelerator::resetPeakStats(1);
  s = stats(1);
  EXPECT_EQ(s.allocated_bytes[kAgg].peak, 0, "");
  EXPECT_EQ(s.reserved_bytes[kAgg].peak, static_cast<int64_t>(2 * MiB), "");
  at::accelerator::resetAccumulatedStats(1);
  s = stats(1);
  EXPECT(s.allocation[kAgg].allocated == 0 && s.allocated_bytes[kAgg].freed == 0 &&
             s.num_device_alloc == 0,
         "");
  const auto info = at::accelerator::getMemoryInfo(1);
  EXPECT_EQ(info.first, kTotal - 2 * MiB, "");
  at::accelerator::emptyCache();
  EXPECT_EQ(at::accelerator::getMemoryInfo(1).first, kTotal, "");
}

void check_workspaces() {
  auto* const backend = gpu_scope::backend();
  backend->clear_workspaces();
  EXPECT(live_workspaces().empty(), "");
  const size_t ws = fc::workspace_size();
  const DeviceStats before = stats(0);
  Recording rec;
  ThreadId a_id, b_id;
  size_t after_first = 0, after_second = 0;
  Latch both_alive(2), b_done(2);
  std::exception_ptr a_error, b_error;
  std::thread a([&] {
    try {
      a_id = this_thread_id();
      product(0);
      after_first = fc::workspace_count();
      product(0);
      after_second = fc::workspace_count();
    } catch (...) {
      a_error = std::current_exception();
    }
    both_alive.arrive_and_wait();
    b_done.arrive_and_wait();
    try {
      product(1);
    } catch (...) {
      a_error = std::current_exception();
    }
  });
  std::thread b([&] {
    b_id = this_thread_id();
    both_alive.arrive_and_wait();
    try {
      product(0);  // a is alive: a handle, and a workspace, of its own
    } catch (...) {
      b_error = std::current_exception();
    }
    b_done.arrive_and_wait();
  });
  a.join();
  b.join();
  if (a_error) std::rethrow_exception(a_error);
  if (b_error) std::rethrow_exception(b_error);
  EXPECT_EQ(after_first, size_t{1}, "the first product allocates the workspace");
  EXPECT_EQ(after_second, size_t{1}, "the second reuses it");
  EXPECT_EQ(fc::workspace_count(), size_t{3}, "a: devices 0 and 1, b: device 0");
  // A later thread takes a handle that a finished thread gave back, with its workspace.
  ThreadId c_id;
  on_thread([&] {
    c_id = this_thread_id();
    product(0);
  });
  EXPECT_EQ(fc::workspace_count(), size_t{3}, "");

  const auto events = rec.take();
  const auto workspace_allocs = [&](ThreadId thread, int device) {
    return std::count_if(events.begin(), events.end(), [&](const Event& e) {
      return !e.report && e.action == TraceEntry::ALLOC && e.size == static_cast<int64_t>(ws) &&
             e.thread == thread && e.device == device;
    });
  };
  if (ws > 0) {
    EXPECT_EQ(workspace_allocs(a_id, 0), 1, "");
    EXPECT_EQ(workspace_allocs(a_id, 1), 1, "");
    EXPECT_EQ(workspace_allocs(b_id, 0), 1, "");
    EXPECT_EQ(workspace_allocs(c_id, 0), 0, "");
  }
  const DeviceStats during = stats(0);
  EXPECT_EQ(during.requested_bytes[kAgg].current - before.requested_bytes[kAgg].current,
            static_cast<int64_t>(2 * ws), "two workspaces live on device 0");
  auto found = live_workspaces();
  EXPECT_EQ(found.size(), size_t{3}, "");
  EXPECT_EQ(std::count_if(found.begin(), found.end(), [](auto& w) { return w.second == 0; }), 2,
            "");
  for (const auto& w : found) EXPECT((w.first != nullptr) == (ws > 0), "");

  backend->clear_workspaces();
  EXPECT(live_workspaces().empty(), "");
  EXPECT_EQ(stats(0).requested_bytes[kAgg].current, before.requested_bytes[kAgg].current, "");

  // out= through the CPU fallback resizes the (empty) output on the device.
  const auto options = at::TensorOptions().dtype(at::kFloat).device(cuda(1));
  const at::Tensor x = at::rand({3, 5}, options);
  const at::Tensor y = at::rand({5, 2}, options);
  at::Tensor out = at::empty({0}, options);
  at::mm_out(out, x, y);
  EXPECT(out.device() == cuda(1) && out.sizes() == at::IntArrayRef({3, 2}), "");
  EXPECT(at::allclose(out.cpu(), at::mm(x.cpu(), y.cpu())), "");
  backend->clear_workspaces();
}

// GPU_SCOPE_FAKE_CUDA_REPORTS=0: the statistics still count, but nobody hears of anything,
// and trackers are refused (as by cudaMallocAsync).
void check_reports_off() {
  c10::DataPtr first = alloc_on(0, 100);
  EXPECT(fc::allocator().initialized(), "");
  const std::string refused = error_of([] { gpu_scope::backend()->attach_tracker(&tracker); });
  EXPECT(refused.find("does not yet support attachAllocatorTraceTracker") != std::string::npos,
         refused);
  Recording rec;
  c10::DataPtr p;
  {
    ReportingOn reporting(1);
    p = alloc_on(1, 3000);
  }
  on_thread([&] {
    ReportingOn reporting(2);
    p.clear();
    product(0);
  });
  first.clear();
  const auto events = rec.take();
  EXPECT(events.empty(), describe(events));
  EXPECT_EQ(stats(1).allocated_bytes[kAgg].allocated, 3072, "");
  EXPECT_EQ(stats(0).requested_bytes[kAgg].current, static_cast<int64_t>(fc::workspace_size()),
            "only the workspace is left");
  EXPECT_EQ(fc::workspace_count(), size_t{1}, "");
  gpu_scope::backend()->clear_workspaces();
}

void run() {
  check_registrations();
  check_before_init();
  if (!fc::reports_enabled()) {
    check_reports_off();
    return;
  }
  c10::DataPtr first = check_first_allocation();
  check_rounding_cache_and_empty_cache(std::move(first));
  check_reports_across_threads();
  check_workspaces();
}

}  // namespace

extern "C" int gs_fake_cuda_selftest(char* message, size_t len) {
  std::string result = "ok";
  int status = 0;
  try {
    run();
  } catch (const Failure& f) {
    status = 1;
    result = f.what();
  } catch (const c10::Error& e) {
    status = 2;
    result = std::string("unexpected c10::Error: ") + e.what_without_backtrace();
  } catch (const std::exception& e) {
    status = 2;
    result = std::string("unexpected exception: ") + e.what();
  }
  if (message != nullptr && len > 0) {
    const size_t n = std::min(len - 1, result.size());
    std::memcpy(message, result.data(), n);
    message[n] = '\0';
  }
  return status;
}
