// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Schedules in PyTorch pipelining's text format (torch.distributed.pipelining.schedules._Action,
// the rows of _dump_csv / _load_csv and of torchtitan's pipeline_parallel_schedule_csv), both
// ways, so a schedule made here runs in PyTorch and a PyTorch schedule is validated here.
//
//   auto rows = pipeline::pytorch::export_actions(sched);          // rows[r] = {"0F0", "0SEND_F0", ...}
//   std::string csv = pipeline::pytorch::to_csv(sched, pipeline::pytorch::content::compute_only);
//   auto back = pipeline::pytorch::from_csv(csv, "imported");      // validated; == sched
//
// One action is [stage][type][microbatch]: the virtual stage index, the type F (forward),
// B (full backward), I (backward input), W (backward weight), SEND_F, RECV_F, SEND_B, RECV_B,
// and the micro-batch. PyTorch names the stage of a transfer as headroom does (the sender's
// stage for SEND_*, the receiver's for RECV_*). Rows carry no placement: import takes stage s
// on rank s mod p when the rows fit it, else PyTorch's "v" style, else the placement passed.
//
// The full export (content::compute_comms) is what _PipelineScheduleRuntime._load_csv(path,
// format="compute_comms") runs as it is, so it carries the cells PyTorch's own lowering adds
// (_add_unshard_reshard, _add_reduce_grad, _add_send_recv, _add_wait_send), in their positions:
//   - WAIT_SEND_F s k right after this rank's backward (B or I) of stage s, micro-batch k: that
//     backward proves the peer received the activation; every other send (SEND_B, and a SEND_F
//     whose backward never comes) is waited at the end of the row, in the order of the sends;
//   - REDUCE_GRAD s (then WAIT_REDUCE_GRAD s) after the m-th backward (B or W) of stage s and
//     the send that backward makes: the runtime divides the gradients by m there (scale_grads),
//     and with FSDP starts the reduce-scatter; without it a step trains with m-times gradients;
//   - with fsdp, UNSHARD / RESHARD before each computation as _add_unshard_reshard places them
//     for max_active_stages (the stages of the next computations stay resident), the rest
//     resharded at the end.
// PyTorch runtimes older than the wait and reduce-wait types cannot parse those cells (they wait
// for every send at the end of a step): export_options says which the target runtime has.
// A forward-only (evaluation) schedule is refused: PyTorch's validator requires a backward for
// every forward, and its eval() runs a training schedule forwards only.
//
// Import reads every cell PyTorch writes: an empty cell (a bubble) is skipped; the synchronising
// and FSDP actions WAIT_SEND_F, WAIT_SEND_B, UNSHARD, RESHARD, REDUCE_GRAD and WAIT_REDUCE_GRAD
// are skipped (headroom's executor has blocking transfers and no sharding: they change no
// dependency it checks); "(a;b)OVERLAP_F_B" is read as its sub-actions a then b. Rows with
// compute actions only get their transfers placed as the generators place theirs
// (place_transfers); rows with transfers are taken as they are. Rows with no gradient action
// (no B, I, W, SEND_B, RECV_B) are a forward-only (evaluation) schedule, as the forward_only
// generator makes. Either way the result is validated, so a malformed row throws
// invalid_argument naming the rank, column and text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pipeline/action.hpp"
#include "headroom/pipeline/placement.hpp"
#include "headroom/pipeline/detail/lower.hpp"
#include "headroom/pipeline/schedule.hpp"
#include "headroom/pipeline/schedules.hpp"
#include "headroom/pipeline/shape.hpp"
#include "headroom/pipeline/validate.hpp"

