// Modes.cpp: the execution-mode switch and the tracing entry points that
// torch_tpu.modes and torch_tpu.compile (TpuBackend) call. The core decides
// everything; this file converts tensors and statuses.
#include <torch/extension.h>

#include <memory>
#include <vector>

#include "Common.h"

namespace torch_tpu {
namespace {

constexpr const char* kTrace = "torch_tpu compile";

// A compiled program, owned by Python.
struct Program {
  tpurt_program_t* program = nullptr;
  c10::DeviceIndex device = 0;
  Program() = default;
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() { tpurt_program_free(program); }
};

py::dict flush_counts() {
  py::dict d;
  for (int i = 0; i < tpurt_flush_reason_count(); ++i) {
    if (tpurt_flush_count(i)) d[tpurt_flush_reason_name(i)] = tpurt_flush_count(i);
  }
  return d;
}

void trace_input(const at::Tensor& placeholder, int index) {
  const tpurt_tensor_t t = describe(placeholder, kTrace);
  check_consume(tpurt_trace_input(&t, index), kTrace);
}

// A compile-only trace's input split over a mesh of the target's chips
// (torch_tpu.distributed records the split of a meta parameter).
void trace_input_sharded(const at::Tensor& placeholder, int index, const std::vector<int64_t>& mesh_shape,
                         const std::vector<int>& dim_axis) {
  TORCH_CHECK(static_cast<int64_t>(dim_axis.size()) == placeholder.dim(), kTrace, ": the partition spec has ",
              dim_axis.size(), " entries for a ", placeholder.dim(), "-d tensor");
  const tpurt_tensor_t t = describe(placeholder, kTrace);
  int64_t devices = 1;
  for (int64_t d : mesh_shape) devices *= d;
  std::vector<int8_t> axes(dim_axis.begin(), dim_axis.end());
  const tpurt_sharding_spec_t spec{static_cast<int32_t>(devices), nullptr,
                                   static_cast<int32_t>(mesh_shape.size()), mesh_shape.data(), axes.data()};
  check_consume(tpurt_trace_input_sharded(&t, index, &spec), kTrace);
}

std::shared_ptr<Program> trace_end(const std::vector<at::Tensor>& outputs, int num_inputs, int device) {
  std::vector<tpurt_tensor_t> views;
  views.reserve(outputs.size());
  for (const at::Tensor& t : outputs) views.push_back(describe(t, kTrace));
  auto program = std::make_shared<Program>();
  program->device = static_cast<c10::DeviceIndex>(device);
  tpurt_status_t status = nullptr;
  {
    // The graph compiles here; without the GIL, other Python threads run
    // (and compile their own graphs) meanwhile.
    py::gil_scoped_release release;
    status = tpurt_trace_end(views.data(), static_cast<int32_t>(views.size()), num_inputs, &program->program);
  }
  check_consume(status, kTrace);
  return program;
}

std::vector<at::Tensor> launch(const Program& p, const std::vector<tpurt_tensor_t>& views) {
  const int32_t n = tpurt_program_num_outputs(p.program);
  std::vector<tpurt_result_t> results(static_cast<size_t>(n > 0 ? n : 1));
  // Random ops inside draw from the device's default generator, which
  // advances like eager (one offset per draw): same seed, same numbers.
  uint64_t rng[2] = {0, 0};
  const int32_t draws = tpurt_program_num_rng(p.program);
  std::unique_lock<std::mutex> lock;
  at::Generator gen;
  if (draws > 0) {
    gen = default_generator(p.device);
    lock = std::unique_lock<std::mutex>(gen.mutex());
    rng[0] = gen.current_seed();
    rng[1] = gen.get_offset();
  }
  check_consume(tpurt_program_run(p.program, p.device, views.data(), static_cast<int32_t>(views.size()), rng,
                                  results.data(), n),
                kTrace);
  if (draws > 0) gen.set_offset(rng[1] + static_cast<uint64_t>(draws));
  std::vector<at::Tensor> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t k = 0; k < n; ++k) out.push_back(tensor_from_result_consume(results[static_cast<size_t>(k)]));
  return out;
}

std::vector<tpurt_tensor_t> describe_inputs(const Program& p, const std::vector<at::Tensor>& inputs) {
  std::vector<tpurt_tensor_t> views;
  views.reserve(inputs.size());
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.device() == c10::Device(kTpu, p.device), kTrace, ": a compiled graph input is on ",
                t.device(), ", expected ", c10::Device(kTpu, p.device));
    views.push_back(describe(t, kTrace));
  }
  return views;
}

std::vector<at::Tensor> run(const Program& p, const std::vector<at::Tensor>& inputs) {
  return launch(p, describe_inputs(p, inputs));
}

// The fast path of a repeated call: runs when the inputs are what the
// program was traced for, else returns None and the caller takes the slow
// path (which also reports what changed).
py::object run_if_accepted(const Program& p, const std::vector<at::Tensor>& inputs) {
  for (const at::Tensor& t : inputs)
    if (t.device() != c10::Device(kTpu, p.device)) return py::none();
  const std::vector<tpurt_tensor_t> views = describe_inputs(p, inputs);
  if (!tpurt_program_accepts(p.program, p.device, views.data(), static_cast<int32_t>(views.size())))
    return py::none();
  return py::cast(launch(p, views));
}

}  // namespace

void register_mode_bindings(py::module& m) {
  m.def("_get_eager_mode", [] { return static_cast<int>(tpurt_get_eager_mode()); });
  m.def("_set_eager_mode", [](int mode) {
    check_consume(tpurt_set_eager_mode(static_cast<tpurt_eager_mode_t>(mode)), "torch_tpu.set_eager_mode");
  });
  // A flush may compile the pending graph: without the GIL.
  m.def(
      "_flush", [] { check_consume(tpurt_flush(), "torch_tpu flush"); },
      py::call_guard<py::gil_scoped_release>());
  m.def("_flush_counts", &flush_counts);
  py::class_<Program, std::shared_ptr<Program>>(m, "_Program")
      .def_property_readonly("text",
                             [](const Program& p) { return std::string(tpurt_program_text(p.program)); })
      .def("__call__", &run)
      .def("run_if_accepted", &run_if_accepted);
  m.def("_trace_begin", [](int device) { check_consume(tpurt_trace_begin(device), kTrace); });
  m.def("_trace_input", &trace_input);
  m.def("_trace_input_sharded", &trace_input_sharded);
  m.def("_trace_abort", &tpurt_trace_abort);
  m.def("_trace_set_compile_only", [](bool on) { tpurt_trace_set_compile_only(on); });
  m.def("_trace_end", &trace_end);
}

}  // namespace torch_tpu
