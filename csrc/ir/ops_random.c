/* ops_random.c: stablehlo.rng_bit_generator. */
#include "ir_internal.h"

/*===------------------------------------------------------------------===*/
/* rng_bit_generator                                                      */
/*===------------------------------------------------------------------===*/

void ir_rng_bit_generator(ir_func_t* func, ir_value_t state, ir_type_t bits_type, ir_value_t* out_state,
                          ir_value_t* out_bits) {
  const ir_op_t op = IR_OP_RNG_BIT_GENERATOR;
  *out_state = *out_bits = IR_NONE;
  if (!func) return;
  const ir_type_t* ts = ir_operand_type(func, op, state);
  if (!ts) return;
  if (ts->dtype != TPURT_DTYPE_U64 || ts->rank != 1 || ts->dims[0] != 2) {
    ir_failf(func, "%s: THREE_FRY state must be tensor<2xui64>, got %s", ir_op_name(op), ir_type_str(ts));
    return;
  }
  if (!ir_check_type(func, op, &bits_type)) return;
  if (!tpurt_dtype_is_integral(bits_type.dtype)) {
    ir_failf(func, "%s: bits must be an integer type, got %s", ir_op_name(op), ir_type_str(&bits_type));
    return;
  }
  ir_type_t types[2] = {*ts, bits_type};
  ir_value_t first = ir_new_values(func, types, 2);
  ir_add_op(func, op, &state, 1, first, 2, "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>");
  *out_state = first;
  *out_bits = first + 1;
}
