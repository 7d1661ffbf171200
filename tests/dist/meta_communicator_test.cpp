// SPDX-License-Identifier: Apache-2.0
// The shape-only communicator: it checks every call as any backend does, moves nothing, and shows
// each call (blocking, asynchronous, point-to-point) to the observer on the issuing thread.
#include "tessel/dist/meta/meta_communicator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessel/core/error.h"

namespace tessel::dist {
namespace {

TEST(MetaCommunicator, ChecksAndRecordsEveryCall) {
  const CommPtr comm = make_meta_communicator(3, 1, "tp");
  EXPECT_EQ(comm->size(), 3);
  EXPECT_EQ(comm->rank(), 1);
  EXPECT_EQ(comm->label(), "tp");
  EXPECT_EQ(comm->backend(), "meta");
  std::vector<std::string> seen;
  std::vector<int64_t> elements;
  MetaCallObserverScope observe([&](const OpCall& call, const CommInfo& info) {
    seen.push_back(std::string(op_kind_name(call.kind)) + "@" + info.label);
    elements.push_back(call.out.defined() ? call.out.numel() : call.in.numel());
  });
  const Tensor a = empty({7, 13}, DType::F32, Device::meta());
  const Tensor gathered = empty({21, 13}, DType::F32, Device::meta());
  comm->all_reduce(a);
  comm->all_gather(a, gathered);
  comm->reduce_scatter(gathered, a);
  comm->all_reduce_async(a)->wait();
  comm->send_async(a, 2, 5)->wait();
  comm->recv(a, 0, 5);
  const std::vector<std::string> want = {"all_reduce@tp", "all_gather@tp", "reduce_scatter@tp",
                                         "all_reduce@tp", "send@tp",       "recv@tp"};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(elements, (std::vector<int64_t>{91, 273, 91, 91, 91, 91}));
  // The same checks as a real backend: wrong sizes, host tensors, a peer outside the group.
  EXPECT_THROW(comm->all_gather(a, a), Error);
  EXPECT_THROW(comm->all_reduce(empty({7}, DType::F32)), Error);
  EXPECT_THROW(comm->send(a, 3), Error);
  EXPECT_THROW(comm->split(0, 0, "dp"), Error);
  EXPECT_EQ(seen.size(), want.size());
  EXPECT_THROW(make_meta_communicator(2, 2, "tp"), Error);
}

}  // namespace
}  // namespace tessel::dist
