/* indexing.c: index_select, gather, scatter, index (advanced indexing),
** index_put, index_add, masked_fill, embedding_dense_backward.
**
** Out-of-range indices: PyTorch raises on the host, which a device cannot
** do without a sync. These rules follow StableHLO instead: gathers clamp
** their start indices into range, scatters skip updates that fall outside.
** Strict eager follows this TPU behaviour; debug eager checks the bounds.
** Negative indices are wrapped where PyTorch accepts them (index,
** index_put); where PyTorch rejects them (index_select, gather, scatter,
** index_add) they are out of range like any other.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../base/base.h"
#include "lower.h"

static int64_t numel_of(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

static bool is_index_dtype(tpurt_dtype_t d) { return d == TPURT_DTYPE_I32 || d == TPURT_DTYPE_I64; }

/* A tensor or number arg as a value of |dtype|. */
static ir_value_t value_of(lower_ctx_t* ctx, int32_t arg, tpurt_dtype_t dtype) {
  return lower_meta(ctx, arg) ? lower_cast(ctx, lower_tensor(ctx, arg), dtype)
                              : lower_scalar(ctx, arg, dtype);
}

/* The scatter combiner for (current, update). */
typedef enum combine_e { COMBINE_REPLACE, COMBINE_ADD, COMBINE_MUL, COMBINE_MAX, COMBINE_MIN } combine_t;

static ir_value_t scatter(lower_ctx_t* ctx, ir_value_t operand, ir_value_t indices, ir_value_t updates,
                          const ir_scatter_dims_t* dims, combine_t combine) {
  const ir_type_t* t = ir_value_type(ctx->func, operand);
  bool is_bool = t && t->dtype == TPURT_DTYPE_BOOL;
  ir_value_t args[2];
  ir_value_t r = ir_scatter_begin(ctx->func, operand, indices, updates, dims, args);
  ir_value_t body = args[1];
  if (combine == COMBINE_ADD) body = ir_binary(ctx->func, is_bool ? IR_OP_OR : IR_OP_ADD, args[0], args[1]);
  if (combine == COMBINE_MUL)
    body = ir_binary(ctx->func, is_bool ? IR_OP_AND : IR_OP_MULTIPLY, args[0], args[1]);
  if (combine == COMBINE_MAX)
    body = ir_binary(ctx->func, is_bool ? IR_OP_OR : IR_OP_MAXIMUM, args[0], args[1]);
  if (combine == COMBINE_MIN)
    body = ir_binary(ctx->func, is_bool ? IR_OP_AND : IR_OP_MINIMUM, args[0], args[1]);
  ir_region_end(ctx->func, &body, 1);
  return r;
}

/* Appends a trailing dim of size 1: [S...] -> [S..., 1]. */
static ir_value_t add_unit_dim(lower_ctx_t* ctx, ir_value_t x) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) dims[i] = t->dims[i];
  dims[t->rank] = 1;
  return ir_reshape(ctx->func, x, t->rank + 1, dims);
}

/*===--- index_select ---===*/

/* index_select(Tensor self, int dim, Tensor index) */
static TPURT_MUST_USE tpurt_status_t lower_index_select(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* it = lower_meta(ctx, 2);
  if (!it)
    return lower_error(TPURT_INVALID_ARGUMENT, "index_select(): Expected dtype int32 or int64 for index");
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  int64_t n = numel_of(it->rank, it->sizes);
  if (it->rank > 1)
    return lower_error(TPURT_OUT_OF_RANGE, "index_select(): Index is supposed to be a vector");
  if (t->rank == 0 && n != 1)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "index_select(): Index to scalar can have only 1 value, got %lld value(s)",
                       (long long)n);
  if (!is_index_dtype(it->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "index_select(): Expected dtype int32 or int64 for index");
  ir_value_t self = lower_tensor(ctx, 0);
  if (t->rank == 0) { /* the one index can only be 0 */
    lower_set_result(ctx, 0, self);
    return NULL;
  }
  int64_t out[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) out[i] = i == dim ? n : t->sizes[i];
  if (n > 0 && t->sizes[dim] == 0) return lower_error(TPURT_OUT_OF_RANGE, "index out of range in self");
  if (numel_of(t->rank, out) == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, t->rank, out, 0.0));
    return NULL;
  }
  ir_value_t index = ir_reshape(ctx->func, lower_tensor(ctx, 2), 1, &n);
  lower_set_result(ctx, 0, lower_gather_along(ctx, self, dim, index));
  return NULL;
}

/*===--- gather / scatter along a dim ---===*/

/* Full coordinates [S..., r] (i64) for index of shape S along |dim|: the
** index itself at |dim|, the position elsewhere. */
static ir_value_t dim_coords(lower_ctx_t* ctx, ir_value_t index, int32_t rank, const int64_t* sizes,
                             int64_t dim) {
  ir_value_t parts[TPURT_MAX_RANK];
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, rank, sizes);
  for (int32_t d = 0; d < rank; ++d) {
    ir_value_t c = d == dim ? lower_cast(ctx, index, TPURT_DTYPE_I64) : ir_iota(ctx->func, it, d);
    parts[d] = add_unit_dim(ctx, c);
  }
  return rank == 1 ? parts[0] : ir_concatenate(ctx->func, parts, rank, rank);
}

/* The checks gather and the scatters share; fills the effective rank and
** the index shape (a 0-d self or index counts as 1-d, as in PyTorch). */
static TPURT_MUST_USE tpurt_status_t dim_index_checks(lower_ctx_t* ctx, const char* op, int32_t index_arg,
                                                      int32_t src_arg, int64_t* dim, int32_t* rank,
                                                      int64_t* isizes) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* it = lower_meta(ctx, index_arg);
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, dim));
  /* PyTorch checks the index dtype only when the index is not empty */
  if (!it || (numel_of(it->rank, it->sizes) > 0 && !is_index_dtype(it->dtype)))
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected dtype int32/int64 for index", op);
  int32_t r = t->rank > 0 ? t->rank : 1;
  int32_t ir = it->rank > 0 ? it->rank : 1;
  int64_t n = numel_of(it->rank, it->sizes);
  if (n > 0 && ir != r)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Index tensor must have the same number of dimensions as %s tensor",
                       strcmp(op, "gather") == 0 ? "input" : "self");
  const tpurt_tensor_t* st = src_arg >= 0 ? lower_meta(ctx, src_arg) : NULL;
  if (st && n > 0 && (st->rank > 0 ? st->rank : 1) != r)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Index tensor must have the same number of dimensions as src tensor");
  for (int32_t d = 0; d < r; ++d) isizes[d] = it->rank > 0 ? it->sizes[d < it->rank ? d : 0] : 1;
  if (n > 0) {
    bool gather = strcmp(op, "gather") == 0, wrong = false;
    for (int32_t d = 0; d < r && !wrong; ++d) {
      int64_t sd = t->rank > 0 ? t->sizes[d] : 1;
      int64_t ss = st ? (st->rank > 0 ? st->sizes[d] : 1) : isizes[d];
      if (gather && d != *dim && isizes[d] > sd)
        return lower_error(
            TPURT_INVALID_ARGUMENT,
            "Size does not match at dimension %d expected index %s to be no larger than self %s apart "
            "from dimension %lld",
            d, lower_shape_str(it->rank, it->sizes), lower_shape_str(t->rank, t->sizes), (long long)*dim);
      wrong = (d != *dim && isizes[d] > sd) || isizes[d] > ss;
    }
    if (wrong && st)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Expected index %s to be no larger than self %s apart from dimension %lld and to be no larger "
          "size than src %s",
          lower_shape_str(it->rank, it->sizes), lower_shape_str(t->rank, t->sizes), (long long)*dim,
          lower_shape_str(st->rank, st->sizes));
    if (wrong)
      return lower_error(
          TPURT_INVALID_ARGUMENT, "Expected index %s to be no larger than self %s apart from dimension %lld",
          lower_shape_str(it->rank, it->sizes), lower_shape_str(t->rank, t->sizes), (long long)*dim);
  }
  *rank = r;
  return NULL;
}

