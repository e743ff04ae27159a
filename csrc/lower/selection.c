/* selection.c: ops whose output size depends on the data (nonzero,
** masked_select, unique, unique_consecutive). The engine counts first (a device-to-host sync, as on
** CUDA) and hands the count in as a trailing INT arg, so each distinct
** count is its own program shape. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

/* tpurt::count_nonzero(self) -> i64 scalar: the engine's counting pass. */
static TPURT_MUST_USE tpurt_status_t lower_count_nonzero(lower_ctx_t* ctx) {
  ir_value_t x = lower_tensor(ctx, 0);
  ir_value_t nz = lower_cast(ctx, lower_cast(ctx, x, TPURT_DTYPE_BOOL), TPURT_DTYPE_I64);
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) dims[i] = i;
  lower_set_result(
      ctx, 0,
      ir_reduce(ctx->func, nz, ir_constant_i64(ctx->func, TPURT_DTYPE_I64, 0), dims, t->rank, IR_REDUCE_ADD));
  return NULL;
}

/* lower.h: a prefix sum gives each kept element its slot, the others
** scatter out of bounds and are dropped. */
ir_value_t lower_compact(lower_ctx_t* ctx, ir_value_t mask, ir_value_t values, int64_t count) {
  ir_func_t* f = ctx->func;
  const ir_type_t* vt = ir_value_type(f, values);
  if (!vt) return IR_NONE;
  tpurt_dtype_t dt = vt->dtype;
  int64_t n = vt->dims[0];
  ir_value_t m = lower_cast(ctx, mask, TPURT_DTYPE_I64);
  ir_value_t pos = ir_sub(f, lower_cumsum(ctx, m, 0), ir_const_like(f, m, 1.0));
  ir_value_t target = ir_select(f, mask, pos, ir_const_like(f, pos, (double)count));
  int64_t idx_dims[2] = {n, 1};
  target = ir_reshape(f, target, 2, idx_dims);
  ir_value_t base = ir_splat(f, dt, 1, &count, 0.0);
  ir_scatter_dims_t s = lower_scatter_dims_along(1, 0);
  ir_value_t blk[2];
  ir_value_t out = ir_scatter_begin(f, base, target, values, &s, blk);
  ir_region_end(f, &blk[1], 1);
  return out;
}

/* The coordinates [rows, rank] (int64) of the first |rows| nonzero elements
** of self (arg 0, rank >= 1, |n| > 0 elements), in row-major order; rows
** past the nonzero count hold zeros. *mask gets self as a flat bool [n]. */
static ir_value_t nonzero_coords(lower_ctx_t* ctx, int64_t n, int64_t rows, ir_value_t* mask) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_func_t* f = ctx->func;
  *mask = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), TPURT_DTYPE_BOOL), 1, &n);
  ir_value_t flat = lower_compact(ctx, *mask, ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 1, &n), 0), rows);
  ir_value_t cols[TPURT_MAX_RANK];
  int64_t stride = 1;
  int64_t col_dims[2] = {rows, 1};
  for (int32_t d = t->rank - 1; d >= 0; --d) {
    ir_value_t c = ir_div(f, flat, ir_const_like(f, flat, (double)stride));
    c = ir_binary(f, IR_OP_REMAINDER, c, ir_const_like(f, c, (double)t->sizes[d]));
    cols[d] = ir_reshape(f, c, 2, col_dims);
    stride *= t->sizes[d];
  }
  return t->rank == 1 ? cols[0] : ir_concatenate(f, cols, t->rank, 1);
}

/* Sets *n to self's element count. With no coordinates to find (no rows,
** a 0-d or empty self), sets the result [rows, rank] to |fill| and says so. */
static bool nonzero_none(lower_ctx_t* ctx, int64_t rows, double fill, int64_t* n) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  *n = 1;
  for (int32_t i = 0; i < t->rank; ++i) *n *= t->sizes[i];
  if (rows != 0 && t->rank != 0 && *n != 0) return false;
  int64_t out_dims[2] = {rows, t->rank};
  lower_set_result(ctx, 0, ir_splat(ctx->func, TPURT_DTYPE_I64, 2, out_dims, fill));
  return true;
}

/* nonzero(self) -> [count, rank] int64 */
static TPURT_MUST_USE tpurt_status_t lower_nonzero(lower_ctx_t* ctx) {
  int64_t count = lower_int(ctx, 1, 0), n;
  if (nonzero_none(ctx, count, 0.0, &n)) return NULL;
  ir_value_t mask;
  lower_set_result(ctx, 0, nonzero_coords(ctx, n, count, &mask));
  return NULL;
}

