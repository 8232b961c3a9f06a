#pragma once
// Run output: metrics.jsonl (one JSON object per logged step or validation) and the
// terminal progress display (a redrawn bar on a TTY, plain lines otherwise).
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace megafold::train {

class MetricsLog {
 public:
  // Opens <path> for appending. When resuming from `keep_until_step`, lines of later steps
  // (written after that checkpoint by the killed run) are removed first, atomically.
  MetricsLog(const std::string& path, int64_t keep_until_step);
  // Writes {"kind": kind, "step": step, <values>} as one line and flushes it.
  void write(const std::string& kind, int64_t step, const std::map<std::string, double>& values);

 private:
  std::ofstream out_;
};

class Progress {
 public:
  Progress(int64_t start_step, int64_t total_steps);
  // Called after each step; prints at most every log_every steps (lines) or redraws (TTY).
  void update(int64_t step, double loss, double lr, double steps_per_s, bool force_line);
  void message(const std::string& line);  // a line that does not disturb the bar
  void finish();

 private:
  int64_t start_, total_;
  bool tty_;
  bool bar_drawn_ = false;
};

}  // namespace megafold::train
