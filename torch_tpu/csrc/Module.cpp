// Module.cpp: torch_tpu._C, the Python face of the runtime and the glue.
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include <cstring>

#include "Common.h"

// The torch this extension was compiled against (setup.py passes
// torch.__version__), kept as a marker in the binary too, so that a _C that
// cannot even be loaded under another torch can still say what it was built
// for (torch_tpu/_torch_version.py reads it from the file).
#ifndef TORCH_TPU_BUILT_TORCH_VERSION
#include <torch/version.h>
#define TORCH_TPU_BUILT_TORCH_VERSION TORCH_VERSION
#endif
extern "C" __attribute__((used, visibility("default"))) const char torch_tpu_built_against[] =
    "torch_tpu:built-against-torch=" TORCH_TPU_BUILT_TORCH_VERSION;

namespace torch_tpu {

// Modes.cpp: eager modes and tracing for torch.compile.
void register_mode_bindings(py::module& m);
// Target.cpp: compile-only targets and shadow compilation.
void register_target_bindings(py::module& m);
// ProcessGroup.cpp: the c10d backend of tpu tensors.
void register_process_group_bindings(py::module& m);
void register_kv_store_bindings(py::module& m);

namespace {

void init() { check_consume(tpurt_runtime_init(), "tpu init"); }

// torch_tpu.distributed.mark_sharding: the mesh and the per-dim axes come
// checked from Python; the core validates them again against the devices.
void mark_sharding(const at::Tensor& t, const std::vector<int>& devices,
                   const std::vector<int64_t>& mesh_shape, const std::vector<int>& dim_axis) {
  constexpr std::string_view kOp = "mark_sharding";
  TORCH_CHECK(t.device().type() == kTpu, kOp, ": expected a tpu tensor, got one on ", t.device());
  TORCH_CHECK(static_cast<int64_t>(dim_axis.size()) == t.dim(), kOp, ": the partition spec has ",
              dim_axis.size(), " entries for a ", t.dim(), "-d tensor");
  const tpurt_tensor_t view = describe(t, kOp);
  std::vector<int8_t> axes(dim_axis.begin(), dim_axis.end());
  const tpurt_sharding_spec_t spec{static_cast<int32_t>(devices.size()), devices.data(),
                                   static_cast<int32_t>(mesh_shape.size()), mesh_shape.data(), axes.data()};
  check_consume(tpurt_tensor_shard(&view, &spec), kOp);
}

int num_shards(const at::Tensor& t) {
  if (t.device().type() != kTpu) return 0;
  return tpurt_storage_num_shards(storage_of(t.storage(), "num_shards"));
}

// Raises if a TORCH_TPU_* environment variable does not parse.
void config_check() { check_consume(tpurt_config_check(), "torch_tpu configuration"); }

py::dict runtime_info() {
  tpurt_runtime_info_t info{};
  check_consume(tpurt_runtime_info(&info), "tpu runtime info");
  py::dict d;
  d["plugin_path"] = info.plugin_path ? info.plugin_path : "";
  d["api_version"] = py::make_tuple(info.api_major, info.api_minor);
  d["platform_name"] = info.platform_name ? info.platform_name : "";
  d["platform_version"] = info.platform_version ? info.platform_version : "";
  d["device_kind"] = info.device_kind ? info.device_kind : "";
  d["device_count"] = info.device_count;
  return d;
}

// torch.tpu.Event.elapsed_time: torch.Event's own method accepts only an
// exact torch.Event as |end| (a type check on the Python object), so a
// subclass such as torch.tpu.Event times through here: the same
// c10::Event::elapsedTime, i.e. the guard's elapsedTime over the core's
// events.
double event_elapsed_ms(const py::object& start, const py::object& end) {
  for (const py::object* e : {&start, &end})
    TORCH_CHECK_TYPE(THPEvent_Check(e->ptr()), "elapsed_time: expected a torch.Event, got ",
                     py::str(py::type::of(*e)).cast<std::string>());
  const c10::Event& a = reinterpret_cast<THPEvent*>(start.ptr())->event;
  const c10::Event& b = reinterpret_cast<THPEvent*>(end.ptr())->event;
  return a.elapsedTime(b);
}

// The name the long-compile notice gives this thread's compiles (a
// torch.compile graph: "transformer.forward"); the core keeps the pointer.
void set_compile_label(const std::optional<std::string>& label) {
  thread_local std::string held;
  held = label ? *label : std::string();
  tpurt_set_compile_label(label ? held.c_str() : nullptr);
}

// The kind this thread's compiles are counted under in the per-kind metrics
// (tpurt_set_compile_kind): 0 = auto (the compiling site says), else an index
// of tpurt_compile_kind_t. Returns the kind set before.
int set_compile_kind(int kind) {
  return static_cast<int>(tpurt_set_compile_kind(static_cast<tpurt_compile_kind_t>(kind)));
}

std::string device_kind(int device) {
  const char* kind = nullptr;
  check_consume(tpurt_device_kind(device, &kind), "tpu device kind");
  return kind ? kind : "";
}

py::dict metrics() {
  tpurt_metrics_t m{};
  tpurt_metrics_get(&m);
  py::dict d;
  // Every metric by the core's own list of names (TPURT_METRICS).
  int count = 0;
  const tpurt_metric_info_t* infos = tpurt_metric_infos(&count);
  const char* base = reinterpret_cast<const char*>(&m);
  for (int i = 0; i < count; ++i) {
    const tpurt_metric_info_t& info = infos[i];
    if (info.is_seconds) {
      double value;
      std::memcpy(&value, base + info.offset, sizeof(value));
      d[info.name] = value;
    } else {
      uint64_t value;
      std::memcpy(&value, base + info.offset, sizeof(value));
      d[info.name] = value;
    }
  }
  d["cpu_fallbacks"] = cpu_fallback_counts();
  return d;
}

py::dict cache_info() {
  tpurt_cache_info_t info{};
  tpurt_cache_info(&info);
  py::dict d;
  d["dir"] = info.dir[0] ? py::object(py::str(info.dir)) : py::object(py::none());
  d["enabled"] = info.disk_enabled;
  d["refused"] = info.refused[0] ? py::object(py::str(info.refused)) : py::object(py::none());
  d["entries"] = info.disk_entries;
  d["bytes"] = info.disk_bytes;
  d["memory_entries"] = info.memory_entries;
  d["memory_bytes"] = info.memory_bytes;
  d["memory_limit_bytes"] = info.memory_limit_bytes;
  return d;
}

// Imports another cache directory's entries (tpurt_cache_import).
py::dict cache_import(const std::string& source_dir) {
  uint64_t imported = 0, refused = 0;
  check_consume(tpurt_cache_import(source_dir.c_str(), &imported, &refused), "cache import");
  py::dict d;
  d["imported"] = imported;
  d["refused"] = refused;
  return d;
}

py::dict device_memory_dict(c10::DeviceIndex device) {
  const tpurt_device_memory_t m = device_memory(device);
  py::dict d;
  d["reported"] = m.reported;
  d["from_host"] = m.from_host;
  d["bytes_in_use"] = m.bytes_in_use;
  d["peak_bytes_in_use"] = m.peak_bytes_in_use;
  d["num_allocs"] = m.num_allocs;
  d["largest_alloc_size"] = m.largest_alloc_size;
  d["bytes_limit"] = m.bytes_limit;
  d["bytes_reserved"] = m.bytes_reserved;
  d["peak_bytes_reserved"] = m.peak_bytes_reserved;
  d["bytes_free"] = m.bytes_free;
  return d;
}

// The completed launches from index |since| on, and the next index.
py::tuple launch_log(uint64_t since) {
  std::vector<tpurt_launch_record_t> batch(4096);
  py::list out;
  uint64_t next = since;
  for (;;) {
    const int n = tpurt_launch_log(next, batch.data(), static_cast<int>(batch.size()), &next);
    for (int i = 0; i < n; ++i) {
      const tpurt_launch_record_t& r = batch[i];
      py::dict d;
      d["name"] = std::string(r.name);
      d["device"] = r.device;
      d["ops"] = r.num_ops;
      d["kind"] = r.is_copy ? "copy to host" : (r.compiled ? "compile" : "cache hit");
      d["launch_ns"] = r.launch_ns;
      d["start_ns"] = r.start_ns;
      d["end_ns"] = r.end_ns;
      out.append(d);
    }
    if (n < static_cast<int>(batch.size())) break;
  }
  return py::make_tuple(out, next);
}

uint64_t launch_log_position() {
  uint64_t next = 0;
  tpurt_launch_log(0, nullptr, 0, &next);
  return next;
}

// Device time per program: ([(name, runs, device_ns)], total_ns, total_runs).
py::tuple program_stats() {
  std::vector<tpurt_program_stats_t> stats(4096);
  uint64_t total_ns = 0, runs = 0;
  const int n = tpurt_program_stats(stats.data(), static_cast<int>(stats.size()), &total_ns, &runs);
  py::list out;
  for (int i = 0; i < n; ++i)
    out.append(py::make_tuple(std::string(stats[i].name), stats[i].runs, stats[i].device_ns));
  return py::make_tuple(out, total_ns, runs);
}

void reset_metrics() {
  tpurt_metrics_reset();
  reset_cpu_fallback_counts();
}

void manual_seed(c10::DeviceIndex device, uint64_t seed) {
  at::Generator gen = default_generator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

py::object wrap_default_generator(c10::DeviceIndex device) {
  return py::reinterpret_borrow<py::object>(THPGenerator_initDefaultGenerator(default_generator(device)));
}

}  // namespace
}  // namespace torch_tpu

PYBIND11_MODULE(_C, m) {
  using namespace torch_tpu;
  m.doc() = "torch_tpu native glue: runtime, metrics, generators";
  // First, before any registration: under another torch this raises an
  // ImportError that says how to rebuild.
  py::module_::import("torch_tpu._torch_version").attr("check")(TORCH_TPU_BUILT_TORCH_VERSION);
  m.attr("_built_torch_version") = TORCH_TPU_BUILT_TORCH_VERSION;
  register_core_ops();
  register_mode_bindings(m);
  register_target_bindings(m);
  register_process_group_bindings(m);
  register_kv_store_bindings(m);
  m.def("_init", &init);
  m.def("_set_default_plugin",
        [](const std::string& path) { tpurt_runtime_set_default_plugin(path.c_str()); });
  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_config_check", &config_check);
  // Tests that set TORCH_TPU_* variables in-process (the core reads them once).
  m.def("_config_reload_for_test", [] { tpurt_config_reload_for_test(); });
  m.def("_set_device", [](int device) { set_current_device(static_cast<c10::DeviceIndex>(device)); });
  m.def(
      "_synchronize", [](int device) { check_consume(tpurt_synchronize(device), "synchronize"); },
      py::call_guard<py::gil_scoped_release>());
  // Waits for every launch in flight, reporting nothing (the exit hook).
  m.def("_wait_idle", [] { tpurt_wait_idle(); }, py::call_guard<py::gil_scoped_release>());
  m.def("_runtime_info", &runtime_info);
  m.def("_device_kind", &device_kind);
  m.def("_metrics", &metrics);
  m.def("_metric_labels", [] {
    int count = 0;
    const tpurt_metric_info_t* infos = tpurt_metric_infos(&count);
    py::list out;
    for (int i = 0; i < count; ++i) out.append(py::make_tuple(infos[i].name, infos[i].label));
    return out;
  });
  m.def("_core_version", [] { return std::string(tpurt_version()); });
  m.def("_reset_metrics", &reset_metrics);
  m.def("_cache_info", &cache_info);
  m.def("_cache_import", &cache_import, py::arg("source_dir"));
  m.def("_memory_allocated", [](int device) { return tpurt_memory_allocated(device); });
  m.def("_max_memory_allocated", [](int device) { return tpurt_max_memory_allocated(device); });
  m.def("_reset_peak_memory_stats", [](int device) { tpurt_reset_peak_memory(device); });
  m.def("_device_memory",
        [](int device) { return device_memory_dict(static_cast<c10::DeviceIndex>(device)); });
  m.def("_launch_log", &launch_log);
  m.def("_launch_log_position", &launch_log_position);
  m.def("_program_stats", &program_stats);
  m.def("_set_cpu_fallback_enabled", &set_cpu_fallback_enabled);
  m.def("_get_cpu_fallback_enabled", &cpu_fallback_enabled);
  m.def("_manual_seed", &manual_seed);
  m.def("_default_generator", &wrap_default_generator);
  m.def("_set_compile_options", [](const std::optional<std::string>& spec) {
    check_consume(tpurt_set_thread_compile_options(spec ? spec->c_str() : nullptr), "XLA compile options");
  });
  m.def("_event_elapsed_ms", &event_elapsed_ms);
  m.def("_set_compile_label", &set_compile_label);
  m.def("_set_compile_kind", &set_compile_kind);
  m.def("_mark_sharding", &mark_sharding);
  m.def("_num_shards", &num_shards);
  m.def("_op_supported", [](const std::string& name) { return tpurt_op_supported(name.c_str()); });
}
