/* pool_test.c: the compile pool (base/pool.c). Jobs all run, off the
** submitting thread, several at once when the pool has several workers;
** a pool of size 0 runs each job at its submit. Counts, never times. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/base.h"
#include "test.h"

static atomic_int g_done;
static atomic_int g_running, g_most_running;
static pthread_t g_submitter;
static atomic_int g_on_submitter;

/* A job that stays busy a little, so jobs of other workers overlap it. */
static void job(void* arg) {
  int now = atomic_fetch_add(&g_running, 1) + 1;
  for (int most = atomic_load(&g_most_running); now > most;) {
    if (atomic_compare_exchange_weak(&g_most_running, &most, now)) break;
  }
  if (pthread_equal(pthread_self(), g_submitter)) atomic_fetch_add(&g_on_submitter, 1);
  usleep(2000);
  atomic_fetch_sub(&g_running, 1);
  atomic_fetch_add(&g_done, *(int*)arg);
  free(arg);
}

static void submit_and_wait(int jobs) {
  g_submitter = pthread_self();
  atomic_store(&g_done, 0);
  atomic_store(&g_most_running, 0);
  atomic_store(&g_on_submitter, 0);
  for (int i = 0; i < jobs; ++i) {
    int* one = malloc(sizeof(int));
    *one = 1;
    tpurt_pool_submit(job, one);
  }
  for (int spins = 0; atomic_load(&g_done) < jobs && spins < 20000; ++spins) usleep(500);
}

TEST(Pool_SizeZeroRunsAtSubmit) {
  /* Runs first: the pool starts its workers at the first submit that finds
  ** a size above 0, and a size of 0 means none. */
  setenv("TORCH_TPU_COMPILE_THREADS", "0", 1);
  tpurt_config_reload_for_test();
  EXPECT(tpurt_pool_size() == 0);
  EXPECT(tpurt_pool_runs_inline());
  submit_and_wait(3);
  EXPECT(atomic_load(&g_done) == 3);
  EXPECT(atomic_load(&g_on_submitter) == 3);
}

TEST(Pool_EveryJobRunsOnAWorker) {
  setenv("TORCH_TPU_COMPILE_THREADS", "2", 1);
  tpurt_config_reload_for_test();
  ASSERT(tpurt_pool_size() == 2);
  ASSERT(!tpurt_pool_runs_inline());
  submit_and_wait(40);
  EXPECT(atomic_load(&g_done) == 40);
  EXPECT(atomic_load(&g_on_submitter) == 0);
  EXPECT(atomic_load(&g_most_running) == 2); /* two workers, each busy 2 ms a job */
}

static int thread_nice(void) {
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
  return errno == 0 ? nice : -100;
}

static atomic_int g_worker_nice = -100;

static void record_nice(void* arg) {
  atomic_store(&g_worker_nice, thread_nice());
  atomic_fetch_add(&g_done, *(int*)arg);
  free(arg);
}

TEST(Pool_WorkersRunBelowTheSubmitter) {
  /* the submitter (tracing, lowering) goes first where cores are few */
  ASSERT(!tpurt_pool_runs_inline());
  const int mine = thread_nice();
  ASSERT(mine != -100);
  atomic_store(&g_done, 0);
  int* one = malloc(sizeof(int));
  *one = 1;
  tpurt_pool_submit(record_nice, one);
  for (int spins = 0; atomic_load(&g_done) < 1 && spins < 20000; ++spins) usleep(500);
  ASSERT(atomic_load(&g_done) == 1);
  EXPECT(atomic_load(&g_worker_nice) == (mine + 10 > 19 ? 19 : mine + 10));
  EXPECT(thread_nice() == mine); /* the submitter's own is untouched */
}

TEST(Pool_ForkedChildRunsAtSubmit) {
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) { /* the child has the pool's state but none of its threads */
    int ok = tpurt_pool_runs_inline();
    submit_and_wait(3);
    ok = ok && atomic_load(&g_done) == 3 && atomic_load(&g_on_submitter) == 3;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(Config_CompileThreadsIsChecked) {
  setenv("TORCH_TPU_COMPILE_THREADS", "many", 1);
  tpurt_config_reload_for_test();
  EXPECT_STATUS(tpurt_config_check(), TPURT_INVALID_ARGUMENT);
  setenv("TORCH_TPU_COMPILE_THREADS", "65", 1);
  tpurt_config_reload_for_test();
  EXPECT_STATUS(tpurt_config_check(), TPURT_INVALID_ARGUMENT);
  unsetenv("TORCH_TPU_COMPILE_THREADS");
  tpurt_config_reload_for_test();
  EXPECT(tpurt_config()->compile_threads == -1);
}

TEST_MAIN(TEST_CASE(Pool_SizeZeroRunsAtSubmit), TEST_CASE(Pool_EveryJobRunsOnAWorker),
          TEST_CASE(Pool_WorkersRunBelowTheSubmitter), TEST_CASE(Pool_ForkedChildRunsAtSubmit),
          TEST_CASE(Config_CompileThreadsIsChecked))
