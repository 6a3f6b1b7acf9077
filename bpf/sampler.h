/* Records and counters shared by sampler.bpf.c and its user-space loader.
 *
 * One ring-buffer record per perf sample taken on a thread of a tracked
 * process and per layout the process is tracked with (a process may publish
 * several protocols: up to TC_LAYOUTS_PER_PROCESS, one per slot). What a
 * record is (its length, valid byte, how it is reached) is the layout, passed
 * as data in the process's `tracked` map entry; nothing here spells a
 * protocol offset. Fixed-size types only, so the same
 * bytes mean the same thing to BPF (either architecture) and to C++.
 */
#ifndef TRACECORR_BPF_SAMPLER_H
#define TRACECORR_BPF_SAMPLER_H

#include "tracecorr/process_context_header.h"
#include "tracecorr/record_bound.h"

#ifdef __cplusplus
#include <cstdint>
typedef std::uint8_t tc_u8;
typedef std::uint16_t tc_u16;
typedef std::int16_t tc_s16;
typedef std::uint32_t tc_u32;
typedef std::int32_t tc_s32;
typedef std::uint64_t tc_u64;
typedef std::int64_t tc_s64;
#else
typedef __u8 tc_u8;
typedef __u16 tc_u16;
typedef __s16 tc_s16;
typedef __u32 tc_u32;
typedef __s32 tc_s32;
typedef __u64 tc_u64;
typedef __s64 tc_s64;
#endif

/* Bounded user stack depth (frames); bpf_get_stack writes at most this many. */
#define TC_MAX_STACK_DEPTH 64
/* Processes the sampler can track at once. */
#define TC_MAX_TRACKED_PROCESSES 4096
/* Layouts (slots) one process can be tracked with at once: a process that
 * publishes two protocols (Elastic's agent and an OTel SDK in one JVM) has
 * each thread's two records read at every sample. Sampler::kLayoutsPerProcess. */
#define TC_LAYOUTS_PER_PROCESS 2

/* Module ids and DTV entry counts a DTV walk believes (kMaxTlsModules). */
#define TC_MAX_TLS_MODULES (1u << 16)

/* How a tracked process's record pointer is reached (RecordLayout::indirection
 * and the PointerSite). */
enum tc_indirection {
  TC_POINTER_IN_TLS_SLOT = 0,    /* thread pointer + pointer_site -> pointer -> record */
  TC_POINTER_IN_MEMORY_AREA = 1, /* pointer_site -> pointer -> record */
  TC_POINTER_IN_DTV_BLOCK = 2,   /* thread pointer + dtv_at -> DTV -> entry dtv_module -> block
                                    + pointer_site -> pointer -> record (dynamic TLS) */
};
/* tc_process.presence_offset when the layout has no presence byte. */
#define TC_NO_PRESENCE_BYTE 0xffffu

/* One layout of a tracked process (a slot of its struct tc_tracked): where
 * the records are and how they are laid out (RecordLayout, as the loader
 * checked it). A slot without TC_PROCESS_F_TRACKED is empty. */
