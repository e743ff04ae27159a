/* target_test.c: compile-only targets (pjrt/target.c) against the fake
** plugin's topologies and compiler: the topology's facts, a compile with
** cost analysis and memory stats crossing the ABI, a program with no
** estimate, and the errors (unknown topology, refused program, no plugin). */
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../cache/cache.h"
#include "../pjrt/pjrt_internal.h"
#include "test.h"

static const char* fake_plugin(void) {
  const char* path = getenv("TPURT_FAKE_PLUGIN");
  return path && *path && access(path, R_OK) == 0 ? path : NULL;
}

#define NEED_FAKE()                                                             \
  do {                                                                          \
    if (!fake_plugin()) {                                                       \
      printf("  skipped: TPURT_FAKE_PLUGIN is not set (make ctest sets it)\n"); \
      return;                                                                   \
    }                                                                           \
  } while (0)

static bool contains(const char* text, const char* part) { return text && strstr(text, part); }

static const char kTwoOps[] =
    "module @two {\n"
    "  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %b = \"stablehlo.add\"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    %c = \"stablehlo.multiply\"(%b, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%c) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

TEST(Target_Topology) {
  NEED_FAKE();
  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:1x1", &t));
  tpurt_target_info_t info;
  tpurt_target_info(t, &info);
  EXPECT(strcmp(info.platform_name, "fake") == 0);
  EXPECT(strcmp(info.platform_version, "fake 1.0") == 0);
  EXPECT(strcmp(info.device_kind, "Fake TPU") == 0);
  EXPECT(strcmp(info.topology, "fake:1x1") == 0);
  EXPECT(info.num_devices == 1);
  EXPECT(info.api_major == 0 && info.api_minor == 81);
  EXPECT(contains(info.identity, "fake:1x1"));
  tpurt_target_free(t);

  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:2x2", &t));
  tpurt_target_info(t, &info);
  EXPECT(info.num_devices == 4);
  for (int i = 0; i < 4; ++i) EXPECT(tpurt_target_device_id(t, i) == i);
  EXPECT(tpurt_target_device_id(t, 4) == -1);
  tpurt_target_free(t);
}

TEST(Target_UnknownTopologyIsThePluginsError) {
  NEED_FAKE();
  tpurt_target_t* t = NULL;
  tpurt_status_t s = tpurt_target_create(fake_plugin(), "v9z:1x1", &t);
  EXPECT(tpurt_status_code(s) == TPURT_INVALID_ARGUMENT);
  EXPECT(contains(tpurt_status_message(s), "unknown topology 'v9z:1x1'"));
  EXPECT(contains(tpurt_status_message(s), "target 'v9z:1x1'"));
  EXPECT(t == NULL);
  tpurt_status_free(s);
  EXPECT_STATUS(tpurt_target_create(fake_plugin(), "", &t), TPURT_INVALID_ARGUMENT);
  EXPECT_STATUS(tpurt_target_create("/nonexistent/libtpu.so", "v6e:1x1", &t), TPURT_NOT_FOUND);
}

