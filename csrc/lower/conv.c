/* conv.c: convolution, forward and backward, 1-D to 3-D, through one
** stablehlo.convolution each: stride, padding, dilation, groups, bias,
** transposed (a convolution over the stride-dilated input with the
** spatially reversed kernel). Half types accumulate in f32 (the
** convolution's result type) and round once.
**
** Layouts are PyTorch's: input [N, C, *S], weight [O, C/g, *K]; a
** transposed convolution's weight is [C, O/g, *K]. */
#include <stdio.h>

#include "../base/base.h"
#include "lower.h"

#define CONV_MAX_SPATIAL (TPURT_MAX_RANK - 2)

/* The parameters of one convolution, as PyTorch's ConvParams holds them. */
typedef struct conv_params_s {
  int32_t ns; /* spatial dims */
  int64_t stride[CONV_MAX_SPATIAL], padding[CONV_MAX_SPATIAL], dilation[CONV_MAX_SPATIAL];
  int64_t output_padding[CONV_MAX_SPATIAL];
  bool transposed;
  int64_t groups;
} conv_params_t;

/* expand_param_if_needed: one value for every dim, or one per dim. */
static TPURT_MUST_USE tpurt_status_t expand_param(const lower_ctx_t* ctx, int32_t arg, const char* name,
                                                  int32_t ns, int64_t* out) {
  int64_t given[TPURT_MAX_RANK];
  int32_t n = lower_ints(ctx, arg, given, TPURT_MAX_RANK);
  if (n == 1) {
    for (int32_t i = 0; i < ns; ++i) out[i] = given[0];
    return NULL;
  }
  if (n != ns)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "expected %s to be a single integer value or a list of %d values to match the convolution "
        "dimensions, but got %s=%s",
        name, (int)ns, name, lower_shape_str(n < TPURT_MAX_RANK ? n : TPURT_MAX_RANK, given));
  for (int32_t i = 0; i < ns; ++i) out[i] = given[i];
  return NULL;
}

/* Reads stride..groups starting at schema arg |first| (stride, padding,
** dilation, transposed, output_padding, groups), for |ns| spatial dims. */
static TPURT_MUST_USE tpurt_status_t read_params(const lower_ctx_t* ctx, int32_t first, int32_t ns,
                                                 conv_params_t* p) {
  memset(p, 0, sizeof(*p));
  p->ns = ns;
  p->transposed = lower_bool(ctx, first + 3, false);
  p->groups = lower_int(ctx, first + 5, 1);
  if (p->groups <= 0) return lower_error(TPURT_INVALID_ARGUMENT, "non-positive groups is not supported");
  TPURT_RETURN_IF_ERROR(expand_param(ctx, first, "stride", ns, p->stride));
  TPURT_RETURN_IF_ERROR(expand_param(ctx, first + 1, "padding", ns, p->padding));
  TPURT_RETURN_IF_ERROR(expand_param(ctx, first + 2, "dilation", ns, p->dilation));
  TPURT_RETURN_IF_ERROR(expand_param(ctx, first + 4, "output_padding", ns, p->output_padding));
  for (int32_t i = 0; i < ns; ++i)
    if (p->padding[i] < 0) return lower_error(TPURT_INVALID_ARGUMENT, "negative padding is not supported");
  for (int32_t i = 0; i < ns; ++i)
    if (p->output_padding[i] < 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "negative output_padding is not supported");
  for (int32_t i = 0; i < ns; ++i)
    if (p->stride[i] <= 0) return lower_error(TPURT_INVALID_ARGUMENT, "non-positive stride is not supported");
  for (int32_t i = 0; i < ns; ++i)
    if (p->dilation[i] <= 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "dilation should be greater than zero, but got %s",
                         lower_shape_str(ns, p->dilation));
  return NULL;
}

