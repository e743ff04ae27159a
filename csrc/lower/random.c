/* random.c: uniform_, normal_ and normal, random_, bernoulli, exponential_,
** cauchy_, log_normal_, geometric_, randperm.
**
** Every rule draws its bits with stablehlo.rng_bit_generator (THREE_FRY)
** from the Generator argument: the engine turns the generator's (seed,
** offset) into a fresh key, and the glue advances the offset by one per
** call, so each call gets an independent stream and a seed replays exactly.
** The numbers are not PyTorch's CPU numbers (a different generator); their
** distributions are.
**
** Floats in [0, 1) come from the mantissa trick: 23 random bits under the
** exponent of 1.0 give [1, 2), minus one (52 bits for f64). Half types
** draw and compute in f32 and round once.
*/
#include <math.h>
#include <stdint.h>

#include "../base/base.h"
#include "lower.h"

static bool is_float(tpurt_dtype_t d) { return tpurt_dtype_is_float(d); }

static int64_t numel_of(int32_t rank, const int64_t* dims) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

/* A rank-0 integer constant of |dtype| broadcast to |rank|/|dims|. */
static ir_value_t splat_int(lower_ctx_t* ctx, tpurt_dtype_t dtype, int32_t rank, const int64_t* dims,
                            int64_t v) {
  ir_value_t c = ir_constant_i64(ctx->func, dtype, v);
  return rank == 0 ? c : ir_broadcast_in_dim(ctx->func, c, rank, dims, NULL);
}

/* |n| random bits of |dtype| (U32 or U64) as a flat [n] value, advancing
** *state. Bits are always drawn flat (rank-0 and empty shapes included). */
static ir_value_t draw_bits(lower_ctx_t* ctx, ir_value_t* state, tpurt_dtype_t dtype, int64_t n) {
  ir_value_t new_state, bits;
  ir_rng_bit_generator(ctx->func, *state, ir_type_make(dtype, 1, &n), &new_state, &bits);
  *state = new_state;
  return bits;
}

/* Uniform floats in [0, 1) of |fdt| (F32 or F64) shaped |rank|/|dims|. */
static ir_value_t uniform01(lower_ctx_t* ctx, ir_value_t* state, tpurt_dtype_t fdt, int32_t rank,
                            const int64_t* dims) {
  int64_t n = numel_of(rank, dims);
  bool wide = fdt == TPURT_DTYPE_F64;
  tpurt_dtype_t bdt = wide ? TPURT_DTYPE_U64 : TPURT_DTYPE_U32;
  ir_value_t bits = draw_bits(ctx, state, bdt, n);
  ir_value_t shift = splat_int(ctx, bdt, 1, &n, wide ? 12 : 9);
  ir_value_t one_bits = splat_int(ctx, bdt, 1, &n, wide ? (int64_t)0x3FF0000000000000LL : 0x3F800000);
  ir_value_t m = ir_binary(ctx->func, IR_OP_SHIFT_RIGHT_LOGICAL, bits, shift);
  m = ir_or(ctx->func, m, one_bits);
  ir_value_t f = ir_bitcast_convert(ctx->func, m, ir_type_make(fdt, 1, &n));
  f = ir_sub(ctx->func, f, ir_const_like(ctx->func, f, 1.0));
  return ir_reshape(ctx->func, f, rank, dims);
}

/* The dtype random floats are computed in for a result of |dtype|. */
static tpurt_dtype_t draw_dtype(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_F64 ? TPURT_DTYPE_F64 : TPURT_DTYPE_F32;
}

/* A number arg as a runtime parameter broadcast to |like|'s shape. */
static ir_value_t scalar_like(lower_ctx_t* ctx, int32_t arg, ir_value_t like) {
  const ir_type_t* t = ir_value_type(ctx->func, like);
  if (!t) return IR_NONE;
  ir_type_t copy = *t;
  return lower_broadcast_to(ctx, lower_scalar(ctx, arg, copy.dtype), copy.rank, copy.dims);
}

/*===--- uniform_ ---===*/

/* The type of a complex dtype's real and imaginary parts; others are their own. */
static tpurt_dtype_t part_dtype(tpurt_dtype_t d) {
  return d == TPURT_DTYPE_C128 ? TPURT_DTYPE_F64 : d == TPURT_DTYPE_C64 ? TPURT_DTYPE_F32 : d;
}

/* A complex dtype's result from its two parts, drawn one after the other
** (PyTorch fills view_as_real(self)); others are the first part. */
static ir_value_t join_parts(lower_ctx_t* ctx, tpurt_dtype_t d, ir_value_t re, ir_value_t im) {
  return tpurt_dtype_is_complex(d) ? ir_complex(ctx->func, re, im) : re;
}

