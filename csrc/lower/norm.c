/* norm.c: layer norm. Statistics accumulate in f32 for half types. */
#include "../base/base.h"
#include "lower.h"

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps)
**   -> (out, mean, rstd); mean/rstd have shape input[:axis] + [1]*n. */
static tpurt_status_t lower_native_layer_norm(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t norm[TPURT_MAX_RANK];
  int32_t n = lower_ints(ctx, 1, norm, TPURT_MAX_RANK);
  int32_t axis = t->rank - n;
  bool ok = n >= 1 && axis >= 0;
  for (int32_t i = 0; ok && i < n; ++i) ok = t->sizes[axis + i] == norm[i];
  if (!ok) {
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Given normalized_shape=%s, expected input with shape [*, %s], but got input of size%s",
        lower_shape_str(n, norm), lower_shape_str(n, norm) + 1, lower_shape_str(t->rank, t->sizes));
  }
  for (int32_t w = 2; w <= 3; ++w) {
    const tpurt_tensor_t* p = lower_meta(ctx, w);
    if (!p) continue;
    bool same = p->rank == n;
    for (int32_t i = 0; same && i < n; ++i) same = p->sizes[i] == norm[i];
    if (!same)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Expected %s to be of same shape as normalized_shape, but got %s of shape %s and "
                         "normalized_shape = %s",
                         w == 2 ? "weight" : "bias", w == 2 ? "weight" : "bias",
                         lower_shape_str(p->rank, p->sizes), lower_shape_str(n, norm));
  }
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  int64_t dims[TPURT_MAX_RANK], shape[TPURT_MAX_RANK], kept[TPURT_MAX_RANK], stat_shape[TPURT_MAX_RANK];
  int64_t count = 1;
  for (int32_t i = 0; i < n; ++i) {
    dims[i] = axis + i;
    count *= norm[i];
  }
  for (int32_t i = 0; i < t->rank; ++i) {
    shape[i] = t->sizes[i];
    stat_shape[i] = i < axis ? t->sizes[i] : 1;
  }
  for (int32_t i = 0; i < axis; ++i) kept[i] = i;
  ir_value_t zero = ir_constant_f64(f, acc, 0.0);
  ir_value_t mean = ir_reduce(f, x, zero, dims, n, IR_REDUCE_ADD);
  mean = ir_binary(f, "stablehlo.divide", mean, lower_full_like(ctx, mean, (double)(count ? count : 1)));
  ir_value_t dev = ir_binary(f, "stablehlo.subtract", x, ir_broadcast_in_dim(f, mean, t->rank, shape, kept));
  ir_value_t var = ir_reduce(f, ir_binary(f, "stablehlo.multiply", dev, dev), zero, dims, n, IR_REDUCE_ADD);
  var = ir_binary(f, "stablehlo.divide", var, lower_full_like(ctx, var, (double)(count ? count : 1)));
  const ir_type_t* vt = ir_value_type(f, var);
  ir_value_t eps = vt ? lower_broadcast_to(ctx, lower_scalar(ctx, 4, acc), vt->rank, vt->dims) : IR_NONE;
  ir_value_t rstd = ir_unary(f, "stablehlo.rsqrt", ir_binary(f, "stablehlo.add", var, eps));
  ir_value_t y = ir_binary(f, "stablehlo.multiply", dev, ir_broadcast_in_dim(f, rstd, t->rank, shape, kept));
  int64_t tail[TPURT_MAX_RANK];
  for (int32_t i = 0; i < n; ++i) tail[i] = axis + i;
  if (lower_meta(ctx, 2))
    y = ir_binary(f, "stablehlo.multiply", y,
                  ir_broadcast_in_dim(f, lower_cast(ctx, lower_tensor(ctx, 2), acc), t->rank, shape, tail));
  if (lower_meta(ctx, 3))
    y = ir_binary(f, "stablehlo.add", y,
                  ir_broadcast_in_dim(f, lower_cast(ctx, lower_tensor(ctx, 3), acc), t->rank, shape, tail));
  /* mean/rstd come back in the input's dtype unless the params are of a
  ** wider type (PyTorch's mixed-type rule). */
  tpurt_dtype_t stat = t->dtype;
  const tpurt_tensor_t* w = lower_meta(ctx, 2);
  if (w && w->dtype != t->dtype) stat = acc;
  lower_set_result(ctx, 0, lower_cast(ctx, y, t->dtype));
  lower_set_result(ctx, 1, lower_cast(ctx, ir_reshape(f, mean, t->rank, stat_shape), stat));
  lower_set_result(ctx, 2, lower_cast(ctx, ir_reshape(f, rstd, t->rank, stat_shape), stat));
  return NULL;
}

const lower_rule_t lower_norm_rules[] = {
    LOWER_FN("aten::native_layer_norm", lower_native_layer_norm),
    LOWER_END,
};
