// src/cpu/dispatch.hpp — which SIMD target the CPU kernels run on.
//
// ropekit keeps its own choice (ropekit::set_simd_target) instead of changing Highway's global one:
// listing targets is then a pure query, changing the choice is one atomic store, and every call reads
// the choice once, at the top, and runs one target's code throughout (gemma.cpp's "dispatch once").
// Per-target code is compiled by Highway's foreach_target.h and exported with HWY_EXPORT; a call
// picks its entry with dispatch_index().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ropekit::cpu {

// Targets compiled into ropekit that this CPU supports, best first (Highway HWY_* bits).
const std::vector<std::int64_t>& available_targets();
// The target calls run on now: the one set_simd_target chose, else the best available.
std::int64_t current_target();
// Restricts calls to `target` (one of available_targets(); 0 = the best again).
void select_target(std::int64_t target);
// Index of `target`'s entry in a HWY_EXPORT dispatch table.
std::size_t dispatch_index(std::int64_t target);
// dispatch_index(current_target()), kept up to date by select_target: one relaxed load per call.
std::size_t current_index();

}  // namespace ropekit::cpu
