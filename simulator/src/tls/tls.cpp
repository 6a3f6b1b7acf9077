// Reading the TLS descriptor, how a process's threads reach a TLS variable in
// each access model (tls.hpp), and a thread's record.
//
// A TLSDESC descriptor is {resolver, argument}. The loader picks the resolver:
// for a variable in the static TLS block (libraries loaded at startup, or
// dlopened while glibc's static surplus lasts) it is a function returning its
// argument, and the argument is the variable's offset from the thread pointer;
// that is what a BPF profiler adds to fs_base / TPIDR_EL0. Any other resolver
// means dynamic TLS (or a descriptor glibc resolves lazily, at first use:
// resolve_tls_access tells them apart by what the argument points to). ld.so
// is stripped on Debian, so the resolver is recognised by its code, not by
// its symbol name.
#include "tracecorr/tls.hpp"

#include <array>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace tracecorr {
namespace {

// Matches `pattern` at `code` after skipping any of the optional prefixes.
bool matches_after_prefixes(std::span<const std::uint8_t> code, std::span<const std::uint8_t> pattern,
                            std::span<const std::span<const std::uint8_t>> prefixes) {
  std::size_t at = 0;
  for (bool skipped = true; skipped;) {
    skipped = false;
    for (auto p : prefixes) {
      if (code.size() - at >= p.size() && std::memcmp(code.data() + at, p.data(), p.size()) == 0) {
        at += p.size();
        skipped = true;
      }
    }
  }
  return code.size() - at >= pattern.size() && std::memcmp(code.data() + at, pattern.data(), pattern.size()) == 0;
}

constexpr std::array<std::uint8_t, 4> kEndbr64{0xf3, 0x0f, 0x1e, 0xfa};
constexpr std::array<std::uint8_t, 5> kX86ReturnArgument{0x48, 0x8b, 0x40, 0x08, 0xc3};  // mov 0x8(%rax),%rax; ret
// AArch64 instructions, little-endian words.
constexpr std::array<std::uint8_t, 4> kBtiC{0x5f, 0x24, 0x03, 0xd5};     // d503245f
constexpr std::array<std::uint8_t, 4> kPaciasp{0x3f, 0x23, 0x03, 0xd5};  // d503233f
// Debian 12's glibc starts _dl_tlsdesc_return with a nop (its BTI_C slot).
constexpr std::array<std::uint8_t, 4> kA64Nop{0x1f, 0x20, 0x03, 0xd5};   // d503201f
constexpr std::array<std::uint8_t, 8> kA64ReturnArgument{0x00, 0x04, 0x40, 0xf9,   // f9400400 ldr x0, [x0, #8]
                                                         0xc0, 0x03, 0x5f, 0xd6};  // d65f03c0 ret

bool returns_its_argument(std::span<const std::uint8_t> code, elf::Machine machine) {
  if (machine == elf::Machine::X86_64) {
    const std::span<const std::uint8_t> prefixes[] = {kEndbr64};
    return matches_after_prefixes(code, kX86ReturnArgument, prefixes);
  }
  if (machine == elf::Machine::AArch64) {
    const std::span<const std::uint8_t> prefixes[] = {kBtiC, kPaciasp, kA64Nop};
    return matches_after_prefixes(code, kA64ReturnArgument, prefixes);
  }
  return false;
}

}  // namespace

const char* to_string(TlsModel m) {
  switch (m) {
    case TlsModel::StaticOffset: return "static-offset";
    case TlsModel::Dynamic: return "dynamic";
    case TlsModel::Unresolved: return "unresolved";
  }
  return "?";
}

