/* execute.c: compiling StableHLO, (de)serialising executables, launching
** them, and tracking their completion events so that asynchronous errors
** surface at the next synchronize, naming the op. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pjrt_internal.h"

struct pjrt_executable_s {
  pjrt_abi_loaded_executable_t* loaded;
  size_t num_outputs;
  tpurt_refcount_t refcount; /* freed at zero */
  bool compiled_here;        /* compiled in this process (not loaded from the disk cache) */
  int32_t num_ops;           /* StableHLO ops in the module (0: loaded, unknown) */
  uint64_t launches;         /* lock held */
  uint64_t* shadow_runs;     /* the shadow record's run counter (atomic), or NULL */
  uint32_t shadow_gen;       /* the shadow generation it was recorded under */
};

uint32_t pjrt_shadow_gen_now;

void pjrt_executable_set_shadow(pjrt_executable_t* executable, uint64_t* runs, uint32_t gen) {
  __atomic_store_n(&executable->shadow_runs, runs, __ATOMIC_RELEASE);
  __atomic_store_n(&executable->shadow_gen, gen, __ATOMIC_RELEASE);
}

uint32_t pjrt_executable_shadow_gen(const pjrt_executable_t* executable) {
  return __atomic_load_n(&executable->shadow_gen, __ATOMIC_ACQUIRE);
}

bool pjrt_executable_shadowed(const pjrt_executable_t* executable) {
  uint32_t now = __atomic_load_n(&pjrt_shadow_gen_now, __ATOMIC_ACQUIRE);
  return now == 0 || pjrt_executable_shadow_gen(executable) == now;
}

/* One launch of |executable| for its shadow record, if it has one. */
static void count_shadow_run(pjrt_executable_t* executable) {
  uint64_t* runs = __atomic_load_n(&executable->shadow_runs, __ATOMIC_ACQUIRE);
  if (runs && pjrt_executable_shadowed(executable)) __atomic_add_fetch(runs, 1, __ATOMIC_RELAXED);
}

/* StableHLO ops in |mlir|: the launch log reports it per program. */
static int32_t count_ops(const char* mlir, size_t size) {
  static const char kPrefix[] = "stablehlo.";
  const size_t n = sizeof(kPrefix) - 1;
  int32_t count = 0;
  for (size_t i = 0; i + n <= size; ++i) {
    if (mlir[i] == 's' && memcmp(mlir + i, kPrefix, n) == 0) {
      ++count;
      i += n - 1;
    }
  }
  return count;
}

uint64_t pjrt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void loaded_executable_free_locked(pjrt_abi_loaded_executable_t* loaded) {
  PJRT_ARGS(pjrt_abi_executable_destroy_args_t, a);
  a.executable = loaded;
  tpurt_status_ignore(PJRT_CALL(PJRTABI_LOADED_EXECUTABLE_DESTROY, "LoadedExecutable_Destroy", &a));
}

/* Calls |fn| with the PJRT_Executable of |loaded| (lock held). */
static TPURT_MUST_USE tpurt_status_t with_executable_locked(
    pjrt_abi_loaded_executable_t* loaded, tpurt_status_t (*fn)(pjrt_abi_executable_t*, void*), void* arg) {
  PJRT_ARGS(pjrt_abi_loaded_executable_get_executable_args_t, g);
  g.loaded_executable = loaded;
  TPURT_RETURN_IF_ERROR(
      PJRT_CALL(PJRTABI_LOADED_EXECUTABLE_GET_EXECUTABLE, "LoadedExecutable_GetExecutable", &g));
  tpurt_status_t status = fn(g.executable, arg);
  PJRT_ARGS(pjrt_abi_executable_destroy_args_t, d);
  d.executable = g.executable;
  tpurt_status_ignore(PJRT_CALL(PJRTABI_EXECUTABLE_DESTROY, "Executable_Destroy", &d));
  return status;
}

static TPURT_MUST_USE tpurt_status_t read_num_outputs(pjrt_abi_executable_t* executable, void* out) {
  PJRT_ARGS(pjrt_abi_executable_num_outputs_args_t, a);
  a.executable = executable;
  TPURT_RETURN_IF_ERROR(PJRT_CALL(PJRTABI_EXECUTABLE_NUM_OUTPUTS, "Executable_NumOutputs", &a));
  *(size_t*)out = a.num_outputs;
  return NULL;
}

/* Wraps a freshly loaded executable (lock held); destroys it on error. */
static TPURT_MUST_USE tpurt_status_t wrap_executable_locked(pjrt_abi_loaded_executable_t* loaded,
                                                            pjrt_executable_t** out) {
  size_t num_outputs = 0;
  tpurt_status_t status = with_executable_locked(loaded, read_num_outputs, &num_outputs);
  if (status) {
    loaded_executable_free_locked(loaded);
    return status;
  }
  pjrt_executable_t* e = tpurt_xcalloc(1, sizeof(*e));
  e->loaded = loaded;
  e->num_outputs = num_outputs;
  tpurt_refcount_init(&e->refcount);
  *out = e;
  return NULL;
}

