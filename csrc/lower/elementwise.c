/* elementwise.c: arithmetic, comparison, logical and unary math ops, with
** PyTorch's type promotion and broadcasting. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/*===--- operands ---===*/

/* Reads schema args |idx| (tensors or numbers) as values of |dtype|, all
** broadcast to their common shape. */
static TPURT_MUST_USE tpurt_status_t operands(lower_ctx_t* ctx, const int32_t* idx, int32_t n,
                                              tpurt_dtype_t dtype, ir_value_t* out) {
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

/* Floats and complex: the types whose math is not integer math (true
** division, exp, ...; StableHLO's unary math takes complex operands too). */
static bool is_float(tpurt_dtype_t d) { return tpurt_dtype_is_float(d) || tpurt_dtype_is_complex(d); }

/* Math in f32 for half and float8 types, as PyTorch's CPU kernels do
** (opmath); results go back through lower_cast, which saturates e4m3fn. */
static tpurt_dtype_t opmath(tpurt_dtype_t d) {
  return tpurt_dtype_is_float8(d) ? TPURT_DTYPE_F32 : lower_acc_dtype(d);
}

/*===--- binary arithmetic ---===*/

/* float8 arithmetic computes in f32 and rounds through the saturating cast,
** as PyTorch's CPU kernels do: an e4m3fn product past 448 is 448, where
** XLA's float8 math rounds it to NaN. Other types compute as they are
** (half types round the same either way for add/sub/mul). */
static tpurt_dtype_t f8_math(tpurt_dtype_t d) { return tpurt_dtype_is_float8(d) ? TPURT_DTYPE_F32 : d; }

static TPURT_MUST_USE tpurt_status_t arith(lower_ctx_t* ctx) {
  ir_op_t op = lower_rule_op(ctx);
  int32_t alpha_arg = lower_rule_data(ctx)->arg;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (dt == TPURT_DTYPE_BOOL && op == IR_OP_SUBTRACT)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
        "`logical_xor()` operator instead.");
  tpurt_dtype_t math = f8_math(dt);
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  if (alpha_arg >= 0 && !lower_is_none(ctx, alpha_arg) && !lower_scalar_is(ctx, alpha_arg, 1.0)) {
    if (!is_float(dt) && is_float(lower_arg(ctx, alpha_arg)->u.scalar.dtype))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "For integral input tensors, argument alpha must not be a floating point number.");
    ir_value_t alpha =
        lower_broadcast_to(ctx, lower_scalar(ctx, alpha_arg, math), ir_value_type(ctx->func, v[1])->rank,
                           ir_value_type(ctx->func, v[1])->dims);
    v[1] = ir_binary(ctx->func, dt == TPURT_DTYPE_BOOL ? IR_OP_AND : IR_OP_MULTIPLY, v[1], alpha);
  }
  ir_value_t r;
  if (op == IR_OP_MAXIMUM || op == IR_OP_MINIMUM) {
    r = lower_max_min(ctx, op, v[0], v[1]);
  } else {
    if (dt == TPURT_DTYPE_BOOL) op = op == IR_OP_ADD ? IR_OP_OR : IR_OP_AND;
    r = ir_binary(ctx->func, op, v[0], v[1]);
  }
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

/* rsub(self, other, alpha) = other - alpha * self */
static TPURT_MUST_USE tpurt_status_t lower_rsub(lower_ctx_t* ctx) {
  int32_t idx[2] = {1, 0};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2), math = f8_math(dt);
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  if (!lower_is_none(ctx, 2) && !lower_scalar_is(ctx, 2, 1.0)) {
    const ir_type_t* t = ir_value_type(ctx->func, v[1]);
    v[1] = ir_mul(ctx->func, v[1], lower_broadcast_to(ctx, lower_scalar(ctx, 2, math), t->rank, t->dims));
  }
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, ir_sub(ctx->func, v[0], v[1]), dt));
  return NULL;
}

/* trunc(x) = x < 0 ? ceil(x) : floor(x); StableHLO has no trunc op. */
static ir_value_t trunc_value(lower_ctx_t* ctx, ir_value_t x) {
  ir_value_t neg = ir_compare(ctx->func, IR_LT, x, ir_const_like(ctx->func, x, 0.0));
  return ir_select(ctx->func, neg, ir_unary(ctx->func, IR_OP_CEIL, x), ir_unary(ctx->func, IR_OP_FLOOR, x));
}

/* Integer floor division: truncating division, minus one where the signs
** differ and the division was inexact. */
static ir_value_t int_floor_div(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  ir_value_t q = ir_div(f, a, b);
  ir_value_t r = ir_binary(f, IR_OP_REMAINDER, a, b);
  ir_value_t zero = ir_const_like(f, a, 0.0);
  ir_value_t inexact = ir_compare(f, IR_NE, r, zero);
  ir_value_t signs = ir_compare(f, IR_NE, ir_compare(f, IR_LT, a, zero), ir_compare(f, IR_LT, b, zero));
  ir_value_t fix = ir_and(f, inexact, signs);
  return ir_select(f, fix, ir_sub(f, q, ir_const_like(f, q, 1.0)), q);
}

