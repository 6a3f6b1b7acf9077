// A protocol's conformance suite: what `tracecorr conform` runs for it. The
// runner (runner.hpp) is the engine; a suite brings the protocol's sessions,
// scenarios, probes and the notes only it can write, and registers itself
// (see tracecorr/protocol.hpp for the package list).
//
// Modelled on the OTel eBPF profiler's interpreter plug-ins: the engine asks
// small questions, the package answers them; nothing in the engine names a
// protocol's options, sessions or requirement areas.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/conform/figures.hpp"
#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/result.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/protocol.hpp"

namespace tracecorr::conform {

// A setting the suite takes from the command line (`--NAME VALUE`) and the
// Python API (`options={NAME: VALUE}`); the CLI declares one option per entry.
struct SuiteOption {
  std::string name;           // "personality"
  std::string help;
  std::string default_value;  // "" : the suite decides when unset
};

// How the scenarios run, for every protocol.
struct ScenarioOptions {
  double time_scale = 1.0;  // stretches every phase (--duration)
  // The requirements judged (empty: all). Scenarios do only what these need.
  std::vector<std::string> judged;
  // Send nothing (attach mode on a live service): requirements judged by what
  // tracecorr sends are skipped.
  bool observe_only = false;
  // The suite's own settings (SuiteOption names), as given.
  std::map<std::string, std::string> settings;
  bool judges(std::string_view id_or_area) const;  // is this id (or any id of this area) judged?
  std::string setting(const std::string& name, const std::string& fallback = "") const;
};

// What one process shows of a protocol (Suite::published).
struct Published {
  enum class Kind {
    No,        // nothing of it
    Readable,  // published as the suite reads it
    Unread,    // announced, under a schema or layout the suite does not read
  };
  Kind kind = Kind::No;
  // Unread: what was seen, for people (the schema string, the variable
  // found instead, where). Target text, unescaped.
  std::string seen;
};

class Suite {
 public:
  virtual ~Suite() = default;
  virtual const ProtocolSpec& protocol() const = 0;
  virtual std::vector<SuiteOption> options() const { return {}; }
  // Refuses settings it cannot use (a usage error, before anything runs).
  virtual Status check(const ScenarioOptions& options) const {
    (void)options;
    return Ok{};
  }
  // Every probe, in registry area order.
  virtual const std::vector<std::unique_ptr<Probe>>& probes() const = 0;
  // Session names in the order they run, and the one an attached target runs
  // (the others need a restart with other settings).
  virtual std::vector<std::string> session_names() const = 0;
  virtual std::string attach_session() const = 0;
  virtual Expected<std::unique_ptr<Session>> open_session(const TargetSpec& target, const std::string& name,
                                                          const ScenarioOptions& options) const = 0;
  // Drives one session (its settings().name). Errors are kit faults.
  virtual Status run_scenario(Session& session, const ScenarioOptions& options) const = 0;
  // What is judged by sending and what is timed by export are data on each
  // requirement (Requirement::judged_by_sending, timed_by_export: the
  // registry's spec/<id>.json), not questions to the suite.
  // After a session closed, while it is still whole: what the run's notes and
  // counters should say about it (e.g. a registration restored).
  virtual void session_closed(const Session& session, const ScenarioOptions& options, RunResult& run) const {
    (void)session;
    (void)options;
    (void)run;
  }
  // Whether process `pid` publishes this protocol now (its library mapped,
  // its mapping present), or announces it under a schema or layout this
  // suite does not read: how `--protocol auto` chooses the suites to run.
  virtual Published published(pid_t pid) const = 0;
  // After the sessions ran: when they found the protocol announced under a
  // schema or layout this suite does not read, what was seen (the run then
  // lists it as not applicable and judges none of its requirements: no
  // failure); "" when it was read (or not found: the probes say so).
  virtual std::string not_applicable(const SessionSet& sessions) const {
    (void)sessions;
    return {};
  }
  // After the sessions ran: when the target showed nothing of the protocol in
  // any of them (a program that is no agent, or one the launch lost), why;
  // the run then skips every requirement with it as the reason, whatever a
  // judge made of the nothing seen (a "feature off" that nothing showed on),
  // and the gate errs on the protocol that judged nothing. "" otherwise.
  virtual std::string published_nothing(const SessionSet& sessions) const {
    (void)sessions;
    return {};
  }
  // Whether the suite reads thread pointers (a TLS record): the only suites a
  // qemu-user target with --gdbstub can be for.
  virtual bool reads_thread_pointers() const { return false; }
  // What the HTML report draws, from the evidence, after the probes judged.
  virtual Figures figures(const SessionSet& sessions) const {
    (void)sessions;
    return {};
  }
};

// Suites register before main (the package's register_protocol()).
void register_suite(const Suite& suite);
std::vector<const Suite*> suites();
// The suite of a protocol (ProtocolSpec::id), or nullptr.
const Suite* find_suite(std::string_view protocol);
// The suite judging a requirement, or nullptr.
const Suite* suite_of_requirement(std::string_view requirement);
// The probe covering a requirement in any suite, or nullptr.
const Probe* probe_for(std::string_view requirement);

}  // namespace tracecorr::conform
