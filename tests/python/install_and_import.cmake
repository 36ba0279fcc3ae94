# Install the build into a temporary prefix and import the installed package with the Python it
# was built for, from outside the build tree: its RUNPATH must find the installed libnibble, and
# the runtime must load the installed plugins and run the GPTQ fixture on them. Called by ctest
# with BUILD_DIR, WORK_DIR, PYTHON, PACKAGE_DIR (install-relative), PLUGIN_DIR (install-relative)
# and FIXTURE.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
                OUTPUT_QUIET RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "installing the build failed")
endif()
foreach(f __init__.py torch.py _outputs.py)
  if(NOT EXISTS ${prefix}/${PACKAGE_DIR}/nibble/${f})
    message(FATAL_ERROR "the install lacks ${PACKAGE_DIR}/nibble/${f}")
  endif()
endforeach()
set(program [=[
import os, sys
import numpy as np
import nibble
prefix = os.path.realpath(sys.argv[1])
assert os.path.realpath(nibble.__file__).startswith(prefix), nibble.__file__
rt = nibble.Runtime(threads=1)
used = [b["file"] for b in rt.backends()["backends"]]
assert used and all(os.path.realpath(f).startswith(os.path.join(prefix, sys.argv[2])) for f in used), used
lin = rt.linear(nibble.Checkpoint.open(sys.argv[3]), "model.layers.0.self_attn.q_proj")
y = lin(np.ones((2, 512), np.float32))
assert y.shape == (2, 384) and np.isfinite(y).all()
print("installed package ran", lin.backend + "/" + lin.kernel)
]=])
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=NIBBLE_PLUGIN_PATH --unset=NIBBLE_BACKEND
          PYTHONPATH=${prefix}/${PACKAGE_DIR} PYTHONDONTWRITEBYTECODE=1
          ${PYTHON} -c "${program}" ${prefix} ${PLUGIN_DIR} ${FIXTURE}
  WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the installed package failed:\n${out}${err}")
endif()
message(STATUS "${out}")
