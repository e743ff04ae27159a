/* sort.c: sorting and order statistics: sort, topk, kthvalue, median and
** nanmedian, all on stablehlo.sort with int64 indices carried along. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/*===--- helpers of the rules below ---===*/

static bool is_float(tpurt_dtype_t d) { return tpurt_dtype_is_float(d); }

/*===--- sort / topk ---===*/

/* lower.h: a stable sort with indices, NaN last (unique sorts with it too). */
void lower_sort_with_indices(lower_ctx_t* ctx, ir_value_t x, int64_t dim, bool descending, ir_value_t* values,
                             ir_value_t* indices) {
  ir_func_t* f = ctx->func;
  const ir_type_t* xt = ir_value_type(f, x);
  if (!xt) {
    *values = *indices = IR_NONE;
    return;
  }
  ir_type_t it = *xt;
  it.dtype = TPURT_DTYPE_I64;
  tpurt_dtype_t d = xt->dtype;
  ir_value_t inputs[2] = {x, ir_iota(f, it, (int32_t)dim)}, res[2], blk[4];
  ir_sort_begin(f, inputs, 2, dim, true, res, blk);
  ir_value_t a = blk[0], b = blk[1];
  ir_value_t before = ir_compare(f, descending ? IR_GT : IR_LT, a, b);
  if (is_float(d)) {
    ir_value_t a_nan = ir_compare(f, IR_NE, a, a), b_nan = ir_compare(f, IR_NE, b, b);
    ir_value_t nan_first =
        descending ? ir_and(f, a_nan, ir_not(f, b_nan)) : ir_and(f, b_nan, ir_not(f, a_nan));
    before = ir_or(f, before, nan_first);
  }
  ir_region_end(f, &before, 1);
  *values = res[0];
  *indices = res[1];
}

/* sort.stable(self, *, stable, dim=-1, descending=False); CPU sorts stably
** whatever |stable| says, and so do we. */
static TPURT_MUST_USE tpurt_status_t lower_sort(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 2, -1), t->rank, &dim));
  bool descending = lower_bool(ctx, 3, false);
  ir_value_t x = lower_tensor(ctx, 0);
  if (t->rank == 0 || t->sizes[dim] <= 1) {
    lower_set_result(ctx, 0, x);
    lower_set_result(ctx, 1, ir_splat(ctx->func, TPURT_DTYPE_I64, t->rank, t->sizes, 0.0));
    return NULL;
  }
  ir_value_t v, i;
  lower_sort_with_indices(ctx, x, dim, descending, &v, &i);
  lower_set_result(ctx, 0, v);
  lower_set_result(ctx, 1, i);
  return NULL;
}

/* topk(self, k, dim=-1, largest=True, sorted=True): a sort and a slice. */
static TPURT_MUST_USE tpurt_status_t lower_topk(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 2, -1), t->rank, &dim));
  int64_t kk = lower_int(ctx, 1, 0);
  int64_t size = t->rank ? t->sizes[dim] : 1;
  if (kk < 0 || kk > size) return lower_error(TPURT_INVALID_ARGUMENT, "selected index k out of range");
  bool largest = lower_bool(ctx, 3, true);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  if (t->rank == 0) {
    lower_set_result(ctx, 0, x);
    lower_set_result(ctx, 1, ir_constant_i64(f, TPURT_DTYPE_I64, 0));
    return NULL;
  }
  ir_value_t v, i;
  if (size <= 1) {
    v = x;
    i = ir_splat(f, TPURT_DTYPE_I64, t->rank, t->sizes, 0.0);
  } else {
    lower_sort_with_indices(ctx, x, dim, largest, &v, &i);
  }
  int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
  for (int32_t d = 0; d < t->rank; ++d) li[d] = t->sizes[d], one[d] = 1;
  li[dim] = kk;
  lower_set_result(ctx, 0, ir_slice(f, v, st, li, one));
  lower_set_result(ctx, 1, ir_slice(f, i, st, li, one));
  return NULL;
}

/*===--- kthvalue / median / nanmedian ---===*/

