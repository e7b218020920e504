// cuda_bench — ropekit::cuda::DeviceRope::rotate on a GPU against a device-to-device copy of the same bytes measured
// in the same run (issue 41's ceiling), in place, over issue 41's shapes: FlashInfer's published prefill (2 × 8192
// tokens, 32 q + 8 k heads × 128, θ = 5e5), 512 and 65,536 tokens, fp32 / bf16 / fp16, both pairings, angles from the
// table or on the fly; decode (1 token per sequence, batch 1 to 256) against the launch latency (an empty kernel's
// round trip is not measured here: the ratio to the copy of the same bytes is reported, and µs per call); then the
// launch's choices compared on FlashInfer's shape: the access width, and the head groups (a token's rows per thread);
// the fused append, and its decode step captured in a CUDA graph; and the angles' accuracy at positions up to 2^21
// against a double-precision oracle. Built with FlashInfer's headers (-DROPEKIT_FLASHINFER_DIR,
// bench/flashinfer_peer.hpp), FlashInfer's own kernels run on the same tensors in the same run ("flashinfer ..." rows:
// its rotation, and its rotation then append_paged_kv_cache's kernel beside the fused append) and in the accuracy
// rows.
//
//   build/gpu/bench/cuda_bench [--json FILE]         (scripts/gpu-check.sh runs it and keeps the JSON)
//
// Each figure: the median of 9 timings (CUDA events) of a loop of calls lasting at least 20 ms, after a warm-up;
// the copy of the same bytes (q and k read and written: cudaMemcpyAsync D2D of q+k) is timed interleaved.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device/device_shapes.hpp"  // the launch choices, to compare them
#include "ropekit/append.hpp"
#include "ropekit/cos_sin_cache.hpp"
#include "ropekit/cuda.hpp"
#include "ropekit/ropekit.hpp"
#ifdef ROPEKIT_HAVE_FLASHINFER
#include "flashinfer_peer.hpp"
#endif

namespace {

using namespace ropekit;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// µs per call of fn, the median of 9 loops of at least 20 ms each.
template <class F>
double time_us(cudaStream_t stream, F&& fn) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  fn();
  check(cudaStreamSynchronize(stream), "warm-up");
  int n = 1;
  for (;;) {  // calls per loop for ≥ 20 ms
    cudaEventRecord(start, stream);
    for (int i = 0; i < n; ++i) fn();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (ms >= 20.0f || n >= (1 << 20)) break;
    n *= 2;
  }
  std::vector<double> us;
  for (int r = 0; r < 9; ++r) {
    cudaEventRecord(start, stream);
    for (int i = 0; i < n; ++i) fn();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    us.push_back(double(ms) * 1e3 / n);
  }
  std::sort(us.begin(), us.end());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return us[us.size() / 2];
}

struct Row {
  std::string name;
  double us, copy_us, gbps, fraction;
};

// Whose kernel a row times: ropekit's, or FlashInfer's own (flashinfer_peer.hpp, when built with it).
enum class Peer { Ropekit, FlashInfer };

#ifdef ROPEKIT_HAVE_FLASHINFER
flashinfer_peer::Type flashinfer_type(DType dtype) {
  return dtype == DType::F32    ? flashinfer_peer::Type::F32
         : dtype == DType::BF16 ? flashinfer_peer::Type::BF16
                                : flashinfer_peer::Type::F16;
}
#endif

