/* decomp.c: matrix decompositions and the solves built on them: Cholesky,
** triangular solve, LU with partial pivoting (LAPACK's row choice: the
** first largest |value|), and det, slogdet, inv, solve, lu_solve, lu_unpack
** on top of LU.
**
** Every algorithm is a right-looking loop over the pivot index k, unrolled
** at lowering time: n is static, and each step is a constant number of
** whole-matrix ops (slices, masked outer-product updates, selects), so the
** program grows as O(n) ops and runs entirely on the device. Matrices are
** worked on as [batch, rows, cols] (batch dims flattened), in the op-math
** dtype. Beyond DECOMP_MAX_N the rule declines (the CPU fallback, loud); a
** stablehlo.while form would lift the bound. Failures that LAPACK reports in
** |info| (a zero pivot, a matrix that is not positive-definite) are
** reported the same way, as a device tensor; PyTorch's composites check it. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

#define DECOMP_MAX_N 128

static const ir_type_t* type_of(lower_ctx_t* ctx, ir_value_t v) { return ir_value_type(ctx->func, v); }

/* A[:, k, :] as [B, c] */
static ir_value_t row(lower_ctx_t* ctx, ir_value_t a, int64_t k) {
  const ir_type_t* t = type_of(ctx, a);
  int64_t start[3] = {0, k, 0}, limit[3] = {t->dims[0], k + 1, t->dims[2]}, one[3] = {1, 1, 1};
  int64_t dims[2] = {t->dims[0], t->dims[2]};
  return ir_reshape(ctx->func, ir_slice(ctx->func, a, start, limit, one), 2, dims);
}

/* A[:, :, k] as [B, r] */
static ir_value_t col(lower_ctx_t* ctx, ir_value_t a, int64_t k) {
  const ir_type_t* t = type_of(ctx, a);
  int64_t start[3] = {0, 0, k}, limit[3] = {t->dims[0], t->dims[1], k + 1}, one[3] = {1, 1, 1};
  int64_t dims[2] = {t->dims[0], t->dims[1]};
  return ir_reshape(ctx->func, ir_slice(ctx->func, a, start, limit, one), 2, dims);
}

/* v[:, i] as [B] */
static ir_value_t elem(lower_ctx_t* ctx, ir_value_t v, int64_t i) {
  const ir_type_t* t = type_of(ctx, v);
  int64_t start[2] = {0, i}, limit[2] = {t->dims[0], i + 1}, one[2] = {1, 1};
  return ir_reshape(ctx->func, ir_slice(ctx->func, v, start, limit, one), 1, t->dims);
}

/* v [B, n] broadcast to [B, r, c] as every row (|kept| 2) or every column (|kept| 1) */
static ir_value_t spread(lower_ctx_t* ctx, ir_value_t v, const int64_t* dims3, int64_t kept) {
  int64_t bd[2] = {0, kept};
  return ir_broadcast_in_dim(ctx->func, v, 3, dims3, bd);
}
static ir_value_t spread_batch(lower_ctx_t* ctx, ir_value_t v, int32_t rank, const int64_t* dims) {
  int64_t bd[1] = {0};
  return ir_broadcast_in_dim(ctx->func, v, rank, dims, bd);
}

/* u[B, r] (x) v[B, c] -> [B, r, c] */
static ir_value_t outer(lower_ctx_t* ctx, ir_value_t u, ir_value_t v) {
  int64_t dims[3] = {type_of(ctx, u)->dims[0], type_of(ctx, u)->dims[1], type_of(ctx, v)->dims[1]};
  return ir_mul(ctx->func, spread(ctx, u, dims, 1), spread(ctx, v, dims, 2));
}

/* iota along |dim| of a [B, r, c] (or [B, n]) shape, compared with |k| */
static ir_value_t index_is(lower_ctx_t* ctx, int32_t rank, const int64_t* dims, int32_t dim,
                           ir_compare_dir_t dir, int64_t k) {
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, rank, dims);
  ir_value_t iota = ir_iota(ctx->func, it, dim);
  return ir_compare(ctx->func, dir, iota, ir_const_like(ctx->func, iota, (double)k));
}

/* A with row k replaced by v[B, c] */
static ir_value_t set_row(lower_ctx_t* ctx, ir_value_t a, int64_t k, ir_value_t v) {
  const ir_type_t* t = type_of(ctx, a);
  return ir_select(ctx->func, index_is(ctx, 3, t->dims, 1, IR_EQ, k), spread(ctx, v, t->dims, 2), a);
}

/* Solves op(T) X = Y for X, T [B, n, n] triangular (|lower|, |unit| diagonal),
** op = transpose when |trans|; Y [B, n, m]. Substitution, one row per step. */
static ir_value_t solve_triangular(lower_ctx_t* ctx, ir_value_t t, ir_value_t y, bool lower, bool unit,
                                   bool trans) {
  const ir_type_t* yt = type_of(ctx, y);
  int64_t n = yt->dims[1];
  int64_t dims[3] = {yt->dims[0], yt->dims[1], yt->dims[2]};
  bool eff_lower = lower != trans;
  for (int64_t s = 0; s < n; ++s) {
    int64_t k = eff_lower ? s : n - 1 - s;
    ir_value_t c = trans ? row(ctx, t, k) : col(ctx, t, k); /* column k of op(T) */
    ir_value_t yk = row(ctx, y, k);
    if (!unit) {
      int64_t bm[2] = {dims[0], dims[2]}, b0[1] = {0};
      yk = ir_div(ctx->func, yk, ir_broadcast_in_dim(ctx->func, elem(ctx, c, k), 2, bm, b0));
      y = set_row(ctx, y, k, yk);
    }
    ir_value_t mask = index_is(ctx, 3, dims, 1, eff_lower ? IR_GT : IR_LT, k);
    ir_value_t upd = outer(ctx, c, yk);
    y = ir_sub(ctx->func, y, ir_select(ctx->func, mask, upd, ir_const_like(ctx->func, upd, 0.0)));
  }
  return y;
}

static ir_value_t transpose3(lower_ctx_t* ctx, ir_value_t a) {
  int64_t perm[3] = {0, 2, 1};
  return ir_transpose(ctx->func, a, perm);
}

/*===--- shapes and checks ---===*/

/* A batch of matrices: the batch dims, their product, and the matrix dims. */
typedef struct mats_s {
  int32_t batch_rank;
  int64_t batch[TPURT_MAX_RANK];
  int64_t count, rows, cols;
} mats_t;

static mats_t mats_of(const tpurt_tensor_t* t) {
  mats_t m = {.batch_rank = t->rank - 2, .count = 1};
  for (int32_t i = 0; i < t->rank - 2; ++i) {
    m.batch[i] = t->sizes[i];
    m.count *= t->sizes[i];
  }
  m.rows = t->sizes[t->rank - 2];
  m.cols = t->sizes[t->rank - 1];
  return m;
}

static TPURT_MUST_USE tpurt_status_t check_matrix(const char* op, const tpurt_tensor_t* t, bool square) {
  if (t->rank < 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s: The input tensor A must have at least 2 dimensions.", op);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "%s: Expected a floating point or complex tensor as input. Got %s", op,
                       lower_dtype_cpp_name(t->dtype));
  int64_t r = t->sizes[t->rank - 2], c = t->sizes[t->rank - 1];
  if (square && r != c)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "%s: A must be batches of square matrices, but they are %lld by %lld matrices", op,
                       (long long)r, (long long)c);
  if (r > DECOMP_MAX_N || c > DECOMP_MAX_N)
    return lower_error(TPURT_UNIMPLEMENTED, "%s: matrices larger than %d (the unrolled loop's bound)", op,
                       DECOMP_MAX_N);
  return NULL;
}

/* Tensor arg |i| read as [count, rows, cols] in the op-math dtype. */
static ir_value_t read_mats(lower_ctx_t* ctx, int32_t i, const mats_t* m) {
  ir_value_t v = lower_cast(ctx, lower_tensor(ctx, i), lower_acc_dtype(lower_meta(ctx, i)->dtype));
  int64_t dims[3] = {m->count, m->rows, m->cols};
  return ir_reshape(ctx->func, v, 3, dims);
}

/* [count, r, c] back to batch + (r, c) in |dtype| */
static ir_value_t write_mats(lower_ctx_t* ctx, ir_value_t v, const mats_t* m, tpurt_dtype_t dtype) {
  const ir_type_t* t = type_of(ctx, v);
  int64_t dims[TPURT_MAX_RANK];
  memcpy(dims, m->batch, sizeof(int64_t) * (size_t)m->batch_rank);
  int32_t rank = m->batch_rank;
  for (int32_t i = 1; i < t->rank; ++i) dims[rank++] = t->dims[i];
  return lower_cast(ctx, ir_reshape(ctx->func, v, rank, dims), dtype);
}

/*===--- Cholesky ---===*/

/* Lower Cholesky factor of the lower triangle of A [B, n, n]; |info| gets
** LAPACK's: the first k (1-based) whose pivot is not positive, else 0. */
static ir_value_t cholesky(lower_ctx_t* ctx, ir_value_t a, ir_value_t* info) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, a);
  int64_t b = t->dims[0], n = t->dims[1];
  int64_t dims[3] = {b, n, n}, vdims[2] = {b, n}, bdims[1] = {b};
  ir_value_t cols[DECOMP_MAX_N];
  ir_value_t bad = ir_constant_i64(f, TPURT_DTYPE_I32, 0);
  bad = ir_broadcast_in_dim(f, bad, 1, bdims, NULL);
  for (int64_t k = 0; k < n; ++k) {
    ir_value_t c = col(ctx, a, k);
    ir_value_t pivot = elem(ctx, c, k);
    ir_value_t not_pd = ir_not(f, ir_compare(f, IR_GT, pivot, ir_const_like(f, pivot, 0.0)));
    ir_value_t first = ir_and(f, not_pd, ir_compare(f, IR_EQ, bad, ir_const_like(f, bad, 0.0)));
    bad = ir_select(f, first, ir_const_like(f, bad, (double)(k + 1)), bad);
    ir_value_t d = ir_sqrt(f, pivot);
    int64_t b0[1] = {0};
    ir_value_t l = ir_div(f, c, ir_broadcast_in_dim(f, d, 2, vdims, b0));
    l = ir_select(f, index_is(ctx, 2, vdims, 1, IR_LT, k), ir_const_like(f, l, 0.0), l);
    cols[k] = l;
    ir_value_t upd = outer(ctx, l, l);
    ir_value_t mask = ir_and(f, index_is(ctx, 3, dims, 1, IR_GT, k), index_is(ctx, 3, dims, 2, IR_GT, k));
    a = ir_sub(f, a, ir_select(f, mask, upd, ir_const_like(f, upd, 0.0)));
  }
  if (info) *info = bad;
  if (n == 0) return a;
  int64_t cdims[3] = {b, n, 1};
  for (int64_t k = 0; k < n; ++k) cols[k] = ir_reshape(f, cols[k], 3, cdims);
  return ir_concatenate(f, cols, (int32_t)n, 2);
}

