// `tracecorr inspect`: each protocol package brings an inspector that reads
// what one process exposes of its protocol, once, and lists the requirements
// it breaks. The command asks every registered inspector about the process.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr {

struct InspectRequest {
  // Borrowed; nullptr: the inspector makes (and uses) a ptrace source inside.
  ThreadPointerSource* thread_pointers = nullptr;
  bool read_threads = true;           // stop threads to read their thread pointers
  bool check_socket_reachable = true; // try a non-blocking connect (nothing is sent)
  // The forms the caller prints (InspectReport::json, ::text): a process
  // with thousands of threads makes megabytes of either, so only those asked
  // for are made; the other stays empty.
  bool want_json = true;
  bool want_text = true;
};

struct InspectReport {
  bool found = false;      // the process carries this protocol
  std::string not_found;   // when not: what was looked for, for people
  nlohmann::json json;     // the inspection, for tools
  std::string text;        // the inspection, for people (target text escaped)
  std::vector<Finding> findings;  // requirements broken (outcome Violated)
};

class Inspector {
 public:
  virtual ~Inspector() = default;
  virtual std::string_view protocol() const = 0;  // ProtocolSpec::id
  // Errors: the process cannot be examined at all (gone, no permission).
  virtual Expected<InspectReport> inspect(pid_t pid, const InspectRequest& request) const = 0;
  // Has the process published what the protocol publishes (for --wait)?
  virtual bool published(pid_t pid) const = 0;
};

// The text inspectors end with: "findings", then one line per finding (its
// requirement, level and message, target text escaped), or "none".
std::string findings_text(const std::vector<Finding>& findings);

void register_inspector(const Inspector& inspector);
std::vector<const Inspector*> inspectors();

}  // namespace tracecorr
