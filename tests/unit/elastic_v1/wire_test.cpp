// Every encoder and decoder in wire.hpp: round trips, every truncation length,
// oversized lengths, invalid UTF-8, trailing bytes, minor 0, unknown types.
#include <gtest/gtest.h>

#include <cstring>

#include "elastic_v1/wire.hpp"

namespace tracecorr::elastic_v1 {
namespace {

template <std::size_t N>
std::array<std::uint8_t, N> pattern(std::uint8_t seed) {
  std::array<std::uint8_t, N> a{};
  for (std::size_t i = 0; i < N; ++i) a[i] = static_cast<std::uint8_t>(seed + i * 7);
  return a;
}

void put_u32(std::vector<std::uint8_t>& b, std::size_t at, std::uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

TlsRecord sample_record() {
  TlsRecord r;
  r.minor = 1;
  r.valid = 1;
  r.trace_present = 1;
  r.trace_flags = 0x01;
  r.trace_id = pattern<16>(0x10);
  r.span_id = pattern<8>(0x40);
  r.transaction_id = pattern<8>(0x80);
  return r;
}

TEST(TlsRecordCodec, RoundTripsAndPlacesFieldsAtRegistryOffsets) {
  auto r = sample_record();
  auto bytes = encode_tls_record(r);
  ASSERT_EQ(bytes.size(), elastic_v1::spec::kTlsRecordSize);
  EXPECT_EQ(bytes[elastic_v1::spec::kTlsValidOffset], 1);
  EXPECT_EQ(bytes[elastic_v1::spec::kTlsTraceIdOffset], 0x10);
  EXPECT_EQ(bytes[elastic_v1::spec::kTlsSpanIdOffset], 0x40);
  EXPECT_EQ(bytes[elastic_v1::spec::kTlsTransactionIdOffset + 7], static_cast<std::uint8_t>(0x80 + 7 * 7));
  auto back = decode_tls_record(bytes);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, r);
}

TEST(TlsRecordCodec, EveryTruncationIsAnErrorNamingTls01) {
  auto bytes = encode_tls_record(sample_record());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto d = decode_tls_record(std::span(bytes).first(n));
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_EQ(d.error().requirement, "TLS-01");
    EXPECT_NE(d.error().what.find(std::to_string(n) + " bytes"), std::string::npos) << d.error().what;
  }
}

TEST(TlsRecordCodec, MinorZeroDecodesAsFoundForTheCallerToJudge) {
  auto r = sample_record();
  r.minor = 0;
  auto back = decode_tls_record(encode_tls_record(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->minor, 0);
}

// What the engine's samplers and watchers read by: the registry's record, and nothing else.
TEST(TlsRecordLayout, IsTheRegistrysRecordBehindATlsSlot) {
  const RecordLayout& layout = tls_record_layout();
  EXPECT_TRUE(layout.check()) << layout.check().error().message();
  EXPECT_EQ(layout.fixed_part(), spec::kTlsRecordSize);
  EXPECT_EQ(layout.max_size, spec::kTlsRecordSize);
  auto length = record_length(layout, std::vector<std::uint8_t>(spec::kTlsRecordSize, 0));
  ASSERT_TRUE(length) << length.error().message();
  EXPECT_EQ(*length, spec::kTlsRecordSize);
  EXPECT_FALSE(record_length(layout, std::vector<std::uint8_t>(spec::kTlsRecordSize - 1, 0)));
  EXPECT_EQ(layout.valid_offset, spec::kTlsValidOffset);
  EXPECT_EQ(layout.presence_offset, std::optional<std::size_t>(spec::kTlsTracePresentOffset));
  EXPECT_TRUE(std::holds_alternative<PointerInTlsSlot>(layout.indirection));
  EXPECT_FALSE(layout.valid_values.contains(0));  // spec: valid != 0
  EXPECT_TRUE(layout.valid_values.contains(1) && layout.valid_values.contains(255));
}

ProcessStorage sample_storage() {
  ProcessStorage s;
  s.minor = 1;
  s.service_name = "checkout-✓";
  s.service_environment = "production";
  s.socket_file_path = "/tmp/elastic socket.sock";
  return s;
}

TEST(ProcessStorageCodec, RoundTrips) {
  auto s = sample_storage();
  auto bytes = encode_process_storage(s);
  EXPECT_EQ(bytes.size(), 2 + 3 * 4 + s.service_name.size() + s.service_environment.size() + s.socket_file_path.size());
  auto back = decode_process_storage(buffer_source(bytes));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->service_name, s.service_name);
  EXPECT_EQ(back->service_environment, s.service_environment);
  EXPECT_EQ(back->socket_file_path, s.socket_file_path);
  EXPECT_EQ(back->encoded_size, bytes.size());
}

TEST(ProcessStorageCodec, EmptyStringsRoundTrip) {
  ProcessStorage s;
  auto back = decode_process_storage(buffer_source(encode_process_storage(s)));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->encoded_size, 14u);
  EXPECT_TRUE(back->service_name.empty());
}

