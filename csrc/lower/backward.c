/* backward.c: the gradients autograd asks for in a training step:
** activation backwards, softmax/log_softmax backward, and the losses
** (mse, nll) forward and backward. Half types compute in f32 and round once,
** as PyTorch's CPU kernels do. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/* Reads tensor args |a| and |b| broadcast to their common shape in the
** computation dtype of |dt|; *out_dt is the result dtype (promoted). */
static TPURT_MUST_USE tpurt_status_t pair(lower_ctx_t* ctx, int32_t a, int32_t b, ir_value_t* va,
                                          ir_value_t* vb, tpurt_dtype_t* out_dt) {
  const tpurt_tensor_t *ta = lower_meta(ctx, a), *tb = lower_meta(ctx, b);
  if (!ta || !tb) return lower_error(TPURT_INVALID_ARGUMENT, "expected two tensors");
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(ta->rank, ta->sizes, tb->rank, tb->sizes, &rank, dims));
  tpurt_dtype_t dt = lower_promote(ta->dtype, tb->dtype);
  if (!tpurt_dtype_is_float(dt))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'", "backward",
                       tpurt_dtype_name(dt));
  tpurt_dtype_t acc = lower_acc_dtype(dt);
  *va = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, a), acc), rank, dims);
  *vb = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, b), acc), rank, dims);
  *out_dt = dt;
  return NULL;
}

/*===--- activations: (grad_output, self or output) -> grad_input ---===*/

/* gelu_backward(grad_output, self, approximate="none"|"tanh") */
static TPURT_MUST_USE tpurt_status_t lower_gelu_backward(lower_ctx_t* ctx) {
  ir_value_t g, x;
  tpurt_dtype_t dt;
  TPURT_RETURN_IF_ERROR(pair(ctx, 0, 1, &g, &x, &dt));
  const char* approx = lower_str(ctx, 2, "none");
  ir_func_t* f = ctx->func;
  ir_value_t d;
  if (strcmp(approx, "tanh") == 0) {
    /* u = b (x + c x^3); d = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) b (1 + 3 c x^2) */
    const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
    ir_value_t x2 = ir_mul(f, x, x);
    ir_value_t inner = ir_mul(f, ir_const_like(f, x, beta),
                              ir_add(f, x, ir_mul(f, ir_const_like(f, x, kappa), ir_mul(f, x2, x))));
    ir_value_t t = ir_unary(f, IR_OP_TANH, inner);
    ir_value_t left = ir_mul(f, ir_const_like(f, x, 0.5), x);
    ir_value_t left_d = ir_mul(f, ir_const_like(f, x, 0.5), ir_add(f, ir_const_like(f, x, 1.0), t));
    ir_value_t right_d =
        ir_mul(f, ir_sub(f, ir_const_like(f, x, 1.0), ir_mul(f, t, t)),
               ir_mul(f, ir_const_like(f, x, beta),
                      ir_add(f, ir_const_like(f, x, 1.0), ir_mul(f, ir_const_like(f, x, 3 * kappa), x2))));
    d = ir_add(f, left_d, ir_mul(f, left, right_d));
  } else if (strcmp(approx, "none") == 0) {
    /* cdf + x pdf */
    ir_value_t cdf = ir_mul(f, ir_const_like(f, x, 0.5),
                            ir_add(f, ir_const_like(f, x, 1.0),
                                   ir_unary(f, IR_OP_ERF, ir_mul(f, x, ir_const_like(f, x, M_SQRT1_2)))));
    ir_value_t pdf = ir_mul(f, ir_const_like(f, x, M_2_SQRTPI * M_SQRT1_2 * 0.5),
                            ir_exp(f, ir_mul(f, ir_const_like(f, x, -0.5), ir_mul(f, x, x))));
    d = ir_add(f, cdf, ir_mul(f, x, pdf));
  } else {
    return lower_error(TPURT_INVALID_ARGUMENT, "approximate argument must be either none or tanh.");
  }
  lower_set_result(ctx, 0, lower_cast(ctx, ir_mul(f, g, d), dt));
  return NULL;
}

