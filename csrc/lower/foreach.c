/* foreach.c: the _foreach_* ops the optimizers call (one program over the
** whole list, one result per item; the in-place _foreach_*_ forms write the
** results back into the list), and the single-tensor addcmul, addcdiv and
** lerp. Half types compute in f32 and round once, as PyTorch's CPU kernels.
**
** An operand of item k is: item k of a Tensor[] arg, a shared Tensor arg
** (a 0-d tensor), a Scalar (one runtime parameter shared by every item), or
** item k of a Scalar[] arg (a FLOAT_LIST: one runtime parameter per item,
** so a changing learning rate or bias correction never recompiles). */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

enum {
  OP_ADD,
  OP_SUB,
  OP_MUL,
  OP_DIV,
  OP_MAXIMUM,
  OP_MINIMUM,
  OP_POW,
  OP_ADDCMUL,
  OP_ADDCDIV,
  OP_LERP,
  /* unary */
  OP_SQRT,
  OP_RSQRT,
  OP_NEG,
  OP_RECIPROCAL,
  OP_EXP,
  OP_LOG,
  OP_ABS,
  OP_SIGN,
  OP_SIGMOID,
  OP_ZERO,
};

/* How many tensor-like operands each op reads (the coefficient, alpha /
** value / weight, comes on top). */
static int32_t op_arity(int op) {
  switch (op) {
    case OP_ADDCMUL:
    case OP_ADDCDIV:
      return 3;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_MAXIMUM:
    case OP_MINIMUM:
    case OP_POW:
    case OP_LERP:
      return 2;
    default:
      return 1;
  }
}

/*===--- operands ---===*/

typedef struct foreach_s {
  lower_ctx_t* ctx;
  int32_t len; /* list length */
  /* Shared Scalar parameters, one per (schema arg, dtype). */
  ir_value_t scalars[LOWER_MAX_ARGS][TPURT_DTYPE_COUNT];
} foreach_t;

static bool is_number(const tpurt_arg_t* a) {
  return a->kind == TPURT_ARG_SCALAR || a->kind == TPURT_ARG_FLOAT || a->kind == TPURT_ARG_INT ||
         a->kind == TPURT_ARG_BOOL;
}

/* The dtype and tier of operand |i| for item |k| (PyTorch's three tiers). */
static void operand_type(const lower_ctx_t* ctx, int32_t i, int32_t k, tpurt_dtype_t* dtype, int* tier) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  const tpurt_tensor_t* t = NULL;
  if (a->kind == TPURT_ARG_TENSOR_LIST) t = lower_list_meta(ctx, i, k);
  if (a->kind == TPURT_ARG_TENSOR) t = &a->u.tensor;
  if (t) {
    *dtype = t->dtype;
    *tier = t->rank == 0 ? TPURT_TIER_ZERO_DIM : TPURT_TIER_TENSOR;
    return;
  }
  if (a->kind == TPURT_ARG_FLOAT_LIST) { /* Scalar[] items are Python numbers */
    *dtype = LOWER_DEFAULT_FLOAT;
    *tier = TPURT_TIER_WRAPPED;
  } else if (a->kind == TPURT_ARG_SCALAR || a->kind == TPURT_ARG_FLOAT) {
    *dtype = a->u.scalar.dtype;
    *tier = a->u.scalar.tier == TPURT_TIER_TENSOR ? TPURT_TIER_ZERO_DIM : (int)a->u.scalar.tier;
    if (*tier == TPURT_TIER_WRAPPED && tpurt_dtype_is_float(*dtype)) *dtype = LOWER_DEFAULT_FLOAT;
  } else {
    *dtype = a->kind == TPURT_ARG_BOOL ? TPURT_DTYPE_BOOL : TPURT_DTYPE_I64;
    *tier = TPURT_TIER_WRAPPED;
  }
}

static int category(tpurt_dtype_t d) {
  if (d == TPURT_DTYPE_INVALID) return -1;
  if (d == TPURT_DTYPE_BOOL) return 0;
  return tpurt_dtype_is_float(d) ? 2 : 1;
}

