#include "elastic_v1/checks.hpp"

#include <elf.h>
#include <sys/stat.h>

#include <cstdio>

#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {
namespace {

std::string describe_symbol(const elf::Symbol& s) {
  return "type " + elf::describe_type(s.type) + ", binding " +
         (s.binding == STB_GLOBAL ? "GLOBAL" : s.binding == STB_WEAK ? "WEAK" : "LOCAL") + ", visibility " +
         (s.visibility == STV_DEFAULT ? "DEFAULT" : "not DEFAULT") + ", size " + std::to_string(s.size) +
         (s.defined() ? "" : ", undefined (imported, not defined here)");
}

Finding check_symbol(const std::string& id, const std::optional<elf::Symbol>& sym, std::string_view name,
                     unsigned wanted_type) {
  std::string expected = "type " + elf::describe_type(wanted_type) + ", binding GLOBAL, visibility DEFAULT, size " +
                         std::to_string(elastic_v1::spec::kPointerSize);
  if (!sym)
    return violated(id, std::string(name) + " is not among the library's dynamic symbols",
                    {text_evidence(std::string(name), expected, "absent")});
  bool ok = sym->defined() && sym->type == wanted_type && sym->binding == STB_GLOBAL &&
            sym->visibility == STV_DEFAULT && sym->size == elastic_v1::spec::kPointerSize;
  auto actual = describe_symbol(*sym);
  if (ok) return met(id, 1, std::string(name) + ": " + actual);
  return violated(id, std::string(name) + " is exported as " + actual, {text_evidence(std::string(name), expected, actual)});
}

}  // namespace

std::string mode_string(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

std::vector<Finding> check_library(const AgentLibrary& lib) {
  std::vector<Finding> out;
  if (lib.name_matches)
    out.push_back(met("ELF-01", 1, lib.path + " matches the name pattern"));
  else
    out.push_back(violated("ELF-01",
                           lib.path + " defines the protocol's symbols, but its name does not match, so profilers "
                                      "will never look at it",
                           {text_evidence("library path", std::string(elastic_v1::spec::kLibraryNameRegex), lib.path)}));
  out.push_back(check_symbol("ELF-02", lib.elf.process_symbol, elastic_v1::spec::kProcessStorageSymbol, STT_OBJECT));
  out.push_back(check_symbol("ELF-03", lib.elf.tls, elastic_v1::spec::kTlsSymbol, STT_TLS));
  const auto& access = lib.elf.tls_access;
  std::string relocs;
  for (const auto& r : access.relocations) relocs += (relocs.empty() ? "" : ", ") + r;
  if (access.dialect == elf::TlsDialect::Descriptor && !access.mixed)
    out.push_back(met("ELF-04", 1, "TLS descriptor relocation: " + relocs));
  else
    out.push_back(violated(
        "ELF-04",
        std::string("the TLS variable is accessed with the ") + elf::to_string(access.dialect) + " dialect" +
            (access.mixed ? " (descriptor and traditional relocations both present)" : "") +
            "; profilers need a TLS descriptor (compile with " +
            (lib.elf.machine == elf::Machine::AArch64 ? "-mtls-dialect=desc" : "-mtls-dialect=gnu2") + ")",
        {text_evidence("relocations for " + std::string(elastic_v1::spec::kTlsSymbol), "a TLSDESC relocation only",
                       relocs.empty() ? "none" : relocs)}));
  return out;
}

std::vector<Finding> check_socket(const std::string& path, const std::optional<SocketFacts>& socket,
                                  const std::optional<Error>& error, std::optional<bool> connected) {
  if (!socket) {
    std::string why = error ? error->message() : "could not be examined";
    return {not_applicable("SOCK-01", "no socket at " + path),
            violated("SOCK-02", "socket-file-path \"" + path + "\" does not lead to a socket: " + why,
                     {text_evidence("socket-file-path", "a bound datagram socket", why)}),
            not_applicable("SOCK-03", "no socket at " + path), not_applicable("SOCK-04", "no socket at " + path)};
  }
  std::vector<Finding> out;
  if (!socket->is_socket) {
    out.push_back(not_applicable("SOCK-01", path + " is " + describe_file_type(socket->file_type) + ", not a socket"));
  } else if (!socket->bound_by_target) {
    // Someone else's socket: its type says nothing about the agent's (SOCK-02 fails).
    out.push_back(not_applicable("SOCK-01", "the target holds no descriptor for the socket at " + path + " (see SOCK-02)"));
  } else if (socket->datagram) {
    out.push_back(met("SOCK-01", 1, "AF_UNIX SOCK_DGRAM (the target's fd " + std::to_string(socket->target_fd) +
                                     ", bound to that file; sock_diag type 2)"));
  } else {
    out.push_back(violated("SOCK-01", "the socket is not a datagram socket",
                           {text_evidence("type of the target's socket bound there (sock_diag)", "2 (SOCK_DGRAM)",
                                          std::to_string(socket->socket_type) +
                                              (socket->socket_type == 1 ? " (SOCK_STREAM)" : ""))}));
  }
  bool reachable = socket->is_socket && socket->bound_by_target && connected.value_or(true);
  if (reachable)
    out.push_back(met("SOCK-02", 1,
                      path + " resolves inside the target's root to a socket it holds" +
                          (connected ? ", and accepts a connection" : "")));
  else
    out.push_back(violated(
        "SOCK-02",
        "socket-file-path \"" + path + "\" does not name a socket the agent holds: it is " +
            (socket->is_socket ? std::string("a socket") : describe_file_type(socket->file_type)) +
            (socket->bound_by_target ? ", held by the target" : ", not held by the target"),
        {text_evidence("socket-file-path", "a socket bound by the target, reachable through /proc/PID/root",
                       std::string(socket->is_socket ? "a socket" : describe_file_type(socket->file_type)) +
                           (socket->bound_by_target ? ", held by the target" : ", not held by the target") +
                           (error ? "; connect: " + error->message() : ""))}));
  if (!socket->bound_by_target)
    out.push_back(not_applicable("SOCK-03", "the target holds no descriptor for the socket"));
  else if (socket->target_nonblocking)
    out.push_back(met("SOCK-03", 1, "the target's descriptor has O_NONBLOCK"));
  else
    out.push_back(violated("SOCK-03", "the agent's socket descriptor (fd " + std::to_string(socket->target_fd) + ") is blocking",
                           {text_evidence("/proc/PID/fdinfo/" + std::to_string(socket->target_fd) + " flags",
                                          "O_NONBLOCK (04000) set", "not set")}));
  bool private_socket = socket->owner == socket->target_uid && (socket->mode & 0022) == 0;
  std::string actual = "owner uid " + std::to_string(socket->owner) + " (target uid " +
                       std::to_string(socket->target_uid) + "), mode " + mode_string(socket->mode);
  if (private_socket)
    out.push_back(met("SOCK-04", 1, actual));
  else
    out.push_back(violated("SOCK-04", "other users can write to the socket: " + actual,
                           {text_evidence(path, "owned by the agent's user, no group/other write bits", actual)}));
  return out;
}

std::string requirement_of_socket_error(const Error& e) {
  switch (e.kind) {
    case ErrorKind::kNotFound:
    case ErrorKind::kNotHeld: return "SOCK-02";
    case ErrorKind::kNotASocket:
    case ErrorKind::kWrongType: return "SOCK-01";
    default: return "";
  }
}

}  // namespace tracecorr::elastic_v1
