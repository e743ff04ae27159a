/* amp.c: the two ops of GradScaler, so that mixed-precision training never
** leaves the device.
**
** _amp_foreach_non_finite_check_and_unscale_(grads[], found_inf, inv_scale)
**   multiplies every gradient by inv_scale and sets found_inf to 1 if any
**   gradient holds an inf or a NaN (found_inf is left as it was otherwise,
**   so one flag can gather several calls).
** _amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff,
**   interval) backs the scale off after an overflow, and grows it after
**   |interval| clean steps in a row, counting them in growth_tracker.
**
** Both write more than their first argument: results beyond the first
** (or beyond the list) go to the op's other Tensor(a!) arguments, in order
** (the engine's write-back). Arithmetic runs in f32 for half types, as
** PyTorch's kernels do. */
#include "../base/base.h"
#include "lower.h"

/* True if any element of |x| is not finite: a 0-d bool. */
static ir_value_t any_non_finite(lower_ctx_t* ctx, ir_value_t x, int32_t rank) {
  ir_func_t* f = ctx->func;
  ir_value_t bad = ir_not(f, ir_is_finite(f, x));
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) dims[i] = i;
  return ir_reduce(f, bad, ir_constant_i64(f, TPURT_DTYPE_BOOL, 0), dims, rank, IR_REDUCE_OR);
}

/* A one-element float tensor argument (found_inf, inv_scale, scale). */
static TPURT_MUST_USE tpurt_status_t check_flag(const lower_ctx_t* ctx, int32_t i, const char* what) {
  const tpurt_tensor_t* t = lower_meta(ctx, i);
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; ++d) n *= t->sizes[d];
  if (n != 1) return lower_error(TPURT_INVALID_ARGUMENT, "%s must be a 1-element tensor.", what);
  if (t->dtype != TPURT_DTYPE_F32)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s must be a float tensor.", what);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_amp_unscale(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(check_flag(ctx, 1, "found_inf"));
  TPURT_RETURN_IF_ERROR(check_flag(ctx, 2, "inv_scale"));
  ir_func_t* f = ctx->func;
  int32_t len = lower_list_len(ctx, 0);
  const tpurt_tensor_t* flag_meta = lower_meta(ctx, 1);
  ir_value_t inv_scale = ir_reshape(f, lower_tensor(ctx, 2), 0, NULL);
  ir_value_t any = ir_constant_i64(f, TPURT_DTYPE_BOOL, 0);
  for (int32_t k = 0; k < len; ++k) {
    const tpurt_tensor_t* t = lower_list_meta(ctx, 0, k);
    if (!tpurt_dtype_is_float(t->dtype))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "_amp_foreach_non_finite_check_and_unscale_: expected a "
                         "floating point gradient, got %s",
                         tpurt_dtype_name(t->dtype));
    tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
    ir_value_t g = lower_cast(ctx, lower_list_tensor(ctx, 0, k), acc);
    any = ir_or(f, any, any_non_finite(ctx, g, t->rank));
    ir_value_t s = lower_broadcast_to(ctx, lower_cast(ctx, inv_scale, acc), t->rank, t->sizes);
    lower_set_result(ctx, k, lower_cast(ctx, ir_mul(f, g, s), t->dtype));
  }
  ir_value_t old = lower_tensor(ctx, 1);
  ir_value_t one = ir_const_like(f, old, 1.0);
  ir_value_t pred = lower_broadcast_to(ctx, any, flag_meta->rank, flag_meta->sizes);
  lower_set_result(ctx, len, ir_select(f, pred, one, old));
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_amp_update_scale(lower_ctx_t* ctx) {
  TPURT_RETURN_IF_ERROR(check_flag(ctx, 0, "current_scale"));
  TPURT_RETURN_IF_ERROR(check_flag(ctx, 2, "found_inf"));
  const tpurt_tensor_t* scale_meta = lower_meta(ctx, 0);
  const tpurt_tensor_t* tracker_meta = lower_meta(ctx, 1);
  int64_t tracker_numel = 1;
  for (int32_t d = 0; d < tracker_meta->rank; ++d) tracker_numel *= tracker_meta->sizes[d];
  if (tracker_meta->dtype != TPURT_DTYPE_I32 || tracker_numel != 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "growth_tracker must be a 1-element int tensor.");
  ir_func_t* f = ctx->func;
  /* All three are one element: compute on scalars, reshape back at the end. */
  ir_value_t scale = ir_reshape(f, lower_tensor(ctx, 0), 0, NULL);
  ir_value_t tracker = ir_reshape(f, lower_tensor(ctx, 1), 0, NULL);
  ir_value_t found = ir_reshape(f, lower_tensor(ctx, 2), 0, NULL);
  /* The factors are runtime parameters: changing them never recompiles. */
  ir_value_t growth = lower_scalar(ctx, 3, TPURT_DTYPE_F32);
  ir_value_t backoff = lower_scalar(ctx, 4, TPURT_DTYPE_F32);
  int64_t interval = lower_int(ctx, 5, 1);
  ir_value_t overflow = ir_compare(f, IR_NE, found, ir_const_like(f, found, 0.0));
  ir_value_t successful = ir_add(f, tracker, ir_const_like(f, tracker, 1.0));
  ir_value_t grow = ir_compare(f, IR_EQ, successful, ir_const_like(f, tracker, (double)interval));
  ir_value_t grown = ir_mul(f, scale, growth);
  /* Growing stops short of inf: the scale stays put then. */
  ir_value_t grown_ok = ir_select(f, ir_is_finite(f, grown), grown, scale);
  ir_value_t clean_scale = ir_select(f, grow, grown_ok, scale);
  ir_value_t zero = ir_const_like(f, tracker, 0.0);
  ir_value_t clean_tracker = ir_select(f, grow, zero, successful);
  ir_value_t backed_off = ir_mul(f, scale, backoff);
  ir_value_t new_scale = ir_select(f, overflow, backed_off, clean_scale);
  ir_value_t new_tracker = ir_select(f, overflow, zero, clean_tracker);
  lower_set_result(ctx, 0, ir_reshape(f, new_scale, scale_meta->rank, scale_meta->sizes));
  lower_set_result(ctx, 1, ir_reshape(f, new_tracker, tracker_meta->rank, tracker_meta->sizes));
  return NULL;
}

const lower_rule_t lower_amp_rules[] = {
    LOWER_INPLACE_FN("aten::_amp_foreach_non_finite_check_and_unscale_", lower_amp_unscale),
    LOWER_INPLACE_FN("aten::_amp_update_scale_", lower_amp_update_scale),
    LOWER_END,
};
