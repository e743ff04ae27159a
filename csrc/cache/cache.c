/* cache.c: the executable cache's front: keys, the order of the tiers,
** configuration from the environment, counters, module dumps. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "cache_internal.h"

/* What a loaded program is charged in tier 1 at least: the plugin does not
** say what a program holds, and its serialised size understates it. On the
** CPU plugin one small program costs about 280 KiB of RSS and 3 memory
** mappings, but a scatter of several fusions (index_reduce) 36: at 256 KiB
** the 1 GiB budget kept 4,000 such programs, past the kernel's 65,530
** mappings, and the JIT then failed ("Cannot allocate memory") and left a
** stale unwind frame that crashed the next C++ exception. At 1 MiB it keeps
** about 1,000, under 40,000 mappings however large; the rest reload from
** disk. */
#define LOADED_PROGRAM_BYTES ((uint64_t)1 << 20)
#define DEFAULT_MEMORY_BYTES ((uint64_t)1 << 30)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_configured TPURT_GUARDED_BY(g_lock);
static disk_config_t g_disk TPURT_GUARDED_BY(g_lock) = {.dirfd = -1};
static uint64_t g_memory_limit TPURT_GUARDED_BY(g_lock) = DEFAULT_MEMORY_BYTES;
static bool g_warned_dump TPURT_GUARDED_BY(g_lock);
/* Counters and gauges: written with atomics, read without the lock. */
static cache_stats_t g_stats TPURT_GUARDED_BY(atomic);

#define BUMP(field) __atomic_add_fetch(&g_stats.field, 1, __ATOMIC_RELAXED)

/*===--- hashing ---===*/

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

uint64_t cache_hash64(uint64_t seed, const void* data, size_t n) {
  const unsigned char* p = data;
  uint64_t h = mix64(seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL));
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ mix64(w + 0x9e3779b97f4a7c15ULL)) * 0xbf58476d1ce4e5b9ULL;
    h = (h << 31) | (h >> 33);
  }
  uint64_t tail = 0;
  if (n) memcpy(&tail, p, n);
  return mix64(h ^ mix64(tail ^ ((uint64_t)n << 56)));
}

/* The compile options are part of the key (the exact bytes the compile
** call passes), so that entries made under other options are never used. */
static uint64_t hash_key(uint64_t seed, const char* identity, const char* options, size_t options_size,
                         const char* text, size_t size) {
  uint64_t h = cache_hash64(seed, identity, strlen(identity) + 1);
  h = cache_hash64(h, tpurt_version(), strlen(tpurt_version()) + 1);
  h = cache_hash64(h, options, options_size);
  return cache_hash64(h, text, size);
}

static void make_key_for(const char* identity, const char* text, size_t size, const char* options,
                         size_t options_size, cache_key_t* out) {
  out->text = text;
  out->size = size;
  out->hash = hash_key(0x6b65792d68617368ULL, identity, options, options_size, text, size);
  out->digest = hash_key(0x6469676573742d32ULL, identity, options, options_size, text, size);
  out->identity = identity;
  out->options = options;
  out->options_size = options_size;
}

static void make_key(const char* text, size_t size, const char* options, size_t options_size,
                     cache_key_t* out) {
  make_key_for(pjrt_identity(), text, size, options, options_size, out);
}

void cache_key_sha256(const cache_key_t* key, unsigned char out[32]) {
  /* the same fields as hash_key, each length-delimited */
  cache_sha256_t s;
  cache_sha256_init(&s);
  cache_sha256_update(&s, key->identity, strlen(key->identity) + 1);
  cache_sha256_update(&s, tpurt_version(), strlen(tpurt_version()) + 1);
  const uint64_t n = key->options_size;
  cache_sha256_update(&s, &n, sizeof(n));
  if (n) cache_sha256_update(&s, key->options, key->options_size);
  cache_sha256_update(&s, key->text, key->size);
  cache_sha256_final(&s, out);
}

/*===--- configuration ---===*/

void cache_warn(const char* fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  char* line = tpurt_xmalloc(n > 0 ? (size_t)n + 1 : 1);
  vsnprintf(line, n > 0 ? (size_t)n + 1 : 1, fmt, ap);
  va_end(ap);
  fprintf(stderr, "torch_tpu: warning: %s\n", line); /* one write: lines of two threads don't mix */
  free(line);
}

