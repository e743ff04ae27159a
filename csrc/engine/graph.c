/* graph.c: the pending graph of fused eager (DEFER_AND_FUSE) and of tracing
** for torch.compile (INTERNAL_DEFER_ALL).
**
** In these modes an op is lowered straight into one growing function
** instead of its own program. Each storage the graph touches has a current
** value in it: a parameter bound to the storage's buffer when first read, a
** placeholder input while tracing, zeros for a never-written storage, or the
** value an op wrote. Nothing runs until a flush: then the function returns
** the final value of every storage that is still alive outside the graph
** (temporaries that died are never computed), the module is printed,
** fetched from the executable cache or compiled, and run once; the outputs
** are swapped into their storages.
**
** The key is the printed module itself, which is structural by
** construction: scalar values and RNG states are parameters, buffers are
** parameters, so a repeated step prints the same bytes and reuses the same
** executable.
*/
#include <stdio.h>

#include "../base/base.h"
#include "../cache/cache.h"
#include "engine.h"

/* How a parameter of @main is bound at launch. */
typedef enum binding_kind_e {
  BIND_BUFFER = 0,  /* a storage's buffer, captured (retained) when first read */
  BIND_HOST,        /* host bytes (a scalar or an RNG state) */
  BIND_PLACEHOLDER, /* a traced input, supplied at each program run */
  BIND_RNG,         /* an RNG state: host bytes in fused eager; per run in a program */
} binding_kind_t;

typedef struct binding_s {
  binding_kind_t kind;
  int32_t param_index; /* position in @main */
  pjrt_buffer_t* buffer;
  int32_t input;     /* BIND_PLACEHOLDER: the input index; BIND_RNG: its draw number */
  ir_type_t type;    /* BIND_HOST: the parameter's type */
  uint64_t bytes[2]; /* BIND_HOST: up to 16 bytes */
  bool sharded;      /* BIND_PLACEHOLDER of a compile-only trace: split as |sharding| */
  pjrt_sharding_t sharding;
} binding_t;

typedef struct entry_s {
  tpurt_storage_t* storage; /* retained by the graph */
  ir_value_t value;         /* its current value in the function */
  bool written;             /* an op wrote it (else it only was read) */
  int32_t writer;           /* written: the index of the op that wrote it last */
  char writer_name[96];     /* and its name, for the error when the value is lost */
  int32_t recorded;         /* references held by recorded calls (not the user's) */
} entry_t;

/* An op of a fused graph as it was called, kept for a replay when the graph
** fails: one allocation holds the args, their lists and strings, the name
** and the results; tensor storages (args and results) are retained. */
typedef struct recorded_call_s {
  tpurt_op_call_t call;
  tpurt_result_t* results; /* the results the caller got (storages retained) */
  int32_t num_results;
} recorded_call_t;

struct graph_s {
  ir_func_t* func;
  /* Its owner is compiling it with the engine lock released: another
  ** thread that needs it to run waits (engine_wait) instead of flushing. */
  bool compiling;
  recorded_call_t* calls; /* fused eager: every op recorded, in order */
  int32_t num_calls, cap_calls;
  int device;
  uint32_t epoch;
  int32_t num_ops;
  binding_t* bindings;
  int32_t num_bindings, cap_bindings;
  entry_t* entries;
  int32_t num_entries, cap_entries;
  uint64_t first_op; /* signature-lite hash of the first op */
  /* Loop detection (graph_repeats): the fingerprint of every op so far, for
  ** each op the position of the previous op with the same fingerprint
  ** (-1: none), and an open-addressed map fingerprint -> last position. */
  uint64_t* history;
  int32_t* prev;
  int32_t cap_history;
  int32_t* last_at; /* GRAPH_MAP_SLOTS entries: position + 1, 0 = empty */
  int32_t num_rng;  /* RNG states bound so far */
  char last_op[96]; /* for error messages */
  char first_op_name[96];
  /* The op whose lowering left the function's first sticky error: 1 + its
  ** index (0: none yet), and its name. */
  int32_t ir_error_op;
  char ir_error_op_name[96];
  bool tracing;
  graph_t* next_thread; /* the registry of every thread's graph */
};

/* Each thread records into its own pending graph: its fused eager ops and
** its torch.compile trace never mix with another thread's. A thread's graph
** object is made on its first use and kept for the process (registered in
** g_graphs, so that another thread can find and flush a graph that holds a
** value it reads, even after the owner exited); between flushes it is
** empty (func NULL). All of it runs under the engine lock. */
static _Thread_local graph_t* t_graph TPURT_GUARDED_BY(thread);
static graph_t* g_graphs TPURT_GUARDED_BY(g_engine_mutex);
static uint32_t g_epoch TPURT_GUARDED_BY(g_engine_mutex) = 1;
static _Thread_local tpurt_eager_mode_t t_mode TPURT_GUARDED_BY(thread) = TPURT_MODE_DEFER_NEVER;
static _Thread_local bool t_mode_set TPURT_GUARDED_BY(thread);

/* Counters by flush reason (metrics). */
static _Atomic uint64_t g_flush_counts[GRAPH_FLUSH_REASONS] TPURT_GUARDED_BY(atomic);
static const char* const kFlushNames[GRAPH_FLUSH_REASONS] = {
    "host_read",   "synchronize", "size_limit",  "repeated_sequence",
    "mode_change", "strict_op",   "device_copy", "other_thread",
};

const char* graph_flush_reason_name(int reason) {
  return reason >= 0 && reason < GRAPH_FLUSH_REASONS ? kFlushNames[reason] : "?";
}
uint64_t graph_flush_count(int reason) {
  return reason >= 0 && reason < GRAPH_FLUSH_REASONS ? g_flush_counts[reason] : 0;
}
void graph_reset_counts(void) {
  for (int i = 0; i < GRAPH_FLUSH_REASONS; ++i) g_flush_counts[i] = 0;
}

/*===--- modes ---===*/

tpurt_eager_mode_t tpurt_get_eager_mode(void) {
  if (!t_mode_set) {
    t_mode_set = true;
    if (tpurt_config()->launch_blocking)
      t_mode = TPURT_MODE_LAUNCH_BLOCKING;
    else if (tpurt_config()->defer_and_fuse)
      t_mode = TPURT_MODE_DEFER_AND_FUSE;
  }
  return t_mode;
}

tpurt_status_t tpurt_set_eager_mode(tpurt_eager_mode_t mode) {
  if (mode < TPURT_MODE_DEFER_NEVER || mode > TPURT_MODE_INTERNAL_DEFER_ALL)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "unknown eager mode %d", (int)mode);
  tpurt_status_t status = NULL;
  tpurt_eager_mode_t old = tpurt_get_eager_mode();
  /* Ops queued in strict eager run before the thread's next mode begins
  ** (debug eager then blames each error on its own op). A trace (compiled
  ** mode's first call) is the exception, both ways: it launches nothing, and
  ** the program it ends in queues its launch behind what is queued; waiting
  ** there made a split graph's pieces compile one after another, each trace
  ** waiting for the compile of the piece before it. */
  const bool tracing = old == TPURT_MODE_INTERNAL_DEFER_ALL || mode == TPURT_MODE_INTERNAL_DEFER_ALL;
  if (old != mode && !tracing) queue_drain();
  if (old != mode && old == TPURT_MODE_DEFER_AND_FUSE) {
    engine_lock();
    status = graph_flush_locked(GRAPH_FLUSH_MODE_CHANGE);
    engine_unlock();
  }
  t_mode = mode;
  t_mode_set = true;
  return status;
}

/*===--- building ---===*/

graph_t* graph_current(void) { return t_graph && t_graph->func ? t_graph : NULL; }

graph_t* graph_open(int device) {
  if (!t_graph) {
    t_graph = tpurt_xcalloc(1, sizeof(*t_graph));
    t_graph->next_thread = g_graphs;
    g_graphs = t_graph;
  }
  graph_t* g = t_graph;
  if (g->func) return g;
  graph_t* next = g->next_thread;
  memset(g, 0, sizeof(*g));
  g->next_thread = next;
  g->func = ir_func_create();
  g->device = device;
  g->epoch = ++g_epoch;
  return g;
}

