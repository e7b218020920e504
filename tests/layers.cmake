# ctest's package.layers_include_roots: the include roots cmake/Layers.cmake gives each layer keep the
# layering, both ways.
#   cmake -DSOURCE_DIR=<repo> -DROOTS=<build>/include-roots -DCXX=<c++> -DLAYERS="<layer>=<folder>,... ..."
#         -P layers.cmake
# For each layer, with only the layer's root on the include path: every header of every src/ folder it
# may read and every public header it may include preprocesses (a header that reached a forbidden folder
# or public header — a core header including an engine one — would fail here), and one header of every
# other src/ folder that has headers, and every public header it may not include, is not found.
cmake_minimum_required(VERSION 3.25)
file(GLOB folders LIST_DIRECTORIES true RELATIVE "${SOURCE_DIR}/src" "${SOURCE_DIR}/src/*")
set(probe "${CMAKE_CURRENT_BINARY_DIR}/layers-probe.cpp")
separate_arguments(layers UNIX_COMMAND "${LAYERS}")
set(checked 0)

# Preprocesses `#include "<header>"` with only <layer>'s root on the include path: it must succeed when
# `found` is true, and fail for the header's absence alone when it is false. `what` names the rule.
function(check_include layer header found what)
  file(WRITE "${probe}" "#include \"${header}\"\n")
  execute_process(COMMAND "${CXX}" -std=gnu++20 -E -o /dev/null "-I${ROOTS}/${layer}" "${probe}"
                  RESULT_VARIABLE code ERROR_VARIABLE err OUTPUT_QUIET)
  if(found AND NOT code EQUAL 0)
    message(FATAL_ERROR "${layer} may read ${what}, but ${header} does not preprocess on its include path:\n${err}")
  endif()
  if(NOT found)
    if(code EQUAL 0)
      message(FATAL_ERROR "${layer} may not read ${what}, yet ${header} is found on its include path")
    endif()
    if(NOT err MATCHES "No such file or directory|file not found")
      message(FATAL_ERROR "${layer}: ${header} failed for another reason than not being found:\n${err}")
    endif()
  endif()
  math(EXPR n "${checked} + 1")
  set(checked ${n} PARENT_SCOPE)
endfunction()

foreach(entry IN LISTS layers)
  string(REPLACE "=" ";" parts "${entry}")
  list(GET parts 0 layer)
  list(GET parts 1 reads)
  string(REPLACE "," ";" reads "${reads}")
  foreach(folder IN LISTS folders)
    if(NOT IS_DIRECTORY "${SOURCE_DIR}/src/${folder}")
      continue()
    endif()
    file(GLOB headers RELATIVE "${SOURCE_DIR}/src" "${SOURCE_DIR}/src/${folder}/*.hpp" "${SOURCE_DIR}/src/${folder}/*.h")
    if(NOT headers)
      continue()
    endif()
    list(SORT headers)
    if(folder IN_LIST reads)
      set(found TRUE)
    else()
      set(found FALSE)
      list(GET headers 0 headers)  # the first error is the missing file itself
    endif()
    foreach(header IN LISTS headers)
      check_include(${layer} "${header}" ${found} "src/${folder}/")
    endforeach()
  endforeach()
  # The public headers: those the layer may include are linked into its root (ropekit_layer's PUBLIC groups).
  file(GLOB public RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/ropekit/*")
  list(SORT public)
  set(allowed 0)
  foreach(header IN LISTS public)
    if(EXISTS "${ROOTS}/${layer}/${header}")
      check_include(${layer} "${header}" TRUE "${header}")
      math(EXPR allowed "${allowed} + 1")
    else()
      check_include(${layer} "${header}" FALSE "${header}")
    endif()
  endforeach()
  if(allowed EQUAL 0)
    message(FATAL_ERROR "${layer} may include no public header: its root has no ropekit/ links")
  endif()
endforeach()
message(STATUS "layers: ${checked} includes checked")