/* uniform_'s draws in [from, to) of float |dt| shaped like self. */
static ir_value_t uniform_part(lower_ctx_t* ctx, ir_value_t* state, tpurt_dtype_t dt) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_value_t u = uniform01(ctx, state, draw_dtype(dt), t->rank, t->sizes);
  ir_value_t lo = scalar_like(ctx, 1, u), hi = scalar_like(ctx, 2, u);
  ir_value_t r = ir_mul(ctx->func, ir_sub(ctx->func, hi, lo), u);
  r = lower_cast(ctx, ir_add(ctx->func, lo, r), dt);
  /* Rounding (f32 math, or the final cast to a half type) can reach |to|:
  ** those draws become |from| instead, so the range stays [from, to). */
  ir_value_t lo_t = lower_cast(ctx, lo, dt), hi_t = lower_cast(ctx, hi, dt);
  return ir_select(ctx->func, ir_compare(ctx->func, IR_GE, r, hi_t), lo_t, r);
}

/* uniform_(Tensor(a!) self, float from=0, float to=1, *, Generator? generator=None);
** a complex self gets uniform real and imaginary parts */
static TPURT_MUST_USE tpurt_status_t lower_uniform_(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t pdt = part_dtype(t->dtype);
  if (!is_float(pdt))
    return lower_error(TPURT_UNIMPLEMENTED, "\"check_uniform_bounds\" not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  double from = lower_scalar_value(ctx, 1), to = lower_scalar_value(ctx, 2);
  if (!(from <= to))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "uniform_ expects to return a [from, to) range, but found from=%g > to=%g", from, to);
  ir_value_t state = lower_rng_state(ctx, 3);
  ir_value_t re = uniform_part(ctx, &state, pdt);
  ir_value_t im = tpurt_dtype_is_complex(t->dtype) ? uniform_part(ctx, &state, pdt) : IR_NONE;
  lower_set_result(ctx, 0, join_parts(ctx, t->dtype, re, im));
  return NULL;
}

/*===--- normal ---===*/

/* Standard normal samples of |fdt| by Box-Muller: sqrt(-2 log(1 - u1)) *
** cos(2 pi u2); 1 - u1 is in (0, 1], so the log is finite. */
static ir_value_t std_normal(lower_ctx_t* ctx, ir_value_t* state, tpurt_dtype_t fdt, int32_t rank,
                             const int64_t* dims) {
  ir_func_t* f = ctx->func;
  ir_value_t u1 = uniform01(ctx, state, fdt, rank, dims);
  ir_value_t u2 = uniform01(ctx, state, fdt, rank, dims);
  ir_value_t l = ir_log(f, ir_sub(f, ir_const_like(f, u1, 1.0), u1));
  ir_value_t r = ir_sqrt(f, ir_mul(f, ir_const_like(f, l, -2.0), l));
  ir_value_t c = ir_unary(f, IR_OP_COSINE, ir_mul(f, ir_const_like(f, u2, 2.0 * M_PI), u2));
  return ir_mul(f, r, c);
}

static TPURT_MUST_USE tpurt_status_t check_std(double std) {
  if (!(std >= 0.0))
    return lower_error(TPURT_INVALID_ARGUMENT, "normal expects std >= 0.0, but found std %g", std);
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t need_float_out(tpurt_dtype_t d) {
  if (!is_float(d))
    return lower_error(TPURT_UNIMPLEMENTED, "\"normal_kernel_cpu\" not implemented for '%s'",
                       tpurt_dtype_name(d));
  return NULL;
}

/* normal_'s draws, mean + |scale| std N(0, 1), of float |dt| shaped like self. */
static ir_value_t normal_part(lower_ctx_t* ctx, ir_value_t* state, tpurt_dtype_t dt, double scale) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_value_t z = std_normal(ctx, state, draw_dtype(dt), t->rank, t->sizes);
  ir_value_t sd = scalar_like(ctx, 2, z);
  if (scale != 1.0) sd = ir_mul(ctx->func, sd, ir_const_like(ctx->func, sd, scale));
  ir_value_t r = ir_add(ctx->func, ir_mul(ctx->func, z, sd), scalar_like(ctx, 1, z));
  return lower_cast(ctx, r, dt);
}

