/* ir_test.c: the StableHLO builder and printer: golden text per op form,
** shape inference, sticky errors, determinism.
**
** When the PJRT plugin loads (TORCH_TPU_PJRT_PLUGIN, as make ctest sets
** it), every golden module is also compiled by the plugin, proving that its
** parser and verifier accept our text; a few programs run too. With
** TPURT_IR_DUMP_DIR set, every golden module is written there as
** <test>.mlir, for checking with an outside StableHLO parser. */
#include "../ir/ir.h"

#include "../base/base.h"
#include "../pjrt/pjrt.h"
#include "test.h"

/* after test.h and the rooms' headers */
#include "ir_check.h"

#define HDR "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"

static void dump(const char* name, const char* text) {
  const char* dir = getenv("TPURT_IR_DUMP_DIR");
  if (!dir || !*dir) return;
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s.mlir", dir, name);
  FILE* f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* Compiles |text| with the plugin; the executable goes to *out_exe when
** asked for, otherwise it is released. */
static int compile_ok(const char* name, const char* text, pjrt_executable_t** out_exe) {
  int state = test_plugin_state();
  if (state == 0) return 1;
  if (state < 0) return 0;
  pjrt_executable_t* exe = NULL;
  tpurt_status_t s = pjrt_compile(text, strlen(text), &exe);
  if (s) {
    fprintf(stderr, "  %s: the plugin rejects the module: %s\n%s", name, tpurt_status_message(s), text);
    tpurt_status_free(s);
    return 0;
  }
  if (out_exe)
    *out_exe = exe;
  else
    pjrt_executable_release(exe);
  return 1;
}

/* Prints |func|, compares with |golden| (showing both on a mismatch), and
** destroys |func|. Returns false on mismatch. */
static int check_golden_(ir_func_t* func, const char* name, const char* golden, const char* file, int line) {
  char* text = NULL;
  size_t size = 0;
  tpurt_status_t status = ir_func_print(func, &text, &size);
  int ok = 1;
  if (status) {
    fprintf(stderr, "  %s:%d: %s: print failed: %s\n", file, line, name, tpurt_status_message(status));
    tpurt_status_free(status);
    ok = 0;
  } else {
    dump(name, text);
    if (size != strlen(text) || strcmp(text, golden) != 0) {
      fprintf(stderr, "  %s:%d: %s: printed text differs.\n--- expected\n%s--- got\n%s---\n", file, line,
              name, golden, text);
      ok = 0;
    }
    if (!compile_ok(name, text, NULL)) ok = 0;
  }
  free(text);
  ir_func_free(func);
  if (!ok) ++test_failures_;
  return ok;
}
#define CHECK_GOLDEN(func, name, golden) check_golden_((func), (name), (golden), __FILE__, __LINE__)

static ir_type_t T(tpurt_dtype_t dtype, int32_t rank, int64_t d0, int64_t d1, int64_t d2) {
  int64_t dims[3] = {d0, d1, d2};
  return ir_type_make(dtype, rank, dims);
}

#define F32 TPURT_DTYPE_F32
#define I64 TPURT_DTYPE_I64
#define I32 TPURT_DTYPE_I32

/*===------------------------------------------------------------------===*/

TEST(Ir_Types) {
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_BOOL), "i1") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_U8), "ui8") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_I8), "i8") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_I16), "i16") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_I32), "i32") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_I64), "i64") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_F16), "f16") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_BF16), "bf16") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_F32), "f32") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_F64), "f64") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_U16), "ui16") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_U32), "ui32") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_U64), "ui64") == 0);
  ir_type_t a = T(F32, 2, 2, 3, 0), b = T(F32, 2, 2, 3, 0), c = T(F32, 2, 3, 2, 0);
  EXPECT(ir_type_equal(&a, &b));
  EXPECT(!ir_type_equal(&a, &c));
  EXPECT(ir_type_numel(&a) == 6);
  ir_type_t s = ir_type_scalar(I64);
  EXPECT(s.rank == 0 && ir_type_numel(&s) == 1);
}

TEST(Ir_Add) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 1, 4, 0, 0));
  ir_value_t s = ir_param(f, ir_type_scalar(F32));
  (void)s;
  ir_value_t y = ir_binary(f, IR_OP_ADD, x, x);
  ir_func_set_results(f, &y, 1);
  EXPECT(ir_func_num_params(f) == 2);
  EXPECT(ir_func_num_ops(f) == 1);
  EXPECT(ir_value_type(f, y)->rank == 1 && ir_value_type(f, y)->dims[0] == 4);
  CHECK_GOLDEN(f, "add",
               HDR
               "  func.func public @main(%v0: tensor<4xf32>, %v1: tensor<f32>) -> (tensor<4xf32>) {\n"
               "    %v2 = \"stablehlo.add\"(%v0, %v0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
               "    \"func.return\"(%v2) : (tensor<4xf32>) -> ()\n"
               "  }\n"
               "}\n");
}

TEST(Ir_BroadcastReshapeTranspose) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 1, 3, 0, 0));
  int64_t bdims[3] = {2, 1, 3};
  int64_t bmap[1] = {1};
  ir_value_t b = ir_broadcast_in_dim(f, x, 3, bdims, bmap); /* into 2x1x3 at dim 1 */
  EXPECT(b == IR_NONE); /* operand dim 0 (3) cannot go to result dim 1 (1) */
  EXPECT(ir_func_status(f) != NULL);
  ir_func_free(f);

  f = ir_func_create();
  x = ir_param(f, T(F32, 1, 3, 0, 0));
  int64_t bmap2[1] = {2};
  b = ir_broadcast_in_dim(f, x, 3, bdims, bmap2);
  int64_t rdims[2] = {2, 3};
  ir_value_t r = ir_reshape(f, b, 2, rdims);
  int64_t perm[2] = {1, 0};
  ir_value_t t = ir_transpose(f, r, perm);
  ir_value_t s = ir_param(f, ir_type_scalar(F32));
  ir_value_t sb = ir_broadcast_in_dim(f, s, 2, (int64_t[]){3, 2}, NULL);
  ir_value_t y = ir_binary(f, IR_OP_MULTIPLY, t, sb);
  EXPECT(ir_value_type(f, t)->dims[0] == 3 && ir_value_type(f, t)->dims[1] == 2);
  ir_func_set_results(f, &y, 1);
  CHECK_GOLDEN(
      f, "broadcast_reshape_transpose",
      HDR
      "  func.func public @main(%v0: tensor<3xf32>, %v4: tensor<f32>) -> (tensor<3x2xf32>) {\n"
      "    %v1 = \"stablehlo.broadcast_in_dim\"(%v0) {broadcast_dimensions = array<i64: 2>} : "
      "(tensor<3xf32>) -> tensor<2x1x3xf32>\n"
      "    %v2 = \"stablehlo.reshape\"(%v1) : (tensor<2x1x3xf32>) -> tensor<2x3xf32>\n"
      "    %v3 = \"stablehlo.transpose\"(%v2) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> "
      "tensor<3x2xf32>\n"
      "    %v5 = \"stablehlo.broadcast_in_dim\"(%v4) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> "
      "tensor<3x2xf32>\n"
      "    %v6 = \"stablehlo.multiply\"(%v3, %v5) : (tensor<3x2xf32>, tensor<3x2xf32>) -> "
      "tensor<3x2xf32>\n"
      "    \"func.return\"(%v6) : (tensor<3x2xf32>) -> ()\n"
      "  }\n"
      "}\n");
}

