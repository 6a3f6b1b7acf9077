// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Baseline for the overhead benchmark: a perf_event program that does nothing,
 * attached to the same cpu-clock events as the sampler. */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("perf_event")
int tc_empty(void* ctx) { return 0; }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
