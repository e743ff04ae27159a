/* misc.c: scans (cumsum, cumprod, logcumsumexp), sorting (sort, topk, kthvalue, median), repeat_interleave
** with a known output size, linspace, logsumexp, the smaller activations
** (mish, hardswish, hardsigmoid, leaky_relu, elu, softplus) and the rest of
** unary math (inverse and hyperbolic trig, erfinv, exp2, log10, sgn, frac).
** Half types compute in f32 and round once at the end, as PyTorch's CPU
** kernels do. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/*===--- small helpers ---===*/

static bool is_float(tpurt_dtype_t d) { return tpurt_dtype_is_float(d); }
static ir_value_t k(lower_ctx_t* ctx, ir_value_t like, double v) { return lower_full_like(ctx, like, v); }
static ir_value_t bin(lower_ctx_t* ctx, const char* op, ir_value_t a, ir_value_t b) {
  return ir_binary(ctx->func, op, a, b);
}
static ir_value_t mul(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return bin(ctx, "stablehlo.multiply", a, b);
}
static ir_value_t add(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return bin(ctx, "stablehlo.add", a, b);
}
static ir_value_t sub(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return bin(ctx, "stablehlo.subtract", a, b);
}
static ir_value_t un(lower_ctx_t* ctx, const char* op, ir_value_t x) { return ir_unary(ctx->func, op, x); }

/* A Scalar arg as a runtime parameter broadcast to |like|'s shape. */
static ir_value_t scalar_like(lower_ctx_t* ctx, int32_t arg, ir_value_t like, double if_none) {
  const ir_type_t* t = ir_value_type(ctx->func, like);
  if (!t) return IR_NONE;
  ir_type_t ty = *t;
  ir_value_t s = lower_is_none(ctx, arg) ? ir_constant_f64(ctx->func, ty.dtype, if_none)
                                         : lower_scalar(ctx, arg, ty.dtype);
  return lower_broadcast_to(ctx, s, ty.rank, ty.dims);
}

/* The error PyTorch's CPU kernels give for a dtype they do not dispatch. */
static tpurt_status_t need_float(lower_ctx_t* ctx, const char* kernel) {
  tpurt_dtype_t d = lower_meta(ctx, 0)->dtype;
  if (!is_float(d))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'", kernel,
                       tpurt_dtype_name(d));
  return NULL;
}

/* trunc(x) = x < 0 ? ceil(x) : floor(x) */
static ir_value_t trunc_value(lower_ctx_t* ctx, ir_value_t x) {
  ir_value_t neg = ir_compare(ctx->func, IR_LT, x, k(ctx, x, 0.0));
  return ir_select(ctx->func, neg, un(ctx, "stablehlo.ceil", x), un(ctx, "stablehlo.floor", x));
}

/*===--- cumsum / cumprod ---===*/

/* Inclusive scan with |op| along |dim| (log-step shifted combines; the
** shifted-in elements are |identity|). */
static ir_value_t scan(lower_ctx_t* ctx, ir_value_t x, int64_t dim, const char* op, double identity) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t0 = ir_value_type(f, x);
  if (!t0) return IR_NONE;
  ir_type_t t = *t0;
  ir_value_t pad_value = is_float(t.dtype) ? ir_constant_f64(f, t.dtype, identity)
                                           : ir_constant_i64(f, t.dtype, (int64_t)identity);
  for (int64_t shift = 1; shift < t.dims[dim]; shift *= 2) {
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, in[TPURT_MAX_RANK] = {0};
    int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t.rank; ++i) li[i] = t.dims[i], one[i] = 1;
    lo[dim] = shift;
    ir_value_t shifted = ir_slice(f, ir_pad(f, x, pad_value, lo, hi, in), st, li, one);
    x = ir_binary(f, op, x, shifted);
  }
  return x;
}

/* cumsum(self, dim, *, dtype=None): ints and bool accumulate in int64. */
static tpurt_status_t cumulative(lower_ctx_t* ctx, bool prod) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, 0), t->rank, &dim));
  tpurt_dtype_t out = lower_dtype(ctx, 2, TPURT_DTYPE_INVALID);
  if (out == TPURT_DTYPE_INVALID) out = is_float(t->dtype) ? t->dtype : TPURT_DTYPE_I64;
  tpurt_dtype_t acc = lower_acc_dtype(out);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  if (t->rank > 0) x = prod ? scan(ctx, x, dim, "stablehlo.multiply", 1.0) : lower_cumsum(ctx, x, dim);
  lower_set_result(ctx, 0, lower_cast(ctx, x, out));
  return NULL;
}

static tpurt_status_t lower_cumsum_rule(lower_ctx_t* ctx) { return cumulative(ctx, false); }
static tpurt_status_t lower_cumprod(lower_ctx_t* ctx) { return cumulative(ctx, true); }