TEST(Ir_DotGeneral) {
  ir_func_t* f = ir_func_create();
  ir_value_t a = ir_param(f, T(TPURT_DTYPE_BF16, 3, 4, 8, 32));
  ir_value_t b = ir_param(f, T(TPURT_DTYPE_BF16, 3, 4, 32, 16));
  ir_dot_dims_t d = {0};
  d.num_batch = 1;
  d.lhs_batch[0] = 0;
  d.rhs_batch[0] = 0;
  d.num_contract = 1;
  d.lhs_contract[0] = 2;
  d.rhs_contract[0] = 1;
  ir_value_t y = ir_dot_general(f, a, b, &d, F32);
  const ir_type_t* ty = ir_value_type(f, y);
  EXPECT(ty->rank == 3 && ty->dims[0] == 4 && ty->dims[1] == 8 && ty->dims[2] == 16 && ty->dtype == F32);
  /* a plain matmul: no batching dims */
  ir_value_t m = ir_param(f, T(F32, 2, 8, 16, 0));
  ir_value_t n = ir_param(f, T(F32, 2, 5, 16, 0));
  ir_dot_dims_t d2 = {0};
  d2.num_contract = 1;
  d2.lhs_contract[0] = 1;
  d2.rhs_contract[0] = 1;
  ir_value_t mm = ir_dot_general(f, m, n, &d2, F32);
  EXPECT(ir_value_type(f, mm)->dims[0] == 8 && ir_value_type(f, mm)->dims[1] == 5);
  ir_value_t outs[2] = {y, mm};
  ir_func_set_results(f, outs, 2);
  CHECK_GOLDEN(
      f, "dot_general",
      HDR
      "  func.func public @main(%v0: tensor<4x8x32xbf16>, %v1: tensor<4x32x16xbf16>, %v3: tensor<8x16xf32>, "
      "%v4: "
      "tensor<5x16xf32>) -> (tensor<4x8x16xf32>, tensor<8x5xf32>) {\n"
      "    %v2 = \"stablehlo.dot_general\"(%v0, %v1) {dot_dimension_numbers = "
      "#stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], "
      "lhs_contracting_dimensions = "
      "[2], rhs_contracting_dimensions = [1]>} : (tensor<4x8x32xbf16>, tensor<4x32x16xbf16>) -> "
      "tensor<4x8x16xf32>\n"
      "    %v5 = \"stablehlo.dot_general\"(%v3, %v4) {dot_dimension_numbers = "
      "#stablehlo.dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions "
      "= "
      "[1], rhs_contracting_dimensions = [1]>} : (tensor<8x16xf32>, tensor<5x16xf32>) -> tensor<8x5xf32>\n"
      "    \"func.return\"(%v2, %v5) : (tensor<4x8x16xf32>, tensor<8x5xf32>) -> ()\n"
      "  }\n"
      "}\n");
}

TEST(Ir_Reduce) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 2, 4, 8, 0));
  ir_value_t zero = ir_constant_f64(f, F32, 0.0);
  int64_t dims[1] = {1};
  ir_value_t s = ir_reduce(f, x, zero, dims, 1, IR_REDUCE_ADD);
  EXPECT(ir_value_type(f, s)->rank == 1 && ir_value_type(f, s)->dims[0] == 4);
  ir_value_t b = ir_param(f, T(TPURT_DTYPE_BOOL, 2, 4, 8, 0));
  ir_value_t yes = ir_constant_i64(f, TPURT_DTYPE_BOOL, 1);
  int64_t all_dims[2] = {0, 1};
  ir_value_t all = ir_reduce(f, b, yes, all_dims, 2, IR_REDUCE_MUL); /* bool: and */
  EXPECT(ir_value_type(f, all)->rank == 0);
  ir_value_t outs[2] = {s, all};
  ir_func_set_results(f, outs, 2);
  CHECK_GOLDEN(
      f, "reduce",
      HDR
      "  func.func public @main(%v0: tensor<4x8xf32>, %v6: tensor<4x8xi1>) -> (tensor<4xf32>, tensor<i1>) {\n"
      "    %v1 = \"stablehlo.constant\"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>\n"
      "    %v2 = \"stablehlo.reduce\"(%v0, %v1) ({\n"
      "    ^bb0(%v3: tensor<f32>, %v4: tensor<f32>):\n"
      "      %v5 = \"stablehlo.add\"(%v3, %v4) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
      "      \"stablehlo.return\"(%v5) : (tensor<f32>) -> ()\n"
      "    }) {dimensions = array<i64: 1>} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>\n"
      "    %v7 = \"stablehlo.constant\"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>\n"
      "    %v8 = \"stablehlo.reduce\"(%v6, %v7) ({\n"
      "    ^bb0(%v9: tensor<i1>, %v10: tensor<i1>):\n"
      "      %v11 = \"stablehlo.and\"(%v9, %v10) : (tensor<i1>, tensor<i1>) -> tensor<i1>\n"
      "      \"stablehlo.return\"(%v11) : (tensor<i1>) -> ()\n"
      "    }) {dimensions = array<i64: 0, 1>} : (tensor<4x8xi1>, tensor<i1>) -> tensor<i1>\n"
      "    \"func.return\"(%v2, %v8) : (tensor<4xf32>, tensor<i1>) -> ()\n"
      "  }\n"
      "}\n");
}

/* argmax along dim 1: reduce (values, iota) with a compare/select body */
TEST(Ir_ReduceArgmax) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 2, 4, 8, 0));
  ir_value_t idx = ir_iota(f, T(I32, 2, 4, 8, 0), 1);
  ir_value_t ninf = ir_constant_f64(f, F32, -INFINITY);
  ir_value_t zero = ir_constant_i64(f, I32, 0);
  ir_value_t inputs[2] = {x, idx}, inits[2] = {ninf, zero}, results[2], args[4];
  int64_t dims[1] = {1};
  ir_reduce_begin(f, inputs, inits, 2, dims, 1, results, args);
  /* args: acc value, acc index, elem value, elem index */
  ir_value_t gt = ir_compare(f, IR_GT, args[2], args[0]);
  ir_value_t v = ir_select(f, gt, args[2], args[0]);
  ir_value_t i = ir_select(f, gt, args[3], args[1]);
  ir_value_t body[2] = {v, i};
  ir_region_end(f, body, 2);
  EXPECT(ir_func_status(f) == NULL);
  EXPECT(ir_value_type(f, results[1])->dtype == I32 && ir_value_type(f, results[1])->dims[0] == 4);
  ir_func_set_results(f, &results[1], 1);
  CHECK_GOLDEN(
      f, "reduce_argmax",
      HDR
      "  func.func public @main(%v0: tensor<4x8xf32>) -> (tensor<4xi32>) {\n"
      "    %v1 = \"stablehlo.iota\"() {iota_dimension = 1 : i64} : () -> tensor<4x8xi32>\n"
      "    %v2 = \"stablehlo.constant\"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>\n"
      "    %v3 = \"stablehlo.constant\"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>\n"
      "    %v4:2 = \"stablehlo.reduce\"(%v0, %v1, %v2, %v3) ({\n"
      "    ^bb0(%v6: tensor<f32>, %v7: tensor<i32>, %v8: tensor<f32>, %v9: tensor<i32>):\n"
      "      %v10 = \"stablehlo.compare\"(%v8, %v6) {comparison_direction = #stablehlo<comparison_direction "
      "GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
      "      %v11 = \"stablehlo.select\"(%v10, %v8, %v6) : (tensor<i1>, tensor<f32>, tensor<f32>) -> "
      "tensor<f32>\n"
      "      %v12 = \"stablehlo.select\"(%v10, %v9, %v7) : (tensor<i1>, tensor<i32>, tensor<i32>) -> "
      "tensor<i32>\n"
      "      \"stablehlo.return\"(%v11, %v12) : (tensor<f32>, tensor<i32>) -> ()\n"
      "    }) {dimensions = array<i64: 1>} : (tensor<4x8xf32>, tensor<4x8xi32>, tensor<f32>, tensor<i32>) -> "
      "(tensor<4xf32>, tensor<4xi32>)\n"
      "    \"func.return\"(%v4#1) : (tensor<4xi32>) -> ()\n"
      "  }\n"
      "}\n");
}

