/* ir.h: the StableHLO room: an SSA builder with shape inference, and a
** deterministic MLIR text printer.
**
** A function (ir_func_t) owns everything built into it (types, values, ops,
** regions) in one arena, freed with the function. Values are small integers.
**
** Errors are sticky: a builder call that gets inconsistent operands records
** the first error in the function and returns IR_NONE; later calls that see
** IR_NONE return IR_NONE too. Check ir_func_status() once at the end.
** (Lowering rules validate user input themselves and give PyTorch's own
** messages; a sticky error here is an internal bug in a rule.)
**
** Where things are: ir.c is the builder core (types, functions, values,
** regions, constants); ops_<family>.c hold the op constructors; printer.c
** the text printer; ir_internal.h what those files share.
*/
#ifndef TPURT_IR_IR_H_
#define TPURT_IR_IR_H_

#include "../include/tpurt.h"

typedef int32_t ir_value_t;
#define IR_NONE ((ir_value_t) - 1)

/* A ranked tensor type: tensor<2x3xbf16>. Rank 0 is a scalar tensor. */
typedef struct ir_type_s {
  tpurt_dtype_t dtype;
  int32_t rank;
  int64_t dims[TPURT_MAX_RANK];
} ir_type_t;

ir_type_t ir_type_make(tpurt_dtype_t dtype, int32_t rank, const int64_t* dims);
ir_type_t ir_type_scalar(tpurt_dtype_t dtype);
int64_t ir_type_numel(const ir_type_t* type);
bool ir_type_equal(const ir_type_t* a, const ir_type_t* b);
/* MLIR element type name: "f32", "bf16", "i1", "ui8", "i64"... */
const char* ir_dtype_mlir_name(tpurt_dtype_t dtype);

typedef struct ir_func_s ir_func_t;

/*===------------------------------------------------------------------===*/
/* Ops by name: ir_ops.def lists them, with arity and class               */
/*===------------------------------------------------------------------===*/

/* What ir_unary / ir_binary accept (see ir_ops.def). */
typedef enum ir_op_class_e { IR_OP_CLASS_UNARY, IR_OP_CLASS_BINARY, IR_OP_CLASS_OTHER } ir_op_class_t;

/* One per op of ir_ops.def: IR_OP_ADD, IR_OP_ERF... Rules name ops by this
** enum, never by string: a misspelt op fails to compile instead of failing
** in XLA's parser. */
typedef enum ir_op_e {
  IR_OP_NONE = 0, /* no op: a row or a result that names none */
#define IR_OP(id, name, arity, klass) IR_OP_##id,
#include "ir_ops.def"
#undef IR_OP
  IR_OP_COUNT
} ir_op_t;

/* The op's name as ir_ops.def spells it (stablehlo.add); "?" for IR_OP_NONE
** and values outside the list. */
const char* ir_op_name(ir_op_t op);
/* Operand count; -1 when it varies (and for IR_OP_NONE). */
int32_t ir_op_arity(ir_op_t op);
/* IR_OP_CLASS_OTHER for IR_OP_NONE. */
ir_op_class_t ir_op_class(ir_op_t op);

/*===------------------------------------------------------------------===*/
/* Functions                                                              */
/*===------------------------------------------------------------------===*/

ir_func_t* ir_func_create(void);
void ir_func_free(ir_func_t* func);
/* Adds a parameter of @main; parameters print in the order added. */
ir_value_t ir_param(ir_func_t* func, ir_type_t type);
/* Sets the values @main returns (copied). */
void ir_func_set_results(ir_func_t* func, const ir_value_t* values, int32_t count);
int32_t ir_func_num_params(const ir_func_t* func);
int32_t ir_func_num_ops(const ir_func_t* func);
/* The type of |value| (borrowed, lives with the function). */
const ir_type_t* ir_value_type(const ir_func_t* func, ir_value_t value);
/* First sticky error, or NULL. Borrowed: lives with the function. */
tpurt_borrowed_status_t ir_func_status(const ir_func_t* func);
/* Records |status| (consumed) unless an error is already recorded. */
void ir_func_fail_consume(ir_func_t* func, tpurt_status_t status);

