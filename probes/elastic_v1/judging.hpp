// What judges share: an index over the spans a session received, and evidence
// built from the bytes involved (hex plus the fields the registry names).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/result.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/otlp.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;

// What the judges leave out around each message and each stop: a span that
// ended within this of one may have been handled either side of it.
inline constexpr auto kMargin = std::chrono::milliseconds(150);

// Spans received in one session, indexed the ways judges ask.
class SpanIndex {
 public:
  // `losses`: what the receiver shows lost on the way (otlp::ExportLosses),
  // which leaves a span whose parent never arrived without a known role.
  explicit SpanIndex(std::vector<otlp::ReceivedSpan> spans, otlp::ExportLosses losses = {});
  explicit SpanIndex(const SessionEvidence& s) : SpanIndex(s.spans, s.export_losses) {}

  const std::vector<otlp::ReceivedSpan>& spans() const { return spans_; }
  // Whether a span was sampled. OTLP's flags field is optional; when no span
  // of the session carries any trace flag the exporter omits the field, and
  // an exported span counts as sampled (OTel exports only sampled spans).
  // Judges name this assumption (flags_note()) instead of guessing silently.
  bool sampled(const otlp::ReceivedSpan& s) const { return flags_absent_ || s.sampled(); }
  bool flags_absent() const { return flags_absent_; }
  std::string flags_note() const {
    return flags_absent_ ? " (the exporter sends no span flags: every exported span taken as sampled)" : "";
  }
  const otlp::ReceivedSpan* find(const SpanId& id) const;
  // A transaction is a local root: no parent, or a parent this agent did not
  // export (a remote parent). A child's parent was exported. A span whose
  // parent never arrived while an export was lost after it ended is neither:
  // that export may have carried its parent (a child taken for a transaction
  // looks exported without deferral).
  bool is_transaction(const otlp::ReceivedSpan& s) const;
  bool is_child(const otlp::ReceivedSpan& s) const;
  const otlp::ReceivedSpan* transaction(const TraceId& trace, const SpanId& id) const;
  std::vector<const otlp::ReceivedSpan*> transactions() const;
  // Arrival minus end, in ms (negative when the agent's clock ran ahead).
  static double export_delay_ms(const otlp::ReceivedSpan& s);
  // How long the agent held `s` at least, judged by export order: an exporter
  // sends spans in the order the agent handed them over (a FIFO batch queue,
  // whatever its batch period), so every span received before `s` was handed
  // over before it, and had ended by then. The latest end among them minus
  // s's end is a lower bound on s's hold time that export batching, the
  // network and tracecorr's own scheduling cannot inflate. Never negative.
  // (Precisely: the kHoldWitnesses-th latest end among them, so that a few
  // spans with wrong end times cannot make others look held.)
  double held_at_least_ms(const otlp::ReceivedSpan& s) const;
  static constexpr std::size_t kHoldWitnesses = 3;
  static std::chrono::system_clock::time_point start_time(const otlp::ReceivedSpan& s);
  static std::chrono::system_clock::time_point end_time(const otlp::ReceivedSpan& s);
  // Whether a hold of `s` shorter than `upto` would be visible: at least
  // kHoldWitnesses spans that are never held (children, unsampled
  // transactions) ended within (s's end + `from`, s's end + `upto`). A starved
  // target ends few spans; then a short held_at_least_ms says nothing, and the
  // span is no evidence either way.
  bool hold_witnessed(const otlp::ReceivedSpan& s, std::chrono::milliseconds from,
                      std::chrono::milliseconds upto) const;

 private:
  std::vector<otlp::ReceivedSpan> spans_;
  std::map<SpanId, std::size_t> by_id_;
  std::vector<double> held_ms_;  // held_at_least_ms, by position
  std::vector<std::uint64_t> ends_;  // the never-held spans' ends (unix ns), ascending
  bool flags_absent_ = false;
  otlp::ExportLosses losses_;
  // Parent never arrived, and maybe lost on the way (neither role).
  bool role_unknown(const otlp::ReceivedSpan& s) const;
};