static void publish_usage_locked(void) {
  uint64_t entries, bytes;
  memory_usage_locked(&entries, &bytes);
  __atomic_store_n(&g_stats.entries, entries, __ATOMIC_RELAXED);
  __atomic_store_n(&g_stats.bytes_memory, bytes, __ATOMIC_RELAXED);
}

static void configure_locked(void) {
  if (g_configured) return;
  g_configured = true;
  g_memory_limit = tpurt_config()->cache_memory_bytes;
  memory_set_limit_locked(g_memory_limit);
  disk_configure(&g_disk);
  (void)disk_clean_stale(&g_disk); /* how many is of no interest */
  if (g_disk.cap_bytes) (void)disk_enforce_cap(&g_disk);
}

uint64_t cache_memory_limit(void) {
  pthread_mutex_lock(&g_lock);
  configure_locked();
  uint64_t limit = g_memory_limit;
  pthread_mutex_unlock(&g_lock);
  return limit;
}

/* The number of results of @main in printed module |text|, or -1 when the
** text does not say (a foreign printer). */
static int main_result_count(const char* text, size_t size) {
  const char* end = text + size;
  const char* p = memmem(text, size, "@main(", 6);
  if (!p) return -1;
  p = memmem(p, (size_t)(end - p), ") -> ", 5);
  if (!p) return -1;
  p += 5;
  if (p >= end) return -1;
  if (*p != '(') return 1;
  int depth = 0, count = 1;
  for (++p; p < end; ++p) {
    if (*p == '(' || *p == '<' || *p == '[' || *p == '{') ++depth;
    if (*p == '>' || *p == ']' || *p == '}') --depth;
    if (*p == ')') {
      if (depth == 0) return p[-1] == '(' ? 0 : count;
      --depth;
    }
    if (*p == ',' && depth == 0) ++count;
  }
  return -1;
}

/* TORCH_TPU_DUMP_DIR: each newly compiled module as <key hash>.mlir. */
static void dump_module(const cache_key_t* key) {
  const char* dir = tpurt_config()->dump_dir;
  if (!dir) return;
  tpurt_status_t status = disk_mkdirs(dir, 0777);
  int fd = -1;
  if (!status) {
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) status = tpurt_status_create(TPURT_UNAVAILABLE, "cannot open '%s': %s", dir, strerror(errno));
  }
  if (!status) {
    char name[32];
    snprintf(name, sizeof(name), "%016" PRIx64 ".mlir", key->hash);
    status = disk_write_atomic(fd, name, key->text, key->size, "", 0);
  }
  if (fd >= 0) close(fd);
  if (status) {
    pthread_mutex_lock(&g_lock);
    bool first = !g_warned_dump;
    g_warned_dump = true;
    pthread_mutex_unlock(&g_lock);
    if (first) cache_warn("TORCH_TPU_DUMP_DIR: %s", tpurt_status_message(status));
    tpurt_status_free(status);
  }
}

/*===--- the cache ---===*/

tpurt_status_t cache_get_or_compile(const char* mlir, size_t size, pjrt_executable_t** out_executable,
                                    bool* out_hit) {
  cache_entry_info_t info;
  tpurt_status_t status = cache_get_or_compile_info(mlir, size, out_executable, &info);
  *out_hit = info.hit;
  return status;
}

