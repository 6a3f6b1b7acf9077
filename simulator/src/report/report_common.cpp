// Helpers shared by the report renderers.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "tracecorr/report/report.hpp"

namespace tracecorr::conform {
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

std::string markup_text(std::string_view raw, bool whitespace_as_references) {
  std::string text = printable_text(raw, true);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;  // &apos; is not HTML 4; &#39; is both
      case '\n': out += whitespace_as_references ? "&#10;" : "\n"; break;
      case '\t': out += whitespace_as_references ? "&#9;" : "\t"; break;
      default: out += c;
    }
  }
  return out;
}

std::string utf8_text(std::string_view text) {
  return escaped_text(text, [](std::uint32_t) { return false; });
}

namespace {
bool valid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    std::size_t n = utf8_sequence(text, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}
}  // namespace

nlohmann::json& make_utf8(nlohmann::json& document) {
  if (document.is_string()) {
    auto& s = document.get_ref<std::string&>();
    if (!valid_utf8(s)) s = utf8_text(s);
  } else if (document.is_array()) {
    for (auto& item : document) make_utf8(item);
  } else if (document.is_object()) {
    bool keys_valid = true;
    for (auto it = document.begin(); it != document.end(); ++it) {
      keys_valid = keys_valid && valid_utf8(it.key());
      make_utf8(it.value());
    }
    if (!keys_valid) {
      nlohmann::json fixed = nlohmann::json::object();
      for (auto it = document.begin(); it != document.end(); ++it) fixed[utf8_text(it.key())] = std::move(it.value());
      document = std::move(fixed);
    }
  }
  return document;
}

std::string hex_dump(const std::vector<std::uint8_t>& bytes, std::size_t max_bytes, std::string_view indent) {
  std::string out;
  std::size_t shown = std::min(bytes.size(), max_bytes);
  char buf[32];
  for (std::size_t line = 0; line < shown; line += 16) {
    out += indent;
    std::snprintf(buf, sizeof buf, "%04zx ", line);
    out += buf;
    std::string ascii;
    for (std::size_t k = line; k < line + 16; ++k) {
      if (k < shown) {
        std::snprintf(buf, sizeof buf, " %02x", bytes[k]);
        out += buf;
        ascii += (bytes[k] >= 0x20 && bytes[k] < 0x7F) ? static_cast<char>(bytes[k]) : '.';
      } else {
        out += "   ";
      }
    }
    out += "  |" + ascii + "|\n";
  }
  if (shown < bytes.size())
    out += std::string(indent) + "... " + std::to_string(bytes.size() - shown) + " more bytes not shown\n";
  return out;
}

bool use_color(std::FILE* stream) {
  if (std::getenv("NO_COLOR")) return false;
  const char* term = std::getenv("TERM");
  if (term && std::strcmp(term, "dumb") == 0) return false;
  return stream && isatty(fileno(stream));
}

Status write_text_file(const std::filesystem::path& path, std::string_view text) {
  std::filesystem::path temp = path;
  temp += ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(std::strerror(errno), "cannot create " + temp.string());
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush()) return make_error(std::strerror(errno), "cannot write " + temp.string());
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) return make_error(ec.message(), "cannot rename " + temp.string() + " to " + path.string());
  return Ok{};
}

}  // namespace tracecorr::conform
