/* loss.c: smooth L1, Huber and binary cross entropy losses, forward and backward, with
** PyTorch's reductions (0 none, 1 mean, 2 sum). Half types compute in f32.
** (mse, l1, cross entropy and the other losses are composites of ops
** with rules.) */
#include "../base/base.h"
#include "lower.h"

enum { REDUCTION_NONE = 0, REDUCTION_MEAN = 1, REDUCTION_SUM = 2 };

/* self and target (args 0, 1) broadcast together, in |acc|. */
static TPURT_MUST_USE tpurt_status_t loss_operands(lower_ctx_t* ctx, int32_t first, tpurt_dtype_t acc,
                                                   ir_value_t* x, ir_value_t* y, int32_t* rank,
                                                   int64_t* dims) {
  const tpurt_tensor_t *a = lower_meta(ctx, first), *b = lower_meta(ctx, first + 1);
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(a->rank, a->sizes, b->rank, b->sizes, rank, dims));
  *x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, first), acc), *rank, dims);
  *y = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, first + 1), acc), *rank, dims);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t check_reduction(int64_t reduction) {
  if (reduction < REDUCTION_NONE || reduction > REDUCTION_SUM)
    return lower_error(TPURT_INVALID_ARGUMENT, "%lld is not a valid value for reduction",
                       (long long)reduction);
  return NULL;
}

/* |huber|: huber_loss(self, target, reduction, delta); else smooth_l1_loss(self, target, reduction, beta) */
static TPURT_MUST_USE tpurt_status_t smooth_loss(lower_ctx_t* ctx) {
  bool huber = lower_rule_data(ctx)->flag;
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
  ir_value_t d = ir_abs(f, ir_sub(f, x, y));
  ir_value_t p = lower_broadcast_to(ctx, lower_scalar(ctx, 3, acc), rank, dims);
  ir_value_t half = ir_const_like(f, d, 0.5);
  ir_value_t quad = ir_mul(f, ir_mul(f, half, d), d);
  ir_value_t lin = ir_sub(f, d, ir_mul(f, half, p));
  ir_value_t l;
  if (huber) {
    l = ir_select(f, ir_compare(f, IR_LT, d, p), quad, ir_mul(f, p, lin));
  } else if (lower_scalar_is(ctx, 3, 0.0)) {
    l = d; /* beta 0 is the L1 loss */
  } else {
    l = ir_select(f, ir_compare(f, IR_LT, d, p), ir_div(f, quad, p), lin);
  }
  if (reduction != REDUCTION_NONE) {
    int64_t all[TPURT_MAX_RANK], n = 1;
    for (int32_t i = 0; i < rank; ++i) all[i] = i, n *= dims[i];
    l = ir_reduce(f, l, ir_constant_f64(f, acc, 0.0), all, rank, IR_REDUCE_ADD);
    if (reduction == REDUCTION_MEAN) l = ir_div(f, l, ir_const_like(f, l, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, l, t->dtype));
  return NULL;
}

/* *_backward(grad_output, self, target, reduction, beta|delta) */
static TPURT_MUST_USE tpurt_status_t smooth_loss_backward(lower_ctx_t* ctx) {
  bool huber = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 1);
  int64_t reduction = lower_int(ctx, 3, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x, y;
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(loss_operands(ctx, 1, acc, &x, &y, &rank, dims));
  ir_value_t diff = ir_sub(f, x, y);
  ir_value_t d = ir_abs(f, diff);
  ir_value_t p = lower_broadcast_to(ctx, lower_scalar(ctx, 4, acc), rank, dims);
  ir_value_t sign = ir_unary(f, IR_OP_SIGN, diff);
  ir_value_t gl;
  if (huber) {
    gl = ir_select(f, ir_compare(f, IR_LT, d, p), diff, ir_mul(f, p, sign));
  } else if (lower_scalar_is(ctx, 4, 0.0)) {
    gl = sign;
  } else {
    gl = ir_select(f, ir_compare(f, IR_LT, d, p), ir_div(f, diff, p), sign);
  }
  ir_value_t g = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), rank, dims);
  gl = ir_mul(f, gl, g);
  if (reduction == REDUCTION_MEAN) {
    int64_t n = 1;
    for (int32_t i = 0; i < rank; ++i) n *= dims[i];
    gl = ir_div(f, gl, ir_const_like(f, gl, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, gl, t->dtype));
  return NULL;
}

