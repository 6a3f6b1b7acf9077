// The host agent hands every sample a part took on for export
// (HostAgentOptions::observe): with the part's reading of its record (a link
// and attributes, or none) and the process's resource, `process.pid` with the
// resource of the process context publication the sample's timestamp names,
// never a guessed one. Samples no part took are not handed on.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "process_context_writer.hpp"
#include "tracecorr/host_agent.hpp"
#include "tracecorr/sampled_processes.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr {
namespace {

using namespace std::chrono_literals;

constexpr pid_t kNobodysPid = 0x3fffffff;

// Delivers its script once, at the first poll.
class ScriptedSampler final : public Sampler {
 public:
  explicit ScriptedSampler(std::vector<Sample> script) : script_(std::move(script)) {}
  std::string name() const override { return "scripted"; }
  Status track(pid_t, LayoutSlot, const RecordLayout&, PointerSite) override { return Ok{}; }
  Status track_process_context(pid_t, std::optional<std::uint64_t>) override { return Ok{}; }
  Status untrack(pid_t, LayoutSlot) override { return Ok{}; }
  Expected<std::size_t> poll(const Callback& callback, std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(std::min(timeout, 5ms));
    const std::size_t n = script_.size();
    for (const auto& s : script_) callback(s);
    script_.clear();
    return n;
  }
  SamplerCounters counters() const override { return {}; }

 private:
  std::vector<Sample> script_;
};

RecordContext::Link test_link() {
  RecordContext::Link link;
  for (std::size_t i = 0; i < link.trace_id.size(); ++i) link.trace_id[i] = static_cast<std::uint8_t>(0x11 + i);
  for (std::size_t i = 0; i < link.span_id.size(); ++i) link.span_id[i] = static_cast<std::uint8_t>(0x21 + i);
  return link;
}

// Holds one process, follows its context in the loop's resolver, and reads a
// record whose first byte is 1 as a span with one attribute.
class ObservedPart final : public AgentPart {
 public:
  ObservedPart(AgentRun run, pid_t pid, std::uint64_t header) : run_(std::move(run)), pid_(pid) {
    run_.contexts.watch(pid, header);
  }
  void retire_gone() override {}
  bool examine(pid_t pid, bool) override { return pid == pid_; }
  bool on_sample(const Sample& s) override { return s.pid == pid_ && s.slot == run_.slot; }
  RecordContext context_of(const Sample& s) override {
    RecordContext context;
    if (!s.record || s.record->empty() || (*s.record)[0] != 1) return context;
    context.link = test_link();
    context.trace_flags = 1;
    context.attributes = std::make_shared<const otlp::Attributes>(otlp::Attributes{{"http.route", "/checkout"}});
    return context;
  }
  std::size_t processes() const override { return 1; }
  std::size_t sampling() const override { return 1; }
  std::string live_text() const override { return "observed"; }
  void each_context(const std::function<void(pid_t, const FollowedContext&)>&) const override {}
  void summarize(nlohmann::json&) const override {}
  bool ever_held(pid_t pid) const override { return pid == pid_; }
  std::optional<std::string> nothing_readable(pid_t) const override { return std::nullopt; }
  std::string not_published() const override { return "observed"; }