// The same-session baseline for timing judges: how long spans that are never
// deferred (child spans; everything with the feature off) were held by the
// export-order measure, and how long the target's threads waited to run.
// A judge calls the run too noisy to tell when the baseline's p95 reaches
// half the smallest hold it must tell apart.
struct TimingBaseline {
  std::vector<double> held_ms;             // of never-deferred spans
  // Their arrival lateness (SpanIndex::export_delay_ms): what the exporter's
  // batching and the transport add. Only this can show a delay applied to
  // every span alike, which export order cannot.
  std::vector<double> arrival_ms;
  std::optional<RunQueueWait> run_queue;   // of the session judged
  std::size_t size() const { return held_ms.size(); }
  double quantile(double q) const;         // of held_ms; 0 when empty
  double arrival_quantile(double q) const; // of arrival_ms; 0 when empty
  // Share of baseline spans held at least `ms`.
  double share_at_least(double ms) const;
  // Holds longer than asked cannot be told from the machine's delays: never-
  // deferred spans were held half as long, or the target was starved of CPU.
  bool too_noisy_for(double hold_ms) const {
    return (!held_ms.empty() && quantile(0.95) >= hold_ms / 2) || (run_queue && run_queue->starved());
  }
  std::string describe() const;  // "never-deferred spans held p50 2 ms, p95 9 ms, max 40 ms (n=212); <run queue>"
};
// Never-deferred spans of a session: its child spans, and with `all` every span.
TimingBaseline baseline_of(const SessionEvidence& s, const SpanIndex& spans, bool all);

// The ids carried by the correlation attribute of a span, decoded to bytes.
// nullopt when the attribute is missing; `problems` lists what is malformed.
struct AttributeIds {
  bool present = false;
  bool string_array = false;
  std::string type_name;
  std::vector<std::string> texts;
  std::map<StackTraceId, unsigned> counts;  // of the well-formed ids
  std::vector<std::string> problems;        // "element 3: padding '=' at position 22"
};
AttributeIds attribute_ids(const otlp::ReceivedSpan& span);

// Evidence from bytes, with their fields decoded by the registry's layouts.
std::vector<DecodedField> decode_message_fields(const std::vector<std::uint8_t>& bytes);
std::vector<DecodedField> decode_record_fields(std::span<const std::uint8_t> bytes);
std::vector<DecodedField> decode_storage_fields(const std::vector<std::uint8_t>& bytes);
Evidence message_evidence(const SentMessage& m, std::string expected, std::string actual);
Evidence record_evidence(std::string label, std::span<const std::uint8_t> bytes, std::string expected, std::string actual);
// An observed record's fields by the Elastic v1 codec (watchers keep bytes
// only). Bytes that do not decode (never, for what its layout reads) give a
// record with minor 0 and valid 0: nothing in it is trusted.
elastic_v1::TlsRecord decoded_record(std::span<const std::uint8_t> bytes);
Evidence span_evidence(const otlp::ReceivedSpan& s, std::string expected, std::string actual);

std::string ms(double value);  // "312 ms"
std::string hex(std::span<const std::uint8_t> bytes);

// Bounded evidence: judges keep the first few examples of a violation.
inline constexpr std::size_t kMaxExamples = 3;

}  // namespace tracecorr::elastic_v1

