# nibble_add_plugin(<name> SOURCES <files...> [LINK <targets...>] [OUTPUT_DIRECTORY <dir>]
#                   [TARGET <target name>])
#
# Builds libnibble_<name>.so: a MODULE library with hidden visibility whose only exported symbol
# is nibble_plugin_entry (a version script hides everything else), linked with --no-undefined so a
# missing dependency fails at build time, not at load time. The target is named nibble_<name> unless TARGET names it.
function(nibble_add_plugin name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY;TARGET" "SOURCES;LINK" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "nibble_add_plugin(${name}): SOURCES is empty")
  endif()
  if(NOT name MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "nibble_add_plugin(${name}): a plugin name uses only a-z, 0-9 and _")
  endif()
  set(target nibble_${name})
  if(ARG_TARGET)
    set(target ${ARG_TARGET})
  endif()
  add_library(${target} MODULE ${ARG_SOURCES})
  set(map "${CMAKE_CURRENT_BINARY_DIR}/${target}.map")
  # CONFIGURE writes only when the content changes, so a reconfigure does not relink.
  file(CONFIGURE OUTPUT "${map}" CONTENT "{\n  global: nibble_plugin_entry;\n  local: *;\n};\n")
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "nibble_${name}"
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS "${map}")
  target_compile_features(${target} PRIVATE cxx_std_17)
  target_link_libraries(${target} PRIVATE nibble::sdk ${ARG_LINK})
  target_link_options(${target} PRIVATE "LINKER:--version-script=${map}" "LINKER:--no-undefined")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  elseif(DEFINED NIBBLE_PLUGIN_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${NIBBLE_PLUGIN_OUTPUT_DIRECTORY}")
  endif()
endfunction()