/* The builder's number writers print what printf's %lld and %0*llX print. */
TEST(Ir_NumbersPrintAsPrintf) {
  const int64_t ints[] = {0, 1, -1, 9, 10, -10, 1234567, INT64_MAX, INT64_MIN, (int64_t)INT32_MIN - 1};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); ++i) {
    char want[32];
    snprintf(want, sizeof(want), "%lld", (long long)ints[i]);
    tpurt_strbuf_t buf = {0};
    tpurt_strbuf_put_i64(&buf, ints[i]);
    EXPECT(buf.data && strcmp(buf.data, want) == 0);
    tpurt_strbuf_free(&buf);
  }
  const uint64_t bits[] = {0, 0x3F800000u, 0xFFFFu, 0x7FC00000u, 0x8000000000000001ull, UINT64_MAX};
  const int32_t digits[] = {4, 8, 16};
  for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); ++i)
    for (size_t d = 0; d < 3; ++d) {
      uint64_t v = digits[d] == 16 ? bits[i] : bits[i] & ((1ull << (4 * digits[d])) - 1);
      char want[32];
      snprintf(want, sizeof(want), "%0*llX", (int)digits[d], (unsigned long long)v);
      tpurt_strbuf_t buf = {0};
      tpurt_strbuf_put_hex(&buf, v, digits[d]);
      EXPECT(buf.data && strcmp(buf.data, want) == 0);
      tpurt_strbuf_free(&buf);
    }
}

TEST(Ir_Constants) {
  ir_func_t* f = ir_func_create();
  ir_value_t vs[16];
  int n = 0;
  vs[n++] = ir_constant_f64(f, F32, 0.5);
  vs[n++] = ir_constant_f64(f, TPURT_DTYPE_BF16, 1.0);
  vs[n++] = ir_constant_f64(f, TPURT_DTYPE_F16, 0.1);
  vs[n++] = ir_constant_f64(f, TPURT_DTYPE_F64, 0.1);
  vs[n++] = ir_constant_f64(f, F32, INFINITY);
  vs[n++] = ir_constant_f64(f, TPURT_DTYPE_BF16, -INFINITY);
  vs[n++] = ir_constant_f64(f, F32, NAN);
  vs[n++] = ir_constant_i64(f, I64, -9223372036854775807LL - 1);
  vs[n++] = ir_constant_i64(f, TPURT_DTYPE_BOOL, 1);
  vs[n++] = ir_constant_i64(f, TPURT_DTYPE_BOOL, 0);
  vs[n++] = ir_constant_i64(f, TPURT_DTYPE_U64, -1);
  vs[n++] = ir_constant_i64(f, TPURT_DTYPE_U8, 255);
  vs[n++] = ir_constant_i64(f, TPURT_DTYPE_I8, -128);
  vs[n++] = ir_constant_i64_array(f, T(I64, 2, 2, 2, 0), (const int64_t[]){1, 2, 3, 4});
  vs[n++] = ir_constant_i64_array(f, T(I32, 2, 0, 3, 0), NULL);
  vs[n++] = ir_constant_f64(f, TPURT_DTYPE_F16, 65520.0); /* rounds to inf */
  ir_func_set_results(f, vs, n);
  CHECK_GOLDEN(
      f, "constants",
      HDR
      "  func.func public @main() -> (tensor<f32>, tensor<bf16>, tensor<f16>, tensor<f64>, tensor<f32>, "
      "tensor<bf16>, tensor<f32>, tensor<i64>, tensor<i1>, tensor<i1>, tensor<ui64>, tensor<ui8>, "
      "tensor<i8>, tensor<2x2xi64>, tensor<0x3xi32>, tensor<f16>) {\n"
      "    %v0 = \"stablehlo.constant\"() {value = dense<0x3F000000> : tensor<f32>} : () -> tensor<f32>\n"
      "    %v1 = \"stablehlo.constant\"() {value = dense<0x3F80> : tensor<bf16>} : () -> tensor<bf16>\n"
      "    %v2 = \"stablehlo.constant\"() {value = dense<0x2E66> : tensor<f16>} : () -> tensor<f16>\n"
      "    %v3 = \"stablehlo.constant\"() {value = dense<0x3FB999999999999A> : tensor<f64>} : () -> "
      "tensor<f64>\n"
      "    %v4 = \"stablehlo.constant\"() {value = dense<0x7F800000> : tensor<f32>} : () -> tensor<f32>\n"
      "    %v5 = \"stablehlo.constant\"() {value = dense<0xFF80> : tensor<bf16>} : () -> tensor<bf16>\n"
      "    %v6 = \"stablehlo.constant\"() {value = dense<0x7FC00000> : tensor<f32>} : () -> tensor<f32>\n"
      "    %v7 = \"stablehlo.constant\"() {value = dense<-9223372036854775808> : tensor<i64>} : () -> "
      "tensor<i64>\n"
      "    %v8 = \"stablehlo.constant\"() {value = dense<true> : tensor<i1>} : () -> tensor<i1>\n"
      "    %v9 = \"stablehlo.constant\"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>\n"
      "    %v10 = \"stablehlo.constant\"() {value = dense<18446744073709551615> : tensor<ui64>} : () -> "
      "tensor<ui64>\n"
      "    %v11 = \"stablehlo.constant\"() {value = dense<255> : tensor<ui8>} : () -> tensor<ui8>\n"
      "    %v12 = \"stablehlo.constant\"() {value = dense<-128> : tensor<i8>} : () -> tensor<i8>\n"
      "    %v13 = \"stablehlo.constant\"() {value = dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>} : () -> "
      "tensor<2x2xi64>\n"
      "    %v14 = \"stablehlo.constant\"() {value = dense<> : tensor<0x3xi32>} : () -> tensor<0x3xi32>\n"
      "    %v15 = \"stablehlo.constant\"() {value = dense<0x7C00> : tensor<f16>} : () -> tensor<f16>\n"
      "    \"func.return\"(%v0, %v1, %v2, %v3, %v4, %v5, %v6, %v7, %v8, %v9, %v10, %v11, %v12, %v13, %v14, "
      "%v15) : (tensor<f32>, tensor<bf16>, tensor<f16>, tensor<f64>, tensor<f32>, tensor<bf16>, tensor<f32>, "
      "tensor<i64>, tensor<i1>, tensor<i1>, tensor<ui64>, tensor<ui8>, tensor<i8>, tensor<2x2xi64>, "
      "tensor<0x3xi32>, tensor<f16>) -> ()\n"
      "  }\n"
      "}\n");
}

