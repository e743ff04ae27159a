/* fake_pjrt_plugin.c: a PJRT "plugin" built as build/tests/fake_pjrt_plugin.so.
** For options_test.c it only validates client options: like the CUDA plugin,
** it knows a fixed set of option names and types and refuses the rest; it
** never creates a client. Its errors say what it received, so the test sees
** that each value crossed the ABI with its type.
** For target_test.c it is a compile-only plugin: topologies "fake:1x1" (one
** chip) and "fake:2x2" (four), a compiler that refuses any module naming
** "stablehlo.fft", and executables whose cost and memory are computed from
** the program text (the arguments, 4 KiB, split over an SPMD module's
** partitions), so the test can check every figure that crosses. A module
** naming "fake_rendezvous" compiles only in company (rendezvous below). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../pjrt/pjrt_abi.h"
#include "fake_plugin.h"

static pjrt_abi_error_t* make_error(int code, const char* text) {
  return fake_error_make(code, text, strlen(text));
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

/*===--- compile-only: topology, compile, cost, memory ---===*/

struct pjrt_abi_topology_s {
  int num_devices;
};
struct pjrt_abi_device_description_s {
  int id;
};
struct pjrt_abi_executable_s {
  double ops, while_ops;
  int64_t code_size;
  int64_t partitions; /* the module's mhlo.num_partitions: each chip holds 1/partitions of the arguments */
  pjrt_abi_named_value_t cost[4];
  char fingerprint[32];
  char serialized[48]; /* "FAKEEXE1" + the fingerprint */
};
/* What DeserializeAndLoad made of serialised bytes (no client: the fake
** only checks that the bytes are one of its executables). */
struct pjrt_abi_loaded_executable_s {
  char fingerprint[32];
};

static pjrt_abi_device_description_t g_descriptions[4] = {{0}, {1}, {2}, {3}};
static pjrt_abi_device_description_t* const g_description_list[4] = {&g_descriptions[0], &g_descriptions[1],
                                                                     &g_descriptions[2], &g_descriptions[3]};

static pjrt_abi_error_t* topology_create(void* p) {
  pjrt_abi_topology_create_args_t* a = p;
  if (a->struct_size < pjrt_abi_topology_create_args_t_SIZE) return make_error(3, "fake: short struct");
  int n = 0;
  if (a->topology_name_size == 8 && memcmp(a->topology_name, "fake:1x1", 8) == 0) n = 1;
  if (a->topology_name_size == 8 && memcmp(a->topology_name, "fake:2x2", 8) == 0) n = 4;
  if (!n) {
    char text[128];
    snprintf(text, sizeof text, "fake: unknown topology '%.*s'", (int)a->topology_name_size,
             a->topology_name);
    return make_error(3, text);
  }
  a->topology = calloc(1, sizeof(*a->topology));
  if (!a->topology) abort();
  a->topology->num_devices = n;
  return NULL;
}

static pjrt_abi_error_t* topology_destroy(void* p) {
  free(((pjrt_abi_topology_destroy_args_t*)p)->topology);
  return NULL;
}

static pjrt_abi_error_t* topology_platform_name(void* p) {
  pjrt_abi_topology_string_args_t* a = p;
  a->text = "fake";
  a->text_size = 4;
  return NULL;
}

static pjrt_abi_error_t* topology_platform_version(void* p) {
  pjrt_abi_topology_string_args_t* a = p;
  a->text = "fake 1.0";
  a->text_size = 8;
  return NULL;
}

static pjrt_abi_error_t* topology_devices(void* p) {
  pjrt_abi_topology_device_descriptions_args_t* a = p;
  a->descriptions = g_description_list;
  a->num_descriptions = (size_t)a->topology->num_devices;
  return NULL;
}

static pjrt_abi_error_t* description_id(void* p) {
  pjrt_abi_device_description_id_args_t* a = p;
  a->id = a->device_description->id;
  return NULL;
}

static pjrt_abi_error_t* description_kind(void* p) {
  pjrt_abi_device_description_kind_args_t* a = p;
  a->device_kind = "Fake TPU";
  a->device_kind_size = 8;
  return NULL;
}

static double count_text(const char* code, size_t size, const char* word) {
  size_t n = strlen(word);
  double count = 0;
  for (size_t i = 0; i + n <= size; ++i)
    if (memcmp(code + i, word, n) == 0) ++count;
  return count;
}

static void set_float(pjrt_abi_named_value_t* v, const char* name, float value) {
  *v = (pjrt_abi_named_value_t){.struct_size = pjrt_abi_named_value_t_SIZE,
                                .name = name,
                                .name_size = strlen(name),
                                .type = PJRTABI_NAMED_VALUE_FLOAT,
                                .value.float_value = value,
                                .value_size = 1};
}

