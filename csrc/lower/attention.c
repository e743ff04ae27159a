/* attention.c: scaled dot product attention, forward and backward, as one
** program each (aten::_scaled_dot_product_fused_attention_overrideable and
** its _backward, which torch_tpu/csrc/Attention.cpp makes SDPA choose).
**
** Shapes: query [N.., H, L, D], key [N.., Hk, S, D], value [N.., Hk, S, Dv]
** with N.. zero or one batch dim. The dots see one batch dim B = N * Hk:
** query is viewed as [B, G, L, D] (grouped query attention: Hk < H, H a
** multiple of Hk; key and value are never repeated) or [B, L, D] (one
** group), key and value as [B, S, ...]. Those views are free reshapes of the
** dense inputs. No size-1 dim ever appears among the batch dims: a batch
** of N = 1 or a group of G = 1 made XLA:CPU pick a layout that copies the
** whole score tensor, and measured 2x slower for (1, 4, 1040, 64).
**
** Query blocks: the [N.., H, L, S] scores of a long sequence do not fit in
** any cache (8 heads x 4096 x 4096 f32 is 512 MiB), and every pass over them
** (max, exp, sum, the dot with V) then runs at memory speed. So the rows can
** be cut into blocks whose scores stay under a byte budget, each block its
** own small softmax over all S keys: rows are independent, so this is exact,
** with no rescaling (unlike an online softmax over key blocks). Unrolled
** blocks measured slower on the CPU plugin (see SDPA_BLOCK_BYTES), so the
** budget is off by default (docs/architecture.md, "Attention").
**
** Half types: the dots take the inputs as they are and accumulate in f32;
** scores, softmax and logsumexp are f32; probabilities are rounded to the
** input type for the dot with value (as flash kernels do), and the output
** is rounded once. Rows that mask out every key give 0, as PyTorch does.
**
** On a CUDA platform, the calls cuDNN's flash attention supports become one
** custom call each instead (attention_cudnn.c); everything else (f32, odd
** head dims, non-square causal...) stays here. */
#include "attention.h"

#include <math.h>

#include "../base/base.h"

/* Schema positions of the forward and the backward. */
static const sdpa_args_t kForwardArgs = {0, 1, 2, 3, 4, 5, 7};
static const sdpa_args_t kBackwardArgs = {1, 2, 3, 4, 12, 13, 16};

/* Scores bytes of one query block at most (f32); 0: one block. Measured on
** the CPU plugin, unrolled blocks were never faster (XLA may run independent
** blocks at once, so the scores are live together anyway): (1, 8, 4096, 64)
** forward took 1088 ms of CPU unblocked, 1192 ms with 32 MiB blocks, 1542 ms
** with 8 MiB. So the default is one block; TORCH_TPU_SDPA_BLOCK_BYTES sets a
** budget, to measure the crossover on another platform (docs/architecture.md,
** "Attention and matmul precision"). */
#define SDPA_BLOCK_BYTES 0
#define SDPA_MAX_BLOCKS 64

