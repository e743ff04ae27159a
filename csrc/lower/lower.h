/* lower.h: the lowering room: aten op -> StableHLO rules, one family per
** file, all reached through one table (lower_find).
**
** A rule is a C function over a lowering context. It reads its operands
** (already read through their views: a rule never sees strides), validates
** them with PyTorch's own error wording, emits ops into ctx->func and sets
** its results. The engine does everything around it: parameters, views,
** in-place and out= write-back, caching, execution. The same rule serves
** every execution mode.
*/
#ifndef TPURT_LOWER_LOWER_H_
#define TPURT_LOWER_LOWER_H_

#include "../ir/ir.h"

typedef struct lower_ctx_s lower_ctx_t;
typedef TPURT_MUST_USE tpurt_status_t (*lower_fn_t)(lower_ctx_t* ctx);
/* A formula a shared rule applies elementwise (erfc_of, hypot_of...). */
typedef ir_value_t (*lower_unary_formula_t)(lower_ctx_t* ctx, ir_value_t x);
typedef ir_value_t (*lower_binary_formula_t)(lower_ctx_t* ctx, ir_value_t a, ir_value_t b);

/* How a table row relates to the op's schema. */
typedef enum lower_variant_e {
  LOWER_FUNCTIONAL = 0, /* returns new tensors */
  LOWER_INPLACE,        /* result 0 is written into arg 0 (self) */
  LOWER_OUT,            /* results are written into the trailing out= args */
} lower_variant_t;

/* Facts of a row that the core checks before its rule runs (checks.c):
** argument values PyTorch's CPU kernels refuse, which a program would use
** anyway (a gather clamps an index, a scatter drops it, an integer division
** by zero gives -1 or the dividend). */

/* Where an index arg's values must lie. */
typedef enum lower_bound_e {
  LOWER_BOUND_NONE = 0,
  LOWER_BOUND_DIM,     /* [0, the size of .of's dim named by int arg .dim_arg) (1 for a 0-d .of) */
  LOWER_BOUND_NUMEL,   /* [0, .of's number of elements) */
  LOWER_BOUND_CLASSES, /* [0, .of's classes): its dim 1, or dim 0 when it is 1-d (a loss's target) */
  LOWER_BOUND_DIMS,    /* a Tensor?[] list: its k-th tensor indexes .of's dim k (None skips a dim) */
} lower_bound_t;

/* The error PyTorch's CPU kernel raises for a value out of bounds. */
typedef enum lower_index_error_e {
  LOWER_INDEX_ERROR_DIM = 0,     /* IndexError "index i is out of bounds for dimension d with size s" */
  LOWER_INDEX_ERROR_DIM_RUNTIME, /* the same words as a RuntimeError (gather, scatter) */
  LOWER_INDEX_ERROR_IN_SELF,     /* IndexError "index out of range in self (index i is out of ...)" */
  LOWER_INDEX_ERROR_ACCESS,      /* IndexError "out of range: tried to access index i on a tensor of n ..." */
  LOWER_INDEX_ERROR_TARGET,      /* IndexError "Target i is out of bounds." */
} lower_index_error_t;

/* An op's index arg and its bound: .index = {.arg = 2, .dim_arg = 1,
** .bound = LOWER_BOUND_DIM} is index_select(self, dim, index). */
typedef struct lower_index_fact_s {
  int8_t arg;        /* the index's schema position; 0: the op takes no index */
  int8_t of;         /* the tensor arg it indexes */
  int8_t dim_arg;    /* LOWER_BOUND_DIM: the int arg that names the dim */
  int8_t ignore_arg; /* an int arg whose value is never out of bounds (ignore_index); 0: none */
  lower_bound_t bound;
  bool wraps; /* negative values count from the end: [-size, size) */
  lower_index_error_t error;
} lower_index_fact_t;

