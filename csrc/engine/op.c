/* op.c: running one aten op: signature, plan cache, lowering, launch.
**
** A plan is everything needed to run an op again without lowering it: the
** executable, how its parameters are bound (storage values, scalar values,
** RNG state) and what each output becomes (a new result storage, or the new
** value of a written storage). Plans are keyed by the op's structural
** signature, so only a change of op, dtype, shape, view layout or attribute
** makes a new one; scalar values and buffer identities never do.
**
** The plan cache is an LRU bounded by the executable cache's memory budget
** (TORCH_TPU_CACHE_MEMORY_BYTES): each plan is charged what the cache
** charges its program plus its own size, and an evicted plan releases its
** reference to the executable. A plan's reference is what keeps a loaded
** program (its code and memory mappings) alive once the cache's tier 1 has
** let go of it, so without this bound a process that runs many distinct
** small programs grows without limit and finally runs out of mappings.
*/
#include <stddef.h>
#include <stdio.h>

#include "../base/base.h"
#include "../cache/cache.h"
#include "engine.h"

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

typedef struct plan_s {
  uint64_t hash;
  uint64_t* sig;
  size_t sig_len;
  pjrt_executable_t* executable; /* a reference of its own: cache eviction never frees it */
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

#define PLAN_BUCKETS 8192
static plan_t* g_plans[PLAN_BUCKETS];
static plan_t *g_plan_newest, *g_plan_oldest;
static uint64_t g_plan_count, g_plan_bytes;
static uint64_t g_plan_hits, g_exec_hits;

/*===--- the plan cache's LRU ---===*/

static void plan_lru_unlink(plan_t* p) {
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

static void plan_lru_push_newest(plan_t* p) {
  p->older = g_plan_newest;
  p->newer = NULL;
  if (g_plan_newest) g_plan_newest->newer = p;
  g_plan_newest = p;
  if (!g_plan_oldest) g_plan_oldest = p;
}

static void plan_free(plan_t* p) {
  free(p->mesh);
  free(p->output_shardings);
  pjrt_executable_release(p->executable);
  free(p->sig);
  free(p->params);
  free(p->outputs);
  free(p);
}

/* Takes |p| out of the table and the LRU list and frees it. */
static void plan_unlink_and_free(plan_t* p) {
  plan_t** link = &g_plans[p->hash % PLAN_BUCKETS];
  while (*link && *link != p) link = &(*link)->next;
  if (*link) *link = p->next;
  plan_lru_unlink(p);
  g_plan_count--;
  g_plan_bytes -= p->charge;
  plan_free(p);
}

/* Drops least recently used plans while over the budget, sparing |keep|. */
static void plan_evict(const plan_t* keep) {
  const uint64_t limit = cache_memory_limit();
  while (g_plan_bytes > limit && g_plan_oldest && g_plan_oldest != keep) plan_unlink_and_free(g_plan_oldest);
}

/*===--- signature ---===*/

typedef struct sig_s {
  uint64_t* w;
  size_t n, cap;
} sig_t;

static void sig_push(sig_t* s, uint64_t v) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 256;
    s->w = tpurt_xrealloc(s->w, s->cap * sizeof(uint64_t));
  }
  s->w[s->n++] = v;
}

/* The first flat arg that shares |flat|'s storage: aliasing is structural. */
static int32_t storage_class(const tpurt_op_call_t* call, int32_t flat) {
  const tpurt_storage_t* st = call->args[flat].u.tensor.storage;
  for (int32_t j = 0; j < flat; ++j)
    if (call->args[j].kind == TPURT_ARG_TENSOR && call->args[j].u.tensor.storage == st) return j;
  return flat;
}

/* The facts of a number the key records (see lower_number_fact). */
static uint64_t number_facts(const tpurt_arg_t* a) {
  double v = tpurt_dtype_is_float(a->u.scalar.dtype) ? a->u.scalar.f : (double)a->u.scalar.i;
  return lower_number_fact(v, a->u.scalar.tier);
}

