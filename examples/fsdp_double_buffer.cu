// SPDX-License-Identifier: Apache-2.0
// FSDP double buffering with a fixed-address pool: an all-gather stream un-shards the
// parameters of unit u+1 into leased slots while the compute stream runs unit u, across the
// units of a hybrid model (Mamba + MLP + attention), forward then backward.
//
// Ready to copy into an engine: `double_buffered_units` owns the plan, the pool (one arena
// from ncclMemAlloc, registered with NCCL once) and the two streams; `forward` / `backward`
// show the acquire / all-gather / wait / compute / release order. Replace `use_parameters`
// with the layer's kernels.
//
//   example_fsdp_double_buffer     one rank per GPU (up to 2); prints the plan, the pool's
//                                  statistics and "ok" when every unit saw the right parameters
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <vector>

#include <headroom/cuda.hpp>
#include <headroom/nccl.hpp>
#include <headroom/pool/cuda.hpp>
#include <headroom/pool/models.hpp>  // the model presets: included by name

namespace hp = headroom::pool;
namespace nccl = headroom::nccl;
// headroom::cuda is spelled out: a code base that uses CCCL, CUB or Thrust has a global ::cuda.
using bf16 = __nv_bfloat16;

namespace {

// Stand-in for a layer: sums the un-sharded parameters in a fixed order (one block).
__global__ void use_parameters(bf16 const* params, std::size_t n, double* out) {
  __shared__ double partial[256];
  double s = 0.0;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(__bfloat162float(params[i]));
  partial[threadIdx.x] = s;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

// Small integers are exact in bf16, so every sum below is exact.
float shard_value(int rank, std::size_t unit, std::size_t bucket, std::size_t i) {
  return static_cast<float>(static_cast<int>((static_cast<std::size_t>(rank) * 7 + unit * 13 + bucket * 5 + i) % 17) - 8);
}

class double_buffered_units {
 public:
  using pool_type = hp::cuda_unit_pool<nccl::nccl_mem_resource, hp::strict, hp::persistent>;

  double_buffered_units(hp::workload const& w, nccl::communicator& comm)
      : comm_(comm),
        // Plan on the padded sizes the engine will request (a multiple of the DP size), so the
        // slots never grow and their addresses never change.
        plan_(hp::make_plan<hp::max>(w, {}, hp::pad_elements{static_cast<std::uint64_t>(comm.size()) * 64})),
        pool_(plan_, {}, home_.view(), hp::strict([this](hp::move_event const& e) { moves_.emplace_back(e.message); })),
        registration_(hp::register_arena(comm, pool_)) {
    // This rank's shards (the sharded parameters an optimizer would own).
    for (std::size_t u = 0; u < plan_.unit_count(); ++u) {
      auto& unit = shards_.emplace_back();
      for (std::size_t b = 0; b < plan_.bucket_bytes[u].size(); ++b) {
        std::size_t const n = plan_.bucket_bytes[u][b] / sizeof(bf16) / static_cast<std::size_t>(comm.size());
        std::vector<bf16> host(n);
        for (std::size_t i = 0; i < n; ++i) host[i] = __float2bfloat16(shard_value(comm.rank(), u, b, i));
        bf16* d = nullptr;
        HEADROOM_CUDA_TRY(cudaMalloc(&d, n * sizeof(bf16)));
        HEADROOM_CUDA_TRY(cudaMemcpy(d, host.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
        unit.push_back({d, n});
      }
    }
    HEADROOM_CUDA_TRY(cudaMalloc(&sums_, sizeof(double) * 2 * total_buckets()));
    held_.resize(plan_.unit_count());
  }
  double_buffered_units(double_buffered_units const&) = delete;
  double_buffered_units& operator=(double_buffered_units const&) = delete;
  ~double_buffered_units() {
    for (auto& unit : shards_)
      for (auto& s : unit) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(s.data()));
    HEADROOM_CUDA_TRY_NOTHROW(cudaFree(sums_));
    registration_.reset();  // deregister before the pool frees the arena
  }

  void forward() { pass(false); }
  void backward() { pass(true); }
  void synchronize() const { compute_.synchronize(); }

  [[nodiscard]] hp::plan const& plan() const { return plan_; }
  [[nodiscard]] pool_type const& pool() const { return pool_; }
  [[nodiscard]] std::vector<std::string> const& moves() const { return moves_; }
  [[nodiscard]] std::vector<double> sums() const {
    std::vector<double> h(2 * total_buckets());
    HEADROOM_CUDA_TRY(cudaMemcpy(h.data(), sums_, h.size() * sizeof(double), cudaMemcpyDeviceToHost));
    return h;
  }
  [[nodiscard]] std::size_t total_buckets() const {
    std::size_t n = 0;
    for (auto const& b : plan_.bucket_bytes) n += b.size();
    return n;
  }

 private:
  // All-gather unit u into its leased slots on the all-gather stream.
  void gather(std::size_t u) {
    held_[u] = pool_.acquire(u, ag_.view());  // waits (on the device) for the slot's last user
    for (std::size_t b = 0; b < held_[u].size(); ++b)
      comm_.all_gather(std::span<bf16 const>(shards_[u][b]), held_[u].view<bf16>(b), ag_.view());
    gathered_[u % 2].record(ag_.view());
  }

  void pass(bool backward) {
    std::size_t const n = plan_.unit_count();
    auto unit_at = [&](std::size_t i) { return backward ? n - 1 - i : i; };
    std::size_t sum_index = backward ? total_buckets() : 0;
    gather(unit_at(0));
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t const u = unit_at(i);
      if (i + 1 < n) gather(unit_at(i + 1));  // prefetch: overlaps the compute of u
      gathered_[u % 2].wait_on(compute_.view());
      for (std::size_t b = 0; b < held_[u].size(); ++b) {
        auto const params = held_[u].view<bf16>(b);
        use_parameters<<<1, 256, 0, compute_.get()>>>(params.data(), params.size(), sums_ + sum_index++);
      }
      HEADROOM_CUDA_CHECK_LAST();
      pool_.release(held_[u], compute_.view());  // stream-ordered: no host wait
    }
  }

  nccl::communicator& comm_;
  headroom::cuda::stream home_, ag_, compute_;
  headroom::cuda::event gathered_[2];
  std::vector<std::string> moves_;
  hp::plan plan_;
  pool_type pool_;
  nccl::registration registration_;
  std::vector<std::vector<std::span<bf16>>> shards_;
  std::vector<pool_type::lease> held_;
  double* sums_ = nullptr;
};

}  // namespace

int main() {
  int const gpus = headroom::cuda::device_count();
  if (gpus < 1) {
    std::fprintf(stderr, "example_fsdp_double_buffer: needs a CUDA device, found none\n");
    return 1;
  }
  int const ranks = std::min(gpus, 2);

  // Nemotron-H-8B's layer pattern at Megatron's test "floor" (HIDDEN = 256): every unit kind,
  // three different unit shapes, small enough to run anywhere.
  hp::models::hybrid_config c = hp::models::nemotron_h_8b();
  c.name = "Nemotron-H-8B pattern, hidden 256";
  c.hidden = 256;
  c.ffn = 1024;
  c.mamba_heads = 8;
  c.heads = 4;
  c.query_groups = 2;
  c.kv_channels = 64;
  c.vocab = 1024;
  auto const w = hp::models::make_workload(c);

  std::mutex print;
  bool all_ok = true;
  nccl::launch_per_device(nccl::first_devices(ranks), [&](nccl::communicator& comm) {
    double_buffered_units engine(w, comm);
    for (int step = 0; step < 3; ++step) {
      engine.forward();
      engine.backward();
    }
    engine.synchronize();

    // Check: every unit saw the all-gather of every rank's shard, forward and backward.
    auto const got = engine.sums();
    auto const& p = engine.plan();
    std::vector<std::vector<double>> expect(p.unit_count());
    for (std::size_t u = 0; u < p.unit_count(); ++u)
      for (std::size_t b = 0; b < p.bucket_bytes[u].size(); ++b) {
        std::size_t const shard = p.bucket_bytes[u][b] / sizeof(bf16) / static_cast<std::size_t>(comm.size());
        double s = 0.0;
        for (int r = 0; r < comm.size(); ++r)
          for (std::size_t i = 0; i < shard; ++i) s += shard_value(r, u, b, i);
        expect[u].push_back(s);
      }
    // Sums are stored in the order the units ran: forward, then backward (units reversed).
    std::vector<double> want;
    for (std::size_t u = 0; u < p.unit_count(); ++u) want.insert(want.end(), expect[u].begin(), expect[u].end());
    for (std::size_t u = p.unit_count(); u-- > 0;) want.insert(want.end(), expect[u].begin(), expect[u].end());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i] ? 1 : 0;

    std::lock_guard lock(print);
    if (comm.rank() == 0) std::cout << p;
    std::cout << "rank " << comm.rank() << ": " << engine.pool().stats() << "\n";
    for (auto const& m : engine.moves()) std::cout << "rank " << comm.rank() << ": " << m << "\n";
    std::cout << "rank " << comm.rank() << ": " << (bad == 0 ? "ok" : "MISMATCH") << " (" << want.size()
              << " bucket uses over forward + backward, " << bad << " wrong)\n";
    if (bad != 0) all_ok = false;
  });
  return all_ok ? 0 : 1;
}