/* binary_cross_entropy(self, target, weight?, reduction): -w (t log x + (1 - t) log(1 - x)),
** each log clamped at -100 as PyTorch does */
static TPURT_MUST_USE tpurt_status_t lower_binary_cross_entropy(lower_ctx_t* ctx) {
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
  ir_value_t floor = ir_const_like(f, x, -100.0), one = ir_const_like(f, x, 1.0);
  ir_value_t lx = ir_max(f, ir_log(f, x), floor);
  ir_value_t l1x = ir_max(f, ir_log(f, ir_sub(f, one, x)), floor);
  ir_value_t l = ir_add(f, ir_mul(f, y, lx), ir_mul(f, ir_sub(f, one, y), l1x));
  l = ir_neg(f, l);
  if (lower_meta(ctx, 2))
    l = ir_mul(f, l,
               lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 2), acc), x_t->rank, x_t->sizes));
  if (reduction != REDUCTION_NONE) {
    int64_t all[TPURT_MAX_RANK], n = 1;
    for (int32_t i = 0; i < x_t->rank; ++i) all[i] = i, n *= x_t->sizes[i];
    l = ir_reduce(f, l, ir_constant_f64(f, acc, 0.0), all, x_t->rank, IR_REDUCE_ADD);
    if (reduction == REDUCTION_MEAN) l = ir_div(f, l, ir_const_like(f, l, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, l, x_t->dtype));
  return NULL;
}

/* binary_cross_entropy_backward(grad_output, self, target, weight?, reduction):
** grad * w * (x - t) / max(x (1 - x), 1e-12) */
static TPURT_MUST_USE tpurt_status_t lower_binary_cross_entropy_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t* x_t = lower_meta(ctx, 1);
  int64_t reduction = lower_int(ctx, 4, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  tpurt_dtype_t acc = lower_acc_dtype(x_t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 1), acc), y = lower_cast(ctx, lower_tensor(ctx, 2), acc);
  ir_value_t one = ir_const_like(f, x, 1.0);
  ir_value_t den = ir_max(f, ir_mul(f, ir_sub(f, one, x), x), ir_const_like(f, x, 1e-12));
  ir_value_t g = ir_div(f, ir_sub(f, x, y), den);
  g = ir_mul(f, g,
             lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), x_t->rank, x_t->sizes));
  if (lower_meta(ctx, 3))
    g = ir_mul(f, g,
               lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 3), acc), x_t->rank, x_t->sizes));
  if (reduction == REDUCTION_MEAN) {
    int64_t n = 1;
    for (int32_t i = 0; i < x_t->rank; ++i) n *= x_t->sizes[i];
    g = ir_div(f, g, ir_const_like(f, g, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, g, x_t->dtype));
  return NULL;
}

/* |l| [N] (or [] for one sample) reduced as |reduction| asks */
static ir_value_t reduce_samples(lower_ctx_t* ctx, ir_value_t l, int64_t reduction) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, l);
  if (reduction == REDUCTION_NONE || t->rank == 0) return l;
  int64_t all = 0, n = t->dims[0];
  l = ir_reduce(f, l, ir_constant_f64(f, t->dtype, 0.0), &all, 1, IR_REDUCE_ADD);
  if (reduction == REDUCTION_MEAN) l = ir_div(f, l, ir_const_like(f, l, (double)n));
  return l;
}

