// OTEP 4719's judges over plain evidence: each case writes by hand what the
// mapping watch saw of a writer (the mapping appearing, every store into the
// header, the naming calls, the forks), the snapshots and the tally of the
// seqlock reads, runs the probe that covers the requirement, and checks the
// outcome and the words of its reason. Nothing is launched: the kill matrix
// (tests/py/test_conform_pctx_mutants.py) runs the writers.
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "judge_case.hpp"
#include "opentelemetry/proto/processcontext/v1development/process_context.pb.h"
#include "probes/otel_process_context/evidence.hpp"
#include "probes/otel_process_context/header_history.hpp"
#include "probes/otel_process_context/judges.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::otel_process_context {
namespace {

namespace pc = process_context;
using watch::MappingWatchEvent;
using watch::MappingWatchReport;
using conform::SessionEvidence;
using conform::SessionSet;
using Kind = MappingWatchEvent::Kind;
using Outcome = Finding::Outcome;
using namespace judge_tests;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr pid_t kWriter = 4242;    // the judged process
constexpr pid_t kChild = 4243;     // a child it forked, which inherited the mapping
constexpr pid_t kStranger = 5151;  // another process of the launched tree
constexpr std::uint64_t kHeaderAddress = 0x7f3a12340000;
constexpr std::uint64_t kMappingSize = 4096;
constexpr std::uint64_t kFirstPayload = 0x55d0c0001000, kSecondPayload = 0x55d0c0002000, kThirdPayload = 0x55d0c0003000;
// Timestamps on CLOCK_BOOTTIME, inside the snapshots' process lifetime [1 s, 9 s].
constexpr std::uint64_t kProcessStart = 1'000'000'000, kNow = 9'000'000'000;
constexpr std::uint64_t kPublishedAt = 2'000'000'000, kUpdatedAt = 3'000'000'000, kUpdatedAgainAt = 4'000'000'000;
const std::string kMemfdName = "/memfd:OTEL_CTX (deleted)";


// ---- headers, payloads and snapshots ------------------------------------

std::vector<std::uint8_t> encoded_payload() {
  opentelemetry::proto::processcontext::v1development::ProcessContext message;
  auto* attribute = message.mutable_resource()->add_attributes();
  attribute->set_key("service.name");
  attribute->mutable_value()->set_string_value("checkout");
  const std::string bytes = message.SerializeAsString();
  return {bytes.begin(), bytes.end()};
}

std::uint32_t payload_size() { return static_cast<std::uint32_t>(encoded_payload().size()); }

pc::Header published(std::uint64_t timestamp, std::uint64_t payload = kFirstPayload) {
  pc::Header h;
  std::copy(pc::kSignature.begin(), pc::kSignature.end(), h.signature.begin());
  h.version = pc::kCurrentVersion;
  h.payload_size = payload_size();
  h.published_at_ns = timestamp;
  h.payload = payload;
  return h;
}

// The 32 bytes the watch reads: the OTEP's layout, little-endian.
std::vector<std::uint8_t> header_bytes(const pc::Header& h) {
  std::vector<std::uint8_t> b(pc::kHeaderSize);
  std::copy(h.signature.begin(), h.signature.end(), b.begin() + pc::kSignatureOffset);
  auto put = [&b](std::size_t offset, std::uint64_t value, std::size_t width) {
    for (std::size_t i = 0; i < width; ++i) b[offset + i] = static_cast<std::uint8_t>(value >> (8 * i));
  };
  put(pc::kVersionOffset, h.version, 4);
  put(pc::kPayloadSizeOffset, h.payload_size, 4);
  put(pc::kPublishedAtOffset, h.published_at_ns, 8);
  put(pc::kPayloadPointerOffset, h.payload, 8);
  return b;
}

// One look at the writer, as take_snapshot would give it: its memfd mapping
// (rw-p, `dont_fork` as smaps said) and a consistent read of `header`.
pc::Snapshot snapshot(const pc::Header& header, std::optional<bool> dont_fork = true) {
  pc::MappingSnapshot m;
  m.mapping.mapping.start = kHeaderAddress;
  m.mapping.mapping.end = kHeaderAddress + kMappingSize;
  m.mapping.mapping.read = m.mapping.mapping.write = true;
  m.mapping.mapping.path = kMemfdName;
  m.mapping.kind = pc::MappingKind::Memfd;
  m.mapping.dont_fork = dont_fork;
  m.read.address = kHeaderAddress;
  m.read.header = header;
  m.read.payload = encoded_payload();
  m.decoded = pc::decode_payload(m.read.payload);
  pc::Snapshot s;
  s.pid = kWriter;
  s.mappings.push_back(std::move(m));
  s.process_start_boottime_ns = kProcessStart;
  s.boottime_now_ns = kNow;
  s.clock_tick_ns = 10'000'000;
  return s;
}

// ---- what the mapping watch saw, written as a story --------------------------

// The watch's events, one step each, 1 ms apart; `header_` is the watched
// bytes as the writer's stores left them. The steps a conforming writer takes
// (publish, update) are spelled once here; a case that breaks one writes
// its stores with store().
class Story {
 public:
  // The mapping appeared (the watch armed on it), its header as it was then.
  Story& mapped(std::string name = kMemfdName) {
    auto& e = add(Kind::kMapped, kWriter);
    e.address = kHeaderAddress;
    e.mapping_name = std::move(name);
    e.bytes = header_bytes(header_);
    return *this;
  }
  // The watch armed on a header that was already published (e.g. it could
  // only arm once the writer had published).
  Story& mapped_published(std::uint64_t timestamp) {
    header_ = published(timestamp);
    return mapped();
  }
  // One store by the writer, leaving the header as `change` makes it.
  Story& store(const std::function<void(pc::Header&)>& change) {
    change(header_);
    return store_bytes(kWriter, header_bytes(header_));
  }
  // A store the watch saw in another process (a child that inherited the
  // mapping, say), its header there being `header`; the writer's is untouched.
  Story& store_in(pid_t pid, const pc::Header& header) { return store_bytes(pid, header_bytes(header)); }
  Story& store_bytes(pid_t pid, std::vector<std::uint8_t> bytes) {
    auto& e = add(Kind::kStore, pid);
    e.address = kHeaderAddress;
    e.bytes = std::move(bytes);
    return *this;
  }
  // The header's fields in the OTEP's order, the timestamp last, then the naming call.
  Story& publish(std::uint64_t timestamp, std::uint64_t payload = kFirstPayload) {
    store([](auto& h) { std::copy(pc::kSignature.begin(), pc::kSignature.end(), h.signature.begin()); });
    store([](auto& h) { h.version = pc::kCurrentVersion; });
    store([](auto& h) { h.payload_size = payload_size(); });
    store([payload](auto& h) { h.payload = payload; });
    store([timestamp](auto& h) { h.published_at_ns = timestamp; });
    return name_mapping();
  }
  // The update steps: timestamp 0, the payload and its size, the new timestamp, the naming call.
  Story& update(std::uint64_t timestamp, std::uint64_t payload) {
    store([](auto& h) { h.published_at_ns = 0; });
    store([payload](auto& h) { h.payload = payload; });
    store([](auto& h) { h.payload_size = payload_size() + 1; });
    store([timestamp](auto& h) { h.published_at_ns = timestamp; });
    return name_mapping();
  }
  // prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, address, len, "OTEL_CTX") returned.
  Story& name_mapping(pid_t pid = kWriter, std::uint64_t address = kHeaderAddress) {
    return syscall(pid, SYS_prctl, {kPrSetVma, kPrSetVmaAnonName, address, kMappingSize, 0x55d0c0000100, 0});
  }
  Story& syscall(pid_t pid, long nr, std::array<std::uint64_t, 6> args, std::int64_t result = 0) {
    auto& e = add(Kind::kSyscall, pid);
    e.syscall = nr;
    e.args = args;
    e.result = result;
    return *this;
  }
  Story& fork(pid_t parent, bool child_has_mapping) {
    auto& e = add(Kind::kFork, parent);
    e.address = kHeaderAddress;
    e.child = kChild;
    e.child_has_mapping = child_has_mapping;
    if (child_has_mapping) e.child_mapping_name = kMemfdName;
    return *this;
  }
  // A process started before the mapping existed (the watch follows it: no address).
  Story& fork_before_mapping(pid_t parent) {
    add(Kind::kFork, parent).child = kChild;
    return *this;
  }
  // A vfork or posix_spawn child (system(), popen()): the parent's own address
  // space until it execs, so /proc shows the parent's mapping in it too.
  Story& spawn(pid_t parent) {
    auto& e = add(Kind::kFork, parent);
    e.address = kHeaderAddress;
    e.child = kChild;
    e.child_shares_memory = true;
    return *this;
  }
  // The writer exec'd: a new image, whose mapping (if any) starts from zeros.
  Story& exec() {
    add(Kind::kExec, kWriter);
    header_ = {};
    return *this;
  }
  Story& wait(std::chrono::milliseconds d) {
    now_ += d;
    return *this;
  }
  // The report of a watch that ended `after` the last step.
  MappingWatchReport ended(std::chrono::milliseconds after = 1000ms) const {
    MappingWatchReport r = report_;
    r.ended_at = now_ + after;
    r.ended_because = "the session ended";
    r.threads_followed = r.threads_armed = 1;
    r.watched_bytes = pc::kHeaderSize;
    for (const auto& e : r.events) {
      r.stores_seen += e.kind == Kind::kStore;
      r.syscalls_seen += e.kind == Kind::kSyscall;
    }
    return r;
  }
  std::size_t events() const { return report_.events.size(); }

