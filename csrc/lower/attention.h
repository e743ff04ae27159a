/* attention.h: what the two files of the attention family share: the
** schema positions and the problem of an SDPA call (attention.c, the
** StableHLO lowering every platform can run), and the cuDNN fused attention
** that attention_cudnn.c emits instead on a CUDA platform. */
#ifndef TPURT_LOWER_ATTENTION_H_
#define TPURT_LOWER_ATTENTION_H_

#include "lower.h"

/* Schema positions shared by forward and backward. */
typedef struct sdpa_args_s {
  int32_t q, k, v, bias, dropout, causal, scale;
} sdpa_args_t;

/* The problem, in the grouped layout, and the query rows being lowered. */
typedef struct sdpa_s {
  tpurt_dtype_t dtype, acc;
  int32_t nb; /* batch dims before the head dim: 0 or 1 */
  int64_t n, h, hk, g, l, s, d, dv;
  int32_t gd; /* 1 when the grouped layout has a G dim (g > 1) */
  int32_t w;  /* rank of the grouped scores [B = N * Hk, (G), rows, S] */
  int64_t lb; /* the query rows of the block being lowered */
} sdpa_t;

/* True when cuDNN fused attention (XLA's "__cudnn$fmha*" custom calls)
** can compute this call: the platform is CUDA, the type is bf16 or f16, the
** head dims are equal, a multiple of 8 and at most 128, causal attention is
** square, and a bias has even sequence lengths (cuDNN's backward needs it).
** TORCH_TPU_CUDNN_SDPA=0 turns the path off (read when an op is lowered:
** set it before the first call). */
bool sdpa_cudnn_supported(const lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p);
/* The forward as one custom call: the output [N.., H, L, Dv] (input dtype)
** and the logsumexp [N, H, L] (f32, what PyTorch's fused kernels return). */
void sdpa_cudnn_forward(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, ir_value_t* out_o,
                        ir_value_t* out_lse);
/* The backward as one custom call, from the saved output (arg |out_arg|),
** logsumexp (|lse_arg|) and the output gradient (|grad_arg|): dQ, dK, dV in
** the plain layout and input dtype. No bias gradient: the caller uses the
** StableHLO backward when one is wanted. */
void sdpa_cudnn_backward(lower_ctx_t* ctx, const sdpa_args_t* a, const sdpa_t* p, int32_t grad_arg,
                         int32_t out_arg, int32_t lse_arg, ir_value_t* out_dq, ir_value_t* out_dk,
                         ir_value_t* out_dv);

#endif /* TPURT_LOWER_ATTENTION_H_ */
