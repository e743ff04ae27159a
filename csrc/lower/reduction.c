/* reduction.c: sum, mean, amax/amin, max/min, argmax/argmin, var/std,
** any/all (and all.dim/any.dim), prod, nansum, count_nonzero, aminmax, trace, logsumexp. bf16/f16 inputs
* accumulate in f32 (XLA:CPU would
** accumulate them in bf16 element by element otherwise). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../base/base.h"
#include "lower.h"

/* The reduced dims of a dim argument: None or [] mean every dim. Fills
** |mask| (1 = reduced) and |dims| (sorted). */
static TPURT_MUST_USE tpurt_status_t reduce_dims(lower_ctx_t* ctx, int32_t arg, int32_t rank, bool* mask,
                                                 int64_t* dims, int32_t* n) {
  int64_t raw[TPURT_MAX_RANK * 2];
  int32_t m = lower_is_none(ctx, arg) ? 0 : lower_ints(ctx, arg, raw, TPURT_MAX_RANK * 2);
  for (int32_t i = 0; i < rank; ++i) mask[i] = m == 0;
  for (int32_t i = 0; i < m; ++i) {
    int64_t d;
    TPURT_RETURN_IF_ERROR(lower_wrap_dim(raw[i], rank, &d));
    if (rank == 0) continue;
    if (mask[d])
      return lower_error(TPURT_INVALID_ARGUMENT, "dim %lld appears multiple times in the list of dims",
                         (long long)d);
    mask[d] = true;
  }
  *n = 0;
  for (int32_t i = 0; i < rank; ++i)
    if (mask[i]) dims[(*n)++] = i;
  return NULL;
}

/* Reshapes a reduced value back to rank with ones where dims were reduced. */
static ir_value_t keep_dims(lower_ctx_t* ctx, ir_value_t v, const tpurt_tensor_t* t, const bool* mask,
                            bool keepdim) {
  if (!keepdim) return v;
  int64_t shape[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) shape[i] = mask[i] ? 1 : t->sizes[i];
  return ir_reshape(ctx->func, v, t->rank, shape);
}

/* A rank-0 constant; int64 extremes are exact only through the i64 path. */
static ir_value_t scalar_const(lower_ctx_t* ctx, tpurt_dtype_t d, double v) {
  if (tpurt_dtype_is_float(d) || tpurt_dtype_is_complex(d)) return ir_constant_f64(ctx->func, d, v);
  if (d == TPURT_DTYPE_I64 && v <= (double)INT64_MIN) return ir_constant_i64(ctx->func, d, INT64_MIN);
  if (d == TPURT_DTYPE_I64 && v >= (double)INT64_MAX) return ir_constant_i64(ctx->func, d, INT64_MAX);
  return ir_constant_i64(ctx->func, d, (int64_t)v);
}

/* A row's schema position (lower_rule_data_t's dim_arg, keepdim_arg,
** dtype_arg), or -1, which the arg readers take as an absent arg. */
static int32_t row_position(int8_t position) { return position > 0 ? position : -1; }

/*===--- sum / mean / prod ---===*/

/* What a sum_like row computes (its .kind). */
typedef enum sum_kind_e { SUM_ADD = 0, SUM_MEAN, SUM_PROD } sum_kind_t;

static TPURT_MUST_USE tpurt_status_t sum_like(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  int32_t dim_arg = row_position(row->dim_arg);
  int32_t keep_arg = row_position(row->keepdim_arg);
  int32_t dtype_arg = row_position(row->dtype_arg);
  bool mean = row->kind == SUM_MEAN;
  bool prod = row->kind == SUM_PROD;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t out = lower_dtype(ctx, dtype_arg, TPURT_DTYPE_INVALID);
  if (out == TPURT_DTYPE_INVALID)
    out = (tpurt_dtype_is_float(t->dtype) || tpurt_dtype_is_complex(t->dtype))
              ? t->dtype
              : (mean ? TPURT_DTYPE_INVALID : TPURT_DTYPE_I64);
  if (mean && (out == TPURT_DTYPE_INVALID || !(tpurt_dtype_is_float(out) || tpurt_dtype_is_complex(out))))
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
        "dtype. Got: %s",
        tpurt_dtype_name(out == TPURT_DTYPE_INVALID ? t->dtype : out));
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, dim_arg, t->rank, mask, dims, &n));
  tpurt_dtype_t acc = lower_acc_dtype(out);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_value_t r = ir_reduce(ctx->func, x, scalar_const(ctx, acc, prod ? 1.0 : 0.0), dims, n,
                           prod ? IR_REDUCE_MUL : IR_REDUCE_ADD);
  if (mean) {
    int64_t count = 1;
    for (int32_t i = 0; i < n; ++i) count *= t->sizes[dims[i]];
    r = ir_div(ctx->func, r, ir_const_like(ctx->func, r, (double)count));
  }
  lower_set_result(ctx, 0,
                   keep_dims(ctx, lower_cast(ctx, r, out), t, mask, lower_bool(ctx, keep_arg, false)));
  return NULL;
}