/* nonzero_static(self, *, size, fill_value=-1) -> [size, rank] int64: the
** first |size| nonzero coordinates (a static size: no counting pass), the
** rows past the count filled with fill_value. */
static TPURT_MUST_USE tpurt_status_t lower_nonzero_static(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t size = lower_int(ctx, 1, 0), fill = lower_int(ctx, 2, -1);
  if (size < 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "nonzero_static: 'size' must be an non-negative integer");
  int64_t n;
  if (nonzero_none(ctx, size, (double)fill, &n)) return NULL;
  ir_func_t* f = ctx->func;
  int64_t out_dims[2] = {size, t->rank};
  ir_value_t mask;
  ir_value_t coords = nonzero_coords(ctx, n, size, &mask);
  int64_t all = 0;
  ir_value_t count = ir_reduce(f, lower_cast(ctx, mask, TPURT_DTYPE_I64),
                               ir_constant_i64(f, TPURT_DTYPE_I64, 0), &all, 1, IR_REDUCE_ADD);
  ir_value_t row = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, out_dims), 0);
  ir_value_t past = ir_compare(f, IR_GE, row, ir_broadcast_in_dim(f, count, 2, out_dims, NULL));
  lower_set_result(ctx, 0, ir_select(f, past, ir_const_like(f, coords, (double)fill), coords));
  return NULL;
}

/* histc(self, bins=100, min=0, max=0) -> [bins]: counts per equal-width bin
** over [min, max] (the data's own range when min == max, widened by 1 each
** way if that is empty too); CPU's bin of x is (x - min) * bins / (max - min)
** truncated, max itself in the last bin, values outside (and NaN) skipped.
** One scatter-add of ones; the outside values scatter out of bounds. */
static TPURT_MUST_USE tpurt_status_t lower_histc(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.histc: input tensor and bins tensors should have the same dtype");
  int64_t bins = lower_int(ctx, 1, 100);
  if (bins <= 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.histc(): bins must be > 0, but got %lld for dimension 0", (long long)bins);
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = t->dtype;
  int64_t n = 1;
  for (int32_t i = 0; i < t->rank; ++i) n *= t->sizes[i];
  ir_value_t x = ir_reshape(f, lower_tensor(ctx, 0), 1, &n);
  ir_value_t lo = lower_scalar(ctx, 2, dt), hi = lower_scalar(ctx, 3, dt);
  if (n > 0) {
    int64_t all = 0;
    ir_value_t dmin = ir_reduce(f, x, ir_constant_f64(f, dt, INFINITY), &all, 1, IR_REDUCE_MIN);
    ir_value_t dmax = ir_reduce(f, x, ir_constant_f64(f, dt, -INFINITY), &all, 1, IR_REDUCE_MAX);
    ir_value_t same = ir_compare(f, IR_EQ, lo, hi);
    lo = ir_select(f, same, dmin, lo);
    hi = ir_select(f, same, dmax, hi);
  }
  ir_value_t still = ir_compare(f, IR_EQ, lo, hi);
  lo = ir_select(f, still, ir_sub(f, lo, ir_constant_f64(f, dt, 1.0)), lo);
  hi = ir_select(f, still, ir_add(f, hi, ir_constant_f64(f, dt, 1.0)), hi);
  if (n == 0) {
    lower_set_result(ctx, 0, ir_splat(f, dt, 1, &bins, 0.0));
    return NULL;
  }
  ir_value_t lob = ir_broadcast_in_dim(f, lo, 1, &n, NULL), hib = ir_broadcast_in_dim(f, hi, 1, &n, NULL);
  ir_value_t inside = ir_and(f, ir_compare(f, IR_GE, x, lob), ir_compare(f, IR_LE, x, hib));
  ir_value_t pos = ir_binary(f, IR_OP_DIVIDE, ir_mul(f, ir_sub(f, x, lob), ir_const_like(f, x, (double)bins)),
                             ir_sub(f, hib, lob));
  ir_value_t bin = ir_convert(f, pos, TPURT_DTYPE_I64);
  bin = ir_select(f, ir_compare(f, IR_GE, bin, ir_const_like(f, bin, (double)bins)),
                  ir_const_like(f, bin, (double)(bins - 1)), bin);
  bin = ir_select(f, inside, bin, ir_const_like(f, bin, (double)bins));
  int64_t idx_dims[2] = {n, 1};
  ir_scatter_dims_t s = lower_scatter_dims_along(1, 0);
  ir_value_t blk[2];
  ir_value_t out = ir_scatter_begin(f, ir_splat(f, dt, 1, &bins, 0.0), ir_reshape(f, bin, 2, idx_dims),
                                    ir_splat(f, dt, 1, &n, 1.0), &s, blk);
  ir_value_t sum = ir_add(f, blk[0], blk[1]);
  ir_region_end(f, &sum, 1);
  lower_set_result(ctx, 0, out);
  return NULL;
}

/* The |bins| + 1 edges over [lo, hi] (0-d values; an empty range widened
** by 0.5 each way), spaced as linspace spaces them: lo + i * step up to
** halfway, hi - (bins - i) * step after. */
static ir_value_t linspace_edges(lower_ctx_t* ctx, ir_value_t lo, ir_value_t hi, int64_t bins,
                                 tpurt_dtype_t dt) {
  ir_func_t* f = ctx->func;
  ir_value_t same = ir_compare(f, IR_EQ, lo, hi);
  lo = ir_select(f, same, ir_sub(f, lo, ir_constant_f64(f, dt, 0.5)), lo);
  hi = ir_select(f, same, ir_add(f, hi, ir_constant_f64(f, dt, 0.5)), hi);
  int64_t ne = bins + 1;
  ir_value_t step = ir_div(f, ir_sub(f, hi, lo), ir_constant_f64(f, dt, (double)bins));
  ir_value_t i = ir_iota(f, ir_type_make(dt, 1, &ne), 0);
  ir_value_t stepb = ir_broadcast_in_dim(f, step, 1, &ne, NULL);
  ir_value_t up = ir_add(f, ir_broadcast_in_dim(f, lo, 1, &ne, NULL), ir_mul(f, i, stepb));
  ir_value_t down = ir_sub(f, ir_broadcast_in_dim(f, hi, 1, &ne, NULL),
                           ir_mul(f, ir_sub(f, ir_const_like(f, i, (double)bins), i), stepb));
  ir_value_t first_half = ir_compare(f, IR_LT, i, ir_const_like(f, i, (double)(ne / 2)));
  return ir_select(f, first_half, up, down);
}

/* The weight of each of |n| points (arg |weight_arg|, or 1) added into
** |bins| counters at its index in |bin| (a scatter-add; an index of |bins|
** or more drops the point). */
static ir_value_t count_into_bins(lower_ctx_t* ctx, ir_value_t bin, int64_t n, int64_t bins,
                                  int32_t weight_arg, tpurt_dtype_t dt) {
  ir_func_t* f = ctx->func;
  ir_value_t w = weight_arg >= 0 && lower_meta(ctx, weight_arg)
                     ? ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, weight_arg), dt), 1, &n)
                     : ir_splat(f, dt, 1, &n, 1.0);
  int64_t idx_dims[2] = {n, 1};
  ir_scatter_dims_t sd = lower_scatter_dims_along(1, 0);
  ir_value_t blk[2];
  ir_value_t out =
      ir_scatter_begin(f, ir_splat(f, dt, 1, &bins, 0.0), ir_reshape(f, bin, 2, idx_dims), w, &sd, blk);
  ir_value_t sum = ir_add(f, blk[0], blk[1]);
  ir_region_end(f, &sum, 1);
  return out;
}

