/* memory_cache.c: tier 1 of the executable cache, a hash table from module
** text to executable with a least-recently-used list, bounded in bytes.
** Callers hold the cache lock (cache.c).
**
** An entry is charged its text (kept to compare keys in full) plus its
** serialised size when known (compiled with tier 2 on, or loaded from it),
** else a fixed estimate: the plugin does not say how much host memory a
** loaded program takes, and serialising only to weigh it would cost a
** copy per compile.
**
** Eviction only drops the table's reference: a plan that holds its own
** reference keeps running the program (see cache.h). Counting references
** was preferred to pinning entries "in use" because the cache cannot see
** who uses a program, and to plans looking the program up on every launch
** because that would hash the whole module text per op.
**
** An entry may also carry an alias: other exact bytes that name the same
** program (the compile options plus the function's binary encoding,
** ir_func_encode), in a second table. The fused engine finds a graph it
** has run before by its alias, without printing the module.
*/
#include "cache_internal.h"

typedef struct entry_s {
  uint64_t hash;
  char* text;
  size_t size;
  pjrt_executable_t* executable; /* the table's reference */
  uint64_t charge;               /* bytes counted against the limit */
  bool from_disk;                /* loaded from tier 2, not compiled by this process */
  uint64_t alias_hash;           /* the alias (NULL: none), compared in full like the text */
  char* alias;
  size_t alias_size;
  struct entry_s* next;          /* bucket chain */
  struct entry_s* next_alias;    /* alias bucket chain */
  struct entry_s *newer, *older; /* LRU list */
} entry_t;

#define NUM_BUCKETS 4096
/* All of tier 1 is guarded by cache.c's g_lock (the _locked functions). */
static entry_t* g_buckets[NUM_BUCKETS] TPURT_GUARDED_BY(g_lock);
static entry_t* g_alias_buckets[NUM_BUCKETS] TPURT_GUARDED_BY(g_lock);
static entry_t *g_newest TPURT_GUARDED_BY(g_lock), *g_oldest TPURT_GUARDED_BY(g_lock);
static uint64_t g_entries TPURT_GUARDED_BY(g_lock), g_bytes TPURT_GUARDED_BY(g_lock);
static uint64_t g_limit TPURT_GUARDED_BY(g_lock) = (uint64_t)1 << 30;

static void lru_unlink(entry_t* e) {
  if (e->newer)
    e->newer->older = e->older;
  else
    g_newest = e->older;
  if (e->older)
    e->older->newer = e->newer;
  else
    g_oldest = e->newer;
  e->newer = e->older = NULL;
}

static void lru_push_newest(entry_t* e) {
  e->older = g_newest;
  e->newer = NULL;
  if (g_newest) g_newest->newer = e;
  g_newest = e;
  if (!g_oldest) g_oldest = e;
}

static void unlink_alias(entry_t* e) {
  if (!e->alias) return;
  entry_t** link = &g_alias_buckets[e->alias_hash % NUM_BUCKETS];
  while (*link != e) link = &(*link)->next_alias;
  *link = e->next_alias;
  g_bytes -= e->alias_size;
  e->charge -= e->alias_size;
  free(e->alias);
  e->alias = NULL;
  e->alias_size = 0;
}

static void remove_entry(entry_t* e) {
  unlink_alias(e);
  entry_t** link = &g_buckets[e->hash % NUM_BUCKETS];
  while (*link != e) link = &(*link)->next;
  *link = e->next;
  lru_unlink(e);
  g_entries--;
  g_bytes -= e->charge;
  pjrt_executable_release(e->executable);
  free(e->text);
  free(e);
}

void memory_set_limit_locked(uint64_t limit_bytes) { g_limit = limit_bytes; }

static entry_t* find_entry(const cache_key_t* key) {
  for (entry_t* e = g_buckets[key->hash % NUM_BUCKETS]; e; e = e->next)
    if (e->hash == key->hash && e->size == key->size && memcmp(e->text, key->text, key->size) == 0) return e;
  return NULL;
}

static pjrt_executable_t* use_entry(entry_t* e, uint64_t* out_charge, bool* out_from_disk) {
  lru_unlink(e);
  lru_push_newest(e);
  pjrt_executable_retain(e->executable);
  *out_charge = e->charge;
  *out_from_disk = e->from_disk;
  return e->executable;
}

pjrt_executable_t* memory_find_locked(const cache_key_t* key, uint64_t* out_charge, bool* out_from_disk) {
  entry_t* e = find_entry(key);
  return e ? use_entry(e, out_charge, out_from_disk) : NULL;
}

pjrt_executable_t* memory_find_alias_locked(const cache_alias_t* alias, uint64_t* out_charge,
                                            bool* out_from_disk) {
  const size_t size = alias->head_size + alias->body_size;
  for (entry_t* e = g_alias_buckets[alias->hash % NUM_BUCKETS]; e; e = e->next_alias)
    if (e->alias_hash == alias->hash && e->alias_size == size &&
        memcmp(e->alias, alias->head, alias->head_size) == 0 &&
        memcmp(e->alias + alias->head_size, alias->body, alias->body_size) == 0)
      return use_entry(e, out_charge, out_from_disk);
  return NULL;
}

void memory_set_alias_locked(const cache_key_t* key, const cache_alias_t* alias) {
  entry_t* e = find_entry(key);
  if (!e) return; /* evicted meanwhile: the next request prints again */
  unlink_alias(e);
  const size_t size = alias->head_size + alias->body_size;
  e->alias = tpurt_xmalloc(size);
  memcpy(e->alias, alias->head, alias->head_size);
  memcpy(e->alias + alias->head_size, alias->body, alias->body_size);
  e->alias_size = size;
  e->alias_hash = alias->hash;
  e->next_alias = g_alias_buckets[alias->hash % NUM_BUCKETS];
  g_alias_buckets[alias->hash % NUM_BUCKETS] = e;
  e->charge += size;
  g_bytes += size;
  while (g_bytes > g_limit && g_oldest && g_oldest != e) remove_entry(g_oldest);
}

uint64_t memory_insert_locked(const cache_key_t* key, pjrt_executable_t* executable, uint64_t charge,
                              bool from_disk) {
  entry_t** bucket = &g_buckets[key->hash % NUM_BUCKETS];
  entry_t* found = find_entry(key);
  if (found) return found->charge;
  entry_t* e = tpurt_xcalloc(1, sizeof(*e));
  e->hash = key->hash;
  e->size = key->size;
  e->text = tpurt_xmalloc(key->size + 1);
  memcpy(e->text, key->text, key->size);
  e->text[key->size] = '\0';
  pjrt_executable_retain(executable);
  e->executable = executable;
  e->charge = charge + key->size + sizeof(*e);
  e->from_disk = from_disk;
  e->next = *bucket;
  *bucket = e;
  lru_push_newest(e);
  g_entries++;
  g_bytes += e->charge;
  while (g_bytes > g_limit && g_oldest && g_oldest != e) remove_entry(g_oldest);
  return e->charge;
}

void memory_forget_locked(uint64_t hash) {
  entry_t* e = g_buckets[hash % NUM_BUCKETS];
  while (e) {
    entry_t* next = e->next;
    if (e->hash == hash) remove_entry(e);
    e = next;
  }
}

void memory_clear_locked(void) {
  while (g_oldest) remove_entry(g_oldest);
}

void memory_usage_locked(uint64_t* out_entries, uint64_t* out_bytes) {
  *out_entries = g_entries;
  *out_bytes = g_bytes;
}
