/* kv_store.h: a multi-process PJRT client's distributed options (issue 21).
**
** A client that spans processes (the GPU plugin; libtpu on a pod) exchanges
** its topology through key-value callbacks in PJRT_Client_Create_Args and is
** told its place by the create options node_id / num_nodes. We serve the
** callbacks from a store the caller provides (the glue: c10d's store, the one
** torchrun sets up), so there is one rendezvous. The declarations of the
** callback ABI live here, apart from pjrt_abi.h, with the same layout rules.
** The CPU plugin ignores all of this; see docs/architecture.md,
** "torch.distributed: the c10d backend". */
#ifndef TPURT_PJRT_KV_STORE_H_
#define TPURT_PJRT_KV_STORE_H_

#include "../base/base.h"
#include "pjrt_abi.h"

/*===--- the callback ABI (PJRT_KeyValue{Get,Put}Callback_Args) ---===*/

/* The plugin's error constructor, handed to the callbacks. */
typedef pjrt_abi_error_t* (*pjrt_abi_callback_error_fn_t)(int code, const char* message, size_t message_size);

typedef struct {
  size_t struct_size;
  void* extension_start;
  const char* key;
  size_t key_size;
  int timeout_in_ms;
  pjrt_abi_callback_error_fn_t callback_error;
  void* user_arg;
  char* value; /* out: freed by value_deleter_callback */
  size_t value_size;
  void (*value_deleter_callback)(char* value);
} pjrt_abi_kv_get_args_t;
PJRTABI_CHECK_OFFSET(pjrt_abi_kv_get_args_t, callback_error, 40);
PJRTABI_DEFINE_SIZE(pjrt_abi_kv_get_args_t, value_deleter_callback, 80);

typedef struct {
  size_t struct_size;
  void* extension_start;
  const char* key;
  size_t key_size;
  const char* value;
  size_t value_size;
  pjrt_abi_callback_error_fn_t callback_error;
  void* user_arg;
} pjrt_abi_kv_put_args_t;
PJRTABI_DEFINE_SIZE(pjrt_abi_kv_put_args_t, user_arg, 64);

typedef pjrt_abi_error_t* (*pjrt_abi_kv_get_fn_t)(pjrt_abi_kv_get_args_t* args);
typedef pjrt_abi_error_t* (*pjrt_abi_kv_put_fn_t)(pjrt_abi_kv_put_args_t* args);

/*===--- ours ---===*/

/* The store the callbacks read and write; thread-safe (the plugin calls it
** from its own threads). get blocks until |key| exists or |timeout_ms|
** passes (then DEADLINE_EXCEEDED) and returns a malloc'd copy. */
typedef tpurt_kv_store_t pjrt_kv_store_t; /* tpurt.h */

/* This process's place in the job, and the store. */
typedef struct {
  int64_t node_id;
  int64_t num_nodes;
  const pjrt_kv_store_t* store; /* borrowed: outlives the client */
} pjrt_distributed_t;

#define PJRT_DISTRIBUTED_NUM_OPTIONS 2

/* Sets |args|' get/put callbacks to serve |dist->store| and writes the
** options node_id and num_nodes to |values| (room for
** PJRT_DISTRIBUTED_NUM_OPTIONS). Returns the number written. A plugin that
** refuses the options (INVALID_ARGUMENT: libtpu reads its topology from the
** environment) is to be created again without them, the callbacks kept, as
** create_client does for cpu_device_count: what the plugin takes decides,
** never its name (client.c; kv_store_test.c and tests/test_kv_store.py run
** it against fake_kv_plugin.c). */
size_t pjrt_distributed_apply(const pjrt_distributed_t* dist, pjrt_abi_client_create_args_t* args,
                              pjrt_abi_named_value_t* values);

#endif /* TPURT_PJRT_KV_STORE_H_ */