/* linalg_cholesky_ex(self, *, upper=False, check_errors=False) -> (L, info) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_cholesky_ex(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.cholesky", t, true));
  bool upper = lower_bool(ctx, 1, false);
  mats_t m = mats_of(t);
  ir_value_t a = read_mats(ctx, 0, &m);
  if (upper) a = transpose3(ctx, a); /* LAPACK reads the upper triangle: the lower one of A^T */
  ir_value_t info;
  ir_value_t l = cholesky(ctx, a, &info);
  if (upper) l = transpose3(ctx, l);
  lower_set_result(ctx, 0, write_mats(ctx, l, &m, t->dtype));
  lower_set_result(ctx, 1, ir_reshape(ctx->func, info, m.batch_rank, m.batch));
  return NULL;
}

/* cholesky(self, upper=False): the deprecated form; a matrix that is not
** positive-definite gives NaN here (CPU raises: that check needs a sync) */
static TPURT_MUST_USE tpurt_status_t lower_cholesky(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("cholesky", t, true));
  bool upper = lower_bool(ctx, 1, false);
  mats_t m = mats_of(t);
  ir_value_t a = read_mats(ctx, 0, &m);
  if (upper) a = transpose3(ctx, a);
  ir_value_t l = cholesky(ctx, a, NULL);
  if (upper) l = transpose3(ctx, l);
  lower_set_result(ctx, 0, write_mats(ctx, l, &m, t->dtype));
  return NULL;
}

/* _cholesky_solve_helper(self=B, A=factor, upper): A = L L^T (or U^T U) */
static TPURT_MUST_USE tpurt_status_t lower_cholesky_solve_helper(lower_ctx_t* ctx) {
  const tpurt_tensor_t *bt = lower_meta(ctx, 0), *at = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_matrix("cholesky_solve", at, true));
  bool upper = lower_bool(ctx, 2, false);
  mats_t ma = mats_of(at), mb = mats_of(bt);
  if (ma.count != mb.count || mb.rows != ma.rows)
    return lower_error(TPURT_INVALID_ARGUMENT, "cholesky_solve: incompatible shapes %s and %s",
                       lower_shape_str(bt->rank, bt->sizes), lower_shape_str(at->rank, at->sizes));
  ir_value_t l = read_mats(ctx, 1, &ma), y = read_mats(ctx, 0, &mb);
  if (upper) l = transpose3(ctx, l);
  y = solve_triangular(ctx, l, y, true, false, false);
  y = solve_triangular(ctx, l, y, true, false, true);
  lower_set_result(ctx, 0, write_mats(ctx, y, &mb, bt->dtype));
  return NULL;
}

static ir_value_t identity_mats(lower_ctx_t* ctx, int64_t b, int64_t n, tpurt_dtype_t dtype) {
  int64_t dims[3] = {b, n, n};
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, 3, dims);
  ir_value_t eq = ir_compare(ctx->func, IR_EQ, ir_iota(ctx->func, it, 1), ir_iota(ctx->func, it, 2));
  return ir_convert(ctx->func, eq, dtype);
}

/* cholesky_inverse(self=factor, upper=False): (L L^T)^-1 */
static TPURT_MUST_USE tpurt_status_t lower_cholesky_inverse(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("cholesky_inverse", t, true));
  bool upper = lower_bool(ctx, 1, false);
  mats_t m = mats_of(t);
  ir_value_t l = read_mats(ctx, 0, &m);
  if (upper) l = transpose3(ctx, l);
  ir_value_t y = identity_mats(ctx, m.count, m.rows, lower_acc_dtype(t->dtype));
  y = solve_triangular(ctx, l, y, true, false, false);
  y = solve_triangular(ctx, l, y, true, false, true);
  lower_set_result(ctx, 0, write_mats(ctx, y, &m, t->dtype));
  return NULL;
}

/*===--- triangular solves ---===*/

/* Broadcasts the batch dims of args |ia| (A, square) and |ib| (B) and reads
** both as [count, r, c]. */
static TPURT_MUST_USE tpurt_status_t read_pair(lower_ctx_t* ctx, int32_t ia, int32_t ib, mats_t* ma,
                                               mats_t* mb, ir_value_t* a, ir_value_t* b) {
  const tpurt_tensor_t *at = lower_meta(ctx, ia), *bt = lower_meta(ctx, ib);
  mats_t a0 = mats_of(at), b0 = mats_of(bt);
  int32_t rank = 0;
  int64_t batch[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(
      lower_broadcast_shapes(a0.batch_rank, a0.batch, b0.batch_rank, b0.batch, &rank, batch));
  int64_t count = 1;
  for (int32_t i = 0; i < rank; ++i) count *= batch[i];
  tpurt_dtype_t acc = lower_acc_dtype(lower_promote(at->dtype, bt->dtype));
  const mats_t* src[2] = {&a0, &b0};
  mats_t* dst[2] = {ma, mb};
  ir_value_t* out[2] = {a, b};
  int32_t args[2] = {ia, ib};
  for (int32_t k = 0; k < 2; ++k) {
    *dst[k] = *src[k];
    dst[k]->batch_rank = rank;
    memcpy(dst[k]->batch, batch, sizeof(batch));
    dst[k]->count = count;
    int64_t full[TPURT_MAX_RANK];
    memcpy(full, batch, sizeof(int64_t) * (size_t)rank);
    full[rank] = src[k]->rows;
    full[rank + 1] = src[k]->cols;
    ir_value_t v = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, args[k]), acc), rank + 2, full);
    int64_t dims[3] = {count, src[k]->rows, src[k]->cols};
    *out[k] = ir_reshape(ctx->func, v, 3, dims);
  }
  return NULL;
}

/* linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_solve_triangular(lower_ctx_t* ctx) {
  const tpurt_tensor_t *at = lower_meta(ctx, 0), *bt = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.solve_triangular", at, true));
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.solve_triangular", bt, false));
  bool upper = lower_bool(ctx, 2, false), left = lower_bool(ctx, 3, true), unit = lower_bool(ctx, 4, false);
  int64_t n = at->sizes[at->rank - 1];
  int64_t bn = left ? bt->sizes[bt->rank - 2] : bt->sizes[bt->rank - 1];
  if (bn != n)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "linalg.solve_triangular: Incompatible shapes of A and B for the equation %s (%lldx%lld and "
        "%lldx%lld)",
        left ? "AX = B" : "XA = B", (long long)n, (long long)n, (long long)bt->sizes[bt->rank - 2],
        (long long)bt->sizes[bt->rank - 1]);
  mats_t ma, mb;
  ir_value_t a, b;
  TPURT_RETURN_IF_ERROR(read_pair(ctx, 0, 1, &ma, &mb, &a, &b));
  ir_value_t x;
  if (left) {
    x = solve_triangular(ctx, a, b, !upper, unit, false);
  } else { /* X A = B <=> A^T X^T = B^T */
    x = transpose3(ctx, solve_triangular(ctx, a, transpose3(ctx, b), !upper, unit, true));
  }
  lower_set_result(ctx, 0, write_mats(ctx, x, &mb, lower_promote(at->dtype, bt->dtype)));
  return NULL;
}

/* triangular_solve(self=B, A, upper=True, transpose=False, unitriangular=False) -> (X, A clone) */
static TPURT_MUST_USE tpurt_status_t lower_triangular_solve(lower_ctx_t* ctx) {
  const tpurt_tensor_t *bt = lower_meta(ctx, 0), *at = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_matrix("triangular_solve", at, true));
  TPURT_RETURN_IF_ERROR(check_matrix("triangular_solve", bt, false));
  bool upper = lower_bool(ctx, 2, true), trans = lower_bool(ctx, 3, false), unit = lower_bool(ctx, 4, false);
  if (bt->sizes[bt->rank - 2] != at->sizes[at->rank - 1])
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "triangular_solve: Incompatible matrix sizes for A and B: A is %lld by %lld, B is %lld by %lld",
        (long long)at->sizes[at->rank - 2], (long long)at->sizes[at->rank - 1],
        (long long)bt->sizes[bt->rank - 2], (long long)bt->sizes[bt->rank - 1]);
  mats_t ma, mb;
  ir_value_t a, b;
  TPURT_RETURN_IF_ERROR(read_pair(ctx, 1, 0, &ma, &mb, &a, &b));
  ir_value_t x = solve_triangular(ctx, a, b, !upper, unit, trans);
  lower_set_result(ctx, 0, write_mats(ctx, x, &mb, bt->dtype));
  lower_set_result(ctx, 1, write_mats(ctx, a, &ma, at->dtype));
  return NULL;
}

/*===--- LU with partial pivoting ---===*/

typedef struct lu_s {
  ir_value_t lu;     /* [B, m, n]: L below the diagonal (unit), U on and above */
  ir_value_t perm;   /* [B, m] i64: row i of P A is row perm[i] of A */
  ir_value_t pivots; /* [B, min(m, n)] i32, LAPACK's 1-based row swaps */
  ir_value_t info;   /* [B] i32: the first zero pivot (1-based), else 0 */
} lu_t;

/* Swaps, in each batch, entries k and p[B] of v [B, m] (or rows of [B, m, n]). */
static ir_value_t swap_rows(lower_ctx_t* ctx, ir_value_t v, int64_t k, ir_value_t p) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, v);
  bool mat = t->rank == 3;
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, t->rank, t->dims);
  ir_value_t rows = ir_iota(f, it, 1);
  ir_value_t is_p = ir_compare(f, IR_EQ, rows, spread_batch(ctx, p, t->rank, t->dims));
  ir_value_t is_k = ir_compare(f, IR_EQ, rows, ir_const_like(f, rows, (double)k));
  /* row p, per batch: the one row the mask keeps, summed out (exact: the rest are zeros) */
  int64_t rdim[1] = {1};
  ir_value_t zero =
      tpurt_dtype_is_float(t->dtype) ? ir_constant_f64(f, t->dtype, 0.0) : ir_constant_i64(f, t->dtype, 0);
  ir_value_t vp = ir_reduce(f, ir_select(f, is_p, v, ir_const_like(f, v, 0.0)), zero, rdim, 1, IR_REDUCE_ADD);
  ir_value_t vk = mat ? row(ctx, v, k) : elem(ctx, v, k);
  ir_value_t vp_all = mat ? spread(ctx, vp, t->dims, 2) : spread_batch(ctx, vp, t->rank, t->dims);
  ir_value_t vk_all = mat ? spread(ctx, vk, t->dims, 2) : spread_batch(ctx, vk, t->rank, t->dims);
  return ir_select(f, is_k, vp_all, ir_select(f, is_p, vk_all, v));
}