tpurt_status_t cache_get_or_compile_info(const char* mlir, size_t size, pjrt_executable_t** out_executable,
                                         cache_entry_info_t* out_info) {
  *out_executable = NULL;
  memset(out_info, 0, sizeof(*out_info));
  BUMP(requests);
  TPURT_RETURN_IF_ERROR(pjrt_init()); /* the key needs the plugin identity */
  const char* options = NULL;
  size_t options_size = 0;
  const char* options_text = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_current_compile_options(&options, &options_size, &options_text));
  cache_key_t key;
  make_key(mlir, size, options, options_size, &key);
  out_info->hash = key.hash;

  pthread_mutex_lock(&g_lock);
  configure_locked();
  pjrt_executable_t* exe = memory_find_locked(&key, &out_info->charge, &out_info->from_disk);
  pthread_mutex_unlock(&g_lock);
  if (exe) {
    BUMP(hits_memory);
    out_info->hit = true;
    tpurt_status_t refused = cache_shadow_program(mlir, size, options, options_size, 1, exe);
    if (refused) {
      pjrt_executable_release(exe);
      return refused;
    }
    *out_executable = exe;
    return NULL;
  }

  /* g_disk changes only in cache_reconfigure_for_test. */
  size_t payload = 0;
  disk_result_t found = disk_load(&g_disk, &key, &exe, &payload);
  if (found == DISK_HIT) {
    /* A valid program planted under this key passes every checksum; its
    ** result count still has to match the module's. */
    int expected = main_result_count(mlir, size);
    if (expected >= 0 && (size_t)expected != pjrt_executable_num_outputs(exe)) {
      disk_reject_consume(&g_disk, &key,
                          tpurt_status_create(TPURT_DATA_LOSS, "it has %zu results where the program has %d",
                                              pjrt_executable_num_outputs(exe), expected));
      pjrt_executable_release(exe);
      exe = NULL;
      found = DISK_REJECTED;
    }
  }
  if (found == DISK_HIT) {
    BUMP(hits_disk);
    out_info->hit = true;
    out_info->from_disk = true;
    pjrt_executable_note_module(exe, mlir, size); /* the launch log's op count */
  } else {
    if (found == DISK_REJECTED) BUMP(disk_rejects);
    tpurt_status_t status = pjrt_compile_with_options(mlir, size, options, options_size, &exe);
    if (status && *options_text) {
      /* Name what we passed: XLA's own message names only the key it rejects. */
      tpurt_status_t annotated =
          tpurt_status_create(tpurt_status_code(status), "%s (XLA compile options: %s)",
                              tpurt_status_message(status), options_text);
      tpurt_status_free(status);
      status = annotated;
    }
    TPURT_RETURN_IF_ERROR(status);
    dump_module(&key);
    /* A directory precompiled into holds the target's programs only: a TPU
    ** host imports it whole, and this plugin's entries would not load
    ** there. */
    if (!cache_shadow_directory_is_targets()) {
      payload = disk_store(&g_disk, &key, exe);
      if (payload) BUMP(disk_writes);
    }
  }
  pthread_mutex_lock(&g_lock);
  const uint64_t charge = payload > LOADED_PROGRAM_BYTES ? payload : LOADED_PROGRAM_BYTES;
  out_info->charge = memory_insert_locked(&key, exe, charge, out_info->from_disk);
  publish_usage_locked();
  pthread_mutex_unlock(&g_lock);
  tpurt_status_t refused = cache_shadow_program(mlir, size, options, options_size, 1, exe);
  if (refused) {
    pjrt_executable_release(exe);
    return refused;
  }
  *out_executable = exe;
  return NULL;
}

/* The alias's hash, four lanes of 8-byte words at a time. It names an
** in-memory entry only and a match is compared in full, so it needs to
** spread, not to resist: a quarter of cache_hash64's serial multiplies per
** byte. The disk tier's names and checksums keep cache_hash64. */
static uint64_t alias_hash(uint64_t seed, const void* data, size_t n) {
  const unsigned char* p = data;
  uint64_t lane[4] = {seed, seed ^ 0x9e3779b97f4a7c15ULL, seed ^ 0xbf58476d1ce4e5b9ULL,
                      seed ^ 0x94d049bb133111ebULL};
  for (; n >= 32; p += 32, n -= 32) {
    for (int i = 0; i < 4; ++i) {
      uint64_t w;
      memcpy(&w, p + 8 * i, 8);
      lane[i] = (lane[i] ^ w) * 0xd6e8feb86659fd93ULL;
      lane[i] = (lane[i] << 29) | (lane[i] >> 35);
    }
  }
  uint64_t h = mix64(lane[0]) ^ mix64(lane[1] + 1) ^ mix64(lane[2] + 2) ^ mix64(lane[3] + 3);
  return cache_hash64(h, p, n);
}

