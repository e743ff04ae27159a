/* batch_norm.c: batch norm forward and backward over [N, C, *]: the
** statistics are per channel (dim 1) over every other dim, and accumulate
** in f32 for half types.
**
** Training with running statistics also updates running_mean/running_var
** in place, as PyTorch's kernel does: running = (1 - momentum) * running +
** momentum * batch, with the unbiased batch variance. The rule hands those
** to the engine with lower_set_write (native_batch_norm's schema does not
** mark them Tensor(a!), so the usual in-place write-back would miss them). */
#include "../base/base.h"
#include "lower.h"

typedef struct bn_s {
  const tpurt_tensor_t* in;
  tpurt_dtype_t acc;            /* compute dtype */
  tpurt_dtype_t stat;           /* dtype of save_mean / save_invstd */
  int64_t dims[TPURT_MAX_RANK]; /* the reduced dims: all but 1 */
  int32_t num_dims;
  int64_t count; /* elements per channel */
} bn_t;

static TPURT_MUST_USE tpurt_status_t bn_setup(lower_ctx_t* ctx, int32_t in_arg, int32_t w_arg, bn_t* b) {
  b->in = lower_meta(ctx, in_arg);
  if (b->in->rank < 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "batch_norm: expected 2D or more input (got %dD input)",
                       (int)b->in->rank);
  if (!tpurt_dtype_is_float(b->in->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"batch_norm\" not implemented for '%s'",
                       tpurt_dtype_name(b->in->dtype));
  b->acc = lower_acc_dtype(b->in->dtype);
  const tpurt_tensor_t* w = w_arg >= 0 ? lower_meta(ctx, w_arg) : NULL;
  /* PyTorch's mixed-type rule: f32 params with a half input give f32 stats */
  b->stat = w && w->dtype != b->in->dtype ? b->acc : b->in->dtype;
  b->num_dims = 0;
  b->count = 1;
  for (int32_t d = 0; d < b->in->rank; ++d)
    if (d != 1) {
      b->dims[b->num_dims++] = d;
      b->count *= b->in->sizes[d];
    }
  return NULL;
}

/* A per-channel [C] value broadcast along dim 1 of the input's shape. */
static ir_value_t per_channel(lower_ctx_t* ctx, const bn_t* b, ir_value_t c) {
  int64_t one = 1;
  return ir_broadcast_in_dim(ctx->func, c, b->in->rank, b->in->sizes, &one);
}

/* A [C] param arg as an acc value, or |if_none|. */
static ir_value_t channel_arg(lower_ctx_t* ctx, const bn_t* b, int32_t arg, double if_none) {
  int64_t c = b->in->sizes[1];
  if (arg < 0 || !lower_meta(ctx, arg)) return ir_splat(ctx->func, b->acc, 1, &c, if_none);
  return lower_cast(ctx, lower_tensor(ctx, arg), b->acc);
}

static TPURT_MUST_USE tpurt_status_t check_channel_arg(lower_ctx_t* ctx, const bn_t* b, int32_t arg,
                                                       const char* what) {
  const tpurt_tensor_t* t = arg >= 0 ? lower_meta(ctx, arg) : NULL;
  if (t && (t->rank != 1 || t->sizes[0] != b->in->sizes[1]))
    return lower_error(TPURT_INVALID_ARGUMENT, "%s should contain %lld elements not %lld", what,
                       (long long)b->in->sizes[1], (long long)(t->rank == 1 ? t->sizes[0] : -1));
  return NULL;
}

/* running = (1 - momentum) * running + momentum * batch, written into |arg|. */
static void update_running(lower_ctx_t* ctx, const bn_t* b, int32_t arg, ir_value_t batch, int32_t momentum) {
  ir_func_t* f = ctx->func;
  ir_value_t m = lower_broadcast_to(ctx, lower_scalar(ctx, momentum, b->acc), 1, &b->in->sizes[1]);
  ir_value_t keep = ir_sub(f, ir_const_like(f, m, 1.0), m);
  ir_value_t old = lower_cast(ctx, lower_tensor(ctx, arg), b->acc);
  lower_set_write(ctx, arg, ir_add(f, ir_mul(f, keep, old), ir_mul(f, m, batch)));
}

/* Forward; |rm|/|rv| < 0 when there are none. Sets out, save_mean, save_invstd
** and, training with running stats, writes them (momentum: arg |momentum|). */
static TPURT_MUST_USE tpurt_status_t bn_forward(lower_ctx_t* ctx, int32_t w, int32_t bias, int32_t rm,
                                                int32_t rv, bool training, int32_t momentum,
                                                int32_t eps_arg) {
  bn_t b;
  TPURT_RETURN_IF_ERROR(bn_setup(ctx, 0, w, &b));
  TPURT_RETURN_IF_ERROR(check_channel_arg(ctx, &b, w, "weight"));
  TPURT_RETURN_IF_ERROR(check_channel_arg(ctx, &b, bias, "bias"));
  TPURT_RETURN_IF_ERROR(check_channel_arg(ctx, &b, rm, "running_mean"));
  TPURT_RETURN_IF_ERROR(check_channel_arg(ctx, &b, rv, "running_var"));
  bool has_running = rm >= 0 && rv >= 0 && lower_meta(ctx, rm) && lower_meta(ctx, rv);
  if (!training && !has_running)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "running_mean and running_var must be defined in evaluation mode");
  if (training && b.count <= 1)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected more than 1 value per channel when training, got input size %s",
                       lower_shape_str(b.in->rank, b.in->sizes));
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), b.acc);
  ir_value_t zero = ir_constant_f64(f, b.acc, 0.0);
  ir_value_t mean, var;
  if (training) {
    mean = ir_reduce(f, x, zero, b.dims, b.num_dims, IR_REDUCE_ADD);
    mean = ir_div(f, mean, ir_const_like(f, mean, (double)b.count));
    ir_value_t dev = ir_sub(f, x, per_channel(ctx, &b, mean));
    var = ir_reduce(f, ir_mul(f, dev, dev), zero, b.dims, b.num_dims, IR_REDUCE_ADD);
    if (has_running) {
      update_running(ctx, &b, rm, mean, momentum);
      /* the running variance is the unbiased one: sum / (count - 1) */
      update_running(ctx, &b, rv, ir_div(f, var, ir_const_like(f, var, (double)(b.count - 1))), momentum);
    }
    var = ir_div(f, var, ir_const_like(f, var, (double)b.count));
  } else {
    mean = channel_arg(ctx, &b, rm, 0.0);
    var = channel_arg(ctx, &b, rv, 1.0);
  }
  const ir_type_t* vt = ir_value_type(f, var);
  ir_value_t eps = lower_broadcast_to(ctx, lower_scalar(ctx, eps_arg, b.acc), vt->rank, vt->dims);
  ir_value_t invstd = ir_rsqrt(f, ir_add(f, var, eps));
  if (training && b.stat != b.acc) {
    /* PyTorch's CPU kernel normalises with the statistics it returns,
    ** rounded to their (half) dtype first */
    mean = lower_cast(ctx, lower_cast(ctx, mean, b.stat), b.acc);
    invstd = lower_cast(ctx, lower_cast(ctx, invstd, b.stat), b.acc);
  }
  /* y = x * scale + shift with scale = w * invstd, shift = b - mean * scale */
  ir_value_t scale = ir_mul(f, channel_arg(ctx, &b, w, 1.0), invstd);
  ir_value_t shift = ir_sub(f, channel_arg(ctx, &b, bias, 0.0), ir_mul(f, mean, scale));
  ir_value_t y = ir_add(f, ir_mul(f, x, per_channel(ctx, &b, scale)), per_channel(ctx, &b, shift));
  lower_set_result(ctx, 0, lower_cast(ctx, y, b.in->dtype));
  if (training) {
    lower_set_result(ctx, 1, lower_cast(ctx, mean, b.stat));
    lower_set_result(ctx, 2, lower_cast(ctx, invstd, b.stat));
  } else { /* PyTorch returns empty statistics in evaluation mode */
    int64_t none = 0;
    lower_set_result(ctx, 1, ir_splat(f, b.stat, 1, &none, 0.0));
    lower_set_result(ctx, 2, ir_splat(f, b.stat, 1, &none, 0.0));
  }
  return NULL;
}

