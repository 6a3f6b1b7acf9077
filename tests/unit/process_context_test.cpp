// The engine's process context reader (tracecorr/process_context.hpp):
// discovery on recorded maps text, VmFlags from smaps, the header, the
// payload decoder on valid and hostile bytes, and the seqlock read against a
// live writer (tests/unit/data/process_context_writer.c) that the tests drive
// step by step, so every retry happens where the test puts it.
//
// The reader rules of the process context spec (PCTXR, its reading section) each have tests named
// after them: ReaderRule_PCTXR_0N_*.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "forked_child.hpp"
#include "process_context_writer.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::process_context {
namespace {

using otlp::AttributeValue;
using test::ForkedChild;

using Writer = test::ProcessContextWriter;

// ---- Recorded maps text ----

// Every name a writer can end up with, with and without " (deleted)", and
// look-alikes a reader must not take.
constexpr const char* kRecordedMaps =
    "55d0a0000000-55d0a0021000 r--p 00000000 fe:00 1234                       /usr/bin/app\n"
    "7f0000010000-7f0000020000 rw-p 00000000 00:01 2048                       /memfd:OTEL_CTX (deleted)\n"
    "7f0000030000-7f0000031000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX]\n"
    "7f0000040000-7f0000041000 rw-s 00000000 00:01 4096                       [anon_shmem:OTEL_CTX]\n"
    "7f0000050000-7f0000051000 rw-p 00000000 00:01 4097                       /memfd:OTEL_CTX\n"
    "7f0000060000-7f0000061000 rw-p 00000000 00:01 4098                       [anon_shmem:OTEL_CTX] (deleted)\n"
    "7f0000070000-7f0000071000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX] (deleted)\n"
    // Look-alikes: case, separator, missing slash or bracket, a path around the name, other names.
    "7f1000000000-7f1000001000 rw-p 00000000 00:01 5000                       /memfd:otel_ctx (deleted)\n"
    "7f1000010000-7f1000011000 rw-p 00000000 00:01 5001                       /memfd:OTEL-CTX (deleted)\n"
    "7f1000020000-7f1000021000 rw-p 00000000 00:01 5002                       memfd:OTEL_CTX (deleted)\n"
    "7f1000030000-7f1000031000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX\n"
    "7f1000040000-7f1000041000 rw-p 00000000 00:00 0                          [anon:OTEL_CTXX]\n"
    "7f1000050000-7f1000051000 rw-p 00000000 fe:00 5003                       /tmp/memfd:OTEL_CTX\n"
    "7f1000060000-7f1000061000 rw-p 00000000 fe:00 5004                       /dev/shm/OTEL_CTX\n"
    "7f1000070000-7f1000071000 rw-p 00000000 00:00 0                          [anon:OTEL_CT]\n"
    "7f1000080000-7f1000081000 rw-p 00000000 00:00 0                          [anon_shmem:otel_ctx]\n"
    "7f1000090000-7f1000091000 rw-p 00000000 00:00 0                          [heap]\n"
    "7f10000a0000-7f10000a1000 rw-p 00000000 00:00 0 \n";

TEST(ProcessContextDiscovery, ReaderRule_PCTXR_01_FindsAllThreeNamesWithOrWithoutDeleted) {
  auto found = find_context_mappings(parse_maps(kRecordedMaps));
  ASSERT_EQ(found.size(), 6u);
  const std::vector<std::pair<std::uint64_t, MappingKind>> expected{
      {0x7f0000010000, MappingKind::Memfd},     {0x7f0000030000, MappingKind::Anon},
      {0x7f0000040000, MappingKind::AnonShmem}, {0x7f0000050000, MappingKind::Memfd},
      {0x7f0000060000, MappingKind::AnonShmem}, {0x7f0000070000, MappingKind::Anon}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(found[i].mapping.start, expected[i].first) << i;
    EXPECT_EQ(found[i].kind, expected[i].second) << found[i].mapping.path;
    EXPECT_FALSE(found[i].dont_fork.has_value()) << "maps text says nothing of VmFlags";
  }
  EXPECT_TRUE(found[1].mapping.write && !found[1].mapping.shared);
  EXPECT_TRUE(found[2].mapping.shared);
}

TEST(ProcessContextDiscovery, ReaderRule_PCTXR_01_TakesNoLookAlike) {
  for (const char* name : {"/memfd:otel_ctx (deleted)", "/memfd:OTEL-CTX (deleted)", "memfd:OTEL_CTX (deleted)",
                           "[anon:OTEL_CTX", "[anon:OTEL_CTXX]", "/tmp/memfd:OTEL_CTX", "/dev/shm/OTEL_CTX",
                           "[anon:OTEL_CT]", "[anon_shmem:otel_ctx]", "", "[heap]", " /memfd:OTEL_CTX"})
    EXPECT_FALSE(kind_of_mapping_name(name).has_value()) << '"' << name << '"';
  EXPECT_EQ(kind_of_mapping_name("/memfd:OTEL_CTX"), MappingKind::Memfd);
  // The OTEP compares a prefix: whatever follows it does not matter.
  EXPECT_EQ(kind_of_mapping_name("/memfd:OTEL_CTX_v2 (deleted)"), MappingKind::Memfd);
  EXPECT_EQ(kind_of_mapping_name("[anon:OTEL_CTX] (deleted)"), MappingKind::Anon);
}

TEST(ProcessContextDiscovery, SortsByAddressAndNamesEachKind) {
  auto maps = parse_maps(
      "7f0000050000-7f0000051000 rw-p 00000000 00:01 1 /memfd:OTEL_CTX (deleted)\n"
      "7f0000010000-7f0000011000 rw-p 00000000 00:00 0 [anon:OTEL_CTX]\n");
  auto found = find_context_mappings(maps);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_LT(found[0].mapping.start, found[1].mapping.start);
  EXPECT_EQ(to_string(MappingKind::AnonShmem), "anon_shmem");
  EXPECT_EQ(name_prefix(MappingKind::Anon), "[anon:OTEL_CTX]");
}

// ---- smaps VmFlags ----

constexpr const char* kRecordedSmaps =
    "7f0000010000-7f0000020000 rw-p 00000000 00:01 2048                       /memfd:OTEL_CTX (deleted)\n"
    "Size:                 64 kB\n"
    "KernelPageSize:        4 kB\n"
    "THPeligible:    0\n"
    "VmFlags: rd wr mr mw me dc sd \n"
    "7f0000030000-7f0000031000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX]\n"
    "Size:                  4 kB\n"
    "VmFlags: rd wr mr mw me ac sd\n"
    "7f0000040000-7f0000041000 rw-s 00000000 00:01 4096                       [anon_shmem:OTEL_CTX]\n"
    "Size:                  4 kB\n"
    "7f0000050000-7f0000051000 rw-p 00000000 00:00 0                          [heap]\n"
    "VmFlags: rd wr dc\n";

TEST(Smaps, VmFlagsOfTheWantedMappings) {
  const std::uint64_t starts[] = {0x7f0000030000, 0x7f0000010000, 0x7f0000040000, 0x7f00000ff000};
  auto flags = parse_smaps_vm_flags(kRecordedSmaps, starts);
  // In the order asked; a mapping without VmFlags (the third) and one smaps
  // does not list (the fourth) have no entry.
  ASSERT_EQ(flags.size(), 2u);
  EXPECT_EQ(flags[0].first, 0x7f0000030000u);
  EXPECT_FALSE(flags[0].second.has("dc"));
  EXPECT_TRUE(flags[0].second.has("ac"));
  EXPECT_EQ(flags[1].first, 0x7f0000010000u);
  EXPECT_TRUE(flags[1].second.has("dc"));
  EXPECT_EQ(flags[1].second.codes.size(), 7u);
}

TEST(Smaps, HostileLinesAreBounded) {
  std::string smaps = "7f0000010000-7f0000020000 rw-p 00000000 00:01 1 /memfd:OTEL_CTX (deleted)\nVmFlags:";
  for (int i = 0; i < 1000; ++i) smaps += " dc";  // far more codes than the kernel has
  smaps += "\n7f0000030000-7f0000031000 rw-p 00000000 00:01 2 /memfd:OTEL_CTX (deleted)\nVmFlags: " +
           std::string(kMaxSmapsLine, 'x') + " dc\n";  // a line past the bound: skipped
  const std::uint64_t starts[] = {0x7f0000010000, 0x7f0000030000};
  auto flags = parse_smaps_vm_flags(smaps, starts);
  ASSERT_EQ(flags.size(), 1u);
  EXPECT_EQ(flags[0].second.codes.size(), VmFlags::kMaxCodes);
  // A VmFlags line under a header that is not wanted belongs to no wanted mapping.
  EXPECT_TRUE(parse_smaps_vm_flags("VmFlags: rd dc\n", starts).empty());
}

TEST(Smaps, ReadsThisProcessesDontForkFlag) {
  const std::size_t size = 2 * static_cast<std::size_t>(::getpagesize());
  void* marked = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* plain = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(marked, MAP_FAILED);
  ASSERT_NE(plain, MAP_FAILED);
  ASSERT_EQ(::madvise(marked, size, MADV_DONTFORK), 0);
  const std::uint64_t starts[] = {reinterpret_cast<std::uint64_t>(marked), reinterpret_cast<std::uint64_t>(plain)};
  auto flags = read_vm_flags(::getpid(), starts);
  ::munmap(marked, size);
  ::munmap(plain, size);
  ASSERT_TRUE(flags.ok()) << flags.error().message();
  ASSERT_EQ(flags->size(), 2u);
  EXPECT_TRUE((*flags)[0].second.has("dc"));
  EXPECT_FALSE((*flags)[1].second.has("dc"));
}

// ---- The header ----

std::vector<std::uint8_t> header_bytes(std::string_view signature, std::uint32_t version, std::uint32_t size,
                                       std::uint64_t timestamp, std::uint64_t payload) {
  std::vector<std::uint8_t> b(kHeaderSize);
  std::memcpy(b.data(), signature.data(), std::min<std::size_t>(signature.size(), 8));
  for (int i = 0; i < 4; ++i) b[kVersionOffset + i] = static_cast<std::uint8_t>(version >> (8 * i));
  for (int i = 0; i < 4; ++i) b[kPayloadSizeOffset + i] = static_cast<std::uint8_t>(size >> (8 * i));
  for (int i = 0; i < 8; ++i) b[kPublishedAtOffset + i] = static_cast<std::uint8_t>(timestamp >> (8 * i));
  for (int i = 0; i < 8; ++i) b[kPayloadPointerOffset + i] = static_cast<std::uint8_t>(payload >> (8 * i));
  return b;
}

TEST(ProcessContextHeader, ParsesLittleEndianFields) {
  auto h = parse_header(header_bytes("OTEL_CTX", 2, 0x01020304, 0x1122334455667788ull, 0x7f0000001000ull));
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->signature_matches());
  EXPECT_EQ(h->version, 2u);
  EXPECT_EQ(h->payload_size, 0x01020304u);
  EXPECT_EQ(h->published_at_ns, 0x1122334455667788ull);
  EXPECT_EQ(h->payload, 0x7f0000001000ull);
  EXPECT_TRUE(check_identity(*h, false).ok());
}

