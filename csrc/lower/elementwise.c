/* elementwise.c: arithmetic, comparison, logical and unary math ops, with
** PyTorch's type promotion and broadcasting. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/*===--- operands ---===*/

/* Reads schema args |idx| (tensors or numbers) as values of |dtype|, all
** broadcast to their common shape. */
static tpurt_status_t operands(lower_ctx_t* ctx, const int32_t* idx, int32_t n, tpurt_dtype_t dtype,
                               ir_value_t* out) {
  int32_t rank = 0;
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t k = 0; k < n; ++k) {
    const tpurt_tensor_t* t = lower_meta(ctx, idx[k]);
    if (t) TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, t->rank, t->sizes, &rank, dims));
  }
  for (int32_t k = 0; k < n; ++k) {
    ir_value_t v = lower_meta(ctx, idx[k]) ? lower_cast(ctx, lower_tensor(ctx, idx[k]), dtype)
                                           : lower_scalar(ctx, idx[k], dtype);
    out[k] = lower_broadcast_to(ctx, v, rank, dims);
  }
  return NULL;
}

static bool is_float(tpurt_dtype_t d) { return tpurt_dtype_is_float(d); }

/* Math in f32 for half types, as PyTorch's CPU kernels do (opmath). */
static tpurt_dtype_t opmath(tpurt_dtype_t d) { return lower_acc_dtype(d); }

/*===--- binary arithmetic ---===*/

static tpurt_status_t arith(lower_ctx_t* ctx, const char* op, int32_t alpha_arg) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (dt == TPURT_DTYPE_BOOL && strcmp(op, "stablehlo.subtract") == 0)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
        "`logical_xor()` operator instead.");
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  if (alpha_arg >= 0 && !lower_is_none(ctx, alpha_arg) && !lower_scalar_is(ctx, alpha_arg, 1.0)) {
    if (!is_float(dt) && is_float(lower_arg(ctx, alpha_arg)->u.scalar.dtype))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "For integral input tensors, argument alpha must not be a floating point number.");
    ir_value_t alpha =
        lower_broadcast_to(ctx, lower_scalar(ctx, alpha_arg, dt), ir_value_type(ctx->func, v[1])->rank,
                           ir_value_type(ctx->func, v[1])->dims);
    v[1] = ir_binary(ctx->func, dt == TPURT_DTYPE_BOOL ? "stablehlo.and" : "stablehlo.multiply", v[1], alpha);
  }
  if (dt == TPURT_DTYPE_BOOL) op = strcmp(op, "stablehlo.add") == 0 ? "stablehlo.or" : "stablehlo.and";
  lower_set_result(ctx, 0, ir_binary(ctx->func, op, v[0], v[1]));
  return NULL;
}

static tpurt_status_t lower_add(lower_ctx_t* ctx) { return arith(ctx, "stablehlo.add", 2); }
static tpurt_status_t lower_sub(lower_ctx_t* ctx) { return arith(ctx, "stablehlo.subtract", 2); }
static tpurt_status_t lower_mul(lower_ctx_t* ctx) { return arith(ctx, "stablehlo.multiply", -1); }
static tpurt_status_t lower_maximum(lower_ctx_t* ctx) { return arith(ctx, "stablehlo.maximum", -1); }
static tpurt_status_t lower_minimum(lower_ctx_t* ctx) { return arith(ctx, "stablehlo.minimum", -1); }

/* rsub(self, other, alpha) = other - alpha * self */
static tpurt_status_t lower_rsub(lower_ctx_t* ctx) {
  int32_t idx[2] = {1, 0};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  if (!lower_is_none(ctx, 2) && !lower_scalar_is(ctx, 2, 1.0)) {
    const ir_type_t* t = ir_value_type(ctx->func, v[1]);
    v[1] = ir_binary(ctx->func, "stablehlo.multiply", v[1],
                     lower_broadcast_to(ctx, lower_scalar(ctx, 2, dt), t->rank, t->dims));
  }
  lower_set_result(ctx, 0, ir_binary(ctx->func, "stablehlo.subtract", v[0], v[1]));
  return NULL;
}

