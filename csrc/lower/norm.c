/* norm.c: layer norm and group norm, forward and backward. Statistics
** and gradients accumulate in f32 for half types. (RMS norm needs no rule:
** rms_norm is a composite of pow/mean/rsqrt/mul on PrivateUse1.) */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps)
**   -> (out, mean, rstd); mean/rstd have shape input[:axis] + [1]*n. */
static TPURT_MUST_USE tpurt_status_t lower_native_layer_norm(lower_ctx_t* ctx) {
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
  mean = ir_div(f, mean, ir_const_like(f, mean, (double)(count ? count : 1)));
  ir_value_t dev = ir_sub(f, x, ir_broadcast_in_dim(f, mean, t->rank, shape, kept));
  ir_value_t var = ir_reduce(f, ir_mul(f, dev, dev), zero, dims, n, IR_REDUCE_ADD);
  var = ir_div(f, var, ir_const_like(f, var, (double)(count ? count : 1)));
  const ir_type_t* vt = ir_value_type(f, var);
  ir_value_t eps = vt ? lower_broadcast_to(ctx, lower_scalar(ctx, 4, acc), vt->rank, vt->dims) : IR_NONE;
  ir_value_t rstd = ir_rsqrt(f, ir_add(f, var, eps));
  ir_value_t y = ir_mul(f, dev, ir_broadcast_in_dim(f, rstd, t->rank, shape, kept));
  int64_t tail[TPURT_MAX_RANK];
  for (int32_t i = 0; i < n; ++i) tail[i] = axis + i;
  if (lower_meta(ctx, 2))
    y = ir_mul(f, y,
               ir_broadcast_in_dim(f, lower_cast(ctx, lower_tensor(ctx, 2), acc), t->rank, shape, tail));
  if (lower_meta(ctx, 3))
    y = ir_add(f, y,
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

/*===--- shared pieces of the normalisation gradients ---===*/

/* Sums |x| over |dims| and, with |bcast|, broadcasts the sum back to x's
** shape (the kept dims map to themselves). */
static ir_value_t sum_dims(lower_ctx_t* ctx, ir_value_t x, const int64_t* dims, int32_t n, bool bcast) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t0 = ir_value_type(f, x);
  if (!t0) return IR_NONE;
  ir_type_t t = *t0;
  ir_value_t s = ir_reduce(f, x, ir_constant_f64(f, t.dtype, 0.0), dims, n, IR_REDUCE_ADD);
  if (!bcast) return s;
  int64_t kept[TPURT_MAX_RANK];
  int32_t m = 0;
  for (int32_t i = 0; i < t.rank; ++i) {
    bool reduced = false;
    for (int32_t j = 0; j < n; ++j) reduced |= dims[j] == i;
    if (!reduced) kept[m++] = i;
  }
  return ir_broadcast_in_dim(f, s, t.rank, t.dims, kept);
}

/* The input gradient of a normalisation over |dims| (count elements each):
**   dx = rstd (g - mean(g) - x_hat mean(g x_hat)),  g = dy * gamma.
** |rstd| is already broadcast to x_hat's shape. */
static ir_value_t norm_grad_input(lower_ctx_t* ctx, ir_value_t g, ir_value_t x_hat, ir_value_t rstd,
                                  const int64_t* dims, int32_t n, int64_t count) {
  ir_func_t* f = ctx->func;
  ir_value_t inv = ir_const_like(f, g, 1.0 / (double)(count ? count : 1));
  ir_value_t mean_g = ir_mul(f, sum_dims(ctx, g, dims, n, true), inv);
  ir_value_t mean_gx = ir_mul(f, sum_dims(ctx, ir_mul(f, g, x_hat), dims, n, true), inv);
  return ir_mul(f, rstd, ir_sub(f, ir_sub(f, g, mean_g), ir_mul(f, x_hat, mean_gx)));
}

static int64_t numel_of(const tpurt_tensor_t* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->rank; ++i) n *= t->sizes[i];
  return n;
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
**   weight?, bias?, output_mask) -> (grad_input, grad_weight, grad_bias).
** A gradient that output_mask does not ask for (or of an absent weight or
** bias) is an undefined tensor, as on the CPU. */
static TPURT_MUST_USE tpurt_status_t lower_native_layer_norm_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 1), *tg = lower_meta(ctx, 0);
  int64_t norm[TPURT_MAX_RANK];
  int32_t n = lower_ints(ctx, 2, norm, TPURT_MAX_RANK);
  int32_t axis = t->rank - n;
  bool ok = n >= 1 && axis >= 0 && tg->rank == t->rank;
  for (int32_t i = 0; ok && i < n; ++i) ok = t->sizes[axis + i] == norm[i];
  for (int32_t i = 0; ok && i < t->rank; ++i) ok = tg->sizes[i] == t->sizes[i];
  if (!ok)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Given normalized_shape=%s, expected input with shape [*, %s], but got input of size%s",
        lower_shape_str(n, norm), lower_shape_str(n, norm) + 1, lower_shape_str(t->rank, t->sizes));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  int64_t rows = 1, cols = 1;
  for (int32_t i = 0; i < axis; ++i) rows *= t->sizes[i];
  for (int32_t i = 0; i < n; ++i) cols *= norm[i];
  int64_t shape[2] = {rows, cols}, d0 = 0, d1 = 1;
  ir_value_t x = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 1), acc), 2, shape);
  ir_value_t dy = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), 2, shape);
  ir_value_t mean = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 3), acc), 1, &rows);
  ir_value_t rstd = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 4), acc), 1, &rows);
  mean = ir_broadcast_in_dim(f, mean, 2, shape, &d0);
  rstd = ir_broadcast_in_dim(f, rstd, 2, shape, &d0);
  ir_value_t x_hat = ir_mul(f, ir_sub(f, x, mean), rstd);
  const tpurt_tensor_t *w = lower_meta(ctx, 5), *b = lower_meta(ctx, 6);
  ir_value_t g = dy;
  if (w) {
    if (numel_of(w) != cols)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Expected weight to be of same shape as normalized_shape, but got weight of shape %s "
          "and normalized_shape = %s",
          lower_shape_str(w->rank, w->sizes), lower_shape_str(n, norm));
    ir_value_t wv = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 5), acc), 1, &cols);
    g = ir_mul(f, dy, ir_broadcast_in_dim(f, wv, 2, shape, &d1));
  }
  if (lower_bool_list_item(ctx, 7, 0, true)) {
    ir_value_t dx = norm_grad_input(ctx, g, x_hat, rstd, &d1, 1, cols);
    lower_set_result(ctx, 0, lower_cast(ctx, ir_reshape(f, dx, t->rank, t->sizes), t->dtype));
  } else {
    lower_set_undefined(ctx, 0);
  }
  if (w && lower_bool_list_item(ctx, 7, 1, true)) {
    ir_value_t dw = ir_reshape(f, sum_dims(ctx, ir_mul(f, dy, x_hat), &d0, 1, false), n, norm);
    lower_set_result(ctx, 1, lower_cast(ctx, dw, w->dtype));
  } else {
    lower_set_undefined(ctx, 1);
  }
  if (b && lower_bool_list_item(ctx, 7, 2, true)) {
    ir_value_t db = ir_reshape(f, sum_dims(ctx, dy, &d0, 1, false), n, norm);
    lower_set_result(ctx, 2, lower_cast(ctx, db, b->dtype));
  } else {
    lower_set_undefined(ctx, 2);
  }
  return NULL;
}

