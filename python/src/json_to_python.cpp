#include "json_to_python.hpp"

#include "python_text.hpp"

namespace nibble::python {

namespace py = pybind11;

py::object json_to_python(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (const auto& [key, value] : j.items()) d[python_text(key)] = json_to_python(value);
      return d;
    }
    case nlohmann::json::value_t::array: {
      py::list l;
      for (const auto& value : j) l.append(json_to_python(value));
      return l;
    }
    case nlohmann::json::value_t::string:
      return python_text(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(j.get<double>());
    default:
      return py::none();
  }
}

}  // namespace nibble::python