/* trunc(x) = x < 0 ? ceil(x) : floor(x); StableHLO has no trunc op. */
static ir_value_t trunc_value(lower_ctx_t* ctx, ir_value_t x) {
  ir_value_t neg = ir_compare(ctx->func, IR_LT, x, lower_full_like(ctx, x, 0.0));
  return ir_select(ctx->func, neg, ir_unary(ctx->func, "stablehlo.ceil", x),
                   ir_unary(ctx->func, "stablehlo.floor", x));
}

/* Integer floor division: truncating division, minus one where the signs
** differ and the division was inexact. */
static ir_value_t int_floor_div(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  ir_value_t q = ir_binary(f, "stablehlo.divide", a, b);
  ir_value_t r = ir_binary(f, "stablehlo.remainder", a, b);
  ir_value_t zero = lower_full_like(ctx, a, 0.0);
  ir_value_t inexact = ir_compare(f, IR_NE, r, zero);
  ir_value_t signs = ir_compare(f, IR_NE, ir_compare(f, IR_LT, a, zero), ir_compare(f, IR_LT, b, zero));
  ir_value_t fix = ir_binary(f, "stablehlo.and", inexact, signs);
  return ir_select(f, fix, ir_binary(f, "stablehlo.subtract", q, lower_full_like(ctx, q, 1.0)), q);
}

/* div(self, other, rounding_mode=None|"trunc"|"floor") */
static tpurt_status_t div_mode(lower_ctx_t* ctx, const char* mode) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (!mode && !is_float(dt)) dt = LOWER_DEFAULT_FLOAT; /* true division */
  tpurt_dtype_t math = is_float(dt) ? opmath(dt) : dt;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  ir_value_t q;
  if (!mode) {
    q = ir_binary(ctx->func, "stablehlo.divide", v[0], v[1]);
  } else if (strcmp(mode, "trunc") == 0) {
    q = ir_binary(ctx->func, "stablehlo.divide", v[0], v[1]);
    if (is_float(math)) q = trunc_value(ctx, q);
  } else if (strcmp(mode, "floor") == 0) {
    q = is_float(math)
            ? ir_unary(ctx->func, "stablehlo.floor", ir_binary(ctx->func, "stablehlo.divide", v[0], v[1]))
            : int_floor_div(ctx, v[0], v[1]);
  } else {
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'",
                       mode);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, q, dt));
  return NULL;
}

static tpurt_status_t lower_div(lower_ctx_t* ctx) { return div_mode(ctx, NULL); }
static tpurt_status_t lower_div_mode(lower_ctx_t* ctx) { return div_mode(ctx, lower_str(ctx, 2, NULL)); }
static tpurt_status_t lower_floor_divide(lower_ctx_t* ctx) { return div_mode(ctx, "floor"); }

/* remainder: Python's modulo (sign of the divisor); fmod: C's (sign of the
** dividend). */
static tpurt_status_t modulo(lower_ctx_t* ctx, bool python) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  tpurt_dtype_t math = is_float(dt) ? opmath(dt) : dt;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  ir_func_t* f = ctx->func;
  ir_value_t r = ir_binary(f, "stablehlo.remainder", v[0], v[1]);
  if (python) {
    ir_value_t zero = lower_full_like(ctx, r, 0.0);
    ir_value_t nonzero = ir_compare(f, IR_NE, r, zero);
    ir_value_t signs = ir_compare(f, IR_NE, ir_compare(f, IR_LT, r, zero), ir_compare(f, IR_LT, v[1], zero));
    r = ir_select(f, ir_binary(f, "stablehlo.and", nonzero, signs), ir_binary(f, "stablehlo.add", r, v[1]),
                  r);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

static tpurt_status_t lower_remainder(lower_ctx_t* ctx) { return modulo(ctx, true); }
static tpurt_status_t lower_fmod(lower_ctx_t* ctx) { return modulo(ctx, false); }

static tpurt_status_t lower_pow(lower_ctx_t* ctx) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  tpurt_dtype_t math = is_float(dt) ? opmath(dt) : dt;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  ir_value_t r;
  if (!lower_meta(ctx, 1) && lower_scalar_is(ctx, 1, 1.0)) {
    r = v[0];
  } else {
    r = ir_binary(ctx->func, "stablehlo.power", v[0], v[1]);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

static tpurt_status_t lower_atan2(lower_ctx_t* ctx) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (!is_float(dt)) dt = LOWER_DEFAULT_FLOAT;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, opmath(dt), v));
  lower_set_result(ctx, 0, lower_cast(ctx, ir_binary(ctx->func, "stablehlo.atan2", v[0], v[1]), dt));
  return NULL;
}

