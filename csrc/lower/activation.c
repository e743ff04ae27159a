/* activation.c: gelu, silu, relu and the softmax family. Half types
** compute in f32 and round once at the end, as PyTorch's CPU kernels do. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

static ir_value_t mul(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return ir_binary(ctx->func, "stablehlo.multiply", a, b);
}
static ir_value_t add(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return ir_binary(ctx->func, "stablehlo.add", a, b);
}
static ir_value_t k(lower_ctx_t* ctx, ir_value_t like, double v) { return lower_full_like(ctx, like, v); }

static tpurt_status_t need_float(lower_ctx_t* ctx, const char* op) {
  tpurt_dtype_t d = lower_meta(ctx, 0)->dtype;
  if (!tpurt_dtype_is_float(d))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'", op, tpurt_dtype_name(d));
  return NULL;
}

/* gelu(self, approximate="none"|"tanh") */
static tpurt_status_t lower_gelu(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, "GeluKernelImpl"));
  const char* approx = lower_str(ctx, 1, "none");
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(dt));
  ir_value_t inner;
  if (strcmp(approx, "tanh") == 0) {
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    ir_value_t x3 = mul(ctx, mul(ctx, x, x), x);
    ir_value_t u = mul(ctx, k(ctx, x, sqrt(2.0 / M_PI)), add(ctx, x, mul(ctx, k(ctx, x, 0.044715), x3)));
    inner = ir_unary(ctx->func, "stablehlo.tanh", u);
  } else if (strcmp(approx, "none") == 0) {
    /* 0.5 x (1 + erf(x / sqrt 2)) */
    inner = ir_unary(ctx->func, "chlo.erf", mul(ctx, x, k(ctx, x, M_SQRT1_2)));
  } else {
    return lower_error(TPURT_INVALID_ARGUMENT, "approximate argument must be either none or tanh.");
  }
  ir_value_t y = mul(ctx, mul(ctx, k(ctx, x, 0.5), x), add(ctx, k(ctx, x, 1.0), inner));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

static tpurt_status_t lower_silu(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, "silu"));
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(dt));
  ir_value_t y = mul(ctx, x, ir_unary(ctx->func, "stablehlo.logistic", x));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

static tpurt_status_t lower_relu(lower_ctx_t* ctx) {
  ir_value_t x = lower_tensor(ctx, 0);
  if (lower_meta(ctx, 0)->dtype == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "\"clamp_min_scalar_cpu\" not implemented for 'Bool'");
  lower_set_result(ctx, 0, ir_binary(ctx->func, "stablehlo.maximum", x, k(ctx, x, 0.0)));
  return NULL;
}

/* _softmax(self, dim, half_to_float) and _log_softmax. */
static tpurt_status_t softmax(lower_ctx_t* ctx, bool log) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'",
                       log ? "log_softmax_lastdim_kernel_impl" : "softmax_lastdim_kernel_impl",
                       tpurt_dtype_name(t->dtype));
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, 0), t->rank, &dim));
  bool half_to_float = lower_bool(ctx, 2, false);
  tpurt_dtype_t out = half_to_float ? TPURT_DTYPE_F32 : t->dtype;
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(t->dtype));
  if (t->rank == 0) { /* softmax of a scalar is 1, log_softmax 0 */
    lower_set_result(ctx, 0, lower_cast(ctx, k(ctx, x, log ? 0.0 : 1.0), out));
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
  ir_value_t shifted = ir_binary(f, "stablehlo.subtract", x, ir_broadcast_in_dim(f, m, rank, dims, bdims));
  ir_value_t e = ir_unary(f, "stablehlo.exponential", shifted);
  ir_value_t s = ir_reduce(f, e, zero, &dim, 1, IR_REDUCE_ADD);
  ir_value_t y;
  if (log) {
    y = ir_binary(f, "stablehlo.subtract", shifted,
                  ir_broadcast_in_dim(f, ir_unary(f, "stablehlo.log", s), rank, dims, bdims));
  } else {
    y = ir_binary(f, "stablehlo.divide", e, ir_broadcast_in_dim(f, s, rank, dims, bdims));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, y, out));
  return NULL;
}

static tpurt_status_t lower_softmax(lower_ctx_t* ctx) { return softmax(ctx, false); }
static tpurt_status_t lower_log_softmax(lower_ctx_t* ctx) { return softmax(ctx, true); }

const lower_rule_t lower_activation_rules[] = {
    LOWER_FN("aten::_log_softmax", lower_log_softmax),
    LOWER_OUT_FN("aten::_log_softmax.out", lower_log_softmax),
    LOWER_FN("aten::_softmax", lower_softmax),
    LOWER_OUT_FN("aten::_softmax.out", lower_softmax),
    LOWER_FN("aten::gelu", lower_gelu),
    LOWER_OUT_FN("aten::gelu.out", lower_gelu),
    LOWER_FN("aten::relu", lower_relu),
    LOWER_FN("aten::silu", lower_silu),
    LOWER_OUT_FN("aten::silu.out", lower_silu),
    LOWER_END,
};