/* A tensor arg reshaped to at least rank 1. */
static ir_value_t at_least_1d(lower_ctx_t* ctx, int32_t arg) {
  const tpurt_tensor_t* t = lower_meta(ctx, arg);
  ir_value_t v = lower_tensor(ctx, arg);
  if (t->rank > 0) return v;
  int64_t one = 1;
  return ir_reshape(ctx->func, v, 1, &one);
}

/* gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) */
static TPURT_MUST_USE tpurt_status_t lower_gather(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* it = lower_meta(ctx, 2);
  int64_t dim, isizes[TPURT_MAX_RANK];
  int32_t r;
  TPURT_RETURN_IF_ERROR(dim_index_checks(ctx, "gather", 2, -1, &dim, &r, isizes));
  int64_t n = numel_of(it->rank, it->sizes);
  if (n == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, it->rank, it->sizes, 0.0));
    return NULL;
  }
  if (r >= TPURT_MAX_RANK) return lower_error(TPURT_UNIMPLEMENTED, "gather of a rank-%d tensor on tpu", r);
  if ((t->rank > 0 ? t->sizes[dim] : 1) == 0)
    return lower_error(TPURT_OUT_OF_RANGE, "index %d is out of bounds for dimension %lld with size 0", 0,
                       (long long)dim);
  ir_value_t self = at_least_1d(ctx, 0);
  ir_value_t index = ir_reshape(ctx->func, lower_tensor(ctx, 2), r, isizes);
  ir_value_t coords = dim_coords(ctx, index, r, isizes, dim);
  ir_gather_dims_t g = {0};
  for (int32_t d = 0; d < r; ++d) {
    g.collapsed_slice_dims[g.num_collapsed++] = d;
    g.start_index_map[g.num_start_index_map++] = d;
    g.slice_sizes[d] = 1;
  }
  g.index_vector_dim = r;
  ir_value_t out = ir_gather(ctx->func, self, coords, &g);
  lower_set_result(ctx, 0, ir_reshape(ctx->func, out, it->rank, it->sizes));
  return NULL;
}

/* scatter(self, dim, index, src|value) with a combiner: the index-shaped
** corner of src (or the value) lands at self[index along dim]. */
/* |base|: the value scattered into (IR_NONE: self), shaped like self, of
** any dtype; |ones|: scatter ones of base's dtype instead of src; |out|:
** where the result goes (NULL: result 0). */
static TPURT_MUST_USE tpurt_status_t scatter_dim_on(lower_ctx_t* ctx, const char* op, combine_t combine,
                                                    ir_value_t base, bool ones, ir_value_t* out_value) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* it = lower_meta(ctx, 2);
  const tpurt_tensor_t* st = lower_meta(ctx, 3);
  int64_t dim, isizes[TPURT_MAX_RANK];
  int32_t r;
  TPURT_RETURN_IF_ERROR(dim_index_checks(ctx, op, 2, st ? 3 : -1, &dim, &r, isizes));
  if (st && st->dtype != t->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected self.dtype to be equal to src.dtype", op);
  ir_value_t self = base == IR_NONE ? lower_tensor(ctx, 0) : base;
  int64_t n = numel_of(it->rank, it->sizes);
  if (n == 0) {
    if (out_value)
      *out_value = self;
    else
      lower_set_result(ctx, 0, self);
    return NULL;
  }
  if (r >= TPURT_MAX_RANK) return lower_error(TPURT_UNIMPLEMENTED, "%s of a rank-%d tensor on tpu", op, r);
  int64_t one = 1;
  ir_value_t operand = base == IR_NONE ? at_least_1d(ctx, 0)
                       : t->rank       ? base
                                       : ir_reshape(ctx->func, base, 1, &one);
  tpurt_dtype_t bdt = ir_value_type(ctx->func, operand)->dtype;
  ir_value_t updates;
  if (ones) {
    updates = ir_splat(ctx->func, bdt, r, isizes, 1.0);
  } else if (st) {
    updates = at_least_1d(ctx, 3);
    int64_t zeros[TPURT_MAX_RANK] = {0}, ones[TPURT_MAX_RANK];
    bool whole = true;
    for (int32_t d = 0; d < r; ++d) {
      ones[d] = 1;
      whole &= isizes[d] == (st->rank > 0 ? st->sizes[d] : 1);
    }
    if (!whole) updates = ir_slice(ctx->func, updates, zeros, isizes, ones);
  } else {
    updates = lower_broadcast_to(ctx, lower_scalar(ctx, 3, t->dtype), r, isizes);
  }
  ir_value_t index = ir_reshape(ctx->func, lower_tensor(ctx, 2), r, isizes);
  ir_value_t coords = dim_coords(ctx, index, r, isizes, dim);
  ir_scatter_dims_t s = {0};
  for (int32_t d = 0; d < r; ++d) {
    s.inserted_window_dims[s.num_inserted++] = d;
    s.scatter_dims_to_operand_dims[s.num_scatter_dims_to_operand++] = d;
  }
  s.index_vector_dim = r;
  ir_value_t out =
      ir_reshape(ctx->func, scatter(ctx, operand, coords, lower_cast(ctx, updates, bdt), &s, combine),
                 t->rank, t->sizes);
  if (out_value)
    *out_value = out;
  else
    lower_set_result(ctx, 0, out);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t scatter_dim(lower_ctx_t* ctx, const char* op, combine_t combine) {
  return scatter_dim_on(ctx, op, combine, IR_NONE, false, NULL);
}

/* scatter_dim with the row's constants (LOWER_*_WITH rows): the op's name
** for messages (.str) and how it combines (.kind). */
static TPURT_MUST_USE tpurt_status_t scatter_dim_row(lower_ctx_t* ctx) {
  return scatter_dim(ctx, lower_rule_str(ctx), (combine_t)lower_rule_data(ctx)->kind);
}

/* scatter.src(Tensor self, int dim, Tensor index, Tensor src)
** scatter.value(Tensor self, int dim, Tensor index, Scalar value) */
/* scatter_add(Tensor self, int dim, Tensor index, Tensor src) */

/* scatter.reduce(self, dim, index, src, *, str reduce) /
** scatter.value_reduce(self, dim, index, value, *, str reduce):
** reduce is "add" or "multiply". */
static TPURT_MUST_USE tpurt_status_t lower_scatter_reduce(lower_ctx_t* ctx) {
  const char* reduce = lower_str(ctx, 4, "");
  if (strcmp(reduce, "add") == 0) return scatter_dim(ctx, "scatter", COMBINE_ADD);
  if (strcmp(reduce, "multiply") == 0) return scatter_dim(ctx, "scatter", COMBINE_MUL);
  return lower_error(TPURT_INVALID_ARGUMENT, "reduce argument must be either add or multiply.");
}

/* scatter_reduce.two(self, dim, index, src, reduce, *, include_self=True):
** reduce is sum, prod, mean, amax or amin. Without include_self the
** positions the index touches start from the reduction's identity; mean
** divides the sum by the count of values (self counted if included),
** flooring for integers as CPU does. */
static TPURT_MUST_USE tpurt_status_t lower_scatter_reduce_two(lower_ctx_t* ctx) {
  const char* reduce = lower_str(ctx, 4, "");
  bool include_self = lower_bool(ctx, 5, true);
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!lower_meta(ctx, 3))
    return lower_error(TPURT_INVALID_ARGUMENT, "scatter_reduce(): src must be a tensor");
  combine_t combine;
  double identity;
  bool mean = strcmp(reduce, "mean") == 0;
  if (strcmp(reduce, "sum") == 0 || mean) {
    combine = COMBINE_ADD, identity = 0.0;
  } else if (strcmp(reduce, "prod") == 0) {
    combine = COMBINE_MUL, identity = 1.0;
  } else if (strcmp(reduce, "amax") == 0) {
    combine = COMBINE_MAX, identity = tpurt_dtype_is_float(t->dtype) ? -INFINITY : -9.2233720368547758e18;
  } else if (strcmp(reduce, "amin") == 0) {
    combine = COMBINE_MIN, identity = tpurt_dtype_is_float(t->dtype) ? INFINITY : 9.2233720368547758e18;
  } else {
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "reduce argument must be either sum, prod, mean, amax or amin, got %s", reduce);
  }
  if (!tpurt_dtype_is_float(t->dtype) && (combine == COMBINE_MAX || combine == COMBINE_MIN) &&
      t->dtype != TPURT_DTYPE_I64)
    return lower_error(TPURT_UNIMPLEMENTED, "scatter_reduce amax/amin over %s", tpurt_dtype_name(t->dtype));
  ir_func_t* f = ctx->func;
  ir_value_t self = lower_tensor(ctx, 0);
  /* which positions the index touches */
  ir_value_t touched;
  TPURT_RETURN_IF_ERROR(scatter_dim_on(ctx, "scatter_reduce", COMBINE_REPLACE,
                                       ir_splat(f, TPURT_DTYPE_BOOL, t->rank, t->sizes, 0.0), true,
                                       &touched));
  ir_value_t base = self;
  if (!include_self) {
    ir_value_t id = t->dtype == TPURT_DTYPE_I64 && (combine == COMBINE_MAX || combine == COMBINE_MIN)
                        ? ir_broadcast_in_dim(
                              f, ir_constant_i64(f, t->dtype, combine == COMBINE_MAX ? INT64_MIN : INT64_MAX),
                              t->rank, t->sizes, NULL)
                        : ir_splat(f, t->dtype, t->rank, t->sizes, identity);
    base = ir_select(f, touched, id, self);
  }
  ir_value_t r;
  TPURT_RETURN_IF_ERROR(scatter_dim_on(ctx, "scatter_reduce", combine, base, false, &r));
  if (mean) {
    ir_value_t counts;
    ir_value_t start = ir_splat(f, t->dtype, t->rank, t->sizes, include_self ? 1.0 : 0.0);
    TPURT_RETURN_IF_ERROR(scatter_dim_on(ctx, "scatter_reduce", COMBINE_ADD, start, true, &counts));
    ir_value_t safe = ir_select(f, touched, counts, ir_const_like(f, counts, 1.0));
    ir_value_t q = ir_div(f, r, safe);
    if (!tpurt_dtype_is_float(
            t->dtype)) { /* floor division: one less where the signs differ and it was inexact */
      ir_value_t rem = ir_binary(f, IR_OP_REMAINDER, r, safe);
      ir_value_t zero = ir_const_like(f, r, 0.0);
      ir_value_t fix =
          ir_and(f, ir_compare(f, IR_NE, rem, zero),
                 ir_compare(f, IR_NE, ir_compare(f, IR_LT, r, zero), ir_compare(f, IR_LT, safe, zero)));
      q = ir_select(f, fix, ir_sub(f, q, ir_const_like(f, q, 1.0)), q);
    }
    r = ir_select(f, touched, q, self);
  }
  lower_set_result(ctx, 0, r);
  return NULL;
}

