/* lower_util.c: the rule context accessors and the helpers every family
** shares: type promotion, broadcasting, casts, dims, messages. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../base/base.h"
#include "lower.h"

/*===--- arguments ---===*/

const tpurt_arg_t* lower_arg(const lower_ctx_t* ctx, int32_t i) {
  static const tpurt_arg_t kNone = {.kind = TPURT_ARG_NONE};
  if (i < 0 || i >= ctx->num_args) return &kNone;
  return &ctx->args[ctx->arg_index[i]];
}

bool lower_is_none(const lower_ctx_t* ctx, int32_t i) { return lower_arg(ctx, i)->kind == TPURT_ARG_NONE; }

int64_t lower_int(const lower_ctx_t* ctx, int32_t i, int64_t if_none) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  switch (a->kind) {
    case TPURT_ARG_INT:
    case TPURT_ARG_BOOL:
    case TPURT_ARG_DTYPE:
      return a->u.i;
    case TPURT_ARG_SCALAR:
      return a->u.scalar.dtype == TPURT_DTYPE_F64 ? (int64_t)a->u.scalar.f : a->u.scalar.i;
    case TPURT_ARG_INT_LIST:
      return a->u.ints.len > 0 ? a->u.ints.data[0] : if_none;
    default:
      return if_none;
  }
}

bool lower_bool(const lower_ctx_t* ctx, int32_t i, bool if_none) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  return a->kind == TPURT_ARG_BOOL ? a->u.i != 0 : if_none;
}

int32_t lower_ints(const lower_ctx_t* ctx, int32_t i, int64_t* out, int32_t max) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  if (a->kind == TPURT_ARG_INT) {
    if (max > 0) out[0] = a->u.i;
    return 1;
  }
  if (a->kind != TPURT_ARG_INT_LIST) return 0;
  int32_t n = a->u.ints.len < max ? a->u.ints.len : max;
  for (int32_t k = 0; k < n; ++k) out[k] = a->u.ints.data[k];
  return a->u.ints.len;
}

tpurt_dtype_t lower_dtype(const lower_ctx_t* ctx, int32_t i, tpurt_dtype_t if_none) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  return a->kind == TPURT_ARG_DTYPE ? (tpurt_dtype_t)a->u.i : if_none;
}

const char* lower_str(const lower_ctx_t* ctx, int32_t i, const char* if_none) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  return a->kind == TPURT_ARG_STRING ? a->u.str : if_none;
}

const tpurt_tensor_t* lower_meta(const lower_ctx_t* ctx, int32_t i) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  return a->kind == TPURT_ARG_TENSOR ? &a->u.tensor : NULL;
}

int32_t lower_list_len(const lower_ctx_t* ctx, int32_t i) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  return a->kind == TPURT_ARG_TENSOR_LIST ? a->u.list_len : 0;
}

const tpurt_tensor_t* lower_list_meta(const lower_ctx_t* ctx, int32_t i, int32_t k) {
  if (k < 0 || k >= lower_list_len(ctx, i)) return NULL;
  const tpurt_arg_t* a = &ctx->args[ctx->arg_index[i] + 1 + k];
  return a->kind == TPURT_ARG_TENSOR ? &a->u.tensor : NULL;
}

ir_value_t lower_tensor(lower_ctx_t* ctx, int32_t i) {
  if (lower_arg(ctx, i)->kind != TPURT_ARG_TENSOR) return IR_NONE;
  return ctx->read_tensor(ctx, ctx->arg_index[i]);
}

ir_value_t lower_list_tensor(lower_ctx_t* ctx, int32_t i, int32_t k) {
  if (!lower_list_meta(ctx, i, k)) return IR_NONE;
  return ctx->read_tensor(ctx, ctx->arg_index[i] + 1 + k);
}

static ir_value_t add_param(lower_ctx_t* ctx, int32_t arg, int32_t kind, tpurt_dtype_t dtype,
                            ir_type_t type) {
  if (ctx->num_params >= LOWER_MAX_PARAMS) {
    ir_func_fail_consume(
        ctx->func, tpurt_status_create(TPURT_UNIMPLEMENTED, "too many operands (max %d)", LOWER_MAX_PARAMS));
    return IR_NONE;
  }
  ctx->params[ctx->num_params++] =
      (lower_param_t){.arg = ctx->arg_index[arg], .item = -1, .kind = kind, .dtype = dtype};
  return ir_param(ctx->func, type);
}