 private:
  MappingWatchEvent& add(Kind kind, pid_t pid) {
    now_ += 1ms;
    auto& e = report_.events.emplace_back();
    e.kind = kind;
    e.at = now_;
    e.pid = e.tid = pid;
    return e;
  }
  pc::Header header_{};
  Clock::time_point now_ = Clock::time_point{} + 1h;
  MappingWatchReport report_;
};

// A conforming writer: published, then updated twice, each step named.
Story conforming_story() {
  return Story()
      .mapped()
      .publish(kPublishedAt)
      .wait(100ms)
      .update(kUpdatedAt, kSecondPayload)
      .wait(100ms)
      .update(kUpdatedAgainAt, kThirdPayload);
}

ReadTally reads(std::uint64_t consistent) {
  ReadTally r;
  r.attempts = r.consistent = consistent;
  r.timestamps_seen = consistent ? 3 : 0;
  r.window = 1500ms;
  return r;
}

// The watched session of a launched target: `story`'s watch, a snapshot of
// the published context when it opened and closed, and enough seqlock reads.
ContextFacts watched_facts(const Story& story, std::chrono::milliseconds watched_after_last_step = 1000ms) {
  ContextFacts f;
  f.session = kWatchedSession;
  f.judged_pid = kWriter;
  f.watch = story.ended(watched_after_last_step);
  f.first = snapshot(published(kPublishedAt));
  f.last = snapshot(published(kUpdatedAgainAt, kThirdPayload));
  f.reads = reads(kMinimumConsistentReads);
  return f;
}

// The read session: no watch, only reads.
ContextFacts read_facts(bool launched = true) {
  ContextFacts f;
  f.session = kReadSession;
  f.launched = launched;
  f.judged_pid = kWriter;
  f.watch_unavailable = "this session only reads";
  f.first = snapshot(published(kPublishedAt));
  f.last = snapshot(published(kUpdatedAgainAt, kThirdPayload));
  f.reads = reads(1000);
  return f;
}

void add(SessionSet& set, const ContextFacts& f) {
  SessionEvidence e;
  e.name = f.session;
  e.launched = f.launched;
  e.protocol = std::make_shared<ContextFacts>(f);
  set.add(std::move(e));
}

using Build = std::function<void(SessionSet&)>;

// The watched session of `story` (then changed by `change`), beside a read session.
Build watched(Story story, std::function<void(ContextFacts&)> change = {}, std::chrono::milliseconds after = 1000ms) {
  return [story = std::move(story), change = std::move(change), after](SessionSet& set) {
    auto f = watched_facts(story, after);
    if (change) change(f);
    add(set, f);
    add(set, read_facts());
  };
}

// Only the read session, as in attach mode.
Build attached(std::function<void(ContextFacts&)> change = {}) {
  return [change = std::move(change)](SessionSet& set) {
    auto f = read_facts(false);
    if (change) change(f);
    set.attach_mode = true;
    add(set, f);
  };
}

// ---- the table ----------------------------------------------------------


// ---- PCTX-07: on publish, the timestamp is written last -------------------

class PublishOrderJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(PublishOrderJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, PublishOrderJudge,
    testing::Values(
        JudgeCase{"TimestampLast", "PCTX-07", watched(conforming_story()), Outcome::Met, "set the timestamp last", "", 1},
        JudgeCase{"TimestampFirst", "PCTX-07",
                  watched(Story()
                              .mapped()
                              .store([](auto& h) { h.published_at_ns = kPublishedAt; })
                              .store([](auto& h) { h = published(kPublishedAt); })
                              .name_mapping()),
                  Outcome::Violated, "the timestamp was set before the rest of the header was written"},
        JudgeCase{"PayloadPointerAfterTimestamp", "PCTX-07",
                  watched(Story()
                              .mapped()
                              .store([](auto& h) { h = published(kPublishedAt, 0); })
                              .store([](auto& h) { h.payload = kFirstPayload; })
                              .name_mapping()),
                  Outcome::Violated, "set before the rest of the header"},
        // A complete header whose signature is wrong was still written in
        // order: the signature is PCTX-02's.
        JudgeCase{"WrongSignatureWrittenFirst", "PCTX-07",
                  watched(Story()
                              .mapped()
                              .store([](auto& h) {
                                h = published(0);
                                h.signature[4] = '-';
                              })
                              .store([](auto& h) { h.published_at_ns = kPublishedAt; })),
                  Outcome::Met, "set the timestamp last"},
        // Fields changed under a set timestamp after the first publication
        // are an update's fault (PCTX-08), not the publication's.
        JudgeCase{"ChangedWhileSetAfterPublication", "PCTX-07",
                  watched(Story().mapped().publish(kPublishedAt).store([](auto& h) { h.payload = kSecondPayload; })),
                  Outcome::Met, "set the timestamp last"},
        JudgeCase{"AlreadyPublishedWhenArmed", "PCTX-07",
                  watched(Story().mapped_published(kPublishedAt).update(kUpdatedAt, kSecondPayload)),
                  Outcome::NotApplicable, "already had a timestamp when the watch could arm it"},
        JudgeCase{"MappingNeverSeen", "PCTX-07", watched(Story().name_mapping()), Outcome::NotApplicable,
                  "the watch never saw the mapping appear"},
        JudgeCase{"NeverPublishedWhileWatched", "PCTX-07",
                  watched(Story().mapped().store([](auto& h) { h = published(0); })), Outcome::NotApplicable,
                  "the timestamp was never set while watched"},
        JudgeCase{"NoWatch", "PCTX-07",
                  watched(conforming_story(),
                          [](auto& f) {
                            f.watch.reset();
                            f.watch_unavailable = "hardware watchpoints are implemented for x86-64 hosts only";
                          }),
                  Outcome::NotApplicable, "no mapping watch: hardware watchpoints"},
        JudgeCase{"ContextNotFound", "PCTX-07",
                  watched(Story(), [](auto& f) { f.not_found = make_error("no mapping named [anon:OTEL_CTX] appeared"); }),
                  Outcome::NotApplicable, "no process context was found"},
        JudgeCase{"AttachModeHasNoWatchedSession", "PCTX-07", attached(), Outcome::NotApplicable,
                  "needs the watched session"},
        // What the image before an exec did is not the new image's story.
        JudgeCase{"ExecStartsAfresh", "PCTX-07",
                  watched(Story()
                              .mapped()
                              .store([](auto& h) { h.published_at_ns = kPublishedAt; })
                              .exec()
                              .mapped()
                              .publish(kUpdatedAt)),
                  Outcome::Met, "set the timestamp last"},
        JudgeCase{"OtherProcessIgnored", "PCTX-07",
                  watched(Story()
                              .mapped()
                              .store_in(kStranger, [] {
                                pc::Header h;
                                h.published_at_ns = kPublishedAt;
                                return h;
                              }())
                              .publish(kPublishedAt)),
                  Outcome::Met, "set the timestamp last"}),
    case_name);

// ---- PCTX-08 and PCTX-09: updates zero the timestamp, then move it forward --

class UpdateJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(UpdateJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, UpdateJudge,
    testing::Values(
        JudgeCase{"ZeroedBeforeEachUpdate", "PCTX-08", watched(conforming_story()), Outcome::Met, "2 updates each zeroed", "", 2},
        JudgeCase{"PayloadChangedUnderOldTimestamp", "PCTX-08",
                  watched(Story()
                              .mapped()
                              .publish(kPublishedAt)
                              .store([](auto& h) { h.payload = kSecondPayload; })
                              .store([](auto& h) { h.payload_size += 1; })
                              .wait(300ms)
                              .store([](auto& h) { h.published_at_ns = kUpdatedAt; })
                              .name_mapping()),
                  Outcome::Violated, "payload changed while the timestamp was still set"},
        JudgeCase{"TimestampNotThroughZero", "PCTX-08",
                  watched(Story().mapped().publish(kPublishedAt).store([](auto& h) { h.published_at_ns = kUpdatedAt; })),
                  Outcome::Violated, "without passing through 0"},
        JudgeCase{"NoUpdate", "PCTX-08", watched(Story().mapped().publish(kPublishedAt)), Outcome::NotApplicable,
                  "did not update its context while watched"},
        JudgeCase{"NoCompletePublication", "PCTX-08", watched(Story().mapped().store([](auto& h) { h = published(0); })),
                  Outcome::NotApplicable, "no complete publication was watched"},
        // Changes under the timestamp before the first complete publication
        // are the publication's fault (PCTX-07): not counted as an update.
        JudgeCase{"ChangedWhileSetBeforeFirstPublication", "PCTX-08",
                  watched(Story()
                              .mapped()
                              .store([](auto& h) { h.published_at_ns = kPublishedAt; })
                              .store([](auto& h) { h = published(kPublishedAt); })
                              .update(kUpdatedAt, kSecondPayload)),
                  Outcome::NotApplicable, "did not update its context while watched"},
        JudgeCase{"ChildStoresIgnored", "PCTX-08",
                  watched(conforming_story().store_in(kChild, published(kUpdatedAgainAt, kFirstPayload))), Outcome::Met,
                  "2 updates each zeroed"},
        JudgeCase{"LaterTimestamps", "PCTX-09", watched(conforming_story()), Outcome::Met, "2 updates each set a timestamp later", "", 2},
        JudgeCase{"TimestampReused", "PCTX-09",
                  watched(Story().mapped().publish(kPublishedAt).update(kPublishedAt, kSecondPayload)), Outcome::Violated,
                  "the value it had before the update"},
        JudgeCase{"TimestampBackwards", "PCTX-09",
                  watched(Story().mapped().publish(kUpdatedAt).update(kPublishedAt, kSecondPayload)), Outcome::Violated,
                  "earlier than the 3000000000 before it"},
        JudgeCase{"NoUpdateToCompare", "PCTX-09", watched(Story().mapped().publish(kPublishedAt)), Outcome::NotApplicable,
                  "did not update its context while watched"},
        // The timestamps of the image before an exec are not the new image's.
        JudgeCase{"ExecResetsTheTimestamps", "PCTX-09",
                  watched(Story()
                              .mapped()
                              .publish(kUpdatedAgainAt)
                              .exec()
                              .mapped()
                              .publish(kPublishedAt)
                              .update(kUpdatedAt, kSecondPayload)),
                  Outcome::Met, "1 updates each set a timestamp later", "", 1},
        JudgeCase{"ChildTimestampsIgnored", "PCTX-09",
                  watched(conforming_story().store_in(kChild, published(kPublishedAt, kSecondPayload))), Outcome::Met,
                  "2 updates each set a timestamp later"},
        JudgeCase{"NoWatchNoUpdates", "PCTX-09", attached(), Outcome::NotApplicable, "needs the watched session"}),
    case_name);

// ---- PCTX-10: no torn read ------------------------------------------------

ReadTally torn_tally() {
  ReadTally r = reads(400);
  r.torn = 3;
  TornRead t;
  t.timestamp = kPublishedAt;
  t.first = {0x0a, 0x1c, 0x0a, 0x1a};
  t.second = {0x0a, 0x1c, 0x0a, 0x1b};
  t.first_size = t.second_size = payload_size();
  t.first_difference = 3;
  r.torn_reads.push_back(t);
  return r;
}

class TornReadJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(TornReadJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, TornReadJudge,
    testing::Values(
        JudgeCase{"ManyReadsNoneTorn", "PCTX-10",
                  watched(conforming_story(), [](auto& f) { f.reads = reads(30); }), Outcome::Met, "none torn", "", 1030},
        JudgeCase{"TornInTheReadSession", "PCTX-10",
                  [](SessionSet& set) {
                    add(set, watched_facts(conforming_story()));
                    auto read = read_facts();
                    read.reads = torn_tally();
                    add(set, read);
                  },
                  Outcome::Violated, "3 consistent reads (timestamp unchanged around the copy) returned a payload other"},
        // Neither session alone has enough reads; together they do.
        JudgeCase{"ReadsAddUpAcrossSessions", "PCTX-10",
                  [](SessionSet& set) {
                    auto watched = watched_facts(conforming_story());
                    watched.reads = reads(12);
                    auto read = read_facts();
                    read.reads = reads(12);
                    add(set, watched);
                    add(set, read);
                  },
                  Outcome::Met, "24 consistent reads of 24", "", 24},
        JudgeCase{"TooFewReadsInAll", "PCTX-10",
                  [](SessionSet& set) {
                    auto watched = watched_facts(conforming_story());
                    watched.reads = reads(2);
                    auto read = read_facts();
                    read.reads = reads(3);
                    add(set, watched);
                    add(set, read);
                  },
                  Outcome::KitError, "fewer than the 20 a pass needs"},
        JudgeCase{"NoReadAtAll", "PCTX-10", attached([](auto& f) { f.reads = {}; }), Outcome::KitError,
                  "inconclusive: 0 consistent reads of 0"},
        // Nothing published: nothing read, and nothing inconclusive about it (PCTX-01 says why).
        JudgeCase{"NoContextFound", "PCTX-10",
                  attached([](auto& f) {
                    f.reads = {};
                    f.not_found = make_error("no mapping named /memfd:OTEL_CTX appeared");
                  }),
                  Outcome::NotApplicable, "no process context was found: no mapping named"},
        JudgeCase{"AttachModeReads", "PCTX-10", attached(), Outcome::Met, "read: 1000 reads in 1500 ms", "", 1000}),
    case_name);

// ---- PCTX-11: MADV_DONTFORK ----------------------------------------------

class ForkJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(ForkJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, ForkJudge,
    testing::Values(
        JudgeCase{"DontforkAndChildWithout", "PCTX-11", watched(conforming_story().wait(200ms).fork(kWriter, false)),
                  Outcome::Met, "1 forks seen, no child inherited it", "", 2},
        JudgeCase{"DontforkNoFork", "PCTX-11", watched(conforming_story()), Outcome::Met, "no fork seen", "", 1},
        JudgeCase{"ChildInherited", "PCTX-11", watched(conforming_story().fork(kWriter, true)), Outcome::Violated,
                  "inherited the mapping /memfd:OTEL_CTX"},
        // The child's inheritance is the stronger evidence: it stands even
        // when smaps could not be read.
        JudgeCase{"ChildInheritedFlagUnknown", "PCTX-11",
                  watched(conforming_story().fork(kWriter, true),
                          [](auto& f) { f.last->mappings.front().mapping.dont_fork.reset(); }),
                  Outcome::Violated, "inherited the mapping"},
        JudgeCase{"NoDcFlag", "PCTX-11", watched(conforming_story(), [](auto& f) { f.last->mappings.front().mapping.dont_fork = false; }),
                  Outcome::Violated, "is not marked MADV_DONTFORK"},
        JudgeCase{"FlagUnknown", "PCTX-11",
                  watched(conforming_story(), [](auto& f) { f.last->mappings.front().mapping.dont_fork.reset(); }),
                  Outcome::NotApplicable, "smaps did not show the mapping's VmFlags"},
        // qemu-user ignores madvise: neither the flag nor a child says what the guest asked for.
        JudgeCase{"UnderQemuUser", "PCTX-11",
                  watched(conforming_story().fork(kWriter, true),
                          [](auto& f) {
                            f.under_qemu_user = true;
                            f.last->mappings.front().mapping.dont_fork = false;
                          }),
                  Outcome::NotApplicable, "qemu-user, which ignores madvise(MADV_DONTFORK)"},
        // Neither can inherit anything: no evidence either way.
        JudgeCase{"ForkBeforeTheMapping", "PCTX-11", watched(conforming_story().fork_before_mapping(kWriter)), Outcome::Met,
                  "no fork seen", "", 1},
        JudgeCase{"SpawnInTheParentsMemory", "PCTX-11", watched(conforming_story().spawn(kWriter)), Outcome::Met, "no fork seen",
                  "", 1},
        JudgeCase{"ForkOfAnotherProcess", "PCTX-11", watched(conforming_story().fork(kStranger, true)), Outcome::Met,
                  "no fork seen"},
        JudgeCase{"NotFound", "PCTX-11",
                  watched(Story(), [](auto& f) { f.not_found = make_error("no mapping named /memfd:OTEL_CTX appeared"); }),
                  Outcome::NotApplicable, "no process context was found"},
        JudgeCase{"NoSnapshot", "PCTX-11",
                  watched(conforming_story(),
                          [](auto& f) {
                            f.first.reset();
                            f.last.reset();
                          }),
                  Outcome::NotApplicable, "no snapshot of the mapping was taken"},
        // The flag of the last look counts: the first may predate the madvise.
        JudgeCase{"LastLookCounts", "PCTX-11",
                  watched(conforming_story(), [](auto& f) { f.first->mappings.front().mapping.dont_fork = false; }),
                  Outcome::Met, "carries \"dc\""},
        JudgeCase{"AttachModeFlagOnly", "PCTX-11", attached(), Outcome::Met, "no fork seen", "", 1}),
    case_name);

// ---- PCTX-13 and PCTX-14: the naming prctl --------------------------------

class NamingJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(NamingJudge, Judges) { check(GetParam()); }

// A complete publication without the naming call (the timestamp's store is the last step).
Story published_unnamed() {
  return Story()
      .mapped()
      .store([](auto& h) { h = published(0); })
      .store([](auto& h) { h.published_at_ns = kPublishedAt; });
}

void under_qemu_user(ContextFacts& f) { f.under_qemu_user = true; }

INSTANTIATE_TEST_SUITE_P(
    Cases, NamingJudge,
    testing::Values(
        JudgeCase{"NamedAfterPublication", "PCTX-13", watched(conforming_story()), Outcome::Met,
                  "named the mapping after the timestamp was set (1 calls", "", 1},
        JudgeCase{"NamedBeforeTimestampOnly", "PCTX-13",
                  watched(Story()
                              .mapped()
                              .store([](auto& h) { h = published(0); })
                              .name_mapping()
                              .store([](auto& h) { h.published_at_ns = kPublishedAt; })),
                  Outcome::Violated, "named by prctl before its timestamp was set, and not after"},
        JudgeCase{"NeverNamed", "PCTX-13", watched(published_unnamed(), {}, 600ms), Outcome::Violated,
                  "no prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME) call named the mapping after its publication (600 ms"},
        JudgeCase{"WatchEndedRightAfterPublication", "PCTX-13", watched(published_unnamed(), {}, 20ms),
                  Outcome::NotApplicable, "the watch ended before the publication's naming call could follow it"},
        // The no-prctl-on-publish writer: updates name, the publication did not.
        JudgeCase{"OnlyUpdatesNamed", "PCTX-13", watched(published_unnamed().update(kUpdatedAt, kSecondPayload)),
                  Outcome::Violated, "no prctl"},
        JudgeCase{"AnotherAddressNamed", "PCTX-13",
                  watched(published_unnamed().name_mapping(kWriter, kHeaderAddress + kMappingSize)), Outcome::Violated,
                  "no prctl"},
        JudgeCase{"NamedByAnotherProcess", "PCTX-13", watched(published_unnamed().name_mapping(kStranger)),
                  Outcome::Violated, "no prctl"},
        JudgeCase{"OtherPrctlOption", "PCTX-13",
                  watched(published_unnamed().syscall(kWriter, SYS_prctl, {15 /* PR_SET_NAME */, kHeaderAddress})),
                  Outcome::Violated, "no prctl"},
        JudgeCase{"NamingThatFailedStillCounts", "PCTX-13",
                  watched(published_unnamed().syscall(kWriter, SYS_prctl,
                                                      {kPrSetVma, kPrSetVmaAnonName, kHeaderAddress, kMappingSize, 1}, -22)),
                  Outcome::Met, "named the mapping after the timestamp was set", "", 1},
        JudgeCase{"ArmedAfterPublication", "PCTX-13", watched(Story().mapped_published(kPublishedAt).name_mapping()),
                  Outcome::NotApplicable, "the publication was not watched from its start"},
        JudgeCase{"NoWatch", "PCTX-13", watched(conforming_story(), [](auto& f) { f.watch.reset(); }), Outcome::NotApplicable,
                  "no mapping watch: not run"},
        // qemu-user 7.2 answers a guest's prctl(PR_SET_VMA) itself: no call reaches the host to be seen.
        JudgeCase{"UnderQemuUserNoCallReachedTheHost", "PCTX-13", watched(published_unnamed(), under_qemu_user, 600ms),
                  Outcome::NotApplicable, "qemu-user, which does not pass prctl(PR_SET_VMA) on to the host"},
        // A qemu that passes the call on shows it: judged as natively.
        JudgeCase{"UnderQemuUserCallsSeen", "PCTX-13", watched(conforming_story(), under_qemu_user), Outcome::Met,
                  "named the mapping after the timestamp was set", "", 1},
        JudgeCase{"EveryUpdateNamed", "PCTX-14", watched(conforming_story()), Outcome::Met,
                  "2 updates each re-issued the naming prctl after the new timestamp", "", 2},
        JudgeCase{"UpdateNotNamed", "PCTX-14",
                  watched(Story()
                              .mapped()
                              .publish(kPublishedAt)
                              .update(kUpdatedAt, kSecondPayload)
                              .store([](auto& h) { h.published_at_ns = 0; })
                              .store([](auto& h) { h.published_at_ns = kUpdatedAgainAt; })
                              .name_mapping()
                              .store([](auto& h) { h.published_at_ns = 0; })
                              .store([](auto& h) { h.published_at_ns = kUpdatedAgainAt + 1; })
                              .store([](auto& h) { h.published_at_ns = 0; })
                              .store([](auto& h) { h.published_at_ns = kUpdatedAgainAt + 2; })
                              .name_mapping()),
                  Outcome::Violated, "an update (timestamp 4000000001) was not followed by a prctl naming call"},
        // Named while the timestamp was 0, not after the new one.
        JudgeCase{"NamedBeforeTheNewTimestamp", "PCTX-14",
                  watched(Story()
                              .mapped()
                              .publish(kPublishedAt)
                              .store([](auto& h) { h.published_at_ns = 0; })
                              .name_mapping()
                              .store([](auto& h) { h.published_at_ns = kUpdatedAt; })
                              .wait(300ms)
                              .update(kUpdatedAgainAt, kSecondPayload)),
                  Outcome::Violated, "an update (timestamp 3000000000) was not followed"},
        JudgeCase{"LastUpdateNeverNamed", "PCTX-14",
                  watched(Story().mapped().publish(kPublishedAt).store([](auto& h) { h.published_at_ns = 0; }).store(
                              [](auto& h) { h.published_at_ns = kUpdatedAt; }),
                          {}, 600ms),
                  Outcome::Violated, "an update (timestamp 3000000000) was not followed"},
        JudgeCase{"LastUpdateCutOff", "PCTX-14",
                  watched(conforming_story().store([](auto& h) { h.published_at_ns = 0; }).store([](auto& h) {
                    h.published_at_ns = kUpdatedAgainAt + 1;
                  }),
                          {}, 20ms),
                  Outcome::Met, "(1 more ended with the watch)", "", 2},
        // Past MappingWatchReport::kMaxKeptEvents the watch went on, unrecorded:
        // the last kept update's naming call may be among the dropped events.
        JudgeCase{"LastKeptEventIsAnUpdate", "PCTX-14",
                  watched(conforming_story().store([](auto& h) { h.published_at_ns = 0; }).store([](auto& h) {
                    h.published_at_ns = kUpdatedAgainAt + 1;
                  }),
                          [](auto& f) { f.watch->events_dropped = 4000; }),
                  Outcome::Met, "(1 more ended with the watch)", "", 2},
        JudgeCase{"LastUpdateUnnamedNothingDropped", "PCTX-14",
                  watched(conforming_story().store([](auto& h) { h.published_at_ns = 0; }).store([](auto& h) {
                    h.published_at_ns = kUpdatedAgainAt + 1;
                  })),
                  Outcome::Violated, "an update (timestamp 4000000001) was not followed"},
        JudgeCase{"OnlyUpdateCutOff", "PCTX-14",
                  watched(Story().mapped().publish(kPublishedAt).store([](auto& h) { h.published_at_ns = 0; }).store(
                              [](auto& h) { h.published_at_ns = kUpdatedAt; }),
                          {}, 20ms),
                  Outcome::NotApplicable, "the watch ended before the only update's naming call could follow it"},
        JudgeCase{"UnderQemuUserNoUpdateCallReachedTheHost", "PCTX-14",
                  watched(published_unnamed().store([](auto& h) { h.published_at_ns = 0; }).store([](auto& h) {
                    h.published_at_ns = kUpdatedAt;
                  }),
                          under_qemu_user),
                  Outcome::NotApplicable, "qemu-user, which does not pass prctl(PR_SET_VMA) on to the host"},
        JudgeCase{"UnderQemuUserUpdateUnnamed", "PCTX-14",
                  watched(Story().mapped().publish(kPublishedAt).store([](auto& h) { h.published_at_ns = 0; }).store(
                              [](auto& h) { h.published_at_ns = kUpdatedAt; }),
                          under_qemu_user, 600ms),
                  Outcome::Violated, "an update (timestamp 3000000000) was not followed"},
        JudgeCase{"NoUpdate", "PCTX-14", watched(Story().mapped().publish(kPublishedAt)), Outcome::NotApplicable,
                  "the target did not update its context while watched"},
        JudgeCase{"AttachMode", "PCTX-14", attached(), Outcome::NotApplicable, "needs the watched session"}),
    case_name);

// ---- the mapping probe: the worst of every look --------------------------

pc::Header with_version(std::uint32_t version) {
  auto h = published(kPublishedAt);
  h.version = version;
  return h;
}

class MappingLooksJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(MappingLooksJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, MappingLooksJudge,
    testing::Values(
        // Four looks (two sessions, opened and closed), each one met.
        JudgeCase{"EveryLookMet", "PCTX-02", watched(conforming_story()), Outcome::Met, "signature \"OTEL_CTX\"", "", 4},
        JudgeCase{"LastLookWorse", "PCTX-03",
                  watched(conforming_story(), [](auto& f) { f.last = snapshot(with_version(3)); }), Outcome::Violated,
                  "watched session, last look: version 3 is not one the OTEP defines"},
        JudgeCase{"FirstLookWorse", "PCTX-03",
                  watched(conforming_story(), [](auto& f) { f.first = snapshot(with_version(3)); }), Outcome::Violated,
                  "watched session, first look: version 3"},
        // A development version is a warning, and stands over the looks that met the rule.
        JudgeCase{"ToleratedOverMet", "PCTX-03",
                  watched(conforming_story(), [](auto& f) { f.last = snapshot(with_version(1)); }), Outcome::Tolerated,
                  "last look: version 1 is for development"},
        JudgeCase{"ViolatedOverTolerated", "PCTX-03",
                  watched(conforming_story(),
                          [](auto& f) {
                            f.first = snapshot(with_version(1));
                            f.last = snapshot(with_version(3));
                          }),
                  Outcome::Violated, "version 3"},
        JudgeCase{"NotFoundInOneSession", "PCTX-01",
                  [](SessionSet& set) {
                    auto watched = watched_facts(conforming_story());
                    watched.not_found = make_error("no mapping named /memfd:OTEL_CTX appeared in 1 processes");
                    add(set, watched);
                    add(set, read_facts());
                  },
                  Outcome::Violated, "watched session: no mapping named"},
        // Nothing published at all judges nothing (issue 25: the run's gate errs on it)...
        JudgeCase{"NothingPublishedAnywhere", "PCTX-01",
                  [](SessionSet& set) {
                    for (auto facts : {watched_facts(conforming_story()), read_facts()}) {
                      facts.not_found = make_error("no mapping named /memfd:OTEL_CTX appeared in 1 processes");
                      facts.nothing_published = true;
                      add(set, facts);
                    }
                  },
                  Outcome::NotApplicable, "published nothing: watched session: no mapping named"},
        // ...but beside a session that found it, a session that saw nothing cannot be told from a lost launch.
        JudgeCase{"NothingPublishedInOneSessionOnly", "PCTX-01",
                  [](SessionSet& set) {
                    auto watched = watched_facts(conforming_story());
                    watched.not_found = make_error("no mapping named /memfd:OTEL_CTX appeared in 1 processes");
                    watched.nothing_published = true;
                    add(set, watched);
                    add(set, read_facts());
                  },
                  Outcome::KitError, "published in another session, nothing in this one: watched session"},
        JudgeCase{"OnlyFirstLook", "PCTX-18", attached([](auto& f) { f.last.reset(); }), Outcome::Met, "payload_size", "", 1},
        JudgeCase{"NoLookAtAll", "PCTX-17",
                  attached([](auto& f) {
                    f.first.reset();
                    f.last.reset();
                  }),
                  Outcome::NotApplicable, "no look at the context judged it"},
        JudgeCase{"NoSession", "PCTX-12", [](SessionSet&) {}, Outcome::NotApplicable, "no session of this suite ran"}),
    case_name);

TEST(MappingLooksProbe, LeavesForkRuleToTheForkProbe) {
  const auto* probe = conform::probe_for("PCTX-01");
  ASSERT_NE(probe, nullptr);
  const auto ids = probe->requirements();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), "PCTX-11"), 0);
  ASSERT_NE(conform::probe_for("PCTX-11"), nullptr);
  EXPECT_EQ(conform::probe_for("PCTX-11")->name(), "fork");
}

