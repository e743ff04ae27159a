// Allocator.cpp: PrivateUse1 storages are core storage objects. The DataPtr's
// data is a fake, never dereferenced address; its context is the storage.
// The allocator is a c10::DeviceAllocator so that torch.accelerator.memory_*
// works: its statistics are the core's counters of live device buffers
// (device memory is allocated when a value is computed, not when a storage
// is made), and the device's limits are what the plugin reports. Pinned
// host memory (pin_memory, non_blocking copies) comes from the core too.
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include "Common.h"

namespace torch_tpu {
namespace {

void release(void* ctx) { tpurt_storage_release(static_cast<tpurt_storage_t*>(ctx)); }

struct TpuAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    tpurt_storage_t* storage = nullptr;
    check_consume(tpurt_storage_create_checked(current_device(), nbytes, &storage), "tpu allocator");
    return make_data_ptr(storage);
  }

  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu storages hold no host bytes to copy; copy tensors (tensor.copy_) instead");
  }

  bool initialized() override { return device_count() > 0; }
  // Buffers are freed when their last reference goes: nothing is cached.
  void emptyCache(c10::MempoolId_t) override {}
  // One queue per device, and buffers outlive the work that uses them.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    const auto current = static_cast<int64_t>(tpurt_memory_allocated(device));
    const auto peak = static_cast<int64_t>(tpurt_max_memory_allocated(device));
    for (auto* array :
         {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      auto& all = (*array)[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
      all.current = current;
      all.peak = peak;
    }
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex device) override { tpurt_reset_peak_memory(device); }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const tpurt_device_memory_t memory = device_memory(device);
    TORCH_CHECK(memory.bytes_limit >= 0,
                "mem_get_info: the PJRT plugin does not report the memory of tpu:", static_cast<int>(device));
    return {static_cast<size_t>(std::max<int64_t>(memory.bytes_free, 0)),
            static_cast<size_t>(memory.bytes_limit)};
  }
};

TpuAllocator g_allocator;

void free_host(void* ptr) { tpurt_host_free(ptr); }

// Host memory for pin_memory() and non_blocking copies (see tpurt_host_alloc).
struct TpuHostAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    if (nbytes > 0) check_consume(tpurt_host_alloc(nbytes, &ptr), "pin_memory");
    return {ptr, ptr, &free_host, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

TpuHostAllocator g_host_allocator;

}  // namespace

c10::Allocator* host_allocator() { return &g_host_allocator; }

tpurt_device_memory_t device_memory(c10::DeviceIndex device) {
  tpurt_device_memory_t memory{};
  check_consume(tpurt_device_memory(device, &memory), "tpu device memory");
  return memory;
}

c10::DataPtr make_data_ptr(tpurt_storage_t* storage) {
  return {tpurt_storage_address(storage), storage, &release,
          c10::Device(kTpu, static_cast<c10::DeviceIndex>(tpurt_storage_device(storage)))};
}

tpurt_storage_t* storage_of(const c10::Storage& storage, std::string_view op) {
  const c10::DataPtr& ptr = storage.data_ptr();
  TORCH_CHECK(ptr.get_deleter() == &release && ptr.get_context() != nullptr, op,
              ": tensor on tpu has no tpu storage behind it");
  return static_cast<tpurt_storage_t*>(ptr.get_context());
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  if (storage.data_ptr().get_context() == nullptr) {  // never allocated
    impl->set_data_ptr_noswap(g_allocator.allocate(nbytes));
  } else {
    tpurt_storage_t* st = storage_of(storage, "resize_");
    check_consume(tpurt_storage_resize(st, nbytes), "resize_");
    tpurt_storage_retain(st);                      // the new DataPtr's reference; the old one drops its own
    impl->set_data_ptr_noswap(make_data_ptr(st));  // the address may move with the size
  }
  impl->set_nbytes(nbytes);
}

}  // namespace torch_tpu

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &torch_tpu::g_allocator);
