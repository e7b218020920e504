// The scalar reference kernel: the specification the SIMD kernels are tested against (float32
// arithmetic, one rounding to storage).
#include "rope/reference.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "rope/angles.hpp"

namespace ropekit::detail {

namespace {

struct F32Codec {
  using T = float;
  static float load(T v) { return v; }
  static T store(float v) { return v; }
};
struct BF16Codec {
  using T = std::uint16_t;
  static float load(T v) { return bf16_to_float(v); }
  static T store(float v) { return float_to_bf16(v); }
};
struct F16Codec {
  using T = std::uint16_t;
  static float load(T v) { return f16_to_float(v); }
  static T store(float v) { return float_to_f16(v); }
};

template <class Codec>
void rotate_heads(const Heads& in, const Heads& out, std::int64_t b, std::int64_t s,
                  const PairMap& map, const float* c, const float* sn) {
  using T = typename Codec::T;
  const bool in_place = out.data == nullptr;
  for (std::int64_t h = 0; h < in.heads; ++h) {
    const T* src = static_cast<const T*>(in.data) + b * in.batch_stride + s * in.seq_stride +
                   h * in.head_stride;
    T* dst = in_place ? const_cast<T*>(src)
                      : static_cast<T*>(out.data) + b * out.batch_stride + s * out.seq_stride +
                            h * out.head_stride;
    if (!in_place) std::copy(src + map.rotary_dim, src + map.head_dim, dst + map.rotary_dim);
    for (int j = 0; j < map.num_pairs(); ++j) {
      const float xa = Codec::load(src[map.lane_a[j]]);
      const float xb = Codec::load(src[map.lane_b[j]]);
      dst[map.lane_a[j]] = Codec::store(std::fma(xa, c[j], -(xb * sn[j])));
      dst[map.lane_b[j]] = Codec::store(std::fma(xb, c[j], xa * sn[j]));
    }
  }
}

void rotate_heads(const Heads& in, const Heads& out, std::int64_t b, std::int64_t s,
                  const PairMap& map, const float* c, const float* sn) {
  if (in.empty()) return;
  switch (in.dtype) {
    case DType::F32: return rotate_heads<F32Codec>(in, out, b, s, map, c, sn);
    case DType::BF16: return rotate_heads<BF16Codec>(in, out, b, s, map, c, sn);
    case DType::F16: return rotate_heads<F16Codec>(in, out, b, s, map, c, sn);
  }
}

}  // namespace

void rotate_reference(const RotateJob& job) {
  const RotateArgs& args = *job.args;
  const PairMap& map = *job.map;
  const int pairs = map.num_pairs();
  const Heads& any = !args.q.empty() ? args.q : args.k;

  std::vector<float> row_cos(static_cast<std::size_t>(map.num_axes) * pairs);
  std::vector<float> row_sin(row_cos.size());
  std::vector<float> c(pairs), sn(pairs);
  std::array<const float*, 3> axis_cos{}, axis_sin{};

  for (std::int64_t b = 0; b < any.batch; ++b) {
    for (std::int64_t s = 0; s < any.seq; ++s) {
      const std::int64_t token = b * any.seq + s;
      for (int a = 0; a < map.num_axes; ++a) {
        const std::int64_t p = args.positions.at(a, token);
        if (job.table != nullptr) {
          axis_cos[a] = job.table->cos_row(p);
          axis_sin[a] = job.table->sin_row(p);
        } else {
          job.angles->row(p, row_cos.data() + a * pairs, row_sin.data() + a * pairs);
          axis_cos[a] = row_cos.data() + a * pairs;
          axis_sin[a] = row_sin.data() + a * pairs;
        }
      }
      for (int j = 0; j < pairs; ++j) {
        const int a = map.axis[j];
        c[j] = axis_cos[a][map.freq[j]] * job.magnitude;
        sn[j] = axis_sin[a][map.freq[j]] * job.magnitude * job.sin_sign;
      }
      rotate_heads(args.q, args.q_out, b, s, map, c.data(), sn.data());
      rotate_heads(args.k, args.k_out, b, s, map, c.data(), sn.data());
    }
  }
}

}  // namespace ropekit::detail
