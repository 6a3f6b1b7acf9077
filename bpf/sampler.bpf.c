// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Trace-correlation sampler: on each cpu-clock perf sample of a tracked
 * process, read the thread's record by each of the process's layouts (data
 * in its `tracked` entry, one slot per protocol it publishes: through the
 * thread pointer and a static TLS offset, a DTV block, or a memory area, to
 * the record pointer or to a struct walked through a hash table; a
 * fixed size, or a size field read from the record's header) and emit one
 * ring record per layout, with the user stack unless the layout is
 * records-only. The process context header is read once per sample. When
 * the process publishes an OpenTelemetry process context (OTEP 4719) whose
 * header user space found, the sample also carries that header's timestamp:
 * user space maps it to the publication (the resource) it stands for.
 *
 * One source for x86-64 and arm64: the thread pointer is read with CO-RE from
 * task->thread.fsbase (x86-64) or task->thread.uw.tp_value (arm64); the field
 * that does not exist on the running kernel is eliminated at load time.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "sampler.h"

/* Minimal CO-RE views of task_struct; the ___flavor suffix is ignored when
 * matching kernel BTF, so both map onto the kernel's struct task_struct. */
struct thread_struct___x86 {
  unsigned long fsbase;
} __attribute__((preserve_access_index));
struct task_struct___x86 {
  struct thread_struct___x86 thread;
} __attribute__((preserve_access_index));

struct user_tls___arm64 {
  unsigned long tp_value;
} __attribute__((preserve_access_index));
struct thread_struct___arm64 {
  struct user_tls___arm64 uw;
} __attribute__((preserve_access_index));
struct task_struct___arm64 {
  struct thread_struct___arm64 thread;
} __attribute__((preserve_access_index));

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, TC_MAX_TRACKED_PROCESSES);
  __type(key, __u32);
  __type(value, struct tc_tracked);
} tracked SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4 << 20); /* user space may resize before load */
} samples SEC(".maps");

/* One struct tc_scratch per CPU (sampler.h): the counters and the sample
 * being built. bpf_ringbuf_reserve wants a size known at load time, and
 * reserving the largest sample for every record is what made a 37-byte
 * records-only sample cost 608 ring bytes; the sample is built here and
 * emitted as long as it is. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct tc_scratch);
} scratch SEC(".maps");

static __always_inline void count(struct tc_scratch* s, __u32 which) {
  if (which < TC_CTR_COUNT) s->counters[which] += 1;
}

/* How far the sample's record read got, and its counter. */
static __always_inline void set_status(struct tc_scratch* s, __u8 status, __u32 counter) {
  s->head.status = status;
  count(s, counter);
}

static __always_inline __u64 thread_pointer(void) {
  void* task = (void*)bpf_get_current_task();
  if (bpf_core_field_exists(((struct task_struct___x86*)0)->thread.fsbase))
    return BPF_CORE_READ((struct task_struct___x86*)task, thread.fsbase);
  if (bpf_core_field_exists(((struct task_struct___arm64*)0)->thread.uw.tp_value))
    return BPF_CORE_READ((struct task_struct___arm64*)task, thread.uw.tp_value);
  return 0;
}

/* Offsets into `body` below TC_RECORD_MAX_BYTES, as the verifier can see
 * (the loader's check already keeps them there; this keeps a hostile or
 * broken map entry inside the scratch value too). */
#define TC_BOUND(x) ((x) & (TC_RECORD_MAX_BYTES - 1))
/* A length already clamped to at most `max` (a power of two), masked as well
 * so the verifier of a 6.1 kernel sees the bound on every path: it follows
 * paths it cannot prove dead, where clang, knowing the clamp, reuses an
 * unbounded copy of the value. barrier_var hides the value from clang, so the
 * mask is emitted, in the register the helper gets. */
static __always_inline __u32 tc_for_verifier(__u32 x, __u32 max) {
  barrier_var(x);
  return x & (2 * max - 1);
}
#define TC_FOR_VERIFIER(x, max) tc_for_verifier((x), (max))

