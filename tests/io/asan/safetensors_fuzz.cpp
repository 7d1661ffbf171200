// SPDX-License-Identifier: Apache-2.0
// The safetensors header parser under AddressSanitizer and UBSan: random mutations of a valid
// file (byte flips, JSON punctuation, truncation, insertion) must each parse or throw Error, and
// never read outside the buffer. Built from the same sources with sanitizers on.
#include <cstdio>
#include <vector>

#include "io/safetensors_mutate.h"
#include "tessel/io/safetensors.h"

int main() {
  using namespace tessel;
  io::NamedTensors tensors = {{"a", randn({7, 3})},
                              {"bb", randn({13}).to(DType::BF16)},
                              {"c", arange(0, 5, 1, DType::I64)},
                              {"empty", zeros({0})}};
  std::vector<uint8_t> valid = io::serialize_safetensors(tensors, {{"format", "pt"}});
  io::SafetensorsMutator mutator(2024);
  int accepted = 0, rejected = 0;
  const int iterations = 20000;
  for (int iter = 0; iter < iterations; ++iter) {
    std::vector<uint8_t> exact = mutator.mutate(valid);
    try {
      io::parse_safetensors(exact.data(), exact.size(), "fuzz");
      ++accepted;
    } catch (const Error&) {
      ++rejected;
    }
  }
  std::printf("safetensors fuzz: %d mutations, %d accepted, %d rejected with Error\n", iterations,
              accepted, rejected);
  return rejected > 0 ? 0 : 1;
}