/* histogram: hist over bin edges |e| ([B + 1], increasing): x's bin is
** upper_bound(e, x) - 1 (what CPU's search finds), the last edge in the
** last bin, values outside [e0, eB] and NaN dropped; each adds its weight
** (or 1). density divides by the total and by each bin's width. */
static ir_value_t histogram_counts(lower_ctx_t* ctx, ir_value_t edges, int64_t bins, int32_t weight_arg,
                                   bool density) {
  ir_func_t* f = ctx->func;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t dt = t->dtype;
  int64_t n = 1, ne = bins + 1;
  for (int32_t i = 0; i < t->rank; ++i) n *= t->sizes[i];
  if (n == 0) return ir_splat(f, dt, 1, &bins, 0.0);
  ir_value_t x = ir_reshape(f, lower_tensor(ctx, 0), 1, &n);
  int64_t grid[2] = {n, ne}, xdim = 0, edim = 1;
  ir_value_t le = ir_compare(f, IR_LE, ir_broadcast_in_dim(f, edges, 2, grid, &edim),
                             ir_broadcast_in_dim(f, x, 2, grid, &xdim));
  ir_value_t bin = ir_reduce(f, lower_cast(ctx, le, TPURT_DTYPE_I64), ir_constant_i64(f, TPURT_DTYPE_I64, 0),
                             &edim, 1, IR_REDUCE_ADD);
  bin = ir_sub(f, bin, ir_const_like(f, bin, 1.0));
  int64_t zero = 0, last = bins;
  int64_t one = 1;
  ir_value_t lo = ir_reshape(f, ir_slice(f, edges, &zero, &one, &one), 0, NULL);
  int64_t last1 = bins + 1;
  ir_value_t hi = ir_reshape(f, ir_slice(f, edges, &last, &last1, &one), 0, NULL);
  ir_value_t lob = ir_broadcast_in_dim(f, lo, 1, &n, NULL), hib = ir_broadcast_in_dim(f, hi, 1, &n, NULL);
  ir_value_t inside = ir_and(f, ir_compare(f, IR_GE, x, lob), ir_compare(f, IR_LE, x, hib));
  bin = ir_select(f, ir_compare(f, IR_GE, bin, ir_const_like(f, bin, (double)bins)),
                  ir_const_like(f, bin, (double)(bins - 1)), bin);
  bin = ir_select(f, inside, bin, ir_const_like(f, bin, (double)bins));
  ir_value_t out = count_into_bins(ctx, bin, n, bins, weight_arg, dt);
  if (density) {
    ir_value_t total = ir_reduce(f, out, ir_constant_f64(f, dt, 0.0), &zero, 1, IR_REDUCE_ADD);
    ir_value_t width =
        ir_sub(f, ir_slice(f, edges, &one, &last1, &one), ir_slice(f, edges, &zero, &last, &one));
    out = ir_div(f, ir_div(f, out, ir_broadcast_in_dim(f, total, 1, &bins, NULL)), width);
  }
  return out;
}

