/* threads_test.c: strict-eager ops from several threads at once. The plan
** cache's in-flight entries make threads that need the same new program
** compile it once (the others wait for that key), and compiles run outside
** the engine lock, so threads compiling different programs overlap. Counts,
** never times: compiles per key, and the most compiles in flight at once. */
#include <pthread.h>

#include "test.h"

typedef struct job_s {
  pthread_barrier_t* start;
  int64_t rows, cols; /* the shape: a new one is a new program */
  int32_t num_shapes; /* this thread runs shapes (rows, cols + k) for k < num_shapes */
  float scale;        /* the thread's operand values, to tell results apart */
  int failures;
} job_t;

static tpurt_tensor_t filled(int64_t rows, int64_t cols, float value) {
  const int64_t n = rows * cols;
  float* data = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; ++i) data[i] = value + (float)i;
  int64_t sizes[2] = {rows, cols};
  tpurt_tensor_t t = test_upload_f32(data, 2, sizes);
  free(data);
  return t;
}

/* a + 2 * b for one shape; checks the result. */
static int add_one(int64_t rows, int64_t cols, float scale) {
  tpurt_tensor_t a = filled(rows, cols, scale), b = filled(rows, cols, 1);
  tpurt_arg_t args[3] = {
      {.kind = TPURT_ARG_TENSOR, .u.tensor = a},
      {.kind = TPURT_ARG_TENSOR, .u.tensor = b},
      {.kind = TPURT_ARG_SCALAR, .u.scalar = {.dtype = TPURT_DTYPE_I64, .tier = TPURT_TIER_WRAPPED, .i = 2}},
  };
  tpurt_result_t results[2];
  tpurt_op_call_t call = {
      .name = "aten::add.Tensor", .args = args, .num_args = 3, .results = results, .max_results = 2};
  int failures = 0;
  tpurt_status_t s = tpurt_op_run(&call);
  if (s || call.num_results != 1) {
    fprintf(stderr, "  add at %lldx%lld: %s\n", (long long)rows, (long long)cols,
            s ? tpurt_status_message(s) : "no result");
    tpurt_status_free(s);
    failures = 1;
  } else {
    const int64_t n = rows * cols;
    float* out = malloc((size_t)n * sizeof(float));
    tpurt_tensor_t r = a;
    r.storage = results[0].storage;
    s = tpurt_tensor_read_host(&r, out, (size_t)n * sizeof(float));
    if (s) {
      tpurt_status_free(s);
      failures = 1;
    }
    for (int64_t i = 0; i < n && !failures; ++i)
      if (out[i] != (scale + (float)i) + 2 * (1 + (float)i)) failures = 1;
    free(out);
    tpurt_storage_release(results[0].storage);
  }
  tpurt_storage_release(a.storage);
  tpurt_storage_release(b.storage);
  return failures;
}

static void* worker(void* arg) {
  job_t* job = arg;
  pthread_barrier_wait(job->start);
  for (int32_t k = 0; k < job->num_shapes; ++k)
    job->failures += add_one(job->rows, job->cols + k, job->scale);
  return NULL;
}

/* Runs |n| jobs on their own threads, released together. */
static void run_jobs(job_t* jobs, int n) {
  pthread_t threads[8];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)n);
  for (int i = 0; i < n; ++i) {
    jobs[i].start = &start;
    pthread_create(&threads[i], NULL, worker, &jobs[i]);
  }
  for (int i = 0; i < n; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
}

TEST(Threads_SameNewProgramCompilesOnce) {
  ASSERT_OK(tpurt_runtime_init());
  tpurt_metrics_t before, after;
  enum { kThreads = 4, kShapes = 6 };
  job_t jobs[kThreads];
  for (int i = 0; i < kThreads; ++i)
    jobs[i] = (job_t){.rows = 3, .cols = 101, .num_shapes = kShapes, .scale = 10.0f * (float)i};
  tpurt_metrics_get(&before);
  run_jobs(jobs, kThreads);
  tpurt_metrics_get(&after);
  for (int i = 0; i < kThreads; ++i) EXPECT(jobs[i].failures == 0);
  /* Four threads wanting each new program at once: one compile per shape. */
  EXPECT(after.compiles - before.compiles == kShapes);
  EXPECT(after.compiles_eager_op - before.compiles_eager_op == kShapes);
}

TEST(Threads_DifferentProgramsCompileAtOnce) {
  ASSERT_OK(tpurt_runtime_init());
  tpurt_metrics_reset();
  enum { kShapes = 16 };
  job_t jobs[2] = {{.rows = 5, .cols = 201, .num_shapes = kShapes, .scale = 1},
                   {.rows = 7, .cols = 301, .num_shapes = kShapes, .scale = 2}};
  run_jobs(jobs, 2);
  tpurt_metrics_t m;
  tpurt_metrics_get(&m);
  EXPECT(jobs[0].failures == 0 && jobs[1].failures == 0);
  EXPECT(m.compiles == 2 * kShapes);
  /* No lock of ours is held across a compile: the two threads' compiles
  ** were in flight together at some point. */
  EXPECT(m.max_concurrent_compiles >= 2);
  fprintf(stderr, "  most compiles at once: %llu\n", (unsigned long long)m.max_concurrent_compiles);
}

TEST(Threads_ForcedKindWinsOverTheSite) {
  ASSERT_OK(tpurt_runtime_init());
  tpurt_metrics_reset();
  tpurt_compile_kind_t previous = tpurt_set_compile_kind(TPURT_COMPILE_KIND_BLOCK);
  EXPECT(previous == TPURT_COMPILE_KIND_AUTO);
  EXPECT(add_one(9, 401, 1) == 0);
  EXPECT(tpurt_set_compile_kind(previous) == TPURT_COMPILE_KIND_BLOCK);
  EXPECT(add_one(9, 402, 1) == 0);
  tpurt_metrics_t m;
  tpurt_metrics_get(&m);
  EXPECT(m.compiles_block == 1 && m.compiles_eager_op == 1 && m.compiles == 2);
  EXPECT(m.compile_seconds_block > 0 && m.compile_seconds_eager_op > 0);
}

TEST_MAIN(TEST_CASE(Threads_SameNewProgramCompilesOnce), TEST_CASE(Threads_DifferentProgramsCompileAtOnce),
          TEST_CASE(Threads_ForcedKindWinsOverTheSite))