/* Prints the whole module (module { func.func public @main ... }) as MLIR
** text. The same function always prints to the same bytes. The caller
** frees *out_text with free(). */
TPURT_MUST_USE tpurt_status_t ir_func_print(const ir_func_t* func, char** out_text, size_t* out_size);
/* The function's exact binary form, for keys of the memory tier: two
** functions encode to the same bytes iff they print the same text, and
** encoding costs a fraction of printing (no number formatting). Fails as
** ir_func_print does. The bytes (malloc'd, the caller frees them) hold
** native-endian integers and are not meant to outlive the process. */
TPURT_MUST_USE tpurt_status_t ir_func_encode(const ir_func_t* func, char** out_bytes, size_t* out_size);

/*===------------------------------------------------------------------===*/
/* Ops. Each infers its result type from its operands and attributes.     */
/*===------------------------------------------------------------------===*/

/* Constants. Rank-0 tensors of |dtype|; broadcast them for shapes. */
ir_value_t ir_constant_f64(ir_func_t* func, tpurt_dtype_t dtype, double value);
ir_value_t ir_constant_i64(ir_func_t* func, tpurt_dtype_t dtype, int64_t value);
/* A dense constant of type |type| holding numel int64 values (ints only). */
ir_value_t ir_constant_i64_array(ir_func_t* func, ir_type_t type, const int64_t* values);
ir_value_t ir_iota(ir_func_t* func, ir_type_t type, int32_t dimension);

/* A rank-0 constant of |dtype| broadcast to |rank|/|dims| (ints truncate
** |value|). */
ir_value_t ir_splat(ir_func_t* func, tpurt_dtype_t dtype, int32_t rank, const int64_t* dims, double value);
/* ir_splat of |like|'s type: the "k" of a formula (x * 0.5, 1 - p). */
ir_value_t ir_const_like(ir_func_t* func, ir_value_t like, double value);

/* Elementwise ops on same-typed operands; the result has the operands'
** type. |op| must be of class IR_OP_CLASS_UNARY (ir_unary) or
** IR_OP_CLASS_BINARY (ir_binary); another op is a sticky error. */
ir_value_t ir_unary(ir_func_t* func, ir_op_t op, ir_value_t x);
ir_value_t ir_binary(ir_func_t* func, ir_op_t op, ir_value_t a, ir_value_t b);

/* The ops that formulas spell most often, by name: ir_add(f, a, b) is
** ir_binary(f, IR_OP_ADD, a, b), ir_neg(f, x) is ir_unary(f, IR_OP_NEGATE, x). */
/* clang-format off */
#define IR_NAMED_BINARY_OPS(X) \
  X(add, ADD) X(sub, SUBTRACT) X(mul, MULTIPLY) X(div, DIVIDE) X(max, MAXIMUM) X(min, MINIMUM) \
  X(pow, POWER) X(and, AND) X(or, OR)
#define IR_NAMED_UNARY_OPS(X) \
  X(neg, NEGATE) X(not, NOT) X(abs, ABS) X(exp, EXPONENTIAL) X(log, LOG) X(sqrt, SQRT) X(rsqrt, RSQRT)
/* clang-format on */
#define IR_NAMED_BINARY_(name, op)                                               \
  static inline ir_value_t ir_##name(ir_func_t* f, ir_value_t a, ir_value_t b) { \
    return ir_binary(f, IR_OP_##op, a, b);                                       \
  }
#define IR_NAMED_UNARY_(name, op) \
  static inline ir_value_t ir_##name(ir_func_t* f, ir_value_t x) { return ir_unary(f, IR_OP_##op, x); }
IR_NAMED_BINARY_OPS(IR_NAMED_BINARY_)
IR_NAMED_UNARY_OPS(IR_NAMED_UNARY_)
#undef IR_NAMED_BINARY_
#undef IR_NAMED_UNARY_

/* The op named |name| in ir_ops.def, or IR_OP_NONE. */
ir_op_t ir_op_from_name(const char* name);
/* stablehlo.is_finite: result is bool (i1) of the same shape. */
ir_value_t ir_is_finite(ir_func_t* func, ir_value_t x);

