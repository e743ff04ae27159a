/* resample.c: upsampling (nearest, nearest-exact, linear/bilinear/
** trilinear, and their gradients) and padding (constant, reflection,
** replication, and the gradients of the last two).
**
** Resampling is separable: each spatial axis is resampled on its own.
** Source indices follow PyTorch's CPU kernels to the float operation
** (f32 "scale" arithmetic, the special cases for out == in and
** out == 2 * in), so the same source pixel is picked. When they are known
** at lowering time (no scale argument, or a case that ignores it) they are
** computed here and become constants; an integer nearest factor becomes a
** broadcast and reshape. A given scale is a runtime parameter (it does not
** recompile), and the indices are then computed on the device from it.
** Linear interpolation, and every gradient, computes in f32 for half types
** and rounds once. */
#include <math.h>
#include <stdio.h>

#include "../base/base.h"
#include "lower.h"

#define I32 TPURT_DTYPE_I32
#define F32 TPURT_DTYPE_F32

/*===--- per-axis building blocks ---===*/

static ir_value_t vec_type_iota(lower_ctx_t* ctx, tpurt_dtype_t dtype, int64_t n) {
  return ir_iota(ctx->func, ir_type_make(dtype, 1, &n), 0);
}

/* x gathered along |axis| at idx (a [m] i32 vector): size m there. */
static ir_value_t take(lower_ctx_t* ctx, ir_value_t x, int32_t axis, ir_value_t idx) {
  const ir_type_t* ti = ir_value_type(ctx->func, idx);
  if (!ti) return IR_NONE;
  int64_t col[2] = {ti->dims[0], 1};
  return lower_gather_along(ctx, x, axis, ir_reshape(ctx->func, idx, 2, col));
}

/* acc + (updates scattered along |axis| at idx, summed): the gradient of
** take(). */
static ir_value_t put_add(lower_ctx_t* ctx, ir_value_t acc, int32_t axis, ir_value_t idx,
                          ir_value_t updates) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, acc);
  const ir_type_t* ti = ir_value_type(f, idx);
  if (!t || !ti) return IR_NONE;
  int64_t col[2] = {ti->dims[0], 1};
  ir_scatter_dims_t s = lower_scatter_dims_along(t->rank, axis);
  ir_value_t args[2];
  ir_value_t r = ir_scatter_begin(f, acc, ir_reshape(f, idx, 2, col), updates, &s, args);
  ir_value_t sum = ir_add(f, args[0], args[1]);
  ir_region_end(f, &sum, 1);
  return r;
}

/* A [m] vector broadcast along |axis| of |like|'s shape. */
static ir_value_t along(lower_ctx_t* ctx, ir_value_t v, ir_value_t like, int32_t axis) {
  const ir_type_t* t = ir_value_type(ctx->func, like);
  if (!t) return IR_NONE;
  int64_t bd = axis;
  return ir_broadcast_in_dim(ctx->func, v, t->rank, t->dims, &bd);
}

/* x repeated k times along |axis| (each element k times in a row). */
static ir_value_t repeat_each(lower_ctx_t* ctx, ir_value_t x, int32_t axis, int64_t k) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  int64_t wide[TPURT_MAX_RANK], bd[TPURT_MAX_RANK], out[TPURT_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < t->rank; ++i) {
    bd[i] = r;
    wide[r++] = t->dims[i];
    if (i == axis) wide[r++] = k;
    out[i] = t->dims[i] * (i == axis ? k : 1);
  }
  return ir_reshape(ctx->func, ir_broadcast_in_dim(ctx->func, x, r, wide, bd), t->rank, out);
}

/* The gradient of repeat_each: sums each run of k along |axis|. */
static ir_value_t sum_each(lower_ctx_t* ctx, ir_value_t g, int32_t axis, int64_t k) {
  const ir_type_t* t = ir_value_type(ctx->func, g);
  if (!t) return IR_NONE;
  int64_t wide[TPURT_MAX_RANK];
  int32_t r = 0;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (i == axis) {
      wide[r++] = t->dims[i] / k;
      wide[r++] = k;
    } else {
      wide[r++] = t->dims[i];
    }
  }
  int64_t dim = axis + 1;
  return ir_reduce(ctx->func, ir_reshape(ctx->func, g, r, wide), ir_constant_f64(ctx->func, t->dtype, 0.0),
                   &dim, 1, IR_REDUCE_ADD);
}

/*===--- scales and source indices ---===*/

/* One spatial axis of an upsample: sizes and the optional scale arg. */
typedef struct axis_s {
  int64_t in, out;
  int32_t scale_arg; /* schema arg of this axis's scale, -1 if none */
  bool has_scale;    /* the arg is given (a runtime value) */
} axis_t;

