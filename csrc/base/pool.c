/* pool.c: worker threads for work the caller must not wait for: compiles.
**
** A compile is the slowest thing the engine does (tens of milliseconds for
** an eager op, seconds to minutes for a block on a TPU target). A caller
** that hands its compile to the pool can go on (lowering the next op,
** tracing the next block) while up to TORCH_TPU_COMPILE_THREADS programs
** compile at once.
**
** Jobs run in the order they were submitted, each on some worker, with no
** lock of ours held: a job takes what locks it needs. Workers start on the
** first submit and live as long as the process (they are never joined: a
** job may be inside the plugin when the process exits, so exit paths wait
** for the work they care about, not for the threads).
**
** A forked child inherits the queue but not the threads: there, and when
** the pool has no threads (TORCH_TPU_COMPILE_THREADS=0), a submit runs the
** job at once on the caller's thread.
**
** Workers run below the process's CPU priority (kWorkerNice). The thread
** that submits is the one the run waits on: it traces the next graph, lowers
** the next op, feeds the device; a compile is needed only when its program
** is first launched. Where cores are few, a compile at equal priority took
** much of the host from that thread (XLA:CPU compiles one program on more
** than one core): on 2 cores the tiny FLUX warm-up's second dynamo trace took
** 1.4 s beside the first graph's compile, 1.05 s with the compile below it.
** Where cores are free, priority changes nothing. Threads a compile starts
** inherit it.
*/
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base.h"

typedef struct job_s {
  tpurt_job_fn_t fn;
  void* arg;
  struct job_s* next;
} job_t;

static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_pool_work = PTHREAD_COND_INITIALIZER;
static job_t *g_head TPURT_GUARDED_BY(g_pool_lock), *g_tail TPURT_GUARDED_BY(g_pool_lock);
static int g_threads TPURT_GUARDED_BY(g_pool_lock);     /* workers started */
static pid_t g_owner_pid TPURT_GUARDED_BY(g_pool_lock); /* the process that started them */

enum { kWorkerNice = 10 }; /* added to the process's nice value: 0 (highest) to 19 */

static void* worker_main(void* unused) {
  (void)unused;
#ifdef __linux__
  /* Linux gives each thread its own nice value (POSIX names the process);
  ** raising one's own needs no privilege. If it fails the worker runs at
  ** the process's priority, as before: nothing to report. */
  const pid_t tid = (pid_t)syscall(SYS_gettid);
  errno = 0;
  const int nice_now = getpriority(PRIO_PROCESS, (id_t)tid);
  if (errno == 0)
    (void)setpriority(PRIO_PROCESS, (id_t)tid, nice_now + kWorkerNice > 19 ? 19 : nice_now + kWorkerNice);
#endif
  for (;;) {
    pthread_mutex_lock(&g_pool_lock);
    while (!g_head) pthread_cond_wait(&g_pool_work, &g_pool_lock);
    job_t* job = g_head;
    g_head = job->next;
    if (!g_head) g_tail = NULL;
    pthread_mutex_unlock(&g_pool_lock);
    job->fn(job->arg);
    free(job);
  }
  return NULL;
}

static int g_cores TPURT_GUARDED_BY(atomic); /* the host's online cores, 0: not read yet */

int tpurt_pool_size(void) {
  int64_t n = tpurt_config()->compile_threads;
  if (n < 0) { /* the default: one per core the host offers */
    int cores = __atomic_load_n(&g_cores, __ATOMIC_RELAXED);
    if (!cores) {
      long online = sysconf(_SC_NPROCESSORS_ONLN);
      cores = online > 0 ? (int)online : 1;
      __atomic_store_n(&g_cores, cores, __ATOMIC_RELAXED);
    }
    n = cores;
  }
  return (int)n;
}

/* Starts the workers once per process (lock held); false if none can run
** here: a pool of size 0, a forked child, or no thread could be made. */
static bool ensure_workers_locked(void) {
  if (g_threads > 0) return g_owner_pid == getpid();
  int want = tpurt_pool_size();
  for (int i = 0; i < want; ++i) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, worker_main, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) break;
    ++g_threads;
  }
  g_owner_pid = getpid();
  return g_threads > 0;
}

void tpurt_pool_submit(tpurt_job_fn_t fn, void* arg) {
  pthread_mutex_lock(&g_pool_lock);
  if (!ensure_workers_locked()) {
    pthread_mutex_unlock(&g_pool_lock);
    fn(arg);
    return;
  }
  job_t* job = tpurt_xmalloc(sizeof(*job));
  *job = (job_t){.fn = fn, .arg = arg, .next = NULL};
  if (g_tail)
    g_tail->next = job;
  else
    g_head = job;
  g_tail = job;
  pthread_cond_signal(&g_pool_work);
  pthread_mutex_unlock(&g_pool_lock);
}

bool tpurt_pool_runs_inline(void) {
  pthread_mutex_lock(&g_pool_lock);
  bool inline_only = g_threads > 0 ? g_owner_pid != getpid() : tpurt_pool_size() == 0;
  pthread_mutex_unlock(&g_pool_lock);
  return inline_only;
}
