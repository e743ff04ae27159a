/* kv_store.c: PJRT's key-value callbacks served from the caller's store, and
** the node_id / num_nodes create options (kv_store.h). */
#include "kv_store.h"

#include <stdlib.h>
#include <string.h>

/* A failed store call as the plugin's own error, through its constructor. */
static pjrt_abi_error_t* plugin_error_consume(pjrt_abi_callback_error_fn_t make, tpurt_status_t status) {
  const char* message = tpurt_status_message(status);
  pjrt_abi_error_t* error = make ? make((int)tpurt_status_code(status), message, strlen(message)) : NULL;
  tpurt_status_free(status);
  return error;
}

static void value_free(char* value) { free(value); }

static pjrt_abi_error_t* kv_get(pjrt_abi_kv_get_args_t* args) {
  const pjrt_kv_store_t* store = args->user_arg;
  char* value = NULL;
  size_t size = 0;
  tpurt_status_t status =
      store->get(store->user, args->key, args->key_size, args->timeout_in_ms, &value, &size);
  if (status) return plugin_error_consume(args->callback_error, status);
  args->value = value;
  args->value_size = size;
  args->value_deleter_callback = value_free;
  return NULL;
}

static pjrt_abi_error_t* kv_put(pjrt_abi_kv_put_args_t* args) {
  const pjrt_kv_store_t* store = args->user_arg;
  tpurt_status_t status = store->put(store->user, args->key, args->key_size, args->value, args->value_size);
  return status ? plugin_error_consume(args->callback_error, status) : NULL;
}

static pjrt_abi_named_value_t int_option(const char* name, int64_t value) {
  return (pjrt_abi_named_value_t){.struct_size = pjrt_abi_named_value_t_SIZE,
                                  .name = name,
                                  .name_size = strlen(name),
                                  .type = PJRTABI_NAMED_VALUE_INT64,
                                  .value.int64_value = value,
                                  .value_size = 1};
}

size_t pjrt_distributed_apply(const pjrt_distributed_t* dist, pjrt_abi_client_create_args_t* args,
                              pjrt_abi_named_value_t* values) {
  args->kv_get_callback = (void*)kv_get;
  args->kv_get_user_arg = (void*)dist->store;
  args->kv_put_callback = (void*)kv_put;
  args->kv_put_user_arg = (void*)dist->store;
  values[0] = int_option("node_id", dist->node_id);
  values[1] = int_option("num_nodes", dist->num_nodes);
  return PJRT_DISTRIBUTED_NUM_OPTIONS;
}