/* PyTorch's result_type over operands 0..n-1 of item |k|: a lower tier
** only wins when it is of a higher category (bool < int < float). */
static tpurt_dtype_t item_dtype(const lower_ctx_t* ctx, int32_t n, int32_t k) {
  tpurt_dtype_t tier[3] = {TPURT_DTYPE_INVALID, TPURT_DTYPE_INVALID, TPURT_DTYPE_INVALID};
  for (int32_t i = 0; i < n; ++i) {
    tpurt_dtype_t d;
    int t;
    operand_type(ctx, i, k, &d, &t);
    tier[t] = lower_promote(tier[t], d);
  }
  tpurt_dtype_t r = tier[0];
  for (int t = 1; t < 3; ++t) {
    if (r == TPURT_DTYPE_INVALID) {
      r = tier[t];
    } else if (tier[t] != TPURT_DTYPE_INVALID && category(tier[t]) > category(r)) {
      r = lower_promote(r, tier[t]);
    }
  }
  return r;
}

/* Operand |i| of item |k| as a value of |dtype| (not yet broadcast). */
static ir_value_t operand(foreach_t* fe, int32_t i, int32_t k, tpurt_dtype_t dtype) {
  lower_ctx_t* ctx = fe->ctx;
  const tpurt_arg_t* a = lower_arg(ctx, i);
  if (a->kind == TPURT_ARG_TENSOR_LIST) return lower_cast(ctx, lower_list_tensor(ctx, i, k), dtype);
  if (a->kind == TPURT_ARG_FLOAT_LIST) return lower_float_list_item(ctx, i, k, dtype);
  if (a->kind == TPURT_ARG_TENSOR) return lower_cast(ctx, lower_tensor(ctx, i), dtype);
  if (i >= LOWER_MAX_ARGS) return IR_NONE;
  if (fe->scalars[i][dtype] == IR_NONE) fe->scalars[i][dtype] = lower_scalar(ctx, i, dtype);
  return fe->scalars[i][dtype];
}

/*===--- the math of one item ---===*/

/* PyTorch's lerp: |w| < 0.5 ? a + w (b - a) : b - (b - a) (1 - w). */
static ir_value_t lerp(lower_ctx_t* ctx, ir_value_t a, ir_value_t b, ir_value_t w) {
  ir_func_t* f = ctx->func;
  ir_value_t diff = ir_sub(f, b, a);
  ir_value_t lo = ir_add(f, a, ir_mul(f, w, diff));
  ir_value_t hi = ir_sub(ctx->func, b, ir_mul(f, diff, ir_sub(f, ir_const_like(f, w, 1.0), w)));
  ir_value_t small = ir_compare(f, IR_LT, ir_abs(f, w), ir_const_like(f, w, 0.5));
  return ir_select(f, small, lo, hi);
}

static ir_value_t unary(lower_ctx_t* ctx, int op, ir_value_t x) {
  ir_func_t* f = ctx->func;
  switch (op) {
    case OP_SQRT:
      return ir_sqrt(f, x);
    case OP_RSQRT:
      return ir_rsqrt(f, x);
    case OP_NEG:
      return ir_neg(f, x);
    case OP_RECIPROCAL:
      return ir_div(f, ir_const_like(f, x, 1.0), x);
    case OP_EXP:
      return ir_exp(f, x);
    case OP_LOG:
      return ir_log(f, x);
    case OP_ABS:
      return ir_abs(f, x);
    case OP_SIGN:
      return ir_unary(f, IR_OP_SIGN, x);
    case OP_SIGMOID:
      return ir_unary(f, IR_OP_LOGISTIC, x);
    default:
      return ir_const_like(f, x, 0.0);
  }
}

static bool float_math(int op) {
  return op == OP_DIV || op == OP_ADDCDIV ||
         (op >= OP_SQRT && op <= OP_SIGMOID && op != OP_NEG && op != OP_ABS && op != OP_SIGN);
}

