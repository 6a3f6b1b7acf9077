// JSON lines read from a descriptor with bounds, one batch per chunk read.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tracecorr/profiles/json_lines.hpp"

namespace tracecorr::profiles {
namespace {

// Splits chunks into lines, parses them and records what one chunk gave.
class LineBatcher {
 public:
  LineBatcher(const std::string& name, SampleStore& store, const ProfilesLimits& limits)
      : name_(name), store_(store), limits_(limits) {}

  void feed(std::string_view chunk) {
    bytes_ += chunk.size();
    while (!chunk.empty()) {
      const std::size_t newline = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, newline);
      if (!skipping_) {
        if (partial_.size() + piece.size() > limits_.max_json_line_bytes) {
          skipping_ = true;
          std::string().swap(partial_);
        } else {
          partial_.append(piece);
        }
      }
      if (newline == std::string_view::npos) return;
      end_line();
      chunk.remove_prefix(newline + 1);
    }
  }

  // The input ended: a last line without its newline counts too.
  void finish() {
    if (!partial_.empty() || skipping_) end_line();
    flush();
  }

  void flush() {
    if (samples_.empty() && record_.problems.empty() && !record_.lines_malformed && !record_.lines_over_bounds) return;
    record_.source = Source::JsonLines;
    record_.peer = name_;
    record_.received_at = std::chrono::steady_clock::now();
    record_.received_at_system = std::chrono::system_clock::now();
    record_.bytes = bytes_;
    record_.samples = samples_.size();
    store_.record(std::move(record_), std::move(samples_));
    record_ = {};
    samples_.clear();
    bytes_ = 0;
  }

 private:
  void end_line() {
    ++line_;
    if (skipping_) {
      skipping_ = false;
      ++record_.lines_over_bounds;
      problem("longer than the " + std::to_string(limits_.max_json_line_bytes) + "-byte line limit: skipped",
              otlp::RejectReason::LimitExceeded);
      return;
    }
    std::string_view line = partial_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) take(line);
    partial_.clear();
  }

  void take(std::string_view line) {
    auto sample = parse_json_line(line, limits_);
    if (!sample) {
      const bool over = sample.error().kind == ErrorKind::kTooLong;
      ++(over ? record_.lines_over_bounds : record_.lines_malformed);
      problem(sample.error().message(), over ? otlp::RejectReason::LimitExceeded : otlp::RejectReason::MalformedBody);
      return;
    }
    // Consecutive lines usually repeat their resource and attributes: share them.
    share(sample->resource, last_resource_);
    share(sample->attributes, last_attributes_);
    samples_.push_back(std::move(*sample));
  }

  static void share(std::shared_ptr<const otlp::Attributes>& now, std::shared_ptr<const otlp::Attributes>& last) {
    if (now && last && *now == *last) now = last;
    else if (now) last = now;
  }

  void problem(std::string what, otlp::RejectReason reason) {
    if (record_.problems.size() < otlp::ReceivedRequest::kMaxProblemsKept)
      record_.problems.push_back({name_ + " line " + std::to_string(line_), std::move(what), false, reason});
  }

  const std::string& name_;
  SampleStore& store_;
  const ProfilesLimits& limits_;
  std::string partial_;
  bool skipping_ = false;
  std::size_t line_ = 0;
  std::size_t bytes_ = 0;
  ExportRecord record_;
  std::vector<ProfileSample> samples_;
  std::shared_ptr<const otlp::Attributes> last_resource_, last_attributes_;
};

}  // namespace

void read_json_lines(int fd, const std::string& name, SampleStore& store, const ProfilesLimits& limits,
                     const std::atomic<bool>& stop) {
  LineBatcher batcher(name, store, limits);
  std::vector<char> buffer(64u << 10);
  while (!stop) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) break;  // the end (or an error, which ends it too)
    batcher.feed(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
    batcher.flush();
  }
  batcher.finish();
}

JsonLinesReader::JsonLinesReader(UniqueFd fd, std::string name, std::shared_ptr<SampleStore> store,
                                 const ProfilesLimits& limits)
    : fd_(std::move(fd)) {
  const int raw = fd_ ? fd_.get() : STDIN_FILENO;
  thread_ = std::thread([this, raw, name = std::move(name), store = std::move(store), limits] {
    read_json_lines(raw, name, *store, limits, stop_);
    finished_ = true;
  });
}

JsonLinesReader::~JsonLinesReader() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void JsonLinesReader::stop() { stop_ = true; }

Expected<std::unique_ptr<JsonLinesReader>> JsonLinesReader::open(const std::string& path,
                                                                 std::shared_ptr<SampleStore> store,
                                                                 const ProfilesLimits& limits) {
  if (path == "-") return std::unique_ptr<JsonLinesReader>(new JsonLinesReader(UniqueFd(), "stdin", std::move(store), limits));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error(ErrorKind::kNotFound, std::string("cannot open: ") + std::strerror(errno), path);
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    return make_error(ErrorKind::kUnsupported, "neither a regular file nor a FIFO", path);
  // A FIFO opened for writing too: reading it never ends while adapters come and go.
  const int flags = (S_ISFIFO(st.st_mode) ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  UniqueFd fd(::open(path.c_str(), flags));
  if (!fd) return make_error(std::string("cannot open: ") + std::strerror(errno), path);
  struct stat opened {};
  if (::fstat(fd.get(), &opened) != 0 || opened.st_ino != st.st_ino || opened.st_dev != st.st_dev)
    return make_error("replaced while it was opened", path);
  return std::unique_ptr<JsonLinesReader>(new JsonLinesReader(std::move(fd), path, std::move(store), limits));
}

}  // namespace tracecorr::profiles
