// tracecorr report: renders a saved JSON report (conform --json) again, e.g.
// as the HTML page: tracecorr report --html FILE REPORT.json
#include <cstdio>
#include <fstream>
#include <sstream>

#include "command.hpp"
#include "tracecorr/report/report.hpp"

namespace tracecorr::cli {
namespace {

struct ReportArgs {
  std::string input, html;
};

int run_report(const ReportArgs& a) {
  std::ifstream in(a.input, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tracecorr report: cannot read %s\n", a.input.c_str());
    return kExitUsage;
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto run = report::parse_json_report(text.str(), a.input);
  if (!run) {
    std::fprintf(stderr, "tracecorr report: %s\n", run.error().message().c_str());
    return kExitUsage;
  }
  if (a.html.empty()) {
    std::fputs(report::render_console(*run).c_str(), stdout);
    return kExitOk;
  }
  if (auto st = report::write_text_file(a.html, report::render_html(*run)); !st) {
    std::fprintf(stderr, "tracecorr report: %s\n", st.error().message().c_str());
    return kExitEnvironment;
  }
  return kExitOk;
}

RegisterCommand report_command("report", "Render a saved JSON report (conform --json) again: as HTML with --html FILE",
                               [](CLI::App& app) -> std::function<int()> {
                                 auto a = std::make_shared<ReportArgs>();
                                 app.add_option("--html", a->html, "Write the self-contained HTML page to FILE");
                                 app.add_option("report", a->input, "The JSON report")->required();
                                 return [a] { return run_report(*a); };
                               });

}  // namespace
}  // namespace tracecorr::cli
