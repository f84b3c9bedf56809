// The simulated `neuron` device: memory, device guard, PrivateUse1 hooks, generators, views.
//
// Neuron memory ("simulated HBM") is host memory with a 64-byte header recording its size and
// device, so every live byte is counted per device (torch.neuron.memory_allocated). Everything
// runs synchronously on the host, so streams and events are bookkeeping only.
#include "neuron.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/intrusive_ptr.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_set>

namespace nki_neuron {
namespace {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

std::atomic<int> g_count{8};
thread_local c10::DeviceIndex t_current = 0;
thread_local std::array<c10::StreamId, kMaxDevices> t_stream{};
std::atomic<c10::StreamId> g_next_stream{0};

std::array<std::atomic<int64_t>, kMaxDevices> g_bytes{};
std::array<std::atomic<int64_t>, kMaxDevices> g_peak{};

void count_bytes(c10::DeviceIndex index, int64_t delta) {
  const int64_t now = g_bytes[index].fetch_add(delta) + delta;
  int64_t peak = g_peak[index].load();
  while (now > peak && !g_peak[index].compare_exchange_weak(peak, now)) {
  }
}

// ---------------------------------------------------------------- memory

// The header in front of every block: what to uncount on free. 64 bytes keep the data
// 64-byte aligned, as torch's CPU allocator does.
struct Header {
  size_t nbytes;
  c10::DeviceIndex device;
};
constexpr size_t kHeader = 64;

void free_block(void* data) {
  char* base = static_cast<char*>(data) - kHeader;
  const auto* header = reinterpret_cast<Header*>(base);
  count_bytes(header->device, -static_cast<int64_t>(header->nbytes));
  c10::free_cpu(base);
}

c10::DataPtr allocate_on(c10::DeviceIndex index, size_t nbytes, c10::Device label) {
  if (nbytes == 0) {
    return {nullptr, nullptr, &free_block, label};
  }
  char* base = static_cast<char*>(c10::alloc_cpu(nbytes + kHeader));
  auto* header = reinterpret_cast<Header*>(base);
  header->nbytes = nbytes;
  header->device = index;
  count_bytes(index, static_cast<int64_t>(nbytes));
  void* data = base + kHeader;
  return {data, data, &free_block, label};
}

// Allocates on the current device; `label_cpu` makes the DataPtr claim the CPU device (the
// backing allocator of CPU views, whose buffers later move into neuron storages). A
// DeviceAllocator, so torch.accelerator.memory_allocated() and friends read our counters.
class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  explicit NeuronAllocator(bool label_cpu) : label_cpu_(label_cpu) {}

  c10::DataPtr allocate(size_t nbytes) override {
    const auto index = t_current;
    return allocate_on(index, nbytes, label_cpu_ ? c10::Device(c10::kCPU) : device_of(index));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}  // nothing is cached
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto& bytes = stats.allocated_bytes[0];  // StatType::AGGREGATE
    bytes.current = memory_allocated(index);
    bytes.peak = max_memory_allocated(index);
    stats.reserved_bytes[0] = bytes;  // no cache: reserved == allocated
    stats.active_bytes[0] = bytes;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex index) override { reset_peak(index); }

 private:
  bool label_cpu_;
};

NeuronAllocator g_device_allocator(false);
NeuronAllocator g_view_allocator(true);

// Pinned host memory is ordinary host memory here; we remember the blocks so that
// `is_pinned()` answers truthfully for tensors that went through `pin_memory()`.
std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(data);
  }
  c10::free_cpu(data);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) {
      return {nullptr, nullptr, &free_pinned, c10::Device(c10::kCPU)};
    }
    void* data = c10::alloc_cpu(nbytes);
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.insert(data);
    return {data, data, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

// ---------------------------------------------------------------- RNG

std::mutex g_gen_mutex;
std::array<std::optional<at::Generator>, kMaxDevices> g_gens;

// ---------------------------------------------------------------- device guard

struct EventData {
  std::chrono::steady_clock::time_point when;
};

c10::DeviceIndex index_or_current(c10::Device d) {
  return d.has_index() ? d.index() : t_current;
}

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device d) const override {
    const auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return device_of(t_current); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "expected a neuron device, got ", d);
    if (d.has_index()) {
      set_current_device(d.index());
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) {
      t_current = d.index();
    }
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  c10::Stream getStream(c10::Device d) const override {
    const auto index = index_or_current(d);
    return c10::Stream(c10::Stream::UNSAFE, device_of(index), t_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, device_of(index_or_current(d)));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, device_of(index_or_current(d)), ++g_next_stream);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    return getNewStream(d, high ? -1 : 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const auto old = getStream(s.device());
    t_stream[s.device_index()] = s.id();
    return old;
  }
  // The simulator runs every op to completion before returning: nothing to wait for.
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}

  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) {
      *event = new EventData();
    }
    static_cast<EventData*>(*event)->when = std::chrono::steady_clock::now();
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<EventData*>(event);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "both events must be recorded before calling elapsed_time()");
    const auto d = static_cast<EventData*>(end)->when - static_cast<EventData*>(start)->when;
    return std::chrono::duration<double, std::milli>(d).count();
  }
};

