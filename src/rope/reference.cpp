// The scalar reference rotation (see reference.hpp). Clarity first: it is the specification.
#include "rope/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "rope/angles.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {
namespace {

// The float32 coefficients of one token: c[j] = m·cos θ_j, s[j] = (m·sin θ_j)·sign, θ_j the angle of
// pair j at the position of the stream that drives it.
class Coefficients {
 public:
  explicit Coefficients(const RotateJob& job)
      : job_(job),
        pairs_(job.map->num_pairs()),
        angles_(job.table ? 0 : std::size_t(2 * job.map->num_axes * pairs_)),
        c_(pairs_),
        s_(pairs_) {}

  void set_token(std::int64_t token) {
    const PairMap& map = *job_.map;
    const float* cos_row[3] = {};
    const float* sin_row[3] = {};
    for (int a = 0; a < map.num_axes; ++a) {
      const std::int64_t p = job_.args.positions.at(a, token);
      if (job_.table != nullptr) {
        cos_row[a] = job_.table->cos_row(p);
        sin_row[a] = job_.table->sin_row(p);
      } else {
        float* row = angles_.data() + 2 * a * pairs_;
        job_.angles->row(p, row, row + pairs_);
        cos_row[a] = row;
        sin_row[a] = row + pairs_;
      }
    }
    for (int j = 0; j < pairs_; ++j) {
      const int a = map.axis[j];
      c_[j] = cos_row[a][j] * job_.magnitude;
      s_[j] = sin_row[a][j] * job_.magnitude * job_.sin_sign;
    }
  }
  const float* c() const { return c_.data(); }
  const float* s() const { return s_.data(); }

 private:
  const RotateJob& job_;
  int pairs_;
  std::vector<float> angles_, c_, s_;
};

// One head row: src → dst (dst == src: in place; else pass-through lanes are copied).
template <DType kType>
void rotate_head(const PairMap& map, const void* src_row, void* dst_row, const float* c, const float* s) {
  using Codec = ScalarCodec<kType>;
  using T = typename Codec::T;
  const T* src = static_cast<const T*>(src_row);
  T* dst = static_cast<T*>(dst_row);
  if (dst != src) std::copy(src + map.rotary_dim, src + map.head_dim, dst + map.rotary_dim);
  for (int j = 0; j < map.num_pairs(); ++j) {
    const float xa = Codec::load(src[map.lane_a[j]]);
    const float xb = Codec::load(src[map.lane_b[j]]);
    dst[map.lane_a[j]] = Codec::store(std::fma(xa, c[j], -(xb * s[j])));
    dst[map.lane_b[j]] = Codec::store(std::fma(xb, c[j], xa * s[j]));
  }
}

void rotate_head(DType dtype, const PairMap& map, const void* src, void* dst, const float* c, const float* s) {
  switch (dtype) {
    case DType::F32: return rotate_head<DType::F32>(map, src, dst, c, s);
    case DType::BF16: return rotate_head<DType::BF16>(map, src, dst, c, s);
    case DType::F16: return rotate_head<DType::F16>(map, src, dst, c, s);
  }
}

}  // namespace

void widen(const void* src, DType dtype, std::int64_t n, float* dst) {
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, std::size_t(n) * 4); return;
    case DType::BF16:
      for (std::int64_t i = 0; i < n; ++i)
        dst[i] = ScalarCodec<DType::BF16>::load(static_cast<const std::uint16_t*>(src)[i]);
      return;
    case DType::F16:
      for (std::int64_t i = 0; i < n; ++i)
        dst[i] = ScalarCodec<DType::F16>::load(static_cast<const std::uint16_t*>(src)[i]);
      return;
  }
}

void narrow(const float* src, std::int64_t n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, std::size_t(n) * 4); return;
    case DType::BF16:
      for (std::int64_t i = 0; i < n; ++i)
        static_cast<std::uint16_t*>(dst)[i] = ScalarCodec<DType::BF16>::store(src[i]);
      return;
    case DType::F16:
      for (std::int64_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(dst)[i] = ScalarCodec<DType::F16>::store(src[i]);
      return;
  }
}

void rotate_rows_reference(const RotateJob& job, std::int64_t first, std::int64_t last) {
  const RotateArgs& args = job.args;
  const std::int64_t heads = job.q_heads + job.k_heads;
  Coefficients coef(job);
  std::int64_t token = -1;
  for (std::int64_t row = first; row < last; ++row) {
    if (row / heads != token) {
      token = row / heads;
      coef.set_token(token);
    }
    const std::int64_t h = row % heads;
    const bool is_q = h < job.q_heads;
    const Heads& in = is_q ? args.q : args.k;
    const Heads& out = is_q ? args.q_out : args.k_out;
    const std::int64_t head = is_q ? h : h - job.q_heads;
    const std::int64_t b = token / job.seq, s = token % job.seq;
    void* src = in.row(b, s, head);
    rotate_head(in.dtype, *job.map, src, out.data != nullptr ? out.row(b, s, head) : src, coef.c(), coef.s());
  }
}

void rotate_token_rows_reference(const RotateJob& job, std::int64_t token, const void* src, std::int64_t src_stride,
                                 void* dst, std::int64_t dst_stride, std::int64_t heads, DType dtype) {
  Coefficients coef(job);
  coef.set_token(token);
  const std::int64_t es = element_size(dtype);
  for (std::int64_t h = 0; h < heads; ++h) {
    rotate_head(dtype, *job.map, static_cast<const std::byte*>(src) + h * src_stride * es,
                static_cast<std::byte*>(dst) + h * dst_stride * es, coef.c(), coef.s());
  }
}

void e4m3_widen_reference(const std::uint8_t* src, std::int64_t n, float scale, float* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_float(src[i]) * scale;
}

void convert_to_cache_reference(const void* src, DType from, std::int64_t n, void* dst, CacheDType to, float scale) {
  if (to != CacheDType::F8E4M3 && static_cast<int>(to) == static_cast<int>(from)) {
    std::memcpy(dst, src, static_cast<std::size_t>(n * element_size(from)));
    return;
  }
  // In blocks through a float32 buffer on the stack: widen (exact), then one rounding.
  constexpr std::int64_t kBlock = 256;
  float buffer[kBlock];
  for (std::int64_t first = 0; first < n; first += kBlock) {
    const std::int64_t count = std::min(kBlock, n - first);
    widen(static_cast<const std::byte*>(src) + first * element_size(from), from, count, buffer);
    void* out = static_cast<std::byte*>(dst) + first * element_size(to);
    if (to == CacheDType::F8E4M3) {
      auto* bytes = static_cast<std::uint8_t*>(out);
      for (std::int64_t i = 0; i < count; ++i) bytes[i] = float_to_e4m3(buffer[i] / scale);
    } else {
      narrow(buffer, count, static_cast<DType>(to), out);
    }
  }
}

}  // namespace ropekit::detail
