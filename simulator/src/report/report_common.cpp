// Helpers shared by the report renderers.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "tracecorr/report/report.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;

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

}  // namespace tracecorr::report
