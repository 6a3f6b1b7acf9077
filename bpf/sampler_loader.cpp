#include "sampler_loader.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <cstdarg>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>

#include "empty.skel.h"
#include "floor.skel.h"
#include "sampler.skel.h"

namespace tracecorr::bpf {
namespace {

std::mutex log_mutex;
std::deque<std::string> log_lines;

// A rejected program's verifier log arrives as one long message whose cause
// is at its end: keep the head (which instruction) and the tail (why).
constexpr std::size_t kKeepHead = 512, kKeepTail = 1536;

int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  va_list again;
  va_copy(again, args);
  int n = std::vsnprintf(nullptr, 0, fmt, args);
  std::string text(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(text.data(), text.size() + 1, fmt, again);
  va_end(again);
  if (text.size() > kKeepHead + kKeepTail)
    text = text.substr(0, kKeepHead) + " [...] " + text.substr(text.size() - kKeepTail);
  std::lock_guard<std::mutex> lock(log_mutex);
  log_lines.push_back(std::move(text));
  while (log_lines.size() > 8) log_lines.pop_front();
  return 0;
}

void install_print() {
  static std::once_flag once;
  std::call_once(once, [] { libbpf_set_print(libbpf_print); });
}

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

Error load_error(const char* step, int err) {
  std::string what = std::string(step) + " failed: " + errno_text(err);
  std::string reason = bpf_unavailable_reason();
  if (!reason.empty()) what += " (" + reason + ")";
  std::string tail = libbpf_log_tail();
  if (!tail.empty()) what += "; libbpf: " + tail;
  return make_error(what, "BPF sampler");
}

}  // namespace

void LinkDeleter::operator()(bpf_link* l) const { bpf_link__destroy(l); }

std::string libbpf_log_tail() {
  std::lock_guard<std::mutex> lock(log_mutex);
  std::string out;
  for (const auto& l : log_lines) {
    std::string line = l;
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    if (!out.empty()) out += " | ";
    out += line;
  }
  return out;
}

Expected<std::vector<int>> online_cpus() {
  std::ifstream in("/sys/devices/system/cpu/online");
  std::string text;
  if (!in || !std::getline(in, text)) return make_error("cannot read the online CPU list", "/sys/devices/system/cpu/online");
  std::vector<int> cpus;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int a = -1, b = -1;
    if (std::sscanf(part.c_str(), "%d-%d", &a, &b) == 2 && a >= 0 && b >= a && b < 65536) {
      for (int c = a; c <= b; ++c) cpus.push_back(c);
    } else if (std::sscanf(part.c_str(), "%d", &a) == 1 && a >= 0 && a < 65536) {
      cpus.push_back(a);
    } else {
      return make_error("malformed CPU range '" + part + "'", "/sys/devices/system/cpu/online");
    }
  }
  if (cpus.empty()) return make_error("no online CPU", "/sys/devices/system/cpu/online");
  return cpus;
}

Expected<std::vector<LinkPtr>> attach_cpu_clock(bpf_program* prog, unsigned hz) {
  if (hz == 0) return make_error("sampling frequency must be > 0 Hz", "perf_event_open");
  auto cpus = online_cpus();
  if (!cpus) return cpus.error();
  std::vector<LinkPtr> links;
  for (int cpu : *cpus) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = hz;
    int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      int err = errno;
      if (err == ENODEV) continue;  // went offline meanwhile
      return make_error(std::string("perf_event_open(cpu-clock, ") + std::to_string(hz) + " Hz) failed: " +
                            errno_text(err) + (err == EACCES || err == EPERM ? " (needs CAP_PERFMON or root)" : "") +
                            (err == EINVAL ? " (frequency above kernel.perf_event_max_sample_rate?)" : ""),
                        "CPU " + std::to_string(cpu));
    }
    UniqueFd owner(fd);
    bpf_link* link = bpf_program__attach_perf_event(prog, fd);
    if (!link) {
      int err = errno;
      return make_error("attaching the program to the perf event failed: " + errno_text(err),
                        "CPU " + std::to_string(cpu));
    }
    owner.release();  // the link owns the perf event fd now
    links.emplace_back(link);
  }
  if (links.empty()) return make_error("no CPU accepted a perf event", "perf_event_open");
  return links;
}

