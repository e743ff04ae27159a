/* execute.c: compiling StableHLO, (de)serialising executables, launching
** them, and tracking their completion events so that asynchronous errors
** surface at the next synchronize, naming the op. */
#include <stdio.h>
#include <time.h>

#include "pjrt_internal.h"

struct pjrt_executable_s {
  pjrt_abi_loaded_executable_t* loaded;
  size_t num_outputs;
  int refcount; /* atomic (__atomic builtins); destroyed at zero */
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void destroy_loaded_locked(pjrt_abi_loaded_executable_t* loaded) {
  PJRT_ARGS(pjrt_abi_executable_destroy_args_t, a);
  a.executable = loaded;
  tpurt_status_free(PJRT_CALL(PJRTABI_LOADED_EXECUTABLE_DESTROY, "LoadedExecutable_Destroy", &a));
}

/* Calls |fn| with the PJRT_Executable of |loaded| (lock held). */
static tpurt_status_t with_executable_locked(pjrt_abi_loaded_executable_t* loaded,
                                             tpurt_status_t (*fn)(pjrt_abi_executable_t*, void*), void* arg) {
  PJRT_ARGS(pjrt_abi_loaded_executable_get_executable_args_t, g);
  g.loaded_executable = loaded;
  TPURT_RETURN_IF_ERROR(
      PJRT_CALL(PJRTABI_LOADED_EXECUTABLE_GET_EXECUTABLE, "LoadedExecutable_GetExecutable", &g));
  tpurt_status_t status = fn(g.executable, arg);
  PJRT_ARGS(pjrt_abi_executable_destroy_args_t, d);
  d.executable = g.executable;
  tpurt_status_free(PJRT_CALL(PJRTABI_EXECUTABLE_DESTROY, "Executable_Destroy", &d));
  return status;
}

static tpurt_status_t read_num_outputs(pjrt_abi_executable_t* executable, void* out) {
  PJRT_ARGS(pjrt_abi_executable_num_outputs_args_t, a);
  a.executable = executable;
  TPURT_RETURN_IF_ERROR(PJRT_CALL(PJRTABI_EXECUTABLE_NUM_OUTPUTS, "Executable_NumOutputs", &a));
  *(size_t*)out = a.num_outputs;
  return NULL;
}

/* Wraps a freshly loaded executable (lock held); destroys it on error. */
static tpurt_status_t wrap_executable_locked(pjrt_abi_loaded_executable_t* loaded, pjrt_executable_t** out) {
  size_t num_outputs = 0;
  tpurt_status_t status = with_executable_locked(loaded, read_num_outputs, &num_outputs);
  if (status) {
    destroy_loaded_locked(loaded);
    return status;
  }
  pjrt_executable_t* e = tpurt_xcalloc(1, sizeof(*e));
  e->loaded = loaded;
  e->num_outputs = num_outputs;
  e->refcount = 1;
  *out = e;
  return NULL;
}

tpurt_status_t pjrt_compile(const char* mlir, size_t mlir_size, pjrt_executable_t** out_executable) {
  *out_executable = NULL;
  const char* options = NULL;
  size_t options_size = 0;
  TPURT_RETURN_IF_ERROR(pjrt_current_compile_options(&options, &options_size, NULL));
  return pjrt_compile_with_options(mlir, mlir_size, options, options_size, out_executable);
}

/* The compile options are built by options.c (pjrt_current_compile_options):
** one encoder for the compile call and the cache key. */
tpurt_status_t pjrt_compile_with_options(const char* mlir, size_t mlir_size, const char* options,
                                         size_t options_size, pjrt_executable_t** out_executable) {
  *out_executable = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_init());
  PJRT_ARGS(pjrt_abi_program_t, program);
  program.code = mlir;
  program.code_size = mlir_size;
  program.format = "mlir";
  program.format_size = 4;
  PJRT_ARGS(pjrt_abi_client_compile_args_t, a);
  a.client = pjrt_g.client;
  a.program = &program;
  a.compile_options = options;
  a.compile_options_size = options_size;
  pthread_mutex_lock(&pjrt_g.lock);
  double start = now_seconds();
  tpurt_status_t status = PJRT_CALL(PJRTABI_CLIENT_COMPILE, "Client_Compile", &a);
  pjrt_g.counters.compile_seconds += now_seconds() - start;
  pjrt_g.counters.compiles++;
  if (!status) status = wrap_executable_locked(a.executable, out_executable);
  pthread_mutex_unlock(&pjrt_g.lock);
  return tpurt_status_annotate(status, "compiling StableHLO");
}

void pjrt_executable_retain(pjrt_executable_t* executable) {
  __atomic_add_fetch(&executable->refcount, 1, __ATOMIC_RELAXED);
}

void pjrt_executable_release(pjrt_executable_t* executable) {
  if (!executable) return;
  if (__atomic_sub_fetch(&executable->refcount, 1, __ATOMIC_ACQ_REL) > 0) return;
  pthread_mutex_lock(&pjrt_g.lock);
  destroy_loaded_locked(executable->loaded);
  pthread_mutex_unlock(&pjrt_g.lock);
  free(executable);
}

