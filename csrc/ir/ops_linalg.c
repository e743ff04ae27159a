/* ops_linalg.c: contractions: dot_general and convolution, and the
** float32 precision they carry. */
#include "ir_internal.h"

/*===------------------------------------------------------------------===*/
/* dot_general                                                            */
/*===------------------------------------------------------------------===*/

void ir_func_set_precision(ir_func_t* func, ir_precision_t precision) {
  if (func) func->precision = precision;
}

/* ", precision_config = [...]" for an op over |dtype| operands, or nothing:
** only full-width floats have a precision to choose. */
static void put_precision(const ir_func_t* func, tpurt_strbuf_t* attrs, tpurt_dtype_t dtype) {
  static const char* const kNames[] = {"", "DEFAULT", "HIGH", "HIGHEST"};
  if (func->precision == IR_PRECISION_UNSET || (dtype != TPURT_DTYPE_F32 && dtype != TPURT_DTYPE_F64)) return;
  const char* name = kNames[func->precision];
  tpurt_strbuf_printf(attrs, ", precision_config = [#stablehlo<precision %s>, #stablehlo<precision %s>]",
                      name, name);
}

/* The types of a contraction's operands, or false (error recorded) unless
** both are values of one element type. */
static bool contraction_operands(ir_func_t* func, ir_op_t op, ir_value_t lhs, ir_value_t rhs,
                                 const ir_type_t** out_lhs, const ir_type_t** out_rhs) {
  const ir_type_t* tl = *out_lhs = ir_operand_type(func, op, lhs);
  const ir_type_t* tr = *out_rhs = ir_operand_type(func, op, rhs);
  if (!tl || !tr) return false;
  if (tl->dtype != tr->dtype) {
    ir_failf(func, "%s: lhs %s and rhs %s must have one element type", ir_op_name(op), ir_type_str(tl),
             ir_type_str(tr));
    return false;
  }
  return true;
}

/* A 64-bit integer dot as a multiply and a sum over the contracting dims.
** TPUs have no 64-bit integer dot (XLA's X64 rewriting refuses "s64 dot"),
** but they take 64-bit multiplies and adds, and the sum is exact in 64 bits
** (wrapping as the dot's would). Same dims and result as the dot_general.
** Only for products up to IR_INT_DOT_MAX_ELEMENTS (the broadcast product is
** that big before the reduce fuses it) and within TPURT_MAX_RANK; IR_NONE
** with no error otherwise, and the caller emits the dot. */
#define IR_INT_DOT_MAX_ELEMENTS (1LL << 24)
static ir_value_t int64_dot_by_reduce(ir_func_t* func, ir_value_t lhs, ir_value_t rhs, const ir_type_t* tl,
                                      const ir_type_t* tr, const ir_dot_dims_t* dims,
                                      tpurt_dtype_t result_dtype) {
  int32_t nb = dims->num_batch, nc = dims->num_contract;
  int64_t lperm[TPURT_MAX_RANK], rperm[TPURT_MAX_RANK], full[TPURT_MAX_RANK];
  int64_t lbd[TPURT_MAX_RANK], rbd[TPURT_MAX_RANK];
  int32_t nlf = tl->rank - nb - nc, nrf = tr->rank - nb - nc;
  int32_t rank = nb + nlf + nrf + nc;
  if (rank > TPURT_MAX_RANK) return IR_NONE;
  int64_t used_l[2 * TPURT_MAX_RANK], used_r[2 * TPURT_MAX_RANK];
  for (int32_t i = 0; i < nb; ++i) used_l[i] = dims->lhs_batch[i], used_r[i] = dims->rhs_batch[i];
  for (int32_t i = 0; i < nc; ++i)
    used_l[nb + i] = dims->lhs_contract[i], used_r[nb + i] = dims->rhs_contract[i];
  /* lhs as [batch, lhs free, contract] at result dims [0, nb + nlf) and the last nc */
  int32_t k = 0;
  for (int32_t i = 0; i < nb; ++i) lbd[k] = i, lperm[k++] = dims->lhs_batch[i];
  for (int32_t d = 0; d < tl->rank; ++d)
    if (!ir_dims_contain(used_l, nb + nc, d)) lbd[k] = k, lperm[k++] = d;
  for (int32_t i = 0; i < nc; ++i) lbd[k] = nb + nlf + nrf + i, lperm[k++] = dims->lhs_contract[i];
  /* rhs as [batch, rhs free, contract] */
  k = 0;
  for (int32_t i = 0; i < nb; ++i) rbd[k] = i, rperm[k++] = dims->rhs_batch[i];
  for (int32_t d = 0; d < tr->rank; ++d)
    if (!ir_dims_contain(used_r, nb + nc, d)) rbd[k] = nb + nlf + (k - nb), rperm[k++] = d;
  for (int32_t i = 0; i < nc; ++i) rbd[k] = nb + nlf + nrf + i, rperm[k++] = dims->rhs_contract[i];
  int64_t n = 1;
  for (int32_t i = 0; i < tl->rank; ++i) full[lbd[i]] = tl->dims[lperm[i]];
  for (int32_t i = 0; i < tr->rank; ++i) full[rbd[i]] = tr->dims[rperm[i]];
  for (int32_t i = 0; i < rank; ++i) n *= full[i];
  if (n > IR_INT_DOT_MAX_ELEMENTS) return IR_NONE;
  ir_value_t a = ir_convert(func, ir_transpose(func, lhs, lperm), result_dtype);
  ir_value_t b = ir_convert(func, ir_transpose(func, rhs, rperm), result_dtype);
  ir_value_t p = ir_mul(func, ir_broadcast_in_dim(func, a, rank, full, lbd),
                        ir_broadcast_in_dim(func, b, rank, full, rbd));
  if (nc == 0) return p;
  int64_t red[TPURT_MAX_RANK];
  for (int32_t i = 0; i < nc; ++i) red[i] = nb + nlf + nrf + i;
  return ir_reduce(func, p, ir_constant_i64(func, result_dtype, 0), red, nc, IR_REDUCE_ADD);
}

