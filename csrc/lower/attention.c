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
** (max, exp, sum, the dot with V) then runs at memory speed. So when they
** exceed a byte budget, the call becomes a stablehlo.while loop over blocks
** of query rows of one batch entry, each block its own softmax over all S
** keys: rows are independent, so this is exact, with no rescaling (unlike an
** online softmax over key blocks), and only one block's scores exist at a
** time (docs/architecture.md, "Attention").
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

/* A forward whose f32 scores exceed SDPA_FORWARD_LOOP_BYTES (a backward:
** SDPA_BACKWARD_LOOP_BYTES) loops over blocks of query rows whose scores
** stay under SDPA_BLOCK_BYTES. Measured on the CPU plugin, wall ms at 2
** threads (docs/architecture.md, "Attention"): (1, 8, 4096, 64) forward
** 287 ms in 32 MiB blocks against about 620 ms as one block; forward +
** backward 674 ms. (1, 4, 1040, 64) (17 MiB of scores) forward + backward
** 23.2 ms looping over its heads against 34.5 ms as one block; its forward
** alone 9.6 against 11.3 ms standing alone, but inside the compiled FLUX
** transformer of bench/compile.py the looping forward made the whole
** forward slower (129 against 113 ms): its q, k, v come out of transposes
** that one block fuses into the dots and a loop must materialise. Hence the
** two thresholds. TORCH_TPU_SDPA_BLOCK_BYTES sets all three to one value. */
#define SDPA_FORWARD_LOOP_BYTES (64u << 20)
#define SDPA_BACKWARD_LOOP_BYTES (8u << 20)
#define SDPA_BLOCK_BYTES (32u << 20)
#define SDPA_MIN_LOOP_ROWS 16

static TPURT_MUST_USE tpurt_status_t check_inputs(lower_ctx_t* ctx, const sdpa_args_t* a, sdpa_t* p) {
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

/* Rows of one loop iteration: the largest divisor of L whose [G, rows, S]
** f32 scores fit in the block budget; 0 when the whole call is one block
** (scores under the loop threshold, or a bias).
** A divisor, so that no two iterations share a row (the backward sums dK
** and dV over them). Under SDPA_MIN_LOOP_ROWS rows per iteration (a prime
** L) the loop would be all overhead, so the call stays one block. */
static int64_t loop_rows(const lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, bool backward) {
  const uint64_t set = tpurt_config()->sdpa_block_bytes; /* TORCH_TPU_SDPA_BLOCK_BYTES */
  /* The loop is a choice for the CPU's caches (measured there). A TPU's
  ** compiler tiles one block itself and gives no run-time estimate for a
  ** while loop, so a TPU program (a TPU plugin, or a shadow target) stays
  ** one block unless the variable asks for blocks. */
  if (!set && ctx->platform && strcmp(ctx->platform, "tpu") == 0) return 0;
  uint64_t budget = set ? set : SDPA_BLOCK_BYTES;
  uint64_t threshold = set ? set : backward ? SDPA_BACKWARD_LOOP_BYTES : SDPA_FORWARD_LOOP_BYTES;
  uint64_t row_bytes = (uint64_t)p->g * (uint64_t)p->s * 4;
  uint64_t total = (uint64_t)(p->n * p->hk) * (uint64_t)p->l * row_bytes;
  if (!lower_is_none(ctx, a->bias) || total <= threshold || row_bytes == 0) return 0;
  int64_t most = (int64_t)(budget / row_bytes);
  if (most > p->l) most = p->l;
  for (int64_t rows = most; rows >= SDPA_MIN_LOOP_ROWS; --rows)
    if (p->l % rows == 0) return rows;
  return 0;
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

/* A plain [N.., H, L, last] tensor in the grouped layout (a free reshape). */
static ir_value_t grouped(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int64_t last) {
  int64_t dims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, last, dims);
  return p->nb || p->gd ? ir_reshape(ctx->func, x, p->w, dims) : x;
}

/* A grouped tensor back in the plain layout [N.., H, rows, last]. */
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

/* Broadcasts a bias of shape |bm| (broadcastable to [N.., H, L, S]) to the
** plain scores and reshapes it into the grouped [B, (G), L, S] (XLA fuses
** both into the consumer). */
static ir_value_t bias_to_grouped(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t b, const tpurt_tensor_t* bm) {
  int64_t plain[TPURT_MAX_RANK], map[TPURT_MAX_RANK];
  int32_t rank = p->nb + 3, off = rank - bm->rank;
  plain_dims(p, p->lb, p->s, plain);
  for (int32_t i = 0; i < bm->rank; ++i) map[i] = i + off;
  return grouped(ctx, p, ir_broadcast_in_dim(ctx->func, b, rank, plain, map), p->s);
}

/* Where the scale is applied. When the inputs are in the acc type (f32,
** f64), query is scaled before the dot, [rows, D] multiplies instead of
** [rows, S]: a multiply on the dot's output measured 2x slower on XLA:CPU
** for (1, 4, 1040, 64) (it stops the dot from writing its result straight
** into the consumers' fusion). Half inputs keep the scale on the f32 scores,
** so that the query is not rounded once more. */
static bool prescaled(const sdpa_t* p) { return p->dtype == p->acc; }

/* The whole query [B, (G), L, D], times the scale when prescaled. */
static ir_value_t scaled_query(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale) {
  ir_value_t q = grouped(ctx, p, lower_tensor(ctx, a->q), p->d);
  if (!prescaled(p)) return q;
  int64_t dims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, p->d, dims);
  return ir_mul(ctx->func, q, lower_broadcast_to(ctx, scale, p->w, dims));
}

