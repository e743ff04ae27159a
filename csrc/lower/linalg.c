/* linalg.c: mm, bmm, addmm, baddbmm, dot through dot_general. Half types
** accumulate in f32 and round once, as PyTorch's CPU kernels do. Bad
** operands raise PyTorch's own words for each op, checked in its order
** (tests and users match on them): mm's "expected m1 and m2 ...", addmm's
** "self and mat2 ..." then "mat1 and mat2 ...", bmm's "expected scalar
** type", baddbmm's "Input dtypes must be the same", addmv's three dtypes. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

static TPURT_MUST_USE tpurt_status_t same_dtype(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "expected m1 and m2 to have the same dtype, but got: %s != %s",
                       lower_dtype_cpp_name(a->dtype), lower_dtype_cpp_name(b->dtype));
  return NULL;
}

/* addmm's and addbmm's dtype checks, before any shape check. */
static TPURT_MUST_USE tpurt_status_t addmm_dtypes(const tpurt_tensor_t* self, const tpurt_tensor_t* a,
                                                  const tpurt_tensor_t* b) {
  if (self->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "self and mat2 must have the same dtype, but got %s and %s",
                       tpurt_dtype_name(self->dtype), tpurt_dtype_name(b->dtype));
  if (a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "mat1 and mat2 must have the same dtype, but got %s and %s",
                       tpurt_dtype_name(a->dtype), tpurt_dtype_name(b->dtype));
  return NULL;
}

/* a @ b over the last two dims with |batch| leading batch dims, in the
** accumulation type of |dtype| (f32 for half types), not yet rounded. */
static ir_value_t matmul_acc(lower_ctx_t* ctx, ir_value_t a, ir_value_t b, int32_t batch,
                             tpurt_dtype_t dtype) {
  ir_dot_dims_t d = {.num_batch = batch, .num_contract = 1};
  for (int32_t i = 0; i < batch; ++i) d.lhs_batch[i] = d.rhs_batch[i] = i;
  d.lhs_contract[0] = batch + 1;
  d.rhs_contract[0] = batch;
  return ir_dot_general(ctx->func, a, b, &d, lower_acc_dtype(dtype));
}

static ir_value_t matmul(lower_ctx_t* ctx, ir_value_t a, ir_value_t b, int32_t batch, tpurt_dtype_t dtype) {
  return lower_cast(ctx, matmul_acc(ctx, a, b, batch, dtype), dtype);
}

static TPURT_MUST_USE tpurt_status_t check_mm(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (a->rank != 2) return lower_error(TPURT_INVALID_ARGUMENT, "self must be a matrix");
  if (b->rank != 2) return lower_error(TPURT_INVALID_ARGUMENT, "mat2 must be a matrix");
  if (a->sizes[1] != b->sizes[0])
    return lower_error(
        TPURT_INVALID_ARGUMENT, "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
        (long long)a->sizes[0], (long long)a->sizes[1], (long long)b->sizes[0], (long long)b->sizes[1]);
  return same_dtype(a, b);
}

/* The bmm family's shape checks (dtypes are each op's own). */
static TPURT_MUST_USE tpurt_status_t check_bmm_shapes(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  if (a->rank != 3) return lower_error(TPURT_INVALID_ARGUMENT, "batch1 must be a 3D tensor");
  if (b->rank != 3) return lower_error(TPURT_INVALID_ARGUMENT, "batch2 must be a 3D tensor");
  if (b->sizes[0] != a->sizes[0] || b->sizes[1] != a->sizes[2])
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] but got: [%lld, "
        "%lld].",
        (long long)a->sizes[0], (long long)a->sizes[2], (long long)b->sizes[0], (long long)b->sizes[1]);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t check_bmm(const tpurt_tensor_t* a, const tpurt_tensor_t* b) {
  TPURT_RETURN_IF_ERROR(check_bmm_shapes(a, b));
  if (a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "expected scalar type %s but found %s",
                       tpurt_dtype_name(a->dtype), tpurt_dtype_name(b->dtype));
  return NULL;
}

