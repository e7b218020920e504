// src/call/prepare.hpp — the one prepare path. Every RotateCall ropekit makes — Rope::prepare and
// apply, attention's rotations on load, the fused append's, linear attention's features, the caches'
// K-shift and re-rotation — is made by detail::prepare: validated once (validate_call, or a CheckedCall
// a consumer got from it), its angle source chosen, the backend's kernel chosen.
#pragma once

#include <memory>

#include "rope/validate.hpp"
#include "ropekit/rope.hpp"

namespace ropekit::detail {

struct PrepareOptions {
  // Write: the call rotates q/k in place or into q_out/k_out. Read: a consumer rotates the rows into
  // buffers of its own (fused attention, linear attention, the fused append): the call's job() feeds the
  // consumer's per-target code and its run() does nothing.
  ViewUse use = ViewUse::Write;
  CallNames names = {};  // what errors call the views and positions
  // Angles from exactly this table, which the call keeps alive (positions outside it are an error)...
  std::shared_ptr<const Table> table;
  // ...or from this one, not kept alive (a call that runs at once: Rope::apply(args, table)).
  const Table* borrowed_table = nullptr;
  // Neither: from the Rope's growing table or on the fly, as the call's size and reach make worth it —
  // unless on_the_fly, which always computes them per token (the same bits).
  bool on_the_fly = false;
  // false: a call that runs at once, while its Rope exists (apply, one-shot appends): it pins neither the
  // plan nor the growing table, so it cannot take set_positions.
  bool keep_plan = true;
  // Device: every pointer is a device pointer (validate_call's PositionsAt). The positions' values are never read,
  // so no table is chosen by reach: the angles come from the given table (which the device backend holds a copy
  // of; a position past it is the device's to report) or on the fly.
  PositionsAt positions = PositionsAt::Host;
};

// Validates args (validate_call with options.use, options.names and options.positions) and resolves the call.
RotateCall prepare(const Rope& rope, const RotateArgs& args, const PrepareOptions& options = {});
// The same for arguments a consumer has already validated (its CheckedCall holds them and their use;
// options.use, options.names and options.positions are not read).
RotateCall prepare(const Rope& rope, const CheckedCall& checked, const PrepareOptions& options = {});

}  // namespace ropekit::detail
