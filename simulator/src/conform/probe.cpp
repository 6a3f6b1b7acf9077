#include "tracecorr/conform/probe.hpp"

namespace tracecorr::conform {

Verdict verdict_of(Finding::Outcome o) {
  switch (o) {
    case Finding::Outcome::Met: return Verdict::Pass;
    case Finding::Outcome::Violated: return Verdict::Fail;
    case Finding::Outcome::NotApplicable: return Verdict::Skip;
    case Finding::Outcome::KitError: return Verdict::Error;
    case Finding::Outcome::Tolerated: return Verdict::Warn;  // the runner raises only Fail to the level
  }
  return Verdict::Error;
}

}  // namespace tracecorr::conform