/* Complex true division (a + bi) / (c + di) by Smith's scaling, the
** algorithm of PyTorch's scalar complex division: the larger of |c|, |d|
** divides first, and a zero divisor gives a / |c| + (b / |d|) i (inf or nan
** parts, as on the CPU). Written out on the parts, so that the result does
** not depend on how XLA divides complex values: its runtime and its constant
** folder disagree on a divisor known to be zero (inf + inf i against
** nan + nan i), which made fused eager differ from strict. */
static ir_value_t complex_divide(lower_ctx_t* ctx, ir_value_t x, ir_value_t y) {
  ir_func_t* f = ctx->func;
  ir_value_t a = ir_complex_part(f, IR_OP_REAL, x), b = ir_complex_part(f, IR_OP_IMAG, x);
  ir_value_t c = ir_complex_part(f, IR_OP_REAL, y), d = ir_complex_part(f, IR_OP_IMAG, y);
  ir_value_t abs_c = ir_abs(f, c), abs_d = ir_abs(f, d);
  ir_value_t one = ir_const_like(f, c, 1.0), zero = ir_const_like(f, c, 0.0);
  /* |c| >= |d|: rat = d / c, scl = 1 / (c + d rat) */
  ir_value_t rat1 = ir_div(f, d, c), scl1 = ir_div(f, one, ir_add(f, c, ir_mul(f, d, rat1)));
  ir_value_t re1 = ir_mul(f, ir_add(f, a, ir_mul(f, b, rat1)), scl1),
             im1 = ir_mul(f, ir_sub(f, b, ir_mul(f, a, rat1)), scl1);
  /* |c| < |d|: rat = c / d, scl = 1 / (d + c rat) */
  ir_value_t rat2 = ir_div(f, c, d), scl2 = ir_div(f, one, ir_add(f, d, ir_mul(f, c, rat2)));
  ir_value_t re2 = ir_mul(f, ir_add(f, ir_mul(f, a, rat2), b), scl2),
             im2 = ir_mul(f, ir_sub(f, ir_mul(f, b, rat2), a), scl2);
  /* both zero */
  ir_value_t re0 = ir_div(f, a, abs_c), im0 = ir_div(f, b, abs_d);
  ir_value_t c_wins = ir_compare(f, IR_GE, abs_c, abs_d);
  ir_value_t both_zero = ir_and(f, ir_compare(f, IR_EQ, abs_c, zero), ir_compare(f, IR_EQ, abs_d, zero));
  ir_value_t re = ir_select(f, c_wins, ir_select(f, both_zero, re0, re1), re2);
  ir_value_t im = ir_select(f, c_wins, ir_select(f, both_zero, im0, im1), im2);
  return ir_complex(f, re, im);
}

/* div(self, other, rounding_mode=None|"trunc"|"floor") */
static TPURT_MUST_USE tpurt_status_t div_mode(lower_ctx_t* ctx, const char* mode) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (!mode && !is_float(dt)) dt = LOWER_DEFAULT_FLOAT; /* true division */
  tpurt_dtype_t math = is_float(dt) ? opmath(dt) : dt;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  ir_value_t q;
  if (!mode && tpurt_dtype_is_complex(math)) {
    q = complex_divide(ctx, v[0], v[1]);
  } else if (!mode) {
    q = ir_div(ctx->func, v[0], v[1]);
  } else if (strcmp(mode, "trunc") == 0) {
    q = ir_div(ctx->func, v[0], v[1]);
    if (is_float(math)) q = trunc_value(ctx, q);
  } else if (strcmp(mode, "floor") == 0) {
    q = is_float(math) ? ir_unary(ctx->func, IR_OP_FLOOR, ir_div(ctx->func, v[0], v[1]))
                       : int_floor_div(ctx, v[0], v[1]);
  } else {
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'",
                       mode);
  }
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, q, dt));
  return NULL;
}

/* div_mode with the row's constant (LOWER_*_WITH rows). */
static TPURT_MUST_USE tpurt_status_t div_mode_row(lower_ctx_t* ctx) {
  return div_mode(ctx, lower_rule_str(ctx));
}

static TPURT_MUST_USE tpurt_status_t lower_div_mode(lower_ctx_t* ctx) {
  return div_mode(ctx, lower_str(ctx, 2, NULL));
}