/* Only a graph that wrote the storage holds a newer value: one that only
** read it captured its buffer, which a later write swaps out but never
** changes. So threads that share read-only values (weights) never flush each
** other; the last reader owns the membership, and a reader that lost it
** reads the storage again as a new parameter (the same buffer). */
graph_t* graph_holding(const tpurt_storage_t* s) {
  if (s->graph_epoch == 0) return NULL;
  for (graph_t* g = g_graphs; g; g = g->next_thread)
    if (g->func && g->epoch == s->graph_epoch)
      return s->graph_index < g->num_entries && g->entries[s->graph_index].written ? g : NULL;
  return NULL;
}

ir_func_t* graph_func(graph_t* g) { return g->func; }
int graph_device(const graph_t* g) { return g->device; }
int32_t graph_num_ops(const graph_t* g) { return g->num_ops; }

void graph_bind_rng(graph_t* g, int32_t param_index, const uint64_t state[2]) {
  int64_t two = 2;
  graph_bind_host(g, param_index, ir_type_make(TPURT_DTYPE_U64, 1, &two), state, 2 * sizeof(uint64_t));
  binding_t* b = &g->bindings[g->num_bindings - 1];
  b->kind = BIND_RNG;
  b->input = g->num_rng++;
}

static entry_t* entry_of(graph_t* g, tpurt_storage_t* s) {
  if (s->graph_epoch == g->epoch) return &g->entries[s->graph_index];
  return NULL;
}

static entry_t* add_entry(graph_t* g, tpurt_storage_t* s, ir_value_t value) {
  if (g->num_entries == g->cap_entries) {
    g->cap_entries = g->cap_entries ? g->cap_entries * 2 : 64;
    g->entries = tpurt_xrealloc(g->entries, sizeof(entry_t) * (size_t)g->cap_entries);
  }
  tpurt_storage_retain(s);
  s->graph_epoch = g->epoch;
  s->graph_index = g->num_entries;
  entry_t* e = &g->entries[g->num_entries++];
  *e = (entry_t){.storage = s, .value = value};
  return e;
}

/* A binding for the next @main parameter (call before ir_param). */
static binding_t* add_binding(graph_t* g) {
  if (g->num_bindings == g->cap_bindings) {
    g->cap_bindings = g->cap_bindings ? g->cap_bindings * 2 : 64;
    g->bindings = tpurt_xrealloc(g->bindings, sizeof(binding_t) * (size_t)g->cap_bindings);
  }
  binding_t* b = &g->bindings[g->num_bindings++];
  memset(b, 0, sizeof(*b));
  b->param_index = ir_func_num_params(g->func);
  return b;
}

/* Bindings are made in two streams (storages as they are read, numbers after
** each op); launch order is @main's parameter order. */
static int by_param_index(const void* a, const void* b) {
  int32_t x = ((const binding_t*)a)->param_index, y = ((const binding_t*)b)->param_index;
  return (x > y) - (x < y);
}

static TPURT_MUST_USE tpurt_status_t sort_bindings(graph_t* g) {
  qsort(g->bindings, (size_t)g->num_bindings, sizeof(binding_t), by_param_index);
  if (g->num_bindings != ir_func_num_params(g->func))
    return tpurt_status_create(TPURT_INTERNAL, "pending graph: %d parameters but %d bindings",
                               ir_func_num_params(g->func), g->num_bindings);
  for (int32_t i = 0; i < g->num_bindings; ++i)
    if (g->bindings[i].param_index != i)
      return tpurt_status_create(TPURT_INTERNAL, "pending graph: parameter %d is unbound", i);
  return NULL;
}

bool graph_param_bound(const graph_t* g, int32_t param_index) {
  for (int32_t i = g->num_bindings - 1; i >= 0; --i)
    if (g->bindings[i].param_index == param_index) return true;
  return false;
}

bool graph_is_tracing(const graph_t* g) { return g->tracing; }

bool graph_has_storage(const graph_t* g, const tpurt_storage_t* s) { return s->graph_epoch == g->epoch; }

ir_value_t graph_storage_value(graph_t* g, tpurt_storage_t* s, tpurt_dtype_t dtype) {
  entry_t* e = entry_of(g, s);
  if (e) return e->value;
  ir_value_t v;
  if (s->buffer) {
    binding_t* b = add_binding(g);
    b->kind = BIND_BUFFER;
    b->buffer = s->buffer;
    pjrt_buffer_retain(s->buffer);
    v = ir_param(g->func, ir_type_make(s->buffer->dtype, s->buffer->rank, s->buffer->dims));
  } else {
    v = view_empty_base(g->func, s, dtype);
  }
  return add_entry(g, s, v)->value;
}

void graph_set_storage_value(graph_t* g, tpurt_storage_t* s, ir_value_t value) {
  entry_t* e = entry_of(g, s);
  if (!e) e = add_entry(g, s, value);
  e->value = value;
  e->written = true;
  e->writer = g->num_ops - 1; /* graph_note_op came first */
  tpurt_copy_str(e->writer_name, sizeof(e->writer_name), g->last_op);
}

tpurt_storage_t* graph_new_result(graph_t* g, ir_value_t value) {
  const ir_type_t* t = ir_value_type(g->func, value);
  size_t nbytes = t ? (size_t)ir_type_numel(t) * tpurt_dtype_size(t->dtype) : 0;
  tpurt_storage_t* s = NULL;
  tpurt_status_t st = tpurt_storage_create(g->device, nbytes, &s);
  if (st) { /* the runtime is up while a graph exists */
    tpurt_status_ignore(st);
    abort();
  }
  graph_set_storage_value(g, s, value);
  return s; /* one reference for the caller, one held by the graph */
}

void graph_bind_host(graph_t* g, int32_t param_index, ir_type_t type, const void* bytes, size_t size) {
  binding_t* b = add_binding(g);
  b->param_index = param_index;
  b->kind = BIND_HOST;
  b->type = type;
  memcpy(b->bytes, bytes, size < sizeof(b->bytes) ? size : sizeof(b->bytes));
}

/* Loop detection. A fused graph should end where a loop step ends, so that
** every step is the same program. Steps are found as repeats: the op about
** to be recorded starts a repeat when the ops before it equal the ops before
** an earlier op of the same fingerprint, over a window of LOOP_WINDOW ops
** (or the whole distance, if shorter) and at least LOOP_MIN_PERIOD ops
** apart. Flushing there cuts every later step at the same place, whatever
** code ran before the loop: the graphs between two cuts are one rotated step
** each (or one repeated block of it), all the same program. */
#define LOOP_MIN_PERIOD 16
#define LOOP_WINDOW 32
#define LOOP_CANDIDATES 8
#define GRAPH_MAP_SLOTS 4096 /* power of two */

static int32_t* map_slot(graph_t* g, uint64_t fp) {
  if (!g->last_at) g->last_at = tpurt_xcalloc(GRAPH_MAP_SLOTS, sizeof(int32_t));
  uint32_t i = (uint32_t)(fp ^ (fp >> 29)) & (GRAPH_MAP_SLOTS - 1);
  for (uint32_t probe = 0; probe < GRAPH_MAP_SLOTS; ++probe, i = (i + 1) & (GRAPH_MAP_SLOTS - 1)) {
    int32_t at = g->last_at[i];
    if (at == 0 || g->history[at - 1] == fp) return &g->last_at[i];
  }
  return NULL; /* full: more distinct ops than slots; detection just stops */
}