/* The record's size field, native byte order, from the header in `body`. */
static __always_inline __u64 size_field(const struct tc_process* proc, const __u8* body) {
  __u32 at = TC_BOUND(proc->size_field_offset);
  if (proc->size_field_width == 1) return body[at];
  if (proc->size_field_width == 2) {
    __u16 v;
    __builtin_memcpy(&v, body + at, sizeof(v));
    return v;
  }
  __u32 v;
  __builtin_memcpy(&v, body + at, sizeof(v));
  return v;
}

/* Reads the record at `rp` into s->body by the process's layout: its fixed
 * part, then (a size field saying more) the whole declared length cut at
 * max_size. Sets the status and counters; returns the bytes read. */
static __always_inline __u32 read_record(const struct tc_process* proc, __u64 rp, struct tc_scratch* s) {
  __u32 fixed = proc->fixed_size;
  if (fixed > TC_RECORD_MAX_BYTES) fixed = TC_RECORD_MAX_BYTES;
  if (bpf_probe_read_user(s->body, TC_FOR_VERIFIER(fixed, TC_RECORD_MAX_BYTES), (const void*)rp) != 0) {
    set_status(s, TC_SAMPLE_RECORD_READ_FAILED, TC_CTR_RECORD_READ_FAILED);
    return 0;
  }
  __u64 declared = fixed;
  if (proc->size_field_width != 0) declared += size_field(proc, s->body);
  s->head.declared_length = declared > 0xffffffffull ? 0xffffffffu : (__u32)declared;
  __u32 max = proc->max_size;
  if (max > TC_RECORD_MAX_BYTES) max = TC_RECORD_MAX_BYTES;
  __u32 length = declared > max ? max : (__u32)declared;
  if (length > fixed) {
    /* The whole record again from its start: one destination offset (0) and
     * one bounded size, which the verifier follows; reading only the rest
     * would need offset + size bounded together, which it does not track. */
    if (length > TC_RECORD_MAX_BYTES) length = TC_RECORD_MAX_BYTES;
    if (bpf_probe_read_user(s->body, TC_FOR_VERIFIER(length, TC_RECORD_MAX_BYTES), (const void*)rp) != 0) {
      set_status(s, TC_SAMPLE_RECORD_READ_FAILED, TC_CTR_RECORD_READ_FAILED);
      return 0;
    }
  }
  if (declared > max) {
    set_status(s, TC_SAMPLE_RECORD_TRUNCATED, TC_CTR_RECORD_TRUNCATED);
  }
  __u8 valid = s->body[TC_BOUND(proc->valid_offset)];
  if (!((proc->valid_values[(valid >> 6) & 3] >> (valid & 63)) & 1))
    count(s, TC_CTR_VALID_ZERO);
  else if (proc->presence_offset != TC_NO_PRESENCE_BYTE && s->body[TC_BOUND(proc->presence_offset)] == 0)
    count(s, TC_CTR_TRACE_ABSENT);
  return length;
}

/* The process context header's timestamp, into the sample. Its 32 bytes are
 * read whole, at the address user space found, and trusted only as far as
 * they check: the signature and a version this reader reads. The payload is
 * user space's to read (a seqlock read with retries has no place here). */
static __always_inline void read_context(__u64 context_header, struct tc_scratch* s) {
  s->head.context = TC_CONTEXT_NONE;
  s->head.context_published_at = 0;
  if (context_header == 0) return;
  __u64 header[TC_PCTX_HEADER_SIZE / 8];
  if (bpf_probe_read_user(header, sizeof(header), (const void*)context_header) != 0) {
    s->head.context = TC_CONTEXT_UNREADABLE;
    count(s, TC_CTR_CONTEXT_UNREADABLE);
    return;
  }
  __u32 version = (__u32)header[TC_PCTX_VERSION_OFFSET / 8]; /* the low half: little-endian */
  if (header[TC_PCTX_SIGNATURE_OFFSET / 8] != TC_PCTX_SIGNATURE_LE ||
      (version != TC_PCTX_VERSION_CURRENT && version != TC_PCTX_VERSION_DEVELOPMENT)) {
    s->head.context = TC_CONTEXT_UNREADABLE;
    count(s, TC_CTR_CONTEXT_UNREADABLE);
    return;
  }
  s->head.context = TC_CONTEXT_READ;
  s->head.context_published_at = header[TC_PCTX_PUBLISHED_AT_OFFSET / 8];
  if (s->head.context_published_at == 0) count(s, TC_CTR_CONTEXT_BEING_WRITTEN);
}

