// Dispatch for the attention driver (cpu::run_attention, rope/backend.hpp): Highway compiles attention-inl.h once per
// target; a call picks one target's RunAttention at the top and runs it throughout.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/attention-inl.h"

#if HWY_ONCE

#include "cpu/dispatch.hpp"

namespace ropekit::cpu {

HWY_EXPORT(RunAttention);

void run_attention(const detail::AttentionJob& job, int threads) {
  HWY_DISPATCH_TABLE(RunAttention)[current_index()](job, threads);
}

}  // namespace ropekit::cpu
#endif  // HWY_ONCE