bool graph_repeats(graph_t* g, uint64_t fp) {
  int32_t n = g->num_ops;
  if (n >= LOOP_MIN_PERIOD && fp == g->first_op) return true; /* the loop began with the graph */
  if (n < LOOP_MIN_PERIOD || !g->history) return false;
  int32_t* slot = map_slot(g, fp);
  int32_t p = slot && *slot ? *slot - 1 : -1;
  for (int32_t tries = 0; p >= 0 && tries < LOOP_CANDIDATES; ++tries, p = g->prev[p]) {
    int32_t period = n - p;
    if (period < LOOP_MIN_PERIOD) continue;
    int32_t m = period < LOOP_WINDOW ? period : LOOP_WINDOW;
    if (p < m) return false; /* earlier candidates have even less history */
    bool same = true;
    for (int32_t j = 0; same && j < m; ++j) same = g->history[n - 1 - j] == g->history[p - 1 - j];
    if (same) return true;
  }
  return false;
}

/* Blames the op recorded last for the function's first sticky error, if it
** appeared since the op before: called before each op and at the flush. */
static void note_ir_error(graph_t* g) {
  if (g->ir_error_op || g->num_ops == 0 || !ir_func_status(g->func)) return;
  g->ir_error_op = g->num_ops;
  tpurt_copy_str(g->ir_error_op_name, sizeof(g->ir_error_op_name), g->last_op);
}

void graph_note_op(graph_t* g, const char* name, uint64_t sig) {
  note_ir_error(g);
  if (g->num_ops == 0) {
    g->first_op = sig;
    tpurt_copy_str(g->first_op_name, sizeof(g->first_op_name), name);
  }
  tpurt_copy_str(g->last_op, sizeof(g->last_op), name);
  int32_t n = g->num_ops;
  if (n == g->cap_history) {
    g->cap_history = g->cap_history ? g->cap_history * 2 : 256;
    g->history = tpurt_xrealloc(g->history, sizeof(uint64_t) * (size_t)g->cap_history);
    g->prev = tpurt_xrealloc(g->prev, sizeof(int32_t) * (size_t)g->cap_history);
  }
  g->history[n] = sig;
  int32_t* slot = map_slot(g, sig);
  g->prev[n] = slot && *slot ? *slot - 1 : -1;
  if (slot) *slot = n + 1;
  ++g->num_ops;
}

uint64_t graph_first_op(const graph_t* g) { return g->first_op; }

/*===--- recorded calls: the replay of a failed graph ---===*/

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

/* A recording's reference to |s|, counted on its entry so that the flush
** still sees which values only recordings hold (temporaries that died). */
static void retain_recorded(graph_t* g, tpurt_storage_t* s) {
  if (!s) return;
  tpurt_storage_retain(s);
  entry_t* e = entry_of(g, s);
  if (e) ++e->recorded;
}

void graph_record_call(graph_t* g, const tpurt_op_call_t* call) {
  if (g->num_calls == g->cap_calls) {
    g->cap_calls = g->cap_calls ? g->cap_calls * 2 : 64;
    g->calls = tpurt_xrealloc(g->calls, sizeof(recorded_call_t) * (size_t)g->cap_calls);
  }
  int32_t num_results = call->num_results < call->max_results ? call->num_results : call->max_results;
  if (num_results < 0) num_results = 0;
  size_t size = align8(sizeof(tpurt_arg_t) * (size_t)call->num_args) +
                align8(sizeof(tpurt_result_t) * (size_t)num_results) + align8(strlen(call->name) + 1);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind == TPURT_ARG_INT_LIST) size += align8(sizeof(int64_t) * (size_t)a->u.ints.len);
    if (a->kind == TPURT_ARG_FLOAT_LIST) size += align8(sizeof(double) * (size_t)a->u.floats.len);
    if (a->kind == TPURT_ARG_STRING && a->u.str) size += align8(strlen(a->u.str) + 1);
  }
  char* block = tpurt_xmalloc(size + 8);
  tpurt_arg_t* args = (tpurt_arg_t*)block;
  char* at = block + align8(sizeof(tpurt_arg_t) * (size_t)call->num_args);
  tpurt_result_t* results = (tpurt_result_t*)at;
  at += align8(sizeof(tpurt_result_t) * (size_t)num_results);
  memcpy(args, call->args, sizeof(tpurt_arg_t) * (size_t)call->num_args);
  for (int32_t i = 0; i < call->num_args; ++i) {
    tpurt_arg_t* a = &args[i];
    if (a->kind == TPURT_ARG_TENSOR) {
      retain_recorded(g, a->u.tensor.storage);
    } else if (a->kind == TPURT_ARG_INT_LIST && a->u.ints.len > 0) {
      memcpy(at, a->u.ints.data, sizeof(int64_t) * (size_t)a->u.ints.len);
      a->u.ints.data = (const int64_t*)at;
      at += align8(sizeof(int64_t) * (size_t)a->u.ints.len);
    } else if (a->kind == TPURT_ARG_FLOAT_LIST && a->u.floats.len > 0) {
      memcpy(at, a->u.floats.data, sizeof(double) * (size_t)a->u.floats.len);
      a->u.floats.data = (const double*)at;
      at += align8(sizeof(double) * (size_t)a->u.floats.len);
    } else if (a->kind == TPURT_ARG_STRING && a->u.str) {
      size_t n = strlen(a->u.str) + 1;
      memcpy(at, a->u.str, n);
      a->u.str = at;
      at += align8(n);
    }
  }
  memcpy(at, call->name, strlen(call->name) + 1);
  for (int32_t k = 0; k < num_results; ++k) {
    results[k] = call->results[k];
    retain_recorded(g, results[k].storage);
  }
  recorded_call_t* r = &g->calls[g->num_calls++];
  r->call = *call;
  r->call.name = at;
  r->call.args = args;
  r->call.results = NULL;
  r->call.num_results = 0;
  r->results = results;
  r->num_results = num_results;
}

static void free_calls(recorded_call_t* calls, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    recorded_call_t* r = &calls[i];
    for (int32_t j = 0; j < r->call.num_args; ++j)
      if (r->call.args[j].kind == TPURT_ARG_TENSOR) tpurt_storage_release(r->call.args[j].u.tensor.storage);
    for (int32_t k = 0; k < r->num_results; ++k) tpurt_storage_release(r->results[k].storage);
    free((void*)r->call.args); /* the block */
  }
  free(calls);
}

/* The storages |r| writes: its results and its Tensor(a!) args. */
static void poison_writes(const recorded_call_t* r, tpurt_borrowed_status_t cause, const char* origin) {
  for (int32_t k = 0; k < r->num_results; ++k)
    if (r->results[k].storage) storage_poison(r->results[k].storage, cause, origin);
  for (int32_t j = 0; j < r->call.num_args; ++j) {
    const tpurt_arg_t* a = &r->call.args[j];
    if (a->kind == TPURT_ARG_TENSOR && a->is_write && a->u.tensor.storage)
      storage_poison(a->u.tensor.storage, cause, origin);
  }
}

/* The poison of the first operand of |r| that a failed op lost, or NULL. */
static tpurt_borrowed_status_t lost_operand(const recorded_call_t* r) {
  for (int32_t j = 0; j < r->call.num_args; ++j) {
    const tpurt_arg_t* a = &r->call.args[j];
    if (a->kind == TPURT_ARG_TENSOR && a->u.tensor.storage && a->u.tensor.storage->poison)
      return a->u.tensor.storage->poison;
  }
  return NULL;
}

/* A recorded op whose every value died with the graph (a temporary whose
** only holders are recordings) is skipped, as the fused program would skip
** it. Another recording that reads it holds a reference too. */
static bool call_is_dead(const recorded_call_t* r) {
  for (int32_t j = 0; j < r->call.num_args; ++j)
    if (r->call.args[j].kind == TPURT_ARG_TENSOR && r->call.args[j].is_write) return false;
  for (int32_t k = 0; k < r->num_results; ++k)
    if (r->results[k].storage && tpurt_refcount_get(&r->results[k].storage->refcount) > 1) return false;
  return r->num_results > 0;
}

