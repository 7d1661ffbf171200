// SPDX-License-Identifier: Apache-2.0
// Reference attention: the naive formulation in double. Each (batch, head) materialises its full
// score matrix, applies the causal (and sliding-window) and padding masks, takes a softmax and a
// weighted sum; the backward pass recomputes the probabilities and applies the textbook softmax
// gradient dS = P * (dP - rowsum(P * dP)). It ignores the saved out / lse on purpose, so that it
// checks them.
#include <cmath>
#include <limits>
#include <vector>

#include "tessel/kernels/cpu/attention_check.h"
#include "tessel/kernels/reference/reference_backend.h"

namespace tessel::kernels {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Pointers into [B, T, heads, D] tensors.
struct HeadView {
  const double* base;
  int64_t t, heads, dim;
  const double* row(int64_t b, int64_t i, int64_t h) const {
    return base + ((b * t + i) * heads + h) * dim;
  }
};

// Softmax probabilities P [Tq, Tk] of one (batch, head), and each row's log-sum-exp. Rows that
// see no key are all zero with lse = -inf.
void probabilities(const AttentionDesc& d, const HeadView& q, const HeadView& k, const int8_t* mask,
                   int64_t b, int64_t h, std::vector<double>& p, std::vector<double>& lse) {
  int64_t tq = d.q_len, tk = d.kv_len, kvh = h / (d.heads / d.kv_heads);
  p.assign(size_t(tq * tk), 0.0);
  lse.assign(size_t(tq), kNegInf);
  for (int64_t i = 0; i < tq; ++i) {
    double* s = &p[size_t(i * tk)];
    double max = kNegInf;
    for (int64_t j = 0; j < tk; ++j) {
      // Query i sits at absolute position p = i + Tk - Tq; a window keeps p - window < j <= p.
      int64_t p_abs = i + tk - tq;
      bool in_window = !d.causal || (j <= p_abs && (d.window == 0 || j > p_abs - d.window));
      bool visible = in_window && (mask == nullptr || mask[b * tk + j] != 0);
      if (!visible) {
        s[j] = kNegInf;
        continue;
      }
      double dot = 0;
      for (int64_t c = 0; c < d.head_dim; ++c) dot += q.row(b, i, h)[c] * k.row(b, j, kvh)[c];
      s[j] = d.scale * dot;
      max = std::max(max, s[j]);
    }
    if (max == kNegInf) {
      for (int64_t j = 0; j < tk; ++j) s[j] = 0;
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < tk; ++j) sum += (s[j] = std::exp(s[j] - max));
    for (int64_t j = 0; j < tk; ++j) s[j] /= sum;
    lse[size_t(i)] = max + std::log(sum);
  }
}

const int8_t* mask_data(const Tensor& mask) {
  return mask.defined() ? mask.data<int8_t>() : nullptr;
}

}  // namespace

void ReferenceBackend::attention(const AttentionDesc& d, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& mask, Tensor& out, Tensor& lse) {
  check_attention("attention", d, q, k, v, mask, out, lse);
  TESSEL_CHECK(q.dtype() == DType::F64, "reference attention: f64 only, got ",
               dtype_name(q.dtype()));
  HeadView qv{q.data<double>(), d.q_len, d.heads, d.head_dim};
  HeadView kv{k.data<double>(), d.kv_len, d.kv_heads, d.head_dim};
  HeadView vv{v.data<double>(), d.kv_len, d.kv_heads, d.head_dim};
  double* po = out.data<double>();
  double* pl = lse.data<double>();
  std::vector<double> p, row_lse;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      int64_t kvh = h / (d.heads / d.kv_heads);
      probabilities(d, qv, kv, mask_data(mask), b, h, p, row_lse);
      for (int64_t i = 0; i < d.q_len; ++i) {
        double* o = po + ((b * d.q_len + i) * d.heads + h) * d.head_dim;
        for (int64_t c = 0; c < d.head_dim; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < d.kv_len; ++j)
            acc += p[size_t(i * d.kv_len + j)] * vv.row(b, j, kvh)[c];
          o[c] = acc;
        }
        pl[(b * d.heads + h) * d.q_len + i] = row_lse[size_t(i)];
      }
    }
  }
}

void ReferenceBackend::attention_backward(const AttentionDesc& d, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const Tensor& mask, const Tensor& out,
                                          const Tensor& lse, const Tensor& dout, Tensor& dq,
                                          Tensor& dk, Tensor& dv) {
  check_attention_backward("attention_backward", d, q, k, v, mask, out, lse, dout, dq, dk, dv);
  TESSEL_CHECK(q.dtype() == DType::F64, "reference attention_backward: f64 only, got ",
               dtype_name(q.dtype()));
  HeadView qv{q.data<double>(), d.q_len, d.heads, d.head_dim};
  HeadView kv{k.data<double>(), d.kv_len, d.kv_heads, d.head_dim};
  HeadView vv{v.data<double>(), d.kv_len, d.kv_heads, d.head_dim};
  HeadView gv{dout.data<double>(), d.q_len, d.heads, d.head_dim};
  double* pdq = dq.data<double>();
  double* pdk = dk.data<double>();
  double* pdv = dv.data<double>();
  dq.fill(0);
  dk.fill(0);
  dv.fill(0);
  int64_t tq = d.q_len, tk = d.kv_len, dim = d.head_dim;
  std::vector<double> p, row_lse, dp(size_t(tq * tk));
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      int64_t kvh = h / (d.heads / d.kv_heads);
      probabilities(d, qv, kv, mask_data(mask), b, h, p, row_lse);
      for (int64_t i = 0; i < tq; ++i) {
        // dP = dO V^T, then dS = P * (dP - rowsum(P * dP)).
        double row_dot = 0;
        for (int64_t j = 0; j < tk; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < dim; ++c) acc += gv.row(b, i, h)[c] * vv.row(b, j, kvh)[c];
          dp[size_t(i * tk + j)] = acc;
          row_dot += p[size_t(i * tk + j)] * acc;
        }
        for (int64_t j = 0; j < tk; ++j) {
          double pij = p[size_t(i * tk + j)];
          double ds = pij * (dp[size_t(i * tk + j)] - row_dot) * d.scale;
          double* dq_row = pdq + ((b * tq + i) * d.heads + h) * dim;
          double* dk_row = pdk + ((b * tk + j) * d.kv_heads + kvh) * dim;
          double* dv_row = pdv + ((b * tk + j) * d.kv_heads + kvh) * dim;
          for (int64_t c = 0; c < dim; ++c) {
            dq_row[c] += ds * kv.row(b, j, kvh)[c];
            dk_row[c] += ds * qv.row(b, i, h)[c];
            dv_row[c] += pij * gv.row(b, i, h)[c];
          }
        }
      }
    }
  }
}

}  // namespace tessel::kernels