static void build_signature(const tpurt_op_call_t* call, bool numbers_in_key, sig_t* s) {
  s->n = 0;
  sig_push(s, tpurt_hash_str(TPURT_HASH_SEED, call->name));
  sig_push(s, (uint64_t)call->matmul_precision);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    sig_push(s, (uint64_t)a->kind | ((uint64_t)a->is_write << 8));
    switch (a->kind) {
      case TPURT_ARG_TENSOR: {
        const tpurt_tensor_t* t = &a->u.tensor;
        sig_push(s, (uint64_t)t->dtype | ((uint64_t)t->rank << 8) | ((uint64_t)storage_class(call, i) << 16));
        for (int32_t d = 0; d < t->rank; ++d) {
          sig_push(s, (uint64_t)t->sizes[d]);
          sig_push(s, (uint64_t)t->strides[d]);
        }
        sig_push(s, (uint64_t)(t->offset != 0)); /* where a view starts is a runtime value */
        const pjrt_buffer_t* b = t->storage->buffer;
        if (!b) {
          sig_push(s, 0xE0E0E0E0ULL);
          sig_push(s, t->storage->nbytes);
        } else {
          sig_push(s, (uint64_t)b->dtype | ((uint64_t)b->rank << 8));
          for (int32_t d = 0; d < b->rank; ++d) sig_push(s, (uint64_t)b->dims[d]);
          if (b->sharding) sig_push(s, pjrt_sharding_hash(b->sharding)); /* a new layout is a new program */
        }
        break;
      }
      case TPURT_ARG_SCALAR:
      case TPURT_ARG_FLOAT:
        sig_push(s,
                 (uint64_t)a->u.scalar.dtype | ((uint64_t)a->u.scalar.tier << 8) | (number_facts(a) << 16));
        if (numbers_in_key) {
          uint64_t bits;
          memcpy(&bits, &a->u.scalar.f, 8);
          sig_push(s, bits);
          sig_push(s, (uint64_t)a->u.scalar.i);
        }
        break;
      case TPURT_ARG_INT:
      case TPURT_ARG_BOOL:
      case TPURT_ARG_DTYPE:
        sig_push(s, (uint64_t)a->u.i);
        break;
      case TPURT_ARG_INT_LIST:
        sig_push(s, (uint64_t)a->u.ints.len);
        for (int32_t k = 0; k < a->u.ints.len; ++k) sig_push(s, (uint64_t)a->u.ints.data[k]);
        break;
      case TPURT_ARG_STRING:
        sig_push(s, tpurt_hash_str(TPURT_HASH_SEED, a->u.str ? a->u.str : ""));
        break;
      case TPURT_ARG_TENSOR_LIST:
        sig_push(s, (uint64_t)a->u.list_len);
        break;
      case TPURT_ARG_FLOAT_LIST: /* values are parameters; only the length shapes the program */
        sig_push(s, (uint64_t)a->u.floats.len);
        break;
      default:
        break;
    }
  }
}

static uint64_t sig_hash(const sig_t* s) {
  uint64_t h = TPURT_HASH_SEED;
  for (size_t i = 0; i < s->n; ++i) h = tpurt_hash_u64(h, s->w[i]);
  return h;
}

/*===--- lowering one op into a plan ---===*/

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