/* A fused graph failed with |cause| (consumed): its ops run again one by one
** as strict eager runs them, so that every value that does not depend on
** the op that fails is computed and kept, as strict eager keeps it. That
** op's writes, and everything computed from them, are marked lost with its
** error, which names it. Returns that error; if every op ran, NULL for a
** graph that was out of memory as a whole, else |cause| (annotated). */
static TPURT_MUST_USE tpurt_status_t replay_calls(recorded_call_t* calls, int32_t n, tpurt_status_t cause) {
  tpurt_status_t first = NULL;
  for (int32_t i = 0; i < n; ++i) {
    recorded_call_t* r = &calls[i];
    tpurt_borrowed_status_t lost = lost_operand(r);
    if (lost) {
      /* the same loss, naming the op that failed, not a loss of a loss */
      for (int32_t k = 0; k < r->num_results; ++k)
        if (r->results[k].storage) storage_poison_copy(r->results[k].storage, lost);
      for (int32_t j = 0; j < r->call.num_args; ++j) {
        const tpurt_arg_t* a = &r->call.args[j];
        if (a->kind == TPURT_ARG_TENSOR && a->is_write && a->u.tensor.storage &&
            a->u.tensor.storage->poison != lost)
          storage_poison_copy(a->u.tensor.storage, lost);
      }
      continue;
    }
    if (call_is_dead(r)) continue;
    tpurt_status_t st = engine_op_replay_locked(&r->call, r->results, r->num_results);
    if (!st) continue;
    char origin[160];
    snprintf(origin, sizeof(origin), "computed by %s, op %d of %d in a fused graph", r->call.name, (int)i + 1,
             (int)n);
    poison_writes(r, st, origin);
    if (!first) {
      char context[160];
      snprintf(context, sizeof(context), "%s (op %d of %d in a fused graph)", r->call.name, (int)i + 1,
               (int)n);
      first = tpurt_status_annotate_consume(st, context);
    } else {
      tpurt_status_free(st);
    }
  }
  if (first) {
    tpurt_status_free(cause);
    return first;
  }
  /* Every op ran alone. A graph too big as a whole (out of memory) is no
  ** error any more; any other failure of the graph (an internal error in
  ** its lowering or compile) is still reported, though no value was lost. */
  if (tpurt_status_code(cause) == TPURT_RESOURCE_EXHAUSTED) {
    tpurt_status_free(cause);
    return NULL;
  }
  return tpurt_status_annotate_consume(cause, "the fused graph failed; its ops ran again one by one");
}

/*===--- running ---===*/

static void graph_clear(graph_t* g) {
  graph_t* next = g->next_thread;
  free_calls(g->calls, g->num_calls);
  for (int32_t i = 0; i < g->num_entries; ++i) {
    tpurt_storage_t* s = g->entries[i].storage;
    if (s->graph_epoch == g->epoch) s->graph_epoch = 0; /* else another graph read it since */
    tpurt_storage_release(s);
  }
  for (int32_t i = 0; i < g->num_bindings; ++i) pjrt_buffer_release(g->bindings[i].buffer);
  free(g->entries);
  free(g->bindings);
  free(g->history);
  free(g->prev);
  free(g->last_at);
  ir_func_free(g->func);
  memset(g, 0, sizeof(*g));
  g->next_thread = next;
}

void graph_discard(graph_t* g) { graph_clear(g); }

/* Host numbers already uploaded for one launch, by value: most numbers of a
** step repeat (1.0, an epsilon, a size: a step of the tiny FLUX pipeline
** binds 80, 22 distinct), and each upload is a plugin call of about a
** microsecond. So a value is uploaded once and its buffer passed for every
** parameter that holds it (no program donates an argument). Open
** addressing over a fixed table: when it fills, later values are simply
** uploaded each time. */
#define SEEN_SLOTS 256 /* power of two */

typedef struct seen_numbers_s {
  int32_t at[SEEN_SLOTS]; /* binding index + 1; 0: empty */
} seen_numbers_t;

static bool same_number(const binding_t* a, const binding_t* b) {
  return a->type.dtype == b->type.dtype && memcmp(a->bytes, b->bytes, tpurt_dtype_size(a->type.dtype)) == 0;
}

/* The slot for |b|'s value: one holding an equal number, or an empty one;
** NULL when the table is full. Only scalars (what numbers are) take part. */
static int32_t* seen_slot(seen_numbers_t* seen, const binding_t* bindings, const binding_t* b) {
  if (b->kind != BIND_HOST || b->type.rank != 0) return NULL;
  uint64_t h = tpurt_hash_u64(tpurt_hash_u64(TPURT_HASH_SEED, (uint64_t)b->type.dtype), b->bytes[0]);
  for (uint32_t probe = 0, i = (uint32_t)h & (SEEN_SLOTS - 1); probe < SEEN_SLOTS;
       ++probe, i = (i + 1) & (SEEN_SLOTS - 1)) {
    int32_t at = seen->at[i];
    if (at == 0 || same_number(&bindings[at - 1], b)) return &seen->at[i];
  }
  return NULL;
}

/* Uploads host bindings and collects the launch arguments. |inputs| supply
** placeholders (may be NULL when there are none); |rng| (NULL in fused eager)
** the generator's (seed, offset) from which a program's RNG states are drawn. */
static TPURT_MUST_USE tpurt_status_t bind_args(const binding_t* bindings, int32_t n, int device,
                                               pjrt_buffer_t* const* inputs, const uint64_t* rng,
                                               pjrt_buffer_t** args, bool* owned) {
  seen_numbers_t seen = {{0}};
  for (int32_t i = 0; i < n; ++i) {
    const binding_t* b = &bindings[i];
    owned[i] = false;
    args[i] = NULL;
    int32_t* slot = NULL;
    if (b->kind == BIND_BUFFER) {
      args[i] = b->buffer;
    } else if (b->kind == BIND_PLACEHOLDER) {
      args[i] = inputs[b->input];
    } else if ((slot = seen_slot(&seen, bindings, b)) && *slot) {
      args[i] = args[*slot - 1];
    } else {
      owned[i] = true;
      uint64_t fresh[2];
      const void* bytes = b->bytes;
      if (b->kind == BIND_RNG && rng) {
        engine_rng_state(rng[0], rng[1] + (uint64_t)b->input, fresh);
        bytes = fresh;
      }
      tpurt_status_t st =
          pjrt_buffer_from_host(device, b->type.dtype, b->type.rank, b->type.dims, bytes, &args[i]);
      if (st) {
        for (int32_t j = 0; j < i; ++j)
          if (owned[j]) pjrt_buffer_release(args[j]);
        return st;
      }
      if (slot) *slot = i + 1;
    }
  }
  return NULL;
}

static void release_args(pjrt_buffer_t** args, const bool* owned, int32_t n) {
  for (int32_t i = 0; i < n; ++i)
    if (owned[i]) pjrt_buffer_release(args[i]);
}

tpurt_status_t graph_flush_locked(int reason) { return graph_flush_graph_locked(graph_current(), reason); }

tpurt_status_t graph_settle_locked(const tpurt_storage_t* storage) {
  graph_t* g = graph_holding(storage);
  if (!g || g == graph_current()) return NULL;
  if (g->tracing)
    return tpurt_status_create(TPURT_FAILED_PRECONDITION,
                               "a value computed inside a graph that another thread is compiling was used; "
                               "pass values between threads outside torch.compile regions");
  return graph_flush_graph_locked(g, GRAPH_FLUSH_OTHER_THREAD);
}

/* Marks the value |e| was to get as lost because of |cause|, naming the op
** that computed it. */
static void poison_entry(const graph_t* g, const entry_t* e, tpurt_borrowed_status_t cause) {
  char origin[160] = "computed in a fused graph"; /* written before any op: no op to name */
  if (e->writer >= 0)
    snprintf(origin, sizeof(origin), "computed by %s, op %d of %d in a fused graph", e->writer_name,
             (int)e->writer + 1, (int)g->num_ops);
  storage_poison(e->storage, cause, origin);
}

