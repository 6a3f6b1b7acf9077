// Samples' context timestamps to publications (process_context_resolver.hpp):
// the resolver against the engine tests' live writer, driven step by step,
// and against headers this test lays out in its own memory (payloads a
// writer would never publish); the tally a report shows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "process_context_writer.hpp"
#include "tracecorr/process_context_resolver.hpp"

namespace tracecorr::process_context {
namespace {

using Writer = test::ProcessContextWriter;

std::string service_name(const Resolution& r) {
  if (r.kind != ResolutionKind::Resolved) return "(" + std::string(to_string(r.kind)) + ")";
  return identity_of(*r.publication->payload).service_name.value_or("(none)");
}

TEST(PublicationResolver, ResolvesEachTimestampToItsPublicationReadingEachOnce) {
  Writer writer;
  std::uint64_t first = 0;
  const std::uint64_t header = writer.publish("checkout", &first);
  ASSERT_NE(header, 0u);
  PublicationResolver resolver;
  resolver.watch(writer.pid(), header);
  auto r = resolver.resolve(writer.pid(), first);
  EXPECT_EQ(service_name(r), "checkout");
  EXPECT_EQ(r.publication->published_at_ns, first);
  EXPECT_EQ(resolver.counters().payload_reads, 1u);
  // Known: answered from what was read, the payload not read again.
  EXPECT_EQ(resolver.resolve(writer.pid(), first).publication, r.publication);
  resolver.refresh(writer.pid());
  EXPECT_EQ(resolver.counters().payload_reads, 1u);
  EXPECT_EQ(resolver.counters().timestamp_reads, 2u);

  const std::uint64_t second = writer.update("payments");
  resolver.refresh_all();
  EXPECT_EQ(resolver.counters().payload_reads, 2u);
  EXPECT_EQ(service_name(resolver.resolve(writer.pid(), second)), "payments");
  EXPECT_EQ(service_name(resolver.resolve(writer.pid(), first)), "checkout");
  EXPECT_EQ(resolver.resolve(writer.pid(), 0).kind, ResolutionKind::BeingWritten);
  // Between two publications, no publication: missed, and nothing to read for it.
  EXPECT_EQ(resolver.resolve(writer.pid(), first + 1).kind, ResolutionKind::Missed);
  // Newer than any read: one more look at the header, which still says `second`.
  const auto looks = resolver.counters().timestamp_reads;
  EXPECT_EQ(resolver.resolve(writer.pid(), second + 1).kind, ResolutionKind::Missed);
  EXPECT_EQ(resolver.counters().timestamp_reads, looks + 1);
  EXPECT_EQ(resolver.counters().payload_reads, 2u);
}

TEST(PublicationResolver, APublicationReplacedBeforeAnyLookIsMissed) {
  Writer writer;
  std::uint64_t first = 0;
  const std::uint64_t header = writer.publish("checkout", &first);
  PublicationResolver resolver;
  resolver.watch(writer.pid(), header);
  const std::uint64_t second = writer.update("payments");
  // Its payload is gone: only the current publication can be read.
  EXPECT_EQ(resolver.resolve(writer.pid(), first).kind, ResolutionKind::Missed);
  EXPECT_EQ(service_name(resolver.resolve(writer.pid(), second)), "payments");
  EXPECT_EQ(resolver.counters().payload_reads, 1u);
}

TEST(PublicationResolver, MidUpdateNothingIsReadAndTheNextLookReadsTheResult) {
  Writer writer;
  const std::uint64_t header = writer.publish("checkout");
  PublicationResolver resolver;
  resolver.watch(writer.pid(), header);
  ASSERT_TRUE(writer.zero());
  resolver.refresh(writer.pid());
  EXPECT_EQ(resolver.counters().payload_reads, 0u) << "a timestamp of 0 is never read (nor waited for)";
  const std::uint64_t restored = writer.restore();
  resolver.refresh(writer.pid());
  EXPECT_EQ(resolver.counters().payload_reads, 1u);
  EXPECT_EQ(service_name(resolver.resolve(writer.pid(), restored)), "checkout");
}

TEST(PublicationResolver, KeepsTheNewestPublicationsUpToItsBound) {
  Writer writer;
  std::uint64_t first = 0;
  const std::uint64_t header = writer.publish("one", &first);
  ResolverOptions options;
  options.max_publications = 2;
  PublicationResolver resolver(options);
  resolver.watch(writer.pid(), header);
  resolver.refresh(writer.pid());
  const std::uint64_t second = writer.update("two");
  resolver.refresh(writer.pid());
  const std::uint64_t third = writer.update("three");
  resolver.refresh(writer.pid());
  EXPECT_EQ(resolver.resolve(writer.pid(), first).kind, ResolutionKind::Missed) << "evicted";
  EXPECT_EQ(service_name(resolver.resolve(writer.pid(), second)), "two");
  EXPECT_EQ(service_name(resolver.resolve(writer.pid(), third)), "three");
  EXPECT_EQ(resolver.counters().payload_reads, 3u);
}

TEST(PublicationResolver, AnotherProcessOrAForgottenOneResolvesNothing) {
  Writer writer;
  std::uint64_t first = 0;
  const std::uint64_t header = writer.publish("checkout", &first);
  PublicationResolver resolver;
  EXPECT_EQ(resolver.resolve(writer.pid(), first).kind, ResolutionKind::Missed);
  resolver.watch(writer.pid(), header);
  EXPECT_TRUE(resolver.watching(writer.pid()));
  EXPECT_EQ(service_name(resolver.resolve(writer.pid(), first)), "checkout");
  resolver.forget(writer.pid());
  EXPECT_FALSE(resolver.watching(writer.pid()));
  EXPECT_EQ(resolver.resolve(writer.pid(), first).kind, ResolutionKind::Missed);
}

// A header laid out in this process's memory, read through the same
// process_vm_readv path as any target's.
struct OwnHeader {
  alignas(8) std::array<std::uint8_t, kHeaderSize> bytes{};
  std::vector<std::uint8_t> payload;
  OwnHeader(const char* signature, std::uint64_t published_at, std::vector<std::uint8_t> body)
      : payload(std::move(body)) {
    std::memcpy(bytes.data() + kSignatureOffset, signature, kSignatureSize);
    const std::uint32_t version = kCurrentVersion, size = static_cast<std::uint32_t>(payload.size());
    const std::uint64_t at = reinterpret_cast<std::uintptr_t>(payload.data());
    std::memcpy(bytes.data() + kVersionOffset, &version, 4);
    std::memcpy(bytes.data() + kPayloadSizeOffset, &size, 4);
    std::memcpy(bytes.data() + kPublishedAtOffset, &published_at, 8);
    std::memcpy(bytes.data() + kPayloadPointerOffset, &at, 8);
  }
  std::uint64_t address() const { return reinterpret_cast<std::uintptr_t>(bytes.data()); }
};

TEST(PublicationResolver, APublicationThatFailsIsUnreadableWithItsErrorAndNotReadAgain) {
  // A truncated varint: not a ProcessContext.
  OwnHeader malformed("OTEL_CTX", 12345, {0x0a, 0xff});
  PublicationResolver resolver;
  resolver.watch(::getpid(), malformed.address());
  auto r = resolver.resolve(::getpid(), 12345);
  ASSERT_EQ(r.kind, ResolutionKind::Unreadable);
  ASSERT_TRUE(r.publication && r.publication->error);
  EXPECT_EQ(r.publication->error->kind, ErrorKind::kMalformed) << r.publication->error->message();
  resolver.refresh(::getpid());
  EXPECT_EQ(resolver.resolve(::getpid(), 12345).kind, ResolutionKind::Unreadable);
  EXPECT_EQ(resolver.counters().payload_reads, 1u);

  // Not a context's signature: the header itself fails.
  OwnHeader impostor("OTEL_CTY", 777, {});
  resolver.watch(::getpid(), impostor.address());  // another address: afresh
  auto bad = resolver.resolve(::getpid(), 777);
  ASSERT_EQ(bad.kind, ResolutionKind::Unreadable);
  EXPECT_EQ(bad.publication->error->kind, ErrorKind::kBadSignature) << bad.publication->error->message();
  EXPECT_EQ(resolver.resolve(::getpid(), 12345).kind, ResolutionKind::Missed) << "the old address's reads are gone";
}

// ---- the tally ----

std::shared_ptr<const Publication> publication(std::uint64_t at, AttributeList resource) {
  auto p = std::make_shared<Publication>();
  p->published_at_ns = at;
  p->payload = Payload{};
  p->payload->has_resource = true;
  p->payload->resource = std::move(resource);
  return p;
}

TEST(PublicationTally, CountsSamplesPerResourceAndPublication) {
  const auto a1 = publication(10, {{"service.name", "a"}, {"service.instance.id", "i-1"}});
  const auto a2 = publication(20, {{"service.instance.id", "i-1"}, {"service.name", "a"}, {"x", std::int64_t{1}}});
  const auto b = publication(30, {{"service.name", std::int64_t{7}}});
  auto failed = std::make_shared<Publication>();
  failed->published_at_ns = 40;
  failed->error = make_error(ErrorKind::kMalformed, "truncated varint", "payload offset 1");

  PublicationTally tally;
  for (int i = 0; i < 3; ++i) tally.add({ResolutionKind::Resolved, a1});
  tally.add({ResolutionKind::Resolved, a2});
  tally.add({ResolutionKind::Resolved, b});
  tally.add({ResolutionKind::BeingWritten, nullptr});
  tally.add({ResolutionKind::Missed, nullptr});
  tally.add({ResolutionKind::Unreadable, failed});
  tally.add_header_unreadable();
  EXPECT_EQ(tally.samples(), 9u);
  EXPECT_EQ(tally.resources(), 2u);

  const auto j = tally.to_json();
  EXPECT_EQ(j["samples"], 9);
  EXPECT_EQ(j["resolved"], 5);
  EXPECT_EQ(j["being_written"], 1);
  EXPECT_EQ(j["missed"], 1);
  EXPECT_EQ(j["unreadable"], 1);
  EXPECT_EQ(j["header_unreadable"], 1);
  EXPECT_EQ(j["overflow"], 0);
  ASSERT_EQ(j["resources"].size(), 2u);
  // One resource across its two publications (attributes other than the identity may differ).
  const auto& a = j["resources"][1];
  EXPECT_EQ(a["service_name"], "a");
  EXPECT_EQ(a["service_instance_id"], "i-1");
  EXPECT_EQ(a["samples"], 4);
  ASSERT_EQ(a["publications"].size(), 2u);
  EXPECT_EQ(a["publications"][0]["published_at_ns"], 10);
  EXPECT_EQ(a["publications"][0]["samples"], 3);
  EXPECT_EQ(a["publications"][1]["samples"], 1);
  // A non-string service.name is shown, not dropped; an absent instance id is null.
  const auto& other = j["resources"][0];
  EXPECT_EQ(other["service_name"], "7");
  EXPECT_TRUE(other["service_instance_id"].is_null());
  ASSERT_EQ(j["unreadable_reasons"].size(), 1u);
  EXPECT_NE(j["unreadable_reasons"].begin().key().find("truncated varint"), std::string::npos);
}

TEST(PublicationTally, ResourcesAndPublicationsPastTheBoundsAreCountedAsOverflow) {
  PublicationTally tally(/*max_resources=*/1, /*max_publications=*/1);
  tally.add({ResolutionKind::Resolved, publication(1, {{"service.name", "a"}})});
  tally.add({ResolutionKind::Resolved, publication(2, {{"service.name", "a"}})});  // a second publication of a
  tally.add({ResolutionKind::Resolved, publication(3, {{"service.name", "b"}})});  // a second resource
  const auto j = tally.to_json();
  EXPECT_EQ(j["resolved"], 3);
  EXPECT_EQ(j["overflow"], 2);
  ASSERT_EQ(j["resources"].size(), 1u);
  EXPECT_EQ(j["resources"][0]["samples"], 1);
}

}  // namespace
}  // namespace tracecorr::process_context
