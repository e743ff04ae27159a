/* pjrt_test.c: the PJRT runtime room against the real plugin named by
** TORCH_TPU_PJRT_PLUGIN (the CPU plugin in CI). */
#include "../pjrt/pjrt.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

static const char kAddMlir[] =
    "module @m {\n"
    "  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %0 = stablehlo.add %a, %b : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int contains(const char* s, const char* part) { return s && strstr(s, part) != NULL; }

/*===--- loader (does not touch the process's runtime) ---===*/

TEST(Loader_MissingFile) {
  tpurt_status_t s = pjrt_probe_plugin("/nonexistent/nope.so", NULL, NULL);
  EXPECT(tpurt_status_code(s) == TPURT_NOT_FOUND);
  EXPECT(contains(tpurt_status_message(s), "cannot open PJRT plugin '/nonexistent/nope.so': "));
  tpurt_status_free(s);
}

TEST(Loader_NotAPlugin) {
  tpurt_status_t s = pjrt_probe_plugin("libm.so.6", NULL, NULL);
  EXPECT(tpurt_status_code(s) == TPURT_NOT_FOUND);
  EXPECT(contains(tpurt_status_message(s),
                  "PJRT plugin 'libm.so.6' does not export GetPjrtApi: not a PJRT plugin"));
  tpurt_status_free(s);
}

TEST(Loader_RealPlugin) {
  const char* path = getenv("TORCH_TPU_PJRT_PLUGIN");
  ASSERT(path && *path);
  int major = -1, minor = -1;
  ASSERT_OK(pjrt_probe_plugin(path, &major, &minor));
  EXPECT(major == 0);
  EXPECT(minor >= 57);
}

/*===--- runtime ---===*/

TEST(Runtime_Init) {
  double start = now_seconds();
  ASSERT_OK(tpurt_runtime_init());
  double first = now_seconds() - start;
  ASSERT_OK(tpurt_runtime_init()); /* idempotent */
  EXPECT(tpurt_device_count() == 1);
  tpurt_runtime_info_t info;
  ASSERT_OK(tpurt_runtime_info(&info));
  EXPECT(strcmp(info.platform_name, "cpu") == 0);
  EXPECT(info.api_major == 0 && info.api_minor >= 57);
  EXPECT(info.device_count == 1);
  EXPECT(strcmp(info.plugin_path, getenv("TORCH_TPU_PJRT_PLUGIN")) == 0);
  const char* kind = NULL;
  ASSERT_OK(tpurt_device_kind(0, &kind));
  EXPECT(kind && *kind);
  EXPECT_STATUS(tpurt_device_kind(1, &kind), TPURT_OUT_OF_RANGE);
  EXPECT(contains(pjrt_identity(), info.plugin_path));
  printf("  plugin API %d.%d, platform '%s' version '%s', device kind '%s'; dlopen+init+client %.1f ms\n",
         info.api_major, info.api_minor, info.platform_name, info.platform_version, info.device_kind,
         first * 1e3);
  printf("  identity: %s\n", pjrt_identity());
}

/*===--- buffers ---===*/

