/* factory.c: ops that write whole values: fill_, zero_, copy_, arange, eye,
** linspace, logspace, tril_indices and triu_indices.
** (empty and empty_strided are allocations, done by the glue; full, zeros,
** ones and the *_like forms are PyTorch composites of empty and fill_.) */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/* fill_.Scalar(self, value) / fill_.Tensor(self, value 0-d) */
static TPURT_MUST_USE tpurt_status_t lower_fill(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_value_t v;
  if (lower_meta(ctx, 1)) {
    const tpurt_tensor_t* vt = lower_meta(ctx, 1);
    if (vt->rank != 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "fill_ only supports 0-dimension value tensor but got tensor with %d dimensions.",
                         vt->rank);
    v = lower_cast(ctx, lower_tensor(ctx, 1), t->dtype);
  } else {
    v = lower_scalar(ctx, 1, t->dtype);
  }
  lower_set_result(ctx, 0, t->rank ? ir_broadcast_in_dim(ctx->func, v, t->rank, t->sizes, NULL) : v);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_zero(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, t->rank, t->sizes, 0.0));
  return NULL;
}

/* copy_(self, src, non_blocking): src broadcast to self, any dtype. */
static TPURT_MUST_USE tpurt_status_t lower_copy(lower_ctx_t* ctx) {
  const tpurt_tensor_t *dst = lower_meta(ctx, 0), *src = lower_meta(ctx, 1);
  int32_t r;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(dst->rank, dst->sizes, src->rank, src->sizes, &r, dims));
  bool same = r == dst->rank;
  for (int32_t i = 0; same && i < r; ++i) same = dims[i] == dst->sizes[i];
  if (!same)
    return lower_error(TPURT_INVALID_ARGUMENT, "output with shape %s doesn't match the broadcast shape %s",
                       lower_shape_str(dst->rank, dst->sizes), lower_shape_str(r, dims));
  ir_value_t v = lower_cast(ctx, lower_tensor(ctx, 1), dst->dtype);
  lower_set_result(ctx, 0, lower_broadcast_to(ctx, v, dst->rank, dst->sizes));
  return NULL;
}

/* A bound or step of an int64 range, exactly: integer numbers as they
** came, float ones truncated (PyTorch's Scalar::to<int64_t>). */
static int64_t arange_int64(const lower_ctx_t* ctx, int32_t i) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  if ((a->kind == TPURT_ARG_SCALAR || a->kind == TPURT_ARG_FLOAT) && !tpurt_dtype_is_float(a->u.scalar.dtype))
    return a->u.scalar.i;
  if (a->kind == TPURT_ARG_INT || a->kind == TPURT_ARG_BOOL) return a->u.i;
  double v = lower_scalar_value(ctx, i);
  return v >= 0x1p63 ? INT64_MAX : v < -0x1p63 ? INT64_MIN : (int64_t)v;
}

/* arange.start_out(start, end, step, *, out): the length depends on the
** values, so this row keys on them; start and step still enter as values. */
static TPURT_MUST_USE tpurt_status_t lower_arange(lower_ctx_t* ctx) {
  double start = lower_scalar_value(ctx, 0), end = lower_scalar_value(ctx, 1),
         step = lower_scalar_value(ctx, 2);
  if (step == 0) return lower_error(TPURT_INVALID_ARGUMENT, "step must be nonzero");
  if (!isfinite(start) || !isfinite(end))
    return lower_error(TPURT_INVALID_ARGUMENT, "unsupported range: %g -> %g", start, end);
  if ((step > 0 && end < start) || (step < 0 && end > start))
    return lower_error(TPURT_INVALID_ARGUMENT, "upper bound and larger bound inconsistent with step sign");
  /* the out= tensor decides the dtype (PyTorch's arange sets it before) */
  const tpurt_arg_t* out = &ctx->args[ctx->arg_index[ctx->num_args]];
  tpurt_dtype_t dt = out->kind == TPURT_ARG_TENSOR ? out->u.tensor.dtype : TPURT_DTYPE_I64;
  int64_t n;
  /* PyTorch sizes an int64 range from the truncated int64 bounds and step,
  ** every other dtype from the double values. The int64 bounds are read as
  ** integers, not through doubles: 2**60 + 10 is 2**60 as a double. */
  if (dt != TPURT_DTYPE_I64) {
    n = (int64_t)ceil((end - start) / step);
    if (n < 0) n = 0;
  } else {
    int64_t s = arange_int64(ctx, 0), e = arange_int64(ctx, 1), st = arange_int64(ctx, 2);
    if (st == 0) return lower_error(TPURT_INVALID_ARGUMENT, "step must be nonzero");
    if ((st > 0 && e < s) || (st < 0 && e > s))
      return lower_error(TPURT_INVALID_ARGUMENT, "upper bound and larger bound inconsistent with step sign");
    /* (e - s + st - sign) / st in int64, as PyTorch computes it; the sum
    ** wraps (two's complement) where it overflows, and a length that comes
    ** out negative is refused as PyTorch refuses it. */
    int64_t sum = (int64_t)((uint64_t)e - (uint64_t)s + (uint64_t)st - (uint64_t)(st > 0 ? 1 : -1));
    n = sum / st;
    if (n < 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "invalid size, possible overflow? (arange from %lld to %lld)", (long long)s,
                         (long long)e);
  }
  tpurt_dtype_t math = tpurt_dtype_is_float(dt) ? (dt == TPURT_DTYPE_F64 ? TPURT_DTYPE_F64 : TPURT_DTYPE_F32)
                                                : TPURT_DTYPE_I64;
  ir_func_t* f = ctx->func;
  ir_value_t io = ir_iota(f, ir_type_make(math, 1, &n), 0);
  ir_value_t v = ir_add(f, lower_broadcast_to(ctx, lower_scalar(ctx, 0, math), 1, &n),
                        ir_mul(f, io, lower_broadcast_to(ctx, lower_scalar(ctx, 2, math), 1, &n)));
  lower_set_result(ctx, 0, lower_cast(ctx, v, dt));
  return NULL;
}

