// ELF analysis of the agent library with libelf. The file is hostile: the ELF
// header, the section and program header counts and the sizes of the sections
// read are checked against the file size and fixed bounds (layout_limits)
// before libelf allocates anything for them, and libelf's own errors become
// Errors naming the file.
#include "tracecorr/elf.hpp"

#include <elf.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <array>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>


namespace tracecorr::elf {
namespace {

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};
using ElfHandle = std::unique_ptr<Elf, ElfCloser>;

std::string libelf_error() {
  const char* m = elf_errmsg(-1);
  return m ? m : "unknown libelf error";
}

bool init_libelf() {
  static const bool ok = elf_version(EV_CURRENT) != EV_NONE;
  return ok;
}

// Reads `size` bytes at `offset`; false when the file has fewer.
bool read_exact(int fd, void* into, std::size_t size, std::uint64_t offset) {
  return ::pread(fd, into, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
}

// What elf_begin would allocate for, checked from the raw header first:
// libelf allocates one descriptor per declared section before anyone can
// look at the count (a sparse file declaring 4 million sections took 1 GB).
Status check_layout(int fd, std::uint64_t file_size, const std::string& path) {
  Elf64_Ehdr eh;
  if (!read_exact(fd, &eh, sizeof eh, 0)) return make_error("unreadable ELF header", path);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return make_error("not an ELF file", path);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64)
    return make_error("not a 64-bit ELF file (the protocol's pointers are 8 bytes)", path + " ELF header e_ident[EI_CLASS]");
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return make_error("not a little-endian ELF file (x86_64 and aarch64 libraries are)", path + " ELF header e_ident[EI_DATA]");
  std::uint64_t shnum = eh.e_shnum, phnum = eh.e_phnum;
  if (eh.e_shoff != 0 && eh.e_shentsize != sizeof(Elf64_Shdr))
    return make_error("section header size " + std::to_string(eh.e_shentsize) + ", expected " +
                          std::to_string(sizeof(Elf64_Shdr)), path + " e_shentsize");
  if (phnum != 0 && eh.e_phentsize != sizeof(Elf64_Phdr))
    return make_error("program header size " + std::to_string(eh.e_phentsize) + ", expected " +
                          std::to_string(sizeof(Elf64_Phdr)), path + " e_phentsize");
  // Extended numbering: the real counts live in section header 0.
  if (eh.e_shoff != 0 && (shnum == 0 || phnum == PN_XNUM)) {
    Elf64_Shdr first;
    if (eh.e_shoff > file_size || !read_exact(fd, &first, sizeof first, eh.e_shoff))
      return make_error("section header 0 (extended counts) at offset " + std::to_string(eh.e_shoff) +
                            " is past the end of the file", path + " e_shoff");
    if (shnum == 0) shnum = first.sh_size;
    if (phnum == PN_XNUM) phnum = first.sh_info;
  }
  auto table_fits = [&](std::uint64_t count, std::uint64_t entry, std::uint64_t offset, std::uint64_t bound,
                        const char* what, const char* field) -> Status {
    if (count > bound)
      return make_error(std::to_string(count) + " " + what + ", more than the " + std::to_string(bound) +
                            " tracecorr reads", path + " " + field);
    if (offset > file_size || count * entry > file_size - offset)
      return make_error(std::to_string(count) + " " + what + " at offset " + std::to_string(offset) +
                            " do not fit in the " + std::to_string(file_size) + "-byte file", path + " " + field);
    return Ok{};
  };
  if (auto fits = table_fits(shnum, sizeof(Elf64_Shdr), eh.e_shoff, layout_limits::kMaxSections, "section headers",
                             "e_shnum");
      !fits)
    return fits;
  return table_fits(phnum, sizeof(Elf64_Phdr), eh.e_phoff, layout_limits::kMaxProgramHeaders, "program headers",
                    "e_phnum");
}

// A section that tracecorr reads whole (symbols, their names, relocations):
// inside the file and under a fixed size.
Status check_section_read(const GElf_Shdr& sh, std::uint64_t file_size, std::uint64_t bound, const std::string& where) {
  // The bound first: a NOBITS section occupies no file bytes, but a caller
  // that reads it as a table still sizes a buffer by sh_size.
  if (sh.sh_size > bound)
    return make_error("section of " + std::to_string(sh.sh_size) + " bytes, more than the " + std::to_string(bound) +
                          " tracecorr reads", where);
  if (sh.sh_type == SHT_NOBITS) return Ok{};
  if (sh.sh_offset > file_size || sh.sh_size > file_size - sh.sh_offset)
    return make_error("section data at offset " + std::to_string(sh.sh_offset) + " size " + std::to_string(sh.sh_size) +
                          " runs past the end of the file", where);
  return Ok{};
}

Symbol to_symbol(const char* name, const GElf_Sym& s) {
  Symbol out;
  out.name = name;
  out.value = s.st_value;
  out.size = s.st_size;
  out.type = GELF_ST_TYPE(s.st_info);
  out.binding = GELF_ST_BIND(s.st_info);
  out.visibility = GELF_ST_VISIBILITY(s.st_other);
  out.section = s.st_shndx;
  return out;
}

// Prefer a defined symbol over an undefined reference of the same name.
void keep(std::optional<Symbol>& slot, Symbol s) {
  if (!slot || (!slot->defined() && s.defined())) slot = std::move(s);
}

}  // namespace

