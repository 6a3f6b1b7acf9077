// Polling a condition with a bound: the bound is only reached when what is
// tested is broken, so it is generous and never a measure of speed.
#pragma once

#include <chrono>
#include <thread>

namespace tracecorr::test_support {

// Whether `done` holds within `limit`, looked at every 20 ms.
template <typename F>
bool eventually(F done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  for (auto until = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < until;) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

}  // namespace tracecorr::test_support