/* histogram.bin_ct(self, bins=100, *, range=None, weight=None, density=False) -> (hist, bin_edges):
** |bins| equal bins over |range| or the data's [min, max] (an empty range
** widened by 0.5 each way), the edges spaced as linspace spaces them. */
static TPURT_MUST_USE tpurt_status_t lower_histogram_bin_ct(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"histogramdd\" not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  int64_t bins = lower_int(ctx, 1, 100);
  if (bins <= 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.histogramdd(): bins must be > 0, but got %lld for dimension 0",
                       (long long)bins);
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = t->dtype;
  int64_t n = 1;
  for (int32_t i = 0; i < t->rank; ++i) n *= t->sizes[i];
  ir_value_t lo, hi;
  if (lower_is_none(ctx, 2) || lower_float_list_len(ctx, 2) != 2) {
    if (!lower_is_none(ctx, 2))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "torch.histogramdd(): for a 1-dimensional histogram range "
                         "should have 2 elements");
    if (n > 0) {
      int64_t all = 0;
      ir_value_t x = ir_reshape(f, lower_tensor(ctx, 0), 1, &n);
      lo = ir_reduce(f, x, ir_constant_f64(f, dt, INFINITY), &all, 1, IR_REDUCE_MIN);
      hi = ir_reduce(f, x, ir_constant_f64(f, dt, -INFINITY), &all, 1, IR_REDUCE_MAX);
    } else {
      lo = ir_constant_f64(f, dt, 0.0);
      hi = ir_constant_f64(f, dt, 0.0);
    }
  } else {
    lo = lower_float_list_item(ctx, 2, 0, dt);
    hi = lower_float_list_item(ctx, 2, 1, dt);
  }
  ir_value_t edges = linspace_edges(ctx, lo, hi, bins, dt);
  lower_set_result(ctx, 0, histogram_counts(ctx, edges, bins, 3, lower_bool(ctx, 4, false)));
  lower_set_result(ctx, 1, edges);
  return NULL;
}

/* histogram.bins_tensor(self, bins, *, weight=None, density=False) -> (hist, bin_edges = bins) */
static TPURT_MUST_USE tpurt_status_t lower_histogram_bins_tensor(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *e = lower_meta(ctx, 1);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"histogramdd\" not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  if (e->dtype != t->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                       "input %s and bins %s",
                       tpurt_dtype_name(t->dtype), tpurt_dtype_name(e->dtype));
  if (e->rank != 1 || e->sizes[0] < 1)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.histogramdd(): bins tensor should have one dimension and at least 1 element");
  ir_value_t edges = lower_tensor(ctx, 1);
  lower_set_result(ctx, 0, histogram_counts(ctx, edges, e->sizes[0] - 1, 2, lower_bool(ctx, 3, false)));
  lower_set_result(ctx, 1, edges);
  return NULL;
}