typedef enum ir_compare_dir_e { IR_EQ, IR_NE, IR_LT, IR_LE, IR_GT, IR_GE } ir_compare_dir_t;
/* Bool result; compare_type (FLOAT/SIGNED/UNSIGNED) follows the dtype. */
ir_value_t ir_compare(ir_func_t* func, ir_compare_dir_t dir, ir_value_t a, ir_value_t b);
ir_value_t ir_select(ir_func_t* func, ir_value_t pred, ir_value_t on_true, ir_value_t on_false);
/* |min| and |max| are rank-0 or the same shape as |x|. */
ir_value_t ir_clamp(ir_func_t* func, ir_value_t min, ir_value_t x, ir_value_t max);
ir_value_t ir_convert(ir_func_t* func, ir_value_t x, tpurt_dtype_t dtype);
/* Reinterprets bits; element sizes may differ (then the last dim grows or
** shrinks as StableHLO defines). */
ir_value_t ir_bitcast_convert(ir_func_t* func, ir_value_t x, ir_type_t type);

/* Complex numbers. |op| is IR_OP_REAL, IR_OP_IMAG or IR_OP_ABS: a value of
** the complex operand's real type. stablehlo.complex joins two f32 (or f64)
** values of one type into complex<f32> (complex<f64>). */
ir_value_t ir_complex_part(ir_func_t* func, ir_op_t op, ir_value_t x);
ir_value_t ir_complex(ir_func_t* func, ir_value_t re, ir_value_t im);

/* stablehlo.fft over the last |num_lengths| (1 to 3) dims, whose sizes are
** |lengths|. FFT and IFFT map complex to complex; RFFT maps f32/f64 to the
** complex half spectrum (last dim n/2+1); IRFFT maps that half spectrum back
** to n reals. IFFT and IRFFT divide by the product of the lengths. */
typedef enum ir_fft_type_e { IR_FFT_FFT, IR_FFT_IFFT, IR_FFT_RFFT, IR_FFT_IRFFT } ir_fft_type_t;
ir_value_t ir_fft(ir_func_t* func, ir_value_t x, ir_fft_type_t fft_type, const int64_t* lengths,
                  int32_t num_lengths);

/* Shape ops. */
ir_value_t ir_broadcast_in_dim(ir_func_t* func, ir_value_t x, int32_t rank, const int64_t* dims,
                               const int64_t* broadcast_dimensions);
ir_value_t ir_reshape(ir_func_t* func, ir_value_t x, int32_t rank, const int64_t* dims);
ir_value_t ir_transpose(ir_func_t* func, ir_value_t x, const int64_t* permutation);
ir_value_t ir_slice(ir_func_t* func, ir_value_t x, const int64_t* start, const int64_t* limit,
                    const int64_t* strides);
/* |starts| are rank-0 integer values, one per dim. */
ir_value_t ir_dynamic_slice(ir_func_t* func, ir_value_t x, const ir_value_t* starts, const int64_t* sizes);
ir_value_t ir_dynamic_update_slice(ir_func_t* func, ir_value_t x, ir_value_t update,
                                   const ir_value_t* starts);
ir_value_t ir_concatenate(ir_func_t* func, const ir_value_t* xs, int32_t count, int64_t dimension);
ir_value_t ir_pad(ir_func_t* func, ir_value_t x, ir_value_t pad_value, const int64_t* low,
                  const int64_t* high, const int64_t* interior);
ir_value_t ir_reverse(ir_func_t* func, ir_value_t x, const int64_t* dims, int32_t num_dims);

/* The precision that f32/f64 dot_general and convolution ops built from now
** on ask for: PyTorch's float32 matmul precision, which the engine sets
** before each op. Half types never carry one (their precision is the
** type's). IR_PRECISION_UNSET (a new function's) prints no attribute. */
typedef enum ir_precision_e {
  IR_PRECISION_UNSET = 0,
  IR_PRECISION_DEFAULT, /* "medium": the platform's fastest (one bf16 pass on a TPU) */
  IR_PRECISION_HIGH,    /* "high": TF32 on a GPU, 3 bf16 passes on a TPU */
  IR_PRECISION_HIGHEST, /* "highest": full f32, as PyTorch's default */
} ir_precision_t;
void ir_func_set_precision(ir_func_t* func, ir_precision_t precision);