/*===--- sort / topk ---===*/

/* Stable sort of |x| along |dim| with its int64 indices. NaN is larger than
** every number (last ascending, first descending), as in PyTorch. */
static void sort_with_indices(lower_ctx_t* ctx, ir_value_t x, int64_t dim, bool descending,
                              ir_value_t* values, ir_value_t* indices) {
  ir_func_t* f = ctx->func;
  const ir_type_t* xt = ir_value_type(f, x);
  if (!xt) {
    *values = *indices = IR_NONE;
    return;
  }
  ir_type_t it = *xt;
  it.dtype = TPURT_DTYPE_I64;
  tpurt_dtype_t d = xt->dtype;
  ir_value_t inputs[2] = {x, ir_iota(f, it, (int32_t)dim)}, res[2], blk[4];
  ir_sort_begin(f, inputs, 2, dim, true, res, blk);
  ir_value_t a = blk[0], b = blk[1];
  ir_value_t before = ir_compare(f, descending ? IR_GT : IR_LT, a, b);
  if (is_float(d)) {
    ir_value_t a_nan = ir_compare(f, IR_NE, a, a), b_nan = ir_compare(f, IR_NE, b, b);
    ir_value_t nan_first = descending
                               ? ir_binary(f, "stablehlo.and", a_nan, ir_unary(f, "stablehlo.not", b_nan))
                               : ir_binary(f, "stablehlo.and", b_nan, ir_unary(f, "stablehlo.not", a_nan));
    before = ir_binary(f, "stablehlo.or", before, nan_first);
  }
  ir_region_end(f, &before, 1);
  *values = res[0];
  *indices = res[1];
}

/* sort.stable(self, *, stable, dim=-1, descending=False); CPU sorts stably
** whatever |stable| says, and so do we. */
static tpurt_status_t lower_sort(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 2, -1), t->rank, &dim));
  bool descending = lower_bool(ctx, 3, false);
  ir_value_t x = lower_tensor(ctx, 0);
  if (t->rank == 0 || t->sizes[dim] <= 1) {
    lower_set_result(ctx, 0, x);
    lower_set_result(ctx, 1, lower_splat(ctx, TPURT_DTYPE_I64, t->rank, t->sizes, 0.0));
    return NULL;
  }
  ir_value_t v, i;
  sort_with_indices(ctx, x, dim, descending, &v, &i);
  lower_set_result(ctx, 0, v);
  lower_set_result(ctx, 1, i);
  return NULL;
}

/* topk(self, k, dim=-1, largest=True, sorted=True): a sort and a slice. */
static tpurt_status_t lower_topk(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 2, -1), t->rank, &dim));
  int64_t kk = lower_int(ctx, 1, 0);
  int64_t size = t->rank ? t->sizes[dim] : 1;
  if (kk < 0 || kk > size) return lower_error(TPURT_INVALID_ARGUMENT, "selected index k out of range");
  bool largest = lower_bool(ctx, 3, true);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  if (t->rank == 0) {
    lower_set_result(ctx, 0, x);
    lower_set_result(ctx, 1, ir_constant_i64(f, TPURT_DTYPE_I64, 0));
    return NULL;
  }
  ir_value_t v, i;
  if (size <= 1) {
    v = x;
    i = lower_splat(ctx, TPURT_DTYPE_I64, t->rank, t->sizes, 0.0);
  } else {
    sort_with_indices(ctx, x, dim, largest, &v, &i);
  }
  int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
  for (int32_t d = 0; d < t->rank; ++d) li[d] = t->sizes[d], one[d] = 1;
  li[dim] = kk;
  lower_set_result(ctx, 0, ir_slice(f, v, st, li, one));
  lower_set_result(ctx, 1, ir_slice(f, i, st, li, one));
  return NULL;
}

/*===--- kthvalue / median / nanmedian ---===*/

/* The element at sorted position |pos| (a value shaped like the reduced row,
** int64) along |dim| of the sorted |v| and its index |i|: a select and a sum
** over the dim (no gather needed: exactly one position matches). */
static void pick_sorted(lower_ctx_t* ctx, ir_value_t v, ir_value_t i, int64_t dim, ir_value_t pos,
                        ir_value_t* out_v, ir_value_t* out_i) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, v);
  ir_type_t it = *t;
  it.dtype = TPURT_DTYPE_I64;
  int64_t bd[TPURT_MAX_RANK], n = 0;
  for (int32_t d = 0; d < t->rank; ++d)
    if (d != dim) bd[n++] = d;
  ir_value_t hit =
      ir_compare(f, IR_EQ, ir_iota(f, it, (int32_t)dim), ir_broadcast_in_dim(f, pos, t->rank, t->dims, bd));
  tpurt_dtype_t acc = t->dtype == TPURT_DTYPE_BOOL ? TPURT_DTYPE_I64 : t->dtype;
  ir_value_t vv = lower_cast(ctx, v, acc);
  *out_v = lower_cast(ctx,
                      ir_reduce(f, ir_select(f, hit, vv, lower_full_like(ctx, vv, 0.0)),
                                ir_constant_f64(f, acc, 0.0), &dim, 1, IR_REDUCE_ADD),
                      t->dtype);
  *out_i = ir_reduce(f, ir_select(f, hit, i, lower_full_like(ctx, i, 0.0)),
                     ir_constant_i64(f, TPURT_DTYPE_I64, 0), &dim, 1, IR_REDUCE_ADD);
}

