// Dispatch for cpu::update_rows: Highway compiles attention-inl.h once per target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/attention-inl.h"

#if HWY_ONCE
namespace ropekit::cpu {

HWY_EXPORT(UpdateRows);

void update_rows(const RowTile& tile, RowState* states) { HWY_DYNAMIC_DISPATCH(UpdateRows)(tile, states); }

}  // namespace ropekit::cpu
#endif  // HWY_ONCE
