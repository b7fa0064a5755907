// SPDX-License-Identifier: Apache-2.0
// headroom._torch_ops: the CP split and reorder ops registered with PyTorch's dispatcher from C++,
// on the LibTorch stable ABI (torch/csrc/stable, the C shims; TORCH_TARGET_VERSION 2.10), so one
// build loads in every torch from 2.10 on and a call through torch.ops.headroom.* costs no Python.
//
//   headroom::cp_split(Tensor x, Tensor cu_seqlens, int cp_size, int cp_rank, str layout) -> Tensor
//   headroom::cp_split_adjoint(Tensor y, Tensor cu_seqlens, int cp_size, int cp_rank, str layout) -> Tensor
//   headroom::cp_to_sequence_order(Tensor x, Tensor cu_seqlens, int cp_size, str layout) -> Tensor
//   headroom::cp_to_rank_order(Tensor x, Tensor cu_seqlens, int cp_size, str layout) -> Tensor
//
// The same schemas as the Python custom ops of headroom.torch.cp, which registers their fake
// kernels and autograd formulas (the stable ABI has no autograd registration). CPU tensors run
// the host ops of headroom/cp/ops.hpp, CUDA tensors the kernels of python/src/cuda (the launch
// code headroom._cuda uses) on the current stream. Plans (the partition and, on a device, its
// copy of the boundaries) are built once per batch from the values of cu_seqlens and kept (a few,
// most recent first): a call compares the values, which are on the host (headroom.torch.cp's
// Partition keeps them there). A CUDA plan belongs to one stream (its device copy of the
// boundaries is made there and read only there), so dropping it from the cache never frees
// memory a kernel on another stream may still read.
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <variant>
#include <string>
#include <utility>
#include <vector>

#include "common/cp_partition.hpp"
#include "common/element.hpp"
#include "headroom/core/error.hpp"
#include "headroom/cp/ops.hpp"
#ifdef HEADROOM_TORCH_OPS_CUDA
#include "launch.hpp"
#endif

// The shim's error check: STABLE_TORCH_ERROR_CODE_CHECK in newer torch headers, TORCH_ERROR_CODE_CHECK
// in 2.10 / 2.11 (one source for every torch the module is built against).
#if defined(STABLE_TORCH_ERROR_CODE_CHECK)
#define HEADROOM_SHIM_CHECK(call) STABLE_TORCH_ERROR_CODE_CHECK(call)
#else
#define HEADROOM_SHIM_CHECK(call) TORCH_ERROR_CODE_CHECK(call)
#endif

namespace {

using headroom::python::any_partition;
using headroom::python::with_element;
using torch::stable::Tensor;

// ---- plans, found again from the values of cu_seqlens -------------------------------------------

struct cached_plan {
  std::int64_t cp_size, cp_rank;
  std::string layout;
  int device;  // -1: CPU (no device boundaries)
  // The stream the device copy was made on, the only one whose kernels read it: when the plan
  // leaves the cache, the caching allocator hands the copy's block out again on this stream,
  // after those kernels (a launch on another stream could still be reading it). 0 on the CPU.
  std::uintptr_t stream;
  std::vector<std::int64_t> cu;
  any_partition partition;
  Tensor device_cu;  // the device copy of cu the kernels read (undefined on the CPU)
};

/// A dtype as Python spells it (the messages of the Python ops).
std::string dtype_name(torch::headeronly::ScalarType t) {
  using torch::headeronly::ScalarType;
  switch (t) {
    case ScalarType::Float: return "torch.float32";
    case ScalarType::Double: return "torch.float64";
    case ScalarType::Half: return "torch.float16";
    case ScalarType::BFloat16: return "torch.bfloat16";
    case ScalarType::Bool: return "torch.bool";
    case ScalarType::Byte: return "torch.uint8";
    case ScalarType::Char: return "torch.int8";
    case ScalarType::Short: return "torch.int16";
    default: return torch::headeronly::toString(t);
  }
}

/// cu_seqlens' values where they lie on the host (int64 or int32; a contiguous copy only when
/// strided), checked: a call compares them with the cached plans' without copying them out.
class host_boundaries {
 public:
  host_boundaries(Tensor const& cu, char const* op) {
    headroom::expects(cu.dim() == 1, op, ": cu_seqlens has ", cu.dim(), " dimensions, expected one");
    headroom::expects(cu.is_cpu(), op, ": cu_seqlens is on a device, expected a CPU tensor (Partition.cu_seqlens)");
    auto const type = cu.scalar_type();
    i64_ = type == torch::headeronly::ScalarType::Long;
    headroom::expects(i64_ || type == torch::headeronly::ScalarType::Int, op, ": cu_seqlens has dtype ",
                      dtype_name(type), ", expected torch.int32 or torch.int64");
    held_ = cu.is_contiguous() ? cu : torch::stable::contiguous(cu);  // a dispatcher call only when needed
    data_ = held_.const_data_ptr();
    size_ = static_cast<std::size_t>(held_.numel());
  }