static tpurt_status_t check_inputs(lower_ctx_t* ctx, const sdpa_args_t* a, sdpa_t* p) {
  const tpurt_tensor_t *q = lower_meta(ctx, a->q), *k = lower_meta(ctx, a->k), *v = lower_meta(ctx, a->v);
  if (q->dtype != k->dtype || q->dtype != v->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected query, key, and value to have the same dtype, but got query.dtype: %s "
                       "key.dtype: %s and value.dtype: %s instead.",
                       lower_dtype_cpp_name(q->dtype), lower_dtype_cpp_name(k->dtype),
                       lower_dtype_cpp_name(v->dtype));
  if (!tpurt_dtype_is_float(q->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected query, key and value to be floating point tensors, but got %s",
                       lower_dtype_cpp_name(q->dtype));
  if (q->rank != 3 && q->rank != 4) return lower_error(TPURT_INVALID_ARGUMENT, "query must be 3D or 4D");
  if (k->rank != q->rank || v->rank != q->rank)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected query, key and value to have the same number of dimensions, but got "
                       "query.dim: %d key.dim: %d and value.dim: %d instead.",
                       q->rank, k->rank, v->rank);
  int32_t nb = q->rank - 3;
  for (int32_t i = 0; i < nb; ++i)
    if (k->sizes[i] != q->sizes[i] || v->sizes[i] != q->sizes[i])
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Expected query, key and value to have the same batch size, but got query: %s, "
                         "key: %s, value: %s",
                         lower_shape_str(q->rank, q->sizes), lower_shape_str(k->rank, k->sizes),
                         lower_shape_str(v->rank, v->sizes));
  int64_t h = q->sizes[nb], hk = k->sizes[nb];
  if (v->sizes[nb] != hk || hk == 0 || h % hk != 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Number of heads in key and value must divide the number of heads in query, but got "
                       "query: %lld, key: %lld, value: %lld",
                       (long long)h, (long long)hk, (long long)v->sizes[nb]);
  if (k->sizes[nb + 2] != q->sizes[nb + 2])
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected query and key to have the same head dim, but got query.size(-1): %lld and "
                       "key.size(-1): %lld",
                       (long long)q->sizes[nb + 2], (long long)k->sizes[nb + 2]);
  if (v->sizes[nb + 1] != k->sizes[nb + 1])
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected key and value to have the same sequence length, but got key.size(-2): %lld "
                       "and value.size(-2): %lld",
                       (long long)k->sizes[nb + 1], (long long)v->sizes[nb + 1]);
  if (!lower_is_none(ctx, a->dropout) && lower_scalar_value(ctx, a->dropout) != 0.0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "dropout_p > 0 is not supported by the tpu fused attention (it has no generator); "
                       "scaled_dot_product_attention uses the math path for it");
  int32_t gd = h / hk > 1;
  *p = (sdpa_t){
      .dtype = q->dtype,
      .acc = lower_acc_dtype(q->dtype),
      .nb = nb,
      .n = nb ? q->sizes[0] : 1,
      .h = h,
      .hk = hk,
      .g = h / hk,
      .l = q->sizes[nb + 1],
      .s = k->sizes[nb + 1],
      .d = q->sizes[nb + 2],
      .dv = v->sizes[nb + 2],
      .gd = gd,
      .w = 3 + gd,
      .l0 = 0,
      .lb = q->sizes[nb + 1],
  };
  if (!lower_is_none(ctx, a->bias)) {
    const tpurt_tensor_t* b = lower_meta(ctx, a->bias);
    int64_t want[TPURT_MAX_RANK], got[TPURT_MAX_RANK];
    int32_t rank = 0;
    if (nb) want[rank++] = p->n;
    want[rank++] = h;
    want[rank++] = p->l;
    want[rank++] = p->s;
    int32_t r;
    TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(b->rank, b->sizes, rank, want, &r, got));
    bool same = r == rank;
    for (int32_t i = 0; same && i < rank; ++i) same = got[i] == want[i];
    if (!same)
      return lower_error(TPURT_INVALID_ARGUMENT, "attn_bias of shape %s cannot broadcast to the scores %s",
                         lower_shape_str(b->rank, b->sizes), lower_shape_str(rank, want));
    if (b->dtype != TPURT_DTYPE_BOOL && !tpurt_dtype_is_float(b->dtype))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                         "attn_mask.dtype: %s and  query.dtype: %s instead.",
                         lower_dtype_cpp_name(b->dtype), lower_dtype_cpp_name(q->dtype));
  }
  return NULL;
}

/* How many query rows one block takes (all of them when the scores fit). */
static int64_t block_rows(const sdpa_t* p) {
  const uint64_t set = tpurt_config()->sdpa_block_bytes; /* TORCH_TPU_SDPA_BLOCK_BYTES */
  int64_t budget = set ? (int64_t)(set > INT64_MAX ? INT64_MAX : set) : SDPA_BLOCK_BYTES;
  int64_t row_bytes = p->n * p->h * p->s * 4;
  if (budget <= 0 || row_bytes <= 0 || p->l * row_bytes <= budget) return p->l;
  int64_t rows = budget / row_bytes, min_rows = (p->l + SDPA_MAX_BLOCKS - 1) / SDPA_MAX_BLOCKS;
  if (rows < min_rows) rows = min_rows;
  if (rows >= 8) rows &= ~(int64_t)7; /* whole vector registers */
  if (rows < 1) rows = 1;
  /* equal blocks: the last one never a sliver */
  int64_t blocks = (p->l + rows - 1) / rows;
  return (p->l + blocks - 1) / blocks;
}

