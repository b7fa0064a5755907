// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom: included by name, not by the umbrella (a table of presets, not part of the pool API)
// Workloads of real hybrid models (Mamba + attention + MLP + MoE), built from their configuration
// the way Megatron-FSDP buckets them (one unit per layer). Pure functions: used by the
// tests, the footprint benchmark and the demo.
//
// Data, not code: model_table() lists every model as a layer pattern and its dimensions; the
// layer symbols (layer_kinds) say which parts a layer has; the element count of each part is one
// formula of the dimensions. Every layer is an FSDP unit, with one bucket per (dtype, is_expert)
// parameter group in the order Megatron opens them (see make_workload):
//   bf16 params:   [params] or [params, experts / EP]
//   fp8 params:    [bf16 params (norms, conv1d, dt/A/D, router), u8 linear weights, u8 experts];
//                  with first_last_layers_bf16 the first and last layers stay bf16
//   gradients:     same groups, every bucket of grad_dtype (Megatron's grad dtype_fn).
// Non-unit parameters (embedding, final norm, untied output layer) form one group that is cut
// into buckets whenever the running element count reaches 40M (Megatron's bucket_size).
// Element counts assume TP = 1 and no padding.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool::models {

/// How a layer mixes tokens, and its feed-forward part. A layer symbol of a pattern is one
/// (mixer, ffn) pair (layer_kinds below); the element counts of each part follow from the
/// model's dimensions.
enum class mixer : std::uint8_t { none, mamba2, attention, gated_delta_net, mamba1, attention_and_mamba2 };
enum class ffn : std::uint8_t { none, mlp, moe };

struct layer_kind {
  char symbol;
  mixer mix;
  ffn feed_forward;
  std::string_view what;
};

/// Megatron's hybrid symbols (M * - E: one sub-layer per FSDP unit), and symbols for layers
/// that hold a mixer and a feed-forward part in one unit (Hugging Face style decoder layers).
inline constexpr layer_kind layer_kinds[] = {
    {'M', mixer::mamba2, ffn::none, "Mamba-2"},
    {'*', mixer::attention, ffn::none, "attention"},
    {'-', mixer::none, ffn::mlp, "MLP"},
    {'E', mixer::none, ffn::moe, "MoE"},
    {'S', mixer::mamba2, ffn::moe, "Mamba-2 + MoE"},
    {'A', mixer::attention, ffn::moe, "attention + MoE"},
    {'G', mixer::gated_delta_net, ffn::moe, "Gated DeltaNet + MoE"},
    {'m', mixer::mamba1, ffn::mlp, "Mamba-1 + MLP"},
    {'e', mixer::mamba1, ffn::moe, "Mamba-1 + MoE"},
    {'a', mixer::attention, ffn::mlp, "attention + MLP"},
    {'P', mixer::attention_and_mamba2, ffn::mlp, "parallel attention and Mamba-2 + MLP"},
};

struct hybrid_config {
  std::string name;
  std::string pattern;  ///< one symbol of layer_kinds per layer (Megatron's hybrid_override_pattern)
  std::uint64_t hidden = 0;
  std::uint64_t ffn = 0;  ///< MLP intermediate size
  std::uint64_t vocab = 131072;
  bool tied_embeddings = false;  ///< output layer shares the embedding
  bool gated_mlp = false;        ///< SwiGLU (3 matrices) for MLP, experts and shared experts; else 2
  // Mamba-2 mixer
  std::uint64_t mamba_heads = 0;
  std::uint64_t mamba_head_dim = 64;
  std::uint64_t mamba_groups = 8;
  std::uint64_t mamba_state = 128;
  std::uint64_t conv_kernel = 4;
  bool mamba_norm = true;  ///< gated RMSNorm over the inner dimension
  // Mamba-1 mixer (d_inner = expand * hidden)
  std::uint64_t mamba1_expand = 2;
  std::uint64_t mamba1_dt_rank = 0;
  // attention
  std::uint64_t heads = 0;
  std::uint64_t query_groups = 0;
  std::uint64_t kv_channels = 128;
  bool attention_output_gate = false;  ///< query projection doubled for a sigmoid output gate
  bool qk_norm = false;
  // Gated DeltaNet
  std::uint64_t gdn_key_heads = 0;
  std::uint64_t gdn_value_heads = 0;
  std::uint64_t gdn_key_dim = 0;
  std::uint64_t gdn_value_dim = 0;
  // MoE
  std::uint64_t experts = 0;
  std::uint64_t moe_ffn = 0;
  std::uint64_t shared_ffn = 0;
  std::uint64_t latent = 0;  ///< moe_latent_size; 0: experts work on the hidden size
  bool shared_expert_gate = false;
};