/* Numbers are real (the glue refuses complex ones), so their parameters
** are too: for a complex operand the number is a parameter of the part
** type (|param|), made complex in the program. */
static ir_value_t to_operand_type(lower_ctx_t* ctx, ir_value_t param, tpurt_dtype_t dtype) {
  return tpurt_dtype_is_complex(dtype) ? ir_convert(ctx->func, param, dtype) : param;
}

ir_value_t lower_scalar(lower_ctx_t* ctx, int32_t i, tpurt_dtype_t dtype) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  if (a->kind != TPURT_ARG_SCALAR && a->kind != TPURT_ARG_FLOAT && a->kind != TPURT_ARG_INT &&
      a->kind != TPURT_ARG_BOOL) {
    ir_func_fail_consume(ctx->func, tpurt_status_create(TPURT_INTERNAL, "argument %d is not a number", i));
    return IR_NONE;
  }
  /* A float8 number is an f32 parameter cast in the program (the host has
  ** no float8 conversion: its bytes would be an integer's). */
  if (tpurt_dtype_is_float8(dtype))
    return lower_cast(
        ctx, add_param(ctx, i, LOWER_PARAM_SCALAR, TPURT_DTYPE_F32, ir_type_scalar(TPURT_DTYPE_F32)), dtype);
  tpurt_dtype_t real = tpurt_dtype_to_real(dtype);
  return to_operand_type(ctx, add_param(ctx, i, LOWER_PARAM_SCALAR, real, ir_type_scalar(real)), dtype);
}

ir_value_t lower_rng_state(lower_ctx_t* ctx, int32_t i) {
  int64_t two = 2;
  return add_param(ctx, i, LOWER_PARAM_RNG, TPURT_DTYPE_U64, ir_type_make(TPURT_DTYPE_U64, 1, &two));
}

double lower_scalar_value(const lower_ctx_t* ctx, int32_t i) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  switch (a->kind) {
    case TPURT_ARG_SCALAR:
    case TPURT_ARG_FLOAT:
      return tpurt_dtype_is_float(a->u.scalar.dtype) ? a->u.scalar.f : (double)a->u.scalar.i;
    case TPURT_ARG_INT:
    case TPURT_ARG_BOOL:
      return (double)a->u.i;
    default:
      return NAN;
  }
}

void lower_set_write(lower_ctx_t* ctx, int32_t i, ir_value_t value) {
  if (ctx->num_writes >= LOWER_MAX_WRITES) {
    ir_func_fail_consume(ctx->func, tpurt_status_create(TPURT_UNIMPLEMENTED, "too many written args (max %d)",
                                                        LOWER_MAX_WRITES));
    return;
  }
  ctx->write_args[ctx->num_writes] = i;
  ctx->write_values[ctx->num_writes++] = value;
}

void lower_set_undefined(lower_ctx_t* ctx, int32_t k) { lower_set_result(ctx, k, LOWER_UNDEFINED); }

void lower_set_result_permuted(lower_ctx_t* ctx, int32_t k, ir_value_t physical, const int64_t* perm) {
  lower_set_result(ctx, k, physical);
  const ir_type_t* t = ir_value_type(ctx->func, physical);
  if (!t || k < 0 || k >= TPURT_MAX_RESULTS) return;
  bool identity = true;
  for (int32_t i = 0; i < t->rank; ++i) {
    ctx->result_perm[k][i] = (int8_t)perm[i];
    identity &= perm[i] == i;
  }
  ctx->result_permuted[k] = !identity;
}

void lower_memory_order(const tpurt_tensor_t* t, int64_t* perm) {
  for (int32_t i = 0; i < t->rank; ++i) perm[i] = i;
  for (int32_t i = 1; i < t->rank; ++i) /* stable insertion sort, larger stride first */
    for (int32_t j = i; j > 0 && t->strides[perm[j]] > t->strides[perm[j - 1]]; --j) {
      int64_t x = perm[j];
      perm[j] = perm[j - 1];
      perm[j - 1] = x;
    }
}

bool lower_is_channels_last(const tpurt_tensor_t* t) {
  if (!t || (t->rank != 4 && t->rank != 5)) return false;
  int64_t order[TPURT_MAX_RANK];
  lower_memory_order(t, order);
  if (order[0] != 0 || order[t->rank - 1] != 1) return false;
  for (int32_t i = 1; i < t->rank - 1; ++i)
    if (order[i] != i + 1) return false;
  return t->sizes[1] > 1 && t->strides[1] == 1;
}