/* Dims of the grouped layout: [B, (G), rows, last] (rank p->w). */
static void grouped_dims(const sdpa_t* p, int64_t rows, int64_t last, int64_t* dims) {
  int32_t i = 0;
  dims[i++] = p->n * p->hk;
  if (p->gd) dims[i++] = p->g;
  dims[i++] = rows;
  dims[i] = last;
}

/* Dims of the ungrouped layout [N.., H, rows, last] (rank p->nb + 3). */
static void plain_dims(const sdpa_t* p, int64_t rows, int64_t last, int64_t* dims) {
  int32_t i = 0;
  if (p->nb) dims[i++] = p->n;
  dims[i++] = p->h;
  dims[i++] = rows;
  dims[i] = last;
}

/* The dims of a [B, (G), rows] row tensor of the current block. */
static void row_dims(const sdpa_t* p, int64_t* dims) {
  int64_t full[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, 0, full);
  for (int32_t i = 0; i < p->w - 1; ++i) dims[i] = full[i];
}

/* The current block's rows of a plain [N.., H, L, last] tensor, grouped. */
static ir_value_t block_of(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int64_t last) {
  if (p->lb != p->l) {
    int64_t start[TPURT_MAX_RANK] = {0}, limit[TPURT_MAX_RANK], strides[TPURT_MAX_RANK];
    plain_dims(p, p->l, last, limit);
    for (int32_t i = 0; i < p->nb + 3; ++i) strides[i] = 1;
    start[p->nb + 1] = p->l0;
    limit[p->nb + 1] = p->l0 + p->lb;
    x = ir_slice(ctx->func, x, start, limit, strides);
  }
  int64_t dims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, last, dims);
  return p->nb || p->gd ? ir_reshape(ctx->func, x, p->w, dims) : x;
}

/* A grouped block back in the plain layout [N.., H, rows, last]. */
static ir_value_t ungrouped(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int64_t last) {
  if (!p->nb && !p->gd) return x;
  int64_t dims[TPURT_MAX_RANK];
  plain_dims(p, p->lb, last, dims);
  return ir_reshape(ctx->func, x, p->nb + 3, dims);
}

/* Key or value (schema arg |arg|, plain [N.., Hk, S, last]) as [B, S, last]. */
static ir_value_t kv_batched(lower_ctx_t* ctx, const sdpa_t* p, int32_t arg) {
  ir_value_t x = lower_tensor(ctx, arg);
  if (!p->nb) return x;
  const tpurt_tensor_t* m = lower_meta(ctx, arg);
  int64_t dims[3] = {p->n * p->hk, m->sizes[2], m->sizes[3]};
  return ir_reshape(ctx->func, x, 3, dims);
}

/* A [B, S, last] gradient of key or value back in |arg|'s plain shape. */
static ir_value_t kv_plain(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int32_t arg) {
  if (!p->nb) return x;
  const tpurt_tensor_t* m = lower_meta(ctx, arg);
  return ir_reshape(ctx->func, x, m->rank, m->sizes);
}

/* A dot over the batch dim B contracting |lc| of lhs with |rc| of rhs,
** accumulating in the acc type. */
static ir_value_t batched_dot(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t lhs, ir_value_t rhs, int32_t nc,
                              const int64_t* lc, const int64_t* rc) {
  ir_dot_dims_t dd = {.num_batch = 1, .num_contract = nc};
  dd.lhs_batch[0] = dd.rhs_batch[0] = 0;
  for (int32_t i = 0; i < nc; ++i) {
    dd.lhs_contract[i] = lc[i];
    dd.rhs_contract[i] = rc[i];
  }
  return ir_dot_general(ctx->func, lhs, rhs, &dd, p->acc);
}

/* Broadcasts a [B, (G), rows] row tensor over a last dim of |last|. */
static ir_value_t over_rows(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int64_t last) {
  int64_t dims[TPURT_MAX_RANK], bdims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, last, dims);
  for (int32_t i = 0; i < p->w - 1; ++i) bdims[i] = i;
  return ir_broadcast_in_dim(ctx->func, x, p->w, dims, bdims);
}