/* The operands of one block of query rows, in the grouped layout of the
** block's sdpa_t (whole call: B = N * Hk rows L; loop iteration: B = 1). */
typedef struct sdpa_block_s {
  ir_value_t q;       /* [B, (G), rows, D], scaled when prescaled() */
  ir_value_t k, v;    /* [B, S, D], [B, S, Dv] */
  ir_value_t row0;    /* the block's first row (tensor<i64>), IR_NONE: 0 */
  ir_value_t dout, o; /* backward: [B, (G), rows, Dv] */
  ir_value_t lse;     /* backward: [B, (G), rows] acc type, +inf for dead rows */
} sdpa_block_t;

/* The block's masked, scaled scores [B, (G), rows, S] in the acc type. A
** bias only ever comes with the whole call as one block (loop_rows). */
static ir_value_t scores(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale,
                         const sdpa_block_t* blk) {
  ir_func_t* f = ctx->func;
  int64_t dims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, p->s, dims);
  int64_t lc = p->w - 1, rc = 2;
  ir_value_t s = batched_dot(ctx, p, blk->q, blk->k, 1, &lc, &rc);
  if (!prescaled(p)) s = ir_mul(f, s, lower_broadcast_to(ctx, scale, p->w, dims));
  ir_value_t neg_inf = ir_splat(f, p->acc, p->w, dims, -INFINITY);
  if (!lower_is_none(ctx, a->bias)) {
    const tpurt_tensor_t* bm = lower_meta(ctx, a->bias);
    ir_value_t b = lower_tensor(ctx, a->bias);
    if (bm->dtype != TPURT_DTYPE_BOOL) b = lower_cast(ctx, b, p->acc);
    b = bias_to_grouped(ctx, p, b, bm);
    s = bm->dtype == TPURT_DTYPE_BOOL ? ir_select(f, b, s, neg_inf) : ir_add(f, s, b);
  }
  if (lower_bool(ctx, a->causal, false)) { /* key j is visible from query i iff j <= i (top left) */
    int64_t ls[2] = {p->lb, p->s}, last2[2] = {p->w - 2, p->w - 1};
    ir_type_t t = ir_type_make(TPURT_DTYPE_I64, 2, ls);
    ir_value_t row = ir_iota(f, t, 0);
    if (blk->row0 != IR_NONE) row = ir_add(f, row, lower_broadcast_to(ctx, blk->row0, 2, ls));
    ir_value_t keep = ir_compare(f, IR_LE, ir_iota(f, t, 1), row);
    s = ir_select(f, ir_broadcast_in_dim(f, keep, p->w, dims, last2), s, neg_inf);
  }
  return s;
}

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