/* Checks of native_group_norm(_backward): input [N, C, *] with N, C, HxW
** as given, C divisible by group, weight/bias of C elements. */
static TPURT_MUST_USE tpurt_status_t group_norm_check(lower_ctx_t* ctx, const tpurt_tensor_t* x, int64_t n,
                                                      int64_t c, int64_t hw, int64_t group, int32_t weight,
                                                      int32_t bias) {
  if (group <= 0 || c % group != 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected number of channels in input to be divisible by num_groups, but got input of "
                       "shape %s and num_groups=%lld",
                       lower_shape_str(x->rank, x->sizes), (long long)group);
  if (x->rank < 2 || x->sizes[0] != n || x->sizes[1] != c || numel_of(x) != n * c * hw)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected input of shape [%lld, %lld, *] with %lld elements, got %s", (long long)n,
                       (long long)c, (long long)(n * c * hw), lower_shape_str(x->rank, x->sizes));
  for (int32_t a = weight; a <= bias; ++a) {
    const tpurt_tensor_t* p = a >= 0 ? lower_meta(ctx, a) : NULL;
    if (p && numel_of(p) != c)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Expected %s to be a vector of size equal to the number of channels in input, but got "
          "%s of shape %s and input of shape %s",
          a == weight ? "weight" : "bias", a == weight ? "weight" : "bias",
          lower_shape_str(p->rank, p->sizes), lower_shape_str(x->rank, x->sizes));
  }
  return NULL;
}

