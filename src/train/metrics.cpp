#include "train/metrics.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "core/check.h"
#include "core/files.h"

namespace megafold::train {
namespace {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/Inf
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);  // round-trips doubles exactly
  return buf;
}

int64_t step_of_line(const std::string& line) {
  const auto pos = line.find("\"step\":");
  return pos == std::string::npos ? -1 : std::stoll(line.substr(pos + 7));
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int64_t keep_until_step) {
  if (keep_until_step >= 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    std::string kept;
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line.back() == '}' && step_of_line(line) <= keep_until_step)
        kept += line + "\n";
    write_file_atomically(path, kept);
  } else if (keep_until_step < 0) {
    std::filesystem::remove(path);
  }
  out_.open(path, std::ios::app);
  MF_CHECK(out_.good(), "cannot open ", path, " for writing");
}

void MetricsLog::write(const std::string& kind, int64_t step,
                       const std::map<std::string, double>& values) {
  std::ostringstream os;
  os << "{\"kind\":\"" << kind << "\",\"step\":" << step;
  for (const auto& [k, v] : values) os << ",\"" << k << "\":" << json_number(v);
  os << "}\n";
  out_ << os.str();
  out_.flush();
}

Progress::Progress(int64_t start_step, int64_t total_steps)
    : start_(start_step), total_(total_steps), tty_(::isatty(STDOUT_FILENO) != 0) {}

void Progress::update(int64_t step, double loss, double lr, double steps_per_s, bool force_line) {
  const double eta = steps_per_s > 0 ? static_cast<double>(total_ - step) / steps_per_s : 0.0;
  char tail[160];
  std::snprintf(tail, sizeof(tail), "%lld/%lld loss %.4f lr %.2e %.2f it/s ETA %02d:%02d",
                static_cast<long long>(step), static_cast<long long>(total_), loss, lr,
                steps_per_s, static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * static_cast<double>(step) / std::max<int64_t>(total_, 1));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::printf("\r[%s] %s\033[K", bar.c_str(), tail);
    std::fflush(stdout);
    bar_drawn_ = true;
  } else if (force_line) {
    std::printf("step %s\n", tail);
    std::fflush(stdout);
  }
}

void Progress::message(const std::string& line) {
  if (tty_ && bar_drawn_) std::printf("\r\033[K");  // the next update redraws the bar
  bar_drawn_ = false;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Progress::finish() {
  if (tty_ && bar_drawn_) std::printf("\n");
  std::fflush(stdout);
}

}  // namespace megafold::train
