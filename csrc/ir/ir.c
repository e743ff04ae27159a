/* ir.c: the StableHLO builder (values, ops, regions, shape inference) and
** its MLIR text printer (generic op syntax throughout).
**
** Storage: one arena per function. Values, ops, parameters and the op list
** of every block are arena arrays that grow by doubling; an outgrown array
** is left in the arena, so a pointer handed out by ir_value_type stays
** valid (and correct: entries never change) for the function's life.
**
** Attributes are rendered to text when an op is built (they hold numbers
** only, never value names), so printing is a plain walk over the blocks.
*/
#include "ir.h"

#include <math.h>
#include <stdio.h>

#include "../base/base.h"

/*===------------------------------------------------------------------===*/
/* Data                                                                   */
/*===------------------------------------------------------------------===*/

typedef struct ir_region_s ir_region_t;

typedef struct ir_value_info_s {
  ir_type_t type;
  int32_t base;             /* first result of the defining op (== id if single) */
  int32_t index;            /* result index within the defining op */
  int32_t count;            /* number of results of the defining op (1: params, args) */
  const ir_region_t* scope; /* the block that defines it */
} ir_value_info_t;

typedef struct ir_op_s {
  const char* name; /* "stablehlo.add" */
  const ir_value_t* operands;
  int32_t num_operands;
  ir_value_t first_result;
  int32_t num_results;
  const char* attrs;   /* "dimensions = array<i64: 1>" or NULL */
  ir_region_t* region; /* at most one region (reduce, scatter) */
} ir_op_t;

struct ir_region_s {
  /* the block's arguments */
  ir_value_t* args;
  int32_t num_args;
  /* the block's ops, as indices into func->ops */
  int32_t* ops;
  int32_t num_ops, cap_ops;
  /* what the closing stablehlo.return must carry; -1 for the function
  ** body and for detached regions of failed ops (anything goes) */
  int32_t num_returns;
  tpurt_dtype_t return_dtypes[TPURT_MAX_RESULTS];
  const char* owner; /* op name, for messages */
};

#define IR_MAX_OPEN_REGIONS 32

struct ir_func_s {
  tpurt_arena_t arena;
  tpurt_status_t status;
  ir_value_info_t* values;
  int32_t num_values, cap_values;
  ir_op_t* ops;
  int32_t num_ops, cap_ops;
  ir_value_t* params;
  int32_t num_params, cap_params;
  ir_value_t* results;
  int32_t num_results;
  ir_region_t body;
  ir_region_t* open[IR_MAX_OPEN_REGIONS]; /* open[0] is &body */
  int32_t num_open;
  ir_precision_t precision; /* for f32/f64 dots and convolutions built next */
};

/* Grows an arena array of |elem|-byte entries to hold count + 1 entries. */
static void* grow(tpurt_arena_t* arena, void* data, int32_t count, int32_t* cap, size_t elem) {
  if (count < *cap) return data;
  int32_t new_cap = *cap ? *cap * 2 : 16;
  void* bigger = tpurt_arena_alloc(arena, (size_t)new_cap * elem);
  if (count) memcpy(bigger, data, (size_t)count * elem);
  *cap = new_cap;
  return bigger;
}

/*===------------------------------------------------------------------===*/
/* Types                                                                  */
/*===------------------------------------------------------------------===*/

ir_type_t ir_type_make(tpurt_dtype_t dtype, int32_t rank, const int64_t* dims) {
  ir_type_t type;
  memset(&type, 0, sizeof(type));
  type.dtype = dtype;
  type.rank = rank < 0 ? 0 : (rank > TPURT_MAX_RANK ? TPURT_MAX_RANK : rank);
  for (int32_t i = 0; i < type.rank; ++i) type.dims[i] = dims[i];
  return type;
}

ir_type_t ir_type_scalar(tpurt_dtype_t dtype) { return ir_type_make(dtype, 0, NULL); }

int64_t ir_type_numel(const ir_type_t* type) {
  int64_t n = 1;
  for (int32_t i = 0; i < type->rank; ++i) n *= type->dims[i];
  return n;
}

bool ir_type_equal(const ir_type_t* a, const ir_type_t* b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; ++i)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

const char* ir_dtype_mlir_name(tpurt_dtype_t dtype) {
  switch (dtype) {
    case TPURT_DTYPE_BOOL:
      return "i1";
    case TPURT_DTYPE_U8:
      return "ui8";
    case TPURT_DTYPE_I8:
      return "i8";
    case TPURT_DTYPE_I16:
      return "i16";
    case TPURT_DTYPE_I32:
      return "i32";
    case TPURT_DTYPE_I64:
      return "i64";
    case TPURT_DTYPE_F16:
      return "f16";
    case TPURT_DTYPE_BF16:
      return "bf16";
    case TPURT_DTYPE_F32:
      return "f32";
    case TPURT_DTYPE_F64:
      return "f64";
    case TPURT_DTYPE_U16:
      return "ui16";
    case TPURT_DTYPE_U32:
      return "ui32";
    case TPURT_DTYPE_U64:
      return "ui64";
    case TPURT_DTYPE_F8E4M3FN:
      return "f8E4M3FN";
    case TPURT_DTYPE_F8E5M2:
      return "f8E5M2";
    case TPURT_DTYPE_F8E4M3FNUZ:
      return "f8E4M3FNUZ";
    case TPURT_DTYPE_F8E5M2FNUZ:
      return "f8E5M2FNUZ";
    default:
      return "invalid";
  }
}

static bool dtype_valid(tpurt_dtype_t dtype) {
  return dtype > TPURT_DTYPE_INVALID && dtype < TPURT_DTYPE_COUNT;
}

static bool dtype_is_int(tpurt_dtype_t dtype) { return tpurt_dtype_is_integral(dtype); }

/* tensor<2x3xbf16> */
static void print_type(tpurt_strbuf_t* buf, const ir_type_t* type) {
  tpurt_strbuf_puts(buf, "tensor<");
  for (int32_t i = 0; i < type->rank; ++i) tpurt_strbuf_printf(buf, "%lldx", (long long)type->dims[i]);
  tpurt_strbuf_puts(buf, ir_dtype_mlir_name(type->dtype));
  tpurt_strbuf_puts(buf, ">");
}

/* A type for messages, in a small rotating set of static buffers (errors
** only; at most a few per message). */
static const char* type_str(const ir_type_t* type) {
  static _Thread_local char bufs[4][128];
  static _Thread_local int next;
  char* out = bufs[next++ & 3];
  tpurt_strbuf_t buf = {0};
  print_type(&buf, type);
  snprintf(out, 128, "%s", buf.data);
  tpurt_strbuf_free(&buf);
  return out;
}

/*===------------------------------------------------------------------===*/
/* Functions, values, errors                                              */
/*===------------------------------------------------------------------===*/

ir_func_t* ir_func_create(void) {
  ir_func_t* func = tpurt_xcalloc(1, sizeof(*func));
  func->body.num_returns = -1;
  func->body.owner = "func.func";
  func->open[0] = &func->body;
  func->num_open = 1;
  return func;
}

void ir_func_destroy(ir_func_t* func) {
  if (!func) return;
  tpurt_status_free(func->status);
  tpurt_arena_free(&func->arena);
  free(func);
}

tpurt_status_t ir_func_status(const ir_func_t* func) { return func ? func->status : NULL; }

void ir_func_fail(ir_func_t* func, tpurt_status_t status) {
  if (!func || !status) return;
  if (func->status)
    tpurt_status_free(status);
  else
    func->status = status;
}

static void failf(ir_func_t* func, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void failf(ir_func_t* func, const char* fmt, ...) {
  if (func->status) return;
  va_list ap;
  va_start(ap, fmt);
  func->status = tpurt_status_vcreate(TPURT_INTERNAL, fmt, ap);
  va_end(ap);
}

int32_t ir_func_num_params(const ir_func_t* func) { return func->num_params; }
int32_t ir_func_num_ops(const ir_func_t* func) { return func->num_ops; }

const ir_type_t* ir_value_type(const ir_func_t* func, ir_value_t value) {
  if (!func || value < 0 || value >= func->num_values) return NULL;
  return &func->values[value].type;
}

/* The type of an operand of |op|, or NULL: silently for IR_NONE (an earlier
** error), with a new error for an id that was never made or one defined in
** a region that is closed now (out of scope). */
static const ir_type_t* operand(ir_func_t* func, const char* op, ir_value_t value) {
  if (value == IR_NONE) return NULL;
  if (value < 0 || value >= func->num_values) {
    failf(func, "%s: operand %%v%d is not a value of this function (it has %d)", op, (int)value,
          (int)func->num_values);
    return NULL;
  }
  const ir_region_t* scope = func->values[value].scope;
  for (int32_t i = func->num_open - 1; i >= 0; --i)
    if (func->open[i] == scope) return &func->values[value].type;
  failf(func, "%s: operand %%v%d is defined inside a region of %s that is closed", op, (int)value,
        scope->owner);
  return NULL;
}

/* Makes |count| new values with consecutive ids sharing one base name. */
static ir_value_t new_values(ir_func_t* func, const ir_type_t* types, int32_t count) {
  ir_value_t first = func->num_values;
  for (int32_t i = 0; i < count; ++i) {
    func->values =
        grow(&func->arena, func->values, func->num_values, &func->cap_values, sizeof(ir_value_info_t));
    ir_value_info_t* info = &func->values[func->num_values++];
    info->type = types[i];
    info->base = first;
    info->index = i;
    info->count = count;
    info->scope = func->open[func->num_open - 1];
  }
  return first;
}

static bool check_type(ir_func_t* func, const char* op, const ir_type_t* type) {
  if (!dtype_valid(type->dtype)) {
    failf(func, "%s: invalid element type %d", op, (int)type->dtype);
    return false;
  }
  if (type->rank < 0 || type->rank > TPURT_MAX_RANK) {
    failf(func, "%s: rank %d is outside [0, %d]", op, (int)type->rank, TPURT_MAX_RANK);
    return false;
  }
  for (int32_t i = 0; i < type->rank; ++i) {
    if (type->dims[i] < 0) {
      failf(func, "%s: dimension %d of the result has negative size %lld", op, (int)i,
            (long long)type->dims[i]);
      return false;
    }
  }
  return true;
}

ir_value_t ir_param(ir_func_t* func, ir_type_t type) {
  if (!func) return IR_NONE;
  if (!check_type(func, "func.func parameter", &type)) return IR_NONE;
  ir_value_t v = new_values(func, &type, 1);
  func->values[v].scope = &func->body; /* even when a region is open */
  func->params = grow(&func->arena, func->params, func->num_params, &func->cap_params, sizeof(ir_value_t));
  func->params[func->num_params++] = v;
  return v;
}

void ir_func_set_results(ir_func_t* func, const ir_value_t* values, int32_t count) {
  if (!func) return;
  for (int32_t i = 0; i < count; ++i) {
    if (values[i] == IR_NONE) {
      failf(func, "func.return: result %d is IR_NONE", (int)i);
      return;
    }
    if (!operand(func, "func.return", values[i])) return;
  }
  func->results = tpurt_arena_alloc(&func->arena, (size_t)(count > 0 ? count : 1) * sizeof(ir_value_t));
  if (count > 0) memcpy(func->results, values, (size_t)count * sizeof(ir_value_t));
  func->num_results = count;
}

/* Appends an op to the innermost open block. |attrs| is copied. Returns
** the op's index. Result values must be made by the caller first. */
static int32_t add_op(ir_func_t* func, const char* name, const ir_value_t* operands, int32_t num_operands,
                      ir_value_t first_result, int32_t num_results, const char* attrs) {
  func->ops = grow(&func->arena, func->ops, func->num_ops, &func->cap_ops, sizeof(ir_op_t));
  int32_t index = func->num_ops++;
  ir_op_t* op = &func->ops[index];
  memset(op, 0, sizeof(*op));
  op->name = tpurt_arena_strdup(&func->arena, name);
  if (num_operands > 0) {
    ir_value_t* copy = tpurt_arena_alloc(&func->arena, (size_t)num_operands * sizeof(ir_value_t));
    memcpy(copy, operands, (size_t)num_operands * sizeof(ir_value_t));
    op->operands = copy;
  }
  op->num_operands = num_operands;
  op->first_result = first_result;
  op->num_results = num_results;
  op->attrs = attrs ? tpurt_arena_strdup(&func->arena, attrs) : NULL;
  ir_region_t* block = func->open[func->num_open - 1];
  block->ops = grow(&func->arena, block->ops, block->num_ops, &block->cap_ops, sizeof(int32_t));
  block->ops[block->num_ops++] = index;
  return index;
}

/* The common case: one result of |type|. */
static ir_value_t emit(ir_func_t* func, const char* name, const ir_value_t* operands, int32_t num_operands,
                       const ir_type_t* type, const char* attrs) {
  if (!check_type(func, name, type)) return IR_NONE;
  ir_value_t v = new_values(func, type, 1);
  add_op(func, name, operands, num_operands, v, 1, attrs);
  return v;
}

/* Same as emit, with attributes built in a strbuf that this frees. */
static ir_value_t emit_buf(ir_func_t* func, const char* name, const ir_value_t* operands,
                           int32_t num_operands, const ir_type_t* type, tpurt_strbuf_t* attrs) {
  ir_value_t v = emit(func, name, operands, num_operands, type, attrs->data);
  tpurt_strbuf_free(attrs);
  return v;
}

/*===------------------------------------------------------------------===*/
/* Attribute text                                                         */
/*===------------------------------------------------------------------===*/

/* array<i64: 1, 2> (array<i64> when empty) */
static void put_i64_array(tpurt_strbuf_t* buf, const int64_t* values, int32_t count) {
  tpurt_strbuf_puts(buf, count ? "array<i64: " : "array<i64");
  for (int32_t i = 0; i < count; ++i) tpurt_strbuf_printf(buf, "%s%lld", i ? ", " : "", (long long)values[i]);
  tpurt_strbuf_puts(buf, ">");
}

/* [1, 2] ([] when empty) */
static void put_list(tpurt_strbuf_t* buf, const int64_t* values, int32_t count) {
  tpurt_strbuf_puts(buf, "[");
  for (int32_t i = 0; i < count; ++i) tpurt_strbuf_printf(buf, "%s%lld", i ? ", " : "", (long long)values[i]);
  tpurt_strbuf_puts(buf, "]");
}

static void put_named_array(tpurt_strbuf_t* buf, const char* sep, const char* name, const int64_t* values,
                            int32_t count) {
  tpurt_strbuf_printf(buf, "%s%s = ", sep, name);
  put_i64_array(buf, values, count);
}

/*===------------------------------------------------------------------===*/
/* Constants                                                              */
/*===------------------------------------------------------------------===*/

static uint64_t f64_bits(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof(b));
  return b;
}