/* Uploads |n| bytes of |data| as |dtype| [dims], reads it back, compares. */
static void round_trip(tpurt_dtype_t dtype, int32_t rank, const int64_t* dims, const void* data, size_t n) {
  pjrt_counters_t* c = pjrt_counters();
  uint64_t live = c->live_buffers, in_use = c->bytes_in_use[0], to_dev = c->bytes_to_device;
  pjrt_buffer_t* b = NULL;
  ASSERT_OK(pjrt_buffer_from_host(0, dtype, rank, dims, data, &b));
  EXPECT(b->nbytes == n && b->dtype == dtype && b->rank == rank);
  EXPECT(c->live_buffers == live + 1 && c->bytes_in_use[0] == in_use + n && c->bytes_to_device == to_dev + n);
  unsigned char back[64];
  memset(back, 0xAB, sizeof(back));
  tpurt_status_t s = pjrt_buffer_to_host(b, back, sizeof(back));
  EXPECT(s == NULL);
  if (s) fprintf(stderr, "  %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  EXPECT(n == 0 || memcmp(back, data, n) == 0);
  EXPECT_STATUS(pjrt_buffer_to_host(b, back, n ? n - 1 : 0), n ? TPURT_INVALID_ARGUMENT : TPURT_OK);
  ASSERT_OK(pjrt_buffer_await(b));
  pjrt_buffer_retain(b);
  pjrt_buffer_release(b);
  EXPECT(c->live_buffers == live + 1);
  pjrt_buffer_release(b);
  EXPECT(c->live_buffers == live && c->bytes_in_use[0] == in_use);
}

TEST(Buffer_RoundTrips) {
  ASSERT_OK(tpurt_runtime_init());
  const float f32[6] = {1, -2, 3.5f, 1e30f, -0.0f, 7};
  const int64_t d23[2] = {2, 3};
  round_trip(TPURT_DTYPE_F32, 2, d23, f32, sizeof(f32));
  const uint16_t bf16[4] = {0x3F80, 0xC000, 0x7F80, 0x0001}; /* 1, -2, inf, denormal */
  const int64_t d4[1] = {4};
  round_trip(TPURT_DTYPE_BF16, 1, d4, bf16, sizeof(bf16));
  const int64_t i64[4] = {INT64_MIN, -1, 0, INT64_MAX};
  round_trip(TPURT_DTYPE_I64, 1, d4, i64, sizeof(i64));
  const unsigned char pred[4] = {1, 0, 0, 1};
  round_trip(TPURT_DTYPE_BOOL, 1, d4, pred, sizeof(pred));
  const uint64_t u64[4] = {UINT64_MAX, 1, 2, 3};
  round_trip(TPURT_DTYPE_U64, 1, d4, u64, sizeof(u64));
  const uint16_t f16[4] = {0x3C00, 0xC000, 0x7C00, 0x0001};
  round_trip(TPURT_DTYPE_F16, 1, d4, f16, sizeof(f16));
  const double f64 = 3.141592653589793;
  round_trip(TPURT_DTYPE_F64, 0, NULL, &f64, sizeof(f64)); /* rank 0 */
  const int64_t d30[2] = {3, 0};
  round_trip(TPURT_DTYPE_F32, 2, d30, NULL, 0); /* zero elements */
}

TEST(Buffer_BadArguments) {
  ASSERT_OK(tpurt_runtime_init());
  pjrt_buffer_t* b = NULL;
  const int64_t neg[1] = {-1};
  float x = 0;
  EXPECT_STATUS(pjrt_buffer_from_host(0, TPURT_DTYPE_F32, 1, neg, &x, &b), TPURT_INVALID_ARGUMENT);
  EXPECT_STATUS(pjrt_buffer_from_host(5, TPURT_DTYPE_F32, 0, NULL, &x, &b), TPURT_OUT_OF_RANGE);
  EXPECT_STATUS(pjrt_buffer_from_host(0, TPURT_DTYPE_INVALID, 0, NULL, &x, &b), TPURT_INVALID_ARGUMENT);
  EXPECT_STATUS(pjrt_buffer_from_host(0, TPURT_DTYPE_F32, 9, neg, &x, &b), TPURT_INVALID_ARGUMENT);
  EXPECT(b == NULL);
}

/*===--- compile and execute ---===*/

/* Runs the add program on |device|: [1,2,3,4] + [10,20,30,40]. */
static void run_add(pjrt_executable_t* exe, int device) {
  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  const int64_t dims[1] = {4};
  pjrt_buffer_t* args[2] = {NULL, NULL};
  pjrt_buffer_t* out = NULL;
  ASSERT_OK(pjrt_buffer_from_host(device, TPURT_DTYPE_F32, 1, dims, a, &args[0]));
  tpurt_status_t s = pjrt_buffer_from_host(device, TPURT_DTYPE_F32, 1, dims, b, &args[1]);
  if (!s) s = pjrt_execute(exe, device, args, 2, &out, 1, "test::add");
  float got[4] = {0};
  if (!s) s = pjrt_buffer_to_host(out, got, sizeof(got));
  EXPECT(s == NULL);
  if (s) fprintf(stderr, "  run_add on device %d: %s\n", device, tpurt_status_message(s));
  tpurt_status_free(s);
  EXPECT(got[0] == 11 && got[1] == 22 && got[2] == 33 && got[3] == 44);
  if (out)
    EXPECT(out->dtype == TPURT_DTYPE_F32 && out->rank == 1 && out->dims[0] == 4 && out->device == device);
  pjrt_buffer_release(args[0]);
  pjrt_buffer_release(args[1]);
  pjrt_buffer_release(out);
}

TEST(Execute_Add) {
  ASSERT_OK(tpurt_runtime_init());
  pjrt_counters_t* c = pjrt_counters();
  uint64_t compiles = c->compiles, executions = c->executions, live = c->live_buffers;
  pjrt_executable_t* exe = NULL;
  double t0 = now_seconds();
  ASSERT_OK(pjrt_compile(kAddMlir, strlen(kAddMlir), &exe));
  double t1 = now_seconds();
  EXPECT(pjrt_executable_num_outputs(exe) == 1);
  EXPECT(c->compiles == compiles + 1 && c->compile_ns > 0);
  run_add(exe, 0);
  double t2 = now_seconds();
  for (int i = 0; i < 20; ++i) run_add(exe, 0);
  double t3 = now_seconds();
  EXPECT(c->executions == executions + 21);
  EXPECT(c->live_buffers == live);
  ASSERT_OK(pjrt_synchronize(-1));
  ASSERT_OK(pjrt_synchronize(0));
  printf("  compile add %.1f ms; first upload+execute+readback %.3f ms, then %.3f ms each\n", (t1 - t0) * 1e3,
         (t2 - t1) * 1e3, (t3 - t2) * 1e3 / 20);

  /* Mismatched calls are errors, not crashes. */
  pjrt_buffer_t* out = NULL;
  pjrt_buffer_t* two[2] = {NULL, NULL};
  EXPECT_STATUS(pjrt_execute(exe, 0, NULL, 0, two, 2, "test::bad"), TPURT_INVALID_ARGUMENT);
  EXPECT_STATUS(pjrt_execute(exe, 3, NULL, 0, &out, 1, "test::bad"), TPURT_OUT_OF_RANGE);
  tpurt_status_t s = pjrt_execute(exe, 0, NULL, 0, &out, 1, "test::noargs");
  EXPECT(s != NULL && contains(tpurt_status_message(s), "test::noargs"));
  tpurt_status_free(s);
  EXPECT(out == NULL);
  pjrt_executable_release(exe);
}

TEST(Execute_ManyAsyncLaunches) {
  /* More launches than the pending list holds, with no sync in between. */
  ASSERT_OK(tpurt_runtime_init());
  pjrt_executable_t* exe = NULL;
  ASSERT_OK(pjrt_compile(kAddMlir, strlen(kAddMlir), &exe));
  const float a[4] = {1, 2, 3, 4};
  const int64_t dims[1] = {4};
  pjrt_buffer_t* x = NULL;
  ASSERT_OK(pjrt_buffer_from_host(0, TPURT_DTYPE_F32, 1, dims, a, &x));
  for (int i = 0; i < 1500; ++i) {
    pjrt_buffer_t* args[2] = {x, x};
    pjrt_buffer_t* y = NULL;
    tpurt_status_t s = pjrt_execute(exe, 0, args, 2, &y, 1, "test::double");
    EXPECT(s == NULL);
    tpurt_status_free(s);
    if (s) break;
    pjrt_buffer_release(x);
    x = y;
  }
  ASSERT_OK(pjrt_synchronize(-1));
  float got[4];
  ASSERT_OK(pjrt_buffer_to_host(x, got, sizeof(got)));
  EXPECT(isinf(got[0])); /* 2^1500 overflows: every launch ran */
  pjrt_buffer_release(x);
  pjrt_executable_release(exe);
}

static void* add_thread(void* exe) {
  for (int i = 0; i < 100; ++i) run_add(exe, 0);
  return NULL;
}

TEST(Execute_Threads) {
  /* Four threads share one executable; the room's lock serialises the
  ** plugin calls, events are awaited unlocked. */
  ASSERT_OK(tpurt_runtime_init());
  pjrt_executable_t* exe = NULL;
  ASSERT_OK(pjrt_compile(kAddMlir, strlen(kAddMlir), &exe));
  uint64_t live = pjrt_counters()->live_buffers;
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i) ASSERT(pthread_create(&threads[i], NULL, add_thread, exe) == 0);
  for (int i = 0; i < 4; ++i) pthread_join(threads[i], NULL);
  ASSERT_OK(pjrt_synchronize(-1));
  EXPECT(pjrt_counters()->live_buffers == live);
  pjrt_executable_release(exe);
}