  bool operator==(std::vector<std::int64_t> const& values) const {
    if (values.size() != size_) return false;
    if (i64_) return size_ == 0 || std::memcmp(values.data(), data_, size_ * sizeof(std::int64_t)) == 0;
    auto const* p = static_cast<std::int32_t const*>(data_);
    for (std::size_t i = 0; i < size_; ++i)
      if (values[i] != p[i]) return false;
    return true;
  }

  std::vector<std::int64_t> values() const {
    std::vector<std::int64_t> out(size_);
    if (i64_) {
      if (size_) std::memcpy(out.data(), data_, size_ * sizeof(std::int64_t));
    } else {
      auto const* p = static_cast<std::int32_t const*>(data_);
      for (std::size_t i = 0; i < size_; ++i) out[i] = p[i];
    }
    return out;
  }

 private:
  Tensor held_;
  void const* data_ = nullptr;
  std::size_t size_ = 0;
  bool i64_ = true;
};

#ifdef HEADROOM_TORCH_OPS_CUDA
bool capturing(int device, std::uintptr_t stream) {
  return device >= 0 && headroom::python::cuda_ext::capturing(stream);
}
#else
bool capturing(int, std::uintptr_t) { return false; }
#endif

class plan_cache {
 public:
  /// The plan of (cu values, cp_size, cp_rank, layout) for `device` (-1: host only) and the
  /// current `stream` of that device (the one the caller launches on, and the one the device
  /// copy is made on), held by the caller while it launches (the cache may drop it meanwhile).
  ///
  /// Under CUDA-graph capture the graph keeps the plan's device boundaries for every replay, so
  /// a plan used while capturing is pinned: never dropped, its device memory never freed. A
  /// capture cannot hold the host-to-device copy of a new plan; it takes the same batch's plan
  /// of another stream of the device (safe to read from the capturing stream: pinned, it is
  /// never freed), else refuses with the way out.
  std::shared_ptr<cached_plan const> get(Tensor const& cu, std::int64_t cp_size, std::int64_t cp_rank,
                                         std::string const& layout, int device, std::uintptr_t stream, char const* op) {
    host_boundaries const boundaries(cu, op);
    std::lock_guard lock(mutex_);
    auto const same_batch = [&](cached_plan const& c) {
      return c.cp_size == cp_size && c.cp_rank == cp_rank && c.device == device && c.layout == layout &&
             boundaries == c.cu;
    };
    for (auto it = plans_.begin(); it != plans_.end(); ++it) {
      if (it->plan->stream == stream && same_batch(*it->plan)) {
        if (!it->pinned && capturing(device, stream)) it->pinned = true;
        if (it != plans_.begin()) plans_.splice(plans_.begin(), plans_, it);
        return plans_.front().plan;
      }
    }
    if (capturing(device, stream)) {
      for (auto it = plans_.begin(); it != plans_.end(); ++it) {
        if (same_batch(*it->plan)) {
          it->pinned = true;
          return it->plan;
        }
      }
      throw headroom::logic_error(std::string(op) + ": a batch first seen inside a CUDA graph capture (cp_size " +
                                  std::to_string(cp_size) + ", cp_rank " + std::to_string(cp_rank) +
                                  "): its device boundaries need a host-to-device copy, which a capture cannot hold; "
                                  "call the op once with these cu_seqlens on this device before capturing");
    }
    // The partition checks the values; here only that they fit its ints.
    headroom::expects(cp_size == static_cast<int>(cp_size) && cp_rank == static_cast<int>(cp_rank), op, ": cp_size = ",
                      cp_size, ", cp_rank = ", cp_rank, ", expected ints");
    auto values = boundaries.values();
    any_partition partition =
        headroom::python::make_partition(values, static_cast<int>(cp_size), static_cast<int>(cp_rank), layout);
    Tensor device_cu;
    if (device >= 0) {
      Tensor host = torch::stable::empty({static_cast<std::int64_t>(values.size())}, torch::headeronly::ScalarType::Long,
                                         std::nullopt, torch::stable::Device(torch::headeronly::DeviceType::CPU));
      std::memcpy(host.mutable_data_ptr(), values.data(), values.size() * sizeof(std::int64_t));
      device_cu = torch::stable::to(host, torch::stable::Device(torch::headeronly::DeviceType::CUDA,
                                                                 static_cast<torch::stable::DeviceIndex>(device)));
    }
    plans_.push_front({std::make_shared<cached_plan const>(cached_plan{cp_size, cp_rank, layout, device, stream,
                                                                       std::move(values), std::move(partition),
                                                                       device_cu}),
                       false});
    if (plans_.size() > capacity) {  // the least recently used plan no graph holds
      for (auto it = std::prev(plans_.end()); it != plans_.begin(); --it) {  // never the new one, at the front
        if (!it->pinned) {
          plans_.erase(it);
          break;
        }
      }
    }
    return plans_.front().plan;
  }