/*===--- take ---===*/

/* take(self, index): self read as 1-D at |index| (any shape); negative
** indices count from the end. */
static TPURT_MUST_USE tpurt_status_t lower_take(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* it = lower_meta(ctx, 1);
  if (it->dtype != TPURT_DTYPE_I64)
    return lower_error(TPURT_INVALID_ARGUMENT, "take(): Expected a long tensor for index, but got %s",
                       tpurt_dtype_name(it->dtype));
  int64_t n = numel_of(t->rank, t->sizes), m = numel_of(it->rank, it->sizes);
  if (m == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, it->rank, it->sizes, 0.0));
    return NULL;
  }
  if (n == 0) return lower_error(TPURT_OUT_OF_RANGE, "take(): tried to take from an empty tensor");
  ir_func_t* f = ctx->func;
  ir_value_t flat = ir_reshape(f, lower_tensor(ctx, 0), 1, &n);
  int64_t idims[2] = {m, 1};
  ir_value_t idx = ir_reshape(f, lower_tensor(ctx, 1), 2, idims);
  idx = ir_select(f, ir_compare(f, IR_LT, idx, ir_const_like(f, idx, 0.0)),
                  ir_add(f, idx, ir_const_like(f, idx, (double)n)), idx);
  ir_value_t out = lower_gather_along(ctx, flat, 0, idx);
  lower_set_result(ctx, 0, ir_reshape(f, out, it->rank, it->sizes));
  return NULL;
}

/*===--- index_fill / index_copy ---===*/

/* The index arg |arg| as wrapped int64 [n] for a dim of |size|, with PyTorch's checks. */
static TPURT_MUST_USE tpurt_status_t index_vector(lower_ctx_t* ctx, int32_t arg, const char* op, int64_t size,
                                                  ir_value_t* out, int64_t* n) {
  const tpurt_tensor_t* it = lower_meta(ctx, arg);
  if (!it || !is_index_dtype(it->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected a long tensor for index, but got %s", op,
                       tpurt_dtype_name(it ? it->dtype : TPURT_DTYPE_INVALID));
  if (it->rank > 1) return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Index is supposed to be a vector", op);
  *n = numel_of(it->rank, it->sizes);
  ir_value_t idx = ir_reshape(ctx->func, lower_cast(ctx, lower_tensor(ctx, arg), TPURT_DTYPE_I64), 1, n);
  ir_value_t neg = ir_compare(ctx->func, IR_LT, idx, ir_const_like(ctx->func, idx, 0.0));
  *out = ir_select(ctx->func, neg, ir_add(ctx->func, idx, ir_const_like(ctx->func, idx, (double)size)), idx);
  return NULL;
}

/* index_reduce: the index (arg 2) as wrapped int64 [n] for |dim| of self
** (arg 0), and PyTorch's check that source (arg 3) has self's shape but n
** at |dim|. */
static TPURT_MUST_USE tpurt_status_t source_slices_at(lower_ctx_t* ctx, const char* op, int64_t dim,
                                                      ir_value_t* idx, int64_t* n) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *st = lower_meta(ctx, 3);
  TPURT_RETURN_IF_ERROR(index_vector(ctx, 2, op, t->rank ? t->sizes[dim] : 1, idx, n));
  bool ok = st->rank == t->rank && (t->rank == 0 || st->sizes[dim] == *n);
  for (int32_t d = 0; ok && d < t->rank; ++d) ok = d == dim || st->sizes[d] == t->sizes[d];
  if (!ok)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "%s(): Source/destination tensor must have same slice shapes. Destination slice "
                       "shape: %s",
                       op, lower_shape_str(t->rank, t->sizes));
  return NULL;
}

