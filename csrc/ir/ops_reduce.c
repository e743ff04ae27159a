/* ops_reduce.c: the ops with a reducer or comparator region: reduce,
** reduce_window and sort. */
#include "ir_internal.h"

/*===------------------------------------------------------------------===*/
/* Reduce                                                                 */
/*===------------------------------------------------------------------===*/

/* result shape of reducing |t| over |dims|, or false (error recorded) */
static bool reduced_type(ir_func_t* func, ir_op_t op, const ir_type_t* t, const int64_t* dims,
                         int32_t num_dims, ir_type_t* out) {
  if (!ir_check_dims(func, op, "dimensions", dims, num_dims, t->rank)) return false;
  *out = *t;
  out->rank = 0;
  for (int32_t d = 0; d < t->rank; ++d)
    if (!ir_dims_contain(dims, num_dims, d)) out->dims[out->rank++] = t->dims[d];
  return true;
}

/* The inputs and inits of a (windowed) reduction: 1..TPURT_MAX_RESULTS
** inputs of one shape, each init a scalar of its input's type. False (error
** recorded) otherwise. */
static bool check_reduce_inputs(ir_func_t* func, ir_op_t op, const ir_value_t* inputs,
                                const ir_value_t* inits, int32_t num_inputs) {
  if (num_inputs < 1 || num_inputs > TPURT_MAX_RESULTS) {
    ir_failf(func, "%s: %d inputs is outside [1, %d]", ir_op_name(op), (int)num_inputs, TPURT_MAX_RESULTS);
    return false;
  }
  for (int32_t i = 0; i < num_inputs; ++i) {
    const ir_type_t* tx = ir_operand_type(func, op, inputs[i]);
    const ir_type_t* ti = ir_operand_type(func, op, inits[i]);
    if (!tx || !ti) return false;
    const ir_type_t* t0 = &func->values[inputs[0]].type;
    if (tx->rank != t0->rank || memcmp(tx->dims, t0->dims, sizeof(int64_t) * (size_t)tx->rank) != 0) {
      ir_failf(func, "%s: input %d is %s, input 0 is %s: shapes must match", ir_op_name(op), (int)i,
               ir_type_str(tx), ir_type_str(t0));
      return false;
    }
    if (ti->rank != 0 || ti->dtype != tx->dtype) {
      ir_failf(func, "%s: init %d must be tensor<%s>, got %s", ir_op_name(op), (int)i,
               ir_dtype_mlir_name(tx->dtype), ir_type_str(ti));
      return false;
    }
  }
  return true;
}

/* The shared end of reduce and reduce_window: unless |ok|, a detached
** region; else the op over |inputs| then |inits| with results of |types|
** and |attrs| (freed either way), and its region of accumulators then
** elements. */
static void end_reduction_begin(ir_func_t* func, ir_op_t op, bool ok, const ir_value_t* inputs,
                                const ir_value_t* inits, int32_t num_inputs, const ir_type_t* types,
                                tpurt_strbuf_t* attrs, ir_value_t* out_results, ir_value_t* out_block_args) {
  if (!ok) {
    tpurt_strbuf_free(attrs);
    int32_t n = num_inputs > 0 && num_inputs <= TPURT_MAX_RESULTS ? 2 * num_inputs : 0;
    ir_push_region(func, op, -1, NULL, n, NULL, 0, out_block_args);
    return;
  }
  tpurt_dtype_t dtypes[2 * TPURT_MAX_RESULTS];
  ir_value_t operands[2 * TPURT_MAX_RESULTS];
  for (int32_t i = 0; i < num_inputs; ++i) {
    operands[i] = inputs[i], operands[num_inputs + i] = inits[i];
    dtypes[i] = dtypes[num_inputs + i] = func->values[inputs[i]].type.dtype;
  }
  ir_value_t first = ir_new_values(func, types, num_inputs);
  int32_t index = ir_add_op(func, op, operands, 2 * num_inputs, first, num_inputs, attrs->data);
  tpurt_strbuf_free(attrs);
  for (int32_t i = 0; i < num_inputs; ++i) out_results[i] = first + i;
  ir_push_region(func, op, index, dtypes, 2 * num_inputs, dtypes, num_inputs, out_block_args);
}

void ir_reduce_begin(ir_func_t* func, const ir_value_t* inputs, const ir_value_t* inits, int32_t num_inputs,
                     const int64_t* dims, int32_t num_dims, ir_value_t* out_results,
                     ir_value_t* out_block_args) {
  const ir_op_t op = IR_OP_REDUCE;
  if (!func) return;
  for (int32_t i = 0; i < num_inputs; ++i) out_results[i] = IR_NONE;
  ir_type_t types[TPURT_MAX_RESULTS] = {{0}};
  bool ok = check_reduce_inputs(func, op, inputs, inits, num_inputs);
  for (int32_t i = 0; ok && i < num_inputs; ++i)
    ok = reduced_type(func, op, &func->values[inputs[i]].type, dims, num_dims, &types[i]);
  tpurt_strbuf_t attrs = {0};
  if (ok) ir_put_named_array(&attrs, "", "dimensions", dims, num_dims);
  end_reduction_begin(func, op, ok, inputs, inits, num_inputs, types, &attrs, out_results, out_block_args);
}