/* The start of the module's TLS block in the current thread, walking its DTV
 * by the process's C library layout, every word read and bounded as
 * module_block_address (record_layout.cpp) does: 0, with the sample's status
 * and counter set, when the thread has no block for the module yet
 * (TC_SAMPLE_TLS_BLOCK_NOT_ALLOCATED: the loader allocates it at the thread's
 * first use, so it published nothing) or the DTV cannot be read or is none a
 * C library makes (TC_SAMPLE_RECORD_POINTER_READ_FAILED). */
static __always_inline __u64 module_block(const struct tc_process* proc, __u64 tp, struct tc_scratch* s) {
  const __u64 module = proc->dtv_module, entry = proc->dtv_entry_size;
  __u64 dtv = 0, word = 0;
  /* Unsigned arithmetic wraps like the target's (musl arm64 keeps the DTV pointer below the thread pointer). */
  if (bpf_probe_read_user(&dtv, sizeof(dtv), (const void*)(tp + (__s64)proc->dtv_at)) != 0) goto unreadable;
  if (dtv == 0) goto not_allocated; /* the thread has no DTV yet */
  if (bpf_probe_read_user(&word, sizeof(word), (const void*)(dtv + (__s64)proc->dtv_count_entry * entry)) != 0)
    goto unreadable;
  if (word > TC_MAX_TLS_MODULES || module == 0 || module > TC_MAX_TLS_MODULES) goto unreadable; /* not a DTV */
  if (module > word) goto not_allocated; /* a DTV from before the module was loaded */
  if (proc->dtv_generation != 0) {
    if (bpf_probe_read_user(&word, sizeof(word), (const void*)(dtv + (__s64)proc->dtv_generation_entry * entry)) != 0)
      goto unreadable;
    if (word < proc->dtv_generation) goto not_allocated;
  }
  if (bpf_probe_read_user(&word, sizeof(word), (const void*)(dtv + module * entry)) != 0) goto unreadable;
  if (word == 0 || (proc->dtv_unallocated != 0 && word == proc->dtv_unallocated)) goto not_allocated;
  return word;
unreadable:
  set_status(s, TC_SAMPLE_RECORD_POINTER_READ_FAILED, TC_CTR_RECORD_POINTER_READ_FAILED);
  return 0;
not_allocated:
  set_status(s, TC_SAMPLE_TLS_BLOCK_NOT_ALLOCATED, TC_CTR_TLS_BLOCK_NOT_ALLOCATED);
  return 0;
}

/* Tagged 64-bit words: a heap pointer has tag 1 in its low 3 bits, a small
 * integer its value in the high half and zeros in the low one. */
static __always_inline int tagged_pointer(__u64 w) { return (w & 7) == 1; }
static __always_inline int small_int(__u64 w) { return (w & 0xffffffffull) == 0; }
static __always_inline __s64 small_int_value(__u64 w) { return (__s64)w >> 32; }

static __always_inline int read_word(__u64* out, __u64 address) {
  return bpf_probe_read_user(out, sizeof(*out), (const void*)address);
}

/* The record's address, walked from the struct at `at` through the table
 * (tc_process.walk_*), every word checked as the protocol's own walk checks
 * it (RecordWalk::table_walk_shape): 0 with the status set when the thread shows
 * no record (a closed gate, no frame, the key absent or detached, a null slot,
 * a rehash in flight: TC_SAMPLE_RECORD_POINTER_NULL) or a read or check failed
 * (TC_SAMPLE_RECORD_POINTER_READ_FAILED). At most 9 reads plus one per hop. */
