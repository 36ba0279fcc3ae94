# nibble_add_conformance_test(<name> [QUICK] [TARGET <plugin target>] [FIXTURES <dir>]
#                             [TIMEOUT <seconds>] [TEST_NAME <name>])
#
# Registers a ctest that runs the nibble conformance kit on the plugin built by
# nibble_add_plugin(<name>) (target nibble_<name> unless TARGET names another) and fails when any
# check fails. QUICK runs the reduced grid. In nibble's own build tree the kit is the nibble
# tool (`nibble conformance`); from an installed package it is the imported executable
# nibble::conformance (bin/nibble-conformance).

# Installed: the kit's executable comes from its own export set, next to this file.
if(NOT TARGET nibble::conformance AND EXISTS "${CMAKE_CURRENT_LIST_DIR}/nibbleConformanceTargets.cmake")
  include("${CMAKE_CURRENT_LIST_DIR}/nibbleConformanceTargets.cmake")
endif()

function(nibble_add_conformance_test name)
  cmake_parse_arguments(ARG "QUICK" "TARGET;FIXTURES;TIMEOUT;TEST_NAME" "" ${ARGN})
  set(target nibble_${name})
  if(ARG_TARGET)
    set(target ${ARG_TARGET})
  endif()
  if(NOT TARGET ${target})
    message(FATAL_ERROR "nibble_add_conformance_test(${name}): no plugin target ${target}")
  endif()
  if(TARGET nibble_cli)
    set(kit $<TARGET_FILE:nibble_cli> conformance)
  elseif(TARGET nibble::conformance)
    get_target_property(kit_type nibble::conformance TYPE)
    if(NOT kit_type STREQUAL "EXECUTABLE")
      message(FATAL_ERROR "nibble_add_conformance_test: nibble::conformance is not the kit's executable")
    endif()
    set(kit $<TARGET_FILE:nibble::conformance>)
  else()
    message(FATAL_ERROR "nibble_add_conformance_test(${name}): the conformance kit is not "
                        "installed (the nibble package's conformance component)")
  endif()
  set(args --plugin $<TARGET_FILE:${target}> --backend ${name})
  if(ARG_QUICK)
    list(APPEND args --quick)
  endif()
  if(ARG_FIXTURES)
    list(APPEND args --fixtures ${ARG_FIXTURES})
  endif()
  set(timeout 900)
  if(ARG_TIMEOUT)
    set(timeout ${ARG_TIMEOUT})
  endif()
  list(APPEND args --timeout ${timeout})
  set(test conformance_${name})
  if(ARG_TEST_NAME)
    set(test ${ARG_TEST_NAME})
  endif()
  add_test(NAME ${test} COMMAND ${kit} ${args})
  # ctest's own limit a little above the kit's, so the kit reports which check was running.
  math(EXPR ctest_timeout "${timeout} + 30")
  set_tests_properties(${test} PROPERTIES TIMEOUT ${ctest_timeout})
endfunction()