static lu_t lu_factor(lower_ctx_t* ctx, ir_value_t a) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, a);
  int64_t b = t->dims[0], m = t->dims[1], n = t->dims[2], steps = m < n ? m : n;
  int64_t dims[3] = {b, m, n}, vdims[2] = {b, m}, bdims[1] = {b};
  ir_type_t pt = ir_type_make(TPURT_DTYPE_I64, 2, vdims);
  lu_t r = {.perm = ir_iota(f, pt, 1)};
  r.info = ir_broadcast_in_dim(f, ir_constant_i64(f, TPURT_DTYPE_I32, 0), 1, bdims, NULL);
  ir_value_t piv[DECOMP_MAX_N];
  for (int64_t k = 0; k < steps; ++k) {
    ir_value_t c = col(ctx, a, k);
    ir_value_t ac = ir_abs(f, c);
    ac = ir_select(f, index_is(ctx, 2, vdims, 1, IR_LT, k), ir_const_like(f, ac, -1.0), ac);
    int64_t rdim[1] = {1};
    ir_value_t mx = ir_reduce(f, ac, ir_constant_f64(f, t->dtype, -INFINITY), rdim, 1, IR_REDUCE_MAX);
    ir_value_t rows = ir_iota(f, pt, 1);
    ir_value_t hit = ir_compare(f, IR_EQ, ac, spread_batch(ctx, mx, 2, vdims));
    ir_value_t cand = ir_select(f, hit, rows, ir_const_like(f, rows, (double)m));
    ir_value_t p = ir_reduce(f, cand, ir_constant_i64(f, TPURT_DTYPE_I64, m), rdim, 1, IR_REDUCE_MIN);
    /* an all-NaN column has no hit: keep row k */
    p = ir_select(f, ir_compare(f, IR_GE, p, ir_const_like(f, p, (double)m)), ir_const_like(f, p, (double)k),
                  p);
    piv[k] = ir_convert(f, ir_add(f, p, ir_const_like(f, p, 1.0)), TPURT_DTYPE_I32);
    a = swap_rows(ctx, a, k, p);
    r.perm = swap_rows(ctx, r.perm, k, p);
    ir_value_t ck = col(ctx, a, k);
    ir_value_t d = elem(ctx, ck, k);
    ir_value_t zero_pivot = ir_compare(f, IR_EQ, d, ir_const_like(f, d, 0.0));
    ir_value_t first = ir_and(f, zero_pivot, ir_compare(f, IR_EQ, r.info, ir_const_like(f, r.info, 0.0)));
    r.info = ir_select(f, first, ir_const_like(f, r.info, (double)(k + 1)), r.info);
    /* LAPACK leaves a zero pivot's column unscaled (it is all zeros then) */
    ir_value_t safe_d = ir_select(f, zero_pivot, ir_const_like(f, d, 1.0), d);
    ir_value_t l = ir_div(f, ck, spread_batch(ctx, safe_d, 2, vdims));
    l = ir_select(f, index_is(ctx, 2, vdims, 1, IR_GT, k), l, ir_const_like(f, l, 0.0));
    ir_value_t below = index_is(ctx, 3, dims, 1, IR_GT, k);
    /* column k below the diagonal becomes l; the trailing block loses l (x) row k */
    ir_value_t upd = outer(ctx, l, row(ctx, a, k));
    ir_value_t trailing = ir_and(f, below, index_is(ctx, 3, dims, 2, IR_GT, k));
    a = ir_sub(f, a, ir_select(f, trailing, upd, ir_const_like(f, upd, 0.0)));
    ir_value_t colk = ir_and(f, below, index_is(ctx, 3, dims, 2, IR_EQ, k));
    a = ir_select(f, colk, spread(ctx, l, dims, 1), a);
  }
  r.lu = a;
  if (steps > 0) {
    int64_t one[2] = {b, 1};
    for (int64_t k = 0; k < steps; ++k) piv[k] = ir_reshape(f, piv[k], 2, one);
    r.pivots = ir_concatenate(f, piv, (int32_t)steps, 1);
  } else {
    int64_t empty[2] = {b, 0};
    r.pivots = ir_broadcast_in_dim(f, ir_constant_i64(f, TPURT_DTYPE_I32, 0), 2, empty, NULL);
  }
  return r;
}

/* The row permutation that LAPACK pivots [B, k] (1-based swaps) apply to m rows. */
static ir_value_t perm_of_pivots(lower_ctx_t* ctx, ir_value_t pivots, int64_t m) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, pivots);
  int64_t vdims[2] = {t->dims[0], m};
  ir_value_t perm = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, vdims), 1);
  for (int64_t k = 0; k < t->dims[1]; ++k) {
    ir_value_t p = ir_convert(f, elem(ctx, pivots, k), TPURT_DTYPE_I64);
    perm = swap_rows(ctx, perm, k, ir_sub(f, p, ir_const_like(f, p, 1.0)));
  }
  return perm;
}

/* P as a matrix [B, m, m] of |dtype| with P[i, j] = (perm[i] == j): P A = rows permuted */
static ir_value_t perm_matrix(lower_ctx_t* ctx, ir_value_t perm, tpurt_dtype_t dtype) {
  const ir_type_t* t = type_of(ctx, perm);
  int64_t dims[3] = {t->dims[0], t->dims[1], t->dims[1]};
  ir_value_t cols = ir_iota(ctx->func, ir_type_make(TPURT_DTYPE_I64, 3, dims), 2);
  ir_value_t eq = ir_compare(ctx->func, IR_EQ, cols, spread(ctx, perm, dims, 1));
  return ir_convert(ctx->func, eq, dtype);
}

/* Y [B, m, k] with rows permuted: row i = row perm[i] (inverse: row perm[i] = row i) */
static ir_value_t permute_rows(lower_ctx_t* ctx, ir_value_t y, ir_value_t perm, bool inverse) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, y);
  ir_value_t p = perm_matrix(ctx, perm, t->dtype); /* [B, m, m] */
  if (inverse) p = transpose3(ctx, p);
  /* sum_j P[i, j] Y[j, :] as select + reduce (exact), not a dot */
  int64_t dims4[4] = {t->dims[0], t->dims[1], t->dims[1], t->dims[2]};
  int64_t bp[3] = {0, 1, 2}, by[3] = {0, 2, 3};
  ir_value_t p4 = ir_broadcast_in_dim(f, p, 4, dims4, bp);
  ir_value_t y4 = ir_broadcast_in_dim(f, y, 4, dims4, by);
  ir_value_t picked =
      ir_select(f, ir_compare(f, IR_NE, p4, ir_const_like(f, p4, 0.0)), y4, ir_const_like(f, y4, 0.0));
  int64_t rdim[1] = {2};
  return ir_reduce(f, picked, ir_constant_f64(f, t->dtype, 0.0), rdim, 1, IR_REDUCE_ADD);
}

/* Solves op(A) X = Y given A's LU and perm (P A = L U). */
static ir_value_t lu_solve(lower_ctx_t* ctx, ir_value_t lu, ir_value_t perm, ir_value_t y, bool adjoint) {
  if (!adjoint) { /* A = P^T L U: X = U^-1 L^-1 P Y */
    y = permute_rows(ctx, y, perm, false);
    y = solve_triangular(ctx, lu, y, true, true, false);
    return solve_triangular(ctx, lu, y, false, false, false);
  }
  /* A^T = U^T L^T P: X = P^T L^-T U^-T Y */
  y = solve_triangular(ctx, lu, y, false, false, true);
  y = solve_triangular(ctx, lu, y, true, true, true);
  return permute_rows(ctx, y, perm, true);
}

static ir_value_t to_batch(lower_ctx_t* ctx, ir_value_t v, const mats_t* m, int32_t extra,
                           const int64_t* tail, tpurt_dtype_t dtype) {
  int64_t dims[TPURT_MAX_RANK];
  memcpy(dims, m->batch, sizeof(int64_t) * (size_t)m->batch_rank);
  for (int32_t i = 0; i < extra; ++i) dims[m->batch_rank + i] = tail[i];
  return lower_cast(ctx, ir_reshape(ctx->func, v, m->batch_rank + extra, dims), dtype);
}

/* Arg |i| read as a batch of matrices (*m) and LU-factored. */
static lu_t factor_arg(lower_ctx_t* ctx, int32_t i, mats_t* m) {
  *m = mats_of(lower_meta(ctx, i));
  return lu_factor(ctx, read_mats(ctx, i, m));
}

/* linalg_lu_factor_ex(A, *, pivot=True, check_errors=False) -> (LU, pivots, info) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_lu_factor_ex(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("torch.linalg.lu_factor", t, false));
  if (!lower_bool(ctx, 1, true))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.lu_factor: LU without pivoting is not implemented on the CPU");
  mats_t m;
  lu_t r = factor_arg(ctx, 0, &m);
  int64_t k = m.rows < m.cols ? m.rows : m.cols;
  lower_set_result(ctx, 0, write_mats(ctx, r.lu, &m, t->dtype));
  lower_set_result(ctx, 1, to_batch(ctx, r.pivots, &m, 1, &k, TPURT_DTYPE_I32));
  lower_set_result(ctx, 2, to_batch(ctx, r.info, &m, 0, NULL, TPURT_DTYPE_I32));
  return NULL;
}

/* det and slogdet from the LU: the product of U's diagonal, negated once per row swap */
static void lu_det_parts(lower_ctx_t* ctx, const lu_t* r, int64_t n, ir_value_t* sign, ir_value_t* logabs,
                         ir_value_t* det) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, r->lu);
  int64_t bdims[1] = {t->dims[0]};
  ir_value_t s = ir_broadcast_in_dim(f, ir_constant_f64(f, t->dtype, 1.0), 1, bdims, NULL);
  ir_value_t la = ir_broadcast_in_dim(f, ir_constant_f64(f, t->dtype, 0.0), 1, bdims, NULL);
  ir_value_t d = s;
  for (int64_t k = 0; k < n; ++k) {
    ir_value_t u = elem(ctx, col(ctx, r->lu, k), k);
    ir_value_t p = elem(ctx, r->pivots, k);
    ir_value_t swapped = ir_compare(f, IR_NE, p, ir_const_like(f, p, (double)(k + 1)));
    ir_value_t flip = ir_select(f, swapped, ir_const_like(f, u, -1.0), ir_const_like(f, u, 1.0));
    d = ir_mul(f, d, ir_mul(f, u, flip));
    s = ir_mul(f, s, ir_mul(f, ir_unary(f, IR_OP_SIGN, u), flip));
    la = ir_add(f, la, ir_log(f, ir_abs(f, u)));
  }
  if (sign) *sign = s;
  if (logabs) *logabs = la;
  if (det) *det = d;
}

