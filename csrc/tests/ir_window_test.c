/* ir_window_test.c: stablehlo.reduce_window (ir_reduce_window, ir_reduce_window_begin): golden
** text, attribute errors, a max pool and a (value, index) window run on the plugin.
**
** As in ir_test.c, every golden module is also compiled by the plugin when
** TORCH_TPU_PJRT_PLUGIN names one (make ctest sets it). */
#include <math.h>

#include "../base/base.h"
#include "../ir/ir.h"
#include "../pjrt/pjrt.h"
#include "ir_check.h"
#include "test.h"

#define HDR "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
#define F32 TPURT_DTYPE_F32
#define I64 TPURT_DTYPE_I64

/* max over 2x2 windows, stride 2, of a 1x4x4 f32 (padded by one on the high side of dim 2) */
static ir_func_t* build_max_pool(void) {
  int64_t dims[3] = {1, 4, 4};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 3, dims));
  ir_window_t w = {.dimensions = {1, 2, 2},
                   .strides = {1, 2, 2},
                   .dilations = {1, 1, 1},
                   .padding_low = {0, 0, 0},
                   .padding_high = {0, 0, 1}};
  ir_value_t init = ir_constant_f64(f, F32, -INFINITY);
  ir_value_t y = ir_reduce_window(f, x, init, &w, IR_REDUCE_MAX);
  ir_func_set_results(f, &y, 1);
  return f;
}

#define GOLDEN                                                                                             \
  HDR "  func.func public @main(%v0: tensor<1x4x4xf32>) -> (tensor<1x2x2xf32>) {\n"                        \
      "    %v1 = \"stablehlo.constant\"() {value = dense<0xFF800000> : tensor<f32>} : () -> tensor<f32>\n" \
      "    %v2 = \"stablehlo.reduce_window\"(%v0, %v1) ({\n"                                               \
      "    ^bb0(%v3: tensor<f32>, %v4: tensor<f32>):\n"                                                    \
      "      %v5 = \"stablehlo.maximum\"(%v3, %v4) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"          \
      "      \"stablehlo.return\"(%v5) : (tensor<f32>) -> ()\n"                                            \
      "    }) {base_dilations = array<i64: 1, 1, 1>, padding = dense<[[0, 0], [0, 0], [0, 1]]> : "         \
      "tensor<3x2xi64>, window_dilations = array<i64: 1, 1, 1>, window_dimensions = array<i64: 1, 2, 2>, " \
      "window_strides = array<i64: 1, 2, 2>} : (tensor<1x4x4xf32>, tensor<f32>) -> tensor<1x2x2xf32>\n"    \
      "    \"func.return\"(%v2) : (tensor<1x2x2xf32>) -> ()\n"                                             \
      "  }\n"                                                                                              \
      "}\n"

TEST(IrWindow_Golden) {
  ir_func_t* f = build_max_pool();
  EXPECT(ir_func_status(f) == NULL);
  EXPECT(print_check(f, GOLDEN, NULL));
}

TEST(IrWindow_Errors) {
  int64_t dims[2] = {2, 3};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 2, dims));
  ir_window_t w = {.dimensions = {1, 0}, .strides = {1, 1}, .dilations = {1, 1}};
  ir_value_t y = ir_reduce_window(f, x, ir_constant_f64(f, F32, 0), &w, IR_REDUCE_ADD);
  EXPECT(y == IR_NONE);
  EXPECT(ir_func_status(f) != NULL);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "must be >= 1") != NULL);
  ir_func_free(f);

  f = ir_func_create(); /* init of another dtype */
  x = ir_param(f, ir_type_make(F32, 2, dims));
  w.dimensions[1] = 2;
  y = ir_reduce_window(f, x, ir_constant_i64(f, I64, 0), &w, IR_REDUCE_ADD);
  EXPECT(y == IR_NONE);
  EXPECT(strstr(tpurt_status_message(ir_func_status(f)), "init 0 must be") != NULL);
  ir_func_free(f);
}