/* bf16 and f16 bit patterns, checked value by value */
TEST(Ir_FloatBits) {
  static const struct {
    tpurt_dtype_t dtype;
    double value;
    const char* literal;
  } kCases[] = {
      {TPURT_DTYPE_BF16, 1.0, "0x3F80"},
      {TPURT_DTYPE_BF16, 0.5, "0x3F00"},
      {TPURT_DTYPE_BF16, -2.0, "0xC000"},
      {TPURT_DTYPE_BF16, 1.00390625, "0x3F80"}, /* tie 0x3F808000 -> even 0x3F80 */
      {TPURT_DTYPE_BF16, 1.01171875, "0x3F82"}, /* tie 0x3F818000 -> even 0x3F82 */
      {TPURT_DTYPE_BF16, 3.4e38, "0x7F80"},     /* rounds past the max to inf */
      {TPURT_DTYPE_F16, 1.0, "0x3C00"},
      {TPURT_DTYPE_F16, -2.0, "0xC000"},
      {TPURT_DTYPE_F16, 65504.0, "0x7BFF"},                 /* max */
      {TPURT_DTYPE_F16, 65519.0, "0x7BFF"},                 /* below the halfway point */
      {TPURT_DTYPE_F16, 6.103515625e-05, "0x0400"},         /* smallest normal */
      {TPURT_DTYPE_F16, 5.960464477539063e-08, "0x0001"},   /* smallest subnormal */
      {TPURT_DTYPE_F16, 2.98023223876953125e-08, "0x0000"}, /* half of it: tie to even 0 */
      {TPURT_DTYPE_F16, 2.98023223876953126e-08 * 1.0000001, "0x0001"},
      {TPURT_DTYPE_F16, 1e-10, "0x0000"},
      {TPURT_DTYPE_F16, -0.0, "0x8000"},
      {TPURT_DTYPE_F16, INFINITY, "0x7C00"},
      {TPURT_DTYPE_F16, 0.333251953125, "0x3555"},
      {TPURT_DTYPE_F32, -0.0, "0x80000000"},
      {TPURT_DTYPE_F32, 0.1, "0x3DCCCCCD"},
      {TPURT_DTYPE_F64, 1.0, "0x3FF0000000000000"},
      {TPURT_DTYPE_F64, -INFINITY, "0xFFF0000000000000"},
  };
  for (size_t k = 0; k < sizeof(kCases) / sizeof(kCases[0]); ++k) {
    ir_func_t* f = ir_func_create();
    ir_value_t c = ir_constant_f64(f, kCases[k].dtype, kCases[k].value);
    ir_func_set_results(f, &c, 1);
    char* text = NULL;
    ASSERT_OK(ir_func_print(f, &text, NULL));
    char want[64];
    snprintf(want, sizeof(want), "dense<%s>", kCases[k].literal);
    if (!strstr(text, want)) {
      fprintf(stderr, "  case %zu: %g as %s: expected %s in\n%s", k, kCases[k].value,
              ir_dtype_mlir_name(kCases[k].dtype), want, text);
      ++test_failures_;
    }
    free(text);
    ir_func_free(f);
  }
}

TEST(Ir_GatherScatter) {
  ir_func_t* f = ir_func_create();
  /* embedding: table 10x4, ids 3 -> 3x4 */
  ir_value_t table = ir_param(f, T(F32, 2, 10, 4, 0));
  ir_value_t ids = ir_param(f, T(I64, 1, 3, 0, 0));
  ir_gather_dims_t g = {0};
  g.num_offset_dims = 1;
  g.offset_dims[0] = 1;
  g.num_collapsed = 1;
  g.collapsed_slice_dims[0] = 0;
  g.num_start_index_map = 1;
  g.start_index_map[0] = 0;
  g.index_vector_dim = 1;
  g.slice_sizes[0] = 1;
  g.slice_sizes[1] = 4;
  ir_value_t rows = ir_gather(f, table, ids, &g);
  const ir_type_t* tr = ir_value_type(f, rows);
  EXPECT(tr && tr->rank == 2 && tr->dims[0] == 3 && tr->dims[1] == 4);
  /* index_add-style scatter of the rows back */
  ir_scatter_dims_t s = {0};
  s.num_update_window_dims = 1;
  s.update_window_dims[0] = 1;
  s.num_inserted = 1;
  s.inserted_window_dims[0] = 0;
  s.num_scatter_dims_to_operand = 1;
  s.scatter_dims_to_operand_dims[0] = 0;
  s.index_vector_dim = 1;
  ir_value_t args[2];
  ir_value_t out = ir_scatter_begin(f, table, ids, rows, &s, args);
  ir_value_t sum = ir_binary(f, IR_OP_ADD, args[0], args[1]);
  ir_region_end(f, &sum, 1);
  /* a gather with the offset dim first and a batch dim after: 2x5 ids */
  ir_value_t ids2 = ir_param(f, T(I32, 3, 2, 5, 1));
  ir_gather_dims_t g2 = {0};
  g2.num_offset_dims = 1;
  g2.offset_dims[0] = 0;
  g2.num_collapsed = 1;
  g2.collapsed_slice_dims[0] = 0;
  g2.num_start_index_map = 1;
  g2.start_index_map[0] = 0;
  g2.index_vector_dim = 2;
  g2.slice_sizes[0] = 1;
  g2.slice_sizes[1] = 2;
  g2.indices_are_sorted = true;
  ir_value_t rows2 = ir_gather(f, table, ids2, &g2);
  const ir_type_t* t2 = ir_value_type(f, rows2);
  EXPECT(t2 && t2->rank == 3 && t2->dims[0] == 2 && t2->dims[1] == 2 && t2->dims[2] == 5);
  ir_value_t outs[3] = {rows, out, rows2};
  ir_func_set_results(f, outs, 3);
  CHECK_GOLDEN(
      f, "gather_scatter",
      HDR
      "  func.func public @main(%v0: tensor<10x4xf32>, %v1: tensor<3xi64>, %v7: tensor<2x5x1xi32>) -> "
      "(tensor<3x4xf32>, tensor<10x4xf32>, tensor<2x2x5xf32>) {\n"
      "    %v2 = \"stablehlo.gather\"(%v0, %v1) {dimension_numbers = #stablehlo.gather<offset_dims = [1], "
      "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, "
      "4>, indices_are_sorted = false} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>\n"
      "    %v3 = \"stablehlo.scatter\"(%v0, %v1, %v2) ({\n"
      "    ^bb0(%v4: tensor<f32>, %v5: tensor<f32>):\n"
      "      %v6 = \"stablehlo.add\"(%v4, %v5) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
      "      \"stablehlo.return\"(%v6) : (tensor<f32>) -> ()\n"
      "    }) {scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims "
      "= [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = false, "
      "unique_indices = false} : (tensor<10x4xf32>, tensor<3xi64>, tensor<3x4xf32>) -> tensor<10x4xf32>\n"
      "    %v8 = \"stablehlo.gather\"(%v0, %v7) {dimension_numbers = #stablehlo.gather<offset_dims = [0], "
      "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, slice_sizes = array<i64: 1, "
      "2>, indices_are_sorted = true} : (tensor<10x4xf32>, tensor<2x5x1xi32>) -> tensor<2x2x5xf32>\n"
      "    \"func.return\"(%v2, %v3, %v8) : (tensor<3x4xf32>, tensor<10x4xf32>, tensor<2x2x5xf32>) -> ()\n"
      "  }\n"
      "}\n");
}

