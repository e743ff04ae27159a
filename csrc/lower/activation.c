/* activation.c: gelu, silu, relu, the softmax family, hardtanh, shrinks,
** threshold, glu, log-sigmoid, softplus, mish, hardswish, hardsigmoid,
** leaky_relu and elu. Half types
** compute in f32 and round once at the end, as PyTorch's CPU kernels do. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/* gelu(self, approximate="none"|"tanh") */
static TPURT_MUST_USE tpurt_status_t lower_gelu(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, "GeluKernelImpl"));
  const char* approx = lower_str(ctx, 1, "none");
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(dt));
  ir_value_t inner;
  if (strcmp(approx, "tanh") == 0) {
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    ir_value_t x3 = ir_mul(ctx->func, ir_mul(ctx->func, x, x), x);
    ir_value_t u = ir_mul(ctx->func, ir_const_like(ctx->func, x, sqrt(2.0 / M_PI)),
                          ir_add(ctx->func, x, ir_mul(ctx->func, ir_const_like(ctx->func, x, 0.044715), x3)));
    inner = ir_unary(ctx->func, IR_OP_TANH, u);
  } else if (strcmp(approx, "none") == 0) {
    /* 0.5 x (1 + erf(x / sqrt 2)) */
    inner = ir_unary(ctx->func, IR_OP_ERF, ir_mul(ctx->func, x, ir_const_like(ctx->func, x, M_SQRT1_2)));
  } else {
    return lower_error(TPURT_INVALID_ARGUMENT, "approximate argument must be either none or tanh.");
  }
  ir_value_t y = ir_mul(ctx->func, ir_mul(ctx->func, ir_const_like(ctx->func, x, 0.5), x),
                        ir_add(ctx->func, ir_const_like(ctx->func, x, 1.0), inner));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_silu(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, "silu"));
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(dt));
  ir_value_t y = ir_mul(ctx->func, x, ir_unary(ctx->func, IR_OP_LOGISTIC, x));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_relu(lower_ctx_t* ctx) {
  ir_value_t x = lower_tensor(ctx, 0);
  if (lower_meta(ctx, 0)->dtype == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "\"clamp_min_scalar_cpu\" not implemented for 'Bool'");
  lower_set_pointwise_result(ctx, 0, ir_max(ctx->func, x, ir_const_like(ctx->func, x, 0.0)));
  return NULL;
}

/* _softmax(self, dim, half_to_float) and _log_softmax. */
static TPURT_MUST_USE tpurt_status_t softmax(lower_ctx_t* ctx) {
  bool log = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'",
                       log ? "log_softmax_lastdim_kernel_impl" : "softmax_lastdim_kernel_impl",
                       tpurt_dtype_name(t->dtype));
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  bool half_to_float = lower_bool(ctx, 2, false);
  tpurt_dtype_t out = half_to_float ? TPURT_DTYPE_F32 : t->dtype;
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(t->dtype));
  if (t->rank == 0) { /* softmax of a scalar is 1, log_softmax 0 */
    lower_set_result(ctx, 0, lower_cast(ctx, ir_const_like(f, x, log ? 0.0 : 1.0), out));
    return NULL;
  }
  const ir_type_t* xt = ir_value_type(f, x);
  int32_t rank = xt->rank;
  int64_t dims[TPURT_MAX_RANK], bdims[TPURT_MAX_RANK], j = 0;
  for (int32_t i = 0; i < rank; ++i) {
    dims[i] = xt->dims[i];
    if (i != dim) bdims[j++] = i;
  }
  ir_value_t neg_inf = ir_constant_f64(f, xt->dtype, -INFINITY);
  ir_value_t zero = ir_constant_f64(f, xt->dtype, 0.0);
  ir_value_t m = ir_reduce(f, x, neg_inf, &dim, 1, IR_REDUCE_MAX);
  /* an all -inf row would give nan; PyTorch gives nan too, keep it */
  ir_value_t shifted = ir_sub(f, x, ir_broadcast_in_dim(f, m, rank, dims, bdims));
  ir_value_t e = ir_exp(f, shifted);
  ir_value_t s = ir_reduce(f, e, zero, &dim, 1, IR_REDUCE_ADD);
  ir_value_t y;
  if (log) {
    y = ir_sub(f, shifted, ir_broadcast_in_dim(f, ir_log(f, s), rank, dims, bdims));
  } else {
    y = ir_div(f, e, ir_broadcast_in_dim(f, s, rank, dims, bdims));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, y, out));
  return NULL;
}

