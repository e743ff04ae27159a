/* options.c: what the user asks of the plugin by name, in two channels.
**
**  - Client options (TORCH_TPU_PJRT_OPTIONS="name=value,..."): typed
**    PJRT_NamedValues for PJRT_Client_Create, e.g. the CUDA plugin's
**    preallocate=false,memory_fraction=0.5. Each plugin defines its own.
**  - Compile options (TORCH_TPU_XLA_OPTIONS="name=value ...", and per thread
**    tpurt_set_thread_compile_options, which TpuBackend(**options) uses): the
**    CompileOptionsProto's env_option_overrides, the generic channel through
**    which XLA sets DebugOptions fields by name (xla_dump_to=...). We write
**    the protobuf bytes ourselves: one encoder for the cache key and the
**    compile call alike. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>

#include "pjrt_internal.h"

/*===--- shared scanning ---===*/

static char* copy_span(const char* s, size_t n) {
  char* out = tpurt_xmalloc(n + 1);
  if (n) memcpy(out, s, n);
  out[n] = '\0';
  return out;
}

/* Trims blanks off both ends of [*begin, *end). */
static void trim(const char** begin, const char** end) {
  while (*begin < *end && isspace((unsigned char)**begin)) ++*begin;
  while (*end > *begin && isspace((unsigned char)(*end)[-1])) --*end;
}

