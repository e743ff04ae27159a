/* kv_store_test.c: the distributed create options and key-value callbacks
** (pjrt/kv_store.c) against fake_kv_plugin.c, which uses them as a
** multi-process plugin does: node_id / num_nodes arrive, its put and its
** gets of every peer go through our callbacks to the caller's store, and a
** store error comes back as the plugin's error. */
#include "../pjrt/kv_store.h"

#include <pthread.h>

#include "../pjrt/pjrt_internal.h"
#include "test.h"

/* An in-memory store standing in for c10d's. */
typedef struct {
  pthread_mutex_t lock;
  int count;
  char keys[8][64];
  char values[8][64];
  int gets;
} memory_store_t;

static tpurt_status_t memory_get(void* user, const char* key, size_t key_size, int64_t timeout_ms, char** out,
                                 size_t* out_size) {
  memory_store_t* m = user;
  pthread_mutex_lock(&m->lock);
  ++m->gets;
  for (int i = 0; i < m->count; ++i) {
    if (strlen(m->keys[i]) == key_size && memcmp(m->keys[i], key, key_size) == 0) {
      *out_size = strlen(m->values[i]);
      *out = tpurt_xmalloc(*out_size);
      memcpy(*out, m->values[i], *out_size);
      pthread_mutex_unlock(&m->lock);
      return NULL;
    }
  }
  pthread_mutex_unlock(&m->lock);
  return tpurt_status_create(TPURT_DEADLINE_EXCEEDED, "store: '%.*s' not set within %lld ms", (int)key_size,
                             key, (long long)timeout_ms);
}

static tpurt_status_t memory_put(void* user, const char* key, size_t key_size, const char* value,
                                 size_t value_size) {
  memory_store_t* m = user;
  pthread_mutex_lock(&m->lock);
  if (m->count == 8) {
    pthread_mutex_unlock(&m->lock);
    return tpurt_status_create(TPURT_RESOURCE_EXHAUSTED, "store full");
  }
  snprintf(m->keys[m->count], 64, "%.*s", (int)key_size, key);
  snprintf(m->values[m->count], 64, "%.*s", (int)value_size, value);
  ++m->count;
  pthread_mutex_unlock(&m->lock);
  return NULL;
}

/* Client_Create on the fake plugin with |dist|'s options and callbacks. */
static tpurt_status_t create_with(const pjrt_distributed_t* dist) {
  static pjrt_api_t api;
  if (!api.table) {
    const char* path = getenv("TPURT_FAKE_KV_PLUGIN");
    if (!path) return tpurt_status_create(TPURT_FAILED_PRECONDITION, "TPURT_FAKE_KV_PLUGIN is not set");
    TPURT_RETURN_IF_ERROR(pjrt_api_load(path, &api));
  }
  pjrt_abi_named_value_t values[PJRT_DISTRIBUTED_NUM_OPTIONS];
  PJRT_ARGS(pjrt_abi_client_create_args_t, a);
  a.num_options = pjrt_distributed_apply(dist, &a, values);
  a.create_options = values;
  return pjrt_api_call(&api, PJRTABI_CLIENT_CREATE, "Client_Create", &a);
}

TEST(NodeAndCallbacksReachThePlugin) {
  memory_store_t m = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pjrt_kv_store_t store = {.user = &m, .get = memory_get, .put = memory_put};
  /* node 0 published already (another process); we are node 1 of 2 */
  ASSERT_OK(memory_put(&m, "fake/node/0", 11, "addr-0", 6));
  pjrt_distributed_t dist = {.node_id = 1, .num_nodes = 2, .store = &store};
  tpurt_status_t s = create_with(&dist);
  ASSERT(s != NULL);
  EXPECT(tpurt_status_code(s) == TPURT_UNIMPLEMENTED);
  EXPECT(strstr(tpurt_status_message(s), "node 1 of 2; peers: addr-0 addr-1") != NULL);
  if (!strstr(tpurt_status_message(s), "peers")) fprintf(stderr, "  got: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  EXPECT(m.count == 2 && strcmp(m.keys[1], "fake/node/1") == 0 && strcmp(m.values[1], "addr-1") == 0);
  EXPECT(m.gets == 2);
}

TEST(AMissingPeerIsTheStoresErrorThroughThePlugin) {
  memory_store_t m = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pjrt_kv_store_t store = {.user = &m, .get = memory_get, .put = memory_put};
  pjrt_distributed_t dist = {.node_id = 0, .num_nodes = 2, .store = &store};
  tpurt_status_t s = create_with(&dist);
  EXPECT(tpurt_status_code(s) == TPURT_DEADLINE_EXCEEDED);
  EXPECT(s && strstr(tpurt_status_message(s), "'fake/node/1' not set within 1000 ms") != NULL);
  tpurt_status_free(s);
}

/* The runtime's own client creation (client.c): the place given before it
** starts reaches the plugin with the callbacks; after, it is refused. The
** runtime of this process is the fake plugin's from here (its init fails:
** the fake creates no client), so this test comes last. */
TEST(TheRuntimeCreatesItsClientAsANodeOfTheJob) {
  const char* path = getenv("TPURT_FAKE_KV_PLUGIN");
  ASSERT(path != NULL);
  setenv("TORCH_TPU_PJRT_PLUGIN", path, 1);
  tpurt_config_reload_for_test();
  memory_store_t m = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pjrt_kv_store_t store = {.user = &m, .get = memory_get, .put = memory_put};
  tpurt_status_t bad = tpurt_runtime_set_distributed(2, 2, &store); /* node 2 of 2 */
  EXPECT(tpurt_status_code(bad) == TPURT_INVALID_ARGUMENT);
  tpurt_status_free(bad);
  ASSERT_OK(memory_put(&m, "fake/node/0", 11, "addr-0", 6));
  ASSERT_OK(tpurt_runtime_set_distributed(1, 2, &store));
  tpurt_status_t s = tpurt_runtime_init();
  ASSERT(s != NULL);
  EXPECT(strstr(tpurt_status_message(s), "node 1 of 2; peers: addr-0 addr-1") != NULL);
  if (!strstr(tpurt_status_message(s), "peers")) fprintf(stderr, "  got: %s\n", tpurt_status_message(s));
  tpurt_status_free(s);
  s = tpurt_runtime_set_distributed(0, 2, &store);
  EXPECT(tpurt_status_code(s) == TPURT_FAILED_PRECONDITION);
  tpurt_status_free(s);
}

TEST_MAIN(TEST_CASE(NodeAndCallbacksReachThePlugin), TEST_CASE(AMissingPeerIsTheStoresErrorThroughThePlugin),
          TEST_CASE(TheRuntimeCreatesItsClientAsANodeOfTheJob))
