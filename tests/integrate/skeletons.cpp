// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The skeletons of docs/integrate.md ("Bring your own engine"), compiled and run: an engine's
// allocator as a stream_resource under a unit pool, its parameter table as a pool workload, its
// process group as a communicator under a stats reduce and the pipeline executor, and a
// pipeline stage run by the host executor. test_integrate_docs checks that the page quotes this
// file verbatim.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine.hpp"
#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/host/event.hpp"
#include "headroom/host/stream.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"
#include "headroom/pool.hpp"
#include "headroom/stats/reducer.hpp"
#include "headroom/stats/report.hpp"

namespace hp = headroom::pool;
namespace pp = headroom::pipeline;
using headroom::host::inline_stream;

// ---- a resource -----------------------------------------------------------------------------

// Your allocator as a headroom::stream_resource: what pools, the pipeline executor, the stats
// and trace adaptors allocate from. On the GPU the stream type is headroom::cuda::stream_view.
class engine_resource {
 public:
  explicit engine_resource(my_engine::allocator& a) noexcept : a_(&a) {}

  // Never returns nullptr: a failure throws (headroom::capacity_error names the request).
  [[nodiscard]] void* allocate(inline_stream const&, std::size_t bytes, std::size_t alignment) {
    void* p = a_->malloc(bytes, alignment);
    headroom::expects<headroom::capacity_error>(p != nullptr, "engine_resource: ", bytes, " bytes do not fit: ",
                                                a_->held(), " of ", a_->budget(), " bytes held");
    return p;
  }
  // Stream-ordered: the memory may be reused by work issued on the stream after this call.
  void deallocate(inline_stream const&, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    a_->free(p, bytes, alignment);
  }
  // Equal when one can free what the other allocated.
  friend bool operator==(engine_resource const&, engine_resource const&) = default;
  // Optional: where the memory can be read (host_accessible, device_accessible).
  friend void get_property(engine_resource const&, headroom::host_accessible) noexcept {}

 private:
  my_engine::allocator* a_;
};
static_assert(headroom::stream_resource_with<engine_resource, inline_stream, headroom::host_accessible>);

// ---- a workload from your parameter table ---------------------------------------------------

headroom::dtype to_headroom(my_engine::dtype t) {
  switch (t) {
    case my_engine::dtype::u8: return headroom::dtype::u8;
    case my_engine::dtype::i32: return headroom::dtype::i32;
    case my_engine::dtype::i64: return headroom::dtype::i64;
    case my_engine::dtype::bf16: return headroom::dtype::bf16;
    case my_engine::dtype::f32: return headroom::dtype::f32;
    case my_engine::dtype::f64: return headroom::dtype::f64;
  }
  throw headroom::invalid_argument("to_headroom: unknown my_engine::dtype " + std::to_string(static_cast<int>(t)));
}

// One pool unit per FSDP unit (in the order the table first names it), one bucket per dtype in
// a unit (in the order its parameters name them: the parameter-group order), parameters with
// fsdp_unit < 0 as non-unit buckets.
hp::workload workload_of(std::string name, std::span<my_engine::parameter const> table) {
  hp::workload w{std::move(name), {}, {}};
  std::map<int, std::size_t> unit_index;  // fsdp_unit -> position in w.units
  for (auto const& p : table) {
    std::uint64_t elements = 1;
    for (std::int64_t const d : p.shape) {
      headroom::expects(d > 0, "workload_of: parameter '", p.name, "' has dimension ", d, "; expected > 0");
      headroom::expects<headroom::capacity_error>(static_cast<std::uint64_t>(d) <= UINT64_MAX / elements,
                                                  "workload_of: parameter '", p.name, "' has more than 2^64 elements");
      elements *= static_cast<std::uint64_t>(d);
    }
    hp::bucket const b = hp::elements_of(to_headroom(p.type), elements, p.name);
    if (p.fsdp_unit < 0) {
      w.non_unit.push_back(b);
      continue;
    }
    auto [it, added] = unit_index.try_emplace(p.fsdp_unit, w.units.size());
    if (added) w.units.push_back({"unit " + std::to_string(p.fsdp_unit), {}});
    auto& buckets = w.units[it->second].buckets;
    auto same = std::find_if(buckets.begin(), buckets.end(), [&](hp::bucket const& x) { return x.type == b.type; });
    if (same == buckets.end()) same = buckets.insert(buckets.end(), {b.type, 0, std::string(headroom::name_of(b.type))});
    headroom::expects<headroom::capacity_error>(b.bytes <= hp::max_workload_bytes - same->bytes, "workload_of: unit ",
                                                p.fsdp_unit, " exceeds 2^62 bytes at parameter '", p.name, "'");
    same->bytes += b.bytes;
  }
  hp::validate(w);
  return w;
}