// FlashInfer's cos/sin cache (vLLM's layout) for positions [0, n): ropekit's accurate coefficients, on the device.
float* device_cos_sin_cache(const Rope& rope, std::int64_t n) {
  std::vector<float> host(static_cast<std::size_t>(n * rope.spec().rotary_dim));
  export_cos_sin_cache(rope, n, host);
  float* cache = nullptr;
  check(cudaMalloc(&cache, host.size() * sizeof(float)), "cos/sin cache");
  check(cudaMemcpy(cache, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "cos/sin cache");
  return cache;
}

// The angles' accuracy at long positions, each method against a double-precision oracle on the same float32 inputs
// (4 q + 1 k heads × 128, θ = 5e5, values uniform in [-1, 1)): tokens at positions 0 to 65,535, every method; then
// 8192 tokens at positions 65,536 + 255·t (up to 2,154,241 ≈ 2^21, pitfall 12's range), the methods computing
// their angles on the fly (a table of 2^21 rows is not what either library is used with). The exact rotation is by
// p · inv_freq with the model's frequencies (Hugging Face's float32 inv_freq, which ropekit's plan holds): the
// largest |output − exact| over q's lanes in each band of positions. ropekit's contract: ≈ 1.4e-7 at every position
// (ropekit/table.hpp; Rope::apply on the CPU measures 1.30e-7 to 1.40e-7 on both runs' inputs, every band).
struct AccuracyRow {
  std::string method;
  Pairing pairing;
  std::int64_t from, to, worst_position;
  double max_error;
};

void accuracy_run(const Rope& rope, const std::vector<std::int64_t>& positions,
                  const std::vector<std::pair<std::int64_t, std::int64_t>>& bands, bool tables, cudaStream_t stream,
                  std::vector<AccuracyRow>& rows) {
  const Pairing pairing = rope.spec().pairing;
  const std::int64_t hq = 4, hk = 1, d = 128, tokens = std::int64_t(positions.size());
  const std::size_t q_n = std::size_t(tokens * hq * d), k_n = std::size_t(tokens * hk * d);
  std::vector<float> host_q(q_n), host_k(k_n);
  std::uint64_t state = 0x9E3779B97F4A7C15ull;  // a fixed generator: the same inputs in every run
  const auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(std::int32_t(state >> 32)) * 0x1p-31f;
  };
  for (float& x : host_q) x = uniform();
  for (float& x : host_k) x = uniform();
  void *q, *k, *qo, *ko, *pos;
  check(cudaMalloc(&q, q_n * 4), "q");
  check(cudaMalloc(&k, k_n * 4), "k");
  check(cudaMalloc(&qo, q_n * 4), "q out");
  check(cudaMalloc(&ko, k_n * 4), "k out");
  check(cudaMalloc(&pos, std::size_t(tokens) * 8), "positions");
  check(cudaMemcpy(q, host_q.data(), q_n * 4, cudaMemcpyHostToDevice), "q");
  check(cudaMemcpy(k, host_k.data(), k_n * 4, cudaMemcpyHostToDevice), "k");
  check(cudaMemcpy(pos, positions.data(), std::size_t(tokens) * 8, cudaMemcpyHostToDevice), "positions");
  // The exact coefficients, in double: p < 2^22 and a float32 inv_freq make the product exact (22 × 24 bits).
  std::vector<double> cos_t(std::size_t(tokens) * 64), sin_t(std::size_t(tokens) * 64);
  for (std::size_t t = 0; t < positions.size(); ++t)
    for (std::size_t i = 0; i < 64; ++i) {
      const double angle = double(positions[t]) * rope.plan().inv_freq[i];
      cos_t[t * 64 + i] = std::cos(angle);
      sin_t[t * 64 + i] = std::sin(angle);
    }
  std::vector<float> out(q_n);
  const auto measure = [&](const std::string& method) {
    check(cudaStreamSynchronize(stream), method.c_str());
    check(cudaMemcpy(out.data(), qo, q_n * 4, cudaMemcpyDeviceToHost), "q out");
    for (const auto& [from, to] : bands) {
      AccuracyRow row{method, pairing, from, to, -1, 0.0};
      for (std::size_t t = 0; t < positions.size(); ++t) {
        if (positions[t] < from || positions[t] >= to) continue;
        for (std::int64_t h = 0; h < hq; ++h) {
          const std::size_t base = (t * std::size_t(hq) + std::size_t(h)) * std::size_t(d);
          for (std::size_t i = 0; i < 64; ++i) {
            const std::size_t a = base + (pairing == Pairing::Half ? i : 2 * i);
            const std::size_t b = a + (pairing == Pairing::Half ? 64 : 1);
            const double c = cos_t[t * 64 + i], s = sin_t[t * 64 + i], x = host_q[a], y = host_q[b];
            const double error = std::max(std::abs(out[a] - (x * c - y * s)), std::abs(out[b] - (y * c + x * s)));
            if (error > row.max_error) row = {method, pairing, from, to, positions[t], error};
          }
        }
      }
      rows.push_back(row);
    }
  };
  const RotateArgs args{.q = bshd(q, DType::F32, 1, tokens, hq, d),
                        .k = bshd(k, DType::F32, 1, tokens, hk, d),
                        .q_out = bshd(qo, DType::F32, 1, tokens, hq, d),
                        .k_out = bshd(ko, DType::F32, 1, tokens, hk, d),
                        .positions = {pos, IndexType::I64, tokens}};
  const std::int64_t table_rows = *std::max_element(positions.begin(), positions.end()) + 1;
  for (const bool table : {false, true}) {
    if (table && !tables) continue;
    const cuda::DeviceRope gpu(rope, 0, table ? table_rows : 0);
    gpu.rotate(args, {.device = 0, .stream = stream});
    gpu.check({.device = 0, .stream = stream});
    measure(table ? "ropekit table" : "ropekit on the fly");
  }
#ifdef ROPEKIT_HAVE_FLASHINFER
  float* cos_sin = tables ? device_cos_sin_cache(rope, table_rows) : nullptr;
  for (const bool cached : {false, true}) {
    if (cached && !tables) continue;
    check(flashinfer_peer::rotate(flashinfer_peer::Type::F32, q, k, qo, ko, static_cast<const std::int64_t*>(pos),
                                  std::uint32_t(tokens), std::uint32_t(hq), std::uint32_t(hk), std::uint32_t(d),
                                  pairing == Pairing::Interleaved, float(rope.spec().base), cached ? cos_sin : nullptr,
                                  stream),
          "flashinfer");
    measure(cached ? "flashinfer cos/sin cache (ropekit's)" : "flashinfer on the fly");
  }
  cudaFree(cos_sin);
#endif
  for (void* b : {q, k, qo, ko, pos}) cudaFree(b);
}

