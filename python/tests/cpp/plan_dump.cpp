// SPDX-License-Identifier: Apache-2.0
// The C++ side of python/tests/test_pool_presets.py: plans every model preset (three workload
// variants, seven planner settings) with the headers alone and prints each plan as one JSON line:
// its key, fingerprint, arena bytes, every bucket's offsets, and its printed text. The test
// builds the same plans through headroom._core and compares them field by field.
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/pool.hpp"
#include "headroom/pool/models.hpp"

namespace {

using namespace headroom;
using namespace headroom::pool;

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

void print(std::string const& key, plan const& p) {
  std::cout << "{\"key\": " << json_string(key) << ", \"fingerprint\": " << fingerprint(p)
            << ", \"arena_bytes\": " << p.arena_bytes << ", \"offsets\": [";
  for (std::size_t u = 0; u < p.unit_count(); ++u) {
    std::cout << (u ? ", [" : "[");
    for (std::size_t b = 0; b < p.bucket_shape[u].size(); ++b) {
      std::cout << (b ? ", [" : "[");
      auto const slots = p.candidate_slots(u, b);
      for (std::size_t i = 0; i < slots.size(); ++i) std::cout << (i ? ", " : "") << p.slots[slots[i]].offset;
      std::cout << "]";
    }
    std::cout << "]";
  }
  std::cout << "], \"text\": " << json_string(p.to_string() + p.describe_units()) << "}\n";
}

}  // namespace

int main() {
  for (auto const& c : models::all_cases()) {
    struct variant {
      char const* name;
      models::build_options options;
    };
    std::vector<variant> variants{{"bf16", {}}, {"fp8", {}}, {"grads-f32", {}}};
    variants[1].options.fp8_params = true;
    variants[2].options.grad_dtype = dtype::f32;
    for (auto& v : variants) {
      v.options.expert_parallel = c.expert_parallel;
      workload const w = models::make_workload(c.config, v.options);
      std::string const key = c.config.name + "|" + std::to_string(c.expert_parallel) + "|" + v.name + "|";
      std::vector<execution_order> const both{training_order(w), evaluation_order(w)};
      std::vector<execution_order> const train{training_order(w)};
      print(key + "max", make_plan<max>(w));
      print(key + "fixed", make_plan<fixed>(w));
      print(key + "max-bytes-3-512", make_plan<max, by_bytes>(w, {.buffers = 3, .alignment = 512}));
      print(key + "max-pad64", make_plan<max>(w, {}, pad_elements{64}));
      print(key + "fixed-bytes-align4096", make_plan<fixed, by_bytes>(w, {}, align_bytes<4096>{}));
      print(key + "interval-2", make_interval_plan(w, both));
      print(key + "interval-3-pad8", make_interval_plan(w, train, {.resident = 3}, pad_elements{8}));
    }
  }
}
