// Decoding OTLP exports (binary protobuf and JSON) into the tracecorr model,
// without a server. The receiver tests cover the HTTP side.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>

#include "otlp_test_support.hpp"

namespace tracecorr::otlp {
namespace {

using namespace test_support;
using Type = AttributeValue::Type;

TEST(OtlpDecodeProtobuf, DecodesSpanFieldsAndResource) {
  auto decoded = decode_protobuf(one_span_request().SerializeAsString());
  ASSERT_TRUE(decoded.ok()) << decoded.first_fatal->message();
  ASSERT_EQ(decoded.spans.size(), 1u);
  const ReceivedSpan& span = decoded.spans[0];
  EXPECT_EQ(to_hex(span.trace_id), kTraceIdHex);
  EXPECT_EQ(to_hex(span.span_id), kSpanIdHex);
  ASSERT_TRUE(span.parent_span_id.has_value());
  EXPECT_EQ(to_hex(*span.parent_span_id), kParentIdHex);
  EXPECT_EQ(span.name, "GET /cart");
  EXPECT_EQ(span.kind, SpanKind::Server);
  EXPECT_EQ(span.start_unix_nano, 1'700'000'000'000'000'000ull);
  EXPECT_EQ(span.end_unix_nano, 1'700'000'000'500'000'000ull);
  EXPECT_EQ(span.flags, 0x101u);
  EXPECT_TRUE(span.sampled());
  EXPECT_EQ(span.scope_name(), "tracecorr-test");
  ASSERT_NE(span.resource_attribute("service.name"), nullptr);
  EXPECT_EQ(*span.resource_attribute("service.name")->as_string(), "checkout");
}

// ATTR-02 depends on this: the attribute's OTLP type survives decoding.
TEST(OtlpDecodeProtobuf, KeepsAttributeTypesFaithfully) {
  auto request = one_span_request();
  auto* strings = add_attribute(request, "string_array")->mutable_array_value();
  strings->add_values()->set_string_value("YLQguzhR2dR6y5M9vnA5mw");
  strings->add_values()->set_string_value("TJMmu5gF-o-FiCwS6uckzg");
  add_attribute(request, "string")->set_string_value("YLQguzhR2dR6y5M9vnA5mw,TJMmu5gF-o-FiCwS6uckzg");
  auto* ints = add_attribute(request, "int_array")->mutable_array_value();
  ints->add_values()->set_int_value(1);
  ints->add_values()->set_int_value(-2);
  auto* mixed = add_attribute(request, "mixed_array")->mutable_array_value();
  mixed->add_values()->set_string_value("a");
  mixed->add_values()->set_bool_value(true);
  add_attribute(request, "empty_array")->mutable_array_value();
  add_attribute(request, "bool")->set_bool_value(false);
  add_attribute(request, "double")->set_double_value(2.5);
  add_attribute(request, "bytes")->set_bytes_value(std::string("\x00\xff", 2));
  auto* kv = add_attribute(request, "kvlist")->mutable_kvlist_value()->add_values();
  kv->set_key("inner");
  kv->mutable_value()->set_int_value(7);
  add_attribute(request, "empty");  // an AnyValue with nothing set

  auto decoded = decode_protobuf(request.SerializeAsString());
  ASSERT_TRUE(decoded.ok()) << decoded.first_fatal->message();
  const ReceivedSpan& span = decoded.spans.at(0);
  ASSERT_EQ(span.attributes.size(), 10u);
  EXPECT_TRUE(span.attribute("string_array")->is_string_array());
  EXPECT_EQ(span.attribute("string_array")->type_name(), "string-array");
  EXPECT_EQ(span.attribute("string_array")->string_array(),
            (std::vector<std::string>{"YLQguzhR2dR6y5M9vnA5mw", "TJMmu5gF-o-FiCwS6uckzg"}));
  EXPECT_EQ(span.attribute("string")->type(), Type::String);
  EXPECT_FALSE(span.attribute("string")->is_string_array());
  EXPECT_FALSE(span.attribute("int_array")->is_string_array());
  EXPECT_EQ(span.attribute("int_array")->type_name(), "int-array");
  EXPECT_EQ(span.attribute("int_array")->as_array()->at(1), AttributeValue(std::int64_t{-2}));
  EXPECT_EQ(span.attribute("mixed_array")->type_name(), "mixed-array");
  EXPECT_EQ(span.attribute("empty_array")->type_name(), "empty-array");
  EXPECT_EQ(span.attribute("bool")->type(), Type::Bool);
  EXPECT_EQ(span.attribute("double")->type(), Type::Double);
  EXPECT_EQ(span.attribute("bytes")->value, AttributeValue(AttributeValue::Bytes{0x00, 0xff}).value);
  EXPECT_EQ(span.attribute("kvlist")->type(), Type::KvList);
  EXPECT_EQ(span.attribute("empty")->type(), Type::Empty);
}

TEST(OtlpDecodeProtobuf, EmptyBodyIsAnEmptyExport) {
  auto decoded = decode_protobuf("");
  EXPECT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded.spans.empty());
}

TEST(OtlpDecodeProtobuf, GarbageIsAFatalProblem) {
  auto decoded = decode_protobuf(std::string("\x0a\xff\xff\xff\xff\x0f garbage", 15));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->reason, RejectReason::MalformedBody);
  EXPECT_NE(decoded.first_fatal->what.find("not a valid binary protobuf"), std::string::npos);
  EXPECT_TRUE(decoded.spans.empty());
}

