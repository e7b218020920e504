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
//   q = round(4·turn)         f = turn − q/4           exact; |f| ≤ 1/8 turn
//   x = f·2π                  x² = x·x
//   sin x = fma(x·x², S(x²), x),  cos x = fma(x², C(x²), 1)   Taylor to x^17 / x^16, Horner by fma
//   (cos, sin) of p·ω = (cos x, sin x) turned by q quarter turns: swaps and sign flips (exact).
// The caller rounds the doubles once to float32.
//
// Ops provides V (the value), M (a comparison's result) and Set, Mul, Sub, Add, MulAdd (fma), MulSub
// (fma(a, b, −c)), Round (nearest even), Abs, Neg, Eq, Or, Select(m, yes, no).

// k[0]·x^(N−1) + … + k[N−1] by Horner's rule, one fma per step (unrolled: the steps are a pack).
template <class Ops, std::size_t N, std::size_t... I>
inline typename Ops::V HornerOf(typename Ops::V x, const std::array<double, N>& k, std::index_sequence<I...>) {
  typename Ops::V r = Ops::Set(k[0]);
  ((r = Ops::MulAdd(r, x, Ops::Set(k[I + 1]))), ...);
  return r;
}

template <class Ops>
inline void SinCosOfTurns(typename Ops::V p, typename Ops::V hi, typename Ops::V lo, typename Ops::V& cos_out,
                          typename Ops::V& sin_out) {
  using V = typename Ops::V;
  const V ph = Ops::Mul(p, hi);
  const V pe = Ops::MulSub(p, hi, ph);
  const V turn = Ops::Add(Ops::Sub(ph, Ops::Round(ph)), Ops::MulAdd(p, lo, pe));
  const V q = Ops::Round(Ops::Mul(turn, Ops::Set(4.0)));
  const V f = Ops::Sub(turn, Ops::Mul(q, Ops::Set(0.25)));
  const V x = Ops::Mul(f, Ops::Set(detail::kTwoPiHi));
  const V x2 = Ops::Mul(x, x);

  constexpr std::size_t kSin = detail::kSinTaylor.size(), kCos = detail::kCosTaylor.size();
  const V s = HornerOf<Ops>(x2, detail::kSinTaylor, std::make_index_sequence<kSin - 1>());
  const V c = HornerOf<Ops>(x2, detail::kCosTaylor, std::make_index_sequence<kCos - 1>());
  const V sin_x = Ops::MulAdd(Ops::Mul(x, x2), s, x);
  const V cos_x = Ops::MulAdd(x2, c, Ops::Set(1.0));

  // q ∈ {−2, −1, 0, 1, 2} (|turn| ≤ 1/2 + a rounding): cos(x + qπ/2), sin(x + qπ/2) are
  //   q = 0: (c, s)   q = 1: (−s, c)   q = ±2: (−c, −s)   q = −1: (s, −c).
  const typename Ops::M odd = Ops::Or(Ops::Eq(q, Ops::Set(1.0)), Ops::Eq(q, Ops::Set(-1.0)));
  const typename Ops::M half_turn = Ops::Eq(Ops::Abs(q), Ops::Set(2.0));
  const typename Ops::M negate_cos = Ops::Or(Ops::Eq(q, Ops::Set(1.0)), half_turn);
  const typename Ops::M negate_sin = Ops::Or(Ops::Eq(q, Ops::Set(-1.0)), half_turn);
  const V cos_turned = Ops::Select(odd, sin_x, cos_x);
  const V sin_turned = Ops::Select(odd, cos_x, sin_x);
  cos_out = Ops::Select(negate_cos, Ops::Neg(cos_turned), cos_turned);
  sin_out = Ops::Select(negate_sin, Ops::Neg(sin_turned), sin_turned);
}