// ---- header_history --------------------------------------------------------

TEST(HeaderHistory, ConformingWriter) {
  const Story story = conforming_story();
  const auto h = header_history(story.ended(), kWriter);
  ASSERT_TRUE(h.address.has_value());
  EXPECT_EQ(*h.address, kHeaderAddress);
  EXPECT_EQ(h.mapping_name, kMemfdName);
  EXPECT_TRUE(h.armed_before_publication);
  EXPECT_EQ(h.stores, 5u + 4u + 4u);
  EXPECT_EQ(h.naming_calls, 3u);
  EXPECT_EQ(h.naming_calls_before_first_publication, 0u);
  EXPECT_TRUE(h.changes_while_set.empty());
  EXPECT_TRUE(h.unreadable_stores.empty());
  ASSERT_EQ(h.publications.size(), 3u);
  const std::uint64_t timestamps[] = {kPublishedAt, kUpdatedAt, kUpdatedAgainAt};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& p = h.publications[i];
    EXPECT_EQ(p.header.published_at_ns, timestamps[i]);
    EXPECT_TRUE(p.complete()) << i;
    EXPECT_TRUE(p.from_zero) << i;
    EXPECT_EQ(p.naming_calls_after, 1u) << i;
    EXPECT_EQ(p.superseded, i < 2) << i;
    EXPECT_TRUE(p.settled()) << i;
    if (i == 0) EXPECT_FALSE(p.previous_timestamp.has_value());
    else EXPECT_EQ(p.previous_timestamp, timestamps[i - 1]) << i;
  }
  // The last one was watched for the second the watch went on after it, plus its naming call.
  EXPECT_EQ(h.publications.back().watched_after, 1001ms);
}