/* The out= forms of the matmuls take only an out tensor of the result's
** dtype, as PyTorch's do (the elementwise ops cast instead). */
static TPURT_MUST_USE tpurt_status_t check_out_dtype(const lower_ctx_t* ctx, tpurt_dtype_t dtype) {
  if (!ctx->rule || ctx->rule->variant != LOWER_OUT) return NULL;
  const tpurt_arg_t* out = &ctx->args[ctx->arg_index[ctx->num_args]];
  if (out->kind != TPURT_ARG_TENSOR || out->u.tensor.dtype == dtype) return NULL;
  return lower_error(TPURT_INVALID_ARGUMENT, "Expected out tensor to have dtype %s, but got %s instead",
                     lower_dtype_cpp_name(dtype), lower_dtype_cpp_name(out->u.tensor.dtype));
}

static TPURT_MUST_USE tpurt_status_t lower_mm(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_mm(a, b));
  TPURT_RETURN_IF_ERROR(check_out_dtype(ctx, a->dtype));
  lower_set_result(ctx, 0, matmul(ctx, lower_tensor(ctx, 0), lower_tensor(ctx, 1), 0, a->dtype));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_bmm(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_bmm(a, b));
  TPURT_RETURN_IF_ERROR(check_out_dtype(ctx, a->dtype));
  lower_set_result(ctx, 0, matmul(ctx, lower_tensor(ctx, 0), lower_tensor(ctx, 1), 1, a->dtype));
  return NULL;
}

/* beta * self + alpha * product; self broadcasts to the product's shape.
** beta == 0 ignores self entirely (nan and inf in it do not propagate).
** |product| is in the accumulation type: half types scale and add in f32
** and round once to |dtype|, as PyTorch's CPU kernels (opmath) do. */
static TPURT_MUST_USE tpurt_status_t scaled_sum(lower_ctx_t* ctx, ir_value_t product, tpurt_dtype_t dtype,
                                                int32_t beta_arg, int32_t alpha_arg) {
  ir_func_t* f = ctx->func;
  const ir_type_t* pt = ir_value_type(f, product);
  if (!pt) return NULL;
  ir_type_t t = *pt;
  const tpurt_tensor_t* self = lower_meta(ctx, 0);
  int32_t r;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(self->rank, self->sizes, t.rank, t.dims, &r, dims));
  if (r != t.rank)
    return lower_error(TPURT_INVALID_ARGUMENT, "expand: the self tensor of shape %s cannot broadcast to %s",
                       lower_shape_str(self->rank, self->sizes), lower_shape_str(t.rank, t.dims));
  if (!lower_scalar_is(ctx, alpha_arg, 1.0))
    product =
        ir_mul(f, product, lower_broadcast_to(ctx, lower_scalar(ctx, alpha_arg, t.dtype), t.rank, t.dims));
  if (lower_scalar_is(ctx, beta_arg, 0.0)) {
    lower_set_result(ctx, 0, lower_cast(ctx, product, dtype));
    return NULL;
  }
  ir_value_t s = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), t.dtype), t.rank, t.dims);
  if (!lower_scalar_is(ctx, beta_arg, 1.0))
    s = ir_mul(f, s, lower_broadcast_to(ctx, lower_scalar(ctx, beta_arg, t.dtype), t.rank, t.dims));
  lower_set_result(ctx, 0, lower_cast(ctx, ir_add(f, s, product), dtype));
  return NULL;
}

/* addmm(self, mat1, mat2, *, beta=1, alpha=1) */
static TPURT_MUST_USE tpurt_status_t lower_addmm(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 1), *b = lower_meta(ctx, 2);
  TPURT_RETURN_IF_ERROR(addmm_dtypes(lower_meta(ctx, 0), a, b));
  if (a->rank != 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "mat1 must be a matrix, got %d-D tensor", a->rank);
  if (b->rank != 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "mat2 must be a matrix, got %d-D tensor", b->rank);
  TPURT_RETURN_IF_ERROR(check_mm(a, b));
  ir_value_t p = matmul_acc(ctx, lower_tensor(ctx, 1), lower_tensor(ctx, 2), 0, a->dtype);
  return scaled_sum(ctx, p, a->dtype, 3, 4);
}

