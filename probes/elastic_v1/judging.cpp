#include "tracecorr/stats.hpp"
#include "judging.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <cmath>
#include <cstring>

#include "evidence.hpp"
#include "tracecorr/conform/probe.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;

// ---- spans ------------------------------------------------------------------
SpanIndex::SpanIndex(std::vector<otlp::ReceivedSpan> spans, otlp::ExportLosses losses)
    : spans_(std::move(spans)), losses_(std::move(losses)) {
  flags_absent_ = !spans_.empty() && std::none_of(spans_.begin(), spans_.end(), [](const otlp::ReceivedSpan& s) {
    return (s.flags & 0xFF) != 0;
  });
  // spans_ is in arrival order, and within one export in the exporter's order.
  // The witnesses are the kHoldWitnesses latest ends seen so far: one span
  // with a wrong end (a clock step, a bogus exporter) cannot make every later
  // span look held.
  std::array<std::uint64_t, kHoldWitnesses> latest{};  // descending
  held_ms_.reserve(spans_.size());
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    by_id_.try_emplace(spans_[i].span_id, i);
    auto end = spans_[i].end_unix_nano;
    if (end > latest.back()) {
      latest.back() = end;
      std::sort(latest.begin(), latest.end(), std::greater<>());
    }
    held_ms_.push_back(latest.back() > end ? static_cast<double>(latest.back() - end) / 1e6 : 0.0);
  }
  // Witnesses of a hold are spans an agent hands over as they end: a sampled
  // transaction is itself held, so one that ended just after `s` leaves after
  // it whatever s's hold (a stalled agent, 5 s, then a burst of transactions
  // ended before the stall made a deferring agent look prompt).
  for (const auto& sp : spans_)
    if (is_child(sp) || !sp.sampled()) ends_.push_back(sp.end_unix_nano);
  std::sort(ends_.begin(), ends_.end());
}

bool SpanIndex::hold_witnessed(const otlp::ReceivedSpan& s, std::chrono::milliseconds from,
                               std::chrono::milliseconds upto) const {
  auto ns = [](std::chrono::milliseconds d) { return static_cast<std::uint64_t>(d.count()) * 1000000u; };
  auto first = std::upper_bound(ends_.begin(), ends_.end(), s.end_unix_nano + ns(from));
  auto last = std::lower_bound(ends_.begin(), ends_.end(), s.end_unix_nano + ns(upto));
  return first < last && static_cast<std::size_t>(last - first) >= kHoldWitnesses;
}

double SpanIndex::held_at_least_ms(const otlp::ReceivedSpan& s) const {
  if (spans_.empty() || &s < spans_.data() || &s >= spans_.data() + spans_.size()) return 0;
  return held_ms_[static_cast<std::size_t>(&s - spans_.data())];
}


double TimingBaseline::quantile(double q) const { return tracecorr::quantile(held_ms, q); }
double TimingBaseline::arrival_quantile(double q) const { return tracecorr::quantile(arrival_ms, q); }

double TimingBaseline::share_at_least(double ms) const {
  if (held_ms.empty()) return 0;
  auto n = std::count_if(held_ms.begin(), held_ms.end(), [&](double h) { return h >= ms; });
  return static_cast<double>(n) / static_cast<double>(held_ms.size());
}

std::string TimingBaseline::describe() const {
  std::string out;
  if (held_ms.empty()) out = "no never-deferred span to measure a baseline";
  else
    out = "never-deferred spans held p50 " + ms(quantile(0.5)) + ", p95 " + ms(quantile(0.95)) + ", max " +
          ms(*std::max_element(held_ms.begin(), held_ms.end())) + " (n=" + std::to_string(held_ms.size()) +
          "), arrived p10 " + ms(arrival_quantile(0.1)) + ", p50 " + ms(arrival_quantile(0.5)) + ", p90 " +
          ms(arrival_quantile(0.9)) + " after their end";
  if (run_queue) out += "; " + run_queue->describe();
  return out;
}

