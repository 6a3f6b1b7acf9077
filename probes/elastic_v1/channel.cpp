#include "channel.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "elastic_v1/registry.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr::elastic_v1 {
namespace {

// The storage is read every kStoragePollInterval from discovery on: PROC-04
// asks whether the socket existed at the moment the storage became visible,
// PROC-01 whether it changed once visible (a pointer set before the storage
// was filled). Once it has held still for kStorageSettle, a change that comes
// later stays (PROC-01 compares with the first content), and a read every
// kStorageSteadyPoll sees it: reading it every 500 µs for a whole session was
// a sixth of a conform run's CPU, taken from the target it judges.
constexpr auto kStoragePollInterval = std::chrono::microseconds(500);
constexpr auto kStorageSettle = std::chrono::seconds(1);
constexpr auto kStorageSteadyPoll = std::chrono::milliseconds(10);
// Bound on the raw storage bytes kept per sighting (evidence, not data).
constexpr std::size_t kMaxRawStorageBytes = 8192;
// How long a send may wait for room in the agent's queue (max_dgram_qlen) before
// the message counts as lost. A registration waits longer: every judge of
// delay and host.id rests on it, and an agent starved of CPU on a busy
// machine leaves its queue full for a second or more.
constexpr auto kSendPatience = std::chrono::milliseconds(250);
constexpr auto kRegistrationSendPatience = std::chrono::milliseconds(3000);
// A sender that bursts loses datagrams (the queue holds max_dgram_qlen, 10 by
// default): after kPaceEvery unread datagrams, a send waits up to kPacePatience
// for the agent to read them. An agent that does not read in that time is not
// waited for again until it has read everything.
constexpr std::size_t kPaceEvery = 8;
constexpr auto kPacePatience = std::chrono::milliseconds(2000);
// Socket capacity: after the socket has room again, how long to leave the agent
// to finish draining before refilling (its drain takes microseconds).
constexpr auto kCapacityDrainPause = std::chrono::milliseconds(1);
// How long the capacity measurement waits for the agent to read what the
// scenario left queued (a slow poller takes one poll interval).
constexpr auto kCapacityQueueEmptyPatience = std::chrono::milliseconds(2000);
// Anyone may make a socket in it (the agent may drop its privileges before
// it does: `runuser -u nobody`, a container's `setpriv --reuid`), no one may
// list it, and only a socket's owner may remove it (sticky), like /tmp's own
// rules for the sockets agents make there by default.
constexpr mode_t kSocketDirMode = 01733;
// Bound on the agent's line quoted in the report.
constexpr std::size_t kMaxQuotedLine = 300;

std::string make_socket_dir(const std::string& parent) {
  std::string tmpl = parent + "/tracecorr-sock-XXXXXX";
  if (!mkdtemp(tmpl.data())) return "/tmp";
  chmod(tmpl.c_str(), kSocketDirMode);
  return tmpl;
}

std::string process_name(pid_t pid) {
  auto st = read_process_stat(pid);
  return "pid " + std::to_string(pid) + (st ? " (" + st->comm + ")" : "");
}

}  // namespace

Channel::~Channel() {
  stop_watching();
  closed();
}

void Channel::prepare_launch(conform::LaunchSpec& launch) {
  socket_dir_ = make_socket_dir(socket_dir_parent_);
  launch.env.emplace(std::string(elastic_v1::spec::kEnvEnabled), "true");  // the settings' own value wins
  launch.env[std::string(elastic_v1::spec::kEnvSocketDir)] = socket_dir_;
  // The agent reads the path in its own root: a container's, after `chroot`.
  // Held at each exec of the launched tree, before the new program runs,
  // that root gets the directory too.
  launch.on_exec = [this](pid_t pid) { make_socket_dir_in_root_of(pid, "at its exec"); };
}

