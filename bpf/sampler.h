/* Records and counters shared by sampler.bpf.c and its user-space loader.
 *
 * One ring-buffer record per perf sample taken on a thread of a tracked
 * process. Layout sizes come from the registry (tracecorr_layout.h); nothing
 * here spells a protocol offset by hand. Fixed-size types only, so the same
 * bytes mean the same thing to BPF (either architecture) and to C++.
 */
#ifndef TRACECORR_BPF_SAMPLER_H
#define TRACECORR_BPF_SAMPLER_H

#include "elastic_v1_layout.h"

#ifdef __cplusplus
#include <cstdint>
typedef std::uint8_t tc_u8;
typedef std::uint32_t tc_u32;
typedef std::int32_t tc_s32;
typedef std::uint64_t tc_u64;
typedef std::int64_t tc_s64;
#else
typedef __u8 tc_u8;
typedef __u32 tc_u32;
typedef __s32 tc_s32;
typedef __u64 tc_u64;
typedef __s64 tc_s64;
#endif

/* Bounded user stack depth (frames); bpf_get_stack writes at most this many. */
#define TC_MAX_STACK_DEPTH 64
/* Processes the sampler can track at once. */
#define TC_MAX_TRACKED_PROCESSES 4096

/* Value of the `tracked` hash map, keyed by tgid (u32). */
struct tc_process {
  tc_s64 tls_offset; /* thread pointer + tls_offset = &record pointer (StaticOffset TLS) */
  tc_u32 flags;      /* TC_PROCESS_F_* */
  tc_u32 reserved;
};
/* Skip bpf_get_stack for this process (records only). */
#define TC_PROCESS_F_NO_STACK 1u

/* How far the record read got. TC_SAMPLE_OK means `record` holds the 37 bytes. */
enum tc_sample_status {
  TC_SAMPLE_OK = 0,
  TC_SAMPLE_THREAD_POINTER_FAILED = 1,     /* task->thread fsbase / tp_value unreadable or 0 */
  TC_SAMPLE_RECORD_POINTER_READ_FAILED = 2, /* tp + tls_offset unreadable */
  TC_SAMPLE_RECORD_POINTER_NULL = 3,       /* the thread has not published a record (yet) */
  TC_SAMPLE_RECORD_READ_FAILED = 4,        /* the record pointer points at unreadable memory */
};

/* Ring-buffer record. */
struct tc_sample {
  tc_u32 pid; /* tgid, initial pid namespace */
  tc_u32 tid;
  tc_u32 cpu;
  tc_u32 status;         /* enum tc_sample_status */
  tc_u64 ktime_ns;       /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
  tc_u64 thread_pointer;
  tc_u64 record_pointer;
  tc_s32 stack_bytes;    /* bytes of `stack` filled by bpf_get_stack, or -errno */
  tc_u8 record[TC_TLS_RECORD_SIZE];
  tc_u8 pad[(8 - (4 + TC_TLS_RECORD_SIZE) % 8) % 8];
  tc_u64 stack[TC_MAX_STACK_DEPTH];
};

/* Indexes into the per-CPU `counters` array. */
enum tc_counter {
  TC_CTR_SAMPLES = 0,               /* perf samples on a thread of a tracked process */
  TC_CTR_EMITTED,                   /* records written to the ring buffer */
  TC_CTR_THREAD_POINTER_FAILED,
  TC_CTR_RECORD_POINTER_READ_FAILED,
  TC_CTR_RECORD_POINTER_NULL,
  TC_CTR_RECORD_READ_FAILED,
  TC_CTR_VALID_ZERO,                /* record read, valid == 0 (still emitted: TLS-08 is user space's) */
  TC_CTR_TRACE_ABSENT,              /* record read, valid != 0, trace_present == 0 (TLS-09) */
  TC_CTR_STACK_FAILED,              /* bpf_get_stack returned an error (record still emitted) */
  TC_CTR_RINGBUF_FULL,              /* sample lost: no room in the ring buffer */
  TC_CTR_COUNT
};

#endif /* TRACECORR_BPF_SAMPLER_H */
