// Elastic v1's share of a session (a conform::SessionPart): it watches the
// process storage from the moment discovery found the library (PROC-01..04),
// connects to the socket the storage names and sends what the scenarios ask
// (registrations, correlations, malformed datagrams), never blocking and
// pacing itself so the agent's queue (max_dgram_qlen) is not overrun.
#pragma once

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/watch/take_up_clock.hpp"
#include "tracecorr/socket.hpp"

namespace tracecorr::elastic_v1 {

// How long register_profiler() waits to see a judged registration taken up
// (and, before sending it, for the agent to read what is queued ahead of it).
inline constexpr std::chrono::milliseconds kTakeUpPatience{1000};

class Channel final : public conform::SessionPart {
 public:
  // storage_wait: how long opening waits for the process storage (short
  // where the settings say the agent publishes none).
  // socket_dir_parent: where the session's socket directory is made (--socket-dir).
  Channel(Millis storage_wait, std::string socket_dir_parent)
      : storage_wait_(storage_wait), socket_dir_parent_(std::move(socket_dir_parent)) {}
  ~Channel() override;

  void prepare_launch(conform::LaunchSpec& launch) override;
  void library_found(conform::Session& session) override;
  void opened(conform::Session& session, conform::DiscoveryWait& wait) override;
  void stop_watching() override;
  void closed() override;
  std::shared_ptr<const conform::ProtocolEvidence> evidence() const override;

  std::string socket_dir() const { return socket_dir_; }
  std::vector<StorageSighting> storage_sightings() const;
  std::optional<ProcessStorage> storage() const;  // last decoded
  // Waits until the storage is published and decodes (or the timeout passes).
  bool wait_for_storage(Millis timeout);

  // The agent's socket. Sends are non-blocking; on EAGAIN the channel retries
  // for a bounded time and counts what it could not send.
  const std::optional<SocketFacts>& socket_facts() const { return socket_facts_; }
  const std::optional<Error>& socket_error() const { return socket_error_; }
  bool can_send() const { return socket_.has_value(); }
  const SentMessage& send(std::vector<std::uint8_t> datagram, std::string requirement, std::string label);
  // Records the transaction and stack id `m` carries with the count the
  // attribute must show. `bytes`: what to send instead of m's encoding (a
  // truncated or retyped message that still carries m's ids).
  const SentMessage& send_correlation(const Correlation& m, std::string requirement, std::string label,
                                      std::optional<unsigned> expected_count,
                                      std::optional<std::vector<std::uint8_t>> bytes = std::nullopt);
  // Waits until the agent has read every datagram tracecorr queued on its
  // socket (SIOCOUTQ on the sending socket reaches 0); when, or nullopt if
  // the patience ran out first (or there is no socket).
  std::optional<std::chrono::system_clock::time_point> wait_until_read(Millis patience);
  void register_profiler(Registration m, std::string requirement, bool judged = true);
  std::vector<SentMessage> sent_messages() const;
  std::vector<SentRegistration> registrations() const;
  std::uint64_t messages_lost() const { return messages_lost_; }
  // A profiler restart: drop the connection and connect anew.
  void reconnect_socket();
  // Measures SocketCapacity over `window` (at most `max_sends` datagrams) and keeps it.
  Expected<SocketCapacity> measure_socket_capacity(Millis window, std::uint64_t max_sends);
  std::optional<SocketCapacity> socket_capacity() const;

 private:
  bool sight_storage();  // whether it saw something new
  void watch_storage();
  // The socket directory made in `pid`'s root too when that root is not
  // tracecorr's (a container's): at the process's exec, or as soon as seen.
  void make_socket_dir_in_root_of(pid_t pid, const std::string& when);
  void remove_socket_dirs_in_roots();
  std::optional<std::string> complaint_about_socket_dir() const;
  void connect_socket();
  SentMessage transmit(std::vector<std::uint8_t> datagram, std::string requirement, std::string label,
                       Millis patience);
  const SentMessage& store(SentMessage m);

  Millis storage_wait_;
  std::string socket_dir_parent_;
  conform::Session* session_ = nullptr;  // set by library_found; the session owns this part
  std::uint64_t pointer_address_ = 0;    // &process storage pointer in the judged process
  std::string socket_dir_;
  bool socket_dir_removed_ = false;
  struct RootDir {
    dev_t dev = 0;
    ino_t ino = 0;
    UniqueFd parent;  // the socket directory's parent, resolved in that root
    bool made = false;
  };
  mutable std::mutex roots_mutex_;  // on_exec runs on the slot watch's thread
  std::vector<RootDir> roots_;
  std::vector<std::string> socket_dir_roots_;
  std::optional<std::string> socket_dir_unusable_;
  std::optional<std::string> socket_dir_complaint_;
  std::optional<AgentSocket> socket_;
  watch::TakeUpClock take_up_;
  bool pacing_abandoned_ = false;  // see kPaceEvery (channel.cpp)
  std::optional<Error> socket_error_;
  std::optional<SocketFacts> socket_facts_;

  mutable std::mutex mutex_;
  std::vector<StorageSighting> storage_sightings_;
  std::deque<SentMessage> sent_;  // deque: send() hands out references that must stay valid
  std::vector<SentRegistration> registrations_;
  std::atomic<std::uint64_t> messages_lost_{0};
  std::optional<SocketCapacity> socket_capacity_;
  std::atomic<bool> storage_watch_running_{false};
  std::thread storage_thread_;
};

// The session's channel (every Elastic session has one).
Channel& channel(conform::Session& session);
const Channel& channel(const conform::Session& session);

}  // namespace tracecorr::elastic_v1
