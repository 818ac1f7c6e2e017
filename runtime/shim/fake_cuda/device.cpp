// The fake device itself: its settings, the thread's current device, and the two registrations
// through which libtorch finds a CUDA backend: the device guard (current device, streams,
// events, device count) and the CUDA hooks (is CUDA there, lazy init, generators).
#include "allocator.h"
#include "fake_cuda.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace gpu_scope::fake_cuda {

namespace {

// A non-negative integer from the environment, or `fallback` when unset or malformed (a static
// initializer has no good way to report a bad value, and the fake prints nothing).
long long env_number(const char* name, long long fallback, long long max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0' || value < 0 || value > max) return fallback;
  return value;
}

// The current device of each thread starts at 0, as with the CUDA runtime.
thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

c10::DeviceIndex device_count() {
  static const auto count =
      static_cast<c10::DeviceIndex>(env_number("GPU_SCOPE_FAKE_CUDA_DEVICES", 2, 64));
  return count;
}

bool reports_enabled() {
  static const bool enabled = [] {
    const char* text = std::getenv("GPU_SCOPE_FAKE_CUDA_REPORTS");
    return text == nullptr || std::string(text) != "0";
  }();
  return enabled;
}

size_t workspace_size() {
  static const auto size = static_cast<size_t>(
      env_number("GPU_SCOPE_FAKE_CUDA_WORKSPACE", 4 << 20, 1LL << 40));
  return size;
}

c10::DeviceIndex current_device() { return t_current_device; }

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

// What cudaSetDevice reports for a bad index.
void check_device_index(int64_t index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "CUDA error: invalid device ordinal");
}

void link_device() {}

namespace {

// CUDA's host allocator (pinned memory, `CachingHostAllocator`) reports its blocks to nothing:
// not through the CPU allocator, not to the profiler. The fake's hands out plain host memory the
// same way, so that a scope sees a pinned tensor on the fake as it does on a GPU: not at all.
// It frees at once (the real one caches the block; nothing here observes the difference).
class FakeHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* data = n == 0 ? nullptr : std::malloc(n);
    TORCH_CHECK_WITH(OutOfMemoryError, n == 0 || data != nullptr, "pinned: out of memory");
    if (data != nullptr) {
      const std::lock_guard<std::mutex> lock(mutex_);
      live_.insert(data);
    }
    return {data, data, &raw_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool holds(const void* data) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return live_.count(const_cast<void*>(data)) != 0;
  }

 private:
  static void raw_delete(void* data);
  mutable std::mutex mutex_;
  std::unordered_set<void*> live_;
};

FakeHostAllocator& host_allocator() {
  static auto* allocator = new FakeHostAllocator();  // never destroyed: tensors may outlive main
  return *allocator;
}

void FakeHostAllocator::raw_delete(void* data) {
  if (data == nullptr) return;
  {
    auto& self = host_allocator();
    const std::lock_guard<std::mutex> lock(self.mutex_);
    self.live_.erase(data);
  }
  std::free(data);
}

// One stream per device (the default stream, id 0); events exist but never wait: the fake's
// work is done by the time a kernel returns.
struct FakeCudaGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::CUDA;

  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.is_cuda());
    const c10::Device old = getDevice();
    if (old.index() != d.index()) set_current_device(d.index());
    return old;
  }

  c10::Device getDevice() const override { return {kType, current_device()}; }

  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.is_cuda());
    set_current_device(d.index());
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < device_count()) t_current_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override { return default_stream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*isHighPriority*/) const override {
    return default_stream(d);
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return default_stream(d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return default_stream(s.device()); }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  c10::DeviceCapability getDeviceCapability(c10::Device /*d*/) const override {
    return c10::DeviceCapability();  // every dtype
  }

  void destroyEvent(void* /*event*/, const c10::DeviceIndex /*device_index*/) const noexcept
      override {}
  void record(void** /*event*/, const c10::Stream& /*stream*/,
              const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {}
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void synchronizeEvent(void* /*event*/) const override {}
  double elapsedTime(void* /*event1*/, void* /*event2*/,
                     const c10::DeviceIndex /*device_index*/) const override {
    return 0.0;
  }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {
    count_synchronization();
  }
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {
    count_synchronization();
  }
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/,
                             const c10::Stream& /*stream*/) const override {}

 private:
  static c10::Stream default_stream(c10::Device d) {
    const c10::DeviceIndex index = d.has_index() ? d.index() : current_device();
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, index));
  }
};