static uint32_t f32_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof(b));
  return b;
}

/* bf16: the f32 value rounded to nearest even on its top 16 bits. */
static uint16_t bf16_bits(double value) {
  uint32_t b = f32_bits((float)value);
  if (isnan(value)) return (uint16_t)((b >> 16) | 0x0040); /* stay a (quiet) NaN */
  b += 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(b >> 16);
}

/* IEEE half, rounded to nearest even from the double value. */
static uint16_t f16_bits(double value) {
  uint64_t b = f64_bits(value);
  uint16_t sign = (uint16_t)((b >> 48) & 0x8000u);
  int exp = (int)((b >> 52) & 0x7ff);
  uint64_t mant = b & ((1ULL << 52) - 1);
  if (exp == 0x7ff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x0200u | (uint16_t)(mant >> 42) : 0u));
  if (exp == 0) return sign; /* zero or a double subnormal: far below half's range */
  int e = exp - 1023;
  if (e > 15) return (uint16_t)(sign | 0x7c00u);
  uint64_t sig = mant | (1ULL << 52);
  int shift = e >= -14 ? 42 : 42 + (-14 - e);
  if (shift >= 54) return sign; /* below half the smallest subnormal */
  uint64_t m = sig >> shift;
  uint64_t rem = sig & ((1ULL << shift) - 1);
  uint64_t half = 1ULL << (shift - 1);
  if (rem > half || (rem == half && (m & 1))) ++m;
  /* normal: m carries the implicit bit (1 << 10), so adding it to the
  ** exponent field minus one yields the right bits, carry included;
  ** subnormal: m is the bits (0x400 is the smallest normal) */
  uint32_t bits = e >= -14 ? ((uint32_t)(e + 14) << 10) + (uint32_t)m : (uint32_t)m;
  return (uint16_t)(sign | bits);
}

/* One element, as the dense literal of |dtype| needs it. Floats are hex
** bit patterns (exact, and inf/nan have no other spelling). Integers are
** wrapped to the type's width so the literal is in range. */
static void put_f64_elem(tpurt_strbuf_t* buf, tpurt_dtype_t dtype, double value) {
  switch (dtype) {
    case TPURT_DTYPE_F32:
      tpurt_strbuf_printf(buf, "0x%08X", (unsigned)f32_bits((float)value));
      break;
    case TPURT_DTYPE_BF16:
      tpurt_strbuf_printf(buf, "0x%04X", (unsigned)bf16_bits(value));
      break;
    case TPURT_DTYPE_F16:
      tpurt_strbuf_printf(buf, "0x%04X", (unsigned)f16_bits(value));
      break;
    default:
      tpurt_strbuf_printf(buf, "0x%016llX", (unsigned long long)f64_bits(value));
      break;
  }
}

static void put_i64_elem(tpurt_strbuf_t* buf, tpurt_dtype_t dtype, int64_t value) {
  uint64_t u = (uint64_t)value;
  switch (dtype) {
    case TPURT_DTYPE_BOOL:
      tpurt_strbuf_puts(buf, value ? "true" : "false");
      break;
    case TPURT_DTYPE_I8:
      tpurt_strbuf_printf(buf, "%d", (int)(int8_t)(uint8_t)u);
      break;
    case TPURT_DTYPE_I16:
      tpurt_strbuf_printf(buf, "%d", (int)(int16_t)(uint16_t)u);
      break;
    case TPURT_DTYPE_I32:
      tpurt_strbuf_printf(buf, "%ld", (long)(int32_t)(uint32_t)u);
      break;
    case TPURT_DTYPE_I64:
      tpurt_strbuf_printf(buf, "%lld", (long long)value);
      break;
    case TPURT_DTYPE_U8:
      tpurt_strbuf_printf(buf, "%u", (unsigned)(uint8_t)u);
      break;
    case TPURT_DTYPE_U16:
      tpurt_strbuf_printf(buf, "%u", (unsigned)(uint16_t)u);
      break;
    case TPURT_DTYPE_U32:
      tpurt_strbuf_printf(buf, "%lu", (unsigned long)(uint32_t)u);
      break;
    default:
      tpurt_strbuf_printf(buf, "%llu", (unsigned long long)u);
      break; /* U64 */
  }
}

static void put_elem(tpurt_strbuf_t* buf, tpurt_dtype_t dtype, int64_t value) {
  if (tpurt_dtype_is_float(dtype))
    put_f64_elem(buf, dtype, (double)value);
  else
    put_i64_elem(buf, dtype, value);
}

/* Nested [..] per dimension, from values[*pos]. */
static void put_nested(tpurt_strbuf_t* buf, const ir_type_t* type, int32_t dim, const int64_t* values,
                       int64_t* pos) {
  if (dim == type->rank) {
    put_elem(buf, type->dtype, values[(*pos)++]);
    return;
  }
  tpurt_strbuf_puts(buf, "[");
  for (int64_t i = 0; i < type->dims[dim]; ++i) {
    if (i) tpurt_strbuf_puts(buf, ", ");
    put_nested(buf, type, dim + 1, values, pos);
  }
  tpurt_strbuf_puts(buf, "]");
}

static ir_value_t emit_constant(ir_func_t* func, const ir_type_t* type, tpurt_strbuf_t* literal) {
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_printf(&attrs, "value = dense<%s> : ", literal->data ? literal->data : "");
  print_type(&attrs, type);
  tpurt_strbuf_free(literal);
  return emit_buf(func, "stablehlo.constant", NULL, 0, type, &attrs);
}

ir_value_t ir_constant_f64(ir_func_t* func, tpurt_dtype_t dtype, double value) {
  if (!func) return IR_NONE;
  if (!dtype_valid(dtype)) {
    failf(func, "stablehlo.constant: invalid element type %d", (int)dtype);
    return IR_NONE;
  }
  if (!tpurt_dtype_is_float(dtype)) {
    if (dtype == TPURT_DTYPE_BOOL) return ir_constant_i64(func, dtype, value != 0);
    if (!isfinite(value) || value >= 9223372036854775808.0 || value < -9223372036854775808.0) {
      failf(func, "stablehlo.constant: %g does not fit %s", value, ir_dtype_mlir_name(dtype));
      return IR_NONE;
    }
    return ir_constant_i64(func, dtype, (int64_t)value);
  }
  ir_type_t type = ir_type_scalar(dtype);
  tpurt_strbuf_t literal = {0};
  put_f64_elem(&literal, dtype, value);
  return emit_constant(func, &type, &literal);
}

ir_value_t ir_constant_i64(ir_func_t* func, tpurt_dtype_t dtype, int64_t value) {
  if (!func) return IR_NONE;
  if (!dtype_valid(dtype)) {
    failf(func, "stablehlo.constant: invalid element type %d", (int)dtype);
    return IR_NONE;
  }
  ir_type_t type = ir_type_scalar(dtype);
  tpurt_strbuf_t literal = {0};
  put_elem(&literal, dtype, value);
  return emit_constant(func, &type, &literal);
}

ir_value_t ir_constant_i64_array(ir_func_t* func, ir_type_t type, const int64_t* values) {
  if (!func) return IR_NONE;
  if (!check_type(func, "stablehlo.constant", &type)) return IR_NONE;
  tpurt_strbuf_t literal = {0};
  if (ir_type_numel(&type) == 0) {
    tpurt_strbuf_puts(&literal, ""); /* dense<> parses for every empty shape */
  } else {
    int64_t pos = 0;
    put_nested(&literal, &type, 0, values, &pos);
  }
  return emit_constant(func, &type, &literal);
}