struct build_options {
  std::size_t expert_parallel = 1;          ///< experts are split over EP ranks; must divide `experts`
  bool fp8_params = false;                  ///< fp8_param_gather: TE-linear weights as u8 buckets
  bool first_last_layers_bf16 = true;       ///< with fp8: first and last layers keep bf16 weights
  std::optional<dtype> grad_dtype{};        ///< set: plan the gradient pool (every bucket this dtype)
  std::uint64_t non_unit_bucket_elements = 40'000'000;
};

// ---- per-layer element counts (from each model's configuration) ----------------------------

struct layer_elements {
  std::uint64_t te_linear = 0;   ///< weights of TE linears (FP8-able)
  std::uint64_t other = 0;       ///< norms, conv1d, dt_bias/A_log/D, router: always bf16
  std::uint64_t experts = 0;     ///< all experts (before EP)
  [[nodiscard]] std::uint64_t total() const;
};

namespace detail {
/// An element count derived from a model config. A config's dimensions are user input, so its
/// + and * throw capacity_error naming the model and both operands when the result does not fit
/// in 64 bits, instead of wrapping to a small (under-allocated) bucket.
struct count {
  std::uint64_t v = 0;
  std::string_view model;
};
[[nodiscard]] inline count operator*(count a, count b) {
  auto const model = a.model.empty() ? b.model : a.model;
  return {checked_mul(a.v, b.v, "pool::models: element count of '", model, "'"), model};
}
[[nodiscard]] inline count operator+(count a, count b) {
  auto const model = a.model.empty() ? b.model : a.model;
  expects<capacity_error>(a.v <= UINT64_MAX - b.v, "pool::models: element count of '", model, "': ", a.v, " + ", b.v,
                          " overflows 64-bit unsigned arithmetic");
  return {a.v + b.v, model};
}
[[nodiscard]] inline count operator*(std::uint64_t a, count b) { return count{a, b.model} * b; }
[[nodiscard]] inline count operator*(count a, std::uint64_t b) { return a * count{b, a.model}; }
[[nodiscard]] inline count operator+(std::uint64_t a, count b) { return count{a, b.model} + b; }
[[nodiscard]] inline count operator+(count a, std::uint64_t b) { return a + count{b, a.model}; }
}  // namespace detail

[[nodiscard]] inline std::uint64_t layer_elements::total() const {
  return (detail::count{te_linear, "layer"} + other + experts).v;
}
[[nodiscard]] inline layer_elements operator+(layer_elements a, layer_elements b) {
  auto const sum = [](std::uint64_t x, std::uint64_t y) { return (detail::count{x, "layer"} + y).v; };
  return {sum(a.te_linear, b.te_linear), sum(a.other, b.other), sum(a.experts, b.experts)};
}