/* Host bytes of a number in |dtype| (PyTorch's static_cast semantics). */
static void scalar_bytes(const tpurt_arg_t* a, tpurt_dtype_t dtype, unsigned char* out) {
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
    scalar_bytes(&item, prm->dtype, (unsigned char*)bytes);
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

uint64_t engine_spmd_compiles;

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

/* Annotates the printed module with the shardings and compiles it for the
** mesh. SPMD programs are kept by the plan cache only (their options differ
** from the executable cache's). */
static TPURT_MUST_USE tpurt_status_t spmd_compile(const char* text, const pjrt_sharding_t* mesh,
                                                  const tpurt_op_call_t* call, const lower_param_t* params,
                                                  int32_t num_params, const pjrt_sharding_t* output_shardings,
                                                  int32_t num_outputs, pjrt_executable_t** out_executable) {
  const pjrt_buffer_t** buffers = tpurt_xcalloc((size_t)num_params + 1, sizeof(pjrt_buffer_t*));
  for (int32_t i = 0; i < num_params; ++i) buffers[i] = param_buffer(call, &params[i]);
  char* annotated = NULL;
  size_t size = 0;
  tpurt_status_t status =
      spmd_annotate(text, mesh, buffers, num_params, output_shardings, num_outputs, &annotated, &size);
  free(buffers);
  if (status) return status;
  if (tpurt_config()->print_mlir) fprintf(stderr, "// %s (SPMD)\n%s\n", call->name, annotated);
  status = pjrt_compile_spmd(annotated, size, mesh->num_devices, mesh->devices, out_executable);
  if (!status) status = cache_shadow_program(annotated, size, "", 0, mesh->num_devices, *out_executable);
  if (status && *out_executable) {
    pjrt_executable_release(*out_executable);
    *out_executable = NULL;
  }
  free(annotated);
  if (!status) ++engine_spmd_compiles;
  return status;
}

static TPURT_MUST_USE tpurt_status_t lower_op(const lower_rule_t* rule, tpurt_op_call_t* call, graph_t* graph,
                                              plan_t** out_plan) {
  *out_plan = NULL;
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
    e->cls[i] = call->args[i].kind == TPURT_ARG_TENSOR ? storage_class(call, i) : i;
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
  pjrt_executable_t* exe = NULL;
  cache_entry_info_t info = {0};
  pjrt_sharding_t *mesh = NULL, *output_shardings = NULL;
  status = spmd_plan(call, ctx->params, ctx->num_params, outputs, n_out, &mesh, &output_shardings);
  const char* previous_label = pjrt_swap_compile_label(call->name); /* the long-compile notice */
  if (!status && mesh) {
    status = spmd_compile(text, mesh, call, ctx->params, ctx->num_params, output_shardings, n_program, &exe);
  } else if (!status) {
    cache_shadow_label(call->name);
    status = cache_get_or_compile_info(text, size, &exe, &info);
  }
  (void)pjrt_swap_compile_label(previous_label);
  if (status) {
    status = tpurt_status_annotate_consume(status, "compiling the lowered program failed");
    free(text);
    free(mesh);
    free(output_shardings);
    goto done;
  }
  free(text);
  if (info.hit) ++g_exec_hits;

  plan_t* p = tpurt_xcalloc(1, sizeof(*p));
  p->mesh = mesh;
  p->output_shardings = output_shardings;
  p->executable = exe;
  p->program_hash = info.hash;
  p->from_disk = info.from_disk;
  p->charge = info.charge + sizeof(*p) + sizeof(lower_param_t) * (size_t)ctx->num_params +
              sizeof(plan_output_t) * (size_t)n_out;
  p->num_params = ctx->num_params;
  p->params = tpurt_xmalloc(sizeof(lower_param_t) * (size_t)(ctx->num_params ? ctx->num_params : 1));
  memcpy(p->params, ctx->params, sizeof(lower_param_t) * (size_t)ctx->num_params);
  p->num_outputs = n_out;
  p->outputs = tpurt_xmalloc(sizeof(plan_output_t) * (size_t)(n_out ? n_out : 1));
  memcpy(p->outputs, outputs, sizeof(plan_output_t) * (size_t)n_out);
  p->num_program_outputs = n_program;
  p->num_results = rule->variant == LOWER_FUNCTIONAL ? ctx->num_results : 0;
  *out_plan = p;

done:
  if (graph) {
    bind_graph_numbers(e, first_param); /* even on error: every parameter needs a binding */
  } else {
    ir_func_free(ctx->func);
  }
  return status;
}

/*===--- launching a plan ---===*/

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
    scalar_bytes(a, prm->dtype, bytes);
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
    scalar_bytes(&item, prm->dtype, bytes);
    return pjrt_buffer_from_host(device, prm->dtype, 0, NULL, bytes, out);
  }
  uint64_t st[2];
  rng_state(a, st);
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
    status =
        pjrt_execute_spmd(p->executable, mesh->num_devices, mesh->devices, args, np, raw, no, call->name);
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

static TPURT_MUST_USE tpurt_status_t launch(const plan_t* p, tpurt_op_call_t* call) {
  if (p->num_results > call->max_results || (p->num_results > 0 && !call->results))
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s: %d results, room for %d", call->name,
                               p->num_results, call->max_results);
  pjrt_buffer_t* stack_args[32];
  bool stack_owned[32];
  pjrt_buffer_t** bufs =
      p->num_params <= 32 ? stack_args : tpurt_xmalloc(sizeof(void*) * (size_t)p->num_params);
  bool* owned = p->num_params <= 32 ? stack_owned : tpurt_xmalloc(sizeof(bool) * (size_t)p->num_params);
  tpurt_status_t status = NULL;
  int32_t made = 0;
  for (; !p->mesh && made < p->num_params && !status; ++made)
    status = bind_param(&p->params[made], call, call->device, &bufs[made], &owned[made]);
  pjrt_buffer_t* outs_stack[32];
  pjrt_buffer_t** outs = p->num_program_outputs <= 32
                             ? outs_stack
                             : tpurt_xmalloc(sizeof(void*) * (size_t)p->num_program_outputs);
  if (!status && p->mesh)
    status = spmd_execute(p, call, outs);
  else if (!status)
    status = pjrt_execute(p->executable, call->device, bufs, (size_t)p->num_params, outs,
                          (size_t)p->num_program_outputs, call->name);
  for (int32_t k = 0; k < made; ++k)
    if (owned[k]) pjrt_buffer_release(bufs[k]);
  if (!status) {
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
  if (bufs != stack_args) free(bufs);
  if (owned != stack_owned) free(owned);
  if (outs != outs_stack) free(outs);
  return status;
}