struct tc_process {
  tc_u64 pointer_site;     /* TLS slot: its offset from the thread pointer (two's complement);
                              memory area: the pointer's address (the area's + the layout's pointer offset) */
  tc_u64 valid_values[4];  /* bit v % 64 of word v / 64: valid byte value v is accepted */
  tc_u32 flags;            /* TC_PROCESS_F_* */
  tc_u8 indirection;       /* enum tc_indirection */
  tc_u8 size_field_width;  /* 0: fixed size; 1, 2 or 4: the record's size field (native byte order) */
  tc_u16 fixed_size;       /* bytes read first: the whole record, or the header (then total = fixed_size + size field) */
  tc_u16 size_field_offset;
  tc_u16 max_size;         /* <= TC_RECORD_MAX_BYTES: a record declaring more is emitted cut to this */
  tc_u16 valid_offset;     /* < fixed_size */
  tc_u16 presence_offset;  /* < fixed_size, or TC_NO_PRESENCE_BYTE */
  /* TC_POINTER_IN_DTV_BLOCK: the module and its C library's DTV layout (DtvModule, DtvLayout). */
  tc_u64 dtv_module;       /* 1..TC_MAX_TLS_MODULES */
  tc_u64 dtv_generation;   /* the DTV generation the module needs; 0: not checked */
  tc_u64 dtv_unallocated;  /* a block address meaning "not allocated yet" besides 0 (glibc: all ones); 0: none */
  tc_s32 dtv_at;           /* the DTV's address is at thread pointer + dtv_at */
  tc_u16 dtv_entry_size;   /* bytes per entry (8 or 16); entry i's first word is module i's block */
  tc_s16 dtv_count_entry;  /* the entry whose first word counts the module entries */
  tc_s16 dtv_generation_entry; /* the entry holding the DTV's generation (read when dtv_generation != 0) */
  tc_u16 reserved[3];
  /* TC_PROCESS_F_TABLE_WALK: the slot holds a struct the program walks
   * to the record through a hash table of tagged words (TableWalkShape, checked by the
   * loader): its words' offsets in the struct, the map's shape and bounds. */
  tc_u32 walk_max_buckets;        /* a power of two */
  tc_u16 walk_frame_table_offset; /* the table's word in the frame object */
  tc_u16 walk_table_header_size;  /* bytes before the table's three counts */
  tc_u16 walk_chain_cap;          /* hops at most, <= TC_TABLE_WALK_MAX_CHAIN */
  tc_u8 walk_frame_slot_at;       /* u64: where the current frame is kept; 0 is a closed gate */
  tc_u8 walk_key_handle_at;       /* u64: where the key is kept */
  tc_u8 walk_hash_at;             /* u32: the key's hash */
  tc_u8 walk_record_offset_at;    /* u8: the record pointer's offset in the value object */
  tc_u8 walk_undefined_at;        /* u64: the runtime's undefined */
  tc_u8 walk_record_offset_min, walk_record_offset_max; /* the record offsets believed (word-aligned) */
  tc_u8 walk_load_factor;         /* entries per bucket at most */
  tc_u8 walk_reserved[5];
};
/* Chain hops a table walk follows at most (TableWalkShape::chain_cap). */
#define TC_TABLE_WALK_MAX_CHAIN 16
/* Skip bpf_get_stack for this layout's records (records only). */
#define TC_PROCESS_F_NO_STACK 1u
/* The slot holds a layout (set by the loader for every slot it fills). */
#define TC_PROCESS_F_TRACKED 2u
/* The TLS slot (static or in a DTV block) holds a struct walked to the record
 * through a hash table of tagged words, not the record pointer (tc_process.walk_*). */
#define TC_PROCESS_F_TABLE_WALK 4u

/* Value of the `tracked` hash map, keyed by tgid (u32): the process's layouts,
 * one per slot, and its process context header, read once per perf sample.
 * One lookup per perf sample whatever the number of layouts. */
struct tc_tracked {
  tc_u64 context_header;   /* the process context's header (OTEP 4719, process_context_header.h), 0: none */
  struct tc_process layouts[TC_LAYOUTS_PER_PROCESS];
};

/* What the sample says of the process's context header (tc_process.context_header). */
enum tc_context_status {
  TC_CONTEXT_NONE = 0,       /* no context tracked for the process */
  TC_CONTEXT_READ = 1,       /* context_published_at is the header's timestamp (0: being written) */
  TC_CONTEXT_UNREADABLE = 2, /* the header unreadable, or not "OTEL_CTX" with a version this reader reads */
};

/* How far the record read got. TC_SAMPLE_OK and TC_SAMPLE_RECORD_TRUNCATED
 * carry record bytes. */
enum tc_sample_status {
  TC_SAMPLE_OK = 0,
  TC_SAMPLE_THREAD_POINTER_FAILED = 1,     /* task->thread fsbase / tp_value unreadable or 0 (TLS slot) */
  TC_SAMPLE_RECORD_POINTER_READ_FAILED = 2, /* the record pointer's address unreadable (or the DTV leading to it, or not a DTV) */
  TC_SAMPLE_RECORD_POINTER_NULL = 3,       /* the thread has not published a record (yet) */
  TC_SAMPLE_RECORD_READ_FAILED = 4,        /* the record pointer points at unreadable memory */
  TC_SAMPLE_RECORD_TRUNCATED = 5,          /* the record declares more than max_size: its first max_size bytes follow */
  TC_SAMPLE_TLS_BLOCK_NOT_ALLOCATED = 6,   /* dynamic TLS: the thread has no block for the module yet (published nothing) */
};