/* normal_(Tensor(a!) self, float mean=0, float std=1, *, Generator? generator=None);
** a complex self gets real and imaginary parts of std / sqrt(2) each, both
** around mean, as PyTorch draws them */
static TPURT_MUST_USE tpurt_status_t lower_normal_(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  tpurt_dtype_t pdt = part_dtype(t->dtype);
  TPURT_RETURN_IF_ERROR(need_float_out(pdt));
  TPURT_RETURN_IF_ERROR(check_std(lower_scalar_value(ctx, 2)));
  ir_value_t state = lower_rng_state(ctx, 3);
  bool complex = tpurt_dtype_is_complex(t->dtype);
  ir_value_t re = normal_part(ctx, &state, pdt, complex ? M_SQRT1_2 : 1.0);
  ir_value_t im = complex ? normal_part(ctx, &state, pdt, M_SQRT1_2) : IR_NONE;
  lower_set_result(ctx, 0, join_parts(ctx, t->dtype, re, im));
  return NULL;
}

/* normal.Tensor_float(Tensor mean, float std=1, *, Generator? generator=None)
** normal.float_Tensor(float mean, Tensor std, *, Generator? generator=None)
** normal.Tensor_Tensor(Tensor mean, Tensor std, *, Generator? generator=None)
** The result has the broadcast shape and the dtype of mean (of std when
** mean is a number): PyTorch fills it with N(0, 1), then mul_(std) and
** add_(mean). A negative element of a std tensor is not reported (that
** check needs the values on the host). */
static TPURT_MUST_USE tpurt_status_t lower_normal_tensor(lower_ctx_t* ctx) {
  const tpurt_tensor_t* mt = lower_meta(ctx, 0);
  const tpurt_tensor_t* st = lower_meta(ctx, 1);
  tpurt_dtype_t dt = mt ? mt->dtype : st->dtype;
  TPURT_RETURN_IF_ERROR(need_float_out(dt));
  if (!st) TPURT_RETURN_IF_ERROR(check_std(lower_scalar_value(ctx, 1)));
  int32_t rank = 0;
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t k = 0; k < 2; ++k) {
    const tpurt_tensor_t* t = lower_meta(ctx, k);
    if (t) TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, t->rank, t->sizes, &rank, dims));
  }
  tpurt_dtype_t cd = draw_dtype(dt);
  ir_value_t state = lower_rng_state(ctx, 2);
  ir_value_t z = std_normal(ctx, &state, cd, rank, dims);
  ir_value_t v[2];
  for (int32_t k = 0; k < 2; ++k) {
    v[k] = lower_meta(ctx, k) ? lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, k), cd), rank, dims)
                              : scalar_like(ctx, k, z);
  }
  ir_value_t r = ir_add(ctx->func, ir_mul(ctx->func, z, v[1]), v[0]);
  lower_set_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

/*===--- random_ ---===*/

/* The largest value random_() draws for |d|, inclusive: 2^digits for
** floats (every integer up to it is exact), the type's maximum for ints. */
static uint64_t random_max(tpurt_dtype_t d) {
  switch (d) {
    case TPURT_DTYPE_BOOL:
      return 1;
    case TPURT_DTYPE_U8:
      return UINT8_MAX;
    case TPURT_DTYPE_I8:
      return INT8_MAX;
    case TPURT_DTYPE_I16:
      return INT16_MAX;
    case TPURT_DTYPE_U16:
      return UINT16_MAX;
    case TPURT_DTYPE_I32:
      return INT32_MAX;
    case TPURT_DTYPE_U32:
      return UINT32_MAX;
    case TPURT_DTYPE_F16:
      return 1ULL << 11;
    case TPURT_DTYPE_BF16:
      return 1ULL << 8;
    case TPURT_DTYPE_F32:
      return 1ULL << 24;
    case TPURT_DTYPE_F64:
      return 1ULL << 53;
    default:
      return INT64_MAX;
  }
}

/* The bounds random_'s from and to - 1 must lie in, as PyTorch checks them:
** the type's own limits (floats beyond 2^digits only warn there). */
static bool in_type_bounds(tpurt_dtype_t d, int64_t v) {
  switch (d) {
    case TPURT_DTYPE_BOOL:
      return v >= 0 && v <= 1;
    case TPURT_DTYPE_U8:
      return v >= 0 && v <= UINT8_MAX;
    case TPURT_DTYPE_I8:
      return v >= INT8_MIN && v <= INT8_MAX;
    case TPURT_DTYPE_I16:
      return v >= INT16_MIN && v <= INT16_MAX;
    case TPURT_DTYPE_I32:
      return v >= INT32_MIN && v <= INT32_MAX;
    case TPURT_DTYPE_F16:
      return v >= -65504 && v <= 65504;
    default:
      return true;
  }
}

