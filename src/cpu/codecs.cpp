// The storage-conversion entry points of the CPU backend (declared in rope/backend.hpp): Highway compiles
// this file once per target, each pass including codecs-inl.h; the HWY_ONCE part holds the dispatch tables.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/codecs.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/codecs-inl.h"

#if HWY_ONCE

#include "cpu/dispatch.hpp"

namespace ropekit::cpu {

HWY_EXPORT(CacheConvertKernelFor);
HWY_EXPORT(E4m3Widen);

CacheConvertKernel select_cache_convert_kernel() {
  const Selection target = current_selection();
  return HWY_DISPATCH_TABLE(CacheConvertKernelFor)[target.index](target.native_bf16);
}

E4m3WidenKernel select_e4m3_widen_kernel() { return HWY_DISPATCH_TABLE(E4m3Widen)[current_selection().index]; }

}  // namespace ropekit::cpu

#endif  // HWY_ONCE