/* _linalg_det(A) -> (det, LU, pivots) and _linalg_slogdet(A) -> (sign,
** logabsdet, LU, pivots): the row's int says which (1: slogdet). */
static TPURT_MUST_USE tpurt_status_t det_row(lower_ctx_t* ctx) {
  bool slog = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix(slog ? "linalg.slogdet" : "linalg.det", t, true));
  mats_t m;
  lu_t r = factor_arg(ctx, 0, &m);
  ir_value_t parts[2];
  if (slog)
    lu_det_parts(ctx, &r, m.rows, &parts[0], &parts[1], NULL);
  else
    lu_det_parts(ctx, &r, m.rows, NULL, NULL, &parts[0]);
  int32_t k = 0;
  for (; k < (slog ? 2 : 1); ++k) lower_set_result(ctx, k, to_batch(ctx, parts[k], &m, 0, NULL, t->dtype));
  lower_set_result(ctx, k, write_mats(ctx, r.lu, &m, t->dtype));
  lower_set_result(ctx, k + 1, to_batch(ctx, r.pivots, &m, 1, &m.rows, TPURT_DTYPE_I32));
  return NULL;
}

/* linalg_inv_ex(A, *, check_errors=False) -> (inverse, info) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_inv_ex(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.inv", t, true));
  mats_t m;
  lu_t r = factor_arg(ctx, 0, &m);
  ir_value_t x =
      lu_solve(ctx, r.lu, r.perm, identity_mats(ctx, m.count, m.rows, lower_acc_dtype(t->dtype)), false);
  lower_set_result(ctx, 0, write_mats(ctx, x, &m, t->dtype));
  lower_set_result(ctx, 1, to_batch(ctx, r.info, &m, 0, NULL, TPURT_DTYPE_I32));
  return NULL;
}

/* _linalg_solve_ex(A, B, *, left=True, check_errors=False) -> (result, LU, pivots, info).
** B is a batch of vectors when it has one dim less than A and matches A's batch (PyTorch's rule). */
static TPURT_MUST_USE tpurt_status_t lower_linalg_solve_ex(lower_ctx_t* ctx) {
  const tpurt_tensor_t *at = lower_meta(ctx, 0), *bt = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.solve", at, true));
  bool left = lower_bool(ctx, 2, true);
  bool vector =
      bt->rank == 1 || (bt->rank == at->rank - 1 &&
                        memcmp(bt->sizes, at->sizes, sizeof(int64_t) * (size_t)(at->rank - 1)) == 0);
  if (vector && !left) return lower_error(TPURT_UNIMPLEMENTED, "linalg.solve: a vector B with left=False");
  int64_t n = at->sizes[at->rank - 1];
  /* B's batch broadcast with A's, B as [count, n, k] */
  mats_t ma = mats_of(at);
  tpurt_dtype_t dt = lower_promote(at->dtype, bt->dtype);
  tpurt_dtype_t acc = lower_acc_dtype(dt);
  int32_t b_batch_rank = vector ? bt->rank - 1 : bt->rank - 2;
  int32_t rank = 0;
  int64_t batch[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(
      lower_broadcast_shapes(ma.batch_rank, ma.batch, b_batch_rank, bt->sizes, &rank, batch));
  int64_t brows = vector ? bt->sizes[bt->rank - 1] : bt->sizes[bt->rank - 2];
  int64_t bcols = vector ? 1 : bt->sizes[bt->rank - 1];
  if ((left ? brows : bcols) != n)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.solve: Incompatible shapes of A and B for the equation %s",
                       left ? "AX = B" : "XA = B");
  int64_t count = 1;
  for (int32_t i = 0; i < rank; ++i) count *= batch[i];
  int64_t full[TPURT_MAX_RANK];
  memcpy(full, batch, sizeof(int64_t) * (size_t)rank);
  full[rank] = n;
  full[rank + 1] = n;
  ir_value_t a = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), rank + 2, full);
  int64_t adims[3] = {count, n, n};
  a = ir_reshape(ctx->func, a, 3, adims);
  ir_value_t b = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  if (vector) {
    int64_t bd[TPURT_MAX_RANK];
    memcpy(bd, bt->sizes, sizeof(int64_t) * (size_t)bt->rank);
    bd[bt->rank] = 1;
    b = ir_reshape(ctx->func, b, bt->rank + 1, bd);
  }
  full[rank] = brows;
  full[rank + 1] = bcols;
  b = lower_broadcast_to(ctx, b, rank + 2, full);
  int64_t bdims[3] = {count, brows, bcols};
  b = ir_reshape(ctx->func, b, 3, bdims);
  lu_t r = lu_factor(ctx, a);
  ir_value_t x = left ? lu_solve(ctx, r.lu, r.perm, b, false)
                      : transpose3(ctx, lu_solve(ctx, r.lu, r.perm, transpose3(ctx, b), true));
  mats_t mr = {.batch_rank = rank, .count = count, .rows = n, .cols = n};
  memcpy(mr.batch, batch, sizeof(batch));
  int64_t xdims[TPURT_MAX_RANK];
  memcpy(xdims, batch, sizeof(int64_t) * (size_t)rank);
  xdims[rank] = brows;
  xdims[rank + 1] = bcols;
  int32_t xrank = vector ? rank + 1 : rank + 2;
  lower_set_result(ctx, 0, lower_cast(ctx, ir_reshape(ctx->func, x, xrank, xdims), dt));
  lower_set_result(ctx, 1, write_mats(ctx, r.lu, &mr, dt));
  lower_set_result(ctx, 2, to_batch(ctx, r.pivots, &mr, 1, &n, TPURT_DTYPE_I32));
  lower_set_result(ctx, 3, to_batch(ctx, r.info, &mr, 0, NULL, TPURT_DTYPE_I32));
  return NULL;
}

/* linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_lu_solve(lower_ctx_t* ctx) {
  const tpurt_tensor_t *lt = lower_meta(ctx, 0), *pt = lower_meta(ctx, 1), *bt = lower_meta(ctx, 2);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.lu_solve", lt, true));
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.lu_solve", bt, false));
  bool left = lower_bool(ctx, 3, true), adjoint = lower_bool(ctx, 4, false);
  int64_t n = lt->sizes[lt->rank - 1];
  if ((left ? bt->sizes[bt->rank - 2] : bt->sizes[bt->rank - 1]) != n)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.lu_solve: Incompatible shapes of A and B for the equation %s",
                       left ? "AX = B" : "XA = B");
  if (pt->rank != lt->rank - 1 || pt->sizes[pt->rank - 1] != n)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.lu_solve: Expected LU.shape[:-1] and pivots.shape to be the same");
  mats_t ml, mb;
  ir_value_t lu, b;
  TPURT_RETURN_IF_ERROR(read_pair(ctx, 0, 2, &ml, &mb, &lu, &b));
  /* pivots broadcast to the common batch */
  int64_t pfull[TPURT_MAX_RANK];
  memcpy(pfull, ml.batch, sizeof(int64_t) * (size_t)ml.batch_rank);
  pfull[ml.batch_rank] = n;
  ir_value_t piv = lower_broadcast_to(ctx, lower_tensor(ctx, 1), ml.batch_rank + 1, pfull);
  int64_t pdims[2] = {ml.count, n};
  piv = ir_reshape(ctx->func, piv, 2, pdims);
  ir_value_t perm = perm_of_pivots(ctx, piv, n);
  ir_value_t x = left ? lu_solve(ctx, lu, perm, b, adjoint)
                      : transpose3(ctx, lu_solve(ctx, lu, perm, transpose3(ctx, b), !adjoint));
  lower_set_result(ctx, 0, write_mats(ctx, x, &mb, lower_promote(lt->dtype, bt->dtype)));
  return NULL;
}

/* P, L, U from an LU [B, m, n] and its row permutation [B, m] */
static void unpack(lower_ctx_t* ctx, ir_value_t lu, ir_value_t perm, const mats_t* m, tpurt_dtype_t dtype) {
  ir_func_t* f = ctx->func;
  int64_t k = m->rows < m->cols ? m->rows : m->cols;
  int64_t b = m->count;
  /* P with A = P L U: the transpose of the one that permutes A's rows */
  ir_value_t p = transpose3(ctx, perm_matrix(ctx, perm, type_of(ctx, lu)->dtype));
  int64_t ls[3] = {0, 0, 0}, ll[3] = {b, m->rows, k}, us[3] = {0, 0, 0}, ul[3] = {b, k, m->cols},
          one[3] = {1, 1, 1};
  ir_value_t l = ir_slice(f, lu, ls, ll, one), u = ir_slice(f, lu, us, ul, one);
  int64_t ldims[3] = {b, m->rows, k}, udims[3] = {b, k, m->cols};
  ir_type_t lt = ir_type_make(TPURT_DTYPE_I64, 3, ldims), ut = ir_type_make(TPURT_DTYPE_I64, 3, udims);
  ir_value_t li = ir_iota(f, lt, 1), lj = ir_iota(f, lt, 2);
  l = ir_select(f, ir_compare(f, IR_GT, li, lj), l, ir_const_like(f, l, 0.0));
  l = ir_select(f, ir_compare(f, IR_EQ, li, lj), ir_const_like(f, l, 1.0), l);
  u = ir_select(f, ir_compare(f, IR_LE, ir_iota(f, ut, 1), ir_iota(f, ut, 2)), u, ir_const_like(f, u, 0.0));
  int64_t pt[2] = {m->rows, m->rows}, ltail[2] = {m->rows, k}, utail[2] = {k, m->cols};
  lower_set_result(ctx, 0, to_batch(ctx, p, m, 2, pt, dtype));
  lower_set_result(ctx, 1, to_batch(ctx, l, m, 2, ltail, dtype));
  lower_set_result(ctx, 2, to_batch(ctx, u, m, 2, utail, dtype));
}

