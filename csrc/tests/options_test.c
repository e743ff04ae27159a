/* options_test.c: plugin client options (TORCH_TPU_PJRT_OPTIONS) and XLA
** compile options (TORCH_TPU_XLA_OPTIONS, per thread): parsing, typing,
** bad values, the protobuf bytes, and their effect on the real plugin. */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/base.h"
#include "../cache/cache.h"
#include "../pjrt/pjrt.h"
#include "test.h"

static const char kAddMlir[] =
    "module @m {\n"
    "  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>) {\n"
    "    %0 = stablehlo.add %a, %b : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static int contains(const char* s, const char* part) { return s && strstr(s, part) != NULL; }

/* Expects |spec| to be refused with a message containing |part|. */
static void expect_bad_client_spec(const char* spec, const char* part) {
  pjrt_client_options_t options;
  tpurt_status_t s = pjrt_client_options_parse(spec, &options);
  if (tpurt_status_code(s) != TPURT_INVALID_ARGUMENT || !contains(tpurt_status_message(s), part) ||
      !contains(tpurt_status_message(s), "TORCH_TPU_PJRT_OPTIONS")) {
    fprintf(stderr, "  '%s': expected an error with '%s', got '%s'\n", spec, part, tpurt_status_message(s));
    ++test_failures_;
  }
  EXPECT(options.count == 0 && options.items == NULL);
  tpurt_status_free(s);
}

TEST(ClientOptions_Typed) {
  pjrt_client_options_t o;
  ASSERT_OK(pjrt_client_options_parse(
      " preallocate=false, memory_fraction=0.5,count=-3,allocator=platform,tag=\"8\",on=TRUE,,", &o));
  ASSERT(o.count == 6);
  EXPECT(strcmp(o.items[0].name, "preallocate") == 0 && o.items[0].type == PJRT_OPTION_BOOL &&
         !o.items[0].bool_value);
  EXPECT(o.items[1].type == PJRT_OPTION_FLOAT && o.items[1].float_value == 0.5f);
  EXPECT(o.items[2].type == PJRT_OPTION_INT64 && o.items[2].int_value == -3);
  EXPECT(o.items[3].type == PJRT_OPTION_STRING && strcmp(o.items[3].string_value, "platform") == 0);
  EXPECT(o.items[4].type == PJRT_OPTION_STRING && strcmp(o.items[4].string_value, "8") == 0);
  EXPECT(o.items[5].type == PJRT_OPTION_BOOL && o.items[5].bool_value);
  tpurt_strbuf_t text = {0};
  pjrt_client_options_describe(&o, &text);
  EXPECT(strcmp(text.data,
                "preallocate=false (bool), memory_fraction=0.5 (float), count=-3 (int64), "
                "allocator=\"platform\" (string), tag=\"8\" (string), on=true (bool)") == 0);
  tpurt_strbuf_free(&text);
  pjrt_client_options_free(&o);

  ASSERT_OK(pjrt_client_options_parse("", &o));
  EXPECT(o.count == 0);
  ASSERT_OK(pjrt_client_options_parse(NULL, &o));
  EXPECT(o.count == 0);
}

TEST(ClientOptions_BadValues) {
  expect_bad_client_spec("preallocate", "'preallocate' is not name=value");
  expect_bad_client_spec("=3", "'' is not an option name");
  expect_bad_client_spec("a b=3", "'a b' is not an option name");
  expect_bad_client_spec("memory_fraction=", "'memory_fraction' has no value");
  expect_bad_client_spec("a=1,a=2", "'a' is given twice");
  expect_bad_client_spec("n=99999999999999999999", "out of range for an int64");
  expect_bad_client_spec("f=1e99", "out of range for a float");
  expect_bad_client_spec("f=0.5x", "'0.5x' is not a number");
  expect_bad_client_spec("s=\"open", "unterminated quote");
  expect_bad_client_spec("ok=1,bad", "'bad' is not name=value");
}

