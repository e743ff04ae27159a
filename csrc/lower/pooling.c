/* pooling.c: max, average and adaptive average pooling over 1 to 3
** spatial dims, forward and backward.
**
** Max and average pooling are stablehlo.reduce_window: max pooling reduces
** (value, flat index) pairs so that it returns PyTorch's indices (the first
** maximum of a window, NaN beats everything); its backward scatter-adds the
** gradient at those indices. Average pooling sums a window and divides by
** a divisor computed on the host per output position (it depends only on
** shapes); its backward spreads grad/divisor with an interior-padded
** reduce_window. Adaptive average pooling has windows of varying size: it
** is a contraction with a 0/1 window matrix per spatial dim, then a
** division by the window sizes.
**
** Inputs are [*lead, *spatial] with one or two lead dims (batch, channel),
** as PyTorch's kernels accept. */
#include <math.h>
#include <stdio.h>

#include "../base/base.h"
#include "lower.h"

#define POOL_MAX_SPATIAL 3

typedef struct pool_s {
  const char* name; /* for messages: "max_pool2d" */
  int32_t ns;       /* spatial dims */
  int32_t lead;     /* dims before them */
  int64_t in[POOL_MAX_SPATIAL], k[POOL_MAX_SPATIAL], stride[POOL_MAX_SPATIAL];
  int64_t pad[POOL_MAX_SPATIAL], dil[POOL_MAX_SPATIAL], out[POOL_MAX_SPATIAL];
  bool ceil_mode;
} pool_t;

/* One value for every spatial dim, or one per dim; |if_empty| when the list is empty. */
static TPURT_MUST_USE tpurt_status_t pool_param(const lower_ctx_t* ctx, int32_t arg, const char* what,
                                                const pool_t* p, const int64_t* if_empty, int64_t* out) {
  int64_t given[TPURT_MAX_RANK];
  int32_t n = lower_is_none(ctx, arg) ? 0 : lower_ints(ctx, arg, given, TPURT_MAX_RANK);
  if (n == 0 && if_empty) {
    for (int32_t i = 0; i < p->ns; ++i) out[i] = if_empty[i];
    return NULL;
  }
  if (n != 1 && n != p->ns)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s: %s must either be a single int, or a tuple of %d ints",
                       p->name, what, (int)p->ns);
  for (int32_t i = 0; i < p->ns; ++i) out[i] = given[n == 1 ? 0 : i];
  return NULL;
}

/* PyTorch's pooling_output_shape. */
static int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil,
                             bool ceil_mode) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

/* Reads kernel_size, stride, padding, dilation (|dil_arg| < 0: none) and
** ceil_mode (|ceil_arg| < 0: false) and checks them as pool2d_shape_check does. */
static TPURT_MUST_USE tpurt_status_t read_pool(const lower_ctx_t* ctx, const char* name, int32_t ns,
                                               int32_t input_arg, int32_t k_arg, int32_t dil_arg,
                                               int32_t ceil_arg, pool_t* p) {
  memset(p, 0, sizeof(*p));
  p->name = name;
  p->ns = ns;
  const tpurt_tensor_t* in = lower_meta(ctx, input_arg);
  if (in->rank != ns + 1 && in->rank != ns + 2)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "%s: Expected %dD or %dD (batch mode) tensor for input, got %dD", name, (int)ns + 1,
                       (int)ns + 2, (int)in->rank);
  p->lead = in->rank - ns;
  for (int32_t i = 0; i < ns; ++i) p->in[i] = in->sizes[p->lead + i];
  for (int32_t i = 0; i < p->lead; ++i)
    if (in->sizes[i] == 0 && !(p->lead == 2 && i == 0))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "%s: Expected input's non-batch dimensions to have positive length", name);
  TPURT_RETURN_IF_ERROR(pool_param(ctx, k_arg, "kernel_size", p, NULL, p->k));
  TPURT_RETURN_IF_ERROR(pool_param(ctx, k_arg + 1, "stride", p, p->k, p->stride));
  TPURT_RETURN_IF_ERROR(pool_param(ctx, k_arg + 2, "padding", p, NULL, p->pad));
  int64_t ones[POOL_MAX_SPATIAL] = {1, 1, 1};
  if (dil_arg >= 0)
    TPURT_RETURN_IF_ERROR(pool_param(ctx, dil_arg, "dilation", p, ones, p->dil));
  else
    memcpy(p->dil, ones, sizeof(ones));
  p->ceil_mode = ceil_arg >= 0 && lower_bool(ctx, ceil_arg, false);
  for (int32_t i = 0; i < ns; ++i) {
    if (p->k[i] <= 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "kernel size should be greater than zero, but got %s",
                         lower_shape_str(ns, p->k));
    if (p->stride[i] <= 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "stride should be greater than zero, but got %s",
                         lower_shape_str(ns, p->stride));
    if (p->dil[i] <= 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "dilation should be greater than zero, but got %s",
                         lower_shape_str(ns, p->dil));
    if (p->pad[i] < 0 || p->pad[i] > p->k[i] / 2)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "pad should be at most half of effective kernel size, but got pad=%lld, "
                         "kernel_size=%lld and dilation=%lld",
                         (long long)p->pad[i], (long long)p->k[i], (long long)p->dil[i]);
    p->out[i] = pool_out_size(p->in[i], p->k[i], p->pad[i], p->stride[i], p->dil[i], p->ceil_mode);
  }
  for (int32_t i = 0; i < ns; ++i)
    if (p->out[i] < 1) {
      char a[128], b[128];
      snprintf(a, sizeof(a), "%s", lower_shape_str(ns, p->in));
      snprintf(b, sizeof(b), "%s", lower_shape_str(ns, p->out));
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "%s: Given input size: %s. Calculated output size: %s. "
                         "Output size is too small",
                         name, a, b);
    }
  return NULL;
}

