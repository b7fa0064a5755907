// SPDX-License-Identifier: Apache-2.0
#include "headroom/pipeline/pytorch_format.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/pipeline/schedules.hpp"
#include "headroom/pipeline/v_schedules.hpp"

using namespace headroom;
using namespace headroom::pipeline;

namespace {
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (E const& e) {
    return e.what();
  }
  return "<no exception>";
}

std::vector<schedule> every_kind() {
  std::vector<schedule> out;
  for (int p : {1, 2, 3, 4})
    for (int m : {1, 2, 4, 8}) {
      out.push_back(make_schedule<gpipe>({.stages = p, .microbatches = m}));
      out.push_back(make_schedule<one_f_one_b>({.stages = p, .microbatches = m}));
      out.push_back(make_schedule<zb_h1>({.stages = p, .microbatches = m}));
      out.push_back(make_schedule<interleaved_zb>({.stages = p, .microbatches = m}));
      out.push_back(make_schedule<forward_only>({.stages = p, .microbatches = m}));
      if (p >= 2 && m % p == 0) {
        out.push_back(make_schedule<interleaved_1f1b>({.stages = p, .microbatches = m, .chunks = 2}));
        out.push_back(make_schedule<gpipe>({.stages = p, .microbatches = m, .chunks = 3}));
        out.push_back(make_schedule<interleaved_zb>({.stages = p, .microbatches = m, .chunks = 2}));
        out.push_back(make_schedule<forward_only>({.stages = p, .microbatches = m, .chunks = 2}));
      }
    }
  return out;
}
}  // namespace

TEST_CASE("actions print as PyTorch's _Action does") {
  CHECK(pytorch::to_string({action_kind::forward, 1, 0, -1}) == "0F1");
  CHECK(pytorch::to_string({action_kind::backward, 0, 1, -1}) == "1B0");
  CHECK(pytorch::to_string({action_kind::backward_input, 3, 2, -1}) == "2I3");
  CHECK(pytorch::to_string({action_kind::backward_weight, 0, 1, -1}) == "1W0");
  CHECK(pytorch::to_string({action_kind::send_forward, 4, 0, 1}) == "0SEND_F4");
  CHECK(pytorch::to_string({action_kind::recv_backward, 2, 3, 0}) == "3RECV_B2");
  auto const s = make_schedule<one_f_one_b>({.stages = 2, .microbatches = 2});
  auto const rows = pytorch::export_actions(s, pytorch::content::compute_only);
  CHECK(rows[0] == std::vector<std::string>{"0F0", "0F1", "0B0", "0B1"});
  CHECK(rows[1] == std::vector<std::string>{"1F0", "1B0", "1F1", "1B1"});
  CHECK(pytorch::to_csv(s, pytorch::content::compute_only) == "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n");
}

TEST_CASE("export then import gives the same schedule, with and without transfers") {
  pytorch::export_options const fsdp{.fsdp = true};
  pytorch::export_options const old_runtime{.send_waits = false, .reduce_grad_waits = false};
  for (auto const& s : every_kind()) {
    CAPTURE(s.name());
    CAPTURE(s.shape());
    if (s.forward_only()) continue;  // refused at export (below)
    CHECK(pytorch::from_csv(pytorch::to_csv(s), s.name()) == s);
    CHECK(pytorch::from_csv(pytorch::to_csv(s, pytorch::content::compute_only), s.name()) == s);
    CHECK(pytorch::import_actions(pytorch::export_actions(s), s.name(), s.shape()) == s);
    CHECK(pytorch::from_csv(pytorch::to_csv(s, pytorch::content::compute_comms, fsdp), s.name()) == s);
    CHECK(pytorch::from_csv(pytorch::to_csv(s, pytorch::content::compute_comms, old_runtime), s.name()) == s);
  }
}

