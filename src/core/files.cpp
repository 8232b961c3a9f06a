#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "core/check.h"

namespace megafold {
namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  MF_CHECK(fd >= 0, "cannot open ", path, " to flush it to disk");
  const int rc = ::fsync(fd);
  ::close(fd);
  MF_CHECK(rc == 0, "fsync failed for ", path);
}

}  // namespace

void publish_file(const std::string& tmp, const std::string& path) {
  fsync_path(tmp, false);
  std::filesystem::rename(tmp, path);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  fsync_path(dir.empty() ? std::string(".") : dir.string(), true);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    out << text;
    out.flush();
    MF_CHECK(out.good(), "cannot write ", tmp, " (disk full or no permission?)");
  }
  publish_file(tmp, path);
}

uint32_t file_crc32(const std::string& path, uint32_t crc, uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  MF_CHECK(in.good(), path, ": cannot read");
  std::vector<char> buf(1 << 20);
  uLong c = crc;
  uint64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    c = crc32(c, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    total += n;
  }
  if (bytes != nullptr) *bytes = total;
  return static_cast<uint32_t>(c);
}

std::string read_maybe_gzipped(const std::string& path, const std::string& what) {
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> in(gzopen(path.c_str(), "rb"), gzclose);
  if (!in) throw Error(path + ": cannot open " + what);
  std::string text;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(in.get(), buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  if (n < 0) throw Error(path + ": read error (corrupt or truncated gzip?)");
  return text;
}

}  // namespace megafold
