#include "core/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <set>

#include "core/check.h"
#include "core/files.h"

namespace megafold {
namespace {

std::string dtype_name(at::ScalarType t, const std::string& where) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kDouble: return "F64";
    case at::kBFloat16: return "BF16";
    case at::kHalf: return "F16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: throw Error(where + ": safetensors has no dtype for " + std::string(c10::toString(t)));
  }
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<at::Tensor> data;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const std::string where = path + ": tensor '" + name + "'";
    MF_CHECK(name != "__metadata__" && names.insert(name).second, where, ": duplicate or reserved name");
    const at::Tensor c = t.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", dtype_name(c.scalar_type(), where)},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MF_CHECK(out.good(), tmp, ": cannot open for writing");
    const uint64_t n = text.size();
    unsigned char size[8];
    for (int i = 0; i < 8; ++i) size[i] = static_cast<unsigned char>(n >> (8 * i));  // little-endian
    out.write(reinterpret_cast<const char*>(size), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const at::Tensor& c : data)
      out.write(static_cast<const char*>(c.const_data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
    out.flush();
    MF_CHECK(out.good(), tmp, ": write failed (disk full?)");
  }
  publish_file(tmp, path);
}

}  // namespace megafold
