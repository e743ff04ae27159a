/* runtime.c: the public runtime calls of tpurt.h, thin wrappers over the
** pjrt room. */
#include "pjrt_internal.h"

/* A bad TORCH_TPU_* variable is reported at the first use of the device. */
tpurt_status_t tpurt_runtime_init(void) {
  TPURT_RETURN_IF_ERROR(tpurt_config_check());
  /* A forked child fails at its first use, before it could wait for work
  ** (a compile, a launch) that only the parent's threads would finish. */
  if (pjrt_api_forked()) return pjrt_api_forked_error("its first use");
  return pjrt_init();
}

int tpurt_device_count(void) { return pjrt_device_count(); }

tpurt_status_t tpurt_runtime_info(tpurt_runtime_info_t* out_info) { return pjrt_info(out_info); }

tpurt_status_t tpurt_device_kind(int device, const char** out_kind) {
  return pjrt_device_kind(device, out_kind);
}
