/* lower_op.c: lowering one aten op, and compiling what it lowered to.
**
** lower_op runs a rule with the engine lock held: the rule reads the op's
** storages (shapes, views, shardings), and in fused eager or tracing it
** writes into the thread's pending graph. For strict eager it ends with a
** printed module that no longer depends on any storage, so
** plan_compile_consume can compile it with no lock held.
*/
#include <stddef.h>
#include <stdio.h>

#include "../cache/cache.h"
#include "op_internal.h"

typedef struct engine_ctx_s {
  lower_ctx_t lower;
  const tpurt_op_call_t* call;
  int32_t cls[LOWER_MAX_FLAT_ARGS];
  ir_value_t base[LOWER_MAX_FLAT_ARGS];    /* per storage class: its value now */
  ir_value_t offsets[LOWER_MAX_FLAT_ARGS]; /* per tensor arg: its runtime view offset */
  graph_t* graph;                          /* fused eager / tracing: lower into the pending graph */
} engine_ctx_t;

/* The view offset of tensor arg |flat| as a runtime parameter (IR_NONE when
** it is 0, or while tracing: a traced program is one fixed graph). Strict
** and fused eager key a program on whether a view starts at 0, never on
** where it starts, so a loop over `table[i]` is one program. */
static ir_value_t view_offset(engine_ctx_t* e, int32_t flat) {
  const tpurt_tensor_t* t = &e->call->args[flat].u.tensor;
  if (t->offset == 0 || (e->graph && graph_is_tracing(e->graph))) return IR_NONE;
  if (e->offsets[flat] != IR_NONE) return e->offsets[flat];
  lower_ctx_t* ctx = &e->lower;
  if (ctx->num_params >= LOWER_MAX_PARAMS) {
    ir_func_fail_consume(ctx->func, tpurt_status_create(TPURT_UNIMPLEMENTED, "too many operands"));
    return IR_NONE;
  }
  ctx->params[ctx->num_params++] =
      (lower_param_t){.arg = flat, .item = -1, .kind = LOWER_PARAM_VIEW_OFFSET, .dtype = TPURT_DTYPE_I64};
  return e->offsets[flat] = ir_param(ctx->func, ir_type_scalar(TPURT_DTYPE_I64));
}

static ir_value_t storage_base(engine_ctx_t* e, int32_t flat) {
  int32_t c = e->cls[flat];
  if (e->base[c] != IR_NONE) return e->base[c];
  lower_ctx_t* ctx = &e->lower;
  const tpurt_tensor_t* t = &e->call->args[c].u.tensor;
  if (e->graph) return e->base[c] = graph_storage_value(e->graph, t->storage, t->dtype);
  const pjrt_buffer_t* b = t->storage->buffer;
  if (!b) {
    e->base[c] = view_empty_base(ctx->func, t->storage, t->dtype);
  } else {
    if (ctx->num_params >= LOWER_MAX_PARAMS) {
      ir_func_fail_consume(ctx->func, tpurt_status_create(TPURT_UNIMPLEMENTED, "too many operands"));
      return IR_NONE;
    }
    ctx->params[ctx->num_params++] =
        (lower_param_t){.arg = c, .item = -1, .kind = LOWER_PARAM_STORAGE, .dtype = b->dtype};
    e->base[c] = ir_param(ctx->func, ir_type_make(b->dtype, b->rank, b->dims));
  }
  return e->base[c];
}

static ir_value_t engine_read_tensor(lower_ctx_t* ctx, int32_t flat) {
  engine_ctx_t* e = ctx->engine;
  if (ctx->tensor_values[flat] != IR_NONE) return ctx->tensor_values[flat];
  ir_value_t base = storage_base(e, flat);
  ir_value_t v = view_read(ctx->func, base, &e->call->args[flat].u.tensor, view_offset(e, flat));
  ctx->tensor_values[flat] = v;
  return v;
}