/* |g| failed with |cause| (consumed): the graph is closed, then its ops run
** again one by one (replay_calls). A graph that recorded no calls (e.g. one
** whose op list was cut short) loses the values it was to compute: they
** are marked, so that a later read raises this error instead of seeing
** zeros or the value from before the graph. */
static TPURT_MUST_USE tpurt_status_t replay_failed_graph(graph_t* g, tpurt_status_t cause) {
  recorded_call_t* calls = g->calls;
  int32_t n = g->num_calls;
  if (n == 0) {
    for (int32_t i = 0; i < g->num_entries; ++i)
      if (g->entries[i].written) poison_entry(g, &g->entries[i], cause);
    graph_clear(g);
    return cause;
  }
  g->calls = NULL;
  g->num_calls = g->cap_calls = 0;
  graph_clear(g);
  tpurt_status_t status = replay_calls(calls, n, cause);
  free_calls(calls, n);
  return status;
}

/* cache_print_fn for a pending graph: its module text, on a cache miss. */
static TPURT_MUST_USE tpurt_status_t print_graph(void* graph, char** out_text, size_t* out_size) {
  return ir_func_print(((graph_t*)graph)->func, out_text, out_size);
}

tpurt_status_t graph_flush_graph_locked(graph_t* g, int reason) {
  if (g && g->compiling) {
    /* Its owner is compiling it: once it ran, the values are there (or
    ** poisoned, which the caller checks). */
    while (g->compiling) engine_wait();
    return NULL;
  }
  if (!g || !g->func) return NULL;
  if (g->tracing) return NULL; /* a trace ends only with tpurt_trace_end */
  ++g_flush_counts[reason];
  note_ir_error(g);
  tpurt_borrowed_status_t ir_error = ir_func_status(g->func);
  if (ir_error) {
    /* The function is unusable: name the op whose lowering broke it. */
    tpurt_status_t status = tpurt_status_create(
        TPURT_INTERNAL, "internal error in the pending graph, in %s (op %d of %d): %s", g->ir_error_op_name,
        (int)g->ir_error_op, (int)g->num_ops, tpurt_status_message(ir_error));
    return replay_failed_graph(g, status);
  }
  /* Outputs: written storages that someone outside the graph still holds. */
  int32_t n_out = 0;
  int32_t* which = tpurt_xmalloc(sizeof(int32_t) * (size_t)(g->num_entries + 1));
  ir_value_t* values = tpurt_xmalloc(sizeof(ir_value_t) * (size_t)(g->num_entries + 1));
  for (int32_t i = 0; i < g->num_entries; ++i) {
    entry_t* e = &g->entries[i];
    if (!e->written || tpurt_refcount_get(&e->storage->refcount) - e->recorded <= 1) continue;
    which[n_out] = i;
    values[n_out++] = e->value;
  }
  if (n_out == 0) {
    free(which);
    free(values);
    graph_clear(g);
    return NULL;
  }
  ir_func_set_results(g->func, values, n_out);
  char* text = NULL;
  size_t size = 0;
  char label[320];
  snprintf(label, sizeof(label), "fused graph of %d ops (%.80s ... %.80s)", g->num_ops, g->first_op_name,
           g->last_op);
  cache_shadow_label(label);
  tpurt_status_t status = sort_bindings(g);
  int32_t n = g->num_bindings;
  pjrt_buffer_t** args = tpurt_xmalloc(sizeof(void*) * (size_t)(n + 1));
  bool* owned = tpurt_xmalloc(sizeof(bool) * (size_t)(n + 1));
  pjrt_buffer_t** outs = tpurt_xmalloc(sizeof(void*) * (size_t)n_out);
  if (!status) status = bind_args(g->bindings, n, g->device, NULL, NULL, args, owned);
  const bool bound = !status;
  /* Sharded operands make the graph one SPMD program over their mesh. */
  const pjrt_sharding_t* mesh = NULL;
  if (!status) status = spmd_mesh_of(args, n, &mesh);
  pjrt_sharding_t* result_shardings = NULL;
  ir_type_t* result_types = NULL;
  pjrt_executable_t* exe = NULL;
  const char* previous_label = pjrt_swap_compile_label(label); /* the long-compile notice */
  const tpurt_compile_kind_t previous_kind = pjrt_swap_compile_kind(TPURT_COMPILE_KIND_FUSED_GRAPH);
  if (!status && mesh) {
    result_shardings = tpurt_xcalloc((size_t)n_out, sizeof(pjrt_sharding_t));
    result_types = tpurt_xcalloc((size_t)n_out, sizeof(ir_type_t));
    for (int32_t k = 0; k < n_out; ++k) {
      result_types[k] = *ir_value_type(g->func, values[k]);
      spmd_result_sharding(mesh, args, n, &result_types[k], g->entries[which[k]].storage->buffer,
                           &result_shardings[k]);
    }
    status = ir_func_print(g->func, &text, &size);
    if (!status) status = spmd_get_or_compile(text, mesh, args, n, result_shardings, n_out, &exe);
  } else if (!status) {
    /* A step of a loop is the same graph every time: found by its
    ** encoding, it is not printed again. */
    char* encoding = NULL;
    size_t encoding_size = 0;
    bool hit = false;
    if (tpurt_config()->print_mlir) { /* before compiling: the text helps most when that fails */
      status = ir_func_print(g->func, &text, &size);
      if (!status) fprintf(stderr, "// fused graph of %d ops\n%s\n", g->num_ops, text);
    }
    if (!status) status = ir_func_encode(g->func, &encoding, &encoding_size);
    /* The owner compiles its own graph with the engine lock released (not
    ** inside the engine's nested ops, whose callers keep the lock): no one
    ** else touches the graph meanwhile, since a thread that needs it waits
    ** for |compiling| to clear, and its bound buffers are its own
    ** references. A graph flushed by another thread compiles under the
    ** lock: its owner may be recording into it. */
    const bool unlock = !status && g == graph_current() && engine_may_unlock();
    if (unlock) {
      g->compiling = true;
      engine_unlock();
    }
    if (!status) status = cache_get_or_compile_encoded(encoding, encoding_size, print_graph, g, &exe, &hit);
    if (unlock) {
      engine_lock();
      g->compiling = false;
      engine_broadcast();
    }
    free(encoding);
    if (status) {
      char context[352];
      snprintf(context, sizeof(context), "compiling the %s", label);
      status = tpurt_status_annotate_consume(status, context);
    }
  }
  (void)pjrt_swap_compile_kind(previous_kind);
  (void)pjrt_swap_compile_label(previous_label);
  free(text);
  if (!status) {
    status = mesh ? spmd_run(exe, mesh, args, n, result_shardings, result_types, n_out, outs, label)
                  : pjrt_execute(exe, g->device, args, (size_t)n, outs, (size_t)n_out, label);
    if (!status)
      for (int32_t k = 0; k < n_out; ++k) storage_set_buffer_consume(g->entries[which[k]].storage, outs[k]);
  }
  if (bound) release_args(args, owned, n);
  free(result_shardings);
  free(result_types);
  pjrt_executable_release(exe); /* the cache keeps its own reference */
  free(args);
  free(owned);
  free(outs);
  free(which);
  free(values);
  /* A graph that fails is replayed op by op: what does not depend on the
  ** failing op is kept, the rest is marked lost with its error. */
  if (status) return replay_failed_graph(g, status);
  graph_clear(g);
  return NULL;
}

tpurt_status_t tpurt_flush(void) {
  engine_lock();
  tpurt_status_t status = graph_flush_locked(GRAPH_FLUSH_SYNCHRONIZE);
  engine_unlock();
  return status;
}

/*===--- tracing for torch.compile ---===*/

struct tpurt_program_s {
  /* Its program, compiled or compiling on the pool (a reference; NULL for a
  ** compile-only trace, which never runs here). */
  compiled_t* compiled;
  char* label; /* what its launches are called (the compile label), owned */
  int32_t num_inputs;
  ir_type_t* input_types;
  binding_t* bindings; /* captured buffers retained */
  int32_t num_bindings;
  int32_t num_rng; /* RNG states drawn per run */
  int32_t num_outputs;
  ir_type_t* output_types; /* physical (dense) types */
  bool* output_permuted;   /* returned in the traced output's memory order */
  int8_t (*output_perm)[TPURT_MAX_RANK];
  char* text; /* the module, for debugging */
};

