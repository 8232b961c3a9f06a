#pragma once
// Writes the safetensors format (huggingface/safetensors), which PyTorch users load with the
// `safetensors` package (`safetensors.torch.load_file`) into a dict of name -> tensor:
//   8 bytes    little-endian u64: N, the header's length
//   N bytes    JSON: {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//              "__metadata__": {string: string}}, padded with spaces to a multiple of 8
//   the data   each tensor's bytes, C order, little-endian, at its offsets (in the given order)
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace megafold {

// Writes `tensors` (any device; names unique) to `path` atomically. Throws megafold::Error
// naming the path and the tensor on a duplicate name or a dtype the format lacks.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace megafold