/* histogramdd over self [..., D] as [M, D] points: per dim d, x_d's bin
** against its edges as histogram_counts finds it; a point outside any
** dim's edges (or NaN) is dropped; the flat bin is row-major over
** |bins|. density divides by the total, then by each dim's bin widths. */
static ir_value_t histogramdd_counts(lower_ctx_t* ctx, const ir_value_t* edges, const int64_t* bins,
                                     int32_t dims, int32_t weight_arg, bool density) {
  ir_func_t* f = ctx->func;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t dt = t->dtype;
  int64_t m = 1, total = 1;
  for (int32_t i = 0; i + 1 < t->rank; ++i) m *= t->sizes[i];
  for (int32_t d = 0; d < dims; ++d) total *= bins[d];
  int64_t pts[2] = {m, dims};
  ir_value_t x = ir_reshape(f, lower_tensor(ctx, 0), 2, pts);
  ir_value_t flat = ir_splat(f, TPURT_DTYPE_I64, 1, &m, 0.0), inside = IR_NONE;
  for (int32_t d = 0; d < dims; ++d) {
    int64_t lo[2] = {0, d}, hi[2] = {m, d + 1}, one[2] = {1, 1};
    ir_value_t xd = ir_reshape(f, ir_slice(f, x, lo, hi, one), 1, &m);
    int64_t ne = bins[d] + 1, grid[2] = {m, ne}, xdim = 0, edim = 1;
    ir_value_t le = ir_compare(f, IR_LE, ir_broadcast_in_dim(f, edges[d], 2, grid, &edim),
                               ir_broadcast_in_dim(f, xd, 2, grid, &xdim));
    ir_value_t b = ir_reduce(f, lower_cast(ctx, le, TPURT_DTYPE_I64), ir_constant_i64(f, TPURT_DTYPE_I64, 0),
                             &edim, 1, IR_REDUCE_ADD);
    b = ir_sub(f, b, ir_const_like(f, b, 1.0));
    b = ir_min(f, b, ir_const_like(f, b, (double)(bins[d] - 1))); /* the last edge: the last bin */
    int64_t z = 0, o = 1, l = bins[d], l1 = bins[d] + 1;
    ir_value_t e0 =
        ir_broadcast_in_dim(f, ir_reshape(f, ir_slice(f, edges[d], &z, &o, &o), 0, NULL), 1, &m, NULL);
    ir_value_t e1 =
        ir_broadcast_in_dim(f, ir_reshape(f, ir_slice(f, edges[d], &l, &l1, &o), 0, NULL), 1, &m, NULL);
    ir_value_t in = ir_and(f, ir_compare(f, IR_GE, xd, e0), ir_compare(f, IR_LE, xd, e1));
    inside = d ? ir_and(f, inside, in) : in;
    flat = ir_add(f, ir_mul(f, flat, ir_const_like(f, flat, (double)bins[d])), b);
  }
  flat = ir_select(f, inside, flat, ir_const_like(f, flat, (double)total));
  ir_value_t out = count_into_bins(ctx, flat, m, total, weight_arg, dt);
  out = ir_reshape(f, out, dims, bins);
  if (density) {
    int64_t all[TPURT_MAX_RANK];
    for (int32_t d = 0; d < dims; ++d) all[d] = d;
    ir_value_t s = ir_reduce(f, out, ir_constant_f64(f, dt, 0.0), all, dims, IR_REDUCE_ADD);
    out = ir_div(f, out, ir_broadcast_in_dim(f, s, dims, bins, NULL));
    for (int32_t d = 0; d < dims; ++d) {
      int64_t z = 0, o = 1, l = bins[d], l1 = bins[d] + 1, dd = d;
      ir_value_t width = ir_sub(f, ir_slice(f, edges[d], &o, &l1, &o), ir_slice(f, edges[d], &z, &l, &o));
      out = ir_div(f, out, ir_broadcast_in_dim(f, width, dims, bins, &dd));
    }
  }
  return out;
}

/* The equal-width edges histogramdd uses for |bins| (arg 1) over |range|
** (arg 2) or each dim's [min, max]; fills edges[D] and bins[D]. */
static TPURT_MUST_USE tpurt_status_t histogramdd_edges(lower_ctx_t* ctx, ir_value_t* edges, int64_t* bins,
                                                       int32_t* out_dims) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"histogramdd\" not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  if (t->rank < 1 || t->sizes[t->rank - 1] > TPURT_MAX_RANK)
    return lower_error(TPURT_INVALID_ARGUMENT, "torch.histogramdd(): input should have at least 1 dimension");
  int32_t dims = (int32_t)t->sizes[t->rank - 1];
  int32_t nb = lower_ints(ctx, 1, bins, TPURT_MAX_RANK);
  if (nb != dims)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "torch.histogramdd(): expected %d sequences of bin edges for each of the %d dimensions "
        "of input, but got %d",
        dims, dims, nb);
  bool ranged = !lower_is_none(ctx, 2);
  if (ranged && lower_float_list_len(ctx, 2) != 2 * dims)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "torch.histogramdd(): for a %d-dimensional histogram range should have %d elements, but "
        "got %d",
        dims, 2 * dims, lower_float_list_len(ctx, 2));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = t->dtype;
  int64_t m = 1;
  for (int32_t i = 0; i + 1 < t->rank; ++i) m *= t->sizes[i];
  int64_t pts[2] = {m, dims};
  for (int32_t d = 0; d < dims; ++d) {
    if (bins[d] <= 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "torch.histogramdd(): bins must be > 0, but got %lld for dimension %d",
                         (long long)bins[d], d);
    ir_value_t lo, hi;
    if (ranged) {
      lo = lower_float_list_item(ctx, 2, 2 * d, dt);
      hi = lower_float_list_item(ctx, 2, 2 * d + 1, dt);
    } else if (m > 0) {
      int64_t l[2] = {0, d}, h[2] = {m, d + 1}, one[2] = {1, 1}, all = 0;
      ir_value_t xd =
          ir_reshape(f, ir_slice(f, ir_reshape(f, lower_tensor(ctx, 0), 2, pts), l, h, one), 1, &m);
      lo = ir_reduce(f, xd, ir_constant_f64(f, dt, INFINITY), &all, 1, IR_REDUCE_MIN);
      hi = ir_reduce(f, xd, ir_constant_f64(f, dt, -INFINITY), &all, 1, IR_REDUCE_MAX);
    } else {
      lo = ir_constant_f64(f, dt, 0.0);
      hi = ir_constant_f64(f, dt, 0.0);
    }
    edges[d] = linspace_edges(ctx, lo, hi, bins[d], dt);
  }
  *out_dims = dims;
  return NULL;
}