/* Adds the reduced dim back as size 1 when |keepdim|. */
static ir_value_t keep_dim(lower_ctx_t* ctx, ir_value_t v, const tpurt_tensor_t* t, int64_t dim,
                           bool keepdim) {
  if (!keepdim || t->rank == 0) return v;
  int64_t shape[TPURT_MAX_RANK];
  for (int32_t d = 0; d < t->rank; ++d) shape[d] = d == dim ? 1 : t->sizes[d];
  return ir_reshape(ctx->func, v, t->rank, shape);
}

typedef enum order_stat_e { STAT_KTH, STAT_MEDIAN, STAT_NANMEDIAN } order_stat_t;

/* Sorted position per row: k - 1; the lower median ((n - 1) / 2) or, for a
** row with a NaN, the first NaN (sorted last, so at the count of numbers);
** nanmedian: the lower median of the numbers alone. */
static tpurt_status_t order_stat(lower_ctx_t* ctx, order_stat_t which, int64_t dim, bool has_dim, int64_t k,
                                 bool keepdim) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  tpurt_tensor_t flat = *t;
  if (!has_dim || t->rank == 0) { /* the whole tensor as one row */
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; ++d) n *= t->sizes[d];
    if (n == 0) return lower_error(TPURT_INVALID_ARGUMENT, "median() input tensor cannot be empty");
    x = ir_reshape(f, x, 1, &n);
    flat.rank = 1;
    flat.sizes[0] = n;
    dim = 0;
  } else if (t->sizes[dim] == 0) {
    return lower_error(TPURT_INVALID_ARGUMENT, "median() cannot compute median for a dimension of size 0");
  }
  int64_t size = flat.sizes[dim];
  if (which == STAT_KTH && (k < 1 || k > size))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "kthvalue(): selected number k out of range for dimension %lld", (long long)dim);
  ir_value_t v, i;
  sort_with_indices(ctx, x, dim, false, &v, &i);
  int64_t row[TPURT_MAX_RANK], rank = 0;
  for (int32_t d = 0; d < flat.rank; ++d)
    if (d != dim) row[rank++] = flat.sizes[d];
  ir_value_t pos;
  if (which == STAT_KTH) {
    pos = lower_splat(ctx, TPURT_DTYPE_I64, (int32_t)rank, row, (double)(k - 1));
  } else {
    ir_value_t nan = is_float(t->dtype) ? ir_convert(f, ir_compare(f, IR_NE, x, x), TPURT_DTYPE_I64)
                                        : lower_splat(ctx, TPURT_DTYPE_I64, flat.rank, flat.sizes, 0.0);
    ir_value_t nans = ir_reduce(f, nan, ir_constant_i64(f, TPURT_DTYPE_I64, 0), &dim, 1, IR_REDUCE_ADD);
    ir_value_t numbers = ir_binary(f, "stablehlo.subtract", lower_full_like(ctx, nans, (double)size), nans);
    if (which == STAT_MEDIAN) {
      ir_value_t mid = lower_full_like(ctx, nans, (double)((size - 1) / 2));
      pos = ir_select(f, ir_compare(f, IR_GT, nans, lower_full_like(ctx, nans, 0.0)), numbers, mid);
    } else { /* (numbers - 1) / 2, 0 when the row is all NaN */
      ir_value_t m =
          ir_binary(f, "stablehlo.divide",
                    ir_binary(f, "stablehlo.subtract", numbers, lower_full_like(ctx, numbers, 1.0)),
                    lower_full_like(ctx, numbers, 2.0));
      pos = ir_binary(f, "stablehlo.maximum", m, lower_full_like(ctx, m, 0.0));
    }
  }
  ir_value_t rv, ri;
  pick_sorted(ctx, v, i, dim, pos, &rv, &ri);
  if (!has_dim) {
    lower_set_result(ctx, 0, rv);
    return NULL;
  }
  lower_set_result(ctx, 0, keep_dim(ctx, rv, t, dim, keepdim));
  lower_set_result(ctx, 1, keep_dim(ctx, ri, t, dim, keepdim));
  return NULL;
}