/* A "fake_rendezvous" compile waits (up to 10 s; 0.2 s for
** "fake_rendezvous_short") until another one is in flight beside it, and is
** refused if none comes: a test of concurrent compiles counts overlap, not
** time. A compile that arrives while another is in flight has met it, and
** says so to those waiting. */
static pthread_mutex_t g_rv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_rv_met = PTHREAD_COND_INITIALIZER;
static int g_rv_in_flight; /* under g_rv_lock */
static unsigned g_rv_meetings;

static bool rendezvous(bool short_wait) {
  pthread_mutex_lock(&g_rv_lock);
  bool met = g_rv_in_flight > 0;
  if (met) {
    ++g_rv_meetings;
    pthread_cond_broadcast(&g_rv_met);
  }
  const unsigned seen = g_rv_meetings;
  ++g_rv_in_flight;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  if (short_wait) {
    deadline.tv_nsec += 200000000;
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_nsec -= 1000000000;
      ++deadline.tv_sec;
    }
  } else {
    deadline.tv_sec += 10;
  }
  while (!met && g_rv_meetings == seen)
    if (pthread_cond_timedwait(&g_rv_met, &g_rv_lock, &deadline) == ETIMEDOUT) break;
  met = met || g_rv_meetings != seen;
  --g_rv_in_flight;
  pthread_mutex_unlock(&g_rv_lock);
  return met;
}

/* Cost model of the fake compiler: 1000 flops and 64 bytes per StableHLO
** op, 1 us per op; no estimate (-1) for a program with a while loop, as the
** TPU compiler does. */
static pjrt_abi_error_t* compile(void* p) {
  pjrt_abi_compile_args_t* a = p;
  if (a->struct_size < pjrt_abi_compile_args_t_SIZE) return make_error(3, "fake: short struct");
  if (!a->topology) return make_error(3, "fake: compile needs a topology");
  if (a->client) return make_error(3, "fake: compile-only, no client expected");
  if (!a->compile_options || a->compile_options_size == 0) return make_error(3, "fake: no compile options");
  const char* code = a->program->code;
  size_t size = a->program->code_size;
  if (count_text(code, size, "stablehlo.fft")) return make_error(3, "fake compiler: FFT is not supported");
  if (count_text(code, size, "fake_rendezvous") &&
      !rendezvous(count_text(code, size, "fake_rendezvous_short")))
    return make_error(3, "fake compiler: compiled alone (no other compile in flight in time)");
  pjrt_abi_executable_t* e = calloc(1, sizeof(*e));
  if (!e) abort();
  e->ops = count_text(code, size, "stablehlo.");
  e->while_ops = count_text(code, size, "stablehlo.while");
  e->code_size = (int64_t)size;
  static const char kParts[] = "mhlo.num_partitions = ";
  const size_t n = sizeof kParts - 1;
  e->partitions = 1;
  for (size_t i = 0; i + n < size; ++i) {
    if (memcmp(code + i, kParts, n) != 0) continue;
    int64_t v = 0;
    for (size_t j = i + n; j < size && code[j] >= '0' && code[j] <= '9'; ++j) v = v * 10 + (code[j] - '0');
    if (v > 1) e->partitions = v;
    break;
  }
  set_float(&e->cost[0], "flops", (float)(1000 * e->ops));
  set_float(&e->cost[1], "bytes accessed", (float)(64 * e->ops));
  set_float(&e->cost[2], "transcendentals", 0.0f);
  set_float(&e->cost[3], "optimal_seconds", e->while_ops ? -1.0f : (float)(1e-6 * e->ops));
  snprintf(e->fingerprint, sizeof e->fingerprint, "fake-%lld", (long long)size);
  a->executable = e;
  return NULL;
}

static pjrt_abi_error_t* executable_destroy(void* p) {
  free(((pjrt_abi_executable_destroy_args_t*)p)->executable);
  return NULL;
}

static pjrt_abi_error_t* cost_analysis(void* p) {
  pjrt_abi_executable_cost_analysis_args_t* a = p;
  a->properties = a->executable->cost;
  a->num_properties = 4;
  return NULL;
}