TEST(OtlpDecodeProtobuf, WrongIdLengthNamesTheField) {
  auto request = one_span_request();
  request.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(0)->set_span_id("\x01\x02\x03\x04\x05\x06\x07");
  auto decoded = decode_protobuf(request.SerializeAsString());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->reason, RejectReason::InvalidSpan);
  EXPECT_EQ(decoded.first_fatal->where, "resourceSpans[0].scopeSpans[0].spans[0].spanId");
  EXPECT_NE(decoded.first_fatal->what.find("7 bytes"), std::string::npos);
}

TEST(OtlpDecodeProtobuf, AllZeroTraceIdIsInvalid) {
  auto request = one_span_request();
  request.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(0)->set_trace_id(std::string(16, '\0'));
  auto decoded = decode_protobuf(request.SerializeAsString());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->where, "resourceSpans[0].scopeSpans[0].spans[0].traceId");
}

TEST(OtlpDecodeProtobuf, InvalidUtf8IsFatalAndLocated) {
  auto request = one_span_request();
  add_attribute(request, "k")->set_string_value("ok\xc3\x28");
  auto decoded = decode_protobuf(request.SerializeAsString());
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->where, "resourceSpans[0].scopeSpans[0].spans[0].attributes[\"k\"]");
  EXPECT_NE(decoded.first_fatal->what.find("invalid UTF-8 at byte 2"), std::string::npos);
}

TEST(OtlpDecodeProtobuf, EmptyParentIsARootSpan) {
  auto request = one_span_request();
  request.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(0)->clear_parent_span_id();
  auto decoded = decode_protobuf(request.SerializeAsString());
  ASSERT_TRUE(decoded.ok());
  EXPECT_FALSE(decoded.spans.at(0).parent_span_id.has_value());
}

TEST(OtlpDecodeProtobuf, DuplicateAttributeKeepsFirstAndNotesIt) {
  auto request = one_span_request();
  add_attribute(request, "k")->set_string_value("first");
  add_attribute(request, "k")->set_int_value(2);
  auto decoded = decode_protobuf(request.SerializeAsString());
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded.spans.at(0).attribute("k")->as_string(), "first");
  ASSERT_EQ(decoded.problems.size(), 1u);
  EXPECT_FALSE(decoded.problems[0].fatal);
  EXPECT_NE(decoded.problems[0].what.find("duplicate"), std::string::npos);
}

TEST(OtlpDecodeProtobuf, EnforcesAttributeCountAndValueLength) {
  ReceiverLimits limits;
  limits.max_attributes_per_span = 2;
  limits.max_value_bytes = 14;  // "service.name" and the scope "tracecorr-test" still fit
  auto request = one_span_request();
  add_attribute(request, "a")->set_string_value("short");
  add_attribute(request, "b")->set_string_value("much too long a value");
  auto decoded = decode_protobuf(request.SerializeAsString(), limits);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->reason, RejectReason::LimitExceeded);
  EXPECT_NE(decoded.first_fatal->what.find("14-byte limit"), std::string::npos);

  request = one_span_request();
  for (const char* key : {"a", "b", "c"}) add_attribute(request, key)->set_string_value("x");
  decoded = decode_protobuf(request.SerializeAsString(), limits);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.first_fatal->what.find("3 attributes exceed the limit of 2"), std::string::npos);
}