/* kthvalue(self, k, dim=-1, keepdim=False) -> (values, indices) */
static tpurt_status_t lower_kthvalue(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 2, -1), t->rank, &dim));
  return order_stat(ctx, STAT_KTH, dim, true, lower_int(ctx, 1, 1), lower_bool(ctx, 3, false));
}

static tpurt_status_t median_dim(lower_ctx_t* ctx, order_stat_t which) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, 0), t->rank, &dim));
  return order_stat(ctx, which, dim, true, 0, lower_bool(ctx, 2, false));
}

static tpurt_status_t lower_median(lower_ctx_t* ctx) {
  return order_stat(ctx, STAT_MEDIAN, 0, false, 0, false);
}
static tpurt_status_t lower_nanmedian(lower_ctx_t* ctx) {
  return order_stat(ctx, STAT_NANMEDIAN, 0, false, 0, false);
}
static tpurt_status_t lower_median_dim(lower_ctx_t* ctx) { return median_dim(ctx, STAT_MEDIAN); }
static tpurt_status_t lower_nanmedian_dim(lower_ctx_t* ctx) { return median_dim(ctx, STAT_NANMEDIAN); }

/*===--- logcumsumexp ---===*/

/* log(exp(a) + exp(b)) without overflow; two equal infinities give themselves. */
static ir_value_t log_add_exp(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  ir_value_t m = ir_binary(f, "stablehlo.maximum", a, b);
  ir_value_t d = ir_unary(f, "stablehlo.abs", ir_binary(f, "stablehlo.subtract", a, b));
  ir_value_t r =
      ir_binary(f, "stablehlo.add", m,
                ir_unary(f, "stablehlo.log_plus_one",
                         ir_unary(f, "stablehlo.exponential", ir_unary(f, "stablehlo.negate", d))));
  ir_value_t same_inf = ir_binary(f, "stablehlo.and", ir_compare(f, IR_EQ, a, b),
                                  ir_compare(f, IR_EQ, ir_unary(f, "stablehlo.abs", a), k(ctx, a, INFINITY)));
  return ir_select(f, same_inf, a, r);
}

/* _logcumsumexp(self, dim): the log-step scan of lower_cumsum with
** log-add-exp in place of add and -inf shifted in. */
static tpurt_status_t lower_logcumsumexp(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "logcumsumexp(): expected a floating point input, got %s",
                       tpurt_dtype_name(t->dtype));
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  if (t->rank == 0) {
    lower_set_result(ctx, 0, x);
    return NULL;
  }
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, 0), t->rank, &dim));
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  x = lower_cast(ctx, x, acc);
  ir_value_t neg_inf = ir_constant_f64(f, acc, -INFINITY);
  for (int64_t shift = 1; shift < t->sizes[dim]; shift *= 2) {
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, in[TPURT_MAX_RANK] = {0};
    int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t->rank; ++i) li[i] = t->sizes[i], one[i] = 1;
    lo[dim] = shift;
    ir_value_t shifted = ir_slice(f, ir_pad(f, x, neg_inf, lo, hi, in), st, li, one);
    x = log_add_exp(ctx, x, shifted);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, x, t->dtype));
  return NULL;
}

/*===--- repeat_interleave ---===*/

/* repeat_interleave.Tensor(repeats, *, output_size=None): index i repeated
** repeats[i] times. The size is the sum of the data, so only the form with
** output_size is lowered (the CPU takes the other): out[j] counts the
** running totals at or below j. */
static tpurt_status_t lower_repeat_interleave(lower_ctx_t* ctx) {
  const tpurt_tensor_t* r = lower_meta(ctx, 0);
  if (r->dtype != TPURT_DTYPE_I64 && r->dtype != TPURT_DTYPE_I32)
    return lower_error(TPURT_INVALID_ARGUMENT, "repeats has to be Long or Int tensor");
  if (r->rank != 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "repeat_interleave only accept 1D vector as repeat");
  if (lower_is_none(ctx, 1))
    return lower_error(TPURT_UNIMPLEMENTED, "repeat_interleave needs output_size on tpu");
  int64_t out_n = lower_int(ctx, 1, 0), n = r->sizes[0];
  ir_func_t* f = ctx->func;
  if (out_n == 0 || n == 0) {
    lower_set_result(ctx, 0, lower_splat(ctx, r->dtype, 1, &out_n, 0.0));
    return NULL;
  }
  ir_value_t totals = lower_cumsum(ctx, lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_I64), 0);
  int64_t dims[2] = {out_n, n};
  ir_value_t j = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, dims), 0);
  int64_t bd = 1;
  ir_value_t tot = ir_broadcast_in_dim(f, totals, 2, dims, &bd);
  ir_value_t below = lower_cast(ctx, ir_compare(f, IR_LE, tot, j), TPURT_DTYPE_I64);
  int64_t red = 1;
  ir_value_t out = ir_reduce(f, below, ir_constant_i64(f, TPURT_DTYPE_I64, 0), &red, 1, IR_REDUCE_ADD);
  lower_set_result(ctx, 0, lower_cast(ctx, out, r->dtype));
  return NULL;
}

