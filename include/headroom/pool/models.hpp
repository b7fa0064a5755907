#pragma once
// Workloads of real hybrid models (Mamba + attention + MLP + MoE), built from their configuration
// the way Megatron-FSDP buckets them (reference/maxpool.md §1, §8). Pure functions: used by the
// tests, the footprint benchmark and the demo.
//
// Every layer of the hybrid pattern is an FSDP unit:  M Mamba, * attention, - MLP, E MoE.
// A unit has one bucket per (dtype, is_expert) parameter group, in named_parameters order:
//   bf16 params:   M -> [all];  * -> [all];  - -> [all];  E -> [non-expert, experts / EP]
//   fp8 params:    TE-linear weights become a u8 bucket, the rest (norms, conv1d, dt/A/D,
//                  router) a bf16 bucket; with first_last_layers_bf16 the first and last
//                  layers stay bf16 (a dtype-asymmetric case).
//   gradients:     same groups, every bucket of grad_dtype (Megatron's grad dtype_fn).
// Non-unit parameters (embedding, final norm, untied output layer) form one group that is cut
// into buckets whenever the running element count reaches 40M (Megatron's bucket_size).
// Element counts assume TP = 1 and no padding; vocabulary 131072.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool::models {

struct hybrid_config {
  std::string name;
  std::string pattern;  ///< hybrid_override_pattern: one symbol per layer
  std::uint64_t hidden = 0;
  std::uint64_t ffn = 0;  ///< MLP layers (squared ReLU, not gated)
  std::uint64_t vocab = 131072;
  // Mamba-2 mixer
  std::uint64_t mamba_heads = 0;
  std::uint64_t mamba_head_dim = 64;
  std::uint64_t mamba_groups = 8;
  std::uint64_t mamba_state = 128;
  std::uint64_t conv_kernel = 4;
  // attention
  std::uint64_t heads = 0;
  std::uint64_t query_groups = 0;
  std::uint64_t kv_channels = 128;
  // MoE
  std::uint64_t experts = 0;
  std::uint64_t moe_ffn = 0;
  std::uint64_t shared_ffn = 0;
  std::uint64_t latent = 0;  ///< moe_latent_size; 0: experts work on the hidden size
};

struct build_options {
  std::size_t expert_parallel = 1;          ///< experts are split over EP ranks; must divide `experts`
  bool fp8_params = false;                  ///< fp8_param_gather: TE-linear weights as u8 buckets
  bool first_last_layers_bf16 = true;       ///< with fp8: first and last layers keep bf16 weights
  std::optional<dtype> grad_dtype{};        ///< set: plan the gradient pool (every bucket this dtype)
  std::uint64_t non_unit_bucket_elements = 40'000'000;
};

// ---- per-layer element counts (reference §8 formulas) ---------------------------------------

struct layer_elements {
  std::uint64_t te_linear = 0;   ///< weights of TE linears (FP8-able)
  std::uint64_t other = 0;       ///< norms, conv1d, dt_bias/A_log/D, router: always bf16
  std::uint64_t experts = 0;     ///< all experts (before EP)
  [[nodiscard]] std::uint64_t total() const noexcept { return te_linear + other + experts; }
};

[[nodiscard]] inline layer_elements mamba_layer(hybrid_config const& c) {
  std::uint64_t const hp = c.mamba_heads * c.mamba_head_dim;
  std::uint64_t const gn = c.mamba_groups * c.mamba_state;
  std::uint64_t const in_proj_rows = 2 * hp + 2 * gn + c.mamba_heads;
  std::uint64_t const conv_dim = hp + 2 * gn;
  return {in_proj_rows * c.hidden + c.hidden * hp,
          c.hidden + conv_dim * c.conv_kernel + conv_dim + 3 * c.mamba_heads + hp, 0};
}
[[nodiscard]] inline layer_elements attention_layer(hybrid_config const& c) {
  return {(c.heads + 2 * c.query_groups) * c.kv_channels * c.hidden + c.hidden * c.heads * c.kv_channels, c.hidden,
          0};
}
[[nodiscard]] inline layer_elements mlp_layer(hybrid_config const& c) { return {2 * c.ffn * c.hidden, c.hidden, 0}; }
[[nodiscard]] inline layer_elements moe_layer(hybrid_config const& c) {
  std::uint64_t const d = c.latent > 0 ? c.latent : c.hidden;
  return {2 * c.shared_ffn * c.hidden + 2 * c.latent * c.hidden, c.hidden + c.experts * c.hidden,
          c.experts * 2 * c.moe_ffn * d};
}

