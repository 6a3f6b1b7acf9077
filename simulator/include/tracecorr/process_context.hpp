// An OpenTelemetry process context (OTEP 4719), read from outside the process:
// discovery of its mapping, its 32-byte header, the timestamp seqlock, and the
// protobuf payload decoded into typed attributes.
//
// This is an engine reader, like the OTLP decoders: the process context is a
// mechanism several protocol packages build on (otel_process_context judges
// its writers; OTEP 4947's thread context publishes through it). It judges
// nothing: failures carry an ErrorKind, and a package maps kinds to its
// requirement IDs. The format, in the project's words, is
// spec/otel-process-context.md.
//
// Everything read is hostile: every length is bounded before anything is
// allocated, and the target's memory is only ever read (ProcessMemory).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/maps.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/process_context_header.h"

namespace tracecorr::process_context {

// ---- Discovery --------------------------------------------------------------------------------

// How the writer's mapping came to be, by the name /proc/PID/maps gives it.
enum class MappingKind {
  AnonShmem,  // "[anon_shmem:OTEL_CTX]": a memfd mapping named by prctl(PR_SET_VMA_ANON_NAME)
  Anon,       // "[anon:OTEL_CTX]": an anonymous mapping named by prctl (memfd unavailable)
  Memfd,      // "/memfd:OTEL_CTX": a memfd mapping the kernel could not rename (no CONFIG_ANON_VMA_NAME)
};
std::string_view to_string(MappingKind kind);  // "anon_shmem", "anon", "memfd"
// The name prefix a mapping of this kind starts with, as the kernel prints it.
std::string_view name_prefix(MappingKind kind);

// The kind of a mapping whose /proc/PID/maps name starts with one of the three
// prefixes (a " (deleted)" suffix, or anything else after the prefix, does not
// change it); nullopt for every other name. Case and position are exact: the
// prefix is compared byte for byte from the name's first byte.
std::optional<MappingKind> kind_of_mapping_name(std::string_view name);

struct ContextMapping {
  Mapping mapping;  // as /proc/PID/maps lists it: address, permissions, name
  MappingKind kind = MappingKind::Memfd;
  // MADV_DONTFORK (VM_DONTCOPY) as /proc/PID/smaps shows it ("dc" in VmFlags);
  // nullopt when smaps did not say (unreadable, or no VmFlags line).
  std::optional<bool> dont_fork;
};

// Every mapping whose name marks it as a process context, in address order.
// A process should have one; all are returned, and which one counts is the
// caller's choice (the OTEP does not say).
std::vector<ContextMapping> find_context_mappings(const std::vector<Mapping>& maps);

// How many context mappings of one process are looked into (their VmFlags,
// header and payload). A process should have one (the protocol's rule fails at
// the second); a hostile one may map thousands sharing one large payload, and
// reading each would cost the kit memory and time in proportion. The rest are
// counted, never read.
inline constexpr std::size_t kMaxMappingsRead = 4;

// Whether dont_fork is read. /proc/PID/smaps walks the page tables of every
// mapping listed before the context's (a process with 2000 threads: 2000
// stacks, the costliest read of an inspect), and only the fork rule
// needs it: a reader of the context's contents (OTEP 4947's reference data,
// the key map) skips it.
enum class DontFork { kRead, kSkip };

// find_context_mappings over /proc/PID/maps, with dont_fork from /proc/PID/smaps
// for the first kMaxMappingsRead of them (read only when a mapping was found,
// and only as far as needed; kSkip: left unknown). Errors: the process cannot
// be read (gone, permission).
// `anon_shmem_only` (the reader defect one-mapping-name, breaking the rule of the three names;
// never set but by the host agent): only "[anon_shmem:OTEL_CTX]" mappings are found.
Expected<std::vector<ContextMapping>> discover(pid_t pid, DontFork dont_fork = DontFork::kRead,
                                               bool anon_shmem_only = false);

// Mappings that hold a header with the signature but are not named as a
// context (a writer that named its memfd otherwise, or never named its
// anonymous mapping): no reader finds them. Only memory a context could be
// published in is looked at (anonymous, memfd or named anonymous, readable
// and writable, not a file), at most kMisnamedLookBound mappings, 8 bytes
// each; unreadable ones are passed over.
inline constexpr std::size_t kMisnamedLookBound = 4096;
std::vector<Mapping> find_misnamed_headers(const std::vector<Mapping>& maps, const ProcessMemory& memory);

// ---- Header -----------------------------------------------------------------------------------

// The header at the start of the mapping: 32 bytes, little-endian on every
// architecture the OTEP names. Spelled once, in process_context_header.h,
// which the BPF sampler shares.
inline constexpr std::size_t kHeaderSize = TC_PCTX_HEADER_SIZE;
inline constexpr std::size_t kSignatureOffset = TC_PCTX_SIGNATURE_OFFSET, kSignatureSize = 8;
inline constexpr std::size_t kVersionOffset = TC_PCTX_VERSION_OFFSET;            // u32
inline constexpr std::size_t kPayloadSizeOffset = TC_PCTX_PAYLOAD_SIZE_OFFSET;   // u32
inline constexpr std::size_t kPublishedAtOffset = TC_PCTX_PUBLISHED_AT_OFFSET;   // u64, monotonic_published_at_ns
inline constexpr std::size_t kPayloadPointerOffset = TC_PCTX_PAYLOAD_OFFSET;     // u64
inline constexpr std::array<char, kSignatureSize> kSignature{'O', 'T', 'E', 'L', '_', 'C', 'T', 'X'};  // no NUL
inline constexpr std::uint32_t kCurrentVersion = TC_PCTX_VERSION_CURRENT;
inline constexpr std::uint32_t kDevelopmentVersion = TC_PCTX_VERSION_DEVELOPMENT;  // "can be used for development"
static_assert([] {
  std::uint64_t le = 0;
  for (std::size_t i = 0; i < kSignatureSize; ++i) le |= std::uint64_t(std::uint8_t(kSignature[i])) << (8 * i);
  return le == TC_PCTX_SIGNATURE_LE;
}(), "TC_PCTX_SIGNATURE_LE is the signature's bytes");

struct Header {
  std::array<std::uint8_t, kSignatureSize> signature{};
  std::uint32_t version = 0;
  std::uint32_t payload_size = 0;
  std::uint64_t published_at_ns = 0;  // 0: being written, not ready for reading
  std::uint64_t payload = 0;          // address of the payload in the writer's process