/* Fills self with from + (bits mod range); range 0 stands for 2^64. */
static TPURT_MUST_USE tpurt_status_t random_fill(lower_ctx_t* ctx, int32_t gen_arg, int64_t from,
                                                 uint64_t range) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t n = numel_of(t->rank, t->sizes);
  ir_func_t* f = ctx->func;
  ir_value_t state = lower_rng_state(ctx, gen_arg);
  ir_value_t v;
  if (range != 0 && range <= (1ULL << 32)) {
    ir_value_t bits = draw_bits(ctx, &state, TPURT_DTYPE_U32, n);
    if (range < (1ULL << 32))
      bits = ir_binary(f, IR_OP_REMAINDER, bits, splat_int(ctx, TPURT_DTYPE_U32, 1, &n, (int64_t)range));
    v = ir_convert(f, bits, TPURT_DTYPE_I64);
  } else {
    ir_value_t bits = draw_bits(ctx, &state, TPURT_DTYPE_U64, n);
    if (range != 0)
      bits = ir_binary(f, IR_OP_REMAINDER, bits, splat_int(ctx, TPURT_DTYPE_U64, 1, &n, (int64_t)range));
    v = ir_bitcast_convert(f, bits, ir_type_make(TPURT_DTYPE_I64, 1, &n));
  }
  if (from != 0) v = ir_add(f, v, splat_int(ctx, TPURT_DTYPE_I64, 1, &n, from));
  v = ir_reshape(f, v, t->rank, t->sizes);
  lower_set_result(ctx, 0, lower_cast(ctx, v, t->dtype));
  return NULL;
}

/* The C++ type name PyTorch prints in random_'s bound errors. */
static const char* ctype_name(tpurt_dtype_t d) {
  switch (d) {
    case TPURT_DTYPE_BOOL:
      return "bool";
    case TPURT_DTYPE_U8:
      return "unsigned char";
    case TPURT_DTYPE_I8:
      return "signed char";
    case TPURT_DTYPE_I16:
      return "short int";
    case TPURT_DTYPE_I32:
      return "int";
    case TPURT_DTYPE_I64:
      return "long";
    case TPURT_DTYPE_F16:
      return "c10::Half";
    case TPURT_DTYPE_BF16:
      return "c10::BFloat16";
    case TPURT_DTYPE_F32:
      return "float";
    case TPURT_DTYPE_F64:
      return "double";
    default:
      return tpurt_dtype_name(d);
  }
}

static TPURT_MUST_USE tpurt_status_t check_from_to(tpurt_dtype_t d, int64_t from, int64_t to, bool to_given) {
  if (to_given && from >= to)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                       (long long)from, (long long)to);
  if (!in_type_bounds(d, from))
    return lower_error(TPURT_INVALID_ARGUMENT, "from is out of bounds for %s", ctype_name(d));
  if (to_given && !in_type_bounds(d, to - 1))
    return lower_error(TPURT_INVALID_ARGUMENT, "to - 1 is out of bounds for %s", ctype_name(d));
  if (!to_given && from > 0 && (uint64_t)from > random_max(d))
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' casted to dtype, "
        "but got from=%lld > to_inc=%llu",
        (long long)from, (unsigned long long)random_max(d));
  return NULL;
}

/* random_(Tensor(a!) self, *, Generator? generator=None): [0, random_max] */
static TPURT_MUST_USE tpurt_status_t lower_random_(lower_ctx_t* ctx) {
  uint64_t max = random_max(lower_meta(ctx, 0)->dtype);
  return random_fill(ctx, 1, 0, max + 1);
}

/* random_.to(Tensor(a!) self, int to, *, Generator? generator=None): [0, to) */
static TPURT_MUST_USE tpurt_status_t lower_random_to(lower_ctx_t* ctx) {
  int64_t to = lower_int(ctx, 1, 0);
  TPURT_RETURN_IF_ERROR(check_from_to(lower_meta(ctx, 0)->dtype, 0, to, true));
  return random_fill(ctx, 2, 0, (uint64_t)to);
}

/* random_.from(Tensor(a!) self, int from, int? to, *, Generator? generator=None):
** [from, to), or [from, random_max] when to is None. */
static TPURT_MUST_USE tpurt_status_t lower_random_from(lower_ctx_t* ctx) {
  tpurt_dtype_t d = lower_meta(ctx, 0)->dtype;
  int64_t from = lower_int(ctx, 1, 0);
  bool to_given = !lower_is_none(ctx, 2);
  int64_t to = lower_int(ctx, 2, 0);
  TPURT_RETURN_IF_ERROR(check_from_to(d, from, to, to_given));
  uint64_t range = to_given ? (uint64_t)to - (uint64_t)from : random_max(d) - (uint64_t)from + 1;
  return random_fill(ctx, 3, from, range);
}