TEST(HeaderHistory, NamesTheFieldsChangedWhileSet) {
  const Story story = Story().mapped().publish(kPublishedAt).store([](auto& h) {
    h.payload = kSecondPayload;
    h.payload_size += 5;
  });
  const auto h = header_history(story.ended(), kWriter);
  ASSERT_EQ(h.changes_while_set.size(), 1u);
  const auto& c = h.changes_while_set.front();
  EXPECT_EQ(c.event, story.events() - 1);
  EXPECT_EQ(c.fields, (std::vector<std::string>{"payload_size", "payload"}));
  EXPECT_EQ(c.before.payload, kFirstPayload);
  EXPECT_EQ(c.after.payload, kSecondPayload);
  EXPECT_EQ(h.publications.size(), 1u);
}

TEST(HeaderHistory, UpdateWithoutZeroIsAPublicationNotFromZero) {
  const Story story = Story().mapped().publish(kPublishedAt).store([](auto& h) { h.published_at_ns = kUpdatedAt; });
  const auto h = header_history(story.ended(), kWriter);
  ASSERT_EQ(h.publications.size(), 2u);
  EXPECT_TRUE(h.publications[0].superseded);
  EXPECT_FALSE(h.publications[1].from_zero);
  EXPECT_EQ(h.publications[1].previous_timestamp, kPublishedAt);
  EXPECT_TRUE(h.changes_while_set.empty()) << "only the timestamp changed";
}