 private:
  AgentRun run_;
  pid_t pid_;
};

struct Seen {
  pid_t pid = 0, tid = 0;
  std::uint64_t time_ns = 0;
  RecordContext context;
  otlp::Attributes resource;
};

Sample sample_of(pid_t pid, std::uint64_t time_ns, std::optional<std::uint64_t> published_at,
                 std::optional<std::uint8_t> first_byte) {
  Sample s;
  s.pid = pid;
  s.tid = pid + 1;
  s.time_ns = time_ns;
  s.context_published_at = published_at;
  if (first_byte) {
    const std::uint8_t bytes[4] = {*first_byte, 0, 0, 0};
    s.record = RecordBytes(bytes);
  } else {
    s.error = SampleError::RecordPointerNull;
  }
  return s;
}

TEST(HostAgentObserve, EverySampleAPartTookIsHandedOnWithItsContextAndResource) {
  test::ProcessContextWriter writer;
  std::uint64_t published_at = 0;
  const std::uint64_t header = writer.publish("checkout", &published_at);
  ASSERT_NE(header, 0u);
  const pid_t pid = writer.pid();
  ScriptedSampler sampler({sample_of(pid, 1000, published_at, 1),        // a span, its publication
                           sample_of(pid, 2000, 0, 1),                   // a span, the context mid-update
                           sample_of(pid, 3000, published_at + 7, 0),    // a record not valid, an unread publication
                           sample_of(pid, 4000, std::nullopt, std::nullopt),  // no record, no context read
                           sample_of(kNobodysPid, 5000, std::nullopt, 1)});   // no part's
  HostAgentOptions o;
  o.log = nullptr;
  o.pids = {pid};
  o.duration = 150ms;
  std::vector<Seen> seen;
  o.observe = [&](const AgentObservation& ob) {
    seen.push_back({ob.sample.pid, ob.sample.tid, ob.sample.time_ns, ob.context, ob.resource ? *ob.resource : otlp::Attributes{}});
  };
  HostAgent agent(o, sampler);
  auto run = agent.make_run();
  ASSERT_TRUE(run) << run.error().message();
  agent.add_part(std::make_unique<ObservedPart>(std::move(*run), pid, header));
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.run(stop));

  ASSERT_EQ(seen.size(), 4u) << "the sample of a process no part holds is not handed on";
  const otlp::Attributes pid_only{{"process.pid", otlp::AttributeValue(static_cast<std::int64_t>(pid))}};
  // A span, in the publication its timestamp names: link, flags, attributes, that publication's resource.
  EXPECT_EQ(seen[0].pid, pid);
  EXPECT_EQ(seen[0].tid, pid + 1);
  EXPECT_EQ(seen[0].time_ns, 1000u);
  ASSERT_TRUE(seen[0].context.link);
  EXPECT_EQ(*seen[0].context.link, test_link());
  EXPECT_EQ(seen[0].context.trace_flags, std::optional<std::uint8_t>(1));
  ASSERT_TRUE(seen[0].context.attributes);
  EXPECT_EQ(seen[0].context.attributes->at("http.route"), otlp::AttributeValue("/checkout"));
  ASSERT_TRUE(seen[0].resource.count("service.name")) << "the publication's resource";
  EXPECT_EQ(seen[0].resource.at("service.name"), otlp::AttributeValue("checkout"));
  EXPECT_EQ(seen[0].resource.at("process.pid"), otlp::AttributeValue(static_cast<std::int64_t>(pid)));
  // Mid-update: the span is kept, the resource is the pid alone (no publication guessed).
  ASSERT_TRUE(seen[1].context.link);
  EXPECT_EQ(seen[1].resource, pid_only);
  // A record that names no span, and no record at all: handed on without a link.
  EXPECT_FALSE(seen[2].context.link);
  EXPECT_FALSE(seen[2].context.attributes);
  EXPECT_EQ(seen[2].resource, pid_only) << "a publication never read is not guessed";
  EXPECT_FALSE(seen[3].context.link);
  EXPECT_EQ(seen[3].resource, pid_only);
  const auto summary = agent.summary();
  EXPECT_EQ(summary["totals"]["observations"], 4u) << summary["totals"];
  EXPECT_EQ(summary["totals"]["unknown_pid_samples"], 1u) << summary["totals"];
}

TEST(HostAgentObserve, NothingIsHandedOnOrCountedWithoutASink) {
  ScriptedSampler sampler({sample_of(kNobodysPid, 1000, std::nullopt, 1)});
  HostAgentOptions o;
  o.log = nullptr;
  o.duration = 50ms;
  HostAgent agent(o, sampler);
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.run(stop));
  EXPECT_FALSE(agent.summary()["totals"].contains("observations"));
}

}  // namespace
}  // namespace tracecorr
