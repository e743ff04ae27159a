/* ops_indexing.c: gather and scatter (scatter opens its update region). */
#include "ir_internal.h"

/*===------------------------------------------------------------------===*/
/* Gather                                                                 */
/*===------------------------------------------------------------------===*/

/* Size of the index vector: indices.dims[ivd], or 1 when ivd == rank. */
static bool index_vector_size(ir_func_t* func, ir_op_t op, const ir_type_t* ti, int64_t ivd, int64_t* out) {
  if (!tpurt_dtype_is_integral(ti->dtype)) {
    ir_failf(func, "%s: indices must be integers, got %s", ir_op_name(op), ir_type_str(ti));
    return false;
  }
  if (ivd < 0 || ivd > ti->rank) {
    ir_failf(func, "%s: index_vector_dim %lld is outside [0, %d] for indices %s", ir_op_name(op),
             (long long)ivd, (int)ti->rank, ir_type_str(ti));
    return false;
  }
  *out = ivd < ti->rank ? ti->dims[ivd] : 1;
  return true;
}

ir_value_t ir_gather(ir_func_t* func, ir_value_t operand_value, ir_value_t indices,
                     const ir_gather_dims_t* dims) {
  const ir_op_t op = IR_OP_GATHER;
  if (!func) return IR_NONE;
  const ir_type_t* to = ir_operand_type(func, op, operand_value);
  const ir_type_t* ti = ir_operand_type(func, op, indices);
  if (!to || !ti) return IR_NONE;
  int64_t ivsize;
  if (!index_vector_size(func, op, ti, dims->index_vector_dim, &ivsize)) return IR_NONE;
  if (!ir_check_dims(func, op, "collapsed_slice_dims", dims->collapsed_slice_dims, dims->num_collapsed,
                     to->rank) ||
      !ir_check_sorted(func, op, "collapsed_slice_dims", dims->collapsed_slice_dims, dims->num_collapsed) ||
      !ir_check_dims(func, op, "start_index_map", dims->start_index_map, dims->num_start_index_map, to->rank))
    return IR_NONE;
  if (dims->num_start_index_map != ivsize) {
    ir_failf(func, "%s: start_index_map has %d entries but the index vector of %s has %lld", ir_op_name(op),
             (int)dims->num_start_index_map, ir_type_str(ti), (long long)ivsize);
    return IR_NONE;
  }
  if (dims->num_offset_dims != to->rank - dims->num_collapsed) {
    ir_failf(func, "%s: expected %d offset_dims (operand rank %d - %d collapsed), got %d", ir_op_name(op),
             (int)(to->rank - dims->num_collapsed), (int)to->rank, (int)dims->num_collapsed,
             (int)dims->num_offset_dims);
    return IR_NONE;
  }
  for (int32_t d = 0; d < to->rank; ++d) {
    int64_t s = dims->slice_sizes[d];
    bool collapsed = ir_dims_contain(dims->collapsed_slice_dims, dims->num_collapsed, d);
    if (s < 0 || s > to->dims[d] || (collapsed && s > 1)) {
      ir_failf(func, "%s: slice_sizes[%d] = %lld is outside [0, %lld] for %s%s", ir_op_name(op), (int)d,
               (long long)s, (long long)(collapsed ? (to->dims[d] < 1 ? to->dims[d] : 1) : to->dims[d]),
               ir_type_str(to), collapsed ? " (a collapsed dim)" : "");
      return IR_NONE;
    }
  }
  int32_t batch_rank = ti->rank - (dims->index_vector_dim < ti->rank ? 1 : 0);
  int32_t rank = dims->num_offset_dims + batch_rank;
  if (rank > TPURT_MAX_RANK) {
    ir_failf(func, "%s: result rank %d is above %d", ir_op_name(op), (int)rank, TPURT_MAX_RANK);
    return IR_NONE;
  }
  if (!ir_check_dims(func, op, "offset_dims", dims->offset_dims, dims->num_offset_dims, rank) ||
      !ir_check_sorted(func, op, "offset_dims", dims->offset_dims, dims->num_offset_dims))
    return IR_NONE;
  ir_type_t type;
  memset(&type, 0, sizeof(type));
  type.dtype = to->dtype;
  type.rank = rank;
  int32_t next_offset = 0, next_batch = 0;
  for (int32_t d = 0; d < rank; ++d) {
    if (ir_dims_contain(dims->offset_dims, dims->num_offset_dims, d)) {
      while (ir_dims_contain(dims->collapsed_slice_dims, dims->num_collapsed, next_offset)) ++next_offset;
      type.dims[d] = dims->slice_sizes[next_offset++];
    } else {
      if (next_batch == dims->index_vector_dim) ++next_batch;
      type.dims[d] = ti->dims[next_batch++];
    }
  }
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_puts(&attrs, "dimension_numbers = #stablehlo.gather<offset_dims = ");
  ir_put_list(&attrs, dims->offset_dims, dims->num_offset_dims);
  tpurt_strbuf_puts(&attrs, ", collapsed_slice_dims = ");
  ir_put_list(&attrs, dims->collapsed_slice_dims, dims->num_collapsed);
  tpurt_strbuf_puts(&attrs, ", start_index_map = ");
  ir_put_list(&attrs, dims->start_index_map, dims->num_start_index_map);
  tpurt_strbuf_printf(&attrs, ", index_vector_dim = %lld>", (long long)dims->index_vector_dim);
  ir_put_named_array(&attrs, ", ", "slice_sizes", dims->slice_sizes, to->rank);
  tpurt_strbuf_printf(&attrs, ", indices_are_sorted = %s", dims->indices_are_sorted ? "true" : "false");
  ir_value_t operands[2] = {operand_value, indices};
  return ir_emit_buf(func, op, operands, 2, &type, &attrs);
}

