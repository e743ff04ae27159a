/* base.h: small utilities every room of the core uses: status helpers,
** reference counts, dtype facts, a growable string buffer, an arena, and a
** 64-bit hash.
**
** Ownership conventions of the core (docs/architecture.md, "Ownership"):
**  - a function returning a tpurt_status_t is TPURT_MUST_USE; a status is
**    returned, freed after it was reported, or dropped on purpose with
**    tpurt_status_ignore(); a status kept by someone else is a
**    tpurt_borrowed_status_t;
**  - refcounted objects hold a tpurt_refcount_t and have _retain/_release;
**    owned plain objects have _free; nothing is _destroy'ed or _delete'd;
**  - a function that takes ownership of an argument ends in _consume
**    (before _locked) and names the consumed argument in its comment.
*/
#ifndef TPURT_BASE_BASE_H_
#define TPURT_BASE_BASE_H_

#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../include/tpurt.h"

/* Names the lock that guards a piece of mutable global state, on its
** declaration: `static int g_count TPURT_GUARDED_BY(g_lock);`. State read
** and written only with atomics says TPURT_GUARDED_BY(atomic); state
** written once before threads start, TPURT_GUARDED_BY(init); state of
** one thread, TPURT_GUARDED_BY(thread). It expands to nothing (our locks
** are plain pthread mutexes, not clang capabilities): it documents, and
** `make lint` checks that every mutable global of engine/ and cache/
** carries one. */
#define TPURT_GUARDED_BY(lock)

/* Worker threads for compiles (pool.c). A job runs fn(arg) on a worker,
** in submission order, with no lock of ours held; the job owns |arg|. */
typedef void (*tpurt_job_fn_t)(void* arg);
void tpurt_pool_submit(tpurt_job_fn_t fn, void* arg);
/* Workers the pool runs: TORCH_TPU_COMPILE_THREADS, by default the host's
** cores; 0: none, every job runs at its submit. */
int tpurt_pool_size(void);
/* True where a submit runs its job at once on the caller's thread (a pool
** of size 0, or a forked child, which has no workers). */
bool tpurt_pool_runs_inline(void);

/* Propagates a non-OK status to the caller. */
#define TPURT_RETURN_IF_ERROR(expr)      \
  do {                                   \
    tpurt_status_t status_ = (expr);     \
    if (status_ != NULL) return status_; \
  } while (0)

/* Reference counts: every refcounted object of the core holds one of these,
** so that _retain and _release are safe from any thread. An object starts
** with one reference, its creator's. */
typedef struct tpurt_refcount_s {
  atomic_int value;
} tpurt_refcount_t;
static inline void tpurt_refcount_init(tpurt_refcount_t* ref) { atomic_init(&ref->value, 1); }
static inline void tpurt_refcount_inc(tpurt_refcount_t* ref) {
  atomic_fetch_add_explicit(&ref->value, 1, memory_order_relaxed);
}
/* Drops one reference; true when it was the last: the caller frees the
** object (acquire-release, so the freeing thread sees every other thread's
** writes to it). */
TPURT_MUST_USE static inline bool tpurt_refcount_dec_and_test(tpurt_refcount_t* ref) {
  return atomic_fetch_sub_explicit(&ref->value, 1, memory_order_acq_rel) == 1;
}
/* The count now. Only the holder of a reference may ask, and the answer is
** exact only when no other thread can retain or release meanwhile. */
static inline int tpurt_refcount_get(tpurt_refcount_t* ref) {
  return atomic_load_explicit(&ref->value, memory_order_acquire);
}

TPURT_MUST_USE tpurt_status_t tpurt_status_vcreate(tpurt_status_code_t code, const char* fmt, va_list ap);

/* dtype facts beyond the public ones. */
bool tpurt_dtype_is_unsigned(tpurt_dtype_t dtype);
bool tpurt_dtype_is_signed_int(tpurt_dtype_t dtype);

/* Calls malloc/calloc/realloc and aborts on failure: host allocations of a
** few bytes are not an error path the core reports. Device memory is. */
void* tpurt_xmalloc(size_t size);
void* tpurt_xcalloc(size_t count, size_t size);
void* tpurt_xrealloc(void* ptr, size_t size);
char* tpurt_xstrdup(const char* s);
/* Copies |src| (NULL reads as "") into |dst| of |cap| > 0 bytes, cut to fit
** and always NUL-terminated. For names copied on every op, where snprintf's
** format parsing was a visible cost. */
void tpurt_copy_str(char* dst, size_t cap, const char* src);

/* A growable NUL-terminated string. Zero-initialise, append, free data. */
typedef struct tpurt_strbuf_s {
  char* data;
  size_t size;
  size_t capacity;
} tpurt_strbuf_t;
void tpurt_strbuf_append(tpurt_strbuf_t* buf, const char* s, size_t n);
void tpurt_strbuf_puts(tpurt_strbuf_t* buf, const char* s);
/* "%lld" and "%0*llX" (|digits| upper-case hex digits, zero-padded) without
** printf: the IR builder writes several numbers into every op it builds. */
void tpurt_strbuf_put_i64(tpurt_strbuf_t* buf, int64_t value);
void tpurt_strbuf_put_hex(tpurt_strbuf_t* buf, uint64_t value, int32_t digits);
void tpurt_strbuf_printf(tpurt_strbuf_t* buf, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void tpurt_strbuf_free(tpurt_strbuf_t* buf);

/* A bump allocator: many small allocations, one free. Zeroed memory. */
typedef struct tpurt_arena_block_s tpurt_arena_block_t;
typedef struct tpurt_arena_s {
  tpurt_arena_block_t* head;
} tpurt_arena_t;
void* tpurt_arena_alloc(tpurt_arena_t* arena, size_t size);
char* tpurt_arena_strdup(tpurt_arena_t* arena, const char* s);
void tpurt_arena_free(tpurt_arena_t* arena);

/* FNV-1a style 64-bit hash, chained through |h| (start with TPURT_HASH_SEED). */
#define TPURT_HASH_SEED 0xcbf29ce484222325ULL
uint64_t tpurt_hash_bytes(uint64_t h, const void* data, size_t n);
uint64_t tpurt_hash_u64(uint64_t h, uint64_t v);
uint64_t tpurt_hash_str(uint64_t h, const char* s);

#endif /* TPURT_BASE_BASE_H_ */
