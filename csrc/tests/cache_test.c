/* cache_test.c: the executable cache: tier 2 round trips through a
** temporary directory, entries that must not be trusted (corrupt,
** truncated, foreign, another format version), directories that must be
** refused, concurrent writers, LRU eviction under a tiny byte budget while
** plans keep running, and module dumps. Against the real plugin. */
#include "../cache/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../cache/cache_internal.h"
#include "test.h"

extern char** environ;

/* out = a OP b on tensor<4xf32>, as a module text. */
static char* binary_module(const char* op, int variant) {
  static char text[1024];
  snprintf(text, sizeof(text),
           "module @m%d {\n"
           "  func.func public @main(%%a: tensor<4xf32>, %%b: tensor<4xf32>) -> (tensor<4xf32>) {\n"
           "    %%0 = stablehlo.%s %%a, %%b : tensor<4xf32>\n"
           "    return %%0 : tensor<4xf32>\n"
           "  }\n"
           "}\n",
           variant, op);
  return text;
}

/* Runs |exe| on [1,2,3,4] and [10,20,30,40]; the four outputs in |got|. */
static TPURT_MUST_USE tpurt_status_t run_binary(pjrt_executable_t* exe, float got[4]) {
  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  const int64_t dims[1] = {4};
  pjrt_buffer_t* args[2] = {NULL, NULL};
  pjrt_buffer_t* out = NULL;
  tpurt_status_t s = pjrt_buffer_from_host(0, TPURT_DTYPE_F32, 1, dims, a, &args[0]);
  if (!s) s = pjrt_buffer_from_host(0, TPURT_DTYPE_F32, 1, dims, b, &args[1]);
  if (!s) s = pjrt_execute(exe, 0, args, 2, &out, 1, "test::binary");
  if (!s) s = pjrt_buffer_to_host(out, got, 4 * sizeof(float));
  pjrt_buffer_release(args[0]);
  pjrt_buffer_release(args[1]);
  pjrt_buffer_release(out);
  return s;
}

static bool is_add(const float got[4]) {
  return got[0] == 11 && got[1] == 22 && got[2] == 33 && got[3] == 44;
}
static bool is_sub(const float got[4]) {
  return got[0] == -9 && got[1] == -18 && got[2] == -27 && got[3] == -36;
}
static bool is_mul(const float got[4]) {
  return got[0] == 10 && got[1] == 40 && got[2] == 90 && got[3] == 160;
}
static bool is_max(const float got[4]) {
  return got[0] == 10 && got[1] == 20 && got[2] == 30 && got[3] == 40;
}

/*===--- a scratch directory per test ---===*/

static char g_root[256]; /* mkdtemp'd; the cache directory is g_root/cache */
static char g_dir[300];

static void rm_rf(const char* path) {
  DIR* d = opendir(path);
  if (d) {
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char child[1024];
      snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
      rm_rf(child);
    }
    closedir(d);
    chmod(path, 0700);
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* A fresh cache directory (not yet created) and a cache that reads the
** environment again, with an empty tier 1. */
static void fresh_cache(const char* memory_bytes) {
  if (g_root[0]) rm_rf(g_root);
  snprintf(g_root, sizeof(g_root), "/tmp/tpurt_cache_test.XXXXXX");
  if (!mkdtemp(g_root)) abort();
  snprintf(g_dir, sizeof(g_dir), "%s/cache", g_root);
  setenv("TORCH_TPU_CACHE_DIR", g_dir, 1);
  if (memory_bytes)
    setenv("TORCH_TPU_CACHE_MEMORY_BYTES", memory_bytes, 1);
  else
    unsetenv("TORCH_TPU_CACHE_MEMORY_BYTES");
  unsetenv("TORCH_TPU_DUMP_DIR");
  cache_reconfigure_for_test();
}

/* Number of files in |dir| whose names end with |suffix| ("" for all);
** the first one's path in |first| if given. */
static int count_files(const char* dir, const char* suffix, char* first, size_t first_size) {
  DIR* d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name), sl = strlen(suffix);
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (len < sl || strcmp(e->d_name + len - sl, suffix) != 0) continue;
    if (n++ == 0 && first) snprintf(first, first_size, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  return n;
}

static char* read_file(const char* path, size_t* out_size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* data = malloc((size_t)n + 1);
  *out_size = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

static void write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) abort();
  if (size) fwrite(data, 1, size, f);
  fclose(f);
}