std::vector<AccuracyRow> accuracy_rows(Pairing pairing, cudaStream_t stream) {
  const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = pairing});
  std::vector<AccuracyRow> rows;
  std::vector<std::int64_t> positions(65536);
  for (std::size_t t = 0; t < positions.size(); ++t) positions[t] = std::int64_t(t);
  accuracy_run(rope, positions, {{0, 4096}, {4096, 16384}, {16384, 65536}}, true, stream, rows);
  positions.resize(8192);
  for (std::size_t t = 0; t < positions.size(); ++t) positions[t] = 65536 + 255 * std::int64_t(t);
  accuracy_run(rope, positions, {{65536, 1 << 20}, {1 << 20, 1 << 22}}, false, stream, rows);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--json") json = argv[i + 1];
  if (cuda::device_count() == 0) {
    std::printf("cuda_bench: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  std::vector<Row> rows;
  // The launch choices the rows below compare (the backend's own unless a row says otherwise).
  detail::LaunchChoices choices;
  const auto run = [&](const std::string& name, const Rope& rope, std::int64_t table, DType dtype, std::int64_t batch,
                       std::int64_t seq, std::int64_t first_position, bool out_of_place = false,
                       Peer peer = Peer::Ropekit) {
    // FlashInfer's rows use none of it: its table (32 MB at 65,536 positions) is not uploaded for them.
    const cuda::DeviceRope gpu(rope, 0, peer == Peer::Ropekit ? table : 0);
    const std::int64_t hq = 32, hk = 8, d = 128, tokens = batch * seq;
    const std::size_t es = element_size(dtype), q_bytes = std::size_t(tokens * hq * d) * es,
                      k_bytes = std::size_t(tokens * hk * d) * es;
    void *q, *k, *scratch, *pos;
    check(cudaMalloc(&q, q_bytes), "q");
    check(cudaMalloc(&k, k_bytes), "k");
    check(cudaMalloc(&scratch, q_bytes + k_bytes), "copy target");
    check(cudaMemset(q, 0, q_bytes), "q");
    check(cudaMemset(k, 0, k_bytes), "k");
    std::vector<std::int64_t> host_pos(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) host_pos[std::size_t(t)] = first_position + t % seq;
    check(cudaMalloc(&pos, std::size_t(tokens) * 8), "positions");
    check(cudaMemcpy(pos, host_pos.data(), std::size_t(tokens) * 8, cudaMemcpyHostToDevice), "positions");
    RotateArgs args{.q = bshd(q, dtype, batch, seq, hq, d),
                    .k = bshd(k, dtype, batch, seq, hk, d),
                    .positions = {pos, IndexType::I64, tokens}};
    void* outputs = nullptr;  // out of place: new q and k, as the compiled expression writes them
    if (out_of_place) {
      check(cudaMalloc(&outputs, q_bytes + k_bytes), "outputs");
      args.q_out = bshd(outputs, dtype, batch, seq, hq, d);
      args.k_out = bshd(static_cast<char*>(outputs) + q_bytes, dtype, batch, seq, hk, d);
    }
    float* cos_sin = nullptr;  // FlashInfer's angles from a table: its cos/sin cache path
    const auto launch = [&] {
      if (peer == Peer::Ropekit)
        return detail::DeviceAccess::rotate(gpu, args, {.device = 0, .stream = stream}, choices);
#ifdef ROPEKIT_HAVE_FLASHINFER
      check(flashinfer_peer::rotate(flashinfer_type(dtype), q, k, out_of_place ? args.q_out.data : q,
                                    out_of_place ? args.k_out.data : k, static_cast<const std::int64_t*>(pos),
                                    std::uint32_t(tokens), std::uint32_t(hq), std::uint32_t(hk), std::uint32_t(d),
                                    rope.spec().pairing == Pairing::Interleaved, float(rope.spec().base), cos_sin,
                                    stream),
            "flashinfer");
#endif
    };
    if (peer == Peer::FlashInfer && table > 0) cos_sin = device_cos_sin_cache(rope, first_position + seq);
    const double us = time_us(stream, launch);
    const double copy_us = time_us(stream, [&] {
      cudaMemcpyAsync(scratch, q, q_bytes, cudaMemcpyDeviceToDevice, stream);
      cudaMemcpyAsync(static_cast<char*>(scratch) + q_bytes, k, k_bytes, cudaMemcpyDeviceToDevice, stream);
    });
    gpu.check({.device = 0, .stream = stream});
    const double bytes = 2.0 * double(q_bytes + k_bytes);
    rows.push_back({name, us, copy_us, bytes / us / 1e3, copy_us / us});
    std::printf("%-58s %10.2f µs  copy %10.2f µs  %8.1f GB/s  %.2f of the copy\n", name.c_str(), us, copy_us,
                bytes / us / 1e3, copy_us / us);
    cudaFree(q);
    cudaFree(k);
    cudaFree(scratch);
    cudaFree(pos);
    cudaFree(outputs);
    cudaFree(cos_sin);
  };
  std::printf("# %s, compute %d.%d, %s\n", prop.name, prop.major, prop.minor, "ropekit cuda_bench (in place)");
  for (const Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = pairing});
    for (const DType dtype : {DType::BF16, DType::F16, DType::F32}) {
      for (const auto& [batch, seq] : {std::pair<std::int64_t, std::int64_t>{2, 8192}, {1, 512}, {1, 65536}}) {
        for (const bool table : {true, false}) {
          run(fmt::format("prefill {}x{} {} {} {}", batch, seq, to_string(dtype), to_string(pairing),
                          table ? "table" : "on the fly"),
              rope, table ? 65536 : 0, dtype, batch, seq, 0);
        }
      }
    }
    for (const std::int64_t batch : {1, 16, 64, 256}) {
      run(fmt::format("decode batch {} bf16 {} table", batch, to_string(pairing)), rope, 65536, DType::BF16, batch, 1,
          4095);
    }
    // Out of place, as bench_cuda_torch.py's eager and compiled expressions write new q and k: their like for like.
    for (const DType dtype : {DType::BF16, DType::F32}) {
      run(fmt::format("prefill 2x8192 {} {} table, out of place", to_string(dtype), to_string(pairing)), rope, 65536,
          dtype, 2, 8192, 0, true);
    }
  }