/*===--- bitwise and logical ---===*/

static tpurt_status_t bitwise(lower_ctx_t* ctx, const char* op) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (is_float(dt))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'", op + 10,
                       tpurt_dtype_name(dt));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  lower_set_result(ctx, 0, ir_binary(ctx->func, op, v[0], v[1]));
  return NULL;
}

static tpurt_status_t lower_bitwise_and(lower_ctx_t* ctx) { return bitwise(ctx, "stablehlo.and"); }
static tpurt_status_t lower_bitwise_or(lower_ctx_t* ctx) { return bitwise(ctx, "stablehlo.or"); }
static tpurt_status_t lower_bitwise_xor(lower_ctx_t* ctx) { return bitwise(ctx, "stablehlo.xor"); }

static tpurt_status_t logical(lower_ctx_t* ctx, const char* op) {
  int32_t idx[2] = {0, 1};
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, TPURT_DTYPE_BOOL, v));
  lower_set_result(ctx, 0, ir_binary(ctx->func, op, v[0], v[1]));
  return NULL;
}

static tpurt_status_t lower_logical_and(lower_ctx_t* ctx) { return logical(ctx, "stablehlo.and"); }
static tpurt_status_t lower_logical_or(lower_ctx_t* ctx) { return logical(ctx, "stablehlo.or"); }
static tpurt_status_t lower_logical_xor(lower_ctx_t* ctx) { return logical(ctx, "stablehlo.xor"); }

static tpurt_status_t lower_logical_not(lower_ctx_t* ctx) {
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_BOOL);
  lower_set_result(ctx, 0, ir_unary(ctx->func, "stablehlo.not", x));
  return NULL;
}

static tpurt_status_t lower_bitwise_not(lower_ctx_t* ctx) {
  if (is_float(lower_meta(ctx, 0)->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"bitwise_not_cpu\" not implemented for '%s'",
                       tpurt_dtype_name(lower_meta(ctx, 0)->dtype));
  lower_set_result(ctx, 0, ir_unary(ctx->func, "stablehlo.not", lower_tensor(ctx, 0)));
  return NULL;
}

/*===--- comparisons ---===*/

static tpurt_status_t compare(lower_ctx_t* ctx, ir_compare_dir_t dir) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  lower_set_result(ctx, 0, ir_compare(ctx->func, dir, v[0], v[1]));
  return NULL;
}

static tpurt_status_t lower_eq(lower_ctx_t* ctx) { return compare(ctx, IR_EQ); }
static tpurt_status_t lower_ne(lower_ctx_t* ctx) { return compare(ctx, IR_NE); }
static tpurt_status_t lower_lt(lower_ctx_t* ctx) { return compare(ctx, IR_LT); }
static tpurt_status_t lower_le(lower_ctx_t* ctx) { return compare(ctx, IR_LE); }
static tpurt_status_t lower_gt(lower_ctx_t* ctx) { return compare(ctx, IR_GT); }
static tpurt_status_t lower_ge(lower_ctx_t* ctx) { return compare(ctx, IR_GE); }

/*===--- where and clamp ---===*/

