/* special.c: special functions and the pointwise math that elementwise.c
** leaves out: erfc, lgamma, digamma, polygamma, zeta, ndtri, log_ndtr,
** entr, sinc, logit, xlogy, xlog1py, hypot, copysign, fmax/fmin,
** logaddexp(2), heaviside, signbit, nan_to_num, round(decimals).
**
** The gamma family and erfc use the CHLO ops the plugin expands (XLA's
** own polynomial approximations). As in elementwise.c, ints and bool
** become float32 and half types compute in f32, rounding once. */
#include <math.h>

#include "../base/base.h"
#include "lower.h"

static ir_value_t is_nan(lower_ctx_t* ctx, ir_value_t x) { return ir_compare(ctx->func, IR_NE, x, x); }

/* The float dtype of a float op on |in|: itself, or float32 for ints/bool. */
static tpurt_dtype_t float_of(tpurt_dtype_t in) {
  return tpurt_dtype_is_float(in) ? in : LOWER_DEFAULT_FLOAT;
}

/* Schema args |idx| (tensors or numbers) as values of |dtype| broadcast to their common shape. */
static TPURT_MUST_USE tpurt_status_t operands(lower_ctx_t* ctx, const int32_t* idx, int32_t n,
                                              tpurt_dtype_t dtype, ir_value_t* out) {
  int32_t rank = 0;
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t i = 0; i < n; ++i) {
    const tpurt_tensor_t* t = lower_meta(ctx, idx[i]);
    if (t) TPURT_RETURN_IF_ERROR(lower_broadcast_shapes(rank, dims, t->rank, t->sizes, &rank, dims));
  }
  for (int32_t i = 0; i < n; ++i) {
    ir_value_t v = lower_meta(ctx, idx[i]) ? lower_cast(ctx, lower_tensor(ctx, idx[i]), dtype)
                                           : lower_scalar(ctx, idx[i], dtype);
    out[i] = lower_broadcast_to(ctx, v, rank, dims);
  }
  return NULL;
}

/* The dtype of the series and reflections below, whose terms cancel: f64
** where the platform has it (not a TPU), so that f32 results match CPU's
** own float kernels to a few ulp; elsewhere the op-math dtype. */
static tpurt_dtype_t precise_dtype(const lower_ctx_t* ctx, tpurt_dtype_t dt) {
  bool has_f64 = !ctx->platform || strcmp(ctx->platform, "tpu") != 0;
  return has_f64 ? TPURT_DTYPE_F64 : lower_acc_dtype(dt);
}

/*===--- unary ---===*/

/* Applies |fn| to arg 0 in the op-math dtype of its float dtype. */
static TPURT_MUST_USE tpurt_status_t float_unary(lower_ctx_t* ctx, lower_unary_formula_t fn) {
  tpurt_dtype_t dt = float_of(lower_meta(ctx, 0)->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), lower_acc_dtype(dt));
  lower_set_result(ctx, 0, lower_cast(ctx, fn(ctx, x), dt));
  return NULL;
}

/* float_unary of the row's formula (.unary) */
static TPURT_MUST_USE tpurt_status_t float_unary_row(lower_ctx_t* ctx) {
  return float_unary(ctx, lower_rule_data(ctx)->unary);
}

static ir_value_t erfc_of(lower_ctx_t* ctx, ir_value_t x) { return ir_unary(ctx->func, IR_OP_ERFC, x); }
static ir_value_t lgamma_of(lower_ctx_t* ctx, ir_value_t x) { return ir_unary(ctx->func, IR_OP_LGAMMA, x); }
/* digamma; at +-0 PyTorch gives -+inf (chlo.digamma gives NaN there) */
static ir_value_t digamma_of(lower_ctx_t* ctx, ir_value_t x) {
  ir_func_t* f = ctx->func;
  ir_value_t r = ir_unary(f, IR_OP_DIGAMMA, x);
  ir_value_t inf =
      ir_select(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, 0.0)), ir_const_like(f, x, INFINITY), r);
  /* the sign: -inf at +0, +inf at -0: 1/x is +-inf with x's sign */
  ir_value_t signed_inf = ir_neg(f, ir_div(f, ir_const_like(f, x, 1.0), x));
  return ir_select(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, 0.0)), signed_inf, inf);
}

/* sinc(x) = sin(pi x) / (pi x), 1 at 0 */
static ir_value_t sinc_of(lower_ctx_t* ctx, ir_value_t x) {
  ir_value_t px = ir_mul(ctx->func, x, ir_const_like(ctx->func, x, M_PI));
  ir_value_t r = ir_div(ctx->func, ir_unary(ctx->func, IR_OP_SINE, px), px);
  return ir_select(ctx->func, ir_compare(ctx->func, IR_EQ, x, ir_const_like(ctx->func, x, 0.0)),
                   ir_const_like(ctx->func, x, 1.0), r);
}

/* entr(x) = -x log x for x > 0, 0 at 0, -inf below */
static ir_value_t entr_of(lower_ctx_t* ctx, ir_value_t x) {
  ir_func_t* f = ctx->func;
  ir_value_t r = ir_neg(f, ir_mul(f, x, ir_log(f, x)));
  r = ir_select(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, 0.0)), ir_const_like(f, x, 0.0), r);
  return ir_select(f, ir_compare(f, IR_LT, x, ir_const_like(f, x, 0.0)), ir_const_like(f, x, -INFINITY), r);
}

/* ndtri(p) = sqrt(2) erfinv(2p - 1) */
static ir_value_t ndtri_of(lower_ctx_t* ctx, ir_value_t p) {
  ir_value_t t = ir_sub(ctx->func, ir_mul(ctx->func, p, ir_const_like(ctx->func, p, 2.0)),
                        ir_const_like(ctx->func, p, 1.0));
  return ir_mul(ctx->func, ir_unary(ctx->func, IR_OP_ERF_INV, t), ir_const_like(ctx->func, p, M_SQRT2));
}

/* log_ndtr(x) = log(erfc(-x / sqrt 2) / 2) */
static ir_value_t log_ndtr_of(lower_ctx_t* ctx, ir_value_t x) {
  ir_value_t t = ir_mul(ctx->func, x, ir_const_like(ctx->func, x, -M_SQRT1_2));
  ir_value_t c = ir_mul(ctx->func, ir_unary(ctx->func, IR_OP_ERFC, t), ir_const_like(ctx->func, x, 0.5));
  return ir_log(ctx->func, c);
}

/* logit(self, eps?) = log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given */
static TPURT_MUST_USE tpurt_status_t lower_logit(lower_ctx_t* ctx) {
  tpurt_dtype_t dt = float_of(lower_meta(ctx, 0)->dtype);
  tpurt_dtype_t acc = lower_acc_dtype(dt);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), acc);
  if (!lower_is_none(ctx, 1)) {
    const ir_type_t* t = ir_value_type(ctx->func, x);
    ir_value_t eps = lower_broadcast_to(ctx, lower_scalar(ctx, 1, acc), t->rank, t->dims);
    ir_value_t hi = ir_sub(ctx->func, ir_const_like(ctx->func, x, 1.0), eps);
    ir_value_t clamped = ir_min(ctx->func, ir_max(ctx->func, x, eps), hi);
    x = ir_select(ctx->func, is_nan(ctx, x), x, clamped); /* NaN stays NaN */
  }
  ir_value_t r = ir_unary(ctx->func, IR_OP_LOG,
                          ir_div(ctx->func, x, ir_sub(ctx->func, ir_const_like(ctx->func, x, 1.0), x)));
  lower_set_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

/* signbit: the sign bit, so -0.0 and -NaN count as negative */
static TPURT_MUST_USE tpurt_status_t lower_signbit(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_value_t x = lower_tensor(ctx, 0);
  ir_func_t* f = ctx->func;
  if (!tpurt_dtype_is_float(t->dtype)) {
    lower_set_result(ctx, 0,
                     t->dtype == TPURT_DTYPE_BOOL || t->dtype == TPURT_DTYPE_U8
                         ? ir_compare(f, IR_NE, x, x)
                         : ir_compare(f, IR_LT, x, ir_const_like(f, x, 0.0)));
    return NULL;
  }
  tpurt_dtype_t bits = tpurt_dtype_size(t->dtype) == 8   ? TPURT_DTYPE_I64
                       : tpurt_dtype_size(t->dtype) == 4 ? TPURT_DTYPE_I32
                                                         : TPURT_DTYPE_I16;
  const ir_type_t* xt = ir_value_type(f, x);
  ir_type_t it = *xt;
  it.dtype = bits;
  ir_value_t b = ir_bitcast_convert(f, x, it);
  lower_set_result(ctx, 0, ir_compare(f, IR_LT, b, ir_const_like(f, b, 0.0)));
  return NULL;
}

/* nan_to_num(self, nan?, posinf?, neginf?): defaults 0 and the dtype's finite extremes */
static double finite_max(tpurt_dtype_t d) {
  switch (d) {
    case TPURT_DTYPE_BF16:
      return 3.3895313892515355e38;
    case TPURT_DTYPE_F16:
      return 65504.0;
    case TPURT_DTYPE_F64:
      return 1.7976931348623157e308;
    default:
      return 3.4028234663852886e38;
  }
}

static TPURT_MUST_USE tpurt_status_t lower_nan_to_num(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  ir_value_t x = lower_tensor(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype)) {
    lower_set_result(ctx, 0, x);
    return NULL;
  }
  ir_func_t* f = ctx->func;
  ir_value_t nan = lower_is_none(ctx, 1)
                       ? ir_const_like(f, x, 0.0)
                       : lower_broadcast_to(ctx, lower_scalar(ctx, 1, t->dtype), t->rank, t->sizes);
  ir_value_t pos = lower_is_none(ctx, 2)
                       ? ir_const_like(f, x, finite_max(t->dtype))
                       : lower_broadcast_to(ctx, lower_scalar(ctx, 2, t->dtype), t->rank, t->sizes);
  ir_value_t neg = lower_is_none(ctx, 3)
                       ? ir_const_like(f, x, -finite_max(t->dtype))
                       : lower_broadcast_to(ctx, lower_scalar(ctx, 3, t->dtype), t->rank, t->sizes);
  ir_value_t r = ir_select(f, is_nan(ctx, x), nan, x);
  r = ir_select(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, INFINITY)), pos, r);
  r = ir_select(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, -INFINITY)), neg, r);
  lower_set_result(ctx, 0, r);
  return NULL;
}

