// SPDX-License-Identifier: Apache-2.0
// A cluster description: what the planner's cost model knows about the machines a plan runs on —
// one device kind (peak FLOP/s per dtype, memory, memory bandwidth), devices per node, nodes, the
// links of each level (within a node, between nodes) as an alpha-beta pair, and optionally GEMM
// rates by shape measured by `tessel plan calibrate`. Read from TOML (docs/PLANNER.md, "Cluster
// descriptions"); shipped descriptions live in configs/clusters/. The shape follows the
// hardware descriptions of Alpa's and Calculon's cost models: a two-level hierarchy of links.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessel::plan {

// The dtypes a device may list a peak for, in the order the file documents them.
inline constexpr std::string_view kPeakDtypes[] = {"f32", "tf32", "bf16", "f16", "int8"};

struct DeviceSpec {
  std::string kind;                // "A100-SXM4-80GB", "cpu"
  std::vector<double> peak_flops;  // per kPeakDtypes entry; 0 = not given (f32 is required)
  int64_t memory_bytes = 0;        // per device
  double memory_bandwidth = 0;     // bytes/s
  // Seconds every op of a step costs outside its kernel (dispatch, allocating the output,
  // autograd's bookkeeping), as calibration measured it; 0 = not given (a GPU's launch cost is
  // hidden behind the queue and is left out of shipped descriptions).
  double op_overhead = 0;
  // Seconds per byte an op writes, also spent outside its kernel: allocating and first touching
  // its output, the host-side copies that grow with it (calibration fits it beside op_overhead
  // from profiled steps of two sizes); 0 = not given.
  double op_overhead_per_byte = 0;
  // The share of the wall clock a rank's threads got while calibration kept every rank busy
  // (CPU seconds over wall seconds), in (0, 1]; 1 when not given. Below 1 the machine had more
  // runnable work than cores, and a step is predicted that much slower (StepTime::load_seconds).
  double cpu_share = 1;
  // Bytes of the caches private to the cores a rank's kernels run on (L1 data + L2 of each of its
  // threads), as calibration read them; 0 = not given. With it and the warm figures below, an
  // op whose operands the step touched recently enough to still be there runs at the warm rate
  // (plan/compute_cost.h, cache_hit_fractions).
  int64_t cache_bytes = 0;
};

// One level of the interconnect, per device and per direction: `bandwidth` bytes/s each device
// can send (and, at the same time, receive), `latency` seconds of a message's fixed cost.
struct LinkSpec {
  double bandwidth = 0;
  double latency = 0;
  // The devices of one node wired as a torus of these dimensions (wraparound links in each; a
  // TPU v4 slice of 64 chips is 4 x 4 x 4), their product the node's devices; empty: a switch.
  // Only the all-to-all is costed differently on it (comm_cost.h); `bandwidth` stays what each
  // device sends in a ring collective, which on a torus uses the rings of every dimension at
  // once, so one link carries bandwidth / (dimensions longer than 1) in both directions together.
  std::vector<int> torus;
  // Fraction of `bandwidth` a collective's payload moves at once the transport's protocol is paid
  // (NCCL's headers and flags over NVLink: ~20%); 1 by default, where `bandwidth` was measured
  // through the transport itself (`tessel plan calibrate`).
  double efficiency = 1;
  // Bytes/s of payload per device and direction: what every collective is costed at.
  double rate() const { return bandwidth * efficiency; }
};

// One measured GEMM: `flops` FLOP/s achieved for op(A) [m, k] x op(B) [k, n] in `dtype`, the
// operands stored as `layout` says: "nn" plain, "nt" B stored [n, k] (nn::Linear's forward),
// "tn" A stored [k, m] (a weight gradient), "tt" both. Files without the key mean "nn".
struct GemmPoint {
  std::string dtype;
  int64_t m = 0, n = 0, k = 0;
  double flops = 0;
  std::string layout = "nn";
  // The same product with its operands already in the private caches (the call repeated on the
  // same tensors); 0 = not measured. `flops` is measured with them evicted before every call.
  double warm_flops = 0;
};
inline constexpr std::string_view kGemmLayouts[] = {"nn", "nt", "tn", "tt"};

