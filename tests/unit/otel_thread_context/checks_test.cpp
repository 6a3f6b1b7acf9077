// The thread context's writer checks (otel_thread_context/checks.hpp) over
// modules, reference data and records built by hand: every rule one look
// judges, met and broken, and what each finding says about where.
#include <gtest/gtest.h>

#include <elf.h>

#include <cstring>
#include <string>
#include <vector>

#include "otel_thread_context/checks.hpp"
#include "otel_thread_context/registry.hpp"
#include "tracecorr/protocol.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using otlp::AttributeValue;
using Outcome = Finding::Outcome;

const Finding& finding(const std::vector<Finding>& findings, std::string_view id) {
  for (const auto& f : findings)
    if (f.requirement == id) return f;
  static const Finding none{"(none)"};
  ADD_FAILURE() << "no finding for " << id;
  return none;
}

// ---- the variable ----

// A TLSDESC library exporting the variable as the reference writer does.
AgentLibrary reference_library() {
  AgentLibrary lib;
  lib.pid = 42;
  lib.path = "/opt/app/libotel-tctx-writer.so";
  lib.elf.machine = elf::Machine::X86_64;
  elf::Symbol s;
  s.name = std::string(spec::kTlsSymbol);
  s.size = 8;
  s.type = STT_TLS;
  s.binding = STB_GLOBAL;
  s.visibility = STV_DEFAULT;
  s.section = 20;
  lib.elf.tls = s;
  lib.elf.tls_access.dialect = elf::TlsDialect::Descriptor;
  lib.elf.tls_access.relocations = {"R_X86_64_TLSDESC"};
  lib.elf.tls_access.descriptor_vaddr = 0x3fe0;
  return lib;
}

TEST(ThreadContextVariable, EveryRuleInTheRegistryInOrder) {
  auto findings = check_variable(reference_library());
  ASSERT_EQ(findings.size(), kVariableRequirements.size());
  for (std::size_t i = 0; i < findings.size(); ++i) {
    EXPECT_EQ(findings[i].requirement, kVariableRequirements[i]);
    EXPECT_NE(spec::find_requirement(findings[i].requirement), nullptr);
    EXPECT_EQ(findings[i].outcome, Outcome::Met) << findings[i].requirement << ": " << findings[i].reason;
  }
}

TEST(ThreadContextVariable, ASymbolReadersCannotResolveBreaksTctx01) {
  auto lib = reference_library();
  lib.elf.tls->visibility = STV_HIDDEN;
  EXPECT_EQ(finding(check_variable(lib), "TCTX-01").outcome, Outcome::Violated);
  lib = reference_library();
  lib.elf.tls->binding = STB_LOCAL;
  auto f = finding(check_variable(lib), "TCTX-01");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("LOCAL"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find(lib.path), std::string::npos) << "names the module: " << f.reason;
  lib = reference_library();
  lib.elf.tls->visibility = STV_PROTECTED;
  lib.elf.tls->binding = STB_WEAK;
  EXPECT_EQ(finding(check_variable(lib), "TCTX-01").outcome, Outcome::Met);
  lib.elf.tls.reset();
  auto all = check_variable(lib);
  EXPECT_EQ(finding(all, "TCTX-01").outcome, Outcome::Violated);
  EXPECT_EQ(finding(all, "TCTX-02").outcome, Outcome::NotApplicable);
}

TEST(ThreadContextVariable, AnObjectIsNotThreadLocal) {
  auto lib = reference_library();
  lib.elf.tls->type = STT_OBJECT;
  auto all = check_variable(lib);
  EXPECT_EQ(finding(all, "TCTX-02").outcome, Outcome::Violated);
  EXPECT_EQ(finding(all, "TCTX-04").outcome, Outcome::NotApplicable);
}

TEST(ThreadContextVariable, SizeIsOnePointerZeroTolerated) {
  auto lib = reference_library();
  lib.elf.tls->size = 16;
  EXPECT_EQ(finding(check_variable(lib), "TCTX-03").outcome, Outcome::Violated);
  lib.elf.tls->size = 0;
  EXPECT_EQ(finding(check_variable(lib), "TCTX-03").outcome, Outcome::Tolerated);
}

