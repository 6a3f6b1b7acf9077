/* A process context writer gone wrong at scale (issue 29): one memfd named
 * OTEL_CTX mapped MAPPINGS times, so /proc/PID/maps lists that many context
 * mappings, every header leading to one payload of at most PAYLOAD_BYTES (a
 * resource of 32 KiB string attributes, each within a reader's per-string
 * bound, so the payload decodes). A reader that reads every mapping pays
 * MAPPINGS times for one payload: 400 such mappings of 1 MiB made `inspect`
 * use 1.65 GB. Prints "ready PID" once published, then waits for a signal.
 *
 * usage: context_mappings MAPPINGS PAYLOAD_BYTES */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tracecorr/process_context_header.h"

#define STRING_BYTES (32u << 10)

/* A protobuf length-delimited field: tag, varint length. */
static size_t field(uint8_t *out, unsigned number, size_t length)
{
    size_t n = 0;
    out[n++] = (uint8_t)(number << 3 | 2);
    do {
        out[n++] = (uint8_t)((length & 0x7f) | (length > 0x7f ? 0x80 : 0));
        length >>= 7;
    } while (length);
    return n;
}

static size_t varint_size(size_t v)
{
    size_t n = 1;
    while (v >>= 7)
        n++;
    return n;
}

/* ProcessContext { resource { attributes: count x {key "big.N", value {string_value: 32 KiB}} } } */
static uint8_t *build_payload(size_t wanted, size_t *size)
{
    /* Each attribute is its 32 KiB string and a few bytes of framing: stay within `wanted`. */
    size_t count = wanted / (STRING_BYTES + 32) ? wanted / (STRING_BYTES + 32) : 1;
    size_t any_value = 1 + varint_size(STRING_BYTES) + STRING_BYTES;
    size_t key_value = (1 + 1 + 10) + (1 + varint_size(any_value) + any_value);
    size_t resource = count * (1 + varint_size(key_value) + key_value);
    size_t total = 1 + varint_size(resource) + resource;
    uint8_t *out = malloc(total), *p = out;
    if (!out)
        return NULL;
    p += field(p, 1, resource);
    for (size_t i = 0; i < count; i++) {
        p += field(p, 1, key_value);
        p += field(p, 1, 10);
        snprintf((char *)p, 11, "big.%06zu", i % 1000000);
        p += 10;
        p += field(p, 2, any_value);
        p += field(p, 1, STRING_BYTES);
        memset(p, 'x', STRING_BYTES);
        p += STRING_BYTES;
    }
    *size = (size_t)(p - out);
    return out;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MAPPINGS PAYLOAD_BYTES\n", argv[0]);
        return 2;
    }
    long mappings = atol(argv[1]);
    size_t payload_size = 0;
    uint8_t *payload = build_payload((size_t)atol(argv[2]), &payload_size);
    int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
    if (mappings < 1 || !payload || fd < 0 || ftruncate(fd, 4096) != 0) {
        perror("context_mappings");
        return 1;
    }
    uint8_t header[TC_PCTX_HEADER_SIZE] = {0};
    uint32_t version = TC_PCTX_VERSION_CURRENT, size = (uint32_t)payload_size;
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    uint64_t published = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec, at = (uint64_t)(uintptr_t)payload;
    memcpy(header + TC_PCTX_SIGNATURE_OFFSET, "OTEL_CTX", 8);
    memcpy(header + TC_PCTX_VERSION_OFFSET, &version, 4);
    memcpy(header + TC_PCTX_PAYLOAD_SIZE_OFFSET, &size, 4);
    memcpy(header + TC_PCTX_PUBLISHED_AT_OFFSET, &published, 8);
    memcpy(header + TC_PCTX_PAYLOAD_OFFSET, &at, 8);
    if (pwrite(fd, header, sizeof header, 0) != (ssize_t)sizeof header) {
        perror("context_mappings: pwrite");
        return 1;
    }
    for (long i = 0; i < mappings; i++)
        if (mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) {
            perror("context_mappings: mmap");
            return 1;
        }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (;;)
        pause();
}
