/* config.c: every TORCH_TPU_* environment variable, parsed in one place.
**
** The environment is read once, at the first call. A value that does not
** parse is not replaced by a default in silence: tpurt_config_check (called
** by tpurt_runtime_init, so by every first use of the device) returns an
** error that names the variable, the value and what it accepts, every time.
** Until then tpurt_config() serves the defaults for the bad variables, so
** code that only asks (the initial eager mode) never fails.
**
** A TORCH_TPU_* variable that is not one of these is most likely a typo:
** it is reported once on stderr, and otherwise ignored.
*/
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <strings.h>

#include "base.h"

extern char** environ;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_parsed;
static tpurt_config_t g_config;
static char* g_error; /* the first bad variable's message, or NULL */

static const char* const kKnown[] = {
    "TORCH_TPU_PJRT_PLUGIN",      "TORCH_TPU_NUM_DEVICES",
    "TORCH_TPU_CPU_FALLBACK",     "TORCH_TPU_LAUNCH_BLOCKING",
    "TORCH_TPU_DEFER_AND_FUSE",   "TORCH_TPU_FUSE_MAX_OPS",
    "TORCH_TPU_PRINT_MLIR",       "TORCH_TPU_DUMP_DIR",
    "TORCH_TPU_CACHE_DIR",        "TORCH_TPU_CACHE_MEMORY_BYTES",
    "TORCH_TPU_CACHE_DISK_BYTES", "TORCH_TPU_SDPA_BLOCK_BYTES",
    "TORCH_TPU_CUDNN_SDPA",       "TORCH_TPU_PJRT_OPTIONS",
    "TORCH_TPU_XLA_OPTIONS",      "TORCH_TPU_TARGET",
    "TORCH_TPU_TARGET_PLUGIN",    "TORCH_TPU_TARGET_REPORT",
    "TORCH_TPU_TARGET_REFUSE",    "TORCH_TPU_COMPILE_NOTICE_MS",
    "TORCH_TPU_COMPILE_THREADS",  "TORCH_TPU_TARGET_COMPILE_THREADS",
};

static void fail(const char* name, const char* value, const char* accepts) {
  if (g_error) return; /* the first bad variable is the one reported */
  tpurt_strbuf_t s = {0};
  tpurt_strbuf_printf(&s, "%s='%s' is not valid: %s", name, value, accepts);
  g_error = s.data;
}

static const char* value_of(const char* name) {
  const char* v = getenv(name);
  return v && *v ? v : NULL;
}

/* A copy of a string variable (the environment may change under a test). */
static const char* copy_of(const char* name) {
  const char* v = value_of(name);
  return v ? tpurt_xstrdup(v) : NULL;
}

/* A flag: 1/0, true/false, yes/no, on/off (any case). */
static bool parse_flag(const char* name, bool fallback) {
  const char* v = value_of(name);
  if (!v) return fallback;
  static const char* const kTrue[] = {"1", "true", "yes", "on"};
  static const char* const kFalse[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; ++i) {
    if (strcasecmp(v, kTrue[i]) == 0) return true;
    if (strcasecmp(v, kFalse[i]) == 0) return false;
  }
  fail(name, v, "expected 1 or 0 (also true/false, yes/no, on/off)");
  return fallback;
}

/* A decimal integer in [lo, hi], with an optional sign and surrounding
** whitespace (strtoll takes the leading part; ' 4', '4 ' and '+2' alike). */
static int64_t parse_int(const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const char* v = value_of(name);
  if (!v) return fallback;
  char* end = NULL;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  const char* rest = end;
  while (rest && (*rest == ' ' || *rest == '\t' || *rest == '\n' || *rest == '\r')) ++rest;
  if (end == v || *rest != '\0' || errno || x < lo || x > hi) {
    char accepts[96];
    snprintf(accepts, sizeof(accepts), "expected an integer from %lld to %lld", (long long)lo, (long long)hi);
    fail(name, v, accepts);
    return fallback;
  }
  return (int64_t)x;
}