/*===--- bernoulli ---===*/

/* self's shape, 1 where u < p else 0, in |dtype|; |p| has the draw dtype
** and self's shape. */
static ir_value_t bernoulli_of(lower_ctx_t* ctx, ir_value_t* state, ir_value_t p, tpurt_dtype_t dtype) {
  const ir_type_t* pt = ir_value_type(ctx->func, p);
  if (!pt) return IR_NONE;
  ir_type_t copy = *pt;
  ir_value_t u = uniform01(ctx, state, copy.dtype, copy.rank, copy.dims);
  return lower_cast(ctx, ir_compare(ctx->func, IR_LT, u, p), dtype);
}

static TPURT_MUST_USE tpurt_status_t check_p(double p) {
  if (!(p >= 0.0 && p <= 1.0))
    return lower_error(TPURT_INVALID_ARGUMENT, "bernoulli_ expects p to be in [0, 1], but got p=%g", p);
  return NULL;
}

/* bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None)
** bernoulli.p(Tensor self, float p, *, Generator? generator=None) */
static TPURT_MUST_USE tpurt_status_t lower_bernoulli_float(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  TPURT_RETURN_IF_ERROR(check_p(lower_scalar_value(ctx, 1)));
  tpurt_dtype_t cd = draw_dtype(t->dtype);
  ir_value_t p = lower_broadcast_to(ctx, lower_scalar(ctx, 1, cd), t->rank, t->sizes);
  ir_value_t state = lower_rng_state(ctx, 2);
  lower_set_result(ctx, 0, bernoulli_of(ctx, &state, p, t->dtype));
  return NULL;
}

/* bernoulli_.Tensor(Tensor(a!) self, Tensor p, *, Generator? generator=None):
** p broadcasts to self. Probabilities outside [0, 1] are not reported
** (that check needs the values on the host). */
static TPURT_MUST_USE tpurt_status_t lower_bernoulli_tensor_(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  const tpurt_tensor_t* pm = lower_meta(ctx, 1);
  tpurt_dtype_t cd = draw_dtype(t->dtype);
  ir_value_t p;
  if (pm) {
    int32_t rank;
    int64_t dims[TPURT_MAX_RANK];
    TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(t->rank, t->sizes, pm->rank, pm->sizes, &rank, dims));
    if (rank != t->rank || numel_of(rank, dims) != numel_of(t->rank, t->sizes))
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "expand: the shape %s of p cannot be expanded to the shape %s of self",
                         lower_shape_str(pm->rank, pm->sizes), lower_shape_str(t->rank, t->sizes));
    p = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), cd), t->rank, t->sizes);
  } else {
    TPURT_RETURN_IF_ERROR(check_p(lower_scalar_value(ctx, 1)));
    p = lower_broadcast_to(ctx, lower_scalar(ctx, 1, cd), t->rank, t->sizes);
  }
  ir_value_t state = lower_rng_state(ctx, 2);
  lower_set_result(ctx, 0, bernoulli_of(ctx, &state, p, t->dtype));
  return NULL;
}

/* bernoulli(Tensor self, *, Generator? generator=None): p = self */
static TPURT_MUST_USE tpurt_status_t lower_bernoulli(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!is_float(t->dtype))
    return lower_error(TPURT_UNIMPLEMENTED, "\"bernoulli_tensor_cpu_self_\" not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  ir_value_t p = lower_cast(ctx, lower_tensor(ctx, 0), draw_dtype(t->dtype));
  ir_value_t state = lower_rng_state(ctx, 1);
  lower_set_result(ctx, 0, bernoulli_of(ctx, &state, p, t->dtype));
  return NULL;
}