TEST(Ir_ShapeOps) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 2, 4, 6, 0));
  /* slice [1:4:2, 0:6:4] -> 2x2 */
  ir_value_t sl = ir_slice(f, x, (int64_t[]){1, 0}, (int64_t[]){4, 6}, (int64_t[]){2, 4});
  EXPECT(ir_value_type(f, sl)->dims[0] == 2 && ir_value_type(f, sl)->dims[1] == 2);
  /* pad: low 1, high -1, interior 1 on dim 0 (4 -> 1 - 1 + 3 + 4 = 7) */
  ir_value_t zero = ir_constant_f64(f, F32, 0.0);
  ir_value_t pd = ir_pad(f, x, zero, (int64_t[]){1, 0}, (int64_t[]){-1, 2}, (int64_t[]){1, 0});
  EXPECT(ir_value_type(f, pd)->dims[0] == 7 && ir_value_type(f, pd)->dims[1] == 8);
  /* concatenate along 1 */
  ir_value_t cat = ir_concatenate(f, (ir_value_t[]){x, x, x}, 3, 1);
  EXPECT(ir_value_type(f, cat)->dims[1] == 18);
  /* iota, convert, compare, select */
  ir_value_t io = ir_iota(f, T(I32, 2, 4, 6, 0), 0);
  ir_value_t cv = ir_convert(f, io, F32);
  ir_value_t lt = ir_compare(f, IR_LT, x, cv);
  ir_value_t sel = ir_select(f, lt, x, cv);
  ir_value_t u = ir_param(f, T(TPURT_DTYPE_U8, 1, 3, 0, 0));
  ir_value_t ge = ir_compare(f, IR_GE, u, u);
  ir_value_t eq = ir_compare(f, IR_EQ, ge, ge);
  ir_value_t fin = ir_is_finite(f, x);
  /* dynamic slice / update, reverse, clamp */
  ir_value_t i0 = ir_constant_i64(f, I64, 1);
  ir_value_t ds = ir_dynamic_slice(f, x, (ir_value_t[]){i0, i0}, (int64_t[]){2, 3});
  ir_value_t dus = ir_dynamic_update_slice(f, x, ds, (ir_value_t[]){i0, i0});
  ir_value_t rv = ir_reverse(f, x, (int64_t[]){1}, 1);
  ir_value_t one = ir_constant_f64(f, F32, 1.0);
  ir_value_t cl = ir_clamp(f, zero, x, one);
  ir_value_t ex = ir_unary(f, IR_OP_EXPONENTIAL, cl);
  /* bitcast f32 -> i32, and f32 -> 4xui8 */
  ir_value_t bc = ir_bitcast_convert(f, x, T(I32, 2, 4, 6, 0));
  int64_t bytes[3] = {4, 6, 4};
  ir_value_t bc8 = ir_bitcast_convert(f, x, ir_type_make(TPURT_DTYPE_U8, 3, bytes));
  ir_value_t back = ir_bitcast_convert(f, bc8, T(F32, 2, 4, 6, 0));
  /* rng */
  ir_value_t state = ir_param(f, T(TPURT_DTYPE_U64, 1, 2, 0, 0));
  ir_value_t new_state, bits;
  ir_rng_bit_generator(f, state, T(TPURT_DTYPE_U32, 2, 4, 6, 0), &new_state, &bits);
  ir_value_t shifted = ir_binary(f, IR_OP_SHIFT_RIGHT_LOGICAL, bits, bits);
  ir_value_t outs[] = {sl, pd, cat, sel, eq, fin, dus, rv, ex, bc, back, new_state, shifted};
  ir_func_set_results(f, outs, (int32_t)(sizeof(outs) / sizeof(outs[0])));
  EXPECT(ir_func_status(f) == NULL);
  CHECK_GOLDEN(
      f, "shape_ops",
      HDR
      "  func.func public @main(%v0: tensor<4x6xf32>, %v9: tensor<3xui8>, %v23: tensor<2xui64>) -> "
      "(tensor<2x2xf32>, tensor<7x8xf32>, tensor<4x18xf32>, tensor<4x6xf32>, tensor<3xi1>, tensor<4x6xi1>, "
      "tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xi32>, tensor<4x6xf32>, tensor<2xui64>, "
      "tensor<4x6xui32>) {\n"
      "    %v1 = \"stablehlo.slice\"(%v0) {start_indices = array<i64: 1, 0>, limit_indices = array<i64: 4, "
      "6>, strides = array<i64: 2, 4>} : (tensor<4x6xf32>) -> tensor<2x2xf32>\n"
      "    %v2 = \"stablehlo.constant\"() {value = dense<0x00000000> : tensor<f32>} : () -> tensor<f32>\n"
      "    %v3 = \"stablehlo.pad\"(%v0, %v2) {edge_padding_low = array<i64: 1, 0>, edge_padding_high = "
      "array<i64: -1, 2>, interior_padding = array<i64: 1, 0>} : (tensor<4x6xf32>, tensor<f32>) -> "
      "tensor<7x8xf32>\n"
      "    %v4 = \"stablehlo.concatenate\"(%v0, %v0, %v0) {dimension = 1 : i64} : (tensor<4x6xf32>, "
      "tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x18xf32>\n"
      "    %v5 = \"stablehlo.iota\"() {iota_dimension = 0 : i64} : () -> tensor<4x6xi32>\n"
      "    %v6 = \"stablehlo.convert\"(%v5) : (tensor<4x6xi32>) -> tensor<4x6xf32>\n"
      "    %v7 = \"stablehlo.compare\"(%v0, %v6) {comparison_direction = #stablehlo<comparison_direction "
      "LT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4x6xf32>, tensor<4x6xf32>) -> "
      "tensor<4x6xi1>\n"
      "    %v8 = \"stablehlo.select\"(%v7, %v0, %v6) : (tensor<4x6xi1>, tensor<4x6xf32>, tensor<4x6xf32>) -> "
      "tensor<4x6xf32>\n"
      "    %v10 = \"stablehlo.compare\"(%v9, %v9) {comparison_direction = #stablehlo<comparison_direction "
      "GE>, compare_type = #stablehlo<comparison_type UNSIGNED>} : (tensor<3xui8>, tensor<3xui8>) -> "
      "tensor<3xi1>\n"
      "    %v11 = \"stablehlo.compare\"(%v10, %v10) {comparison_direction = #stablehlo<comparison_direction "
      "EQ>, compare_type = #stablehlo<comparison_type UNSIGNED>} : (tensor<3xi1>, tensor<3xi1>) -> "
      "tensor<3xi1>\n"
      "    %v12 = \"stablehlo.is_finite\"(%v0) : (tensor<4x6xf32>) -> tensor<4x6xi1>\n"
      "    %v13 = \"stablehlo.constant\"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>\n"
      "    %v14 = \"stablehlo.dynamic_slice\"(%v0, %v13, %v13) {slice_sizes = array<i64: 2, 3>} : "
      "(tensor<4x6xf32>, tensor<i64>, tensor<i64>) -> tensor<2x3xf32>\n"
      "    %v15 = \"stablehlo.dynamic_update_slice\"(%v0, %v14, %v13, %v13) : (tensor<4x6xf32>, "
      "tensor<2x3xf32>, tensor<i64>, tensor<i64>) -> tensor<4x6xf32>\n"
      "    %v16 = \"stablehlo.reverse\"(%v0) {dimensions = array<i64: 1>} : (tensor<4x6xf32>) -> "
      "tensor<4x6xf32>\n"
      "    %v17 = \"stablehlo.constant\"() {value = dense<0x3F800000> : tensor<f32>} : () -> tensor<f32>\n"
      "    %v18 = \"stablehlo.clamp\"(%v2, %v0, %v17) : (tensor<f32>, tensor<4x6xf32>, tensor<f32>) -> "
      "tensor<4x6xf32>\n"
      "    %v19 = \"stablehlo.exponential\"(%v18) : (tensor<4x6xf32>) -> tensor<4x6xf32>\n"
      "    %v20 = \"stablehlo.bitcast_convert\"(%v0) : (tensor<4x6xf32>) -> tensor<4x6xi32>\n"
      "    %v21 = \"stablehlo.bitcast_convert\"(%v0) : (tensor<4x6xf32>) -> tensor<4x6x4xui8>\n"
      "    %v22 = \"stablehlo.bitcast_convert\"(%v21) : (tensor<4x6x4xui8>) -> tensor<4x6xf32>\n"
      "    %v24:2 = \"stablehlo.rng_bit_generator\"(%v23) {rng_algorithm = #stablehlo<rng_algorithm "
      "THREE_FRY>} : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4x6xui32>)\n"
      "    %v26 = \"stablehlo.shift_right_logical\"(%v24#1, %v24#1) : (tensor<4x6xui32>, tensor<4x6xui32>) "
      "-> tensor<4x6xui32>\n"
      "    \"func.return\"(%v1, %v3, %v4, %v8, %v11, %v12, %v15, %v16, %v19, %v20, %v22, %v24#0, %v26) : "
      "(tensor<2x2xf32>, tensor<7x8xf32>, tensor<4x18xf32>, tensor<4x6xf32>, tensor<3xi1>, tensor<4x6xi1>, "
      "tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xi32>, tensor<4x6xf32>, tensor<2xui64>, "
      "tensor<4x6xui32>) -> ()\n"
      "  }\n"
      "}\n");
}