/* linalg_lu(A, *, pivot=True) -> (P, L, U) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_lu(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.lu", t, false));
  if (!lower_bool(ctx, 1, true))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "linalg.lu: LU without pivoting is not implemented on the CPU");
  mats_t m;
  lu_t r = factor_arg(ctx, 0, &m);
  unpack(ctx, r.lu, r.perm, &m, t->dtype);
  return NULL;
}

/* lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True) -> (P, L, U) */
static TPURT_MUST_USE tpurt_status_t lower_lu_unpack(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *pt = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_matrix("torch.lu_unpack", t, false));
  if (!lower_bool(ctx, 2, true) || !lower_bool(ctx, 3, true))
    return lower_error(TPURT_UNIMPLEMENTED, "lu_unpack with unpack_data or unpack_pivots False");
  mats_t m = mats_of(t);
  int64_t k = m.rows < m.cols ? m.rows : m.cols;
  if (pt->rank != t->rank - 1 || pt->sizes[pt->rank - 1] != k)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "torch.lu_unpack: Expected LU_pivots.size(-1) == min(LU_data.size(-1), LU_data.size(-2))");
  int64_t pdims[2] = {m.count, k};
  ir_value_t piv = ir_reshape(ctx->func, lower_tensor(ctx, 1), 2, pdims);
  unpack(ctx, read_mats(ctx, 0, &m), perm_of_pivots(ctx, piv, m.rows), &m, t->dtype);
  return NULL;
}

/*===--- SVD: one-sided Jacobi ---===*/

#define SVD_MAX_SWEEPS 40

/* sum over the rows of u * v, [B, m] x [B, m] -> [B] */
static ir_value_t col_dot(lower_ctx_t* ctx, ir_value_t u, ir_value_t v) {
  const ir_type_t* t = type_of(ctx, u);
  int64_t rdim[1] = {1};
  return ir_reduce(ctx->func, ir_mul(ctx->func, u, v), ir_constant_f64(ctx->func, t->dtype, 0.0), rdim, 1,
                   IR_REDUCE_ADD);
}

static ir_value_t concat_cols(lower_ctx_t* ctx, ir_value_t* cols, int64_t n) {
  const ir_type_t* t = type_of(ctx, cols[0]);
  int64_t d3[3] = {t->dims[0], t->dims[1], 1};
  ir_value_t r[DECOMP_MAX_N];
  for (int64_t k = 0; k < n; ++k) r[k] = ir_reshape(ctx->func, cols[k], 3, d3);
  return ir_concatenate(ctx->func, r, (int32_t)n, 2);
}

/* Thin SVD of W [B, m, n], m >= n >= 1: Hestenes' one-sided Jacobi. Column
** pairs are rotated until every pair is orthogonal to working precision
** (a stablehlo.while over sweeps; each sweep visits every pair, unrolled).
** Writes U [B, m, n], S [B, n] (descending), V [B, n, n]. */
static void svd_jacobi(lower_ctx_t* ctx, ir_value_t w, ir_value_t* u_out, ir_value_t* s_out,
                       ir_value_t* v_out) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, w);
  tpurt_dtype_t dt = t->dtype;
  int64_t b = t->dims[0], m = t->dims[1], n = t->dims[2];
  double eps = dt == TPURT_DTYPE_F64 ? 2.220446049250313e-16 : 1.1920929e-07;
  ir_value_t v0 = identity_mats(ctx, b, n, dt);
  ir_value_t init[3] = {ir_constant_i64(f, TPURT_DTYPE_I32, 0), w, v0}, args[3], out[3];
  /* the carried "rotated" flag is folded into the counter: -1 when a sweep rotated nothing */
  ir_region_op_t loop = ir_while_begin(f, init, 3, args);
  lower_while_counter_in(ctx, &loop, args[0], 0, SVD_MAX_SWEEPS, args);
  ir_value_t wc[DECOMP_MAX_N], vc[DECOMP_MAX_N];
  for (int64_t k = 0; k < n; ++k) {
    wc[k] = col(ctx, args[1], k);
    vc[k] = col(ctx, args[2], k);
  }
  int64_t bdims[1] = {b};
  ir_value_t any = ir_broadcast_in_dim(f, ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), 1, bdims, NULL);
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t q = p + 1; q < n; ++q) {
      ir_value_t alpha = col_dot(ctx, wc[p], wc[p]), beta = col_dot(ctx, wc[q], wc[q]);
      ir_value_t gamma = col_dot(ctx, wc[p], wc[q]);
      ir_value_t scale = ir_sqrt(f, ir_mul(f, alpha, beta));
      ir_value_t rotate =
          ir_compare(f, IR_GT, ir_abs(f, gamma), ir_mul(f, scale, ir_const_like(f, scale, eps)));
      any = ir_or(f, any, rotate);
      ir_value_t safe_g = ir_select(f, rotate, gamma, ir_const_like(f, gamma, 1.0));
      ir_value_t zeta = ir_div(f, ir_sub(f, beta, alpha), ir_mul(f, safe_g, ir_const_like(f, safe_g, 2.0)));
      ir_value_t root =
          ir_unary(f, IR_OP_SQRT, ir_add(f, ir_const_like(f, zeta, 1.0), ir_mul(f, zeta, zeta)));
      ir_value_t sgn = ir_select(f, ir_compare(f, IR_LT, zeta, ir_const_like(f, zeta, 0.0)),
                                 ir_const_like(f, zeta, -1.0), ir_const_like(f, zeta, 1.0));
      ir_value_t tan = ir_div(f, sgn, ir_add(f, ir_abs(f, zeta), root));
      ir_value_t c =
          ir_div(f, ir_const_like(f, tan, 1.0),
                 ir_unary(f, IR_OP_SQRT, ir_add(f, ir_const_like(f, tan, 1.0), ir_mul(f, tan, tan))));
      ir_value_t sn = ir_mul(f, c, tan);
      c = ir_select(f, rotate, c, ir_const_like(f, c, 1.0));
      sn = ir_select(f, rotate, sn, ir_const_like(f, sn, 0.0));
      ir_value_t* cols[2] = {wc, vc};
      int64_t rows[2] = {m, n};
      for (int32_t which = 0; which < 2; ++which) {
        int64_t vd[2] = {b, rows[which]}, b0[1] = {0};
        ir_value_t cb = ir_broadcast_in_dim(f, c, 2, vd, b0), sb = ir_broadcast_in_dim(f, sn, 2, vd, b0);
        ir_value_t xp = cols[which][p], xq = cols[which][q];
        cols[which][p] = ir_sub(f, ir_mul(f, cb, xp), ir_mul(f, sb, xq));
        cols[which][q] = ir_add(f, ir_mul(f, sb, xp), ir_mul(f, cb, xq));
      }
    }
  }
  int64_t all[1] = {0};
  ir_value_t rotated = ir_reduce(f, any, ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), all, 1, IR_REDUCE_OR);
  ir_value_t next_count = ir_add(f, args[0], ir_constant_i64(f, TPURT_DTYPE_I32, 1));
  next_count = ir_select(f, rotated, next_count, ir_constant_i64(f, TPURT_DTYPE_I32, -1));
  ir_value_t next[3] = {next_count, concat_cols(ctx, wc, n), concat_cols(ctx, vc, n)};
  ir_region_end(f, next, 3);
  ir_while_end(f, &loop, out);
  /* singular values: the column norms; U's columns: the normalized columns */
  ir_value_t sv[DECOMP_MAX_N], uc[DECOMP_MAX_N];
  for (int64_t k = 0; k < n; ++k) {
    ir_value_t x = col(ctx, out[1], k);
    ir_value_t norm = ir_sqrt(f, col_dot(ctx, x, x));
    ir_value_t safe = ir_select(f, ir_compare(f, IR_GT, norm, ir_const_like(f, norm, 0.0)), norm,
                                ir_const_like(f, norm, 1.0));
    int64_t vd[2] = {b, m}, b0[1] = {0};
    uc[k] = ir_div(f, x, ir_broadcast_in_dim(f, safe, 2, vd, b0));
    int64_t d2[2] = {b, 1};
    sv[k] = ir_reshape(f, norm, 2, d2);
  }
  ir_value_t s = ir_concatenate(f, sv, (int32_t)n, 1);
  /* sort descending, carrying the column order */
  int64_t sd[2] = {b, n};
  ir_value_t order = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, sd), 1);
  ir_value_t inputs[2] = {s, order}, res[2], blk[4];
  ir_sort_begin(f, inputs, 2, 1, true, res, blk);
  ir_value_t before = ir_compare(f, IR_GT, blk[0], blk[1]);
  ir_region_end(f, &before, 1);
  *s_out = res[0];
  *u_out = transpose3(ctx, permute_rows(ctx, transpose3(ctx, concat_cols(ctx, uc, n)), res[1], false));
  *v_out = transpose3(ctx, permute_rows(ctx, transpose3(ctx, out[2]), res[1], false));
}

/* defined with QR below; full_matrices completes a basis with them */
static ir_value_t geqrf(lower_ctx_t* ctx, ir_value_t a, ir_value_t* tau_out);
static ir_value_t apply_q(lower_ctx_t* ctx, ir_value_t a, ir_value_t tau, int64_t k, ir_value_t y, bool left,
                          bool transpose);
static ir_value_t eye_rect(lower_ctx_t* ctx, int64_t b, int64_t m, int64_t n, tpurt_dtype_t dtype);

