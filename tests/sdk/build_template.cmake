# Install the SDK component into a temporary prefix, then configure and build the template
# plugin against it, as a vendor would. Called by ctest with BUILD_DIR, SOURCE_DIR, WORK_DIR.
include(${CMAKE_CURRENT_LIST_DIR}/../support/build_against_install.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                        --component sdk RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "installing the SDK failed")
endif()
build_against_install("the template plugin" ${SOURCE_DIR}/sdk/examples/template ${WORK_DIR}/build
                      ${WORK_DIR}/prefix)