TEST(ProcessContextHeader, TooFewBytesAreTruncated) {
  std::vector<std::uint8_t> short_header(kHeaderSize - 1);
  auto h = parse_header(short_header);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.error().kind, ErrorKind::kTruncated);
  EXPECT_FALSE(parse_header({}).ok());
}

TEST(ProcessContextHeader, ReaderRule_PCTXR_02_ComparesExactlyEightSignatureBytes) {
  for (std::string_view bad : {std::string_view("OTEL-CTX"), std::string_view("otel_ctx"), std::string_view("OTEL_CT\0", 8),
                               std::string_view("\0\0\0\0\0\0\0\0", 8), std::string_view("OTEL_CTY")}) {
    auto h = parse_header(header_bytes(bad, 2, 0, 1, 0));
    auto id = check_identity(*h, true);
    ASSERT_FALSE(id.ok()) << h->signature_text();
    EXPECT_EQ(id.error().kind, ErrorKind::kBadSignature);
  }
  // Control bytes in a hostile signature are shown escaped.
  EXPECT_EQ(parse_header(header_bytes(std::string_view("OTEL\nCT\xff", 8), 2, 0, 1, 0))->signature_text(), "OTEL\\x0aCT\\xff");
}

TEST(ProcessContextHeader, ReaderRule_PCTXR_02_SkipsUnsupportedVersions) {
  for (std::uint32_t version : {0u, 3u, 0xffffffffu}) {
    auto id = check_identity(*parse_header(header_bytes("OTEL_CTX", version, 0, 1, 0)), true);
    ASSERT_FALSE(id.ok()) << version;
    EXPECT_EQ(id.error().kind, ErrorKind::kUnsupportedVersion);
  }
  auto development = *parse_header(header_bytes("OTEL_CTX", 1, 0, 1, 0));
  EXPECT_TRUE(check_identity(development, true).ok());
  EXPECT_EQ(check_identity(development, false).error().kind, ErrorKind::kUnsupportedVersion);
}

