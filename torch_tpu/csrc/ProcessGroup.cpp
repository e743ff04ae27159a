// ProcessGroup.cpp: the c10d backend of "tpu" tensors where the PJRT client
// cannot span processes (the CPU plugin): every collective is the host
// backend's own (gloo's), run on host copies of the tpu buffers.
//
// Why C++: DDP's Reducer and the functional collectives
// (torch.ops._c10d_functional.*, DTensor, FSDP2) call the group's backend
// from C++, and torch 2.13 binds c10d::Backend without a trampoline (a Python
// subclass has no constructor), so the backend must be a C++ class. It holds
// no collective logic: stage tpu -> host, call the wrapped backend, and copy
// results host -> tpu when its work completes. CPU tensors pass through.
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "Common.h"

namespace torch_tpu {
namespace {

using c10d::Backend;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using Tensors = std::vector<at::Tensor>;

bool on_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == kTpu; }

// What the host backend reads and writes for |t|, and the copies back.
struct Staging {
  Tensors device;  // tpu tensors the results go back to
  Tensors host;    // their host buffers
  // Set for ReduceOp.AVG, which gloo lacks: gloo sums, the host result is
  // divided by the group size before it goes back (a scale, not a collective).
  int64_t average_over = 0;

  // A host buffer holding |t|'s value (an input, or an in-place operand).
  at::Tensor in(const at::Tensor& t, bool write_back) {
    if (!on_tpu(t)) return t;
    at::Tensor h = t.to(at::kCPU).contiguous();
    if (write_back) keep(t, h);
    return h;
  }
  // An uninitialised host buffer for the output |t|.
  at::Tensor out(const at::Tensor& t) {
    if (!on_tpu(t)) return t;
    at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU));
    keep(t, h);
    return h;
  }
  Tensors in_list(const Tensors& ts, bool write_back) {
    Tensors r;
    r.reserve(ts.size());
    for (const auto& t : ts) r.push_back(in(t, write_back));
    return r;
  }
  Tensors out_list(const Tensors& ts) {
    Tensors r;
    r.reserve(ts.size());
    for (const auto& t : ts) r.push_back(out(t));
    return r;
  }
  void keep(const at::Tensor& d, const at::Tensor& h) {
    device.push_back(d);
    host.push_back(h);
  }
  void finish() {
    for (size_t i = 0; i < device.size(); ++i) {
      if (average_over > 0) {
        if (at::isFloatingType(host[i].scalar_type()) || at::isComplexType(host[i].scalar_type()))
          host[i].div_(average_over);
        else
          host[i].div_(average_over, "trunc");
      }
      device[i].copy_(host[i]);
    }
  }
};

// The work of one collective: completes once the host backend's work has and
// the results are on their tpu tensors (the copies are queued on the device,
// so later device work sees them). Its future carries |result|, the caller's
// own (tpu) tensors, as the host backend's future carries its inputs.
class TpuHostWork : public Work {
 public:
  TpuHostWork(WorkPtr host, Staging staging, Tensors result, c10d::OpType op)
      : Work(-1, op), host_(std::move(host)), staging_(std::move(staging)), result_(std::move(result)) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  }

  // Chains the copies back onto the host work's future; separate from the
  // constructor because the callback holds a reference to this work (the
  // future drops its callbacks once it has run them).
  static WorkPtr start(c10::intrusive_ptr<TpuHostWork> self) {
    c10::intrusive_ptr<c10::ivalue::Future> host_future;
    try {
      host_future = self->host_->getFuture();
    } catch (const std::exception&) {
      host_future.reset();  // send/recv: gloo has no future; wait() completes
    }
    if (host_future) {
      self->chained_ = true;
      // Runs on the thread that completes the host work (gloo's worker); the
      // engine serialises device work across threads.
      host_future->addCallback([self](c10::ivalue::Future& f) {
        if (f.hasError())
          self->fail(f.exception_ptr());
        else
          self->complete();
      });
    }
    return self;
  }

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() ? future_->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  bool wait(std::chrono::milliseconds timeout) override {
    host_->wait(timeout);  // raises the host backend's error (a dead peer, a timeout)
    if (!chained_) complete();
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }

 private:
  void complete() {
    std::call_once(done_, [this] {
      try {
        staging_.finish();
        future_->markCompleted(c10::IValue(result_));
      } catch (...) {
        future_->setError(std::current_exception());
      }
    });
  }
  void fail(std::exception_ptr e) {
    std::call_once(done_, [&] { future_->setError(std::move(e)); });
  }

  WorkPtr host_;
  Staging staging_;
  Tensors result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::once_flag done_;
  bool chained_ = false;
};

