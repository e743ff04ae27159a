/* search.c: membership and sorted search: isin, searchsorted, bucketize.
**
** All three compare every element with every candidate (a broadcast
** compare and a reduction over the candidates): O(n*m) work, no
** data-dependent control flow, exact. searchsorted/bucketize count the
** boundaries below (or at, for right=True) each value, which is the
** insertion index in a sorted sequence (and needs no sorter). */
#include "../base/base.h"
#include "lower.h"

/* A tensor arg or a Scalar arg as a value of |dtype| (a Scalar becomes rank 0). */
static ir_value_t tensor_or_scalar(lower_ctx_t* ctx, int32_t arg, tpurt_dtype_t dtype) {
  return lower_meta(ctx, arg) ? lower_cast(ctx, lower_tensor(ctx, arg), dtype)
                              : lower_scalar(ctx, arg, dtype);
}

/* isin(elements, test_elements, assume_unique=False, invert=False) */
static TPURT_MUST_USE tpurt_status_t lower_isin(lower_ctx_t* ctx) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_func_t* f = ctx->func;
  ir_value_t e = tensor_or_scalar(ctx, 0, dt), t = tensor_or_scalar(ctx, 1, dt);
  const ir_type_t* et = ir_value_type(f, e);
  const ir_type_t* tt = ir_value_type(f, t);
  int64_t ne = ir_type_numel(et), nt = ir_type_numel(tt);
  int64_t col[2] = {ne, 1}, row[2] = {1, nt}, both[2] = {ne, nt};
  ir_value_t a = lower_broadcast_to(ctx, ir_reshape(f, e, 2, col), 2, both);
  ir_value_t b = lower_broadcast_to(ctx, ir_reshape(f, t, 2, row), 2, both);
  int64_t one = 1;
  ir_value_t hit = ir_reduce(f, ir_compare(f, IR_EQ, a, b), ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), &one, 1,
                             IR_REDUCE_OR);
  if (lower_bool(ctx, 3, false)) hit = ir_not(f, hit);
  lower_set_result(ctx, 0, ir_reshape(f, hit, et->rank, et->dims));
  return NULL;
}

/* The insertion indices of |values| [*lead, n] in |seq| [*lead, m] (or a
** 1-D seq shared by all): count of seq < v (seq <= v when |right|). */
static ir_value_t insertion_index(lower_ctx_t* ctx, ir_value_t seq, ir_value_t values, bool right,
                                  tpurt_dtype_t out) {
  ir_func_t* f = ctx->func;
  const ir_type_t* st = ir_value_type(f, seq);
  const ir_type_t* vt = ir_value_type(f, values);
  int32_t r = vt->rank;
  int64_t dims[TPURT_MAX_RANK], vmap[TPURT_MAX_RANK], smap[TPURT_MAX_RANK];
  for (int32_t d = 0; d < r; ++d) dims[d] = vt->dims[d], vmap[d] = d;
  int64_t m = st->dims[st->rank - 1];
  dims[r] = m;
  ir_value_t vb = ir_broadcast_in_dim(f, values, r + 1, dims, vmap);
  if (st->rank == 1) {
    smap[0] = r;
  } else {
    for (int32_t d = 0; d < st->rank - 1; ++d) smap[d] = d;
    smap[st->rank - 1] = r;
  }
  ir_value_t sb = ir_broadcast_in_dim(f, seq, r + 1, dims, smap);
  /* NaN sorts last: it is below nothing, and a NaN value is above everything but NaN */
  ir_value_t below = ir_compare(f, right ? IR_LE : IR_LT, sb, vb);
  if (tpurt_dtype_is_float(vt->dtype)) {
    ir_value_t v_nan = ir_compare(f, IR_NE, vb, vb), s_nan = ir_compare(f, IR_NE, sb, sb);
    ir_value_t nan_rule = right ? v_nan : ir_and(f, v_nan, ir_not(f, s_nan));
    below = ir_or(f, below, nan_rule);
  }
  ir_value_t counts = ir_convert(f, below, out);
  int64_t last = r;
  return ir_reduce(f, counts, ir_constant_i64(f, out, 0), &last, 1, IR_REDUCE_ADD);
}