#ifdef ROPEKIT_HAVE_FLASHINFER
  // FlashInfer's own kernels (the wheel scripts/flashinfer-headers.sh fetches) on the same tensors, timed in the same
  // run: apply_rope_pos_ids (on the fly) and apply_rope_with_cos_sin_cache (table: ropekit's exported coefficients).
  for (const Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = pairing});
    for (const DType dtype : {DType::BF16, DType::F16, DType::F32}) {
      for (const auto& [batch, seq] : {std::pair<std::int64_t, std::int64_t>{2, 8192}, {1, 65536}}) {
        for (const bool table : {true, false}) {
          run(fmt::format("flashinfer prefill {}x{} {} {} {}", batch, seq, to_string(dtype), to_string(pairing),
                          table ? "table" : "on the fly"),
              rope, table ? 65536 : 0, dtype, batch, seq, 0, false, Peer::FlashInfer);
        }
      }
    }
    for (const std::int64_t batch : {1, 256}) {
      run(fmt::format("flashinfer decode batch {} bf16 {} table", batch, to_string(pairing)), rope, 65536, DType::BF16,
          batch, 1, 4095, false, Peer::FlashInfer);
    }
    for (const DType dtype : {DType::BF16, DType::F32}) {
      run(fmt::format("flashinfer prefill 2x8192 {} {} table, out of place", to_string(dtype), to_string(pairing)),
          rope, 65536, dtype, 2, 8192, 0, true, Peer::FlashInfer);
    }
  }
