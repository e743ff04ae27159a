/* shadow.c: shadow compilation. With a target set (tpurt_shadow_set_consume),
** every program the process gets from the cache (strict-eager plans, fused
** graphs, traced programs) and every SPMD program is also compiled for the
** target, once per distinct program, and what the target's compiler said
** is kept as a record: verdict, compile seconds, cost analysis, memory.
** Executables carry a pointer to their record's run counter
** (pjrt_executable_set_shadow), so each launch counts a run and the report
** can sum runs x estimate.
**
** Records persist in the executable cache's directory as <hash>.tpuest
** files, keyed by the target's identity (plugin, api, platform, topology),
** the compile options, the core version and the module text: a second run
** of the same script compiles nothing for the target. A record is a
** measurement, not code, so a malformed file is simply ignored.
**
** A compile-only program (cache_shadow_compile_only: nothing runs here, so
** nothing waits for its executable) compiles on the compile pool (base/
** pool.c): its record is made at once, marked pending, and the caller goes
** on tracing the next program while the target's compiler works, up to
** TORCH_TPU_COMPILE_THREADS programs at a time. Reading the records
** (tpurt_shadow_records, tpurt_shadow_wait) waits for those in flight. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "../pjrt/pjrt.h"
#include "cache_internal.h"

#define SHADOW_BUCKETS 4096
#define SHADOW_MAGIC "TPURTEST"
#define SHADOW_FORMAT 1u

typedef struct shadow_record_s {
  struct shadow_record_s* next; /* bucket chain */
  struct shadow_record_s* all;  /* every record ever made (they are never freed) */
  uint64_t hash;
  tpurt_shadow_record_t pub; /* label and error point into this record */
  uint64_t runs;             /* atomic */
  char label[128];
  char* error;
  bool pending; /* under g_lock: compiling on the pool; the fields above are the job's until it clears */
} shadow_record_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_settled = PTHREAD_COND_INITIALIZER; /* a pending record was filled */
static int g_in_flight TPURT_GUARDED_BY(g_lock);            /* pending records (any generation) */
static pid_t g_jobs_pid TPURT_GUARDED_BY(g_lock);           /* the process whose pool compiles them */
static tpurt_target_t* g_target TPURT_GUARDED_BY(g_lock);   /* the current target, or NULL */
static uint32_t g_gen TPURT_GUARDED_BY(g_lock); /* bumped at each set/reset: executables re-shadow */
static shadow_record_t* g_buckets[SHADOW_BUCKETS] TPURT_GUARDED_BY(g_lock);
static shadow_record_t** g_order TPURT_GUARDED_BY(g_lock); /* records in the order they were made */
static shadow_record_t* g_all TPURT_GUARDED_BY(g_lock);
static size_t g_count TPURT_GUARDED_BY(g_lock), g_capacity TPURT_GUARDED_BY(g_lock);
/* Targets and records replaced by a later set/reset stay alive: a compile
** on another thread, or an executable's run counter, may still point at
** them. A process sets a target a few times at most. */
static tpurt_target_t* g_retired_targets[64] TPURT_GUARDED_BY(g_lock);
static int g_num_retired TPURT_GUARDED_BY(g_lock);
static _Thread_local const char* t_label TPURT_GUARDED_BY(thread);
static bool g_precompile TPURT_GUARDED_BY(atomic); /* tpurt_shadow_set_precompile */
/* Once on, the directory is the target's for the rest of the process: ops
** run after precompiling ends (exit hooks, a report's reads) would
** otherwise leave this plugin's entries there, which a TPU host importing
** the directory whole cannot load. */
static bool g_dir_is_targets TPURT_GUARDED_BY(atomic);

void tpurt_shadow_set_precompile(bool on) {
  if (on) __atomic_store_n(&g_dir_is_targets, true, __ATOMIC_RELAXED);
  __atomic_store_n(&g_precompile, on, __ATOMIC_RELAXED);
}

bool cache_shadow_directory_is_targets(void) { return __atomic_load_n(&g_dir_is_targets, __ATOMIC_RELAXED); }

bool cache_shadow_precompiling(void) {
  if (!__atomic_load_n(&g_precompile, __ATOMIC_RELAXED)) return false;
  return tpurt_shadow_target() != NULL;
}

