/* loader.c: opening a PJRT plugin, checking its api table, and calling its
** slots with PJRT errors turned into status objects. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pjrt_internal.h"

tpurt_status_t pjrt_api_load(const char* path, pjrt_api_t* out_api) {
  memset(out_api, 0, sizeof(*out_api));
  /* dlopen of a FIFO blocks until a writer comes (forever), and of a device
  ** reads whatever it gives: a path (one with a '/'; a bare name is searched
  ** for) must name a regular file, looked at without blocking. */
  if (strchr(path, '/')) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    bool regular = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (fd >= 0) close(fd);
    if (fd >= 0 && !regular) {
      return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                 "cannot open PJRT plugin '%s': not a regular file (a plugin is a shared "
                                 "library, .so)",
                                 path);
    }
  }
  dlerror();
  /* Never dlclosed: plugins keep static registries that must not unload. */
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return tpurt_status_create(TPURT_NOT_FOUND, "cannot open PJRT plugin '%s': %s", path,
                               why ? why : "unknown error");
  }
  typedef const void* (*get_api_fn_t)(void);
  get_api_fn_t get_api;
  void* sym = dlsym(handle, "GetPjrtApi");
  memcpy(&get_api, &sym, sizeof(get_api));
  if (!sym) {
    return tpurt_status_create(TPURT_NOT_FOUND,
                               "PJRT plugin '%s' does not export GetPjrtApi: not a PJRT plugin", path);
  }
  const pjrt_abi_api_head_t* head = get_api();
  if (!head) return tpurt_status_create(TPURT_INTERNAL, "PJRT plugin '%s': GetPjrtApi returned NULL", path);
  if (head->struct_size < sizeof(pjrt_abi_api_head_t) + 8 * (PJRTABI_ERROR_GET_CODE + 1)) {
    return tpurt_status_create(
        TPURT_FAILED_PRECONDITION,
        "PJRT plugin '%s': PJRT_Api is %zu bytes, expected at least %zu (not a PJRT api table?)", path,
        head->struct_size, sizeof(pjrt_abi_api_head_t) + 8 * 3);
  }
  int major = head->version.major, minor = head->version.minor;
  if (major != 0 || minor < PJRT_MIN_MINOR) {
    return tpurt_status_create(
        TPURT_FAILED_PRECONDITION,
        "PJRT plugin '%s' reports PJRT C API %d.%d; torch_tpu needs 0.%d or newer with major "
        "version 0",
        path, major, minor, PJRT_MIN_MINOR);
  }
  out_api->path = tpurt_xstrdup(path);
  out_api->table = (const unsigned char*)head;
  out_api->size = head->struct_size;
  out_api->major = major;
  out_api->minor = minor;
  return NULL;
}

/* The plugin tables initialised so far; a process loads very few. */
#define MAX_INITIALISED 8
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static const unsigned char* g_initialised[MAX_INITIALISED];
static int g_num_initialised;

tpurt_status_t pjrt_api_initialize_once(const pjrt_api_t* api) {
  pthread_mutex_lock(&g_init_lock);
  for (int i = 0; i < g_num_initialised; ++i) {
    if (g_initialised[i] == api->table) {
      pthread_mutex_unlock(&g_init_lock);
      return NULL;
    }
  }
  pjrt_abi_plugin_initialize_args_t a = {.struct_size = pjrt_abi_plugin_initialize_args_t_SIZE};
  tpurt_status_t status = pjrt_api_call(api, PJRTABI_PLUGIN_INITIALIZE, "Plugin_Initialize", &a);
  if (!status && g_num_initialised < MAX_INITIALISED) g_initialised[g_num_initialised++] = api->table;
  pthread_mutex_unlock(&g_init_lock);
  return tpurt_status_annotate_consume(status, "initialising the PJRT plugin");
}

void* pjrt_api_slot(const pjrt_api_t* api, int slot) {
  size_t offset = PJRTABI_SLOT_OFFSET(slot);
  if (!api->table || offset + 8 > api->size) return NULL;
  void* fn;
  memcpy(&fn, api->table + offset, sizeof(fn));
  return fn;
}

static pjrt_abi_fn_t slot_fn(const pjrt_api_t* api, int slot) {
  pjrt_abi_fn_t fn;
  void* p = pjrt_api_slot(api, slot);
  memcpy(&fn, &p, sizeof(fn));
  return fn;
}

static void error_free(const pjrt_api_t* api, pjrt_abi_error_t* error) {
  pjrt_abi_error_destroy_args_t d = {.struct_size = pjrt_abi_error_destroy_args_t_SIZE, .error = error};
  pjrt_abi_void_fn_t destroy_fn;
  void* p = pjrt_api_slot(api, PJRTABI_ERROR_DESTROY);
  memcpy(&destroy_fn, &p, sizeof(destroy_fn));
  if (destroy_fn) destroy_fn(&d);
}