// One measured call of a kernel other than GEMM (`kernel` as the trace names it: "binary",
// "layer_norm_backward", ...): `seconds` for a call that reads and writes `bytes` and performs
// `flops` as the meta backend counts them (kernels/meta), its first input in `dtype`. The points
// of one kernel and dtype form its curve from the roofline's time to the measured time
// (plan/kernel_curve.h); a dtype with no points of its own uses the f32 curve.
struct KernelPoint {
  std::string kernel;
  double bytes = 0;
  double flops = 0;           // may be 0 (copies)
  double seconds = 0;         // operands evicted from the private caches before every call
  double warm_seconds = 0;    // operands in them (the call repeated); 0 = not measured
  std::string dtype = "f32";  // "f32", "bf16" or "f16": the call's first input
};

// The disk a node's memory offload swaps to (memory.nvme_dir): sequential bandwidths in bytes/s,
// as fio (or `tessel plan calibrate --disk DIR`) measures them with direct I/O, 1 MiB requests
// and a deep queue, the way the NVMe tier issues them (docs/MEMORY.md).
struct StorageSpec {
  double read_bandwidth = 0;
  double write_bandwidth = 0;
};

// A measured fit of one collective, t = alpha + beta * bytes (bytes as nccl-tests counts them),
// written by calibration next to the link figures so a reader can compare the model with it.
struct CollectiveFit {
  std::string op;  // "all_reduce", "send_recv"
  int ranks = 0;
  double alpha = 0;  // s
  double beta = 0;   // s per byte
};

class Cluster {
 public:
  // Refuses (tessel::Error naming the key and `source`) a syntax error, a missing, mistyped or
  // out-of-range key, and any key the schema does not know.
  static Cluster parse(const std::string& toml_text, const std::string& source);
  static Cluster load(const std::string& path);
  // TOML that parse() reads back to an equal description, with a comment per section.
  std::string to_toml() const;

  std::string name;
  std::string source;  // the file (or label) it was read from, for messages
  DeviceSpec device;
  int devices_per_node = 1;
  int nodes = 1;
  std::optional<LinkSpec> intra_node;  // required when devices_per_node > 1
  std::optional<LinkSpec> inter_node;  // required when nodes > 1
  std::optional<StorageSpec> storage;  // [storage]: what offload's NVMe tier runs at
  std::vector<GemmPoint> gemm;
  std::vector<KernelPoint> kernels;
  std::vector<CollectiveFit> collectives;

  int num_devices() const { return devices_per_node * nodes; }
  // Ranks fill nodes in order (mpirun's default --map-by slot, torchrun's node_rank * nproc +
  // local_rank): rank r sits on node r / devices_per_node.
  int node_of(int rank) const;
  // The link between two devices of one node (false) or of two nodes (true); throws naming the
  // missing [links.*] table.
  const LinkSpec& link(bool across_nodes) const;
  // Peak FLOP/s for "f32", "tf32", "bf16", "f16" or "int8"; throws naming the missing key.
  double peak_flops(std::string_view dtype) const;
  // Fraction of the dtype's peak that a GEMM of this shape and layout reaches, from the measured
  // points of that dtype and layout ("nn" ones when the layout has none): interpolated in
  // log(m), log(n), log(k) when the points form a full grid (gemm_rate_on_grid), else the point
  // nearest in those coordinates; 1 when the table has none for the dtype. `warm`: the rates
  // measured with the operands in cache, where every point of that table has one (else the
  // evicted rates).
  double gemm_efficiency(std::string_view dtype, int64_t m, int64_t n, int64_t k,
                         std::string_view layout = "nn", bool warm = false) const;
  // The measured points of one kernel, in the file's order (empty when not calibrated).
  std::vector<KernelPoint> kernel_points(std::string_view kernel) const;
  // The measured fit of `op` over `ranks` ranks, or null.
  const CollectiveFit* measured_collective(std::string_view op, int ranks) const;
  // The same machines, as many nodes as `devices` needs (a whole number of nodes when more than
  // one; fewer devices on one node when they fit). Throws when more nodes are needed and the
  // description has no inter-node link.
  Cluster with_devices(int devices) const;
};

// Index of `dtype` in kPeakDtypes; throws naming the known ones.
size_t peak_dtype_index(std::string_view dtype);

}  // namespace tessel::plan
