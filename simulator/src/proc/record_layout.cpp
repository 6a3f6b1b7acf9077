// RecordLayout: lengths, bounds and the read of one record; see record_layout.hpp.
#include "tracecorr/record_layout.hpp"

#include <cstring>

#include "tracecorr/memory.hpp"

namespace tracecorr {
namespace {

template <class... Ts>
struct overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
overloaded(Ts...) -> overloaded<Ts...>;  // clang 14 (the fuzz build) does not deduce aggregates

std::string bytes_text(std::uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

// "attrs-data-size (size field at offset 26)", or "size field at offset 26" when unnamed.
std::string size_field_name(const RecordLayout& layout, const SizeField& f) {
  std::string where = "size field at offset " + std::to_string(f.offset);
  const RecordField* named = layout.field_at(f.offset);
  return named && named->offset == f.offset ? named->name + " (" + where + ")" : where;
}

std::uint64_t load_unsigned(const std::uint8_t* p, std::size_t width) {
  // Native byte order, possibly unaligned: the target wrote it as an integer of its own.
  switch (width) {
    case 1: return *p;
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
  }
  return 0;  // check() refuses other widths
}

}  // namespace

// ---- ByteValues ---------------------------------------------------------------------

ByteValues ByteValues::any_nonzero() {
  ByteValues v;
  v.bits_.set();
  v.bits_.reset(0);
  return v;
}

ByteValues ByteValues::only(std::initializer_list<std::uint8_t> values) {
  ByteValues v;
  for (auto b : values) v.bits_.set(b);
  return v;
}

ByteValues ByteValues::of(std::span<const std::uint8_t> values) {
  ByteValues v;
  for (auto b : values) v.bits_.set(b);
  return v;
}

std::array<std::uint64_t, 4> ByteValues::words() const {
  std::array<std::uint64_t, 4> w{};
  for (std::size_t i = 0; i < 256; ++i)
    if (bits_.test(i)) w[i / 64] |= std::uint64_t{1} << (i % 64);
  return w;
}

std::string ByteValues::describe() const {
  std::string out;
  for (std::size_t i = 0; i < 256;) {
    if (!bits_.test(i)) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j + 1 < 256 && bits_.test(j + 1)) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(i);
    if (j > i) out += (j == i + 1 ? ", " : "..") + std::to_string(j);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

// ---- RecordLayout -------------------------------------------------------------------

std::size_t RecordLayout::fixed_part() const {
  return std::visit(overloaded{[](const FixedSize& f) { return f.bytes; },
                               [](const SizeField& f) { return f.header_length; }},
                    length);
}

bool RecordLayout::valid(std::span<const std::uint8_t> record) const {
  return valid_offset < record.size() && valid_values.contains(record[valid_offset]);
}

const RecordField* RecordLayout::field_at(std::size_t offset) const {
  for (const auto& f : fields)
    if (offset >= f.offset && offset - f.offset < f.size) return &f;
  return nullptr;
}

Status RecordLayout::check() const {
  const std::string where = "record layout \"" + name + "\"";
  auto bad = [&](std::string what) -> Status { return make_error(std::move(what), where); };
  if (max_size == 0 || max_size > kRecordMaxBytes)
    return bad("max_size " + std::to_string(max_size) + " is not within 1.." + std::to_string(kRecordMaxBytes));
  const std::size_t fixed = fixed_part();
  if (fixed == 0 || fixed > max_size)
    return bad("the fixed part (" + bytes_text(fixed) + ") is not within 1..max_size (" + std::to_string(max_size) + ")");
  if (const auto* f = std::get_if<SizeField>(&length)) {
    if (f->width != 1 && f->width != 2 && f->width != 4)
      return bad("size field width " + std::to_string(f->width) + " is not 1, 2 or 4 bytes");
    if (f->offset > fixed || f->width > fixed - f->offset)
      return bad("the size field (offset " + std::to_string(f->offset) + ", " + bytes_text(f->width) +
                 ") does not lie within the " + bytes_text(fixed) + " header");
  }
  if (valid_offset >= fixed)
    return bad("the valid byte (offset " + std::to_string(valid_offset) + ") does not lie within the fixed part (" +
               bytes_text(fixed) + ")");
  if (valid_values.empty()) return bad("no value of the valid byte is accepted");
  if (presence_offset && *presence_offset >= fixed)
    return bad("the presence byte (offset " + std::to_string(*presence_offset) +
               ") does not lie within the fixed part (" + bytes_text(fixed) + ")");
  for (const auto& f : fields)
    if (f.size == 0 || f.offset > max_size || f.size > max_size - f.offset)
      return bad("field " + f.name + " (offset " + std::to_string(f.offset) + ", " + bytes_text(f.size) +
                 ") does not lie within max_size (" + std::to_string(max_size) + ")");
  if (const auto* w = std::get_if<WalkFromTlsSlot>(&indirection); w && !w->walk) return bad("the walk is missing");
  if (const auto* a = std::get_if<PointerInMemoryArea>(&indirection); a && a->pointer_offset > kRecordMaxBytes)
    return bad("the area's pointer offset " + std::to_string(a->pointer_offset) + " is beyond " +
               std::to_string(kRecordMaxBytes));
  return Ok{};
}

std::uint64_t declared_length(const RecordLayout& layout, std::span<const std::uint8_t> first_bytes) {
  if (first_bytes.size() < layout.fixed_part()) return 0;
  return std::visit(overloaded{[](const FixedSize& f) -> std::uint64_t { return f.bytes; },
                               [&](const SizeField& f) -> std::uint64_t {
                                 if (f.offset > first_bytes.size() || f.width > first_bytes.size() - f.offset) return 0;
                                 return f.header_length + load_unsigned(first_bytes.data() + f.offset, f.width);
                               }},
                    layout.length);
}

Expected<std::size_t> record_length(const RecordLayout& layout, std::span<const std::uint8_t> first_bytes) {
  const std::string where = layout.name + " record";
  const std::size_t fixed = layout.fixed_part();
  if (first_bytes.size() < fixed)
    return make_error(ErrorKind::kTruncated,
                      "only " + bytes_text(first_bytes.size()) + " given, the length is known from the first " +
                          bytes_text(fixed),
                      where);
  const std::uint64_t total = declared_length(layout, first_bytes);
  if (total > layout.max_size) {
    const auto* f = std::get_if<SizeField>(&layout.length);
    if (!f)  // a fixed size over the bound: the layout fails check()
      return make_error(ErrorKind::kTooLong,
                        "the fixed size " + bytes_text(total) + " is over the " + std::to_string(layout.max_size) +
                            "-byte bound",
                        where);
    return make_error(ErrorKind::kTooLong,
                      "the size field says " + bytes_text(total - f->header_length) + " follow the " +
                          bytes_text(f->header_length) + " header: " + bytes_text(total) + " in all, over the " +
                          std::to_string(layout.max_size) + "-byte bound",
                      where + ", " + size_field_name(layout, *f));
  }
  return static_cast<std::size_t>(total);
}

Expected<std::uint64_t> module_block_address(const ProcessMemory& memory, const DtvModule& module,
                                             std::uint64_t thread_pointer) {
  const DtvLayout& layout = module.dtv;
  const std::string module_name = "TLS module " + std::to_string(module.module_id);
  if (module.module_id == 0 || module.module_id > kMaxTlsModules)
    return make_error(ErrorKind::kMalformed, "module id " + std::to_string(module.module_id) + " is outside 1.." +
                                                 std::to_string(kMaxTlsModules),
                      module_name);
  // Unsigned arithmetic wraps like the target's (the DTV pointer sits below the thread pointer on musl arm64).
  const std::uint64_t dtv_slot = thread_pointer + static_cast<std::uint64_t>(layout.dtv_at);
  auto dtv = memory.read_u64(dtv_slot);
  if (!dtv) return dtv.error().within("DTV pointer at thread pointer " + hex_address(thread_pointer) + " + " +
                                      std::to_string(layout.dtv_at));
  if (*dtv == 0)
    return make_error(ErrorKind::kNotAllocated, "the thread has no DTV yet",
                      "DTV pointer at " + hex_address(dtv_slot));
  const auto entry = [&](std::int64_t index) {
    return *dtv + static_cast<std::uint64_t>(index) * layout.entry_size;
  };
  const std::string where = module_name + ", DTV at " + hex_address(*dtv);
  auto count = memory.read_u64(entry(layout.count_entry));
  if (!count) return count.error().within(where + " (its entry count)");
  if (*count > kMaxTlsModules)
    return make_error(ErrorKind::kMalformed,
                      "the DTV claims " + std::to_string(*count) + " module entries, more than the " +
                          std::to_string(kMaxTlsModules) + " any C library numbers: not a DTV",
                      where);
  if (module.module_id > *count)
    return make_error(ErrorKind::kNotAllocated,
                      "the thread's DTV has " + std::to_string(*count) +
                          " module entries: the thread has not used TLS since the module was loaded",
                      where);
  if (module.generation && layout.generation_entry) {
    auto generation = memory.read_u64(entry(*layout.generation_entry));
    if (!generation) return generation.error().within(where + " (its generation)");
    if (*generation < *module.generation)
      return make_error(ErrorKind::kNotAllocated,
                        "the thread's DTV is of generation " + std::to_string(*generation) + ", older than the module's " +
                            std::to_string(*module.generation) +
                            ": the thread has not used TLS since the module was loaded",
                        where);
  }
  auto block = memory.read_u64(entry(static_cast<std::int64_t>(module.module_id)));
  if (!block) return block.error().within(where + " (its entry)");
  if (*block == 0 || (layout.unallocated && *block == *layout.unallocated))
    return make_error(ErrorKind::kNotAllocated,
                      "no TLS block for the module in this thread yet: the loader allocates it at the thread's first "
                      "use of the module's TLS",
                      where);
  return *block;
}

Expected<std::uint64_t> pointer_address(const ProcessMemory& memory, const RecordLayout& layout, const PointerSite& site,
                                        std::uint64_t thread_pointer) {
  if (const auto* area = std::get_if<PointerInMemoryArea>(&layout.indirection)) return site.value + area->pointer_offset;
  // Unsigned arithmetic wraps like the target's own pointer arithmetic (TLS offsets are negative on x86-64).
  if (!site.module) return thread_pointer + site.value;
  auto block = module_block_address(memory, *site.module, thread_pointer);
  if (!block) return block.error();
  return *block + site.value;
}

bool uses_thread_pointer(const RecordLayout& layout) {
  return !std::holds_alternative<PointerInMemoryArea>(layout.indirection);
}

Expected<std::uint64_t> record_address(const ProcessMemory& memory, const RecordLayout& layout,
                                       std::uint64_t pointer_address) {
  if (const auto* walked = std::get_if<WalkFromTlsSlot>(&layout.indirection)) {
    if (!walked->walk) return make_error(ErrorKind::kUnsupported, "the layout names no walk", layout.name);
    return walked->walk->record_address(memory, pointer_address);
  }
  return memory.read_u64(pointer_address);
}

Expected<RecordRead> read_record(const ProcessMemory& memory, const RecordLayout& layout, std::uint64_t address) {
  const auto within = [&](const Error& e, std::size_t n) {
    return e.within(layout.name + " record at " + hex_address(address) + " (" + bytes_text(n) + ")");
  };
  // One buffer at the bound: the read never allocates by what the target says.
  // A layout that failed check() is still read within the bound.
  std::array<std::uint8_t, kRecordMaxBytes> buffer;
  const std::size_t bound = std::min(layout.max_size, kRecordMaxBytes);
  const std::size_t fixed = std::min(layout.fixed_part(), bound);
  if (auto st = memory.read(address, std::span(buffer).first(fixed)); !st) return within(st.error(), fixed);
  RecordRead out;
  out.declared_length = declared_length(layout, std::span(buffer).first(fixed));
  const std::size_t length =
      static_cast<std::size_t>(std::min<std::uint64_t>(std::max<std::uint64_t>(out.declared_length, fixed), bound));
  if (length > fixed) {
    if (auto st = memory.read(address + fixed, std::span(buffer).subspan(fixed, length - fixed)); !st)
      return within(st.error(), length);
  }
  out.bytes = RecordBytes(std::span(buffer).first(length));
  return out;
}

}  // namespace tracecorr
