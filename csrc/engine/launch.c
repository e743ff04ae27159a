/* launch.c: launching a plan: its parameters bound to the op's storages
** and numbers, one program run (or one across an SPMD mesh), and its
** outputs handed to new result storages or written storages. Engine lock
** held throughout: it reads and swaps storages' values.
*/
#include "op_internal.h"

/* The buffer for @main parameter |prm| on |device|: a storage's own buffer
** (its shard when sharded, a copy when it lives on another device) or a
** new upload of a number. *out_owned says whether the caller releases it. */
static TPURT_MUST_USE tpurt_status_t bind_param(const lower_param_t* prm, const tpurt_op_call_t* call,
                                                int device, pjrt_buffer_t** out, bool* out_owned) {
  const tpurt_arg_t* a = &call->args[prm->arg];
  *out = NULL;
  *out_owned = true;
  if (prm->kind == LOWER_PARAM_STORAGE) {
    pjrt_buffer_t* b = a->u.tensor.storage->buffer;
    if (b->sharding || b->device == device) {
      *out = b;
      *out_owned = false;
      return NULL;
    }
    return pjrt_buffer_copy_to_device(b, device, out); /* a one-device operand, replicated */
  }
  if (prm->kind == LOWER_PARAM_SCALAR) {
    unsigned char bytes[8] = {0};
    engine_scalar_bytes(a, prm->dtype, bytes);
    return pjrt_buffer_from_host(device, prm->dtype, 0, NULL, bytes, out);
  }
  if (prm->kind == LOWER_PARAM_VIEW_OFFSET) {
    int64_t offset = a->u.tensor.offset;
    return pjrt_buffer_from_host(device, TPURT_DTYPE_I64, 0, NULL, &offset, out);
  }
  if (prm->kind == LOWER_PARAM_LIST_ITEM) {
    tpurt_arg_t item = {.kind = TPURT_ARG_SCALAR,
                        .u.scalar = {.dtype = TPURT_DTYPE_F64, .f = a->u.floats.data[prm->item]}};
    unsigned char bytes[8] = {0};
    engine_scalar_bytes(&item, prm->dtype, bytes);
    return pjrt_buffer_from_host(device, prm->dtype, 0, NULL, bytes, out);
  }
  uint64_t st[2];
  engine_rng_state(a->u.rng.seed, a->u.rng.offset, st);
  int64_t two = 2;
  return pjrt_buffer_from_host(device, TPURT_DTYPE_U64, 1, &two, st, out);
}

/* One launch of an SPMD plan across its mesh; |outs| receives one sharded
** buffer per program output. */
static TPURT_MUST_USE tpurt_status_t spmd_execute(const plan_t* p, const tpurt_op_call_t* call,
                                                  pjrt_buffer_t** outs) {
  const pjrt_sharding_t* mesh = p->mesh;
  const size_t n = (size_t)mesh->num_devices, np = (size_t)p->num_params, no = (size_t)p->num_program_outputs;
  pjrt_buffer_t** args = tpurt_xcalloc(n * np + 1, sizeof(pjrt_buffer_t*));
  bool* owned = tpurt_xcalloc(n * np + 1, sizeof(bool));
  pjrt_buffer_t** raw = tpurt_xcalloc(n * no + 1, sizeof(pjrt_buffer_t*));
  tpurt_status_t status = NULL;
  for (size_t d = 0; d < n && !status; ++d) {
    for (size_t i = 0; i < np && !status; ++i) {
      status = bind_param(&p->params[i], call, mesh->devices[d], &args[d * np + i], &owned[d * np + i]);
      const pjrt_buffer_t* b = args[d * np + i];
      if (!status && b->sharding) args[d * np + i] = b->shards[d];
    }
  }
  if (!status)
    status = pjrt_execute_spmd(p->compiled->executable, mesh->num_devices, mesh->devices, args, np, raw, no,
                               call->name);
  for (size_t i = 0; i < n * np; ++i)
    if (owned[i]) pjrt_buffer_release(args[i]);
  if (!status) {
    size_t k = 0;
    pjrt_buffer_t* shards[64];
    for (int32_t j = 0; j < p->num_outputs; ++j) {
      const plan_output_t* o = &p->outputs[j];
      if (o->kind == OUTPUT_UNDEFINED || o->kind == OUTPUT_HOST_INT) continue;
      for (size_t d = 0; d < n; ++d) shards[d] = raw[d * no + k];
      outs[k] = pjrt_buffer_sharded_create_consume(&p->output_shardings[k], o->type.dtype, o->type.rank,
                                                   o->type.dims, shards);
      ++k;
    }
  }
  free(args);
  free(owned);
  free(raw);
  return status;
}