static tpurt_status_t lower_where(lower_ctx_t* ctx) {
  int32_t vals[2] = {1, 2};
  tpurt_dtype_t dt = lower_result_type(ctx, vals, 2);
  const tpurt_tensor_t* c = lower_meta(ctx, 0);
  if (c->dtype != TPURT_DTYPE_BOOL && c->dtype != TPURT_DTYPE_U8)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "where expected condition to be a boolean tensor, but got a tensor with dtype %s",
                       tpurt_dtype_name(c->dtype));
  int32_t idx[3] = {0, 1, 2};
  int32_t rank = 0;
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t k = 0; k < 3; ++k) {
    const tpurt_tensor_t* t = lower_meta(ctx, idx[k]);
    if (t) TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, t->rank, t->sizes, &rank, dims));
  }
  ir_value_t cond =
      lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_BOOL), rank, dims);
  ir_value_t v[2];
  for (int32_t k = 0; k < 2; ++k) {
    ir_value_t x = lower_meta(ctx, vals[k]) ? lower_cast(ctx, lower_tensor(ctx, vals[k]), dt)
                                            : lower_scalar(ctx, vals[k], dt);
    v[k] = lower_broadcast_to(ctx, x, rank, dims);
  }
  lower_set_result(ctx, 0, ir_select(ctx->func, cond, v[0], v[1]));
  return NULL;
}

/* clamp(self, min=None, max=None): Scalar and Tensor overloads. */
static tpurt_status_t lower_clamp(lower_ctx_t* ctx) {
  if (lower_is_none(ctx, 1) && lower_is_none(ctx, 2))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.clamp: At least one of 'min' or 'max' must not be None");
  int32_t idx[3] = {0, 1, 2};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 3);
  int32_t rank = 0;
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t k = 0; k < 3; ++k) {
    const tpurt_tensor_t* t = lower_meta(ctx, idx[k]);
    if (t) TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, t->rank, t->sizes, &rank, dims));
  }
  ir_value_t x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), dt), rank, dims);
  for (int32_t k = 1; k <= 2; ++k) {
    if (lower_is_none(ctx, k)) continue;
    ir_value_t b = lower_meta(ctx, k) ? lower_cast(ctx, lower_tensor(ctx, k), dt) : lower_scalar(ctx, k, dt);
    b = lower_broadcast_to(ctx, b, rank, dims);
    x = ir_binary(ctx->func, k == 1 ? "stablehlo.maximum" : "stablehlo.minimum", x, b);
  }
  lower_set_result(ctx, 0, x);
  return NULL;
}

static tpurt_status_t clamp_one(lower_ctx_t* ctx, const char* op) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  lower_set_result(ctx, 0, ir_binary(ctx->func, op, v[0], v[1]));
  return NULL;
}

static tpurt_status_t lower_clamp_min(lower_ctx_t* ctx) { return clamp_one(ctx, "stablehlo.maximum"); }
static tpurt_status_t lower_clamp_max(lower_ctx_t* ctx) { return clamp_one(ctx, "stablehlo.minimum"); }

/*===--- unary math ---===*/

/* Float math: ints and bool become float32 (PyTorch's int-to-float ops);
** half types compute in f32. */
static tpurt_status_t float_unary(lower_ctx_t* ctx, const char* op) {
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  tpurt_dtype_t dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), opmath(dt));
  lower_set_result(ctx, 0, lower_cast(ctx, ir_unary(ctx->func, op, x), dt));
  return NULL;
}