/* baddbmm(self, batch1, batch2, *, beta=1, alpha=1) */
static TPURT_MUST_USE tpurt_status_t lower_baddbmm(lower_ctx_t* ctx) {
  const tpurt_tensor_t *self = lower_meta(ctx, 0), *a = lower_meta(ctx, 1), *b = lower_meta(ctx, 2);
  if (self->dtype != a->dtype || a->dtype != b->dtype)
    return lower_error(
        TPURT_INVALID_ARGUMENT, "Input dtypes must be the same, got: input %s, batch1: %s, batch2: %s",
        lower_dtype_cpp_name(self->dtype), lower_dtype_cpp_name(a->dtype), lower_dtype_cpp_name(b->dtype));
  TPURT_RETURN_IF_ERROR(check_bmm_shapes(a, b));
  ir_value_t p = matmul_acc(ctx, lower_tensor(ctx, 1), lower_tensor(ctx, 2), 1, a->dtype);
  return scaled_sum(ctx, p, a->dtype, 3, 4);
}

/* addmv(self, mat, vec, *, beta=1, alpha=1): mv and matmul with a 1-D
** operand come here. */
static TPURT_MUST_USE tpurt_status_t lower_addmv(lower_ctx_t* ctx) {
  const tpurt_tensor_t *m = lower_meta(ctx, 1), *v = lower_meta(ctx, 2);
  if (m->rank != 2 || v->rank != 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "vector + matrix @ vector expected, got %d, %d, %d",
                       lower_meta(ctx, 0)->rank, m->rank, v->rank);
  if (m->sizes[1] != v->sizes[0])
    return lower_error(TPURT_INVALID_ARGUMENT, "size mismatch, got input (%lld), mat (%lldx%lld), vec (%lld)",
                       (long long)(lower_meta(ctx, 0)->rank ? lower_meta(ctx, 0)->sizes[0] : 1),
                       (long long)m->sizes[0], (long long)m->sizes[1], (long long)v->sizes[0]);
  if (m->dtype != v->dtype || lower_meta(ctx, 0)->dtype != m->dtype)
    return lower_error(
        TPURT_INVALID_ARGUMENT, "addmv input tensors must have the same dtype, but got %s, %s, and %s",
        tpurt_dtype_name(lower_meta(ctx, 0)->dtype), tpurt_dtype_name(m->dtype), tpurt_dtype_name(v->dtype));
  ir_value_t p = matmul_acc(ctx, lower_tensor(ctx, 1), lower_tensor(ctx, 2), 0, m->dtype);
  return scaled_sum(ctx, p, m->dtype, 3, 4);
}

/* dot(self, tensor): 1-D inner product. */
static TPURT_MUST_USE tpurt_status_t lower_dot(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1);
  if (a->rank != 1 || b->rank != 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "1D tensors expected, but got %dD and %dD tensors", a->rank,
                       b->rank);
  if (a->sizes[0] != b->sizes[0])
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "inconsistent tensor size, expected tensor [%lld] and src [%lld] to have the same number of "
        "elements, but got %lld and %lld elements respectively",
        (long long)a->sizes[0], (long long)b->sizes[0], (long long)a->sizes[0], (long long)b->sizes[0]);
  if (a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "dot : expected both vectors to have same dtype, but found %s and %s",
                       tpurt_dtype_name(a->dtype), tpurt_dtype_name(b->dtype));
  ir_dot_dims_t d = {.num_contract = 1, .lhs_contract = {0}, .rhs_contract = {0}};
  ir_value_t r =
      ir_dot_general(ctx->func, lower_tensor(ctx, 0), lower_tensor(ctx, 1), &d, lower_acc_dtype(a->dtype));
  lower_set_result(ctx, 0, lower_cast(ctx, r, a->dtype));
  return NULL;
}