/* This thread's traces compile for the shadow target only (see
** tpurt_trace_set_compile_only). */
static _Thread_local bool t_compile_only TPURT_GUARDED_BY(thread);

void tpurt_trace_set_compile_only(bool on) { t_compile_only = on; }

tpurt_status_t tpurt_trace_begin(int device) {
  engine_lock();
  tpurt_status_t status = graph_flush_locked(GRAPH_FLUSH_MODE_CHANGE);
  if (!status) {
    graph_t* g = graph_open(device);
    g->tracing = true;
  }
  engine_unlock();
  return status;
}

/* Input |index| of the trace, split as |sharding| (NULL: one device). */
static TPURT_MUST_USE tpurt_status_t trace_input(const tpurt_tensor_t* placeholder, int32_t index,
                                                 const pjrt_sharding_t* sharding) {
  engine_lock();
  graph_t* g = graph_current();
  tpurt_status_t status = NULL;
  if (!g || !g->tracing) {
    status = tpurt_status_create(TPURT_FAILED_PRECONDITION, "tpurt_trace_input outside a trace");
  } else if (!view_is_contiguous(placeholder) || placeholder->offset != 0) {
    status = tpurt_status_create(TPURT_INVALID_ARGUMENT, "trace input %d must be a dense tensor", index);
  } else {
    binding_t* b = add_binding(g);
    b->kind = BIND_PLACEHOLDER;
    b->input = index;
    b->type = ir_type_make(placeholder->dtype, placeholder->rank, placeholder->sizes);
    if (sharding) {
      b->sharded = true;
      b->sharding = *sharding;
    }
    ir_value_t v = ir_param(g->func, b->type);
    /* the storage may be larger than the tensor: model it as the tensor */
    entry_t* e = entry_of(g, placeholder->storage);
    if (e) {
      status = tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                   "trace input %d shares its storage with another input", index);
    } else {
      add_entry(g, placeholder->storage, v);
    }
  }
  engine_unlock();
  return status;
}

tpurt_status_t tpurt_trace_input(const tpurt_tensor_t* placeholder, int32_t index) {
  return trace_input(placeholder, index, NULL);
}

tpurt_status_t tpurt_trace_input_sharded(const tpurt_tensor_t* placeholder, int32_t index,
                                         const tpurt_sharding_spec_t* spec) {
  pjrt_sharding_t sh = {
      .num_devices = spec->num_devices, .mesh_rank = spec->mesh_rank, .rank = placeholder->rank};
  const int32_t max_devices = (int32_t)(sizeof sh.devices / sizeof sh.devices[0]);
  if (spec->num_devices < 1 || spec->num_devices > max_devices || spec->mesh_rank < 1 ||
      spec->mesh_rank > PJRT_MAX_MESH_RANK)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "trace input %d: a mesh has 1 to %d devices and 1 to %d axes", index,
                               max_devices, PJRT_MAX_MESH_RANK);
  /* partition p is the target's device p: the mesh is a shape, not this host's devices */
  for (int32_t i = 0; i < spec->num_devices; ++i) sh.devices[i] = i;
  memcpy(sh.mesh_shape, spec->mesh_shape, sizeof(int64_t) * (size_t)spec->mesh_rank);
  memset(sh.dim_axis, -1, sizeof(sh.dim_axis));
  if (placeholder->rank) memcpy(sh.dim_axis, spec->dim_axis, (size_t)placeholder->rank);
  tpurt_status_t status = pjrt_sharding_check_layout(&sh, placeholder->rank, placeholder->sizes);
  if (status) return tpurt_status_annotate_consume(status, "sharded trace input");
  return trace_input(placeholder, index, &sh);
}

/* The module of a compile-only trace with sharded inputs, annotated for
** their mesh (*out_text NULL and *out_partitions 1 when none is sharded):
** the same Shardy form a run on sharded buffers compiles (spmd.c), so the
** target sees the program a mesh of its chips would run. Captured buffers
** that are sharded keep their split too. */
static TPURT_MUST_USE tpurt_status_t compile_only_spmd(const graph_t* g, const char* text,
                                                       const ir_value_t* values, int32_t num_outputs,
                                                       char** out_text, size_t* out_size,
                                                       int32_t* out_partitions) {
  *out_text = NULL;
  *out_size = 0;
  *out_partitions = 1;
  const int32_t n = g->num_bindings;
  const pjrt_sharding_t** params = tpurt_xcalloc((size_t)n + 1, sizeof(void*));
  ir_type_t* types = tpurt_xcalloc((size_t)n + 1, sizeof(ir_type_t));
  const pjrt_sharding_t* mesh = NULL;
  tpurt_status_t status = NULL;
  for (int32_t i = 0; i < n && !status; ++i) {
    const binding_t* b = &g->bindings[i];
    if (b->sharded) {
      params[i] = &b->sharding;
      types[i] = b->type;
    } else if (b->kind == BIND_BUFFER && b->buffer && b->buffer->sharding) {
      params[i] = b->buffer->sharding;
      types[i] = ir_type_make(b->buffer->dtype, b->buffer->rank, b->buffer->dims);
    }
    if (!params[i]) continue;
    if (!mesh) {
      mesh = params[i];
    } else if (mesh->num_devices != params[i]->num_devices || mesh->mesh_rank != params[i]->mesh_rank ||
               memcmp(mesh->mesh_shape, params[i]->mesh_shape, sizeof(int64_t) * (size_t)mesh->mesh_rank)) {
      status = tpurt_status_create(TPURT_INVALID_ARGUMENT,
                                   "a compile-only trace's inputs are sharded over two meshes (of %d and %d "
                                   "devices); one program spans one mesh",
                                   mesh->num_devices, params[i]->num_devices);
    }
  }
  if (!status && mesh) {
    pjrt_sharding_t* results = tpurt_xcalloc((size_t)num_outputs + 1, sizeof(pjrt_sharding_t));
    const pjrt_sharding_t** result_ptrs = tpurt_xcalloc((size_t)num_outputs + 1, sizeof(void*));
    for (int32_t k = 0; k < num_outputs; ++k) {
      spmd_result_sharding_typed(mesh, params, types, n, ir_value_type(g->func, values[k]), &results[k]);
      result_ptrs[k] = &results[k];
    }
    status = spmd_annotate_module(text, mesh, params, n, result_ptrs, num_outputs, out_text, out_size);
    if (!status) *out_partitions = mesh->num_devices;
    free(result_ptrs);
    free(results);
  }
  free(types);
  free(params);
  return status;
}

typedef struct program_job_s {
  compiled_t* compiled; /* a reference of its own */
  char* text;
  size_t size;
  tpurt_compile_kind_t forced_kind; /* the tracing thread's (a block counts as a block) */
  char label[];
} program_job_t;

static void compile_program_job(void* arg) {
  program_job_t* job = arg;
  pjrt_executable_t* exe = NULL;
  bool hit = false;
  const tpurt_compile_kind_t forced = pjrt_force_compile_kind(job->forced_kind);
  const tpurt_compile_kind_t site = pjrt_swap_compile_kind(TPURT_COMPILE_KIND_COMPILED_GRAPH);
  const char* label = pjrt_swap_compile_label(job->label);
  cache_shadow_label(job->label);
  tpurt_status_t status = cache_get_or_compile(job->text, job->size, &exe, &hit);
  cache_shadow_label(NULL);
  (void)pjrt_swap_compile_label(label);
  (void)pjrt_swap_compile_kind(site);
  (void)pjrt_force_compile_kind(forced);
  if (status) status = tpurt_status_annotate_consume(status, "compiling the traced program failed");
  compiled_finish_consume(job->compiled, exe, status);
  tpurt_status_free(status);
  compiled_release(job->compiled);
  free(job->text);
  free(job);
  queue_job_done();
}