/* index_fill.int_Scalar / int_Tensor(self, dim, index, value): value at
** every position whose coordinate along dim is in index */
static TPURT_MUST_USE tpurt_status_t lower_index_fill(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  const tpurt_tensor_t* vt = lower_meta(ctx, 3);
  if (vt && vt->rank != 0)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "index_fill_ only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).",
        (int)vt->rank);
  int64_t size = t->rank ? t->sizes[dim] : 1, n;
  ir_value_t idx;
  TPURT_RETURN_IF_ERROR(index_vector(ctx, 2, "index_fill_", size, &idx, &n));
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  ir_value_t v = vt ? lower_cast(ctx, lower_tensor(ctx, 3), t->dtype) : lower_scalar(ctx, 3, t->dtype);
  if (n == 0 || t->rank == 0) {
    lower_set_result(ctx, 0, n == 0 ? x : v);
    return NULL;
  }
  /* hit[j] = any(index == j) for j along dim */
  int64_t md[2] = {size, n}, one_dim = 1;
  ir_value_t j = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, md), 0);
  ir_value_t eq = ir_compare(f, IR_EQ, j, ir_broadcast_in_dim(f, idx, 2, md, &one_dim));
  ir_value_t hit = ir_reduce(f, eq, ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), &one_dim, 1, IR_REDUCE_OR);
  ir_value_t mask = ir_broadcast_in_dim(f, hit, t->rank, t->sizes, &dim);
  lower_set_result(ctx, 0, ir_select(f, mask, lower_broadcast_to(ctx, v, t->rank, t->sizes), x));
  return NULL;
}

/* The sizes of |t| without |dim| into |out| (a 0-d tensor has none): the
** slice shape PyTorch compares between index_copy's self and source. */
static int32_t slice_sizes(const tpurt_tensor_t* t, int64_t dim, int64_t* out) {
  int32_t k = 0;
  for (int32_t d = 0; d < t->rank; ++d)
    if (d != dim) out[k++] = t->sizes[d];
  return k;
}

/* |sizes| as PyTorch prints a size vector in index_copy's error ("3 2"). */
static const char* slice_str(int32_t n, const int64_t* sizes, char buf[static 160]) {
  size_t used = 0;
  buf[0] = 0;
  for (int32_t i = 0; i < n && used < 140; ++i)
    used += (size_t)snprintf(buf + used, 160 - used, "%s%lld", i ? " " : "", (long long)sizes[i]);
  return buf;
}

/* index_copy(self, dim, index, source): the slices of source land at
** self[index[k]] along dim (a scatter with the other dims as windows).
** PyTorch's checks compare shapes without |dim|, so a 0-d source fills a
** 1-element slice of a vector and a 1-element source fills a 0-d self. */
static TPURT_MUST_USE tpurt_status_t lower_index_copy(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* st = lower_meta(ctx, 3);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  if (!st || st->dtype != t->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "index_copy_(): self and source expected to have the same dtype");
  int64_t n;
  ir_value_t idx;
  TPURT_RETURN_IF_ERROR(index_vector(ctx, 2, "index_copy_", t->rank ? t->sizes[dim] : 1, &idx, &n));
  if (t->rank && st->rank && t->rank != st->rank)
    return lower_error(TPURT_OUT_OF_RANGE,
                       "index_copy_(): When source and destination are not scalars, their dimensionality "
                       "must match. Source dimensionality (%d), destination dimensionality (%d)",
                       (int)st->rank, (int)t->rank);
  int64_t ts[TPURT_MAX_RANK], ss[TPURT_MAX_RANK];
  int32_t tn = slice_sizes(t, dim, ts), sn = slice_sizes(st, dim, ss);
  char tb[160], sb[160];
  if (tn != sn || memcmp(ts, ss, (size_t)tn * sizeof *ts) != 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "index_copy_(): Source/destination tensor must have same slice shapes. Destination "
                       "slice shape: %s at dimension %lld and source slice shape: %s at dimension 0.",
                       slice_str(tn, ts, tb), (long long)dim, slice_str(sn, ss, sb));
  int64_t m = st->rank ? st->sizes[dim] : 1;
  if (m != n)
    return lower_error(TPURT_OUT_OF_RANGE,
                       "index_copy_(): Number of indices (%lld) should be equal to source.size(dim) (%lld)",
                       (long long)n, (long long)m);
  if (n == 0) {
    lower_set_result(ctx, 0, lower_tensor(ctx, 0));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  if (t->rank == 0) { /* one index, one element */
    lower_set_result(ctx, 0, ir_reshape(f, lower_tensor(ctx, 3), 0, NULL));
    return NULL;
  }
  int64_t src_sizes[TPURT_MAX_RANK]; /* source at self's rank: n at dim */
  for (int32_t d = 0; d < t->rank; ++d) src_sizes[d] = d == dim ? n : t->sizes[d];
  int64_t id[2] = {n, 1};
  ir_scatter_dims_t sd = lower_scatter_dims_along(t->rank, dim);
  ir_value_t src = ir_reshape(f, lower_tensor(ctx, 3), t->rank, src_sizes);
  lower_set_result(ctx, 0,
                   scatter(ctx, lower_tensor(ctx, 0), ir_reshape(f, idx, 2, id), src, &sd, COMBINE_REPLACE));
  return NULL;
}

/*===--- index_reduce ---===*/

/* index_reduce(self, dim, index, source, reduce, *, include_self=True): the
** slices of source reduced (prod, mean, amax, amin) into self[index[k]]
** along dim: index_copy's scatter with a combining body. Without
** include_self the touched positions start from the reduction's identity;
** mean divides by the count (self counted if included), flooring for ints. */
static TPURT_MUST_USE tpurt_status_t lower_index_reduce(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* st = lower_meta(ctx, 3);
  const char* reduce = lower_str(ctx, 4, "");
  bool include_self = lower_bool(ctx, 5, true);
  combine_t combine;
  bool mean = strcmp(reduce, "mean") == 0;
  if (mean) {
    combine = COMBINE_ADD;
  } else if (strcmp(reduce, "prod") == 0) {
    combine = COMBINE_MUL;
  } else if (strcmp(reduce, "amax") == 0) {
    combine = COMBINE_MAX;
  } else if (strcmp(reduce, "amin") == 0) {
    combine = COMBINE_MIN;
  } else {
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got %s.",
                       reduce);
  }
  if (!st || st->dtype != t->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "index_reduce_(): self and source expected to have the same dtype");
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  int64_t n;
  ir_value_t idx;
  TPURT_RETURN_IF_ERROR(source_slices_at(ctx, "index_reduce_", dim, &idx, &n));
  ir_value_t self = lower_tensor(ctx, 0);
  if (n == 0) {
    lower_set_result(ctx, 0, self);
    return NULL;
  }
  ir_func_t* f = ctx->func;
  /* a 0-d self (and source) works as a 1-element vector */
  int32_t rank = t->rank ? t->rank : 1;
  int64_t one = 1;
  const int64_t* sizes = t->rank ? t->sizes : &one;
  const int64_t* ssizes = t->rank ? st->sizes : &one;
  ir_value_t src = ir_reshape(f, lower_tensor(ctx, 3), rank, ssizes);
  self = ir_reshape(f, self, rank, sizes);
  int64_t id[2] = {n, 1};
  ir_value_t index = ir_reshape(f, idx, 2, id);
  ir_scatter_dims_t sd = lower_scatter_dims_along(rank, dim);
  ir_value_t touched = scatter(ctx, ir_splat(f, TPURT_DTYPE_BOOL, rank, sizes, 0.0), index,
                               ir_splat(f, TPURT_DTYPE_BOOL, rank, ssizes, 1.0), &sd, COMBINE_REPLACE);
  ir_value_t base = self;
  if (!include_self) {
    ir_value_t id_value;
    if (combine == COMBINE_MAX || combine == COMBINE_MIN) {
      id_value =
          ir_broadcast_in_dim(f, lower_extreme(ctx, t->dtype, combine == COMBINE_MIN), rank, sizes, NULL);
    } else {
      id_value = ir_splat(f, t->dtype, rank, sizes, combine == COMBINE_MUL ? 1.0 : 0.0);
    }
    base = ir_select(f, touched, id_value, self);
  }
  ir_value_t r = scatter(ctx, base, index, src, &sd, combine);
  if (mean) {
    ir_value_t start = ir_splat(f, t->dtype, rank, sizes, include_self ? 1.0 : 0.0);
    ir_value_t counts =
        scatter(ctx, start, index, ir_splat(f, t->dtype, rank, ssizes, 1.0), &sd, COMBINE_ADD);
    ir_value_t safe = ir_select(f, touched, counts, ir_const_like(f, counts, 1.0));
    ir_value_t q = ir_div(f, r, safe);
    if (!tpurt_dtype_is_float(t->dtype)) { /* floor division (counts are positive) */
      ir_value_t rem = ir_binary(f, IR_OP_REMAINDER, r, safe);
      ir_value_t zero = ir_const_like(f, r, 0.0);
      ir_value_t fix = ir_and(f, ir_compare(f, IR_NE, rem, zero), ir_compare(f, IR_LT, r, zero));
      q = ir_select(f, fix, ir_sub(f, q, ir_const_like(f, q, 1.0)), q);
    }
    r = ir_select(f, touched, q, self);
  }
  lower_set_result(ctx, 0, ir_reshape(f, r, t->rank, t->sizes));
  return NULL;
}

