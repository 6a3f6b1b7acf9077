/* The 32-byte header of an OpenTelemetry process context (OTEP 4719), as the
 * samplers read it at sample time: the one spelling the BPF program
 * (bpf/sampler.bpf.c), the ptrace sampler and the engine's reader
 * (tracecorr/process_context.hpp, whose constants are these) share. The
 * format in the project's words: spec/otel-process-context.md §3; the
 * otel_process_context package checks at compile time that these offsets are
 * its registry's. Little-endian on every architecture the OTEP names. C, not
 * C++, because the BPF program includes it too. */
#ifndef TRACECORR_PROCESS_CONTEXT_HEADER_H
#define TRACECORR_PROCESS_CONTEXT_HEADER_H

#define TC_PCTX_HEADER_SIZE 32
#define TC_PCTX_SIGNATURE_OFFSET 0     /* 8 bytes "OTEL_CTX", no NUL */
#define TC_PCTX_VERSION_OFFSET 8       /* u32 */
#define TC_PCTX_PAYLOAD_SIZE_OFFSET 12 /* u32 */
#define TC_PCTX_PUBLISHED_AT_OFFSET 16 /* u64 monotonic_published_at_ns: 0 while being written */
#define TC_PCTX_PAYLOAD_OFFSET 24      /* u64 address of the payload */

/* The signature's 8 bytes read as one little-endian u64. */
#define TC_PCTX_SIGNATURE_LE 0x5854435f4c45544fULL /* 'O' 'T' 'E' 'L' '_' 'C' 'T' 'X' */
#define TC_PCTX_VERSION_CURRENT 2
#define TC_PCTX_VERSION_DEVELOPMENT 1 /* "can be used for development": read, and reported */

#endif /* TRACECORR_PROCESS_CONTEXT_HEADER_H */