/* addbmm(self, batch1, batch2, *, beta=1, alpha=1). CPU runs one addmm_ per
** batch: r = beta*self + alpha*p0, then r += alpha*p_b, rounding r to the
** dtype after each; up to 64 batches this is unrolled in that order (half
** types round where CPU rounds), beyond that the products are summed by one
** reduction. */
static TPURT_MUST_USE tpurt_status_t lower_addbmm(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 1), *b = lower_meta(ctx, 2);
  TPURT_RETURN_IF_ERROR(addmm_dtypes(lower_meta(ctx, 0), a, b));
  TPURT_RETURN_IF_ERROR(check_bmm_shapes(a, b));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(a->dtype);
  ir_value_t p = matmul_acc(ctx, lower_tensor(ctx, 1), lower_tensor(ctx, 2), 1, a->dtype);
  int64_t nb = a->sizes[0], n = a->sizes[1], m = b->sizes[2];
  if (nb == 0 || nb > 64) {
    int64_t batch = 0;
    p = ir_reduce(f, p, lower_cast(ctx, ir_constant_f64(f, TPURT_DTYPE_F64, 0.0), acc), &batch, 1,
                  IR_REDUCE_ADD);
    return scaled_sum(ctx, p, a->dtype, 3, 4);
  }
  int64_t mn[2] = {n, m};
  ir_value_t r = IR_NONE;
  for (int64_t i = 0; i < nb; ++i) {
    int64_t start[3] = {i, 0, 0}, limit[3] = {i + 1, n, m}, strides[3] = {1, 1, 1};
    ir_value_t pi = ir_reshape(f, ir_slice(f, p, start, limit, strides), 2, mn);
    if (i == 0) {
      TPURT_RETURN_IF_ERROR(scaled_sum(ctx, pi, a->dtype, 3, 4)); /* sets result 0 */
      r = ctx->results[0];
      continue;
    }
    if (!lower_scalar_is(ctx, 4, 1.0))
      pi = ir_mul(f, pi, lower_broadcast_to(ctx, lower_scalar(ctx, 4, acc), 2, mn));
    r = lower_cast(ctx, ir_add(f, lower_cast(ctx, r, acc), pi), a->dtype);
  }
  lower_set_result(ctx, 0, r);
  return NULL;
}

/* The p-norm over dim |last| of |d| (absolute differences, in their
** computation dtype): p = 0 counts the nonzeros, inf takes the largest, 1
** and 2 are direct, any other p goes through powers. */
static ir_value_t p_norm_over(lower_ctx_t* ctx, ir_value_t d, int64_t last, double p) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, d);
  if (!t) return IR_NONE;
  tpurt_dtype_t acc = t->dtype;
  ir_value_t zero = ir_constant_f64(f, acc, 0.0);
  ir_value_t r;
  if (p == 0) {
    r = ir_reduce(f, ir_convert(f, ir_compare(f, IR_NE, d, ir_const_like(f, d, 0.0)), acc), zero, &last, 1,
                  IR_REDUCE_ADD);
  } else if (isinf(p)) {
    r = ir_reduce(f, d, zero, &last, 1, IR_REDUCE_MAX);
  } else if (p == 1) {
    r = ir_reduce(f, d, zero, &last, 1, IR_REDUCE_ADD);
  } else if (p == 2) {
    r = ir_unary(f, IR_OP_SQRT, ir_reduce(f, ir_mul(f, d, d), zero, &last, 1, IR_REDUCE_ADD));
  } else {
    r = ir_reduce(f, ir_pow(f, d, ir_const_like(f, d, p)), zero, &last, 1, IR_REDUCE_ADD);
    r = ir_pow(f, r, ir_const_like(f, r, 1.0 / p));
  }
  return r;
}