TEST(ProcessStorageCodec, EveryTruncationIsAnErrorNamingTheField) {
  auto bytes = encode_process_storage(sample_storage());
  const std::size_t name_end = 2 + 4 + sample_storage().service_name.size();
  const std::size_t env_end = name_end + 4 + sample_storage().service_environment.size();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    std::vector<std::uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto d = decode_process_storage(buffer_source(cut));
    ASSERT_FALSE(d.ok()) << n;
    const std::string where = d.error().message();
    const char* field = n < 2 ? "layout_minor_version" : n < name_end ? "service_name" : n < env_end ? "service_environment" : "socket_file_path";
    EXPECT_NE(where.find(field), std::string::npos) << n << ": " << where;
  }
}

TEST(ProcessStorageCodec, OversizedLengthsAreRefusedBeforeReading) {
  for (std::uint32_t len : {0xFFFFFFFFu, static_cast<std::uint32_t>(elastic_v1::spec::kUtf8StrMaxLengthRead) + 1, 0x80000000u}) {
    auto bytes = encode_process_storage(sample_storage());
    put_u32(bytes, 2, len);  // service_name length
    std::size_t reads = 0;
    auto inner = buffer_source(bytes);
    ByteSource counting = [&](std::uint64_t off, std::span<std::uint8_t> out) {
      ++reads;
      EXPECT_LE(out.size(), elastic_v1::spec::kUtf8StrMaxLengthRead) << "a read larger than the bound was attempted";
      return inner(off, out);
    };
    auto d = decode_process_storage(counting);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.error().requirement, "PROC-03");
    EXPECT_NE(d.error().what.find(std::to_string(len)), std::string::npos) << d.error().what;
    EXPECT_NE(d.error().where.find("service_name"), std::string::npos);
  }
}

TEST(ProcessStorageCodec, SocketPathHasItsOwnSmallerBound) {
  auto s = sample_storage();
  s.socket_file_path = std::string(elastic_v1::spec::kProcessStorageSocketFilePathMaxLength + 1, 'a');
  auto d = decode_process_storage(buffer_source(encode_process_storage(s)));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().where.find("socket_file_path"), std::string::npos);
  s.socket_file_path.pop_back();
  EXPECT_TRUE(decode_process_storage(buffer_source(encode_process_storage(s))).ok());
}

TEST(ProcessStorageCodec, InvalidUtf8IsPROC03WithItsPosition) {
  auto s = sample_storage();
  s.service_environment = std::string("prod\xc3(", 6);
  auto d = decode_process_storage(buffer_source(encode_process_storage(s)));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().requirement, "PROC-03");
  EXPECT_NE(d.error().where.find("service_environment"), std::string::npos);
  EXPECT_NE(d.error().what.find("byte 4"), std::string::npos) << d.error().what;
}

TEST(ProcessStorageCodec, TrailingBytesAreNotConsumed) {
  auto bytes = encode_process_storage(sample_storage());
  const auto size = bytes.size();
  bytes.insert(bytes.end(), {1, 2, 3, 4});
  auto d = decode_process_storage(buffer_source(bytes));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->encoded_size, size);
}

Registration sample_registration() {
  Registration r;
  r.minor = 2;
  r.samples_delay_ms = 2500;
  r.host_id = "host-1234";
  return r;
}

Correlation sample_correlation() {
  Correlation c;
  c.trace_id = pattern<16>(1);
  c.transaction_id = pattern<8>(100);
  c.stack_trace_id = pattern<16>(200);
  c.count = 3;
  return c;
}

TEST(MessageCodec, RegistrationRoundTripsAtBothAcceptedMinors) {
  for (std::uint16_t minor : {1, 2}) {
    auto r = sample_registration();
    r.minor = minor;
    auto bytes = encode(r);
    EXPECT_EQ(bytes.size(), elastic_v1::spec::kMsgRegistrationFixedSize + r.host_id.size());
    EXPECT_EQ(minimum_size(Message{r}), bytes.size());
    auto m = decode_message(bytes);
    ASSERT_TRUE(m.ok()) << m.error().message();
    ASSERT_TRUE(std::holds_alternative<Registration>(*m));
    EXPECT_EQ(std::get<Registration>(*m), r);
  }
}

TEST(MessageCodec, CorrelationRoundTripsWithBoundaryCounts) {
  for (std::uint16_t count : {0, 1, 65535}) {
    auto c = sample_correlation();
    c.count = count;
    auto bytes = encode(c);
    ASSERT_EQ(bytes.size(), elastic_v1::spec::kMsgCorrelationFixedSize);
    auto m = decode_message(bytes);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(std::get<Correlation>(*m), c);
    EXPECT_NE(describe(*m).find(to_hex(c.trace_id)), std::string::npos);
  }
}

