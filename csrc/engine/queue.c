/* queue.c: the launch queue, so that a thread's new programs compile while
** it goes on.
**
** A strict-eager op whose program is missing used to compile on the op's
** own thread, one program after another: the first image of a pipeline
** compiles its 150 programs in a row, on one core. Here the compile goes to
** the compile pool (base/pool.c) and the op is queued: its parameters are
** bound now (storage values are immutable buffers, so later writes cannot
** change what it reads), and its outputs are futures
** (pjrt_buffer_future_create) that its results and written storages hold at
** once, with the right dtype and shape, so the next op can be lowered on
** them and queued in turn. Independent compiles thus run side by side,
** up to TORCH_TPU_COMPILE_THREADS at once.
**
** Order. Queued launches run in the order they were queued, each once its
** plan is compiled; while one waits, later ops of any thread queue behind
** it, even those whose programs are ready, so the device sees the
** program's order. Work that is not queued (a fused graph, a compiled
** program, a host read) needs no order with the queue: it reads a future
** only by waiting for its value (pjrt_buffer_ready), and writes a storage
** by giving it a new buffer, which a queued launch does not see.
**
** Errors. A queued launch whose compile or launch fails fails its futures
** with the error (naming the op): a read of such a value raises it, a
** launch reading it fails in turn ("an input's value was lost"), and the
** device's next synchronize reports the first of them. Values that do not
** depend on it are computed and kept.
**
** Locks. g_queue_lock guards the list, the counts and every plan's compile
** state. Launches are made by whoever finds the head ready (the thread that
** queues, or the pool job that finished its compile), one pumping thread at
** a time, with no lock held. Nothing here takes the engine lock, so a
** thread holding it may wait for the queue (queue_drain).
*/
#include "../cache/cache.h"
#include "op_internal.h"

typedef struct queued_s {
  struct queued_s* next;
  uint64_t seq;         /* its place in the queue */
  compiled_t* compiled; /* a reference of its own */
  int device;
  uint64_t correlation; /* the profiler's id of the op that queued it */
  int32_t num_params, num_outputs;
  pjrt_buffer_t** params;  /* bound when queued; references */
  pjrt_buffer_t** outputs; /* the futures its program fills; references */
  char name[];             /* the op */
} queued_t;

static pthread_mutex_t g_queue_lock = PTHREAD_MUTEX_INITIALIZER;
/* Signalled after every launch the queue makes. */
static pthread_cond_t g_queue_moved = PTHREAD_COND_INITIALIZER;
static queued_t *g_head TPURT_GUARDED_BY(g_queue_lock), *g_tail TPURT_GUARDED_BY(g_queue_lock);
/* Launches queued and launches made (or failed) so far, in order. */
static uint64_t g_queued_seq TPURT_GUARDED_BY(g_queue_lock), g_done_seq TPURT_GUARDED_BY(g_queue_lock);
static bool g_pumping TPURT_GUARDED_BY(g_queue_lock); /* a thread is making the launches */
/* Queued and not yet made: read without the lock by queue_busy. */
static _Atomic uint64_t g_waiting TPURT_GUARDED_BY(atomic);
static _Atomic uint64_t g_launches TPURT_GUARDED_BY(atomic); /* made from the queue (metrics) */
static uint64_t g_jobs TPURT_GUARDED_BY(g_queue_lock);       /* compile jobs submitted and not finished */

bool queue_enabled(void) {
  return tpurt_pool_size() > 0 && !tpurt_pool_runs_inline() && !pjrt_thread_has_compile_options();
}

bool queue_busy(void) { return atomic_load_explicit(&g_waiting, memory_order_acquire) > 0; }

uint64_t queue_launch_count(void) { return atomic_load_explicit(&g_launches, memory_order_relaxed); }
void queue_reset_count(void) { atomic_store_explicit(&g_launches, 0, memory_order_relaxed); }

compiled_t* compiled_create(void) {
  compiled_t* c = tpurt_xcalloc(1, sizeof(*c));
  tpurt_refcount_init(&c->refcount);
  return c;
}

void compiled_retain(compiled_t* c) { tpurt_refcount_inc(&c->refcount); }

void compiled_release(compiled_t* c) {
  if (!c || !tpurt_refcount_dec_and_test(&c->refcount)) return;
  pjrt_executable_release(c->executable);
  tpurt_status_free(c->failure);
  free(c);
}

