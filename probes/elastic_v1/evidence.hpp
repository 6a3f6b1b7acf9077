// What Elastic v1's share of a session observed (its SessionPart, the
// Channel in channel.hpp), as plain data: the process storage as it changed,
// the agent's socket and everything tracecorr sent through it. The engine's
// SessionEvidence carries it (SessionEvidence::protocol); judges take it with
// facts(). Tests build one by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elastic_v1/wire.hpp"
#include "tracecorr/conform/session_evidence.hpp"
#include "tracecorr/socket.hpp"

namespace tracecorr::elastic_v1 {

using conform::Clock;
using conform::Millis;

// The process storage pointer, each time it (or what it points to) changed.
struct StorageSighting {
  Clock::time_point at;
  std::uint64_t pointer = 0;
  std::vector<std::uint8_t> raw;                 // the encoded bytes read (bounded), for evidence
  std::optional<ProcessStorage> decoded;
  std::optional<Error> error;                    // decoding failed
  // The socket the storage names, examined at the moment of the sighting (PROC-04).
  std::optional<SocketFacts> socket;
  std::optional<Error> socket_error;
};

// A datagram sent to the agent, with what the scenario expects of it.
struct SentMessage {
  Clock::time_point at;
  std::chrono::system_clock::time_point at_system;
  std::string requirement;     // why it was sent ("MSG-04", "ATTR-04", ...)
  std::string label;           // "correlation truncated to 45 of 46 bytes"
  std::vector<std::uint8_t> bytes;
  SendOutcome outcome = SendOutcome::Refused;
  int send_errno = 0;
  unsigned would_block_retries = 0;
  // For correlations: the transaction and stack id carried (when decodable),
  // and how many times the id must appear in that transaction's attribute.
  // nullopt: the scenario accepts either (e.g. an oversized datagram).
  std::optional<std::pair<TraceId, SpanId>> transaction;
  std::optional<StackTraceId> stack_trace_id;
  std::optional<unsigned> expected_count;
  std::uint64_t sequence = 0;  // TakeUpClock's number for it; 0: not sent
  // Filled by Session::sent_messages(): when the agent had read it at the latest.
  std::optional<std::chrono::system_clock::time_point> taken_up_by;
};

// A registration sent, and what it should change (DEFER-02, HOST-01, MSG-02/03).
struct SentRegistration {
  Clock::time_point at;
  std::chrono::system_clock::time_point at_system;
  Registration message;
  bool judged = true;   // false for boundary values whose effect is not specified
  std::uint64_t sequence = 0;  // TakeUpClock's number for it; 0: not sent
  bool sent() const { return sequence != 0; }
  // When the agent had read it at the latest (TakeUpClock): its socket's
  // queue held none of tracecorr's bytes any more. nullopt: never seen read
  // while the session ran (a stuck reader), or not sent.
  std::optional<std::chrono::system_clock::time_point> taken_up_at;
  // From when the registration has surely taken effect: taken up, or never
  // (a far future that stays safe to add margins to) when it was not seen read.
  std::chrono::system_clock::time_point effective_from() const { return taken_up_at.value_or(kNeverRead); }
  static constexpr std::chrono::system_clock::time_point kNeverRead =
      std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365);
};

// How many datagrams the agent's socket absorbs (informational, for agent
// teams): a burst until the first EAGAIN, then a rate while tracecorr sends
// each time the socket accepts (POLLOUT). The datagrams are correlations for
// transactions the agent never had (MSG-07: ignored).
struct SocketCapacity {
  std::uint64_t burst = 0;          // accepted before the first EAGAIN (the kernel queue's depth)
  std::uint64_t sent = 0;           // accepted during the window
  double window_s = 0;
  bool capped = false;              // stopped at the send cap: the agent absorbs at least this rate
  double per_second() const { return window_s > 0 ? static_cast<double>(sent) / window_s : 0; }
};

struct SessionFacts : conform::ProtocolEvidence {
  std::string socket_dir;  // launch mode: the directory the agent was told to use
  // The same directory made in other roots than tracecorr's (a container's,
  // after `chroot`): where, and when ("at its exec", "when its library was found").
  std::vector<std::string> socket_dir_roots;
  // Why the directory could not be given to the agent in its own root (its
  // root has no parent directory for it, ...), or was made there only after
  // the agent had started: the kit's shortfall, not the agent's.
  std::optional<std::string> socket_dir_unusable;
  // The last line the agent printed naming that directory, when it published
  // nothing: most likely why (bounded; the target's own words).
  std::optional<std::string> socket_dir_complaint;
  std::vector<StorageSighting> storage_sightings;
  // The socket (examined when the session connected, while the target was
  // alive) and what tracecorr sent through it.
  std::optional<SocketFacts> socket_facts;
  std::optional<Error> socket_error;
  bool could_send = false;
  std::vector<SentMessage> sent_messages;
  std::vector<SentRegistration> registrations;
  std::uint64_t messages_lost = 0;
  std::optional<SocketCapacity> socket_capacity;

  // The last process storage that decoded.
  std::optional<ProcessStorage> storage() const;
};

// The session's Elastic facts; empty ones when the session had none (a
// session built by hand without them, or another protocol's).
const SessionFacts& facts(const conform::SessionEvidence& session);

// The deferral delay that governs a transaction ended at `t`: the delay of
// the last registration the agent had read before it (1 s before any).
// nullopt when a registration (or the timing boundary, or the stop) falls
// between t - margin and t + delay + margin: then the agent may have released
// the transaction by another delay, or not processed the registration yet.
std::optional<std::uint32_t> delay_in_force(const conform::SessionEvidence& session,
                                            std::chrono::system_clock::time_point t, std::chrono::milliseconds margin);

}  // namespace tracecorr::elastic_v1
