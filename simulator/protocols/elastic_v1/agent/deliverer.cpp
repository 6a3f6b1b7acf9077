#include "elastic_v1/agent/deliverer.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <vector>

#include "elastic_v1/wire.hpp"

namespace tracecorr::elastic_v1::agent {
namespace {

using std::chrono::milliseconds;

constexpr std::size_t kOffersPerTurn = 64;
// Offers chosen for a process stay good this long (or until a transaction
// settles or expires): an agent reading until its queue is empty wakes the
// thread once per datagram, and choosing afresh each time would cost a sort per read.
constexpr auto kOffersFresh = std::chrono::milliseconds(2);
constexpr auto kLongestSleep = std::chrono::milliseconds(100);
constexpr int kThreadNice = -10;

std::optional<std::uint64_t> unread_bytes(int fd) {
  int n = 0;
  if (::ioctl(fd, SIOCOUTQ, &n) != 0 || n < 0) return std::nullopt;
  return static_cast<std::uint64_t>(n);
}

// What one datagram of `length` bytes charges its sender's socket while
// unread (the kernel's truesize), measured on a socketpair of our own. 0:
// unknown, and then only a read that empties the queue is seen.
std::uint64_t measure_charge(std::size_t length) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  UniqueFd a(sv[0]), b(sv[1]);
  std::vector<char> bytes(length);
  if (::send(a.get(), bytes.data(), length, MSG_DONTWAIT) != static_cast<ssize_t>(length)) return 0;
  return unread_bytes(a.get()).value_or(0);
}

std::size_t assumed_queue_capacity() {
  std::ifstream f("/proc/sys/net/unix/max_dgram_qlen");
  std::size_t qlen = 10;
  if (!(f >> qlen) || qlen > 1u << 20) qlen = 10;
  return qlen + 1;  // the kernel refuses once more than max_dgram_qlen wait
}

// How long the thread that opened `schedstat` (/proc/thread-self/schedstat)
// has waited for a CPU while runnable (its second field); nullopt: unreadable.
std::optional<DeliveryDuration> waited_for_cpu(const UniqueFd& schedstat) {
  if (!schedstat) return std::nullopt;
  char text[128];
  const ssize_t n = ::pread(schedstat.get(), text, sizeof text - 1, 0);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  unsigned long long running = 0, waiting = 0;
  if (std::sscanf(text, "%llu %llu", &running, &waiting) != 2) return std::nullopt;
  return std::chrono::nanoseconds(waiting);
}

bool has_exited(const UniqueFd& pidfd) {
  if (!pidfd) return false;
  pollfd p{pidfd.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

nlohmann::json counts_json(const DeliveryCounts& c) { return {{"messages", c.messages}, {"samples", c.samples}}; }
double ms(DeliveryDuration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

struct Deliverer::Target {
  Target(Id id_, pid_t pid_, const PlanOptions& plan_options, std::size_t capacity)
      : id(id_), pid(pid_), plan(plan_options), reads(capacity) {}
  Id id;
  pid_t pid;
  UniqueFd pidfd;  // readable once the process exited: its socket was purged, not read
  std::optional<AgentSocket> socket;
  bool registered = false, retired = false, act = false;
  std::uint64_t registrations_sent = 0, registrations_lost = 0;
  std::uint64_t messages_sent = 0, samples_sent = 0;
  std::uint64_t messages_lost = 0, samples_lost = 0;  // ebpf-profiler: EAGAIN
  std::uint64_t send_errors = 0, samples_unsendable = 0;  // ebpf-profiler: no socket, refused
  DeliveryPlan plan;
  AgentReads reads;
  std::deque<Offer> offers;  // chosen, not yet sent
  DeliveryTime offers_until{};
  DeliveryTime looked{};
  DeliveryTime next_action = DeliveryTime::max();
  std::map<std::pair<TraceId, SpanId>, std::map<StackTraceId, std::uint64_t>> sent;
  std::size_t stacks_listed = 0;
  std::uint64_t samples_not_listed = 0;  // sent, beyond the listing's bounds
};

Deliverer::Deliverer(Options options) : options_(std::move(options)) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (epoll_ && wake_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;  // ids start at 1
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  }
  thread_ = std::thread([this] { loop(); });
}

Deliverer::~Deliverer() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

void Deliverer::wake() {
  const std::uint64_t one = 1;
  if (wake_) (void)!::write(wake_.get(), &one, sizeof one);
}

std::uint64_t Deliverer::charge(std::size_t length) {
  auto [it, inserted] = charges_.try_emplace(length, 0);
  if (inserted) it->second = measure_charge(length);
  return it->second;
}

Deliverer::Id Deliverer::open(pid_t pid) {
  std::lock_guard lk(mu_);
  const Id id = next_id_++;
  auto t = std::make_unique<Target>(id, pid, options_.plan, assumed_queue_capacity());
  t->plan.ends_at(ends_at_);
  t->pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  targets_.emplace(id, std::move(t));
  return id;
}

Status Deliverer::connect(Id id, const std::string& path) {
  pid_t pid = 0;
  {
    std::lock_guard lk(mu_);
    auto it = targets_.find(id);
    if (it == targets_.end() || it->second->retired) return make_error("no such process to deliver to");
    pid = it->second->pid;
  }
  auto sock = AgentSocket::connect(pid, path);  // outside the lock: it asks the kernel about the target's sockets
  if (!sock) return sock.error();
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  if (it == targets_.end() || it->second->retired) return make_error("the process was retired while connecting");
  Target& t = *it->second;
  drop_socket(t, "");
  t.socket.emplace(std::move(*sock));
  epoll_event ev{};
  ev.events = EPOLLOUT | EPOLLET;  // each read by the agent frees room: an edge
  ev.data.u64 = id;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, t.socket->fd(), &ev);
  if (options_.personality == Personality::Spec && !options_.skip_registration) send_registration(t, DeliveryClock::now());
  t.act = true;
  wake();
  return Ok{};
}

void Deliverer::drop_socket(Target& t, const std::string& why) {
  if (!t.socket) return;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, t.socket->fd(), nullptr);
  t.reads.abandon();  // what it held unread will never be seen read
  t.socket.reset();
  t.registered = false;
  t.offers.clear();
  if (!why.empty() && options_.notice) options_.notice("pid " + std::to_string(t.pid) + ": " + why);
}

void Deliverer::disconnect(Id id) {
  std::lock_guard lk(mu_);
  if (auto it = targets_.find(id); it != targets_.end()) drop_socket(*it->second, "");
}

bool Deliverer::connected(Id id) const {
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  return it != targets_.end() && it->second->socket.has_value();
}

void Deliverer::register_again(Id id) {
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  if (it == targets_.end() || options_.personality != Personality::Spec || options_.skip_registration) return;
  Target& t = *it->second;
  if (t.socket && !t.registered && send_registration(t, DeliveryClock::now())) {
    t.act = true;
    wake();
  }
}

bool Deliverer::send_registration(Target& t, DeliveryTime now) {
  elastic_v1::Registration r;
  r.minor = static_cast<std::uint16_t>(elastic_v1::spec::kMsgRegistrationMinor);
  r.samples_delay_ms = options_.samples_delay_ms;
  r.host_id = options_.host_id;
  const auto bytes = elastic_v1::encode(r);
  switch (t.socket->send(bytes)) {
    case SendOutcome::Sent:
      t.registered = true;
      ++t.registrations_sent;
      t.reads.sent(0, DeliveryTime::max(), DeliveryTime::max(), charge(bytes.size()), now);
      return true;
    case SendOutcome::WouldBlock:
      ++t.registrations_lost;  // retried at the next rescan
      return false;
    case SendOutcome::Refused:
      ++t.send_errors;
      drop_socket(t, std::string("registration refused: ") + std::strerror(t.socket->last_errno()));
      return false;
  }
  return false;
}

void Deliverer::add(Id id, const CorrelationKey& key, pid_t tid, DeliveryTime when) {
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  if (it == targets_.end() || it->second->retired) return;
  Target& t = *it->second;
  if (options_.personality == Personality::EbpfProfiler) {
    if (!t.socket) {
      ++t.send_errors;
      ++t.samples_unsendable;
      return;
    }
    (void)send_one(t, Offer{key, 1, when + milliseconds(options_.samples_delay_ms)}, DeliveryClock::now());
    return;
  }
  if (t.plan.add(key, tid, when)) {  // a transaction settled: its keys may go now
    t.act = true;
    t.offers.clear();
    wake();
    return;
  }
  const DeliveryTime settles = when + options_.plan.settle;
  if (settles < t.next_action) {
    t.next_action = settles;
    wake();  // the thread may be asleep past it
  }
}

void Deliverer::left(Id id, pid_t tid, DeliveryTime when) {
  if (options_.personality != Personality::Spec) return;
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  if (it == targets_.end() || it->second->retired || !it->second->plan.left(tid, when)) return;
  it->second->act = true;
  it->second->offers.clear();
  wake();
}

// Sends one correlation now. Spec: the plan's current count for the key (it
// may have grown since it was offered). Returns false when the queue is full
// or the socket went away.
bool Deliverer::send_one(Target& t, const Offer& offered, DeliveryTime now) {
  const bool spec = options_.personality == Personality::Spec;
  std::optional<Offer> current = spec ? t.plan.current(offered.key) : std::optional<Offer>(offered);
  if (!current) return true;  // sent or dropped meanwhile
  if (spec && !readable_in_time(*current, t.reads, now)) return true;  // left to expire: it would be read late
  const Offer& o = *current;
  elastic_v1::Correlation m;
  m.trace_id = o.key.trace_id;
  m.transaction_id = o.key.transaction_id;
  m.stack_trace_id = o.key.stack_trace_id;
  // wrong-counts (MSG-08, a reader defect): the message says one sample more than it covers.
  m.count = options_.count_one_more && o.count < 65535 ? static_cast<std::uint16_t>(o.count + 1) : o.count;
  const auto bytes = elastic_v1::encode(m);
  switch (t.socket->send(bytes)) {
    case SendOutcome::Sent:
      if (spec) t.plan.sent(o);
      t.reads.sent(o.count, o.due, o.late_after, charge(bytes.size()), now);
      ++t.messages_sent;
      t.samples_sent += o.count;
      list_sent(t, o);
      return true;
    case SendOutcome::WouldBlock:
      if (spec) {
        look(t, now, /*again=*/true);  // what it holds now, not what the last look saw
        t.reads.refused();
      } else {
        ++t.messages_lost;  // the OTel eBPF profiler drops it
        t.samples_lost += o.count;
      }
      return false;
    case SendOutcome::Refused:
      ++t.send_errors;
      if (spec)
        t.plan.unsendable(o);
      else
        t.samples_unsendable += o.count;
      drop_socket(t, std::string("send refused: ") + std::strerror(t.socket->last_errno()));
      return false;
  }
  return false;
}

// What was sent per (transaction, stack), for the summary: bounded; beyond, counted.
void Deliverer::list_sent(Target& t, const Offer& o) {
  auto listed = t.sent.find({o.key.trace_id, o.key.transaction_id});
  if (listed == t.sent.end() && t.sent.size() < kMaxTransactionsListed && t.stacks_listed < kMaxStacksListed)
    listed = t.sent.try_emplace({o.key.trace_id, o.key.transaction_id}).first;
  if (listed == t.sent.end()) {
    t.samples_not_listed += o.count;
    return;
  }
  auto [stack, added] = listed->second.try_emplace(o.key.stack_trace_id, 0);
  if (added && ++t.stacks_listed > kMaxStacksListed) {
    listed->second.erase(stack);
    --t.stacks_listed;
    t.samples_not_listed += o.count;
    return;
  }
  stack->second += o.count;
}

void Deliverer::look(Target& t, DeliveryTime now, bool again) {
  if (!t.socket || (t.looked == now && !again)) return;
  t.looked = now;
  auto bytes = unread_bytes(t.socket->fd());
  if (!bytes) return;
  const bool purged = *bytes == 0 && t.reads.in_flight() > 0 && has_exited(t.pidfd);
  t.reads.observe(*bytes, now, purged);
}

// One process's moment: what its agent read, what expired, what to send.
void Deliverer::turn(Target& t, DeliveryTime now) {
  t.act = false;
  look(t, now);
  if (options_.personality != Personality::Spec) {
    t.next_action = DeliveryTime::max();
    return;
  }
  const std::size_t before = t.plan.pending_keys();
  t.plan.expire(now, t.socket.has_value());
  if (t.plan.pending_keys() != before) t.offers.clear();
  if (t.socket && (t.registered || options_.skip_registration || send_registration(t, now))) {
    if (t.offers.empty() || now >= t.offers_until || finishing_) {
      auto chosen = t.plan.choose(now, t.reads, kOffersPerTurn, finishing_);
      t.offers.assign(chosen.begin(), chosen.end());
      t.offers_until = now + kOffersFresh;
    }
    while (t.socket && !t.offers.empty() && send_one(t, t.offers.front(), now)) t.offers.pop_front();
  }
  t.next_action = t.plan.next_action(now, t.reads);
  if (!t.offers.empty() && t.reads.room() > 0) t.next_action = std::min(t.next_action, t.offers_until);
}

void Deliverer::loop() {
  // An agent that reads until its queue is empty reads on only while this
  // thread refills it faster than it reads: on a loaded machine the thread
  // must get a CPU at once when woken. It sleeps in epoll otherwise, so a
  // higher priority costs others nearly nothing (root only; not an error without it).
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kThreadNice);
  const UniqueFd schedstat(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC));
  std::optional<DeliveryDuration> waited_at_sleep;
  // What the last wake and its turns waited for a CPU (asleep in epoll_wait, the thread waits for none).
  auto count_cpu_wait = [&] {
    if (const auto waited = waited_for_cpu(schedstat)) {
      if (waited_at_sleep) note_cpu_wait(*waited - *waited_at_sleep);
      waited_at_sleep = waited;
    }
  };
  std::array<epoll_event, 64> events;
  std::unique_lock lk(mu_);
  while (!stopping_) {
    DeliveryTime wake_at = DeliveryClock::now() + kLongestSleep;
    for (const auto& [id, t] : targets_) {
      if (t->retired) continue;
      wake_at = std::min(wake_at, t->act ? DeliveryTime{} : t->next_action);
      if (auto check = t->reads.next_check()) wake_at = std::min(wake_at, *check);
    }
    const auto wait = wake_at - DeliveryClock::now();
    const int timeout_ms = wait <= DeliveryDuration::zero()
                               ? 0
                               : static_cast<int>(std::chrono::ceil<milliseconds>(wait).count());
    count_cpu_wait();
    lk.unlock();
    const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), timeout_ms);
    lk.lock();
    const DeliveryTime now = DeliveryClock::now();
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == 0) {
        std::uint64_t count;
        (void)!::read(wake_.get(), &count, sizeof count);
        continue;
      }
      auto it = targets_.find(events[i].data.u64);
      if (it != targets_.end() && !it->second->retired) it->second->act = true;  // its agent read
    }
    for (auto& [id, t] : targets_) {
      if (t->retired) continue;
      const auto check = t->reads.next_check();
      if (t->act || now >= t->next_action || (check && now >= *check)) turn(*t, now);
    }
    if (finishing_) settled_.notify_all();
  }
  count_cpu_wait();
}

