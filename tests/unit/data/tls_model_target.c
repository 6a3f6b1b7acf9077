/* A process whose threads each point the tests' TLS variable
 * (tests/support/test_record.h) at a record of their own, for the TLS access
 * model tests (tls_models_test.cpp): the reader must find, from outside, the
 * very pointer each thread set, in whichever model the variable is reached.
 *
 * Where the variable lives is chosen at build time and on the command line:
 *   built with TC_TARGET_OWNS_VARIABLE   the variable is this executable's own
 *                                        (local exec; exported with -rdynamic)
 *   --library PATH                       the variable is in the test library
 *                                        at PATH (tls_test_library.c), which is
 *                                        dlopened after the idle thread starts
 *                                        (or was loaded at startup, when
 *                                        LD_PRELOADed or linked: then dlopen
 *                                        finds that copy)
 *   --threads N                          worker threads (default 3)
 *
 * Each worker fills a record whose owner field holds its tid, sets the
 * variable to it and prints "thread TID RECORD_ADDRESS". One more thread,
 * started before the library is loaded, never touches the variable and prints
 * "idle TID". Then "ready"; the process exits when its stdin closes. */
#define _GNU_SOURCE
#ifndef TC_TARGET_OWNS_VARIABLE
#include <dlfcn.h>
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_record.h"

#ifdef TC_TARGET_OWNS_VARIABLE
__thread void* TC_TEST_TLS_SYMBOL = NULL;
static void set_own_record(void* record) { TC_TEST_TLS_SYMBOL = record; }
#endif

static void (*g_set_record)(void*);
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_changed = PTHREAD_COND_INITIALIZER;
static int g_reported;

static long own_tid(void) { return (long)syscall(SYS_gettid); }

static void report(const char* line) {
  pthread_mutex_lock(&g_lock);
  fputs(line, stdout);
  fflush(stdout);
  ++g_reported;
  pthread_cond_broadcast(&g_changed);
  pthread_mutex_unlock(&g_lock);
}

static void wait_for_reports(int count) {
  pthread_mutex_lock(&g_lock);
  while (g_reported < count) pthread_cond_wait(&g_changed, &g_lock);
  pthread_mutex_unlock(&g_lock);
}

static void* idle_thread(void* arg) {
  (void)arg;
  char line[64];
  snprintf(line, sizeof line, "idle %ld\n", own_tid());
  report(line);
  for (;;) pause();
  return NULL;
}

static void* worker(void* arg) {
  (void)arg;
  const long tid = own_tid();
  uint8_t* record = calloc(1, TC_TEST_RECORD_SIZE);
  if (!record) abort();
  const uint16_t version = TC_TEST_RECORD_VERSION;
  memcpy(record + TC_TEST_RECORD_VERSION_OFFSET, &version, sizeof version);
  const uint64_t owner = (uint64_t)tid;
  memcpy(record + TC_TEST_RECORD_OWNER_OFFSET, &owner, sizeof owner);
  record[TC_TEST_RECORD_PRESENT_OFFSET] = 1;
  record[TC_TEST_RECORD_VALID_OFFSET] = 1;
  g_set_record(record);
  char line[96];
  snprintf(line, sizeof line, "thread %ld %llx\n", tid, (unsigned long long)(uintptr_t)record);
  report(line);
  for (;;) pause();
  return NULL;
}

int main(int argc, char** argv) {
  const char* library = NULL;
  int threads = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--library") == 0) library = argv[i + 1];
    else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
  }
  pthread_t t;
  if (pthread_create(&t, NULL, idle_thread, NULL) != 0) return 1;
  wait_for_reports(1);
#ifdef TC_TARGET_OWNS_VARIABLE
  (void)library;  /* static builds have no loader to ask */
  g_set_record = set_own_record;
#else
  if (!library) {
    fprintf(stderr, "no variable to set: give --library PATH\n");
    return 1;
  }
  void* handle = dlopen(library, RTLD_NOW);
  if (!handle) {
    fprintf(stderr, "dlopen %s: %s\n", library, dlerror());
    return 1;
  }
  g_set_record = (void (*)(void*))dlsym(handle, "tc_test_set_record");
  if (!g_set_record) {
    fprintf(stderr, "%s has no tc_test_set_record\n", library);
    return 1;
  }
#endif
  for (int i = 0; i < threads; ++i)
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
  wait_for_reports(1 + threads);
  report("ready\n");
  char c;
  while (read(STDIN_FILENO, &c, 1) > 0) {
  }
  return 0;
}
