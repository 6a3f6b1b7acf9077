/* A TLS-slot publisher for slot_watch_test.cpp.
 *
 *   slot_watch_target OFFSET_FILE ORDER THREADS
 *
 * Writes its slot's thread-pointer offset to OFFSET_FILE (the test's stand-in
 * for finding the agent library), then starts THREADS threads. Each allocates
 * one of the tests' records (tests/support/test_record.h) and publishes it in
 * its TLS slot, either set up (its version written) before the pointer is set
 * (ORDER "ordered") or zeroed and set up by the next instructions ("filled-after"). Each then raises SIGUSR1 (its own signal,
 * which a watch must hand back), prints "published TID" and sleeps. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_record.h"

static __thread uint8_t *slot;
static __thread volatile sig_atomic_t usr1_seen; /* per thread: raise() signals the caller */
static int filled_after;

static void on_usr1(int sig) { (void)sig; usr1_seen++; }

static void *thread_pointer(void)
{
    void *tp;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp)); /* x86-64 glibc: the TCB points to itself */
    return tp;
}

static void *worker(void *arg)
{
    (void)arg;
    uint8_t *record = calloc(1, TC_TEST_RECORD_SIZE);
    /* Release stores: otherwise the compiler may move the fill past the
     * publication (the watch sees that too). */
    if (filled_after) {
        __atomic_store_n(&slot, record, __ATOMIC_RELEASE);
        __atomic_store_n(&record[TC_TEST_RECORD_VERSION_OFFSET], TC_TEST_RECORD_VERSION, __ATOMIC_RELEASE);
    } else {
        record[TC_TEST_RECORD_VERSION_OFFSET] = TC_TEST_RECORD_VERSION;
        __atomic_store_n(&slot, record, __ATOMIC_RELEASE);
    }
    raise(SIGUSR1);
    printf("published %ld usr1 %d\n", (long)gettid(), (int)usr1_seen);
    fflush(stdout);
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) return 2;
    filled_after = strcmp(argv[2], "filled-after") == 0;
    signal(SIGUSR1, on_usr1);
    long offset = (long)((char *)&slot - (char *)thread_pointer());
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (!f) return 3;
    fprintf(f, "%ld\n", offset);
    fclose(f);
    rename(tmp, argv[1]);
    int threads = atoi(argv[3]);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
    }
    for (;;) pause();
}