/* silu_backward(grad_output, self): g s (1 + x (1 - s)), s = sigmoid(x) */
static TPURT_MUST_USE tpurt_status_t lower_silu_backward(lower_ctx_t* ctx) {
  ir_value_t g, x;
  tpurt_dtype_t dt;
  TPURT_RETURN_IF_ERROR(pair(ctx, 0, 1, &g, &x, &dt));
  ir_value_t s = ir_unary(ctx->func, IR_OP_LOGISTIC, x);
  ir_value_t d = ir_mul(ctx->func, s,
                        ir_add(ctx->func, ir_const_like(ctx->func, x, 1.0),
                               ir_mul(ctx->func, x, ir_sub(ctx->func, ir_const_like(ctx->func, x, 1.0), s))));
  lower_set_result(ctx, 0, lower_cast(ctx, ir_mul(ctx->func, g, d), dt));
  return NULL;
}

/* threshold_backward(grad_output, self, threshold): self <= threshold ? 0 : g */
static TPURT_MUST_USE tpurt_status_t lower_threshold_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t *tg = lower_meta(ctx, 0), *tx = lower_meta(ctx, 1);
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(tg->rank, tg->sizes, tx->rank, tx->sizes, &rank, dims));
  tpurt_dtype_t dt = lower_promote(tg->dtype, tx->dtype);
  ir_value_t g = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), dt), rank, dims);
  ir_value_t x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), dt), rank, dims);
  ir_value_t th = lower_broadcast_to(ctx, lower_scalar(ctx, 2, dt), rank, dims);
  ir_value_t keep = ir_compare(ctx->func, IR_LE, x, th);
  lower_set_result(ctx, 0, ir_select(ctx->func, keep, ir_const_like(ctx->func, g, 0.0), g));
  return NULL;
}

/* sigmoid_backward(grad_output, output): g (1 - y) y */
static TPURT_MUST_USE tpurt_status_t lower_sigmoid_backward(lower_ctx_t* ctx) {
  ir_value_t g, y;
  tpurt_dtype_t dt;
  TPURT_RETURN_IF_ERROR(pair(ctx, 0, 1, &g, &y, &dt));
  lower_set_result(
      ctx, 0,
      lower_cast(
          ctx,
          ir_mul(ctx->func, ir_mul(ctx->func, g, ir_sub(ctx->func, ir_const_like(ctx->func, y, 1.0), y)), y),
          dt));
  return NULL;
}

/* tanh_backward(grad_output, output): g (1 - y^2) */
static TPURT_MUST_USE tpurt_status_t lower_tanh_backward(lower_ctx_t* ctx) {
  ir_value_t g, y;
  tpurt_dtype_t dt;
  TPURT_RETURN_IF_ERROR(pair(ctx, 0, 1, &g, &y, &dt));
  lower_set_result(
      ctx, 0,
      lower_cast(
          ctx,
          ir_mul(ctx->func, g, ir_sub(ctx->func, ir_const_like(ctx->func, y, 1.0), ir_mul(ctx->func, y, y))),
          dt));
  return NULL;
}

