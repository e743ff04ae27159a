/* engine.h: the engine room: storages and their values, the pending graph
** of one op, views read and written inside programs, the op-plan cache,
** execution and sync.
**
** Strict eager (DEFER_NEVER, the default): each aten op becomes a one-op
** graph that is flushed at once. A flush looks the op's structural
** signature up in the plan cache (op name, dtypes, shapes, views, attribute
** values; never buffer identities or scalar values); a miss lowers the op,
** prints the module and compiles it (through cache/), a hit skips straight
** to launching the executable.
*/
#ifndef TPURT_ENGINE_ENGINE_H_
#define TPURT_ENGINE_ENGINE_H_

#include <pthread.h>

#include "../ir/ir.h"
#include "../lower/lower.h"
#include "../pjrt/pjrt.h"

struct tpurt_storage_s {
  tpurt_refcount_t refcount;
  int device;
  size_t nbytes;
  uintptr_t address;
  /* The current value: NULL = never written (reads see zeros). Swapped
  ** under the engine lock; the buffer's shape is the natural N-d shape of
  ** the tensor that first wrote the whole storage. */
  pjrt_buffer_t* buffer;
  /* Membership in the pending graph (graph.c): valid when graph_epoch is the
  ** open graph's epoch; then graph_index is its entry there. */
  uint32_t graph_epoch;
  int32_t graph_index;
  /* Set when a pending graph that was to compute this storage's value
  ** failed: the value is lost, and every later use raises this error (a
  ** copy of the original, naming the op) instead of reading stale bytes or
  ** zeros. Owned; cleared by the next whole-storage write. */
  tpurt_status_t poison;
};

/* The one engine lock: storages' values, pending graphs, launches and
** transfers are guarded by it; compiles run without it. */
void engine_lock(void);
void engine_unlock(void);
/* Waits on the engine's condition (engine lock held; released while
** waiting) until engine_broadcast: a graph compiling without the lock ran.
** A thread that needs a value of a graph another thread is compiling waits
** here even inside nested ops, so callers hold references, never borrowed
** pointers to storages' buffers, across operand checks. */
void engine_wait(void);
void engine_broadcast(void);
/* The engine's own nested ops (a replayed fused op, a view made dense for a
** transfer, an op inside a host write) run between nested_begin and _end:
** their callers rely on the lock staying held, so nothing inside them
** releases it to compile. engine_may_unlock says whether this thread is
** outside all of them. */
void engine_nested_begin(void);
void engine_nested_end(void);
bool engine_may_unlock(void);

/* Replaces the storage's value with |buffer| (consumed: the storage keeps
** the caller's reference); a whole new value also clears a poison. */
void storage_set_buffer_consume(tpurt_storage_t* storage, pjrt_buffer_t* buffer);
/* Marks the storage's value as lost because of |cause| (copied; the caller
** keeps |cause|); |origin| (or NULL) says what computed it, e.g. "computed
** by aten::mul.Tensor, op 2 of 5 in a fused graph". */
void storage_poison(tpurt_storage_t* storage, tpurt_borrowed_status_t cause, const char* origin);
/* NULL, or a new status repeating the error that lost the storage's value. */
/* Marks |storage| lost with another storage's |poison| as it is (a value
** computed from a lost one names the op that failed). */
void storage_poison_copy(tpurt_storage_t* storage, tpurt_borrowed_status_t poison);
TPURT_MUST_USE tpurt_status_t storage_check_poison(const tpurt_storage_t* storage);
/* RESOURCE_EXHAUSTED if |nbytes| exceed all of |device|'s memory (a value
** that can never be made there), else NULL. */
TPURT_MUST_USE tpurt_status_t storage_check_fits(int device, size_t nbytes);
/* A new storage holding |buffer| (consumed). */
tpurt_storage_t* storage_wrap_buffer_consume(pjrt_buffer_t* buffer);

/* True if |view| is the whole storage, densely, in the buffer's dtype. */
bool view_is_whole(const tpurt_tensor_t* view);
bool view_is_contiguous(const tpurt_tensor_t* view);
/* True if |view| is dense but not in row-major order (a permutation of a
** contiguous layout); |order| gets its dims from largest stride to smallest. */
bool view_memory_order(const tpurt_tensor_t* view, int64_t* order);
int64_t view_numel(const tpurt_tensor_t* view);