void Channel::make_socket_dir_in_root_of(pid_t pid, const std::string& when) {
  if (socket_dir_.empty() || socket_dir_ == "/tmp") return;
  struct stat ours{}, theirs{};
  if (::stat("/", &ours) != 0 || ::stat(("/proc/" + std::to_string(pid) + "/root/").c_str(), &theirs) != 0) return;
  if (ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino) return;
  std::lock_guard lock(roots_mutex_);
  for (const auto& r : roots_)
    if (r.dev == theirs.st_dev && r.ino == theirs.st_ino) return;
  RootDir root;
  root.dev = theirs.st_dev;
  root.ino = theirs.st_ino;
  const auto path = std::filesystem::path(socket_dir_);
  const std::string parent = path.parent_path().string(), name = path.filename().string();
  const std::string where = process_name(pid) + ", whose root is not tracecorr's (a container)";
  auto parent_fd = open_in_target_root(pid, parent, O_PATH | O_DIRECTORY);
  if (!parent_fd) {
    socket_dir_unusable_ = "the agent's root has no " + parent + " to make " + socket_dir_ + " in (" + where + "): " +
                           parent_fd.error().message() + "; name a directory valid in the agent's root with --socket-dir";
    roots_.push_back(std::move(root));
    return;
  }
  root.parent = std::move(*parent_fd);
  struct stat made{};
  if (::mkdirat(root.parent.get(), name.c_str(), 0700) == 0) {
    root.made = true;
    (void)::fchmodat(root.parent.get(), name.c_str(), kSocketDirMode, 0);
    socket_dir_roots_.push_back("made in the root of " + where + ", " + when);
    if (when != "at its exec")
      socket_dir_unusable_ = socket_dir_ + " was made in the root of " + where + " only " + when +
                             ", after the agent had started";
  } else if (::fstatat(root.parent.get(), name.c_str(), &made, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(made.st_mode) ||
             made.st_uid != 0) {
    socket_dir_unusable_ = socket_dir_ + " could not be made in the root of " + where + ": " +
                           std::strerror(errno == 0 ? EEXIST : errno) + " (something else is there)";
  }
  roots_.push_back(std::move(root));
}

void Channel::remove_socket_dirs_in_roots() {
  std::lock_guard lock(roots_mutex_);
  const std::string name = std::filesystem::path(socket_dir_).filename().string();
  for (auto& r : roots_) {
    if (!r.made) continue;
    // What the agent left in it (its socket), then the directory; nothing
    // that resolves elsewhere is followed.
    int fd = ::openat(r.parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      if (DIR* dir = ::fdopendir(fd)) {
        std::vector<std::string> entries;
        while (dirent* e = ::readdir(dir))
          if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) entries.emplace_back(e->d_name);
        for (const auto& e : entries) (void)::unlinkat(::dirfd(dir), e.c_str(), 0);
        ::closedir(dir);
      } else {
        ::close(fd);
      }
    }
    (void)::unlinkat(r.parent.get(), name.c_str(), AT_REMOVEDIR);
    r.made = false;
  }
}

// The last line the agent printed that names the socket directory.
std::optional<std::string> Channel::complaint_about_socket_dir() const {
  if (!session_ || socket_dir_.empty()) return std::nullopt;
  std::optional<std::string> last;
  for (const auto& line : session_->target_output_lines())
    if (line.text.find(socket_dir_) != std::string::npos) last = line.text.substr(0, kMaxQuotedLine);
  return last;
}

void Channel::library_found(conform::Session& session) {
  session_ = &session;
  if (session.launched()) make_socket_dir_in_root_of(session.pid(), "when its library was found");
  if (!session.library() || !session.library()->process_pointer_addr) return;
  pointer_address_ = *session.library()->process_pointer_addr;
  sight_storage();  // the state at the earliest moment we can see
  storage_watch_running_ = true;
  storage_thread_ = std::thread([this] { watch_storage(); });
}

