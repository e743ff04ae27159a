/* memory_cache.c: tier 1 of the executable cache, an in-memory hash table
** from module text to executable. Callers hold the engine lock. */
#include "../base/base.h"
#include "cache.h"

typedef struct entry_s {
  uint64_t hash;
  char* text;
  size_t size;
  pjrt_executable_t* executable;
  struct entry_s* next;
} entry_t;

#define NUM_BUCKETS 4096
static entry_t* g_buckets[NUM_BUCKETS];
static cache_stats_t g_stats;

tpurt_status_t cache_get_or_compile(const char* mlir, size_t size, pjrt_executable_t** out_executable,
                                    bool* out_hit) {
  *out_executable = NULL;
  *out_hit = false;
  ++g_stats.requests;
  uint64_t h = tpurt_hash_bytes(tpurt_hash_str(TPURT_HASH_SEED, pjrt_identity()), mlir, size);
  entry_t** bucket = &g_buckets[h % NUM_BUCKETS];
  for (entry_t* e = *bucket; e; e = e->next) {
    if (e->hash == h && e->size == size && memcmp(e->text, mlir, size) == 0) {
      ++g_stats.hits_memory;
      *out_hit = true;
      *out_executable = e->executable;
      return NULL;
    }
  }
  pjrt_executable_t* exe = NULL;
  TPURT_RETURN_IF_ERROR(pjrt_compile(mlir, size, &exe));
  entry_t* e = tpurt_xcalloc(1, sizeof(*e));
  e->hash = h;
  e->text = tpurt_xmalloc(size + 1);
  memcpy(e->text, mlir, size);
  e->text[size] = '\0';
  e->size = size;
  e->executable = exe;
  e->next = *bucket;
  *bucket = e;
  ++g_stats.entries;
  *out_executable = exe;
  return NULL;
}

void cache_stats(cache_stats_t* out_stats) { *out_stats = g_stats; }