Expected<ProgramStats> program_stats(int prog_fd) {
  bpf_prog_info info{};
  __u32 len = sizeof(info);
  if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) != 0)
    return make_error("bpf_obj_get_info_by_fd failed: " + errno_text(errno), "program fd " + std::to_string(prog_fd));
  ProgramStats s;
  s.run_time_ns = info.run_time_ns;
  s.run_cnt = info.run_cnt;
  s.recursion_misses = info.recursion_misses;
  return s;
}

std::string bpf_unavailable_reason() {
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
    return "the kernel has no BTF at /sys/kernel/btf/vmlinux, which CO-RE needs";
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return {};
  auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1u; };
  const int kCapSysAdmin = 21, kCapPerfmon = 38, kCapBpf = 39;
  if (has(kCapSysAdmin) || (has(kCapBpf) && has(kCapPerfmon))) return {};
  return "not privileged: needs root or CAP_BPF and CAP_PERFMON";
}

// ---- SamplerLoader ---------------------------------------------------------

Expected<std::unique_ptr<SamplerLoader>> SamplerLoader::open(const SamplerLoaderOptions& options) {
  install_print();
  std::unique_ptr<SamplerLoader> l(new SamplerLoader());
  l->skel_ = tc_sampler_bpf__open();
  if (!l->skel_) return load_error("opening the sampler BPF object", errno);
  std::size_t rb = options.ringbuf_bytes;
  if (rb < 4096 || (rb & (rb - 1)) != 0)
    return make_error("ring buffer size " + std::to_string(rb) + " is not a power of two >= 4096", "BPF sampler");
  if (int err = bpf_map__set_max_entries(l->skel_->maps.samples, static_cast<__u32>(rb)); err != 0)
    return load_error("sizing the ring buffer", err);
  if (int err = tc_sampler_bpf__load(l->skel_); err != 0) return load_error("loading the sampler BPF program", err);
  l->ringbuf_ = ring_buffer__new(bpf_map__fd(l->skel_->maps.samples), &SamplerLoader::on_record, l.get(), nullptr);
  if (!l->ringbuf_) return load_error("opening the ring buffer", errno);
  const long page = sysconf(_SC_PAGESIZE);
  void* consumer = mmap(nullptr, static_cast<std::size_t>(page), PROT_READ, MAP_SHARED, bpf_map__fd(l->skel_->maps.samples), 0);
  if (consumer != MAP_FAILED) {
    l->consumer_page_ = static_cast<const volatile std::uint64_t*>(consumer);
    l->consumer_page_size_ = static_cast<std::size_t>(page);
    l->consumer_at_open_ = l->consumer_page_[0];
  }
  return l;
}

SamplerLoader::~SamplerLoader() {
  links_.clear();  // stop sampling first
  if (consumer_page_) munmap(const_cast<std::uint64_t*>(consumer_page_), consumer_page_size_);
  if (ringbuf_) ring_buffer__free(ringbuf_);
  if (skel_) tc_sampler_bpf__destroy(skel_);
}

std::uint64_t SamplerLoader::ring_bytes_consumed() const {
  return consumer_page_ ? consumer_page_[0] - consumer_at_open_ : 0;
}

