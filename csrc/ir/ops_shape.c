/* ops_shape.c: shape ops: broadcast_in_dim, reshape, transpose, slice,
** dynamic_slice, dynamic_update_slice, concatenate, pad, reverse; and the
** dimension-list checks the other families share. */
#include "ir_internal.h"

/*===------------------------------------------------------------------===*/
/* Shape ops                                                              */
/*===------------------------------------------------------------------===*/

/* dims must be distinct and in [0, rank) */
bool ir_check_dims(ir_func_t* func, ir_op_t op, const char* what, const int64_t* dims, int32_t count,
                   int32_t rank) {
  bool seen[TPURT_MAX_RANK] = {false};
  if (count < 0 || count > TPURT_MAX_RANK) {
    ir_failf(func, "%s: %d %s (at most %d)", ir_op_name(op), (int)count, what, TPURT_MAX_RANK);
    return false;
  }
  for (int32_t i = 0; i < count; ++i) {
    if (dims[i] < 0 || dims[i] >= rank) {
      ir_failf(func, "%s: %s[%d] = %lld is outside [0, %d)", ir_op_name(op), what, (int)i, (long long)dims[i],
               (int)rank);
      return false;
    }
    if (seen[dims[i]]) {
      ir_failf(func, "%s: %s repeats dimension %lld", ir_op_name(op), what, (long long)dims[i]);
      return false;
    }
    seen[dims[i]] = true;
  }
  return true;
}

bool ir_check_sorted(ir_func_t* func, ir_op_t op, const char* what, const int64_t* dims, int32_t count) {
  for (int32_t i = 1; i < count; ++i) {
    if (dims[i] <= dims[i - 1]) {
      ir_failf(func, "%s: %s must be sorted, got %lld after %lld", ir_op_name(op), what, (long long)dims[i],
               (long long)dims[i - 1]);
      return false;
    }
  }
  return true;
}

bool ir_dims_contain(const int64_t* dims, int32_t count, int64_t d) {
  for (int32_t i = 0; i < count; ++i)
    if (dims[i] == d) return true;
  return false;
}

ir_value_t ir_broadcast_in_dim(ir_func_t* func, ir_value_t x, int32_t rank, const int64_t* dims,
                               const int64_t* broadcast_dimensions) {
  const ir_op_t op = IR_OP_BROADCAST_IN_DIM;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if (rank < t->rank || rank > TPURT_MAX_RANK) {
    ir_failf(func, "%s: result rank %d must be in [%d, %d] for %s", ir_op_name(op), (int)rank, (int)t->rank,
             TPURT_MAX_RANK, ir_type_str(t));
    return IR_NONE;
  }
  ir_type_t type = ir_type_make(t->dtype, rank, dims);
  if (!ir_check_dims(func, op, "broadcast_dimensions", broadcast_dimensions, t->rank, rank)) return IR_NONE;
  for (int32_t i = 0; i < t->rank; ++i) {
    int64_t to = type.dims[broadcast_dimensions[i]];
    if (t->dims[i] != 1 && t->dims[i] != to) {
      ir_failf(func, "%s: operand dim %d has size %lld, result dim %lld has size %lld (%s -> %s)",
               ir_op_name(op), (int)i, (long long)t->dims[i], (long long)broadcast_dimensions[i],
               (long long)to, ir_type_str(t), ir_type_str(&type));
      return IR_NONE;
    }
  }
  tpurt_strbuf_t attrs = {0};
  ir_put_named_array(&attrs, "", "broadcast_dimensions", broadcast_dimensions, t->rank);
  return ir_emit_buf(func, op, &x, 1, &type, &attrs);
}

ir_value_t ir_reshape(ir_func_t* func, ir_value_t x, int32_t rank, const int64_t* dims) {
  const ir_op_t op = IR_OP_RESHAPE;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if (rank < 0 || rank > TPURT_MAX_RANK) {
    ir_failf(func, "%s: result rank %d is outside [0, %d]", ir_op_name(op), (int)rank, TPURT_MAX_RANK);
    return IR_NONE;
  }
  ir_type_t type = ir_type_make(t->dtype, rank, dims);
  if (ir_type_numel(&type) != ir_type_numel(t)) {
    ir_failf(func, "%s: %s has %lld elements but %s has %lld", ir_op_name(op), ir_type_str(t),
             (long long)ir_type_numel(t), ir_type_str(&type), (long long)ir_type_numel(&type));
    return IR_NONE;
  }
  return ir_emit(func, op, &x, 1, &type, NULL);
}