static ir_value_t scale_value(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p) {
  if (lower_is_none(ctx, a->scale)) return ir_constant_f64(ctx->func, p->acc, 1.0 / sqrt((double)p->d));
  return lower_scalar(ctx, a->scale, p->acc);
}

/* Broadcasts a bias of shape |bm| (broadcastable to [N.., H, L, S]) into
** the block's grouped scores [B, (G), rows, S]: its rows are cut to the
** block, it is broadcast to the plain [N.., H, rows, S] and reshaped (XLA
** fuses both into the consumer). */
static ir_value_t bias_to_grouped(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t b, const tpurt_tensor_t* bm) {
  int64_t plain[TPURT_MAX_RANK], map[TPURT_MAX_RANK];
  int32_t rank = p->nb + 3, off = rank - bm->rank;
  int32_t row_dim = p->nb + 1 - off; /* the bias's L dim, if it has one */
  if (row_dim >= 0 && bm->sizes[row_dim] == p->l && p->lb != p->l) {
    int64_t start[TPURT_MAX_RANK] = {0}, limit[TPURT_MAX_RANK], strides[TPURT_MAX_RANK];
    for (int32_t i = 0; i < bm->rank; ++i) {
      limit[i] = bm->sizes[i];
      strides[i] = 1;
    }
    start[row_dim] = p->l0;
    limit[row_dim] = p->l0 + p->lb;
    b = ir_slice(ctx->func, b, start, limit, strides);
  }
  plain_dims(p, p->lb, p->s, plain);
  for (int32_t i = 0; i < bm->rank; ++i) map[i] = i + off;
  b = ir_broadcast_in_dim(ctx->func, b, rank, plain, map);
  int64_t dims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, p->s, dims);
  return ir_reshape(ctx->func, b, p->w, dims);
}

/* Where the scale is applied. When the inputs are in the acc type (f32,
** f64), query is scaled before the dot, [rows, D] multiplies instead of
** [rows, S]: a multiply on the dot's output measured 2x slower on XLA:CPU
** for (1, 4, 1040, 64) (it stops the dot from writing its result straight
** into the consumers' fusion). Half inputs keep the scale on the f32 scores,
** so that the query is not rounded once more. */
static bool prescaled(const sdpa_t* p) { return p->dtype == p->acc; }

/* The block's query [B, (G), rows, D], times the scale when prescaled. */
static ir_value_t block_query(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale) {
  ir_value_t q = block_of(ctx, p, lower_tensor(ctx, a->q), p->d);
  if (!prescaled(p)) return q;
  int64_t dims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, p->d, dims);
  return ir_binary(ctx->func, "stablehlo.multiply", q, lower_broadcast_to(ctx, scale, p->w, dims));
}

/* The block's masked, scaled scores [B, (G), rows, S] in the acc type. */
static ir_value_t scores(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale) {
  ir_func_t* f = ctx->func;
  int64_t dims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, p->s, dims);
  int64_t lc = p->w - 1, rc = 2;
  ir_value_t s = batched_dot(ctx, p, block_query(ctx, a, p, scale), kv_batched(ctx, p, a->k), 1, &lc, &rc);
  if (!prescaled(p)) s = ir_binary(f, "stablehlo.multiply", s, lower_broadcast_to(ctx, scale, p->w, dims));
  ir_value_t neg_inf = lower_splat(ctx, p->acc, p->w, dims, -INFINITY);
  if (!lower_is_none(ctx, a->bias)) {
    const tpurt_tensor_t* bm = lower_meta(ctx, a->bias);
    ir_value_t b = lower_tensor(ctx, a->bias);
    if (bm->dtype != TPURT_DTYPE_BOOL) b = lower_cast(ctx, b, p->acc);
    b = bias_to_grouped(ctx, p, b, bm);
    s = bm->dtype == TPURT_DTYPE_BOOL ? ir_select(f, b, s, neg_inf) : ir_binary(f, "stablehlo.add", s, b);
  }
  if (lower_bool(ctx, a->causal, false)) { /* key j is visible from query i iff j <= i (top left) */
    int64_t ls[2] = {p->lb, p->s}, last2[2] = {p->w - 2, p->w - 1};
    ir_type_t t = ir_type_make(TPURT_DTYPE_I64, 2, ls);
    ir_value_t row = ir_iota(f, t, 0);
    if (p->l0)
      row = ir_binary(f, "stablehlo.add", row, lower_splat(ctx, TPURT_DTYPE_I64, 2, ls, (double)p->l0));
    ir_value_t keep = ir_compare(f, IR_LE, ir_iota(f, t, 1), row);
    s = ir_select(f, ir_broadcast_in_dim(f, keep, p->w, dims, last2), s, neg_inf);
  }
  return s;
}

