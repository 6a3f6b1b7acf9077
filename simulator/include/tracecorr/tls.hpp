// How a process's threads reach a TLS variable, in every access model a
// linker and loader can give it, and the read of a thread's record through it.
//
// A variable's address in one thread is either
//  - thread pointer + a fixed offset (static TLS): a TLSDESC descriptor whose
//    resolver returns its argument, an initial-exec GOT word (TPOFF), or, for
//    an executable's own variable, the offset the psABI's static TLS layout
//    gives (local exec, from PT_TLS); or
//  - the start of the module's block in this thread's DTV + an offset (dynamic
//    TLS): a TLSDESC descriptor whose argument points to the loader's
//    {module id, offset[, generation]}, a general-dynamic GOT pair
//    (DTPMOD, DTPOFF), or a module's own DTPMOD word (local dynamic).
// The DTV is the C library's: where the thread control block keeps it and how
// it is laid out differs between glibc and musl and between x86-64 and arm64
// (dtv_layout()). Under qemu-user the same holds for the guest, whose memory
// is the qemu process's and whose thread pointers come from the gdbstub.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "tracecorr/discovery.hpp"
#include "tracecorr/elf.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr {

enum class TlsModel {
  StaticOffset,  // resolver returns its argument: argument is the thread-pointer offset
  Dynamic,       // dynamic TLS: argument points to loader data, not readable from BPF
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

// The DTV layout of a C library on a machine; nullopt for those tracecorr
// does not know (then dynamic TLS cannot be read).
std::optional<DtvLayout> dtv_layout(CLibrary c_library, elf::Machine machine);

// The offset from the thread pointer of an executable's own variable at
// `symbol_value` in its PT_TLS template: the executable is module 1, placed by
// the psABI's static TLS layout (x86-64, variant II: its block ends at the
// thread pointer, rounded up to p_align; arm64, variant I: it starts after the
// 16-byte TCB, rounded up to p_align). The offsets linkers write into
// local-exec code, and so the ones every loader must honour.
Expected<std::int64_t> local_exec_offset(const elf::TlsSegment& segment, std::uint64_t symbol_value,
                                         elf::Machine machine);

// How the variable is reached, by the model its module's code was built with
// (and, for descriptors, what the loader made of it).
enum class TlsAccessModel {
  DescriptorStatic,   // TLSDESC in static TLS: the descriptor's argument is the thread-pointer offset
  DescriptorDynamic,  // TLSDESC in dynamic TLS: the argument points to {module id, offset[, generation]}
  GeneralDynamic,     // DTPMOD/DTPOFF GOT words naming the variable: module id and offset in its block
  InitialExec,        // a TPOFF GOT word naming the variable: its thread-pointer offset
  LocalExec,          // an executable's own variable: the offset the static TLS layout gives
  LocalDynamic,       // a DTPMOD word naming no symbol: the module's own id, the offset from the symbol
};
const char* to_string(TlsAccessModel m);  // "tlsdesc-static", "general-dynamic", ...

struct TlsVariableAccess {
  TlsAccessModel model = TlsAccessModel::DescriptorStatic;
  PointerSite site;  // each thread's variable: thread pointer + offset, or its DTV's block + offset
  CLibrary c_library = CLibrary::Unknown;   // whose DTV layout `site` walks (a static site needs none)
  std::optional<TlsDescriptor> descriptor;  // the descriptor models: the descriptor as read
  std::string explanation;                  // for people: the model and how a thread's variable is found
  bool dynamic() const { return site.module.has_value(); }
};

// How `library`'s TLS variable is reached in its process, trying each model
// its relocations (or, for an executable, its PT_TLS) offer, TLSDESC first.
// `c_library` names the DTV layout for the dynamic models (detect_c_library).
// When no model can be read, the error says, per model tried, why; its kind
// is the first model's: kNotReady (the loader has not relocated the
// descriptor or GOT word yet: try again later), kUnsupported (dynamic TLS
// under an unknown C library or machine), kNotFound (nothing names the
// variable: a library that never accesses it, or a static executable without
// .dynsym), kMalformed (a module id or PT_TLS no loader would produce), or the
// memory's kinds.
Expected<TlsVariableAccess> resolve_tls_access(const ProcessMemory& memory, const AgentLibrary& library,
                                               CLibrary c_library);

// thread pointer + the site (static TLS, the module's block in the thread's
// DTV, or the layout's memory area) -> record pointer -> record bytes, read
// by `layout`. kNotAllocated: the thread has no block for the module yet
// (dynamic TLS it has not touched): it has published nothing.
struct ThreadRecordRead {
  std::uint64_t pointer_address = 0;  // where the record pointer was read
  std::uint64_t record_pointer = 0;  // 0: the thread has no record (yet)
  std::optional<RecordBytes> bytes;  // the first layout.max_size bytes of a record declaring more
  std::uint64_t declared_length = 0;  // > bytes->size(): the record declares more than its layout's bound
};
Expected<ThreadRecordRead> read_thread_record(const ProcessMemory& mem, const RecordLayout& layout,
                                              std::uint64_t thread_pointer, const PointerSite& site);

}  // namespace tracecorr
