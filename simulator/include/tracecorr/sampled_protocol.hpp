// A protocol whose per-thread records a sampler reads (OTEP 4947's thread
// context is one): the package answers, for a process, whether it publishes
// the protocol, where each thread's record is (the RecordLayout and this
// process's PointerSite, in any TLS access model: resolve_tls_access) and what
// one record's bytes say. The engine's host-agent part (sampled_processes.hpp)
// asks every registered one of each process it is pointed at, tracks the
// process with its sampler and lists per thread what it read, knowing no
// protocol. Packages register theirs before main, like their inspectors.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/reader_defects.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr {

// What one record read with a sample says of its thread, in the terms every
// profiler exports (an OTLP profiles sample's link and attributes): the
// package's own reading of its record, so the engine can export every sample
// of every protocol without naming one (HostAgentOptions::observe).
struct RecordContext {
  struct Link {
    TraceId trace_id{};
    SpanId span_id{};
    bool operator==(const Link&) const = default;
  };
  // nullopt: the record carried no valid context (not valid, outside a
  // trace, zero ids, undecodable): the sample is exported without a link.
  std::optional<Link> link;
  std::optional<std::uint8_t> trace_flags;  // when the protocol's record carries them
  // The record's attributes by name (a key map's names, say); null: none.
  std::shared_ptr<const otlp::Attributes> attributes;
  // false: read the same bytes again next time (an index its key map lacked
  // may be named by a later refresh), so the engine does not cache it.
  bool settled = true;
  bool operator==(const RecordContext& other) const;
};

// The context of a readable record that carries ids, flags and named values
// (OTEP 4947's layout, whichever way it was reached): a link unless both ids
// are zero, the flags with it, each value as a string when it is UTF-8 and
// as bytes otherwise. `settled`: RecordContext::settled.
struct NamedValue {
  std::string key;
  std::span<const std::uint8_t> value;
};
RecordContext linked_context(const TraceId& trace_id, const SpanId& span_id, std::uint8_t trace_flags,
                             const std::vector<NamedValue>& values, bool settled);

// One process's records, as its protocol located them.
class SampledRecords {
 public:
  virtual ~SampledRecords() = default;
  virtual const RecordLayout& layout() const = 0;
  // This process's site: a thread-pointer offset or a module's block in each
  // thread's DTV (plus an offset), or a memory area.
  virtual PointerSite site() const = 0;
  // Where the records are, for people (notices, the agent's state line).
  virtual std::string where() const = 0;
  // The same as data for the summary (module, variable, access model, ...).
  virtual nlohmann::json description() const = 0;
  // What one sampled record says (ids, flags, attributes by name, ...), from
  // its bytes as read (cut at layout().max_size when the record declared
  // more). Asked once per distinct record a thread shows, while the process
  // may still run: a protocol may read it again (a key map refreshed).
  // Hostile bytes: never an exception, a record it cannot decode says why.
  virtual nlohmann::json decode(std::span<const std::uint8_t> record) = 0;
  // The same record as an exported observation's context (link, flags,
  // attributes). Asked once per distinct record a thread shows (cached by its
  // bytes, within a bound), under the same rules as decode(). The default: no context.
  virtual RecordContext context(std::span<const std::uint8_t> record) {
    (void)record;
    return {};
  }
  // The same, given where the record lies in the process (0: unknown). A
  // conforming reader needs nothing past the bytes read; only a reader defect
  // reading past the bound (unbounded-record) uses it. The default: context().
  virtual RecordContext context_at(std::span<const std::uint8_t> record, std::uint64_t address) {
    (void)address;
    return context(record);
  }
};

class SampledProtocol {
 public:
  virtual ~SampledProtocol() = default;
  virtual std::string_view id() const = 0;  // the registry's protocol id ("otel-thread-context")
  // nullptr: `pid` does not publish the protocol (now: a library loaded later
  // is found by a later look). An error: it publishes it, but its records
  // cannot be read, saying why; kNotReady (the loader has not relocated the
  // variable's descriptor or GOT word yet) and the rest are asked again.
  // `defects`: the reader defects in force (reader_defects.hpp; empty for a
  // conforming reader), which the records it returns read by.
  virtual Expected<std::unique_ptr<SampledRecords>> locate(pid_t pid, LibraryCache& cache,
                                                           const ReaderDefects& defects) const = 0;
  // The defects its reading code can be told to show (--reader-defect).
  virtual std::vector<ReaderDefect> reader_defects() const { return {}; }
};

// Adding the same protocol twice is a no-op (plugin_registry.hpp).
void register_sampled_protocol(const SampledProtocol& protocol);
// In registration order.
std::vector<const SampledProtocol*> sampled_protocols();

}  // namespace tracecorr
