/* view.c: reading and writing strided views inside a program.
**
** Values of storages keep their natural N-d shape. A view (sizes, strides,
** offset over the storage's elements) is read as:
**   - the value itself, when the view is the whole storage;
**   - a slice of the flattened value, when it is a contiguous range;
**   - a slice/reshape/transpose chain, when its strides nest (each stride a
**     multiple of the next smaller one, without overlap): the usual case for
**     transposes, column slices, selects and steps;
**   - a gather with computed indices otherwise (overlapping as_strided).
** Writes are the mirror image: a whole write replaces the value, a
** contiguous range is a dynamic_update_slice, a view that covers its whole
** storage in an order of its own (channels-last, a transposed result) is a
** transpose, anything else a scatter.
**
** The offset can be a runtime value (|offset| != IR_NONE: a 0-d i64
** parameter): then the slices are dynamic and nothing in the program depends
** on where the view starts, so `sigmas[i]` for every i, or `x[:, j]` for every
** j, is one program. The program then depends only on sizes and strides:
** a nested read pads by the most it can overrun for any valid offset.
*/
#include "../base/base.h"
#include "engine.h"

static ir_value_t flatten(ir_func_t* f, ir_value_t x) {
  const ir_type_t* t = ir_value_type(f, x);
  if (!t) return IR_NONE;
  if (t->rank == 1) return x;
  int64_t n = ir_type_numel(t);
  return ir_reshape(f, x, 1, &n);
}

/* A flat complex value as its parts, interleaved (re0, im0, re1, im1...):
** the elements a real view of a complex storage (view_as_real, .real,
** .imag) sees. StableHLO cannot bitcast complex values, so the parts are
** taken apart and joined instead. */
static ir_value_t complex_to_parts(ir_func_t* f, ir_value_t flat) {
  int64_t n = ir_value_type(f, flat)->dims[0], column[2] = {n, 1}, total = 2 * n;
  ir_value_t parts[2] = {ir_reshape(f, ir_complex_part(f, IR_OP_REAL, flat), 2, column),
                         ir_reshape(f, ir_complex_part(f, IR_OP_IMAG, flat), 2, column)};
  return ir_reshape(f, ir_concatenate(f, parts, 2, 1), 1, &total);
}

/* The reverse: interleaved parts (an even number of them) as complex. */
static ir_value_t parts_to_complex(ir_func_t* f, ir_value_t parts) {
  int64_t n = ir_value_type(f, parts)->dims[0] / 2, pairs[2] = {n, 2};
  ir_value_t x = ir_reshape(f, parts, 2, pairs);
  int64_t start[2] = {0, 0}, limit[2] = {n, 1}, one[2] = {1, 1};
  ir_value_t re = ir_reshape(f, ir_slice(f, x, start, limit, one), 1, &n);
  start[1] = 1;
  limit[1] = 2;
  ir_value_t im = ir_reshape(f, ir_slice(f, x, start, limit, one), 1, &n);
  return ir_complex(f, re, im);
}