/* compute_scales_value: (float)(1.0 / scale) when a positive scale is
** given, else (float)in / out. As a device f32 value (a constant when the
** scale is not given; else computed from an f64 parameter). */
static ir_value_t scale_value(lower_ctx_t* ctx, const axis_t* a) {
  ir_func_t* f = ctx->func;
  float ratio = (float)a->in / (float)a->out;
  ir_value_t fallback = ir_constant_f64(f, F32, (double)ratio);
  if (!a->has_scale) return fallback;
  /* 1 / scale in double, then rounded to float, as PyTorch does: in f32
  ** the reciprocal can land one ulp lower and move an index */
  ir_value_t s = lower_scalar(ctx, a->scale_arg, TPURT_DTYPE_F64);
  ir_value_t inv = ir_convert(f, ir_div(f, ir_constant_f64(f, TPURT_DTYPE_F64, 1.0), s), F32);
  return ir_select(f, ir_compare(f, IR_GT, s, ir_constant_f64(f, TPURT_DTYPE_F64, 0.0)), inv, fallback);
}

/* Nearest (or nearest-exact) source indices as an i32 [out] vector, and,
** when they are known here and form runs of a constant factor k, *k_out
** (else 0). */
static ir_value_t nearest_indices(lower_ctx_t* ctx, const axis_t* a, bool exact, int64_t* k_out) {
  ir_func_t* f = ctx->func;
  *k_out = 0;
  bool special = !exact && (a->out == a->in || a->out == 2 * a->in);
  if (special || !a->has_scale) {
    int64_t* idx = tpurt_xmalloc(sizeof(int64_t) * (size_t)(a->out > 0 ? a->out : 1));
    float scale = (float)a->in / (float)a->out;
    for (int64_t j = 0; j < a->out; ++j) {
      int64_t src;
      if (!exact && a->out == a->in)
        src = j;
      else if (!exact && a->out == 2 * a->in)
        src = j >> 1;
      else if (exact)
        src = (int64_t)floorf((float)(((double)j + 0.5) * (double)scale));
      else
        src = (int64_t)floorf((float)j * scale);
      idx[j] = src < a->in - 1 ? src : a->in - 1;
    }
    if (a->out % a->in == 0) {
      int64_t k = a->out / a->in;
      bool runs = true;
      for (int64_t j = 0; runs && j < a->out; ++j) runs = idx[j] == j / k;
      if (runs) *k_out = k;
    }
    ir_value_t v = ir_constant_i64_array(f, ir_type_make(I32, 1, &a->out), idx);
    free(idx);
    return v;
  }
  ir_value_t j = ir_convert(f, vec_type_iota(ctx, I32, a->out), F32);
  if (exact) j = ir_add(f, j, ir_const_like(f, j, 0.5));
  ir_value_t scale = ir_broadcast_in_dim(f, scale_value(ctx, a), 1, &a->out, NULL);
  ir_value_t src = ir_convert(f, ir_unary(f, IR_OP_FLOOR, ir_mul(f, j, scale)), I32);
  return ir_min(f, src, ir_const_like(f, src, (double)(a->in - 1)));
}

/* Linear interpolation along one axis: lower and upper source indices
** (i32 [out]) and the upper weight (f32 [out]), as PyTorch's
** compute_source_index_and_lambda. */
static void linear_indices(lower_ctx_t* ctx, const axis_t* a, bool align_corners, ir_value_t* i0,
                           ir_value_t* i1, ir_value_t* l1) {
  ir_func_t* f = ctx->func;
  ir_value_t scale;
  if (align_corners)
    scale = ir_constant_f64(f, F32, a->out > 1 ? (double)((float)(a->in - 1) / (float)(a->out - 1)) : 0.0);
  else
    scale = scale_value(ctx, a);
  ir_value_t j = ir_convert(f, vec_type_iota(ctx, I32, a->out), F32);
  ir_value_t s = ir_broadcast_in_dim(f, scale, 1, &a->out, NULL);
  ir_value_t real;
  if (align_corners) {
    real = ir_mul(f, s, j);
  } else {
    ir_value_t half = ir_const_like(f, j, 0.5);
    real = ir_sub(f, ir_mul(f, s, ir_add(f, j, half)), half);
    real = ir_max(f, real, ir_const_like(f, j, 0.0));
  }
  ir_value_t last = ir_const_like(f, vec_type_iota(ctx, I32, a->out), (double)(a->in - 1));
  ir_value_t lo = ir_min(f, ir_convert(f, ir_unary(f, IR_OP_FLOOR, real), I32), last);
  ir_value_t lam = ir_sub(f, real, ir_convert(f, lo, F32));
  lam = ir_clamp(f, ir_constant_f64(f, F32, 0.0), lam, ir_constant_f64(f, F32, 1.0));
  ir_value_t step = ir_convert(f, ir_compare(f, IR_LT, lo, last), I32);
  *i0 = lo;
  *i1 = ir_add(f, lo, step);
  *l1 = lam;
}

/*===--- upsample rules ---===*/

typedef enum resample_mode_e { MODE_NEAREST, MODE_NEAREST_EXACT, MODE_LINEAR } resample_mode_t;

