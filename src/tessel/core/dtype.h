// SPDX-License-Identifier: Apache-2.0
// Element types and their conversions. bf16 and f16 are stored as raw 16-bit patterns; float ->
// half conversions round to nearest, ties to even, keep NaN a (quiet) NaN and overflow to inf,
// as IEEE 754 and PyTorch do.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace tessel {

enum class DType : uint8_t { F32, F64, BF16, F16, I8, I32, I64 };

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16,
                                       DType::I8,  DType::I32, DType::I64};

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);      // "f32", "bf16", ...
DType dtype_from_name(std::string_view name);  // throws Error on an unknown name
bool dtype_is_float(DType dtype);

// 16-bit floating formats as raw bits; arithmetic goes through float.
struct BF16 {
  uint16_t bits = 0;
};
struct F16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(BF16 h) {
  return std::bit_cast<float>(uint32_t(h.bits) << 16);
}

inline BF16 float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BF16{uint16_t((u >> 16) | 0x0040u)};  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);                                   // ties to even
  return BF16{uint16_t((u + rounding) >> 16)};
}

float f16_to_float(F16 h);
F16 float_to_f16(float f);

// The 16-bit formats by overload, for code templated on the element type.
inline float to_float(BF16 h) {
  return bf16_to_float(h);
}
inline float to_float(F16 h) {
  return f16_to_float(h);
}
template <typename T>
T from_float(float f) {
  static_assert(std::is_same_v<T, BF16> || std::is_same_v<T, F16>, "from_float: bf16 or f16");
  if constexpr (std::is_same_v<T, BF16>)
    return float_to_bf16(f);
  else
    return float_to_f16(f);
}

// Maps a C++ type to its DType at compile time.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::F64;
};
template <>
struct DTypeOf<BF16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct DTypeOf<F16> {
  static constexpr DType value = DType::F16;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::I8;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64;
};

// Converts n elements between any two dtypes (float -> int truncates toward zero, as C++ and
// PyTorch do; NaN -> int gives 0).
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

// Reads / writes one element as double (used by printing and the reference backend).
double load_as_double(const void* base, DType dtype, size_t index);
void store_from_double(void* base, DType dtype, size_t index, double value);

// Calls fn(T{}) with T the C++ type of dtype.
template <typename Fn>
decltype(auto) dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      return fn(float{});
    case DType::F64:
      return fn(double{});
    case DType::BF16:
      return fn(BF16{});
    case DType::F16:
      return fn(F16{});
    case DType::I8:
      return fn(int8_t{});
    case DType::I32:
      return fn(int32_t{});
    case DType::I64:
      return fn(int64_t{});
  }
  return fn(float{});
}

}  // namespace tessel