/* An op that divides integers, where PyTorch raises on a zero divisor (the
** CPU traps). */
typedef enum lower_division_e {
  LOWER_DIVISION_NONE = 0,
  LOWER_DIVISION_INTEGER, /* arg 0 by arg 1, when both are integers (floor_divide, remainder, fmod) */
  LOWER_DIVISION_ROUNDED, /* the same when a rounding mode (arg 2) is given (div's rounding_mode) */
} lower_division_t;

/* The constants a row hands to a rule function that several rows share
** (which op, which formula, how many spatial dims...), by name:
**   LOWER_FN_WITH("aten::erfc", float_unary_row, .unary = erfc_of)
** The rule reads them with lower_rule_data(ctx)->field. They replace a
** one-line wrapper function per row. Zero (IR_OP_NONE, NULL, false) is
** "not given". */
typedef struct lower_rule_data_s {
  ir_op_t op;                    /* the StableHLO op a shared rule emits */
  lower_unary_formula_t unary;   /* the formula a shared unary rule applies */
  lower_binary_formula_t binary; /* ... a shared binary rule */
  int64_t kind;                  /* an enum of the rule's own (which polynomial, which reduction) */
  bool flag;                     /* the rule's one switch (lcm not gcd, upper, max not min, scaled) */
  int32_t spatial;               /* spatial dims (pooling, resampling) */
  int32_t order;                 /* a special function's order (Bessel's nu) */
  int32_t arg;                   /* a schema position the rule reads (foreach's coefficient; -1 none) */
  /* A reduction's schema positions of its dim, keepdim and dtype args; 0:
  ** the schema has none (arg 0 is the reduced tensor, never one of them). */
  int8_t dim_arg, keepdim_arg, dtype_arg;
  const char* str; /* a mode or kernel name */
  double real;
  /* Facts of the op rather than constants of its rule: what the core
  ** checks before the rule runs (see above), and what the caller must add
  ** (tpurt_op_facts). */
  lower_index_fact_t index;
  lower_division_t division;
  bool default_generator; /* draws from the default generator, a trailing arg its schema lacks */
} lower_rule_data_t;

typedef struct lower_rule_s {
  const char* name; /* "aten::add.Tensor" */
  lower_fn_t fn;
  lower_variant_t variant;
  /* The values of number args shape the program (arange's length): put
  ** them in the cache key instead of treating them as parameters. */
  bool numbers_in_key;
  /* Data-dependent output size (nonzero, masked_select): the engine first
  ** counts the nonzeros of this tensor arg on the device, syncs, and passes
  ** the count as one extra trailing INT arg (so it is part of the key).
  ** -1 for ordinary ops. */
  int8_t count_arg;
  /* The counting op for count_arg: "tpurt::count_nonzero" when NULL;
  ** unique's rows count distinct values or runs instead. */
  const char* count_op;
  lower_rule_data_t data; /* the *_WITH rows' constants; zero otherwise */
} lower_rule_t;

/* Table rows, one line per aten overload. */
#define LOWER_FN(op, f) {.name = op, .fn = f, .variant = LOWER_FUNCTIONAL, .count_arg = -1}
#define LOWER_INPLACE_FN(op, f) {.name = op, .fn = f, .variant = LOWER_INPLACE, .count_arg = -1}
#define LOWER_OUT_FN(op, f) {.name = op, .fn = f, .variant = LOWER_OUT, .count_arg = -1}
/* A row whose number args are program attributes (see numbers_in_key). */
#define LOWER_KEYED_OUT_FN(op, f) \
  {.name = op, .fn = f, .variant = LOWER_OUT, .numbers_in_key = true, .count_arg = -1}
#define LOWER_KEYED_FN(op, f) \
  {.name = op, .fn = f, .variant = LOWER_FUNCTIONAL, .numbers_in_key = true, .count_arg = -1}
/* A row whose output size is the nonzero count of tensor arg |arg|. */
#define LOWER_COUNTED_FN(op, f, arg) {.name = op, .fn = f, .variant = LOWER_FUNCTIONAL, .count_arg = arg}
/* The same, counted by the op |counter| (a tpurt:: rule giving an i64 scalar). */
#define LOWER_COUNTED_BY_FN(op, f, arg, counter) \
  {.name = op, .fn = f, .variant = LOWER_FUNCTIONAL, .count_arg = arg, .count_op = counter}