/* A [C] param (weight or bias) as [N, G, D, HxW] (acc dtype). */
static ir_value_t group_param(lower_ctx_t* ctx, int32_t arg, tpurt_dtype_t acc, const int64_t* shape4) {
  int64_t gd[2] = {shape4[1], shape4[2]}, dims[2] = {1, 2};
  ir_value_t p = ir_reshape(ctx->func, lower_cast(ctx, lower_tensor(ctx, arg), acc), 2, gd);
  return ir_broadcast_in_dim(ctx->func, p, 4, shape4, dims);
}

/* native_group_norm(input, weight?, bias?, N, C, HxW, group, eps)
**   -> (out, mean [N, group], rstd [N, group]) */
static TPURT_MUST_USE tpurt_status_t lower_native_group_norm(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t n = lower_int(ctx, 3, 0), c = lower_int(ctx, 4, 0), hw = lower_int(ctx, 5, 0);
  int64_t group = lower_int(ctx, 6, 1);
  TPURT_RETURN_IF_ERROR(group_norm_check(ctx, t, n, c, hw, group, 1, 2));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  int64_t shape4[4] = {n, group, c / group, hw}, stat[2] = {n, group}, red[2] = {2, 3}, keep[2] = {0, 1};
  ir_value_t x = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), 4, shape4);
  double count = (double)(c / group * hw);
  ir_value_t mean = sum_dims(ctx, x, red, 2, false);
  mean = ir_mul(f, mean, ir_const_like(f, mean, 1.0 / (count > 0 ? count : 1)));
  ir_value_t dev = ir_sub(f, x, ir_broadcast_in_dim(f, mean, 4, shape4, keep));
  ir_value_t var = sum_dims(ctx, ir_mul(f, dev, dev), red, 2, false);
  var = ir_mul(f, var, ir_const_like(f, var, 1.0 / (count > 0 ? count : 1)));
  ir_value_t eps = lower_broadcast_to(ctx, lower_scalar(ctx, 7, acc), 2, stat);
  ir_value_t rstd = ir_rsqrt(f, ir_add(f, var, eps));
  ir_value_t y = ir_mul(f, dev, ir_broadcast_in_dim(f, rstd, 4, shape4, keep));
  if (lower_meta(ctx, 1)) y = ir_mul(f, y, group_param(ctx, 1, acc, shape4));
  if (lower_meta(ctx, 2)) y = ir_add(f, y, group_param(ctx, 2, acc, shape4));
  tpurt_dtype_t st = t->dtype;
  const tpurt_tensor_t* w = lower_meta(ctx, 1);
  if (w && w->dtype != t->dtype) st = acc;
  lower_set_result(ctx, 0, lower_cast(ctx, ir_reshape(f, y, t->rank, t->sizes), t->dtype));
  lower_set_result(ctx, 1, lower_cast(ctx, mean, st));
  lower_set_result(ctx, 2, lower_cast(ctx, rstd, st));
  return NULL;
}

/* native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C,
**   HxW, group, output_mask) -> (grad_input, grad_weight [C], grad_bias [C]).
** All three are computed (see layer norm backward). */
static TPURT_MUST_USE tpurt_status_t lower_native_group_norm_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 1), *tg = lower_meta(ctx, 0);
  int64_t n = lower_int(ctx, 5, 0), c = lower_int(ctx, 6, 0), hw = lower_int(ctx, 7, 0);
  int64_t group = lower_int(ctx, 8, 1);
  TPURT_RETURN_IF_ERROR(group_norm_check(ctx, t, n, c, hw, group, 4, 4));
  if (numel_of(tg) != numel_of(t))
    return lower_error(TPURT_INVALID_ARGUMENT, "Expected grad_out of shape %s, got %s",
                       lower_shape_str(t->rank, t->sizes), lower_shape_str(tg->rank, tg->sizes));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  int64_t shape4[4] = {n, group, c / group, hw}, stat[2] = {n, group}, red[2] = {2, 3}, keep[2] = {0, 1};
  int64_t wred[2] = {0, 3};
  ir_value_t x = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 1), acc), 4, shape4);
  ir_value_t dy = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), 4, shape4);
  ir_value_t mean = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 2), acc), 2, stat);
  ir_value_t rstd = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 3), acc), 2, stat);
  mean = ir_broadcast_in_dim(f, mean, 4, shape4, keep);
  rstd = ir_broadcast_in_dim(f, rstd, 4, shape4, keep);
  ir_value_t x_hat = ir_mul(f, ir_sub(f, x, mean), rstd);
  const tpurt_tensor_t* w = lower_meta(ctx, 4);
  ir_value_t g = w ? ir_mul(f, dy, group_param(ctx, 4, acc, shape4)) : dy;
  tpurt_dtype_t pd = w ? w->dtype : t->dtype;
  if (lower_bool_list_item(ctx, 9, 0, true)) {
    ir_value_t dx = norm_grad_input(ctx, g, x_hat, rstd, red, 2, c / group * hw);
    lower_set_result(ctx, 0, lower_cast(ctx, ir_reshape(f, dx, t->rank, t->sizes), t->dtype));
  } else {
    lower_set_undefined(ctx, 0);
  }
  if (lower_bool_list_item(ctx, 9, 1, w != NULL)) {
    ir_value_t dw = ir_reshape(f, sum_dims(ctx, ir_mul(f, dy, x_hat), wred, 2, false), 1, &c);
    lower_set_result(ctx, 1, lower_cast(ctx, dw, pd));
  } else {
    lower_set_undefined(ctx, 1);
  }
  if (lower_bool_list_item(ctx, 9, 2, true)) {
    ir_value_t db = ir_reshape(f, sum_dims(ctx, dy, wred, 2, false), 1, &c);
    lower_set_result(ctx, 2, lower_cast(ctx, db, pd));
  } else {
    lower_set_undefined(ctx, 2);
  }
  return NULL;
}

