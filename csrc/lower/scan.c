/* scan.c: running totals along a dim: cumsum, cumprod, logcumsumexp,
** cummax/cummin (with the index of the extreme), and repeat_interleave (an
** index built from the running totals of repeats).
** Log-step shifted combines: O(n log n) work, no host round trip. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/*===--- helpers of the rules below ---===*/

static bool is_float(tpurt_dtype_t d) { return tpurt_dtype_is_float(d); }

/*===--- cumsum / cumprod ---===*/

/* cumsum / cumprod(self, dim, *, dtype=None): the row's .str is the
** combining op, .real its identity; ints and bool accumulate in int64. */
static TPURT_MUST_USE tpurt_status_t cumulative(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  tpurt_dtype_t out = lower_dtype(ctx, 2, TPURT_DTYPE_INVALID);
  if (out == TPURT_DTYPE_INVALID) out = is_float(t->dtype) ? t->dtype : TPURT_DTYPE_I64;
  tpurt_dtype_t acc = lower_acc_dtype(out);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  if (t->rank > 0) x = lower_scan(ctx, x, dim, lower_rule_op(ctx), lower_rule_real(ctx));
  lower_set_result(ctx, 0, lower_cast(ctx, x, out));
  return NULL;
}

/*===--- logcumsumexp ---===*/

/* log(exp(a) + exp(b)) without overflow; two equal infinities give themselves. */
static ir_value_t log_add_exp(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  ir_value_t m = ir_max(f, a, b);
  ir_value_t d = ir_abs(f, ir_sub(f, a, b));
  ir_value_t r = ir_binary(f, IR_OP_ADD, m, ir_unary(f, IR_OP_LOG_PLUS_ONE, ir_exp(f, ir_neg(f, d))));
  ir_value_t same_inf = ir_and(f, ir_compare(f, IR_EQ, a, b),
                               ir_compare(f, IR_EQ, ir_abs(f, a), ir_const_like(f, a, INFINITY)));
  return ir_select(f, same_inf, a, r);
}

/* _logcumsumexp(self, dim): the log-step scan of lower_cumsum with
** log-add-exp in place of add and -inf shifted in. */
static TPURT_MUST_USE tpurt_status_t lower_logcumsumexp(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "logcumsumexp(): expected a floating point input, got %s",
                       tpurt_dtype_name(t->dtype));
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  if (t->rank == 0) {
    lower_set_result(ctx, 0, x);
    return NULL;
  }
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  x = lower_cast(ctx, x, acc);
  ir_value_t neg_inf = ir_constant_f64(f, acc, -INFINITY);
  for (int64_t shift = 1; shift < t->sizes[dim]; shift *= 2) {
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, in[TPURT_MAX_RANK] = {0};
    int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t->rank; ++i) li[i] = t->sizes[i], one[i] = 1;
    lo[dim] = shift;
    ir_value_t shifted = ir_slice(f, ir_pad(f, x, neg_inf, lo, hi, in), st, li, one);
    x = log_add_exp(ctx, x, shifted);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, x, t->dtype));
  return NULL;
}

/*===--- repeat_interleave ---===*/

/* repeat_interleave.Tensor(repeats, *, output_size=None): index i repeated
** repeats[i] times. The size is the sum of the data, so only the form with
** output_size is lowered (the CPU takes the other): out[j] counts the
** running totals at or below j. */
static TPURT_MUST_USE tpurt_status_t lower_repeat_interleave(lower_ctx_t* ctx) {
  const tpurt_tensor_t* r = lower_meta(ctx, 0);
  if (r->dtype != TPURT_DTYPE_I64 && r->dtype != TPURT_DTYPE_I32)
    return lower_error(TPURT_INVALID_ARGUMENT, "repeats has to be Long or Int tensor");
  if (r->rank != 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "repeat_interleave only accept 1D vector as repeat");
  if (lower_is_none(ctx, 1))
    return lower_error(TPURT_UNIMPLEMENTED, "repeat_interleave needs output_size on tpu");
  int64_t out_n = lower_int(ctx, 1, 0), n = r->sizes[0];
  ir_func_t* f = ctx->func;
  if (out_n == 0 || n == 0) {
    lower_set_result(ctx, 0, ir_splat(f, r->dtype, 1, &out_n, 0.0));
    return NULL;
  }
  ir_value_t totals = lower_cumsum(ctx, lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_I64), 0);
  int64_t dims[2] = {out_n, n};
  ir_value_t j = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, dims), 0);
  int64_t bd = 1;
  ir_value_t tot = ir_broadcast_in_dim(f, totals, 2, dims, &bd);
  ir_value_t below = lower_cast(ctx, ir_compare(f, IR_LE, tot, j), TPURT_DTYPE_I64);
  int64_t red = 1;
  ir_value_t out = ir_reduce(f, below, ir_constant_i64(f, TPURT_DTYPE_I64, 0), &red, 1, IR_REDUCE_ADD);
  lower_set_result(ctx, 0, lower_cast(ctx, out, r->dtype));
  return NULL;
}