/* The window over [*lead, *spatial]: padding low = pad, high = whatever
** the last (ceil mode) window needs; *out_crop gets how many trailing input
** elements no window reaches (they must be sliced off: the high padding
** would be negative). */
static ir_window_t pool_window(const pool_t* p, int64_t* out_crop) {
  ir_window_t w;
  memset(&w, 0, sizeof(w));
  for (int32_t i = 0; i < p->lead; ++i) w.dimensions[i] = w.strides[i] = w.dilations[i] = 1;
  for (int32_t i = 0; i < p->ns; ++i) {
    int32_t d = p->lead + i;
    w.dimensions[d] = p->k[i];
    w.strides[d] = p->stride[i];
    w.dilations[d] = p->dil[i];
    w.padding_low[d] = p->pad[i];
    int64_t needed = (p->out[i] - 1) * p->stride[i] + (p->k[i] - 1) * p->dil[i] + 1;
    int64_t high = needed - p->in[i] - p->pad[i];
    out_crop[i] = high < 0 ? -high : 0;
    w.padding_high[d] = high < 0 ? 0 : high;
  }
  return w;
}

/* Slices off the trailing |crop| elements of each spatial dim. */
static ir_value_t crop_spatial(lower_ctx_t* ctx, ir_value_t x, const pool_t* p, const int64_t* crop) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  int64_t start[TPURT_MAX_RANK] = {0}, limit[TPURT_MAX_RANK], strides[TPURT_MAX_RANK];
  bool any = false;
  for (int32_t d = 0; d < t->rank; ++d) limit[d] = t->dims[d], strides[d] = 1;
  for (int32_t i = 0; i < p->ns; ++i) {
    limit[p->lead + i] -= crop[i];
    any = any || crop[i] > 0;
  }
  return any ? ir_slice(ctx->func, x, start, limit, strides) : x;
}

/* The flat index of each input element within its spatial plane (i64). */
static ir_value_t plane_index(lower_ctx_t* ctx, const ir_type_t* t, const pool_t* p) {
  ir_type_t it = *t;
  it.dtype = TPURT_DTYPE_I64;
  ir_value_t idx = IR_NONE;
  int64_t scale = 1;
  for (int32_t i = p->ns - 1; i >= 0; --i) {
    ir_value_t term = ir_iota(ctx->func, it, p->lead + i);
    if (scale != 1) term = ir_mul(ctx->func, term, ir_const_like(ctx->func, term, (double)scale));
    idx = idx == IR_NONE ? term : ir_add(ctx->func, idx, term);
    scale *= p->in[i];
  }
  return idx;
}

static double lowest_of(tpurt_dtype_t d) {
  if (tpurt_dtype_is_float(d)) return -INFINITY;
  switch (d) {
    case TPURT_DTYPE_U8:
    case TPURT_DTYPE_BOOL:
      return 0;
    case TPURT_DTYPE_I8:
      return -128;
    case TPURT_DTYPE_I16:
      return -32768;
    case TPURT_DTYPE_I32:
      return -2147483648.0;
    default:
      return -9223372036854775808.0;
  }
}

/* (values, indices) of the max over each window. */
static void max_pool(lower_ctx_t* ctx, ir_value_t x, const pool_t* p, ir_value_t* out_values,
                     ir_value_t* out_indices) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, x);
  tpurt_dtype_t dt = t->dtype;
  ir_value_t idx = plane_index(ctx, t, p);
  int64_t crop[POOL_MAX_SPATIAL];
  ir_window_t w = pool_window(p, crop);
  ir_value_t inputs[2] = {crop_spatial(ctx, x, p, crop), crop_spatial(ctx, idx, p, crop)};
  /* padding loses every comparison: the lowest value, and the largest index for ties */
  ir_value_t inits[2] = {
      dt == TPURT_DTYPE_I64 ? ir_constant_i64(f, dt, INT64_MIN) : ir_constant_f64(f, dt, lowest_of(dt)),
      ir_constant_i64(f, TPURT_DTYPE_I64, INT64_MAX)};
  ir_value_t results[2], a[4];
  ir_reduce_window_begin(f, inputs, inits, 2, &w, results, a);
  /* a[0], a[1]: accumulated (value, index); a[2], a[3]: the candidate. The body
  ** must not depend on the order XLA visits a window in: the candidate wins if
  ** it is NaN and the accumulator is not (or both are NaN and it comes later:
  ** PyTorch keeps the last NaN), or if neither is NaN and it is greater, or
  ** equal and earlier (PyTorch keeps the first maximum). */
  ir_value_t cand_nan = ir_compare(f, IR_NE, a[2], a[2]);
  ir_value_t acc_nan = ir_compare(f, IR_NE, a[0], a[0]);
  ir_value_t later = ir_compare(f, IR_GT, a[3], a[1]);
  ir_value_t earlier = ir_compare(f, IR_LT, a[3], a[1]);
  ir_value_t greater = ir_compare(f, IR_GT, a[2], a[0]);
  ir_value_t equal = ir_compare(f, IR_EQ, a[2], a[0]);
  ir_value_t by_value = ir_or(f, greater, ir_and(f, equal, earlier));
  ir_value_t not_acc_nan = ir_not(f, acc_nan);
  ir_value_t nan_case = ir_and(f, cand_nan, ir_or(f, not_acc_nan, later));
  ir_value_t plain_case = ir_and(f, ir_not(f, cand_nan), ir_and(f, not_acc_nan, by_value));
  ir_value_t take = ir_or(f, nan_case, plain_case);
  ir_value_t ret[2] = {ir_select(f, take, a[2], a[0]), ir_select(f, take, a[3], a[1])};
  ir_region_end(f, ret, 2);
  *out_values = results[0];
  *out_indices = results[1];
}

/* max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) */
static TPURT_MUST_USE tpurt_status_t max_pool_with_indices(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  const char* name = lower_rule_str(ctx);
  pool_t p;
  TPURT_RETURN_IF_ERROR(read_pool(ctx, name, ns, 0, 1, 4, 5, &p));
  tpurt_dtype_t dt = lower_meta(ctx, 0)->dtype;
  if (dt == TPURT_DTYPE_BOOL)
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for 'Bool'", name);
  ir_value_t v, i;
  max_pool(ctx, lower_tensor(ctx, 0), &p, &v, &i);
  lower_set_result(ctx, 0, v);
  lower_set_result(ctx, 1, i);
  return NULL;
}