/*===--- the long-compile notice ---===*/
/* A first call at new shapes compiles many programs (a tiny FLUX image in
** strict eager: about a hundred, over 10 s) while the user's progress bar
** stands still. Compiles less than kBurstGapNs apart are one burst; when a
** burst's compile time passes TORCH_TPU_COMPILE_NOTICE_MS (default 5 s),
** one line on stderr says what is compiling and for how long, once per
** burst. A single compile longer than that is reported when it ends (the
** plugin's compile call cannot be interrupted to say so). */

static _Thread_local const char* t_compile_label;
static _Thread_local uint64_t t_correlation;

const char* pjrt_swap_compile_label(const char* label) {
  const char* previous = t_compile_label;
  t_compile_label = label;
  return previous;
}

/* Per thread, like the label: the site's kind and a caller's forced one. */
static _Thread_local tpurt_compile_kind_t t_site_kind, t_forced_kind;

tpurt_compile_kind_t pjrt_swap_compile_kind(tpurt_compile_kind_t kind) {
  tpurt_compile_kind_t previous = t_site_kind;
  t_site_kind = kind;
  return previous;
}

tpurt_compile_kind_t pjrt_force_compile_kind(tpurt_compile_kind_t kind) {
  tpurt_compile_kind_t previous = t_forced_kind;
  t_forced_kind = kind >= 0 && kind < TPURT_COMPILE_KINDS ? kind : TPURT_COMPILE_KIND_AUTO;
  return previous;
}

tpurt_compile_kind_t pjrt_forced_compile_kind(void) { return t_forced_kind; }

static tpurt_compile_kind_t current_compile_kind(void) {
  tpurt_compile_kind_t k = t_forced_kind != TPURT_COMPILE_KIND_AUTO ? t_forced_kind : t_site_kind;
  return k >= 0 && k < TPURT_COMPILE_KINDS ? k : TPURT_COMPILE_KIND_AUTO;
}

/* Counts a compile starting: the high-water mark of compiles in flight at
** once is how a test sees compiles overlap without timing them. */
static void compile_started(void) {
  pjrt_counters_t* c = &pjrt_g.counters;
  uint64_t now = atomic_fetch_add(&c->compiles_in_flight, 1) + 1;
  uint64_t seen = atomic_load(&c->max_concurrent_compiles);
  while (now > seen && !atomic_compare_exchange_weak(&c->max_concurrent_compiles, &seen, now)) {
  }
}

void pjrt_set_launch_correlation(uint64_t id) { t_correlation = id; }
uint64_t pjrt_launch_correlation(void) { return t_correlation; }

enum { kBurstGapNs = 2000000000 };

static struct {
  uint64_t last_end_ns; /* when the burst's latest compile ended */
  double seconds;       /* compile time in the burst */
  uint64_t count;
  bool noticed;
  double longest_s;
  char longest[128];
} g_burst; /* pjrt_g.lock held */