/* remainder: Python's modulo (sign of the divisor); fmod: C's (sign of the
** dividend). */
static TPURT_MUST_USE tpurt_status_t modulo(lower_ctx_t* ctx) {
  bool python = lower_rule_data(ctx)->flag;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  tpurt_dtype_t math = is_float(dt) ? opmath(dt) : dt;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  ir_func_t* f = ctx->func;
  ir_value_t r = ir_binary(f, IR_OP_REMAINDER, v[0], v[1]);
  if (python) {
    ir_value_t zero = ir_const_like(f, r, 0.0);
    ir_value_t nonzero = ir_compare(f, IR_NE, r, zero);
    ir_value_t signs = ir_compare(f, IR_NE, ir_compare(f, IR_LT, r, zero), ir_compare(f, IR_LT, v[1], zero));
    r = ir_select(f, ir_and(f, nonzero, signs), ir_add(f, r, v[1]), r);
  }
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

/* x ** y. A Python-number exponent of 1, 2, 3, 0.5, -0.5, -1 or -2 is
** spelled as PyTorch's CPU kernel does it (copy, x*x, x*x*x, sqrt, rsqrt,
** 1/x, 1/(x*x)): cheaper than XLA's general power, which calls powf per
** element, and bit for bit what CPU gives. */
static ir_value_t power(lower_ctx_t* ctx, ir_value_t x, ir_value_t y, bool float_math) {
  ir_func_t* f = ctx->func;
  if (lower_meta(ctx, 1)) return ir_pow(f, x, y);
  if (lower_scalar_is(ctx, 1, 1.0)) return x;
  if (lower_scalar_is(ctx, 1, 2.0)) return ir_mul(f, x, x);
  if (lower_scalar_is(ctx, 1, 3.0)) return ir_mul(f, ir_mul(f, x, x), x);
  if (!float_math) return ir_pow(f, x, y);
  if (lower_scalar_is(ctx, 1, 0.5)) return ir_sqrt(f, x);
  if (lower_scalar_is(ctx, 1, -0.5)) return ir_rsqrt(f, x);
  if (lower_scalar_is(ctx, 1, -1.0)) return ir_div(f, ir_const_like(f, x, 1.0), x);
  if (lower_scalar_is(ctx, 1, -2.0)) return ir_div(f, ir_const_like(f, x, 1.0), ir_mul(f, x, x));
  return ir_pow(f, x, y);
}

static TPURT_MUST_USE tpurt_status_t lower_pow(lower_ctx_t* ctx) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  /* PyTorch refuses a negative number exponent of an integer tensor (a
  ** negative exponent in a tensor is data and computes) */
  if (!is_float(dt) && dt != TPURT_DTYPE_BOOL && lower_meta(ctx, 0) && !lower_meta(ctx, 1) &&
      lower_scalar_value(ctx, 1) < 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "Integers to negative integer powers are not allowed.");
  tpurt_dtype_t math = is_float(dt) ? opmath(dt) : dt;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, power(ctx, v[0], v[1], is_float(dt)), dt));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_atan2(lower_ctx_t* ctx) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (!is_float(dt)) dt = LOWER_DEFAULT_FLOAT;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, opmath(dt), v));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, ir_binary(ctx->func, IR_OP_ATAN2, v[0], v[1]), dt));
  return NULL;
}

/*===--- bitwise and logical ---===*/

static TPURT_MUST_USE tpurt_status_t bitwise(lower_ctx_t* ctx) {
  ir_op_t op = lower_rule_op(ctx);
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (is_float(dt))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'",
                       strchr(ir_op_name(op), '.') + 1, /* "and": the op's name without its dialect */
                       tpurt_dtype_name(dt));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  lower_set_pointwise_result(ctx, 0, ir_binary(ctx->func, op, v[0], v[1]));
  return NULL;
}

/* bitwise_left_shift / bitwise_right_shift: StableHLO's shifts already give
** what CPU gives for counts outside [0, bits): 0 to the left, the sign bit
** to the right (a count is read as unsigned, so a negative one is huge). */
static TPURT_MUST_USE tpurt_status_t shift(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  bool left = row->flag;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (is_float(dt) || dt == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'",
                       left ? "lshift" : "rshift", tpurt_dtype_name(dt));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  ir_op_t op = left                   ? IR_OP_SHIFT_LEFT
               : dt == TPURT_DTYPE_U8 ? IR_OP_SHIFT_RIGHT_LOGICAL
                                      : IR_OP_SHIFT_RIGHT_ARITHMETIC;
  lower_set_pointwise_result(ctx, 0, ir_binary(ctx->func, op, v[0], v[1]));
  return NULL;
}