/*===--- clamps, shrinks, thresholds, glu, log-sigmoid ---===*/

/* A Scalar arg broadcast like |x| (a runtime parameter: no recompile per value). */
static ir_value_t scalar_like(lower_ctx_t* ctx, int32_t arg, ir_value_t x) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  return lower_broadcast_to(ctx, lower_scalar(ctx, arg, t->dtype), t->rank, t->dims);
}

/* hardtanh(self, min_val=-1, max_val=1): a clamp that keeps NaN */
static TPURT_MUST_USE tpurt_status_t lower_hardtanh(lower_ctx_t* ctx) {
  tpurt_dtype_t d = lower_meta(ctx, 0)->dtype;
  if (d == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "Bool inputs not supported for hardtanh");
  ir_value_t x = lower_tensor(ctx, 0);
  ir_value_t lo = lower_is_none(ctx, 1) ? ir_const_like(ctx->func, x, -1.0) : scalar_like(ctx, 1, x);
  ir_value_t hi = lower_is_none(ctx, 2) ? ir_const_like(ctx->func, x, 1.0) : scalar_like(ctx, 2, x);
  ir_func_t* f = ctx->func;
  ir_value_t y = ir_select(f, ir_compare(f, IR_LT, x, lo), lo, x);
  y = ir_select(f, ir_compare(f, IR_GT, y, hi), hi, y);
  lower_set_pointwise_result(ctx, 0, y);
  return NULL;
}

/* hardtanh_backward(grad_output, self, min_val, max_val): grad where min < x < max */
static TPURT_MUST_USE tpurt_status_t lower_hardtanh_backward(lower_ctx_t* ctx) {
  ir_func_t* f = ctx->func;
  ir_value_t g = lower_tensor(ctx, 0), x = lower_cast(ctx, lower_tensor(ctx, 1), lower_meta(ctx, 0)->dtype);
  ir_value_t inside = ir_and(f, ir_compare(f, IR_GT, x, scalar_like(ctx, 2, x)),
                             ir_compare(f, IR_LT, x, scalar_like(ctx, 3, x)));
  lower_set_pointwise_result(ctx, 0, ir_select(f, inside, g, ir_const_like(f, g, 0.0)));
  return NULL;
}

/* hardshrink(self, lambd=0.5): x where |x| > lambd, else 0 */
static TPURT_MUST_USE tpurt_status_t lower_hardshrink(lower_ctx_t* ctx) {
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  ir_value_t l = lower_is_none(ctx, 1) ? ir_const_like(f, x, 0.5) : scalar_like(ctx, 1, x);
  ir_value_t inside = ir_and(f, ir_compare(f, IR_GE, x, ir_neg(f, l)), ir_compare(f, IR_LE, x, l));
  lower_set_pointwise_result(ctx, 0, ir_select(f, inside, ir_const_like(f, x, 0.0), x));
  return NULL;
}

/* softshrink(self, lambd=0.5): x - lambd above lambd, x + lambd below -lambd, else 0 */
static TPURT_MUST_USE tpurt_status_t lower_softshrink(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, "softshrink_cpu"));
  if (!lower_is_none(ctx, 1) && lower_scalar_value(ctx, 1) < 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "lambda must be greater or equal to 0, but found to be %g.",
                       lower_scalar_value(ctx, 1));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(dt));
  ir_value_t l = lower_is_none(ctx, 1) ? ir_const_like(f, x, 0.5) : scalar_like(ctx, 1, x);
  ir_value_t y = ir_select(f, ir_compare(f, IR_GT, x, l), ir_sub(f, x, l), ir_const_like(f, x, 0.0));
  y = ir_select(f, ir_compare(f, IR_LT, x, ir_neg(f, l)), ir_add(f, x, l), y);
  y = ir_select(f, ir_compare(f, IR_NE, x, x), x, y);
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