namespace headroom::pipeline::pytorch {

/// What an export holds: every action, or the computations only (PyTorch's "compute_only").
enum class content : std::uint8_t { compute_comms, compute_only };

/// PyTorch's type code of an action kind: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B.
[[nodiscard]] constexpr std::string_view type_code(action_kind k) noexcept {
  switch (k) {
    case action_kind::forward: return "F";
    case action_kind::backward: return "B";
    case action_kind::backward_input: return "I";
    case action_kind::backward_weight: return "W";
    case action_kind::send_forward: return "SEND_F";
    case action_kind::recv_forward: return "RECV_F";
    case action_kind::send_backward: return "SEND_B";
    case action_kind::recv_backward: return "RECV_B";
    case action_kind::overlapped: return "OVERLAP_F_B";
  }
  return "?";
}

/// "2F3", "1SEND_B0", "(0F3;1B0)OVERLAP_F_B": what PyTorch's _Action prints for the action.
[[nodiscard]] inline std::string to_string(action const& a) {
  if (a.kind == action_kind::overlapped)
    return "(" + to_string(forward_part(a)) + ";" + to_string(backward_part(a)) + ")" + std::string(type_code(a.kind));
  return std::to_string(a.stage) + std::string(type_code(a.kind)) + std::to_string(a.microbatch);
}

/// The cells a full export carries besides computations and transfers, as the target runtime
/// needs them. REDUCE_GRAD is always there: a training step without it runs with gradients m
/// times too large.
struct export_options {
  bool send_waits = true;         ///< WAIT_SEND_F / WAIT_SEND_B, one per send (runtimes that have them require them)
  bool reduce_grad_waits = true;  ///< WAIT_REDUCE_GRAD after each REDUCE_GRAD (runtimes that have the type)
  bool fsdp = false;              ///< UNSHARD / RESHARD: the stages are FSDP-wrapped
  int max_active_stages = 3;      ///< with fsdp: stages resident at once (PyTorch's default 3)
};

namespace detail {

[[nodiscard]] inline std::string cell(int stage, std::string_view type) { return std::to_string(stage) + std::string(type); }
[[nodiscard]] inline std::string cell(int stage, std::string_view type, int microbatch) {
  return cell(stage, type) + std::to_string(microbatch);
}
// The computations an action stands for: itself, or an overlapped action's forward then backward.
[[nodiscard]] inline std::vector<action> parts_of(action const& a) {
  if (a.kind == action_kind::overlapped) return {forward_part(a), backward_part(a)};
  return {a};
}

// _add_unshard_reshard over one rank's computations: before[i] holds the RESHARD and UNSHARD
// cells that go before computation i; after_all the RESHARDs of the stages still resident at the
// end. The next `window` distinct stages from computation i (every stage of the computation that
// reaches the count, as PyTorch keeps an overlapped action whole) stay resident; the others are
// resharded, and the missing ones unsharded in the order they come.
struct fsdp_cells {
  std::vector<std::vector<std::string>> before;
  std::vector<std::string> after_all;
};
[[nodiscard]] inline fsdp_cells unshard_reshard(std::vector<action> const& computations, int window) {
  std::size_t const n = computations.size();
  std::vector<std::vector<std::size_t>> occurrences;  // per stage seen: the computations using it
  std::vector<int> stages;                            // the stages, in order of first use
  auto const slot = [&](int stage) {
    auto const it = std::find(stages.begin(), stages.end(), stage);
    if (it != stages.end()) return static_cast<std::size_t>(it - stages.begin());
    stages.push_back(stage);
    occurrences.emplace_back();
    return stages.size() - 1;
  };
  std::vector<std::vector<std::size_t>> slots_of(n);  // per computation: its stages' slots, in part order
  for (std::size_t i = 0; i < n; ++i)
    for (auto const& part : parts_of(computations[i])) {
      auto const s = slot(part.stage);
      if (std::find(slots_of[i].begin(), slots_of[i].end(), s) == slots_of[i].end()) slots_of[i].push_back(s);
      if (occurrences[s].empty() || occurrences[s].back() != i) occurrences[s].push_back(i);
    }
  // The next use of each stage at or after i, ordered by (computation, part): std::set keeps
  // the next stages in the order PyTorch's scan finds them.
  std::vector<std::size_t> cursor(stages.size(), 0);
  auto const part_index = [&](std::size_t i, std::size_t s) {
    return static_cast<std::size_t>(std::find(slots_of[i].begin(), slots_of[i].end(), s) - slots_of[i].begin());
  };
  std::set<std::tuple<std::size_t, std::size_t, std::size_t>> upcoming;  // (computation, part, slot)
  for (std::size_t s = 0; s < stages.size(); ++s) upcoming.emplace(occurrences[s][0], part_index(occurrences[s][0], s), s);
  fsdp_cells out;
  out.before.resize(n);
  std::vector<std::size_t> active;  // resident slots, in the order they were unsharded
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<std::size_t> next;  // the resident window from computation i
    std::size_t reached_at = n;
    for (auto const& [at, part, s] : upcoming) {
      if (next.size() >= static_cast<std::size_t>(window) && at != reached_at) break;
      next.push_back(s);
      if (next.size() >= static_cast<std::size_t>(window) && reached_at == n) reached_at = at;
    }
    auto const in = [](std::vector<std::size_t> const& v, std::size_t s) { return std::find(v.begin(), v.end(), s) != v.end(); };
    std::vector<std::size_t> kept;
    for (std::size_t const s : active)
      if (in(next, s)) kept.push_back(s);
      else out.before[i].push_back(cell(stages[s], "RESHARD"));
    active = kept;
    for (std::size_t const s : next)
      if (!in(active, s)) {
        active.push_back(s);
        out.before[i].push_back(cell(stages[s], "UNSHARD"));
      }
    for (std::size_t const s : slots_of[i]) {  // computation i is done with: move to the stage's next use
      upcoming.erase({i, part_index(i, s), s});
      if (++cursor[s] < occurrences[s].size()) {
        std::size_t const j = occurrences[s][cursor[s]];
        upcoming.emplace(j, part_index(j, s), s);
      }
    }
  }
  for (std::size_t const s : active) out.after_all.push_back(cell(stages[s], "RESHARD"));
  return out;
}

// Rank `rank`'s row of the full export (see the header comment for what goes where).
[[nodiscard]] inline std::vector<std::string> runtime_row(schedule const& s, int rank, export_options const& opt) {
  auto const list = s.actions(rank);
  auto const& where = s.placement();
  auto const m = s.shape().microbatches;
  std::vector<action> computations;
  for (auto const& a : list)
    if (is_compute(a.kind)) computations.push_back(a);
  fsdp_cells fsdp;
  if (opt.fsdp) fsdp = unshard_reshard(computations, opt.max_active_stages);

  std::vector<std::string> row;
  std::vector<action> pending_sends;  // sends not yet waited, in the order they were made
  std::vector<int> backwards(static_cast<std::size_t>(s.shape().virtual_stages()), 0);
  action reduce_after_send{};  // the send after which a REDUCE_GRAD goes, when reduce_stage >= 0
  int reduce_stage = -1;
  auto const reduce = [&](int stage) {
    row.push_back(cell(stage, "REDUCE_GRAD"));
    if (opt.reduce_grad_waits) row.push_back(cell(stage, "WAIT_REDUCE_GRAD"));
  };
  std::size_t c = 0;  // computations seen
  for (auto const& a : list) {
    if (is_compute(a.kind)) {
      if (opt.fsdp) row.insert(row.end(), fsdp.before[c].begin(), fsdp.before[c].end());
      ++c;
      row.push_back(to_string(a));
      std::vector<int> reduced;
      for (auto const& part : parts_of(a)) {
        bool const input_grad = part.kind == action_kind::backward || part.kind == action_kind::backward_input;
        if (input_grad && opt.send_waits) {  // WAIT_SEND_F of the forward this backward consumed
          auto const it = std::find_if(pending_sends.begin(), pending_sends.end(), [&](action const& x) {
            return x.kind == action_kind::send_forward && x.stage == part.stage && x.microbatch == part.microbatch;
          });
          if (it != pending_sends.end()) {
            row.push_back(cell(part.stage, "WAIT_SEND_F", part.microbatch));
            pending_sends.erase(it);
          }
        }
        if ((part.kind == action_kind::backward || part.kind == action_kind::backward_weight) &&
            ++backwards[static_cast<std::size_t>(part.stage)] == m)
          reduced.push_back(part.stage);
      }
      for (int const st : reduced) {
        // A backward that sends its input gradient to another rank reduces after that send.
        bool const sends = st > 0 && where.rank_of(st - 1) != rank && a.kind != action_kind::backward_weight;
        if (sends) {
          reduce_after_send = action{action_kind::send_backward, parts_of(a).back().microbatch, st, where.rank_of(st - 1)};
          reduce_stage = st;
        } else {
          reduce(st);
        }
      }
      continue;
    }
    row.push_back(to_string(a));
    if (is_send(a.kind)) pending_sends.push_back(a);
    if (reduce_stage >= 0 && reduce_after_send == a) {
      reduce(reduce_stage);
      reduce_stage = -1;
    }
  }
  if (opt.fsdp) row.insert(row.end(), fsdp.after_all.begin(), fsdp.after_all.end());
  if (opt.send_waits)
    for (auto const& x : pending_sends)
      row.push_back(cell(x.stage, x.kind == action_kind::send_forward ? "WAIT_SEND_F" : "WAIT_SEND_B", x.microbatch));
  return row;
}

}  // namespace detail