void lower_set_result_channels_last(lower_ctx_t* ctx, int32_t k, ir_value_t y, int32_t rank) {
  /* NCHW -> NHWC in memory, the result viewed back as NCHW */
  int64_t order[TPURT_MAX_RANK], inverse[TPURT_MAX_RANK];
  order[0] = 0;
  for (int32_t i = 1; i < rank - 1; ++i) order[i] = i + 1;
  order[rank - 1] = 1;
  for (int32_t i = 0; i < rank; ++i) inverse[order[i]] = i;
  lower_set_result_permuted(ctx, k, ir_transpose(ctx->func, y, order), inverse);
}

/* The stride of input |t| along dim |d| of a pointwise result of |rank|
** dims |dims|, broadcast: 0 where |t| has no such dim or is broadcast
** along it (size 1 in a longer dim). */
static int64_t broadcast_stride(const tpurt_tensor_t* t, int32_t rank, const int64_t* dims, int32_t d) {
  int32_t j = d - (rank - t->rank);
  if (j < 0 || (t->sizes[j] == 1 && dims[d] != 1)) return 0;
  return t->strides[j];
}

static bool broadcasts_to(const tpurt_tensor_t* t, int32_t rank, const int64_t* dims) {
  if (t->rank > rank) return false;
  for (int32_t j = 0; j < t->rank; ++j)
    if (t->sizes[j] != 1 && t->sizes[j] != dims[j + rank - t->rank]) return false;
  return true;
}

/* Whether dims |a| and |b| of the result swap, asked of the inputs in
** argument order: the first whose strides differ (neither broadcast)
** decides; on equal strides the larger dim goes inside; 0: no input
** decides. */
static int pointwise_order(const lower_ctx_t* ctx, int32_t rank, const int64_t* dims, int32_t a, int32_t b) {
  for (int32_t i = 0; i < ctx->num_args; ++i) {
    const tpurt_tensor_t* t = lower_meta(ctx, i);
    if (!t || !broadcasts_to(t, rank, dims)) continue;
    int64_t sa = broadcast_stride(t, rank, dims, a), sb = broadcast_stride(t, rank, dims, b);
    if (sa == 0 || sb == 0) continue;
    if (sa != sb) return sa < sb ? -1 : 1;
    if (dims[a] > dims[b]) return 1;
  }
  return 0;
}

void lower_set_pointwise_result(lower_ctx_t* ctx, int32_t k, ir_value_t y) {
  const ir_type_t* t = ir_value_type(ctx->func, y);
  if (!t || (t->rank != 4 && t->rank != 5) || !ctx->rule || ctx->rule->variant != LOWER_FUNCTIONAL) {
    lower_set_result(ctx, k, y);
    return;
  }
  /* perm lists the dims innermost first, row-major to begin with; an
  ** insertion sort that leaves undecided pairs where they are */
  int32_t rank = t->rank, perm[TPURT_MAX_RANK];
  for (int32_t i = 0; i < rank; ++i) perm[i] = rank - 1 - i;
  for (int32_t i = 1; i < rank; ++i) {
    for (int32_t at = i, j = i - 1; j >= 0; --j) {
      int order = pointwise_order(ctx, rank, t->dims, perm[j], perm[at]);
      if (order < 0) break;
      if (order > 0) {
        int32_t x = perm[j];
        perm[j] = perm[at];
        perm[at] = x;
        at = j;
      }
    }
  }
  tpurt_tensor_t laid = {.rank = rank};
  int64_t stride = 1;
  for (int32_t i = 0; i < rank; ++i) {
    laid.sizes[perm[i]] = t->dims[perm[i]];
    laid.strides[perm[i]] = stride;
    stride *= t->dims[perm[i]];
  }
  if (lower_is_channels_last(&laid))
    lower_set_result_channels_last(ctx, k, y, rank);
  else
    lower_set_result(ctx, k, y);
}

void lower_set_host_int(lower_ctx_t* ctx, int32_t k, int64_t value) {
  lower_set_result(ctx, k, LOWER_HOST_INT_BASE);
  if (k >= 0 && k < LOWER_MAX_FLAT_ARGS) ctx->host_ints[k] = value;
}

int32_t lower_float_list_len(const lower_ctx_t* ctx, int32_t i) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  return a->kind == TPURT_ARG_FLOAT_LIST ? a->u.floats.len : 0;
}