/* sum.dim_IntList(self, dim, keepdim, dtype) / sum(self, dtype) */
/* prod.dim_int(self, dim, keepdim, dtype) */

/*===--- amax / amin / max / min / any / all ---===*/

/* max/min/amax/amin of complex values: no order, and no PyTorch kernel. */
static TPURT_MUST_USE tpurt_status_t refuse_complex(const tpurt_tensor_t* t) {
  if (!tpurt_dtype_is_complex(t->dtype)) return NULL;
  return lower_error(TPURT_INVALID_ARGUMENT, "not implemented for %s: complex numbers have no order",
                     lower_dtype_cpp_name(t->dtype));
}

static TPURT_MUST_USE tpurt_status_t extreme(lower_ctx_t* ctx, int32_t dim_arg, int32_t keep_arg,
                                             bool is_max) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(refuse_complex(t));
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, dim_arg, t->rank, mask, dims, &n));
  for (int32_t i = 0; i < n; ++i)
    if (t->sizes[dims[i]] == 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected reduction dim %lld to have non-zero size.",
                         is_max ? "amax" : "amin", (long long)dims[i]);
  ir_value_t x = lower_tensor(ctx, 0);
  tpurt_dtype_t d = t->dtype;
  ir_value_t init = lower_extreme(ctx, d, !is_max);
  ir_value_t r = ir_reduce(ctx->func, x, init, dims, n, is_max ? IR_REDUCE_MAX : IR_REDUCE_MIN);
  if (tpurt_dtype_is_float(d)) {
    /* XLA:CPU's max/min reduction drops NaN; PyTorch propagates it */
    ir_func_t* f = ctx->func;
    ir_value_t nan = ir_compare(f, IR_NE, x, x);
    ir_value_t any = ir_reduce(f, nan, ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), dims, n, IR_REDUCE_OR);
    r = ir_select(f, any, ir_const_like(f, r, NAN), r);
  }
  lower_set_result(ctx, 0, keep_dims(ctx, r, t, mask, lower_bool(ctx, keep_arg, false)));
  return NULL;
}

/* extreme with the row's constants (LOWER_*_WITH rows): .flag is max. */
static TPURT_MUST_USE tpurt_status_t extreme_row(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  return extreme(ctx, row_position(row->dim_arg), row_position(row->keepdim_arg), row->flag);
}

static TPURT_MUST_USE tpurt_status_t full_extreme(lower_ctx_t* ctx) {
  bool is_max = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(refuse_complex(t));
  int64_t numel = 1;
  for (int32_t i = 0; i < t->rank; ++i) numel *= t->sizes[i];
  if (numel == 0)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "%s(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
        "with the 'dim' argument.",
        is_max ? "max" : "min");
  return extreme(ctx, -1, -1, is_max);
}

/* any / all over the row's dims (.flag: any) */
static TPURT_MUST_USE tpurt_status_t any_all(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  int32_t dim_arg = row_position(row->dim_arg);
  int32_t keep_arg = row_position(row->keepdim_arg);
  bool any = row->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, dim_arg, t->rank, mask, dims, &n));
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_BOOL);
  ir_value_t r = ir_reduce(ctx->func, x, ir_constant_i64(ctx->func, TPURT_DTYPE_BOOL, any ? 0 : 1), dims, n,
                           any ? IR_REDUCE_OR : IR_REDUCE_AND);
  /* PyTorch: uint8 in, uint8 out; everything else gives bool */
  if (t->dtype == TPURT_DTYPE_U8) r = ir_convert(ctx->func, r, TPURT_DTYPE_U8);
  lower_set_result(ctx, 0, keep_dims(ctx, r, t, mask, lower_bool(ctx, keep_arg, false)));
  return NULL;
}

/*===--- argmax / argmin / max.dim / min.dim ---===*/

/* Reduces (value, index) pairs along |dim|: the larger (smaller) value
** wins, nan beats everything, ties go to the smaller index. */
static void arg_reduce(lower_ctx_t* ctx, ir_value_t x, int64_t dim, bool is_max, ir_value_t* out_value,
                       ir_value_t* out_index) {
  ir_func_t* f = ctx->func;
  const ir_type_t* xt = ir_value_type(f, x);
  ir_type_t it = *xt;
  it.dtype = TPURT_DTYPE_I64;
  ir_value_t iota = ir_iota(f, it, (int32_t)dim);
  tpurt_dtype_t d = xt->dtype;
  ir_value_t inputs[2] = {x, iota};
  ir_value_t inits[2] = {lower_extreme(ctx, d, !is_max), ir_constant_i64(f, TPURT_DTYPE_I64, INT64_MAX)};
  ir_value_t res[2], blk[4];
  ir_reduce_begin(f, inputs, inits, 2, &dim, 1, res, blk);
  ir_value_t a = blk[0], ia = blk[1], b = blk[2], ib = blk[3];
  ir_value_t better = ir_compare(f, is_max ? IR_GT : IR_LT, a, b);
  ir_value_t eq = ir_compare(f, IR_EQ, a, b);
  if (tpurt_dtype_is_float(d)) {
    ir_value_t a_nan = ir_compare(f, IR_NE, a, a), b_nan = ir_compare(f, IR_NE, b, b);
    better = ir_or(f, better, ir_and(f, a_nan, ir_not(f, b_nan)));
    eq = ir_or(f, eq, ir_and(f, a_nan, b_nan));
  }
  ir_value_t first = ir_and(f, eq, ir_compare(f, IR_LT, ia, ib));
  ir_value_t pick_a = ir_or(f, better, first);
  ir_value_t ret[2] = {ir_select(f, pick_a, a, b), ir_select(f, pick_a, ia, ib)};
  ir_region_end(f, ret, 2);
  *out_value = res[0];
  *out_index = res[1];
}

