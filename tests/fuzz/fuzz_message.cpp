// libFuzzer: the datagram messages an agent receives (decode_message), and
// the round trip of what decodes: encode(decode(x)) decodes to the same message.
#include <cstdlib>

#include "elastic_v1/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tracecorr::elastic_v1;
  auto message = decode_message({data, size});
  if (!message.ok()) return 0;
  (void)describe(*message);
  (void)minimum_size(*message);
  auto again = decode_message(encode(*message));
  if (!again.ok() || !(*again == *message)) std::abort();
  return 0;
}
