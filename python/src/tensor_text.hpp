// How error messages show a tensor's dtype, device and shape: with the names Python users know
// (float32, bfloat16, cuda:0, [2, 512]).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nibble::python {

/// "float32", "bfloat16", "int64", ... ("dtype code 7, 16 bits x 2 lanes" for anything else).
std::string dtype_text(DLDataType dtype);
/// "cpu", "cuda:0", "cuda_host", ... ("device type 13:0" for anything else).
std::string device_text(DLDevice device);
/// "[2, 3, 512]".
std::string shape_text(const int64_t* shape, int ndim);
/// "[2, 3, 512]".
std::string shape_text(const std::vector<int64_t>& shape);
/// "[2, 3, 512]" for leading dimensions {2, 3} and a last one of 512.
std::string shape_text(std::span<const int64_t> leading, int64_t last);

}  // namespace nibble::python