/* Writes |value| through the view of flat arg |flat|; records the output. */
static TPURT_MUST_USE tpurt_status_t write_back(engine_ctx_t* e, int32_t flat, ir_value_t value,
                                                plan_output_t* outputs, int32_t* num_outputs,
                                                ir_value_t* output_values) {
  lower_ctx_t* ctx = &e->lower;
  const tpurt_tensor_t* t = &e->call->args[flat].u.tensor;
  const ir_type_t* vt = ir_value_type(ctx->func, value);
  if (!vt) return NULL; /* the sticky IR error is reported by the caller */
  bool same = vt->rank == t->rank;
  for (int32_t d = 0; same && d < t->rank; ++d) same = vt->dims[d] == t->sizes[d];
  if (!same) {
    return lower_error(TPURT_INVALID_ARGUMENT, "output with shape %s doesn't match the broadcast shape %s",
                       lower_shape_str(t->rank, t->sizes), lower_shape_str(vt->rank, vt->dims));
  }
  if (vt->dtype != t->dtype && !lower_can_cast(vt->dtype, t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "result type %s can't be cast to the desired output type %s",
                       tpurt_dtype_name(vt->dtype), tpurt_dtype_name(t->dtype));
  value = lower_cast(ctx, value, t->dtype);
  int32_t c = e->cls[flat];
  ir_value_t nb;
  if (view_is_whole(t) && e->base[c] == IR_NONE && !(e->graph && graph_has_storage(e->graph, t->storage))) {
    const pjrt_buffer_t* b = t->storage->buffer;
    nb = b ? ir_reshape(ctx->func, value, b->rank, b->dims) : value;
  } else {
    nb = view_write(ctx->func, storage_base(e, flat), t, value, view_offset(e, flat));
  }
  e->base[c] = nb;
  if (e->graph) graph_set_storage_value(e->graph, t->storage, nb);
  /* one output per storage class: a second write replaces the first */
  for (int32_t k = 0; k < *num_outputs; ++k) {
    if (outputs[k].kind == OUTPUT_WRITEBACK && outputs[k].index == c) {
      output_values[k] = nb;
      return NULL;
    }
  }
  outputs[*num_outputs] = (plan_output_t){.kind = OUTPUT_WRITEBACK, .index = c};
  output_values[(*num_outputs)++] = nb;
  return NULL;
}

/* Ops that write more than their first argument (_amp_update_scale_ also
** updates its growth tracker; the AMP unscale sets found_inf): the rule's
** results from |first| on go, in order, to the Tensor(a!) args from flat
** index |from| on. Ops whose rules set no such results write nothing more. */
static TPURT_MUST_USE tpurt_status_t write_back_extra(engine_ctx_t* e, int32_t from, int32_t first,
                                                      plan_output_t* outputs, int32_t* num_outputs,
                                                      ir_value_t* output_values) {
  lower_ctx_t* ctx = &e->lower;
  const tpurt_op_call_t* call = e->call;
  int32_t next = first;
  for (int32_t i = from; i < call->num_args && next < ctx->num_results; ++i) {
    if (call->args[i].kind != TPURT_ARG_TENSOR || !call->args[i].is_write) continue;
    TPURT_RETURN_IF_ERROR(write_back(e, i, ctx->results[next++], outputs, num_outputs, output_values));
  }
  return NULL;
}

/* Fills a result's sizes (and strides, for a permuted layout) from the
** physical dense type of its value. */
void fill_result_shape(tpurt_result_t* r, const ir_type_t* physical, bool permuted, const int8_t* perm) {
  r->dtype = physical->dtype;
  r->rank = physical->rank;
  r->has_strides = permuted;
  int64_t stride[TPURT_MAX_RANK], s = 1;
  for (int32_t i = physical->rank - 1; i >= 0; --i) {
    stride[i] = s;
    s *= physical->dims[i];
  }
  for (int32_t i = 0; i < physical->rank; ++i) {
    int32_t p = permuted ? perm[i] : i;
    r->sizes[i] = physical->dims[p];
    r->strides[i] = stride[p];
  }
}

void engine_scalar_bytes(const tpurt_arg_t* a, tpurt_dtype_t dtype, unsigned char* out) {
  bool is_f =
      (a->kind == TPURT_ARG_SCALAR || a->kind == TPURT_ARG_FLOAT) && tpurt_dtype_is_float(a->u.scalar.dtype);
  int64_t iv = (a->kind == TPURT_ARG_SCALAR || a->kind == TPURT_ARG_FLOAT) ? a->u.scalar.i : a->u.i;
  double fv = is_f ? a->u.scalar.f : (double)iv;
  if (!is_f && !tpurt_dtype_is_float(dtype)) fv = 0; /* ints stay exact */
  switch (dtype) {
    case TPURT_DTYPE_F32: {
      float v = (float)fv;
      memcpy(out, &v, 4);
      break;
    }
    case TPURT_DTYPE_F64:
      memcpy(out, &fv, 8);
      break;
    case TPURT_DTYPE_F16: {
      _Float16 v = (_Float16)fv;
      memcpy(out, &v, 2);
      break;
    }
    case TPURT_DTYPE_BF16: {
      float f = (float)fv;
      uint32_t bits;
      memcpy(&bits, &f, 4);
      uint16_t h = (f != f) ? 0x7FC0 : (uint16_t)((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
      memcpy(out, &h, 2);
      break;
    }
    case TPURT_DTYPE_BOOL:
      out[0] = is_f ? fv != 0.0 : iv != 0;
      break;
    default: {
      int64_t v = is_f ? (int64_t)fv : iv;
      memcpy(out, &v, tpurt_dtype_size(dtype)); /* little-endian truncation */
      break;
    }
  }
}

/* THREE_FRY state from (seed, offset): every offset gets its own key, so
** calls never share a stream. */
void engine_rng_state(uint64_t seed, uint64_t offset, uint64_t out[2]) {
  out[0] = tpurt_hash_u64(tpurt_hash_u64(TPURT_HASH_SEED, seed), offset);
  out[1] = 0;
}

static void rng_state(const tpurt_arg_t* a, uint64_t out[2]) {
  engine_rng_state(a->u.rng.seed, a->u.rng.offset, out);
}

/* Binds the number parameters this op added to the pending graph: the
** @main parameters made since |first| that no storage claimed, in order,
** are the rule's scalar/RNG parameters, in order. */
static void bind_graph_numbers(engine_ctx_t* e, int32_t first) {
  lower_ctx_t* ctx = &e->lower;
  int32_t k = 0;
  for (int32_t p = first; p < ir_func_num_params(ctx->func); ++p) {
    if (graph_param_bound(e->graph, p)) continue;
    while (k < ctx->num_params && ctx->params[k].kind == LOWER_PARAM_STORAGE) ++k;
    if (k >= ctx->num_params) break;
    const lower_param_t* prm = &ctx->params[k++];
    const tpurt_arg_t* a = &e->call->args[prm->arg];
    uint64_t bytes[2] = {0, 0};
    if (prm->kind == LOWER_PARAM_RNG) {
      rng_state(a, bytes);
      graph_bind_rng(e->graph, p, bytes);
      continue;
    }
    if (prm->kind == LOWER_PARAM_VIEW_OFFSET) {
      int64_t offset = a->u.tensor.offset;
      graph_bind_host(e->graph, p, ir_type_scalar(TPURT_DTYPE_I64), &offset, sizeof(offset));
      continue;
    }
    tpurt_arg_t item = *a;
    if (prm->kind == LOWER_PARAM_LIST_ITEM)
      item = (tpurt_arg_t){.kind = TPURT_ARG_SCALAR,
                           .u.scalar = {.dtype = TPURT_DTYPE_F64, .f = a->u.floats.data[prm->item]}};
    engine_scalar_bytes(&item, prm->dtype, (unsigned char*)bytes);
    graph_bind_host(e->graph, p, ir_type_scalar(prm->dtype), bytes, tpurt_dtype_size(prm->dtype));
  }
}

/* Fused eager / tracing: the op's results become graph values of new
** storages; its writes already updated the graph. */
static void finish_graph_op(engine_ctx_t* e, const lower_rule_t* rule, tpurt_op_call_t* call) {
  lower_ctx_t* ctx = &e->lower;
  call->num_results = 0;
  if (rule->variant != LOWER_FUNCTIONAL) return;
  for (int32_t k = 0; k < ctx->num_results && k < call->max_results; ++k) {
    tpurt_result_t* r = &call->results[k];
    memset(r, 0, sizeof(*r));
    r->device = call->device;
    if (ctx->results[k] == LOWER_UNDEFINED) continue;
    if (ctx->results[k] == LOWER_HOST_INT_BASE) {
      r->is_host_int = true;
      r->host_int = ctx->host_ints[k];
      continue;
    }
    const ir_type_t* t = ir_value_type(ctx->func, ctx->results[k]);
    if (!t) continue;
    bool permuted = k < TPURT_MAX_RESULTS && ctx->result_permuted[k];
    fill_result_shape(r, t, permuted, permuted ? ctx->result_perm[k] : NULL);
    r->storage = graph_new_result(e->graph, ctx->results[k]);
  }
  call->num_results = ctx->num_results;
}

/* The platform name for the lowering context: the shadow target's, else
** the client's ("" before init). */
const char* tpurt_lowering_platform(void) {
  const tpurt_target_t* target = tpurt_shadow_target();
  if (target) {
    tpurt_target_info_t t;
    tpurt_target_info(target, &t);
    return t.platform_name;
  }
  tpurt_runtime_info_t info;
  tpurt_status_t s = pjrt_info(&info);
  if (s) {
    tpurt_status_ignore(s);
    return "";
  }
  return info.platform_name ? info.platform_name : "";
}

/*===--- SPMD: ops on sharded operands ---===*/

/* The buffer a storage parameter is bound to (NULL: never written). */
static const pjrt_buffer_t* param_buffer(const tpurt_op_call_t* call, const lower_param_t* prm) {
  return prm->kind == LOWER_PARAM_STORAGE ? call->args[prm->arg].u.tensor.storage->buffer : NULL;
}

/* The mesh of |call|'s sharded operands (NULL: none, a one-device program)
** and the sharding of each program output: an in-place write keeps the
** written storage's sharding; a new result takes the sharding of the first
** sharded operand of its global shape, and is replicated otherwise (XLA
** then inserts the all-gather or all-reduce). */
static TPURT_MUST_USE tpurt_status_t spmd_plan(const tpurt_op_call_t* call, const lower_param_t* params,
                                               int32_t num_params, const plan_output_t* outputs,
                                               int32_t num_outputs, pjrt_sharding_t** out_mesh,
                                               pjrt_sharding_t** out_shardings) {
  *out_mesh = NULL;
  *out_shardings = NULL;
  const pjrt_sharding_t* mesh = NULL;
  for (int32_t i = 0; i < num_params; ++i) {
    const pjrt_buffer_t* b = param_buffer(call, &params[i]);
    if (!b || !b->sharding) continue;
    if (!mesh) {
      mesh = b->sharding;
    } else if (!pjrt_sharding_same_mesh(mesh, b->sharding)) {
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "operands are sharded over two different meshes (of %d and %d devices); reshard "
                         "them onto one mesh first",
                         mesh->num_devices, b->sharding->num_devices);
    }
  }
  if (!mesh) return NULL;
  pjrt_sharding_t* shardings = tpurt_xcalloc((size_t)num_outputs + 1, sizeof(pjrt_sharding_t));
  int32_t n = 0;
  for (int32_t k = 0; k < num_outputs; ++k) {
    const plan_output_t* o = &outputs[k];
    if (o->kind == OUTPUT_UNDEFINED || o->kind == OUTPUT_HOST_INT) continue;
    pjrt_sharding_t* sh = &shardings[n++];
    *sh = *mesh;
    sh->rank = o->type.rank;
    memset(sh->dim_axis, -1, sizeof(sh->dim_axis));
    const pjrt_buffer_t* like = NULL;
    if (o->kind == OUTPUT_WRITEBACK) {
      const pjrt_buffer_t* b = call->args[o->index].u.tensor.storage->buffer;
      like = b && b->sharding ? b : NULL;
    } else {
      for (int32_t i = 0; i < num_params && !like; ++i) {
        const pjrt_buffer_t* b = param_buffer(call, &params[i]);
        if (!b || !b->sharding || b->rank != o->type.rank) continue;
        bool same = true;
        for (int32_t d = 0; d < b->rank && same; ++d) same = b->dims[d] == o->type.dims[d];
        if (same) like = b;
      }
    }
    if (like && like->rank == sh->rank) memcpy(sh->dim_axis, like->sharding->dim_axis, sizeof(sh->dim_axis));
  }
  *out_mesh = tpurt_xmalloc(sizeof(pjrt_sharding_t));
  **out_mesh = *mesh;
  *out_shardings = shardings;
  return NULL;
}

/* Annotates the printed module with the shardings of the op's operands
** (engine lock held: it reads their buffers); plan_compile_consume
** compiles it for the mesh. SPMD programs are kept by the plan cache only
** (their options differ from the executable cache's). */
static TPURT_MUST_USE tpurt_status_t spmd_annotate_op(const char* text, const pjrt_sharding_t* mesh,
                                                      const tpurt_op_call_t* call,
                                                      const lower_param_t* params, int32_t num_params,
                                                      const pjrt_sharding_t* output_shardings,
                                                      int32_t num_outputs, char** out_text,
                                                      size_t* out_size) {
  const pjrt_buffer_t** buffers = tpurt_xcalloc((size_t)num_params + 1, sizeof(pjrt_buffer_t*));
  for (int32_t i = 0; i < num_params; ++i) buffers[i] = param_buffer(call, &params[i]);
  tpurt_status_t status =
      spmd_annotate(text, mesh, buffers, num_params, output_shardings, num_outputs, out_text, out_size);
  free(buffers);
  if (!status && tpurt_config()->print_mlir) fprintf(stderr, "// %s (SPMD)\n%s\n", call->name, *out_text);
  return status;
}

void lowered_free(lowered_t* lowered) {
  free(lowered->text);
  free(lowered->params);
  free(lowered->outputs);
  free(lowered->mesh);
  free(lowered->output_shardings);
  memset(lowered, 0, sizeof(*lowered));
}

tpurt_status_t lower_op(const lower_rule_t* rule, tpurt_op_call_t* call, graph_t* graph, lowered_t* out) {
  memset(out, 0, sizeof(*out));
  /* On the stack, like |outputs| below: a heap block of this size per op
  ** took the allocator's lock against the plugin's threads and consolidated
  ** free chunks on every op of fused eager. Not zeroed (lower_ctx_clear);
  ** the per-arg arrays are set below. */
  engine_ctx_t e_storage;
  engine_ctx_t* e = &e_storage;
  lower_ctx_t* ctx = &e->lower;
  lower_ctx_clear(ctx);
  e->call = call;
  e->graph = graph;
  ctx->func = graph ? graph_func(graph) : ir_func_create();
  const int32_t first_param = ir_func_num_params(ctx->func);
  ir_func_set_precision(ctx->func,
                        call->matmul_precision == TPURT_MATMUL_PRECISION_MEDIUM ? IR_PRECISION_DEFAULT
                        : call->matmul_precision == TPURT_MATMUL_PRECISION_HIGH ? IR_PRECISION_HIGH
                                                                                : IR_PRECISION_HIGHEST);
  ctx->op_name = call->name;
  ctx->platform = tpurt_lowering_platform();
  ctx->args = call->args;
  ctx->engine = e;
  ctx->read_tensor = engine_read_tensor;
  tpurt_status_t status = NULL;
  if (call->num_args > LOWER_MAX_FLAT_ARGS) {
    status = lower_error(TPURT_UNIMPLEMENTED, "too many operands (%d, max %d)", call->num_args,
                         LOWER_MAX_FLAT_ARGS);
    goto done;
  }
  for (int32_t i = 0; i < call->num_args; ++i) {
    ctx->tensor_values[i] = IR_NONE;
    e->base[i] = IR_NONE;
    e->offsets[i] = IR_NONE;
    e->cls[i] = call->args[i].kind == TPURT_ARG_TENSOR ? sig_storage_class(call, i) : i;
    if (call->args[i].kind == TPURT_ARG_TENSOR && call->args[i].u.tensor.storage->device != call->device) {
      status = lower_error(TPURT_INVALID_ARGUMENT,
                           "Expected all tensors to be on the same device, but found at least two devices, "
                           "tpu:%d and tpu:%d!",
                           call->device, call->args[i].u.tensor.storage->device);
      goto done;
    }
  }
  /* schema positions */
  int32_t schema_n = 0;
  for (int32_t i = 0; i < call->num_args; ++i) {
    if (schema_n >= LOWER_MAX_ARGS) break;
    ctx->arg_index[schema_n++] = i;
    if (call->args[i].kind == TPURT_ARG_TENSOR_LIST) i += call->args[i].u.list_len;
  }
  int32_t num_outs = 0;
  if (rule->variant == LOWER_OUT) {
    while (num_outs < schema_n) {
      const tpurt_arg_t* a = &call->args[ctx->arg_index[schema_n - 1 - num_outs]];
      if (!a->is_write || (a->kind != TPURT_ARG_TENSOR && a->kind != TPURT_ARG_NONE)) break;
      ++num_outs;
    }
  }
  ctx->num_args = schema_n - num_outs;

  status = lower_rule_run(rule, ctx);
  if (status) goto done;

  plan_output_t outputs[TPURT_MAX_RESULTS + LOWER_MAX_FLAT_ARGS];
  ir_value_t values[TPURT_MAX_RESULTS + LOWER_MAX_FLAT_ARGS];
  int32_t n_out = 0;
  if (ctx->num_results == 0 && rule->variant != LOWER_FUNCTIONAL) {
    status = lower_error(TPURT_INTERNAL, "the rule produced no result");
    goto done;
  }
  if (rule->variant == LOWER_FUNCTIONAL) {
    for (int32_t k = 0; k < ctx->num_results; ++k) {
      bool undefined = ctx->results[k] == LOWER_UNDEFINED;
      bool host = ctx->results[k] == LOWER_HOST_INT_BASE;
      outputs[n_out] = (plan_output_t){.kind = host        ? OUTPUT_HOST_INT
                                               : undefined ? OUTPUT_UNDEFINED
                                                           : OUTPUT_RESULT,
                                       .index = k,
                                       .host_int = host ? ctx->host_ints[k] : 0};
      if (k < TPURT_MAX_RESULTS && ctx->result_permuted[k]) {
        outputs[n_out].permuted = true;
        memcpy(outputs[n_out].perm, ctx->result_perm[k], sizeof(outputs[n_out].perm));
      }
      values[n_out++] = ctx->results[k];
    }
  } else if (rule->variant == LOWER_INPLACE && call->args[ctx->arg_index[0]].kind == TPURT_ARG_TENSOR_LIST) {
    /* _foreach_*_: result k is written into item k of the list */
    int32_t list = ctx->arg_index[0];
    for (int32_t k = 0; k < call->args[list].u.list_len && !status; ++k) {
      if (k >= ctx->num_results) {
        status = lower_error(TPURT_INTERNAL, "the rule produced %d results for a list of %d",
                             ctx->num_results, call->args[list].u.list_len);
        break;
      }
      status = write_back(e, list + 1 + k, ctx->results[k], outputs, &n_out, values);
    }
    status = status ? status
                    : write_back_extra(e, list + 1 + call->args[list].u.list_len, call->args[list].u.list_len,
                                       outputs, &n_out, values);
  } else if (rule->variant == LOWER_INPLACE) {
    status = write_back(e, ctx->arg_index[0], ctx->results[0], outputs, &n_out, values);
    status = status ? status : write_back_extra(e, ctx->arg_index[0] + 1, 1, outputs, &n_out, values);
  } else {
    for (int32_t k = 0; k < num_outs && !status; ++k) {
      int32_t schema = ctx->num_args + k;
      int32_t flat = ctx->arg_index[schema];
      if (k >= ctx->num_results || call->args[flat].kind != TPURT_ARG_TENSOR) continue;
      const ir_type_t* vt = ir_value_type(ctx->func, ctx->results[k]);
      const tpurt_tensor_t* t = &call->args[flat].u.tensor;
      /* A data-dependent op is not elementwise: PyTorch casts into its out=
      ** tensor no more than CUDA does (nonzero, masked_select). */
      if (vt && rule->count_arg >= 0 && vt->dtype != t->dtype) {
        status = lower_error(TPURT_INVALID_ARGUMENT,
                             "expected out tensor to have scalar type %s but got scalar type %s",
                             tpurt_dtype_name(vt->dtype), tpurt_dtype_name(t->dtype));
        break;
      }
      if (vt) {
        bool same = vt->rank == t->rank;
        for (int32_t d = 0; same && d < t->rank; ++d) same = vt->dims[d] == t->sizes[d];
        if (!same) { /* the glue resizes the out= tensor and calls again */
          call->resize_arg = schema;
          call->resize_rank = vt->rank;
          for (int32_t d = 0; d < vt->rank; ++d) call->resize_sizes[d] = vt->dims[d];
          status = tpurt_status_create(TPURT_NEEDS_RESIZE, "out= argument %d needs resizing", schema);
          break;
        }
      }
      status = write_back(e, flat, ctx->results[k], outputs, &n_out, values);
    }
  }
  /* the inputs a rule also writes (lower_set_write), in any variant */
  for (int32_t w = 0; w < ctx->num_writes && !status; ++w) {
    int32_t i = ctx->write_args[w];
    int32_t flat = i >= 0 && i < ctx->num_args ? ctx->arg_index[i] : -1;
    if (flat < 0 || call->args[flat].kind != TPURT_ARG_TENSOR) {
      status = lower_error(TPURT_INTERNAL, "the rule writes arg %d, which is not a tensor", i);
      break;
    }
    status = write_back(e, flat, ctx->write_values[w], outputs, &n_out, values);
  }
  if (status) goto done;
  if (graph) {
    finish_graph_op(e, rule, call);
    goto done;
  }
  if (ir_func_status(ctx->func)) {
    status = tpurt_status_create(TPURT_INTERNAL, "internal error while lowering: %s",
                                 tpurt_status_message(ir_func_status(ctx->func)));
    goto done;
  }
  int32_t n_program = 0;
  for (int32_t k = 0; k < n_out; ++k) {
    if (outputs[k].kind == OUTPUT_UNDEFINED || outputs[k].kind == OUTPUT_HOST_INT) continue;
    const ir_type_t* t = ir_value_type(ctx->func, values[k]);
    if (!t) {
      status = tpurt_status_create(TPURT_INTERNAL, "the rule left result %d unset", k);
      goto done;
    }
    outputs[k].type = *t;
    values[n_program++] = values[k];
  }
  ir_func_set_results(ctx->func, values, n_program);

  char* text = NULL;
  size_t size = 0;
  status = ir_func_print(ctx->func, &text, &size);
  if (status) goto done;
  if (tpurt_config()->print_mlir) fprintf(stderr, "// %s\n%s\n", call->name, text);
  pjrt_sharding_t *mesh = NULL, *output_shardings = NULL;
  status = spmd_plan(call, ctx->params, ctx->num_params, outputs, n_out, &mesh, &output_shardings);
  if (!status && mesh) {
    char* annotated = NULL;
    status = spmd_annotate_op(text, mesh, call, ctx->params, ctx->num_params, output_shardings, n_program,
                              &annotated, &size);
    free(text);
    text = annotated;
  }
  if (status) {
    free(text);
    free(mesh);
    free(output_shardings);
    goto done;
  }
  out->text = text;
  out->size = size;
  out->label = call->name;
  out->mesh = mesh;
  out->output_shardings = output_shardings;
  out->num_params = ctx->num_params;
  out->params = tpurt_xmalloc(sizeof(lower_param_t) * (size_t)(ctx->num_params ? ctx->num_params : 1));
  memcpy(out->params, ctx->params, sizeof(lower_param_t) * (size_t)ctx->num_params);
  out->num_outputs = n_out;
  out->outputs = tpurt_xmalloc(sizeof(plan_output_t) * (size_t)(n_out ? n_out : 1));
  memcpy(out->outputs, outputs, sizeof(plan_output_t) * (size_t)n_out);
  out->num_program_outputs = n_program;
  out->num_results = rule->variant == LOWER_FUNCTIONAL ? ctx->num_results : 0;

done:
  if (graph) {
    bind_graph_numbers(e, first_param); /* even on error: every parameter needs a binding */
  } else {
    ir_func_free(ctx->func);
  }
  return status;
}

void plan_adopt_tables(plan_t* p, lowered_t* low) {
  p->mesh = low->mesh;
  p->output_shardings = low->output_shardings;
  p->num_params = low->num_params;
  p->params = low->params;
  p->num_outputs = low->num_outputs;
  p->outputs = low->outputs;
  p->num_program_outputs = low->num_program_outputs;
  p->num_results = low->num_results;
  p->has_tables = true;
  low->mesh = low->output_shardings = NULL;
  low->params = NULL;
  low->outputs = NULL;
}

/* Compiles the lowered module with no lock held: through the executable
** cache (which compiles or loads it once per key), or for the plan's mesh. */
tpurt_status_t plan_compile_consume(plan_t* p, lowered_t* low) {
  pjrt_executable_t* exe = NULL;
  cache_entry_info_t info = {0};
  const char* previous_label = pjrt_swap_compile_label(low->label); /* the long-compile notice */
  const tpurt_compile_kind_t previous_kind = pjrt_swap_compile_kind(TPURT_COMPILE_KIND_EAGER_OP);
  tpurt_status_t status = NULL;
  if (p->mesh) {
    status = pjrt_compile_spmd(low->text, low->size, p->mesh->num_devices, p->mesh->devices, &exe);
    if (!status) status = cache_shadow_program(low->text, low->size, "", 0, p->mesh->num_devices, exe);
    if (status && exe) {
      pjrt_executable_release(exe);
      exe = NULL;
    }
    if (!status) atomic_fetch_add_explicit(&engine_counters.spmd_compiles, 1, memory_order_relaxed);
  } else {
    cache_shadow_label(low->label);
    status = cache_get_or_compile_info(low->text, low->size, &exe, &info);
  }
  (void)pjrt_swap_compile_kind(previous_kind);
  (void)pjrt_swap_compile_label(previous_label);
  lowered_free(low);
  if (status) return tpurt_status_annotate_consume(status, "compiling the lowered program failed");
  if (info.hit) atomic_fetch_add_explicit(&engine_counters.exec_hits, 1, memory_order_relaxed);
  p->program_hash = info.hash;
  p->from_disk = info.from_disk;
  p->charge = info.charge + sizeof(*p) + sizeof(lower_param_t) * (size_t)p->num_params +
              sizeof(plan_output_t) * (size_t)p->num_outputs;
  compiled_finish_consume(p->compiled, exe, NULL);
  return NULL;
}
