/* scan.c: scans that carry an index: cummax and cummin.
**
** A log-step (Hillis-Steele) scan over (value, index) pairs, as
** lower_cumsum does for sums: ceil(log2 n) rounds of pad-shift-combine, all
** on the device. The combine keeps PyTorch's CPU order: a later element
** replaces the running extreme when it is at least as extreme (ties take
** the later index), and NaN is the most extreme of all (it propagates, and
** a later NaN takes over the index). That is a max (min) over a total order
** of (value, index) pairs, so the scan is associative. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/* The value no element loses to (shifted in at the front). */
static ir_value_t identity(ir_func_t* f, tpurt_dtype_t dt, bool is_max) {
  if (tpurt_dtype_is_float(dt)) return ir_constant_f64(f, dt, is_max ? -INFINITY : INFINITY);
  int64_t lo, hi;
  switch (dt) {
    case TPURT_DTYPE_U8:
      lo = 0, hi = 255;
      break;
    case TPURT_DTYPE_I8:
      lo = INT8_MIN, hi = INT8_MAX;
      break;
    case TPURT_DTYPE_I16:
      lo = INT16_MIN, hi = INT16_MAX;
      break;
    case TPURT_DTYPE_I32:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
    default:
      lo = INT64_MIN, hi = INT64_MAX;
      break;
  }
  return ir_constant_i64(f, dt, is_max ? lo : hi);
}

/* cummax / cummin(self, dim) -> (values, indices) */
static tpurt_status_t cumextreme(lower_ctx_t* ctx, bool is_max) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim = 0;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, 0), t->rank > 0 ? t->rank : 1, &dim));
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
  ir_value_t pad_v = identity(f, dt, is_max), pad_i = ir_constant_i64(f, TPURT_DTYPE_I64, -1);
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
      take_later = ir_binary(f, "stablehlo.or", nan2,
                             ir_binary(f, "stablehlo.and", ir_unary(f, "stablehlo.not", nan1), take_later));
    }
    x = ir_select(f, take_later, x, v1);
    idx = ir_select(f, take_later, idx, i1);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, x, t->dtype));
  lower_set_result(ctx, 1, idx);
  return NULL;
}

static tpurt_status_t lower_cummax(lower_ctx_t* ctx) { return cumextreme(ctx, true); }
static tpurt_status_t lower_cummin(lower_ctx_t* ctx) { return cumextreme(ctx, false); }

const lower_rule_t lower_scan_rules[] = {
    LOWER_FN("aten::cummax", lower_cummax),
    LOWER_OUT_FN("aten::cummax.out", lower_cummax),
    LOWER_FN("aten::cummin", lower_cummin),
    LOWER_OUT_FN("aten::cummin.out", lower_cummin),
    LOWER_END,
};
