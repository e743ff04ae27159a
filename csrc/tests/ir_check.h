/* ir_check.h: the golden-text check the IR tests share: print a function,
** compare with the expected text, compile it with the plugin when there is
** one. Include after test.h, ../ir/ir.h and ../pjrt/pjrt.h. */
#ifndef TPURT_TESTS_IR_CHECK_H_
#define TPURT_TESTS_IR_CHECK_H_

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

#endif /* TPURT_TESTS_IR_CHECK_H_ */