ir_value_t ir_dot_general(ir_func_t* func, ir_value_t lhs, ir_value_t rhs, const ir_dot_dims_t* dims,
                          tpurt_dtype_t result_dtype) {
  const ir_op_t op = IR_OP_DOT_GENERAL;
  const ir_type_t *tl, *tr;
  if (!func || !contraction_operands(func, op, lhs, rhs, &tl, &tr)) return IR_NONE;
  int64_t lhs_used[2 * TPURT_MAX_RANK], rhs_used[2 * TPURT_MAX_RANK];
  int32_t nb = dims->num_batch, nc = dims->num_contract;
  if (nb < 0 || nc < 0 || nb + nc > tl->rank || nb + nc > tr->rank) {
    ir_failf(func, "%s: %d batching + %d contracting dims do not fit lhs %s and rhs %s", ir_op_name(op),
             (int)nb, (int)nc, ir_type_str(tl), ir_type_str(tr));
    return IR_NONE;
  }
  for (int32_t i = 0; i < nb; ++i) lhs_used[i] = dims->lhs_batch[i], rhs_used[i] = dims->rhs_batch[i];
  for (int32_t i = 0; i < nc; ++i)
    lhs_used[nb + i] = dims->lhs_contract[i], rhs_used[nb + i] = dims->rhs_contract[i];
  if (!ir_check_dims(func, op, "lhs batching and contracting dims", lhs_used, nb + nc, tl->rank))
    return IR_NONE;
  if (!ir_check_dims(func, op, "rhs batching and contracting dims", rhs_used, nb + nc, tr->rank))
    return IR_NONE;
  for (int32_t i = 0; i < nb + nc; ++i) {
    if (tl->dims[lhs_used[i]] != tr->dims[rhs_used[i]]) {
      ir_failf(func, "%s: %s dim pair %d: lhs dim %lld of %s has size %lld, rhs dim %lld of %s has size %lld",
               ir_op_name(op), i < nb ? "batching" : "contracting", (int)(i < nb ? i : i - nb),
               (long long)lhs_used[i], ir_type_str(tl), (long long)tl->dims[lhs_used[i]],
               (long long)rhs_used[i], ir_type_str(tr), (long long)tr->dims[rhs_used[i]]);
      return IR_NONE;
    }
  }
  ir_type_t type;
  memset(&type, 0, sizeof(type));
  type.dtype = result_dtype;
  for (int32_t i = 0; i < nb; ++i) type.dims[type.rank++] = tl->dims[dims->lhs_batch[i]];
  for (int32_t d = 0; d < tl->rank; ++d)
    if (!ir_dims_contain(lhs_used, nb + nc, d)) type.dims[type.rank++] = tl->dims[d];
  for (int32_t d = 0; d < tr->rank; ++d) {
    if (ir_dims_contain(rhs_used, nb + nc, d)) continue;
    if (type.rank >= TPURT_MAX_RANK) {
      ir_failf(func, "%s: result of %s x %s has rank above %d", ir_op_name(op), ir_type_str(tl),
               ir_type_str(tr), TPURT_MAX_RANK);
      return IR_NONE;
    }
    type.dims[type.rank++] = tr->dims[d];
  }
  bool int64 = tl->dtype == TPURT_DTYPE_I64 || tl->dtype == TPURT_DTYPE_U64;
  if (int64 && (result_dtype == TPURT_DTYPE_I64 || result_dtype == TPURT_DTYPE_U64)) {
    ir_value_t by_reduce = int64_dot_by_reduce(func, lhs, rhs, tl, tr, dims, result_dtype);
    if (by_reduce != IR_NONE) return by_reduce;
  }
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_puts(&attrs, "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = ");
  ir_put_list(&attrs, dims->lhs_batch, nb);
  tpurt_strbuf_puts(&attrs, ", rhs_batching_dimensions = ");
  ir_put_list(&attrs, dims->rhs_batch, nb);
  tpurt_strbuf_puts(&attrs, ", lhs_contracting_dimensions = ");
  ir_put_list(&attrs, dims->lhs_contract, nc);
  tpurt_strbuf_puts(&attrs, ", rhs_contracting_dimensions = ");
  ir_put_list(&attrs, dims->rhs_contract, nc);
  tpurt_strbuf_puts(&attrs, ">");
  put_precision(func, &attrs, tl->dtype);
  ir_value_t operands[2] = {lhs, rhs};
  return ir_emit_buf(func, op, operands, 2, &type, &attrs);
}

