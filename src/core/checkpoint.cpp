#include "core/checkpoint.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/check.h"
#include "core/files.h"

namespace megafold {
namespace fs = std::filesystem;
namespace {

// Checkpoints in dir sorted by step, oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!fs::is_directory(dir)) return out;
  static const std::regex pattern(R"(step_(\d+)\.pt)");
  for (const auto& it : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = it.path().filename().string();
    if (std::regex_match(name, m, pattern)) out.emplace_back(std::stoll(m[1]), it.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string checksum_path(const std::string& checkpoint) { return checkpoint + ".crc32"; }

// The archive streamed to `path` with write(2): a failed write (a full disk) is remembered and
// reported after the archive is done, since the archive writer must not see it (it aborts the
// process when a write fails inside its destructor). Returns the CRC-32 and size written.
std::pair<uint32_t, uint64_t> write_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MF_CHECK(fd >= 0, "cannot create ", path, ": ", std::strerror(errno));
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t bytes = 0;
  int error = 0;
  archive.save_to([&](const void* data, size_t n) -> size_t {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t done = 0; error == 0 && done < n;) {
      const ssize_t w = ::write(fd, p + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) error = w < 0 ? errno : ENOSPC;
      else done += static_cast<size_t>(w);
    }
    for (size_t at = 0; at < n; at += 1u << 30)
      crc = crc32(crc, p + at, static_cast<uInt>(std::min<size_t>(n - at, 1u << 30)));
    bytes += n;
    return n;
  });
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  ::close(fd);
  if (error != 0) {
    std::error_code ignored;
    fs::remove(path, ignored);
    throw Error(error == ENOSPC || error == EDQUOT
                    ? "disk full at " + path + ": checkpoint not written (the previous checkpoints are kept)"
                    : "cannot write " + path + ": " + std::strerror(error) + " (the previous checkpoints are kept)");
  }
  return {static_cast<uint32_t>(crc), bytes};
}

}  // namespace

void verify_checkpoint(const std::string& path) {
  std::ifstream sum(checksum_path(path));
  if (!sum) return;  // written before checksums: nothing to compare against
  std::string tag;
  uint32_t expected = 0;
  uint64_t expected_bytes = 0;
  sum >> tag >> std::hex >> expected >> std::dec >> expected_bytes;
  MF_CHECK(sum && tag == "crc32", checksum_path(path), ": malformed checksum file");
  uint64_t bytes = 0;
  const uint32_t crc = file_crc32(path, 0, &bytes);
  if (crc != expected || bytes != expected_bytes) {
    char text[160];
    std::snprintf(text, sizeof(text), "crc32 %08x over %llu bytes, written with %08x over %llu",
                  crc, static_cast<unsigned long long>(bytes), expected,
                  static_cast<unsigned long long>(expected_bytes));
    throw Error(path + ": checksum mismatch (" + text +
                "): the file changed after it was written (a flipped bit, a truncated or partial copy)");
  }
}

std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& c : list_checkpoints(dir)) out.insert(out.begin(), c.second);
  return out;
}

std::string save_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                            torch::nn::Module& model, const std::vector<at::Tensor>& ema,
                            torch::optim::Optimizer& optimizer, int64_t keep) {
  fs::create_directories(dir);
  torch::serialize::OutputArchive archive, model_archive, optim_archive;
  model.save(model_archive);
  // EMA tensors keyed by the model's parameter names (ema[i] shadows parameter i).
  const auto named = model.named_parameters();
  MF_CHECK(named.size() == ema.size(), "save_checkpoint: ", ema.size(), " EMA tensors for ", named.size(),
           " parameters");
  c10::impl::GenericDict ema_by_name(c10::StringType::get(), c10::TensorType::get());
  for (size_t i = 0; i < ema.size(); ++i) ema_by_name.insert(named[i].key(), ema[i].detach());
  optimizer.save(optim_archive);
  archive.write("model", model_archive);
  archive.write("ema_by_name", c10::IValue(ema_by_name));
  archive.write("optimizer", optim_archive);
  archive.write("step", c10::IValue(meta.step));
  archive.write("seed", c10::IValue(static_cast<int64_t>(meta.seed)));
  archive.write("config_json", c10::IValue(meta.config_json));

  char name[64];
  std::snprintf(name, sizeof(name), "step_%08lld.pt", static_cast<long long>(meta.step));
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string tmp_path = final_path + ".tmp";
  const auto [crc, bytes] = write_archive(archive, tmp_path);
  char sum[64];
  std::snprintf(sum, sizeof(sum), "crc32 %08x %llu\n", crc, static_cast<unsigned long long>(bytes));
  write_file_atomically(checksum_path(final_path), sum);  // first: a checkpoint is never without its sum
  publish_file(tmp_path, final_path);

  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) {
    fs::remove(all[i].second);
    fs::remove(checksum_path(all[i].second));
  }
  return final_path;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