/* Compiles |text| (copied) for |compiled| on the pool. */
static void compile_program_on_pool(compiled_t* compiled, const char* text, size_t size, const char* label) {
  const size_t label_size = strlen(label) + 1;
  program_job_t* job = tpurt_xcalloc(1, sizeof(*job) + label_size);
  memcpy(job->label, label, label_size);
  job->text = tpurt_xmalloc(size + 1);
  memcpy(job->text, text, size);
  job->text[size] = '\0';
  job->size = size;
  job->forced_kind = pjrt_forced_compile_kind();
  compiled_retain(compiled);
  job->compiled = compiled;
  queue_job_submit(compile_program_job, job);
}

tpurt_status_t tpurt_trace_end(const tpurt_tensor_t* outputs, int32_t num_outputs, int32_t num_inputs,
                               tpurt_program_t** out_program) {
  *out_program = NULL;
  engine_lock();
  graph_t* g = graph_current();
  tpurt_status_t status = NULL;
  if (!g || !g->tracing) {
    engine_unlock();
    return tpurt_status_create(TPURT_FAILED_PRECONDITION, "tpurt_trace_end without tpurt_trace_begin");
  }
  if (ir_func_status(g->func))
    status = tpurt_status_create(TPURT_INTERNAL, "internal error in the traced graph: %s",
                                 tpurt_status_message(ir_func_status(g->func)));
  ir_value_t* values = tpurt_xmalloc(sizeof(ir_value_t) * (size_t)(num_outputs + 1));
  bool* permuted = tpurt_xcalloc((size_t)num_outputs + 1, sizeof(bool));
  int8_t(*perms)[TPURT_MAX_RANK] = tpurt_xcalloc((size_t)num_outputs + 1, sizeof(*perms));
  for (int32_t k = 0; k < num_outputs && !status; ++k) {
    const tpurt_tensor_t* t = &outputs[k];
    ir_value_t base = graph_storage_value(g, t->storage, t->dtype);
    values[k] = view_read(g->func, base, t, IR_NONE); /* a trace is one fixed graph */
    /* An output traced with permuted dense strides (e.g. attention output
    ** saved for the backward graph) keeps them: the graph that receives it
    ** may view it in a way only those strides allow. */
    int64_t order[TPURT_MAX_RANK];
    if (view_memory_order(t, order)) {
      values[k] = ir_transpose(g->func, values[k], order);
      permuted[k] = true;
      for (int32_t i = 0; i < t->rank; ++i) perms[k][order[i]] = (int8_t)i;
    }
  }
  char* text = NULL;
  size_t size = 0;
  pjrt_executable_t* exe = NULL;
  compiled_t* compiled = NULL;
  if (!status) {
    ir_func_set_results(g->func, values, num_outputs);
    status = sort_bindings(g);
  }
  if (!status) status = ir_func_print(g->func, &text, &size);
  /* the target report names a traced program by its compile label (the
  ** torch.compile frame and graph kind) where the caller set one */
  const char* compile_label = pjrt_swap_compile_label(NULL);
  (void)pjrt_swap_compile_label(compile_label);
  if (!status && !t_compile_only) {
    for (int32_t i = 0; i < g->num_bindings && !status; ++i)
      if (g->bindings[i].sharded)
        status = tpurt_status_create(TPURT_FAILED_PRECONDITION,
                                     "trace input %d is declared sharded, which only a compile-only trace "
                                     "takes (tpurt_trace_set_compile_only; a run shards by its buffers)",
                                     g->bindings[i].input);
  }
  if (!status && t_compile_only) {
    /* for the target only: this plugin never compiles it (exe stays NULL,
    ** and tpurt_program_run refuses the program) */
    const char* options = NULL;
    size_t options_size = 0;
    char* spmd = NULL;
    size_t spmd_size = 0;
    int32_t partitions = 1;
    cache_shadow_label(compile_label ? compile_label : "compiled program (target only)");
    status = compile_only_spmd(g, text, values, num_outputs, &spmd, &spmd_size, &partitions);
    if (!status && !spmd) status = pjrt_current_compile_options(&options, &options_size, NULL);
    /* an SPMD program's options are the target's partitioning (as a run's shadow compile) */
    if (!status)
      status = spmd ? cache_shadow_compile_only(spmd, spmd_size, "", 0, partitions)
                    : cache_shadow_compile_only(text, size, options, options_size, 1);
    free(spmd);
  } else if (!status && queue_enabled()) {
    /* Compiled on the pool: the caller goes on (traces the next piece of a
    ** split graph, runs this one: its launch queues behind the compile). */
    compiled = compiled_create();
    compile_program_on_pool(compiled, text, size, compile_label ? compile_label : "compiled program");
  } else if (!status) {
    bool hit = false;
    cache_shadow_label(compile_label ? compile_label : "compiled program");
    const tpurt_compile_kind_t previous_kind = pjrt_swap_compile_kind(TPURT_COMPILE_KIND_COMPILED_GRAPH);
    /* Compiled without the engine lock, so other threads' ops and compiles
    ** (another graph of the same model, say) go on meanwhile. The trace is
    ** this thread's and is still marked tracing: no other thread flushes
    ** it, and one that reads a value of it is refused as during tracing;
    ** the captured buffers are retained by their bindings. */
    engine_unlock();
    status = cache_get_or_compile(text, size, &exe, &hit);
    engine_lock();
    (void)pjrt_swap_compile_kind(previous_kind);
    if (!status) {
      compiled = compiled_create();
      compiled_finish_consume(compiled, exe, NULL);
      exe = NULL;
    }
  }
  if (!status) {
    tpurt_program_t* p = tpurt_xcalloc(1, sizeof(*p));
    p->compiled = compiled;
    compiled = NULL;
    p->label = tpurt_xstrdup(compile_label ? compile_label : "compiled graph");
    p->num_inputs = num_inputs;
    p->num_bindings = g->num_bindings;
    p->num_rng = g->num_rng;
    p->bindings = g->bindings; /* take them: buffers stay retained */
    g->bindings = NULL;
    g->num_bindings = 0;
    p->input_types = tpurt_xcalloc((size_t)num_inputs + 1, sizeof(ir_type_t));
    for (int32_t i = 0; i < p->num_bindings; ++i) {
      binding_t* b = &p->bindings[i];
      if (b->kind == BIND_PLACEHOLDER && b->input >= 0 && b->input < num_inputs)
        p->input_types[b->input] = b->type;
      /* A number traced into the program is the same at every run: upload
      ** it once now instead of at each call. */
      if (b->kind == BIND_HOST && !status) {
        status =
            pjrt_buffer_from_host(g->device, b->type.dtype, b->type.rank, b->type.dims, b->bytes, &b->buffer);
        if (!status) b->kind = BIND_BUFFER;
      }
    }
    p->num_outputs = num_outputs;
    p->output_permuted = permuted;
    p->output_perm = perms;
    permuted = NULL;
    perms = NULL;
    p->output_types = tpurt_xmalloc(sizeof(ir_type_t) * (size_t)(num_outputs + 1));
    for (int32_t k = 0; k < num_outputs; ++k) p->output_types[k] = *ir_value_type(g->func, values[k]);
    p->text = text;
    text = NULL;
    if (status) {
      tpurt_program_free(p); /* releases its program */
      p = NULL;
    }
    *out_program = p;
  }
  if (status && exe) pjrt_executable_release(exe);
  compiled_release(compiled);
  free(permuted);
  free(perms);
  free(text);
  free(values);
  g->tracing = false;
  graph_clear(g);
  engine_unlock();
  return status;
}

bool tpurt_program_accepts(const tpurt_program_t* p, int device, const tpurt_tensor_t* inputs,
                           int32_t num_inputs) {
  if (num_inputs != p->num_inputs) return false;
  for (int32_t i = 0; i < num_inputs; ++i) {
    const tpurt_tensor_t* t = &inputs[i];
    const ir_type_t* want = &p->input_types[i];
    if (t->storage->device != device || t->dtype != want->dtype || t->rank != want->rank ||
        !view_is_contiguous(t))
      return false;
    for (int32_t d = 0; d < t->rank; ++d)
      if (t->sizes[d] != want->dims[d]) return false;
  }
  return true;
}

void tpurt_trace_abort(void) {
  engine_lock();
  graph_t* g = graph_current();
  if (g && g->tracing) graph_clear(g);
  engine_unlock();
}