/* _cdist_forward(x1 [*, P, M], x2 [*, R, M], p, compute_mode?) -> [*, P, R]:
** (sum |a - b|^p)^(1/p) over M, computed directly on the broadcast
** differences (p = 0 counts nonzeros, p = inf takes the max); for p = 2 in
** the matrix-product mode (asked for, or above 25 rows by default), as CPU:
** sqrt(max(0, |a|^2 + |b|^2 - 2 a.b)) as one product of augmented rows.
** The value of p picks the program, so this row keys on it. */
static TPURT_MUST_USE tpurt_status_t lower_cdist(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1);
  if (a->rank < 2 || b->rank < 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "cdist only supports at least 2D tensors, X1 got: %dD",
                       (int)a->rank);
  if (a->sizes[a->rank - 1] != b->sizes[b->rank - 1])
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "X1 and X2 must have the same number of columns. X1: %lld X2: %lld",
                       (long long)a->sizes[a->rank - 1], (long long)b->sizes[b->rank - 1]);
  if (!tpurt_dtype_is_float(a->dtype) || a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "cdist only supports floating-point dtypes, X1 got: %s",
                       tpurt_dtype_name(a->dtype));
  double p = lower_scalar_value(ctx, 2);
  if (!(p >= 0)) return lower_error(TPURT_INVALID_ARGUMENT, "cdist only supports non-negative p values");
  int64_t mode = lower_is_none(ctx, 3) ? 0 : lower_int(ctx, 3, 0);
  int64_t rows_a = a->sizes[a->rank - 2], rows_b = b->sizes[b->rank - 2];
  bool mm_form = p == 2.0 && (mode == 1 || (mode == 0 && (rows_a > 25 || rows_b > 25)));
  /* batch dims broadcast */
  int32_t br;
  int64_t bdims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(a->rank - 2, a->sizes, b->rank - 2, b->sizes, &br, bdims));
  if (br + 3 > TPURT_MAX_RANK) return lower_error(TPURT_UNIMPLEMENTED, "cdist over this many batch dims");
  int64_t m = a->sizes[a->rank - 1];
  tpurt_dtype_t acc = lower_acc_dtype(a->dtype);
  ir_func_t* f = ctx->func;
  int64_t da[TPURT_MAX_RANK], db[TPURT_MAX_RANK], full[TPURT_MAX_RANK], map_a[TPURT_MAX_RANK],
      map_b[TPURT_MAX_RANK];
  for (int32_t i = 0; i < br; ++i) da[i] = db[i] = full[i] = bdims[i], map_a[i] = map_b[i] = i;
  da[br] = rows_a, da[br + 1] = m;
  db[br] = rows_b, db[br + 1] = m;
  full[br] = rows_a, full[br + 1] = rows_b, full[br + 2] = m;
  map_a[br] = br, map_a[br + 1] = br + 2;
  map_b[br] = br + 1, map_b[br + 1] = br + 2;
  ir_value_t x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), br + 2, da);
  ir_value_t y = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), acc), br + 2, db);
  if (mm_form) { /* |a - b|^2 = [-2a, |a|^2, 1] . [b, 1, |b|^2], clamped at 0 */
    int64_t row = br + 1;
    ir_value_t xn = ir_reduce(f, ir_mul(f, x, x), ir_constant_f64(f, acc, 0.0), &row, 1, IR_REDUCE_ADD);
    ir_value_t yn = ir_reduce(f, ir_mul(f, y, y), ir_constant_f64(f, acc, 0.0), &row, 1, IR_REDUCE_ADD);
    int64_t ca[TPURT_MAX_RANK], cb[TPURT_MAX_RANK];
    memcpy(ca, da, sizeof(ca));
    memcpy(cb, db, sizeof(cb));
    ca[br + 1] = cb[br + 1] = 1;
    xn = ir_reshape(f, xn, br + 2, ca);
    yn = ir_reshape(f, yn, br + 2, cb);
    ir_value_t xs[3] = {ir_mul(f, x, ir_const_like(f, x, -2.0)), xn, ir_const_like(f, xn, 1.0)};
    ir_value_t ys[3] = {y, ir_const_like(f, yn, 1.0), yn};
    ir_value_t xa = ir_concatenate(f, xs, 3, br + 1), ya = ir_concatenate(f, ys, 3, br + 1);
    ir_dot_dims_t dd = {.num_batch = br, .num_contract = 1};
    for (int32_t i = 0; i < br; ++i) dd.lhs_batch[i] = dd.rhs_batch[i] = i;
    dd.lhs_contract[0] = dd.rhs_contract[0] = br + 1;
    ir_value_t sq = ir_dot_general(f, xa, ya, &dd, acc);
    sq = ir_max(f, sq, ir_const_like(f, sq, 0.0));
    lower_set_result(ctx, 0, lower_cast(ctx, ir_sqrt(f, sq), a->dtype));
    return NULL;
  }
  ir_value_t d = ir_unary(f, IR_OP_ABS,
                          ir_sub(f, ir_broadcast_in_dim(f, x, br + 3, full, map_a),
                                 ir_broadcast_in_dim(f, y, br + 3, full, map_b)));
  ir_value_t r = p_norm_over(ctx, d, br + 2, p);
  lower_set_result(ctx, 0, lower_cast(ctx, r, a->dtype));
  return NULL;
}

