/* A pointer-swap publisher of the tests' record (tests/support/test_record.h)
 * for published_record_watch_test.cpp.
 *
 *   published_record_target [--pause-us U] [--other-writer]
 *
 * The publisher thread owns a thread_local pointer slot and two record
 * buffers. For each serial 1, 2, ... it clears the spare buffer (the one the
 * slot does not lead to), fills it whole (tc_test_record_fill), then stores
 * its address into the slot, and pauses U microseconds (default 200). Each
 * buffer sits alone in its own 64-byte block, so building the spare never
 * stores into an 8-byte chunk of the published record.
 *
 * --other-writer starts a second thread that, every millisecond, rewrites
 * the first context byte of whichever record the publisher's slot leads to:
 * stores into the published record that the publisher did not make.
 *
 * Once the first record is published it prints
 *   "publisher TID thread-pointer 0xTP slot 0xSLOT"
 * on stdout, then runs until killed. It installs no SIGTRAP handler: a
 * watchpoint's SIGTRAP leaking to it kills it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "test_record.h"

struct record_buffer {
    _Alignas(64) uint8_t bytes[64];
};
_Static_assert(TC_TEST_RECORD_SIZE <= 64, "a record fits its buffer's block");

static _Thread_local uint8_t *slot;
static unsigned long g_pause_us = 200;

static void *thread_pointer(void)
{
#if defined(__x86_64__)
    void *tp;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp)); /* x86-64 glibc: the TCB points to itself */
    return tp;
#else
    return __builtin_thread_pointer();
#endif
}

static void pause_us(unsigned long us)
{
    struct timespec pause = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&pause, &pause) != 0) {
    }
}

/* Rewrites a byte of the publisher's current record; `arg` is its slot. */
static void *other_writer(void *arg)
{
    uint8_t *const *publisher_slot = arg;
    for (uint8_t n = 0;; ++n) {
        uint8_t *record = __atomic_load_n(publisher_slot, __ATOMIC_ACQUIRE);
        __atomic_store_n(&record[TC_TEST_RECORD_CONTEXT_OFFSET], n, __ATOMIC_RELAXED);
        pause_us(1000);
    }
    return NULL;
}

static void publish(struct record_buffer *spare, uint64_t serial)
{
    memset(spare->bytes, 0, sizeof spare->bytes);
    tc_test_record_fill(spare->bytes, serial);
    /* Release: the record's bytes are stored before the pointer to them. */
    __atomic_store_n(&slot, spare->bytes, __ATOMIC_RELEASE);
}

static void *publisher(void *arg)
{
    const int with_other_writer = *(const int *)arg;
    static struct record_buffer buffers[2];
    publish(&buffers[1], 1);
    printf("publisher %ld thread-pointer %p slot %p\n", (long)syscall(SYS_gettid), thread_pointer(), (void *)&slot);
    fflush(stdout);
    if (with_other_writer) {
        pthread_t writer;
        if (pthread_create(&writer, NULL, other_writer, &slot) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    for (uint64_t serial = 2;; ++serial) {
        publish(&buffers[serial % 2], serial);
        if (g_pause_us) pause_us(g_pause_us);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int with_other_writer = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--other-writer") == 0) {
            with_other_writer = 1;
        } else if (strcmp(argv[i], "--pause-us") == 0 && i + 1 < argc) {
            g_pause_us = strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: %s [--pause-us U] [--other-writer]\n", argv[0]);
            return 2;
        }
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, publisher, &with_other_writer) != 0) {
        perror("pthread_create");
        return 1;
    }
    pthread_join(thread, NULL);
    return 0;
}
