// A small gdb remote serial protocol client, enough to read one register of
// each thread of a qemu-user guest: packets "$body#cs" with acks, the target
// description (qXfer:features:read, following xi:include), the thread list,
// Hg + p, and stopping / continuing the guest.
//
// The stub is hostile input like everything else: packet sizes, document
// sizes, include depth and thread counts are bounded.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "tracecorr/fd.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr {
namespace {

constexpr std::size_t kMaxPacket = 1u << 20;       // larger replies are refused
constexpr std::size_t kMaxDocument = 4u << 20;     // one target-description file
constexpr int kMaxIncludeDepth = 4;
constexpr std::size_t kMaxDocuments = 32;
constexpr std::size_t kMaxThreads = 1u << 16;
constexpr int kIoTimeoutMs = 30000;                // a stub that stops answering
// gdb's signal numbering (not the host's).
constexpr int kGdbSignalInt = 2;      // what ^C stops report
constexpr int kGdbSignalTrap = 5;     // the initial stop under qemu -g
constexpr int kGdbSignalVtalrm = 26;  // what our SIGVTALRM stops report
// The signal that stops a qemu-user guest. qemu 7.2 only routes signals it
// has a host handler for (the default-fatal ones) to the stub, and a signal
// the guest blocks and sigwait()s for (SIGINT, SIGTERM in many servers) is
// consumed by the guest without reaching the stub, so use one that programs
// almost never block or wait for.
constexpr int kInterruptSignal = SIGVTALRM;

std::string hex2(unsigned v) {
  char b[4];
  std::snprintf(b, sizeof b, "%02x", v & 0xff);
  return b;
}

std::optional<std::uint64_t> parse_hex(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Minimal XML scanning for <reg> and <xi:include>: tags and their attributes
// in document order. Not a validating parser; it only has to not be fooled.
struct Tag {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string attribute(const std::string& n) const {
    for (auto& [k, v] : attributes)
      if (k == n) return v;
    return {};
  }
};

std::vector<Tag> scan_tags(std::string_view doc) {
  std::vector<Tag> tags;
  std::size_t i = 0;
  while ((i = doc.find('<', i)) != std::string_view::npos) {
    if (doc.compare(i, 4, "<!--") == 0) {
      auto end = doc.find("-->", i + 4);
      if (end == std::string_view::npos) break;
      i = end + 3;
      continue;
    }
    auto end = doc.find('>', i);
    if (end == std::string_view::npos) break;
    std::string_view body = doc.substr(i + 1, end - i - 1);
    i = end + 1;
    if (body.empty() || body[0] == '/' || body[0] == '?' || body[0] == '!') continue;
    Tag t;
    std::size_t j = 0;
    while (j < body.size() && !std::isspace(static_cast<unsigned char>(body[j])) && body[j] != '/') ++j;
    t.name = std::string(body.substr(0, j));
    while (j < body.size()) {
      while (j < body.size() && (std::isspace(static_cast<unsigned char>(body[j])) || body[j] == '/')) ++j;
      std::size_t eq = body.find('=', j);
      if (eq == std::string_view::npos) break;
      std::string key(body.substr(j, eq - j));
      while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
      std::size_t q = eq + 1;
      while (q < body.size() && std::isspace(static_cast<unsigned char>(body[q]))) ++q;
      if (q >= body.size() || (body[q] != '"' && body[q] != '\'')) break;
      char quote = body[q];
      std::size_t close = body.find(quote, q + 1);
      if (close == std::string_view::npos) break;
      t.attributes.emplace_back(std::move(key), std::string(body.substr(q + 1, close - q - 1)));
      j = close + 1;
    }
    tags.push_back(std::move(t));
  }
  return tags;
}

class GdbstubSource final : public ThreadPointerSource {
 public:
  GdbstubSource(UniqueFd fd, std::string endpoint, pid_t qemu_pid)
      : fd_(std::move(fd)), endpoint_(std::move(endpoint)), qemu_pid_(qemu_pid) {}

  ~GdbstubSource() override {
    if (!fd_) return;
    // Never leave an interrupt signal of ours unreported: with the stub gone,
    // qemu would hand it to the guest, which would die of it.
    if (!stopped_ && outstanding_interrupts_ > 0) (void)wait_for_stop();
    if (stopped_) {
      // Detach: qemu removes breakpoints and lets the guest run.
      if (send_packet("D")) (void)receive_packet();
    }
  }

  Status init() {
    auto sup = transact("qSupported:xmlRegisters=aarch64");
    if (!sup) return sup.error();
    auto why = transact("?");
    if (!why) return why.error();
    if (auto st = note_stop_reply(*why); !st) return st.error();
    return find_thread_pointer_register();
  }

  Expected<std::vector<pid_t>> threads() override {
    if (auto st = ensure_stopped(); !st) return st.error();
    std::vector<pid_t> out;
    auto reply = transact("qfThreadInfo");
    for (;;) {
      if (!reply) return reply.error();
      if (reply->empty() || (*reply)[0] == 'l') break;
      if ((*reply)[0] != 'm') return protocol_error("unexpected thread list reply \"" + printable(*reply) + "\"");
      std::string_view list(*reply);
      list.remove_prefix(1);
      while (!list.empty()) {
        auto comma = list.find(',');
        std::string_view id = list.substr(0, comma);
        list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
        if (id.size() > 1 && id[0] == 'p') {  // multiprocess form p<pid>.<tid>
          auto dot = id.find('.');
          id = dot == std::string_view::npos ? id.substr(1) : id.substr(dot + 1);
        }
        auto tid = parse_hex(id);
        if (!tid || *tid == 0 || *tid > 0x7fffffff) return protocol_error("bad thread id \"" + std::string(id) + "\"");
        out.push_back(static_cast<pid_t>(*tid));
        if (out.size() > kMaxThreads) return protocol_error("more than " + std::to_string(kMaxThreads) + " threads");
      }
      reply = transact("qsThreadInfo");
    }
    return out;
  }

  Expected<std::uint64_t> thread_pointer(pid_t tid) override {
    if (auto st = ensure_stopped(); !st) return st.error();
    char select[32];
    std::snprintf(select, sizeof select, "Hg%x", static_cast<unsigned>(tid));
    auto ok = transact(select);
    if (!ok) return ok.error();
    if (*ok != "OK") return make_error("the stub does not know thread " + std::to_string(tid) + " (reply \"" + printable(*ok) + "\")", endpoint_);
    char read_reg[32];
    std::snprintf(read_reg, sizeof read_reg, "p%x", tp_regnum_);
    auto value = transact(read_reg);
    if (!value) return value.error();
    if (value->empty() || (*value)[0] == 'E')
      return make_error("the stub refused to read register " + std::to_string(tp_regnum_) + " (" + tp_name_ +
                            ") of thread " + std::to_string(tid) + ": \"" + printable(*value) + "\"",
                        endpoint_);
    if (value->size() != 16) return protocol_error("register " + tp_name_ + " is " + std::to_string(value->size() / 2) + " bytes, expected 8");
    // Target byte order: aarch64 little endian.
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) {
      auto byte = parse_hex(std::string_view(*value).substr(static_cast<std::size_t>(i) * 2, 2));
      if (!byte) return protocol_error("register value \"" + printable(*value) + "\" is not hex");
      v = (v << 8) | *byte;
    }
    return v;
  }

  Status resume() override {
    if (!stopped_) return Ok{};
    // Our own interrupt (and the entry trap) are swallowed; anything else the
    // guest was about to receive is delivered.
    std::string cont = deliver_on_resume_ ? "C" + hex2(static_cast<unsigned>(deliver_on_resume_)) : "c";
    if (auto st = send_packet(cont); !st) return st.error();
    stopped_ = false;
    deliver_on_resume_ = 0;
    return Ok{};
  }

  std::string describe() const override { return "gdbstub " + endpoint_; }

 private:
  Error protocol_error(const std::string& what) const { return make_error("gdb protocol: " + what, endpoint_); }

  static std::string printable(const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 80)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
    return s.size() > 80 ? out + "..." : out;
  }

