// Trace, span and stack trace ids and their textual forms (W3C hex, base64url).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tracecorr {

using TraceId = std::array<std::uint8_t, 16>;
using SpanId = std::array<std::uint8_t, 8>;
using StackTraceId = std::array<std::uint8_t, 16>;

std::string to_hex(std::span<const std::uint8_t> bytes);
// Lower- or upper-case hex of exactly out.size() bytes; false otherwise.
bool from_hex(std::string_view hex, std::span<std::uint8_t> out);

// RFC 4648 section 5 alphabet, no padding: what the attribute carries.
std::string base64url_nopad(std::span<const std::uint8_t> bytes);
// Strict decoder: rejects padding, the standard alphabet's '+' and '/', and
// non-canonical trailing bits. std::nullopt names no position; callers that
// need one use base64url_problem().
std::optional<std::string> base64url_decode(std::string_view text);
// Why text is not canonical unpadded base64url, or empty when it is.
std::string base64url_problem(std::string_view text);

// Where the first invalid UTF-8 sequence starts, or nullopt for valid text.
std::optional<std::size_t> utf8_invalid_at(std::string_view text);

template <std::size_t N>
bool is_zero(const std::array<std::uint8_t, N>& id) {
  for (auto b : id)
    if (b) return false;
  return true;
}

}  // namespace tracecorr