/* argmax(self, dim=None, keepdim=False) */
static TPURT_MUST_USE tpurt_status_t arg_extreme(lower_ctx_t* ctx) {
  bool is_max = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_value_t x = lower_tensor(ctx, 0);
  bool keep = lower_bool(ctx, 2, false);
  if (lower_is_none(ctx, 1)) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->rank; ++i) n *= t->sizes[i];
    if (n == 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "%s(): Expected reduction dim to be specified for input.numel() == 0.",
                         is_max ? "argmax" : "argmin");
    x = ir_reshape(ctx->func, x, 1, &n);
    ir_value_t v, idx;
    arg_reduce(ctx, x, 0, is_max, &v, &idx);
    if (keep) {
      int64_t ones[TPURT_MAX_RANK];
      for (int32_t i = 0; i < t->rank; ++i) ones[i] = 1;
      idx = ir_reshape(ctx->func, idx, t->rank, ones);
    }
    lower_set_result(ctx, 0, idx);
    return NULL;
  }
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  if (t->rank == 0) {
    lower_set_result(ctx, 0, ir_constant_i64(ctx->func, TPURT_DTYPE_I64, 0));
    return NULL;
  }
  if (t->sizes[dim] == 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected reduction dim %lld to have non-zero size.",
                       is_max ? "argmax" : "argmin", (long long)dim);
  ir_value_t v, idx;
  arg_reduce(ctx, x, dim, is_max, &v, &idx);
  bool mask[TPURT_MAX_RANK] = {0};
  mask[dim] = true;
  lower_set_result(ctx, 0, keep_dims(ctx, idx, t, mask, keep));
  return NULL;
}

/* max.dim(self, dim, keepdim) -> (values, indices) */
static TPURT_MUST_USE tpurt_status_t extreme_dim(lower_ctx_t* ctx) {
  bool is_max = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(refuse_complex(t));
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  bool keep = lower_bool(ctx, 2, false);
  ir_value_t x = lower_tensor(ctx, 0);
  if (t->rank == 0) {
    lower_set_result(ctx, 0, x);
    lower_set_result(ctx, 1, ir_constant_i64(ctx->func, TPURT_DTYPE_I64, 0));
    return NULL;
  }
  if (t->sizes[dim] == 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected reduction dim %lld to have non-zero size.",
                       is_max ? "max" : "min", (long long)dim);
  ir_value_t v, idx;
  arg_reduce(ctx, x, dim, is_max, &v, &idx);
  bool mask[TPURT_MAX_RANK] = {0};
  mask[dim] = true;
  lower_set_result(ctx, 0, keep_dims(ctx, v, t, mask, keep));
  lower_set_result(ctx, 1, keep_dims(ctx, idx, t, mask, keep));
  return NULL;
}

/*===--- var / std ---===*/

/* What a var_like row returns (its .kind): var or std, alone or with the mean. */
typedef enum spread_kind_e { SPREAD_VAR = 0, SPREAD_STD, SPREAD_VAR_MEAN, SPREAD_STD_MEAN } spread_kind_t;