/*===--- put / masked_scatter ---===*/

/* put(self, index, source, accumulate=False): self read as 1-D gets source
** at |index| (negative counts from the end), written or added */
static TPURT_MUST_USE tpurt_status_t lower_put(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *it = lower_meta(ctx, 1), *st = lower_meta(ctx, 2);
  if (it->dtype != TPURT_DTYPE_I64)
    return lower_error(TPURT_INVALID_ARGUMENT, "put_(): Expected a long tensor for index, but got %s",
                       tpurt_dtype_name(it->dtype));
  if (st->dtype != t->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "put_(): self and source expected to have the same dtype, but got self.dtype = %s and "
                       "source.dtype = %s",
                       tpurt_dtype_name(t->dtype), tpurt_dtype_name(st->dtype));
  int64_t n = numel_of(t->rank, t->sizes), k = numel_of(it->rank, it->sizes);
  if (numel_of(st->rank, st->sizes) != k)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "put_(): Expected source and index to have the same number of elements, but got source.numel() "
        "= %lld, index.numel() = %lld",
        (long long)numel_of(st->rank, st->sizes), (long long)k);
  ir_value_t self = lower_tensor(ctx, 0);
  if (k == 0) {
    lower_set_result(ctx, 0, self);
    return NULL;
  }
  if (n == 0) return lower_error(TPURT_OUT_OF_RANGE, "put_(): Tried to put elements into an empty tensor");
  ir_func_t* f = ctx->func;
  ir_value_t flat = ir_reshape(f, self, 1, &n);
  int64_t id[2] = {k, 1};
  ir_value_t idx = ir_reshape(f, lower_tensor(ctx, 1), 2, id);
  idx = ir_select(f, ir_compare(f, IR_LT, idx, ir_const_like(f, idx, 0.0)),
                  ir_add(f, idx, ir_const_like(f, idx, (double)n)), idx);
  ir_value_t src = ir_reshape(f, lower_tensor(ctx, 2), 1, &k);
  ir_scatter_dims_t sd = lower_scatter_dims_along(1, 0);
  bool acc = lower_bool(ctx, 3, false);
  ir_value_t r = scatter(ctx, flat, idx, src, &sd, acc ? COMBINE_ADD : COMBINE_REPLACE);
  lower_set_result(ctx, 0, ir_reshape(f, r, t->rank, t->sizes));
  return NULL;
}

/* masked_scatter(self, mask, source): the positions where the (broadcast)
** mask is true take source's elements in order: element i of them is
** source.flatten()[running count of the mask up to i, minus 1] */
static TPURT_MUST_USE tpurt_status_t lower_masked_scatter(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *mt = lower_meta(ctx, 1), *st = lower_meta(ctx, 2);
  if (mt->dtype != TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "masked_scatter_ only supports boolean masks, but got mask with dtype %s",
                       tpurt_dtype_name(mt->dtype));
  if (st->dtype != t->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "masked_scatter_: expected self and source to have same dtypes but got %s and %s",
                       tpurt_dtype_name(t->dtype), tpurt_dtype_name(st->dtype));
  ir_func_t* f = ctx->func;
  int64_t n = numel_of(t->rank, t->sizes), k = numel_of(st->rank, st->sizes);
  ir_value_t self = lower_tensor(ctx, 0);
  if (n == 0 || k == 0) { /* nothing to take (CPU requires enough source elements) */
    lower_set_result(ctx, 0, self);
    return NULL;
  }
  ir_value_t mask = lower_broadcast_to(ctx, lower_tensor(ctx, 1), t->rank, t->sizes);
  ir_value_t m = ir_reshape(f, ir_convert(f, mask, TPURT_DTYPE_I64), 1, &n);
  ir_value_t pos = ir_sub(f, lower_cumsum(ctx, m, 0), ir_const_like(f, m, 1.0));
  pos = ir_clamp(f, ir_constant_i64(f, TPURT_DTYPE_I64, 0), pos, ir_constant_i64(f, TPURT_DTYPE_I64, k - 1));
  int64_t id[2] = {n, 1};
  ir_value_t taken =
      lower_gather_along(ctx, ir_reshape(f, lower_tensor(ctx, 2), 1, &k), 0, ir_reshape(f, pos, 2, id));
  taken = ir_reshape(f, taken, t->rank, t->sizes);
  lower_set_result(ctx, 0, ir_select(f, mask, taken, self));
  return NULL;
}

/*===--- index_add ---===*/

/* index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) */
static TPURT_MUST_USE tpurt_status_t lower_index_add(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* it = lower_meta(ctx, 2);
  const tpurt_tensor_t* st = lower_meta(ctx, 3);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, t->rank, &dim));
  if (!it || !is_index_dtype(it->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "index_add_(): Expected dtype int32/int64 for index but got: %s",
                       tpurt_dtype_name(it ? it->dtype : TPURT_DTYPE_INVALID));
  if (it->rank > 1) return lower_error(TPURT_OUT_OF_RANGE, "index_add_(): Index is supposed to be a vector");
  if (!st) return lower_error(TPURT_INVALID_ARGUMENT, "index_add_(): source must be a tensor");
  if (st->dtype != t->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "index_add_(): self (%s) and source (%s) must have the same scalar type",
                       tpurt_dtype_name(t->dtype), tpurt_dtype_name(st->dtype));
  int64_t n = numel_of(it->rank, it->sizes);
  if (!(dim == 0 || dim < st->rank))
    return lower_error(TPURT_OUT_OF_RANGE,
                       "index_add_(): Indexing dim %lld is out of bounds of the source tensor with dim %d",
                       (long long)dim, st->rank);
  int64_t src_n = st->rank == 0 ? 1 : st->sizes[dim];
  if (n != src_n)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "index_add_(): Number of indices (%lld) should be equal to source.size(dim): (%lld), for dim: %lld",
        (long long)n, (long long)src_n, (long long)dim);
  /* self and source agree except along dim (a 0-d one only with a 0-d one) */
  bool same = t->rank == st->rank;
  for (int32_t d = 0; same && d < t->rank; ++d) same = d == dim || t->sizes[d] == st->sizes[d];
  if (!same)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "source tensor shape must match self tensor shape, excluding the specified dimension. Got "
        "self.shape = %s source.shape = %s",
        lower_shape_str(t->rank, t->sizes), lower_shape_str(st->rank, st->sizes));
  int32_t r = t->rank > 0 ? t->rank : 1;
  int64_t want[TPURT_MAX_RANK];
  for (int32_t d = 0; d < r; ++d) want[d] = d == dim ? n : (t->rank > 0 ? t->sizes[d] : 1);
  if (numel_of(r, want) != numel_of(st->rank, st->sizes))
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "source tensor shape must match self tensor shape, excluding the specified dimension. Got "
        "self.shape = %s source.shape = %s",
        lower_shape_str(t->rank, t->sizes), lower_shape_str(st->rank, st->sizes));
  ir_value_t self = lower_tensor(ctx, 0);
  if (n == 0 || numel_of(r, want) == 0) {
    lower_set_result(ctx, 0, self);
    return NULL;
  }
  ir_value_t operand = at_least_1d(ctx, 0);
  ir_value_t src = ir_reshape(ctx->func, lower_tensor(ctx, 3), r, want);
  if (!lower_is_none(ctx, 4) && !lower_scalar_is(ctx, 4, 1.0)) {
    ir_value_t alpha = lower_broadcast_to(ctx, lower_scalar(ctx, 4, t->dtype), r, want);
    src = ir_binary(ctx->func, t->dtype == TPURT_DTYPE_BOOL ? IR_OP_AND : IR_OP_MULTIPLY, src, alpha);
  }
  ir_value_t index = ir_reshape(ctx->func, lower_tensor(ctx, 2), 1, &n);
  ir_scatter_dims_t s = lower_scatter_dims_along(r, dim);
  ir_value_t out = scatter(ctx, operand, index, src, &s, COMBINE_ADD);
  lower_set_result(ctx, 0, ir_reshape(ctx->func, out, t->rank, t->sizes));
  return NULL;
}

