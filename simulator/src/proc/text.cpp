// Text read from a target made safe to print (text.hpp): one walk over the
// UTF-8 for every escaping.
#include "tracecorr/text.hpp"

#include <cstdint>
#include <cstdio>

namespace tracecorr {
namespace {

// Length of the valid UTF-8 sequence at text[i] (rejecting overlong forms,
// surrogates and code points past U+10FFFF), or 0 when it is not valid.
std::size_t utf8_sequence(std::string_view text, std::size_t i, std::uint32_t& code_point) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char b0 = byte(i);
  std::size_t length;
  std::uint32_t min;
  if (b0 < 0x80) {
    code_point = b0;
    return 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    length = 2, min = 0x80, code_point = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, min = 0x800, code_point = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, min = 0x10000, code_point = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  if (code_point < min || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return 0;
  return length;
}

void append_escape(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// Copies text, escaping every byte of an invalid UTF-8 sequence, and of every
// valid code point `escape(cp)` rejects, as \xNN: one walk for every output.
template <typename Escape>
std::string escaped_text(std::string_view text, Escape escape) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    std::size_t n = utf8_sequence(text, i, cp);
    if (n == 0) {
      append_escape(out, static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (escape(cp)) {
      for (std::size_t k = 0; k < n; ++k) append_escape(out, static_cast<unsigned char>(text[i + k]));
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace

std::string printable_text(std::string_view text, bool keep_newlines) {
  return escaped_text(text, [keep_newlines](std::uint32_t cp) {
    bool control = cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0);
    if (control && keep_newlines && (cp == '\n' || cp == '\t')) control = false;
    // U+FFFE and U+FFFF are not characters, and XML 1.0 forbids them.
    bool noncharacter = cp == 0xFFFE || cp == 0xFFFF;
    return control || noncharacter;
  });
}

std::string utf8_text(std::string_view text) {
  return escaped_text(text, [](std::uint32_t) { return false; });
}

bool valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    std::size_t n = utf8_sequence(text, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace tracecorr