TEST(CompileOptions_Bytes) {
  char* bytes = NULL;
  size_t size = 0;
  /* No options: what every compile passed before (build options, portable). */
  ASSERT_OK(pjrt_compile_options_encode("", &bytes, &size));
  static const char kBase[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};
  EXPECT(size == sizeof(kBase) && memcmp(bytes, kBase, size) == 0);
  free(bytes);

  /* One override: field 7 {1: key, 2: {1: string}}, hand-encoded. */
  ASSERT_OK(pjrt_compile_options_encode("--xla_dump_to=/tmp/x", &bytes, &size));
  static const char kEntry[] = {0x3a, 0x17, 0x0a, 0x0b, 'x',  'l',  'a', '_', 'd', 'u', 'm', 'p', '_',
                                't',  'o',  0x12, 0x08, 0x0a, 0x06, '/', 't', 'm', 'p', '/', 'x'};
  ASSERT(size == sizeof(kBase) + sizeof(kEntry));
  EXPECT(memcmp(bytes, kBase, sizeof(kBase)) == 0 &&
         memcmp(bytes + sizeof(kBase), kEntry, sizeof(kEntry)) == 0);
  free(bytes);

  /* Order-free (sorted), last value wins, booleans spelled as XLA wants. */
  char *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  ASSERT_OK(pjrt_compile_options_encode("b=1 a=true b=2", &a, &na));
  ASSERT_OK(pjrt_compile_options_encode("  a=True\tb=2 ", &b, &nb));
  EXPECT(na == nb && memcmp(a, b, na) == 0);
  free(a);
  free(b);

  EXPECT_STATUS(pjrt_compile_options_encode("xla_dump_to", &bytes, &size), TPURT_INVALID_ARGUMENT);
  EXPECT_STATUS(pjrt_compile_options_encode("xla_dump_to=", &bytes, &size), TPURT_INVALID_ARGUMENT);
  EXPECT_STATUS(pjrt_compile_options_encode("=1", &bytes, &size), TPURT_INVALID_ARGUMENT);
  EXPECT(bytes == NULL && size == 0);
}

static size_t count_files(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  size_t n = 0;
  for (struct dirent* e; (e = readdir(d));)
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

static void remove_tree(const char* dir) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", dir);
}

