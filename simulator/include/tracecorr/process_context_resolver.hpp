// Which resource a sample belongs to: the samplers hand on the process context
// header's timestamp with each sample (Sample::context_published_at); the
// timestamp names one publication of the context (OTEP 4719's cache key), and
// this maps it to that publication's decoded payload, read from outside with
// the seqlock reader (process_context.hpp).
//
// A publication can only be read while it is the current one: the writer
// frees the payload it replaces. The resolver therefore reads the context
// whenever its timestamp moves (refresh(), called as often as samples are
// polled), keeps the newest publications by timestamp, and a sample whose
// timestamp it never saw current is "missed", never guessed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tracecorr/error.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::process_context {

// One publication: what a timestamp stands for.
struct Publication {
  std::uint64_t published_at_ns = 0;
  std::optional<Payload> payload;  // decoded; nullopt when `error`
  std::optional<Error> error;      // the read of this publication, or its decode, failed
};

enum class ResolutionKind {
  Resolved,      // the publication with the sample's timestamp, decoded
  Unreadable,    // that publication was read, but it or its payload failed (Publication::error)
  BeingWritten,  // timestamp 0: the writer was updating the context when the thread was sampled
  Missed,        // no publication with that timestamp was read: replaced before the resolver
                 // looked, evicted by the bound, or no context watched for the process
};
std::string_view to_string(ResolutionKind kind);  // "resolved", "unreadable", "being_written", "missed"

struct Resolution {
  ResolutionKind kind = ResolutionKind::Missed;
  std::shared_ptr<const Publication> publication;  // Resolved and Unreadable
};

struct ResolverOptions {
  // Per process, the newest publications kept (by timestamp); an older one's
  // samples resolve as Missed. Timestamps only grow (the protocol says so), so samples
  // mostly name one of the last few.
  std::size_t max_publications = 64;
  ReadOptions read;
  DecodeLimits decode;
};

class PublicationResolver {
 public:
  explicit PublicationResolver(ResolverOptions options = {});
  ~PublicationResolver();
  PublicationResolver(const PublicationResolver&) = delete;
  PublicationResolver& operator=(const PublicationResolver&) = delete;

  // pid's samples resolve through the context header at `header_address`.
  // Watching another address (a new mapping) starts afresh; the same one keeps
  // what was read.
  void watch(pid_t pid, std::uint64_t header_address);
  void forget(pid_t pid);
  bool watching(pid_t pid) const;

  // Looks at pid's context now: one 8-byte read of its timestamp, and the
  // seqlock read and decode only for a timestamp not seen before (never for 0:
  // the writer is mid-update, the next look will see the result).
  void refresh(pid_t pid);
  void refresh_all();

  // The publication a sample's timestamp names. A timestamp newer than every
  // publication read so far makes it look again first.
  Resolution resolve(pid_t pid, std::uint64_t published_at_ns);

  // False only under the reader defect ignores-seqlock: timestamp 0 names
  // whatever payload the header pointed at when last looked at under 0.
  bool keeps_seqlock() const { return options_.read.seqlock; }

  struct Counters {
    std::uint64_t timestamp_reads = 0;  // the 8-byte looks
    std::uint64_t payload_reads = 0;    // seqlock reads of a new publication
  };
  Counters counters() const { return counters_; }

 private:
  struct Watched;
  void refresh(Watched& w);
  const std::shared_ptr<const Publication>* find(const Watched& w, std::uint64_t published_at_ns) const;

  ResolverOptions options_;
  std::map<pid_t, std::unique_ptr<Watched>> watched_;
  Counters counters_;
};

// A publication's identity in reports: service.name and service.instance.id
// from its resource (strings as they are, other values as displayed; nullopt
// when absent). Publications with equal identities are one resource across
// updates.
struct ResourceIdentity {
  std::optional<std::string> service_name;
  std::optional<std::string> service_instance_id;
  auto operator<=>(const ResourceIdentity&) const = default;
};
ResourceIdentity identity_of(const Payload& payload);

// Samples counted by the resource and publication they belong to, for a
// report (tracecorr agent's summary). Bounded: at most max_resources
// resources and max_publications publications per resource are listed; the
// samples of any further one are counted as `overflow`.
class PublicationTally {
 public:
  explicit PublicationTally(std::size_t max_resources = 64, std::size_t max_publications = 256)
      : max_resources_(max_resources), max_publications_(max_publications) {}

  void add(const Resolution& resolution);
  // A sample of a process with a context whose header the sampler could not read.
  void add_header_unreadable() { ++header_unreadable_; }

  std::uint64_t samples() const;  // every sample added
  std::uint64_t resolved() const { return resolved_; }
  std::uint64_t being_written() const { return being_written_; }
  std::size_t resources() const { return resources_.size(); }

  // {"samples", "resolved", "being_written", "missed", "unreadable", "header_unreadable",
  //  "overflow", "resources": [{"service_name", "service_instance_id", "samples",
  //  "publications": [{"published_at_ns", "samples"}]}], "unreadable_reasons": {text: count}}.
  // Strings are the target's: the caller makes them printable or UTF-8.
  nlohmann::json to_json() const;

 private:
  struct Resource {
    std::uint64_t samples = 0;
    std::map<std::uint64_t, std::uint64_t> publications;  // timestamp -> samples
  };
  std::size_t max_resources_, max_publications_;
  std::map<ResourceIdentity, Resource> resources_;
  std::map<std::string, std::uint64_t> unreadable_reasons_;  // bounded like resources
  std::uint64_t resolved_ = 0, unreadable_ = 0, being_written_ = 0, missed_ = 0, header_unreadable_ = 0,
                overflow_ = 0;
};

}  // namespace tracecorr::process_context
