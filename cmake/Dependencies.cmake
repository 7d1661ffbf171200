# Locates the Debian-packaged libraries tessel builds on (installed by scripts/setup).

# oneDNN: the CPU GEMM (see docs/KERNELS.md for why). Built against libgomp, so it shares
# tessel's single OpenMP pool.
find_library(DNNL_LIBRARY NAMES dnnl REQUIRED)
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp REQUIRED)
add_library(tessel_dep_dnnl INTERFACE)
target_link_libraries(tessel_dep_dnnl INTERFACE ${DNNL_LIBRARY})
target_include_directories(tessel_dep_dnnl SYSTEM INTERFACE ${DNNL_INCLUDE_DIR})

# OpenBLAS, the OpenMP build (one thread pool): fp64 GEMM and the comparison benchmarks.
find_library(OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH REQUIRED)
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp NO_DEFAULT_PATH REQUIRED)
add_library(tessel_dep_openblas INTERFACE)
target_link_libraries(tessel_dep_openblas INTERFACE ${OPENBLAS_LIBRARY})
target_include_directories(tessel_dep_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})

find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
# toml++: the training configuration files (header-only).
find_package(tomlplusplus REQUIRED)

# liburing: io_uring for the NVMe tier's asynchronous direct I/O (docs/MEMORY.md).
find_library(URING_LIBRARY NAMES uring REQUIRED)
find_path(URING_INCLUDE_DIR liburing.h REQUIRED)
add_library(tessel_dep_uring INTERFACE)
target_link_libraries(tessel_dep_uring INTERFACE ${URING_LIBRARY})
target_include_directories(tessel_dep_uring SYSTEM INTERFACE ${URING_INCLUDE_DIR})

# COIN-OR CBC: the mixed-integer solver of the planner's intra-operator sharding ILP
# (plan/shard_ilp.h), through its C interface; found by pkg-config as Debian ships it.
find_package(PkgConfig REQUIRED)
pkg_check_modules(CBC REQUIRED IMPORTED_TARGET cbc)
