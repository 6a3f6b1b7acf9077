// Elastic v1's library rules (library.hpp) as its registry writes them: the
// name pattern, the symbols discovery looks for, and the TLS dialects the
// registry documents against the ELF layer's psABI table; and Elastic's
// stand-in library (data/agent_tls_library.c) found by them in this process.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "elastic_v1/library.hpp"
#include "elastic_v1/registry.hpp"
#include "tracecorr/elf.hpp"

namespace tracecorr::elastic_v1 {
namespace {

TEST(ElasticLibrary, DiscoveryOptionsAreTheRegistrys) {
  auto o = discovery_options();
  EXPECT_EQ(o.name_regex, spec::kLibraryNameRegex);
  EXPECT_EQ(o.process_symbol, spec::kProcessStorageSymbol);
  EXPECT_EQ(o.tls_symbol, spec::kTlsSymbol);
  EXPECT_TRUE(o.look_past_names);  // a misnamed library is diagnosed (ELF-01), not missed
}

TEST(ElasticLibrary, NameRegexIsTheRegistrys) {
  std::string suffix;
  auto re = discovery_options().name_regex;
  ASSERT_TRUE(library_name_pattern_supported(re));
  EXPECT_TRUE(library_name_matches("/opt/x/elastic-jvmti-linux-x64.so", re, &suffix));
  EXPECT_EQ(suffix, "x64");
  EXPECT_TRUE(library_name_matches("/a/elastic-jvmti-linux-arm64-v2.so", re, &suffix));
  EXPECT_EQ(suffix, "arm64-v2");
  EXPECT_FALSE(library_name_matches("/a/elastic-jvmti-linux-x64.so.1", re));
  EXPECT_FALSE(library_name_matches("elastic-jvmti-linux-x64.so", re));  // needs a directory
  EXPECT_FALSE(library_name_matches("/a/elastic-jvmti-linux-x.64.so", re));
}

TEST(ElasticLibrary, DialectTableAgreesWithTheRegistry) {
  // The registry documents the dialects (library.tls_dialects); the ELF
  // layer's table is the psABI's. They must say the same.
  auto registry = nlohmann::json::parse(spec::kRegistryJson);
  const auto& dialects = registry.at("library").at("tls_dialects");
  for (auto [m, key] : {std::pair{elf::Machine::X86_64, "x86_64"}, std::pair{elf::Machine::AArch64, "aarch64"}}) {
    const auto* names = elf::dialect_relocations(m);
    ASSERT_NE(names, nullptr);
    EXPECT_EQ(names->descriptor, dialects.at(key).at("descriptor_relocation").get<std::string>());
    EXPECT_EQ(names->traditional, dialects.at(key).at("traditional_relocations").get<std::vector<std::string>>());
  }
}

TEST(ElasticLibrary, TheRegistrysOptionsFindTheStandInLibrary) {
  void* h = ::dlopen(TC_ELASTIC_V1_TESTLIB, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(h, nullptr) << ::dlerror();
  LibraryCache cache;
  auto found = discover_process(::getpid(), discovery_options(), cache);
  ASSERT_TRUE(found.ok()) << found.error().message();
  ASSERT_TRUE(found->has_value());
  const auto& a = **found;
  EXPECT_EQ(a.path, TC_ELASTIC_V1_TESTLIB);
  EXPECT_TRUE(a.name_matches);
  EXPECT_EQ(a.name_suffix, "unittest");
  ASSERT_TRUE(a.process_pointer_addr);
  EXPECT_EQ(*a.process_pointer_addr,
            reinterpret_cast<std::uintptr_t>(::dlsym(h, std::string(spec::kProcessStorageSymbol).c_str())));
  EXPECT_TRUE(a.tls_descriptor_addr);
  EXPECT_EQ(a.elf.tls_access.dialect, elf::TlsDialect::Descriptor);
}

}  // namespace
}  // namespace tracecorr::elastic_v1