/* var.correction(self, dim=None, *, correction=None, keepdim=False) */
static TPURT_MUST_USE tpurt_status_t var_like(lower_ctx_t* ctx) {
  spread_kind_t kind = (spread_kind_t)lower_rule_data(ctx)->kind;
  bool take_sqrt = kind == SPREAD_STD || kind == SPREAD_STD_MEAN;
  bool with_mean = kind == SPREAD_VAR_MEAN || kind == SPREAD_STD_MEAN;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "std and var only support floating point and complex dtypes");
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, 1, t->rank, mask, dims, &n));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  int64_t count = 1;
  for (int32_t i = 0; i < n; ++i) count *= t->sizes[dims[i]];
  ir_value_t zero = ir_constant_f64(f, acc, 0.0);
  ir_value_t mean = ir_reduce(f, x, zero, dims, n, IR_REDUCE_ADD);
  mean = ir_div(f, mean, ir_const_like(f, mean, (double)count));
  int64_t bdims[TPURT_MAX_RANK], shape[TPURT_MAX_RANK];
  int32_t j = 0;
  for (int32_t i = 0; i < t->rank; ++i) {
    shape[i] = t->sizes[i];
    if (!mask[i]) bdims[j++] = i;
  }
  ir_value_t dev = ir_sub(f, x, ir_broadcast_in_dim(f, mean, t->rank, shape, bdims));
  ir_value_t ss = ir_reduce(f, ir_mul(f, dev, dev), zero, dims, n, IR_REDUCE_ADD);
  /* correction: None means 1; its value becomes a runtime parameter */
  ir_value_t corr = lower_is_none(ctx, 2) ? ir_constant_f64(f, acc, 1.0) : lower_scalar(ctx, 2, acc);
  ir_value_t denom = ir_sub(f, ir_constant_f64(f, acc, (double)count), corr);
  denom = ir_max(f, denom, ir_constant_f64(f, acc, 0.0));
  const ir_type_t* st = ir_value_type(f, ss);
  ir_value_t var = ir_div(f, ss, ir_broadcast_in_dim(f, denom, st->rank, st->dims, NULL));
  if (take_sqrt) var = ir_sqrt(f, var);
  bool keep = lower_bool(ctx, 3, false);
  lower_set_result(ctx, 0, keep_dims(ctx, lower_cast(ctx, var, t->dtype), t, mask, keep));
  if (with_mean) lower_set_result(ctx, 1, keep_dims(ctx, lower_cast(ctx, mean, t->dtype), t, mask, keep));
  return NULL;
}

/*===--- vector norm ---===*/

/* linalg_vector_norm(self, ord=2, dim=None, keepdim=False, *, dtype=None).
** The order picks the program (its value is in the cache key): inf/-inf are
** max/min of |x|, 0 counts nonzeros, 1 and 2 sum |x| and x^2, any other p is
** (sum |x|^p)^(1/p). Half types accumulate in f32. */
static TPURT_MUST_USE tpurt_status_t lower_vector_norm(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  double ord = lower_is_none(ctx, 1) ? 2.0 : lower_scalar_value(ctx, 1);
  tpurt_dtype_t out = lower_dtype(ctx, 4, t->dtype);
  if (!tpurt_dtype_is_float(t->dtype) || !tpurt_dtype_is_float(out))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.vector_norm: Expected a floating point or complex tensor as input. Got %s",
                       tpurt_dtype_name(tpurt_dtype_is_float(t->dtype) ? out : t->dtype));
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, 2, t->rank, mask, dims, &n));
  if (ord < 0 || isinf(ord)) {
    for (int32_t i = 0; i < t->rank; ++i)
      if (mask[i] && t->sizes[i] == 0)
        return lower_error(TPURT_INVALID_ARGUMENT,
                           "linalg.vector_norm cannot compute the %g norm on an empty tensor because the "
                           "operation does not have an identity",
                           ord);
  }
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(out);
  ir_value_t x = ir_abs(f, lower_cast(ctx, lower_tensor(ctx, 0), acc));
  ir_value_t r;
  if (isinf(ord)) {
    r = ir_reduce(f, x, ir_constant_f64(f, acc, ord > 0 ? 0.0 : INFINITY), dims, n,
                  ord > 0 ? IR_REDUCE_MAX : IR_REDUCE_MIN);
    /* XLA:CPU's max/min reduction drops NaN; PyTorch propagates it */
    ir_value_t any = ir_reduce(f, ir_compare(f, IR_NE, x, x), ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), dims,
                               n, IR_REDUCE_OR);
    r = ir_select(f, any, ir_const_like(f, r, NAN), r);
  } else if (ord == 0.0) {
    ir_value_t nz = lower_cast(ctx, ir_compare(f, IR_NE, x, ir_const_like(f, x, 0.0)), acc);
    r = ir_reduce(f, nz, ir_constant_f64(f, acc, 0.0), dims, n, IR_REDUCE_ADD);
  } else if (ord == 1.0) {
    r = ir_reduce(f, x, ir_constant_f64(f, acc, 0.0), dims, n, IR_REDUCE_ADD);
  } else if (ord == 2.0) {
    r = ir_reduce(f, ir_mul(f, x, x), ir_constant_f64(f, acc, 0.0), dims, n, IR_REDUCE_ADD);
    r = ir_sqrt(f, r);
  } else {
    ir_value_t p = ir_pow(f, x, ir_const_like(f, x, ord));
    r = ir_reduce(f, p, ir_constant_f64(f, acc, 0.0), dims, n, IR_REDUCE_ADD);
    r = ir_pow(f, r, ir_const_like(f, r, 1.0 / ord));
  }
  lower_set_result(ctx, 0, keep_dims(ctx, lower_cast(ctx, r, out), t, mask, lower_bool(ctx, 3, false)));
  return NULL;
}

/*===--- nansum, count_nonzero, aminmax, trace ---===*/

