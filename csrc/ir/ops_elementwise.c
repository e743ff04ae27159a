/* ops_elementwise.c: elementwise ops: unary, binary, compare, select,
** clamp, convert, bitcast_convert, and complex numbers' parts. */
#include "ir_internal.h"

/*===------------------------------------------------------------------===*/
/* Elementwise                                                            */
/*===------------------------------------------------------------------===*/

/* False (error recorded) unless |op| is of |klass|: ir_unary of a compare
** would build an op whose result type is wrong. */
static bool check_class(ir_func_t* func, ir_op_t op, ir_op_class_t klass, const char* builder) {
  if (ir_op_class(op) == klass) return true;
  ir_failf(func, "%s: %s (op %d) is not an elementwise op of its arity", builder, ir_op_name(op), (int)op);
  return false;
}

ir_value_t ir_unary(ir_func_t* func, ir_op_t op, ir_value_t x) {
  if (!func) return IR_NONE;
  if (!check_class(func, op, IR_OP_CLASS_UNARY, "ir_unary")) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  ir_type_t type = *t;
  return ir_emit(func, op, &x, 1, &type, NULL);
}

static bool same_type(ir_func_t* func, ir_op_t op, const char* what, const ir_type_t* a, const ir_type_t* b) {
  if (ir_type_equal(a, b)) return true;
  ir_failf(func, "%s: %s must have the same type, got %s and %s", ir_op_name(op), what, ir_type_str(a),
           ir_type_str(b));
  return false;
}

ir_value_t ir_binary(ir_func_t* func, ir_op_t op, ir_value_t a, ir_value_t b) {
  if (!func) return IR_NONE;
  if (!check_class(func, op, IR_OP_CLASS_BINARY, "ir_binary")) return IR_NONE;
  const ir_type_t* ta = ir_operand_type(func, op, a);
  const ir_type_t* tb = ir_operand_type(func, op, b);
  if (!ta || !tb) return IR_NONE;
  if (!same_type(func, op, "operands", ta, tb)) return IR_NONE;
  ir_type_t type = *ta;
  ir_value_t operands[2] = {a, b};
  return ir_emit(func, op, operands, 2, &type, NULL);
}

ir_value_t ir_is_finite(ir_func_t* func, ir_value_t x) {
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, IR_OP_IS_FINITE, x);
  if (!t) return IR_NONE;
  if (!tpurt_dtype_is_float(t->dtype)) {
    ir_failf(func, "%s: expected a float operand, got %s", ir_op_name(IR_OP_IS_FINITE), ir_type_str(t));
    return IR_NONE;
  }
  ir_type_t type = *t;
  type.dtype = TPURT_DTYPE_BOOL;
  return ir_emit(func, IR_OP_IS_FINITE, &x, 1, &type, NULL);
}

ir_value_t ir_compare(ir_func_t* func, ir_compare_dir_t dir, ir_value_t a, ir_value_t b) {
  static const char* const kDirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  const ir_op_t op = IR_OP_COMPARE;
  if (!func) return IR_NONE;
  const ir_type_t* ta = ir_operand_type(func, op, a);
  const ir_type_t* tb = ir_operand_type(func, op, b);
  if (!ta || !tb) return IR_NONE;
  if ((int)dir < 0 || (int)dir > (int)IR_GE) {
    ir_failf(func, "%s: invalid comparison direction %d", ir_op_name(op), (int)dir);
    return IR_NONE;
  }
  if (!same_type(func, op, "operands", ta, tb)) return IR_NONE;
  /* i1 compares UNSIGNED (false < true); XLA's verifier rejects SIGNED. */
  const char* kind = tpurt_dtype_is_float(ta->dtype) || tpurt_dtype_is_complex(ta->dtype) ? "FLOAT"
                     : tpurt_dtype_is_signed_int(ta->dtype)                               ? "SIGNED"
                                                                                          : "UNSIGNED";
  char attrs[160];
  snprintf(attrs, sizeof(attrs),
           "comparison_direction = #stablehlo<comparison_direction %s>, compare_type = "
           "#stablehlo<comparison_type %s>",
           kDirs[dir], kind);
  ir_type_t type = *ta;
  type.dtype = TPURT_DTYPE_BOOL;
  ir_value_t operands[2] = {a, b};
  return ir_emit(func, op, operands, 2, &type, attrs);
}

