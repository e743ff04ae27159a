/* shape.c: ops that move data between shapes: cat, clone, flip, roll,
** tril/triu, unfold's gradient. View ops never come here: they stay PyTorch's own metadata
** kernels, and the engine reads strided views inside programs. */
#include "../base/base.h"
#include "lower.h"

/* cat(Tensor[] tensors, int dim=0) with type promotion; 1-D empty tensors
** are skipped, as PyTorch does for legacy reasons. */
static TPURT_MUST_USE tpurt_status_t lower_cat(lower_ctx_t* ctx) {
  int32_t n = lower_list_len(ctx, 0);
  if (n == 0) return lower_error(TPURT_INVALID_ARGUMENT, "torch.cat(): expected a non-empty list of Tensors");
  tpurt_dtype_t dt = TPURT_DTYPE_INVALID;
  const tpurt_tensor_t* ref = NULL;
  for (int32_t k = 0; k < n; ++k) {
    const tpurt_tensor_t* t = lower_list_meta(ctx, 0, k);
    dt = lower_promote(dt, t->dtype);
    if (!ref && !(t->rank == 1 && t->sizes[0] == 0)) ref = t;
  }
  if (!ref) ref = lower_list_meta(ctx, 0, 0);
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_dim_arg(ctx, 1, ref->rank, &dim));
  if (ref->rank == 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "zero-dimensional tensor (at position 0) cannot be concatenated");
  ir_value_t parts[LOWER_MAX_FLAT_ARGS];
  int32_t m = 0;
  for (int32_t k = 0; k < n; ++k) {
    const tpurt_tensor_t* t = lower_list_meta(ctx, 0, k);
    if (t->rank == 1 && t->sizes[0] == 0 && t != ref) continue;
    if (t->rank != ref->rank)
      return lower_error(TPURT_INVALID_ARGUMENT, "Tensors must have same number of dimensions: got %d and %d",
                         ref->rank, t->rank);
    for (int32_t d = 0; d < t->rank; ++d)
      if (d != dim && t->sizes[d] != ref->sizes[d])
        return lower_error(
            TPURT_INVALID_ARGUMENT,
            "Sizes of tensors must match except in dimension %lld. Expected size %lld but got size "
            "%lld for tensor number %d in the list.",
            (long long)dim, (long long)ref->sizes[d], (long long)t->sizes[d], k);
    parts[m++] = lower_cast(ctx, lower_list_tensor(ctx, 0, k), dt);
  }
  lower_set_result(ctx, 0, m == 1 ? parts[0] : ir_concatenate(ctx->func, parts, m, dim));
  return NULL;
}

/* c10::MemoryFormat's values, as a memory_format argument carries them. */
enum {
  MEMORY_FORMAT_CONTIGUOUS = 0,
  MEMORY_FORMAT_PRESERVE = 1,
  MEMORY_FORMAT_CHANNELS_LAST = 2,
  MEMORY_FORMAT_CHANNELS_LAST_3D = 3
};

/* clone(self, memory_format=None): the value read through the view, laid
** out as PyTorch lays it: channels_last(_3d) asked for, or kept from a
** channels-last input (Preserve, the default); else row-major. */
static TPURT_MUST_USE tpurt_status_t lower_clone(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t format = lower_int(ctx, 1, MEMORY_FORMAT_PRESERVE);
  if (format == MEMORY_FORMAT_CHANNELS_LAST && t->rank != 4)
    return lower_error(TPURT_INVALID_ARGUMENT, "required rank 4 tensor to use channels_last format");
  if (format == MEMORY_FORMAT_CHANNELS_LAST_3D && t->rank != 5)
    return lower_error(TPURT_INVALID_ARGUMENT, "required rank 5 tensor to use channels_last_3d format");
  bool last = format == MEMORY_FORMAT_CHANNELS_LAST || format == MEMORY_FORMAT_CHANNELS_LAST_3D ||
              (format == MEMORY_FORMAT_PRESERVE && lower_is_channels_last(t));
  if (last)
    lower_set_result_channels_last(ctx, 0, lower_tensor(ctx, 0), t->rank);
  else
    lower_set_result(ctx, 0, lower_tensor(ctx, 0));
  return NULL;
}

/* flip(self, dims) */
static TPURT_MUST_USE tpurt_status_t lower_flip(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t raw[TPURT_MAX_RANK], dims[TPURT_MAX_RANK];
  int32_t n = lower_ints(ctx, 1, raw, TPURT_MAX_RANK);
  for (int32_t i = 0; i < n; ++i) TPURT_RETURN_IF_ERROR(lower_wrap_dim(raw[i], t->rank, &dims[i]));
  ir_value_t x = lower_tensor(ctx, 0);
  lower_set_result(ctx, 0, (n == 0 || t->rank == 0) ? x : ir_reverse(ctx->func, x, dims, n));
  return NULL;
}

