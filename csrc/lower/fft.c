/* fft.c: PyTorch's FFT primitives (_fft_r2c, _fft_c2r, _fft_c2c, which every
** torch.fft function reaches) as stablehlo.fft.
**
** stablehlo.fft transforms the last one to three dims. A rule moves the
** requested dims to the end (in their order), transforms, and moves them
** back; more than three dims take several transforms of up to three. The
** one-sided (half spectrum) dim of r2c and c2r is the last requested dim.
**
** Scaling: PyTorch's |normalization| is 0 (none), 1 (1/sqrt(n)) or 2 (1/n),
** n being the product of the signal sizes (the real side's sizes for r2c
** and c2r). XLA's forward transforms do not scale; its inverse ones (IFFT,
** IRFFT) divide by n, which the rule undoes as far as the mode asks. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

enum { FFT_NORM_NONE = 0, FFT_NORM_BY_ROOT_N = 1, FFT_NORM_BY_N = 2 };
#define FFT_MAX_DIMS_PER_OP 3

/* The wrapped, distinct dims of int[] arg |arg| into |dims|. */
static TPURT_MUST_USE tpurt_status_t fft_dims(lower_ctx_t* ctx, int32_t arg, const tpurt_tensor_t* t,
                                              int64_t* dims, int32_t* n) {
  int64_t raw[TPURT_MAX_RANK + 1];
  int32_t m = lower_ints(ctx, arg, raw, TPURT_MAX_RANK + 1);
  if (m < 1 || m > t->rank)
    return lower_error(TPURT_INVALID_ARGUMENT, "expected 1 to %d dims for a %d-d input, got %d", (int)t->rank,
                       (int)t->rank, (int)m);
  bool seen[TPURT_MAX_RANK] = {false};
  for (int32_t i = 0; i < m; ++i) {
    TPURT_RETURN_IF_ERROR(lower_wrap_dim(raw[i], t->rank, &dims[i]));
    if (seen[dims[i]]) return lower_error(TPURT_INVALID_ARGUMENT, "dims must be unique");
    seen[dims[i]] = true;
  }
  *n = m;
  return NULL;
}

/* One stablehlo.fft of |type| over |dims| (at most three) of |x|, with
** |lengths| the transform sizes of those dims: the dims go to the end, in
** order, and come back afterwards. */
static ir_value_t fft_over(lower_ctx_t* ctx, ir_value_t x, ir_fft_type_t type, const int64_t* dims,
                           const int64_t* lengths, int32_t k) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, x);
  if (!t) return IR_NONE;
  int32_t rank = t->rank;
  int64_t perm[TPURT_MAX_RANK], inverse[TPURT_MAX_RANK];
  bool moved[TPURT_MAX_RANK] = {false};
  for (int32_t i = 0; i < k; ++i) moved[dims[i]] = true;
  int32_t p = 0;
  for (int32_t d = 0; d < rank; ++d)
    if (!moved[d]) perm[p++] = d;
  for (int32_t i = 0; i < k; ++i) perm[p++] = dims[i];
  bool identity = true;
  for (int32_t d = 0; d < rank; ++d) {
    inverse[perm[d]] = d;
    identity &= perm[d] == d;
  }
  if (!identity) x = ir_transpose(f, x, perm);
  x = ir_fft(f, x, type, lengths, k);
  return identity ? x : ir_transpose(f, x, inverse);
}

/* Complex-to-complex transforms over all |dims| of |x|, up to three at a
** time; each dim's length is its size. */
static ir_value_t c2c_over(lower_ctx_t* ctx, ir_value_t x, bool forward, const int64_t* dims, int32_t n) {
  for (int32_t at = 0; at < n; at += FFT_MAX_DIMS_PER_OP) {
    int32_t k = n - at < FFT_MAX_DIMS_PER_OP ? n - at : FFT_MAX_DIMS_PER_OP;
    const ir_type_t* t = ir_value_type(ctx->func, x);
    if (!t) return IR_NONE;
    int64_t lengths[FFT_MAX_DIMS_PER_OP];
    for (int32_t i = 0; i < k; ++i) lengths[i] = t->dims[dims[at + i]];
    x = fft_over(ctx, x, forward ? IR_FFT_FFT : IR_FFT_IFFT, dims + at, lengths, k);
  }
  return x;
}

/* Multiplies |x| by the scale PyTorch's |norm| asks for, given that the
** transform was an inverse one of XLA's (already divided by |n|) or not. */
static TPURT_MUST_USE tpurt_status_t normalize(lower_ctx_t* ctx, ir_value_t* x, int64_t norm, double n,
                                               bool xla_inverse) {
  double scale;
  switch (norm) {
    case FFT_NORM_NONE:
      scale = 1.0;
      break;
    case FFT_NORM_BY_ROOT_N:
      scale = 1.0 / sqrt(n);
      break;
    case FFT_NORM_BY_N:
      scale = 1.0 / n;
      break;
    default:
      return lower_error(TPURT_INVALID_ARGUMENT, "Invalid normalization mode: %lld", (long long)norm);
  }
  if (xla_inverse) scale *= n;
  if (scale != 1.0 && n > 0) *x = ir_mul(ctx->func, *x, ir_const_like(ctx->func, *x, scale));
  return NULL;
}

/* What every FFT rule reads first: self (complex or real, as the op needs),
** its transformed dims, the product of their sizes, and how many dims the
** last stablehlo.fft takes (the one-sided one for r2c and c2r). */
typedef struct fft_args_s {
  const tpurt_tensor_t* t;
  int64_t dims[TPURT_MAX_RANK];
  int32_t n, last_k;
  double size;
} fft_args_t;

