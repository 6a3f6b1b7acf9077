// The thread record codec (otel_thread_context/record.hpp) on bytes written in
// the test: the header, the entry walk and where it stops, the reader rules
// TCTXR-07..12 and 16, the reference data, and hostile bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "otel_thread_context/record.hpp"
#include "otel_thread_context/registry.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using otlp::AttributeValue;

std::vector<std::uint8_t> text_bytes(std::string_view s) { return {s.begin(), s.end()}; }

AttributeEntry entry(std::uint8_t key, std::string_view value) { return AttributeEntry{0, key, text_bytes(value)}; }

ThreadContextRecord header(std::uint8_t valid = 1) {
  ThreadContextRecord h;
  for (std::size_t i = 0; i < h.trace_id.size(); ++i) h.trace_id[i] = static_cast<std::uint8_t>(0x10 + i);
  for (std::size_t i = 0; i < h.span_id.size(); ++i) h.span_id[i] = static_cast<std::uint8_t>(0xa0 + i);
  h.valid = valid;
  h.trace_flags = 0x01;
  return h;
}

std::vector<std::uint8_t> record_bytes(const ThreadContextRecord& h, const std::vector<std::uint8_t>& attrs) {
  auto r = encode_record(h, attrs);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<std::uint8_t>{};
}

std::vector<std::uint8_t> entries_bytes(const std::vector<AttributeEntry>& entries) {
  auto e = encode_entries(entries);
  EXPECT_TRUE(e.ok());
  return e.ok() ? *e : std::vector<std::uint8_t>{};
}

void set_size(std::vector<std::uint8_t>& record, std::uint16_t size) {
  std::memcpy(record.data() + spec::kRecordAttrsDataSizeOffset, &size, sizeof size);
}

TEST(ThreadRecordLayout, IsTheRegistrysAndReadableByTheEngine) {
  const auto& l = thread_context_record_layout();
  ASSERT_TRUE(l.check().ok()) << l.check().error().message();
  EXPECT_EQ(l.fixed_part(), 28u);
  const auto* size = std::get_if<SizeField>(&l.length);
  ASSERT_NE(size, nullptr);
  EXPECT_EQ(size->offset, 26u);
  EXPECT_EQ(size->width, 2u);
  EXPECT_EQ(size->header_length, 28u);
  EXPECT_EQ(l.valid_offset, 24u);
  EXPECT_TRUE(l.valid_values.contains(1));
  EXPECT_FALSE(l.valid_values.contains(0));
  EXPECT_FALSE(l.valid_values.contains(2)) << "TCTXR-08: only 1 marks a record readable";
  EXPECT_EQ(l.max_size, kRecordMaxBytes) << "TCTXR-16";
  EXPECT_TRUE(std::holds_alternative<PointerInTlsSlot>(l.indirection));
  ASSERT_NE(l.field_at(26), nullptr);
  EXPECT_EQ(l.field_at(26)->name, "attrs_data_size");
  // The engine computes the declared length from the size field, bounded.
  auto rec = record_bytes(header(), entries_bytes({entry(0, "GET")}));
  auto length = record_length(l, rec);
  ASSERT_TRUE(length.ok());
  EXPECT_EQ(*length, 28u + 5u);
}

TEST(ThreadRecordLayout, DiscoveryLooksForTheSymbolInLibrariesAndExecutables) {
  auto o = discovery_options();
  EXPECT_EQ(o.tls_symbol, spec::kTlsSymbol);
  EXPECT_TRUE(o.process_symbol.empty());
  EXPECT_TRUE(o.look_past_names);
  EXPECT_TRUE(o.look_in_executables) << "TCTXR-04: the executable's .dynsym too";
  EXPECT_FALSE(library_name_matches("/usr/lib/libanything.so", o.name_regex)) << "no file is chosen by its name";
}

