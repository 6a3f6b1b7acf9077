// JSON lines: the profiler output format for readers that export neither OTLP
// profiles nor Elastic's datagrams, so an in-house tool is judged through a
// ten-line adapter. One sample a line (docs/json-lines.md is the format):
//
//   {"time_unix_nano": 1718000000123456789, "pid": 4242, "tid": 4243,
//    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7",
//    "flags": 1, "attributes": {"thread.name": "worker-1"}, "resource": {"service.name": "checkout"}}
//
// Read from a file, a FIFO or stdin with bounds: a line over
// max_json_line_bytes is skipped, a malformed one is named by its number and
// member, both counted; neither stops the reading.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"
#include "tracecorr/profiles/decode.hpp"
#include "tracecorr/profiles/store.hpp"

namespace tracecorr::profiles {

// One line (without its newline) into a sample; an Error names the member
// ("trace_id: 31 hex digits, a trace id has 32"). The sample's source is JsonLines.
Expected<ProfileSample> parse_json_line(std::string_view line, const ProfilesLimits& limits = {});

// Reads `fd` until its end or until `stop` is set (checked at least every
// 100 ms), recording each chunk's lines as one batch (an ExportRecord) in
// `store`. `name` says where the lines came from in records and problems.
void read_json_lines(int fd, const std::string& name, SampleStore& store, const ProfilesLimits& limits,
                     const std::atomic<bool>& stop);

// read_json_lines on a thread of its own.
class JsonLinesReader {
 public:
  // "-" is stdin (read until its end). A regular file is read to its end; a
  // FIFO is opened for reading and writing, so it never ends while adapters
  // come and go: it is read until stop(). Anything else is refused.
  static Expected<std::unique_ptr<JsonLinesReader>> open(const std::string& path, std::shared_ptr<SampleStore> store,
                                                         const ProfilesLimits& limits = {});
  ~JsonLinesReader();  // stop() and join
  JsonLinesReader(const JsonLinesReader&) = delete;
  JsonLinesReader& operator=(const JsonLinesReader&) = delete;

  void stop();
  bool finished() const { return finished_; }  // the input ended (or stop() was called)

 private:
  JsonLinesReader(UniqueFd fd, std::string name, std::shared_ptr<SampleStore> store, const ProfilesLimits& limits);

  UniqueFd fd_;  // -1 for stdin, which is not ours to close
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace tracecorr::profiles