/*===--- linspace ---===*/

/* linspace.out(start, end, steps, *, out): the first half counts up from
** start, the second half down from end, as PyTorch's CPU kernel does (ints
** step in double, then truncate). */
/* |base_arg| >= 0: logspace, base ** (the linspace values), the power taken
** in double as PyTorch's kernel takes std::pow(double base, exponent). */
static tpurt_status_t linspace_or_logspace(lower_ctx_t* ctx, int32_t base_arg) {
  int64_t steps = lower_int(ctx, 2, 0);
  if (steps < 0) return lower_error(TPURT_INVALID_ARGUMENT, "number of steps must be non-negative");
  const tpurt_arg_t* out = &ctx->args[ctx->arg_index[ctx->num_args]];
  tpurt_dtype_t dt = out->kind == TPURT_ARG_TENSOR ? out->u.tensor.dtype : LOWER_DEFAULT_FLOAT;
  tpurt_dtype_t math = is_float(dt) ? lower_acc_dtype(dt) : TPURT_DTYPE_F64;
  ir_func_t* f = ctx->func;
  if (steps <= 1) {
    ir_value_t s = lower_scalar(ctx, 0, is_float(dt) ? math : dt);
    if (base_arg >= 0)
      s = ir_binary(f, "stablehlo.power", lower_scalar(ctx, base_arg, TPURT_DTYPE_F64),
                    lower_cast(ctx, s, TPURT_DTYPE_F64));
    s = lower_cast(ctx, s, dt);
    lower_set_result(ctx, 0, steps == 0 ? lower_splat(ctx, dt, 1, &steps, 0.0) : ir_reshape(f, s, 1, &steps));
    return NULL;
  }
  /* start and end first take the output's type, as Scalar::to<T> does */
  tpurt_dtype_t endpoint = is_float(dt) ? math : dt;
  ir_value_t start = lower_cast(ctx, lower_scalar(ctx, 0, endpoint), math);
  ir_value_t end = lower_cast(ctx, lower_scalar(ctx, 1, endpoint), math);
  ir_value_t step =
      bin(ctx, "stablehlo.divide", sub(ctx, end, start), ir_constant_f64(f, math, (double)(steps - 1)));
  ir_value_t idx = ir_iota(f, ir_type_make(math, 1, &steps), 0);
  ir_value_t up = add(ctx, lower_broadcast_to(ctx, start, 1, &steps),
                      mul(ctx, lower_broadcast_to(ctx, step, 1, &steps), idx));
  ir_value_t rest = sub(ctx, k(ctx, idx, (double)(steps - 1)), idx);
  ir_value_t down = sub(ctx, lower_broadcast_to(ctx, end, 1, &steps),
                        mul(ctx, lower_broadcast_to(ctx, step, 1, &steps), rest));
  ir_value_t first_half = ir_compare(f, IR_LT, idx, k(ctx, idx, (double)(steps / 2)));
  ir_value_t v = ir_select(f, first_half, up, down);
  if (base_arg >= 0) {
    ir_value_t e = lower_cast(ctx, v, TPURT_DTYPE_F64);
    v = ir_binary(f, "stablehlo.power",
                  lower_broadcast_to(ctx, lower_scalar(ctx, base_arg, TPURT_DTYPE_F64), 1, &steps), e);
  }
  if (!is_float(dt)) v = trunc_value(ctx, v);
  lower_set_result(ctx, 0, lower_cast(ctx, v, dt));
  return NULL;
}

static tpurt_status_t lower_linspace(lower_ctx_t* ctx) { return linspace_or_logspace(ctx, -1); }
/* logspace.out(start, end, steps, base, *, out) */
static tpurt_status_t lower_logspace(lower_ctx_t* ctx) { return linspace_or_logspace(ctx, 3); }

/*===--- logsumexp ---===*/