/// One row per rank, in execution order. Throws invalid_argument for a forward-only schedule
/// (PyTorch's runtime refuses one: export the training schedule and run its eval()) and for
/// fsdp with max_active_stages below 1, or below 2 when an overlapped action runs two stages.
[[nodiscard]] inline std::vector<std::vector<std::string>> export_actions(schedule const& s,
                                                                          content what = content::compute_comms,
                                                                          export_options const& opt = {}) {
  expects(!s.forward_only(), "pipeline::pytorch::export_actions: schedule '", s.name(),
          "' is forward-only; PyTorch's _PipelineScheduleRuntime refuses a schedule without a backward for every "
          "forward (its validator), expected a training schedule (its eval() runs one forwards only)");
  if (opt.fsdp) {
    int need = 1;
    for (auto const& list : s.ranks())
      for (auto const& a : list)
        if (a.kind == action_kind::overlapped && a.stage != a.backward_stage) need = 2;
    expects(opt.max_active_stages >= need, "pipeline::pytorch::export_actions: max_active_stages = ",
            opt.max_active_stages, ", expected >= ", need,
            need == 2 ? " (an overlapped action computes on two stages at once)" : " (a stage must be resident to compute)");
  }
  std::vector<std::vector<std::string>> rows;
  for (int r = 0; r < s.shape().stages; ++r) {
    if (what == content::compute_comms) {
      rows.push_back(detail::runtime_row(s, r, opt));
      continue;
    }
    auto& row = rows.emplace_back();
    for (auto const& a : s.actions(r))
      if (is_compute(a.kind)) row.push_back(to_string(a));
  }
  return rows;
}

