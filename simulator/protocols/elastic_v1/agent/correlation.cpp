#include "elastic_v1/agent/correlation.hpp"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tracecorr::elastic_v1::agent {

const char* to_string(Personality p) {
  switch (p) {
    case Personality::Spec: return "spec";
    case Personality::EbpfProfiler: return "ebpf-profiler";
  }
  return "?";
}

bool parse_personality(std::string_view text, Personality& out) {
  if (text == "spec") {
    out = Personality::Spec;
    return true;
  }
  if (text == "ebpf-profiler") {
    out = Personality::EbpfProfiler;
    return true;
  }
  return false;
}

const char* to_string(RecordVerdict v) {
  switch (v) {
    case RecordVerdict::Correlate: return "correlate";
    case RecordVerdict::ValidZero: return "valid_zero";
    case RecordVerdict::TraceAbsent: return "trace_absent";
    case RecordVerdict::BadMinor: return "bad_minor";
    case RecordVerdict::ZeroIds: return "zero_ids";
  }
  return "?";
}

JudgedRecord judge_record(std::span<const std::uint8_t> bytes, const RecordPolicy& policy) {
  JudgedRecord j;
  auto decoded = elastic_v1::decode_tls_record(bytes);
  if (!decoded) {  // cannot happen for what the layout reads (37 bytes), but never trust it
    j.verdict = RecordVerdict::BadMinor;
    return j;
  }
  j.record = *decoded;
  // TLS-08 first: while valid is 0 nothing else in the record means anything.
  if (j.record.valid == 0 && !policy.ignore_valid)
    j.verdict = RecordVerdict::ValidZero;
  else if (j.record.minor == 0)
    j.verdict = RecordVerdict::BadMinor;
  else if (j.record.trace_present == 0 && !policy.ignore_trace_present)
    j.verdict = RecordVerdict::TraceAbsent;  // TLS-09
  else if (is_zero(j.record.trace_id) || is_zero(j.record.transaction_id))
    j.verdict = RecordVerdict::ZeroIds;
  else
    j.verdict = RecordVerdict::Correlate;
  return j;
}

RecordContext record_context(std::span<const std::uint8_t> bytes, const RecordPolicy& policy) {
  const JudgedRecord j = judge_record(bytes, policy);
  RecordContext context;
  if (j.verdict != RecordVerdict::Correlate || is_zero(j.record.span_id)) return context;
  context.link = RecordContext::Link{j.record.trace_id, j.record.span_id};
  context.trace_flags = j.record.trace_flags;
  return context;
}

StackTraceId stack_trace_id(std::span<const std::uint64_t> frames) {
  std::vector<std::uint8_t> bytes(frames.size() * 8);
  for (std::size_t i = 0; i < frames.size(); ++i)
    for (int b = 0; b < 8; ++b) bytes[i * 8 + b] = static_cast<std::uint8_t>(frames[i] >> (8 * b));
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  StackTraceId id;
  static_assert(sizeof(c.digest) == std::tuple_size_v<StackTraceId>);
  std::memcpy(id.data(), c.digest, id.size());
  return id;
}

std::vector<elastic_v1::Correlation> correlation_messages(const CorrelationKey& key, std::uint64_t count) {
  std::vector<elastic_v1::Correlation> out;
  while (count > 0) {
    elastic_v1::Correlation m;
    m.trace_id = key.trace_id;
    m.transaction_id = key.transaction_id;
    m.stack_trace_id = key.stack_trace_id;
    m.count = static_cast<std::uint16_t>(count > 65535 ? 65535 : count);
    count -= m.count;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace tracecorr::elastic_v1::agent