/* Reinterprets a flat value as |dtype|, as PyTorch's tensor.view(dtype) and
** byte views of storages do. Element sizes may differ: wider to narrower
** splits each element, narrower to wider joins groups of them. */
static ir_value_t reinterpret_flat(ir_func_t* f, ir_value_t flat, tpurt_dtype_t dtype) {
  const ir_type_t* t0 = ir_value_type(f, flat);
  if (!t0 || t0->dtype == dtype) return flat;
  ir_type_t t = *t0;
  if (tpurt_dtype_is_complex(t.dtype)) return reinterpret_flat(f, complex_to_parts(f, flat), dtype);
  if (tpurt_dtype_is_complex(dtype)) {
    ir_value_t parts = reinterpret_flat(f, flat, tpurt_dtype_to_real(dtype));
    const ir_type_t* pt = ir_value_type(f, parts);
    if (!pt) return IR_NONE;
    if (pt->dims[0] % 2 != 0) {
      ir_func_fail_consume(
          f,
          tpurt_status_create(TPURT_INVALID_ARGUMENT, "a storage of %lld %s elements cannot be viewed as %s",
                              (long long)t.dims[0], tpurt_dtype_name(t.dtype), tpurt_dtype_name(dtype)));
      return IR_NONE;
    }
    return parts_to_complex(f, parts);
  }
  if (t.dtype == TPURT_DTYPE_BOOL) { /* bool is a byte holding 0 or 1 */
    flat = ir_convert(f, flat, TPURT_DTYPE_U8);
    t.dtype = TPURT_DTYPE_U8;
    if (dtype == TPURT_DTYPE_U8) return flat;
  }
  if (dtype == TPURT_DTYPE_BOOL)
    return ir_convert(f, reinterpret_flat(f, flat, TPURT_DTYPE_U8), TPURT_DTYPE_BOOL);
  size_t from = tpurt_dtype_size(t.dtype), to = tpurt_dtype_size(dtype);
  int64_t n = t.dims[0];
  if (from == to) {
    t.dtype = dtype;
    return ir_bitcast_convert(f, flat, t);
  }
  if (from > to) {
    int64_t k = (int64_t)(from / to), dims[2] = {n, k}, total = n * k;
    return ir_reshape(f, ir_bitcast_convert(f, flat, ir_type_make(dtype, 2, dims)), 1, &total);
  }
  int64_t k = (int64_t)(to / from);
  if (n % k != 0) {
    ir_func_fail_consume(
        f, tpurt_status_create(TPURT_INVALID_ARGUMENT, "a storage of %lld %s elements cannot be viewed as %s",
                               (long long)n, tpurt_dtype_name(t.dtype), tpurt_dtype_name(dtype)));
    return IR_NONE;
  }
  int64_t dims[2] = {n / k, k};
  return ir_bitcast_convert(f, ir_reshape(f, flat, 2, dims), ir_type_make(dtype, 1, dims));
}

/* The view's offset as a 0-d i64 value: the runtime one, or a constant. */
static ir_value_t offset_value(ir_func_t* f, const tpurt_tensor_t* v, ir_value_t offset) {
  return offset != IR_NONE ? offset : ir_constant_i64(f, TPURT_DTYPE_I64, v->offset);
}

/* |len| elements of |flat| from the view's offset. */
static ir_value_t flat_range(ir_func_t* f, ir_value_t flat, const tpurt_tensor_t* v, ir_value_t offset,
                             int64_t len) {
  if (offset != IR_NONE) return ir_dynamic_slice(f, flat, &offset, &len);
  int64_t start = v->offset, limit = v->offset + len, one = 1;
  return ir_slice(f, flat, &start, &limit, &one);
}

/* offset + sum_d iota_d * stride_d, shaped [sizes...], as i64. Gather and
** scatter take it with index_vector_dim = rank (an implicit trailing index
** vector of size 1), so a rank-8 view needs no rank-9 index tensor. */
static ir_value_t strided_indices(ir_func_t* f, const tpurt_tensor_t* v, ir_value_t offset) {
  int64_t dims[TPURT_MAX_RANK];
  for (int32_t i = 0; i < v->rank; ++i) dims[i] = v->sizes[i];
  ir_type_t t = ir_type_make(TPURT_DTYPE_I64, v->rank, dims);
  ir_value_t idx = ir_broadcast_in_dim(f, offset_value(f, v, offset), v->rank, dims, NULL);
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->sizes[d] == 1 || v->strides[d] == 0) continue;
    ir_value_t io = ir_iota(f, t, d);
    ir_value_t st =
        ir_broadcast_in_dim(f, ir_constant_i64(f, TPURT_DTYPE_I64, v->strides[d]), v->rank, dims, NULL);
    idx = ir_binary(f, IR_OP_ADD, idx, ir_binary(f, IR_OP_MULTIPLY, io, st));
  }
  return idx;
}