/*===--- futures: values a queued launch will make ---===*/

typedef struct {
  pjrt_buffer_t* future;
  pjrt_executable_t* exe;
} fulfil_arg_t;

/* Makes the value the future stands for, a little later, on another thread. */
static void* fulfil_later(void* p) {
  fulfil_arg_t* f = p;
  usleep(20000);
  const float a[4] = {1, 2, 3, 4};
  const int64_t dims[1] = {4};
  pjrt_buffer_t *x = NULL, *y = NULL;
  tpurt_status_t s = pjrt_buffer_from_host(0, TPURT_DTYPE_F32, 1, dims, a, &x);
  pjrt_buffer_t* args[2] = {x, x};
  if (!s) s = pjrt_execute(f->exe, 0, args, 2, &y, 1, "test::double");
  if (s) {
    pjrt_buffer_future_fail(f->future, s);
    tpurt_status_free(s);
  } else {
    pjrt_buffer_fulfil_consume(f->future, y);
  }
  pjrt_buffer_release(x);
  return NULL;
}

TEST(Future_ReadersWaitForTheValue) {
  ASSERT_OK(tpurt_runtime_init());
  pjrt_executable_t* exe = NULL;
  ASSERT_OK(pjrt_compile(kAddMlir, strlen(kAddMlir), &exe));
  const int64_t dims[1] = {4};
  const uint64_t live = pjrt_counters()->live_buffers;
  pjrt_buffer_t* future = pjrt_buffer_future_create(0, TPURT_DTYPE_F32, 1, dims);
  EXPECT(pjrt_buffer_is_pending(future) && future->nbytes == 16);
  EXPECT(pjrt_counters()->live_buffers == live); /* holds nothing yet */
  fulfil_arg_t arg = {future, exe};
  pthread_t t;
  ASSERT(pthread_create(&t, NULL, fulfil_later, &arg) == 0);
  /* A launch reading the future waits for it, as a host read does. */
  pjrt_buffer_t* args[2] = {future, future};
  pjrt_buffer_t* z = NULL;
  tpurt_status_t s = pjrt_execute(exe, 0, args, 2, &z, 1, "test::reads_future");
  EXPECT(s == NULL);
  tpurt_status_free(s);
  float got[4] = {0};
  if (z) EXPECT(pjrt_buffer_to_host(z, got, sizeof(got)) == NULL);
  EXPECT(got[0] == 4 && got[3] == 16);
  EXPECT(!pjrt_buffer_is_pending(future));
  pthread_join(t, NULL);
  pjrt_buffer_release(z);
  pjrt_buffer_release(future);
  ASSERT_OK(pjrt_synchronize(-1));
  EXPECT(pjrt_counters()->live_buffers == live);
  pjrt_executable_release(exe);
}