/* _pdist_forward(self [N, M], p=2) -> [N (N - 1) / 2]: the distances of
** every row pair i < j in row-major order, cdist's direct form on the rows
** against themselves, then the upper triangle gathered. Keyed on p. */
static TPURT_MUST_USE tpurt_status_t lower_pdist(lower_ctx_t* ctx) {
  const tpurt_tensor_t* a = lower_meta(ctx, 0);
  if (a->rank != 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "pdist only supports 2D tensors, got: %dD", (int)a->rank);
  if (!tpurt_dtype_is_float(a->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "pdist only supports floating-point dtypes");
  double p = lower_scalar_value(ctx, 1);
  if (!(p >= 0)) return lower_error(TPURT_INVALID_ARGUMENT, "pdist only supports non-negative p values");
  int64_t n = a->sizes[0], m = a->sizes[1], pairs = n * (n - 1) / 2;
  tpurt_dtype_t acc = lower_acc_dtype(a->dtype);
  ir_func_t* f = ctx->func;
  if (pairs <= 0) {
    lower_set_result(ctx, 0, ir_splat(f, a->dtype, 1, &pairs, 0.0));
    return NULL;
  }
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  int64_t full[3] = {n, n, m}, map_a[2] = {0, 2}, map_b[2] = {1, 2};
  ir_value_t d = ir_unary(
      f, IR_OP_ABS,
      ir_sub(f, ir_broadcast_in_dim(f, x, 3, full, map_a), ir_broadcast_in_dim(f, x, 3, full, map_b)));
  ir_value_t r = p_norm_over(ctx, d, 2, p);
  /* the (i, j), i < j, flat indices i * n + j: a constant */
  int64_t* flat_idx = tpurt_xmalloc(sizeof(int64_t) * (size_t)pairs);
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) flat_idx[c++] = i * n + j;
  int64_t id[2] = {pairs, 1};
  ir_value_t idx = ir_constant_i64_array(f, ir_type_make(TPURT_DTYPE_I64, 2, id), flat_idx);
  free(flat_idx);
  int64_t nn = n * n;
  ir_value_t out = lower_gather_along(ctx, ir_reshape(f, r, 1, &nn), 0, idx);
  lower_set_result(ctx, 0, lower_cast(ctx, ir_reshape(f, out, 1, &pairs), a->dtype));
  return NULL;
}

/* linalg_cross(self, other, dim=-1): the 3-vector cross product along |dim|
** of the broadcast inputs, component by component. */
static TPURT_MUST_USE tpurt_status_t lower_linalg_cross(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1);
  if (a->rank != b->rank)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.cross: inputs must have the same number of dimensions.");
  int32_t rank = 0;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(a->rank, a->sizes, b->rank, b->sizes, &rank, dims));
  int64_t dim = 0, given = lower_int(ctx, 2, -1);
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(given, rank, &dim));
  if (a->sizes[dim] != 3 || b->sizes[dim] != 3)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.cross: inputs dimension %lld must have length 3. Got %lld and %lld",
                       (long long)given, (long long)a->sizes[dim], (long long)b->sizes[dim]);
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  ir_value_t x = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), dt), rank, dims);
  ir_value_t y = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), dt), rank, dims);
  ir_value_t xc[3], yc[3];
  int64_t start[TPURT_MAX_RANK] = {0}, limit[TPURT_MAX_RANK], strides[TPURT_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) {
    limit[i] = dims[i];
    strides[i] = 1;
  }
  for (int32_t c = 0; c < 3; ++c) {
    start[dim] = c;
    limit[dim] = c + 1;
    xc[c] = ir_slice(ctx->func, x, start, limit, strides);
    yc[c] = ir_slice(ctx->func, y, start, limit, strides);
  }
  ir_value_t out[3];
  for (int32_t c = 0; c < 3; ++c) {
    int32_t p = (c + 1) % 3, q = (c + 2) % 3;
    ir_value_t pq = ir_mul(ctx->func, xc[p], yc[q]);
    out[c] = ir_sub(ctx->func, pq, ir_mul(ctx->func, xc[q], yc[p]));
  }
  lower_set_result(ctx, 0, ir_concatenate(ctx->func, out, 3, dim));
  return NULL;
}