/* gcd(a, b): Euclid's algorithm on |a|, |b| as a stablehlo.while that runs
** until every element's remainder is 0 (at most ~92 rounds for int64). */
static ir_value_t gcd_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, a);
  ir_value_t init[2] = {ir_abs(f, a), ir_abs(f, b)}, args[2], out[2];
  int64_t all[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) all[i] = i;
  ir_region_op_t w = ir_while_begin(f, init, 2, args);
  ir_value_t nz = ir_compare(f, IR_NE, args[0], ir_const_like(f, args[0], 0.0));
  ir_value_t any = ir_reduce(f, nz, ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), all, t->rank, IR_REDUCE_OR);
  ir_region_end(f, &any, 1);
  ir_while_body(f, &w, args);
  /* (a, b) -> (b % a, a) where a != 0 */
  ir_value_t live = ir_compare(f, IR_NE, args[0], ir_const_like(f, args[0], 0.0));
  ir_value_t safe = ir_select(f, live, args[0], ir_const_like(f, args[0], 1.0));
  ir_value_t rem = ir_binary(f, IR_OP_REMAINDER, args[1], safe);
  ir_value_t next[2] = {ir_select(f, live, rem, args[0]), ir_select(f, live, args[0], args[1])};
  ir_region_end(f, next, 2);
  ir_while_end(f, &w, out);
  return out[1];
}

static TPURT_MUST_USE tpurt_status_t gcd_lcm(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  bool lcm = row->flag;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (is_float(dt) || dt == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s_cpu\" not implemented for '%s'", lcm ? "lcm" : "gcd",
                       tpurt_dtype_name(dt));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  ir_func_t* f = ctx->func;
  ir_value_t g = gcd_of(ctx, v[0], v[1]);
  if (lcm) { /* |a / g * b|, 0 when g is 0 */
    ir_value_t g0 = ir_compare(f, IR_EQ, g, ir_const_like(f, g, 0.0));
    ir_value_t safe = ir_select(f, g0, ir_const_like(f, g, 1.0), g);
    ir_value_t l = ir_abs(f, ir_mul(f, ir_div(f, v[0], safe), v[1]));
    g = ir_select(f, g0, ir_const_like(f, g, 0.0), l);
  }
  lower_set_pointwise_result(ctx, 0, g);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t logical(lower_ctx_t* ctx) {
  ir_op_t op = lower_rule_op(ctx);
  int32_t idx[2] = {0, 1};
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, TPURT_DTYPE_BOOL, v));
  lower_set_pointwise_result(ctx, 0, ir_binary(ctx->func, op, v[0], v[1]));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_logical_not(lower_ctx_t* ctx) {
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_BOOL);
  lower_set_pointwise_result(ctx, 0, ir_not(ctx->func, x));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_bitwise_not(lower_ctx_t* ctx) {
  if (is_float(lower_meta(ctx, 0)->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"bitwise_not_cpu\" not implemented for '%s'",
                       tpurt_dtype_name(lower_meta(ctx, 0)->dtype));
  lower_set_pointwise_result(ctx, 0, ir_not(ctx->func, lower_tensor(ctx, 0)));
  return NULL;
}

/*===--- comparisons ---===*/

static TPURT_MUST_USE tpurt_status_t compare(lower_ctx_t* ctx) {
  ir_compare_dir_t dir = (ir_compare_dir_t)lower_rule_data(ctx)->kind;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  /* complex numbers have no order; PyTorch has no kernel for it */
  if (tpurt_dtype_is_complex(dt) && dir != IR_EQ && dir != IR_NE)
    return lower_error(TPURT_INVALID_ARGUMENT, "not implemented for %s: complex numbers have no order",
                       lower_dtype_cpp_name(dt));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  lower_set_pointwise_result(ctx, 0, ir_compare(ctx->func, dir, v[0], v[1]));
  return NULL;
}

/*===--- where and clamp ---===*/

static TPURT_MUST_USE tpurt_status_t lower_where(lower_ctx_t* ctx) {
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
  lower_set_pointwise_result(ctx, 0, ir_select(ctx->func, cond, v[0], v[1]));
  return NULL;
}

/* clamp(self, min=None, max=None): Scalar and Tensor overloads. */
static TPURT_MUST_USE tpurt_status_t lower_clamp(lower_ctx_t* ctx) {
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
    x = lower_max_min(ctx, k == 1 ? IR_OP_MAXIMUM : IR_OP_MINIMUM, x, b);
  }
  lower_set_pointwise_result(ctx, 0, x);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t clamp_one(lower_ctx_t* ctx) {
  ir_op_t op = lower_rule_op(ctx);
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  lower_set_pointwise_result(ctx, 0, lower_max_min(ctx, op, v[0], v[1]));
  return NULL;
}

/*===--- unary math ---===*/

/* Float math: ints and bool become float32 (PyTorch's int-to-float ops);
** half types compute in f32. */
static TPURT_MUST_USE tpurt_status_t float_unary(lower_ctx_t* ctx) {
  ir_op_t op = lower_rule_op(ctx);
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  tpurt_dtype_t dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), opmath(dt));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, ir_unary(ctx->func, op, x), dt));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_log2(lower_ctx_t* ctx) {
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  tpurt_dtype_t dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), opmath(dt));
  ir_value_t l = ir_log(ctx->func, x);
  l = ir_mul(ctx->func, l, ir_const_like(ctx->func, l, 1.0 / M_LN2));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, l, dt));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_reciprocal(lower_ctx_t* ctx) {
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  tpurt_dtype_t dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), opmath(dt));
  lower_set_pointwise_result(ctx, 0,
                             lower_cast(ctx, ir_div(ctx->func, ir_const_like(ctx->func, x, 1.0), x), dt));
  return NULL;
}

