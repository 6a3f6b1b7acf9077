// The process context's writer checks (otel_process_context/checks.hpp) over
// snapshots built by hand: every requirement one look can judge, met and
// broken, and what a read that could not reach a rule makes of it.
#include <gtest/gtest.h>

#include <functional>

#include "otel_process_context/checks.hpp"
#include "otel_process_context/inspect/inspect.hpp"
#include "otel_process_context/registry.hpp"
#include "tracecorr/protocol.hpp"

namespace tracecorr::otel_process_context {
namespace {

using otlp::AttributeValue;
using Outcome = Finding::Outcome;

constexpr std::uint64_t kSecond = 1000000000ull;
constexpr std::uint64_t kMappingAt = 0x7f0000010000, kPayloadAt = 0x7f0000020000;

pc::Payload conforming_payload() {
  pc::Payload p;
  p.has_resource = true;
  p.resource = {{"service.name", AttributeValue("checkout")}, {"service.instance.id", AttributeValue("627cc493")}};
  p.attributes = {{"threadlocal.schema_version", AttributeValue("tls_v1")}};
  return p;
}

pc::MappingSnapshot mapping_with(std::vector<std::uint8_t> payload, std::uint64_t at = kMappingAt) {
  pc::MappingSnapshot m;
  m.mapping.mapping.start = at;
  m.mapping.mapping.end = at + 0x10000;
  m.mapping.mapping.read = m.mapping.mapping.write = true;
  m.mapping.mapping.path = "/memfd:OTEL_CTX (deleted)";
  m.mapping.kind = pc::MappingKind::Memfd;
  m.mapping.dont_fork = true;
  pc::Header h;
  std::copy(pc::kSignature.begin(), pc::kSignature.end(), h.signature.begin());
  h.version = 2;
  h.payload_size = static_cast<std::uint32_t>(payload.size());
  h.published_at_ns = 950 * kSecond;
  h.payload = kPayloadAt;
  m.read.address = at;
  m.read.header = h;
  m.read.payload = std::move(payload);
  m.decoded = pc::decode_payload(m.read.payload);
  return m;
}

// A conforming writer: one memfd mapping, rw-p, dc, version 2, a boot-time timestamp, a small payload.
pc::Snapshot conforming() {
  pc::Snapshot s;
  s.pid = 42;
  s.boottime_now_ns = 1000 * kSecond;
  s.process_start_boottime_ns = 900 * kSecond;
  s.clock_tick_ns = 10000000;
  s.mappings.push_back(mapping_with(pc::encode_payload(conforming_payload())));
  return s;
}

// A read that failed at `stage` with `kind` (the header kept, as the reader keeps the last one).
void fail_read(pc::MappingSnapshot& m, pc::ReadStage stage, ErrorKind kind) {
  m.read.stage = stage;
  m.read.error = make_error(kind, "test failure", "process context header at " + hex_address(m.read.address));
  m.read.payload.clear();
  m.decoded.reset();
}

const Finding& finding(const std::vector<Finding>& findings, std::string_view id) {
  for (const auto& f : findings)
    if (f.requirement == id) return f;
  static const Finding none{"(none)"};
  ADD_FAILURE() << "no finding for " << id;
  return none;
}

TEST(ProcessContextChecks, EveryRuleTheSnapshotJudgesIsInTheRegistryInOrder) {
  std::size_t last = 0;
  for (auto id : kSnapshotRequirements) {
    const auto* r = spec::find_requirement(id);
    ASSERT_NE(r, nullptr) << id;
    EXPECT_EQ(r->role, Role::Agent) << id << ": the writer is the judged side";
    EXPECT_EQ(r->role_name, "writer");
    std::size_t rank = static_cast<std::size_t>(r - spec::kRequirements.data());
    EXPECT_GE(rank, last) << id;
    last = rank;
  }
  EXPECT_EQ(spec::find_requirement("PCTXR-01")->role, Role::Profiler);
}

TEST(ProcessContextChecks, TheRegistryNamesTheMappingsTheEngineFinds) {
  EXPECT_EQ(pc::name_prefix(pc::MappingKind::AnonShmem), spec::kMappingNameAnonShmem);
  EXPECT_EQ(pc::name_prefix(pc::MappingKind::Anon), spec::kMappingNameAnon);
  EXPECT_EQ(pc::name_prefix(pc::MappingKind::Memfd), spec::kMappingNameMemfd);
}

TEST(ProcessContextChecks, AConformingWriterMeetsEveryRule) {
  auto findings = check_snapshot(conforming());
  ASSERT_EQ(findings.size(), kSnapshotRequirements.size());
  for (std::size_t i = 0; i < findings.size(); ++i) {
    EXPECT_EQ(findings[i].requirement, kSnapshotRequirements[i]);
    EXPECT_EQ(findings[i].outcome, Outcome::Met) << findings[i].requirement << ": " << findings[i].reason;
    EXPECT_GE(findings[i].evidence_count, 1u) << findings[i].requirement;
  }
}

struct Case {
  const char* name;
  std::string_view id;
  std::function<void(pc::Snapshot&)> change;
  Outcome outcome;
  std::string_view reason;  // a part of the reason
};

class ProcessContextRule : public testing::TestWithParam<Case> {};

TEST_P(ProcessContextRule, JudgesItsRequirement) {
  const Case& c = GetParam();
  pc::Snapshot s = conforming();
  c.change(s);
  auto findings = check_snapshot(s);
  const Finding& f = finding(findings, c.id);
  EXPECT_EQ(f.outcome, c.outcome) << f.reason;
  EXPECT_NE(finding_message(f).find(c.reason), std::string::npos) << finding_message(f);
}

pc::MappingSnapshot& first(pc::Snapshot& s) { return s.mappings.front(); }

std::vector<std::uint8_t> with_trailing_bytes() {
  auto bytes = pc::encode_payload(conforming_payload());
  bytes.insert(bytes.end(), 7, 0);
  return bytes;
}

pc::Payload payload_with(std::function<void(pc::Payload&)> change) {
  pc::Payload p = conforming_payload();
  change(p);
  return p;
}

const Case kCases[] = {
    {"NoMapping", "PCTX-01", [](pc::Snapshot& s) { s.mappings.clear(); }, Outcome::Violated, "no mapping in /proc/PID/maps"},
    {"HeaderUnreadable", "PCTX-01",
     [](pc::Snapshot& s) {
       fail_read(first(s), pc::ReadStage::Header, ErrorKind::kUnmapped);
       first(s).read.header.reset();
     },
     Outcome::Violated, "test failure"},
    {"BadSignature", "PCTX-02",
     [](pc::Snapshot& s) {
       std::copy_n("OTEL-CTX", 8, first(s).read.header->signature.begin());
       fail_read(first(s), pc::ReadStage::Header, ErrorKind::kBadSignature);
     },
     Outcome::Violated, "\"OTEL-CTX\""},
    {"BadVersion", "PCTX-03",
     [](pc::Snapshot& s) {
       first(s).read.header->version = 3;
       fail_read(first(s), pc::ReadStage::Header, ErrorKind::kUnsupportedVersion);
     },
     Outcome::Violated, "version 3"},
    {"DevelopmentVersion", "PCTX-03", [](pc::Snapshot& s) { first(s).read.header->version = 1; }, Outcome::Tolerated,
     "for development"},
    {"PayloadUnreadable", "PCTX-04", [](pc::Snapshot& s) { fail_read(first(s), pc::ReadStage::Payload, ErrorKind::kUnmapped); },
     Outcome::Violated, "test failure"},
    {"PayloadSizeLargerThanTheMessage", "PCTX-04", [](pc::Snapshot& s) { first(s) = mapping_with(with_trailing_bytes()); },
     Outcome::Violated, "the last 7 byte(s) are not part of it"},
    {"TrailingBytesLeaveTheMessageDecodable", "PCTX-05", [](pc::Snapshot& s) { first(s) = mapping_with(with_trailing_bytes()); },
     Outcome::Met, "before the trailing bytes"},
    {"NotProtobuf", "PCTX-05",
     [](pc::Snapshot& s) {
       std::string text = "not a protobuf";
       first(s) = mapping_with({text.begin(), text.end()});
     },
     Outcome::Violated, "not a ProcessContext"},
    {"WrongWireType", "PCTX-05", [](pc::Snapshot& s) { first(s) = mapping_with({0x08, 0x01}); }, Outcome::Violated,
     "wire type 0"},
    {"RealtimeClock", "PCTX-06", [](pc::Snapshot& s) { first(s).read.header->published_at_ns = 1767225600ull * kSecond; },
     Outcome::Violated, "later than now"},
    {"BeforeTheProcessStarted", "PCTX-06", [](pc::Snapshot& s) { first(s).read.header->published_at_ns = 800 * kSecond; },
     Outcome::Violated, "before the process started"},
    {"StartUnknownOnlyNowBounds", "PCTX-06",
     [](pc::Snapshot& s) {
       s.process_start_boottime_ns.reset();
       first(s).read.header->published_at_ns = 1;
     },
     Outcome::Met, "[?"},
    {"NoDontFork", "PCTX-11", [](pc::Snapshot& s) { first(s).mapping.dont_fork = false; }, Outcome::Violated,
     "not marked MADV_DONTFORK"},
    {"SmapsUnreadable", "PCTX-11", [](pc::Snapshot& s) { first(s).mapping.dont_fork.reset(); }, Outcome::KitError,
     "could not be read"},
    {"TwoMappings", "PCTX-12",
     [](pc::Snapshot& s) { s.mappings.push_back(mapping_with(pc::encode_payload(conforming_payload()), 0x7f0000090000)); },
     Outcome::Violated, "2 process context mappings"},
    {"DuplicateResourceKeys", "PCTX-15",
     [](pc::Snapshot& s) {
       first(s) = mapping_with(pc::encode_payload(
           payload_with([](pc::Payload& p) { p.resource.push_back({"service.name", AttributeValue("again")}); })));
     },
     Outcome::Violated, "resource: \"service.name\""},
    {"DuplicateAttributeKeys", "PCTX-15",
     [](pc::Snapshot& s) {
       first(s) = mapping_with(pc::encode_payload(payload_with(
           [](pc::Payload& p) { p.attributes.push_back({"threadlocal.schema_version", AttributeValue("x")}); })));
     },
     Outcome::Violated, "attributes: \"threadlocal.schema_version\""},
    {"ThreadLocalInTheResource", "PCTX-16",
     [](pc::Snapshot& s) {
       first(s) = mapping_with(pc::encode_payload(payload_with([](pc::Payload& p) {
         p.resource.push_back({"threadlocal.schema_version", AttributeValue("tls_v1")});
         p.attributes.clear();
       })));
     },
     Outcome::Violated, "threadlocal.* keys in the resource"},
    {"SharedMapping", "PCTX-17", [](pc::Snapshot& s) { first(s).mapping.mapping.shared = true; }, Outcome::Violated,
     "shared (MAP_SHARED)"},
    {"ReadOnlyMapping", "PCTX-17", [](pc::Snapshot& s) { first(s).mapping.mapping.write = false; }, Outcome::Violated,
     "expected rw-p, found r--p"},
    {"OversizedPayload", "PCTX-18", [](pc::Snapshot& s) { first(s).read.header->payload_size = 100 * 1024; },
     Outcome::Violated, "exceeds 65536"},
    {"PayloadPastTheReadersBound", "PCTX-18",
     [](pc::Snapshot& s) {
       first(s).read.header->payload_size = 4u << 20;
       fail_read(first(s), pc::ReadStage::Payload, ErrorKind::kTooLong);
     },
     Outcome::Violated, "exceeds 65536"},
    // What a read that could not reach a rule makes of it.
    {"NeverSettledIsInconclusive", "PCTX-05",
     [](pc::Snapshot& s) { fail_read(first(s), pc::ReadStage::Retries, ErrorKind::kNotReady); }, Outcome::KitError,
     "no consistent read"},
    {"PayloadPastTheBoundIsNotJudgedForItsSize", "PCTX-04",
     [](pc::Snapshot& s) {
       first(s).read.header->payload_size = 4u << 20;
       fail_read(first(s), pc::ReadStage::Payload, ErrorKind::kTooLong);
     },
     Outcome::NotApplicable, "not read"},
    {"BeyondTracecorrsDecodeBoundsIsInconclusive", "PCTX-15",
     [](pc::Snapshot& s) {
       first(s).decoded = Expected<pc::Payload>(make_error(ErrorKind::kTooLong, "deep", "payload byte 9"));
     },
     Outcome::KitError, "beyond tracecorr's decode bounds"},
    {"WithoutAMappingTheRestIsNotApplicable", "PCTX-05", [](pc::Snapshot& s) { s.mappings.clear(); },
     Outcome::NotApplicable, "no process context mapping"},
};

INSTANTIATE_TEST_SUITE_P(Cases, ProcessContextRule, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.id.substr(0, 4)) + std::string(info.param.id.substr(5)) + "_" +
                                  info.param.name;
                         });