TEST(ThreadContextVariable, LocalDynamicBreaksTctx04) {
  // A TLSDESC relocation with no symbol though the variable is exported: the module's base.
  auto lib = reference_library();
  lib.elf.tls_access.named_by_addend_only = true;
  auto f = finding(check_variable(lib), "TCTX-04");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("local-dynamic"), std::string::npos) << f.reason;
  // The same relocation for a protected variable is the linker binding it locally.
  lib.elf.tls->visibility = STV_PROTECTED;
  EXPECT_EQ(finding(check_variable(lib), "TCTX-04").outcome, Outcome::Met);
  // The traditional local-dynamic: only a module relocation without a symbol.
  lib = reference_library();
  lib.elf.tls_access = {};
  lib.elf.tls_access.own_module_id_vaddr = 0x3ff0;
  EXPECT_EQ(finding(check_variable(lib), "TCTX-04").outcome, Outcome::Violated);
}

TEST(ThreadContextVariable, LegacyDialectsAreWarnedAbout) {
  auto lib = reference_library();
  lib.elf.tls_access = {};
  lib.elf.tls_access.dialect = elf::TlsDialect::Traditional;
  lib.elf.tls_access.relocations = {"R_X86_64_DTPMOD64", "R_X86_64_DTPOFF64"};
  lib.elf.tls_access.module_id_vaddr = 0x3fe0;
  auto all = check_variable(lib);
  auto f = finding(all, "TCTX-05");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_EQ(level_of(f), "SHOULD") << "a warning, not a failure";
  EXPECT_NE(f.reason.find("general-dynamic"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("-mtls-dialect=gnu2"), std::string::npos) << f.reason;
  EXPECT_EQ(finding(all, "TCTX-04").outcome, Outcome::Met) << "allowed";

  lib.elf.tls_access.relocations = {"R_X86_64_TPOFF64"};
  lib.elf.tls_access.module_id_vaddr.reset();
  lib.elf.tls_access.tp_offset_vaddr = 0x3fe8;
  lib.elf.machine = elf::Machine::AArch64;
  f = finding(check_variable(lib), "TCTX-05");
  EXPECT_NE(f.reason.find("initial-exec"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("-mtls-dialect=desc"), std::string::npos) << f.reason;

  lib = reference_library();
  lib.elf.tls_access.mixed = true;
  EXPECT_EQ(finding(check_variable(lib), "TCTX-05").outcome, Outcome::Violated);
}

TEST(ThreadContextVariable, AnExecutablesAccessesAreTheLinkers) {
  auto lib = reference_library();
  lib.path = "/opt/app/server";
  lib.elf.executable = true;
  lib.elf.tls_access = {};
  auto all = check_variable(lib);
  EXPECT_EQ(finding(all, "TCTX-01").outcome, Outcome::Met);
  EXPECT_EQ(finding(all, "TCTX-04").outcome, Outcome::NotApplicable);
  EXPECT_EQ(finding(all, "TCTX-05").outcome, Outcome::NotApplicable);
}

// ---- the reference data ----

ReferenceData reference_data() {
  ReferenceData d;
  d.schema_version_value = AttributeValue("tlsdesc_v1_dev");
  d.schema_version = "tlsdesc_v1_dev";
  d.key_map_value = AttributeValue(AttributeValue::Array{AttributeValue("http.route")});
  d.key_map = KeyMap{"http.route"};
  return d;
}

TEST(ThreadContextReferenceData, BothKeysMetBothSchemasAccepted) {
  auto all = check_reference_data(reference_data(), true);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].requirement, "TCTX-06");
  EXPECT_EQ(all[0].outcome, Outcome::Met);
  EXPECT_EQ(all[1].requirement, "TCTX-07");
  EXPECT_EQ(all[1].outcome, Outcome::Met);
  auto d = reference_data();
  d.schema_version = "tls_v1";
  d.schema_version_value = AttributeValue("tls_v1");
  EXPECT_EQ(finding(check_reference_data(d, true), "TCTX-06").outcome, Outcome::Met);
}