const char* tpurt_program_text(const tpurt_program_t* program) { return program->text; }
int32_t tpurt_program_num_outputs(const tpurt_program_t* program) { return program->num_outputs; }

int tpurt_flush_reason_count(void) { return GRAPH_FLUSH_REASONS; }
const char* tpurt_flush_reason_name(int i) { return graph_flush_reason_name(i); }
uint64_t tpurt_flush_count(int i) { return graph_flush_count(i); }

void tpurt_program_free(tpurt_program_t* p) {
  if (!p) return;
  compiled_release(p->compiled); /* a launch still queued keeps its own reference */
  free(p->label);
  for (int32_t i = 0; i < p->num_bindings; ++i) pjrt_buffer_release(p->bindings[i].buffer);
  free(p->bindings);
  free(p->output_types);
  free(p->output_permuted);
  free(p->output_perm);
  free(p->input_types);
  free(p->text);
  free(p);
}

int32_t tpurt_program_num_rng(const tpurt_program_t* p) { return p->num_rng; }

/* Queues the launch of |p| with its bound |args| (|owned| says which the
** caller releases; the queue takes references of its own) behind its compile:
** |outs| receives futures of the program's output types. */
static TPURT_MUST_USE tpurt_status_t queue_program(tpurt_program_t* p, int device, pjrt_buffer_t** args,
                                                   const bool* owned, int32_t n, pjrt_buffer_t** outs) {
  for (int32_t k = 0; k < p->num_outputs; ++k) {
    size_t nbytes = tpurt_dtype_size(p->output_types[k].dtype);
    for (int32_t d = 0; d < p->output_types[k].rank; ++d) nbytes *= (size_t)p->output_types[k].dims[d];
    TPURT_RETURN_IF_ERROR(storage_check_fits(device, nbytes));
  }
  pjrt_buffer_t** params = tpurt_xmalloc(sizeof(void*) * (size_t)(n + 1));
  pjrt_buffer_t** futures = tpurt_xmalloc(sizeof(void*) * (size_t)(p->num_outputs + 1));
  for (int32_t i = 0; i < n; ++i) {
    params[i] = args[i];
    if (!owned[i]) pjrt_buffer_retain(params[i]);
  }
  for (int32_t k = 0; k < p->num_outputs; ++k) {
    const ir_type_t* t = &p->output_types[k];
    futures[k] = pjrt_buffer_future_create(device, t->dtype, t->rank, t->dims);
    outs[k] = futures[k];
    pjrt_buffer_retain(futures[k]); /* one for the queue, one for the result */
  }
  queue_push_consume(p->compiled, device, p->label, params, n, futures, p->num_outputs);
  /* the queue owns the owned args now: the caller must not release them */
  for (int32_t i = 0; i < n; ++i)
    if (owned[i]) args[i] = NULL;
  free(params);
  free(futures);
  return NULL;
}

tpurt_status_t tpurt_program_run(tpurt_program_t* p, int device, const tpurt_tensor_t* inputs,
                                 int32_t num_inputs, const uint64_t rng[2], tpurt_result_t* results,
                                 int32_t max_results) {
  if (!p->compiled)
    return tpurt_status_create(TPURT_FAILED_PRECONDITION,
                               "this program was compiled for the target only (a compile-only trace); "
                               "it cannot run here");
  if (num_inputs != p->num_inputs)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "compiled program takes %d inputs, got %d",
                               p->num_inputs, num_inputs);
  if (max_results < p->num_outputs)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "compiled program has %d outputs, room for %d",
                               p->num_outputs, max_results);
  engine_lock();
  tpurt_status_t status = graph_flush_locked(GRAPH_FLUSH_STRICT_OP);
  /* Inputs must be dense buffers of the traced shapes; a view is made
  ** dense first (one clone). */
  pjrt_buffer_t** in = tpurt_xcalloc((size_t)num_inputs + 1, sizeof(void*));
  tpurt_storage_t** tmp = tpurt_xcalloc((size_t)num_inputs + 1, sizeof(void*));
  for (int32_t i = 0; i < num_inputs && !status; ++i) {
    const tpurt_tensor_t* t = &inputs[i];
    status = graph_settle_locked(t->storage);
    if (!status) status = storage_check_poison(t->storage);
    if (status) break;
    pjrt_buffer_t* b = t->storage->buffer;
    bool dense = b && b->dtype == t->dtype && t->offset == 0 && view_is_contiguous(t) &&
                 (size_t)view_numel(t) * tpurt_dtype_size(t->dtype) == b->nbytes;
    if (dense && b->rank == t->rank) {
      bool same = true;
      for (int32_t d = 0; d < t->rank; ++d) same &= b->dims[d] == t->sizes[d];
      dense = same;
    }
    if (dense) {
      /* A reference of its own: making a later input dense may wait for
      ** another thread's graph with the lock released (engine_wait), and
      ** this storage's value could be swapped meanwhile. */
      pjrt_buffer_retain(b);
      in[i] = b;
    } else {
      status = engine_view_materialize_locked(t, &tmp[i]);
      if (!status) {
        in[i] = tmp[i]->buffer;
        pjrt_buffer_retain(in[i]);
      }
    }
  }
  int32_t n = p->num_bindings;
  pjrt_buffer_t** args = tpurt_xmalloc(sizeof(void*) * (size_t)(n + 1));
  bool* owned = tpurt_xmalloc(sizeof(bool) * (size_t)(n + 1));
  pjrt_buffer_t** outs = tpurt_xmalloc(sizeof(void*) * (size_t)(p->num_outputs + 1));
  if (!status) status = bind_args(p->bindings, n, device, in, rng, args, owned);
  const bool bound = !status;
  /* Sharded inputs (parameters split by parallelize_module): the traced
  ** module becomes one SPMD program over their mesh, compiled once per
  ** combination of input shardings. */
  const pjrt_sharding_t* mesh = NULL;
  if (!status) status = spmd_mesh_of(args, n, &mesh);
  if (!status && mesh) {
    pjrt_sharding_t* shardings = tpurt_xcalloc((size_t)p->num_outputs + 1, sizeof(pjrt_sharding_t));
    for (int32_t k = 0; k < p->num_outputs; ++k)
      spmd_result_sharding(mesh, args, n, &p->output_types[k], NULL, &shardings[k]);
    pjrt_executable_t* exe = NULL;
    const tpurt_compile_kind_t previous_kind = pjrt_swap_compile_kind(TPURT_COMPILE_KIND_COMPILED_GRAPH);
    status = spmd_get_or_compile(p->text, mesh, args, n, shardings, p->num_outputs, &exe);
    (void)pjrt_swap_compile_kind(previous_kind);
    if (!status)
      status =
          spmd_run(exe, mesh, args, n, shardings, p->output_types, p->num_outputs, outs, "compiled graph");
    pjrt_executable_release(exe);
    free(shardings);
  } else if (!status && (!compiled_ok(p->compiled) || queue_busy())) {
    /* behind its compile, or behind what is queued: outputs are futures */
    status = queue_program(p, device, args, owned, n, outs);
  } else if (!status) {
    status = pjrt_execute(p->compiled->executable, device, args, (size_t)n, outs, (size_t)p->num_outputs,
                          p->label);
  }
  if (bound) release_args(args, owned, n);
  if (!status) {
    for (int32_t k = 0; k < p->num_outputs; ++k) {
      tpurt_result_t* r = &results[k];
      memset(r, 0, sizeof(*r));
      r->storage = storage_wrap_buffer_consume(outs[k]);
      fill_result_shape(r, &p->output_types[k], p->output_permuted[k], p->output_perm[k]);
      r->device = device;
    }
  }
  for (int32_t i = 0; i < num_inputs; ++i) tpurt_storage_release(tmp[i]);
  free(tmp);
  for (int32_t i = 0; i < num_inputs; ++i) pjrt_buffer_release(in[i]);
  free(in);
  free(args);
  free(owned);
  free(outs);
  engine_unlock();
  return status;
}
