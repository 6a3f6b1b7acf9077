// libFuzzer: what tracecorr reads from target memory, the process storage
// (variable length, pulled on demand) and the per-thread record. The first
// byte chooses the decoder, the rest is the target's memory.
#include "elastic_v1/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tracecorr::elastic_v1;
  if (size == 0) return 0;
  std::span<const std::uint8_t> memory(data + 1, size - 1);
  if (data[0] & 1) {
    auto storage = decode_process_storage(tracecorr::buffer_source(memory));
    if (storage.ok() && storage->encoded_size > memory.size()) __builtin_trap();  // consumed bytes it never had
  } else {
    auto record = decode_tls_record(memory);
    if (record.ok() && decode_tls_record(encode_tls_record(*record)).value() != *record) __builtin_trap();
  }
  return 0;
}