namespace {
// Every send has one wait after it; every stage has one REDUCE_GRAD (+ wait) after its m-th
// backward; FSDP cells pair up and come before the computations of their stage.
void check_runtime_row(schedule const& s, int r, std::vector<std::string> const& row, bool fsdp) {
  std::vector<std::string> sends, waits;
  int const m = s.shape().microbatches;
  std::vector<int> backwards(static_cast<std::size_t>(s.shape().virtual_stages()), 0);
  std::vector<int> reduces(backwards.size(), 0), resident(backwards.size(), 0);
  std::string last;
  for (auto const& cell : row) {
    CAPTURE(cell);
    auto const at = [&](std::string_view type) {
      auto const pos = cell.find(type);
      return pos != std::string::npos && pos > 0 && cell[pos - 1] >= '0' && cell[pos - 1] <= '9' &&
             cell.substr(0, pos).find_first_not_of("0123456789") == std::string::npos;
    };
    int const stage = std::atoi(cell.c_str());
    if (at("WAIT_SEND_F") || at("WAIT_SEND_B")) {
      std::string const send = std::to_string(stage) + "SEND_" + cell.substr(cell.find("WAIT_SEND_") + 10);
      CHECK(std::find(sends.begin(), sends.end(), send) != sends.end());
      CHECK(std::find(waits.begin(), waits.end(), send) == waits.end());
      waits.push_back(send);
    } else if (at("SEND_F") || at("SEND_B")) {
      sends.push_back(cell);
    } else if (at("WAIT_REDUCE_GRAD")) {
      CHECK(last == std::to_string(stage) + "REDUCE_GRAD");
    } else if (at("REDUCE_GRAD")) {
      CHECK(backwards[static_cast<std::size_t>(stage)] == m);
      ++reduces[static_cast<std::size_t>(stage)];
    } else if (at("UNSHARD")) {
      CHECK(resident[static_cast<std::size_t>(stage)]++ == 0);
    } else if (at("RESHARD")) {
      CHECK(resident[static_cast<std::size_t>(stage)]-- == 1);
    } else if (!at("RECV_F") && !at("RECV_B")) {
      for (auto const& a : pytorch::parse_cell(cell).actions) {
        for (int const st : {a.stage, a.backward_stage}) {
          if (st < 0) continue;
          if (fsdp) CHECK(resident[static_cast<std::size_t>(st)] == 1);
          CHECK(reduces[static_cast<std::size_t>(st)] == 0);  // no computation after the reduce
        }
        if (a.kind == action_kind::backward || a.kind == action_kind::backward_weight) ++backwards[static_cast<std::size_t>(a.stage)];
        if (a.kind == action_kind::overlapped) ++backwards[static_cast<std::size_t>(a.backward_stage)];
      }
    }
    last = cell;
  }
  CHECK(sends.size() == waits.size());
  for (int c = 0; c < s.shape().chunks; ++c) {
    auto const st = static_cast<std::size_t>(s.placement().virtual_stage(r, c));
    CHECK(reduces[st] == 1);
    CHECK(resident[st] == 0);
  }
}
}  // namespace

