// ELF analysis against the tests' own small libraries (tests/unit/data,
// their symbols in tests/support/test_record.h).
#include <gtest/gtest.h>

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>

#include "tracecorr/elf.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/fd.hpp"

namespace tracecorr::elf {
namespace {

Expected<LibraryAnalysis> analyze_path(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return make_error("cannot open", path);
  return analyze_library(fd.get(), path, test_support::kTestProcessSymbol, test_support::kTestTlsSymbol);
}

std::vector<std::uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A temporary file holding `bytes`, removed on destruction.
class TempFile {
 public:
  explicit TempFile(const std::vector<std::uint8_t>& bytes) {
    char tmpl[] = "/tmp/tracecorr-elf-XXXXXX";
    int fd = ::mkstemp(tmpl);
    path_ = tmpl;
    if (!bytes.empty()) EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

TEST(ElfAnalysis, TlsdescLibraryHasTheDescriptorAndWellFormedSymbols) {
  auto a = analyze_path(TC_TESTLIB_DESC);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->machine, Machine::X86_64);
  EXPECT_EQ(a->first_load_vaddr, 0u);
  ASSERT_TRUE(a->process_symbol);
  EXPECT_TRUE(a->process_symbol->defined());
  EXPECT_EQ(a->process_symbol->type, STT_OBJECT);
  EXPECT_EQ(a->process_symbol->binding, STB_GLOBAL);
  EXPECT_EQ(a->process_symbol->visibility, STV_DEFAULT);
  EXPECT_EQ(a->process_symbol->size, 8u);
  ASSERT_TRUE(a->tls);
  EXPECT_EQ(a->tls->type, STT_TLS);
  EXPECT_EQ(describe_type(a->tls->type), "TLS");
  EXPECT_EQ(a->tls->size, 8u);
  EXPECT_EQ(a->tls_access.dialect, TlsDialect::Descriptor);
  EXPECT_FALSE(a->tls_access.mixed);
  ASSERT_TRUE(a->tls_access.descriptor_vaddr);
  EXPECT_NE(*a->tls_access.descriptor_vaddr, 0u);
  EXPECT_TRUE(has(a->tls_access.relocations, "R_X86_64_TLSDESC"));
}

// The file offset of a symbol's address, found through its section header
// (independently of the program headers the analysis uses).
std::optional<std::uint64_t> file_offset_of_symbol(const std::string& path, const std::string& name) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  elf_version(EV_CURRENT);
  Elf* e = elf_begin(fd.get(), ELF_C_READ, nullptr);
  std::optional<std::uint64_t> out;
  for (Elf_Scn* scn = elf_nextscn(e, nullptr); scn && !out; scn = elf_nextscn(e, scn)) {
    GElf_Shdr sh;
    gelf_getshdr(scn, &sh);
    if (sh.sh_type != SHT_DYNSYM) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    for (std::size_t i = 0; i < sh.sh_size / sh.sh_entsize; ++i) {
      GElf_Sym sym;
      gelf_getsym(d, static_cast<int>(i), &sym);
      if (name != elf_strptr(e, sh.sh_link, sym.st_name)) continue;
      GElf_Shdr home;
      gelf_getshdr(elf_getscn(e, sym.st_shndx), &home);
      out = home.sh_offset + (sym.st_value - home.sh_addr);
      break;
    }
  }
  elf_end(e);
  return out;
}

// While the loader has mapped the data segment but not yet zeroed .bss, the
// process pointer's address shows the file's bytes there: the analysis must
// know them, so that discovery does not take them for a published pointer.
TEST(ElfAnalysis, KnowsTheFileBytesAtTheProcessPointer) {
  auto bytes = slurp(TC_TESTLIB_DESC);
  auto offset = file_offset_of_symbol(TC_TESTLIB_DESC, test_support::kTestProcessSymbol);
  ASSERT_TRUE(offset);
  ASSERT_LE(*offset + 8, bytes.size());
  const std::uint64_t marker = 0x2e3231206e616962;  // "bian 12.": .comment text seen there under qemu-user
  std::memcpy(bytes.data() + *offset, &marker, sizeof marker);
  TempFile patched(bytes);
  auto a = analyze_path(patched.path());
  ASSERT_TRUE(a.ok()) << a.error().message();
  ASSERT_TRUE(a->process_pointer_in_file);
  EXPECT_EQ(*a->process_pointer_in_file, marker);
}

TEST(ElfAnalysis, TraditionalDialectIsRecognisedByItsRelocations) {
  auto a = analyze_path(TC_TESTLIB_TRADITIONAL);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->tls_access.dialect, TlsDialect::Traditional);
  EXPECT_FALSE(a->tls_access.descriptor_vaddr);
  EXPECT_TRUE(has(a->tls_access.relocations, "R_X86_64_DTPMOD64")) << ::testing::PrintToString(a->tls_access.relocations);
  const auto* names = dialect_relocations(Machine::X86_64);
  ASSERT_NE(names, nullptr);
  for (const auto& r : a->tls_access.relocations) EXPECT_TRUE(has(names->traditional, r)) << r;
}

// Each access model's GOT words, and what makes a module an executable.
TEST(ElfAnalysis, FindsTheGotWordsOfEachAccessModel) {
  auto gd = analyze_path(TC_TESTLIB_TRADITIONAL);
  ASSERT_TRUE(gd.ok()) << gd.error().message();
  ASSERT_TRUE(gd->tls_access.module_id_vaddr);
  ASSERT_TRUE(gd->tls_access.block_offset_vaddr);
  EXPECT_EQ(*gd->tls_access.block_offset_vaddr, *gd->tls_access.module_id_vaddr + 8) << "the psABI's tls_index pair";
  EXPECT_FALSE(gd->tls_access.named_by_addend_only) << "an exported variable's accesses name it";
  EXPECT_FALSE(gd->tls_access.tp_offset_vaddr);
  EXPECT_FALSE(gd->executable);

  auto ie = analyze_path(TC_TESTLIB_INITIAL_EXEC);
  ASSERT_TRUE(ie.ok()) << ie.error().message();
  EXPECT_TRUE(ie->tls_access.tp_offset_vaddr);
  EXPECT_FALSE(ie->tls_access.module_id_vaddr);
  EXPECT_FALSE(ie->tls_access.descriptor_vaddr);
  EXPECT_EQ(ie->tls_access.dialect, TlsDialect::Traditional) << "TPOFF is one of the traditional relocations";
  EXPECT_FALSE(ie->tls_access.named_by_addend_only);

  auto desc = analyze_path(TC_TESTLIB_DESC);
  ASSERT_TRUE(desc.ok());
  ASSERT_TRUE(desc->tls_segment);
  EXPECT_LT(desc->tls->value, desc->tls_segment->memory_size);
  EXPECT_FALSE(desc->tls_access.named_by_addend_only);
  EXPECT_FALSE(desc->executable);

  // The programs of tls_models_test: a PIE names its loader, a static-pie none.
  for (const auto& [name, interpreted] : {std::pair{"tls_model_target_exe", true}, {"tls-model-target-static-pie", false}}) {
    auto exe = analyze_path(std::string(TRACECORR_TEST_DATA_DIR) + "/" + name);
    ASSERT_TRUE(exe.ok()) << exe.error().message();
    EXPECT_TRUE(exe->executable) << name;
    EXPECT_EQ(exe->interpreted, interpreted) << name;
    ASSERT_TRUE(exe->tls && exe->tls->thread_local_storage()) << name;
    ASSERT_TRUE(exe->tls_segment) << name;
    EXPECT_EQ(exe->tls_access.dialect, TlsDialect::None) << name << ": local exec needs no relocation";
  }
}

TEST(ElfAnalysis, LibraryWithoutTheSymbols) {
  auto a = analyze_path(TC_TESTLIB_NOSYMS);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_FALSE(a->process_symbol);
  EXPECT_FALSE(a->tls);
  EXPECT_EQ(a->tls_access.dialect, TlsDialect::None);
  EXPECT_GT(a->dynamic_symbol_count, 0u);
}

TEST(ElfAnalysis, TlsSymbolAsPlainGlobalIsAnObjectWithoutTlsRelocations) {
  auto a = analyze_path(TC_TESTLIB_PLAIN);
  ASSERT_TRUE(a.ok()) << a.error().message();
  ASSERT_TRUE(a->tls);
  EXPECT_EQ(a->tls->type, STT_OBJECT);
  EXPECT_EQ(a->tls_access.dialect, TlsDialect::None);
}

#ifdef TC_TESTLIB_AARCH64_DESC
TEST(ElfAnalysis, Aarch64TlsdescLibrary) {
  auto a = analyze_path(TC_TESTLIB_AARCH64_DESC);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->machine, Machine::AArch64);
  EXPECT_EQ(a->tls_access.dialect, TlsDialect::Descriptor);
  EXPECT_TRUE(has(a->tls_access.relocations, "R_AARCH64_TLSDESC"));
  ASSERT_TRUE(a->tls_access.descriptor_vaddr);
}

