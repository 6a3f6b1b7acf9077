// A protocol's share of a session: what it watches and does beside the
// engine's readers (its process-wide structure, its channel to the agent),
// and the plain evidence it leaves for its judges.
//
// The engine calls the hooks in this order, from the thread that opens and
// closes the session: prepare_launch (launch mode), library_found (once, as
// soon as discovery chose the process), opened, stop_watching, closed,
// evidence. Nothing here decides a verdict.
#pragma once

#include <chrono>
#include <memory>

#include "tracecorr/conform/discovery_wait.hpp"
#include "tracecorr/conform/target.hpp"

namespace tracecorr::conform {

class Session;

// Base of each protocol's evidence type (e.g. Elastic v1's session facts, in
// probes/elastic_v1/evidence.hpp). Plain data: tests build one by hand.
struct ProtocolEvidence {
  virtual ~ProtocolEvidence() = default;
};

class SessionPart {
 public:
  virtual ~SessionPart() = default;
  // Launch mode, before the target starts: the environment it must see.
  virtual void prepare_launch(LaunchSpec& launch) { (void)launch; }
  // Discovery chose the judged process and found the library in it
  // (session.library(), session.memory()). Watches that must see the agent's
  // first moments start here, before the TLS readers settle.
  virtual void library_found(Session& session) { (void)session; }
  // Opening is over (TLS descriptor read, record watcher running). A part
  // that waits for what the target publishes waits while `wait.over()` is
  // false: the session's discovery wait, judged by the target's progress.
  virtual void opened(Session& session, DiscoveryWait& wait) {
    (void)session;
    (void)wait;
  }
  // The target is about to be stopped: end every thread that reads it.
  virtual void stop_watching() {}
  // The target has stopped (launch mode) or the session is over (attach).
  virtual void closed() {}
  // Everything observed, as plain data, after closed().
  virtual std::shared_ptr<const ProtocolEvidence> evidence() const = 0;
};

}  // namespace tracecorr::conform
