#include "tracecorr/ids.hpp"

namespace tracecorr {
namespace {
constexpr char kHex[] = "0123456789abcdef";
constexpr char kB64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int b64url_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}
}  // namespace

std::string to_hex(std::span<const std::uint8_t> bytes) {
  std::string s;
  s.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

bool from_hex(std::string_view hex, std::span<std::uint8_t> out) {
  if (hex.size() != out.size() * 2) return false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::string base64url_nopad(std::span<const std::uint8_t> bytes) {
  std::string s;
  s.reserve((bytes.size() * 4 + 2) / 3);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    std::uint32_t v = bytes[i] << 16 | bytes[i + 1] << 8 | bytes[i + 2];
    for (int shift = 18; shift >= 0; shift -= 6) s.push_back(kB64Url[(v >> shift) & 63]);
  }
  std::size_t rest = bytes.size() - i;
  if (rest == 1) {
    std::uint32_t v = bytes[i] << 16;
    s.push_back(kB64Url[(v >> 18) & 63]);
    s.push_back(kB64Url[(v >> 12) & 63]);
  } else if (rest == 2) {
    std::uint32_t v = bytes[i] << 16 | bytes[i + 1] << 8;
    s.push_back(kB64Url[(v >> 18) & 63]);
    s.push_back(kB64Url[(v >> 12) & 63]);
    s.push_back(kB64Url[(v >> 6) & 63]);
  }
  return s;
}

std::string base64url_problem(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '=') return "padding '=' at position " + std::to_string(i);
    if (c == '+' || c == '/')
      return std::string("standard-alphabet character '") + c + "' at position " + std::to_string(i) +
             " (base64url uses '-' and '_')";
    if (b64url_value(c) < 0) return "character " + std::to_string(static_cast<unsigned char>(c)) +
                                      " at position " + std::to_string(i) + " is not base64url";
  }
  if (text.size() % 4 == 1) return "length " + std::to_string(text.size()) + " is not a valid base64 length";
  // The unused low bits of the last character must be zero (canonical form).
  std::size_t rest = text.size() % 4;
  if (rest) {
    int last = b64url_value(text.back());
    int unused_mask = rest == 2 ? 0x0f : 0x03;
    if (last & unused_mask) return "non-canonical final character '" + std::string(1, text.back()) + "'";
  }
  return {};
}

std::optional<std::string> base64url_decode(std::string_view text) {
  if (!base64url_problem(text).empty()) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    acc = acc << 6 | static_cast<std::uint32_t>(b64url_value(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::optional<std::size_t> utf8_invalid_at(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t n = text.size(), i = 0;
  while (i < n) {
    unsigned char c = s[i];
    std::size_t len;
    std::uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > n) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return i;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return i;
    i += len;
  }
  return std::nullopt;
}

}  // namespace tracecorr