/* Runs stderr into a file between capture_begin and capture_end, which
** returns what was written (caller frees). */
static int g_saved_stderr = -1;
static char g_capture_path[300];
static void capture_begin(void) {
  fflush(stderr);
  snprintf(g_capture_path, sizeof(g_capture_path), "%s/stderr.txt", g_root);
  int fd = open(g_capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  g_saved_stderr = dup(2);
  dup2(fd, 2);
  close(fd);
}
static char* capture_end(void) {
  fflush(stderr);
  dup2(g_saved_stderr, 2);
  close(g_saved_stderr);
  size_t n = 0;
  char* text = read_file(g_capture_path, &n);
  if (text) text[n] = '\0';
  unlink(g_capture_path);
  return text;
}

static int count_occurrences(const char* s, const char* part) {
  int n = 0;
  for (const char* p = s; p && (p = strstr(p, part)) != NULL; p += strlen(part)) ++n;
  return n;
}

/* Asks the cache for |text|: expects a hit from |tier| ("memory", "disk")
** or, with NULL, a compile; checks the program computes like |check|. */
static void expect_get(const char* text, const char* tier, bool (*check)(const float*), int line) {
  tpurt_metrics_t before, after;
  tpurt_metrics_get(&before);
  pjrt_executable_t* exe = NULL;
  bool hit = false;
  tpurt_status_t s = cache_get_or_compile(text, strlen(text), &exe, &hit);
  tpurt_metrics_get(&after);
  if (s) {
    fprintf(stderr, "  line %d: %s\n", line, tpurt_status_message(s));
    tpurt_status_free(s);
    ++test_failures_;
    return;
  }
  bool want_memory = tier && strcmp(tier, "memory") == 0, want_disk = tier && strcmp(tier, "disk") == 0;
  bool ok = hit == (tier != NULL) && after.compiles - before.compiles == (tier ? 0u : 1u) &&
            after.cache_hits_memory - before.cache_hits_memory == (want_memory ? 1u : 0u) &&
            after.cache_hits_disk - before.cache_hits_disk == (want_disk ? 1u : 0u);
  if (!ok) {
    fprintf(stderr, "  line %d: expected %s; hit=%d compiles+%llu memory+%llu disk+%llu\n", line,
            tier ? tier : "a compile", hit, (unsigned long long)(after.compiles - before.compiles),
            (unsigned long long)(after.cache_hits_memory - before.cache_hits_memory),
            (unsigned long long)(after.cache_hits_disk - before.cache_hits_disk));
    ++test_failures_;
  }
  float got[4] = {0};
  s = run_binary(exe, got);
  if (s || !check(got)) {
    fprintf(stderr, "  line %d: the program computes wrong: %s\n", line, tpurt_status_message(s));
    ++test_failures_;
  }
  tpurt_status_free(s);
  tpurt_status_ignore(pjrt_synchronize(-1));
  pjrt_executable_release(exe);
}
#define EXPECT_GET(text, tier, check) expect_get(text, tier, check, __LINE__)

/*===--- tests ---===*/

TEST(Cache_DiskRoundTrip) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache(NULL);
  const char* add = binary_module("add", 1);
  tpurt_metrics_t m0, m1;
  tpurt_metrics_get(&m0);
  EXPECT_GET(add, NULL, is_add);
  tpurt_metrics_get(&m1);
  EXPECT(m1.cache_disk_writes == m0.cache_disk_writes + 1);
  EXPECT(m1.cache_entries >= 1 && m1.cache_bytes_memory > 0);
  EXPECT_GET(add, "memory", is_add);

  /* private directory, private entry, no temporary files left */
  struct stat st;
  ASSERT(stat(g_dir, &st) == 0);
  EXPECT((st.st_mode & 0777) == 0700);
  char entry[1024];
  EXPECT(count_files(g_dir, ".tpuexe", entry, sizeof(entry)) == 1);
  EXPECT(count_files(g_dir, "", NULL, 0) == 2); /* the entry and the cache's MAC key */
  ASSERT(stat(entry, &st) == 0);
  EXPECT((st.st_mode & 0077) == 0);
  char key[1100];
  snprintf(key, sizeof(key), "%s/mac.key", g_dir);
  struct stat key_st;
  ASSERT(stat(key, &key_st) == 0);
  EXPECT((key_st.st_mode & 0777) == 0600 && key_st.st_size == 32);

  /* a new process, as far as the cache can tell: tier 1 empty */
  cache_reset_memory_for_test();
  tpurt_metrics_get(&m0);
  EXPECT(m0.cache_entries == 0 && m0.cache_bytes_memory == 0);
  EXPECT_GET(add, "disk", is_add);
  EXPECT_GET(add, "memory", is_add);

  tpurt_cache_info_t info;
  tpurt_cache_info(&info);
  EXPECT(strcmp(info.dir, g_dir) == 0);
  EXPECT(info.disk_enabled && info.refused[0] == '\0');
  EXPECT(info.disk_entries == 1 && info.disk_bytes == (uint64_t)st.st_size);
  EXPECT(info.memory_entries == 1 && info.memory_limit_bytes == (1ull << 30));
}

