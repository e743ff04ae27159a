/* attention_flash.c: aten::_scaled_dot_product_flash_attention, the fused op
** of PyTorch's flash backend. diffusers' "_native_flash" attention backend
** calls it directly for the output and its logsumexp, which its context
** parallel ring needs to merge the blocks of every rank (its "native"
** backend refuses return_lse). The op is the overrideable fused op of
** attention.c without an attn_bias:
**   flash:        (query, key, value, dropout_p, is_causal, return_debug_mask, *, scale?)
**   overrideable: (query, key, value, attn_bias?, dropout_p, is_causal, return_debug_mask, *, scale?)
** with the same nine results (output, logsumexp [N, H, L] f32, cum_seq_q/k,
** max_q/k, rng state, unused, debug mask). So the rule runs attention.c's
** row with a None bias put in at position 3: one lowering of the attention
** math for every fused op (its checks, blocking and cuDNN path). */
#include <string.h>

#include "lower.h"

#define FLASH_ARGS 7 /* the flash schema's arguments */
#define BIAS_POS 3   /* where the overrideable schema has attn_bias */

static TPURT_MUST_USE tpurt_status_t lower_flash_forward(lower_ctx_t* ctx) {
  if (ctx->num_args < FLASH_ARGS - 1 || ctx->num_args > FLASH_ARGS)
    return lower_error(TPURT_INVALID_ARGUMENT,
                       "_scaled_dot_product_flash_attention: expected %d arguments, got %d", FLASH_ARGS,
                       (int)ctx->num_args);
  lower_rule_t scratch;
  const lower_rule_t* rule = lower_find("aten::_scaled_dot_product_fused_attention_overrideable", &scratch);
  if (!rule) return lower_error(TPURT_INTERNAL, "the overrideable fused attention rule is missing");
  /* The glue's flat args are scalars and tensors here (no lists): one per
  ** schema argument. The None bias goes after them, so every flat index the
  ** engine knows (its runtime parameters) stays what it was. */
  int32_t flat = ctx->arg_index[ctx->num_args - 1] + 1;
  tpurt_arg_t args[FLASH_ARGS + 1];
  if (flat > FLASH_ARGS) return lower_error(TPURT_INTERNAL, "_scaled_dot_product_flash_attention: list args");
  memcpy(args, ctx->args, sizeof(args[0]) * (size_t)flat);
  memset(&args[flat], 0, sizeof(args[flat])); /* TPURT_ARG_NONE */
  int32_t index[LOWER_MAX_ARGS], num_args = ctx->num_args;
  memcpy(index, ctx->arg_index, sizeof(index[0]) * (size_t)num_args);
  const tpurt_arg_t* saved_args = ctx->args;
  ctx->args = args;
  for (int32_t i = num_args; i > BIAS_POS; --i) ctx->arg_index[i] = index[i - 1];
  ctx->arg_index[BIAS_POS] = flat;
  ctx->num_args = num_args + 1;
  tpurt_status_t status = lower_rule_run(rule, ctx);
  ctx->args = saved_args;
  memcpy(ctx->arg_index, index, sizeof(index[0]) * (size_t)num_args);
  ctx->num_args = num_args;
  return status;
}

/* Sorted by name. */
const lower_rule_t lower_flash_rules[] = {
    LOWER_FN("aten::_scaled_dot_product_flash_attention", lower_flash_forward),
    LOWER_END,
};
