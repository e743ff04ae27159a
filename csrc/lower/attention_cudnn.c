/* attention_cudnn.c: SDPA on a CUDA platform as cuDNN fused (flash)
** attention, through the custom calls that XLA's GPU backend runs with
** cuDNN: "__cudnn$fmhaSoftmax" and "__cudnn$fmhaScaleBiasSoftmax" forward,
** the same names with "Backward" for the gradients.
**
** The contract of those targets (XLA's, read from its users; none of this
** is in StableHLO itself):
** - Operands are [B, N, T, H] ("BNTH": batch, heads, rows, head dim) in
**   row-major layout. Key and value may have fewer heads (grouped query
**   attention); cuDNN sums their gradients over the group itself.
** - Forward: (q, k, v[, bias]) -> (output [B, N, T, Hv], softmax stats
**   [B, N, T] f32, workspace u8[0]). The stats are the logsumexp of each
**   row of scale * q k^T + bias, which is exactly the logsumexp PyTorch's
**   fused attention returns for its backward.
** - Backward: (q, k, v, stats, d_output[, bias], output) -> (dq, dk, dv,
**   workspace); a dbias result comes before the workspace only when asked
**   for, which we never do (see sdpa_cudnn_backward).
** - The scale, the mask kind (NO_MASK or CAUSAL), the score shape and the
**   dot dimension numbers of the two (forward) or four (backward) matmuls
**   are in the backend_config JSON, a GpuBackendConfig message whose
**   cudnn_fmha_backend_config field XLA reads. The scale is a constant
**   there, not an operand, so the config always says 1/sqrt(head dim) (a
**   fact of the shapes) and an explicit scale, a runtime number like every
**   Python float we take, multiplies q first (and dq after): any scale runs
**   the same program. The cost is one rounding of q*scale to the input type.
** - A bias is [B or 1, N or 1, T, S] in the input type. A bool mask becomes
**   such a bias: 0 where a key is kept, a large finite negative where it is
**   not (finite, because cuDNN subtracts the row max, and -inf - -inf is
**   nan). A row that masks every key therefore averages all values, where
**   the StableHLO lowering gives 0.
*/
#include <math.h>

#include "../base/base.h"
#include "attention.h"

/* The largest head dim every cuDNN flash kernel takes (Ampere and newer;
** Hopper goes to 256, but the platform name does not say which GPU it is). */
#define CUDNN_MAX_HEAD_DIM 128

bool sdpa_cudnn_supported(const lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p) {
  if (!ctx->platform || strcmp(ctx->platform, "cuda") != 0) return false;
  if (!tpurt_config()->cudnn_sdpa) return false;                                 /* TORCH_TPU_CUDNN_SDPA=0 */
  if (p->dtype != TPURT_DTYPE_BF16 && p->dtype != TPURT_DTYPE_F16) return false; /* f32: no flash kernel */
  if (p->d != p->dv || p->d % 8 != 0 || p->d > CUDNN_MAX_HEAD_DIM) return false;
  if (p->n < 1 || p->h < 1 || p->l < 1 || p->s < 1) return false;
  /* PyTorch's causal mask is aligned top left, cuDNN's CAUSAL may be bottom
  ** right: they agree only when the two lengths do */
  if (lower_bool(ctx, a->causal, false) && p->l != p->s) return false;
  if (!lower_is_none(ctx, a->bias) && (p->l % 2 != 0 || p->s % 2 != 0)) return false;
  return true;
}

/* The scale in the config: SDPA's default, known from the shapes. */
static double config_scale(const sdpa_t* p) { return 1.0 / sqrt((double)p->d); }

/* An explicit scale as a factor on q (and on dq): scale / config_scale, a
** runtime f32 value; IR_NONE without one. */
static ir_value_t scale_factor(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p) {
  if (lower_is_none(ctx, a->scale)) return IR_NONE;
  ir_value_t scale = lower_scalar(ctx, a->scale, TPURT_DTYPE_F32);
  return ir_mul(ctx->func, scale, ir_constant_f64(ctx->func, TPURT_DTYPE_F32, 1.0 / config_scale(p)));
}