/* the golden max pool runs: [[1..4],[5..8],[9..12],[13..16]] -> [[6, 8], [14, 16]]; and a
** two-operand window (value, index) picking the first maximum compiles and runs */
TEST(IrWindow_Run) {
  if (test_plugin_state() == 0) return;
  ASSERT(test_plugin_state() == 1);
  pjrt_executable_t* exe = NULL;
  ASSERT(print_check(build_max_pool(), NULL, &exe));
  float host[16];
  for (int i = 0; i < 16; ++i) host[i] = (float)(i + 1);
  pjrt_buffer_t* in = NULL;
  ASSERT_OK(pjrt_buffer_from_host(0, F32, 3, (int64_t[]){1, 4, 4}, host, &in));
  pjrt_buffer_t* out = NULL;
  float vals[4] = {0};
  tpurt_status_t s = pjrt_execute(exe, 0, &in, 1, &out, 1, "ir_window_test");
  if (!s) s = pjrt_buffer_to_host(out, vals, sizeof(vals));
  EXPECT(s == NULL);
  tpurt_status_free(s);
  pjrt_buffer_release(out);
  pjrt_executable_release(exe);
  EXPECT(vals[0] == 6 && vals[1] == 8 && vals[2] == 14 && vals[3] == 16);

  int64_t dims[1] = {6};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 1, dims));
  ir_value_t idx = ir_iota(f, ir_type_make(I64, 1, dims), 0);
  ir_window_t w = {.dimensions = {3}, .strides = {3}, .dilations = {1}};
  ir_value_t inputs[2] = {x, idx};
  ir_value_t inits[2] = {ir_constant_f64(f, F32, -INFINITY), ir_constant_i64(f, I64, -1)};
  ir_value_t results[2], args[4];
  ir_reduce_window_begin(f, inputs, inits, 2, &w, results, args);
  /* args: acc value, acc index, elem value, elem index; keep the earlier index on ties */
  ir_value_t gt = ir_compare(f, IR_GT, args[2], args[0]);
  ir_value_t eq = ir_compare(f, IR_EQ, args[2], args[0]);
  ir_value_t earlier = ir_compare(f, IR_LT, args[3], args[1]);
  ir_value_t take = ir_binary(f, IR_OP_OR, gt, ir_binary(f, IR_OP_AND, eq, earlier));
  ir_value_t ret[2] = {ir_select(f, take, args[2], args[0]), ir_select(f, take, args[3], args[1])};
  ir_region_end(f, ret, 2);
  ir_func_set_results(f, results, 2);
  EXPECT(ir_func_status(f) == NULL);
  exe = NULL;
  ASSERT(print_check(f, NULL, &exe));
  pjrt_buffer_release(in);
  const float h2[6] = {3, 7, 7, 2, 2, 1};
  ASSERT_OK(pjrt_buffer_from_host(0, F32, 1, dims, h2, &in));
  pjrt_buffer_t* outs[2] = {NULL, NULL};
  float v2[2] = {0};
  int64_t i2[2] = {0};
  s = pjrt_execute(exe, 0, &in, 1, outs, 2, "ir_window_test");
  if (!s) s = pjrt_buffer_to_host(outs[0], v2, sizeof(v2));
  if (!s) s = pjrt_buffer_to_host(outs[1], i2, sizeof(i2));
  EXPECT(s == NULL);
  tpurt_status_free(s);
  for (int i = 0; i < 2; ++i) pjrt_buffer_release(outs[i]);
  pjrt_buffer_release(in);
  pjrt_executable_release(exe);
  EXPECT(v2[0] == 7 && i2[0] == 1 && v2[1] == 2 && i2[1] == 3);
}

TEST_MAIN(TEST_CASE(IrWindow_Golden), TEST_CASE(IrWindow_Errors), TEST_CASE(IrWindow_Run))
