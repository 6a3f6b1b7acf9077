/* A process context writer (OTEP 4719) the reader's tests drive line by line
 * on stdin, so each test decides exactly when the context changes:
 *
 *   publish NAME   create the mapping (first time) and publish a payload with
 *                  service.name=NAME; answers "published 0xADDR TIMESTAMP"
 *   update NAME    the OTEP's update: timestamp 0, new payload, new timestamp;
 *                  answers "updated TIMESTAMP"
 *   zero           timestamp 0 (an update that has begun); answers "zeroed"
 *   restore        a new, later timestamp with the payload unchanged; "restored TIMESTAMP"
 *   bump           a new timestamp without zeroing first; "bumped TIMESTAMP"
 *   burn           start a thread that publishes the engine tests' record
 *                  (tests/support/test_record.h, valid) through a TLS slot and
 *                  spins on a CPU, for the samplers (the BPF one sees only
 *                  threads on a CPU); answers "burning TID TLS_OFFSET"
 *   exit
 *
 * Options: --anon (an anonymous mapping instead of a memfd), --inline (the
 * payload after the header instead of a separate allocation), --no-dontfork.
 * Test data, not the reference writer (fixtures/otel_process_context/ is):
 * it spells the header layout itself so that the engine's tests depend on no
 * protocol package.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "test_record.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

enum { HEADER_SIZE = 32, MAPPING_SIZE = 1 << 16, PAYLOAD_MAX = 4096 };

struct header {
  char signature[8];
  uint32_t version;
  uint32_t payload_size;
  uint64_t published_at_ns; /* written with atomic stores: the reader's seqlock */
  uint64_t payload;
};

static unsigned char* mapping;
static struct header* hdr;
static unsigned char* payload_area;
static uint64_t last_timestamp;
static int inline_payload;

static uint64_t next_timestamp(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  last_timestamp = now > last_timestamp ? now : last_timestamp + 1;
  return last_timestamp;
}

static void set_timestamp(uint64_t value) {
  atomic_thread_fence(memory_order_seq_cst);
  __atomic_store_n(&hdr->published_at_ns, value, __ATOMIC_SEQ_CST);
  atomic_thread_fence(memory_order_seq_cst);
}

/* ---- a minimal protobuf encoder ---- */
struct buf {
  unsigned char b[PAYLOAD_MAX];
  size_t n;
};

static void put_varint(struct buf* out, uint64_t v) {
  while (v >= 0x80) {
    out->b[out->n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  out->b[out->n++] = (unsigned char)v;
}

static void put_bytes(struct buf* out, unsigned field, const void* data, size_t size) {
  put_varint(out, (uint64_t)field << 3 | 2);
  put_varint(out, size);
  memcpy(out->b + out->n, data, size);
  out->n += size;
}

/* KeyValue{key, value: AnyValue{string_value}} */
static void put_string_attribute(struct buf* out, unsigned field, const char* key, const char* value) {
  struct buf any = {0}, kv = {0};
  put_bytes(&any, 1, value, strlen(value));
  put_bytes(&kv, 1, key, strlen(key));
  put_bytes(&kv, 2, any.b, any.n);
  put_bytes(out, field, kv.b, kv.n);
}

/* ProcessContext{resource{service.name, process.pid}, attributes{threadlocal.schema_version}} */
static size_t encode_payload(unsigned char* out, const char* service_name) {
  struct buf resource = {0}, context = {0};
  char pid[32];
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  put_string_attribute(&resource, 1, "service.name", service_name);
  put_string_attribute(&resource, 1, "process.pid", pid);
  put_bytes(&context, 1, resource.b, resource.n);
  put_string_attribute(&context, 2, "threadlocal.schema_version", "tls_v1");
  memcpy(out, context.b, context.n);
  return context.n;
}

/* ---- publication ---- */
static int create_mapping(int anon, int dontfork) {
  if (anon) {
    mapping = mmap(NULL, MAPPING_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, MAPPING_SIZE) != 0) return -1;
    mapping = mmap(NULL, MAPPING_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
  }
  if (mapping == MAP_FAILED) return -1;
  if (dontfork) madvise(mapping, MAPPING_SIZE, MADV_DONTFORK);
  hdr = (struct header*)mapping;
  if (inline_payload) {
    payload_area = mapping + HEADER_SIZE;
  } else {
    payload_area = malloc(PAYLOAD_MAX);
    if (!payload_area) return -1;
  }
  return 0;
}

static void name_mapping(void) {
  /* Fails with EINVAL on kernels without CONFIG_ANON_VMA_NAME; called anyway. */
  prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)mapping, MAPPING_SIZE, (unsigned long)"OTEL_CTX");
}