tpurt_status_t plan_bind_params(const plan_t* p, const tpurt_op_call_t* call, pjrt_buffer_t** out) {
  for (int32_t k = 0; k < p->num_params; ++k) {
    bool owned = true;
    tpurt_status_t status = bind_param(&p->params[k], call, call->device, &out[k], &owned);
    if (status) {
      while (k-- > 0) pjrt_buffer_release(out[k]);
      return status;
    }
    if (!owned) pjrt_buffer_retain(out[k]);
  }
  return NULL;
}

void plan_hand_outputs_consume(const plan_t* p, tpurt_op_call_t* call, pjrt_buffer_t** outs) {
  call->num_results = p->num_results;
  int32_t next = 0; /* program output index */
  for (int32_t k = 0; k < p->num_outputs; ++k) {
    const plan_output_t* o = &p->outputs[k];
    if (o->kind == OUTPUT_UNDEFINED || o->kind == OUTPUT_HOST_INT) {
      memset(&call->results[o->index], 0, sizeof(tpurt_result_t));
      call->results[o->index].device = call->device;
      call->results[o->index].is_host_int = o->kind == OUTPUT_HOST_INT;
      call->results[o->index].host_int = o->host_int;
      continue;
    }
    pjrt_buffer_t* out = outs[next++];
    if (o->kind == OUTPUT_RESULT) {
      tpurt_result_t* r = &call->results[o->index];
      memset(r, 0, sizeof(*r));
      r->storage = storage_wrap_buffer_consume(out);
      fill_result_shape(r, &o->type, o->permuted, o->perm);
      r->device = call->device;
    } else {
      storage_set_buffer_consume(call->args[o->index].u.tensor.storage, out);
    }
  }
}

tpurt_status_t plan_check_fits(const plan_t* p, int device) {
  for (int32_t k = 0; k < p->num_outputs; ++k) {
    const plan_output_t* o = &p->outputs[k];
    if (o->kind == OUTPUT_UNDEFINED || o->kind == OUTPUT_HOST_INT) continue;
    size_t nbytes = tpurt_dtype_size(o->type.dtype);
    for (int32_t d = 0; d < o->type.rank; ++d) nbytes *= (size_t)o->type.dims[d];
    TPURT_RETURN_IF_ERROR(storage_check_fits(device, nbytes));
  }
  return NULL;
}

tpurt_status_t plan_launch(const plan_t* p, tpurt_op_call_t* call) {
  if (p->num_results > call->max_results || (p->num_results > 0 && !call->results))
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s: %d results, room for %d", call->name,
                               p->num_results, call->max_results);
  TPURT_RETURN_IF_ERROR(plan_check_fits(p, call->device));
  pjrt_buffer_t* stack_args[32];
  pjrt_buffer_t** bufs =
      p->num_params <= 32 ? stack_args : tpurt_xmalloc(sizeof(void*) * (size_t)(p->num_params + 1));
  pjrt_buffer_t* outs_stack[32];
  pjrt_buffer_t** outs = p->num_program_outputs <= 32
                             ? outs_stack
                             : tpurt_xmalloc(sizeof(void*) * (size_t)p->num_program_outputs);
  tpurt_status_t status = NULL;
  if (p->mesh) {
    status = spmd_execute(p, call, outs);
  } else {
    status = plan_bind_params(p, call, bufs);
    if (!status) {
      status = pjrt_execute(p->compiled->executable, call->device, bufs, (size_t)p->num_params, outs,
                            (size_t)p->num_program_outputs, call->name);
      for (int32_t k = 0; k < p->num_params; ++k) pjrt_buffer_release(bufs[k]);
    }
  }
  if (!status) plan_hand_outputs_consume(p, call, outs);
  if (bufs != stack_args) free(bufs);
  if (outs != outs_stack) free(outs);
  return status;
}
