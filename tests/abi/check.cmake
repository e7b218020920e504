# ctest's abi.c_api: the C API's shared library against the recorded ABI of its major version, so that a change that
# breaks a program built against an earlier release of the same major fails here (issue 65; docs/conventions.md).
#   cmake -DLIB=<libropekit.so.X.Y.Z> -DHEADER=<ropekit.h> -DBASELINE_DIR=tests/abi -DMAJOR=X -DVERSION=X.Y.Z
#         -DWORK_DIR=... -DREADELF=... [-DRECORD=ON] -P check.cmake
# It checks, in this order:
#   1. the soname is libropekit.so.MAJOR and every exported symbol is an rk_* function under the version node
#      ROPEKIT_MAJOR (nothing of the C++ inside leaks);
#   2. every function ropekit.h declares is exported (a declaration without extern "C" or without a definition);
#   3. abi-dumper's dump of the library (types from its debug information, limited to ropekit.h) against the
#      baseline libropekit.so.MAJOR.abi.tar.gz with abi-compliance-checker: any binary or source compatibility
#      problem fails. Symbols and enumerators added are compatible and pass.
# A new major has no baseline: record it with RECORD=ON (`cmake --build <build> --target abi-baseline`), which
# writes the dump of the library as built; record it only when the major moves.
cmake_minimum_required(VERSION 3.25)  # IN_LIST, ARCHIVE_CREATE
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/public")
include(${CMAKE_CURRENT_LIST_DIR}/../run.cmake)

# 1. soname and exports.
run("${READELF}" --dynamic --wide "${LIB}")
if(NOT last_output MATCHES "Library soname: \\[libropekit\\.so\\.${MAJOR}\\]")
  message(FATAL_ERROR "${LIB}: the soname is not libropekit.so.${MAJOR}:\n${last_output}")
endif()
run("${READELF}" --dyn-syms --wide "${LIB}")
string(REPLACE "\n" ";" lines "${last_output}")
set(exported "")
foreach(line IN LISTS lines)
  # Num: Value Size Type Bind Vis Ndx Name — the defined (Ndx not UND) global symbols.
  if(line MATCHES "^ *[0-9]+: [0-9a-f]+ +[0-9]+ +([A-Z]+) +(GLOBAL|WEAK) +[A-Z]+ +([A-Z0-9]+) +([^ ]+)$")
    set(type "${CMAKE_MATCH_1}")
    set(index "${CMAKE_MATCH_3}")
    set(name "${CMAKE_MATCH_4}")
    if(index STREQUAL "UND")
      continue()
    endif()
    if(name STREQUAL "ROPEKIT_${MAJOR}" OR name STREQUAL "ROPEKIT_${MAJOR}@@ROPEKIT_${MAJOR}")
      continue()  # the version node itself
    endif()
    if(NOT type STREQUAL "FUNC" OR NOT name MATCHES "^(rk_[a-z0-9_]+)@@ROPEKIT_${MAJOR}$")
      message(FATAL_ERROR "${LIB} exports ${name} (${type}): only rk_* functions under ROPEKIT_${MAJOR} may leave it")
    endif()
    list(APPEND exported "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(LENGTH exported count)
if(count EQUAL 0)
  message(FATAL_ERROR "${LIB} exports no rk_* function (readelf's output not understood?):\n${last_output}")
endif()

# 2. Every declared function is exported.
file(READ "${HEADER}" header)
string(REGEX MATCHALL "[ *](rk_[a-z0-9_]+)\\(" declared "${header}")
list(TRANSFORM declared REPLACE "^[ *](rk_[a-z0-9_]+)\\($" "\\1")
list(REMOVE_DUPLICATES declared)
foreach(name IN LISTS declared)
  if(NOT name IN_LIST exported)
    message(FATAL_ERROR "ropekit.h declares ${name}, which ${LIB} does not export")
  endif()
endforeach()
list(LENGTH declared declared_count)
message(STATUS "libropekit.so.${MAJOR}: ${count} rk_* functions exported under ROPEKIT_${MAJOR}, "
               "all ${declared_count} that ropekit.h declares among them")

# 3. The ABI against the major's baseline.
file(COPY "${HEADER}" DESTINATION "${WORK_DIR}/public")  # abi-dumper keeps the types of the headers named here
set(dump "${WORK_DIR}/libropekit.so.${MAJOR}.dump")  # abi-compliance-checker knows a dump by its extension
run(abi-dumper "${LIB}" -o "${dump}" -lver "${VERSION}" -public-headers "${WORK_DIR}/public")
set(baseline "${BASELINE_DIR}/libropekit.so.${MAJOR}.abi.tar.gz")
if(RECORD)
  file(ARCHIVE_CREATE OUTPUT "${baseline}" PATHS "${dump}" FORMAT gnutar COMPRESSION GZip)
  message(STATUS "recorded ${baseline} from ${LIB} (${VERSION})")
  return()
endif()
if(NOT EXISTS "${baseline}")
  message(FATAL_ERROR "no ABI baseline for major ${MAJOR} (${baseline}): when the major moves on purpose, record it "
                      "with `cmake --build <build> --target abi-baseline` and commit it")
endif()
file(ARCHIVE_EXTRACT INPUT "${baseline}" DESTINATION "${WORK_DIR}/baseline")
file(GLOB_RECURSE old "${WORK_DIR}/baseline/*.dump")
list(LENGTH old found)
if(NOT found EQUAL 1)
  message(FATAL_ERROR "${baseline} holds ${found} .dump files, not one")
endif()
# abi-compliance-checker reads the plain .dump (given any other name, version 2.3 spins without end).
execute_process(COMMAND abi-compliance-checker -l ropekit -old "${old}" -new "${dump}"
                        -report-path "${WORK_DIR}/report.html" RESULT_VARIABLE code OUTPUT_VARIABLE out
                        ERROR_VARIABLE err TIMEOUT 300 INPUT_FILE /dev/null)
message(STATUS "${out}")
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the C ABI of libropekit.so.${MAJOR} changed incompatibly since its baseline (exit ${code}); "
                      "the report: ${WORK_DIR}/report.html\n${err}\nEither keep the old ABI (add, never change or "
                      "remove) or move the major version in CMakeLists.txt's project() and record a new baseline.")
endif()