/* _histogramdd_bin_edges(self, bins, *, range=None, weight=None, density=False) -> Tensor[] */
static TPURT_MUST_USE tpurt_status_t lower_histogramdd_bin_edges(lower_ctx_t* ctx) {
  ir_value_t edges[TPURT_MAX_RANK];
  int64_t bins[TPURT_MAX_RANK];
  int32_t dims = 0;
  TPURT_RETURN_IF_ERROR(histogramdd_edges(ctx, edges, bins, &dims));
  for (int32_t d = 0; d < dims; ++d) lower_set_result(ctx, d, edges[d]);
  return NULL;
}

/* _histogramdd_from_bin_cts(self, bins, *, range=None, weight=None, density=False) -> hist */
static TPURT_MUST_USE tpurt_status_t lower_histogramdd_from_bin_cts(lower_ctx_t* ctx) {
  ir_value_t edges[TPURT_MAX_RANK];
  int64_t bins[TPURT_MAX_RANK];
  int32_t dims = 0;
  TPURT_RETURN_IF_ERROR(histogramdd_edges(ctx, edges, bins, &dims));
  lower_set_result(ctx, 0, histogramdd_counts(ctx, edges, bins, dims, 3, lower_bool(ctx, 4, false)));
  return NULL;
}

/* _histogramdd_from_bin_tensors(self, Tensor[] bins, *, weight=None, density=False) -> hist */
static TPURT_MUST_USE tpurt_status_t lower_histogramdd_from_bin_tensors(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"histogramdd\" not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  int32_t dims = t->rank ? (int32_t)t->sizes[t->rank - 1] : 0;
  if (t->rank < 1 || lower_list_len(ctx, 1) != dims || dims > TPURT_MAX_RANK)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "torch.histogramdd(): expected %d sequences of bin edges for each of the %d dimensions "
        "of input, but got %d",
        dims, dims, lower_list_len(ctx, 1));
  ir_value_t edges[TPURT_MAX_RANK];
  int64_t bins[TPURT_MAX_RANK];
  for (int32_t d = 0; d < dims; ++d) {
    const tpurt_tensor_t* e = lower_list_meta(ctx, 1, d);
    if (e->dtype != t->dtype || e->rank != 1 || e->sizes[0] < 1)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "torch.histogramdd(): bins tensor should have one dimension and at least 1 element, "
                         "of the input's dtype");
    bins[d] = e->sizes[0] - 1;
    edges[d] = lower_list_tensor(ctx, 1, d);
  }
  lower_set_result(ctx, 0, histogramdd_counts(ctx, edges, bins, dims, 2, lower_bool(ctx, 3, false)));
  return NULL;
}

/* masked_select(self, mask) -> [count]: the count is of |mask| alone and
** scales with broadcasting, which only repeats it. */
static TPURT_MUST_USE tpurt_status_t lower_masked_select(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *m = lower_meta(ctx, 1);
  if (m->dtype != TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "masked_select: expected BoolTensor for mask");
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(t->rank, t->sizes, m->rank, m->sizes, &rank, dims));
  int64_t n = 1, mn = 1;
  for (int32_t i = 0; i < rank; ++i) n *= dims[i];
  for (int32_t i = 0; i < m->rank; ++i) mn *= m->sizes[i];
  int64_t count = mn ? lower_int(ctx, 2, 0) * (n / mn) : 0;
  if (count == 0 || n == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, 1, &count, 0.0));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  ir_value_t values = ir_reshape(f, lower_broadcast_to(ctx, lower_tensor(ctx, 0), rank, dims), 1, &n);
  ir_value_t mask = ir_reshape(f, lower_broadcast_to(ctx, lower_tensor(ctx, 1), rank, dims), 1, &n);
  lower_set_result(ctx, 0, lower_compact(ctx, mask, values, count));
  return NULL;
}