  Status write_all(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return make_error(std::string("connection lost: ") + std::strerror(errno), endpoint_);
      }
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return Ok{};
  }

  Expected<char> read_byte(int timeout_ms = kIoTimeoutMs) {
    pollfd p{fd_.get(), POLLIN, 0};
    for (;;) {
      int r = ::poll(&p, 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return make_error("the stub did not answer within " + std::to_string(timeout_ms / 1000) + " s", endpoint_);
      if (r < 0) return make_error(std::string("poll failed: ") + std::strerror(errno), endpoint_);
      break;
    }
    char c;
    for (;;) {
      ssize_t n = ::recv(fd_.get(), &c, 1, 0);
      if (n == 1) return c;
      if (n < 0 && errno == EINTR) continue;
      return make_error(n == 0 ? "the stub closed the connection (qemu exited, or it already serves another debugger)"
                               : std::string("connection lost: ") + std::strerror(errno),
                        endpoint_);
    }
  }

  Status send_packet(const std::string& body) {
    unsigned sum = 0;
    for (unsigned char c : body) sum += c;
    std::string frame = "$" + body + "#" + hex2(sum);
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (auto st = write_all(frame); !st) return st;
      for (;;) {
        auto c = read_byte();
        if (!c) return c.error();
        if (*c == '+') return Ok{};
        if (*c == '-') break;  // retransmit
        // Anything else before the ack is noise; keep waiting.
      }
    }
    return protocol_error("the stub rejected packet \"" + printable(body) + "\" five times");
  }

  Expected<std::string> receive_packet(int timeout_ms = kIoTimeoutMs) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      for (;;) {
        auto c = read_byte(timeout_ms);
        if (!c) return c.error();
        if (*c == '$') break;
      }
      std::string raw;
      unsigned sum = 0;
      for (;;) {
        auto c = read_byte();
        if (!c) return c.error();
        if (*c == '#') break;
        if (raw.size() >= kMaxPacket) return protocol_error("packet larger than " + std::to_string(kMaxPacket) + " bytes");
        raw += *c;
        sum += static_cast<unsigned char>(*c);
      }
      char cs[2];
      for (char& ch : cs) {
        auto c = read_byte();
        if (!c) return c.error();
        ch = *c;
      }
      auto expected = parse_hex(std::string_view(cs, 2));
      if (!expected || *expected != (sum & 0xff)) {
        if (auto st = write_all("-"); !st) return st.error();
        continue;
      }
      if (auto st = write_all("+"); !st) return st.error();
      // Run-length encoding: "X*n" repeats X (n - 29) more times.
      std::string body;
      for (std::size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '*' && !body.empty() && i + 1 < raw.size()) {
          int count = static_cast<unsigned char>(raw[++i]) - 29;
          if (count < 0 || body.size() + static_cast<std::size_t>(count) > kMaxPacket)
            return protocol_error("bad run-length encoding");
          body.append(static_cast<std::size_t>(count), body.back());
        } else {
          body += raw[i];
        }
      }
      return body;
    }
    return protocol_error("five corrupted packets in a row");
  }

  Expected<std::string> transact(const std::string& body) {
    if (auto st = send_packet(body); !st) return st.error();
    for (;;) {
      auto reply = receive_packet();
      if (!reply) return reply;
      // A late stop reply (an interrupt we sent earlier) is not our answer.
      if (!reply->empty() && (*reply)[0] == 'T' && body != "?" && looks_like_stop(*reply) && !expecting_stop_) {
        (void)note_stop_reply(*reply);
        continue;
      }
      if (!reply->empty() && ((*reply)[0] == 'W' || (*reply)[0] == 'X') && reply->size() <= 32 && body != "?")
        return make_error("the guest exited (" + printable(*reply) + ")", endpoint_);
      return reply;
    }
  }

  static bool looks_like_stop(const std::string& r) {
    return r.size() >= 3 && std::isxdigit(static_cast<unsigned char>(r[1])) && std::isxdigit(static_cast<unsigned char>(r[2]));
  }

  Status note_stop_reply(const std::string& r) {
    if (r.empty()) return protocol_error("empty stop reply");
    if (r[0] == 'W' || r[0] == 'X') return make_error("the guest has exited (" + printable(r) + ")", endpoint_);
    if ((r[0] != 'T' && r[0] != 'S') || !looks_like_stop(r)) return protocol_error("unexpected stop reply \"" + printable(r) + "\"");
    int sig = static_cast<int>(*parse_hex(std::string_view(r).substr(1, 2)));
    stopped_ = true;
    const int ours = qemu_pid_ > 0 ? kGdbSignalVtalrm : kGdbSignalInt;
    if (sig == ours && outstanding_interrupts_ > 0) {
      --outstanding_interrupts_;
    } else if (sig != ours && sig != kGdbSignalTrap && sig != 0) {
      deliver_on_resume_ = sig;  // the guest's own signal: hand it on
    }
    return Ok{};
  }

  Status wait_for_stop() {
    expecting_stop_ = true;
    auto reply = receive_packet();
    expecting_stop_ = false;
    if (!reply) return reply.error();
    return note_stop_reply(*reply);
  }

  Status ensure_stopped() {
    if (stopped_) return Ok{};
    // A stop reply may already be waiting (an earlier interrupt, a signal).
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) return wait_for_stop();
    if (qemu_pid_ > 0) {
      if (::kill(qemu_pid_, kInterruptSignal) != 0)
        return make_error(std::string("cannot signal qemu pid ") + std::to_string(qemu_pid_) + ": " + std::strerror(errno), endpoint_);
      ++outstanding_interrupts_;
    } else {
      if (auto st = write_all("\x03"); !st) return st;
      ++outstanding_interrupts_;
    }
    return wait_for_stop();
  }

  Expected<std::string> read_feature_document(const std::string& annex) {
    std::string doc;
    for (;;) {
      char req[256];
      if (annex.size() > 128) return protocol_error("include name too long");
      std::snprintf(req, sizeof req, "qXfer:features:read:%s:%zx,%x", annex.c_str(), doc.size(), 0xf00);
      auto reply = transact(req);
      if (!reply) return reply.error();
      if (reply->empty() || ((*reply)[0] != 'm' && (*reply)[0] != 'l'))
        return protocol_error("cannot read target description \"" + annex + "\": \"" + printable(*reply) + "\"");
      // Binary data: '}' escapes the next byte (xor 0x20).
      for (std::size_t i = 1; i < reply->size(); ++i) {
        char c = (*reply)[i];
        if (c == '}' && i + 1 < reply->size()) c = static_cast<char>((*reply)[++i] ^ 0x20);
        doc += c;
      }
      if (doc.size() > kMaxDocument) return protocol_error("target description \"" + annex + "\" is too large");
      if ((*reply)[0] == 'l' || reply->size() == 1) return doc;
    }
  }

  Status walk_description(const std::string& annex, int depth, std::set<std::string>& seen, unsigned& next_regnum) {
    if (depth > kMaxIncludeDepth) return protocol_error("target description includes nest deeper than " + std::to_string(kMaxIncludeDepth));
    if (!seen.insert(annex).second || seen.size() > kMaxDocuments) return Ok{};
    auto doc = read_feature_document(annex);
    if (!doc) return doc.error();
    for (const auto& tag : scan_tags(*doc)) {
      if (tag.name == "xi:include") {
        std::string href = tag.attribute("href");
        if (href.empty() || href.find_first_of(":,;#$") != std::string::npos) continue;
        if (auto st = walk_description(href, depth + 1, seen, next_regnum); !st) return st;
        if (tp_regnum_ != kNoRegister) return Ok{};
      } else if (tag.name == "reg") {
        std::string regnum = tag.attribute("regnum");
        if (!regnum.empty()) {
          unsigned n = 0;
          auto [p, ec] = std::from_chars(regnum.data(), regnum.data() + regnum.size(), n);
          if (ec != std::errc()) return protocol_error("bad regnum \"" + regnum + "\"");
          next_regnum = n;
        }
        std::string name = tag.attribute("name");
        std::string lower = name;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        if (lower == "tpidr_el0" || lower == "tpidr") {
          tp_regnum_ = next_regnum;
          tp_name_ = name;
          return Ok{};
        }
        ++next_regnum;
      }
    }
    return Ok{};
  }

  Status find_thread_pointer_register() {
    std::set<std::string> seen;
    unsigned next = 0;
    if (auto st = walk_description("target.xml", 0, seen, next); !st) return st;
    if (tp_regnum_ == kNoRegister)
      return make_error("the stub's target description has no TPIDR_EL0 (or tpidr) register; is this an aarch64 guest?", endpoint_);
    return Ok{};
  }

  static constexpr unsigned kNoRegister = ~0u;
  UniqueFd fd_;
  std::string endpoint_;
  pid_t qemu_pid_;
  bool stopped_ = false;
  bool expecting_stop_ = false;
  int outstanding_interrupts_ = 0;
  int deliver_on_resume_ = 0;
  unsigned tp_regnum_ = kNoRegister;
  std::string tp_name_;
};

}  // namespace

