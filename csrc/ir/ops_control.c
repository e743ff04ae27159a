/* ops_control.c: ops that call out or steer: custom_call, and the ops with
** several regions (while, if, case). */
#include "ir_internal.h"

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
  const ir_op_t op = IR_OP_CUSTOM_CALL;
  if (!func) return;
  for (int32_t i = 0; i < num_results; ++i) out_results[i] = IR_NONE;
  if (!call_target_name || !*call_target_name) {
    ir_failf(func, "%s: no call target name", ir_op_name(op));
    return;
  }
  if (num_results < 1 || num_results > TPURT_MAX_RESULTS || num_operands < 0 ||
      num_operands > IR_MAX_CUSTOM_CALL_OPERANDS) {
    ir_failf(func, "%s %s: %d ir_operand_type(s) and %d result(s) are outside [0, %d] and [1, %d]",
             ir_op_name(op), call_target_name, (int)num_operands, (int)num_results,
             IR_MAX_CUSTOM_CALL_OPERANDS, TPURT_MAX_RESULTS);
    return;
  }
  const ir_type_t* operand_types[IR_MAX_CUSTOM_CALL_OPERANDS];
  for (int32_t i = 0; i < num_operands; ++i)
    if (!(operand_types[i] = ir_operand_type(func, op, operands[i]))) return;
  const ir_type_t* result_ptrs[TPURT_MAX_RESULTS];
  for (int32_t i = 0; i < num_results; ++i) {
    if (!ir_check_type(func, op, &result_types[i])) return;
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
  ir_value_t first = ir_new_values(func, result_types, num_results);
  ir_add_op(func, op, operands, num_operands, first, num_results, attrs.data);
  tpurt_strbuf_free(&attrs);
  for (int32_t i = 0; i < num_results; ++i) out_results[i] = first + i;
}

/*===------------------------------------------------------------------===*/
/* Multi-region ops: while, if, case                                      */
/*===------------------------------------------------------------------===*/

/* Adds op |name| (its results come at the end) and opens its first region
** with |num_args| args of |arg_types| returning |return_types|; on a bad
** operand (|ok| false) opens a detached region instead, so the caller's
** sequence still balances. */
static ir_region_op_t begin_region_op(ir_func_t* func, ir_op_t op, bool ok, const ir_value_t* operands,
                                      int32_t num_operands, int32_t num_regions, int32_t num_values,
                                      const ir_type_t* arg_types, int32_t num_args,
                                      const ir_type_t* return_types, int32_t num_returns,
                                      ir_value_t* out_args) {
  ir_region_op_t h = {.op_index = -1,
                      .num_regions = num_regions,
                      .next_region = 1,
                      .depth = func->num_open,
                      .num_values = num_values};
  if (ok) {
    h.op_index = ir_add_op(func, op, operands, num_operands, IR_NONE, 0, NULL);
    ++func->num_unended;
  }
  ir_open_region(func, op, h.op_index, arg_types, ok ? num_args : 0, return_types, num_returns, out_args);
  if (!ok)
    for (int32_t i = 0; i < num_args; ++i) out_args[i] = IR_NONE;
  return h;
}

/* False (error recorded) unless |h| is between its regions: the previous
** one closed, and |want_more| regions still to open (or none left when
** ending). */
static bool region_op_ready(ir_func_t* func, const ir_region_op_t* h, const char* call, bool want_more) {
  if (h->op_index < 0) return false;
  const char* name = h->op_index < func->num_ops ? ir_op_name(func->ops[h->op_index].op) : "?";
  if (func->num_open != h->depth) {
    ir_failf(func, "%s: %s: the previous region is still open (%d region(s) deeper than the op)", call, name,
             (int)(func->num_open - h->depth));
    return false;
  }
  if (want_more && h->next_region >= h->num_regions) {
    ir_failf(func, "%s: %s has only %d region(s)", call, name, (int)h->num_regions);
    return false;
  }
  if (!want_more && h->next_region != h->num_regions) {
    ir_failf(func, "%s: %s ended after %d of its %d regions", call, name, (int)h->next_region,
             (int)h->num_regions);
    return false;
  }
  return true;
}

/* Opens region h->next_region with the args of the op's first region
** (while: the carried values; if and case: none). It returns what the
** first region returns (if and case: the results) or, with
** |returns_args|, its own args' types (a while body). After a failed begin
** the region is detached and the h->num_values args are IR_NONE. */
static void next_region(ir_func_t* func, ir_region_op_t* h, const char* call, bool returns_args,
                        ir_value_t* out_args) {
  if (!func || !h) return;
  bool ok = region_op_ready(func, h, call, true);
  ++h->next_region;
  if (!ok) {
    for (int32_t i = 0; out_args && i < h->num_values; ++i) out_args[i] = IR_NONE;
    ir_open_region(func, IR_OP_NONE, -1, NULL, 0, NULL, 0, NULL); /* no op owns it */
    return;
  }
  const ir_region_t* first = func->ops[h->op_index].regions[0];
  ir_type_t args[TPURT_MAX_RESULTS];
  for (int32_t i = 0; i < first->num_args; ++i) args[i] = func->values[first->args[i]].type;
  if (returns_args)
    ir_open_region(func, first->owner, h->op_index, args, first->num_args, args, first->num_args, out_args);
  else
    ir_open_region(func, first->owner, h->op_index, args, first->num_args, first->return_types,
                   first->num_returns, out_args);
}