/// The rows as PyTorch's _dump_csv writes them: one line per rank, cells joined by commas.
[[nodiscard]] inline std::string to_csv(schedule const& s, content what = content::compute_comms,
                                        export_options const& opt = {}) {
  std::string out;
  for (auto const& row : export_actions(s, what, opt)) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      out += row[i];
    }
    out += "\r\n";  // csv.writer's line terminator
  }
  return out;
}

/// A parsed cell: the actions it stands for (none for a bubble or a skipped action), and
/// whether they were grouped as (a;b)OVERLAP_F_B.
struct parsed_cell {
  std::vector<action> actions;
  bool overlapped = false;
};

namespace detail {

struct type_entry {
  std::string_view code;
  std::optional<action_kind> kind;  ///< empty: an action headroom skips on import
};
// Longest codes first: the first code that prefixes the text wins, as in PyTorch's regex.
inline constexpr type_entry type_table[] = {
    {"WAIT_REDUCE_GRAD", std::nullopt},
    {"WAIT_SEND_F", std::nullopt},
    {"WAIT_SEND_B", std::nullopt},
    {"REDUCE_GRAD", std::nullopt},
    {"UNSHARD", std::nullopt},
    {"RESHARD", std::nullopt},
    {"SEND_F", action_kind::send_forward},
    {"RECV_F", action_kind::recv_forward},
    {"SEND_B", action_kind::send_backward},
    {"RECV_B", action_kind::recv_backward},
    {"F", action_kind::forward},
    {"I", action_kind::backward_input},
    {"B", action_kind::backward},
    {"W", action_kind::backward_weight},
};

[[nodiscard]] inline std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// Reads the digits at the front of `s` as a non-negative int; nullopt when there are none or
// they exceed int.
[[nodiscard]] inline std::optional<int> take_int(std::string_view& s) {
  std::size_t n = 0;
  long long v = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') {
    v = v * 10 + (s[n] - '0');
    if (v > 0x7fffffff) return std::nullopt;
    ++n;
  }
  if (n == 0) return std::nullopt;
  s.remove_prefix(n);
  return static_cast<int>(v);
}

inline void parse_single(std::string_view text, std::string_view where, std::vector<action>& out) {
  std::string_view rest = trim(text);
  auto const fail = [&](auto const&... why) {
    throw invalid_argument(headroom::detail::concat("pipeline::pytorch: ", where, ": '", text, "' ", why...,
                                                    "; expected [stage][type][microbatch] such as 0F1, 1B0, 2I3, "
                                                    "1W0, 0SEND_F1, 1RECV_B0"));
  };
  auto const stage = take_int(rest);
  if (!stage) fail("does not start with a stage index (a non-negative int)");
  type_entry const* type = nullptr;
  for (auto const& t : type_table)
    if (rest.substr(0, t.code.size()) == t.code) {
      type = &t;
      break;
    }
  if (type == nullptr) fail("has no known action type after stage ", *stage);
  rest.remove_prefix(type->code.size());
  std::optional<int> microbatch;
  if (!rest.empty()) {
    microbatch = take_int(rest);
    if (!microbatch || !rest.empty()) fail("has '", rest, "' where a micro-batch index (or nothing) belongs");
  }
  if (!type->kind) return;  // synchronisation / FSDP action: nothing headroom schedules
  if (!microbatch) fail("has no micro-batch index; ", type->code, " needs one");
  out.push_back(action{*type->kind, *microbatch, *stage, -1});
}

}  // namespace detail