/* Reads and checks an upsample's args. |ns| spatial dims; |size_arg| is
** output_size; |scale_arg| the first scale; for backward, |input_size_arg|
** is input_size (else -1) and arg 0 is grad_output. */
static TPURT_MUST_USE tpurt_status_t read_axes(const lower_ctx_t* ctx, int32_t ns, int32_t size_arg,
                                               int32_t input_size_arg, int32_t scale_arg, int64_t* full_in,
                                               axis_t* axes) {
  int64_t out[TPURT_MAX_RANK];
  int32_t n_out = lower_ints(ctx, size_arg, out, TPURT_MAX_RANK);
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (n_out != ns)
    return lower_error(TPURT_INVALID_ARGUMENT, "It is expected output_size equals to %d, but got size %d",
                       (int)ns, (int)n_out);
  int32_t rank;
  if (input_size_arg >= 0) {
    rank = lower_ints(ctx, input_size_arg, full_in, TPURT_MAX_RANK);
  } else {
    rank = t->rank;
    for (int32_t i = 0; i < rank; ++i) full_in[i] = t->sizes[i];
  }
  if (rank != ns + 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "It is expected input_size equals to %d, but got size %d",
                       (int)(ns + 2), (int)rank);
  bool positive = true;
  for (int32_t i = 0; i < ns; ++i) positive = positive && full_in[2 + i] > 0 && out[i] > 0;
  if (!positive) {
    static const char* const kNames[3] = {"D", "H", "W"};
    char a[128] = "", b[128] = "";
    size_t na = 0, nb = 0;
    for (int32_t i = 0; i < ns; ++i) {
      const char* name = kNames[3 - ns + i];
      na += (size_t)snprintf(a + na, sizeof(a) - na, "%s%s: %lld", i ? ", " : "", name,
                             (long long)full_in[2 + i]);
      nb += (size_t)snprintf(b + nb, sizeof(b) - nb, "%s%s: %lld", i ? ", " : "", name, (long long)out[i]);
    }
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Input and output sizes should be greater than 0, but got input (%s)%s output (%s)", a,
                       ns == 1 ? " and" : "", b);
  }
  if (input_size_arg < 0) {
    int64_t rest = 1;
    for (int32_t i = 1; i < rank; ++i) rest *= full_in[i];
    if (rest == 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Non-empty %dD data tensor expected but got a tensor with sizes %s", (int)rank,
                         lower_shape_str(rank, full_in));
  } else {
    if (t->rank != rank)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Expected grad_output to be a tensor of dimension %d but got: dimension %d",
                         (int)rank, (int)t->rank);
    for (int32_t i = 0; i < rank; ++i) {
      int64_t want = i < 2 ? full_in[i] : out[i - 2];
      if (t->sizes[i] != want)
        return lower_error(
            TPURT_INVALID_ARGUMENT,
            "Expected grad_output to have the same shape as output; output.size(%d) = %lld but got "
            "grad_output.size(%d) = %lld",
            (int)i, (long long)want, (int)i, (long long)t->sizes[i]);
    }
  }
  for (int32_t i = 0; i < ns; ++i) {
    axes[i].in = full_in[2 + i];
    axes[i].out = out[i];
    axes[i].scale_arg = scale_arg < 0 ? -1 : scale_arg + i;
    axes[i].has_scale = scale_arg >= 0 && !lower_is_none(ctx, scale_arg + i);
  }
  return NULL;
}

static bool float_dtype(tpurt_dtype_t d) {
  return d == TPURT_DTYPE_F32 || d == TPURT_DTYPE_BF16 || d == TPURT_DTYPE_F16 || d == TPURT_DTYPE_F64;
}

/* upsample_*(self, output_size, [align_corners,] scales...) */
static TPURT_MUST_USE tpurt_status_t upsample(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  resample_mode_t mode = (resample_mode_t)lower_rule_data(ctx)->kind;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  bool linear = mode == MODE_LINEAR;
  int64_t full_in[TPURT_MAX_RANK];
  axis_t axes[3];
  TPURT_RETURN_IF_ERROR(read_axes(ctx, ns, 1, -1, linear ? 3 : 2, full_in, axes));
  if (linear ? !float_dtype(t->dtype) : t->dtype == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_UNIMPLEMENTED, "upsample of this dtype");
  bool align = linear && lower_bool(ctx, 2, false);
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  if (linear) x = lower_cast(ctx, x, acc);
  for (int32_t i = 0; i < ns; ++i) {
    const axis_t* a = &axes[i];
    int32_t axis = 2 + i;
    if (!linear) {
      int64_t k;
      ir_value_t idx = nearest_indices(ctx, a, mode == MODE_NEAREST_EXACT, &k);
      x = k ? (k == 1 ? x : repeat_each(ctx, x, axis, k)) : take(ctx, x, axis, idx);
      continue;
    }
    if (a->out == a->in) continue; /* PyTorch's identity case */
    ir_value_t i0, i1, l1;
    linear_indices(ctx, a, align, &i0, &i1, &l1);
    ir_value_t x0 = take(ctx, x, axis, i0), x1 = take(ctx, x, axis, i1);
    ir_value_t w1 = along(ctx, lower_cast(ctx, l1, acc), x0, axis);
    ir_value_t w0 = ir_sub(f, ir_const_like(f, w1, 1.0), w1);
    x = ir_add(f, ir_mul(f, w0, x0), ir_mul(f, w1, x1));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, x, t->dtype));
  return NULL;
}

