#pragma once
// Atomic file replacement: a reader (or a resumed run after a crash) sees either the old file
// or the new one, never a torn one.
#include <string>

namespace megafold {

// Flushes `tmp` to disk, renames it to `path` and flushes the directory entry.
void publish_file(const std::string& tmp, const std::string& path);

// Writes `text` to `path` + ".tmp" and publishes it as `path`.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace megafold
