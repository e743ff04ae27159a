// Status.cpp: tpurt_status_t -> c10 error, prefixed with the aten op.
#include "Status.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_tpu {

void raise_status_consume(tpurt_status_t status, std::string_view op) {
  const std::string prefix = std::string(op.empty() ? "tpu" : op) + ": ";
  std::string text = tpurt_status_message(status);
  // The core may already have named the op (a launch names its program).
  std::string msg = text.rfind(prefix, 0) == 0 ? text : prefix + text;
  const tpurt_status_code_t code = tpurt_status_code(status);
  tpurt_status_free(status);
  switch (code) {
    case TPURT_RESOURCE_EXHAUSTED: {
      uint64_t in_use = 0;
      for (int d = 0; d < 64; ++d) in_use += tpurt_memory_allocated(d);
      msg += " (tpu tensors alive hold " + std::to_string(in_use >> 20) +
             " MiB; free the ones you no longer need (del, or leave their scope), use a smaller batch or "
             "dtype, and see torch.tpu.memory_allocated())";
      C10_THROW_ERROR(OutOfMemoryError, msg);
    }
    case TPURT_OUT_OF_RANGE:
      C10_THROW_ERROR(IndexError, msg);
    case TPURT_UNIMPLEMENTED:
      C10_THROW_ERROR(NotImplementedError, msg);
    default:
      C10_THROW_ERROR(Error, msg);
  }
}

}  // namespace torch_tpu