/* Adds (or, |replace|, writes) |updates| [*lead, *out] into zeros shaped
** [*lead, *in] at the plane indices |indices| (same shape as updates). */
static ir_value_t scatter_plane(lower_ctx_t* ctx, ir_value_t updates, ir_value_t indices, int32_t lead,
                                const int64_t* lead_dims, int64_t plane, int64_t out_plane, bool replace) {
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = ir_value_type(f, updates)->dtype;
  int64_t rows = 1;
  for (int32_t i = 0; i < lead; ++i) rows *= lead_dims[i];
  int64_t ud[2] = {rows, out_plane}, od[2] = {rows, plane}, id[3] = {rows, out_plane, 1};
  ir_value_t u = ir_reshape(f, updates, 2, ud);
  ir_value_t col = ir_reshape(f, indices, 3, id);
  ir_value_t row = ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 3, id), 0);
  ir_value_t both[2] = {row, col};
  ir_value_t idx = ir_concatenate(f, both, 2, 2);
  ir_scatter_dims_t sd;
  memset(&sd, 0, sizeof(sd));
  sd.num_inserted = 2;
  sd.inserted_window_dims[0] = 0;
  sd.inserted_window_dims[1] = 1;
  sd.num_scatter_dims_to_operand = 2;
  sd.scatter_dims_to_operand_dims[0] = 0;
  sd.scatter_dims_to_operand_dims[1] = 1;
  sd.index_vector_dim = 2;
  ir_value_t args[2];
  ir_value_t r = ir_scatter_begin(f, ir_splat(f, dt, 2, od, 0.0), idx, u, &sd, args);
  ir_value_t sum = replace ? args[1] : ir_add(f, args[0], args[1]);
  ir_region_end(f, &sum, 1);
  return r;
}

static ir_value_t scatter_add_plane(lower_ctx_t* ctx, ir_value_t updates, ir_value_t indices, int32_t lead,
                                    const int64_t* lead_dims, int64_t plane, int64_t out_plane) {
  return scatter_plane(ctx, updates, indices, lead, lead_dims, plane, out_plane, false);
}

/* max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride,
** padding, dilation, ceil_mode, indices) */
static TPURT_MUST_USE tpurt_status_t max_pool_backward(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  const char* name = lower_rule_str(ctx);
  pool_t p;
  TPURT_RETURN_IF_ERROR(read_pool(ctx, name, ns, 1, 2, 5, 6, &p));
  const tpurt_tensor_t* in = lower_meta(ctx, 1);
  const tpurt_tensor_t* g = lower_meta(ctx, 0);
  const tpurt_tensor_t* ind = lower_meta(ctx, 7);
  if (g->rank != in->rank || ind->rank != in->rank)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "%s_backward: grad_output and indices must have the input's rank", name);
  for (int32_t i = 0; i < ns; ++i)
    if (g->sizes[p.lead + i] != p.out[i] || ind->sizes[p.lead + i] != p.out[i])
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "%s_backward: grad_output has size %lld at dim %d, expected %lld", name,
                         (long long)g->sizes[p.lead + i], (int)(p.lead + i), (long long)p.out[i]);
  tpurt_dtype_t acc = lower_acc_dtype(in->dtype);
  int64_t plane = 1, out_plane = 1;
  for (int32_t i = 0; i < ns; ++i) plane *= p.in[i], out_plane *= p.out[i];
  ir_value_t gi = scatter_add_plane(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc),
                                    lower_cast(ctx, lower_tensor(ctx, 7), TPURT_DTYPE_I64), p.lead, in->sizes,
                                    plane, out_plane);
  gi = ir_reshape(ctx->func, gi, in->rank, in->sizes);
  lower_set_result(ctx, 0, lower_cast(ctx, gi, in->dtype));
  return NULL;
}

/*===--- average pooling ---===*/

/* The divisor of every output position, [*out] as a value of |dtype|:
** divisor_override, or the window size (clipped to the padded input, and
** to the input itself unless count_include_pad), as avg_pool2d's kernel. */
static ir_value_t avg_divisor(lower_ctx_t* ctx, const pool_t* p, bool count_include_pad, int64_t override,
                              tpurt_dtype_t dtype) {
  int64_t(*counts)[4096] = malloc(sizeof(int64_t[POOL_MAX_SPATIAL][4096]));
  if (!counts) return IR_NONE;
  int64_t total = 1;
  for (int32_t i = 0; i < p->ns; ++i) {
    total *= p->out[i];
    for (int64_t o = 0; o < p->out[i]; ++o) {
      int64_t start = o * p->stride[i] - p->pad[i];
      int64_t end = start + p->k[i] < p->in[i] + p->pad[i] ? start + p->k[i] : p->in[i] + p->pad[i];
      int64_t with_pad = end - start;
      if (start < 0) start = 0;
      if (end > p->in[i]) end = p->in[i];
      counts[i][o] = count_include_pad ? with_pad : end - start;
    }
  }
  int64_t* values = malloc((size_t)total * sizeof(int64_t));
  if (!values) {
    free(counts);
    return IR_NONE;
  }
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat, v = 1;
    for (int32_t i = p->ns - 1; i >= 0; --i) {
      v *= counts[i][rest % p->out[i]];
      rest /= p->out[i];
    }
    values[flat] = override ? override : v;
  }
  free(counts);
  ir_value_t c = ir_constant_i64_array(ctx->func, ir_type_make(TPURT_DTYPE_I64, p->ns, p->out), values);
  free(values);
  return ir_convert(ctx->func, c, dtype);
}

/* avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override) */
static TPURT_MUST_USE tpurt_status_t read_avg(lower_ctx_t* ctx, int32_t input_arg, int32_t k_arg, int32_t ns,
                                              const char* name, pool_t* p, bool* count_include_pad,
                                              int64_t* override) {
  TPURT_RETURN_IF_ERROR(read_pool(ctx, name, ns, input_arg, k_arg, -1, k_arg + 3, p));
  for (int32_t i = 0; i < ns; ++i)
    if (p->out[i] > 4096)
      return lower_error(TPURT_UNIMPLEMENTED, "%s: more than 4096 outputs along a dim", name);
  *count_include_pad = lower_bool(ctx, k_arg + 4, true);
  *override = lower_int(ctx, k_arg + 5, 0);
  if (!lower_is_none(ctx, k_arg + 5) && *override == 0)
    return lower_error(TPURT_INVALID_ARGUMENT, "divisor must be not zero");
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t avg_pool(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  const char* name = lower_rule_str(ctx);
  pool_t p;
  bool include_pad;
  int64_t override;
  TPURT_RETURN_IF_ERROR(read_avg(ctx, 0, 1, ns, name, &p, &include_pad, &override));
  const tpurt_tensor_t* in = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(in->dtype) && in->dtype != TPURT_DTYPE_I64)
    return lower_error(TPURT_UNIMPLEMENTED, "%s over %s", name, tpurt_dtype_name(in->dtype));
  tpurt_dtype_t acc = lower_acc_dtype(in->dtype);
  int64_t crop[POOL_MAX_SPATIAL];
  ir_window_t w = pool_window(&p, crop);
  ir_value_t x = crop_spatial(ctx, lower_cast(ctx, lower_tensor(ctx, 0), acc), &p, crop);
  ir_value_t sum = ir_reduce_window(ctx->func, x, ir_constant_f64(ctx->func, acc, 0.0), &w, IR_REDUCE_ADD);
  const ir_type_t* st = ir_value_type(ctx->func, sum);
  int64_t bdims[POOL_MAX_SPATIAL];
  for (int32_t i = 0; i < ns; ++i) bdims[i] = p.lead + i;
  ir_value_t div = ir_broadcast_in_dim(ctx->func, avg_divisor(ctx, &p, include_pad, override, acc), st->rank,
                                       st->dims, bdims);
  /* integers divide truncating, as the CPU kernel's C division */
  ir_value_t r = ir_div(ctx->func, sum, div);
  lower_set_result(ctx, 0, lower_cast(ctx, r, in->dtype));
  return NULL;
}

/* avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding,
** ceil_mode, count_include_pad, divisor_override): every input position
** gets the sum of grad/divisor over the windows that contain it. */
static TPURT_MUST_USE tpurt_status_t avg_pool_backward(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  const char* name = lower_rule_str(ctx);
  pool_t p;
  bool include_pad;
  int64_t override;
  TPURT_RETURN_IF_ERROR(read_avg(ctx, 1, 2, ns, name, &p, &include_pad, &override));
  const tpurt_tensor_t* in = lower_meta(ctx, 1);
  const tpurt_tensor_t* g = lower_meta(ctx, 0);
  for (int32_t i = 0; i < ns; ++i)
    if (g->rank != in->rank || g->sizes[p.lead + i] != p.out[i])
      return lower_error(TPURT_INVALID_ARGUMENT, "%s_backward: grad_output has the wrong shape %s", name,
                         lower_shape_str(g->rank, g->sizes));
  tpurt_dtype_t acc = lower_acc_dtype(in->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t gv = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  const ir_type_t* gt = ir_value_type(f, gv);
  int64_t bdims[POOL_MAX_SPATIAL];
  for (int32_t i = 0; i < ns; ++i) bdims[i] = p.lead + i;
  ir_value_t div =
      ir_broadcast_in_dim(f, avg_divisor(ctx, &p, include_pad, override, acc), gt->rank, gt->dims, bdims);
  gv = ir_div(f, gv, div);
  /* Output o covers inputs o*s - pad + j (j < k): spread o to o*s (interior
  ** padding s-1), shift by k-1-pad, and sum windows of k at stride 1. */
  int64_t low[TPURT_MAX_RANK] = {0}, high[TPURT_MAX_RANK] = {0}, interior[TPURT_MAX_RANK] = {0};
  ir_window_t w;
  memset(&w, 0, sizeof(w));
  for (int32_t d = 0; d < in->rank; ++d) w.dimensions[d] = w.strides[d] = w.dilations[d] = 1;
  for (int32_t i = 0; i < ns; ++i) {
    int32_t d = p.lead + i;
    low[d] = p.k[i] - 1 - p.pad[i];
    high[d] = p.in[i] + p.pad[i] - (p.out[i] - 1) * p.stride[i] - 1;
    interior[d] = p.stride[i] - 1;
    w.dimensions[d] = p.k[i];
  }
  ir_value_t spread = ir_pad(f, gv, ir_constant_f64(f, acc, 0.0), low, high, interior);
  ir_value_t gi = ir_reduce_window(f, spread, ir_constant_f64(f, acc, 0.0), &w, IR_REDUCE_ADD);
  lower_set_result(ctx, 0, lower_cast(ctx, gi, in->dtype));
  return NULL;
}

/*===--- adaptive average pooling ---===*/

/* The 0/1 matrix [out, in] of which inputs output o averages: PyTorch's
** start = floor(o*in/out), end = ceil((o+1)*in/out); and the window sizes. */
static ir_value_t adaptive_matrix(lower_ctx_t* ctx, int64_t in, int64_t out, tpurt_dtype_t dtype,
                                  int64_t* sizes) {
  int64_t* m = calloc((size_t)(in * out > 0 ? in * out : 1), sizeof(int64_t));
  if (!m) return IR_NONE;
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = (o * in) / out, end = ((o + 1) * in + out - 1) / out;
    sizes[o] = end - start;
    for (int64_t i = start; i < end; ++i) m[o * in + i] = 1;
  }
  int64_t dims[2] = {out, in};
  ir_value_t c = ir_constant_i64_array(ctx->func, ir_type_make(TPURT_DTYPE_I64, 2, dims), m);
  free(m);
  return ir_convert(ctx->func, c, dtype);
}