/* The element at sorted position |pos| (a value shaped like the reduced row,
** int64) along |dim| of the sorted |v| and its index |i|: a select and a sum
** over the dim (no gather needed: exactly one position matches). */
static void pick_sorted(lower_ctx_t* ctx, ir_value_t v, ir_value_t i, int64_t dim, ir_value_t pos,
                        ir_value_t* out_v, ir_value_t* out_i) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, v);
  ir_type_t it = *t;
  it.dtype = TPURT_DTYPE_I64;
  int64_t bd[TPURT_MAX_RANK], n = 0;
  for (int32_t d = 0; d < t->rank; ++d)
    if (d != dim) bd[n++] = d;
  ir_value_t hit =
      ir_compare(f, IR_EQ, ir_iota(f, it, (int32_t)dim), ir_broadcast_in_dim(f, pos, t->rank, t->dims, bd));
  tpurt_dtype_t acc = t->dtype == TPURT_DTYPE_BOOL ? TPURT_DTYPE_I64 : t->dtype;
  ir_value_t vv = lower_cast(ctx, v, acc);
  *out_v = lower_cast(ctx,
                      ir_reduce(f, ir_select(f, hit, vv, ir_const_like(f, vv, 0.0)),
                                ir_constant_f64(f, acc, 0.0), &dim, 1, IR_REDUCE_ADD),
                      t->dtype);
  *out_i = ir_reduce(f, ir_select(f, hit, i, ir_const_like(f, i, 0.0)),
                     ir_constant_i64(f, TPURT_DTYPE_I64, 0), &dim, 1, IR_REDUCE_ADD);
}

/* Adds the reduced dim back as size 1 when |keepdim|. */
static ir_value_t keep_dim(lower_ctx_t* ctx, ir_value_t v, const tpurt_tensor_t* t, int64_t dim,
                           bool keepdim) {
  if (!keepdim || t->rank == 0) return v;
  int64_t shape[TPURT_MAX_RANK];
  for (int32_t d = 0; d < t->rank; ++d) shape[d] = d == dim ? 1 : t->sizes[d];
  return ir_reshape(ctx->func, v, t->rank, shape);
}

typedef enum order_stat_e { STAT_KTH, STAT_MEDIAN, STAT_NANMEDIAN } order_stat_t;

/* Sorted position per row: k - 1; the lower median ((n - 1) / 2) or, for a
** row with a NaN, the first NaN (sorted last, so at the count of numbers);
** nanmedian: the lower median of the numbers alone. */
static TPURT_MUST_USE tpurt_status_t order_stat(lower_ctx_t* ctx, order_stat_t which, int64_t dim,
                                                bool has_dim, int64_t k, bool keepdim) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  tpurt_tensor_t flat = *t;
  if (!has_dim || t->rank == 0) { /* the whole tensor as one row */
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; ++d) n *= t->sizes[d];
    if (n == 0) return lower_error(TPURT_INVALID_ARGUMENT, "median() input tensor cannot be empty");
    x = ir_reshape(f, x, 1, &n);
    flat.rank = 1;
    flat.sizes[0] = n;
    dim = 0;
  } else if (t->sizes[dim] == 0) {
    return lower_error(TPURT_INVALID_ARGUMENT, "median() cannot compute median for a dimension of size 0");
  }
  int64_t size = flat.sizes[dim];
  if (which == STAT_KTH && (k < 1 || k > size))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "kthvalue(): selected number k out of range for dimension %lld", (long long)dim);
  ir_value_t v, i;
  lower_sort_with_indices(ctx, x, dim, false, &v, &i);
  int64_t row[TPURT_MAX_RANK], rank = 0;
  for (int32_t d = 0; d < flat.rank; ++d)
    if (d != dim) row[rank++] = flat.sizes[d];
  ir_value_t pos;
  if (which == STAT_KTH) {
    pos = ir_splat(f, TPURT_DTYPE_I64, (int32_t)rank, row, (double)(k - 1));
  } else {
    ir_value_t nan = is_float(t->dtype) ? ir_convert(f, ir_compare(f, IR_NE, x, x), TPURT_DTYPE_I64)
                                        : ir_splat(f, TPURT_DTYPE_I64, flat.rank, flat.sizes, 0.0);
    ir_value_t nans = ir_reduce(f, nan, ir_constant_i64(f, TPURT_DTYPE_I64, 0), &dim, 1, IR_REDUCE_ADD);
    ir_value_t numbers = ir_sub(f, ir_const_like(f, nans, (double)size), nans);
    if (which == STAT_MEDIAN) {
      ir_value_t mid = ir_const_like(f, nans, (double)((size - 1) / 2));
      pos = ir_select(f, ir_compare(f, IR_GT, nans, ir_const_like(f, nans, 0.0)), numbers, mid);
    } else { /* (numbers - 1) / 2, 0 when the row is all NaN */
      ir_value_t m = ir_binary(f, IR_OP_DIVIDE, ir_sub(f, numbers, ir_const_like(f, numbers, 1.0)),
                               ir_const_like(f, numbers, 2.0));
      pos = ir_max(f, m, ir_const_like(f, m, 0.0));
    }
  }
  ir_value_t rv, ri;
  pick_sorted(ctx, v, i, dim, pos, &rv, &ri);
  if (!has_dim) {
    lower_set_result(ctx, 0, rv);
    return NULL;
  }
  lower_set_result(ctx, 0, keep_dim(ctx, rv, t, dim, keepdim));
  lower_set_result(ctx, 1, keep_dim(ctx, ri, t, dim, keepdim));
  return NULL;
}