/* multi_margin_loss(self [N, C] | [C], target [N] | [], p=1, margin=1,
** weight?, reduction): per sample sum over i != y of
** w[y] max(0, margin - x[y] + x[i])^p, divided by C. p (1 or 2) and margin
** stay runtime parameters: p picks its power by a select. */
static TPURT_MUST_USE tpurt_status_t lower_multi_margin_loss(lower_ctx_t* ctx) {
  const tpurt_tensor_t *x_t = lower_meta(ctx, 0), *y_t = lower_meta(ctx, 1);
  int64_t reduction = lower_int(ctx, 5, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  double pv = lower_scalar_value(ctx, 2);
  if (pv != 1.0 && pv != 2.0) return lower_error(TPURT_INVALID_ARGUMENT, "only p == 1 and p == 2 supported");
  if (x_t->rank > 2 || (x_t->rank == 2 ? y_t->rank != 1 || y_t->sizes[0] != x_t->sizes[0] : y_t->rank > 1))
    return lower_error(TPURT_INVALID_ARGUMENT, "inconsistent target size: %s for input of size: %s",
                       lower_shape_str(y_t->rank, y_t->sizes), lower_shape_str(x_t->rank, x_t->sizes));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(x_t->dtype);
  int64_t n = x_t->rank == 2 ? x_t->sizes[0] : 1, c = x_t->rank ? x_t->sizes[x_t->rank - 1] : 1;
  int64_t xd[2] = {n, c}, nd[1] = {n}, b0[1] = {0};
  ir_value_t x = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), 2, xd);
  ir_value_t y = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 1), TPURT_DTYPE_I64), 1, nd);
  ir_value_t cls = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, xd), 1);
  ir_value_t is_y = ir_compare(f, IR_EQ, cls, ir_broadcast_in_dim(f, y, 2, xd, b0));
  int64_t rdim = 1;
  ir_value_t xy = ir_reduce(f, ir_select(f, is_y, x, ir_const_like(f, x, 0.0)), ir_constant_f64(f, acc, 0.0),
                            &rdim, 1, IR_REDUCE_ADD);
  ir_value_t margin = ir_broadcast_in_dim(f, lower_scalar(ctx, 3, acc), 2, xd, NULL);
  ir_value_t z = ir_add(f, ir_sub(f, margin, ir_broadcast_in_dim(f, xy, 2, xd, b0)), x);
  z = ir_max(f, z, ir_const_like(f, z, 0.0));
  ir_value_t p = ir_broadcast_in_dim(f, lower_scalar(ctx, 2, acc), 2, xd, NULL);
  ir_value_t h = ir_select(f, ir_compare(f, IR_EQ, p, ir_const_like(f, p, 2.0)), ir_mul(f, z, z), z);
  if (lower_meta(ctx, 4)) {
    int64_t cd[1] = {c};
    ir_value_t w = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 4), acc), 1, cd);
    int64_t one[1] = {1};
    ir_value_t wy =
        ir_reduce(f, ir_select(f, is_y, ir_broadcast_in_dim(f, w, 2, xd, one), ir_const_like(f, x, 0.0)),
                  ir_constant_f64(f, acc, 0.0), &rdim, 1, IR_REDUCE_ADD);
    h = ir_mul(f, h, ir_broadcast_in_dim(f, wy, 2, xd, b0));
  }
  h = ir_select(f, is_y, ir_const_like(f, h, 0.0), h);
  ir_value_t l = ir_reduce(f, h, ir_constant_f64(f, acc, 0.0), &rdim, 1, IR_REDUCE_ADD);
  l = ir_div(f, l, ir_const_like(f, l, (double)c));
  if (x_t->rank < 2) l = ir_reshape(f, l, 0, NULL);
  lower_set_result(ctx, 0, lower_cast(ctx, reduce_samples(ctx, l, reduction), x_t->dtype));
  return NULL;
}

