// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Transfer grouping: how the executor issues a run of consecutive transfers in a rank's action
// list (the sends and receives between two computations, e.g. 1F1B's SEND_F + RECV_B).
//
//   one_by_one   each transfer on its own, in list order; a sent buffer is released right after
//                its send (the default, and what the memory model has always counted)
//   grouped      the run is issued as one batch: every receive of the run is allocated and
//                posted and every send posted, in list order, then the batch is launched
//                (NCCL: one ncclGroupStart/End, so a send and a receive to the same peer progress
//                together, as Megatron's send_forward_recv_backward and PyTorch's
//                batch_isend_irecv do; MPI: the run's MPI_Isends are completed together at its
//                end; thread ranks: sends are buffered, only the release order changes); the
//                run's sent buffers are released after the batch. So the run's receive buffers
//                are live before its sent buffers are freed: the memory model counts the run's
//                allocations together, then its releases, and a rank's peak may grow by at most
//                the bytes the run sends.
//
// Grouping only relaxes the order the peers see (a batch completes no later than its last
// transfer would one by one), so a schedule validate() accepts stays deadlock-free. Policies are
// empty tags passed to executor::step, executor::plan and predict_memory.
#include <concepts>
#include <string_view>

namespace headroom::pipeline {

template <class P>
concept transfer_grouping = std::default_initializable<P> && requires {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::batched } -> std::convertible_to<bool>;
};

namespace transfers {
struct one_by_one {
  static constexpr std::string_view name = "one_by_one";
  static constexpr bool batched = false;
};
struct grouped {
  static constexpr std::string_view name = "grouped";
  static constexpr bool batched = true;
};
}  // namespace transfers

static_assert(transfer_grouping<transfers::one_by_one>);
static_assert(transfer_grouping<transfers::grouped>);

}  // namespace headroom::pipeline