ir_value_t lower_float_list_item(lower_ctx_t* ctx, int32_t i, int32_t k, tpurt_dtype_t dtype) {
  if (k < 0 || k >= lower_float_list_len(ctx, i)) {
    ir_func_fail_consume(ctx->func,
                         tpurt_status_create(TPURT_INTERNAL, "float list %d has no item %d", i, k));
    return IR_NONE;
  }
  if (ctx->num_params >= LOWER_MAX_PARAMS) {
    ir_func_fail_consume(
        ctx->func, tpurt_status_create(TPURT_UNIMPLEMENTED, "too many operands (max %d)", LOWER_MAX_PARAMS));
    return IR_NONE;
  }
  tpurt_dtype_t real = tpurt_dtype_to_real(dtype);
  ctx->params[ctx->num_params++] =
      (lower_param_t){.arg = ctx->arg_index[i], .item = k, .kind = LOWER_PARAM_LIST_ITEM, .dtype = real};
  return to_operand_type(ctx, ir_param(ctx->func, ir_type_scalar(real)), dtype);
}

bool lower_bool_list_item(const lower_ctx_t* ctx, int32_t i, int32_t k, bool if_none) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  if (a->kind != TPURT_ARG_INT_LIST || k < 0 || k >= a->u.ints.len) return if_none;
  return a->u.ints.data[k] != 0;
}

/* 0 and 1 first: the facts every number has. */
static const double kKeyedNumbers[] = {0.0, 1.0, 2.0, 3.0, 0.5, -0.5, -1.0, -2.0};

uint64_t lower_number_fact(double value, tpurt_scalar_tier_t tier) {
  const size_t n = tier == TPURT_TIER_WRAPPED ? sizeof(kKeyedNumbers) / sizeof(kKeyedNumbers[0]) : 2;
  for (size_t k = 0; k < n; ++k)
    if (value == kKeyedNumbers[k]) return k + 1;
  return 0;
}

bool lower_scalar_is(const lower_ctx_t* ctx, int32_t i, double value) {
  const tpurt_arg_t* a = lower_arg(ctx, i);
  /* INT and BOOL args are in the key whole; numbers by their facts */
  const bool number = a->kind == TPURT_ARG_SCALAR || a->kind == TPURT_ARG_FLOAT;
  const tpurt_scalar_tier_t tier = number ? a->u.scalar.tier : TPURT_TIER_WRAPPED;
  return lower_number_fact(value, tier) != 0 && lower_scalar_value(ctx, i) == value;
}

void lower_ctx_clear(lower_ctx_t* ctx) {
  memset(ctx, 0, offsetof(lower_ctx_t, tensor_values));
  ctx->num_results = 0;
  memset(ctx->result_permuted, 0, sizeof(ctx->result_permuted));
  ctx->num_params = 0;
  ctx->platform = NULL;
  ctx->rule = NULL;
  ctx->engine = NULL;
  ctx->read_tensor = NULL;
}

void lower_set_result(lower_ctx_t* ctx, int32_t k, ir_value_t value) {
  if (k < 0 || k >= LOWER_MAX_FLAT_ARGS) {
    ir_func_fail_consume(ctx->func, tpurt_status_create(TPURT_UNIMPLEMENTED, "too many results (max %d)",
                                                        LOWER_MAX_FLAT_ARGS));
    return;
  }
  /* results past num_results are not initialised (lower_ctx_clear): a
  ** result skipped over reads as value 0 */
  for (int32_t j = ctx->num_results; j < k; ++j) {
    ctx->results[j] = 0;
    if (j < TPURT_MAX_RESULTS) ctx->result_permuted[j] = false;
  }
  ctx->results[k] = value;
  if (k < TPURT_MAX_RESULTS) ctx->result_permuted[k] = false;
  if (k + 1 > ctx->num_results) ctx->num_results = k + 1;
}

TPURT_MUST_USE tpurt_status_t lower_error(tpurt_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpurt_status_t s = tpurt_status_vcreate(code, fmt, ap);
  va_end(ap);
  return s;
}

/*===--- type promotion (PyTorch's c10::promoteTypes and result_type) ---===*/

static int int_rank(tpurt_dtype_t d) {
  switch (d) {
    case TPURT_DTYPE_I8:
    case TPURT_DTYPE_U8:
      return 1;
    case TPURT_DTYPE_I16:
    case TPURT_DTYPE_U16:
      return 2;
    case TPURT_DTYPE_I32:
    case TPURT_DTYPE_U32:
      return 4;
    default:
      return 8;
  }
}

