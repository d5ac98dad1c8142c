# Runs inside ctest (a TEST_INCLUDE_FILES script, after gtest_discover_tests' own): gives every
# test of kfuse_tests the label of its area, the tests/<area>/ directory of the file defining it,
# so that `ctest -L backends` runs the backend tests. The area comes from the binary's own listing
# (--gtest_list_tests --gtest_output=json names each test's file), so a new test file is labelled
# without any list to keep up to date, and the set of tests is gtest_discover_tests' unchanged.
#
# Set by the generated wrapper (tests/CMakeLists.txt): KFUSE_LABEL_EXE (the test binary),
# KFUSE_LABEL_JSON (where its listing is kept) and KFUSE_LABEL_LIST (the TEST_LIST variable of
# gtest_discover_tests: the ctest names, in the binary's listing order).
if(NOT EXISTS "${KFUSE_LABEL_EXE}" OR NOT DEFINED ${KFUSE_LABEL_LIST})
  return()  # not built yet: gtest_discover_tests added its NOT_BUILT placeholder
endif()
if("${KFUSE_LABEL_EXE}" IS_NEWER_THAN "${KFUSE_LABEL_JSON}")
  execute_process(COMMAND "${KFUSE_LABEL_EXE}" --gtest_list_tests "--gtest_output=json:${KFUSE_LABEL_JSON}"
                  OUTPUT_QUIET ERROR_QUIET RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${KFUSE_LABEL_JSON}")
    message(WARNING "kfuse: could not list ${KFUSE_LABEL_EXE} (exit ${_rc}); its tests have no area labels")
    return()
  endif()
endif()

file(READ "${KFUSE_LABEL_JSON}" _json)
set(_names ${${KFUSE_LABEL_LIST}})
list(LENGTH _names _count)
set(_index 0)
set(_areas "")
string(JSON _nsuites LENGTH "${_json}" testsuites)
math(EXPR _last_suite "${_nsuites} - 1")
foreach(_s RANGE ${_last_suite})
  string(JSON _suite GET "${_json}" testsuites ${_s})
  string(JSON _ntests LENGTH "${_suite}" testsuite)
  math(EXPR _last_test "${_ntests} - 1")
  foreach(_t RANGE ${_last_test})
    string(JSON _test GET "${_suite}" testsuite ${_t})
    string(JSON _name GET "${_test}" name)
    string(JSON _file GET "${_test}" file)
    if(_index GREATER_EQUAL _count)
      message(WARNING "kfuse: the listing of ${KFUSE_LABEL_EXE} has more tests than ctest; no area labels")
      return()
    endif()
    list(GET _names ${_index} _ctest_name)
    math(EXPR _index "${_index} + 1")
    # The ctest name is the gtest name made pretty (DISABLED_ dropped, parameters spelled out):
    # its test part up to any '/' must match, or the two lists are not in the same order.
    string(REGEX REPLACE "^DISABLED_" "" _base "${_name}")
    string(REGEX REPLACE "/.*" "" _base "${_base}")
    string(FIND "${_ctest_name}" ".${_base}" _at)
    if(_at EQUAL -1)
      message(WARNING "kfuse: ctest name '${_ctest_name}' does not match test '${_name}'; no area labels")
      return()
    endif()
    if(_file MATCHES "(^|/)tests/([A-Za-z0-9_]+)/[^/]+$")
      set(_area ${CMAKE_MATCH_2})
    else()
      set(_area other)
    endif()
    list(APPEND _areas ${_area})
    list(APPEND _tests_of_${_area} "${_ctest_name}")
  endforeach()
endforeach()
list(REMOVE_DUPLICATES _areas)
foreach(_area IN LISTS _areas)
  set_tests_properties(${_tests_of_${_area}} PROPERTIES LABELS ${_area})
endforeach()