Expected<TlsDescriptor> read_tls_descriptor(const ProcessMemory& mem, std::uint64_t descriptor_addr,
                                            elf::Machine machine) {
  TlsDescriptor d;
  d.address = descriptor_addr;
  std::array<std::uint8_t, 16> words{};
  if (auto st = mem.read(descriptor_addr, words); !st)
    return st.error().within("TLS descriptor at " + hex_address(descriptor_addr));
  std::memcpy(&d.resolver, words.data(), 8);
  std::memcpy(&d.argument, words.data() + 8, 8);

  if (d.resolver == 0) {
    d.model = TlsModel::Unresolved;
    d.explanation =
        "the descriptor's resolver is 0: the loader has not relocated it yet (the library is being loaded, or "
        "this is not a live descriptor), so there is no thread-pointer offset to read";
    return d;
  }
  if (machine != elf::Machine::X86_64 && machine != elf::Machine::AArch64)
    return make_error("cannot classify a TLS resolver for this machine", "TLS descriptor at " + hex_address(descriptor_addr));

  // The pattern with a prefix or two fits in 16 bytes; read what is there.
  std::array<std::uint8_t, 16> code{};
  auto st = mem.read(d.resolver, code);
  std::size_t have = code.size();
  if (!st) {
    // The resolver may sit at the very end of a mapping: try the minimum.
    have = machine == elf::Machine::X86_64 ? kEndbr64.size() + kX86ReturnArgument.size()
                                           : kBtiC.size() + kA64ReturnArgument.size();
    if (auto st2 = mem.read(d.resolver, std::span(code).first(have)); !st2) {
      have = machine == elf::Machine::X86_64 ? kX86ReturnArgument.size() : kA64ReturnArgument.size();
      if (auto st3 = mem.read(d.resolver, std::span(code).first(have)); !st3)
        return st3.error().within("TLS resolver code at " + hex_address(d.resolver) + " (from the descriptor at " +
                                  hex_address(descriptor_addr) + ")");
    }
  }
  if (returns_its_argument(std::span(code).first(have), machine)) {
    d.model = TlsModel::StaticOffset;
    d.tp_offset = static_cast<std::int64_t>(d.argument);
    d.explanation = "the resolver returns its argument: the variable is in the static TLS block at offset " +
                    std::to_string(d.tp_offset) + " from the thread pointer, readable by BPF profilers";
    return d;
  }
  d.model = TlsModel::Dynamic;
  d.explanation =
      "the resolver at " + hex_address(d.resolver) +
      " is not the loader's \"return the argument\" function: the library got dynamic TLS (for example it was "
      "dlopened after glibc's static TLS surplus was used up, or the C library is musl). BPF profilers that add the "
      "descriptor's argument to the thread pointer will read garbage. Load the library earlier (at startup or via "
      "LD_PRELOAD) or raise the surplus with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=<bytes>";
  return d;
}

std::optional<DtvLayout> dtv_layout(CLibrary c_library, elf::Machine machine) {
  // Module i's block address is the first word of DTV entry i on both C
  // libraries, and neither biases offsets on these machines (glibc's
  // TLS_DTV_OFFSET and musl's DTP_OFFSET are 0 on x86-64 and arm64).
  constexpr std::uint64_t kGlibcUnallocated = ~std::uint64_t{0};  // TLS_DTV_UNALLOCATED
  DtvLayout d;
  if (c_library == CLibrary::Glibc) {
    // tcbhead_t: x86-64 {tcb, dtv, ...} at the thread pointer; arm64 {dtv,
    // private} at it. The pointer is to entry 0 of dtv_t {val, to_free}
    // pairs: entry -1 counts the entries, entry 0 holds the generation.
    if (machine == elf::Machine::X86_64) d.dtv_at = 8;
    else if (machine == elf::Machine::AArch64) d.dtv_at = 0;
    else return std::nullopt;
    d.entry_size = 16;
    d.count_entry = -1;
    d.generation_entry = 0;
    d.unallocated = kGlibcUnallocated;
    return d;
  }
  if (c_library == CLibrary::Musl) {
    // struct pthread: x86-64 {self, dtv, ...} at the thread pointer; on arm64
    // (TLS above the thread pointer) the struct ends at it with dtv last. The
    // DTV is plain pointers, entry 0 counting the modules.
    if (machine == elf::Machine::X86_64) d.dtv_at = 8;
    else if (machine == elf::Machine::AArch64) d.dtv_at = -8;
    else return std::nullopt;
    d.entry_size = 8;
    d.count_entry = 0;
    return d;
  }
  return std::nullopt;
}

Expected<std::int64_t> local_exec_offset(const elf::TlsSegment& segment, std::uint64_t symbol_value,
                                         elf::Machine machine) {
  constexpr std::uint64_t kMaxAlign = 1u << 16, kMaxTlsBytes = 1u << 30;
  const std::string where = "PT_TLS (p_memsz " + std::to_string(segment.memory_size) + ", p_align " +
                            std::to_string(segment.align) + ")";
  if (segment.align == 0 || (segment.align & (segment.align - 1)) != 0 || segment.align > kMaxAlign)
    return make_error(ErrorKind::kMalformed, "p_align is not a power of two up to " + std::to_string(kMaxAlign), where);
  if (segment.memory_size > kMaxTlsBytes)
    return make_error(ErrorKind::kMalformed, "p_memsz is over " + std::to_string(kMaxTlsBytes) + " bytes", where);
  if (symbol_value >= segment.memory_size)
    return make_error(ErrorKind::kMalformed,
                      "the variable's offset " + std::to_string(symbol_value) + " is outside the TLS template", where);
  const auto round_up = [&](std::uint64_t n) { return (n + segment.align - 1) & ~(segment.align - 1); };
  if (machine == elf::Machine::X86_64)
    return static_cast<std::int64_t>(symbol_value) - static_cast<std::int64_t>(round_up(segment.memory_size));
  if (machine == elf::Machine::AArch64) {
    constexpr std::uint64_t kTcbBytes = 16;  // arm64's TCB: two words above the thread pointer
    return static_cast<std::int64_t>(round_up(kTcbBytes) + symbol_value);
  }
  return make_error(ErrorKind::kUnsupported, "no static TLS layout known for this machine", where);
}

