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

#include "tracecorr/spec_registry.hpp"

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

Machine machine_of(unsigned e_machine) {
  switch (e_machine) {
    case EM_X86_64: return Machine::X86_64;
    case EM_AARCH64: return Machine::AArch64;
    default: return Machine::Other;
  }
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
  if (sh.sh_type == SHT_NOBITS) return Ok{};
  if (sh.sh_offset > file_size || sh.sh_size > file_size - sh.sh_offset)
    return make_error("section data at offset " + std::to_string(sh.sh_offset) + " size " + std::to_string(sh.sh_size) +
                          " runs past the end of the file", where);
  if (sh.sh_size > bound)
    return make_error("section of " + std::to_string(sh.sh_size) + " bytes, more than the " + std::to_string(bound) +
                          " tracecorr reads", where);
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

const DialectRelocations* registry_dialect_relocations(Machine m) {
  static const auto table = [] {
    std::array<std::optional<DialectRelocations>, 2> t;
    auto reg = nlohmann::json::parse(spec::kRegistryJson);
    const auto& dialects = reg.at("library").at("tls_dialects");
    const char* keys[2] = {"x86_64", "aarch64"};
    for (int i = 0; i < 2; ++i) {
      if (!dialects.contains(keys[i])) continue;
      const auto& d = dialects.at(keys[i]);
      DialectRelocations r;
      r.descriptor = d.at("descriptor_relocation").get<std::string>();
      r.traditional = d.at("traditional_relocations").get<std::vector<std::string>>();
      t[i] = std::move(r);
    }
    return t;
  }();
  if (m == Machine::X86_64 && table[0]) return &*table[0];
  if (m == Machine::AArch64 && table[1]) return &*table[1];
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

Expected<LibraryAnalysis> analyze_library(int fd, const std::string& display_path) {
  return analyze_library(fd, display_path, std::string(spec::kProcessStorageSymbol), std::string(spec::kTlsSymbol));
}

namespace {

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
    if (::pread(fd, &v, sizeof v, static_cast<off_t>(ph.p_offset + delta)) != static_cast<ssize_t>(sizeof v))
      return std::nullopt;
    return v;
  }
  return std::nullopt;
}

}  // namespace

