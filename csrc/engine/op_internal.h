/* op_internal.h: what the files of one strict-eager op share.
**
** Running one aten op is six jobs, one file each:
**   signature.c   the op's structural signature (the plan cache's key);
**   plan_cache.c  plans by signature: an LRU with its own lock and
**                 in-flight entries, so a thread needing a program that
**                 another thread is compiling waits for that key only;
**   lower_op.c    lowering one op into a module (or into the pending graph)
**                 and compiling a lowered module into a plan;
**   launch.c      binding a plan's parameters and launching it;
**   queue.c       launches queued behind compiles that run on the pool;
**   op.c          the entry points: find or build the plan, then launch;
** and metrics.c reads the counters of every room.
**
** Locks: the engine lock (engine_lock) guards storages' values, the pending
** graphs and launches made by op threads; the plan cache's lock guards the
** cache's table and list; the queue's lock its list and plans' compile
** state. Order: engine lock, then plan-cache or queue lock; nothing waits
** for the engine lock while holding either. A compile holds none, and the
** queue moves (compiles finish, queued launches run) without the engine
** lock, so a thread holding it may wait for the queue.
*/
#ifndef TPURT_ENGINE_OP_INTERNAL_H_
#define TPURT_ENGINE_OP_INTERNAL_H_

#include "../base/base.h"
#include "engine.h"

/*===--- plans ---===*/

/* What each plan output becomes; UNDEFINED outputs are not program outputs. */
enum { OUTPUT_RESULT = 0, OUTPUT_WRITEBACK = 1, OUTPUT_UNDEFINED = 2, OUTPUT_HOST_INT = 3 };

typedef struct plan_output_s {
  int32_t kind;
  bool permuted; /* logical dim i is physical dim perm[i] */
  int8_t perm[TPURT_MAX_RANK];
  int64_t host_int; /* OUTPUT_HOST_INT */
  int32_t index;    /* result number, or the flat arg whose storage is written */
  ir_type_t type;
} plan_output_t;

/* A plan is everything needed to run an op again without lowering it: the
** executable, how its parameters are bound (storage values, scalar values,
** RNG state) and what each output becomes (a new result storage, or the new
** value of a written storage). Reference counted: the plan cache holds one
** reference while the plan is listed, each launch queued behind its compile
** one more (plan_retain/plan_release). */
typedef struct plan_s {
  tpurt_refcount_t refcount;
  uint64_t hash;
  uint64_t* sig;
  size_t sig_len;
  /* False while the thread that claimed this key lowers and compiles it
  ** (plan-cache lock): such an entry is never launched directly or evicted,
  ** and other threads wanting the key wait for it or queue behind it. */
  bool ready;
  /* Its tables below are set (the claimer lowered it, under the engine
  ** lock): a thread that finds the plan in flight may queue a launch. */
  bool has_tables;
  /* Its program, compiled or compiling (a reference of its own: eviction
  ** never frees a program a queued launch still needs); its executable is
  ** read once the plan is ready. */
  compiled_t* compiled;
  int32_t num_params;
  lower_param_t* params;
  int32_t num_outputs;
  plan_output_t* outputs;
  int32_t num_program_outputs; /* outputs that are not UNDEFINED */
  int32_t num_results;
  uint64_t charge;       /* bytes counted against the budget */
  uint64_t program_hash; /* the executable cache's key hash of the program */
  bool from_disk;        /* the program was loaded from the disk tier */
  /* SPMD (an operand is sharded): the mesh the program spans, and the
  ** sharding of each program output; NULL for a one-device program. */
  pjrt_sharding_t* mesh;
  pjrt_sharding_t* output_shardings;
  struct plan_s* next;          /* bucket chain */
  struct plan_s *newer, *older; /* LRU list */
} plan_t;

/*===--- the signature (signature.c) ---===*/

/* An op's signature: op name, dtypes, shapes, views, attribute values; never
** buffer identities or scalar values (unless the rule keys on numbers). It
** lives in the op's own context; most fit the inline words. */
typedef struct sig_s {
  uint64_t* w;
  size_t n, cap;
  uint64_t inline_w[192];
} sig_t;

void sig_init(sig_t* sig);
void sig_free(sig_t* sig);
/* Fills |sig| for |call| (engine lock held: it reads storages' buffers). */
void sig_build(const tpurt_op_call_t* call, bool numbers_in_key, sig_t* sig);
uint64_t sig_hash(const sig_t* sig);
/* The first flat arg that shares |flat|'s storage: aliasing is structural. */
int32_t sig_storage_class(const tpurt_op_call_t* call, int32_t flat);

/*===--- the plan cache (plan_cache.c) ---===*/

typedef enum plan_lookup_e {
  PLAN_FOUND,   /* a ready plan: launch it */
  PLAN_CLAIMED, /* a new in-flight entry: the caller builds it, then publishes or abandons it */
  PLAN_BUSY,    /* another thread is building this key: queue behind it, or plan_cache_wait and look again */
} plan_lookup_t;