/* dot_general with batching and contracting dims; result dims are batch,
** then lhs free, then rhs free. |result_dtype| may differ (f32 accumulate). */
typedef struct ir_dot_dims_s {
  int32_t num_batch;
  int64_t lhs_batch[TPURT_MAX_RANK], rhs_batch[TPURT_MAX_RANK];
  int32_t num_contract;
  int64_t lhs_contract[TPURT_MAX_RANK], rhs_contract[TPURT_MAX_RANK];
} ir_dot_dims_t;
ir_value_t ir_dot_general(ir_func_t* func, ir_value_t lhs, ir_value_t rhs, const ir_dot_dims_t* dims,
                          tpurt_dtype_t result_dtype);

/* Gather and scatter with explicit dimension numbers (StableHLO meaning).
** Gather infers its result type; batching dims are not used. */
typedef struct ir_gather_dims_s {
  int32_t num_offset_dims;
  int64_t offset_dims[TPURT_MAX_RANK];
  int32_t num_collapsed;
  int64_t collapsed_slice_dims[TPURT_MAX_RANK];
  int32_t num_start_index_map;
  int64_t start_index_map[TPURT_MAX_RANK];
  int64_t index_vector_dim;
  int64_t slice_sizes[TPURT_MAX_RANK]; /* one per operand dim */
  bool indices_are_sorted;
} ir_gather_dims_t;
ir_value_t ir_gather(ir_func_t* func, ir_value_t operand, ir_value_t indices, const ir_gather_dims_t* dims);

typedef struct ir_scatter_dims_s {
  int32_t num_update_window_dims;
  int64_t update_window_dims[TPURT_MAX_RANK];
  int32_t num_inserted;
  int64_t inserted_window_dims[TPURT_MAX_RANK];
  int32_t num_scatter_dims_to_operand;
  int64_t scatter_dims_to_operand_dims[TPURT_MAX_RANK];
  int64_t index_vector_dim;
  bool indices_are_sorted;
  bool unique_indices;
} ir_scatter_dims_t;

/* Regions. ir_*_begin creates the op and opens its (first) region; until the
** matching ir_region_end, built ops go into that region's block. Region
** block arguments are rank-0 tensors of the element types given. */
typedef enum ir_reducer_e {
  IR_REDUCE_ADD,
  IR_REDUCE_MUL,
  IR_REDUCE_MAX,
  IR_REDUCE_MIN,
  IR_REDUCE_AND,
  IR_REDUCE_OR,
  IR_REDUCE_XOR /* integers and bool only */
} ir_reducer_t;

/* Reduce |x| over |dims| with a one-op body (the common case). */
ir_value_t ir_reduce(ir_func_t* func, ir_value_t x, ir_value_t init, const int64_t* dims, int32_t num_dims,
                     ir_reducer_t reducer);

/* Multi-operand reduce with a custom body. Writes the op's results to
** |out_results| (count = num_inputs) and the region's block arguments to
** |out_block_args| (2 * num_inputs: accumulators first, then elements). */
void ir_reduce_begin(ir_func_t* func, const ir_value_t* inputs, const ir_value_t* inits, int32_t num_inputs,
                     const int64_t* dims, int32_t num_dims, ir_value_t* out_results,
                     ir_value_t* out_block_args);
/* Scatter of one operand; the region gets 2 block args (current, update). */
ir_value_t ir_scatter_begin(ir_func_t* func, ir_value_t operand, ir_value_t indices, ir_value_t updates,
                            const ir_scatter_dims_t* dims, ir_value_t* out_block_args);
/* Ends the innermost open region with stablehlo.return |values|. */
void ir_region_end(ir_func_t* func, const ir_value_t* values, int32_t count);

