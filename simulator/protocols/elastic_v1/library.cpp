#include "elastic_v1/library.hpp"

#include "elastic_v1/registry.hpp"
#include "elastic_v1/wire.hpp"

namespace tracecorr::elastic_v1 {

conform::StacksCaption stacks_caption() {
  return {"Where each transaction's time went: flame graphs", "transaction", "transactions"};
}

DiscoveryOptions discovery_options() {
  DiscoveryOptions o;
  o.name_regex = std::string(elastic_v1::spec::kLibraryNameRegex);
  o.process_symbol = std::string(elastic_v1::spec::kProcessStorageSymbol);
  o.tls_symbol = std::string(elastic_v1::spec::kTlsSymbol);
  return o;
}

const watch::ActiveTraceOf& active_trace() {
  static const watch::ActiveTraceOf of =
      [](std::span<const std::uint8_t> bytes) -> std::optional<watch::ActiveTrace> {
    auto record = decode_tls_record(bytes);
    if (!record || !record->valid || !record->trace_present) return std::nullopt;
    return watch::ActiveTrace{record->trace_id, record->transaction_id, record->trace_flags};
  };
  return of;
}

}  // namespace tracecorr::elastic_v1
