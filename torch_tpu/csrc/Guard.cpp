// Guard.cpp: the PrivateUse1 DeviceGuardImpl. One thread-local current device,
// one (default) stream per device; sync goes to the core.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>

#include "Common.h"

namespace torch_tpu {
namespace {

thread_local c10::DeviceIndex g_current = 0;

// Streams: every stream of a device feeds the device's one queue (the
// core's per-device launch order), so work on any two streams is ordered: a
// conservative, always correct reading of stream semantics. Stream ids only
// tell streams apart for PyTorch (torch.tpu.Stream, current_stream).
constexpr int kMaxDevices = 64;
thread_local c10::StreamId g_current_stream[kMaxDevices] = {};
std::atomic<c10::StreamId> g_next_stream{1};

tpurt_event_t* as_event(void* event) { return static_cast<tpurt_event_t*>(event); }

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

  static c10::DeviceIndex index_of(c10::Device d) { return d.has_index() ? d.index() : g_current; }
  static c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, index), id);
  }

  c10::Stream getStream(c10::Device d) const override {
    const c10::DeviceIndex index = index_of(d);
    TORCH_CHECK(index >= 0 && index < kMaxDevices, "tpu: invalid device index ", static_cast<int>(index));
    return make_stream(index, g_current_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(index_of(d), 0); }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return make_stream(index_of(d), g_next_stream.fetch_add(1));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*isHighPriority*/) const override {
    return getNewStream(d, 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::DeviceIndex index = s.device_index();
    TORCH_CHECK(index >= 0 && index < kMaxDevices, "tpu: invalid device index ", static_cast<int>(index));
    const c10::Stream old = make_stream(index, g_current_stream[index]);
    g_current_stream[index] = s.id();
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  // ---- events: markers in the device's queue, timed by PJRT completion events
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    tpurt_event_free(as_event(event));
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    tpurt_event_t* recorded = nullptr;
    check(tpurt_event_record(stream.device_index(), &recorded), "event record");
    tpurt_event_free(as_event(*event));
    *event = recorded;
  }
  // The device's one queue already orders the waiting stream after the event.
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override {
    return event == nullptr || tpurt_event_query(as_event(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) tpurt_event_synchronize(as_event(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    return tpurt_event_elapsed_ms(as_event(start), as_event(end));
  }

  bool queryStream(const c10::Stream& s) const override {
    tpurt_event_t* marker = nullptr;
    check(tpurt_event_record(s.device_index(), &marker), "stream query");
    const bool done = tpurt_event_query(marker);
    tpurt_event_free(marker);
    return done;
  }
  void synchronizeStream(const c10::Stream& s) const override { synchronizeDevice(s.device_index()); }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    check(tpurt_synchronize(index), "synchronize");
  }
  // Buffers stay alive while queued work uses them: nothing to record.
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

}  // namespace

c10::DeviceIndex current_device() { return g_current; }

void set_current_device(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0, "tpu: invalid device index ", static_cast<int>(index));
  g_current = index;
}

c10::DeviceIndex device_count() noexcept {
  tpurt_status_ignore(tpurt_runtime_init());  // the reason surfaces at first use
  return static_cast<c10::DeviceIndex>(tpurt_device_count());
}

}  // namespace torch_tpu

C10_REGISTER_GUARD_IMPL(PrivateUse1, torch_tpu::TpuGuardImpl);
