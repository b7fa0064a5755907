// SPDX-License-Identifier: Apache-2.0
#pragma once
// headroom_test::for_each_source_text(root, f): calls f(relative name, text) for every text file
// of the checkout under `root` — build trees, virtual environments, caches, git's files and
// binary files (images, fuzz corpora) left out — and returns how many it visited. What the
// repository-wide checks (references, licence lines) walk.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "common/source_file.hpp"

namespace headroom_test {

// What holds no source of the checkout: build trees, virtual environments, caches, git's files.
inline bool skipped_in_tree(std::filesystem::path const& relative) {
  std::string const first = relative.begin()->string();
  std::string const last = relative.filename().string();
  return first.starts_with("build") || (first.starts_with(".") && first != ".ci" && first != ".gitignore") ||
         last == "build" || last == "__pycache__" || last == "node_modules" || last.ends_with(".egg-info");
}

template <class F>
int for_each_source_text(std::filesystem::path const& root, F&& f) {
  namespace fs = std::filesystem;
  int files = 0;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    auto const relative = fs::relative(it->path(), root);
    if (skipped_in_tree(relative)) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory()) continue;
    if (!it->is_regular_file() || it->file_size() > (std::uintmax_t{1} << 20)) continue;
    std::string const text = read_file(it->path());
    if (text.find('\0') != std::string::npos) continue;  // binary (images, corpora)
    ++files;
    f(relative.generic_string(), text);
  }
  return files;
}

}  // namespace headroom_test
