// src/rope/sincos_turns-inl.h — cos and sin of p·inv_freq[j] from the turn (see rope/angles.hpp),
// written once for every arithmetic that runs it: the scalar reference (src/rope/angles.cpp, Ops =
// double) and each SIMD target (src/cpu/rotate-inl.h, Ops = Highway vectors of double). Both
// instantiate this one template, so the two run the same operation sequence and give the same bits
// (tests/targets_test.cpp, Targets/Angles: every target's rows and doubles against the scalar ones).
//
// No include guard: included inside the namespace that instantiates it (Highway's per-target
// namespaces re-include it once per target, as the -inl.h convention does). Every step is an IEEE
// operation with one rounding (or none), so no step depends on the target:
//   ph = p·hi                 pe = fma(p, hi, −ph)     exact: p·hi = ph + pe
//   turn = (ph − round(ph)) + fma(p, lo, pe)           round: to nearest, ties to even; ph − n exact
//   t = fma(turn, 4, 1.5·2^52)                          = 1.5·2^52 + q, q = round(4·turn) (see below)
//   q = t − 1.5·2^52          f = fma(q, −1/4, turn)   exact; |f| ≤ 1/8 turn
//   x = f·2π                  x² = x·x
//   sin x = fma(x·x², S(x²), x),  cos x = fma(x², C(x²), 1)   Taylor to x^17 / x^16, Horner by fma
//   (cos, sin) of p·ω = (cos x, sin x) turned by q quarter turns: swaps and sign flips (exact), read
//   from the low two bits of t's significand, which hold q mod 4.
// The caller rounds the doubles once to float32.
//
// Ops provides V (the value), U (its bits), M (a bit test's result) and Set, Mul, Sub, Add, MulAdd (fma),
// MulSub (fma(a, b, −c)), Round (nearest even), Bits (the bit pattern), Increment (+1), Bit0 (bit 0 is
// set), Bit1ToSign (bit 1 moved to the sign bit, the rest cleared), XorSign (the value with its bits
// XOR-ed with a sign mask), Select(m, yes, no).

// How the functions are declared: inline, or __host__ __device__ inline where the CUDA kernel body includes this
// (src/cuda/rotate_body.hpp defines it first).
#ifndef ROPEKIT_TURNS_FN
#define ROPEKIT_TURNS_FN inline
#endif
// The Taylor coefficients it reads (a device copy in the CUDA kernel's device pass: host variables are not there).
#ifndef ROPEKIT_TURNS_SIN
#define ROPEKIT_TURNS_SIN detail::kSinTaylor
#define ROPEKIT_TURNS_COS detail::kCosTaylor
#endif

// k[0]·x^(N−1) + … + k[N−1] by Horner's rule, one fma per step (unrolled: the steps are a pack).
template <class Ops, std::size_t N, std::size_t... I>
ROPEKIT_TURNS_FN typename Ops::V HornerOf(typename Ops::V x, const std::array<double, N>& k,
                                          std::index_sequence<I...>) {
  typename Ops::V r = Ops::Set(k[0]);
  ((r = Ops::MulAdd(r, x, Ops::Set(k[I + 1]))), ...);
  return r;
}

template <class Ops>
ROPEKIT_TURNS_FN void SinCosOfTurns(typename Ops::V p, typename Ops::V hi, typename Ops::V lo, typename Ops::V& cos_out,
                                    typename Ops::V& sin_out) {
  using V = typename Ops::V;
  const V ph = Ops::Mul(p, hi);
  const V pe = Ops::MulSub(p, hi, ph);
  const V turn = Ops::Add(Ops::Sub(ph, Ops::Round(ph)), Ops::MulAdd(p, lo, pe));
  // |4·turn| ≤ 2 + a rounding, and 1.5·2^52 has unit spacing there: the fma's one rounding is to the
  // nearest integer, ties to even (1.5·2^52 is even), i.e. round(4·turn) — and t's low significand bits
  // are q in two's complement. One operation instead of a multiply and a two-µop round, and q mod 4
  // without comparisons.
  constexpr double kShift = 0x1.8p52;
  const V t = Ops::MulAdd(turn, Ops::Set(4.0), Ops::Set(kShift));
  const V q = Ops::Sub(t, Ops::Set(kShift));
  const V f = Ops::MulAdd(q, Ops::Set(-0.25), turn);
  const V x = Ops::Mul(f, Ops::Set(detail::kTwoPiHi));
  const V x2 = Ops::Mul(x, x);

  constexpr std::size_t kSin = detail::kSinTaylor.size(), kCos = detail::kCosTaylor.size();
  const V s = HornerOf<Ops>(x2, ROPEKIT_TURNS_SIN, std::make_index_sequence<kSin - 1>());
  const V c = HornerOf<Ops>(x2, ROPEKIT_TURNS_COS, std::make_index_sequence<kCos - 1>());
  const V sin_x = Ops::MulAdd(Ops::Mul(x, x2), s, x);
  const V cos_x = Ops::MulAdd(x2, c, Ops::Set(1.0));

  // k = q mod 4 (q ∈ {−2, …, 2}: −1 → 3, ±2 → 2): cos(x + qπ/2), sin(x + qπ/2) are
  //   k = 0: (c, s)   k = 1: (−s, c)   k = 2: (−c, −s)   k = 3: (s, −c)
  // — swapped where k is odd, the sine negated where bit 1 of k is set, the cosine where bit 1 of k + 1
  // is. A sign flip is unary minus's (the sign bit), so the bits are those of selects and negations.
  const typename Ops::U k = Ops::Bits(t);
  const typename Ops::M odd = Ops::Bit0(k);
  cos_out = Ops::XorSign(Ops::Select(odd, sin_x, cos_x), Ops::Bit1ToSign(Ops::Increment(k)));
  sin_out = Ops::XorSign(Ops::Select(odd, cos_x, sin_x), Ops::Bit1ToSign(k));
}