/* native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)
** The schema has no Generator: the row's .default_generator has the caller
** append the device's default one as a trailing argument (3). Training: keep with probability 1-p, scale kept
** values by 1/(1-p); p == 1 drops everything. Otherwise: (input, all true). */
static TPURT_MUST_USE tpurt_status_t lower_native_dropout(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_value_t x = lower_tensor(ctx, 0);
  double p = lower_scalar_value(ctx, 1);
  if (!(p >= 0.0 && p <= 1.0))
    return lower_error(TPURT_INVALID_ARGUMENT, "dropout probability has to be between 0 and 1, but got %g",
                       p);
  bool train = lower_bool(ctx, 2, true);
  if (!train) {
    lower_set_result(ctx, 0, x);
    lower_set_result(ctx, 1, ir_splat(ctx->func, TPURT_DTYPE_BOOL, t->rank, t->sizes, 1.0));
    return NULL;
  }
  if (!is_float(t->dtype))
    return lower_error(TPURT_UNIMPLEMENTED, "dropout of %s tensors", tpurt_dtype_name(t->dtype));
  tpurt_dtype_t cd = draw_dtype(t->dtype);
  ir_func_t* f = ctx->func;
  /* keep = u < 1 - p, computed from the parameter p so its value can change */
  ir_value_t one = ir_splat(f, cd, t->rank, t->sizes, 1.0);
  ir_value_t pv = lower_broadcast_to(ctx, lower_scalar(ctx, 1, cd), t->rank, t->sizes);
  ir_value_t keep_p = ir_sub(f, one, pv);
  ir_value_t state = lower_rng_state(ctx, 3);
  ir_value_t mask = bernoulli_of(ctx, &state, keep_p, TPURT_DTYPE_BOOL);
  /* 1/(1-p), or 0 when p == 1 (everything dropped) */
  ir_value_t zero = ir_splat(f, cd, t->rank, t->sizes, 0.0);
  ir_value_t scale = ir_select(f, ir_compare(f, IR_EQ, keep_p, zero), zero, ir_div(f, one, keep_p));
  ir_value_t xs = ir_mul(f, lower_cast(ctx, x, cd), scale);
  ir_value_t out = ir_select(f, mask, xs, zero);
  lower_set_result(ctx, 0, lower_cast(ctx, out, t->dtype));
  lower_set_result(ctx, 1, mask);
  return NULL;
}

/* Sorted by name. */
/*===--- exponential_, cauchy_, log_normal_, geometric_ ---===*/

/* -log(1 - u) / lambda with u in [0, 1): exponential; 1 - u is in (0, 1]. */
static ir_value_t exponential_of(lower_ctx_t* ctx, ir_value_t* state, tpurt_dtype_t fdt,
                                 const tpurt_tensor_t* t) {
  ir_func_t* f = ctx->func;
  ir_value_t u = uniform01(ctx, state, fdt, t->rank, t->sizes);
  return ir_unary(f, IR_OP_NEGATE, ir_log(f, ir_sub(f, ir_const_like(f, u, 1.0), u)));
}

/* exponential_(self, lambd=1, *, generator) */
static TPURT_MUST_USE tpurt_status_t lower_exponential_(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "exponential_ not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  double lambd = lower_scalar_value(ctx, 1);
  if (!(lambd > 0.0))
    return lower_error(TPURT_INVALID_ARGUMENT, "exponential_ expects lambda > 0.0, but found lambda=%g",
                       lambd);
  tpurt_dtype_t cd = draw_dtype(t->dtype);
  ir_value_t state = lower_rng_state(ctx, 2);
  ir_value_t e = exponential_of(ctx, &state, cd, t);
  e = ir_div(ctx->func, e, scalar_like(ctx, 1, e));
  lower_set_result(ctx, 0, lower_cast(ctx, e, t->dtype));
  return NULL;
}

/* cauchy_(self, median=0, sigma=1, *, generator): median + sigma * tan(pi (u - 1/2)) */
static TPURT_MUST_USE tpurt_status_t lower_cauchy_(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "cauchy_ not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  if (!(lower_scalar_value(ctx, 2) > 0.0))
    return lower_error(TPURT_INVALID_ARGUMENT, "cauchy_ expects sigma > 0.0, but found sigma=%g",
                       lower_scalar_value(ctx, 2));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t cd = draw_dtype(t->dtype);
  ir_value_t state = lower_rng_state(ctx, 3);
  ir_value_t u = uniform01(ctx, &state, cd, t->rank, t->sizes);
  ir_value_t a = ir_mul(f, ir_sub(f, u, ir_const_like(f, u, 0.5)), ir_const_like(f, u, M_PI));
  ir_value_t r = ir_mul(f, ir_unary(f, IR_OP_TAN, a), scalar_like(ctx, 2, u));
  r = ir_add(f, r, scalar_like(ctx, 1, u));
  lower_set_result(ctx, 0, lower_cast(ctx, r, t->dtype));
  return NULL;
}

