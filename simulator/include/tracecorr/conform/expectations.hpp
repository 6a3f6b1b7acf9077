// The expectations file: requirements a target is known to fail, each with the
// reason, so a CI gate can pass today and fail as soon as something changes.
//
//   {"version": 1, "expected_failures": [{"id": "AREA-NN", "reason": "..."}]}
//
// A listed requirement that fails is XFAIL (does not fail the gate). A listed
// requirement that passes is XPASS: the entry is stale and fails the gate
// until it is removed. An unknown id, a duplicate, or an entry without a reason
// is a usage error (the CLI exits 2).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/conform/result.hpp"
#include "tracecorr/error.hpp"

namespace tracecorr::conform {

struct ExpectedFailure {
  std::string id;
  std::string reason;
};

struct Expectations {
  int version = 1;
  std::vector<ExpectedFailure> expected_failures;
};

// `origin` names the text in errors (a path, "<stdin>").
Expected<Expectations> parse_expectations(std::string_view text, std::string_view origin = "expectations");
Expected<Expectations> load_expectations(const std::filesystem::path& path);

// Marks results XFAIL / XPASS / not-evaluated and fills run.expectations.
// An entry whose requirement was not run at all is reported not-evaluated.
void apply_expectations(RunResult& run, const Expectations& expectations);

// The file text for the current failures (Fail or Warn, expected or not):
// existing reasons are kept, new entries get "TODO: explain", stale entries
// (now passing) are dropped, entries for requirements not evaluated are kept.
std::string update_expectations(const RunResult& run, const Expectations& previous = {});

}  // namespace tracecorr::conform