/* The op list: every op has a distinct name that maps back to it, and the
** elementwise builders refuse an op of another class (it would get the
** wrong result type) instead of printing it. */
TEST(Ir_OpList) {
  for (int i = IR_OP_NONE + 1; i < (int)IR_OP_COUNT; ++i) {
    const char* name = ir_op_name((ir_op_t)i);
    EXPECT(strncmp(name, "stablehlo.", 10) == 0 || strncmp(name, "chlo.", 5) == 0 ||
           strncmp(name, "func.", 5) == 0);
    EXPECT(ir_op_from_name(name) == (ir_op_t)i);
    ir_op_class_t klass = ir_op_class((ir_op_t)i);
    if (klass == IR_OP_CLASS_UNARY) EXPECT(ir_op_arity((ir_op_t)i) == 1);
    if (klass == IR_OP_CLASS_BINARY) EXPECT(ir_op_arity((ir_op_t)i) == 2);
  }
  EXPECT(strcmp(ir_op_name(IR_OP_ADD), "stablehlo.add") == 0);
  EXPECT(strcmp(ir_op_name(IR_OP_ERF), "chlo.erf") == 0);
  EXPECT(strcmp(ir_op_name(IR_OP_COUNT), "?") == 0);
  EXPECT(strcmp(ir_op_name(IR_OP_NONE), "?") == 0);
  EXPECT(ir_op_from_name("stablehlo.no_such_op") == IR_OP_NONE);
  EXPECT(ir_unary(NULL, IR_OP_NONE, 0) == IR_NONE);
  EXPECT(ir_op_arity(IR_OP_SELECT) == 3 && ir_op_arity(IR_OP_CONCATENATE) == -1);

  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 1, 4, 0, 0));
  EXPECT(ir_unary(f, IR_OP_ADD, x) == IR_NONE);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "ir_unary: stablehlo.add") != NULL);
  ir_func_free(f);
  f = ir_func_create();
  x = ir_param(f, T(F32, 1, 4, 0, 0));
  EXPECT(ir_binary(f, IR_OP_COMPARE, x, x) == IR_NONE);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "ir_binary: stablehlo.compare") != NULL);
  ir_func_free(f);
  f = ir_func_create();
  x = ir_param(f, T(F32, 1, 4, 0, 0));
  EXPECT(ir_complex_part(f, IR_OP_NEGATE, x) == IR_NONE);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "stablehlo.negate is not real, imag or abs") !=
         NULL);
  ir_func_free(f);

  /* the named helpers build the op they name */
  f = ir_func_create();
  x = ir_param(f, T(F32, 1, 4, 0, 0));
  ir_value_t r = ir_sub(f, ir_mul(f, x, ir_const_like(f, x, 2.0)), ir_rsqrt(f, x));
  ir_func_set_results(f, &r, 1);
  char* text = NULL;
  ASSERT_OK(ir_func_print(f, &text, NULL));
  EXPECT(strstr(text, "\"stablehlo.multiply\"") && strstr(text, "\"stablehlo.subtract\"") &&
         strstr(text, "\"stablehlo.rsqrt\"") && strstr(text, "\"stablehlo.broadcast_in_dim\""));
  free(text);
  ir_func_free(f);
}

TEST(Ir_StickyError) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 2, 2, 3, 0));
  int64_t dims[1] = {5};
  ir_value_t r = ir_reshape(f, x, 1, dims);
  EXPECT(r == IR_NONE);
  tpurt_borrowed_status_t st = ir_func_status(f);
  EXPECT(tpurt_status_code(st) == TPURT_INTERNAL);
  EXPECT(strcmp(tpurt_status_message(st),
                "stablehlo.reshape: tensor<2x3xf32> has 6 elements but tensor<5xf32> has 5") == 0);
  int32_t ops = ir_func_num_ops(f);
  /* later ops on IR_NONE stay IR_NONE, add nothing, keep the first error */
  ir_value_t y = ir_binary(f, IR_OP_ADD, r, r);
  EXPECT(y == IR_NONE);
  EXPECT(ir_unary(f, IR_OP_NEGATE, y) == IR_NONE);
  ir_value_t res[2], args[4];
  ir_reduce_begin(f, &y, &y, 1, (int64_t[]){0}, 1, res, args);
  EXPECT(res[0] == IR_NONE && args[0] == IR_NONE && args[1] == IR_NONE);
  ir_value_t body = ir_binary(f, IR_OP_ADD, args[0], args[1]);
  ir_region_end(f, &body, 1);
  EXPECT(ir_reduce(f, y, y, (int64_t[]){0}, 1, IR_REDUCE_ADD) == IR_NONE);
  /* a second, different error is not recorded over the first */
  EXPECT(ir_transpose(f, x, (int64_t[]){0, 0}) == IR_NONE);
  EXPECT(ir_func_num_ops(f) == ops);
  EXPECT(ir_func_status(f) == st);
  ir_func_fail_consume(f, tpurt_status_create(TPURT_UNKNOWN, "ignored"));
  EXPECT(ir_func_status(f) == st);
  char* text = (char*)1;
  tpurt_status_t ps = ir_func_print(f, &text, NULL);
  EXPECT(tpurt_status_code(ps) == TPURT_INTERNAL && text == NULL);
  EXPECT(strcmp(tpurt_status_message(ps), tpurt_status_message(st)) == 0);
  tpurt_status_free(ps);
  ir_func_free(f);
}