Expected<LibraryAnalysis> analyze_library(int fd, const std::string& path, const std::string& storage_symbol,
                                          const std::string& tls_symbol) {
  if (!init_libelf()) return make_error("libelf refuses to initialise: " + libelf_error(), path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error("cannot stat the library", path);
  if (!S_ISREG(st.st_mode)) return make_error("not a regular file", path);
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (file_size < sizeof(Elf64_Ehdr))
    return make_error("file is " + std::to_string(file_size) + " bytes, too short for an ELF header", path);

  if (auto layout = check_layout(fd, file_size, path); !layout) return layout.error();
  ElfHandle elf(elf_begin(fd, ELF_C_READ, nullptr));
  if (!elf) return make_error("libelf cannot open the file: " + libelf_error(), path);
  if (elf_kind(elf.get()) != ELF_K_ELF) return make_error("not an ELF file", path);
  if (gelf_getclass(elf.get()) != ELFCLASS64)
    return make_error("not a 64-bit ELF file (the protocol's pointers are 8 bytes)", path + " ELF header e_ident[EI_CLASS]");
  GElf_Ehdr eh;
  if (!gelf_getehdr(elf.get(), &eh)) return make_error("unreadable ELF header: " + libelf_error(), path);

  LibraryAnalysis out;
  out.path = path;
  out.machine = machine_of(eh.e_machine);

  // Program headers: the first PT_LOAD anchors the load bias.
  std::size_t phnum = 0;
  if (elf_getphdrnum(elf.get(), &phnum) != 0) return make_error("unreadable program header count: " + libelf_error(), path);
  if (phnum > file_size / sizeof(Elf64_Phdr) || eh.e_phoff > file_size ||
      phnum * sizeof(Elf64_Phdr) > file_size - eh.e_phoff)
    return make_error(std::to_string(phnum) + " program headers at offset " + std::to_string(eh.e_phoff) +
                          " do not fit in the " + std::to_string(file_size) + "-byte file",
                      path + " e_phnum");
  std::vector<GElf_Phdr> loads;
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(elf.get(), static_cast<int>(i), &ph))
      return make_error("unreadable program header: " + libelf_error(), path + " program header " + std::to_string(i));
    if (ph.p_type == PT_LOAD) loads.push_back(ph);
  }
  if (loads.empty()) return make_error("no PT_LOAD segment: nothing of this file is mapped", path);
  out.first_load_vaddr = loads.front().p_vaddr;

  // Sections: the dynamic symbol table and the dynamic relocations.
  std::size_t shnum = 0;
  if (elf_getshdrnum(elf.get(), &shnum) != 0) return make_error("unreadable section count: " + libelf_error(), path);
  if (shnum > file_size / sizeof(Elf64_Shdr) || eh.e_shoff > file_size ||
      shnum * sizeof(Elf64_Shdr) > file_size - eh.e_shoff)
    return make_error(std::to_string(shnum) + " section headers at offset " + std::to_string(eh.e_shoff) +
                          " do not fit in the " + std::to_string(file_size) + "-byte file",
                      path + " e_shnum");

  Elf_Scn* dynsym = nullptr;
  GElf_Shdr dynsym_hdr{};
  std::size_t dynsym_index = 0;
  for (Elf_Scn* scn = elf_nextscn(elf.get(), nullptr); scn; scn = elf_nextscn(elf.get(), scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) return make_error("unreadable section header: " + libelf_error(), path);
    if (sh.sh_type == SHT_DYNSYM) {
      dynsym = scn;
      dynsym_hdr = sh;
      dynsym_index = elf_ndxscn(scn);
      break;
    }
  }
  if (!dynsym) return make_error("no dynamic symbol table (.dynsym): the library exports nothing", path);
  if (auto readable = check_section_read(dynsym_hdr, file_size, layout_limits::kMaxSymbolTableBytes, path + " .dynsym");
      !readable)
    return readable.error();
  if (dynsym_hdr.sh_link == 0 || dynsym_hdr.sh_link >= shnum)
    return make_error("string table index " + std::to_string(dynsym_hdr.sh_link) + " is invalid", path + " .dynsym sh_link");
  {
    Elf_Scn* strtab = elf_getscn(elf.get(), dynsym_hdr.sh_link);
    GElf_Shdr strhdr;
    if (!strtab || !gelf_getshdr(strtab, &strhdr))
      return make_error("the dynamic string table is unreadable", path + " .dynstr");
    if (auto readable = check_section_read(strhdr, file_size, layout_limits::kMaxStringTableBytes, path + " .dynstr");
        !readable)
      return readable.error();
  }

  Elf_Data* symdata = elf_getdata(dynsym, nullptr);
  if (!symdata) return make_error("cannot read dynamic symbols: " + libelf_error(), path + " .dynsym");
  const std::size_t symsize = gelf_fsize(elf.get(), ELF_T_SYM, 1, EV_CURRENT);
  const std::size_t nsyms = symsize ? symdata->d_size / symsize : 0;
  out.dynamic_symbol_count = nsyms;
  std::optional<std::size_t> tls_index;
  for (std::size_t i = 1; i < nsyms; ++i) {
    GElf_Sym sym;
    if (!gelf_getsym(symdata, static_cast<int>(i), &sym)) return make_error("unreadable symbol", path + " .dynsym entry " + std::to_string(i));
    const char* name = elf_strptr(elf.get(), dynsym_hdr.sh_link, sym.st_name);
    if (!name) continue;  // a name offset outside .dynstr: not one of ours
    if (storage_symbol == name) keep(out.process_storage, to_symbol(name, sym));
    if (tls_symbol == name) {
      keep(out.tls, to_symbol(name, sym));
      if (out.tls->value == sym.st_value && out.tls->section == sym.st_shndx) tls_index = i;
    }
  }

  if (out.process_storage && out.process_storage->defined())
    out.storage_bytes_in_file = bytes_in_file_at(fd, file_size, loads, out.process_storage->value);

  // Relocations against the TLS symbol, in every RELA section tied to .dynsym
  // (.rela.dyn, and .rela.plt where aarch64 linkers sometimes put TLSDESC).
  const DialectRelocations* dialect = registry_dialect_relocations(out.machine);
  bool saw_descriptor = false, saw_traditional = false;
  for (Elf_Scn* scn = elf_nextscn(elf.get(), nullptr); scn && out.tls; scn = elf_nextscn(elf.get(), scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) return make_error("unreadable section header: " + libelf_error(), path);
    if (sh.sh_type != SHT_RELA || sh.sh_link != dynsym_index) continue;
    std::string where = path + " relocation section " + std::to_string(elf_ndxscn(scn));
    if (auto readable = check_section_read(sh, file_size, layout_limits::kMaxRelocationBytes, where); !readable)
      return readable.error();
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) return make_error("cannot read relocations: " + libelf_error(), where);
    const std::size_t relsize = gelf_fsize(elf.get(), ELF_T_RELA, 1, EV_CURRENT);
    const std::size_t nrel = relsize ? data->d_size / relsize : 0;
    for (std::size_t i = 0; i < nrel; ++i) {
      GElf_Rela rela;
      if (!gelf_getrela(data, static_cast<int>(i), &rela)) return make_error("unreadable relocation " + std::to_string(i), where);
      const auto sym = GELF_R_SYM(rela.r_info);
      const auto type = static_cast<std::uint32_t>(GELF_R_TYPE(rela.r_info));
      std::string name = relocation_name(out.machine, type);
      const bool is_descriptor = dialect && name == dialect->descriptor;
      const bool is_traditional =
          dialect && std::find(dialect->traditional.begin(), dialect->traditional.end(), name) != dialect->traditional.end();
      // A TLSDESC without a symbol (a non-preemptible variable) names its
      // variable by the addend: the offset in the module's TLS block.
      const bool ours = (tls_index && sym == *tls_index) ||
                        (sym == 0 && is_descriptor && out.tls->defined() &&
                         static_cast<std::uint64_t>(rela.r_addend) == out.tls->value);
      if (!ours || (!is_descriptor && !is_traditional)) continue;
      if (std::find(out.tls_access.relocations.begin(), out.tls_access.relocations.end(), name) ==
          out.tls_access.relocations.end())
        out.tls_access.relocations.push_back(name);
      if (is_descriptor) {
        saw_descriptor = true;
        if (!out.tls_access.descriptor_vaddr) out.tls_access.descriptor_vaddr = rela.r_offset;
      } else {
        saw_traditional = true;
      }
    }
  }
  out.tls_access.dialect = saw_descriptor ? TlsDialect::Descriptor
                           : saw_traditional ? TlsDialect::Traditional
                                             : TlsDialect::None;
  out.tls_access.mixed = saw_descriptor && saw_traditional;
  return out;
}

}  // namespace tracecorr::elf
