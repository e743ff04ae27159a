/* checks.c: the argument checks a row declares (its .index and .division
** facts), made before the op runs, and the facts a caller asks for before
** it translates an op's arguments (tpurt_op_facts).
**
** A program cannot refuse a value: a gather clamps an index out of bounds,
** a scatter drops it, an integer division by zero gives -1 or the dividend,
** where PyTorch's CPU kernels raise. These checks raise PyTorch's error
** instead, in its words, OUT_OF_RANGE where it raises an IndexError. Numbers
** the call holds (a Python number, a 0-d CPU tensor) are checked in every
** mode, at no cost; a device tensor's values cost a host read (a sync), so
** they are checked only when the caller passes a reader: debug eager does.
** The work is one pass over the values read; an op whose row declares
** nothing costs one table lookup. */
#include "../base/base.h"
#include "lower.h"

/* The arg at schema position |i| of |call| (list items follow a list's
** header), and its flat index in call->args; a NONE arg past the end. */
static const tpurt_arg_t* arg_at(const tpurt_op_call_t* call, int32_t i) {
  static const tpurt_arg_t kNone = {.kind = TPURT_ARG_NONE};
  int32_t position = 0;
  for (int32_t flat = 0; flat < call->num_args; ++flat, ++position) {
    if (position == i) return &call->args[flat];
    if (call->args[flat].kind == TPURT_ARG_TENSOR_LIST) flat += call->args[flat].u.list_len;
  }
  return &kNone;
}

static bool is_integer(tpurt_dtype_t dtype) {
  return dtype == TPURT_DTYPE_BOOL || tpurt_dtype_is_integral(dtype);
}

static int64_t load_int(const unsigned char* p, tpurt_dtype_t dtype) {
  switch (dtype) {
    case TPURT_DTYPE_BOOL:
    case TPURT_DTYPE_U8:
      return *p;
    case TPURT_DTYPE_I8:
      return *(const int8_t*)p;
    case TPURT_DTYPE_I16:
      return *(const int16_t*)p;
    case TPURT_DTYPE_U16:
      return *(const uint16_t*)p;
    case TPURT_DTYPE_I32:
      return *(const int32_t*)p;
    case TPURT_DTYPE_U32:
      return *(const uint32_t*)p;
    default: /* I64, U64 (as PyTorch reads it) */
      return *(const int64_t*)p;
  }
}

/* The values of integer tensor |t| as int64 (*out_values, lower_numel(t) of
** them; the caller frees it), read through |read|. */
static TPURT_MUST_USE tpurt_status_t read_ints(const tpurt_tensor_t* t, tpurt_read_host_fn read,
                                               int64_t** out_values) {
  int64_t n = lower_numel(t);
  size_t item = tpurt_dtype_size(t->dtype);
  int64_t* values = tpurt_xmalloc((size_t)n * sizeof(int64_t));
  tpurt_status_t status = read(t, values, (size_t)n * item);
  if (status) {
    free(values);
    return status;
  }
  /* Widen in place from the end: element i's bytes end at (i + 1) * item,
  ** at or below 8 * i + 8, so writing values[i] clobbers only elements
  ** already widened. */
  const unsigned char* bytes = (const unsigned char*)values;
  for (int64_t i = n - 1; i >= 0; --i) values[i] = load_int(bytes + (size_t)i * item, t->dtype);
  *out_values = values;
  return NULL;
}

/* PyTorch's error for index |value| of |fact|, which indexes dim |dim| of
** |size| (or, for LOWER_BOUND_NUMEL, |size| elements). */
static TPURT_MUST_USE tpurt_status_t index_error(const lower_index_fact_t* fact, int64_t value, int64_t dim,
                                                 int64_t size) {
  long long v = (long long)value, d = (long long)dim, s = (long long)size;
  switch (fact->error) {
    case LOWER_INDEX_ERROR_DIM:
      return lower_error(TPURT_OUT_OF_RANGE, "index %lld is out of bounds for dimension %lld with size %lld",
                         v, d, s);
    case LOWER_INDEX_ERROR_DIM_RUNTIME:
      return lower_error(TPURT_INVALID_ARGUMENT,
                         "index %lld is out of bounds for dimension %lld with size %lld", v, d, s);
    case LOWER_INDEX_ERROR_IN_SELF:
      return lower_error(
          TPURT_OUT_OF_RANGE,
          "index out of range in self (index %lld is out of bounds for dimension %lld with size "
          "%lld)",
          v, d, s);
    case LOWER_INDEX_ERROR_ACCESS:
      return lower_error(TPURT_OUT_OF_RANGE,
                         "out of range: tried to access index %lld on a tensor of %lld elements.", v, s);
    case LOWER_INDEX_ERROR_TARGET:
      return lower_error(TPURT_OUT_OF_RANGE, "Target %lld is out of bounds.", v);
  }
  return lower_error(TPURT_INTERNAL, "index %lld out of bounds (unknown error form %d)", v, (int)fact->error);
}