tpurt_dtype_t lower_promote(tpurt_dtype_t a, tpurt_dtype_t b) {
  if (a == b) return a;
  if (a == TPURT_DTYPE_INVALID) return b;
  if (b == TPURT_DTYPE_INVALID) return a;
  if (a == TPURT_DTYPE_BOOL) return b;
  if (b == TPURT_DTYPE_BOOL) return a;
  /* complex with anything: complex, with the wider of the real parts */
  if (tpurt_dtype_is_complex(a) || tpurt_dtype_is_complex(b))
    return tpurt_dtype_to_complex(lower_promote(tpurt_dtype_to_real(a), tpurt_dtype_to_real(b)));
  bool fa = tpurt_dtype_is_float(a), fb = tpurt_dtype_is_float(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    if ((a == TPURT_DTYPE_F16 && b == TPURT_DTYPE_BF16) || (a == TPURT_DTYPE_BF16 && b == TPURT_DTYPE_F16))
      return TPURT_DTYPE_F32;
    return tpurt_dtype_size(a) >= tpurt_dtype_size(b) ? a : b;
  }
  /* two different ints */
  bool ua = tpurt_dtype_is_unsigned(a), ub = tpurt_dtype_is_unsigned(b);
  if (ua == ub) return int_rank(a) >= int_rank(b) ? a : b;
  tpurt_dtype_t s = ua ? b : a, u = ua ? a : b;
  if (int_rank(s) > int_rank(u)) return s;
  /* u8 with i8 -> i16; wider unsigned with a signed int -> the next signed */
  switch (int_rank(u)) {
    case 1:
      return TPURT_DTYPE_I16;
    case 2:
      return TPURT_DTYPE_I32;
    default:
      return TPURT_DTYPE_I64;
  }
}

static int category(tpurt_dtype_t d) {
  if (d == TPURT_DTYPE_INVALID) return -1;
  if (d == TPURT_DTYPE_BOOL) return 0;
  if (tpurt_dtype_is_complex(d)) return 3;
  if (tpurt_dtype_is_float(d)) return 2;
  return 1;
}

/* c10's combine_categories: a higher tier wins unless it is of a lower
** category (bool < int < float < complex) than the lower tier. A complex
** lower tier keeps a float higher tier's width (f64 tensor + complex64
** 0-d tensor is complex128). */
static tpurt_dtype_t combine_categories(tpurt_dtype_t higher, tpurt_dtype_t lower) {
  if (higher == TPURT_DTYPE_INVALID) return lower;
  if (lower == TPURT_DTYPE_INVALID) return higher;
  if (category(higher) == 3) return higher;
  if (category(lower) == 3) return category(higher) == 2 ? tpurt_dtype_to_complex(higher) : lower;
  if (category(higher) == 2) return higher;
  if (higher == TPURT_DTYPE_BOOL || category(lower) == 2) return lower_promote(higher, lower);
  return higher;
}

tpurt_dtype_t lower_result_type(const lower_ctx_t* ctx, const int32_t* args, int32_t n) {
  tpurt_dtype_t tier[3] = {TPURT_DTYPE_INVALID, TPURT_DTYPE_INVALID, TPURT_DTYPE_INVALID};
  for (int32_t k = 0; k < n; ++k) {
    const tpurt_arg_t* a = lower_arg(ctx, args[k]);
    if (a->kind == TPURT_ARG_TENSOR) {
      int t = a->u.tensor.rank == 0 ? TPURT_TIER_ZERO_DIM : TPURT_TIER_TENSOR;
      tier[t] = lower_promote(tier[t], a->u.tensor.dtype);
    } else if (a->kind == TPURT_ARG_SCALAR || a->kind == TPURT_ARG_FLOAT) {
      tpurt_dtype_t d = a->u.scalar.dtype;
      int t = a->u.scalar.tier;
      if (t == TPURT_TIER_WRAPPED && tpurt_dtype_is_float(d)) d = LOWER_DEFAULT_FLOAT;
      if (t == TPURT_TIER_TENSOR) t = TPURT_TIER_ZERO_DIM;
      tier[t] = lower_promote(tier[t], d);
    } else if (a->kind == TPURT_ARG_INT) {
      tier[TPURT_TIER_WRAPPED] = lower_promote(tier[TPURT_TIER_WRAPPED], TPURT_DTYPE_I64);
    } else if (a->kind == TPURT_ARG_BOOL) {
      tier[TPURT_TIER_WRAPPED] = lower_promote(tier[TPURT_TIER_WRAPPED], TPURT_DTYPE_BOOL);
    }
  }
  return combine_categories(tier[0], combine_categories(tier[1], tier[2]));
}

bool lower_can_cast(tpurt_dtype_t from, tpurt_dtype_t to) {
  /* floats may not go to ints, non-bool may not go to bool */
  if (tpurt_dtype_is_complex(from) && !tpurt_dtype_is_complex(to)) return false;
  if (tpurt_dtype_is_float(from) && !tpurt_dtype_is_float(to) && !tpurt_dtype_is_complex(to)) return false;
  if (from != TPURT_DTYPE_BOOL && to == TPURT_DTYPE_BOOL) return false;
  return true;
}