#define LOWER_END {.name = NULL, .fn = NULL, .count_arg = -1}
/* Rows that hand |f| constants, given as designated initializers of
** lower_rule_data_t: LOWER_FN_WITH("aten::eq.Tensor", compare, .kind = IR_EQ). */
#define LOWER_FN_WITH(op, f, ...)                                                              \
  {                                                                                            \
    .name = op, .fn = f, .variant = LOWER_FUNCTIONAL, .count_arg = -1, .data = { __VA_ARGS__ } \
  }
#define LOWER_KEYED_FN_WITH(op, f, ...)                                                                  \
  {                                                                                                      \
    .name = op, .fn = f, .variant = LOWER_FUNCTIONAL, .numbers_in_key = true, .count_arg = -1, .data = { \
      __VA_ARGS__                                                                                        \
    }                                                                                                    \
  }
#define LOWER_INPLACE_FN_WITH(op, f, ...)                                                   \
  {                                                                                         \
    .name = op, .fn = f, .variant = LOWER_INPLACE, .count_arg = -1, .data = { __VA_ARGS__ } \
  }
#define LOWER_OUT_FN_WITH(op, f, ...)                                                   \
  {                                                                                     \
    .name = op, .fn = f, .variant = LOWER_OUT, .count_arg = -1, .data = { __VA_ARGS__ } \
  }

/* Finds the rule for |name|. "aten::x_.ov" with no row of its own resolves to
** the functional "aten::x.ov" as LOWER_INPLACE; "aten::x.out" to "aten::x" (or
** "aten::x.Tensor") and "aten::x.ov_out" to "aten::x.ov" as LOWER_OUT. NULL if
** there is none. */
const lower_rule_t* lower_find(const char* name, lower_rule_t* scratch);
/* An error naming every overload that two rows of |families| (tables ended
** by LOWER_END) both claim; NULL if none does. lower_find keeps the first
** such row in table order. */
TPURT_MUST_USE tpurt_status_t lower_check_rows(const lower_rule_t* const* families, int32_t num_families);
/* lower_check_rows over the real table (every family). */
TPURT_MUST_USE tpurt_status_t lower_check_table(void);
/* Runs |rule| over |ctx| (which remembers the rule for lower_rule_*). */
TPURT_MUST_USE tpurt_status_t lower_rule_run(const lower_rule_t* rule, lower_ctx_t* ctx);

/*===------------------------------------------------------------------===*/
/* The context a rule works in                                            */
/*===------------------------------------------------------------------===*/

/* Filled by the engine; rules use the accessors below. */
typedef struct lower_param_s {
  int32_t arg;  /* index into ctx->args (flattened) it comes from */
  int32_t item; /* list item, -1 if not a list */
  int32_t kind; /* LOWER_PARAM_* */
  tpurt_dtype_t dtype;
} lower_param_t;

enum {
  LOWER_PARAM_STORAGE = 0,
  LOWER_PARAM_SCALAR = 1,
  LOWER_PARAM_RNG = 2,
  LOWER_PARAM_LIST_ITEM = 3,
  LOWER_PARAM_VIEW_OFFSET = 4, /* a tensor arg's view offset, as an i64 (engine) */
};

/* A result value meaning "an undefined tensor" (see lower_set_undefined). */
#define LOWER_UNDEFINED ((ir_value_t) - 2)
/* Result values at or below this encode a host int (see lower_set_host_int). */
#define LOWER_HOST_INT_BASE ((ir_value_t) - 16)

#define LOWER_MAX_ARGS 64
#define LOWER_MAX_PARAMS 1024
#define LOWER_MAX_FLAT_ARGS 1024
#define LOWER_MAX_WRITES 8