ir_value_t ir_iota(ir_func_t* func, ir_type_t type, int32_t dimension) {
  if (!func) return IR_NONE;
  if (type.rank < 1 || dimension < 0 || dimension >= type.rank) {
    failf(func, "stablehlo.iota: iota_dimension %d is outside the rank %d of %s", (int)dimension,
          (int)type.rank, type_str(&type));
    return IR_NONE;
  }
  if (type.dtype == TPURT_DTYPE_BOOL) {
    failf(func, "stablehlo.iota: element type i1 is not supported");
    return IR_NONE;
  }
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "iota_dimension = %d : i64", (int)dimension);
  return emit(func, "stablehlo.iota", NULL, 0, &type, attrs);
}

/*===------------------------------------------------------------------===*/
/* Elementwise                                                            */
/*===------------------------------------------------------------------===*/

ir_value_t ir_unary(ir_func_t* func, const char* op, ir_value_t x) {
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  ir_type_t type = *t;
  return emit(func, op, &x, 1, &type, NULL);
}

static bool same_type(ir_func_t* func, const char* op, const char* what, const ir_type_t* a,
                      const ir_type_t* b) {
  if (ir_type_equal(a, b)) return true;
  failf(func, "%s: %s must have the same type, got %s and %s", op, what, type_str(a), type_str(b));
  return false;
}

ir_value_t ir_binary(ir_func_t* func, const char* op, ir_value_t a, ir_value_t b) {
  if (!func) return IR_NONE;
  const ir_type_t* ta = operand(func, op, a);
  const ir_type_t* tb = operand(func, op, b);
  if (!ta || !tb) return IR_NONE;
  if (!same_type(func, op, "operands", ta, tb)) return IR_NONE;
  ir_type_t type = *ta;
  ir_value_t operands[2] = {a, b};
  return emit(func, op, operands, 2, &type, NULL);
}

ir_value_t ir_is_finite(ir_func_t* func, ir_value_t x) {
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, "stablehlo.is_finite", x);
  if (!t) return IR_NONE;
  if (!tpurt_dtype_is_float(t->dtype)) {
    failf(func, "stablehlo.is_finite: expected a float operand, got %s", type_str(t));
    return IR_NONE;
  }
  ir_type_t type = *t;
  type.dtype = TPURT_DTYPE_BOOL;
  return emit(func, "stablehlo.is_finite", &x, 1, &type, NULL);
}

ir_value_t ir_compare(ir_func_t* func, ir_compare_dir_t dir, ir_value_t a, ir_value_t b) {
  static const char* const kDirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  const char* op = "stablehlo.compare";
  if (!func) return IR_NONE;
  const ir_type_t* ta = operand(func, op, a);
  const ir_type_t* tb = operand(func, op, b);
  if (!ta || !tb) return IR_NONE;
  if ((int)dir < 0 || (int)dir > (int)IR_GE) {
    failf(func, "%s: invalid comparison direction %d", op, (int)dir);
    return IR_NONE;
  }
  if (!same_type(func, op, "operands", ta, tb)) return IR_NONE;
  /* i1 compares UNSIGNED (false < true); XLA's verifier rejects SIGNED. */
  const char* kind = tpurt_dtype_is_float(ta->dtype)        ? "FLOAT"
                     : tpurt_dtype_is_signed_int(ta->dtype) ? "SIGNED"
                                                            : "UNSIGNED";
  char attrs[160];
  snprintf(attrs, sizeof(attrs),
           "comparison_direction = #stablehlo<comparison_direction %s>, compare_type = "
           "#stablehlo<comparison_type %s>",
           kDirs[dir], kind);
  ir_type_t type = *ta;
  type.dtype = TPURT_DTYPE_BOOL;
  ir_value_t operands[2] = {a, b};
  return emit(func, op, operands, 2, &type, attrs);
}

ir_value_t ir_select(ir_func_t* func, ir_value_t pred, ir_value_t on_true, ir_value_t on_false) {
  const char* op = "stablehlo.select";
  if (!func) return IR_NONE;
  const ir_type_t* tp = operand(func, op, pred);
  const ir_type_t* tt = operand(func, op, on_true);
  const ir_type_t* tf = operand(func, op, on_false);
  if (!tp || !tt || !tf) return IR_NONE;
  if (!same_type(func, op, "on_true and on_false", tt, tf)) return IR_NONE;
  ir_type_t want = *tt;
  want.dtype = TPURT_DTYPE_BOOL;
  if (tp->dtype != TPURT_DTYPE_BOOL || (tp->rank != 0 && !ir_type_equal(tp, &want))) {
    failf(func, "%s: pred must be tensor<i1> or %s, got %s", op, type_str(&want), type_str(tp));
    return IR_NONE;
  }
  ir_type_t type = *tt;
  ir_value_t operands[3] = {pred, on_true, on_false};
  return emit(func, op, operands, 3, &type, NULL);
}

ir_value_t ir_clamp(ir_func_t* func, ir_value_t min, ir_value_t x, ir_value_t max) {
  const char* op = "stablehlo.clamp";
  if (!func) return IR_NONE;
  const ir_type_t* tmin = operand(func, op, min);
  const ir_type_t* tx = operand(func, op, x);
  const ir_type_t* tmax = operand(func, op, max);
  if (!tmin || !tx || !tmax) return IR_NONE;
  const ir_type_t* bounds[2] = {tmin, tmax};
  for (int i = 0; i < 2; ++i) {
    if (bounds[i]->dtype != tx->dtype || (bounds[i]->rank != 0 && !ir_type_equal(bounds[i], tx))) {
      failf(func, "%s: %s must be rank-0 %s or %s, got %s", op, i ? "max" : "min",
            ir_dtype_mlir_name(tx->dtype), type_str(tx), type_str(bounds[i]));
      return IR_NONE;
    }
  }
  ir_type_t type = *tx;
  ir_value_t operands[3] = {min, x, max};
  return emit(func, op, operands, 3, &type, NULL);
}

ir_value_t ir_convert(ir_func_t* func, ir_value_t x, tpurt_dtype_t dtype) {
  const char* op = "stablehlo.convert";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  ir_type_t type = *t;
  type.dtype = dtype;
  return emit(func, op, &x, 1, &type, NULL);
}

ir_value_t ir_bitcast_convert(ir_func_t* func, ir_value_t x, ir_type_t type) {
  const char* op = "stablehlo.bitcast_convert";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  if (!check_type(func, op, &type)) return IR_NONE;
  size_t in = tpurt_dtype_size(t->dtype), out = tpurt_dtype_size(type.dtype);
  ir_type_t want = *t;
  want.dtype = type.dtype;
  bool ok = true;
  if (in == out) {
    ok = ir_type_equal(&want, &type);
  } else if (in > out) { /* one more dim of in / out elements */
    if (in % out != 0 || want.rank >= TPURT_MAX_RANK) {
      ok = false;
    } else {
      want.dims[want.rank++] = (int64_t)(in / out);
      ok = ir_type_equal(&want, &type);
    }
  } else { /* the last dim (out / in elements) folds away */
    if (out % in != 0 || t->rank == 0 || t->dims[t->rank - 1] != (int64_t)(out / in)) {
      ok = false;
    } else {
      --want.rank;
      ok = ir_type_equal(&want, &type);
    }
  }
  if (!ok) {
    failf(func, "%s: cannot reinterpret %s as %s", op, type_str(t), type_str(&type));
    return IR_NONE;
  }
  return emit(func, op, &x, 1, &type, NULL);
}

/*===------------------------------------------------------------------===*/
/* Shape ops                                                              */
/*===------------------------------------------------------------------===*/

/* dims must be distinct and in [0, rank) */
static bool check_dims(ir_func_t* func, const char* op, const char* what, const int64_t* dims, int32_t count,
                       int32_t rank) {
  bool seen[TPURT_MAX_RANK] = {false};
  if (count < 0 || count > TPURT_MAX_RANK) {
    failf(func, "%s: %d %s (at most %d)", op, (int)count, what, TPURT_MAX_RANK);
    return false;
  }
  for (int32_t i = 0; i < count; ++i) {
    if (dims[i] < 0 || dims[i] >= rank) {
      failf(func, "%s: %s[%d] = %lld is outside [0, %d)", op, what, (int)i, (long long)dims[i], (int)rank);
      return false;
    }
    if (seen[dims[i]]) {
      failf(func, "%s: %s repeats dimension %lld", op, what, (long long)dims[i]);
      return false;
    }
    seen[dims[i]] = true;
  }
  return true;
}

static bool check_sorted(ir_func_t* func, const char* op, const char* what, const int64_t* dims,
                         int32_t count) {
  for (int32_t i = 1; i < count; ++i) {
    if (dims[i] <= dims[i - 1]) {
      failf(func, "%s: %s must be sorted, got %lld after %lld", op, what, (long long)dims[i],
            (long long)dims[i - 1]);
      return false;
    }
  }
  return true;
}

static bool contains(const int64_t* dims, int32_t count, int64_t d) {
  for (int32_t i = 0; i < count; ++i)
    if (dims[i] == d) return true;
  return false;
}

ir_value_t ir_broadcast_in_dim(ir_func_t* func, ir_value_t x, int32_t rank, const int64_t* dims,
                               const int64_t* broadcast_dimensions) {
  const char* op = "stablehlo.broadcast_in_dim";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  if (rank < t->rank || rank > TPURT_MAX_RANK) {
    failf(func, "%s: result rank %d must be in [%d, %d] for %s", op, (int)rank, (int)t->rank, TPURT_MAX_RANK,
          type_str(t));
    return IR_NONE;
  }
  ir_type_t type = ir_type_make(t->dtype, rank, dims);
  if (!check_dims(func, op, "broadcast_dimensions", broadcast_dimensions, t->rank, rank)) return IR_NONE;
  for (int32_t i = 0; i < t->rank; ++i) {
    int64_t to = type.dims[broadcast_dimensions[i]];
    if (t->dims[i] != 1 && t->dims[i] != to) {
      failf(func, "%s: operand dim %d has size %lld, result dim %lld has size %lld (%s -> %s)", op, (int)i,
            (long long)t->dims[i], (long long)broadcast_dimensions[i], (long long)to, type_str(t),
            type_str(&type));
      return IR_NONE;
    }
  }
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "broadcast_dimensions", broadcast_dimensions, t->rank);
  return emit_buf(func, op, &x, 1, &type, &attrs);
}

ir_value_t ir_reshape(ir_func_t* func, ir_value_t x, int32_t rank, const int64_t* dims) {
  const char* op = "stablehlo.reshape";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  if (rank < 0 || rank > TPURT_MAX_RANK) {
    failf(func, "%s: result rank %d is outside [0, %d]", op, (int)rank, TPURT_MAX_RANK);
    return IR_NONE;
  }
  ir_type_t type = ir_type_make(t->dtype, rank, dims);
  if (ir_type_numel(&type) != ir_type_numel(t)) {
    failf(func, "%s: %s has %lld elements but %s has %lld", op, type_str(t), (long long)ir_type_numel(t),
          type_str(&type), (long long)ir_type_numel(&type));
    return IR_NONE;
  }
  return emit(func, op, &x, 1, &type, NULL);
}

ir_value_t ir_transpose(ir_func_t* func, ir_value_t x, const int64_t* permutation) {
  const char* op = "stablehlo.transpose";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  if (!check_dims(func, op, "permutation", permutation, t->rank, t->rank)) return IR_NONE;
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) type.dims[i] = t->dims[permutation[i]];
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "permutation", permutation, t->rank);
  return emit_buf(func, op, &x, 1, &type, &attrs);
}