/* native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps) */
static TPURT_MUST_USE tpurt_status_t lower_native_batch_norm(lower_ctx_t* ctx) {
  return bn_forward(ctx, 1, 2, 3, 4, lower_bool(ctx, 5, false), 6, 7);
}

/* _native_batch_norm_legit(input, weight?, bias?, Tensor(a!) running_mean, Tensor(b!) running_var,
** training, momentum, eps) */
static TPURT_MUST_USE tpurt_status_t lower_batch_norm_legit(lower_ctx_t* ctx) {
  return bn_forward(ctx, 1, 2, 3, 4, lower_bool(ctx, 5, true), 6, 7);
}

/* _batch_norm_with_update(input, weight?, bias?, Tensor(a!) running_mean, Tensor(b!) running_var,
** momentum, eps) -> (out, save_mean, save_invstd, reserve): always training;
** reserve is the empty byte tensor PyTorch returns off cuDNN. */
static TPURT_MUST_USE tpurt_status_t lower_batch_norm_with_update(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(bn_forward(ctx, 1, 2, 3, 4, true, 5, 6));
  int64_t none = 0;
  lower_set_result(ctx, 3, ir_splat(ctx->func, TPURT_DTYPE_U8, 1, &none, 0.0));
  return NULL;
}

/* _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps) */
static TPURT_MUST_USE tpurt_status_t lower_batch_norm_no_stats(lower_ctx_t* ctx) {
  return bn_forward(ctx, 1, 2, -1, -1, lower_bool(ctx, 3, true), 4, 5);
}