TEST(OtlpDecodeProtobuf, RefusesDeepNesting) {
  ReceiverLimits limits;
  limits.max_nesting_depth = 4;
  auto request = one_span_request();
  pb_common::AnyValue* value = add_attribute(request, "deep");
  for (int i = 0; i < 10; ++i) value = value->mutable_array_value()->add_values();
  value->set_string_value("bottom");
  auto decoded = decode_protobuf(request.SerializeAsString(), limits);
  EXPECT_FALSE(decoded.ok());
}

TEST(OtlpDecodeJson, DecodesHexIdsAndStringOrNumberIntegers) {
  auto decoded = decode_json(one_span_json());
  ASSERT_TRUE(decoded.ok()) << decoded.first_fatal->message();
  const ReceivedSpan& span = decoded.spans.at(0);
  EXPECT_EQ(to_hex(span.trace_id), kTraceIdHex);
  EXPECT_EQ(to_hex(span.span_id), kSpanIdHex);
  EXPECT_EQ(to_hex(*span.parent_span_id), kParentIdHex);
  EXPECT_EQ(span.kind, SpanKind::Server);
  EXPECT_EQ(span.start_unix_nano, 1'700'000'000'000'000'000ull);  // a string
  EXPECT_EQ(span.end_unix_nano, 1'700'000'000'500'000'000ull);    // a number
  EXPECT_EQ(span.flags, 257u);
  EXPECT_EQ(*span.resource_attribute("service.name")->as_string(), "checkout");
}

TEST(OtlpDecodeJson, KeepsAttributeTypesFaithfully) {
  auto decoded = decode_json(one_span_json(R"([
    {"key":"string_array","value":{"arrayValue":{"values":[{"stringValue":"YLQguzhR2dR6y5M9vnA5mw"}]}}},
    {"key":"string","value":{"stringValue":"YLQguzhR2dR6y5M9vnA5mw"}},
    {"key":"int_array","value":{"arrayValue":{"values":[{"intValue":"1"},{"intValue":2}]}}},
    {"key":"double","value":{"doubleValue":"NaN"}},
    {"key":"bytes","value":{"bytesValue":"AP8="}},
    {"key":"kvlist","value":{"kvlistValue":{"values":[{"key":"a","value":{"boolValue":true}}]}}},
    {"key":"empty","value":{}}
  ])"));
  ASSERT_TRUE(decoded.ok()) << decoded.first_fatal->message();
  const ReceivedSpan& span = decoded.spans.at(0);
  EXPECT_EQ(span.attribute("string_array")->type_name(), "string-array");
  EXPECT_EQ(span.attribute("string")->type(), Type::String);
  EXPECT_EQ(span.attribute("int_array")->type_name(), "int-array");
  EXPECT_TRUE(std::isnan(std::get<double>(span.attribute("double")->value)));
  EXPECT_EQ(std::get<AttributeValue::Bytes>(span.attribute("bytes")->value), (AttributeValue::Bytes{0x00, 0xff}));
  EXPECT_EQ(span.attribute("kvlist")->type(), Type::KvList);
  EXPECT_EQ(span.attribute("empty")->type(), Type::Empty);
}

TEST(OtlpDecodeJson, Base64IdsGetAHint) {
  auto decoded = decode_json(one_span_json("[]", "APBnqgupArc="));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->where, "resourceSpans[0].scopeSpans[0].spans[0].spanId");
  EXPECT_NE(decoded.first_fatal->what.find("OTLP/JSON ids are hex"), std::string::npos);
}

TEST(OtlpDecodeJson, OneofWithTwoMembersIsRejected) {
  auto decoded = decode_json(one_span_json(R"([{"key":"k","value":{"stringValue":"a","intValue":1}}])"));
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.first_fatal->what.find("oneof"), std::string::npos);
}