/* Rewrites the one entry of |text| with |mutate|, then expects a warning, a
** recompile that computes right, and a good entry written back. */
static void expect_rejected(const char* text, bool (*check)(const float*), void (*mutate)(char*, size_t*),
                            const char* reason, int line) {
  char entry[1024];
  if (count_files(g_dir, ".tpuexe", entry, sizeof(entry)) != 1) {
    fprintf(stderr, "  line %d: expected one entry\n", line);
    ++test_failures_;
    return;
  }
  size_t size = 0;
  char* data = read_file(entry, &size);
  char* good = malloc(size);
  memcpy(good, data, size);
  size_t good_size = size;
  mutate(data, &size);
  write_file(entry, data, size);
  free(data);
  cache_reconfigure_for_test(); /* a fresh process: it warns again */
  tpurt_metrics_t m0, m1;
  tpurt_metrics_get(&m0);
  capture_begin();
  expect_get(text, NULL, check, line);
  char* err = capture_end();
  tpurt_metrics_get(&m1);
  if (m1.cache_disk_rejects != m0.cache_disk_rejects + 1 || count_occurrences(err, "ignoring") != 1 ||
      !strstr(err, reason)) {
    fprintf(stderr, "  line %d: expected one warning saying '%s', got: %s\n", line, reason, err);
    ++test_failures_;
  }
  free(err);
  /* rewritten whole: the same bytes as before (serialisation is stable) */
  size_t now_size = 0;
  char* now = read_file(entry, &now_size);
  if (!now || now_size != good_size) {
    fprintf(stderr, "  line %d: the entry was not rewritten (%zu bytes, %zu before)\n", line, now_size,
            good_size);
    ++test_failures_;
  }
  free(now);
  free(good);
  cache_reset_memory_for_test();
  expect_get(text, "disk", check, line);
}

static void flip_payload(char* d, size_t* n) { d[*n - 7] ^= 0x5a; }
static void flip_header(char* d, size_t* n) {
  (void)n;
  d[20] ^= 0x01; /* inside the key hash */
}
static void truncate_half(char* d, size_t* n) {
  (void)d;
  *n = 64 + (*n - 64) / 2;
}
static void truncate_short(char* d, size_t* n) {
  (void)d;
  *n = 10;
}
static void truncate_empty(char* d, size_t* n) {
  (void)d;
  *n = 0;
}
static void other_version(char* d, size_t* n) {
  (void)n;
  uint32_t v = 99;
  memcpy(d + 8, &v, 4);
}
static void bad_magic(char* d, size_t* n) {
  (void)n;
  memcpy(d, "NOTACACH", 8);
}
static void trailing_bytes(char* d, size_t* n) {
  (void)d;
  *n -= 3; /* the header promises 3 more payload bytes than are there */
}

TEST(Cache_UntrustedEntriesAreRecompiled) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache(NULL);
  const char* sub = binary_module("subtract", 2);
  EXPECT_GET(sub, NULL, is_sub);
  expect_rejected(sub, is_sub, flip_payload, "its MAC does not check", __LINE__);
  expect_rejected(sub, is_sub, flip_header, "corrupt header", __LINE__);
  expect_rejected(sub, is_sub, truncate_half, "truncated", __LINE__);
  expect_rejected(sub, is_sub, truncate_short, "truncated", __LINE__);
  expect_rejected(sub, is_sub, truncate_empty, "truncated", __LINE__);
  expect_rejected(sub, is_sub, other_version, "format version 99", __LINE__);
  expect_rejected(sub, is_sub, bad_magic, "not a torch_tpu cache entry", __LINE__);
  expect_rejected(sub, is_sub, trailing_bytes, "truncated", __LINE__);
}