/* The nested-strides decomposition; IR_NONE (no error) if it does not apply. */
static ir_value_t read_nested(ir_func_t* f, ir_value_t flat, int64_t n, const tpurt_tensor_t* v,
                              ir_value_t offset) {
  int32_t order[TPURT_MAX_RANK], k = 0;
  for (int32_t d = 0; d < v->rank; ++d) {
    if (v->sizes[d] == 1 || v->strides[d] == 0) continue;
    if (v->strides[d] < 0) return IR_NONE;
    order[k++] = d;
  }
  /* sort by stride, largest first (insertion sort; rank <= 8) */
  for (int32_t i = 1; i < k; ++i)
    for (int32_t j = i; j > 0 && v->strides[order[j]] > v->strides[order[j - 1]]; --j) {
      int32_t tmp = order[j];
      order[j] = order[j - 1];
      order[j - 1] = tmp;
    }
  for (int32_t j = 1; j < k; ++j) {
    int64_t outer = v->strides[order[j - 1]], inner = v->strides[order[j]];
    if (inner == 0 || outer % inner != 0 || v->sizes[order[j]] * inner > outer) return IR_NONE;
  }
  ir_value_t x;
  int64_t shape[TPURT_MAX_RANK + 1];
  if (k == 0) {
    x = ir_reshape(f, flat_range(f, flat, v, offset, 1), 0, NULL);
  } else {
    int64_t s0 = v->strides[order[0]];
    int64_t span = v->sizes[order[0]] * s0;
    /* The slice of |span| elements may run past the end (a last column):
    ** pad by the overrun, or, with a runtime offset, by the most any valid
    ** offset can overrun (span minus the elements the view reaches). */
    int64_t reach = 1;
    for (int32_t j = 0; j < k; ++j) reach += (v->sizes[order[j]] - 1) * v->strides[order[j]];
    int64_t overrun = offset != IR_NONE ? span - reach : v->offset + span - n;
    if (overrun > 0) {
      int64_t lo = 0, hi = overrun, in = 0;
      const ir_type_t* ft = ir_value_type(f, flat);
      if (!ft) return IR_NONE;
      ir_value_t zero = tpurt_dtype_is_float(ft->dtype) ? ir_constant_f64(f, ft->dtype, 0.0)
                                                        : ir_constant_i64(f, ft->dtype, 0);
      flat = ir_pad(f, flat, zero, &lo, &hi, &in);
    }
    x = flat_range(f, flat, v, offset, span);
    shape[0] = v->sizes[order[0]];
    for (int32_t j = 1; j < k; ++j) shape[j] = v->strides[order[j - 1]] / v->strides[order[j]];
    shape[k] = v->strides[order[k - 1]];
    x = ir_reshape(f, x, k + 1, shape);
    int64_t st[TPURT_MAX_RANK + 1], li[TPURT_MAX_RANK + 1], ones[TPURT_MAX_RANK + 1];
    bool need_slice = false;
    for (int32_t j = 0; j <= k; ++j) {
      st[j] = 0;
      ones[j] = 1;
      li[j] = j == k ? 1 : v->sizes[order[j]];
      need_slice |= li[j] != shape[j];
    }
    if (need_slice) x = ir_slice(f, x, st, li, ones);
    for (int32_t j = 0; j < k; ++j) shape[j] = v->sizes[order[j]];
    x = ir_reshape(f, x, k, shape);
    /* axes are in stride order; put them back in dim order */
    int64_t perm[TPURT_MAX_RANK];
    bool identity = true;
    int32_t p = 0;
    for (int32_t d = 0; d < v->rank; ++d)
      for (int32_t j = 0; j < k; ++j)
        if (order[j] == d) {
          identity &= j == p;
          perm[p++] = j;
        }
    if (!identity) x = ir_transpose(f, x, perm);
  }
  /* re-insert size-1 and broadcast (stride 0) dims */
  int64_t bdims[TPURT_MAX_RANK];
  int32_t j = 0;
  for (int32_t d = 0; d < v->rank; ++d)
    if (!(v->sizes[d] == 1 || v->strides[d] == 0)) bdims[j++] = d;
  if (j == v->rank) return x;
  return ir_broadcast_in_dim(f, x, v->rank, v->sizes, bdims);
}

ir_value_t view_read(ir_func_t* f, ir_value_t base, const tpurt_tensor_t* v, ir_value_t offset) {
  const ir_type_t* bt = ir_value_type(f, base);
  if (!bt) return IR_NONE;
  int64_t numel = view_numel(v);
  if (numel == 0) {
    ir_value_t z =
        tpurt_dtype_is_float(v->dtype) ? ir_constant_f64(f, v->dtype, 0.0) : ir_constant_i64(f, v->dtype, 0);
    return ir_broadcast_in_dim(f, z, v->rank, v->sizes, NULL);
  }
  int64_t n = ir_type_numel(bt);
  if (bt->dtype == v->dtype && v->offset == 0 && numel == n && view_is_contiguous(v)) {
    bool same = bt->rank == v->rank;
    for (int32_t i = 0; same && i < v->rank; ++i) same = bt->dims[i] == v->sizes[i];
    return same ? base : ir_reshape(f, base, v->rank, v->sizes);
  }
  ir_value_t flat = reinterpret_flat(f, flatten(f, base), v->dtype);
  const ir_type_t* ft = ir_value_type(f, flat);
  if (!ft) return IR_NONE;
  n = ft->dims[0];
  if (view_is_contiguous(v)) return ir_reshape(f, flat_range(f, flat, v, offset, numel), v->rank, v->sizes);
  ir_value_t x = read_nested(f, flat, n, v, offset);
  if (x != IR_NONE || ir_func_status(f)) return x;
  ir_gather_dims_t g = {.num_collapsed = 1,
                        .collapsed_slice_dims = {0},
                        .num_start_index_map = 1,
                        .start_index_map = {0},
                        .index_vector_dim = v->rank,
                        .slice_sizes = {1}};
  return ir_gather(f, flat, strided_indices(f, v, offset), &g);
}

