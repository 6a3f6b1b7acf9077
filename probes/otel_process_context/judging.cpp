// See judging.hpp.
#include "judging.hpp"

namespace tracecorr::otel_process_context {

using process_context::Header;

// Why the watch cannot judge this session, or nullopt when it can.
std::optional<std::string> watch_missing(const ContextFacts& f) {
  if (!f.watch) return "no mapping watch: " + (f.watch_unavailable.empty() ? std::string("not run") : f.watch_unavailable);
  if (f.not_found) return "no process context was found: " + f.not_found->message();
  return std::nullopt;
}

std::string watch_said(const ContextFacts& f) { return "mapping watch: " + f.watch->describe(); }

HeaderHistory history_of(const ContextFacts& f) { return header_history(*f.watch, f.judged_pid); }

Evidence header_evidence(std::string label, const Header& header, std::string expected, std::string actual) {
  Evidence e = text_evidence(std::move(label), std::move(expected), std::move(actual));
  e.fields.push_back(DecodedField{0, process_context::kHeaderSize, "header", describe(header)});
  return e;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// The publications after the first complete one: the updates.
std::vector<const Publication*> updates_of(const HeaderHistory& h) {
  std::vector<const Publication*> out;
  bool published = false;
  for (const auto& p : h.publications) {
    if (published) out.push_back(&p);
    published = published || p.complete();
  }
  return out;
}

// The event index of the first complete publication (events after it are updates).
std::optional<std::size_t> first_complete_publication(const HeaderHistory& h) {
  for (const auto& p : h.publications)
    if (p.complete()) return p.event;
  return std::nullopt;
}

}  // namespace tracecorr::otel_process_context