TEST(OtlpDecodeJson, SyntaxErrorsAndWrongShapesAreFatal) {
  for (std::string_view body : {"", "{", "[]", "{\"resourceSpans\":{}}", "{\"resourceSpans\":[{\"scopeSpans\":[1]}]}",
                                "\xff\xfe"}) {
    auto decoded = decode_json(body);
    EXPECT_FALSE(decoded.ok()) << "accepted: " << body;
  }
  EXPECT_TRUE(decode_json("{}").ok());
  EXPECT_TRUE(decode_json(R"({"resourceSpans":[],"unknownKey":1})").ok());  // OTLP: ignore unknown fields
}

TEST(OtlpDecodeJson, DeepNestingIsRefusedBeforeParsing) {
  std::string body = std::string(100000, '[') + std::string(100000, ']');
  auto decoded = decode_json(body);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->reason, RejectReason::LimitExceeded);
}

TEST(OtlpDecodeJson, IntegerOutOfRangeIsFatal) {
  std::string body = one_span_json(R"([{"key":"k","value":{"intValue":"9223372036854775808"}}])");
  auto decoded = decode_json(body);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.first_fatal->where.find("intValue"), std::string::npos);
}

// The encoders are what tests and fixtures export with: both must round-trip.
TEST(OtlpEncode, ProtobufAndJsonRoundTrip) {
  ReceivedSpan span;
  from_hex(kTraceIdHex, span.trace_id);
  span.span_id = span_id(kSpanIdHex);
  span.name = "tx";
  span.kind = SpanKind::Consumer;
  span.start_unix_nano = 1;
  span.end_unix_nano = 2;
  span.flags = 1;
  span.attributes["ids"] = AttributeValue(AttributeValue::Array{AttributeValue("a"), AttributeValue("b")});
  span.attributes["n"] = AttributeValue(std::int64_t{-5});
  span.attributes["raw"] = AttributeValue(AttributeValue::Bytes{1, 2, 3, 4});
  span.set_resource_attributes({{"host.id", AttributeValue("h1")}});
  for (auto decode : {+[](const std::vector<ReceivedSpan>& s) { return decode_protobuf(encode_protobuf(s)); },
                      +[](const std::vector<ReceivedSpan>& s) { return decode_json(encode_json(s)); }}) {
    auto decoded = decode({span, span});
    ASSERT_TRUE(decoded.ok()) << decoded.first_fatal->message();
    ASSERT_EQ(decoded.spans.size(), 2u);
    EXPECT_EQ(decoded.spans[1].attributes, span.attributes);
    EXPECT_EQ(decoded.spans[1].resource_attributes(), span.resource_attributes());
    EXPECT_EQ(decoded.spans[1].kind, SpanKind::Consumer);
    EXPECT_FALSE(decoded.spans[1].parent_span_id.has_value());
  }
}

// A 1 MB resource attribute on 3000 spans (a 1.2 MB export) once took 3 GB:
// every span owned a copy. Both decoders keep one resource and one scope per
// entry, shared by its spans.
TEST(OtlpDecode, SharesResourceAndScopeAcrossSpans) {
  std::vector<ReceivedSpan> spans(3000);
  auto resource = std::make_shared<const Attributes>(Attributes{{"big", AttributeValue(std::string(1u << 20, 'r'))}});
  auto scope = std::make_shared<const Scope>(Scope{"lib", "1.0"});
  for (std::size_t i = 0; i < spans.size(); ++i) {
    from_hex(kTraceIdHex, spans[i].trace_id);
    spans[i].span_id = span_id(kSpanIdHex);
    spans[i].span_id[0] = static_cast<std::uint8_t>(i);
    spans[i].span_id[1] = static_cast<std::uint8_t>(i >> 8);
    spans[i].resource = resource;
    spans[i].scope = scope;
  }
  for (auto decode : {+[](const std::vector<ReceivedSpan>& s) { return decode_protobuf(encode_protobuf(s)); },
                      +[](const std::vector<ReceivedSpan>& s) { return decode_json(encode_json(s)); }}) {
    auto decoded = decode(spans);
    ASSERT_TRUE(decoded.ok()) << decoded.first_fatal->message();
    ASSERT_EQ(decoded.spans.size(), spans.size());
    EXPECT_EQ(decoded.spans.front().resource_attribute("big")->as_string()->size(), 1u << 20);
    EXPECT_EQ(decoded.spans.front().scope_version(), "1.0");
    for (const auto& span : decoded.spans) {
      ASSERT_EQ(span.resource.get(), decoded.spans.front().resource.get());
      ASSERT_EQ(span.scope.get(), decoded.spans.front().scope.get());
    }
  }
}

