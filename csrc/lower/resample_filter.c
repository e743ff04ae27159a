/* resample_filter.c: the filtered upsamplings: bicubic
** (upsample_bicubic2d) and the antialiased bilinear and bicubic
** (_upsample_bilinear2d_aa, _upsample_bicubic2d_aa), and their gradients.
**
** All are separable: along each spatial axis, output i is a weighted sum of
** K input taps. Bicubic takes the 4 taps around the source point (Keys'
** kernel, a = -0.75), clamped to the edge. Antialiased takes the inputs
** under the filter's support, which widens by the scale when downsampling
** (a = -0.5 for its cubic), with weights normalised to sum 1, as PIL and
** PyTorch's CPU kernels do.
**
** Taps depend only on sizes, align_corners and the scale args, so the rows
** put the scales in the cache key and the taps are worked out here, in
** PyTorch's own opmath arithmetic (float for half types and f32, double for
** f64), and become constants: the indices as i32, the weights as the bits of
** the opmath float (a bitcast on the device), so they are CPU's weights to
** the bit. An axis is then one gather of all K taps, a multiply and a sum over
** K; its gradient a multiply and one scatter-add. The last axis goes first
** and an axis whose size does not change is skipped, as PyTorch's separable
** kernels do. Computes in the opmath type and rounds once. */
#include <math.h>
#include <stdio.h>

#include "../base/base.h"
#include "lower.h"

#define I32 TPURT_DTYPE_I32

typedef enum filter_kind_e { FILTER_CUBIC, FILTER_AA_LINEAR, FILTER_AA_CUBIC } filter_kind_t;

/* One axis's taps: K per output, tap k of output i at [k * out + i]. */
typedef struct taps_s {
  int64_t in, out;
  int64_t k;
  int64_t* idx;   /* input index */
  int64_t* wbits; /* the weight's bits (f32: as int32, f64: as int64) */
  int64_t* live;  /* 1 if the tap counts (antialiased: inside the support), else 0 */
} taps_t;

static void taps_free(taps_t* t) {
  free(t->idx);
  free(t->wbits);
  free(t->live);
}

/* |x| rounded to the opmath type: float unless |dbl|. */
static double op_round(double x, bool dbl) { return dbl ? x : (double)(float)x; }