TEST(HeaderHistory, NamingGraceIsHalfASecond) {
  // The naming call's grace runs from the timestamp's store to the watch's end.
  for (auto [after, settled] : {std::pair{499ms, false}, std::pair{500ms, true}}) {
    const auto h = header_history(published_unnamed().ended(after), kWriter);
    ASSERT_EQ(h.publications.size(), 1u);
    EXPECT_EQ(h.publications.front().watched_after, after);  // the timestamp's store is the story's last step
    EXPECT_EQ(h.publications.front().settled(), settled) << after.count();
  }
}

TEST(HeaderHistory, DroppedEventsEndTheStoryAtTheLastKeptOne) {
  auto report = published_unnamed().ended(1000ms);
  EXPECT_TRUE(header_history(report, kWriter).publications.front().settled());
  report.events_dropped = 1;
  const auto h = header_history(report, kWriter);
  EXPECT_EQ(h.publications.front().watched_after, 0ns);
  EXPECT_FALSE(h.publications.front().settled());
}

TEST(HeaderHistory, ShortStoreIsUnreadable) {
  Story story = Story().mapped();
  story.store_bytes(kWriter, std::vector<std::uint8_t>(pc::kHeaderSize / 2));
  const auto h = header_history(story.publish(kPublishedAt).ended(), kWriter);
  EXPECT_EQ(h.unreadable_stores, (std::vector<std::size_t>{1}));
  EXPECT_EQ(h.stores, 6u);
  EXPECT_EQ(h.publications.size(), 1u);
}