/* The forward of one block: output [B, (G), rows, Dv] (input dtype) and
** logsumexp [B, (G), rows] (f32, -inf for dead rows). */
static void forward_block(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale,
                          const sdpa_block_t* blk, ir_value_t* out_o, ir_value_t* out_lse) {
  ir_func_t* f = ctx->func;
  ir_value_t s = scores(ctx, a, p, scale, blk);
  int64_t rdims[TPURT_MAX_RANK], last = p->w - 1;
  row_dims(p, rdims);
  ir_value_t m = ir_reduce(f, s, ir_constant_f64(f, p->acc, -INFINITY), &last, 1, IR_REDUCE_MAX);
  /* a row with every key masked has max -inf: shift it by 0 instead, so its
  ** exponentials are 0 (not nan) and its output is 0 */
  ir_value_t dead = ir_compare(f, IR_EQ, m, ir_splat(f, p->acc, p->w - 1, rdims, -INFINITY));
  m = ir_select(f, dead, ir_splat(f, p->acc, p->w - 1, rdims, 0.0), m);
  ir_value_t e = ir_exp(f, ir_sub(f, s, over_rows(ctx, p, m, p->s)));
  int64_t lc = p->w - 1, rc = 1;
  ir_value_t o, sum;
  if (prescaled(p) && blk->row0 == IR_NONE) {
    /* f32, one block: the row sums ride along in the second dot, as one
    ** more column of ones in v, which saves a pass over the scores, the
    ** largest tensor: (1, 4, 1040, 64) forward 8.3 -> 7.4 ms. In a loop's
    ** iteration the block's scores are in cache and the wider dot costs more
    ** than the pass (1, 8, 4096, 64): 280 against 265 ms. */
    const ir_type_t* vt = ir_value_type(f, blk->v);
    int64_t ones_dims[3] = {vt->dims[0], vt->dims[1], 1};
    ir_value_t parts[2] = {blk->v, ir_splat(f, p->acc, 3, ones_dims, 1.0)};
    ir_value_t both = batched_dot(ctx, p, e, ir_concatenate(f, parts, 2, 2), 1, &lc, &rc);
    int64_t start[TPURT_MAX_RANK] = {0}, limit[TPURT_MAX_RANK], step[TPURT_MAX_RANK];
    grouped_dims(p, p->lb, p->dv + 1, limit);
    for (int32_t i = 0; i < p->w; ++i) step[i] = 1;
    limit[p->w - 1] = p->dv;
    o = ir_slice(f, both, start, limit, step);
    start[p->w - 1] = p->dv;
    limit[p->w - 1] = p->dv + 1;
    sum = ir_reshape(f, ir_slice(f, both, start, limit, step), p->w - 1, rdims);
  } else {
    sum = ir_reduce(f, e, ir_constant_f64(f, p->acc, 0.0), &last, 1, IR_REDUCE_ADD);
    o = batched_dot(ctx, p, lower_cast(ctx, e, p->dtype), blk->v, 1, &lc, &rc);
  }
  ir_value_t safe_sum = ir_select(f, dead, ir_splat(f, p->acc, p->w - 1, rdims, 1.0), sum);
  o = ir_div(f, o, over_rows(ctx, p, safe_sum, p->dv));
  *out_o = lower_cast(ctx, o, p->dtype);
  ir_value_t lse = ir_add(f, m, ir_log(f, sum));
  *out_lse = lower_cast(ctx, lse, TPURT_DTYPE_F32);
}

