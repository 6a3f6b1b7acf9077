// The reader defects of OTEP 4947's reading code (record.hpp: ReadingPolicy;
// agent/sampled.hpp: reading_policy): each field breaks its one rule and
// nothing else, and the default policy is the conforming reader that inspect
// and conform's writer side read with. `tracecorr agent --reader-defect`
// (tests/py/test_agent_reader_defects.py) runs them against writers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "otel_thread_context/agent/sampled.hpp"
#include "otel_thread_context/record.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using otlp::AttributeValue;

AttributeEntry policy_entry(std::uint8_t key, std::string_view value) {
  return AttributeEntry{0, key, std::vector<std::uint8_t>(value.begin(), value.end())};
}

std::vector<std::uint8_t> policy_record_bytes(std::vector<AttributeEntry> entries, std::uint8_t valid) {
  ThreadContextRecord r;
  r.trace_id.fill(0x11);
  r.span_id.fill(0x22);
  r.valid = valid;
  auto attrs = encode_entries(entries);
  EXPECT_TRUE(attrs.ok());
  auto bytes = encode_record(r, *attrs);
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

TEST(ReadingPolicy, TheDefaultIsTheConformingReader) {
  const ReadingPolicy p;
  EXPECT_FALSE(p.ignore_valid || p.never_refresh_key_map || p.keep_out_of_map || p.first_duplicate_wins ||
               p.read_any_schema || p.static_tls_only || p.unbounded_record || p.never_look_again);
  const ReadingPolicy none = reading_policy(ReaderDefects{});
  EXPECT_FALSE(none.ignore_valid || none.never_refresh_key_map || none.keep_out_of_map || none.first_duplicate_wins ||
               none.read_any_schema || none.static_tls_only || none.unbounded_record || none.never_look_again);
}

TEST(ReadingPolicy, EachDefectSetsItsOwnFieldOnly) {
  for (const auto& d : thread_context_reader_defects()) {
    if (d.name == "reads-running-thread") continue;  // the sampler's, not the decoder's
    const ReadingPolicy p = reading_policy(ReaderDefects({d.name}));
    const int set = p.ignore_valid + p.never_refresh_key_map + p.keep_out_of_map + p.first_duplicate_wins +
                    p.read_any_schema + p.static_tls_only + p.unbounded_record + p.never_look_again;
    EXPECT_EQ(set, 1) << d.name;
    EXPECT_EQ(d.rules.rfind("TCTXR-", 0), 0u) << d.name << " names its rule: " << d.rules;
  }
  EXPECT_EQ(thread_context_reader_defects().size(), 9u);
}

TEST(ReadingPolicy, IgnoresValidReadsAndLinksARecordNotValid) {  // TCTXR-08
  const auto bytes = policy_record_bytes({policy_entry(0, "/checkout")}, 2);
  const auto conforming = decode_record(bytes);
  ASSERT_TRUE(conforming.ok());
  EXPECT_EQ(conforming->entries_end, EntriesEnd::NotRead);
  EXPECT_FALSE(record_context(*conforming, name_attributes(*conforming, {"http.route"})).link);
  ReadingPolicy defect;
  defect.ignore_valid = true;
  const auto read = decode_record(bytes, defect);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->entries.size(), 1u);
  const auto context = record_context(*read, name_attributes(*read, {"http.route"}, {}, defect), defect);
  ASSERT_TRUE(context.link);
  EXPECT_EQ(context.link->span_id, read->span_id);
  ASSERT_TRUE(context.attributes);
  EXPECT_EQ(context.attributes->at("http.route"), AttributeValue("/checkout"));
}

TEST(ReadingPolicy, KeepsOutOfMapNamesTheIndex) {  // TCTXR-11
  const auto bytes = policy_record_bytes({policy_entry(0, "/checkout"), policy_entry(7, "x")}, 1);
  const auto r = decode_record(bytes);
  ASSERT_TRUE(r.ok());
  const auto conforming = name_attributes(*r, {"http.route"});
  EXPECT_EQ(conforming.attributes.size(), 1u);
  EXPECT_EQ(conforming.unknown_indexes, std::vector<std::uint8_t>{7});
  ReadingPolicy defect;
  defect.keep_out_of_map = true;
  const auto kept = name_attributes(*r, {"http.route"}, {}, defect);
  ASSERT_EQ(kept.attributes.size(), 2u);
  EXPECT_EQ(kept.attributes[1].key, "tracecorr.index.7");
  EXPECT_TRUE(kept.unknown_indexes.empty());
}

TEST(ReadingPolicy, FirstDuplicateWinsKeepsTheFirstValue) {  // TCTXR-12
  const auto bytes = policy_record_bytes({policy_entry(0, "first"), policy_entry(1, "GET"), policy_entry(0, "last")}, 1);
  const auto r = decode_record(bytes);
  ASSERT_TRUE(r.ok());
  const KeyMap map{"http.route", "http.method"};
  const auto conforming = record_context(*r, name_attributes(*r, map));
  EXPECT_EQ(conforming.attributes->at("http.route"), AttributeValue("last"));
  ReadingPolicy defect;
  defect.first_duplicate_wins = true;
  const auto named = name_attributes(*r, map, {}, defect);
  EXPECT_EQ(named.attributes[0].occurrences, 2u);
  EXPECT_EQ(record_context(*r, named, defect).attributes->at("http.route"), AttributeValue("first"));
}

TEST(ReadingPolicy, NeverRefreshesKeyMapIsTheCallersToLeaveOut) {  // TCTXR-10: the refresh is not given
  const auto bytes = policy_record_bytes({policy_entry(0, "/checkout"), policy_entry(1, "late")}, 1);
  const auto r = decode_record(bytes);
  ASSERT_TRUE(r.ok());
  int asked = 0;
  auto refresh = [&] {
    ++asked;
    return std::optional<KeyMap>({"http.route", "tracecorr.late"});
  };
  EXPECT_EQ(name_attributes(*r, {"http.route"}, refresh).attributes.size(), 2u);
  EXPECT_EQ(asked, 1);
  ReadingPolicy defect;
  defect.never_refresh_key_map = true;
  EXPECT_EQ(reading_policy(ReaderDefects({"never-refreshes-key-map"})).never_refresh_key_map, true);
  EXPECT_EQ(name_attributes(*r, {"http.route"}, {}, defect).attributes.size(), 1u);
}

}  // namespace
}  // namespace tracecorr::otel_thread_context