/* one message per kind of mistake */
TEST(Ir_Errors) {
  static const char* const kWant[] = {
      "stablehlo.add: operands must have the same type, got tensor<2x3xf32> and tensor<3x2xf32>",
      "stablehlo.broadcast_in_dim: operand dim 0 has size 2, result dim 0 has size 3 (tensor<2x3xf32> -> "
      "tensor<3x3xf32>)",
      "stablehlo.transpose: permutation repeats dimension 0",
      "stablehlo.slice: dim 1 of tensor<2x3xf32>: need 0 <= start <= limit <= 3 and stride >= 1, got start 0 "
      "limit 4 stride 1",
      "stablehlo.concatenate: operand 1 is tensor<3x2xf32>, which does not match tensor<2x3xf32> outside "
      "dimension 0",
      "stablehlo.dot_general: contracting dim pair 0: lhs dim 1 of tensor<2x3xf32> has size 3, rhs dim 1 of "
      "tensor<3x2xf32> has size 2",
      "stablehlo.reduce: dimensions[0] = 2 is outside [0, 2)",
      "stablehlo.select: pred must be tensor<i1> or tensor<2x3xi1>, got tensor<2x3xf32>",
      "stablehlo.pad: dim 0 of tensor<2x3xf32> padded by low -3 high 0 interior 0 has negative size -1",
      "stablehlo.reduce: region result 0 must be tensor<f32>, got tensor<2x3xf32>",
      "stablehlo.return: no region is open",
      "stablehlo.add: operand %v99 is not a value of this function (it has 3)",
      "ir_func_print: 1 region(s) still open (stablehlo.reduce)",
      "stablehlo.negate: operand %v6 is defined inside a region of stablehlo.reduce that is closed",
  };
  for (int k = 0; k < (int)(sizeof(kWant) / sizeof(kWant[0])); ++k) {
    ir_func_t* f = ir_func_create();
    ir_value_t a = ir_param(f, T(F32, 2, 2, 3, 0));
    ir_value_t b = ir_param(f, T(F32, 2, 3, 2, 0));
    ir_value_t z = ir_param(f, ir_type_scalar(F32));
    ir_value_t r = 0, res, args[2];
    tpurt_status_t printed = NULL;
    char* text = NULL;
    ir_dot_dims_t d = {0};
    switch (k) {
      case 0:
        r = ir_binary(f, IR_OP_ADD, a, b);
        break;
      case 1:
        r = ir_broadcast_in_dim(f, a, 2, (int64_t[]){3, 3}, (int64_t[]){0, 1});
        break;
      case 2:
        r = ir_transpose(f, a, (int64_t[]){0, 0});
        break;
      case 3:
        r = ir_slice(f, a, (int64_t[]){0, 0}, (int64_t[]){2, 4}, (int64_t[]){1, 1});
        break;
      case 4:
        r = ir_concatenate(f, (ir_value_t[]){a, b}, 2, 0);
        break;
      case 5:
        d.num_contract = 1;
        d.lhs_contract[0] = 1;
        d.rhs_contract[0] = 1;
        r = ir_dot_general(f, a, b, &d, F32);
        break;
      case 6:
        r = ir_reduce(f, a, z, (int64_t[]){2}, 1, IR_REDUCE_ADD);
        break;
      case 7:
        r = ir_select(f, a, a, a);
        break;
      case 8:
        r = ir_pad(f, a, z, (int64_t[]){-3, 0}, (int64_t[]){0, 0}, (int64_t[]){0, 0});
        break;
      case 9:
        ir_reduce_begin(f, &a, &z, 1, (int64_t[]){0}, 1, &res, args);
        ir_region_end(f, &a, 1);
        r = IR_NONE;
        break;
      case 10:
        ir_region_end(f, &a, 1);
        r = IR_NONE;
        break;
      case 11:
        r = ir_binary(f, IR_OP_ADD, a, 99);
        break;
      case 12:
        ir_reduce_begin(f, &a, &z, 1, (int64_t[]){0}, 1, &res, args);
        printed = ir_func_print(f, &text, NULL);
        r = IR_NONE;
        break;
      case 13: {
        ir_reduce_begin(f, &a, &z, 1, (int64_t[]){0}, 1, &res, args);
        ir_value_t inner = ir_binary(f, IR_OP_ADD, args[0], args[1]);
        ir_region_end(f, &inner, 1);
        EXPECT(ir_func_status(f) == NULL);
        r = ir_unary(f, IR_OP_NEGATE, inner);
        break;
      }
    }
    EXPECT(r == IR_NONE);
    tpurt_borrowed_status_t st = printed ? printed : ir_func_status(f);
    if (strcmp(tpurt_status_message(st), kWant[k]) != 0) {
      fprintf(stderr, "  case %d: expected message\n    %s\n  got\n    %s\n", k, kWant[k],
              tpurt_status_message(st));
      ++test_failures_;
    }
    tpurt_status_free(printed);
    free(text);
    ir_func_free(f);
  }
}

static ir_func_t* build_mixed(void) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 2, 4, 8, 0));
  ir_value_t zero = ir_constant_f64(f, F32, 0.0);
  ir_value_t s = ir_reduce(f, x, zero, (int64_t[]){1}, 1, IR_REDUCE_MAX);
  ir_value_t b = ir_broadcast_in_dim(f, s, 2, (int64_t[]){4, 8}, (int64_t[]){0});
  ir_value_t y = ir_binary(f, IR_OP_SUBTRACT, x, b);
  ir_value_t e = ir_unary(f, IR_OP_EXPONENTIAL, y);
  ir_func_set_results(f, &e, 1);
  return f;
}

TEST(Ir_Deterministic) {
  ir_func_t* f = build_mixed();
  ir_func_t* g = build_mixed();
  char *a = NULL, *b = NULL, *c = NULL;
  size_t na = 0, nb = 0, nc = 0;
  ASSERT_OK(ir_func_print(f, &a, &na));
  ASSERT_OK(ir_func_print(f, &b, &nb));
  ASSERT_OK(ir_func_print(g, &c, &nc));
  EXPECT(na == nb && memcmp(a, b, na) == 0);
  EXPECT(na == nc && memcmp(a, c, na) == 0);
  EXPECT(na == strlen(a));
  free(a);
  free(b);
  free(c);
  ir_func_free(f);
  ir_func_free(g);
}

/* ir_func_encode: the same bytes exactly when the printed text is the same */
static ir_func_t* build_binary(ir_op_t op, int64_t n, double constant) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 1, n, 0, 0));
  ir_value_t y = ir_binary(f, op, x, x);
  ir_value_t c = ir_constant_f64(f, F32, constant);
  const int64_t dims[1] = {n};
  ir_value_t r = ir_binary(f, op, y, ir_broadcast_in_dim(f, c, 1, dims, NULL));
  ir_func_set_results(f, &r, 1);
  return f;
}

static bool same_bytes(const char* a, size_t na, const char* b, size_t nb) {
  return na == nb && memcmp(a, b, na) == 0;
}