/* stablehlo.rng_bit_generator THREE_FRY: |state| is tensor<2xui64>.
** Writes the new state and |bits_type| random bits. */
void ir_rng_bit_generator(ir_func_t* func, ir_value_t state, ir_type_t bits_type, ir_value_t* out_state,
                          ir_value_t* out_bits);

/*===------------------------------------------------------------------===*/
/* Sort (ops_reduce.c)                                                    */
/*===------------------------------------------------------------------===*/

/* stablehlo.sort of |num_inputs| same-shaped operands along |dimension|,
** all permuted together by one comparator. Writes the sorted operands to
** |out_results| (count = num_inputs) and opens the comparator region,
** whose block arguments go to |out_block_args| (2 * num_inputs: lhs then
** rhs of input 0, lhs then rhs of input 1, ...). The body must return one
** tensor<i1>: true when lhs goes before rhs. Close it with ir_region_end. */
void ir_sort_begin(ir_func_t* func, const ir_value_t* inputs, int32_t num_inputs, int64_t dimension,
                   bool is_stable, ir_value_t* out_results, ir_value_t* out_block_args);

/*===------------------------------------------------------------------===*/
/* Convolution (ops_linalg.c)                                             */
/*===------------------------------------------------------------------===*/

/* stablehlo.convolution. Dimension numbers name, for each operand and the
** result, which dim is batch/feature and which dims are spatial (in the
** order of the window attributes). Window attributes have one entry per
** spatial dim; padding may be negative. |result_dtype| may be wider than
** the operands' (f32 accumulation of half types). */
typedef struct ir_conv_dims_s {
  int32_t num_spatial;
  int64_t input_batch, input_feature, input_spatial[TPURT_MAX_RANK];
  int64_t kernel_input_feature, kernel_output_feature, kernel_spatial[TPURT_MAX_RANK];
  int64_t output_batch, output_feature, output_spatial[TPURT_MAX_RANK];
  int64_t window_strides[TPURT_MAX_RANK];
  int64_t padding_low[TPURT_MAX_RANK], padding_high[TPURT_MAX_RANK];
  int64_t lhs_dilation[TPURT_MAX_RANK], rhs_dilation[TPURT_MAX_RANK];
  int64_t feature_group_count, batch_group_count;
} ir_conv_dims_t;
ir_value_t ir_convolution(ir_func_t* func, ir_value_t lhs, ir_value_t rhs, const ir_conv_dims_t* dims,
                          tpurt_dtype_t result_dtype);

/*===------------------------------------------------------------------===*/
/* Custom call (ops_control.c; used for cuDNN fused attention)            */
/*===------------------------------------------------------------------===*/

/* stablehlo.custom_call of |call_target_name| (e.g. "__cudnn$fmhaSoftmax"):
** an opaque kernel of the backend, with no side effect. Its result types
** are given, not inferred (only the target knows them). Every operand and
** result gets the row-major layout (operand_layouts/result_layouts): the
** kernels read raw buffers and must not see XLA's choice of layout.
** |backend_config| is the target's config string (printed escaped; NULL:
** empty); |api_version| is XLA's CustomCallApiVersion (2: status returning,
** what the GPU targets use). Writes the |num_results| values to
** |out_results| (IR_NONE each on error). */
#define IR_MAX_CUSTOM_CALL_OPERANDS 16
void ir_custom_call(ir_func_t* func, const char* call_target_name, const ir_value_t* operands,
                    int32_t num_operands, const ir_type_t* result_types, int32_t num_results,
                    const char* backend_config, int32_t api_version, ir_value_t* out_results);

/*===------------------------------------------------------------------===*/
/* Reduce window (ops_reduce.c)                                           */
/*===------------------------------------------------------------------===*/

/* stablehlo.reduce_window: one window per output element. All arrays have
** one entry per operand dim; padding is (low, high) pairs. Base dilation is
** always 1 (no rule needs it). */
typedef struct ir_window_s {
  int64_t dimensions[TPURT_MAX_RANK];
  int64_t strides[TPURT_MAX_RANK];
  int64_t dilations[TPURT_MAX_RANK];
  int64_t padding_low[TPURT_MAX_RANK], padding_high[TPURT_MAX_RANK];
} ir_window_t;