tpurt_status_t pjrt_api_error_consume(const pjrt_api_t* api, pjrt_abi_error_t* error) {
  if (!error) return NULL;
  /* Slots 0..2 are checked present by pjrt_api_load. */
  pjrt_abi_error_message_args_t m = {.struct_size = pjrt_abi_error_message_args_t_SIZE, .error = error};
  pjrt_abi_void_fn_t message_fn;
  void* p = pjrt_api_slot(api, PJRTABI_ERROR_MESSAGE);
  memcpy(&message_fn, &p, sizeof(message_fn));
  if (message_fn) message_fn(&m);
  pjrt_abi_error_get_code_args_t c = {.struct_size = pjrt_abi_error_get_code_args_t_SIZE, .error = error};
  int code = TPURT_UNKNOWN;
  pjrt_abi_fn_t code_fn = slot_fn(api, PJRTABI_ERROR_GET_CODE);
  if (code_fn) {
    pjrt_abi_error_t* e2 = code_fn(&c);
    if (e2) {
      error_free(api, e2); /* an error about an error is not worth more */
    } else {
      code = c.code;
    }
  }
  if (code <= TPURT_OK || code > TPURT_UNAUTHENTICATED) code = TPURT_UNKNOWN;
  size_t n = m.message ? m.message_size : 0;
  while (n && (m.message[n - 1] == '\n' || m.message[n - 1] == ' ')) --n; /* plugins end some with "\n" */
  /* XLA reports an allocation that fails inside a running program as a
  ** compute error ("Out of memory allocating N bytes") with another code;
  ** it is an out-of-memory all the same (torch.OutOfMemoryError). */
  if (code != TPURT_RESOURCE_EXHAUSTED && n && memmem(m.message, n, "Out of memory", 13))
    code = TPURT_RESOURCE_EXHAUSTED;
  tpurt_status_t status =
      n ? tpurt_status_create((tpurt_status_code_t)code, "%.*s", (int)n, m.message)
        : tpurt_status_create((tpurt_status_code_t)code, "PJRT error with no message (code %d)", code);
  error_free(api, error);
  return status;
}

static bool g_forked;

void pjrt_api_mark_forked(void) { __atomic_store_n(&g_forked, true, __ATOMIC_RELEASE); }
bool pjrt_api_forked(void) { return __atomic_load_n(&g_forked, __ATOMIC_ACQUIRE); }

tpurt_status_t pjrt_api_forked_error(const char* name) {
  return tpurt_status_create(TPURT_FAILED_PRECONDITION,
                             "Cannot re-initialize the tpu runtime in a forked subprocess (%s): the "
                             "parent had started it, and its threads do not exist in the child. To use "
                             "tpu with multiprocessing, use the 'spawn' or 'forkserver' start method "
                             "(torch.multiprocessing.set_start_method('spawn'), or "
                             "DataLoader(multiprocessing_context='spawn'))",
                             name);
}

tpurt_status_t pjrt_api_call(const pjrt_api_t* api, int slot, const char* name, void* args) {
  if (pjrt_api_forked()) {
    char what[96];
    snprintf(what, sizeof what, "PJRT_%s", name);
    return pjrt_api_forked_error(what);
  }
  pjrt_abi_fn_t fn = slot_fn(api, slot);
  if (!fn) {
    return tpurt_status_create(TPURT_UNIMPLEMENTED,
                               "PJRT plugin '%s' (C API %d.%d) does not implement PJRT_%s", api->path,
                               api->major, api->minor, name);
  }
  return pjrt_api_error_consume(api, fn(args));
}

void pjrt_api_event_free(const pjrt_api_t* api, pjrt_abi_event_t* event) {
  if (!event) return;
  pjrt_abi_event_args_t a = {.struct_size = pjrt_abi_event_args_t_SIZE, .event = event};
  tpurt_status_ignore(pjrt_api_call(api, PJRTABI_EVENT_DESTROY, "Event_Destroy", &a));
}

tpurt_status_t pjrt_api_event_await(const pjrt_api_t* api, pjrt_abi_event_t* event) {
  if (!event) return NULL;
  pjrt_abi_event_args_t a = {.struct_size = pjrt_abi_event_args_t_SIZE, .event = event};
  tpurt_status_t status = pjrt_api_call(api, PJRTABI_EVENT_AWAIT, "Event_Await", &a);
  pjrt_api_event_free(api, event);
  return status;
}

tpurt_status_t pjrt_probe_plugin(const char* path, int* out_major, int* out_minor) {
  pjrt_api_t api;
  TPURT_RETURN_IF_ERROR(pjrt_api_load(path, &api));
  if (out_major) *out_major = api.major;
  if (out_minor) *out_minor = api.minor;
  free(api.path);
  return NULL;
}