TEST(ElfAnalysis, Aarch64TraditionalLibrary) {
  auto a = analyze_path(TC_TESTLIB_AARCH64_TRADITIONAL);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->tls_access.dialect, TlsDialect::Traditional);
  EXPECT_TRUE(has(a->tls_access.relocations, "R_AARCH64_TLS_DTPMOD")) << ::testing::PrintToString(a->tls_access.relocations);
}
#endif

TEST(ElfAnalysis, DialectTableIsThePsAbis) {
  // Each psABI's TLSDESC relocation, and its traditional (__tls_get_addr) ones.
  const auto* x86 = dialect_relocations(Machine::X86_64);
  ASSERT_NE(x86, nullptr);
  EXPECT_EQ(x86->descriptor, "R_X86_64_TLSDESC");
  EXPECT_EQ(x86->traditional, (std::vector<std::string>{"R_X86_64_DTPMOD64", "R_X86_64_DTPOFF64", "R_X86_64_TPOFF64"}));
  const auto* arm = dialect_relocations(Machine::AArch64);
  ASSERT_NE(arm, nullptr);
  EXPECT_EQ(arm->descriptor, "R_AARCH64_TLSDESC");
  EXPECT_EQ(arm->traditional,
            (std::vector<std::string>{"R_AARCH64_TLS_DTPMOD", "R_AARCH64_TLS_DTPREL", "R_AARCH64_TLS_TPREL"}));
  EXPECT_EQ(dialect_relocations(Machine::Other), nullptr);
}