Machine machine_of(unsigned e_machine) {
  switch (e_machine) {
    case EM_X86_64: return Machine::X86_64;
    case EM_AARCH64: return Machine::AArch64;
    default: return Machine::Other;
  }
}

const char* to_string(Machine m) {
  switch (m) {
    case Machine::X86_64: return "x86_64";
    case Machine::AArch64: return "aarch64";
    case Machine::Other: return "other";
  }
  return "?";
}

const char* to_string(TlsDialect d) {
  switch (d) {
    case TlsDialect::None: return "none";
    case TlsDialect::Descriptor: return "descriptor";
    case TlsDialect::Traditional: return "traditional";
  }
  return "?";
}

bool Symbol::thread_local_storage() const { return type == STT_TLS; }

std::string describe_binding(unsigned stb) {
  switch (stb) {
    case STB_LOCAL: return "LOCAL";
    case STB_GLOBAL: return "GLOBAL";
    case STB_WEAK: return "WEAK";
    case STB_GNU_UNIQUE: return "UNIQUE";
    default: return "binding " + std::to_string(stb);
  }
}

std::string describe_visibility(unsigned stv) {
  switch (stv) {
    case STV_DEFAULT: return "DEFAULT";
    case STV_INTERNAL: return "INTERNAL";
    case STV_HIDDEN: return "HIDDEN";
    case STV_PROTECTED: return "PROTECTED";
    default: return "visibility " + std::to_string(stv);
  }
}

std::string describe_type(unsigned stt) {
  switch (stt) {
    case STT_NOTYPE: return "NOTYPE";
    case STT_OBJECT: return "OBJECT";
    case STT_FUNC: return "FUNC";
    case STT_SECTION: return "SECTION";
    case STT_FILE: return "FILE";
    case STT_COMMON: return "COMMON";
    case STT_TLS: return "TLS";
    case STT_GNU_IFUNC: return "GNU_IFUNC";
    default: return "type " + std::to_string(stt);
  }
}

const DialectRelocations* dialect_relocations(Machine m) {
  // The psABI's TLS relocations (elf.h), by dialect: what a library built with
  // -mtls-dialect=gnu2 (x86-64) or =desc (arm64) carries, and what the
  // traditional __tls_get_addr code carries instead.
  static const DialectRelocations x86_64 = [] {
    DialectRelocations d;
    d.descriptor = relocation_name(Machine::X86_64, R_X86_64_TLSDESC);
    d.module_id = relocation_name(Machine::X86_64, R_X86_64_DTPMOD64);
    d.block_offset = relocation_name(Machine::X86_64, R_X86_64_DTPOFF64);
    d.tp_offset = relocation_name(Machine::X86_64, R_X86_64_TPOFF64);
    d.traditional = {d.module_id, d.block_offset, d.tp_offset};
    return d;
  }();
  static const DialectRelocations aarch64 = [] {
    DialectRelocations d;
    d.descriptor = relocation_name(Machine::AArch64, R_AARCH64_TLSDESC);
    d.module_id = relocation_name(Machine::AArch64, R_AARCH64_TLS_DTPMOD);
    d.block_offset = relocation_name(Machine::AArch64, R_AARCH64_TLS_DTPREL);
    d.tp_offset = relocation_name(Machine::AArch64, R_AARCH64_TLS_TPREL);
    d.traditional = {d.module_id, d.block_offset, d.tp_offset};
    return d;
  }();
  if (m == Machine::X86_64) return &x86_64;
  if (m == Machine::AArch64) return &aarch64;
  return nullptr;
}

