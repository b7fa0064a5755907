// SPDX-License-Identifier: Apache-2.0
// Replays inputs through a fuzz target without libFuzzer, so every compiler and sanitizer
// preset runs the seed corpus (and any crash file given on the command line) as a plain test.
//
//   fuzz_replay_<target> <file or directory>...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size);

namespace {
int replay(std::filesystem::path const& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: cannot read %s\n", file.c_str());
    return 1;
  }
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <file or directory>...\n", argv[0]);
    return 2;
  }
  std::size_t count = 0;
  int failures = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path const p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (auto const& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (auto const& f : files) failures += replay(f), ++count;
    } else {
      failures += replay(p);
      ++count;
    }
  }
  // An empty corpus would make this test pass without checking anything.
  if (count == 0) {
    std::fprintf(stderr, "fuzz replay: no inputs found\n");
    return 1;
  }
  LLVMFuzzerTestOneInput(nullptr, 0);  // the empty input is always valid
  std::printf("fuzz replay: %zu input(s), %d unreadable\n", count, failures);
  return failures == 0 ? 0 : 1;
}