/* The checks of PyTorch's _convolution / check_shape_forward, in its order
** and wording. */
static TPURT_MUST_USE tpurt_status_t check_forward(const tpurt_tensor_t* in, const tpurt_tensor_t* w,
                                                   const tpurt_tensor_t* b, const conv_params_t* p) {
  int64_t g = p->groups;
  char wsz[256];
  snprintf(wsz, sizeof(wsz), "%s", lower_shape_str(w->rank, w->sizes));
  if (w->rank != in->rank)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Expected %d-dimensional input for %d-dimensional weight %s, but got %d-dimensional input "
        "of size %s instead",
        (int)w->rank, (int)w->rank, wsz, (int)in->rank, lower_shape_str(in->rank, in->sizes));
  if (w->sizes[0] < g)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Given groups=%lld, expected weight to be at least %lld at dimension 0, but got weight of "
        "size %s instead",
        (long long)g, (long long)g, wsz);
  if (w->sizes[0] % g != 0)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Given groups=%lld, expected weight to be divisible by %lld at dimension 0, but got weight "
        "of size [%s] instead",
        (long long)g, (long long)g, wsz);
  if (!p->transposed) {
    if (in->sizes[1] != w->sizes[1] * g)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Given groups=%lld, weight of size %s, expected input%s to have %lld channels, but got "
          "%lld channels instead",
          (long long)g, wsz, lower_shape_str(in->rank, in->sizes), (long long)(w->sizes[1] * g),
          (long long)in->sizes[1]);
    if (b && !(b->rank == 1 && b->sizes[0] == w->sizes[0]))
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Given weight of size %s, expected bias to be 1-dimensional with %lld elements, but got "
          "bias of size %s instead",
          wsz, (long long)w->sizes[0], lower_shape_str(b->rank, b->sizes));
    bool fits = true;
    int64_t padded[CONV_MAX_SPATIAL], window[CONV_MAX_SPATIAL];
    for (int32_t i = 0; i < p->ns; ++i) {
      padded[i] = in->sizes[2 + i] + 2 * p->padding[i];
      window[i] = p->dilation[i] * (w->sizes[2 + i] - 1) + 1;
      if (padded[i] < window[i]) fits = false;
    }
    if (!fits) {
      char a[256] = "", k[256] = "";
      size_t na = 0, nk = 0;
      for (int32_t i = 0; i < p->ns; ++i) {
        na += (size_t)snprintf(a + na, sizeof(a) - na, "%s%lld", i ? " x " : "", (long long)padded[i]);
        nk += (size_t)snprintf(k + nk, sizeof(k) - nk, "%s%lld", i ? " x " : "", (long long)window[i]);
      }
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Calculated padded input size per channel: (%s). Kernel size: (%s). Kernel size can't "
          "be greater than actual input size",
          a, k);
    }
  } else {
    if (in->sizes[1] != w->sizes[0])
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "Given transposed=1, weight of size %s, expected input%s to have %lld channels, but got "
          "%lld channels instead",
          wsz, lower_shape_str(in->rank, in->sizes), (long long)w->sizes[0], (long long)in->sizes[1]);
    if (b && !(b->rank == 1 && b->sizes[0] == w->sizes[1] * g))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "Given transposed=1, weight of size %s, expected bias to be 1-dimensional with %lld "
                         "elements, but got bias of size %s instead",
                         wsz, (long long)(w->sizes[1] * g), lower_shape_str(b->rank, b->sizes));
    bool bad = false;
    for (int32_t i = 0; i < p->ns; ++i)
      if (p->output_padding[i] >= p->stride[i] && p->output_padding[i] >= p->dilation[i]) bad = true;
    if (bad && p->ns >= 1 && p->ns <= 3) {
      /* PyTorch's transposed kernels word it per dim (1-D runs as 2-D). */
      static const char* const kNames[3] = {"depth", "height", "width"};
      int64_t op[3] = {0, 0, 0}, st[3] = {1, 1, 1}, di[3] = {1, 1, 1};
      int32_t shown = p->ns == 3 ? 3 : 2, off = 3 - shown;
      for (int32_t i = 0; i < p->ns; ++i) {
        int32_t at = 3 - p->ns + i;
        op[at] = p->output_padding[i], st[at] = p->stride[i], di[at] = p->dilation[i];
      }
      char msg[512];
      size_t n = (size_t)snprintf(msg, sizeof(msg),
                                  "output padding must be smaller than either stride or dilation, but got");
      const int64_t* vals[3] = {op, st, di};
      static const char* const kWhat[3] = {"output_padding", "stride", "dilation"};
      for (int32_t v = 0; v < 3; ++v)
        for (int32_t i = off; i < 3; ++i)
          n += (size_t)snprintf(msg + n, sizeof(msg) - n, " %s_%s: %lld", kWhat[v], kNames[i],
                                (long long)vals[v][i]);
      return lower_error(TPURT_INVALID_ARGUMENT, "%s", msg);
    }
  }
  return NULL;
}