/* round.decimals(self, decimals): round half to even at 10^-decimals, as CPU's nearbyint */
static TPURT_MUST_USE tpurt_status_t lower_round_decimals(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  int64_t d = lower_int(ctx, 1, 0);
  ir_value_t x = lower_tensor(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype)) {
    if (d != 0)
      return lower_error(TPURT_INVALID_ARGUMENT, "round_cpu not implemented for '%s' with decimals",
                         tpurt_dtype_name(t->dtype));
    lower_set_result(ctx, 0, x);
    return NULL;
  }
  tpurt_dtype_t acc = lower_acc_dtype(t->dtype);
  x = lower_cast(ctx, x, acc);
  double scale = pow(10.0, (double)(d < 0 ? -d : d));
  ir_value_t s = ir_const_like(ctx->func, x, scale);
  ir_value_t r;
  if (d >= 0)
    r = ir_binary(ctx->func, IR_OP_DIVIDE,
                  ir_unary(ctx->func, IR_OP_ROUND_NEAREST_EVEN, ir_mul(ctx->func, x, s)), s);
  else
    r = ir_binary(ctx->func, IR_OP_MULTIPLY,
                  ir_unary(ctx->func, IR_OP_ROUND_NEAREST_EVEN, ir_div(ctx->func, x, s)), s);
  lower_set_result(ctx, 0, lower_cast(ctx, r, t->dtype));
  return NULL;
}

/* The bit layout of a float dtype: its same-width int, mantissa bits, exponent bias. */
typedef struct float_bits_s {
  tpurt_dtype_t int_dtype;
  int32_t mant, exp_bits, bias;
} float_bits_t;

static float_bits_t float_bits(tpurt_dtype_t d) {
  switch (d) {
    case TPURT_DTYPE_F64:
      return (float_bits_t){TPURT_DTYPE_I64, 52, 11, 1023};
    case TPURT_DTYPE_F16:
      return (float_bits_t){TPURT_DTYPE_I16, 10, 5, 15};
    case TPURT_DTYPE_BF16:
      return (float_bits_t){TPURT_DTYPE_I16, 7, 8, 127};
    default:
      return (float_bits_t){TPURT_DTYPE_I32, 23, 8, 127};
  }
}

static ir_value_t as_bits(lower_ctx_t* ctx, ir_value_t x, tpurt_dtype_t int_dtype) {
  ir_type_t t = *ir_value_type(ctx->func, x);
  t.dtype = int_dtype;
  return ir_bitcast_convert(ctx->func, x, t);
}

/* frexp(self) -> (mantissa, exponent): x = mantissa * 2^exponent with
** |mantissa| in [0.5, 1), read from the bits (subnormals first scaled into
** the normal range); 0, inf and NaN give themselves and exponent 0, as C. */
static TPURT_MUST_USE tpurt_status_t lower_frexp(lower_ctx_t* ctx) {
  const tpurt_tensor_t* t = lower_meta(ctx, 0);
  if (!tpurt_dtype_is_float(t->dtype))
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "torch.frexp() only supports floating-point dtypes, but got %s",
                       lower_dtype_cpp_name(t->dtype));
  ir_func_t* f = ctx->func;
  float_bits_t fb = float_bits(t->dtype);
  ir_value_t x = lower_tensor(ctx, 0);
  ir_value_t ax = ir_abs(f, x);
  ir_value_t sub = ir_compare(f, IR_LT, ax, ir_const_like(f, x, ldexp(1.0, 1 - fb.bias)));
  ir_value_t xs = ir_select(f, sub, ir_mul(f, x, ir_const_like(f, x, ldexp(1.0, fb.mant + 1))), x);
  ir_value_t bits = as_bits(ctx, xs, fb.int_dtype);
  int64_t exp_mask = ((int64_t)1 << fb.exp_bits) - 1;
  ir_value_t field = ir_binary(
      f, IR_OP_AND, ir_binary(f, IR_OP_SHIFT_RIGHT_LOGICAL, bits, ir_const_like(f, bits, (double)fb.mant)),
      ir_const_like(f, bits, (double)exp_mask));
  ir_value_t e = ir_sub(f, field, ir_const_like(f, field, (double)(fb.bias - 1)));
  e = ir_select(f, sub, ir_sub(f, e, ir_const_like(f, e, (double)(fb.mant + 1))), e);
  /* keep sign and mantissa, set the exponent field to bias - 1 (2^-1) */
  int64_t clear = ~(exp_mask << fb.mant);
  if (fb.int_dtype == TPURT_DTYPE_I16) clear = (int16_t)clear;
  if (fb.int_dtype == TPURT_DTYPE_I32) clear = (int32_t)clear;
  ir_value_t clear_v = ir_constant_i64(f, fb.int_dtype, clear);
  const ir_type_t* bt = ir_value_type(f, bits);
  clear_v = ir_broadcast_in_dim(f, clear_v, bt->rank, bt->dims, NULL);
  ir_value_t half_exp = ir_constant_i64(f, fb.int_dtype, (int64_t)(fb.bias - 1) << fb.mant);
  half_exp = ir_broadcast_in_dim(f, half_exp, bt->rank, bt->dims, NULL);
  ir_value_t mbits = ir_or(f, ir_and(f, bits, clear_v), half_exp);
  ir_value_t mant = ir_bitcast_convert(f, mbits, *ir_value_type(f, x));
  ir_value_t special =
      ir_or(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, 0.0)), ir_not(f, ir_is_finite(f, x)));
  lower_set_result(ctx, 0, ir_select(f, special, x, mant));
  e = ir_convert(f, e, TPURT_DTYPE_I32);
  lower_set_result(ctx, 1, ir_select(f, special, ir_const_like(f, e, 0.0), e));
  return NULL;
}

/*===--- Bessel functions, erfcx ---===*/
/* Each is a power series (exact in f64 where the terms do not cancel much)
** joined to its large-x asymptotic expansion. The coefficients are computed
** here; the device evaluates polynomials by Horner's rule. */

#define BESSEL_SERIES_TERMS 64
#define BESSEL_ASYMPTOTIC_TERMS 20
#define EULER_GAMMA 0.57721566490153286061

/* sum_k c[k] t^k */
static ir_value_t horner(lower_ctx_t* ctx, ir_value_t t, const double* c, int32_t n) {
  ir_value_t r = ir_const_like(ctx->func, t, c[n - 1]);
  for (int32_t i = n - 2; i >= 0; --i)
    r = ir_add(ctx->func, ir_mul(ctx->func, r, t), ir_const_like(ctx->func, t, c[i]));
  return r;
}

/* The power series sum_k sign^k w_k (x^2/4)^k / (k! (k + nu)!), where w_k
** is 1, or psi(k + 1) + psi(k + 1 + nu) when |with_psi|. */
static ir_value_t bessel_series(lower_ctx_t* ctx, ir_value_t x, int32_t nu, double sign, bool with_psi) {
  double c[BESSEL_SERIES_TERMS];
  double fact_k = 1.0, harmonic = 0.0, sgn = 1.0; /* k!, H_k = psi(k + 1) + gamma */
  for (int32_t i = 0; i < BESSEL_SERIES_TERMS; ++i) {
    if (i > 0) {
      fact_k *= i;
      harmonic += 1.0 / i;
    }
    double fact_kn = nu ? fact_k * (i + 1) : fact_k; /* (k + nu)!, nu in {0, 1} */
    double psi_k = harmonic - EULER_GAMMA;
    double psi_kn = nu ? psi_k + 1.0 / (i + 1) : psi_k;
    c[i] = sgn / (fact_k * fact_kn) * (with_psi ? psi_k + psi_kn : 1.0);
    sgn *= sign;
  }
  ir_value_t t = ir_mul(ctx->func, ir_mul(ctx->func, x, x), ir_const_like(ctx->func, x, 0.25));
  return horner(ctx, t, c, BESSEL_SERIES_TERMS);
}

/* sum_k s_k a_k(nu) / x^k, a_k = prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (k! 8^k), s_k = sign^k;
** |parity| 1 keeps the even k only, 2 the odd k only, with s_k = (-1)^floor(k/2) (Hankel's
** P and Q); 0 keeps every term. */
static ir_value_t bessel_asymptotic(lower_ctx_t* ctx, ir_value_t x, int32_t nu, double sign, int32_t parity) {
  double c[BESSEL_ASYMPTOTIC_TERMS], a = 1.0, sgn = 1.0;
  double mu = 4.0 * nu * nu;
  for (int32_t i = 0; i < BESSEL_ASYMPTOTIC_TERMS; ++i) {
    if (i > 0) a *= (mu - (2.0 * i - 1) * (2.0 * i - 1)) / (8.0 * i);
    bool keep = parity == 0 || (parity == 1 && i % 2 == 0) || (parity == 2 && i % 2 == 1);
    double s_k = parity ? ((i / 2) % 2 ? -1.0 : 1.0) : sgn;
    c[i] = keep ? s_k * a : 0.0;
    sgn *= sign;
  }
  ir_value_t w = ir_div(ctx->func, ir_const_like(ctx->func, x, 1.0), x);
  return horner(ctx, w, c, BESSEL_ASYMPTOTIC_TERMS);
}

static ir_value_t where(lower_ctx_t* ctx, ir_compare_dir_t dir, ir_value_t a, double b, ir_value_t t,
                        ir_value_t e) {
  return ir_select(ctx->func, ir_compare(ctx->func, dir, a, ir_const_like(ctx->func, a, b)), t, e);
}

/* I_nu(|x|) e^(-|x| if scaled): series up to 30, asymptotic above */
static ir_value_t bessel_i_abs(lower_ctx_t* ctx, ir_value_t ax, int32_t nu, bool scaled) {
  ir_value_t s = bessel_series(ctx, ax, nu, 1.0, false);
  if (nu) s = ir_mul(ctx->func, s, ir_mul(ctx->func, ax, ir_const_like(ctx->func, ax, 0.5)));
  if (scaled) s = ir_mul(ctx->func, s, ir_exp(ctx->func, ir_neg(ctx->func, ax)));
  ir_value_t a = ir_div(ctx->func, bessel_asymptotic(ctx, ax, nu, -1.0, 0),
                        ir_sqrt(ctx->func, ir_mul(ctx->func, ax, ir_const_like(ctx->func, ax, 2.0 * M_PI))));
  if (!scaled) a = ir_mul(ctx->func, a, ir_exp(ctx->func, ax));
  return where(ctx, IR_LE, ax, 30.0, s, a);
}