static TPURT_MUST_USE tpurt_status_t fft_args(lower_ctx_t* ctx, bool complex, fft_args_t* a) {
  a->t = lower_meta(ctx, 0);
  tpurt_dtype_t d = a->t->dtype;
  bool ok = complex ? tpurt_dtype_is_complex(d) : (d == TPURT_DTYPE_F32 || d == TPURT_DTYPE_F64);
  if (!ok)
    return lower_error(TPURT_INVALID_ARGUMENT, "expected a %s input, got %s",
                       complex ? "complex64 or complex128" : "float32 or float64", tpurt_dtype_name(d));
  TPURT_RETURN_IF_ERROR(fft_dims(ctx, 1, a->t, a->dims, &a->n));
  a->size = 1;
  for (int32_t i = 0; i < a->n; ++i) a->size *= (double)a->t->sizes[a->dims[i]];
  a->last_k = a->n < FFT_MAX_DIMS_PER_OP ? a->n : FFT_MAX_DIMS_PER_OP;
  return NULL;
}

/* The sizes of the last |a->last_k| transformed dims. */
static void last_lengths(const fft_args_t* a, int64_t* lengths) {
  for (int32_t i = 0; i < a->last_k; ++i) lengths[i] = a->t->sizes[a->dims[a->n - a->last_k + i]];
}

/* Scales the result as |normalization| (arg 2) asks and sets it. */
static TPURT_MUST_USE tpurt_status_t finish(lower_ctx_t* ctx, ir_value_t x, double size, bool xla_inverse) {
  TPURT_RETURN_IF_ERROR(normalize(ctx, &x, lower_int(ctx, 2, 0), size, xla_inverse));
  lower_set_result(ctx, 0, x);
  return NULL;
}

/* _fft_r2c(self, dim, normalization, onesided): a real input's spectrum,
** halved along the last dim when onesided. */
static TPURT_MUST_USE tpurt_status_t lower_fft_r2c(lower_ctx_t* ctx) {
  fft_args_t a;
  TPURT_RETURN_IF_ERROR(fft_args(ctx, false, &a));
  ir_value_t x = lower_tensor(ctx, 0);
  if (lower_bool(ctx, 3, true)) {
    /* RFFT over the last up to three dims, then full transforms of the rest */
    int64_t lengths[FFT_MAX_DIMS_PER_OP];
    last_lengths(&a, lengths);
    x = fft_over(ctx, x, IR_FFT_RFFT, a.dims + a.n - a.last_k, lengths, a.last_k);
    x = c2c_over(ctx, x, true, a.dims, a.n - a.last_k);
  } else {
    x = c2c_over(ctx, ir_convert(ctx->func, x, tpurt_dtype_to_complex(a.t->dtype)), true, a.dims, a.n);
  }
  return finish(ctx, x, a.size, false);
}

/* _fft_c2r(self, dim, normalization, last_dim_size): the real signal of a
** half spectrum; the last dim becomes last_dim_size long. */
static TPURT_MUST_USE tpurt_status_t lower_fft_c2r(lower_ctx_t* ctx) {
  fft_args_t a;
  TPURT_RETURN_IF_ERROR(fft_args(ctx, true, &a));
  int64_t last = lower_int(ctx, 3, 0);
  if (last < 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "Invalid number of data points (%lld) specified",
                       (long long)last);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  /* IRFFT reads exactly last/2+1 bins: trim extra ones, zero-pad missing ones */
  int64_t half = last / 2 + 1, have = a.t->sizes[a.dims[a.n - 1]];
  if (have != half) {
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, in[TPURT_MAX_RANK] = {0};
    hi[a.dims[a.n - 1]] = half - have; /* negative: StableHLO's pad trims */
    x = ir_pad(f, x, ir_constant_f64(f, a.t->dtype, 0.0), lo, hi, in);
  }
  x = c2c_over(ctx, x, false, a.dims, a.n - a.last_k);
  int64_t lengths[FFT_MAX_DIMS_PER_OP];
  last_lengths(&a, lengths);
  lengths[a.last_k - 1] = last;
  x = fft_over(ctx, x, IR_FFT_IRFFT, a.dims + a.n - a.last_k, lengths, a.last_k);
  double size = (double)last; /* the real side's signal size */
  for (int32_t i = 0; i < a.n - 1; ++i) size *= (double)a.t->sizes[a.dims[i]];
  return finish(ctx, x, size, true);
}

/* _fft_c2c(self, dim, normalization, forward) */
static TPURT_MUST_USE tpurt_status_t lower_fft_c2c(lower_ctx_t* ctx) {
  fft_args_t a;
  TPURT_RETURN_IF_ERROR(fft_args(ctx, true, &a));
  bool forward = lower_bool(ctx, 3, true);
  return finish(ctx, c2c_over(ctx, lower_tensor(ctx, 0), forward, a.dims, a.n), a.size, !forward);
}

const lower_rule_t lower_fft_rules[] = {
    LOWER_FN("aten::_fft_r2c", lower_fft_r2c),
    LOWER_OUT_FN("aten::_fft_r2c.out", lower_fft_r2c),
    LOWER_FN("aten::_fft_c2r", lower_fft_c2r),
    LOWER_OUT_FN("aten::_fft_c2r.out", lower_fft_c2r),
    LOWER_FN("aten::_fft_c2c", lower_fft_c2c),
    LOWER_OUT_FN("aten::_fft_c2c.out", lower_fft_c2c),
    LOWER_END,
};
