/* ops_control.c: ops that call out or steer: custom_call. */
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
  const char* op = "stablehlo.custom_call";
  if (!func) return;
  for (int32_t i = 0; i < num_results; ++i) out_results[i] = IR_NONE;
  if (!call_target_name || !*call_target_name) {
    ir_failf(func, "%s: no call target name", op);
    return;
  }
  if (num_results < 1 || num_results > TPURT_MAX_RESULTS || num_operands < 0 ||
      num_operands > IR_MAX_CUSTOM_CALL_OPERANDS) {
    ir_failf(func, "%s %s: %d ir_operand_type(s) and %d result(s) are outside [0, %d] and [1, %d]", op,
             call_target_name, (int)num_operands, (int)num_results, IR_MAX_CUSTOM_CALL_OPERANDS,
             TPURT_MAX_RESULTS);
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