/// The actions of one cell (see the header comment for what is skipped). `where` prefixes
/// the message of the invalid_argument a malformed cell throws.
[[nodiscard]] inline parsed_cell parse_cell(std::string_view text, std::string_view where = "action") {
  parsed_cell cell;
  std::string_view const t = detail::trim(text);
  if (t.empty()) return cell;
  if (t.front() == '(') {
    auto const close = t.find(')');
    expects(close != std::string_view::npos, "pipeline::pytorch: ", where, ": '", text,
            "' opens '(' without ')'; expected (a;b)OVERLAP_F_B");
    std::string_view const type = detail::trim(t.substr(close + 1));
    expects(type == "OVERLAP_F_B", "pipeline::pytorch: ", where, ": '", text, "' groups actions under '", type,
            "'; expected (a;b)OVERLAP_F_B");
    cell.overlapped = true;
    std::string_view subs = t.substr(1, close - 1);
    while (!subs.empty()) {
      auto const semi = subs.find(';');
      std::string_view const one = subs.substr(0, semi);
      if (!detail::trim(one).empty()) detail::parse_single(one, where, cell.actions);
      if (semi == std::string_view::npos) break;
      subs.remove_prefix(semi + 1);
    }
    return cell;
  }
  detail::parse_single(t, where, cell.actions);
  return cell;
}

/// The shape rows imply: p = rows, v = (highest stage + 1) / p, m = highest micro-batch + 1.
/// Throws invalid_argument when there are no rows, no actions, or stages that do not fill p·v.
[[nodiscard]] inline pipeline_shape infer_shape(std::vector<std::vector<action>> const& rows) {
  expects(!rows.empty(), "pipeline::pytorch: no rows; expected one row of actions per rank");
  int stages = 0, microbatches = 0;
  for (auto const& r : rows)
    for (auto const& a : r) {
      stages = std::max({stages, a.stage + 1, a.backward_stage + 1});  // backward_*: −1 unless overlapped
      microbatches = std::max({microbatches, a.microbatch + 1, a.backward_microbatch + 1});
    }
  expects(stages > 0, "pipeline::pytorch: the ", rows.size(), " rows hold no action; expected a schedule");
  int const p = static_cast<int>(rows.size());
  expects(stages % p == 0, "pipeline::pytorch: stages 0..", stages - 1, " over ", p,
          " ranks; expected a multiple of the rank count (stage s on rank s mod p)");
  return pipeline_shape{p, microbatches, stages / p, 0};
}

namespace detail {
// The placement rows imply: PyTorch's two styles, interleaved when every action is on rank
// s mod p ("loop"), else the V when every action fits it ("v"); nullopt when neither fits. A
// custom map is never guessed from the rows (a misplaced cell would pass for one): pass it.
[[nodiscard]] inline std::optional<placement> infer_placement(std::vector<std::vector<action>> const& lists,
                                                              pipeline_shape const& sh) {
  auto const fits = [&](placement const& pl) {
    for (std::size_t r = 0; r < lists.size(); ++r)
      for (auto const& a : lists[r])
        if (pl.rank_of(a.stage) != static_cast<int>(r) || (a.backward_stage >= 0 && pl.rank_of(a.backward_stage) != static_cast<int>(r)))
          return false;
    return true;
  };
  auto interleaved = placement::interleaved(sh);
  if (fits(interleaved)) return interleaved;
  auto v = placement::v_shape(sh);
  if (fits(v)) return v;
  return std::nullopt;
}
}  // namespace detail

