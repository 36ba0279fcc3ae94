# Install the SDK with its conformance kit (and libnibble, which the kit links) into a temporary
# prefix, build the template plugin against it as a vendor would, and run the template's own
# ctest: nibble_add_conformance_test(template) from the installed package runs the installed
# nibble-conformance on it. Called by ctest with BUILD_DIR, SOURCE_DIR, WORK_DIR.
include(${CMAKE_CURRENT_LIST_DIR}/../support/build_against_install.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
foreach(component sdk conformance Unspecified)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                          --component ${component} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "installing the ${component} component failed")
  endif()
endforeach()
build_against_install("the template plugin" ${SOURCE_DIR}/sdk/examples/template ${WORK_DIR}/build
                      ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/build -N
                OUTPUT_VARIABLE listed)
if(NOT listed MATCHES "conformance_template")
  message(FATAL_ERROR "the installed package did not register the conformance test:\n${listed}")
endif()
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/build --output-on-failure
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the template plugin failed the installed conformance kit")
endif()