TEST(ThreadRecordDecode, ReadsTheHeaderInNativeOrderAndEveryEntry) {
  auto rec = record_bytes(header(), entries_bytes({entry(0, "/work/0"), entry(1, "GET"), entry(3, "")}));
  auto r = decode_record(rec);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->trace_id, header().trace_id);
  EXPECT_EQ(r->span_id, header().span_id);
  EXPECT_EQ(r->valid, 1);
  EXPECT_EQ(r->trace_flags, 1);
  EXPECT_EQ(r->attrs_data_size, 2 + 7 + 2 + 3 + 2);
  EXPECT_EQ(r->declared_size(), 28u + r->attrs_data_size);
  EXPECT_EQ(r->entries_end, EntriesEnd::Complete);
  EXPECT_EQ(r->entries_stop, r->attrs_data_size);
  ASSERT_EQ(r->entries.size(), 3u);
  EXPECT_EQ(r->entries[0].offset, 0u);
  EXPECT_EQ(r->entries[1].offset, 9u);
  EXPECT_EQ(r->entries[1].key, 1);
  EXPECT_EQ(r->entries[1].value, text_bytes("GET"));
  EXPECT_TRUE(r->entries[2].value.empty());
}

TEST(ThreadRecordDecode, FewerBytesThanTheHeaderIsTruncated) {
  auto rec = record_bytes(header(), {});
  rec.resize(27);
  auto r = decode_record(rec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kTruncated);
}

TEST(ThreadRecordDecode, AnInvalidRecordsAttributesAreNotRead) {
  for (std::uint8_t valid : {0, 2, 255}) {
    auto rec = record_bytes(header(valid), entries_bytes({entry(0, "x")}));
    auto r = decode_record(rec);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->readable()) << "TCTXR-08, valid " << int(valid);
    EXPECT_EQ(r->entries_end, EntriesEnd::NotRead);
    EXPECT_TRUE(r->entries.empty()) << "TCTXR-07";
  }
}

TEST(ThreadRecordDecode, StopsWhereTheBytesLeftCannotHoldAnEntry) {
  // A value running past attrs_data_size (TCTXR-09): the entries before it stand.
  auto attrs = entries_bytes({entry(0, "abc"), entry(1, "defgh")});
  auto rec = record_bytes(header(), attrs);
  set_size(rec, static_cast<std::uint16_t>(attrs.size() - 3));
  auto r = decode_record(rec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->entries_end, EntriesEnd::IncompleteEntry);
  ASSERT_EQ(r->entries.size(), 1u);
  EXPECT_EQ(r->entries_stop, 5u);
  EXPECT_EQ(r->incomplete_entry_needs, 7u);

  // One byte left: not even an entry's header.
  attrs = entries_bytes({entry(0, "abc")});
  attrs.push_back(9);
  rec = record_bytes(header(), attrs);
  r = decode_record(rec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->entries_end, EntriesEnd::IncompleteEntry);
  EXPECT_EQ(r->entries.size(), 1u);
  EXPECT_EQ(r->incomplete_entry_needs, 0u);
}

TEST(ThreadRecordDecode, AnEntryCutByTheReadBoundIsNotDecoded) {
  // The record declares more than the reader read (TCTXR-16): the walk stops
  // at the bound without blaming the writer.
  std::vector<AttributeEntry> many;
  for (int i = 0; i < 8; ++i) many.push_back(entry(0, std::string(200, 'a')));
  auto rec = record_bytes(header(), entries_bytes(many));
  ASSERT_GT(rec.size(), kRecordMaxBytes);
  rec.resize(kRecordMaxBytes);
  auto r = decode_record(rec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->entries_end, EntriesEnd::ReadBound);
  EXPECT_EQ(r->entries.size(), (kRecordMaxBytes - 28) / 202);
  EXPECT_EQ(r->attrs_data_read, kRecordMaxBytes - 28);
  EXPECT_LT(r->attrs_data_read, r->attrs_data_size);
}

TEST(ThreadRecordDecode, HostileBytesNeverReadPastTheSpan) {
  // Random records of every length: whatever the size field and lengths
  // say, the decoder stays inside the bytes (ASan-clean) and its entries
  // lie inside what it was given.
  std::mt19937 rng(4947);
  for (int round = 0; round < 20000; ++round) {
    std::vector<std::uint8_t> bytes(28 + rng() % 80);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    bytes[24] = round % 3 ? 1 : static_cast<std::uint8_t>(rng());
    auto r = decode_record(bytes);
    ASSERT_TRUE(r.ok());
    EXPECT_LE(r->attrs_data_read, bytes.size() - 28);
    for (const auto& e : r->entries) EXPECT_LE(e.offset + 2 + e.value.size(), r->attrs_data_read);
    EXPECT_LE(r->entries_stop, r->attrs_data_size);
  }
}