  bool signature_matches() const;  // exactly the 8 bytes "OTEL_CTX"
  std::string signature_text() const;  // printable, non-ASCII as \xNN
};

// Decodes the header fields from bytes (e.g. captured by a watcher). Pure; the
// only error is kTruncated for fewer than kHeaderSize bytes. Judges nothing.
Expected<Header> parse_header(std::span<const std::uint8_t> bytes);

// The reader's identity check (the OTEP's reading step 2): kBadSignature when
// the 8 signature bytes are not "OTEL_CTX", kUnsupportedVersion when the
// version is not 2 (nor 1, when `accept_development_version`).
Status check_identity(const Header& header, bool accept_development_version);

// ---- The seqlock read ---------------------------------------------------------------------------

// Bounds of one read. The payload bound defaults to the larger of the limits
// known readers use (1 MiB); it cannot be raised past kPayloadHardCap.
inline constexpr std::size_t kDefaultMaxPayloadBytes = 1u << 20;
inline constexpr std::size_t kPayloadHardCap = 16u << 20;

struct ReadOptions {
  std::size_t max_payload_bytes = kDefaultMaxPayloadBytes;  // clamped to kPayloadHardCap
  // Attempts after the first; the OTEP sets no bound, tracecorr does and reports each one.
  unsigned max_retries = 16;
  std::chrono::microseconds retry_pause{500};  // between attempts, so a writer mid-update can finish
  // Version 1 is read (tracecorr reports it; a production reader would skip it).
  bool accept_development_version = true;
  // The reading protocol's steps, each false only as a reader defect (the
  // host agent's --reader-defect, for conformance kill matrices; never in
  // inspect or conform): any-signature skips step 2's identity check,
  // ignores-seqlock takes the payload whatever the timestamp (0 included)
  // and does not re-read it after the copy (steps 3, 6-7).
  bool check_identity = true;
  bool seqlock = true;
};

enum class RetryReason {
  TimestampZero,     // monotonic_published_at_ns was 0: the writer is mid-update
  TimestampChanged,  // it changed between the header read and the re-read after the payload copy
};
std::string_view to_string(RetryReason reason);  // "timestamp-zero", "timestamp-changed"

struct Retry {
  RetryReason reason;
  std::uint64_t timestamp_before = 0;  // the header's timestamp of that attempt
  std::uint64_t timestamp_after = 0;   // the re-read (TimestampChanged; 0 otherwise)
};

// Which read of an attempt failed, for a caller that maps a failure to a rule.
enum class ReadStage {
  Header,     // the 32 bytes at the mapping's start (kUnmapped, kGone, kPermission),
              // or their identity (kBadSignature, kUnsupportedVersion)
  Payload,    // payload_size past the bound (kTooLong) or the payload unreadable (kUnmapped, ...)
  Timestamp,  // the re-read of the timestamp
  Retries,    // gave up: kNotReady (timestamp stayed 0) or kKeptChanging (every attempt torn)
};
std::string_view to_string(ReadStage stage);

// What one seqlock read found. On success `payload` holds exactly
// header->payload_size bytes copied while the timestamp stood still, and
// `header` is the header they belong to. On failure `error` says why (with
// `stage`), and `header` is the last one read, if any. `retries` lists every
// attempt that was started over, in order, in both cases.
struct ContextRead {
  std::uint64_t address = 0;  // of the header
  std::optional<Header> header;
  std::vector<std::uint8_t> payload;
  std::vector<Retry> retries;
  std::optional<Error> error;
  ReadStage stage = ReadStage::Header;  // meaningful with `error`
  bool ok() const { return !error.has_value(); }
};

// The OTEP's reading protocol (steps 2-7) at `address`: identity check, the
// timestamp non-zero (else retry), copy the payload, re-read the timestamp
// (changed: retry), with at most options.max_retries retries. Never writes.
ContextRead read_context(const ProcessMemory& memory, std::uint64_t address, const ReadOptions& options = {});

// A reader that polls (the OTEP's cache invalidation key): keeps its last
// consistent read and copies the payload again only when the header's
// timestamp differs from that read's. One 8-byte read when nothing changed.
class CachedContextReader {
 public:
  CachedContextReader(const ProcessMemory& memory, std::uint64_t address, ReadOptions options = {})
      : memory_(memory), address_(address), options_(options) {}
  // The current context: the cached read, or a new seqlock read when the
  // timestamp moved (or there is no consistent read yet).
  const ContextRead& refresh();
  // Whether the last refresh() answered from the cache.
  bool last_refresh_was_cached() const { return cached_; }