/* Sorted by name. */
/*===--- cummax / cummin ---===*/

/* A log-step scan over (value, index) pairs. The combine keeps PyTorch's CPU
** order: a later element replaces the running extreme when it is at least as
** extreme (ties take the later index), and NaN is the most extreme of all
** (it propagates, and a later NaN takes over the index). That is a max (min)
** over a total order of (value, index) pairs, so the scan is associative. */

/* cummax / cummin(self, dim) -> (values, indices) */
static TPURT_MUST_USE tpurt_status_t cumextreme(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  bool is_max = row->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim = 0;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank > 0 ? t->rank : 1, &dim));
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  tpurt_dtype_t dt = t->dtype == TPURT_DTYPE_BOOL ? TPURT_DTYPE_U8 : t->dtype;
  x = lower_cast(ctx, x, dt);
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, t->rank, t->sizes);
  if (t->rank == 0) {
    lower_set_result(ctx, 0, lower_cast(ctx, x, t->dtype));
    lower_set_result(ctx, 1, ir_constant_i64(f, TPURT_DTYPE_I64, 0));
    return NULL;
  }
  ir_value_t idx = ir_iota(f, it, (int32_t)dim);
  bool is_float = tpurt_dtype_is_float(dt);
  ir_value_t pad_v = lower_extreme(ctx, dt, !is_max),
             /* no element loses to it */ pad_i = ir_constant_i64(f, TPURT_DTYPE_I64, -1);
  int64_t n = t->sizes[dim];
  for (int64_t shift = 1; shift < n; shift *= 2) {
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, in[TPURT_MAX_RANK] = {0};
    int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t->rank; ++i) {
      li[i] = t->sizes[i];
      one[i] = 1;
    }
    lo[dim] = shift;
    /* (v1, i1): the element |shift| earlier; (v2, i2) = (x, idx): this one */
    ir_value_t v1 = ir_slice(f, ir_pad(f, x, pad_v, lo, hi, in), st, li, one);
    ir_value_t i1 = ir_slice(f, ir_pad(f, idx, pad_i, lo, hi, in), st, li, one);
    ir_value_t take_later = ir_compare(f, is_max ? IR_GE : IR_LE, x, v1);
    if (is_float) {
      ir_value_t nan1 = ir_compare(f, IR_NE, v1, v1), nan2 = ir_compare(f, IR_NE, x, x);
      take_later = ir_or(f, nan2, ir_and(f, ir_not(f, nan1), take_later));
    }
    x = ir_select(f, take_later, x, v1);
    idx = ir_select(f, take_later, idx, i1);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, x, t->dtype));
  lower_set_result(ctx, 1, idx);
  return NULL;
}

const lower_rule_t lower_scan_rules[] = {
    LOWER_FN_WITH("aten::cummax", cumextreme, .flag = true),
    LOWER_OUT_FN_WITH("aten::cummax.out", cumextreme, .flag = true),
    LOWER_FN_WITH("aten::cummin", cumextreme),
    LOWER_OUT_FN_WITH("aten::cummin.out", cumextreme),
    LOWER_FN("aten::_logcumsumexp", lower_logcumsumexp),
    LOWER_OUT_FN("aten::_logcumsumexp.out", lower_logcumsumexp),
    LOWER_FN_WITH("aten::cumprod", cumulative, .op = IR_OP_MULTIPLY, .real = 1.0),
    LOWER_FN_WITH("aten::cumsum", cumulative, .op = IR_OP_ADD, .real = 0.0),
    LOWER_OUT_FN_WITH("aten::cumsum.out", cumulative, .op = IR_OP_ADD, .real = 0.0),
    LOWER_FN("aten::repeat_interleave.Tensor", lower_repeat_interleave),
    LOWER_END,
};
