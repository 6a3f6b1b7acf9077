// Profiler mode (`tracecorr conform --profiler`): the reader side of every
// protocol. tracecorr plays the application: it launches a stage of writer
// processes whose journals say what each thread published when (stage.hpp),
// lets the profiler under test sample the host, takes in what it exports
// (OTLP profiles over gRPC or HTTP, JSON lines) and judges every sample
// against the journals.
//
// A protocol package brings a ReaderSuite: its stage members (its writers,
// in every layout it has, each showing the hazards a reader must survive)
// and its reader probes. The engine launches, collects and reports; it names
// no protocol. Data flows one way: stage + profiler -> samples and journals
// -> ReaderEvidence -> reader probes -> findings -> the run's result.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/conform/figures.hpp"
#include "tracecorr/profiler/stage.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/profiles/sample.hpp"
#include "tracecorr/profiles/store.hpp"
#include "tracecorr/protocol.hpp"

namespace tracecorr::profiler {

// Where the stage's writer programs are: the build tree's
// `fixtures/<arch>` or the package's `/usr/lib/tracecorr/fixtures/<arch>`.
struct StageOptions {
  std::string fixtures_dir;  // ".../fixtures/x86_64"
  std::string arch;          // "x86_64", "aarch64"
  // Members are asked to show each hazard for this long at a time: what a
  // 19 Hz sampler needs to catch it several times.
  unsigned hazard_ms = 200;
  // The members to launch, by name; empty: every member of the staged suites.
  std::vector<std::string> members;
};

// One writer process of the stage.
struct StageMember {
  std::string name;      // "otel-thread-context/musl-dlopen": unique in the stage
  std::string protocol;  // ProtocolSpec::id of the package that brought it
  // What it stands for, for coverage verdicts and people: "TLS descriptors,
  // dynamic TLS, musl". A profiler that reads none of its samples fails on it.
  std::string layout;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::vector<std::string> hazards;  // what it is meant to show (the journal says what it did)
  // The member publishes under a schema or layout a conforming reader must
  // not read: every context reported for it is a violation.
  bool must_not_be_read = false;
  // A hazard that must begin after the profiler met the member (keys
  // published late: a reader has to have seen the process without them):
  // sent this signal once its first sample came in, then the stage waits
  // for its samples taken after that. 0: none.
  int release_signal = 0;
  // The stage waits for this many of its samples, when more than the run's
  // samples_per_member: a member showing many hazards in turn, each judged
  // on its own share of them. 0: the run's.
  std::size_t samples_wanted = 0;
};

// One member after the stage: what it published and what came back for it.
struct MemberEvidence {
  StageMember member;
  pid_t pid = 0;
  std::string launch_error;  // "" when it ran
  std::string exit;          // how it ended ("exited with 0", "stopped by tracecorr")
  stage::MemberTruth truth;
  std::vector<const profiles::ProfileSample*> samples;  // of its pid, in ReaderEvidence::samples
};

struct ReaderEvidence {
  std::vector<MemberEvidence> members;
  std::vector<profiles::ProfileSample> samples;  // every sample taken in (of any process)
  profiles::IntakeCounters intake;
  std::uint64_t tolerance_ns = 0;  // how far a sample's time may be from the state it reports
  std::string profiler;            // "tracecorr agent ..." or "pid 4242"
  std::string profiler_exit;       // "" while it runs (attach mode)
  // A launched profiler's last lines of output (printable, each bounded): what
  // says why nothing came in, when nothing did.
  std::vector<std::string> profiler_output;
  const MemberEvidence* member(std::string_view name) const;
};

// What one sample says against the truth of its thread.
struct SampleCheck {
  enum class Kind {
    Right,      // the context current on the thread (within the tolerance)
    Missing,    // no link while every state around it had a context
    NoContext,  // no link, and a state around it had none: right
    Poisoned,   // ids the thread showed only where they must not be read
    Stale,      // ids the thread published, but not around the sample's time
    Torn,       // a trace id and a span id the thread never published together
    Unknown,    // ids the thread never published, on no state of the member
    Unplaced,   // no time, no thread, or a thread the journal does not know
  };
  Kind kind = Kind::Unplaced;
  // Right: every state around the sample with the reported ids (a span's
  // record changed in place keeps its ids: its attributes may be either's).
  std::vector<const stage::ThreadState*> matches;
};
SampleCheck check_sample(const MemberEvidence& member, const profiles::ProfileSample& sample,
                         std::uint64_t tolerance_ns);
// The states of the sample's thread it may rightly report: those whose
// lifetime meets its time, widened by the tolerance (none without a time on
// the journals' clock or a thread).
std::vector<const stage::ThreadState*> states_around(const MemberEvidence& member, const profiles::ProfileSample& sample,
                                                     std::uint64_t tolerance_ns);
// Whether one of them shows `hazard`.
bool around_hazard(const MemberEvidence& member, const profiles::ProfileSample& sample, std::uint64_t tolerance_ns,
                   std::string_view hazard);
std::string_view to_string(SampleCheck::Kind kind);

// Every sample of one member checked: counts by kind, and a few of each
// kind kept as evidence (kExamplesKept), for the probes that judge them.
struct CheckedSample {
  const profiles::ProfileSample* sample = nullptr;
  SampleCheck check;
};
struct MemberTally {
  std::map<SampleCheck::Kind, std::size_t> counts;
  std::vector<CheckedSample> checked;  // every sample of the member, in its order
  std::size_t count(SampleCheck::Kind kind) const;
};
MemberTally tally(const MemberEvidence& member, std::uint64_t tolerance_ns);
// When the profiler's first sample of the member was taken (unix ns; it had
// found the process by then), or UINT64_MAX: no sample on the journals' clock.
std::uint64_t first_sample_ns(const MemberEvidence& member);
// A sample's attributes against the states it rightly reports (a Right
// check's matches): the string value it carries under `key` (null: none);
// the first of its values that is one of `values` (null: none); the values
// every matched state's rules drop (poison_values) that none of them keeps:
// a reader reporting one took what the rules leave out.
const std::string* reported_value(const profiles::ProfileSample& sample, const std::string& key);
const std::string* reports_any(const profiles::ProfileSample& sample, const std::vector<std::string>& values);
std::vector<std::string> dropped_by_all(const std::vector<const stage::ThreadState*>& matches);

// One sample as evidence: "pid 42 tid 43 at 12:00:01.123: link 4bf9.../00f0... (stale)".
Evidence sample_evidence(const std::string& label, const profiles::ProfileSample& sample, const SampleCheck& check,
                         const std::string& expected);
inline constexpr std::size_t kExamplesKept = 3;

// The HTML report's picture of each member (pictures.cpp): its samples over
// time, one lane per kind of check, and the hazards its threads showed.
std::vector<conform::SessionTimeline> member_timelines(const ReaderEvidence& evidence);

class ReaderProbe {
 public:
  virtual ~ReaderProbe() = default;
  virtual std::string name() const = 0;  // "reader": also the file probes/<protocol>/reader_probe.cpp
  virtual std::vector<std::string> requirements() const = 0;
  // One Finding per requirement it covers.
  virtual std::vector<Finding> judge(const ReaderEvidence& evidence) const = 0;
  virtual std::size_t minimum_evidence(const std::string& requirement) const {
    (void)requirement;
    return 1;
  }
};

class ReaderSuite {
 public:
  virtual ~ReaderSuite() = default;
  virtual const ProtocolSpec& protocol() const = 0;
  virtual std::vector<StageMember> stage(const StageOptions& options) const = 0;
  virtual const std::vector<std::unique_ptr<ReaderProbe>>& probes() const = 0;
  // Journal events besides `state` and `context` its probes read ("message").
  virtual std::vector<std::string> journal_events() const { return {}; }
};

void register_reader_suite(const ReaderSuite& suite);
std::vector<const ReaderSuite*> reader_suites();
// The reader probe covering a requirement, or nullptr.
const ReaderProbe* reader_probe_for(std::string_view requirement);

}  // namespace tracecorr::profiler
