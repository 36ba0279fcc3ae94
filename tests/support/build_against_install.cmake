# build_against_install(<what> <source dir> <build dir> <prefix> [cmake arguments...])
# Configures <source dir> into <build dir> (Ninja, Release, CMAKE_PREFIX_PATH=<prefix>) as a user
# of the installed package would, and builds it; a failing step is fatal and names <what>.
function(build_against_install what source build prefix)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${source} -B ${build} -G Ninja
                          -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} ${ARGN}
                  RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "configuring ${what} against the installed package failed")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${build} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building ${what} failed")
  endif()
endfunction()