TEST(ThreadContextReferenceData, SchemaVersionMissingWrongTypeOrUnknown) {
  auto d = reference_data();
  d.schema_version_value.reset();
  d.schema_version.reset();
  EXPECT_EQ(finding(check_reference_data(d, true), "TCTX-06").outcome, Outcome::Violated);
  d.schema_version_value = AttributeValue(std::int64_t{1});
  auto f = finding(check_reference_data(d, true), "TCTX-06");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("int"), std::string::npos) << f.reason;
  d.schema_version_value = AttributeValue("go_pprof_labels_v1");
  d.schema_version = "go_pprof_labels_v1";
  EXPECT_EQ(finding(check_reference_data(d, true), "TCTX-06").outcome, Outcome::Violated);
}

TEST(ThreadContextReferenceData, AMissingKeyMapIsToleratedUntilARecordCarriesAnEntry) {
  auto d = reference_data();
  d.key_map_value.reset();
  d.key_map.reset();
  EXPECT_EQ(finding(check_reference_data(d, false), "TCTX-07").outcome, Outcome::Tolerated);
  EXPECT_EQ(finding(check_reference_data(d, true), "TCTX-07").outcome, Outcome::Violated);
  d.key_map_value = AttributeValue("http.route,http.method");
  auto f = finding(check_reference_data(d, false), "TCTX-07");
  EXPECT_EQ(f.outcome, Outcome::Violated) << "a string is no map, whatever the records carry";
  EXPECT_NE(f.reason.find("string"), std::string::npos) << f.reason;
  d.key_map_value = AttributeValue(AttributeValue::Array(257, AttributeValue("k")));
  f = finding(check_reference_data(d, false), "TCTX-07");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("257"), std::string::npos) << f.reason;
  auto none = check_reference_data(std::nullopt, true);
  EXPECT_EQ(none[0].outcome, Outcome::NotApplicable);
  EXPECT_EQ(none[1].outcome, Outcome::NotApplicable);
}

// ---- one record ----

constexpr std::uint64_t kRecordAt = 0x7f0000001000;

std::vector<std::uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

// The bytes a conforming writer publishes: ids, valid 1, sampled, two entries.
std::vector<std::uint8_t> conforming_bytes(std::vector<AttributeEntry> entries = {{0, 0, bytes_of("/work/0")},
                                                                                  {0, 1, bytes_of("GET")}}) {
  ThreadContextRecord h;
  h.trace_id.fill(0x7c);
  h.span_id.fill(0x5e);
  h.valid = 1;
  h.trace_flags = 1;
  return *encode_record(h, *encode_entries(entries));
}

RecordLook look_at(const std::vector<std::uint8_t>& bytes, std::uint64_t address = kRecordAt) {
  RecordLook l;
  l.tid = 1234;
  l.address = address;
  auto r = decode_record(bytes);
  EXPECT_TRUE(r.ok());
  if (r.ok()) l.record = *r;
  return l;
}

const KeyMap kMap{"http.route", "http.method", "tracecorr.note", "http.status_code"};

TEST(ThreadContextRecordChecks, AConformingRecordMeetsEveryRuleInOrder) {
  auto all = check_record(look_at(conforming_bytes()), &kMap);
  ASSERT_EQ(all.size(), kRecordRequirements.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].requirement, kRecordRequirements[i]);
    EXPECT_NE(spec::find_requirement(all[i].requirement), nullptr);
    EXPECT_EQ(all[i].outcome, Outcome::Met) << all[i].requirement << ": " << all[i].reason;
    EXPECT_NE(all[i].reason.find("thread 1234: record at 0x7f0000001000"), std::string::npos)
        << "every finding says where: " << all[i].reason;
  }
}