static ir_value_t bessel_i(lower_ctx_t* ctx, ir_value_t x, int32_t nu, bool scaled) {
  ir_value_t r = bessel_i_abs(ctx, ir_abs(ctx->func, x), nu, scaled);
  return nu ? where(ctx, IR_LT, x, 0.0, ir_neg(ctx->func, r), r) : r; /* I1 is odd */
}

/* J_nu and Y_nu: series up to 12, Hankel's expansion above
** (J = sqrt(2 / (pi x)) (P cos chi - Q sin chi), Y = ... (P sin chi + Q cos chi)) */
static ir_value_t bessel_jy(lower_ctx_t* ctx, ir_value_t x, int32_t nu, bool y) {
  ir_value_t ax = ir_abs(ctx->func, x);
  ir_value_t half = ir_mul(ctx->func, ax, ir_const_like(ctx->func, ax, 0.5));
  ir_value_t j = bessel_series(ctx, ax, nu, -1.0, false);
  if (nu) j = ir_mul(ctx->func, j, half);
  ir_value_t series = j;
  if (y) {
    ir_value_t lg = ir_mul(ctx->func, ir_log(ctx->func, half), ir_const_like(ctx->func, ax, 2.0 / M_PI));
    ir_value_t psi = bessel_series(ctx, ax, nu, -1.0, true);
    if (nu) {
      series =
          ir_sub(ctx->func, ir_mul(ctx->func, lg, j),
                 ir_mul(ctx->func, ir_mul(ctx->func, half, ir_const_like(ctx->func, ax, 1.0 / M_PI)), psi));
      series = ir_sub(ctx->func, series, ir_div(ctx->func, ir_const_like(ctx->func, ax, 2.0 / M_PI), ax));
    } else {
      series = ir_sub(ctx->func, ir_mul(ctx->func, lg, j),
                      ir_mul(ctx->func, psi, ir_const_like(ctx->func, ax, 1.0 / M_PI)));
    }
  }
  ir_value_t p = bessel_asymptotic(ctx, ax, nu, -1.0, 1);
  ir_value_t q = bessel_asymptotic(ctx, ax, nu, -1.0, 2);
  ir_value_t chi = ir_sub(ctx->func, ax, ir_const_like(ctx->func, ax, (nu * 0.5 + 0.25) * M_PI));
  ir_value_t c = ir_unary(ctx->func, IR_OP_COSINE, chi), s = ir_unary(ctx->func, IR_OP_SINE, chi);
  ir_value_t amp = ir_sqrt(ctx->func, ir_div(ctx->func, ir_const_like(ctx->func, ax, 2.0 / M_PI), ax));
  ir_value_t asym =
      y ? ir_mul(ctx->func, amp, ir_add(ctx->func, ir_mul(ctx->func, p, s), ir_mul(ctx->func, q, c)))
        : ir_mul(ctx->func, amp, ir_sub(ctx->func, ir_mul(ctx->func, p, c), ir_mul(ctx->func, q, s)));
  ir_value_t r = where(ctx, IR_LE, ax, 12.0, series, asym);
  if (y) { /* Y: -inf at 0, NaN below */
    r = where(ctx, IR_EQ, x, 0.0, ir_const_like(ctx->func, x, -INFINITY), r);
    return where(ctx, IR_LT, x, 0.0, ir_const_like(ctx->func, x, NAN), r);
  }
  return nu ? where(ctx, IR_LT, x, 0.0, ir_neg(ctx->func, r), r) : r; /* J1 is odd */
}

/* K_nu (times e^x if scaled): series up to 9, asymptotic above; inf at 0, NaN below */
static ir_value_t bessel_k(lower_ctx_t* ctx, ir_value_t x, int32_t nu, bool scaled) {
  ir_value_t half = ir_mul(ctx->func, x, ir_const_like(ctx->func, x, 0.5));
  ir_value_t lg = ir_log(ctx->func, half);
  ir_value_t i = bessel_series(ctx, x, nu, 1.0, false);
  ir_value_t psi = bessel_series(ctx, x, nu, 1.0, true);
  ir_value_t series;
  if (nu) {
    series = ir_add(ctx->func, ir_div(ctx->func, ir_const_like(ctx->func, x, 1.0), x),
                    ir_mul(ctx->func, lg, ir_mul(ctx->func, i, half)));
    series = ir_sub(ctx->func, series,
                    ir_mul(ctx->func, ir_mul(ctx->func, half, ir_const_like(ctx->func, x, 0.5)), psi));
  } else {
    series =
        ir_sub(ctx->func, ir_mul(ctx->func, psi, ir_const_like(ctx->func, x, 0.5)), ir_mul(ctx->func, lg, i));
  }
  if (scaled) series = ir_mul(ctx->func, series, ir_exp(ctx->func, x));
  ir_value_t a = ir_mul(ctx->func, bessel_asymptotic(ctx, x, nu, 1.0, 0),
                        ir_sqrt(ctx->func, ir_div(ctx->func, ir_const_like(ctx->func, x, M_PI / 2.0), x)));
  if (!scaled) a = ir_mul(ctx->func, a, ir_exp(ctx->func, ir_neg(ctx->func, x)));
  ir_value_t r = where(ctx, IR_LE, x, 9.0, series, a);
  r = where(ctx, IR_EQ, x, 0.0, ir_const_like(ctx->func, x, INFINITY), r);
  return where(ctx, IR_LT, x, 0.0, ir_const_like(ctx->func, x, NAN), r);
}

/* spherical j0(x) = sin(x) / x: 1 at 0, 0 at +-inf */
static ir_value_t spherical_j0_of(lower_ctx_t* ctx, ir_value_t x) {
  ir_value_t r = ir_div(ctx->func, ir_unary(ctx->func, IR_OP_SINE, x), x);
  r = where(ctx, IR_EQ, x, 0.0, ir_const_like(ctx->func, x, 1.0), r);
  return where(ctx, IR_EQ, ir_abs(ctx->func, x), INFINITY, ir_const_like(ctx->func, x, 0.0), r);
}

/* erfcx(x) = e^(x^2) erfc(x); above 25 (where erfc underflows) its
** asymptotic series 1 / (x sqrt(pi)) sum_k (-1)^k (2k - 1)!! / (2 x^2)^k.
** |x2_dtype|: CPU squares x in the input's float dtype (e^(x^2) then carries
** that rounding, visible below -6), so do we. */
static ir_value_t erfcx_in(lower_ctx_t* ctx, ir_value_t x, tpurt_dtype_t x2_dtype) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  ir_value_t x2 = lower_cast(ctx, lower_cast(ctx, ir_mul(ctx->func, x, x), x2_dtype), t->dtype);
  ir_value_t direct = ir_mul(ctx->func, ir_exp(ctx->func, x2), ir_unary(ctx->func, IR_OP_ERFC, x));
  double c[12], a = 1.0;
  for (int32_t i = 0; i < 12; ++i) {
    c[i] = a;
    a *= -(2.0 * i + 1) / 2.0;
  }
  ir_value_t w = ir_div(ctx->func, ir_const_like(ctx->func, x, 1.0), ir_mul(ctx->func, x, x));
  ir_value_t asym =
      ir_div(ctx->func, horner(ctx, w, c, 12), ir_mul(ctx->func, x, ir_const_like(ctx->func, x, sqrt(M_PI))));
  return where(ctx, IR_GT, x, 25.0, asym, direct);
}

/* Applies |fn| in the precise dtype (see precise_dtype); ints become float32. */
static TPURT_MUST_USE tpurt_status_t precise_unary(lower_ctx_t* ctx, lower_unary_formula_t fn) {
  tpurt_dtype_t dt = float_of(lower_meta(ctx, 0)->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), precise_dtype(ctx, dt));
  lower_set_result(ctx, 0, lower_cast(ctx, fn(ctx, x), dt));
  return NULL;
}

/* Airy Ai(x). For |x| <= 6 its Maclaurin series, Ai(0) f(x) + Ai'(0) g(x)
** with f = sum 3^k (1/3)_k x^3k / (3k)! and g = sum 3^k (2/3)_k x^(3k+1) /
** (3k+1)! (its terms reach e^zeta ~ 2e4 at 6, fine in f64); beyond, the
** asymptotic expansions in zeta = 2/3 |x|^(3/2) (DLMF 9.7.5 and 9.7.9), with
** u_0 = 1, u_k = (6k-5)(6k-3)(6k-1) / ((2k-1) 216 k) u_(k-1): a decay
** e^-zeta / (2 sqrt(pi) x^(1/4)) for x > 6, an oscillation for x < -6; ten
** terms are within 1e-8 there. NaN at both infinities, as PyTorch gives.
** (PyTorch's own kernel is 2.8e-6 off around -2.1, e.g. 0.1634873 for
** mpmath's Ai(-2.1) = 0.1634845; this series gives mpmath's value.) */
#define AIRY_SERIES_TERMS 40
#define AIRY_ASYMPTOTIC_TERMS 10
static ir_value_t airy_ai_of(lower_ctx_t* ctx, ir_value_t x) {
  ir_func_t* f = ctx->func;
  const double ai0 = 0.355028053887817239, dai0 = -0.258819403792806798;
  ir_value_t x3 = ir_mul(f, ir_mul(f, x, x), x);
  ir_value_t tf = ir_const_like(f, x, 1.0), tg = x, sf = tf, sg = tg;
  for (int32_t k = 1; k <= AIRY_SERIES_TERMS; ++k) {
    tf = ir_mul(f, tf, ir_div(f, x3, ir_const_like(f, x, (double)((3 * k - 1) * (3 * k)))));
    tg = ir_mul(f, tg, ir_div(f, x3, ir_const_like(f, x, (double)((3 * k) * (3 * k + 1)))));
    sf = ir_add(f, sf, tf);
    sg = ir_add(f, sg, tg);
  }
  ir_value_t series =
      ir_add(f, ir_mul(f, ir_const_like(f, x, ai0), sf), ir_mul(f, ir_const_like(f, x, dai0), sg));
  /* away from 0: |x| >= 6 there, so zeta >= 9.8 */
  ir_value_t ax = where(ctx, IR_LT, ir_abs(f, x), 6.0, ir_const_like(f, x, 6.0), ir_abs(f, x));
  ir_value_t zeta = ir_mul(f, ir_const_like(f, x, 2.0 / 3.0), ir_mul(f, ax, ir_sqrt(f, ax)));
  ir_value_t inv = ir_div(f, ir_const_like(f, x, 1.0), zeta);
  double u = 1.0;
  ir_value_t all = ir_const_like(f, x, 0.0), even = all, odd = all, power = ir_const_like(f, x, 1.0);
  for (int32_t k = 0; k <= AIRY_ASYMPTOTIC_TERMS; ++k) {
    if (k > 0) u *= (double)((6 * k - 5) * (6 * k - 3) * (6 * k - 1)) / ((double)(2 * k - 1) * 216.0 * k);
    ir_value_t term = ir_mul(f, power, ir_const_like(f, x, u));
    all = (k % 2 ? ir_sub : ir_add)(f, all, term);                         /* sum (-1)^k u_k / zeta^k */
    if (k % 2 == 0) even = ((k / 2) % 2 ? ir_sub : ir_add)(f, even, term); /* (-1)^j u_2j / zeta^2j */
    if (k % 2 == 1) odd = ((k / 2) % 2 ? ir_sub : ir_add)(f, odd, term);   /* (-1)^j u_2j+1 ... */
    power = ir_mul(f, power, inv);
  }
  ir_value_t quarter = ir_sqrt(f, ir_sqrt(f, ax)); /* x^(1/4) */
  ir_value_t decay = ir_div(f, ir_mul(f, ir_exp(f, ir_neg(f, zeta)), all),
                            ir_mul(f, ir_const_like(f, x, 2.0 * sqrt(M_PI)), quarter));
  ir_value_t phase = ir_sub(f, zeta, ir_const_like(f, x, M_PI / 4.0));
  ir_value_t wave = ir_add(f, ir_mul(f, ir_unary(f, IR_OP_COSINE, phase), even),
                           ir_mul(f, ir_unary(f, IR_OP_SINE, phase), odd));
  wave = ir_div(f, wave, ir_mul(f, ir_const_like(f, x, sqrt(M_PI)), quarter));
  ir_value_t r = where(ctx, IR_GT, x, 6.0, decay, where(ctx, IR_LT, x, -6.0, wave, series));
  return where(ctx, IR_EQ, ir_abs(f, x), INFINITY, ir_const_like(f, x, NAN), r); /* as PyTorch's CPU kernel */
}

