/* fake_pjrt_plugin.c: a PJRT "plugin" that only validates client options,
** built as build/tests/fake_pjrt_plugin.so for options_test.c. Like the CUDA
** plugin, it knows a fixed set of option names and types and refuses the
** rest; it never creates a client. Its errors say what it received, so the
** test sees that each value crossed the ABI with its type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pjrt/pjrt_abi.h"

struct pjrt_abi_error_s {
  int code;
  char message[512];
};

static pjrt_abi_error_t* make_error(int code, const char* text) {
  pjrt_abi_error_t* e = calloc(1, sizeof(*e));
  if (!e) abort();
  e->code = code;
  snprintf(e->message, sizeof(e->message), "%s", text);
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

static const char* type_name(int type) {
  switch (type) {
    case PJRTABI_NAMED_VALUE_STRING:
      return "string";
    case PJRTABI_NAMED_VALUE_INT64:
      return "int64";
    case PJRTABI_NAMED_VALUE_FLOAT:
      return "float";
    case PJRTABI_NAMED_VALUE_BOOL:
      return "bool";
    default:
      return "other";
  }
}

/* Known: preallocate (bool), memory_fraction (float), allocator (string),
** node_id (int64). Anything else is INVALID_ARGUMENT (3), as the CUDA
** plugin answers; a valid set is UNIMPLEMENTED (12) with what arrived. */
static pjrt_abi_error_t* client_create(void* p) {
  static const struct {
    const char* name;
    int type;
  } kKnown[] = {{"preallocate", PJRTABI_NAMED_VALUE_BOOL},
                {"memory_fraction", PJRTABI_NAMED_VALUE_FLOAT},
                {"allocator", PJRTABI_NAMED_VALUE_STRING},
                {"node_id", PJRTABI_NAMED_VALUE_INT64}};
  pjrt_abi_client_create_args_t* a = p;
  char got[400] = "";
  size_t used = 0;
  for (size_t i = 0; i < a->num_options; ++i) {
    const pjrt_abi_named_value_t* v = &a->create_options[i];
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)v->name_size, v->name);
    int expected = -1;
    for (size_t k = 0; k < sizeof(kKnown) / sizeof(kKnown[0]); ++k)
      if (strcmp(kKnown[k].name, name) == 0) expected = kKnown[k].type;
    char text[512];
    if (expected < 0) {
      snprintf(text, sizeof(text), "fake plugin: unexpected option name '%s'", name);
      return make_error(3, text);
    }
    if (v->type != expected) {
      snprintf(text, sizeof(text), "fake plugin: option '%s' has type %s, expected %s", name,
               type_name(v->type), type_name(expected));
      return make_error(3, text);
    }
    char value[96];
    switch (v->type) {
      case PJRTABI_NAMED_VALUE_STRING:
        snprintf(value, sizeof(value), "%.*s", (int)v->value_size, v->value.string_value);
        break;
      case PJRTABI_NAMED_VALUE_INT64:
        snprintf(value, sizeof(value), "%lld", (long long)v->value.int64_value);
        break;
      case PJRTABI_NAMED_VALUE_FLOAT:
        snprintf(value, sizeof(value), "%g", (double)v->value.float_value);
        break;
      default:
        snprintf(value, sizeof(value), "%s", v->value.bool_value ? "true" : "false");
        break;
    }
    int n = snprintf(got + used, sizeof(got) - used, " %s:%s=%s", name, type_name(v->type), value);
    if (n > 0 && (size_t)n < sizeof(got) - used) used += (size_t)n;
  }
  char text[512];
  snprintf(text, sizeof(text), "fake plugin creates no client; got%s", used ? got : " nothing");
  return make_error(12, text);
}

static union {
  unsigned char bytes[PJRTABI_SLOT_OFFSET(PJRTABI_CLIENT_CREATE + 1)];
  pjrt_abi_api_head_t head;
} g_api;

__attribute__((visibility("default"))) const void* GetPjrtApi(void) {
  if (g_api.head.struct_size == 0) {
    g_api.head.struct_size = sizeof(g_api.bytes);
    g_api.head.version.struct_size = sizeof(pjrt_abi_version_t);
    g_api.head.version.major = 0;
    g_api.head.version.minor = 81;
    void* slots[][2] = {{(void*)error_destroy, (void*)(uintptr_t)PJRTABI_ERROR_DESTROY},
                        {(void*)error_message, (void*)(uintptr_t)PJRTABI_ERROR_MESSAGE},
                        {(void*)error_get_code, (void*)(uintptr_t)PJRTABI_ERROR_GET_CODE},
                        {(void*)plugin_initialize, (void*)(uintptr_t)PJRTABI_PLUGIN_INITIALIZE},
                        {(void*)client_create, (void*)(uintptr_t)PJRTABI_CLIENT_CREATE}};
    for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); ++i)
      memcpy(g_api.bytes + PJRTABI_SLOT_OFFSET((uintptr_t)slots[i][1]), &slots[i][0], sizeof(void*));
  }
  return g_api.bytes;
}
