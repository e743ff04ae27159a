// Attention.cpp: which kernel scaled_dot_product_attention runs on tpu.
//
// scaled_dot_product_attention is CompositeImplicit: it asks the device's
// _fused_sdp_choice_stub for a backend and calls that backend's op. For tpu
// the answer is the overrideable backend, whose op
// (_scaled_dot_product_fused_attention_overrideable and its _backward) the
// core lowers as ONE program each (csrc/lower/attention.c); the glue's boxed
// kernel reaches it by name like any other op.
//
// The math backend (a decomposition into ops the core also lowers) is chosen
// where the fused op cannot express the call:
//  - dropout_p > 0: the fused op takes no Generator, so its dropout could not
//    draw from torch_tpu's RNG; the math path calls aten::dropout, which does.
//  - shapes the fused op does not take: q/k/v not all 3-d or 4-d, different
//    batch sizes (math broadcasts them), a key/value head count other than the
//    query's unless enable_gqa (the fused op has no enable_gqa flag: it infers
//    grouping from the shapes, so without the flag math keeps PyTorch's
//    broadcasting and errors), mismatched head or sequence dims (math raises
//    PyTorch's own errors), or non-float inputs.
//  - the user disabled the overrideable backend (torch.nn.attention.sdpa_kernel)
//    and the flash one (sdpa_kernel(FLASH_ATTENTION) selects the fused op).
// These are capability checks of the backend, not op semantics.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include "Common.h"

namespace torch_tpu {
namespace {

bool fused_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                 bool enable_gqa) {
  if (dropout_p > 0.0) return false;
  if (!at::isFloatingType(q.scalar_type())) return false;
  const int64_t rank = q.dim();
  if ((rank != 3 && rank != 4) || k.dim() != rank || v.dim() != rank) return false;
  const auto qs = q.sym_sizes(), ks = k.sym_sizes(), vs = v.sym_sizes();
  for (int64_t i = 0; i + 3 < rank; ++i) {
    if (ks[i] != qs[i] || vs[i] != qs[i]) return false;
  }
  const int64_t h = rank - 3;
  if (vs[h] != ks[h]) return false;
  if (ks[h] != qs[h] && !(enable_gqa && ks[h] != 0 && qs[h] % ks[h] == 0)) return false;
  return ks[rank - 1] == qs[rank - 1] && vs[rank - 2] == ks[rank - 2];
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& /*attn_mask*/, double dropout_p, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  const at::Context& context = at::globalContext();
  // sdpa_kernel(FLASH_ATTENTION) (user code; diffusers' "_native_flash"
  // backend) asks for a fused kernel: on tpu that is the overrideable one.
  const bool fused_wanted = context.userEnabledOverrideableSDP() || context.userEnabledFlashSDP();
  if (fused_wanted && fused_takes(query, key, value, dropout_p, enable_gqa)) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  TORCH_CHECK(context.userEnabledMathSDP(), "No viable backend for scaled_dot_product_attention was found.");
  return static_cast<int64_t>(at::SDPBackend::math);
}

}  // namespace
}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::fused_sdp_choice)
}  // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("_fused_sdp_choice", &torch_tpu::fused_sdp_choice); }