static int64_t weight_bits(double w, bool dbl) {
  if (dbl) {
    int64_t b;
    memcpy(&b, &w, sizeof b);
    return b;
  }
  float f = (float)w;
  int32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

/* PyTorch's cubic_convolution1/2 in the opmath type. */
static double cubic1(double x, double a, bool dbl) {
  double r = op_round(op_round(op_round(a + 2, dbl) * x, dbl) - op_round(a + 3, dbl), dbl);
  return op_round(op_round(op_round(r * x, dbl) * x, dbl) + 1, dbl);
}
static double cubic2(double x, double a, bool dbl) {
  double r = op_round(op_round(a * x, dbl) - op_round(5 * a, dbl), dbl);
  r = op_round(op_round(r * x, dbl) + op_round(8 * a, dbl), dbl);
  return op_round(op_round(r * x, dbl) - op_round(4 * a, dbl), dbl);
}

/* The antialiasing filters (PyTorch's aa_filter for bilinear and bicubic). */
static double aa_filter(filter_kind_t kind, double x, bool dbl) {
  x = fabs(op_round(x, dbl));
  if (kind == FILTER_AA_LINEAR) return x < 1.0 ? op_round(1.0 - x, dbl) : 0.0;
  if (x < 1.0) return cubic1(x, -0.5, dbl);
  if (x < 2.0) return cubic2(x, -0.5, dbl);
  return 0.0;
}

/* area_pixel_compute_scale in the opmath type; |scale| < 0: not given. */
static double pixel_scale(int64_t in, int64_t out, bool align, double scale, bool dbl) {
  if (align) return out > 1 ? op_round(op_round((double)(in - 1), dbl) / (double)(out - 1), dbl) : 0.0;
  if (scale > 0) return op_round(1.0 / scale, dbl);
  return op_round(op_round((double)in, dbl) / (double)out, dbl);
}

static void taps_alloc(taps_t* t) {
  size_t n = (size_t)(t->k * t->out);
  t->idx = tpurt_xcalloc(n, sizeof(int64_t));
  t->wbits = tpurt_xcalloc(n, sizeof(int64_t));
  t->live = tpurt_xcalloc(n, sizeof(int64_t));
}

/* Bicubic: upsample_bicubic2d's source index (no clamp at 0) and its 4
** coefficients; taps clamped to [0, in - 1]. */
static void cubic_taps(taps_t* t, bool align, double scale_arg, bool dbl) {
  t->k = 4;
  taps_alloc(t);
  double scale = pixel_scale(t->in, t->out, align, scale_arg, dbl);
  for (int64_t i = 0; i < t->out; ++i) {
    double real = align ? op_round(scale * (double)op_round((double)i, dbl), dbl)
                        : op_round(op_round(scale * op_round((double)i + 0.5, dbl), dbl) - 0.5, dbl);
    /* guard_index_and_lambda: floorf (of the float, in either opmath) capped at in - 1,
    ** lambda clamped to [0, 1] */
    int64_t base = (int64_t)floorf((float)real);
    if (base > t->in - 1) base = t->in - 1;
    double lam = op_round(real - (double)base, dbl);
    lam = lam < 0 ? 0 : lam > 1 ? 1 : lam;
    double x2 = op_round(1.0 - lam, dbl);
    double w[4] = {cubic2(op_round(lam + 1.0, dbl), -0.75, dbl), cubic1(lam, -0.75, dbl),
                   cubic1(x2, -0.75, dbl), cubic2(op_round(x2 + 1.0, dbl), -0.75, dbl)};
    for (int64_t k = 0; k < 4; ++k) {
      int64_t src = base - 1 + k;
      src = src < 0 ? 0 : src > t->in - 1 ? t->in - 1 : src;
      t->idx[k * t->out + i] = src;
      t->wbits[k * t->out + i] = weight_bits(w[k], dbl);
      t->live[k * t->out + i] = 1;
    }
  }
}

/* Antialiased: PyTorch's _compute_indices_min_size_weights_aa. */
static void aa_taps(taps_t* t, filter_kind_t kind, bool align, double scale_arg, bool dbl) {
  double scale = pixel_scale(t->in, t->out, align, scale_arg, dbl);
  double interp = kind == FILTER_AA_LINEAR ? 2.0 : 4.0;
  double support = op_round(scale >= 1.0 ? op_round(interp * 0.5, dbl) * scale : interp * 0.5, dbl);
  t->k = (int64_t)ceil(support) * 2 + 1;
  taps_alloc(t);
  double invscale = scale >= 1.0 ? op_round(1.0 / scale, dbl) : 1.0;
  double* w = tpurt_xcalloc((size_t)t->k, sizeof(double));
  for (int64_t i = 0; i < t->out; ++i) {
    double center = op_round(scale * ((double)i + 0.5), dbl);
    int64_t xmin = (int64_t)(op_round(center - support, dbl) + 0.5);
    if (xmin < 0) xmin = 0;
    int64_t xmax = (int64_t)(op_round(center + support, dbl) + 0.5);
    if (xmax > t->in) xmax = t->in;
    int64_t xsize = xmax - xmin;
    if (xsize > t->k) xsize = t->k;
    double total = 0.0;
    for (int64_t j = 0; j < xsize; ++j) {
      double arg = op_round((double)(j + xmin) - center, dbl);
      w[j] = aa_filter(kind, (arg + 0.5) * invscale, dbl);
      total = op_round(total + w[j], dbl);
    }
    for (int64_t j = 0; j < t->k; ++j) {
      bool live = j < xsize;
      double wj = live ? w[j] : 0.0;
      if (live && total != 0.0) wj = op_round(wj / total, dbl);
      t->idx[j * t->out + i] = live ? xmin + j : xmin < t->in ? xmin : t->in - 1;
      t->wbits[j * t->out + i] = weight_bits(wj, dbl);
      t->live[j * t->out + i] = live;
    }
  }
  free(w);
}

/*===--- emitting ---===*/

/* The taps' [k, out] weights (opmath dtype |acc|) and live mask (i1, or
** IR_NONE when every tap counts) as constants. */
static void tap_constants(lower_ctx_t* ctx, const taps_t* t, tpurt_dtype_t acc, ir_value_t* w,
                          ir_value_t* live) {
  ir_func_t* f = ctx->func;
  int64_t dims[2] = {t->k, t->out};
  bool dbl = acc == TPURT_DTYPE_F64;
  ir_value_t bits = ir_constant_i64_array(f, ir_type_make(dbl ? TPURT_DTYPE_I64 : I32, 2, dims), t->wbits);
  *w = ir_bitcast_convert(f, bits, ir_type_make(acc, 2, dims));
  bool all = true;
  for (int64_t n = 0; n < t->k * t->out; ++n) all = all && t->live[n];
  *live = IR_NONE;
  if (!all) {
    ir_value_t m = ir_constant_i64_array(f, ir_type_make(I32, 2, dims), t->live);
    *live = ir_compare(f, IR_NE, m, ir_const_like(f, m, 0.0));
  }
}

/* |x|'s shape with |axis| split into (k, out). */
static int32_t split_shape(const ir_type_t* t, int32_t axis, int64_t k, int64_t out, int64_t* dims) {
  int32_t r = 0;
  for (int32_t d = 0; d < t->rank; ++d) {
    if (d == axis) {
      dims[r++] = k;
      dims[r++] = out;
    } else {
      dims[r++] = t->dims[d];
    }
  }
  return r;
}

/* Masks and weights of shape |dims| (rank r; the taps at (axis, axis + 1)). */
static ir_value_t weigh(lower_ctx_t* ctx, ir_value_t p, ir_value_t w, ir_value_t live, int32_t r,
                        const int64_t* dims, int32_t axis) {
  ir_func_t* f = ctx->func;
  int64_t bd[2] = {axis, axis + 1};
  p = ir_mul(f, p, ir_broadcast_in_dim(f, w, r, dims, bd));
  if (live != IR_NONE)
    p = ir_select(f, ir_broadcast_in_dim(f, live, r, dims, bd), p, ir_const_like(ctx->func, p, 0.0));
  return p;
}

/* Resamples |x| (opmath dtype) along |axis| by |t|. */
static ir_value_t apply_axis(lower_ctx_t* ctx, ir_value_t x, int32_t axis, const taps_t* t) {
  ir_func_t* f = ctx->func;
  const ir_type_t* tx = ir_value_type(f, x);
  if (!tx) return IR_NONE;
  ir_type_t xt = *tx;
  ir_value_t w, live;
  tap_constants(ctx, t, xt.dtype, &w, &live);
  int64_t m = t->k * t->out;
  ir_value_t idx = ir_constant_i64_array(f, ir_type_make(I32, 1, &m), t->idx);
  ir_value_t g = lower_gather_along(ctx, x, axis, idx);
  int64_t dims[TPURT_MAX_RANK + 1];
  int32_t r = split_shape(&xt, axis, t->k, t->out, dims);
  ir_value_t p = weigh(ctx, ir_reshape(f, g, r, dims), w, live, r, dims, axis);
  int64_t red = axis;
  return ir_reduce(f, p, ir_constant_f64(f, xt.dtype, 0.0), &red, 1, IR_REDUCE_ADD);
}

/* The gradient of apply_axis: |g| has t->out at |axis|; the result t->in. */
static ir_value_t apply_axis_backward(lower_ctx_t* ctx, ir_value_t g, int32_t axis, const taps_t* t) {
  ir_func_t* f = ctx->func;
  const ir_type_t* tg = ir_value_type(f, g);
  if (!tg) return IR_NONE;
  ir_type_t gt = *tg;
  ir_value_t w, live;
  tap_constants(ctx, t, gt.dtype, &w, &live);
  int64_t dims[TPURT_MAX_RANK + 1], bd[TPURT_MAX_RANK];
  int32_t r = split_shape(&gt, axis, t->k, t->out, dims);
  for (int32_t d = 0; d < gt.rank; ++d) bd[d] = d < axis ? d : d + 1;
  ir_value_t p = weigh(ctx, ir_broadcast_in_dim(f, g, r, dims, bd), w, live, r, dims, axis);
  int64_t flat[TPURT_MAX_RANK], shape[TPURT_MAX_RANK];
  for (int32_t d = 0; d < gt.rank; ++d) {
    flat[d] = d == axis ? t->k * t->out : gt.dims[d];
    shape[d] = d == axis ? t->in : gt.dims[d];
  }
  p = ir_reshape(f, p, gt.rank, flat);
  int64_t col[2] = {t->k * t->out, 1};
  ir_value_t idx = ir_constant_i64_array(f, ir_type_make(I32, 2, col), t->idx);
  ir_scatter_dims_t s = lower_scatter_dims_along(gt.rank, axis);
  ir_value_t args[2];
  ir_value_t zero = ir_splat(ctx->func, gt.dtype, gt.rank, shape, 0.0);
  ir_value_t res = ir_scatter_begin(f, zero, idx, p, &s, args);
  ir_value_t sum = ir_add(f, args[0], args[1]);
  ir_region_end(f, &sum, 1);
  return res;
}

/*===--- rules ---===*/

static bool float_dtype(tpurt_dtype_t d) {
  return d == TPURT_DTYPE_F32 || d == TPURT_DTYPE_BF16 || d == TPURT_DTYPE_F16 || d == TPURT_DTYPE_F64;
}

/* PyTorch's upsample_2d_common_check: |in| is the NCHW input size. */
static TPURT_MUST_USE tpurt_status_t check_sizes(int32_t n_out, const int64_t* out, int32_t rank,
                                                 const int64_t* in) {
  if (n_out != 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "It is expected output_size equals to 2, but got size %d",
                       (int)n_out);
  if (rank != 4)
    return lower_error(TPURT_INVALID_ARGUMENT, "It is expected input_size equals to 4, but got size %d",
                       (int)rank);
  if (in[2] <= 0 || in[3] <= 0 || out[0] <= 0 || out[1] <= 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Input and output sizes should be greater than 0, but got input (H: %lld, W: %lld) "
                       "output (H: %lld, W: %lld)",
                       (long long)in[2], (long long)in[3], (long long)out[0], (long long)out[1]);
  return NULL;
}

/* The two axes' taps; |align_arg| and the scales follow it (scales_h, scales_w). */
static void make_taps(const lower_ctx_t* ctx, filter_kind_t kind, const int64_t* in, const int64_t* out,
                      int32_t align_arg, bool dbl, taps_t* taps) {
  bool align = lower_bool(ctx, align_arg, false);
  for (int32_t a = 0; a < 2; ++a) {
    taps[a] = (taps_t){.in = in[2 + a], .out = out[a]};
    double scale = lower_is_none(ctx, align_arg + 1 + a) ? -1.0 : lower_scalar_value(ctx, align_arg + 1 + a);
    if (kind == FILTER_CUBIC)
      cubic_taps(&taps[a], align, scale, dbl);
    else
      aa_taps(&taps[a], kind, align, scale, dbl);
  }
}

/* (self, output_size, align_corners, scales_h, scales_w) */
static TPURT_MUST_USE tpurt_status_t upsample_filtered(lower_ctx_t* ctx) {
  filter_kind_t kind = (filter_kind_t)lower_rule_data(ctx)->kind;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t out[TPURT_MAX_RANK];
  int32_t n_out = lower_ints(ctx, 1, out, TPURT_MAX_RANK);
  TPURT_RETURN_IF_ERROR(check_sizes(n_out, out, t->rank, t->sizes));
  if (t->sizes[0] * t->sizes[1] == 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Non-empty 4D data tensor expected but got a tensor with sizes %s",
                       lower_shape_str(t->rank, t->sizes));
  if (!float_dtype(t->dtype)) return lower_error(TPURT_UNIMPLEMENTED, "filtered upsample of this dtype");
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  taps_t taps[2];
  make_taps(ctx, kind, t->sizes, out, 2, acc == TPURT_DTYPE_F64, taps);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  for (int32_t a = 1; a >= 0; --a)
    if (taps[a].in != taps[a].out) x = apply_axis(ctx, x, 2 + a, &taps[a]);
  for (int32_t a = 0; a < 2; ++a) taps_free(&taps[a]);
  lower_set_result(ctx, 0, lower_cast(ctx, x, t->dtype));
  return NULL;
}

/* (grad_output, output_size, input_size, align_corners, scales_h, scales_w) */
static TPURT_MUST_USE tpurt_status_t upsample_filtered_backward(lower_ctx_t* ctx) {
  filter_kind_t kind = (filter_kind_t)lower_rule_data(ctx)->kind;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t out[TPURT_MAX_RANK], in[TPURT_MAX_RANK];
  int32_t n_out = lower_ints(ctx, 1, out, TPURT_MAX_RANK);
  int32_t rank = lower_ints(ctx, 2, in, TPURT_MAX_RANK);
  TPURT_RETURN_IF_ERROR(check_sizes(n_out, out, rank, in));
  if (t->rank != 4)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected grad_output to be a tensor of dimension 4 but got: dimension %d",
                       (int)t->rank);
  for (int32_t d = 0; d < 4; ++d) {
    int64_t want = d < 2 ? in[d] : out[d - 2];
    if (t->sizes[d] != want)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Expected grad_output to have the same shape as output; output.size(%d) = %lld but got "
          "grad_output.size(%d) = %lld",
          (int)d, (long long)want, (int)d, (long long)t->sizes[d]);
  }
  if (!float_dtype(t->dtype))
    return lower_error(TPURT_UNIMPLEMENTED, "filtered upsample backward of this dtype");
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  taps_t taps[2];
  make_taps(ctx, kind, in, out, 3, acc == TPURT_DTYPE_F64, taps);
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  for (int32_t a = 0; a < 2; ++a)
    if (taps[a].in != taps[a].out) g = apply_axis_backward(ctx, g, 2 + a, &taps[a]);
  for (int32_t a = 0; a < 2; ++a) taps_free(&taps[a]);
  lower_set_result(ctx, 0, lower_cast(ctx, g, t->dtype));
  return NULL;
}

