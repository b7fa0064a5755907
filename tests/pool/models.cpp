// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "headroom/core/bytes.hpp"
#include "headroom/pool/models.hpp"
#include "headroom/pool/plan.hpp"

using namespace headroom;
using namespace headroom::pool;
namespace m = headroom::pool::models;

namespace {
std::uint64_t elements(bucket const& b) { return b.bytes / size_of(b.type); }
std::size_t count(std::string const& s, char c) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), c)); }
}  // namespace

// Per-layer element counts from the models' configurations (TP = 1, no padding).
TEST_CASE("per-layer element counts match the reference table") {
  CHECK(m::mamba_layer(m::nemotron_h_4b()).total() == 72'752'464);
  CHECK(m::attention_layer(m::nemotron_h_4b()).total() == 31'460'352);
  CHECK(m::mlp_layer(m::nemotron_h_4b()).total() == 75'500'544);
  CHECK(m::mamba_layer(m::nemotron_h_8b()).total() == 109'640'064);
  CHECK(m::attention_layer(m::nemotron_h_8b()).total() == 41'947'136);
  CHECK(m::mlp_layer(m::nemotron_h_8b()).total() == 176'164'864);
  CHECK(m::mamba_layer(m::nemotron_nano_9b_v2()).total() == 147'450'624);
  CHECK(m::attention_layer(m::nemotron_nano_9b_v2()).total() == 55'054'720);
  CHECK(m::mlp_layer(m::nemotron_nano_9b_v2()).total() == 140'497'280);
  CHECK(m::mamba_layer(m::nemotron_h_47b()).total() == 438'432'512);
  CHECK(m::attention_layer(m::nemotron_h_47b()).total() == 151'003'136);
  CHECK(m::mlp_layer(m::nemotron_h_47b()).total() == 503'324'672);
  CHECK(m::mlp_layer(m::nemotron_h_56b()).total() == 536'879'104);
  auto const nano = m::nemotron_3_nano_30b_a3b();
  CHECK(m::mamba_layer(nano).total() == 38'744'896);
  CHECK(m::attention_layer(nano).total() == 23'399'040);
  CHECK(m::moe_layer(nano).te_linear + m::moe_layer(nano).other == 20'302'464);
  CHECK(m::moe_layer(nano).experts == 1'277'165'568);
  auto const super = m::nemotron_3_super_120b_a12b();
  CHECK(m::mamba_layer(super).total() == 109'640'064);
  CHECK(m::attention_layer(super).total() == 35'655'680);
  CHECK(m::moe_layer(super).te_linear + m::moe_layer(super).other == 54'530'048);
  CHECK(m::moe_layer(super).experts == 2'818'572'288);
  // Breakdown of the 8B Mamba layer under fp8_param_gather: {uint8: 109,576,192; bf16: 63,872}.
  CHECK(m::mamba_layer(m::nemotron_h_8b()).te_linear == 109'576'192);
  CHECK(m::mamba_layer(m::nemotron_h_8b()).other == 63'872);
}

TEST_CASE("layer patterns have the published layer counts and totals") {
  struct expect {
    m::hybrid_config c;
    std::size_t mamba, mlp, attn, moe;
    double billions;
  };
  expect const cases[] = {{m::nemotron_h_4b(), 24, 24, 4, 0, 4.49},          {m::nemotron_h_8b(), 24, 24, 4, 0, 8.10},
                          {m::nemotron_nano_9b_v2(), 27, 25, 4, 0, 8.89},    {m::nemotron_h_47b(), 45, 48, 5, 0, 46.8},
                          {m::nemotron_h_56b(), 54, 54, 10, 0, 56.3},        {m::nemotron_3_nano_30b_a3b(), 23, 0, 6, 23, 31.6},
                          {m::nemotron_3_super_120b_a12b(), 40, 0, 8, 40, 120.7}};
  for (auto const& e : cases) {
    INFO(e.c.name);
    CHECK(count(e.c.pattern, 'M') == e.mamba);
    CHECK(count(e.c.pattern, '-') == e.mlp);
    CHECK(count(e.c.pattern, '*') == e.attn);
    CHECK(count(e.c.pattern, 'E') == e.moe);
    CHECK(static_cast<double>(m::parameter_count(e.c)) / 1e9 == doctest::Approx(e.billions).epsilon(0.006));
  }
}

TEST_CASE("workloads: one unit per layer, expert bucket split by EP, non-unit buckets cut at 40M") {
  auto const w = m::make_workload(m::nemotron_3_super_120b_a12b(), {.expert_parallel = 64});
  CHECK(w.name == "Nemotron-3-Super-120B-A12B EP64");
  REQUIRE(w.units.size() == 88);
  CHECK(w.units[0].name == "layer.0 (M)");
  REQUIRE(w.units[1].buckets.size() == 2);  // E: [non-expert, experts / EP]
  CHECK(elements(w.units[1].buckets[0]) == 54'530'048);
  CHECK(elements(w.units[1].buckets[1]) == 44'040'192);
  auto const w8 = m::make_workload(m::nemotron_3_super_120b_a12b(), {.expert_parallel = 8});
  CHECK(elements(w8.units[1].buckets[1]) == 352'321'536);
  auto const nano8 = m::make_workload(m::nemotron_3_nano_30b_a3b(), {.expert_parallel = 8});
  CHECK(elements(nano8.units[1].buckets[1]) == 159'645'696);
  // Embedding alone reaches 40M elements; final norm + output layer form the second bucket.
  auto const h8 = m::make_workload(m::nemotron_h_8b());
  REQUIRE(h8.non_unit.size() == 2);
  CHECK(elements(h8.non_unit[0]) == 131072ull * 4096);
  CHECK(elements(h8.non_unit[1]) == 131072ull * 4096 + 4096);
  auto const small = m::make_workload(m::nemotron_h_8b(), {.non_unit_bucket_elements = UINT64_MAX});
  CHECK(small.non_unit.size() == 1);
}

// Megatron opens a layer's first parameter group with its first parameter, a norm (TE's
// LayerNormLinear registers layer_norm_weight before weight), so the bf16 bucket comes first
// (the data had [u8, bf16] before, sizes unchanged).
TEST_CASE("fp8 params: bf16 bucket first, then u8 linear (and expert) buckets; first and last layers bf16") {
  auto const w = m::make_workload(m::nemotron_h_8b(), {.fp8_params = true});
  CHECK(w.name == "Nemotron-H-8B fp8 bf16-ends");
  REQUIRE(w.units[0].buckets.size() == 1);  // first layer: bf16 only
  CHECK(w.units[0].buckets[0].type == dtype::bf16);
  REQUIRE(w.units[2].buckets.size() == 2);  // layer.2 is Mamba
  CHECK(w.units[2].buckets[0].type == dtype::bf16);
  CHECK(w.units[2].buckets[0].bytes == 63'872 * 2);
  CHECK(w.units[2].buckets[1].type == dtype::u8);
  CHECK(w.units[2].buckets[1].bytes == 109'576'192);
  CHECK(w.units.back().buckets.size() == 1);
  // Gradients: same groups, all bf16.
  auto const g = m::make_workload(m::nemotron_h_8b(), {.fp8_params = true, .grad_dtype = dtype::bf16});
  CHECK(g.units[2].buckets[1].type == dtype::bf16);
  CHECK(g.units[2].buckets[1].bytes == 109'576'192 * 2);
  // The dtype-asymmetric case: by_bytes shares the bf16 first layer with the u8 slot.
  auto const typed = make_plan<max, by_dtype>(w);
  auto const bytes = make_plan<max, by_bytes>(w);
  CHECK(bytes.arena_bytes < typed.arena_bytes);
  // MoE under fp8: [bf16 non-expert, u8 shared experts + latent projections, u8 experts / EP].
  auto const s = m::make_workload(m::nemotron_3_super_120b_a12b(), {.expert_parallel = 8, .fp8_params = true});
  REQUIRE(s.units[1].buckets.size() == 3);
  CHECK(s.units[1].buckets[0].type == dtype::bf16);
  CHECK(s.units[1].buckets[1].type == dtype::u8);
  CHECK(s.units[1].buckets[2].bytes == 2'818'572'288ull / 8);
  // The two fp8 variants have distinct names.
  auto const all = m::make_workload(m::nemotron_h_8b(), {.fp8_params = true, .first_last_layers_bf16 = false});
  CHECK(all.name == "Nemotron-H-8B fp8");
  CHECK(all.units[0].buckets.size() == 2);
  CHECK(all.name != w.name);
}

// The layer order of Megatron-LM's NVIDIA-Nemotron-3-Super-120B-A12B-BF16.sh, not
// eight "MEMEM*EMEME" blocks: 23 of 88 layers differ, the first at layer 5.
TEST_CASE("Nemotron-3-Super layer order is the published hybrid_override_pattern") {
  auto const c = m::nemotron_3_super_120b_a12b();
  std::string assumed;
  for (int i = 0; i < 8; ++i) assumed += "MEMEM*EMEME";
  REQUIRE(c.pattern.size() == 88);
  std::size_t differ = 0, first = c.pattern.size();
  for (std::size_t i = 0; i < 88; ++i)
    if (c.pattern[i] != assumed[i]) {
      ++differ;
      first = std::min(first, i);
    }
  CHECK(differ == 23);
  CHECK(first == 5);
}

TEST_CASE("other hybrid families: published totals, one unit per layer") {
  struct expect {
    m::hybrid_config c;
    std::size_t layers;
    double billions;  // the size in the model's name
    double epsilon;
  };
  expect const cases[] = {{m::qwen3_next_80b_a3b(), 48, 80.0, 0.01},
                          {m::granite_4_0_h_small(), 40, 32.0, 0.01},
                          {m::jamba_1_5_mini(), 32, 52.0, 0.01},
                          {m::falcon_h1_0_5b(), 36, 0.52, 0.01}};
  for (auto const& e : cases) {
    INFO(e.c.name);
    CHECK(e.c.pattern.size() == e.layers);
    CHECK(static_cast<double>(m::parameter_count(e.c)) / 1e9 == doctest::Approx(e.billions).epsilon(e.epsilon));
    auto const w = m::make_workload(e.c, {.expert_parallel = e.c.experts > 0 ? 8u : 1u});
    CHECK(w.units.size() == e.layers);
  }
  // Qwen3-Next: every layer has MoE, so two buckets; 512 experts x 3 x 2048 x 512 / EP 8.
  auto const q = m::make_workload(m::qwen3_next_80b_a3b(), {.expert_parallel = 8});
  REQUIRE(q.units[3].buckets.size() == 2);
  CHECK(elements(q.units[3].buckets[1]) == 512ull * 3 * 2048 * 512 / 8);
  CHECK(q.units[3].name == "layer.3 (A)");
  // Jamba: MoE on odd layers only; attention at layer 4 has a dense MLP.
  auto const j = m::make_workload(m::jamba_1_5_mini(), {.expert_parallel = 8});
  CHECK(j.units[0].buckets.size() == 1);
  CHECK(j.units[1].buckets.size() == 2);
  CHECK(j.units[4].name == "layer.4 (a)");
  // Granite ties the output layer to the embedding: one non-unit bucket fewer.
  CHECK(m::make_workload(m::granite_4_0_h_small(), {.expert_parallel = 8}).non_unit_bytes() ==
        2 * (100'352ull * 4096 + 4096));
  CHECK_THROWS_AS((void)m::model("no such model"), invalid_argument);
}

// Megatron-FSDP's own sizes for these models: MaxPool slots and FixedPool representatives.
TEST_CASE("reference footprints: max slots, fixed representative and bytes left out") {
  struct row {
    m::hybrid_config c;
    std::size_t ep;
    std::vector<std::uint64_t> max_slots;  // elements
    std::uint64_t fixed_slot;              // elements of the representative
    char fixed_symbol;
  };
  row const rows[] = {
      {m::nemotron_h_8b(), 1, {176'164'864}, 109'640'064, 'M'},
      {m::nemotron_h_56b(), 1, {536'879'104}, 438'432'512, 'M'},
      {m::nemotron_nano_9b_v2(), 1, {147'450'624}, 147'450'624, 'M'},
      {m::nemotron_3_nano_30b_a3b(), 1, {1'277'165'568, 20'302'464}, 38'744'896, 'M'},
      {m::nemotron_3_nano_30b_a3b(), 8, {159'645'696, 20'302'464}, 38'744'896, 'M'},
      {m::nemotron_3_super_120b_a12b(), 8, {352'321'536, 54'530'048}, 109'640'064, 'M'},
      {m::nemotron_3_super_120b_a12b(), 64, {109'640'064, 44'040'192}, 109'640'064, 'M'},
  };
  for (auto const& r : rows) {
    auto const w = m::make_workload(r.c, {.expert_parallel = r.ep});
    INFO(w.name);
    auto const mp = make_plan<max>(w);
    REQUIRE(mp.shapes.size() == r.max_slots.size());
    for (std::size_t i = 0; i < r.max_slots.size(); ++i) CHECK(mp.shapes[i].bytes == 2 * r.max_slots[i]);
    CHECK(mp.fallback_bytes() == w.non_unit_bytes());
    auto const fp = make_plan<fixed>(w);
    REQUIRE(fp.shapes.size() == 1);
    CHECK(fp.shapes[0].bytes == 2 * r.fixed_slot);
    CHECK(fp.unit_names[fp.shapes[0].defining_unit].find(std::string("(") + r.fixed_symbol + ")") != std::string::npos);
    // Bytes of units left out = every unit not of the representative's symbol.
    std::uint64_t left = 0;
    for (std::size_t u = 0; u < w.units.size(); ++u)
      if (!fp.pooled[u])
        for (auto const& b : w.units[u].buckets) left += b.bytes;
    CHECK(fp.unpooled_unit_bytes() == left);
  }
  // H-56B: 54 MLP x 536,879,104 + 10 attention x 151,003,136 elements left out = 56.81 GiB.
  auto const h56 = make_plan<fixed>(m::make_workload(m::nemotron_h_56b()));
  CHECK(h56.unpooled_unit_bytes() == 2 * (54ull * 536'879'104 + 10ull * 151'003'136));
}

TEST_CASE("bad model input names the value") {
  auto c = m::nemotron_3_nano_30b_a3b();
  try {
    (void)m::make_workload(c, {.expert_parallel = 3});
    FAIL("expected an exception");
  } catch (invalid_argument const& e) {
    CHECK(std::string(e.what()).find("expert_parallel = 3") != std::string::npos);
  }
  CHECK_THROWS_AS((void)m::make_workload(c, {.expert_parallel = 0}), invalid_argument);
  c.pattern = "MX";
  try {
    (void)m::make_workload(c);
    FAIL("expected an exception");
  } catch (invalid_argument const& e) {
    CHECK(std::string(e.what()).find("'X'") != std::string::npos);
  }
  c.pattern.clear();
  CHECK_THROWS_AS((void)m::make_workload(c), invalid_argument);
  CHECK_THROWS_AS((void)m::make_workload(m::nemotron_h_8b(), {.non_unit_bucket_elements = 0}), invalid_argument);
}

// A user-made config with huge dimensions: every element count is checked, so a product or sum
// past 64 bits is a capacity_error naming the model and the operands, never a wrapped small bucket.
TEST_CASE("element counts of huge model dimensions throw instead of wrapping") {
  auto const expect_overflow = [](m::hybrid_config const& c, char const* operand) {
    try {
      (void)m::make_workload(c);
      FAIL("expected capacity_error for ", c.name);
    } catch (capacity_error const& e) {
      std::string const what = e.what();
      CHECK(what.find("'" + c.name + "'") != std::string::npos);
      INFO(what);
      CHECK(what.find(operand) != std::string::npos);
      CHECK(what.find("overflows 64-bit") != std::string::npos);
    }
  };
  m::hybrid_config c = m::nemotron_h_8b();
  c.name = "huge hidden";
  c.hidden = std::uint64_t{1} << 50;  // in_proj rows (~2^14) x hidden > 2^64
  expect_overflow(c, "1125899906842624");
  c = m::nemotron_h_8b();
  c.name = "huge vocab";
  c.pattern = "-";
  c.vocab = std::uint64_t{1} << 60;  // vocab x hidden (4096) wraps
  expect_overflow(c, "1152921504606846976");
  c = m::nemotron_3_nano_30b_a3b();
  c.name = "huge experts";
  c.moe_ffn = std::uint64_t{1} << 50;  // (128 experts x 2 x moe_ffn = 2^58) x hidden 2688 wraps
  expect_overflow(c, "288230376151711744 x 2688");
  // A sum that wraps though every product fits: hidden 1, in_proj rows ~3 x 2^62 plus
  // out_proj's 2^62.
  c = m::nemotron_h_8b();
  c.name = "huge sum";
  c.pattern = "M";
  c.hidden = 1;
  c.mamba_head_dim = 1;
  c.mamba_heads = (std::uint64_t{1} << 62) + 1;
  expect_overflow(c, "+");
  // The published configs are untouched (their totals are checked above).
  CHECK_NOTHROW((void)m::make_workload(m::nemotron_h_8b()));
}

// [T1] TestFsdpHybridModelDoubleBuffer miniature (PR #4810): HIDDEN = 256, one attention and one
// Mamba unit of 262,400 and 933,144 elements. FixedPool pools one of them, MaxPool both in one slot.
TEST_CASE("hybrid test miniature: fixed pools one unit, max pools both in one bf16 slot") {
  m::hybrid_config c;
  c.name = "hybrid HIDDEN=256";
  c.pattern = "*M";
  c.hidden = 256;
  c.mamba_heads = 8;  // d_inner 512
  c.heads = 8;
  c.query_groups = 8;
  c.kv_channels = 32;
  c.vocab = 1024;
  CHECK(m::attention_layer(c).total() == 262'400);
  CHECK(m::mamba_layer(c).total() == 933'144);
  auto const w = m::make_workload(c);
  auto const f = make_plan<fixed>(w);
  CHECK(f.pooled_units() == 1);
  CHECK(f.pooled[0] == 1);  // a tie: the first unit's class wins
  auto const mx = make_plan<max>(w);
  REQUIRE(mx.shapes.size() == 1);
  CHECK(mx.shapes[0].bytes == 2 * 933'144);
  CHECK(mx.pooled_units() == 2);
  CHECK(mx.bucket_shape[0][0] == mx.bucket_shape[1][0]);
}

// PR #6317 test_max_pool_materialize_uses_exact_largest_padded_bucket: units of 4 and 8 bf16
// elements; slots are materialised at the exact largest *padded* request, in a fixed order.
TEST_CASE("max plan materialises the exact largest padded bucket, deterministically") {
  workload const w{"pad", {{"u0", {elements_of(dtype::bf16, 4)}}, {"u1", {elements_of(dtype::bf16, 8)}}}, {}};
  auto const p = make_plan<max>(w, {}, pad_elements{32});
  REQUIRE(p.shapes.size() == 1);
  CHECK(p.shapes[0].bytes == 64);  // 8 -> 32 elements x 2 bytes, not the unpadded 16
  CHECK(p.bucket_bytes[0][0] == 64);
  CHECK(p.slots[0].offset == 0);
  CHECK(p.slots[1].offset == default_alignment);
  CHECK(p == make_plan<max>(w, {}, pad_elements{32}));
  CHECK(make_plan<max>(w).shapes[0].bytes == 16);
}
