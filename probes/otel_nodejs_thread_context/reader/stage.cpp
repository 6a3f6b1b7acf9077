// The Node.js thread-context writers of the stage: the V8-shaped reference
// (fixtures/otel_nodejs_thread_context) with its addon dlopen()ed as Node.js
// loads one, in glibc's static TLS surplus and again in dynamic TLS (the
// DTV), showing the walk's hazards in turn (README.md, "Stage hazards"); and
// the same program announcing another schema, and none, which a conforming
// reader leaves alone (NJSR-01).
#include <filesystem>

#include "otel_nodejs_thread_context/registry.hpp"
#include "reader.hpp"

namespace tracecorr::otel_nodejs_thread_context::reader {
namespace {

namespace fs = std::filesystem;

// Every hazard the writer shows (njs_v8_writer.c), and the states of every span.
const std::vector<std::string> kHazards = {"valid_0_poison", "gate_closed_poison", "rehash_forward", "record_null",
                                           "deleted_entries", "map_forwarded",      "out_of_map",     "frame_detached",
                                           "frame_undefined"};

profiler::StageMember member(const std::string& name, const std::string& layout, const std::string& program,
                             const profiler::StageOptions& o) {
  profiler::StageMember m;
  m.name = std::string(spec::kProtocol.id) + "/" + name;
  m.protocol = std::string(spec::kProtocol.id);
  m.layout = layout;
  // One busy worker: a CPU-time sampler sees it (a sleeping thread is
  // never sampled). Each span and its detach are held half as long as a
  // hazard, then the next hazard: each of the seven comes round every 2.8 s
  // at 200 ms.
  m.argv = {program, "--threads", "1", "--span-ms", std::to_string(o.hazard_ms / 2), "--state-journal", "--stage-hazards",
            "--hazard-ms", std::to_string(o.hazard_ms)};
  m.hazards = kHazards;
  // Seven hazards share its samples, each judged on at least kMinSamples of
  // its own (the two read members together): 150 give each about 15.
  m.samples_wanted = 150;
  return m;
}

}  // namespace

std::vector<profiler::StageMember> stage(const profiler::StageOptions& o) {
  const std::string program = o.fixtures_dir + "/otel_nodejs_thread_context/reference/njs-v8-writer";
  if (!fs::exists(program)) return {};
  std::vector<profiler::StageMember> members;
  members.push_back(member("addon-dlopen", "TLS descriptors, addon dlopen()ed (static surplus), glibc", program, o));
  auto dynamic = member("addon-dlopen-dynamic", "TLS descriptors, addon dlopen()ed, dynamic TLS (the DTV), glibc",
                        program, o);
  dynamic.env["GLIBC_TUNABLES"] = "glibc.rtld.optional_static_tls=0";
  members.push_back(std::move(dynamic));
  // The same records under OTEP 4947's schema, and under no schema at all:
  // every context reported for them was read by a walk nothing selected.
  for (const auto& [fault, words] : {std::pair<std::string, std::string>{"wrong-schema", "announces threadlocal.schema_"
                                                                                         "version tlsdesc_v1_dev"},
                                     {"no-schema", "announces no threadlocal.schema_version"}}) {
    auto m = member(fault, words + " (the struct and records of this schema)", program, o);
    m.argv.insert(m.argv.end(), {"--fault", fault});
    m.must_not_be_read = true;
    m.hazards.clear();
    members.push_back(std::move(m));
  }
  return members;
}

}  // namespace tracecorr::otel_nodejs_thread_context::reader
