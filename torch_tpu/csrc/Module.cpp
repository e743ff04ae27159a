// Module.cpp: torch_tpu._C, the Python face of the runtime and the glue.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "Common.h"

namespace torch_tpu {

// Modes.cpp: eager modes and tracing for torch.compile.
void register_mode_bindings(py::module& m);

namespace {

void init() { check(tpurt_runtime_init(), "tpu init"); }

// Raises if a TORCH_TPU_* environment variable does not parse.
void config_check() { check(tpurt_config_check(), "torch_tpu configuration"); }

py::dict runtime_info() {
  tpurt_runtime_info_t info{};
  check(tpurt_runtime_info(&info), "tpu runtime info");
  py::dict d;
  d["plugin_path"] = info.plugin_path ? info.plugin_path : "";
  d["api_version"] = py::make_tuple(info.api_major, info.api_minor);
  d["platform_name"] = info.platform_name ? info.platform_name : "";
  d["platform_version"] = info.platform_version ? info.platform_version : "";
  d["device_kind"] = info.device_kind ? info.device_kind : "";
  d["device_count"] = info.device_count;
  return d;
}

std::string device_kind(int device) {
  const char* kind = nullptr;
  check(tpurt_device_kind(device, &kind), "tpu device kind");
  return kind ? kind : "";
}

py::dict metrics() {
  tpurt_metrics_t m{};
  tpurt_metrics_get(&m);
  py::dict d;
  d["compiles"] = m.compiles;
  d["cache_hits"] = m.cache_hits;
  d["executions"] = m.executions;
  d["bytes_to_device"] = m.bytes_to_device;
  d["bytes_from_device"] = m.bytes_from_device;
  d["compile_seconds"] = m.compile_seconds;
  d["live_buffers"] = m.live_buffers;
  d["live_storages"] = m.live_storages;
  d["bytes_in_use"] = m.bytes_in_use;
  d["peak_bytes_in_use"] = m.peak_bytes_in_use;
  d["cache_hits_memory"] = m.cache_hits_memory;
  d["cache_hits_disk"] = m.cache_hits_disk;
  d["cache_bytes_memory"] = m.cache_bytes_memory;
  d["cache_entries"] = m.cache_entries;
  d["plans"] = m.plans;
  d["plan_bytes"] = m.plan_bytes;
  d["cache_disk_writes"] = m.cache_disk_writes;
  d["cache_disk_rejects"] = m.cache_disk_rejects;
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
  register_core_ops();
  register_mode_bindings(m);
  m.def("_init", &init);
  m.def("_set_default_plugin",
        [](const std::string& path) { tpurt_runtime_set_default_plugin(path.c_str()); });
  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_current_device", [] { return static_cast<int>(current_device()); });
  m.def("_config_check", &config_check);
  // Tests that set TORCH_TPU_* variables in-process (the core reads them once).
  m.def("_config_reload_for_test", [] { tpurt_config_reload_for_test(); });
  m.def("_set_device", [](int device) { set_current_device(static_cast<c10::DeviceIndex>(device)); });
  m.def("_synchronize", [](int device) { check(tpurt_synchronize(device), "synchronize"); });
  m.def("_runtime_info", &runtime_info);
  m.def("_device_kind", &device_kind);
  m.def("_metrics", &metrics);
  m.def("_reset_metrics", &reset_metrics);
  m.def("_cache_info", &cache_info);
  m.def("_memory_allocated", [](int device) { return tpurt_memory_allocated(device); });
  m.def("_max_memory_allocated", [](int device) { return tpurt_max_memory_allocated(device); });
  m.def("_reset_peak_memory_stats", [](int device) { tpurt_reset_peak_memory(device); });
  m.def("_set_cpu_fallback_enabled", &set_cpu_fallback_enabled);
  m.def("_get_cpu_fallback_enabled", &cpu_fallback_enabled);
  m.def("_manual_seed", &manual_seed);
  m.def("_default_generator", &wrap_default_generator);
  m.def("_op_supported", [](const std::string& name) { return tpurt_op_supported(name.c_str()); });
}