namespace tracecorr::elastic_v1 {

// Compares, per (transaction, stack id), how often the id appears in the
// transaction's attribute with what the messages sent for it expect.
struct CountMismatch {
  const SentMessage* message = nullptr;  // the first message that carried the id
  unsigned expected = 0;
  unsigned actual = 0;
  std::string attribute_problem;  // the attribute was missing or malformed
};
// When the agent had read message `m` at the latest (SentMessage::taken_up_by);
// never, when it was not seen read while the session ran.
inline std::chrono::system_clock::time_point read_by(const SentMessage& m) {
  return m.taken_up_by.value_or(SentRegistration::kNeverRead);
}
// True when the agent may have handed `span` to its exporter before it read a
// message it took up by `taken_up`: then a missing stack id is not evidence
// either way. The hand-over is bounded below by export order (end + held),
// and above by the arrival; only a lower bound past the take-up (plus a
// little for the agent to apply what it read) proves "after".
inline bool forwarded_before_taken_up(const SpanIndex& spans, const otlp::ReceivedSpan& span,
                                      std::chrono::system_clock::time_point taken_up) {
  auto handed_over_after = SpanIndex::end_time(span) + std::chrono::microseconds(static_cast<long long>(
                                                           spans.held_at_least_ms(span) * 1000.0));
  return handed_over_after < taken_up + std::chrono::milliseconds(20);
}
struct CountCheck {
  std::size_t checked = 0;     // (transaction, id) pairs judged
  std::size_t unexported = 0;  // pairs whose transaction never arrived, or arrived too soon to judge: not judged
  std::vector<CountMismatch> mismatches;
};
// `which` selects the messages whose ids are judged.
CountCheck check_counts(const std::vector<SentMessage>& sent, const SpanIndex& spans,
                        const std::function<bool(const SentMessage&)>& which);
Evidence mismatch_evidence(const CountMismatch& m);
// Ids in some exported attribute that no sent message carried, in spans that
// began at `judged_from` or later (earlier ones may carry ids someone else sent).
std::vector<std::pair<const otlp::ReceivedSpan*, StackTraceId>> unknown_ids(
    const std::vector<SentMessage>& sent, const SpanIndex& spans,
    std::chrono::system_clock::time_point judged_from = std::chrono::system_clock::time_point::min());

}  // namespace tracecorr::elastic_v1

namespace tracecorr::elastic_v1 {

// Spans that ended while one registration was the latest the agent had.
struct RegistrationWindow {
  SentRegistration registration;
  std::uint32_t previous_delay_ms = 0;         // the delay in force before it
  std::chrono::system_clock::time_point from;  // taken up (or sent) + margin
  std::chrono::system_clock::time_point next;  // the next registration (any kind) or the timing boundary
  std::chrono::milliseconds margin{0};
};
// Windows of the judged registrations: from `margin` after each until the
// next registration of any kind (or the session's timing boundary).
std::vector<RegistrationWindow> registration_windows(const SessionEvidence& s, std::chrono::milliseconds margin);

struct RegistrationEffect {
  std::size_t spans = 0;              // spans that arrived in the window
  std::size_t with_host_id = 0;       // ... whose resource host.id is the registration's
  // Spans from the first that carried the host.id on (the agent's own take-up
  // of a registration can lag the socket's: it may apply it at its next poll),
  // and how many of those carried it.
  std::size_t since_adoption = 0, since_adoption_with = 0;
  std::uint32_t delay_ms = 0, previous_delay_ms = 0;
  // Export delays of sampled transactions that ended in the window and were
  // due (end + delay) before the next registration could release them early.
  std::vector<double> transaction_delays_ms;
  std::vector<double> transaction_arrivals_ms;  // the same transactions' arrival lateness (an upper bound)
  std::optional<double> median_delay_ms() const;
  // Adopted: once the host.id first appears, every later span in the window carries it.
  bool host_id_adopted() const { return since_adoption > 0 && since_adoption_with == since_adoption; }
  // The median hold is nearer the registration's delay than the one in force
  // before it, within the DEFER-02 tolerance. nullopt: no transaction judged,
  // or the two delays are equal (the hold cannot tell them apart).
  std::optional<bool> delay_applied() const;
  std::string describe() const;
};
RegistrationEffect effect_of(const RegistrationWindow& w, const SpanIndex& spans);

// The resource host.id of a span, or "" when it has none.
std::string host_id_of(const otlp::ReceivedSpan& s);

}  // namespace tracecorr::elastic_v1