TEST(Ir_EncodingFollowsText) {
  ir_func_t* funcs[6] = {build_mixed(),
                         build_mixed(),
                         build_binary(IR_OP_ADD, 4, 1.0),
                         build_binary(IR_OP_MULTIPLY, 4, 1.0),
                         build_binary(IR_OP_ADD, 5, 1.0),
                         build_binary(IR_OP_ADD, 4, 2.0)};
  char *text[6], *code[6];
  size_t ntext[6], ncode[6];
  for (int i = 0; i < 6; ++i) {
    ASSERT_OK(ir_func_print(funcs[i], &text[i], &ntext[i]));
    ASSERT_OK(ir_func_encode(funcs[i], &code[i], &ncode[i]));
    EXPECT(ncode[i] > 0);
  }
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j)
      EXPECT(same_bytes(text[i], ntext[i], text[j], ntext[j]) ==
             same_bytes(code[i], ncode[i], code[j], ncode[j]));
  EXPECT(same_bytes(code[0], ncode[0], code[1], ncode[1]));
  for (int i = 0; i < 6; ++i) {
    free(text[i]);
    free(code[i]);
    ir_func_free(funcs[i]);
  }
  /* a function that does not print does not encode either */
  ir_func_t* bad = ir_func_create();
  ir_value_t x = ir_param(bad, T(F32, 1, 4, 0, 0));
  ir_value_t y = ir_param(bad, T(F32, 1, 5, 0, 0));
  ir_value_t r = ir_binary(bad, IR_OP_ADD, x, y);
  ir_func_set_results(bad, &r, 1);
  char* bytes = NULL;
  size_t n = 0;
  tpurt_status_t status = ir_func_encode(bad, &bytes, &n);
  EXPECT(status != NULL && bytes == NULL);
  tpurt_status_free(status);
  ir_func_free(bad);
}

/* many ops: arrays grow, early type pointers stay valid */
TEST(Ir_Large) {
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 1, 16, 0, 0));
  const ir_type_t* tx = ir_value_type(f, x);
  ir_value_t y = x;
  for (int i = 0; i < 20000; ++i) y = ir_binary(f, IR_OP_ADD, y, x);
  EXPECT(tx->dims[0] == 16 && tx->dtype == F32); /* an outgrown copy, still readable */
  EXPECT(ir_func_num_ops(f) == 20000);
  ir_func_set_results(f, &y, 1);
  char* text = NULL;
  size_t n = 0;
  ASSERT_OK(ir_func_print(f, &text, &n));
  EXPECT(n > 20000 * 60);
  free(text);
  ir_func_free(f);
}

/*===--- programs run on the plugin ---===*/

TEST(Ir_RunArgmax) {
  if (test_plugin_state() == 0) return;
  ASSERT(test_plugin_state() == 1);
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, T(F32, 2, 3, 4, 0));
  ir_value_t idx = ir_iota(f, T(I32, 2, 3, 4, 0), 1);
  ir_value_t inputs[2] = {x, idx}, inits[2], results[2], args[4];
  inits[0] = ir_constant_f64(f, F32, -INFINITY);
  inits[1] = ir_constant_i64(f, I32, 0);
  ir_reduce_begin(f, inputs, inits, 2, (int64_t[]){1}, 1, results, args);
  ir_value_t gt = ir_compare(f, IR_GT, args[2], args[0]);
  ir_value_t body[2] = {ir_select(f, gt, args[2], args[0]), ir_select(f, gt, args[3], args[1])};
  ir_region_end(f, body, 2);
  ir_func_set_results(f, results, 2);
  const float host[12] = {1, 5, 2, 9, 7, 1, 1, 8, -1, -0.5f, -3, -4};
  pjrt_buffer_t* in = NULL;
  ASSERT_OK(pjrt_buffer_from_host(0, F32, 2, (int64_t[]){3, 4}, host, &in));
  float maxes[3] = {0};
  int32_t where[3] = {0};
  void* hosts[2] = {maxes, where};
  size_t sizes[2] = {sizeof(maxes), sizeof(where)};
  EXPECT(run_check(f, &in, 1, hosts, sizes, 2) == 1);
  pjrt_buffer_release(in);
  EXPECT(maxes[0] == 9 && maxes[1] == 8 && maxes[2] == -0.5f);
  EXPECT(where[0] == 3 && where[1] == 3 && where[2] == 1);
}

/* constants come back from the device bit for bit */
TEST(Ir_RunConstants) {
  if (test_plugin_state() == 0) return;
  ASSERT(test_plugin_state() == 1);
  ir_func_t* f = ir_func_create();
  ir_value_t vs[8] = {
      ir_constant_f64(f, F32, 0.5),
      ir_constant_f64(f, TPURT_DTYPE_BF16, 1.0),
      ir_constant_f64(f, TPURT_DTYPE_F16, 0.1),
      ir_constant_f64(f, TPURT_DTYPE_F64, 0.1),
      ir_constant_f64(f, F32, -NAN),
      ir_constant_i64(f, TPURT_DTYPE_U64, -1),
      ir_constant_i64(f, TPURT_DTYPE_BOOL, 1),
      ir_constant_i64_array(f, T(I64, 2, 2, 2, 0), (const int64_t[]){1, -2, 3, INT64_MIN}),
  };
  ir_func_set_results(f, vs, 8);
  uint32_t f32 = 0, f32nan = 0;
  uint16_t bf16 = 0, f16 = 0;
  double f64 = 0;
  uint64_t u64 = 0;
  uint8_t b = 0;
  int64_t arr[4] = {0};
  void* hosts[8] = {&f32, &bf16, &f16, &f64, &f32nan, &u64, &b, arr};
  size_t sizes[8] = {4, 2, 2, 8, 4, 8, 1, sizeof(arr)};
  EXPECT(run_check(f, NULL, 0, hosts, sizes, 8) == 1);
  EXPECT(f32 == 0x3F000000u);
  EXPECT(bf16 == 0x3F80u);
  EXPECT(f16 == 0x2E66u);
  EXPECT(f64 == 0.1);
  EXPECT((f32nan & 0x7F800000u) == 0x7F800000u && (f32nan & 0x007FFFFFu) != 0);
  EXPECT(u64 == UINT64_MAX);
  EXPECT(b == 1);
  EXPECT(arr[0] == 1 && arr[1] == -2 && arr[2] == 3 && arr[3] == INT64_MIN);
}

TEST_MAIN(TEST_CASE(Ir_Types), TEST_CASE(Ir_Add), TEST_CASE(Ir_BroadcastReshapeTranspose),
          TEST_CASE(Ir_DotGeneral), TEST_CASE(Ir_Reduce), TEST_CASE(Ir_ReduceArgmax),
          TEST_CASE(Ir_NumbersPrintAsPrintf), TEST_CASE(Ir_Constants), TEST_CASE(Ir_FloatBits),
          TEST_CASE(Ir_GatherScatter), TEST_CASE(Ir_ShapeOps), TEST_CASE(Ir_StickyError),
          TEST_CASE(Ir_OpList), TEST_CASE(Ir_Errors), TEST_CASE(Ir_Deterministic),
          TEST_CASE(Ir_EncodingFollowsText), TEST_CASE(Ir_Large), TEST_CASE(Ir_RunArgmax),
          TEST_CASE(Ir_RunConstants))