/*===--- the three convolutions ---===*/

/* NC(spatial) dims for lhs and result. */
static ir_conv_dims_t base_dims(int32_t ns) {
  ir_conv_dims_t d;
  memset(&d, 0, sizeof(d));
  d.num_spatial = ns;
  d.input_batch = d.output_batch = 0;
  d.input_feature = d.output_feature = 1;
  d.kernel_output_feature = 0;
  d.kernel_input_feature = 1;
  for (int32_t i = 0; i < ns; ++i) {
    d.input_spatial[i] = d.kernel_spatial[i] = d.output_spatial[i] = 2 + i;
    d.window_strides[i] = d.lhs_dilation[i] = d.rhs_dilation[i] = 1;
  }
  d.feature_group_count = d.batch_group_count = 1;
  return d;
}

/* x [N, C, *S] (*) w [O, C/g, *K], PyTorch's forward convolution with
** symmetric |padding|; result in |acc|. */
static ir_value_t conv_plain(lower_ctx_t* ctx, ir_value_t x, ir_value_t w, const conv_params_t* p,
                             tpurt_dtype_t acc) {
  ir_conv_dims_t d = base_dims(p->ns);
  for (int32_t i = 0; i < p->ns; ++i) {
    d.window_strides[i] = p->stride[i];
    d.padding_low[i] = d.padding_high[i] = p->padding[i];
    d.rhs_dilation[i] = p->dilation[i];
  }
  d.feature_group_count = p->groups;
  return ir_convolution(ctx->func, x, w, &d, acc);
}

/* The transposed convolution of x [N, Ci, *S] with w [Ci, Co/g, *K] whose
** result has spatial sizes |out| (the gradient of conv_plain w.r.t. its
** input, or PyTorch's conv_transpose): a convolution over x dilated by the
** stride, with the reversed kernel regrouped to [Co, Ci/g, *K]. */
static ir_value_t conv_transposed(lower_ctx_t* ctx, ir_value_t x, ir_value_t w, const conv_params_t* p,
                                  const int64_t* out, tpurt_dtype_t acc) {
  ir_func_t* f = ctx->func;
  const ir_type_t* tx = ir_value_type(f, x);
  const ir_type_t* tw = ir_value_type(f, w);
  if (!tx || !tw) return IR_NONE;
  int32_t ns = p->ns, rank = ns + 2;
  int64_t g = p->groups;
  int64_t spatial[CONV_MAX_SPATIAL];
  for (int32_t i = 0; i < ns; ++i) spatial[i] = 2 + i;
  ir_value_t k = ir_reverse(f, w, spatial, ns);
  ir_conv_dims_t d = base_dims(ns);
  if (g == 1) {
    d.kernel_input_feature = 0;
    d.kernel_output_feature = 1;
  } else { /* [g, Ci/g, Co/g, *K] -> [g, Co/g, Ci/g, *K] -> [Co, Ci/g, *K] */
    int64_t split[TPURT_MAX_RANK], perm[TPURT_MAX_RANK], merged[TPURT_MAX_RANK];
    split[0] = g;
    split[1] = tw->dims[0] / g;
    split[2] = tw->dims[1];
    perm[0] = 0, perm[1] = 2, perm[2] = 1;
    merged[0] = tw->dims[1] * g;
    merged[1] = tw->dims[0] / g;
    for (int32_t i = 0; i < ns; ++i) {
      split[3 + i] = tw->dims[2 + i];
      perm[3 + i] = 3 + i;
      merged[2 + i] = tw->dims[2 + i];
    }
    k = ir_reshape(f, ir_transpose(f, ir_reshape(f, k, rank + 1, split), perm), rank, merged);
  }
  for (int32_t i = 0; i < ns; ++i) {
    int64_t reach = p->dilation[i] * (tw->dims[2 + i] - 1);
    d.lhs_dilation[i] = p->stride[i];
    d.rhs_dilation[i] = p->dilation[i];
    d.padding_low[i] = reach - p->padding[i];
    d.padding_high[i] = out[i] - (tx->dims[2 + i] - 1) * p->stride[i] - 1 + p->padding[i];
  }
  d.feature_group_count = g;
  return ir_convolution(f, x, k, &d, acc);
}

