// Where a thread's record pointer lives: the TLS descriptor's second word,
// added to the thread pointer. See spec/elastic-v1.md, "Reading the record".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "tracecorr/elf.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr {

enum class TlsModel {
  StaticOffset,  // resolver returns its argument: argument is the thread-pointer offset
  Dynamic,       // dynamic TLS: argument points to loader data, not readable from BPF (TLS-07)
  Unresolved,    // the loader has not relocated the descriptor yet (resolver 0)
};
const char* to_string(TlsModel m);

struct TlsDescriptor {
  std::uint64_t address = 0;   // in the target
  std::uint64_t resolver = 0;  // first word
  std::uint64_t argument = 0;  // second word
  TlsModel model = TlsModel::Unresolved;
  std::int64_t tp_offset = 0;  // valid for StaticOffset
  std::string explanation;     // for people: why this model, and what it means for them
};

// Reads the descriptor and classifies its resolver by the code it points to.
Expected<TlsDescriptor> read_tls_descriptor(const ProcessMemory& mem, std::uint64_t descriptor_addr,
                                            elf::Machine machine);

// thread pointer + offset (or the layout's memory area) -> record pointer ->
// record bytes, read by `layout`.
struct ThreadRecordRead {
  std::uint64_t record_pointer = 0;  // 0: the thread has no record (yet)
  std::optional<RecordBytes> bytes;  // the first layout.max_size bytes of a record declaring more
  std::uint64_t declared_length = 0;  // > bytes->size(): the record declares more than its layout's bound
};
Expected<ThreadRecordRead> read_thread_record(const ProcessMemory& mem, const RecordLayout& layout,
                                              std::uint64_t thread_pointer, PointerSite site);

}  // namespace tracecorr
