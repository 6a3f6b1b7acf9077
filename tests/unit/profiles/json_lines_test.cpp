// JSON lines: the documented format line by line, read from pipes, files and
// FIFOs with bounds, and the adapter that docs/json-lines.md shows.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "profiles_test_support.hpp"
#include "tracecorr/profiles/json_lines.hpp"

namespace tracecorr::profiles {
namespace {

using namespace test_support;
using namespace std::chrono_literals;

constexpr char kFullLine[] =
    R"({"time_unix_nano": "1718000000123456789", "pid": 4242, "tid": 4243, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",)"
    R"( "span_id": "00f067aa0ba902b7", "flags": 1, "value": 2, "stack": [4198400, "0x402000"],)"
    R"( "attributes": {"thread.name": "worker-1", "retries": 3, "ratio": 0.5, "tags": ["a", "b"], "nested": {"k": true}},)"
    R"( "resource": {"service.name": "checkout"}, "some_future_member": 1})";

TEST(ProfilesJsonLines, EveryMemberOfTheFormat) {
  auto sample = parse_json_line(kFullLine);
  ASSERT_TRUE(sample.ok()) << sample.error().message();
  EXPECT_EQ(sample->source, Source::JsonLines);
  EXPECT_EQ(sample->time, (SampleTime{1718000000123456789ull, Clock::Unix}));  // exact, past 2^53
  EXPECT_EQ(sample->pid, 4242);
  EXPECT_EQ(sample->tid, 4243);
  ASSERT_TRUE(sample->link);
  EXPECT_EQ(to_hex(sample->link->trace_id), kTraceIdHex);
  EXPECT_EQ(to_hex(sample->link->span_id), kSpanIdHex);
  EXPECT_EQ(sample->trace_flags, 1);
  EXPECT_EQ(sample->value, 2);
  EXPECT_EQ(*sample->stack, (Stack{0x401000, 0x402000}));
  EXPECT_EQ(sample->attribute("thread.name")->to_display(), "\"worker-1\"");
  EXPECT_EQ(sample->attribute("retries")->type(), otlp::AttributeValue::Type::Int);
  EXPECT_EQ(sample->attribute("ratio")->type(), otlp::AttributeValue::Type::Double);
  EXPECT_TRUE(sample->attribute("tags")->is_string_array());
  EXPECT_EQ(sample->attribute("nested")->type(), otlp::AttributeValue::Type::KvList);
  EXPECT_EQ(sample->resource_attribute("service.name")->to_display(), "\"checkout\"");
}

TEST(ProfilesJsonLines, TheSmallestLineAndTheMonotonicClock) {
  auto sample = parse_json_line(R"({"time_monotonic_nano": 123, "pid": 1, "tid": 2, "trace_id": null})");
  ASSERT_TRUE(sample.ok()) << sample.error().message();
  EXPECT_EQ(sample->time, (SampleTime{123, Clock::Monotonic}));
  EXPECT_FALSE(sample->link);
  EXPECT_FALSE(sample->trace_flags);
  EXPECT_EQ(sample->value, 1);
  EXPECT_FALSE(sample->attributes);
}

TEST(ProfilesJsonLines, EachMistakeIsNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"pid": 1, "tid": 2})", "time_unix_nano: exactly one of"},
      {R"({"time_unix_nano": 1, "time_monotonic_nano": 1, "pid": 1, "tid": 2})", "exactly one of"},
      {R"({"time_unix_nano": 1, "tid": 2})", "pid: required"},
      {R"({"time_unix_nano": -5, "pid": 1, "tid": 2})", "time_unix_nano: expected an unsigned integer"},
      {R"({"time_unix_nano": 1, "pid": "x", "tid": 2})", "pid: expected an integer"},
      {R"({"time_unix_nano": 1, "pid": 1, "tid": 2, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})",
       "span_id: a span needs both"},
      {R"({"time_unix_nano": 1, "pid": 1, "tid": 2, "trace_id": "4bf9", "span_id": "00f067aa0ba902b7"})",
       "trace_id: expected 32 hex digits"},
      {R"({"time_unix_nano": 1, "pid": 1, "tid": 2, "flags": 256})", "flags: W3C trace flags are one byte"},
      {R"({"time_unix_nano": 1, "pid": 1, "tid": 2, "attributes": [1]})", "attributes: expected an object"},
      {R"({"time_unix_nano": 1, "pid": 1, "tid": 2, "stack": 7})", "stack: expected an array"},
      {R"([1, 2])", "a sample is a JSON object"},
      {R"({"time_unix_nano": 1,)", "not JSON"},
  };
  for (const auto& [line, expected] : cases) {
    auto sample = parse_json_line(line);
    ASSERT_FALSE(sample.ok()) << line;
    EXPECT_NE(sample.error().message().find(expected), std::string::npos) << sample.error().message();
  }
}

TEST(ProfilesJsonLines, LinesAreBounded) {
  ProfilesLimits limits;
  limits.transport.max_nesting_depth = 4;
  std::string deep = R"({"time_unix_nano": 1, "pid": 1, "tid": 2, "attributes": {"a": )" + std::string(20, '[') +
                     std::string(20, ']') + "}}";
  auto sample = parse_json_line(deep, limits);
  ASSERT_FALSE(sample.ok());
  EXPECT_EQ(sample.error().kind, ErrorKind::kTooLong);
  limits.transport.max_value_bytes = 10;
  sample = parse_json_line(R"({"time_unix_nano": 1, "pid": 1, "tid": 2, "attributes": {"a": "0123456789ab"}})", limits);
  ASSERT_FALSE(sample.ok());
  EXPECT_EQ(sample.error().kind, ErrorKind::kTooLong);
}