TEST(Target_CompileReadsCostAndMemory) {
  NEED_FAKE();
  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:1x1", &t));
  tpurt_target_program_t p;
  tpurt_status_t s = tpurt_target_compile(t, kTwoOps, strlen(kTwoOps), NULL, 0, &p);
  if (s) {
    fprintf(stderr, "  %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    tpurt_target_free(t);
    ++test_failures_;
    return;
  }
  EXPECT(p.has_cost && p.has_memory && p.has_estimate);
  EXPECT(p.flops == 2000.0);
  EXPECT(p.bytes_accessed == 128.0);
  EXPECT(fabs(p.estimated_seconds - 2e-6) < 1e-9);
  EXPECT(p.argument_bytes == 4096 && p.output_bytes == 1024 && p.generated_code_bytes == 100);
  EXPECT(p.temp_bytes == 16 * (int64_t)strlen(kTwoOps));
  /* "fake-<size>" as hex: "66616b652d" is "fake-" */
  EXPECT(strncmp(p.fingerprint, "66616b652d", 10) == 0 && strlen(p.fingerprint) > 10);
  /* "FAKEEXE1" + the fingerprint text "fake-<size>" */
  EXPECT(p.serialized_bytes ==
         8 + (int64_t)strlen("fake-") + (int64_t)snprintf(NULL, 0, "%zu", strlen(kTwoOps)));
  EXPECT(p.compile_seconds >= 0.0);
  tpurt_target_free(t);
}

TEST(Target_WhileLoopHasNoEstimate) {
  NEED_FAKE();
  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:1x1", &t));
  const char text[] = "module { \"stablehlo.while\" \"stablehlo.add\" }";
  tpurt_target_program_t p;
  tpurt_status_t s = tpurt_target_compile(t, text, strlen(text), NULL, 0, &p);
  EXPECT(s == NULL);
  tpurt_status_free(s);
  EXPECT(p.has_cost && !p.has_estimate && p.estimated_seconds == 0.0);
  EXPECT(p.flops == 2000.0);
  tpurt_target_free(t);
}

TEST(Target_RefusedProgramNamesTheTarget) {
  NEED_FAKE();
  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:2x2", &t));
  const char text[] = "module { \"stablehlo.fft\" }";
  tpurt_target_program_t p;
  tpurt_status_t s = tpurt_target_compile(t, text, strlen(text), NULL, 0, &p);
  EXPECT(tpurt_status_code(s) == TPURT_INVALID_ARGUMENT);
  EXPECT(contains(tpurt_status_message(s), "FFT is not supported"));
  EXPECT(contains(tpurt_status_message(s), "compiling for target fake:2x2 (Fake TPU)"));
  tpurt_status_free(s);
  /* explicit options bytes cross as given; empty ones are refused by the fake */
  s = tpurt_target_compile(t, kTwoOps, strlen(kTwoOps), "", 0, &p);
  EXPECT(tpurt_status_code(s) == TPURT_INVALID_ARGUMENT &&
         contains(tpurt_status_message(s), "no compile options"));
  tpurt_status_free(s);
  tpurt_target_free(t);
}

/* Shadow compilation through the cache: with the fake target set, a
** program compiled for this process's plugin is recorded once with the
** target's figures, the label in force, and a second request adds no
** record; a program the target refuses runs here anyway and its record
** holds the refusal. Needs the CPU plugin (make ctest names it). */
TEST(Shadow_RecordsEachProgramOnce) {
  NEED_FAKE();
  if (test_plugin_state() != 1) {
    printf("  skipped: needs TORCH_TPU_PJRT_PLUGIN\n");
    return;
  }
  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:1x1", &t));
  ASSERT_OK(tpurt_shadow_set_consume(t));
  EXPECT(strcmp(tpurt_lowering_platform(), "fake") == 0);
  cache_shadow_label("test::two");
  pjrt_executable_t* exe = NULL;
  bool hit = false;
  ASSERT_OK(cache_get_or_compile(kTwoOps, strlen(kTwoOps), &exe, &hit));
  pjrt_executable_t* again = NULL;
  ASSERT_OK(cache_get_or_compile(kTwoOps, strlen(kTwoOps), &again, &hit));
  EXPECT(hit);
  tpurt_shadow_record_t r[4];
  EXPECT(tpurt_shadow_records(r, 4) == 1);
  EXPECT(strcmp(r[0].label, "test::two") == 0 && r[0].error == NULL && r[0].num_partitions == 1);
  EXPECT(r[0].program.flops == 2000.0 && r[0].program.has_estimate && r[0].program.argument_bytes == 4096);

  static const char kFft[] =
      "module @f {\n"
      "  func.func public @main(%a: tensor<8xf32>) -> (tensor<5xcomplex<f32>>) {\n"
      "    %b = \"stablehlo.fft\"(%a) {fft_type = #stablehlo<fft_type RFFT>, fft_length = array<i64: 8>} : "
      "(tensor<8xf32>) -> tensor<5xcomplex<f32>>\n"
      "    \"func.return\"(%b) : (tensor<5xcomplex<f32>>) -> ()\n"
      "  }\n"
      "}\n";
  cache_shadow_label("test::fft");
  pjrt_executable_t* fft = NULL;
  ASSERT_OK(cache_get_or_compile(kFft, strlen(kFft), &fft, &hit)); /* this plugin compiles it */
  EXPECT(tpurt_shadow_records(r, 4) == 2);
  EXPECT(strcmp(r[1].label, "test::fft") == 0 && r[1].error && strstr(r[1].error, "FFT is not supported"));
  /* TORCH_TPU_TARGET_REFUSE: the same program is refused before it runs */
  setenv("TORCH_TPU_TARGET_REFUSE", "1", 1);
  tpurt_config_reload_for_test();
  pjrt_executable_t* refused = NULL;
  tpurt_status_t s = cache_get_or_compile(kFft, strlen(kFft), &refused, &hit);
  EXPECT(tpurt_status_code(s) == TPURT_FAILED_PRECONDITION && refused == NULL);
  EXPECT(strstr(tpurt_status_message(s), "refused before it runs") &&
         strstr(tpurt_status_message(s), "compiling for target fake:1x1 (Fake TPU)"));
  tpurt_status_free(s);
  pjrt_executable_t* fine = NULL;
  ASSERT_OK(cache_get_or_compile(kTwoOps, strlen(kTwoOps), &fine, &hit)); /* what it compiles still runs */
  pjrt_executable_release(fine);
  unsetenv("TORCH_TPU_TARGET_REFUSE");
  tpurt_config_reload_for_test();
  tpurt_shadow_reset();
  EXPECT(tpurt_shadow_records(r, 4) == 0);
  pjrt_executable_release(exe);
  pjrt_executable_release(again);
  pjrt_executable_release(fft);
  ASSERT_OK(tpurt_shadow_set_consume(NULL));
  EXPECT(tpurt_shadow_target() == NULL);
  /* with the target gone, programs (new and cached) compile as before */
  pjrt_executable_t* after = NULL;
  ASSERT_OK(cache_get_or_compile(kTwoOps, strlen(kTwoOps), &after, &hit));
  pjrt_executable_release(after);
  ASSERT_OK(cache_get_or_compile(kFft, strlen(kFft), &after, &hit));
  pjrt_executable_release(after);
  EXPECT(tpurt_shadow_records(r, 4) == 0);
}

/* A compile-only trace whose input is declared split over a 2x2 mesh is
** one SPMD program of 4 partitions for the target (the fake target's
** per-chip arguments are a quarter), never compiled by this plugin; the
** same trace without the split is a one-device program. */
TEST(Shadow_CompileOnlyShardedTrace) {
  NEED_FAKE();
  if (test_plugin_state() != 1) {
    printf("  skipped: needs TORCH_TPU_PJRT_PLUGIN\n");
    return;
  }
  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:2x2", &t));
  ASSERT_OK(tpurt_shadow_set_consume(t));
  const int64_t mesh_shape[2] = {2, 2};
  const int8_t split_rows[2] = {0, -1}; /* dim 0 over mesh axis 0, dim 1 whole */
  const int devices[4] = {7, 8, 9, 10}; /* not this host's: compile-only ignores them */
  const tpurt_sharding_spec_t spec = {
      .num_devices = 4, .devices = devices, .mesh_rank = 2, .mesh_shape = mesh_shape, .dim_axis = split_rows};
  tpurt_storage_t* ps = NULL;
  ASSERT_OK(tpurt_storage_create(0, 8 * 4 * 4, &ps));
  tpurt_tensor_t x = {.storage = ps, .dtype = TPURT_DTYPE_F32, .rank = 2, .sizes = {8, 4}, .strides = {4, 1}};
  tpurt_metrics_t m0, m1;
  tpurt_metrics_get(&m0);
  for (int sharded = 1; sharded >= 0; --sharded) {
    ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_INTERNAL_DEFER_ALL));
    ASSERT_OK(tpurt_trace_begin(0));
    ASSERT_OK(sharded ? tpurt_trace_input_sharded(&x, 0, &spec) : tpurt_trace_input(&x, 0));
    tpurt_arg_t args[3] = {{.kind = TPURT_ARG_TENSOR, .u.tensor = x},
                           {.kind = TPURT_ARG_TENSOR, .u.tensor = x},
                           {.kind = TPURT_ARG_SCALAR,
                            .u.scalar = {.dtype = TPURT_DTYPE_F64, .tier = TPURT_TIER_WRAPPED, .f = 1}}};
    tpurt_result_t r[1];
    tpurt_op_call_t c = {
        .name = "aten::add.Tensor", .args = args, .num_args = 3, .results = r, .max_results = 1};
    ASSERT_OK(tpurt_op_run(&c));
    tpurt_tensor_t y = {
        .storage = r[0].storage, .dtype = TPURT_DTYPE_F32, .rank = 2, .sizes = {8, 4}, .strides = {4, 1}};
    const char* before = pjrt_swap_compile_label(sharded ? "test::sharded" : "test::one");
    tpurt_trace_set_compile_only(true);
    tpurt_program_t* prog = NULL;
    tpurt_status_t s = tpurt_trace_end(&y, 1, 1, &prog);
    tpurt_trace_set_compile_only(false);
    (void)pjrt_swap_compile_label(before);
    ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_NEVER));
    tpurt_storage_release(y.storage);
    ASSERT_OK(s);
    tpurt_program_free(prog);
  }
  tpurt_metrics_get(&m1);
  EXPECT(m1.compiles == m0.compiles && m1.spmd_compiles == m0.spmd_compiles); /* not for this plugin */
  tpurt_shadow_record_t rec[4];
  ASSERT(tpurt_shadow_records(rec, 4) == 2);
  if (rec[0].error) printf("  %s\n", rec[0].error);
  EXPECT(strcmp(rec[0].label, "test::sharded") == 0 && rec[0].error == NULL && rec[0].num_partitions == 4);
  EXPECT(rec[0].program.argument_bytes == 1024); /* the fake's 4 KiB over 4 chips */
  EXPECT(strcmp(rec[1].label, "test::one") == 0 && rec[1].error == NULL && rec[1].num_partitions == 1);
  EXPECT(rec[1].program.argument_bytes == 4096);

  /* a dim the mesh axis does not divide, and a sharded input of a trace that runs, are refused */
  const int8_t split_cols_by_3[2] = {-1, 0};
  const int64_t mesh3[1] = {3};
  const tpurt_sharding_spec_t bad = {
      .num_devices = 3, .devices = devices, .mesh_rank = 1, .mesh_shape = mesh3, .dim_axis = split_cols_by_3};
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_INTERNAL_DEFER_ALL));
  ASSERT_OK(tpurt_trace_begin(0));
  tpurt_status_t s = tpurt_trace_input_sharded(&x, 0, &bad);
  EXPECT(tpurt_status_code(s) == TPURT_INVALID_ARGUMENT &&
         contains(tpurt_status_message(s), "not divisible"));
  tpurt_status_free(s);
  ASSERT_OK(tpurt_trace_input_sharded(&x, 0, &spec));
  tpurt_program_t* prog = NULL;
  s = tpurt_trace_end(&x, 1, 1, &prog);
  EXPECT(tpurt_status_code(s) == TPURT_FAILED_PRECONDITION && prog == NULL &&
         contains(tpurt_status_message(s), "only a compile-only trace"));
  tpurt_status_free(s);
  ASSERT_OK(tpurt_set_eager_mode(TPURT_MODE_DEFER_NEVER));
  tpurt_storage_release(ps);
  tpurt_shadow_reset();
  ASSERT_OK(tpurt_shadow_set_consume(NULL));
}

