// inspect_process on this very process, with the test library dlopened, a
// published process storage, a socket, and a record on this thread.
#include <gtest/gtest.h>

#include "thread_pointer_support.hpp"

#include <asm/prctl.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "elastic_v1/inspect/inspect.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {
namespace {

using test_support::own_thread_pointer;

// Thread pointers of this thread only (ptrace cannot attach to our own threads).
class OwnThreadSource : public ThreadPointerSource {
 public:
  Expected<std::vector<pid_t>> threads() override { return std::vector<pid_t>{::gettid()}; }
  Expected<std::uint64_t> thread_pointer(pid_t tid) override {
    if (tid != ::gettid()) return make_error("not this thread");
    return own_thread_pointer();
  }
  std::string describe() const override { return "own thread"; }
};

TEST(Findings, CarryTheRegistryLevelAndTheirEvidenceInWords) {
  EXPECT_EQ(level_of(violated("TLS-07", "x")), "SHOULD");
  EXPECT_EQ(level_of(violated("ELF-04", "x")), "MUST");
  EXPECT_EQ(finding_message(violated("SOCK-01", "not datagram", {text_evidence("type", "2", "1 (SOCK_STREAM)")})),
            "not datagram (type: expected 2, found 1 (SOCK_STREAM))");
  EXPECT_NE(find_requirement("PROC-03"), nullptr);
  EXPECT_EQ(find_requirement("PROC-99"), nullptr);
}

TEST(Inspect, SeesWhatThisProcessPublished) {
  void* h = ::dlopen(TC_ELASTIC_V1_TESTLIB, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(h, nullptr) << ::dlerror();
  auto set_record = reinterpret_cast<void (*)(void*)>(::dlsym(h, "tc_test_set_record"));
  auto publish = reinterpret_cast<void (*)(void*)>(::dlsym(h, "tc_test_publish_storage"));

  char dir[] = "/tmp/tracecorr-inspect-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string sock_path = std::string(dir) + "/agent.sock";
  int sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, sock_path.c_str(), sizeof a.sun_path - 1);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);

  ProcessStorage s;
  s.service_name = "inspect-test";
  s.service_environment = "unit";
  s.socket_file_path = sock_path;
  auto storage = encode_process_storage(s);
  publish(storage.data());
  TlsRecord r;
  r.valid = 1;
  r.trace_present = 1;
  r.trace_flags = 1;
  r.trace_id.fill(0x11);
  r.span_id.fill(0x22);
  r.transaction_id.fill(0x33);
  auto record = encode_tls_record(r);
  set_record(record.data());

  OwnThreadSource source;
  InspectOptions o;
  o.thread_pointers = &source;
  auto in = inspect_process(::getpid(), o);
  set_record(nullptr);
  publish(nullptr);
  ::close(sock);
  ::unlink(sock_path.c_str());
  ::rmdir(dir);

  ASSERT_TRUE(in.ok()) << in.error().message();
  ASSERT_TRUE(in->library);
  EXPECT_TRUE(in->library->name_matches);
  ASSERT_TRUE(in->tls);
  EXPECT_EQ(in->tls->model, TlsModel::StaticOffset);
  ASSERT_TRUE(in->storage && in->storage->fields);
  EXPECT_EQ(in->storage->fields->service_name, "inspect-test");
  ASSERT_TRUE(in->socket && in->socket->facts);
  EXPECT_TRUE(in->socket->facts->datagram);
  EXPECT_TRUE(in->socket->facts->target_nonblocking);
  EXPECT_TRUE(in->socket->reachable) << in->socket->reach_error;
  ASSERT_EQ(in->threads.size(), 1u);
  ASSERT_TRUE(in->threads[0].record) << in->threads[0].error;
  EXPECT_EQ(in->threads[0].record_pointer, reinterpret_cast<std::uintptr_t>(record.data()));
  EXPECT_EQ(*in->threads[0].record, r);
  for (const auto& f : in->findings) ADD_FAILURE() << f.requirement << ": " << f.reason;

  auto j = to_json(*in);
  EXPECT_EQ(j["storage"]["service_name"], "inspect-test");
  EXPECT_EQ(j["threads"][0]["record"]["trace_id"], "11111111111111111111111111111111");
  EXPECT_EQ(j["tls"]["model"], "static-offset");
  EXPECT_EQ(j["socket"]["datagram"], true);
}

TEST(Inspect, StorageWithAHugeStringLengthIsAFindingNotACrash) {
  void* h = ::dlopen(TC_ELASTIC_V1_TESTLIB, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(h, nullptr);
  auto publish = reinterpret_cast<void (*)(void*)>(::dlsym(h, "tc_test_publish_storage"));
  std::vector<std::uint8_t> storage = {1, 0, 0xff, 0xff, 0xff, 0xff};
  publish(storage.data());
  InspectOptions o;
  o.read_threads = false;
  auto in = inspect_process(::getpid(), o);
  publish(nullptr);
  ASSERT_TRUE(in.ok());
  ASSERT_TRUE(in->storage);
  EXPECT_FALSE(in->storage->fields);
  EXPECT_NE(in->storage->error.find("4294967295"), std::string::npos) << in->storage->error;
  bool proc03 = false;
  for (const auto& f : in->findings) proc03 |= f.requirement == "PROC-03";
  EXPECT_TRUE(proc03);
}

}  // namespace
}  // namespace tracecorr::elastic_v1
