/* attention_cuda_test.c: SDPA lowered for a CUDA platform. The platform
** name is injected into a lowering context built by hand (no GPU, no
** plugin needed): supported calls must print the cuDNN fused attention
** custom call with the right target, mask kind and scale, forward and
** backward; unsupported ones (f32, odd head dims, non-square causal, a
** wanted bias gradient, another platform) must keep the StableHLO lowering.
**
** With TORCH_TPU_PJRT_PLUGIN set (make ctest), every module that takes the
** StableHLO path is also compiled by the CPU plugin, and every cuDNN module
** must get through its parser and HLO conversion, failing only for want of a
** kernel for the target (the CPU has none). */
#include "../base/base.h"
#include "../ir/ir.h"
#include "../lower/lower.h"
#include "../pjrt/pjrt.h"
#include "test.h"

#define BF16 TPURT_DTYPE_BF16
#define F16 TPURT_DTYPE_F16
#define F32 TPURT_DTYPE_F32
#define BOOL TPURT_DTYPE_BOOL

#define FWD "aten::_scaled_dot_product_fused_attention_overrideable"
#define BWD "aten::_scaled_dot_product_fused_attention_overrideable_backward"

/* The call: [N, H, L, D] query, [N, Hk, S, D] key and value. */
typedef struct sdpa_case_s {
  const char* platform;
  tpurt_dtype_t dtype;
  int64_t n, h, hk, l, s, d;
  bool causal;
  int32_t bias_rank; /* 0: none; else a [.., L, S] tensor of this rank */
  tpurt_dtype_t bias_dtype;
  bool want_bias_grad;
  double scale; /* 0: None */
  bool three_d; /* no batch dim */
} sdpa_case_t;

typedef struct harness_s {
  lower_ctx_t ctx;
  tpurt_arg_t args[24];
  int64_t mask[4];
} harness_t;

static ir_value_t read_param(lower_ctx_t* ctx, int32_t flat) {
  if (ctx->tensor_values[flat] == IR_NONE) {
    const tpurt_tensor_t* t = &ctx->args[flat].u.tensor;
    ctx->tensor_values[flat] = ir_param(ctx->func, ir_type_make(t->dtype, t->rank, t->sizes));
  }
  return ctx->tensor_values[flat];
}

static tpurt_arg_t tensor(tpurt_dtype_t dtype, int32_t rank, const int64_t* sizes) {
  tpurt_arg_t a = {.kind = TPURT_ARG_TENSOR};
  a.u.tensor.dtype = dtype;
  a.u.tensor.rank = rank;
  int64_t stride = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    a.u.tensor.sizes[i] = sizes[i];
    a.u.tensor.strides[i] = stride;
    stride *= sizes[i];
  }
  return a;
}

/* [N, heads, rows, last] or, for 3-d calls, [heads, rows, last]. */
static tpurt_arg_t bnth(const sdpa_case_t* c, tpurt_dtype_t dtype, int64_t heads, int64_t rows,
                        int64_t last) {
  int64_t dims[4] = {c->n, heads, rows, last};
  return c->three_d ? tensor(dtype, 3, dims + 1) : tensor(dtype, 4, dims);
}

static tpurt_arg_t number(tpurt_arg_kind_t kind, double f) {
  tpurt_arg_t a = {.kind = kind};
  if (kind == TPURT_ARG_FLOAT) {
    a.u.scalar.dtype = TPURT_DTYPE_F64;
    a.u.scalar.f = f;
  } else {
    a.u.i = (int64_t)f;
  }
  return a;
}

static tpurt_arg_t bias_arg(const sdpa_case_t* c) {
  if (!c->bias_rank) return (tpurt_arg_t){.kind = TPURT_ARG_NONE};
  int64_t dims[4] = {1, c->h, c->l, c->s}; /* [1, H, L, S], the last bias_rank of them */
  return tensor(c->bias_dtype, c->bias_rank, dims + 4 - c->bias_rank);
}

