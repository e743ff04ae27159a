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
  int refcount; /* atomic */
  int device;
  size_t nbytes;
  uintptr_t address;
  /* The current value: NULL = never written (reads see zeros). Swapped
  ** under the engine lock; the buffer's shape is the natural N-d shape of
  ** the tensor that first wrote the whole storage. */
  pjrt_buffer_t* buffer;
};

/* The one engine lock: ops, value swaps and transfers hold it. */
void engine_lock(void);
void engine_unlock(void);

/* Replaces the storage's value (takes ownership of |buffer|). */
void storage_set_buffer(tpurt_storage_t* storage, pjrt_buffer_t* buffer);
/* A new storage holding |buffer| (takes ownership). */
tpurt_storage_t* storage_wrap_buffer(pjrt_buffer_t* buffer);

/* True if |view| is the whole storage, densely, in the buffer's dtype. */
bool view_is_whole(const tpurt_tensor_t* view);
bool view_is_contiguous(const tpurt_tensor_t* view);
int64_t view_numel(const tpurt_tensor_t* view);

/* Emits the read of |view| out of |base| (the storage value). */
ir_value_t view_read(ir_func_t* func, ir_value_t base, const tpurt_tensor_t* view);
/* Emits the new storage value after writing |update| (view-shaped, in the
** view's dtype) through |view| into |base|. */
ir_value_t view_write(ir_func_t* func, ir_value_t base, const tpurt_tensor_t* view, ir_value_t update);
/* The value an empty storage reads as: zeros, flat, in |dtype|. */
ir_value_t view_empty_base(ir_func_t* func, const tpurt_storage_t* storage, tpurt_dtype_t dtype);

/* Runs an op with the engine lock held. */
tpurt_status_t engine_op_run_locked(tpurt_op_call_t* call);

/* Live-object counter of storages (metrics). */
extern int64_t engine_live_storages;

#endif /* TPURT_ENGINE_ENGINE_H_ */