// Each part counts its own pre-norm (fused into its first TE linear in Megatron) in `other`.
// Every product and sum goes through detail::count (checked); `n(x)` starts one.
[[nodiscard]] inline layer_elements mamba_layer(hybrid_config const& c) {
  auto const n = [&](std::uint64_t x) { return detail::count{x, c.name}; };
  auto const hp = n(c.mamba_heads) * c.mamba_head_dim;
  auto const gn = n(c.mamba_groups) * c.mamba_state;
  auto const in_proj_rows = 2 * hp + 2 * gn + c.mamba_heads;
  auto const conv_dim = hp + 2 * gn;
  return {(in_proj_rows * c.hidden + n(c.hidden) * hp).v,
          (n(c.hidden) + conv_dim * c.conv_kernel + conv_dim + 3 * n(c.mamba_heads) + (c.mamba_norm ? hp.v : 0)).v, 0};
}
[[nodiscard]] inline layer_elements mamba1_layer(hybrid_config const& c) {
  auto const n = [&](std::uint64_t x) { return detail::count{x, c.name}; };
  auto const d = n(c.mamba1_expand) * c.hidden;
  std::uint64_t const r = c.mamba1_dt_rank;
  std::uint64_t const s = c.mamba_state;
  // in_proj, x_proj, dt_proj, out_proj | norm, conv weight + bias, dt bias, A_log, D, dt/B/C norms
  return {(n(c.hidden) * 2 * d + d * (n(r) + 2 * n(s)) + r * d + d * c.hidden).v,
          (n(c.hidden) + d * c.conv_kernel + d + d + d * s + d + r + 2 * n(s)).v, 0};
}
[[nodiscard]] inline layer_elements attention_layer(hybrid_config const& c) {
  auto const n = [&](std::uint64_t x) { return detail::count{x, c.name}; };
  auto const q = n(c.heads) * c.kv_channels * (c.attention_output_gate ? 2 : 1);
  auto const kv = 2 * n(c.query_groups) * c.kv_channels;
  return {((q + kv) * c.hidden + n(c.hidden) * c.heads * c.kv_channels).v,
          (n(c.hidden) + (c.qk_norm ? (2 * n(c.kv_channels)).v : 0)).v, 0};
}
[[nodiscard]] inline layer_elements gated_delta_net_layer(hybrid_config const& c) {
  auto const n = [&](std::uint64_t x) { return detail::count{x, c.name}; };
  auto const k = n(c.gdn_key_heads) * c.gdn_key_dim;
  auto const v = n(c.gdn_value_heads) * c.gdn_value_dim;
  // in_proj_qkvz, in_proj_ba, out_proj | norm, conv1d (no bias), dt_bias, A_log, gated norm
  return {(n(c.hidden) * (2 * k + 2 * v + 2 * n(c.gdn_value_heads)) + v * c.hidden).v,
          (n(c.hidden) + (2 * k + v) * c.conv_kernel + 2 * n(c.gdn_value_heads) + c.gdn_value_dim).v, 0};
}
[[nodiscard]] inline layer_elements mlp_layer(hybrid_config const& c) {
  auto const n = [&](std::uint64_t x) { return detail::count{x, c.name}; };
  return {(n(c.gated_mlp ? 3 : 2) * c.ffn * c.hidden).v, c.hidden, 0};
}
[[nodiscard]] inline layer_elements moe_layer(hybrid_config const& c) {
  auto const n = [&](std::uint64_t x) { return detail::count{x, c.name}; };
  std::uint64_t const d = c.latent > 0 ? c.latent : c.hidden;
  std::uint64_t const mats = c.gated_mlp ? 3 : 2;
  return {(n(mats) * c.shared_ffn * c.hidden + 2 * n(c.latent) * c.hidden).v,
          (n(c.hidden) + n(c.experts) * c.hidden + (c.shared_expert_gate ? c.hidden : 0)).v,
          (n(c.experts) * mats * c.moe_ffn * d).v};
}

[[nodiscard]] inline layer_kind const& kind_of(hybrid_config const& c, char symbol) {
  for (auto const& k : layer_kinds)
    if (k.symbol == symbol) return k;
  std::string known;
  for (auto const& k : layer_kinds) known += k.symbol;
  throw invalid_argument(headroom::detail::concat("pool::models: layer symbol '", symbol, "' in pattern of '", c.name,
                                                  "'; expected one of ", known));
}

[[nodiscard]] inline layer_elements layer_of(hybrid_config const& c, char symbol) {
  layer_kind const& k = kind_of(c, symbol);
  layer_elements e;
  switch (k.mix) {
    case mixer::none: break;
    case mixer::mamba2: e = mamba_layer(c); break;
    case mixer::attention: e = attention_layer(c); break;
    case mixer::gated_delta_net: e = gated_delta_net_layer(c); break;
    case mixer::mamba1: e = mamba1_layer(c); break;
    case mixer::attention_and_mamba2:  // one input norm feeds both branches
      e = attention_layer(c) + mamba_layer(c);
      e.other -= c.hidden;  // each branch counted c.hidden of it: no wrap
      break;
  }
  switch (k.feed_forward) {
    case ffn::none: break;
    case ffn::mlp: e = e + mlp_layer(c); break;
    case ffn::moe: e = e + moe_layer(c); break;
  }
  return e;
}

/// Parameters of the whole model (layers + embedding + final norm + output layer unless tied).
[[nodiscard]] inline std::uint64_t parameter_count(hybrid_config const& c) {
  auto n = detail::count{c.tied_embeddings ? 1u : 2u, c.name} * c.vocab * c.hidden + c.hidden;
  for (char s : c.pattern) n = n + layer_of(c, s).total();
  return n.v;
}

