// OTEP 4947's record as the host agent exports it (agent/sampled.hpp:
// record_context): a link only for a readable record naming a span, the
// attributes by the key map's names, nothing read from a record that is not
// valid, and a context not cached while an index is missing from the map.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "otel_thread_context/agent/sampled.hpp"
#include "otel_thread_context/record.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using otlp::AttributeValue;

ThreadContextRecord context_record(std::vector<AttributeEntry> entries, std::uint8_t valid = 1) {
  ThreadContextRecord r;
  for (std::size_t i = 0; i < r.trace_id.size(); ++i) r.trace_id[i] = static_cast<std::uint8_t>(0x10 + i);
  for (std::size_t i = 0; i < r.span_id.size(); ++i) r.span_id[i] = static_cast<std::uint8_t>(0xa0 + i);
  r.valid = valid;
  r.trace_flags = 0x01;
  auto attrs = encode_entries(entries);
  EXPECT_TRUE(attrs.ok());
  auto bytes = encode_record(r, attrs.ok() ? *attrs : std::vector<std::uint8_t>{});
  EXPECT_TRUE(bytes.ok());
  auto decoded = decode_record(*bytes);
  EXPECT_TRUE(decoded.ok());
  return *decoded;
}

AttributeEntry keyed(std::uint8_t key, std::string_view value) {
  return AttributeEntry{0, key, std::vector<std::uint8_t>(value.begin(), value.end())};
}

TEST(RecordContext, AValidRecordIsALinkWithItsFlagsAndItsAttributesByName) {
  const auto r = context_record({keyed(0, "/checkout"), keyed(1, "GET")});
  const auto context = record_context(r, name_attributes(r, {"http.route", "http.method"}));
  ASSERT_TRUE(context.link);
  EXPECT_EQ(context.link->trace_id, r.trace_id);
  EXPECT_EQ(context.link->span_id, r.span_id);
  EXPECT_EQ(context.trace_flags, std::optional<std::uint8_t>(1));
  ASSERT_TRUE(context.attributes);
  EXPECT_EQ(*context.attributes, (otlp::Attributes{{"http.route", AttributeValue("/checkout")},
                                                   {"http.method", AttributeValue("GET")}}));
  EXPECT_TRUE(context.settled);
}

TEST(RecordContext, ARecordNotValidIsNoLinkAndNoAttributes) {
  for (std::uint8_t valid : {0, 2, 255}) {  // TCTXR-07, 08: 1 is the only readable value
    const auto r = context_record({keyed(0, "/checkout")}, valid);
    const auto context = record_context(r, name_attributes(r, {"http.route"}));
    EXPECT_FALSE(context.link) << int(valid);
    EXPECT_FALSE(context.trace_flags) << int(valid);
    EXPECT_FALSE(context.attributes) << int(valid);
  }
}

TEST(RecordContext, ZeroIdsAreNoLinkButTheAttributesStay) {
  auto r = context_record({keyed(0, "worker-1")});
  r.trace_id = {};
  r.span_id = {};
  const auto context = record_context(r, name_attributes(r, {"thread.name"}));
  EXPECT_FALSE(context.link) << "a thread outside any trace";
  ASSERT_TRUE(context.attributes);
  EXPECT_EQ(context.attributes->at("thread.name"), AttributeValue("worker-1"));
}

TEST(RecordContext, TheLastDuplicateWinsAndAValueNotUtf8IsBytes) {
  const auto r = context_record({keyed(0, "first"), keyed(1, "\xff\xfe"), keyed(0, "last")});
  const auto context = record_context(r, name_attributes(r, {"http.route", "raw"}));
  ASSERT_TRUE(context.attributes);
  EXPECT_EQ(context.attributes->at("http.route"), AttributeValue("last"));  // TCTXR-12
  EXPECT_EQ(context.attributes->at("raw"), AttributeValue(AttributeValue::Bytes{0xff, 0xfe}));
}

TEST(RecordContext, AnIndexTheMapLacksIsLeftOutAndTheContextIsNotSettled) {
  const auto r = context_record({keyed(0, "/checkout"), keyed(5, "late")});
  const auto context = record_context(r, name_attributes(r, {"http.route"}));
  ASSERT_TRUE(context.attributes);
  EXPECT_EQ(context.attributes->size(), 1u);  // TCTXR-11
  EXPECT_FALSE(context.settled) << "a later refresh of the key map may name it (TCTXR-10)";
  // Once the map names it, the same record is settled with both.
  const auto refreshed = record_context(r, name_attributes(r, {"http.route"}, [] {
                                          return std::optional<KeyMap>({"http.route", "a", "b", "c", "d", "late.key"});
                                        }));
  ASSERT_TRUE(refreshed.attributes);
  EXPECT_EQ(refreshed.attributes->at("late.key"), AttributeValue("late"));
  EXPECT_TRUE(refreshed.settled);
}

}  // namespace
}  // namespace tracecorr::otel_thread_context