TEST(Future_AFailedOneFailsItsReaders) {
  ASSERT_OK(tpurt_runtime_init());
  pjrt_executable_t* exe = NULL;
  ASSERT_OK(pjrt_compile(kAddMlir, strlen(kAddMlir), &exe));
  const int64_t dims[1] = {4};
  pjrt_buffer_t* future = pjrt_buffer_future_create(0, TPURT_DTYPE_F32, 1, dims);
  tpurt_status_t why = tpurt_status_create(TPURT_RESOURCE_EXHAUSTED, "aten::mul.Tensor: out of memory");
  pjrt_buffer_future_fail(future, why);
  tpurt_status_free(why);
  float got[4];
  tpurt_status_t s = pjrt_buffer_to_host(future, got, sizeof(got));
  EXPECT(tpurt_status_code(s) == TPURT_RESOURCE_EXHAUSTED && contains(tpurt_status_message(s), "aten::mul"));
  tpurt_status_free(s);
  pjrt_buffer_t* args[2] = {future, future};
  pjrt_buffer_t* z = NULL;
  s = pjrt_execute(exe, 0, args, 2, &z, 1, "test::reads_lost");
  EXPECT(tpurt_status_code(s) == TPURT_RESOURCE_EXHAUSTED);
  EXPECT(contains(tpurt_status_message(s), "an input's value was lost") &&
         contains(tpurt_status_message(s), "aten::mul"));
  /* a value computed from that lost one: the chain says "lost" once */
  pjrt_buffer_t* later = pjrt_buffer_future_create(0, TPURT_DTYPE_F32, 1, dims);
  pjrt_buffer_future_fail(later, s);
  tpurt_status_free(s);
  pjrt_buffer_t* again[2] = {later, later};
  s = pjrt_execute(exe, 0, again, 2, &z, 1, "test::reads_lost_twice");
  const char* lost = strstr(tpurt_status_message(s), "an input's value was lost");
  EXPECT(lost && !strstr(lost + 1, "an input's value was lost") &&
         contains(tpurt_status_message(s), "aten::mul"));
  tpurt_status_free(s);
  pjrt_buffer_release(later);
  EXPECT(z == NULL);
  pjrt_buffer_release(future);
  pjrt_executable_release(exe);
}