#endif
  // The access width (LaunchChoices::max_access_bytes): FlashInfer's shape with each thread's runs of pairs capped at
  // one element per access and at 8 bytes (the rows above: the launch's choice, up to 16).
  for (const Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = pairing});
    for (const DType dtype : {DType::BF16, DType::F32}) {
      for (const int bytes : {static_cast<int>(element_size(dtype)), 8}) {
        choices.max_access_bytes = bytes;
        run(fmt::format("prefill 2x8192 {} {} table, accesses <= {} B", to_string(dtype), to_string(pairing), bytes),
            rope, 65536, dtype, 2, 8192, 0);
      }
    }
  }
  choices = {};
  // A token's rows per thread (cuda::choose_head_groups picks 2 groups of 20 rows here): every row of the token in one
  // thread, 8 groups of 5, and one row per thread (40 groups: no loop over heads, coefficients read per row).
  for (const DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = Pairing::Half});
    for (const int groups : {1, 8, 40}) {
      choices.head_groups = groups;
      run(fmt::format("prefill 2x8192 {} half table, {} head groups", to_string(dtype), groups), rope, 65536, dtype, 2,
          8192, 0);
    }
  }
  choices = {};
  // The fused rotate-and-append (ropekit::cuda::append): bf16 q rotated in place, bf16 k rotated into a bf16 NHD
  // paged cache (pages of 16), v copied beside it; 32 q / 8 kv heads × 128. The copy moves the same bytes: q, k and
  // v each read once and written once (to the cache for k and v). Token t goes to slot t. Graph: the call captured
  // once in a CUDA graph (an engine's decode step), the graph's launches timed. FlashInfer: what an engine on
  // FlashInfer runs instead — its rotation (q in place, k into a buffer) then append_paged_kv_cache's kernel — with
  // each sequence's page table and entries chosen to write the same slots.
  enum class AppendMode { Direct, Graph, FlashInfer };
  const auto run_append = [&](const std::string& name, const Rope& rope, std::int64_t batch, std::int64_t seq,
                              std::int64_t first_position, PageLayout layout = PageLayout::NHD,
                              CacheDType cache_dtype = CacheDType::BF16, AppendMode mode = AppendMode::Direct) {
    const cuda::DeviceRope gpu(rope, 0, 65536);
    const std::int64_t hq = 32, hk = 8, d = 128, tokens = batch * seq, page_size = 16;
    const std::int64_t pages = (tokens + page_size - 1) / page_size;
    const std::size_t es = 2, q_bytes = std::size_t(tokens * hq * d) * es, k_bytes = std::size_t(tokens * hk * d) * es;
    const std::size_t cache_bytes = std::size_t(pages * page_size * hk * d) * element_size(cache_dtype);
    void *q, *k, *v, *kc, *vc, *scratch, *pos, *slots;
    check(cudaMalloc(&q, q_bytes), "q");
    check(cudaMalloc(&k, k_bytes), "k");
    check(cudaMalloc(&v, k_bytes), "v");
    check(cudaMalloc(&kc, cache_bytes), "key cache");
    check(cudaMalloc(&vc, cache_bytes), "value cache");
    check(cudaMalloc(&scratch, q_bytes + 2 * k_bytes), "copy target");
    for (void* b : {q, k, v}) check(cudaMemset(b, 0, b == q ? q_bytes : k_bytes), "inputs");
    std::vector<std::int64_t> host_pos(static_cast<std::size_t>(tokens)), host_slots(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) {
      host_pos[std::size_t(t)] = first_position + t % seq;
      host_slots[std::size_t(t)] = t;
    }
    check(cudaMalloc(&pos, std::size_t(tokens) * 8), "positions");
    check(cudaMalloc(&slots, std::size_t(tokens) * 8), "slots");
    check(cudaMemcpy(pos, host_pos.data(), std::size_t(tokens) * 8, cudaMemcpyHostToDevice), "positions");
    check(cudaMemcpy(slots, host_slots.data(), std::size_t(tokens) * 8, cudaMemcpyHostToDevice), "slots");
    const AppendArgs args{.q = bshd(q, DType::BF16, batch, seq, hq, d),
                          .k = bshd(k, DType::BF16, batch, seq, hk, d),
                          .v = bshd(v, DType::BF16, batch, seq, hk, d),
                          .positions = {pos, IndexType::I64, tokens},
                          .slots = SlotMapping{slots, IndexType::I64, tokens}};
    const PagedCache cache{.k = kc,
                           .v = vc,
                           .dtype = cache_dtype,
                           .layout = layout,
                           .num_pages = pages,
                           .page_size = page_size,
                           .kv_heads = hk,
                           .head_dim = int(d),
                           .v_head_dim = int(d)};
    const auto append = [&] {
      detail::DeviceAccess::append(gpu, args, cache, {.device = 0, .stream = stream}, choices);
    };
    double us = 0;
    if (mode == AppendMode::Graph) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
      append();
      check(cudaStreamEndCapture(stream, &graph), "capture");
      check(cudaGraphInstantiate(&exec, graph, 0), "graph");
      us = time_us(stream, [&] { check(cudaGraphLaunch(exec, stream), "graph launch"); });
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    } else if (mode == AppendMode::FlashInfer) {
#ifdef ROPEKIT_HAVE_FLASHINFER
      // Sequence b holds tokens [b·seq, (b+1)·seq) at slots of the same numbers: its pages from its first slot's,
      // its entries counted from that page's start.
      std::vector<std::int32_t> indices, indptr{0}, last, of_token, entry;
      for (std::int64_t b = 0; b < batch; ++b) {
        const std::int64_t first = b * seq, page0 = first / page_size, page1 = (first + seq - 1) / page_size;
        for (std::int64_t p = page0; p <= page1; ++p) indices.push_back(std::int32_t(p));
        indptr.push_back(std::int32_t(indices.size()));
        last.push_back(std::int32_t((first + seq - 1) % page_size + 1));
        for (std::int64_t t = first; t < first + seq; ++t) {
          of_token.push_back(std::int32_t(b));
          entry.push_back(std::int32_t(t - page0 * page_size));
        }
      }
      std::int32_t* table = nullptr;  // indices, indptr, last, of_token, entry back to back
      const std::size_t n = indices.size() + indptr.size() + last.size() + of_token.size() + entry.size();
      check(cudaMalloc(&table, n * 4), "page table");
      std::int32_t* at = table;
      std::int32_t* parts[5];
      int part = 0;
      for (const std::vector<std::int32_t>* v : {&indices, &indptr, &last, &of_token, &entry}) {
        check(cudaMemcpy(at, v->data(), v->size() * 4, cudaMemcpyHostToDevice), "page table");
        parts[part++] = at;
        at += v->size();
      }
      void* k_rotated = nullptr;
      check(cudaMalloc(&k_rotated, k_bytes), "rotated keys");
      float* cos_sin = device_cos_sin_cache(rope, first_position + seq);
      us = time_us(stream, [&] {
        check(flashinfer_peer::rotate_then_append_bf16(
                  q, k, v, k_rotated, kc, vc, static_cast<const std::int64_t*>(pos), parts[0], parts[1], parts[2],
                  parts[3], parts[4], std::uint32_t(batch), std::uint32_t(tokens), std::uint32_t(hq), std::uint32_t(hk),
                  std::uint32_t(d), std::uint32_t(page_size), cos_sin, stream),
              "flashinfer append");
      });
      cudaFree(table);
      cudaFree(k_rotated);
      cudaFree(cos_sin);
#endif
    } else {
      us = time_us(stream, append);
    }
    const double copy_us = time_us(stream, [&] {
      cudaMemcpyAsync(scratch, q, q_bytes, cudaMemcpyDeviceToDevice, stream);
      cudaMemcpyAsync(static_cast<char*>(scratch) + q_bytes, k, k_bytes, cudaMemcpyDeviceToDevice, stream);
      cudaMemcpyAsync(static_cast<char*>(scratch) + q_bytes + k_bytes, v, k_bytes, cudaMemcpyDeviceToDevice, stream);
    });
    gpu.check({.device = 0, .stream = stream});
    const double bytes = 2.0 * double(q_bytes + 2 * k_bytes);
    rows.push_back({name, us, copy_us, bytes / us / 1e3, copy_us / us});
    std::printf("%-58s %10.2f µs  copy %10.2f µs  %8.1f GB/s  %.2f of the copy\n", name.c_str(), us, copy_us,
                bytes / us / 1e3, copy_us / us);
    for (void* b : {q, k, v, kc, vc, scratch, pos, slots}) cudaFree(b);
  };
  {
    const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = Pairing::Half});
    run_append("append prefill 1x8192 bf16 half -> bf16 NHD", rope, 1, 8192, 0);
    // Key rows, values in runs of at most 8 bytes, and element by element (the append before runs: one pair and
    // one lane per thread), for the same shape; the HND layout; an fp8 cache (converted element by element).
    choices = {.max_access_bytes = 8};
    run_append("append prefill 1x8192 bf16 half -> bf16 NHD, accesses <= 8 B", rope, 1, 8192, 0);
    choices = {.append_runs = false};
    run_append("append prefill 1x8192 bf16 half -> bf16 NHD, element by element", rope, 1, 8192, 0);
    choices = {};
    run_append("append prefill 1x8192 bf16 half -> bf16 HND", rope, 1, 8192, 0, PageLayout::HND);
    run_append("append prefill 1x8192 bf16 half -> fp8 e4m3 NHD", rope, 1, 8192, 0, PageLayout::NHD,
               CacheDType::F8E4M3);
    for (const std::int64_t batch : {1, 64, 256})
      run_append(fmt::format("append decode batch {} bf16 half -> bf16 NHD", batch), rope, batch, 1, 4095);
    // A decode step as an engine runs it, captured in a CUDA graph: time per replay (issue 67).
    for (const std::int64_t batch : {1, 16, 64, 256}) {
      run_append(fmt::format("append decode batch {} bf16 half -> bf16 NHD, CUDA graph", batch), rope, batch, 1, 4095,
                 PageLayout::NHD, CacheDType::BF16, AppendMode::Graph);
    }
