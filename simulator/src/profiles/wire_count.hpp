// Before libprotobuf allocates anything: the fields of an
// ExportProfilesServiceRequest counted on the wire, walking into the messages
// the schema names, each element of a packed repeated field counted as one
// (a 1-byte varint of `values` becomes 8 bytes in memory, an empty Sample
// of 2 bytes some hundred).
#pragma once

#include <cstddef>
#include <string_view>

namespace tracecorr::profiles::detail {

// False once the count passes `limit`. Malformed bytes stop the walk (true):
// libprotobuf names them. Nesting past `max_depth` is not walked (libprotobuf's
// recursion limit, set to the same, refuses it).
bool fields_within(std::string_view body, std::size_t limit, std::size_t max_depth);

}  // namespace tracecorr::profiles::detail