/*===--- entry points ---===*/

/* copy_ of a whole storage into a whole storage of the same type shares the
** immutable buffer instead of running a program. */
static bool try_share_copy(const tpurt_op_call_t* call) {
  if (strcmp(call->name, "aten::copy_") != 0 || call->num_args < 2) return false;
  const tpurt_arg_t *d = &call->args[0], *s = &call->args[1];
  if (d->kind != TPURT_ARG_TENSOR || s->kind != TPURT_ARG_TENSOR) return false;
  const tpurt_tensor_t *dt = &d->u.tensor, *st = &s->u.tensor;
  pjrt_buffer_t* sb = st->storage->buffer;
  if (!sb || dt->dtype != st->dtype || dt->storage->device != st->storage->device) return false;
  if (!view_is_whole(dt) || !view_is_whole(st) || dt->rank != st->rank) return false;
  for (int32_t i = 0; i < dt->rank; ++i)
    if (dt->sizes[i] != st->sizes[i]) return false;
  pjrt_buffer_retain(sb);
  storage_set_buffer_consume(dt->storage, sb);
  return true;
}

static sig_t g_sig;

/* Lowers |call| into a new plan under signature g_sig (hash |h|) and adds
** it to the cache, evicting others over the budget. */
static TPURT_MUST_USE tpurt_status_t add_plan(const lower_rule_t* rule, tpurt_op_call_t* call, uint64_t h,
                                              plan_t** out) {
  plan_t* p = NULL;
  TPURT_RETURN_IF_ERROR(lower_op(rule, call, NULL, &p));
  p->hash = h;
  p->sig_len = g_sig.n;
  p->sig = tpurt_xmalloc(g_sig.n * sizeof(uint64_t));
  memcpy(p->sig, g_sig.w, g_sig.n * sizeof(uint64_t));
  p->charge += g_sig.n * sizeof(uint64_t);
  plan_t** bucket = &g_plans[h % PLAN_BUCKETS];
  p->next = *bucket;
  *bucket = p;
  plan_lru_push_newest(p);
  g_plan_count++;
  g_plan_bytes += p->charge;
  plan_evict(p);
  *out = p;
  return NULL;
}

/* Finds or builds the plan for |call| under |rule| and launches it. A
** program loaded from the disk tier that fails to run (a stale or planted
** entry the checksums could not catch) is dropped from both tiers and
** compiled again, once, with a warning; out of memory is not its fault. */
static TPURT_MUST_USE tpurt_status_t run_rule(const lower_rule_t* rule, tpurt_op_call_t* call) {
  build_signature(call, rule->numbers_in_key, &g_sig);
  uint64_t h = sig_hash(&g_sig);
  plan_t* p = NULL;
  for (plan_t* q = g_plans[h % PLAN_BUCKETS]; q; q = q->next) {
    if (q->hash == h && q->sig_len == g_sig.n && memcmp(q->sig, g_sig.w, g_sig.n * sizeof(uint64_t)) == 0) {
      p = q;
      break;
    }
  }
  if (p) {
    ++g_plan_hits;
    plan_lru_unlink(p);
    plan_lru_push_newest(p);
  } else {
    TPURT_RETURN_IF_ERROR(add_plan(rule, call, h, &p));
  }
  tpurt_status_t status = launch(p, call);
  if (!status || !p->from_disk || tpurt_status_code(status) == TPURT_RESOURCE_EXHAUSTED) return status;
  static bool warned;
  if (!warned) {
    warned = true;
    fprintf(stderr,
            "torch_tpu: warning: %s: a program loaded from the executable cache failed to run (%s); it was "
            "removed from the cache and compiled again\n",
            call->name, tpurt_status_message(status));
  }
  tpurt_status_free(status);
  cache_forget(p->program_hash);
  plan_unlink_and_free(p);
  build_signature(call, rule->numbers_in_key, &g_sig); /* lowering may have reused g_sig */
  TPURT_RETURN_IF_ERROR(add_plan(rule, call, h, &p));
  return launch(p, call);
}

