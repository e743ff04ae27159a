/* ir_check.h: the golden-text check the IR tests share: print a function,
** compare with the expected text, compile it with the plugin when there is
** one. Self-contained: it includes what it uses (clang-format sorts the
** includes of the files that use it). */
#ifndef TPURT_TESTS_IR_CHECK_H_
#define TPURT_TESTS_IR_CHECK_H_

#include "../ir/ir.h"
#include "../pjrt/pjrt.h"
#include "test.h"

/* Prints |func| (destroyed); compares with |golden| when given; compiles it
** with the plugin when there is one, keeping the executable in *out_exe if
** asked. Returns 1 when all of that passed. */
static inline int print_check(ir_func_t* func, const char* golden, pjrt_executable_t** out_exe) {
  char* text = NULL;
  tpurt_status_t s = ir_func_print(func, &text, NULL);
  ir_func_free(func);
  if (s) {
    fprintf(stderr, "  print failed: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    return 0;
  }
  int ok = 1;
  if (golden && strcmp(text, golden) != 0) {
    fprintf(stderr, "  printed text differs.\n--- expected\n%s--- got\n%s---\n", golden, text);
    ok = 0;
  }
  int state = test_plugin_state();
  if (ok && state != 0) {
    pjrt_executable_t* exe = NULL;
    s = state < 0 ? tpurt_status_create(TPURT_INTERNAL, "no plugin") : pjrt_compile(text, strlen(text), &exe);
    if (s) {
      fprintf(stderr, "  the plugin rejects the module: %s\n%s", tpurt_status_message(s), text);
      tpurt_status_free(s);
      ok = 0;
    } else if (out_exe) {
      *out_exe = exe;
    } else {
      pjrt_executable_release(exe);
    }
  }
  free(text);
  return ok;
}

/* Prints, compiles and runs |func| (destroyed) on device 0 with |args|,
** reading back each output into hosts[i] (sizes[i] bytes). Returns 0 when
** there is no plugin (nothing checked), 1 when it ran, -1 on failure. */
static inline int run_check(ir_func_t* func, pjrt_buffer_t** args, size_t num_args, void** hosts,
                            const size_t* sizes, size_t num_outputs) {
  if (test_plugin_state() == 0) {
    ir_func_free(func);
    return 0;
  }
  pjrt_executable_t* exe = NULL;
  if (!print_check(func, NULL, &exe)) return -1;
  pjrt_buffer_t* outs[16] = {NULL};
  tpurt_status_t s = pjrt_execute(exe, 0, args, num_args, outs, num_outputs, "ir_check");
  for (size_t i = 0; !s && i < num_outputs; ++i) s = pjrt_buffer_to_host(outs[i], hosts[i], sizes[i]);
  int rc = 1;
  if (s) {
    fprintf(stderr, "  run failed: %s\n", tpurt_status_message(s));
    tpurt_status_free(s);
    rc = -1;
  }
  for (size_t i = 0; i < num_outputs; ++i) pjrt_buffer_release(outs[i]);
  pjrt_executable_release(exe);
  return rc;
}

#endif /* TPURT_TESTS_IR_CHECK_H_ */