size_t pjrt_executable_num_outputs(const pjrt_executable_t* executable) { return executable->num_outputs; }

typedef struct {
  char* bytes;
  size_t size;
} blob_t;

static tpurt_status_t serialize(pjrt_abi_executable_t* executable, void* out) {
  PJRT_ARGS(pjrt_abi_executable_serialize_args_t, a);
  a.executable = executable;
  TPURT_RETURN_IF_ERROR(PJRT_CALL(PJRTABI_EXECUTABLE_SERIALIZE, "Executable_Serialize", &a));
  blob_t* blob = out;
  blob->size = a.serialized_bytes_size;
  blob->bytes = tpurt_xmalloc(blob->size);
  if (blob->size) memcpy(blob->bytes, a.serialized_bytes, blob->size);
  if (a.serialized_executable_deleter) a.serialized_executable_deleter(a.serialized_executable);
  return NULL;
}

tpurt_status_t pjrt_executable_serialize(pjrt_executable_t* executable, char** out_bytes, size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  blob_t blob = {0};
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t status = with_executable_locked(executable->loaded, serialize, &blob);
  pthread_mutex_unlock(&pjrt_g.lock);
  if (status) return tpurt_status_annotate(status, "serialising an executable");
  *out_bytes = blob.bytes;
  *out_size = blob.size;
  return NULL;
}

tpurt_status_t pjrt_executable_deserialize(const char* bytes, size_t size,
                                           pjrt_executable_t** out_executable) {
  *out_executable = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_init());
  PJRT_ARGS(pjrt_abi_deserialize_and_load_args_t, a);
  a.client = pjrt_g.client;
  a.serialized_executable = bytes;
  a.serialized_executable_size = size;
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t status =
      PJRT_CALL(PJRTABI_EXECUTABLE_DESERIALIZE_AND_LOAD, "Executable_DeserializeAndLoad", &a);
  if (!status) status = wrap_executable_locked(a.loaded_executable, out_executable);
  pthread_mutex_unlock(&pjrt_g.lock);
  return tpurt_status_annotate(status, "loading a serialised executable");
}

/*===--- completion events and asynchronous errors ---===*/

#define MAX_PENDING 1024 /* beyond this, execute waits for the oldest launch */

typedef struct {
  pjrt_abi_event_t* event;
  pjrt_launch_t* launch;
} pending_t;

static pending_t g_pending[MAX_PENDING];
static size_t g_num_pending;
/* The first asynchronous error per device since the last synchronize, and
** the order in which they came. */
static tpurt_status_t g_async_error[PJRT_MAX_DEVICES];
static uint64_t g_async_seq[PJRT_MAX_DEVICES], g_next_seq;

/* Keeps |error| (annotated with the op) unless the device has one already
** (lock held). */
static void record_error_locked(pjrt_launch_t* launch, tpurt_status_t error) {
  if (!error) return;
  if (g_async_error[launch->device]) {
    tpurt_status_free(error);
    return;
  }
  g_async_error[launch->device] = tpurt_status_annotate(error, launch->op_name);
  g_async_seq[launch->device] = ++g_next_seq;
}

/* Finishes the pending launches that are ready, without waiting (lock held). */
static void reap_ready_locked(void) {
  size_t kept = 0;
  for (size_t i = 0; i < g_num_pending; ++i) {
    pending_t p = g_pending[i];
    PJRT_ARGS(pjrt_abi_event_is_ready_args_t, r);
    r.event = p.event;
    tpurt_status_t status = PJRT_CALL(PJRTABI_EVENT_IS_READY, "Event_IsReady", &r);
    if (!status && !r.is_ready) {
      g_pending[kept++] = p;
      continue;
    }
    if (!status) {
      PJRT_ARGS(pjrt_abi_event_args_t, e);
      e.event = p.event;
      status = PJRT_CALL(PJRTABI_EVENT_ERROR, "Event_Error", &e);
    }
    record_error_locked(p.launch, status);
    pjrt_api_event_destroy(&pjrt_g.api, p.event);
    pjrt_launch_release(p.launch);
  }
  g_num_pending = kept;
}

/* Waits for |p| without the lock, then records its error. */
static void finish_pending(pending_t p) {
  tpurt_status_t status = pjrt_api_event_await(&pjrt_g.api, p.event);
  pthread_mutex_lock(&pjrt_g.lock);
  record_error_locked(p.launch, status);
  pthread_mutex_unlock(&pjrt_g.lock);
  pjrt_launch_release(p.launch);
}