/* Data-dependent sizes: count the nonzeros of one tensor arg on the device,
** wait for that number, then run the op with it as a trailing INT arg. */
static TPURT_MUST_USE tpurt_status_t run_counted(const lower_rule_t* rule, tpurt_op_call_t* call) {
  int32_t flat = -1, schema = 0;
  for (int32_t i = 0; i < call->num_args; ++i, ++schema) {
    if (schema == rule->count_arg) flat = i;
    if (call->args[i].kind == TPURT_ARG_TENSOR_LIST) i += call->args[i].u.list_len;
  }
  if (flat < 0 || call->args[flat].kind != TPURT_ARG_TENSOR)
    return tpurt_status_create(TPURT_INTERNAL, "%s: argument %d is not a tensor", call->name,
                               rule->count_arg);
  tpurt_result_t count_result;
  tpurt_op_call_t count_call = {.name = "tpurt::count_nonzero",
                                .args = &call->args[flat],
                                .num_args = 1,
                                .device = call->device,
                                .results = &count_result,
                                .max_results = 1};
  lower_rule_t scratch;
  TPURT_RETURN_IF_ERROR(run_rule(lower_find(count_call.name, &scratch), &count_call));
  tpurt_storage_t* counted = count_call.results[0].storage;
  int64_t count = 0;
  tpurt_status_t status = pjrt_buffer_to_host(counted->buffer, &count, sizeof(count));
  tpurt_storage_release(counted);
  if (status) return status;
  tpurt_arg_t* args = tpurt_xmalloc(sizeof(tpurt_arg_t) * (size_t)(call->num_args + 1));
  memcpy(args, call->args, sizeof(tpurt_arg_t) * (size_t)call->num_args);
  args[call->num_args] = (tpurt_arg_t){.kind = TPURT_ARG_INT, .u.i = count};
  tpurt_op_call_t counted_call = *call;
  counted_call.args = args;
  counted_call.num_args = call->num_args + 1;
  status = run_rule(rule, &counted_call);
  free(args);
  call->num_results = counted_call.num_results;
  return status;
}

/* A cheap signature of an op for loop detection: its name and the shapes
** of its tensor args. */
static uint64_t op_fingerprint(const tpurt_op_call_t* call) {
  uint64_t h = tpurt_hash_str(TPURT_HASH_SEED, call->name);
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind != TPURT_ARG_TENSOR) continue;
    h = tpurt_hash_u64(h, (uint64_t)a->u.tensor.dtype);
    for (int32_t d = 0; d < a->u.tensor.rank; ++d) h = tpurt_hash_u64(h, (uint64_t)a->u.tensor.sizes[d]);
  }
  return h;
}

/* Fused eager and tracing: lower the op into the pending graph. In fused
** eager, the graph is flushed before an op that starts the sequence again
** (a loop step repeats: each step becomes the same program) and when it
** grows past TORCH_TPU_FUSE_MAX_OPS ops. */
static TPURT_MUST_USE tpurt_status_t record_op(const lower_rule_t* rule, tpurt_op_call_t* call, bool fuse) {
  graph_t* g = graph_current();
  uint64_t fp = op_fingerprint(call);
  if (fuse && g && !graph_is_tracing(g)) {
    if (graph_device(g) != call->device) {
      TPURT_RETURN_IF_ERROR(graph_flush_locked(GRAPH_FLUSH_DEVICE_COPY));
    } else if (graph_repeats(g, fp)) {
      TPURT_RETURN_IF_ERROR(graph_flush_locked(GRAPH_FLUSH_REPEATED_SEQUENCE));
    }
  }
  g = graph_open(call->device);
  if (graph_device(g) != call->device)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "a traced graph runs on tpu:%d, this op on tpu:%d",
                               graph_device(g), call->device);
  /* Noted first: the values the op writes and an error its lowering leaves
  ** in the graph are blamed on it. */
  graph_note_op(g, call->name, fp);
  plan_t* unused = NULL;
  tpurt_status_t status = lower_op(rule, call, g, &unused);
  if (!status && fuse && !graph_is_tracing(g)) graph_record_call(g, call);
  if (!status && fuse && !graph_is_tracing(g) && graph_num_ops(g) >= tpurt_config()->fuse_max_ops)
    status = graph_flush_locked(GRAPH_FLUSH_SIZE_LIMIT);
  return status;
}