/* median(self) / nanmedian(self): the row's order statistic (.kind) of the
** whole tensor. */
static TPURT_MUST_USE tpurt_status_t whole_order_stat(lower_ctx_t* ctx) {
  return order_stat(ctx, (order_stat_t)lower_rule_data(ctx)->kind, 0, false, 0, false);
}

/* kthvalue(self, k, dim=-1, keepdim=False) -> (values, indices) */
static TPURT_MUST_USE tpurt_status_t lower_kthvalue(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 2, -1), t->rank, &dim));
  return order_stat(ctx, STAT_KTH, dim, true, lower_int(ctx, 1, 1), lower_bool(ctx, 3, false));
}

static TPURT_MUST_USE tpurt_status_t median_dim(lower_ctx_t* ctx) {
  order_stat_t which = (order_stat_t)lower_rule_data(ctx)->kind;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  return order_stat(ctx, which, dim, true, 0, lower_bool(ctx, 2, false));
}

/* Sorted by name. */
/* mode(self, dim=-1, keepdim=False) -> (values, indices): the most frequent
** value along dim, the smallest of equally frequent ones, and the last index
** holding it (CPU sorts (value, index) pairs and keeps a run's last index).
** Counted by comparing every pair along dim: O(n^2) work, no sort. */
static TPURT_MUST_USE tpurt_status_t lower_mode(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  bool keepdim = lower_bool(ctx, 2, false);
  ir_func_t* f = ctx->func;
  if (t->rank == 0) {
    lower_set_result(ctx, 0, lower_tensor(ctx, 0));
    lower_set_result(ctx, 1, ir_constant_i64(f, TPURT_DTYPE_I64, 0));
    return NULL;
  }
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, -1), t->rank, &dim));
  int64_t n = t->sizes[dim];
  if (n == 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "mode(): Expected reduction dim %lld to have non-zero size.",
                       (long long)dim);
  tpurt_dtype_t dt = t->dtype == TPURT_DTYPE_BOOL ? TPURT_DTYPE_U8 : t->dtype;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), dt);
  /* dim last */
  int64_t perm[TPURT_MAX_RANK], dims[TPURT_MAX_RANK + 1];
  int32_t r = 0;
  for (int32_t i = 0; i < t->rank; ++i)
    if (i != dim) perm[r] = i, dims[r++] = t->sizes[i];
  perm[r] = dim;
  dims[r] = n;
  x = ir_transpose(f, x, perm);
  /* eq[..., i, j] = x_i == x_j */
  int64_t pd[TPURT_MAX_RANK + 1], mi[TPURT_MAX_RANK], mj[TPURT_MAX_RANK];
  for (int32_t i = 0; i < r; ++i) pd[i] = dims[i], mi[i] = mj[i] = i;
  pd[r] = n;
  pd[r + 1] = n;
  mi[r] = r;
  mj[r] = r + 1;
  ir_value_t xi = ir_broadcast_in_dim(f, x, r + 2, pd, mi), xj = ir_broadcast_in_dim(f, x, r + 2, pd, mj);
  ir_value_t eq = ir_convert(f, ir_compare(f, IR_EQ, xi, xj), TPURT_DTYPE_I64);
  int64_t last = r + 1, row = r;
  ir_value_t count = ir_reduce(f, eq, ir_constant_i64(f, TPURT_DTYPE_I64, 0), &last, 1, IR_REDUCE_ADD);
  ir_value_t maxc = ir_reduce(f, count, ir_constant_i64(f, TPURT_DTYPE_I64, 0), &row, 1, IR_REDUCE_MAX);
  ir_value_t cand = ir_compare(f, IR_EQ, count, ir_broadcast_in_dim(f, maxc, r + 1, dims, mi));
  ir_value_t big = tpurt_dtype_is_float(dt) ? ir_constant_f64(f, dt, INFINITY)
                   : dt == TPURT_DTYPE_U8   ? ir_constant_i64(f, dt, 255)
                                            : ir_constant_i64(f, dt,
                                                            dt == TPURT_DTYPE_I64   ? INT64_MAX
                                                              : dt == TPURT_DTYPE_I32 ? INT32_MAX
                                                              : dt == TPURT_DTYPE_I16 ? INT16_MAX
                                                                                      : INT8_MAX);
  ir_value_t value = ir_reduce(f, ir_select(f, cand, x, ir_broadcast_in_dim(f, big, r + 1, dims, NULL)), big,
                               &row, 1, IR_REDUCE_MIN);
  ir_value_t iota = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, r + 1, dims), r);
  ir_value_t at = ir_compare(f, IR_EQ, x, ir_broadcast_in_dim(f, value, r + 1, dims, mi));
  ir_value_t index = ir_reduce(f, ir_select(f, at, iota, ir_const_like(f, iota, -1.0)),
                               ir_constant_i64(f, TPURT_DTYPE_I64, -1), &row, 1, IR_REDUCE_MAX);
  value = lower_cast(ctx, value, t->dtype);
  if (keepdim) {
    int64_t kd[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t->rank; ++i) kd[i] = i == dim ? 1 : t->sizes[i];
    value = ir_reshape(f, value, t->rank, kd);
    index = ir_reshape(f, index, t->rank, kd);
  }
  lower_set_result(ctx, 0, value);
  lower_set_result(ctx, 1, index);
  return NULL;
}