TEST(HeaderHistory, NothingCountsBeforeTheMappingAppears) {
  Story story;
  story.name_mapping().store_bytes(kWriter, header_bytes(published(kPublishedAt)));
  const auto h = header_history(story.mapped().publish(kUpdatedAt).ended(), kWriter);
  EXPECT_EQ(h.stores, 5u);
  EXPECT_EQ(h.naming_calls, 1u);
  ASSERT_EQ(h.publications.size(), 1u);
  EXPECT_EQ(h.publications.front().header.published_at_ns, kUpdatedAt);
}

TEST(HeaderHistory, NamingCallsBeforeThePublication) {
  const Story story = Story()
                          .mapped()
                          .name_mapping()
                          .store([](auto& h) { h = published(kPublishedAt); })
                          .store([](auto& h) { h.published_at_ns = 0; })
                          .name_mapping();  // while the timestamp is 0: after no publication
  const auto h = header_history(story.ended(), kWriter);
  EXPECT_EQ(h.naming_calls, 2u);
  EXPECT_EQ(h.naming_calls_before_first_publication, 1u);
  ASSERT_EQ(h.publications.size(), 1u);
  EXPECT_EQ(h.publications.front().naming_calls_after, 0u);
  EXPECT_TRUE(h.publications.front().superseded);
}