tpurt_status_t pjrt_synchronize(int device) {
  if (device != -1) TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  /* Take the matching launches out, then wait for them unlocked. */
  pthread_mutex_lock(&pjrt_g.lock);
  size_t n = 0, kept = 0;
  pending_t* mine = tpurt_xmalloc(sizeof(pending_t) * (g_num_pending ? g_num_pending : 1));
  for (size_t i = 0; i < g_num_pending; ++i) {
    if (device == -1 || g_pending[i].launch->device == device) {
      mine[n++] = g_pending[i];
    } else {
      g_pending[kept++] = g_pending[i];
    }
  }
  g_num_pending = kept;
  pthread_mutex_unlock(&pjrt_g.lock);
  for (size_t i = 0; i < n; ++i) finish_pending(mine[i]);
  free(mine);
  /* Report the earliest error among the devices asked about; clear them. */
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t first = NULL;
  uint64_t first_seq = 0;
  int lo = device == -1 ? 0 : device, hi = device == -1 ? PJRT_MAX_DEVICES : device + 1;
  for (int d = lo; d < hi; ++d) {
    if (!g_async_error[d]) continue;
    if (!first || g_async_seq[d] < first_seq) {
      tpurt_status_free(first);
      first = g_async_error[d];
      first_seq = g_async_seq[d];
    } else {
      tpurt_status_free(g_async_error[d]);
    }
    g_async_error[d] = NULL;
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  return first;
}

/*===--- execute ---===*/

tpurt_status_t pjrt_execute(pjrt_executable_t* executable, int device, pjrt_buffer_t* const* args,
                            size_t num_args, pjrt_buffer_t** outputs, size_t num_outputs,
                            const char* op_name) {
  for (size_t i = 0; i < num_outputs; ++i) outputs[i] = NULL;
  if (!op_name) op_name = "<unnamed program>";
  TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  if (num_outputs != executable->num_outputs) {
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "%s: the program has %zu outputs, the caller expects %zu", op_name,
                               executable->num_outputs, num_outputs);
  }
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i]->device != device) {
      return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                 "%s: argument %zu is on device %d, the program runs on %d", op_name, i,
                                 args[i]->device, device);
    }
  }
  enum { kInline = 16 };
  pjrt_abi_buffer_t* arg_inline[kInline];
  pjrt_abi_buffer_t* out_inline[kInline];
  pjrt_abi_buffer_t** raw_args = num_args <= kInline ? arg_inline : tpurt_xmalloc(sizeof(void*) * num_args);
  pjrt_abi_buffer_t** raw_outs =
      num_outputs <= kInline ? out_inline : tpurt_xmalloc(sizeof(void*) * num_outputs);
  for (size_t i = 0; i < num_args; ++i) raw_args[i] = args[i]->raw;
  for (size_t i = 0; i < num_outputs; ++i) raw_outs[i] = NULL;

  pjrt_abi_buffer_t* const* arg_lists[1] = {raw_args};
  pjrt_abi_buffer_t** out_lists[1] = {raw_outs};
  pjrt_abi_event_t* done[1] = {NULL};
  PJRT_ARGS(pjrt_abi_execute_options_t, options);
  PJRT_ARGS(pjrt_abi_execute_args_t, a);
  a.executable = executable->loaded;
  a.options = &options;
  a.argument_lists = arg_lists;
  a.num_devices = 1;
  a.num_args = num_args;
  a.output_lists = out_lists;
  a.device_complete_events = done;
  a.execute_device = pjrt_g.devices[device];

  size_t name_size = strlen(op_name) + 1;
  pjrt_launch_t* launch = tpurt_xmalloc(sizeof(*launch) + name_size);
  launch->refcount = 1; /* the pending entry's */
  launch->device = device;
  memcpy(launch->op_name, op_name, name_size);

  pending_t oldest = {0};
  pthread_mutex_lock(&pjrt_g.lock);
  reap_ready_locked();
  tpurt_status_t status = PJRT_CALL(PJRTABI_LOADED_EXECUTABLE_EXECUTE, "LoadedExecutable_Execute", &a);
  if (!status) {
    pjrt_g.counters.executions++;
    for (size_t i = 0; i < num_outputs; ++i) {
      tpurt_status_t s = pjrt_wrap_buffer_locked(raw_outs[i], device, launch, &outputs[i]);
      raw_outs[i] = NULL;
      if (s && !status)
        status = s;
      else
        tpurt_status_free(s);
    }
    if (done[0]) {
      if (g_num_pending == MAX_PENDING) {
        oldest = g_pending[0];
        memmove(g_pending, g_pending + 1, sizeof(pending_t) * (MAX_PENDING - 1));
        g_num_pending--;
      }
      g_pending[g_num_pending++] = (pending_t){done[0], launch};
      launch = NULL;
    }
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  if (oldest.event) finish_pending(oldest);
  if (raw_args != arg_inline) free(raw_args);
  if (raw_outs != out_inline) free(raw_outs);
  pjrt_launch_release(launch); /* NULL once the pending list owns it */
  if (status) {
    for (size_t i = 0; i < num_outputs; ++i) {
      pjrt_buffer_release(outputs[i]);
      outputs[i] = NULL;
    }
    return tpurt_status_annotate(status, op_name);
  }
  return NULL;
}
