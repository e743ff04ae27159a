/* ir_sort_test.c: stablehlo.sort (ir_sort_begin): golden text, shape
** errors, and a stable descending sort with indices run on the plugin.
**
** As in ir_test.c, every golden module is also compiled by the plugin when
** TORCH_TPU_PJRT_PLUGIN names one (make ctest sets it). */
#include "../base/base.h"
#include "../ir/ir.h"
#include "../pjrt/pjrt.h"
#include "ir_check.h"
#include "test.h"

#define HDR "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
#define F32 TPURT_DTYPE_F32
#define I64 TPURT_DTYPE_I64

/* sort values of a 2x3 f32 along dim 1 with an i64 iota riding along */
static ir_func_t* build_sort(bool descending) {
  int64_t dims[2] = {2, 3};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 2, dims));
  ir_value_t idx = ir_iota(f, ir_type_make(I64, 2, dims), 1);
  ir_value_t inputs[2] = {x, idx}, results[2], args[4];
  ir_sort_begin(f, inputs, 2, 1, true, results, args);
  ir_value_t before = ir_compare(f, descending ? IR_GT : IR_LT, args[0], args[1]);
  ir_region_end(f, &before, 1);
  ir_func_set_results(f, results, 2);
  return f;
}

TEST(IrSort_Golden) {
  ir_func_t* f = build_sort(false);
  EXPECT(ir_func_status(f) == NULL);
  EXPECT(print_check(
      f,
      HDR
      "  func.func public @main(%v0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi64>) {\n"
      "    %v1 = \"stablehlo.iota\"() {iota_dimension = 1 : i64} : () -> tensor<2x3xi64>\n"
      "    %v2:2 = \"stablehlo.sort\"(%v0, %v1) ({\n"
      "    ^bb0(%v4: tensor<f32>, %v5: tensor<f32>, %v6: tensor<i64>, %v7: tensor<i64>):\n"
      "      %v8 = \"stablehlo.compare\"(%v4, %v5) {comparison_direction = #stablehlo<comparison_direction "
      "LT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
      "      \"stablehlo.return\"(%v8) : (tensor<i1>) -> ()\n"
      "    }) {dimension = 1 : i64, is_stable = true} : (tensor<2x3xf32>, tensor<2x3xi64>) -> "
      "(tensor<2x3xf32>, tensor<2x3xi64>)\n"
      "    \"func.return\"(%v2#0, %v2#1) : (tensor<2x3xf32>, tensor<2x3xi64>) -> ()\n"
      "  }\n"
      "}\n",
      NULL));
}

TEST(IrSort_Errors) {
  int64_t a[2] = {2, 3}, b[2] = {3, 2};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 2, a));
  ir_value_t y = ir_param(f, ir_type_make(F32, 2, b));
  ir_value_t inputs[2] = {x, y}, results[2], args[4];
  ir_sort_begin(f, inputs, 2, 0, false, results, args); /* shapes differ */
  ir_value_t t = ir_constant_i64(f, TPURT_DTYPE_BOOL, 1);
  ir_region_end(f, &t, 1);
  EXPECT(results[0] == IR_NONE && results[1] == IR_NONE);
  EXPECT(ir_func_status(f) != NULL);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "shapes must match") != NULL);
  ir_func_free(f);

  f = ir_func_create();
  x = ir_param(f, ir_type_make(F32, 2, a));
  ir_sort_begin(f, &x, 1, 2, false, results, args); /* dimension out of rank */
  ir_region_end(f, &t, 1);
  EXPECT(results[0] == IR_NONE);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "outside the rank") != NULL);
  ir_func_free(f);

  f = ir_func_create(); /* a comparator must return one i1 */
  x = ir_param(f, ir_type_make(F32, 2, a));
  ir_sort_begin(f, &x, 1, 0, false, results, args);
  ir_region_end(f, &args[0], 1);
  EXPECT(ir_func_status(f) != NULL);
  ir_func_free(f);
}

/* descending and stable: equal keys keep their order */
TEST(IrSort_RunDescendingStable) {
  if (test_plugin_state() == 0) return;
  ASSERT(test_plugin_state() == 1);
  pjrt_executable_t* exe = NULL;
  ASSERT(print_check(build_sort(true), NULL, &exe));
  const float host[6] = {1, 5, 1, -2, 7, 7};
  pjrt_buffer_t* in = NULL;
  ASSERT_OK(pjrt_buffer_from_host(0, F32, 2, (int64_t[]){2, 3}, host, &in));
  pjrt_buffer_t* outs[2] = {NULL, NULL};
  float vals[6] = {0};
  int64_t idx[6] = {0};
  tpurt_status_t s = pjrt_execute(exe, 0, &in, 1, outs, 2, "ir_sort_test");
  if (!s) s = pjrt_buffer_to_host(outs[0], vals, sizeof(vals));
  if (!s) s = pjrt_buffer_to_host(outs[1], idx, sizeof(idx));
  EXPECT(s == NULL);
  tpurt_status_free(s);
  for (int i = 0; i < 2; ++i) pjrt_buffer_release(outs[i]);
  pjrt_buffer_release(in);
  pjrt_executable_release(exe);
  const float want_vals[6] = {5, 1, 1, 7, 7, -2};
  const int64_t want_idx[6] = {1, 0, 2, 1, 2, 0};
  for (int i = 0; i < 6; ++i) EXPECT(vals[i] == want_vals[i] && idx[i] == want_idx[i]);
}

TEST_MAIN(TEST_CASE(IrSort_Golden), TEST_CASE(IrSort_Errors), TEST_CASE(IrSort_RunDescendingStable))
