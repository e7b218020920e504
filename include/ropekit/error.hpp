// ropekit/error.hpp — the one exception type ropekit throws.
//
// Validation happens at the edges (Spec, Plan, tensor views, positions); every message names the
// offending field and its value, e.g. "spec.rotary_dim = 63: must be even". Kernels never throw.
#pragma once

#include <stdexcept>
#include <string>

namespace ropekit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace ropekit
