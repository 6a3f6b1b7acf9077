// See header_history.hpp.
#include "header_history.hpp"

#include <sys/syscall.h>

#include <algorithm>

#include "evidence.hpp"

namespace tracecorr::otel_process_context {

using process_context::Header;

// Written, not right: a wrong signature or version stored before the
// timestamp is PCTX-02's or PCTX-03's failure, not an order PCTX-07 judges.
bool Publication::complete() const {
  const bool signature_written =
      std::any_of(header.signature.begin(), header.signature.end(), [](std::uint8_t b) { return b != 0; });
  return signature_written && header.version != 0 && header.payload_size != 0 && header.payload != 0;
}

std::string describe(const Header& h) {
  return "signature \"" + h.signature_text() + "\", version " + std::to_string(h.version) + ", payload_size " +
         std::to_string(h.payload_size) + ", published_at " + std::to_string(h.published_at_ns) + ", payload " +
         hex_address(h.payload);
}

namespace {

std::vector<std::string> changed_fields(const Header& a, const Header& b) {
  std::vector<std::string> out;
  if (a.signature != b.signature) out.emplace_back("signature");
  if (a.version != b.version) out.emplace_back("version");
  if (a.payload_size != b.payload_size) out.emplace_back("payload_size");
  if (a.payload != b.payload) out.emplace_back("payload");
  return out;
}

bool names_the_mapping(const watch::MappingWatchEvent& e, std::uint64_t address) {
  return e.kind == watch::MappingWatchEvent::Kind::kSyscall && e.syscall == SYS_prctl && e.args[0] == kPrSetVma &&
         e.args[1] == kPrSetVmaAnonName && e.args[2] == address;
}

}  // namespace

HeaderHistory header_history(const watch::MappingWatchReport& report, pid_t pid) {
  using Kind = watch::MappingWatchEvent::Kind;
  HeaderHistory h;
  std::optional<Header> previous;
  std::optional<std::uint64_t> last_timestamp;
  // The story ends where the kept events end: past kMaxKeptEvents the watch
  // went on, but what it saw (a naming call, say) is not here.
  const auto story_end =
      report.events_dropped && !report.events.empty() ? report.events.back().at : report.ended_at;
  for (std::size_t i = 0; i < report.events.size(); ++i) {
    const auto& e = report.events[i];
    if (e.pid != pid) continue;
    if (e.kind == Kind::kExec) {  // a new image: whatever follows is another story
      h = HeaderHistory{};
      previous.reset();
      last_timestamp.reset();
      continue;
    }
    if (e.kind == Kind::kMapped) {
      h.address = e.address;
      h.mapping_name = e.mapping_name;
      auto header = process_context::parse_header(e.bytes);
      if (header) previous = *header;
      h.armed_before_publication = header && header->published_at_ns == 0;
      continue;
    }
    if (!h.address) continue;
    if (names_the_mapping(e, *h.address)) {
      ++h.naming_calls;
      if (h.publications.empty()) ++h.naming_calls_before_first_publication;
      else if (!h.publications.back().superseded) ++h.publications.back().naming_calls_after;
      continue;
    }
    if (e.kind != Kind::kStore) continue;
    ++h.stores;
    auto header = process_context::parse_header(e.bytes);
    if (!header) {
      h.unreadable_stores.push_back(i);
      continue;
    }
    const std::uint64_t before_ts = previous ? previous->published_at_ns : 0;
    const std::uint64_t ts = header->published_at_ns;
    if (ts != before_ts && !h.publications.empty()) h.publications.back().superseded = true;
    if (ts != 0 && ts != before_ts) {
      Publication p;
      p.event = i;
      p.header = *header;
      p.previous_timestamp = last_timestamp;
      p.from_zero = before_ts == 0;
      if (story_end > e.at) p.watched_after = story_end - e.at;
      h.publications.push_back(p);
      last_timestamp = ts;
    }
    if (previous && before_ts != 0 && ts != 0) {
      auto fields = changed_fields(*previous, *header);
      if (!fields.empty()) h.changes_while_set.push_back(ChangeWhileSet{i, *previous, *header, std::move(fields)});
    }
    previous = *header;
  }
  return h;
}

}  // namespace tracecorr::otel_process_context