/* The combining op of |reducer| over |dtype|, or IR_OP_NONE (none). */
static ir_op_t reducer_op(ir_reducer_t reducer, tpurt_dtype_t dtype) {
  bool is_bool = dtype == TPURT_DTYPE_BOOL;
  switch (reducer) {
    case IR_REDUCE_ADD:
      return is_bool ? IR_OP_OR : IR_OP_ADD;
    case IR_REDUCE_MUL:
      return is_bool ? IR_OP_AND : IR_OP_MULTIPLY;
    case IR_REDUCE_MAX:
      return is_bool ? IR_OP_OR : IR_OP_MAXIMUM;
    case IR_REDUCE_MIN:
      return is_bool ? IR_OP_AND : IR_OP_MINIMUM;
    case IR_REDUCE_AND:
      return tpurt_dtype_is_float(dtype) ? IR_OP_NONE : IR_OP_AND;
    case IR_REDUCE_OR:
      return tpurt_dtype_is_float(dtype) ? IR_OP_NONE : IR_OP_OR;
    case IR_REDUCE_XOR:
      return tpurt_dtype_is_float(dtype) ? IR_OP_NONE : IR_OP_XOR;
  }
  return IR_OP_NONE;
}

/* The one-op body of |reducer| over |x|'s element type, or IR_OP_NONE
** (error recorded). */
static ir_op_t reducer_body(ir_func_t* func, ir_op_t op, ir_value_t x, ir_reducer_t reducer) {
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_OP_NONE;
  ir_op_t body = reducer_op(reducer, t->dtype);
  if (body == IR_OP_NONE)
    ir_failf(func, "%s: reducer %d does not apply to %s", ir_op_name(op), (int)reducer, ir_type_str(t));
  return body;
}

ir_value_t ir_reduce(ir_func_t* func, ir_value_t x, ir_value_t init, const int64_t* dims, int32_t num_dims,
                     ir_reducer_t reducer) {
  if (!func) return IR_NONE;
  ir_op_t body = reducer_body(func, IR_OP_REDUCE, x, reducer);
  if (body == IR_OP_NONE) return IR_NONE;
  ir_value_t result, args[2];
  ir_reduce_begin(func, &x, &init, 1, dims, num_dims, &result, args);
  ir_value_t r = ir_binary(func, body, args[0], args[1]);
  ir_region_end(func, &r, 1);
  return result;
}

/*===------------------------------------------------------------------===*/
/* Sort (appended by the misc family)                                     */
/*===------------------------------------------------------------------===*/

void ir_sort_begin(ir_func_t* func, const ir_value_t* inputs, int32_t num_inputs, int64_t dimension,
                   bool is_stable, ir_value_t* out_results, ir_value_t* out_block_args) {
  const ir_op_t op = IR_OP_SORT;
  if (!func) return;
  for (int32_t i = 0; i < num_inputs && i < TPURT_MAX_RESULTS; ++i) out_results[i] = IR_NONE;
  tpurt_dtype_t dtypes[2 * TPURT_MAX_RESULTS];
  ir_type_t types[TPURT_MAX_RESULTS];
  bool ok = true;
  if (num_inputs < 1 || num_inputs > TPURT_MAX_RESULTS) {
    ir_failf(func, "%s: %d inputs is outside [1, %d]", ir_op_name(op), (int)num_inputs, TPURT_MAX_RESULTS);
    ok = false;
  }
  for (int32_t i = 0; ok && i < num_inputs; ++i) {
    const ir_type_t* tx = ir_operand_type(func, op, inputs[i]);
    if (!tx) {
      ok = false;
      break;
    }
    const ir_type_t* t0 = &func->values[inputs[0]].type;
    if (tx->rank != t0->rank || memcmp(tx->dims, t0->dims, sizeof(int64_t) * (size_t)tx->rank) != 0) {
      ir_failf(func, "%s: input %d is %s, input 0 is %s: shapes must match", ir_op_name(op), (int)i,
               ir_type_str(tx), ir_type_str(t0));
      ok = false;
      break;
    }
    if (tx->rank == 0 || dimension < 0 || dimension >= tx->rank) {
      ir_failf(func, "%s: dimension %lld is outside the rank of %s", ir_op_name(op), (long long)dimension,
               ir_type_str(tx));
      ok = false;
      break;
    }
    types[i] = *tx;
    dtypes[2 * i] = dtypes[2 * i + 1] = tx->dtype;
  }
  if (!ok) {
    int32_t n = num_inputs > 0 && num_inputs <= TPURT_MAX_RESULTS ? 2 * num_inputs : 0;
    ir_push_region(func, op, -1, NULL, n, NULL, 0, out_block_args);
    return;
  }
  ir_value_t first = ir_new_values(func, types, num_inputs);
  char attrs[96];
  snprintf(attrs, sizeof(attrs), "dimension = %lld : i64, is_stable = %s", (long long)dimension,
           is_stable ? "true" : "false");
  int32_t index = ir_add_op(func, op, inputs, num_inputs, first, num_inputs, attrs);
  for (int32_t i = 0; i < num_inputs; ++i) out_results[i] = first + i;
  tpurt_dtype_t ret = TPURT_DTYPE_BOOL;
  ir_push_region(func, op, index, dtypes, 2 * num_inputs, &ret, 1, out_block_args);
}