static tpurt_status_t lower_exp(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.exponential"); }
static tpurt_status_t lower_expm1(lower_ctx_t* ctx) {
  return float_unary(ctx, "stablehlo.exponential_minus_one");
}
static tpurt_status_t lower_log(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.log"); }
static tpurt_status_t lower_log1p(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.log_plus_one"); }
static tpurt_status_t lower_sqrt(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.sqrt"); }
static tpurt_status_t lower_rsqrt(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.rsqrt"); }
static tpurt_status_t lower_tanh(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.tanh"); }
static tpurt_status_t lower_sigmoid(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.logistic"); }
static tpurt_status_t lower_sin(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.sine"); }
static tpurt_status_t lower_cos(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.cosine"); }
static tpurt_status_t lower_tan(lower_ctx_t* ctx) { return float_unary(ctx, "stablehlo.tan"); }
static tpurt_status_t lower_erf(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.erf"); }

static tpurt_status_t lower_log2(lower_ctx_t* ctx) {
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  tpurt_dtype_t dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), opmath(dt));
  ir_value_t l = ir_unary(ctx->func, "stablehlo.log", x);
  l = ir_binary(ctx->func, "stablehlo.multiply", l, lower_full_like(ctx, l, 1.0 / M_LN2));
  lower_set_result(ctx, 0, lower_cast(ctx, l, dt));
  return NULL;
}

static tpurt_status_t lower_reciprocal(lower_ctx_t* ctx) {
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  tpurt_dtype_t dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), opmath(dt));
  lower_set_result(
      ctx, 0, lower_cast(ctx, ir_binary(ctx->func, "stablehlo.divide", lower_full_like(ctx, x, 1.0), x), dt));
  return NULL;
}

/* Ops that keep the dtype; floor/ceil/round/trunc are identities on ints. */
static tpurt_status_t same_unary(lower_ctx_t* ctx, const char* op, bool int_identity) {
  ir_value_t x = lower_tensor(ctx, 0);
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  if (!is_float(dt) && int_identity) {
    lower_set_result(ctx, 0, x);
    return NULL;
  }
  if (dt == TPURT_DTYPE_BOOL && strcmp(op, "stablehlo.negate") == 0)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a "
        "mask, use the `~` or `logical_not()` operator instead.");
  if (dt == TPURT_DTYPE_BOOL) {
    lower_set_result(ctx, 0, x); /* abs/sign of bool */
    return NULL;
  }
  lower_set_result(ctx, 0, ir_unary(ctx->func, op, x));
  return NULL;
}

static tpurt_status_t lower_neg(lower_ctx_t* ctx) { return same_unary(ctx, "stablehlo.negate", false); }
static tpurt_status_t lower_abs(lower_ctx_t* ctx) { return same_unary(ctx, "stablehlo.abs", false); }
static tpurt_status_t lower_sign(lower_ctx_t* ctx) { return same_unary(ctx, "stablehlo.sign", false); }
static tpurt_status_t lower_floor(lower_ctx_t* ctx) { return same_unary(ctx, "stablehlo.floor", true); }
static tpurt_status_t lower_ceil(lower_ctx_t* ctx) { return same_unary(ctx, "stablehlo.ceil", true); }
static tpurt_status_t lower_round(lower_ctx_t* ctx) {
  return same_unary(ctx, "stablehlo.round_nearest_even", true);
}

static tpurt_status_t lower_trunc(lower_ctx_t* ctx) {
  ir_value_t x = lower_tensor(ctx, 0);
  lower_set_result(ctx, 0, is_float(lower_meta(ctx, 0)->dtype) ? trunc_value(ctx, x) : x);
  return NULL;
}

static tpurt_status_t classify(lower_ctx_t* ctx, int which) {
  ir_value_t x = lower_tensor(ctx, 0);
  ir_func_t* f = ctx->func;
  if (!is_float(lower_meta(ctx, 0)->dtype)) { /* ints are finite, never nan */
    lower_set_result(ctx, 0, ir_compare(f, which == 2 ? IR_EQ : IR_NE, x, x));
    return NULL;
  }
  ir_value_t r;
  if (which == 0) {
    r = ir_compare(f, IR_NE, x, x); /* isnan */
  } else if (which == 1) {          /* isinf: |x| == inf */
    r = ir_compare(f, IR_EQ, ir_unary(f, "stablehlo.abs", x), lower_full_like(ctx, x, INFINITY));
  } else {
    r = ir_is_finite(f, x);
  }
  lower_set_result(ctx, 0, r);
  return NULL;
}

static tpurt_status_t lower_isnan(lower_ctx_t* ctx) { return classify(ctx, 0); }
static tpurt_status_t lower_isinf(lower_ctx_t* ctx) { return classify(ctx, 1); }
static tpurt_status_t lower_isfinite(lower_ctx_t* ctx) { return classify(ctx, 2); }

/*===--- more unary math: inverse and hyperbolic trig, erfinv, exp2, log10, sgn, frac ---===*/

static ir_value_t k(lower_ctx_t* ctx, ir_value_t like, double v) { return lower_full_like(ctx, like, v); }
static ir_value_t bin(lower_ctx_t* ctx, const char* op, ir_value_t a, ir_value_t b) {
  return ir_binary(ctx->func, op, a, b);
}
static ir_value_t mul(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return bin(ctx, "stablehlo.multiply", a, b);
}
static ir_value_t sub(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return bin(ctx, "stablehlo.subtract", a, b);
}
static ir_value_t un(lower_ctx_t* ctx, const char* op, ir_value_t x) { return ir_unary(ctx->func, op, x); }
/* Reads self in its compute type; the result dtype is self's. */
static ir_value_t self_acc(lower_ctx_t* ctx, tpurt_dtype_t* dt) {
  *dt = lower_meta(ctx, 0)->dtype;
  return lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(*dt));
}

/* Ints and bool become float32; half types compute in f32. */
static ir_value_t float_self(lower_ctx_t* ctx, tpurt_dtype_t* dt) {
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  *dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  return lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(*dt));
}

static tpurt_status_t lower_asin(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.asin"); }
static tpurt_status_t lower_acos(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.acos"); }
static tpurt_status_t lower_atan(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.atan"); }
static tpurt_status_t lower_sinh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.sinh"); }
static tpurt_status_t lower_cosh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.cosh"); }
static tpurt_status_t lower_asinh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.asinh"); }
static tpurt_status_t lower_acosh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.acosh"); }
static tpurt_status_t lower_atanh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.atanh"); }
static tpurt_status_t lower_erfinv(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.erf_inv"); }

static tpurt_status_t lower_exp2(lower_ctx_t* ctx) {
  tpurt_dtype_t dt;
  ir_value_t x = float_self(ctx, &dt);
  lower_set_result(ctx, 0, lower_cast(ctx, bin(ctx, "stablehlo.power", k(ctx, x, 2.0), x), dt));
  return NULL;
}

static tpurt_status_t lower_log10(lower_ctx_t* ctx) {
  tpurt_dtype_t dt;
  ir_value_t x = float_self(ctx, &dt);
  ir_value_t y = mul(ctx, un(ctx, "stablehlo.log", x), k(ctx, x, 1.0 / M_LN10));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

/* sgn (real): (x > 0) - (x < 0), so nan and -0 give 0; bool is itself. */
static tpurt_status_t lower_sgn(lower_ctx_t* ctx) {
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_tensor(ctx, 0);
  if (dt == TPURT_DTYPE_BOOL) {
    lower_set_result(ctx, 0, x);
    return NULL;
  }
  if (!is_float(dt)) {
    lower_set_result(ctx, 0, un(ctx, "stablehlo.sign", x));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  ir_value_t zero = k(ctx, x, 0.0), one = k(ctx, x, 1.0);
  ir_value_t pos = ir_select(f, ir_compare(f, IR_GT, x, zero), one, zero);
  ir_value_t neg = ir_select(f, ir_compare(f, IR_LT, x, zero), one, zero);
  lower_set_result(ctx, 0, sub(ctx, pos, neg));
  return NULL;
}

/* frac(x) = x - trunc(x); floats only, as on CPU. */
static tpurt_status_t lower_frac(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, "frac_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  lower_set_result(ctx, 0, lower_cast(ctx, sub(ctx, x, trunc_value(ctx, x)), dt));
  return NULL;
}

/*===--- isneginf / isposinf (pieces of PyTorch's _safe_softmax) ---===*/

/* isneginf / isposinf: ints never are. */
static tpurt_status_t is_signed_inf(lower_ctx_t* ctx, double inf) {
  ir_value_t x = lower_tensor(ctx, 0);
  if (!is_float(lower_meta(ctx, 0)->dtype)) {
    lower_set_result(ctx, 0, ir_compare(ctx->func, IR_NE, x, x));
    return NULL;
  }
  lower_set_result(ctx, 0, ir_compare(ctx->func, IR_EQ, x, k(ctx, x, inf)));
  return NULL;
}

static tpurt_status_t lower_isneginf(lower_ctx_t* ctx) { return is_signed_inf(ctx, -INFINITY); }
static tpurt_status_t lower_isposinf(lower_ctx_t* ctx) { return is_signed_inf(ctx, INFINITY); }

/* Sorted by name. In-place forms (add_.Tensor...) resolve to these rows. */
const lower_rule_t lower_elementwise_rules[] = {
    LOWER_FN("aten::abs", lower_abs),
    LOWER_OUT_FN("aten::abs.out", lower_abs),
    LOWER_FN("aten::add.Scalar", lower_add),
    LOWER_FN("aten::add.Tensor", lower_add),
    LOWER_OUT_FN("aten::add.out", lower_add),
    LOWER_FN("aten::atan2", lower_atan2),
    LOWER_FN("aten::bitwise_and.Scalar", lower_bitwise_and),
    LOWER_FN("aten::bitwise_and.Tensor", lower_bitwise_and),
    LOWER_FN("aten::bitwise_not", lower_bitwise_not),
    LOWER_FN("aten::bitwise_or.Scalar", lower_bitwise_or),
    LOWER_FN("aten::bitwise_or.Tensor", lower_bitwise_or),
    LOWER_FN("aten::bitwise_xor.Scalar", lower_bitwise_xor),
    LOWER_FN("aten::bitwise_xor.Tensor", lower_bitwise_xor),
    LOWER_FN("aten::ceil", lower_ceil),
    LOWER_FN("aten::clamp", lower_clamp),
    LOWER_FN("aten::clamp.Tensor", lower_clamp),
    LOWER_OUT_FN("aten::clamp.out", lower_clamp),
    LOWER_FN("aten::clamp_max", lower_clamp_max),
    LOWER_FN("aten::clamp_max.Tensor", lower_clamp_max),
    LOWER_FN("aten::clamp_min", lower_clamp_min),
    LOWER_FN("aten::clamp_min.Tensor", lower_clamp_min),
    LOWER_FN("aten::cos", lower_cos),
    LOWER_FN("aten::div.Scalar", lower_div),
    LOWER_FN("aten::div.Scalar_mode", lower_div_mode),
    LOWER_FN("aten::div.Tensor", lower_div),
    LOWER_FN("aten::div.Tensor_mode", lower_div_mode),
    LOWER_OUT_FN("aten::div.out", lower_div),
    LOWER_FN("aten::eq.Scalar", lower_eq),
    LOWER_FN("aten::eq.Tensor", lower_eq),
    LOWER_FN("aten::erf", lower_erf),
    LOWER_FN("aten::exp", lower_exp),
    LOWER_OUT_FN("aten::exp.out", lower_exp),
    LOWER_FN("aten::expm1", lower_expm1),
    LOWER_FN("aten::floor", lower_floor),
    LOWER_FN("aten::floor_divide", lower_floor_divide),
    LOWER_FN("aten::floor_divide.Scalar", lower_floor_divide),
    LOWER_FN("aten::fmod.Scalar", lower_fmod),
    LOWER_FN("aten::fmod.Tensor", lower_fmod),
    LOWER_FN("aten::ge.Scalar", lower_ge),
    LOWER_FN("aten::ge.Tensor", lower_ge),
    LOWER_FN("aten::gt.Scalar", lower_gt),
    LOWER_FN("aten::gt.Tensor", lower_gt),
    LOWER_FN("aten::isfinite", lower_isfinite),
    LOWER_FN("aten::isinf", lower_isinf),
    LOWER_FN("aten::isnan", lower_isnan),
    LOWER_FN("aten::le.Scalar", lower_le),
    LOWER_FN("aten::le.Tensor", lower_le),
    LOWER_FN("aten::log", lower_log),
    LOWER_OUT_FN("aten::log.out", lower_log),
    LOWER_FN("aten::log1p", lower_log1p),
    LOWER_FN("aten::log2", lower_log2),
    LOWER_FN("aten::logical_and", lower_logical_and),
    LOWER_FN("aten::logical_not", lower_logical_not),
    LOWER_FN("aten::logical_or", lower_logical_or),
    LOWER_FN("aten::logical_xor", lower_logical_xor),
    LOWER_FN("aten::lt.Scalar", lower_lt),
    LOWER_FN("aten::lt.Tensor", lower_lt),
    LOWER_FN("aten::maximum", lower_maximum),
    LOWER_FN("aten::minimum", lower_minimum),
    LOWER_FN("aten::mul.Scalar", lower_mul),
    LOWER_FN("aten::mul.Tensor", lower_mul),
    LOWER_OUT_FN("aten::mul.out", lower_mul),
    LOWER_FN("aten::ne.Scalar", lower_ne),
    LOWER_FN("aten::ne.Tensor", lower_ne),
    LOWER_FN("aten::neg", lower_neg),
    LOWER_OUT_FN("aten::neg.out", lower_neg),
    LOWER_FN("aten::pow.Scalar", lower_pow),
    LOWER_FN("aten::pow.Tensor_Scalar", lower_pow),
    LOWER_FN("aten::pow.Tensor_Tensor", lower_pow),
    LOWER_FN("aten::reciprocal", lower_reciprocal),
    LOWER_FN("aten::remainder.Scalar", lower_remainder),
    LOWER_FN("aten::remainder.Scalar_Tensor", lower_remainder),
    LOWER_FN("aten::remainder.Tensor", lower_remainder),
    LOWER_FN("aten::round", lower_round),
    LOWER_FN("aten::rsqrt", lower_rsqrt),
    LOWER_FN("aten::rsub.Scalar", lower_rsub),
    LOWER_FN("aten::rsub.Tensor", lower_rsub),
    LOWER_FN("aten::sigmoid", lower_sigmoid),
    LOWER_FN("aten::sign", lower_sign),
    LOWER_FN("aten::sin", lower_sin),
    LOWER_FN("aten::sqrt", lower_sqrt),
    LOWER_OUT_FN("aten::sqrt.out", lower_sqrt),
    LOWER_FN("aten::sub.Scalar", lower_sub),
    LOWER_FN("aten::sub.Tensor", lower_sub),
    LOWER_OUT_FN("aten::sub.out", lower_sub),
    LOWER_FN("aten::tan", lower_tan),
    LOWER_FN("aten::tanh", lower_tanh),
    LOWER_OUT_FN("aten::tanh.out", lower_tanh),
    LOWER_FN("aten::trunc", lower_trunc),
    LOWER_FN("aten::where.self", lower_where),
    LOWER_OUT_FN("aten::where.self_out", lower_where),
    LOWER_FN("aten::acos", lower_acos),
    LOWER_FN("aten::acosh", lower_acosh),
    LOWER_FN("aten::asin", lower_asin),
    LOWER_FN("aten::asinh", lower_asinh),
    LOWER_FN("aten::atan", lower_atan),
    LOWER_FN("aten::atanh", lower_atanh),
    LOWER_FN("aten::cosh", lower_cosh),
    LOWER_FN("aten::erfinv", lower_erfinv),
    LOWER_FN("aten::exp2", lower_exp2),
    LOWER_FN("aten::frac", lower_frac),
    LOWER_FN("aten::isneginf", lower_isneginf),
    LOWER_FN("aten::isposinf", lower_isposinf),
    LOWER_FN("aten::log10", lower_log10),
    LOWER_FN("aten::sgn", lower_sgn),
    LOWER_FN("aten::sinh", lower_sinh),
    LOWER_END,
};