/* threshold(self, threshold, value): x where x > threshold, else value */
static TPURT_MUST_USE tpurt_status_t lower_threshold(lower_ctx_t* ctx) {
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  ir_value_t keep = ir_or(f, ir_compare(f, IR_GT, x, scalar_like(ctx, 1, x)), ir_compare(f, IR_NE, x, x));
  lower_set_pointwise_result(ctx, 0, ir_select(f, keep, x, scalar_like(ctx, 2, x)));
  return NULL;
}

/* glu(self, dim=-1) = a * sigmoid(b), a and b the two halves along dim */
static TPURT_MUST_USE tpurt_status_t lower_glu(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, "glu"));
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (t->rank == 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "glu does not support scalars because halving size must be even");
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, -1), t->rank, &dim));
  if (t->sizes[dim] % 2 != 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Halving dimension must be even, but dimension %lld is size %lld", (long long)dim,
                       (long long)t->sizes[dim]);
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  int64_t start[TPURT_MAX_RANK] = {0}, limit[TPURT_MAX_RANK], strides[TPURT_MAX_RANK];
  for (int32_t d = 0; d < t->rank; ++d) limit[d] = t->sizes[d], strides[d] = 1;
  int64_t half = t->sizes[dim] / 2;
  limit[dim] = half;
  ir_value_t a = ir_slice(ctx->func, x, start, limit, strides);
  start[dim] = half;
  limit[dim] = 2 * half;
  ir_value_t b = ir_slice(ctx->func, x, start, limit, strides);
  lower_set_result(ctx, 0,
                   lower_cast(ctx, ir_mul(ctx->func, a, ir_unary(ctx->func, IR_OP_LOGISTIC, b)), t->dtype));
  return NULL;
}

/* log_sigmoid_forward(self) -> (output, buffer): min(x, 0) - log1p(exp(-|x|)); the
** buffer is CPU's backward scratch, empty as on CUDA */
static TPURT_MUST_USE tpurt_status_t lower_log_sigmoid_forward(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, "log_sigmoid_forward"));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(dt));
  ir_value_t e = ir_exp(f, ir_neg(f, ir_abs(f, x)));
  ir_value_t y = ir_sub(f, ir_min(f, x, ir_const_like(f, x, 0.0)), ir_unary(f, IR_OP_LOG_PLUS_ONE, e));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, y, dt));
  int64_t none = 0;
  lower_set_result(ctx, 1, ir_splat(f, dt, 1, &none, 0.0));
  return NULL;
}

/* log_sigmoid_backward(grad_output, self, buffer): grad * (1 - sigmoid(x)) = grad * sigmoid(-x) */
static TPURT_MUST_USE tpurt_status_t lower_log_sigmoid_backward(lower_ctx_t* ctx) {
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  tpurt_dtype_t acc = lower_acc_dtype(dt);
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  ir_value_t s = ir_unary(f, IR_OP_LOGISTIC, ir_neg(f, x));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, ir_mul(f, g, s), dt));
  return NULL;
}

/* _prelu_kernel(self, weight): x where x > 0, else weight * x (weight already
** shaped to broadcast by prelu) */
static TPURT_MUST_USE tpurt_status_t lower_prelu_kernel(lower_ctx_t* ctx) {
  const tpurt_tensor_t *x_t = lower_meta(ctx, 0), *w_t = lower_meta(ctx, 1);
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(x_t->rank, x_t->sizes, w_t->rank, w_t->sizes, &rank, dims));
  tpurt_dtype_t acc = lower_acc_dtype(x_t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), rank, dims);
  ir_value_t w = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), acc), rank, dims);
  ir_value_t y = ir_select(f, ir_compare(f, IR_GT, x, ir_const_like(f, x, 0.0)), x, ir_mul(f, w, x));
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, y, x_t->dtype));
  return NULL;
}

