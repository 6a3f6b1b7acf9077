// Text read from a target, made safe to print or embed. Everything a target
// names (paths, comm, published strings) passes through here before a
// terminal, a log or a report sees it.
#pragma once

#include <string>
#include <string_view>

namespace tracecorr {

// Text safe to print or embed: valid UTF-8 is kept; control characters
// (except newline and tab when keep_newlines) and invalid bytes become \xNN.
std::string printable_text(std::string_view text, bool keep_newlines = false);
// Valid UTF-8 kept as is, each byte of an invalid sequence written as \xNN:
// for JSON strings (JSON escapes control characters itself).
std::string utf8_text(std::string_view text);
// Whether text is valid UTF-8 (no overlong forms, surrogates or code points
// past U+10FFFF).
bool valid_utf8(std::string_view text);

}  // namespace tracecorr