static void note_compile_locked(uint64_t start_ns, uint64_t end_ns) {
  const int64_t notice_ms = tpurt_config()->compile_notice_ms;
  if (notice_ms <= 0) return;
  if (g_burst.count == 0 || start_ns > g_burst.last_end_ns + (uint64_t)kBurstGapNs)
    memset(&g_burst, 0, sizeof(g_burst));
  const double seconds = (double)(end_ns - start_ns) / 1e9;
  g_burst.last_end_ns = end_ns;
  g_burst.seconds += seconds;
  g_burst.count++;
  if (seconds > g_burst.longest_s) {
    g_burst.longest_s = seconds;
    tpurt_copy_str(g_burst.longest, sizeof(g_burst.longest), t_compile_label ? t_compile_label : "a program");
  }
  if (g_burst.noticed || g_burst.seconds * 1e3 < (double)notice_ms) return;
  g_burst.noticed = true;
  if (g_burst.count == 1)
    fprintf(stderr, "torch_tpu: compiling %s took %.1f s; it is compiled once and cached for these shapes\n",
            g_burst.longest, g_burst.seconds);
  else
    fprintf(stderr,
            "torch_tpu: compiling for new shapes: %llu programs in %.1f s so far (longest: %s, %.1f s); "
            "each is compiled once and cached, later calls at these shapes reuse them\n",
            (unsigned long long)g_burst.count, g_burst.seconds, g_burst.longest, g_burst.longest_s);
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
  pjrt_abi_program_t program = pjrt_mlir_program(mlir, mlir_size);
  PJRT_ARGS(pjrt_abi_client_compile_args_t, a);
  a.client = pjrt_g.client;
  a.program = &program;
  a.compile_options = options;
  a.compile_options_size = options_size;
  /* The compile runs with no lock of ours held (PJRT clients compile from
  ** any thread), so that threads compiling different programs overlap; the
  ** lock covers the notice's burst and wrapping the result. */
  compile_started();
  const uint64_t start = pjrt_now_ns();
  tpurt_status_t status = PJRT_CALL(PJRTABI_CLIENT_COMPILE, "Client_Compile", &a);
  const uint64_t end = pjrt_now_ns();
  pjrt_counters_t* c = &pjrt_g.counters;
  atomic_fetch_sub(&c->compiles_in_flight, 1);
  const tpurt_compile_kind_t kind = current_compile_kind();
  c->compile_ns += end - start;
  c->compiles++;
  c->compile_ns_by_kind[kind] += end - start;
  c->compiles_by_kind[kind]++;
  pthread_mutex_lock(&pjrt_g.lock);
  if (!status) note_compile_locked(start, end);
  if (!status) status = wrap_executable_locked(a.executable, out_executable);
  if (!status) {
    (*out_executable)->compiled_here = true;
    (*out_executable)->num_ops = count_ops(mlir, mlir_size);
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  return tpurt_status_annotate_consume(status, "compiling StableHLO");
}

void pjrt_executable_note_module(pjrt_executable_t* executable, const char* mlir, size_t mlir_size) {
  executable->num_ops = count_ops(mlir, mlir_size);
}

void pjrt_executable_retain(pjrt_executable_t* executable) { tpurt_refcount_inc(&executable->refcount); }

void pjrt_executable_release(pjrt_executable_t* executable) {
  if (!executable) return;
  if (!tpurt_refcount_dec_and_test(&executable->refcount)) return;
  pthread_mutex_lock(&pjrt_g.lock);
  loaded_executable_free_locked(executable->loaded);
  pthread_mutex_unlock(&pjrt_g.lock);
  free(executable);
}

size_t pjrt_executable_num_outputs(const pjrt_executable_t* executable) { return executable->num_outputs; }

typedef struct {
  char* bytes;
  size_t size;
} blob_t;

static TPURT_MUST_USE tpurt_status_t serialize(pjrt_abi_executable_t* executable, void* out) {
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
  if (status) return tpurt_status_annotate_consume(status, "serialising an executable");
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
  return tpurt_status_annotate_consume(status, "loading a serialised executable");
}

/*===--- completion events and asynchronous errors ---===*/

#define MAX_PENDING 1024 /* beyond this, execute waits for the oldest launch */

/* Work queued on a device and not yet seen complete. |keep| (an async copy's
** source buffer) and |host| (its destination) live until it completes. */
typedef struct {
  pjrt_abi_event_t* event;
  pjrt_launch_t* launch;
  pjrt_buffer_t* keep;
  const char* host;
  size_t host_size;
} pending_t;

static pending_t g_pending[MAX_PENDING];
static size_t g_num_pending;

/* Buffers whose last use finished while the client lock was held; released
** by drain_released() once it is not (releasing takes the lock). */
static pjrt_buffer_t* g_released[MAX_PENDING];
static size_t g_num_released;

static void drain_released(void) {
  for (;;) {
    pthread_mutex_lock(&pjrt_g.lock);
    pjrt_buffer_t* b = g_num_released ? g_released[--g_num_released] : NULL;
    pthread_mutex_unlock(&pjrt_g.lock);
    if (!b) return;
    pjrt_buffer_release(b);
  }
}

/* The first asynchronous error per device since the last synchronize, and
** the order in which they came. */
static tpurt_status_t g_async_error[PJRT_MAX_DEVICES];
static uint64_t g_async_seq[PJRT_MAX_DEVICES], g_next_seq;

/* Keeps |error| (consumed; annotated with the op) unless the device has one
** already (lock held). */
static void record_error_consume_locked(pjrt_launch_t* launch, tpurt_status_t error) {
  if (!error) return;
  pjrt_launch_failed_locked(launch);
  if (g_async_error[launch->device]) {
    tpurt_status_ignore(error);
    return;
  }
  g_async_error[launch->device] = tpurt_status_annotate_consume(error, launch->op_name);
  g_async_seq[launch->device] = ++g_next_seq;
}

void pjrt_record_async_error_consume(int device, tpurt_status_t error) {
  if (!error) return;
  if (device < 0 || device >= PJRT_MAX_DEVICES) device = 0;
  pthread_mutex_lock(&pjrt_g.lock);
  if (g_async_error[device]) {
    tpurt_status_ignore(error);
  } else {
    g_async_error[device] = error;
    g_async_seq[device] = ++g_next_seq;
  }
  pthread_mutex_unlock(&pjrt_g.lock);
}

/*===--- completion times and the launch log ---===*/

/* Completion times come from Event_OnReady callbacks (plugin threads); this
** lock and condition guard done_ns, the log and the per-program totals. */
static pthread_mutex_t g_done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_done_cond = PTHREAD_COND_INITIALIZER;
static uint64_t g_device_free_ns[PJRT_MAX_DEVICES]; /* last completion per device */

/* The most recent launches, for the profiler: a profiling session keeps
** its last LOG_SIZE launches. 4,096 records are 0.7 MB; 65,536 were 11 MB
** that a long run touched page by page (the soak saw it as RSS growth). */
#define LOG_SIZE 4096
static tpurt_launch_record_t g_log[LOG_SIZE];
static uint64_t g_log_next; /* records written so far */

#define PROGRAM_SLOTS 4096 /* distinct program names with totals */
static tpurt_program_stats_t g_programs[PROGRAM_SLOTS];
static uint64_t g_device_ns_total, g_completed_total;

static uint64_t hash_name(const char* s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

/* Marks |launch| complete at |now| and logs it (g_done_lock held). Its
** device time runs from when the device could start it (its launch, or the
** previous completion on that device if later) to its completion. */
static void complete_locked(pjrt_launch_t* launch, uint64_t now) {
  if (__atomic_load_n(&launch->done_ns, __ATOMIC_ACQUIRE)) return;
  uint64_t start = launch->launch_ns;
  if (g_device_free_ns[launch->device] > start) start = g_device_free_ns[launch->device];
  if (start > now) start = now;
  if (now > g_device_free_ns[launch->device]) g_device_free_ns[launch->device] = now;
  __atomic_store_n(&launch->done_ns, now, __ATOMIC_RELEASE);
  tpurt_launch_record_t* r = &g_log[g_log_next++ % LOG_SIZE];
  tpurt_copy_str(r->name, sizeof(r->name), launch->op_name);
  r->device = launch->device;
  r->num_ops = launch->num_ops;
  r->is_copy = launch->is_copy;
  r->compiled = launch->first_run;
  r->launch_ns = launch->launch_ns;
  r->start_ns = start;
  r->end_ns = now;
  r->correlation = launch->correlation;
  g_device_ns_total += now - start;
  g_completed_total++;
  uint64_t h = hash_name(r->name);
  for (size_t probe = 0; probe < PROGRAM_SLOTS; ++probe) {
    tpurt_program_stats_t* p = &g_programs[(h + probe) % PROGRAM_SLOTS];
    if (p->runs == 0) tpurt_copy_str(p->name, sizeof(p->name), r->name);
    if (strcmp(p->name, r->name) != 0) continue;
    p->runs++;
    p->device_ns += now - start;
    break;
  }
  pthread_cond_broadcast(&g_done_cond);
}

void pjrt_execute_forget_after_fork(void) {
  /* The child's only thread: nobody holds these. The entries are leaked:
  ** freeing their events would call the plugin. */
  pthread_mutex_init(&g_done_lock, NULL);
  pthread_cond_init(&g_done_cond, NULL);
  g_num_pending = 0;
  g_num_released = 0;
}

static void on_launch_done(pjrt_abi_error_t* error, void* user_arg) {
  pjrt_launch_t* launch = user_arg;
  uint64_t now = pjrt_now_ns();
  /* The error also reaches the pending entry's Event_Error / Await. */
  tpurt_status_ignore(pjrt_api_error_consume(&pjrt_g.api, error));
  pthread_mutex_lock(&g_done_lock);
  complete_locked(launch, now);
  pthread_mutex_unlock(&g_done_lock);
  pjrt_launch_release(launch);
}

/* Asks the plugin to time |launch| by |event| (lock held). Without
** Event_OnReady, the time is taken when the pending entry is reaped. */
static void watch_locked(pjrt_launch_t* launch, pjrt_abi_event_t* event) {
  pjrt_launch_retain(launch); /* the callback's */
  launch->has_callback = true;
  PJRT_ARGS(pjrt_abi_event_on_ready_args_t, a);
  a.event = event;
  a.callback = on_launch_done;
  a.user_arg = launch;
  tpurt_status_t status = PJRT_CALL(PJRTABI_EVENT_ON_READY, "Event_OnReady", &a);
  if (status) {
    tpurt_status_ignore(status);
    launch->has_callback = false;
    pjrt_launch_release(launch);
  }
}

/* After the pending entry of |launch| is finished: without a callback the
** completion is the moment we saw it. */
static void note_finished(pjrt_launch_t* launch) {
  if (launch->has_callback) return;
  pthread_mutex_lock(&g_done_lock);
  complete_locked(launch, pjrt_now_ns());
  pthread_mutex_unlock(&g_done_lock);
}

/* Waits until the callback of a finished |launch| has run (it may trail the
** Await that saw the event ready). */
static void wait_done(pjrt_launch_t* launch) {
  pthread_mutex_lock(&g_done_lock);
  while (!__atomic_load_n(&launch->done_ns, __ATOMIC_ACQUIRE)) pthread_cond_wait(&g_done_cond, &g_done_lock);
  pthread_mutex_unlock(&g_done_lock);
}

/* Ends a pending entry whose event completed with |status| (consumed), and
** frees the entry's event (lock held). */
static void retire_consume_locked(pending_t p, tpurt_status_t status) {
  record_error_consume_locked(p.launch, status);
  pjrt_api_event_free(&pjrt_g.api, p.event);
  if (p.keep) g_released[g_num_released++] = p.keep;
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
    retire_consume_locked(p, status);
    note_finished(p.launch);
    pjrt_launch_release(p.launch);
  }
  g_num_pending = kept;
}

/* Waits for |p| without the lock, then records its error. */
static void finish_pending(pending_t p) {
  tpurt_status_t status = pjrt_api_event_await(&pjrt_g.api, p.event);
  p.event = NULL; /* Await destroyed it */
  pthread_mutex_lock(&pjrt_g.lock);
  retire_consume_locked(p, status);
  pthread_mutex_unlock(&pjrt_g.lock);
  drain_released();
  note_finished(p.launch);
  /* After a synchronize the launch log and totals hold everything it
  ** waited for: the callback may trail the Await. */
  wait_done(p.launch);
  pjrt_launch_release(p.launch);
}

/* Takes the pending entries |match| selects out of the list, then waits for
** them unlocked. */
static void finish_matching(bool (*match)(const pending_t*, const void*), const void* arg) {
  pthread_mutex_lock(&pjrt_g.lock);
  size_t n = 0, kept = 0;
  pending_t* mine = tpurt_xmalloc(sizeof(pending_t) * (g_num_pending ? g_num_pending : 1));
  for (size_t i = 0; i < g_num_pending; ++i) {
    if (match(&g_pending[i], arg)) {
      mine[n++] = g_pending[i];
    } else {
      g_pending[kept++] = g_pending[i];
    }
  }
  g_num_pending = kept;
  pthread_mutex_unlock(&pjrt_g.lock);
  for (size_t i = 0; i < n; ++i) finish_pending(mine[i]);
  free(mine);
}

static bool on_device(const pending_t* p, const void* arg) {
  int device = *(const int*)arg;
  return device == -1 || p->launch->device == device;
}

void pjrt_wait_idle(void) {
  int every = -1;
  finish_matching(on_device, &every);
}

tpurt_status_t pjrt_synchronize(int device) {
  if (device != -1) TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  finish_matching(on_device, &device);
  /* Report the earliest error among the devices asked about; clear them. */
  pthread_mutex_lock(&pjrt_g.lock);
  tpurt_status_t first = NULL;
  uint64_t first_seq = 0;
  int lo = device == -1 ? 0 : device, hi = device == -1 ? PJRT_MAX_DEVICES : device + 1;
  for (int d = lo; d < hi; ++d) {
    if (!g_async_error[d]) continue;
    if (!first || g_async_seq[d] < first_seq) {
      tpurt_status_ignore(first);
      first = g_async_error[d];
      first_seq = g_async_seq[d];
    } else {
      tpurt_status_ignore(g_async_error[d]);
    }
    g_async_error[d] = NULL;
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  return first;
}

static pjrt_launch_t* launch_create(int device, const char* op_name) {
  size_t name_size = strlen(op_name) + 1;
  pjrt_launch_t* launch = tpurt_xcalloc(1, sizeof(*launch) + name_size);
  tpurt_refcount_init(&launch->refcount); /* the pending entry's */
  launch->device = device;
  launch->launch_ns = pjrt_now_ns();
  launch->correlation = t_correlation;
  memcpy(launch->op_name, op_name, name_size);
  return launch;
}

/* Adds |p| to the pending list (lock held); returns an entry the caller must
** finish once unlocked when the list was full (event NULL otherwise). */
static pending_t add_pending_locked(pending_t p) {
  pending_t oldest = {0};
  if (g_num_pending == MAX_PENDING) {
    oldest = g_pending[0];
    memmove(g_pending, g_pending + 1, sizeof(pending_t) * (MAX_PENDING - 1));
    g_num_pending--;
  }
  g_pending[g_num_pending++] = p;
  return oldest;
}

/*===--- events ---===*/

struct pjrt_event_s {
  int device;
  uint64_t record_ns; /* when it was recorded */
  size_t num_launches;
  pjrt_launch_t* launches[]; /* the work queued before it, retained */
};

tpurt_status_t pjrt_event_record(int device, pjrt_event_t** out_event) {
  *out_event = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_check_device(device));
  pthread_mutex_lock(&pjrt_g.lock);
  reap_ready_locked();
  size_t n = 0;
  for (size_t i = 0; i < g_num_pending; ++i) n += g_pending[i].launch->device == device;
  pjrt_event_t* ev = tpurt_xcalloc(1, sizeof(*ev) + sizeof(pjrt_launch_t*) * (n ? n : 1));
  ev->device = device;
  ev->record_ns = pjrt_now_ns();
  for (size_t i = 0; i < g_num_pending; ++i) {
    pjrt_launch_t* l = g_pending[i].launch;
    if (l->device != device) continue;
    pjrt_launch_retain(l);
    ev->launches[ev->num_launches++] = l;
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  drain_released();
  *out_event = ev;
  return NULL;
}

void pjrt_event_free(pjrt_event_t* event) {
  if (!event) return;
  for (size_t i = 0; i < event->num_launches; ++i) pjrt_launch_release(event->launches[i]);
  free(event);
}

bool pjrt_event_query(pjrt_event_t* event) {
  pthread_mutex_lock(&pjrt_g.lock);
  reap_ready_locked();
  pthread_mutex_unlock(&pjrt_g.lock);
  drain_released();
  for (size_t i = 0; i < event->num_launches; ++i)
    if (!__atomic_load_n(&event->launches[i]->done_ns, __ATOMIC_ACQUIRE)) return false;
  return true;
}

static bool is_launch_of(const pending_t* p, const void* arg) {
  const pjrt_event_t* ev = arg;
  for (size_t i = 0; i < ev->num_launches; ++i)
    if (p->launch == ev->launches[i]) return true;
  return false;
}

void pjrt_event_synchronize(pjrt_event_t* event) {
  finish_matching(is_launch_of, event);
  for (size_t i = 0; i < event->num_launches; ++i) wait_done(event->launches[i]);
}

uint64_t pjrt_event_time_ns(pjrt_event_t* event) {
  pjrt_event_synchronize(event);
  uint64_t t = 0;
  for (size_t i = 0; i < event->num_launches; ++i) {
    uint64_t done = __atomic_load_n(&event->launches[i]->done_ns, __ATOMIC_ACQUIRE);
    if (done > t) t = done;
  }
  /* Nothing was queued: the device was idle when the event was recorded. */
  return event->num_launches ? t : event->record_ns;
}

/*===--- the launch log ---===*/

int pjrt_launch_log(uint64_t since, tpurt_launch_record_t* out, int max, uint64_t* out_next) {
  pthread_mutex_lock(&g_done_lock);
  if (max <= 0) { /* where the log stands now */
    *out_next = g_log_next;
    pthread_mutex_unlock(&g_done_lock);
    return 0;
  }
  uint64_t first = since;
  if (g_log_next > LOG_SIZE && first < g_log_next - LOG_SIZE) first = g_log_next - LOG_SIZE;
  int n = 0;
  for (uint64_t i = first; i < g_log_next && n < max; ++i) out[n++] = g_log[i % LOG_SIZE];
  *out_next = first + (uint64_t)n;
  pthread_mutex_unlock(&g_done_lock);
  return n;
}

int pjrt_program_stats(tpurt_program_stats_t* out, int max, uint64_t* out_device_ns, uint64_t* out_runs) {
  pthread_mutex_lock(&g_done_lock);
  int n = 0;
  for (size_t i = 0; i < PROGRAM_SLOTS && n < max; ++i)
    if (g_programs[i].runs) out[n++] = g_programs[i];
  *out_device_ns = g_device_ns_total;
  *out_runs = g_completed_total;
  pthread_mutex_unlock(&g_done_lock);
  return n;
}

void pjrt_program_stats_reset(void) {
  pthread_mutex_lock(&g_done_lock);
  memset(g_programs, 0, sizeof(g_programs));
  g_device_ns_total = g_completed_total = 0;
  pthread_mutex_unlock(&g_done_lock);
  /* a reset starts a new compile burst: the notice counts from here */
  pthread_mutex_lock(&pjrt_g.lock);
  memset(&g_burst, 0, sizeof(g_burst));
  pthread_mutex_unlock(&pjrt_g.lock);
}

/*===--- asynchronous copies to the host ---===*/

static bool writes_host(const pending_t* p, const void* arg) {
  const char* const* range = arg; /* [begin, end) */
  return p->host && p->host < range[1] && p->host + p->host_size > range[0];
}

void pjrt_wait_host_range(const void* begin, size_t size) {
  const char* range[2] = {begin, (const char*)begin + size};
  finish_matching(writes_host, range);
}

tpurt_status_t pjrt_buffer_to_host_async(pjrt_buffer_t* buffer, void* dst, size_t dst_size) {
  if (dst_size < buffer->nbytes || buffer->nbytes == 0 || buffer->sharding)
    return pjrt_buffer_to_host(buffer, dst, dst_size);
  TPURT_RETURN_IF_ERROR(pjrt_buffer_ready(buffer));
  PJRT_ARGS(pjrt_abi_buffer_to_host_args_t, a);
  a.src = buffer->raw;
  a.dst = dst;
  a.dst_size = buffer->nbytes;
  pjrt_launch_t* launch = launch_create(buffer->device, "copy to host");
  launch->is_copy = true;
  pending_t oldest = {0};
  pthread_mutex_lock(&pjrt_g.lock);
  reap_ready_locked();
  tpurt_status_t status = PJRT_CALL(PJRTABI_BUFFER_TO_HOST_BUFFER, "Buffer_ToHostBuffer", &a);
  if (!status) {
    pjrt_g.counters.bytes_from_device += buffer->nbytes;
    pjrt_buffer_retain(buffer); /* kept until the copy completes */
    watch_locked(launch, a.event);
    oldest = add_pending_locked((pending_t){a.event, launch, buffer, dst, buffer->nbytes});
    launch = NULL;
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  drain_released();
  if (oldest.event) finish_pending(oldest);
  pjrt_launch_release(launch); /* NULL once the pending list owns it */
  return status;
}

/*===--- execute ---===*/

/* Waits for an argument that is a future; one whose launch failed fails
** this launch too, with that launch's error (which names its op): a value
** computed from a lost one is lost. */
static TPURT_MUST_USE tpurt_status_t input_ready(pjrt_buffer_t* arg) {
  static const char kLost[] = "an input's value was lost";
  tpurt_status_t status = pjrt_buffer_ready(arg);
  /* said once down a chain of lost values: the cause is what matters */
  if (!status || strncmp(tpurt_status_message(status), kLost, sizeof kLost - 1) == 0) return status;
  return tpurt_status_annotate_consume(status, kLost);
}

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
    if (args[i]->sharding) {
      return tpurt_status_create(TPURT_UNIMPLEMENTED,
                                 "%s: argument %zu is a tensor sharded over a mesh, given to a one-device "
                                 "launch",
                                 op_name, i);
    }
    if (args[i]->device != device) {
      return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                 "%s: argument %zu is on device %d, the program runs on %d", op_name, i,
                                 args[i]->device, device);
    }
    TPURT_RETURN_IF_ERROR(input_ready(args[i]));
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

  pjrt_launch_t* launch = launch_create(device, op_name);
  launch->num_ops = executable->num_ops;
  pending_t oldest = {0};
  pthread_mutex_lock(&pjrt_g.lock);
  reap_ready_locked();
  tpurt_status_t status = PJRT_CALL(PJRTABI_LOADED_EXECUTABLE_EXECUTE, "LoadedExecutable_Execute", &a);
  if (!status) {
    pjrt_g.counters.executions++;
    launch->outputs = tpurt_xcalloc(num_outputs ? num_outputs : 1, sizeof(pjrt_buffer_t*));
    launch->num_outputs = num_outputs;
    for (size_t i = 0; i < num_outputs; ++i) {
      tpurt_status_t s = pjrt_wrap_buffer_consume_locked(raw_outs[i], device, launch, &outputs[i]);
      raw_outs[i] = NULL;
      launch->outputs[i] = outputs[i];
      if (s && !status)
        status = s;
      else
        tpurt_status_ignore(s);
    }
    launch->first_run = executable->compiled_here && executable->launches == 0;
    executable->launches++;
    count_shadow_run(executable);
    if (done[0]) {
      watch_locked(launch, done[0]);
      oldest = add_pending_locked((pending_t){done[0], launch, NULL, NULL, 0});
      launch = NULL;
    }
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  drain_released();
  if (oldest.event) finish_pending(oldest);
  if (raw_args != arg_inline) free(raw_args);
  if (raw_outs != out_inline) free(raw_outs);
  pjrt_launch_release(launch); /* NULL once the pending list owns it */
  if (status) {
    for (size_t i = 0; i < num_outputs; ++i) {
      pjrt_buffer_release(outputs[i]);
      outputs[i] = NULL;
    }
    return tpurt_status_annotate_consume(status, op_name);
  }
  return NULL;
}

/*===--- SPMD: one program over several devices ---===*/

int pjrt_device_id(int device) {
  return device >= 0 && device < pjrt_g.num_devices ? pjrt_g.device_ids[device] : -1;
}

tpurt_status_t pjrt_compile_spmd(const char* mlir, size_t mlir_size, int32_t num_devices, const int* devices,
                                 pjrt_executable_t** out_executable) {
  *out_executable = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_init());
  if (num_devices < 1 || num_devices > PJRT_MAX_DEVICES)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "an SPMD program spans 1 to %d devices, not %d",
                               PJRT_MAX_DEVICES, num_devices);
  int64_t ids[PJRT_MAX_DEVICES];
  for (int32_t i = 0; i < num_devices; ++i) {
    TPURT_RETURN_IF_ERROR(pjrt_check_device(devices[i]));
    ids[i] = pjrt_g.device_ids[devices[i]];
  }
  char* options = NULL;
  size_t options_size = 0;
  TPURT_RETURN_IF_ERROR(pjrt_spmd_compile_options(num_devices, ids, &options, &options_size));
  tpurt_status_t status = pjrt_compile_with_options(mlir, mlir_size, options, options_size, out_executable);
  free(options);
  return status;
}

