// The list a kind of plug-in registers in (protocols, suites, inspectors):
// packages add to it from static initialisers before main, so each list lives
// in a function-local static of its owner, and adding the same one twice is a
// no-op.
#pragma once

#include <algorithm>
#include <mutex>
#include <vector>

namespace tracecorr {

template <class T>
class PluginRegistry {
 public:
  // False when `item` was already registered.
  bool add(const T& item) {
    std::lock_guard lock(mutex_);
    if (std::find(items_.begin(), items_.end(), &item) != items_.end()) return false;
    items_.push_back(&item);
    return true;
  }
  // In registration order.
  std::vector<const T*> all() const {
    std::lock_guard lock(mutex_);
    return items_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<const T*> items_;
};

}  // namespace tracecorr