/* Lowers the forward or backward of |c| and returns the printed module
** (NULL on failure, reported). */
static char* lower_case(const sdpa_case_t* c, bool backward) {
  harness_t* hs = tpurt_xcalloc(1, sizeof(*hs));
  tpurt_arg_t* a = hs->args;
  int32_t n = 0;
  tpurt_arg_t q = bnth(c, c->dtype, c->h, c->l, c->d), k = bnth(c, c->dtype, c->hk, c->s, c->d),
              v = bnth(c, c->dtype, c->hk, c->s, c->d);
  tpurt_arg_t scale = c->scale ? number(TPURT_ARG_FLOAT, c->scale) : (tpurt_arg_t){.kind = TPURT_ARG_NONE};
  if (!backward) {
    a[n++] = q, a[n++] = k, a[n++] = v, a[n++] = bias_arg(c);
    a[n++] = number(TPURT_ARG_FLOAT, 0.0);      /* dropout_p */
    a[n++] = number(TPURT_ARG_BOOL, c->causal); /* is_causal */
    a[n++] = number(TPURT_ARG_BOOL, 0);         /* return_debug_mask */
    a[n++] = scale;
  } else {
    int64_t lse_dims[3] = {c->n, c->h, c->l}, none[1] = {0};
    a[n++] = bnth(c, c->dtype, c->h, c->l, c->d); /* grad_out */
    a[n++] = q, a[n++] = k, a[n++] = v, a[n++] = bias_arg(c);
    hs->mask[0] = hs->mask[1] = hs->mask[2] = 1;
    hs->mask[3] = c->want_bias_grad;
    a[n] = (tpurt_arg_t){.kind = TPURT_ARG_INT_LIST};
    a[n].u.ints.data = hs->mask;
    a[n++].u.ints.len = 4;
    a[n++] = bnth(c, c->dtype, c->h, c->l, c->d);   /* out */
    a[n++] = tensor(F32, 3, lse_dims);              /* logsumexp */
    a[n++] = (tpurt_arg_t){.kind = TPURT_ARG_NONE}; /* cum_seq_q */
    a[n++] = (tpurt_arg_t){.kind = TPURT_ARG_NONE}; /* cum_seq_k */
    a[n++] = number(TPURT_ARG_INT, (double)c->l);   /* max_q */
    a[n++] = number(TPURT_ARG_INT, (double)c->s);   /* max_k */
    a[n++] = number(TPURT_ARG_FLOAT, 0.0);          /* dropout_p */
    a[n++] = number(TPURT_ARG_BOOL, c->causal);     /* is_causal */
    a[n++] = tensor(TPURT_DTYPE_I64, 0, none);      /* philox_seed */
    a[n++] = tensor(TPURT_DTYPE_I64, 0, none);      /* philox_offset */
    a[n++] = scale;
  }
  lower_ctx_t* ctx = &hs->ctx;
  ctx->func = ir_func_create();
  ctx->op_name = backward ? BWD : FWD;
  ctx->platform = c->platform;
  ctx->args = a;
  ctx->num_args = n;
  for (int32_t i = 0; i < n; ++i) {
    ctx->arg_index[i] = i;
    ctx->tensor_values[i] = IR_NONE;
  }
  ctx->read_tensor = read_param;
  lower_rule_t scratch;
  const lower_rule_t* rule = lower_find(ctx->op_name, &scratch);
  char* text = NULL;
  tpurt_status_t s =
      rule ? lower_rule_run(rule, ctx) : tpurt_status_create(TPURT_NOT_FOUND, "no rule for %s", ctx->op_name);
  if (!s) {
    ir_value_t results[LOWER_MAX_FLAT_ARGS];
    int32_t nr = 0;
    for (int32_t r = 0; r < ctx->num_results; ++r)
      if (ctx->results[r] >= 0) results[nr++] = ctx->results[r];
    ir_func_set_results(ctx->func, results, nr);
    s = ir_func_status(ctx->func)
            ? tpurt_status_create(TPURT_INTERNAL, "%s", tpurt_status_message(ir_func_status(ctx->func)))
            : ir_func_print(ctx->func, &text, NULL);
  }
  if (s) {
    fprintf(stderr, "  lowering %s failed: %s\n", ctx->op_name, tpurt_status_message(s));
    tpurt_status_free(s);
  }
  ir_func_free(ctx->func);
  free(hs);
  return text;
}

