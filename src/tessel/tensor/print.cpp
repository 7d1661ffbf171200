// SPDX-License-Identifier: Apache-2.0
// Tensor printing: nested brackets, at most `max_per_dim` entries per dimension (elided with ...).
#include <iomanip>
#include <sstream>

#include "tessel/tensor/tensor.h"

namespace tessel {

namespace {
void print_dim(std::ostringstream& out, const Tensor& t, int dim, int64_t base, int64_t max_per_dim,
               const std::vector<int64_t>& strides) {
  if (t.ndim() == 0) {
    out << load_as_double(t.data_ptr(), t.dtype(), 0);
    return;
  }
  int64_t n = t.size(dim);
  out << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (n > max_per_dim && i == max_per_dim / 2) {
      out << "..., ";
      i = n - max_per_dim / 2;
    }
    int64_t at = base + i * strides[size_t(dim)];
    if (dim == t.ndim() - 1) {
      out << load_as_double(t.data_ptr(), t.dtype(), size_t(at));
    } else {
      print_dim(out, t, dim + 1, at, max_per_dim, strides);
    }
    if (i + 1 < n) out << ", ";
  }
  out << "]";
}
}  // namespace

std::string Tensor::str(int64_t max_per_dim) const {
  std::ostringstream out;
  out << "tensor(" << dtype_name(dtype()) << ", " << shape();
  if (!name().empty()) out << ", '" << name() << "'";
  out << ") ";
  if (device().is_meta()) {
    out << "<meta>";
  } else if (!storage().is_materialized()) {
    out << "<released>";
  } else {
    out << std::setprecision(6);
    print_dim(out, *this, 0, 0, std::max<int64_t>(max_per_dim, 2), shape().strides());
  }
  return out.str();
}

}  // namespace tessel
