#pragma once
// Atomic file replacement: a reader (or a resumed run after a crash) sees either the old file
// or the new one, never a torn one.
#include <cstdint>
#include <string>

namespace megafold {

// Flushes `tmp` to disk, renames it to `path` and flushes the directory entry.
void publish_file(const std::string& tmp, const std::string& path);

// Writes `text` to `path` + ".tmp" and publishes it as `path`.
void write_file_atomically(const std::string& path, const std::string& text);

// CRC-32 (zlib's) of a file's bytes, continuing `crc` (0 starts one); the file's size in
// `bytes` when given. Throws megafold::Error naming an unreadable file.
uint32_t file_crc32(const std::string& path, uint32_t crc = 0, uint64_t* bytes = nullptr);

// The bytes of a file, gunzipped when it is gzip-compressed (zlib passes plain files through).
// Throws megafold::Error naming the file, and `what` it was meant to be ("MSA file"), when it
// cannot be opened or its compressed stream is corrupt or truncated.
std::string read_maybe_gzipped(const std::string& path, const std::string& what);

}  // namespace megafold