/* An option name: letters, digits, '_', '.', '-' (plugin and XLA names). */
static bool valid_name(const char* s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = (unsigned char)s[i];
    if (!isalnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

/*===--- client options ---===*/

static bool equals_nocase(const char* s, const char* word) {
  for (; *s && *word; ++s, ++word)
    if (tolower((unsigned char)*s) != *word) return false;
  return *s == '\0' && *word == '\0';
}

/* Types one value: true/false -> bool, a decimal integer -> int64, a
** number -> float, "quoted" or anything else -> string. */
static TPURT_MUST_USE tpurt_status_t type_value(const char* name, const char* text,
                                                pjrt_named_option_t* out) {
  size_t n = strlen(text);
  if (n >= 2 && (text[0] == '"' || text[0] == '\'') && text[n - 1] == text[0]) {
    out->type = PJRT_OPTION_STRING;
    out->string_value = copy_span(text + 1, n - 2);
    return NULL;
  }
  if (text[0] == '"' || text[0] == '\'') {
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "option '%s': unterminated quote in %s", name, text);
  }
  if (equals_nocase(text, "true") || equals_nocase(text, "false")) {
    out->type = PJRT_OPTION_BOOL;
    out->bool_value = equals_nocase(text, "true");
    return NULL;
  }
  bool numeric = isdigit((unsigned char)text[0]) || ((text[0] == '-' || text[0] == '+' || text[0] == '.') &&
                                                     (isdigit((unsigned char)text[1]) || text[1] == '.'));
  if (numeric) {
    char* end = NULL;
    errno = 0;
    long long i = strtoll(text, &end, 10);
    if (*end == '\0') {
      if (errno == ERANGE) {
        return tpurt_status_create(TPURT_INVALID_ARGUMENT, "option '%s': %s is out of range for an int64",
                                   name, text);
      }
      out->type = PJRT_OPTION_INT64;
      out->int_value = (int64_t)i;
      return NULL;
    }
    errno = 0;
    float f = strtof(text, &end);
    if (*end == '\0') {
      if (errno == ERANGE || !isfinite(f)) {
        return tpurt_status_create(TPURT_INVALID_ARGUMENT, "option '%s': %s is out of range for a float",
                                   name, text);
      }
      out->type = PJRT_OPTION_FLOAT;
      out->float_value = f;
      return NULL;
    }
    return tpurt_status_create(TPURT_INVALID_ARGUMENT,
                               "option '%s': '%s' is not a number (quote it to pass a string)", name, text);
  }
  out->type = PJRT_OPTION_STRING;
  out->string_value = tpurt_xstrdup(text);
  return NULL;
}

tpurt_status_t pjrt_client_options_parse(const char* spec, pjrt_client_options_t* out_options) {
  memset(out_options, 0, sizeof(*out_options));
  if (!spec) return NULL;
  tpurt_status_t status = NULL;
  const char* p = spec;
  while (!status && *p) {
    const char* item_end = strchr(p, ',');
    if (!item_end) item_end = p + strlen(p);
    const char* begin = p;
    const char* end = item_end;
    p = *item_end ? item_end + 1 : item_end;
    trim(&begin, &end);
    if (begin == end) continue; /* "a=1,,b=2" and a trailing comma */
    const char* eq = memchr(begin, '=', (size_t)(end - begin));
    if (!eq) {
      status =
          tpurt_status_create(TPURT_INVALID_ARGUMENT, "'%.*s' is not name=value", (int)(end - begin), begin);
      break;
    }
    const char* name_end = eq;
    const char* value_begin = eq + 1;
    trim(&begin, &name_end);
    trim(&value_begin, &end);
    if (!valid_name(begin, (size_t)(name_end - begin))) {
      status = tpurt_status_create(TPURT_INVALID_ARGUMENT, "'%.*s' is not an option name",
                                   (int)(name_end - begin), begin);
      break;
    }
    char* name = copy_span(begin, (size_t)(name_end - begin));
    for (size_t i = 0; i < out_options->count && !status; ++i) {
      if (strcmp(out_options->items[i].name, name) == 0)
        status = tpurt_status_create(TPURT_INVALID_ARGUMENT, "option '%s' is given twice", name);
    }
    if (!status && value_begin == end)
      status = tpurt_status_create(TPURT_INVALID_ARGUMENT, "option '%s' has no value", name);
    pjrt_named_option_t option = {.name = name};
    char* value = status ? NULL : copy_span(value_begin, (size_t)(end - value_begin));
    if (!status) status = type_value(name, value, &option);
    free(value);
    if (status) {
      free(name);
      break;
    }
    out_options->items =
        tpurt_xrealloc(out_options->items, sizeof(*out_options->items) * (out_options->count + 1));
    out_options->items[out_options->count++] = option;
  }
  if (status) {
    pjrt_client_options_free(out_options);
    return tpurt_status_annotate_consume(status, "TORCH_TPU_PJRT_OPTIONS");
  }
  return NULL;
}

void pjrt_client_options_free(pjrt_client_options_t* options) {
  for (size_t i = 0; i < options->count; ++i) {
    free(options->items[i].name);
    free(options->items[i].string_value);
  }
  free(options->items);
  memset(options, 0, sizeof(*options));
}

void pjrt_client_options_describe(const pjrt_client_options_t* options, struct tpurt_strbuf_s* out) {
  if (options->count == 0) tpurt_strbuf_puts(out, "(none)");
  for (size_t i = 0; i < options->count; ++i) {
    const pjrt_named_option_t* o = &options->items[i];
    if (i) tpurt_strbuf_puts(out, ", ");
    switch (o->type) {
      case PJRT_OPTION_STRING:
        tpurt_strbuf_printf(out, "%s=\"%s\" (string)", o->name, o->string_value);
        break;
      case PJRT_OPTION_INT64:
        tpurt_strbuf_printf(out, "%s=%lld (int64)", o->name, (long long)o->int_value);
        break;
      case PJRT_OPTION_FLOAT:
        tpurt_strbuf_printf(out, "%s=%g (float)", o->name, (double)o->float_value);
        break;
      case PJRT_OPTION_BOOL:
        tpurt_strbuf_printf(out, "%s=%s (bool)", o->name, o->bool_value ? "true" : "false");
        break;
    }
  }
}

void pjrt_client_options_to_abi(const pjrt_client_options_t* options, pjrt_abi_named_value_t* out_values) {
  for (size_t i = 0; i < options->count; ++i) {
    const pjrt_named_option_t* o = &options->items[i];
    pjrt_abi_named_value_t* v = &out_values[i];
    memset(v, 0, sizeof(*v));
    v->struct_size = pjrt_abi_named_value_t_SIZE;
    v->name = o->name;
    v->name_size = strlen(o->name);
    v->value_size = 1;
    switch (o->type) {
      case PJRT_OPTION_STRING:
        v->type = PJRTABI_NAMED_VALUE_STRING;
        v->value.string_value = o->string_value;
        v->value_size = strlen(o->string_value);
        break;
      case PJRT_OPTION_INT64:
        v->type = PJRTABI_NAMED_VALUE_INT64;
        v->value.int64_value = o->int_value;
        break;
      case PJRT_OPTION_FLOAT:
        v->type = PJRTABI_NAMED_VALUE_FLOAT;
        v->value.float_value = o->float_value;
        break;
      case PJRT_OPTION_BOOL:
        v->type = PJRTABI_NAMED_VALUE_BOOL;
        v->value.bool_value = o->bool_value;
        break;
    }
  }
}

/*===--- compile options ---===*/

/* name=value text pairs, sorted by name (the encoding, and so the cache
** key, must not depend on the order the user wrote them in). */
typedef struct {
  char** names;
  char** values;
  size_t count;
} kv_list_t;

static void kv_free(kv_list_t* list) {
  for (size_t i = 0; i < list->count; ++i) {
    free(list->names[i]);
    free(list->values[i]);
  }
  free(list->names);
  free(list->values);
  memset(list, 0, sizeof(*list));
}

/* Sets |name| to |value| (both taken), replacing an earlier value. */
static void kv_set_take(kv_list_t* list, char* name, char* value) {
  size_t i = 0;
  while (i < list->count && strcmp(list->names[i], name) < 0) ++i;
  if (i < list->count && strcmp(list->names[i], name) == 0) {
    free(name);
    free(list->values[i]);
    list->values[i] = value;
    return;
  }
  list->names = tpurt_xrealloc(list->names, sizeof(char*) * (list->count + 1));
  list->values = tpurt_xrealloc(list->values, sizeof(char*) * (list->count + 1));
  memmove(list->names + i + 1, list->names + i, sizeof(char*) * (list->count - i));
  memmove(list->values + i + 1, list->values + i, sizeof(char*) * (list->count - i));
  list->names[i] = name;
  list->values[i] = value;
  list->count++;
}

/* XLA converts a string to the DebugOptions field's own type and spells
** booleans True/False; accept the usual spellings. */
static char* normalise_value(const char* s, size_t n) {
  char* v = copy_span(s, n);
  if (equals_nocase(v, "true")) {
    free(v);
    return tpurt_xstrdup("True");
  }
  if (equals_nocase(v, "false")) {
    free(v);
    return tpurt_xstrdup("False");
  }
  return v;
}

/* "name=value name=value" (blank-separated; a leading "--" is allowed, as in
** XLA_FLAGS) into |list|, on top of what it holds. */
static TPURT_MUST_USE tpurt_status_t kv_parse(const char* spec, const char* what, kv_list_t* list) {
  const char* p = spec ? spec : "";
  while (*p) {
    while (*p && isspace((unsigned char)*p)) ++p;
    if (!*p) break;
    const char* begin = p;
    while (*p && !isspace((unsigned char)*p)) ++p;
    const char* end = p;
    if (end - begin >= 2 && begin[0] == '-' && begin[1] == '-') begin += 2;
    const char* eq = memchr(begin, '=', (size_t)(end - begin));
    if (!eq || eq == begin || !valid_name(begin, (size_t)(eq - begin))) {
      return tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s: '%.*s' is not name=value", what,
                                 (int)(end - begin), begin);
    }
    if (eq + 1 == end) {
      return tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s: option '%.*s' has no value", what,
                                 (int)(eq - begin), begin);
    }
    kv_set_take(list, copy_span(begin, (size_t)(eq - begin)),
                normalise_value(eq + 1, (size_t)(end - eq - 1)));
  }
  return NULL;
}

