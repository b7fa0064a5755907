// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Host memory with any power-of-two alignment, satisfying stream_resource<_, inline_stream>.
#include <cstddef>
#include <cstdint>
#include <new>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/host/stream.hpp"

namespace headroom::host {

class aligned_resource {
 public:
  /// Returns `bytes` bytes aligned to `alignment` (a power of two). Zero bytes gives a
  /// unique non-null pointer, as operator new does.
  [[nodiscard]] void* allocate(inline_stream const&, std::size_t bytes, std::size_t alignment = default_alignment) {
    expects(is_power_of_two(alignment), "host::aligned_resource: alignment ", alignment,
            " is not a power of two");
    // No object may exceed PTRDIFF_MAX bytes; past it operator new's failure would not name the
    // size (and under AddressSanitizer it aborts instead of throwing).
    expects<capacity_error>(bytes <= static_cast<std::size_t>(PTRDIFF_MAX) - alignment, "host::aligned_resource: ",
                            bytes, " bytes (alignment ", alignment, ") exceed the largest object, PTRDIFF_MAX bytes");
    return ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t{alignment});
  }
  /// Frees at once: host work issued before this call has completed (inline stream).
  void deallocate(inline_stream const&, void* p, std::size_t, std::size_t alignment = default_alignment) noexcept {
    ::operator delete(p, std::align_val_t{alignment});
  }
  friend bool operator==(aligned_resource const&, aligned_resource const&) noexcept = default;
  friend void get_property(aligned_resource const&, host_accessible) noexcept {}
};
static_assert(stream_resource_with<aligned_resource, inline_stream, host_accessible>);
static_assert(!has_property<aligned_resource, device_accessible>);

}  // namespace headroom::host