/* Item |k|: operands 0..arity-1, coefficient |coef| (schema arg, -1: none). */
static TPURT_MUST_USE tpurt_status_t one_item(foreach_t* fe, int op, int32_t coef, int32_t k,
                                              ir_value_t* out) {
  lower_ctx_t* ctx = fe->ctx;
  int32_t n = op_arity(op);
  tpurt_dtype_t dt = item_dtype(ctx, n, k);
  if (op == OP_ADDCDIV && !tpurt_dtype_is_float(dt))
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Integer division with addcdiv is no longer supported, and in a future release addcdiv "
        "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can "
        "be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
        "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
        "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
        "for all dtypes.");
  if (op == OP_LERP && !tpurt_dtype_is_float(dt))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"lerp_kernel_scalar\" not implemented for '%s'",
                       tpurt_dtype_name(dt));
  if (op == OP_NEG && dt == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
                       "invert a mask, use the `~` or `logical_not()` operator instead.");
  if (float_math(op) && !tpurt_dtype_is_float(dt)) dt = LOWER_DEFAULT_FLOAT;
  tpurt_dtype_t math = tpurt_dtype_is_float(dt) ? lower_acc_dtype(dt) : dt;
  /* the common shape */
  int32_t rank = 0;
  int64_t dims[TPURT_MAX_RANK];
  ir_value_t v[4];
  for (int32_t i = 0; i < n; ++i) {
    v[i] = operand(fe, i, k, math);
    const ir_type_t* t = ir_value_type(ctx->func, v[i]);
    if (!t) return NULL; /* sticky IR error, reported by the engine */
    TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, t->rank, t->dims, &rank, dims));
  }
  for (int32_t i = 0; i < n; ++i) v[i] = lower_broadcast_to(ctx, v[i], rank, dims);
  ir_value_t c = IR_NONE;
  if (coef >= 0 && !lower_is_none(ctx, coef)) {
    bool one = is_number(lower_arg(ctx, coef)) && lower_scalar_is(ctx, coef, 1.0);
    if (!one || op == OP_LERP) c = lower_broadcast_to(ctx, operand(fe, coef, k, math), rank, dims);
  }
  ir_value_t r;
  switch (op) {
    case OP_ADD:
    case OP_SUB: {
      ir_value_t b = c == IR_NONE ? v[1] : ir_mul(ctx->func, c, v[1]);
      if (dt == TPURT_DTYPE_BOOL) {
        r = ir_or(ctx->func, v[0], b);
      } else {
        r = ir_binary(ctx->func, op == OP_ADD ? IR_OP_ADD : IR_OP_SUBTRACT, v[0], b);
      }
      break;
    }
    case OP_MUL:
      r = ir_binary(ctx->func, dt == TPURT_DTYPE_BOOL ? IR_OP_AND : IR_OP_MULTIPLY, v[0], v[1]);
      break;
    case OP_DIV:
      r = ir_div(ctx->func, v[0], v[1]);
      break;
    case OP_MAXIMUM:
      r = ir_max(ctx->func, v[0], v[1]);
      break;
    case OP_MINIMUM:
      r = ir_min(ctx->func, v[0], v[1]);
      break;
    case OP_POW:
      r = ir_pow(ctx->func, v[0], v[1]);
      break;
    case OP_ADDCMUL:
    case OP_ADDCDIV: {
      /* self + value * t1 (* or /) t2, in PyTorch's order */
      ir_value_t p = c == IR_NONE ? v[1] : ir_mul(ctx->func, c, v[1]);
      p = ir_binary(ctx->func, op == OP_ADDCMUL ? IR_OP_MULTIPLY : IR_OP_DIVIDE, p, v[2]);
      r = ir_add(ctx->func, v[0], p);
      break;
    }
    case OP_LERP:
      r = lerp(ctx, v[0], v[1], c);
      break;
    default:
      r = unary(ctx, op, v[0]);
      break;
  }
  *out = lower_cast(ctx, r, dt);
  return NULL;
}

