// PROC: the process storage, watched from the moment the library is mapped.
#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

Evidence sighting_evidence(const StorageSighting& s, const std::string& label, std::string expected,
                           std::string actual) {
  Evidence e;
  e.label = label + " at " + hex_address(s.pointer);
  e.expected = std::move(expected);
  e.actual = std::move(actual);
  e.bytes.assign(s.raw.begin(), s.raw.begin() + static_cast<long>(std::min<std::size_t>(s.raw.size(), 128)));
  e.fields = decode_storage_fields(s.raw);
  return e;
}

bool nul_terminated(const std::string& s) { return !s.empty() && s.back() == '\0'; }

// Nothing published: the agent's fault, unless the socket directory tracecorr
// handed it could not serve it (a container's root without it, made too late);
// either way the agent's own words about that directory are quoted.
std::vector<Finding> nothing_published(const SessionFacts& f) {
  std::string said;
  if (f.socket_dir_complaint) said = "; the agent said: \"" + *f.socket_dir_complaint + "\"";
  std::vector<Finding> out;
  if (f.socket_dir_unusable)
    out.push_back(kit_error("PROC-01", "nothing was published, and the socket directory tracecorr gave the agent could not "
                                       "serve it: " + *f.socket_dir_unusable + said));
  else
    out.push_back(violated("PROC-01", "the process storage pointer stayed 0 for the whole session: nothing was published" + said));
  for (const char* id : {"PROC-02", "PROC-03", "PROC-04"}) out.push_back(not_applicable(id, "nothing published"));
  return out;
}

class ProcProbe final : public Probe {
 public:
  std::string name() const override { return "proc"; }
  std::vector<std::string> requirements() const override { return {"PROC-01", "PROC-02", "PROC-03", "PROC-04"}; }
  std::vector<std::string> sessions() const override { return {kEnabledSession}; }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s) return not_run(requirements());
    if (!s->library || !s->library->process_pointer_addr)
      return not_run(requirements(), "no library exporting the process storage symbol (see ELF)");
    auto sightings = facts(*s).storage_sightings;
    std::vector<const StorageSighting*> published;
    for (const auto& x : sightings)
      if (x.pointer != 0) published.push_back(&x);
    if (published.empty()) return nothing_published(facts(*s));

    std::vector<Finding> out;
    const StorageSighting& first = *published.front();
    // PROC-01: complete when first visible, and the same ever after.
    {
      std::optional<Finding> bad;
      for (const auto* x : published) {
        if (x->error && x->error->requirement != "PROC-03") {
          bad = violated("PROC-01", "the published storage does not hold the complete layout: " + x->error->message(),
                         {sighting_evidence(*x, "process storage", "minor + three utf8-str", x->error->message())});
          break;
        }
        if (x != published.front() && x->pointer == first.pointer && x->raw != first.raw && first.decoded) {
          bad = violated("PROC-01",
                         "the storage changed after it was published: it was not complete when the pointer was set",
                         {sighting_evidence(first, "process storage when first visible", "final content",
                                            "different content"),
                          sighting_evidence(*x, "process storage later", "the content first seen", "changed")});
          break;
        }
      }
      out.push_back(bad ? *bad : met("PROC-01", sightings.size(), "complete and unchanged from the first read (" +
                                                    std::to_string(sightings.size()) + " reads)"));
    }
    const ProcessStorage* decoded = nullptr;
    for (const auto* x : published)
      if (x->decoded) decoded = &*x->decoded;
    // PROC-02
    if (!decoded)
      out.push_back(not_applicable("PROC-02", "the storage never decoded (see PROC-01/PROC-03)"));
    else if (decoded->minor == 0)
      out.push_back(violated("PROC-02", "layout-minor-version is 0",
                             {sighting_evidence(*published.back(), "process storage", "layout_minor_version 1", "0")}));
    else
      out.push_back(met("PROC-02", 1, "layout-minor-version " + std::to_string(decoded->minor) +
                                       (decoded->minor > 1 ? " (a later minor: extra fields ignored)" : "")));
    // PROC-03
    {
      std::optional<Finding> bad;
      for (const auto* x : published)
        if (x->error && x->error->requirement == "PROC-03") {
          bad = violated("PROC-03", x->error->message(),
                         {sighting_evidence(*x, "process storage", "uint32 length + UTF-8", x->error->message())});
          break;
        }
      if (!bad && decoded) {
        for (const auto* field : {&decoded->service_name, &decoded->service_environment, &decoded->socket_file_path})
          if (nul_terminated(*field)) {
            bad = violated("PROC-03", "a string's length counts a terminating NUL (\"" + field->substr(0, 60) + "\\0\")",
                           {sighting_evidence(*published.back(), "process storage", "no NUL terminator",
                                              "length includes the NUL")});
            break;
          }
      }
      out.push_back(bad ? *bad : met("PROC-03", decoded ? 1 : 0, "service \"" + (decoded ? decoded->service_name : "") + "\", environment \"" +
                                                    (decoded ? decoded->service_environment : "") + "\", socket \"" +
                                                    (decoded ? decoded->socket_file_path : "") + "\""));
    }
    // PROC-04: did the socket exist when the storage first became visible?
    if (sessions.attach_mode)
      out.push_back(not_applicable("PROC-04", "attach mode: the process start was not watched"));
    else if (first.socket && first.socket->is_socket)
      out.push_back(met("PROC-04", 1, "the socket existed when the storage first became visible"));
    else if (!first.decoded)
      out.push_back(not_applicable("PROC-04", "the storage did not decode when first visible (see PROC-01)"));
    else
      out.push_back(violated("PROC-04", "the storage was visible before its socket existed",
                             {sighting_evidence(first, "process storage when first visible",
                                                "socket " + first.decoded->socket_file_path + " exists",
                                                first.socket_error ? first.socket_error->message() : "not a socket")}));
    return out;
  }
};

}  // namespace

std::unique_ptr<Probe> make_proc_probe() { return std::make_unique<ProcProbe>(); }

}  // namespace tracecorr::elastic_v1
