// Samples' context timestamps to publications, and their tally.
#include "tracecorr/process_context_resolver.hpp"

#include "tracecorr/memory.hpp"

namespace tracecorr::process_context {

std::string_view to_string(ResolutionKind kind) {
  switch (kind) {
    case ResolutionKind::Resolved: return "resolved";
    case ResolutionKind::Unreadable: return "unreadable";
    case ResolutionKind::BeingWritten: return "being_written";
    case ResolutionKind::Missed: return "missed";
  }
  return "unknown";
}

struct PublicationResolver::Watched {
  Watched(pid_t pid, std::uint64_t address) : header_address(address), memory(pid) {}
  std::uint64_t header_address;
  LiveProcessMemory memory;
  std::map<std::uint64_t, std::shared_ptr<const Publication>> publications;  // by timestamp
};

PublicationResolver::PublicationResolver(ResolverOptions options) : options_(std::move(options)) {
  if (options_.max_publications == 0) options_.max_publications = 1;
}
PublicationResolver::~PublicationResolver() = default;

void PublicationResolver::watch(pid_t pid, std::uint64_t header_address) {
  auto& w = watched_[pid];
  if (!w || w->header_address != header_address) w = std::make_unique<Watched>(pid, header_address);
}

void PublicationResolver::forget(pid_t pid) { watched_.erase(pid); }

bool PublicationResolver::watching(pid_t pid) const { return watched_.count(pid) != 0; }

void PublicationResolver::refresh(pid_t pid) {
  if (auto it = watched_.find(pid); it != watched_.end()) refresh(*it->second);
}

void PublicationResolver::refresh_all() {
  for (auto& [pid, w] : watched_) refresh(*w);
}

const std::shared_ptr<const Publication>* PublicationResolver::find(const Watched& w,
                                                                    std::uint64_t published_at_ns) const {
  auto it = w.publications.find(published_at_ns);
  return it == w.publications.end() ? nullptr : &it->second;
}

void PublicationResolver::refresh(Watched& w) {
  ++counters_.timestamp_reads;
  auto now = w.memory.read_u64(w.header_address + kPublishedAtOffset);
  // Timestamp 0: mid-update, looked at again later (unless the reader defect ignores-seqlock reads it anyway).
  if (!now || (*now == 0 && options_.read.seqlock) || find(w, *now)) return;
  ++counters_.payload_reads;
  ContextRead read = read_context(w.memory, w.header_address, options_.read);
  auto publication = std::make_shared<Publication>();
  if (read.ok()) {
    publication->published_at_ns = read.header->published_at_ns;  // 0 only under ignores-seqlock
    auto decoded = decode_payload(read.payload, options_.decode);
    if (decoded)
      publication->payload = std::move(*decoded);
    else
      publication->error = decoded.error();
  } else if (read.header && read.header->published_at_ns != 0 && read.stage != ReadStage::Retries &&
             read.stage != ReadStage::Timestamp) {
    // The header itself or its payload failed, not a race with the writer:
    // that publication stays unreadable, and is not read again.
    publication->published_at_ns = read.header->published_at_ns;
    publication->error = read.error;
  } else {
    return;  // the writer kept updating, or the process went: the next look tries again
  }
  if (find(w, publication->published_at_ns)) return;
  w.publications.emplace(publication->published_at_ns, std::move(publication));
  while (w.publications.size() > options_.max_publications) w.publications.erase(w.publications.begin());
}

Resolution PublicationResolver::resolve(pid_t pid, std::uint64_t published_at_ns) {
  if (published_at_ns == 0 && options_.read.seqlock) return {ResolutionKind::BeingWritten, nullptr};
  auto it = watched_.find(pid);
  if (it == watched_.end()) return {};
  Watched& w = *it->second;
  const auto* found = find(w, published_at_ns);
  if (!found && (published_at_ns == 0 || w.publications.empty() || published_at_ns > w.publications.rbegin()->first)) {
    refresh(w);
    found = find(w, published_at_ns);
  }
  if (!found) return {};
  return {(*found)->payload ? ResolutionKind::Resolved : ResolutionKind::Unreadable, *found};
}

// ---- identity and tally ----------------------------------------------------------------------------

namespace {

std::optional<std::string> text_of(const AttributeList& list, std::string_view key) {
  const otlp::AttributeValue* v = find_attribute(list, key);
  if (!v) return std::nullopt;
  if (const std::string* s = v->as_string()) return *s;
  return v->to_display();
}

nlohmann::json or_null(const std::optional<std::string>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

}  // namespace

ResourceIdentity identity_of(const Payload& payload) {
  return {text_of(payload.resource, "service.name"), text_of(payload.resource, "service.instance.id")};
}

void PublicationTally::add(const Resolution& r) {
  switch (r.kind) {
    case ResolutionKind::BeingWritten: ++being_written_; return;
    case ResolutionKind::Missed: ++missed_; return;
    case ResolutionKind::Unreadable: {
      ++unreadable_;
      std::string why = r.publication && r.publication->error ? r.publication->error->message() : "unknown";
      auto it = unreadable_reasons_.find(why);
      if (it != unreadable_reasons_.end())
        ++it->second;
      else if (unreadable_reasons_.size() < max_resources_)
        unreadable_reasons_.emplace(std::move(why), 1);
      return;
    }
    case ResolutionKind::Resolved: break;
  }
  ++resolved_;
  const ResourceIdentity id = identity_of(*r.publication->payload);
  auto it = resources_.find(id);
  if (it == resources_.end()) {
    if (resources_.size() >= max_resources_) {
      ++overflow_;
      return;
    }
    it = resources_.emplace(id, Resource{}).first;
  }
  Resource& resource = it->second;
  auto p = resource.publications.find(r.publication->published_at_ns);
  if (p == resource.publications.end() && resource.publications.size() >= max_publications_) {
    ++overflow_;
    return;
  }
  ++resource.samples;
  ++resource.publications[r.publication->published_at_ns];
}

std::uint64_t PublicationTally::samples() const {
  return resolved_ + unreadable_ + being_written_ + missed_ + header_unreadable_;
}

nlohmann::json PublicationTally::to_json() const {
  using nlohmann::json;
  json resources = json::array();
  for (const auto& [id, r] : resources_) {
    json publications = json::array();
    for (const auto& [at, n] : r.publications) publications.push_back({{"published_at_ns", at}, {"samples", n}});
    resources.push_back({{"service_name", or_null(id.service_name)},
                         {"service_instance_id", or_null(id.service_instance_id)},
                         {"samples", r.samples},
                         {"publications", publications}});
  }
  return {{"samples", samples()},
          {"resolved", resolved_},
          {"being_written", being_written_},
          {"missed", missed_},
          {"unreadable", unreadable_},
          {"header_unreadable", header_unreadable_},
          {"overflow", overflow_},
          {"resources", resources},
          {"unreadable_reasons", unreadable_reasons_}};
}

}  // namespace tracecorr::process_context
