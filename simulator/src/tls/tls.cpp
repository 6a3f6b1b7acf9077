// Reading the TLS descriptor and a thread's record.
//
// A TLSDESC descriptor is {resolver, argument}. The loader picks the resolver:
// for a variable in the static TLS block (libraries loaded at startup, or
// dlopened while glibc's static surplus lasts) it is a function returning its
// argument, and the argument is the variable's offset from the thread pointer;
// that is what a BPF profiler adds to fs_base / TPIDR_EL0. Any other resolver
// means dynamic TLS. ld.so is stripped on Debian, so the resolver is
// recognised by its code, not by its symbol name.
#include "tracecorr/tls.hpp"

#include <array>
#include <cstdio>
#include <cstring>

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

Expected<ThreadRecordRead> read_thread_record(const ProcessMemory& mem, const RecordLayout& layout,
                                              std::uint64_t thread_pointer, PointerSite site) {
  ThreadRecordRead out;
  const std::uint64_t slot = pointer_address(layout, site, thread_pointer);
  auto pointer = mem.read_u64(slot);
  if (!pointer)
    return pointer.error().within(uses_thread_pointer(layout)
                                      ? "TLS variable at thread pointer " + hex_address(thread_pointer) + " + offset " +
                                            std::to_string(static_cast<std::int64_t>(site.value)) + " = " + hex_address(slot)
                                      : "record pointer at " + hex_address(slot));
  out.record_pointer = *pointer;
  if (out.record_pointer == 0) return out;  // no record for this thread (yet)
  auto read = read_record(mem, layout, out.record_pointer);
  if (!read)
    // kUnmapped: a non-zero pointer that leads nowhere readable (the protocol
    // says which requirement that breaks); kGone: the process vanished.
    return read.error().within("pointer read at " + hex_address(slot));
  out.declared_length = read->declared_length;
  out.bytes = std::move(read->bytes);
  return out;
}

}  // namespace tracecorr