/* precise_unary of the row's formula (.unary) */
static TPURT_MUST_USE tpurt_status_t precise_unary_row(lower_ctx_t* ctx) {
  return precise_unary(ctx, lower_rule_data(ctx)->unary);
}

/* The Bessel function a row names: its .kind (a bessel_kind_t), .order
** (nu) and .flag (exponentially scaled). */
typedef enum bessel_kind_e { BESSEL_I, BESSEL_J, BESSEL_Y, BESSEL_K, BESSEL_SPHERICAL_J } bessel_kind_t;
static ir_value_t bessel_of_row(lower_ctx_t* ctx, ir_value_t x) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  int32_t nu = row->order;
  bool scaled = row->flag;
  switch ((bessel_kind_t)row->kind) {
    case BESSEL_I:
      return bessel_i(ctx, x, nu, scaled);
    case BESSEL_J:
      return bessel_jy(ctx, x, nu, false);
    case BESSEL_Y:
      return bessel_jy(ctx, x, nu, true);
    case BESSEL_K:
      return bessel_k(ctx, x, nu, scaled);
    case BESSEL_SPHERICAL_J:
      return spherical_j0_of(ctx, x);
  }
  return IR_NONE;
}
static TPURT_MUST_USE tpurt_status_t bessel_row(lower_ctx_t* ctx) {
  return precise_unary(ctx, bessel_of_row);
}
static TPURT_MUST_USE tpurt_status_t lower_erfcx(lower_ctx_t* ctx) {
  tpurt_dtype_t dt = float_of(lower_meta(ctx, 0)->dtype);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 0), precise_dtype(ctx, dt));
  lower_set_result(ctx, 0, lower_cast(ctx, erfcx_in(ctx, x, lower_acc_dtype(dt)), dt));
  return NULL;
}

/*===--- binary ---===*/

/*===--- orthogonal polynomials of a tensor degree ---===*/
/* T, U, V, W (Chebyshev, plain and shifted), H and He (Hermite), L
** (Laguerre), P (Legendre) of degree n, an elementwise tensor. The three-term
** recurrence runs on the device as a stablehlo.while up to the largest n
** (each element keeps the value at its own n), in the result's dtype, as
** CPU's float kernels do; CPU's special cases (|x| = 1, the trigonometric
** form of Chebyshev for n > 6 or 8 inside (-1, 1), n < 0) follow as selects. */

typedef enum poly_kind_e { POLY_T, POLY_U, POLY_V, POLY_W, POLY_H, POLY_HE, POLY_L, POLY_P } poly_kind_t;

/* degree-1 value */
static ir_value_t poly_first(lower_ctx_t* ctx, poly_kind_t kind, ir_value_t x) {
  ir_value_t two_x = ir_add(ctx->func, x, x);
  switch (kind) {
    case POLY_U:
    case POLY_H:
      return two_x;
    case POLY_V:
      return ir_sub(ctx->func, two_x, ir_const_like(ctx->func, x, 1.0));
    case POLY_W:
      return ir_add(ctx->func, two_x, ir_const_like(ctx->func, x, 1.0));
    case POLY_L:
      return ir_sub(ctx->func, ir_const_like(ctx->func, x, 1.0), x);
    default:
      return x;
  }
}

/* The value of degree j + 1 from those of degrees j - 1 (p) and j (q); |j| as x's dtype */
static ir_value_t poly_step(lower_ctx_t* ctx, poly_kind_t kind, ir_value_t x, ir_value_t j, ir_value_t p,
                            ir_value_t q) {
  ir_value_t two_x = ir_add(ctx->func, x, x), jp = ir_mul(ctx->func, j, p),
             j1 = ir_add(ctx->func, j, ir_const_like(ctx->func, j, 1.0));
  switch (kind) {
    case POLY_H: /* 2x q - 2j p */
      return ir_sub(ctx->func, ir_mul(ctx->func, two_x, q), ir_add(ctx->func, jp, jp));
    case POLY_HE: /* x q - j p */
      return ir_sub(ctx->func, ir_mul(ctx->func, x, q), jp);
    case POLY_L: /* ((2j + (1 - x)) q - j p) / (j + 1) */
      return ir_div(ctx->func,
                    ir_sub(ctx->func,
                           ir_mul(ctx->func,
                                  ir_add(ctx->func, ir_add(ctx->func, j, j),
                                         ir_sub(ctx->func, ir_const_like(ctx->func, x, 1.0), x)),
                                  q),
                           jp),
                    j1);
    case POLY_P: /* ((2j + 1) x q - j p) / (j + 1) */
      return ir_div(
          ctx->func,
          ir_sub(
              ctx->func,
              ir_mul(ctx->func,
                     ir_mul(ctx->func,
                            ir_add(ctx->func, ir_add(ctx->func, j, j), ir_const_like(ctx->func, j, 1.0)), x),
                     q),
              jp),
          j1);
    default: /* Chebyshev: 2x q - p */
      return ir_sub(ctx->func, ir_mul(ctx->func, two_x, q), p);
  }
}

static TPURT_MUST_USE tpurt_status_t orthogonal_poly(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  poly_kind_t kind = (poly_kind_t)row->kind;
  bool shifted = row->flag;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = float_of(lower_result_type(ctx, idx, 2));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  ir_func_t* f = ctx->func;
  ir_value_t x = v[0];
  if (shifted) x = ir_sub(f, ir_add(f, x, x), ir_const_like(f, x, 1.0)); /* as CPU: x + x - 1 */
  ir_value_t n = ir_convert(f, v[1], TPURT_DTYPE_I64);                   /* truncated, as CPU's cast */
  ir_value_t nf = ir_convert(f, n, dt);
  const ir_type_t* xt = ir_value_type(f, x);
  int32_t rank = xt->rank;
  int64_t all[TPURT_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) all[i] = i;
  ir_value_t max_n = ir_reduce(f, n, ir_constant_i64(f, TPURT_DTYPE_I64, 0), all, rank, IR_REDUCE_MAX);
  ir_value_t first = poly_first(ctx, kind, x);
  /* carried: j, p (degree j - 1), q (degree j), the value at each element's n */
  ir_value_t init[4] = {ir_constant_i64(f, TPURT_DTYPE_I64, 1), ir_const_like(f, x, 1.0), first, first},
             args[4], out[4];
  ir_region_op_t w = ir_while_begin(f, init, 4, args);
  ir_value_t more = ir_compare(f, IR_LT, args[0], max_n);
  ir_region_end(f, &more, 1);
  ir_while_body(f, &w, args);
  ir_value_t jf = ir_broadcast_in_dim(f, ir_convert(f, args[0], dt), rank, xt->dims, NULL);
  ir_value_t r = poly_step(ctx, kind, x, jf, args[1], args[2]);
  ir_value_t j1 = ir_add(f, args[0], ir_constant_i64(f, TPURT_DTYPE_I64, 1));
  ir_value_t at_n = ir_compare(f, IR_EQ, n, ir_broadcast_in_dim(f, j1, rank, xt->dims, NULL));
  ir_value_t next[4] = {j1, args[2], r, ir_select(f, at_n, r, args[3])};
  ir_region_end(f, next, 4);
  ir_while_end(f, &w, out);
  ir_value_t res = out[3];

  ir_value_t one = ir_const_like(f, x, 1.0);
  ir_value_t even = ir_compare(f, IR_EQ, ir_binary(f, IR_OP_REMAINDER, n, ir_const_like(f, n, 2.0)),
                               ir_const_like(f, n, 0.0));
  ir_value_t pos = ir_compare(f, IR_GT, x, ir_const_like(f, x, 0.0));
  ir_value_t ax = ir_abs(f, x);
  ir_value_t unit = ir_compare(f, IR_EQ, ax, one);
  ir_value_t inside = ir_compare(f, IR_LT, ax, one);
  ir_value_t n1 = ir_add(f, nf, one), n2 = ir_add(f, ir_add(f, nf, nf), one);
  ir_value_t pos_or_even = ir_or(f, pos, even);
  ir_value_t sign_pe = ir_select(f, pos_or_even, one, ir_neg(f, one));
  ir_value_t acos_x = ir_unary(f, IR_OP_ACOS, x);
  ir_value_t half_acos = ir_mul(f, acos_x, ir_const_like(f, x, 0.5));
  ir_value_t nh = ir_add(f, nf, ir_const_like(f, x, 0.5));
  int64_t trig_from = kind == POLY_T ? 6 : 8;
  ir_value_t trig_n = ir_compare(f, IR_GT, n, ir_const_like(f, n, (double)trig_from));
  ir_value_t trig = ir_and(f, trig_n, inside);
  ir_value_t unit_value = IR_NONE, trig_value = IR_NONE;
  switch (kind) {
    case POLY_T:
      unit_value = sign_pe;
      trig_value = ir_unary(f, IR_OP_COSINE, ir_mul(f, nf, acos_x));
      break;
    case POLY_U: {
      unit_value = ir_mul(f, sign_pe, n1);
      ir_value_t s = ir_unary(f, IR_OP_SINE, acos_x);
      ir_value_t a = ir_div(f, ir_unary(f, IR_OP_SINE, ir_mul(f, n1, acos_x)), s);
      ir_value_t b = ir_div(f, ir_mul(f, n1, ir_unary(f, IR_OP_COSINE, ir_mul(f, n1, acos_x))), x);
      trig_value = ir_select(f, ir_compare(f, IR_NE, s, ir_const_like(f, s, 0.0)), a, b);
      break;
    }
    case POLY_V:
    case POLY_W: {
      /* V = cos((n + 1/2) t) / cos(t / 2), W the same with sines (t = acos x);
      ** at x = 1: V 1, W 2n + 1; at x = -1: V (-1)^n (2n + 1), W (-1)^n. The
      ** ratio is 0/0 where the other half-angle function is 1 (V: x = -1,
      ** W: x = 1): the value at that edge instead. */
      bool v = kind == POLY_V;
      ir_op_t ratio = v ? IR_OP_COSINE : IR_OP_SINE;
      ir_value_t at_minus = ir_select(f, even, v ? n2 : one, ir_neg(f, v ? n2 : one));
      unit_value = ir_select(f, pos, v ? one : n2, at_minus);
      ir_value_t a = ir_div(f, ir_unary(f, ratio, ir_mul(f, nh, acos_x)), ir_unary(f, ratio, half_acos));
      ir_value_t other = ir_unary(f, v ? IR_OP_SINE : IR_OP_COSINE, half_acos);
      trig_value = ir_select(f, ir_compare(f, IR_NE, other, one), a, v ? at_minus : unit_value);
      break;
    }
    case POLY_P:
      unit_value = sign_pe;
      break;
    default:
      break;
  }
  bool chebyshev = kind == POLY_T || kind == POLY_U || kind == POLY_V || kind == POLY_W;
  /* lowest priority first: CPU's checks run in the opposite order */
  if (kind == POLY_H || kind == POLY_HE) {
    double limit = dt == TPURT_DTYPE_F64 ? 512.0 : dt == TPURT_DTYPE_F32 ? 128.0 : 1024.0;
    res = ir_select(f, ir_compare(f, IR_GT, n, ir_const_like(f, n, limit)), ir_const_like(f, x, NAN), res);
  }
  res = ir_select(f, ir_compare(f, IR_EQ, n, ir_const_like(f, n, 1.0)), first, res);
  res = ir_select(f, ir_compare(f, IR_EQ, n, ir_const_like(f, n, 0.0)), one, res);
  if (chebyshev) res = ir_select(f, trig, trig_value, res);
  if (unit_value != IR_NONE) res = ir_select(f, unit, unit_value, res);
  if (kind == POLY_L) res = ir_select(f, ir_compare(f, IR_EQ, ax, ir_const_like(f, x, 0.0)), one, res);
  res = ir_select(f, ir_compare(f, IR_LT, n, ir_const_like(f, n, 0.0)), ir_const_like(f, x, 0.0), res);
  lower_set_result(ctx, 0, res);
  return NULL;
}

