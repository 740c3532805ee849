# Checks that no source of a layer includes a header of a layer it does not depend on
# (an upward include, or a sideways one such as datasets/ -> graph/), nor anything of a
# top folder that is not a layer (tests/, fuzz/, bench/). Runs in every build
# (CMakeLists.txt: the target campo_layer_check, which every layer waits for):
#
#   cmake -DCAMPO_ROOT=<source dir> -DCAMPO_LAYER_RULES=<rules file> [-DCAMPO_STAMP=<file>]
#         -P cmake/check_layers.cmake
#
# The rules file (cmake/layers.cmake's campo_write_layer_rules) sets CAMPO_LAYERS and
# CAMPO_LAYER_<layer>_ALLOWED. Every quoted #include "a/b.h" whose first folder `a` is a
# folder of CAMPO_ROOT is checked; other quoted includes (a bundled single header found
# through the include path) are not ours. Prints one line per offending include,
# "<file>:<line>: error: ...", and fails; on success touches CAMPO_STAMP.
cmake_minimum_required(VERSION 3.22)

foreach(var CAMPO_ROOT CAMPO_LAYER_RULES)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_layers.cmake: pass -D${var}=...")
  endif()
endforeach()
include(${CAMPO_LAYER_RULES})

set(violations 0)
foreach(layer IN LISTS CAMPO_LAYERS)
  set(allowed ${CAMPO_LAYER_${layer}_ALLOWED})
  list(JOIN allowed ", " allowed_text)
  file(GLOB_RECURSE files LIST_DIRECTORIES false ${CAMPO_ROOT}/${layer}/*.h
       ${CAMPO_ROOT}/${layer}/*.hpp ${CAMPO_ROOT}/${layer}/*.cc ${CAMPO_ROOT}/${layer}/*.cu
       ${CAMPO_ROOT}/${layer}/*.cuh)
  list(SORT files)
  foreach(file IN LISTS files)
    # One list element per line: characters that CMake lists treat specially (; [ ] \)
    # are replaced first (include lines of ours have none), so line numbers stay exact.
    file(READ ${file} text)
    string(REPLACE "\\" "<bs>" text "${text}")
    string(REPLACE ";" "<sc>" text "${text}")
    string(REPLACE "[" "<lb>" text "${text}")
    string(REPLACE "]" "<rb>" text "${text}")
    string(REPLACE "\n" ";" lines "${text}")
    set(line_number 0)
    foreach(line IN LISTS lines)
      math(EXPR line_number "${line_number} + 1")
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"/]+)/[^\"]*\"")
        continue()
      endif()
      set(target_folder ${CMAKE_MATCH_1})
      if(NOT IS_DIRECTORY ${CAMPO_ROOT}/${target_folder} OR target_folder IN_LIST allowed)
        continue()
      endif()
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*(\"[^\"]*\").*" "\\1" included "${line}")
      if(target_folder IN_LIST CAMPO_LAYERS)
        string(CONCAT why "layer '${layer}' may include only ${allowed_text} (its own folder "
               "and the layers it depends on in CMakeLists.txt), not '${target_folder}': "
               "move the code to a lower layer, or declare the dependency if it makes no cycle")
      else()
        string(CONCAT why "'${target_folder}' is not a layer of the library (CMakeLists.txt's "
               "campo_layer list), so library code may not include it")
      endif()
      message("${file}:${line_number}: error: ${layer}/ includes ${included}: ${why}")
      math(EXPR violations "${violations} + 1")
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "campo: ${violations} include(s) break the layering (listed above)")
endif()
if(DEFINED CAMPO_STAMP)
  file(TOUCH ${CAMPO_STAMP})
endif()