const char* to_string(TlsAccessModel m) {
  switch (m) {
    case TlsAccessModel::DescriptorStatic: return "tlsdesc-static";
    case TlsAccessModel::DescriptorDynamic: return "tlsdesc-dynamic";
    case TlsAccessModel::GeneralDynamic: return "general-dynamic";
    case TlsAccessModel::InitialExec: return "initial-exec";
    case TlsAccessModel::LocalExec: return "local-exec";
    case TlsAccessModel::LocalDynamic: return "local-dynamic";
  }
  return "?";
}

namespace {

// "+16", "-80": an offset as the explanations print it.
std::string signed_text(std::int64_t v) {
  const std::uint64_t magnitude = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
  return (v < 0 ? "-" : "+") + std::to_string(magnitude);
}

// The DTV layout the dynamic models need, or why there is none.
Expected<DtvLayout> layout_for_dynamic_tls(CLibrary c_library, elf::Machine machine, const std::string& model) {
  if (auto layout = dtv_layout(c_library, machine)) return *layout;
  if (c_library == CLibrary::Unknown)
    return make_error(ErrorKind::kUnsupported,
                      model + " is reached through the thread's DTV, whose layout is the C library's, and the process "
                              "maps neither glibc's nor musl's loader for " + elf::to_string(machine) +
                              " (a static executable, or another C library): the DTV cannot be walked");
  return make_error(ErrorKind::kUnsupported, model + ": no DTV layout known for " + to_string(c_library) + " on " +
                                                 elf::to_string(machine));
}

Expected<std::uint64_t> read_module_id(const ProcessMemory& memory, std::uint64_t address, const std::string& what) {
  auto id = memory.read_u64(address);
  if (!id) return id.error().within(what + " at " + hex_address(address));
  if (*id == 0)
    return make_error(ErrorKind::kNotReady, "module id 0: the loader has not relocated it yet",
                      what + " at " + hex_address(address));
  if (*id > kMaxTlsModules)
    return make_error(ErrorKind::kMalformed,
                      "module id " + std::to_string(*id) + " is past the " + std::to_string(kMaxTlsModules) +
                          " any loader numbers",
                      what + " at " + hex_address(address));
  return *id;
}

TlsVariableAccess module_access(TlsAccessModel model, DtvModule module, std::uint64_t offset, CLibrary c_library,
                                const std::string& how) {
  TlsVariableAccess a;
  a.model = model;
  a.c_library = c_library;
  a.explanation = how + ": module " + std::to_string(module.module_id) + ", offset " + std::to_string(offset) +
                  " in its block; each thread's block is found through its DTV (" + to_string(c_library) +
                  "'s layout), where a thread that has not used the module's TLS yet has none";
  a.site = PointerSite::module_block(std::move(module), offset);
  return a;
}

TlsVariableAccess static_access(TlsAccessModel model, std::int64_t tp_offset, const std::string& how) {
  TlsVariableAccess a;
  a.model = model;
  a.site = PointerSite::tls_offset(tp_offset);
  a.explanation = how + ": static TLS, thread pointer " + signed_text(tp_offset) + " in every thread";
  return a;
}

Expected<TlsVariableAccess> descriptor_access(const ProcessMemory& memory, const AgentLibrary& library,
                                              CLibrary c_library) {
  const elf::Machine machine = library.elf.machine;
  auto d = read_tls_descriptor(memory, *library.tls_descriptor_addr, machine);
  if (!d) return d.error();
  const std::string where = "TLS descriptor at " + hex_address(d->address);
  if (d->model == TlsModel::Unresolved) return make_error(ErrorKind::kNotReady, d->explanation, where);
  if (d->model == TlsModel::StaticOffset) {
    auto a = static_access(TlsAccessModel::DescriptorStatic, d->tp_offset, "TLSDESC, resolved to a thread-pointer offset");
    a.descriptor = *d;
    return a;
  }
  auto layout = layout_for_dynamic_tls(c_library, machine, "a TLSDESC variable in dynamic TLS");
  if (!layout) return layout.error().within(where);
  // The dynamic resolvers' argument: glibc's tlsdesc_dynamic_arg {tls_index
  // {module, offset}, generation}, musl's {module, offset}. Anything else
  // (glibc's lazy resolver points at the relocation itself) is no such pair
  // for this variable.
  const bool has_generation = layout->generation_entry.has_value();
  std::array<std::uint64_t, 3> words{};
  const std::size_t length = (has_generation ? 3 : 2) * sizeof(std::uint64_t);
  const std::string argument_where = where + ", its argument at " + hex_address(d->argument);
  if (auto st = memory.read(d->argument, std::span(reinterpret_cast<std::uint8_t*>(words.data()), length)); !st)
    return st.error().within(argument_where);
  const std::uint64_t expected_offset = library.elf.tls && library.elf.tls->defined() ? library.elf.tls->value : words[1];
  if (words[0] == 0 || words[0] > kMaxTlsModules || words[1] != expected_offset)
    return make_error(ErrorKind::kNotReady,
                      "the resolver at " + hex_address(d->resolver) + " neither returns its argument nor has the "
                      "argument point to a {module id, offset} pair for this variable (module " + std::to_string(words[0]) +
                          ", offset " + std::to_string(words[1]) + ", the variable's is " +
                          std::to_string(expected_offset) + "): the loader has not resolved the descriptor yet (lazy "
                          "binding resolves it at the variable's first use)",
                      argument_where);
  DtvModule module{words[0], has_generation ? std::optional<std::uint64_t>(words[2]) : std::nullopt, *layout};
  auto a = module_access(TlsAccessModel::DescriptorDynamic, std::move(module), words[1], c_library,
                         "TLSDESC in dynamic TLS (the descriptor's argument is the loader's module and offset, not a "
                         "thread-pointer offset)");
  a.descriptor = *d;
  return a;
}

Expected<TlsVariableAccess> general_dynamic_access(const ProcessMemory& memory, const AgentLibrary& library,
                                                   CLibrary c_library) {
  const auto& access = library.elf.tls_access;
  auto layout = layout_for_dynamic_tls(c_library, library.elf.machine, "a general-dynamic variable");
  if (!layout) return layout.error();
  const std::uint64_t module_slot = library.load_bias + *access.module_id_vaddr;
  auto module_id = read_module_id(memory, module_slot, "the DTPMOD GOT word");
  if (!module_id) return module_id.error();
  // The psABI's tls_index {module, offset}: the offset follows the module id
  // unless a DTPOFF relocation puts it elsewhere.
  const std::uint64_t offset_slot =
      access.block_offset_vaddr ? library.load_bias + *access.block_offset_vaddr : module_slot + 8;
  auto offset = memory.read_u64(offset_slot);
  if (!offset) return offset.error().within("the DTPOFF GOT word at " + hex_address(offset_slot));
  return module_access(TlsAccessModel::GeneralDynamic, DtvModule{*module_id, std::nullopt, *layout}, *offset,
                       c_library, "general dynamic (the GOT's DTPMOD and DTPOFF words)");
}

Expected<TlsVariableAccess> local_dynamic_access(const ProcessMemory& memory, const AgentLibrary& library,
                                                 CLibrary c_library) {
  auto layout = layout_for_dynamic_tls(c_library, library.elf.machine, "a variable reached by its module's id");
  if (!layout) return layout.error();
  auto module_id = read_module_id(memory, library.load_bias + *library.elf.tls_access.own_module_id_vaddr,
                                  "the module's own DTPMOD GOT word");
  if (!module_id) return module_id.error();
  return module_access(TlsAccessModel::LocalDynamic, DtvModule{*module_id, std::nullopt, *layout},
                       library.elf.tls->value, c_library,
                       "the module's own id (a DTPMOD naming no symbol: local dynamic, or general dynamic on a variable "
                       "the library binds to itself) and the symbol's offset");
}

Expected<TlsVariableAccess> initial_exec_access(const ProcessMemory& memory, const AgentLibrary& library) {
  const std::uint64_t slot = library.load_bias + *library.elf.tls_access.tp_offset_vaddr;
  auto offset = memory.read_u64(slot);
  if (!offset) return offset.error().within("the TPOFF GOT word at " + hex_address(slot));
  // No static TLS variable sits at the thread pointer itself (x86-64's TCB
  // and arm64's are there): 0 is the word before the loader relocated it.
  if (*offset == 0)
    return make_error(ErrorKind::kNotReady, "thread-pointer offset 0: the loader has not relocated it yet",
                      "the TPOFF GOT word at " + hex_address(slot));
  return static_access(TlsAccessModel::InitialExec, static_cast<std::int64_t>(*offset),
                       "initial exec (the GOT's TPOFF word)");
}

Expected<TlsVariableAccess> local_exec_access(const AgentLibrary& library) {
  auto offset = local_exec_offset(*library.elf.tls_segment, library.elf.tls->value, library.elf.machine);
  if (!offset) return offset.error().within(library.path);
  return static_access(TlsAccessModel::LocalExec, *offset,
                       std::string("local exec (the executable's own variable, by its PT_TLS") +
                           (library.elf.interpreted ? "" : "; a static executable") + ")");
}

}  // namespace

