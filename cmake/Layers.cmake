# The layers the build keeps (DESIGN.md "Layers, and how the build keeps them").
#
# Each layer is compiled with an include root of its own: a folder in the build tree holding one link
# per src/ folder the layer may read and, under ropekit/, one link per public header of the groups it
# may include — never include/ itself. Internal headers are included by folder ("rope/validate.hpp") and
# public ones as "ropekit/x.hpp", so an include of a folder or a public header the layer may not read
# fails to compile ("No such file or directory"), in the layer's sources and in the headers they reach
# alike: a core header including an engine header breaks the core's build. scripts/check-format.sh
# refuses "../" includes, the only way around it. ctest's package.layers_include_roots proves both
# directions on every build. Everything else (tools, tests, benchmarks, the Python module, users) sees
# include/ whole, through the targets' usage requirements (ropekit_layer_interface).

# ropekit_public_headers(<group> <header>...)
#   The public headers (include/ropekit/) of one group: core, config, positions, engine, lab, c. Every
#   public header is in exactly one group (ropekit_check_public_headers).
function(ropekit_public_headers group)
  set_property(GLOBAL PROPERTY ROPEKIT_PUBLIC_${group} ${ARGN})
  set_property(GLOBAL APPEND PROPERTY ROPEKIT_PUBLIC_GROUPS ${group})
endfunction()

# ropekit_layer(<target> FOLDERS <src folder>... READS <src folder>... PUBLIC <group>...)
#   The target's own folders, the ones below it that it may read and the public header groups it may
#   include, as its private include root.
function(ropekit_layer target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FOLDERS;READS;PUBLIC")
  set(root "${PROJECT_BINARY_DIR}/include-roots/${target}")
  file(REMOVE_RECURSE "${root}")  # removes the links, never what they point to
  file(MAKE_DIRECTORY "${root}/ropekit")
  foreach(folder IN LISTS arg_FOLDERS arg_READS)
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${folder}" "${root}/${folder}" SYMBOLIC)
  endforeach()
  if(NOT arg_PUBLIC)
    message(FATAL_ERROR "ropekit_layer(${target}): PUBLIC names no header group")
  endif()
  foreach(group IN LISTS arg_PUBLIC)
    get_property(headers GLOBAL PROPERTY ROPEKIT_PUBLIC_${group})
    if(NOT headers)
      message(FATAL_ERROR "ropekit_layer(${target}): no public header group '${group}'")
    endif()
    foreach(header IN LISTS headers)
      file(CREATE_LINK "${PROJECT_SOURCE_DIR}/include/ropekit/${header}" "${root}/ropekit/${header}" SYMBOLIC)
    endforeach()
  endforeach()
  target_include_directories(${target} PRIVATE "${root}")
  set_property(GLOBAL APPEND PROPERTY ROPEKIT_LAYERS ${target})
  set_property(TARGET ${target} PROPERTY ROPEKIT_READS ${arg_FOLDERS} ${arg_READS})
  set_property(TARGET ${target} PROPERTY ROPEKIT_PUBLIC ${arg_PUBLIC})
  set_property(TARGET ${target} PROPERTY ROPEKIT_LAYER ON)
endfunction()

# ropekit_layer_interface(<target>)
#   What a compiled layer gives whoever links it: include/ whole, to every consumer but another layer
#   (whose own root says what it may include; $<TARGET_PROPERTY:...> in a usage requirement is the
#   consumer's), and the installed include folder to the package's users.
function(ropekit_layer_interface target)
  target_include_directories(
    ${target} INTERFACE $<BUILD_INTERFACE:$<$<NOT:$<BOOL:$<TARGET_PROPERTY:ROPEKIT_LAYER>>>:${PROJECT_SOURCE_DIR}/include>>
                        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endfunction()

# Fails the configure when a public header is in no group or in two, so a new header is placed in a
# layer before anything includes it.
function(ropekit_check_public_headers)
  file(GLOB present RELATIVE "${PROJECT_SOURCE_DIR}/include/ropekit" "${PROJECT_SOURCE_DIR}/include/ropekit/*")
  get_property(groups GLOBAL PROPERTY ROPEKIT_PUBLIC_GROUPS)
  set(placed "")
  foreach(group IN LISTS groups)
    get_property(headers GLOBAL PROPERTY ROPEKIT_PUBLIC_${group})
    foreach(header IN LISTS headers)
      if(header IN_LIST placed)
        message(FATAL_ERROR "include/ropekit/${header} is in two public header groups")
      endif()
      if(NOT header IN_LIST present)
        message(FATAL_ERROR "public header group ${group} names include/ropekit/${header}, which does not exist")
      endif()
      list(APPEND placed ${header})
    endforeach()
  endforeach()
  foreach(header IN LISTS present)
    if(NOT header IN_LIST placed)
      message(FATAL_ERROR "include/ropekit/${header} is in no public header group (src/CMakeLists.txt)")
    endif()
  endforeach()
endfunction()

# The warnings every layer, tool, benchmark and test compiles with (-Werror where ROPEKIT_WERROR is on:
# CI and the test command). Designated initializers that leave members at their defaults are the
# intended way to fill the argument structs (RotateArgs, AppendArgs), so -Wmissing-field-initializers
# is off.
set(ROPEKIT_WARNINGS -Wall -Wextra -Wpedantic -Wconversion -Wno-sign-conversion -Wno-missing-field-initializers)
if(ROPEKIT_WERROR)
  list(APPEND ROPEKIT_WARNINGS -Werror)
endif()