 private:
  struct slot {
    std::shared_ptr<cached_plan const> plan;
    bool pinned;  // used under capture: a graph reads its device boundaries at every replay
  };
  static constexpr std::size_t capacity = 16;
  std::mutex mutex_;
  std::list<slot> plans_;
};

plan_cache& plans() {
  static plan_cache* cache = new plan_cache;  // never destroyed: device tensors must not be freed at exit
  return *cache;
}

// ---- the ops ---------------------------------------------------------------------------------------

#ifdef HEADROOM_TORCH_OPS_CUDA
/// The current CUDA stream of `device` (what the launch runs on), as an integer handle.
std::uintptr_t current_stream(int device, char const* op) {
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(device, &stream) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error(std::string(op) + ": could not get the current CUDA stream");
  return reinterpret_cast<std::uintptr_t>(stream);
}
#else
std::uintptr_t current_stream(int, char const*) { return 0; }  // CPU tensors only in this build
#endif

/// A contiguous tensor like `x` (dtype, device) with `rows` rows. Through the AOTI shim's
/// empty_strided: torch::stable::new_empty (TORCH_TARGET_VERSION 2.10) finds aten::new_empty by
/// name in the dispatcher and boxes its arguments on every call.
Tensor empty_rows(Tensor const& x, std::int64_t rows) {
  auto const sizes = x.sizes();
  std::size_t const dim = sizes.size();
  std::array<std::int64_t, 16> small{};  // sizes then strides, for up to 8 dimensions
  std::vector<std::int64_t> large(dim > small.size() / 2 ? 2 * dim : 0);
  std::int64_t* const shape = large.empty() ? small.data() : large.data();
  std::int64_t* const strides = shape + dim;
  std::int64_t stride = 1;
  for (std::size_t d = dim; d-- > 0;) {
    shape[d] = d == 0 ? rows : sizes[d];
    strides[d] = stride;
    stride *= shape[d] > 1 ? shape[d] : 1;  // as torch's contiguous strides
  }
  std::int32_t dtype = 0, device_type = 0, device_index = 0;
  HEADROOM_SHIM_CHECK(aoti_torch_get_dtype(x.get(), &dtype));
  HEADROOM_SHIM_CHECK(aoti_torch_get_device_type(x.get(), &device_type));
  HEADROOM_SHIM_CHECK(aoti_torch_get_device_index(x.get(), &device_index));
  AtenTensorHandle handle = nullptr;
  HEADROOM_SHIM_CHECK(aoti_torch_empty_strided(static_cast<std::int64_t>(dim), shape, strides, dtype,
                                                         device_type, device_index, &handle));
  return Tensor(handle);
}

enum class kind { split, split_adjoint, to_sequence_order, to_rank_order };

char const* name_of(kind k) {
  switch (k) {
    case kind::split: return "headroom::cp_split";
    case kind::split_adjoint: return "headroom::cp_split_adjoint";
    case kind::to_sequence_order: return "headroom::cp_to_sequence_order";
    case kind::to_rank_order: return "headroom::cp_to_rank_order";
  }
  return "headroom::cp";
}

Tensor run(kind k, Tensor const& x, Tensor const& cu, std::int64_t cp_size, std::int64_t cp_rank,
           std::string const& layout) {
  char const* op = name_of(k);
  headroom::expects(x.dim() >= 1, op, ": input is a 0-d tensor, expected [rows, ...]");
  headroom::expects(x.is_contiguous(), op, ": input is not contiguous, expected a contiguous tensor (call .contiguous())");
  bool const cuda = x.is_cuda();
  headroom::expects(cuda || x.is_cpu(), op, ": input is on another device than the CPU or CUDA");
  std::uintptr_t const stream = cuda ? current_stream(x.get_device_index(), op) : 0;
  auto const held = plans().get(cu, cp_size, cp_rank, layout, cuda ? x.get_device_index() : -1, stream, op);
  any_partition const& part = held->partition;
  auto const [local_rows, global_rows] =
      part.visit([](auto const& p) { return std::pair{p.local_rows(), p.global_rows()}; });
  bool const to_local = k == kind::split, from_local = k == kind::split_adjoint;
  std::int64_t const in_rows = from_local ? local_rows : global_rows;
  std::int64_t const out_rows = to_local ? local_rows : global_rows;
  headroom::expects(x.size(0) == in_rows, op, ": input has ", x.size(0), " rows, expected ", in_rows,
                    from_local ? " (this rank's rows, cu_seqlens[-1] / cp_size)" : " (cu_seqlens[-1], the padded total)");
  Tensor out = empty_rows(x, out_rows);
  std::int64_t const width = in_rows ? x.numel() / in_rows : 0;
  if (x.numel() == 0 && out.numel() == 0) return out;
  std::size_t const elem = x.element_size();
#ifdef HEADROOM_TORCH_OPS_CUDA
  if (cuda) {
    torch::stable::accelerator::DeviceGuard guard(x.get_device_index());
    namespace ce = headroom::python::cuda_ext;
    ce::device_boundaries const dcu{reinterpret_cast<std::uintptr_t>(held->device_cu.const_data_ptr()),
                                    held->device_cu.numel(), 8};
    ce::device_matrix in{reinterpret_cast<std::uintptr_t>(x.const_data_ptr()), in_rows, width};
    ce::device_matrix o{reinterpret_cast<std::uintptr_t>(out.mutable_data_ptr()), out_rows, width};
    auto const s = stream;
    int const eb = static_cast<int>(elem);
    switch (k) {
      case kind::split: ce::split(part, dcu, in, o, eb, s); break;
      case kind::split_adjoint: ce::split_adjoint(part, dcu, in, o, eb, s); break;
      case kind::to_sequence_order: ce::to_sequence_order(part, dcu, in, o, eb, s); break;
      case kind::to_rank_order: ce::to_rank_order(part, dcu, in, o, eb, s); break;
    }
    return out;
  }
#else
  headroom::expects(!cuda, op, ": a CUDA input, but headroom._torch_ops was built without the CUDA kernels");
#endif
  with_element(elem, op, [&](auto e) {
    using T = decltype(e);
    headroom::cp::matrix_view<T const> in{static_cast<T const*>(x.const_data_ptr()), in_rows, width};
    headroom::cp::matrix_view<T> o{static_cast<T*>(out.mutable_data_ptr()), out_rows, width};
    part.visit([&](auto const& p) {
      switch (k) {
        case kind::split: headroom::cp::split(p, in, o); break;
        case kind::split_adjoint: headroom::cp::split_adjoint(p, in, o); break;
        case kind::to_sequence_order: headroom::cp::to_sequence_order(p, in, o); break;
        case kind::to_rank_order: headroom::cp::to_rank_order(p, in, o); break;
      }
    });
  });
  return out;
}

Tensor cp_split(Tensor x, Tensor cu, std::int64_t cp_size, std::int64_t cp_rank, std::string layout) {
  return run(kind::split, x, cu, cp_size, cp_rank, layout);
}
Tensor cp_split_adjoint(Tensor y, Tensor cu, std::int64_t cp_size, std::int64_t cp_rank, std::string layout) {
  return run(kind::split_adjoint, y, cu, cp_size, cp_rank, layout);
}
// The reorders cover every rank: rank 0's plan serves them.
Tensor cp_to_sequence_order(Tensor x, Tensor cu, std::int64_t cp_size, std::string layout) {
  return run(kind::to_sequence_order, x, cu, cp_size, 0, layout);
}
Tensor cp_to_rank_order(Tensor x, Tensor cu, std::int64_t cp_size, std::string layout) {
  return run(kind::to_rank_order, x, cu, cp_size, 0, layout);
}

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(headroom, m) {
  m.def("cp_split(Tensor x, Tensor cu_seqlens, int cp_size, int cp_rank, str layout) -> Tensor");
  m.def("cp_split_adjoint(Tensor y, Tensor cu_seqlens, int cp_size, int cp_rank, str layout) -> Tensor");
  m.def("cp_to_sequence_order(Tensor x, Tensor cu_seqlens, int cp_size, str layout) -> Tensor");
  m.def("cp_to_rank_order(Tensor x, Tensor cu_seqlens, int cp_size, str layout) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(headroom, CPU, m) {
  m.impl("cp_split", TORCH_BOX(&cp_split));
  m.impl("cp_split_adjoint", TORCH_BOX(&cp_split_adjoint));
  m.impl("cp_to_sequence_order", TORCH_BOX(&cp_to_sequence_order));
  m.impl("cp_to_rank_order", TORCH_BOX(&cp_to_rank_order));
}

#ifdef HEADROOM_TORCH_OPS_CUDA
STABLE_TORCH_LIBRARY_IMPL(headroom, CUDA, m) {
  m.impl("cp_split", TORCH_BOX(&cp_split));
  m.impl("cp_split_adjoint", TORCH_BOX(&cp_split_adjoint));
  m.impl("cp_to_sequence_order", TORCH_BOX(&cp_to_sequence_order));
  m.impl("cp_to_rank_order", TORCH_BOX(&cp_to_rank_order));
}
#endif