/* roll(self, shifts, dims): slices and a concatenate per dim. */
static TPURT_MUST_USE tpurt_status_t lower_roll(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t shifts[TPURT_MAX_RANK], raw[TPURT_MAX_RANK];
  int32_t ns = lower_ints(ctx, 1, shifts, TPURT_MAX_RANK);
  int32_t nd = lower_ints(ctx, 2, raw, TPURT_MAX_RANK);
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  if (nd == 0) { /* flatten, roll, restore */
    if (ns != 1)
      return lower_error(TPURT_INVALID_ARGUMENT, "shifts and dimensions must align. shifts: %d, dims:0", ns);
    int64_t numel = 1;
    for (int32_t i = 0; i < t->rank; ++i) numel *= t->sizes[i];
    x = ir_reshape(f, x, 1, &numel);
    raw[0] = 0;
    nd = 1;
  } else if (ns != nd) {
    return lower_error(TPURT_INVALID_ARGUMENT, "shifts and dimensions must align. shifts: %d, dims:%d", ns,
                       nd);
  }
  for (int32_t i = 0; i < nd; ++i) {
    const ir_type_t* xt = ir_value_type(f, x);
    if (!xt) break;
    ir_type_t ty = *xt;
    int64_t d;
    TPURT_RETURN_IF_ERROR(lower_wrap_dim(raw[i], ty.rank, &d));
    int64_t len = ty.dims[d];
    if (len == 0) continue;
    int64_t s = ((shifts[i] % len) + len) % len;
    if (s == 0) continue;
    int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
    for (int32_t k = 0; k < ty.rank; ++k) {
      li[k] = ty.dims[k];
      one[k] = 1;
    }
    st[d] = len - s;
    ir_value_t tailv = ir_slice(f, x, st, li, one);
    st[d] = 0;
    li[d] = len - s;
    ir_value_t head = ir_slice(f, x, st, li, one);
    ir_value_t parts[2] = {tailv, head};
    x = ir_concatenate(f, parts, 2, d);
  }
  lower_set_result(ctx, 0, ir_reshape(f, x, t->rank, t->sizes));
  return NULL;
}

/* tril/triu(self, diagonal): a mask from two iotas over the last dims. */
static TPURT_MUST_USE tpurt_status_t triangle(lower_ctx_t* ctx) {
  bool lower = lower_rule_data(ctx)->flag;
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (t->rank < 2)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s: input tensor must have at least 2 dimensions",
                       lower ? "tril" : "triu");
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  ir_type_t it = ir_type_make(TPURT_DTYPE_I64, t->rank, t->sizes);
  ir_value_t row = ir_iota(f, it, t->rank - 2), col = ir_iota(f, it, t->rank - 1);
  ir_value_t diag =
      lower_broadcast_to(ctx, ir_constant_i64(f, TPURT_DTYPE_I64, lower_int(ctx, 1, 0)), t->rank, t->sizes);
  ir_value_t delta = ir_sub(f, col, row);
  ir_value_t keep = ir_compare(f, lower ? IR_LE : IR_GE, delta, diag);
  lower_set_result(ctx, 0, ir_select(f, keep, x, ir_const_like(f, x, 0.0)));
  return NULL;
}

/* channel_shuffle(self, groups): (N, g * k, *) -> (N, k * g, *), the
** group and channel-in-group dims swapped */
static TPURT_MUST_USE tpurt_status_t lower_channel_shuffle(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t g = lower_int(ctx, 1, 1);
  if (g <= 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Number of groups to divide channels in must be positive. Value of groups:%lld",
                       (long long)g);
  if (t->rank <= 2)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "channel_shuffle expects input to have at least 3 dimensions, but got input with sizes %s",
        lower_shape_str(t->rank, t->sizes));
  if (t->sizes[1] % g != 0)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Number of channels must be divisible by groups. Got %lld channels and %lld groups.",
                       (long long)t->sizes[1], (long long)g);
  int64_t split[TPURT_MAX_RANK + 1], perm[TPURT_MAX_RANK + 1];
  split[0] = t->sizes[0];
  split[1] = g;
  split[2] = t->sizes[1] / g;
  for (int32_t i = 2; i < t->rank; ++i) split[i + 1] = t->sizes[i];
  for (int32_t i = 0; i <= t->rank; ++i) perm[i] = i;
  perm[1] = 2;
  perm[2] = 1;
  ir_value_t x = ir_reshape(ctx->func, lower_tensor(ctx, 0), t->rank + 1, split);
  x = ir_transpose(ctx->func, x, perm);
  lower_set_result(ctx, 0, ir_reshape(ctx->func, x, t->rank, t->sizes));
  return NULL;
}