/* The gradient of conv_plain(x, w) w.r.t. w [O, C/g, *K], given x
** [N, C, *S] and the output gradient dy [N, O, *S']: a convolution that
** contracts the batch, x's channels as its batch (split in g groups),
** dy as the kernel dilated by the stride, striding by the dilation. */
static ir_value_t conv_weight_grad(lower_ctx_t* ctx, ir_value_t x, ir_value_t dy, const conv_params_t* p,
                                   const int64_t* ksize, tpurt_dtype_t acc) {
  ir_func_t* f = ctx->func;
  const ir_type_t* tx = ir_value_type(f, x);
  const ir_type_t* ty = ir_value_type(f, dy);
  if (!tx || !ty) return IR_NONE;
  ir_conv_dims_t d = base_dims(p->ns);
  d.input_batch = 1;
  d.input_feature = 0;
  d.kernel_input_feature = 0;
  d.kernel_output_feature = 1;
  d.output_feature = 0; /* result [O, C/g, *K] */
  d.output_batch = 1;
  for (int32_t i = 0; i < p->ns; ++i) {
    d.window_strides[i] = p->dilation[i];
    d.rhs_dilation[i] = p->stride[i];
    d.padding_low[i] = p->padding[i];
    d.padding_high[i] = (ksize[i] - 1) * p->dilation[i] + (ty->dims[2 + i] - 1) * p->stride[i] + 1 -
                        tx->dims[2 + i] - p->padding[i];
  }
  d.batch_group_count = p->groups;
  return ir_convolution(f, x, dy, &d, acc);
}

/* Sum over every dim but 1, in |acc|. */
static ir_value_t bias_grad(lower_ctx_t* ctx, ir_value_t dy, tpurt_dtype_t acc) {
  const ir_type_t* t = ir_value_type(ctx->func, dy);
  if (!t) return IR_NONE;
  int64_t dims[TPURT_MAX_RANK];
  int32_t n = 0;
  for (int32_t i = 0; i < t->rank; ++i)
    if (i != 1) dims[n++] = i;
  return ir_reduce(ctx->func, lower_cast(ctx, dy, acc), ir_constant_f64(ctx->func, acc, 0.0), dims, n,
                   IR_REDUCE_ADD);
}

/*===--- rules ---===*/

static bool conv_dtype_ok(tpurt_dtype_t d) {
  return d == TPURT_DTYPE_F32 || d == TPURT_DTYPE_BF16 || d == TPURT_DTYPE_F16 || d == TPURT_DTYPE_F64;
}