/* Makes the launch of |e| (no lock held): runs its program, or fails it. */
static void launch_entry(queued_t* e) {
  const compiled_t* c = e->compiled;
  tpurt_status_t status = NULL;
  if (c->state == COMPILED_FAILED)
    status = tpurt_status_annotate_consume(tpurt_status_clone(c->failure), e->name);
  pjrt_buffer_t* outs_stack[16];
  pjrt_buffer_t** outs =
      e->num_outputs <= 16 ? outs_stack : tpurt_xmalloc(sizeof(void*) * (size_t)e->num_outputs);
  if (!status) {
    const uint64_t previous = pjrt_launch_correlation();
    pjrt_set_launch_correlation(e->correlation);
    status = pjrt_execute(c->executable, e->device, e->params, (size_t)e->num_params, outs,
                          (size_t)e->num_outputs, e->name);
    pjrt_set_launch_correlation(previous);
  }
  for (int32_t k = 0; k < e->num_params; ++k) pjrt_buffer_release(e->params[k]);
  for (int32_t k = 0; k < e->num_outputs; ++k) {
    if (status)
      pjrt_buffer_future_fail(e->outputs[k], status);
    else
      pjrt_buffer_fulfil_consume(e->outputs[k], outs[k]);
    pjrt_buffer_release(e->outputs[k]);
  }
  if (status) pjrt_record_async_error_consume(e->device, status);
  if (outs != outs_stack) free(outs);
  atomic_fetch_add_explicit(&g_launches, 1, memory_order_relaxed);
}

/* Makes every launch at the head whose program is no longer compiling. One
** thread pumps at a time; another that finds it pumping leaves the work to
** it (the pumper looks at the head again after each launch). */
static void pump(void) {
  pthread_mutex_lock(&g_queue_lock);
  if (g_pumping) {
    pthread_mutex_unlock(&g_queue_lock);
    return;
  }
  g_pumping = true;
  while (g_head && __atomic_load_n(&g_head->compiled->state, __ATOMIC_ACQUIRE) != COMPILED_PENDING) {
    queued_t* e = g_head;
    g_head = e->next;
    if (!g_head) g_tail = NULL;
    pthread_mutex_unlock(&g_queue_lock);
    launch_entry(e);
    compiled_release(e->compiled);
    pthread_mutex_lock(&g_queue_lock);
    g_done_seq = e->seq;
    atomic_fetch_sub_explicit(&g_waiting, 1, memory_order_release);
    pthread_cond_broadcast(&g_queue_moved);
    free(e->params);
    free(e->outputs);
    free(e);
  }
  g_pumping = false;
  pthread_mutex_unlock(&g_queue_lock);
}

/* Before a fork and at exit, what is queued runs and every compile job
** ends first: a child has none of the pool's threads, and a program still
** compiling or running when the plugin's statics are destroyed crashes the
** process. Registered at the first queued launch, so after the plugin's own
** exit handler, which runs later. */
static void settle_all(void) { queue_settle(); }
static pthread_once_t g_hooks_once = PTHREAD_ONCE_INIT;
static void install_hooks(void) {
  (void)pthread_atfork(settle_all, NULL, NULL);
  (void)atexit(settle_all);
}

void queue_push_consume(compiled_t* c, int device, const char* name, pjrt_buffer_t** params,
                        int32_t num_params, pjrt_buffer_t** outputs, int32_t num_outputs) {
  pthread_once(&g_hooks_once, install_hooks);
  const size_t name_size = strlen(name) + 1;
  queued_t* e = tpurt_xcalloc(1, sizeof(*e) + name_size);
  memcpy(e->name, name, name_size);
  compiled_retain(c);
  e->compiled = c;
  e->device = device;
  e->correlation = pjrt_launch_correlation();
  e->num_params = num_params;
  e->params = tpurt_xmalloc(sizeof(pjrt_buffer_t*) * (size_t)(num_params + 1));
  memcpy(e->params, params, sizeof(pjrt_buffer_t*) * (size_t)num_params);
  e->num_outputs = num_outputs;
  e->outputs = tpurt_xmalloc(sizeof(pjrt_buffer_t*) * (size_t)(num_outputs + 1));
  memcpy(e->outputs, outputs, sizeof(pjrt_buffer_t*) * (size_t)num_outputs);
  pthread_mutex_lock(&g_queue_lock);
  e->seq = ++g_queued_seq;
  if (g_tail)
    g_tail->next = e;
  else
    g_head = e;
  g_tail = e;
  atomic_fetch_add_explicit(&g_waiting, 1, memory_order_release);
  pthread_mutex_unlock(&g_queue_lock);
  pump();
}

