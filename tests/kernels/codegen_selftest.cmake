# Self-test of the code-generation check (cmake/CodegenCheck.cmake), run by CTest in script mode:
# a planted defect must be found by running the triggers and by reading their assembly; the flags
# the build uses must pass both ways; and where the configure step found the compiler's real
# defect (Debian 12's GCC 12.2 with AVX-512), reading the assembly must find it too, since that is
# how a machine without AVX-512 learns of it.
#   cmake -DCOMPILER=... -DSOURCE_DIR=... -DWORK_DIR=... -DFLAGS=a|b -DKERNEL_FLAGS=c|d
#         -DDEFECT_FOUND=ON|OFF -P codegen_selftest.cmake
cmake_minimum_required(VERSION 3.25)
include(${SOURCE_DIR}/cmake/CodegenCheck.cmake)
string(REPLACE "|" ";" FLAGS "${FLAGS}")
string(REPLACE "|" ";" KERNEL_FLAGS "${KERNEL_FLAGS}")
set(failures 0)
set(sets baseline avx2 avx512)
set(levels 0 1 2)
set(passes 0)

macro(expect want what)
  if((${want} AND ok) OR (NOT ${want} AND NOT ok))
    math(EXPR passes "${passes} + 1")
    message(STATUS "ok: ${what} (${how}${detail_suffix})")
  else()
    math(EXPR failures "${failures} + 1")
    message(STATUS "FAILED: ${what}: expected ${want}, got ${ok} (${how}: ${detail})")
  endif()
endmacro()

foreach(mode IN ITEMS auto inspect)
  tessel_codegen_check(ok how detail COMPILER ${COMPILER} SOURCE_DIR ${SOURCE_DIR} SET avx2
    LEVEL 1 WORK_DIR ${WORK_DIR}/planted_${mode} MODE ${mode} PLANT FLAGS ${FLAGS} ${KERNEL_FLAGS})
  set(detail_suffix ": ${detail}")
  expect(FALSE "a planted broadcast of {1,1,1,0} is found (${mode})")
  foreach(set level IN ZIP_LISTS sets levels)
    tessel_codegen_check(ok how detail COMPILER ${COMPILER} SOURCE_DIR ${SOURCE_DIR} SET ${set}
      LEVEL ${level} WORK_DIR ${WORK_DIR}/${mode} MODE ${mode} FLAGS ${FLAGS} ${KERNEL_FLAGS})
    set(detail_suffix "")
    expect(TRUE "the ${set} set passes with the build's flags (${mode})")
  endforeach()
endforeach()

if(DEFECT_FOUND)
  tessel_codegen_check(ok how detail COMPILER ${COMPILER} SOURCE_DIR ${SOURCE_DIR} SET avx512
    LEVEL 2 WORK_DIR ${WORK_DIR}/unfixed MODE inspect FLAGS ${FLAGS})
  set(detail_suffix ": ${detail}")
  expect(FALSE "the compiler's own AVX-512 defect is found by reading the assembly")
else()
  message(STATUS "the configure step found no defect in this compiler: nothing more to re-find")
endif()

message(STATUS "${passes} passed, ${failures} failed")
if(failures GREATER 0)
  message(FATAL_ERROR "the code-generation check missed what it must find")
endif()