/* searchsorted.Tensor(sorted_sequence, self, *, out_int32, right, side, sorter) and .Scalar */
static TPURT_MUST_USE tpurt_status_t lower_searchsorted(lower_ctx_t* ctx) {
  const tpurt_tensor_t* s = lower_meta(ctx, 0);
  const tpurt_tensor_t* v = lower_meta(ctx, 1);
  /* A sorter only says in which order to read the sequence; a count of the
  ** boundaries below a value does not depend on the order, so it is not read. */
  const tpurt_tensor_t* sorter = lower_meta(ctx, 5);
  if (sorter) {
    bool same = sorter->rank == s->rank;
    for (int32_t d = 0; same && d < s->rank; ++d) same = sorter->sizes[d] == s->sizes[d];
    if (!same)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "torch.searchsorted(): boundary and sorter must have the same size, but got boundary "
          "tensor %s",
          lower_shape_str(s->rank, s->sizes));
  }
  if (s->rank == 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.searchsorted(): input value can be a scalar only when "
                       "boundaries tensor dimension is 1, but we got boundaries tensor dim(0)");
  if (v && s->rank != 1) {
    bool ok = v->rank == s->rank;
    for (int32_t d = 0; ok && d < s->rank - 1; ++d) ok = v->sizes[d] == s->sizes[d];
    if (!ok)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                         "dimensions of boundaries tensor and input value tensor must match, but we got "
                         "boundaries tensor %s and input value tensor %s",
                         lower_shape_str(s->rank, s->sizes), v ? lower_shape_str(v->rank, v->sizes) : "[]");
  }
  const char* side = lower_str(ctx, 4, NULL);
  bool right = lower_bool(ctx, 3, false) || (side && strcmp(side, "right") == 0);
  if (side && strcmp(side, "left") != 0 && strcmp(side, "right") != 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.searchsorted(): side can only be 'left' or 'right' but got %s", side);
  if (lower_bool(ctx, 3, false) && side && strcmp(side, "left") == 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.searchsorted(): side and right can't be set to opposites, got side of left "
                       "while right was True");
  tpurt_dtype_t out = lower_bool(ctx, 2, false) ? TPURT_DTYPE_I32 : TPURT_DTYPE_I64;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_value_t values = tensor_or_scalar(ctx, 1, dt);
  lower_set_result(ctx, 0,
                   insertion_index(ctx, lower_cast(ctx, lower_tensor(ctx, 0), dt), values, right, out));
  return NULL;
}

/* bucketize.Tensor(self, boundaries, *, out_int32, right) and .Scalar */
static TPURT_MUST_USE tpurt_status_t lower_bucketize(lower_ctx_t* ctx) {
  const tpurt_tensor_t* b = lower_meta(ctx, 1);
  if (b->rank != 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "boundaries tensor must be 1 dimension, but got dim(%d)",
                       (int)b->rank);
  tpurt_dtype_t out = lower_bool(ctx, 2, false) ? TPURT_DTYPE_I32 : TPURT_DTYPE_I64;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_value_t values = tensor_or_scalar(ctx, 0, dt);
  lower_set_result(ctx, 0,
                   insertion_index(ctx, lower_cast(ctx, lower_tensor(ctx, 1), dt), values,
                                   lower_bool(ctx, 3, false), out));
  return NULL;
}

const lower_rule_t lower_search_rules[] = {
    LOWER_FN("aten::bucketize.Scalar", lower_bucketize),
    LOWER_FN("aten::bucketize.Tensor", lower_bucketize),
    LOWER_OUT_FN("aten::bucketize.Tensor_out", lower_bucketize),
    LOWER_FN("aten::isin.Scalar_Tensor", lower_isin),
    LOWER_OUT_FN("aten::isin.Scalar_Tensor_out", lower_isin),
    LOWER_FN("aten::isin.Tensor_Scalar", lower_isin),
    LOWER_OUT_FN("aten::isin.Tensor_Scalar_out", lower_isin),
    LOWER_FN("aten::isin.Tensor_Tensor", lower_isin),
    LOWER_OUT_FN("aten::isin.Tensor_Tensor_out", lower_isin),
    LOWER_FN("aten::searchsorted.Scalar", lower_searchsorted),
    LOWER_OUT_FN("aten::searchsorted.Scalar_out", lower_searchsorted),
    LOWER_FN("aten::searchsorted.Tensor", lower_searchsorted),
    LOWER_OUT_FN("aten::searchsorted.Tensor_out", lower_searchsorted),
    LOWER_END,
};