/* nansum(self, dim?, keepdim, dtype?): NaN counts as 0 */
static TPURT_MUST_USE tpurt_status_t lower_nansum(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t out = lower_dtype(ctx, 3, TPURT_DTYPE_INVALID);
  if (out == TPURT_DTYPE_INVALID) out = tpurt_dtype_is_float(t->dtype) ? t->dtype : TPURT_DTYPE_I64;
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, 1, t->rank, mask, dims, &n));
  tpurt_dtype_t acc = lower_acc_dtype(out);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  if (tpurt_dtype_is_float(acc))
    x = ir_select(ctx->func, ir_compare(ctx->func, IR_NE, x, x), ir_const_like(ctx->func, x, 0.0), x);
  ir_value_t r = ir_reduce(ctx->func, x, scalar_const(ctx, acc, 0.0), dims, n, IR_REDUCE_ADD);
  lower_set_result(ctx, 0, keep_dims(ctx, lower_cast(ctx, r, out), t, mask, lower_bool(ctx, 2, false)));
  return NULL;
}

/* count_nonzero.dim_IntList(self, dim) / count_nonzero(self, dim?) -> int64 */
static TPURT_MUST_USE tpurt_status_t lower_count_nonzero(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, 1, t->rank, mask, dims, &n));
  ir_value_t x = lower_tensor(ctx, 0);
  ir_value_t nz = ir_convert(ctx->func, ir_compare(ctx->func, IR_NE, x, ir_const_like(ctx->func, x, 0.0)),
                             TPURT_DTYPE_I64);
  lower_set_result(ctx, 0,
                   ir_reduce(ctx->func, nz, scalar_const(ctx, TPURT_DTYPE_I64, 0), dims, n, IR_REDUCE_ADD));
  return NULL;
}

/* hash_tensor(self, dim=[], *, keepdim, mode=0) -> uint64: the XOR of the
** elements' bits, each widened to 64 bits as PyTorch does (floats through
** double, integers sign-extended, bool as 0/1), so a hash does not depend
** on the device. */
static TPURT_MUST_USE tpurt_status_t lower_hash_tensor(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  if (lower_int(ctx, 3, 0) != 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "hash_tensor: mode %lld is not supported (0: xor_sum)",
                       (long long)lower_int(ctx, 3, 0));
  bool no_dim = lower_is_none(ctx, 1) || lower_ints(ctx, 1, dims, TPURT_MAX_RANK) == 0;
  int64_t numel = 1;
  for (int32_t i = 0; i < t->rank; ++i) numel *= t->sizes[i];
  if (no_dim && numel == 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "hash_tensor: Expected reduction dim to be specified for input.numel() == 0. Specify "
                       "the reduction dim with the 'dim' argument.");
  TPURT_RETURN_IF_ERROR(reduce_dims(ctx, 1, t->rank, mask, dims, &n));
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  if (tpurt_dtype_is_float(t->dtype)) {
    x = ir_convert(f, x, TPURT_DTYPE_F64);
  } else if (t->dtype != TPURT_DTYPE_BOOL && t->dtype != TPURT_DTYPE_U64) {
    x = ir_convert(f, x, TPURT_DTYPE_I64);
  }
  ir_type_t u = *ir_value_type(f, x);
  u.dtype = TPURT_DTYPE_U64;
  x = t->dtype == TPURT_DTYPE_BOOL ? ir_convert(f, x, TPURT_DTYPE_U64) : ir_bitcast_convert(f, x, u);
  ir_value_t r = ir_reduce(f, x, scalar_const(ctx, TPURT_DTYPE_U64, 0), dims, n, IR_REDUCE_XOR);
  lower_set_result(ctx, 0, keep_dims(ctx, r, t, mask, lower_bool(ctx, 2, false)));
  return NULL;
}

