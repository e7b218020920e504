// ropekit/ropekit.hpp — everything public.
#pragma once

#include "ropekit/analysis.hpp"
#include "ropekit/call.hpp"
#include "ropekit/attention.hpp"
#include "ropekit/config.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/encodings.hpp"
#include "ropekit/error.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/linear_attention.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/rope.hpp"
#include "ropekit/spec.hpp"
#include "ropekit/table.hpp"
#include "ropekit/tensor.hpp"