ir_value_t ir_transpose(ir_func_t* func, ir_value_t x, const int64_t* permutation) {
  const ir_op_t op = IR_OP_TRANSPOSE;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if (!ir_check_dims(func, op, "permutation", permutation, t->rank, t->rank)) return IR_NONE;
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) type.dims[i] = t->dims[permutation[i]];
  tpurt_strbuf_t attrs = {0};
  ir_put_named_array(&attrs, "", "permutation", permutation, t->rank);
  return ir_emit_buf(func, op, &x, 1, &type, &attrs);
}

ir_value_t ir_slice(ir_func_t* func, ir_value_t x, const int64_t* start, const int64_t* limit,
                    const int64_t* strides) {
  const ir_op_t op = IR_OP_SLICE;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (start[i] < 0 || start[i] > limit[i] || limit[i] > t->dims[i] || strides[i] < 1) {
      ir_failf(
          func,
          "%s: dim %d of %s: need 0 <= start <= limit <= %lld and stride >= 1, got start %lld limit %lld "
          "stride %lld",
          ir_op_name(op), (int)i, ir_type_str(t), (long long)t->dims[i], (long long)start[i],
          (long long)limit[i], (long long)strides[i]);
      return IR_NONE;
    }
    type.dims[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
  }
  tpurt_strbuf_t attrs = {0};
  ir_put_named_array(&attrs, "", "start_indices", start, t->rank);
  ir_put_named_array(&attrs, ", ", "limit_indices", limit, t->rank);
  ir_put_named_array(&attrs, ", ", "strides", strides, t->rank);
  return ir_emit_buf(func, op, &x, 1, &type, &attrs);
}

/* |starts|: one rank-0 integer value per dim of |t|, all of one type. */
static bool check_starts(ir_func_t* func, ir_op_t op, const ir_type_t* t, const ir_value_t* starts) {
  tpurt_dtype_t first = TPURT_DTYPE_INVALID;
  for (int32_t i = 0; i < t->rank; ++i) {
    const ir_type_t* ts = ir_operand_type(func, op, starts[i]);
    if (!ts) return false;
    if (ts->rank != 0 || !tpurt_dtype_is_integral(ts->dtype) || (i > 0 && ts->dtype != first)) {
      ir_failf(func, "%s: start index %d must be a rank-0 integer like the others, got %s", ir_op_name(op),
               (int)i, ir_type_str(ts));
      return false;
    }
    first = ts->dtype;
  }
  return true;
}

ir_value_t ir_dynamic_slice(ir_func_t* func, ir_value_t x, const ir_value_t* starts, const int64_t* sizes) {
  const ir_op_t op = IR_OP_DYNAMIC_SLICE;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if (!check_starts(func, op, t, starts)) return IR_NONE;
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (sizes[i] < 0 || sizes[i] > t->dims[i]) {
      ir_failf(func, "%s: slice size %lld of dim %d is outside [0, %lld] (%s)", ir_op_name(op),
               (long long)sizes[i], (int)i, (long long)t->dims[i], ir_type_str(t));
      return IR_NONE;
    }
    type.dims[i] = sizes[i];
  }
  ir_value_t operands[1 + TPURT_MAX_RANK];
  operands[0] = x;
  for (int32_t i = 0; i < t->rank; ++i) operands[1 + i] = starts[i];
  tpurt_strbuf_t attrs = {0};
  ir_put_named_array(&attrs, "", "slice_sizes", sizes, t->rank);
  return ir_emit_buf(func, op, operands, 1 + t->rank, &type, &attrs);
}

ir_value_t ir_dynamic_update_slice(ir_func_t* func, ir_value_t x, ir_value_t update,
                                   const ir_value_t* starts) {
  const ir_op_t op = IR_OP_DYNAMIC_UPDATE_SLICE;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  const ir_type_t* tu = ir_operand_type(func, op, update);
  if (!t || !tu) return IR_NONE;
  bool ok = tu->dtype == t->dtype && tu->rank == t->rank;
  for (int32_t i = 0; ok && i < t->rank; ++i) ok = tu->dims[i] <= t->dims[i];
  if (!ok) {
    ir_failf(func, "%s: update %s does not fit in operand %s", ir_op_name(op), ir_type_str(tu),
             ir_type_str(t));
    return IR_NONE;
  }
  if (!check_starts(func, op, t, starts)) return IR_NONE;
  ir_value_t operands[2 + TPURT_MAX_RANK];
  operands[0] = x;
  operands[1] = update;
  for (int32_t i = 0; i < t->rank; ++i) operands[2 + i] = starts[i];
  ir_type_t type = *t;
  return ir_emit(func, op, operands, 2 + t->rank, &type, NULL);
}