/* Arguments 4 KiB, temporaries 16 bytes per byte of program text. */
static pjrt_abi_error_t* memory_stats(void* p) {
  pjrt_abi_compiled_memory_stats_args_t* a = p;
  if (a->struct_size < pjrt_abi_compiled_memory_stats_args_t_SIZE) return make_error(3, "fake: short struct");
  a->argument_size_in_bytes = 4096 / a->executable->partitions;
  a->output_size_in_bytes = 1024;
  a->temp_size_in_bytes = 16 * a->executable->code_size;
  a->generated_code_size_in_bytes = 100;
  return NULL;
}

static pjrt_abi_error_t* serialize(void* p) {
  pjrt_abi_executable_serialize_args_t* a = p;
  pjrt_abi_executable_t* e = (pjrt_abi_executable_t*)a->executable;
  snprintf(e->serialized, sizeof e->serialized, "FAKEEXE1%s", e->fingerprint);
  a->serialized_bytes = e->serialized;
  a->serialized_bytes_size = strlen(e->serialized);
  a->serialized_executable = NULL;
  a->serialized_executable_deleter = NULL; /* the bytes live as long as the executable */
  return NULL;
}

static pjrt_abi_error_t* deserialize_and_load(void* p) {
  pjrt_abi_deserialize_and_load_args_t* a = p;
  size_t n = a->serialized_executable_size;
  if (n < 8 || n >= 8 + 32 || memcmp(a->serialized_executable, "FAKEEXE1", 8) != 0)
    return make_error(3, "fake: not a serialised fake executable");
  pjrt_abi_loaded_executable_t* l = calloc(1, sizeof(*l));
  if (!l) abort();
  memcpy(l->fingerprint, a->serialized_executable + 8, n - 8);
  a->loaded_executable = l;
  return NULL;
}

static pjrt_abi_error_t* loaded_executable_destroy(void* p) {
  free((void*)((pjrt_abi_executable_destroy_args_t*)p)->executable);
  return NULL;
}

static pjrt_abi_error_t* fingerprint(void* p) {
  pjrt_abi_executable_string_args_t* a = p;
  a->text = a->executable->fingerprint;
  a->text_size = strlen(a->executable->fingerprint);
  return NULL;
}

static union {
  unsigned char bytes[PJRTABI_SLOT_OFFSET(PJRTABI_EXECUTABLE_GET_COMPILED_MEMORY_STATS + 1)];
  pjrt_abi_api_head_t head;
} g_api;

__attribute__((visibility("default"))) const void* GetPjrtApi(void) {
  if (g_api.head.struct_size == 0) {
    void* const entries[][2] = {
        {(void*)client_create, (void*)(uintptr_t)PJRTABI_CLIENT_CREATE},
        {(void*)description_id, (void*)(uintptr_t)PJRTABI_DEVICE_DESCRIPTION_ID},
        {(void*)description_kind, (void*)(uintptr_t)PJRTABI_DEVICE_DESCRIPTION_KIND},
        {(void*)executable_destroy, (void*)(uintptr_t)PJRTABI_EXECUTABLE_DESTROY},
        {(void*)cost_analysis, (void*)(uintptr_t)PJRTABI_EXECUTABLE_GET_COST_ANALYSIS},
        {(void*)topology_create, (void*)(uintptr_t)PJRTABI_TOPOLOGY_CREATE},
        {(void*)topology_destroy, (void*)(uintptr_t)PJRTABI_TOPOLOGY_DESTROY},
        {(void*)topology_platform_name, (void*)(uintptr_t)PJRTABI_TOPOLOGY_PLATFORM_NAME},
        {(void*)topology_platform_version, (void*)(uintptr_t)PJRTABI_TOPOLOGY_PLATFORM_VERSION},
        {(void*)topology_devices, (void*)(uintptr_t)PJRTABI_TOPOLOGY_GET_DEVICE_DESCRIPTIONS},
        {(void*)compile, (void*)(uintptr_t)PJRTABI_COMPILE},
        {(void*)fingerprint, (void*)(uintptr_t)PJRTABI_EXECUTABLE_FINGERPRINT},
        {(void*)serialize, (void*)(uintptr_t)PJRTABI_EXECUTABLE_SERIALIZE},
        {(void*)deserialize_and_load, (void*)(uintptr_t)PJRTABI_EXECUTABLE_DESERIALIZE_AND_LOAD},
        {(void*)loaded_executable_destroy, (void*)(uintptr_t)PJRTABI_LOADED_EXECUTABLE_DESTROY},
        {(void*)memory_stats, (void*)(uintptr_t)PJRTABI_EXECUTABLE_GET_COMPILED_MEMORY_STATS}};
    fake_api_fill(&g_api, sizeof(g_api.bytes), entries, sizeof(entries) / sizeof(entries[0]));
  }
  return g_api.bytes;
}