/* hardswish_backward(grad_output, self):
**   x < -3: 0;  x <= 3: g (x / 3 + 0.5);  else g */
static TPURT_MUST_USE tpurt_status_t lower_hardswish_backward(lower_ctx_t* ctx) {
  ir_value_t g, x;
  tpurt_dtype_t dt;
  TPURT_RETURN_IF_ERROR(pair(ctx, 0, 1, &g, &x, &dt));
  ir_func_t* f = ctx->func;
  ir_value_t mid = ir_mul(f, g, ir_add(f, ir_div(f, x, ir_const_like(f, x, 3.0)), ir_const_like(f, x, 0.5)));
  ir_value_t r = ir_select(f, ir_compare(f, IR_LE, x, ir_const_like(f, x, 3.0)), mid, g);
  r = ir_select(f, ir_compare(f, IR_LT, x, ir_const_like(f, x, -3.0)), ir_const_like(f, x, 0.0), r);
  lower_set_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

/*===--- softmax family ---===*/

/* _softmax_backward_data(grad_output, output, dim, input_dtype):
**   y (g - sum(g y, dim));  log: g - exp(y) sum(g, dim). */
static TPURT_MUST_USE tpurt_status_t softmax_backward(lower_ctx_t* ctx) {
  bool log = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t *tg = lower_meta(ctx, 0), *ty = lower_meta(ctx, 1);
  bool same = tg->rank == ty->rank;
  for (int32_t i = 0; same && i < tg->rank; ++i) same = tg->sizes[i] == ty->sizes[i];
  if (!same)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "grad_output and output must have the same shape, got %s and %s",
                       lower_shape_str(tg->rank, tg->sizes), lower_shape_str(ty->rank, ty->sizes));
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 2, tg->rank, &dim));
  tpurt_dtype_t out = lower_dtype(ctx, 3, tg->dtype);
  tpurt_dtype_t acc = lower_acc_dtype(lower_promote(tg->dtype, ty->dtype));
  ir_func_t* f = ctx->func;
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_value_t y = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  if (tg->rank == 0) { /* softmax of a scalar is constant */
    lower_set_result(ctx, 0, lower_cast(ctx, log ? g : ir_const_like(f, g, 0.0), out));
    return NULL;
  }
  int64_t bdims[TPURT_MAX_RANK], j = 0;
  for (int32_t i = 0; i < tg->rank; ++i)
    if (i != dim) bdims[j++] = i;
  ir_value_t zero = ir_constant_f64(f, acc, 0.0);
  ir_value_t r;
  if (log) {
    ir_value_t s = ir_reduce(f, g, zero, &dim, 1, IR_REDUCE_ADD);
    s = ir_broadcast_in_dim(f, s, tg->rank, tg->sizes, bdims);
    r = ir_sub(f, g, ir_mul(f, ir_exp(f, y), s));
  } else {
    ir_value_t s = ir_reduce(f, ir_mul(f, g, y), zero, &dim, 1, IR_REDUCE_ADD);
    s = ir_broadcast_in_dim(f, s, tg->rank, tg->sizes, bdims);
    r = ir_mul(f, y, ir_sub(f, g, s));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, r, out));
  return NULL;
}

/*===--- losses ---===*/

enum { REDUCTION_NONE = 0, REDUCTION_MEAN = 1, REDUCTION_SUM = 2 };

static TPURT_MUST_USE tpurt_status_t check_reduction(int64_t r) {
  if (r < REDUCTION_NONE || r > REDUCTION_SUM)
    return lower_error(TPURT_INVALID_ARGUMENT, "%lld is not a valid value for reduction", (long long)r);
  return NULL;
}

/* Sums every element of |x| to a 0-d value. */
static ir_value_t sum_all(lower_ctx_t* ctx, ir_value_t x) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) dims[i] = i;
  return ir_reduce(ctx->func, x, ir_constant_f64(ctx->func, t->dtype, 0.0), dims, t->rank, IR_REDUCE_ADD);
}

/* mse_loss(self, target, reduction=mean) */
static TPURT_MUST_USE tpurt_status_t lower_mse_loss(lower_ctx_t* ctx) {
  int64_t reduction = lower_int(ctx, 2, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  ir_value_t x, t;
  tpurt_dtype_t dt;
  TPURT_RETURN_IF_ERROR(pair(ctx, 0, 1, &x, &t, &dt));
  ir_value_t d = ir_sub(ctx->func, x, t);
  ir_value_t sq = ir_mul(ctx->func, d, d);
  if (reduction != REDUCTION_NONE) {
    int64_t n = ir_type_numel(ir_value_type(ctx->func, sq));
    sq = sum_all(ctx, sq);
    if (reduction == REDUCTION_MEAN) /* 0/0 = nan for an empty input, as PyTorch */
      sq = ir_div(ctx->func, sq, ir_const_like(ctx->func, sq, (double)n));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, sq, dt));
  return NULL;
}