Expected<TlsVariableAccess> resolve_tls_access(const ProcessMemory& memory, const AgentLibrary& library,
                                               CLibrary c_library) {
  const auto& elf = library.elf;
  if (!elf.tls || !elf.tls->defined())
    return make_error(ErrorKind::kNotFound, "the module defines no TLS variable of that name", library.path);
  if (!elf.tls->thread_local_storage())
    return make_error(ErrorKind::kNotFound,
                      elf.tls->name + " is of type " + elf::describe_type(elf.tls->type) + ", not TLS: no thread has one of its own",
                      library.path);
  const auto& access = elf.tls_access;
  std::vector<std::function<Expected<TlsVariableAccess>()>> models;
  if (library.tls_descriptor_addr) models.push_back([&] { return descriptor_access(memory, library, c_library); });
  if (access.module_id_vaddr) models.push_back([&] { return general_dynamic_access(memory, library, c_library); });
  if (access.tp_offset_vaddr) models.push_back([&] { return initial_exec_access(memory, library); });
  if (elf.executable && elf.tls_segment) models.push_back([&] { return local_exec_access(library); });
  if (access.own_module_id_vaddr) models.push_back([&] { return local_dynamic_access(memory, library, c_library); });
  if (models.empty())
    return make_error(ErrorKind::kNotFound,
                      std::string("no relocation names the variable") +
                          (elf.executable ? " and the executable has no PT_TLS"
                                          : " and the module is no executable: its module id and offset are the "
                                            "loader's alone (the library never accesses it itself)"),
                      library.path);
  std::optional<Error> first;
  std::string reasons;
  for (const auto& model : models) {
    auto a = model();
    if (a) return a;
    if (!first) first = a.error();
    reasons += (reasons.empty() ? "" : "; ") + a.error().message();
  }
  Error e = *first;
  e.what = "no access model of the variable can be read: " + reasons;
  e.where = library.path;
  return e;
}