TEST(OtlpGzip, RoundTripsAndBoundsOutput) {
  std::string data(100000, 'z');
  std::string compressed = gzip_compress(data);
  EXPECT_LT(compressed.size(), 1000u);
  auto back = gunzip(compressed, data.size());
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, data);
  auto bounded = gunzip(compressed, data.size() - 1);
  ASSERT_FALSE(bounded.ok());
  EXPECT_NE(bounded.error().what.find("limit"), std::string::npos);
  EXPECT_FALSE(gunzip("not gzip at all", 1000).ok());
  EXPECT_FALSE(gunzip(compressed.substr(0, compressed.size() - 4), 1 << 20).ok());  // no trailer
}

}  // namespace
}  // namespace tracecorr::otlp

namespace tracecorr::otlp {
namespace {

// Hostile input: every single-byte corruption and every truncation of a valid
// export decodes to either spans or a fatal problem, never a crash.
TEST(OtlpDecodeHostile, CorruptedAndTruncatedBodiesNeverCrash) {
  auto request = test_support::one_span_request();
  test_support::add_attribute(request, "ids")->mutable_array_value()->add_values()->set_string_value("YLQguzhR2dR6y5M9vnA5mw");
  const std::string protobuf = request.SerializeAsString();
  const std::string json = test_support::one_span_json(
      R"([{"key":"ids","value":{"arrayValue":{"values":[{"stringValue":"YLQguzhR2dR6y5M9vnA5mw"}]}}}])");
  std::size_t rejected = 0;
  for (const auto& [body, decode] : {std::pair{protobuf, &decode_protobuf}, std::pair{json, &decode_json}}) {
    for (std::size_t i = 0; i < body.size(); ++i) {
      for (unsigned char flip : {0x01, 0x80, 0xff}) {
        std::string corrupted = body;
        corrupted[i] = static_cast<char>(corrupted[i] ^ flip);
        DecodedExport decoded = decode(corrupted, {});
        EXPECT_EQ(decoded.ok(), decoded.problems.empty() || !decoded.first_fatal);
        if (!decoded.ok()) {
          ++rejected;
          EXPECT_TRUE(decoded.spans.empty());
        }
      }
      DecodedExport truncated = decode(std::string_view(body).substr(0, i), {});
      if (!truncated.ok()) ++rejected;
    }
  }
  EXPECT_GT(rejected, 0u);
}


// Two bytes on the wire ("12 00": an empty span) are a few hundred in memory:
// 4 MB of them must be refused before protobuf allocates 2 million spans.
std::string varint(std::size_t n) {
  std::string out;
  do {
    out += static_cast<char>((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
    n >>= 7;
  } while (n);
  return out;
}

TEST(OtlpDecodeProtobuf, CountsFieldsBeforeAllocating) {
  std::string scope_spans;
  for (int i = 0; i < 2'000'000; ++i) scope_spans += std::string("\x12\x00", 2);
  std::string resource_spans = "\x12" + varint(scope_spans.size()) + scope_spans;
  std::string body = "\x0a" + varint(resource_spans.size()) + resource_spans;
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  auto decoded = decode_protobuf(body);
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->reason, RejectReason::LimitExceeded);
  EXPECT_NE(decoded.first_fatal->what.find("protobuf fields"), std::string::npos) << decoded.first_fatal->what;
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 50 << 10);  // KiB
}

TEST(OtlpDecodeJson, CountsValuesBeforeParsing) {
  std::string body = R"({"resourceSpans":[],"padding":[0)";
  for (int i = 0; i < 1'100'000; ++i) body += ",0";
  body += "]}";
  auto decoded = decode_json(body);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->reason, RejectReason::LimitExceeded);
  EXPECT_NE(decoded.first_fatal->what.find("JSON values"), std::string::npos) << decoded.first_fatal->what;
}

}  // namespace
}  // namespace tracecorr::otlp
