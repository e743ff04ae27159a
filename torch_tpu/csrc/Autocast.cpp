// Autocast.cpp: torch.autocast("tpu"). PyTorch keeps its autocast op lists in
// ATen/autocast_mode.h for backends to register (its own registrations cover
// CPU, CUDA, XPU, MPS... but not PrivateUse1); this registers the same lists
// for AutocastPrivateUse1, so "tpu" casts exactly as CUDA does:
//   lower precision: matmuls, convolutions, linear, baddbmm... run in the
//                    autocast dtype (bf16 by default, see device.py);
//   fp32:            norms, softmax, losses, pow... run in float32;
//   promote:         addcmul, cat-like ops run in the widest input dtype.
// Every other op falls through to the tpu kernels unchanged.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

using at::Scalar;
using at::ScalarType;
using at::Tensor;
using c10::IntArrayRef;

// The op-list macros name the redispatch function through ADD_NS.
#define ADD_NS(RAW_OP) at::RAW_OP

#define TPU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(TPU_LOWER_PRECISION_FP)
  AT_FORALL_FP32(TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_PROMOTE)
}
