/* printer.c: the MLIR text printer (generic op syntax throughout), and the
** function's exact binary form (ir_func_encode). The same function always
** prints to the same bytes. The encoder sits beside the printer because
** the two must cover the same fields: whatever the printer prints, the
** encoder writes. */
#include "ir_internal.h"

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
    ir_print_type(buf, &func->values[values[i]].type);
  }
  tpurt_strbuf_puts(buf, ")");
}

static void print_block(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_region_t* block, int indent);

static void print_op(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_inst_t* op, int indent) {
  print_indent(buf, indent);
  if (op->num_results == 1)
    tpurt_strbuf_printf(buf, "%%v%d = ", (int)op->first_result);
  else if (op->num_results > 1)
    tpurt_strbuf_printf(buf, "%%v%d:%d = ", (int)op->first_result, (int)op->num_results);
  tpurt_strbuf_printf(buf, "\"%s\"(", ir_op_name(op->op));
  for (int32_t i = 0; i < op->num_operands; ++i) {
    if (i) tpurt_strbuf_puts(buf, ", ");
    print_value(buf, func, op->operands[i]);
  }
  tpurt_strbuf_puts(buf, ")");
  /* regions: ({...}, {...}); a block without arguments needs no label */
  for (int32_t r = 0; r < op->num_regions; ++r) {
    const ir_region_t* region = op->regions[r];
    tpurt_strbuf_puts(buf, r ? ", {\n" : " ({\n");
    if (region->num_args > 0) {
      print_indent(buf, indent);
      tpurt_strbuf_puts(buf, "^bb0(");
      for (int32_t i = 0; i < region->num_args; ++i) {
        if (i) tpurt_strbuf_puts(buf, ", ");
        print_value(buf, func, region->args[i]);
        tpurt_strbuf_puts(buf, ": ");
        ir_print_type(buf, &func->values[region->args[i]].type);
      }
      tpurt_strbuf_puts(buf, "):\n");
    }
    print_block(buf, func, region, indent + 2);
    print_indent(buf, indent);
    tpurt_strbuf_puts(buf, r + 1 < op->num_regions ? "}" : "})");
  }
  if (op->attrs) tpurt_strbuf_printf(buf, " {%s}", op->attrs);
  tpurt_strbuf_puts(buf, " : ");
  print_value_types(buf, func, op->operands, op->num_operands);
  tpurt_strbuf_puts(buf, " -> ");
  if (op->num_results == 1) {
    ir_print_type(buf, &func->values[op->first_result].type);
  } else {
    tpurt_strbuf_puts(buf, "(");
    for (int32_t i = 0; i < op->num_results; ++i) {
      if (i) tpurt_strbuf_puts(buf, ", ");
      ir_print_type(buf, &func->values[op->first_result + i].type);
    }
    tpurt_strbuf_puts(buf, ")");
  }
  tpurt_strbuf_puts(buf, "\n");
}

static void print_block(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_region_t* block, int indent) {
  for (int32_t i = 0; i < block->num_ops; ++i) print_op(buf, func, &func->ops[block->ops[i]], indent);
}