// ---- The payload ----

// A hand-written protobuf encoder for hostile payloads.
struct Wire {
  std::vector<std::uint8_t> b;
  Wire& varint(std::uint64_t v) {
    while (v >= 0x80) {
      b.push_back(static_cast<std::uint8_t>(v | 0x80));
      v >>= 7;
    }
    b.push_back(static_cast<std::uint8_t>(v));
    return *this;
  }
  Wire& tag(std::uint32_t field, int wire) { return varint(static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire)); }
  Wire& bytes(std::uint32_t field, std::string_view data) {
    tag(field, 2).varint(data.size());
    b.insert(b.end(), data.begin(), data.end());
    return *this;
  }
  Wire& message(std::uint32_t field, const Wire& inner) {
    return bytes(field, std::string_view(reinterpret_cast<const char*>(inner.b.data()), inner.b.size()));
  }
  Wire& raw(std::initializer_list<std::uint8_t> more) {
    b.insert(b.end(), more);
    return *this;
  }
};

Wire key_value(std::string_view key, const Wire& any) { return Wire().bytes(1, key).message(2, any); }
Wire string_value(std::string_view s) { return Wire().bytes(1, s); }

Payload sample_payload() {
  Payload p;
  p.has_resource = true;
  p.resource = {{"service.name", AttributeValue("checkout")},
                {"service.instance.id", AttributeValue("627cc493")},
                {"process.pid", AttributeValue(std::int64_t{4242})},
                {"process.debug", AttributeValue(true)},
                {"sample.ratio", AttributeValue(0.25)},
                {"build.id", AttributeValue(AttributeValue::Bytes{0xde, 0xad})},
                {"runtime.versions", AttributeValue(AttributeValue::Array{AttributeValue("21"), AttributeValue(std::int64_t{3})})},
                {"nested", AttributeValue(AttributeValue::KvList{{"k", AttributeValue("v")}})},
                {"empty", AttributeValue()}};
  p.resource_dropped_attributes_count = 2;
  p.attributes = {{"threadlocal.schema_version", AttributeValue("tls_v1")}, {"b", AttributeValue("1")}, {"b", AttributeValue("2")}};
  return p;
}

TEST(ProcessContextPayload, DecodesEveryValueTypeInOrderWithDuplicatesKept) {
  auto decoded = decode_payload(encode_payload(sample_payload()));
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  const Payload expected = sample_payload();
  EXPECT_TRUE(decoded->has_resource);
  EXPECT_EQ(decoded->resource, expected.resource);
  EXPECT_EQ(decoded->attributes, expected.attributes);
  EXPECT_EQ(decoded->resource_dropped_attributes_count, 2u);
  EXPECT_EQ(decoded->unknown_fields, 0u);
  EXPECT_EQ(find_attribute(decoded->resource, "process.pid")->type_name(), "int");
  EXPECT_EQ(find_attribute(decoded->resource, "runtime.versions")->type_name(), "mixed-array");
  EXPECT_EQ(find_attribute(decoded->resource, "missing"), nullptr);
}