void Channel::opened(conform::Session& session, conform::DiscoveryWait& wait) {
  (void)wait;  // the storage follows the library at once: its own short wait (storage_wait_)
  session_ = &session;
  if (!session.library()) return;
  if (wait_for_storage(storage_wait_)) connect_socket();
}

void Channel::stop_watching() {
  storage_watch_running_ = false;
  if (storage_thread_.joinable()) storage_thread_.join();
}

void Channel::closed() {
  // Nothing published: the agent's own words about the directory it was given.
  if (!socket_dir_removed_ && !storage()) socket_dir_complaint_ = complaint_about_socket_dir();
  remove_socket_dirs_in_roots();
  if (!socket_dir_.empty() && socket_dir_ != "/tmp" && !socket_dir_removed_) {
    std::error_code ignored;
    std::filesystem::remove_all(socket_dir_, ignored);
    socket_dir_removed_ = true;  // the name stays: judges compare the socket path with it
  }
}

std::shared_ptr<const conform::ProtocolEvidence> Channel::evidence() const {
  auto f = std::make_shared<SessionFacts>();
  f->socket_dir = socket_dir_;
  {
    std::lock_guard lock(roots_mutex_);
    f->socket_dir_roots = socket_dir_roots_;
    f->socket_dir_unusable = socket_dir_unusable_;
  }
  f->socket_dir_complaint = socket_dir_complaint_;
  f->storage_sightings = storage_sightings();
  f->socket_facts = socket_facts_;
  f->socket_error = socket_error_;
  f->could_send = can_send();
  f->sent_messages = sent_messages();
  f->registrations = registrations();
  f->messages_lost = messages_lost_;
  f->socket_capacity = socket_capacity();
  return f;
}

bool Channel::sight_storage() {
  const auto& memory = session_->memory();
  auto pointer = memory.read_u64(pointer_address_);
  if (!pointer) return false;  // process gone or unmapped: nothing new to see
  StorageSighting sighting;
  sighting.at = Clock::now();
  sighting.pointer = *pointer;
  if (*pointer != 0) {
    auto decoded = decode_process_storage(memory.source_at(*pointer));
    std::size_t raw_size = decoded ? decoded->encoded_size : 64;
    sighting.raw.resize(std::min(raw_size, kMaxRawStorageBytes));
    if (!memory.read(*pointer, sighting.raw)) sighting.raw.clear();
    if (decoded)
      sighting.decoded = *decoded;
    else
      sighting.error = decoded.error();
  }
  std::lock_guard lock(mutex_);
  if (!storage_sightings_.empty()) {
    const auto& last = storage_sightings_.back();
    if (last.pointer == sighting.pointer && last.raw == sighting.raw) return false;
  }
  bool pointer_changed = storage_sightings_.empty() || storage_sightings_.back().pointer != sighting.pointer;
  if (sighting.decoded && pointer_changed) {
    // PROC-04: does the socket exist at the moment the storage becomes visible?
    auto facts = examine_socket(session_->pid(), sighting.decoded->socket_file_path);
    if (facts)
      sighting.socket = *facts;
    else
      sighting.socket_error = facts.error();
  }
  storage_sightings_.push_back(std::move(sighting));
  return true;
}

void Channel::watch_storage() {
  auto still_since = Clock::now();
  bool published = false;  // once a storage decoded, storage() never goes back to none
  while (storage_watch_running_) {
    const auto now = Clock::now();
    const bool new_sighting = sight_storage();
    published = published || storage().has_value();
    if (new_sighting || !published) still_since = now;
    std::this_thread::sleep_for(now - still_since < kStorageSettle ? Clock::duration(kStoragePollInterval)
                                                                    : Clock::duration(kStorageSteadyPoll));
  }
}

std::vector<StorageSighting> Channel::storage_sightings() const {
  std::lock_guard lock(mutex_);
  return storage_sightings_;
}

