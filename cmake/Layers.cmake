# The layers the build keeps (DESIGN.md "Layers, and how the build keeps them").
#
# Each layer is compiled with an include root of its own: a folder in the build tree holding one link
# per src/ folder the layer may read, next to the public headers (include/). Internal headers are
# included by folder ("rope/validate.hpp"), so an include of a folder the layer may not read fails to
# compile ("No such file or directory"), and scripts/check-format.sh refuses "../" includes, the only
# way around it. ctest's layers.* tests prove both directions on every build.

# ropekit_layer(<target> FOLDERS <src folder>... READS <src folder>...)
#   The target's own folders and the ones below it that it may read, as its private include root.
function(ropekit_layer target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "FOLDERS;READS")
  set(root "${PROJECT_BINARY_DIR}/include-roots/${target}")
  file(REMOVE_RECURSE "${root}")  # removes the links, never what they point to
  file(MAKE_DIRECTORY "${root}")
  foreach(folder IN LISTS arg_FOLDERS arg_READS)
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${folder}" "${root}/${folder}" SYMBOLIC)
  endforeach()
  target_include_directories(${target} PRIVATE "${root}")
  set_property(GLOBAL APPEND PROPERTY ROPEKIT_LAYERS ${target})
  set_property(TARGET ${target} PROPERTY ROPEKIT_READS ${arg_FOLDERS} ${arg_READS})
endfunction()

# The warnings every layer, tool, benchmark and test compiles with (-Werror where ROPEKIT_WERROR is on:
# CI and the test command). Designated initializers that leave members at their defaults are the
# intended way to fill the argument structs (RotateArgs, AppendArgs), so -Wmissing-field-initializers
# is off.
set(ROPEKIT_WARNINGS -Wall -Wextra -Wpedantic -Wconversion -Wno-sign-conversion -Wno-missing-field-initializers)
if(ROPEKIT_WERROR)
  list(APPEND ROPEKIT_WARNINGS -Werror)
endif()