TEST(ProcessContextPayload, AnEmptyPayloadIsAnEmptyContext) {
  auto decoded = decode_payload({});
  ASSERT_TRUE(decoded.ok());
  EXPECT_FALSE(decoded->has_resource);
  EXPECT_TRUE(decoded->resource.empty() && decoded->attributes.empty());
}

TEST(ProcessContextPayload, UnknownFieldsAreCountedNotRefused) {
  Wire w;
  w.message(1, Wire().message(1, key_value("service.name", string_value("a"))).tag(9, 0).varint(5));  // Resource field 9
  w.tag(15, 5).raw({1, 2, 3, 4});                                                                        // fixed32 field 15
  w.tag(16, 3).tag(1, 0).varint(7).tag(16, 4);                                                          // a group
  auto decoded = decode_payload(w.b);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  EXPECT_EQ(decoded->unknown_fields, 3u);
  EXPECT_EQ(decoded->resource.size(), 1u);
}

// Every refusal is kMalformed or kTooLong, and names where.
void expect_refused(const std::vector<std::uint8_t>& bytes, ErrorKind kind, std::string_view what, std::string_view where,
                    const DecodeLimits& limits = {}) {
  auto decoded = decode_payload(bytes, limits);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().kind, kind) << decoded.error().message();
  EXPECT_NE(decoded.error().what.find(what), std::string::npos) << decoded.error().message();
  EXPECT_NE(decoded.error().where.find(where), std::string::npos) << decoded.error().message();
}

