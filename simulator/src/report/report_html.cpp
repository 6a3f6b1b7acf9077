// The HTML report: one self-contained page (inline CSS and SVG, no network,
// no fonts, no external scripts) rendered from the RunResult. Readable without
// JavaScript: evidence folds with <details>; a few lines of inline script only
// add the verdict filter.
//
// Every string that may come from the target or from a saved report (a CI
// artefact anyone could have doctored) goes through esc() (control characters
// and invalid UTF-8 made visible by printable_text, then HTML metacharacters
// escaped), in element text and in attribute values alike; map keys included.
// The page's Content-Security-Policy allows exactly its own script, by its
// SHA-256 (script-src 'sha256-...'): an injected <script> or event handler
// would not run even if something slipped past esc().
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tracecorr/stats.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/protocol.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;
namespace {

std::string esc(std::string_view raw) { return markup_text(raw, false); }

std::string num(double v, int decimals = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::isfinite(v) ? v : 0.0);
  return buf;
}

std::string hex64(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A protocol judged, as its registry names it (the spec this kit judges by).
std::string protocol_title(const std::string& id) {
  const ProtocolSpec* p = find_protocol(id);
  if (!p) return id.empty() ? "?" : id;
  return std::string(p->title) + " (" + id + ")";
}

// What one protocol of the run came to, in a line.
std::string protocol_outcome(const RunResult& run, const ProtocolRun& p) {
  if (!p.not_applicable.empty()) return "not applicable: " + p.not_applicable;
  return std::string(protocol_status(run, p)) + ": " + summary_line(summarize(results_of(run, p.id))) +
         (p.chosen_by.empty() ? "" : " (" + p.chosen_by + ")");
}

constexpr const char* kStyle = R"css(
[hidden]{display:none!important}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:20px;font-weight:600}
header .sub{color:#b7c0d0;font-size:13px;margin-top:4px;word-break:break-all}
main{padding:12px 24px 40px;max-width:1280px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #d5d9e0;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 6px}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}
.card{background:#fff;border:1px solid #d5d9e0;border-radius:6px;padding:8px 14px;min-width:84px}
.card b{display:block;font-size:22px}
.card span{font-size:12px;color:#5a6374}
.card.pass b{color:#1a7f37}.card.fail b{color:#c62828}.card.warn b{color:#b26a00}.card.skip b{color:#5a6374}.card.error b{color:#6a1b9a}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border:1px solid #e1e4ea;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}
table.facts{width:auto}table.facts th{width:170px}
td.id{white-space:nowrap;font-family:ui-monospace,"DejaVu Sans Mono",monospace}
.v{display:inline-block;border-radius:3px;padding:1px 7px;font-weight:600;font-size:12px;color:#fff}
.v.pass{background:#1a7f37}.v.fail{background:#c62828}.v.warn{background:#b26a00}.v.skip{background:#8a93a3}.v.error{background:#6a1b9a}
tr.fail td{background:#fff3f3}tr.warn td{background:#fffaf0}tr.error td{background:#f8f1fb}
pre,code,.mono{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px}
pre{background:#f1f3f6;padding:6px 8px;overflow-x:auto;margin:4px 0;white-space:pre-wrap;word-break:break-all}
details summary{cursor:pointer;color:#2457a6}
.ev{border-left:3px solid #c9d2e0;padding-left:8px;margin:6px 0}
.ev .ea{display:grid;grid-template-columns:70px 1fr;gap:2px 8px;font-size:12px}
.ev .ea b{color:#5a6374;font-weight:600}
table.fields{width:auto;font-size:12px;margin:4px 0}
.note{color:#5a6374;font-size:12px}
.filter{margin:8px 0;font-size:13px}
.filter label{margin-right:12px}
svg{background:#fff;border:1px solid #d5d9e0;border-radius:4px;display:block;margin:6px 0;max-width:100%;height:auto}
svg text{font-family:system-ui,"DejaVu Sans",sans-serif}
.fig{margin-bottom:18px}
table.top-functions td:first-child{min-width:360px}
td.words{min-width:260px;max-width:380px}
)css";

// The verdict filter: hides rows by verdict. Without it every row shows.
constexpr const char* kScript = R"js(
(function(){
  var box=document.getElementById('filter');if(!box)return;box.hidden=false;
  var inputs=box.querySelectorAll('input[data-verdict]');
  function apply(){var show={};inputs.forEach(function(i){show[i.dataset.verdict]=i.checked;});
    document.querySelectorAll('tr[data-verdict]').forEach(function(r){r.hidden=!show[r.dataset.verdict];});}
  inputs.forEach(function(i){i.addEventListener('change',apply);});
  document.getElementById('fold-all').addEventListener('click',function(){
    document.querySelectorAll('#requirements details').forEach(function(d){d.open=false;});});
  document.getElementById('unfold-all').addEventListener('click',function(){
    document.querySelectorAll('#requirements details').forEach(function(d){d.open=true;});});
})();
)js";

void summary_section(std::ostringstream& o, const RunResult& run) {
  Summary s = summarize(run);
  int code = exit_code(run, run.strict);
  auto card = [&](const char* cls, std::size_t n, const char* label) {
    o << "<div class=\"card " << cls << "\"><b>" << n << "</b><span>" << label << "</span></div>";
  };
  const bool judged = !run.results.empty();  // false: a tracecorr agent page (pictures only)
  o << "<section id=\"summary\"><h2>Summary</h2><div class=\"cards\"" << (judged ? "" : " hidden") << ">";
  card("pass", s.passed, "passed");
  card("fail", s.failed, "failed");
  card("warn", s.warnings, "warnings");
  card("skip", s.skipped, "skipped");
  card("error", s.errors, "errors");
  if (s.expected_failures) card("skip", s.expected_failures, "expected failures");
  if (s.stale_expectations) card("fail", s.stale_expectations, "stale expectations");
  o << "<div class=\"card " << (code == kExitOk ? "pass" : "fail") << "\" id=\"exit-code\"><b>" << code
    << "</b><span>exit code</span></div></div>";
  o << "<table class=\"facts\">";
  auto row = [&](std::string_view name, const std::string& value) {
    o << "<tr><th>" << esc(name) << "</th><td class=\"mono\">" << esc(value) << "</td></tr>";
  };
  if (judged) row("gate", summary_line(s) + (code == kExitOk ? " — gate passes" : " — gate fails"));
  row("target", run.target.description);
  if (run.target.pid) row("pid", std::to_string(*run.target.pid));
  row("architecture", run.target.arch);
  const auto sections = protocols_of(run);
  for (const auto& p : sections)
    row("protocol (spec)", protocol_title(p.id) + (sections.size() > 1 || !p.not_applicable.empty() ? " — " + protocol_outcome(run, p) : ""));
  row("personality", run.personality);
  row("strict", run.strict ? "yes (a missed SHOULD fails the gate)" : "no");
  row("kit", run.tool_version);
  row("report schema", run.schema_version);
  row("started", format_utc(run.started));
  row("finished", format_utc(run.finished));
  o << "</table>";
  if (!run.counters.empty()) {
    o << "<details><summary>" << run.counters.size() << " counters</summary><table class=\"facts\">";
    for (const auto& [name, value] : run.counters) row(name, std::to_string(value));
    o << "</table></details>";
  }
  // What needs attention first, linked to its row.
  std::vector<const RequirementResult*> attention;
  for (const auto* r : in_registry_order(run))
    if (r->verdict == Verdict::Fail || r->verdict == Verdict::Warn || r->verdict == Verdict::Error) attention.push_back(r);
  if (judged) {
    o << "<h3>Needs attention</h3>";
    const auto not_judged = unjudged(run);
    if (attention.empty() && not_judged.empty()) o << "<p class=\"note\">Nothing failed, warned or errored.</p>";
    else {
      o << "<ul id=\"attention\">";
      for (const auto& line : not_judged)
        o << "<li><span class=\"v error\">not judged</span> " << esc(line) << "</li>";
      for (const auto* r : attention)
        o << "<li><span class=\"v " << to_string(r->verdict) << "\">" << to_string(r->verdict) << "</span> <a href=\"#req-"
          << esc(r->id) << "\">" << esc(r->id) << "</a> " << esc(r->reason) << "</li>";
      o << "</ul>";
    }
  }
  o << "</section>\n";
}

void evidence_html(std::ostringstream& o, const Evidence& e) {
  o << "<div class=\"ev\"><div><b>" << esc(e.label) << "</b></div><div class=\"ea\">";
  if (!e.expected.empty()) o << "<b>expected</b><span class=\"mono\">" << esc(e.expected) << "</span>";
  if (!e.actual.empty()) o << "<b>actual</b><span class=\"mono\">" << esc(e.actual) << "</span>";
  o << "</div>";
  if (!e.fields.empty()) {
    o << "<table class=\"fields\"><tr><th>offset</th><th>size</th><th>field</th><th>bytes</th><th>value</th></tr>";
    for (const auto& f : e.fields) {
      std::string bytes;
      if (f.offset < e.bytes.size()) {
        std::size_t end = std::min(e.bytes.size(), f.offset + std::min<std::size_t>(f.size, 64));
        bytes = to_hex(std::span<const std::uint8_t>(e.bytes.data() + f.offset, end - f.offset));
        if (f.offset + f.size > end) bytes += "…";
      }
      o << "<tr><td class=\"mono\">" << f.offset << "</td><td class=\"mono\">" << f.size << "</td><td>" << esc(f.name)
        << "</td><td class=\"mono\">" << esc(bytes) << "</td><td class=\"mono\">" << esc(f.value) << "</td></tr>";
    }
    o << "</table>";
  }
  if (!e.bytes.empty()) o << "<pre>" << esc(hex_dump(e.bytes, 512)) << "</pre>";
  o << "</div>";
}

void requirements_section(std::ostringstream& o, const RunResult& run) {
  if (run.results.empty()) {
    o << "<section id=\"requirements\"><h2>Requirements judged</h2><p class=\"note\">None: this page shows a "
         "tracecorr agent run's samples, not a conformance run.</p></section>\n";
    return;
  }
  o << "<section id=\"requirements\"><h2>Requirements judged</h2>"
       "<div class=\"filter\" id=\"filter\" hidden>show: ";
  for (const char* v : {"pass", "fail", "warn", "skip", "error"})
    o << "<label><input type=\"checkbox\" checked data-verdict=\"" << v << "\"> " << v << "</label>";
  o << "<button type=\"button\" id=\"unfold-all\">unfold all</button> <button type=\"button\" id=\"fold-all\">fold "
       "all</button></div>";
  o << "<table><tr><th>id</th><th>level</th><th>verdict</th><th>requirement</th><th>result and evidence</th></tr>";
  const bool several = protocols_of(run).size() > 1;
  std::string protocol_shown;
  for (const auto* r : in_registry_order(run)) {
    if (several && r->protocol != protocol_shown) {  // a heading row per protocol
      protocol_shown = r->protocol;
      o << "<tr class=\"protocol\"><th colspan=\"5\">" << esc(protocol_title(r->protocol)) << "</th></tr>";
    }
    std::string verdict(to_string(r->verdict));
    o << "<tr id=\"req-" << esc(r->id) << "\" class=\"" << verdict << "\" data-verdict=\"" << verdict << "\">"
      << "<td class=\"id\">" << esc(r->id) << "</td><td>" << esc(to_string(r->level)) << "</td><td><span class=\"v "
      << verdict << "\">" << verdict << "</span>";
    if (r->expectation != ExpectationStatus::None)
      o << "<div class=\"note\">" << esc(to_string(r->expectation)) << ": " << esc(r->expectation_reason) << "</div>";
    o << "</td><td class=\"words\">" << esc(r->words);
    if (!r->source.empty()) o << "<div class=\"note\">" << esc(r->source) << "</div>";
    o << "</td><td>" << esc(r->reason);
    bool open = r->verdict == Verdict::Fail || r->verdict == Verdict::Warn || r->verdict == Verdict::Error;
    o << "<details" << (open ? " open" : "") << "><summary>" << r->evidence.size() << " evidence item"
      << (r->evidence.size() == 1 ? "" : "s") << ", repeat command" << (r->probe.empty() ? "" : ", probe " + esc(r->probe))
      << "</summary>";
    for (const auto& e : r->evidence) evidence_html(o, e);
    if (!r->repeat_command.empty()) o << "<div class=\"note\">repeat:</div><pre>" << esc(r->repeat_command) << "</pre>";
    o << "</details></td></tr>\n";
  }
  o << "</table></section>\n";
}

// ---- pictures ---------------------------------------------------------------

// A "nice" axis maximum and tick step for values up to `max`.
std::pair<double, double> axis(double max) {
  if (max <= 0) return {1, 0.25};
  double magnitude = std::pow(10, std::floor(std::log10(max)));
  for (double step : {0.1, 0.2, 0.25, 0.5, 1.0, 2.0})
    if (max / (step * magnitude) <= 8) return {std::ceil(max / (step * magnitude)) * step * magnitude, step * magnitude};
  return {max, max / 4};
}

// Decimals that show every tick of a ms axis in seconds exactly (250 ms -> 2).
int second_decimals(double step_ms) {
  if (std::fmod(step_ms, 1000) == 0) return 0;
  if (std::fmod(step_ms, 100) == 0) return 1;
  return 2;
}

// The figure's heading: the requirement it illustrates, then its title.
std::string heading(const std::string& requirement, const std::string& title) {
  return esc(requirement.empty() ? title : requirement + ": " + title);
}

void scatter_legend(std::ostringstream& o, const ScatterCaption& c, const std::vector<double>& primary,
                    const std::vector<double>& baseline, double lx, double top) {
  o << "<circle cx=\"" << lx + 6 << "\" cy=\"" << top + 12 << "\" r=\"4\" fill=\"#e07b00\"/><text x=\"" << lx + 16
    << "\" y=\"" << top + 16 << "\" font-size=\"12\">" << esc(c.primary) << " (" << primary.size() << ")</text>"
    << "<text x=\"" << lx + 16 << "\" y=\"" << top + 31 << "\" font-size=\"11\" fill=\"#5a6374\">median "
    << num(median(primary)) << " ms</text>"
    << "<rect x=\"" << lx + 3 << "\" y=\"" << top + 45 << "\" width=\"6\" height=\"6\" fill=\"#8a93a3\"/><text x=\""
    << lx + 16 << "\" y=\"" << top + 52 << "\" font-size=\"12\">" << esc(c.baseline) << " (" << baseline.size()
    << ")</text><text x=\"" << lx + 16 << "\" y=\"" << top + 67 << "\" font-size=\"11\" fill=\"#5a6374\">"
    << esc(c.baseline_note) << "</text><text x=\"" << lx + 16 << "\" y=\"" << top + 81
    << "\" font-size=\"11\" fill=\"#5a6374\">median " << num(median(baseline)) << " ms</text>"
    << "<line x1=\"" << lx << "\" x2=\"" << lx + 12 << "\" y1=\"" << top + 98 << "\" y2=\"" << top + 98
    << "\" stroke=\"#2457a6\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/><text x=\"" << lx + 16 << "\" y=\""
    << top + 102 << "\" font-size=\"12\">" << esc(c.reference) << "</text>"
    << "<circle cx=\"" << lx + 6 << "\" cy=\"" << top + 118 << "\" r=\"4\" fill=\"#f2c38a\"/><text x=\"" << lx + 16
    << "\" y=\"" << top + 122 << "\" font-size=\"11\" fill=\"#5a6374\">" << esc(c.unclear) << "</text>";
}

// The same facts as numbers, per reference value.
void scatter_table(std::ostringstream& o, const ScatterCaption& c, const std::vector<const ScatterPoint*>& judged,
                   const std::vector<double>& baseline) {
  std::map<double, std::vector<double>> by_reference;
  for (const auto* d : judged) by_reference[*d->reference].push_back(d->y);
  o << "<table class=\"facts\"><tr><th>" << esc(c.reference) << "</th><th>" << esc(c.primary) << "</th><th>median "
    << esc(c.y_quantity) << "</th><th>min .. max</th></tr>";
  for (const auto& [reference, v] : by_reference)
    o << "<tr><td>" << num(reference) << " ms</td><td>" << v.size() << "</td><td>" << num(median(v)) << " ms</td><td>"
      << num(*std::min_element(v.begin(), v.end())) << " .. " << num(*std::max_element(v.begin(), v.end()))
      << " ms</td></tr>";
  o << "<tr><td>" << esc(c.baseline) << " (baseline)</td><td>" << baseline.size() << "</td><td>" << num(median(baseline))
    << " ms</td><td>"
    << (baseline.empty() ? std::string("-")
                         : num(*std::min_element(baseline.begin(), baseline.end())) + " .. " +
                               num(*std::max_element(baseline.begin(), baseline.end())) + " ms")
    << "</td></tr></table>";
}

void scatter_picture(std::ostringstream& o, const ScatterFigure& f) {
  const ScatterCaption& c = f.caption;
  o << "<div class=\"fig\" id=\"fig-" << esc(c.id) << "\"><h3>" << heading(c.requirement, c.title) << "</h3>";
  if (f.points.empty()) {
    o << "<p class=\"note\">" << esc(c.empty) << "</p></div>";
    return;
  }
  double x_max = 0, y_max = 0;
  for (const auto& d : f.points) {
    x_max = std::max(x_max, d.x);
    y_max = std::max({y_max, d.y, d.reference.value_or(0)});
  }
  auto [xa, xstep] = axis(x_max);
  auto [ya, ystep] = axis(y_max * 1.05);
  const double W = 900, H = 330, left = 64, right = 190, top = 16, bottom = 44;
  double pw = W - left - right, ph = H - top - bottom;
  auto X = [&](double v) { return left + pw * v / xa; };
  auto Y = [&](double v) { return top + ph - ph * std::clamp(v, 0.0, ya) / ya; };
  o << "<svg class=\"picture\" data-figure=\"" << esc(c.id) << "\" viewBox=\"0 0 " << W << " " << H << "\" width=\"" << W
    << "\" height=\"" << H << "\" role=\"img\" aria-label=\"" << esc(c.description) << "\">";
  for (double v = 0; v <= ya + 1e-9; v += ystep)
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << num(Y(v), 1) << "\" y2=\"" << num(Y(v), 1)
      << "\" stroke=\"#e6e8ec\"/><text x=\"" << left - 6 << "\" y=\"" << num(Y(v) + 4, 1)
      << "\" font-size=\"11\" text-anchor=\"end\" fill=\"#5a6374\">" << num(v) << "</text>";
  for (double v = 0; v <= xa + 1e-9; v += xstep)
    o << "<text x=\"" << num(X(v), 1) << "\" y=\"" << top + ph + 16 << "\" font-size=\"11\" text-anchor=\"middle\" "
      << "fill=\"#5a6374\">" << num(v / 1000, second_decimals(xstep)) << "</text>";
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 6
    << "\" font-size=\"12\" text-anchor=\"middle\" fill=\"#1d2330\">" << esc(c.x_axis) << "</text>"
    << "<text transform=\"translate(14 " << top + ph / 2 << ") rotate(-90)\" font-size=\"12\" text-anchor=\"middle\" "
    << "fill=\"#1d2330\">" << esc(c.y_axis) << "</text>";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#b7bfcc\"/>";
  // The reference in force, as a step line through the primary points.
  std::vector<const ScatterPoint*> judged;
  for (const auto& d : f.points)
    if (d.primary && d.reference) judged.push_back(&d);
  std::sort(judged.begin(), judged.end(), [](auto* a, auto* b) { return a->x < b->x; });
  if (!judged.empty()) {
    std::string path = "M" + num(X(judged.front()->x), 1) + " " + num(Y(*judged.front()->reference), 1);
    for (std::size_t i = 1; i < judged.size(); ++i)
      path += " H" + num(X(judged[i]->x), 1) + " V" + num(Y(*judged[i]->reference), 1);
    o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"#2457a6\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>";
  }
  for (const auto& d : f.points) {
    if (d.primary)
      o << "<circle cx=\"" << num(X(d.x), 1) << "\" cy=\"" << num(Y(d.y), 1) << "\" r=\"4\" fill=\""
        << (d.reference ? "#e07b00" : "#f2c38a") << "\" stroke=\"#7a4300\" stroke-width=\"0.6\"><title>"
        << esc(d.label) << "</title></circle>";
    else
      o << "<rect x=\"" << num(X(d.x) - 2.5, 1) << "\" y=\"" << num(Y(d.y) - 2.5, 1)
        << "\" width=\"5\" height=\"5\" fill=\"#8a93a3\"><title>" << esc(d.label) << "</title></rect>";
  }
  // Legend, with the medians the judges compare.
  std::vector<double> primary, baseline;
  for (const auto& d : f.points) (d.primary ? primary : baseline).push_back(d.y);
  scatter_legend(o, c, primary, baseline, left + pw + 14, top);
  o << "</svg>";
  scatter_table(o, c, judged, baseline);
  o << "</div>\n";
}

void record_store_picture(std::ostringstream& o, const RecordStoresFigure& f) {
  const RecordStoresCaption& c = f.caption;
  o << "<div class=\"fig\" id=\"fig-" << esc(c.id) << "\"><h3>" << heading(c.requirement, c.title) << "</h3>";
  if (f.stores.empty()) {
    o << "<p class=\"note\">" << esc(c.empty) << "</p></div>";
    return;
  }
  o << "<p class=\"note\">" << esc(c.note) << "</p>";
  std::map<std::pair<std::int64_t, std::uint64_t>, std::vector<const RecordStore*>> watches;
  for (const auto& s : f.stores) watches[{s.tid, s.record_address}].push_back(&s);
  constexpr std::size_t kMaxColumns = 48;
  for (const auto& [key, stores] : watches) {
    // The first kMaxColumns states, or a window opening just before the first
    // violation when that lies further on.
    std::size_t first = 0;
    auto violation = std::find_if(stores.begin(), stores.end(), [](const RecordStore* r) { return r->violation; });
    if (violation != stores.end() && static_cast<std::size_t>(violation - stores.begin()) >= kMaxColumns)
      first = static_cast<std::size_t>(violation - stores.begin()) - 8;
    std::size_t n = std::min(stores.size() - first, kMaxColumns);
    const double cell = 17, left = 60, top = 22, row = 16;
    double W = left + cell * static_cast<double>(n) + 20, H = top + row * 2 + 120;
    o << "<svg class=\"picture\" data-figure=\"" << esc(c.id) << "\" viewBox=\"0 0 " << num(W) << " " << num(H) << "\" width=\""
      << num(W) << "\" height=\"" << num(H) << "\" role=\"img\" aria-label=\"record stores of thread "
      << key.first << "\">";
    o << "<text x=\"4\" y=\"14\" font-size=\"12\">thread " << key.first << ", record at " << hex64(key.second)
      << (stores.size() > n ? " (states " + std::to_string(first) + ".." + std::to_string(first + n - 1) + " of " +
                                  std::to_string(stores.size()) + ")"
                            : "")
      << "</text>";
    o << "<text x=\"4\" y=\"" << top + 12 << "\" font-size=\"11\" fill=\"#5a6374\">valid</text><text x=\"4\" y=\""
      << top + row + 12 << "\" font-size=\"11\" fill=\"#5a6374\">state</text>";
    for (std::size_t column = 0; column < n; ++column) {
      std::size_t i = first + column;
      const auto& s = *stores[i];
      double x = left + cell * static_cast<double>(column);
      const char* fill = s.violation ? "#c62828" : s.valid ? "#1a7f37" : "#b7bfcc";
      std::string title = "state " + std::to_string(s.index) + " at " + num(s.at_ms, 3) + " ms: valid=" +
                          std::to_string(s.valid) + (s.changed.empty() ? "" : ", changed " + s.changed) +
                          (s.pc_after_store ? ", pc after store " + hex64(s.pc_after_store) : ", read when the watch began") +
                          (s.violation ? " — VIOLATION" : "");
      o << "<g><title>" << esc(title) << "</title><rect x=\"" << num(x, 1) << "\" y=\"" << top << "\" width=\""
        << cell - 2 << "\" height=\"" << row - 2 << "\" fill=\"" << fill << "\"/><text x=\"" << num(x + (cell - 2) / 2, 1)
        << "\" y=\"" << top + 11 << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"#fff\">" << s.valid
        << "</text><text x=\"" << num(x + (cell - 2) / 2, 1) << "\" y=\"" << top + row + 11
        << "\" font-size=\"9\" text-anchor=\"middle\" fill=\"#5a6374\">" << s.index << "</text>"
        << "<text transform=\"translate(" << num(x + cell / 2, 1) << " " << top + row * 2 + 4
        << ") rotate(60)\" font-size=\"10\" fill=\"#1d2330\">" << esc(i == 0 ? "(start)" : s.changed.empty() ? "(same bytes)" : s.changed)
        << "</text></g>";
    }
    o << "</svg>";
  }
  o << "</div>\n";
}

// A flame graph: the samples' stacks merged into a tree, outermost at the
// bottom, each frame as wide as the samples it was on.
struct FlameNode {
  std::string name;
  std::uint64_t count = 0;
  std::map<std::string, FlameNode> children;
};

void draw_flame(std::ostringstream& o, const FlameNode& node, double x, double width_per_sample, std::size_t depth,
                double base_y, std::size_t& drawn) {
  constexpr double kRow = 17;
  double child_x = x;
  for (const auto& [name, child] : node.children) {
    double w = width_per_sample * static_cast<double>(child.count);
    if (w >= 0.5 && drawn < 4000) {
      ++drawn;
      double y = base_y - kRow * static_cast<double>(depth + 1);
      std::uint32_t hash = 2166136261u;
      for (unsigned char c : name) hash = (hash ^ c) * 16777619u;
      int r = 205 + static_cast<int>(hash % 50), g = 80 + static_cast<int>((hash >> 8) % 120), b = 40 + static_cast<int>((hash >> 16) % 40);
      o << "<g><title>" << esc(name) << ": " << child.count << " samples</title><rect x=\"" << num(child_x, 1)
        << "\" y=\"" << num(y, 1) << "\" width=\"" << num(std::max(w - 0.5, 0.5), 1) << "\" height=\"" << kRow - 1
        << "\" fill=\"rgb(" << r << "," << g << "," << b << ")\" rx=\"1\"/>";
      std::size_t chars = static_cast<std::size_t>(w / 6.6);
      if (chars >= 3) {
        std::string label = name;
        if (label.size() > chars) {
          std::size_t cut = chars - 1;  // at a UTF-8 character boundary
          while (cut > 0 && (static_cast<unsigned char>(label[cut]) & 0xC0) == 0x80) --cut;
          label = label.substr(0, cut) + "…";
        }
        o << "<text x=\"" << num(child_x + 3, 1) << "\" y=\"" << num(y + 12, 1) << "\" font-size=\"11\" fill=\"#111\">"
          << esc(label) << "</text>";
      }
      o << "</g>";
      draw_flame(o, child, child_x, width_per_sample, depth + 1, base_y, drawn);
    }
    child_x += w;
  }
}

std::size_t depth_of(const FlameNode& node) {
  std::size_t d = 0;
  for (const auto& [_, c] : node.children) d = std::max(d, depth_of(c) + 1);
  return d;
}

void flame_pictures(std::ostringstream& o, const StacksFigure& flames) {
  const StacksCaption& c = flames.caption;
  o << "<div class=\"fig\" id=\"fig-flames\"><h3>" << esc(c.title) << "</h3>";
  if (flames.source.empty()) {
    o << "<p class=\"note\">No stack samples were taken in this run.</p></div>";
    return;
  }
  if (flames.samples == 0) {
    o << "<p class=\"note\"><b>Samples:</b> " << esc(flames.source) << ".</p></div>";
    return;
  }
  o << "<p class=\"note\"><b>Samples:</b> " << esc(flames.source) << ". " << flames.samples << " samples, "
    << flames.samples_without_context << " without a current " << esc(c.context) << "; " << flames.contexts_total
    << " " << esc(c.contexts) << " had samples";
  if (flames.contexts_total > flames.contexts.size())
    o << " (the " << flames.contexts.size() << " with the most are drawn)";
  o << ". Frames are symbolised from the target's ELF symbols; outermost frame at the bottom.</p>";
  if (flames.contexts.empty()) o << "<p class=\"note\">No sample fell inside a " << esc(c.context) << ".</p>";
  constexpr std::size_t kShownOpen = 3;  // the rest fold, to keep the page short
  std::size_t drawn_contexts = 0;
  for (const auto& t : flames.contexts) {
    if (drawn_contexts++ == kShownOpen)
      o << "<details><summary>" << flames.contexts.size() - kShownOpen << " more " << esc(c.contexts) << "</summary>";
    FlameNode root;
    std::map<std::string, std::uint64_t> self, total;
    for (const auto& s : t.stacks) {
      FlameNode* node = &root;
      node->count += s.count;
      std::set<std::string> seen;
      for (const auto& raw : s.frames) {
        // Named, hashed and cut as shown, so a saved report draws the same.
        std::string frame = printable_text(raw);
        node = &node->children[frame];
        node->name = frame;
        node->count += s.count;
        if (seen.insert(frame).second) total[frame] += s.count;
      }
      if (!s.frames.empty()) self[printable_text(s.frames.back())] += s.count;
    }
    const double W = 900, pad = 4;
    std::size_t depth = std::min<std::size_t>(depth_of(root), 64);
    double H = 17.0 * static_cast<double>(depth) + 2 * pad + 18;
    o << "<h3 class=\"mono\" id=\"flame-" << esc(t.context_id) << "\">" << esc(c.context) << " " << esc(t.context_id)
      << " <span class=\"note\">trace " << esc(t.trace_id) << ", " << t.samples << " samples</span></h3>";
    o << "<svg class=\"picture flame\" data-figure=\"flame\" viewBox=\"0 0 " << W << " " << num(H) << "\" width=\"" << W
      << "\" height=\"" << num(H) << "\" role=\"img\" aria-label=\"flame graph of " << esc(c.context) << " " << esc(t.context_id)
      << "\">";
    std::size_t drawn = 0;
    if (root.count)
      draw_flame(o, root, pad, (W - 2 * pad) / static_cast<double>(root.count), 0, H - pad - 18, drawn);
    o << "<text x=\"" << pad << "\" y=\"" << num(H - 5) << "\" font-size=\"11\" fill=\"#5a6374\">" << root.count
      << " samples across the width</text></svg>";
    std::vector<std::pair<std::string, std::uint64_t>> top(self.begin(), self.end());
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); });
    if (top.size() > 8) top.resize(8);
    o << "<table class=\"facts top-functions\"><tr><th>function (most samples)</th><th>self</th><th>total</th></tr>";
    for (const auto& [name, n] : top)
      o << "<tr><td class=\"mono\">" << esc(name) << "</td><td>" << n << " (" << num(100.0 * n / std::max<std::uint64_t>(root.count, 1))
        << "%)</td><td>" << total[name] << "</td></tr>";
    o << "</table>";
  }
  if (drawn_contexts > kShownOpen) o << "</details>";
  o << "</div>\n";
}

void timelines_section(std::ostringstream& o, const Figures& f) {
  // A profiler-mode run draws its stage members, a writer's run its sessions.
  const bool of_sessions = std::all_of(f.timelines.begin(), f.timelines.end(), [](const auto& t) { return t.of == "session"; });
  o << "<section id=\"timelines\"><h2>" << (of_sessions ? "Session timelines" : "Stage members: their samples over time")
    << "</h2>";
  if (f.timelines.empty()) o << "<p class=\"note\">No session timeline in this report.</p>";
  static const std::map<std::string, const char*> colours = {
      {"registration", "#2457a6"}, {"message", "#e07b00"}, {"span", "#1a7f37"}, {"watch", "#6a1b9a"},
      {"sampling", "#00838f"},     {"boundary", "#c62828"}, {"stop", "#1d2330"},  {"right", "#1a7f37"},
      {"no-context", "#8a93a3"},   {"missing", "#e07b00"},  {"stale", "#b8860b"}, {"poisoned", "#c62828"},
      {"torn", "#6a1b9a"},         {"unknown", "#ad1457"},  {"hazard", "#2457a6"}};
  for (const auto& t : f.timelines) {
    const double W = 900, left = 10, right = 10, lane = 14, top = 8;
    std::vector<std::string> kinds;
    for (const auto& e : t.events)
      if (std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end()) kinds.push_back(e.kind);
    double H = top + lane * static_cast<double>(kinds.size()) + 26;
    double span = std::max(t.duration_ms, 1.0);
    for (const auto& e : t.events) span = std::max(span, e.at_ms);
    o << "<h3 id=\"timeline-" << esc(t.session) << "\">" << esc(t.of) << " " << esc(t.session) << " <span class=\"note\">"
      << num(span / 1000, 2) << " s, " << t.events.size() << " events</span></h3>";
    o << "<svg class=\"picture\" data-figure=\"timeline\" viewBox=\"0 0 " << W << " " << num(H) << "\" width=\"" << W
      << "\" height=\"" << num(H) << "\" role=\"img\" aria-label=\"timeline of " << esc(t.of) << " " << esc(t.session) << "\">";
    double pw = W - left - right - 110;
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      double y = top + lane * static_cast<double>(k);
      auto colour = colours.count(kinds[k]) ? colours.at(kinds[k]) : "#5a6374";
      o << "<text x=\"" << left + pw + 8 << "\" y=\"" << num(y + 10) << "\" font-size=\"11\" fill=\"" << colour << "\">"
        << esc(kinds[k]) << "</text><line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << num(y + 6)
        << "\" y2=\"" << num(y + 6) << "\" stroke=\"#eef0f4\"/>";
    }
    for (const auto& e : t.events) {
      std::size_t k = static_cast<std::size_t>(std::find(kinds.begin(), kinds.end(), e.kind) - kinds.begin());
      double x = left + pw * e.at_ms / span, y = top + lane * static_cast<double>(k);
      auto colour = colours.count(e.kind) ? colours.at(e.kind) : "#5a6374";
      o << "<rect x=\"" << num(x - 1, 1) << "\" y=\"" << num(y) << "\" width=\"2.5\" height=\"12\" fill=\"" << colour
        << "\"><title>" << esc(num(e.at_ms) + " ms: " + e.text) << "</title></rect>";
    }
    double axis_y = top + lane * static_cast<double>(kinds.size()) + 4;
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << num(axis_y) << "\" y2=\"" << num(axis_y)
      << "\" stroke=\"#8a93a3\"/>";
    auto [xa, xstep] = axis(span);
    for (double v = 0; v <= span + 1e-9; v += xstep)
      o << "<text x=\"" << num(left + pw * v / span, 1) << "\" y=\"" << num(axis_y + 14) << "\" font-size=\"10\" text-anchor=\""
        << (v == 0 ? "start" : "middle") << "\" fill=\"#5a6374\">" << num(v / 1000, second_decimals(xstep))
        << " s</text>";
    (void)xa;
    o << "</svg><details><summary>" << t.events.size() << " events</summary><table><tr><th>ms</th><th>kind</th>"
         "<th>what</th></tr>";
    for (const auto& e : t.events)
      o << "<tr><td>" << num(e.at_ms) << "</td><td>" << esc(e.kind) << "</td><td class=\"mono\">" << esc(e.text)
        << "</td></tr>";
    o << "</table></details>";
  }
  o << "</section>\n";
}

}  // namespace

std::string csp_script_source(std::string_view script) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  if (EVP_Digest(script.data(), script.size(), digest, &digest_size, EVP_sha256(), nullptr) != 1) return "'none'";
  unsigned char base64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  int length = EVP_EncodeBlock(base64, digest, static_cast<int>(digest_size));
  return "'sha256-" + std::string(reinterpret_cast<const char*>(base64), static_cast<std::size_t>(length)) + "'";
}

std::string render_html(const RunResult& run) {
  std::ostringstream o;
  Summary s = summarize(run);
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
       "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
       "script-src "
    << csp_script_source(kScript) << "; img-src data:; base-uri 'none'; form-action 'none'\">"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>tracecorr report: " << esc(run.results.empty() ? "agent samples" : summary_line(s)) << "</title><style>" << kStyle << "</style></head><body>\n";
  std::string outcome = run.results.empty() ? std::to_string(run.figures.stacks.samples) + " samples"
                                            : summary_line(s);
  o << "<header><h1>tracecorr " << (run.results.empty() ? "agent samples" : "conformance report")
    << "</h1><div class=\"sub\">" << esc(run.target.description) << " — " << esc(outcome) << "</div></header><main>\n";
  summary_section(o, run);
  o << "<section id=\"pictures\"><h2>Pictures</h2>";
  if (!run.results.empty())
    for (const auto& scatter : run.figures.scatters) scatter_picture(o, scatter);
  flame_pictures(o, run.figures.stacks);
  if (!run.results.empty() && run.figures.record_stores) record_store_picture(o, *run.figures.record_stores);
  o << "</section>\n";
  requirements_section(o, run);
  timelines_section(o, run.figures);
  o << "</main><script>" << kScript << "</script></body></html>\n";
  return o.str();
}

}  // namespace tracecorr::report
