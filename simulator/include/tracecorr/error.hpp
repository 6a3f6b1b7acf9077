// Errors and results shared by every tracecorr reader and decoder.
//
// Everything tracecorr reads is hostile input. A failure therefore carries
// three things a user can act on: what was wrong, where (an address, an offset,
// a file, a field), and, when the fault is the target's, the requirement it breaks.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace tracecorr {

// What kind of failure, for code that must tell failures apart (which
// requirement a fault breaks, which HTTP status to answer): it reads the
// kind, never the text.
enum class ErrorKind {
  kUnspecified,
  kUnmapped,     // target memory: no mapping there, or one without read permission
  kGone,         // the process (or thread) no longer exists
  kPermission,   // the kernel refused
  kTruncated,    // input ends before its declared or required length
  kTooLong,      // input exceeds a bound
  kNotFound,     // a path that does not resolve
  kNotASocket,   // a path that resolves to something other than a socket
  kNotHeld,      // a socket the target holds no descriptor for (someone else's)
  kWrongType,    // a socket of another type than asked (stream for datagram)
  kBadSignature,       // a structure's magic bytes are not what its format names
  kUnsupportedVersion, // a structure's version field names a version the reader does not read
  kMalformed,          // bytes that do not follow their format (an encoding error, named where)
  kNotReady,           // a structure stayed marked as being written for every attempt to read it, or its
                       // owner has not set it up yet (a TLS descriptor or module id the loader has not relocated)
  kKeptChanging,       // a structure changed under every attempt to read it consistently
  kNotAllocated,       // per-thread storage the reader follows does not exist for this thread yet (a module's
                       // dynamic TLS block the thread has not touched since the module was loaded)
  kUnsupported,        // a layout or model the reader does not read (a C library or machine it does not know)
};

struct Error {
  std::string what;         // "string length 4294967295 exceeds the 65536-byte bound"
  std::string where;        // "process storage at 0x7f00...+2 (service_name)"
  std::string requirement;  // a requirement ID, or empty when the fault is not the target's
  ErrorKind kind = ErrorKind::kUnspecified;

  std::string message() const {
    std::string m = where.empty() ? what : where + ": " + what;
    if (!requirement.empty()) m += " [" + requirement + "]";
    return m;
  }
  // Adds outer context: "while reading pid 42" + ": " + inner where.
  Error within(const std::string& outer) const {
    Error e = *this;
    e.where = where.empty() ? outer : outer + ": " + where;
    return e;
  }
};

// A value or an Error. Kept minimal: C++20 has no std::expected.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}
  Expected(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

struct Ok {};
using Status = Expected<Ok>;

inline Error make_error(std::string what, std::string where = {}, std::string requirement = {}) {
  return Error{std::move(what), std::move(where), std::move(requirement)};
}
inline Error make_error(ErrorKind kind, std::string what, std::string where = {}, std::string requirement = {}) {
  return Error{std::move(what), std::move(where), std::move(requirement), kind};
}

}  // namespace tracecorr
