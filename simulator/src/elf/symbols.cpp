// Function symbols with libelf, for naming sampled frames.
#include "tracecorr/symbols.hpp"

#include <cxxabi.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "tracecorr/socket.hpp"

namespace tracecorr {
namespace {

constexpr std::size_t kMaxFunctions = 2'000'000;
constexpr std::size_t kMaxNameLength = 200;
constexpr std::size_t kMaxFiles = 256;

struct ElfCloser {
  void operator()(Elf* e) const { elf_end(e); }
};

std::string demangle(const char* name) {
  if (name[0] == '_' && name[1] == 'Z') {
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
    if (status == 0 && out) return std::string(out.get()).substr(0, kMaxNameLength);
  }
  return std::string(name).substr(0, kMaxNameLength);
}

std::string basename_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

const FunctionSymbols::Function* FunctionSymbols::find(std::uint64_t vaddr) const {
  auto it = std::upper_bound(functions.begin(), functions.end(), vaddr,
                             [](std::uint64_t a, const Function& f) { return a < f.start; });
  if (it == functions.begin()) return nullptr;
  --it;
  // Sizeless symbols (hand-written assembly) cover up to 4 KiB.
  std::uint64_t size = it->size ? it->size : 4096;
  return vaddr - it->start < size ? &*it : nullptr;
}

std::optional<std::uint64_t> FunctionSymbols::vaddr_of_offset(std::uint64_t offset) const {
  for (const auto& l : loads)
    if (offset >= l.offset && offset - l.offset < l.filesz) return offset - l.offset + l.vaddr;
  return std::nullopt;
}

Expected<FunctionSymbols> read_function_symbols(int fd, const std::string& path) {
  if (elf_version(EV_CURRENT) == EV_NONE) return make_error("libelf initialisation failed", path);
  std::unique_ptr<Elf, ElfCloser> elf(elf_begin(fd, ELF_C_READ, nullptr));
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF) return make_error("not an ELF file", path);
  struct stat st{};
  if (fstat(fd, &st) != 0) return make_error("cannot stat", path);
  auto file_size = static_cast<std::uint64_t>(st.st_size);
  FunctionSymbols out;
  std::size_t phnum = 0;
  if (elf_getphdrnum(elf.get(), &phnum) != 0) return make_error("unreadable program headers", path);
  for (std::size_t i = 0; i < std::min<std::size_t>(phnum, 1024); ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf.get(), static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
      out.loads.push_back({ph.p_offset, ph.p_vaddr, ph.p_filesz});
  }
  // .symtab names static functions too; .dynsym is what a stripped file keeps.
  for (unsigned wanted : {SHT_SYMTAB, SHT_DYNSYM}) {
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf.get(), scn)) != nullptr) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != wanted || sh.sh_entsize == 0) continue;
      if (sh.sh_offset > file_size || sh.sh_size > file_size - sh.sh_offset) continue;  // truncated: skip it
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (!data) continue;
      std::size_t count = std::min<std::size_t>(sh.sh_size / sh.sh_entsize, kMaxFunctions);
      for (std::size_t i = 0; i < count && out.functions.size() < kMaxFunctions; ++i) {
        GElf_Sym sym;
        if (!gelf_getsym(data, static_cast<int>(i), &sym)) break;
        unsigned type = GELF_ST_TYPE(sym.st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
        const char* name = elf_strptr(elf.get(), sh.sh_link, sym.st_name);
        if (!name || !*name) continue;
        out.functions.push_back({sym.st_value, sym.st_size, demangle(name)});
      }
    }
    if (!out.functions.empty()) break;
  }
  std::sort(out.functions.begin(), out.functions.end(),
            [](const auto& a, const auto& b) { return a.start < b.start || (a.start == b.start && a.size > b.size); });
  return out;
}

Symbolizer::Symbolizer(pid_t pid) : pid_(pid) {
  if (auto maps = read_maps(pid)) maps_ = std::move(*maps);
}

std::string Symbolizer::name(std::uint64_t address, bool return_address) {
  std::uint64_t lookup = return_address && address > 0 ? address - 1 : address;
  const Mapping* m = find_mapping(maps_, lookup);
  if (!m || !m->file_backed()) return "[unknown]";
  std::string path = m->file_path();
  std::string library = basename_of(path);
  auto it = files_.find(path);
  if (it == files_.end()) {
    if (files_.size() >= kMaxFiles) return "[" + library + "]";
    Expected<FunctionSymbols> symbols = make_error("not opened", path);
    auto fd = open_in_target_root(pid_, path, O_RDONLY);
    struct stat st{};
    if (!fd)
      symbols = fd.error();
    else if (fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != m->inode)
      symbols = make_error("not the regular file the mapping names (replaced?)", path);
    else
      symbols = read_function_symbols(fd->get(), path);
    it = files_.emplace(path, std::move(symbols)).first;
  }
  if (!it->second) return "[" + library + "]";
  auto vaddr = it->second->vaddr_of_offset(lookup - m->start + m->file_offset);
  const auto* f = vaddr ? it->second->find(*vaddr) : nullptr;
  if (!f) return "[" + library + "]";
  return f->name + " (" + library + ")";
}

}  // namespace tracecorr
