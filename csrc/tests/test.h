/* test.h: a plain C test runner. A test file defines TEST(Group_Case)
** functions and ends with TEST_MAIN(...) listing them. */
#ifndef TPURT_TESTS_TEST_H_
#define TPURT_TESTS_TEST_H_

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/tpurt.h"

extern int test_failures_;

#define TEST(name) static void name(void)

#define EXPECT(cond)                                                        \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "  %s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++test_failures_;                                                     \
    }                                                                       \
  } while (0)

#define ASSERT(cond)                                                        \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "  %s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++test_failures_;                                                     \
      return;                                                               \
    }                                                                       \
  } while (0)

/* Fails the test (and returns) on a non-OK status, printing its message. */
#define ASSERT_OK(expr)                                                                                 \
  do {                                                                                                  \
    tpurt_status_t s_ = (expr);                                                                         \
    if (s_) {                                                                                           \
      fprintf(stderr, "  %s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, tpurt_status_message(s_)); \
      tpurt_status_free(s_);                                                                            \
      ++test_failures_;                                                                                 \
      return;                                                                                           \
    }                                                                                                   \
  } while (0)

/* Expects |expr| to fail with |code|; frees the status. */
#define EXPECT_STATUS(expr, code_)                                                               \
  do {                                                                                           \
    tpurt_status_t s_ = (expr);                                                                  \
    if (tpurt_status_code(s_) != (code_)) {                                                      \
      fprintf(stderr, "  %s:%d: %s: expected code %d, got %d (%s)\n", __FILE__, __LINE__, #expr, \
              (int)(code_), (int)tpurt_status_code(s_), tpurt_status_message(s_));               \
      ++test_failures_;                                                                          \
    }                                                                                            \
    tpurt_status_free(s_);                                                                       \
  } while (0)

typedef struct {
  const char* name;
  void (*fn)(void);
} test_case_t;

/* 1: the plugin named by TORCH_TPU_PJRT_PLUGIN loaded; 0: none is named;
** -1: the named plugin failed to load (said once on stderr). Tests that
** compile their golden modules use it to skip that part without a plugin. */
static inline int test_plugin_state(void) {
  static int state = 2;
  if (state != 2) return state;
  const char* path = getenv("TORCH_TPU_PJRT_PLUGIN");
  if (!path || !*path) return state = 0;
  tpurt_status_t s = tpurt_runtime_init();
  if (s) fprintf(stderr, "  plugin %s does not load: %s\n", path, tpurt_status_message(s));
  state = s ? -1 : 1;
  tpurt_status_free(s);
  return state;
}

/* A new contiguous f32 tensor of |rank| and |sizes| on device 0 holding
** |data|; aborts, saying why, when the storage cannot be made or written. */
static inline tpurt_tensor_t test_upload_f32(const float* data, int32_t rank, const int64_t* sizes) {
  tpurt_tensor_t t = {.dtype = TPURT_DTYPE_F32, .rank = rank};
  int64_t n = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = n;
    n *= sizes[i];
  }
  tpurt_status_t s = tpurt_storage_create(0, (size_t)n * 4, &t.storage);
  if (!s) s = tpurt_tensor_write_host(&t, data, (size_t)n * 4);
  if (s) {
    fprintf(stderr, "test_upload_f32: %s\n", tpurt_status_message(s));
    abort();
  }
  return t;
}

#define TEST_CASE(fn) {#fn, fn}

#define TEST_MAIN(...)                                                  \
  int test_failures_ = 0;                                               \
  int main(void) {                                                      \
    static const test_case_t cases[] = {__VA_ARGS__};                   \
    int failed = 0, n = (int)(sizeof(cases) / sizeof(cases[0]));        \
    for (int i = 0; i < n; ++i) {                                       \
      int before = test_failures_;                                      \
      cases[i].fn();                                                    \
      int ok = test_failures_ == before;                                \
      failed += !ok;                                                    \
      printf("%s %s\n", ok ? "PASS" : "FAIL", cases[i].name);           \
    }                                                                   \
    printf("%s: %d passed, %d failed\n", __FILE__, n - failed, failed); \
    return failed ? 1 : 0;                                              \
  }

#endif /* TPURT_TESTS_TEST_H_ */
