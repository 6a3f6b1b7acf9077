// Profiler-mode evidence built by hand, for the reader probes' tests of every
// package: stage members with the journals their writers would write, the
// samples a profiler reported for them, judged by one package's reader suite.
#pragma once

#ifdef TRACECORR_HAVE_PROFILES
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/profiler/run.hpp"

namespace tracecorr::profiler::testing {

inline constexpr std::uint64_t kSecond = 1'000'000'000;
inline constexpr std::uint64_t kT = 1'700'000'000 * kSecond;  // the journals' time 0

inline const ReaderSuite& reader_suite_of(std::string_view protocol) {
  for (const auto* s : reader_suites())
    if (s->protocol().id == protocol) return *s;
  throw std::runtime_error("no " + std::string(protocol) + " reader suite registered");
}

using Strings = std::map<std::string, std::string>;

class HandBuiltStage {
 public:
  explicit HandBuiltStage(std::string protocol) : protocol_(std::move(protocol)) {
    evidence.tolerance_ns = 20'000'000;
  }

  // A member "<protocol>/<name>" (its layout: `name`), pid `pid`, tid pid + 1.
  MemberEvidence& add(std::int64_t pid, const std::string& name, const std::string& journal,
                      bool must_not_be_read = false) {
    MemberEvidence m;
    m.member.name = protocol_ + "/" + name;
    m.member.protocol = protocol_;
    m.member.layout = name;
    m.member.must_not_be_read = must_not_be_read;
    m.pid = static_cast<pid_t>(pid);
    m.truth = stage::read_journal(journal, suite().journal_events());
    evidence.members.push_back(std::move(m));
    return evidence.members.back();
  }

  // A sample of member `pid`'s thread at `ms` after kT; with a link when
  // `trace` is set, its attributes and its resource (none when empty).
  void sample(std::int64_t pid, std::uint64_t ms, const char* trace = nullptr, const char* span = nullptr,
              const Strings& attributes = {}, const Strings& resource = {}) {
    profiles::ProfileSample s;
    s.time = profiles::SampleTime{kT + ms * 1'000'000, profiles::Clock::Unix};
    s.pid = pid;
    s.tid = pid + 1;
    if (trace) {
      profiles::SampleLink link;
      from_hex(trace, link.trace_id);
      from_hex(span, link.span_id);
      s.link = link;
    }
    s.attributes = attributes_of(attributes);
    if (!resource.empty()) s.resource = attributes_of(resource);
    evidence.samples.push_back(std::move(s));
  }

  std::map<std::string, conform::RequirementResult> judge() {
    attach_samples(evidence);
    std::map<std::string, conform::RequirementResult> by_id;
    for (auto& r : judge_readers(evidence, {&suite()}, {}, false)) by_id[r.id] = r;
    return by_id;
  }

  const ReaderSuite& suite() const { return reader_suite_of(protocol_); }

  ReaderEvidence evidence;

 private:
  static std::shared_ptr<otlp::Attributes> attributes_of(const Strings& values) {
    auto a = std::make_shared<otlp::Attributes>();
    for (const auto& [k, v] : values) a->emplace(k, otlp::AttributeValue(v));
    return a;
  }

  std::string protocol_;
};

}  // namespace tracecorr::profiler::testing
#endif