TEST_CASE("the full export carries PyTorch's waits, gradient reductions and FSDP cells") {
  auto const s = make_schedule<one_f_one_b>({.stages = 2, .microbatches = 2});
  auto const rows = pytorch::export_actions(s);
  // _add_wait_send: a forward send waits right after its backward; backward sends at the end.
  CHECK(rows[0] == std::vector<std::string>{"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0WAIT_SEND_F0",
                                            "0RECV_B1", "0B1", "0WAIT_SEND_F1", "0REDUCE_GRAD", "0WAIT_REDUCE_GRAD"});
  CHECK(rows[1] == std::vector<std::string>{"1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1",
                                            "1REDUCE_GRAD", "1WAIT_REDUCE_GRAD", "1WAIT_SEND_B0", "1WAIT_SEND_B1"});
  auto const old = pytorch::export_actions(s, pytorch::content::compute_comms, {.send_waits = false, .reduce_grad_waits = false});
  CHECK(old[1] == std::vector<std::string>{"1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1",
                                           "1REDUCE_GRAD"});
  auto const fsdp = pytorch::export_actions(s, pytorch::content::compute_comms, {.fsdp = true});
  CHECK(fsdp[0].front() == "0UNSHARD");
  CHECK(fsdp[1] == std::vector<std::string>{"1RECV_F0", "1UNSHARD", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1",
                                            "1SEND_B1", "1REDUCE_GRAD", "1WAIT_REDUCE_GRAD", "1RESHARD", "1WAIT_SEND_B0",
                                            "1WAIT_SEND_B1"});
  // ZB: the reduce follows the m-th W, which sends nothing.
  auto const zb = pytorch::export_actions(make_schedule<zb_h1>({.stages = 2, .microbatches = 2}));
  CHECK(zb[1].back() == "1WAIT_SEND_B1");
  for (auto const& shape : {pipeline_shape{.stages = 2, .microbatches = 4}, pipeline_shape{.stages = 4, .microbatches = 8}})
    for (auto const& sched : {make_schedule<gpipe>(shape), make_schedule<one_f_one_b>(shape), make_schedule<zb_h1>(shape),
                              make_schedule<interleaved_1f1b>({.stages = shape.stages, .microbatches = shape.microbatches, .chunks = 2}),
                              make_schedule<interleaved_zb>({.stages = shape.stages, .microbatches = shape.microbatches, .chunks = 2}),
                              make_schedule<gpipe>({.stages = shape.stages, .microbatches = shape.microbatches, .chunks = 4}),
                              make_schedule<zbv>({.stages = shape.stages, .microbatches = shape.microbatches, .chunks = 2}),
                              make_schedule<dualpipe_v>({.stages = shape.stages, .microbatches = 2 * shape.stages, .chunks = 2})})
      for (bool const with_fsdp : {false, true}) {
        CAPTURE(sched.name());
        CAPTURE(sched.shape());
        auto const full = pytorch::export_actions(sched, pytorch::content::compute_comms, {.fsdp = with_fsdp});
        for (int r = 0; r < sched.shape().stages; ++r) check_runtime_row(sched, r, full[static_cast<std::size_t>(r)], with_fsdp);
      }
}

TEST_CASE("with fsdp, stages beyond max_active_stages are resharded and fetched again") {
  // gpipe with v = 4: rank 0 runs stages 0, 2, 4, 6 forwards then 6, 4, 2, 0 backwards.
  auto const s = make_schedule<gpipe>({.stages = 2, .microbatches = 1, .chunks = 4});
  auto const row = pytorch::export_actions(s, pytorch::content::compute_only);
  CHECK(row[0] == std::vector<std::string>{"0F0", "2F0", "4F0", "6F0", "6B0", "4B0", "2B0", "0B0"});
  std::vector<std::string> got;  // the row without its transfers and send waits
  auto const full = pytorch::export_actions(s, pytorch::content::compute_comms, {.fsdp = true, .max_active_stages = 2});
  for (auto const& c : full[0])
    if (c.find("SEND") == std::string::npos && c.find("RECV") == std::string::npos) got.push_back(c);
  // PyTorch's _add_reduce_grad(_add_unshard_reshard(row, 2), 1) on that row
  std::vector<std::string> const want{
      "0UNSHARD", "2UNSHARD", "0F0", "0RESHARD", "4UNSHARD", "2F0", "2RESHARD", "6UNSHARD", "4F0", "6F0", "6B0",
      "6REDUCE_GRAD", "6WAIT_REDUCE_GRAD", "6RESHARD", "2UNSHARD", "4B0", "4REDUCE_GRAD", "4WAIT_REDUCE_GRAD", "4RESHARD",
      "0UNSHARD", "2B0", "2REDUCE_GRAD", "2WAIT_REDUCE_GRAD", "2RESHARD", "0B0", "0REDUCE_GRAD", "0WAIT_REDUCE_GRAD",
      "0RESHARD"};
  CHECK(got == want);
  CHECK(error_of<invalid_argument>([&] {
          (void)pytorch::export_actions(s, pytorch::content::compute_comms, {.fsdp = true, .max_active_stages = 0});
        }).find("max_active_stages = 0, expected >= 1") != std::string::npos);
}