TEST(HeaderHistory, ExecForgetsTheImageBefore) {
  const auto h = header_history(conforming_story().exec().ended(), kWriter);
  EXPECT_FALSE(h.address.has_value());
  EXPECT_TRUE(h.publications.empty());
  EXPECT_EQ(h.stores, 0u);
  EXPECT_EQ(h.naming_calls, 0u);
}

TEST(HeaderHistory, OnlyTheJudgedProcess) {
  const Story story = conforming_story();
  EXPECT_EQ(header_history(story.ended(), kChild).publications.size(), 0u);
  EXPECT_FALSE(header_history(story.ended(), kChild).address.has_value());
  // A child's stores into its inherited copy leave the writer's story alone.
  const auto h = header_history(Story(conforming_story()).store_in(kChild, published(kPublishedAt, kSecondPayload)).ended(), kWriter);
  EXPECT_EQ(h.publications.size(), 3u);
  EXPECT_TRUE(h.changes_while_set.empty());
}

TEST(HeaderHistory, ArmedOnAPublishedHeader) {
  const auto h = header_history(Story().mapped_published(kPublishedAt).ended(), kWriter);
  EXPECT_FALSE(h.armed_before_publication);
  EXPECT_TRUE(h.publications.empty()) << "the timestamp did not change while watched";
}

TEST(HeaderHistory, CompleteNeedsEveryFieldWritten) {
  Publication p;
  p.header = published(kPublishedAt);
  EXPECT_TRUE(p.complete());
  for (auto clear : std::vector<std::function<void(pc::Header&)>>{
           [](auto& h) { h.signature = {}; }, [](auto& h) { h.version = 0; }, [](auto& h) { h.payload_size = 0; },
           [](auto& h) { h.payload = 0; }}) {
    p.header = published(kPublishedAt);
    clear(p.header);
    EXPECT_FALSE(p.complete()) << describe(p.header);
  }
}

TEST(HeaderHistory, DescribesAHeader) {
  EXPECT_EQ(describe(published(kPublishedAt)),
            "signature \"OTEL_CTX\", version 2, payload_size " + std::to_string(payload_size()) +
                ", published_at 2000000000, payload 0x55d0c0001000");
}

}  // namespace
}  // namespace tracecorr::otel_process_context