/* Contracts spatial dim |lead| of x with the window matrix of each spatial
** dim in turn; |transposed| for the backward (matrix [out, in] used as [in, out]). */
static TPURT_MUST_USE tpurt_status_t adaptive_avg(lower_ctx_t* ctx) {
  int32_t ns = lower_rule_data(ctx)->spatial;
  bool backward = lower_rule_data(ctx)->flag;
  const char* name = ns == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d";
  const tpurt_tensor_t* in = lower_meta(ctx, backward ? 1 : 0);
  if (in->rank != ns + 1 && in->rank != ns + 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected %dD or %dD tensor, but got %s", name,
                       (int)ns + 1, (int)ns + 2, lower_shape_str(in->rank, in->sizes));
  int32_t lead = in->rank - ns;
  for (int32_t i = 1; i < in->rank; ++i)
    if (in->sizes[i] == 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "%s(): Expected input to have non-zero size for non-batch dimensions, but input has "
                         "sizes %s with dimension %d being empty",
                         name, lower_shape_str(in->rank, in->sizes), (int)i);
  int64_t out[POOL_MAX_SPATIAL];
  if (backward) {
    const tpurt_tensor_t* g = lower_meta(ctx, 0);
    if (g->rank != in->rank) return lower_error(TPURT_INVALID_ARGUMENT, "%s_backward: ranks differ", name);
    for (int32_t i = 0; i < ns; ++i) out[i] = g->sizes[lead + i];
  } else {
    int64_t given[TPURT_MAX_RANK];
    int32_t n = lower_ints(ctx, 1, given, TPURT_MAX_RANK);
    if (n != ns && n != 1)
      return lower_error(TPURT_INVALID_ARGUMENT, "%s: output_size must be %d", name, (int)ns);
    for (int32_t i = 0; i < ns; ++i) out[i] = given[n == 1 ? 0 : i];
  }
  for (int32_t i = 0; i < ns; ++i)
    if (out[i] < 0 || out[i] > 4096)
      return lower_error(TPURT_INVALID_ARGUMENT, "%s: output size %lld is out of range", name,
                         (long long)out[i]);
  tpurt_dtype_t acc = lower_acc_dtype(in->dtype);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  int64_t(*sizes)[4096] = malloc(sizeof(int64_t[POOL_MAX_SPATIAL][4096]));
  if (!sizes) return lower_error(TPURT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  ir_value_t mats[POOL_MAX_SPATIAL];
  for (int32_t i = 0; i < ns; ++i) mats[i] = adaptive_matrix(ctx, in->sizes[lead + i], out[i], acc, sizes[i]);
  /* the divisor [*out]: products of the window sizes */
  int64_t total = 1;
  for (int32_t i = 0; i < ns; ++i) total *= out[i];
  int64_t* cnt = malloc((size_t)(total > 0 ? total : 1) * sizeof(int64_t));
  if (!cnt) {
    free(sizes);
    return lower_error(TPURT_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  }
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat, v = 1;
    for (int32_t i = ns - 1; i >= 0; --i) {
      v *= sizes[i][rest % out[i]];
      rest /= out[i];
    }
    cnt[flat] = v;
  }
  free(sizes);
  ir_value_t div = ir_convert(f, ir_constant_i64_array(f, ir_type_make(TPURT_DTYPE_I64, ns, out), cnt), acc);
  free(cnt);
  int64_t bdims[POOL_MAX_SPATIAL];
  for (int32_t i = 0; i < ns; ++i) bdims[i] = lead + i;
  if (backward) { /* grad / count, then spread back with the transposed matrices */
    const ir_type_t* t = ir_value_type(f, x);
    x = ir_div(f, x, ir_broadcast_in_dim(f, div, t->rank, t->dims, bdims));
  }
  for (int32_t i = 0; i < ns; ++i) {
    ir_dot_dims_t dd;
    memset(&dd, 0, sizeof(dd));
    dd.num_contract = 1;
    dd.lhs_contract[0] = lead;
    dd.rhs_contract[0] = backward ? 0 : 1;
    x = ir_dot_general(f, x, mats[i], &dd, acc); /* the new dim goes last */
  }
  if (!backward) {
    const ir_type_t* t = ir_value_type(f, x);
    x = ir_div(f, x, ir_broadcast_in_dim(f, div, t->rank, t->dims, bdims));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, x, in->dtype));
  return NULL;
}

/* max_unpool2d(self, indices, output_size) / max_unpool3d(self, indices,
** output_size, stride, padding): self's values written at their plane
** |indices| into zeros of [*lead, *output_size] (one scatter; an index out
** of the plane is dropped, where CPU raises: that check would need a sync). */
static TPURT_MUST_USE tpurt_status_t max_unpool(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  int32_t ns = row->spatial;
  const char* name = row->str;
  const tpurt_tensor_t *t = lower_meta(ctx, 0), *it = lower_meta(ctx, 1);
  if (it->dtype != TPURT_DTYPE_I64)
    return lower_error(TPURT_INVALID_ARGUMENT, "elements in indices should be type int64 but got: %s",
                       lower_dtype_cpp_name(it->dtype));
  bool same = it->rank == t->rank;
  for (int32_t i = 0; same && i < t->rank; ++i) same = it->sizes[i] == t->sizes[i];
  if (!same)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Expected shape of indices to be same as that of the input tensor (%s) but got indices "
        "tensor with shape: %s",
        lower_shape_str(t->rank, t->sizes), lower_shape_str(it->rank, it->sizes));
  int64_t out[POOL_MAX_SPATIAL];
  if (lower_ints(ctx, 2, out, POOL_MAX_SPATIAL) != ns)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "There should be exactly %d elements but got a different number", ns);
  if (t->rank != ns + 1 && t->rank != ns + 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s: Expected %dD or %dD tensor, but got %s", name, ns + 1,
                       ns + 2, lower_shape_str(t->rank, t->sizes));
  int32_t lead = t->rank - ns;
  int64_t plane = 1, in_plane = 1, dims[TPURT_MAX_RANK];
  for (int32_t i = 0; i < ns; ++i) {
    plane *= out[i];
    in_plane *= t->sizes[lead + i];
  }
  ir_value_t r =
      scatter_plane(ctx, lower_tensor(ctx, 0), lower_tensor(ctx, 1), lead, t->sizes, plane, in_plane, true);
  for (int32_t i = 0; i < lead; ++i) dims[i] = t->sizes[i];
  for (int32_t i = 0; i < ns; ++i) dims[lead + i] = out[i];
  lower_set_result(ctx, 0, ir_reshape(ctx->func, r, t->rank, dims));
  return NULL;
}

