# Kernel sets (src/tessel/kernels/kernel_set.h, docs/KERNELS.md): tessel is built for the
# x86-64-v2 baseline; the CPU kernels are also built for x86-64-v3 (avx2) and x86-64-v4 (avx512)
# and chosen at run time. A set is built only when the code-generation check passes with the
# exact flags it will be compiled with. Debian 12's GCC 12.2 fails it for AVX-512 (constant
# vectors become broadcasts); the check then retries with its known fix,
# -mtune-ctrl=^inter_unit_moves_to_vec, and drops the set if that does not pass either.
#
# Sets: TESSEL_KERNEL_SETS, TESSEL_KERNEL_LEVEL_<set>, TESSEL_KERNEL_CODEGEN_FLAGS (extra flags of
# the kernel files), TESSEL_KERNEL_SETS_NOTE (what the check found, shown by `tessel --version`),
# TESSEL_CODEGEN_DEFECT_FOUND and TESSEL_CODEGEN_CHECK_FLAGS (for the self-test).
include(${CMAKE_CURRENT_LIST_DIR}/CodegenCheck.cmake)

set(TESSEL_ARCH_FLAGS -march=x86-64-v2 -mtune=generic)
set(TESSEL_KERNEL_LEVEL_baseline 0)
set(TESSEL_KERNEL_LEVEL_avx2 1)
set(TESSEL_KERNEL_LEVEL_avx512 2)

string(TOUPPER "${CMAKE_BUILD_TYPE}" build_type)
separate_arguments(build_flags UNIX_COMMAND
  "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${build_type}}")
set(TESSEL_CODEGEN_CHECK_FLAGS ${build_flags} -std=c++20 ${TESSEL_ARCH_FLAGS}
  -fno-math-errno -fno-trapping-math)
set(fix "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(fix -mtune-ctrl=^inter_unit_moves_to_vec)
endif()

# The result depends on the compiler, the flags and these files only; a reconfigure reuses it.
string(SHA256 key "${CMAKE_CXX_COMPILER};${CMAKE_CXX_COMPILER_VERSION};${TESSEL_CODEGEN_CHECK_FLAGS};${fix}")
foreach(input codegen_check/triggers.cpp CodegenCheck.cmake KernelSets.cmake)
  file(SHA256 ${CMAKE_CURRENT_LIST_DIR}/${input} input_hash)
  string(SHA256 key "${key};${input_hash}")
endforeach()
if(NOT TESSEL_CODEGEN_CHECK_KEY STREQUAL key)
  set(sets "")
  set(notes "")
  set(codegen_flags "")
  set(defect_found OFF)
  set(compiler "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
  foreach(set IN ITEMS baseline avx2 avx512)
    set(work ${CMAKE_BINARY_DIR}/codegen_check)
    tessel_codegen_check(ok how detail COMPILER ${CMAKE_CXX_COMPILER}
      SOURCE_DIR ${PROJECT_SOURCE_DIR} SET ${set} LEVEL ${TESSEL_KERNEL_LEVEL_${set}}
      WORK_DIR ${work} FLAGS ${TESSEL_CODEGEN_CHECK_FLAGS} ${codegen_flags})
    if(NOT ok AND fix AND NOT codegen_flags)
      set(defect_found ON)
      message(STATUS "tessel: ${compiler} miscompiles the ${set} kernel set (${how}: ${detail}); "
        "checking ${fix}")
      tessel_codegen_check(ok how detail COMPILER ${CMAKE_CXX_COMPILER}
        SOURCE_DIR ${PROJECT_SOURCE_DIR} SET ${set} LEVEL ${TESSEL_KERNEL_LEVEL_${set}}
        WORK_DIR ${work} FLAGS ${TESSEL_CODEGEN_CHECK_FLAGS} ${fix})
      if(ok)
        set(codegen_flags ${fix})
        list(APPEND notes "${compiler} broadcasts non-uniform vector constants with ${set}, so the kernels are built with ${fix} (checked by ${how})")
      endif()
    endif()
    if(ok)
      list(APPEND sets ${set})
    elseif(set STREQUAL "baseline")
      message(FATAL_ERROR "tessel: ${compiler} generates wrong code for the x86-64-v2 baseline "
        "(${how}: ${detail}). Build with another compiler: CXX=clang++ scripts/build")
    else()
      message(WARNING "tessel: ${compiler} generates wrong code for the ${set} kernel set "
        "(${how}: ${detail}); that set is not built, so CPUs that have it run a lower one. "
        "A newer GCC or clang (CXX=clang++ scripts/build) builds it.")
      list(APPEND notes "${set} not built: ${compiler} fails the code-generation check")
    endif()
  endforeach()
  string(REPLACE ";" "; " notes "${notes}")
  set(TESSEL_KERNEL_SETS "${sets}" CACHE INTERNAL "kernel sets built")
  set(TESSEL_KERNEL_CODEGEN_FLAGS "${codegen_flags}" CACHE INTERNAL "flags of the kernel files")
  set(TESSEL_KERNEL_SETS_NOTE "${notes}" CACHE INTERNAL "what the codegen check found")
  set(TESSEL_CODEGEN_DEFECT_FOUND ${defect_found} CACHE INTERNAL "the check found a defect")
  set(TESSEL_CODEGEN_CHECK_KEY "${key}" CACHE INTERNAL "compiler and flags the check ran with")
endif()
message(STATUS "tessel kernel sets: ${TESSEL_KERNEL_SETS}"
  " (kernel flags: ${TESSEL_KERNEL_CODEGEN_FLAGS})")