// A seed holder, so that torch::manual_seed and at::globalContext().defaultGenerator(cuda:i)
// work. Random kernels run on the CPU through the fallback and draw from the CPU generator.
struct FakeCudaGenerator final : public c10::GeneratorImpl {
  explicit FakeCudaGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::CUDA, index),
                           c10::DispatchKeySet(c10::DispatchKey::CUDA)),
        seed_(seed) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    const uint64_t random = c10::detail::getNonDeterministicRandom(true);
    set_current_seed(random);
    return random;
  }
  void set_state(const c10::TensorImpl& /*new_state*/) override {
    TORCH_CHECK(false, "the fake CUDA generator has no state to set");
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    TORCH_CHECK(false, "the fake CUDA generator has no state to get");
  }
  static c10::DeviceType device_type() { return c10::DeviceType::CUDA; }

 private:
  FakeCudaGenerator* clone_impl() const override {
    auto* copy = new FakeCudaGenerator(device_.index(), seed_);
    copy->offset_ = offset_;
    return copy;
  }

  uint64_t seed_;
  uint64_t offset_ = 0;
};

c10::DeviceIndex resolve(c10::DeviceIndex index) {
  const c10::DeviceIndex resolved = index < 0 ? current_device() : index;
  check_device_index(resolved);
  return resolved;
}

// What at::detail::getCUDAHooks() returns: tch's Cuda::is_available()/device_count(),
// at::hasCUDA(), at::accelerator::getAccelerator() and the lazy init all go through it.
struct FakeCUDAHooks final : public at::CUDAHooksInterface {
  explicit FakeCUDAHooks(at::CUDAHooksArgs /*args*/) {}

  // at::globalContext().lazyInitDevice(CUDA) calls this once; like CUDAHooks::init it
  // initializes the caching allocator on every device.
  void init() const override { allocator().init(); }

  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasCUDA() const override { return device_count() > 0; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  int getNumGPUs() const override { return device_count(); }

  c10::DeviceIndex current_device() const override { return fake_cuda::current_device(); }
  c10::DeviceIndex getCurrentDevice() const override { return fake_cuda::current_device(); }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = fake_cuda::current_device();
    if (device >= 0) set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  void deviceSynchronize(c10::DeviceIndex /*device_index*/) const override {}

  // The autograd engine asks before touching a device's streams; gpu-scope's allocator probe
  // asks which device the process already works on.
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return device_index < device_count() && allocator().has_context(device_index);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    static const auto* generators = [] {
      auto* all = new std::vector<at::Generator>();
      for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
        all->push_back(at::make_generator<FakeCudaGenerator>(i));
      }
      return all;
    }();
    return (*generators)[static_cast<size_t>(resolve(device_index))];
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return at::make_generator<FakeCudaGenerator>(resolve(device_index));
  }

  c10::Device getDeviceFromPtr(void* data) const override {
    const auto device = allocator().device_of(data);
    return {c10::DeviceType::CUDA, device ? *device : fake_cuda::current_device()};
  }
  bool isPinnedPtr(const void* data) const override { return host_allocator().holds(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &host_allocator(); }
  c10::Allocator* getCUDADeviceAllocator() const override { return &allocator(); }

  std::string showConfig() const override {
    return "gpu-scope fake CUDA device on host memory (tests only)\n";
  }
};

}  // namespace

}  // namespace gpu_scope::fake_cuda

C10_REGISTER_GUARD_IMPL(CUDA, gpu_scope::fake_cuda::FakeCudaGuardImpl)

namespace at {
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", gpu_scope::fake_cuda::FakeCUDAHooks)
}  // namespace at