static __always_inline __u64 table_walk_record(const struct tc_process* proc, __u64 at, struct tc_scratch* s) {
  __u64 slot = 0, key_handle = 0, undefined = 0, frame = 0, table = 0, key = 0, head = 0;
  __u32 hash = 0;
  __u8 record_offset = 0;
  if (read_word(&slot, at + proc->walk_frame_slot_at) != 0) goto failed;
  if (slot == 0) goto none; /* the gate is closed */
  if (read_word(&key_handle, at + proc->walk_key_handle_at) != 0 || read_word(&undefined, at + proc->walk_undefined_at) != 0 ||
      bpf_probe_read_user(&hash, sizeof(hash), (const void*)(at + proc->walk_hash_at)) != 0 ||
      bpf_probe_read_user(&record_offset, sizeof(record_offset), (const void*)(at + proc->walk_record_offset_at)) != 0)
    goto failed;
  if (record_offset < proc->walk_record_offset_min || record_offset > proc->walk_record_offset_max || (record_offset & 7))
    goto failed;
  if (read_word(&frame, slot) != 0) goto failed;
  if (frame == undefined) goto none; /* nothing attached */
  if (!tagged_pointer(frame) || read_word(&table, frame - 1 + proc->walk_frame_table_offset) != 0 ||
      !tagged_pointer(table))
    goto failed;
  table -= 1;
  __u64 counts[3];
  if (bpf_probe_read_user(counts, sizeof(counts), (const void*)(table + proc->walk_table_header_size)) != 0) goto failed;
  if (tagged_pointer(counts[0])) goto none; /* a rehash forwards the table */
  if (!small_int(counts[0]) || !small_int(counts[1]) || !small_int(counts[2])) goto failed;
  const __s64 elements = small_int_value(counts[0]), deleted = small_int_value(counts[1]), buckets = small_int_value(counts[2]);
  if (buckets < 1 || buckets > (__s64)proc->walk_max_buckets || (buckets & (buckets - 1)) != 0) goto failed;
  if (elements < 0 || deleted < 0 || elements + deleted > buckets * proc->walk_load_factor) goto failed;
  if (read_word(&key, key_handle) != 0 || !tagged_pointer(key)) goto failed;
  const __u64 first_bucket = table + proc->walk_table_header_size + 3 * 8;
  if (read_word(&head, first_bucket + ((__u64)hash & (__u64)(buckets - 1)) * 8) != 0) goto failed;
  const __u64 first_entry = first_bucket + (__u64)buckets * 8;
  __u64 link = head;
  for (__u32 hop = 0; hop < TC_TABLE_WALK_MAX_CHAIN && hop < proc->walk_chain_cap; ++hop) {
    if (!small_int(link)) goto failed;
    const __s64 index = small_int_value(link);
    if (index == -1) goto none; /* the key is not in this frame */
    if (index < 0 || index >= elements + deleted) goto failed;
    __u64 entry[3]; /* key, value, chain */
    if (bpf_probe_read_user(entry, sizeof(entry), (const void*)(first_entry + (__u64)index * sizeof(entry))) != 0)
      goto failed;
    if (entry[0] != key) {
      link = entry[2];
      continue;
    }
    const __u64 wrapper = entry[1];
    if (wrapper == undefined) goto none; /* detached */
    __u64 record = 0;
    if (!tagged_pointer(wrapper) || read_word(&record, wrapper - 1 + record_offset) != 0) goto failed;
    if (record == 0) goto none;
    return record;
  }
  if (small_int(link) && small_int_value(link) == -1) goto none;
failed: /* past the chain cap, too */
  set_status(s, TC_SAMPLE_RECORD_POINTER_READ_FAILED, TC_CTR_RECORD_POINTER_READ_FAILED);
  return 0;
none:
  set_status(s, TC_SAMPLE_RECORD_POINTER_NULL, TC_CTR_RECORD_POINTER_NULL);
  return 0;
}

/* The current thread's record by one of the process's layouts, emitted with
 * the user stack unless the layout is records-only. The header's per-sample
 * fields (pid, tid, cpu, time, context) are the caller's; the stack is read
 * again for each layout (bpf_get_stack writes where this record ends), which
 * only a process tracked with two layouts pays. */