TEST(ProcessContextPayload, TruncatedVarintsAndLengthsAreNamed) {
  expect_refused({0x0a, 0x80}, ErrorKind::kMalformed, "truncated length", "payload byte 1");
  expect_refused({0x80}, ErrorKind::kMalformed, "truncated field tag", "payload byte 0");
  expect_refused({0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrorKind::kMalformed, "runs past the end", "payload byte 1");
  // A length that would wrap a 64-bit offset.
  expect_refused({0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrorKind::kMalformed, "runs past the end",
                 "payload byte 1");
  expect_refused({0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrorKind::kMalformed,
                 "longer than", "payload byte 1");
  // Inside a nested message: the path says where.
  Wire w;
  w.message(1, Wire().message(1, Wire().bytes(1, "k").raw({0x12, 0x05, 0x0a})));
  expect_refused(w.b, ErrorKind::kMalformed, "runs past the end", "resource.attributes[0].value");
}

TEST(ProcessContextPayload, WrongWireTypesOfKnownFieldsAreMalformed) {
  expect_refused(Wire().tag(1, 0).varint(1).b, ErrorKind::kMalformed, "ProcessContext.resource) has wire type 0", "payload byte 0");
  Wire any_with_fixed_string;
  any_with_fixed_string.tag(1, 1).raw({0, 0, 0, 0, 0, 0, 0, 0});
  Wire w;
  w.message(2, key_value("k", any_with_fixed_string));
  expect_refused(w.b, ErrorKind::kMalformed, "AnyValue.string_value", "attributes[0].value");
  expect_refused(Wire().tag(0, 0).varint(1).b, ErrorKind::kMalformed, "field number 0", "payload byte 0");
  expect_refused(Wire().tag(3, 7).b, ErrorKind::kMalformed, "wire type 7", "payload byte 0");
  expect_refused(Wire().tag(3, 4).b, ErrorKind::kMalformed, "end-group 3 without a group", "payload byte 0");
  expect_refused(Wire().tag(3, 3).tag(1, 0).varint(1).b, ErrorKind::kMalformed, "not terminated", "payload byte 0");
}

TEST(ProcessContextPayload, InvalidUtf8IsMalformed) {
  Wire w;
  w.message(2, key_value(std::string_view("k\xff", 2), string_value("v")));
  expect_refused(w.b, ErrorKind::kMalformed, "invalid UTF-8", "attributes[0].key");
}

TEST(ProcessContextPayload, DeepNestingIsBounded) {
  Wire value = string_value("leaf");
  for (int i = 0; i < 40; ++i) value = Wire().message(5, Wire().message(1, value));  // array_value { values { ... } }
  Wire w;
  w.message(2, key_value("deep", value));
  expect_refused(w.b, ErrorKind::kTooLong, "nested more than 8 deep", "attributes[0].value");
  // Within the bound it decodes.
  Wire shallow = string_value("leaf");
  for (int i = 0; i < 8; ++i) shallow = Wire().message(5, Wire().message(1, shallow));
  EXPECT_TRUE(decode_payload(Wire().message(2, key_value("ok", shallow)).b).ok());
}

TEST(ProcessContextPayload, CountsAndLengthsAreBounded) {
  DecodeLimits limits;
  limits.max_attributes = 3;
  limits.max_string_bytes = 8;
  limits.max_fields = 50;
  Wire many;
  for (int i = 0; i < 4; ++i) many.message(2, key_value("k" + std::to_string(i), string_value("v")));
  expect_refused(many.b, ErrorKind::kTooLong, "more than 3 attributes", "attributes[3]", limits);
  expect_refused(Wire().message(2, key_value("k", string_value("123456789"))).b, ErrorKind::kTooLong,
                 "exceed the 8-byte bound", "attributes[0].value.string_value", limits);
  Wire fields;
  for (int i = 0; i < 60; ++i) fields.tag(20, 0).varint(1);
  expect_refused(fields.b, ErrorKind::kTooLong, "more than 50 protobuf fields", "payload byte", limits);
  limits = {};
  limits.max_payload_bytes = 4;
  expect_refused(std::vector<std::uint8_t>(5, 0), ErrorKind::kTooLong, "payload bound", "payload", limits);
}

TEST(ProcessContextPayload, CompletePrefixEndsAtTheFirstFieldThatDoesNotParse) {
  auto good = encode_payload(sample_payload());
  EXPECT_EQ(complete_prefix_length(good), good.size());
  auto trailing = good;
  trailing.insert(trailing.end(), {0, 0, 0, 0, 0, 0, 0});  // zeros: field number 0
  EXPECT_EQ(complete_prefix_length(trailing), good.size());
  EXPECT_EQ(complete_prefix_length(std::vector<std::uint8_t>{0x0a, 0x80}), 0u);
  EXPECT_EQ(complete_prefix_length({}), 0u);
}

TEST(ProcessContextPayload, DuplicateAndThreadLocalKeys) {
  AttributeList list{{"a", AttributeValue("1")}, {"threadlocal.x", AttributeValue("2")}, {"a", AttributeValue("3")},
                     {"a", AttributeValue("4")}, {"threadlocal.y", AttributeValue("5")}, {"b", AttributeValue("6")}};
  EXPECT_EQ(duplicate_keys(list), std::vector<std::string>{"a"});
  EXPECT_EQ(keys_with_prefix(list, kThreadLocalPrefix), (std::vector<std::string>{"threadlocal.x", "threadlocal.y"}));
  EXPECT_TRUE(duplicate_keys({}).empty());
}

// ---- The seqlock read: memory held by the test ----

// A process's memory as the test lays it out: address -> bytes.
class TestMemory final : public ProcessMemory {
 public:
  void place(std::uint64_t address, std::vector<std::uint8_t> bytes) { regions_.emplace_back(address, std::move(bytes)); }
  Status read(std::uint64_t addr, std::span<std::uint8_t> out) const override {
    for (const auto& [start, bytes] : regions_)
      if (addr >= start && addr - start <= bytes.size() && out.size() <= bytes.size() - (addr - start)) {
        std::memcpy(out.data(), bytes.data() + (addr - start), out.size());
        return Ok{};
      }
    return make_error(ErrorKind::kUnmapped, "nothing mapped", hex_address(addr));
  }

 private:
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> regions_;
};

constexpr std::uint64_t kHeaderAt = 0x7f0000010000, kPayloadAt = 0x7f0000020000;

TEST(ProcessContextDiscovery, FindsHeadersPublishedWhereNoReaderLooks) {
  auto maps = parse_maps(
      "7f0000010000-7f0000011000 rw-p 00000000 00:01 5000 /memfd:otel_ctx (deleted)\n"  // misnamed memfd
      "7f0000020000-7f0000021000 rw-p 00000000 00:00 0 \n"                               // never named
      "7f0000030000-7f0000031000 rw-p 00000000 00:00 0 [anon:OTEL_CTX]\n"                // named: discover's
      "7f0000040000-7f0000041000 rw-p 00000000 fe:00 77 /tmp/otel.bin\n"                 // a file: not looked at
      "7f0000050000-7f0000051000 r--p 00000000 00:00 0 \n"                               // read-only: cannot be one
      "7f0000060000-7f0000061000 rw-p 00000000 00:00 0 [heap]\n"                          // not where one is mapped
      "7f0000070000-7f0000071000 rw-p 00000000 00:00 0 \n"                               // unreadable: passed over
      "7f0000080000-7f0000081000 rw-p 00000000 00:01 5001 /memfd:other (deleted)\n");   // another signature
  TestMemory memory;
  const auto header = header_bytes("OTEL_CTX", 2, 0, 1, 0);
  for (std::uint64_t at : {0x7f0000010000ull, 0x7f0000020000ull, 0x7f0000030000ull, 0x7f0000040000ull,
                           0x7f0000050000ull, 0x7f0000060000ull})
    memory.place(at, header);
  memory.place(0x7f0000080000, header_bytes("OTEL-CTX", 2, 0, 1, 0));
  auto found = find_misnamed_headers(maps, memory);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].path, "/memfd:otel_ctx (deleted)");
  EXPECT_EQ(found[1].start, 0x7f0000020000u);
}

TEST(ProcessContextRead, ReadsAHeaderAndItsPayloadElsewhere) {
  auto payload = encode_payload(sample_payload());
  TestMemory memory;
  memory.place(kHeaderAt, header_bytes("OTEL_CTX", 2, static_cast<std::uint32_t>(payload.size()), 1234, kPayloadAt));
  memory.place(kPayloadAt, payload);
  auto read = read_context(memory, kHeaderAt);
  ASSERT_TRUE(read.ok()) << read.error->message();
  EXPECT_EQ(read.payload, payload);
  EXPECT_TRUE(read.retries.empty());
  EXPECT_EQ(read.header->published_at_ns, 1234u);
}

TEST(ProcessContextRead, ReaderRule_PCTXR_05_HostileHeadersFailGracefullyWithAKind) {
  struct Case {
    const char* name;
    std::vector<std::uint8_t> header;
    ErrorKind kind;
    ReadStage stage;
  };
  const Case cases[] = {
      {"bad signature", header_bytes("OTEL-CTX", 2, 4, 1, kPayloadAt), ErrorKind::kBadSignature, ReadStage::Header},
      {"unsupported version", header_bytes("OTEL_CTX", 9, 4, 1, kPayloadAt), ErrorKind::kUnsupportedVersion, ReadStage::Header},
      {"payload past the bound", header_bytes("OTEL_CTX", 2, 0xffffffffu, 1, kPayloadAt), ErrorKind::kTooLong, ReadStage::Payload},
      {"payload pointer to nothing", header_bytes("OTEL_CTX", 2, 16, 1, 0xdead0000), ErrorKind::kUnmapped, ReadStage::Payload},
      {"null payload pointer", header_bytes("OTEL_CTX", 2, 16, 1, 0), ErrorKind::kUnmapped, ReadStage::Payload},
  };
  for (const auto& c : cases) {
    TestMemory memory;
    memory.place(kHeaderAt, c.header);
    memory.place(kPayloadAt, std::vector<std::uint8_t>(8, 0));  // shorter than the declared 16
    auto read = read_context(memory, kHeaderAt);
    ASSERT_FALSE(read.ok()) << c.name;
    EXPECT_EQ(read.error->kind, c.kind) << c.name << ": " << read.error->message();
    EXPECT_EQ(read.stage, c.stage) << c.name;
    EXPECT_TRUE(read.payload.empty()) << c.name;
    EXPECT_TRUE(read.header.has_value()) << c.name;
    EXPECT_NE(read.error->where.find(hex_address(kHeaderAt)), std::string::npos) << read.error->message();
  }
  TestMemory nothing;
  auto read = read_context(nothing, kHeaderAt);
  EXPECT_EQ(read.error->kind, ErrorKind::kUnmapped);
  EXPECT_EQ(read.stage, ReadStage::Header);
  EXPECT_FALSE(read.header.has_value());
}

// Reader defects (tracecorr agent --reader-defect, for conformance kill
// matrices): each ReadOptions step turned off breaks its one rule.
TEST(ProcessContextReadDefects, AnySignatureReadsAHeaderThatIsNotOurs) {  // PCTXR-02
  auto payload = encode_payload(sample_payload());
  TestMemory memory;
  memory.place(kHeaderAt, header_bytes("OTEL-CTX", 9, static_cast<std::uint32_t>(payload.size()), 1234, kPayloadAt));
  memory.place(kPayloadAt, payload);
  auto conforming = read_context(memory, kHeaderAt);
  ASSERT_FALSE(conforming.ok());
  EXPECT_EQ(conforming.error->kind, ErrorKind::kBadSignature);
  ReadOptions defect;
  defect.check_identity = false;
  auto read = read_context(memory, kHeaderAt, defect);
  ASSERT_TRUE(read.ok()) << read.error->message();
  EXPECT_EQ(read.payload, payload);
}

TEST(ProcessContextReadDefects, IgnoresSeqlockTakesThePayloadWhileTheTimestampIsZero) {  // PCTXR-03, 04
  auto payload = encode_payload(sample_payload());
  TestMemory memory;
  memory.place(kHeaderAt, header_bytes("OTEL_CTX", 2, static_cast<std::uint32_t>(payload.size()), 0, kPayloadAt));
  memory.place(kPayloadAt, payload);
  ReadOptions conforming;
  conforming.max_retries = 2;
  conforming.retry_pause = std::chrono::microseconds(0);
  EXPECT_EQ(read_context(memory, kHeaderAt, conforming).error->kind, ErrorKind::kNotReady);
  ReadOptions defect = conforming;
  defect.seqlock = false;
  auto read = read_context(memory, kHeaderAt, defect);
  ASSERT_TRUE(read.ok()) << read.error->message();
  EXPECT_TRUE(read.retries.empty());
  EXPECT_EQ(read.header->published_at_ns, 0u);
  EXPECT_EQ(read.payload, payload);
}

TEST(ProcessContextRead, ThePayloadBoundIsAnOptionWithAHardCap) {
  TestMemory memory;
  memory.place(kHeaderAt, header_bytes("OTEL_CTX", 2, 100, 1, kPayloadAt));
  memory.place(kPayloadAt, std::vector<std::uint8_t>(100, 0));
  ReadOptions small;
  small.max_payload_bytes = 99;
  EXPECT_EQ(read_context(memory, kHeaderAt, small).error->kind, ErrorKind::kTooLong);
  small.max_payload_bytes = 100;
  EXPECT_TRUE(read_context(memory, kHeaderAt, small).ok());
  TestMemory big;
  big.place(kHeaderAt, header_bytes("OTEL_CTX", 2, static_cast<std::uint32_t>(kPayloadHardCap + 1), 1, kPayloadAt));
  ReadOptions huge;
  huge.max_payload_bytes = SIZE_MAX;
  auto read = read_context(big, kHeaderAt, huge);
  EXPECT_EQ(read.error->kind, ErrorKind::kTooLong);
  EXPECT_NE(read.error->what.find(std::to_string(kPayloadHardCap)), std::string::npos) << read.error->message();
}

// ---- The seqlock read: a live writer, driven step by step ----

// The live process's memory, with a hook run before chosen reads of the
// reader: the test's way to change the context at an exact step of the
// reading protocol. Counts the reads of each kind.
class SteppedMemory final : public ProcessMemory {
 public:
  SteppedMemory(pid_t pid, std::uint64_t header) : live_(pid), header_(header) {}
  std::function<void(int)> before_header_read;      // the 32 header bytes, n-th time (from 1)
  std::function<void(int)> before_timestamp_reread;  // the 8 timestamp bytes, n-th time (from 1)
  mutable int header_reads = 0, timestamp_reads = 0, other_reads = 0;

  Status read(std::uint64_t addr, std::span<std::uint8_t> out) const override {
    if (addr == header_ && out.size() == kHeaderSize) {
      if (before_header_read) before_header_read(++header_reads);
      else ++header_reads;
    } else if (addr == header_ + kPublishedAtOffset && out.size() == 8) {
      if (before_timestamp_reread) before_timestamp_reread(++timestamp_reads);
      else ++timestamp_reads;
    } else {
      ++other_reads;
    }
    return live_.read(addr, out);
  }

 private:
  LiveProcessMemory live_;
  std::uint64_t header_;
};

std::string service_name_of(const ContextRead& read) {
  auto decoded = decode_payload(read.payload);
  if (!decoded) return "(undecodable: " + decoded.error().message() + ")";
  const auto* name = find_attribute(decoded->resource, "service.name");
  return name && name->as_string() ? *name->as_string() : "(none)";
}

ReadOptions quick(unsigned retries) {
  ReadOptions o;
  o.max_retries = retries;
  o.retry_pause = std::chrono::microseconds(0);
  return o;
}

TEST(ProcessContextLive, DiscoversAndReadsAMemfdWriter) {
  Writer writer;
  ASSERT_GT(writer.pid(), 0);
  const std::uint64_t header = writer.publish("checkout");
  ASSERT_NE(header, 0u);
  auto mappings = discover(writer.pid());
  ASSERT_TRUE(mappings.ok()) << mappings.error().message();
  ASSERT_EQ(mappings->size(), 1u);
  const auto& m = mappings->front();
  EXPECT_EQ(m.mapping.start, header);
  // prctl naming fails on kernels without CONFIG_ANON_VMA_NAME: then the memfd name shows.
  EXPECT_TRUE(m.kind == MappingKind::Memfd || m.kind == MappingKind::AnonShmem) << m.mapping.path;
  EXPECT_EQ(m.dont_fork, std::optional<bool>(true));
  EXPECT_TRUE(m.mapping.read && m.mapping.write && !m.mapping.shared);

  auto snapshot = take_snapshot(writer.pid());
  ASSERT_TRUE(snapshot.ok()) << snapshot.error().message();
  ASSERT_EQ(snapshot->mappings.size(), 1u);
  const auto& s = snapshot->mappings.front();
  ASSERT_TRUE(s.read.ok()) << s.read.error->message();
  EXPECT_TRUE(s.read.retries.empty());
  ASSERT_TRUE(s.decoded && s.decoded->ok());
  EXPECT_EQ(service_name_of(s.read), "checkout");
  EXPECT_EQ(keys_with_prefix(s.decoded->value().attributes, kThreadLocalPrefix).size(), 1u);
  // The writer's timestamp is CLOCK_BOOTTIME: between its start and now.
  ASSERT_TRUE(snapshot->process_start_boottime_ns.has_value());
  EXPECT_GE(s.read.header->published_at_ns, *snapshot->process_start_boottime_ns);
  EXPECT_LE(s.read.header->published_at_ns, snapshot->boottime_now_ns);
}

TEST(ProcessContextLive, ThePayloadMayFollowTheHeader) {
  Writer writer({"--inline", "--no-dontfork"});
  const std::uint64_t header = writer.publish("inline");
  ASSERT_NE(header, 0u);
  LiveProcessMemory memory(writer.pid());
  auto read = read_context(memory, header);
  ASSERT_TRUE(read.ok()) << read.error->message();
  EXPECT_EQ(read.header->payload, header + kHeaderSize);
  EXPECT_EQ(service_name_of(read), "inline");
  auto mappings = discover(writer.pid());
  ASSERT_TRUE(mappings.ok() && mappings->size() == 1u);
  EXPECT_EQ(mappings->front().dont_fork, std::optional<bool>(false));
}

TEST(ProcessContextLive, ReaderRule_PCTXR_05_AnAnonymousMappingIsFoundOnlyWhenTheKernelNamedIt) {
  Writer writer({"--anon"});
  ASSERT_NE(writer.publish("anon"), 0u);
  auto mappings = discover(writer.pid());
  ASSERT_TRUE(mappings.ok()) << mappings.error().message();
  // Without CONFIG_ANON_VMA_NAME the mapping has no name: no context, and no error.
  for (const auto& m : *mappings) EXPECT_EQ(m.kind, MappingKind::Anon);
  auto snapshot = take_snapshot(writer.pid());
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ(snapshot->mappings.size(), mappings->size());
}

TEST(ProcessContextLive, ReaderRule_PCTXR_05_AProcessWithoutAContextOrGoneIsNoCrash) {
  auto own = take_snapshot(::getpid());
  ASSERT_TRUE(own.ok()) << own.error().message();
  EXPECT_TRUE(own->mappings.empty());
  ForkedChild gone([](ForkedChild::Pipes) {});
  ASSERT_TRUE(gone.started());
  gone.wait();
  auto snapshot = take_snapshot(gone.pid());
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.error().kind, ErrorKind::kGone) << snapshot.error().message();
}

