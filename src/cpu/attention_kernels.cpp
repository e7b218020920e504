// Dispatch for cpu::update_row: Highway compiles attention-inl.h once per target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/attention-inl.h"

#if HWY_ONCE
namespace ropekit::cpu {

HWY_EXPORT(UpdateRow);

void update_row(const RowTile& tile, RowState& state) { HWY_DYNAMIC_DISPATCH(UpdateRow)(tile, state); }

}  // namespace ropekit::cpu
#endif  // HWY_ONCE
