/* multinomial.c: torch.multinomial, drawing category indices from rows of
** non-negative weights (normalised or not).
**
** Both forms use the exponential race: with E_c ~ Exp(1) independent, the
** category with the largest p_c / E_c is distributed as p_c / sum(p). With
** replacement, every sample races over fresh draws (an argmax per sample);
** without replacement, one race ordered by key gives the samples in the
** order sequential draws without replacement would (the top n keys; PyTorch's
** CPU kernel uses the same trick). Zero weights never win. The numbers
** differ from CPU's stream; the distribution is the same. Data checks that
** need a sync (negative or non-finite weights, a row summing to 0) are not
** made: such rows give some index instead of an error. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

#define I64 TPURT_DTYPE_I64

/* Exp(1) draws of |fdt| (F32/F64) shaped |dims|: -log(1 - U), U in [0, 1). */
static ir_value_t exp_draws(lower_ctx_t* ctx, ir_value_t state, tpurt_dtype_t fdt, int32_t rank,
                            const int64_t* dims) {
  ir_func_t* f = ctx->func;
  int64_t n = 1;
  for (int32_t d = 0; d < rank; ++d) n *= dims[d];
  bool wide = fdt == TPURT_DTYPE_F64;
  tpurt_dtype_t bdt = wide ? TPURT_DTYPE_U64 : TPURT_DTYPE_U32;
  ir_value_t new_state, bits;
  ir_rng_bit_generator(f, state, ir_type_make(bdt, 1, &n), &new_state, &bits);
  /* mantissa bits under the exponent of 1.0: a float in [1, 2) */
  ir_value_t m = ir_binary(f, IR_OP_SHIFT_RIGHT_LOGICAL, bits, ir_const_like(f, bits, wide ? 12 : 9));
  ir_value_t one = ir_broadcast_in_dim(
      f, ir_constant_i64(f, bdt, wide ? (int64_t)0x3FF0000000000000LL : 0x3F800000), 1, &n, NULL);
  ir_value_t x = ir_bitcast_convert(f, ir_or(f, m, one), ir_type_make(fdt, 1, &n));
  ir_value_t u = ir_sub(f, ir_const_like(f, x, 2.0), x); /* 1 - U: in (0, 1] */
  return ir_reshape(f, ir_neg(f, ir_log(f, u)), rank, dims);
}

/* multinomial(self, num_samples, replacement=False, *, generator=None) */
static TPURT_MUST_USE tpurt_status_t lower_multinomial(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t n = lower_int(ctx, 1, 0);
  bool replacement = lower_bool(ctx, 2, false);
  if (t->rank < 1 || t->rank > 2) return lower_error(TPURT_INVALID_ARGUMENT, "prob_dist must be 1 or 2 dim");
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "multinomial only supports floating-point dtypes for input, got: %s",
                       tpurt_dtype_name(t->dtype));
  if (n <= 0) return lower_error(TPURT_INVALID_ARGUMENT, "cannot sample n_sample <= 0 samples");
  int64_t cats = t->sizes[t->rank - 1];
  if (!replacement && n > cats)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  if (cats > (1LL << 24))
    return lower_error(TPURT_INVALID_ARGUMENT, "number of categories cannot exceed 2^24");
  int64_t rows = t->rank == 2 ? t->sizes[0] : 1;
  if (rows == 0 || cats == 0) {
    int64_t out[2] = {rows, n};
    ir_value_t empty = ir_splat(ctx->func, I64, 2, out, 0.0);
    lower_set_result(ctx, 0, t->rank == 2 ? empty : ir_reshape(ctx->func, empty, 1, &n));
    return NULL;
  }
  ir_func_t* f = ctx->func;
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  int64_t pdims[2] = {rows, cats};
  ir_value_t p = ir_reshape(f, lower_cast(ctx, lower_tensor(ctx, 0), acc), 2, pdims);
  ir_value_t state = lower_rng_state(ctx, 3);
  ir_value_t result;
  if (replacement) {
    int64_t dims[3] = {rows, n, cats}, bd[2] = {0, 2};
    ir_value_t pw = ir_broadcast_in_dim(f, p, 3, dims, bd);
    ir_value_t keys = ir_div(f, pw, exp_draws(ctx, state, acc, 3, dims));
    /* a zero weight loses to every other (keys are >= 0 otherwise) */
    keys =
        ir_select(f, ir_compare(f, IR_GT, pw, ir_const_like(f, pw, 0.0)), keys, ir_const_like(f, pw, -1.0));
    ir_value_t idx = ir_iota(f, ir_type_make(I64, 3, dims), 2);
    ir_value_t inputs[2] = {keys, idx};
    ir_value_t inits[2] = {ir_constant_f64(f, acc, -INFINITY), ir_constant_i64(f, I64, 0)};
    ir_value_t res[2], args[4];
    int64_t red = 2;
    ir_reduce_begin(f, inputs, inits, 2, &red, 1, res, args);
    /* the larger key wins; a tie goes to the lower index (an associative order) */
    ir_value_t gt = ir_compare(f, IR_GT, args[2], args[0]);
    ir_value_t tie =
        ir_and(f, ir_compare(f, IR_EQ, args[2], args[0]), ir_compare(f, IR_LT, args[3], args[1]));
    ir_value_t take = ir_or(f, gt, tie);
    ir_value_t next[2] = {ir_select(f, take, args[2], args[0]), ir_select(f, take, args[3], args[1])};
    ir_region_end(f, next, 2);
    result = res[1];
  } else {
    ir_value_t keys = ir_div(f, p, exp_draws(ctx, state, acc, 2, pdims));
    keys = ir_select(f, ir_compare(f, IR_GT, p, ir_const_like(f, p, 0.0)), keys, ir_const_like(f, p, -1.0));
    ir_value_t inputs[2] = {keys, ir_iota(f, ir_type_make(I64, 2, pdims), 1)};
    ir_value_t sorted[2], args[4];
    ir_sort_begin(f, inputs, 2, 1, true, sorted, args);
    ir_value_t before = ir_compare(f, IR_GT, args[0], args[1]); /* descending keys */
    ir_region_end(f, &before, 1);
    int64_t start[2] = {0, 0}, limit[2] = {rows, n}, step[2] = {1, 1};
    result = ir_slice(f, sorted[1], start, limit, step);
  }
  lower_set_result(ctx, 0, t->rank == 2 ? result : ir_reshape(f, result, 1, &n));
  return NULL;
}

const lower_rule_t lower_multinomial_rules[] = {
    LOWER_FN("aten::multinomial", lower_multinomial),
    LOWER_OUT_FN("aten::multinomial.out", lower_multinomial),
    LOWER_END,
};