Expected<ThreadRecordRead> read_thread_record(const ProcessMemory& mem, const RecordLayout& layout,
                                              std::uint64_t thread_pointer, const PointerSite& site) {
  ThreadRecordRead out;
  auto slot = pointer_address(mem, layout, site, thread_pointer);
  if (!slot) return slot.error().within("TLS variable of the thread with thread pointer " + hex_address(thread_pointer));
  out.pointer_address = *slot;
  auto pointer = record_address(mem, layout, *slot);
  if (!pointer)
    return pointer.error().within(!uses_thread_pointer(layout) ? "record pointer at " + hex_address(*slot)
                                  : site.module
                                      ? "TLS variable at " + hex_address(*slot) + " (module " +
                                            std::to_string(site.module->module_id) + "'s block + " +
                                            std::to_string(site.value) + ")"
                                      : "TLS variable at thread pointer " + hex_address(thread_pointer) + " + offset " +
                                            std::to_string(static_cast<std::int64_t>(site.value)) + " = " +
                                            hex_address(*slot));
  out.record_pointer = *pointer;
  if (out.record_pointer == 0) return out;  // no record for this thread (yet)
  auto read = read_record(mem, layout, out.record_pointer);
  if (!read)
    // kUnmapped: a non-zero pointer that leads nowhere readable (the protocol
    // says which requirement that breaks); kGone: the process vanished.
    return read.error().within("pointer read at " + hex_address(*slot));
  out.declared_length = read->declared_length;
  out.bytes = std::move(read->bytes);
  return out;
}

}  // namespace tracecorr