TEST(ElfAnalysis, GarbageIsAnErrorNamingTheFile) {
  std::mt19937 rng(42);
  std::vector<std::uint8_t> noise(4096);
  for (auto& b : noise) b = static_cast<std::uint8_t>(rng());
  TempFile empty({}), random(noise);
  for (const auto* f : {&empty, &random}) {
    auto a = analyze_path(f->path());
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.error().message().find(f->path()), std::string::npos) << a.error().message();
  }
}

TEST(ElfAnalysis, EveryTruncationIsAnErrorOrAConsistentResult) {
  auto bytes = slurp(TC_TESTLIB_DESC);
  ASSERT_GT(bytes.size(), 1000u);
  std::size_t errors = 0;
  for (std::size_t n = 0; n < bytes.size(); n += (n < 2048 ? 1 : 61)) {
    TempFile f(std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n)));
    auto a = analyze_path(f.path());
    if (!a.ok()) {
      ++errors;
      EXPECT_NE(a.error().message().find(f.path()), std::string::npos);
    }
  }
  EXPECT_GT(errors, 0u);
}

TEST(ElfAnalysis, ThirtyTwoBitClassIsRefused) {
  auto bytes = slurp(TC_TESTLIB_DESC);
  bytes[EI_CLASS] = ELFCLASS32;
  TempFile f(bytes);
  auto a = analyze_path(f.path());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message().find("64-bit"), std::string::npos) << a.error().message();
}

TEST(ElfAnalysis, HugeSectionAndProgramHeaderCountsAreRefused) {
  auto bytes = slurp(TC_TESTLIB_DESC);
  {
    auto b = bytes;
    Elf64_Ehdr eh;
    std::memcpy(&eh, b.data(), sizeof eh);
    eh.e_shnum = 0xfeff;
    std::memcpy(b.data(), &eh, sizeof eh);
    TempFile f(b);
    auto a = analyze_path(f.path());
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.error().message().find(f.path()), std::string::npos);
  }
  {
    auto b = bytes;
    Elf64_Ehdr eh;
    std::memcpy(&eh, b.data(), sizeof eh);
    eh.e_phnum = 0xfffe;
    std::memcpy(b.data(), &eh, sizeof eh);
    TempFile f(b);
    auto a = analyze_path(f.path());
    ASSERT_FALSE(a.ok());
  }
  {
    auto b = bytes;
    Elf64_Ehdr eh;
    std::memcpy(&eh, b.data(), sizeof eh);
    eh.e_shoff = 0x7fffffffffff0000ull;
    std::memcpy(b.data(), &eh, sizeof eh);
    TempFile f(b);
    auto a = analyze_path(f.path());
    ASSERT_FALSE(a.ok());
  }
}

