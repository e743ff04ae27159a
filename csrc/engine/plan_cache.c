/* plan_cache.c: strict eager's plans, keyed by the op's signature.
**
** An LRU bounded by the executable cache's memory budget
** (TORCH_TPU_CACHE_MEMORY_BYTES): each plan is charged what the cache
** charges its program plus its own size, and an evicted plan releases its
** reference to the executable. A plan's reference is what keeps a loaded
** program (its code and memory mappings) alive once the cache's tier 1 has
** let go of it, so without this bound a process that runs many distinct
** small programs grows without limit and finally runs out of mappings.
**
** Concurrency. The cache has its own lock, so that a compile needs no
** engine lock: the first thread to miss a key inserts an in-flight entry
** (ready = false) and builds it with every lock released; a second thread
** that wants the same key finds the entry busy and waits on the cache's
** condition variable until that key is ready or abandoned, then looks
** again, or queues a launch behind it (queue.c). Threads wanting other
** keys never wait for it. Every lookup hands the caller a reference, and
** a launch queued behind a compile holds one, so an evicted or dropped
** plan lives until its last user lets go: publishing and evicting need no
** engine lock, and a compile job finishing on the pool never waits for it.
*/
#include "../cache/cache.h"
#include "op_internal.h"

#define PLAN_BUCKETS 8192

static pthread_mutex_t g_plan_lock = PTHREAD_MUTEX_INITIALIZER;
/* Signalled whenever an in-flight entry becomes ready or is abandoned. */
static pthread_cond_t g_plan_ready = PTHREAD_COND_INITIALIZER;
static plan_t* g_plans[PLAN_BUCKETS] TPURT_GUARDED_BY(g_plan_lock);
static plan_t *g_plan_newest TPURT_GUARDED_BY(g_plan_lock), *g_plan_oldest TPURT_GUARDED_BY(g_plan_lock);
static uint64_t g_plan_count TPURT_GUARDED_BY(g_plan_lock), g_plan_bytes TPURT_GUARDED_BY(g_plan_lock);

/*===--- the LRU list (ready plans only) ---===*/

static void lru_unlink_locked(plan_t* p) {
  if (p->newer)
    p->newer->older = p->older;
  else
    g_plan_newest = p->older;
  if (p->older)
    p->older->newer = p->newer;
  else
    g_plan_oldest = p->newer;
  p->newer = p->older = NULL;
}

static void lru_push_newest_locked(plan_t* p) {
  p->older = g_plan_newest;
  p->newer = NULL;
  if (g_plan_newest) g_plan_newest->newer = p;
  g_plan_newest = p;
  if (!g_plan_oldest) g_plan_oldest = p;
}

void plan_retain(plan_t* p) { tpurt_refcount_inc(&p->refcount); }

void plan_release(plan_t* p) {
  if (!p || !tpurt_refcount_dec_and_test(&p->refcount)) return;
  compiled_release(p->compiled);
  free(p->mesh);
  free(p->output_shardings);
  free(p->sig);
  free(p->params);
  free(p->outputs);
  free(p);
}

static void table_unlink_locked(plan_t* p) {
  plan_t** link = &g_plans[p->hash % PLAN_BUCKETS];
  while (*link && *link != p) link = &(*link)->next;
  if (*link) *link = p->next;
}

/* Takes ready plan |p| out of the table and the list; the caller frees it. */
static void unlink_ready_locked(plan_t* p) {
  table_unlink_locked(p);
  lru_unlink_locked(p);
  g_plan_count--;
  g_plan_bytes -= p->charge;
}

static plan_t* find_locked(const sig_t* sig, uint64_t hash) {
  for (plan_t* q = g_plans[hash % PLAN_BUCKETS]; q; q = q->next)
    if (q->hash == hash && q->sig_len == sig->n && memcmp(q->sig, sig->w, sig->n * sizeof(uint64_t)) == 0)
      return q;
  return NULL;
}

/*===--- the cache ---===*/

plan_lookup_t plan_cache_lookup(const sig_t* sig, uint64_t hash, plan_t** out) {
  pthread_mutex_lock(&g_plan_lock);
  plan_t* p = find_locked(sig, hash);
  plan_lookup_t found = PLAN_FOUND;
  if (p && p->ready) {
    lru_unlink_locked(p);
    lru_push_newest_locked(p);
  } else if (p) {
    found = PLAN_BUSY;
  } else {
    found = PLAN_CLAIMED;
    p = tpurt_xcalloc(1, sizeof(*p));
    tpurt_refcount_init(&p->refcount); /* the cache's */
    p->compiled = compiled_create();
    p->hash = hash;
    p->sig_len = sig->n;
    p->sig = tpurt_xmalloc(sig->n * sizeof(uint64_t) + 1);
    memcpy(p->sig, sig->w, sig->n * sizeof(uint64_t));
    plan_t** bucket = &g_plans[hash % PLAN_BUCKETS];
    p->next = *bucket;
    *bucket = p;
  }
  plan_retain(p); /* the caller's */
  pthread_mutex_unlock(&g_plan_lock);
  if (found == PLAN_FOUND) atomic_fetch_add_explicit(&engine_counters.plan_hits, 1, memory_order_relaxed);
  *out = p;
  return found;
}

void plan_cache_wait(const sig_t* sig, uint64_t hash) {
  pthread_mutex_lock(&g_plan_lock);
  for (plan_t* p = find_locked(sig, hash); p && !p->ready; p = find_locked(sig, hash))
    pthread_cond_wait(&g_plan_ready, &g_plan_lock);
  pthread_mutex_unlock(&g_plan_lock);
}

void plan_cache_publish(plan_t* p) {
  const uint64_t limit = cache_memory_limit();
  p->charge += p->sig_len * sizeof(uint64_t);
  plan_t* evicted = NULL;
  pthread_mutex_lock(&g_plan_lock);
  p->ready = true;
  lru_push_newest_locked(p);
  g_plan_count++;
  g_plan_bytes += p->charge;
  /* Least recently used plans go while over the budget, sparing |p|. */
  while (g_plan_bytes > limit && g_plan_oldest && g_plan_oldest != p) {
    plan_t* old = g_plan_oldest;
    unlink_ready_locked(old);
    old->next = evicted;
    evicted = old;
  }
  pthread_cond_broadcast(&g_plan_ready);
  pthread_mutex_unlock(&g_plan_lock);
  while (evicted) { /* released outside the lock: the last reference may unload a program */
    plan_t* next = evicted->next;
    plan_release(evicted);
    evicted = next;
  }
}

void plan_cache_abandon(plan_t* p) {
  pthread_mutex_lock(&g_plan_lock);
  table_unlink_locked(p);
  pthread_cond_broadcast(&g_plan_ready);
  pthread_mutex_unlock(&g_plan_lock);
  plan_release(p);
}

void plan_cache_drop(plan_t* p) {
  pthread_mutex_lock(&g_plan_lock);
  unlink_ready_locked(p);
  pthread_mutex_unlock(&g_plan_lock);
  plan_release(p);
}

void plan_cache_usage(uint64_t* out_count, uint64_t* out_bytes) {
  pthread_mutex_lock(&g_plan_lock);
  *out_count = g_plan_count;
  *out_bytes = g_plan_bytes;
  pthread_mutex_unlock(&g_plan_lock);
}