/* _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var, momentum, eps) */
static TPURT_MUST_USE tpurt_status_t lower_batch_norm_no_training(lower_ctx_t* ctx) {
  return bn_forward(ctx, 1, 2, 3, 4, false, 5, 6);
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
** save_mean?, save_invstd?, train, eps, output_mask) -> (grad_input, grad_weight, grad_bias) */
static TPURT_MUST_USE tpurt_status_t lower_native_batch_norm_backward(lower_ctx_t* ctx) {
  bn_t b;
  TPURT_RETURN_IF_ERROR(bn_setup(ctx, 1, 2, &b));
  bool train = lower_bool(ctx, 7, false);
  ir_func_t* f = ctx->func;
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 0), b.acc);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 1), b.acc);
  ir_value_t mean, invstd;
  if (train) {
    if (!lower_meta(ctx, 5) || !lower_meta(ctx, 6))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "batch_norm backward in training needs save_mean and save_invstd");
    mean = lower_cast(ctx, lower_tensor(ctx, 5), b.acc);
    invstd = lower_cast(ctx, lower_tensor(ctx, 6), b.acc);
  } else {
    if (!lower_meta(ctx, 3) || !lower_meta(ctx, 4))
      return lower_error(TPURT_INVALID_ARGUMENT, "batch_norm backward in evaluation needs the running stats");
    mean = channel_arg(ctx, &b, 3, 0.0);
    ir_value_t var = channel_arg(ctx, &b, 4, 1.0);
    const ir_type_t* vt = ir_value_type(f, var);
    ir_value_t eps = lower_broadcast_to(ctx, lower_scalar(ctx, 8, b.acc), vt->rank, vt->dims);
    invstd = ir_rsqrt(f, ir_add(f, var, eps));
  }
  ir_value_t zero = ir_constant_f64(f, b.acc, 0.0);
  ir_value_t w = channel_arg(ctx, &b, 2, 1.0);
  ir_value_t xhat = ir_mul(f, ir_sub(f, x, per_channel(ctx, &b, mean)), per_channel(ctx, &b, invstd));
  ir_value_t sum_g = ir_reduce(f, g, zero, b.dims, b.num_dims, IR_REDUCE_ADD);
  ir_value_t sum_gx = ir_reduce(f, ir_mul(f, g, xhat), zero, b.dims, b.num_dims, IR_REDUCE_ADD);
  if (lower_bool_list_item(ctx, 9, 0, true)) {
    ir_value_t scale = ir_mul(f, w, invstd);
    ir_value_t gi;
    if (train) { /* w*invstd * (g - mean(g) - xhat * mean(g*xhat)) */
      ir_value_t n = ir_const_like(f, sum_g, (double)b.count);
      ir_value_t mg = per_channel(ctx, &b, ir_div(f, sum_g, n));
      ir_value_t mgx = per_channel(ctx, &b, ir_div(f, sum_gx, n));
      gi = ir_sub(f, ir_sub(f, g, mg), ir_mul(f, xhat, mgx));
      gi = ir_mul(f, gi, per_channel(ctx, &b, scale));
    } else {
      gi = ir_mul(f, g, per_channel(ctx, &b, scale));
    }
    lower_set_result(ctx, 0, lower_cast(ctx, gi, b.in->dtype));
  } else {
    lower_set_undefined(ctx, 0);
  }
  const tpurt_tensor_t* wt = lower_meta(ctx, 2);
  tpurt_dtype_t pdt = wt ? wt->dtype : b.in->dtype;
  if (lower_bool_list_item(ctx, 9, 1, true) && wt)
    lower_set_result(ctx, 1, lower_cast(ctx, sum_gx, pdt));
  else
    lower_set_undefined(ctx, 1);
  if (lower_bool_list_item(ctx, 9, 2, true) && wt)
    lower_set_result(ctx, 2, lower_cast(ctx, sum_g, pdt));
  else
    lower_set_undefined(ctx, 2);
  return NULL;
}

const lower_rule_t lower_batch_norm_rules[] = {
    LOWER_FN("aten::_native_batch_norm_legit.no_stats", lower_batch_norm_no_stats),
    LOWER_FN("aten::_native_batch_norm_legit_no_training", lower_batch_norm_no_training),
    LOWER_FN("aten::_native_batch_norm_legit", lower_batch_norm_legit),
    LOWER_FN("aten::_batch_norm_with_update", lower_batch_norm_with_update),
    LOWER_FN("aten::native_batch_norm", lower_native_batch_norm),
    LOWER_OUT_FN("aten::native_batch_norm.out", lower_native_batch_norm),
    LOWER_FN("aten::native_batch_norm_backward", lower_native_batch_norm_backward),
    LOWER_END,
};