ir_value_t ir_slice(ir_func_t* func, ir_value_t x, const int64_t* start, const int64_t* limit,
                    const int64_t* strides) {
  const char* op = "stablehlo.slice";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (start[i] < 0 || start[i] > limit[i] || limit[i] > t->dims[i] || strides[i] < 1) {
      failf(func,
            "%s: dim %d of %s: need 0 <= start <= limit <= %lld and stride >= 1, got start %lld limit %lld "
            "stride %lld",
            op, (int)i, type_str(t), (long long)t->dims[i], (long long)start[i], (long long)limit[i],
            (long long)strides[i]);
      return IR_NONE;
    }
    type.dims[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
  }
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "start_indices", start, t->rank);
  put_named_array(&attrs, ", ", "limit_indices", limit, t->rank);
  put_named_array(&attrs, ", ", "strides", strides, t->rank);
  return emit_buf(func, op, &x, 1, &type, &attrs);
}

/* |starts|: one rank-0 integer value per dim of |t|, all of one type. */
static bool check_starts(ir_func_t* func, const char* op, const ir_type_t* t, const ir_value_t* starts) {
  tpurt_dtype_t first = TPURT_DTYPE_INVALID;
  for (int32_t i = 0; i < t->rank; ++i) {
    const ir_type_t* ts = operand(func, op, starts[i]);
    if (!ts) return false;
    if (ts->rank != 0 || !dtype_is_int(ts->dtype) || (i > 0 && ts->dtype != first)) {
      failf(func, "%s: start index %d must be a rank-0 integer like the others, got %s", op, (int)i,
            type_str(ts));
      return false;
    }
    first = ts->dtype;
  }
  return true;
}

ir_value_t ir_dynamic_slice(ir_func_t* func, ir_value_t x, const ir_value_t* starts, const int64_t* sizes) {
  const char* op = "stablehlo.dynamic_slice";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  if (!check_starts(func, op, t, starts)) return IR_NONE;
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (sizes[i] < 0 || sizes[i] > t->dims[i]) {
      failf(func, "%s: slice size %lld of dim %d is outside [0, %lld] (%s)", op, (long long)sizes[i], (int)i,
            (long long)t->dims[i], type_str(t));
      return IR_NONE;
    }
    type.dims[i] = sizes[i];
  }
  ir_value_t operands[1 + TPURT_MAX_RANK];
  operands[0] = x;
  for (int32_t i = 0; i < t->rank; ++i) operands[1 + i] = starts[i];
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "slice_sizes", sizes, t->rank);
  return emit_buf(func, op, operands, 1 + t->rank, &type, &attrs);
}

ir_value_t ir_dynamic_update_slice(ir_func_t* func, ir_value_t x, ir_value_t update,
                                   const ir_value_t* starts) {
  const char* op = "stablehlo.dynamic_update_slice";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  const ir_type_t* tu = operand(func, op, update);
  if (!t || !tu) return IR_NONE;
  bool ok = tu->dtype == t->dtype && tu->rank == t->rank;
  for (int32_t i = 0; ok && i < t->rank; ++i) ok = tu->dims[i] <= t->dims[i];
  if (!ok) {
    failf(func, "%s: update %s does not fit in operand %s", op, type_str(tu), type_str(t));
    return IR_NONE;
  }
  if (!check_starts(func, op, t, starts)) return IR_NONE;
  ir_value_t operands[2 + TPURT_MAX_RANK];
  operands[0] = x;
  operands[1] = update;
  for (int32_t i = 0; i < t->rank; ++i) operands[2 + i] = starts[i];
  ir_type_t type = *t;
  return emit(func, op, operands, 2 + t->rank, &type, NULL);
}

ir_value_t ir_concatenate(ir_func_t* func, const ir_value_t* xs, int32_t count, int64_t dimension) {
  const char* op = "stablehlo.concatenate";
  if (!func) return IR_NONE;
  if (count < 1) {
    failf(func, "%s: needs at least one operand, got %d", op, (int)count);
    return IR_NONE;
  }
  for (int32_t i = 0; i < count; ++i)
    if (!operand(func, op, xs[i])) return IR_NONE;
  ir_type_t type = func->values[xs[0]].type;
  if (dimension < 0 || dimension >= type.rank) {
    failf(func, "%s: dimension %lld is outside [0, %d)", op, (long long)dimension, (int)type.rank);
    return IR_NONE;
  }
  type.dims[dimension] = 0;
  for (int32_t i = 0; i < count; ++i) {
    const ir_type_t* t = &func->values[xs[i]].type;
    bool ok = t->dtype == type.dtype && t->rank == type.rank;
    for (int32_t d = 0; ok && d < t->rank; ++d) ok = d == dimension || t->dims[d] == type.dims[d];
    if (!ok) {
      failf(func, "%s: operand %d is %s, which does not match %s outside dimension %lld", op, (int)i,
            type_str(t), type_str(&func->values[xs[0]].type), (long long)dimension);
      return IR_NONE;
    }
    type.dims[dimension] += t->dims[dimension];
  }
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "dimension = %lld : i64", (long long)dimension);
  return emit(func, op, xs, count, &type, attrs);
}

ir_value_t ir_pad(ir_func_t* func, ir_value_t x, ir_value_t pad_value, const int64_t* low,
                  const int64_t* high, const int64_t* interior) {
  const char* op = "stablehlo.pad";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  const ir_type_t* tp = operand(func, op, pad_value);
  if (!t || !tp) return IR_NONE;
  if (tp->rank != 0 || tp->dtype != t->dtype) {
    failf(func, "%s: padding value must be tensor<%s>, got %s", op, ir_dtype_mlir_name(t->dtype),
          type_str(tp));
    return IR_NONE;
  }
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) {
    int64_t n = t->dims[i];
    if (interior[i] < 0) {
      failf(func, "%s: interior_padding[%d] = %lld is negative", op, (int)i, (long long)interior[i]);
      return IR_NONE;
    }
    type.dims[i] = low[i] + high[i] + (n > 0 ? (n - 1) * interior[i] : 0) + n;
    if (type.dims[i] < 0) {
      failf(func, "%s: dim %d of %s padded by low %lld high %lld interior %lld has negative size %lld", op,
            (int)i, type_str(t), (long long)low[i], (long long)high[i], (long long)interior[i],
            (long long)type.dims[i]);
      return IR_NONE;
    }
  }
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "edge_padding_low", low, t->rank);
  put_named_array(&attrs, ", ", "edge_padding_high", high, t->rank);
  put_named_array(&attrs, ", ", "interior_padding", interior, t->rank);
  ir_value_t operands[2] = {x, pad_value};
  return emit_buf(func, op, operands, 2, &type, &attrs);
}

ir_value_t ir_reverse(ir_func_t* func, ir_value_t x, const int64_t* dims, int32_t num_dims) {
  const char* op = "stablehlo.reverse";
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, op, x);
  if (!t) return IR_NONE;
  if (!check_dims(func, op, "dimensions", dims, num_dims, t->rank)) return IR_NONE;
  ir_type_t type = *t;
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "dimensions", dims, num_dims);
  return emit_buf(func, op, &x, 1, &type, &attrs);
}

/*===------------------------------------------------------------------===*/
/* dot_general                                                            */
/*===------------------------------------------------------------------===*/

void ir_func_set_precision(ir_func_t* func, ir_precision_t precision) {
  if (func) func->precision = precision;
}

/* ", precision_config = [...]" for an op over |dtype| operands, or nothing:
** only full-width floats have a precision to choose. */
static void put_precision(const ir_func_t* func, tpurt_strbuf_t* attrs, tpurt_dtype_t dtype) {
  static const char* const kNames[] = {"", "DEFAULT", "HIGH", "HIGHEST"};
  if (func->precision == IR_PRECISION_UNSET || (dtype != TPURT_DTYPE_F32 && dtype != TPURT_DTYPE_F64)) return;
  const char* name = kNames[func->precision];
  tpurt_strbuf_printf(attrs, ", precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]",
                      name, name);
}

ir_value_t ir_dot_general(ir_func_t* func, ir_value_t lhs, ir_value_t rhs, const ir_dot_dims_t* dims,
                          tpurt_dtype_t result_dtype) {
  const char* op = "stablehlo.dot_general";
  if (!func) return IR_NONE;
  const ir_type_t* tl = operand(func, op, lhs);
  const ir_type_t* tr = operand(func, op, rhs);
  if (!tl || !tr) return IR_NONE;
  if (tl->dtype != tr->dtype) {
    failf(func, "%s: lhs %s and rhs %s must have one element type", op, type_str(tl), type_str(tr));
    return IR_NONE;
  }
  int64_t lhs_used[2 * TPURT_MAX_RANK], rhs_used[2 * TPURT_MAX_RANK];
  int32_t nb = dims->num_batch, nc = dims->num_contract;
  if (nb < 0 || nc < 0 || nb + nc > tl->rank || nb + nc > tr->rank) {
    failf(func, "%s: %d batching + %d contracting dims do not fit lhs %s and rhs %s", op, (int)nb, (int)nc,
          type_str(tl), type_str(tr));
    return IR_NONE;
  }
  for (int32_t i = 0; i < nb; ++i) lhs_used[i] = dims->lhs_batch[i], rhs_used[i] = dims->rhs_batch[i];
  for (int32_t i = 0; i < nc; ++i)
    lhs_used[nb + i] = dims->lhs_contract[i], rhs_used[nb + i] = dims->rhs_contract[i];
  if (!check_dims(func, op, "lhs batching and contracting dims", lhs_used, nb + nc, tl->rank)) return IR_NONE;
  if (!check_dims(func, op, "rhs batching and contracting dims", rhs_used, nb + nc, tr->rank)) return IR_NONE;
  for (int32_t i = 0; i < nb + nc; ++i) {
    if (tl->dims[lhs_used[i]] != tr->dims[rhs_used[i]]) {
      failf(func, "%s: %s dim pair %d: lhs dim %lld of %s has size %lld, rhs dim %lld of %s has size %lld",
            op, i < nb ? "batching" : "contracting", (int)(i < nb ? i : i - nb), (long long)lhs_used[i],
            type_str(tl), (long long)tl->dims[lhs_used[i]], (long long)rhs_used[i], type_str(tr),
            (long long)tr->dims[rhs_used[i]]);
      return IR_NONE;
    }
  }
  ir_type_t type;
  memset(&type, 0, sizeof(type));
  type.dtype = result_dtype;
  for (int32_t i = 0; i < nb; ++i) type.dims[type.rank++] = tl->dims[dims->lhs_batch[i]];
  for (int32_t d = 0; d < tl->rank; ++d)
    if (!contains(lhs_used, nb + nc, d)) type.dims[type.rank++] = tl->dims[d];
  for (int32_t d = 0; d < tr->rank; ++d) {
    if (contains(rhs_used, nb + nc, d)) continue;
    if (type.rank >= TPURT_MAX_RANK) {
      failf(func, "%s: result of %s x %s has rank above %d", op, type_str(tl), type_str(tr), TPURT_MAX_RANK);
      return IR_NONE;
    }
    type.dims[type.rank++] = tr->dims[d];
  }
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_puts(&attrs, "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = ");
  put_list(&attrs, dims->lhs_batch, nb);
  tpurt_strbuf_puts(&attrs, ", rhs_batching_dimensions = ");
  put_list(&attrs, dims->rhs_batch, nb);
  tpurt_strbuf_puts(&attrs, ", lhs_contracting_dimensions = ");
  put_list(&attrs, dims->lhs_contract, nc);
  tpurt_strbuf_puts(&attrs, ", rhs_contracting_dimensions = ");
  put_list(&attrs, dims->rhs_contract, nc);
  tpurt_strbuf_puts(&attrs, ">");
  put_precision(func, &attrs, tl->dtype);
  ir_value_t operands[2] = {lhs, rhs};
  return emit_buf(func, op, operands, 2, &type, &attrs);
}