/* _scaled_dot_product_fused_attention_overrideable(query, key, value,
** attn_bias?, dropout_p, is_causal, return_debug_mask, *, scale?) ->
** (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
**  philox_offset, debug_attn_mask) */
/* Sets result |k| in the memory order of |like|: PyTorch's meta kernels give
** the attention output and the gradients their input's strides (queries are
** often [B, L, H, D] in memory), and the graphs torch.compile traces rely on
** them (a later view). */
static void set_like(lower_ctx_t* ctx, int32_t k, ir_value_t logical, const tpurt_tensor_t* like) {
  const ir_type_t* t = ir_value_type(ctx->func, logical);
  if (!t || !like || like->rank != t->rank) {
    lower_set_result(ctx, k, logical);
    return;
  }
  int64_t order[TPURT_MAX_RANK], inverse[TPURT_MAX_RANK];
  lower_memory_order(like, order);
  for (int32_t i = 0; i < t->rank; ++i) inverse[order[i]] = i;
  bool identity = true;
  for (int32_t i = 0; i < t->rank; ++i) identity &= order[i] == i;
  if (identity) {
    lower_set_result(ctx, k, logical);
    return;
  }
  lower_set_result_permuted(ctx, k, ir_transpose(ctx->func, logical, order), inverse);
}

/* One query block of the forward: its output [N.., H, rows, Dv] (input
** dtype) and logsumexp [N, H, rows] (f32). */
static void forward_block(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale,
                          ir_value_t* out_o, ir_value_t* out_lse) {
  ir_func_t* f = ctx->func;
  ir_value_t s = scores(ctx, a, p, scale);
  int64_t rdims[TPURT_MAX_RANK], last = p->w - 1;
  row_dims(p, rdims);
  ir_value_t m = ir_reduce(f, s, ir_constant_f64(f, p->acc, -INFINITY), &last, 1, IR_REDUCE_MAX);
  /* a row with every key masked has max -inf: shift it by 0 instead, so its
  ** exponentials are 0 (not nan) and its output is 0 */
  ir_value_t dead = ir_compare(f, IR_EQ, m, lower_splat(ctx, p->acc, p->w - 1, rdims, -INFINITY));
  m = ir_select(f, dead, lower_splat(ctx, p->acc, p->w - 1, rdims, 0.0), m);
  ir_value_t e =
      ir_unary(f, "stablehlo.exponential", ir_binary(f, "stablehlo.subtract", s, over_rows(ctx, p, m, p->s)));
  ir_value_t sum = ir_reduce(f, e, ir_constant_f64(f, p->acc, 0.0), &last, 1, IR_REDUCE_ADD);
  int64_t lc = p->w - 1, rc = 1;
  ir_value_t o = batched_dot(ctx, p, lower_cast(ctx, e, p->dtype), kv_batched(ctx, p, a->v), 1, &lc, &rc);
  ir_value_t safe_sum = ir_select(f, dead, lower_splat(ctx, p->acc, p->w - 1, rdims, 1.0), sum);
  o = ir_binary(f, "stablehlo.divide", o, over_rows(ctx, p, safe_sum, p->dv));
  *out_o = ungrouped(ctx, p, lower_cast(ctx, o, p->dtype), p->dv);
  /* -inf for dead rows */
  ir_value_t lse = ir_binary(f, "stablehlo.add", m, ir_unary(f, "stablehlo.log", sum));
  int64_t lse_dims[3] = {p->n, p->h, p->lb};
  *out_lse = ir_reshape(f, lower_cast(ctx, lse, TPURT_DTYPE_F32), 3, lse_dims);
}

