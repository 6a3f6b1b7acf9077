// The engine tests' record (test_record.h) as the engine reads it: a
// RecordLayout, and records built by the tests. A protocol's codec supplies
// its own layout the same way; the engine tests use this one so that they
// test the engine, not a protocol.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "test_record.h"
#include "tracecorr/discovery.hpp"
#include "tracecorr/record_layout.hpp"

// The test library's symbol names as strings (test_record.h spells them once).
#define TC_TEST_SYMBOL_TEXT_(name) #name
#define TC_TEST_SYMBOL_TEXT(name) TC_TEST_SYMBOL_TEXT_(name)

namespace tracecorr::test_support {

inline constexpr const char* kTestTlsSymbol = TC_TEST_SYMBOL_TEXT(TC_TEST_TLS_SYMBOL);
inline constexpr const char* kTestProcessSymbol = TC_TEST_SYMBOL_TEXT(TC_TEST_PROCESS_SYMBOL);

// How the tests' protocol looks for its library (tests/unit/data/CMakeLists.txt
// names the libraries to fit, or not): a name pattern of the shape registries
// use, and the two symbols.
inline constexpr const char* kTestLibraryNameRegex = ".*/tc-test-agent-([\\w-]*)\\.so";

inline DiscoveryOptions test_discovery_options() {
  DiscoveryOptions o;
  o.name_regex = kTestLibraryNameRegex;
  o.process_symbol = kTestProcessSymbol;
  o.tls_symbol = kTestTlsSymbol;
  return o;
}

inline const RecordLayout& test_record_layout() {
  static const RecordLayout layout = [] {
    RecordLayout l;
    l.name = "test record";
    l.length = FixedSize{TC_TEST_RECORD_SIZE};
    l.max_size = TC_TEST_RECORD_SIZE;
    l.valid_offset = TC_TEST_RECORD_VALID_OFFSET;
    l.valid_values = ByteValues::any_nonzero();
    l.presence_offset = TC_TEST_RECORD_PRESENT_OFFSET;
    l.fields = {
        {"version", TC_TEST_RECORD_VERSION_OFFSET, TC_TEST_RECORD_VERSION_SIZE},
        {"flags", TC_TEST_RECORD_FLAGS_OFFSET, 1},
        {"valid", TC_TEST_RECORD_VALID_OFFSET, 1},
        {"context", TC_TEST_RECORD_CONTEXT_OFFSET, TC_TEST_RECORD_CONTEXT_SIZE},
        {"present", TC_TEST_RECORD_PRESENT_OFFSET, 1},
        {"owner", TC_TEST_RECORD_OWNER_OFFSET, TC_TEST_RECORD_OWNER_SIZE},
        {"stamp", TC_TEST_RECORD_STAMP_OFFSET, TC_TEST_RECORD_STAMP_SIZE},
    };
    l.indirection = PointerInTlsSlot{};
    return l;
  }();
  return layout;
}

using TestRecordBytes = std::array<std::uint8_t, TC_TEST_RECORD_SIZE>;

// A set-up record whose context, owner and stamp bytes all carry `n` (so two
// records differ in every field but valid and present).
inline TestRecordBytes test_record(std::uint8_t n, std::uint8_t valid, std::uint8_t present = 1) {
  TestRecordBytes r{};
  const std::uint16_t version = TC_TEST_RECORD_VERSION;
  std::memcpy(r.data() + TC_TEST_RECORD_VERSION_OFFSET, &version, sizeof version);
  r[TC_TEST_RECORD_FLAGS_OFFSET] = 1;
  r[TC_TEST_RECORD_VALID_OFFSET] = valid;
  r[TC_TEST_RECORD_PRESENT_OFFSET] = present;
  for (std::size_t i = 0; i < TC_TEST_RECORD_CONTEXT_SIZE; ++i)
    r[TC_TEST_RECORD_CONTEXT_OFFSET + i] = static_cast<std::uint8_t>(0xa0 + n + i);
  for (std::size_t i = 0; i < TC_TEST_RECORD_OWNER_SIZE; ++i)
    r[TC_TEST_RECORD_OWNER_OFFSET + i] = static_cast<std::uint8_t>(0x50 + n + i);
  for (std::size_t i = 0; i < TC_TEST_RECORD_STAMP_SIZE; ++i)
    r[TC_TEST_RECORD_STAMP_OFFSET + i] = static_cast<std::uint8_t>(0x10 * n + i);
  return r;
}

}  // namespace tracecorr::test_support