/* upsample_*_backward(grad_output, output_size, input_size, [align_corners,]
** scales...) */
static TPURT_MUST_USE tpurt_status_t upsample_backward(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  resample_mode_t mode = (resample_mode_t)lower_rule_data(ctx)->kind;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  bool linear = mode == MODE_LINEAR;
  int64_t full_in[TPURT_MAX_RANK];
  axis_t axes[3];
  TPURT_RETURN_IF_ERROR(read_axes(ctx, ns, 1, 2, linear ? 4 : 3, full_in, axes));
  if (!float_dtype(t->dtype)) return lower_error(TPURT_UNIMPLEMENTED, "upsample backward of this dtype");
  bool align = linear && lower_bool(ctx, 3, false);
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  for (int32_t i = ns - 1; i >= 0; --i) {
    const axis_t* a = &axes[i];
    int32_t axis = 2 + i;
    const ir_type_t* tg = ir_value_type(f, g);
    if (!tg) break;
    int64_t shape[TPURT_MAX_RANK];
    for (int32_t d = 0; d < tg->rank; ++d) shape[d] = d == axis ? a->in : tg->dims[d];
    if (!linear) {
      int64_t k;
      ir_value_t idx = nearest_indices(ctx, a, mode == MODE_NEAREST_EXACT, &k);
      if (k == 0)
        g = put_add(ctx, ir_splat(f, acc, tg->rank, shape, 0.0), axis, idx, g);
      else if (k > 1)
        g = sum_each(ctx, g, axis, k);
      continue;
    }
    if (a->out == a->in) continue;
    ir_value_t zero = ir_splat(f, acc, tg->rank, shape, 0.0);
    ir_value_t i0, i1, l1;
    linear_indices(ctx, a, align, &i0, &i1, &l1);
    ir_value_t w1 = along(ctx, lower_cast(ctx, l1, acc), g, axis);
    ir_value_t w0 = ir_sub(f, ir_const_like(f, w1, 1.0), w1);
    ir_value_t r = put_add(ctx, zero, axis, i0, ir_mul(f, w0, g));
    g = put_add(ctx, r, axis, i1, ir_mul(f, w1, g));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, g, t->dtype));
  return NULL;
}

/*===--- padding ---===*/

/* constant_pad_nd(self, pad, value=0): pad pairs from the last dim back;
** negative pads crop. */
static TPURT_MUST_USE tpurt_status_t lower_constant_pad_nd(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t pad[2 * TPURT_MAX_RANK + 2];
  int32_t n = lower_ints(ctx, 1, pad, 2 * TPURT_MAX_RANK + 2);
  if (n % 2 != 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "Length of pad must be even but instead it equals %d", (int)n);
  if (n / 2 > t->rank)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Length of pad should be no more than twice the number of dimensions of the input. Pad "
        "length is %dwhile the input has %ddimensions.",
        (int)n, (int)t->rank);
  int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, interior[TPURT_MAX_RANK] = {0};
  int64_t out[TPURT_MAX_RANK];
  for (int32_t k = 0; k < n / 2; ++k) {
    int32_t d = t->rank - 1 - k;
    lo[d] = pad[2 * k];
    hi[d] = pad[2 * k + 1];
  }
  for (int32_t d = 0; d < t->rank; ++d) {
    out[d] = t->sizes[d] + lo[d] + hi[d];
    if (out[d] < 0) return lower_error(TPURT_INVALID_ARGUMENT, "narrow(): length must be non-negative.");
  }
  ir_value_t value = lower_scalar(ctx, 2, t->dtype);
  ir_value_t x = lower_tensor(ctx, 0);
  bool crops_all = false;
  for (int32_t d = 0; d < t->rank; ++d)
    if (t->sizes[d] + (lo[d] < 0 ? lo[d] : 0) + (hi[d] < 0 ? hi[d] : 0) <= 0) crops_all = true;
  if (crops_all) /* nothing of the input is left: all padding (pad needs an in-bounds crop) */
    lower_set_result(ctx, 0, ir_broadcast_in_dim(ctx->func, value, t->rank, out, NULL));
  else
    lower_set_result(ctx, 0, ir_pad(ctx->func, x, value, lo, hi, interior));
  return NULL;
}

/* Which padding: reflect about the edge element, or repeat it. */
typedef enum pad_kind_e { PAD_REFLECT, PAD_REPLICATE } pad_kind_t;

/* x[lo:hi] along |axis|. */
static ir_value_t slice_axis(lower_ctx_t* ctx, ir_value_t x, int32_t axis, int64_t lo, int64_t hi) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  int64_t start[TPURT_MAX_RANK], limit[TPURT_MAX_RANK], step[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) {
    start[i] = i == axis ? lo : 0;
    limit[i] = i == axis ? hi : t->dims[i];
    step[i] = 1;
  }
  return ir_slice(ctx->func, x, start, limit, step);
}

