#include "otel_nodejs_thread_context/checks.hpp"

#include <elf.h>

#include "otel_nodejs_thread_context/registry.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

const std::string kSymbol(spec::kTlsSymbol);

std::string symbol_facts(const elf::Symbol& s) {
  return elf::describe_type(s.type) + " " + elf::describe_binding(s.binding) + " " + elf::describe_visibility(s.visibility) +
         " size " + std::to_string(s.size);
}

void check_dialect(const AgentLibrary& module, std::vector<Finding>& out) {
  const auto& access = module.elf.tls_access;
  const std::string in = " in " + module.path;
  if (module.elf.executable) {
    out.push_back(not_applicable("NJS-03", module.path + " is an executable: its accesses are local-exec"));
    return;
  }
  std::string relocations;
  for (const auto& r : access.relocations) relocations += (relocations.empty() ? "" : ", ") + r;
  if (access.relocations.empty() && access.own_module_id_vaddr)
    out.push_back(violated("NJS-03", module.path + " reaches " + kSymbol + " with the local-dynamic model",
                           {text_evidence("relocations for " + kSymbol, "a TLSDESC relocation naming it", "a module relocation without a symbol")}));
  else if (access.dialect == elf::TlsDialect::Descriptor && !access.mixed)
    out.push_back(met("NJS-03", 1, "TLS descriptor relocation" + in + ": " + relocations));
  else if (access.dialect == elf::TlsDialect::None)
    out.push_back(not_applicable("NJS-03", "no TLS relocation" + in + " reaches " + kSymbol));
  else
    out.push_back(violated("NJS-03", module.path + " reaches " + kSymbol + " without TLS descriptors only (" + relocations + ")",
                           {text_evidence("relocations for " + kSymbol, "a TLSDESC relocation", relocations)}));
}

// NJS-06 from a walk that failed on what the struct itself says.
void check_struct(const ThreadLook& l, std::vector<Finding>& out) {
  const auto& d = l.walk.discovery;
  const std::string who = "thread " + std::to_string(l.tid) + ": ";
  if (!d.gate_open()) return;
  if (!d.reserved_zero())
    out.push_back(violated("NJS-06", who + "the gate is open and reserved bytes 21..23 are not 0"));
  if (!is_heap_pointer(d.undefined_addr))
    out.push_back(violated("NJS-06", who + "the gate is open and undefined_addr " + hex_address(d.undefined_addr) +
                                         " is not a tagged heap pointer"));
  if (l.walk.end != WalkEnd::Failed || !l.walk.failed_step) return;
  const WalkStep step = *l.walk.failed_step;
  const bool from_struct = step == WalkStep::Gate || step == WalkStep::Key ||
                           (step == WalkStep::Frame && !l.walk.frame);  // cped_slot itself unreadable
  if (from_struct) out.push_back(violated("NJS-06", who + "the gate is open, but " + l.walk.error));
}

void check_record(const ThreadLook& l, std::vector<Finding>& out) {
  const std::string who = "thread " + std::to_string(l.tid) + ": ";
  const std::uint64_t pointer = l.walk.record_pointer.value_or(0);
  // What a misplaced slot leads to is not the writer's record: judged as NJS-08 alone.
  if (pointer % spec::kRecordAlignment != 0) {
    out.push_back(violated("NJS-08", who + "the record pointer " + hex_address(pointer) + " at wrapper + " +
                                         std::to_string(l.walk.discovery.record_slot_offset) + " is not 2-byte aligned"));
    return;
  }
  if (l.record_error) {
    out.push_back(violated("NJS-08", who + "the word at wrapper + " + std::to_string(l.walk.discovery.record_slot_offset) +
                                         " (" + hex_address(pointer) + ") leads to no readable record: " + *l.record_error));
    return;
  }
  if (!l.record) return;
  const auto& r = *l.record;
  if (r.valid != spec::kRecordValidValue && r.valid != spec::kRecordInvalidValue)
    out.push_back(violated("NJS-11", who + "record valid byte is " + std::to_string(r.valid) + ", neither 0 nor 1"));
  if (r.readable() && !r.entries_complete && r.attrs_data_read == r.attrs_data_size)
    out.push_back(violated("NJS-11", who + "an attribute entry does not fit attrs_data_size " + std::to_string(r.attrs_data_size)));
  if (r.readable() && l.key_map)
    for (const auto& e : r.entries)
      if (e.key >= l.key_map->size()) {
        out.push_back(violated("NJS-11", who + "attribute key index " + std::to_string(e.key) + " is outside the key map of " +
                                             std::to_string(l.key_map->size())));
        break;
      }
  if (r.declared_size() > spec::kRecordRecommendedMaxSize)
    out.push_back(violated("NJS-12", who + "record of " + std::to_string(r.declared_size()) + " bytes, over " +
                                         std::to_string(spec::kRecordRecommendedMaxSize)));
}

}  // namespace

