// The angle-row entry points of the CPU backend (declared in rope/backend.hpp): the table fill. Highway
// compiles this file once per target, each pass including angles-inl.h; the HWY_ONCE part holds the
// dispatch tables.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/angles.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/angles-inl.h"

#if HWY_ONCE

#include "cpu/dispatch.hpp"

namespace ropekit::cpu {

HWY_EXPORT(FloatAngleRows);
HWY_EXPORT(ExactAngleRows);

void angle_rows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, float* cos, float* sin) {
  HWY_DISPATCH_TABLE(FloatAngleRows)[current_selection().index](angles, first, count, cos, sin);
}

void exact_angle_rows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, double* cos,
                      double* sin) {
  HWY_DISPATCH_TABLE(ExactAngleRows)[current_selection().index](angles, first, count, cos, sin);
}

}  // namespace ropekit::cpu

#endif  // HWY_ONCE
