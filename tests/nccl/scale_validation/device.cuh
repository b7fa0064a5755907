// SPDX-License-Identifier: Apache-2.0
#pragma once
// Scale validation device helpers: the scratch arena, dbuf, pattern kernels, timing medians.
// Part of tests/nccl/scale_validation.cu (one program; this folder is not globbed as programs).
#include "harness.cuh"

namespace scale_validation {

// ---- device helpers --------------------------------------------------------------------------

/// One cudaMalloc per rank, made in a setup phase and freed in a teardown phase; dbufs made
/// while it is installed (use_arena) are carved from it, so the collective phases call neither
/// cudaMalloc nor cudaFree. Stack discipline: arena_scope rewinds to where it started.
class scratch_arena {
 public:
  static constexpr std::size_t align = 256;
  scratch_arena(std::size_t bytes, char const* what) : bytes_(bytes), what_(what) {
    HEADROOM_CUDA_TRY(cudaMalloc(&base_, std::max<std::size_t>(bytes, align)));
  }
  scratch_arena(scratch_arena const&) = delete;
  scratch_arena& operator=(scratch_arena const&) = delete;
  ~scratch_arena() { HEADROOM_CUDA_TRY_NOTHROW(cudaFree(base_)); }
  [[nodiscard]] void* take(std::size_t bytes) {
    std::size_t const need = (std::max<std::size_t>(bytes, 1) + align - 1) / align * align;
    expects<logic_error>(used_ + need <= bytes_, "scale_validation: scratch arena '", what_, "' of ", bytes_,
                         " bytes exhausted (", used_, " used, ", need, " more asked); size it for the largest case");
    void* p = static_cast<std::byte*>(base_) + used_;
    used_ += need;
    return p;
  }
  [[nodiscard]] std::size_t mark() const noexcept { return used_; }
  void rewind(std::size_t m) noexcept { used_ = m; }
  /// Bytes of `count` buffers of the given sizes carved one after another.
  [[nodiscard]] static std::size_t footprint(std::initializer_list<std::size_t> sizes) {
    std::size_t t = 0;
    for (auto b : sizes) t += (std::max<std::size_t>(b, 1) + align - 1) / align * align;
    return t;
  }

 private:
  void* base_ = nullptr;
  std::size_t bytes_, used_ = 0;
  char const* what_;
};

thread_local scratch_arena* t_arena = nullptr;       // installed by use_arena
thread_local bool t_collective_phase = false;         // set by collective_phase

/// Installs `a` for this thread's dbufs until the end of the scope.
class use_arena {
 public:
  explicit use_arena(scratch_arena& a) : prev_(std::exchange(t_arena, &a)) {}
  use_arena(use_arena const&) = delete;
  use_arena& operator=(use_arena const&) = delete;
  ~use_arena() { t_arena = prev_; }

 private:
  scratch_arena* prev_;
};
/// Gives back, at the end of the scope, what this thread's arena handed out inside it. The
/// memory is reused in stream order by the next scope's work on the same stream.
class arena_scope {
 public:
  arena_scope() : a_(t_arena), mark_(a_ != nullptr ? a_->mark() : 0) {}
  arena_scope(arena_scope const&) = delete;
  arena_scope& operator=(arena_scope const&) = delete;
  ~arena_scope() {
    if (a_ != nullptr) a_->rewind(mark_);
  }

 private:
  scratch_arena* a_;
  std::size_t mark_;
};

/// A device buffer: from the installed scratch_arena when there is one (nothing to free), else
/// its own cudaMalloc, which a collective phase refuses (it would be a synchronising call
/// between collectives).
template <class T>
class dbuf {
 public:
  explicit dbuf(std::size_t n) : n_(n) {
    if (t_arena != nullptr) {
      p_ = t_arena->take(n * sizeof(T));
      owned_ = false;
      return;
    }
    expects<logic_error>(!t_collective_phase, "scale_validation: dbuf of ", n * sizeof(T),
                         " bytes by cudaMalloc inside a collective phase (install a scratch_arena in the setup phase)");
    HEADROOM_CUDA_TRY(cudaMalloc(&p_, n == 0 ? 16 : n * sizeof(T)));
  }
  dbuf(dbuf&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), owned_(std::exchange(o.owned_, false)) {}
  dbuf(dbuf const&) = delete;
  dbuf& operator=(dbuf const&) = delete;
  dbuf& operator=(dbuf&&) = delete;
  ~dbuf() {
    if (p_ != nullptr && owned_) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p_));
  }
  [[nodiscard]] T* data() const noexcept { return static_cast<T*>(p_); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return n_ * sizeof(T); }
  void poison(hc::stream_view s, int byte = 0xAB) const {
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemsetAsync(p_, byte, bytes(), s.get()));
  }
  void upload(std::vector<T> const& h, hc::stream_view s) const {
    expects(h.size() == n_, "dbuf::upload: ", h.size(), " elements into ", n_);
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemcpyAsync(p_, h.data(), bytes(), cudaMemcpyHostToDevice, s.get()));
    s.synchronize();  // h may die after the call
  }
  [[nodiscard]] std::vector<T> download(hc::stream_view s) const {
    std::vector<T> h(n_);
    s.synchronize();
    if (n_ > 0) HEADROOM_CUDA_TRY(cudaMemcpy(h.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  void* p_ = nullptr;
  std::size_t n_;
  bool owned_ = true;
};

template <class T>
[[nodiscard]] bool same_bytes(std::vector<T> const& a, std::vector<T> const& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

__host__ __device__ inline u64 mix64(u64 x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/// Pseudo-random pattern of a [rows, width] uint16 tensor: element (r, c) = f(seed, r, c).
__global__ void pattern_kernel(std::uint16_t* out, i64 rows, i64 width, u64 seed) {
  i64 const n = rows * width;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    out[i] = static_cast<std::uint16_t>(mix64(seed ^ static_cast<u64>(i) * 0x9E3779B97F4A7C15ull));
}
__global__ void check_pattern_kernel(std::uint16_t const* in, i64 rows, i64 width, u64 seed, unsigned long long* bad) {
  i64 const n = rows * width;
  unsigned long long mine = 0;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x)
    mine += in[i] != static_cast<std::uint16_t>(mix64(seed ^ static_cast<u64>(i) * 0x9E3779B97F4A7C15ull));
  if (mine != 0) atomicAdd(bad, mine);
}

/// Keeps the GPU busy while the host enqueues the timed work (host launch cost is not timed).
__global__ void spin_kernel(long long cycles) {
  long long const start = clock64();
  while (clock64() - start < cycles) {
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median ms of `op` on `s` between two events; `before` runs untimed ahead of each event pair
/// (a spin kernel for local ops, a barrier for collectives).
double median_ms(hc::stream_view s, int warmup, int iterations, std::function<void()> const& before,
                 std::function<void()> const& op) {
  hc::event a(hc::event_options{.timing = true}), b(hc::event_options{.timing = true});
  for (int i = 0; i < warmup; ++i) {
    before();
    op();
  }
  s.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    before();
    a.record(s);
    op();
    b.record(s);
    b.synchronize();
    ms.push_back(elapsed_ms(a, b));
  }
  return median(ms);
}

std::string utc_now() {
  std::time_t const t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

}  // namespace scale_validation