void Deliverer::note_cpu_wait(DeliveryDuration waited) {
  cpu_wait_.total += waited;
  cpu_wait_.longest = std::max(cpu_wait_.longest, waited);
  ++cpu_wait_.wakes;
}

Deliverer::CpuWait Deliverer::cpu_wait() const {
  std::lock_guard lk(mu_);
  return cpu_wait_;
}

void Deliverer::retire(Id id) {
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  if (it == targets_.end() || it->second->retired) return;
  Target& t = *it->second;
  t.plan.abandon();
  drop_socket(t, "");
  t.retired = true;
  t.pidfd.reset();
}

void Deliverer::ends_at(DeliveryTime horizon) {
  std::lock_guard lk(mu_);
  ends_at_ = horizon;
  for (auto& [id, t] : targets_) t->plan.ends_at(horizon);
}

void Deliverer::finish(DeliveryDuration patience) {
  std::unique_lock lk(mu_);
  finishing_ = true;
  ends_at_ = std::min(ends_at_, DeliveryClock::now() + patience);
  for (auto& [id, t] : targets_) {
    t->plan.ends_at(ends_at_);
    t->act = true;
  }
  wake();
  auto done = [&] {
    for (const auto& [id, t] : targets_)
      if (!t->retired && t->socket && (t->plan.pending_keys() > 0 || t->reads.in_flight() > 0)) return false;
    return true;
  };
  settled_.wait_until(lk, DeliveryClock::now() + patience, done);
  stopping_ = true;
  finished_at_ = DeliveryClock::now();
  lk.unlock();
  wake();
  if (thread_.joinable()) thread_.join();
  lk.lock();
  for (auto& [id, t] : targets_) {
    t->plan.abandon();  // never sent: the run ended (unsendable)
    t->reads.abandon();  // sent, never seen read: unconfirmed
  }
}