/* |x| times a 0-d f32 |factor| (IR_NONE: |x| itself), in |x|'s type. */
static ir_value_t scaled(lower_ctx_t* ctx, ir_value_t x, ir_value_t factor, tpurt_dtype_t dtype) {
  if (factor == IR_NONE) return x;
  const ir_type_t* t = ir_value_type(ctx->func, x);
  if (!t) return IR_NONE;
  ir_value_t wide = lower_cast(ctx, x, TPURT_DTYPE_F32);
  ir_value_t f = lower_broadcast_to(ctx, factor, t->rank, t->dims);
  return lower_cast(ctx, ir_mul(ctx->func, wide, f), dtype);
}

/* A plain [N.., heads, rows, last] tensor as [B, heads, rows, last]. */
static ir_value_t to_bnth(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int64_t heads, int64_t rows,
                          int64_t last) {
  if (p->nb) return x;
  int64_t dims[4] = {1, heads, rows, last};
  return ir_reshape(ctx->func, x, 4, dims);
}

/* The inverse of to_bnth. */
static ir_value_t from_bnth(lower_ctx_t* ctx, const sdpa_t* p, ir_value_t x, int64_t heads, int64_t rows,
                            int64_t last) {
  if (p->nb) return x;
  int64_t dims[3] = {heads, rows, last};
  return ir_reshape(ctx->func, x, 3, dims);
}

/* The bias arg as cuDNN's [B or 1, H or 1, L, S] in the input type: its own
** batch and head dims are kept (cuDNN broadcasts a 1 there), the rows and
** keys are broadcast in full. A bool mask becomes 0 / a large negative. */
static ir_value_t bias_bnts(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p) {
  ir_func_t* f = ctx->func;
  const tpurt_tensor_t* bm = lower_meta(ctx, a->bias);
  ir_value_t b = lower_tensor(ctx, a->bias);
  int32_t plain = p->nb + 3, off = plain - bm->rank;
  int64_t dims[4] = {1, 1, p->l, p->s}, map[TPURT_MAX_RANK];
  if (p->nb && off <= 0) dims[0] = bm->sizes[0 - off];
  if (off <= p->nb) dims[1] = bm->sizes[p->nb - off];
  for (int32_t j = 0; j < bm->rank; ++j) map[j] = j + off + (1 - p->nb); /* plain dim -> BNTS dim */
  if (bm->dtype == TPURT_DTYPE_BOOL) {
    /* -2^41 (bf16) and -2^15 (f16): exact in the type, far below any score
    ** and far from the type's limit, so sums with it stay finite */
    double masked = p->dtype == TPURT_DTYPE_BF16 ? -2199023255552.0 : -32768.0;
    ir_value_t zero = ir_splat(f, p->dtype, bm->rank, bm->sizes, 0.0);
    ir_value_t neg = ir_splat(f, p->dtype, bm->rank, bm->sizes, masked);
    b = ir_select(f, b, zero, neg);
  } else {
    b = lower_cast(ctx, b, p->dtype);
  }
  const ir_type_t* t = ir_value_type(f, b);
  if (t && t->rank == 4 && memcmp(t->dims, dims, sizeof(dims)) == 0) return b;
  return ir_broadcast_in_dim(f, b, 4, dims, map);
}

/* Dot dimension numbers of one matmul in BNTH: contract lhs dim |lc| with
** rhs dim |rc|, batch over (B, N). */
static void put_dot_dims(tpurt_strbuf_t* json, const char* name, int lc, int rc) {
  tpurt_strbuf_printf(json,
                      ",\"%s\":{\"lhs_contracting_dimensions\":[\"%d\"],"
                      "\"rhs_contracting_dimensions\":[\"%d\"],"
                      "\"lhs_batch_dimensions\":[\"0\",\"1\"],\"rhs_batch_dimensions\":[\"0\",\"1\"]}",
                      name, lc, rc);
}