void cache_shadow_label(const char* label) { t_label = label; }

const tpurt_target_t* tpurt_shadow_target(void) {
  pthread_mutex_lock(&g_lock);
  const tpurt_target_t* t = g_target;
  pthread_mutex_unlock(&g_lock);
  return t;
}

static void forget_records_locked(void) {
  /* not freed: run counters of live executables point into them */
  memset(g_buckets, 0, sizeof g_buckets);
  g_count = 0;
  ++g_gen;
  __atomic_store_n(&pjrt_shadow_gen_now, g_target ? g_gen : 0u, __ATOMIC_RELEASE);
}

tpurt_status_t tpurt_shadow_set_consume(tpurt_target_t* target) {
  pthread_mutex_lock(&g_lock);
  if (g_target) {
    if (g_num_retired == (int)(sizeof g_retired_targets / sizeof g_retired_targets[0])) {
      pthread_mutex_unlock(&g_lock);
      tpurt_target_free(target);
      return tpurt_status_create(TPURT_RESOURCE_EXHAUSTED, "too many shadow targets set in one process (64)");
    }
    g_retired_targets[g_num_retired++] = g_target;
  }
  g_target = target;
  forget_records_locked();
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

void tpurt_shadow_reset(void) {
  pthread_mutex_lock(&g_lock);
  forget_records_locked();
  pthread_mutex_unlock(&g_lock);
}

/* A forked child inherits the parent's pending records but not the threads
** that compile them: it waits for none (its report lists them unfilled). */
static void wait_in_flight_locked(void) {
  while (g_in_flight > 0 && g_jobs_pid == getpid()) pthread_cond_wait(&g_settled, &g_lock);
}

/* fork: g_lock is not held across it, so a child can read the records. */
static void before_fork(void) { pthread_mutex_lock(&g_lock); }
static void after_fork(void) { pthread_mutex_unlock(&g_lock); }
static void register_fork_handlers(void) { (void)pthread_atfork(before_fork, after_fork, after_fork); }

void tpurt_shadow_wait(void) {
  pthread_mutex_lock(&g_lock);
  wait_in_flight_locked();
  pthread_mutex_unlock(&g_lock);
}

size_t tpurt_shadow_records(tpurt_shadow_record_t* out, size_t max) {
  pthread_mutex_lock(&g_lock);
  wait_in_flight_locked(); /* then every listed record is filled */
  size_t n = g_count < max ? g_count : max;
  for (size_t i = 0; i < n; ++i) {
    out[i] = g_order[i]->pub;
    out[i].runs = __atomic_load_n(&g_order[i]->runs, __ATOMIC_RELAXED);
  }
  size_t total = g_count;
  pthread_mutex_unlock(&g_lock);
  return total;
}

static shadow_record_t* find_locked(uint64_t hash) {
  for (shadow_record_t* r = g_buckets[hash % SHADOW_BUCKETS]; r; r = r->next)
    if (r->hash == hash) return r;
  return NULL;
}

/* The record of |hash| in generation |gen| once it is filled (waiting for
** a pending one), or NULL. */
static shadow_record_t* find_settled_locked(uint64_t hash, uint32_t gen) {
  shadow_record_t* r = gen == g_gen ? find_locked(hash) : NULL;
  while (r && r->pending && g_jobs_pid == getpid()) pthread_cond_wait(&g_settled, &g_lock);
  return r;
}

static void add_locked(shadow_record_t* r) {
  shadow_record_t** b = &g_buckets[r->hash % SHADOW_BUCKETS];
  r->next = *b;
  *b = r;
  r->all = g_all;
  g_all = r;
  if (g_count == g_capacity) {
    g_capacity = g_capacity ? 2 * g_capacity : 256;
    g_order = tpurt_xrealloc(g_order, g_capacity * sizeof(*g_order));
  }
  g_order[g_count++] = r;
}

/*===--- the persistent record ---===*/

/* File: magic, format, hash, then the program's figures, the error length
** and text. Native layout: the key includes the core version. */
typedef struct {
  char magic[8];
  uint32_t format;
  uint32_t error_size; /* 0: it compiled */
  uint64_t hash;
  tpurt_target_program_t program;
} shadow_file_t;

static void file_name(uint64_t hash, char* out, size_t size) {
  snprintf(out, size, "%016" PRIx64 ".tpuest", hash);
}

static bool load_record(int dirfd, uint64_t hash, shadow_record_t* r) {
  if (dirfd < 0) return false;
  char name[40];
  file_name(hash, name, sizeof name);
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  shadow_file_t f;
  bool ok = read(fd, &f, sizeof f) == (ssize_t)sizeof f && memcmp(f.magic, SHADOW_MAGIC, 8) == 0 &&
            f.format == SHADOW_FORMAT && f.hash == hash && f.error_size < (1u << 20);
  if (ok && f.error_size) {
    r->error = tpurt_xmalloc(f.error_size + 1);
    ok = read(fd, r->error, f.error_size) == (ssize_t)f.error_size;
    r->error[ok ? f.error_size : 0] = '\0';
  }
  close(fd);
  if (!ok) {
    free(r->error);
    r->error = NULL;
    return false;
  }
  f.program.fingerprint[sizeof f.program.fingerprint - 1] = '\0';
  r->pub.program = f.program;
  return true;
}

static void store_record(int dirfd, const shadow_record_t* r) {
  if (dirfd < 0) return;
  shadow_file_t f;
  memset(&f, 0, sizeof f);
  memcpy(f.magic, SHADOW_MAGIC, 8);
  f.format = SHADOW_FORMAT;
  f.hash = r->hash;
  f.error_size = r->error ? (uint32_t)strlen(r->error) : 0;
  f.program = r->pub.program;
  char name[40];
  file_name(r->hash, name, sizeof name);
  /* a record that cannot be written is compiled again next time */
  tpurt_status_ignore(disk_write_atomic(dirfd, name, &f, sizeof f, r->error, f.error_size));
}

/*===--- compiling for the target ---===*/

static uint64_t record_hash(const tpurt_target_t* t, const char* options, size_t options_size,
                            const char* text, size_t size, int32_t num_partitions) {
  tpurt_target_info_t info;
  tpurt_target_info(t, &info);
  uint64_t h = cache_hash64(0x7368616477746774ULL, info.identity, strlen(info.identity) + 1);
  h = cache_hash64(h, tpurt_version(), strlen(tpurt_version()) + 1);
  h = cache_hash64(h, &num_partitions, sizeof num_partitions);
  h = cache_hash64(h, options, options_size);
  return cache_hash64(h, text, size);
}

/* The options for the target: the runtime's own for a one-device program;
** for an SPMD one, the same partitioning over the target's device ids. */
static TPURT_MUST_USE tpurt_status_t target_options(tpurt_target_t* t, int32_t num_partitions,
                                                    const char* runtime_options, size_t runtime_size,
                                                    char** out_owned, const char** out, size_t* out_size) {
  *out_owned = NULL;
  *out = runtime_options;
  *out_size = runtime_size;
  if (num_partitions <= 1) return NULL;
  tpurt_target_info_t info;
  tpurt_target_info(t, &info);
  if (num_partitions > info.num_devices) {
    return tpurt_status_create(TPURT_FAILED_PRECONDITION,
                               "the program spans %d devices; target %s has %d (name a topology with "
                               "at least %d chips, e.g. v5e:2x2 for 4)",
                               num_partitions, info.topology, info.num_devices, num_partitions);
  }
  int64_t ids[256];
  for (int32_t i = 0; i < num_partitions; ++i) ids[i] = tpurt_target_device_id(t, i);
  TPURT_RETURN_IF_ERROR(pjrt_spmd_compile_options(num_partitions, ids, out_owned, out_size));
  *out = *out_owned;
  return NULL;
}

/* The refusal of record |r| as an error, under TORCH_TPU_TARGET_REFUSE. Not
** UNIMPLEMENTED: that would send the op to the CPU fallback, which runs it. */
static TPURT_MUST_USE tpurt_status_t refusal(const shadow_record_t* r) {
  if (!r->error || !tpurt_config()->target_refuse) return NULL;
  return tpurt_status_create(TPURT_FAILED_PRECONDITION,
                             "refused before it runs (TORCH_TPU_TARGET_REFUSE=1): %s", r->error);
}

/* A new record of |hash|, labelled by this thread's label; not yet listed. */
static shadow_record_t* record_new(uint64_t hash, int32_t num_partitions) {
  shadow_record_t* r = tpurt_xcalloc(1, sizeof(*r));
  r->hash = hash;
  snprintf(r->label, sizeof r->label, "%s", t_label ? t_label : "program");
  r->pub.label = r->label;
  r->pub.num_partitions = num_partitions;
  r->pub.hash = hash;
  return r;
}

/* Fills record |r| of |text| for target |t|: loaded from disk or compiled
** now (and stored). Takes no lock: |r| is its caller's alone meanwhile. */
static void record_fill(tpurt_target_t* t, shadow_record_t* r, const char* text, size_t size,
                        const char* options, size_t options_size, int32_t num_partitions) {
  int dirfd = cache_disk_dirfd();
  /* Precompile: a one-device program's executable goes to the cache dir
  ** under the key of the target's runtime (an SPMD program's options name
  ** this target's device ids, which a real host's runtime would not). */
  const bool precompile = __atomic_load_n(&g_precompile, __ATOMIC_RELAXED) && num_partitions == 1;
  tpurt_target_info_t info;
  tpurt_target_info(t, &info);
  bool loaded = load_record(dirfd, r->hash, r);
  if (loaded && precompile && !r->error &&
      !cache_precompiled_has(info.runtime_identity, text, size, options, options_size))
    loaded = false; /* the figures are known, the executable is not stored: compile again */
  if (loaded) {
    r->pub.from_disk = true;
    r->pub.precompiled = precompile && !r->error;
  } else {
    free(r->error);
    r->error = NULL;
    char* owned = NULL;
    const char* topts = NULL;
    size_t topts_size = 0;
    char* bytes = NULL;
    size_t nbytes = 0;
    tpurt_status_t s = target_options(t, num_partitions, options, options_size, &owned, &topts, &topts_size);
    if (!s)
      s = tpurt_target_compile_serialized(t, text, size, topts, topts_size, &r->pub.program,
                                          precompile ? &bytes : NULL, precompile ? &nbytes : NULL);
    free(owned);
    if (s) {
      r->error = tpurt_xstrdup(tpurt_status_message(s));
      tpurt_status_free(s);
    } else if (bytes) {
      /* not written: reported by the disk tier (once); the record says so */
      tpurt_status_t w =
          cache_precompiled_store(info.runtime_identity, text, size, options, options_size, bytes, nbytes);
      r->pub.precompiled = !w;
      tpurt_status_ignore(w);
    }
    free(bytes);
    store_record(dirfd, r);
  }
  r->pub.error = r->error;
}

/* The record of |text| for target |t| (generation |gen|): found, loaded
** from disk or compiled now. NULL when the target changed meanwhile. */
static shadow_record_t* shadow_record(tpurt_target_t* t, uint32_t gen, const char* text, size_t size,
                                      const char* options, size_t options_size, int32_t num_partitions) {
  const uint64_t hash = record_hash(t, options, options_size, text, size, num_partitions);

  pthread_mutex_lock(&g_lock);
  shadow_record_t* r = find_settled_locked(hash, gen);
  pthread_mutex_unlock(&g_lock);
  if (r) return r;
  r = record_new(hash, num_partitions);
  record_fill(t, r, text, size, options, options_size, num_partitions);
  pthread_mutex_lock(&g_lock);
  shadow_record_t* other = find_settled_locked(hash, gen);
  if (other || gen != g_gen) {
    /* another thread made it meanwhile (keep theirs), or the target
    ** changed under us (the executable re-shadows at its next use) */
    free(r->error);
    free(r);
    r = other;
  } else {
    add_locked(r);
  }
  pthread_mutex_unlock(&g_lock);
  return r;
}

tpurt_status_t cache_shadow_program(const char* text, size_t size, const char* options, size_t options_size,
                                    int32_t num_partitions, pjrt_executable_t* exe) {
  pthread_mutex_lock(&g_lock);
  tpurt_target_t* t = g_target;
  uint32_t gen = g_gen;
  pthread_mutex_unlock(&g_lock);
  if (!t) return NULL;
  if (exe && pjrt_executable_shadow_gen(exe) == gen && !tpurt_config()->target_refuse) return NULL;
  shadow_record_t* r = shadow_record(t, gen, text, size, options, options_size, num_partitions);
  if (!r) return NULL;
  if (exe) pjrt_executable_set_shadow(exe, &r->runs, gen);
  return refusal(r);
}

/* A compile-only program on the pool: the record (listed, pending) and
** what its compile needs, owned. */
typedef struct compile_job_s {
  tpurt_target_t* target; /* a retired target stays alive: see g_retired_targets */
  shadow_record_t* record;
  char* text;
  size_t size;
  char* options;
  size_t options_size;
  int32_t num_partitions;
  struct compile_job_s* next; /* in g_queue */
} compile_job_t;

/* Jobs wait here until fewer than TORCH_TPU_TARGET_COMPILE_THREADS run:
** libtpu spreads one compile over the host's cores itself, so by default
** the target compiles one program at a time (two at once measured slower
** on a 2-core host), still beside the tracing of the next program. */
static compile_job_t *g_queue TPURT_GUARDED_BY(g_lock), *g_queue_tail TPURT_GUARDED_BY(g_lock);
static int64_t g_running TPURT_GUARDED_BY(g_lock); /* jobs handed to the pool */

/* The next job to hand to the pool, if a slot is free (counted as running). */
static compile_job_t* next_job_locked(void) {
  compile_job_t* job = g_queue;
  if (!job || g_running >= tpurt_config()->target_compile_threads) return NULL;
  g_queue = job->next;
  if (!g_queue) g_queue_tail = NULL;
  ++g_running;
  return job;
}

static void compile_job_run(void* arg) {
  compile_job_t* job = arg;
  record_fill(job->target, job->record, job->text, job->size, job->options, job->options_size,
              job->num_partitions);
  pthread_mutex_lock(&g_lock);
  job->record->pending = false;
  --g_in_flight;
  --g_running;
  pthread_cond_broadcast(&g_settled);
  compile_job_t* next = next_job_locked();
  pthread_mutex_unlock(&g_lock);
  free(job->text);
  free(job->options);
  free(job);
  if (next) tpurt_pool_submit(compile_job_run, next);
}

tpurt_status_t cache_shadow_compile_only(const char* text, size_t size, const char* options,
                                         size_t options_size, int32_t num_partitions) {
  pthread_mutex_lock(&g_lock);
  tpurt_target_t* t = g_target;
  uint32_t gen = g_gen;
  pthread_mutex_unlock(&g_lock);
  if (!t)
    return tpurt_status_create(TPURT_FAILED_PRECONDITION,
                               "a compile-only trace needs a target (torch_tpu.set_target(\"v6e:1x1\"))");
  const uint64_t hash = record_hash(t, options, options_size, text, size, num_partitions);
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_fork_handlers);
  pthread_mutex_lock(&g_lock);
  if (gen != g_gen) {
    pthread_mutex_unlock(&g_lock);
    return tpurt_status_create(TPURT_ABORTED, "the target changed during a compile-only trace");
  }
  if (find_locked(hash)) { /* recorded, or compiling: one compile per distinct program */
    pthread_mutex_unlock(&g_lock);
    return NULL;
  }
  /* listed now, so the report keeps the order programs were traced in */
  shadow_record_t* r = record_new(hash, num_partitions);
  r->pending = true;
  add_locked(r);
  if (g_jobs_pid != getpid()) { /* a forked child's own jobs: the parent's are not its */
    g_jobs_pid = getpid();
    g_in_flight = 0;
    g_running = 0;
    g_queue = g_queue_tail = NULL;
  }
  ++g_in_flight;
  compile_job_t* job = tpurt_xcalloc(1, sizeof(*job));
  *job = (compile_job_t){.target = t,
                         .record = r,
                         .text = tpurt_xmalloc(size + 1),
                         .size = size,
                         .options = tpurt_xmalloc(options_size + 1),
                         .options_size = options_size,
                         .num_partitions = num_partitions};
  if (size) memcpy(job->text, text, size);
  if (options_size) memcpy(job->options, options, options_size);
  if (g_queue_tail)
    g_queue_tail->next = job;
  else
    g_queue = job;
  g_queue_tail = job;
  compile_job_t* start = next_job_locked();
  pthread_mutex_unlock(&g_lock);
  /* the target's verdict (a refusal too) is the record's, read after tpurt_shadow_wait */
  if (start) tpurt_pool_submit(compile_job_run, start);
  return NULL;
}