/* Protobuf wire format: varints and length-delimited fields. */
static void put_varint(tpurt_strbuf_t* out, uint64_t v) {
  char bytes[10];
  size_t n = 0;
  do {
    bytes[n] = (char)(v & 0x7f);
    v >>= 7;
    if (v) bytes[n] = (char)(bytes[n] | 0x80);
    ++n;
  } while (v);
  tpurt_strbuf_append(out, bytes, n);
}

static void put_bytes_field(tpurt_strbuf_t* out, uint32_t field, const char* data, size_t n) {
  put_varint(out, ((uint64_t)field << 3) | 2);
  put_varint(out, n);
  tpurt_strbuf_append(out, data, n);
}

/* CompileOptionsProto (xla/pjrt/proto/compile_options.proto):
**   3: executable_build_options {4: num_replicas = 1, 5: num_partitions = 1}
**   4: compile_portable_executable = true (one executable runs on any device
**      picked at Execute time; an empty proto aborts the CPU plugin)
**   7: env_option_overrides, map<string, OptionOverrideProto>: per entry
**      {1: key, 2: {1: string_field}}; XLA converts the string to the type
**      of the DebugOptions field of that name, or fails naming the key. */
static const char kBase[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01, 0x20, 0x01};

static void encode(const kv_list_t* list, tpurt_strbuf_t* out) {
  tpurt_strbuf_append(out, kBase, sizeof(kBase));
  for (size_t i = 0; i < list->count; ++i) {
    tpurt_strbuf_t value = {0}, entry = {0};
    put_bytes_field(&value, 1, list->values[i], strlen(list->values[i]));
    put_bytes_field(&entry, 1, list->names[i], strlen(list->names[i]));
    put_bytes_field(&entry, 2, value.data, value.size);
    put_bytes_field(out, 7, entry.data, entry.size);
    tpurt_strbuf_free(&value);
    tpurt_strbuf_free(&entry);
  }
}