static tpurt_status_t lower_sdpa_forward(lower_ctx_t* ctx) {
  const sdpa_args_t* a = &kForwardArgs;
  sdpa_t p;
  TPURT_RETURN_IF_ERROR(check_inputs(ctx, a, &p));
  if (lower_bool(ctx, 6, false))
    return lower_error(TPURT_INVALID_ARGUMENT, "return_debug_mask=True is not supported on tpu");
  ir_func_t* f = ctx->func;
  ir_value_t o, lse;
  if (sdpa_cudnn_supported(ctx, a, &p)) {
    sdpa_cudnn_forward(ctx, a, &p, &o, &lse);
  } else {
    ir_value_t scale = scale_value(ctx, a, &p);
    int64_t rows = block_rows(&p);
    ir_value_t outs[SDPA_MAX_BLOCKS + 1], lses[SDPA_MAX_BLOCKS + 1];
    int32_t nblocks = 0;
    for (int64_t l0 = 0; l0 < p.l || nblocks == 0; l0 += rows, ++nblocks) {
      sdpa_t blk = p;
      blk.l0 = l0;
      blk.lb = p.l - l0 < rows ? p.l - l0 : rows;
      forward_block(ctx, a, &blk, scale, &outs[nblocks], &lses[nblocks]);
    }
    o = nblocks == 1 ? outs[0] : ir_concatenate(f, outs, nblocks, p.nb + 1);
    lse = nblocks == 1 ? lses[0] : ir_concatenate(f, lses, nblocks, 2);
  }
  set_like(ctx, 0, o, lower_meta(ctx, a->q));
  lower_set_result(ctx, 1, lse); /* [N, H, L] in f32 (N = 1 for 3-d inputs) */
  lower_set_undefined(ctx, 2);   /* cum_seq_q, cum_seq_k: not a nested (varlen) call */
  lower_set_undefined(ctx, 3);
  lower_set_host_int(ctx, 4, p.l); /* max_q, max_k: SymInts, known without the device */
  lower_set_host_int(ctx, 5, p.s);
  lower_set_result(ctx, 6, ir_constant_i64(f, TPURT_DTYPE_I64, 0)); /* philox seed, offset: no dropout */
  lower_set_result(ctx, 7, ir_constant_i64(f, TPURT_DTYPE_I64, 0));
  lower_set_undefined(ctx, 8); /* debug_attn_mask */
  return NULL;
}

/* Sums |x| [N.., H, L, S] down to the shape of bias arg |arg|. */
static ir_value_t sum_to_bias(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int32_t arg) {
  const tpurt_tensor_t* b = lower_meta(ctx, arg);
  int64_t dims[TPURT_MAX_RANK], red[TPURT_MAX_RANK];
  plain_dims(p, p->l, p->s, dims);
  int32_t rank = p->nb + 3, off = rank - b->rank, nred = 0;
  for (int32_t i = 0; i < rank; ++i)
    if (i < off || (b->sizes[i - off] == 1 && dims[i] != 1)) red[nred++] = i;
  if (nred) x = ir_reduce(ctx->func, x, ir_constant_f64(ctx->func, p->acc, 0.0), red, nred, IR_REDUCE_ADD);
  return lower_cast(ctx, ir_reshape(ctx->func, x, b->rank, b->sizes), b->dtype);
}

/* What the backward wants, and its block's partial results (acc type). */
typedef struct sdpa_grads_s {
  bool want_q, want_k, want_v, want_b;
  ir_value_t dq, dk, dv, ds; /* dq and ds: this block's; dk, dv: summed so far */
} sdpa_grads_t;

static ir_value_t add_or_first(lower_ctx_t* ctx, ir_value_t sum, ir_value_t x) {
  return sum == IR_NONE ? x : ir_binary(ctx->func, "stablehlo.add", sum, x);
}