// Writes `text` into a pipe from a thread and reads it back as JSON lines.
std::shared_ptr<SampleStore> read_through_pipe(const std::string& text, const ProfilesLimits& limits = {}) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    for (std::size_t at = 0; at < text.size();) {
      ssize_t n = ::write(fds[1], text.data() + at, std::min<std::size_t>(text.size() - at, 777));  // odd chunks
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
  });
  auto store = std::make_shared<SampleStore>(limits);
  std::atomic<bool> stop{false};
  read_json_lines(fds[0], "pipe", *store, limits, stop);
  writer.join();
  ::close(fds[0]);
  return store;
}

TEST(ProfilesJsonLines, APipeIsReadToItsEndWithBadLinesCountedAndNamed) {
  ProfilesLimits limits;
  limits.max_json_line_bytes = 2048;
  std::string text;
  for (int i = 0; i < 500; ++i)
    text += R"({"time_unix_nano": )" + std::to_string(kT0 + i) + R"(, "pid": 1, "tid": 2, "resource": {"service.name": "x"}})" +
            (i % 7 ? "\n" : "\r\n");
  text += "not json\n\n   \n";
  text += "{\"pid\": " + std::string(5000, '1') + "}\n";  // over the line limit
  text += R"({"time_unix_nano": 5, "pid": 1, "tid": 3})";  // the last line has no newline
  auto store = read_through_pipe(text, limits);
  const auto samples = store->samples();
  ASSERT_EQ(samples.size(), 501u);
  EXPECT_EQ(samples.back().tid, 3);
  EXPECT_EQ(samples[0].resource.get(), samples[1].resource.get());  // consecutive equal resources are shared
  const auto counters = store->counters(Source::JsonLines);
  EXPECT_EQ(counters.lines_malformed, 1u);
  EXPECT_EQ(counters.lines_over_bounds, 1u);
  EXPECT_EQ(counters.samples, 501u);
  bool named = false;
  for (const auto& record : store->exports())
    for (const auto& problem : record.problems) named |= problem.where == "pipe line 501";
  EXPECT_TRUE(named);
}

TEST(ProfilesJsonLines, AFifoIsReadUntilStoppedWhileWritersComeAndGo) {
  char dir[] = "/tmp/tracecorr-json-lines-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/samples";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto store = std::make_shared<SampleStore>();
  auto reader = JsonLinesReader::open(fifo, store);
  ASSERT_TRUE(reader.ok()) << reader.error().message();
  for (int writer = 0; writer < 2; ++writer) {  // one adapter after another
    std::ofstream out(fifo);
    out << R"({"time_unix_nano": 1, "pid": 1, "tid": )" << writer << "}\n";
  }
  EXPECT_TRUE(store->wait_for([](const auto& samples) { return samples.size() == 2; }, 10s));
  EXPECT_FALSE((*reader)->finished());
  reader->reset();  // stops and joins
  ::unlink(fifo.c_str());
  ::rmdir(dir);
}

TEST(ProfilesJsonLines, WhatIsNeitherAFileNorAFifoIsRefused) {
  auto store = std::make_shared<SampleStore>();
  EXPECT_FALSE(JsonLinesReader::open("/tmp", store).ok());
  EXPECT_FALSE(JsonLinesReader::open("/nonexistent/samples.jsonl", store).ok());
}

// The adapter docs/json-lines.md shows, run on the output it says it adapts:
// every line it prints is a sample.
TEST(ProfilesJsonLines, TheDocumentedAdapterWorks) {
  std::ifstream doc(std::string(TRACECORR_SOURCE_DIR) + "/docs/json-lines.md");
  ASSERT_TRUE(doc) << "docs/json-lines.md";
  std::stringstream text;
  text << doc.rdbuf();
  std::smatch match;
  const std::string all = text.str();
  ASSERT_TRUE(std::regex_search(all, match, std::regex("```python\n([\\s\\S]*?)```")));
  char path[] = "/tmp/tracecorr-adapter-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string script = match[1];
  ASSERT_EQ(::write(fd, script.data(), script.size()), static_cast<ssize_t>(script.size()));
  ::close(fd);
  const std::string command = "printf '1718000000000000001 4242 4243 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 1\\n"
                              "1718000000000000002 4242 4244 - - 0\\n' | /usr/bin/python3 " +
                              std::string(path);
  FILE* adapter = ::popen(command.c_str(), "r");
  ASSERT_NE(adapter, nullptr);
  auto store = std::make_shared<SampleStore>();
  std::atomic<bool> stop{false};
  read_json_lines(::fileno(adapter), "adapter", *store, {}, stop);
  EXPECT_EQ(::pclose(adapter), 0);
  ::unlink(path);
  const auto samples = sorted(store->samples());
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].time, (SampleTime{1718000000000000001ull, Clock::Unix}));
  EXPECT_EQ(to_hex(samples[0].link->span_id), kSpanIdHex);
  EXPECT_EQ(samples[0].trace_flags, 1);
  EXPECT_EQ(samples[1].tid, 4244);
  EXPECT_FALSE(samples[1].link);
  EXPECT_EQ(store->counters().lines_malformed, 0u);
}

}  // namespace
}  // namespace tracecorr::profiles