/* A byte count: digits, optionally with a K, M or G suffix (binary). */
static uint64_t parse_bytes(const char* name, uint64_t fallback) {
  const char* v = value_of(name);
  if (!v) return fallback;
  char* end = NULL;
  errno = 0;
  unsigned long long x = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
  int shift = 0;
  if (end && (*end == 'k' || *end == 'K'))
    shift = 10, ++end;
  else if (end && (*end == 'm' || *end == 'M'))
    shift = 20, ++end;
  else if (end && (*end == 'g' || *end == 'G'))
    shift = 30, ++end;
  if (!end || end == v || *end != '\0' || errno || (shift && x > (UINT64_MAX >> shift))) {
    fail(name, v,
         "expected a byte count: digits, optionally with a K, M or G suffix (like 1073741824 or 1G)");
    return fallback;
  }
  return (uint64_t)x << shift;
}

static void warn_unknown(void) {
  for (char** e = environ; e && *e; ++e) {
    if (strncmp(*e, "TORCH_TPU_", 10) != 0) continue;
    const char* eq = strchr(*e, '=');
    size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
    bool known = false;
    for (size_t i = 0; i < sizeof(kKnown) / sizeof(kKnown[0]) && !known; ++i)
      known = strlen(kKnown[i]) == n && strncmp(kKnown[i], *e, n) == 0;
    if (!known)
      fprintf(stderr,
              "torch_tpu: warning: ignoring the unknown environment variable %.*s (known: see README)\n",
              (int)n, *e);
  }
}

static void parse(void) {
  tpurt_config_t* c = &g_config;
  c->plugin_path = copy_of("TORCH_TPU_PJRT_PLUGIN");
  c->num_devices_set = value_of("TORCH_TPU_NUM_DEVICES") != NULL;
  c->num_devices = (int32_t)parse_int("TORCH_TPU_NUM_DEVICES", 1, TPURT_CONFIG_MAX_DEVICES, 1);
  c->cpu_fallback = parse_flag("TORCH_TPU_CPU_FALLBACK", true);
  c->launch_blocking = parse_flag("TORCH_TPU_LAUNCH_BLOCKING", false);
  c->defer_and_fuse = parse_flag("TORCH_TPU_DEFER_AND_FUSE", false);
  c->fuse_max_ops = parse_int("TORCH_TPU_FUSE_MAX_OPS", 1, INT32_MAX, 2048);
  c->print_mlir = parse_flag("TORCH_TPU_PRINT_MLIR", false);
  c->dump_dir = copy_of("TORCH_TPU_DUMP_DIR");
  c->cache_dir = copy_of("TORCH_TPU_CACHE_DIR");
  c->cache_memory_bytes = parse_bytes("TORCH_TPU_CACHE_MEMORY_BYTES", (uint64_t)1 << 30);
  c->cache_disk_bytes = parse_bytes("TORCH_TPU_CACHE_DISK_BYTES", (uint64_t)2 << 30);
  c->sdpa_block_bytes = parse_bytes("TORCH_TPU_SDPA_BLOCK_BYTES", 0);
  c->cudnn_sdpa = parse_flag("TORCH_TPU_CUDNN_SDPA", true);
  c->target_refuse = parse_flag("TORCH_TPU_TARGET_REFUSE", false);
  c->pjrt_options = copy_of("TORCH_TPU_PJRT_OPTIONS");
  c->xla_options = copy_of("TORCH_TPU_XLA_OPTIONS");
  c->compile_notice_ms = parse_int("TORCH_TPU_COMPILE_NOTICE_MS", 0, INT32_MAX, 5000);
  c->compile_threads = parse_int("TORCH_TPU_COMPILE_THREADS", 0, 64, -1);
  c->target_compile_threads = parse_int("TORCH_TPU_TARGET_COMPILE_THREADS", 1, 64, 1);
  warn_unknown();
}

static void parse_once(void) {
  pthread_mutex_lock(&g_lock);
  if (!g_parsed) {
    parse();
    g_parsed = true;
  }
  pthread_mutex_unlock(&g_lock);
}

const tpurt_config_t* tpurt_config(void) {
  parse_once();
  return &g_config;
}

tpurt_status_t tpurt_config_check(void) {
  parse_once();
  return g_error ? tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s", g_error) : NULL;
}

void tpurt_config_reload_for_test(void) {
  pthread_mutex_lock(&g_lock);
  free((char*)g_config.plugin_path);
  free((char*)g_config.dump_dir);
  free((char*)g_config.cache_dir);
  free((char*)g_config.pjrt_options);
  free((char*)g_config.xla_options);
  memset(&g_config, 0, sizeof(g_config));
  free(g_error);
  g_error = NULL;
  parse();
  g_parsed = true;
  pthread_mutex_unlock(&g_lock);
}