static void write_payload(const char* service_name) {
  hdr->payload_size = (uint32_t)encode_payload(payload_area, service_name);
  hdr->payload = (uint64_t)(uintptr_t)payload_area;
}

/* ---- the burning thread ---- */
static __thread unsigned char* record_slot;
static unsigned char burner_record[TC_TEST_RECORD_SIZE];
static pthread_mutex_t burner_started = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t burner_ready = PTHREAD_COND_INITIALIZER;
static long burner_tid;
static long long burner_tls_offset;

static void* burn(void* unused) {
  (void)unused;
  const uint16_t version = TC_TEST_RECORD_VERSION;
  memcpy(burner_record + TC_TEST_RECORD_VERSION_OFFSET, &version, sizeof version);
  burner_record[TC_TEST_RECORD_FLAGS_OFFSET] = 1;
  burner_record[TC_TEST_RECORD_VALID_OFFSET] = 1;
  burner_record[TC_TEST_RECORD_PRESENT_OFFSET] = 1;
  record_slot = burner_record;
  pthread_mutex_lock(&burner_started);
  burner_tid = (long)syscall(SYS_gettid);
  burner_tls_offset = (long long)((char*)&record_slot - (char*)__builtin_thread_pointer());
  pthread_cond_signal(&burner_ready);
  pthread_mutex_unlock(&burner_started);
  volatile uint64_t x = 1;
  for (;;) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return NULL;
}

int main(int argc, char** argv) {
  int anon = 0, dontfork = 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--anon")) anon = 1;
    else if (!strcmp(argv[i], "--inline")) inline_payload = 1;
    else if (!strcmp(argv[i], "--no-dontfork")) dontfork = 0;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  char line[256], name[128];
  while (fgets(line, sizeof line, stdin)) {
    if (sscanf(line, "publish %127s", name) == 1) {
      if (!mapping && create_mapping(anon, dontfork) != 0) {
        printf("error cannot map\n");
        continue;
      }
      memcpy(hdr->signature, "OTEL_CTX", 8);
      hdr->version = 2;
      write_payload(name);
      set_timestamp(next_timestamp());
      name_mapping();
      printf("published %p %llu\n", (void*)mapping, (unsigned long long)last_timestamp);
    } else if (sscanf(line, "update %127s", name) == 1) {
      set_timestamp(0);
      write_payload(name);
      set_timestamp(next_timestamp());
      name_mapping();
      printf("updated %llu\n", (unsigned long long)last_timestamp);
    } else if (!strncmp(line, "zero", 4)) {
      set_timestamp(0);
      printf("zeroed\n");
    } else if (!strncmp(line, "restore", 7)) {
      set_timestamp(next_timestamp());
      printf("restored %llu\n", (unsigned long long)last_timestamp);
    } else if (!strncmp(line, "bump", 4)) {
      set_timestamp(next_timestamp());
      printf("bumped %llu\n", (unsigned long long)last_timestamp);
    } else if (!strncmp(line, "burn", 4)) {
      pthread_t t;
      pthread_mutex_lock(&burner_started);
      if (burner_tid == 0 && pthread_create(&t, NULL, burn, NULL) == 0)
        while (burner_tid == 0) pthread_cond_wait(&burner_ready, &burner_started);
      pthread_mutex_unlock(&burner_started);
      printf("burning %ld %lld\n", burner_tid, burner_tls_offset);
    } else if (!strncmp(line, "exit", 4)) {
      return 0;
    } else {
      printf("error unknown command\n");
    }
  }
  return 0;
}