/* Ring-buffer record: this header, then `record_length` record bytes padded
 * to a multiple of 8, then `stack_bytes` bytes of user stack (u64 frames)
 * when stack_bytes > 0. A record is only as long as what it carries: a
 * records-only sample has no stack area at all. */
struct tc_sample {
  tc_u32 pid; /* tgid, initial pid namespace */
  tc_u32 tid;
  tc_u16 cpu;            /* < NR_CPUS, which no kernel config takes past 8192 */
  tc_u8 slot;            /* the layout (tc_tracked.layouts[slot]) the record was read by */
  tc_u8 reserved;
  tc_u8 status;          /* enum tc_sample_status */
  tc_u8 context;         /* enum tc_context_status */
  tc_u16 record_length;  /* record bytes after this header (<= TC_RECORD_MAX_BYTES) */
  tc_u64 ktime_ns;       /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
  tc_u64 thread_pointer;
  tc_u64 record_pointer;
  tc_u32 declared_length; /* what the record declared (saturating); > record_length when truncated */
  tc_s32 stack_bytes;     /* bytes of user stack after the record, 0 when not sampled, or -errno */
  tc_u64 context_published_at; /* TC_CONTEXT_READ: the header's monotonic_published_at_ns; else 0 */
};
#define TC_SAMPLE_PADDED(n) (((n) + 7u) & ~7u)
/* The longest ring-buffer record the program emits. */
#define TC_SAMPLE_MAX_BYTES (sizeof(struct tc_sample) + TC_RECORD_MAX_BYTES + TC_MAX_STACK_DEPTH * 8)

/* Indexes into tc_scratch.counters, per CPU. */
enum tc_counter {
  TC_CTR_SAMPLES = 0,               /* perf samples on a thread of a tracked process */
  TC_CTR_EMITTED,                   /* records written to the ring buffer (one per sample and layout) */
  TC_CTR_THREAD_POINTER_FAILED,
  TC_CTR_RECORD_POINTER_READ_FAILED,
  TC_CTR_RECORD_POINTER_NULL,
  TC_CTR_RECORD_READ_FAILED,
  TC_CTR_VALID_ZERO,                /* record read, its valid byte not an accepted value (still emitted: judging is user space's) */
  TC_CTR_TRACE_ABSENT,              /* record read and valid, its layout's presence byte 0 */
  TC_CTR_STACK_FAILED,              /* bpf_get_stack returned an error (record still emitted) */
  TC_CTR_RINGBUF_FULL,              /* sample lost: no room in the ring buffer */
  TC_CTR_RECORD_TRUNCATED,          /* record declared more than its layout's max_size (emitted cut) */
  TC_CTR_CONTEXT_UNREADABLE,        /* TC_CONTEXT_UNREADABLE samples */
  TC_CTR_CONTEXT_BEING_WRITTEN,     /* context read with timestamp 0: the writer was updating it */
  TC_CTR_TLS_BLOCK_NOT_ALLOCATED,   /* TC_SAMPLE_TLS_BLOCK_NOT_ALLOCATED samples */
  TC_CTR_COUNT
};


/* Value of the per-CPU `scratch` array (one entry): the CPU's counters, and
 * the sample being built (header, record padded to 8, stack), emitted with
 * bpf_ringbuf_output for exactly the bytes it holds. The counters live here,
 * beside the header every sample writes, so counting costs no map lookup of
 * its own (user space sums them over CPUs: SamplerLoader::counters()).
 * A perf_event program never nests on its CPU, so one value per CPU is enough. */
struct tc_scratch {
  tc_u64 counters[TC_CTR_COUNT];
  struct tc_sample head;
  /* Twice what a sample uses: every size and offset handed to a helper is
   * also masked to a power of two (TC_FOR_VERIFIER in sampler.bpf.c), which
   * older verifiers (Debian 12's 6.1) need to see it bounded on paths they
   * cannot prove dead; the masked bounds must fit here. The clamps before
   * them decide. */
  tc_u8 body[2 * TC_RECORD_MAX_BYTES + 2 * TC_MAX_STACK_DEPTH * 8];
};

#endif /* TRACECORR_BPF_SAMPLER_H */