// ---- a communicator -------------------------------------------------------------------------

// Your process group as a headroom::communicator: what stats reducers, the pipeline executor
// and the cp module's collectives call. Every member is issued by every rank in the same order.
class engine_communicator {
 public:
  using stream_type = inline_stream;  // headroom::cuda::stream_view for a device library

  explicit engine_communicator(my_engine::process_group& g) noexcept : g_(&g) {}

  [[nodiscard]] int rank() const { return g_->rank(); }
  [[nodiscard]] int size() const { return g_->size(); }
  void barrier(stream_type const&) { g_->barrier(); }

  // in.size() == out.size(); in and out may be the same buffer.
  template <class T>
  void all_reduce(std::span<T const> in, std::span<T> out, headroom::reduce_op op, stream_type const&) {
    g_->allreduce(in.data(), out.data(), in.size(), type_of<T>(), op_of(op));
  }
  // out.size() == in.size() * size(), rank-major.
  template <class T>
  void all_gather(std::span<T const> in, std::span<T> out, stream_type const&) {
    g_->allgather(in.data(), out.data(), in.size(), type_of<T>());
  }
  // in.size() == out.size() * size(); rank r gets block r.
  template <class T>
  void reduce_scatter(std::span<T const> in, std::span<T> out, headroom::reduce_op op, stream_type const&) {
    g_->reducescatter(in.data(), out.data(), out.size(), type_of<T>(), op_of(op));
  }
  template <class T>
  void broadcast(std::span<T> buffer, int root, stream_type const&) {
    g_->bcast(buffer.data(), buffer.size(), type_of<T>(), root);
  }
  // The pipeline executor sends and receives std::byte spans.
  template <class T>
  void send(std::span<T const> buffer, int peer, stream_type const&) {
    g_->send(buffer.data(), buffer.size(), type_of<T>(), peer);
  }
  template <class T>
  void recv(std::span<T> buffer, int peer, stream_type const&) {
    g_->recv(buffer.data(), buffer.size(), type_of<T>(), peer);
  }
  // Optional: the pipeline executor calls it when this rank fails, so no peer waits forever.
  void abort() noexcept { g_->abort("engine_communicator: a rank failed"); }

 private:
  template <class T>
  static my_engine::dtype type_of() {
    if constexpr (std::is_same_v<T, std::int32_t>) return my_engine::dtype::i32;
    else if constexpr (std::is_same_v<T, std::int64_t>) return my_engine::dtype::i64;
    else if constexpr (std::is_same_v<T, float>) return my_engine::dtype::f32;
    else if constexpr (std::is_same_v<T, double>) return my_engine::dtype::f64;
    else if constexpr (std::is_same_v<T, std::byte>) return my_engine::dtype::u8;
    else static_assert(sizeof(T) == 0, "engine_communicator: element type without a my_engine::dtype");
  }
  static my_engine::op op_of(headroom::reduce_op op) {
    switch (op) {
      case headroom::reduce_op::sum: return my_engine::op::sum;
      case headroom::reduce_op::max: return my_engine::op::max;
      case headroom::reduce_op::min: return my_engine::op::min;
    }
    throw headroom::invalid_argument("engine_communicator: unknown reduce_op");
  }
  my_engine::process_group* g_;
};
static_assert(headroom::communicator<engine_communicator>);
static_assert(headroom::pipeline::byte_transport<engine_communicator>);

// ---- a pipeline stage -----------------------------------------------------------------------

// One rank's chunks of a model, as the pipeline executor calls them. Virtual stage s scales its
// input by a weight: y = w_s x, on micro-batches of n doubles; the loss is 0.5 |y|^2. The
// executor owns every buffer (sizes from stage_bytes); a span is empty where a buffer does not
// exist (no input on stage 0, no grad_output on the last stage).
struct scale_stage {
  std::size_t n = 0;
  std::map<int, double> weight;  // virtual stage -> w_s (this rank's chunks)
  std::map<int, double> grad;    // virtual stage -> dL/dw_s, summed over micro-batches