TEST(ThreadContextRecordChecks, AKeyOutsideTheMapBreaksTctx11AtItsOffset) {
  auto bytes = conforming_bytes({{0, 0, bytes_of("/work/0")}, {0, 7, bytes_of("x")}});
  auto f = finding(check_record(look_at(bytes), &kMap), "TCTX-11");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("key 7 in the entry at attrs_data offset 9 (record byte 37)"), std::string::npos) << f.reason;
  EXPECT_EQ(finding(check_record(look_at(bytes), nullptr), "TCTX-11").outcome, Outcome::NotApplicable);
}

TEST(ThreadContextRecordChecks, ASizeInTheWrongByteOrderBreaksTctx12) {
  // 275 bytes of entries, the size stored big-endian: 4865 natively.
  std::vector<AttributeEntry> entries{{0, 0, bytes_of("/work/0")}, {0, 1, bytes_of("GET")},
                                      {0, 2, std::vector<std::uint8_t>(254, 'e')}, {0, 3, bytes_of("200")}};
  auto bytes = conforming_bytes(entries);
  const std::uint16_t size = static_cast<std::uint16_t>(bytes.size() - 28);
  ASSERT_EQ(size, 275);
  const std::uint16_t swapped = static_cast<std::uint16_t>((size << 8) | (size >> 8));
  std::memcpy(bytes.data() + 26, &swapped, 2);
  bytes.resize(kRecordMaxBytes, 0);  // what the reader read: the writer's 1 KiB buffer
  auto all = check_record(look_at(bytes), &kMap);
  auto f = finding(all, "TCTX-12");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("4865"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("275"), std::string::npos) << f.reason;
  EXPECT_EQ(finding(all, "TCTX-20").outcome, Outcome::Violated);
  // A right record past 640 bytes is not mistaken for one.
  std::vector<AttributeEntry> big;
  for (int i = 0; i < 3; ++i) big.push_back({0, 0, std::vector<std::uint8_t>(250, 'a')});
  EXPECT_EQ(finding(check_record(look_at(conforming_bytes(big)), &kMap), "TCTX-12").outcome, Outcome::Met);
}

TEST(ThreadContextRecordChecks, ValidOtherThanZeroOrOneBreaksTctx13AndTheRecordIsIgnored) {
  auto bytes = conforming_bytes();
  bytes[24] = 2;
  auto all = check_record(look_at(bytes), &kMap);
  EXPECT_EQ(finding(all, "TCTX-13").outcome, Outcome::Violated);
  EXPECT_EQ(finding(all, "TCTX-16").outcome, Outcome::NotApplicable) << "TCTXR-08";
  EXPECT_EQ(finding(all, "TCTX-19").outcome, Outcome::Met);
  bytes[24] = 0;
  all = check_record(look_at(bytes), &kMap);
  EXPECT_EQ(finding(all, "TCTX-13").outcome, Outcome::Met) << "0: detached (in-place style)";
  EXPECT_EQ(finding(all, "TCTX-15").outcome, Outcome::NotApplicable);
}

TEST(ThreadContextRecordChecks, IdsAreBothSetOrBothZero) {
  auto bytes = conforming_bytes();
  std::fill(bytes.begin() + 16, bytes.begin() + 24, 0);
  auto f = finding(check_record(look_at(bytes), &kMap), "TCTX-15");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("span_id is zero"), std::string::npos) << f.reason;
  std::fill(bytes.begin(), bytes.begin() + 16, 0);
  EXPECT_EQ(finding(check_record(look_at(bytes), &kMap), "TCTX-15").outcome, Outcome::Met);
}

TEST(ThreadContextRecordChecks, AnEntryRunningPastTheSizeBreaksTctx16) {
  auto bytes = conforming_bytes();
  std::uint16_t size;
  std::memcpy(&size, bytes.data() + 26, 2);
  size = static_cast<std::uint16_t>(size - 3);
  std::memcpy(bytes.data() + 26, &size, 2);
  auto f = finding(check_record(look_at(bytes), &kMap), "TCTX-16");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("entry at attrs_data offset 9 (record byte 37) needs 5 bytes, only 2 left"), std::string::npos)
      << f.reason;
}

