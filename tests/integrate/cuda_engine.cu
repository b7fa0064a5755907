// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The CUDA half of docs/integrate.md ("Bring your own engine"), compiled and run on one GPU: the
// engine's own cudaStream_t and ncclComm_t seen through headroom's views (neither is owned, both
// outlive them), and the engine's stream-ordered device allocator as a stream_resource under a
// CUDA unit pool. test_integrate_docs checks that the page quotes this file verbatim.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/check.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/pool/cuda/unit_pool.hpp"
#include "headroom/pool/execution_order.hpp"
#include "headroom/pool/interval.hpp"

// Stand-in for the engine's caching allocator: stream-ordered, counts its allocations.
namespace my_engine {
inline int device_allocations = 0;
inline void* device_malloc(std::size_t bytes, cudaStream_t s) {
  void* p = nullptr;
  if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) return nullptr;
  ++device_allocations;
  return p;
}
inline void device_free(void* p, cudaStream_t s) noexcept { (void)cudaFreeAsync(p, s); }
}  // namespace my_engine

// ---- your stream and your NCCL communicator -------------------------------------------------

// Views of what your engine already owns: headroom never destroys the stream nor calls
// ncclCommDestroy on the communicator.
void all_reduce_gradients(cudaStream_t engine_stream, ncclComm_t engine_comm, std::span<float> device_grads) {
  headroom::cuda::stream_view const s(engine_stream);
  auto comm = headroom::nccl::communicator::view(engine_comm);
  comm.all_reduce(std::span<float const>(device_grads), device_grads, headroom::reduce_op::sum, s);
}

// ---- a device resource ----------------------------------------------------------------------

// Your device allocator as a stream_resource on cuda::stream_view (for a cudaMemPool_t,
// headroom::cuda::async_resource::view(pool) already is one).
class engine_device_resource {
 public:
  [[nodiscard]] void* allocate(headroom::cuda::stream_view const& s, std::size_t bytes, std::size_t alignment) {
    headroom::expects(alignment <= 256, "engine_device_resource: alignment ", alignment, ", expected <= 256");
    void* p = my_engine::device_malloc(bytes, s.get());
    headroom::expects<headroom::capacity_error>(p != nullptr, "engine_device_resource: ", bytes, " bytes do not fit");
    return p;
  }
  void deallocate(headroom::cuda::stream_view const& s, void* p, std::size_t, std::size_t) noexcept {
    my_engine::device_free(p, s.get());
  }
  friend bool operator==(engine_device_resource const&, engine_device_resource const&) = default;
  friend void get_property(engine_device_resource const&, headroom::device_accessible) noexcept {}
};
static_assert(headroom::stream_resource_with<engine_device_resource, headroom::cuda::stream_view,
                                             headroom::device_accessible>);

TEST_CASE("the engine's stream and NCCL communicator, viewed; they outlive the views") {
  int device = 0;
  cudaStream_t raw_stream = nullptr;
  HEADROOM_CUDA_TRY(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
  ncclComm_t raw_comm = nullptr;
  HEADROOM_NCCL_TRY(ncclCommInitAll(&raw_comm, 1, &device));

  std::vector<float> const host{1.5f, -2.0f, 3.25f, 0.0f};
  float* grads = nullptr;
  HEADROOM_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&grads), host.size() * sizeof(float), raw_stream));
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(grads, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, raw_stream));
  all_reduce_gradients(raw_stream, raw_comm, std::span<float>(grads, host.size()));
  {
    auto view = headroom::nccl::communicator::view(raw_comm);
    CHECK(view.rank() == 0);
    CHECK(view.size() == 1);
  }
  std::vector<float> back(host.size());
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(back.data(), grads, back.size() * sizeof(float), cudaMemcpyDeviceToHost, raw_stream));
  HEADROOM_CUDA_TRY(cudaFreeAsync(grads, raw_stream));
  HEADROOM_CUDA_TRY(cudaStreamSynchronize(raw_stream));
  CHECK(back == host);  // the sum over one rank

  int count = 0;
  HEADROOM_NCCL_TRY(ncclCommCount(raw_comm, &count));  // still alive after the views
  CHECK(count == 1);
  HEADROOM_NCCL_TRY(ncclCommDestroy(raw_comm));
  CHECK(cudaStreamQuery(raw_stream) == cudaSuccess);  // still alive too
  HEADROOM_CUDA_TRY(cudaStreamDestroy(raw_stream));
}

TEST_CASE("engine_device_resource under a CUDA unit pool on the engine's stream") {
  namespace hp = headroom::pool;
  cudaStream_t raw_stream = nullptr;
  HEADROOM_CUDA_TRY(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
  headroom::cuda::stream_view const s(raw_stream);
  hp::workload w{"three", {}, {}};
  for (int u = 0; u < 3; ++u) w.units.push_back({"u" + std::to_string(u), {hp::elements_of(headroom::dtype::bf16, 4096)}});
  std::vector<hp::execution_order> const orders{hp::training_order(w)};
  auto const plan = hp::make_interval_plan(w, orders, {.resident = 2});
  int const before = my_engine::device_allocations;
  std::vector<unsigned char> seen(8192);
  {
    hp::cuda_unit_pool<engine_device_resource> pool(plan, engine_device_resource{}, s);
    CHECK(my_engine::device_allocations == before + 1);  // one arena
    auto a = pool.acquire(0, s);
    auto b = pool.acquire(1, s);
    HEADROOM_CUDA_TRY(cudaMemsetAsync(a.bytes(0).data(), 7, a.bytes(0).size(), raw_stream));
    HEADROOM_CUDA_TRY(cudaMemsetAsync(b.bytes(0).data(), 9, b.bytes(0).size(), raw_stream));
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(seen.data(), a.bytes(0).data(), seen.size(), cudaMemcpyDeviceToHost, raw_stream));
    pool.release(a, s);
    pool.release(b, s);
    s.synchronize();
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](unsigned char c) { return c == 7; }));  // b did not overlap a
  HEADROOM_CUDA_TRY(cudaStreamSynchronize(raw_stream));
  HEADROOM_CUDA_TRY(cudaStreamDestroy(raw_stream));
}