/* Makes the op's results (typed as its last region's returns) and ends it. */
static void end_region_op(ir_func_t* func, ir_region_op_t* h, const char* call, ir_value_t* out_results) {
  if (!func || !h) return;
  for (int32_t i = 0; i < h->num_values; ++i) out_results[i] = IR_NONE;
  if (h->op_index < 0) return;
  --func->num_unended;
  bool ok = region_op_ready(func, h, call, false);
  ir_inst_t* op = &func->ops[h->op_index];
  h->op_index = -1;
  if (!ok) return;
  const ir_region_t* last = op->regions[op->num_regions - 1];
  if (last->num_returns > 0) {
    op->first_result = ir_new_values(func, last->return_types, last->num_returns);
    op->num_results = last->num_returns;
  }
  for (int32_t i = 0; i < op->num_results; ++i) out_results[i] = op->first_result + i;
}

ir_region_op_t ir_while_begin(ir_func_t* func, const ir_value_t* init, int32_t num_values,
                              ir_value_t* out_cond_args) {
  const ir_op_t op = IR_OP_WHILE;
  ir_region_op_t failed = {.op_index = -1};
  if (!func) return failed;
  bool ok = true;
  ir_type_t types[TPURT_MAX_RESULTS];
  if (num_values < 1 || num_values > TPURT_MAX_RESULTS) {
    ir_failf(func, "%s: %d loop-carried values is outside [1, %d]", ir_op_name(op), (int)num_values,
             TPURT_MAX_RESULTS);
    ok = false;
    num_values = 0;
  }
  for (int32_t i = 0; ok && i < num_values; ++i) {
    const ir_type_t* t = ir_operand_type(func, op, init[i]);
    if (t)
      types[i] = *t;
    else
      ok = false;
  }
  ir_type_t pred = ir_type_scalar(TPURT_DTYPE_BOOL);
  return begin_region_op(func, op, ok, init, num_values, 2, num_values, types, num_values, &pred, 1,
                         out_cond_args);
}

void ir_while_body(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_body_args) {
  next_region(func, op, "ir_while_body", true, out_body_args);
}

void ir_while_end(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_results) {
  end_region_op(func, op, "ir_while_end", out_results);
}

/* if and case: a rank-0 selector of |dtype| and |num_results| valid types. */
static ir_region_op_t begin_branches(ir_func_t* func, ir_op_t op, ir_value_t selector, tpurt_dtype_t dtype,
                                     int32_t num_branches, const ir_type_t* result_types,
                                     int32_t num_results) {
  bool ok = true;
  const ir_type_t* t = ir_operand_type(func, op, selector);
  if (!t) {
    ok = false;
  } else if (t->rank != 0 || t->dtype != dtype) {
    ir_failf(func, "%s: the selector must be tensor<%s>, got %s", ir_op_name(op), ir_dtype_mlir_name(dtype),
             ir_type_str(t));
    ok = false;
  }
  if (num_results < 0 || num_results > TPURT_MAX_RESULTS) {
    ir_failf(func, "%s: %d results is outside [0, %d]", ir_op_name(op), (int)num_results, TPURT_MAX_RESULTS);
    ok = false;
    num_results = 0;
  }
  for (int32_t i = 0; ok && i < num_results; ++i)
    if (!ir_check_type(func, op, &result_types[i])) ok = false;
  return begin_region_op(func, op, ok, &selector, 1, num_branches, num_results, NULL, 0, result_types,
                         num_results, NULL);
}

ir_region_op_t ir_if_begin(ir_func_t* func, ir_value_t pred, const ir_type_t* result_types,
                           int32_t num_results) {
  ir_region_op_t failed = {.op_index = -1};
  if (!func) return failed;
  return begin_branches(func, IR_OP_IF, pred, TPURT_DTYPE_BOOL, 2, result_types, num_results);
}

void ir_if_else(ir_func_t* func, ir_region_op_t* op) { next_region(func, op, "ir_if_else", false, NULL); }

void ir_if_end(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_results) {
  end_region_op(func, op, "ir_if_end", out_results);
}

ir_region_op_t ir_case_begin(ir_func_t* func, ir_value_t index, int32_t num_branches,
                             const ir_type_t* result_types, int32_t num_results) {
  ir_region_op_t failed = {.op_index = -1};
  if (!func) return failed;
  if (num_branches < 1) {
    ir_failf(func, "%s: %d branches (at least 1)", ir_op_name(IR_OP_CASE), (int)num_branches);
    num_branches = 1;
    index = IR_NONE;
  }
  return begin_branches(func, IR_OP_CASE, index, TPURT_DTYPE_I32, num_branches, result_types, num_results);
}

void ir_case_next(ir_func_t* func, ir_region_op_t* op) { next_region(func, op, "ir_case_next", false, NULL); }

void ir_case_end(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_results) {
  end_region_op(func, op, "ir_case_end", out_results);
}
