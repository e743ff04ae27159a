/* ops_fft.c: stablehlo.fft, the discrete Fourier transform over the last
** one to three dims. */
#include "ir_internal.h"

static const char* const kFftTypeNames[] = {"FFT", "IFFT", "RFFT", "IRFFT"};

ir_value_t ir_fft(ir_func_t* func, ir_value_t x, ir_fft_type_t fft_type, const int64_t* lengths,
                  int32_t num_lengths) {
  const ir_op_t op = IR_OP_FFT;
  if (!func) return IR_NONE;
  const ir_type_t* t = ir_operand_type(func, op, x);
  if (!t) return IR_NONE;
  if ((int)fft_type < 0 || fft_type > IR_FFT_IRFFT) {
    ir_failf(func, "%s: invalid fft_type %d", ir_op_name(op), (int)fft_type);
    return IR_NONE;
  }
  if (num_lengths < 1 || num_lengths > 3 || num_lengths > t->rank) {
    ir_failf(func, "%s: fft_length has %d dims; need 1 to 3, at most the rank of %s", ir_op_name(op),
             (int)num_lengths, ir_type_str(t));
    return IR_NONE;
  }
  bool real_in = fft_type == IR_FFT_RFFT;
  bool real_out = fft_type == IR_FFT_IRFFT;
  bool in_ok = real_in ? (t->dtype == TPURT_DTYPE_F32 || t->dtype == TPURT_DTYPE_F64)
                       : tpurt_dtype_is_complex(t->dtype);
  if (!in_ok) {
    ir_failf(func, "%s: %s takes a %s operand, got %s", ir_op_name(op), kFftTypeNames[fft_type],
             real_in ? "f32 or f64" : "complex", ir_type_str(t));
    return IR_NONE;
  }
  ir_type_t type = *t;
  int32_t first = t->rank - num_lengths;
  for (int32_t i = 0; i < num_lengths; ++i) {
    /* IRFFT's operand holds the non-redundant half of its last dim */
    bool last = i == num_lengths - 1;
    int64_t want = (real_out && last) ? lengths[i] / 2 + 1 : lengths[i];
    if (lengths[i] < 0 || t->dims[first + i] != want) {
      ir_failf(func, "%s: %s of %s needs dim %d to be %lld (fft_length %lld)", ir_op_name(op),
               kFftTypeNames[fft_type], ir_type_str(t), (int)(first + i), (long long)want,
               (long long)lengths[i]);
      return IR_NONE;
    }
    type.dims[first + i] = (real_in && last) ? lengths[i] / 2 + 1 : lengths[i];
  }
  type.dtype = real_in    ? tpurt_dtype_to_complex(t->dtype)
               : real_out ? tpurt_dtype_to_real(t->dtype)
                          : t->dtype;
  tpurt_strbuf_t attrs = {0};
  tpurt_strbuf_printf(&attrs, "fft_type = #stablehlo<fft_type %s>, fft_length = ", kFftTypeNames[fft_type]);
  ir_put_i64_array(&attrs, lengths, num_lengths);
  return ir_emit_buf(func, op, &x, 1, &type, &attrs);
}
