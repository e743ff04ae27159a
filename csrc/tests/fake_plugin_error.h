/* fake_plugin_error.h: the PJRT error of the test's fake plugins
** (fake_pjrt_plugin.c, fake_kv_plugin.c): a code and a copied message, and
** the four API entries every plugin must serve for it. Each plugin is its
** own shared object, so the functions are static: one copy per plugin. */
#ifndef TPURT_TESTS_FAKE_PLUGIN_ERROR_H_
#define TPURT_TESTS_FAKE_PLUGIN_ERROR_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pjrt/pjrt_abi.h"

struct pjrt_abi_error_s {
  int code;
  char message[512];
};

/* An error with the first `size` bytes of `text` (cut to the message's room). */
static pjrt_abi_error_t* fake_error_make(int code, const char* text, size_t size) {
  pjrt_abi_error_t* e = calloc(1, sizeof(*e));
  if (!e) abort();
  e->code = code;
  snprintf(e->message, sizeof(e->message), "%.*s", (int)size, text);
  return e;
}

static void error_destroy(void* p) { free(((pjrt_abi_error_destroy_args_t*)p)->error); }

static void error_message(void* p) {
  pjrt_abi_error_message_args_t* a = p;
  a->message = a->error->message;
  a->message_size = strlen(a->error->message);
}

static pjrt_abi_error_t* error_get_code(void* p) {
  pjrt_abi_error_get_code_args_t* a = p;
  a->code = a->error->code;
  return NULL;
}

static pjrt_abi_error_t* plugin_initialize(void* p) {
  (void)p;
  return NULL;
}

#endif /* TPURT_TESTS_FAKE_PLUGIN_ERROR_H_ */
