// Guard.cpp: the PrivateUse1 DeviceGuardImpl. One thread-local current device,
// one (default) stream per device; sync goes to the core.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "Common.h"

namespace torch_tpu {
namespace {

thread_local c10::DeviceIndex g_current = 0;

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old(kTpu, g_current);
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return {kTpu, g_current}; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) g_current = d.index();
  }

  c10::Stream getStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  bool queryStream(const c10::Stream& s) const override {
    synchronizeStream(s);
    return true;
  }
  void synchronizeStream(const c10::Stream& s) const override { synchronizeDevice(s.device_index()); }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    check(tpurt_synchronize(index), "synchronize");
  }
};

}  // namespace

c10::DeviceIndex current_device() { return g_current; }

void set_current_device(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0, "tpu: invalid device index ", static_cast<int>(index));
  g_current = index;
}

c10::DeviceIndex device_count() noexcept {
  tpurt_status_free(tpurt_runtime_init());  // the reason surfaces at first use
  return static_cast<c10::DeviceIndex>(tpurt_device_count());
}

}  // namespace torch_tpu

C10_REGISTER_GUARD_IMPL(PrivateUse1, torch_tpu::TpuGuardImpl);