/* adaptive_max_pool{2,3}d(self, output_size) -> (out, indices): windows of
** varying size [floor(o In / Out), ceil((o + 1) In / Out)) per spatial dim.
** Separable passes, last spatial dim first, each reducing (value, flat plane
** index) pairs over every window with one total order: NaN beats numbers
** (the later NaN wins), then the larger value, then the earlier index; the
** composition gives CPU's row-major scan (first maximum, last NaN). */
static TPURT_MUST_USE tpurt_status_t adaptive_max_pool(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  int32_t ns = row->spatial;
  const char* name = row->str;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t out[POOL_MAX_SPATIAL];
  if (lower_ints(ctx, 1, out, POOL_MAX_SPATIAL) != ns)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): internal error: output_size.size() must be %d", name,
                       ns);
  if (t->rank != ns + 1 && t->rank != ns + 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected %dD or %dD tensor, but got: %s", name, ns + 1,
                       ns + 2, lower_shape_str(t->rank, t->sizes));
  int32_t lead = t->rank - ns;
  for (int32_t i = 0; i < t->rank; ++i)
    if (t->sizes[i] == 0 && (t->rank == ns + 1 || i >= 1))
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "%s(): Expected input to have non-zero size for non-batch dimensions, but input has sizes %s "
          "with dimension %d being empty",
          name, lower_shape_str(t->rank, t->sizes), (int)i);
  for (int32_t i = 0; i < ns; ++i)
    if (out[i] < 0)
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "%s(): elements of output_size must be greater than or equal to 0", name);
  ir_func_t* f = ctx->func;
  tpurt_dtype_t dt = t->dtype;
  ir_value_t v = lower_tensor(ctx, 0);
  /* the flat plane index of every element */
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, t->rank, t->sizes);
  ir_value_t idx = ir_constant_i64(f, TPURT_DTYPE_I64, 0);
  idx = ir_broadcast_in_dim(f, idx, t->rank, t->sizes, NULL);
  int64_t stride = 1;
  for (int32_t d = ns - 1; d >= 0; --d) {
    ir_value_t c = ir_iota(f, it, lead + d);
    idx = ir_add(f, idx, ir_mul(f, c, ir_const_like(f, c, (double)stride)));
    stride *= t->sizes[lead + d];
  }
  int64_t cur[TPURT_MAX_RANK];
  memcpy(cur, t->sizes, sizeof(int64_t) * (size_t)t->rank);
  bool is_float = tpurt_dtype_is_float(dt);
  for (int32_t d = ns - 1; d >= 0; --d) {
    int32_t ax = lead + d;
    int64_t in = cur[ax], o_n = out[d];
    ir_value_t vs[64], is[64];
    if (o_n > 64) return lower_error(TPURT_UNIMPLEMENTED, "%s with an output size above 64", name);
    for (int64_t o = 0; o < o_n; ++o) {
      int64_t s0 = (o * in) / o_n, e0 = ((o + 1) * in + o_n - 1) / o_n;
      int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
      for (int32_t i = 0; i < t->rank; ++i) li[i] = cur[i], one[i] = 1;
      st[ax] = s0;
      li[ax] = e0;
      ir_value_t inputs[2] = {ir_slice(f, v, st, li, one), ir_slice(f, idx, st, li, one)};
      ir_value_t inits[2] = {lower_extreme(ctx, dt, false), ir_constant_i64(f, TPURT_DTYPE_I64, INT64_MAX)};
      int64_t rd[1] = {ax};
      ir_value_t res[2], blk[4];
      ir_reduce_begin(f, inputs, inits, 2, rd, 1, res, blk);
      ir_value_t v1 = blk[0], i1 = blk[1], v2 = blk[2], i2 = blk[3];
      ir_value_t take = ir_or(f, ir_compare(f, IR_GT, v2, v1),
                              ir_and(f, ir_compare(f, IR_EQ, v2, v1), ir_compare(f, IR_LT, i2, i1)));
      if (is_float) {
        ir_value_t n1 = ir_compare(f, IR_NE, v1, v1), n2 = ir_compare(f, IR_NE, v2, v2);
        ir_value_t both = ir_and(f, n1, n2);
        ir_value_t nan_take =
            ir_or(f, ir_and(f, n2, ir_not(f, n1)), ir_and(f, both, ir_compare(f, IR_GT, i2, i1)));
        ir_value_t neither = ir_not(f, ir_or(f, n1, n2));
        take = ir_or(f, nan_take, ir_and(f, neither, take));
      }
      ir_value_t body[2] = {ir_select(f, take, v2, v1), ir_select(f, take, i2, i1)};
      ir_region_end(f, body, 2);
      int64_t kd[TPURT_MAX_RANK];
      memcpy(kd, cur, sizeof(kd));
      kd[ax] = 1;
      vs[o] = ir_reshape(f, res[0], t->rank, kd);
      is[o] = ir_reshape(f, res[1], t->rank, kd);
    }
    cur[ax] = o_n;
    if (o_n == 0) {
      v = ir_splat(f, dt, t->rank, cur, 0.0);
      idx = ir_splat(f, TPURT_DTYPE_I64, t->rank, cur, 0.0);
    } else {
      v = ir_concatenate(f, vs, (int32_t)o_n, ax);
      idx = ir_concatenate(f, is, (int32_t)o_n, ax);
    }
  }
  lower_set_result(ctx, 0, v);
  lower_set_result(ctx, 1, idx);
  return NULL;
}

/* fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples) -> (out, indices):
** along each spatial dim, window o starts at int((o + u) * alpha) -
** int(u * alpha) with alpha = (in - pool) / (out - 1) in the input's
** dtype, the last at in - pool, where u is the plane's sample for that dim
** (2d: samples [W, H]; 3d: [T, H, W]). Each window's candidates are read
** by flat gathers and combined in CPU's loop order (a larger value or a
** NaN replaces the running max), which fixes the index of ties. */
static TPURT_MUST_USE tpurt_status_t fractional_max_pool(lower_ctx_t* ctx) {
  const int32_t k = lower_rule_data(ctx)->spatial;
  const char* name = lower_rule_str(ctx);
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* u = lower_meta(ctx, 3);
  int64_t pool[3], outs[3];
  if (lower_ints(ctx, 1, pool, 3) != k || lower_ints(ctx, 2, outs, 3) != k)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s: kernel_size and output_size must have %d elements", name,
                       (int)k);
  if (t->rank != k + 1 && t->rank != k + 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s(): Expected %dD or %dD tensor, but got: %s", name,
                       (int)k + 1, (int)k + 2, lower_shape_str(t->rank, t->sizes));
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'", name,
                       tpurt_dtype_name(t->dtype));
  const int32_t lead = t->rank - k;
  int64_t planes = 1, plane = 1, in[3];
  for (int32_t d = 0; d < lead; ++d) planes *= t->sizes[d];
  static const char* const dim_names[3] = {"time", "height", "width"};
  for (int32_t d = 0; d < k; ++d) {
    in[d] = t->sizes[lead + d];
    plane *= in[d];
    const char* dn = dim_names[3 - k + d];
    if (outs[d] + pool[d] - 1 > in[d])
      return lower_error(TPURT_INVALID_ARGUMENT, "%s_out(): pool %s %lld too large relative to input %s %lld",
                         name, dn, (long long)pool[d], dn, (long long)in[d]);
  }
  if (!u || u->rank != 3 || u->sizes[2] != k || u->sizes[0] * u->sizes[1] != planes)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s: random_samples must be [N, C, %d]", name, (int)k);
  ir_func_t* f = ctx->func;
  const tpurt_dtype_t dt = t->dtype;
  int64_t grid[4] = {planes}, num_out = planes;
  for (int32_t d = 0; d < k; ++d) grid[1 + d] = outs[d], num_out *= outs[d];
  int64_t res_dims[TPURT_MAX_RANK];
  for (int32_t d = 0; d < lead; ++d) res_dims[d] = t->sizes[d];
  for (int32_t d = 0; d < k; ++d) res_dims[lead + d] = outs[d];
  if (num_out == 0 || plane == 0) {
    lower_set_result(ctx, 0, ir_splat(f, dt, t->rank, res_dims, 0.0));
    lower_set_result(ctx, 1, ir_splat(f, TPURT_DTYPE_I64, t->rank, res_dims, 0.0));
    return NULL;
  }
  int64_t udims[2] = {planes, k};
  ir_value_t samples = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 3), dt), 2, udims);
  /* the start of each window along each dim, as i64 [planes, out_1..out_k] */
  ir_value_t start[3];
  for (int32_t d = 0; d < k; ++d) {
    int32_t which = k == 2 ? 1 - d : d; /* the sample column of this dim */
    int64_t lo[2] = {0, which}, hi[2] = {planes, which + 1}, one[2] = {1, 1};
    ir_value_t ud = ir_reshape(f, ir_slice(f, samples, lo, hi, one), 1, &planes);
    int64_t od[2] = {planes, outs[d]}, keep0 = 0;
    ir_value_t uo = ir_broadcast_in_dim(f, ud, 2, od, &keep0);
    ir_value_t i = ir_iota(f, ir_type_make(dt, 2, od), 1);
    ir_value_t alpha = outs[d] > 1 ? ir_div(f, ir_const_like(f, uo, (double)(in[d] - pool[d])),
                                            ir_const_like(f, uo, (double)(outs[d] - 1)))
                                   : ir_const_like(f, uo, 0.0);
    ir_value_t a = ir_convert(f, ir_mul(f, ir_add(f, i, uo), alpha), TPURT_DTYPE_I64);
    ir_value_t b = ir_convert(f, ir_mul(f, uo, alpha), TPURT_DTYPE_I64);
    ir_value_t st = ir_sub(f, a, b);
    ir_value_t last = ir_compare(f, IR_EQ, ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 2, od), 1),
                                 ir_const_like(f, st, (double)(outs[d] - 1)));
    st = ir_select(f, last, ir_const_like(f, st, (double)(in[d] - pool[d])), st);
    int64_t keep[2] = {0, 1 + d};
    start[d] = ir_broadcast_in_dim(f, st, k + 1, grid, keep);
  }
  int64_t strides[3];
  strides[k - 1] = 1;
  for (int32_t d = k - 2; d >= 0; --d) strides[d] = strides[d + 1] * in[d + 1];
  int64_t flat_n = planes * plane;
  ir_value_t x = ir_reshape(f, lower_tensor(ctx, 0), 1, &flat_n);
  ir_value_t base = ir_mul(f, ir_iota(f, ir_type_make(TPURT_DTYPE_I64, k + 1, grid), 0),
                           ir_splat(f, TPURT_DTYPE_I64, k + 1, grid, (double)plane));
  int64_t total = 1;
  for (int32_t d = 0; d < k; ++d) total *= pool[d];
  ir_value_t best = IR_NONE, best_idx = IR_NONE;
  for (int64_t c = 0; c < total; ++c) {
    int64_t rem = c, off[3];
    for (int32_t d = k - 1; d >= 0; --d) off[d] = rem % pool[d], rem /= pool[d];
    ir_value_t idx = ir_splat(f, TPURT_DTYPE_I64, k + 1, grid, 0.0);
    for (int32_t d = 0; d < k; ++d) {
      ir_value_t pos = ir_add(f, start[d], ir_const_like(f, start[d], (double)off[d]));
      idx = ir_add(f, idx, ir_mul(f, pos, ir_const_like(f, pos, (double)strides[d])));
    }
    ir_value_t v = ir_reshape(
        f, lower_gather_along(ctx, x, 0, ir_reshape(f, ir_add(f, base, idx), 1, &num_out)), k + 1, grid);
    if (c == 0) {
      best = v, best_idx = idx;
      continue;
    }
    ir_value_t take = ir_or(f, ir_compare(f, IR_GT, v, best), ir_compare(f, IR_NE, v, v));
    best = ir_select(f, take, v, best);
    best_idx = ir_select(f, take, idx, best_idx);
  }
  lower_set_result(ctx, 0, ir_reshape(f, best, t->rank, res_dims));
  lower_set_result(ctx, 1, ir_reshape(f, best_idx, t->rank, res_dims));
  return NULL;
}