std::string relocation_name(Machine m, std::uint32_t type) {
  if (m == Machine::X86_64) {
    switch (type) {
      case R_X86_64_TLSDESC: return "R_X86_64_TLSDESC";
      case R_X86_64_DTPMOD64: return "R_X86_64_DTPMOD64";
      case R_X86_64_DTPOFF64: return "R_X86_64_DTPOFF64";
      case R_X86_64_TPOFF64: return "R_X86_64_TPOFF64";
      case R_X86_64_GLOB_DAT: return "R_X86_64_GLOB_DAT";
      case R_X86_64_64: return "R_X86_64_64";
    }
  } else if (m == Machine::AArch64) {
    switch (type) {
      case R_AARCH64_TLSDESC: return "R_AARCH64_TLSDESC";
      case R_AARCH64_TLS_DTPMOD: return "R_AARCH64_TLS_DTPMOD";
      case R_AARCH64_TLS_DTPREL: return "R_AARCH64_TLS_DTPREL";
      case R_AARCH64_TLS_TPREL: return "R_AARCH64_TLS_TPREL";
      case R_AARCH64_GLOB_DAT: return "R_AARCH64_GLOB_DAT";
      case R_AARCH64_ABS64: return "R_AARCH64_ABS64";
    }
  }
  return "type " + std::to_string(type);
}


