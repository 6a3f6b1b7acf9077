// The exit codes of every tracecorr command, the conformance gate's included.
#pragma once

namespace tracecorr {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,      // a conformance failure, or a stale expectation (an expected failure that now passes)
  kExitUsage = 2,        // bad arguments, unknown requirement id, filter matching nothing, bad expectations file
  kExitEnvironment = 3,  // the environment or the kit failed (no privilege, target gone), or nothing was judged
                         // where something had to be (conform::unjudged), and no failure
};

}  // namespace tracecorr