/* linalg_matrix_exp(self): scaling and squaring. Each matrix is scaled by
** 2^-s (exactly: s goes into the exponent bits) so that its 1-norm is at
** most 1, exponentiated by its degree-18 Taylor polynomial (Horner; the
** remainder is below 1e-16 there), then squared s times. One while loop
** runs to the batch's largest s; a matrix stops squaring at its own. */
#define MATRIX_EXP_DEGREE 18
#define MATRIX_EXP_MAX_SQUARINGS 100
static TPURT_MUST_USE tpurt_status_t lower_matrix_exp(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (t->rank < 2 || t->sizes[t->rank - 1] != t->sizes[t->rank - 2])
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.matrix_exp: A must be batches of square matrices, but they are %lld by %lld "
                       "matrices",
                       (long long)(t->rank >= 2 ? t->sizes[t->rank - 2] : 0),
                       (long long)(t->rank >= 1 ? t->sizes[t->rank - 1] : 0));
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "linalg.matrix_exp: Expected a floating point tensor, got %s",
                       tpurt_dtype_name(t->dtype));
  ir_func_t* f = ctx->func;
  const int32_t rank = t->rank, batch = rank - 2;
  const bool wide = t->dtype == TPURT_DTYPE_F64;
  const tpurt_dtype_t acc = wide ? TPURT_DTYPE_F64 : TPURT_DTYPE_F32;
  const tpurt_dtype_t bits = wide ? TPURT_DTYPE_I64 : TPURT_DTYPE_I32;
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; ++d) numel *= t->sizes[d];
  ir_value_t a = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  if (numel == 0) {
    lower_set_result(ctx, 0, lower_tensor(ctx, 0));
    return NULL;
  }
  /* s = ceil(log2(|A|_1)) clamped to [0, MAX], per matrix ([batch...]) */
  int64_t rows = rank - 2, cols = batch;
  ir_value_t colsum = ir_reduce(f, ir_abs(f, a), ir_constant_f64(f, acc, 0.0), &rows, 1, IR_REDUCE_ADD);
  ir_value_t norm = ir_reduce(f, colsum, ir_constant_f64(f, acc, 0.0), &cols, 1, IR_REDUCE_MAX);
  ir_value_t lg = ir_div(f, ir_log(f, norm), ir_const_like(f, norm, log(2.0)));
  ir_value_t sf = ir_clamp(f, ir_constant_f64(f, acc, 0.0), ir_unary(f, IR_OP_CEIL, lg),
                           ir_constant_f64(f, acc, MATRIX_EXP_MAX_SQUARINGS));
  sf = ir_select(f, ir_compare(f, IR_NE, sf, sf), ir_const_like(f, sf, 0.0), sf); /* NaN norm */
  ir_value_t s = ir_convert(f, sf, bits);
  /* 2^-s: the biased exponent (bias - s) in place */
  const int64_t bias = wide ? 1023 : 127, mant = wide ? 52 : 23;
  ir_value_t e = ir_binary(f, IR_OP_SHIFT_LEFT, ir_sub(f, ir_const_like(f, s, (double)bias), s),
                           ir_const_like(f, s, (double)mant));
  const ir_type_t* st = ir_value_type(f, s);
  ir_type_t scale_t = *st;
  scale_t.dtype = acc;
  ir_value_t scale = ir_bitcast_convert(f, e, scale_t);
  int64_t bd[TPURT_MAX_RANK];
  for (int32_t d = 0; d < batch; ++d) bd[d] = d;
  ir_value_t as = ir_mul(f, a, ir_broadcast_in_dim(f, scale, rank, t->sizes, bd));
  /* identity [..., n, n] */
  ir_type_t it = ir_type_make(TPURT_DTYPE_I32, rank, t->sizes);
  ir_value_t eye =
      lower_cast(ctx, ir_compare(f, IR_EQ, ir_iota(f, it, rank - 2), ir_iota(f, it, rank - 1)), acc);
  ir_value_t p = ir_add(f, eye, ir_div(f, as, ir_const_like(f, as, (double)MATRIX_EXP_DEGREE)));
  for (int32_t k = MATRIX_EXP_DEGREE - 1; k >= 1; --k) {
    ir_value_t ap = matmul_acc(ctx, as, p, batch, acc);
    p = ir_add(f, eye, ir_div(f, ap, ir_const_like(f, ap, (double)k)));
  }
  /* square s times */
  int64_t all[TPURT_MAX_RANK];
  for (int32_t d = 0; d < batch; ++d) all[d] = d;
  ir_value_t smax = batch ? ir_reduce(f, s, ir_constant_i64(f, bits, 0), all, batch, IR_REDUCE_MAX) : s;
  ir_value_t init[2] = {ir_constant_i64(f, bits, 0), p}, cargs[2], bargs[2], out[2];
  ir_region_op_t loop = ir_while_begin(f, init, 2, cargs);
  ir_value_t go = ir_compare(f, IR_LT, cargs[0], smax);
  ir_region_end(f, &go, 1);
  ir_while_body(f, &loop, bargs);
  ir_value_t sq = matmul_acc(ctx, bargs[1], bargs[1], batch, acc);
  ir_value_t more = ir_compare(f, IR_LT, ir_broadcast_in_dim(f, bargs[0], batch, t->sizes, NULL), s);
  ir_value_t next[2] = {ir_add(f, bargs[0], ir_constant_i64(f, bits, 1)),
                        ir_select(f, ir_broadcast_in_dim(f, more, rank, t->sizes, bd), sq, bargs[1])};
  ir_region_end(f, next, 2);
  ir_while_end(f, &loop, out);
  lower_set_result(ctx, 0, lower_cast(ctx, out[1], t->dtype));
  return NULL;
}