/* PyTorch's C++ type names, which its matmul, conv and attention messages
** print ("float", "c10::BFloat16", "long int"). */
int64_t lower_numel(const tpurt_tensor_t* t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t->rank; ++d) n *= t->sizes[d];
  return n;
}

const char* lower_dtype_cpp_name(tpurt_dtype_t d) {
  switch (d) {
    case TPURT_DTYPE_F32:
      return "float";
    case TPURT_DTYPE_F64:
      return "double";
    case TPURT_DTYPE_F16:
      return "c10::Half";
    case TPURT_DTYPE_BF16:
      return "c10::BFloat16";
    case TPURT_DTYPE_I64:
      return "long int";
    case TPURT_DTYPE_I32:
      return "int";
    case TPURT_DTYPE_I16:
      return "short int";
    case TPURT_DTYPE_I8:
      return "signed char";
    case TPURT_DTYPE_U8:
      return "unsigned char";
    case TPURT_DTYPE_BOOL:
      return "bool";
    default:
      return tpurt_dtype_name(d);
  }
}

/*===--- shapes ---===*/

const char* lower_shape_str(int32_t rank, const int64_t* dims) {
  static _Thread_local char buf[4][160];
  static _Thread_local int next;
  char* s = buf[next++ & 3];
  size_t n = 0;
  n += (size_t)snprintf(s + n, 160 - n, "[");
  for (int32_t i = 0; i < rank && n < 150; ++i)
    n += (size_t)snprintf(s + n, 160 - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
  snprintf(s + n, 160 - n, "]");
  return s;
}

TPURT_MUST_USE tpurt_status_t lower_broadcast_shapes(int32_t rank_a, const int64_t* a, int32_t rank_b,
                                                     const int64_t* b, int32_t* out_rank, int64_t* out) {
  int32_t r = rank_a > rank_b ? rank_a : rank_b;
  int64_t tmp[TPURT_MAX_RANK];
  for (int32_t i = 0; i < r; ++i) {
    int32_t ia = i - (r - rank_a), ib = i - (r - rank_b);
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return lower_error(
          TPURT_INVALID_ARGUMENT,
          "The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton "
          "dimension %d",
          (long long)da, (long long)db, i);
    tmp[i] = da == 1 ? db : da;
  }
  for (int32_t i = 0; i < r; ++i) out[i] = tmp[i];
  *out_rank = r;
  return NULL;
}

ir_value_t lower_broadcast_to(lower_ctx_t* ctx, ir_value_t x, int32_t rank, const int64_t* dims) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  if (t->rank == rank) {
    bool same = true;
    for (int32_t i = 0; i < rank; ++i) same &= t->dims[i] == dims[i];
    if (same) return x;
  }
  /* Size-1 dims that broadcast are dropped first (broadcast_in_dim needs
  ** operand dim == 1 or equal; both work, but a reshape keeps it simple). */
  int64_t bdims[TPURT_MAX_RANK];
  int32_t off = rank - t->rank;
  for (int32_t i = 0; i < t->rank; ++i) bdims[i] = i + off;
  return ir_broadcast_in_dim(ctx->func, x, rank, dims, bdims);
}

