#include "elastic_v1/agent/correlation.hpp"

#include <algorithm>
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

JudgedRecord judge_record(std::span<const std::uint8_t> bytes) {
  JudgedRecord j;
  auto decoded = elastic_v1::decode_tls_record(bytes);
  if (!decoded) {  // cannot happen for what the layout reads (37 bytes), but never trust it
    j.verdict = RecordVerdict::BadMinor;
    return j;
  }
  j.record = *decoded;
  // TLS-08 first: while valid is 0 nothing else in the record means anything.
  if (j.record.valid == 0)
    j.verdict = RecordVerdict::ValidZero;
  else if (j.record.minor == 0)
    j.verdict = RecordVerdict::BadMinor;
  else if (j.record.trace_present == 0)
    j.verdict = RecordVerdict::TraceAbsent;  // TLS-09
  else if (is_zero(j.record.trace_id) || is_zero(j.record.transaction_id))
    j.verdict = RecordVerdict::ZeroIds;
  else
    j.verdict = RecordVerdict::Correlate;
  return j;
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

void Aggregator::add(const CorrelationKey& key, std::uint64_t samples) {
  if (samples == 0) return;
  counts_[key] += samples;
  pending_ += samples;
}

std::vector<elastic_v1::Correlation> Aggregator::drain() {
  std::vector<elastic_v1::Correlation> out;
  for (const auto& [key, count] : counts_) {
    auto msgs = correlation_messages(key, count);
    out.insert(out.end(), std::make_move_iterator(msgs.begin()), std::make_move_iterator(msgs.end()));
  }
  counts_.clear();
  pending_ = 0;
  return out;
}

// ---- delivery ------------------------------------------------------------------

void DeliveryQueue::erase(std::map<std::pair<Order, CorrelationKey>, Entry>::iterator it) {
  if (auto k = by_key_.find(it->second.key); k != by_key_.end() && k->second == it->first) by_key_.erase(k);
  entries_.erase(it);
}

void DeliveryQueue::add(const CorrelationKey& key, std::uint64_t count, Clock::time_point now, Clock::time_point due) {
  while (count > 0) {
    Entry e{key, 0, now, due};
    if (auto k = by_key_.find(key); k != by_key_.end()) {  // merge into the queued message of this key
      auto it = entries_.find(k->second);
      e = it->second;
      e.due = std::max(e.due, due);
      erase(it);
    }
    auto take = std::min<std::uint64_t>(65535u - e.count, count);
    e.count = static_cast<std::uint16_t>(e.count + take);
    count -= take;
    if (entries_.size() >= capacity_) {
      // Full: the message with the fewest samples goes, this one or the last queued.
      auto last = std::prev(entries_.end());
      if (last->second.count >= e.count) {
        stats_.queue_full.add(e.count);
        continue;
      }
      stats_.queue_full.add(last->second.count);
      erase(last);
    }
    std::pair<Order, CorrelationKey> id{{-static_cast<int>(e.count), e.due}, key};
    entries_.emplace(id, e);
    if (e.count < 65535) by_key_[key] = id;  // a full message takes no more
  }
}

void DeliveryQueue::expire(Clock::time_point now) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.due < now) {
      stats_.expired.add(it->second.count);
      erase(it);
    }
    it = next;
  }
}

std::optional<DeliveryQueue::Entry> DeliveryQueue::front() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.begin()->second;
}

void DeliveryQueue::sent(Clock::time_point now, std::chrono::milliseconds late_after) {
  if (entries_.empty()) return;
  auto it = entries_.begin();
  stats_.delivered.add(it->second.count);
  if (now - it->second.queued > late_after) stats_.late.add(it->second.count);
  erase(it);
}

void DeliveryQueue::unsendable() {
  if (entries_.empty()) return;
  auto it = entries_.begin();
  stats_.unsendable.add(it->second.count);
  erase(it);
}

void DeliveryQueue::abandon() {
  for (const auto& [id, e] : entries_) stats_.unsendable.add(e.count);
  entries_.clear();
  by_key_.clear();
}

std::uint64_t DeliveryQueue::queued_samples() const {
  std::uint64_t n = 0;
  for (const auto& [id, e] : entries_) n += e.count;
  return n;
}

}  // namespace tracecorr::elastic_v1::agent