/* Runs the row's op (.kind, an OP_*) over the list: the list length comes
** from the first Tensor[] operand; every other list must match it. .arg is
** the schema position of its coefficient, -1 for none (add/sub: (self,
** other, alpha) for List and Tensor, (self, scalar) else). */
static TPURT_MUST_USE tpurt_status_t foreach_row(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  int op = (int)row->kind;
  int32_t coef = row->arg;
  foreach_t* fe = tpurt_xmalloc(sizeof(*fe));
  fe->ctx = ctx;
  for (int32_t i = 0; i < LOWER_MAX_ARGS; ++i)
    for (int32_t d = 0; d < TPURT_DTYPE_COUNT; ++d) fe->scalars[i][d] = IR_NONE;
  tpurt_status_t status = NULL;
  int32_t n = op_arity(op), len = -1;
  for (int32_t i = 0; i < n + 1 && !status; ++i) {
    int32_t arg = i < n ? i : coef;
    if (arg < 0) continue;
    const tpurt_arg_t* a = lower_arg(ctx, arg);
    if (a->kind == TPURT_ARG_TENSOR_LIST) {
      if (len < 0) {
        len = a->u.list_len;
      } else if (a->u.list_len != len) {
        status = lower_error(TPURT_INVALID_ARGUMENT,
                             "Tensor lists must have the same number of tensors, got %d and %d", len,
                             a->u.list_len);
      }
    }
  }
  for (int32_t i = 0; i < n + 1 && !status && len >= 0; ++i) {
    int32_t arg = i < n ? i : coef;
    if (arg >= 0 && lower_arg(ctx, arg)->kind == TPURT_ARG_FLOAT_LIST &&
        lower_float_list_len(ctx, arg) != len)
      status = lower_error(TPURT_INVALID_ARGUMENT,
                           "Tensor list must have same number of elements as scalar list, got %d and %d", len,
                           lower_float_list_len(ctx, arg));
  }
  if (!status && len <= 0)
    status = lower_error(TPURT_INVALID_ARGUMENT, "Tensor list must have at least one tensor.");
  for (int32_t k = 0; k < len && !status; ++k) {
    ir_value_t r = IR_NONE;
    status = one_item(fe, op, coef, k, &r);
    if (!status) lower_set_result(ctx, k, r);
  }
  free(fe);
  return status;
}

/* _foreach_norm.Scalar(self, ord=2, dtype=None): one 0-d norm per item.
** ord shapes the program, so this row keys on its value. */
static TPURT_MUST_USE tpurt_status_t lower_foreach_norm(lower_ctx_t* ctx) {
  double ord = lower_is_none(ctx, 1) ? 2.0 : lower_scalar_value(ctx, 1);
  if (ord != 1.0 && ord != 2.0 && !isinf(ord))
    return lower_error(TPURT_UNIMPLEMENTED, "_foreach_norm: ord %g is not lowered", ord);
  int32_t len = lower_list_len(ctx, 0);
  if (len <= 0) return lower_error(TPURT_INVALID_ARGUMENT, "Tensor list must have at least one tensor.");
  ir_func_t* f = ctx->func;
  for (int32_t k = 0; k < len; ++k) {
    const tpurt_tensor_t* t = lower_list_meta(ctx, 0, k);
    if (!tpurt_dtype_is_float(t->dtype))
      return lower_error(TPURT_INVALID_ARGUMENT, "_foreach_norm: expected a floating point tensor, got %s",
                         tpurt_dtype_name(t->dtype));
    tpurt_dtype_t out = lower_dtype(ctx, 2, t->dtype), acc = lower_acc_dtype(lower_promote(out, t->dtype));
    ir_value_t x = ir_abs(f, lower_cast(ctx, lower_list_tensor(ctx, 0, k), acc));
    int64_t dims[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t->rank; ++i) dims[i] = i;
    ir_value_t r;
    if (isinf(ord)) {
      r = ir_reduce(f, x, ir_constant_f64(f, acc, ord > 0 ? 0.0 : INFINITY), dims, t->rank,
                    ord > 0 ? IR_REDUCE_MAX : IR_REDUCE_MIN);
    } else if (ord == 1.0) {
      r = ir_reduce(f, x, ir_constant_f64(f, acc, 0.0), dims, t->rank, IR_REDUCE_ADD);
    } else {
      r = ir_unary(f, IR_OP_SQRT,
                   ir_reduce(f, ir_mul(f, x, x), ir_constant_f64(f, acc, 0.0), dims, t->rank, IR_REDUCE_ADD));
    }
    lower_set_result(ctx, k, lower_cast(ctx, r, out));
  }
  return NULL;
}

