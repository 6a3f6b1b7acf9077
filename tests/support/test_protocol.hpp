// A protocol that exists only in the engine's tests (test_protocol.cpp
// registers it before main, as builtin_protocols.cpp does a package), so that
// the result model, the gate, expectations and the reports are tested on
// requirements the tests own, not on a real protocol's registry.
//
// Areas in registry order: LOAD, SLOT, WIRE, NAME, OPTS, PEER. Requirements:
//   LOAD-01, LOAD-02, LOAD-03  MUST
//   SLOT-07                    SHOULD
//   WIRE-05                    SHOULD
//   NAME-02                    MUST   (source "Span Attribute", words "The type of `test.stack_ids` is string-array.")
//   OPTS-02                    MAY
//   PEER-01 MUST, PEER-02 SHOULD
#pragma once

#include <string_view>

#include "tracecorr/protocol.hpp"

namespace tracecorr::test_support {

inline constexpr std::string_view kTestProtocolId = "tracecorr-test";
inline constexpr std::string_view kTestProtocolTitle = "tracecorr test protocol v1";

// The registered spec; its registry_json is the registry as written.
const ProtocolSpec& test_protocol();

}  // namespace tracecorr::test_support
