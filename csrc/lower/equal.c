/* equal.c: torch.equal, the whole-tensor comparison that returns a Python
** bool: true when both tensors have the same size and every element is equal
** (NaN is never equal to NaN, as PyTorch's CPU kernel compares with ==).
** The result is a 0-d bool on the device; the glue reads it (one sync, as
** any bool return costs). Sizes that differ give false without a program
** touching the data. */
#include "../base/base.h"
#include "lower.h"

#define BOOL TPURT_DTYPE_BOOL

/* Elementwise ==, complex by both parts. */
static ir_value_t elements_equal(lower_ctx_t* ctx, ir_value_t a, ir_value_t b, tpurt_dtype_t dtype) {
  ir_func_t* f = ctx->func;
  if (!tpurt_dtype_is_complex(dtype)) return ir_compare(f, IR_EQ, a, b);
  ir_value_t re = ir_compare(f, IR_EQ, ir_complex_part(f, IR_OP_REAL, a), ir_complex_part(f, IR_OP_REAL, b));
  ir_value_t im = ir_compare(f, IR_EQ, ir_complex_part(f, IR_OP_IMAG, a), ir_complex_part(f, IR_OP_IMAG, b));
  return ir_and(f, re, im);
}

/* equal(self, other) -> bool */
static TPURT_MUST_USE tpurt_status_t lower_equal(lower_ctx_t* ctx) {
  const tpurt_tensor_t* a = lower_meta(ctx, 0);
  const tpurt_tensor_t* b = lower_meta(ctx, 1);
  if (!a || !b) return lower_error(TPURT_INVALID_ARGUMENT, "expected two tensors");
  if (a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected object of scalar type %s but got scalar type %s for argument 'other'",
                       tpurt_dtype_name(a->dtype), tpurt_dtype_name(b->dtype));
  ir_func_t* f = ctx->func;
  bool same = a->rank == b->rank;
  for (int32_t d = 0; same && d < a->rank; ++d) same = a->sizes[d] == b->sizes[d];
  if (!same) {
    lower_set_result(ctx, 0, ir_constant_i64(f, BOOL, 0));
    return NULL;
  }
  ir_value_t eq = elements_equal(ctx, lower_tensor(ctx, 0), lower_tensor(ctx, 1), a->dtype);
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t d = 0; d < a->rank; ++d) dims[d] = d;
  ir_value_t all =
      a->rank == 0 ? eq : ir_reduce(f, eq, ir_constant_i64(f, BOOL, 1), dims, a->rank, IR_REDUCE_AND);
  lower_set_result(ctx, 0, all);
  return NULL;
}

const lower_rule_t lower_equal_rules[] = {
    LOWER_FN("aten::equal", lower_equal),
    LOWER_END,
};