namespace {

// Reads `count` values of T at `offset`; false unless all of them were read.
template <typename T>
bool read_at(int fd, std::uint64_t offset, T* out, std::size_t count = 1) {
  const auto bytes = static_cast<ssize_t>(sizeof(T) * count);
  return ::pread(fd, out, static_cast<std::size_t>(bytes), static_cast<off_t>(offset)) == bytes;
}

// The 8 file bytes that the PT_LOAD segment holding `vaddr` maps there, if
// the file has them (a .bss address past the segment's file part maps the
// rest of its last file page, which holds whatever section follows).
std::optional<std::uint64_t> bytes_in_file_at(int fd, std::uint64_t file_size, const std::vector<GElf_Phdr>& loads,
                                              std::uint64_t vaddr) {
  for (const auto& ph : loads) {
    if (vaddr < ph.p_vaddr || vaddr - ph.p_vaddr >= ph.p_memsz) continue;
    const std::uint64_t delta = vaddr - ph.p_vaddr;
    // Past the file part, only the rest of the last file page shows file
    // bytes; the page size is at most the segment's alignment.
    const std::uint64_t align = ph.p_align > 1 ? ph.p_align : 1;
    if (delta >= ph.p_filesz && delta - ph.p_filesz >= align) return std::nullopt;
    if (ph.p_offset > file_size || delta > file_size - ph.p_offset || file_size - ph.p_offset - delta < 8)
      return std::nullopt;
    std::uint64_t v = 0;
    if (!read_at(fd, ph.p_offset + delta, &v)) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

// The tables the dynamic loader used, from the dynamic segment: mapped bytes,
// the same the running process sees. The section headers are not mapped, so
// a file rewritten under a running process can change them alone; where they
// disagree with this view, this view is the one that describes the process.
struct LoaderTables {
  std::uint64_t symtab_offset = 0, symbol_count = 0;
  std::uint64_t strtab_offset = 0, strtab_size = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rela;  // (file offset, bytes) of DT_RELA and DT_JMPREL
};

std::optional<std::uint64_t> offset_of_vaddr(const std::vector<GElf_Phdr>& loads, std::uint64_t vaddr,
                                             std::uint64_t bytes, std::uint64_t file_size) {
  for (const auto& ph : loads) {
    if (vaddr < ph.p_vaddr || vaddr - ph.p_vaddr > ph.p_filesz || ph.p_filesz - (vaddr - ph.p_vaddr) < bytes) continue;
    std::uint64_t offset = ph.p_offset + (vaddr - ph.p_vaddr);
    if (offset < ph.p_offset || offset > file_size || file_size - offset < bytes) return std::nullopt;
    return offset;
  }
  return std::nullopt;
}

// The number of dynamic symbols, from DT_HASH (nchain) or by walking
// DT_GNU_HASH to the end of its highest-indexed chain, as the loader's lookup
// would. Every read is bounded by the file and by kMaxSymbolTableBytes.
Expected<std::uint64_t> loader_symbol_count(int fd, std::uint64_t file_size, const std::vector<GElf_Phdr>& loads,
                                            std::optional<std::uint64_t> hash, std::optional<std::uint64_t> gnu_hash,
                                            const std::string& where) {
  const std::uint64_t max_symbols = layout_limits::kMaxSymbolTableBytes / sizeof(Elf64_Sym);
  if (hash) {
    auto off = offset_of_vaddr(loads, *hash, 8, file_size);
    std::uint32_t words[2];
    if (!off || !read_at(fd, *off, words, 2)) return make_error("DT_HASH is not in the file's mapped bytes", where);
    if (words[1] > max_symbols) return make_error("DT_HASH names " + std::to_string(words[1]) + " symbols", where);
    return words[1];
  }
  if (!gnu_hash) return make_error("neither DT_HASH nor DT_GNU_HASH: the symbol count is unknown", where);
  auto header_off = offset_of_vaddr(loads, *gnu_hash, 16, file_size);
  std::uint32_t header[4];  // nbuckets, symoffset, bloom words, bloom shift
  if (!header_off || !read_at(fd, *header_off, header, 4))
    return make_error("DT_GNU_HASH is not in the file's mapped bytes", where);
  const std::uint64_t nbuckets = header[0], symoffset = header[1], bloom_words = header[2];
  if (nbuckets > max_symbols || symoffset > max_symbols || bloom_words > max_symbols)
    return make_error("DT_GNU_HASH header out of bounds", where);
  const std::uint64_t buckets_vaddr = *gnu_hash + 16 + bloom_words * 8;
  auto buckets_off = offset_of_vaddr(loads, buckets_vaddr, nbuckets * 4, file_size);
  if (!buckets_off) return make_error("DT_GNU_HASH buckets are not in the file's mapped bytes", where);
  std::vector<std::uint32_t> buckets(static_cast<std::size_t>(nbuckets));
  if (nbuckets && !read_at(fd, *buckets_off, buckets.data(), buckets.size()))
    return make_error("DT_GNU_HASH buckets unreadable", where);
  std::uint64_t last = 0;
  for (auto b : buckets) last = std::max<std::uint64_t>(last, b);
  if (last < symoffset) return symoffset;
  const std::uint64_t chains_vaddr = buckets_vaddr + nbuckets * 4;
  for (std::uint64_t index = last; index < max_symbols; ++index) {
    auto off = offset_of_vaddr(loads, chains_vaddr + (index - symoffset) * 4, 4, file_size);
    std::uint32_t chain = 0;
    if (!off || !read_at(fd, *off, &chain)) return make_error("DT_GNU_HASH chain runs out of the file", where);
    if (chain & 1u) return index + 1;
  }
  return make_error("DT_GNU_HASH chain does not end", where);
}

// The dynamic segment's entries up to DT_NULL (at most 4096), as mapped.
Expected<std::vector<Elf64_Dyn>> dynamic_entries(int fd, std::uint64_t file_size, const GElf_Phdr& dynamic,
                                                 const std::string& path) {
  const std::string where = path + " PT_DYNAMIC";
  constexpr std::uint64_t kMaxDynamicEntries = 4096;
  const std::uint64_t count = std::min<std::uint64_t>(dynamic.p_filesz / sizeof(Elf64_Dyn), kMaxDynamicEntries);
  if (dynamic.p_offset > file_size || file_size - dynamic.p_offset < count * sizeof(Elf64_Dyn))
    return make_error("the dynamic segment runs past the end of the file", where);
  std::vector<Elf64_Dyn> entries(static_cast<std::size_t>(count));
  if (count && !read_at(fd, dynamic.p_offset, entries.data(), entries.size()))
    return make_error("the dynamic segment is unreadable", where);
  auto end = std::find_if(entries.begin(), entries.end(), [](const Elf64_Dyn& d) { return d.d_tag == DT_NULL; });
  entries.erase(end, entries.end());
  return entries;
}

// nullopt when the dynamic segment names no symbol and string table (then
// the section headers are all there is).
Expected<std::optional<LoaderTables>> loader_tables(int fd, std::uint64_t file_size, const std::vector<GElf_Phdr>& loads,
                                                    const std::vector<Elf64_Dyn>& entries, const std::string& path) {
  const std::string where = path + " PT_DYNAMIC";
  std::optional<std::uint64_t> symtab, strtab, strsz, hash, gnu_hash, rela, relasz, jmprel, pltrelsz, pltrel;
  for (const auto& d : entries) {
    switch (d.d_tag) {
      case DT_SYMTAB: symtab = d.d_un.d_ptr; break;
      case DT_STRTAB: strtab = d.d_un.d_ptr; break;
      case DT_STRSZ: strsz = d.d_un.d_val; break;
      case DT_HASH: hash = d.d_un.d_ptr; break;
      case DT_GNU_HASH: gnu_hash = d.d_un.d_ptr; break;
      case DT_RELA: rela = d.d_un.d_ptr; break;
      case DT_RELASZ: relasz = d.d_un.d_val; break;
      case DT_JMPREL: jmprel = d.d_un.d_ptr; break;
      case DT_PLTRELSZ: pltrelsz = d.d_un.d_val; break;
      case DT_PLTREL: pltrel = d.d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab || !strsz) return std::optional<LoaderTables>();
  LoaderTables t;
  auto symbols = loader_symbol_count(fd, file_size, loads, hash, gnu_hash, where);
  if (!symbols) return symbols.error();
  t.symbol_count = *symbols;
  if (*strsz > layout_limits::kMaxStringTableBytes) return make_error("DT_STRSZ is " + std::to_string(*strsz), where);
  auto sym_off = offset_of_vaddr(loads, *symtab, t.symbol_count * sizeof(Elf64_Sym), file_size);
  auto str_off = offset_of_vaddr(loads, *strtab, *strsz, file_size);
  if (!sym_off || !str_off) return make_error("DT_SYMTAB or DT_STRTAB is not in the file's mapped bytes", where);
  t.symtab_offset = *sym_off;
  t.strtab_offset = *str_off;
  t.strtab_size = *strsz;
  auto add_rela = [&](std::optional<std::uint64_t> at, std::optional<std::uint64_t> size) -> Status {
    if (!at || !size || !*size) return Ok{};
    if (*size > layout_limits::kMaxRelocationBytes)
      return make_error("a relocation table of " + std::to_string(*size) + " bytes", where);
    auto off = offset_of_vaddr(loads, *at, *size, file_size);
    if (!off) return make_error("a relocation table is not in the file's mapped bytes", where);
    t.rela.emplace_back(*off, *size);
    return Ok{};
  };
  if (auto st = add_rela(rela, relasz); !st) return st.error();
  if (!pltrel || *pltrel == DT_RELA)
    if (auto st = add_rela(jmprel, pltrelsz); !st) return st.error();
  return std::optional<LoaderTables>(std::move(t));
}

// The ELF header, checked for what the protocol can read: a 64-bit ELF file.
Expected<GElf_Ehdr> read_elf_header(Elf* elf, const std::string& path) {
  if (elf_kind(elf) != ELF_K_ELF) return make_error("not an ELF file", path);
  if (gelf_getclass(elf) != ELFCLASS64)
    return make_error("not a 64-bit ELF file (the protocol's pointers are 8 bytes)", path + " ELF header e_ident[EI_CLASS]");
  GElf_Ehdr eh;
  if (!gelf_getehdr(elf, &eh)) return make_error("unreadable ELF header: " + libelf_error(), path);
  return eh;
}

// The program headers: the PT_LOAD segments (the first anchors the load
// bias), the dynamic segment, and what they say of the file (interpreted,
// its TLS segment).
struct Segments {
  std::vector<GElf_Phdr> loads;
  std::optional<GElf_Phdr> dynamic;
};

Expected<Segments> read_segments(Elf* elf, const GElf_Ehdr& eh, std::uint64_t file_size, const std::string& path,
                                 LibraryAnalysis& out) {
  std::size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return make_error("unreadable program header count: " + libelf_error(), path);
  if (phnum > file_size / sizeof(Elf64_Phdr) || eh.e_phoff > file_size ||
      phnum * sizeof(Elf64_Phdr) > file_size - eh.e_phoff)
    return make_error(std::to_string(phnum) + " program headers at offset " + std::to_string(eh.e_phoff) +
                          " do not fit in the " + std::to_string(file_size) + "-byte file",
                      path + " e_phnum");
  Segments s;
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf, static_cast<int>(i), &ph))
      return make_error("unreadable program header: " + libelf_error(), path + " program header " + std::to_string(i));
    if (ph.p_type == PT_LOAD) s.loads.push_back(ph);
    if (ph.p_type == PT_DYNAMIC && !s.dynamic) s.dynamic = ph;
    if (ph.p_type == PT_INTERP) out.interpreted = true;
    if (ph.p_type == PT_TLS && !out.tls_segment)
      out.tls_segment = TlsSegment{ph.p_vaddr, ph.p_filesz, ph.p_memsz, ph.p_align ? ph.p_align : 1};
  }
  if (s.loads.empty()) return make_error("no PT_LOAD segment: nothing of this file is mapped", path);
  out.first_load_vaddr = s.loads.front().p_vaddr;
  out.executable = eh.e_type == ET_EXEC;
  return s;
}

// The dynamic symbol table, its string table and the relocation sections tied
// to it, as the section headers name them.
struct SectionTables {
  GElf_Shdr dynsym{};
  std::size_t dynsym_index = 0;  // the relocation sections link to it
  GElf_Shdr dynstr{};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> rela;  // (file offset, bytes)
};

Expected<std::size_t> section_count(Elf* elf, const GElf_Ehdr& eh, std::uint64_t file_size, const std::string& path) {
  std::size_t shnum = 0;
  if (elf_getshdrnum(elf, &shnum) != 0) return make_error("unreadable section count: " + libelf_error(), path);
  if (shnum > file_size / sizeof(Elf64_Shdr) || eh.e_shoff > file_size ||
      shnum * sizeof(Elf64_Shdr) > file_size - eh.e_shoff)
    return make_error(std::to_string(shnum) + " section headers at offset " + std::to_string(eh.e_shoff) +
                          " do not fit in the " + std::to_string(file_size) + "-byte file",
                      path + " e_shnum");
  return shnum;
}

// .dynsym and the string table it links to, each checked readable.
Expected<SectionTables> find_dynamic_symbol_table(Elf* elf, std::size_t shnum, std::uint64_t file_size,
                                                  const std::string& path) {
  Elf_Scn* dynsym = nullptr;
  SectionTables t;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) return make_error("unreadable section header: " + libelf_error(), path);
    if (sh.sh_type == SHT_DYNSYM) {
      dynsym = scn;
      t.dynsym = sh;
      t.dynsym_index = elf_ndxscn(scn);
      break;
    }
  }
  if (!dynsym) return make_error("no dynamic symbol table (.dynsym): the library exports nothing", path);
  if (auto readable = check_section_read(t.dynsym, file_size, layout_limits::kMaxSymbolTableBytes, path + " .dynsym");
      !readable)
    return readable.error();
  if (t.dynsym.sh_link == 0 || t.dynsym.sh_link >= shnum)
    return make_error("string table index " + std::to_string(t.dynsym.sh_link) + " is invalid", path + " .dynsym sh_link");
  Elf_Scn* strtab = elf_getscn(elf, t.dynsym.sh_link);
  if (!strtab || !gelf_getshdr(strtab, &t.dynstr)) return make_error("the dynamic string table is unreadable", path + " .dynstr");
  if (auto readable = check_section_read(t.dynstr, file_size, layout_limits::kMaxStringTableBytes, path + " .dynstr");
      !readable)
    return readable.error();
  return t;
}