/* The storage of a view that covers all |n| of its elements once, in an
** order of its own (view_memory_order: channels-last, a transposed result):
** |update| transposed into that order, where a scatter would write each
** element at its computed index. The VAE's mid-block attention adds its
** residual in channels-last; its scatter was most of that piece's XLA:CPU
** compile, and a scatter is slow at every run on a TPU. IR_NONE (no error)
** if the view is not such a permutation. */
static ir_value_t write_permuted(ir_func_t* f, const tpurt_tensor_t* v, ir_value_t update, int64_t n) {
  int64_t order[TPURT_MAX_RANK];
  if (!view_memory_order(v, order)) return IR_NONE;
  ir_value_t x = ir_transpose(f, ir_reshape(f, update, v->rank, v->sizes), order);
  return ir_reshape(f, x, 1, &n);
}

ir_value_t view_write(ir_func_t* f, ir_value_t base, const tpurt_tensor_t* v, ir_value_t update,
                      ir_value_t offset) {
  const ir_type_t* bt0 = ir_value_type(f, base);
  if (!bt0) return IR_NONE;
  ir_type_t bt = *bt0;
  int64_t numel = view_numel(v);
  int64_t n = ir_type_numel(&bt);
  if (numel == 0) return base;
  if (bt.dtype == v->dtype && v->offset == 0 && numel == n && view_is_contiguous(v))
    return ir_reshape(f, update, bt.rank, bt.dims);
  if (offset == IR_NONE && bt.dtype == v->dtype && v->offset == 0 && numel == n) {
    ir_value_t whole = write_permuted(f, v, update, n); /* (a contiguous one returned above) */
    if (whole != IR_NONE) return bt.rank == 1 ? whole : ir_reshape(f, whole, bt.rank, bt.dims);
  }
  /* work in the view's element type; convert back at the end */
  ir_value_t flat = reinterpret_flat(f, flatten(f, base), v->dtype);
  ir_value_t upd = ir_reshape(f, update, 1, &numel);
  ir_value_t out;
  if (view_is_contiguous(v)) {
    ir_value_t start = offset_value(f, v, offset);
    out = ir_dynamic_update_slice(f, flat, upd, &start);
  } else {
    int64_t dims[TPURT_MAX_RANK];
    for (int32_t i = 0; i < v->rank; ++i) dims[i] = v->sizes[i];
    ir_value_t shaped = ir_reshape(f, upd, v->rank, dims);
    ir_scatter_dims_t s = {.num_inserted = 1,
                           .inserted_window_dims = {0},
                           .num_scatter_dims_to_operand = 1,
                           .scatter_dims_to_operand_dims = {0},
                           .index_vector_dim = v->rank};
    ir_value_t block[2];
    out = ir_scatter_begin(f, flat, strided_indices(f, v, offset), shaped, &s, block);
    ir_region_end(f, &block[1], 1); /* replace: the update wins */
  }
  out = reinterpret_flat(f, out, bt.dtype);
  return bt.rank == 1 ? out : ir_reshape(f, out, bt.rank, bt.dims);
}

ir_value_t view_empty_base(ir_func_t* f, const tpurt_storage_t* storage, tpurt_dtype_t dtype) {
  int64_t n = (int64_t)(storage->nbytes / tpurt_dtype_size(dtype));
  ir_value_t z = tpurt_dtype_is_float(dtype) ? ir_constant_f64(f, dtype, 0.0) : ir_constant_i64(f, dtype, 0);
  return ir_broadcast_in_dim(f, z, 1, &n, NULL);
}
