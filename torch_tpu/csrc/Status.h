// Status.h: the one place a core status becomes a PyTorch error.
#pragma once

#include <string_view>

#include "tpurt.h"

namespace torch_tpu {

// Throws the PyTorch error for a non-NULL |status| (consumed: freed), its
// message prefixed with "<op>: " (the aten op, e.g. "aten::add.Tensor"). Codes map to
// OutOfMemoryError, IndexError, NotImplementedError, else RuntimeError.
[[noreturn]] void raise_status_consume(tpurt_status_t status, std::string_view op);

// Does nothing for NULL (OK); otherwise raise_status_consume() (|status| is
// consumed either way).
inline void check_consume(tpurt_status_t status, std::string_view op) {
  if (status != nullptr) raise_status_consume(status, op);
}

}  // namespace torch_tpu
