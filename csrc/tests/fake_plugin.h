/* fake_plugin.h: what the test's fake plugins (fake_pjrt_plugin.c,
** fake_kv_plugin.c) share: their PJRT error (a code and a copied message),
** the four API entries every plugin serves for it, and the filling of
** the API table that GetPjrtApi returns. Each plugin is its own shared
** object, so the functions are static: one copy per plugin. */
#ifndef TPURT_TESTS_FAKE_PLUGIN_H_
#define TPURT_TESTS_FAKE_PLUGIN_H_

#include <stdint.h>
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

/* Fills an API table of `size` bytes (version 0.81): the error entries and
** plugin_initialize above, then the plugin's own `count` entries, each a
** {function, slot} pair. */
static void fake_api_fill(void* api, size_t size, void* const (*entries)[2], size_t count) {
  pjrt_abi_api_head_t* head = api;
  unsigned char* bytes = api;
  head->struct_size = size;
  head->version.struct_size = sizeof(pjrt_abi_version_t);
  head->version.major = 0;
  head->version.minor = 81;
  void* const common[][2] = {{(void*)error_destroy, (void*)(uintptr_t)PJRTABI_ERROR_DESTROY},
                             {(void*)error_message, (void*)(uintptr_t)PJRTABI_ERROR_MESSAGE},
                             {(void*)error_get_code, (void*)(uintptr_t)PJRTABI_ERROR_GET_CODE},
                             {(void*)plugin_initialize, (void*)(uintptr_t)PJRTABI_PLUGIN_INITIALIZE}};
  for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); ++i)
    memcpy(bytes + PJRTABI_SLOT_OFFSET((uintptr_t)common[i][1]), &common[i][0], sizeof(void*));
  for (size_t i = 0; i < count; ++i)
    memcpy(bytes + PJRTABI_SLOT_OFFSET((uintptr_t)entries[i][1]), &entries[i][0], sizeof(void*));
}

#endif /* TPURT_TESTS_FAKE_PLUGIN_H_ */