/// The FSDP workload of one rank (experts divided by expert_parallel). Bucket order is the
/// order Megatron opens parameter groups in: a layer's first parameter is a norm (TE's
/// LayerNormLinear registers layer_norm_weight before weight; MambaMixer builds in_proj, a
/// LayerNormLinear, first), so under fp8 the bf16 bucket comes first.
///   bf16:  [params, experts]          fp8:  [bf16 params, fp8 linear weights, fp8 experts]
/// Names: "<model>[ EP<n>][ fp8 | fp8 bf16-ends][ grads <dtype>]" ("bf16-ends": first and
/// last layers keep bf16 weights).
[[nodiscard]] inline workload make_workload(hybrid_config const& c, build_options const& o = {}) {
  expects(!c.pattern.empty(), "pool::models::make_workload: model '", c.name, "' has an empty layer pattern");
  expects(o.expert_parallel >= 1, "pool::models::make_workload: expert_parallel = ", o.expert_parallel,
          "; expected >= 1");
  expects(o.non_unit_bucket_elements > 0, "pool::models::make_workload: non_unit_bucket_elements must be > 0");
  bool has_moe = false;
  for (char s : c.pattern) has_moe = has_moe || kind_of(c, s).feed_forward == ffn::moe;
  if (has_moe)
    expects(c.experts % o.expert_parallel == 0, "pool::models::make_workload: ", c.experts, " experts of '", c.name,
            "' do not split over expert_parallel = ", o.expert_parallel, "; expected a divisor of ", c.experts);
  auto bucket_dtype = [&](dtype d) { return o.grad_dtype ? *o.grad_dtype : d; };
  // FP8 groups are "float8" (u8 storage); their grads are the grad dtype.
  auto fp8_or_grad = [&](std::uint64_t n, char const* label) {
    return o.grad_dtype ? elements_of(*o.grad_dtype, n, label) : fp8(n, label);
  };

  workload w;
  w.name = c.name;
  if (has_moe) w.name += " EP" + std::to_string(o.expert_parallel);
  if (o.fp8_params) w.name += o.first_last_layers_bf16 ? " fp8 bf16-ends" : " fp8";
  if (o.grad_dtype) w.name += std::string(" grads ") + std::string(name_of(*o.grad_dtype));
  std::size_t const layers = c.pattern.size();
  for (std::size_t i = 0; i < layers; ++i) {
    char const s = c.pattern[i];
    layer_elements const e = layer_of(c, s);
    unit u;
    u.name = "layer." + std::to_string(i) + " (" + s + ")";
    bool const fp8_here = o.fp8_params && !(o.first_last_layers_bf16 && (i == 0 || i + 1 == layers));
    if (fp8_here) {
      u.buckets.push_back(elements_of(bucket_dtype(dtype::bf16), e.other, "bf16 params"));
      if (e.te_linear > 0) u.buckets.push_back(fp8_or_grad(e.te_linear, "fp8 linear weights"));
    } else {
      u.buckets.push_back(elements_of(bucket_dtype(dtype::bf16), (detail::count{e.te_linear, c.name} + e.other).v, "params"));
    }
    if (e.experts > 0) {
      std::uint64_t const local = e.experts / o.expert_parallel;
      u.buckets.push_back(fp8_here ? fp8_or_grad(local, "fp8 experts")
                                   : elements_of(bucket_dtype(dtype::bf16), local, "experts"));
    }
    w.units.push_back(std::move(u));
  }
  // Non-unit group: embedding, final norm, output layer; a bucket closes once it reaches the limit.
  std::uint64_t const embedding = (detail::count{c.vocab, c.name} * c.hidden).v;
  std::vector<std::uint64_t> params{embedding, c.hidden};
  if (!c.tied_embeddings) params.push_back(embedding);
  std::uint64_t running = 0;
  for (std::uint64_t n : params) {
    running = (detail::count{running, c.name} + n).v;
    if (running >= o.non_unit_bucket_elements) {
      w.non_unit.push_back(elements_of(bucket_dtype(dtype::bf16), running, "non-unit"));
      running = 0;
    }
  }
  if (running > 0) w.non_unit.push_back(elements_of(bucket_dtype(dtype::bf16), running, "non-unit"));
  return w;
}

// ---- the model table ------------------------------------------------------------------------
// Nemotron family: Megatron-LM examples/post_training/modelopt/conf/nvidia/*.sh and
// Megatron-Bridge nemotron_h_provider.py. Others: the models'
// Hugging Face config.json values, cited per row. TP = 1, no padding.

