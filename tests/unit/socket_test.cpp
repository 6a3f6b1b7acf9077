#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>

#include "forked_child.hpp"
#include "tracecorr/fd.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/tcp_peer.hpp"

namespace tracecorr {
namespace {

class SocketDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tracecorr-sock-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& f : files_) ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string bind_socket(const char* name, int type, int flags, UniqueFd& fd) {
    std::string path = dir_ + "/" + name;
    fd.reset(::socket(AF_UNIX, type | flags | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(SocketDir, ExaminesANonBlockingDatagramSocketThisProcessHolds) {
  UniqueFd agent;
  auto path = bind_socket("agent.sock", SOCK_DGRAM, SOCK_NONBLOCK, agent);
  auto f = examine_socket(::getpid(), path);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->is_socket);
  EXPECT_TRUE(f->datagram);
  EXPECT_TRUE(f->bound_by_target);
  EXPECT_EQ(f->target_fd, agent.get());
  EXPECT_TRUE(f->target_nonblocking);
  EXPECT_EQ(f->owner, ::geteuid());
}

TEST_F(SocketDir, SeesABlockingStreamSocketForWhatItIs) {
  UniqueFd agent;
  auto path = bind_socket("stream.sock", SOCK_STREAM, 0, agent);
  auto f = examine_socket(::getpid(), path);
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->is_socket);
  EXPECT_FALSE(f->datagram);
  EXPECT_EQ(f->socket_type, static_cast<unsigned>(SOCK_STREAM));
  EXPECT_FALSE(f->target_nonblocking);
}

TEST_F(SocketDir, RegularFileIsNotASocketAndConnectRefusesIt) {
  std::string path = dir_ + "/plain";
  UniqueFd(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  files_.push_back(path);
  auto f = examine_socket(::getpid(), path);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->is_socket);
  auto s = AgentSocket::connect(::getpid(), path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kNotASocket);
}

TEST_F(SocketDir, MissingPathIsNotFound) {
  auto f = examine_socket(::getpid(), dir_ + "/nothing-here");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().kind, ErrorKind::kNotFound);
  EXPECT_NE(f.error().message().find("nothing-here"), std::string::npos);
}

TEST_F(SocketDir, SendsWithoutBlockingAndReportsAFullQueue) {
  UniqueFd agent;
  auto path = bind_socket("agent.sock", SOCK_DGRAM, SOCK_NONBLOCK, agent);
  auto s = AgentSocket::connect(::getpid(), path);
  ASSERT_TRUE(s.ok()) << s.error().message();
  const std::uint8_t hello[] = {2, 0, 2, 0, 1, 2, 3};
  ASSERT_EQ(s->send(hello), SendOutcome::Sent);
  std::uint8_t buf[64];
  ASSERT_EQ(::recv(agent.get(), buf, sizeof buf, 0), static_cast<ssize_t>(sizeof hello));
  EXPECT_EQ(std::memcmp(buf, hello, sizeof hello), 0);
  // Nobody reads: the queue fills and the sender is told, not blocked.
  SendOutcome last = SendOutcome::Sent;
  for (int i = 0; i < 100000 && last == SendOutcome::Sent; ++i) last = s->send(hello);
  EXPECT_EQ(last, SendOutcome::WouldBlock);
  EXPECT_EQ(s->last_errno(), EAGAIN);
}

TEST_F(SocketDir, PeerGoneIsRefused) {
  std::string path;
  std::optional<AgentSocket> s;
  {
    UniqueFd agent;
    path = bind_socket("agent.sock", SOCK_DGRAM, SOCK_NONBLOCK, agent);
    auto c = AgentSocket::connect(::getpid(), path);
    ASSERT_TRUE(c.ok());
    s.emplace(std::move(*c));
  }
  const std::uint8_t byte[] = {0};
  EXPECT_EQ(s->send(byte), SendOutcome::Refused);
}

// Issue 16: a target naming another process's socket (one it does not hold)
// must get nothing sent there, and the facts say why.
TEST_F(SocketDir, SocketTheTargetDoesNotHoldIsRefusedBeforeAnythingIsSent) {
  std::string path = dir_ + "/service.sock";
  files_.push_back(path);
  test::ForkedChild service([&path](test::ForkedChild::Pipes pipes) {
    int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ::_exit(2);
    (void)!::write(pipes.report, "r", 1);
    char c;
    (void)!::read(pipes.release, &c, 1);
    char buf[64];
    ::_exit(::recv(fd, buf, sizeof buf, MSG_DONTWAIT) >= 0 ? 1 : 0);  // 1: something arrived
  });
  char c;
  ASSERT_TRUE(service.read(&c, 1));
  auto f = examine_socket(::getpid(), path);  // we are the "target": we hold no fd on it
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_TRUE(f->is_socket);
  EXPECT_FALSE(f->bound_by_target);
  auto s = AgentSocket::connect(::getpid(), path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kNotHeld);
  EXPECT_NE(s.error().message().find("holds no descriptor"), std::string::npos) << s.error().message();
  // The service itself holds it, so from its side the same path is its socket.
  auto theirs = examine_socket(service.pid(), path);
  ASSERT_TRUE(theirs.ok()) << theirs.error().message();
  EXPECT_TRUE(theirs->bound_by_target);
  EXPECT_TRUE(theirs->datagram);
  service.release();
  int status = service.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the service received a datagram";
}

// The same socket under other spellings and bound by a relative name is found by inode.
TEST_F(SocketDir, EquivalentSpellingsAndRelativeBindAreTheSameSocket) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  UniqueFd agent(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, "rel.sock");
  ASSERT_EQ(::bind(agent.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::chdir(cwd), 0);
  files_.push_back(dir_ + "/rel.sock");
  std::string base = dir_.substr(dir_.rfind('/') + 1);
  for (std::string spelling : {dir_ + "/rel.sock", dir_ + "/../" + base + "/rel.sock", "/" + dir_ + "//rel.sock"}) {
    auto f = examine_socket(::getpid(), spelling);
    ASSERT_TRUE(f.ok()) << spelling << ": " << f.error().message();
    EXPECT_TRUE(f->bound_by_target) << spelling;
    EXPECT_TRUE(f->datagram) << spelling;
    EXPECT_EQ(f->target_fd, agent.get()) << spelling;
    EXPECT_TRUE(AgentSocket::connect(::getpid(), spelling).ok()) << spelling;
  }
}

TEST(OpenInTargetRoot, RefusesEmptyAndNulPathsAndGoneProcesses) {
  EXPECT_FALSE(open_in_target_root(::getpid(), "").ok());
  EXPECT_FALSE(open_in_target_root(::getpid(), std::string("/tmp\0x", 6)).ok());
  auto gone = open_in_target_root(0x3ffffff0, "/tmp");
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message().find("gone"), std::string::npos);
  // Magic links are not followed.
  auto magic = open_in_target_root(::getpid(), "/proc/self/root/tmp");
  EXPECT_FALSE(magic.ok());
  EXPECT_TRUE(open_in_target_root(::getpid(), "/tmp/../tmp").ok());
}