TPURT_MUST_USE tpurt_status_t ir_func_print(const ir_func_t* func, char** out_text, size_t* out_size) {
  *out_text = NULL;
  if (out_size) *out_size = 0;
  if (func->status)
    return tpurt_status_create(tpurt_status_code(func->status), "%s", tpurt_status_message(func->status));
  if (func->num_open != 1)
    return tpurt_status_create(TPURT_INTERNAL, "ir_func_print: %d region(s) still open (%s)",
                               (int)(func->num_open - 1), ir_op_name(func->open[func->num_open - 1]->owner));
  if (func->num_unended != 0)
    return tpurt_status_create(TPURT_INTERNAL, "ir_func_print: %d while/if/case op(s) begun and not ended",
                               (int)func->num_unended);
  tpurt_strbuf_t buf = {0};
  tpurt_strbuf_puts(
      &buf,
      "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  func.func public @main(");
  for (int32_t i = 0; i < func->num_params; ++i) {
    if (i) tpurt_strbuf_puts(&buf, ", ");
    print_value(&buf, func, func->params[i]);
    tpurt_strbuf_puts(&buf, ": ");
    ir_print_type(&buf, &func->values[func->params[i]].type);
  }
  tpurt_strbuf_puts(&buf, ") -> ");
  print_value_types(&buf, func, func->results, func->num_results);
  tpurt_strbuf_puts(&buf, " {\n");
  print_block(&buf, func, &func->body, 4);
  tpurt_strbuf_printf(&buf, "    \"%s\"(", ir_op_name(IR_OP_FUNC_RETURN));
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
/* Encoder                                                                */
/*===------------------------------------------------------------------===*/

/* Fixed-width fields in native byte order: the encoding lives only in this
** process (a key of the memory tier), never on disk. */
static void put_i64(tpurt_strbuf_t* buf, int64_t v) { tpurt_strbuf_append(buf, (const char*)&v, sizeof(v)); }

/* Two 32-bit fields in one (either may be -1: an op without results). */
static void put_pair(tpurt_strbuf_t* buf, int32_t hi, int32_t lo) {
  const uint64_t v = (uint64_t)(uint32_t)hi << 32 | (uint32_t)lo;
  tpurt_strbuf_append(buf, (const char*)&v, sizeof(v));
}

/* A string with its length first, so that no two sequences of strings
** encode alike; NULL (no attributes) is length -1. */
static void put_str(tpurt_strbuf_t* buf, const char* s) {
  if (!s) {
    put_i64(buf, -1);
    return;
  }
  size_t n = strlen(s);
  put_i64(buf, (int64_t)n);
  tpurt_strbuf_append(buf, s, n);
}

static void put_type(tpurt_strbuf_t* buf, const ir_type_t* type) {
  put_pair(buf, (int32_t)type->dtype, type->rank);
  tpurt_strbuf_append(buf, (const char*)type->dims, sizeof(int64_t) * (size_t)type->rank);
}

/* A value as the printer names it: %vN or %vBASE#INDEX. */
static void put_value(tpurt_strbuf_t* buf, const ir_func_t* func, ir_value_t v) {
  const ir_value_info_t* info = &func->values[v];
  if (info->count > 1)
    put_pair(buf, info->base, info->index);
  else
    put_pair(buf, -1, v);
}

static void encode_block(tpurt_strbuf_t* buf, const ir_func_t* func, const ir_region_t* block) {
  put_i64(buf, block->num_ops);
  for (int32_t i = 0; i < block->num_ops; ++i) {
    const ir_inst_t* op = &func->ops[block->ops[i]];
    put_pair(buf, op->first_result, op->num_results);
    put_i64(buf, (int64_t)op->op);
    /* Operands by name only: a value's type is fixed where it is defined
    ** (a parameter, a region argument or an op's result, all encoded with
    ** their types), so the operand types the printer repeats are already
    ** determined; leaving them out took a fifth off a step's encoding. */
    put_i64(buf, op->num_operands);
    for (int32_t k = 0; k < op->num_operands; ++k) put_value(buf, func, op->operands[k]);
    put_i64(buf, op->num_regions);
    for (int32_t r = 0; r < op->num_regions; ++r) {
      const ir_region_t* region = op->regions[r];
      put_i64(buf, region->num_args);
      for (int32_t k = 0; k < region->num_args; ++k) {
        put_value(buf, func, region->args[k]);
        put_type(buf, &func->values[region->args[k]].type);
      }
      encode_block(buf, func, region);
    }
    put_str(buf, op->attrs);
    for (int32_t k = 0; k < op->num_results; ++k) put_type(buf, &func->values[op->first_result + k].type);
  }
}

TPURT_MUST_USE tpurt_status_t ir_func_encode(const ir_func_t* func, char** out_bytes, size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  /* The printer's refusals, so that a function encodes iff it prints. */
  char* text = NULL;
  if (func->status || func->num_open != 1 || func->num_unended != 0) return ir_func_print(func, &text, NULL);
  /* Sized from the op count (an op with its attributes and result types
  ** takes about 120 bytes): a step of the tiny FLUX pipeline, 1,094 ops,
  ** encodes to 135 KB, and growing from empty copied it twice over. */
  tpurt_strbuf_t buf = {0};
  buf.capacity = 256 + 128 * (size_t)func->num_ops;
  buf.data = tpurt_xmalloc(buf.capacity);
  buf.data[0] = '\0';
  put_i64(&buf, func->num_params);
  for (int32_t i = 0; i < func->num_params; ++i) {
    put_value(&buf, func, func->params[i]);
    put_type(&buf, &func->values[func->params[i]].type);
  }
  put_i64(&buf, func->num_results);
  for (int32_t i = 0; i < func->num_results; ++i) {
    put_value(&buf, func, func->results[i]);
    put_type(&buf, &func->values[func->results[i]].type);
  }
  encode_block(&buf, func, &func->body);
  *out_bytes = buf.data;
  *out_size = buf.size;
  return NULL;
}