#ifdef ROPEKIT_HAVE_FLASHINFER
    run_append("flashinfer rotate + append prefill 1x8192 bf16 half -> bf16 NHD", rope, 1, 8192, 0, PageLayout::NHD,
               CacheDType::BF16, AppendMode::FlashInfer);
    for (const std::int64_t batch : {1, 64, 256}) {
      run_append(fmt::format("flashinfer rotate + append decode batch {} bf16 half -> bf16 NHD", batch), rope, batch, 1,
                 4095, PageLayout::NHD, CacheDType::BF16, AppendMode::FlashInfer);
    }
#endif
    // The launches: up to 64 sequences the decode append above is one launch (detail::choose_append_launch), from 256
    // a launch per body; each timed the other way too.
    for (const auto& [mode, what] : {std::pair{detail::AppendLaunches::PerBody, "a launch per body"},
                                     {detail::AppendLaunches::One, "one launch"}}) {
      choices = {.launches = mode};
      for (const std::int64_t batch : {1, 64, 256})
        run_append(fmt::format("append decode batch {} bf16 half -> bf16 NHD, {}", batch, what), rope, batch, 1, 4095);
    }
    choices = {};
  }
  std::vector<AccuracyRow> accuracy;
  for (const Pairing pairing : {Pairing::Half, Pairing::Interleaved})
    for (const AccuracyRow& r : accuracy_rows(pairing, stream)) {
      std::printf("accuracy fp32 %-11s positions [%7lld, %7lld)  %-38s max |error| %.3g at position %lld\n",
                  std::string(to_string(r.pairing)).c_str(), static_cast<long long>(r.from),
                  static_cast<long long>(r.to), r.method.c_str(), r.max_error,
                  static_cast<long long>(r.worst_position));
      accuracy.push_back(r);
    }
  if (!json.empty()) {
    std::FILE* f = std::fopen(json.c_str(), "w");
    if (f == nullptr) return 1;
    std::fprintf(f, "{\"device\": \"%s\", \"rows\": [\n", prop.name);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f, "  {\"name\": \"%s\", \"us\": %.3f, \"copy_us\": %.3f, \"gbps\": %.1f, \"fraction\": %.3f}%s\n",
                   r.name.c_str(), r.us, r.copy_us, r.gbps, r.fraction, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "], \"accuracy\": [\n");
    for (std::size_t i = 0; i < accuracy.size(); ++i) {
      const AccuracyRow& r = accuracy[i];
      std::fprintf(f,
                   "  {\"method\": \"%s\", \"pairing\": \"%s\", \"from\": %lld, \"to\": %lld, "
                   "\"max_error\": %.6g, \"worst_position\": %lld}%s\n",
                   r.method.c_str(), std::string(to_string(r.pairing)).c_str(), static_cast<long long>(r.from),
                   static_cast<long long>(r.to), r.max_error, static_cast<long long>(r.worst_position),
                   i + 1 < accuracy.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  cudaStreamDestroy(stream);
  return 0;
}
