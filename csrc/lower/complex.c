/* complex.c: ops of complex numbers that have no real counterpart to share
** a rule with: complex(real, imag), polar, the physical conjugate, and the
** angle of a complex value. (real, imag and view_as_real are views: the
** engine reads a complex storage through a real view by its parts, view.c;
** abs and the arithmetic share the real rules.) */
#include "../base/base.h"
#include "lower.h"

/* complex(real, imag) / polar(abs, angle): two real tensors of one float
** type (f32 or f64), broadcast, joined into complex. */
static TPURT_MUST_USE tpurt_status_t join_parts(lower_ctx_t* ctx, const char* op, ir_value_t* re,
                                                ir_value_t* im) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1);
  if (a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "Expected object of scalar type %s but got scalar type %s for second argument",
                       tpurt_dtype_name(a->dtype), tpurt_dtype_name(b->dtype));
  if (a->dtype != TPURT_DTYPE_F32 && a->dtype != TPURT_DTYPE_F64)
    return lower_error(TPURT_INVALID_ARGUMENT, "%s: expected both inputs to be float or double, got %s", op,
                       tpurt_dtype_name(a->dtype));
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
  TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(a->rank, a->sizes, b->rank, b->sizes, &rank, dims));
  *re = lower_broadcast_to(ctx, lower_tensor(ctx, 0), rank, dims);
  *im = lower_broadcast_to(ctx, lower_tensor(ctx, 1), rank, dims);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t lower_complex(lower_ctx_t* ctx) {
  ir_value_t re, im;
  TPURT_RETURN_IF_ERROR(join_parts(ctx, "complex", &re, &im));
  lower_set_result(ctx, 0, ir_complex(ctx->func, re, im));
  return NULL;
}

/* polar(abs, angle) = abs * (cos(angle) + i sin(angle)) */
static TPURT_MUST_USE tpurt_status_t lower_polar(lower_ctx_t* ctx) {
  ir_value_t r, theta;
  TPURT_RETURN_IF_ERROR(join_parts(ctx, "polar", &r, &theta));
  ir_func_t* f = ctx->func;
  ir_value_t re = ir_mul(f, r, ir_unary(f, IR_OP_COSINE, theta));
  ir_value_t im = ir_mul(f, r, ir_unary(f, IR_OP_SINE, theta));
  lower_set_result(ctx, 0, ir_complex(f, re, im));
  return NULL;
}

/* _conj_physical / conj_physical: the conjugate, computed (PyTorch's conj()
** only flips a bit; the glue resolves that bit through this rule). A real
** tensor is its own conjugate. */
static TPURT_MUST_USE tpurt_status_t lower_conj_physical(lower_ctx_t* ctx) {
  ir_value_t x = lower_tensor(ctx, 0);
  if (tpurt_dtype_is_complex(lower_meta(ctx, 0)->dtype)) {
    ir_func_t* f = ctx->func;
    x = ir_complex(f, ir_complex_part(f, IR_OP_REAL, x), ir_neg(f, ir_complex_part(f, IR_OP_IMAG, x)));
  }
  lower_set_result(ctx, 0, x);
  return NULL;
}

TPURT_MUST_USE tpurt_status_t lower_complex_angle(lower_ctx_t* ctx) {
  ir_func_t* f = ctx->func;
  ir_value_t x = lower_tensor(ctx, 0);
  lower_set_result(
      ctx, 0,
      ir_binary(f, IR_OP_ATAN2, ir_complex_part(f, IR_OP_IMAG, x), ir_complex_part(f, IR_OP_REAL, x)));
  return NULL;
}

const lower_rule_t lower_complex_rules[] = {
    LOWER_FN("aten::complex", lower_complex),
    LOWER_OUT_FN("aten::complex.out", lower_complex),
    LOWER_FN("aten::polar", lower_polar),
    LOWER_OUT_FN("aten::polar.out", lower_polar),
    LOWER_FN("aten::_conj_physical", lower_conj_physical),
    LOWER_OUT_FN("aten::conj_physical.out", lower_conj_physical),
    LOWER_INPLACE_FN("aten::conj_physical_", lower_conj_physical),
    LOWER_END,
};