/* mse_loss_backward(grad_output, self, target, reduction): norm (x - t) g,
** norm = 2 / numel for mean, else 2. */
static TPURT_MUST_USE tpurt_status_t lower_mse_loss_backward(lower_ctx_t* ctx) {
  int64_t reduction = lower_int(ctx, 3, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  const tpurt_tensor_t *tg = lower_meta(ctx, 0), *tx = lower_meta(ctx, 1), *tt = lower_meta(ctx, 2);
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(tx->rank, tx->sizes, tt->rank, tt->sizes, &rank, dims));
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, tg->rank, tg->sizes, &rank, dims));
  tpurt_dtype_t dt = lower_promote(lower_promote(tx->dtype, tt->dtype), tg->dtype);
  tpurt_dtype_t acc = lower_acc_dtype(dt);
  ir_value_t g = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), rank, dims);
  ir_value_t x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), acc), rank, dims);
  ir_value_t t = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 2), acc), rank, dims);
  int64_t numel = 1;
  for (int32_t i = 0; i < tx->rank; ++i) numel *= tx->sizes[i];
  double norm = reduction == REDUCTION_MEAN ? 2.0 / (double)numel : 2.0;
  ir_value_t r =
      ir_mul(ctx->func, ir_mul(ctx->func, ir_const_like(ctx->func, x, norm), ir_sub(ctx->func, x, t)), g);
  lower_set_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

/* Shared checks of nll_loss_forward/backward: self [N, C] or [C], target
** [N] or [], weight [C]. Fills n (0 for unbatched) and c. */
static TPURT_MUST_USE tpurt_status_t nll_check(lower_ctx_t* ctx, int32_t self, int32_t target, int32_t weight,
                                               int64_t* n, int64_t* c) {
  const tpurt_tensor_t *x = lower_meta(ctx, self), *t = lower_meta(ctx, target), *w = lower_meta(ctx, weight);
  if (x->rank < 1 || x->rank > 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "input tensor should be 1D or 2D");
  if (t->rank > 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "0D or 1D target tensor expected, multi-target not supported");
  bool no_batch = x->rank == 1 && t->rank == 0;
  if (!no_batch && x->sizes[0] != (t->rank ? t->sizes[0] : 1))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected input batch_size (%lld) to match target batch_size (%lld).",
                       (long long)x->sizes[0], (long long)(t->rank ? t->sizes[0] : 1));
  if (tpurt_dtype_is_float(t->dtype) || t->dtype == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "expected scalar type Long but found %s",
                       tpurt_dtype_name(t->dtype));
  if (!tpurt_dtype_is_float(x->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"nll_loss_out_frame\" not implemented for '%s'",
                       tpurt_dtype_name(x->dtype));
  *c = x->sizes[x->rank - 1];
  *n = x->rank == 2 ? x->sizes[0] : 0;
  if (w && (w->rank != 1 || w->sizes[0] != *c)) {
    int64_t numel = 1;
    for (int32_t i = 0; i < w->rank; ++i) numel *= w->sizes[i];
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "weight tensor should be defined either for all %lld classes or no classes but got "
                       "weight tensor of shape: %s",
                       (long long)*c, lower_shape_str(w->rank, w->sizes));
  }
  return NULL;
}

/* The [rows, C] pieces of nll: which class each row picks (one-hot, false
** for ignored rows) and each row's weight w[target] (0 when ignored). */
static void nll_pick(lower_ctx_t* ctx, int64_t rows, int64_t c, int32_t target, int32_t weight,
                     int32_t ignore_index, tpurt_dtype_t acc, ir_value_t* out_onehot, ir_value_t* out_wpick) {
  ir_func_t* f = ctx->func;
  int64_t shape[2] = {rows, c};
  int64_t row_dim = 0;
  ir_value_t t = lower_cast(ctx, lower_tensor(ctx, target), TPURT_DTYPE_I64);
  t = ir_reshape(f, t, 1, &rows);
  ir_value_t tb = ir_broadcast_in_dim(f, t, 2, shape, &row_dim);
  ir_value_t cls = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, shape), 1);
  ir_value_t ignore = ir_constant_i64(f, TPURT_DTYPE_I64, lower_int(ctx, ignore_index, -100));
  ir_value_t valid = ir_compare(f, IR_NE, tb, ir_broadcast_in_dim(f, ignore, 2, shape, NULL));
  ir_value_t onehot = ir_and(f, ir_compare(f, IR_EQ, tb, cls), valid);
  ir_value_t w;
  if (lower_meta(ctx, weight)) {
    int64_t col_dim = 1;
    w = ir_broadcast_in_dim(f, lower_cast(ctx, lower_tensor(ctx, weight), acc), 2, shape, &col_dim);
  } else {
    w = ir_splat(f, acc, 2, shape, 1.0);
  }
  *out_onehot = onehot;
  *out_wpick = ir_select(f, onehot, w, ir_splat(f, acc, 2, shape, 0.0));
}

