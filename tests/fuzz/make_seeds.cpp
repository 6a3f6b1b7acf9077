// Writes the seed corpus of every fuzzer (tests/fuzz/corpus/<decoder>/) with
// tracecorr's own encoders: one well-formed input of each kind, plus a few
// edge cases. Usage: make_seeds CORPUS_DIR [ELF_FILE...]
#include <filesystem>
#include <fstream>
#include <iostream>

#include "tracecorr/otlp.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/profiles/encode.hpp"
#include "elastic_v1/wire.hpp"

namespace fs = std::filesystem;
using namespace tracecorr;

namespace {

fs::path corpus;

void seed(const std::string& fuzzer, const std::string& name, std::string_view bytes) {
  fs::create_directories(corpus / fuzzer);
  std::ofstream(corpus / fuzzer / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
void seed(const std::string& fuzzer, const std::string& name, const std::vector<std::uint8_t>& bytes) {
  seed(fuzzer, name, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::vector<otlp::ReceivedSpan> sample_spans() {
  otlp::ReceivedSpan tx;
  tx.trace_id = {0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36};
  tx.span_id = {0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7};
  tx.name = "GET /cart";
  tx.kind = otlp::SpanKind::Server;
  tx.start_unix_nano = 1'700'000'000'000'000'000ull;
  tx.end_unix_nano = tx.start_unix_nano + 5'000'000;
  tx.flags = 1;
  tx.attributes["elastic.profiler_stack_trace_ids"] =
      otlp::AttributeValue(otlp::AttributeValue::Array{otlp::AttributeValue("AAAAAAAAAAAAAAAAAAAAAA")});
  tx.attributes["n"] = otlp::AttributeValue(std::int64_t{7});
  tx.attributes["kv"] = otlp::AttributeValue(otlp::AttributeValue::KvList{{"k", otlp::AttributeValue(true)}});
  tx.set_resource_attributes({{"service.name", otlp::AttributeValue("checkout")}, {"host.id", otlp::AttributeValue("h1")}});
  tx.set_scope("tracecorr-seed", "1.0");
  otlp::ReceivedSpan child = tx;
  child.span_id[7] ^= 1;
  child.parent_span_id = tx.span_id;
  child.attributes.clear();
  return {tx, child};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: make_seeds CORPUS_DIR [ELF_FILE...]\n";
    return 2;
  }
  corpus = argv[1];

  elastic_v1::Registration registration;
  registration.samples_delay_ms = 500;
  registration.host_id = "host-1";
  seed("message", "registration", elastic_v1::encode(registration));
  elastic_v1::Registration later = registration;
  later.minor = 2;
  later.trailing = {1, 2, 3};
  seed("message", "registration-minor2-trailing", elastic_v1::encode(later));
  elastic_v1::Correlation correlation;
  correlation.trace_id[0] = 1;
  correlation.transaction_id[0] = 2;
  correlation.stack_trace_id[0] = 3;
  seed("message", "correlation", elastic_v1::encode(correlation));
  seed("message", "unknown", elastic_v1::encode(elastic_v1::UnknownMessage{9, 1, {0xff}}));

  elastic_v1::ProcessStorage storage;
  storage.service_name = "checkout";
  storage.service_environment = "prod";
  storage.socket_file_path = "/tmp/elastic/agent.sock";
  auto storage_bytes = elastic_v1::encode_process_storage(storage);
  storage_bytes.insert(storage_bytes.begin(), 1);  // first byte odd: the storage decoder
  seed("storage_record", "storage", storage_bytes);
  elastic_v1::TlsRecord record;
  record.valid = 1;
  record.trace_present = 1;
  record.trace_flags = 1;
  record.trace_id[0] = 1;
  record.span_id[0] = 2;
  record.transaction_id[0] = 3;
  auto record_bytes = elastic_v1::encode_tls_record(record);
  std::vector<std::uint8_t> record_seed{0};  // first byte even: the record decoder
  record_seed.insert(record_seed.end(), record_bytes.begin(), record_bytes.end());
  seed("storage_record", "record", record_seed);

  seed("maps", "typical",
       "55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1048602                    /usr/bin/java\n"
       "7f3c1c000000-7f3c1c021000 rw-p 00000000 00:00 0 \n"
       "7f3c2a5d1000-7f3c2a5f3000 r-xp 00002000 fd:00 2621563                    "
       "/opt/agent/elastic-jvmti-linux-x64.so (deleted)\n"
       "7ffd4b7e5000-7ffd4b806000 rw-p 00000000 00:00 0                          [stack]\n");

  auto spans = sample_spans();
  seed("otlp_protobuf", "two-spans", otlp::encode_protobuf(spans));
  seed("otlp_json", "two-spans", otlp::encode_json(spans));
  seed("otlp_json", "empty", R"({"resourceSpans":[]})");
  seed("gzip", "gzip-json", otlp::gzip_compress(otlp::encode_json(spans)));
  seed("gzip", "gzip-empty", otlp::gzip_compress(""));

  process_context::Payload context;
  context.has_resource = true;
  context.resource = {{"service.name", otlp::AttributeValue("checkout")},
                      {"service.instance.id", otlp::AttributeValue("627cc493-f310-47de-96bd-71410b7dec09")},
                      {"process.runtime.versions", otlp::AttributeValue(otlp::AttributeValue::Array{
                                                       otlp::AttributeValue(std::int64_t{21}), otlp::AttributeValue(2.5)})}};
  context.attributes = {{"threadlocal.schema_version", otlp::AttributeValue("tls_v1")},
                        {"threadlocal.attribute_key_map",
                         otlp::AttributeValue(otlp::AttributeValue::KvList{{"0", otlp::AttributeValue("http.route")}})}};
  seed("process_context", "payload", process_context::encode_payload(context));
  seed("process_context", "empty", std::string_view());

  // OTLP profiles: two threads, aggregated timestamps, a link, a stack, a value.
  std::vector<profiles::ProfileSample> samples(3);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    samples[i].pid = 4242;
    samples[i].tid = 4243 + static_cast<std::int64_t>(i % 2);
    samples[i].time = profiles::SampleTime{1'700'000'000'000'000'000ull + i};
    samples[i].link = profiles::SampleLink{spans[0].trace_id, spans[0].span_id};
    samples[i].resource = std::make_shared<const otlp::Attributes>(
        otlp::Attributes{{"service.name", otlp::AttributeValue("checkout")}});
  }
  samples[2].value = 3;
  samples[2].stack = std::make_shared<const profiles::Stack>(profiles::Stack{0x401000, 0x402000});
  seed("otlp_profiles", "three-samples", profiles::encode_profiles(samples));
  seed("otlp_profiles", "empty", std::string_view());
  seed("json_lines", "full",
       R"({"time_unix_nano": "1718000000123456789", "pid": 4242, "tid": 4243, "trace_id": )"
       R"("4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "flags": 1, "value": 2, "stack": [4198400, )"
       R"("0x402000"], "attributes": {"thread.name": "worker-1", "tags": ["a"], "kv": {"k": true}}, "resource": )"
       R"({"service.name": "checkout"}})");
  seed("json_lines", "smallest", R"({"time_monotonic_nano": 123, "pid": 1, "tid": 2})");

  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    seed("elf", fs::path(argv[i]).filename().string(), bytes);
  }
  return 0;
}