/* Removes the files of |dir| (flat), then |dir|. */
static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  if (d) {
    char path[1024];
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
      if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* Flips the last byte of the one .tpuexe file in |dir|; false if none. */
static bool corrupt_entry(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return false;
  bool done = false;
  for (struct dirent* e; !done && (e = readdir(d)) != NULL;) {
    const char* dot = strrchr(e->d_name, '.');
    if (!dot || strcmp(dot, ".tpuexe") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int fd = open(path, O_RDWR);
    if (fd < 0) continue;
    off_t end = lseek(fd, -1, SEEK_END);
    char c = 0;
    if (end > 0 && pread(fd, &c, 1, end) == 1) {
      c ^= 0x5a;
      done = pwrite(fd, &c, 1, end) == 1;
    }
    close(fd);
  }
  closedir(d);
  return done;
}

/* Files of |dir| whose name ends in |suffix|. */
static int count_files(const char* dir, const char* suffix) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    const char* dot = strrchr(e->d_name, '.');
    n += dot && strcmp(dot, suffix) == 0;
  }
  closedir(d);
  return n;
}

static const char kRendezvousA[] =
    "module @fake_rendezvous_a {\n"
    "  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %b = \"stablehlo.add\"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%b) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";
static const char kRendezvousB[] =
    "module @fake_rendezvous_b {\n"
    "  func.func public @main(%a: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %b = \"stablehlo.multiply\"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%b) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* Compile-only programs compile on the pool, up to
