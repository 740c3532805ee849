# Tests of the layer rules (cmake/layers.cmake) and the include check
# (cmake/check_layers.cmake) on the tiny trees next to this file, where layer `high`
# depends on layer `low`:
#   cmake -DCASE=<upward_include|clean|cycle|module_cycle> -DCAMPO_SOURCE_DIR=<root>
#         -DWORK_DIR=<dir>
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
  # Includes in one direction, between the modules of each folder too (a folder and its
  # subfolder included both ways, a module's own header, a header found elsewhere).
  run_check(${here}/clean)
  expect("success" rc EQUAL 0)
  expect("the stamp touched" EXISTS ${WORK_DIR}/stamp)
elseif(CASE STREQUAL "module_cycle")
  # Module cycles inside folders (tests/layers/module_cycle): a <-> b through their sources,
  # the header-only c <-> d (one include written "d.h"), p -> q -> r -> p, and in the
  # subfolder high/group/ the knot x <-> y <-> z; the modules that include a cycle's
  # (low/e.cc, high/s.cc) are on none.
  set(root ${here}/module_cycle)
  run_check(${root})
  expect("a failure" NOT rc EQUAL 0)
  expect("no stamp" NOT EXISTS ${WORK_DIR}/stamp)
  foreach(line
      "${root}/low/a.cc:4: error: module cycle in low/: a -> b -> a (a.cc includes \"low/b.h\", b.cc includes \"low/a.h\")"
      "${root}/low/c.h:4: error: module cycle in low/: c -> d -> c (c.h includes \"d.h\", d.h includes \"low/c.h\")"
      "${root}/high/p.h:3: error: module cycle in high/: p -> q -> r -> p (p.h includes \"high/q.h\", q.cc includes \"high/r.h\", r.h includes \"high/p.h\")"
      "${root}/high/group/x.h:4: error: module cycle in high/group/: x -> y -> x (x.h includes \"high/group/y.h\", y.cc includes \"high/group/x.h\")"
      "${root}/high/group/y.cc:3: error: module cycle in high/group/: y -> z -> y (y.cc includes \"high/group/z.h\", z.h includes \"high/group/y.h\")"
      "${root}/high/group: note: the 2 cycles above are one knot: the modules x, y, z of high/group/ all reach each other through their includes")
    string(FIND "${output}" "${line}\n" at)
    expect("the line '${line}'" at GREATER -1)
  endforeach()
  string(FIND "${output}" "campo: 5 module cycle(s) inside folders (listed above)" at)
  expect("a summary line" at GREATER -1)
  string(REGEX MATCHALL ": error: " errors "${output}")
  list(LENGTH errors count)
  expect("exactly 5 errors (one per distinct cycle; no layering error), got ${count}" count EQUAL 5)
  foreach(module e s)
    expect("no cycle through ${module}, which only includes one" NOT output MATCHES " ${module} ->")
  endforeach()
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
