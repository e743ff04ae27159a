// Profiler.cpp: tpu program executions in torch.profiler traces. PyTorch's
// PrivateUse1 profiler registry hands Kineto a child profiler; its session
// reads the core's launch log (every program launch and asynchronous copy,
// with the device time measured from PJRT completion events) for the span of
// the trace and logs one device activity per launch: its name, op count, and
// whether it was compiled or a cache hit. Each launch is linked to the op
// that queued it: the profiler pushes every op's correlation id to the
// session (on the op's thread), the core stamps the innermost one on the
// launches that thread queues, and Kineto's lookup by that id gives the op's
// activity, so key_averages() shows the device time in the op's "Self TPU"
// column (a fused-eager graph is linked to the op that flushed it).
// Kineto formats trace metadata with fmt, which libtorch does not export:
// compile the few fmt functions it needs into this file.
#define FMT_HEADER_ONLY 1
#ifndef USE_KINETO
#define USE_KINETO 1  // the torch wheels are built with Kineto
#endif
#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <TraceSpan.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <chrono>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "Common.h"

namespace torch_tpu {
namespace {

// The open ops' correlation ids on this thread, innermost last.
thread_local std::vector<uint64_t> t_correlations;

int64_t system_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class TpuProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    uint64_t next = 0;
    tpurt_launch_log(0, nullptr, 0, &next);
    since_ = next;
    start_ns_ = tpurt_now_ns();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    // Work launched inside the span completes before it is read; its errors
    // are left for the user's next synchronize.
    tpurt_wait_idle();
    stop_ns_ = tpurt_now_ns();
    std::vector<tpurt_launch_record_t> batch(1024);
    uint64_t next = since_;
    for (;;) {
      const int n = tpurt_launch_log(next, batch.data(), static_cast<int>(batch.size()), &next);
      for (int i = 0; i < n; ++i)
        if (batch[i].launch_ns >= start_ns_) records_.push_back(batch[i]);
      if (n < static_cast<int>(batch.size())) break;
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::vector<std::string> errors() override { return {}; }

  void pushCorrelationId(uint64_t id) override {
    t_correlations.push_back(id);
    tpurt_set_launch_correlation(id);
  }
  void popCorrelationId() override {
    if (!t_correlations.empty()) t_correlations.pop_back();
    tpurt_set_launch_correlation(t_correlations.empty() ? 0 : t_correlations.back());
  }

  void processTrace(libkineto::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    // The core's times are on the monotonic clock; traces use the epoch.
    const int64_t offset = system_now_ns() - static_cast<int64_t>(tpurt_now_ns());
    span_ = std::make_unique<libkineto::TraceSpan>(static_cast<int64_t>(start_ns_) + offset,
                                                   static_cast<int64_t>(stop_ns_) + offset, "tpu");
    for (const tpurt_launch_record_t& r : records_) {
      libkineto::GenericTraceActivity& a = activities_.emplace_back(
          *span_, libkineto::ActivityType::CONCURRENT_KERNEL, std::string("tpu: ") + r.name);
      a.startTime = static_cast<int64_t>(r.start_ns) + offset;
      a.endTime = static_cast<int64_t>(r.end_ns) + offset;
      a.device = r.device;
      a.resource = 0;
      a.id = static_cast<int64_t>(activities_.size());
      if (linked && r.correlation) a.linked = linked(static_cast<int32_t>(r.correlation));
      a.addMetadataQuoted("program", r.name);
      a.addMetadata("ops", r.num_ops);
      a.addMetadataQuoted("kind", r.is_copy ? "copy to host" : (r.compiled ? "compile" : "cache hit"));
      a.addMetadata("device time us", static_cast<double>(r.end_ns - r.start_ns) / 1e3);
      a.addMetadata("queued us", static_cast<double>(r.start_ns - r.launch_ns) / 1e3);
      a.log(logger);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

 private:
  uint64_t since_ = 0, start_ns_ = 0, stop_ns_ = 0;
  std::vector<tpurt_launch_record_t> records_;
  std::unique_ptr<libkineto::TraceSpan> span_;
  std::deque<libkineto::GenericTraceActivity> activities_;  // stable addresses while logged
};

class TpuActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override { return activities_; }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>&,
                                                                 const libkineto::Config&) override {
    return std::make_unique<TpuProfilerSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<libkineto::ActivityType>&,
                                                                 const libkineto::Config&) override {
    return std::make_unique<TpuProfilerSession>();
  }

 private:
  std::string name_ = "tpu";
  std::set<libkineto::ActivityType> activities_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                                libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(TpuActivityProfiler);

}  // namespace
}  // namespace torch_tpu
