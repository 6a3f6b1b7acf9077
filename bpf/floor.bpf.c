// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The floor of the sampler's records-only path, for the overhead benchmark:
 * what any program emitting one ring-buffer record per sample of a tracked
 * process must do, and nothing more. The pid lookup in a `tracked` map of the
 * sampler's shape, then a reservation of one sample header (the least a
 * record carries) submitted as it is, without waking the consumer (as the
 * sampler does). The sampler cannot go below this; the benchmark measures how
 * far above it the records-only path is. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "sampler.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, TC_MAX_TRACKED_PROCESSES);
  __type(key, __u32);
  __type(value, struct tc_tracked);
} tracked SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4 << 20);
} samples SEC(".maps");

SEC("perf_event")
int tc_floor(void* ctx) {
  __u32 pid = bpf_get_current_pid_tgid() >> 32;
  if (!bpf_map_lookup_elem(&tracked, &pid)) return 0;
  struct tc_sample* s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
  if (s) bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