/*===------------------------------------------------------------------===*/
/* Scatter                                                                */
/*===------------------------------------------------------------------===*/

ir_value_t ir_scatter_begin(ir_func_t* func, ir_value_t operand_value, ir_value_t indices, ir_value_t updates,
                            const ir_scatter_dims_t* dims, ir_value_t* out_block_args) {
  const ir_op_t op = IR_OP_SCATTER;
  if (!func) return IR_NONE;
  const ir_type_t* to = ir_operand_type(func, op, operand_value);
  const ir_type_t* ti = ir_operand_type(func, op, indices);
  const ir_type_t* tu = ir_operand_type(func, op, updates);
  bool ok = to && ti && tu;
  int64_t ivsize = 0;
  if (ok) ok = index_vector_size(func, op, ti, dims->index_vector_dim, &ivsize);
  if (ok && tu->dtype != to->dtype) {
    ir_failf(func, "%s: updates %s and operand %s must have one element type", ir_op_name(op),
             ir_type_str(tu), ir_type_str(to));
    ok = false;
  }
  if (ok) {
    ok = ir_check_dims(func, op, "update_window_dims", dims->update_window_dims, dims->num_update_window_dims,
                       tu->rank) &&
         ir_check_sorted(func, op, "update_window_dims", dims->update_window_dims,
                         dims->num_update_window_dims) &&
         ir_check_dims(func, op, "inserted_window_dims", dims->inserted_window_dims, dims->num_inserted,
                       to->rank) &&
         ir_check_sorted(func, op, "inserted_window_dims", dims->inserted_window_dims, dims->num_inserted) &&
         ir_check_dims(func, op, "scatter_dims_to_operand_dims", dims->scatter_dims_to_operand_dims,
                       dims->num_scatter_dims_to_operand, to->rank);
  }
  if (ok && dims->num_scatter_dims_to_operand != ivsize) {
    ir_failf(func, "%s: scatter_dims_to_operand_dims has %d entries but the index vector of %s has %lld",
             ir_op_name(op), (int)dims->num_scatter_dims_to_operand, ir_type_str(ti), (long long)ivsize);
    ok = false;
  }
  if (ok && dims->num_update_window_dims + dims->num_inserted != to->rank) {
    ir_failf(func, "%s: %d update_window_dims + %d inserted_window_dims must equal the operand rank of %s",
             ir_op_name(op), (int)dims->num_update_window_dims, (int)dims->num_inserted, ir_type_str(to));
    ok = false;
  }
  int32_t scatter_rank = ok ? ti->rank - (dims->index_vector_dim < ti->rank ? 1 : 0) : 0;
  if (ok && tu->rank != scatter_rank + dims->num_update_window_dims) {
    ir_failf(func, "%s: updates %s must have rank %d (%d scatter dims of %s + %d window dims)",
             ir_op_name(op), ir_type_str(tu), (int)(scatter_rank + dims->num_update_window_dims),
             (int)scatter_rank, ir_type_str(ti), (int)dims->num_update_window_dims);
    ok = false;
  }
  if (ok) { /* update scatter dims match the indices' batch dims; windows fit */
    int32_t next_batch = 0, next_window = 0;
    for (int32_t d = 0; ok && d < tu->rank; ++d) {
      if (ir_dims_contain(dims->update_window_dims, dims->num_update_window_dims, d)) {
        while (ir_dims_contain(dims->inserted_window_dims, dims->num_inserted, next_window)) ++next_window;
        if (tu->dims[d] > to->dims[next_window]) {
          ir_failf(func, "%s: update window dim %d has size %lld, above operand dim %d of %s", ir_op_name(op),
                   (int)d, (long long)tu->dims[d], (int)next_window, ir_type_str(to));
          ok = false;
        }
        ++next_window;
      } else {
        if (next_batch == dims->index_vector_dim) ++next_batch;
        if (tu->dims[d] != ti->dims[next_batch]) {
          ir_failf(func, "%s: updates dim %d has size %lld, indices dim %d of %s has %lld", ir_op_name(op),
                   (int)d, (long long)tu->dims[d], (int)next_batch, ir_type_str(ti),
                   (long long)ti->dims[next_batch]);
          ok = false;
        }
        ++next_batch;
      }
    }
  }
  if (!ok) {
    ir_push_region(func, op, -1, NULL, 2, NULL, 0, out_block_args);
    return IR_NONE;
  }
  ir_type_t type = *to;
  tpurt_dtype_t dtypes[2] = {to->dtype, to->dtype};
  ir_value_t operands[3] = {operand_value, indices, updates};
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_puts(&attrs, "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = ");
  ir_put_list(&attrs, dims->update_window_dims, dims->num_update_window_dims);
  tpurt_strbuf_puts(&attrs, ", inserted_window_dims = ");
  ir_put_list(&attrs, dims->inserted_window_dims, dims->num_inserted);
  tpurt_strbuf_puts(&attrs, ", scatter_dims_to_operand_dims = ");
  ir_put_list(&attrs, dims->scatter_dims_to_operand_dims, dims->num_scatter_dims_to_operand);
  tpurt_strbuf_printf(&attrs, ", index_vector_dim = %lld>, indices_are_sorted = %s, unique_indices = %s",
                      (long long)dims->index_vector_dim, dims->indices_are_sorted ? "true" : "false",
                      dims->unique_indices ? "true" : "false");
  ir_value_t result = ir_new_values(func, &type, 1);
  int32_t index = ir_add_op(func, op, operands, 3, result, 1, attrs.data);
  tpurt_strbuf_free(&attrs);
  ir_push_region(func, op, index, dtypes, 2, dtypes, 1, out_block_args);
  return result;
}