/*===------------------------------------------------------------------===*/
/* Gather                                                                 */
/*===------------------------------------------------------------------===*/

/* Size of the index vector: indices.dims[ivd], or 1 when ivd == rank. */
static bool index_vector_size(ir_func_t* func, const char* op, const ir_type_t* ti, int64_t ivd,
                              int64_t* out) {
  if (!dtype_is_int(ti->dtype)) {
    failf(func, "%s: indices must be integers, got %s", op, type_str(ti));
    return false;
  }
  if (ivd < 0 || ivd > ti->rank) {
    failf(func, "%s: index_vector_dim %lld is outside [0, %d] for indices %s", op, (long long)ivd,
          (int)ti->rank, type_str(ti));
    return false;
  }
  *out = ivd < ti->rank ? ti->dims[ivd] : 1;
  return true;
}

ir_value_t ir_gather(ir_func_t* func, ir_value_t operand_value, ir_value_t indices,
                     const ir_gather_dims_t* dims) {
  const char* op = "stablehlo.gather";
  if (!func) return IR_NONE;
  const ir_type_t* to = operand(func, op, operand_value);
  const ir_type_t* ti = operand(func, op, indices);
  if (!to || !ti) return IR_NONE;
  int64_t ivsize;
  if (!index_vector_size(func, op, ti, dims->index_vector_dim, &ivsize)) return IR_NONE;
  if (!check_dims(func, op, "collapsed_slice_dims", dims->collapsed_slice_dims, dims->num_collapsed,
                  to->rank) ||
      !check_sorted(func, op, "collapsed_slice_dims", dims->collapsed_slice_dims, dims->num_collapsed) ||
      !check_dims(func, op, "start_index_map", dims->start_index_map, dims->num_start_index_map, to->rank))
    return IR_NONE;
  if (dims->num_start_index_map != ivsize) {
    failf(func, "%s: start_index_map has %d entries but the index vector of %s has %lld", op,
          (int)dims->num_start_index_map, type_str(ti), (long long)ivsize);
    return IR_NONE;
  }
  if (dims->num_offset_dims != to->rank - dims->num_collapsed) {
    failf(func, "%s: expected %d offset_dims (operand rank %d - %d collapsed), got %d", op,
          (int)(to->rank - dims->num_collapsed), (int)to->rank, (int)dims->num_collapsed,
          (int)dims->num_offset_dims);
    return IR_NONE;
  }
  for (int32_t d = 0; d < to->rank; ++d) {
    int64_t s = dims->slice_sizes[d];
    bool collapsed = contains(dims->collapsed_slice_dims, dims->num_collapsed, d);
    if (s < 0 || s > to->dims[d] || (collapsed && s > 1)) {
      failf(func, "%s: slice_sizes[%d] = %lld is outside [0, %lld] for %s%s", op, (int)d, (long long)s,
            (long long)(collapsed ? (to->dims[d] < 1 ? to->dims[d] : 1) : to->dims[d]), type_str(to),
            collapsed ? " (a collapsed dim)" : "");
      return IR_NONE;
    }
  }
  int32_t batch_rank = ti->rank - (dims->index_vector_dim < ti->rank ? 1 : 0);
  int32_t rank = dims->num_offset_dims + batch_rank;
  if (rank > TPURT_MAX_RANK) {
    failf(func, "%s: result rank %d is above %d", op, (int)rank, TPURT_MAX_RANK);
    return IR_NONE;
  }
  if (!check_dims(func, op, "offset_dims", dims->offset_dims, dims->num_offset_dims, rank) ||
      !check_sorted(func, op, "offset_dims", dims->offset_dims, dims->num_offset_dims))
    return IR_NONE;
  ir_type_t type;
  memset(&type, 0, sizeof(type));
  type.dtype = to->dtype;
  type.rank = rank;
  int32_t next_offset = 0, next_batch = 0;
  for (int32_t d = 0; d < rank; ++d) {
    if (contains(dims->offset_dims, dims->num_offset_dims, d)) {
      while (contains(dims->collapsed_slice_dims, dims->num_collapsed, next_offset)) ++next_offset;
      type.dims[d] = dims->slice_sizes[next_offset++];
    } else {
      if (next_batch == dims->index_vector_dim) ++next_batch;
      type.dims[d] = ti->dims[next_batch++];
    }
  }
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_puts(&attrs, "dimension_numbers = #stablehlo.gather<offset_dims = ");
  put_list(&attrs, dims->offset_dims, dims->num_offset_dims);
  tpurt_strbuf_puts(&attrs, ", collapsed_slice_dims = ");
  put_list(&attrs, dims->collapsed_slice_dims, dims->num_collapsed);
  tpurt_strbuf_puts(&attrs, ", start_index_map = ");
  put_list(&attrs, dims->start_index_map, dims->num_start_index_map);
  tpurt_strbuf_printf(&attrs, ", index_vector_dim = %lld>", (long long)dims->index_vector_dim);
  put_named_array(&attrs, ", ", "slice_sizes", dims->slice_sizes, to->rank);
  tpurt_strbuf_printf(&attrs, ", indices_are_sorted = %s", dims->indices_are_sorted ? "true" : "false");
  ir_value_t operands[2] = {operand_value, indices};
  return emit_buf(func, op, operands, 2, &type, &attrs);
}

/*===------------------------------------------------------------------===*/
/* Regions: reduce, scatter                                               */
/*===------------------------------------------------------------------===*/

/* Opens a region (a block with |num_args| rank-0 args of |arg_dtypes|) for
** |op_index|, or a detached one when op_index < 0 (a failed begin: the
** caller still builds its body and ends it, all into the void). */
static bool push_region(ir_func_t* func, const char* owner, int32_t op_index, const tpurt_dtype_t* arg_dtypes,
                        int32_t num_args, const tpurt_dtype_t* return_dtypes, int32_t num_returns,
                        ir_value_t* out_args) {
  if (func->num_open >= IR_MAX_OPEN_REGIONS) {
    failf(func, "%s: more than %d nested regions", owner, IR_MAX_OPEN_REGIONS - 1);
    for (int32_t i = 0; i < num_args; ++i) out_args[i] = IR_NONE;
    return false;
  }
  ir_region_t* region = tpurt_arena_alloc(&func->arena, sizeof(*region));
  region->owner = owner;
  region->num_returns = op_index < 0 ? -1 : num_returns;
  for (int32_t i = 0; i < num_returns && i < TPURT_MAX_RESULTS; ++i)
    region->return_dtypes[i] = return_dtypes[i];
  if (op_index >= 0) {
    region->args = tpurt_arena_alloc(&func->arena, (size_t)num_args * sizeof(ir_value_t));
    region->num_args = num_args;
    for (int32_t i = 0; i < num_args; ++i) {
      ir_type_t t = ir_type_scalar(arg_dtypes[i]);
      region->args[i] = new_values(func, &t, 1);
      func->values[region->args[i]].scope = region;
      out_args[i] = region->args[i];
    }
    func->ops[op_index].region = region;
  } else {
    for (int32_t i = 0; i < num_args; ++i) out_args[i] = IR_NONE;
  }
  func->open[func->num_open++] = region;
  return true;
}

void ir_region_end(ir_func_t* func, const ir_value_t* values, int32_t count) {
  if (!func) return;
  if (func->num_open <= 1) {
    failf(func, "stablehlo.return: no region is open");
    return;
  }
  ir_region_t* region = func->open[func->num_open - 1];
  bool ok = region->num_returns >= 0;
  if (ok && count != region->num_returns) {
    failf(func, "%s: the region returns %d values, expected %d", region->owner, (int)count,
          (int)region->num_returns);
    ok = false;
  }
  for (int32_t i = 0; ok && i < count; ++i) {
    const ir_type_t* t = operand(func, "stablehlo.return", values[i]);
    if (!t) {
      ok = false;
    } else if (t->rank != 0 || t->dtype != region->return_dtypes[i]) {
      failf(func, "%s: region result %d must be tensor<%s>, got %s", region->owner, (int)i,
            ir_dtype_mlir_name(region->return_dtypes[i]), type_str(t));
      ok = false;
    }
  }
  if (ok) add_op(func, "stablehlo.return", values, count, IR_NONE, 0, NULL);
  --func->num_open;
}

/* result shape of reducing |t| over |dims|, or false (error recorded) */
static bool reduced_type(ir_func_t* func, const char* op, const ir_type_t* t, const int64_t* dims,
                         int32_t num_dims, ir_type_t* out) {
  if (!check_dims(func, op, "dimensions", dims, num_dims, t->rank)) return false;
  *out = *t;
  out->rank = 0;
  for (int32_t d = 0; d < t->rank; ++d)
    if (!contains(dims, num_dims, d)) out->dims[out->rank++] = t->dims[d];
  return true;
}

/* The inputs and inits of a (windowed) reduction: 1..TPURT_MAX_RESULTS
** inputs of one shape, each init a scalar of its input's type. False (error
** recorded) otherwise. */
static bool check_reduce_inputs(ir_func_t* func, const char* op, const ir_value_t* inputs,
                                const ir_value_t* inits, int32_t num_inputs) {
  if (num_inputs < 1 || num_inputs > TPURT_MAX_RESULTS) {
    failf(func, "%s: %d inputs is outside [1, %d]", op, (int)num_inputs, TPURT_MAX_RESULTS);
    return false;
  }
  for (int32_t i = 0; i < num_inputs; ++i) {
    const ir_type_t* tx = operand(func, op, inputs[i]);
    const ir_type_t* ti = operand(func, op, inits[i]);
    if (!tx || !ti) return false;
    const ir_type_t* t0 = &func->values[inputs[0]].type;
    if (tx->rank != t0->rank || memcmp(tx->dims, t0->dims, sizeof(int64_t) * (size_t)tx->rank) != 0) {
      failf(func, "%s: input %d is %s, input 0 is %s: shapes must match", op, (int)i, type_str(tx),
            type_str(t0));
      return false;
    }
    if (ti->rank != 0 || ti->dtype != tx->dtype) {
      failf(func, "%s: init %d must be tensor<%s>, got %s", op, (int)i, ir_dtype_mlir_name(tx->dtype),
            type_str(ti));
      return false;
    }
  }
  return true;
}