// The relocation sections tied to .dynsym (.rela.dyn, and .rela.plt where
// aarch64 linkers sometimes put TLSDESC), as (file offset, bytes).
Status find_relocation_sections(Elf* elf, std::size_t dynsym_index, std::uint64_t file_size, const std::string& path,
                                SectionTables& t) {
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) return make_error("unreadable section header: " + libelf_error(), path);
    if (sh.sh_type != SHT_RELA || sh.sh_link != dynsym_index) continue;
    std::string where = path + " relocation section " + std::to_string(elf_ndxscn(scn));
    if (auto readable = check_section_read(sh, file_size, layout_limits::kMaxRelocationBytes, where); !readable)
      return readable.error();
    t.rela.emplace_back(sh.sh_offset, sh.sh_size);
  }
  return Ok{};
}

Expected<SectionTables> read_section_tables(Elf* elf, const GElf_Ehdr& eh, std::uint64_t file_size, const std::string& path) {
  auto shnum = section_count(elf, eh, file_size, path);
  if (!shnum) return shnum.error();
  auto t = find_dynamic_symbol_table(elf, *shnum, file_size, path);
  if (!t) return t.error();
  if (auto st = find_relocation_sections(elf, t->dynsym_index, file_size, path, *t); !st) return st.error();
  return t;
}