TEST_CASE("a forward-only schedule is refused at export; rows without a gradient action import as one") {
  auto const s = make_schedule<forward_only>({.stages = 2, .microbatches = 3});
  auto const back = pytorch::from_csv("0F0,0F1,0F2\r\n1F0,1F1,1F2\r\n", "forward_only");
  CHECK(back.forward_only());
  CHECK(back == s);
  CHECK(error_of<invalid_argument>([&] { (void)pytorch::export_actions(s); })
            .find("schedule 'forward_only' is forward-only; PyTorch's _PipelineScheduleRuntime refuses") != std::string::npos);
  CHECK(error_of<invalid_argument>([&] { (void)pytorch::to_csv(s, pytorch::content::compute_only); }).find("forward-only") !=
        std::string::npos);
  auto const gp = make_schedule<gpipe>({.stages = 2, .microbatches = 3});
  auto const training = pytorch::import_actions(pytorch::export_actions(gp), "gpipe");
  CHECK(training == gp);
  CHECK_FALSE(training.forward_only());
}

TEST_CASE("import skips bubbles, waits and FSDP actions and expands OVERLAP_F_B") {
  auto const s = make_schedule<one_f_one_b>({.stages = 2, .microbatches = 2});
  std::vector<std::vector<std::string>> rows{{"0UNSHARD", "0F0", "", "0F1", "0B0", "0B1", "0REDUCE_GRAD"},
                                             {"1F0", "(1B0; 1F1)OVERLAP_F_B", "1B1", " ", "1WAIT_SEND_B1"}};
  CHECK(pytorch::import_actions(rows, s.name()) == s);
}

TEST_CASE("bad rows throw naming the rank, column and text") {
  auto const bad = [](std::vector<std::vector<std::string>> rows) {
    return error_of<invalid_argument>([&] { (void)pytorch::import_actions(rows, "x"); });
  };
  CHECK(bad({{"F0"}}).find("rank 0 column 0: 'F0' does not start with a stage index") != std::string::npos);
  CHECK(bad({{"0X0"}}).find("'0X0' has no known action type after stage 0") != std::string::npos);
  CHECK(bad({{"0F"}}).find("'0F' has no micro-batch index; F needs one") != std::string::npos);
  CHECK(bad({{"0F0x"}}).find("has 'x' where a micro-batch index") != std::string::npos);
  CHECK(bad({{"0F99999999999"}}).find("'0F99999999999' has '99999999999'") != std::string::npos);
  CHECK(bad({{"(0F0;0B0)FOO"}}).find("groups actions under 'FOO'") != std::string::npos);
  CHECK(bad({{"0F0", "0B0"}, {"2F0"}}).find("stages 0..2 over 2 ranks") != std::string::npos);
  CHECK(bad({}).find("no rows") != std::string::npos);
  CHECK(bad({{"1F0"}, {"0F0"}}).find("rank 0 action 1F0 is on stage 1, which lives on rank 1") != std::string::npos);
  CHECK(bad({{"0F0", "0SEND_F0"}, {"1RECV_F0"}}).find("rank 1") != std::string::npos);  // forward-only, 1F0 missing
  CHECK(error_of<invalid_argument>([] {
          (void)pytorch::import_actions({{"0F0", "0F5"}}, "x", pipeline_shape{.stages = 1, .microbatches = 2});
        }).find("rank 0 action 0F5 names micro-batch 5; expected one below m = 2") != std::string::npos);
  CHECK(bad({{"0F0"}, {"1F0", "1B0"}}).find("backward") != std::string::npos);     // rank 0 misses B0
  CHECK(bad({{"1F0", "1B0"}, {"0F0", "0B0"}}).find("rank") != std::string::npos);  // stages on the wrong ranks
  CHECK(bad({{"0F0", "0SEND_F0", "0RECV_B0", "0B0"}, {"1RECV_F0", "1F0", "1B0"}}).find("rank 1") != std::string::npos);
  CHECK(error_of<invalid_argument>([] {
          (void)pytorch::import_actions({{"0F0", "0B0"}}, "x", pipeline_shape{.stages = 2, .microbatches = 1});
        }).find("1 rows for p = 2") != std::string::npos);
}