static void describe(const kv_list_t* list, tpurt_strbuf_t* out) {
  for (size_t i = 0; i < list->count; ++i)
    tpurt_strbuf_printf(out, "%s%s=%s", i ? " " : "", list->names[i], list->values[i]);
}

/* The encoded options and their description, for one scope. */
typedef struct compile_options_s {
  char* bytes;
  size_t size;
  char* text; /* "name=value ..." or "" */
} compile_options_t;

static void compile_options_free(compile_options_t* o) {
  if (!o) return;
  free(o->bytes);
  free(o->text);
  free(o);
}

static compile_options_t* compile_options_build(const kv_list_t* list) {
  compile_options_t* o = tpurt_xcalloc(1, sizeof(*o));
  tpurt_strbuf_t bytes = {0}, text = {0};
  encode(list, &bytes);
  describe(list, &text);
  o->bytes = bytes.data;
  o->size = bytes.size;
  o->text = text.data ? text.data : tpurt_xstrdup("");
  return o;
}

tpurt_status_t pjrt_compile_options_encode(const char* spec, char** out_bytes, size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  kv_list_t list = {0};
  tpurt_status_t status = kv_parse(spec, "compile options", &list);
  if (!status) {
    tpurt_strbuf_t bytes = {0};
    encode(&list, &bytes);
    *out_bytes = bytes.data;
    *out_size = bytes.size;
  }
  kv_free(&list);
  return status;
}

/* Process scope: TORCH_TPU_XLA_OPTIONS, read once. */
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static kv_list_t g_env_list;
static compile_options_t* g_env_options;
static char* g_env_error;

static void read_env_once(void) {
  tpurt_status_t status = kv_parse(tpurt_config()->xla_options, "TORCH_TPU_XLA_OPTIONS", &g_env_list);
  if (status) {
    g_env_error = tpurt_xstrdup(tpurt_status_message(status));
    tpurt_status_free(status);
    kv_free(&g_env_list);
  }
  g_env_options = compile_options_build(&g_env_list);
}

static TPURT_MUST_USE tpurt_status_t env_options(const compile_options_t** out) {
  pthread_once(&g_env_once, read_env_once);
  *out = g_env_options;
  if (g_env_error) return tpurt_status_create(TPURT_INVALID_ARGUMENT, "%s", g_env_error);
  return NULL;
}

/* Thread scope: the process options plus this thread's, which win. Freed
** with the thread. */
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_thread_key;

static void free_thread_options(void* p) { compile_options_free(p); }
static void make_key_once(void) {
  if (pthread_key_create(&g_thread_key, free_thread_options) != 0) abort();
}