TEST(Future_OfAnotherShapeFails) {
  ASSERT_OK(tpurt_runtime_init());
  const int64_t four[1] = {4}, two[1] = {2};
  const float a[2] = {1, 2};
  pjrt_buffer_t* future = pjrt_buffer_future_create(0, TPURT_DTYPE_F32, 1, four);
  pjrt_buffer_t* x = NULL;
  ASSERT_OK(pjrt_buffer_from_host(0, TPURT_DTYPE_F32, 1, two, a, &x));
  pjrt_buffer_fulfil_consume(future, x);
  EXPECT_STATUS(pjrt_buffer_ready(future), TPURT_INTERNAL);
  pjrt_buffer_release(future);
}

TEST(Compile_Malformed) {
  ASSERT_OK(tpurt_runtime_init());
  static const char kBad[] = "module @m { func.func public @main( -> what }";
  pjrt_executable_t* exe = NULL;
  tpurt_status_t s = pjrt_compile(kBad, strlen(kBad), &exe);
  EXPECT(s != NULL && exe == NULL);
  if (getenv("TPURT_TEST_VERBOSE"))
    printf("  malformed: code %d: %s\n", tpurt_status_code(s), tpurt_status_message(s));
  EXPECT(tpurt_status_code(s) != TPURT_OK);
  EXPECT(contains(tpurt_status_message(s), "compiling StableHLO: "));
  tpurt_status_free(s);
  /* A type error in well-formed MLIR. */
  static const char kIllTyped[] =
      "module @m { func.func public @main(%a: tensor<4xf32>, %b: tensor<3xf32>) -> (tensor<4xf32>) {\n"
      "  %0 = stablehlo.add %a, %b : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>\n"
      "  return %0 : tensor<4xf32> } }";
  s = pjrt_compile(kIllTyped, strlen(kIllTyped), &exe);
  EXPECT(s != NULL && exe == NULL);
  tpurt_status_free(s);
}

TEST(Executable_SerializeRoundTrip) {
  ASSERT_OK(tpurt_runtime_init());
  pjrt_executable_t* exe = NULL;
  ASSERT_OK(pjrt_compile(kAddMlir, strlen(kAddMlir), &exe));
  char* bytes = NULL;
  size_t size = 0;
  tpurt_status_t s = pjrt_executable_serialize(exe, &bytes, &size);
  pjrt_executable_release(exe);
  ASSERT_OK(s);
  EXPECT(size > 0);
  pjrt_executable_t* loaded = NULL;
  double t0 = now_seconds();
  s = pjrt_executable_deserialize(bytes, size, &loaded);
  double t1 = now_seconds();
  if (!s) {
    EXPECT(pjrt_executable_num_outputs(loaded) == 1);
    run_add(loaded, 0);
    pjrt_executable_release(loaded);
    printf("  serialized add: %zu bytes, deserialize %.2f ms\n", size, (t1 - t0) * 1e3);
  }
  /* A truncated blob is an error, not a crash. */
  pjrt_executable_t* bad = NULL;
  tpurt_status_t s2 = pjrt_executable_deserialize(bytes, size / 2, &bad);
  EXPECT(s2 != NULL && bad == NULL);
  tpurt_status_free(s2);
  free(bytes);
  ASSERT_OK(s);
}

/* Asynchronous execution errors: the CPU plugin reports everything we can
** provoke (bad MLIR, wrong argument counts and shapes) synchronously at
** compile or launch, so the path from a failed completion event to
** "<op>: <message>" at pjrt_synchronize is not exercised here. */