/* nextafter(a, b): the next float after a towards b, one step of the bits:
** up in magnitude when b is further from 0 on a's side, else down; from 0,
** the smallest subnormal with b's sign. */
static ir_value_t nextafter_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  float_bits_t fb = float_bits(ir_value_type(f, a)->dtype);
  ir_value_t bits = as_bits(ctx, a, fb.int_dtype);
  ir_value_t away =
      ir_compare(f, IR_EQ, ir_compare(f, IR_LT, a, b), ir_compare(f, IR_GT, a, ir_const_like(f, a, 0.0)));
  ir_value_t step = ir_select(f, away, ir_const_like(f, bits, 1.0), ir_const_like(f, bits, -1.0));
  ir_value_t r = ir_bitcast_convert(f, ir_add(f, bits, step), *ir_value_type(f, a));
  ir_value_t tiny = ir_bitcast_convert(f, ir_const_like(f, bits, 1.0), *ir_value_type(f, a));
  ir_value_t from_zero =
      ir_select(f, ir_compare(f, IR_GT, b, ir_const_like(f, b, 0.0)), tiny, ir_neg(f, tiny));
  r = ir_select(f, ir_compare(f, IR_EQ, a, ir_const_like(f, a, 0.0)), from_zero, r);
  r = ir_select(f, ir_compare(f, IR_EQ, a, b), b, r);
  ir_value_t any_nan = ir_or(f, is_nan(ctx, a), is_nan(ctx, b));
  return ir_select(f, any_nan, ir_add(f, a, b), r);
}

/* Applies |fn| to args |a_arg|, |b_arg| promoted together; ints become
** float32 when |to_float|. */
static TPURT_MUST_USE tpurt_status_t binary(lower_ctx_t* ctx, int32_t a_arg, int32_t b_arg,
                                            lower_binary_formula_t fn, bool to_float) {
  int32_t idx[2] = {a_arg, b_arg};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (to_float) dt = float_of(dt);
  tpurt_dtype_t math = tpurt_dtype_is_float(dt) ? lower_acc_dtype(dt) : dt;
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, math, v));
  lower_set_result(ctx, 0, lower_cast(ctx, fn(ctx, v[0], v[1]), dt));
  return NULL;
}

/* binary of args 0 and 1 with the row's formula (.binary); .flag: computed
** in floating point (ints promote to the default float) */
static TPURT_MUST_USE tpurt_status_t binary_row(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  return binary(ctx, 0, 1, row->binary, row->flag);
}

/* xlogy(x, y) = x log y, 0 where x == 0 (unless y is NaN) */
static ir_value_t xlogy_of(lower_ctx_t* ctx, ir_value_t x, ir_value_t y) {
  ir_func_t* f = ctx->func;
  ir_value_t r = ir_mul(f, x, ir_log(f, y));
  ir_value_t zero = ir_and(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, 0.0)), ir_not(f, is_nan(ctx, y)));
  return ir_select(f, zero, ir_const_like(f, x, 0.0), r);
}

static ir_value_t xlog1py_of(lower_ctx_t* ctx, ir_value_t x, ir_value_t y) {
  ir_func_t* f = ctx->func;
  ir_value_t r = ir_mul(f, x, ir_unary(f, IR_OP_LOG_PLUS_ONE, y));
  ir_value_t zero = ir_and(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, 0.0)), ir_not(f, is_nan(ctx, y)));
  return ir_select(f, zero, ir_const_like(f, x, 0.0), r);
}

/* hypot without overflow: m * sqrt(1 + (n/m)^2), m = max(|a|, |b|); inf wins over NaN */
static ir_value_t hypot_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  ir_value_t x = ir_abs(f, a), y = ir_abs(f, b);
  ir_value_t m = ir_max(f, x, y), n = ir_min(f, x, y);
  ir_value_t q = ir_div(f, n, m);
  ir_value_t r = ir_mul(f, m, ir_unary(f, IR_OP_SQRT, ir_add(f, ir_const_like(f, q, 1.0), ir_mul(f, q, q))));
  r = ir_select(f, ir_compare(f, IR_EQ, m, ir_const_like(f, m, 0.0)), ir_const_like(f, m, 0.0), r);
  ir_value_t inf = ir_or(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, INFINITY)),
                         ir_compare(f, IR_EQ, y, ir_const_like(f, y, INFINITY)));
  return ir_select(f, inf, ir_const_like(f, m, INFINITY), r);
}

/* copysign(a, b) = |a| with b's sign bit */
static ir_value_t copysign_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, b);
  ir_type_t it = *t;
  it.dtype = tpurt_dtype_size(t->dtype) == 8   ? TPURT_DTYPE_I64
             : tpurt_dtype_size(t->dtype) == 4 ? TPURT_DTYPE_I32
                                               : TPURT_DTYPE_I16;
  ir_value_t bits = ir_bitcast_convert(f, b, it);
  ir_value_t neg = ir_compare(f, IR_LT, bits, ir_const_like(f, bits, 0.0));
  ir_value_t mag = ir_abs(f, a);
  return ir_select(f, neg, ir_neg(f, mag), mag);
}

/* fmax/fmin: a NaN loses to a number */
static ir_value_t fmaxmin(lower_ctx_t* ctx, ir_value_t a, ir_value_t b, ir_op_t op) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, a);
  if (!t || !tpurt_dtype_is_float(t->dtype)) return ir_binary(f, op, a, b);
  ir_value_t r = ir_binary(f, op, a, b);
  r = ir_select(f, is_nan(ctx, a), b, r);
  return ir_select(f, is_nan(ctx, b), a, r);
}
static ir_value_t fmax_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return fmaxmin(ctx, a, b, IR_OP_MAXIMUM);
}
static ir_value_t fmin_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return fmaxmin(ctx, a, b, IR_OP_MINIMUM);
}

/* logaddexp(a, b) = max + log1p(exp(-|a - b|)); equal infinities give themselves */
static ir_value_t logaddexp_base(lower_ctx_t* ctx, ir_value_t a, ir_value_t b, bool base2) {
  ir_func_t* f = ctx->func;
  ir_value_t m = ir_max(f, a, b);
  ir_value_t d = ir_abs(f, ir_sub(f, a, b));
  ir_value_t r;
  if (base2) { /* m + log2(1 + 2^-d) */
    ir_value_t e = ir_exp(f, ir_mul(f, d, ir_const_like(f, d, -M_LN2)));
    r = ir_add(f, m, ir_mul(f, ir_unary(f, IR_OP_LOG_PLUS_ONE, e), ir_const_like(f, e, 1.0 / M_LN2)));
  } else {
    r = ir_add(f, m, ir_unary(f, IR_OP_LOG_PLUS_ONE, ir_exp(f, ir_neg(f, d))));
  }
  ir_value_t same_inf = ir_and(f, ir_compare(f, IR_EQ, a, b),
                               ir_compare(f, IR_EQ, ir_abs(f, a), ir_const_like(f, a, INFINITY)));
  return ir_select(f, same_inf, a, r);
}
static ir_value_t logaddexp_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return logaddexp_base(ctx, a, b, false);
}
static ir_value_t logaddexp2_of(lower_ctx_t* ctx, ir_value_t a, ir_value_t b) {
  return logaddexp_base(ctx, a, b, true);
}