/* Emits the read of |view| out of |base| (the storage value). |offset| is
** the view's offset as a runtime 0-d i64 value, or IR_NONE to use
** view->offset as a constant. */
ir_value_t view_read(ir_func_t* func, ir_value_t base, const tpurt_tensor_t* view, ir_value_t offset);
/* Emits the new storage value after writing |update| (view-shaped, in the
** view's dtype) through |view| into |base| (|offset| as for view_read). */
ir_value_t view_write(ir_func_t* func, ir_value_t base, const tpurt_tensor_t* view, ir_value_t update,
                      ir_value_t offset);
/* The value an empty storage reads as: zeros, flat, in |dtype|. */
ir_value_t view_empty_base(ir_func_t* func, const tpurt_storage_t* storage, tpurt_dtype_t dtype);

/* Fills a result's sizes and dtype from the dense physical type of its
** value; with |permuted|, logical dim i is physical dim perm[i] (strides). */
void fill_result_shape(tpurt_result_t* result, const ir_type_t* physical, bool permuted, const int8_t* perm);

/* The THREE_FRY state for a generator at (seed, offset): every offset gets
** its own key, so calls never share a stream. */
void engine_rng_state(uint64_t seed, uint64_t offset, uint64_t out[2]);

/* Runs an op with the engine lock held, in the thread's eager mode. */
TPURT_MUST_USE tpurt_status_t engine_op_run_locked(tpurt_op_call_t* call);
/* Runs an op as its own program now, whatever the mode and without touching
** the pending graph: for the engine's own work that needs a real value (a
** host read of a view, a cross-device copy, a program's strided input).
** The caller has settled the pending graph for the storages involved. */
TPURT_MUST_USE tpurt_status_t engine_op_run_now_locked(tpurt_op_call_t* call);
/* A new dense storage holding |view|'s elements (one reference for the
** caller), computed now (engine_op_run_now_locked). */
TPURT_MUST_USE tpurt_status_t engine_view_materialize_locked(const tpurt_tensor_t* view,
                                                             tpurt_storage_t** out_dense);

/*===--- the launch queue (queue.c) ---===*/

/* Work need not wait for compiles. A launch whose program is still
** compiling is queued: its parameters are bound now, and its outputs are
** futures (pjrt_buffer_future_create) that the results hold at once, so
** the caller goes on while up to TORCH_TPU_COMPILE_THREADS programs compile
** on the pool. Queued launches run in the order they were queued, each
** once its program is compiled; while any waits, later launches of strict
** eager queue behind it. A future's reader waits for its value
** (pjrt_buffer_ready); a launch that fails (its compile, or the launch)
** fails its futures, and the device's next synchronize reports it. */

/* A program, compiled or compiling: a plan or a traced program holds one,
** each launch queued behind its compile another. |state| and |failure|
** change under the queue's lock, once; |executable| is read only after the
** state was seen COMPILED (or by the holder that compiled it). */
enum { COMPILED_PENDING = 0, COMPILED_OK = 1, COMPILED_FAILED = 2 };
typedef struct compiled_s {
  tpurt_refcount_t refcount;
  int32_t state;
  tpurt_status_t failure;        /* FAILED: why (owned) */
  pjrt_executable_t* executable; /* OK: a reference of its own */
} compiled_t;
compiled_t* compiled_create(void);
void compiled_retain(compiled_t* compiled);
void compiled_release(compiled_t* compiled);
/* Marks the compile of |compiled| done: with |executable| (consumed), or
** failed with |failure| (borrowed); then makes the launches that waited. */
void compiled_finish_consume(compiled_t* compiled, pjrt_executable_t* executable,
                             tpurt_borrowed_status_t failure);
/* True once |compiled| compiled successfully (then its executable may be read). */
bool compiled_ok(const compiled_t* compiled);
/* Runs a compile job |fn|(|job|) on the pool; the job calls queue_job_done
** at its end. Exit and fork wait for every job submitted. */
void queue_job_submit(tpurt_job_fn_t fn, void* job);
void queue_job_done(void);
/* Queues a launch of |compiled| on |device| named |name|: its arguments
** |params| and its outputs |outputs| (futures) are consumed references. */
void queue_push_consume(compiled_t* compiled, int device, const char* name, pjrt_buffer_t** params,
                        int32_t num_params, pjrt_buffer_t** outputs, int32_t num_outputs);