/* The most elements of a window unfold_backward unrolls over. */
#define UNFOLD_MAX_SIZE 1024

/* unfold_backward(grad_in, input_sizes, dim, size, step): the gradient of
** self.unfold(dim, size, step). grad_in has the windows along |dim| and their
** elements last; element k of window w came from position w * step + k. So
** the slice of every window's element k, spread out by step (interior
** padding) and shifted by k, lands where it came from; the size slices add
** up where windows overlap (step < size). */
static TPURT_MUST_USE tpurt_status_t lower_unfold_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t* g = lower_meta(ctx, 0);
  int64_t in[TPURT_MAX_RANK];
  int32_t rank = lower_ints(ctx, 1, in, TPURT_MAX_RANK);
  int64_t size = lower_int(ctx, 3, 0), step = lower_int(ctx, 4, 0);
  if (step <= 0) return lower_error(TPURT_INVALID_ARGUMENT, "step is %lld but must be > 0", (long long)step);
  if (size < 0) return lower_error(TPURT_INVALID_ARGUMENT, "size is %lld but must be >= 0", (long long)size);
  if (size > UNFOLD_MAX_SIZE)
    return lower_error(TPURT_UNIMPLEMENTED, "unfold_backward: windows of more than %d elements",
                       UNFOLD_MAX_SIZE);
  /* a 0-d input unfolds as a 1-element vector, into one window ([size]) */
  int32_t r = rank ? rank : 1;
  int64_t gs[TPURT_MAX_RANK + 1] = {1, size};
  if (rank) memcpy(gs, g->sizes, sizeof(int64_t) * (size_t)g->rank);
  if (!rank) in[0] = 1;
  int64_t dim;
  TPURT_RETURN_IF_ERROR(lower_wrap_dim(lower_int(ctx, 2, 0), r, &dim));
  if (g->rank != rank + 1 || g->sizes[rank] != size)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "unfold_backward: grad_in of shape %s does not fit input_sizes %s",
                       lower_shape_str(g->rank, g->sizes), lower_shape_str(rank, in));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(g->dtype);
  int64_t windows = gs[dim], length = in[dim];
  ir_value_t sum = ir_splat(f, acc, r, in, 0.0);
  if (windows > 0 && (windows - 1) * step + size > length)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "unfold_backward: %lld windows of %lld by %lld exceed size %lld", (long long)windows,
                       (long long)size, (long long)step, (long long)length);
  ir_value_t grad = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), r + 1, gs);
  for (int64_t k = 0; k < size && windows > 0; ++k) {
    int64_t st[TPURT_MAX_RANK + 1] = {0}, li[TPURT_MAX_RANK + 1], one[TPURT_MAX_RANK + 1];
    for (int32_t d = 0; d <= r; ++d) li[d] = gs[d], one[d] = 1;
    st[r] = k;
    li[r] = k + 1;
    ir_value_t part = ir_reshape(f, ir_slice(f, grad, st, li, one), r, gs);
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, interior[TPURT_MAX_RANK] = {0};
    lo[dim] = k;
    interior[dim] = step - 1;
    hi[dim] = length - (k + (windows - 1) * step + 1);
    sum = ir_add(f, sum, ir_pad(f, part, ir_constant_f64(f, acc, 0.0), lo, hi, interior));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, ir_reshape(f, sum, rank, in), g->dtype));
  return NULL;
}

const lower_rule_t lower_shape_rules[] = {
    LOWER_FN("aten::channel_shuffle", lower_channel_shuffle),
    LOWER_FN("aten::native_channel_shuffle", lower_channel_shuffle),
    LOWER_FN("aten::cat", lower_cat),
    LOWER_OUT_FN("aten::cat.out", lower_cat),
    LOWER_FN("aten::clone", lower_clone),
    LOWER_FN("aten::unfold_backward", lower_unfold_backward),
    LOWER_FN("aten::flip", lower_flip),
    LOWER_FN("aten::roll", lower_roll),
    LOWER_FN_WITH("aten::tril", triangle, .flag = true),
    LOWER_FN("aten::triu", triangle),
    LOWER_END,
};