const lower_rule_t lower_linalg_rules[] = {
    LOWER_FN("aten::linalg_matrix_exp", lower_matrix_exp),
    LOWER_KEYED_FN("aten::_pdist_forward", lower_pdist),
    LOWER_FN("aten::linalg_cross", lower_linalg_cross),
    LOWER_OUT_FN("aten::linalg_cross.out", lower_linalg_cross),
    /* p picks the program: keyed */
    LOWER_KEYED_FN("aten::_cdist_forward", lower_cdist),
    LOWER_FN("aten::addbmm", lower_addbmm),
    LOWER_OUT_FN("aten::addbmm.out", lower_addbmm),
    LOWER_FN("aten::vdot", lower_dot), /* real dtypes only: no conjugate */
    LOWER_FN("aten::addmm", lower_addmm),
    LOWER_OUT_FN("aten::addmm.out", lower_addmm),
    LOWER_FN("aten::addmv", lower_addmv),
    LOWER_OUT_FN("aten::addmv.out", lower_addmv),
    LOWER_FN("aten::baddbmm", lower_baddbmm),
    LOWER_OUT_FN("aten::baddbmm.out", lower_baddbmm),
    LOWER_FN("aten::bmm", lower_bmm),
    LOWER_OUT_FN("aten::bmm.out", lower_bmm),
    LOWER_FN("aten::dot", lower_dot),
    LOWER_FN("aten::mm", lower_mm),
    LOWER_OUT_FN("aten::mm.out", lower_mm),
    LOWER_END,
};