TEST(ElfAnalysis, SectionDataPastTheEndOfTheFileIsRefused) {
  auto bytes = slurp(TC_TESTLIB_DESC);
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
    if (sh.sh_type != SHT_DYNSYM) continue;
    sh.sh_size = 0x7fffffff;
    std::memcpy(bytes.data() + eh.e_shoff + i * sizeof sh, &sh, sizeof sh);
  }
  TempFile f(bytes);
  auto a = analyze_path(f.path());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message().find(".dynsym"), std::string::npos) << a.error().message();
}


// ---- limits before allocation (issue 16) ------------------------------------

long peak_rss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// The test library with its header and section headers edited, extended
// (sparsely: no disk, no memory) to `size` bytes so that the declared tables
// "fit in the file".
struct SparseElf {
  std::vector<std::uint8_t> bytes = slurp(TC_TESTLIB_DESC);
  Elf64_Ehdr eh() const {
    Elf64_Ehdr h;
    std::memcpy(&h, bytes.data(), sizeof h);
    return h;
  }
  Elf64_Shdr section(unsigned i) const {
    Elf64_Shdr sh;
    std::memcpy(&sh, bytes.data() + eh().e_shoff + i * sizeof sh, sizeof sh);
    return sh;
  }
  void set_section(unsigned i, const Elf64_Shdr& sh) {
    std::memcpy(bytes.data() + eh().e_shoff + i * sizeof sh, &sh, sizeof sh);
  }
  // The index of the first section of `type`.
  unsigned find(std::uint32_t type) const {
    for (unsigned i = 0; i < eh().e_shnum; ++i)
      if (section(i).sh_type == type) return i;
    ADD_FAILURE() << "no section of type " << type;
    return 0;
  }
  Expected<LibraryAnalysis> analyze(std::uint64_t size) const {
    TempFile f(bytes);
    EXPECT_EQ(::truncate(f.path().c_str(), static_cast<off_t>(size)), 0);
    return analyze_path(f.path());
  }
};

TEST(ElfLimits, FourMillionSectionsAreRefusedBeforeLibelfAllocates) {
  SparseElf elf;
  Elf64_Ehdr eh = elf.eh();
  Elf64_Shdr first = elf.section(0);
  first.sh_size = 4'000'000;  // extended numbering: e_shnum 0, the count in section 0
  elf.set_section(0, first);
  eh.e_shnum = 0;
  std::memcpy(elf.bytes.data(), &eh, sizeof eh);
  long before = peak_rss_kib();
  auto a = elf.analyze(eh.e_shoff + 4'000'000ull * sizeof(Elf64_Shdr));  // 256 MB, sparse
  long grown = peak_rss_kib() - before;
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message().find("4000000 section headers, more than the 4096"), std::string::npos)
      << a.error().message();
  EXPECT_NE(a.error().where.find("e_shnum"), std::string::npos);
  EXPECT_LT(grown, 50 << 10) << "KiB";  // libelf took 1 GB for this
}

TEST(ElfLimits, HugeSymbolAndRelocationSectionsAreNotRead) {
  for (std::uint32_t type : {std::uint32_t{SHT_DYNSYM}, std::uint32_t{SHT_RELA}}) {
    SparseElf elf;
    unsigned index = elf.find(type);
    Elf64_Shdr sh = elf.section(index);
    const std::uint64_t size = 512u << 20;  // "in the file": the file is extended, sparsely
    sh.sh_size = size;
    elf.set_section(index, sh);
    long before = peak_rss_kib();
    auto a = elf.analyze(sh.sh_offset + size);
    long grown = peak_rss_kib() - before;
    ASSERT_FALSE(a.ok()) << "section type " << type;
    EXPECT_NE(a.error().message().find("tracecorr reads"), std::string::npos) << a.error().message();
    EXPECT_LT(grown, 50 << 10) << "KiB, section type " << type;
  }
}