TimingBaseline baseline_of(const SessionEvidence& s, const SpanIndex& spans, bool all) {
  TimingBaseline b;
  b.run_queue = s.run_queue_wait;
  auto stop = s.stop_requested_at;
  for (const auto& sp : spans.spans()) {
    if (!all && !spans.is_child(sp)) continue;
    if (stop && sp.received_at_system >= *stop) continue;  // the shutdown's flush
    b.held_ms.push_back(spans.held_at_least_ms(sp));
    b.arrival_ms.push_back(SpanIndex::export_delay_ms(sp));
  }
  return b;
}

const otlp::ReceivedSpan* SpanIndex::find(const SpanId& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &spans_[it->second];
}

bool SpanIndex::is_transaction(const otlp::ReceivedSpan& s) const {
  if (!s.parent_span_id) return true;
  const auto* parent = find(*s.parent_span_id);
  return parent ? parent->trace_id != s.trace_id : !role_unknown(s);
}

bool SpanIndex::is_child(const otlp::ReceivedSpan& s) const {
  if (!s.parent_span_id) return false;
  const auto* parent = find(*s.parent_span_id);
  return parent && parent->trace_id == s.trace_id;
}

// Its parent ends after it and leaves later: an export lost after this span
// ended may have carried it.
bool SpanIndex::role_unknown(const otlp::ReceivedSpan& s) const {
  return s.parent_span_id && !find(*s.parent_span_id) && losses_.lost_after(end_time(s));
}

const otlp::ReceivedSpan* SpanIndex::transaction(const TraceId& trace, const SpanId& id) const {
  const auto* s = find(id);
  return s && s->trace_id == trace && is_transaction(*s) ? s : nullptr;
}

std::vector<const otlp::ReceivedSpan*> SpanIndex::transactions() const {
  std::vector<const otlp::ReceivedSpan*> out;
  for (const auto& s : spans_)
    if (is_transaction(s)) out.push_back(&s);
  return out;
}

namespace {
std::chrono::system_clock::time_point unix_nano_time(std::uint64_t ns) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(ns)));
}
}  // namespace

std::chrono::system_clock::time_point SpanIndex::start_time(const otlp::ReceivedSpan& s) {
  return unix_nano_time(s.start_unix_nano);
}

std::chrono::system_clock::time_point SpanIndex::end_time(const otlp::ReceivedSpan& s) {
  return unix_nano_time(s.end_unix_nano);
}

double SpanIndex::export_delay_ms(const otlp::ReceivedSpan& s) {
  return std::chrono::duration<double, std::milli>(s.received_at_system - end_time(s)).count();
}

// ---- the attribute ----------------------------------------------------------
AttributeIds attribute_ids(const otlp::ReceivedSpan& span) {
  AttributeIds out;
  const auto* value = span.attribute(elastic_v1::spec::kAttributeName);
  if (!value) return out;
  out.present = true;
  out.type_name = value->type_name();
  auto strings = value->string_array();
  if (!strings) return out;
  out.string_array = true;
  out.texts = *strings;
  for (std::size_t i = 0; i < strings->size(); ++i) {
    const auto& text = (*strings)[i];
    auto problem = base64url_problem(text);
    auto bytes = problem.empty() ? base64url_decode(text) : std::nullopt;
    if (problem.empty() && (!bytes || bytes->size() != elastic_v1::spec::kStackTraceIdSize))
      problem = "decodes to " + std::to_string(bytes ? bytes->size() : 0) + " bytes, not " +
                std::to_string(elastic_v1::spec::kStackTraceIdSize);
    if (!problem.empty()) {
      out.problems.push_back("element " + std::to_string(i) + " \"" + text.substr(0, 64) + "\": " + problem);
      continue;
    }
    StackTraceId id{};
    std::memcpy(id.data(), bytes->data(), id.size());
    ++out.counts[id];
  }
  return out;
}

// ---- evidence ---------------------------------------------------------------
std::string ms(double value) { return std::to_string(static_cast<long long>(value)) + " ms"; }
std::string hex(std::span<const std::uint8_t> bytes) { return to_hex(bytes); }

