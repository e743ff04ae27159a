/* ir.c: the StableHLO builder core: types, functions, values, errors, ops
** and regions, attribute text, constants. The op constructors live in
** ops_*.c by family, the printer in printer.c; ir_internal.h is what they
** share.
**
** Storage: one arena per function. Values, ops, parameters and the op list
** of every block are arena arrays that grow by doubling; an outgrown array
** is left in the arena, so a pointer handed out by ir_value_type stays
** valid (and correct: entries never change) for the function's life.
**
** Attributes are rendered to text when an op is built (they hold numbers
** only, never value names), so printing is a plain walk over the blocks.
*/
#include <math.h>

#include "ir_internal.h"

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
    case TPURT_DTYPE_C64:
      return "complex<f32>";
    case TPURT_DTYPE_C128:
      return "complex<f64>";
    default:
      return "invalid";
  }
}

bool ir_dtype_valid(tpurt_dtype_t dtype) { return dtype > TPURT_DTYPE_INVALID && dtype < TPURT_DTYPE_COUNT; }

/* tensor<2x3xbf16> */
void ir_print_type(tpurt_strbuf_t* buf, const ir_type_t* type) {
  tpurt_strbuf_puts(buf, "tensor<");
  for (int32_t i = 0; i < type->rank; ++i) {
    tpurt_strbuf_put_i64(buf, type->dims[i]);
    tpurt_strbuf_append(buf, "x", 1);
  }
  tpurt_strbuf_puts(buf, ir_dtype_mlir_name(type->dtype));
  tpurt_strbuf_puts(buf, ">");
}

/* A type for messages, in a small rotating set of static buffers (errors
** only; at most a few per message). */
const char* ir_type_str(const ir_type_t* type) {
  static _Thread_local char bufs[4][128];
  static _Thread_local int next;
  char* out = bufs[next++ & 3];
  tpurt_strbuf_t buf = {0};
  ir_print_type(&buf, type);
  snprintf(out, 128, "%s", buf.data);
  tpurt_strbuf_free(&buf);
  return out;
}

/*===------------------------------------------------------------------===*/
/* The op list (ir_ops.def)                                               */
/*===------------------------------------------------------------------===*/

typedef struct op_info_s {
  const char* name;
  int32_t arity;
  ir_op_class_t klass;
} op_info_t;

static const op_info_t kOps[IR_OP_COUNT] = {
#define IR_OP(id, name, arity, klass) [IR_OP_##id] = {name, arity, klass},
#include "ir_ops.def"
#undef IR_OP
};

static bool op_valid(ir_op_t op) { return (int)op > (int)IR_OP_NONE && (int)op < (int)IR_OP_COUNT; }
const char* ir_op_name(ir_op_t op) { return op_valid(op) ? kOps[op].name : "?"; }
int32_t ir_op_arity(ir_op_t op) { return op_valid(op) ? kOps[op].arity : -1; }
ir_op_class_t ir_op_class(ir_op_t op) { return op_valid(op) ? kOps[op].klass : IR_OP_CLASS_OTHER; }

ir_op_t ir_op_from_name(const char* name) {
  for (int i = IR_OP_NONE + 1; name && i < (int)IR_OP_COUNT; ++i)
    if (strcmp(kOps[i].name, name) == 0) return (ir_op_t)i;
  return IR_OP_NONE;
}

/*===------------------------------------------------------------------===*/
/* Functions, values, errors                                              */
/*===------------------------------------------------------------------===*/

ir_func_t* ir_func_create(void) {
  ir_func_t* func = tpurt_xcalloc(1, sizeof(*func));
  func->body.num_returns = -1;
  func->body.owner = IR_OP_FUNC;
  func->open[0] = &func->body;
  func->num_open = 1;
  return func;
}

void ir_func_free(ir_func_t* func) {
  if (!func) return;
  tpurt_status_free(func->status);
  tpurt_arena_free(&func->arena);
  free(func);
}

tpurt_borrowed_status_t ir_func_status(const ir_func_t* func) { return func ? func->status : NULL; }

void ir_func_fail_consume(ir_func_t* func, tpurt_status_t status) {
  if (!func || !status) return;
  if (func->status)
    tpurt_status_free(status);
  else
    func->status = status;
}