/* Whether this thread's work may compile on the pool and queue: a pool
** exists here and the thread sets no compile options of its own (they
** would not reach a compile on another thread). */
bool queue_enabled(void);
/* Whether a queued launch is still waiting (then strict eager queues behind it). */
bool queue_busy(void);
/* Returns once every launch queued before the call has been made (or has
** failed). Any lock may be held: the queue moves without the engine lock. */
void queue_drain(void);
/* queue_drain, then waits for every compile job on the pool to end (a
** traced program's too, run or not). Holds no lock meanwhile, and the
** caller must hold none a job takes (the engine lock). */
void queue_settle(void);
/* Launches made from the queue since the last reset (metrics). */
uint64_t queue_launch_count(void);
void queue_reset_count(void);

/*===--- the pending graph (graph.c) ---===*/

typedef struct graph_s graph_t;

enum {
  GRAPH_FLUSH_HOST_READ = 0,
  GRAPH_FLUSH_SYNCHRONIZE,
  GRAPH_FLUSH_SIZE_LIMIT,
  GRAPH_FLUSH_REPEATED_SEQUENCE,
  GRAPH_FLUSH_MODE_CHANGE,
  GRAPH_FLUSH_STRICT_OP,
  GRAPH_FLUSH_DEVICE_COPY,
  GRAPH_FLUSH_OTHER_THREAD, /* another thread used a value this graph holds */
  GRAPH_FLUSH_REASONS,
};

/* This thread's open graph, or NULL. */
graph_t* graph_current(void);
/* This thread's open graph, opened on |device| if none is. */
graph_t* graph_open(int device);
/* The open graph (of any thread) that holds a newer value of |storage|, or NULL. */
graph_t* graph_holding(const tpurt_storage_t* storage);
/* Runs another thread's graph if it holds a newer value of |storage|, so
** that this thread sees the value (engine lock held). */
TPURT_MUST_USE tpurt_status_t graph_settle_locked(const tpurt_storage_t* storage);
ir_func_t* graph_func(graph_t* graph);
int graph_device(const graph_t* graph);
int32_t graph_num_ops(const graph_t* graph);
uint64_t graph_first_op(const graph_t* graph);
/* Notes the op about to be lowered into the graph: the values it writes and
** an error its lowering leaves in the function are blamed on it. */
void graph_note_op(graph_t* graph, const char* name, uint64_t signature);
/* True if an op of |signature| recorded next would start a repeat of the ops
** before it (a loop step): fused eager flushes there. */
bool graph_repeats(graph_t* graph, uint64_t signature);
/* The storage's current value in the graph (a parameter bound to its buffer
** on first use, or zeros if it was never written). */
ir_value_t graph_storage_value(graph_t* graph, tpurt_storage_t* storage, tpurt_dtype_t dtype);
void graph_set_storage_value(graph_t* graph, tpurt_storage_t* storage, ir_value_t value);
/* A new storage whose value is |value| (one reference for the caller). */
tpurt_storage_t* graph_new_result(graph_t* graph, ir_value_t value);
/* Binds @main parameter |param_index| to host bytes. */
void graph_bind_host(graph_t* graph, int32_t param_index, ir_type_t type, const void* bytes, size_t size);
/* Binds @main parameter |param_index| to an RNG state: fixed in fused eager;
** in a traced program, drawn from the generator at each run instead. */
void graph_bind_rng(graph_t* graph, int32_t param_index, const uint64_t state[2]);
/* Whether @main parameter |param_index| is already bound. */
bool graph_param_bound(const graph_t* graph, int32_t param_index);
/* Runs this thread's open graph (engine lock held); a trace is never flushed. */
TPURT_MUST_USE tpurt_status_t graph_flush_locked(int reason);
/* Runs |graph| (any thread's; engine lock held). */
TPURT_MUST_USE tpurt_status_t graph_flush_graph_locked(graph_t* graph, int reason);
/* Drops the open graph without running it. */
void graph_discard(graph_t* graph);
/* Keeps a copy of |call| (just lowered into |graph|, fused eager only), so
** that if the graph fails its ops can be replayed one by one. */
void graph_record_call(graph_t* graph, const tpurt_op_call_t* call);
/* Runs one op of a failed fused graph again, as strict eager would
** (op.c): a functional op's new values go into |results|, the storages its
** fused recording gave the caller. An operand a failed op lost makes it
** fail with that loss. */
TPURT_MUST_USE tpurt_status_t engine_op_replay_locked(const tpurt_op_call_t* call, tpurt_result_t* results,
                                                      int32_t num_results);