/* convolution(input, weight, bias?, stride, padding, dilation, transposed,
**             output_padding, groups) (and convolution_overrideable) */
static TPURT_MUST_USE tpurt_status_t lower_convolution(lower_ctx_t* ctx) {
  const tpurt_tensor_t* in = lower_meta(ctx, 0);
  const tpurt_tensor_t* w = lower_meta(ctx, 1);
  const tpurt_tensor_t* b = lower_meta(ctx, 2);
  if (b && b->dtype != in->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "Input type (%s) and bias type (%s) should be the same",
                       lower_dtype_cpp_name(in->dtype), lower_dtype_cpp_name(b->dtype));
  if (w->rank < 3) return lower_error(TPURT_INVALID_ARGUMENT, "weight should have at least three dimensions");
  if (w->rank > 5) return lower_error(TPURT_UNIMPLEMENTED, "convolution over more than 3 spatial dims");
  conv_params_t p;
  TPURT_RETURN_IF_ERROR(read_params(ctx, 3, w->rank - 2, &p));
  TPURT_RETURN_IF_ERROR(check_forward(in, w, b, &p));
  if (w->dtype != in->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT, "expected scalar type %s but found %s",
                       tpurt_dtype_name(in->dtype), tpurt_dtype_name(w->dtype));
  if (!conv_dtype_ok(in->dtype)) return lower_error(TPURT_UNIMPLEMENTED, "integer convolution");
  tpurt_dtype_t acc = lower_acc_dtype(in->dtype);
  ir_value_t x = lower_tensor(ctx, 0), k = lower_tensor(ctx, 1), y;
  if (!p.transposed) {
    y = conv_plain(ctx, x, k, &p, acc);
  } else {
    int64_t out[CONV_MAX_SPATIAL];
    for (int32_t i = 0; i < p.ns; ++i)
      out[i] = (in->sizes[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] +
               p.dilation[i] * (w->sizes[2 + i] - 1) + p.output_padding[i] + 1;
    y = conv_transposed(ctx, x, k, &p, out, acc);
  }
  if (b) {
    const ir_type_t* ty = ir_value_type(ctx->func, y);
    int64_t one = 1;
    if (ty)
      y = ir_add(ctx->func, y,
                 ir_broadcast_in_dim(ctx->func, lower_cast(ctx, lower_tensor(ctx, 2), acc), ty->rank,
                                     ty->dims, &one));
  }
  y = lower_cast(ctx, y, in->dtype);
  /* PyTorch's CPU convolution returns channels_last when the input or the
  ** weight is in that layout, else contiguous. */
  if (lower_is_channels_last(in) || lower_is_channels_last(w)) {
    lower_set_result_channels_last(ctx, 0, y, in->rank);
  } else {
    lower_set_result(ctx, 0, y);
  }
  return NULL;
}

/* convolution_backward(grad_output, input, weight, bias_sizes?, stride,
** padding, dilation, transposed, output_padding, groups, output_mask);
** the _overrideable form has no bias_sizes (|first| is where stride is). */
static TPURT_MUST_USE tpurt_status_t conv_backward(lower_ctx_t* ctx) {
  int32_t first = lower_rule_data(ctx)->arg; /* the schema position of stride */
  const tpurt_tensor_t* dyt = lower_meta(ctx, 0);
  const tpurt_tensor_t* in = lower_meta(ctx, 1);
  const tpurt_tensor_t* w = lower_meta(ctx, 2);
  if (w->rank < 3) return lower_error(TPURT_INVALID_ARGUMENT, "weight should have at least three dimensions");
  if (w->rank > 5) return lower_error(TPURT_UNIMPLEMENTED, "convolution over more than 3 spatial dims");
  conv_params_t p;
  TPURT_RETURN_IF_ERROR(read_params(ctx, first, w->rank - 2, &p));
  TPURT_RETURN_IF_ERROR(check_forward(in, w, NULL, &p));
  /* The weight may be of another float dtype: diffusers' layerwise casting
  ** stores it as float8 again after the forward, so the tensor autograd saved
  ** has changed dtype by the backward. As PyTorch on the CPU, it is read in the
  ** input's dtype, and every gradient comes back in the input's dtype. */
  if (!conv_dtype_ok(in->dtype) || !tpurt_dtype_is_float(w->dtype) || dyt->dtype != in->dtype ||
      dyt->rank != in->rank)
    return lower_error(TPURT_UNIMPLEMENTED, "convolution_backward over these dtypes/ranks");
  int32_t mask_arg = first + 6;
  tpurt_dtype_t acc = lower_acc_dtype(in->dtype);
  ir_value_t dy = lower_tensor(ctx, 0), x = lower_tensor(ctx, 1);
  ir_value_t k = lower_cast(ctx, lower_tensor(ctx, 2), in->dtype);
  int64_t in_sizes[CONV_MAX_SPATIAL], k_sizes[CONV_MAX_SPATIAL];
  for (int32_t i = 0; i < p.ns; ++i) in_sizes[i] = in->sizes[2 + i], k_sizes[i] = w->sizes[2 + i];
  /* grad_input */
  if (lower_bool_list_item(ctx, mask_arg, 0, true)) {
    ir_value_t gi;
    if (!p.transposed) {
      gi = conv_transposed(ctx, dy, k, &p, in_sizes, acc);
    } else {
      gi = conv_plain(ctx, dy, k, &p, acc);
    }
    lower_set_result(ctx, 0, lower_cast(ctx, gi, in->dtype));
  } else {
    lower_set_undefined(ctx, 0);
  }
  /* grad_weight */
  if (lower_bool_list_item(ctx, mask_arg, 1, true)) {
    ir_value_t gw;
    if (!p.transposed)
      gw = conv_weight_grad(ctx, x, dy, &p, k_sizes, acc);
    else /* the roles of input and output gradient swap */
      gw = conv_weight_grad(ctx, dy, x, &p, k_sizes, acc);
    lower_set_result(ctx, 1, lower_cast(ctx, gw, in->dtype));
  } else {
    lower_set_undefined(ctx, 1);
  }
  /* grad_bias */
  if (lower_bool_list_item(ctx, mask_arg, 2, true))
    lower_set_result(ctx, 2, lower_cast(ctx, bias_grad(ctx, dy, acc), dyt->dtype));
  else
    lower_set_undefined(ctx, 2);
  return NULL;
}

/* im2col(self [N, C, H, W] | [C, H, W], kernel_size, dilation, padding,
** stride) -> [N, C * kh * kw, L]: for each kernel offset (i, j), a strided
** slice of the zero-padded input (exact: no products, so inf and NaN stay
** where they are), stacked after the channel dim. */
static TPURT_MUST_USE tpurt_status_t lower_im2col(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t k[2], dil[2], pad[2], st[2];
  const char* what[4] = {"kernel_size", "dilation", "padding", "stride"};
  int64_t* dst[4] = {k, dil, pad, st};
  for (int32_t a = 0; a < 4; ++a)
    if (lower_ints(ctx, 1 + a, dst[a], 2) != 2)
      return lower_error(TPURT_INVALID_ARGUMENT, "im2col(): It is expected %s equals to 2, but got size %d",
                         what[a], (int)lower_ints(ctx, 1 + a, dst[a], 2));
  if (t->rank != 3 && t->rank != 4)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other non-zero "
                       "dimensions for input, but got: %s",
                       lower_shape_str(t->rank, t->sizes));
  for (int32_t i = 0; i < 2; ++i)
    if (k[i] <= 0 || dil[i] <= 0 || st[i] <= 0 || pad[i] < 0)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "im2col(): kernel size, dilation and stride should be greater than zero, padding non-negative");
  int64_t n = t->rank == 4 ? t->sizes[0] : 1, c = t->sizes[t->rank - 3];
  int64_t h = t->sizes[t->rank - 2], w = t->sizes[t->rank - 1];
  int64_t oh = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) / st[0] + 1;
  int64_t ow = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) / st[1] + 1;
  if (oh < 1 || ow < 1)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Given input with spatial size (%lld, %lld), kernel_size=(%lld, %lld), dilation=(%lld, %lld), "
        "padding=(%lld, %lld), calculated shape of the array of sliding blocks as (%lld, %lld), but "
        "its components must be at least one.",
        (long long)h, (long long)w, (long long)k[0], (long long)k[1], (long long)dil[0], (long long)dil[1],
        (long long)pad[0], (long long)pad[1], (long long)oh, (long long)ow);
  ir_func_t* f = ctx->func;
  int64_t xd[4] = {n, c, h, w};
  ir_value_t x = ir_reshape(f, lower_tensor(ctx, 0), 4, xd);
  int64_t lo[4] = {0, 0, pad[0], pad[1]}, in[4] = {0, 0, 0, 0};
  ir_value_t zero =
      tpurt_dtype_is_float(t->dtype) ? ir_constant_f64(f, t->dtype, 0.0) : ir_constant_i64(f, t->dtype, 0);
  x = ir_pad(f, x, zero, lo, lo, in);
  int64_t kk = k[0] * k[1];
  ir_value_t* cols = tpurt_xmalloc(sizeof(ir_value_t) * (size_t)kk);
  int64_t one5[5] = {n, c, 1, oh, ow};
  for (int64_t i = 0; i < k[0]; ++i) {
    for (int64_t j = 0; j < k[1]; ++j) {
      int64_t s0[4] = {0, 0, i * dil[0], j * dil[1]};
      int64_t l0[4] = {n, c, s0[2] + (oh - 1) * st[0] + 1, s0[3] + (ow - 1) * st[1] + 1};
      int64_t step[4] = {1, 1, st[0], st[1]};
      cols[i * k[1] + j] = ir_reshape(f, ir_slice(f, x, s0, l0, step), 5, one5);
    }
  }
  ir_value_t stacked = ir_concatenate(f, cols, (int32_t)kk, 2);
  free(cols);
  int64_t od[3] = {n, c * kk, oh * ow};
  ir_value_t r = ir_reshape(f, stacked, 3, od);
  if (t->rank == 3) r = ir_reshape(f, r, 2, od + 1);
  lower_set_result(ctx, 0, r);
  return NULL;
}

const lower_rule_t lower_conv_rules[] = {
    LOWER_FN("aten::im2col", lower_im2col),
    LOWER_OUT_FN("aten::im2col.out", lower_im2col),
    LOWER_FN("aten::convolution", lower_convolution),
    LOWER_FN_WITH("aten::convolution_backward", conv_backward, .arg = 4),
    LOWER_FN_WITH("aten::convolution_backward_overrideable", conv_backward, .arg = 3),
    LOWER_FN("aten::convolution_overrideable", lower_convolution),
    LOWER_END,
};