/*===--- advanced indexing: index.Tensor, index_put ---===*/

/* What a Tensor?[] of indices selects. */
typedef struct adv_s {
  int32_t k;                       /* number of indexed dims */
  int64_t indexed[TPURT_MAX_RANK]; /* which dims of self, increasing */
  int32_t b;                       /* rank of the broadcast index shape */
  int64_t bshape[TPURT_MAX_RANK];
  int32_t rank; /* rank of the indexing result */
  int64_t shape[TPURT_MAX_RANK];
  int32_t num_window;             /* self's other dims, and where they sit */
  int64_t window[TPURT_MAX_RANK]; /* positions in the result */
} adv_t;

/* PyTorch's IndexError for index tensors that do not broadcast, naming their shapes. */
static TPURT_MUST_USE tpurt_status_t index_shapes_mismatch(lower_ctx_t* ctx, int32_t list_arg) {
  char shapes[512] = "";
  size_t used = 0;
  for (int32_t i = 0; i < lower_list_len(ctx, list_arg) && used < sizeof(shapes); ++i) {
    const tpurt_tensor_t* it = lower_list_meta(ctx, list_arg, i);
    if (!it) continue;
    int n = snprintf(shapes + used, sizeof(shapes) - used, "%s%s", used ? ", " : "",
                     lower_shape_str(it->rank, it->sizes));
    if (n > 0) used += (size_t)n;
  }
  return lower_error(TPURT_OUT_OF_RANGE,
                     "shape mismatch: indexing tensors could not be broadcast together with shapes %s",
                     shapes);
}

static TPURT_MUST_USE tpurt_status_t adv_plan(lower_ctx_t* ctx, int32_t list_arg, adv_t* a) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int32_t len = lower_list_len(ctx, list_arg);
  memset(a, 0, sizeof(*a));
  if (len == 0) { /* no index selects self whole (index raises, index_put writes it all) */
    a->rank = t->rank;
    memcpy(a->shape, t->sizes, sizeof(int64_t) * (size_t)t->rank);
    return NULL;
  }
  if (len > t->rank)
    return lower_error(TPURT_OUT_OF_RANGE, "too many indices for tensor of dimension %d (got %d)", t->rank,
                       len);
  for (int32_t i = 0; i < len; ++i) {
    const tpurt_tensor_t* it = lower_list_meta(ctx, list_arg, i);
    if (!it) continue;
    if (it->dtype == TPURT_DTYPE_BOOL || it->dtype == TPURT_DTYPE_U8)
      return lower_error(
          TPURT_UNIMPLEMENTED,
          "indexing with a boolean mask needs nonzero (a data-dependent shape), which tpu programs "
          "cannot express");
    if (!is_index_dtype(it->dtype)) /* int8 and int16 too, as PyTorch refuses them */
      return lower_error(TPURT_OUT_OF_RANGE,
                         "tensors used as indices must be long, int, byte or bool tensors");
    tpurt_status_t s = lower_broadcast_shapes(a->b, a->bshape, it->rank, it->sizes, &a->b, a->bshape);
    if (s) {
      tpurt_status_free(s);
      return index_shapes_mismatch(ctx, list_arg);
    }
    a->indexed[a->k++] = i;
  }
  if (a->k == 0) return lower_error(TPURT_UNIMPLEMENTED, "indexing with no index tensors");
  bool adjacent = a->indexed[a->k - 1] - a->indexed[0] == a->k - 1;
  int32_t first = adjacent ? (int32_t)a->indexed[0] : 0;
  a->rank = t->rank - a->k + a->b;
  if (a->rank > TPURT_MAX_RANK)
    return lower_error(TPURT_UNIMPLEMENTED, "indexing result of rank %d on tpu (max %d)", a->rank,
                       TPURT_MAX_RANK);
  /* self dims before |first| stay in front, then the index shape, then the
  ** rest (adjacent indices); otherwise the index shape comes first. */
  int32_t pos = 0, next_index_dim = 0;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (d == first && next_index_dim == 0) {
      for (int32_t j = 0; j < a->b; ++j) a->shape[pos++] = a->bshape[j];
      next_index_dim = 1;
    }
    bool is_indexed = false;
    for (int32_t j = 0; j < a->k; ++j) is_indexed |= a->indexed[j] == d;
    if (is_indexed) continue;
    a->window[a->num_window++] = pos;
    a->shape[pos++] = t->sizes[d];
  }
  if (next_index_dim == 0)
    for (int32_t j = 0; j < a->b; ++j) a->shape[pos++] = a->bshape[j];
  return NULL;
}

/* The start indices [B..., k] of an adv_t: each index broadcast, wrapped
** when negative, stacked along a new last dim. */
static ir_value_t adv_indices(lower_ctx_t* ctx, int32_t list_arg, const adv_t* a) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t dt = TPURT_DTYPE_I32;
  for (int32_t j = 0; j < a->k; ++j)
    if (lower_list_meta(ctx, list_arg, (int32_t)a->indexed[j])->dtype == TPURT_DTYPE_I64)
      dt = TPURT_DTYPE_I64;
  ir_value_t parts[TPURT_MAX_RANK];
  for (int32_t j = 0; j < a->k; ++j) {
    int32_t d = (int32_t)a->indexed[j];
    ir_value_t v = lower_cast(ctx, lower_list_tensor(ctx, list_arg, d), dt);
    v = lower_broadcast_to(ctx, v, a->b, a->bshape);
    ir_value_t zero = ir_splat(ctx->func, dt, a->b, a->bshape, 0.0);
    ir_value_t size = ir_splat(ctx->func, dt, a->b, a->bshape, (double)t->sizes[d]);
    v = ir_select(ctx->func, ir_compare(ctx->func, IR_LT, v, zero), ir_add(ctx->func, v, size), v);
    parts[j] = add_unit_dim(ctx, v);
  }
  return a->k == 1 ? parts[0] : ir_concatenate(ctx->func, parts, a->k, a->b);
}

static bool adv_indexes_empty_dim(const lower_ctx_t* ctx, const adv_t* a) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  for (int32_t j = 0; j < a->k; ++j)
    if (t->sizes[a->indexed[j]] == 0) return true;
  return false;
}

