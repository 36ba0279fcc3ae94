# Run the conformance kit on a plugin and check its report: the exit code (EXPECT_FAILURE:
# non-zero, else zero), regular expressions that must match (REQUIRE) and ones that must not
# (FORBID). Called by ctest as
#   cmake -DKIT=<kit> -DPLUGIN=<file> -DKIT_ARGS=... -DREQUIRE=... -DFORBID=... -P expect_report.cmake
# Lists are joined by <next> and <line> stands for [^\n]: neither ";" nor a newline travels well
# through ctest and -D.
foreach(list KIT_ARGS REQUIRE FORBID)
  string(REPLACE "<next>" ";" ${list} "${${list}}")
  string(REPLACE "<line>" "[^\n]" ${list} "${${list}}")
endforeach()
execute_process(COMMAND ${KIT} --plugin ${PLUGIN} ${KIT_ARGS}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(EXPECT_FAILURE AND rc EQUAL 0)
  message(FATAL_ERROR "the kit passed a plugin it should have failed")
elseif(NOT EXPECT_FAILURE AND NOT rc EQUAL 0)
  message(FATAL_ERROR "the kit failed (exit code ${rc}): ${err}")
endif()
if(NOT out MATCHES "\n[0-9]+ passed, [0-9]+ failed\n$")
  message(FATAL_ERROR "the report does not end in 'N passed, N failed'")
endif()
foreach(re IN LISTS REQUIRE)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "the report does not match '${re}'")
  endif()
endforeach()
foreach(re IN LISTS FORBID)
  if(out MATCHES "${re}")
    message(FATAL_ERROR "the report matches '${re}', which it must not")
  endif()
endforeach()