const lower_rule_t lower_sort_rules[] = {
    LOWER_FN("aten::mode", lower_mode),
    LOWER_OUT_FN("aten::mode.values", lower_mode),
    LOWER_FN("aten::kthvalue", lower_kthvalue),
    LOWER_OUT_FN("aten::kthvalue.values", lower_kthvalue),
    LOWER_FN_WITH("aten::median", whole_order_stat, .kind = STAT_MEDIAN),
    LOWER_FN_WITH("aten::median.dim", median_dim, .kind = STAT_MEDIAN),
    LOWER_OUT_FN_WITH("aten::median.dim_values", median_dim, .kind = STAT_MEDIAN),
    LOWER_FN_WITH("aten::nanmedian", whole_order_stat, .kind = STAT_NANMEDIAN),
    LOWER_FN_WITH("aten::nanmedian.dim", median_dim, .kind = STAT_NANMEDIAN),
    LOWER_OUT_FN_WITH("aten::nanmedian.dim_values", median_dim, .kind = STAT_NANMEDIAN),
    LOWER_FN("aten::sort.stable", lower_sort),
    LOWER_OUT_FN("aten::sort.values_stable", lower_sort),
    LOWER_FN("aten::topk", lower_topk),
    LOWER_OUT_FN("aten::topk.values", lower_topk),
    LOWER_END,
};