/*===------------------------------------------------------------------===*/
/* Convolution (appended by the conv family)                              */
/*===------------------------------------------------------------------===*/

/* One operand's dims [b, f, 0, 1]: |a| and |b| name the two special dims,
** |spatial| the window dims in order. False (error recorded) unless they
** are a permutation of [0, rank). */
static bool put_conv_layout(ir_func_t* func, tpurt_strbuf_t* buf, const char* what, int32_t rank, char a,
                            int64_t a_dim, char b, int64_t b_dim, const int64_t* spatial,
                            int32_t num_spatial) {
  int64_t all[TPURT_MAX_RANK];
  if (num_spatial + 2 != rank) {
    ir_failf(func, "%s: %s has rank %d, expected %d spatial dims + 2", ir_op_name(IR_OP_CONVOLUTION), what,
             (int)rank, (int)num_spatial);
    return false;
  }
  all[0] = a_dim;
  all[1] = b_dim;
  for (int32_t i = 0; i < num_spatial; ++i) all[2 + i] = spatial[i];
  if (!ir_check_dims(func, IR_OP_CONVOLUTION, what, all, rank, rank)) return false;
  tpurt_strbuf_puts(buf, "[");
  for (int32_t d = 0; d < rank; ++d) {
    if (d) tpurt_strbuf_puts(buf, ", ");
    if (d == a_dim) {
      tpurt_strbuf_printf(buf, "%c", a);
    } else if (d == b_dim) {
      tpurt_strbuf_printf(buf, "%c", b);
    } else {
      for (int32_t i = 0; i < num_spatial; ++i)
        if (spatial[i] == d) tpurt_strbuf_printf(buf, "%d", (int)i);
    }
  }
  tpurt_strbuf_puts(buf, "]");
  return true;
}