/* renorm(self, p, dim, maxnorm): each slice along |dim| whose p-norm (over
** all other dims) exceeds maxnorm is scaled by maxnorm / (norm + 1e-7), as
** CPU. p and maxnorm are runtime parameters: p = inf is chosen by a select. */
static TPURT_MUST_USE tpurt_status_t lower_renorm(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "renorm: expected a floating point input, got %s",
                       lower_dtype_cpp_name(t->dtype));
  if (lower_scalar_value(ctx, 1) <= 0.0)
    return lower_error(TPURT_INVALID_ARGUMENT, "renorm: non-positive-norm not supported");
  if (lower_scalar_value(ctx, 3) < 0.0)
    return lower_error(TPURT_INVALID_ARGUMENT, "renorm: expected maxnorm to be >= 0 but got %g",
                       lower_scalar_value(ctx, 3));
  if (t->rank <= 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "renorm: input needs at least 2 dimensions, got %d dimensions",
                       (int)t->rank);
  int64_t dim = 0;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 2, t->rank, &dim));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_value_t ax = ir_abs(f, x);
  int64_t others[TPURT_MAX_RANK];
  int32_t n = 0;
  for (int32_t i = 0; i < t->rank; ++i)
    if (i != dim) others[n++] = i;
  ir_value_t p = lower_scalar(ctx, 1, acc);
  ir_value_t pp = lower_broadcast_to(ctx, p, t->rank, t->sizes);
  ir_value_t sum = ir_reduce(f, ir_pow(f, ax, pp), ir_constant_f64(f, acc, 0.0), others, n, IR_REDUCE_ADD);
  int64_t one_dim[1] = {t->sizes[dim]};
  ir_value_t inv_p = ir_div(f, ir_constant_f64(f, acc, 1.0), p);
  ir_value_t general = ir_pow(f, sum, lower_broadcast_to(ctx, inv_p, 1, one_dim));
  ir_value_t amax = ir_reduce(f, ax, ir_constant_f64(f, acc, 0.0), others, n, IR_REDUCE_MAX);
  ir_value_t is_inf = ir_compare(f, IR_EQ, p, ir_constant_f64(f, acc, INFINITY));
  ir_value_t norm = ir_select(f, lower_broadcast_to(ctx, is_inf, 1, one_dim), amax, general);
  ir_value_t maxnorm = lower_broadcast_to(ctx, lower_scalar(ctx, 3, acc), 1, one_dim);
  ir_value_t scale = ir_div(f, maxnorm, ir_add(f, norm, ir_const_like(f, norm, 1e-7)));
  scale = ir_select(f, ir_compare(f, IR_GT, norm, maxnorm), scale, ir_const_like(f, norm, 1.0));
  int64_t bdim[1] = {dim};
  scale = ir_broadcast_in_dim(f, scale, t->rank, t->sizes, bdim);
  lower_set_result(ctx, 0, lower_cast(ctx, ir_mul(f, x, scale), t->dtype));
  return NULL;
}

const lower_rule_t lower_norm_rules[] = {
    LOWER_FN("aten::renorm", lower_renorm),
    LOWER_OUT_FN("aten::renorm.out", lower_renorm),
    LOWER_FN("aten::native_group_norm", lower_native_group_norm),
    LOWER_FN("aten::native_group_norm_backward", lower_native_group_norm_backward),
    LOWER_FN("aten::native_layer_norm", lower_native_layer_norm),
    LOWER_FN("aten::native_layer_norm_backward", lower_native_layer_norm_backward),
    LOWER_END,
};