/* The GpuBackendConfig JSON of a forward or backward call. The algorithm
** block asks for cuDNN's frontend with tensor ops and lets XLA size the
** workspace; the intermediate shape is the [B, N, T, S] scores. */
static char* backend_config(const sdpa_t* p, double scale, bool causal, bool backward) {
  tpurt_strbuf_t json = {0};
  tpurt_strbuf_puts(&json,
                    "{\"operation_queue_id\":\"0\",\"cudnn_fmha_backend_config\":{"
                    "\"algorithm\":{\"algo_id\":\"0\",\"math_type\":\"TENSOR_OP_MATH\","
                    "\"tuning_knobs\":{\"17\":\"1\",\"24\":\"0\"},\"is_cudnn_frontend\":true,"
                    "\"workspace_size\":\"0\"},");
  tpurt_strbuf_printf(&json, "\"fmha_scale\":%.17g,", scale);
  tpurt_strbuf_printf(&json,
                      "\"intermediate_tensor_shape\":{\"element_type\":\"%s\","
                      "\"dimensions\":[\"%lld\",\"%lld\",\"%lld\",\"%lld\"],\"tuple_shapes\":[],",
                      p->dtype == TPURT_DTYPE_BF16 ? "BF16" : "F16", (long long)p->n, (long long)p->h,
                      (long long)p->l, (long long)p->s);
  tpurt_strbuf_puts(&json,
                    "\"layout\":{\"dim_level_types\":[],\"dim_unique\":[],\"dim_ordered\":[],"
                    "\"minor_to_major\":[\"3\",\"2\",\"1\",\"0\"],\"tiles\":[],"
                    "\"element_size_in_bits\":\"0\","
                    "\"memory_space\":\"0\",\"index_primitive_type\":\"PRIMITIVE_TYPE_INVALID\","
                    "\"pointer_primitive_type\":\"PRIMITIVE_TYPE_INVALID\","
                    "\"dynamic_shape_metadata_prefix_bytes\":\"0\"},"
                    "\"is_dynamic_dimension\":[false,false,false,false]},");
  tpurt_strbuf_printf(&json, "\"is_flash_attention\":true,\"mask_type\":\"%s\"",
                      causal ? "CAUSAL" : "NO_MASK");
  if (backward) {
    put_dot_dims(&json, "bmm1_grad_gemm1_dot_dimension_numbers", 2, 2); /* dK = dS^T Q */
    put_dot_dims(&json, "bmm1_grad_gemm2_dot_dimension_numbers", 3, 2); /* dQ = dS K */
    put_dot_dims(&json, "bmm2_grad_gemm1_dot_dimension_numbers", 2, 2); /* dV = P^T dO */
    put_dot_dims(&json, "bmm2_grad_gemm2_dot_dimension_numbers", 3, 3); /* dP = dO V^T */
  } else {
    put_dot_dims(&json, "bmm1_dot_dimension_numbers", 3, 3); /* S = Q K^T */
    put_dot_dims(&json, "bmm2_dot_dimension_numbers", 3, 2); /* O = P V */
  }
  tpurt_strbuf_puts(&json,
                    ",\"dropout_rate\":0,\"seed\":0,\"sliding_window_length\":0,\"max_seg_per_batch\":1,"
                    "\"is_paged_attention\":false}}");
  return json.data; /* the caller frees it */
}