// Read what the loader read: the section headers are followed only while they
// name the same bytes as the dynamic segment. Notes a disagreement (or an
// unreadable dynamic segment) in out.loader_view_note; marks a PIE executable.
LoaderTables tables_the_loader_used(int fd, std::uint64_t file_size, const Segments& segments,
                                    const SectionTables& sections, const std::string& path, LibraryAnalysis& out) {
  LoaderTables chosen{sections.dynsym.sh_offset, sections.dynsym.sh_size / sizeof(Elf64_Sym), sections.dynstr.sh_offset,
                      sections.dynstr.sh_size, sections.rela};
  Expected<std::optional<LoaderTables>> loader = std::optional<LoaderTables>();
  if (segments.dynamic) {
    auto entries = dynamic_entries(fd, file_size, *segments.dynamic, path);
    if (!entries) {
      loader = entries.error();
    } else {
      loader = loader_tables(fd, file_size, segments.loads, *entries, path);
      for (const auto& d : *entries)
        if (d.d_tag == DT_FLAGS_1 && (d.d_un.d_val & DF_1_PIE)) out.executable = true;
    }
  }
  if (!loader) {
    out.loader_view_note = "the dynamic segment could not be read (" + loader.error().message() +
                           "): symbols were read through the section headers";
    return chosen;
  }
  if (!*loader) return chosen;
  const auto& l = **loader;
  auto sorted = [](auto v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  if (l.symtab_offset == chosen.symtab_offset && l.symbol_count == chosen.symbol_count &&
      l.strtab_offset == chosen.strtab_offset && sorted(l.rela) == sorted(sections.rela))
    return chosen;
  out.loader_view_note = "the section headers disagree with the dynamic segment the loader used (.dynsym at offset " +
                         std::to_string(chosen.symtab_offset) + " with " + std::to_string(chosen.symbol_count) +
                         " symbols, the loader's at " + std::to_string(l.symtab_offset) + " with " +
                         std::to_string(l.symbol_count) + "): the file's unmapped parts changed after it was "
                         "built or loaded; symbols and relocations were read as the loader reads them";
  return l;
}

// The dynamic symbols and their string table, bounded, as read from the file.
struct DynamicSymbols {
  std::vector<Elf64_Sym> symbols;
  std::string strings;

  // A name must end inside the string table.
  const char* name_at(std::uint64_t offset) const {
    if (offset >= strings.size() || strings.find('\0', static_cast<std::size_t>(offset)) == std::string::npos)
      return nullptr;
    return strings.c_str() + offset;
  }
};

Expected<DynamicSymbols> read_dynamic_symbols(int fd, const LoaderTables& tables, const std::string& path) {
  if (tables.symbol_count > layout_limits::kMaxSymbolTableBytes / sizeof(Elf64_Sym))
    return make_error(std::to_string(tables.symbol_count) + " dynamic symbols", path + " .dynsym");
  if (tables.strtab_size > layout_limits::kMaxStringTableBytes)
    return make_error("string table of " + std::to_string(tables.strtab_size) + " bytes, more than the " +
                          std::to_string(layout_limits::kMaxStringTableBytes) + " tracecorr reads",
                      path + " .dynstr");
  DynamicSymbols d{std::vector<Elf64_Sym>(static_cast<std::size_t>(tables.symbol_count)),
                   std::string(static_cast<std::size_t>(tables.strtab_size), '\0')};
  if ((!d.symbols.empty() && !read_at(fd, tables.symtab_offset, d.symbols.data(), d.symbols.size())) ||
      (!d.strings.empty() && !read_at(fd, tables.strtab_offset, d.strings.data(), d.strings.size())))
    return make_error("cannot read dynamic symbols", path + " .dynsym");
  return d;
}

// The protocol's two symbols and the TLS symbol's lookalikes; the index of
// the TLS symbol in .dynsym (relocations name it by index), when defined.
std::optional<std::size_t> find_protocol_symbols(const DynamicSymbols& d, const std::string& process_symbol,
                                                 const std::string& tls_symbol, LibraryAnalysis& out) {
  out.dynamic_symbol_count = d.symbols.size();
  // The TLS symbol's stem (up to its last '_'): names sharing it are its lookalikes.
  const std::string_view tls_stem = std::string_view(tls_symbol).substr(0, tls_symbol.rfind('_') + 1);
  std::optional<std::size_t> tls_index;
  for (std::size_t i = 1; i < d.symbols.size(); ++i) {
    const GElf_Sym& sym = d.symbols[i];
    const char* name = d.name_at(sym.st_name);
    // A name offset outside .dynstr is not one of ours; nor is an empty name
    // (a protocol without a process symbol asks for ""), which the section
    // symbols some linkers put in .dynsym carry (arm64 glibc's libc.so.6).
    if (!name || *name == '\0') continue;
    if (process_symbol == name) keep(out.process_symbol, to_symbol(name, sym));
    if (tls_symbol == name) {
      keep(out.tls, to_symbol(name, sym));
      if (out.tls->value == sym.st_value && out.tls->section == sym.st_shndx) tls_index = i;
    } else if (!tls_stem.empty() && sym.st_shndx != SHN_UNDEF && out.tls_lookalikes.size() < kMaxTlsLookalikes &&
               std::string_view(name).substr(0, tls_stem.size()) == tls_stem) {
      out.tls_lookalikes.emplace_back(name);
    }
  }
  return tls_index;
}

// What the relocations against the TLS symbol showed, folded into its dialect.
struct TlsRelocationsSeen {
  bool descriptor = false, traditional = false, named = false, unnamed = false;
};

// One relocation: if it reaches the TLS symbol, where the loader writes for it.
void note_tls_relocation(const GElf_Rela& rela, Machine machine, std::optional<std::size_t> tls_index,
                         TlsRelocationsSeen& seen, LibraryAnalysis& out) {
  const DialectRelocations* dialect = dialect_relocations(machine);
  const auto sym = GELF_R_SYM(rela.r_info);
  const auto type = static_cast<std::uint32_t>(GELF_R_TYPE(rela.r_info));
  std::string name = relocation_name(machine, type);
  const bool is_descriptor = dialect && name == dialect->descriptor;
  const bool is_traditional =
      dialect && std::find(dialect->traditional.begin(), dialect->traditional.end(), name) != dialect->traditional.end();
  const bool is_module_id = dialect && name == dialect->module_id;
  const bool is_block_offset = dialect && name == dialect->block_offset;
  const bool is_tp_offset = dialect && name == dialect->tp_offset;
  if (sym == 0 && is_module_id) {
    if (!out.tls_access.own_module_id_vaddr) out.tls_access.own_module_id_vaddr = rela.r_offset;
    return;
  }
  // A TLSDESC or TPOFF without a symbol (a non-preemptible variable)
  // names its variable by the addend: the offset in the module's TLS block.
  const bool ours = (tls_index && sym == *tls_index) ||
                    (sym == 0 && (is_descriptor || is_tp_offset) && out.tls->defined() &&
                     static_cast<std::uint64_t>(rela.r_addend) == out.tls->value);
  if (!ours || (!is_descriptor && !is_traditional)) return;
  auto first = [&](std::optional<std::uint64_t>& slot) {
    if (!slot) slot = rela.r_offset;
  };
  if (is_module_id) first(out.tls_access.module_id_vaddr);
  if (is_block_offset) first(out.tls_access.block_offset_vaddr);
  if (is_tp_offset) first(out.tls_access.tp_offset_vaddr);
  if (std::find(out.tls_access.relocations.begin(), out.tls_access.relocations.end(), name) ==
      out.tls_access.relocations.end())
    out.tls_access.relocations.push_back(name);
  (sym == 0 ? seen.unnamed : seen.named) = true;
  if (is_descriptor) {
    seen.descriptor = true;
    if (!out.tls_access.descriptor_vaddr) out.tls_access.descriptor_vaddr = rela.r_offset;
  } else {
    seen.traditional = true;
  }
}

// Relocations against the TLS symbol: its dialect and where the loader
// writes its module id, offsets and descriptor.
Status read_tls_relocations(int fd, const LoaderTables& tables, std::optional<std::size_t> tls_index,
                            const std::string& path, LibraryAnalysis& out) {
  TlsRelocationsSeen seen;
  for (const auto& [offset, bytes] : tables.rela) {
    if (!out.tls) break;
    std::vector<Elf64_Rela> relocations(static_cast<std::size_t>(bytes / sizeof(Elf64_Rela)));
    if (!relocations.empty() && !read_at(fd, offset, relocations.data(), relocations.size()))
      return make_error("cannot read relocations", path + " relocations at offset " + std::to_string(offset));
    for (const GElf_Rela& rela : relocations) note_tls_relocation(rela, out.machine, tls_index, seen, out);
  }
  out.tls_access.dialect = seen.descriptor    ? TlsDialect::Descriptor
                           : seen.traditional ? TlsDialect::Traditional
                                              : TlsDialect::None;
  out.tls_access.mixed = seen.descriptor && seen.traditional;
  out.tls_access.named_by_addend_only = seen.unnamed && !seen.named;
  return Ok{};
}

// The file's size, refused unless it is a regular file large enough for an ELF header.
Expected<std::uint64_t> regular_file_size(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error("cannot stat the library", path);
  if (!S_ISREG(st.st_mode)) return make_error("not a regular file", path);
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < sizeof(Elf64_Ehdr))
    return make_error("file is " + std::to_string(file_size) + " bytes, too short for an ELF header", path);
  return file_size;
}

}  // namespace

