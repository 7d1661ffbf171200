# The CUDA parts of tessel: the NCCL communicator (dist/), device memory (tensor/cuda/) and the
# CUDA backend (kernels/cuda/). Decided once, before the layers, so every layer sees the same
# TESSEL_CUDA. It defaults to ON where a CUDA toolkit with nvcc, cuBLASLt and NCCL is installed
# and OFF elsewhere: a plain Debian machine configures and builds exactly as without this file.
# CMAKE_CUDA_ARCHITECTURES defaults to 90 (Hopper: H100, H200); pass -DCMAKE_CUDA_ARCHITECTURES=..
# to build for another GPU.
if(NOT DEFINED TESSEL_CUDA)
  find_package(CUDAToolkit QUIET)
  set(tessel_cuda_default OFF)
  if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE AND TARGET CUDA::cublasLt)
    find_library(TESSEL_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(TESSEL_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(TESSEL_NCCL_LIBRARY AND TESSEL_NCCL_INCLUDE_DIR)
      set(tessel_cuda_default ON)
    endif()
  endif()
  option(TESSEL_CUDA
    "Build the CUDA parts (NCCL communicator, CUDA backend); needs the CUDA toolkit and NCCL"
    ${tessel_cuda_default})
endif()

if(TESSEL_CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_library(TESSEL_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(TESSEL_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND CUDAToolkit_NVCC_EXECUTABLE)
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  # C++20 as the rest of tessel. CMake before 3.26 does not know nvcc's C++20 flag; nvcc 12 and
  # later take it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  message(STATUS "tessel: CUDA enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES})")
endif()