/* segment_reduce(data, reduce, *, lengths?, indices?, offsets?, axis, unsafe, initial?):
** segment s of each row covers [start_s, end_s) of |axis| (lengths: their
** prefix sums; offsets: consecutive pairs), lengths/offsets having data's
** leading dims up to |axis|. A [..., S, N] membership mask selects each
** segment's elements, which reduce over N; |initial| starts every
** accumulator (and is an empty segment's value), mean divides by the
** length. Whether the lengths add up to the axis (PyTorch's !unsafe check)
** depends on the data, which this rule does not sync to read. */
static TPURT_MUST_USE tpurt_status_t lower_segment_reduce(lower_ctx_t* ctx) {
  static const char* const names[] = {"sum", "prod", "mean", "max", "amax", "min", "amin"};
  static const ir_reducer_t reducers[] = {IR_REDUCE_ADD, IR_REDUCE_MUL, IR_REDUCE_ADD, IR_REDUCE_MAX,
                                          IR_REDUCE_MAX, IR_REDUCE_MIN, IR_REDUCE_MIN};
  static const double identities[] = {0.0, 1.0, 0.0, -INFINITY, -INFINITY, INFINITY, INFINITY};
  const char* red = lower_str(ctx, 1, "");
  int32_t k = -1;
  for (int32_t i = 0; i < 7 && k < 0; ++i)
    if (strcmp(red, names[i]) == 0) k = i;
  if (k < 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "reduce argument must be either sum, prod, mean, amax or amin, got %s", red);
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const bool by_lengths = lower_meta(ctx, 2) != NULL;
  const tpurt_tensor_t* seg = lower_meta(ctx, by_lengths ? 2 : 4);
  if (!seg)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "segment_reduce(): Either lengths or offsets must be defined.");
  int64_t axis;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 5, t->rank, &axis));
  if (seg->rank != axis + 1)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "segment_reduce(): Expected %s to have %lld dims (axis + 1), got %d",
                       by_lengths ? "lengths" : "offsets", (long long)axis + 1, (int)seg->rank);
  for (int32_t d = 0; d < axis; ++d)
    if (seg->sizes[d] != t->sizes[d])
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "segment_reduce(): Expected data and %s to have the same leading dims, got %s",
                         by_lengths ? "lengths" : "offsets", lower_shape_str(seg->rank, seg->sizes));
  ir_func_t* f = ctx->func;
  const int32_t last = seg->rank - 1;
  const int64_t num = seg->sizes[last] - (by_lengths ? 0 : 1);
  if (num < 0) return lower_error(TPURT_INVALID_ARGUMENT, "segment_reduce(): offsets must not be empty");
  ir_value_t sv = lower_cast(ctx, lower_tensor(ctx, by_lengths ? 2 : 4), TPURT_DTYPE_I64);
  ir_value_t starts, ends;
  if (by_lengths) {
    ends = lower_cumsum(ctx, sv, last);
    starts = ir_sub(f, ends, sv);
  } else {
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
    for (int32_t d = 0; d < seg->rank; ++d) hi[d] = seg->sizes[d], one[d] = 1;
    hi[last] = num;
    starts = ir_slice(f, sv, lo, hi, one);
    lo[last] = 1, hi[last] = num + 1;
    ends = ir_slice(f, sv, lo, hi, one);
  }
  /* the mask over [leading..., S, N] */
  const int64_t n = t->sizes[axis];
  int64_t mshape[TPURT_MAX_RANK + 1], keep[TPURT_MAX_RANK + 1];
  for (int32_t d = 0; d < axis; ++d) mshape[d] = t->sizes[d], keep[d] = d;
  mshape[axis] = num, keep[axis] = axis;
  mshape[axis + 1] = n, keep[axis + 1] = axis + 1;
  const int32_t mrank = (int32_t)axis + 2;
  ir_type_t it = {.dtype = TPURT_DTYPE_I64, .rank = mrank};
  memcpy(it.dims, mshape, sizeof(int64_t) * (size_t)mrank);
  ir_value_t pos = ir_iota(f, it, mrank - 1);
  ir_value_t in = ir_and(f, ir_compare(f, IR_GE, pos, ir_broadcast_in_dim(f, starts, mrank, mshape, keep)),
                         ir_compare(f, IR_LT, pos, ir_broadcast_in_dim(f, ends, mrank, mshape, keep)));
  /* data over [leading..., S, N, rest...] */
  if (t->rank + 1 > TPURT_MAX_RANK) return lower_error(TPURT_UNIMPLEMENTED, "segment_reduce: too many dims");
  int64_t xshape[TPURT_MAX_RANK], xmap[TPURT_MAX_RANK];
  for (int32_t d = 0; d < mrank; ++d) xshape[d] = mshape[d];
  for (int32_t d = (int32_t)axis + 1; d < t->rank; ++d) xshape[d + 1] = t->sizes[d];
  for (int32_t d = 0; d < t->rank; ++d) xmap[d] = d < axis ? d : d + 1;
  const tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_value_t x =
      ir_broadcast_in_dim(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), t->rank + 1, xshape, xmap);
  ir_value_t mask = ir_broadcast_in_dim(f, in, t->rank + 1, xshape, keep);
  x = ir_select(f, mask, x, ir_const_like(f, x, identities[k]));
  const bool has_initial = !lower_is_none(ctx, 7);
  ir_value_t init = has_initial ? lower_scalar(ctx, 7, acc) : scalar_const(ctx, acc, identities[k]);
  int64_t over = axis + 1;
  ir_value_t r = ir_reduce(f, x, init, &over, 1, reducers[k]);
  if (k == 2) { /* mean: the sum over the length; an empty segment keeps initial (else 0/0 = NaN) */
    const ir_type_t* rt = ir_value_type(f, r);
    ir_value_t len =
        ir_broadcast_in_dim(f, lower_cast(ctx, ir_sub(f, ends, starts), acc), rt->rank, rt->dims, keep);
    ir_value_t mean = ir_div(f, r, len);
    if (has_initial) mean = ir_select(f, ir_compare(f, IR_EQ, len, ir_const_like(f, len, 0.0)), r, mean);
    r = mean;
  }
  lower_set_result(ctx, 0, lower_cast(ctx, r, t->dtype));
  return NULL;
}