/* U [B, m, k] (m > k, orthonormal columns but for those of zero singular
** values) completed to an orthogonal [B, m, m]: the Householder QR U = Q R
** has R's diagonal +-1 where U's column is a unit vector, so Q diag(sign R)
** keeps those columns as they are; Q's other columns are an orthonormal
** basis of what U leaves out (and replace U's zero columns). */
static ir_value_t complete_basis(lower_ctx_t* ctx, ir_value_t u) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, u);
  int64_t b = t->dims[0], m = t->dims[1], k = t->dims[2];
  ir_value_t tau;
  ir_value_t a = geqrf(ctx, u, &tau);
  ir_value_t q = apply_q(ctx, a, tau, k, eye_rect(ctx, b, m, m, t->dtype), true, false);
  int64_t ad[3] = {b, m, k}, rd[1] = {1};
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, 3, ad);
  ir_value_t on_diag = ir_compare(f, IR_EQ, ir_iota(f, it, 1), ir_iota(f, it, 2));
  ir_value_t diag = ir_reduce(f, ir_select(f, on_diag, a, ir_const_like(f, a, 0.0)),
                              ir_constant_f64(f, t->dtype, 0.0), rd, 1, IR_REDUCE_ADD); /* [B, k] */
  ir_value_t sign = ir_select(f, ir_compare(f, IR_LT, diag, ir_const_like(f, diag, 0.0)),
                              ir_const_like(f, diag, -1.0), ir_const_like(f, diag, 1.0));
  int64_t pad_lo[2] = {0, 0}, pad_hi[2] = {0, m - k}, pad_in[2] = {0, 0};
  sign = ir_pad(f, sign, ir_constant_f64(f, t->dtype, 1.0), pad_lo, pad_hi, pad_in); /* [B, m] */
  int64_t qd[3] = {b, m, m}, keep[2] = {0, 2};
  return ir_mul(f, q, ir_broadcast_in_dim(f, sign, 3, qd, keep));
}

/* _linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None) -> (U, S, Vh) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_svd(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.svd", t, false));
  bool full = lower_bool(ctx, 1, false), compute_uv = lower_bool(ctx, 2, true);
  mats_t m = mats_of(t);
  int64_t k = m.rows < m.cols ? m.rows : m.cols;
  if (k == 0 || m.count == 0) { /* nothing to decompose: no values; full bases are identities */
    int64_t dims[TPURT_MAX_RANK];
    memcpy(dims, m.batch, sizeof(int64_t) * (size_t)m.batch_rank);
    int32_t r = m.batch_rank;
    dims[r] = k;
    lower_set_result(ctx, 1, ir_splat(ctx->func, t->dtype, r + 1, dims, 0.0));
    if (!compute_uv) {
      int64_t zero[1] = {0};
      lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, 1, zero, 0.0));
      lower_set_result(ctx, 2, ir_splat(ctx->func, t->dtype, 1, zero, 0.0));
      return NULL;
    }
    int64_t ucols = full ? m.rows : k, vrows = full ? m.cols : k;
    int64_t ut[2] = {m.rows, ucols}, vt[2] = {vrows, m.cols};
    lower_set_result(ctx, 0,
                     to_batch(ctx, eye_rect(ctx, m.count, m.rows, ucols, t->dtype), &m, 2, ut, t->dtype));
    lower_set_result(ctx, 2,
                     to_batch(ctx, eye_rect(ctx, m.count, vrows, m.cols, t->dtype), &m, 2, vt, t->dtype));
    return NULL;
  }
  ir_value_t a = read_mats(ctx, 0, &m);
  bool wide = m.rows < m.cols; /* work on A^T: A^T = U' S V'^T, so A = V' S U'^T */
  if (wide) a = transpose3(ctx, a);
  ir_value_t u, s, v;
  svd_jacobi(ctx, a, &u, &s, &v);
  bool complete = compute_uv && full && m.rows != m.cols;
  if (complete) u = complete_basis(ctx, u); /* the long side's vectors, [B, max, max] */
  if (wide) {
    ir_value_t tmp = u;
    u = v;
    v = tmp;
  }
  lower_set_result(ctx, 1, to_batch(ctx, s, &m, 1, &k, t->dtype));
  if (compute_uv) {
    int64_t ucols = complete ? m.rows : k, vrows = complete ? m.cols : k;
    int64_t ut[2] = {m.rows, ucols}, vt[2] = {vrows, m.cols};
    lower_set_result(ctx, 0, to_batch(ctx, u, &m, 2, ut, t->dtype));
    lower_set_result(ctx, 2, to_batch(ctx, transpose3(ctx, v), &m, 2, vt, t->dtype));
  } else {
    int64_t zero[1] = {0};
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, 1, zero, 0.0));
    lower_set_result(ctx, 2, ir_splat(ctx->func, t->dtype, 1, zero, 0.0));
  }
  return NULL;
}

/*===--- least squares ---===*/

/* [B, r, c] x [B, c, d] -> [B, r, d] */
static ir_value_t matmul3(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_dot_dims_t d = {.num_batch = 1, .lhs_batch = {0}, .rhs_batch = {0}, .num_contract = 1};
  d.lhs_contract[0] = 2;
  d.rhs_contract[0] = 1;
  return ir_dot_general(ctx->func, a, b, &d, type_of(ctx, a)->dtype);
}

/* linalg_lstsq.out(A, B, rcond=None, *, driver=None) -> (solution, residuals,
** rank, singular_values). The solution is the minimum-norm least-squares one,
** from A's SVD: x = V S^+ U^T B, singular values at or below rcond times the
** largest dropped (what gelsd and gelss compute; gels and gelsy give the same
** x for the full-rank A they assume or find). The driver decides which other
** results PyTorch fills, and we the same: the rank (all but gels), the
** singular values (gelsd, gelss), and for more rows than columns the residual
** ||A x - B||^2 of each column (all but gelsy). Off the CPU PyTorch's default
** driver is gels. gelsd and gelss with more rows than columns decline: PyTorch
** then fills the residuals only for a full-rank A (a sync to tell), and the
** four results would need one more out= resize than the glue retries. */
static TPURT_MUST_USE tpurt_status_t lower_linalg_lstsq(lower_ctx_t* ctx) {
  const tpurt_tensor_t *at = lower_meta(ctx, 0), *bt = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_matrix("torch.linalg.lstsq", at, false));
  if (!bt || bt->rank < 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "torch.linalg.lstsq: other must have at least 1 dimension.");
  if (bt->dtype != at->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's "
                       "dtype %s and other's dtype %s",
                       lower_dtype_cpp_name(at->dtype), lower_dtype_cpp_name(bt->dtype));
  const char* driver = lower_str(ctx, 3, "gels");
  bool gels = strcmp(driver, "gels") == 0, gelsy = strcmp(driver, "gelsy") == 0;
  bool with_sv = strcmp(driver, "gelsd") == 0 || strcmp(driver, "gelss") == 0;
  if (!gels && !gelsy && !with_sv)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  mats_t ma = mats_of(at);
  int64_t m = ma.rows, n = ma.cols, k = m < n ? m : n;
  bool vector = bt->rank == at->rank - 1; /* B a batch of vectors */
  int32_t b_batch = bt->rank - (vector ? 1 : 2);
  if (b_batch < 0 || bt->sizes[b_batch] != m)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  int64_t cols = vector ? 1 : bt->sizes[bt->rank - 1];
  if (with_sv && m > n)
    return lower_error(TPURT_UNIMPLEMENTED, "torch.linalg.lstsq: driver %s with more rows than columns",
                       driver);
  if (k == 0 || cols == 0 || ma.count == 0)
    return lower_error(TPURT_UNIMPLEMENTED, "torch.linalg.lstsq: empty matrices");
  /* the common batch, A [c, m, n] and B [c, m, cols] */
  int32_t rank;
  int64_t batch[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(ma.batch_rank, ma.batch, b_batch, bt->sizes, &rank, batch));
  mats_t mo = {.batch_rank = rank, .count = 1, .rows = n, .cols = cols};
  for (int32_t i = 0; i < rank; ++i) mo.count *= (mo.batch[i] = batch[i]);
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(at->dtype);
  int64_t full[TPURT_MAX_RANK];
  memcpy(full, batch, sizeof(int64_t) * (size_t)rank);
  full[rank] = m;
  full[rank + 1] = n;
  int64_t a3[3] = {mo.count, m, n}, b3[3] = {mo.count, m, cols};
  ir_value_t a = ir_reshape(
      f, lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), rank + 2, full), 3, a3);
  ir_value_t b = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  if (vector) {
    int64_t bv[TPURT_MAX_RANK];
    memcpy(bv, bt->sizes, sizeof(int64_t) * (size_t)bt->rank);
    bv[bt->rank] = 1;
    b = ir_reshape(f, b, bt->rank + 1, bv);
  }
  full[rank + 1] = cols;
  b = ir_reshape(f, lower_broadcast_to(ctx, b, rank + 2, full), 3, b3);
  /* A = U S V^T, U [c, m, k], V [c, n, k] */
  ir_value_t u, sv, v;
  if (m >= n) {
    svd_jacobi(ctx, a, &u, &sv, &v);
  } else {
    svd_jacobi(ctx, transpose3(ctx, a), &v, &sv, &u);
  }
  double eps = acc == TPURT_DTYPE_F64 ? 2.220446049250313e-16 : 1.1920929e-07;
  double rcond = lower_is_none(ctx, 2) ? eps * (double)(m > n ? m : n) : lower_scalar_value(ctx, 2);
  if (rcond < 0) rcond = eps;
  int64_t kd[2] = {mo.count, k}, b0[1] = {0};
  ir_value_t largest = elem(ctx, sv, 0);
  ir_value_t cut = ir_broadcast_in_dim(f, ir_mul(f, largest, ir_const_like(f, largest, rcond)), 2, kd, b0);
  ir_value_t kept = ir_compare(f, IR_GT, sv, cut);
  ir_value_t safe = ir_select(f, kept, sv, ir_const_like(f, sv, 1.0));
  ir_value_t inv = ir_select(f, kept, ir_div(f, ir_const_like(f, sv, 1.0), safe), ir_const_like(f, sv, 0.0));
  /* x = V diag(inv) U^T B */
  ir_value_t utb = matmul3(ctx, transpose3(ctx, u), b); /* [c, k, cols] */
  int64_t kc[3] = {mo.count, k, cols};
  utb = ir_mul(f, utb, spread(ctx, inv, kc, 1));
  ir_value_t x = matmul3(ctx, v, utb); /* [c, n, cols] */
  int64_t xt[2] = {n, cols};
  lower_set_result(ctx, 0, to_batch(ctx, x, &mo, vector ? 1 : 2, xt, at->dtype));
  int64_t zero[1] = {0};
  if (!gelsy && m > n) { /* ||A x - B||^2 per column */
    ir_value_t r = ir_sub(f, matmul3(ctx, a, x), b);
    int64_t rd[1] = {1};
    ir_value_t res = ir_reduce(f, ir_mul(f, r, r), ir_constant_f64(f, acc, 0.0), rd, 1, IR_REDUCE_ADD);
    lower_set_result(ctx, 1, to_batch(ctx, res, &mo, 1, &cols, at->dtype)); /* [*, 1] for a vector B too */
  } else {
    lower_set_result(ctx, 1, ir_splat(f, at->dtype, 1, zero, 0.0));
  }
  if (gels) {
    lower_set_result(ctx, 2, ir_splat(f, TPURT_DTYPE_I64, 1, zero, 0.0));
  } else {
    int64_t rd[1] = {1};
    ir_value_t count = ir_reduce(f, ir_convert(f, kept, TPURT_DTYPE_I64),
                                 ir_constant_i64(f, TPURT_DTYPE_I64, 0), rd, 1, IR_REDUCE_ADD);
    lower_set_result(ctx, 2, to_batch(ctx, count, &mo, 0, NULL, TPURT_DTYPE_I64));
  }
  lower_set_result(ctx, 3,
                   with_sv ? to_batch(ctx, sv, &mo, 1, &k, at->dtype) : ir_splat(f, at->dtype, 1, zero, 0.0));
  return NULL;
}