/* Operands first: a value pending in another thread's graph is computed
** (that graph runs), and one that a failed graph lost makes the op fail
** with that graph's error, never compute from stale bytes. */
static TPURT_MUST_USE tpurt_status_t check_operands(const tpurt_op_call_t* call) {
  for (int32_t i = 0; i < call->num_args; ++i) {
    const tpurt_arg_t* a = &call->args[i];
    if (a->kind != TPURT_ARG_TENSOR || !a->u.tensor.storage) continue;
    TPURT_RETURN_IF_ERROR(graph_settle_locked(a->u.tensor.storage));
    TPURT_RETURN_IF_ERROR(storage_check_poison(a->u.tensor.storage));
  }
  return NULL;
}

/* The rule of |call| (into |scratch| if resolved from another name), after
** check_operands. */
static TPURT_MUST_USE tpurt_status_t prepare_call(tpurt_op_call_t* call, lower_rule_t* scratch,
                                                  const lower_rule_t** out_rule) {
  call->num_results = 0;
  *out_rule = lower_find(call->name, scratch);
  if (!*out_rule) return tpurt_status_create(TPURT_UNIMPLEMENTED, "no tpu lowering for %s", call->name);
  return check_operands(call);
}

tpurt_status_t engine_op_run_now_locked(tpurt_op_call_t* call) {
  lower_rule_t scratch;
  const lower_rule_t* rule = NULL;
  TPURT_RETURN_IF_ERROR(prepare_call(call, &scratch, &rule));
  if (try_share_copy(call)) return NULL;
  return rule->count_arg >= 0 ? run_counted(rule, call) : run_rule(rule, call);
}

tpurt_status_t engine_op_replay_locked(const tpurt_op_call_t* recorded, tpurt_result_t* results,
                                       int32_t num_results) {
  tpurt_op_call_t call = *recorded;
  tpurt_result_t* fresh = tpurt_xcalloc((size_t)call.max_results + 1, sizeof(tpurt_result_t));
  call.results = fresh;
  call.num_results = 0;
  tpurt_status_t status = engine_op_run_now_locked(&call);
  for (int32_t k = 0; k < call.num_results && k < call.max_results; ++k) {
    tpurt_storage_t* s = fresh[k].storage;
    if (!status && s && k < num_results && results[k].storage && s->buffer) {
      pjrt_buffer_retain(s->buffer);
      storage_set_buffer_consume(results[k].storage, s->buffer);
    }
    tpurt_storage_release(s);
  }
  free(fresh);
  return status;
}

tpurt_status_t engine_view_materialize_locked(const tpurt_tensor_t* view, tpurt_storage_t** out_dense) {
  *out_dense = NULL;
  tpurt_arg_t arg = {.kind = TPURT_ARG_TENSOR, .u.tensor = *view};
  tpurt_result_t result;
  tpurt_op_call_t call = {.name = "aten::clone",
                          .args = &arg,
                          .num_args = 1,
                          .device = view->storage->device,
                          .results = &result,
                          .max_results = 1};
  TPURT_RETURN_IF_ERROR(engine_op_run_now_locked(&call));
  *out_dense = result.storage;
  return NULL;
}

tpurt_status_t engine_op_run_locked(tpurt_op_call_t* call) {
  lower_rule_t scratch;
  const lower_rule_t* rule = NULL;
  TPURT_RETURN_IF_ERROR(prepare_call(call, &scratch, &rule));
  tpurt_eager_mode_t mode = tpurt_get_eager_mode();
  graph_t* g = graph_current();
  bool tracing = g && graph_is_tracing(g);
  if (tracing || mode == TPURT_MODE_DEFER_AND_FUSE || mode == TPURT_MODE_INTERNAL_DEFER_ALL) {
    if (rule->count_arg < 0) return record_op(rule, call, mode == TPURT_MODE_DEFER_AND_FUSE);
    if (tracing)
      return tpurt_status_create(
          TPURT_INVALID_ARGUMENT,
          "%s has a data-dependent output size, which a compiled graph cannot express; "
          "let it run eagerly (a graph break)",
          call->name);
  }
  if (g) TPURT_RETURN_IF_ERROR(graph_flush_locked(GRAPH_FLUSH_STRICT_OP));
  if (try_share_copy(call)) return NULL;
  tpurt_status_t status = rule->count_arg >= 0 ? run_counted(rule, call) : run_rule(rule, call);
  if (!status && mode == TPURT_MODE_LAUNCH_BLOCKING) {
    /* debug eager: wait, so an error is raised at the op that caused it */
    status = pjrt_synchronize(call->device);
  }
  return status;
}