TEST(ProcessContextChecks, WithSeveralMappingsTheWorstStandsAndNamesItsMapping) {
  pc::Snapshot s = conforming();
  s.mappings.push_back(mapping_with(pc::encode_payload(conforming_payload()), 0x7f0000090000));
  s.mappings.back().mapping.dont_fork = false;
  auto findings = check_snapshot(s);
  const Finding& dontfork = finding(findings, "PCTX-11");
  EXPECT_EQ(dontfork.outcome, Outcome::Violated);
  EXPECT_EQ(dontfork.reason.rfind("memfd mapping at 0x7f0000090000: ", 0), 0u) << dontfork.reason;
  const Finding& signature = finding(findings, "PCTX-02");
  EXPECT_EQ(signature.outcome, Outcome::Met);
  EXPECT_EQ(signature.evidence_count, 2u);
}

TEST(ProcessContextChecks, ReadErrorKindsMapToTheirRules) {
  pc::ContextRead read;
  auto with = [&](pc::ReadStage stage, ErrorKind kind) {
    read.stage = stage;
    read.error = make_error(kind, "x");
    return requirement_of_read_error(read);
  };
  EXPECT_EQ(requirement_of_read_error(read), "");
  EXPECT_EQ(with(pc::ReadStage::Header, ErrorKind::kBadSignature), "PCTX-02");
  EXPECT_EQ(with(pc::ReadStage::Header, ErrorKind::kUnsupportedVersion), "PCTX-03");
  EXPECT_EQ(with(pc::ReadStage::Header, ErrorKind::kUnmapped), "PCTX-01");
  EXPECT_EQ(with(pc::ReadStage::Header, ErrorKind::kGone), "");
  EXPECT_EQ(with(pc::ReadStage::Payload, ErrorKind::kUnmapped), "PCTX-04");
  EXPECT_EQ(with(pc::ReadStage::Payload, ErrorKind::kTooLong), "PCTX-18");
  EXPECT_EQ(with(pc::ReadStage::Retries, ErrorKind::kNotReady), "");
  EXPECT_EQ(with(pc::ReadStage::Retries, ErrorKind::kKeptChanging), "");
  EXPECT_EQ(requirement_of_decode_error(make_error(ErrorKind::kMalformed, "x")), "PCTX-05");
  EXPECT_EQ(requirement_of_decode_error(make_error(ErrorKind::kTooLong, "x")), "");
}

