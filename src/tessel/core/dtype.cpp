// SPDX-License-Identifier: Apache-2.0
#include "tessel/core/dtype.h"

#include <cmath>
#include <limits>

#include "tessel/core/error.h"

namespace tessel {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::BF16:
      return 2;
    case DType::F16:
      return 2;
    case DType::I8:
      return 1;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
  }
  TESSEL_FAIL("dtype_size: invalid dtype ", int(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I8:
      return "i8";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
  }
  return "invalid";
}

DType dtype_from_name(std::string_view name) {
  for (DType d : kAllDTypes)
    if (dtype_name(d) == name) return d;
  TESSEL_FAIL("unknown dtype '", name, "' (expected one of f32, f64, bf16, f16, i8, i32, i64)");
}

bool dtype_is_float(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::BF16 || dtype == DType::F16;
}

float f16_to_float(F16 h) {
  uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);  // inf or NaN (payload kept)
  } else if (exp != 0) {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    out = sign;
  } else {
    // Subnormal half: value = mant * 2^-24; exact in float.
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(out);
}

F16 float_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return F16{uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};  // NaN
  if (abs >= 0x477ff000u) return F16{uint16_t(sign | 0x7c00u)};  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): scale to units of 2^-24 and round to nearest even.
    float a = std::bit_cast<float>(abs);
    float scaled = a * 16777216.0f;    // exact: multiplication by a power of two
    float r = std::nearbyint(scaled);  // default rounding mode: ties to even
    return F16{uint16_t(sign | uint16_t(r))};
  }
  // Normal: re-bias exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  uint32_t half = (rounded >> 13) - (112u << 10);
  return F16{uint16_t(sign | half)};
}

namespace {

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>)
    return to_float(v);
  else
    return double(v);
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, BF16> || std::is_same_v<T, F16>)
    return from_float<T>(float(v));
  else if constexpr (std::is_floating_point_v<T>)
    return T(v);
  else {
    if (std::isnan(v)) return T(0);
    // Saturate instead of invoking undefined behaviour on out-of-range values.
    constexpr double lo = double(std::numeric_limits<T>::min());
    constexpr double hi = double(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::min();
    if (v >= hi) return std::numeric_limits<T>::max();
    return T(v);
  }
}

template <typename S, typename D>
void convert_typed(const S* src, D* dst, size_t n) {
  if constexpr (std::is_same_v<S, D>) {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BF16>) {
    for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
  } else if constexpr (std::is_same_v<S, BF16> && std::is_same_v<D, float>) {
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, F16>) {
    for (size_t i = 0; i < n; ++i) dst[i] = float_to_f16(src[i]);
  } else if constexpr (std::is_same_v<S, F16> && std::is_same_v<D, float>) {
    for (size_t i = 0; i < n; ++i) dst[i] = f16_to_float(src[i]);
  } else {
    // double -> bf16/f16 goes through float, as PyTorch's conversion does.
    for (size_t i = 0; i < n; ++i) dst[i] = from_double<D>(to_double(src[i]));
  }
}

}  // namespace

void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  dispatch_dtype(src_dtype, [&](auto s) {
    using S = decltype(s);
    dispatch_dtype(dst_dtype, [&](auto d) {
      using D = decltype(d);
      convert_typed(static_cast<const S*>(src), static_cast<D*>(dst), n);
    });
  });
}

double load_as_double(const void* base, DType dtype, size_t index) {
  return dispatch_dtype(dtype, [&](auto t) -> double {
    using T = decltype(t);
    return to_double(static_cast<const T*>(base)[index]);
  });
}

void store_from_double(void* base, DType dtype, size_t index, double value) {
  dispatch_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    static_cast<T*>(base)[index] = from_double<T>(value);
  });
}

}  // namespace tessel