tpurt_status_t tpurt_op_run(tpurt_op_call_t* call) {
  TPURT_RETURN_IF_ERROR(tpurt_runtime_init());
  engine_lock();
  tpurt_status_t status = engine_op_run_locked(call);
  engine_unlock();
  return status;
}

bool tpurt_op_supported(const char* name) {
  lower_rule_t scratch;
  return lower_find(name, &scratch) != NULL;
}

tpurt_status_t tpurt_synchronize(int device) {
  engine_lock();
  tpurt_status_t status = graph_flush_locked(GRAPH_FLUSH_SYNCHRONIZE);
  engine_unlock();
  return status ? status : pjrt_synchronize(device);
}

/*===--- metrics ---===*/

/* The metrics' names and labels, from the one list (TPURT_METRICS). */
#define METRIC_IS_SECONDS_COUNT false
#define METRIC_IS_SECONDS_SECONDS true
#define METRIC_INFO_(name, kind, label) \
  {#name, label, METRIC_IS_SECONDS_##kind, offsetof(tpurt_metrics_t, name)},
static const tpurt_metric_info_t kMetricInfos[] = {TPURT_METRICS(METRIC_INFO_)};
#undef METRIC_INFO_

const tpurt_metric_info_t* tpurt_metric_infos(int* out_count) {
  *out_count = (int)(sizeof(kMetricInfos) / sizeof(kMetricInfos[0]));
  return kMetricInfos;
}

void tpurt_metrics_get(tpurt_metrics_t* m) {
  memset(m, 0, sizeof(*m));
  pjrt_counters_t* c = pjrt_counters();
  m->compiles = c->compiles;
  m->executions = c->executions;
  m->bytes_to_device = c->bytes_to_device;
  m->bytes_from_device = c->bytes_from_device;
  m->compile_seconds = c->compile_seconds;
  m->live_buffers = c->live_buffers;
  m->cache_hits = g_plan_hits + g_exec_hits;
  m->spmd_compiles = engine_spmd_compiles;
  m->live_storages = (uint64_t)__atomic_load_n(&engine_live_storages, __ATOMIC_RELAXED);
  cache_stats_t cs;
  cache_stats(&cs);
  m->cache_hits_memory = cs.hits_memory;
  m->cache_hits_disk = cs.hits_disk;
  m->cache_bytes_memory = cs.bytes_memory;
  m->cache_entries = cs.entries;
  m->cache_disk_writes = cs.disk_writes;
  m->cache_disk_rejects = cs.disk_rejects;
  m->plans = g_plan_count;
  m->plan_bytes = g_plan_bytes;
  uint64_t device_ns = 0, runs = 0;
  (void)tpurt_program_stats(NULL, 0, &device_ns, &runs);
  m->execute_seconds = (double)device_ns / 1e9;
  for (int d = 0; d < 64; ++d) {
    m->bytes_in_use += c->bytes_in_use[d];
    m->peak_bytes_in_use += c->peak_bytes_in_use[d];
  }
}

void tpurt_metrics_reset(void) {
  pjrt_counters_t* c = pjrt_counters();
  c->compiles = c->executions = c->bytes_to_device = c->bytes_from_device = 0;
  c->compile_seconds = 0;
  g_plan_hits = g_exec_hits = 0;
  engine_spmd_compiles = 0;
  cache_reset_counters();
  graph_reset_counts();
  pjrt_program_stats_reset();
}

uint64_t tpurt_memory_allocated(int device) {
  return (device >= 0 && device < 64) ? pjrt_counters()->bytes_in_use[device] : 0;
}
uint64_t tpurt_max_memory_allocated(int device) {
  return (device >= 0 && device < 64) ? pjrt_counters()->peak_bytes_in_use[device] : 0;
}
void tpurt_reset_peak_memory(int device) {
  if (device >= 0 && device < 64)
    pjrt_counters()->peak_bytes_in_use[device] = pjrt_counters()->bytes_in_use[device];
}
