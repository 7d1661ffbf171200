// SPDX-License-Identifier: Apache-2.0
// cuBLASLt loaded on first use instead of at program start. Linking libcublasLt.so made every
// tessel process, CPU-only runs and `--version` included, map and relocate it at start: about
// 210 MB of resident set before any work (measured: `tessel --version` 233 MB against 22 MB
// without it), which broke the resident-set bounds the memory tests hold every layout to. So
// tessel defines the cuBLASLt functions it calls here, each forwarding to the library opened with
// dlopen the first time one is called (the lazy-loading stubs of the CUDA toolkit's own
// libraries follow the same idea). Signatures come from cublasLt.h, so the compiler checks them.
// Where the library cannot be opened, every call returns CUBLAS_STATUS_NOT_INITIALIZED and the
// status string says why.
#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace {

#define TESSEL_STR2(x) #x
#define TESSEL_STR(x) TESSEL_STR2(x)
constexpr const char* kLibrary = "libcublasLt.so." TESSEL_STR(CUBLAS_VER_MAJOR);

struct Library {
  void* handle = nullptr;
  std::string why;
};

const Library& library() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
    lib.handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) {
      const char* e = dlerror();
      lib.why = std::string("cuBLASLt could not be loaded (") + kLibrary +
                "): " + (e != nullptr ? e : "unknown error");
    }
  });
  return lib;
}

// The library's own definition of `name`, typed as the declaration of `self`; null if missing.
template <typename R, typename... P>
auto resolve(R (*)(P...), const char* name) -> R (*)(P...) {
  const Library& lib = library();
  if (lib.handle == nullptr) return nullptr;
  return reinterpret_cast<R (*)(P...)>(dlsym(lib.handle, name));
}

}  // namespace

#define TESSEL_FORWARD(name, ...)                            \
  static const auto real = resolve(&name, #name);            \
  if (real == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED; \
  return real(__VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* light_handle) {
  TESSEL_FORWARD(cublasLtCreate, light_handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t light_handle) {
  TESSEL_FORWARD(cublasLtDestroy, light_handle);
}

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  static const auto real = resolve(&cublasLtGetStatusName, "cublasLtGetStatusName");
  if (real == nullptr) return "CUBLAS_STATUS_NOT_INITIALIZED";
  return real(status);
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  static const auto real = resolve(&cublasLtGetStatusString, "cublasLtGetStatusString");
  if (real == nullptr) {
    const std::string& why = library().why;
    return why.empty() ? "cuBLASLt lacks cublasLtGetStatusString" : why.c_str();
  }
  return real(status);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t light_handle, cublasLtMatmulDesc_t compute_desc, const void* alpha,
    const void* a, cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc,
    const void* beta, const void* c, cublasLtMatrixLayout_t c_desc, void* d,
    cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
    size_t workspace_bytes, cudaStream_t stream) {
  TESSEL_FORWARD(cublasLtMatmul, light_handle, compute_desc, alpha, a, a_desc, b, b_desc, beta, c,
                 c_desc, d, d_desc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t light_handle, cublasLtMatmulDesc_t operation_desc,
    cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc,
    cublasLtMatrixLayout_t d_desc, cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  TESSEL_FORWARD(cublasLtMatmulAlgoGetHeuristic, light_handle, operation_desc, a_desc, b_desc,
                 c_desc, d_desc, preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmul_desc,
                                                     cublasComputeType_t compute_type,
                                                     cudaDataType_t scale_type) {
  TESSEL_FORWARD(cublasLtMatmulDescCreate, matmul_desc, compute_type, scale_type);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmul_desc) {
  TESSEL_FORWARD(cublasLtMatmulDescDestroy, matmul_desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmul_desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  TESSEL_FORWARD(cublasLtMatmulDescSetAttribute, matmul_desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  TESSEL_FORWARD(cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  TESSEL_FORWARD(cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  TESSEL_FORWARD(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  TESSEL_FORWARD(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  TESSEL_FORWARD(cublasLtMatrixLayoutDestroy, layout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t bytes) {
  TESSEL_FORWARD(cublasLtMatrixLayoutSetAttribute, layout, attr, buf, bytes);
}

}  // extern "C"