/* heaviside(x, values) = values at 0, else (x > 0) */
static ir_value_t heaviside_of(lower_ctx_t* ctx, ir_value_t x, ir_value_t v) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, x);
  if (!t) return IR_NONE;
  if (t->dtype == TPURT_DTYPE_BOOL) return ir_select(f, x, x, v); /* 0 -> values, 1 -> 1 */
  ir_value_t pos = ir_convert(f, ir_compare(f, IR_GT, x, ir_const_like(f, x, 0.0)), t->dtype);
  return ir_select(f, ir_compare(f, IR_EQ, x, ir_const_like(f, x, 0.0)), v, pos);
}

/* zeta(x, q): Hurwitz zeta */
static ir_value_t zeta_of(lower_ctx_t* ctx, ir_value_t x, ir_value_t q) {
  return ir_binary(ctx->func, IR_OP_ZETA, x, q);
}

static TPURT_MUST_USE tpurt_status_t lower_nextafter(lower_ctx_t* ctx) {
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = lower_result_type(ctx, idx, 2);
  if (!tpurt_dtype_is_float(dt))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"nextafter_cpu\" not implemented for '%s'",
                       tpurt_dtype_name(dt));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, dt, v));
  lower_set_result(ctx, 0, nextafter_of(ctx, v[0], v[1]));
  return NULL;
}

/* angle of a real number: 0 at or above 0, pi below, NaN stays; ints give float */
static ir_value_t angle_of(lower_ctx_t* ctx, ir_value_t x) {
  ir_func_t* f = ctx->func;
  ir_value_t r = ir_select(f, ir_compare(f, IR_LT, x, ir_const_like(f, x, 0.0)), ir_const_like(f, x, M_PI),
                           ir_const_like(f, x, 0.0));
  return ir_select(f, is_nan(ctx, x), x, r);
}
static TPURT_MUST_USE tpurt_status_t lower_angle(lower_ctx_t* ctx) {
  if (tpurt_dtype_is_complex(lower_meta(ctx, 0)->dtype)) return lower_complex_angle(ctx);
  return float_unary(ctx, angle_of);
}

static TPURT_MUST_USE tpurt_status_t lower_heaviside(lower_ctx_t* ctx) {
  const tpurt_tensor_t *a = lower_meta(ctx, 0), *b = lower_meta(ctx, 1);
  if (a && b && a->dtype != b->dtype)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "heaviside is not yet implemented for tensors with different dtypes");
  return binary(ctx, 0, 1, heaviside_of, false);
}

/* polygamma(n, self) for x < 0, by reflection:
**   psi^(n)(x) = (-1)^n psi^(n)(1 - x) - pi^(n+1) P_n(cot(pi x)),
** where d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x)) with P_0(c) = c and
** P_(k+1)(c) = P_k'(c) * -(1 + c^2): P_n's coefficients are computed here,
** at lowering time (n is an int arg, so it is part of the program). */
#define POLYGAMMA_MAX_N 60
static ir_value_t polygamma_reflected(lower_ctx_t* ctx, int64_t n, ir_value_t x) {
  ir_func_t* f = ctx->func;
  double p[POLYGAMMA_MAX_N + 2] = {0.0, 1.0}; /* P_0(c) = c, lowest power first */
  for (int64_t step = 0; step < n; ++step) {
    double d[POLYGAMMA_MAX_N + 2] = {0}; /* P' */
    for (int64_t i = 1; i <= step + 1; ++i) d[i - 1] = (double)i * p[i];
    double q[POLYGAMMA_MAX_N + 2] = {0}; /* -(1 + c^2) P' */
    for (int64_t i = 0; i <= step; ++i) {
      q[i] -= d[i];
      q[i + 2] -= d[i];
    }
    memcpy(p, q, sizeof(p));
  }
  ir_value_t c =
      ir_div(f, ir_const_like(f, x, 1.0), ir_unary(f, IR_OP_TAN, ir_mul(f, x, ir_const_like(f, x, M_PI))));
  ir_value_t poly = ir_const_like(f, x, p[n + 1]);
  for (int64_t i = n; i >= 0; --i) poly = ir_add(f, ir_mul(f, poly, c), ir_const_like(f, x, p[i]));
  ir_value_t mirrored =
      ir_binary(f, IR_OP_POLYGAMMA, ir_const_like(f, x, (double)n), ir_sub(f, ir_const_like(f, x, 1.0), x));
  if (n % 2) mirrored = ir_neg(f, mirrored);
  ir_value_t cot_term = ir_mul(f, poly, ir_const_like(f, x, pow(M_PI, (double)(n + 1))));
  return ir_sub(f, mirrored, cot_term);
}

/* polygamma(n, self): chlo.polygamma takes n as a float tensor like x; it is
** NaN below 0, where CPU's zeta series has values: there, the reflection. */
static TPURT_MUST_USE tpurt_status_t lower_polygamma(lower_ctx_t* ctx) {
  int64_t n = lower_int(ctx, 0, 0);
  if (n < 0) return lower_error(TPURT_INVALID_ARGUMENT, "polygamma(n, x) does not support negative n.");
  if (n > POLYGAMMA_MAX_N)
    return lower_error(TPURT_UNIMPLEMENTED, "polygamma for n > %d (the reflection polynomial)",
                       POLYGAMMA_MAX_N);
  tpurt_dtype_t dt = float_of(lower_meta(ctx, 1)->dtype);
  /* n = 1 follows CPU's float trigamma (its own reflection, in the op-math
  ** dtype); n >= 2 its zeta series, which is accurate: f64 where we can */
  tpurt_dtype_t acc = n >= 2 ? precise_dtype(ctx, dt) : lower_acc_dtype(dt);
  ir_value_t x = lower_cast(ctx, lower_tensor(ctx, 1), acc);
  ir_func_t* f = ctx->func;
  ir_value_t r;
  if (n == 0) {
    r = digamma_of(ctx, x);
  } else if (n == 1) { /* pi^2 / sin^2(pi x) - trigamma(1 - x) below 0 */
    ir_value_t one = ir_const_like(f, x, 1.0);
    ir_value_t neg = ir_compare(f, IR_LT, x, ir_const_like(f, x, 0.0));
    ir_value_t arg = ir_select(f, neg, ir_sub(f, one, x), x);
    ir_value_t tg = ir_binary(f, IR_OP_POLYGAMMA, one, arg);
    ir_value_t s = ir_unary(f, IR_OP_SINE, ir_mul(f, x, ir_const_like(f, x, M_PI)));
    ir_value_t refl = ir_div(f, ir_const_like(f, x, M_PI * M_PI), ir_mul(f, s, s));
    r = ir_select(f, neg, ir_sub(f, refl, tg), tg);
  } else {
    ir_value_t neg = ir_compare(f, IR_LT, x, ir_const_like(f, x, 0.0));
    ir_value_t direct = ir_binary(f, IR_OP_POLYGAMMA, ir_const_like(f, x, (double)n), x);
    ir_value_t safe = ir_select(f, neg, x, ir_const_like(f, x, -0.5)); /* keeps the unused branch finite */
    r = ir_select(f, neg, polygamma_reflected(ctx, n, safe), direct);
  }
  lower_set_result(ctx, 0, lower_cast(ctx, r, dt));
  return NULL;
}

/*===--- regularized incomplete gamma ---===*/

#define IGAMMA_MAX_ITERS 2000

/* P(a, x) (or Q = 1 - P when |upper|), for a > 0, x > 0, in f64 where the
** platform has it: the power series of P below x = a + 1, Lentz's continued
** fraction of Q above, both iterated as one stablehlo.while until every
** element has converged. */
static ir_value_t igamma_core(lower_ctx_t* ctx, ir_value_t a, ir_value_t x, bool upper) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, a);
  double eps = t->dtype == TPURT_DTYPE_F64 ? 1e-16 : 1e-8, tiny = 1e-300;
  if (t->dtype != TPURT_DTYPE_F64) tiny = 1e-30;
  int64_t all[TPURT_MAX_RANK];
  for (int32_t i = 0; i < t->rank; ++i) all[i] = i;
  ir_value_t one = ir_const_like(f, a, 1.0);
  ir_value_t inv_a = ir_div(f, one, a);
  ir_value_t b0 = ir_add(f, ir_sub(f, x, a), one);
  ir_value_t init[7] = {ir_constant_i64(f, TPURT_DTYPE_I32, 1),
                        inv_a,                           /* series sum */
                        inv_a,                           /* series term */
                        b0,                              /* Lentz b */
                        ir_const_like(f, a, 1.0 / tiny), /* c */
                        ir_div(f, one, b0),              /* d */
                        ir_div(f, one, b0)},             /* h */
      args[7], out[7];
  ir_region_op_t w = ir_while_begin(f, init, 7, args);
  lower_while_counter_in(ctx, &w, args[0], 1, IGAMMA_MAX_ITERS, args);
  ir_value_t fi = ir_broadcast_in_dim(f, ir_convert(f, args[0], t->dtype), t->rank, t->dims, NULL);
  /* series: term *= x / (a + i) */
  ir_value_t term = ir_mul(f, args[2], ir_div(f, x, ir_add(f, a, fi)));
  ir_value_t sum = ir_add(f, args[1], term);
  ir_value_t s_done =
      ir_compare(f, IR_LT, ir_abs(f, term), ir_mul(f, ir_abs(f, sum), ir_const_like(f, a, eps)));
  /* Lentz: an = -i (i - a), b += 2 */
  ir_value_t an = ir_neg(f, ir_mul(f, fi, ir_sub(f, fi, a)));
  ir_value_t b = ir_add(f, args[3], ir_const_like(f, a, 2.0));
  ir_value_t d = ir_add(f, ir_mul(f, an, args[5]), b);
  d = where(ctx, IR_LT, ir_abs(f, d), tiny, ir_const_like(f, a, tiny), d);
  ir_value_t c = ir_add(f, b, ir_div(f, an, args[4]));
  c = where(ctx, IR_LT, ir_abs(f, c), tiny, ir_const_like(f, a, tiny), c);
  d = ir_div(f, one, d);
  ir_value_t del = ir_mul(f, d, c);
  ir_value_t h = ir_mul(f, args[6], del);
  ir_value_t c_done = ir_compare(f, IR_LT, ir_abs(f, ir_sub(f, del, one)), ir_const_like(f, a, eps));
  ir_value_t in_series = ir_compare(f, IR_LT, x, ir_add(f, a, one));
  ir_value_t done = ir_select(f, in_series, s_done, c_done);
  /* NaN inputs never converge: count them done */
  done = ir_or(f, done, ir_not(f, ir_compare(f, IR_EQ, sum, sum)));
  done = ir_or(f, done, ir_not(f, ir_compare(f, IR_EQ, h, h)));
  ir_value_t all_done =
      ir_reduce(f, done, ir_constant_i64(f, TPURT_DTYPE_BOOL, 1), all, t->rank, IR_REDUCE_AND);
  ir_value_t next_i = ir_add(f, args[0], ir_constant_i64(f, TPURT_DTYPE_I32, 1));
  next_i = ir_select(f, all_done, ir_constant_i64(f, TPURT_DTYPE_I32, -1), next_i);
  ir_value_t next[7] = {next_i, sum, term, b, c, d, h};
  ir_region_end(f, next, 7);
  ir_while_end(f, &w, out);
  /* prefactor e^(a ln x - x - lgamma(a)) */
  ir_value_t pre =
      ir_unary(f, IR_OP_EXPONENTIAL,
               ir_sub(f, ir_sub(f, ir_mul(f, a, ir_log(f, x)), x), ir_unary(f, IR_OP_LGAMMA, a)));
  ir_value_t p_series = ir_mul(f, out[1], pre), q_cf = ir_mul(f, out[6], pre);
  ir_value_t use_series = ir_compare(f, IR_LT, x, ir_add(f, a, one));
  if (upper) return ir_select(f, use_series, ir_sub(f, one, p_series), q_cf);
  return ir_select(f, use_series, p_series, ir_sub(f, one, q_cf));
}