/* Single tensors: addcmul/addcdiv(self, t1, t2, value=1), lerp(self, end,
** weight) with a Scalar or a Tensor weight. */
static TPURT_MUST_USE tpurt_status_t single(lower_ctx_t* ctx, int op, int32_t coef) {
  foreach_t* fe = tpurt_xmalloc(sizeof(*fe));
  fe->ctx = ctx;
  for (int32_t i = 0; i < LOWER_MAX_ARGS; ++i)
    for (int32_t d = 0; d < TPURT_DTYPE_COUNT; ++d) fe->scalars[i][d] = IR_NONE;
  ir_value_t r = IR_NONE;
  tpurt_status_t status = one_item(fe, op, coef, 0, &r);
  if (!status) lower_set_result(ctx, 0, r);
  free(fe);
  return status;
}

/* single with the row's constants (LOWER_*_WITH rows). */
static TPURT_MUST_USE tpurt_status_t single_row(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  return single(ctx, (int)row->kind, row->arg);
}

static TPURT_MUST_USE tpurt_status_t lower_lerp(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1), *w = lower_meta(ctx, 2);
  if (a->dtype != b->dtype || (w && w->dtype != a->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "expected dtype %s for `end` but got dtype %s",
                       tpurt_dtype_name(a->dtype),
                       tpurt_dtype_name(a->dtype != b->dtype ? b->dtype : w->dtype));
  if (w) { /* the weight broadcasts too */
    int32_t rank;
    int64_t dims[TPURT_MAX_RANK];
    TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(a->rank, a->sizes, b->rank, b->sizes, &rank, dims));
    TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, w->rank, w->sizes, &rank, dims));
    if (!tpurt_dtype_is_float(a->dtype))
      return lower_error(TPURT_INVALID_ARGUMENT, "\"lerp_kernel_tensor\" not implemented for '%s'",
                         tpurt_dtype_name(a->dtype));
    tpurt_dtype_t acc = lower_acc_dtype(a->dtype);
    ir_value_t va = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), rank, dims);
    ir_value_t vb = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), acc), rank, dims);
    ir_value_t vw = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 2), acc), rank, dims);
    lower_set_result(ctx, 0, lower_cast(ctx, lerp(ctx, va, vb, vw), a->dtype));
    return NULL;
  }
  return single(ctx, OP_LERP, 2);
}