/* The loop over query blocks: one iteration per (b, block of |rows| rows),
** b-major, so that an iteration's scores [G, rows, S] stay in cache and the
** whole [B, G, L, S] never exists. A loop, not unrolled blocks: XLA runs
** unrolled blocks at once, and their scores are then live together (measured
** slower than one block). Carried: the counter, then |n| accumulators; the
** body is built by |body| from the iteration's block. */
typedef struct sdpa_loop_s {
  sdpa_t p;      /* the iteration's problem: B = 1, |rows| rows */
  ir_value_t b;  /* this iteration's batch index (tensor<i64>) */
  ir_value_t r0; /* and first row */
  ir_value_t zero;
} sdpa_loop_t;

/* Opens the loop's body over |n| accumulators starting at |init|: writes
** the carried accumulators to |acc| and the iteration's coordinates to |it|. */
static ir_region_op_t loop_begin(lower_ctx_t* ctx, const sdpa_t* p, int64_t rows, const ir_value_t* init,
                                 int32_t n, ir_value_t* acc, sdpa_loop_t* it) {
  ir_func_t* f = ctx->func;
  int64_t blocks = p->l / rows;
  ir_value_t carried[TPURT_MAX_RESULTS], args[TPURT_MAX_RESULTS];
  carried[0] = ir_constant_i64(f, TPURT_DTYPE_I64, 0);
  for (int32_t i = 0; i < n; ++i) carried[i + 1] = init[i];
  ir_region_op_t w = ir_while_begin(f, carried, n + 1, args);
  ir_value_t more = ir_compare(f, IR_LT, args[0], ir_constant_i64(f, TPURT_DTYPE_I64, p->n * p->hk * blocks));
  ir_region_end(f, &more, 1);
  ir_while_body(f, &w, args);
  for (int32_t i = 0; i < n; ++i) acc[i] = args[i + 1];
  ir_value_t nb = ir_constant_i64(f, TPURT_DTYPE_I64, blocks);
  it->p = *p;
  it->p.n = 1;
  it->p.hk = 1;
  it->p.h = p->g;
  it->p.nb = 0;
  it->p.lb = rows;
  it->b = ir_div(f, args[0], nb);
  it->r0 = ir_mul(f, ir_binary(f, IR_OP_REMAINDER, args[0], nb), ir_constant_i64(f, TPURT_DTYPE_I64, rows));
  it->zero = ir_constant_i64(f, TPURT_DTYPE_I64, 0);
  /* the counter rides along as carried[0]: stash it for loop_end */
  acc[n] = args[0];
  return w;
}

/* Ends the body with |next| accumulators and writes the loop's results. */
static void loop_end(lower_ctx_t* ctx, ir_region_op_t* w, ir_value_t counter, const ir_value_t* next,
                     int32_t n, ir_value_t* out) {
  ir_func_t* f = ctx->func;
  ir_value_t carried[TPURT_MAX_RESULTS], results[TPURT_MAX_RESULTS];
  carried[0] = ir_add(f, counter, ir_constant_i64(f, TPURT_DTYPE_I64, 1));
  for (int32_t i = 0; i < n; ++i) carried[i + 1] = next[i];
  ir_region_end(f, carried, n + 1);
  ir_while_end(f, w, results);
  for (int32_t i = 0; i < n; ++i) out[i] = results[i + 1];
}

/* The iteration's rows of a grouped [B, (G), L, last] (last 0: a row
** tensor [B, (G), L]) and where they go back. */
static void block_starts(const sdpa_loop_t* it, int32_t rank, ir_value_t* starts) {
  for (int32_t i = 0; i < rank; ++i) starts[i] = it->zero;
  starts[0] = it->b;
  starts[1 + it->p.gd] = it->r0;
}

static ir_value_t rows_of(lower_ctx_t* ctx, const sdpa_loop_t* it, ir_value_t x, int64_t last) {
  int64_t dims[TPURT_MAX_RANK];
  ir_value_t starts[TPURT_MAX_RANK];
  grouped_dims(&it->p, it->p.lb, last, dims);
  int32_t rank = last ? it->p.w : it->p.w - 1;
  block_starts(it, rank, starts);
  return ir_dynamic_slice(ctx->func, x, starts, dims);
}