const lower_rule_t lower_pooling_rules[] = {
    LOWER_FN_WITH("aten::fractional_max_pool2d", fractional_max_pool, .spatial = 2,
                  .str = "fractional_max_pool2d"),
    LOWER_OUT_FN_WITH("aten::fractional_max_pool2d.output", fractional_max_pool, .spatial = 2,
                      .str = "fractional_max_pool2d"),
    LOWER_FN_WITH("aten::fractional_max_pool3d", fractional_max_pool, .spatial = 3,
                  .str = "fractional_max_pool3d"),
    LOWER_OUT_FN_WITH("aten::fractional_max_pool3d.output", fractional_max_pool, .spatial = 3,
                      .str = "fractional_max_pool3d"),
    LOWER_FN_WITH("aten::adaptive_max_pool2d", adaptive_max_pool, .spatial = 2, .str = "adaptive_max_pool2d"),
    LOWER_OUT_FN_WITH("aten::adaptive_max_pool2d.out", adaptive_max_pool, .spatial = 2,
                      .str = "adaptive_max_pool2d"),
    LOWER_FN_WITH("aten::adaptive_max_pool3d", adaptive_max_pool, .spatial = 3, .str = "adaptive_max_pool3d"),
    LOWER_OUT_FN_WITH("aten::adaptive_max_pool3d.out", adaptive_max_pool, .spatial = 3,
                      .str = "adaptive_max_pool3d"),
    LOWER_FN_WITH("aten::max_unpool2d", max_unpool, .spatial = 2, .str = "max_unpool2d"),
    LOWER_OUT_FN_WITH("aten::max_unpool2d.out", max_unpool, .spatial = 2, .str = "max_unpool2d"),
    LOWER_FN_WITH("aten::max_unpool3d", max_unpool, .spatial = 3, .str = "max_unpool3d"),
    LOWER_OUT_FN_WITH("aten::max_unpool3d.out", max_unpool, .spatial = 3, .str = "max_unpool3d"),
    LOWER_FN_WITH("aten::_adaptive_avg_pool2d", adaptive_avg, .spatial = 2),
    LOWER_OUT_FN_WITH("aten::_adaptive_avg_pool2d.out", adaptive_avg, .spatial = 2),
    LOWER_FN_WITH("aten::_adaptive_avg_pool2d_backward", adaptive_avg, .spatial = 2, .flag = true),
    LOWER_OUT_FN_WITH("aten::_adaptive_avg_pool2d_backward.out", adaptive_avg, .spatial = 2, .flag = true),
    LOWER_FN_WITH("aten::_adaptive_avg_pool3d", adaptive_avg, .spatial = 3),
    LOWER_OUT_FN_WITH("aten::_adaptive_avg_pool3d.out", adaptive_avg, .spatial = 3),
    LOWER_FN_WITH("aten::_adaptive_avg_pool3d_backward", adaptive_avg, .spatial = 3, .flag = true),
    LOWER_OUT_FN_WITH("aten::_adaptive_avg_pool3d_backward.out", adaptive_avg, .spatial = 3, .flag = true),
    LOWER_OUT_FN_WITH("aten::adaptive_avg_pool3d.out", adaptive_avg, .spatial = 3),
    LOWER_OUT_FN_WITH("aten::adaptive_avg_pool3d_backward.grad_input", adaptive_avg, .spatial = 3,
                      .flag = true),
    LOWER_FN_WITH("aten::avg_pool2d", avg_pool, .str = "avg_pool2d", .spatial = 2),
    LOWER_OUT_FN_WITH("aten::avg_pool2d.out", avg_pool, .str = "avg_pool2d", .spatial = 2),
    LOWER_FN_WITH("aten::avg_pool2d_backward", avg_pool_backward, .str = "avg_pool2d", .spatial = 2),
    LOWER_OUT_FN_WITH("aten::avg_pool2d_backward.grad_input", avg_pool_backward, .str = "avg_pool2d",
                      .spatial = 2),
    LOWER_FN_WITH("aten::avg_pool3d", avg_pool, .str = "avg_pool3d", .spatial = 3),
    LOWER_OUT_FN_WITH("aten::avg_pool3d.out", avg_pool, .str = "avg_pool3d", .spatial = 3),
    LOWER_FN_WITH("aten::avg_pool3d_backward", avg_pool_backward, .str = "avg_pool3d", .spatial = 3),
    LOWER_OUT_FN_WITH("aten::avg_pool3d_backward.grad_input", avg_pool_backward, .str = "avg_pool3d",
                      .spatial = 3),
    LOWER_FN_WITH("aten::max_pool2d_with_indices", max_pool_with_indices, .str = "max_pool2d", .spatial = 2),
    LOWER_OUT_FN_WITH("aten::max_pool2d_with_indices.out", max_pool_with_indices, .str = "max_pool2d",
                      .spatial = 2),
    LOWER_FN_WITH("aten::max_pool2d_with_indices_backward", max_pool_backward, .str = "max_pool2d",
                  .spatial = 2),
    LOWER_OUT_FN_WITH("aten::max_pool2d_with_indices_backward.grad_input", max_pool_backward,
                      .str = "max_pool2d", .spatial = 2),
    LOWER_FN_WITH("aten::max_pool3d_with_indices", max_pool_with_indices, .str = "max_pool3d", .spatial = 3),
    LOWER_OUT_FN_WITH("aten::max_pool3d_with_indices.out", max_pool_with_indices, .str = "max_pool3d",
                      .spatial = 3),
    LOWER_FN_WITH("aten::max_pool3d_with_indices_backward", max_pool_backward, .str = "max_pool3d",
                  .spatial = 3),
    LOWER_OUT_FN_WITH("aten::max_pool3d_with_indices_backward.grad_input", max_pool_backward,
                      .str = "max_pool3d", .spatial = 3),
    LOWER_END,
};