/* aminmax(self, *, dim?, keepdim) -> (min, max); NaN propagates as in amin/amax */
static TPURT_MUST_USE tpurt_status_t lower_aminmax(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  bool mask[TPURT_MAX_RANK];
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  if (lower_is_none(ctx, 1)) {
    for (int32_t i = 0; i < t->rank; ++i) mask[i] = true, dims[i] = i;
    n = t->rank;
  } else {
    int64_t d;
    TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &d));
    for (int32_t i = 0; i < t->rank; ++i) mask[i] = i == d;
    if (t->rank) dims[n++] = d;
  }
  for (int32_t i = 0; i < n; ++i)
    if (t->sizes[dims[i]] == 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "aminmax(): Expected reduction dim %lld to have non-zero size.", (long long)dims[i]);
  ir_value_t x = lower_tensor(ctx, 0);
  bool keep = lower_bool(ctx, 2, false);
  ir_value_t lo = ir_reduce(ctx->func, x, lower_extreme(ctx, t->dtype, true), dims, n, IR_REDUCE_MIN);
  ir_value_t hi = ir_reduce(ctx->func, x, lower_extreme(ctx, t->dtype, false), dims, n, IR_REDUCE_MAX);
  lower_set_result(ctx, 0, keep_dims(ctx, lo, t, mask, keep));
  lower_set_result(ctx, 1, keep_dims(ctx, hi, t, mask, keep));
  return NULL;
}

/* trace(self): the sum of the main diagonal of a matrix (ints sum as int64) */
static TPURT_MUST_USE tpurt_status_t lower_trace(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (t->rank != 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "trace: expected a matrix, but got tensor with dim %d",
                       (int)t->rank);
  tpurt_dtype_t out = tpurt_dtype_is_float(t->dtype) ? t->dtype : TPURT_DTYPE_I64;
  tpurt_dtype_t acc = lower_acc_dtype(out);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, 2, t->sizes);
  ir_value_t diag = ir_compare(f, IR_EQ, ir_iota(f, it, 0), ir_iota(f, it, 1));
  x = ir_select(f, diag, x, ir_const_like(f, x, 0.0));
  int64_t both[2] = {0, 1};
  lower_set_result(
      ctx, 0, lower_cast(ctx, ir_reduce(f, x, scalar_const(ctx, acc, 0.0), both, 2, IR_REDUCE_ADD), out));
  return NULL;
}

/*===--- logsumexp ---===*/

/* logsumexp(self, dim, keepdim=False): max-shifted; an infinite max shifts
** by 0 (PyTorch's masked_fill), so all -inf gives -inf and +inf gives inf. */
static TPURT_MUST_USE tpurt_status_t lower_logsumexp(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t out = tpurt_dtype_is_float(t->dtype) ? t->dtype : LOWER_DEFAULT_FLOAT;
  tpurt_dtype_t acc = lower_acc_dtype(out);
  int64_t raw[TPURT_MAX_RANK * 2], dims[TPURT_MAX_RANK];
  bool mask[TPURT_MAX_RANK] = {0};
  int32_t m = lower_ints(ctx, 1, raw, TPURT_MAX_RANK * 2), n = 0;
  for (int32_t i = 0; i < m; ++i) {
    int64_t d;
    TPURT_RETURN_IF_ERROR(lower_wrap_dim(raw[i], t->rank, &d));
    if (t->rank == 0) continue;
    if (mask[d])
      return lower_error(TPURT_INVALID_ARGUMENT, "dim %lld appears multiple times in the list of dims",
                         (long long)d);
    mask[d] = true;
  }
  for (int32_t i = 0; i < t->rank; ++i) {
    if (m == 0) mask[i] = true;
    if (mask[i]) dims[n++] = i;
  }
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_value_t mx = ir_reduce(f, x, ir_constant_f64(f, acc, -INFINITY), dims, n, IR_REDUCE_MAX);
  ir_value_t inf = ir_compare(f, IR_EQ, ir_abs(f, mx), ir_const_like(f, mx, INFINITY));
  mx = ir_select(f, inf, ir_const_like(f, mx, 0.0), mx);
  int64_t shape[TPURT_MAX_RANK], kept[TPURT_MAX_RANK], j = 0;
  for (int32_t i = 0; i < t->rank; ++i) {
    shape[i] = t->sizes[i];
    if (!mask[i]) kept[j++] = i;
  }
  ir_value_t e =
      ir_unary(f, IR_OP_EXPONENTIAL, ir_sub(f, x, ir_broadcast_in_dim(f, mx, t->rank, shape, kept)));
  ir_value_t s = ir_reduce(f, e, ir_constant_f64(f, acc, 0.0), dims, n, IR_REDUCE_ADD);
  ir_value_t r = lower_cast(ctx, ir_add(f, ir_log(f, s), mx), out);
  if (lower_bool(ctx, 2, false)) {
    for (int32_t i = 0; i < t->rank; ++i) shape[i] = mask[i] ? 1 : t->sizes[i];
    r = ir_reshape(f, r, t->rank, shape);
  }
  lower_set_result(ctx, 0, r);
  return NULL;
}