namespace {

// The walk's shape into the entry, once it is one the program can follow:
// every word inside the struct, a power-of-two bucket bound, a chain within
// the program's own cap.
Status put_table_walk(const TableWalkShape& shape, tc_process& value) {
  const auto bad = [](const std::string& what) {
    return make_error(ErrorKind::kUnsupported, "a table the program cannot walk: " + what, "BPF sampler");
  };
  for (unsigned at : {shape.frame_slot_at, shape.key_handle_at, shape.undefined_at})
    if (at + 8u > shape.struct_size) return bad("a word at " + std::to_string(at) + " past the struct");
  if (shape.hash_at + 4u > shape.struct_size || shape.record_offset_at >= shape.struct_size)
    return bad("the hash or record offset past the struct");
  if (shape.max_buckets == 0 || (shape.max_buckets & (shape.max_buckets - 1)) != 0)
    return bad("a bucket bound that is no power of two");
  if (shape.chain_cap == 0 || shape.chain_cap > TC_TABLE_WALK_MAX_CHAIN)
    return bad("a chain cap outside 1.." + std::to_string(TC_TABLE_WALK_MAX_CHAIN));
  value.flags |= TC_PROCESS_F_TABLE_WALK;
  value.walk_max_buckets = shape.max_buckets;
  value.walk_frame_table_offset = shape.frame_table_offset;
  value.walk_table_header_size = shape.table_header_size;
  value.walk_chain_cap = shape.chain_cap;
  value.walk_frame_slot_at = shape.frame_slot_at;
  value.walk_key_handle_at = shape.key_handle_at;
  value.walk_hash_at = shape.hash_at;
  value.walk_record_offset_at = shape.record_offset_at;
  value.walk_undefined_at = shape.undefined_at;
  value.walk_record_offset_min = shape.record_offset_min;
  value.walk_record_offset_max = shape.record_offset_max;
  value.walk_load_factor = shape.load_factor;
  return Ok{};
}

}  // namespace

Expected<tc_process> tracked_entry(const RecordLayout& layout, const PointerSite& site, std::uint32_t flags) {
  if (auto st = layout.check(); !st) return st.error().within("BPF sampler");
  static_assert(kRecordMaxBytes <= 0xffff, "tc_process holds record offsets in 16 bits");
  static_assert(kMaxTlsModules == TC_MAX_TLS_MODULES, "the program bounds a DTV walk as user space does");
  tc_process value{};
  value.flags = flags | TC_PROCESS_F_TRACKED;
  value.pointer_site = site.value;
  if (const auto* walked = std::get_if<WalkFromTlsSlot>(&layout.indirection)) {
    auto shape = walked->walk->table_walk_shape();
    if (!shape)
      return make_error(ErrorKind::kUnsupported,
                        "the program has no " + walked->walk->name() + ": read these records with --reader ptrace",
                        "BPF sampler");
    if (auto st = put_table_walk(*shape, value); !st) return st.error();
  }
  if (const auto* area = std::get_if<PointerInMemoryArea>(&layout.indirection)) {
    value.indirection = TC_POINTER_IN_MEMORY_AREA;
    value.pointer_site = site.value + area->pointer_offset;
  } else if (!site.module) {
    value.indirection = TC_POINTER_IN_TLS_SLOT;
  } else {
    // Dynamic TLS: the program walks each thread's DTV by the C library's layout, as data.
    const DtvModule& module = *site.module;
    const DtvLayout& dtv = module.dtv;
    const std::string where = "BPF sampler, TLS module " + std::to_string(module.module_id);
    if (module.module_id == 0 || module.module_id > kMaxTlsModules)
      return make_error(ErrorKind::kMalformed, "module id outside 1.." + std::to_string(kMaxTlsModules), where);
    if (dtv.entry_size == 0 || dtv.entry_size > 0xffff || dtv.dtv_at < INT32_MIN || dtv.dtv_at > INT32_MAX ||
        dtv.count_entry < INT16_MIN || dtv.count_entry > INT16_MAX ||
        (dtv.generation_entry && (*dtv.generation_entry < INT16_MIN || *dtv.generation_entry > INT16_MAX)))
      return make_error(ErrorKind::kUnsupported, "a DTV layout the program's entry cannot hold", where);
    value.indirection = TC_POINTER_IN_DTV_BLOCK;
    value.dtv_module = module.module_id;
    // A generation is checked only where the C library keeps one in the DTV.
    value.dtv_generation = module.generation && dtv.generation_entry ? *module.generation : 0;
    value.dtv_generation_entry = static_cast<tc_s16>(dtv.generation_entry.value_or(0));
    value.dtv_unallocated = dtv.unallocated.value_or(0);
    value.dtv_at = static_cast<tc_s32>(dtv.dtv_at);
    value.dtv_entry_size = static_cast<tc_u16>(dtv.entry_size);
    value.dtv_count_entry = static_cast<tc_s16>(dtv.count_entry);
  }
  value.fixed_size = static_cast<tc_u16>(layout.fixed_part());
  if (const auto* field = std::get_if<SizeField>(&layout.length)) {
    value.size_field_width = static_cast<tc_u8>(field->width);
    value.size_field_offset = static_cast<tc_u16>(field->offset);
  }
  value.max_size = static_cast<tc_u16>(layout.max_size);
  value.valid_offset = static_cast<tc_u16>(layout.valid_offset);
  value.presence_offset = layout.presence_offset ? static_cast<tc_u16>(*layout.presence_offset) : TC_NO_PRESENCE_BYTE;
  const auto words = layout.valid_values.words();
  std::memcpy(value.valid_values, words.data(), sizeof(value.valid_values));
  return value;
}