ir_value_t ir_concatenate(ir_func_t* func, const ir_value_t* xs, int32_t count, int64_t dimension) {
  const ir_op_t op = IR_OP_CONCATENATE;
  if (!func) return IR_NONE;
  if (count < 1) {
    ir_failf(func, "%s: needs at least one operand, got %d", ir_op_name(op), (int)count);
    return IR_NONE;
  }
  for (int32_t i = 0; i < count; ++i)
    if (!ir_operand_type(func, op, xs[i])) return IR_NONE;
  ir_type_t type = func->values[xs[0]].type;
  if (dimension < 0 || dimension >= type.rank) {
    ir_failf(func, "%s: dimension %lld is outside [0, %d)", ir_op_name(op), (long long)dimension,
             (int)type.rank);
    return IR_NONE;
  }
  type.dims[dimension] = 0;
  for (int32_t i = 0; i < count; ++i) {
    const ir_type_t* t = &func->values[xs[i]].type;
    bool ok = t->dtype == type.dtype && t->rank == type.rank;
    for (int32_t d = 0; ok && d < t->rank; ++d) ok = d == dimension || t->dims[d] == type.dims[d];
    if (!ok) {
      ir_failf(func, "%s: operand %d is %s, which does not match %s outside dimension %lld", ir_op_name(op),
               (int)i, ir_type_str(t), ir_type_str(&func->values[xs[0]].type), (long long)dimension);
      return IR_NONE;
    }
    type.dims[dimension] += t->dims[dimension];
  }
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "dimension = %lld : i64", (long long)dimension);
  return ir_emit(func, op, xs, count, &type, attrs);
}

ir_value_t ir_pad(ir_func_t* func, ir_value_t x, ir_value_t pad_value, const int64_t* low,
                  const int64_t* high, const int64_t* interior) {
  const ir_op_t op = IR_OP_PAD;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  const ir_type_t* tp = ir_operand_type(func, op, pad_value);
  if (!t || !tp) return IR_NONE;
  if (tp->rank != 0 || tp->dtype != t->dtype) {
    ir_failf(func, "%s: padding value must be tensor<%s>, got %s", ir_op_name(op),
             ir_dtype_mlir_name(t->dtype), ir_type_str(tp));
    return IR_NONE;
  }
  ir_type_t type = *t;
  for (int32_t i = 0; i < t->rank; ++i) {
    int64_t n = t->dims[i];
    if (interior[i] < 0) {
      ir_failf(func, "%s: interior_padding[%d] = %lld is negative", ir_op_name(op), (int)i,
               (long long)interior[i]);
      return IR_NONE;
    }
    type.dims[i] = low[i] + high[i] + (n > 0 ? (n - 1) * interior[i] : 0) + n;
    if (type.dims[i] < 0) {
      ir_failf(func, "%s: dim %d of %s padded by low %lld high %lld interior %lld has negative size %lld",
               ir_op_name(op), (int)i, ir_type_str(t), (long long)low[i], (long long)high[i],
               (long long)interior[i], (long long)type.dims[i]);
      return IR_NONE;
    }
  }
  tpurt_strbuf_t attrs = {0};
  ir_put_named_array(&attrs, "", "edge_padding_low", low, t->rank);
  ir_put_named_array(&attrs, ", ", "edge_padding_high", high, t->rank);
  ir_put_named_array(&attrs, ", ", "interior_padding", interior, t->rank);
  ir_value_t operands[2] = {x, pad_value};
  return ir_emit_buf(func, op, operands, 2, &type, &attrs);
}

ir_value_t ir_reverse(ir_func_t* func, ir_value_t x, const int64_t* dims, int32_t num_dims) {
  const ir_op_t op = IR_OP_REVERSE;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if (!ir_check_dims(func, op, "dimensions", dims, num_dims, t->rank)) return IR_NONE;
  ir_type_t type = *t;
  tpurt_strbuf_t attrs = {0};
  ir_put_named_array(&attrs, "", "dimensions", dims, num_dims);
  return ir_emit_buf(func, op, &x, 1, &type, &attrs);
}