TEST(ElfLimits, WrongHeaderEntrySizesAndByteOrderAreRefused) {
  auto bytes = slurp(TC_TESTLIB_DESC);
  {
    auto b = bytes;
    Elf64_Ehdr eh;
    std::memcpy(&eh, b.data(), sizeof eh);
    eh.e_shentsize = 32;
    std::memcpy(b.data(), &eh, sizeof eh);
    TempFile f(b);
    auto a = analyze_path(f.path());
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.error().where.find("e_shentsize"), std::string::npos) << a.error().message();
  }
  {
    auto b = bytes;
    b[EI_DATA] = ELFDATA2MSB;
    TempFile f(b);
    auto a = analyze_path(f.path());
    ASSERT_FALSE(a.ok());
    EXPECT_NE(a.error().message().find("little-endian"), std::string::npos) << a.error().message();
  }
}


// ---- the loader's view over the section headers (issue 16) ------------------

TEST(ElfAnalysis, AnUntouchedLibraryAgreesWithTheLoadersView) {
  auto a = analyze_path(TC_TESTLIB_DESC);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->loader_view_note, "");
}

// A file rewritten under a running process in the parts the loader does not
// map (here: a forged .dynsym appended at the end, and the section header
// pointed at it) must not move the symbols: the process still runs with the
// table its dynamic segment names.
TEST(ElfAnalysis, RewrittenSectionHeadersDoNotMoveTheSymbols) {
  auto original = analyze_path(TC_TESTLIB_DESC);
  ASSERT_TRUE(original.ok()) << original.error().message();
  ASSERT_TRUE(original->process_symbol && original->tls_access.descriptor_vaddr);

  SparseElf elf;
  const unsigned index = elf.find(SHT_DYNSYM);
  Elf64_Shdr sh = elf.section(index);
  std::vector<std::uint8_t> table(elf.bytes.begin() + static_cast<long>(sh.sh_offset),
                                  elf.bytes.begin() + static_cast<long>(sh.sh_offset + sh.sh_size));
  for (std::size_t off = 0; off + sizeof(Elf64_Sym) <= table.size(); off += sizeof(Elf64_Sym)) {
    Elf64_Sym sym;
    std::memcpy(&sym, table.data() + off, sizeof sym);
    sym.st_value += 0x1000;  // every symbol somewhere else
    std::memcpy(table.data() + off, &sym, sizeof sym);
  }
  sh.sh_offset = elf.bytes.size();
  elf.bytes.insert(elf.bytes.end(), table.begin(), table.end());
  elf.set_section(index, sh);
  auto a = elf.analyze(elf.bytes.size());
  ASSERT_TRUE(a.ok()) << a.error().message();
  ASSERT_TRUE(a->process_symbol);
  EXPECT_EQ(a->process_symbol->value, original->process_symbol->value);
  EXPECT_EQ(a->tls_access.descriptor_vaddr, original->tls_access.descriptor_vaddr);
  EXPECT_NE(a->loader_view_note.find("disagree with the dynamic segment"), std::string::npos) << a->loader_view_note;
}

// A protocol without a process symbol (OTEP 4947) asks for "": the defined
// section symbols with no name that arm64 glibc's libc.so.6 carries in its
// .dynsym must not answer, or every process looks like it publishes there.
TEST(ElfAnalysis, AnUnnamedSectionSymbolIsNoSymbolOfOurs) {
  SparseElf elf;
  const Elf64_Shdr sh = elf.section(elf.find(SHT_DYNSYM));
  ASSERT_GE(sh.sh_size, 2 * sizeof(Elf64_Sym));
  Elf64_Sym sym{};
  sym.st_name = 0;
  sym.st_info = ELF64_ST_INFO(STB_LOCAL, STT_SECTION);
  sym.st_shndx = static_cast<Elf64_Half>(elf.find(SHT_PROGBITS));
  sym.st_value = 0x1000;
  std::memcpy(elf.bytes.data() + sh.sh_offset + sizeof(Elf64_Sym), &sym, sizeof sym);
  TempFile f(elf.bytes);
  UniqueFd fd(::open(f.path().c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  auto a = analyze_library(fd.get(), f.path(), "", "");
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_FALSE(a->process_symbol) << "matched the unnamed symbol at " << a->process_symbol->value;
  EXPECT_FALSE(a->tls);
}
}  // namespace
}  // namespace tracecorr::elf
