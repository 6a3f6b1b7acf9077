// Textual forms of ids: the examples are the reference spec's own.
#include <gtest/gtest.h>

#include "tracecorr/ids.hpp"

namespace tracecorr {
namespace {

StackTraceId id_from_hex(std::string_view hex) {
  StackTraceId id{};
  EXPECT_TRUE(from_hex(hex, id));
  return id;
}

TEST(Base64Url, SpecExamplesEncodeWithoutPadding) {
  EXPECT_EQ(base64url_nopad(id_from_hex("60b420bb3851d9d47acb933dbe70399b")), "YLQguzhR2dR6y5M9vnA5mw");
  EXPECT_EQ(base64url_nopad(id_from_hex("4c9326bb9805fa8f85882c12eae724ce")), "TJMmu5gF-o-FiCwS6uckzg");
}

TEST(Base64Url, RoundTripsEveryLength) {
  std::vector<std::uint8_t> bytes;
  for (int n = 0; n < 40; ++n) {
    auto text = base64url_nopad(bytes);
    EXPECT_EQ(text.find('='), std::string::npos);
    auto back = base64url_decode(text);
    ASSERT_TRUE(back.has_value()) << text;
    EXPECT_EQ(std::vector<std::uint8_t>(back->begin(), back->end()), bytes);
    bytes.push_back(static_cast<std::uint8_t>(n * 37 + 250));
  }
}

TEST(Base64Url, NamesWhatIsWrong) {
  EXPECT_NE(base64url_problem("YLQguzhR2dR6y5M9vnA5mw==").find("padding"), std::string::npos);
  EXPECT_NE(base64url_problem("TJMmu5gF+o+FiCwS6uckzg").find("standard-alphabet"), std::string::npos);
  EXPECT_NE(base64url_problem("YLQguzhR2dR6y5M9vnA5mx").find("non-canonical"), std::string::npos);
  EXPECT_NE(base64url_problem("A").find("length"), std::string::npos);
  EXPECT_EQ(base64url_problem("YLQguzhR2dR6y5M9vnA5mw"), "");
}

TEST(Hex, RejectsWrongLengthAndDigits) {
  SpanId id{};
  EXPECT_TRUE(from_hex("00f067aa0ba902b7", id));
  EXPECT_EQ(to_hex(id), "00f067aa0ba902b7");
  EXPECT_FALSE(from_hex("00f067aa0ba902b", id));
  EXPECT_FALSE(from_hex("00f067aa0ba902bg", id));
}

TEST(Utf8, FindsFirstInvalidSequence) {
  EXPECT_FALSE(utf8_invalid_at("service-é-✓-😀").has_value());
  EXPECT_EQ(utf8_invalid_at(std::string("ab\xff", 3)), 2u);
  EXPECT_EQ(utf8_invalid_at(std::string("a\xc0\xaf", 3)), 1u);         // overlong '/'
  EXPECT_EQ(utf8_invalid_at(std::string("\xed\xa0\x80", 3)), 0u);       // surrogate
  EXPECT_EQ(utf8_invalid_at(std::string("x\xe2\x82", 3)), 1u);          // truncated
}

}  // namespace
}  // namespace tracecorr
