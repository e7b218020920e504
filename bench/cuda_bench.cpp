// cuda_bench — ropekit::cuda::DeviceRope::rotate on a GPU against a device-to-device copy of the same bytes measured
// in the same run (issue 41's ceiling), in place, over issue 41's shapes: FlashInfer's published prefill (2 × 8192
// tokens, 32 q + 8 k heads × 128, θ = 5e5), 512 and 65,536 tokens, fp32 / bf16 / fp16, both pairings, angles from the
// table or on the fly; decode (1 token per sequence, batch 1 to 256) against the launch latency (an empty kernel's
// round trip is not measured here: the ratio to the copy of the same bytes is reported, and µs per call); then the
// launch's choices compared on FlashInfer's shape: the access width, and the head groups (a token's rows per thread).
//
//   build/gpu/bench/cuda_bench [--json FILE]         (scripts/gpu-check.sh runs it and keeps the JSON)
//
// Each figure: the median of 9 timings (CUDA events) of a loop of calls lasting at least 20 ms, after a warm-up;
// the copy of the same bytes (q and k read and written: cudaMemcpyAsync D2D of q+k) is timed interleaved.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/host_grid.hpp"  // the access width, to compare widths
#include "ropekit/append.hpp"
#include "ropekit/cuda.hpp"
#include "ropekit/ropekit.hpp"

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
  const auto run = [&](const std::string& name, const Rope& rope, std::int64_t table, DType dtype, std::int64_t batch,
                       std::int64_t seq, std::int64_t first_position, bool out_of_place = false) {
    const cuda::DeviceRope gpu(rope, 0, table);
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
    const double us = time_us(stream, [&] { gpu.rotate(args, {.device = 0, .stream = stream}); });
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
  // The access width (detail::choose_vector): FlashInfer's shape with each thread's runs of pairs capped at one
  // element per access and at 8 bytes (the rows above: the launch's choice, up to 16).
  for (const Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = pairing});
    for (const DType dtype : {DType::BF16, DType::F32}) {
      for (const int bytes : {static_cast<int>(element_size(dtype)), 8}) {
        detail::set_cuda_max_access_bytes(bytes);
        run(fmt::format("prefill 2x8192 {} {} table, accesses <= {} B", to_string(dtype), to_string(pairing), bytes),
            rope, 65536, dtype, 2, 8192, 0);
      }
    }
  }
  detail::set_cuda_max_access_bytes(cuda::kMaxAccessBytes);
  // A token's rows per thread (cuda::choose_head_groups picks 2 groups of 20 rows here): every row of the token in one
  // thread, 8 groups of 5, and one row per thread (40 groups: no loop over heads, coefficients read per row).
  for (const DType dtype : {DType::BF16, DType::F16, DType::F32}) {
    const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = Pairing::Half});
    for (const int groups : {1, 8, 40}) {
      detail::set_cuda_head_groups(groups);
      run(fmt::format("prefill 2x8192 {} half table, {} head groups", to_string(dtype), groups), rope, 65536, dtype, 2,
          8192, 0);
    }
  }
  detail::set_cuda_head_groups(0);
  // The fused rotate-and-append (ropekit::cuda::append): bf16 q rotated in place, bf16 k rotated into a bf16 NHD
  // paged cache (pages of 16), v copied beside it; 32 q / 8 kv heads × 128. The copy moves the same bytes: q, k and
  // v each read once and written once (to the cache for k and v).
  const auto run_append = [&](const std::string& name, const Rope& rope, std::int64_t batch, std::int64_t seq,
                              std::int64_t first_position, PageLayout layout = PageLayout::NHD,
                              CacheDType cache_dtype = CacheDType::BF16) {
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
    const double us = time_us(stream, [&] { cuda::append(gpu, args, cache, {.device = 0, .stream = stream}); });
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
    detail::set_cuda_max_access_bytes(8);
    run_append("append prefill 1x8192 bf16 half -> bf16 NHD, accesses <= 8 B", rope, 1, 8192, 0);
    detail::set_cuda_max_access_bytes(cuda::kMaxAccessBytes);
    detail::set_cuda_append_runs(false);
    run_append("append prefill 1x8192 bf16 half -> bf16 NHD, element by element", rope, 1, 8192, 0);
    detail::set_cuda_append_runs(true);
    run_append("append prefill 1x8192 bf16 half -> bf16 HND", rope, 1, 8192, 0, PageLayout::HND);
    run_append("append prefill 1x8192 bf16 half -> fp8 e4m3 NHD", rope, 1, 8192, 0, PageLayout::NHD,
               CacheDType::F8E4M3);
    for (const std::int64_t batch : {1, 64, 256})
      run_append(fmt::format("append decode batch {} bf16 half -> bf16 NHD", batch), rope, batch, 1, 4095);
    // The launches: up to 64 sequences the decode append above is one launch (detail::choose_append_launch), from 256
    // a launch per body; each timed the other way too.
    for (const auto& [mode, what] : {std::pair{detail::AppendLaunches::PerBody, "a launch per body"},
                                     {detail::AppendLaunches::One, "one launch"}}) {
      detail::set_cuda_append_launches(mode);
      for (const std::int64_t batch : {1, 64, 256})
        run_append(fmt::format("append decode batch {} bf16 half -> bf16 NHD, {}", batch, what), rope, batch, 1, 4095);
    }
    detail::set_cuda_append_launches(detail::AppendLaunches::Choose);
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
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  cudaStreamDestroy(stream);
  return 0;
}
