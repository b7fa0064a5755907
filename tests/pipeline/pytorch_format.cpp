#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "headroom/pipeline/pytorch_format.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "headroom/pipeline/schedules.hpp"

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
  for (auto const& s : every_kind()) {
    CAPTURE(s.name());
    CAPTURE(s.shape());
    CHECK(pytorch::from_csv(pytorch::to_csv(s), s.name()) == s);
    CHECK(pytorch::from_csv(pytorch::to_csv(s, pytorch::content::compute_only), s.name()) == s);
    CHECK(pytorch::import_actions(pytorch::export_actions(s), s.name(), s.shape()) == s);
  }
}

TEST_CASE("rows without a gradient action import as a forward-only schedule") {
  auto const s = make_schedule<forward_only>({.stages = 2, .microbatches = 3});
  auto const back = pytorch::from_csv("0F0,0F1,0F2\r\n1F0,1F1,1F2\r\n", "forward_only");
  CHECK(back.forward_only());
  CHECK(back == s);
  CHECK(pytorch::export_actions(s)[1] ==
        std::vector<std::string>{"1RECV_F0", "1F0", "1RECV_F1", "1F1", "1RECV_F2", "1F2"});
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