Deliverer::Figures Deliverer::figures(Id id) const {
  std::lock_guard lk(mu_);
  Figures f;
  auto it = targets_.find(id);
  if (it == targets_.end()) return f;
  const Target& t = *it->second;
  f.connected = t.socket.has_value();
  f.registered = t.registered;
  f.registrations_sent = t.registrations_sent;
  f.registrations_lost = t.registrations_lost;
  f.messages_sent = t.messages_sent;
  f.samples_sent = t.samples_sent;
  f.send_errors = t.send_errors;
  const auto& o = t.reads.outcomes();
  f.samples_late = o.late.samples;
  f.samples_unconfirmed = o.unconfirmed.samples;
  if (options_.personality == Personality::Spec) {
    const PlanStats& s = t.plan.stats();
    f.messages_lost = s.expired.messages + s.queue_full.messages;
    f.samples_lost = s.expired.samples + s.queue_full.samples;
    f.samples_unsendable = s.unsendable.samples;
    f.samples_pending = t.plan.pending_samples();
  } else {
    f.messages_lost = t.messages_lost;
    f.samples_lost = t.samples_lost;
    f.samples_unsendable = t.samples_unsendable;
  }
  return f;
}

nlohmann::json Deliverer::delivery_json(Id id) const {
  using nlohmann::json;
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  if (it == targets_.end()) return json::object();
  const Target& t = *it->second;
  const auto& o = t.reads.outcomes();
  json j = {{"delivered", {{"messages", t.messages_sent}, {"samples", t.samples_sent}}},
            {"samples_sent_not_listed", t.samples_not_listed},
            {"read_in_time", counts_json(o.in_time)},
            {"late", counts_json(o.late)},
            {"unconfirmed", counts_json(o.unconfirmed)},
            {"read_in_time_means", "read by the agent before its transaction's last sample + samples-delay-ms "
                                   "(by the sample's own time): before the agent may export the transaction"},
            {"late_means", "still unread by the agent samples-delay-ms after every thread seen in its transaction "
                           "was sampled elsewhere: the agent has exported the transaction and answers it as an "
                           "unknown transaction"},
            {"unconfirmed_means", "read between those two moments (in time only if the transaction ran on after its "
                                  "last sample; a transaction whose threads were not seen leaving has no second "
                                  "moment), or never seen read (the run ended or the process exited first)"}};
  const auto period = t.reads.read_period();
  j["agent_reads"] = {{"reads", t.reads.reads()},
                      {"read_period_ms", period ? json(ms(*period)) : json(nullptr)},
                      {"longest_wait_ms", t.reads.reads_seen() ? json(ms(t.reads.read_wait())) : json(nullptr)},
                      {"datagrams_per_read", t.reads.capacity()},
                      {"most_read_at_once", t.reads.most_read_at_once()}};
  if (options_.personality != Personality::Spec) {
    j["dropped"] = {{"eagain", {{"messages", t.messages_lost}, {"samples", t.samples_lost}}}};
    j["dropped_causes"] = {{"eagain", "the ebpf-profiler personality sends one message per sample and drops it when "
                                      "the agent's queue is full (EAGAIN), as the OTel eBPF profiler does: these "
                                      "losses are that profiler's"}};
    return j;
  }
  const PlanStats& s = t.plan.stats();
  j["pending"] = {{"samples", t.plan.pending_samples()}, {"keys", t.plan.pending_keys()}};
  j["dropped"] = {{"expired", counts_json(s.expired)},
                  {"queue_full", counts_json(s.queue_full)},
                  {"unsendable", counts_json(s.unsendable)}};
  j["dropped_causes"] = {
      {"expired", "could no longer be read by the agent before its transaction's last sample + samples-delay-ms"},
      {"queue_full", "more (trace, transaction, stack) keys waited than the plan holds (the lightest went)"},
      {"unsendable", "no socket, the send was refused, the process exited, or the run ended first"}};
  const DeliveryTime end = finished_at_ == DeliveryTime{} ? DeliveryClock::now() : finished_at_;
  const CapacityBound b = t.plan.bound(t.reads, end);
  json bound = {{"samples", b.samples},
                {"correlated", b.correlated},
                {"read_in_time_share", b.samples ? json(double(o.in_time.samples) / double(b.samples)) : json(nullptr)},
                {"keys", b.keys},
                {"history_overflow", b.history_overflow}};
  if (b.read_period > DeliveryDuration::zero()) {
    bound["read_period_ms"] = ms(b.read_period);
    bound["datagrams_per_read"] = b.datagrams_per_read;
    bound["means"] = "an upper bound on the samples any sender could have had read in time had the agent read only "
                     "what its queue holds (datagrams_per_read) at the reads it made (about one every "
                     "read_period_ms): one datagram per (trace, transaction, stack), read between its first sample "
                     "and its due, carrying its whole count (so no sender reaches it: a key's count is complete only "
                     "after its last sample). An agent that reads until its queue is empty takes more while "
                     "tracecorr refills it, so read_in_time may exceed it";
  } else {
    bound["means"] = "the agent read each datagram as it came (no read found one waiting a whole period): its queue "
                     "limited nothing, every correlated sample could be read in time";
  }
  j["capacity_bound"] = std::move(bound);
  return j;
}

std::map<std::pair<TraceId, SpanId>, std::map<StackTraceId, std::uint64_t>> Deliverer::sent(Id id) const {
  std::lock_guard lk(mu_);
  auto it = targets_.find(id);
  return it == targets_.end() ? decltype(Target::sent){} : it->second->sent;
}

}  // namespace tracecorr::elastic_v1::agent
