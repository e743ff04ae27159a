/* target.c: compile-only targets. A target is a plugin plus a topology
** name ("v6e:1x1"): the plugin makes a topology description from the name
** and compiles for it with PJRT_Compile, with no client and no device. The
** executable cannot run here; what it tells is the compiler's verdict, its
** cost analysis (flops, bytes, its own run-time estimate) and the memory
** the program needs on the chip. Independent of the process's runtime
** (pjrt_g): a process may run on the CPU plugin and compile for a TPU. */
#include <stdio.h>
#include <time.h>

#include "pjrt_internal.h"

#define TARGET_MAX_DEVICES 256

struct tpurt_target_s {
  pjrt_api_t api;
  pjrt_abi_topology_t* topology;
  char* topology_name;
  char* platform_name;
  char* platform_version;
  char* device_kind;
  char* identity;         /* for cache keys: plugin, api version, platform, topology */
  char* runtime_identity; /* pjrt_identity of a process running on this plugin's chips */
  int num_devices;
  int64_t device_ids[TARGET_MAX_DEVICES];
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char* copy_text(const char* text, size_t size) {
  char* out = tpurt_xmalloc(size + 1);
  if (size) memcpy(out, text, size);
  out[size] = '\0';
  return out;
}

static TPURT_MUST_USE tpurt_status_t topology_string(tpurt_target_t* t, int slot, const char* name,
                                                     char** out) {
  PJRT_ARGS(pjrt_abi_topology_string_args_t, a);
  a.topology = t->topology;
  TPURT_RETURN_IF_ERROR(pjrt_api_call(&t->api, slot, name, &a));
  *out = copy_text(a.text, a.text ? a.text_size : 0);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t read_devices(tpurt_target_t* t) {
  PJRT_ARGS(pjrt_abi_topology_device_descriptions_args_t, a);
  a.topology = t->topology;
  TPURT_RETURN_IF_ERROR(pjrt_api_call(&t->api, PJRTABI_TOPOLOGY_GET_DEVICE_DESCRIPTIONS,
                                      "TopologyDescription_GetDeviceDescriptions", &a));
  if (a.num_descriptions == 0 || a.num_descriptions > TARGET_MAX_DEVICES) {
    return tpurt_status_create(TPURT_FAILED_PRECONDITION, "topology '%s' has %zu devices (supported: 1..%d)",
                               t->topology_name, a.num_descriptions, TARGET_MAX_DEVICES);
  }
  t->num_devices = (int)a.num_descriptions;
  for (int i = 0; i < t->num_devices; ++i) {
    PJRT_ARGS(pjrt_abi_device_description_id_args_t, id);
    id.device_description = a.descriptions[i];
    TPURT_RETURN_IF_ERROR(pjrt_api_call(&t->api, PJRTABI_DEVICE_DESCRIPTION_ID, "DeviceDescription_Id", &id));
    t->device_ids[i] = id.id;
  }
  PJRT_ARGS(pjrt_abi_device_description_kind_args_t, k);
  k.device_description = a.descriptions[0];
  TPURT_RETURN_IF_ERROR(
      pjrt_api_call(&t->api, PJRTABI_DEVICE_DESCRIPTION_KIND, "DeviceDescription_Kind", &k));
  t->device_kind = copy_text(k.device_kind, k.device_kind ? k.device_kind_size : 0);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t target_open(tpurt_target_t* t, const char* plugin_path,
                                                 const char* topology) {
  TPURT_RETURN_IF_ERROR(pjrt_api_load(plugin_path, &t->api));
  TPURT_RETURN_IF_ERROR(pjrt_api_initialize_once(&t->api));
  PJRT_ARGS(pjrt_abi_topology_create_args_t, a);
  a.topology_name = topology;
  a.topology_name_size = strlen(topology);
  TPURT_RETURN_IF_ERROR(pjrt_api_call(&t->api, PJRTABI_TOPOLOGY_CREATE, "TopologyDescription_Create", &a));
  t->topology = a.topology;
  TPURT_RETURN_IF_ERROR(topology_string(t, PJRTABI_TOPOLOGY_PLATFORM_NAME, "TopologyDescription_PlatformName",
                                        &t->platform_name));
  TPURT_RETURN_IF_ERROR(topology_string(t, PJRTABI_TOPOLOGY_PLATFORM_VERSION,
                                        "TopologyDescription_PlatformVersion", &t->platform_version));
  TPURT_RETURN_IF_ERROR(read_devices(t));
  tpurt_strbuf_t id = {0};
  tpurt_strbuf_printf(&id, "target|%s|%d.%d|%s|%s|%s", t->api.path, t->api.major, t->api.minor,
                      t->platform_name, t->platform_version, t->topology_name);
  t->identity = id.data;
  /* What client.c's pjrt_identity is on a host whose runtime is this plugin:
  ** the same path and API version, and the platform as the topology names
  ** it (that a TPU client reports the same version string is assumed, not
  ** provable without a chip). */
  tpurt_strbuf_t rt = {0};
  tpurt_strbuf_printf(&rt, "%s|%d.%d|%s|%s", t->api.path, t->api.major, t->api.minor, t->platform_name,
                      t->platform_version);
  t->runtime_identity = rt.data;
  return NULL;
}

tpurt_status_t tpurt_target_create(const char* plugin_path, const char* topology,
                                   tpurt_target_t** out_target) {
  *out_target = NULL;
  if (!plugin_path || !*plugin_path)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "a target needs a PJRT plugin path");
  if (!topology || !*topology)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "a target needs a topology name (e.g. \"v6e:1x1\", \"v5e:2x2\")");
  tpurt_target_t* t = tpurt_xcalloc(1, sizeof(*t));
  t->topology_name = tpurt_xstrdup(topology);
  tpurt_status_t status = target_open(t, plugin_path, topology);
  if (status) {
    tpurt_target_free(t);
    char context[512];
    snprintf(context, sizeof context, "target '%s' of plugin '%s'", topology, plugin_path);
    return tpurt_status_annotate_consume(status, context);
  }
  *out_target = t;
  return NULL;
}

void tpurt_target_free(tpurt_target_t* target) {
  if (!target) return;
  if (target->topology) {
    PJRT_ARGS(pjrt_abi_topology_destroy_args_t, a);
    a.topology = target->topology;
    tpurt_status_ignore(
        pjrt_api_call(&target->api, PJRTABI_TOPOLOGY_DESTROY, "TopologyDescription_Destroy", &a));
  }
  free(target->api.path);
  free(target->topology_name);
  free(target->platform_name);
  free(target->platform_version);
  free(target->device_kind);
  free(target->identity);
  free(target->runtime_identity);
  free(target);
}

void tpurt_target_info(const tpurt_target_t* target, tpurt_target_info_t* out_info) {
  *out_info = (tpurt_target_info_t){
      .plugin_path = target->api.path,
      .api_major = target->api.major,
      .api_minor = target->api.minor,
      .topology = target->topology_name,
      .platform_name = target->platform_name,
      .platform_version = target->platform_version,
      .device_kind = target->device_kind,
      .num_devices = target->num_devices,
      .identity = target->identity,
      .runtime_identity = target->runtime_identity,
  };
}

int64_t tpurt_target_device_id(const tpurt_target_t* target, int index) {
  return index >= 0 && index < target->num_devices ? target->device_ids[index] : -1;
}

/*===--- what an executable tells ---===*/

static void exe_free(const pjrt_api_t* api, pjrt_abi_executable_t* exe) {
  PJRT_ARGS(pjrt_abi_executable_destroy_args_t, d);
  d.executable = exe;
  tpurt_status_ignore(pjrt_api_call(api, PJRTABI_EXECUTABLE_DESTROY, "Executable_Destroy", &d));
}

static double named_number(const pjrt_abi_named_value_t* v) {
  switch (v->type) {
    case PJRTABI_NAMED_VALUE_FLOAT:
      return (double)v->value.float_value;
    case PJRTABI_NAMED_VALUE_INT64:
      return (double)v->value.int64_value;
    default:
      return 0.0;
  }
}

static bool name_is(const pjrt_abi_named_value_t* v, const char* name) {
  return v->name && v->name_size == strlen(name) && memcmp(v->name, name, v->name_size) == 0;
}

/* Cost analysis: a plugin that has none (UNIMPLEMENTED) leaves has_cost
** false; any other error is the caller's. */
static TPURT_MUST_USE tpurt_status_t read_cost(const pjrt_api_t* api, pjrt_abi_executable_t* exe,
                                               tpurt_target_program_t* out) {
  PJRT_ARGS(pjrt_abi_executable_cost_analysis_args_t, a);
  a.executable = exe;
  tpurt_status_t status =
      pjrt_api_call(api, PJRTABI_EXECUTABLE_GET_COST_ANALYSIS, "Executable_GetCostAnalysis", &a);
  if (status && tpurt_status_code(status) == TPURT_UNIMPLEMENTED) {
    tpurt_status_free(status);
    return NULL;
  }
  TPURT_RETURN_IF_ERROR(status);
  out->has_cost = true;
  for (size_t i = 0; i < a.num_properties; ++i) {
    const pjrt_abi_named_value_t* v = &a.properties[i];
    if (name_is(v, "flops"))
      out->flops = named_number(v);
    else if (name_is(v, "transcendentals"))
      out->transcendentals = named_number(v);
    else if (name_is(v, "bytes accessed"))
      out->bytes_accessed = named_number(v);
    else if (name_is(v, "optimal_seconds")) {
      /* The compiler's own estimate; it reports a negative number where it
      ** has none (seen with while loops), which must never be summed. */
      double s = named_number(v);
      out->has_estimate = s > 0.0;
      out->estimated_seconds = s > 0.0 ? s : 0.0;
    }
  }
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t read_memory(const pjrt_api_t* api, pjrt_abi_executable_t* exe,
                                                 tpurt_target_program_t* out) {
  PJRT_ARGS(pjrt_abi_compiled_memory_stats_args_t, a);
  a.executable = exe;
  tpurt_status_t status = pjrt_api_call(api, PJRTABI_EXECUTABLE_GET_COMPILED_MEMORY_STATS,
                                        "Executable_GetCompiledMemoryStats", &a);
  if (status && tpurt_status_code(status) == TPURT_UNIMPLEMENTED) {
    tpurt_status_free(status);
    return NULL;
  }
  TPURT_RETURN_IF_ERROR(status);
  out->has_memory = true;
  out->argument_bytes = a.argument_size_in_bytes;
  out->output_bytes = a.output_size_in_bytes;
  out->alias_bytes = a.alias_size_in_bytes;
  out->temp_bytes = a.temp_size_in_bytes;
  out->generated_code_bytes = a.generated_code_size_in_bytes;
  out->host_temp_bytes = a.host_temp_size_in_bytes;
  return NULL;
}

/* Fingerprint and serialised size are optional facts: a plugin without
** them leaves them empty. */
static void read_identity(const pjrt_api_t* api, pjrt_abi_executable_t* exe, tpurt_target_program_t* out,
                          char** out_bytes, size_t* out_size) {
  PJRT_ARGS(pjrt_abi_executable_string_args_t, f);
  f.executable = exe;
  tpurt_status_t status = pjrt_api_call(api, PJRTABI_EXECUTABLE_FINGERPRINT, "Executable_Fingerprint", &f);
  if (!status && f.text) {
    /* Plugins give bytes (libtpu: a binary digest): kept as hex. */
    static const char kHex[] = "0123456789abcdef";
    size_t n =
        f.text_size < (sizeof(out->fingerprint) - 1) / 2 ? f.text_size : (sizeof(out->fingerprint) - 1) / 2;
    for (size_t i = 0; i < n; ++i) {
      out->fingerprint[2 * i] = kHex[(unsigned char)f.text[i] >> 4];
      out->fingerprint[2 * i + 1] = kHex[(unsigned char)f.text[i] & 15];
    }
    out->fingerprint[2 * n] = '\0';
  }
  tpurt_status_ignore(status);
  PJRT_ARGS(pjrt_abi_executable_serialize_args_t, s);
  s.executable = exe;
  status = pjrt_api_call(api, PJRTABI_EXECUTABLE_SERIALIZE, "Executable_Serialize", &s);
  if (!status) {
    out->serialized_bytes = (int64_t)s.serialized_bytes_size;
    if (out_bytes && s.serialized_bytes) {
      *out_bytes = tpurt_xmalloc(s.serialized_bytes_size ? s.serialized_bytes_size : 1);
      memcpy(*out_bytes, s.serialized_bytes, s.serialized_bytes_size);
      *out_size = s.serialized_bytes_size;
    }
    if (s.serialized_executable_deleter) s.serialized_executable_deleter(s.serialized_executable);
  }
  tpurt_status_ignore(status);
}

tpurt_status_t tpurt_target_compile(tpurt_target_t* target, const char* mlir, size_t mlir_size,
                                    const char* options, size_t options_size, tpurt_target_program_t* out) {
  return tpurt_target_compile_serialized(target, mlir, mlir_size, options, options_size, out, NULL, NULL);
}

tpurt_status_t tpurt_target_compile_serialized(tpurt_target_t* target, const char* mlir, size_t mlir_size,
                                               const char* options, size_t options_size,
                                               tpurt_target_program_t* out, char** out_bytes,
                                               size_t* out_size) {
  memset(out, 0, sizeof(*out));
  if (out_bytes) *out_bytes = NULL;
  if (out_size) *out_size = 0;
  if (!options) TPURT_RETURN_IF_ERROR(pjrt_current_compile_options(&options, &options_size, NULL));
  pjrt_abi_program_t program = pjrt_mlir_program(mlir, mlir_size);
  PJRT_ARGS(pjrt_abi_compile_args_t, a);
  a.topology = target->topology;
  a.program = &program;
  a.compile_options = options;
  a.compile_options_size = options_size;
  /* No lock: XLA's compilers take concurrent compiles (the compile pool
  ** hands a target several compile-only programs at once, base/pool.c). */
  double start = now_seconds();
  tpurt_status_t status = pjrt_api_call(&target->api, PJRTABI_COMPILE, "Compile", &a);
  out->compile_seconds = now_seconds() - start;
  if (!status) {
    status = read_cost(&target->api, a.executable, out);
    if (!status) status = read_memory(&target->api, a.executable, out);
    if (!status) read_identity(&target->api, a.executable, out, out_bytes, out_size);
    exe_free(&target->api, a.executable);
  }
  if (status) {
    char context[320];
    snprintf(context, sizeof context, "compiling for target %s (%s)", target->topology_name,
             target->device_kind ? target->device_kind : "?");
    return tpurt_status_annotate_consume(status, context);
  }
  return NULL;
}