/* One query block of the backward. P is recomputed from the scores and the
** saved logsumexp; dV and dK are sums over the blocks (and over the group). */
static void backward_block(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale,
                           sdpa_grads_t* gr) {
  ir_func_t* f = ctx->func;
  ir_value_t s = scores(ctx, a, p, scale);
  int64_t rdims[TPURT_MAX_RANK], sdims[TPURT_MAX_RANK];
  row_dims(p, rdims);
  grouped_dims(p, p->lb, p->s, sdims);
  /* P = exp(s - lse); a dead row (lse -inf) gets +inf, so its P is 0 */
  int64_t lse_dims[3] = {p->n, p->h, p->l};
  ir_value_t l = lower_cast(ctx, lower_tensor(ctx, 7), p->acc);
  if (p->lb != p->l) {
    int64_t start[3] = {0, 0, p->l0}, limit[3] = {lse_dims[0], lse_dims[1], p->l0 + p->lb}, st[3] = {1, 1, 1};
    l = ir_slice(f, l, start, limit, st);
  }
  l = ir_reshape(f, l, p->w - 1, rdims);
  ir_value_t dead = ir_compare(f, IR_EQ, l, lower_splat(ctx, p->acc, p->w - 1, rdims, -INFINITY));
  l = ir_select(f, dead, lower_splat(ctx, p->acc, p->w - 1, rdims, INFINITY), l);
  ir_value_t prob =
      ir_unary(f, "stablehlo.exponential", ir_binary(f, "stablehlo.subtract", s, over_rows(ctx, p, l, p->s)));

  ir_value_t dout = block_of(ctx, p, lower_tensor(ctx, 0), p->dv);
  int64_t gl[2] = {1, 2}; /* the (G), rows dims of a grouped tensor */
  int32_t ngl = 1 + p->gd;
  if (gr->want_v) { /* dV = P^T dO, summed over the group */
    ir_value_t dv = batched_dot(ctx, p, lower_cast(ctx, prob, p->dtype), dout, ngl, gl, gl);
    gr->dv = add_or_first(ctx, gr->dv, dv);
  }
  if (!gr->want_q && !gr->want_k && !gr->want_b) return;
  /* dS = P * (dO V^T - rowsum(dO * O)) */
  int64_t lc = p->w - 1, rc = 2;
  ir_value_t dp = batched_dot(ctx, p, dout, kv_batched(ctx, p, a->v), 1, &lc, &rc);
  ir_value_t o = block_of(ctx, p, lower_tensor(ctx, 6), p->dv);
  ir_value_t oo =
      ir_binary(f, "stablehlo.multiply", lower_cast(ctx, dout, p->acc), lower_cast(ctx, o, p->acc));
  ir_value_t di = ir_reduce(f, oo, ir_constant_f64(f, p->acc, 0.0), &lc, 1, IR_REDUCE_ADD);
  ir_value_t ds = ir_binary(f, "stablehlo.multiply", prob,
                            ir_binary(f, "stablehlo.subtract", dp, over_rows(ctx, p, di, p->s)));
  /* prescaled: the scale goes on dQ [rows, D] and comes with the scaled
  ** query into dK, so no [rows, S] multiply */
  ir_value_t dss =
      prescaled(p)
          ? ds
          : lower_cast(ctx,
                       ir_binary(f, "stablehlo.multiply", ds, lower_broadcast_to(ctx, scale, p->w, sdims)),
                       p->dtype);
  if (gr->want_q) { /* dQ = scale dS K */
    int64_t klc = p->w - 1, krc = 1, qdims[TPURT_MAX_RANK];
    ir_value_t dq = batched_dot(ctx, p, dss, kv_batched(ctx, p, a->k), 1, &klc, &krc);
    if (prescaled(p)) {
      grouped_dims(p, p->lb, p->d, qdims);
      dq = ir_binary(f, "stablehlo.multiply", dq, lower_broadcast_to(ctx, scale, p->w, qdims));
    }
    gr->dq = ungrouped(ctx, p, dq, p->d);
  }
  if (gr->want_k) { /* dK = scale dS^T Q, summed over the group */
    ir_value_t q =
        prescaled(p) ? block_query(ctx, a, p, scale) : block_of(ctx, p, lower_tensor(ctx, a->q), p->d);
    gr->dk = add_or_first(ctx, gr->dk, batched_dot(ctx, p, dss, q, ngl, gl, gl));
  }
  if (gr->want_b) gr->ds = ungrouped(ctx, p, ds, p->s);
}

