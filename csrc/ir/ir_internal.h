/* ir_internal.h: what the ir/ files share and nothing outside ir/ may use:
** the function's storage (values, ops, regions) and the builder's helpers
** for operands, errors, new values and ops, and attribute text. The public
** API is ir.h.
*/
#ifndef TPURT_IR_IR_INTERNAL_H_
#define TPURT_IR_IR_INTERNAL_H_

#include <stdio.h>

#include "../base/base.h"
#include "ir.h"

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

/* An op as built (the enum ir_op_t says which op it is). */
typedef struct ir_inst_s {
  ir_op_t op;
  const ir_value_t* operands;
  int32_t num_operands;
  ir_value_t first_result;
  int32_t num_results;
  const char* attrs;     /* "dimensions = array<i64: 1>" or NULL */
  ir_region_t** regions; /* in order: reduce/scatter/sort 1, while 2 (cond, body), if 2, case n */
  int32_t num_regions;
} ir_inst_t;

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
  ir_type_t return_types[TPURT_MAX_RESULTS];
  ir_op_t owner; /* for messages */
};

#define IR_MAX_OPEN_REGIONS 32

struct ir_func_s {
  tpurt_arena_t arena;
  tpurt_status_t status;
  ir_value_info_t* values;
  int32_t num_values, cap_values;
  ir_inst_t* ops;
  int32_t num_ops, cap_ops;
  ir_value_t* params;
  int32_t num_params, cap_params;
  ir_value_t* results;
  int32_t num_results;
  ir_region_t body;
  ir_region_t* open[IR_MAX_OPEN_REGIONS]; /* open[0] is &body */
  int32_t num_open;
  ir_precision_t precision; /* for f32/f64 dots and convolutions built next */
  int32_t num_unended;      /* while/if/case ops begun and not ended: the printer refuses */
};

/*===------------------------------------------------------------------===*/
/* Types and errors (ir.c)                                                */
/*===------------------------------------------------------------------===*/

bool ir_dtype_valid(tpurt_dtype_t dtype);
/* tensor<2x3xbf16> */
void ir_print_type(tpurt_strbuf_t* buf, const ir_type_t* type);
/* A type for messages, in a small rotating set of thread-local buffers
** (errors only; at most four per message). */
const char* ir_type_str(const ir_type_t* type);
/* Records a formatted TPURT_INTERNAL error unless one is recorded. */
void ir_failf(ir_func_t* func, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/*===------------------------------------------------------------------===*/
/* Values and ops (ir.c)                                                  */
/*===------------------------------------------------------------------===*/

/* The type of an operand of |op|, or NULL: silently for IR_NONE (an earlier
** error), with a new error for an id that was never made or one defined in
** a region that is closed now (out of scope). */
const ir_type_t* ir_operand_type(ir_func_t* func, ir_op_t op, ir_value_t value);
/* Makes |count| new values with consecutive ids sharing one base name. */
ir_value_t ir_new_values(ir_func_t* func, const ir_type_t* types, int32_t count);
/* A valid result type (dtype, rank, sizes), or false (error recorded). */
bool ir_check_type(ir_func_t* func, ir_op_t op, const ir_type_t* type);
/* Appends an op to the innermost open block. |attrs| is copied. Returns
** the op's index. Result values must be made by the caller first. */
int32_t ir_add_op(ir_func_t* func, ir_op_t op, const ir_value_t* operands, int32_t num_operands,
                  ir_value_t first_result, int32_t num_results, const char* attrs);
/* The common case: one result of |type|. */
ir_value_t ir_emit(ir_func_t* func, ir_op_t op, const ir_value_t* operands, int32_t num_operands,
                   const ir_type_t* type, const char* attrs);
/* Same as ir_emit, with attributes built in a strbuf that this frees. */
ir_value_t ir_emit_buf(ir_func_t* func, ir_op_t op, const ir_value_t* operands, int32_t num_operands,
                       const ir_type_t* type, tpurt_strbuf_t* attrs);
/* Opens the next region of op |op_index| (a block with |num_args| args of
** |arg_types|, closed by a stablehlo.return of |return_types|), or a
** detached one when op_index < 0 (a failed begin: the caller still builds
** its body and ends it, all into the void). */
bool ir_open_region(ir_func_t* func, ir_op_t owner, int32_t op_index, const ir_type_t* arg_types,
                    int32_t num_args, const ir_type_t* return_types, int32_t num_returns,
                    ir_value_t* out_args);
/* ir_open_region for the scalar regions of reduce, scatter and sort: rank-0
** args of |arg_dtypes|, rank-0 returns of |return_dtypes|. */
bool ir_push_region(ir_func_t* func, ir_op_t owner, int32_t op_index, const tpurt_dtype_t* arg_dtypes,
                    int32_t num_args, const tpurt_dtype_t* return_dtypes, int32_t num_returns,
                    ir_value_t* out_args);

/*===------------------------------------------------------------------===*/
/* Attribute text (ir.c) and dimension lists (ops_shape.c)                */
/*===------------------------------------------------------------------===*/

/* array<i64: 1, 2> (array<i64> when empty) */
void ir_put_i64_array(tpurt_strbuf_t* buf, const int64_t* values, int32_t count);
/* [1, 2] ([] when empty) */
void ir_put_list(tpurt_strbuf_t* buf, const int64_t* values, int32_t count);
/* |sep||name| = array<i64: ...> */
void ir_put_named_array(tpurt_strbuf_t* buf, const char* sep, const char* name, const int64_t* values,
                        int32_t count);
/* |sep|padding = dense<[[low0, high0], ...]> : tensor<countx2xi64> (the
** window and convolution attribute; a splat 0 when |count| is 0). */
void ir_put_padding(tpurt_strbuf_t* buf, const char* sep, const int64_t* low, const int64_t* high,
                    int32_t count);
/* |dims| must be distinct and in [0, rank); false (error recorded) if not. */
bool ir_check_dims(ir_func_t* func, ir_op_t op, const char* what, const int64_t* dims, int32_t count,
                   int32_t rank);
/* |dims| must be strictly increasing; false (error recorded) if not. */
bool ir_check_sorted(ir_func_t* func, ir_op_t op, const char* what, const int64_t* dims, int32_t count);
bool ir_dims_contain(const int64_t* dims, int32_t count, int64_t d);

#endif /* TPURT_IR_IR_INTERNAL_H_ */