/* Checks the values of index tensor |index| against [0, size), or
** [-size, size) when |fact| wraps; the first value outside (in row-major
** order) is the error, unless it is the fact's ignore_index. */
static TPURT_MUST_USE tpurt_status_t check_index_tensor(const tpurt_op_call_t* call,
                                                        const lower_index_fact_t* fact,
                                                        const tpurt_tensor_t* index, int64_t dim,
                                                        int64_t size, tpurt_read_host_fn read) {
  if (!is_integer(index->dtype) || index->dtype == TPURT_DTYPE_BOOL || lower_numel(index) == 0) return NULL;
  const tpurt_arg_t* ignore = fact->ignore_arg ? arg_at(call, fact->ignore_arg) : NULL;
  bool has_ignore = ignore && ignore->kind == TPURT_ARG_INT;
  int64_t* values = NULL;
  TPURT_RETURN_IF_ERROR(read_ints(index, read, &values));
  int64_t n = lower_numel(index), lo = fact->wraps ? -size : 0;
  tpurt_status_t status = NULL;
  for (int64_t i = 0; i < n && !status; ++i) {
    if ((values[i] < lo || values[i] >= size) && !(has_ignore && values[i] == ignore->u.i))
      status = index_error(fact, values[i], dim, size);
  }
  free(values);
  return status;
}

/* A Tensor?[] index list (LOWER_BOUND_DIMS): its k-th tensor indexes dim k
** of |of|, a None one dim, a boolean mask as many dims as it has. PyTorch
** names a dim by the index tensor's place among the tensors given. */
static TPURT_MUST_USE tpurt_status_t check_index_list(const tpurt_op_call_t* call,
                                                      const lower_index_fact_t* fact, const tpurt_arg_t* list,
                                                      const tpurt_tensor_t* of, tpurt_read_host_fn read) {
  if (list->kind != TPURT_ARG_TENSOR_LIST) return NULL;
  int32_t dim = 0, given = 0;
  for (int32_t k = 1; k <= list->u.list_len && dim < of->rank; ++k) {
    const tpurt_arg_t* item = list + k;
    if (item->kind != TPURT_ARG_TENSOR) {
      ++dim;
      continue;
    }
    if (item->u.tensor.dtype == TPURT_DTYPE_BOOL || item->u.tensor.dtype == TPURT_DTYPE_U8) { /* a mask */
      dim += item->u.tensor.rank;
      given += item->u.tensor.rank;
      continue;
    }
    TPURT_RETURN_IF_ERROR(check_index_tensor(call, fact, &item->u.tensor, given, of->sizes[dim], read));
    ++dim;
    ++given;
  }
  return NULL;
}

