/* loss.c: smooth L1, Huber and binary cross entropy losses, forward and backward, with
** PyTorch's reductions (0 none, 1 mean, 2 sum). Half types compute in f32.
** (mse, l1, cross entropy and the other losses are composites of ops
** with rules.) */
#include "../base/base.h"
#include "lower.h"

enum { REDUCTION_NONE = 0, REDUCTION_MEAN = 1, REDUCTION_SUM = 2 };

/* self and target (args 0, 1) broadcast together, in |acc|. */
static tpurt_status_t loss_operands(lower_ctx_t* ctx, int32_t first, tpurt_dtype_t acc, ir_value_t* x,
                                    ir_value_t* y, int32_t* rank, int64_t* dims) {
  const tpurt_tensor_t *a = lower_meta(ctx, first), *b = lower_meta(ctx, first + 1);
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(a->rank, a->sizes, b->rank, b->sizes, rank, dims));
  *x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, first), acc), *rank, dims);
  *y = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, first + 1), acc), *rank, dims);
  return NULL;
}

static tpurt_status_t check_reduction(int64_t reduction) {
  if (reduction < REDUCTION_NONE || reduction > REDUCTION_SUM)
    return lower_error(TPURT_INVALID_ARGUMENT, "%lld is not a valid value for reduction",
                       (long long)reduction);
  return NULL;
}

/* |huber|: huber_loss(self, target, reduction, delta); else smooth_l1_loss(self, target, reduction, beta) */
static tpurt_status_t smooth_loss(lower_ctx_t* ctx) {
  bool huber = lower_rule_int(ctx, 0);
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t reduction = lower_int(ctx, 2, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  if (lower_scalar_value(ctx, 3) < 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       huber ? "huber_loss does not support non-positive values for delta."
                             : "smooth_l1_loss does not support negative values for beta.");
  if (huber && lower_scalar_value(ctx, 3) == 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "huber_loss does not support non-positive values for delta.");
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x, y;
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(loss_operands(ctx, 0, acc, &x, &y, &rank, dims));
  ir_value_t d = ir_unary(f, "stablehlo.abs", ir_binary(f, "stablehlo.subtract", x, y));
  ir_value_t p = lower_broadcast_to(ctx, lower_scalar(ctx, 3, acc), rank, dims);
  ir_value_t half = lower_full_like(ctx, d, 0.5);
  ir_value_t quad = ir_binary(f, "stablehlo.multiply", ir_binary(f, "stablehlo.multiply", half, d), d);
  ir_value_t lin = ir_binary(f, "stablehlo.subtract", d, ir_binary(f, "stablehlo.multiply", half, p));
  ir_value_t l;
  if (huber) {
    l = ir_select(f, ir_compare(f, IR_LT, d, p), quad, ir_binary(f, "stablehlo.multiply", p, lin));
  } else if (lower_scalar_is(ctx, 3, 0.0)) {
    l = d; /* beta 0 is the L1 loss */
  } else {
    l = ir_select(f, ir_compare(f, IR_LT, d, p), ir_binary(f, "stablehlo.divide", quad, p), lin);
  }
  if (reduction != REDUCTION_NONE) {
    int64_t all[TPURT_MAX_RANK], n = 1;
    for (int32_t i = 0; i < rank; ++i) all[i] = i, n *= dims[i];
    l = ir_reduce(f, l, ir_constant_f64(f, acc, 0.0), all, rank, IR_REDUCE_ADD);
    if (reduction == REDUCTION_MEAN)
      l = ir_binary(f, "stablehlo.divide", l, lower_full_like(ctx, l, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, l, t->dtype));
  return NULL;
}

/* *_backward(grad_output, self, target, reduction, beta|delta) */
static tpurt_status_t smooth_loss_backward(lower_ctx_t* ctx) {
  bool huber = lower_rule_int(ctx, 0);
  const tpurt_tensor_t* t = lower_meta(ctx, 1);
  int64_t reduction = lower_int(ctx, 3, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x, y;
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(loss_operands(ctx, 1, acc, &x, &y, &rank, dims));
  ir_value_t diff = ir_binary(f, "stablehlo.subtract", x, y);
  ir_value_t d = ir_unary(f, "stablehlo.abs", diff);
  ir_value_t p = lower_broadcast_to(ctx, lower_scalar(ctx, 4, acc), rank, dims);
  ir_value_t sign = ir_unary(f, "stablehlo.sign", diff);
  ir_value_t gl;
  if (huber) {
    gl = ir_select(f, ir_compare(f, IR_LT, d, p), diff, ir_binary(f, "stablehlo.multiply", p, sign));
  } else if (lower_scalar_is(ctx, 4, 0.0)) {
    gl = sign;
  } else {
    gl = ir_select(f, ir_compare(f, IR_LT, d, p), ir_binary(f, "stablehlo.divide", diff, p), sign);
  }
  ir_value_t g = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), rank, dims);
  gl = ir_binary(f, "stablehlo.multiply", gl, g);
  if (reduction == REDUCTION_MEAN) {
    int64_t n = 1;
    for (int32_t i = 0; i < rank; ++i) n *= dims[i];
    gl = ir_binary(f, "stablehlo.divide", gl, lower_full_like(ctx, gl, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, gl, t->dtype));
  return NULL;
}

/* binary_cross_entropy(self, target, weight?, reduction): -w (t log x + (1 - t) log(1 - x)),
** each log clamped at -100 as PyTorch does */
static tpurt_status_t lower_binary_cross_entropy(lower_ctx_t* ctx) {
  const tpurt_tensor_t *x_t = lower_meta(ctx, 0), *y_t = lower_meta(ctx, 1);
  int64_t reduction = lower_int(ctx, 3, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  bool same = x_t->rank == y_t->rank;
  for (int32_t d = 0; same && d < x_t->rank; ++d) same = x_t->sizes[d] == y_t->sizes[d];
  if (!same)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Using a target size (%s) that is different to the input size is deprecated. Please "
                       "ensure they have the same size.",
                       lower_shape_str(y_t->rank, y_t->sizes));
  tpurt_dtype_t acc = lower_acc_dtype(x_t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc), y = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  ir_value_t floor = lower_full_like(ctx, x, -100.0), one = lower_full_like(ctx, x, 1.0);
  ir_value_t lx = ir_binary(f, "stablehlo.maximum", ir_unary(f, "stablehlo.log", x), floor);
  ir_value_t l1x = ir_binary(f, "stablehlo.maximum",
                             ir_unary(f, "stablehlo.log", ir_binary(f, "stablehlo.subtract", one, x)), floor);
  ir_value_t l =
      ir_binary(f, "stablehlo.add", ir_binary(f, "stablehlo.multiply", y, lx),
                ir_binary(f, "stablehlo.multiply", ir_binary(f, "stablehlo.subtract", one, y), l1x));
  l = ir_unary(f, "stablehlo.negate", l);
  if (lower_meta(ctx, 2))
    l = ir_binary(f, "stablehlo.multiply", l,
                  lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 2), acc), x_t->rank, x_t->sizes));
  if (reduction != REDUCTION_NONE) {
    int64_t all[TPURT_MAX_RANK], n = 1;
    for (int32_t i = 0; i < x_t->rank; ++i) all[i] = i, n *= x_t->sizes[i];
    l = ir_reduce(f, l, ir_constant_f64(f, acc, 0.0), all, x_t->rank, IR_REDUCE_ADD);
    if (reduction == REDUCTION_MEAN)
      l = ir_binary(f, "stablehlo.divide", l, lower_full_like(ctx, l, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, l, x_t->dtype));
  return NULL;
}

