/* status.c: status objects: a code plus a message saying what was expected
** and what came. NULL is OK, so the happy path costs a pointer compare. */
#include <stdio.h>

#include "base.h"

struct tpurt_status_s {
  tpurt_status_code_t code;
  char* message;
};

tpurt_status_t tpurt_status_vcreate(tpurt_status_code_t code, const char* fmt, va_list ap) {
  if (code == TPURT_OK) return NULL;
  tpurt_status_t status = tpurt_xmalloc(sizeof(*status));
  status->code = code;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  status->message = tpurt_xmalloc((size_t)n + 1);
  vsnprintf(status->message, (size_t)n + 1, fmt, ap);
  return status;
}

tpurt_status_t tpurt_status_create(tpurt_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpurt_status_t status = tpurt_status_vcreate(code, fmt, ap);
  va_end(ap);
  return status;
}

tpurt_status_code_t tpurt_status_code(tpurt_borrowed_status_t status) {
  return status ? status->code : TPURT_OK;
}

const char* tpurt_status_message(tpurt_borrowed_status_t status) { return status ? status->message : ""; }

tpurt_status_t tpurt_status_clone(tpurt_borrowed_status_t status) {
  return status ? tpurt_status_create(status->code, "%s", status->message) : NULL;
}

void tpurt_status_free(tpurt_status_t status) {
  if (!status) return;
  free(status->message);
  free(status);
}

void tpurt_status_ignore(tpurt_status_t status) { tpurt_status_free(status); }

tpurt_status_t tpurt_status_annotate_consume(tpurt_status_t status, const char* prefix) {
  if (!status || !prefix) return status;
  size_t n = strlen(prefix) + 2 + strlen(status->message) + 1;
  char* message = tpurt_xmalloc(n);
  snprintf(message, n, "%s: %s", prefix, status->message);
  free(status->message);
  status->message = message;
  return status;
}
