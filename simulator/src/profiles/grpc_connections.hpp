// The gRPC receiver's own accept loop: a loopback listening socket, every
// connection accepted here, counted, capped, asked who is at the other end,
// then handed to gRPC (grpc::AddInsecureChannelFromFd). A duplicate of each
// connection's descriptor is kept to see it close (gRPC shuts the socket down
// when it lets a connection go) and to cut one that outlived its age.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"
#include "tracecorr/profiles/grpc_receiver.hpp"

namespace tracecorr::profiles::detail {

// What the handler of a call learns of its connection.
struct ConnectionInfo {
  std::string peer;  // "127.0.0.1:41234"
  bool foreign = false;
  std::string who;   // the peer check's words, when foreign
};

class GrpcConnections {
 public:
  using HandOver = std::function<void(int fd)>;  // takes ownership of fd

  // Binds host:port and listens. Nothing is accepted before run().
  static Expected<std::unique_ptr<GrpcConnections>> listen(const GrpcReceiverOptions& options);
  ~GrpcConnections();  // stops the loop and joins it

  std::uint16_t port() const { return port_; }
  // Starts the accepting thread; every admitted connection goes to hand_over.
  void run(HandOver hand_over);
  // The connection a call arrived on, by gRPC's name for it ("fd:12").
  std::optional<ConnectionInfo> find(const std::string& grpc_peer) const;
  GrpcConnectionCounters counters() const;

 private:
  struct Open {
    UniqueFd watch;  // a duplicate of the connection's descriptor
    std::chrono::steady_clock::time_point since;
    std::uint64_t generation = 0;
    int fd = -1;     // the descriptor gRPC owns (its name "fd:N")
    ConnectionInfo info;
    bool cut = false;
  };

  GrpcConnections(const GrpcReceiverOptions& options, UniqueFd listener, std::uint16_t port);
  void loop(const HandOver& hand_over);
  bool accept_one(const HandOver& hand_over);  // false: none was waiting
  void forget_closed(const std::vector<std::uint64_t>& closed);
  void cut_old();

  GrpcReceiverOptions options_;
  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: the destructor's stop
  std::uint16_t port_ = 0;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, Open> open_;       // by generation
  std::map<int, std::uint64_t> by_fd_;       // gRPC's descriptor -> generation
  std::uint64_t next_generation_ = 1;
  std::size_t foreign_open_ = 0;
  GrpcConnectionCounters counters_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tracecorr::profiles::detail