void ir_reduce_begin(ir_func_t* func, const ir_value_t* inputs, const ir_value_t* inits, int32_t num_inputs,
                     const int64_t* dims, int32_t num_dims, ir_value_t* out_results,
                     ir_value_t* out_block_args) {
  const char* op = "stablehlo.reduce";
  if (!func) return;
  for (int32_t i = 0; i < num_inputs; ++i) out_results[i] = IR_NONE;
  tpurt_dtype_t dtypes[2 * TPURT_MAX_RESULTS] = {0};
  ir_type_t types[TPURT_MAX_RESULTS] = {{0}};
  bool ok = check_reduce_inputs(func, op, inputs, inits, num_inputs);
  for (int32_t i = 0; ok && i < num_inputs; ++i) {
    const ir_type_t* tx = &func->values[inputs[i]].type;
    if (!reduced_type(func, op, tx, dims, num_dims, &types[i])) {
      ok = false;
      break;
    }
    dtypes[i] = dtypes[num_inputs + i] = tx->dtype;
  }
  if (!ok) {
    int32_t n = num_inputs > 0 && num_inputs <= TPURT_MAX_RESULTS ? 2 * num_inputs : 0;
    push_region(func, op, -1, NULL, n, NULL, 0, out_block_args);
    return;
  }
  ir_value_t operands[2 * TPURT_MAX_RESULTS];
  for (int32_t i = 0; i < num_inputs; ++i) operands[i] = inputs[i], operands[num_inputs + i] = inits[i];
  ir_value_t first = new_values(func, types, num_inputs);
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "dimensions", dims, num_dims);
  int32_t index = add_op(func, op, operands, 2 * num_inputs, first, num_inputs, attrs.data);
  tpurt_strbuf_free(&attrs);
  for (int32_t i = 0; i < num_inputs; ++i) out_results[i] = first + i;
  push_region(func, op, index, dtypes, 2 * num_inputs, dtypes, num_inputs, out_block_args);
}

static const char* reducer_op(ir_reducer_t reducer, tpurt_dtype_t dtype) {
  bool is_bool = dtype == TPURT_DTYPE_BOOL;
  switch (reducer) {
    case IR_REDUCE_ADD:
      return is_bool ? "stablehlo.or" : "stablehlo.add";
    case IR_REDUCE_MUL:
      return is_bool ? "stablehlo.and" : "stablehlo.multiply";
    case IR_REDUCE_MAX:
      return is_bool ? "stablehlo.or" : "stablehlo.maximum";
    case IR_REDUCE_MIN:
      return is_bool ? "stablehlo.and" : "stablehlo.minimum";
    case IR_REDUCE_AND:
      return tpurt_dtype_is_float(dtype) ? NULL : "stablehlo.and";
    case IR_REDUCE_OR:
      return tpurt_dtype_is_float(dtype) ? NULL : "stablehlo.or";
  }
  return NULL;
}

ir_value_t ir_reduce(ir_func_t* func, ir_value_t x, ir_value_t init, const int64_t* dims, int32_t num_dims,
                     ir_reducer_t reducer) {
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, "stablehlo.reduce", x);
  if (!t) return IR_NONE;
  const char* body = reducer_op(reducer, t->dtype);
  if (!body) {
    failf(func, "stablehlo.reduce: reducer %d does not apply to %s", (int)reducer, type_str(t));
    return IR_NONE;
  }
  ir_value_t result, args[2];
  ir_reduce_begin(func, &x, &init, 1, dims, num_dims, &result, args);
  ir_value_t r = ir_binary(func, body, args[0], args[1]);
  ir_region_end(func, &r, 1);
  return result;
}

ir_value_t ir_scatter_begin(ir_func_t* func, ir_value_t operand_value, ir_value_t indices, ir_value_t updates,
                            const ir_scatter_dims_t* dims, ir_value_t* out_block_args) {
  const char* op = "stablehlo.scatter";
  if (!func) return IR_NONE;
  const ir_type_t* to = operand(func, op, operand_value);
  const ir_type_t* ti = operand(func, op, indices);
  const ir_type_t* tu = operand(func, op, updates);
  bool ok = to && ti && tu;
  int64_t ivsize = 0;
  if (ok) ok = index_vector_size(func, op, ti, dims->index_vector_dim, &ivsize);
  if (ok && tu->dtype != to->dtype) {
    failf(func, "%s: updates %s and operand %s must have one element type", op, type_str(tu), type_str(to));
    ok = false;
  }
  if (ok) {
    ok = check_dims(func, op, "update_window_dims", dims->update_window_dims, dims->num_update_window_dims,
                    tu->rank) &&
         check_sorted(func, op, "update_window_dims", dims->update_window_dims,
                      dims->num_update_window_dims) &&
         check_dims(func, op, "inserted_window_dims", dims->inserted_window_dims, dims->num_inserted,
                    to->rank) &&
         check_sorted(func, op, "inserted_window_dims", dims->inserted_window_dims, dims->num_inserted) &&
         check_dims(func, op, "scatter_dims_to_operand_dims", dims->scatter_dims_to_operand_dims,
                    dims->num_scatter_dims_to_operand, to->rank);
  }
  if (ok && dims->num_scatter_dims_to_operand != ivsize) {
    failf(func, "%s: scatter_dims_to_operand_dims has %d entries but the index vector of %s has %lld", op,
          (int)dims->num_scatter_dims_to_operand, type_str(ti), (long long)ivsize);
    ok = false;
  }
  if (ok && dims->num_update_window_dims + dims->num_inserted != to->rank) {
    failf(func, "%s: %d update_window_dims + %d inserted_window_dims must equal the operand rank of %s", op,
          (int)dims->num_update_window_dims, (int)dims->num_inserted, type_str(to));
    ok = false;
  }
  int32_t scatter_rank = ok ? ti->rank - (dims->index_vector_dim < ti->rank ? 1 : 0) : 0;
  if (ok && tu->rank != scatter_rank + dims->num_update_window_dims) {
    failf(func, "%s: updates %s must have rank %d (%d scatter dims of %s + %d window dims)", op, type_str(tu),
          (int)(scatter_rank + dims->num_update_window_dims), (int)scatter_rank, type_str(ti),
          (int)dims->num_update_window_dims);
    ok = false;
  }
  if (ok) { /* update scatter dims match the indices' batch dims; windows fit */
    int32_t next_batch = 0, next_window = 0;
    for (int32_t d = 0; ok && d < tu->rank; ++d) {
      if (contains(dims->update_window_dims, dims->num_update_window_dims, d)) {
        while (contains(dims->inserted_window_dims, dims->num_inserted, next_window)) ++next_window;
        if (tu->dims[d] > to->dims[next_window]) {
          failf(func, "%s: update window dim %d has size %lld, above operand dim %d of %s", op, (int)d,
                (long long)tu->dims[d], (int)next_window, type_str(to));
          ok = false;
        }
        ++next_window;
      } else {
        if (next_batch == dims->index_vector_dim) ++next_batch;
        if (tu->dims[d] != ti->dims[next_batch]) {
          failf(func, "%s: updates dim %d has size %lld, indices dim %d of %s has %lld", op, (int)d,
                (long long)tu->dims[d], (int)next_batch, type_str(ti), (long long)ti->dims[next_batch]);
          ok = false;
        }
        ++next_batch;
      }
    }
  }
  if (!ok) {
    push_region(func, op, -1, NULL, 2, NULL, 0, out_block_args);
    return IR_NONE;
  }
  ir_type_t type = *to;
  tpurt_dtype_t dtypes[2] = {to->dtype, to->dtype};
  ir_value_t operands[3] = {operand_value, indices, updates};
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_puts(&attrs, "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = ");
  put_list(&attrs, dims->update_window_dims, dims->num_update_window_dims);
  tpurt_strbuf_puts(&attrs, ", inserted_window_dims = ");
  put_list(&attrs, dims->inserted_window_dims, dims->num_inserted);
  tpurt_strbuf_puts(&attrs, ", scatter_dims_to_operand_dims = ");
  put_list(&attrs, dims->scatter_dims_to_operand_dims, dims->num_scatter_dims_to_operand);
  tpurt_strbuf_printf(&attrs, ", index_vector_dim = %lld>, indices_are_sorted = %s, unique_indices = %s",
                      (long long)dims->index_vector_dim, dims->indices_are_sorted ? "true" : "false",
                      dims->unique_indices ? "true" : "false");
  ir_value_t result = new_values(func, &type, 1);
  int32_t index = add_op(func, op, operands, 3, result, 1, attrs.data);
  tpurt_strbuf_free(&attrs);
  push_region(func, op, index, dtypes, 2, dtypes, 1, out_block_args);
  return result;
}

/*===------------------------------------------------------------------===*/
/* rng_bit_generator                                                      */
/*===------------------------------------------------------------------===*/

void ir_rng_bit_generator(ir_func_t* func, ir_value_t state, ir_type_t bits_type, ir_value_t* out_state,
                          ir_value_t* out_bits) {
  const char* op = "stablehlo.rng_bit_generator";
  *out_state = *out_bits = IR_NONE;
  if (!func) return;
  const ir_type_t* ts = operand(func, op, state);
  if (!ts) return;
  if (ts->dtype != TPURT_DTYPE_U64 || ts->rank != 1 || ts->dims[0] != 2) {
    failf(func, "%s: THREE_FRY state must be tensor<2xui64>, got %s", op, type_str(ts));
    return;
  }
  if (!check_type(func, op, &bits_type)) return;
  if (!dtype_is_int(bits_type.dtype)) {
    failf(func, "%s: bits must be an integer type, got %s", op, type_str(&bits_type));
    return;
  }
  ir_type_t types[2] = {*ts, bits_type};
  ir_value_t first = new_values(func, types, 2);
  add_op(func, op, &state, 1, first, 2, "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>");
  *out_state = first;
  *out_bits = first + 1;
}

/*===------------------------------------------------------------------===*/
/* Printer                                                                */
/*===------------------------------------------------------------------===*/

static void print_value(tpurt_strbuf_t* buf, const ir_func_t* func, ir_value_t v) {
  const ir_value_info_t* info = &func->values[v];
  if (info->count > 1)
    tpurt_strbuf_printf(buf, "%%v%d#%d", (int)info->base, (int)info->index);
  else
    tpurt_strbuf_printf(buf, "%%v%d", (int)v);
}

static void print_indent(tpurt_strbuf_t* buf, int indent) {
  static const char kSpaces[] = "                                                                ";
  while (indent > 0) {
    int n = indent < (int)sizeof(kSpaces) - 1 ? indent : (int)sizeof(kSpaces) - 1;
    tpurt_strbuf_append(buf, kSpaces, (size_t)n);
    indent -= n;
  }
}

/* (t0, t1) for |count| values */
static void print_value_types(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_value_t* values,
                              int32_t count) {
  tpurt_strbuf_puts(buf, "(");
  for (int32_t i = 0; i < count; ++i) {
    if (i) tpurt_strbuf_puts(buf, ", ");
    print_type(buf, &func->values[values[i]].type);
  }
  tpurt_strbuf_puts(buf, ")");
}

static void print_block(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_region_t* block, int indent);

