/* target_test.c: compile-only targets (pjrt/target.c) against the fake
** plugin's topologies and compiler: the topology's facts, a compile with
** cost analysis and memory stats crossing the ABI, a program with no
** estimate, and the errors (unknown topology, refused program, no plugin). */
#include <unistd.h>

#include "../cache/cache.h"
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
  EXPECT(p.serialized_bytes == 0); /* the fake plugin cannot serialise: an optional fact */
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

TEST_MAIN(TEST_CASE(Target_Topology), TEST_CASE(Target_UnknownTopologyIsThePluginsError),
          TEST_CASE(Target_CompileReadsCostAndMemory), TEST_CASE(Target_WhileLoopHasNoEstimate),
          TEST_CASE(Target_RefusedProgramNamesTheTarget), TEST_CASE(Shadow_RecordsEachProgramOnce))