/* The alias of a program: the compile options (length first) and then the
** function's encoding. Identity and version need no place in it: the
** memory tier lives and dies with this process. |head| receives the
** length and options; the encoding is read where it is. */
static void make_alias(const char* encoding, size_t encoding_size, const char* options, size_t options_size,
                       tpurt_strbuf_t* head, cache_alias_t* out) {
  const uint64_t n = options_size;
  tpurt_strbuf_append(head, (const char*)&n, sizeof(n));
  if (options_size) tpurt_strbuf_append(head, options, options_size);
  *out = (cache_alias_t){
      .head = head->data, .head_size = head->size, .body = encoding, .body_size = encoding_size};
  out->hash =
      alias_hash(alias_hash(0x616c6961732d6b79ULL, out->head, out->head_size), encoding, encoding_size);
}

tpurt_status_t cache_get_or_compile_encoded(const char* encoding, size_t encoding_size, cache_print_fn print,
                                            void* print_ctx, pjrt_executable_t** out_executable,
                                            bool* out_hit) {
  *out_executable = NULL;
  *out_hit = false;
  TPURT_RETURN_IF_ERROR(pjrt_init());
  const char* options = NULL;
  size_t options_size = 0;
  TPURT_RETURN_IF_ERROR(pjrt_current_compile_options(&options, &options_size, NULL));
  tpurt_strbuf_t alias_head = {0};
  cache_alias_t alias;
  make_alias(encoding, encoding_size, options, options_size, &alias_head, &alias);

  uint64_t charge = 0;
  bool from_disk = false;
  pthread_mutex_lock(&g_lock);
  configure_locked();
  pjrt_executable_t* exe = memory_find_alias_locked(&alias, &charge, &from_disk);
  pthread_mutex_unlock(&g_lock);
  if (exe && !pjrt_executable_shadowed(exe)) {
    /* a shadow target was set since: the target needs the text */
    pjrt_executable_release(exe);
    exe = NULL;
  }
  if (exe) {
    BUMP(requests);
    BUMP(hits_memory);
    BUMP(hits_alias);
    tpurt_strbuf_free(&alias_head);
    *out_hit = true;
    *out_executable = exe;
    return NULL;
  }
  char* text = NULL;
  size_t size = 0;
  tpurt_status_t status = print(print_ctx, &text, &size);
  cache_entry_info_t info;
  if (!status) status = cache_get_or_compile_info(text, size, &exe, &info);
  if (!status) {
    cache_key_t key;
    make_key(text, size, options, options_size, &key);
    pthread_mutex_lock(&g_lock);
    memory_set_alias_locked(&key, &alias);
    publish_usage_locked();
    pthread_mutex_unlock(&g_lock);
    *out_hit = info.hit;
    *out_executable = exe;
  }
  free(text);
  tpurt_strbuf_free(&alias_head);
  return status;
}

void cache_forget(uint64_t hash) {
  pthread_mutex_lock(&g_lock);
  memory_forget_locked(hash);
  publish_usage_locked();
  pthread_mutex_unlock(&g_lock);
  disk_forget(&g_disk, hash);
}

void cache_stats(cache_stats_t* out) {
  out->requests = __atomic_load_n(&g_stats.requests, __ATOMIC_RELAXED);
  out->hits_memory = __atomic_load_n(&g_stats.hits_memory, __ATOMIC_RELAXED);
  out->hits_disk = __atomic_load_n(&g_stats.hits_disk, __ATOMIC_RELAXED);
  out->hits_alias = __atomic_load_n(&g_stats.hits_alias, __ATOMIC_RELAXED);
  out->disk_writes = __atomic_load_n(&g_stats.disk_writes, __ATOMIC_RELAXED);
  out->disk_rejects = __atomic_load_n(&g_stats.disk_rejects, __ATOMIC_RELAXED);
  out->entries = __atomic_load_n(&g_stats.entries, __ATOMIC_RELAXED);
  out->bytes_memory = __atomic_load_n(&g_stats.bytes_memory, __ATOMIC_RELAXED);
}