/* A cast to float8_e4m3fn or float8_e5m2 as PyTorch's CPU kernels do it,
** which differs from XLA's convert in two ways (measured, and checked bit for
** bit by tests/test_float8.py): e4m3fn has no infinity, and PyTorch saturates
** out-of-range values and infinities to +-448 where XLA gives NaN; and a NaN
** becomes 0x7F with the input's sign, where XLA's convert drops the sign (and
** gives 0x7E for e5m2). The fnuz types have a single NaN (0x80) and need nothing. Other
** sources go through f32 first, as PyTorch's do. */
static ir_value_t cast_to_float8(lower_ctx_t* ctx, ir_value_t x, tpurt_dtype_t dtype) {
  ir_func_t* f = ctx->func;
  if (dtype == TPURT_DTYPE_F8E4M3FNUZ || dtype == TPURT_DTYPE_F8E5M2FNUZ) return ir_convert(f, x, dtype);
  const ir_type_t* t = ir_value_type(f, x);
  if (t->dtype == TPURT_DTYPE_BOOL || tpurt_dtype_is_integral(t->dtype) || tpurt_dtype_is_float8(t->dtype))
    x = ir_convert(f, x, TPURT_DTYPE_F32);
  ir_value_t finite = x;
  if (dtype == TPURT_DTYPE_F8E4M3FN)
    finite = ir_clamp(f, ir_const_like(f, x, -448.0), x, ir_const_like(f, x, 448.0));
  ir_value_t y = ir_convert(f, finite, dtype);
  /* the NaN's sign: the sign bit of |x| read as a signed int of its width */
  ir_type_t as_int = *ir_value_type(f, x);
  size_t width = tpurt_dtype_size(as_int.dtype);
  as_int.dtype = width == 8 ? TPURT_DTYPE_I64 : width == 4 ? TPURT_DTYPE_I32 : TPURT_DTYPE_I16;
  ir_value_t x_bits = ir_bitcast_convert(f, x, as_int);
  ir_value_t negative = ir_compare(f, IR_LT, x_bits, ir_const_like(f, x_bits, 0.0));
  ir_type_t f8 = as_int;
  f8.dtype = TPURT_DTYPE_U8;
  ir_value_t nan_bits = ir_select(f, negative, ir_splat(f, TPURT_DTYPE_U8, f8.rank, f8.dims, 255.0),
                                  ir_splat(f, TPURT_DTYPE_U8, f8.rank, f8.dims, 127.0));
  /* selected as bytes: XLA:CPU canonicalises an e5m2 NaN that a select on
  ** float8 values passes through */
  ir_value_t y_bits = ir_bitcast_convert(f, y, f8);
  ir_value_t out = ir_select(f, ir_compare(f, IR_NE, x, x), nan_bits, y_bits);
  f8.dtype = dtype;
  return ir_bitcast_convert(f, out, f8);
}

ir_value_t lower_cast(lower_ctx_t* ctx, ir_value_t x, tpurt_dtype_t dtype) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t || t->dtype == dtype) return x;
  if (dtype == TPURT_DTYPE_BOOL) {
    /* PyTorch: nonzero -> true (convert would truncate for floats) */
    ir_value_t zero = ir_const_like(ctx->func, x, 0.0);
    return ir_compare(ctx->func, IR_NE, x, zero);
  }
  /* complex to real keeps the real part, as PyTorch's casts do (StableHLO
  ** converts complex only to complex) */
  if (tpurt_dtype_is_complex(t->dtype) && !tpurt_dtype_is_complex(dtype))
    return lower_cast(ctx, ir_complex_part(ctx->func, IR_OP_REAL, x), dtype);
  if (tpurt_dtype_is_float8(dtype)) return cast_to_float8(ctx, x, dtype);
  return ir_convert(ctx->func, x, dtype);
}

TPURT_MUST_USE tpurt_status_t lower_need_float(const lower_ctx_t* ctx, const char* kernel) {
  tpurt_dtype_t d = lower_meta(ctx, 0)->dtype;
  if (!tpurt_dtype_is_float(d))
    return lower_error(TPURT_INVALID_ARGUMENT, "\"%s\" not implemented for '%s'", kernel,
                       tpurt_dtype_name(d));
  return NULL;
}

TPURT_MUST_USE tpurt_status_t lower_wrap_dim(int64_t dim, int32_t rank, int64_t* out_dim) {
  int32_t r = rank > 0 ? rank : 1;
  if (dim < -r || dim >= r)
    return lower_error(TPURT_OUT_OF_RANGE,
                       "Dimension out of range (expected to be in range of [%d, %d], but got %lld)", -r,
                       r - 1, (long long)dim);
  *out_dim = dim < 0 ? dim + r : dim;
  return NULL;
}

tpurt_dtype_t lower_acc_dtype(tpurt_dtype_t dtype) {
  return (dtype == TPURT_DTYPE_BF16 || dtype == TPURT_DTYPE_F16) ? TPURT_DTYPE_F32 : dtype;
}

ir_value_t lower_extreme(lower_ctx_t* ctx, tpurt_dtype_t dtype, bool largest) {
  if (tpurt_dtype_is_float(dtype)) return ir_constant_f64(ctx->func, dtype, largest ? INFINITY : -INFINITY);
  int64_t lo = 0, hi = 0;
  switch (dtype) {
    case TPURT_DTYPE_BOOL:
      hi = 1;
      break;
    case TPURT_DTYPE_U8:
      hi = UINT8_MAX;
      break;
    case TPURT_DTYPE_U16:
      hi = UINT16_MAX;
      break;
    case TPURT_DTYPE_U32:
      hi = UINT32_MAX;
      break;
    case TPURT_DTYPE_U64:
      hi = -1; /* all bits set: UINT64_MAX */
      break;
    case TPURT_DTYPE_I8:
      lo = INT8_MIN, hi = INT8_MAX;
      break;
    case TPURT_DTYPE_I16:
      lo = INT16_MIN, hi = INT16_MAX;
      break;
    case TPURT_DTYPE_I32:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
    default:
      lo = INT64_MIN, hi = INT64_MAX;
      break;
  }
  return ir_constant_i64(ctx->func, dtype, largest ? hi : lo);
}

