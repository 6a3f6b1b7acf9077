#include "grpc_connections.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

namespace tracecorr::profiles::detail {
namespace {

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return "an address of family " + std::to_string(address.ss_family);
}

std::string errno_text(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

// A bound, listening, non-blocking socket on a numeric address: SO_REUSEADDR
// only (never SO_REUSEPORT, which would let a second receiver share the port
// and its exports), a deep accept queue (a burst of attacker connections must
// not make the profiler's SYN wait for a retry).
Expected<UniqueFd> bound_listener(const GrpcReceiverOptions& o, std::uint16_t& port) {
  const std::string where = "OTLP profiles gRPC receiver on " + o.host + ":" + std::to_string(o.port);
  sockaddr_storage address{};
  socklen_t size = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, o.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(o.port);
    size = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, o.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(o.port);
    size = sizeof(sockaddr_in6);
  } else {
    return make_error("not a numeric IPv4 or IPv6 address", where);
  }
  UniqueFd listener(::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener) return make_error(errno_text("socket"), where);
  int yes = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), size) != 0)
    return make_error("cannot bind (" + std::string(std::strerror(errno)) + ")", where);
  if (::listen(listener.get(), SOMAXCONN) != 0) return make_error(errno_text("listen"), where);
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &size) != 0)
    return make_error(errno_text("getsockname"), where);
  port = ntohs(address.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
  return listener;
}

}  // namespace

Expected<std::unique_ptr<GrpcConnections>> GrpcConnections::listen(const GrpcReceiverOptions& options) {
  std::uint16_t port = 0;
  auto listener = bound_listener(options, port);
  if (!listener) return listener.error();
  std::unique_ptr<GrpcConnections> connections(new GrpcConnections(options, std::move(*listener), port));
  if (!connections->wake_) return make_error(errno_text("eventfd"), "OTLP profiles gRPC receiver");
  return connections;
}

GrpcConnections::GrpcConnections(const GrpcReceiverOptions& options, UniqueFd listener, std::uint16_t port)
    : options_(options), listener_(std::move(listener)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), port_(port) {}

GrpcConnections::~GrpcConnections() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  std::uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) {}  // the loop also looks at stopping_ every tick
  if (thread_.joinable()) thread_.join();
}

void GrpcConnections::run(HandOver hand_over) {
  thread_ = std::thread([this, hand_over = std::move(hand_over)] { loop(hand_over); });
}

void GrpcConnections::loop(const HandOver& hand_over) {
  const auto tick = std::clamp<std::chrono::milliseconds>(options_.limits.transport.max_request_time / 4,
                                                          std::chrono::milliseconds(10), std::chrono::milliseconds(250));
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> generations;
  for (;;) {
    fds.assign({{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}});
    generations.clear();
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      for (const auto& [generation, open] : open_) {
        fds.push_back({open.watch.get(), POLLRDHUP, 0});
        generations.push_back(generation);
      }
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(tick.count())) < 0 && errno != EINTR) return;
    // Closed connections first: gRPC may have closed a descriptor the next
    // accept reuses.
    std::vector<std::uint64_t> closed;
    for (std::size_t i = 2; i < fds.size(); ++i)
      if (fds[i].revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) closed.push_back(generations[i - 2]);
    forget_closed(closed);
    if (fds[1].revents & POLLIN)  // a burst is taken at once, a bounded number per turn
      for (int i = 0; i < 64 && accept_one(hand_over); ++i) {}
    cut_old();
  }
}

bool GrpcConnections::accept_one(const HandOver& hand_over) {
  sockaddr_storage peer{}, local{};
  socklen_t peer_size = sizeof peer, local_size = sizeof local;
  UniqueFd fd(::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&peer), &peer_size, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!fd) return false;  // nothing more to accept (EAGAIN)
  ConnectionInfo info{address_text(peer), false, {}};
  if (options_.check_connection) {
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_size);
    ConnectionVerdict verdict = options_.check_connection(local, peer);  // before the lock: it may read /proc
    info.foreign = !verdict.of_target;
    info.who = std::move(verdict.who);
  }
  UniqueFd watch(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
  {
    std::lock_guard lock(mutex_);
    counters_.foreign += info.foreign;
    const bool over = open_.size() >= options_.limits.transport.max_connections ||
                      (info.foreign && foreign_open_ >= options_.max_foreign_connections) || !watch;
    if (over) {
      ++counters_.closed_at_accept;
      return true;  // both descriptors close: the peer sees the connection end
    }
    const std::uint64_t generation = next_generation_++;
    foreign_open_ += info.foreign;
    by_fd_[fd.get()] = generation;
    open_.emplace(generation, Open{std::move(watch), std::chrono::steady_clock::now(), generation, fd.get(), info});
    ++counters_.accepted;
    counters_.open = open_.size();
  }
  hand_over(fd.release());
  return true;
}

void GrpcConnections::forget_closed(const std::vector<std::uint64_t>& closed) {
  std::lock_guard lock(mutex_);
  for (std::uint64_t generation : closed) {
    auto it = open_.find(generation);
    if (it == open_.end()) continue;
    if (auto named = by_fd_.find(it->second.fd); named != by_fd_.end() && named->second == generation)
      by_fd_.erase(named);
    foreign_open_ -= it->second.info.foreign;
    open_.erase(it);
  }
  counters_.open = open_.size();
}

// gRPC sends a connection away at max_connection_age and closes it
// max_request_time later; one still open a second after that is cut here,
// whatever it is doing (a client that never spoke HTTP/2 included).
void GrpcConnections::cut_old() {
  const auto limit = options_.limits.max_connection_age + options_.limits.transport.max_request_time +
                     std::chrono::seconds(1);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  for (auto& [generation, open] : open_) {
    if (open.cut || now - open.since < limit) continue;
    ::shutdown(open.watch.get(), SHUT_RDWR);  // gRPC sees the end and lets the connection go
    open.cut = true;
    ++counters_.cut;
  }
}

std::optional<ConnectionInfo> GrpcConnections::find(const std::string& grpc_peer) const {
  // gRPC names a connection handed over by descriptor "fd:N".
  if (grpc_peer.rfind("fd:", 0) != 0) return std::nullopt;
  int fd = -1;
  const char* end = grpc_peer.data() + grpc_peer.size();
  if (auto [at, error] = std::from_chars(grpc_peer.data() + 3, end, fd); error != std::errc() || at != end)
    return std::nullopt;
  std::lock_guard lock(mutex_);
  auto named = by_fd_.find(fd);
  if (named == by_fd_.end()) return std::nullopt;
  return open_.at(named->second).info;
}

GrpcConnectionCounters GrpcConnections::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace tracecorr::profiles::detail
