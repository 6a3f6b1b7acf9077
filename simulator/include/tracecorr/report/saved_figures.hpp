// Reading the figures of a saved JSON report (tracecorr report --html): the
// lenient getters every reader of a saved report's figures uses, and the
// packages' readers of the shapes their figures were saved in before the
// engine's figures were generic (a package registers one, the engine asks it
// when a report's figures are not in the engine's shape).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tracecorr/conform/figures.hpp"

namespace tracecorr::report {

// The member `key` of `j` when it has `fallback`'s type, else `fallback`:
// a saved report is hostile, a wrong type is no reason to fail.
template <typename T>
T saved_value(const nlohmann::ordered_json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else {
    return it->is_number() ? it->template get<T>() : fallback;
  }
}

// The array `key` of `j`, or an empty one.
const nlohmann::ordered_json& saved_list(const nlohmann::ordered_json& j, const char* key);
// The object `key` of `j`, or an empty one.
const nlohmann::ordered_json& saved_object(const nlohmann::ordered_json& j, const char* key);
// A saved stack list ("frames", "count"), bounded as the engine's own reader bounds it.
conform::StackCount saved_stack(const nlohmann::ordered_json& j);

// A package's reader of its figures saved in an older shape. Returns nullopt
// when `figures` is not that shape; the timelines (a shape that never changed)
// are the engine's to read.
class SavedFiguresReader {
 public:
  virtual ~SavedFiguresReader() = default;
  virtual std::optional<conform::Figures> read(const nlohmann::ordered_json& figures) const = 0;
};

// Packages register before main (their register_protocol()); adding one twice is a no-op.
void register_saved_figures_reader(const SavedFiguresReader& reader);

}  // namespace tracecorr::report