std::optional<ProcessStorage> Channel::storage() const {
  std::lock_guard lock(mutex_);
  for (auto it = storage_sightings_.rbegin(); it != storage_sightings_.rend(); ++it)
    if (it->decoded) return it->decoded;
  return std::nullopt;
}

bool Channel::wait_for_storage(Millis timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (storage()) return true;
    if (!storage_watch_running_ && pointer_address_) sight_storage();
    if (!session_->target_alive()) return false;
    std::this_thread::sleep_for(Millis(2));
  }
  return storage().has_value();
}

void Channel::connect_socket() {
  auto st = storage();
  if (!st) return;
  if (auto facts = examine_socket(session_->pid(), st->socket_file_path)) socket_facts_ = *facts;
  auto connected = AgentSocket::connect(session_->pid(), st->socket_file_path);
  if (!connected) {
    socket_error_ = connected.error();
    return;
  }
  socket_.emplace(std::move(*connected));
  take_up_.watch(socket_->fd());
}

void Channel::reconnect_socket() {
  socket_.reset();
  socket_error_.reset();
  connect_socket();
}

Expected<SocketCapacity> Channel::measure_socket_capacity(Millis window, std::uint64_t max_sends) {
  if (!socket_) return make_error("not connected to the agent's socket", "socket capacity");
  // One datagram, reused: a correlation for a transaction that never existed.
  Correlation c;
  c.trace_id.fill(0x7c);
  c.transaction_id.fill(0x7c);
  c.stack_trace_id.fill(0x7c);
  c.count = 1;
  const auto bytes = encode(c);
  SocketCapacity cap;
  // Start from an empty queue: datagrams still unread from the scenario (a
  // starved or slow agent) would otherwise count against the burst.
  if (!wait_until_read(kCapacityQueueEmptyPatience))
    return make_error("the agent did not read what was already queued within " +
                          std::to_string(kCapacityQueueEmptyPatience.count()) + " ms",
                      "socket capacity");
  // Sends until the queue is full (EAGAIN) or `count` reaches max_sends.
  auto fill = [&](std::uint64_t& count) -> Status {
    for (;;) {
      auto outcome = socket_->send(bytes);
      if (outcome == SendOutcome::WouldBlock) return Ok{};
      if (outcome == SendOutcome::Refused)
        return make_error(std::string("send refused: ") + std::strerror(socket_->last_errno()), "socket capacity");
      take_up_.sent();
      if (++count >= max_sends) return Ok{};
    }
  };
  if (auto st = fill(cap.burst); !st) return st.error();  // the burst: until the queue is full
  // Then cycles of: wait for room (POLLOUT), let the agent finish its drain,
  // fill the queue again until EAGAIN. A sender that refilled inside the
  // agent's drain loop would be read as fast as it sends, which no profiler
  // sending per sample does; this measures what arrives when it arrives.
  const auto start = Clock::now(), end = start + window;
  while (Clock::now() < end && cap.sent < max_sends) {
    auto left = std::chrono::duration_cast<Millis>(end - Clock::now());
    pollfd p{socket_->fd(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 1))) <= 0) continue;
    std::this_thread::sleep_for(kCapacityDrainPause);
    if (auto st = fill(cap.sent); !st) return st.error();
  }
  cap.capped = cap.sent >= max_sends;
  cap.window_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard lock(mutex_);
  socket_capacity_ = cap;
  return cap;
}

std::optional<SocketCapacity> Channel::socket_capacity() const {
  std::lock_guard lock(mutex_);
  return socket_capacity_;
}

