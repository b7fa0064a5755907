// SPDX-License-Identifier: Apache-2.0
// An executor given something that is not a memory resource.
// expect: Resource is not a headroom::stream_resource on the communicator's stream type
#include <cstddef>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/pipeline.hpp"

namespace hp = headroom::pipeline;

#ifdef HEADROOM_TWIN
using resource = headroom::host::aligned_resource;
#else
using resource = int;
#endif
std::size_t size_of_executor() { return sizeof(hp::executor<headroom::host::thread_communicator, resource>); }