// ---- the other end of a loopback TCP connection (tcp_peer.hpp) ----

struct Loopback {
  UniqueFd listener, accepted;
  std::uint16_t port = 0;
  Loopback() {
    listener.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener.get(), 8), 0);
    socklen_t size = sizeof a;
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &size);
    port = ntohs(a.sin_port);
  }
  // The accepted side's two addresses.
  std::pair<sockaddr_storage, sockaddr_storage> accept_one() {
    accepted.reset(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    sockaddr_storage local{}, peer{};
    socklen_t l = sizeof local, p = sizeof peer;
    ::getsockname(accepted.get(), reinterpret_cast<sockaddr*>(&local), &l);
    ::getpeername(accepted.get(), reinterpret_cast<sockaddr*>(&peer), &p);
    return {local, peer};
  }
};

int connect_loopback(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? fd : -1;
}

TEST(TcpPeer, TheClientSocketAndItsProcessAreFound) {
  Loopback server;
  // The client is another process: it connects, reports, and waits.
  test::ForkedChild client([&](test::ForkedChild::Pipes pipes) {
    int fd = connect_loopback(server.port);
    char c = fd >= 0 ? 1 : 0;
    (void)!::write(pipes.report, &c, 1);
    (void)!::read(pipes.release, &c, 1);
  });
  char ok = 0;
  ASSERT_TRUE(client.read(&ok, 1));
  ASSERT_EQ(ok, 1);
  auto [local, peer] = server.accept_one();
  auto diag = open_sock_diag();
  ASSERT_TRUE(diag.ok()) << diag.error().message();
  auto found = tcp_peer_socket(diag->get(), local, peer);
  ASSERT_TRUE(found.ok()) << found.error().message();
  const std::uint64_t* inode = &found->inode;
  ASSERT_NE(*inode, 0u);
  EXPECT_EQ(found->uid, ::getuid());
  // Held by the client, not by us (our accepted socket is another inode).
  EXPECT_EQ(holder_of_socket(*inode, {::getpid(), client.pid()}), std::optional<pid_t>(client.pid()));
  EXPECT_EQ(holder_of_socket(*inode, {::getpid()}), std::nullopt);
  // Looked for among every process of the host, within a bound of descriptors (work, not time).
  EXPECT_EQ(host_holder_of_socket(*inode, kMaxFdsLookedAt), std::optional<pid_t>(client.pid()));
  EXPECT_EQ(host_holder_of_socket(*inode, 0), std::nullopt);
  struct stat ours {};
  ASSERT_EQ(::fstat(server.accepted.get(), &ours), 0);
  EXPECT_NE(*inode, static_cast<std::uint64_t>(ours.st_ino));
  // Once the client has exited, its socket is held by nobody (or gone).
  client.release();
  char end_of_file;
  ASSERT_FALSE(client.read(&end_of_file, 1));  // its descriptors are closed by the time its pipe is
  auto after = tcp_peer_socket(diag->get(), local, peer);
  EXPECT_TRUE(!after.ok() || after->inode == 0 || !holder_of_socket(after->inode, {client.pid()}));
}