SentMessage Channel::transmit(std::vector<std::uint8_t> datagram, std::string requirement, std::string label,
                              Millis patience) {
  SentMessage m;
  m.requirement = std::move(requirement);
  m.label = std::move(label);
  m.bytes = std::move(datagram);
  if (socket_) {
    if (take_up_.unread() == 0) pacing_abandoned_ = false;
    if (!pacing_abandoned_ && take_up_.unread() >= kPaceEvery && !take_up_.wait_until_read(kPacePatience))
      pacing_abandoned_ = true;
    // The queue holds max_dgram_qlen datagrams; the agent drains it when it
    // polls. Wait briefly for room rather than lose a probe's message.
    auto give_up = Clock::now() + patience;
    for (;;) {
      m.outcome = socket_->send(m.bytes);
      if (m.outcome != SendOutcome::WouldBlock || Clock::now() >= give_up) break;
      ++m.would_block_retries;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    m.send_errno = socket_->last_errno();
    if (m.outcome == SendOutcome::Sent)
      m.sequence = take_up_.sent();
    else
      ++messages_lost_;
  }
  m.at = Clock::now();
  m.at_system = std::chrono::system_clock::now();
  return m;
}

const SentMessage& Channel::store(SentMessage m) {
  std::lock_guard lock(mutex_);
  sent_.push_back(std::move(m));
  return sent_.back();
}

const SentMessage& Channel::send(std::vector<std::uint8_t> datagram, std::string requirement, std::string label) {
  return store(transmit(std::move(datagram), std::move(requirement), std::move(label), kSendPatience));
}

const SentMessage& Channel::send_correlation(const Correlation& c, std::string requirement, std::string label,
                                             std::optional<unsigned> expected_count,
                                             std::optional<std::vector<std::uint8_t>> bytes) {
  auto m = transmit(bytes ? std::move(*bytes) : encode(c), std::move(requirement), std::move(label), kSendPatience);
  m.transaction = std::make_pair(c.trace_id, c.transaction_id);
  m.stack_trace_id = c.stack_trace_id;
  // A message that never reached the agent cannot be expected to show up.
  m.expected_count = m.outcome == SendOutcome::Sent ? expected_count : std::optional<unsigned>(0);
  return store(std::move(m));
}

std::optional<std::chrono::system_clock::time_point> Channel::wait_until_read(Millis patience) {
  if (!socket_) return std::nullopt;
  return take_up_.wait_until_read(patience);
}

void Channel::register_profiler(Registration r, std::string requirement, bool judged) {
  // A registration takes effect when the agent reads it, not when it is sent:
  // a slow poller or an agent starved of CPU reads it much later. It goes
  // into an empty queue when the agent allows (so it does not wait behind
  // traffic), and the session waits a while for it to be read, so that what
  // the scenario does next happens under it.
  if (judged) (void)wait_until_read(kTakeUpPatience);
  auto m = transmit(encode(r), std::move(requirement), describe(Message{r}), kRegistrationSendPatience);
  if (judged && m.outcome == SendOutcome::Sent) (void)wait_until_read(kTakeUpPatience);
  std::lock_guard lock(mutex_);
  registrations_.push_back({m.at, m.at_system, std::move(r), judged, m.sequence, std::nullopt});
  sent_.push_back(std::move(m));
}

std::vector<SentMessage> Channel::sent_messages() const {
  std::vector<SentMessage> out;
  {
    std::lock_guard lock(mutex_);
    out.assign(sent_.begin(), sent_.end());
  }
  for (auto& m : out)
    if (m.sequence) m.taken_up_by = take_up_.read_after(m.sequence);
  return out;
}

std::vector<SentRegistration> Channel::registrations() const {
  std::vector<SentRegistration> out;
  {
    std::lock_guard lock(mutex_);
    out = registrations_;
  }
  for (auto& r : out)
    if (r.sent()) r.taken_up_at = take_up_.read_after(r.sequence);
  return out;
}

Channel& channel(conform::Session& session) {
  auto* c = session.part<Channel>();
  if (!c) std::abort();  // every Elastic session is opened with a Channel (suite.cpp): a programming error
  return *c;
}

const Channel& channel(const conform::Session& session) {
  const auto* c = session.part<Channel>();
  if (!c) std::abort();
  return *c;
}

}  // namespace tracecorr::elastic_v1