static void print_op(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_op_t* op, int indent) {
  print_indent(buf, indent);
  if (op->num_results == 1)
    tpurt_strbuf_printf(buf, "%%v%d = ", (int)op->first_result);
  else if (op->num_results > 1)
    tpurt_strbuf_printf(buf, "%%v%d:%d = ", (int)op->first_result, (int)op->num_results);
  tpurt_strbuf_printf(buf, "\"%s\"(", op->name);
  for (int32_t i = 0; i < op->num_operands; ++i) {
    if (i) tpurt_strbuf_puts(buf, ", ");
    print_value(buf, func, op->operands[i]);
  }
  tpurt_strbuf_puts(buf, ")");
  if (op->region) {
    tpurt_strbuf_puts(buf, " ({\n");
    print_indent(buf, indent);
    tpurt_strbuf_puts(buf, "^bb0(");
    for (int32_t i = 0; i < op->region->num_args; ++i) {
      if (i) tpurt_strbuf_puts(buf, ", ");
      print_value(buf, func, op->region->args[i]);
      tpurt_strbuf_puts(buf, ": ");
      print_type(buf, &func->values[op->region->args[i]].type);
    }
    tpurt_strbuf_puts(buf, "):\n");
    print_block(buf, func, op->region, indent + 2);
    print_indent(buf, indent);
    tpurt_strbuf_puts(buf, "})");
  }
  if (op->attrs) tpurt_strbuf_printf(buf, " {%s}", op->attrs);
  tpurt_strbuf_puts(buf, " : ");
  print_value_types(buf, func, op->operands, op->num_operands);
  tpurt_strbuf_puts(buf, " -> ");
  if (op->num_results == 1) {
    print_type(buf, &func->values[op->first_result].type);
  } else {
    tpurt_strbuf_puts(buf, "(");
    for (int32_t i = 0; i < op->num_results; ++i) {
      if (i) tpurt_strbuf_puts(buf, ", ");
      print_type(buf, &func->values[op->first_result + i].type);
    }
    tpurt_strbuf_puts(buf, ")");
  }
  tpurt_strbuf_puts(buf, "\n");
}

static void print_block(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_region_t* block, int indent) {
  for (int32_t i = 0; i < block->num_ops; ++i) print_op(buf, func, &func->ops[block->ops[i]], indent);
}

tpurt_status_t ir_func_print(const ir_func_t* func, char** out_text, size_t* out_size) {
  *out_text = NULL;
  if (out_size) *out_size = 0;
  if (func->status)
    return tpurt_status_create(tpurt_status_code(func->status), "%s", tpurt_status_message(func->status));
  if (func->num_open != 1)
    return tpurt_status_create(TPURT_INTERNAL, "ir_func_print: %d region(s) still open (%s)",
                               (int)(func->num_open - 1), func->open[func->num_open - 1]->owner);
  tpurt_strbuf_t buf = {0};
  tpurt_strbuf_puts(
      &buf,
      "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  func.func public @main(");
  for (int32_t i = 0; i < func->num_params; ++i) {
    if (i) tpurt_strbuf_puts(&buf, ", ");
    print_value(&buf, func, func->params[i]);
    tpurt_strbuf_puts(&buf, ": ");
    print_type(&buf, &func->values[func->params[i]].type);
  }
  tpurt_strbuf_puts(&buf, ") -> ");
  print_value_types(&buf, func, func->results, func->num_results);
  tpurt_strbuf_puts(&buf, " {\n");
  print_block(&buf, func, &func->body, 4);
  tpurt_strbuf_puts(&buf, "    \"func.return\"(");
  for (int32_t i = 0; i < func->num_results; ++i) {
    if (i) tpurt_strbuf_puts(&buf, ", ");
    print_value(&buf, func, func->results[i]);
  }
  tpurt_strbuf_puts(&buf, ") : ");
  print_value_types(&buf, func, func->results, func->num_results);
  tpurt_strbuf_puts(&buf, " -> ()\n  }\n}\n");
  *out_text = buf.data;
  if (out_size) *out_size = buf.size;
  return NULL;
}

/*===------------------------------------------------------------------===*/
/* Sort (appended by the misc family)                                     */
/*===------------------------------------------------------------------===*/

void ir_sort_begin(ir_func_t* func, const ir_value_t* inputs, int32_t num_inputs, int64_t dimension,
                   bool is_stable, ir_value_t* out_results, ir_value_t* out_block_args) {
  const char* op = "stablehlo.sort";
  if (!func) return;
  for (int32_t i = 0; i < num_inputs && i < TPURT_MAX_RESULTS; ++i) out_results[i] = IR_NONE;
  tpurt_dtype_t dtypes[2 * TPURT_MAX_RESULTS];
  ir_type_t types[TPURT_MAX_RESULTS];
  bool ok = true;
  if (num_inputs < 1 || num_inputs > TPURT_MAX_RESULTS) {
    failf(func, "%s: %d inputs is outside [1, %d]", op, (int)num_inputs, TPURT_MAX_RESULTS);
    ok = false;
  }
  for (int32_t i = 0; ok && i < num_inputs; ++i) {
    const ir_type_t* tx = operand(func, op, inputs[i]);
    if (!tx) {
      ok = false;
      break;
    }
    const ir_type_t* t0 = &func->values[inputs[0]].type;
    if (tx->rank != t0->rank || memcmp(tx->dims, t0->dims, sizeof(int64_t) * (size_t)tx->rank) != 0) {
      failf(func, "%s: input %d is %s, input 0 is %s: shapes must match", op, (int)i, type_str(tx),
            type_str(t0));
      ok = false;
      break;
    }
    if (tx->rank == 0 || dimension < 0 || dimension >= tx->rank) {
      failf(func, "%s: dimension %lld is outside the rank of %s", op, (long long)dimension, type_str(tx));
      ok = false;
      break;
    }
    types[i] = *tx;
    dtypes[2 * i] = dtypes[2 * i + 1] = tx->dtype;
  }
  if (!ok) {
    int32_t n = num_inputs > 0 && num_inputs <= TPURT_MAX_RESULTS ? 2 * num_inputs : 0;
    push_region(func, op, -1, NULL, n, NULL, 0, out_block_args);
    return;
  }
  ir_value_t first = new_values(func, types, num_inputs);
  char attrs[96];
  snprintf(attrs, sizeof(attrs), "dimension = %lld : i64, is_stable = %s", (long long)dimension,
           is_stable ? "true" : "false");
  int32_t index = add_op(func, op, inputs, num_inputs, first, num_inputs, attrs);
  for (int32_t i = 0; i < num_inputs; ++i) out_results[i] = first + i;
  tpurt_dtype_t ret = TPURT_DTYPE_BOOL;
  push_region(func, op, index, dtypes, 2 * num_inputs, &ret, 1, out_block_args);
}

/*===------------------------------------------------------------------===*/
/* Convolution (appended by the conv family)                              */
/*===------------------------------------------------------------------===*/

/* One operand's dims [b, f, 0, 1]: |a| and |b| name the two special dims,
** |spatial| the window dims in order. False (error recorded) unless they
** are a permutation of [0, rank). */
static bool put_conv_layout(ir_func_t* func, tpurt_strbuf_t* buf, const char* what, int32_t rank, char a,
                            int64_t a_dim, char b, int64_t b_dim, const int64_t* spatial,
                            int32_t num_spatial) {
  int64_t all[TPURT_MAX_RANK];
  if (num_spatial + 2 != rank) {
    failf(func, "stablehlo.convolution: %s has rank %d, expected %d spatial dims + 2", what, (int)rank,
          (int)num_spatial);
    return false;
  }
  all[0] = a_dim;
  all[1] = b_dim;
  for (int32_t i = 0; i < num_spatial; ++i) all[2 + i] = spatial[i];
  if (!check_dims(func, "stablehlo.convolution", what, all, rank, rank)) return false;
  tpurt_strbuf_puts(buf, "[");
  for (int32_t d = 0; d < rank; ++d) {
    if (d) tpurt_strbuf_puts(buf, ", ");
    if (d == a_dim) {
      tpurt_strbuf_printf(buf, "%c", a);
    } else if (d == b_dim) {
      tpurt_strbuf_printf(buf, "%c", b);
    } else {
      for (int32_t i = 0; i < num_spatial; ++i)
        if (spatial[i] == d) tpurt_strbuf_printf(buf, "%d", (int)i);
    }
  }
  tpurt_strbuf_puts(buf, "]");
  return true;
}

ir_value_t ir_convolution(ir_func_t* func, ir_value_t lhs, ir_value_t rhs, const ir_conv_dims_t* dims,
                          tpurt_dtype_t result_dtype) {
  const char* op = "stablehlo.convolution";
  if (!func) return IR_NONE;
  const ir_type_t* tl = operand(func, op, lhs);
  const ir_type_t* tr = operand(func, op, rhs);
  if (!tl || !tr) return IR_NONE;
  if (tl->dtype != tr->dtype) {
    failf(func, "%s: lhs %s and rhs %s must have one element type", op, type_str(tl), type_str(tr));
    return IR_NONE;
  }
  int32_t ns = dims->num_spatial;
  if (ns < 0 || ns + 2 > TPURT_MAX_RANK) {
    failf(func, "%s: %d spatial dims is outside [0, %d]", op, (int)ns, TPURT_MAX_RANK - 2);
    return IR_NONE;
  }
  tpurt_strbuf_t layout = {0};
  tpurt_strbuf_puts(&layout, "dimension_numbers = #stablehlo.conv<");
  bool ok = put_conv_layout(func, &layout, "input dims", tl->rank, 'b', dims->input_batch, 'f',
                            dims->input_feature, dims->input_spatial, ns);
  if (ok) tpurt_strbuf_puts(&layout, "x");
  ok = ok && put_conv_layout(func, &layout, "kernel dims", tr->rank, 'o', dims->kernel_output_feature, 'i',
                             dims->kernel_input_feature, dims->kernel_spatial, ns);
  if (ok) tpurt_strbuf_puts(&layout, "->");
  ok = ok && put_conv_layout(func, &layout, "output dims", ns + 2, 'b', dims->output_batch, 'f',
                             dims->output_feature, dims->output_spatial, ns);
  tpurt_strbuf_puts(&layout, ">");
  int64_t fg = dims->feature_group_count, bg = dims->batch_group_count;
  if (ok && (fg < 1 || bg < 1 || (fg > 1 && bg > 1))) {
    failf(func, "%s: feature_group_count %lld and batch_group_count %lld must be >= 1, one of them 1", op,
          (long long)fg, (long long)bg);
    ok = false;
  }
  int64_t batch = ok ? tl->dims[dims->input_batch] : 0, in_f = ok ? tl->dims[dims->input_feature] : 0;
  int64_t k_in = ok ? tr->dims[dims->kernel_input_feature] : 0;
  int64_t k_out = ok ? tr->dims[dims->kernel_output_feature] : 0;
  if (ok && (in_f != k_in * fg || k_out % fg != 0 || batch % bg != 0 || k_out % bg != 0)) {
    failf(func,
          "%s: lhs %s and rhs %s do not fit feature_group_count %lld and batch_group_count %lld "
          "(input features %lld = kernel input features %lld * groups; kernel output features %lld and "
          "batch %lld divisible by the groups)",
          op, type_str(tl), type_str(tr), (long long)fg, (long long)bg, (long long)in_f, (long long)k_in,
          (long long)k_out, (long long)batch);
    ok = false;
  }
  ir_type_t type;
  memset(&type, 0, sizeof(type));
  type.dtype = result_dtype;
  type.rank = ns + 2;
  if (ok) {
    type.dims[dims->output_batch] = batch / bg;
    type.dims[dims->output_feature] = k_out;
  }
  for (int32_t i = 0; ok && i < ns; ++i) {
    int64_t in = tl->dims[dims->input_spatial[i]], k = tr->dims[dims->kernel_spatial[i]];
    int64_t stride = dims->window_strides[i], ld = dims->lhs_dilation[i], rd = dims->rhs_dilation[i];
    if (stride < 1 || ld < 1 || rd < 1) {
      failf(func, "%s: spatial dim %d: stride %lld, lhs dilation %lld, rhs dilation %lld must be >= 1", op,
            (int)i, (long long)stride, (long long)ld, (long long)rd);
      ok = false;
      break;
    }
    int64_t dilated = in > 0 ? (in - 1) * ld + 1 : 0;
    int64_t padded = dilated + dims->padding_low[i] + dims->padding_high[i];
    int64_t window = k > 0 ? (k - 1) * rd + 1 : 0;
    if (padded < 0) {
      failf(func, "%s: spatial dim %d of %s padded by %lld and %lld has negative size", op, (int)i,
            type_str(tl), (long long)dims->padding_low[i], (long long)dims->padding_high[i]);
      ok = false;
      break;
    }
    type.dims[dims->output_spatial[i]] = padded < window ? 0 : (padded - window) / stride + 1;
  }
  if (!ok) {
    tpurt_strbuf_free(&layout);
    return IR_NONE;
  }
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_printf(&attrs, "batch_group_count = %lld : i64, %s, feature_group_count = %lld : i64",
                      (long long)bg, layout.data, (long long)fg);
  tpurt_strbuf_free(&layout);
  put_named_array(&attrs, ", ", "lhs_dilation", dims->lhs_dilation, ns);
  tpurt_strbuf_printf(&attrs, ", padding = dense<");
  tpurt_strbuf_puts(&attrs, "[");
  for (int32_t i = 0; i < ns; ++i)
    tpurt_strbuf_printf(&attrs, "%s[%lld, %lld]", i ? ", " : "", (long long)dims->padding_low[i],
                        (long long)dims->padding_high[i]);
  tpurt_strbuf_printf(&attrs, "]> : tensor<%dx2xi64>", (int)ns);
  put_named_array(&attrs, ", ", "rhs_dilation", dims->rhs_dilation, ns);
  put_named_array(&attrs, ", ", "window_strides", dims->window_strides, ns);
  put_precision(func, &attrs, tl->dtype);
  ir_value_t operands[2] = {lhs, rhs};
  return emit_buf(func, op, operands, 2, &type, &attrs);
}

