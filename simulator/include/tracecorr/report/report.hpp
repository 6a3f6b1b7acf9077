// Reports rendered from the one conform::RunResult model:
//  - console, in the manner of h2spec: grouped by area in registry order, one
//    line per requirement, details (the requirement's words, expected vs
//    actual, bytes with decoded fields, the repeat command) for failures and
//    warnings, and a summary line "N passed, N failed, N warnings, ...";
//  - JUnit XML: a testsuite per area, a testcase per requirement;
//  - JSON matching spec/report-schema-v2.json ("schema": "tracecorr-report/2"; a
//    version-1 report, spec/report-schema-v1.json, is still read back).
// Evidence comes from the target and is hostile: every renderer escapes or
// replaces control characters and invalid UTF-8, so the output stays valid
// (and a terminal stays sane).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tracecorr/conform/result.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/text.hpp"

namespace tracecorr::report {

struct ConsoleOptions {
  bool color = false;          // ANSI colours; use use_color(stdout) to decide
  bool show_passes = true;     // one line per passing requirement
  std::size_t max_hex_bytes = 256;  // longer evidence is cut, and says so
};
// Colours only on a terminal, and never with NO_COLOR set or TERM=dumb.
bool use_color(std::FILE* stream);

std::string render_console(const conform::RunResult& run, const ConsoleOptions& options = {});
std::string render_junit(const conform::RunResult& run);
std::string render_json(const conform::RunResult& run);

// Hex dump: "0000  01 00 ...  |..|" lines, 16 bytes each, at most max_bytes.
std::string hex_dump(const std::vector<std::uint8_t>& bytes, std::size_t max_bytes = 256,
                     std::string_view indent = "");

// printable_text and utf8_text are the base's (tracecorr/text.hpp): the
// inspector and the run print target text without linking the reports.
using tracecorr::printable_text;
using tracecorr::utf8_text;
// printable_text escaped for XML and HTML text and attribute values; newlines
// and tabs as character references where attribute values must keep them.
std::string markup_text(std::string_view raw, bool whitespace_as_references);
// Every string (and object key) in `document` made valid UTF-8 with
// utf8_text, so dump() can neither throw nor drop what was read from a target
// (a library path that is not UTF-8). Returns the document for chaining.
nlohmann::json& make_utf8(nlohmann::json& document);

// Writes text to path (the report files): replaced atomically via a temp file.
Status write_text_file(const std::filesystem::path& path, std::string_view text);

}  // namespace tracecorr::report

namespace tracecorr::report {

// One self-contained HTML page (report_html.cpp): the summary, every judged
// requirement with its evidence, the session timelines and inline SVG pictures
// of the figures. No network, no external scripts or fonts; readable without
// JavaScript (a small inline script only filters and folds).
std::string render_html(const conform::RunResult& run);
// The CSP source that allows exactly `script` as an inline script:
// "'sha256-<base64 of its SHA-256>'" (the page's own filter script).
std::string csp_script_source(std::string_view script);

// Reads a report written by render_json back into the model (for
// `tracecorr report --html`). The file is hostile input: sizes are bounded,
// and what is malformed is named with its place.
Expected<conform::RunResult> parse_json_report(std::string_view text, std::string_view origin);

}  // namespace tracecorr::report
