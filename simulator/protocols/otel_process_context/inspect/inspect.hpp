// The process context's inspector: every context mapping of one process, its
// header, the seqlock read (with its retries), the decoded resource and
// attributes, and the findings of the writer rules one look can judge.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/inspector.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_process_context {

struct Inspection {
  process_context::Snapshot snapshot;
  std::vector<Finding> findings;  // Violated and Tolerated only: what the writer gets wrong
};

// Errors: the process cannot be read at all (gone, permission). An inspection
// without mappings means the process publishes no context.
Expected<Inspection> inspect_process(pid_t pid, const process_context::ReadOptions& read = {});

nlohmann::json to_json(const Inspection& inspection);
// For people: mappings, header, timestamp and its age, the read, resource and
// attributes with their types, threadlocal.* keys, findings. Target text escaped.
std::string render_text(const Inspection& inspection);

// An attribute value as JSON: strings, booleans, integers and doubles as
// themselves, bytes as {"bytes": hex}, arrays as arrays, kvlists as
// [{"key", "type", "value"}].
nlohmann::json value_json(const otlp::AttributeValue& value);

// The package's inspector, registered with the engine (tracecorr/inspector.hpp).
const Inspector& inspector();

}  // namespace tracecorr::otel_process_context