/* _linalg_eigh(A, UPLO="L", compute_v=True) -> (eigenvalues, eigenvectors).
** A is read from one triangle (as LAPACK) and shifted by c = ||A||_F into a
** positive semi-definite B = A + cI, whose SVD is its eigendecomposition:
** lambda = sigma - c (the absolute error, eps ||A||, of any backward-stable
** eigensolver), the vectors B's right singular vectors; ascending order. */
static TPURT_MUST_USE tpurt_status_t lower_linalg_eigh(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.eigh", t, true));
  const char* uplo = lower_str(ctx, 1, "L");
  if (strcmp(uplo, "L") != 0 && strcmp(uplo, "U") != 0 && strcmp(uplo, "l") != 0 && strcmp(uplo, "u") != 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "Expected UPLO argument to be 'L' or 'U', but got %s", uplo);
  bool lower = uplo[0] == 'L' || uplo[0] == 'l';
  bool compute_v = lower_bool(ctx, 2, true);
  mats_t m = mats_of(t);
  int64_t n = m.rows;
  if (n == 0 || m.count == 0) { /* nothing to decompose */
    int64_t dims[TPURT_MAX_RANK];
    memcpy(dims, m.batch, sizeof(int64_t) * (size_t)m.batch_rank);
    int32_t r = m.batch_rank;
    dims[r] = n;
    dims[r + 1] = n;
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, r + 1, dims, 0.0));
    int64_t zero[1] = {0};
    lower_set_result(ctx, 1,
                     compute_v ? ir_splat(ctx->func, t->dtype, r + 2, dims, 0.0)
                               : ir_splat(ctx->func, t->dtype, 1, zero, 0.0));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  ir_value_t a = read_mats(ctx, 0, &m);
  int64_t dims[3] = {m.count, n, n};
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, 3, dims);
  ir_value_t i = ir_iota(f, it, 1), j = ir_iota(f, it, 2);
  ir_value_t keep = ir_compare(f, lower ? IR_GE : IR_LE, i, j);
  ir_value_t tri = ir_select(f, keep, a, ir_const_like(f, a, 0.0));
  ir_value_t strict = ir_select(f, ir_compare(f, IR_EQ, i, j), ir_const_like(f, tri, 0.0), tri);
  ir_value_t sym = ir_add(f, tri, transpose3(ctx, strict));
  int64_t rd[2] = {1, 2};
  ir_value_t fro =
      ir_unary(f, IR_OP_SQRT,
               ir_reduce(f, ir_mul(f, sym, sym), ir_constant_f64(f, type_of(ctx, sym)->dtype, 0.0), rd, 2,
                         IR_REDUCE_ADD));
  int64_t b0[1] = {0};
  ir_value_t shift = ir_broadcast_in_dim(f, fro, 3, dims, b0);
  ir_value_t eye = identity_mats(ctx, m.count, n, type_of(ctx, sym)->dtype);
  ir_value_t shifted = ir_add(f, sym, ir_mul(f, eye, shift));
  ir_value_t u, s, v;
  svd_jacobi(ctx, shifted, &u, &s, &v);
  int64_t vd[2] = {m.count, n};
  ir_value_t lam = ir_sub(f, s, ir_broadcast_in_dim(f, fro, 2, vd, b0));
  /* descending -> ascending */
  int64_t rev1[1] = {1}, rev2[1] = {2};
  lam = ir_reverse(f, lam, rev1, 1);
  lower_set_result(ctx, 0, to_batch(ctx, lam, &m, 1, &n, t->dtype));
  if (compute_v) {
    int64_t tail[2] = {n, n};
    lower_set_result(ctx, 1, to_batch(ctx, ir_reverse(f, v, rev2, 1), &m, 2, tail, t->dtype));
  } else {
    int64_t zero[1] = {0};
    lower_set_result(ctx, 1, ir_splat(f, t->dtype, 1, zero, 0.0));
  }
  (void)u;
  return NULL;
}

/*===--- QR: Householder reflectors, LAPACK's convention ---===*/

/* The reflector of column k of A [B, m, n] (rows k..m): v (v_k = 1, zero
** above), tau, and beta, chosen as LAPACK's dlarfg (beta = -sign(alpha)
** ||x||; tau = 0 and H = I when nothing is below the diagonal). */
static void householder(lower_ctx_t* ctx, ir_value_t a, int64_t k, ir_value_t* v, ir_value_t* tau,
                        ir_value_t* beta) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, a);
  int64_t vd[2] = {t->dims[0], t->dims[1]}, b0[1] = {0};
  ir_value_t x = col(ctx, a, k);
  ir_value_t below = index_is(ctx, 2, vd, 1, IR_GT, k);
  ir_value_t xb = ir_select(f, below, x, ir_const_like(f, x, 0.0));
  ir_value_t alpha = elem(ctx, x, k);
  ir_value_t xnorm2 = col_dot(ctx, xb, xb);
  ir_value_t norm = ir_unary(f, IR_OP_SQRT, ir_add(f, ir_mul(f, alpha, alpha), xnorm2));
  ir_value_t trivial = ir_compare(f, IR_EQ, xnorm2, ir_const_like(f, xnorm2, 0.0));
  ir_value_t b =
      ir_select(f, ir_compare(f, IR_GE, alpha, ir_const_like(f, alpha, 0.0)), ir_neg(f, norm), norm);
  b = ir_select(f, trivial, alpha, b);
  ir_value_t safe_b = ir_select(f, trivial, ir_const_like(f, b, 1.0), b);
  *tau = ir_select(f, trivial, ir_const_like(f, b, 0.0), ir_div(f, ir_sub(f, safe_b, alpha), safe_b));
  ir_value_t denom = ir_select(f, trivial, ir_const_like(f, b, 1.0), ir_sub(f, alpha, b));
  ir_value_t scaled = ir_div(f, xb, ir_broadcast_in_dim(f, denom, 2, vd, b0));
  *v = ir_select(f, index_is(ctx, 2, vd, 1, IR_EQ, k), ir_const_like(f, scaled, 1.0), scaled);
  *beta = b;
}

/* Y [B, m, c] <- H Y with H = I - tau v v^T (from the left), or Y H (from the right; Y [B, r, m]) */
static ir_value_t apply_reflector(lower_ctx_t* ctx, ir_value_t y, ir_value_t v, ir_value_t tau, bool left) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, y);
  int64_t b0[1] = {0};
  if (left) {
    ir_value_t vy = ir_mul(f, spread(ctx, v, t->dims, 1), y);
    int64_t rd[1] = {1};
    ir_value_t w =
        ir_reduce(f, vy, ir_constant_f64(f, t->dtype, 0.0), rd, 1, IR_REDUCE_ADD); /* v^T Y: [B, c] */
    ir_value_t upd = outer(ctx, v, w);
    return ir_sub(f, y, ir_mul(f, upd, ir_broadcast_in_dim(f, tau, 3, t->dims, b0)));
  }
  ir_value_t yv = ir_mul(f, spread(ctx, v, t->dims, 2), y);
  int64_t rd[1] = {2};
  ir_value_t w = ir_reduce(f, yv, ir_constant_f64(f, t->dtype, 0.0), rd, 1, IR_REDUCE_ADD); /* Y v: [B, r] */
  ir_value_t upd = outer(ctx, w, v);
  return ir_sub(f, y, ir_mul(f, upd, ir_broadcast_in_dim(f, tau, 3, t->dims, b0)));
}

/* geqrf of A [B, m, n]: the reflectors below the diagonal, R on and above, tau [B, k] */
static ir_value_t geqrf(lower_ctx_t* ctx, ir_value_t a, ir_value_t* tau_out) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = type_of(ctx, a);
  int64_t b = t->dims[0], m = t->dims[1], n = t->dims[2], steps = m < n ? m : n;
  int64_t dims[3] = {b, m, n}, b0[1] = {0};
  ir_value_t taus[DECOMP_MAX_N];
  for (int64_t k = 0; k < steps; ++k) {
    ir_value_t v, tau, beta;
    householder(ctx, a, k, &v, &tau, &beta);
    ir_value_t applied = apply_reflector(ctx, a, v, tau, true);
    ir_value_t right = index_is(ctx, 3, dims, 2, IR_GT, k);
    a = ir_select(f, right, applied, a);
    ir_value_t colk = index_is(ctx, 3, dims, 2, IR_EQ, k);
    ir_value_t below = ir_and(f, colk, index_is(ctx, 3, dims, 1, IR_GT, k));
    ir_value_t diag = ir_and(f, colk, index_is(ctx, 3, dims, 1, IR_EQ, k));
    a = ir_select(f, below, spread(ctx, v, dims, 1), a);
    a = ir_select(f, diag, ir_broadcast_in_dim(f, beta, 3, dims, b0), a);
    int64_t d2[2] = {b, 1};
    taus[k] = ir_reshape(f, tau, 2, d2);
  }
  if (steps > 0) {
    *tau_out = ir_concatenate(f, taus, (int32_t)steps, 1);
  } else {
    int64_t d2[2] = {b, 0};
    *tau_out = ir_splat(f, t->dtype, 2, d2, 0.0);
  }
  return a;
}

/* reflector k of a geqrf result: column k below the diagonal, 1 at k */
static ir_value_t reflector(lower_ctx_t* ctx, ir_value_t a, int64_t k) {
  const ir_type_t* t = type_of(ctx, a);
  int64_t vd[2] = {t->dims[0], t->dims[1]};
  ir_value_t x = col(ctx, a, k);
  x = ir_select(ctx->func, index_is(ctx, 2, vd, 1, IR_GT, k), x, ir_const_like(ctx->func, x, 0.0));
  return ir_select(ctx->func, index_is(ctx, 2, vd, 1, IR_EQ, k), ir_const_like(ctx->func, x, 1.0), x);
}