[[nodiscard]] inline std::vector<hybrid_config> const& model_table() {
  static std::vector<hybrid_config> const table = [] {
    std::string const h56 =
        "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
        "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
    std::string qwen3_next;  // full_attention_interval 4: every fourth layer is gated attention
    for (int i = 0; i < 12; ++i) qwen3_next += "GGGA";
    std::string jamba;  // attn_layer_offset 4 / period 8; expert_layer_offset 1 / period 2
    for (int i = 0; i < 4; ++i) jamba += "memeaeme";
    std::string granite;  // layer_types: attention at layers 5, 15, 25, 35 of 40
    for (int i = 0; i < 4; ++i) granite += "SSSSSASSSS";
    return std::vector<hybrid_config>{
        {.name = "Nemotron-H-4B", .pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", .hidden = 3072,
         .ffn = 12288, .mamba_heads = 112, .heads = 32, .query_groups = 8},
        {.name = "Nemotron-H-8B", .pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", .hidden = 4096,
         .ffn = 21504, .mamba_heads = 128, .heads = 32, .query_groups = 8},
        {.name = "Nemotron-Nano-9B-v2", .pattern = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
         .hidden = 4480, .ffn = 15680, .mamba_heads = 128, .mamba_head_dim = 80, .heads = 40, .query_groups = 8},
        {.name = "Nemotron-H-47B",
         .pattern = "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-",
         .hidden = 8192, .ffn = 30720, .mamba_heads = 256, .mamba_state = 256, .heads = 64, .query_groups = 8},
        {.name = "Nemotron-H-56B", .pattern = h56, .hidden = 8192, .ffn = 32768, .mamba_heads = 256, .mamba_state = 256,
         .heads = 64, .query_groups = 8},
        {.name = "Nemotron-3-Nano-30B-A3B", .pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
         .hidden = 2688, .mamba_heads = 64, .heads = 32, .query_groups = 2, .experts = 128, .moe_ffn = 1856,
         .shared_ffn = 3712},
        // --hybrid-override-pattern of NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh (MTP layers omitted).
        {.name = "Nemotron-3-Super-120B-A12B",
         .pattern = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
         .hidden = 4096, .mamba_heads = 128, .heads = 32, .query_groups = 2, .experts = 512, .moe_ffn = 2688,
         .shared_ffn = 5376, .latent = 1024},
        // Qwen/Qwen3-Next-80B-A3B-Instruct config.json: hidden_size 2048, 48 layers,
        // full_attention_interval 4, num_attention_heads 16, num_key_value_heads 2, head_dim 256
        // (gated attention, q/k norm), linear_num_key_heads 16, linear_num_value_heads 32,
        // linear_key/value_head_dim 128, linear_conv_kernel_dim 4, num_experts 512,
        // moe_intermediate_size 512, shared_expert_intermediate_size 512, vocab_size 151936,
        // tie_word_embeddings false.
        {.name = "Qwen3-Next-80B-A3B", .pattern = qwen3_next, .hidden = 2048, .vocab = 151936, .gated_mlp = true,
         .heads = 16, .query_groups = 2, .kv_channels = 256, .attention_output_gate = true, .qk_norm = true,
         .gdn_key_heads = 16, .gdn_value_heads = 32, .gdn_key_dim = 128, .gdn_value_dim = 128, .experts = 512,
         .moe_ffn = 512, .shared_ffn = 512, .shared_expert_gate = true},
        // ibm-granite/granite-4.0-h-small (GGUF metadata of the release): hidden 4096, 40 blocks,
        // 32 heads, 8 KV heads (GQA as the other Granite-4.0-H configs), head dim 128,
        // ssm inner 8192 = 128 heads x 64, 1 group, state 128, conv 4, 72 experts of 768,
        // shared expert 1536, vocab 100352. Embeddings tied as in the Granite-4.0 configs.
        {.name = "Granite-4.0-H-Small", .pattern = granite, .hidden = 4096, .vocab = 100352, .tied_embeddings = true,
         .gated_mlp = true, .mamba_heads = 128, .mamba_groups = 1, .heads = 32, .query_groups = 8, .experts = 72,
         .moe_ffn = 768, .shared_ffn = 1536},
        // ai21labs/AI21-Jamba-1.5-Mini config.json (same layout as Jamba-v0.1): hidden_size 4096,
        // 32 layers, intermediate_size 14336, attn_layer_period 8 / offset 4, expert_layer_period
        // 2 / offset 1, num_experts 16, 32 heads, 8 KV heads, mamba_d_state 16, mamba_d_conv 4,
        // mamba_expand 2, mamba_dt_rank 256, vocab_size 65536, tie_word_embeddings false.
        {.name = "Jamba-1.5-Mini", .pattern = jamba, .hidden = 4096, .ffn = 14336, .vocab = 65536, .gated_mlp = true,
         .mamba_state = 16, .mamba1_dt_rank = 256, .heads = 32, .query_groups = 8, .experts = 16, .moe_ffn = 14336},
        // tiiuae/Falcon-H1-0.5B (Transformers FalconH1 docs table and config.json): 36 layers,
        // hidden 1024, intermediate_size 2048, 8 heads, 2 KV heads, head_dim 64, mamba_n_heads
        // 24, mamba_d_head 64, mamba_n_groups 1, mamba_d_state 128, mamba_d_conv 4,
        // mamba_rms_norm false; attention and Mamba-2 in parallel in every layer. Vocabulary
        // 32768 assumed (not read from the config).
        {.name = "Falcon-H1-0.5B", .pattern = std::string(36, 'P'), .hidden = 1024, .ffn = 2048, .vocab = 32768,
         .gated_mlp = true, .mamba_heads = 24, .mamba_groups = 1, .mamba_norm = false, .heads = 8, .query_groups = 2,
         .kv_channels = 64},
    };
  }();
  return table;
}

