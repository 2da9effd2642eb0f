/*
** test_file_io.c -- the queue of file requests in flight (src/files/file_io.c) on its own:
** whole reads and writes through both engines, and the io_uring stall guard, which turns a
** request that never completes into an error instead of a wait without end. A pipe with
** nothing written into it is the request that never completes: io_uring parks a read of it
** until data comes, and only the guard's cancel ends it.
*/
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../../src/files/file_io.h"
#include "check.h"

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A write then a read of the same bytes through a queue of `engine` over a scratch file. */
static void test_round_trip(xfer_fio_engine engine)
{
  char path[] = "/tmp/xfer_file_io_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  unlink(path);
  xfer_fio f = { .ctx = NULL, .fd = fd, .direct = 0, .path = path };
  static char out[3][10000], in[3][10000];
  for (int s = 0; s < 3; s++)
    for (int i = 0; i < 10000; i++) out[s][i] = (char)(i * 7 + s);
  xfer_fio_queue *q = NULL;
  xfer_error err;
  xfer_code code = xfer_fio_queue_open(&f, engine, 3, 2, XFER_FIO_STALL_MS, &q, &err);
  if (code == XFER_E_UNAVAILABLE) { /* a kernel or build without io_uring: said, not failed */
    printf("test_file_io: %s not available here: %s\n", xfer_fio_engine_name(engine), err.message);
    close(fd);
    return;
  }
  CHECK(code == XFER_E_OK);
  if (code) return;
  for (int s = 0; s < 3; s++) xfer_fio_submit(q, s, 1, out[s], 10000, 10000, (uint64_t)s * 10000);
  for (int s = 0; s < 3; s++) CHECK(xfer_fio_wait(q, s, &err) == XFER_E_OK);
  for (int s = 0; s < 3; s++) xfer_fio_submit(q, s, 0, in[s], 10000, 10000, (uint64_t)s * 10000);
  for (int s = 0; s < 3; s++) CHECK(xfer_fio_wait(q, s, &err) == XFER_E_OK);
  CHECK(memcmp(in, out, sizeof in) == 0);
  /* a read past the end of the file: truncated, with the offset where it ended */
  xfer_fio_submit(q, 0, 0, in[0], 10000, 10000, 25000);
  CHECK(xfer_fio_wait(q, 0, &err) == XFER_E_INVALID);
  CHECK(strstr(err.message, "truncated") != NULL && err.offset == 30000);
  xfer_fio_queue_close(q);
  close(fd);
}

static void test_stall_guard(void)
{
  char why[256];
  if (!xfer_fio_uring_usable(why, sizeof why)) {
    printf("test_file_io: the stall guard not checked: io_uring unusable here: %s\n", why);
    return;
  }
  int p[2];
  CHECK(pipe(p) == 0);
  xfer_fio f = { .ctx = NULL, .fd = p[0], .direct = 0, .path = "a pipe nobody writes" };
  xfer_fio_queue *q = NULL;
  xfer_error err;
  CHECK(xfer_fio_queue_open(&f, XFER_FIO_URING, 2, 0, 200, &q, &err) == XFER_E_OK);
  if (!q) return;
  char buf[64];
  double t0 = now_s();
  xfer_fio_submit(q, 0, 0, buf, sizeof buf, sizeof buf, 0);
  xfer_code code = xfer_fio_wait(q, 0, &err);
  double waited = now_s() - t0;
  CHECK(code == XFER_E_READ);
  CHECK(err.native == ETIMEDOUT);
  CHECK(strstr(err.message, "no completion in 200 ms") != NULL);
  CHECK(waited >= 0.15 && waited < 10);
  /* the queue is still usable after a stall: a read that does complete */
  CHECK(write(p[1], "0123456789", 10) == 10);
  xfer_fio_submit(q, 1, 0, buf, 10, 10, 0);
  CHECK(xfer_fio_wait(q, 1, &err) == XFER_E_OK && memcmp(buf, "0123456789", 10) == 0);
  xfer_fio_queue_close(q);
  close(p[0]);
  close(p[1]);
}

int main(void)
{
  test_round_trip(XFER_FIO_THREADS);
  test_round_trip(XFER_FIO_URING);
  test_stall_guard();
  return check_summary("test_file_io");
}