static ir_value_t put_rows(lower_ctx_t* ctx, const sdpa_loop_t* it, ir_value_t x, ir_value_t rows,
                           int32_t rank) {
  ir_value_t starts[TPURT_MAX_RANK];
  block_starts(it, rank, starts);
  return ir_dynamic_update_slice(ctx->func, x, rows, starts);
}

/* Batch entry b of a [B, S, last] key/value (or its gradient). */
static ir_value_t entry_of(lower_ctx_t* ctx, const sdpa_loop_t* it, ir_value_t x, int64_t last) {
  int64_t dims[3] = {1, it->p.s, last};
  ir_value_t starts[3] = {it->b, it->zero, it->zero};
  return ir_dynamic_slice(ctx->func, x, starts, dims);
}

/* x[b] += add, for a [B, S, last] accumulator. */
static ir_value_t add_to_entry(lower_ctx_t* ctx, const sdpa_loop_t* it, ir_value_t x, ir_value_t add,
                               int64_t last) {
  ir_value_t starts[3] = {it->b, it->zero, it->zero};
  ir_value_t sum = ir_add(ctx->func, entry_of(ctx, it, x, last), add);
  return ir_dynamic_update_slice(ctx->func, x, sum, starts);
}

/* The iteration's block of the whole call's operands |whole| (the
** backward's too when |whole| has them). */
static sdpa_block_t iteration_block(lower_ctx_t* ctx, const sdpa_loop_t* it, const sdpa_t* p,
                                    const sdpa_block_t* whole) {
  sdpa_block_t blk = {.q = rows_of(ctx, it, whole->q, p->d),
                      .k = entry_of(ctx, it, whole->k, p->d),
                      .v = entry_of(ctx, it, whole->v, p->dv),
                      .row0 = it->r0,
                      .dout = IR_NONE,
                      .o = IR_NONE,
                      .lse = IR_NONE};
  if (whole->dout != IR_NONE) {
    blk.dout = rows_of(ctx, it, whole->dout, p->dv);
    blk.o = rows_of(ctx, it, whole->o, p->dv);
    blk.lse = rows_of(ctx, it, whole->lse, 0);
  }
  return blk;
}

/* The forward of the whole call, in the grouped layout: as one block, or as
** a loop of |rows|-row blocks. */
static void forward_all(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale,
                        int64_t rows, ir_value_t* out_o, ir_value_t* out_lse) {
  sdpa_block_t whole = {.q = scaled_query(ctx, a, p, scale),
                        .k = kv_batched(ctx, p, a->k),
                        .v = kv_batched(ctx, p, a->v),
                        .row0 = IR_NONE,
                        .dout = IR_NONE,
                        .o = IR_NONE,
                        .lse = IR_NONE};
  if (!rows) {
    forward_block(ctx, a, p, scale, &whole, out_o, out_lse);
    return;
  }
  int64_t odims[TPURT_MAX_RANK], rdims[TPURT_MAX_RANK];
  grouped_dims(p, p->l, p->dv, odims);
  row_dims(p, rdims);
  ir_value_t init[2] = {ir_splat(ctx->func, p->dtype, p->w, odims, 0.0),
                        ir_splat(ctx->func, TPURT_DTYPE_F32, p->w - 1, rdims, 0.0)};
  ir_value_t acc[3], next[2], out[2];
  sdpa_loop_t it;
  ir_region_op_t w = loop_begin(ctx, p, rows, init, 2, acc, &it);
  sdpa_block_t blk = iteration_block(ctx, &it, p, &whole);
  ir_value_t o, lse;
  forward_block(ctx, a, &it.p, scale, &blk, &o, &lse);
  next[0] = put_rows(ctx, &it, acc[0], o, p->w);
  next[1] = put_rows(ctx, &it, acc[1], lse, p->w - 1);
  loop_end(ctx, &w, acc[2], next, 2, out);
  *out_o = out[0];
  *out_lse = out[1];
}