TEST(Cache_ForeignEntryIsIgnored) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache(NULL);
  /* add's entry, then mul's; then add's bytes under mul's name */
  const char* add = binary_module("add", 3);
  EXPECT_GET(add, NULL, is_add);
  char add_entry[1024], mul_entry[1024];
  ASSERT(count_files(g_dir, ".tpuexe", add_entry, sizeof(add_entry)) == 1);
  size_t add_size = 0;
  char* add_bytes = read_file(add_entry, &add_size);
  ASSERT(unlink(add_entry) == 0);
  const char* mul = binary_module("multiply", 3);
  EXPECT_GET(mul, NULL, is_mul);
  ASSERT(count_files(g_dir, ".tpuexe", mul_entry, sizeof(mul_entry)) == 1);
  write_file(mul_entry, add_bytes, add_size);
  free(add_bytes);

  cache_reset_memory_for_test();
  capture_begin();
  EXPECT_GET(mul, NULL, is_mul); /* never add's program */
  char* err = capture_end();
  EXPECT(count_occurrences(err, "foreign") == 1);
  free(err);
  cache_reset_memory_for_test();
  EXPECT_GET(mul, "disk", is_mul);
}

TEST(Cache_WarnsOncePerEntry) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache(NULL);
  const char* add = binary_module("add", 4);
  char entry[1024];
  EXPECT_GET(add, NULL, is_add);
  ASSERT(count_files(g_dir, ".tpuexe", entry, sizeof(entry)) == 1);
  capture_begin();
  for (int i = 0; i < 3; ++i) {
    write_file(entry, "garbage", 7);
    cache_reset_memory_for_test();
    EXPECT_GET(add, NULL, is_add);
  }
  char* err = capture_end();
  EXPECT(count_occurrences(err, "ignoring") == 1);
  free(err);
}

static void expect_refused(unsigned mode, const char* reason) {
  fresh_cache(NULL);
  ASSERT(mkdir(g_dir, 0700) == 0);
  ASSERT(chmod(g_dir, mode) == 0);
  cache_reconfigure_for_test();
  capture_begin();
  const char* add = binary_module("add", 5);
  EXPECT_GET(add, NULL, is_add);
  cache_reset_memory_for_test();
  EXPECT_GET(add, NULL, is_add); /* nothing on disk to hit */
  tpurt_cache_info_t info;
  tpurt_cache_info(&info);
  char* err = capture_end();
  EXPECT(count_occurrences(err, "is not used") == 1);
  EXPECT(strstr(err, reason) != NULL);
  EXPECT(strstr(err, "code that will be executed") != NULL);
  free(err);
  EXPECT(!info.disk_enabled && strstr(info.refused, reason) != NULL);
  EXPECT(strcmp(info.dir, g_dir) == 0);
  EXPECT(count_files(g_dir, "", NULL, 0) == 0);
}

TEST(Cache_WritableByOthersIsRefused) {
  ASSERT_OK(tpurt_runtime_init());
  expect_refused(0777, "writable by group and others (mode 0777)");
  expect_refused(0770, "writable by its group");
  expect_refused(0703, "writable by others");
}

TEST(Cache_DisabledAndDefaults) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache("2M");
  setenv("TORCH_TPU_CACHE_DIR", "0", 1);
  cache_reconfigure_for_test();
  tpurt_cache_info_t info;
  tpurt_cache_info(&info);
  EXPECT(!info.disk_enabled && strstr(info.refused, "TORCH_TPU_CACHE_DIR=0"));
  EXPECT(info.memory_limit_bytes == 2u << 20);
  const char* add = binary_module("add", 6);
  EXPECT_GET(add, NULL, is_add);
  cache_reset_memory_for_test();
  EXPECT_GET(add, NULL, is_add);

  /* the default directory: $XDG_CACHE_HOME/torch_tpu */
  char xdg[300];
  snprintf(xdg, sizeof(xdg), "%s/xdg", g_root);
  unsetenv("TORCH_TPU_CACHE_DIR");
  char* old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  setenv("XDG_CACHE_HOME", xdg, 1);
  setenv("TORCH_TPU_CACHE_MEMORY_BYTES", "lots", 1);
  cache_reconfigure_for_test();
  tpurt_cache_info(&info);
  char want[400];
  snprintf(want, sizeof(want), "%s/torch_tpu", xdg);
  EXPECT(info.disk_enabled && strcmp(info.dir, want) == 0);
  /* a bad value reads as the default, and the first use of the device says why */
  EXPECT(info.memory_limit_bytes == 1u << 30);
  tpurt_status_t bad = tpurt_config_check();
  EXPECT(bad &&
         strstr(tpurt_status_message(bad), "TORCH_TPU_CACHE_MEMORY_BYTES='lots' is not valid") != NULL);
  EXPECT(tpurt_status_code(bad) == TPURT_INVALID_ARGUMENT);
  tpurt_status_free(bad);
  unsetenv("TORCH_TPU_CACHE_MEMORY_BYTES");
  cache_reconfigure_for_test();
  if (old_xdg) {
    setenv("XDG_CACHE_HOME", old_xdg, 1);
    free(old_xdg);
  } else {
    unsetenv("XDG_CACHE_HOME");
  }
}