ir_value_t ir_select(ir_func_t* func, ir_value_t pred, ir_value_t on_true, ir_value_t on_false) {
  const ir_op_t op = IR_OP_SELECT;
  if (!func) return IR_NONE;
  const ir_type_t* tp = ir_operand_type(func, op, pred);
  const ir_type_t* tt = ir_operand_type(func, op, on_true);
  const ir_type_t* tf = ir_operand_type(func, op, on_false);
  if (!tp || !tt || !tf) return IR_NONE;
  if (!same_type(func, op, "on_true and on_false", tt, tf)) return IR_NONE;
  ir_type_t want = *tt;
  want.dtype = TPURT_DTYPE_BOOL;
  if (tp->dtype != TPURT_DTYPE_BOOL || (tp->rank != 0 && !ir_type_equal(tp, &want))) {
    ir_failf(func, "%s: pred must be tensor<i1> or %s, got %s", ir_op_name(op), ir_type_str(&want),
             ir_type_str(tp));
    return IR_NONE;
  }
  ir_type_t type = *tt;
  ir_value_t operands[3] = {pred, on_true, on_false};
  return ir_emit(func, op, operands, 3, &type, NULL);
}

ir_value_t ir_clamp(ir_func_t* func, ir_value_t min, ir_value_t x, ir_value_t max) {
  const ir_op_t op = IR_OP_CLAMP;
  if (!func) return IR_NONE;
  const ir_type_t* tmin = ir_operand_type(func, op, min);
  const ir_type_t* tx = ir_operand_type(func, op, x);
  const ir_type_t* tmax = ir_operand_type(func, op, max);
  if (!tmin || !tx || !tmax) return IR_NONE;
  const ir_type_t* bounds[2] = {tmin, tmax};
  for (int i = 0; i < 2; ++i) {
    if (bounds[i]->dtype != tx->dtype || (bounds[i]->rank != 0 && !ir_type_equal(bounds[i], tx))) {
      ir_failf(func, "%s: %s must be rank-0 %s or %s, got %s", ir_op_name(op), i ? "max" : "min",
               ir_dtype_mlir_name(tx->dtype), ir_type_str(tx), ir_type_str(bounds[i]));
      return IR_NONE;
    }
  }
  ir_type_t type = *tx;
  ir_value_t operands[3] = {min, x, max};
  return ir_emit(func, op, operands, 3, &type, NULL);
}

ir_value_t ir_convert(ir_func_t* func, ir_value_t x, tpurt_dtype_t dtype) {
  const ir_op_t op = IR_OP_CONVERT;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  ir_type_t type = *t;
  type.dtype = dtype;
  return ir_emit(func, op, &x, 1, &type, NULL);
}

ir_value_t ir_bitcast_convert(ir_func_t* func, ir_value_t x, ir_type_t type) {
  const ir_op_t op = IR_OP_BITCAST_CONVERT;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if (!ir_check_type(func, op, &type)) return IR_NONE;
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
    ir_failf(func, "%s: cannot reinterpret %s as %s", ir_op_name(op), ir_type_str(t), ir_type_str(&type));
    return IR_NONE;
  }
  return ir_emit(func, op, &x, 1, &type, NULL);
}

/*===------------------------------------------------------------------===*/
/* Complex numbers                                                        */
/*===------------------------------------------------------------------===*/

/* real, imag and abs of a complex value: values of its real type */
ir_value_t ir_complex_part(ir_func_t* func, ir_op_t op, ir_value_t x) {
  if (!func) return IR_NONE;
  if (op != IR_OP_REAL && op != IR_OP_IMAG && op != IR_OP_ABS) {
    ir_failf(func, "ir_complex_part: %s is not real, imag or abs", ir_op_name(op));
    return IR_NONE;
  }
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if (!tpurt_dtype_is_complex(t->dtype)) {
    ir_failf(func, "%s: expected a complex operand, got %s", ir_op_name(op), ir_type_str(t));
    return IR_NONE;
  }
  ir_type_t type = *t;
  type.dtype = tpurt_dtype_to_real(t->dtype);
  return ir_emit(func, op, &x, 1, &type, NULL);
}

ir_value_t ir_complex(ir_func_t* func, ir_value_t re, ir_value_t im) {
  const ir_op_t op = IR_OP_COMPLEX;
  if (!func) return IR_NONE;
  const ir_type_t* tr = ir_operand_type(func, op, re);
  const ir_type_t* ti = ir_operand_type(func, op, im);
  if (!tr || !ti) return IR_NONE;
  if (!same_type(func, op, "operands", tr, ti)) return IR_NONE;
  if (tr->dtype != TPURT_DTYPE_F32 && tr->dtype != TPURT_DTYPE_F64) {
    ir_failf(func, "%s: parts must be f32 or f64, got %s", ir_op_name(op), ir_type_str(tr));
    return IR_NONE;
  }
  ir_type_t type = *tr;
  type.dtype = tpurt_dtype_to_complex(tr->dtype);
  ir_value_t operands[2] = {re, im};
  return ir_emit(func, op, operands, 2, &type, NULL);
}