TEST(MessageCodec, EveryTruncationOfEveryMessageIsMSG04) {
  std::vector<std::vector<std::uint8_t>> messages = {encode(sample_registration()), encode(sample_correlation())};
  for (const auto& bytes : messages) {
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      auto m = decode_message(std::span(bytes).first(n));
      ASSERT_FALSE(m.ok()) << "length " << n << " of a " << bytes.size() << "-byte message";
      EXPECT_EQ(m.error().requirement, "MSG-04");
    }
    EXPECT_TRUE(decode_message(bytes).ok());
  }
}

TEST(MessageCodec, HostIdLengthBeyondTheDatagramIsRefused) {
  for (std::uint32_t len : {10u, 0x10000u, 0xFFFFFFFFu}) {
    auto bytes = encode(sample_registration());
    put_u32(bytes, elastic_v1::spec::kMsgRegistrationHostIdOffset, len);
    auto m = decode_message(bytes);
    ASSERT_FALSE(m.ok()) << len;
    EXPECT_EQ(m.error().requirement, "MSG-04");
    EXPECT_NE(m.error().what.find(std::to_string(len)), std::string::npos);
  }
}

TEST(MessageCodec, HostIdNeedNotBeUtf8) {
  auto r = sample_registration();
  r.host_id = std::string("\xff\xfe", 2);
  auto m = decode_message(encode(r));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(std::get<Registration>(*m).host_id, r.host_id);
}

TEST(MessageCodec, TrailingBytesAreKept) {
  auto r = sample_registration();
  r.trailing = {9, 8, 7};
  auto c = sample_correlation();
  c.trailing = {1, 2, 3, 4, 5};
  auto mr = decode_message(encode(r));
  auto mc = decode_message(encode(c));
  ASSERT_TRUE(mr.ok() && mc.ok());
  EXPECT_EQ(std::get<Registration>(*mr).trailing, r.trailing);
  EXPECT_EQ(std::get<Correlation>(*mc).trailing, c.trailing);
  EXPECT_EQ(minimum_size(*mc), elastic_v1::spec::kMsgCorrelationFixedSize);
}

TEST(MessageCodec, MinorZeroOfAKnownTypeIsUnknown) {
  auto c = encode(sample_correlation());
  c[elastic_v1::spec::kHeaderMinorVersionOffset] = 0;
  c[elastic_v1::spec::kHeaderMinorVersionOffset + 1] = 0;
  auto m = decode_message(c);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(std::holds_alternative<UnknownMessage>(*m));
  EXPECT_EQ(std::get<UnknownMessage>(*m).type, elastic_v1::spec::kMsgCorrelationType);
  EXPECT_EQ(std::get<UnknownMessage>(*m).payload.size(), elastic_v1::spec::kMsgCorrelationFixedSize - elastic_v1::spec::kMessageHeaderSize);
  // Even a short minor-0 registration is "unknown", not truncated.
  std::vector<std::uint8_t> short_reg = {static_cast<std::uint8_t>(elastic_v1::spec::kMsgRegistrationType), 0, 0, 0};
  auto s = decode_message(short_reg);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(std::holds_alternative<UnknownMessage>(*s));
}

TEST(MessageCodec, UnknownTypesRoundTrip) {
  for (std::uint16_t type : {0, 3, 0x7fff, 0xffff}) {
    UnknownMessage u{type, 1, {1, 2, 3}};
    auto bytes = encode(Message{u});
    auto m = decode_message(bytes);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(std::holds_alternative<UnknownMessage>(*m)) << type;
    EXPECT_EQ(std::get<UnknownMessage>(*m), u);
    EXPECT_EQ(minimum_size(*m), bytes.size());
    EXPECT_NE(describe(*m).find("unknown type=" + std::to_string(type)), std::string::npos);
  }
}

TEST(MessageCodec, HeaderOnlyUnknownMessageHasEmptyPayload) {
  std::vector<std::uint8_t> h = {0x09, 0x00, 0x01, 0x00};
  auto m = decode_message(h);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(std::get<UnknownMessage>(*m).payload.empty());
}

TEST(BufferSource, RefusesReadsPastTheEndAndOffsetOverflow) {
  std::vector<std::uint8_t> b = {1, 2, 3};
  auto src = buffer_source(b);
  std::uint8_t out[2];
  EXPECT_TRUE(src(1, out).ok());
  EXPECT_FALSE(src(2, out).ok());
  EXPECT_FALSE(src(UINT64_MAX, out).ok());
}

}  // namespace
}  // namespace tracecorr::elastic_v1
