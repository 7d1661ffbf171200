// SPDX-License-Identifier: Apache-2.0
// A small GGUF file holding every metadata value type (nested arrays too) and tensors of odd
// sizes in F32, BF16, I64 and raw Q8_0 blocks: the valid starting point of the reader's tests and
// of its fuzzer.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/io/gguf.h"

namespace tessel::io {

inline GgufMetadata gguf_sample_metadata() {
  GgufMetadata m;
  m.set("general.architecture", GgufValue::of_string("gpt2"));
  m.set("general.alignment", GgufValue::of_u32(32));
  m.set("test.u8", GgufValue::of(GgufType::U8, 200));
  m.set("test.i8", GgufValue::of_int(GgufType::I8, -100));
  m.set("test.u16", GgufValue::of(GgufType::U16, 65000));
  m.set("test.i16", GgufValue::of_int(GgufType::I16, -30000));
  m.set("test.u32", GgufValue::of_u32(4000000000u));
  m.set("test.i32", GgufValue::of_int(GgufType::I32, -2000000000));
  m.set("test.f32", GgufValue::of_float(GgufType::F32, 0.1));
  m.set("test.bool", GgufValue::of_bool(true));
  m.set("test.string", GgufValue::of_string("h\xc3\xa9llo"));
  m.set("test.u64", GgufValue::of(GgufType::U64, 18000000000000000000ull));
  m.set("test.i64", GgufValue::of_int(GgufType::I64, -9000000000000000000ll));
  m.set("test.f64", GgufValue::of_float(GgufType::F64, -1e300));
  m.set("test.strings", GgufValue::of_strings({"a", "", "b c"}));
  m.set("test.nested",
        GgufValue::of_array(
            GgufType::Array,
            {GgufValue::of_array(GgufType::I32, {GgufValue::of_int(GgufType::I32, 1),
                                                 GgufValue::of_int(GgufType::I32, -2)}),
             GgufValue::of_array(GgufType::I32, {})}));
  m.set("test.empty", GgufValue::of_array(GgufType::F32, {}));
  return m;
}

inline std::vector<GgufTensorOut> gguf_sample_tensors() {
  std::vector<GgufTensorOut> t;
  t.push_back(GgufTensorOut::from_tensor("a", randn({7, 3})));
  t.push_back(GgufTensorOut::from_tensor("bb", randn({13}).to(DType::BF16)));
  t.push_back(GgufTensorOut::from_tensor("c", arange(0, 5, 1, DType::I64)));
  GgufTensorOut q;  // two rows of one Q8_0 block each: 2 x 34 bytes
  q.name = "q";
  q.dims = {32, 2};
  q.type = ggml::kQ8_0;
  for (int i = 0; i < 68; ++i) q.bytes.push_back(uint8_t(i * 7));
  t.push_back(q);
  t.push_back(GgufTensorOut::from_tensor("h", randn({33}).to(DType::F16)));
  return t;
}

inline std::vector<uint8_t> gguf_sample_bytes() {
  return serialize_gguf(gguf_sample_metadata(), gguf_sample_tensors());
}

}  // namespace tessel::io