/* igamma(a, x) / igammac(a, x), with CPU's special cases */
static ir_value_t igamma_full(lower_ctx_t* ctx, ir_value_t a, ir_value_t x, bool upper) {
  ir_func_t* f = ctx->func;
  ir_value_t safe_a = where(ctx, IR_GT, a, 0.0, a, ir_const_like(f, a, 1.0));
  ir_value_t safe_x = where(ctx, IR_GT, x, 0.0, x, ir_const_like(f, x, 1.0));
  safe_a = where(ctx, IR_EQ, ir_abs(f, safe_a), INFINITY, ir_const_like(f, a, 1.0), safe_a);
  safe_x = where(ctx, IR_EQ, ir_abs(f, safe_x), INFINITY, ir_const_like(f, x, 1.0), safe_x);
  ir_value_t r = igamma_core(ctx, safe_a, safe_x, upper);
  double lo = upper ? 1.0 : 0.0, hi = upper ? 0.0 : 1.0; /* values at x = 0 and x = inf */
  ir_value_t a_inf = ir_compare(f, IR_EQ, a, ir_const_like(f, a, INFINITY));
  ir_value_t x_inf = ir_compare(f, IR_EQ, x, ir_const_like(f, x, INFINITY));
  r = ir_select(f, x_inf, ir_const_like(f, x, hi), r);
  r = ir_select(f, a_inf, ir_select(f, x_inf, ir_const_like(f, x, NAN), ir_const_like(f, x, lo)), r);
  r = where(ctx, IR_EQ, x, 0.0, ir_const_like(f, x, lo), r);
  ir_value_t a0 = ir_compare(f, IR_EQ, a, ir_const_like(f, a, 0.0));
  r = ir_select(f, a0, where(ctx, IR_GT, x, 0.0, ir_const_like(f, x, hi), ir_const_like(f, x, NAN)), r);
  ir_value_t neg = ir_or(f, ir_compare(f, IR_LT, a, ir_const_like(f, a, 0.0)),
                         ir_compare(f, IR_LT, x, ir_const_like(f, x, 0.0)));
  r = ir_select(f, neg, ir_const_like(f, x, NAN), r);
  ir_value_t any_nan = ir_or(f, is_nan(ctx, a), is_nan(ctx, x));
  return ir_select(f, any_nan, ir_const_like(f, x, NAN), r);
}

static TPURT_MUST_USE tpurt_status_t igamma_rule(lower_ctx_t* ctx) {
  const lower_rule_data_t* row = lower_rule_data(ctx);
  bool upper = row->flag;
  int32_t idx[2] = {0, 1};
  tpurt_dtype_t dt = float_of(lower_result_type(ctx, idx, 2));
  ir_value_t v[2];
  TPURT_RETURN_IF_ERROR(operands(ctx, idx, 2, precise_dtype(ctx, dt), v));
  lower_set_result(ctx, 0, lower_cast(ctx, igamma_full(ctx, v[0], v[1], upper), dt));
  return NULL;
}