/* Expects the module of |c| to be one cuDNN call to |target| (forward when
** !backward) with |mask_type| and, when given, the scale text |scale|. */
static void expect_cudnn(const sdpa_case_t* c, bool backward, const char* target, const char* mask_type,
                         const char* scale) {
  char* text = lower_case(c, backward);
  if (!text) {
    ++test_failures_;
    return;
  }
  char want[128], mask[64];
  snprintf(want, sizeof(want), "call_target_name = \"%s\"", target);
  snprintf(mask, sizeof(mask), "\\\"mask_type\\\":\\\"%s\\\"", mask_type);
  bool ok = strstr(text, want) && strstr(text, mask) && strstr(text, "\"stablehlo.custom_call\"");
  /* exactly one custom call, and none of the StableHLO softmax */
  const char* first = strstr(text, "stablehlo.custom_call");
  ok = ok && first && !strstr(first + 1, "stablehlo.custom_call") && !strstr(text, "stablehlo.exponential");
  ok = ok && strstr(text, backward ? "bmm2_grad_gemm1_dot_dimension_numbers" : "bmm1_dot_dimension_numbers");
  if (scale) {
    char s[64];
    snprintf(s, sizeof(s), "\\\"fmha_scale\\\":%s,", scale);
    ok = ok && strstr(text, s);
  }
  if (ok && test_plugin_state() == 1) {
    /* The CPU plugin parses the module and converts it to HLO (layouts,
    ** config string and all); only then does it miss a kernel for the target.
    ** Any other error is ours. */
    pjrt_executable_t* exe = NULL;
    tpurt_status_t st = pjrt_compile(text, strlen(text), &exe);
    const char* msg = st ? tpurt_status_message(st) : "";
    if (!st || !strstr(msg, "custom call") || !strstr(msg, target)) {
      fprintf(stderr, "  the CPU plugin should stop only at the missing %s kernel, got: %s\n", target,
              st ? msg : "a compiled program");
      ok = false;
    }
    tpurt_status_free(st);
    pjrt_executable_release(exe);
  }
  if (!ok) {
    fprintf(stderr, "  expected one %s (%s%s%s) call:\n%s", target, mask_type, scale ? ", scale " : "",
            scale ? scale : "", text);
    ++test_failures_;
  }
  free(text);
}

/* Expects the StableHLO lowering (no custom call), compiled by the CPU
** plugin when there is one. */
static void expect_generic(const sdpa_case_t* c, bool backward) {
  char* text = lower_case(c, backward);
  if (!text) {
    ++test_failures_;
    return;
  }
  if (strstr(text, "custom_call") || !strstr(text, "stablehlo.exponential")) {
    fprintf(stderr, "  expected the StableHLO lowering:\n%s", text);
    ++test_failures_;
  } else if (test_plugin_state() == 1) {
    pjrt_executable_t* exe = NULL;
    tpurt_status_t s = pjrt_compile(text, strlen(text), &exe);
    if (s) {
      fprintf(stderr, "  the plugin rejects the module: %s\n", tpurt_status_message(s));
      tpurt_status_free(s);
      ++test_failures_;
    }
    pjrt_executable_release(exe);
  }
  free(text);
}

static const sdpa_case_t kFlux = {
    .platform = "cuda", .dtype = BF16, .n = 1, .h = 4, .hk = 4, .l = 64, .s = 64, .d = 128};

TEST(CudnnSdpa_Forward) {
  sdpa_case_t c = kFlux;
  expect_cudnn(&c, false, "__cudnn$fmhaSoftmax", "NO_MASK", "0.088388347648318433");
  c.causal = true;
  expect_cudnn(&c, false, "__cudnn$fmhaSoftmax", "CAUSAL", NULL);
  c.causal = false;
  c.scale = 0.25; /* an explicit scale multiplies q: the config keeps 1/sqrt(d) */
  c.dtype = F16;
  expect_cudnn(&c, false, "__cudnn$fmhaSoftmax", "NO_MASK", "0.088388347648318433");
  char* text = lower_case(&c, false);
  EXPECT(text && strstr(text, "stablehlo.multiply"));
  free(text);
  c = kFlux;
  c.bias_rank = 4, c.bias_dtype = BOOL; /* a bool mask becomes a bias */
  expect_cudnn(&c, false, "__cudnn$fmhaScaleBiasSoftmax", "NO_MASK", NULL);
  c.bias_rank = 2, c.bias_dtype = F32, c.causal = true; /* [L, S] float bias, causal too */
  expect_cudnn(&c, false, "__cudnn$fmhaScaleBiasSoftmax", "CAUSAL", NULL);
  c = kFlux;
  c.hk = 2, c.three_d = true, c.d = 64; /* grouped query attention, no batch dim */
  expect_cudnn(&c, false, "__cudnn$fmhaSoftmax", "NO_MASK", "0.125");
}