/* Tier 1 under a budget smaller than any program: every insert evicts the
** one before, yet executables held elsewhere (by a test, by engine plans)
** keep running. ASan would catch a program freed under its holder. */
static tpurt_tensor_t upload4(const float v[4]) {
  tpurt_storage_t* s = NULL;
  if (tpurt_storage_create(0, 16, &s)) abort();
  tpurt_tensor_t t = {.storage = s, .dtype = TPURT_DTYPE_F32, .rank = 1, .sizes = {4}, .strides = {1}};
  if (tpurt_tensor_write_host(&t, v, 16)) abort();
  return t;
}

static void run_op(const char* name, tpurt_tensor_t a, tpurt_tensor_t b, bool has_alpha, float want[4]) {
  tpurt_arg_t args[3] = {
      {.kind = TPURT_ARG_TENSOR, .u.tensor = a},
      {.kind = TPURT_ARG_TENSOR, .u.tensor = b},
      {.kind = TPURT_ARG_SCALAR, .u.scalar = {.dtype = TPURT_DTYPE_I64, .tier = TPURT_TIER_WRAPPED, .i = 1}}};
  tpurt_result_t results[4];
  tpurt_op_call_t call = {
      .name = name, .args = args, .num_args = has_alpha ? 3 : 2, .results = results, .max_results = 4};
  ASSERT_OK(tpurt_op_run(&call));
  ASSERT(call.num_results == 1);
  tpurt_tensor_t r = {
      .storage = results[0].storage, .dtype = TPURT_DTYPE_F32, .rank = 1, .sizes = {4}, .strides = {1}};
  float got[4] = {0};
  ASSERT_OK(tpurt_tensor_read_host(&r, got, sizeof(got)));
  tpurt_storage_release(r.storage);
  for (int i = 0; i < 4; ++i) EXPECT(got[i] == want[i]);
}

TEST(Cache_LruEvictionKeepsHoldersValid) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache("1");
  setenv("TORCH_TPU_CACHE_DIR", "0", 1);
  cache_reconfigure_for_test();
  pjrt_executable_t* held[3] = {NULL, NULL, NULL};
  const char* ops[3] = {"add", "subtract", "multiply"};
  bool (*checks[3])(const float*) = {is_add, is_sub, is_mul};
  for (int i = 0; i < 3; ++i) {
    bool hit = true;
    const char* text = binary_module(ops[i], 7);
    ASSERT_OK(cache_get_or_compile(text, strlen(text), &held[i], &hit));
    EXPECT(!hit);
    tpurt_metrics_t m;
    tpurt_metrics_get(&m);
    EXPECT(m.cache_entries == 1); /* the newest only */
  }
  for (int i = 0; i < 3; ++i) {
    float got[4] = {0};
    ASSERT_OK(run_binary(held[i], got));
    EXPECT(checks[i](got));
  }
  ASSERT_OK(pjrt_synchronize(-1));
  for (int i = 0; i < 3; ++i) pjrt_executable_release(held[i]);
  EXPECT_GET(binary_module("add", 7), NULL, is_add); /* evicted: compiled again */

  /* engine plans hold their programs through eviction */
  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  tpurt_tensor_t ta = upload4(a), tb = upload4(b);
  float add[4] = {11, 22, 33, 44}, sub[4] = {-9, -18, -27, -36}, mul[4] = {10, 40, 90, 160};
  for (int round = 0; round < 3; ++round) {
    run_op("aten::add.Tensor", ta, tb, true, add);
    run_op("aten::sub.Tensor", ta, tb, true, sub);
    run_op("aten::mul.Tensor", ta, tb, false, mul);
    cache_reset_memory_for_test();
  }
  ASSERT_OK(tpurt_synchronize(-1));
  tpurt_storage_release(ta.storage);
  tpurt_storage_release(tb.storage);
}