ir_value_t ir_convolution(ir_func_t* func, ir_value_t lhs, ir_value_t rhs, const ir_conv_dims_t* dims,
                          tpurt_dtype_t result_dtype) {
  const ir_op_t op = IR_OP_CONVOLUTION;
  const ir_type_t *tl, *tr;
  if (!func || !contraction_operands(func, op, lhs, rhs, &tl, &tr)) return IR_NONE;
  int32_t ns = dims->num_spatial;
  if (ns < 0 || ns + 2 > TPURT_MAX_RANK) {
    ir_failf(func, "%s: %d spatial dims is outside [0, %d]", ir_op_name(op), (int)ns, TPURT_MAX_RANK - 2);
    return IR_NONE;
  }
  tpurt_strbuf_t layout = {0};
  tpurt_strbuf_puts(&layout, "dimension_numbers = #stablehlo.conv<");
  bool ok = put_conv_layout(func, &layout, "input dims", tl->rank, 'b', dims->input_batch, 'f',
                            dims->input_feature, dims->input_spatial, ns);
  if (ok) tpurt_strbuf_puts(&layout, "x");
  ok = ok && put_conv_layout(func, &layout, "kernel dims", tr->rank, 'o', dims->kernel_output_feature, 'i',
                             dims->kernel_input_feature, dims->kernel_spatial, ns);
  if (ok) tpurt_strbuf_puts(&layout, "->");
  ok = ok && put_conv_layout(func, &layout, "output dims", ns + 2, 'b', dims->output_batch, 'f',
                             dims->output_feature, dims->output_spatial, ns);
  tpurt_strbuf_puts(&layout, ">");
  int64_t fg = dims->feature_group_count, bg = dims->batch_group_count;
  if (ok && (fg < 1 || bg < 1 || (fg > 1 && bg > 1))) {
    ir_failf(func, "%s: feature_group_count %lld and batch_group_count %lld must be >= 1, one of them 1",
             ir_op_name(op), (long long)fg, (long long)bg);
    ok = false;
  }
  int64_t batch = ok ? tl->dims[dims->input_batch] : 0, in_f = ok ? tl->dims[dims->input_feature] : 0;
  int64_t k_in = ok ? tr->dims[dims->kernel_input_feature] : 0;
  int64_t k_out = ok ? tr->dims[dims->kernel_output_feature] : 0;
  if (ok && (in_f != k_in * fg || k_out % fg != 0 || batch % bg != 0 || k_out % bg != 0)) {
    ir_failf(func,
             "%s: lhs %s and rhs %s do not fit feature_group_count %lld and batch_group_count %lld "
             "(input features %lld = kernel input features %lld * groups; kernel output features %lld and "
             "batch %lld divisible by the groups)",
             ir_op_name(op), ir_type_str(tl), ir_type_str(tr), (long long)fg, (long long)bg, (long long)in_f,
             (long long)k_in, (long long)k_out, (long long)batch);
    ok = false;
  }
  ir_type_t type;
  memset(&type, 0, sizeof(type));
  type.dtype = result_dtype;
  type.rank = ns + 2;
  if (ok) {
    type.dims[dims->output_batch] = batch / bg;
    type.dims[dims->output_feature] = k_out;
  }
  for (int32_t i = 0; ok && i < ns; ++i) {
    int64_t in = tl->dims[dims->input_spatial[i]], k = tr->dims[dims->kernel_spatial[i]];
    int64_t stride = dims->window_strides[i], ld = dims->lhs_dilation[i], rd = dims->rhs_dilation[i];
    if (stride < 1 || ld < 1 || rd < 1) {
      ir_failf(func, "%s: spatial dim %d: stride %lld, lhs dilation %lld, rhs dilation %lld must be >= 1",
               ir_op_name(op), (int)i, (long long)stride, (long long)ld, (long long)rd);
      ok = false;
      break;
    }
    int64_t dilated = in > 0 ? (in - 1) * ld + 1 : 0;
    int64_t padded = dilated + dims->padding_low[i] + dims->padding_high[i];
    int64_t window = k > 0 ? (k - 1) * rd + 1 : 0;
    if (padded < 0) {
      ir_failf(func, "%s: spatial dim %d of %s padded by %lld and %lld has negative size", ir_op_name(op),
               (int)i, ir_type_str(tl), (long long)dims->padding_low[i], (long long)dims->padding_high[i]);
      ok = false;
      break;
    }
    type.dims[dims->output_spatial[i]] = padded < window ? 0 : (padded - window) / stride + 1;
  }
  if (!ok) {
    tpurt_strbuf_free(&layout);
    return IR_NONE;
  }
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_printf(&attrs, "batch_group_count = %lld : i64, %s, feature_group_count = %lld : i64",
                      (long long)bg, layout.data, (long long)fg);
  tpurt_strbuf_free(&layout);
  ir_put_named_array(&attrs, ", ", "lhs_dilation", dims->lhs_dilation, ns);
  ir_put_padding(&attrs, ", ", dims->padding_low, dims->padding_high, ns);
  ir_put_named_array(&attrs, ", ", "rhs_dilation", dims->rhs_dilation, ns);
  ir_put_named_array(&attrs, ", ", "window_strides", dims->window_strides, ns);
  put_precision(func, &attrs, tl->dtype);
  ir_value_t operands[2] = {lhs, rhs};
  return ir_emit_buf(func, op, operands, 2, &type, &attrs);
}
