// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Trace-correlation sampler: on each cpu-clock perf sample of a tracked
 * process, read the thread's correlation record through its thread pointer
 * and the process's static TLS offset, and emit it with the user stack.
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
  __type(value, struct tc_process);
} tracked SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4 << 20); /* user space may resize before load */
} samples SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, TC_CTR_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which) {
  __u64* v = bpf_map_lookup_elem(&counters, &which);
  if (v) *v += 1;
}

static __always_inline __u64 thread_pointer(void) {
  void* task = (void*)bpf_get_current_task();
  if (bpf_core_field_exists(((struct task_struct___x86*)0)->thread.fsbase))
    return BPF_CORE_READ((struct task_struct___x86*)task, thread.fsbase);
  if (bpf_core_field_exists(((struct task_struct___arm64*)0)->thread.uw.tp_value))
    return BPF_CORE_READ((struct task_struct___arm64*)task, thread.uw.tp_value);
  return 0;
}

SEC("perf_event")
int tc_sample(void* ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 pid = pid_tgid >> 32;
  struct tc_process* proc = bpf_map_lookup_elem(&tracked, &pid);
  if (!proc) return 0;
  count(TC_CTR_SAMPLES);

  struct tc_sample* s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
  if (!s) {
    count(TC_CTR_RINGBUF_FULL);
    return 0;
  }
  s->pid = pid;
  s->tid = (__u32)pid_tgid;
  s->cpu = bpf_get_smp_processor_id();
  s->ktime_ns = bpf_ktime_get_ns();
  s->record_pointer = 0;
  s->status = TC_SAMPLE_OK;
  __builtin_memset(s->record, 0, sizeof(s->record));

  __u64 tp = thread_pointer();
  s->thread_pointer = tp;
  if (tp == 0) {
    s->status = TC_SAMPLE_THREAD_POINTER_FAILED;
    count(TC_CTR_THREAD_POINTER_FAILED);
  } else {
    __u64 rp = 0;
    if (bpf_probe_read_user(&rp, sizeof(rp), (const void*)(tp + proc->tls_offset)) != 0) {
      s->status = TC_SAMPLE_RECORD_POINTER_READ_FAILED;
      count(TC_CTR_RECORD_POINTER_READ_FAILED);
    } else if (rp == 0) {
      s->status = TC_SAMPLE_RECORD_POINTER_NULL;
      count(TC_CTR_RECORD_POINTER_NULL);
    } else {
      s->record_pointer = rp;
      if (bpf_probe_read_user(s->record, TC_TLS_RECORD_SIZE, (const void*)rp) != 0) {
        s->status = TC_SAMPLE_RECORD_READ_FAILED;
        count(TC_CTR_RECORD_READ_FAILED);
      } else if (s->record[TC_TLS_VALID_OFFSET] == 0) {
        count(TC_CTR_VALID_ZERO);
      } else if (s->record[TC_TLS_TRACE_PRESENT_OFFSET] == 0) {
        count(TC_CTR_TRACE_ABSENT);
      }
    }
  }

  if (proc->flags & TC_PROCESS_F_NO_STACK) {
    s->stack_bytes = 0;
  } else {
    long n = bpf_get_stack(ctx, s->stack, sizeof(s->stack), BPF_F_USER_STACK);
    s->stack_bytes = (__s32)n;
    if (n < 0) count(TC_CTR_STACK_FAILED);
  }
  /* Never wake the consumer: a wake-up is an irq_work per sample, and even
   * deciding when to wake (bpf_ringbuf_query) costs as much as a map lookup.
   * User space drains on a timer instead (<= 100 ms) and sizes the ring for
   * at least a second of samples at the attached frequency on every CPU. */
  bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
  count(TC_CTR_EMITTED);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