/* Ops that keep the dtype; floor/ceil/round/trunc are identities on ints. */
static TPURT_MUST_USE tpurt_status_t same_unary(lower_ctx_t* ctx) {
  ir_op_t op = lower_rule_op(ctx);
  bool int_identity = lower_rule_data(ctx)->flag;
  ir_value_t x = lower_tensor(ctx, 0);
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  if (!is_float(dt) && int_identity) {
    lower_set_pointwise_result(ctx, 0, x);
    return NULL;
  }
  if (dt == TPURT_DTYPE_BOOL && op == IR_OP_NEGATE)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a "
        "mask, use the `~` or `logical_not()` operator instead.");
  if (dt == TPURT_DTYPE_BOOL) {
    lower_set_pointwise_result(ctx, 0, x); /* abs/sign of bool */
    return NULL;
  }
  if (tpurt_dtype_is_complex(dt) && op == IR_OP_ABS) { /* |z| is real */
    lower_set_pointwise_result(ctx, 0, ir_complex_part(ctx->func, IR_OP_ABS, x));
    return NULL;
  }
  lower_set_pointwise_result(ctx, 0, ir_unary(ctx->func, op, x));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_trunc(lower_ctx_t* ctx) {
  ir_value_t x = lower_tensor(ctx, 0);
  lower_set_pointwise_result(ctx, 0, is_float(lower_meta(ctx, 0)->dtype) ? trunc_value(ctx, x) : x);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t classify(lower_ctx_t* ctx) {
  int which = lower_rule_data(ctx)->kind;
  ir_value_t x = lower_tensor(ctx, 0);
  ir_func_t* f = ctx->func;
  if (!is_float(lower_meta(ctx, 0)->dtype)) { /* ints are finite, never nan */
    lower_set_pointwise_result(ctx, 0, ir_compare(f, which == 2 ? IR_EQ : IR_NE, x, x));
    return NULL;
  }
  ir_value_t r;
  if (which == 0) {
    r = ir_compare(f, IR_NE, x, x); /* isnan */
  } else if (which == 1) {          /* isinf: |x| == inf */
    r = ir_compare(f, IR_EQ, ir_abs(f, x), ir_const_like(f, x, INFINITY));
  } else {
    r = ir_is_finite(f, x);
  }
  lower_set_pointwise_result(ctx, 0, r);
  return NULL;
}

/*===--- more unary math: inverse and hyperbolic trig, erfinv, exp2, log10, sgn, frac ---===*/

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

static TPURT_MUST_USE tpurt_status_t lower_exp2(lower_ctx_t* ctx) {
  tpurt_dtype_t dt;
  ir_value_t x = float_self(ctx, &dt);
  lower_set_pointwise_result(ctx, 0,
                             lower_cast(ctx, ir_pow(ctx->func, ir_const_like(ctx->func, x, 2.0), x), dt));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_log10(lower_ctx_t* ctx) {
  tpurt_dtype_t dt;
  ir_value_t x = float_self(ctx, &dt);
  ir_value_t y = ir_mul(ctx->func, ir_log(ctx->func, x), ir_const_like(ctx->func, x, 1.0 / M_LN10));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

/* sgn (real): (x > 0) - (x < 0), so nan and -0 give 0; bool is itself. */
static TPURT_MUST_USE tpurt_status_t lower_sgn(lower_ctx_t* ctx) {
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_tensor(ctx, 0);
  if (dt == TPURT_DTYPE_BOOL) {
    lower_set_pointwise_result(ctx, 0, x);
    return NULL;
  }
  if (!is_float(dt)) {
    lower_set_pointwise_result(ctx, 0, ir_unary(ctx->func, IR_OP_SIGN, x));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  ir_value_t zero = ir_const_like(f, x, 0.0), one = ir_const_like(f, x, 1.0);
  ir_value_t pos = ir_select(f, ir_compare(f, IR_GT, x, zero), one, zero);
  ir_value_t neg = ir_select(f, ir_compare(f, IR_LT, x, zero), one, zero);
  lower_set_pointwise_result(ctx, 0, ir_sub(f, pos, neg));
  return NULL;
}

/* frac(x) = x - trunc(x); floats only, as on CPU. */
static TPURT_MUST_USE tpurt_status_t lower_frac(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, "frac_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, ir_sub(ctx->func, x, trunc_value(ctx, x)), dt));
  return NULL;
}

/*===--- isneginf / isposinf (pieces of PyTorch's _safe_softmax) ---===*/

/* isneginf / isposinf: ints never are. */
static TPURT_MUST_USE tpurt_status_t is_signed_inf(lower_ctx_t* ctx) {
  double inf = lower_rule_real(ctx);
  ir_value_t x = lower_tensor(ctx, 0);
  if (!is_float(lower_meta(ctx, 0)->dtype)) {
    lower_set_pointwise_result(ctx, 0, ir_compare(ctx->func, IR_NE, x, x));
    return NULL;
  }
  lower_set_pointwise_result(ctx, 0, ir_compare(ctx->func, IR_EQ, x, ir_const_like(ctx->func, x, inf)));
  return NULL;
}

/* Sorted by name. In-place forms (add_.Tensor...) resolve to these rows. */
const lower_rule_t lower_elementwise_rules[] = {
    LOWER_FN("aten::gcd", gcd_lcm),
    LOWER_OUT_FN("aten::gcd.out", gcd_lcm),
    LOWER_FN_WITH("aten::lcm", gcd_lcm, .flag = true),
    LOWER_OUT_FN_WITH("aten::lcm.out", gcd_lcm, .flag = true),
    LOWER_FN_WITH("aten::bitwise_left_shift.Tensor", shift, .flag = true),
    LOWER_OUT_FN_WITH("aten::bitwise_left_shift.Tensor_out", shift, .flag = true),
    LOWER_FN_WITH("aten::bitwise_left_shift.Tensor_Scalar", shift, .flag = true),
    LOWER_OUT_FN_WITH("aten::bitwise_left_shift.Tensor_Scalar_out", shift, .flag = true),
    LOWER_FN_WITH("aten::bitwise_left_shift.Scalar_Tensor", shift, .flag = true),
    LOWER_OUT_FN_WITH("aten::bitwise_left_shift.Scalar_Tensor_out", shift, .flag = true),
    LOWER_FN_WITH("aten::__lshift__.Tensor", shift, .flag = true),
    LOWER_FN_WITH("aten::__lshift__.Scalar", shift, .flag = true),
    LOWER_FN("aten::bitwise_right_shift.Tensor", shift),
    LOWER_OUT_FN("aten::bitwise_right_shift.Tensor_out", shift),
    LOWER_FN("aten::bitwise_right_shift.Tensor_Scalar", shift),
    LOWER_OUT_FN("aten::bitwise_right_shift.Tensor_Scalar_out", shift),
    LOWER_FN("aten::bitwise_right_shift.Scalar_Tensor", shift),
    LOWER_OUT_FN("aten::bitwise_right_shift.Scalar_Tensor_out", shift),
    LOWER_FN("aten::__rshift__.Tensor", shift),
    LOWER_FN("aten::__rshift__.Scalar", shift),
    LOWER_FN_WITH("aten::abs", same_unary, .op = IR_OP_ABS),
    LOWER_OUT_FN_WITH("aten::abs.out", same_unary, .op = IR_OP_ABS),
    LOWER_FN_WITH("aten::add.Scalar", arith, .op = IR_OP_ADD, .arg = 2),
    LOWER_FN_WITH("aten::add.Tensor", arith, .op = IR_OP_ADD, .arg = 2),
    LOWER_OUT_FN_WITH("aten::add.out", arith, .op = IR_OP_ADD, .arg = 2),
    LOWER_FN("aten::atan2", lower_atan2),
    LOWER_FN_WITH("aten::bitwise_and.Scalar", bitwise, .op = IR_OP_AND),
    LOWER_FN_WITH("aten::bitwise_and.Tensor", bitwise, .op = IR_OP_AND),
    LOWER_FN("aten::bitwise_not", lower_bitwise_not),
    LOWER_FN_WITH("aten::bitwise_or.Scalar", bitwise, .op = IR_OP_OR),
    LOWER_FN_WITH("aten::bitwise_or.Tensor", bitwise, .op = IR_OP_OR),
    LOWER_FN_WITH("aten::bitwise_xor.Scalar", bitwise, .op = IR_OP_XOR),
    LOWER_FN_WITH("aten::bitwise_xor.Tensor", bitwise, .op = IR_OP_XOR),
    LOWER_FN_WITH("aten::ceil", same_unary, .op = IR_OP_CEIL, .flag = true),
    LOWER_FN("aten::clamp", lower_clamp),
    LOWER_FN("aten::clamp.Tensor", lower_clamp),
    LOWER_OUT_FN("aten::clamp.out", lower_clamp),
    LOWER_FN_WITH("aten::clamp_max", clamp_one, .op = IR_OP_MINIMUM),
    LOWER_FN_WITH("aten::clamp_max.Tensor", clamp_one, .op = IR_OP_MINIMUM),
    LOWER_FN_WITH("aten::clamp_min", clamp_one, .op = IR_OP_MAXIMUM),
    LOWER_FN_WITH("aten::clamp_min.Tensor", clamp_one, .op = IR_OP_MAXIMUM),
    LOWER_FN_WITH("aten::cos", float_unary, .op = IR_OP_COSINE),
    LOWER_FN_WITH("aten::div.Scalar", div_mode_row, .str = NULL),
    LOWER_FN_WITH("aten::div.Scalar_mode", lower_div_mode, .division = LOWER_DIVISION_ROUNDED),
    LOWER_FN_WITH("aten::div.Tensor", div_mode_row, .str = NULL),
    LOWER_FN_WITH("aten::div.Tensor_mode", lower_div_mode, .division = LOWER_DIVISION_ROUNDED),
    LOWER_OUT_FN_WITH("aten::div.out", div_mode_row, .str = NULL),
    LOWER_FN_WITH("aten::eq.Scalar", compare, .kind = IR_EQ),
    LOWER_FN_WITH("aten::eq.Tensor", compare, .kind = IR_EQ),
    LOWER_FN_WITH("aten::erf", float_unary, .op = IR_OP_ERF),
    LOWER_FN_WITH("aten::exp", float_unary, .op = IR_OP_EXPONENTIAL),
    LOWER_OUT_FN_WITH("aten::exp.out", float_unary, .op = IR_OP_EXPONENTIAL),
    LOWER_FN_WITH("aten::expm1", float_unary, .op = IR_OP_EXPONENTIAL_MINUS_ONE),
    LOWER_FN_WITH("aten::floor", same_unary, .op = IR_OP_FLOOR, .flag = true),
    LOWER_FN_WITH("aten::floor_divide", div_mode_row, .str = "floor", .division = LOWER_DIVISION_INTEGER),
    LOWER_FN_WITH("aten::floor_divide.Scalar", div_mode_row, .str = "floor",
                  .division = LOWER_DIVISION_INTEGER),
    LOWER_FN_WITH("aten::fmod.Scalar", modulo, .division = LOWER_DIVISION_INTEGER),
    LOWER_FN_WITH("aten::fmod.Tensor", modulo, .division = LOWER_DIVISION_INTEGER),
    LOWER_FN_WITH("aten::ge.Scalar", compare, .kind = IR_GE),
    LOWER_FN_WITH("aten::ge.Tensor", compare, .kind = IR_GE),
    LOWER_FN_WITH("aten::gt.Scalar", compare, .kind = IR_GT),
    LOWER_FN_WITH("aten::gt.Tensor", compare, .kind = IR_GT),
    LOWER_FN_WITH("aten::isfinite", classify, .kind = 2),
    LOWER_FN_WITH("aten::isinf", classify, .kind = 1),
    LOWER_FN_WITH("aten::isnan", classify, .kind = 0),
    LOWER_FN_WITH("aten::le.Scalar", compare, .kind = IR_LE),
    LOWER_FN_WITH("aten::le.Tensor", compare, .kind = IR_LE),
    LOWER_FN_WITH("aten::log", float_unary, .op = IR_OP_LOG),
    LOWER_OUT_FN_WITH("aten::log.out", float_unary, .op = IR_OP_LOG),
    LOWER_FN_WITH("aten::log1p", float_unary, .op = IR_OP_LOG_PLUS_ONE),
    LOWER_FN("aten::log2", lower_log2),
    LOWER_FN_WITH("aten::logical_and", logical, .op = IR_OP_AND),
    LOWER_FN("aten::logical_not", lower_logical_not),
    LOWER_FN_WITH("aten::logical_or", logical, .op = IR_OP_OR),
    LOWER_FN_WITH("aten::logical_xor", logical, .op = IR_OP_XOR),
    LOWER_FN_WITH("aten::lt.Scalar", compare, .kind = IR_LT),
    LOWER_FN_WITH("aten::lt.Tensor", compare, .kind = IR_LT),
    LOWER_OUT_FN_WITH("aten::max.out", arith, .op = IR_OP_MAXIMUM, .arg = -1), /* max(a, b, out=) */
    LOWER_FN_WITH("aten::maximum", arith, .op = IR_OP_MAXIMUM, .arg = -1),
    LOWER_OUT_FN_WITH("aten::min.out", arith, .op = IR_OP_MINIMUM, .arg = -1), /* min(a, b, out=) */
    LOWER_FN_WITH("aten::minimum", arith, .op = IR_OP_MINIMUM, .arg = -1),
    LOWER_FN_WITH("aten::mul.Scalar", arith, .op = IR_OP_MULTIPLY, .arg = -1),
    LOWER_FN_WITH("aten::mul.Tensor", arith, .op = IR_OP_MULTIPLY, .arg = -1),
    LOWER_OUT_FN_WITH("aten::mul.out", arith, .op = IR_OP_MULTIPLY, .arg = -1),
    LOWER_FN_WITH("aten::ne.Scalar", compare, .kind = IR_NE),
    LOWER_FN_WITH("aten::ne.Tensor", compare, .kind = IR_NE),
    LOWER_FN_WITH("aten::neg", same_unary, .op = IR_OP_NEGATE),
    LOWER_OUT_FN_WITH("aten::neg.out", same_unary, .op = IR_OP_NEGATE),
    LOWER_FN("aten::pow.Scalar", lower_pow),
    LOWER_FN("aten::pow.Tensor_Scalar", lower_pow),
    LOWER_FN("aten::pow.Tensor_Tensor", lower_pow),
    LOWER_FN("aten::reciprocal", lower_reciprocal),
    LOWER_FN_WITH("aten::remainder.Scalar", modulo, .flag = true, .division = LOWER_DIVISION_INTEGER),
    LOWER_FN_WITH("aten::remainder.Scalar_Tensor", modulo, .flag = true, .division = LOWER_DIVISION_INTEGER),
    LOWER_FN_WITH("aten::remainder.Tensor", modulo, .flag = true, .division = LOWER_DIVISION_INTEGER),
    LOWER_FN_WITH("aten::round", same_unary, .op = IR_OP_ROUND_NEAREST_EVEN, .flag = true),
    LOWER_FN_WITH("aten::rsqrt", float_unary, .op = IR_OP_RSQRT),
    LOWER_FN("aten::rsub.Scalar", lower_rsub),
    LOWER_FN("aten::rsub.Tensor", lower_rsub),
    LOWER_FN_WITH("aten::sigmoid", float_unary, .op = IR_OP_LOGISTIC),
    LOWER_FN_WITH("aten::sign", same_unary, .op = IR_OP_SIGN),
    LOWER_FN_WITH("aten::sin", float_unary, .op = IR_OP_SINE),
    LOWER_FN_WITH("aten::sqrt", float_unary, .op = IR_OP_SQRT),
    LOWER_OUT_FN_WITH("aten::sqrt.out", float_unary, .op = IR_OP_SQRT),
    LOWER_FN_WITH("aten::sub.Scalar", arith, .op = IR_OP_SUBTRACT, .arg = 2),
    LOWER_FN_WITH("aten::sub.Tensor", arith, .op = IR_OP_SUBTRACT, .arg = 2),
    LOWER_OUT_FN_WITH("aten::sub.out", arith, .op = IR_OP_SUBTRACT, .arg = 2),
    LOWER_FN_WITH("aten::tan", float_unary, .op = IR_OP_TAN),
    LOWER_FN_WITH("aten::tanh", float_unary, .op = IR_OP_TANH),
    LOWER_OUT_FN_WITH("aten::tanh.out", float_unary, .op = IR_OP_TANH),
    LOWER_FN("aten::trunc", lower_trunc),
    LOWER_FN("aten::where.self", lower_where),
    LOWER_OUT_FN("aten::where.self_out", lower_where),
    LOWER_FN_WITH("aten::acos", float_unary, .op = IR_OP_ACOS),
    LOWER_FN_WITH("aten::acosh", float_unary, .op = IR_OP_ACOSH),
    LOWER_FN_WITH("aten::asin", float_unary, .op = IR_OP_ASIN),
    LOWER_FN_WITH("aten::asinh", float_unary, .op = IR_OP_ASINH),
    LOWER_FN_WITH("aten::atan", float_unary, .op = IR_OP_ATAN),
    LOWER_FN_WITH("aten::atanh", float_unary, .op = IR_OP_ATANH),
    LOWER_FN_WITH("aten::cosh", float_unary, .op = IR_OP_COSH),
    LOWER_FN_WITH("aten::erfinv", float_unary, .op = IR_OP_ERF_INV),
    LOWER_FN("aten::exp2", lower_exp2),
    LOWER_FN("aten::frac", lower_frac),
    LOWER_FN_WITH("aten::isneginf", is_signed_inf, .real = -INFINITY),
    LOWER_FN_WITH("aten::isposinf", is_signed_inf, .real = INFINITY),
    LOWER_FN("aten::log10", lower_log10),
    LOWER_FN("aten::sgn", lower_sgn),
    LOWER_FN_WITH("aten::sinh", float_unary, .op = IR_OP_SINH),
    LOWER_END,
};