TEST(ProcessContextLive, OneMappingNameFindsOnlyAnonShmem) {  // the reader defect one-mapping-name breaks PCTXR-01
  Writer writer;
  ASSERT_NE(writer.publish("checkout"), 0u);
  auto all = discover(writer.pid(), DontFork::kSkip);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  auto defective = discover(writer.pid(), DontFork::kSkip, /*anon_shmem_only=*/true);
  ASSERT_TRUE(defective.ok());
  // Without CONFIG_ANON_VMA_NAME the writer's memfd keeps its /memfd: name: the defect misses it.
  EXPECT_EQ(defective->size(), all->front().kind == MappingKind::AnonShmem ? 1u : 0u) << all->front().mapping.path;
}

TEST(ProcessContextLive, ReaderRule_PCTXR_03_RetriesWhileTheTimestampIsZero) {
  Writer writer;
  const std::uint64_t header = writer.publish("checkout");
  ASSERT_NE(header, 0u);
  ASSERT_EQ(writer.command("zero"), "zeroed");
  SteppedMemory memory(writer.pid(), header);
  // The writer finishes its update just before the reader's third look at the header.
  memory.before_header_read = [&](int n) {
    if (n == 3) EXPECT_EQ(writer.command("restore").rfind("restored ", 0), 0u);
  };
  auto read = read_context(memory, header, quick(16));
  ASSERT_TRUE(read.ok()) << read.error->message();
  ASSERT_EQ(read.retries.size(), 2u);
  for (const auto& r : read.retries) EXPECT_EQ(r.reason, RetryReason::TimestampZero);
  EXPECT_EQ(memory.header_reads, 3);
  EXPECT_EQ(memory.timestamp_reads, 1);
  EXPECT_EQ(service_name_of(read), "checkout");
}

