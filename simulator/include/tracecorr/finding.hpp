// What any check concluded about one requirement, and the evidence it shows:
// the one vocabulary of `tracecorr conform`'s probes and `tracecorr inspect`,
// so a protocol writes each check once and both use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tracecorr {

// Raw bytes shown as hex, with the fields a decoder found in them.
struct DecodedField {
  std::size_t offset = 0;
  std::size_t size = 0;
  std::string name;   // "trace_id"
  std::string value;  // "4bf92f3577b34da6a3ce929d0e0e4736"
};

struct Evidence {
  std::string label;     // "correlation message #3"
  std::string expected;  // "string-array"
  std::string actual;    // "string"
  std::vector<std::uint8_t> bytes;
  std::vector<DecodedField> fields;
};

// A conform run turns it into a RequirementResult (level, words and exit-code
// rules come from the registry); inspect lists the ones not Met.
struct Finding {
  // Tolerated: the rule's letter is not met in a way its text allows but
  // discourages (a version "for development"): a warning whatever the level.
  enum class Outcome { Met, Violated, NotApplicable, KitError, Tolerated };
  std::string requirement;
  Outcome outcome = Outcome::NotApplicable;
  std::string reason;
  std::vector<Evidence> evidence;
  // Observations a Met rests on; the runner compares it with the probe's
  // minimum_evidence() and refuses a pass below it (enforce_evidence_minimum).
  std::size_t evidence_count = 0;
  // NotApplicable only for want of what the rule needs happening while
  // watched (no span ended in a registration's window), which a conforming
  // target does given the CPU: not by the target's design. A conform run
  // answers such a finding from a session whose target was starved of CPU
  // with an error and the figures, never a silent skip (conform/probe.hpp).
  bool for_want_of_events = false;
};

// How bad an outcome is (higher is worse), for keeping the worst of several
// looks at one rule.
inline int severity(Finding::Outcome o) {
  switch (o) {
    case Finding::Outcome::Violated: return 4;
    case Finding::Outcome::KitError: return 3;
    case Finding::Outcome::Tolerated: return 2;
    case Finding::Outcome::Met: return 1;
    case Finding::Outcome::NotApplicable: return 0;
  }
  return 0;
}

// Shorthands. A pass always states how many observations it rests on.
Finding met(std::string id, std::size_t evidence_count, std::string reason, std::vector<Evidence> evidence = {});
Finding violated(std::string id, std::string reason, std::vector<Evidence> evidence = {});
Finding not_applicable(std::string id, std::string reason);
// Not applicable for want of events (Finding::for_want_of_events).
Finding not_seen(std::string id, std::string reason);
Finding kit_error(std::string id, std::string reason, std::vector<Evidence> evidence = {});
Finding tolerated(std::string id, std::string reason, std::vector<Evidence> evidence = {});
// Evidence that is words only: what was expected and what was there.
Evidence text_evidence(std::string label, std::string expected, std::string actual);

// A finding as `tracecorr inspect` lists it: its requirement's level from the
// registered registries ("warn" for a Tolerated one), and its reason with the
// evidence in words.
std::string level_of(const Finding& finding);
std::string finding_message(const Finding& finding);

}  // namespace tracecorr