namespace {
template <typename T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void add_field(std::vector<DecodedField>& out, const std::vector<std::uint8_t>& b, std::size_t offset,
               std::size_t size, std::string name, bool number) {
  if (offset >= b.size()) return;
  std::size_t have = std::min(size, b.size() - offset);
  std::string value;
  if (have < size)
    value = "(truncated: " + std::to_string(have) + " of " + std::to_string(size) + " bytes) " +
            to_hex({b.data() + offset, have});
  else if (number && size == 2)
    value = std::to_string(load<std::uint16_t>(b.data() + offset));
  else if (number && size == 4)
    value = std::to_string(load<std::uint32_t>(b.data() + offset));
  else if (number && size == 1)
    value = std::to_string(b[offset]);
  else
    value = to_hex({b.data() + offset, size});
  out.push_back({offset, have, std::move(name), std::move(value)});
}

std::string printable(const std::uint8_t* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n && s.size() < 120; ++i) {
    unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') s.push_back(static_cast<char>(c));
    else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      s += esc;
    }
  }
  return "\"" + s + (n > 120 ? "...\"" : "\"");
}
}  // namespace

std::vector<DecodedField> decode_message_fields(const std::vector<std::uint8_t>& b) {
  std::vector<DecodedField> f;
  add_field(f, b, elastic_v1::spec::kHeaderMessageTypeOffset, elastic_v1::spec::kHeaderMessageTypeSize, "message_type", true);
  add_field(f, b, elastic_v1::spec::kHeaderMinorVersionOffset, elastic_v1::spec::kHeaderMinorVersionSize, "minor_version", true);
  if (b.size() < elastic_v1::spec::kMessageHeaderSize) return f;
  auto type = load<std::uint16_t>(b.data());
  std::size_t known_end = elastic_v1::spec::kMessageHeaderSize;
  if (type == elastic_v1::spec::kMsgCorrelationType) {
    add_field(f, b, elastic_v1::spec::kMsgCorrelationTraceIdOffset, elastic_v1::spec::kMsgCorrelationTraceIdSize, "trace_id", false);
    add_field(f, b, elastic_v1::spec::kMsgCorrelationTransactionIdOffset, elastic_v1::spec::kMsgCorrelationTransactionIdSize,
              "transaction_id", false);
    add_field(f, b, elastic_v1::spec::kMsgCorrelationStackTraceIdOffset, elastic_v1::spec::kMsgCorrelationStackTraceIdSize,
              "stack_trace_id", false);
    add_field(f, b, elastic_v1::spec::kMsgCorrelationCountOffset, elastic_v1::spec::kMsgCorrelationCountSize, "count", true);
    known_end = elastic_v1::spec::kMsgCorrelationFixedSize;
  } else if (type == elastic_v1::spec::kMsgRegistrationType) {
    add_field(f, b, elastic_v1::spec::kMsgRegistrationSamplesDelayMsOffset, elastic_v1::spec::kMsgRegistrationSamplesDelayMsSize,
              "samples_delay_ms", true);
    add_field(f, b, elastic_v1::spec::kMsgRegistrationHostIdOffset, 4, "host_id.length", true);
    known_end = elastic_v1::spec::kMsgRegistrationFixedSize;
    if (b.size() >= known_end) {
      auto len = load<std::uint32_t>(b.data() + elastic_v1::spec::kMsgRegistrationHostIdOffset);
      std::size_t have = std::min<std::size_t>(len, b.size() - known_end);
      f.push_back({known_end, have, "host_id", printable(b.data() + known_end, have)});
      known_end += have;
    }
  }
  if (b.size() > known_end)
    f.push_back({known_end, b.size() - known_end, "trailing", std::to_string(b.size() - known_end) + " bytes"});
  return f;
}