struct lower_ctx_s {
  ir_func_t* func;
  const char* op_name;
  const tpurt_arg_t* args; /* flattened, as the glue passed them */
  int32_t num_args;        /* schema arguments (lists count once) */
  /* Tensor args a functional rule also writes (lower_set_write). */
  int32_t num_writes;
  int32_t write_args[LOWER_MAX_WRITES];
  ir_value_t write_values[LOWER_MAX_WRITES];
  int32_t arg_index[LOWER_MAX_ARGS]; /* schema arg -> index into args */
  /* Values of tensor args read through their views, made on first use. */
  ir_value_t tensor_values[LOWER_MAX_FLAT_ARGS];
  /* Results the rule sets. */
  int32_t num_results;
  ir_value_t results[LOWER_MAX_FLAT_ARGS];
  int64_t host_ints[LOWER_MAX_FLAT_ARGS];                /* for results set by lower_set_host_int */
  int8_t result_perm[TPURT_MAX_RESULTS][TPURT_MAX_RANK]; /* lower_set_result_permuted; */
  bool result_permuted[TPURT_MAX_RESULTS];               /* only the first results */
  /* Runtime parameters, in @main order (owned by the engine). */
  int32_t num_params;
  lower_param_t params[LOWER_MAX_PARAMS];
  /* The PJRT platform the program is for ("cpu", "cuda", "tpu"; "" when
  ** unknown): rules that call a platform's own kernels (cuDNN attention)
  ** check it. The engine fills it from the client; tests may set it. */
  const char* platform;
  /* The row being run (lower_rule_run sets it): its constant is what
  ** lower_rule_data/str/real read. */
  const lower_rule_t* rule;
  /* Engine hooks: how a tensor arg becomes a value. */
  void* engine;
  ir_value_t (*read_tensor)(lower_ctx_t* ctx, int32_t flat_index);
};

/* Empties |ctx| for a new op without zeroing its arrays (~45 KB, which was a
** visible share of recording one op in fused eager): the header is zeroed
** and the counts start at 0. Entries are read only below their counts; the
** caller sets tensor_values for its args, lower_set_result fills results. */
void lower_ctx_clear(lower_ctx_t* ctx);

/* The constants of the row being run (LOWER_*_WITH): its string, its
** real; NULL / 0.0 when the row has none or no row is running. */
const char* lower_rule_str(const lower_ctx_t* ctx);
/* The row's op (IR_OP_NONE when it names none). */
ir_op_t lower_rule_op(const lower_ctx_t* ctx);
/* The constants of the row being run; all zero when none is running. */
const lower_rule_data_t* lower_rule_data(const lower_ctx_t* ctx);
double lower_rule_real(const lower_ctx_t* ctx);

/* Arguments. |i| is the schema position. */
const tpurt_arg_t* lower_arg(const lower_ctx_t* ctx, int32_t i);
bool lower_is_none(const lower_ctx_t* ctx, int32_t i);
int64_t lower_int(const lower_ctx_t* ctx, int32_t i, int64_t if_none);
bool lower_bool(const lower_ctx_t* ctx, int32_t i, bool if_none);
/* An int[] arg; a single INT is returned as a 1-list. */
int32_t lower_ints(const lower_ctx_t* ctx, int32_t i, int64_t* out, int32_t max);
tpurt_dtype_t lower_dtype(const lower_ctx_t* ctx, int32_t i, tpurt_dtype_t if_none);
const char* lower_str(const lower_ctx_t* ctx, int32_t i, const char* if_none);
/* Tensor metadata (dtype, rank, sizes) of a tensor arg / list item. */
const tpurt_tensor_t* lower_meta(const lower_ctx_t* ctx, int32_t i);
int32_t lower_list_len(const lower_ctx_t* ctx, int32_t i);
const tpurt_tensor_t* lower_list_meta(const lower_ctx_t* ctx, int32_t i, int32_t k);

