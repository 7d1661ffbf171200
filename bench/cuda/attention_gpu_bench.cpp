// SPDX-License-Identifier: Apache-2.0
// Flash attention throughput on the GPU (kernels/cuda/attention): forward and backward TFLOP/s
// at head dim 128, sequence 4096 and 8192, causal and not, bf16 and f16, with FlashAttention's
// benchmark geometry (batch x sequence = 16384 tokens, 16 heads: 2048 model width / 128), which
// fills an H100/H200 with hundreds of blocks. FLOPs are counted as FlashAttention counts them:
// forward 4 B H T^2 D (two matrix products, 2 per multiply-add), halved when causal; backward
// 2.5x the forward (five products of the same size). One JSON line per figure. A backward pass
// whose estimated time (from a run at T = 1024, scaled by T^2) exceeds --max-seconds is skipped
// with a note, so that a short GPU lease is not spent on one slow case.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tessel/kernels/cuda/attention/attention.h"

namespace kc = tessel::kernels::cuda;

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "attention_gpu_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Buffers {
  void *q, *k, *v, *out, *dout, *dq, *dk, *dv, *ws;
  float* lse;
  size_t ws_bytes;
  Buffers(const kc::AttentionDims& d, kc::AttnType type) {
    const size_t n = size_t(d.batch * d.q_len * d.heads * d.head_dim) * 2;
    const size_t nk = size_t(d.batch * d.kv_len * d.kv_heads * d.head_dim) * 2;
    for (void** p : {&q, &out, &dout, &dq}) ok(cudaMalloc(p, n), "cudaMalloc");
    for (void** p : {&k, &v, &dk, &dv}) ok(cudaMalloc(p, nk), "cudaMalloc");
    ok(cudaMalloc(reinterpret_cast<void**>(&lse), size_t(d.batch * d.heads * d.q_len) * 4),
       "cudaMalloc");
    ws_bytes = kc::attention_backward_workspace_bytes(d, type, false);
    ok(cudaMalloc(&ws, ws_bytes), "cudaMalloc");
    // Bytes 0x3a: every element 0x3a3a, a small positive value in bf16 and in f16 (no inf/NaN).
    for (void* p : {q, k, v, dout}) ok(cudaMemset(p, 0x3a, p == k || p == v ? nk : n), "memset");
  }
  ~Buffers() {
    for (void* p : {q, k, v, out, dout, dq, dk, dv, ws, static_cast<void*>(lse)}) cudaFree(p);
  }
};

double forward_flops(const kc::AttentionDims& d) {
  double f = 4.0 * double(d.batch) * double(d.heads) * double(d.q_len) * double(d.kv_len) *
             double(d.head_dim);
  return d.causal ? f / 2 : f;
}

// Seconds per call, the mean of `reps` after one warm-up.
template <typename F>
double time_call(F&& call, int reps) {
  call();
  ok(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  ok(cudaEventRecord(a), "record");
  for (int i = 0; i < reps; ++i) call();
  ok(cudaEventRecord(b), "record");
  ok(cudaEventSynchronize(b), "sync");
  float ms = 0;
  ok(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / 1e3 / reps;
}

kc::AttentionDims dims(int64_t seq, bool causal) {
  kc::AttentionDims d;
  d.batch = 16384 / seq;
  d.q_len = d.kv_len = seq;
  d.heads = d.kv_heads = 16;
  d.head_dim = 128;
  d.causal = causal;
  d.scale = 1.0 / std::sqrt(128.0);
  return d;
}

double backward_seconds(const kc::AttentionDims& d, kc::AttnType type, int reps) {
  Buffers b(d, type);
  kc::attention_forward(d, type, b.q, b.k, b.v, nullptr, b.out, b.lse, nullptr);
  return time_call(
      [&] {
        kc::attention_backward(d, type, b.q, b.k, b.v, nullptr, b.out, b.lse, b.dout, b.dq, b.dk,
                               b.dv, b.ws, b.ws_bytes, false, nullptr);
      },
      reps);
}

}  // namespace

int main(int argc, char** argv) {
  double max_seconds = 20;
  int reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--max-seconds") == 0) max_seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("attention_gpu_bench: no CUDA device: skipped\n");
    return 77;
  }
  cudaDeviceProp prop;
  ok(cudaGetDeviceProperties(&prop, 0), "properties");
  const struct {
    const char* name;
    kc::AttnType type;
  } types[] = {{"bf16", kc::AttnType::BF16}, {"f16", kc::AttnType::F16}};
  for (const auto& t : types)
    for (int64_t seq : {4096, 8192})
      for (bool causal : {false, true}) {
        const kc::AttentionDims d = dims(seq, causal);
        const double fwd_flops = forward_flops(d);
        double fwd = 0;
        {
          Buffers b(d, t.type);
          fwd = time_call(
              [&] {
                kc::attention_forward(d, t.type, b.q, b.k, b.v, nullptr, b.out, b.lse, nullptr);
              },
              reps);
        }
        std::printf(
            "{\"bench\":\"cuda_attention\",\"pass\":\"forward\",\"dtype\":\"%s\",\"device\":\"%s\","
            "\"batch\":%ld,\"heads\":%ld,\"seq\":%ld,\"head_dim\":128,\"causal\":%s,"
            "\"ms\":%.3f,\"tflops\":%.1f}\n",
            t.name, prop.name, long(d.batch), long(d.heads), long(seq), causal ? "true" : "false",
            fwd * 1e3, fwd_flops / fwd / 1e12);
        std::fflush(stdout);
        // Estimate the backward pass from T = 1024 (same heads, the batch of this case).
        kc::AttentionDims small = d;
        small.q_len = small.kv_len = 1024;
        const double estimate =
            backward_seconds(small, t.type, 1) * double(seq) * double(seq) / (1024.0 * 1024.0);
        if (estimate > max_seconds) {
          std::printf(
              "{\"bench\":\"cuda_attention\",\"pass\":\"backward\",\"dtype\":\"%s\",\"seq\":%ld,"
              "\"causal\":%s,\"skipped\":\"estimated %.1f s per call > --max-seconds %.0f\"}\n",
              t.name, long(seq), causal ? "true" : "false", estimate, max_seconds);
          std::fflush(stdout);
          continue;
        }
        const int bwd_reps = estimate * reps > max_seconds ? 1 : reps;
        const double bwd = backward_seconds(d, t.type, bwd_reps);
        std::printf(
            "{\"bench\":\"cuda_attention\",\"pass\":\"backward\",\"dtype\":\"%s\",\"device\":\"%"
            "s\","
            "\"batch\":%ld,\"heads\":%ld,\"seq\":%ld,\"head_dim\":128,\"causal\":%s,"
            "\"ms\":%.3f,\"tflops\":%.1f,\"backward_over_forward\":%.2f}\n",
            t.name, prop.name, long(d.batch), long(d.heads), long(seq), causal ? "true" : "false",
            bwd * 1e3, 2.5 * fwd_flops / bwd / 1e12, (2.5 * fwd_flops / bwd) / (fwd_flops / fwd));
        std::fflush(stdout);
      }
  return 0;
}
