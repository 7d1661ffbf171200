# tessel_codegen_check: does the compiler generate right code for one kernel set's flags?
# Compiles cmake/codegen_check/triggers.cpp with exactly those flags and the set's target region,
# then runs it where this CPU can execute the set, and otherwise inspects its assembly: none of
# the triggers stores a uniform constant, so a broadcast instruction in one of them is the defect.
# Used at configure time (KernelSets.cmake) and by its self-test (tests/kernels, script mode).
#
#   tessel_codegen_check(<ok-var> <how-var> <detail-var> COMPILER <c++> SOURCE_DIR <repo>
#                        SET <name> LEVEL <0|1|2> WORK_DIR <dir> [MODE auto|inspect] [PLANT]
#                        FLAGS <flag>...)
# <ok-var> is TRUE or FALSE, <how-var> "run" or "inspect", <detail-var> what was wrong.
# Sets the caller's three result variables (a macro: it runs in tessel_codegen_check's scope).
macro(_tessel_codegen_result ok how detail)
  set(${ok_var} ${ok} PARENT_SCOPE)
  set(${how_var} "${how}" PARENT_SCOPE)
  set(${detail_var} "${detail}" PARENT_SCOPE)
endmacro()

function(tessel_codegen_check ok_var how_var detail_var)
  cmake_parse_arguments(A "PLANT" "COMPILER;SOURCE_DIR;SET;LEVEL;WORK_DIR;MODE" "FLAGS" ${ARGN})
  set(source ${A_SOURCE_DIR}/cmake/codegen_check/triggers.cpp)
  set(args ${A_FLAGS} -DTESSEL_KERNEL_ISA=${A_SET} -DTESSEL_KERNEL_ISA_LEVEL=${A_LEVEL}
    -I${A_SOURCE_DIR}/src -w)
  if(A_PLANT)
    list(APPEND args -DTESSEL_PLANT_DEFECT)
  endif()
  file(MAKE_DIRECTORY ${A_WORK_DIR})
  set(stem ${A_WORK_DIR}/triggers_${A_SET})

  if(NOT A_MODE STREQUAL "inspect")
    execute_process(COMMAND ${A_COMPILER} ${args} ${source} -o ${stem}
      RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
    if(NOT rc EQUAL 0)
      _tessel_codegen_result(FALSE "compile" "the trigger program did not compile: ${err}")
      return()
    endif()
    execute_process(COMMAND ${stem} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    string(STRIP "${out}${err}" out)
    string(REPLACE "\n" "; " out "${out}")
    if(rc EQUAL 0)
      _tessel_codegen_result(TRUE "run" "")
      return()
    elseif(rc EQUAL 1)
      _tessel_codegen_result(FALSE "run" "${out}")
      return()
    elseif(NOT rc EQUAL 77)
      _tessel_codegen_result(FALSE "run" "the trigger program failed (${rc}): ${out}")
      return()
    endif()
  endif()

  # This CPU cannot run the set (or inspection was asked for): read the generated code.
  execute_process(COMMAND ${A_COMPILER} ${args} -S ${source} -o ${stem}.s
    RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    _tessel_codegen_result(FALSE "compile" "the trigger program did not compile: ${err}")
    return()
  endif()
  file(STRINGS ${stem}.s lines)
  set(current "")
  set(wrong "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^tessel_trigger_([a-z0-9_]+):")
      set(current ${CMAKE_MATCH_1})
    elseif(line MATCHES "\\.cfi_endproc" OR line MATCHES "^[ \t]*\\.size")
      set(current "")
    elseif(current AND line MATCHES "broadcast")
      list(APPEND wrong ${current})
      set(current "")
    endif()
  endforeach()
  if(wrong)
    string(REPLACE ";" ", " wrong "${wrong}")
    _tessel_codegen_result(FALSE "inspect" "a broadcast stores a non-uniform constant in: ${wrong}")
  else()
    _tessel_codegen_result(TRUE "inspect" "")
  endif()
endfunction()