/* Values. A tensor arg read through its view (cached). */
ir_value_t lower_tensor(lower_ctx_t* ctx, int32_t i);
ir_value_t lower_list_tensor(lower_ctx_t* ctx, int32_t i, int32_t k);
/* A Scalar / float arg (or a CPU 0-d tensor) as a runtime 0-d parameter of
** |dtype|: its value is not part of the program, so changing it does not
** recompile. */
ir_value_t lower_scalar(lower_ctx_t* ctx, int32_t i, tpurt_dtype_t dtype);
/* A Generator arg as a tensor<2xui64> THREE_FRY state parameter. */
ir_value_t lower_rng_state(lower_ctx_t* ctx, int32_t i);
/* A scalar arg's value at lowering time, for rules that must specialise on
** it; using this puts nothing in the cache key, so only use it for checks
** (errors) or through lower_scalar_attr. */
double lower_scalar_value(const lower_ctx_t* ctx, int32_t i);
/* Which of a few special values number |value| is, as the cache key
** records it (0: none of them): 0 and 1 for every number; for a Python
** number (TPURT_TIER_WRAPPED) also 2, 3, 0.5, -0.5, -1 and -2, the
** exponents that pow specialises as PyTorch does (x*x, sqrt, rsqrt...). A
** 0-d CPU tensor gets only 0 and 1: its value is what changes from step to
** step of a loop (a scheduler's sigma), and each fact is a separate plan. */
uint64_t lower_number_fact(double value, tpurt_scalar_tier_t tier);
/* True if number arg |i| equals |value| and the key records that fact (see
** lower_number_fact), so a rule may skip `alpha * x` when alpha is 1, or
** square for pow(x, 2), without baking any other value in. */
bool lower_scalar_is(const lower_ctx_t* ctx, int32_t i, double value);

void lower_set_result(lower_ctx_t* ctx, int32_t k, ir_value_t value);
/* A functional rule also writes |value| into tensor arg |i| (schema
** position), as PyTorch's kernel does in place: batch norm in training
** updates running_mean/running_var, an input its schema may not even mark
** Tensor(a!). The engine writes it through the arg's view like an out=. */
void lower_set_write(lower_ctx_t* ctx, int32_t i, ir_value_t value);
/* Result |k| is an undefined tensor (None to Python): for gradients that an
** output_mask did not request. Functional rules only. */
void lower_set_undefined(lower_ctx_t* ctx, int32_t k);
/* Result |k| is a plain int known at lowering time (a SymInt return, e.g.
** SDPA's max_q): returned to Python without touching the device. It is part
** of the cached plan, so it must follow from shapes and attributes only. */
void lower_set_host_int(lower_ctx_t* ctx, int32_t k, int64_t value);
/* Result |k| is |physical| (dense) seen through a permutation: logical dim i
** is physical dim perm[i]. For ops whose PyTorch output keeps an input's
** memory order. */
void lower_set_result_permuted(lower_ctx_t* ctx, int32_t k, ir_value_t physical, const int64_t* perm);
/* The permutation that sorts |t|'s dims by decreasing stride (its memory
** order); identity for a contiguous tensor. */
void lower_memory_order(const tpurt_tensor_t* t, int64_t* perm);
/* True if |t| (rank 4 or 5) is laid out channels-last (NHWC or NDHWC in
** memory), as PyTorch's suggest_memory_format would say. */
bool lower_is_channels_last(const tpurt_tensor_t* t);
/* Result |k| is |y| (NCHW or NCDHW logically) stored channels-last. */
void lower_set_result_channels_last(lower_ctx_t* ctx, int32_t k, ir_value_t y, int32_t rank);
/* Result |k| of a pointwise op: laid out as PyTorch lays out such a result
** (TensorIterator orders its dims by the inputs' strides), which keeps a
** channels-last input's result channels-last; every other order is
** row-major. In-place and out= variants write their given layout. */
void lower_set_pointwise_result(lower_ctx_t* ctx, int32_t k, ir_value_t y);
/* float[] args: the length, and item |k| as a runtime 0-d parameter. */
int32_t lower_float_list_len(const lower_ctx_t* ctx, int32_t i);
ir_value_t lower_float_list_item(lower_ctx_t* ctx, int32_t i, int32_t k, tpurt_dtype_t dtype);
/* bool[] args arrive as int lists of 0/1: item |k|, or |if_none|. */
bool lower_bool_list_item(const lower_ctx_t* ctx, int32_t i, int32_t k, bool if_none);