/* log_normal_(self, mean=1, std=2, *, generator): exp(N(mean, std)) */
static TPURT_MUST_USE tpurt_status_t lower_log_normal_(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "log_normal_ not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  if (!(lower_scalar_value(ctx, 2) > 0.0))
    return lower_error(TPURT_INVALID_ARGUMENT, "log_normal_ expects std > 0.0, but found std=%g",
                       lower_scalar_value(ctx, 2));
  ir_func_t* f = ctx->func;
  tpurt_dtype_t cd = draw_dtype(t->dtype);
  ir_value_t state = lower_rng_state(ctx, 3);
  ir_value_t z = std_normal(ctx, &state, cd, t->rank, t->sizes);
  z = ir_add(f, ir_mul(f, z, scalar_like(ctx, 2, z)), scalar_like(ctx, 1, z));
  lower_set_result(ctx, 0, lower_cast(ctx, ir_exp(f, z), t->dtype));
  return NULL;
}

/* geometric_(self, p, *, generator): the number of Bernoulli(p) trials up to the
** first success, ceil(log(1 - u) / log(1 - p)), at least 1 */
static TPURT_MUST_USE tpurt_status_t lower_geometric_(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  double p = lower_scalar_value(ctx, 1);
  if (!(p > 0.0 && p < 1.0))
    return lower_error(TPURT_INVALID_ARGUMENT, "geometric_ expects p to be in (0, 1), but got p=%g", p);
  ir_func_t* f = ctx->func;
  tpurt_dtype_t cd = TPURT_DTYPE_F64 == t->dtype ? TPURT_DTYPE_F64 : TPURT_DTYPE_F32;
  ir_value_t state = lower_rng_state(ctx, 2);
  ir_value_t e = exponential_of(ctx, &state, cd, t); /* -log(1 - u) */
  ir_value_t pp = scalar_like(ctx, 1, e);
  ir_value_t denom = ir_neg(f, ir_unary(f, IR_OP_LOG_PLUS_ONE, ir_neg(f, pp)));
  ir_value_t n = ir_unary(f, IR_OP_CEIL, ir_div(f, e, denom));
  n = ir_max(f, n, ir_const_like(f, n, 1.0));
  lower_set_result(ctx, 0, lower_cast(ctx, n, t->dtype));
  return NULL;
}

/* native_dropout_backward(grad_output, mask, scale): grad * mask * scale, in
** the promoted type (an int grad times the float scale is float) */
static TPURT_MUST_USE tpurt_status_t lower_native_dropout_backward(lower_ctx_t* ctx) {
  const tpurt_tensor_t* g = lower_meta(ctx, 0);
  int32_t idx[3] = {0, 1, 2};
  tpurt_dtype_t out = lower_result_type(ctx, idx, 3);
  tpurt_dtype_t acc = lower_acc_dtype(out);
  ir_func_t* f = ctx->func;
  ir_value_t gv = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  ir_value_t m = lower_broadcast_to(ctx, lower_cast(ctx, lower_tensor(ctx, 1), acc), g->rank, g->sizes);
  ir_value_t r = ir_mul(f, ir_mul(f, gv, m), scalar_like(ctx, 2, gv));
  lower_set_result(ctx, 0, lower_cast(ctx, r, out));
  return NULL;
}

/*===--- rrelu ---===*/

/* rrelu_with_noise(self, Tensor(b!) noise, lower, upper, training, generator?):
** training draws a slope r ~ U[lower, upper) for each element <= 0 (out =
** x * r) and records the slopes in |noise| (1 for the others), which the
** backward reads; evaluation is leaky_relu with the mean slope and leaves
** |noise| as it is. */
static TPURT_MUST_USE tpurt_status_t lower_rrelu_with_noise(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"rrelu_with_noise_out_cpu\" not implemented for '%s'",
                       tpurt_dtype_name(t->dtype));
  if (!(lower_scalar_value(ctx, 2) <= lower_scalar_value(ctx, 3)))
    return lower_error(TPURT_INVALID_ARGUMENT, "Lower bound should be less than or equal to the upper bound");
  ir_func_t* f = ctx->func;
  tpurt_dtype_t cd = draw_dtype(t->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), cd);
  ir_value_t lo = scalar_like(ctx, 2, x), hi = scalar_like(ctx, 3, x);
  ir_value_t neg = ir_compare(f, IR_LE, x, ir_const_like(f, x, 0.0));
  ir_value_t slope;
  if (lower_bool(ctx, 4, false)) {
    ir_value_t state = lower_rng_state(ctx, 5);
    ir_value_t u = uniform01(ctx, &state, cd, t->rank, t->sizes);
    slope = ir_select(f, neg, ir_add(f, lo, ir_mul(f, ir_sub(f, hi, lo), u)), ir_const_like(f, x, 1.0));
    lower_set_write(ctx, 1, slope);
  } else {
    slope =
        ir_select(f, neg, ir_mul(f, ir_add(f, lo, hi), ir_const_like(f, x, 0.5)), ir_const_like(f, x, 1.0));
  }
  lower_set_result(ctx, 0, lower_cast(ctx, ir_mul(f, x, slope), t->dtype));
  return NULL;
}