static TPURT_MUST_USE tpurt_status_t check_index(const tpurt_op_call_t* call, const lower_index_fact_t* fact,
                                                 tpurt_read_host_fn read) {
  const tpurt_arg_t* index = arg_at(call, fact->arg);
  const tpurt_arg_t* of = arg_at(call, fact->of);
  if (of->kind != TPURT_ARG_TENSOR) return NULL; /* the rule reports a missing tensor */
  const tpurt_tensor_t* t = &of->u.tensor;
  if (fact->bound == LOWER_BOUND_DIMS) return check_index_list(call, fact, index, t, read);
  if (index->kind != TPURT_ARG_TENSOR) return NULL;
  switch (fact->bound) {
    case LOWER_BOUND_DIM: {
      const tpurt_arg_t* d = arg_at(call, fact->dim_arg);
      if (d->kind != TPURT_ARG_INT) return NULL;
      int64_t dim = d->u.i;
      if (t->rank == 0) return check_index_tensor(call, fact, &index->u.tensor, 0, 1, read);
      if (dim < -t->rank || dim >= t->rank) return NULL; /* the rule's "Dimension out of range" */
      if (dim < 0) dim += t->rank;
      return check_index_tensor(call, fact, &index->u.tensor, dim, t->sizes[dim], read);
    }
    case LOWER_BOUND_NUMEL:
      return check_index_tensor(call, fact, &index->u.tensor, 0, lower_numel(t), read);
    case LOWER_BOUND_CLASSES: {
      if (t->rank == 0) return NULL; /* the rule refuses a 0-d input */
      int32_t class_dim = t->rank == 1 ? 0 : 1;
      return check_index_tensor(call, fact, &index->u.tensor, class_dim, t->sizes[class_dim], read);
    }
    default:
      return NULL;
  }
}

/* Integer |a|: a tensor or number of an integer (or bool) dtype. */
static bool integer_arg(const tpurt_arg_t* a) {
  if (a->kind == TPURT_ARG_TENSOR) return is_integer(a->u.tensor.dtype);
  return a->kind == TPURT_ARG_SCALAR && is_integer(a->u.scalar.dtype);
}

/* A zero divisor of an integer division: PyTorch's ZeroDivisionError. */
static TPURT_MUST_USE tpurt_status_t check_division(const tpurt_op_call_t* call, lower_division_t division,
                                                    tpurt_read_host_fn read) {
  if (division == LOWER_DIVISION_ROUNDED && arg_at(call, 2)->kind != TPURT_ARG_STRING) return NULL;
  const tpurt_arg_t* dividend = arg_at(call, 0);
  const tpurt_arg_t* divisor = arg_at(call, 1);
  if (!integer_arg(dividend) || !integer_arg(divisor)) return NULL;
  bool zero = false;
  if (divisor->kind == TPURT_ARG_SCALAR) {
    zero = divisor->u.scalar.i == 0;
  } else if (read && lower_numel(&divisor->u.tensor) > 0) {
    int64_t* values = NULL;
    TPURT_RETURN_IF_ERROR(read_ints(&divisor->u.tensor, read, &values));
    for (int64_t i = 0, n = lower_numel(&divisor->u.tensor); i < n && !zero; ++i) zero = values[i] == 0;
    free(values);
  }
  if (zero)
    return lower_error(TPURT_INVALID_ARGUMENT, "ZeroDivisionError (integer division or remainder by zero)");
  return NULL;
}

tpurt_op_facts_t tpurt_op_facts(const char* name) {
  lower_rule_t scratch;
  const lower_rule_t* rule = lower_find(name, &scratch);
  tpurt_op_facts_t facts = {0};
  if (!rule) return facts;
  facts.default_generator = rule->data.default_generator;
  facts.checks_args = rule->data.index.arg != 0 || rule->data.division != LOWER_DIVISION_NONE;
  return facts;
}

tpurt_status_t tpurt_op_check_args(const tpurt_op_call_t* call, tpurt_read_host_fn read) {
  lower_rule_t scratch;
  const lower_rule_t* rule = lower_find(call->name, &scratch);
  if (!rule) return NULL;
  const lower_index_fact_t* index = &rule->data.index;
  /* A 0-d CPU tensor reaches the core as a number, which serves as an
  ** operand but not as an index (the rules read an index's shape). */
  if (index->arg != 0 && index->bound != LOWER_BOUND_DIMS &&
      arg_at(call, index->arg)->kind == TPURT_ARG_SCALAR)
    return lower_error(
        TPURT_INVALID_ARGUMENT,
        "Expected all tensors to be on the same device, but found at least two devices, tpu:%d "
        "and cpu!",
        call->device);
  if (rule->data.division != LOWER_DIVISION_NONE)
    TPURT_RETURN_IF_ERROR(check_division(call, rule->data.division, read));
  if (index->arg != 0 && read) TPURT_RETURN_IF_ERROR(check_index(call, index, read));
  return NULL;
}