/* Emits an inclusive scan of |x| along |dim| with the StableHLO binary |op|
** (log-step shifted combines: O(n log n) work, no host round trip; the
** shifted-in elements are |identity|). */
ir_value_t lower_scan(lower_ctx_t* ctx, ir_value_t x, int64_t dim, ir_op_t op, double identity);
/* lower_scan with add: an inclusive prefix sum. */
ir_value_t lower_cumsum(lower_ctx_t* ctx, ir_value_t x, int64_t dim);
/* Packs the |values| (flat, [n]) where |mask| (flat bool, [n]) is true into
** a [count] array, in order (selection.c). */
ir_value_t lower_compact(lower_ctx_t* ctx, ir_value_t mask, ir_value_t values, int64_t count);
/* Stable sort of |x| along |dim| with its int64 indices. NaN is larger than
** every number (last ascending, first descending), as in PyTorch (sort.c). */
void lower_sort_with_indices(lower_ctx_t* ctx, ir_value_t x, int64_t dim, bool descending, ir_value_t* values,
                             ir_value_t* indices);

/* A status naming nothing (the engine prefixes the op name). */
TPURT_MUST_USE tpurt_status_t lower_error(tpurt_status_code_t code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/*===------------------------------------------------------------------===*/
/* Helpers shared by the families (lower_util.c)                          */
/*===------------------------------------------------------------------===*/

/* PyTorch's promote_types and result_type (three tiers). */
tpurt_dtype_t lower_promote(tpurt_dtype_t a, tpurt_dtype_t b);
/* Result type of the given schema args (tensors and scalars; NONE skipped). */
tpurt_dtype_t lower_result_type(const lower_ctx_t* ctx, const int32_t* args, int32_t n);
/* The dtype a Python float becomes: float32. */
#define LOWER_DEFAULT_FLOAT TPURT_DTYPE_F32
/* True if PyTorch's can_cast(from, to) (in-place / out= result casting). */
bool lower_can_cast(tpurt_dtype_t from, tpurt_dtype_t to);

/* Broadcast shapes as PyTorch does; error names both shapes. */
TPURT_MUST_USE tpurt_status_t lower_broadcast_shapes(int32_t rank_a, const int64_t* a, int32_t rank_b,
                                                     const int64_t* b, int32_t* out_rank, int64_t* out);
/* Broadcasts |x| to |rank|/|dims| (numpy rules: align right). */
ir_value_t lower_broadcast_to(lower_ctx_t* ctx, ir_value_t x, int32_t rank, const int64_t* dims);
/* Converts |x| to |dtype| if needed. */
ir_value_t lower_cast(lower_ctx_t* ctx, ir_value_t x, tpurt_dtype_t dtype);
/* The error PyTorch's CPU kernels give for a dtype they do not dispatch:
** "\"|kernel|\" not implemented for 'Long'", unless arg 0 is floating. */
TPURT_MUST_USE tpurt_status_t lower_need_float(const lower_ctx_t* ctx, const char* kernel);
/* Wraps a possibly negative dim; error "Dimension out of range (expected to
** be in range of [-r, r-1], but got d)". */
TPURT_MUST_USE tpurt_status_t lower_wrap_dim(int64_t dim, int32_t rank, int64_t* out_dim);
/* The number of elements of |t| (1 for a 0-d tensor). */
int64_t lower_numel(const tpurt_tensor_t* t);
/* PyTorch's C++ name of a dtype for messages: "float", "c10::BFloat16"... */
const char* lower_dtype_cpp_name(tpurt_dtype_t dtype);
/* The shape string "[2, 3]" for messages (static buffer per thread). */
const char* lower_shape_str(int32_t rank, const int64_t* dims);
/* The computation dtype for a reduction/softmax over |dtype|: f32 for
** bf16/f16 (XLA:CPU accumulates bf16 in bf16 otherwise), else itself. */
tpurt_dtype_t lower_acc_dtype(tpurt_dtype_t dtype);
/* A rank-0 |dtype| constant: its largest value (|largest|) or its smallest,
** -inf/+inf for floats, the exact extremes for integers, 0/1 for bool: the
** identity of a max or min reduction. */
ir_value_t lower_extreme(lower_ctx_t* ctx, tpurt_dtype_t dtype, bool largest);
/* stablehlo.maximum or .minimum (|op|) of same-shaped |a| and |b|, NaN
** propagating for floats as PyTorch's maximum, minimum and clamp are (XLA:CPU
** returns the other operand); OR / AND for bool. */
ir_value_t lower_max_min(lower_ctx_t* ctx, ir_op_t op, ir_value_t a, ir_value_t b);
/* Schema arg |i| (an int, 0 when None) as a dim of a rank-|rank| tensor,
** wrapped (lower_wrap_dim's error when out of range). */
TPURT_MUST_USE tpurt_status_t lower_dim_arg(const lower_ctx_t* ctx, int32_t i, int32_t rank,
                                            int64_t* out_dim);

/* |x| gathered along |dim| at |indices| ([m] or [m, 1] integers, one slice
** each): |x|'s shape with m at |dim|. Start indices are clamped (StableHLO). */
ir_value_t lower_gather_along(lower_ctx_t* ctx, ir_value_t x, int64_t dim, ir_value_t indices);
/* The scatter dims that write one slice of a rank-|rank| operand per index
** ([m] or [m, 1] integers) along |dim|: the counterpart of
** lower_gather_along, for updates of the operand's shape with m at |dim|. */
ir_scatter_dims_t lower_scatter_dims_along(int32_t rank, int64_t dim);

/* Closes the condition region of a while loop (ir_while_begin) and opens its
** body (|args| gets the body's block args): it loops while its carried
** integer |counter| (a condition block arg) is in [lo, hi). A body stops the
** loop early by setting the counter outside. */
void lower_while_counter_in(lower_ctx_t* ctx, ir_region_op_t* loop, ir_value_t counter, int64_t lo,
                            int64_t hi, ir_value_t* args);

/* The family tables, one per file; lower_find searches them all. */
extern const lower_rule_t lower_elementwise_rules[];
extern const lower_rule_t lower_reduction_rules[];
extern const lower_rule_t lower_linalg_rules[];
extern const lower_rule_t lower_norm_rules[];
extern const lower_rule_t lower_shape_rules[];
extern const lower_rule_t lower_factory_rules[];
extern const lower_rule_t lower_indexing_rules[];
extern const lower_rule_t lower_random_rules[];
extern const lower_rule_t lower_activation_rules[];
extern const lower_rule_t lower_selection_rules[];
extern const lower_rule_t lower_conv_rules[];
extern const lower_rule_t lower_resample_rules[];
extern const lower_rule_t lower_attention_rules[];
extern const lower_rule_t lower_flash_rules[];
extern const lower_rule_t lower_backward_rules[];
extern const lower_rule_t lower_foreach_rules[];
extern const lower_rule_t lower_scan_rules[];
extern const lower_rule_t lower_sort_rules[];
extern const lower_rule_t lower_pooling_rules[];
extern const lower_rule_t lower_batch_norm_rules[];
extern const lower_rule_t lower_special_rules[];
extern const lower_rule_t lower_search_rules[];
extern const lower_rule_t lower_loss_rules[];
extern const lower_rule_t lower_amp_rules[];
extern const lower_rule_t lower_decomp_rules[];
extern const lower_rule_t lower_complex_rules[];
extern const lower_rule_t lower_fft_rules[];
extern const lower_rule_t lower_resample_filter_rules[];
extern const lower_rule_t lower_equal_rules[];
extern const lower_rule_t lower_multinomial_rules[];
extern const lower_rule_t lower_grid_sample_rules[];
/* angle of a complex tensor (complex.c), for the real angle rule. */
TPURT_MUST_USE tpurt_status_t lower_complex_angle(lower_ctx_t* ctx);

#endif /* TPURT_LOWER_LOWER_H_ */
