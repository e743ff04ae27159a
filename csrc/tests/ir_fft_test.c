/* ir_fft_test.c: complex element types and stablehlo.fft (ir_fft,
** ir_complex, ir_complex_part): golden text, shape and type errors, and a
** real transform run on the plugin against a direct DFT.
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
#define C64 TPURT_DTYPE_C64

/* rfft over the last dim of a 2x4 f32, scaled by a complex constant, and
** its real part; and the irfft of the spectrum back to 2x4 */
static ir_func_t* build_rfft(void) {
  int64_t dims[2] = {2, 4}, n = 4;
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 2, dims));
  ir_value_t spectrum = ir_fft(f, x, IR_FFT_RFFT, &n, 1);
  int64_t half[2] = {2, 3};
  ir_value_t two = ir_broadcast_in_dim(f, ir_constant_f64(f, C64, 2.0), 2, half, NULL);
  ir_value_t scaled = ir_binary(f, IR_OP_MULTIPLY, spectrum, two);
  ir_value_t results[3] = {scaled, ir_complex_part(f, IR_OP_REAL, scaled),
                           ir_fft(f, spectrum, IR_FFT_IRFFT, &n, 1)};
  ir_func_set_results(f, results, 3);
  return f;
}

#define GOLDEN                                                                                         \
  HDR "  func.func public @main(%v0: tensor<2x4xf32>) -> (tensor<2x3xcomplex<f32>>, tensor<2x3xf32>, " \
      "tensor<2x4xf32>) {\n"                                                                           \
      "    %v1 = \"stablehlo.fft\"(%v0) {fft_type = #stablehlo<fft_type RFFT>, "                       \
      "fft_length = array<i64: 4>} : (tensor<2x4xf32>) -> tensor<2x3xcomplex<f32>>\n"                  \
      "    %v2 = \"stablehlo.constant\"() {value = dense<(0x40000000, 0x00000000)> : "                 \
      "tensor<complex<f32>>} : () -> tensor<complex<f32>>\n"                                           \
      "    %v3 = \"stablehlo.broadcast_in_dim\"(%v2) {broadcast_dimensions = array<i64>} : "           \
      "(tensor<complex<f32>>) -> tensor<2x3xcomplex<f32>>\n"                                           \
      "    %v4 = \"stablehlo.multiply\"(%v1, %v3) : "                                                  \
      "(tensor<2x3xcomplex<f32>>, tensor<2x3xcomplex<f32>>) -> tensor<2x3xcomplex<f32>>\n"             \
      "    %v5 = \"stablehlo.real\"(%v4) : (tensor<2x3xcomplex<f32>>) -> tensor<2x3xf32>\n"            \
      "    %v6 = \"stablehlo.fft\"(%v1) {fft_type = #stablehlo<fft_type IRFFT>, "                      \
      "fft_length = array<i64: 4>} : (tensor<2x3xcomplex<f32>>) -> tensor<2x4xf32>\n"                  \
      "    \"func.return\"(%v4, %v5, %v6) : "                                                          \
      "(tensor<2x3xcomplex<f32>>, tensor<2x3xf32>, tensor<2x4xf32>) -> ()\n"                           \
      "  }\n"                                                                                          \
      "}\n"

TEST(IrFft_Golden) {
  EXPECT(strcmp(ir_dtype_mlir_name(C64), "complex<f32>") == 0);
  EXPECT(strcmp(ir_dtype_mlir_name(TPURT_DTYPE_C128), "complex<f64>") == 0);
  EXPECT(tpurt_dtype_size(C64) == 8 && tpurt_dtype_size(TPURT_DTYPE_C128) == 16);
  EXPECT(tpurt_dtype_to_real(C64) == F32 && tpurt_dtype_to_complex(TPURT_DTYPE_F64) == TPURT_DTYPE_C128);
  EXPECT(!tpurt_dtype_is_float(C64) && tpurt_dtype_is_complex(C64));
  ir_func_t* f = build_rfft();
  EXPECT(ir_func_status(f) == NULL);
  EXPECT(print_check(f, GOLDEN, NULL));
}

/* each misuse is a sticky error naming the op */
static void expect_error(ir_func_t* f, ir_value_t v, const char* words) {
  EXPECT(v == IR_NONE);
  tpurt_borrowed_status_t s = ir_func_status(f);
  EXPECT(s != NULL && strstr(tpurt_status_message(s), words) != NULL);
  if (s && !strstr(tpurt_status_message(s), words)) fprintf(stderr, "  got: %s\n", tpurt_status_message(s));
  ir_func_free(f);
}

TEST(IrFft_Errors) {
  int64_t dims[2] = {2, 4}, n = 4, bad = 6, four[4] = {1, 1, 1, 1};
  ir_func_t* f = ir_func_create();
  ir_value_t x = ir_param(f, ir_type_make(F32, 2, dims));
  expect_error(f, ir_fft(f, x, IR_FFT_FFT, &n, 1), "FFT takes a complex operand");
  f = ir_func_create();
  x = ir_param(f, ir_type_make(F32, 2, dims));
  expect_error(f, ir_fft(f, x, IR_FFT_RFFT, &bad, 1), "needs dim 1 to be 6");
  f = ir_func_create();
  x = ir_param(f, ir_type_make(F32, 2, dims));
  expect_error(f, ir_fft(f, x, IR_FFT_RFFT, four, 4), "need 1 to 3");
  f = ir_func_create();
  x = ir_param(f, ir_type_make(C64, 2, dims));
  expect_error(f, ir_fft(f, x, IR_FFT_IRFFT, &n, 1), "needs dim 1 to be 3");
  f = ir_func_create();
  x = ir_param(f, ir_type_make(F32, 2, dims));
  expect_error(f, ir_complex_part(f, IR_OP_REAL, x), "expected a complex operand");
  f = ir_func_create();
  x = ir_param(f, ir_type_make(C64, 2, dims));
  expect_error(f, ir_complex(f, x, x), "parts must be f32 or f64");
}

/* the plugin's rfft of two rows equals a direct DFT; irfft gives the rows back */
TEST(IrFft_Run) {
  if (test_plugin_state() == 0) return;
  ASSERT(test_plugin_state() == 1);
  const float host[8] = {1, 2, 3, 4, -1, 0.5f, 0, 2};
  pjrt_buffer_t* in = NULL;
  ASSERT_OK(pjrt_buffer_from_host(0, F32, 2, (int64_t[]){2, 4}, host, &in));
  float scaled[12] = {0}, real[6] = {0}, back[8] = {0};
  void* hosts[3] = {scaled, real, back};
  const size_t sizes[3] = {sizeof(scaled), sizeof(real), sizeof(back)};
  EXPECT(run_check(build_rfft(), &in, 1, hosts, sizes, 3) == 1);
  pjrt_buffer_release(in);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k) {
      double re = 0, im = 0;
      for (int t = 0; t < 4; ++t) {
        re += host[r * 4 + t] * cos(2 * M_PI * k * t / 4);
        im -= host[r * 4 + t] * sin(2 * M_PI * k * t / 4);
      }
      EXPECT(fabs(scaled[2 * (r * 3 + k)] - 2 * re) < 1e-5 &&
             fabs(scaled[2 * (r * 3 + k) + 1] - 2 * im) < 1e-5);
      EXPECT(fabs(real[r * 3 + k] - 2 * re) < 1e-5);
    }
  for (int i = 0; i < 8; ++i) EXPECT(fabs(back[i] - host[i]) < 1e-5);
}

TEST_MAIN(TEST_CASE(IrFft_Golden), TEST_CASE(IrFft_Errors), TEST_CASE(IrFft_Run))