std::uint64_t SampleView::frame(std::size_t i) const {
  std::uint64_t v = 0;
  std::memcpy(&v, stack.data() + i * sizeof v, sizeof v);  // the ring gives no alignment guarantee we rely on
  return v;
}

std::optional<SampleView> parse_sample(std::span<const std::uint8_t> data) {
  SampleView v;
  if (data.size() < sizeof(tc_sample)) return std::nullopt;
  std::memcpy(&v.header, data.data(), sizeof(tc_sample));
  const std::size_t record = v.header.record_length;
  const std::size_t padded = TC_SAMPLE_PADDED(record);
  if (record > kRecordMaxBytes || padded > data.size() - sizeof(tc_sample)) return std::nullopt;
  v.record = data.subspan(sizeof(tc_sample), record);
  if (v.header.stack_bytes > 0) {
    const std::size_t stack = static_cast<std::size_t>(v.header.stack_bytes);
    if (stack > TC_MAX_STACK_DEPTH * sizeof(std::uint64_t) || stack % sizeof(std::uint64_t) != 0 ||
        stack > data.size() - sizeof(tc_sample) - padded)
      return std::nullopt;
    v.stack = data.subspan(sizeof(tc_sample) + padded, stack);
  }
  return v;
}

Status SamplerLoader::write_entry(pid_t pid, const tc_tracked& value) {
  __u32 key = static_cast<__u32>(pid);
  if (bpf_map__update_elem(skel_->maps.tracked, &key, sizeof(key), &value, sizeof(value), BPF_ANY) != 0)
    return make_error("updating the tracked-process map failed: " + errno_text(errno) +
                          (errno == E2BIG ? " (more than " + std::to_string(TC_MAX_TRACKED_PROCESSES) + " processes)" : ""),
                      "BPF sampler, pid " + std::to_string(pid));
  tracked_[pid] = value;
  return Ok{};
}

Status SamplerLoader::track(pid_t pid, const RecordLayout& layout, PointerSite site, std::uint32_t flags,
                            LayoutSlot slot) {
  if (pid <= 0) return make_error("invalid pid " + std::to_string(pid), "BPF sampler");
  if (slot >= TC_LAYOUTS_PER_PROCESS)
    return make_error("layout slot " + std::to_string(slot) + " past the " + std::to_string(TC_LAYOUTS_PER_PROCESS) +
                          " a process holds",
                      "BPF sampler, pid " + std::to_string(pid));
  auto entry = tracked_entry(layout, site, flags);
  if (!entry) return entry.error().within("pid " + std::to_string(pid));
  tc_tracked value{};  // a new process: no context header, every other slot empty
  if (auto it = tracked_.find(pid); it != tracked_.end()) value = it->second;
  value.layouts[slot] = *entry;
  return write_entry(pid, value);
}

Status SamplerLoader::track_process_context(pid_t pid, std::optional<std::uint64_t> header_address) {
  auto it = tracked_.find(pid);
  if (it == tracked_.end())
    return make_error("pid " + std::to_string(pid) + " is not tracked: track() it first", "BPF sampler");
  if (header_address && *header_address == 0)
    return make_error("a process context header at address 0", "BPF sampler, pid " + std::to_string(pid));
  tc_tracked value = it->second;
  value.context_header = header_address.value_or(0);
  return write_entry(pid, value);
}