/* logsumexp(self, dim, keepdim=False): max-shifted; an infinite max shifts
** by 0 (PyTorch's masked_fill), so all -inf gives -inf and +inf gives inf. */
static tpurt_status_t lower_logsumexp(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t out = is_float(t->dtype) ? t->dtype : LOWER_DEFAULT_FLOAT;
  tpurt_dtype_t acc = lower_acc_dtype(out);
  int64_t raw[TPURT_MAX_RANK * 2], dims[TPURT_MAX_RANK];
  bool mask[TPURT_MAX_RANK] = {0};
  int32_t m = lower_ints(ctx, 1, raw, TPURT_MAX_RANK * 2), n = 0;
  for (int32_t i = 0; i < m; ++i) {
    int64_t d;
    TPURT_RETURN_IF_ERROR(lower_wrap_dim(raw[i], t->rank, &d));
    if (t->rank == 0) continue;
    if (mask[d])
      return lower_error(TPURT_INVALID_ARGUMENT, "dim %lld appears multiple times in the list of dims",
                         (long long)d);
    mask[d] = true;
  }
  for (int32_t i = 0; i < t->rank; ++i) {
    if (m == 0) mask[i] = true;
    if (mask[i]) dims[n++] = i;
  }
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_value_t mx = ir_reduce(f, x, ir_constant_f64(f, acc, -INFINITY), dims, n, IR_REDUCE_MAX);
  ir_value_t inf = ir_compare(f, IR_EQ, un(ctx, "stablehlo.abs", mx), k(ctx, mx, INFINITY));
  mx = ir_select(f, inf, k(ctx, mx, 0.0), mx);
  int64_t shape[TPURT_MAX_RANK], kept[TPURT_MAX_RANK], j = 0;
  for (int32_t i = 0; i < t->rank; ++i) {
    shape[i] = t->sizes[i];
    if (!mask[i]) kept[j++] = i;
  }
  ir_value_t e =
      un(ctx, "stablehlo.exponential", sub(ctx, x, ir_broadcast_in_dim(f, mx, t->rank, shape, kept)));
  ir_value_t s = ir_reduce(f, e, ir_constant_f64(f, acc, 0.0), dims, n, IR_REDUCE_ADD);
  ir_value_t r = lower_cast(ctx, add(ctx, un(ctx, "stablehlo.log", s), mx), out);
  if (lower_bool(ctx, 2, false)) {
    for (int32_t i = 0; i < t->rank; ++i) shape[i] = mask[i] ? 1 : t->sizes[i];
    r = ir_reshape(f, r, t->rank, shape);
  }
  lower_set_result(ctx, 0, r);
  return NULL;
}

/*===--- activations ---===*/

/* Reads self in its compute type; the result dtype is self's. */
static ir_value_t self_acc(lower_ctx_t* ctx, tpurt_dtype_t* dt) {
  *dt = lower_meta(ctx, 0)->dtype;
  return lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(*dt));
}

/* log1p(exp(x * beta)) / beta, or x where x * beta > threshold */
static ir_value_t softplus_value(lower_ctx_t* ctx, ir_value_t x, ir_value_t beta, ir_value_t threshold) {
  ir_value_t xb = beta == IR_NONE ? x : mul(ctx, x, beta);
  ir_value_t sp = un(ctx, "stablehlo.log_plus_one", un(ctx, "stablehlo.exponential", xb));
  if (beta != IR_NONE) sp = bin(ctx, "stablehlo.divide", sp, beta);
  return ir_select(ctx->func, ir_compare(ctx->func, IR_GT, xb, threshold), x, sp);
}