TEST(ThreadContextRecordChecks, ARecordCutByTheReadBoundIsNotBlamedForTheCut) {
  std::vector<AttributeEntry> many;
  for (int i = 0; i < 8; ++i) many.push_back({0, 0, std::vector<std::uint8_t>(200, 'a')});
  auto bytes = conforming_bytes(many);
  bytes.resize(kRecordMaxBytes);
  auto all = check_record(look_at(bytes), &kMap);
  EXPECT_EQ(finding(all, "TCTX-16").outcome, Outcome::Met) << finding(all, "TCTX-16").reason;
  EXPECT_EQ(finding(all, "TCTX-20").outcome, Outcome::Violated);
}

TEST(ThreadContextRecordChecks, ValuesAreUtf8CutAtACodePoint) {
  // 254 bytes of é then a lone lead byte: the writer cut inside a character.
  std::vector<std::uint8_t> cut;
  for (int i = 0; i < 127; ++i) cut.insert(cut.end(), {0xc3, 0xa9});
  cut.push_back(0xc3);
  auto f = finding(check_record(look_at(conforming_bytes({{0, 2, cut}})), &kMap), "TCTX-17");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("ends inside a multi-byte character"), std::string::npos) << f.reason;
  ASSERT_EQ(f.evidence.size(), 1u);
  EXPECT_EQ(f.evidence[0].bytes, cut);

  f = finding(check_record(look_at(conforming_bytes({{0, 2, {'a', 0xff, 'b'}}})), &kMap), "TCTX-17");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("not UTF-8 at byte 1"), std::string::npos) << f.reason;

  std::vector<std::uint8_t> whole(cut.begin(), cut.end() - 1);
  EXPECT_EQ(finding(check_record(look_at(conforming_bytes({{0, 2, whole}})), &kMap), "TCTX-17").outcome, Outcome::Met);
}

TEST(ThreadContextUtf8, NamesTheCutAndTheInvalid) {
  EXPECT_FALSE(utf8_problem(bytes_of("plain")));
  auto p = utf8_problem(std::vector<std::uint8_t>{'a', 0xe2, 0x82});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->offset, 1u);
  EXPECT_TRUE(p->cut_at_end);
  p = utf8_problem(std::vector<std::uint8_t>{0xe2, 0x82, 'a'});
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->cut_at_end) << "a missing continuation byte mid-value is no cut";
  p = utf8_problem(std::vector<std::uint8_t>{0xc0, 0x80});
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->cut_at_end) << "an overlong form is invalid, not cut";
}

TEST(ThreadContextRecordChecks, AnOddAddressBreaksTctx19) {
  auto f = finding(check_record(look_at(conforming_bytes(), kRecordAt + 1), &kMap), "TCTX-19");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_NE(f.reason.find("0x7f0000001001"), std::string::npos) << f.reason;
}

TEST(ThreadContextRecordChecks, Over640BytesIsAWarningAnUnreadableWindowTolerated) {
  std::vector<AttributeEntry> big;
  for (int i = 0; i < 3; ++i) big.push_back({0, 0, std::vector<std::uint8_t>(250, 'a')});
  auto f = finding(check_record(look_at(conforming_bytes(big)), &kMap), "TCTX-20");
  EXPECT_EQ(f.outcome, Outcome::Violated);
  EXPECT_EQ(level_of(f), "SHOULD");
  EXPECT_NE(f.reason.find("784 bytes"), std::string::npos) << f.reason;
  auto look = look_at(conforming_bytes());
  look.recommended_window_readable = false;
  EXPECT_EQ(finding(check_record(look, &kMap), "TCTX-20").outcome, Outcome::Tolerated);
}

TEST(ThreadContextRecordChecks, AnUnreadableRecordBreaksTctx12) {
  EXPECT_EQ(requirement_of_record_read_error(make_error(ErrorKind::kUnmapped, "nothing mapped")), "TCTX-12");
  EXPECT_EQ(requirement_of_record_read_error(make_error(ErrorKind::kGone, "exited")), "");
  EXPECT_EQ(requirement_of_record_read_error(make_error(ErrorKind::kNotAllocated, "no block yet")), "");
}

}  // namespace
}  // namespace tracecorr::otel_thread_context