Status SamplerLoader::untrack(pid_t pid, LayoutSlot slot) {
  auto it = tracked_.find(pid);
  if (it == tracked_.end() || slot >= TC_LAYOUTS_PER_PROCESS) return Ok{};
  tc_tracked value = it->second;
  value.layouts[slot] = tc_process{};
  const bool any_left = std::any_of(std::begin(value.layouts), std::end(value.layouts),
                                    [](const tc_process& p) { return (p.flags & TC_PROCESS_F_TRACKED) != 0; });
  return any_left ? write_entry(pid, value) : untrack(pid);
}

Status SamplerLoader::untrack(pid_t pid) {
  __u32 key = static_cast<__u32>(pid);
  tracked_.erase(pid);
  if (bpf_map__delete_elem(skel_->maps.tracked, &key, sizeof(key), 0) != 0 && errno != ENOENT)
    return make_error("deleting from the tracked-process map failed: " + errno_text(errno),
                      "BPF sampler, pid " + std::to_string(pid));
  return Ok{};
}

Status SamplerLoader::attach(unsigned hz) {
  links_.clear();
  auto links = attach_cpu_clock(skel_->progs.tc_sample, hz);
  if (!links) return links.error();
  links_ = std::move(*links);
  return Ok{};
}

void SamplerLoader::detach() { links_.clear(); }

int SamplerLoader::on_record(void* ctx, void* data, std::size_t size) {
  auto* self = static_cast<SamplerLoader*>(ctx);
  auto view = parse_sample({static_cast<const std::uint8_t*>(data), size});
  if (!view) {
    ++self->malformed_;
    return self->consume_limit_passed() ? kConsumeLimitReached : 0;
  }
  ++self->delivered_;
  ++self->read_;
  if (self->callback_) (*self->callback_)(*view);
  return self->consume_limit_passed() ? kConsumeLimitReached : 0;
}

// libbpf has consumed the record (its consumer position is past it) when the
// callback returns: a negative value stops the consumption there, and is what
// ring_buffer__poll/consume return.
bool SamplerLoader::consume_limit_passed() {
  if (std::chrono::steady_clock::now() < consume_until_) return false;
  consume_limit_reached_ = true;
  return true;
}

Expected<std::size_t> SamplerLoader::poll(std::chrono::milliseconds timeout, const Callback& callback,
                                          std::chrono::nanoseconds consume_for) {
  callback_ = &callback;
  delivered_ = 0;
  consume_limit_reached_ = false;
  // The program never wakes us (see sampler.bpf.c): the wait is the drain
  // interval, then what is there is consumed, for at most consume_for.
  consume_until_ = std::chrono::steady_clock::now() + timeout + consume_for;
  int n = ring_buffer__poll(ringbuf_, static_cast<int>(timeout.count()));
  if (!consume_limit_reached_ && (n >= 0 || n == -EINTR)) {
    consume_until_ = std::chrono::steady_clock::now() + consume_for;
    n = ring_buffer__consume(ringbuf_);
  }
  callback_ = nullptr;
  if (consume_limit_reached_) return delivered_;
  if (n < 0 && n != -EINTR) return make_error("reading the ring buffer failed: " + errno_text(n), "BPF sampler");
  return delivered_;
}

std::array<std::uint64_t, TC_CTR_COUNT> SamplerLoader::counters() const {
  // Each CPU's counters are the head of its scratch value (sampler.h).
  static_assert(sizeof(tc_scratch) % 8 == 0, "per-CPU values are copied out 8-byte aligned");
  std::array<std::uint64_t, TC_CTR_COUNT> total{};
  int ncpu = libbpf_num_possible_cpus();
  if (ncpu <= 0) return total;
  std::vector<tc_scratch> values(static_cast<std::size_t>(ncpu));
  __u32 zero = 0;
  if (bpf_map__lookup_elem(skel_->maps.scratch, &zero, sizeof(zero), values.data(), values.size() * sizeof(tc_scratch),
                           0) != 0)
    return total;
  for (const auto& cpu : values)
    for (std::size_t i = 0; i < TC_CTR_COUNT; ++i) total[i] += cpu.counters[i];
  return total;
}

