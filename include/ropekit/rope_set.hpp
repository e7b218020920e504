// ropekit/rope_set.hpp — immutable Ropes for sequences at different lengths, shared between threads.
//
// A Rope never changes after construction. The variants whose plan depends on the current length
// (dynamic NTK, LongRoPE: depends_on_length) need one Rope per distinct plan, and a server whose
// sequences sit at different lengths needs several at once. A RopeSet builds each once and hands the
// same immutable Rope to every sequence (and thread) whose length plans to it:
//
//   ropekit::RopeSet ropes(spec);
//   std::shared_ptr<const ropekit::Rope> rope = ropes.at(sequence_length);
//   rope->apply(...);                       // concurrently with sequences at other lengths
//
// Lengths whose plans are equal share one Rope: every length for a variant that ignores it, every
// length up to max_position_embeddings for dynamic NTK, LongRoPE's short and long halves. With
// `length_bucket` = b > 1 a length is planned as if it were ceil(length / b) · b (dynamic NTK then
// builds one Rope per bucket instead of one per length; choose b dividing max_position_embeddings so
// that lengths below it keep the unscaled plan). b = 1 is Hugging Face's plan for the exact length.
//
// Numerics: each Rope is Rope(spec, mode, planned length) — make_plan's and the Rope's contracts.
// Whether keys cached under one length must be re-rotated for another: needs_rerotation(a->plan(),
// b->plan()) (two different Rope objects may hold equal plans after one was dropped).
// Memory: at most max_ropes Ropes are kept (each with its own growing table); beyond that the least
// recently used is dropped from the set — callers still holding it keep it alive.
// Thread safety: every member may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ropekit/rope.hpp"
#include "ropekit/spec.hpp"

namespace ropekit {

// (At namespace scope: a nested struct's member initializers cannot serve as a default argument of
// its enclosing class.)
struct RopeSetOptions {
  std::int64_t length_bucket = 1;  // plan lengths rounded up to a multiple of this (>= 1)
  std::size_t max_ropes = 64;      // distinct plans kept (>= 1)
};

class RopeSet {
 public:
  using Options = RopeSetOptions;

  // Errors (ropekit::Error): an invalid spec or angle mode (as Rope's constructor), length_bucket < 1,
  // max_ropes == 0.
  explicit RopeSet(Spec spec, AngleMode mode = AngleMode::Accurate, Options options = {});
  ~RopeSet();
  RopeSet(const RopeSet&) = delete;
  RopeSet& operator=(const RopeSet&) = delete;

  const Spec& spec() const { return spec_; }
  AngleMode angle_mode() const { return mode_; }
  const Options& options() const { return options_; }

  // The Rope for a sequence of current length `current_length` in [1, kPositionLimit), built on first
  // use of its plan. Errors: a length outside that range (the message names it).
  std::shared_ptr<const Rope> at(std::int64_t current_length) const;
  // The Rope at initialisation (no current length: HF's seq_len = None).
  std::shared_ptr<const Rope> initial() const { return initial_; }
  // The length `current_length` is planned at (rounded up to the bucket, capped below kPositionLimit).
  std::int64_t planned_length(std::int64_t current_length) const;
  // How many distinct Ropes the set holds now (besides initial()).
  std::size_t size() const;

 private:
  struct Entries;
  Spec spec_;
  AngleMode mode_;
  Options options_;
  bool by_length_;  // false: the plan ignores the length, initial_ serves every length
  std::shared_ptr<const Rope> initial_;
  std::unique_ptr<Entries> entries_;
};

}  // namespace ropekit