/*===------------------------------------------------------------------===*/
/* Custom call                                                            */
/*===------------------------------------------------------------------===*/

/* |s| as an MLIR string literal: quotes and backslashes escaped, control
** bytes as \XX. */
static void put_string_literal(tpurt_strbuf_t* buf, const char* s) {
  tpurt_strbuf_puts(buf, "\"");
  for (const unsigned char* c = (const unsigned char*)s; *c; ++c) {
    if (*c == '"' || *c == '\\')
      tpurt_strbuf_printf(buf, "\\%c", *c);
    else if (*c < 0x20 || *c == 0x7F)
      tpurt_strbuf_printf(buf, "\\%02X", (unsigned)*c);
    else
      tpurt_strbuf_append(buf, (const char*)c, 1);
  }
  tpurt_strbuf_puts(buf, "\"");
}

/* [dense<[r-1, ..., 0]> : tensor<rxindex>, ...]: row-major for each type. */
static void put_row_major_layouts(tpurt_strbuf_t* buf, const char* name, const ir_type_t* const* types,
                                  int32_t count) {
  tpurt_strbuf_printf(buf, ", %s = [", name);
  for (int32_t i = 0; i < count; ++i) {
    int32_t rank = types[i]->rank;
    tpurt_strbuf_puts(buf, i ? ", dense<" : "dense<");
    if (rank > 0) {
      tpurt_strbuf_puts(buf, "[");
      for (int32_t d = 0; d < rank; ++d) tpurt_strbuf_printf(buf, "%s%d", d ? ", " : "", (int)(rank - 1 - d));
      tpurt_strbuf_puts(buf, "]");
    }
    tpurt_strbuf_printf(buf, "> : tensor<%dxindex>", (int)rank);
  }
  tpurt_strbuf_puts(buf, "]");
}

void ir_custom_call(ir_func_t* func, const char* call_target_name, const ir_value_t* operands,
                    int32_t num_operands, const ir_type_t* result_types, int32_t num_results,
                    const char* backend_config, int32_t api_version, ir_value_t* out_results) {
  const char* op = "stablehlo.custom_call";
  if (!func) return;
  for (int32_t i = 0; i < num_results; ++i) out_results[i] = IR_NONE;
  if (!call_target_name || !*call_target_name) {
    failf(func, "%s: no call target name", op);
    return;
  }
  if (num_results < 1 || num_results > TPURT_MAX_RESULTS || num_operands < 0 ||
      num_operands > IR_MAX_CUSTOM_CALL_OPERANDS) {
    failf(func, "%s %s: %d operand(s) and %d result(s) are outside [0, %d] and [1, %d]", op, call_target_name,
          (int)num_operands, (int)num_results, IR_MAX_CUSTOM_CALL_OPERANDS, TPURT_MAX_RESULTS);
    return;
  }
  const ir_type_t* operand_types[IR_MAX_CUSTOM_CALL_OPERANDS];
  for (int32_t i = 0; i < num_operands; ++i)
    if (!(operand_types[i] = operand(func, op, operands[i]))) return;
  const ir_type_t* result_ptrs[TPURT_MAX_RESULTS];
  for (int32_t i = 0; i < num_results; ++i) {
    if (!check_type(func, op, &result_types[i])) return;
    result_ptrs[i] = &result_types[i];
  }
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_printf(&attrs, "api_version = %d : i32, backend_config = ", (int)api_version);
  put_string_literal(&attrs, backend_config ? backend_config : "");
  tpurt_strbuf_puts(&attrs, ", call_target_name = ");
  put_string_literal(&attrs, call_target_name);
  tpurt_strbuf_puts(&attrs, ", has_side_effect = false");
  put_row_major_layouts(&attrs, "operand_layouts", operand_types, num_operands);
  put_row_major_layouts(&attrs, "result_layouts", result_ptrs, num_results);
  ir_value_t first = new_values(func, result_types, num_results);
  add_op(func, op, operands, num_operands, first, num_results, attrs.data);
  tpurt_strbuf_free(&attrs);
  for (int32_t i = 0; i < num_results; ++i) out_results[i] = first + i;
}

/*===------------------------------------------------------------------===*/
/* Reduce window (appended by the pooling family)                         */
/*===------------------------------------------------------------------===*/

/* The result shape of one window reduction of |t|, or false (error recorded). */
static bool windowed_type(ir_func_t* func, const char* op, const ir_type_t* t, const ir_window_t* w,
                          ir_type_t* out) {
  *out = *t;
  for (int32_t d = 0; d < t->rank; ++d) {
    int64_t size = w->dimensions[d], stride = w->strides[d], dilation = w->dilations[d];
    if (size < 1 || stride < 1 || dilation < 1) {
      failf(func, "%s: dim %d has window %lld, stride %lld, dilation %lld: all must be >= 1", op, (int)d,
            (long long)size, (long long)stride, (long long)dilation);
      return false;
    }
    int64_t padded = t->dims[d] + w->padding_low[d] + w->padding_high[d];
    int64_t span = (size - 1) * dilation + 1;
    if (padded < 0) {
      failf(func, "%s: dim %d of %s is negative after padding", op, (int)d, type_str(t));
      return false;
    }
    out->dims[d] = padded < span ? 0 : (padded - span) / stride + 1;
  }
  return true;
}

void ir_reduce_window_begin(ir_func_t* func, const ir_value_t* inputs, const ir_value_t* inits,
                            int32_t num_inputs, const ir_window_t* window, ir_value_t* out_results,
                            ir_value_t* out_block_args) {
  const char* op = "stablehlo.reduce_window";
  if (!func) return;
  for (int32_t i = 0; i < num_inputs && i < TPURT_MAX_RESULTS; ++i) out_results[i] = IR_NONE;
  tpurt_dtype_t dtypes[2 * TPURT_MAX_RESULTS] = {0};
  ir_type_t types[TPURT_MAX_RESULTS] = {{0}};
  bool ok = check_reduce_inputs(func, op, inputs, inits, num_inputs);
  for (int32_t i = 0; ok && i < num_inputs; ++i) {
    const ir_type_t* tx = &func->values[inputs[i]].type;
    if (!windowed_type(func, op, tx, window, &types[i])) {
      ok = false;
      break;
    }
    dtypes[i] = dtypes[num_inputs + i] = tx->dtype;
  }
  if (!ok) {
    int32_t n = num_inputs > 0 && num_inputs <= TPURT_MAX_RESULTS ? 2 * num_inputs : 0;
    push_region(func, op, -1, NULL, n, NULL, 0, out_block_args);
    return;
  }
  int32_t rank = types[0].rank;
  ir_value_t operands[2 * TPURT_MAX_RESULTS];
  for (int32_t i = 0; i < num_inputs; ++i) operands[i] = inputs[i], operands[num_inputs + i] = inits[i];
  ir_value_t first = new_values(func, types, num_inputs);
  int64_t ones[TPURT_MAX_RANK] = {0};
  for (int32_t d = 0; d < rank; ++d) ones[d] = 1;
  tpurt_strbuf_t attrs = {0};
  put_named_array(&attrs, "", "base_dilations", ones, rank);
  tpurt_strbuf_printf(&attrs, ", padding = dense<");
  if (rank == 0) {
    tpurt_strbuf_puts(&attrs, "0> : tensor<0x2xi64>");
  } else {
    tpurt_strbuf_puts(&attrs, "[");
    for (int32_t d = 0; d < rank; ++d)
      tpurt_strbuf_printf(&attrs, "%s[%lld, %lld]", d ? ", " : "", (long long)window->padding_low[d],
                          (long long)window->padding_high[d]);
    tpurt_strbuf_printf(&attrs, "]> : tensor<%dx2xi64>", (int)rank);
  }
  put_named_array(&attrs, ", ", "window_dilations", window->dilations, rank);
  put_named_array(&attrs, ", ", "window_dimensions", window->dimensions, rank);
  put_named_array(&attrs, ", ", "window_strides", window->strides, rank);
  int32_t index = add_op(func, op, operands, 2 * num_inputs, first, num_inputs, attrs.data);
  tpurt_strbuf_free(&attrs);
  for (int32_t i = 0; i < num_inputs; ++i) out_results[i] = first + i;
  push_region(func, op, index, dtypes, 2 * num_inputs, dtypes, num_inputs, out_block_args);
}

ir_value_t ir_reduce_window(ir_func_t* func, ir_value_t x, ir_value_t init, const ir_window_t* window,
                            ir_reducer_t reducer) {
  if (!func) return IR_NONE;
  const ir_type_t* t = operand(func, "stablehlo.reduce_window", x);
  if (!t) return IR_NONE;
  const char* body = reducer_op(reducer, t->dtype);
  if (!body) {
    failf(func, "stablehlo.reduce_window: reducer %d does not apply to %s", (int)reducer, type_str(t));
    return IR_NONE;
  }
  ir_value_t result, args[2];
  ir_reduce_window_begin(func, &x, &init, 1, window, &result, args);
  ir_value_t r = ir_binary(func, body, args[0], args[1]);
  ir_region_end(func, &r, 1);
  return result;
}
