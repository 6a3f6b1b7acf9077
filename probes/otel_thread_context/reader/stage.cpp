// The thread-context writers of the stage: the reference writer in every TLS
// model built for the architecture (fixtures/otel_thread_context/README.md,
// Models), the dlopen model again with glibc's dynamic TLS forced, the
// in-place update style, and the variant announcing another runtime's
// schema, which a conforming reader must leave alone (TCTXR-03).
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "reader.hpp"

namespace tracecorr::otel_thread_context::reader {
namespace {

namespace fs = std::filesystem;

// What each model stands for, in the words of TCTXR-04/05.
const std::map<std::string, std::string>& layouts() {
  static const std::map<std::string, std::string> words = {
      {"tlsdesc", "TLS descriptors, library linked, glibc"},
      {"tlsdesc-dlopen", "TLS descriptors, library dlopen()ed (static surplus), glibc"},
      {"general-dynamic", "legacy general-dynamic, library, glibc"},
      {"lib-initial-exec", "initial-exec, library, glibc"},
      {"exe-initial-exec", "initial-exec, executable, glibc"},
      {"exe-local-exec", "local-exec, executable, glibc"},
      {"static-pie", "local-exec, static-pie executable, glibc"},
      {"musl-tlsdesc", "TLS descriptors, library linked, musl"},
      {"musl-dlopen", "TLS descriptors, library dlopen()ed (dynamic TLS: the DTV), musl"},
      {"musl-general-dynamic", "legacy general-dynamic, library, musl"},
      {"musl-static-pie", "local-exec, static-pie executable, musl"},
      {"rust-cdylib", "TLS descriptors, Rust cdylib dlopen()ed, .tbss after other thread-locals, glibc"},
  };
  return words;
}

std::vector<std::string> built_models(const std::string& reference) {
  std::ifstream in(reference + "/models.json");
  auto j = nlohmann::json::parse(in, nullptr, false);
  std::vector<std::string> models;
  if (j.is_object() && j.contains("models") && j["models"].is_array())
    for (const auto& m : j["models"])
      if (m.is_string()) models.push_back(m.get<std::string>());
  return models;
}

std::vector<std::string> writer_args(const profiler::StageOptions& o) {
  // One busy thread: a CPU-time sampler sees it (a sleeping thread is never
  // sampled); the process context republished every second, its timestamp
  // held at 0 for 100 ms of each (PCTXR-03/04's windows), the header pointing
  // meanwhile at a poison payload that only a reader ignoring the seqlock takes.
  return {"--state-journal", "--stage-hazards", "--hazard-ms", std::to_string(o.hazard_ms), "--threads", "1",
          "--busy-percent", "100", "--no-export", "--duration", "600", "--context-every-ms", "1000",
          "--context-zero-ms", "100", "--context-zero-poison"};
}

profiler::StageMember member(const std::string& name, const std::string& layout, const std::string& program,
                             const profiler::StageOptions& o) {
  profiler::StageMember m;
  m.name = "otel-thread-context/" + name;
  m.protocol = "otel-thread-context";
  m.layout = layout;
  m.argv = {program};
  for (auto& a : writer_args(o)) m.argv.push_back(std::move(a));
  m.hazards = {"valid_0_poison", "null_pointer", "duplicate_key", "late_key", "out_of_map", "oversize", "context_zero",
               "context_zero_poison"};
  return m;
}

}  // namespace

std::vector<profiler::StageMember> stage(const profiler::StageOptions& o) {
  const std::string base = o.fixtures_dir + "/otel_thread_context";
  std::vector<profiler::StageMember> members;
  for (const auto& model : built_models(base + "/reference")) {
    auto words = layouts().find(model);
    const std::string program = base + "/reference/" + model + "/otel-tctx-writer";
    if (!fs::exists(program)) continue;
    members.push_back(member(model, words == layouts().end() ? model : words->second, program, o));
    if (model == "tlsdesc-dlopen") {
      auto dynamic = member("tlsdesc-dlopen-dynamic", "TLS descriptors, library dlopen()ed, dynamic TLS (the DTV), glibc",
                            program, o);
      dynamic.env["GLIBC_TUNABLES"] = "glibc.rtld.optional_static_tls=0";
      members.push_back(std::move(dynamic));
    }
    if (model == "tlsdesc") {
      auto in_place = member("tlsdesc-in-place", "TLS descriptors, library linked, glibc; records updated in place",
                             program, o);
      in_place.argv.insert(in_place.argv.begin() + 1, {"--style", "in-place"});
      // Its record rewritten back and forth every 300 µs: torn pairs for a reader that lets the thread run (TCTXR-06).
      in_place.hazards.push_back("rewritten_in_place");
      members.push_back(std::move(in_place));
      // The rewriting held for the whole run: one state in eight of the member
      // above gave a kill run 3 or 4 samples of it, and a run with none now
      // and then; held, every sample of its worker is of it.
      auto rewriting = member("tlsdesc-rewriting", "TLS descriptors, library linked, glibc; one record rewritten in "
                                                   "place every 300 µs, held", program, o);
      rewriting.argv.insert(rewriting.argv.begin() + 1, {"--style", "in-place"});
      for (const char* a : {"--hold-hazard", "rewritten_in_place"}) rewriting.argv.emplace_back(a);
      rewriting.hazards = {"rewritten_in_place", "context_zero", "context_zero_poison"};
      members.push_back(std::move(rewriting));
    }
  }
  // The process context without its threadlocal keys for the first seconds
  // (TCTXR-02): a reader meets it so, and must look again when they come.
  // One span held: no other hazard meets the keys' absence.
  const std::string linked = base + "/reference/tlsdesc/otel-tctx-writer";
  if (fs::exists(linked)) {
    // The keys come once the profiler's first sample of it came in (SIGUSR1): whenever the
    // profiler starts, it meets the process without them.
    auto m = member("keys-late", "TLS descriptors, library linked, glibc; threadlocal keys published once the "
                                 "profiler met the process", linked, o);
    for (const char* a : {"--hold-hazard", "span", "--keys-on-signal"}) m.argv.emplace_back(a);
    m.release_signal = SIGUSR1;
    m.hazards = {"threadlocal_keys_late", "context_zero"};
    members.push_back(std::move(m));
  }
  // Writers that break a writer rule a reader must survive: their journals
  // say what a conforming reader makes of their records.
  const std::string overrun = base + "/mutants/entry-overruns-size/otel-tctx-writer";
  if (fs::exists(overrun)) {
    auto m = member("entry-overruns-size", "TLS descriptors, library linked, glibc; the last entry runs 3 bytes past "
                                           "attrs_data_size (TCTX-16)", overrun, o);
    m.hazards.push_back("entry_overrun");
    members.push_back(std::move(m));
  }
  const std::string valid_2 = base + "/mutants/valid-2/otel-tctx-writer";
  if (fs::exists(valid_2)) {
    auto m = member("valid-2", "TLS descriptors, library linked, glibc; records marked valid with 2 (TCTX-13)", valid_2, o);
    m.hazards.push_back("valid_2");
    members.push_back(std::move(m));
  }
  const std::string other = base + "/variants/nodejs-schema/otel-tctx-writer";
  if (fs::exists(other)) {
    auto m = member("nodejs-schema", "announces threadlocal.schema_version nodejs_v1_dev (not this layout)", other, o);
    m.must_not_be_read = true;
    members.push_back(std::move(m));
  }
  return members;
}

}  // namespace tracecorr::otel_thread_context::reader