ir_value_t lower_max_min(lower_ctx_t* ctx, ir_op_t op, ir_value_t a, ir_value_t b) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, a);
  if (!t) return IR_NONE;
  if (t->dtype == TPURT_DTYPE_BOOL) return ir_binary(f, op == IR_OP_MAXIMUM ? IR_OP_OR : IR_OP_AND, a, b);
  ir_value_t m = ir_binary(f, op, a, b);
  if (!tpurt_dtype_is_float(t->dtype)) return m;
  m = ir_select(f, ir_compare(f, IR_NE, b, b), b, m);
  return ir_select(f, ir_compare(f, IR_NE, a, a), a, m);
}

TPURT_MUST_USE tpurt_status_t lower_dim_arg(const lower_ctx_t* ctx, int32_t i, int32_t rank,
                                            int64_t* out_dim) {
  return lower_wrap_dim(lower_int(ctx, i, 0), rank, out_dim);
}

ir_value_t lower_gather_along(lower_ctx_t* ctx, ir_value_t x, int64_t dim, ir_value_t indices) {
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  ir_gather_dims_t g = {0};
  for (int32_t i = 0; i < t->rank; ++i) {
    if (i != dim) g.offset_dims[g.num_offset_dims++] = i;
    g.slice_sizes[i] = i == dim ? 1 : t->dims[i];
  }
  g.num_collapsed = 1;
  g.collapsed_slice_dims[0] = dim;
  g.num_start_index_map = 1;
  g.start_index_map[0] = dim;
  g.index_vector_dim = 1;
  return ir_gather(ctx->func, x, indices, &g);
}

ir_scatter_dims_t lower_scatter_dims_along(int32_t rank, int64_t dim) {
  ir_scatter_dims_t s = {0};
  for (int32_t i = 0; i < rank; ++i)
    if (i != dim) s.update_window_dims[s.num_update_window_dims++] = i;
  s.num_inserted = 1;
  s.inserted_window_dims[0] = dim;
  s.num_scatter_dims_to_operand = 1;
  s.scatter_dims_to_operand_dims[0] = dim;
  s.index_vector_dim = 1;
  return s;
}

void lower_while_counter_in(lower_ctx_t* ctx, ir_region_op_t* loop, ir_value_t counter, int64_t lo,
                            int64_t hi, ir_value_t* args) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t = ir_value_type(f, counter);
  tpurt_dtype_t dt = t ? t->dtype : TPURT_DTYPE_I32;
  ir_value_t go = ir_and(f, ir_compare(f, IR_GE, counter, ir_constant_i64(f, dt, lo)),
                         ir_compare(f, IR_LT, counter, ir_constant_i64(f, dt, hi)));
  ir_region_end(f, &go, 1);
  ir_while_body(f, loop, args);
}

ir_value_t lower_scan(lower_ctx_t* ctx, ir_value_t x, int64_t dim, ir_op_t op, double identity) {
  ir_func_t* f = ctx->func;
  const ir_type_t* t0 = ir_value_type(f, x);
  if (!t0) return IR_NONE;
  ir_type_t t = *t0;
  ir_value_t pad_value = tpurt_dtype_is_float(t.dtype) ? ir_constant_f64(f, t.dtype, identity)
                                                       : ir_constant_i64(f, t.dtype, (int64_t)identity);
  for (int64_t shift = 1; shift < t.dims[dim]; shift *= 2) {
    /* x = x op (x shifted right by |shift| along dim, identities shifted in) */
    int64_t lo[TPURT_MAX_RANK] = {0}, hi[TPURT_MAX_RANK] = {0}, in[TPURT_MAX_RANK] = {0};
    int64_t st[TPURT_MAX_RANK] = {0}, li[TPURT_MAX_RANK], one[TPURT_MAX_RANK];
    for (int32_t i = 0; i < t.rank; ++i) {
      li[i] = t.dims[i];
      one[i] = 1;
    }
    lo[dim] = shift;
    ir_value_t padded = ir_pad(f, x, pad_value, lo, hi, in);
    x = ir_binary(f, op, x, ir_slice(f, padded, st, li, one));
  }
  return x;
}

ir_value_t lower_cumsum(lower_ctx_t* ctx, ir_value_t x, int64_t dim) {
  return lower_scan(ctx, x, dim, IR_OP_ADD, 0.0);
}