TEST(ProcessContextLive, ReaderRule_PCTXR_03_GivesUpWhenTheTimestampStaysZero) {
  Writer writer;
  const std::uint64_t header = writer.publish("checkout");
  ASSERT_NE(header, 0u);
  ASSERT_EQ(writer.command("zero"), "zeroed");
  SteppedMemory memory(writer.pid(), header);
  auto read = read_context(memory, header, quick(5));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error->kind, ErrorKind::kNotReady) << read.error->message();
  EXPECT_EQ(read.stage, ReadStage::Retries);
  EXPECT_EQ(read.retries.size(), 5u);
  EXPECT_EQ(memory.header_reads, 6);  // the first read and five retries
  EXPECT_EQ(memory.other_reads, 0);   // no payload copied from a context being written
  EXPECT_TRUE(read.payload.empty());
}

TEST(ProcessContextLive, ReaderRule_PCTXR_04_StartsOverWhenTheTimestampChangedDuringTheCopy) {
  Writer writer;
  const std::uint64_t header = writer.publish("before");
  ASSERT_NE(header, 0u);
  SteppedMemory memory(writer.pid(), header);
  // The payload is copied; before the reader looks at the timestamp again, the writer updates.
  memory.before_timestamp_reread = [&](int n) {
    if (n == 1) EXPECT_EQ(writer.command("update after").rfind("updated ", 0), 0u);
  };
  auto read = read_context(memory, header, quick(16));
  ASSERT_TRUE(read.ok()) << read.error->message();
  ASSERT_EQ(read.retries.size(), 1u);
  EXPECT_EQ(read.retries[0].reason, RetryReason::TimestampChanged);
  EXPECT_NE(read.retries[0].timestamp_before, read.retries[0].timestamp_after);
  EXPECT_GT(read.retries[0].timestamp_after, read.retries[0].timestamp_before);
  // The copy made before the update was dropped: what is returned is the update's.
  EXPECT_EQ(service_name_of(read), "after");
  EXPECT_EQ(read.header->published_at_ns, read.retries[0].timestamp_after);
}