/* nll_loss_forward(self, target, weight?, reduction, ignore_index)
**   -> (output, total_weight) */
static TPURT_MUST_USE tpurt_status_t lower_nll_loss_forward(lower_ctx_t* ctx) {
  int64_t n, c;
  TPURT_RETURN_IF_ERROR(nll_check(ctx, 0, 1, 2, &n, &c));
  int64_t reduction = lower_int(ctx, 3, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  const tpurt_tensor_t* xt = lower_meta(ctx, 0);
  tpurt_dtype_t dt = xt->dtype, acc = lower_acc_dtype(dt);
  ir_func_t* f = ctx->func;
  int64_t rows = n ? n : 1, shape[2] = {rows, c};
  ir_value_t x = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), 2, shape);
  ir_value_t onehot, wpick;
  nll_pick(ctx, rows, c, 1, 2, 4, acc, &onehot, &wpick);
  /* per row: -w[t] x[t]; the other classes add exact zeros */
  ir_value_t picked = ir_select(f, onehot, ir_neg(f, ir_mul(f, x, wpick)), ir_splat(f, acc, 2, shape, 0.0));
  int64_t cdim = 1;
  ir_value_t per_row = ir_reduce(f, picked, ir_constant_f64(f, acc, 0.0), &cdim, 1, IR_REDUCE_ADD);
  ir_value_t total = sum_all(ctx, wpick);
  ir_value_t out;
  if (reduction == REDUCTION_NONE && n) {
    out = per_row;
    total = ir_const_like(f, total, 0.0);
  } else {
    out = sum_all(ctx, per_row);
    if (reduction == REDUCTION_MEAN) out = ir_div(f, out, total);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, out, dt));
  lower_set_result(ctx, 1, lower_cast(ctx, total, dt));
  return NULL;
}

/* nll_loss_backward(grad_output, self, target, weight?, reduction,
**   ignore_index, total_weight): -w[t] g at the target class, else 0. */
static TPURT_MUST_USE tpurt_status_t lower_nll_loss_backward(lower_ctx_t* ctx) {
  int64_t n, c;
  TPURT_RETURN_IF_ERROR(nll_check(ctx, 1, 2, 3, &n, &c));
  int64_t reduction = lower_int(ctx, 4, REDUCTION_MEAN);
  TPURT_RETURN_IF_ERROR(check_reduction(reduction));
  const tpurt_tensor_t *xt = lower_meta(ctx, 1), *gt = lower_meta(ctx, 0);
  tpurt_dtype_t dt = xt->dtype, acc = lower_acc_dtype(dt);
  ir_func_t* f = ctx->func;
  int64_t rows = n ? n : 1, shape[2] = {rows, c};
  ir_value_t onehot, wpick;
  nll_pick(ctx, rows, c, 2, 3, 5, acc, &onehot, &wpick);
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  int64_t row_dim = 0;
  if (reduction == REDUCTION_NONE && n) {
    if (gt->rank != 1 || gt->sizes[0] != n)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Expected a tensor of dimension 1 and tensor.size[0] == %lld but got: dimension %d "
                         "and tensor.size[0] == %lld",
                         (long long)n, gt->rank, (long long)(gt->rank ? gt->sizes[0] : 1));
    g = ir_broadcast_in_dim(f, g, 2, shape, &row_dim);
  } else {
    int64_t numel = 1;
    for (int32_t i = 0; i < gt->rank; ++i) numel *= gt->sizes[i];
    if (numel != 1)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Expected a single element grad_output tensor, but got: %lld", (long long)numel);
    g = ir_reshape(f, g, 0, NULL);
    if (reduction == REDUCTION_MEAN) {
      ir_value_t total = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 6), acc), 0, NULL);
      g = ir_div(f, g, total);
    }
    g = ir_broadcast_in_dim(f, g, 2, shape, NULL);
  }
  ir_value_t r = ir_neg(f, ir_mul(f, wpick, g));
  r = ir_select(f, onehot, r, ir_splat(f, acc, 2, shape, 0.0));
  lower_set_result(ctx, 0, lower_cast(ctx, ir_reshape(f, r, xt->rank, xt->sizes), dt));
  return NULL;
}

