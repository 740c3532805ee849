# Tests of the layer rules (cmake/layers.cmake) and the include check
# (cmake/check_layers.cmake) on the tiny trees next to this file, where layer `high`
# depends on layer `low`:
#   cmake -DCASE=<upward_include|clean|cycle> -DCAMPO_SOURCE_DIR=<root> -DWORK_DIR=<dir>
#         -P tests/layers/layers_test.cmake
# Fails (FATAL_ERROR) when the check does not behave as each case expects.
cmake_minimum_required(VERSION 3.22)
include(${CAMPO_SOURCE_DIR}/cmake/layers.cmake)
set(here ${CAMPO_SOURCE_DIR}/tests/layers)
file(MAKE_DIRECTORY ${WORK_DIR})

# Declares the layers and runs the check on `root`; sets `rc` and `output`.
function(run_check root)
  campo_layer(low)
  campo_layer(high DEPENDS low)
  campo_write_layer_rules(${WORK_DIR}/rules.cmake)
  file(REMOVE ${WORK_DIR}/stamp)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -DCAMPO_ROOT=${root} -DCAMPO_LAYER_RULES=${WORK_DIR}/rules.cmake
            -DCAMPO_STAMP=${WORK_DIR}/stamp -P ${CAMPO_SOURCE_DIR}/cmake/check_layers.cmake
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(rc ${result} PARENT_SCOPE)
  set(output "${out}" PARENT_SCOPE)
endfunction()

# expect(<what> <condition>...): fails naming `what` unless the if() condition holds.
function(expect what)
  if(NOT (${ARGN}))
    message(FATAL_ERROR "layers_test ${CASE}: expected ${what}; the check said:\n${output}")
  endif()
endfunction()

if(CASE STREQUAL "upward_include")
  run_check(${here}/bad)
  set(a ${here}/bad/low/a.h)
  expect("a failure" NOT rc EQUAL 0)
  expect("no stamp" NOT EXISTS ${WORK_DIR}/stamp)
  string(FIND "${output}" "${a}:9: error: low/ includes \"high/c.h\": layer 'low' may include only low" at)
  expect("the upward include at ${a}:9 reported with the rule" at GREATER -1)
  string(FIND "${output}" "${a}:10: error: low/ includes \"extras/x.h\": 'extras' is not a layer of the library" at)
  expect("the include of a non-layer folder at ${a}:10 reported" at GREATER -1)
  string(REGEX MATCHALL ": error: " errors "${output}")
  list(LENGTH errors count)
  expect("exactly 2 errors (allowed includes, system headers and folders outside the tree pass), got ${count}" count EQUAL 2)
  string(FIND "${output}" "2 include(s) break the layering" at)
  expect("a summary line" at GREATER -1)
elseif(CASE STREQUAL "clean")
  run_check(${here}/clean)
  expect("success" rc EQUAL 0)
  expect("the stamp touched" EXISTS ${WORK_DIR}/stamp)
elseif(CASE STREQUAL "cycle")
  # `low` declared depending on `high`, which comes after it: a cycle (high -> low -> high).
  execute_process(COMMAND ${CMAKE_COMMAND} -DCASE=declare_cycle -DCAMPO_SOURCE_DIR=${CAMPO_SOURCE_DIR}
                          -DWORK_DIR=${WORK_DIR} -P ${CMAKE_CURRENT_LIST_FILE}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE output ERROR_VARIABLE output)
  expect("a failure" NOT rc EQUAL 0)
  string(FIND "${output}" "campo: layer 'low' depends on 'high': 'high' is not declared before 'low'" at)
  expect("the cycle named" at GREATER -1)
elseif(CASE STREQUAL "declare_cycle")
  campo_layer(low DEPENDS high)
  campo_layer(high DEPENDS low)
else()
  message(FATAL_ERROR "layers_test: unknown CASE '${CASE}'")
endif()