bool graph_is_tracing(const graph_t* graph);
bool graph_has_storage(const graph_t* graph, const tpurt_storage_t* storage);
const char* graph_flush_reason_name(int reason);
uint64_t graph_flush_count(int reason);
void graph_reset_counts(void);

/*===--- SPMD (spmd.c) ---===*/

/* A copy of |text| (a printed module of N params and M results) for the
** devices of |mesh|: the partition count, the mesh as an sdy.mesh, and
** each @main argument and result carrying its sdy.sharding (NULL:
** replicated). Caller frees *out_text. */
TPURT_MUST_USE tpurt_status_t spmd_annotate_module(const char* text, const pjrt_sharding_t* mesh,
                                                   const pjrt_sharding_t* const* param_shardings,
                                                   int32_t num_params,
                                                   const pjrt_sharding_t* const* result_shardings,
                                                   int32_t num_results, char** out_text, size_t* out_size);
/* spmd_annotate_module with the shardings of argument buffers |args| (a
** NULL or one-device buffer is replicated) and of |results|. */
TPURT_MUST_USE tpurt_status_t spmd_annotate(const char* text, const pjrt_sharding_t* mesh,
                                            const pjrt_buffer_t* const* args, int32_t num_args,
                                            const pjrt_sharding_t* results, int32_t num_results,
                                            char** out_text, size_t* out_size);
/* The mesh of the sharded buffers among |args| (NULL: none); an error if
** two meshes meet. */
TPURT_MUST_USE tpurt_status_t spmd_mesh_of(pjrt_buffer_t* const* args, int32_t num_args,
                                           const pjrt_sharding_t** out_mesh);
/* The sharding of a program result of |type|: |prior|'s (the value it
** replaces) when of the same shape, else that of the first sharded arg of
** the same shape, else replicated on |mesh|. */
void spmd_result_sharding(const pjrt_sharding_t* mesh, pjrt_buffer_t* const* args, int32_t num_args,
                          const ir_type_t* type, const pjrt_buffer_t* prior, pjrt_sharding_t* out);
/* spmd_result_sharding for a program with no buffers (a compile-only
** trace): the first of the |num_params| parameters (types |param_types|,
** shardings |params|, NULL: replicated) of |type|'s shape lends its split. */
void spmd_result_sharding_typed(const pjrt_sharding_t* mesh, const pjrt_sharding_t* const* params,
                                const ir_type_t* param_types, int32_t num_params, const ir_type_t* type,
                                pjrt_sharding_t* out);
/* The executable of printed module |text| annotated with the shardings of
** |args| and |results|, for |mesh| (compiled once, then reused). */
TPURT_MUST_USE tpurt_status_t spmd_get_or_compile(const char* text, const pjrt_sharding_t* mesh,
                                                  pjrt_buffer_t* const* args, int32_t num_args,
                                                  const pjrt_sharding_t* results, int32_t num_results,
                                                  pjrt_executable_t** out_executable);
/* Launches it once across the mesh with one-device |args| (sharded ones
** give each device its shard, others are copied to every device); |outs|
** receives one sharded buffer per result. */
TPURT_MUST_USE tpurt_status_t spmd_run(pjrt_executable_t* executable, const pjrt_sharding_t* mesh,
                                       pjrt_buffer_t* const* args, int32_t num_args,
                                       const pjrt_sharding_t* results, const ir_type_t* result_types,
                                       int32_t num_results, pjrt_buffer_t** outs, const char* label);
/*===--- counters (metrics.c) ---===*/

/* The engine's counters: atomics, bumped from any thread with or without
** the engine lock, read and zeroed by tpurt_metrics_get/_reset. */
typedef struct engine_counters_s {
  _Atomic uint64_t plan_hits;     /* ops that found their plan */
  _Atomic uint64_t exec_hits;     /* plans built from a cached program */
  _Atomic uint64_t spmd_compiles; /* SPMD programs compiled */
  _Atomic int64_t live_storages;  /* storage objects alive (not reset) */
} engine_counters_t;
extern engine_counters_t engine_counters;

#endif /* TPURT_ENGINE_ENGINE_H_ */