[[nodiscard]] inline layer_elements layer_of(hybrid_config const& c, char symbol) {
  switch (symbol) {
    case 'M': return mamba_layer(c);
    case '*': return attention_layer(c);
    case '-': return mlp_layer(c);
    case 'E': return moe_layer(c);
    default: break;
  }
  throw invalid_argument(headroom::detail::concat("pool::models: layer symbol '", symbol, "' in pattern of '", c.name,
                                                  "'; expected one of M * - E"));
}

/// Parameters of the whole model (layers + embedding + final norm + untied output layer).
[[nodiscard]] inline std::uint64_t parameter_count(hybrid_config const& c) {
  std::uint64_t n = 2 * c.vocab * c.hidden + c.hidden;
  for (char s : c.pattern) n += layer_of(c, s).total();
  return n;
}

/// The FSDP workload of one rank (experts divided by expert_parallel).
[[nodiscard]] inline workload make_workload(hybrid_config const& c, build_options const& o = {}) {
  expects(!c.pattern.empty(), "pool::models::make_workload: model '", c.name, "' has an empty layer pattern");
  expects(o.expert_parallel >= 1, "pool::models::make_workload: expert_parallel = ", o.expert_parallel,
          "; expected >= 1");
  expects(o.non_unit_bucket_elements > 0, "pool::models::make_workload: non_unit_bucket_elements must be > 0");
  bool const has_moe = c.pattern.find('E') != std::string::npos;
  if (has_moe)
    expects(c.experts % o.expert_parallel == 0, "pool::models::make_workload: ", c.experts, " experts of '", c.name,
            "' do not split over expert_parallel = ", o.expert_parallel, "; expected a divisor of ", c.experts);
  auto bucket_dtype = [&](dtype d) { return o.grad_dtype ? *o.grad_dtype : d; };

  workload w;
  w.name = c.name;
  if (has_moe) w.name += " EP" + std::to_string(o.expert_parallel);
  if (o.fp8_params) w.name += " fp8";
  if (o.grad_dtype) w.name += std::string(" grads ") + std::string(name_of(*o.grad_dtype));
  std::size_t const layers = c.pattern.size();
  for (std::size_t i = 0; i < layers; ++i) {
    char const s = c.pattern[i];
    layer_elements const e = layer_of(c, s);
    unit u;
    u.name = "layer." + std::to_string(i) + " (" + s + ")";
    bool const fp8_here = o.fp8_params && !(o.first_last_layers_bf16 && (i == 0 || i + 1 == layers));
    if (fp8_here) {
      // FP8 groups are "float8" (u8 storage); their grads are the grad dtype.
      u.buckets.push_back(o.grad_dtype ? elements_of(*o.grad_dtype, e.te_linear, "linear grads")
                                       : fp8(e.te_linear, "fp8 linear weights"));
      u.buckets.push_back(elements_of(bucket_dtype(dtype::bf16), e.other, "bf16 params"));
    } else {
      u.buckets.push_back(elements_of(bucket_dtype(dtype::bf16), e.te_linear + e.other, "params"));
    }
    if (s == 'E') {
      std::uint64_t const local = e.experts / o.expert_parallel;
      u.buckets.push_back(o.grad_dtype || !fp8_here ? elements_of(bucket_dtype(dtype::bf16), local, "experts")
                                                    : fp8(local, "fp8 experts"));
    }
    w.units.push_back(std::move(u));
  }
  // Non-unit group: embedding, final norm, output layer; a bucket closes once it reaches the limit.
  std::uint64_t const params[] = {c.vocab * c.hidden, c.hidden, c.vocab * c.hidden};
  std::uint64_t running = 0;
  for (std::uint64_t n : params) {
    running += n;
    if (running >= o.non_unit_bucket_elements) {
      w.non_unit.push_back(elements_of(bucket_dtype(dtype::bf16), running, "non-unit"));
      running = 0;
    }
  }
  if (running > 0) w.non_unit.push_back(elements_of(bucket_dtype(dtype::bf16), running, "non-unit"));
  return w;
}

