# Install the SDK with its conformance kit (and libnibble, which the kit links) into a temporary
# prefix, build the template plugin against it as a vendor would, and run the template's own
# ctest: nibble_add_conformance_test(template) from the installed package runs the installed
# nibble-conformance on it. Called by ctest with BUILD_DIR, SOURCE_DIR, WORK_DIR.
file(REMOVE_RECURSE ${WORK_DIR})
foreach(component sdk conformance Unspecified)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                          --component ${component} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "installing the ${component} component failed")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/sdk/examples/template -B ${WORK_DIR}/build
                        -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the template plugin against the installed package failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the template plugin failed")
endif()
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
