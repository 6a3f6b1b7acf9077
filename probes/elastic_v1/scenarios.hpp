// Scenarios: what tracecorr does to the agent in each session, step by step,
// recording everything in the Session for the probes to judge.
//
// Sessions (each a fresh launch of the target, in this order):
//   enabled      correlation on: storage, socket, records, update order,
//                registrations (minor 1 and 2, a profiler restart, boundary
//                values), correlation traffic, the message battery
//   disabled     ENABLED=false: nothing deferred, nothing correlated
//   auto         ENABLED=auto: nothing correlated or buffered before registration
//   small-queue  BUFFER_SIZE=2 and a long delay: the queue fills
//   own-host-id  the agent has a host.id of its own; ENABLED unset (the default)
//   unsampled    OTEL_TRACES_SAMPLER=traceidratio 0.25, BUFFER_SIZE=8: the queue
//                emptied, then frozen by a delay longer than the session
//   all-sampled  the same with every transaction sampled: how many sampled
//                transactions that frozen queue holds when no unsampled one
//                competes (DEFER-05: do unsampled transactions take places?)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "elastic_v1/agent/correlation.hpp"
#include "elastic_v1/library.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;

inline constexpr const char* kEnabledSession = "enabled";
inline constexpr const char* kDisabledSession = "disabled";
inline constexpr const char* kAutoSession = "auto";
inline constexpr const char* kSmallQueueSession = "small-queue";
inline constexpr const char* kOwnHostIdSession = "own-host-id";
inline constexpr const char* kUnsampledSession = "unsampled";
inline constexpr const char* kAllSampledSession = "all-sampled";

// How tracecorr's host agent sends correlations during the scenarios.
using agent::Personality;

// The suite's own settings (its SuiteOptions: personality, samples-delay-ms,
// host-id), parsed from ScenarioOptions::settings.
struct Settings {
  Personality personality = Personality::Spec;
  // Attach mode: the registration left in force when the session ends, so no
  // test value (a 2^32-1 ms delay, a made-up host-id) stays in a live service.
  std::uint32_t restore_samples_delay_ms = 1000;  // the spec's default
  std::string restore_host_id;                    // default: this machine's id
  // Launch mode: where each session's socket directory is made (--socket-dir).
  std::string socket_dir_parent = "/tmp";
};
Expected<Settings> parse_settings(const ScenarioOptions& options);
// Parsed settings; the defaults when they do not parse (the suite's check()
// refused those before anything ran).
Settings settings_of(const ScenarioOptions& options);

// Does any judged requirement need messages sent?
bool sends_messages(const ScenarioOptions& options);

// Areas whose requirements are judged by what tracecorr sends (registrations,
// correlations): the rest (ELF, PROC, SOCK, TLS) only need watching.
bool judged_by_messages(std::string_view requirement_id);

// The fixed values the scenarios use, so judges can name them.
namespace scenario {
inline constexpr std::uint32_t kFirstDelayMs = 300;    // registration at minor 1
inline constexpr std::uint32_t kSecondDelayMs = 600;   // registration at minor 2, after a profiler restart
inline constexpr std::uint32_t kFinalDelayMs = 300;    // after the boundary registrations
inline constexpr std::uint32_t kLongDelayMs = 4000;    // small-queue: longer than the session
inline constexpr unsigned kSmallQueueSize = 2;
// DEFER-05's queue freeze (the unsampled and all-sampled sessions). The size
// asked for: what an agent makes of it (EDOT Java rounds up to a power of two
// and holds one more outside its ring) is measured, not assumed.
inline constexpr unsigned kFreezeQueueSize = 8;
inline constexpr const char* kUnsampledRatio = "0.25";
inline constexpr std::uint32_t kFlushDelayMs = 20;                // empties the queue
inline constexpr std::chrono::milliseconds kFlushWait{1300};       // the default 1 s delay's last transaction has left
inline constexpr std::uint32_t kFreezeDelayMs = 30000;            // longer than the session: nothing leaves the queue
inline constexpr std::chrono::milliseconds kFreezeMargin{150};     // after the freeze was read: it applies
inline constexpr std::chrono::milliseconds kFreezeFillPatience{8000};
inline constexpr std::chrono::milliseconds kFreezeWitnessed{1500};  // held on after the queue was seen full
inline constexpr const char* kOwnHostId = "tracecorr-own-host";
inline constexpr const char* kTruncatedHostId = "tracecorr-truncated";
// MSG-07: a registration longer than a 1024-byte receive buffer (EDOT Java's),
// with the delay already in force, so that only its host.id shows whether the
// agent took it. HOST-01 and MSG-03 leave it to MSG-07.
inline constexpr std::size_t kLongHostIdBytes = 1500;
inline bool is_long_registration(const Registration& r) { return r.host_id.size() >= kLongHostIdBytes; }
// How long a session waits for one more export before it stops the agent
// (an exporter batching every 5 s, plus scheduling).
inline constexpr std::chrono::milliseconds kBatchPatience{6000};
inline constexpr std::chrono::milliseconds kCapacityWindow{500};  // socket capacity (informational)
inline constexpr std::uint64_t kCapacityMaxSends = 20000;
}  // namespace scenario

std::vector<std::string> all_session_names();
SessionSettings session_settings(const std::string& name, const ScenarioOptions& options);
// How long opening waits for the process storage in that session.
Millis storage_wait(const std::string& name);
// Runs the scenario for session.settings().name. Errors are kit faults.
Status run_scenario(Session& session, const ScenarioOptions& options);

// The requirement label of the registration that restores the user's values.
inline constexpr const char* kRestoreLabel = "restore";

// Host ids the enabled scenario registers with, in order: judges check adoption.
std::vector<std::string> registered_host_ids(const Session& session);

}  // namespace tracecorr::elastic_v1
