/* A thread-record publisher for the update-order watchpoint tests
 * (update_order_test.cpp), writing the tests' own record (tests/support/test_record.h).
 *
 * Each worker thread owns a heap-allocated record and publishes new contents
 * into it in a loop, one byte store at a time, so every store is a separate
 * watchpoint hit. How it publishes is chosen on the command line:
 *
 *   --mode correct             valid := 0; fields; valid := 1      (the order the watch checks)
 *   --mode fields-while-valid  fields written while valid stays 1  (out of order)
 *   --mode valid-early         valid := 0; valid := 1; fields      (out of order)
 *   --threads N                worker threads (default 1)
 *   --misalign M               record address % 8 == M (default 0): how the record
 *                              straddles the watcher's 8-byte chunks
 *   --exit-after-traced K      a worker exits after K more publishes once it sees a
 *                              tracer attached to it (default 0: never)
 *   --pause-us U               pause between publishes (default 100)
 *
 * Prints "thread TID record 0xADDRESS" per worker on stdout, then runs until killed.
 * Signals, to check that a watcher hands them back unchanged: SIGUSR1 and SIGTRAP
 * print "signal USR1" / "signal TRAP"; SIGUSR2 makes every worker exit.
 * Built for the host and, when the cross compiler exists, statically for arm64
 * (run under qemu-aarch64). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "test_record.h"

enum mode { MODE_CORRECT, MODE_FIELDS_WHILE_VALID, MODE_VALID_EARLY };

static enum mode g_mode = MODE_CORRECT;
static unsigned g_misalign = 0;
static unsigned long g_exit_after_traced = 0;
static unsigned long g_pause_us = 100;
static pthread_mutex_t g_print_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t g_workers_exit = 0;

static void on_signal(int sig) {
  static const char usr1[] = "signal USR1\n", trap[] = "signal TRAP\n";
  if (sig == SIGUSR1) (void)!write(STDOUT_FILENO, usr1, sizeof usr1 - 1);
  if (sig == SIGTRAP) (void)!write(STDOUT_FILENO, trap, sizeof trap - 1);
  if (sig == SIGUSR2) g_workers_exit = 1;
}

/* Orders the stores for the compiler; x86-64 and the reader (same CPU, thread
 * paused) need nothing more. On arm64 a reader that interrupts the writer also
 * runs on the writer's CPU, so a compiler barrier is all the order needs there too. */
#define COMPILER_BARRIER() __asm__ __volatile__("" ::: "memory")

static void write_fields(volatile uint8_t *rec, uint32_t counter) {
  rec[TC_TEST_RECORD_FLAGS_OFFSET] = (uint8_t)(counter & 1);
  for (unsigned i = 0; i < TC_TEST_RECORD_CONTEXT_SIZE; ++i) rec[TC_TEST_RECORD_CONTEXT_OFFSET + i] = (uint8_t)(counter + i);
  rec[TC_TEST_RECORD_PRESENT_OFFSET] = 1;
  for (unsigned i = 0; i < TC_TEST_RECORD_OWNER_SIZE; ++i) rec[TC_TEST_RECORD_OWNER_OFFSET + i] = (uint8_t)(counter * 3 + i);
  for (unsigned i = 0; i < TC_TEST_RECORD_STAMP_SIZE; ++i) rec[TC_TEST_RECORD_STAMP_OFFSET + i] = (uint8_t)(counter * 7 + i);
}

static void publish(volatile uint8_t *rec, uint32_t counter) {
  switch (g_mode) {
    case MODE_CORRECT:
      rec[TC_TEST_RECORD_VALID_OFFSET] = 0;
      COMPILER_BARRIER();
      write_fields(rec, counter);
      COMPILER_BARRIER();
      rec[TC_TEST_RECORD_VALID_OFFSET] = 1;
      break;
    case MODE_FIELDS_WHILE_VALID:
      write_fields(rec, counter);
      COMPILER_BARRIER();
      rec[TC_TEST_RECORD_VALID_OFFSET] = 1;
      break;
    case MODE_VALID_EARLY:
      rec[TC_TEST_RECORD_VALID_OFFSET] = 0;
      COMPILER_BARRIER();
      rec[TC_TEST_RECORD_VALID_OFFSET] = 1;
      COMPILER_BARRIER();
      write_fields(rec, counter);
      break;
  }
}

static int traced_now(void) {
  FILE *f = fopen("/proc/thread-self/status", "r");
  if (!f) return 0;
  char line[256];
  int traced = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "TracerPid:", 10) == 0) {
      traced = atoi(line + 10) != 0;
      break;
    }
  fclose(f);
  return traced;
}

static void *worker(void *arg) {
  (void)arg;
  uint8_t *block = aligned_alloc(64, 128);
  if (!block) {
    perror("aligned_alloc");
    exit(1);
  }
  memset(block, 0, 128);
  volatile uint8_t *rec = block + 8 + g_misalign;
  uint16_t version = TC_TEST_RECORD_VERSION;
  memcpy((uint8_t *)rec + TC_TEST_RECORD_VERSION_OFFSET, &version, sizeof version);

  pthread_mutex_lock(&g_print_lock);
  printf("thread %ld record %p\n", (long)syscall(SYS_gettid), (void *)rec);
  fflush(stdout);
  pthread_mutex_unlock(&g_print_lock);

  unsigned long left_after_traced = g_exit_after_traced;
  int traced = 0;
  struct timespec pause = {0, (long)(g_pause_us * 1000)};
  for (uint32_t counter = 1; !g_workers_exit; ++counter) {
    publish(rec, counter);
    if (g_exit_after_traced) {
      if (!traced) traced = traced_now();
      if (traced && left_after_traced-- == 0) return NULL;
    }
    if (g_pause_us) nanosleep(&pause, NULL);
  }
  return NULL;
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--mode correct|fields-while-valid|valid-early] [--threads N] [--misalign 0..7]\n"
          "          [--exit-after-traced K] [--pause-us U]\n",
          argv0);
  exit(2);
}

int main(int argc, char **argv) {
  unsigned threads = 1;
  for (int i = 1; i < argc; ++i) {
    const char *opt = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    const char *val = argv[++i];
    if (strcmp(opt, "--mode") == 0) {
      if (strcmp(val, "correct") == 0) g_mode = MODE_CORRECT;
      else if (strcmp(val, "fields-while-valid") == 0) g_mode = MODE_FIELDS_WHILE_VALID;
      else if (strcmp(val, "valid-early") == 0) g_mode = MODE_VALID_EARLY;
      else usage(argv[0]);
    } else if (strcmp(opt, "--threads") == 0) {
      threads = (unsigned)strtoul(val, NULL, 10);
    } else if (strcmp(opt, "--misalign") == 0) {
      g_misalign = (unsigned)strtoul(val, NULL, 10) % 8;
    } else if (strcmp(opt, "--exit-after-traced") == 0) {
      g_exit_after_traced = strtoul(val, NULL, 10);
    } else if (strcmp(opt, "--pause-us") == 0) {
      g_pause_us = strtoul(val, NULL, 10);
    } else {
      usage(argv[0]);
    }
  }
  if (threads == 0 || threads > 64) usage(argv[0]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  sigaction(SIGTRAP, &sa, NULL);
  for (unsigned t = 0; t < threads; ++t) {
    pthread_t th;
    if (pthread_create(&th, NULL, worker, NULL) != 0) {
      perror("pthread_create");
      return 1;
    }
    pthread_detach(th);
  }
  for (;;) pause();
}