/* Rows whose scale args are part of the key (the taps are constants). */
#define FILTER_ROW(op, f, variant_, kind_)                                                       \
  {                                                                                              \
    .name = op, .fn = f, .variant = variant_, .numbers_in_key = true, .count_arg = -1, .data = { \
      .kind = kind_                                                                              \
    }                                                                                            \
  }

const lower_rule_t lower_resample_filter_rules[] = {
    FILTER_ROW("aten::upsample_bicubic2d", upsample_filtered, LOWER_FUNCTIONAL, FILTER_CUBIC),
    FILTER_ROW("aten::upsample_bicubic2d.out", upsample_filtered, LOWER_OUT, FILTER_CUBIC),
    FILTER_ROW("aten::upsample_bicubic2d_backward", upsample_filtered_backward, LOWER_FUNCTIONAL,
               FILTER_CUBIC),
    FILTER_ROW("aten::upsample_bicubic2d_backward.grad_input", upsample_filtered_backward, LOWER_OUT,
               FILTER_CUBIC),
    FILTER_ROW("aten::_upsample_bilinear2d_aa", upsample_filtered, LOWER_FUNCTIONAL, FILTER_AA_LINEAR),
    FILTER_ROW("aten::_upsample_bilinear2d_aa.out", upsample_filtered, LOWER_OUT, FILTER_AA_LINEAR),
    FILTER_ROW("aten::_upsample_bilinear2d_aa_backward", upsample_filtered_backward, LOWER_FUNCTIONAL,
               FILTER_AA_LINEAR),
    FILTER_ROW("aten::_upsample_bilinear2d_aa_backward.grad_input", upsample_filtered_backward, LOWER_OUT,
               FILTER_AA_LINEAR),
    FILTER_ROW("aten::_upsample_bicubic2d_aa", upsample_filtered, LOWER_FUNCTIONAL, FILTER_AA_CUBIC),
    FILTER_ROW("aten::_upsample_bicubic2d_aa.out", upsample_filtered, LOWER_OUT, FILTER_AA_CUBIC),
    FILTER_ROW("aten::_upsample_bicubic2d_aa_backward", upsample_filtered_backward, LOWER_FUNCTIONAL,
               FILTER_AA_CUBIC),
    FILTER_ROW("aten::_upsample_bicubic2d_aa_backward.grad_input", upsample_filtered_backward, LOWER_OUT,
               FILTER_AA_CUBIC),
    LOWER_END,
};