namespace {

CheckpointMeta read_meta(torch::serialize::InputArchive& archive) {
  CheckpointMeta meta;
  c10::IValue v;
  archive.read("step", v);
  meta.step = v.toInt();
  archive.read("seed", v);
  meta.seed = static_cast<uint64_t>(v.toInt());
  archive.read("config_json", v);
  meta.config_json = v.toStringRef();
  return meta;
}

// The EMA tensors of `model`'s parameters, in parameter order: from the by-name dictionary,
// or from checkpoints that stored them by position ("ema": "0", "1", ...).
std::vector<at::Tensor> read_ema(torch::serialize::InputArchive& archive, torch::nn::Module& model) {
  const auto named = model.named_parameters();
  std::vector<at::Tensor> out;
  c10::IValue v;
  if (archive.try_read("ema_by_name", v)) {
    const c10::impl::GenericDict d = v.toGenericDict();
    for (const auto& item : named) {
      auto it = d.find(item.key());
      MF_CHECK(it != d.end(), "no EMA tensor for parameter '", item.key(), "'");
      out.push_back(it->value().toTensor());
    }
    MF_CHECK(d.size() == named.size(), d.size(), " EMA tensors for ", named.size(), " parameters");
  } else {
    torch::serialize::InputArchive positional;
    archive.read("ema", positional);
    for (size_t i = 0; i < named.size(); ++i) {
      at::Tensor t;
      positional.read(std::to_string(i), t, true);
      out.push_back(t);
    }
  }
  for (size_t i = 0; i < named.size(); ++i)
    MF_CHECK(out[i].sizes() == named[i].value().sizes(), "EMA tensor of '", named[i].key(), "' has shape ",
             out[i].sizes(), ", the model expects ", named[i].value().sizes());
  return out;
}

[[noreturn]] void corrupt(const std::string& path, const std::exception& ex) {
  throw Error(path + ": cannot load checkpoint (corrupt, or written for another model config): " +
              ex.what());
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  verify_checkpoint(path);
  try {
    archive_.load_from(path, at::Device(at::kCPU));  // a GPU run's checkpoint loads anywhere
    meta_ = read_meta(archive_);
  } catch (const std::exception& ex) {
    corrupt(path, ex);
  }
}

void CheckpointReader::load_weights(torch::nn::Module& model, bool ema) {
  try {
    torch::serialize::InputArchive model_archive;
    archive_.read("model", model_archive);
    model.load(model_archive);
    if (ema) {
      const std::vector<at::Tensor> stored = read_ema(archive_, model);
      at::NoGradGuard no_grad;
      const std::vector<at::Tensor> params = model.parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(stored[i]);
    }
  } catch (const std::exception& ex) {
    corrupt(path_, ex);
  }
}

CheckpointMeta read_checkpoint_meta(const std::string& path) { return CheckpointReader(path).meta(); }

CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               std::vector<at::Tensor>& ema, torch::optim::Optimizer& optimizer) {
  verify_checkpoint(path);
  CheckpointMeta meta;
  try {
    torch::serialize::InputArchive archive, model_archive, optim_archive;
    archive.load_from(path);
    archive.read("model", model_archive);
    model.load(model_archive);
    const std::vector<at::Tensor> stored = read_ema(archive, model);
    MF_CHECK(stored.size() == ema.size(), stored.size(), " EMA tensors for ", ema.size(), " slots");
    for (size_t i = 0; i < ema.size(); ++i) ema[i].copy_(stored[i]);
    archive.read("optimizer", optim_archive);
    optimizer.load(optim_archive);
    meta = read_meta(archive);
  } catch (const std::exception& ex) {
    corrupt(path, ex);
  }
  return meta;
}

CheckpointMeta load_weights(const std::string& path, torch::nn::Module& model, bool ema) {
  CheckpointReader reader(path);
  reader.load_weights(model, ema);
  return reader.meta();
}

}  // namespace megafold