/* The pieces of one padded axis of size n, padded by (l, r), in order:
** source ranges [from, to) of the input along the axis, reversed or
** repeated. Returns how many. */
typedef struct piece_s {
  int64_t from, to; /* a range of the input */
  bool reversed;
  int64_t repeat; /* replicate: the 1-element range repeated this often (else 1) */
} piece_t;

static int32_t axis_pieces(pad_kind_t kind, int64_t n, int64_t l, int64_t r, piece_t* p) {
  int32_t k = 0;
  if (l > 0) {
    if (kind == PAD_REFLECT)
      p[k++] = (piece_t){1, l + 1, true, 1};
    else
      p[k++] = (piece_t){0, 1, false, l};
  }
  int64_t from = l < 0 ? -l : 0, to = n - (r < 0 ? -r : 0);
  if (to > from) p[k++] = (piece_t){from, to, false, 1};
  if (r > 0) {
    if (kind == PAD_REFLECT)
      p[k++] = (piece_t){n - 1 - r, n - 1, true, 1};
    else
      p[k++] = (piece_t){n - 1, n, false, r};
  }
  return k;
}

static ir_value_t pad_axis(lower_ctx_t* ctx, ir_value_t x, int32_t axis, pad_kind_t kind, int64_t l,
                           int64_t r) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  piece_t pieces[3];
  int32_t np = axis_pieces(kind, t->dims[axis], l, r, pieces);
  ir_value_t parts[3];
  for (int32_t i = 0; i < np; ++i) {
    ir_value_t v = slice_axis(ctx, x, axis, pieces[i].from, pieces[i].to);
    if (pieces[i].reversed) {
      int64_t a = axis;
      v = ir_reverse(ctx->func, v, &a, 1);
    }
    if (pieces[i].repeat != 1) v = repeat_each(ctx, v, axis, pieces[i].repeat);
    parts[i] = v;
  }
  return np == 1 ? parts[0] : ir_concatenate(ctx->func, parts, np, axis);
}

/* The gradient of pad_axis: g (padded size) back to size n. */
static ir_value_t unpad_axis(lower_ctx_t* ctx, ir_value_t g, int32_t axis, int64_t n, pad_kind_t kind,
                             int64_t l, int64_t r) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, g);
  if (!t) return IR_NONE;
  piece_t pieces[3];
  int32_t np = axis_pieces(kind, n, l, r, pieces);
  ir_value_t acc = IR_NONE;
  int64_t at = 0;
  for (int32_t i = 0; i < np; ++i) {
    int64_t len = (pieces[i].to - pieces[i].from) * pieces[i].repeat;
    ir_value_t v = slice_axis(ctx, g, axis, at, at + len);
    at += len;
    if (pieces[i].repeat != 1) v = sum_each(ctx, v, axis, pieces[i].repeat);
    if (pieces[i].reversed) {
      int64_t a = axis;
      v = ir_reverse(f, v, &a, 1);
    }
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, interior[TPURT_MAX_RANK] = {0};
    lo[axis] = pieces[i].from;
    hi[axis] = n - pieces[i].to;
    v = ir_pad(f, v, ir_constant_f64(f, t->dtype, 0.0), lo, hi, interior);
    acc = acc == IR_NONE ? v : ir_add(f, acc, v);
  }
  if (acc == IR_NONE) { /* nothing of the input survives */
    int64_t dims[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t->rank; ++i) dims[i] = i == axis ? n : t->dims[i];
    acc = ir_splat(f, t->dtype, t->rank, dims, 0.0);
  }
  return acc;
}