int SamplerLoader::prog_fd() const { return bpf_program__fd(skel_->progs.tc_sample); }

// ---- EmptyLoader -----------------------------------------------------------

Expected<std::unique_ptr<EmptyLoader>> EmptyLoader::open() {
  install_print();
  std::unique_ptr<EmptyLoader> l(new EmptyLoader());
  l->skel_ = tc_empty_bpf__open_and_load();
  if (!l->skel_) return load_error("loading the empty BPF program", errno);
  return l;
}

EmptyLoader::~EmptyLoader() {
  links_.clear();
  if (skel_) tc_empty_bpf__destroy(skel_);
}

Status EmptyLoader::attach(unsigned hz) {
  links_.clear();
  auto links = attach_cpu_clock(skel_->progs.tc_empty, hz);
  if (!links) return links.error();
  links_ = std::move(*links);
  return Ok{};
}

int EmptyLoader::prog_fd() const { return bpf_program__fd(skel_->progs.tc_empty); }

// ---- FloorLoader -----------------------------------------------------------

Expected<std::unique_ptr<FloorLoader>> FloorLoader::open() {
  install_print();
  std::unique_ptr<FloorLoader> l(new FloorLoader());
  l->skel_ = tc_floor_bpf__open_and_load();
  if (!l->skel_) return load_error("loading the floor BPF program", errno);
  auto count_record = [](void*, void*, std::size_t) { return 0; };
  l->ringbuf_ = ring_buffer__new(bpf_map__fd(l->skel_->maps.samples), count_record, nullptr, nullptr);
  if (!l->ringbuf_) return load_error("opening the floor's ring buffer", errno);
  return l;
}

FloorLoader::~FloorLoader() {
  links_.clear();
  if (ringbuf_) ring_buffer__free(ringbuf_);
  if (skel_) tc_floor_bpf__destroy(skel_);
}

Status FloorLoader::track(pid_t pid) {
  __u32 key = static_cast<__u32>(pid);
  tc_tracked value{};
  if (bpf_map__update_elem(skel_->maps.tracked, &key, sizeof(key), &value, sizeof(value), BPF_ANY) != 0)
    return make_error("updating the floor's tracked map failed: " + errno_text(errno), "BPF floor, pid " + std::to_string(pid));
  return Ok{};
}

Status FloorLoader::untrack(pid_t pid) {
  __u32 key = static_cast<__u32>(pid);
  if (bpf_map__delete_elem(skel_->maps.tracked, &key, sizeof(key), 0) != 0 && errno != ENOENT)
    return make_error("deleting from the floor's tracked map failed: " + errno_text(errno),
                      "BPF floor, pid " + std::to_string(pid));
  return Ok{};
}

Status FloorLoader::attach(unsigned hz) {
  links_.clear();
  auto links = attach_cpu_clock(skel_->progs.tc_floor, hz);
  if (!links) return links.error();
  links_ = std::move(*links);
  return Ok{};
}

Expected<std::size_t> FloorLoader::drain(std::chrono::milliseconds timeout) {
  // The program never wakes us, like the sampler: wait, then consume what is there.
  int polled = ring_buffer__poll(ringbuf_, static_cast<int>(timeout.count()));
  if (polled < 0 && polled != -EINTR)
    return make_error("reading the floor's ring buffer failed: " + errno_text(polled), "BPF floor");
  int consumed = ring_buffer__consume(ringbuf_);
  if (consumed < 0) return make_error("reading the floor's ring buffer failed: " + errno_text(consumed), "BPF floor");
  return static_cast<std::size_t>(std::max(polled, 0) + consumed);
}

int FloorLoader::prog_fd() const { return bpf_program__fd(skel_->progs.tc_floor); }

}  // namespace tracecorr::bpf
