// nlohmann::json as the Python values json.loads would give (dict, list, str, int, float, bool,
// None), for the reports and configurations the core keeps as JSON.
#pragma once

#include <pybind11/pybind11.h>
#include <nlohmann/json.hpp>

namespace nibble::python {

/// `j` as Python objects.
pybind11::object json_to_python(const nlohmann::json& j);

}  // namespace nibble::python