tpurt_status_t tpurt_set_thread_compile_options(const char* spec) {
  pthread_once(&g_key_once, make_key_once);
  compile_options_t* next = NULL;
  if (spec && *spec) {
    const compile_options_t* env = NULL;
    TPURT_RETURN_IF_ERROR(env_options(&env));
    kv_list_t list = {0};
    for (size_t i = 0; i < g_env_list.count; ++i)
      kv_set_take(&list, tpurt_xstrdup(g_env_list.names[i]), tpurt_xstrdup(g_env_list.values[i]));
    tpurt_status_t status = kv_parse(spec, "XLA compile options", &list);
    if (status) {
      kv_free(&list);
      return status;
    }
    next = compile_options_build(&list);
    kv_free(&list);
  }
  compile_options_free(pthread_getspecific(g_thread_key));
  if (pthread_setspecific(g_thread_key, next) != 0) abort();
  return NULL;
}

bool pjrt_thread_has_compile_options(void) {
  pthread_once(&g_key_once, make_key_once);
  return pthread_getspecific(g_thread_key) != NULL;
}

tpurt_status_t pjrt_current_compile_options(const char** out_bytes, size_t* out_size, const char** out_text) {
  pthread_once(&g_key_once, make_key_once);
  const compile_options_t* o = pthread_getspecific(g_thread_key);
  if (!o) TPURT_RETURN_IF_ERROR(env_options(&o));
  *out_bytes = o->bytes;
  *out_size = o->size;
  if (out_text) *out_text = o->text;
  return NULL;
}

/* An SPMD program (one program, partitioned by XLA over |num_partitions|
** devices):
**   3: executable_build_options {
**        4: num_replicas = 1, 5: num_partitions = N, 6: use_spmd_partitioning,
**        19: use_shardy_partitioner,
**        9: device_assignment {1: replica_count = 1, 2: computation_count = N,
**                              3: computation_devices {1: id} per partition}}
** Not portable (field 4): the device assignment fixes the devices. The
** override fields (7) of the thread's options follow, so TORCH_TPU_XLA_OPTIONS
** and per-thread options hold here too. */
static void put_varint_field(tpurt_strbuf_t* out, uint32_t field, uint64_t v) {
  put_varint(out, (uint64_t)field << 3);
  put_varint(out, v);
}

tpurt_status_t pjrt_spmd_compile_options(int32_t num_partitions, const int64_t* device_ids, char** out_bytes,
                                         size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  if (num_partitions < 1)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "an SPMD program needs at least one device, got %d",
                               num_partitions);
  const char* current = NULL;
  size_t current_size = 0;
  TPURT_RETURN_IF_ERROR(pjrt_current_compile_options(&current, &current_size, NULL));
  tpurt_strbuf_t assignment = {0}, build = {0}, out = {0};
  put_varint_field(&assignment, 1, 1);
  put_varint_field(&assignment, 2, (uint64_t)num_partitions);
  for (int32_t i = 0; i < num_partitions; ++i) {
    tpurt_strbuf_t devices = {0};
    put_varint_field(&devices, 1, (uint64_t)device_ids[i]);
    put_bytes_field(&assignment, 3, devices.data, devices.size);
    tpurt_strbuf_free(&devices);
  }
  put_varint_field(&build, 4, 1);
  put_varint_field(&build, 5, (uint64_t)num_partitions);
  put_varint_field(&build, 6, 1);
  put_bytes_field(&build, 9, assignment.data, assignment.size);
  /* Shardy reads the module's sdy.mesh/sdy.sharding (engine/spmd.c); GSPMD,
  ** the default, is being retired and warns at every compile. */
  put_varint_field(&build, 19, 1);
  put_bytes_field(&out, 3, build.data, build.size);
  /* The thread's options are kBase followed by the override fields. */
  if (current_size > sizeof(kBase))
    tpurt_strbuf_append(&out, current + sizeof(kBase), current_size - sizeof(kBase));
  tpurt_strbuf_free(&assignment);
  tpurt_strbuf_free(&build);
  *out_bytes = out.data;
  *out_size = out.size;
  return NULL;
}