// ---------------------------------------------------------------- hooks

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return t_current; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const auto old = t_current;
    set_current_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    return default_generator(d);
  }
  // Random ops run torch's CPU kernels, which accept only CPU generators; a fresh CPU
  // generator is a stream of its own (so torch.Generator("neuron").device prints cpu).
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override { return device_of(t_current); }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned.count(data) > 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage(storage.unsafeGetStorageImpl(), nbytes);
  }
};

// ---------------------------------------------------------------- views

void release_neuron_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

// The bytes of a CPU storage adopted by a neuron storage: kept alive and counted.
struct Adopted {
  c10::Storage keep;
  int64_t nbytes;
  c10::DeviceIndex device;
};

void release_adopted(void* ctx) {
  auto* adopted = static_cast<Adopted*>(ctx);
  count_bytes(adopted->device, -adopted->nbytes);
  delete adopted;
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl)
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator)

const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  return true;
}();

}  // namespace

// ---------------------------------------------------------------- public functions

int device_count() { return g_count.load(); }

void set_device_count(int n) {
  TORCH_CHECK(n >= 1 && n <= kMaxDevices, "NEURON_SIM_DEVICE_COUNT must be in 1..",
              kMaxDevices, ", got ", n);
  g_count.store(n);
}

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "Invalid device: neuron:", int(index),
              " (torch.neuron.device_count() is ", device_count(), ")");
}

c10::DeviceIndex current_device() { return t_current; }

void set_current_device(c10::DeviceIndex index) {
  check_index(index);
  t_current = index;
}

c10::Device device_of(c10::DeviceIndex index) { return c10::Device(kNeuron, index); }

c10::Allocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* view_allocator() { return &g_view_allocator; }

int64_t memory_allocated(c10::DeviceIndex index) {
  check_index(index);
  return g_bytes[index].load();
}

int64_t max_memory_allocated(c10::DeviceIndex index) {
  check_index(index);
  return g_peak[index].load();
}

void reset_peak(c10::DeviceIndex index) {
  check_index(index);
  g_peak[index].store(g_bytes[index].load());
}

void resize_storage(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const auto index = storage->device().index();
  c10::DataPtr fresh = allocate_on(index, nbytes, device_of(index));
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep > 0) {
    std::memcpy(fresh.get(), storage->data(), keep);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  if (index < 0) {
    index = t_current;
  }
  check_index(index);
  std::lock_guard<std::mutex> lock(g_gen_mutex);
  auto& slot = g_gens[index];
  if (!slot.has_value()) {
    slot = at::detail::createCPUGenerator();
  }
  return *slot;
}

at::Tensor tensor_on(const c10::Storage& storage, const at::Tensor& like, c10::DispatchKey key) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(storage),
                                                      c10::DispatchKeySet(key), like.dtype());
  auto* impl = out.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) {
    impl->_set_conj(true);
  }
  if (like.is_neg()) {
    impl->_set_neg(true);
  }
  return out;
}

c10::Storage cpu_storage_over(c10::StorageImpl* neuron, bool resizable) {
  c10::raw::intrusive_ptr::incref(neuron);
  c10::DataPtr ptr(neuron->mutable_data(), neuron, &release_neuron_storage,
                   c10::Device(c10::kCPU));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), neuron->nbytes(), std::move(ptr),
      resizable ? view_allocator() : nullptr, resizable));
}

c10::Storage neuron_storage_over(const c10::Storage& cpu, c10::DeviceIndex index) {
  const auto& ptr = cpu.data_ptr();
  // A CPU view of a neuron storage goes back to that storage (round trips stay zero-copy).
  if (ptr.get_deleter() == &release_neuron_storage) {
    auto* neuron = static_cast<c10::StorageImpl*>(ptr.get_context());
    return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(neuron));
  }
  const auto nbytes = static_cast<int64_t>(cpu.nbytes());
  count_bytes(index, nbytes);
  auto* adopted = new Adopted{cpu, nbytes, index};
  c10::DataPtr data(const_cast<void*>(cpu.data()), adopted, &release_adopted, device_of(index));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), cpu.nbytes(), std::move(data), device_allocator(),
      true));
}

at::Tensor as_cpu(const at::Tensor& t) {
  if (!t.defined() || t.is_cpu()) {
    return t;
  }
  TORCH_CHECK(t.is_privateuseone(), "as_cpu expects a neuron or CPU tensor, got ", t.device());
  TORCH_CHECK(t.has_storage(), "as_cpu: neuron tensors without storage are not supported");
  return tensor_on(cpu_storage_over(t.storage().unsafeGetStorageImpl(), false), t,
                   c10::DispatchKey::CPU);
}

at::Tensor as_neuron(const at::Tensor& t, c10::DeviceIndex index) {
  if (!t.defined() || t.is_privateuseone()) {
    return t;
  }
  TORCH_CHECK(t.is_cpu(), "as_neuron expects a CPU tensor, got ", t.device());
  TORCH_CHECK(t.layout() == c10::kStrided, "as_neuron: only strided tensors are supported");
  if (index < 0) {
    index = t_current;
  }
  check_index(index);
  return tensor_on(neuron_storage_over(t.storage(), index), t, c10::DispatchKey::PrivateUse1);
}

}  // namespace nki_neuron