/* nll_loss_forward(self, target, weight, reduction, ignore_index) and
** nll_loss_backward(grad_output, self, target, weight, reduction,
** ignore_index, total_weight): a target is a class of self, or ignore_index
** (checked before the op runs, checks.c). */
#define NLL_TARGET \
  .index = {       \
      .arg = 1, .of = 0, .ignore_arg = 4, .bound = LOWER_BOUND_CLASSES, .error = LOWER_INDEX_ERROR_TARGET}
#define NLL_BACKWARD_TARGET \
  .index = {                \
      .arg = 2, .of = 1, .ignore_arg = 5, .bound = LOWER_BOUND_CLASSES, .error = LOWER_INDEX_ERROR_TARGET}

const lower_rule_t lower_backward_rules[] = {
    LOWER_FN_WITH("aten::_log_softmax_backward_data", softmax_backward, .flag = true),
    LOWER_OUT_FN_WITH("aten::_log_softmax_backward_data.out", softmax_backward, .flag = true),
    LOWER_FN("aten::_softmax_backward_data", softmax_backward),
    LOWER_OUT_FN("aten::_softmax_backward_data.out", softmax_backward),
    LOWER_FN("aten::gelu_backward", lower_gelu_backward),
    LOWER_OUT_FN("aten::gelu_backward.grad_input", lower_gelu_backward),
    LOWER_FN("aten::hardswish_backward", lower_hardswish_backward),
    LOWER_FN("aten::mse_loss", lower_mse_loss),
    LOWER_OUT_FN("aten::mse_loss.out", lower_mse_loss),
    LOWER_FN("aten::mse_loss_backward", lower_mse_loss_backward),
    LOWER_OUT_FN("aten::mse_loss_backward.grad_input", lower_mse_loss_backward),
    LOWER_FN_WITH("aten::nll_loss_backward", lower_nll_loss_backward, NLL_BACKWARD_TARGET),
    LOWER_OUT_FN_WITH("aten::nll_loss_backward.grad_input", lower_nll_loss_backward, NLL_BACKWARD_TARGET),
    LOWER_FN_WITH("aten::nll_loss_forward", lower_nll_loss_forward, NLL_TARGET),
    LOWER_OUT_FN_WITH("aten::nll_loss_forward.output", lower_nll_loss_forward, NLL_TARGET),
    LOWER_FN("aten::sigmoid_backward", lower_sigmoid_backward),
    LOWER_OUT_FN("aten::sigmoid_backward.grad_input", lower_sigmoid_backward),
    LOWER_FN("aten::silu_backward", lower_silu_backward),
    LOWER_OUT_FN("aten::silu_backward.grad_input", lower_silu_backward),
    LOWER_FN("aten::tanh_backward", lower_tanh_backward),
    LOWER_OUT_FN("aten::tanh_backward.grad_input", lower_tanh_backward),
    LOWER_FN("aten::threshold_backward", lower_threshold_backward),
    LOWER_OUT_FN("aten::threshold_backward.grad_input", lower_threshold_backward),
    LOWER_END,
};