/* The fused engine's path: a program found again by its encoding is not
** printed again; other compile options or an empty memory tier print. */
typedef struct counted_print_s {
  const char* text;
  int calls;
} counted_print_t;

static TPURT_MUST_USE tpurt_status_t print_counted(void* ctx, char** out_text, size_t* out_size) {
  counted_print_t* p = ctx;
  p->calls++;
  *out_text = tpurt_xstrdup(p->text);
  *out_size = strlen(p->text);
  return NULL;
}

static void get_encoded(const char* encoding, counted_print_t* print, bool expect_hit) {
  pjrt_executable_t* exe = NULL;
  bool hit = !expect_hit;
  ASSERT_OK(cache_get_or_compile_encoded(encoding, strlen(encoding), print_counted, print, &exe, &hit));
  EXPECT(hit == expect_hit);
  float got[4] = {0};
  ASSERT_OK(run_binary(exe, got));
  EXPECT(is_add(got));
  pjrt_executable_release(exe);
}

TEST(Cache_EncodedSkipsThePrinter) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache(NULL);
  counted_print_t print = {binary_module("add", 11), 0};
  cache_stats_t s0, s1;
  cache_stats(&s0);
  get_encoded("graph-1", &print, false); /* compiled */
  EXPECT(print.calls == 1);
  get_encoded("graph-1", &print, true); /* by its encoding */
  get_encoded("graph-1", &print, true);
  EXPECT(print.calls == 1);
  cache_stats(&s1);
  EXPECT(s1.hits_alias == s0.hits_alias + 2);

  /* other options: another key, printed (the text itself is in memory under
  ** the old options only, so it compiles) */
  ASSERT_OK(tpurt_set_thread_compile_options("xla_cpu_enable_fast_math=false"));
  get_encoded("graph-1", &print, false);
  EXPECT(print.calls == 2);
  get_encoded("graph-1", &print, true);
  EXPECT(print.calls == 2);
  ASSERT_OK(tpurt_set_thread_compile_options(NULL));

  /* a new process as far as tier 1 can tell: printed once, from disk */
  cache_reset_memory_for_test();
  get_encoded("graph-1", &print, true);
  EXPECT(print.calls == 3);
  get_encoded("graph-1", &print, true);
  EXPECT(print.calls == 3);
}

TEST(Cache_DumpDir) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache(NULL);
  char dump[300];
  snprintf(dump, sizeof(dump), "%s/dump/nested", g_root);
  setenv("TORCH_TPU_DUMP_DIR", dump, 1);
  cache_reconfigure_for_test(); /* the environment is read once */
  const char* text = binary_module("maximum", 8);
  EXPECT_GET(text, NULL, is_max);
  unsetenv("TORCH_TPU_DUMP_DIR");
  char path[1024];
  EXPECT(count_files(dump, ".mlir", path, sizeof(path)) == 1);
  size_t n = 0;
  char* got = read_file(path, &n);
  EXPECT(got && n == strlen(text) && memcmp(got, text, n) == 0);
  free(got);
}

