# Registers one ctest test per GoogleTest suite of a test binary (script mode, run after each
# link of the binary):
#
#   cmake -DTEST_BINARY=<exe> -DOUTPUT=<file> -DTIMEOUT=<s> -DENVIRONMENT=<a=b;c=d>
#         [-DMPI_LAUNCH="<mpirun and its options>" -DMPI_TIMEOUT=<s> -DMPI_ENVIRONMENT=<a=b;...>]
#         -P cmake/gtest_suites.cmake
#
# writes <file> with an add_test(<Suite> <exe> --gtest_filter=<Suite>.*) per suite, which the
# build directory's CTestTestfile includes (CMakeLists.txt). One process per suite, not per
# test as gtest_discover_tests does: the suite's tests share one start of the binary (oneDNN,
# the CUDA runtime, the op registry), which was half of ctest's time with 1,400 tests. A
# failing test is still named, in the suite's output (ctest --output-on-failure). The binary
# exits 77 when it ran tests and every one was skipped (tests/main.cc), which SKIP_RETURN_CODE
# reports as a skipped suite; skips inside a suite that also ran tests are listed by
# scripts/quickstart.sh after ctest.
#
# Suites named Mpi* (after any instantiation prefix, "Prefix/MpiSuite") are tests of several
# processes: each is registered as MPI_LAUNCH followed by the binary (e.g. "mpirun -np 2 ...
# campo_tests --gtest_filter=MpiSuite.*"), with MPI_TIMEOUT and ENVIRONMENT plus
# MPI_ENVIRONMENT; mpirun exits non-zero when any rank does, so a failure on any rank fails
# the test. Without MPI_LAUNCH (a build without MPI) they are left out.
cmake_minimum_required(VERSION 3.22)

execute_process(COMMAND "${TEST_BINARY}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE status TIMEOUT 120)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} --gtest_list_tests failed (${status}):\n${listing}")
endif()

# Suites are the unindented lines, "Suite." or "Prefix/Suite/0.  # TypeParam = ...".
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites)
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( |$)")
    list(APPEND suites "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(LENGTH suites count)
if(count EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} lists no test suite")
endif()

set(launch "")
if(MPI_LAUNCH)
  separate_arguments(launch UNIX_COMMAND "${MPI_LAUNCH}")
endif()
if(NOT MPI_TIMEOUT)
  set(MPI_TIMEOUT ${TIMEOUT})
endif()
set(mpi_environment ${ENVIRONMENT} ${MPI_ENVIRONMENT})

set(script "# Written by cmake/gtest_suites.cmake from ${TEST_BINARY} --gtest_list_tests\n")
foreach(suite IN LISTS suites)
  set(command "")
  set(timeout ${TIMEOUT})
  set(environment "${ENVIRONMENT}")
  if(suite MATCHES "(^|/)Mpi")
    if(NOT launch)
      continue()
    endif()
    foreach(arg IN LISTS launch)
      string(APPEND command "[==[${arg}]==] ")
    endforeach()
    set(timeout ${MPI_TIMEOUT})
    set(environment "${mpi_environment}")
  endif()
  string(APPEND script "add_test([==[${suite}]==] ${command}[==[${TEST_BINARY}]==] "
                       "[==[--gtest_filter=${suite}.*]==])\n"
                       "set_tests_properties([==[${suite}]==] PROPERTIES TIMEOUT ${timeout} "
                       "SKIP_RETURN_CODE 77 ENVIRONMENT [==[${environment}]==])\n")
endforeach()
# Written next to the file and renamed, so that ctest never reads half a list.
file(WRITE "${OUTPUT}.tmp" "${script}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