/* tril_indices / triu_indices(row, col, offset=0, *, dtype=long, ...) ->
** [2, count]: the (row, col) coordinates of the lower (upper) triangle of
** a row x col matrix, row-major. The count follows from the arguments (so
** the rows key on them); the coordinates are the whole grid's, packed where
** col - row <= offset (>= offset for the upper triangle). */
static TPURT_MUST_USE tpurt_status_t triangle_indices(lower_ctx_t* ctx) {
  const bool upper = lower_rule_data(ctx)->flag;
  const char* op = upper ? "triu_indices" : "tril_indices";
  int64_t rows = lower_int(ctx, 0, 0), cols = lower_int(ctx, 1, 0), offset = lower_int(ctx, 2, 0);
  tpurt_dtype_t dt = lower_dtype(ctx, 3, TPURT_DTYPE_I64);
  if (tpurt_dtype_is_float(dt) || tpurt_dtype_is_complex(dt) || dt == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'", op, tpurt_dtype_name(dt));
  if (rows < 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "row must be non-negative, got%lld", (long long)rows);
  if (cols < 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "col must be non-negative, got%lld", (long long)cols);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t edge = r + offset; /* the diagonal's column in row r */
    int64_t below = edge + 1 < 0 ? 0 : edge + 1 > cols ? cols : edge + 1;
    int64_t from = edge < 0 ? 0 : edge > cols ? cols : edge;
    count += upper ? cols - from : below;
  }
  ir_func_t* f = ctx->func;
  int64_t out_dims[2] = {2, count};
  if (count == 0) {
    lower_set_result(ctx, 0, ir_splat(f, dt, 2, out_dims, 0.0));
    return NULL;
  }
  int64_t n = rows * cols, grid[2] = {rows, cols}, one_row[2] = {1, count};
  ir_type_t gt = ir_type_make(TPURT_DTYPE_I64, 2, grid);
  ir_value_t r = ir_iota(f, gt, 0), c = ir_iota(f, gt, 1);
  ir_value_t diff = ir_sub(f, c, r);
  ir_value_t keep = ir_compare(f, upper ? IR_GE : IR_LE, diff, ir_const_like(f, diff, (double)offset));
  keep = ir_reshape(f, keep, 1, &n);
  ir_value_t parts[2] = {ir_reshape(f, lower_compact(ctx, keep, ir_reshape(f, r, 1, &n), count), 2, one_row),
                         ir_reshape(f, lower_compact(ctx, keep, ir_reshape(f, c, 1, &n), count), 2, one_row)};
  lower_set_result(ctx, 0, lower_cast(ctx, ir_concatenate(f, parts, 2, 0), dt));
  return NULL;
}

/* eye.m_out(n, m, *, out) / eye.out(n, *, out): ones on the main diagonal */
static TPURT_MUST_USE tpurt_status_t eye(lower_ctx_t* ctx) {
  bool has_m = lower_rule_data(ctx)->flag;
  int64_t dims[2] = {lower_int(ctx, 0, 0), has_m ? lower_int(ctx, 1, 0) : lower_int(ctx, 0, 0)};
  if (dims[0] < 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "n must be greater or equal to 0, got %lld",
                       (long long)dims[0]);
  if (dims[1] < 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "m must be greater or equal to 0, got %lld",
                       (long long)dims[1]);
  const tpurt_arg_t* out = &ctx->args[ctx->arg_index[ctx->num_args]];
  tpurt_dtype_t dt = out->kind == TPURT_ARG_TENSOR ? out->u.tensor.dtype : LOWER_DEFAULT_FLOAT;
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, 2, dims);
  ir_value_t diag = ir_compare(ctx->func, IR_EQ, ir_iota(ctx->func, it, 0), ir_iota(ctx->func, it, 1));
  lower_set_result(ctx, 0, ir_convert(ctx->func, diag, dt));
  return NULL;
}

/*===--- linspace / logspace ---===*/