static tpurt_status_t lower_softplus(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, "softplus_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  ir_value_t y = softplus_value(ctx, x, scalar_like(ctx, 1, x, 1.0), scalar_like(ctx, 2, x, 20.0));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

/* mish(x) = x * tanh(softplus(x)) (beta 1, threshold 20) */
static tpurt_status_t lower_mish(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, "mish_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  ir_value_t y = mul(ctx, x, un(ctx, "stablehlo.tanh", softplus_value(ctx, x, IR_NONE, k(ctx, x, 20.0))));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

/* hardsigmoid(x) = clamp(x + 3, 0, 6) / 6; hardswish(x) = x * that */
static tpurt_status_t hard(lower_ctx_t* ctx, bool swish) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, swish ? "hardswish_cpu" : "hardsigmoid_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  ir_func_t* f = ctx->func;
  ir_value_t c = ir_clamp(f, ir_constant_f64(f, lower_acc_dtype(dt), 0.0), add(ctx, x, k(ctx, x, 3.0)),
                          ir_constant_f64(f, lower_acc_dtype(dt), 6.0));
  ir_value_t y = bin(ctx, "stablehlo.divide", swish ? mul(ctx, x, c) : c, k(ctx, x, 6.0));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

static tpurt_status_t lower_hardswish(lower_ctx_t* ctx) { return hard(ctx, true); }
static tpurt_status_t lower_hardsigmoid(lower_ctx_t* ctx) { return hard(ctx, false); }

/* leaky_relu(self, negative_slope=0.01) */
static tpurt_status_t lower_leaky_relu(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, "leaky_relu_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  ir_value_t pos = ir_compare(ctx->func, IR_GT, x, k(ctx, x, 0.0));
  ir_value_t y = ir_select(ctx->func, pos, x, mul(ctx, x, scalar_like(ctx, 1, x, 0.01)));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

/* elu(self, alpha=1, scale=1, input_scale=1):
** x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale */
static tpurt_status_t lower_elu(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, "elu_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  ir_value_t scale = scalar_like(ctx, 2, x, 1.0);
  ir_value_t neg =
      mul(ctx, un(ctx, "stablehlo.exponential_minus_one", mul(ctx, x, scalar_like(ctx, 3, x, 1.0))),
          mul(ctx, scalar_like(ctx, 1, x, 1.0), scale));
  ir_value_t pos = ir_compare(ctx->func, IR_GT, x, k(ctx, x, 0.0));
  lower_set_result(ctx, 0, lower_cast(ctx, ir_select(ctx->func, pos, mul(ctx, x, scale), neg), dt));
  return NULL;
}

/*===--- unary math ---===*/

/* Ints and bool become float32; half types compute in f32. */
static ir_value_t float_self(lower_ctx_t* ctx, tpurt_dtype_t* dt) {
  tpurt_dtype_t in = lower_meta(ctx, 0)->dtype;
  *dt = is_float(in) ? in : LOWER_DEFAULT_FLOAT;
  return lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(*dt));
}

static tpurt_status_t float_unary(lower_ctx_t* ctx, const char* op) {
  tpurt_dtype_t dt;
  ir_value_t x = float_self(ctx, &dt);
  lower_set_result(ctx, 0, lower_cast(ctx, un(ctx, op, x), dt));
  return NULL;
}

static tpurt_status_t lower_asin(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.asin"); }
static tpurt_status_t lower_acos(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.acos"); }
static tpurt_status_t lower_atan(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.atan"); }
static tpurt_status_t lower_sinh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.sinh"); }
static tpurt_status_t lower_cosh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.cosh"); }
static tpurt_status_t lower_asinh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.asinh"); }
static tpurt_status_t lower_acosh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.acosh"); }
static tpurt_status_t lower_atanh(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.atanh"); }
static tpurt_status_t lower_erfinv(lower_ctx_t* ctx) { return float_unary(ctx, "chlo.erf_inv"); }

static tpurt_status_t lower_exp2(lower_ctx_t* ctx) {
  tpurt_dtype_t dt;
  ir_value_t x = float_self(ctx, &dt);
  lower_set_result(ctx, 0, lower_cast(ctx, bin(ctx, "stablehlo.power", k(ctx, x, 2.0), x), dt));
  return NULL;
}

static tpurt_status_t lower_log10(lower_ctx_t* ctx) {
  tpurt_dtype_t dt;
  ir_value_t x = float_self(ctx, &dt);
  ir_value_t y = mul(ctx, un(ctx, "stablehlo.log", x), k(ctx, x, 1.0 / M_LN10));
  lower_set_result(ctx, 0, lower_cast(ctx, y, dt));
  return NULL;
}

/* sgn (real): (x > 0) - (x < 0), so nan and -0 give 0; bool is itself. */
static tpurt_status_t lower_sgn(lower_ctx_t* ctx) {
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  ir_value_t x = lower_tensor(ctx, 0);
  if (dt == TPURT_DTYPE_BOOL) {
    lower_set_result(ctx, 0, x);
    return NULL;
  }
  if (!is_float(dt)) {
    lower_set_result(ctx, 0, un(ctx, "stablehlo.sign", x));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  ir_value_t zero = k(ctx, x, 0.0), one = k(ctx, x, 1.0);
  ir_value_t pos = ir_select(f, ir_compare(f, IR_GT, x, zero), one, zero);
  ir_value_t neg = ir_select(f, ir_compare(f, IR_LT, x, zero), one, zero);
  lower_set_result(ctx, 0, sub(ctx, pos, neg));
  return NULL;
}

/* frac(x) = x - trunc(x); floats only, as on CPU. */
static tpurt_status_t lower_frac(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(need_float(ctx, "frac_cpu"));
  tpurt_dtype_t dt;
  ir_value_t x = self_acc(ctx, &dt);
  lower_set_result(ctx, 0, lower_cast(ctx, sub(ctx, x, trunc_value(ctx, x)), dt));
  return NULL;
}

/*===--- pieces of PyTorch's _safe_softmax composite ---===*/

/* isneginf / isposinf: ints never are. */
static tpurt_status_t is_signed_inf(lower_ctx_t* ctx, double inf) {
  ir_value_t x = lower_tensor(ctx, 0);
  if (!is_float(lower_meta(ctx, 0)->dtype)) {
    lower_set_result(ctx, 0, ir_compare(ctx->func, IR_NE, x, x));
    return NULL;
  }
  lower_set_result(ctx, 0, ir_compare(ctx->func, IR_EQ, x, k(ctx, x, inf)));
  return NULL;
}

static tpurt_status_t lower_isneginf(lower_ctx_t* ctx) { return is_signed_inf(ctx, -INFINITY); }
static tpurt_status_t lower_isposinf(lower_ctx_t* ctx) { return is_signed_inf(ctx, INFINITY); }

/* all.dim / any.dim(self, dim, keepdim=False): uint8 stays uint8. */
static tpurt_status_t all_any_dim(lower_ctx_t* ctx, bool any) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 1, 0), t->rank, &dim));
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_BOOL);
  if (t->rank > 0) {
    x = ir_reduce(f, x, ir_constant_i64(f, TPURT_DTYPE_BOOL, any ? 0 : 1), &dim, 1,
                  any ? IR_REDUCE_OR : IR_REDUCE_AND);
    if (lower_bool(ctx, 2, false)) {
      int64_t shape[TPURT_MAX_RANK];
      for (int32_t i = 0; i < t->rank; ++i) shape[i] = i == dim ? 1 : t->sizes[i];
      x = ir_reshape(f, x, t->rank, shape);
    }
  }
  if (t->dtype == TPURT_DTYPE_U8) x = ir_convert(f, x, TPURT_DTYPE_U8);
  lower_set_result(ctx, 0, x);
  return NULL;
}

static tpurt_status_t lower_all_dim(lower_ctx_t* ctx) { return all_any_dim(ctx, false); }
static tpurt_status_t lower_any_dim(lower_ctx_t* ctx) { return all_any_dim(ctx, true); }

/* Sorted by name. In-place forms (leaky_relu_...) resolve to these rows. */
const lower_rule_t lower_misc_rules[] = {
    LOWER_FN("aten::_logcumsumexp", lower_logcumsumexp),
    LOWER_OUT_FN("aten::_logcumsumexp.out", lower_logcumsumexp),
    LOWER_FN("aten::acos", lower_acos),
    LOWER_FN("aten::acosh", lower_acosh),
    LOWER_FN("aten::all.dim", lower_all_dim),
    LOWER_FN("aten::any.dim", lower_any_dim),
    LOWER_FN("aten::asin", lower_asin),
    LOWER_FN("aten::asinh", lower_asinh),
    LOWER_FN("aten::atan", lower_atan),
    LOWER_FN("aten::atanh", lower_atanh),
    LOWER_FN("aten::cosh", lower_cosh),
    LOWER_FN("aten::cumprod", lower_cumprod),
    LOWER_FN("aten::cumsum", lower_cumsum_rule),
    LOWER_OUT_FN("aten::cumsum.out", lower_cumsum_rule),
    LOWER_FN("aten::elu", lower_elu),
    LOWER_OUT_FN("aten::elu.out", lower_elu),
    LOWER_FN("aten::erfinv", lower_erfinv),
    LOWER_FN("aten::exp2", lower_exp2),
    LOWER_FN("aten::frac", lower_frac),
    LOWER_FN("aten::hardsigmoid", lower_hardsigmoid),
    LOWER_FN("aten::hardswish", lower_hardswish),
    LOWER_FN("aten::isneginf", lower_isneginf),
    LOWER_FN("aten::isposinf", lower_isposinf),
    LOWER_FN("aten::kthvalue", lower_kthvalue),
    LOWER_OUT_FN("aten::kthvalue.values", lower_kthvalue),
    LOWER_FN("aten::leaky_relu", lower_leaky_relu),
    LOWER_OUT_FN("aten::linspace.out", lower_linspace),
    LOWER_OUT_FN("aten::logspace.out", lower_logspace),
    LOWER_FN("aten::log10", lower_log10),
    LOWER_FN("aten::logsumexp", lower_logsumexp),
    LOWER_FN("aten::median", lower_median),
    LOWER_FN("aten::median.dim", lower_median_dim),
    LOWER_OUT_FN("aten::median.dim_values", lower_median_dim),
    LOWER_FN("aten::mish", lower_mish),
    LOWER_FN("aten::nanmedian", lower_nanmedian),
    LOWER_FN("aten::nanmedian.dim", lower_nanmedian_dim),
    LOWER_OUT_FN("aten::nanmedian.dim_values", lower_nanmedian_dim),
    LOWER_FN("aten::repeat_interleave.Tensor", lower_repeat_interleave),
    LOWER_FN("aten::sgn", lower_sgn),
    LOWER_FN("aten::sinh", lower_sinh),
    LOWER_FN("aten::softplus", lower_softplus),
    LOWER_OUT_FN("aten::softplus.out", lower_softplus),
    LOWER_FN("aten::sort.stable", lower_sort),
    LOWER_OUT_FN("aten::sort.values_stable", lower_sort),
    LOWER_FN("aten::topk", lower_topk),
    LOWER_OUT_FN("aten::topk.values", lower_topk),
    LOWER_END,
};