  static std::span<double> doubles(std::span<std::byte> b) { return {reinterpret_cast<double*>(b.data()), b.size() / 8}; }
  static std::span<double const> doubles(std::span<std::byte const> b) {
    return {reinterpret_cast<double const*>(b.data()), b.size() / 8};
  }
  // The input of micro-batch k on stage 0: k + 1, k + 2, ...
  void input(int stage, int k, std::span<std::byte const> received, std::span<double> x) const {
    for (std::size_t i = 0; i < n; ++i) x[i] = stage == 0 ? k + 1.0 + static_cast<double>(i) : doubles(received)[i];
  }

  // Reads a.input (empty on stage 0), writes a.output; a.stash keeps x until the backward.
  void forward(pp::forward_args<inline_stream> const& a) {
    auto const x = doubles(a.stash).first(n);
    input(a.stage, a.microbatch, a.input, x);
    auto const y = doubles(a.output);
    for (std::size_t i = 0; i < n; ++i) y[i] = weight.at(a.stage) * x[i];
  }
  // Last stage only: reduces its output to a value, and leaves dL/dy in the stash for backward.
  double loss(pp::loss_args<inline_stream> const& a) {
    auto const y = doubles(a.output);
    auto const dy = doubles(a.stash).subspan(n, n);
    double l = 0;
    for (std::size_t i = 0; i < n; ++i) {
      dy[i] = y[i];
      l += 0.5 * y[i] * y[i];
    }
    return l;
  }
  // Reads a.grad_output (empty on the last stage: dL/dy is in the stash), writes a.grad_input
  // (empty on stage 0) and accumulates the weight gradient.
  void backward(pp::backward_args<inline_stream> const& a) {
    auto const stash = doubles(a.stash);
    auto const x = stash.first(n);
    auto const dy = a.grad_output.empty() ? std::span<double const>(stash.subspan(n, n)) : doubles(a.grad_output);
    auto const dx = doubles(a.grad_input);
    for (std::size_t i = 0; i < n; ++i) {
      grad[a.stage] += dy[i] * x[i];
      if (!dx.empty()) dx[i] = weight.at(a.stage) * dy[i];
    }
  }

  // Bytes per micro-batch and virtual stage: the stash holds x and dL/dy, the output y.
  [[nodiscard]] pp::stage_bytes bytes() const { return {.activations = 2 * n * 8, .output = n * 8, .parameters = 16}; }
};
static_assert(headroom::pipeline::pipeline_stage<scale_stage, inline_stream>);

// ---- checks ---------------------------------------------------------------------------------

namespace {

// A small hybrid model's table: embedding, two layers of a bf16 mixer with f32 norms, an FP8
// MLP unit, and an output layer.
std::vector<my_engine::parameter> table() {
  using my_engine::dtype;
  return {
      {"embedding", {1000, 64}, dtype::bf16, -1},   {"layer0.norm", {64}, dtype::f32, 0},
      {"layer0.in_proj", {64, 256}, dtype::bf16, 0}, {"layer0.out_proj", {256, 64}, dtype::bf16, 0},
      {"layer1.norm", {64}, dtype::f32, 1},         {"layer1.fc1", {64, 512}, dtype::u8, 1},
      {"layer1.fc2", {512, 64}, dtype::u8, 1},      {"layer2.norm", {64}, dtype::f32, 2},
      {"layer2.in_proj", {64, 256}, dtype::bf16, 2}, {"layer2.out_proj", {256, 64}, dtype::bf16, 2},
      {"output", {64, 1000}, dtype::bf16, -1},
  };
}

}  // namespace

