// libFuzzer: what tracecorr reads from target memory, the process storage
// (variable length, pulled on demand), the per-thread record, and the length
// a size-field record declares. The first byte chooses the decoder, the rest
// is the target's memory.
#include "tracecorr/record_layout.hpp"
#include "elastic_v1/wire.hpp"

namespace {
// A record whose header says how long it is (the shape of OTEP 4947's).
const tracecorr::RecordLayout& size_field_layout() {
  static const tracecorr::RecordLayout layout = [] {
    tracecorr::RecordLayout l;
    l.name = "fuzzed size-field record";
    l.length = tracecorr::SizeField{26, 2, 28};
    l.max_size = 640;
    l.valid_offset = 24;
    return l;
  }();
  return layout;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tracecorr::elastic_v1;
  if (size == 0) return 0;
  std::span<const std::uint8_t> memory(data + 1, size - 1);
  if (data[0] & 1) {
    auto storage = decode_process_storage(tracecorr::buffer_source(memory));
    if (storage.ok() && storage->encoded_size > memory.size()) __builtin_trap();  // consumed bytes it never had
  } else if (data[0] & 2) {
    const auto& layout = size_field_layout();
    auto length = tracecorr::record_length(layout, memory);
    if (length.ok() && (*length > layout.max_size || *length < layout.fixed_part())) __builtin_trap();  // past the bound
    if (!length.ok() && length.error().kind != tracecorr::ErrorKind::kTooLong &&
        length.error().kind != tracecorr::ErrorKind::kTruncated)
      __builtin_trap();
  } else {
    auto record = decode_tls_record(memory);
    if (record.ok() && decode_tls_record(encode_tls_record(*record)).value() != *record) __builtin_trap();
  }
  return 0;
}
