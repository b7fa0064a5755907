// Four ranks (threads of this process) sum their gradients with all_reduce, the way a
// data-parallel step would; the same code runs over MPI or NCCL with another communicator.
#include <cstdio>
#include <span>
#include <vector>

#include <headroom/headroom.hpp>

template <headroom::communicator C>
void average_gradients(C& comm, std::span<float> grads) {
  comm.all_reduce(std::span<float const>(grads), grads, headroom::reduce_op::sum, {});
  for (float& g : grads) g /= static_cast<float>(comm.size());
}

int main() {
  std::vector<float> result;
  headroom::host::launch(4, [&](headroom::host::thread_communicator& comm) {
    std::vector<float> grads(3, static_cast<float>(comm.rank()));  // rank r holds r, r, r
    average_gradients(comm, grads);
    if (comm.rank() == 0) result = grads;
  });
  std::printf("average gradient: %.2f %.2f %.2f\n", result[0], result[1], result[2]);
  return result == std::vector<float>(3, 1.5f) ? 0 : 1;  // (0 + 1 + 2 + 3) / 4
}
