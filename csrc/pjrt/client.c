/* client.c: the process-wide PJRT client: finding and initialising the
** plugin once, creating the client, and what it says about its devices. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kv_store.h"
#include "pjrt_internal.h"

pjrt_state_t pjrt_g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static tpurt_status_code_t g_init_code = TPURT_OK;
static char* g_init_message; /* the remembered failure, or NULL */

static pthread_mutex_t g_default_lock = PTHREAD_MUTEX_INITIALIZER;
static char* g_default_plugin;

void tpurt_runtime_set_default_plugin(const char* path) {
  pthread_mutex_lock(&g_default_lock);
  free(g_default_plugin);
  g_default_plugin = path && *path ? tpurt_xstrdup(path) : NULL;
  pthread_mutex_unlock(&g_default_lock);
}

/* The job's place and store (tpurt_runtime_set_distributed), guarded by
** g_default_lock like the plugin path; read once when the runtime starts. */
static bool g_runtime_started;
static bool g_has_distributed;
static pjrt_kv_store_t g_store;
static pjrt_distributed_t g_distributed = {.store = &g_store};

tpurt_status_t tpurt_runtime_set_distributed(int64_t node_id, int64_t num_nodes,
                                             const tpurt_kv_store_t* store) {
  if (!store || !store->get || !store->put || num_nodes < 1 || node_id < 0 || node_id >= num_nodes) {
    return tpurt_status_create(
        TPURT_INVALID_ARGUMENT,
        "set_distributed: node_id %lld of %lld nodes (with a store) is not a place in a job",
        (long long)node_id, (long long)num_nodes);
  }
  pthread_mutex_lock(&g_default_lock);
  bool started = g_runtime_started;
  if (!started) {
    g_store = *store;
    g_distributed.node_id = node_id;
    g_distributed.num_nodes = num_nodes;
    g_has_distributed = true;
  }
  pthread_mutex_unlock(&g_default_lock);
  if (started) {
    return tpurt_status_create(TPURT_FAILED_PRECONDITION,
                               "set_distributed: the tpu runtime has started: its client is one process's");
  }
  return NULL;
}

static char* copy_text(const char* s, size_t n) {
  char* out = tpurt_xmalloc(n + 1);
  if (n) memcpy(out, s, n);
  out[n] = '\0';
  return out;
}

/* Calls PJRT_Client_Create with |count| named values; with |dist|, the
** key-value callbacks are set and (|dist_options|) node_id / num_nodes
** follow the values. */
static TPURT_MUST_USE tpurt_status_t client_create_with(const pjrt_abi_named_value_t* values, size_t count,
                                                        const pjrt_distributed_t* dist, bool dist_options,
                                                        pjrt_abi_client_t** out_client) {
  PJRT_ARGS(pjrt_abi_client_create_args_t, a);
  pjrt_abi_named_value_t* all = tpurt_xcalloc(count + PJRT_DISTRIBUTED_NUM_OPTIONS + 1, sizeof(*all));
  if (count) memcpy(all, values, count * sizeof(*all));
  size_t n = count;
  if (dist) {
    size_t added = pjrt_distributed_apply(dist, &a, all + count);
    if (dist_options) n += added;
  }
  a.create_options = n ? all : NULL;
  a.num_options = n;
  tpurt_status_t status = PJRT_CALL(PJRTABI_CLIENT_CREATE, "Client_Create", &a);
  free(all);
  *out_client = status ? NULL : a.client;
  return status;
}