/*===--- randperm ---===*/

/* randperm.generator_out(int n, *, Generator? generator, Tensor(a!) out):
** 0..n-1 ordered by n random 64-bit keys. The sort is stable, so a tie (one
** in 2^64 for a pair) keeps the smaller number first. */
static TPURT_MUST_USE tpurt_status_t lower_randperm(lower_ctx_t* ctx) {
  int64_t n = lower_int(ctx, 0, 0);
  if (n < 0) /* sic: PyTorch's message has no space before the number */
    return lower_error(TPURT_INVALID_ARGUMENT, "n must be non-negative, got%lld", (long long)n);
  const tpurt_arg_t* out = &ctx->args[ctx->arg_index[ctx->num_args]];
  tpurt_dtype_t dt = out->kind == TPURT_ARG_TENSOR ? out->u.tensor.dtype : TPURT_DTYPE_I64;
  /* the largest number, n - 1, must be exact in the result's type (PyTorch checks these two) */
  if (dt == TPURT_DTYPE_F16 && n > (1LL << 11) + 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "n cannot be greater than 2049 for Half type.");
  if (dt == TPURT_DTYPE_F32 && n > (1LL << 24) + 1)
    return lower_error(TPURT_INVALID_ARGUMENT, "n cannot be greater than 2^24+1 for Float type.");
  ir_func_t* f = ctx->func;
  if (n == 0) {
    lower_set_result(ctx, 0, ir_splat(f, dt, 1, &n, 0.0));
    return NULL;
  }
  ir_value_t state = lower_rng_state(ctx, 1);
  ir_value_t inputs[2] = {draw_bits(ctx, &state, TPURT_DTYPE_U64, n),
                          ir_iota(f, ir_type_make(TPURT_DTYPE_I64, 1, &n), 0)};
  ir_value_t res[2], blk[4];
  ir_sort_begin(f, inputs, 2, 0, true, res, blk);
  ir_value_t before = ir_compare(f, IR_LT, blk[0], blk[1]);
  ir_region_end(f, &before, 1);
  lower_set_result(ctx, 0, lower_cast(ctx, res[1], dt));
  return NULL;
}

const lower_rule_t lower_random_rules[] = {
    LOWER_FN("aten::bernoulli", lower_bernoulli),
    LOWER_FN("aten::bernoulli.p", lower_bernoulli_float),
    LOWER_INPLACE_FN("aten::cauchy_", lower_cauchy_),
    LOWER_INPLACE_FN("aten::exponential_", lower_exponential_),
    LOWER_INPLACE_FN("aten::geometric_", lower_geometric_),
    LOWER_INPLACE_FN("aten::log_normal_", lower_log_normal_),
    LOWER_FN_WITH("aten::native_dropout", lower_native_dropout, .default_generator = true),
    LOWER_FN("aten::native_dropout_backward", lower_native_dropout_backward),
    LOWER_OUT_FN("aten::native_dropout_backward.out", lower_native_dropout_backward),
    LOWER_INPLACE_FN("aten::bernoulli_.Tensor", lower_bernoulli_tensor_),
    LOWER_INPLACE_FN("aten::bernoulli_.float", lower_bernoulli_float),
    LOWER_FN("aten::normal.Tensor_Tensor", lower_normal_tensor),
    LOWER_FN("aten::normal.Tensor_float", lower_normal_tensor),
    LOWER_FN("aten::normal.float_Tensor", lower_normal_tensor),
    LOWER_INPLACE_FN("aten::normal_", lower_normal_),
    LOWER_KEYED_OUT_FN("aten::randperm.generator_out", lower_randperm),
    LOWER_INPLACE_FN("aten::random_", lower_random_),
    LOWER_INPLACE_FN("aten::random_.from", lower_random_from),
    LOWER_INPLACE_FN("aten::random_.to", lower_random_to),
    LOWER_INPLACE_FN("aten::uniform_", lower_uniform_),
    LOWER_FN("aten::rrelu_with_noise", lower_rrelu_with_noise),
    LOWER_END,
};
