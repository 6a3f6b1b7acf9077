// Elastic v1's checks over what a reader found, written once: the ELF and
// SOCK probes of `tracecorr conform` and `tracecorr inspect` both call them,
// so a rule has one wording and one verdict wherever it is judged.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/socket.hpp"

namespace tracecorr::elastic_v1 {

// ELF-01..04 of the library discovery found (its name, its two symbols, its TLS dialect).
std::vector<Finding> check_library(const AgentLibrary& library);

// SOCK-01..04 of the socket the process storage names. `facts` as
// examine_socket found them (nullopt: `error` says why not); `connected`:
// whether a non-blocking connect to it succeeded (nullopt: not tried, then
// SOCK-02 rests on the facts alone).
std::vector<Finding> check_socket(const std::string& path, const std::optional<SocketFacts>& facts,
                                  const std::optional<Error>& error, std::optional<bool> connected);

// The requirement an error from a reader breaks, when the target is at
// fault: the protocol's reading of the engine's error kinds ("" otherwise).
std::string requirement_of_socket_error(const Error& error);

// "0755"
std::string mode_string(unsigned mode);

}  // namespace tracecorr::elastic_v1