/* The plugin fills output_lists[d] for the d-th device of the executable's
** device assignment, which is the order pjrt_compile_spmd was given. Each
** device gets its own launch record and pending entry, so that
** pjrt_synchronize(device) and the launch log see the work of every device;
** the execution counter counts one launch. */
tpurt_status_t pjrt_execute_spmd(pjrt_executable_t* executable, int32_t num_devices, const int* devices,
                                 pjrt_buffer_t* const* args, size_t num_args, pjrt_buffer_t** outputs,
                                 size_t num_outputs, const char* op_name) {
  const size_t n = num_devices > 0 ? (size_t)num_devices : 0;
  for (size_t i = 0; i < n * num_outputs; ++i) outputs[i] = NULL;
  if (!op_name) op_name = "<unnamed program>";
  if (num_devices < 1 || num_devices > PJRT_MAX_DEVICES)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s: an SPMD launch spans 1 to %d devices, not %d",
                               op_name, PJRT_MAX_DEVICES, num_devices);
  if (num_outputs != executable->num_outputs) {
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "%s: the program has %zu outputs, the caller expects %zu", op_name,
                               executable->num_outputs, num_outputs);
  }
  for (size_t d = 0; d < n; ++d) {
    TPURT_RETURN_IF_ERROR(pjrt_check_device(devices[d]));
    for (size_t i = 0; i < num_args; ++i) {
      if (args[d * num_args + i]->device != devices[d]) {
        return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                   "%s: argument %zu of partition %zu is on device %d, the partition runs "
                                   "on %d",
                                   op_name, i, d, args[d * num_args + i]->device, devices[d]);
      }
      TPURT_RETURN_IF_ERROR(input_ready(args[d * num_args + i]));
    }
  }
  pjrt_abi_buffer_t** raw_args = tpurt_xmalloc(sizeof(void*) * (n * num_args + 1));
  pjrt_abi_buffer_t** raw_outs = tpurt_xcalloc(n * num_outputs + 1, sizeof(void*));
  pjrt_abi_buffer_t* const* arg_lists[PJRT_MAX_DEVICES];
  pjrt_abi_buffer_t** out_lists[PJRT_MAX_DEVICES];
  pjrt_abi_event_t* done[PJRT_MAX_DEVICES] = {NULL};
  for (size_t d = 0; d < n; ++d) {
    for (size_t i = 0; i < num_args; ++i) raw_args[d * num_args + i] = args[d * num_args + i]->raw;
    arg_lists[d] = raw_args + d * num_args;
    out_lists[d] = raw_outs + d * num_outputs;
  }
  PJRT_ARGS(pjrt_abi_execute_options_t, options);
  PJRT_ARGS(pjrt_abi_execute_args_t, a);
  a.executable = executable->loaded;
  a.options = &options;
  a.argument_lists = arg_lists;
  a.num_devices = n;
  a.num_args = num_args;
  a.output_lists = out_lists;
  a.device_complete_events = done;
  a.execute_device = NULL; /* the devices of the compile-time assignment */

  pjrt_launch_t* launches[PJRT_MAX_DEVICES];
  for (size_t d = 0; d < n; ++d) {
    launches[d] = launch_create(devices[d], op_name);
    launches[d]->num_ops = executable->num_ops;
  }
  pending_t oldest[PJRT_MAX_DEVICES];
  memset(oldest, 0, sizeof(oldest));
  pthread_mutex_lock(&pjrt_g.lock);
  reap_ready_locked();
  tpurt_status_t status = PJRT_CALL(PJRTABI_LOADED_EXECUTABLE_EXECUTE, "LoadedExecutable_Execute", &a);
  if (!status) {
    pjrt_g.counters.executions++;
    for (size_t d = 0; d < n; ++d) {
      launches[d]->outputs = tpurt_xcalloc(num_outputs ? num_outputs : 1, sizeof(pjrt_buffer_t*));
      launches[d]->num_outputs = num_outputs;
      for (size_t i = 0; i < num_outputs; ++i) {
        tpurt_status_t s = pjrt_wrap_buffer_consume_locked(raw_outs[d * num_outputs + i], devices[d],
                                                           launches[d], &outputs[d * num_outputs + i]);
        raw_outs[d * num_outputs + i] = NULL;
        launches[d]->outputs[i] = outputs[d * num_outputs + i];
        if (s && !status)
          status = s;
        else
          tpurt_status_free(s);
      }
      launches[d]->first_run = executable->compiled_here && executable->launches == 0;
      if (done[d]) {
        watch_locked(launches[d], done[d]);
        oldest[d] = add_pending_locked((pending_t){done[d], launches[d], NULL, NULL, 0});
        launches[d] = NULL;
      }
    }
    executable->launches++;
    count_shadow_run(executable);
  }
  pthread_mutex_unlock(&pjrt_g.lock);
  drain_released();
  for (size_t d = 0; d < n; ++d) {
    if (oldest[d].event) finish_pending(oldest[d]);
    pjrt_launch_release(launches[d]); /* NULL once the pending list owns it */
  }
  free(raw_args);
  free(raw_outs);
  if (status) {
    for (size_t i = 0; i < n * num_outputs; ++i) {
      pjrt_buffer_release(outputs[i]);
      outputs[i] = NULL;
    }
    return tpurt_status_annotate_consume(status, op_name);
  }
  return NULL;
}