/*===------------------------------------------------------------------===*/
/* Reduce window (appended by the pooling family)                         */
/*===------------------------------------------------------------------===*/

/* The result shape of one window reduction of |t|, or false (error recorded). */
static bool windowed_type(ir_func_t* func, ir_op_t op, const ir_type_t* t, const ir_window_t* w,
                          ir_type_t* out) {
  *out = *t;
  for (int32_t d = 0; d < t->rank; ++d) {
    int64_t size = w->dimensions[d], stride = w->strides[d], dilation = w->dilations[d];
    if (size < 1 || stride < 1 || dilation < 1) {
      ir_failf(func, "%s: dim %d has window %lld, stride %lld, dilation %lld: all must be >= 1",
               ir_op_name(op), (int)d, (long long)size, (long long)stride, (long long)dilation);
      return false;
    }
    int64_t padded = t->dims[d] + w->padding_low[d] + w->padding_high[d];
    int64_t span = (size - 1) * dilation + 1;
    if (padded < 0) {
      ir_failf(func, "%s: dim %d of %s is negative after padding", ir_op_name(op), (int)d, ir_type_str(t));
      return false;
    }
    out->dims[d] = padded < span ? 0 : (padded - span) / stride + 1;
  }
  return true;
}

void ir_reduce_window_begin(ir_func_t* func, const ir_value_t* inputs, const ir_value_t* inits,
                            int32_t num_inputs, const ir_window_t* window, ir_value_t* out_results,
                            ir_value_t* out_block_args) {
  const ir_op_t op = IR_OP_REDUCE_WINDOW;
  if (!func) return;
  for (int32_t i = 0; i < num_inputs && i < TPURT_MAX_RESULTS; ++i) out_results[i] = IR_NONE;
  ir_type_t types[TPURT_MAX_RESULTS] = {{0}};
  bool ok = check_reduce_inputs(func, op, inputs, inits, num_inputs);
  for (int32_t i = 0; ok && i < num_inputs; ++i)
    ok = windowed_type(func, op, &func->values[inputs[i]].type, window, &types[i]);
  tpurt_strbuf_t attrs = {0};
  if (!ok) {
    end_reduction_begin(func, op, false, inputs, inits, num_inputs, types, &attrs, out_results,
                        out_block_args);
    return;
  }
  int32_t rank = types[0].rank;
  int64_t ones[TPURT_MAX_RANK] = {0};
  for (int32_t d = 0; d < rank; ++d) ones[d] = 1;
  ir_put_named_array(&attrs, "", "base_dilations", ones, rank);
  ir_put_padding(&attrs, ", ", window->padding_low, window->padding_high, rank);
  ir_put_named_array(&attrs, ", ", "window_dilations", window->dilations, rank);
  ir_put_named_array(&attrs, ", ", "window_dimensions", window->dimensions, rank);
  ir_put_named_array(&attrs, ", ", "window_strides", window->strides, rank);
  end_reduction_begin(func, op, true, inputs, inits, num_inputs, types, &attrs, out_results, out_block_args);
}

ir_value_t ir_reduce_window(ir_func_t* func, ir_value_t x, ir_value_t init, const ir_window_t* window,
                            ir_reducer_t reducer) {
  if (!func) return IR_NONE;
  ir_op_t body = reducer_body(func, IR_OP_REDUCE_WINDOW, x, reducer);
  if (body == IR_OP_NONE) return IR_NONE;
  ir_value_t result, args[2];
  ir_reduce_window_begin(func, &x, &init, 1, window, &result, args);
  ir_value_t r = ir_binary(func, body, args[0], args[1]);
  ir_region_end(func, &r, 1);
  return result;
}
