// Both samplers read a tracked process's context header (OTEP 4719) with
// each sample, and the resolver maps the timestamp a sample carries to the
// publication it names: against the engine tests' writer
// (tests/unit/data/process_context_writer.c), whose burning thread publishes
// a test record and spins, while the test publishes, updates and holds the
// context mid-update at moments it chooses.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "process_context_writer.hpp"
#include "sampler_support.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/process_context_resolver.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr {
namespace {

using namespace std::chrono_literals;
using process_context::PublicationResolver;
using process_context::ResolutionKind;

// The first sample of `tid` that `wanted` accepts (bounded: a sampler that
// never delivers one fails the test, it never hangs it).
std::optional<Sample> sample_until(Sampler& sampler, pid_t tid, const std::function<bool(const Sample&)>& wanted) {
  std::optional<Sample> found;
  for (auto give_up = std::chrono::steady_clock::now() + 15s; !found && std::chrono::steady_clock::now() < give_up;) {
    auto n = sampler.poll(
        [&](const Sample& s) {
          if (!found && s.tid == tid && wanted(s)) found = s;
        },
        100ms);
    EXPECT_TRUE(n) << n.error().message();
    if (!n) break;
  }
  return found;
}

std::function<bool(const Sample&)> carrying(std::uint64_t published_at) {
  return [published_at](const Sample& s) { return s.context_published_at == published_at; };
}

std::string service_name(PublicationResolver& resolver, pid_t pid, std::uint64_t published_at) {
  auto r = resolver.resolve(pid, published_at);
  if (r.kind != ResolutionKind::Resolved) return "(" + std::string(to_string(r.kind)) + ")";
  return process_context::identity_of(*r.publication->payload).service_name.value_or("(none)");
}

class ContextSampling : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why_not;
    sampler_ = test::make_test_sampler(GetParam(), why_not);
    if (!sampler_) GTEST_SKIP() << why_not;
    header_ = writer_.publish("checkout", &first_);
    ASSERT_NE(header_, 0u) << "the writer did not publish: " << test::kProcessContextWriterPath;
    auto burner = writer_.burn();
    ASSERT_TRUE(burner);
    burner_ = *burner;
    ASSERT_TRUE(sampler_->track(writer_.pid(), test_support::test_record_layout(),
                                PointerSite::tls_offset(burner_.tls_offset)));
  }

  std::unique_ptr<Sampler> sampler_;
  test::ProcessContextWriter writer_;
  std::uint64_t header_ = 0, first_ = 0;
  test::ProcessContextWriter::Burner burner_;
};

TEST_P(ContextSampling, SamplesCarryTheTimestampThatResolvesToTheWritersResourceAcrossUpdates) {
  const pid_t pid = writer_.pid();
  auto untouched = sample_until(*sampler_, burner_.tid, [](const Sample&) { return true; });
  ASSERT_TRUE(untouched);
  EXPECT_FALSE(untouched->context_published_at) << "no context tracked yet";
  EXPECT_EQ(untouched->error, SampleError::Ok) << to_string(untouched->error);

  ASSERT_TRUE(sampler_->track_process_context(pid, header_));
  PublicationResolver resolver;
  resolver.watch(pid, header_);
  auto first = sample_until(*sampler_, burner_.tid, carrying(first_));
  ASSERT_TRUE(first) << "no sample carried the published timestamp " << first_;
  EXPECT_EQ(first->error, SampleError::Ok) << "the record is read as before";
  EXPECT_EQ(service_name(resolver, pid, first_), "checkout");

  const std::uint64_t second = writer_.update("payments");
  ASSERT_GT(second, first_);
  ASSERT_TRUE(sample_until(*sampler_, burner_.tid, carrying(second))) << "no sample after the update";
  EXPECT_EQ(service_name(resolver, pid, second), "payments");
  EXPECT_EQ(service_name(resolver, pid, first_), "checkout") << "the earlier publication stays resolvable";

  // Mid-update: the samplers say so, and no payload is read for it.
  ASSERT_TRUE(writer_.zero());
  ASSERT_TRUE(sample_until(*sampler_, burner_.tid, carrying(0))) << "no sample while the timestamp was 0";
  EXPECT_EQ(resolver.resolve(pid, 0).kind, ResolutionKind::BeingWritten);
  EXPECT_GE(sampler_->counters().context_being_written, 1u);
  const std::uint64_t third = writer_.restore();
  ASSERT_GT(third, second);
  ASSERT_TRUE(sample_until(*sampler_, burner_.tid, carrying(third)));
  EXPECT_EQ(service_name(resolver, pid, third), "payments");
  EXPECT_EQ(resolver.counters().payload_reads, 3u) << "one read per publication, none for timestamp 0";

  // Tracking the process again keeps its context; nullopt stops reading it.
  ASSERT_TRUE(sampler_->track(pid, test_support::test_record_layout(), PointerSite::tls_offset(burner_.tls_offset)));
  const std::uint64_t fourth = writer_.update("after-retrack");
  ASSERT_TRUE(sample_until(*sampler_, burner_.tid, carrying(fourth)));
  ASSERT_TRUE(sampler_->track_process_context(pid, std::nullopt));
  ASSERT_TRUE(sample_until(*sampler_, burner_.tid, [](const Sample& s) { return !s.context_published_at; }));
  EXPECT_EQ(sampler_->counters().context_unreadable, 0u);
}

TEST_P(ContextSampling, AHeaderThatIsNotAContextsGivesNoTimestamp) {
  // Eight bytes in: no signature there. Then an address nothing is mapped at.
  bool any_timestamp = false;
  for (std::uint64_t address : {header_ + 8, std::uint64_t{0x1000}}) {
    SCOPED_TRACE("header at " + std::to_string(address));
    ASSERT_TRUE(sampler_->track_process_context(writer_.pid(), address));
    const auto before = sampler_->counters().context_unreadable;
    auto s = sample_until(*sampler_, burner_.tid, [&](const Sample& x) {
      any_timestamp = any_timestamp || x.context_published_at.has_value();
      return sampler_->counters().context_unreadable > before;
    });
    ASSERT_TRUE(s) << "no sample counted the header unreadable";
  }
  EXPECT_FALSE(any_timestamp);
}

TEST_P(ContextSampling, OnlyATrackedProcessTakesAContext) {
  auto st = sampler_->track_process_context(writer_.pid() + 1000000, header_);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message().find("not tracked"), std::string::npos) << st.error().message();
  EXPECT_FALSE(sampler_->track_process_context(writer_.pid(), 0)) << "address 0 is no header";
  ASSERT_TRUE(sampler_->untrack(writer_.pid()));
  EXPECT_FALSE(sampler_->track_process_context(writer_.pid(), header_)) << "untrack() forgot it";
}

INSTANTIATE_TEST_SUITE_P(Samplers, ContextSampling, testing::Values("ptrace", "bpf"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tracecorr
