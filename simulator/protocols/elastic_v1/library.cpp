#include "elastic_v1/library.hpp"

#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

DiscoveryOptions discovery_options() {
  DiscoveryOptions o;
  o.name_regex = std::string(elastic_v1::spec::kLibraryNameRegex);
  o.process_symbol = std::string(elastic_v1::spec::kProcessStorageSymbol);
  o.tls_symbol = std::string(elastic_v1::spec::kTlsSymbol);
  return o;
}

}  // namespace tracecorr::elastic_v1