/*===--- two devices (a child process with TORCH_TPU_NUM_DEVICES=2) ---===*/

static int two_devices_child(void) {
  double t0 = now_seconds();
  tpurt_status_t s = tpurt_runtime_init();
  printf("  child: dlopen+initialize+client with 2 devices %.1f ms\n", (now_seconds() - t0) * 1e3);
  if (s) {
    fprintf(stderr, "  child: init: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    return 2;
  }
  if (tpurt_device_count() != 2) {
    fprintf(stderr, "  child: expected 2 devices, got %d\n", tpurt_device_count());
    return 3;
  }
  pjrt_executable_t* exe = NULL;
  s = pjrt_compile(kAddMlir, strlen(kAddMlir), &exe);
  if (s) {
    fprintf(stderr, "  child: compile: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    return 4;
  }
  run_add(exe, 1);
  run_add(exe, 0);
  /* Copy to the other device, read back there. */
  const int64_t dims[1] = {3};
  const int32_t v[3] = {7, 8, 9};
  pjrt_buffer_t *b0 = NULL, *b1 = NULL, *same = NULL;
  s = pjrt_buffer_from_host(0, TPURT_DTYPE_I32, 1, dims, v, &b0);
  if (!s) s = pjrt_buffer_copy_to_device(b0, 1, &b1);
  int32_t got[3] = {0};
  if (!s) s = pjrt_buffer_to_host(b1, got, sizeof(got));
  if (!s) s = pjrt_buffer_copy_to_device(b0, 0, &same);
  if (s) {
    fprintf(stderr, "  child: copy_to_device: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    ++test_failures_;
  }
  EXPECT(got[0] == 7 && got[1] == 8 && got[2] == 9);
  EXPECT(b1 && b1->device == 1 && pjrt_counters()->bytes_in_use[1] == 12);
  EXPECT(same == b0);
  pjrt_buffer_release(same);
  EXPECT_STATUS(pjrt_buffer_copy_to_device(b0, 2, &same), TPURT_OUT_OF_RANGE);
  pjrt_buffer_release(b1);
  pjrt_buffer_release(b0);
  EXPECT(pjrt_counters()->live_buffers == 0);
  s = pjrt_synchronize(1);
  EXPECT(s == NULL);
  tpurt_status_free(s);
  pjrt_executable_release(exe);
  return test_failures_ ? 1 : 0;
}

static int spmd_child(void);

__attribute__((constructor)) static void maybe_child(void) {
  const char* role = getenv("TPURT_PJRT_TEST_CHILD");
  if (role && strcmp(role, "two_devices") == 0) exit(two_devices_child());
  if (role && strcmp(role, "spmd") == 0) exit(spmd_child());
}

/* Runs this test binary again in a child with |role| and |num_devices|. */
static void expect_child_with_devices(const char* role, const char* num_devices) {
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    setenv("TPURT_PJRT_TEST_CHILD", role, 1);
    setenv("TORCH_TPU_NUM_DEVICES", num_devices, 1);
    char* argv[] = {"pjrt_test", NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  int status = 0;
  ASSERT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(Runtime_TwoDevices) { expect_child_with_devices("two_devices", "2"); }
TEST(Runtime_SpmdFourDevices) { expect_child_with_devices("spmd", "4"); }

/*===--- SPMD over four devices (a child with TORCH_TPU_NUM_DEVICES=4) ---===*/

/* x (8x4, rows split over 4 devices) @ w (4x6, replicated): each device
** computes its 2 rows; the sum of x over everything needs XLA's all-reduce
** and comes back replicated. Every shard of x is different, so a shard on
** the wrong device shows. */
static const char kSpmdMlir[] =
    "module @spmd attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n"
    "  sdy.mesh @mesh = <[\"a0\"=4]>\n"
    "  func.func public @main(%x: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"a0\"}, {}]>},\n"
    "                         %w: tensor<4x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})\n"
    "      -> (tensor<8x6xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"a0\"}, {}]>},\n"
    "          tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {\n"
    "    %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]\n"
    "        : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>\n"
    "    %zero = stablehlo.constant dense<0.0> : tensor<f32>\n"
    "    %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0, 1] : "
    "(tensor<8x4xf32>, tensor<f32>) -> tensor<f32>\n"
    "    return %y, %s : tensor<8x6xf32>, tensor<f32>\n"
    "  }\n"
    "}\n";

static int spmd_child(void) {
  tpurt_status_t s = tpurt_runtime_init();
  if (s || tpurt_device_count() != 4) {
    fprintf(stderr, "  child: init: %s, %d devices\n", s ? tpurt_status_message(s) : "ok",
            tpurt_device_count());
    tpurt_status_free(s);
    return 2;
  }
  const int devices[4] = {0, 1, 2, 3};
  float x[8][4], w[4][6];
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 4; ++k) x[i][k] = (float)(i * 4 + k) * 0.25f - 3.0f;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 6; ++j) w[k][j] = (float)((k * 7 + j * 3) % 5) - 2.0f;
  pjrt_executable_t* exe = NULL;
  s = pjrt_compile_spmd(kSpmdMlir, strlen(kSpmdMlir), 4, devices, &exe);
  if (s) {
    fprintf(stderr, "  child: compile: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    return 4;
  }
  const int64_t shard_dims[2] = {2, 4}, w_dims[2] = {4, 6};
  pjrt_buffer_t* args[4][2] = {{NULL}};
  for (int d = 0; d < 4 && !s; ++d) {
    s = pjrt_buffer_from_host(d, TPURT_DTYPE_F32, 2, shard_dims, x[2 * d], &args[d][0]);
    if (!s) s = pjrt_buffer_from_host(d, TPURT_DTYPE_F32, 2, w_dims, w, &args[d][1]);
  }
  uint64_t launches = pjrt_counters()->executions;
  pjrt_buffer_t* outs[4][2] = {{NULL}};
  if (!s) s = pjrt_execute_spmd(exe, 4, devices, &args[0][0], 2, &outs[0][0], 2, "spmd_test");
  EXPECT(pjrt_counters()->executions == launches + 1); /* one launch across the four devices */
  float expect_sum = 0;
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 4; ++k) expect_sum += x[i][k];
  for (int d = 0; d < 4 && !s; ++d) {
    float y[2][6], sum = 0;
    EXPECT(outs[d][0]->device == d && outs[d][0]->rank == 2 && outs[d][0]->dims[0] == 2 &&
           outs[d][0]->dims[1] == 6);
    EXPECT(outs[d][1]->rank == 0);
    s = pjrt_buffer_to_host(outs[d][0], y, sizeof(y));
    if (!s) s = pjrt_buffer_to_host(outs[d][1], &sum, sizeof(sum));
    for (int i = 0; i < 2 && !s; ++i) {
      for (int j = 0; j < 6; ++j) {
        float e = 0;
        for (int k = 0; k < 4; ++k) e += x[2 * d + i][k] * w[k][j];
        EXPECT(fabsf(y[i][j] - e) < 1e-5f);
      }
    }
    EXPECT(fabsf(sum - expect_sum) < 1e-4f);
  }
  if (s) {
    fprintf(stderr, "  child: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    ++test_failures_;
  }
  /* A partition's argument on the wrong device is refused before launching. */
  pjrt_buffer_t* swapped[4][2];
  memcpy(swapped, args, sizeof(swapped));
  swapped[1][0] = args[2][0];
  pjrt_buffer_t* bad[4][2];
  EXPECT_STATUS(pjrt_execute_spmd(exe, 4, devices, &swapped[0][0], 2, &bad[0][0], 2, "spmd_test"),
                TPURT_INVALID_ARGUMENT);
  for (int d = 0; d < 4; ++d) {
    for (int i = 0; i < 2; ++i) {
      pjrt_buffer_release(args[d][i]);
      pjrt_buffer_release(outs[d][i]);
    }
  }
  s = pjrt_synchronize(-1);
  EXPECT(s == NULL);
  tpurt_status_free(s);
  pjrt_executable_release(exe);
  EXPECT(pjrt_counters()->live_buffers == 0);
  return test_failures_ ? 1 : 0;
}

TEST(Options_SpmdEncoding) {
  const int64_t ids[2] = {0, 5};
  char* bytes = NULL;
  size_t size = 0;
  ASSERT(pjrt_spmd_compile_options(2, ids, &bytes, &size) == NULL);
  /* 3: {4: 1, 5: 2, 6: 1, 9: {1: 1, 2: 2, 3: {1: 0}, 3: {1: 5}}, 19: 1 (use_shardy_partitioner)} */
  static const unsigned char kExpect[] = {0x1a, 0x17, 0x20, 0x01, 0x28, 0x02, 0x30, 0x01, 0x4a,
                                          0x0c, 0x08, 0x01, 0x10, 0x02, 0x1a, 0x02, 0x08, 0x00,
                                          0x1a, 0x02, 0x08, 0x05, 0x98, 0x01, 0x01};
  EXPECT(size >= sizeof(kExpect) && memcmp(bytes, kExpect, sizeof(kExpect)) == 0);
  free(bytes);
  EXPECT_STATUS(pjrt_spmd_compile_options(0, ids, &bytes, &size), TPURT_INVALID_ARGUMENT);
}

/* Runs |fn| in a forked child (before this process initialises the
** runtime, so the child starts fresh) and expects it to return 0. */
static void expect_child(int (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) _exit(fn());
  int status = 0;
  ASSERT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int bad_device_count_child(void) {
  setenv("TORCH_TPU_NUM_DEVICES", "0", 1);
  tpurt_status_t s1 = tpurt_runtime_init(), s2 = tpurt_runtime_init();
  /* The failure is remembered: the same message, in a fresh status. */
  int ok = tpurt_status_code(s1) == TPURT_INVALID_ARGUMENT &&
           contains(tpurt_status_message(s1), "from 1 to") && s1 != s2 &&
           strcmp(tpurt_status_message(s1), tpurt_status_message(s2)) == 0 && tpurt_device_count() == 0;
  if (!ok) fprintf(stderr, "  child: %s\n", tpurt_status_message(s1));
  return ok ? 0 : 1;
}

static int no_plugin_child(void) {
  unsetenv("TORCH_TPU_PJRT_PLUGIN");
  tpurt_status_t s = tpurt_runtime_init();
  int ok = tpurt_status_code(s) == TPURT_NOT_FOUND &&
           contains(tpurt_status_message(s), "pip install xla-cpu-pjrt") &&
           contains(tpurt_status_message(s), "TORCH_TPU_PJRT_PLUGIN") && tpurt_device_count() == 0 &&
           strcmp(pjrt_identity(), "") == 0;
  if (!ok) fprintf(stderr, "  child: %s\n", tpurt_status_message(s));
  return ok ? 0 : 1;
}

static int default_plugin_child(void) {
  char* path = strdup(getenv("TORCH_TPU_PJRT_PLUGIN"));
  unsetenv("TORCH_TPU_PJRT_PLUGIN");
  tpurt_runtime_set_default_plugin("/nonexistent/first.so");
  tpurt_runtime_set_default_plugin(path); /* the last call wins */
  tpurt_status_t s = tpurt_runtime_init();
  int ok = s == NULL && tpurt_device_count() == 1;
  if (!ok) fprintf(stderr, "  child: %s\n", tpurt_status_message(s));
  free(path);
  return ok ? 0 : 1;
}

TEST(Runtime_BadDeviceCount) { expect_child(bad_device_count_child); }
TEST(Runtime_NoPlugin) { expect_child(no_plugin_child); }
TEST(Runtime_DefaultPlugin) { expect_child(default_plugin_child); }

TEST_MAIN(TEST_CASE(Loader_MissingFile), TEST_CASE(Loader_NotAPlugin), TEST_CASE(Loader_RealPlugin),
          TEST_CASE(Runtime_BadDeviceCount), TEST_CASE(Runtime_NoPlugin), TEST_CASE(Runtime_DefaultPlugin),
          TEST_CASE(Runtime_Init), TEST_CASE(Buffer_RoundTrips), TEST_CASE(Buffer_BadArguments),
          TEST_CASE(Execute_Add), TEST_CASE(Execute_ManyAsyncLaunches), TEST_CASE(Execute_Threads),
          TEST_CASE(Future_ReadersWaitForTheValue), TEST_CASE(Future_AFailedOneFailsItsReaders),
          TEST_CASE(Future_OfAnotherShapeFails), TEST_CASE(Compile_Malformed),
          TEST_CASE(Executable_SerializeRoundTrip), TEST_CASE(Runtime_TwoDevices),
          TEST_CASE(Runtime_SpmdFourDevices), TEST_CASE(Options_SpmdEncoding))