/* _scaled_dot_product_fused_attention_overrideable(query, key, value,
** attn_bias?, dropout_p, is_causal, return_debug_mask, *, scale?) ->
** (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
**  philox_offset, debug_attn_mask) */
static TPURT_MUST_USE tpurt_status_t lower_sdpa_forward(lower_ctx_t* ctx) {
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
    forward_all(ctx, a, &p, scale_value(ctx, a, &p), loop_rows(ctx, a, &p, false), &o, &lse);
    o = ungrouped(ctx, &p, o, p.dv);
    int64_t lse_dims[3] = {p.n, p.h, p.l};
    lse = ir_reshape(f, lse, 3, lse_dims);
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

/* What the backward wants, and one block's results (acc type): dQ and dS
** of the block's rows, dK and dV of its rows' contribution. */
typedef struct sdpa_grads_s {
  bool want_q, want_k, want_v, want_b;
  ir_value_t dq, dk, dv, ds;
} sdpa_grads_t;

/* The backward of one block. P is recomputed from the scores and the saved
** logsumexp; dV and dK are summed over the group. */
static void backward_block(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale,
                           const sdpa_block_t* blk, sdpa_grads_t* gr) {
  ir_func_t* f = ctx->func;
  ir_value_t s = scores(ctx, a, p, scale, blk);
  int64_t sdims[TPURT_MAX_RANK];
  grouped_dims(p, p->lb, p->s, sdims);
  /* P = exp(s - lse) */
  ir_value_t prob = ir_exp(f, ir_sub(f, s, over_rows(ctx, p, blk->lse, p->s)));
  int64_t gl[2] = {1, 2}; /* the (G), rows dims of a grouped tensor */
  int32_t ngl = 1 + p->gd;
  if (gr->want_v) /* dV = P^T dO, summed over the group */
    gr->dv = batched_dot(ctx, p, lower_cast(ctx, prob, p->dtype), blk->dout, ngl, gl, gl);
  if (!gr->want_q && !gr->want_k && !gr->want_b) return;
  /* dS = P * (dO V^T - rowsum(dO * O)) */
  int64_t lc = p->w - 1, rc = 2;
  ir_value_t dp = batched_dot(ctx, p, blk->dout, blk->v, 1, &lc, &rc);
  ir_value_t oo = ir_mul(f, lower_cast(ctx, blk->dout, p->acc), lower_cast(ctx, blk->o, p->acc));
  ir_value_t di = ir_reduce(f, oo, ir_constant_f64(f, p->acc, 0.0), &lc, 1, IR_REDUCE_ADD);
  ir_value_t ds = ir_mul(f, prob, ir_sub(f, dp, over_rows(ctx, p, di, p->s)));
  /* prescaled: the scale goes on dQ [rows, D] and comes with the scaled
  ** query into dK, so no [rows, S] multiply */
  ir_value_t dss =
      prescaled(p) ? ds
                   : lower_cast(ctx, ir_mul(f, ds, lower_broadcast_to(ctx, scale, p->w, sdims)), p->dtype);
  if (gr->want_q) { /* dQ = scale dS K */
    int64_t klc = p->w - 1, krc = 1, qdims[TPURT_MAX_RANK];
    gr->dq = batched_dot(ctx, p, dss, blk->k, 1, &klc, &krc);
    if (prescaled(p)) {
      grouped_dims(p, p->lb, p->d, qdims);
      gr->dq = ir_mul(f, gr->dq, lower_broadcast_to(ctx, scale, p->w, qdims));
    }
  }
  if (gr->want_k) /* dK = scale dS^T Q, summed over the group */
    gr->dk = batched_dot(ctx, p, dss, blk->q, ngl, gl, gl);
  if (gr->want_b) gr->ds = ds;
}

/* The backward of the whole call, in the grouped layout (dQ) and [B, S, ..]
** (dK, dV): as one block, or as a loop of |rows|-row blocks. */
static void backward_all(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t scale,
                         int64_t rows, sdpa_grads_t* gr) {
  ir_func_t* f = ctx->func;
  /* the saved logsumexp; a dead row (-inf) gets +inf, so its P is 0 */
  int64_t rdims[TPURT_MAX_RANK];
  row_dims(p, rdims);
  ir_value_t l = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 7), p->acc), p->w - 1, rdims);
  ir_value_t dead = ir_compare(f, IR_EQ, l, ir_splat(f, p->acc, p->w - 1, rdims, -INFINITY));
  l = ir_select(f, dead, ir_splat(f, p->acc, p->w - 1, rdims, INFINITY), l);
  sdpa_block_t whole = {.q = scaled_query(ctx, a, p, scale),
                        .k = kv_batched(ctx, p, a->k),
                        .v = kv_batched(ctx, p, a->v),
                        .row0 = IR_NONE,
                        .dout = grouped(ctx, p, lower_tensor(ctx, 0), p->dv),
                        .o = grouped(ctx, p, lower_tensor(ctx, 6), p->dv),
                        .lse = l};
  if (!rows) {
    backward_block(ctx, a, p, scale, &whole, gr);
    return;
  }
  int64_t qdims[TPURT_MAX_RANK], kdims[3] = {p->n * p->hk, p->s, p->d},
                                 vdims[3] = {p->n * p->hk, p->s, p->dv};
  grouped_dims(p, p->l, p->d, qdims);
  ir_value_t init[3] = {ir_splat(f, p->acc, p->w, qdims, 0.0), ir_splat(f, p->acc, 3, kdims, 0.0),
                        ir_splat(f, p->acc, 3, vdims, 0.0)};
  ir_value_t acc[4], next[3], out[3];
  sdpa_loop_t it;
  ir_region_op_t w = loop_begin(ctx, p, rows, init, 3, acc, &it);
  sdpa_block_t blk = iteration_block(ctx, &it, p, &whole);
  sdpa_grads_t g = *gr;
  backward_block(ctx, a, &it.p, scale, &blk, &g);
  next[0] = g.want_q ? put_rows(ctx, &it, acc[0], g.dq, p->w) : acc[0];
  next[1] = g.want_k ? add_to_entry(ctx, &it, acc[1], g.dk, p->d) : acc[1];
  next[2] = g.want_v ? add_to_entry(ctx, &it, acc[2], g.dv, p->dv) : acc[2];
  loop_end(ctx, &w, acc[3], next, 3, out);
  gr->dq = out[0];
  gr->dk = out[1];
  gr->dv = out[2];
}