TEST(ProcessContextLive, ReaderRule_PCTXR_04_GivesUpWhenEveryCopyIsTorn) {
  Writer writer;
  const std::uint64_t header = writer.publish("checkout");
  ASSERT_NE(header, 0u);
  SteppedMemory memory(writer.pid(), header);
  memory.before_timestamp_reread = [&](int) { EXPECT_EQ(writer.command("bump").rfind("bumped ", 0), 0u); };
  auto read = read_context(memory, header, quick(3));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error->kind, ErrorKind::kKeptChanging) << read.error->message();
  EXPECT_EQ(read.stage, ReadStage::Retries);
  ASSERT_EQ(read.retries.size(), 3u);
  for (const auto& r : read.retries) EXPECT_EQ(r.reason, RetryReason::TimestampChanged);
  EXPECT_EQ(memory.timestamp_reads, 4);
}

TEST(ProcessContextLive, ReaderRule_PCTXR_06_TheTimestampIsTheCacheKey) {
  Writer writer;
  const std::uint64_t header = writer.publish("first");
  ASSERT_NE(header, 0u);
  SteppedMemory memory(writer.pid(), header);
  CachedContextReader reader(memory, header, quick(4));
  EXPECT_EQ(service_name_of(reader.refresh()), "first");
  EXPECT_FALSE(reader.last_refresh_was_cached());
  const int copies = memory.other_reads;
  EXPECT_EQ(copies, 1);
  // Nothing changed: one 8-byte read, no copy.
  EXPECT_EQ(service_name_of(reader.refresh()), "first");
  EXPECT_TRUE(reader.last_refresh_was_cached());
  EXPECT_EQ(memory.other_reads, copies);
  // An update moves the timestamp: read again.
  ASSERT_EQ(writer.command("update second").rfind("updated ", 0), 0u);
  EXPECT_EQ(service_name_of(reader.refresh()), "second");
  EXPECT_FALSE(reader.last_refresh_was_cached());
  EXPECT_EQ(memory.other_reads, copies + 1);
  // Mid-update (timestamp 0) is never a cache hit.
  ASSERT_EQ(writer.command("zero"), "zeroed");
  const auto& mid = reader.refresh();
  EXPECT_FALSE(reader.last_refresh_was_cached());
  EXPECT_EQ(mid.error->kind, ErrorKind::kNotReady);
}

}  // namespace
}  // namespace tracecorr::process_context