std::vector<DecodedField> decode_record_fields(std::span<const std::uint8_t> bytes) {
  std::vector<std::uint8_t> b(bytes.begin(), bytes.end());
  std::vector<DecodedField> f;
  add_field(f, b, elastic_v1::spec::kTlsLayoutMinorVersionOffset, elastic_v1::spec::kTlsLayoutMinorVersionSize, "layout_minor_version", true);
  add_field(f, b, elastic_v1::spec::kTlsValidOffset, elastic_v1::spec::kTlsValidSize, "valid", true);
  add_field(f, b, elastic_v1::spec::kTlsTracePresentOffset, elastic_v1::spec::kTlsTracePresentSize, "trace_present", true);
  add_field(f, b, elastic_v1::spec::kTlsTraceFlagsOffset, elastic_v1::spec::kTlsTraceFlagsSize, "trace_flags", true);
  add_field(f, b, elastic_v1::spec::kTlsTraceIdOffset, elastic_v1::spec::kTlsTraceIdSize, "trace_id", false);
  add_field(f, b, elastic_v1::spec::kTlsSpanIdOffset, elastic_v1::spec::kTlsSpanIdSize, "span_id", false);
  add_field(f, b, elastic_v1::spec::kTlsTransactionIdOffset, elastic_v1::spec::kTlsTransactionIdSize, "transaction_id", false);
  return f;
}

std::vector<DecodedField> decode_storage_fields(const std::vector<std::uint8_t>& b) {
  std::vector<DecodedField> f;
  add_field(f, b, 0, 2, "layout_minor_version", true);
  std::size_t offset = 2;
  for (const char* name : {"service_name", "service_environment", "socket_file_path"}) {
    if (offset + 4 > b.size()) break;
    auto len = load<std::uint32_t>(b.data() + offset);
    add_field(f, b, offset, 4, std::string(name) + ".length", true);
    offset += 4;
    std::size_t have = std::min<std::size_t>(len, b.size() - offset);
    f.push_back({offset, have, name, printable(b.data() + offset, have)});
    if (have < len) break;
    offset += len;
  }
  return f;
}

Evidence message_evidence(const SentMessage& m, std::string expected, std::string actual) {
  Evidence e;
  e.label = m.label + " (sent for " + m.requirement + ")";
  e.expected = std::move(expected);
  e.actual = std::move(actual);
  // Long datagrams (oversized probes) are shown by their head.
  e.bytes.assign(m.bytes.begin(), m.bytes.begin() + std::min<std::size_t>(m.bytes.size(), 96));
  e.fields = decode_message_fields(m.bytes);
  return e;
}

elastic_v1::TlsRecord decoded_record(std::span<const std::uint8_t> bytes) {
  if (auto r = elastic_v1::decode_tls_record(bytes)) return *r;
  elastic_v1::TlsRecord untrusted;
  untrusted.minor = 0;
  return untrusted;
}

Evidence record_evidence(std::string label, std::span<const std::uint8_t> bytes, std::string expected,
                         std::string actual) {
  Evidence e;
  e.label = std::move(label);
  e.expected = std::move(expected);
  e.actual = std::move(actual);
  e.bytes.assign(bytes.begin(), bytes.end());
  e.fields = decode_record_fields(bytes);
  return e;
}

Evidence span_evidence(const otlp::ReceivedSpan& s, std::string expected, std::string actual) {
  Evidence e;
  e.label = "span " + to_hex(s.span_id) + " \"" + s.name.substr(0, 60) + "\" of trace " + to_hex(s.trace_id) +
            (s.parent_span_id ? " (parent " + to_hex(*s.parent_span_id) + ")" : " (no parent)");
  e.expected = std::move(expected);
  e.actual = std::move(actual);
  return e;
}

}  // namespace tracecorr::elastic_v1

