/* ir_custom_call_test.c: stablehlo.custom_call (ir_custom_call): golden
** text with several results and an escaped backend config, and the errors.
**
** The modules are not compiled: their targets exist only in the backends
** that define them (cuDNN's on a GPU), never on the CPU plugin. */
#include "../base/base.h"
#include "../ir/ir.h"
#include "test.h"

#define HDR "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"

static char* print_and_free(ir_func_t* f) {
  char* text = NULL;
  tpurt_status_t s = ir_func_print(f, &text, NULL);
  ir_func_free(f);
  if (s) {
    fprintf(stderr, "  print failed: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    return NULL;
  }
  return text;
}

TEST(IrCustomCall_Golden) {
  int64_t x_dims[2] = {2, 8}, y_dims[1] = {8}, none = 0;
  ir_func_t* f = ir_func_create();
  ir_value_t ops[2] = {ir_param(f, ir_type_make(TPURT_DTYPE_BF16, 2, x_dims)),
                       ir_param(f, ir_type_make(TPURT_DTYPE_F32, 1, y_dims))};
  ir_type_t types[3] = {ir_type_make(TPURT_DTYPE_BF16, 2, x_dims), ir_type_scalar(TPURT_DTYPE_F32),
                        ir_type_make(TPURT_DTYPE_U8, 1, &none)};
  ir_value_t res[3];
  ir_custom_call(f, "__test$target", ops, 2, types, 3, "{\"a\":\"b\\c\"}\n", 2, res);
  EXPECT(res[0] >= 0 && res[1] == res[0] + 1 && res[2] == res[0] + 2);
  const ir_type_t* t = ir_value_type(f, res[2]);
  EXPECT(t && t->dtype == TPURT_DTYPE_U8 && t->rank == 1 && t->dims[0] == 0);
  ir_value_t out[2] = {res[0], res[1]};
  ir_func_set_results(f, out, 2);
  char* text = print_and_free(f);
  ASSERT(text);
  const char* golden = HDR
      "  func.func public @main(%v0: tensor<2x8xbf16>, %v1: tensor<8xf32>) -> "
      "(tensor<2x8xbf16>, tensor<f32>) {\n"
      "    %v2:3 = \"stablehlo.custom_call\"(%v0, %v1) {api_version = 2 : i32, backend_config = "
      "\"{\\\"a\\\":\\\"b\\\\c\\\"}\\0A\", call_target_name = \"__test$target\", has_side_effect = false, "
      "operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[0]> : tensor<1xindex>], "
      "result_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<> : tensor<0xindex>, dense<[0]> : "
      "tensor<1xindex>]} : (tensor<2x8xbf16>, tensor<8xf32>) -> "
      "(tensor<2x8xbf16>, tensor<f32>, tensor<0xui8>)\n"
      "    \"func.return\"(%v2#0, %v2#1) : (tensor<2x8xbf16>, tensor<f32>) -> ()\n"
      "  }\n"
      "}\n";
  if (strcmp(text, golden) != 0) {
    fprintf(stderr, "  printed text differs.\n--- expected\n%s--- got\n%s---\n", golden, text);
    ++test_failures_;
  }
  free(text);
}

TEST(IrCustomCall_Errors) {
  int64_t dims[1] = {4};
  ir_type_t t = ir_type_make(TPURT_DTYPE_F32, 1, dims);
  ir_value_t res[2];
  { /* no target */
    ir_func_t* f = ir_func_create();
    ir_value_t x = ir_param(f, t);
    ir_custom_call(f, "", &x, 1, &t, 1, NULL, 2, res);
    EXPECT(res[0] == IR_NONE);
    EXPECT(ir_func_status(f) && strstr(tpurt_status_message(ir_func_status(f)), "no call target"));
    ir_func_free(f);
  }
  { /* no result */
    ir_func_t* f = ir_func_create();
    ir_value_t x = ir_param(f, t);
    ir_custom_call(f, "t", &x, 1, &t, 0, NULL, 2, res);
    EXPECT(ir_func_status(f) && strstr(tpurt_status_message(ir_func_status(f)), "result"));
    ir_func_free(f);
  }
  { /* an operand that is not a value */
    ir_func_t* f = ir_func_create();
    ir_value_t x = 7;
    ir_custom_call(f, "t", &x, 1, &t, 2, NULL, 2, res);
    EXPECT(res[0] == IR_NONE && res[1] == IR_NONE);
    EXPECT(ir_func_status(f) && strstr(tpurt_status_message(ir_func_status(f)), "not a value"));
    ir_func_free(f);
  }
  { /* an earlier error (IR_NONE) propagates without a new message */
    ir_func_t* f = ir_func_create();
    ir_value_t x = IR_NONE;
    ir_custom_call(f, "t", &x, 1, &t, 1, NULL, 2, res);
    EXPECT(res[0] == IR_NONE && ir_func_status(f) == NULL);
    ir_func_free(f);
  }
}

TEST_MAIN(TEST_CASE(IrCustomCall_Golden), TEST_CASE(IrCustomCall_Errors))