/* index.Tensor(Tensor self, Tensor?[] indices) */
static TPURT_MUST_USE tpurt_status_t lower_index(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (lower_list_len(ctx, 1) == 0)
    return lower_error(TPURT_OUT_OF_RANGE, "at least one index must be provided");
  adv_t a;
  TPURT_RETURN_IF_ERROR(adv_plan(ctx, 1, &a));
  if (numel_of(a.rank, a.shape) == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, a.rank, a.shape, 0.0));
    return NULL;
  }
  if (adv_indexes_empty_dim(ctx, &a))
    return lower_error(TPURT_OUT_OF_RANGE, "index is out of bounds for dimension with size 0");
  ir_gather_dims_t g = {0};
  for (int32_t i = 0; i < a.num_window; ++i) g.offset_dims[g.num_offset_dims++] = a.window[i];
  for (int32_t j = 0; j < a.k; ++j) {
    g.collapsed_slice_dims[g.num_collapsed++] = a.indexed[j];
    g.start_index_map[g.num_start_index_map++] = a.indexed[j];
  }
  for (int32_t d = 0; d < t->rank; ++d) g.slice_sizes[d] = t->sizes[d];
  for (int32_t j = 0; j < a.k; ++j) g.slice_sizes[a.indexed[j]] = 1;
  g.index_vector_dim = a.b;
  ir_value_t out = ir_gather(ctx->func, lower_tensor(ctx, 0), adv_indices(ctx, 1, &a), &g);
  lower_set_result(ctx, 0, out);
  return NULL;
}

/* index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False)
** and _index_put_impl_(self, indices, values, accumulate, unsafe): values
** broadcast to what self[indices] would be; accumulate adds. */
static TPURT_MUST_USE tpurt_status_t lower_index_put(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* vt = lower_meta(ctx, 2);
  adv_t a;
  TPURT_RETURN_IF_ERROR(adv_plan(ctx, 1, &a));
  if (vt) { /* the shape first, then the dtype, as PyTorch checks them */
    int32_t rank;
    int64_t dims[TPURT_MAX_RANK];
    tpurt_status_t s = lower_broadcast_shapes(a.rank, a.shape, vt->rank, vt->sizes, &rank, dims);
    if (s || rank != a.rank || numel_of(rank, dims) != numel_of(a.rank, a.shape)) {
      tpurt_status_free(s);
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "shape mismatch: value tensor of shape %s cannot be broadcast to "
                         "indexing result of shape %s",
                         lower_shape_str(vt->rank, vt->sizes), lower_shape_str(a.rank, a.shape));
    }
    if (vt->dtype != t->dtype)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Index put requires the source and destination dtypes match, got %s for the destination and %s "
          "for the source.",
          tpurt_dtype_name(t->dtype), tpurt_dtype_name(vt->dtype));
  }
  ir_value_t self = lower_tensor(ctx, 0);
  if (numel_of(a.rank, a.shape) == 0) {
    lower_set_result(ctx, 0, self);
    return NULL;
  }
  if (adv_indexes_empty_dim(ctx, &a))
    return lower_error(TPURT_OUT_OF_RANGE, "index is out of bounds for dimension with size 0");
  ir_value_t updates = lower_broadcast_to(ctx, value_of(ctx, 2, t->dtype), a.rank, a.shape);
  if (a.k == 0) { /* no index: the values replace (or add to) all of self */
    ir_value_t sum =
        t->dtype == TPURT_DTYPE_BOOL ? ir_or(ctx->func, self, updates) : ir_add(ctx->func, self, updates);
    lower_set_result(ctx, 0, lower_bool(ctx, 3, false) ? sum : updates);
    return NULL;
  }
  ir_scatter_dims_t s = {0};
  for (int32_t i = 0; i < a.num_window; ++i) s.update_window_dims[s.num_update_window_dims++] = a.window[i];
  for (int32_t j = 0; j < a.k; ++j) {
    s.inserted_window_dims[s.num_inserted++] = a.indexed[j];
    s.scatter_dims_to_operand_dims[s.num_scatter_dims_to_operand++] = a.indexed[j];
  }
  s.index_vector_dim = a.b;
  combine_t c = lower_bool(ctx, 3, false) ? COMBINE_ADD : COMBINE_REPLACE;
  lower_set_result(ctx, 0, scatter(ctx, self, adv_indices(ctx, 1, &a), updates, &s, c));
  return NULL;
}

/*===--- masked_fill ---===*/

/* masked_fill.Scalar(Tensor self, Tensor mask, Scalar value)
** masked_fill.Tensor(Tensor self, Tensor mask, Tensor value): value 0-d.
** The mask broadcasts to self (the in-place forms keep self's shape). */
static TPURT_MUST_USE tpurt_status_t lower_masked_fill(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* mt = lower_meta(ctx, 1);
  if (!mt || mt->dtype != TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "masked_fill_ only supports boolean masks, but got mask with dtype %s",
                       lower_dtype_cpp_name(mt ? mt->dtype : TPURT_DTYPE_INVALID));
  const tpurt_tensor_t* vt = lower_meta(ctx, 2);
  if (vt && vt->rank != 0)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d dimension(s).",
        vt->rank);
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(t->rank, t->sizes, mt->rank, mt->sizes, &rank, dims));
  /* masked_fill (functional) broadcasts self with the mask; only the
  ** in-place form must keep self's shape */
  bool inplace = strstr(ctx->op_name, "masked_fill_") != NULL;
  if (inplace && (rank != t->rank || numel_of(rank, dims) != numel_of(t->rank, t->sizes)))
    return lower_error(TPURT_INVALID_ARGUMENT, "output with shape %s doesn't match the broadcast shape %s",
                       lower_shape_str(t->rank, t->sizes), lower_shape_str(rank, dims));
  ir_value_t mask = lower_broadcast_to(ctx, lower_tensor(ctx, 1), rank, dims);
  ir_value_t value = lower_broadcast_to(ctx, value_of(ctx, 2, t->dtype), rank, dims);
  ir_value_t self = lower_broadcast_to(ctx, lower_tensor(ctx, 0), rank, dims);
  lower_set_result(ctx, 0, ir_select(ctx->func, mask, value, self));
  return NULL;
}

/*===--- embedding_dense_backward ---===*/

/* embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt
** num_weights, SymInt padding_idx, bool scale_grad_by_freq): the grad rows
** summed into [num_weights, D] by index; the padding row gets nothing;
** scale_grad_by_freq divides each row by how often its index occurs. Half
** types accumulate in f32. */
static TPURT_MUST_USE tpurt_status_t lower_embedding_dense_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t* gt = lower_meta(ctx, 0);
  const tpurt_tensor_t* it = lower_meta(ctx, 1);
  if (!it || !is_index_dtype(it->dtype))
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, "
        "Int; but got %s instead",
        it ? tpurt_dtype_name(it->dtype) : "None");
  int64_t w = lower_int(ctx, 2, 0), pad = lower_int(ctx, 3, -1);
  bool scale = lower_bool(ctx, 4, false);
  int64_t n = numel_of(it->rank, it->sizes);
  int64_t dsize = gt->rank > 0 ? gt->sizes[gt->rank - 1] : 1;
  if (numel_of(gt->rank, gt->sizes) != n * dsize)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "embedding_dense_backward: grad_output %s does not match indices %s",
                       lower_shape_str(gt->rank, gt->sizes), lower_shape_str(it->rank, it->sizes));
  tpurt_dtype_t acc = lower_acc_dtype(gt->dtype);
  int64_t out_dims[2] = {w, dsize};
  ir_value_t zeros = ir_splat(ctx->func, acc, 2, out_dims, 0.0);
  if (n == 0 || w == 0 || dsize == 0) {
    lower_set_result(ctx, 0, lower_cast(ctx, zeros, gt->dtype));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  int64_t gdims[2] = {n, dsize};
  ir_value_t grad = lower_cast(ctx, ir_reshape(f, lower_tensor(ctx, 0), 2, gdims), acc);
  ir_value_t idx = ir_reshape(f, lower_tensor(ctx, 1), 1, &n);
  if (pad >= 0) {
    ir_value_t keep = ir_compare(f, IR_NE, idx, ir_splat(f, it->dtype, 1, &n, (double)pad));
    keep = ir_broadcast_in_dim(f, keep, 2, gdims, (const int64_t[]){0});
    grad = ir_select(f, keep, grad, ir_const_like(f, grad, 0.0));
  }
  if (scale) { /* counts[idx] by a scatter-add of ones, then one gather */
    ir_value_t counts = ir_splat(f, acc, 1, &w, 0.0);
    ir_scatter_dims_t cs = lower_scatter_dims_along(1, 0);
    counts = scatter(ctx, counts, idx, ir_splat(f, acc, 1, &n, 1.0), &cs, COMBINE_ADD);
    ir_value_t per_row = lower_gather_along(ctx, counts, 0, idx);
    per_row = ir_broadcast_in_dim(f, per_row, 2, gdims, (const int64_t[]){0});
    grad = ir_div(f, grad, per_row);
  }
  ir_scatter_dims_t s = lower_scatter_dims_along(2, 0);
  ir_value_t out = scatter(ctx, zeros, idx, grad, &s, COMBINE_ADD);
  lower_set_result(ctx, 0, lower_cast(ctx, out, gt->dtype));
  return NULL;
}

/* The index facts of the rows below (checked before the op runs, checks.c).
** (self, dim, index, ...): index arg 2 along self's dim named by arg 1, in
** each family's words (SELECT: index_select, index_add, index_reduce; COPY:
** index_copy; FILL: index_fill, the one that takes negative indices; GATHER:
** gather and scatter, a RuntimeError). */
#define SELECT_INDEX \
  .index = {.arg = 2, .dim_arg = 1, .bound = LOWER_BOUND_DIM, .error = LOWER_INDEX_ERROR_IN_SELF}
#define COPY_INDEX .index = {.arg = 2, .dim_arg = 1, .bound = LOWER_BOUND_DIM}
#define FILL_INDEX .index = {.arg = 2, .dim_arg = 1, .bound = LOWER_BOUND_DIM, .wraps = true}
#define GATHER_INDEX \
  .index = {.arg = 2, .dim_arg = 1, .bound = LOWER_BOUND_DIM, .error = LOWER_INDEX_ERROR_DIM_RUNTIME}
/* (self, indices, ...): a Tensor?[] list, one index per dim of self */
#define LIST_INDEX .index = {.arg = 1, .bound = LOWER_BOUND_DIMS, .wraps = true}
/* (self, index, ...): indices into self's elements, as if flattened */
#define FLAT_INDEX \
  .index = {.arg = 1, .bound = LOWER_BOUND_NUMEL, .wraps = true, .error = LOWER_INDEX_ERROR_ACCESS}

/* Sorted by name. In-place forms (scatter_.src, masked_fill_.Scalar,
** index_add_...) resolve to these rows. */
const lower_rule_t lower_indexing_rules[] = {
    LOWER_FN_WITH("aten::index_reduce", lower_index_reduce, SELECT_INDEX),
    LOWER_FN("aten::masked_scatter", lower_masked_scatter),
    LOWER_OUT_FN("aten::masked_scatter.out", lower_masked_scatter),
    LOWER_FN_WITH("aten::put", lower_put, FLAT_INDEX),
    LOWER_OUT_FN_WITH("aten::put.out", lower_put, FLAT_INDEX),
    LOWER_OUT_FN_WITH("aten::index_reduce.out", lower_index_reduce, SELECT_INDEX),
    LOWER_INPLACE_FN_WITH("aten::_index_put_impl_", lower_index_put, LIST_INDEX),
    LOWER_FN("aten::embedding_dense_backward", lower_embedding_dense_backward),
    LOWER_FN_WITH("aten::gather", lower_gather, GATHER_INDEX),
    LOWER_OUT_FN_WITH("aten::gather.out", lower_gather, GATHER_INDEX),
    LOWER_FN_WITH("aten::index.Tensor", lower_index, LIST_INDEX),
    LOWER_OUT_FN_WITH("aten::index.Tensor_out", lower_index, LIST_INDEX),
    LOWER_FN_WITH("aten::index_add", lower_index_add, SELECT_INDEX),
    LOWER_OUT_FN_WITH("aten::index_add.out", lower_index_add, SELECT_INDEX),
    LOWER_FN_WITH("aten::index_put", lower_index_put, LIST_INDEX),
    LOWER_FN_WITH("aten::index_select", lower_index_select, SELECT_INDEX),
    LOWER_OUT_FN_WITH("aten::index_select.out", lower_index_select, SELECT_INDEX),
    LOWER_FN("aten::masked_fill.Scalar", lower_masked_fill),
    LOWER_FN("aten::masked_fill.Tensor", lower_masked_fill),
    LOWER_FN_WITH("aten::scatter.reduce", lower_scatter_reduce, GATHER_INDEX),
    LOWER_OUT_FN_WITH("aten::scatter.reduce_out", lower_scatter_reduce, GATHER_INDEX),
    LOWER_FN_WITH("aten::scatter.src", scatter_dim_row, .str = "scatter", .kind = COMBINE_REPLACE,
                  GATHER_INDEX),
    LOWER_OUT_FN_WITH("aten::scatter.src_out", scatter_dim_row, .str = "scatter", .kind = COMBINE_REPLACE,
                      GATHER_INDEX),
    LOWER_FN_WITH("aten::scatter.value", scatter_dim_row, .str = "scatter", .kind = COMBINE_REPLACE,
                  GATHER_INDEX),
    LOWER_OUT_FN_WITH("aten::scatter.value_out", scatter_dim_row, .str = "scatter", .kind = COMBINE_REPLACE,
                      GATHER_INDEX),
    LOWER_FN_WITH("aten::scatter.value_reduce", lower_scatter_reduce, GATHER_INDEX),
    LOWER_OUT_FN_WITH("aten::scatter.value_reduce_out", lower_scatter_reduce, GATHER_INDEX),
    LOWER_FN_WITH("aten::index_copy", lower_index_copy, COPY_INDEX),
    LOWER_OUT_FN_WITH("aten::index_copy.out", lower_index_copy, COPY_INDEX),
    LOWER_FN_WITH("aten::index_fill.int_Scalar", lower_index_fill, FILL_INDEX),
    LOWER_FN_WITH("aten::index_fill.int_Tensor", lower_index_fill, FILL_INDEX),
    LOWER_FN_WITH("aten::scatter_add", scatter_dim_row, .str = "scatter_add", .kind = COMBINE_ADD,
                  GATHER_INDEX),
    LOWER_FN_WITH("aten::take", lower_take, FLAT_INDEX),
    LOWER_OUT_FN_WITH("aten::take.out", lower_take, FLAT_INDEX),
    LOWER_FN_WITH("aten::scatter_reduce.two", lower_scatter_reduce_two, GATHER_INDEX),
    LOWER_OUT_FN_WITH("aten::scatter_reduce.two_out", lower_scatter_reduce_two, GATHER_INDEX),
    LOWER_OUT_FN_WITH("aten::scatter_add.out", scatter_dim_row, .str = "scatter_add", .kind = COMBINE_ADD,
                      GATHER_INDEX),
    LOWER_END,
};