TEST_CASE("a parameter table becomes a workload: units in table order, one bucket per dtype") {
  auto const params = table();
  auto const w = workload_of("small hybrid", params);
  hp::workload const expected{"small hybrid",
                              {{"unit 0", {{headroom::dtype::f32, 256, "float32"}, {headroom::dtype::bf16, 65536, "bfloat16"}}},
                               {"unit 1", {{headroom::dtype::f32, 256, "float32"}, {headroom::dtype::u8, 65536, "uint8"}}},
                               {"unit 2", {{headroom::dtype::f32, 256, "float32"}, {headroom::dtype::bf16, 65536, "bfloat16"}}}},
                              {{headroom::dtype::bf16, 128000, "embedding"}, {headroom::dtype::bf16, 128000, "output"}}};
  CHECK(w == expected);

  auto bad = params;
  bad[2].shape = {64, -256};
  try {
    (void)workload_of("bad", bad);
    FAIL("a negative dimension was accepted");
  } catch (headroom::invalid_argument const& e) {
    CHECK(std::string(e.what()) == "workload_of: parameter 'layer0.in_proj' has dimension -256; expected > 0");
  }
}

TEST_CASE("engine_resource under a unit pool: one arena from the engine's allocator, leases that never overlap") {
  auto const params = table();
  auto const w = workload_of("small hybrid", params);
  std::vector<hp::execution_order> const orders{hp::training_order(w)};
  auto const plan = hp::make_interval_plan(w, orders, {.resident = 2});
  CHECK(plan.arena_bytes == hp::lower_bound(w, orders, 2));  // the two largest neighbours, nothing more

  my_engine::allocator engine(1 << 20);
  {
    using pool_t = hp::unit_pool<inline_stream, headroom::host::inline_event, engine_resource>;
    pool_t pool(plan, engine_resource(engine), inline_stream{});
    CHECK(engine.allocations() == 1);
    CHECK(engine.held() == plan.arena_bytes);
    // The training order 0 1 2 2 1 0, each unit held from its acquisition to the next one's:
    // every held unit's bytes keep the value written into them while its neighbour is written.
    std::map<std::size_t, pool_t::lease> held;
    auto const& order = orders[0].units;
    auto intact = [&](std::size_t u, pool_t::lease const& l) {
      for (std::size_t b = 0; b < w.units[u].buckets.size(); ++b)
        for (std::byte const x : l.bytes(b))
          if (x != std::byte{static_cast<unsigned char>(u + 1)}) return false;
      return true;
    };
    for (std::size_t i = 0; i < order.size(); ++i) {
      for (auto it = held.begin(); it != held.end();) {
        if (it->first == order[i] || (i > 0 && it->first == order[i - 1])) {
          ++it;
          continue;
        }
        pool.release(it->second, inline_stream{});
        it = held.erase(it);
      }
      if (!held.contains(order[i])) {
        auto l = pool.acquire(order[i], inline_stream{});
        for (std::size_t b = 0; b < w.units[order[i]].buckets.size(); ++b) {
          auto const bytes = l.bytes(b);
          std::fill(bytes.begin(), bytes.end(), std::byte{static_cast<unsigned char>(order[i] + 1)});
        }
        held.emplace(order[i], std::move(l));
      }
      for (auto const& [u, l] : held) CHECK(intact(u, l));
    }
    for (auto& [u, l] : held) pool.release(l, inline_stream{});
    CHECK(pool.stats().bytes_reserved == plan.arena_bytes);
  }
  CHECK(engine.held() == 0);  // the arena went back to the engine

  my_engine::allocator small(plan.arena_bytes - 1);
  try {
    hp::unit_pool<inline_stream, headroom::host::inline_event, engine_resource> pool(plan, engine_resource(small),
                                                                                    inline_stream{});
    FAIL("an arena larger than the budget was allocated");
  } catch (headroom::capacity_error const& e) {
    CHECK(std::string(e.what()).find(std::to_string(plan.arena_bytes) + " bytes do not fit") != std::string::npos);
  }
}