/* Q (or Q^T) applied to Y from the left or the right, Q = H_0 ... H_(k-1) */
static ir_value_t apply_q(lower_ctx_t* ctx, ir_value_t a, ir_value_t tau, int64_t k, ir_value_t y, bool left,
                          bool transpose) {
  /* Q Y = H_0 (... (H_(k-1) Y)): last first; Q^T Y: first first; Y Q: first first; Y Q^T: last first */
  bool forward = left == transpose;
  for (int64_t s = 0; s < k; ++s) {
    int64_t i = forward ? s : k - 1 - s;
    y = apply_reflector(ctx, y, reflector(ctx, a, i), elem(ctx, tau, i), left);
  }
  return y;
}

static ir_value_t eye_rect(lower_ctx_t* ctx, int64_t b, int64_t m, int64_t n, tpurt_dtype_t dtype) {
  int64_t dims[3] = {b, m, n};
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, 3, dims);
  return ir_convert(
      ctx->func, ir_compare(ctx->func, IR_EQ, ir_iota(ctx->func, it, 1), ir_iota(ctx->func, it, 2)), dtype);
}

/* geqrf(self) -> (a, tau) */
static TPURT_MUST_USE tpurt_status_t lower_geqrf(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("geqrf", t, false));
  mats_t m = mats_of(t);
  ir_value_t tau;
  ir_value_t a = geqrf(ctx, read_mats(ctx, 0, &m), &tau);
  int64_t k = m.rows < m.cols ? m.rows : m.cols;
  lower_set_result(ctx, 0, write_mats(ctx, a, &m, t->dtype));
  lower_set_result(ctx, 1, to_batch(ctx, tau, &m, 1, &k, t->dtype));
  return NULL;
}

/* linalg_qr(A, mode="reduced") -> (Q, R) */
static TPURT_MUST_USE tpurt_status_t lower_linalg_qr(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_matrix("linalg.qr", t, false));
  const char* mode = lower_str(ctx, 1, "reduced");
  bool complete = strcmp(mode, "complete") == 0, r_only = strcmp(mode, "r") == 0;
  if (!complete && !r_only && strcmp(mode, "reduced") != 0)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "qr received unrecognized mode '%s' but expected one of 'reduced' (default), 'r', or 'complete'",
        mode);
  mats_t m = mats_of(t);
  int64_t k = m.rows < m.cols ? m.rows : m.cols;
  ir_value_t tau;
  ir_value_t a = geqrf(ctx, read_mats(ctx, 0, &m), &tau);
  tpurt_dtype_t acc = type_of(ctx, a)->dtype;
  int64_t qcols = complete ? m.rows : k, rrows = complete ? m.rows : k;
  /* R: the upper triangle of the first rrows rows */
  int64_t st[3] = {0, 0, 0}, li[3] = {m.count, rrows, m.cols}, one[3] = {1, 1, 1};
  ir_value_t r = ir_slice(ctx->func, a, st, li, one);
  int64_t rd[3] = {m.count, rrows, m.cols};
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, 3, rd);
  r = ir_select(ctx->func, ir_compare(ctx->func, IR_LE, ir_iota(ctx->func, it, 1), ir_iota(ctx->func, it, 2)),
                r, ir_const_like(ctx->func, r, 0.0));
  int64_t rt[2] = {rrows, m.cols};
  lower_set_result(ctx, 1, to_batch(ctx, r, &m, 2, rt, t->dtype));
  if (r_only) {
    int64_t zero[1] = {0};
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, 1, zero, 0.0));
    return NULL;
  }
  ir_value_t q = apply_q(ctx, a, tau, k, eye_rect(ctx, m.count, m.rows, qcols, acc), true, false);
  int64_t qt[2] = {m.rows, qcols};
  lower_set_result(ctx, 0, to_batch(ctx, q, &m, 2, qt, t->dtype));
  return NULL;
}

/* linalg_householder_product(input, tau): the first n columns of H_0 ... H_(k-1) */
static TPURT_MUST_USE tpurt_status_t lower_householder_product(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *tt = lower_meta(ctx, 1);
  TPURT_RETURN_IF_ERROR(check_matrix("torch.linalg.householder_product", t, false));
  mats_t m = mats_of(t);
  if (m.rows < m.cols)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
                       "input.shape[-1]");
  int64_t k = tt->rank ? tt->sizes[tt->rank - 1] : 0;
  if (k > m.cols)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.linalg.householder_product: input.shape[-1] must be greater than or equal to "
                       "tau.shape[-1]");
  ir_value_t a = read_mats(ctx, 0, &m);
  int64_t td[2] = {m.count, k};
  ir_value_t tau =
      ir_reshape(ctx->func, lower_cast(ctx, lower_tensor(ctx, 1), type_of(ctx, a)->dtype), 2, td);
  ir_value_t q =
      apply_q(ctx, a, tau, k, eye_rect(ctx, m.count, m.rows, m.cols, type_of(ctx, a)->dtype), true, false);
  lower_set_result(ctx, 0, write_mats(ctx, q, &m, t->dtype));
  return NULL;
}

/* ormqr(self=reflectors, input2=tau, input3=C, left=True, transpose=False) */
static TPURT_MUST_USE tpurt_status_t lower_ormqr(lower_ctx_t* ctx) {
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *tt = lower_meta(ctx, 1), *ct = lower_meta(ctx, 2);
  TPURT_RETURN_IF_ERROR(check_matrix("torch.ormqr", t, false));
  TPURT_RETURN_IF_ERROR(check_matrix("torch.ormqr", ct, false));
  bool left = lower_bool(ctx, 3, true), transpose = lower_bool(ctx, 4, false);
  mats_t m = mats_of(t), mc = mats_of(ct);
  int64_t k = tt->rank ? tt->sizes[tt->rank - 1] : 0;
  int64_t need = left ? mc.rows : mc.cols;
  if (m.count != mc.count || need != m.rows)
    return lower_error(TPURT_INVALID_ARGUMENT, "torch.ormqr: incompatible shapes %s and %s",
                       lower_shape_str(t->rank, t->sizes), lower_shape_str(ct->rank, ct->sizes));
  ir_value_t a = read_mats(ctx, 0, &m);
  int64_t td[2] = {m.count, k};
  ir_value_t tau =
      ir_reshape(ctx->func, lower_cast(ctx, lower_tensor(ctx, 1), type_of(ctx, a)->dtype), 2, td);
  ir_value_t c = read_mats(ctx, 2, &mc);
  lower_set_result(ctx, 0, write_mats(ctx, apply_q(ctx, a, tau, k, c, left, transpose), &mc, ct->dtype));
  return NULL;
}

const lower_rule_t lower_decomp_rules[] = {
    LOWER_FN("aten::_cholesky_solve_helper", lower_cholesky_solve_helper),
    LOWER_FN("aten::_linalg_det", det_row),
    LOWER_OUT_FN("aten::_linalg_det.result", det_row),
    LOWER_FN_WITH("aten::_linalg_slogdet", det_row, .flag = true),
    LOWER_OUT_FN_WITH("aten::_linalg_slogdet.sign", det_row, .flag = true),
    LOWER_FN("aten::_linalg_eigh", lower_linalg_eigh),
    LOWER_OUT_FN("aten::_linalg_eigh.eigenvalues", lower_linalg_eigh),
    LOWER_FN("aten::_linalg_solve_ex", lower_linalg_solve_ex),
    LOWER_FN("aten::_linalg_svd", lower_linalg_svd),
    LOWER_KEYED_OUT_FN("aten::linalg_lstsq.out", lower_linalg_lstsq), /* rcond shapes the program */
    LOWER_OUT_FN("aten::_linalg_svd.U", lower_linalg_svd),
    LOWER_OUT_FN("aten::_linalg_solve_ex.result", lower_linalg_solve_ex),
    LOWER_FN("aten::geqrf", lower_geqrf),
    LOWER_OUT_FN("aten::geqrf.a", lower_geqrf),
    LOWER_FN("aten::linalg_householder_product", lower_householder_product),
    LOWER_OUT_FN("aten::linalg_householder_product.out", lower_householder_product),
    LOWER_FN("aten::linalg_qr", lower_linalg_qr),
    LOWER_OUT_FN("aten::linalg_qr.out", lower_linalg_qr),
    LOWER_FN("aten::ormqr", lower_ormqr),
    LOWER_OUT_FN("aten::ormqr.out", lower_ormqr),
    LOWER_FN("aten::cholesky", lower_cholesky),
    LOWER_OUT_FN("aten::cholesky.out", lower_cholesky),
    LOWER_FN("aten::cholesky_inverse", lower_cholesky_inverse),
    LOWER_OUT_FN("aten::cholesky_inverse.out", lower_cholesky_inverse),
    LOWER_FN("aten::linalg_cholesky_ex", lower_linalg_cholesky_ex),
    LOWER_OUT_FN("aten::linalg_cholesky_ex.L", lower_linalg_cholesky_ex),
    LOWER_FN("aten::linalg_inv_ex", lower_linalg_inv_ex),
    LOWER_OUT_FN("aten::linalg_inv_ex.inverse", lower_linalg_inv_ex),
    LOWER_FN("aten::linalg_lu", lower_linalg_lu),
    LOWER_OUT_FN("aten::linalg_lu.out", lower_linalg_lu),
    LOWER_FN("aten::linalg_lu_factor_ex", lower_linalg_lu_factor_ex),
    LOWER_OUT_FN("aten::linalg_lu_factor_ex.out", lower_linalg_lu_factor_ex),
    LOWER_FN("aten::linalg_lu_solve", lower_linalg_lu_solve),
    LOWER_OUT_FN("aten::linalg_lu_solve.out", lower_linalg_lu_solve),
    LOWER_FN("aten::linalg_solve_triangular", lower_linalg_solve_triangular),
    LOWER_OUT_FN("aten::linalg_solve_triangular.out", lower_linalg_solve_triangular),
    LOWER_FN("aten::lu_unpack", lower_lu_unpack),
    LOWER_OUT_FN("aten::lu_unpack.out", lower_lu_unpack),
    LOWER_FN("aten::triangular_solve", lower_triangular_solve),
    LOWER_OUT_FN("aten::triangular_solve.X", lower_triangular_solve),
    LOWER_END,
};
