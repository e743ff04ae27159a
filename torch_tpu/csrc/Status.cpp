// Status.cpp: tpurt_status_t -> c10 error, prefixed with the aten op.
#include "Status.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_tpu {

void raise_status(tpurt_status_t status, std::string_view op) {
  std::string msg = std::string(op.empty() ? "tpu" : op) + ": " + tpurt_status_message(status);
  const tpurt_status_code_t code = tpurt_status_code(status);
  tpurt_status_free(status);
  switch (code) {
    case TPURT_RESOURCE_EXHAUSTED:
      C10_THROW_ERROR(OutOfMemoryError, msg);
    case TPURT_OUT_OF_RANGE:
      C10_THROW_ERROR(IndexError, msg);
    case TPURT_UNIMPLEMENTED:
      C10_THROW_ERROR(NotImplementedError, msg);
    default:
      C10_THROW_ERROR(Error, msg);
  }
}

}  // namespace torch_tpu
