// The header and the OTEP's reading protocol: a seqlock on the header's
// timestamp, read from outside the process with bounded, reported retries.
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "tracecorr/process_context.hpp"

namespace tracecorr::process_context {
namespace {

std::uint64_t load_le(std::span<const std::uint8_t> bytes, std::size_t offset, std::size_t size) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < size; ++i) v |= static_cast<std::uint64_t>(bytes[offset + i]) << (8 * i);
  return v;
}

std::string where_header(std::uint64_t address) { return "process context header at " + hex_address(address); }

}  // namespace

std::string_view to_string(RetryReason reason) {
  switch (reason) {
    case RetryReason::TimestampZero: return "timestamp-zero";
    case RetryReason::TimestampChanged: return "timestamp-changed";
  }
  return "unknown";
}

std::string_view to_string(ReadStage stage) {
  switch (stage) {
    case ReadStage::Header: return "header";
    case ReadStage::Payload: return "payload";
    case ReadStage::Timestamp: return "timestamp";
    case ReadStage::Retries: return "retries";
  }
  return "unknown";
}

bool Header::signature_matches() const { return std::memcmp(signature.data(), kSignature.data(), kSignatureSize) == 0; }

std::string Header::signature_text() const {
  std::string out;
  for (auto c : signature) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

Expected<Header> parse_header(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < kHeaderSize)
    return make_error(ErrorKind::kTruncated,
                      std::to_string(bytes.size()) + " bytes; the header has " + std::to_string(kHeaderSize),
                      "process context header");
  Header h;
  std::memcpy(h.signature.data(), bytes.data() + kSignatureOffset, kSignatureSize);
  h.version = static_cast<std::uint32_t>(load_le(bytes, kVersionOffset, 4));
  h.payload_size = static_cast<std::uint32_t>(load_le(bytes, kPayloadSizeOffset, 4));
  h.published_at_ns = load_le(bytes, kPublishedAtOffset, 8);
  h.payload = load_le(bytes, kPayloadPointerOffset, 8);
  return h;
}

Status check_identity(const Header& header, bool accept_development_version) {
  if (!header.signature_matches())
    return make_error(ErrorKind::kBadSignature, "signature is \"" + header.signature_text() + "\", not \"OTEL_CTX\"",
                      "header.signature (bytes 0-7)");
  if (header.version != kCurrentVersion && !(accept_development_version && header.version == kDevelopmentVersion))
    return make_error(ErrorKind::kUnsupportedVersion,
                      "version " + std::to_string(header.version) + "; this reader reads " +
                          std::to_string(kCurrentVersion) +
                          (accept_development_version ? " and " + std::to_string(kDevelopmentVersion) + " (development)" : ""),
                      "header.version (bytes 8-11)");
  return Ok{};
}

ContextRead read_context(const ProcessMemory& memory, std::uint64_t address, const ReadOptions& options) {
  ContextRead out;
  out.address = address;
  const std::size_t max_payload = std::min(options.max_payload_bytes, kPayloadHardCap);
  auto fail = [&](ReadStage stage, Error error) {
    out.stage = stage;
    out.error = error.within(where_header(address));
    out.payload.clear();
    return out;
  };
  auto read_timestamp = [&]() { return memory.read_u64(address + kPublishedAtOffset); };

  for (unsigned attempt = 0;; ++attempt) {
    // Returns true when the attempt is to be started over, false when the
    // retries are spent (out.error is then set).
    auto start_over = [&](RetryReason reason, std::uint64_t before, std::uint64_t after) {
      if (attempt >= options.max_retries) {
        const unsigned reads = attempt + 1;
        if (reason == RetryReason::TimestampZero)
          fail(ReadStage::Retries, make_error(ErrorKind::kNotReady,
                                              "monotonic_published_at_ns was 0 in all " + std::to_string(reads) +
                                                  " reads (the context stayed marked as being written)"));
        else
          fail(ReadStage::Retries, make_error(ErrorKind::kKeptChanging,
                                              "monotonic_published_at_ns changed during the payload copy; " +
                                                  std::to_string(reads) + " reads, none consistent (last " +
                                                  std::to_string(before) + " -> " + std::to_string(after) + ")"));
        return false;
      }
      out.retries.push_back({reason, before, after});
      return true;
    };
    if (attempt > 0 && options.retry_pause.count() > 0) std::this_thread::sleep_for(options.retry_pause);

    // Step 2-3: the header, its identity, a non-zero timestamp.
    std::array<std::uint8_t, kHeaderSize> raw{};
    if (auto st = memory.read(address, raw); !st) return fail(ReadStage::Header, st.error());
    const Header header = *parse_header(raw);
    out.header = header;
    if (auto id = options.check_identity ? check_identity(header, options.accept_development_version) : Status(Ok{}); !id)
      return fail(ReadStage::Header, id.error());
    if (header.published_at_ns == 0 && options.seqlock) {
      if (!start_over(RetryReason::TimestampZero, 0, 0)) return out;
      continue;
    }
    // Step 4. Our reads are system calls (process_vm_readv), each complete
    // before the next begins; the fence keeps the compiler from moving them.
    std::atomic_thread_fence(std::memory_order_seq_cst);

    // Step 5: the payload. A failure here is the writer's only when the
    // header did not change under us (else it is a torn read: retry).
    auto torn = [&](std::uint64_t& now) {
      auto again = options.seqlock ? read_timestamp() : Expected<std::uint64_t>(header.published_at_ns);
      now = again ? *again : 0;
      return again && *again != header.published_at_ns;
    };
    std::vector<std::uint8_t> payload;
    if (header.payload_size > max_payload) {
      std::uint64_t now = 0;
      if (torn(now)) {
        if (!start_over(RetryReason::TimestampChanged, header.published_at_ns, now)) return out;
        continue;
      }
      return fail(ReadStage::Payload,
                  make_error(ErrorKind::kTooLong,
                             "payload_size " + std::to_string(header.payload_size) + " exceeds the reader's " +
                                 std::to_string(max_payload) + "-byte bound",
                             "header.payload_size (bytes 12-15)"));
    }
    payload.resize(header.payload_size);
    if (!payload.empty()) {
      if (auto st = memory.read(header.payload, payload); !st) {
        std::uint64_t now = 0;
        if (torn(now)) {
          if (!start_over(RetryReason::TimestampChanged, header.published_at_ns, now)) return out;
          continue;
        }
        return fail(ReadStage::Payload, st.error().within("payload (" + std::to_string(header.payload_size) +
                                                          " bytes at " + hex_address(header.payload) + ")"));
      }
    }
    // Step 6-7: the timestamp again; unchanged means header and payload are one publication.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    auto again = options.seqlock ? read_timestamp() : Expected<std::uint64_t>(header.published_at_ns);
    if (!again) return fail(ReadStage::Timestamp, again.error().within("monotonic_published_at_ns re-read"));
    if (*again != header.published_at_ns) {
      if (!start_over(RetryReason::TimestampChanged, header.published_at_ns, *again)) return out;
      continue;
    }
    out.payload = std::move(payload);
    out.error.reset();
    return out;
  }
}

const ContextRead& CachedContextReader::refresh() {
  if (last_ && last_->ok()) {
    auto now = memory_.read_u64(address_ + kPublishedAtOffset);
    if (now && *now != 0 && *now == last_->header->published_at_ns) {
      cached_ = true;
      return *last_;
    }
  }
  cached_ = false;
  last_ = read_context(memory_, address_, options_);
  return *last_;
}

std::uint64_t boottime_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace tracecorr::process_context
