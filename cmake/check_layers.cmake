# Checks the includes of the library's sources, two rules (cmake/layers.cmake declares the
# layers; this runs in every build: CMakeLists.txt's target campo_layer_check, which every
# layer waits for):
#   - layering: no source of a layer includes a header of a layer it does not depend on
#     (an upward include, or a sideways one such as datasets/ -> graph/), nor anything of a
#     top folder that is not a layer (tests/, fuzz/, bench/);
#   - modules: inside each folder (a subfolder such as runtime/cuda/ is a folder of its
#     own), the modules (a.cc with a.h) include each other without cycles
#     (cmake/module_cycles.cmake says what a module is and how cycles are found).
#
#   cmake -DCAMPO_ROOT=<source dir> -DCAMPO_LAYER_RULES=<rules file> [-DCAMPO_STAMP=<file>]
#         -P cmake/check_layers.cmake
#
# The rules file (cmake/layers.cmake's campo_write_layer_rules) sets CAMPO_LAYERS and
# CAMPO_LAYER_<layer>_ALLOWED. Every quoted #include "a/b.h" whose first folder `a` is a
# folder of CAMPO_ROOT is checked against the layering; other quoted includes (a bundled
# single header found through the include path) are not ours, except that "b.h" naming a
# file next to the includer is an edge between modules. Prints one line per offending
# include or module cycle, "<file>:<line>: error: ...", and fails; on success touches
# CAMPO_STAMP.
cmake_minimum_required(VERSION 3.22)

foreach(var CAMPO_ROOT CAMPO_LAYER_RULES)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_layers.cmake: pass -D${var}=...")
  endif()
endforeach()
get_filename_component(CAMPO_ROOT ${CAMPO_ROOT} ABSOLUTE)
include(${CAMPO_LAYER_RULES})
include(${CMAKE_CURRENT_LIST_DIR}/module_cycles.cmake)

set(violations 0)
set(CAMPO_MODULE_EDGES)
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
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\"")
        continue()
      endif()
      set(included_path ${CMAKE_MATCH_1})
      campo_module_include(${file} ${line_number} "${included_path}")
      if(NOT included_path MATCHES "^([^/]+)/")
        continue()
      endif()
      set(target_folder ${CMAKE_MATCH_1})
      if(NOT IS_DIRECTORY ${CAMPO_ROOT}/${target_folder} OR target_folder IN_LIST allowed)
        continue()
      endif()
      set(included "\"${included_path}\"")
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
campo_report_module_cycles("${CAMPO_MODULE_EDGES}" cycles)

set(summary)
if(violations GREATER 0)
  list(APPEND summary "campo: ${violations} include(s) break the layering (listed above)")
endif()
if(cycles GREATER 0)
  string(CONCAT line "campo: ${cycles} module cycle(s) inside folders (listed above): a "
         "folder's modules must include each other in one direction (move what both sides "
         "need into a lower module of the folder, or a factory that picks an implementation "
         "out of the interface's module)")
  list(APPEND summary "${line}")
endif()
if(summary)
  list(JOIN summary "\n" summary)
  message(FATAL_ERROR "${summary}")
endif()
if(DEFINED CAMPO_STAMP)
  file(TOUCH ${CAMPO_STAMP})
endif()
