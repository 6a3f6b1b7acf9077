/* A publisher of records whose length is in their header, for the samplers'
 * layout tests (tests/unit/sampler_layout_test.cpp, tests/py/test_sampler_layouts.py).
 *
 *   layout_record_target
 *
 * The records have the shape of OTEP 4947's thread record: a 28-byte header
 * (trace-id 16, span-id 8, valid at 24, trace-flags at 25, a native uint16
 * at 26 giving the length of the attribute bytes that follow), valid == 1
 * only. One thread per kind publishes one record through a thread-local
 * pointer and then spins (a BPF sampler sees only threads on a CPU):
 *
 *   short      valid, 20 attribute bytes (48 in all)
 *   long       valid, 600 attribute bytes (628: under OTEP 4947's 640)
 *   oversized  valid, declares 2000 attribute bytes: a 640-byte reader gets 640
 *   invalid    valid byte 2 (not accepted), 4 attribute bytes
 *   unmapped   valid, declares 100 attribute bytes, but the mapping ends after the header
 *   none       publishes no record (its pointer stays 0)
 *
 * A memory area (8-byte signature "TCAREA01", then a pointer at offset 8)
 * points at one more record, for layouts whose pointer is in an area.
 *
 * Prints, one line each, then "ready":
 *   tls_offset N                              the slot's offset from the thread pointer
 *   area ADDR RECORD LENGTH HEX               the area, the record it points at, its bytes
 *   thread TID KIND RECORD LENGTH DECLARED HEX
 * where LENGTH/HEX are what a reader bounded at 640 bytes must deliver
 * ("-" when it can deliver nothing) and DECLARED is the length the record claims.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEADER 28
#define VALID_AT 24
#define FLAGS_AT 25
#define SIZE_AT 26
#define READER_BOUND 640

static __thread uint8_t *slot;

static struct {
  char signature[8];
  uint8_t *pointer; /* offset 8 */
} area = {{'T', 'C', 'A', 'R', 'E', 'A', '0', '1'}, NULL};

struct kind {
  const char *name;
  uint16_t attrs; /* what the size field says */
  uint8_t valid;
  int publish;
  int unmapped; /* the mapping ends right after the header */
};

static const struct kind kinds[] = {
    {"short", 20, 1, 1, 0},    {"long", 600, 1, 1, 0},    {"oversized", 2000, 1, 1, 0},
    {"invalid", 4, 2, 1, 0},   {"unmapped", 100, 1, 1, 1}, {"none", 0, 0, 0, 0},
};
#define KINDS (sizeof kinds / sizeof kinds[0])

static sem_t published;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static void *thread_pointer(void) { return __builtin_thread_pointer(); }

static void fill(uint8_t *r, unsigned seed, uint16_t attrs, uint8_t valid, size_t available) {
  for (unsigned i = 0; i < 16; ++i) r[i] = (uint8_t)(0xa0 + seed + i);
  for (unsigned i = 0; i < 8; ++i) r[16 + i] = (uint8_t)(0x50 + seed + i);
  r[VALID_AT] = valid;
  r[FLAGS_AT] = 1;
  memcpy(r + SIZE_AT, &attrs, sizeof attrs);
  for (size_t i = HEADER; i < available; ++i) r[i] = (uint8_t)(seed * 31u + i * 7u);
}

static void print_hex(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) printf("%02x", p[i]);
}

static uint8_t *make_record(const struct kind *k, unsigned seed) {
  size_t total = HEADER + (size_t)k->attrs;
  if (k->unmapped) {
    /* Two pages, the second unmapped: the header fills the end of the first. */
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) abort();
    munmap(pages + page, (size_t)page);
    uint8_t *r = pages + page - HEADER;
    fill(r, seed, k->attrs, k->valid, HEADER);
    return r;
  }
  uint8_t *r = aligned_alloc(8, (total + 7) & ~(size_t)7);
  if (!r) abort();
  fill(r, seed, k->attrs, k->valid, total);
  return r;
}

static void *worker(void *arg) {
  const struct kind *k = &kinds[(uintptr_t)arg];
  unsigned seed = (unsigned)(uintptr_t)arg + 1;
  uint8_t *record = k->publish ? make_record(k, seed) : NULL;
  __atomic_store_n(&slot, record, __ATOMIC_RELEASE);

  size_t declared = HEADER + (size_t)k->attrs;
  pthread_mutex_lock(&out);
  printf("thread %d %s 0x%llx ", (int)gettid(), k->name, (unsigned long long)(uintptr_t)record);
  if (!record || k->unmapped) {
    printf("- %zu -\n", declared);
  } else {
    size_t length = declared < READER_BOUND ? declared : READER_BOUND;
    printf("%zu %zu ", length, declared);
    print_hex(record, length);
    printf("\n");
  }
  fflush(stdout);
  pthread_mutex_unlock(&out);
  sem_post(&published);
  for (volatile unsigned long spin = 0;; ++spin) {
  }
  return NULL;
}

int main(void) {
  sem_init(&published, 0, 0);
  printf("tls_offset %lld\n", (long long)((char *)&slot - (char *)thread_pointer()));
  struct kind area_kind = {"area", 12, 1, 1, 0};
  uint8_t *area_record = make_record(&area_kind, 40);
  __atomic_store_n(&area.pointer, area_record, __ATOMIC_RELEASE);
  printf("area 0x%llx 0x%llx %d ", (unsigned long long)(uintptr_t)&area, (unsigned long long)(uintptr_t)area_record,
         HEADER + 12);
  print_hex(area_record, HEADER + 12);
  printf("\n");
  fflush(stdout);

  for (uintptr_t i = 0; i < KINDS; ++i) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void *)i) != 0) return 1;
  }
  for (size_t i = 0; i < KINDS; ++i) sem_wait(&published);
  pthread_mutex_lock(&out);
  printf("ready\n");
  fflush(stdout);
  pthread_mutex_unlock(&out);
  for (;;) pause();
}
