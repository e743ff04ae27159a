// Hooks.cpp: PrivateUse1HooksInterface. Each hook delegates to the runtime,
// the guard or the generators; nothing is decided here.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "Common.h"

namespace torch_tpu {
namespace {

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  void init() const override { check_consume(tpurt_runtime_init(), "tpu init"); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < device_count();
  }
  c10::DeviceIndex deviceCount() const override { return device_count(); }

  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_device();
    set_current_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override { return new_generator(index); }

  // Addresses are fake and carry no device; the current one is the best answer.
  at::Device getDeviceFromPtr(void*) const override { return {kTpu, current_device()}; }
  // Pinned memory never initialises the runtime: CPU-only programs
  // (DataLoader(pin_memory=True) with "tpu" as the accelerator) stay as
  // they were.
  bool isPinnedPtr(const void* data) const override { return tpurt_host_contains(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return host_allocator(); }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};

const bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  return true;
}();

}  // namespace
}  // namespace torch_tpu