void ir_failf(ir_func_t* func, const char* fmt, ...) {
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
const ir_type_t* ir_operand_type(ir_func_t* func, ir_op_t op, ir_value_t value) {
  if (value == IR_NONE) return NULL;
  if (value < 0 || value >= func->num_values) {
    ir_failf(func, "%s: operand %%v%d is not a value of this function (it has %d)", ir_op_name(op),
             (int)value, (int)func->num_values);
    return NULL;
  }
  const ir_region_t* scope = func->values[value].scope;
  for (int32_t i = func->num_open - 1; i >= 0; --i)
    if (func->open[i] == scope) return &func->values[value].type;
  ir_failf(func, "%s: operand %%v%d is defined inside a region of %s that is closed", ir_op_name(op),
           (int)value, ir_op_name(scope->owner));
  return NULL;
}

/* Makes |count| new values with consecutive ids sharing one base name. */
ir_value_t ir_new_values(ir_func_t* func, const ir_type_t* types, int32_t count) {
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

bool ir_check_type(ir_func_t* func, ir_op_t op, const ir_type_t* type) {
  if (!ir_dtype_valid(type->dtype)) {
    ir_failf(func, "%s: invalid element type %d", ir_op_name(op), (int)type->dtype);
    return false;
  }
  if (type->rank < 0 || type->rank > TPURT_MAX_RANK) {
    ir_failf(func, "%s: rank %d is outside [0, %d]", ir_op_name(op), (int)type->rank, TPURT_MAX_RANK);
    return false;
  }
  for (int32_t i = 0; i < type->rank; ++i) {
    if (type->dims[i] < 0) {
      ir_failf(func, "%s: dimension %d of the result has negative size %lld", ir_op_name(op), (int)i,
               (long long)type->dims[i]);
      return false;
    }
  }
  return true;
}

ir_value_t ir_param(ir_func_t* func, ir_type_t type) {
  if (!func) return IR_NONE;
  if (!ir_check_type(func, IR_OP_FUNC, &type)) return IR_NONE;
  ir_value_t v = ir_new_values(func, &type, 1);
  func->values[v].scope = &func->body; /* even when a region is open */
  func->params = grow(&func->arena, func->params, func->num_params, &func->cap_params, sizeof(ir_value_t));
  func->params[func->num_params++] = v;
  return v;
}

void ir_func_set_results(ir_func_t* func, const ir_value_t* values, int32_t count) {
  if (!func) return;
  for (int32_t i = 0; i < count; ++i) {
    if (values[i] == IR_NONE) {
      ir_failf(func, "%s: result %d is IR_NONE", ir_op_name(IR_OP_FUNC_RETURN), (int)i);
      return;
    }
    if (!ir_operand_type(func, IR_OP_FUNC_RETURN, values[i])) return;
  }
  func->results = tpurt_arena_alloc(&func->arena, (size_t)(count > 0 ? count : 1) * sizeof(ir_value_t));
  if (count > 0) memcpy(func->results, values, (size_t)count * sizeof(ir_value_t));
  func->num_results = count;
}

/* Appends an op to the innermost open block. |attrs| is copied. Returns
** the op's index. Result values must be made by the caller first. */
int32_t ir_add_op(ir_func_t* func, ir_op_t op, const ir_value_t* operands, int32_t num_operands,
                  ir_value_t first_result, int32_t num_results, const char* attrs) {
  func->ops = grow(&func->arena, func->ops, func->num_ops, &func->cap_ops, sizeof(ir_inst_t));
  int32_t index = func->num_ops++;
  ir_inst_t* inst = &func->ops[index];
  memset(inst, 0, sizeof(*inst));
  inst->op = op;
  if (num_operands > 0) {
    ir_value_t* copy = tpurt_arena_alloc(&func->arena, (size_t)num_operands * sizeof(ir_value_t));
    memcpy(copy, operands, (size_t)num_operands * sizeof(ir_value_t));
    inst->operands = copy;
  }
  inst->num_operands = num_operands;
  inst->first_result = first_result;
  inst->num_results = num_results;
  inst->attrs = attrs ? tpurt_arena_strdup(&func->arena, attrs) : NULL;
  ir_region_t* block = func->open[func->num_open - 1];
  block->ops = grow(&func->arena, block->ops, block->num_ops, &block->cap_ops, sizeof(int32_t));
  block->ops[block->num_ops++] = index;
  return index;
}

/* The common case: one result of |type|. */
ir_value_t ir_emit(ir_func_t* func, ir_op_t op, const ir_value_t* operands, int32_t num_operands,
                   const ir_type_t* type, const char* attrs) {
  if (!ir_check_type(func, op, type)) return IR_NONE;
  ir_value_t v = ir_new_values(func, type, 1);
  ir_add_op(func, op, operands, num_operands, v, 1, attrs);
  return v;
}

/* Same as emit, with attributes built in a strbuf that this frees. */
ir_value_t ir_emit_buf(ir_func_t* func, ir_op_t op, const ir_value_t* operands, int32_t num_operands,
                       const ir_type_t* type, tpurt_strbuf_t* attrs) {
  ir_value_t v = ir_emit(func, op, operands, num_operands, type, attrs->data);
  tpurt_strbuf_free(attrs);
  return v;
}

/*===------------------------------------------------------------------===*/
/* Attribute text                                                         */
/*===------------------------------------------------------------------===*/

/* array<i64: 1, 2> (array<i64> when empty) */
/* 1, 2, 3 */
static void put_i64_items(tpurt_strbuf_t* buf, const int64_t* values, int32_t count) {
  for (int32_t i = 0; i < count; ++i) {
    if (i) tpurt_strbuf_append(buf, ", ", 2);
    tpurt_strbuf_put_i64(buf, values[i]);
  }
}

void ir_put_i64_array(tpurt_strbuf_t* buf, const int64_t* values, int32_t count) {
  tpurt_strbuf_puts(buf, count ? "array<i64: " : "array<i64");
  put_i64_items(buf, values, count);
  tpurt_strbuf_puts(buf, ">");
}

/* [1, 2] ([] when empty) */
void ir_put_list(tpurt_strbuf_t* buf, const int64_t* values, int32_t count) {
  tpurt_strbuf_puts(buf, "[");
  put_i64_items(buf, values, count);
  tpurt_strbuf_puts(buf, "]");
}

void ir_put_named_array(tpurt_strbuf_t* buf, const char* sep, const char* name, const int64_t* values,
                        int32_t count) {
  tpurt_strbuf_puts(buf, sep);
  tpurt_strbuf_puts(buf, name);
  tpurt_strbuf_append(buf, " = ", 3);
  ir_put_i64_array(buf, values, count);
}

void ir_put_padding(tpurt_strbuf_t* buf, const char* sep, const int64_t* low, const int64_t* high,
                    int32_t count) {
  tpurt_strbuf_printf(buf, "%spadding = dense<", sep);
  if (count == 0) {
    tpurt_strbuf_puts(buf, "0> : tensor<0x2xi64>");
    return;
  }
  tpurt_strbuf_puts(buf, "[");
  for (int32_t i = 0; i < count; ++i)
    tpurt_strbuf_printf(buf, "%s[%lld, %lld]", i ? ", " : "", (long long)low[i], (long long)high[i]);
  tpurt_strbuf_printf(buf, "]> : tensor<%dx2xi64>", (int)count);
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
    case TPURT_DTYPE_C64:
    case TPURT_DTYPE_C128: /* (real, imag): a real value has no imaginary part */
      tpurt_strbuf_puts(buf, "(");
      put_f64_elem(buf, tpurt_dtype_to_real(dtype), value);
      tpurt_strbuf_puts(buf, ", ");
      put_f64_elem(buf, tpurt_dtype_to_real(dtype), 0.0);
      tpurt_strbuf_puts(buf, ")");
      break;
    case TPURT_DTYPE_F32:
      tpurt_strbuf_append(buf, "0x", 2);
      tpurt_strbuf_put_hex(buf, f32_bits((float)value), 8);
      break;
    case TPURT_DTYPE_BF16:
      tpurt_strbuf_append(buf, "0x", 2);
      tpurt_strbuf_put_hex(buf, bf16_bits(value), 4);
      break;
    case TPURT_DTYPE_F16:
      tpurt_strbuf_append(buf, "0x", 2);
      tpurt_strbuf_put_hex(buf, f16_bits(value), 4);
      break;
    default:
      tpurt_strbuf_append(buf, "0x", 2);
      tpurt_strbuf_put_hex(buf, f64_bits(value), 16);
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
      tpurt_strbuf_put_i64(buf, (int8_t)(uint8_t)u);
      break;
    case TPURT_DTYPE_I16:
      tpurt_strbuf_put_i64(buf, (int16_t)(uint16_t)u);
      break;
    case TPURT_DTYPE_I32:
      tpurt_strbuf_put_i64(buf, (int32_t)(uint32_t)u);
      break;
    case TPURT_DTYPE_I64:
      tpurt_strbuf_put_i64(buf, value);
      break;
    case TPURT_DTYPE_U8:
      tpurt_strbuf_put_i64(buf, (uint8_t)u);
      break;
    case TPURT_DTYPE_U16:
      tpurt_strbuf_put_i64(buf, (uint16_t)u);
      break;
    case TPURT_DTYPE_U32:
      tpurt_strbuf_put_i64(buf, (uint32_t)u);
      break;
    default:
      tpurt_strbuf_printf(buf, "%llu", (unsigned long long)u);
      break; /* U64 */
  }
}

static void put_elem(tpurt_strbuf_t* buf, tpurt_dtype_t dtype, int64_t value) {
  if (tpurt_dtype_is_float(dtype) || tpurt_dtype_is_complex(dtype))
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
  tpurt_strbuf_puts(&attrs, "value = dense<");
  if (literal->data) tpurt_strbuf_append(&attrs, literal->data, literal->size);
  tpurt_strbuf_append(&attrs, "> : ", 4);
  ir_print_type(&attrs, type);
  tpurt_strbuf_free(literal);
  return ir_emit_buf(func, IR_OP_CONSTANT, NULL, 0, type, &attrs);
}

ir_value_t ir_constant_f64(ir_func_t* func, tpurt_dtype_t dtype, double value) {
  if (!func) return IR_NONE;
  if (!ir_dtype_valid(dtype)) {
    ir_failf(func, "%s: invalid element type %d", ir_op_name(IR_OP_CONSTANT), (int)dtype);
    return IR_NONE;
  }
  if (!tpurt_dtype_is_float(dtype) && !tpurt_dtype_is_complex(dtype)) {
    if (dtype == TPURT_DTYPE_BOOL) return ir_constant_i64(func, dtype, value != 0);
    if (!isfinite(value) || value >= 9223372036854775808.0 || value < -9223372036854775808.0) {
      ir_failf(func, "%s: %g does not fit %s", ir_op_name(IR_OP_CONSTANT), value, ir_dtype_mlir_name(dtype));
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
  if (!ir_dtype_valid(dtype)) {
    ir_failf(func, "%s: invalid element type %d", ir_op_name(IR_OP_CONSTANT), (int)dtype);
    return IR_NONE;
  }
  ir_type_t type = ir_type_scalar(dtype);
  tpurt_strbuf_t literal = {0};
  put_elem(&literal, dtype, value);
  return emit_constant(func, &type, &literal);
}

ir_value_t ir_constant_i64_array(ir_func_t* func, ir_type_t type, const int64_t* values) {
  if (!func) return IR_NONE;
  if (!ir_check_type(func, IR_OP_CONSTANT, &type)) return IR_NONE;
  tpurt_strbuf_t literal = {0};
  if (ir_type_numel(&type) == 0) {
    tpurt_strbuf_puts(&literal, ""); /* dense<> parses for every empty shape */
  } else {
    int64_t pos = 0;
    put_nested(&literal, &type, 0, values, &pos);
  }
  return emit_constant(func, &type, &literal);
}

ir_value_t ir_splat(ir_func_t* func, tpurt_dtype_t dtype, int32_t rank, const int64_t* dims, double value) {
  if (!func) return IR_NONE;
  ir_value_t c = tpurt_dtype_is_float(dtype) || tpurt_dtype_is_complex(dtype)
                     ? ir_constant_f64(func, dtype, value)
                     : ir_constant_i64(func, dtype, (int64_t)value);
  if (rank == 0) return c;
  return ir_broadcast_in_dim(func, c, rank, dims, NULL);
}

ir_value_t ir_const_like(ir_func_t* func, ir_value_t like, double value) {
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_value_type(func, like);
  if (!t) return IR_NONE;
  ir_type_t copy = *t; /* the constant's ops may move the value table */
  return ir_splat(func, copy.dtype, copy.rank, copy.dims, value);
}

ir_value_t ir_iota(ir_func_t* func, ir_type_t type, int32_t dimension) {
  if (!func) return IR_NONE;
  if (type.rank < 1 || dimension < 0 || dimension >= type.rank) {
    ir_failf(func, "%s: iota_dimension %d is outside the rank %d of %s", ir_op_name(IR_OP_IOTA),
             (int)dimension, (int)type.rank, ir_type_str(&type));
    return IR_NONE;
  }
  if (type.dtype == TPURT_DTYPE_BOOL) {
    ir_failf(func, "%s: element type i1 is not supported", ir_op_name(IR_OP_IOTA));
    return IR_NONE;
  }
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "iota_dimension = %d : i64", (int)dimension);
  return ir_emit(func, IR_OP_IOTA, NULL, 0, &type, attrs);
}

/*===------------------------------------------------------------------===*/
/* Regions                                                                */
/*===------------------------------------------------------------------===*/

bool ir_open_region(ir_func_t* func, ir_op_t owner, int32_t op_index, const ir_type_t* arg_types,
                    int32_t num_args, const ir_type_t* return_types, int32_t num_returns,
                    ir_value_t* out_args) {
  if (func->num_open >= IR_MAX_OPEN_REGIONS) {
    ir_failf(func, "%s: more than %d nested regions", ir_op_name(owner), IR_MAX_OPEN_REGIONS - 1);
    for (int32_t i = 0; i < num_args; ++i) out_args[i] = IR_NONE;
    return false;
  }
  ir_region_t* region = tpurt_arena_alloc(&func->arena, sizeof(*region));
  region->owner = owner;
  region->num_returns = op_index < 0 ? -1 : num_returns;
  for (int32_t i = 0; op_index >= 0 && i < num_returns && i < TPURT_MAX_RESULTS; ++i)
    region->return_types[i] = return_types[i];
  if (op_index >= 0) {
    region->args =
        tpurt_arena_alloc(&func->arena, (size_t)(num_args > 0 ? num_args : 1) * sizeof(ir_value_t));
    region->num_args = num_args;
    for (int32_t i = 0; i < num_args; ++i) {
      region->args[i] = ir_new_values(func, &arg_types[i], 1);
      func->values[region->args[i]].scope = region;
      out_args[i] = region->args[i];
    }
    /* an op has few regions: the list is copied one longer each time */
    ir_inst_t* op = &func->ops[op_index];
    ir_region_t** regions = tpurt_arena_alloc(&func->arena, (size_t)(op->num_regions + 1) * sizeof(*regions));
    if (op->num_regions) memcpy(regions, op->regions, (size_t)op->num_regions * sizeof(*regions));
    regions[op->num_regions++] = region;
    op->regions = regions;
  } else {
    for (int32_t i = 0; i < num_args; ++i) out_args[i] = IR_NONE;
  }
  func->open[func->num_open++] = region;
  return true;
}

bool ir_push_region(ir_func_t* func, ir_op_t owner, int32_t op_index, const tpurt_dtype_t* arg_dtypes,
                    int32_t num_args, const tpurt_dtype_t* return_dtypes, int32_t num_returns,
                    ir_value_t* out_args) {
  ir_type_t args[2 * TPURT_MAX_RESULTS], returns[TPURT_MAX_RESULTS];
  for (int32_t i = 0; op_index >= 0 && i < num_args && i < 2 * TPURT_MAX_RESULTS; ++i)
    args[i] = ir_type_scalar(arg_dtypes[i]);
  for (int32_t i = 0; op_index >= 0 && i < num_returns && i < TPURT_MAX_RESULTS; ++i)
    returns[i] = ir_type_scalar(return_dtypes[i]);
  return ir_open_region(func, owner, op_index, args, num_args, returns, num_returns, out_args);
}

void ir_region_end(ir_func_t* func, const ir_value_t* values, int32_t count) {
  if (!func) return;
  if (func->num_open <= 1) {
    ir_failf(func, "%s: no region is open", ir_op_name(IR_OP_RETURN));
    return;
  }
  ir_region_t* region = func->open[func->num_open - 1];
  bool ok = region->num_returns >= 0;
  if (ok && count != region->num_returns) {
    ir_failf(func, "%s: the region returns %d values, expected %d", ir_op_name(region->owner), (int)count,
             (int)region->num_returns);
    ok = false;
  }
  for (int32_t i = 0; ok && i < count; ++i) {
    const ir_type_t* t = ir_operand_type(func, IR_OP_RETURN, values[i]);
    if (!t) {
      ok = false;
    } else if (!ir_type_equal(t, &region->return_types[i])) {
      ir_failf(func, "%s: region result %d must be %s, got %s", ir_op_name(region->owner), (int)i,
               ir_type_str(&region->return_types[i]), ir_type_str(t));
      ok = false;
    }
  }
  if (ok) ir_add_op(func, IR_OP_RETURN, values, count, IR_NONE, 0, NULL);
  --func->num_open;
}
