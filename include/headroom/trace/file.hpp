// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Files are written to `<path>.partial` and renamed into place, so a crash never leaves half
// a snapshot under the final name.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "headroom/core/error.hpp"
#include "headroom/trace/event.hpp"

namespace headroom::trace {

/// Creates `dir` if needed and checks that a file can be created in it; throws
/// invalid_argument naming the directory and the reason otherwise.
inline void require_writable_directory(std::filesystem::path const& dir) {
  expects(!dir.empty(), "trace: output directory is empty; expected a directory path");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // Ranks may create the same directory at once: what counts is that it exists afterwards.
  std::error_code is_dir_ec;
  expects(std::filesystem::is_directory(dir, is_dir_ec), "trace: output directory '", dir.string(),
          "' cannot be created or is not a directory: ", ec ? ec.message() : std::string("a file has that name"));
  // A name of its own per call, so that ranks probing one directory do not meet.
  auto const probe = dir / (".headroom_trace_probe." + std::to_string(now_ns()) + "." +
                            std::to_string(reinterpret_cast<std::uintptr_t>(&ec)));
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    expects(f.good(), "trace: output directory '", dir.string(), "' is not writable: ", std::strerror(errno));
  }
  std::filesystem::remove(probe, ec);
}

/// Writes `bytes` to `<path>.partial`, then renames it to `path`. On any failure (the disk is
/// full, a file size limit, the directory vanished) the partial file is removed and
/// invalid_argument names the file and the OS reason: no half-written file is ever left.
inline void write_file_atomically(std::filesystem::path const& path, std::string_view bytes) {
  auto partial = path;
  partial += ".partial";
  struct remove_unless_renamed {
    std::filesystem::path const& p;
    bool renamed = false;
    ~remove_unless_renamed() {
      std::error_code ec;
      if (!renamed) std::filesystem::remove(p, ec);
    }
  } guard{partial};
  {
    std::ofstream f(partial, std::ios::binary | std::ios::trunc);
    expects(f.good(), "trace: cannot create '", partial.string(), "': ", std::strerror(errno));
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    int const write_errno = errno;
    expects(f.good(), "trace: writing ", bytes.size(), " bytes to '", partial.string(), "' failed: ",
            std::strerror(write_errno));
    f.close();
    expects(!f.fail(), "trace: closing '", partial.string(), "' failed: ", std::strerror(errno));
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  expects(!ec, "trace: cannot rename '", partial.string(), "' to '", path.string(), "': ", ec.message());
  guard.renamed = true;
}

}  // namespace headroom::trace