/* Looks |sig| (hash |hash|) up; engine lock held. *out_plan is the plan
** found, claimed or in flight, with a reference for the caller. */
plan_lookup_t plan_cache_lookup(const sig_t* sig, uint64_t hash, plan_t** out_plan);
void plan_retain(plan_t* plan);
/* Drops a reference; the last one frees the plan and its program's. */
void plan_release(plan_t* plan);
/* Returns once no thread is building the plan of |sig| (engine lock NOT held). */
void plan_cache_wait(const sig_t* sig, uint64_t hash);
/* Marks a claimed plan, now built, ready: it is charged to the budget, other
** plans are evicted over it, and waiters wake. */
void plan_cache_publish(plan_t* plan);
/* Unlists a claimed plan whose build failed, and wakes its waiters (who try
** it themselves, so each reports its own error); launches queued behind
** it fail with its failure (compiled_finish_consume). */
void plan_cache_abandon(plan_t* plan);
/* Unlists a ready plan (its program failed to run). */
void plan_cache_drop(plan_t* plan);
/* Plans held now and their bytes (metrics). */
void plan_cache_usage(uint64_t* out_count, uint64_t* out_bytes);

/*===--- lowering and compiling (lower_op.c) ---===*/

/* A module lowered from one op, ready to compile with no lock held: it no
** longer reads the op's storages. */
typedef struct lowered_s {
  char* text; /* the module (annotated with shardings for SPMD) */
  size_t size;
  const char* label; /* the op's name, borrowed from the call */
  int32_t num_params;
  lower_param_t* params;
  int32_t num_outputs;
  plan_output_t* outputs;
  int32_t num_program_outputs;
  int32_t num_results;
  pjrt_sharding_t* mesh; /* SPMD: the mesh and output shardings; else NULL */
  pjrt_sharding_t* output_shardings;
} lowered_t;

/* Lowers |call| under |rule|: into |graph| (fused eager and tracing; |out|
** unused) or into a module of its own in *out. Engine lock held. */
TPURT_MUST_USE tpurt_status_t lower_op(const lower_rule_t* rule, tpurt_op_call_t* call, graph_t* graph,
                                       lowered_t* out);
/* Moves the tables of |lowered| (parameters, outputs, mesh) into the
** claimed |plan|, leaving the module text to compile. Engine lock held, so
** that a thread finding the plan in flight sees them. */
void plan_adopt_tables(plan_t* plan, lowered_t* lowered);
/* Compiles the text of |lowered| (consumed) into |plan|'s program (its
** compiled_t then says how it went: compiled_finish_consume); needs no lock. */
TPURT_MUST_USE tpurt_status_t plan_compile_consume(plan_t* plan, lowered_t* lowered);
void lowered_free(lowered_t* lowered);

/* Host bytes of a number in |dtype| (PyTorch's static_cast semantics). */
void engine_scalar_bytes(const tpurt_arg_t* a, tpurt_dtype_t dtype, unsigned char* out);

/*===--- launching (launch.c) ---===*/

/* RESOURCE_EXHAUSTED if a result of |plan| is larger than all of |device|'s
** memory: said at the op, as an allocation failure is, whether the launch is
** made now or queued. */
TPURT_MUST_USE tpurt_status_t plan_check_fits(const plan_t* plan, int device);
/* Launches |plan| for |call|: binds its parameters, runs it, and gives the
** outputs to the call's results and written storages. Engine lock held. */
TPURT_MUST_USE tpurt_status_t plan_launch(const plan_t* plan, tpurt_op_call_t* call);
/* Binds the parameters of one-device |plan| for |call| on its device: in
** |out_buffers| (num_params), each a reference for the caller. */
TPURT_MUST_USE tpurt_status_t plan_bind_params(const plan_t* plan, const tpurt_op_call_t* call,
                                               pjrt_buffer_t** out_buffers);
/* Gives |outs| (one per program output, consumed) to |call|: new result
** storages and the new values of written storages. Engine lock held. */
void plan_hand_outputs_consume(const plan_t* plan, tpurt_op_call_t* call, pjrt_buffer_t** outs);

/*===--- queueing strict-eager ops (queue.c; the queue itself: engine.h) ---===*/

/* Queues a launch of |plan| for |call|: its parameters are bound now, its
** results and written storages get futures at once. Engine lock held. */
TPURT_MUST_USE tpurt_status_t queue_launch(plan_t* plan, tpurt_op_call_t* call);
/* Compiles |lowered| (consumed) into the claimed |plan| on the compile pool,
** then publishes it (or abandons it, annotated with |context|, copied). */
void queue_compile_consume(plan_t* plan, lowered_t* lowered, const char* context);

#endif /* TPURT_ENGINE_OP_INTERNAL_H_ */