/// The row of `name` in model_table(); throws invalid_argument naming the known models.
[[nodiscard]] inline hybrid_config model(std::string_view name) {
  std::string known;
  for (auto const& c : model_table()) {
    if (c.name == name) return c;
    if (!known.empty()) known += ", ";
    known += c.name;
  }
  throw invalid_argument(headroom::detail::concat("pool::models::model: no model '", name, "'; known: ", known));
}

[[nodiscard]] inline hybrid_config nemotron_h_4b() { return model("Nemotron-H-4B"); }
[[nodiscard]] inline hybrid_config nemotron_h_8b() { return model("Nemotron-H-8B"); }
[[nodiscard]] inline hybrid_config nemotron_nano_9b_v2() { return model("Nemotron-Nano-9B-v2"); }
[[nodiscard]] inline hybrid_config nemotron_h_47b() { return model("Nemotron-H-47B"); }
[[nodiscard]] inline hybrid_config nemotron_h_56b() { return model("Nemotron-H-56B"); }
[[nodiscard]] inline hybrid_config nemotron_3_nano_30b_a3b() { return model("Nemotron-3-Nano-30B-A3B"); }
[[nodiscard]] inline hybrid_config nemotron_3_super_120b_a12b() { return model("Nemotron-3-Super-120B-A12B"); }
[[nodiscard]] inline hybrid_config qwen3_next_80b_a3b() { return model("Qwen3-Next-80B-A3B"); }
[[nodiscard]] inline hybrid_config granite_4_0_h_small() { return model("Granite-4.0-H-Small"); }
[[nodiscard]] inline hybrid_config jamba_1_5_mini() { return model("Jamba-1.5-Mini"); }
[[nodiscard]] inline hybrid_config falcon_h1_0_5b() { return model("Falcon-H1-0.5B"); }

struct reference_case {
  hybrid_config config;
  std::size_t expert_parallel = 1;
};

/// The Nemotron model workloads with published MaxPool / FixedPool figures, in table order.
[[nodiscard]] inline std::vector<reference_case> reference_cases() {
  return {{nemotron_h_4b(), 1},           {nemotron_h_8b(), 1},
          {nemotron_nano_9b_v2(), 1},     {nemotron_h_47b(), 1},
          {nemotron_h_56b(), 1},          {nemotron_3_nano_30b_a3b(), 1},
          {nemotron_3_nano_30b_a3b(), 8}, {nemotron_3_super_120b_a12b(), 8},
          {nemotron_3_super_120b_a12b(), 64}};
}

/// reference_cases() and the other hybrid families of the table (EP 8 for their experts).
[[nodiscard]] inline std::vector<reference_case> all_cases() {
  auto v = reference_cases();
  v.push_back({qwen3_next_80b_a3b(), 8});
  v.push_back({granite_4_0_h_small(), 8});
  v.push_back({jamba_1_5_mini(), 8});
  v.push_back({falcon_h1_0_5b(), 1});
  return v;
}

}  // namespace headroom::pool::models
