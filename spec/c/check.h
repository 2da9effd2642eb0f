/*
** check.h -- the smallest test harness: CHECK(cond) records a failure with its line,
** and check_summary() prints the count and gives main's exit status.
*/
#ifndef XFER_CHECK_H
#define XFER_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures, check_count;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    check_count++;                                                                    \
    if (!(cond)) {                                                                    \
      check_failures++;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
    }                                                                                 \
  } while (0)

#define CHECK_STR(a, b)                                                               \
  do {                                                                                \
    check_count++;                                                                    \
    if (strcmp((a), (b))) {                                                           \
      check_failures++;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, \
              (a), (b));                                                              \
    }                                                                                 \
  } while (0)

static int check_summary(const char *name)
{
  printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
  return check_failures ? 1 : 0;
}

#endif