WorkPtr finish(WorkPtr host, Staging staging, Tensors result, c10d::OpType op) {
  return TpuHostWork::start(
      c10::make_intrusive<TpuHostWork>(std::move(host), std::move(staging), std::move(result), op));
}

Tensors flat(const std::vector<Tensors>& lists) {
  Tensors r;
  for (const auto& l : lists) r.insert(r.end(), l.begin(), l.end());
  return r;
}

class TpuHostBackend : public Backend {
 public:
  explicit TpuHostBackend(c10::intrusive_ptr<Backend> host)
      : Backend(host->getRank(), host->getSize()), host_(std::move(host)) {}

  const std::string getBackendName() const override { return "tpu"; }
  c10::intrusive_ptr<Backend> host() const { return host_; }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    agree("broadcast", tensors, true);
    Staging s;
    Tensors h = s.in_list(tensors, true);
    WorkPtr work = host_->broadcast(h, opts);
    return finish(std::move(work), std::move(s), tensors, c10d::OpType::BROADCAST);
  }

  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    agree("all_reduce", tensors, true);
    Staging s;
    Tensors h = s.in_list(tensors, true);
    WorkPtr work = host_->allreduce(h, host_options(opts, s));
    return finish(std::move(work), std::move(s), tensors, c10d::OpType::ALLREDUCE);
  }

  WorkPtr allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    Staging s;
    Tensors h = s.in_list(tensors, true);
    c10d::AllreduceCoalescedOptions o = opts;
    average(o.reduceOp, s);
    WorkPtr work = host_->allreduce_coalesced(h, o);
    return finish(std::move(work), std::move(s), tensors, c10d::OpType::ALLREDUCE_COALESCED);
  }

  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    agree("reduce", tensors, true);
    Staging s;
    Tensors h = s.in_list(tensors, true);
    c10d::ReduceOptions o = opts;
    average(o.reduceOp, s);
    WorkPtr work = host_->reduce(h, o);
    return finish(std::move(work), std::move(s), tensors, c10d::OpType::REDUCE);
  }

  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override {
    agree("all_gather", inputs, true);
    Staging s;
    Tensors hin = s.in_list(inputs, false);
    std::vector<Tensors> hout;
    for (auto& l : outputs) hout.push_back(s.out_list(l));
    WorkPtr work = host_->allgather(hout, hin, opts);
    return finish(std::move(work), std::move(s), flat(outputs), c10d::OpType::ALLGATHER);
  }

  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override {
    agree("all_gather_into_tensor", {input}, true);
    Staging s;
    at::Tensor hin = s.in(input, false);
    at::Tensor hout = s.out(output);
    WorkPtr work = host_->_allgather_base(hout, hin, opts);
    return finish(std::move(work), std::move(s), {output}, c10d::OpType::_ALLGATHER_BASE);
  }

  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override {
    Staging s;
    Tensors hin = s.in_list(inputs, false);
    std::vector<Tensors> hout;
    for (auto& l : outputs) hout.push_back(s.out_list(l));
    WorkPtr work = host_->allgather_coalesced(hout, hin, opts);
    return finish(std::move(work), std::move(s), flat(outputs), c10d::OpType::ALLGATHER_COALESCED);
  }

  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    Staging s;
    Tensors hin = s.in_list(inputs, false);
    Tensors hout = s.out_list(outputs);
    WorkPtr work = host_->allgather_into_tensor_coalesced(hout, hin, opts);
    return finish(std::move(work), std::move(s), outputs, c10d::OpType::COALESCED);
  }

  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override {
    Staging s;
    Tensors hin = s.in_list(inputs, false);
    std::vector<Tensors> hout;
    for (auto& l : outputs) hout.push_back(s.out_list(l));
    WorkPtr work = host_->gather(hout, hin, opts);
    return finish(std::move(work), std::move(s), flat(outputs), c10d::OpType::GATHER);
  }

  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions& opts) override {
    Staging s;
    std::vector<Tensors> hin;
    for (auto& l : inputs) hin.push_back(s.in_list(l, false));
    Tensors hout = s.out_list(outputs);
    WorkPtr work = host_->scatter(hout, hin, opts);
    return finish(std::move(work), std::move(s), outputs, c10d::OpType::SCATTER);
  }

  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    agree("reduce_scatter", outputs, true);
    Staging s;
    std::vector<Tensors> hin;
    for (auto& l : inputs) hin.push_back(s.in_list(l, false));
    Tensors hout = s.out_list(outputs);
    WorkPtr work = host_->reduce_scatter(hout, hin, host_options(opts, s));
    return finish(std::move(work), std::move(s), outputs, c10d::OpType::REDUCE_SCATTER);
  }

  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    agree("reduce_scatter_tensor", {input}, true);
    Staging s;
    at::Tensor hin = s.in(input, false);
    at::Tensor hout = s.out(output);
    WorkPtr work = host_->_reduce_scatter_base(hout, hin, host_options(opts, s));
    return finish(std::move(work), std::move(s), {output}, c10d::OpType::_REDUCE_SCATTER_BASE);
  }

  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    Staging s;
    Tensors hin = s.in_list(inputs, false);
    Tensors hout = s.out_list(outputs);
    WorkPtr work = host_->reduce_scatter_tensor_coalesced(hout, hin, host_options(opts, s));
    return finish(std::move(work), std::move(s), outputs, c10d::OpType::COALESCED);
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override {
    agree("all_to_all_single", {input}, false);
    Staging s;
    at::Tensor hin = s.in(input, false);
    at::Tensor hout = s.out(output);
    WorkPtr work = host_->alltoall_base(hout, hin, output_splits, input_splits, opts);
    return finish(std::move(work), std::move(s), {output}, c10d::OpType::ALLTOALL_BASE);
  }

  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override {
    Staging s;
    Tensors hin = s.in_list(inputs, false);
    Tensors hout = s.out_list(outputs);
    WorkPtr work = host_->alltoall(hout, hin, opts);
    return finish(std::move(work), std::move(s), outputs, c10d::OpType::ALLTOALL);
  }

  WorkPtr send(Tensors& tensors, int dst, int tag) override {
    Staging s;
    Tensors h = s.in_list(tensors, false);
    WorkPtr work = host_->send(h, dst, tag);
    return finish(std::move(work), std::move(s), tensors, c10d::OpType::SEND);
  }

  WorkPtr recv(Tensors& tensors, int src, int tag) override {
    Staging s;
    Tensors h = s.out_list(tensors);
    WorkPtr work = host_->recv(h, src, tag);
    return finish(std::move(work), std::move(s), tensors, c10d::OpType::RECV);
  }

  WorkPtr recvAnysource(Tensors& tensors, int tag) override {
    Staging s;
    Tensors h = s.out_list(tensors);
    WorkPtr work = host_->recvAnysource(h, tag);
    return finish(std::move(work), std::move(s), tensors, c10d::OpType::RECVANYSOURCE);
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override { return host_->barrier(opts); }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }
  c10::intrusive_ptr<Options> getBackendOptions() override { return host_->getBackendOptions(); }
  void setGroupUid(const std::string& uid) override {
    Backend::setGroupUid(uid);
    host_->setGroupUid(uid);
  }
  void abort() override { host_->abort(); }
  void shutdown() override { host_->shutdown(); }

 private:
  // Ranks that pass different shapes or dtypes to one collective would make
  // gloo abort the process (a size mismatch in its transport) or hang. So the
  // ranks first gather a small descriptor of their operands (op, dtype, dims)
  // and every rank raises the same error naming the op and each rank's
  // operand. One small host all-gather per collective;
  // TORCH_TPU_DIST_CHECK=0 skips it.
  void agree(const char* op, const Tensors& tensors, bool with_shape) {
    if (!check_ || tensors.empty() || getSize() == 1) return;
    constexpr int64_t kDims = 8, kWidth = 4 + kDims;
    const at::Tensor& t = tensors[0];
    std::vector<int64_t> mine(kWidth, -1);
    mine[0] = static_cast<int64_t>(std::hash<std::string_view>{}(op) & 0x7fffffff);
    mine[1] = static_cast<int64_t>(t.scalar_type());
    mine[2] = static_cast<int64_t>(tensors.size());
    mine[3] = with_shape ? t.dim() : -1;
    for (int64_t i = 0; with_shape && i < std::min<int64_t>(t.dim(), kDims); ++i) mine[4 + i] = t.size(i);
    at::Tensor local = at::tensor(mine, at::kLong);
    at::Tensor all = at::empty({getSize() * kWidth}, at::kLong);
    host_->_allgather_base(all, local)->wait();
    const int64_t* a = all.data_ptr<int64_t>();
    bool same = true;
    for (int64_t r = 1; r < getSize() && same; ++r) same = std::equal(a, a + kWidth, a + r * kWidth);
    if (same) return;
    std::string ranks;
    for (int64_t r = 0; r < getSize(); ++r) {
      const int64_t* d = a + r * kWidth;
      ranks += c10::str(r ? ", " : "", "rank ", r, ": ", d[0] == mine[0] ? "" : "another collective, ",
                        c10::toString(static_cast<at::ScalarType>(d[1])));
      if (d[3] >= 0) {
        ranks += "[";
        for (int64_t i = 0; i < std::min(d[3], kDims); ++i) ranks += c10::str(i ? ", " : "", d[4 + i]);
        ranks += "]";
      }
      if (d[2] != 1) ranks += c10::str(" x", d[2]);
    }
    TORCH_CHECK(false, "torch.distributed ", op, " on tpu: the ranks' ",
                with_shape ? "shapes or dtypes" : "dtypes", " differ (", ranks,
                "); every rank must pass the same");
  }

  // AVG -> SUM on the host, divided by the group size afterwards.
  void average(c10d::ReduceOp& op, Staging& s) const {
    if (op.op_ == c10d::ReduceOp::AVG) {
      op = c10d::ReduceOp(c10d::ReduceOp::SUM);
      s.average_over = getSize();
    }
  }
  template <typename O>
  O host_options(const O& opts, Staging& s) const {
    O o = opts;
    average(o.reduceOp, s);
    return o;
  }

  c10::intrusive_ptr<Backend> host_;
  bool check_ = [] {
    const char* v = std::getenv("TORCH_TPU_DIST_CHECK");
    return !(v && std::string_view(v) == "0");
  }();
};

}  // namespace

void register_process_group_bindings(py::module& m) {
  m.def(
      "_c10d_host_backend",
      [](const c10::intrusive_ptr<Backend>& host) -> c10::intrusive_ptr<Backend> {
        TORCH_CHECK(host, "tpu c10d backend: no host backend given");
        return c10::make_intrusive<TpuHostBackend>(host);
      },
      "The tpu c10d backend over a host backend (gloo): collectives on host copies of tpu buffers.");
  m.def(
      "_c10d_host_backend_of",
      [](const c10::intrusive_ptr<Backend>& backend) -> c10::intrusive_ptr<Backend> {
        auto* ours = dynamic_cast<TpuHostBackend*>(backend.get());
        TORCH_CHECK(ours, "not a tpu c10d backend: ", backend->getBackendName());
        return ours->host();
      },
      "The host backend under a tpu c10d backend.");
}

}  // namespace torch_tpu