TEST(ThreadRecordEncode, RefusesWhatTheFormatCannotSay) {
  EXPECT_EQ(encode_entries({entry(0, std::string(256, 'a'))}).error().kind, ErrorKind::kTooLong);
  std::vector<std::uint8_t> big(70000);
  EXPECT_EQ(encode_record(header(), big).error().kind, ErrorKind::kTooLong);
}

TEST(ThreadRecordAttributes, TheLastOccurrenceOfAKeyWins) {
  auto r = decode_record(record_bytes(header(), entries_bytes({entry(0, "/a"), entry(1, "GET"), entry(0, "/b")})));
  ASSERT_TRUE(r.ok());
  auto named = name_attributes(*r, {"http.route", "http.method"});
  ASSERT_EQ(named.attributes.size(), 2u);
  EXPECT_EQ(named.attributes[0].key, "http.route");
  EXPECT_EQ(named.attributes[0].value, text_bytes("/b")) << "TCTXR-12";
  EXPECT_EQ(named.attributes[0].occurrences, 2u);
  EXPECT_EQ(named.attributes[0].offset, 9u);
  EXPECT_EQ(named.attributes[1].key, "http.method");
  EXPECT_FALSE(named.refreshed);
  EXPECT_TRUE(named.unknown_indexes.empty());
}

TEST(ThreadRecordAttributes, AnUnknownIndexRefreshesTheMapOnceThenIsIgnored) {
  auto r = decode_record(record_bytes(header(), entries_bytes({entry(0, "/a"), entry(4, "late"), entry(9, "?"), entry(9, "!")})));
  ASSERT_TRUE(r.ok());
  int refreshes = 0;
  auto named = name_attributes(*r, {"http.route"}, [&]() -> std::optional<KeyMap> {
    ++refreshes;
    return KeyMap{"http.route", "http.method", "tracecorr.note", "http.status_code", "tracecorr.late"};
  });
  EXPECT_EQ(refreshes, 1) << "TCTXR-10: once per record, not per entry";
  EXPECT_TRUE(named.refreshed);
  ASSERT_EQ(named.attributes.size(), 2u);
  EXPECT_EQ(named.attributes[1].key, "tracecorr.late");
  EXPECT_EQ(named.unknown_indexes, std::vector<std::uint8_t>{9}) << "TCTXR-11";

  // Without a refresh, or one that finds nothing newer, the unknown index is ignored.
  named = name_attributes(*r, {"http.route"});
  EXPECT_EQ(named.attributes.size(), 1u);
  EXPECT_EQ(named.unknown_indexes, (std::vector<std::uint8_t>{4, 9}));
  named = name_attributes(*r, {"http.route"}, [] { return std::optional<KeyMap>(); });
  EXPECT_TRUE(named.refreshed);
  EXPECT_EQ(named.attributes.size(), 1u);
}

