/* dtype_support.c: which element types this platform has, asked of its
** plugin once per dtype, never taken from a list we keep. The question is a
** program that converts f32 to the dtype and back: a platform that lacks
** the type (f64 or float8 on some accelerators) refuses to compile it, and
** its compiler's words go into the error, with the platform's name. The
** probe goes through the executable cache like any program, so a warm
** process compiles nothing for it. */
#include <stdio.h>

#include "../base/base.h"
#include "../cache/cache.h"
#include "engine.h"

enum { SUPPORT_UNKNOWN = 0, SUPPORT_YES = 1, SUPPORT_NO = 2 };

static pthread_mutex_t g_support_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_support[TPURT_DTYPE_COUNT] TPURT_GUARDED_BY(g_support_mutex);
static uint32_t g_support_gen
    TPURT_GUARDED_BY(g_support_mutex); /* the shadow generation the answers hold for */
/* The plugin's reason for a refusal, kept for later askers. */
static char g_reason[TPURT_DTYPE_COUNT][512] TPURT_GUARDED_BY(g_support_mutex);

/* Compiles the probe for |dtype|; on failure copies the plugin's message
** into |reason|. Returns whether it compiled. */
static bool probe_compiles(tpurt_dtype_t dtype, char* reason, size_t reason_size) {
  const char* t = ir_dtype_mlir_name(dtype);
  /* StableHLO converts complex only to complex: a complex type comes back
  ** to f32 through its real part */
  char part[128] = "";
  if (tpurt_dtype_is_complex(dtype)) {
    const char* r = ir_dtype_mlir_name(tpurt_dtype_to_real(dtype));
    snprintf(part, sizeof part, "    %%p = \"stablehlo.real\"(%%b) : (tensor<2x%s>) -> tensor<2x%s>\n", t, r);
  }
  const char* back = part[0] ? "%p" : "%b";
  const char* back_t = part[0] ? ir_dtype_mlir_name(tpurt_dtype_to_real(dtype)) : t;
  char mlir[1024];
  int n = snprintf(mlir, sizeof mlir,
                   "module @tpurt_dtype_probe {\n"
                   "  func.func public @main(%%a: tensor<2xf32>) -> (tensor<2xf32>) {\n"
                   "    %%b = \"stablehlo.convert\"(%%a) : (tensor<2xf32>) -> tensor<2x%s>\n"
                   "%s"
                   "    %%c = \"stablehlo.convert\"(%s) : (tensor<2x%s>) -> tensor<2xf32>\n"
                   "    \"func.return\"(%%c) : (tensor<2xf32>) -> ()\n"
                   "  }\n"
                   "}\n",
                   t, part, back, back_t);
  pjrt_executable_t* exe = NULL;
  bool hit = false;
  cache_shadow_label("dtype probe");
  tpurt_status_t s = cache_get_or_compile(mlir, (size_t)n, &exe, &hit);
  if (s) {
    snprintf(reason, reason_size, "%s", tpurt_status_message(s));
    tpurt_status_free(s);
    return false;
  }
  pjrt_executable_release(exe);
  /* Under a shadow target the chip must have the type too: the same
  ** probe, compiled by the target's compiler. */
  tpurt_target_t* target = (tpurt_target_t*)tpurt_shadow_target();
  if (target) {
    tpurt_target_program_t program;
    s = tpurt_target_compile(target, mlir, (size_t)n, NULL, 0, &program);
    if (s) {
      tpurt_target_info_t info;
      tpurt_target_info(target, &info);
      snprintf(reason, reason_size, "the target %s (%s) refuses it: %s", info.topology, info.device_kind,
               tpurt_status_message(s));
      tpurt_status_free(s);
      return false;
    }
  }
  return true;
}

tpurt_status_t tpurt_dtype_check(tpurt_dtype_t dtype) {
  if (dtype <= TPURT_DTYPE_INVALID || dtype >= TPURT_DTYPE_COUNT)
    return tpurt_status_create(TPURT_INVALID_ARGUMENT, "invalid dtype %d", (int)dtype);
  /* the probe is written in f32: a platform the probe can ask has it */
  if (dtype == TPURT_DTYPE_F32) return NULL;
  /* a shadow target set (or changed) since: the answers are asked again */
  const uint32_t gen = __atomic_load_n(&pjrt_shadow_gen_now, __ATOMIC_ACQUIRE);
  if (gen == __atomic_load_n(&g_support_gen, __ATOMIC_ACQUIRE) &&
      __atomic_load_n(&g_support[dtype], __ATOMIC_ACQUIRE) == SUPPORT_YES)
    return NULL;
  /* the probe compiles at most once per dtype: later askers wait for it */
  pthread_mutex_lock(&g_support_mutex);
  if (gen != g_support_gen) {
    for (int i = 0; i < TPURT_DTYPE_COUNT; ++i)
      __atomic_store_n(&g_support[i], SUPPORT_UNKNOWN, __ATOMIC_RELEASE);
    __atomic_store_n(&g_support_gen, gen, __ATOMIC_RELEASE);
  }
  if (g_support[dtype] == SUPPORT_UNKNOWN) {
    int verdict = probe_compiles(dtype, g_reason[dtype], sizeof g_reason[dtype]) ? SUPPORT_YES : SUPPORT_NO;
    __atomic_store_n(&g_support[dtype], verdict, __ATOMIC_RELEASE);
  }
  int verdict = g_support[dtype];
  pthread_mutex_unlock(&g_support_mutex);
  if (verdict == SUPPORT_YES) return NULL;
  tpurt_runtime_info_t info;
  tpurt_status_t s = pjrt_info(&info);
  const char* platform = (!s && info.platform_name) ? info.platform_name : "?";
  tpurt_status_free(s);
  if (tpurt_shadow_target()) platform = tpurt_lowering_platform();
  return tpurt_status_create(TPURT_UNIMPLEMENTED,
                             "dtype %s is not supported on this device's platform '%s' (its plugin could "
                             "not compile a conversion to it: %s)",
                             tpurt_dtype_name(dtype), platform, g_reason[dtype]);
}