Expected<std::pair<std::string, int>> parse_host_port(const std::string& text) {
  std::string host;
  std::string_view port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return make_error("expected [HOST]:PORT", "\"" + text + "\"");
    host = text.substr(1, close - 1);
    port = std::string_view(text).substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) return make_error("expected HOST:PORT", "\"" + text + "\"");
    host = text.substr(0, colon);
    port = std::string_view(text).substr(colon + 1);
  }
  int p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || ptr != port.data() + port.size() || p <= 0 || p > 65535)
    return make_error("port must be 1..65535", "\"" + text + "\"");
  return std::make_pair(host, p);
}

Expected<std::unique_ptr<ThreadPointerSource>> make_gdbstub_source(const std::string& host, int port, pid_t qemu_pid) {
  std::string endpoint = "gdbstub " + host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0)
    return make_error(std::string("cannot resolve: ") + ::gai_strerror(rc), endpoint);
  UniqueFd fd;
  int last_err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    UniqueFd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s) continue;
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) == 0) {
      fd = std::move(s);
      break;
    }
    last_err = errno;
  }
  ::freeaddrinfo(res);
  if (!fd) return make_error(std::string("cannot connect: ") + std::strerror(last_err), endpoint);
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto source = std::make_unique<GdbstubSource>(std::move(fd), host + ":" + std::to_string(port), qemu_pid);
  if (auto st = source->init(); !st) return st.error();
  return std::unique_ptr<ThreadPointerSource>(std::move(source));
}

}  // namespace tracecorr