 private:
  const ProcessMemory& memory_;
  std::uint64_t address_;
  ReadOptions options_;
  std::optional<ContextRead> last_;
  bool cached_ = false;
};

// ---- The payload --------------------------------------------------------------------------------

// Bounds of one decode, checked on the wire before libprotobuf allocates.
struct DecodeLimits {
  std::size_t max_payload_bytes = kPayloadHardCap;
  std::size_t max_fields = 100000;           // protobuf fields counted on the wire, at every depth
  std::size_t max_attributes = 4096;         // per list: resource attributes, attributes, one kvlist
  std::size_t max_array_elements = 4096;     // per array value
  std::size_t max_string_bytes = 64u << 10;  // per key, string value or bytes value
  std::size_t max_nesting_depth = 8;         // arrays and kvlists inside an attribute value
};

using AttributeList = std::vector<otlp::KeyValue>;  // in payload order, duplicate keys kept

// A decoded ProcessContext (the .proto: simulator/proto/.../process_context.proto).
struct Payload {
  bool has_resource = false;         // field 1 present (possibly empty)
  AttributeList resource;            // resource.attributes
  std::uint32_t resource_dropped_attributes_count = 0;
  AttributeList attributes;          // field 2: what the OTEP's prose calls extra_attributes
  std::size_t unknown_fields = 0;    // fields this schema does not name, at any depth (protobuf evolution)
};

// Decodes a payload. Errors: kTooLong (a DecodeLimits bound, naming it) or
// kMalformed naming what is wrong and where: the field path
// ("resource.attributes[2].value.array_value.values[0]") and the byte offset
// in the payload (truncated varint or length, wrong wire type for a known
// field, invalid UTF-8 in a string, field number 0, unterminated group).
Expected<Payload> decode_payload(std::span<const std::uint8_t> bytes, const DecodeLimits& limits = {});

// The protobuf encoding of a payload, keys and values in order (resource
// present when has_resource or when it has attributes): for tests, seed
// corpora and tools that publish a context.
std::vector<std::uint8_t> encode_payload(const Payload& payload);

// The length of the longest prefix of `bytes` made of whole, well-formed
// top-level fields (the first field that does not parse ends it). Equal to
// bytes.size() for a well-formed payload; a shorter answer after which the
// prefix decodes is how a payload_size larger than the message shows.
std::size_t complete_prefix_length(std::span<const std::uint8_t> bytes);

// Keys that occur more than once in a list, each once, in first-seen order.
std::vector<std::string> duplicate_keys(const AttributeList& list);
// Keys that start with `prefix`, in list order.
std::vector<std::string> keys_with_prefix(const AttributeList& list, std::string_view prefix);
// The first value under `key`, or nullptr.
const otlp::AttributeValue* find_attribute(const AttributeList& list, std::string_view key);
// OTEP 4947's keys, published in `attributes`.
inline constexpr std::string_view kThreadLocalPrefix = "threadlocal.";

// ---- One look at a process ---------------------------------------------------------------------

struct MappingSnapshot {
  ContextMapping mapping;
  ContextRead read;                        // at mapping.mapping.start
  std::optional<Expected<Payload>> decoded;  // when the read succeeded
};

struct Snapshot {
  pid_t pid = 0;
  // The first kMaxMappingsRead context mappings in address order, each read
  // and decoded; mappings_found counts every one /proc/PID/maps names.
  std::vector<MappingSnapshot> mappings;
  std::size_t mappings_found = 0;
  std::size_t mappings_not_read() const { return mappings_found - mappings.size(); }
  // CLOCK_BOOTTIME when the reads were done, and the process's start on the
  // same clock (/proc/PID/stat, clock-tick resolution; nullopt: unreadable).
  std::uint64_t boottime_now_ns = 0;
  std::optional<std::uint64_t> process_start_boottime_ns;
  std::uint64_t clock_tick_ns = 0;  // the resolution of process_start_boottime_ns
};

// discover(pid, dont_fork), then read_context and decode_payload for the first
// kMaxMappingsRead mappings (the others counted in mappings_found). Errors: the
// process cannot be read at all (gone, permission).
Expected<Snapshot> take_snapshot(pid_t pid, const ReadOptions& read = {}, const DecodeLimits& decode = {},
                                 DontFork dont_fork = DontFork::kRead);
// The context's contents only (dont_fork unknown): take_snapshot(pid, {}, {}, DontFork::kSkip).
inline Expected<Snapshot> take_contents_snapshot(pid_t pid) { return take_snapshot(pid, {}, {}, DontFork::kSkip); }

// CLOCK_BOOTTIME now, in nanoseconds.
std::uint64_t boottime_ns();

// A thread-context key map (a process context's threadlocal.attribute_key_map,
// as the protocol reads it: `read`) read again when a record carries an index
// the map lacks, at most once per `min_interval`: each read is a whole
// snapshot (maps, smaps, the payload), and a process whose records carry
// indexes outside its map made every record take one (2000 such threads kept
// `inspect` busy for over a minute). `inspect` refreshes at most once per look
// at a process (kOncePerLook), the host agent once per rescan interval.
class KeyMapRefresher {
 public:
  using KeyMap = std::vector<std::string>;
  using Read = std::optional<KeyMap> (*)(pid_t);
  static constexpr std::chrono::milliseconds kOncePerLook = std::chrono::milliseconds::max();
  // A read that failed (the process context caught mid-update, its timestamp
  // 0: the seqlock says read again) is retried this soon, not a whole
  // min_interval later: a key appended and used at once is otherwise missed.
  // Still a bound: a target whose every read fails costs 50 reads a second.
  static constexpr std::chrono::milliseconds kRetryAfterFailure{20};
  KeyMapRefresher(pid_t pid, std::chrono::milliseconds min_interval, Read read)
      : pid_(pid), min_interval_(min_interval), read_(read) {}
  std::optional<KeyMap> refresh();
  std::size_t reads() const { return reads_; }        // snapshots taken
  std::size_t requests() const { return requests_; }  // refreshes asked for (records with an unknown index)

 private:
  pid_t pid_;
  std::chrono::milliseconds min_interval_;
  Read read_;
  std::optional<std::chrono::steady_clock::time_point> last_read_;
  bool last_failed_ = false;
  std::optional<KeyMap> last_;
  std::size_t reads_ = 0, requests_ = 0;
};

}  // namespace tracecorr::process_context