/* trunc(x) = x < 0 ? ceil(x) : floor(x) */
static ir_value_t trunc_value(lower_ctx_t* ctx, ir_value_t x) {
  ir_value_t neg = ir_compare(ctx->func, IR_LT, x, ir_const_like(ctx->func, x, 0.0));
  return ir_select(ctx->func, neg, ir_unary(ctx->func, IR_OP_CEIL, x), ir_unary(ctx->func, IR_OP_FLOOR, x));
}

/* linspace.out(start, end, steps, *, out): the first half counts up from
** start, the second half down from end, as PyTorch's CPU kernel does (ints
** step in double, then truncate). */
/* |base_arg| >= 0: logspace, base ** (the linspace values), the power taken
** in double as PyTorch's kernel takes std::pow(double base, exponent). */
static TPURT_MUST_USE tpurt_status_t linspace_or_logspace(lower_ctx_t* ctx) {
  int32_t base_arg = lower_rule_data(ctx)->arg;
  int64_t steps = lower_int(ctx, 2, 0);
  if (steps < 0) return lower_error(TPURT_INVALID_ARGUMENT, "number of steps must be non-negative");
  const tpurt_arg_t* out = &ctx->args[ctx->arg_index[ctx->num_args]];
  tpurt_dtype_t dt = out->kind == TPURT_ARG_TENSOR ? out->u.tensor.dtype : LOWER_DEFAULT_FLOAT;
  tpurt_dtype_t math = tpurt_dtype_is_float(dt) ? lower_acc_dtype(dt) : TPURT_DTYPE_F64;
  ir_func_t* f = ctx->func;
  if (steps <= 1) {
    ir_value_t s = lower_scalar(ctx, 0, tpurt_dtype_is_float(dt) ? math : dt);
    if (base_arg >= 0)
      s = ir_pow(f, lower_scalar(ctx, base_arg, TPURT_DTYPE_F64), lower_cast(ctx, s, TPURT_DTYPE_F64));
    s = lower_cast(ctx, s, dt);
    lower_set_result(ctx, 0, steps == 0 ? ir_splat(f, dt, 1, &steps, 0.0) : ir_reshape(f, s, 1, &steps));
    return NULL;
  }
  /* start and end first take the output's type, as Scalar::to<T> does */
  tpurt_dtype_t endpoint = tpurt_dtype_is_float(dt) ? math : dt;
  ir_value_t start = lower_cast(ctx, lower_scalar(ctx, 0, endpoint), math);
  ir_value_t end = lower_cast(ctx, lower_scalar(ctx, 1, endpoint), math);
  ir_value_t step = ir_div(f, ir_sub(f, end, start), ir_constant_f64(f, math, (double)(steps - 1)));
  ir_value_t idx = ir_iota(f, ir_type_make(math, 1, &steps), 0);
  ir_value_t up = ir_add(f, lower_broadcast_to(ctx, start, 1, &steps),
                         ir_mul(f, lower_broadcast_to(ctx, step, 1, &steps), idx));
  ir_value_t rest = ir_sub(f, ir_const_like(f, idx, (double)(steps - 1)), idx);
  ir_value_t down = ir_sub(f, lower_broadcast_to(ctx, end, 1, &steps),
                           ir_mul(f, lower_broadcast_to(ctx, step, 1, &steps), rest));
  ir_value_t first_half = ir_compare(f, IR_LT, idx, ir_const_like(f, idx, (double)(steps / 2)));
  ir_value_t v = ir_select(f, first_half, up, down);
  if (base_arg >= 0) {
    ir_value_t e = lower_cast(ctx, v, TPURT_DTYPE_F64);
    v = ir_binary(f, IR_OP_POWER,
                  lower_broadcast_to(ctx, lower_scalar(ctx, base_arg, TPURT_DTYPE_F64), 1, &steps), e);
  }
  if (!tpurt_dtype_is_float(dt)) v = trunc_value(ctx, v);
  lower_set_result(ctx, 0, lower_cast(ctx, v, dt));
  return NULL;
}

/* logspace.out(start, end, steps, base, *, out) */

const lower_rule_t lower_factory_rules[] = {
    LOWER_KEYED_OUT_FN("aten::arange.start_out", lower_arange),
    LOWER_KEYED_FN_WITH("aten::tril_indices", triangle_indices, .flag = false),
    LOWER_KEYED_FN_WITH("aten::triu_indices", triangle_indices, .flag = true),
    LOWER_INPLACE_FN("aten::copy_", lower_copy),
    LOWER_OUT_FN_WITH("aten::eye.m_out", eye, .flag = true),
    LOWER_OUT_FN("aten::eye.out", eye),
    LOWER_INPLACE_FN("aten::fill_.Scalar", lower_fill),
    LOWER_INPLACE_FN("aten::fill_.Tensor", lower_fill),
    LOWER_INPLACE_FN("aten::zero_", lower_zero),
    LOWER_OUT_FN_WITH("aten::linspace.out", linspace_or_logspace, .arg = -1),
    LOWER_OUT_FN_WITH("aten::logspace.out", linspace_or_logspace, .arg = 3),
    LOWER_END,
};