/*===--- softplus, mish, hardswish, hardsigmoid, leaky_relu, elu ---===*/

/* A Scalar arg as a runtime parameter broadcast to |like|'s shape (|if_none| when None). */
static ir_value_t scalar_or_default(lower_ctx_t* ctx, int32_t arg, ir_value_t like, double if_none) {
  const ir_type_t* t = ir_value_type(ctx->func, like);
  if (!t) return IR_NONE;
  ir_type_t ty = *t;
  ir_value_t s = lower_is_none(ctx, arg) ? ir_constant_f64(ctx->func, ty.dtype, if_none)
                                         : lower_scalar(ctx, arg, ty.dtype);
  return lower_broadcast_to(ctx, s, ty.rank, ty.dims);
}

/* log1p(exp(x * beta)) / beta, or x where x * beta > threshold */
static ir_value_t softplus_value(lower_ctx_t* ctx, ir_value_t x, ir_value_t beta, ir_value_t threshold) {
  ir_value_t xb = beta == IR_NONE ? x : ir_mul(ctx->func, x, beta);
  ir_value_t sp = ir_unary(ctx->func, IR_OP_LOG_PLUS_ONE, ir_exp(ctx->func, xb));
  if (beta != IR_NONE) sp = ir_div(ctx->func, sp, beta);
  return ir_select(ctx->func, ir_compare(ctx->func, IR_GT, xb, threshold), x, sp);
}

/* The float activations a row names in .kind; .str is CPU's kernel (its
** dtype error). Self computes in its computation dtype; the result has
** self's dtype. */
typedef enum float_act_e {
  ACT_SOFTPLUS,
  ACT_MISH,
  ACT_HARDSIGMOID,
  ACT_HARDSWISH,
  ACT_LEAKY_RELU,
  ACT_ELU
} float_act_t;

static TPURT_MUST_USE tpurt_status_t float_activation(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(lower_need_float(ctx, lower_rule_str(ctx)));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype, acc = lower_acc_dtype(dt);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc), y = IR_NONE;
  switch ((float_act_t)lower_rule_data(ctx)->kind) {
    case ACT_SOFTPLUS: /* softplus(self, beta=1, threshold=20) */
      y = softplus_value(ctx, x, scalar_or_default(ctx, 1, x, 1.0), scalar_or_default(ctx, 2, x, 20.0));
      break;
    case ACT_MISH: /* x * tanh(softplus(x)) (beta 1, threshold 20) */
      y = ir_mul(f, x, ir_unary(f, IR_OP_TANH, softplus_value(ctx, x, IR_NONE, ir_const_like(f, x, 20.0))));
      break;
    case ACT_HARDSIGMOID: /* clamp(x + 3, 0, 6) / 6; hardswish: x * that */
    case ACT_HARDSWISH: {
      ir_value_t c = ir_clamp(f, ir_constant_f64(f, acc, 0.0), ir_add(f, x, ir_const_like(f, x, 3.0)),
                              ir_constant_f64(f, acc, 6.0));
      if (lower_rule_data(ctx)->kind == ACT_HARDSWISH) c = ir_mul(f, x, c);
      y = ir_div(f, c, ir_const_like(f, x, 6.0));
      break;
    }
    case ACT_LEAKY_RELU: /* leaky_relu(self, negative_slope=0.01) */
      y = ir_select(f, ir_compare(f, IR_GT, x, ir_const_like(f, x, 0.0)), x,
                    ir_mul(f, x, scalar_or_default(ctx, 1, x, 0.01)));
      break;
    case ACT_ELU: { /* elu(self, alpha=1, scale=1, input_scale=1):
                    ** x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale */
      ir_value_t scale = scalar_or_default(ctx, 2, x, 1.0);
      ir_value_t neg =
          ir_mul(f, ir_unary(f, IR_OP_EXPONENTIAL_MINUS_ONE, ir_mul(f, x, scalar_or_default(ctx, 3, x, 1.0))),
                 ir_mul(f, scalar_or_default(ctx, 1, x, 1.0), scale));
      y = ir_select(f, ir_compare(f, IR_GT, x, ir_const_like(f, x, 0.0)), ir_mul(f, x, scale), neg);
      break;
    }
  }
  lower_set_pointwise_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