/* Creates the client with the user's options (TORCH_TPU_PJRT_OPTIONS) and,
** unless they name it, cpu_device_count (the CPU plugin's option). A plugin
** that validates names (the CUDA plugin) refuses cpu_device_count, so a
** refused set is tried again without it; when the user's own options are
** refused, the plugin's error comes back with the list of what we passed.
** (The CPU plugin ignores names it does not know.) In a job that spans
** processes (|dist|), the key-value callbacks are always set and node_id /
** num_nodes are passed first; a plugin that refuses them (libtpu reads its
** topology from the environment) is tried without them. What the plugin
** takes decides, never its name. */
static TPURT_MUST_USE tpurt_status_t create_client(const pjrt_distributed_t* dist) {
  const tpurt_config_t* config = tpurt_config();
  TPURT_RETURN_IF_ERROR(tpurt_config_check());
  int64_t count = config->num_devices;
  if (count > PJRT_MAX_DEVICES) {
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "TORCH_TPU_NUM_DEVICES='%lld' is not valid: expected an integer from 1 to %d",
                               (long long)count, PJRT_MAX_DEVICES);
  }
  pjrt_client_options_t user;
  TPURT_RETURN_IF_ERROR(pjrt_client_options_parse(config->pjrt_options, &user));
  bool add_count = true;
  for (size_t i = 0; i < user.count; ++i) {
    const pjrt_named_option_t* o = &user.items[i];
    if (strcmp(o->name, "cpu_device_count") != 0) continue;
    add_count = false;
    /* The option TORCH_TPU_NUM_DEVICES sets, so it is checked the same way:
    ** a plugin reads it unchecked (the CPU plugin aborts on a string, and
    ** makes 100,000 devices if asked). */
    if (o->type != PJRT_OPTION_INT64 || o->int_value < 1 || o->int_value > PJRT_MAX_DEVICES) {
      tpurt_strbuf_t given = {0};
      pjrt_client_options_t one = {.items = (pjrt_named_option_t*)o, .count = 1};
      pjrt_client_options_describe(&one, &given);
      tpurt_status_t status = tpurt_status_create(
          TPURT_INVALID_ARGUMENT,
          "TORCH_TPU_PJRT_OPTIONS: cpu_device_count is the device count (as TORCH_TPU_NUM_DEVICES): expected "
          "an integer from 1 to %d, got %s",
          PJRT_MAX_DEVICES, given.data);
      tpurt_strbuf_free(&given);
      pjrt_client_options_free(&user);
      return status;
    }
  }
  pjrt_abi_named_value_t* values = tpurt_xcalloc(user.count + 1, sizeof(*values));
  pjrt_client_options_to_abi(&user, values);
  static const char kName[] = "cpu_device_count";
  if (add_count) {
    values[user.count] = (pjrt_abi_named_value_t){.struct_size = pjrt_abi_named_value_t_SIZE,
                                                  .name = kName,
                                                  .name_size = sizeof(kName) - 1,
                                                  .type = PJRTABI_NAMED_VALUE_INT64,
                                                  .value.int64_value = count,
                                                  .value_size = 1};
  }
  pjrt_abi_client_t* client = NULL;
  /* Tried in order while the plugin refuses what it is given
  ** (INVALID_ARGUMENT): everything; without cpu_device_count (the CUDA
  ** plugin validates names, and takes node_id / num_nodes); without node_id
  ** / num_nodes, the callbacks kept (libtpu reads its topology from the
  ** environment); without both. The last refusal is what is reported. */
  static const bool kTries[4][2] = {{true, true}, {false, true}, {true, false}, {false, false}};
  bool dist_options = dist && dist->num_nodes > 1, tried[2][2] = {{false}}, used_count = false;
  tpurt_status_t status = NULL, first = NULL; /* the last attempt's result, the first refusal */
  for (int i = 0; i < 4; ++i) {
    bool with_count = kTries[i][0] && add_count, with_dist = kTries[i][1] && dist_options;
    if (tried[with_count][with_dist]) continue;
    tried[with_count][with_dist] = true;
    if (status) {
      if (first)
        tpurt_status_free(status);
      else
        first = status;
    }
    used_count = with_count;
    status = client_create_with(values, user.count + (with_count ? 1 : 0), dist, with_dist, &client);
    if (tpurt_status_code(status) != TPURT_INVALID_ARGUMENT) break;
  }
  if (!status && add_count && !used_count && tpurt_config()->num_devices_set) {
    fprintf(stderr,
            "torch_tpu: TORCH_TPU_NUM_DEVICES ignored: the plugin does not take cpu_device_count (%s)\n",
            first ? tpurt_status_message(first) : "");
  }
  tpurt_status_free(first);
  if (status && user.count) {
    tpurt_strbuf_t passed = {0};
    tpurt_strbuf_puts(&passed, " (TORCH_TPU_PJRT_OPTIONS passed: ");
    pjrt_client_options_describe(&user, &passed);
    tpurt_strbuf_puts(&passed, ")");
    tpurt_status_t annotated =
        tpurt_status_create(tpurt_status_code(status), "%s%s", tpurt_status_message(status), passed.data);
    tpurt_status_free(status);
    tpurt_strbuf_free(&passed);
    status = annotated;
  }
  free(values);
  pjrt_client_options_free(&user);
  if (status) return tpurt_status_annotate_consume(status, "creating the PJRT client");
  pjrt_g.client = client;
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t client_string(int slot, const char* name, char** out) {
  PJRT_ARGS(pjrt_abi_client_string_args_t, a);
  a.client = pjrt_g.client;
  TPURT_RETURN_IF_ERROR(PJRT_CALL(slot, name, &a));
  *out = copy_text(a.text ? a.text : "", a.text ? a.text_size : 0);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t read_devices(void) {
  PJRT_ARGS(pjrt_abi_client_addressable_devices_args_t, a);
  a.client = pjrt_g.client;
  TPURT_RETURN_IF_ERROR(PJRT_CALL(PJRTABI_CLIENT_ADDRESSABLE_DEVICES, "Client_AddressableDevices", &a));
  if (a.num_addressable_devices == 0) {
    return tpurt_status_create(TPURT_UNAVAILABLE, "PJRT plugin '%s' has no addressable devices",
                               pjrt_g.api.path);
  }
  size_t n = a.num_addressable_devices;
  if (n > PJRT_MAX_DEVICES) {
    fprintf(stderr, "torch_tpu: the PJRT client has %zu devices; using the first %d\n", n, PJRT_MAX_DEVICES);
    n = PJRT_MAX_DEVICES;
  }
  for (size_t i = 0; i < n; ++i) {
    pjrt_g.devices[i] = a.addressable_devices[i];
    PJRT_ARGS(pjrt_abi_device_get_description_args_t, d);
    d.device = pjrt_g.devices[i];
    TPURT_RETURN_IF_ERROR(PJRT_CALL(PJRTABI_DEVICE_GET_DESCRIPTION, "Device_GetDescription", &d));
    PJRT_ARGS(pjrt_abi_device_description_id_args_t, id);
    id.device_description = d.device_description;
    TPURT_RETURN_IF_ERROR(PJRT_CALL(PJRTABI_DEVICE_DESCRIPTION_ID, "DeviceDescription_Id", &id));
    pjrt_g.device_ids[i] = id.id;
    PJRT_ARGS(pjrt_abi_device_description_kind_args_t, k);
    k.device_description = d.device_description;
    TPURT_RETURN_IF_ERROR(PJRT_CALL(PJRTABI_DEVICE_DESCRIPTION_KIND, "DeviceDescription_Kind", &k));
    pjrt_g.device_kinds[i] =
        copy_text(k.device_kind ? k.device_kind : "", k.device_kind ? k.device_kind_size : 0);
  }
  pjrt_g.num_devices = (int)n;
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t init_runtime(void) {
  const char* env = tpurt_config()->plugin_path;
  char* path = NULL;
  if (env) {
    path = tpurt_xstrdup(env);
  } else {
    pthread_mutex_lock(&g_default_lock);
    if (g_default_plugin) path = tpurt_xstrdup(g_default_plugin);
    pthread_mutex_unlock(&g_default_lock);
  }
  if (!path) {
    return tpurt_status_create(TPURT_NOT_FOUND,
                               "no PJRT plugin found: set TORCH_TPU_PJRT_PLUGIN to a plugin .so (libtpu.so, "
                               "xla_cpu_pjrt.so...) or `pip install xla-cpu-pjrt`");
  }
  tpurt_status_t status = pjrt_api_load(path, &pjrt_g.api);
  free(path);
  if (status) return status;
  TPURT_RETURN_IF_ERROR(pjrt_api_initialize_once(&pjrt_g.api));
  pthread_mutex_lock(&g_default_lock);
  g_runtime_started = true; /* the place in a job is fixed from here */
  const pjrt_distributed_t* dist = g_has_distributed ? &g_distributed : NULL;
  pthread_mutex_unlock(&g_default_lock);
  TPURT_RETURN_IF_ERROR(create_client(dist));
  TPURT_RETURN_IF_ERROR(
      client_string(PJRTABI_CLIENT_PLATFORM_NAME, "Client_PlatformName", &pjrt_g.platform_name));
  TPURT_RETURN_IF_ERROR(
      client_string(PJRTABI_CLIENT_PLATFORM_VERSION, "Client_PlatformVersion", &pjrt_g.platform_version));
  TPURT_RETURN_IF_ERROR(read_devices());
  tpurt_strbuf_t id = {0};
  tpurt_strbuf_printf(&id, "%s|%d.%d|%s|%s", pjrt_g.api.path, pjrt_g.api.major, pjrt_g.api.minor,
                      pjrt_g.platform_name, pjrt_g.platform_version);
  pjrt_g.identity = id.data;
  return NULL;
}

/* pthread_atfork's child handler: see pjrt_api_mark_forked. */
static void after_fork_in_child(void) {
  pjrt_api_mark_forked();
  pthread_mutex_init(&pjrt_g.lock, NULL); /* another thread may have held it at the fork */
  pjrt_execute_forget_after_fork();
}

/* exit()'s handler: waits for the work still queued on the devices.
** Registered after the plugin is loaded, so it runs before the destructors
** of the plugin's statics: a program still running when they ran crashed the
** process (issue 24, defect 0: a script that ends right after its last
** launch exited with SIGSEGV in the program's code). A forked child has
** nothing of its own to wait for. */
static void wait_idle_at_exit(void) {
  if (!pjrt_api_forked()) pjrt_wait_idle();
}

static void init_once(void) {
  /* Before the plugin starts a thread: a child forked from here on cannot use it. */
  (void)pthread_atfork(NULL, NULL, after_fork_in_child);
  tpurt_status_t status = init_runtime();
  if (!status) (void)atexit(wait_idle_at_exit); /* failing to register it only loses the wait */
  if (status) {
    /* The client, if any, stays: a half-made runtime is never used. */
    g_init_code = tpurt_status_code(status);
    g_init_message = tpurt_xstrdup(tpurt_status_message(status));
    pjrt_g.num_devices = 0;
    tpurt_status_free(status);
  }
}

tpurt_status_t pjrt_init(void) {
  pthread_once(&g_once, init_once);
  if (g_init_message) return tpurt_status_create(g_init_code, "%s", g_init_message);
  return NULL;
}

int pjrt_device_count(void) {
  tpurt_status_t status = pjrt_init();
  if (status) {
    tpurt_status_ignore(status);
    return 0;
  }
  return pjrt_g.num_devices;
}

tpurt_status_t pjrt_check_device(int device) {
  if (device < 0 || device >= pjrt_g.num_devices) {
    return tpurt_status_create(TPURT_OUT_OF_RANGE,
                               "device index %d is out of range: the PJRT client has %d device%s", device,
                               pjrt_g.num_devices, pjrt_g.num_devices == 1 ? "" : "s");
  }
  return NULL;
}

tpurt_status_t pjrt_info(tpurt_runtime_info_t* out_info) {
  memset(out_info, 0, sizeof(*out_info));
  TPURT_RETURN_IF_ERROR(pjrt_init());
  out_info->plugin_path = pjrt_g.api.path;
  out_info->api_major = pjrt_g.api.major;
  out_info->api_minor = pjrt_g.api.minor;
  out_info->platform_name = pjrt_g.platform_name;
  out_info->platform_version = pjrt_g.platform_version;
  out_info->device_kind = pjrt_g.device_kinds[0];
  out_info->device_count = pjrt_g.num_devices;
  return NULL;
}

tpurt_status_t pjrt_device_kind(int device, const char** out_kind) {
  *out_kind = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_init());
  TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  *out_kind = pjrt_g.device_kinds[device];
  return NULL;
}

const char* pjrt_identity(void) {
  tpurt_status_t status = pjrt_init();
  if (status) {
    tpurt_status_ignore(status);
    return "";
  }
  return pjrt_g.identity;
}

pjrt_counters_t* pjrt_counters(void) { return &pjrt_g.counters; }