/* Checks a reflection/replication pad of |ns| spatial dims over |sizes|
** (rank |rank|) with |pad| (pairs from the last dim back); fills |out|. */
static TPURT_MUST_USE tpurt_status_t check_pad(pad_kind_t kind, int32_t ns, int32_t rank,
                                               const int64_t* sizes, const int64_t* pad, int32_t npad,
                                               int64_t* out) {
  if (npad != 2 * ns) {
    if (kind == PAD_REFLECT)
      return lower_error(TPURT_INVALID_ARGUMENT, "padding size is expected to be %d, but got: %d",
                         (int)(2 * ns), (int)npad);
    return lower_error(TPURT_INVALID_ARGUMENT, "padding size is expected to be %d", (int)(2 * ns));
  }
  bool ok = rank == ns + 1 || rank == ns + 2;
  for (int32_t i = 1; ok && i < rank; ++i) ok = sizes[i] != 0;
  if (!ok)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Expected %dD or %dD (batch mode) tensor with possibly 0 batch size and other non-zero "
        "dimensions for input, but got: %s",
        (int)(ns + 1), (int)(ns + 2), lower_shape_str(rank, sizes));
  if (kind == PAD_REFLECT) {
    for (int32_t k = 0; k < ns; ++k) { /* W, then H, then D */
      int32_t d = rank - 1 - k;
      if (pad[2 * k] >= sizes[d] || pad[2 * k + 1] >= sizes[d])
        return lower_error(
            TPURT_INVALID_ARGUMENT,
            "Argument #%d: Padding size should be less than the corresponding input dimension, but "
            "got: padding (%lld, %lld) at dimension %d of input %s",
            (int)(4 + 2 * k), (long long)pad[2 * k], (long long)pad[2 * k + 1], (int)d,
            lower_shape_str(rank, sizes));
    }
  }
  for (int32_t i = 0; i < rank; ++i) out[i] = sizes[i];
  bool any_positive = false;
  for (int32_t k = 0; k < ns; ++k) {
    int32_t d = rank - 1 - k;
    out[d] = sizes[d] + pad[2 * k] + pad[2 * k + 1];
    if (out[d] >= 1) any_positive = true;
  }
  if (!any_positive) {
    static const char* const kNames[3] = {"D", "H", "W"};
    char a[128] = "", b[128] = "";
    size_t na = 0, nb = 0;
    for (int32_t i = 0; i < ns; ++i) {
      int32_t d = rank - ns + i;
      const char* sep = i == 0 ? "" : (ns == 3 && i == 1 ? " " : ", ");
      na += (size_t)snprintf(a + na, sizeof(a) - na, "%s%s: %lld", sep, kNames[3 - ns + i],
                             (long long)sizes[d]);
      nb += (size_t)snprintf(b + nb, sizeof(b) - nb, "%s%s: %lld", i ? " " : "", kNames[3 - ns + i],
                             (long long)out[d]);
    }
    return lower_error(TPURT_INVALID_ARGUMENT, "input (%s%s) is too small. Calculated output %s", a,
                       ns == 2 ? " " : "", b);
  }
  for (int32_t d = 0; d < rank; ++d)
    if (out[d] < 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "Trying to create tensor with negative dimension %lld: %s",
                         (long long)out[d], lower_shape_str(rank, out));
  return NULL;
}

/* reflection_padNd / replication_padNd(self, padding) */
static TPURT_MUST_USE tpurt_status_t pad_nd(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  pad_kind_t kind = (pad_kind_t)lower_rule_data(ctx)->kind;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t pad[2 * TPURT_MAX_RANK], out[TPURT_MAX_RANK];
  int32_t npad = lower_ints(ctx, 1, pad, 2 * TPURT_MAX_RANK);
  TPURT_RETURN_IF_ERROR(check_pad(kind, ns, t->rank, t->sizes, pad, npad, out));
  if (t->dtype == TPURT_DTYPE_BOOL) return lower_error(TPURT_UNIMPLEMENTED, "padding of bool");
  int64_t numel = 1;
  for (int32_t i = 0; i < t->rank; ++i) numel *= out[i];
  if (numel == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, t->dtype, t->rank, out, 0.0));
    return NULL;
  }
  ir_value_t x = lower_tensor(ctx, 0);
  for (int32_t k = 0; k < ns; ++k) x = pad_axis(ctx, x, t->rank - 1 - k, kind, pad[2 * k], pad[2 * k + 1]);
  lower_set_result(ctx, 0, x);
  return NULL;
}

/* reflection_padNd_backward / replication_padNd_backward(grad_output,
** self, padding) */
static TPURT_MUST_USE tpurt_status_t pad_nd_backward(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  pad_kind_t kind = (pad_kind_t)lower_rule_data(ctx)->kind;
  const tpurt_tensor_t* gt = lower_meta(ctx, 0);
  const tpurt_tensor_t* t = lower_meta(ctx, 1);
  int64_t pad[2 * TPURT_MAX_RANK], out[TPURT_MAX_RANK];
  int32_t npad = lower_ints(ctx, 2, pad, 2 * TPURT_MAX_RANK);
  TPURT_RETURN_IF_ERROR(check_pad(kind, ns, t->rank, t->sizes, pad, npad, out));
  if (!float_dtype(gt->dtype)) return lower_error(TPURT_UNIMPLEMENTED, "padding backward of this dtype");
  static const char* const kNames[3] = {"width", "height", "depth"};
  for (int32_t k = 0; k < ns; ++k) {
    int32_t d = t->rank - 1 - k;
    if (gt->rank != t->rank || gt->sizes[d] != out[d])
      return lower_error(TPURT_INVALID_ARGUMENT, "gradOutput %s unexpected. Expected: %lld, Got: %lld",
                         kNames[k], (long long)out[d], (long long)(gt->rank == t->rank ? gt->sizes[d] : -1));
  }
  int64_t numel = 1;
  for (int32_t i = 0; i < t->rank; ++i) numel *= t->sizes[i];
  tpurt_dtype_t acc = lower_acc_dtype(gt->dtype);
  if (numel == 0) {
    lower_set_result(ctx, 0, ir_splat(ctx->func, gt->dtype, t->rank, t->sizes, 0.0));
    return NULL;
  }
  ir_value_t g = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  for (int32_t k = ns - 1; k >= 0; --k) {
    int32_t d = t->rank - 1 - k;
    g = unpad_axis(ctx, g, d, t->sizes[d], kind, pad[2 * k], pad[2 * k + 1]);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, g, gt->dtype));
  return NULL;
}