/// A validated schedule from rows of cells (one row per rank). `shape`: the shape to check
/// against (inferred from the rows when absent). `where`: the placement of virtual stages on
/// ranks; when absent, interleaved if every action is on rank s mod p, else the V-shape if they
/// fit it (PyTorch's "loop" and "v" styles). Peers are set from it.
[[nodiscard]] inline schedule import_actions(std::vector<std::vector<std::string>> const& rows, std::string name,
                                             std::optional<pipeline_shape> shape = std::nullopt,
                                             std::optional<placement> where = std::nullopt) {
  std::vector<std::vector<action>> lists(rows.size());
  bool transfers = false;
  bool gradients = false;
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      auto cell = parse_cell(rows[r][c], headroom::detail::concat("rank ", r, " column ", c));
      // PyTorch's DualPipeV writes (forward;full backward): one overlapped action. Other
      // groupings are read as their sub-actions in order.
      if (cell.overlapped && cell.actions.size() == 2 && cell.actions[0].kind == action_kind::forward &&
          cell.actions[1].kind == action_kind::backward) {
        auto const& f = cell.actions[0];
        auto const& b = cell.actions[1];
        cell.actions = {overlap(f.microbatch, f.stage, b.microbatch, b.stage)};
      }
      for (auto& a : cell.actions) {
        transfers = transfers || !is_compute(a.kind);
        gradients = gradients || (a.kind != action_kind::forward && a.kind != action_kind::send_forward &&
                                  a.kind != action_kind::recv_forward);
        lists[r].push_back(a);
      }
    }
  step_kind const kind = gradients ? step_kind::training : step_kind::evaluation;
  pipeline_shape const sh = shape ? *shape : infer_shape(lists);
  sh.check("pipeline::pytorch::import_actions");
  expects(lists.size() == static_cast<std::size_t>(sh.stages), "pipeline::pytorch: ", lists.size(),
          " rows for p = ", sh.stages, " ranks; expected one row per rank");
  for (std::size_t r = 0; r < lists.size(); ++r)
    for (auto& a : lists[r]) {
      int const top_stage = std::max(a.stage, a.backward_stage);
      int const top_microbatch = std::max(a.microbatch, a.backward_microbatch);
      expects(top_stage < sh.virtual_stages(), "pipeline::pytorch: rank ", r, " action ", to_string(a), " names stage ",
              top_stage, "; expected a stage below p·v = ", sh.virtual_stages());
      expects(top_microbatch < sh.microbatches, "pipeline::pytorch: rank ", r, " action ", to_string(a),
              " names micro-batch ", top_microbatch, "; expected one below m = ", sh.microbatches);
    }
  if (where) where->check(sh, "pipeline::pytorch::import_actions");
  placement const pl = where ? *where : detail::infer_placement(lists, sh).value_or(placement::interleaved(sh));
  for (std::size_t r = 0; r < lists.size(); ++r)
    for (auto& a : lists[r]) {
      for (int const st : {a.stage, a.backward_stage}) {
        if (st < 0) continue;  // no backward half (expects() evaluates its message: no rank_of(-1))
        expects(pl.rank_of(st) == static_cast<int>(r), "pipeline::pytorch: rank ", r, " action ", to_string(a),
                " is on stage ", st, ", which lives on rank ", pl.rank_of(st), " under placement ", pl.name(),
                "; expected stage s on rank s mod p or the V-shape (pass a placement for another map)");
      }
      if (!is_compute(a.kind)) {
        a.peer = headroom::pipeline::detail::expected_peer(sh, pl, a);
        expects(a.peer >= 0, "pipeline::pytorch: rank ", r, " action ", to_string(a), " transfers past stage ", a.stage,
                " of ", sh.virtual_stages(), "; there is no neighbouring stage there");
      }
    }
  if (!transfers && kind == step_kind::training) return place_transfers(std::move(name), sh, pl, lists);
  // Forward-only compute rows: the actions are in range and on their ranks (checked above), so
  // the transfers can be placed as place_transfers places a training schedule's.
  schedule s = transfers ? schedule(std::move(name), sh, pl, std::move(lists), kind)
                         : headroom::pipeline::detail::lower(std::move(name), sh, pl, lists, kind);
  validate(s);
  return s;
}

/// import_actions on the text of a CSV file (PyTorch's _dump_csv, torchtitan's schedule CSV).
[[nodiscard]] inline schedule from_csv(std::string_view text, std::string name,
                                       std::optional<pipeline_shape> shape = std::nullopt,
                                       std::optional<placement> where = std::nullopt) {
  std::vector<std::vector<std::string>> rows;
  while (!text.empty()) {
    auto const eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto& row = rows.emplace_back();
    if (line.empty()) continue;  // a rank with no actions
    while (true) {
      auto const comma = line.find(',');
      row.emplace_back(line.substr(0, comma));
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
  }
  return import_actions(rows, std::move(name), shape, std::move(where));
}

}  // namespace headroom::pipeline::pytorch
