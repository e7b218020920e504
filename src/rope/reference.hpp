// src/rope/reference.hpp — the scalar reference rotation: the specification every SIMD target and
// GPU kernel is tested against, bit for bit (float32 arithmetic with std::fma, one rounding to the
// storage type). Single-threaded.
#pragma once

#include "rope/call.hpp"

namespace ropekit::detail {

void rotate_reference(const RotateJob& job);

}  // namespace ropekit::detail