/* _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query,
** key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
** cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
** philox_offset, *, scale?) -> (grad_query, grad_key, grad_value,
** grad_attn_bias). */
static TPURT_MUST_USE tpurt_status_t lower_sdpa_backward(lower_ctx_t* ctx) {
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
    /* a bias (and so its gradient, the whole dS) keeps the call one block */
    backward_all(ctx, a, &p, scale_value(ctx, a, &p), loop_rows(ctx, a, &p, true), &gr);
    if (gr.want_q) gr.dq = ungrouped(ctx, &p, gr.dq, p.d);
    if (gr.want_k) gr.dk = kv_plain(ctx, &p, gr.dk, a->k);
    if (gr.want_v) gr.dv = kv_plain(ctx, &p, gr.dv, a->v);
  }
  if (gr.want_q)
    set_like(ctx, 0, lower_cast(ctx, gr.dq, p.dtype), lower_meta(ctx, a->q));
  else
    lower_set_undefined(ctx, 0);
  if (gr.want_k)
    set_like(ctx, 1, lower_cast(ctx, gr.dk, p.dtype), lower_meta(ctx, a->k));
  else
    lower_set_undefined(ctx, 1);
  if (gr.want_v)
    set_like(ctx, 2, lower_cast(ctx, gr.dv, p.dtype), lower_meta(ctx, a->v));
  else
    lower_set_undefined(ctx, 2);
  if (gr.want_b)
    lower_set_result(ctx, 3, sum_to_bias(ctx, &p, ungrouped(ctx, &p, gr.ds, p.s), a->bias));
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