Expected<LibraryAnalysis> analyze_library(int fd, const std::string& path, const std::string& process_symbol,
                                          const std::string& tls_symbol) {
  if (!init_libelf()) return make_error("libelf refuses to initialise: " + libelf_error(), path);
  auto file_size = regular_file_size(fd, path);
  if (!file_size) return file_size.error();
  if (auto layout = check_layout(fd, *file_size, path); !layout) return layout.error();
  ElfHandle elf(elf_begin(fd, ELF_C_READ, nullptr));
  if (!elf) return make_error("libelf cannot open the file: " + libelf_error(), path);
  auto eh = read_elf_header(elf.get(), path);
  if (!eh) return eh.error();

  LibraryAnalysis out;
  out.path = path;
  out.machine = machine_of(eh->e_machine);
  auto segments = read_segments(elf.get(), *eh, *file_size, path, out);
  if (!segments) return segments.error();
  auto sections = read_section_tables(elf.get(), *eh, *file_size, path);
  if (!sections) return sections.error();
  const LoaderTables tables = tables_the_loader_used(fd, *file_size, *segments, *sections, path, out);
  auto symbols = read_dynamic_symbols(fd, tables, path);
  if (!symbols) return symbols.error();
  const auto tls_index = find_protocol_symbols(*symbols, process_symbol, tls_symbol, out);
  if (out.process_symbol && out.process_symbol->defined())
    out.process_pointer_in_file = bytes_in_file_at(fd, *file_size, segments->loads, out.process_symbol->value);
  if (auto st = read_tls_relocations(fd, tables, tls_index, path, out); !st) return st.error();
  return out;
}

}  // namespace tracecorr::elf
