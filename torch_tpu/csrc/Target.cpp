// Target.cpp: compile-only targets and shadow compilation, for Python
// (torch_tpu/targets.py). Translates; the core decides.
#include <torch/extension.h>

#include "Common.h"

namespace torch_tpu {
namespace {

py::dict program_dict(const tpurt_target_program_t& p) {
  py::dict d;
  d["compile_seconds"] = p.compile_seconds;
  d["flops"] = p.has_cost ? py::object(py::float_(p.flops)) : py::object(py::none());
  d["transcendentals"] = p.has_cost ? py::object(py::float_(p.transcendentals)) : py::object(py::none());
  d["bytes_accessed"] = p.has_cost ? py::object(py::float_(p.bytes_accessed)) : py::object(py::none());
  // the compiler's estimate, or None where it gives none (never a negative number)
  d["estimated_seconds"] =
      p.has_estimate ? py::object(py::float_(p.estimated_seconds)) : py::object(py::none());
  if (p.has_memory) {
    py::dict m;
    m["argument_bytes"] = p.argument_bytes;
    m["output_bytes"] = p.output_bytes;
    m["alias_bytes"] = p.alias_bytes;
    m["temp_bytes"] = p.temp_bytes;
    m["generated_code_bytes"] = p.generated_code_bytes;
    m["host_temp_bytes"] = p.host_temp_bytes;
    d["memory"] = m;
  } else {
    d["memory"] = py::none();
  }
  d["serialized_bytes"] = p.serialized_bytes;
  d["fingerprint"] = std::string(p.fingerprint);
  return d;
}

// A target owned by Python until it becomes the shadow target.
struct TargetHandle {
  tpurt_target_t* target = nullptr;
  ~TargetHandle() { tpurt_target_free(target); }
  tpurt_target_t* get() const {
    TORCH_CHECK(target, "this target was handed to set_target and is the process's shadow target now");
    return target;
  }
};

py::dict info_dict(const tpurt_target_t* t) {
  tpurt_target_info_t i;
  tpurt_target_info(t, &i);
  py::dict d;
  d["plugin_path"] = i.plugin_path;
  d["api_version"] = py::make_tuple(i.api_major, i.api_minor);
  d["topology"] = i.topology;
  d["platform_name"] = i.platform_name;
  d["platform_version"] = i.platform_version;
  d["device_kind"] = i.device_kind;
  d["num_devices"] = i.num_devices;
  d["runtime_identity"] = i.runtime_identity;
  return d;
}

}  // namespace

void register_target_bindings(py::module& m) {
  py::class_<TargetHandle, std::shared_ptr<TargetHandle>>(m, "_Target")
      .def("info", [](const TargetHandle& h) { return info_dict(h.get()); })
      .def("compile", [](const TargetHandle& h, const std::string& mlir) {
        tpurt_target_program_t p;
        tpurt_status_t s;
        {
          py::gil_scoped_release release;
          s = tpurt_target_compile(h.get(), mlir.data(), mlir.size(), nullptr, 0, &p);
        }
        check_consume(s, "target compile");
        return program_dict(p);
      });
  m.def("_target_create", [](const std::string& plugin, const std::string& topology) {
    auto h = std::make_shared<TargetHandle>();
    tpurt_status_t s;
    {
      py::gil_scoped_release release;
      s = tpurt_target_create(plugin.c_str(), topology.c_str(), &h->target);
    }
    check_consume(s, "target");
    return h;
  });
  m.def(
      "_shadow_set",
      [](std::shared_ptr<TargetHandle> h) {
        tpurt_target_t* t = nullptr;
        if (h) {
          t = h->get();
          h->target = nullptr;  // the core owns it now
        }
        check_consume(tpurt_shadow_set_consume(t), "set_target");
      },
      py::arg("target").none(true));
  m.def("_shadow_info", []() -> py::object {
    const tpurt_target_t* t = tpurt_shadow_target();
    return t ? py::object(info_dict(t)) : py::object(py::none());
  });
  m.def("_shadow_reset", [] { tpurt_shadow_reset(); });
  m.def("_shadow_set_precompile", [](bool on) { tpurt_shadow_set_precompile(on); });
  // Compile-only programs compile on the pool: wait for them without the GIL.
  m.def("_shadow_wait", [] { tpurt_shadow_wait(); }, py::call_guard<py::gil_scoped_release>());
  m.def("_shadow_records", [] {
    {
      py::gil_scoped_release release;
      tpurt_shadow_wait();
    }
    std::vector<tpurt_shadow_record_t> records(tpurt_shadow_records(nullptr, 0) + 64);
    records.resize(tpurt_shadow_records(records.data(), records.size()));
    py::list out;
    for (const auto& r : records) {
      py::dict d = program_dict(r.program);
      d["label"] = r.label;
      d["error"] = r.error ? py::object(py::str(r.error)) : py::object(py::none());
      d["runs"] = r.runs;
      d["num_partitions"] = r.num_partitions;
      d["from_cache"] = r.from_disk;
      d["precompiled"] = r.precompiled;
      d["hash"] = r.hash;
      out.append(d);
    }
    return out;
  });
  m.def("_lowering_platform", [] { return std::string(tpurt_lowering_platform()); });
}

}  // namespace torch_tpu