TEST_CASE("engine_communicator: a stats reduce and every collective on four ranks") {
  using peak_report = headroom::stats::report<headroom::stats::field<"allocated_bytes.all.peak", std::int64_t>,
                                              headroom::stats::field<"free_gigabytes", double, headroom::stats::minimum>>;
  headroom::host::launch(4, [](headroom::host::thread_communicator& ranks) {
    my_engine::process_group group(ranks);
    engine_communicator comm(group);
    int const r = comm.rank();
    peak_report mine;
    mine.get<"allocated_bytes.all.peak">() = (r + 1) * 1000;
    mine.get<"free_gigabytes">() = 10.0 - r;
    auto const all = headroom::stats::max(mine, comm);
    CHECK(all.get<"allocated_bytes.all.peak">() == 4000);
    CHECK(all.get<"free_gigabytes">() == 7.0);

    std::vector<float> in{static_cast<float>(r), 1.0f};
    std::vector<float> sum(2);
    comm.all_reduce(std::span<float const>(in), std::span<float>(sum), headroom::reduce_op::sum, {});
    CHECK(sum == std::vector<float>{6.0f, 4.0f});
    std::vector<std::int32_t> ids(4);
    std::int32_t const id = 10 * r;
    comm.all_gather(std::span<std::int32_t const>(&id, 1), std::span<std::int32_t>(ids), {});
    CHECK(ids == std::vector<std::int32_t>{0, 10, 20, 30});
    std::vector<double> blocks{1.0 * r, 2.0 * r, 3.0 * r, 4.0 * r};
    double block = 0;
    comm.reduce_scatter(std::span<double const>(blocks), std::span<double>(&block, 1), headroom::reduce_op::max, {});
    CHECK(block == 3.0 * (r + 1));
    std::int64_t seed = r == 2 ? 42 : 0;
    comm.broadcast(std::span<std::int64_t>(&seed, 1), 2, {});
    CHECK(seed == 42);
    comm.barrier({});
    std::byte raw{};  // the stand-in refuses to reduce bytes, on every rank, before any collective
    CHECK_THROWS_WITH_AS(group.allreduce(&raw, &raw, 1, my_engine::dtype::u8, my_engine::op::sum),
                         "my_engine::process_group: dtype 0 cannot be reduced", headroom::invalid_argument);
  });
}

TEST_CASE("scale_stage on the host executor, over engine_communicator and engine_resource") {
  pp::pipeline_shape const shape{.stages = 4, .microbatches = 6};
  auto const sched = pp::make_schedule<pp::one_f_one_b>(shape);
  std::vector<double> const weights{0.5, 2.0, -1.5, 3.0};
  std::size_t const n = 3;
  auto const bytes = pp::model_bytes::uniform(shape, scale_stage{.n = n, .weight = {}, .grad = {}}.bytes());
  auto const predicted = pp::predict_memory(sched, bytes, pp::retention::reduced{});

  std::vector<double> losses;
  std::vector<std::int64_t> measured_peak(4);
  std::vector<double> grads(4);
  std::mutex m;
  headroom::host::launch(shape.stages, [&](headroom::host::thread_communicator& ranks) {
    my_engine::process_group group(ranks);
    engine_communicator comm(group);
    my_engine::allocator engine(1 << 16);
    engine_resource resource(engine);
    pp::executor exec(comm, resource, sched, bytes);
    scale_stage stage{.n = n, .weight = {{comm.rank(), weights[static_cast<std::size_t>(comm.rank())]}}, .grad = {}};
    auto result = exec.step(stage, pp::retention::reduced{});
    std::lock_guard lock(m);
    measured_peak[static_cast<std::size_t>(comm.rank())] = exec.statistics().bytes().peak;
    grads[static_cast<std::size_t>(comm.rank())] = stage.grad.at(comm.rank());
    if (!result.losses.empty()) losses = result.losses;
  });

  // y = W x with W = prod w_s, so L_k = 0.5 W^2 |x_k|^2 and dL/dw_s = sum_k 2 L_k / w_s.
  double const big_w = weights[0] * weights[1] * weights[2] * weights[3];
  REQUIRE(losses.size() == 6);
  double total = 0;
  for (int k = 0; k < 6; ++k) {
    double sq = 0;
    for (std::size_t i = 0; i < n; ++i) sq += (k + 1.0 + static_cast<double>(i)) * (k + 1.0 + static_cast<double>(i));
    CHECK(losses[static_cast<std::size_t>(k)] == doctest::Approx(0.5 * big_w * big_w * sq).epsilon(1e-12));
    total += 0.5 * big_w * big_w * sq;
  }
  for (std::size_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(grads[s] == doctest::Approx(2 * total / weights[s]).epsilon(1e-12));
    CHECK(measured_peak[s] == predicted.rank(static_cast<int>(s)).peak);  // the memory model, exactly
  }
  CHECK(measured_peak[0] > measured_peak[3]);  // 1F1B: rank 0 holds the most micro-batches
}