/* binary_cross_entropy_backward(grad_output, self, target, weight?, reduction):
** grad * w * (x - t) / max(x (1 - x), 1e-12) */
static tpurt_status_t lower_binary_cross_entropy_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t* x_t = lower_meta(ctx, 1);
  int64_t reduction = lower_int(ctx, 4, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  tpurt_dtype_t acc = lower_acc_dtype(x_t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 1), acc), y = lower_cast(ctx, lower_tensor(ctx, 2), acc);
  ir_value_t one = lower_full_like(ctx, x, 1.0);
  ir_value_t den =
      ir_binary(f, "stablehlo.maximum",
                ir_binary(f, "stablehlo.multiply", ir_binary(f, "stablehlo.subtract", one, x), x),
                lower_full_like(ctx, x, 1e-12));
  ir_value_t g = ir_binary(f, "stablehlo.divide", ir_binary(f, "stablehlo.subtract", x, y), den);
  g = ir_binary(f, "stablehlo.multiply", g,
                lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), x_t->rank, x_t->sizes));
  if (lower_meta(ctx, 3))
    g = ir_binary(f, "stablehlo.multiply", g,
                  lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 3), acc), x_t->rank, x_t->sizes));
  if (reduction == REDUCTION_MEAN) {
    int64_t n = 1;
    for (int32_t i = 0; i < x_t->rank; ++i) n *= x_t->sizes[i];
    g = ir_binary(f, "stablehlo.divide", g, lower_full_like(ctx, g, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, g, x_t->dtype));
  return NULL;
}

const lower_rule_t lower_loss_rules[] = {
    LOWER_FN("aten::binary_cross_entropy", lower_binary_cross_entropy),
    LOWER_OUT_FN("aten::binary_cross_entropy.out", lower_binary_cross_entropy),
    LOWER_FN("aten::binary_cross_entropy_backward", lower_binary_cross_entropy_backward),
    LOWER_OUT_FN("aten::binary_cross_entropy_backward.grad_input", lower_binary_cross_entropy_backward),
    LOWER_FN_WITH("aten::huber_loss", smooth_loss, .num = {true}),
    LOWER_OUT_FN_WITH("aten::huber_loss.out", smooth_loss, .num = {true}),
    LOWER_FN_WITH("aten::huber_loss_backward", smooth_loss_backward, .num = {true}),
    LOWER_OUT_FN_WITH("aten::huber_loss_backward.out", smooth_loss_backward, .num = {true}),
    LOWER_FN_WITH("aten::smooth_l1_loss", smooth_loss, .num = {false}),
    LOWER_OUT_FN_WITH("aten::smooth_l1_loss.out", smooth_loss, .num = {false}),
    LOWER_FN_WITH("aten::smooth_l1_loss_backward", smooth_loss_backward, .num = {false}),
    LOWER_OUT_FN_WITH("aten::smooth_l1_loss_backward.grad_input", smooth_loss_backward, .num = {false}),
    LOWER_END,
};