** TORCH_TPU_TARGET_COMPILE_THREADS at once: the fake compiler refuses a
** "fake_rendezvous" module that no other compile joins in time, so two that
** both compile were in flight at once. The call returns before the compile
** is done; the records are listed in the order of the calls, once per
** distinct program, and persisted (a second "process" loads both). With
** the default of one at a time, two never meet. */
TEST(Shadow_CompileOnlyProgramsCompileConcurrently) {
  NEED_FAKE();
  /* before the pool's first job: two workers, whatever the host's cores, and
  ** two target compiles at once (one by default) */
  setenv("TORCH_TPU_COMPILE_THREADS", "2", 1);
  setenv("TORCH_TPU_TARGET_COMPILE_THREADS", "2", 1);
  tpurt_config_reload_for_test();
  ASSERT(!tpurt_pool_runs_inline() && tpurt_pool_size() == 2);
  char dir[] = "/tmp/tpurt_concurrent_XXXXXX";
  ASSERT(mkdtemp(dir) != NULL);
  setenv("TORCH_TPU_CACHE_DIR", dir, 1);
  cache_reconfigure_for_test();
  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:1x1", &t));
  ASSERT_OK(tpurt_shadow_set_consume(t));
  static const char kOptions[] = "options";
  cache_shadow_label("test::a");
  ASSERT_OK(cache_shadow_compile_only(kRendezvousA, strlen(kRendezvousA), kOptions, 7, 1));
  /* the same program again while it compiles: one record, one compile */
  ASSERT_OK(cache_shadow_compile_only(kRendezvousA, strlen(kRendezvousA), kOptions, 7, 1));
  cache_shadow_label("test::b");
  ASSERT_OK(cache_shadow_compile_only(kRendezvousB, strlen(kRendezvousB), kOptions, 7, 1));
  tpurt_shadow_record_t r[4];
  ASSERT(tpurt_shadow_records(r, 4) == 2); /* waits for both */
  for (int i = 0; i < 2; ++i)
    if (r[i].error) printf("  %s\n", r[i].error);
  EXPECT(strcmp(r[0].label, "test::a") == 0 && r[0].error == NULL && !r[0].from_disk);
  EXPECT(strcmp(r[1].label, "test::b") == 0 && r[1].error == NULL && !r[1].from_disk);
  EXPECT(r[0].program.flops == 1000.0 && r[1].program.flops == 1000.0);
  EXPECT(count_files(dir, ".tpuest") == 2);

  /* the next "process" finds both on disk, compiling neither (they would wait alone) */
  tpurt_shadow_reset();
  ASSERT_OK(cache_shadow_compile_only(kRendezvousA, strlen(kRendezvousA), kOptions, 7, 1));
  ASSERT_OK(cache_shadow_compile_only(kRendezvousB, strlen(kRendezvousB), kOptions, 7, 1));
  tpurt_shadow_wait();
  ASSERT(tpurt_shadow_records(r, 4) == 2);
  EXPECT(r[0].from_disk && r[0].error == NULL && r[1].from_disk && r[1].error == NULL);
  tpurt_shadow_reset();

  /* by default the target compiles one program at a time: two that wait
  ** 0.2 s for company never meet (each is refused as compiled alone) */
  unsetenv("TORCH_TPU_TARGET_COMPILE_THREADS");
  tpurt_config_reload_for_test();
  EXPECT(tpurt_config()->target_compile_threads == 1);
  static const char kShortA[] = "module @fake_rendezvous_short_a {}\n";
  static const char kShortB[] = "module @fake_rendezvous_short_b {}\n";
  ASSERT_OK(cache_shadow_compile_only(kShortA, strlen(kShortA), kOptions, 7, 1));
  ASSERT_OK(cache_shadow_compile_only(kShortB, strlen(kShortB), kOptions, 7, 1));
  /* a child forked meanwhile does not wait for its parent's compiles (it has
  ** not their threads): its wait returns, and it exits */
  pid_t child = fork();
  ASSERT(child >= 0);
  if (child == 0) {
    alarm(5); /* a wait that hangs kills the child: the parent sees the signal */
    tpurt_shadow_wait();
    _exit(0);
  }
  int child_status = 0;
  ASSERT(waitpid(child, &child_status, 0) == child);
  EXPECT(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0);
  ASSERT(tpurt_shadow_records(r, 4) == 2);
  EXPECT(r[0].error && strstr(r[0].error, "compiled alone") && r[1].error &&
         strstr(r[1].error, "compiled alone"));
  tpurt_shadow_reset();
  ASSERT_OK(tpurt_shadow_set_consume(NULL));
  unsetenv("TORCH_TPU_CACHE_DIR");
  cache_reconfigure_for_test();
  remove_dir(dir);
}