/*===--- unique, unique_consecutive ---===*/

/* Where each element of |x| (flat [n], n >= 1) starts a run of equal
** values, as [n] bool (element 0 always). NaN never equals NaN, so each NaN
** starts its own run: CPU's unique keeps every NaN. */
static ir_value_t run_starts(lower_ctx_t* ctx, ir_value_t x, int64_t n) {
  ir_func_t* f = ctx->func;
  int64_t zero = 0, one = 1, last = n - 1;
  ir_value_t first = ir_splat(f, TPURT_DTYPE_BOOL, 1, &one, 1.0);
  if (n == 1) return first;
  ir_value_t parts[2] = {
      first, ir_compare(f, IR_NE, ir_slice(f, x, &one, &n, &one), ir_slice(f, x, &zero, &last, &one))};
  return ir_concatenate(f, parts, 2, 0);
}

/* self flattened to [n]; *n gets the element count. */
static ir_value_t flat_self(lower_ctx_t* ctx, int64_t* n) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  *n = 1;
  for (int32_t i = 0; i < t->rank; ++i) *n *= t->sizes[i];
  return ir_reshape(ctx->func, lower_tensor(ctx, 0), 1, n);
}

static TPURT_MUST_USE tpurt_status_t check_unique_dtype(lower_ctx_t* ctx, const char* op) {
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  if (tpurt_dtype_is_complex(dt))
    return lower_error(TPURT_UNIMPLEMENTED, "%s: complex inputs are not supported (no order to sort by)", op);
  return NULL;
}

/* The number of runs of equal values in |x| (flat [n]): the engine's
** counting pass for unique (over sorted values) and unique_consecutive. */
static void set_run_count(lower_ctx_t* ctx, ir_value_t x, int64_t n) {
  ir_func_t* f = ctx->func;
  if (n == 0) {
    lower_set_result(ctx, 0, ir_splat(f, TPURT_DTYPE_I64, 0, NULL, 0.0));
    return;
  }
  int64_t all = 0;
  ir_value_t starts = lower_cast(ctx, run_starts(ctx, x, n), TPURT_DTYPE_I64);
  lower_set_result(ctx, 0,
                   ir_reduce(f, starts, ir_constant_i64(f, TPURT_DTYPE_I64, 0), &all, 1, IR_REDUCE_ADD));
}

/* tpurt::count_distinct(self) -> i64: distinct values (each NaN apart). */
static TPURT_MUST_USE tpurt_status_t lower_count_distinct(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(check_unique_dtype(ctx, "torch.unique"));
  int64_t n;
  ir_value_t x = flat_self(ctx, &n), sorted = x, perm;
  if (n > 1) lower_sort_with_indices(ctx, x, 0, false, &sorted, &perm);
  set_run_count(ctx, sorted, n);
  return NULL;
}

/* tpurt::count_runs(self) -> i64: runs of equal consecutive values. */
static TPURT_MUST_USE tpurt_status_t lower_count_runs(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(check_unique_dtype(ctx, "torch.unique_consecutive"));
  int64_t n;
  ir_value_t x = flat_self(ctx, &n);
  set_run_count(ctx, x, n);
  return NULL;
}

/* The three results of unique over |x| (flat [n], n >= 1, in the order
** whose runs are the groups) whose element i came from self's flat
** position perm[i] (|perm| IR_NONE: i itself): values [count] (each run's
** first element), inverse (self's shape: the run of each element; [0]
** unless asked) and counts ([count]; [0] unless asked). */
static void set_unique_results(lower_ctx_t* ctx, ir_value_t x, ir_value_t perm, int64_t n, int64_t count,
                               bool inverse, bool counts) {
  ir_func_t* f = ctx->func;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t none = 0;
  ir_value_t starts = run_starts(ctx, x, n);
  lower_set_result(ctx, 0, lower_compact(ctx, starts, x, count));
  ir_value_t run = ir_sub(f, lower_cumsum(ctx, lower_cast(ctx, starts, TPURT_DTYPE_I64), 0),
                          ir_splat(f, TPURT_DTYPE_I64, 1, &n, 1.0));
  ir_value_t inv = ir_splat(f, TPURT_DTYPE_I64, 1, &none, 0.0);
  if (inverse) {
    inv = run;
    if (perm != IR_NONE) { /* back to self's order: inv[perm[i]] = run[i] */
      int64_t idx_dims[2] = {n, 1};
      ir_scatter_dims_t sd = lower_scatter_dims_along(1, 0);
      ir_value_t blk[2];
      inv = ir_scatter_begin(f, ir_splat(f, TPURT_DTYPE_I64, 1, &n, 0.0), ir_reshape(f, perm, 2, idx_dims),
                             run, &sd, blk);
      ir_region_end(f, &blk[1], 1);
    }
    inv = ir_reshape(f, inv, t->rank, t->sizes);
  }
  lower_set_result(ctx, 1, inv);
  lower_set_result(ctx, 2,
                   counts ? count_into_bins(ctx, run, n, count, -1, TPURT_DTYPE_I64)
                          : ir_splat(f, TPURT_DTYPE_I64, 1, &none, 0.0));
}