/* Several processes compile the same program into one directory at once:
** each writes its own temporary file and renames it, so the entry is whole
** whoever wins. A child is this binary with TPURT_CACHE_TEST_CHILD set. */
__attribute__((constructor)) static void child_main(void) {
  const char* dir = getenv("TPURT_CACHE_TEST_CHILD");
  if (!dir) return;
  setenv("TORCH_TPU_CACHE_DIR", dir, 1);
  const char* text = binary_module("add", 9);
  pjrt_executable_t* exe = NULL;
  bool hit = false;
  float got[4] = {0};
  tpurt_status_t s = tpurt_runtime_init();
  if (!s) s = cache_get_or_compile(text, strlen(text), &exe, &hit);
  if (!s) s = run_binary(exe, got);
  int rc = s || !is_add(got);
  if (s) fprintf(stderr, "child: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  tpurt_status_ignore(pjrt_synchronize(-1));
  pjrt_executable_release(exe);
  cache_reconfigure_for_test();
  exit(rc);
}

TEST(Cache_ConcurrentWriters) {
  ASSERT_OK(tpurt_runtime_init());
  fresh_cache(NULL);
  setenv("TPURT_CACHE_TEST_CHILD", g_dir, 1);
  enum { kChildren = 4 };
  pid_t pids[kChildren];
  char* argv[] = {"cache_test_child", NULL};
  for (int i = 0; i < kChildren; ++i)
    ASSERT(posix_spawn(&pids[i], "/proc/self/exe", NULL, NULL, argv, environ) == 0);
  unsetenv("TPURT_CACHE_TEST_CHILD");
  for (int i = 0; i < kChildren; ++i) {
    int status = 0;
    ASSERT(waitpid(pids[i], &status, 0) == pids[i]);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT(count_files(g_dir, ".tpuexe", NULL, 0) == 1);
  EXPECT(count_files(g_dir, "", NULL, 0) == 2); /* the entry and the key: no temporary file left */
  cache_reconfigure_for_test();
  EXPECT_GET(binary_module("add", 9), "disk", is_add);
}

/* Runs last: leaves nothing behind. */
/*===--- HMAC-SHA256 against FIPS 180-4's examples and RFC 4231 ---===*/

static bool hex_is(const unsigned char got[32], const char* want) {
  char text[65];
  for (int i = 0; i < 32; ++i) snprintf(text + 2 * i, 3, "%02x", got[i]);
  if (strcmp(text, want) == 0) return true;
  fprintf(stderr, "  got %s\n  want %s\n", text, want);
  return false;
}

static void sha256_of(const void* data, size_t n, size_t step, unsigned char out[32]) {
  cache_sha256_t s;
  cache_sha256_init(&s);
  for (size_t i = 0; i < n; i += step)
    cache_sha256_update(&s, (const char*)data + i, n - i < step ? n - i : step);
  cache_sha256_final(&s, out);
}

TEST(Cache_MacIsHmacSha256) {
  unsigned char out[32];
  sha256_of("abc", 3, 3, out);
  EXPECT(hex_is(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  const char* two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sha256_of(two_blocks, strlen(two_blocks), 56, out);
  EXPECT(hex_is(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  unsigned char data[1000];
  for (int i = 0; i < 1000; ++i) data[i] = (unsigned char)(i * 7 % 251);
  for (size_t step = 1; step <= 1000; step = step * 3 + 1) { /* any split of the updates */
    sha256_of(data, sizeof(data), step, out);
    EXPECT(hex_is(out, "59425e4412e296fc74736673ce067027f384203f59c0d2c3e6be7b13347b3ffc"));
  }
  unsigned char key[131];
  memset(key, 0x0b, 20);
  cache_hmac_t m;
  cache_hmac_init(&m, key, 20); /* RFC 4231 test case 1 */
  cache_hmac_update(&m, "Hi There", 8);
  cache_hmac_final(&m, out);
  EXPECT(hex_is(out, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  memset(key, 0xaa, sizeof(key)); /* test case 6: a key longer than a block */
  const char* text = "Test Using Larger Than Block-Size Key - Hash Key First";
  cache_hmac_init(&m, key, sizeof(key));
  cache_hmac_update(&m, text, strlen(text));
  cache_hmac_final(&m, out);
  EXPECT(hex_is(out, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
  unsigned char other[32];
  memcpy(other, out, 32);
  EXPECT(cache_mac_equal(out, other));
  other[31] ^= 1;
  EXPECT(!cache_mac_equal(out, other));
}

TEST(Cache_Cleanup) {
  cache_reconfigure_for_test();
  unsetenv("TORCH_TPU_CACHE_DIR");
  unsetenv("TORCH_TPU_CACHE_MEMORY_BYTES");
  if (g_root[0]) rm_rf(g_root);
  g_root[0] = '\0';
}

TEST_MAIN(TEST_CASE(Cache_MacIsHmacSha256), TEST_CASE(Cache_DiskRoundTrip),
          TEST_CASE(Cache_UntrustedEntriesAreRecompiled), TEST_CASE(Cache_ForeignEntryIsIgnored),
          TEST_CASE(Cache_WarnsOncePerEntry), TEST_CASE(Cache_WritableByOthersIsRefused),
          TEST_CASE(Cache_DisabledAndDefaults), TEST_CASE(Cache_LruEvictionKeepsHoldersValid),
          TEST_CASE(Cache_EncodedSkipsThePrinter), TEST_CASE(Cache_DumpDir),
          TEST_CASE(Cache_ConcurrentWriters), TEST_CASE(Cache_Cleanup))