tpurt_status_t queue_launch(plan_t* p, tpurt_op_call_t* call) {
  if (p->num_results > call->max_results || (p->num_results > 0 && !call->results))
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s: %d results, room for %d", call->name,
                               p->num_results, call->max_results);
  TPURT_RETURN_IF_ERROR(plan_check_fits(p, call->device));
  pjrt_buffer_t** params = tpurt_xmalloc(sizeof(pjrt_buffer_t*) * (size_t)(p->num_params + 1));
  tpurt_status_t status = plan_bind_params(p, call, params);
  if (status) {
    free(params);
    return status;
  }
  const int32_t n = p->num_program_outputs;
  pjrt_buffer_t** outputs = tpurt_xmalloc(sizeof(pjrt_buffer_t*) * (size_t)(n + 1));
  pjrt_buffer_t** handed = tpurt_xmalloc(sizeof(pjrt_buffer_t*) * (size_t)(n + 1));
  for (int32_t k = 0, j = 0; k < p->num_outputs; ++k) {
    const plan_output_t* o = &p->outputs[k];
    if (o->kind == OUTPUT_UNDEFINED || o->kind == OUTPUT_HOST_INT) continue;
    outputs[j] = pjrt_buffer_future_create(call->device, o->type.dtype, o->type.rank, o->type.dims);
    pjrt_buffer_retain(outputs[j]); /* one for the queue, one handed to the storage */
    handed[j] = outputs[j];
    ++j;
  }
  plan_hand_outputs_consume(p, call, handed);
  queue_push_consume(p->compiled, call->device, call->name, params, p->num_params, outputs, n);
  free(handed);
  free(outputs);
  free(params);
  return NULL;
}

void compiled_finish_consume(compiled_t* c, pjrt_executable_t* executable, tpurt_borrowed_status_t failure) {
  pthread_mutex_lock(&g_queue_lock);
  if (failure) {
    pjrt_executable_release(executable);
    tpurt_status_free(c->failure);
    c->failure = tpurt_status_clone(failure);
    __atomic_store_n(&c->state, COMPILED_FAILED, __ATOMIC_RELEASE);
  } else {
    c->executable = executable;
    __atomic_store_n(&c->state, COMPILED_OK, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_queue_lock);
  pump();
}

bool compiled_ok(const compiled_t* c) { return __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == COMPILED_OK; }

void queue_job_submit(tpurt_job_fn_t fn, void* job) {
  pthread_once(&g_hooks_once, install_hooks);
  pthread_mutex_lock(&g_queue_lock);
  ++g_jobs;
  pthread_mutex_unlock(&g_queue_lock);
  tpurt_pool_submit(fn, job);
}

void queue_job_done(void) {
  pthread_mutex_lock(&g_queue_lock);
  --g_jobs;
  pthread_cond_broadcast(&g_queue_moved);
  pthread_mutex_unlock(&g_queue_lock);
}

void queue_settle(void) {
  queue_drain();
  pthread_mutex_lock(&g_queue_lock);
  while (g_jobs > 0) pthread_cond_wait(&g_queue_moved, &g_queue_lock);
  pthread_mutex_unlock(&g_queue_lock);
}

void queue_drain(void) {
  if (!queue_busy()) return;
  pthread_mutex_lock(&g_queue_lock);
  const uint64_t target = g_queued_seq;
  while (g_done_seq < target) pthread_cond_wait(&g_queue_moved, &g_queue_lock);
  pthread_mutex_unlock(&g_queue_lock);
}

/*===--- compiles on the pool ---===*/

typedef struct compile_job_s {
  plan_t* plan; /* a reference of its own */
  lowered_t lowered;
  char* context; /* prepended to a compile error (the op's dtypes under a target), or NULL */
  tpurt_compile_kind_t forced_kind; /* the queuing thread's (metrics count the compile under it) */
  char label[];                     /* the op: the long-compile notice names it */
} compile_job_t;

static void compile_job(void* arg) {
  compile_job_t* job = arg;
  const tpurt_compile_kind_t previous = pjrt_force_compile_kind(job->forced_kind);
  tpurt_status_t status = plan_compile_consume(job->plan, &job->lowered);
  (void)pjrt_force_compile_kind(previous);
  cache_shadow_label(NULL); /* it named this job's op, whose name goes with the job */
  if (status && job->context) status = tpurt_status_annotate_consume(status, job->context);
  if (status) compiled_finish_consume(job->plan->compiled, NULL, status);
  if (status)
    plan_cache_abandon(job->plan);
  else
    plan_cache_publish(job->plan);
  tpurt_status_free(status);
  plan_release(job->plan);
  free(job->context);
  free(job);
  queue_job_done();
}

void queue_compile_consume(plan_t* p, lowered_t* lowered, const char* context) {
  const size_t label_size = strlen(lowered->label ? lowered->label : "") + 1;
  compile_job_t* job = tpurt_xcalloc(1, sizeof(*job) + label_size);
  memcpy(job->label, lowered->label ? lowered->label : "", label_size);
  job->lowered = *lowered;
  job->lowered.label = job->label; /* the op's name outlives the call */
  memset(lowered, 0, sizeof(*lowered));
  job->context = context ? tpurt_xstrdup(context) : NULL;
  job->forced_kind = pjrt_forced_compile_kind();
  plan_retain(p);
  job->plan = p;
  queue_job_submit(compile_job, job);
}