std::vector<Finding> check_variable(const AgentLibrary& module) {
  std::vector<Finding> out;
  const auto& sym = module.elf.tls;
  const std::string in = " in " + module.path;
  if (!sym || !sym->defined()) {
    out.push_back(violated("NJS-01", kSymbol + " is not defined among the dynamic symbols" + in));
    return out;
  }
  const std::string facts = symbol_facts(*sym);
  const bool bound = sym->binding == STB_GLOBAL || sym->binding == STB_WEAK;
  const bool visible = sym->visibility == STV_DEFAULT || sym->visibility == STV_PROTECTED;
  if (bound && visible && sym->thread_local_storage()) out.push_back(met("NJS-01", 1, kSymbol + in + ": " + facts));
  else
    out.push_back(violated("NJS-01", kSymbol + in + " is " + facts + ": readers need a global or weak, default or protected STT_TLS symbol",
                           {text_evidence(kSymbol, "TLS, GLOBAL or WEAK, DEFAULT or PROTECTED", facts)}));
  if (sym->size == spec::kTlsVariableSize) out.push_back(met("NJS-02", 1, kSymbol + in + " has size 32"));
  else
    out.push_back(violated("NJS-02", kSymbol + in + " has size " + std::to_string(sym->size) + ", not the 32-byte struct",
                           {text_evidence("st_size", std::to_string(spec::kTlsVariableSize), std::to_string(sym->size))}));
  if (sym->thread_local_storage()) check_dialect(module, out);
  return out;
}

std::vector<Finding> check_reference_data(const std::optional<ReferenceData>& reference, bool publishes) {
  const bool declared = reference && reference->schema_version_value;
  if (!declared && !publishes)  // nothing published and nothing declared: NJS-10's way of not taking part
    return {not_applicable("NJS-09", "no thread's gate is open and no schema is declared")};
  if (!reference) return {violated("NJS-09", "no process context could be read: readers never select the walk")};
  const auto& r = *reference;
  std::vector<Finding> out;
  if (!r.schema_version)
    out.push_back(violated("NJS-09", r.schema_version_value ? "threadlocal.schema_version is not a string"
                                                            : "the process context carries no threadlocal.schema_version"));
  else if (!r.known_schema())
    out.push_back(violated("NJS-09", "threadlocal.schema_version is \"" + *r.schema_version + "\", not nodejs_v1_dev or nodejs_v1"));
  if (!r.key_map)
    out.push_back(violated("NJS-09", r.key_map_value ? "threadlocal.attribute_key_map is not an array of at most 256 strings"
                                                     : "the process context carries no threadlocal.attribute_key_map"));
  else if (!r.key_map_distinct())
    out.push_back(violated("NJS-09", "threadlocal.attribute_key_map names a key twice"));
  if (out.empty()) out.push_back(met("NJS-09", 1, "schema " + *r.schema_version + ", " + std::to_string(r.key_map->size()) + " keys"));
  return out;
}

std::vector<Finding> check_thread(const ThreadLook& l) {
  std::vector<Finding> out;
  check_struct(l, out);
  if (l.walk.end == WalkEnd::NotInFrame && l.misplaced)
    out.push_back(violated("NJS-07", "thread " + std::to_string(l.tid) + ": the ALS key is entry " +
                                         std::to_string(l.misplaced->index) + ", not on the chain of bucket " +
                                         std::to_string(l.misplaced->hashed_bucket) + " that als_identity_hash " +
                                         std::to_string(l.walk.discovery.als_identity_hash) + " names"));
  if (l.walk.end == WalkEnd::Record) check_record(l, out);
  return out;
}

}  // namespace tracecorr::otel_nodejs_thread_context
