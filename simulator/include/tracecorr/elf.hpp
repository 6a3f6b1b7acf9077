// Static analysis of the agent's native library with libelf.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"

namespace tracecorr::elf {

enum class Machine { X86_64, AArch64, Other };
const char* to_string(Machine m);
Machine machine_of(unsigned e_machine);  // from the ELF header's e_machine (EM_*)

struct Symbol {
  std::string name;
  std::uint64_t value = 0;  // for STT_TLS: offset in the TLS block
  std::uint64_t size = 0;
  unsigned type = 0;        // STT_*
  unsigned binding = 0;     // STB_*
  unsigned visibility = 0;  // STV_*
  unsigned section = 0;     // SHN_* or index; SHN_UNDEF means imported, not defined
  bool defined() const { return section != 0; }
  bool thread_local_storage() const;  // STT_TLS
};
std::string describe_type(unsigned stt);  // "OBJECT", "TLS", ...
std::string describe_binding(unsigned stb);     // "GLOBAL", "WEAK", "LOCAL", ...
std::string describe_visibility(unsigned stv);  // "DEFAULT", "PROTECTED", "HIDDEN", ...

enum class TlsDialect { None, Descriptor, Traditional };
const char* to_string(TlsDialect d);

// The relocation names of each TLS dialect for a machine (the psABI's);
// nullptr for machines tracecorr does not cover.
struct DialectRelocations {
  std::string descriptor;                // "R_X86_64_TLSDESC"
  std::vector<std::string> traditional;  // "R_X86_64_DTPMOD64", ...: the three below
  std::string module_id;                 // "R_X86_64_DTPMOD64": a module id (general and local dynamic)
  std::string block_offset;              // "R_X86_64_DTPOFF64": an offset in the module's block
  std::string tp_offset;                 // "R_X86_64_TPOFF64": an offset from the thread pointer (initial exec)
};
const DialectRelocations* dialect_relocations(Machine m);
// The relocation type's name (elf.h spelling) for the TLS relocations we know, or "type N".
std::string relocation_name(Machine m, std::uint32_t type);

struct TlsAccess {
  TlsDialect dialect = TlsDialect::None;
  // For the descriptor dialect: link-time address of the `struct tlsdesc`
  // ({resolver, argument}); add the load bias to find it in a process.
  std::optional<std::uint64_t> descriptor_vaddr;
  std::vector<std::string> relocations;  // relocation type names found for the symbol
  // Both dialects present (a TLSDESC relocation and a traditional one): the
  // descriptor is still readable, but a protocol may ask for no traditional pair.
  bool mixed = false;
  // The GOT words the loader fills for the variable (link-time addresses; add
  // the load bias), one per access model the library's code uses:
  // general dynamic: a DTPMOD relocation naming the variable (its module id;
  // the psABI's tls_index puts the offset in the next word) and its DTPOFF;
  std::optional<std::uint64_t> module_id_vaddr;
  std::optional<std::uint64_t> block_offset_vaddr;
  // initial exec: a TPOFF relocation naming the variable (its thread-pointer offset);
  std::optional<std::uint64_t> tp_offset_vaddr;
  // Every relocation counted in `relocations` names no symbol: each was
  // matched by its addend, the variable's offset in the module's block. A
  // linker writes that for a variable it binds inside the module (hidden or
  // protected), and for the local-dynamic model's module base when the
  // variable sits at offset 0: an exported, preemptible variable's own
  // accesses always name it.
  bool named_by_addend_only = false;
  // a DTPMOD relocation naming no symbol: the library's own module id (local
  // dynamic, or general dynamic on a variable the library binds to itself).
  // Not counted in `relocations`: it belongs to the module, not the variable.
  std::optional<std::uint64_t> own_module_id_vaddr;
};

// The PT_TLS segment: the module's TLS template, from which the loader
// builds each thread's block (p_memsz bytes, aligned to p_align).
struct TlsSegment {
  std::uint64_t vaddr = 0;
  std::uint64_t file_size = 0;
  std::uint64_t memory_size = 0;
  std::uint64_t align = 1;
};

struct LibraryAnalysis {
  std::string path;
  Machine machine = Machine::Other;
  std::uint64_t first_load_vaddr = 0;  // p_vaddr of the first PT_LOAD (usually 0 for a .so)
  std::optional<Symbol> process_symbol;
  // The 8 bytes the file holds at the process pointer's place (native byte
  // order). While the loader has mapped that page but not yet zeroed .bss or
  // applied relocations, a read of the pointer shows exactly these bytes (for
  // a .bss pointer often text of a following section such as .comment).
  std::optional<std::uint64_t> process_pointer_in_file;
  std::optional<Symbol> tls;
  // Defined dynamic symbols named like the TLS symbol (its stem, the name up
  // to its last '_', then something else: a runtime's ctx_node_v1 beside the
  // protocol's ctx_v1): a variable a reader looking for the TLS symbol
  // passes over, named so that "not found" can say what was there. At most
  // kMaxTlsLookalikes, in .dynsym order.
  std::vector<std::string> tls_lookalikes;
  TlsAccess tls_access;
  std::optional<TlsSegment> tls_segment;
  // An executable (ET_EXEC, or ET_DYN flagged DF_1_PIE): its TLS is module 1,
  // placed first in the static TLS area, so its variables sit at offsets the
  // psABI fixes (local exec). `interpreted`: it names a dynamic loader
  // (PT_INTERP); static and static-pie executables do not.
  bool executable = false;
  bool interpreted = false;
  std::size_t dynamic_symbol_count = 0;
  // Set when the section headers (not mapped, so changeable under a running
  // process) disagree with the dynamic segment the loader used: then symbols
  // and relocations come from the loader's view, and this says so.
  std::string loader_view_note;
};

// Fixed bounds on what analyze_library reads, checked before libelf allocates
// (real agent libraries use a few dozen sections and well under a megabyte of
// symbols): a file over them is an Error naming the field.
namespace layout_limits {
inline constexpr std::uint64_t kMaxSections = 4096;
inline constexpr std::uint64_t kMaxProgramHeaders = 1024;
inline constexpr std::uint64_t kMaxSymbolTableBytes = 16u << 20;    // .dynsym: 699,050 symbols
inline constexpr std::uint64_t kMaxStringTableBytes = 16u << 20;    // .dynstr
inline constexpr std::uint64_t kMaxRelocationBytes = 32u << 20;     // each RELA section: 1.4 M entries
}  // namespace layout_limits

inline constexpr std::size_t kMaxTlsLookalikes = 8;

// Either symbol name may be empty (not looked for). Every problem in the file itself
// (not ELF, truncated, no dynamic symbols) is an Error naming the file.
// `fd` is read only; the caller keeps ownership.
Expected<LibraryAnalysis> analyze_library(int fd, const std::string& display_path,
                                          const std::string& process_symbol, const std::string& tls_symbol);

}  // namespace tracecorr::elf