// ---- presets (Megatron-Bridge nemotron_h_provider.py; reference §8) -------------------------

[[nodiscard]] inline hybrid_config nemotron_h_4b() {
  hybrid_config c;
  c.name = "Nemotron-H-4B";
  c.pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  c.hidden = 3072;
  c.ffn = 12288;
  c.mamba_heads = 112;
  c.heads = 32;
  c.query_groups = 8;
  return c;
}
[[nodiscard]] inline hybrid_config nemotron_h_8b() {
  hybrid_config c;
  c.name = "Nemotron-H-8B";
  c.pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  c.hidden = 4096;
  c.ffn = 21504;
  c.mamba_heads = 128;
  c.heads = 32;
  c.query_groups = 8;
  return c;
}
[[nodiscard]] inline hybrid_config nemotron_nano_9b_v2() {
  hybrid_config c;
  c.name = "Nemotron-Nano-9B-v2";
  c.pattern = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-";
  c.hidden = 4480;
  c.ffn = 15680;
  c.mamba_heads = 128;
  c.mamba_head_dim = 80;
  c.heads = 40;
  c.query_groups = 8;
  return c;
}
[[nodiscard]] inline hybrid_config nemotron_h_47b() {
  hybrid_config c;
  c.name = "Nemotron-H-47B";
  c.pattern = "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-";
  c.hidden = 8192;
  c.ffn = 30720;
  c.mamba_heads = 256;
  c.mamba_state = 256;
  c.heads = 64;
  c.query_groups = 8;
  return c;
}
[[nodiscard]] inline hybrid_config nemotron_h_56b() {
  hybrid_config c = nemotron_h_47b();
  c.name = "Nemotron-H-56B";
  c.pattern =
      "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
      "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  c.ffn = 32768;
  return c;
}
[[nodiscard]] inline hybrid_config nemotron_3_nano_30b_a3b() {
  hybrid_config c;
  c.name = "Nemotron-3-Nano-30B-A3B";
  c.pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME";
  c.hidden = 2688;
  c.mamba_heads = 64;
  c.heads = 32;
  c.query_groups = 2;
  c.experts = 128;
  c.moe_ffn = 1856;
  c.shared_ffn = 3712;
  return c;
}
/// Layer order assumed (the published counts 40 M, 40 E, 8 * as eight "MEMEM*EMEME" blocks);
/// the footprints depend only on the counts and on which kind comes first. MTP layers omitted.
[[nodiscard]] inline hybrid_config nemotron_3_super_120b_a12b() {
  hybrid_config c;
  c.name = "Nemotron-3-Super-120B-A12B";
  for (int i = 0; i < 8; ++i) c.pattern += "MEMEM*EMEME";
  c.hidden = 4096;
  c.mamba_heads = 128;
  c.heads = 32;
  c.query_groups = 2;
  c.experts = 512;
  c.moe_ffn = 2688;
  c.shared_ffn = 5376;
  c.latent = 1024;
  return c;
}

struct reference_case {
  hybrid_config config;
  std::size_t expert_parallel = 1;
};

/// The model workloads of reference §8, in table order.
[[nodiscard]] inline std::vector<reference_case> reference_cases() {
  return {{nemotron_h_4b(), 1},           {nemotron_h_8b(), 1},
          {nemotron_nano_9b_v2(), 1},     {nemotron_h_47b(), 1},
          {nemotron_h_56b(), 1},          {nemotron_3_nano_30b_a3b(), 1},
          {nemotron_3_nano_30b_a3b(), 8}, {nemotron_3_super_120b_a12b(), 8},
          {nemotron_3_super_120b_a12b(), 64}};
}

}  // namespace headroom::pool::models