const lower_rule_t lower_resample_rules[] = {
    LOWER_FN_WITH("aten::_upsample_nearest_exact1d", upsample, .spatial = 1, .kind = MODE_NEAREST_EXACT),
    LOWER_OUT_FN_WITH("aten::_upsample_nearest_exact1d.out", upsample, .spatial = 1,
                      .kind = MODE_NEAREST_EXACT),
    LOWER_FN_WITH("aten::_upsample_nearest_exact1d_backward", upsample_backward, .spatial = 1,
                  .kind = MODE_NEAREST_EXACT),
    LOWER_OUT_FN_WITH("aten::_upsample_nearest_exact1d_backward.grad_input", upsample_backward, .spatial = 1,
                      .kind = MODE_NEAREST_EXACT),
    LOWER_FN_WITH("aten::_upsample_nearest_exact2d", upsample, .spatial = 2, .kind = MODE_NEAREST_EXACT),
    LOWER_OUT_FN_WITH("aten::_upsample_nearest_exact2d.out", upsample, .spatial = 2,
                      .kind = MODE_NEAREST_EXACT),
    LOWER_FN_WITH("aten::_upsample_nearest_exact2d_backward", upsample_backward, .spatial = 2,
                  .kind = MODE_NEAREST_EXACT),
    LOWER_OUT_FN_WITH("aten::_upsample_nearest_exact2d_backward.grad_input", upsample_backward, .spatial = 2,
                      .kind = MODE_NEAREST_EXACT),
    LOWER_FN_WITH("aten::_upsample_nearest_exact3d", upsample, .spatial = 3, .kind = MODE_NEAREST_EXACT),
    LOWER_OUT_FN_WITH("aten::_upsample_nearest_exact3d.out", upsample, .spatial = 3,
                      .kind = MODE_NEAREST_EXACT),
    LOWER_FN_WITH("aten::_upsample_nearest_exact3d_backward", upsample_backward, .spatial = 3,
                  .kind = MODE_NEAREST_EXACT),
    LOWER_OUT_FN_WITH("aten::_upsample_nearest_exact3d_backward.grad_input", upsample_backward, .spatial = 3,
                      .kind = MODE_NEAREST_EXACT),
    LOWER_FN("aten::constant_pad_nd", lower_constant_pad_nd),
    LOWER_OUT_FN("aten::constant_pad_nd.out", lower_constant_pad_nd),
    LOWER_FN_WITH("aten::reflection_pad1d", pad_nd, .spatial = 1, .kind = PAD_REFLECT),
    LOWER_OUT_FN_WITH("aten::reflection_pad1d.out", pad_nd, .spatial = 1, .kind = PAD_REFLECT),
    LOWER_FN_WITH("aten::reflection_pad1d_backward", pad_nd_backward, .spatial = 1, .kind = PAD_REFLECT),
    LOWER_OUT_FN_WITH("aten::reflection_pad1d_backward.grad_input", pad_nd_backward, .spatial = 1,
                      .kind = PAD_REFLECT),
    LOWER_FN_WITH("aten::reflection_pad2d", pad_nd, .spatial = 2, .kind = PAD_REFLECT),
    LOWER_OUT_FN_WITH("aten::reflection_pad2d.out", pad_nd, .spatial = 2, .kind = PAD_REFLECT),
    LOWER_FN_WITH("aten::reflection_pad2d_backward", pad_nd_backward, .spatial = 2, .kind = PAD_REFLECT),
    LOWER_OUT_FN_WITH("aten::reflection_pad2d_backward.grad_input", pad_nd_backward, .spatial = 2,
                      .kind = PAD_REFLECT),
    LOWER_FN_WITH("aten::reflection_pad3d", pad_nd, .spatial = 3, .kind = PAD_REFLECT),
    LOWER_OUT_FN_WITH("aten::reflection_pad3d.out", pad_nd, .spatial = 3, .kind = PAD_REFLECT),
    LOWER_FN_WITH("aten::reflection_pad3d_backward", pad_nd_backward, .spatial = 3, .kind = PAD_REFLECT),
    LOWER_OUT_FN_WITH("aten::reflection_pad3d_backward.grad_input", pad_nd_backward, .spatial = 3,
                      .kind = PAD_REFLECT),
    LOWER_FN_WITH("aten::replication_pad1d", pad_nd, .spatial = 1, .kind = PAD_REPLICATE),
    LOWER_OUT_FN_WITH("aten::replication_pad1d.out", pad_nd, .spatial = 1, .kind = PAD_REPLICATE),
    LOWER_FN_WITH("aten::replication_pad1d_backward", pad_nd_backward, .spatial = 1, .kind = PAD_REPLICATE),
    LOWER_OUT_FN_WITH("aten::replication_pad1d_backward.grad_input", pad_nd_backward, .spatial = 1,
                      .kind = PAD_REPLICATE),
    LOWER_FN_WITH("aten::replication_pad2d", pad_nd, .spatial = 2, .kind = PAD_REPLICATE),
    LOWER_OUT_FN_WITH("aten::replication_pad2d.out", pad_nd, .spatial = 2, .kind = PAD_REPLICATE),
    LOWER_FN_WITH("aten::replication_pad2d_backward", pad_nd_backward, .spatial = 2, .kind = PAD_REPLICATE),
    LOWER_OUT_FN_WITH("aten::replication_pad2d_backward.grad_input", pad_nd_backward, .spatial = 2,
                      .kind = PAD_REPLICATE),
    LOWER_FN_WITH("aten::replication_pad3d", pad_nd, .spatial = 3, .kind = PAD_REPLICATE),
    LOWER_OUT_FN_WITH("aten::replication_pad3d.out", pad_nd, .spatial = 3, .kind = PAD_REPLICATE),
    LOWER_FN_WITH("aten::replication_pad3d_backward", pad_nd_backward, .spatial = 3, .kind = PAD_REPLICATE),
    LOWER_OUT_FN_WITH("aten::replication_pad3d_backward.grad_input", pad_nd_backward, .spatial = 3,
                      .kind = PAD_REPLICATE),
    LOWER_FN_WITH("aten::upsample_bilinear2d", upsample, .spatial = 2, .kind = MODE_LINEAR),
    LOWER_OUT_FN_WITH("aten::upsample_bilinear2d.out", upsample, .spatial = 2, .kind = MODE_LINEAR),
    LOWER_FN_WITH("aten::upsample_bilinear2d_backward", upsample_backward, .spatial = 2, .kind = MODE_LINEAR),
    LOWER_OUT_FN_WITH("aten::upsample_bilinear2d_backward.grad_input", upsample_backward, .spatial = 2,
                      .kind = MODE_LINEAR),
    LOWER_FN_WITH("aten::upsample_linear1d", upsample, .spatial = 1, .kind = MODE_LINEAR),
    LOWER_OUT_FN_WITH("aten::upsample_linear1d.out", upsample, .spatial = 1, .kind = MODE_LINEAR),
    LOWER_FN_WITH("aten::upsample_linear1d_backward", upsample_backward, .spatial = 1, .kind = MODE_LINEAR),
    LOWER_OUT_FN_WITH("aten::upsample_linear1d_backward.grad_input", upsample_backward, .spatial = 1,
                      .kind = MODE_LINEAR),
    LOWER_FN_WITH("aten::upsample_nearest1d", upsample, .spatial = 1, .kind = MODE_NEAREST),
    LOWER_OUT_FN_WITH("aten::upsample_nearest1d.out", upsample, .spatial = 1, .kind = MODE_NEAREST),
    LOWER_FN_WITH("aten::upsample_nearest1d_backward", upsample_backward, .spatial = 1, .kind = MODE_NEAREST),
    LOWER_OUT_FN_WITH("aten::upsample_nearest1d_backward.grad_input", upsample_backward, .spatial = 1,
                      .kind = MODE_NEAREST),
    LOWER_FN_WITH("aten::upsample_nearest2d", upsample, .spatial = 2, .kind = MODE_NEAREST),
    LOWER_OUT_FN_WITH("aten::upsample_nearest2d.out", upsample, .spatial = 2, .kind = MODE_NEAREST),
    LOWER_FN_WITH("aten::upsample_nearest2d_backward", upsample_backward, .spatial = 2, .kind = MODE_NEAREST),
    LOWER_OUT_FN_WITH("aten::upsample_nearest2d_backward.grad_input", upsample_backward, .spatial = 2,
                      .kind = MODE_NEAREST),
    LOWER_FN_WITH("aten::upsample_nearest3d", upsample, .spatial = 3, .kind = MODE_NEAREST),
    LOWER_OUT_FN_WITH("aten::upsample_nearest3d.out", upsample, .spatial = 3, .kind = MODE_NEAREST),
    LOWER_FN_WITH("aten::upsample_nearest3d_backward", upsample_backward, .spatial = 3, .kind = MODE_NEAREST),
    LOWER_OUT_FN_WITH("aten::upsample_nearest3d_backward.grad_input", upsample_backward, .spatial = 3,
                      .kind = MODE_NEAREST),
    LOWER_FN_WITH("aten::upsample_trilinear3d", upsample, .spatial = 3, .kind = MODE_LINEAR),
    LOWER_OUT_FN_WITH("aten::upsample_trilinear3d.out", upsample, .spatial = 3, .kind = MODE_LINEAR),
    LOWER_FN_WITH("aten::upsample_trilinear3d_backward", upsample_backward, .spatial = 3,
                  .kind = MODE_LINEAR),
    LOWER_OUT_FN_WITH("aten::upsample_trilinear3d_backward.grad_input", upsample_backward, .spatial = 3,
                      .kind = MODE_LINEAR),
    LOWER_END,
};