const lower_rule_t lower_foreach_rules[] = {
    LOWER_FN_WITH("aten::_foreach_abs", foreach_row, .kind = OP_ABS, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_add.List", foreach_row, .kind = OP_ADD, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_add.Scalar", foreach_row, .kind = OP_ADD, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_add.ScalarList", foreach_row, .kind = OP_ADD, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_add.Tensor", foreach_row, .kind = OP_ADD, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_addcdiv.Scalar", foreach_row, .kind = OP_ADDCDIV, .arg = 3),
    LOWER_FN_WITH("aten::_foreach_addcdiv.ScalarList", foreach_row, .kind = OP_ADDCDIV, .arg = 3),
    LOWER_FN_WITH("aten::_foreach_addcmul.Scalar", foreach_row, .kind = OP_ADDCMUL, .arg = 3),
    LOWER_FN_WITH("aten::_foreach_addcmul.ScalarList", foreach_row, .kind = OP_ADDCMUL, .arg = 3),
    LOWER_FN_WITH("aten::_foreach_clamp_max.List", foreach_row, .kind = OP_MINIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_clamp_max.Scalar", foreach_row, .kind = OP_MINIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_clamp_max.ScalarList", foreach_row, .kind = OP_MINIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_clamp_min.List", foreach_row, .kind = OP_MAXIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_clamp_min.Scalar", foreach_row, .kind = OP_MAXIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_clamp_min.ScalarList", foreach_row, .kind = OP_MAXIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_div.List", foreach_row, .kind = OP_DIV, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_div.Scalar", foreach_row, .kind = OP_DIV, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_div.ScalarList", foreach_row, .kind = OP_DIV, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_div.Tensor", foreach_row, .kind = OP_DIV, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_exp", foreach_row, .kind = OP_EXP, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_lerp.List", foreach_row, .kind = OP_LERP, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_lerp.Scalar", foreach_row, .kind = OP_LERP, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_lerp.ScalarList", foreach_row, .kind = OP_LERP, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_log", foreach_row, .kind = OP_LOG, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_maximum.List", foreach_row, .kind = OP_MAXIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_maximum.Scalar", foreach_row, .kind = OP_MAXIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_maximum.ScalarList", foreach_row, .kind = OP_MAXIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_minimum.List", foreach_row, .kind = OP_MINIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_minimum.Scalar", foreach_row, .kind = OP_MINIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_minimum.ScalarList", foreach_row, .kind = OP_MINIMUM, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_mul.List", foreach_row, .kind = OP_MUL, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_mul.Scalar", foreach_row, .kind = OP_MUL, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_mul.ScalarList", foreach_row, .kind = OP_MUL, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_mul.Tensor", foreach_row, .kind = OP_MUL, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_neg", foreach_row, .kind = OP_NEG, .arg = -1),
    LOWER_KEYED_FN("aten::_foreach_norm.Scalar", lower_foreach_norm),
    LOWER_FN_WITH("aten::_foreach_pow.List", foreach_row, .kind = OP_POW, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_pow.Scalar", foreach_row, .kind = OP_POW, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_pow.ScalarAndTensor", foreach_row, .kind = OP_POW, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_pow.ScalarList", foreach_row, .kind = OP_POW, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_reciprocal", foreach_row, .kind = OP_RECIPROCAL, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_rsqrt", foreach_row, .kind = OP_RSQRT, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_sigmoid", foreach_row, .kind = OP_SIGMOID, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_sign", foreach_row, .kind = OP_SIGN, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_sqrt", foreach_row, .kind = OP_SQRT, .arg = -1),
    LOWER_FN_WITH("aten::_foreach_sub.List", foreach_row, .kind = OP_SUB, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_sub.Scalar", foreach_row, .kind = OP_SUB, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_sub.ScalarList", foreach_row, .kind = OP_SUB, .arg = 2),
    LOWER_FN_WITH("aten::_foreach_zero", foreach_row, .kind = OP_ZERO, .arg = -1),
    LOWER_FN_WITH("aten::addcdiv", single_row, .kind = OP_ADDCDIV, .arg = 3),
    LOWER_OUT_FN_WITH("aten::addcdiv.out", single_row, .kind = OP_ADDCDIV, .arg = 3),
    LOWER_FN_WITH("aten::addcmul", single_row, .kind = OP_ADDCMUL, .arg = 3),
    LOWER_OUT_FN_WITH("aten::addcmul.out", single_row, .kind = OP_ADDCMUL, .arg = 3),
    LOWER_FN("aten::lerp.Scalar", lower_lerp),
    LOWER_OUT_FN("aten::lerp.Scalar_out", lower_lerp),
    LOWER_FN("aten::lerp.Tensor", lower_lerp),
    LOWER_OUT_FN("aten::lerp.Tensor_out", lower_lerp),
    LOWER_END,
};