static __always_inline void emit_layout(void* ctx, const struct tc_process* proc, __u32 slot, __u64 tp,
                                        struct tc_scratch* s) {
  s->head.slot = (__u8)slot;
  s->head.record_pointer = 0;
  s->head.status = TC_SAMPLE_OK;
  s->head.declared_length = 0;
  __u32 length = 0;
  const __u8 indirection = proc->indirection;
  __u64 block = 0;
  if (indirection != TC_POINTER_IN_MEMORY_AREA && tp == 0) {
    set_status(s, TC_SAMPLE_THREAD_POINTER_FAILED, TC_CTR_THREAD_POINTER_FAILED);
  } else if (indirection == TC_POINTER_IN_DTV_BLOCK && (block = module_block(proc, tp, s)) == 0) {
    /* no block for the module: module_block said why */
  } else {
    __u64 rp = 0;
    const __u64 at = proc->pointer_site + (indirection == TC_POINTER_IN_TLS_SLOT ? tp : block);
    if (proc->flags & TC_PROCESS_F_TABLE_WALK) {
      if ((rp = table_walk_record(proc, at, s)) != 0) {
        s->head.record_pointer = rp;
        length = read_record(proc, rp, s);
      } /* else: the walk said why */
    } else if (bpf_probe_read_user(&rp, sizeof(rp), (const void*)at) != 0) {
      set_status(s, TC_SAMPLE_RECORD_POINTER_READ_FAILED, TC_CTR_RECORD_POINTER_READ_FAILED);
    } else if (rp == 0) {
      set_status(s, TC_SAMPLE_RECORD_POINTER_NULL, TC_CTR_RECORD_POINTER_NULL);
    } else {
      s->head.record_pointer = rp;
      length = read_record(proc, rp, s);
    }
  }
  if (length > TC_RECORD_MAX_BYTES) length = TC_RECORD_MAX_BYTES;
  s->head.record_length = (__u16)length;
  __u32 padded = TC_SAMPLE_PADDED(length);
  if (padded > TC_RECORD_MAX_BYTES) padded = TC_RECORD_MAX_BYTES;

  __u32 stack = 0;
  if (proc->flags & TC_PROCESS_F_NO_STACK) {
    s->head.stack_bytes = 0;
  } else {
    long n = bpf_get_stack(ctx, s->body + TC_FOR_VERIFIER(padded, TC_RECORD_MAX_BYTES), TC_MAX_STACK_DEPTH * 8,
                           BPF_F_USER_STACK);
    s->head.stack_bytes = (__s32)n;
    if (n < 0) count(s, TC_CTR_STACK_FAILED);
    else stack = n > TC_MAX_STACK_DEPTH * 8 ? TC_MAX_STACK_DEPTH * 8 : (__u32)n;
  }
  /* Never wake the consumer: a wake-up is an irq_work per sample, and even
   * deciding when to wake (bpf_ringbuf_query) costs as much as a map lookup.
   * User space drains on a timer instead (<= 100 ms) and sizes the ring for
   * at least a second of samples at the attached frequency on every CPU. */
  __u64 size = sizeof(s->head) + TC_FOR_VERIFIER(padded, TC_RECORD_MAX_BYTES) +
               TC_FOR_VERIFIER(stack, TC_MAX_STACK_DEPTH * 8);
  if (bpf_ringbuf_output(&samples, &s->head, size, BPF_RB_NO_WAKEUP) != 0) {
    count(s, TC_CTR_RINGBUF_FULL);
    return;
  }
  count(s, TC_CTR_EMITTED);
}

SEC("perf_event")
int tc_sample(void* ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 pid = pid_tgid >> 32;
  struct tc_tracked* tracked_process = bpf_map_lookup_elem(&tracked, &pid);
  if (!tracked_process) return 0;
  __u32 zero = 0;
  struct tc_scratch* s = bpf_map_lookup_elem(&scratch, &zero);
  if (!s) return 0;
  count(s, TC_CTR_SAMPLES);
  s->head.pid = pid;
  s->head.tid = (__u32)pid_tgid;
  s->head.cpu = (__u16)bpf_get_smp_processor_id();
  s->head.reserved = 0;
  s->head.ktime_ns = bpf_ktime_get_ns();
  read_context(tracked_process->context_header, s);
  const __u64 tp = thread_pointer();
  s->head.thread_pointer = tp;
#pragma unroll
  for (__u32 slot = 0; slot < TC_LAYOUTS_PER_PROCESS; ++slot) {
    const struct tc_process* proc = &tracked_process->layouts[slot];
    if (proc->flags & TC_PROCESS_F_TRACKED) emit_layout(ctx, proc, slot, tp, s);
  }
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