void cache_reset_counters(void) {
  __atomic_store_n(&g_stats.requests, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_stats.hits_memory, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_stats.hits_disk, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_stats.hits_alias, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_stats.disk_writes, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_stats.disk_rejects, 0, __ATOMIC_RELAXED);
}

void cache_reset_memory_for_test(void) {
  pthread_mutex_lock(&g_lock);
  memory_clear_locked();
  publish_usage_locked();
  pthread_mutex_unlock(&g_lock);
}

void cache_reconfigure_for_test(void) {
  pthread_mutex_lock(&g_lock);
  memory_clear_locked();
  publish_usage_locked();
  disk_config_free(&g_disk);
  tpurt_config_reload_for_test();
  g_configured = false;
  g_warned_dump = false;
  disk_reset_warnings();
  pthread_mutex_unlock(&g_lock);
}

int cache_disk_dirfd(void) {
  pthread_mutex_lock(&g_lock);
  configure_locked();
  int fd = g_disk.dirfd;
  pthread_mutex_unlock(&g_lock);
  return fd;
}

void tpurt_cache_info(tpurt_cache_info_t* out) {
  memset(out, 0, sizeof(*out));
  pthread_mutex_lock(&g_lock);
  configure_locked();
  tpurt_copy_str(out->dir, sizeof(out->dir), g_disk.dir);
  tpurt_copy_str(out->refused, sizeof(out->refused), g_disk.refused);
  out->disk_enabled = g_disk.dirfd >= 0;
  memory_usage_locked(&out->memory_entries, &out->memory_bytes);
  out->memory_limit_bytes = g_memory_limit;
  disk_usage(g_disk.dirfd, &out->disk_entries, &out->disk_bytes);
  pthread_mutex_unlock(&g_lock);
}

tpurt_status_t tpurt_cache_import(const char* source_dir, uint64_t* out_imported, uint64_t* out_refused) {
  *out_imported = *out_refused = 0;
  TPURT_RETURN_IF_ERROR(pjrt_init()); /* the plugin loads each program to check it */
  pthread_mutex_lock(&g_lock);
  configure_locked();
  pthread_mutex_unlock(&g_lock);
  disk_import_t result;
  TPURT_RETURN_IF_ERROR(disk_import(&g_disk, source_dir, &result));
  *out_imported = result.imported;
  *out_refused = result.refused;
  return NULL;
}

/*===--- precompiled programs: another plugin's executables, by its key ---===*/

tpurt_status_t cache_precompiled_store(const char* identity, const char* text, size_t size,
                                       const char* options, size_t options_size, const char* payload,
                                       size_t payload_size) {
  cache_key_t key;
  make_key_for(identity, text, size, options, options_size, &key);
  pthread_mutex_lock(&g_lock);
  configure_locked();
  size_t written = g_disk.dirfd >= 0 ? disk_store_bytes(&g_disk, &key, payload, payload_size) : 0;
  pthread_mutex_unlock(&g_lock);
  if (!written)
    return tpurt_status_create(
        TPURT_FAILED_PRECONDITION,
        "the precompiled program was not written: the disk cache is off or not writable");
  return NULL;
}

bool cache_precompiled_has(const char* identity, const char* text, size_t size, const char* options,
                           size_t options_size) {
  cache_key_t key;
  make_key_for(identity, text, size, options, options_size, &key);
  pthread_mutex_lock(&g_lock);
  configure_locked();
  bool has = disk_has(&g_disk, &key);
  pthread_mutex_unlock(&g_lock);
  return has;
}

tpurt_status_t cache_precompiled_load(const char* identity, const char* text, size_t size,
                                      const char* options, size_t options_size, char** out_payload,
                                      size_t* out_size) {
  cache_key_t key;
  make_key_for(identity, text, size, options, options_size, &key);
  pthread_mutex_lock(&g_lock);
  configure_locked();
  disk_result_t found = disk_load_bytes(&g_disk, &key, out_payload, out_size);
  pthread_mutex_unlock(&g_lock);
  if (found != DISK_HIT)
    return tpurt_status_create(TPURT_NOT_FOUND, "no precompiled entry %016" PRIx64 " for this key%s",
                               key.hash, found == DISK_REJECTED ? " (one was there and was refused)" : "");
  return NULL;
}
