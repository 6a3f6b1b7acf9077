// What the OTEP 4947 suite's judges share across areas: the worst finding
// per requirement over many looks, a sampled record decoded, the spans the
// writer exported by their ids (the engine's).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/conform/exported_spans.hpp"
#include "tracecorr/otlp.hpp"

namespace tracecorr::otel_thread_context {

// The worst finding per requirement over many looks; a pass counts every look that passed.
class Worst {
 public:
  void add(Finding f) {
    auto it = worst_.find(f.requirement);
    if (it == worst_.end()) {
      worst_.emplace(f.requirement, std::move(f));
      return;
    }
    auto& kept = it->second;
    if (f.outcome == Finding::Outcome::Met && kept.outcome == Finding::Outcome::Met) {
      kept.evidence_count += f.evidence_count;
    } else if (severity(f.outcome) > severity(kept.outcome)) {
      kept = std::move(f);
    }
  }
  Finding take(const std::string& id, const std::string& otherwise) {
    auto it = worst_.find(id);
    if (it == worst_.end()) return not_applicable(id, otherwise);
    Finding f = std::move(it->second);
    if (f.outcome == Finding::Outcome::Met)
      f.reason = std::to_string(f.evidence_count) + " look(s) passed; e.g. " + f.reason;
    return f;
  }

 private:
  std::map<std::string, Finding> worst_;
};

std::string thread_text(pid_t tid);

// A sample's record decoded, when it was read whole and decodes.
std::optional<ThreadContextRecord> decoded(const RecordSample& s);

// The engine's: the spans the writer exported, by their ids.
using conform::ExportedSpans;

}  // namespace tracecorr::otel_thread_context