TEST(ProcessContextInspect, ShowsTheContextTypedAndListsWhatTheWriterGetsWrong) {
  Inspection in;
  in.snapshot = conforming();
  in.snapshot.mappings.front().mapping.dont_fork = false;
  in.snapshot.mappings.front().read.retries.push_back({pc::RetryReason::TimestampZero, 0, 0});
  for (auto& f : check_snapshot(in.snapshot))
    if (f.outcome == Outcome::Violated) in.findings.push_back(f);
  auto j = to_json(in);
  const auto& m = j["mappings"][0];
  EXPECT_EQ(m["kind"], "memfd");
  EXPECT_EQ(m["dont_fork"], false);
  EXPECT_EQ(m["header"]["version"], 2);
  EXPECT_EQ(m["header"]["age_ns"], 50 * kSecond);
  EXPECT_EQ(m["read"]["retry_count"], 1);
  EXPECT_EQ(m["read"]["retries"][0]["reason"], "timestamp-zero");
  EXPECT_EQ(m["payload"]["resource"][0]["key"], "service.name");
  EXPECT_EQ(m["payload"]["resource"][0]["type"], "string");
  EXPECT_EQ(m["payload"]["resource"][0]["value"], "checkout");
  EXPECT_EQ(m["payload"]["threadlocal_keys"]["attributes"][0], "threadlocal.schema_version");
  ASSERT_EQ(j["findings"].size(), 1u);
  EXPECT_EQ(j["findings"][0]["requirement"], "PCTX-11");
  EXPECT_EQ(j["findings"][0]["level"], "SHOULD");

  std::string text = render_text(in);
  for (const char* part : {"/memfd:OTEL_CTX (deleted)", "MADV_DONTFORK NO", "version 2", "50.000000000 s ago",
                           "after 1 retry (timestamp-zero)", "service.name", "\"checkout\"", "threadlocal.schema_version",
                           "PCTX-11  SHOULD"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
}

TEST(ProcessContextInspect, ValuesKeepTheirTypesInJson) {
  EXPECT_EQ(value_json(AttributeValue(std::int64_t{7})), 7);
  EXPECT_EQ(value_json(AttributeValue(true)), true);
  EXPECT_EQ(value_json(AttributeValue(AttributeValue::Bytes{0xab, 0x01})), (nlohmann::json{{"bytes", "ab01"}}));
  EXPECT_EQ(value_json(AttributeValue(AttributeValue::Array{AttributeValue("a"), AttributeValue(1.5)})),
            (nlohmann::json{"a", 1.5}));
  EXPECT_EQ(value_json(AttributeValue(AttributeValue::KvList{{"k", AttributeValue("v")}})),
            (nlohmann::json{{{"key", "k"}, {"type", "string"}, {"value", "v"}}}));
  EXPECT_TRUE(value_json(AttributeValue()).is_null());
}

TEST(ProcessContextInspect, TargetTextIsEscaped) {
  Inspection in;
  in.snapshot = conforming();
  in.snapshot.mappings.front() = mapping_with(pc::encode_payload(payload_with([](pc::Payload& p) {
    p.resource.push_back({"evil\nkey", AttributeValue("line\x1b[31m")});
  })));
  in.snapshot.mappings.front().mapping.mapping.path = "/memfd:OTEL_CTX\x1b[2J (deleted)";
  std::string text = render_text(in);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("evil\\x0akey"), std::string::npos) << text;
}

}  // namespace
}  // namespace tracecorr::otel_process_context