const lower_rule_t lower_reduction_rules[] = {
    LOWER_FN("aten::all", any_all),
    LOWER_FN_WITH("aten::all.dims", any_all, .dim_arg = 1, .keepdim_arg = 2),
    LOWER_FN_WITH("aten::amax", extreme_row, .dim_arg = 1, .keepdim_arg = 2, .flag = true),
    LOWER_OUT_FN_WITH("aten::amax.out", extreme_row, .dim_arg = 1, .keepdim_arg = 2, .flag = true),
    LOWER_FN_WITH("aten::amin", extreme_row, .dim_arg = 1, .keepdim_arg = 2),
    LOWER_OUT_FN_WITH("aten::amin.out", extreme_row, .dim_arg = 1, .keepdim_arg = 2),
    LOWER_FN("aten::aminmax", lower_aminmax),
    LOWER_OUT_FN("aten::aminmax.out", lower_aminmax),
    LOWER_FN_WITH("aten::any", any_all, .flag = true),
    LOWER_FN_WITH("aten::any.dims", any_all, .dim_arg = 1, .keepdim_arg = 2, .flag = true),
    LOWER_FN_WITH("aten::argmax", arg_extreme, .flag = true),
    LOWER_OUT_FN_WITH("aten::argmax.out", arg_extreme, .flag = true),
    LOWER_FN("aten::argmin", arg_extreme),
    LOWER_OUT_FN("aten::argmin.out", arg_extreme),
    /* the order (a number) selects the program: keyed */
    LOWER_KEYED_FN("aten::linalg_vector_norm", lower_vector_norm),
    LOWER_KEYED_OUT_FN("aten::linalg_vector_norm.out", lower_vector_norm),
    /* norm(self, p?, dim, keepdim[, dtype]) is the vector norm with the same leading args */
    LOWER_KEYED_FN("aten::norm.ScalarOpt_dim", lower_vector_norm),
    LOWER_KEYED_FN("aten::norm.ScalarOpt_dim_dtype", lower_vector_norm),
    LOWER_KEYED_OUT_FN("aten::norm.dtype_out", lower_vector_norm),
    LOWER_KEYED_OUT_FN("aten::norm.out", lower_vector_norm),
    LOWER_FN("aten::count_nonzero", lower_count_nonzero),
    LOWER_FN("aten::hash_tensor", lower_hash_tensor),
    LOWER_FN("aten::segment_reduce", lower_segment_reduce),
    LOWER_OUT_FN("aten::hash_tensor.out", lower_hash_tensor),
    LOWER_FN("aten::count_nonzero.dim_IntList", lower_count_nonzero),
    LOWER_FN_WITH("aten::max", full_extreme, .flag = true),
    LOWER_FN_WITH("aten::max.dim", extreme_dim, .flag = true),
    LOWER_OUT_FN_WITH("aten::max.dim_max", extreme_dim, .flag = true),
    LOWER_FN_WITH("aten::mean", sum_like, .dtype_arg = 1, .kind = SUM_MEAN),
    LOWER_FN_WITH("aten::mean.dim", sum_like, .dim_arg = 1, .keepdim_arg = 2, .dtype_arg = 3,
                  .kind = SUM_MEAN),
    LOWER_OUT_FN_WITH("aten::mean.out", sum_like, .dim_arg = 1, .keepdim_arg = 2, .dtype_arg = 3,
                      .kind = SUM_MEAN),
    LOWER_FN("aten::min", full_extreme),
    LOWER_FN("aten::min.dim", extreme_dim),
    LOWER_OUT_FN("aten::min.dim_min", extreme_dim),
    LOWER_FN("aten::nansum", lower_nansum),
    LOWER_OUT_FN("aten::nansum.out", lower_nansum),
    LOWER_FN_WITH("aten::prod", sum_like, .dtype_arg = 1, .kind = SUM_PROD),
    LOWER_FN_WITH("aten::prod.dim_int", sum_like, .dim_arg = 1, .keepdim_arg = 2, .dtype_arg = 3,
                  .kind = SUM_PROD),
    LOWER_FN_WITH("aten::std.correction", var_like, .kind = SPREAD_STD),
    LOWER_FN_WITH("aten::std_mean.correction", var_like, .kind = SPREAD_STD_MEAN),
    LOWER_FN_WITH("aten::sum", sum_like, .dtype_arg = 1),
    LOWER_OUT_FN_WITH("aten::sum.IntList_out", sum_like, .dim_arg = 1, .keepdim_arg = 2, .dtype_arg = 3),
    LOWER_FN_WITH("aten::sum.dim_IntList", sum_like, .dim_arg = 1, .keepdim_arg = 2, .dtype_arg = 3),
    LOWER_FN("aten::trace", lower_trace),
    LOWER_FN("aten::var.correction", var_like),
    LOWER_FN_WITH("aten::var_mean.correction", var_like, .kind = SPREAD_VAR_MEAN),
    /* all.dim / any.dim (pieces of PyTorch's _safe_softmax): one int dim reads as a list of one */
    LOWER_FN_WITH("aten::all.dim", any_all, .dim_arg = 1, .keepdim_arg = 2),
    LOWER_FN_WITH("aten::any.dim", any_all, .dim_arg = 1, .keepdim_arg = 2, .flag = true),
    LOWER_FN("aten::logsumexp", lower_logsumexp),
    LOWER_END,
};