/* Precompile: a program compiled for the target is written serialised into
** the cache directory under the key its runtime would compute, read back
** (header, key, MAC checked) and handed to the plugin's deserialize. */
TEST(Precompile_RoundTripThroughThePluginsDeserialize) {
  NEED_FAKE();
  char dir[] = "/tmp/tpurt_precompile_XXXXXX";
  ASSERT(mkdtemp(dir) != NULL);
  char cache_dir[600];
  snprintf(cache_dir, sizeof cache_dir, "%s/cache", dir);
  setenv("TORCH_TPU_CACHE_DIR", cache_dir, 1);
  cache_reconfigure_for_test();

  tpurt_target_t* t = NULL;
  ASSERT_OK(tpurt_target_create(fake_plugin(), "fake:1x1", &t));
  tpurt_target_info_t info;
  tpurt_target_info(t, &info);
  char identity[600]; /* the form of client.c's pjrt_identity */
  snprintf(identity, sizeof identity, "%s|0.81|fake|fake 1.0", fake_plugin());
  EXPECT(strcmp(info.runtime_identity, identity) == 0);
  ASSERT_OK(tpurt_shadow_set_consume(t));
  tpurt_shadow_set_precompile(true);
  static const char kOptions[] = "compile options bytes";
  const size_t text_size = strlen(kTwoOps), options_size = sizeof kOptions - 1;
  cache_shadow_label("test::precompiled");
  ASSERT_OK(cache_shadow_compile_only(kTwoOps, text_size, kOptions, options_size, 1));
  tpurt_shadow_record_t r[2];
  EXPECT(tpurt_shadow_records(r, 2) == 1);
  EXPECT(r[0].precompiled && !r[0].from_disk && r[0].error == NULL);

  char* bytes = NULL;
  size_t n = 0;
  ASSERT_OK(cache_precompiled_load(identity, kTwoOps, text_size, kOptions, options_size, &bytes, &n));
  EXPECT(n > 8 && memcmp(bytes, "FAKEEXE1", 8) == 0);
  pjrt_api_t api;
  ASSERT_OK(pjrt_api_load(fake_plugin(), &api));
  PJRT_ARGS(pjrt_abi_deserialize_and_load_args_t, d);
  d.serialized_executable = bytes;
  d.serialized_executable_size = n;
  ASSERT_OK(
      pjrt_api_call(&api, PJRTABI_EXECUTABLE_DESERIALIZE_AND_LOAD, "Executable_DeserializeAndLoad", &d));
  EXPECT(d.loaded_executable != NULL);
  PJRT_ARGS(pjrt_abi_executable_destroy_args_t, destroy);
  destroy.executable = d.loaded_executable;
  ASSERT_OK(pjrt_api_call(&api, PJRTABI_LOADED_EXECUTABLE_DESTROY, "LoadedExecutable_Destroy", &destroy));
  free(api.path);
  free(bytes);

  /* the key: another plugin identity, other options or another program find nothing */
  tpurt_status_t s = cache_precompiled_load("elsewhere|0.81|fake|fake 1.0", kTwoOps, text_size, kOptions,
                                            options_size, &bytes, &n);
  EXPECT(tpurt_status_code(s) == TPURT_NOT_FOUND && bytes == NULL);
  tpurt_status_free(s);
  s = cache_precompiled_load(identity, kTwoOps, text_size, "other", 5, &bytes, &n);
  EXPECT(tpurt_status_code(s) == TPURT_NOT_FOUND);
  tpurt_status_free(s);
  s = cache_precompiled_load(identity, kTwoOps, text_size - 2, kOptions, options_size, &bytes, &n);
  EXPECT(tpurt_status_code(s) == TPURT_NOT_FOUND);
  tpurt_status_free(s);

  /* a second process (records forgotten) compiles nothing: figures and executable are on disk */
  tpurt_shadow_reset();
  ASSERT_OK(cache_shadow_compile_only(kTwoOps, text_size, kOptions, options_size, 1));
  EXPECT(tpurt_shadow_records(r, 2) == 1);
  EXPECT(r[0].from_disk && r[0].precompiled);

  /* an altered entry fails its MAC: refused (and removed), never handed to the plugin */
  ASSERT(corrupt_entry(cache_dir));
  s = cache_precompiled_load(identity, kTwoOps, text_size, kOptions, options_size, &bytes, &n);
  EXPECT(tpurt_status_code(s) == TPURT_NOT_FOUND && strstr(tpurt_status_message(s), "refused"));
  tpurt_status_free(s);

  /* without a target a compile-only trace has nothing to compile for */
  tpurt_shadow_set_precompile(false);
  ASSERT_OK(tpurt_shadow_set_consume(NULL));
  s = cache_shadow_compile_only(kTwoOps, text_size, kOptions, options_size, 1);
  EXPECT(tpurt_status_code(s) == TPURT_FAILED_PRECONDITION &&
         strstr(tpurt_status_message(s), "needs a target"));
  tpurt_status_free(s);
  unsetenv("TORCH_TPU_CACHE_DIR");
  cache_reconfigure_for_test();
  remove_dir(cache_dir);
  remove_dir(dir);
}

TEST_MAIN(TEST_CASE(Target_Topology), TEST_CASE(Target_UnknownTopologyIsThePluginsError),
          TEST_CASE(Target_CompileReadsCostAndMemory), TEST_CASE(Target_WhileLoopHasNoEstimate),
          TEST_CASE(Target_RefusedProgramNamesTheTarget), TEST_CASE(Shadow_RecordsEachProgramOnce),
          TEST_CASE(Shadow_CompileOnlyProgramsCompileConcurrently), TEST_CASE(Shadow_CompileOnlyShardedTrace),
          TEST_CASE(Precompile_RoundTripThroughThePluginsDeserialize))