/* _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query,
** key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
** cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
** philox_offset, *, scale?) -> (grad_query, grad_key, grad_value,
** grad_attn_bias). */
static tpurt_status_t lower_sdpa_backward(lower_ctx_t* ctx) {
  const sdpa_args_t* a = &kBackwardArgs;
  sdpa_t p;
  TPURT_RETURN_IF_ERROR(check_inputs(ctx, a, &p));
  const tpurt_tensor_t *go = lower_meta(ctx, 0), *out = lower_meta(ctx, 6), *lse = lower_meta(ctx, 7);
  int64_t odims[TPURT_MAX_RANK];
  plain_dims(&p, p.l, p.dv, odims);
  for (int32_t k = 0; k < 2; ++k) {
    const tpurt_tensor_t* t = k ? out : go;
    bool same = t->rank == p.nb + 3;
    for (int32_t i = 0; same && i < t->rank; ++i) same = t->sizes[i] == odims[i];
    if (!same)
      return lower_error(TPURT_INVALID_ARGUMENT, "Expected %s of shape %s, but got %s",
                         k ? "out" : "grad_out", lower_shape_str(p.nb + 3, odims),
                         lower_shape_str(t->rank, t->sizes));
  }
  if (lse->rank != 3 || lse->sizes[0] != p.n || lse->sizes[1] != p.h || lse->sizes[2] != p.l)
    return lower_error(TPURT_INVALID_ARGUMENT, "Expected logsumexp of shape [%lld, %lld, %lld], but got %s",
                       (long long)p.n, (long long)p.h, (long long)p.l,
                       lower_shape_str(lse->rank, lse->sizes));
  sdpa_grads_t gr = {.dq = IR_NONE, .dk = IR_NONE, .dv = IR_NONE, .ds = IR_NONE};
  gr.want_q = lower_bool_list_item(ctx, 5, 0, true);
  gr.want_k = lower_bool_list_item(ctx, 5, 1, true);
  gr.want_v = lower_bool_list_item(ctx, 5, 2, true);
  gr.want_b = lower_bool_list_item(ctx, 5, 3, true) && !lower_is_none(ctx, a->bias) &&
              lower_meta(ctx, a->bias)->dtype != TPURT_DTYPE_BOOL;
  /* cuDNN computes no bias gradient here (see attention_cudnn.c); its
  ** logsumexp is the same as ours, so either backward fits either forward */
  if (!gr.want_b && sdpa_cudnn_supported(ctx, a, &p)) {
    sdpa_cudnn_backward(ctx, a, &p, 0, 6, 7, &gr.dq, &gr.dk, &gr.dv);
  } else {
    ir_value_t scale = scale_value(ctx, a, &p);
    /* the bias gradient is the whole dS: one block */
    int64_t rows = gr.want_b ? p.l : block_rows(&p);
    ir_value_t dqs[SDPA_MAX_BLOCKS + 1];
    int32_t nblocks = 0;
    for (int64_t l0 = 0; l0 < p.l || nblocks == 0; l0 += rows, ++nblocks) {
      sdpa_t blk = p;
      blk.l0 = l0;
      blk.lb = p.l - l0 < rows ? p.l - l0 : rows;
      backward_block(ctx, a, &blk, scale, &gr);
      dqs[nblocks] = gr.dq;
    }
    if (gr.want_q) gr.dq = nblocks == 1 ? dqs[0] : ir_concatenate(ctx->func, dqs, nblocks, p.nb + 1);
  }
  if (gr.want_q) {
    set_like(ctx, 0, lower_cast(ctx, gr.dq, p.dtype), lower_meta(ctx, a->q));
  } else {
    lower_set_undefined(ctx, 0);
  }
  if (gr.want_k)
    set_like(ctx, 1, lower_cast(ctx, kv_plain(ctx, &p, gr.dk, a->k), p.dtype), lower_meta(ctx, a->k));
  else
    lower_set_undefined(ctx, 1);
  if (gr.want_v)
    set_like(ctx, 2, lower_cast(ctx, kv_plain(ctx, &p, gr.dv, a->v), p.dtype), lower_meta(ctx, a->v));
  else
    lower_set_undefined(ctx, 2);
  if (gr.want_b)
    lower_set_result(ctx, 3, sum_to_bias(ctx, &p, gr.ds, a->bias));
  else
    lower_set_undefined(ctx, 3);
  return NULL;
}

const lower_rule_t lower_attention_rules[] = {
    /* keyed: the cuDNN path bakes the scale into its backend config */
    LOWER_FN("aten::_scaled_dot_product_fused_attention_overrideable", lower_sdpa_forward),
    LOWER_FN("aten::_scaled_dot_product_fused_attention_overrideable_backward", lower_sdpa_backward),
    LOWER_END,
};