/* Multi-operand reduce_window with a custom body, like ir_reduce_begin:
** results to |out_results| (num_inputs), block args to |out_block_args|
** (accumulators first, then elements). */
void ir_reduce_window_begin(ir_func_t* func, const ir_value_t* inputs, const ir_value_t* inits,
                            int32_t num_inputs, const ir_window_t* window, ir_value_t* out_results,
                            ir_value_t* out_block_args);
/* reduce_window of |x| with a one-op body. */
ir_value_t ir_reduce_window(ir_func_t* func, ir_value_t x, ir_value_t init, const ir_window_t* window,
                            ir_reducer_t reducer);

/*===------------------------------------------------------------------===*/
/* Control flow: while, if, case (ops_control.c)                          */
/*===------------------------------------------------------------------===*/

/* An op with several regions, being built. Returned by ir_while_begin,
** ir_if_begin and ir_case_begin; pass it (unchanged) to the calls that open
** its next region and to the one that ends it. Fields are the builder's. */
typedef struct ir_region_op_s {
  int32_t op_index;    /* -1 after a failed begin (everything after goes into the void) */
  int32_t num_regions; /* how many regions the op has */
  int32_t next_region; /* how many are opened so far */
  int32_t depth;       /* open regions around the op, to check the nesting */
  int32_t num_values;  /* while: loop-carried values; if/case: results */
} ir_region_op_t;

/* stablehlo.while over |num_values| (1..TPURT_MAX_RESULTS) loop-carried
** values, starting from |init|. The sequence, each region closed with
** ir_region_end:
**
**   ir_region_op_t w = ir_while_begin(f, init, n, cond_args);   // opens cond
**   ... pred = a tensor<i1> computed from cond_args ...
**   ir_region_end(f, &pred, 1);
**   ir_while_body(f, &w, body_args);                           // opens body
**   ... next[i] computed from body_args, same types as init[i] ...
**   ir_region_end(f, next, n);
**   ir_while_end(f, &w, results);                               // n results
**
** Both regions get the carried values as block arguments (|out_cond_args|,
** |out_body_args|: num_values each, the types of |init|). Regions may use
** values of the blocks around them (implicit capture), and may hold any op,
** regions included (a reduce or another while inside a body). The results
** exist only after ir_while_end, so a body cannot use its own op's results.
** The loop counter is an ordinary carried value (e.g. tensor<i32>); it can
** index dynamic_slice / dynamic_update_slice inside the body. */
ir_region_op_t ir_while_begin(ir_func_t* func, const ir_value_t* init, int32_t num_values,
                              ir_value_t* out_cond_args);
void ir_while_body(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_body_args);
void ir_while_end(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_results);

/* stablehlo.if on a tensor<i1> |pred|, with |num_results| (0..
** TPURT_MAX_RESULTS) results of |result_types|. ir_if_begin opens the true
** branch, ir_if_else the false one; each branch has no block arguments,
** uses the values around it, and ends with ir_region_end of values of
** exactly |result_types|. ir_if_end writes the results. */
ir_region_op_t ir_if_begin(ir_func_t* func, ir_value_t pred, const ir_type_t* result_types,
                           int32_t num_results);
void ir_if_else(ir_func_t* func, ir_region_op_t* op);
void ir_if_end(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_results);

/* stablehlo.case on a tensor<i32> |index| with |num_branches| (>= 1)
** branches, built like if: ir_case_begin opens branch 0, ir_case_next opens
** the next one; an index out of range runs the last branch. */
ir_region_op_t ir_case_begin(ir_func_t* func, ir_value_t index, int32_t num_branches,
                             const ir_type_t* result_types, int32_t num_results);
void ir_case_next(ir_func_t* func, ir_region_op_t* op);
void ir_case_end(ir_func_t* func, ir_region_op_t* op, ir_value_t* out_results);

#endif /* TPURT_IR_IR_H_ */