void sdpa_cudnn_forward(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t* out_o,
                        ir_value_t* out_lse) {
  bool has_bias = !lower_is_none(ctx, a->bias);
  ir_value_t factor = scale_factor(ctx, a, p);
  ir_value_t ops[4] = {
      to_bnth(ctx, p, scaled(ctx, lower_tensor(ctx, a->q), factor, p->dtype), p->h, p->l, p->d),
      to_bnth(ctx, p, lower_tensor(ctx, a->k), p->hk, p->s, p->d),
      to_bnth(ctx, p, lower_tensor(ctx, a->v), p->hk, p->s, p->dv),
      has_bias ? bias_bnts(ctx, a, p) : IR_NONE,
  };
  int64_t o_dims[4] = {p->n, p->h, p->l, p->dv}, stat_dims[3] = {p->n, p->h, p->l}, none = 0;
  ir_type_t types[3] = {ir_type_make(p->dtype, 4, o_dims), ir_type_make(TPURT_DTYPE_F32, 3, stat_dims),
                        ir_type_make(TPURT_DTYPE_U8, 1, &none)};
  char* config = backend_config(p, config_scale(p), lower_bool(ctx, a->causal, false), false);
  ir_value_t res[3];
  ir_custom_call(ctx->func, has_bias ? "__cudnn$fmhaScaleBiasSoftmax" : "__cudnn$fmhaSoftmax", ops,
                 has_bias ? 4 : 3, types, 3, config, 2, res);
  free(config);
  *out_o = from_bnth(ctx, p, res[0], p->h, p->l, p->dv);
  *out_lse = res[1];
}

void sdpa_cudnn_backward(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, int32_t grad_arg,
                         int32_t out_arg, int32_t lse_arg, ir_value_t* out_dq, ir_value_t* out_dk,
                         ir_value_t* out_dv) {
  bool has_bias = !lower_is_none(ctx, a->bias);
  ir_value_t factor = scale_factor(ctx, a, p);
  ir_value_t ops[7];
  int32_t n = 0;
  ops[n++] = to_bnth(ctx, p, scaled(ctx, lower_tensor(ctx, a->q), factor, p->dtype), p->h, p->l, p->d);
  ops[n++] = to_bnth(ctx, p, lower_tensor(ctx, a->k), p->hk, p->s, p->d);
  ops[n++] = to_bnth(ctx, p, lower_tensor(ctx, a->v), p->hk, p->s, p->dv);
  ops[n++] = lower_cast(ctx, lower_tensor(ctx, lse_arg), TPURT_DTYPE_F32);
  ops[n++] = to_bnth(ctx, p, lower_cast(ctx, lower_tensor(ctx, grad_arg), p->dtype), p->h, p->l, p->dv);
  if (has_bias) ops[n++] = bias_bnts(ctx, a, p);
  ops[n++] = to_bnth(ctx, p, lower_cast(ctx, lower_tensor(ctx, out_arg), p->dtype), p->h, p->l, p->dv);
  int64_t dq_dims[4] = {p->n, p->h, p->l, p->d}, dk_dims[4] = {p->n, p->hk, p->s, p->d};
  int64_t dv_dims[4] = {p->n, p->hk, p->s, p->dv}, none = 0;
  ir_type_t types[4] = {ir_type_make(p->dtype, 4, dq_dims), ir_type_make(p->dtype, 4, dk_dims),
                        ir_type_make(p->dtype, 4, dv_dims), ir_type_make(TPURT_DTYPE_U8, 1, &none)};
  char* config = backend_config(p, config_scale(p), lower_bool(ctx, a->causal, false), true);
  ir_value_t res[4];
  ir_custom_call(ctx->func, has_bias ? "__cudnn$fmhaScaleBiasSoftmaxBackward" : "__cudnn$fmhaSoftmaxBackward",
                 ops, n, types, 4, config, 2, res);
  free(config);
  *out_dq = scaled(ctx, from_bnth(ctx, p, res[0], p->h, p->l, p->d), factor, p->dtype); /* d/dq of q*f */
  *out_dk = from_bnth(ctx, p, res[1], p->hk, p->s, p->d);
  *out_dv = from_bnth(ctx, p, res[2], p->hk, p->s, p->dv);
}