namespace tracecorr::elastic_v1 {

CountCheck check_counts(const std::vector<SentMessage>& sent, const SpanIndex& spans,
                        const std::function<bool(const SentMessage&)>& which) {
  using Txn = std::pair<TraceId, SpanId>;
  using Key = std::pair<Txn, StackTraceId>;
  struct Expectation {
    unsigned total = 0;
    bool any = false;      // some message says "either": no exact total
    bool selected = false;
    const SentMessage* first = nullptr;
    std::chrono::system_clock::time_point last_read_by{};
    std::vector<std::pair<std::chrono::system_clock::time_point, unsigned>> messages;  // (sent, count)
  };
  std::map<Key, Expectation> expected;
  for (const auto& m : sent) {
    if (!m.transaction || !m.stack_trace_id) continue;
    auto& e = expected[{*m.transaction, *m.stack_trace_id}];
    if (!e.first) e.first = &m;
    e.last_read_by = std::max(e.last_read_by, read_by(m));
    e.messages.emplace_back(m.at_system, m.expected_count.value_or(0));
    if (m.expected_count)
      e.total += *m.expected_count;
    else
      e.any = true;
    if (which(m)) e.selected = true;
  }
  std::map<Txn, AttributeIds> attributes;
  auto attribute_of = [&](const Txn& t, const otlp::ReceivedSpan& span) -> const AttributeIds& {
    auto [it, inserted] = attributes.try_emplace(t);
    if (inserted) it->second = attribute_ids(span);
    return it->second;
  };
  // Read witnesses: an agent reads its socket in order, so a stack id carried
  // by one message only and present in the attribute proves that everything
  // sent before that message was read before the transaction left.
  std::map<Txn, std::chrono::system_clock::time_point> read_up_to;
  for (const auto& [key, e] : expected) {
    if (e.messages.size() != 1 || e.any) continue;
    const auto* txn = spans.transaction(key.first.first, key.first.second);
    if (!txn || !attribute_of(key.first, *txn).counts.count(key.second)) continue;
    auto& w = read_up_to[key.first];
    w = std::max(w, e.messages.front().first);
  }
  CountCheck out;
  for (const auto& [key, e] : expected) {
    if (!e.selected || e.any) continue;
    const auto* txn = spans.transaction(key.first.first, key.first.second);
    if (!txn) {
      ++out.unexported;
      continue;
    }
    const auto& ids = attribute_of(key.first, *txn);
    ++out.checked;
    unsigned actual = 0;
    if (auto c = ids.counts.find(key.second); c != ids.counts.end()) actual = c->second;
    if (actual == e.total) continue;
    // Too few: the messages proven read (sent no later than a witness) must
    // all count; beyond them, a transaction the agent may have handed over
    // before it read the last message naming it (a loaded machine, a slow
    // poller) is not evidence either way. Too many is always wrong.
    unsigned proven = 0;
    if (auto w = read_up_to.find(key.first); w != read_up_to.end())
      for (const auto& [at, count] : e.messages)
        if (at <= w->second) proven += count;
    if (actual < e.total && actual >= proven && forwarded_before_taken_up(spans, *txn, e.last_read_by)) {
      ++out.unexported;
      continue;
    }
    std::string problem;
    if (!ids.present) problem = "the transaction has no " + std::string(elastic_v1::spec::kAttributeName) + " attribute";
    else if (!ids.string_array) problem = "the attribute is a " + ids.type_name + ", not a string array";
    out.mismatches.push_back({e.first, e.total, actual, problem});
  }
  return out;
}

Evidence mismatch_evidence(const CountMismatch& m) {
  std::string actual = std::to_string(m.actual) + " time(s)";
  if (!m.attribute_problem.empty()) actual += " (" + m.attribute_problem + ")";
  return message_evidence(*m.message,
                          "stack id " + base64url_nopad(*m.message->stack_trace_id) + " " +
                              std::to_string(m.expected) + " time(s) in the transaction's attribute",
                          actual);
}

std::vector<std::pair<const otlp::ReceivedSpan*, StackTraceId>> unknown_ids(
    const std::vector<SentMessage>& sent, const SpanIndex& spans, std::chrono::system_clock::time_point judged_from) {
  std::set<StackTraceId> known;
  for (const auto& m : sent)
    if (m.stack_trace_id) known.insert(*m.stack_trace_id);
  std::vector<std::pair<const otlp::ReceivedSpan*, StackTraceId>> out;
  for (const auto& s : spans.spans()) {
    if (SpanIndex::start_time(s) < judged_from) continue;
    for (const auto& [id, count] : attribute_ids(s).counts)
      if (!known.count(id)) out.emplace_back(&s, id);
  }
  return out;
}

}  // namespace tracecorr::elastic_v1

