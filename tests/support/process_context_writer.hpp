// The engine tests' process context writer (tests/unit/data/process_context_writer.c)
// in a child process, driven one command at a time on its stdin: the test
// decides exactly when the context is published, updated or mid-update.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "forked_child.hpp"

namespace tracecorr::test {

inline const std::string kProcessContextWriterPath = std::string(TRACECORR_TEST_DATA_DIR) + "/process_context_writer";

class ProcessContextWriter {
 public:
  explicit ProcessContextWriter(std::vector<std::string> args = {})
      : child_([args](ForkedChild::Pipes pipes) {
          ::dup2(pipes.release, STDIN_FILENO);
          ::dup2(pipes.report, STDOUT_FILENO);
          std::vector<std::string> argv{kProcessContextWriterPath};
          argv.insert(argv.end(), args.begin(), args.end());
          ForkedChild::exec(std::move(argv));
        }) {}

  pid_t pid() const { return child_.pid(); }

  // Sends one command; the writer's answer.
  std::string command(const std::string& line) {
    if (!child_.send(line + "\n")) return "(writer gone)";
    return child_.read_line().value_or("(no answer)");
  }

  // Publishes; the header's address (0 when it failed). `timestamp` gets the published one.
  std::uint64_t publish(const std::string& service_name, std::uint64_t* timestamp = nullptr) {
    std::string answer = command("publish " + service_name);
    unsigned long long address = 0, published_at = 0;
    if (std::sscanf(answer.c_str(), "published %llx %llu", &address, &published_at) != 2) return 0;
    if (timestamp) *timestamp = published_at;
    return address;
  }

  // The OTEP's update to a payload naming `service_name`; its timestamp (0 when it failed).
  std::uint64_t update(const std::string& service_name) { return timestamp_after("update " + service_name, "updated %llu"); }
  // The timestamp 0 (an update begun), then a new one with the payload unchanged.
  bool zero() { return command("zero") == "zeroed"; }
  std::uint64_t restore() { return timestamp_after("restore", "restored %llu"); }

  struct Burner {
    pid_t tid = 0;
    std::int64_t tls_offset = 0;  // of its slot pointing at a valid test record (test_record.h)
  };
  // Starts the thread that spins on a CPU with a test record published.
  std::optional<Burner> burn() {
    long tid = 0;
    long long offset = 0;
    if (std::sscanf(command("burn").c_str(), "burning %ld %lld", &tid, &offset) != 2 || tid <= 0) return std::nullopt;
    return Burner{static_cast<pid_t>(tid), offset};
  }

 private:
  std::uint64_t timestamp_after(const std::string& line, const char* format) {
    unsigned long long published_at = 0;
    if (std::sscanf(command(line).c_str(), format, &published_at) != 1) return 0;
    return published_at;
  }

  ForkedChild child_;
};

}  // namespace tracecorr::test