TEST(ThreadRecordAttributes, ValuesForPeopleEscapeWhatIsNotText) {
  EXPECT_EQ(value_text(text_bytes("/work/0")), "/work/0");
  EXPECT_EQ(value_text(text_bytes("\xc3\xa9t\xc3\xa9")), "\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(value_text(text_bytes("ab\xc3")), "ab\\xc3");
  EXPECT_EQ(value_text(text_bytes("a\nb\\")), "a\\x0ab\\x5c");
}

process_context::Payload payload_with(process_context::AttributeList attributes) {
  process_context::Payload p;
  p.has_resource = true;
  p.resource = {{"service.name", AttributeValue("checkout")}};
  p.attributes = std::move(attributes);
  return p;
}

TEST(ThreadReferenceData, ComesFromTheProcessContextsAttributes) {
  auto d = reference_data_of(payload_with(
      {{"threadlocal.schema_version", AttributeValue("tlsdesc_v1_dev")},
       {"threadlocal.attribute_key_map", AttributeValue(AttributeValue::Array{AttributeValue("http.route"), AttributeValue("http.method")})}}));
  ASSERT_TRUE(d.schema_version);
  EXPECT_EQ(*d.schema_version, "tlsdesc_v1_dev");
  EXPECT_TRUE(d.known_schema());
  ASSERT_TRUE(d.key_map);
  EXPECT_EQ(*d.key_map, (KeyMap{"http.route", "http.method"}));

  d = reference_data_of(payload_with({{"threadlocal.schema_version", AttributeValue("go_pprof_labels_v1")}}));
  EXPECT_FALSE(d.known_schema()) << "TCTXR-03";
  EXPECT_FALSE(d.key_map_value);

  // A key map that is not an array of strings, or is too long, is kept as a value but is no map.
  d = reference_data_of(payload_with({{"threadlocal.attribute_key_map", AttributeValue("http.route,http.method")}}));
  ASSERT_TRUE(d.key_map_value);
  EXPECT_FALSE(d.key_map);
  AttributeValue::Array long_map(257, AttributeValue("k"));
  d = reference_data_of(payload_with({{"threadlocal.attribute_key_map", AttributeValue(long_map)}}));
  EXPECT_FALSE(d.key_map);

  // In the resource instead (PCTX-16): not where readers look.
  process_context::Payload misplaced;
  misplaced.resource = {{"threadlocal.schema_version", AttributeValue("tls_v1")}};
  EXPECT_FALSE(reference_data_of(misplaced).schema_version_value);
}

TEST(ThreadReferenceData, AnotherSchemaIsNamedWithWhatWasSeen) {
  LibraryCache cache;
  // Ours, absent or not a string: no other schema (TCTX-06 judges the last two).
  for (const auto& attributes : std::vector<process_context::AttributeList>{
           {{"threadlocal.schema_version", AttributeValue("tlsdesc_v1_dev")}},
           {{"threadlocal.schema_version", AttributeValue("tls_v1")}},
           {{"threadlocal.attribute_key_map", AttributeValue(AttributeValue::Array{AttributeValue("k")})}},
           {{"threadlocal.schema_version", AttributeValue(std::int64_t{1})}}})
    EXPECT_FALSE(other_schema(::getpid(), reference_data_of(payload_with(attributes)), cache));
  // This test process defines no otel_thread_ctx_* variable: the text says so.
  auto other = other_schema(::getpid(), reference_data_of(payload_with(
                                            {{"threadlocal.schema_version", AttributeValue("nodejs_v1_dev")}})),
                            cache);
  ASSERT_TRUE(other);
  EXPECT_EQ(*other,
            "schema nodejs_v1_dev (threadlocal.schema_version in the process context); no otel_thread_ctx_v1; "
            "the OTEP 4947 reader reads records under tlsdesc_v1_dev or tls_v1 only (TCTXR-03)");
  // A hostile schema string is bounded.
  other = other_schema(::getpid(), reference_data_of(payload_with(
                                       {{"threadlocal.schema_version", AttributeValue(std::string(5000, 'x'))}})),
                       cache);
  ASSERT_TRUE(other);
  EXPECT_LT(other->size(), 400u);
}

TEST(ThreadReferenceData, NotFoundNamesTheVariablesPassedOver) {
  EXPECT_EQ(variable_not_found({}), "no mapped module defines otel_thread_ctx_v1 in its .dynsym");
  EXPECT_EQ(variable_not_found({{"/app/lib.so", "otel_thread_ctx_nodejs_v1"}}),
            "no mapped module defines otel_thread_ctx_v1 in its .dynsym (passed over: otel_thread_ctx_nodejs_v1 in "
            "/app/lib.so)");
}

TEST(ThreadReferenceData, ASnapshotWithoutADecodedPayloadHasNone) {
  process_context::Snapshot s;
  EXPECT_FALSE(reference_data_of(s));
  process_context::MappingSnapshot m;
  m.read.error = make_error(ErrorKind::kNotReady, "timestamp stayed 0");
  s.mappings.push_back(m);
  EXPECT_FALSE(reference_data_of(s));
  process_context::MappingSnapshot good;
  good.decoded.emplace(payload_with({{"threadlocal.schema_version", AttributeValue("tls_v1")}}));
  s.mappings.push_back(good);
  auto d = reference_data_of(s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->schema_version, "tls_v1");
}

}  // namespace
}  // namespace tracecorr::otel_thread_context