// Where sock_diag has no TCP handler (inet_diag not loaded), /proc/net/tcp names the same socket.
TEST(TcpPeer, TheProcListingNamesTheSameSocketAsSockDiag) {
  Loopback server;
  test::ForkedChild client([&](test::ForkedChild::Pipes pipes) {
    int fd = connect_loopback(server.port);
    char c = fd >= 0 ? 1 : 0;
    (void)!::write(pipes.report, &c, 1);
    (void)!::read(pipes.release, &c, 1);
  });
  char ok = 0;
  ASSERT_TRUE(client.read(&ok, 1));
  ASSERT_EQ(ok, 1);
  auto [local, peer] = server.accept_one();
  auto diag = open_sock_diag();
  ASSERT_TRUE(diag.ok()) << diag.error().message();
  auto by_diag = tcp_peer_socket(diag->get(), local, peer);
  ASSERT_TRUE(by_diag.ok()) << by_diag.error().message();
  for (pid_t namespace_of : {0, ::getpid()}) {
    auto listed = tcp_peer_socket_from_proc(namespace_of, local, peer);
    ASSERT_TRUE(listed.ok()) << listed.error().message();
    EXPECT_EQ(listed->inode, by_diag->inode);
    EXPECT_EQ(listed->uid, by_diag->uid);
    EXPECT_EQ(listed->state, by_diag->state);
    EXPECT_EQ(holder_of_socket(listed->inode, {::getpid(), client.pid()}), std::optional<pid_t>(client.pid()));
  }
  // Our own end is listed too, but it is not the peer: the lookup is by both addresses in order.
  auto reversed = tcp_peer_socket_from_proc(0, peer, local);
  ASSERT_TRUE(reversed.ok()) << reversed.error().message();
  struct stat ours {};
  ASSERT_EQ(::fstat(server.accepted.get(), &ours), 0);
  EXPECT_EQ(reversed->inode, static_cast<std::uint64_t>(ours.st_ino));
  EXPECT_NE(reversed->inode, by_diag->inode);
  // A peer that never existed: not found, not mistaken for another.
  sockaddr_storage nobody = peer;
  reinterpret_cast<sockaddr_in&>(nobody).sin_port = htons(1);
  auto none = tcp_peer_socket_from_proc(0, local, nobody);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().kind, ErrorKind::kNotFound);
  client.release();
}

TEST(TcpPeer, NetworkNamespaceOfOurselvesIsShared) {
  auto shared = shares_network_namespace(::getpid());
  ASSERT_TRUE(shared.ok());
  EXPECT_TRUE(*shared);
  EXPECT_EQ(network_namespace_name(::getpid()).rfind("net:[", 0), 0u);
  EXPECT_FALSE(shares_network_namespace(999999999).ok());
}

}  // namespace
}  // namespace tracecorr