const lower_rule_t lower_special_rules[] = {
    LOWER_FN_WITH("aten::copysign.Scalar", binary_row, .binary = copysign_of, .flag = true),
    LOWER_FN_WITH("aten::copysign.Tensor", binary_row, .binary = copysign_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::copysign.out", binary_row, .binary = copysign_of, .flag = true),
    LOWER_FN("aten::angle", lower_angle),
    LOWER_OUT_FN("aten::angle.out", lower_angle),
    LOWER_FN_WITH("aten::digamma", float_unary_row, .unary = digamma_of),
    LOWER_OUT_FN_WITH("aten::digamma.out", float_unary_row, .unary = digamma_of),
    LOWER_FN_WITH("aten::erfc", float_unary_row, .unary = erfc_of),
    LOWER_OUT_FN_WITH("aten::erfc.out", float_unary_row, .unary = erfc_of),
    LOWER_FN_WITH("aten::fmax", binary_row, .binary = fmax_of),
    LOWER_OUT_FN_WITH("aten::fmax.out", binary_row, .binary = fmax_of),
    LOWER_FN_WITH("aten::fmin", binary_row, .binary = fmin_of),
    LOWER_OUT_FN_WITH("aten::fmin.out", binary_row, .binary = fmin_of),
    LOWER_FN("aten::frexp.Tensor", lower_frexp),
    LOWER_OUT_FN("aten::frexp.Tensor_out", lower_frexp),
    LOWER_FN("aten::heaviside", lower_heaviside),
    LOWER_FN_WITH("aten::igamma", igamma_rule),
    LOWER_OUT_FN_WITH("aten::igamma.out", igamma_rule),
    LOWER_FN_WITH("aten::igammac", igamma_rule, .flag = true),
    LOWER_OUT_FN_WITH("aten::igammac.out", igamma_rule, .flag = true),
    LOWER_OUT_FN("aten::heaviside.out", lower_heaviside),
    LOWER_FN_WITH("aten::hypot", binary_row, .binary = hypot_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::hypot.out", binary_row, .binary = hypot_of, .flag = true),
    LOWER_FN_WITH("aten::lgamma", float_unary_row, .unary = lgamma_of),
    LOWER_OUT_FN_WITH("aten::lgamma.out", float_unary_row, .unary = lgamma_of),
    LOWER_FN_WITH("aten::logaddexp", binary_row, .binary = logaddexp_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::logaddexp.out", binary_row, .binary = logaddexp_of, .flag = true),
    LOWER_FN_WITH("aten::logaddexp2", binary_row, .binary = logaddexp2_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::logaddexp2.out", binary_row, .binary = logaddexp2_of, .flag = true),
    LOWER_FN("aten::logit", lower_logit),
    LOWER_OUT_FN("aten::logit.out", lower_logit),
    LOWER_FN("aten::nan_to_num", lower_nan_to_num),
    LOWER_OUT_FN("aten::nan_to_num.out", lower_nan_to_num),
    LOWER_FN("aten::nextafter", lower_nextafter),
    LOWER_OUT_FN("aten::nextafter.out", lower_nextafter),
    LOWER_FN("aten::polygamma", lower_polygamma),
    LOWER_OUT_FN("aten::polygamma.out", lower_polygamma),
    LOWER_FN("aten::round.decimals", lower_round_decimals),
    LOWER_OUT_FN("aten::round.decimals_out", lower_round_decimals),
    LOWER_FN("aten::signbit", lower_signbit),
    LOWER_OUT_FN("aten::signbit.out", lower_signbit),
    LOWER_FN_WITH("aten::sinc", float_unary_row, .unary = sinc_of),
    LOWER_OUT_FN_WITH("aten::sinc.out", float_unary_row, .unary = sinc_of),
    LOWER_FN_WITH("aten::special_entr", float_unary_row, .unary = entr_of),
    LOWER_OUT_FN_WITH("aten::special_entr.out", float_unary_row, .unary = entr_of),
    LOWER_FN_WITH("aten::special_log_ndtr", float_unary_row, .unary = log_ndtr_of),
    LOWER_OUT_FN_WITH("aten::special_log_ndtr.out", float_unary_row, .unary = log_ndtr_of),
    LOWER_FN_WITH("aten::special_ndtri", float_unary_row, .unary = ndtri_of),
    LOWER_OUT_FN_WITH("aten::special_ndtri.out", float_unary_row, .unary = ndtri_of),
    LOWER_FN_WITH("aten::special_xlog1py", binary_row, .binary = xlog1py_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_xlog1py.out", binary_row, .binary = xlog1py_of, .flag = true),
    LOWER_FN_WITH("aten::special_zeta", binary_row, .binary = zeta_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_zeta.out", binary_row, .binary = zeta_of, .flag = true),
    LOWER_FN_WITH("aten::xlogy.Tensor", binary_row, .binary = xlogy_of, .flag = true),
    LOWER_FN_WITH("aten::xlogy.Scalar_Other", binary_row, .binary = xlogy_of, .flag = true),
    LOWER_FN_WITH("aten::xlogy.Scalar_Self", binary_row, .binary = xlogy_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::xlogy.OutTensor", binary_row, .binary = xlogy_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::xlogy.OutScalar_Other", binary_row, .binary = xlogy_of, .flag = true),
    LOWER_OUT_FN_WITH("aten::xlogy.OutScalar_Self", binary_row, .binary = xlogy_of, .flag = true),
    LOWER_FN_WITH("aten::i0", bessel_row, .kind = BESSEL_I),
    LOWER_OUT_FN_WITH("aten::i0.out", bessel_row, .kind = BESSEL_I),
    LOWER_FN_WITH("aten::special_i0e", bessel_row, .kind = BESSEL_I, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_i0e.out", bessel_row, .kind = BESSEL_I, .flag = true),
    LOWER_FN_WITH("aten::special_i1", bessel_row, .kind = BESSEL_I, .order = 1),
    LOWER_OUT_FN_WITH("aten::special_i1.out", bessel_row, .kind = BESSEL_I, .order = 1),
    LOWER_FN_WITH("aten::special_i1e", bessel_row, .kind = BESSEL_I, .order = 1, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_i1e.out", bessel_row, .kind = BESSEL_I, .order = 1, .flag = true),
    LOWER_FN_WITH("aten::special_modified_bessel_i0", bessel_row, .kind = BESSEL_I),
    LOWER_OUT_FN_WITH("aten::special_modified_bessel_i0.out", bessel_row, .kind = BESSEL_I),
    LOWER_FN_WITH("aten::special_modified_bessel_i1", bessel_row, .kind = BESSEL_I, .order = 1),
    LOWER_OUT_FN_WITH("aten::special_modified_bessel_i1.out", bessel_row, .kind = BESSEL_I, .order = 1),
    LOWER_FN_WITH("aten::special_airy_ai", precise_unary_row, .unary = airy_ai_of),
    LOWER_OUT_FN_WITH("aten::special_airy_ai.out", precise_unary_row, .unary = airy_ai_of),
    LOWER_FN_WITH("aten::special_bessel_j0", bessel_row, .kind = BESSEL_J),
    LOWER_OUT_FN_WITH("aten::special_bessel_j0.out", bessel_row, .kind = BESSEL_J),
    LOWER_FN_WITH("aten::special_bessel_j1", bessel_row, .kind = BESSEL_J, .order = 1),
    LOWER_OUT_FN_WITH("aten::special_bessel_j1.out", bessel_row, .kind = BESSEL_J, .order = 1),
    LOWER_FN_WITH("aten::special_bessel_y0", bessel_row, .kind = BESSEL_Y),
    LOWER_OUT_FN_WITH("aten::special_bessel_y0.out", bessel_row, .kind = BESSEL_Y),
    LOWER_FN_WITH("aten::special_bessel_y1", bessel_row, .kind = BESSEL_Y, .order = 1),
    LOWER_OUT_FN_WITH("aten::special_bessel_y1.out", bessel_row, .kind = BESSEL_Y, .order = 1),
    LOWER_FN_WITH("aten::special_modified_bessel_k0", bessel_row, .kind = BESSEL_K),
    LOWER_OUT_FN_WITH("aten::special_modified_bessel_k0.out", bessel_row, .kind = BESSEL_K),
    LOWER_FN_WITH("aten::special_modified_bessel_k1", bessel_row, .kind = BESSEL_K, .order = 1),
    LOWER_OUT_FN_WITH("aten::special_modified_bessel_k1.out", bessel_row, .kind = BESSEL_K, .order = 1),
    LOWER_FN_WITH("aten::special_scaled_modified_bessel_k0", bessel_row, .kind = BESSEL_K, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_scaled_modified_bessel_k0.out", bessel_row, .kind = BESSEL_K,
                      .flag = true),
    LOWER_FN_WITH("aten::special_scaled_modified_bessel_k1", bessel_row, .kind = BESSEL_K, .order = 1,
                  .flag = true),
    LOWER_OUT_FN_WITH("aten::special_scaled_modified_bessel_k1.out", bessel_row, .kind = BESSEL_K, .order = 1,
                      .flag = true),
    LOWER_FN_WITH("aten::special_spherical_bessel_j0", bessel_row, .kind = BESSEL_SPHERICAL_J),
    LOWER_OUT_FN_WITH("aten::special_spherical_bessel_j0.out", bessel_row, .kind = BESSEL_SPHERICAL_J),
    LOWER_FN("aten::special_erfcx", lower_erfcx),
    LOWER_OUT_FN("aten::special_erfcx.out", lower_erfcx),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_t", orthogonal_poly, .kind = POLY_T),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_t.x_scalar", orthogonal_poly, .kind = POLY_T),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_t.n_scalar", orthogonal_poly, .kind = POLY_T),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_t.out", orthogonal_poly, .kind = POLY_T),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_t.x_scalar_out", orthogonal_poly, .kind = POLY_T),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_t.n_scalar_out", orthogonal_poly, .kind = POLY_T),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_u", orthogonal_poly, .kind = POLY_U),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_u.x_scalar", orthogonal_poly, .kind = POLY_U),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_u.n_scalar", orthogonal_poly, .kind = POLY_U),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_u.out", orthogonal_poly, .kind = POLY_U),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_u.x_scalar_out", orthogonal_poly, .kind = POLY_U),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_u.n_scalar_out", orthogonal_poly, .kind = POLY_U),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_v", orthogonal_poly, .kind = POLY_V),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_v.x_scalar", orthogonal_poly, .kind = POLY_V),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_v.n_scalar", orthogonal_poly, .kind = POLY_V),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_v.out", orthogonal_poly, .kind = POLY_V),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_v.x_scalar_out", orthogonal_poly, .kind = POLY_V),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_v.n_scalar_out", orthogonal_poly, .kind = POLY_V),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_w", orthogonal_poly, .kind = POLY_W),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_w.x_scalar", orthogonal_poly, .kind = POLY_W),
    LOWER_FN_WITH("aten::special_chebyshev_polynomial_w.n_scalar", orthogonal_poly, .kind = POLY_W),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_w.out", orthogonal_poly, .kind = POLY_W),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_w.x_scalar_out", orthogonal_poly, .kind = POLY_W),
    LOWER_OUT_FN_WITH("aten::special_chebyshev_polynomial_w.n_scalar_out", orthogonal_poly, .kind = POLY_W),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_t", orthogonal_poly, .kind = POLY_T,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_t.x_scalar", orthogonal_poly, .kind = POLY_T,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_t.n_scalar", orthogonal_poly, .kind = POLY_T,
                  .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_t.out", orthogonal_poly, .kind = POLY_T,
                      .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_t.x_scalar_out", orthogonal_poly,
                      .kind = POLY_T, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_t.n_scalar_out", orthogonal_poly,
                      .kind = POLY_T, .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_u", orthogonal_poly, .kind = POLY_U,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_u.x_scalar", orthogonal_poly, .kind = POLY_U,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_u.n_scalar", orthogonal_poly, .kind = POLY_U,
                  .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_u.out", orthogonal_poly, .kind = POLY_U,
                      .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_u.x_scalar_out", orthogonal_poly,
                      .kind = POLY_U, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_u.n_scalar_out", orthogonal_poly,
                      .kind = POLY_U, .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_v", orthogonal_poly, .kind = POLY_V,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_v.x_scalar", orthogonal_poly, .kind = POLY_V,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_v.n_scalar", orthogonal_poly, .kind = POLY_V,
                  .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_v.out", orthogonal_poly, .kind = POLY_V,
                      .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_v.x_scalar_out", orthogonal_poly,
                      .kind = POLY_V, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_v.n_scalar_out", orthogonal_poly,
                      .kind = POLY_V, .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_w", orthogonal_poly, .kind = POLY_W,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_w.x_scalar", orthogonal_poly, .kind = POLY_W,
                  .flag = true),
    LOWER_FN_WITH("aten::special_shifted_chebyshev_polynomial_w.n_scalar", orthogonal_poly, .kind = POLY_W,
                  .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_w.out", orthogonal_poly, .kind = POLY_W,
                      .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_w.x_scalar_out", orthogonal_poly,
                      .kind = POLY_W, .flag = true),
    LOWER_OUT_FN_WITH("aten::special_shifted_chebyshev_polynomial_w.n_scalar_out", orthogonal_poly,
                      .kind = POLY_W, .flag = true),
    LOWER_FN_WITH("aten::special_hermite_polynomial_h", orthogonal_poly, .kind = POLY_H),
    LOWER_FN_WITH("aten::special_hermite_polynomial_h.x_scalar", orthogonal_poly, .kind = POLY_H),
    LOWER_FN_WITH("aten::special_hermite_polynomial_h.n_scalar", orthogonal_poly, .kind = POLY_H),
    LOWER_OUT_FN_WITH("aten::special_hermite_polynomial_h.out", orthogonal_poly, .kind = POLY_H),
    LOWER_OUT_FN_WITH("aten::special_hermite_polynomial_h.x_scalar_out", orthogonal_poly, .kind = POLY_H),
    LOWER_OUT_FN_WITH("aten::special_hermite_polynomial_h.n_scalar_out", orthogonal_poly, .kind = POLY_H),
    LOWER_FN_WITH("aten::special_hermite_polynomial_he", orthogonal_poly, .kind = POLY_HE),
    LOWER_FN_WITH("aten::special_hermite_polynomial_he.x_scalar", orthogonal_poly, .kind = POLY_HE),
    LOWER_FN_WITH("aten::special_hermite_polynomial_he.n_scalar", orthogonal_poly, .kind = POLY_HE),
    LOWER_OUT_FN_WITH("aten::special_hermite_polynomial_he.out", orthogonal_poly, .kind = POLY_HE),
    LOWER_OUT_FN_WITH("aten::special_hermite_polynomial_he.x_scalar_out", orthogonal_poly, .kind = POLY_HE),
    LOWER_OUT_FN_WITH("aten::special_hermite_polynomial_he.n_scalar_out", orthogonal_poly, .kind = POLY_HE),
    LOWER_FN_WITH("aten::special_laguerre_polynomial_l", orthogonal_poly, .kind = POLY_L),
    LOWER_FN_WITH("aten::special_laguerre_polynomial_l.x_scalar", orthogonal_poly, .kind = POLY_L),
    LOWER_FN_WITH("aten::special_laguerre_polynomial_l.n_scalar", orthogonal_poly, .kind = POLY_L),
    LOWER_OUT_FN_WITH("aten::special_laguerre_polynomial_l.out", orthogonal_poly, .kind = POLY_L),
    LOWER_OUT_FN_WITH("aten::special_laguerre_polynomial_l.x_scalar_out", orthogonal_poly, .kind = POLY_L),
    LOWER_OUT_FN_WITH("aten::special_laguerre_polynomial_l.n_scalar_out", orthogonal_poly, .kind = POLY_L),
    LOWER_FN_WITH("aten::special_legendre_polynomial_p", orthogonal_poly, .kind = POLY_P),
    LOWER_FN_WITH("aten::special_legendre_polynomial_p.x_scalar", orthogonal_poly, .kind = POLY_P),
    LOWER_FN_WITH("aten::special_legendre_polynomial_p.n_scalar", orthogonal_poly, .kind = POLY_P),
    LOWER_OUT_FN_WITH("aten::special_legendre_polynomial_p.out", orthogonal_poly, .kind = POLY_P),
    LOWER_OUT_FN_WITH("aten::special_legendre_polynomial_p.x_scalar_out", orthogonal_poly, .kind = POLY_P),
    LOWER_OUT_FN_WITH("aten::special_legendre_polynomial_p.n_scalar_out", orthogonal_poly, .kind = POLY_P),
    LOWER_END,
};