TEST(CompileOptions_ReachXla) {
  ASSERT_OK(tpurt_runtime_init());
  char dir[] = "/tmp/tpurt_dump_XXXXXX";
  ASSERT(mkdtemp(dir) != NULL);
  char spec[128];
  snprintf(spec, sizeof(spec), "xla_dump_to=%s xla_dump_hlo_as_text=true", dir);
  const char *before = NULL, *text = NULL;
  size_t before_size = 0, size = 0;
  ASSERT_OK(pjrt_current_compile_options(&before, &before_size, NULL));
  ASSERT_OK(tpurt_set_thread_compile_options(spec));
  ASSERT_OK(pjrt_current_compile_options(&before, &size, &text));
  EXPECT(size > before_size && contains(text, "xla_dump_hlo_as_text=True"));
  pjrt_executable_t* exe = NULL;
  tpurt_status_t s = pjrt_compile(kAddMlir, strlen(kAddMlir), &exe);
  EXPECT(s == NULL);
  tpurt_status_free(s);
  pjrt_executable_release(exe);
  /* XLA wrote the module there: the option reached the compiler. */
  EXPECT(count_files(dir) > 0);

  /* An unknown name is XLA's error, which names it. */
  ASSERT_OK(tpurt_set_thread_compile_options("xla_no_such_flag_anywhere=1"));
  exe = NULL;
  s = pjrt_compile(kAddMlir, strlen(kAddMlir), &exe);
  EXPECT(s != NULL && contains(tpurt_status_message(s), "xla_no_such_flag_anywhere"));
  if (s) printf("  unknown option: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  EXPECT(exe == NULL);

  /* A malformed spec changes nothing; NULL returns to the process options. */
  EXPECT_STATUS(tpurt_set_thread_compile_options("no_equals_sign"), TPURT_INVALID_ARGUMENT);
  ASSERT_OK(pjrt_current_compile_options(&before, &size, &text));
  EXPECT(contains(text, "xla_no_such_flag_anywhere=1"));
  ASSERT_OK(tpurt_set_thread_compile_options(NULL));
  ASSERT_OK(pjrt_current_compile_options(&before, &size, &text));
  EXPECT(size == before_size && strcmp(text, "") == 0);
  remove_tree(dir);
}

TEST(CompileOptions_CacheKey) {
  ASSERT_OK(tpurt_runtime_init());
  pjrt_executable_t *plain = NULL, *again = NULL, *fast = NULL, *fast_again = NULL;
  bool hit = false;
  ASSERT_OK(cache_get_or_compile(kAddMlir, strlen(kAddMlir), &plain, &hit));
  ASSERT_OK(cache_get_or_compile(kAddMlir, strlen(kAddMlir), &again, &hit));
  EXPECT(hit && again == plain);
  /* The same text under other options is another program. */
  ASSERT_OK(tpurt_set_thread_compile_options("xla_cpu_enable_fast_math=true"));
  ASSERT_OK(cache_get_or_compile(kAddMlir, strlen(kAddMlir), &fast, &hit));
  EXPECT(!hit && fast != plain);
  ASSERT_OK(cache_get_or_compile(kAddMlir, strlen(kAddMlir), &fast_again, &hit));
  EXPECT(hit && fast_again == fast);
  ASSERT_OK(tpurt_set_thread_compile_options(NULL));
  pjrt_executable_release(plain);
  pjrt_executable_release(again);
  pjrt_executable_release(fast);
  pjrt_executable_release(fast_again);

  /* A compile error under options lists them. */
  ASSERT_OK(tpurt_set_thread_compile_options("xla_not_an_option=3"));
  pjrt_executable_t* exe = NULL;
  tpurt_status_t s = cache_get_or_compile(kAddMlir, strlen(kAddMlir), &exe, &hit);
  EXPECT(s && contains(tpurt_status_message(s), "'xla_not_an_option'") &&
         contains(tpurt_status_message(s), "(XLA compile options: xla_not_an_option=3)"));
  tpurt_status_free(s);
  ASSERT_OK(tpurt_set_thread_compile_options(NULL));
}

/*===--- client options in a fresh process each ---===*/

static void expect_child(int (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) _exit(fn());
  int status = 0;
  ASSERT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The CPU plugin's own option, passed through TORCH_TPU_PJRT_OPTIONS. */
static int device_count_option_child(void) {
  setenv("TORCH_TPU_PJRT_OPTIONS", "cpu_device_count=3", 1);
  tpurt_config_reload_for_test(); /* the core reads the environment once */
  tpurt_status_t s = tpurt_runtime_init();
  int ok = s == NULL && tpurt_device_count() == 3;
  if (!ok) fprintf(stderr, "  child: %s (%d devices)\n", tpurt_status_message(s), tpurt_device_count());
  tpurt_status_free(s);
  return ok ? 0 : 1;
}

/* The fake plugin (build/tests/fake_pjrt_plugin.so) validates names and
** types as the CUDA plugin does and reports what it received. */
static const char* fake_plugin(void) {
  const char* path = getenv("TPURT_FAKE_PLUGIN");
  return path && *path && access(path, R_OK) == 0 ? path : NULL;
}

/* Each type crosses the ABI as itself. */
static int fake_typed_child(void) {
  setenv("TORCH_TPU_PJRT_PLUGIN", fake_plugin(), 1);
  setenv("TORCH_TPU_PJRT_OPTIONS", "preallocate=false, memory_fraction=0.5,allocator=platform,node_id=2", 1);
  tpurt_config_reload_for_test(); /* the core reads the environment once */
  tpurt_status_t s = tpurt_runtime_init();
  const char* m = tpurt_status_message(s);
  int ok = tpurt_status_code(s) == TPURT_UNIMPLEMENTED &&
           contains(m,
                    "got preallocate:bool=false memory_fraction:float=0.5 allocator:string=platform "
                    "node_id:int64=2");
  if (!ok) fprintf(stderr, "  child: %s\n", m);
  tpurt_status_free(s);
  return ok ? 0 : 1;
}

/* A name the plugin refuses: its error, and the list of what we passed. */
static int fake_unknown_child(void) {
  setenv("TORCH_TPU_PJRT_PLUGIN", fake_plugin(), 1);
  setenv("TORCH_TPU_PJRT_OPTIONS", "preallocate=true,no_such_option=1", 1);
  tpurt_config_reload_for_test(); /* the core reads the environment once */
  tpurt_status_t s = tpurt_runtime_init();
  const char* m = tpurt_status_message(s);
  int ok = tpurt_status_code(s) == TPURT_INVALID_ARGUMENT && contains(m, "creating the PJRT client") &&
           contains(m, "fake plugin: unexpected option name 'no_such_option'") &&
           contains(m, "(TORCH_TPU_PJRT_OPTIONS passed: preallocate=true (bool), no_such_option=1 (int64))");
  printf("  refused: %s\n", m);
  fflush(stdout);
  if (!ok) fprintf(stderr, "  child: %s\n", m);
  tpurt_status_free(s);
  return ok ? 0 : 1;
}

/* memory_fraction=1 is an int64, which a float option refuses. */
static int fake_wrong_type_child(void) {
  setenv("TORCH_TPU_PJRT_PLUGIN", fake_plugin(), 1);
  setenv("TORCH_TPU_PJRT_OPTIONS", "memory_fraction=1", 1);
  tpurt_config_reload_for_test(); /* the core reads the environment once */
  tpurt_status_t s = tpurt_runtime_init();
  const char* m = tpurt_status_message(s);
  int ok = tpurt_status_code(s) == TPURT_INVALID_ARGUMENT &&
           contains(m, "option 'memory_fraction' has type int64, expected float") &&
           contains(m, "memory_fraction=1 (int64)");
  if (!ok) fprintf(stderr, "  child: %s\n", m);
  tpurt_status_free(s);
  return ok ? 0 : 1;
}

static void expect_fake_child(int (*fn)(void)) {
  if (!fake_plugin()) {
    printf("  skipped: TPURT_FAKE_PLUGIN is not set (make ctest sets it)\n");
    return;
  }
  expect_child(fn);
}

TEST(ClientOptions_Typed_Abi) { expect_fake_child(fake_typed_child); }
TEST(ClientOptions_Refused) { expect_fake_child(fake_unknown_child); }
TEST(ClientOptions_WrongType) { expect_fake_child(fake_wrong_type_child); }

static int malformed_option_child(void) {
  setenv("TORCH_TPU_PJRT_OPTIONS", "memory_fraction", 1);
  tpurt_config_reload_for_test(); /* the core reads the environment once */
  tpurt_status_t s = tpurt_runtime_init();
  int ok = tpurt_status_code(s) == TPURT_INVALID_ARGUMENT &&
           contains(tpurt_status_message(s), "TORCH_TPU_PJRT_OPTIONS: 'memory_fraction' is not name=value");
  if (!ok) fprintf(stderr, "  child: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  return ok ? 0 : 1;
}

/* A malformed TORCH_TPU_XLA_OPTIONS fails every compile, naming it. */
static int malformed_xla_options_child(void) {
  setenv("TORCH_TPU_XLA_OPTIONS", "xla_dump_to", 1);
  tpurt_config_reload_for_test(); /* the core reads the environment once */
  pjrt_executable_t* exe = NULL;
  tpurt_status_t s = pjrt_compile(kAddMlir, strlen(kAddMlir), &exe);
  int ok = tpurt_status_code(s) == TPURT_INVALID_ARGUMENT &&
           contains(tpurt_status_message(s), "TORCH_TPU_XLA_OPTIONS: 'xla_dump_to' is not name=value");
  if (!ok) fprintf(stderr, "  child: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  return ok ? 0 : 1;
}

TEST(ClientOptions_DeviceCount) { expect_child(device_count_option_child); }
TEST(ClientOptions_Malformed) { expect_child(malformed_option_child); }
TEST(CompileOptions_MalformedEnv) { expect_child(malformed_xla_options_child); }

TEST_MAIN(TEST_CASE(ClientOptions_Typed), TEST_CASE(ClientOptions_BadValues), TEST_CASE(CompileOptions_Bytes),
          TEST_CASE(ClientOptions_DeviceCount), TEST_CASE(ClientOptions_Typed_Abi),
          TEST_CASE(ClientOptions_Refused), TEST_CASE(ClientOptions_WrongType),
          TEST_CASE(ClientOptions_Malformed), TEST_CASE(CompileOptions_MalformedEnv),
          TEST_CASE(CompileOptions_ReachXla), TEST_CASE(CompileOptions_CacheKey))