namespace tracecorr::elastic_v1 {

std::string host_id_of(const otlp::ReceivedSpan& s) {
  const auto* v = s.resource_attribute("host.id");
  return v && v->as_string() ? *v->as_string() : std::string();
}

std::vector<RegistrationWindow> registration_windows(const SessionEvidence& s, std::chrono::milliseconds margin) {
  auto regs = facts(s).registrations;
  auto boundary = s.timing_boundary.value_or(std::chrono::system_clock::time_point::max());
  if (auto stop = s.stop_requested_at) boundary = std::min(boundary, *stop);
  std::vector<RegistrationWindow> out;
  std::uint32_t previous = static_cast<std::uint32_t>(elastic_v1::spec::kDefaultDelayMs);
  for (std::size_t i = 0; i < regs.size(); ++i) {
    if (!regs[i].sent()) continue;
    std::uint32_t before = previous;
    previous = regs[i].message.samples_delay_ms;
    if (!regs[i].judged || !regs[i].taken_up_at) continue;  // never seen read: no window to judge
    RegistrationWindow w{regs[i], before, regs[i].effective_from() + margin, boundary, margin};
    if (i + 1 < regs.size()) w.next = std::min(w.next, regs[i + 1].at_system);
    if (w.next > w.from + margin) out.push_back(std::move(w));
  }
  return out;
}

std::optional<double> RegistrationEffect::median_delay_ms() const {
  if (transaction_delays_ms.empty()) return std::nullopt;
  return median(transaction_delays_ms);
}

std::optional<bool> RegistrationEffect::delay_applied() const {
  auto m = median_delay_ms();
  if (!m || delay_ms == previous_delay_ms) return std::nullopt;
  double want = delay_ms, before = previous_delay_ms;
  bool near = *m >= want - 100.0 && *m <= want + 600.0;
  if (near && std::abs(*m - want) < std::abs(*m - before)) return true;
  // Holds are lower bounds: "held too short for the new, longer delay" is
  // certain only when the arrivals (upper bounds) say so too.
  if (want > before && !transaction_arrivals_ms.empty()) {
    double arrived = median(transaction_arrivals_ms);
    if (std::abs(arrived - want) < std::abs(arrived - before)) return std::nullopt;
  }
  return false;
}

std::string RegistrationEffect::describe() const {
  auto m = median_delay_ms();
  return std::to_string(with_host_id) + " of " + std::to_string(spans) + " spans carried its host.id (" +
         std::to_string(since_adoption_with) + " of " + std::to_string(since_adoption) +
         " from the first that did); " +
         (m ? "median transaction hold " + ms(*m) + " over " + std::to_string(transaction_delays_ms.size()) +
                  " transactions (registered " + std::to_string(delay_ms) + " ms, before it " +
                  std::to_string(previous_delay_ms) + " ms)"
            : "no transaction ended in its window long enough before the next registration");
}

RegistrationEffect effect_of(const RegistrationWindow& w, const SpanIndex& spans) {
  RegistrationEffect e;
  e.delay_ms = w.registration.message.samples_delay_ms;
  e.previous_delay_ms = w.previous_delay_ms;
  // Judged: transactions due before the next registration under either delay,
  // so the next one cannot have released them early.
  auto longest = std::chrono::milliseconds(std::max(e.delay_ms, e.previous_delay_ms));
  for (const auto& s : spans.spans()) {
    // host.id is a resource attribute: what counts is when the span was exported.
    if (s.received_at_system >= w.from && s.received_at_system + w.margin <= w.next) {
      ++e.spans;
      bool carries = host_id_of(s) == w.registration.message.host_id;
      if (carries) ++e.with_host_id;
      if (carries || e.since_adoption) {
        ++e.since_adoption;
        if (carries) ++e.since_adoption_with;
      }
    }
    auto end = SpanIndex::end_time(s);
    if (spans.is_transaction(s) && spans.sampled(s) && end >= w.from && end + longest + w.margin <= w.next)
    {
      e.transaction_delays_ms.push_back(spans.held_at_least_ms(s));
      e.transaction_arrivals_ms.push_back(SpanIndex::export_delay_ms(s));
    }
  }
  return e;
}

}  // namespace tracecorr::elastic_v1