const lower_rule_t lower_activation_rules[] = {
    LOWER_FN_WITH("aten::_log_softmax", softmax, .flag = true),
    LOWER_FN("aten::_prelu_kernel", lower_prelu_kernel),
    LOWER_OUT_FN_WITH("aten::_log_softmax.out", softmax, .flag = true),
    LOWER_FN("aten::_softmax", softmax),
    LOWER_OUT_FN("aten::_softmax.out", softmax),
    LOWER_FN("aten::gelu", lower_gelu),
    LOWER_FN("aten::glu", lower_glu),
    LOWER_OUT_FN("aten::glu.out", lower_glu),
    LOWER_FN("aten::hardshrink", lower_hardshrink),
    LOWER_OUT_FN("aten::hardshrink.out", lower_hardshrink),
    LOWER_FN("aten::hardtanh", lower_hardtanh),
    LOWER_OUT_FN("aten::hardtanh.out", lower_hardtanh),
    LOWER_FN("aten::hardtanh_backward", lower_hardtanh_backward),
    LOWER_OUT_FN("aten::hardtanh_backward.grad_input", lower_hardtanh_backward),
    LOWER_FN("aten::log_sigmoid_backward", lower_log_sigmoid_backward),
    LOWER_OUT_FN("aten::log_sigmoid_backward.grad_input", lower_log_sigmoid_backward),
    LOWER_FN("aten::log_sigmoid_forward", lower_log_sigmoid_forward),
    LOWER_OUT_FN("aten::log_sigmoid_forward.output", lower_log_sigmoid_forward),
    LOWER_OUT_FN("aten::gelu.out", lower_gelu),
    LOWER_FN("aten::relu", lower_relu),
    LOWER_FN("aten::silu", lower_silu),
    LOWER_OUT_FN("aten::silu.out", lower_silu),
    LOWER_FN("aten::softshrink", lower_softshrink),
    LOWER_OUT_FN("aten::softshrink.out", lower_softshrink),
    LOWER_FN("aten::threshold", lower_threshold),
    LOWER_OUT_FN("aten::threshold.out", lower_threshold),
    LOWER_FN_WITH("aten::elu", float_activation, .str = "elu_cpu", .kind = ACT_ELU),
    LOWER_OUT_FN_WITH("aten::elu.out", float_activation, .str = "elu_cpu", .kind = ACT_ELU),
    LOWER_FN_WITH("aten::hardsigmoid", float_activation, .str = "hardsigmoid_cpu", .kind = ACT_HARDSIGMOID),
    LOWER_FN_WITH("aten::hardswish", float_activation, .str = "hardswish_cpu", .kind = ACT_HARDSWISH),
    LOWER_FN_WITH("aten::leaky_relu", float_activation, .str = "leaky_relu_cpu", .kind = ACT_LEAKY_RELU),
    LOWER_FN_WITH("aten::mish", float_activation, .str = "mish_cpu", .kind = ACT_MISH),
    LOWER_FN_WITH("aten::softplus", float_activation, .str = "softplus_cpu", .kind = ACT_SOFTPLUS),
    LOWER_OUT_FN_WITH("aten::softplus.out", float_activation, .str = "softplus_cpu", .kind = ACT_SOFTPLUS),
    LOWER_END,
};