TEST(CudnnSdpa_Backward) {
  sdpa_case_t c = kFlux;
  expect_cudnn(&c, true, "__cudnn$fmhaSoftmaxBackward", "NO_MASK", "0.088388347648318433");
  c.causal = true;
  expect_cudnn(&c, true, "__cudnn$fmhaSoftmaxBackward", "CAUSAL", NULL);
  c.bias_rank = 4, c.bias_dtype = BOOL;
  expect_cudnn(&c, true, "__cudnn$fmhaScaleBiasSoftmaxBackward", "CAUSAL", NULL);
  c = kFlux;
  c.bias_rank = 3, c.bias_dtype = BF16, c.want_bias_grad = false, c.scale = 0.5;
  expect_cudnn(&c, true, "__cudnn$fmhaScaleBiasSoftmaxBackward", "NO_MASK", "0.088388347648318433");
}

/* The cuDNN call's operands and results as XLA expects them. */
TEST(CudnnSdpa_Signature) {
  sdpa_case_t c = kFlux;
  c.n = 2, c.h = 8, c.hk = 2, c.l = 32, c.s = 48, c.bias_rank = 4, c.bias_dtype = BOOL;
  char* text = lower_case(&c, false);
  ASSERT(text);
  EXPECT(strstr(text,
                ": (tensor<2x8x32x128xbf16>, tensor<2x2x48x128xbf16>, tensor<2x2x48x128xbf16>, "
                "tensor<1x8x32x48xbf16>) -> (tensor<2x8x32x128xbf16>, tensor<2x8x32xf32>, "
                "tensor<0xui8>)"));
  EXPECT(strstr(text, "\\\"dimensions\\\":[\\\"2\\\",\\\"8\\\",\\\"32\\\",\\\"48\\\"]"));
  free(text);
  text = lower_case(&c, true);
  ASSERT(text);
  /* q, k, v, stats, d_output, bias, output -> dq, dk, dv, workspace */
  EXPECT(strstr(text,
                ": (tensor<2x8x32x128xbf16>, tensor<2x2x48x128xbf16>, tensor<2x2x48x128xbf16>, "
                "tensor<2x8x32xf32>, tensor<2x8x32x128xbf16>, tensor<1x8x32x48xbf16>, "
                "tensor<2x8x32x128xbf16>) -> (tensor<2x8x32x128xbf16>, tensor<2x2x48x128xbf16>, "
                "tensor<2x2x48x128xbf16>, tensor<0xui8>)"));
  free(text);
}

TEST(CudnnSdpa_Unsupported) {
  sdpa_case_t c = kFlux;
  c.l = c.s = 16;
  c.dtype = F32; /* no f32 flash kernel */
  expect_generic(&c, false);
  expect_generic(&c, true);
  c = kFlux, c.l = c.s = 16;
  c.d = 60; /* not a multiple of 8 */
  expect_generic(&c, false);
  c.d = 160; /* over 128 */
  expect_generic(&c, false);
  c = kFlux, c.l = 16, c.s = 24, c.causal = true; /* causal, not square */
  expect_generic(&c, false);
  expect_generic(&c, true);
  c = kFlux, c.l = c.s = 16, c.bias_rank = 4, c.bias_dtype = BF16, c.want_bias_grad = true;
  expect_generic(&c, true);                                            /* the bias gradient */
  c = kFlux, c.l = 15, c.s = 16, c.bias_rank = 4, c.bias_dtype = BOOL; /* odd length with a bias */
  expect_generic(&c, false);
  c = kFlux, c.l = c.s = 16;
  c.platform = "cpu";
  expect_generic(&c, false);
  expect_generic(&c, true);
  c.platform = "";
  expect_generic(&c, false);
}

TEST_MAIN(TEST_CASE(CudnnSdpa_Forward), TEST_CASE(CudnnSdpa_Backward), TEST_CASE(CudnnSdpa_Signature),
          TEST_CASE(CudnnSdpa_Unsupported))
