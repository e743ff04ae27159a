/* fake_kv_plugin.c: a PJRT "plugin" whose Client_Create does what a
** multi-process plugin does with its distributed options (kv_store_test.c):
** reads node_id and num_nodes, publishes its address under
** "fake/node/<id>" through kv_put, then reads every peer's through kv_get
** (1 s timeout). It creates no client: it answers UNIMPLEMENTED (12) with
** what it saw, or the callback's error as it came back. Also loaded by
** tests/test_kv_store.py, with the callbacks served from a c10d store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../pjrt/kv_store.h"
#include "fake_plugin.h"

static pjrt_abi_error_t* client_create(void* p) {
  pjrt_abi_client_create_args_t* a = p;
  long long node = -1, nodes = -1;
  for (size_t i = 0; i < a->num_options; ++i) {
    const pjrt_abi_named_value_t* v = &a->create_options[i];
    if (v->type != PJRTABI_NAMED_VALUE_INT64) continue;
    if (v->name_size == 7 && memcmp(v->name, "node_id", 7) == 0) node = v->value.int64_value;
    if (v->name_size == 9 && memcmp(v->name, "num_nodes", 9) == 0) nodes = v->value.int64_value;
  }
  /* FAKE_KV_REFUSE_NODE=1: a plugin that knows no node_id / num_nodes
  ** (client.c then tries again without them, the callbacks kept). */
  const char* refuse = getenv("FAKE_KV_REFUSE_NODE");
  if (refuse && strcmp(refuse, "1") == 0 && (node >= 0 || nodes >= 0)) {
    static const char kText[] = "fake kv plugin: unknown create option node_id";
    return fake_error_make(3, kText, sizeof(kText) - 1);
  }
  if (!a->kv_get_callback || !a->kv_put_callback || node < 0 || nodes < 1) {
    char text[128];
    int n = snprintf(text, sizeof(text), "fake kv plugin: one process (node %lld of %lld, callbacks %s)",
                     node, nodes, a->kv_get_callback ? "set" : "unset");
    return fake_error_make(12, text, (size_t)n);
  }
  char key[64], value[64];
  int key_size = snprintf(key, sizeof(key), "fake/node/%lld", node);
  int value_size = snprintf(value, sizeof(value), "addr-%lld", node);
  pjrt_abi_kv_put_args_t put = {.struct_size = pjrt_abi_kv_put_args_t_SIZE,
                                .key = key,
                                .key_size = (size_t)key_size,
                                .value = value,
                                .value_size = (size_t)value_size,
                                .callback_error = fake_error_make, /* a PJRT_CallbackError */
                                .user_arg = a->kv_put_user_arg};
  pjrt_abi_error_t* e = ((pjrt_abi_kv_put_fn_t)a->kv_put_callback)(&put);
  if (e) return e;
  char seen[300] = "";
  size_t used = 0;
  for (long long peer = 0; peer < nodes; ++peer) {
    key_size = snprintf(key, sizeof(key), "fake/node/%lld", peer);
    pjrt_abi_kv_get_args_t get = {.struct_size = pjrt_abi_kv_get_args_t_SIZE,
                                  .key = key,
                                  .key_size = (size_t)key_size,
                                  .timeout_in_ms = 1000,
                                  .callback_error = fake_error_make, /* a PJRT_CallbackError */
                                  .user_arg = a->kv_get_user_arg};
    e = ((pjrt_abi_kv_get_fn_t)a->kv_get_callback)(&get);
    if (e) return e;
    int n = snprintf(seen + used, sizeof(seen) - used, " %.*s", (int)get.value_size, get.value);
    if (n > 0 && (size_t)n < sizeof(seen) - used) used += (size_t)n;
    get.value_deleter_callback(get.value);
  }
  char text[400];
  int n = snprintf(text, sizeof(text), "fake kv plugin: node %lld of %lld; peers:%s", node, nodes, seen);
  return fake_error_make(12, text, (size_t)n);
}

static union {
  unsigned char bytes[PJRTABI_SLOT_OFFSET(PJRTABI_CLIENT_CREATE + 1)];
  pjrt_abi_api_head_t head;
} g_api;

__attribute__((visibility("default"))) const void* GetPjrtApi(void) {
  if (g_api.head.struct_size == 0) {
    void* const entries[][2] = {{(void*)client_create, (void*)(uintptr_t)PJRTABI_CLIENT_CREATE}};
    fake_api_fill(&g_api, sizeof(g_api.bytes), entries, sizeof(entries) / sizeof(entries[0]));
  }
  return g_api.bytes;
}
