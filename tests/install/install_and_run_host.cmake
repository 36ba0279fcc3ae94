# Install the whole build into a temporary prefix, check what the install holds, then configure
# and build tests/install/host against it with find_package(nibble) and run it on the GPTQ
# fixture with the installed plugins. Called by ctest with BUILD_DIR, SOURCE_DIR, WORK_DIR,
# LIBDIR, INCLUDEDIR, PLUGIN_DIR (install-relative), HOST_API_VERSION, HOST_API_MAJOR, PLUGINS
# (comma-separated, run on the fixture), DEVICE_PLUGINS (installed, not run), NM, and SANITIZE (the
# build's sanitizers, which the host must be built with).
include(${CMAKE_CURRENT_LIST_DIR}/../support/build_against_install.cmake)
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
                OUTPUT_QUIET RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "installing the build failed")
endif()

string(REPLACE "," ";" plugins "${PLUGINS}")
set(expected
  ${INCLUDEDIR}/nibble/export.hpp ${INCLUDEDIR}/nibble/runtime.hpp ${INCLUDEDIR}/nibble/sdk/plugin.h
  ${LIBDIR}/libnibble.so.${HOST_API_MAJOR} ${LIBDIR}/libnibble.so.${HOST_API_VERSION}
  ${LIBDIR}/cmake/nibble/nibbleConfig.cmake ${LIBDIR}/cmake/nibble/nibbleCoreTargets.cmake)
string(REPLACE "," ";" device_plugins "${DEVICE_PLUGINS}")
foreach(p ${plugins} ${device_plugins})
  list(APPEND expected ${PLUGIN_DIR}/libnibble_${p}.so)
endforeach()
foreach(f ${expected})
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install lacks ${f}")
  endif()
endforeach()
# The plugin directory holds the product's plugins and no test plugin.
file(GLOB installed RELATIVE ${prefix}/${PLUGIN_DIR} ${prefix}/${PLUGIN_DIR}/*)
list(LENGTH installed n_installed)
set(all_plugins ${plugins} ${device_plugins})
list(LENGTH all_plugins n_plugins)
if(NOT n_installed EQUAL n_plugins)
  message(FATAL_ERROR "the install's plugin directory holds ${installed}, expected ${all_plugins}")
endif()

# libnibble exports its host API only: nothing of its internals (nibble::detail, the prepared
# kernel) and nothing of the libraries it links privately.
execute_process(COMMAND ${NM} -D --defined-only -C ${prefix}/${LIBDIR}/libnibble.so.${HOST_API_MAJOR}
                OUTPUT_VARIABLE exported RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "${NM} could not read the installed libnibble")
endif()
foreach(internal "nibble::detail::" "nibble::PreparedKernel" "fmt::" "re2::" "tbb::" "boost::dll::")
  string(FIND "${exported}" "${internal}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "the installed libnibble exports ${internal} symbols")
  endif()
endforeach()
if(NOT exported MATCHES "nibble::Runtime::linear")
  message(FATAL_ERROR "the installed libnibble does not export nibble::Runtime::linear")
endif()

set(host_flags)
if(SANITIZE)
  set(host_flags -DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE} -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE})
endif()
build_against_install("the host program" ${SOURCE_DIR}/tests/install/host ${WORK_DIR}/build
                      ${prefix} ${host_flags})
execute_process(COMMAND ${WORK_DIR}/build/run_installed_layer
                        ${SOURCE_DIR}/conformance/fixtures/gptq_v1_sym_g128 ${prefix}/${PLUGIN_DIR} ${plugins}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the host program built against the install failed (exit ${rc})")
endif()