/* multilabel_margin_loss_forward(self [N, C] | [C], target (same, int64),
** reduction) -> (loss, is_target): a sample's targets are its target row up
** to the first -1; loss = sum over targets j (each time listed) and
** non-targets i of max(0, 1 - x[j] + x[i]), divided by C. */
static TPURT_MUST_USE tpurt_status_t lower_multilabel_margin_loss(lower_ctx_t* ctx) {
  const tpurt_tensor_t *x_t = lower_meta(ctx, 0), *y_t = lower_meta(ctx, 1);
  int64_t reduction = lower_int(ctx, 2, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  bool same = x_t->rank == y_t->rank && x_t->rank <= 2;
  for (int32_t i = 0; same && i < x_t->rank; ++i) same = x_t->sizes[i] == y_t->sizes[i];
  if (!same)
    return lower_error(TPURT_INVALID_ARGUMENT, "inconsistent target size: %s for input of size: %s",
                       lower_shape_str(y_t->rank, y_t->sizes), lower_shape_str(x_t->rank, x_t->sizes));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(x_t->dtype);
  int64_t n = x_t->rank == 2 ? x_t->sizes[0] : 1, c = x_t->rank ? x_t->sizes[x_t->rank - 1] : 1;
  int64_t xd[2] = {n, c};
  ir_value_t x = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), 2, xd);
  ir_value_t t = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 1), TPURT_DTYPE_I64), 2, xd);
  /* valid[n, k]: no -1 at or before k */
  ir_value_t stop = ir_convert(f, ir_compare(f, IR_EQ, t, ir_const_like(f, t, -1.0)), TPURT_DTYPE_I64);
  ir_value_t seen = stop;
  for (int64_t shift = 1; shift < c; shift *= 2) { /* running count of -1 along k */
    int64_t lo[2] = {0, shift}, hi[2] = {0, 0}, in[2] = {0, 0}, st[2] = {0, 0}, one[2] = {1, 1};
    ir_value_t padded = ir_pad(f, seen, ir_constant_i64(f, TPURT_DTYPE_I64, 0), lo, hi, in);
    seen = ir_add(f, seen, ir_slice(f, padded, st, xd, one));
  }
  ir_value_t valid = ir_compare(f, IR_EQ, seen, ir_const_like(f, seen, 0.0));
  /* cnt[n, cls] = #valid k with t[n, k] == cls: [N, K, C] compare, summed over K */
  int64_t d3[3] = {n, c, c}, tk[2] = {0, 1};
  ir_value_t cls = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 3, d3), 2);
  ir_value_t hit = ir_and(f, ir_compare(f, IR_EQ, ir_broadcast_in_dim(f, t, 3, d3, tk), cls),
                          ir_broadcast_in_dim(f, valid, 3, d3, tk));
  int64_t kdim = 1;
  ir_value_t cnt =
      ir_reduce(f, ir_convert(f, hit, acc), ir_constant_f64(f, acc, 0.0), &kdim, 1, IR_REDUCE_ADD);
  ir_value_t is_target = ir_compare(f, IR_GT, cnt, ir_const_like(f, cnt, 0.0));
  /* pair (j, i): cnt[j] * !is_target[i] * max(0, 1 - x[j] + x[i]) */
  int64_t dj[2] = {0, 1}, di[2] = {0, 2};
  ir_value_t xj = ir_broadcast_in_dim(f, x, 3, d3, dj), xi = ir_broadcast_in_dim(f, x, 3, d3, di);
  ir_value_t z = ir_add(f, ir_sub(f, ir_const_like(f, xj, 1.0), xj), xi);
  z = ir_max(f, z, ir_const_like(f, z, 0.0));
  z = ir_mul(f, z, ir_broadcast_in_dim(f, cnt, 3, d3, dj));
  z = ir_select(f, ir_broadcast_in_dim(f, is_target, 3, d3, di), ir_const_like(f, z, 0.0), z);
  int64_t both[2] = {1, 2};
  ir_value_t l = ir_reduce(f, z, ir_constant_f64(f, acc, 0.0), both, 2, IR_REDUCE_ADD);
  l = ir_div(f, l, ir_const_like(f, l, (double)c));
  if (x_t->rank < 2) l = ir_reshape(f, l, 0, NULL);
  lower_set_result(ctx, 0, lower_cast(ctx, reduce_samples(ctx, l, reduction), x_t->dtype));
  lower_set_result(
      ctx, 1,
      ir_reshape(f, lower_cast(ctx, ir_convert(f, is_target, acc), x_t->dtype), x_t->rank, x_t->sizes));
  return NULL;
}

const lower_rule_t lower_loss_rules[] = {
    LOWER_FN("aten::multi_margin_loss", lower_multi_margin_loss),
    LOWER_OUT_FN("aten::multi_margin_loss.out", lower_multi_margin_loss),
    LOWER_FN("aten::multilabel_margin_loss_forward", lower_multilabel_margin_loss),
    LOWER_OUT_FN("aten::multilabel_margin_loss_forward.output", lower_multilabel_margin_loss),
    LOWER_FN("aten::binary_cross_entropy", lower_binary_cross_entropy),
    LOWER_OUT_FN("aten::binary_cross_entropy.out", lower_binary_cross_entropy),
    LOWER_FN("aten::binary_cross_entropy_backward", lower_binary_cross_entropy_backward),
    LOWER_OUT_FN("aten::binary_cross_entropy_backward.grad_input", lower_binary_cross_entropy_backward),
    LOWER_FN_WITH("aten::huber_loss", smooth_loss, .flag = true),
    LOWER_OUT_FN_WITH("aten::huber_loss.out", smooth_loss, .flag = true),
    LOWER_FN_WITH("aten::huber_loss_backward", smooth_loss_backward, .flag = true),
    LOWER_OUT_FN_WITH("aten::huber_loss_backward.out", smooth_loss_backward, .flag = true),
    LOWER_FN("aten::smooth_l1_loss", smooth_loss),
    LOWER_OUT_FN("aten::smooth_l1_loss.out", smooth_loss),
    LOWER_FN("aten::smooth_l1_loss_backward", smooth_loss_backward),
    LOWER_OUT_FN("aten::smooth_l1_loss_backward.grad_input", smooth_loss_backward),
    LOWER_END,
};
