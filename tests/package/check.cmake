# ctest's package.* tests: installs the build tree into a fresh prefix, configures and builds tests/package
# against it with find_package(ropekit), and runs the consumer (which prints "ok"). A consumer of one component
# also checks that neither its configure nor its build found or linked a dependency only other components need
# (OpenBLAS: the lab; nlohmann-json: the config readers).
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCXX=... -DCXX_FLAGS=...
#         -DCONSUMER=core|config|positions|engine|lab|c|all [-DMODEL=<the bundled model>] -P check.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
include(${CMAKE_CURRENT_LIST_DIR}/../run.cmake)
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DCMAKE_C_FLAGS=${CXX_FLAGS}"
    "-DROPEKIT_CONSUMER=${CONSUMER}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build" --verbose)
set(build_log "${last_output}")
run("${WORK_DIR}/build/consumer" ${MODEL})
if(NOT last_output MATCHES "\nok\n")
  message(FATAL_ERROR "the consumer did not print ok:\n${last_output}")
endif()
message(STATUS "${last_output}")
set(forbidden_core openblas OPENBLAS nlohmann_json)
set(forbidden_config openblas OPENBLAS)
set(forbidden_positions openblas OPENBLAS nlohmann_json)
set(forbidden_engine openblas OPENBLAS nlohmann_json)
# The C API is one shared library: its consumer finds and links none of the C++ stack's packages.
set(forbidden_c openblas OPENBLAS nlohmann_json hwy "libfmt|fmt_DIR")
if(DEFINED forbidden_${CONSUMER})
  file(READ "${WORK_DIR}/build/CMakeCache.txt" cache)
  foreach(forbidden IN LISTS forbidden_${CONSUMER})
    if(cache MATCHES "${forbidden}")
      message(FATAL_ERROR "the ${CONSUMER} consumer's configure found ${forbidden}")
    endif()
    if(build_log MATCHES "${forbidden}")
      message(FATAL_ERROR "the ${CONSUMER} consumer's build mentions ${forbidden}:\n${build_log}")
    endif()
  endforeach()
  message(STATUS "${CONSUMER} consumer: none of ${forbidden_${CONSUMER}} in its configure or on its command lines")
endif()