/* Results of unique over an empty self: no values, no counts, an empty
** inverse of self's shape when asked. */
static void set_unique_empty(lower_ctx_t* ctx, bool inverse) {
  ir_func_t* f = ctx->func;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t none = 0;
  lower_set_result(ctx, 0, ir_splat(f, t->dtype, 1, &none, 0.0));
  lower_set_result(ctx, 1,
                   inverse ? ir_splat(f, TPURT_DTYPE_I64, t->rank, t->sizes, 0.0)
                           : ir_splat(f, TPURT_DTYPE_I64, 1, &none, 0.0));
  lower_set_result(ctx, 2, ir_splat(f, TPURT_DTYPE_I64, 1, &none, 0.0));
}

/* _unique2(self, sorted=True, return_inverse=False, return_counts=False),
** with the distinct count appended: a stable sort, then runs of equal
** values. The values always come sorted (sorted=False leaves the order to
** the backend; CPU sorts too). */
static TPURT_MUST_USE tpurt_status_t lower_unique2(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(check_unique_dtype(ctx, "torch.unique"));
  bool inverse = lower_bool(ctx, 2, false), counts = lower_bool(ctx, 3, false);
  int64_t count = lower_int(ctx, 4, 0), n;
  ir_value_t x = flat_self(ctx, &n);
  if (n == 0) {
    set_unique_empty(ctx, inverse);
    return NULL;
  }
  ir_value_t sorted = x, perm = IR_NONE;
  if (n > 1) lower_sort_with_indices(ctx, x, 0, false, &sorted, &perm);
  set_unique_results(ctx, sorted, perm, n, count, inverse, counts);
  return NULL;
}

/* unique_consecutive(self, return_inverse=False, return_counts=False,
** dim=None), with the run count appended. A dim other than a 1-d self's 0
** (unique_dim_consecutive's slices) has no rule yet. */
static TPURT_MUST_USE tpurt_status_t lower_unique_consecutive(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(check_unique_dtype(ctx, "torch.unique_consecutive"));
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!lower_is_none(ctx, 3)) {
    int64_t dim;
    TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 3, 0), t->rank, &dim));
    if (t->rank != 1)
      return lower_error(TPURT_UNIMPLEMENTED,
                         "torch.unique_consecutive: dim= over a %d-d tensor is not lowered yet",
                         (int)t->rank);
  }
  bool inverse = lower_bool(ctx, 1, false), counts = lower_bool(ctx, 2, false);
  int64_t count = lower_int(ctx, 4, 0), n;
  ir_value_t x = flat_self(ctx, &n);
  if (n == 0) {
    set_unique_empty(ctx, inverse);
    return NULL;
  }
  set_unique_results(ctx, x, IR_NONE, n, count, inverse, counts);
  return NULL;
}

const lower_rule_t lower_selection_rules[] = {
    LOWER_COUNTED_FN("aten::masked_select", lower_masked_select, 1),
    LOWER_COUNTED_FN("aten::nonzero", lower_nonzero, 0),
    LOWER_KEYED_FN("aten::nonzero_static", lower_nonzero_static),
    LOWER_FN("aten::histc", lower_histc),
    LOWER_OUT_FN("aten::histc.out", lower_histc),
    LOWER_FN("aten::histogram.bin_ct", lower_histogram_bin_ct),
    LOWER_FN("aten::histogram.bins_tensor", lower_histogram_bins_tensor),
    LOWER_FN("aten::_histogramdd_bin_edges", lower_histogramdd_bin_edges),
    LOWER_FN("aten::_histogramdd_from_bin_cts", lower_histogramdd_from_bin_cts),
    LOWER_FN("aten::_histogramdd_from_bin_tensors", lower_histogramdd_from_bin_tensors),
    LOWER_COUNTED_BY_FN("aten::_unique2", lower_unique2, 0, "tpurt::count_distinct"),
    LOWER_COUNTED_BY_FN("aten::unique_consecutive", lower_unique_consecutive, 0, "tpurt::count_runs"),
    LOWER_FN("tpurt::count_nonzero", lower_count_nonzero),
    LOWER_FN("tpurt::count_distinct", lower_count_distinct),
    LOWER_FN("tpurt::count_runs", lower_count_runs),
    LOWER_END,
};
