/* The hard bound on one record read from a target, in bytes: the one number
 * the C++ readers (tracecorr/record_layout.hpp, kRecordMaxBytes) and the BPF
 * sampler (bpf/sampler.h) share, so neither can copy more than the other
 * expects. A record's own size field is the target's word, hence hostile:
 * every layout's maximum is at most this, whatever the field says.
 *
 * OTEP 4947 recommends thread records of at most 640 bytes; this leaves room
 * above that. A power of two: the BPF program bounds offsets with it. C, not
 * C++, because the BPF program includes it too. */
#ifndef TRACECORR_RECORD_BOUND_H
#define TRACECORR_RECORD_BOUND_H

#define TC_RECORD_MAX_BYTES 1024

#endif /* TRACECORR_RECORD_BOUND_H */
