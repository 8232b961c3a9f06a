// ops/warn_once.h: one line per key and process, whatever the message of later calls.
#include <gtest/gtest.h>

#include <string>

#include "ops/warn_once.h"

namespace megafold::ops {
namespace {

TEST(WarnOnce, EachKeyOnce) {
  // Keys new to the process on every run of the test (--gtest_repeat runs it again in one process).
  static int run = 0;
  const std::string a = "warn_once_test:a:" + std::to_string(run), b = "warn_once_test:b:" + std::to_string(run);
  ++run;
  testing::internal::CaptureStderr();
  warn_once(a, "first for a");
  warn_once(a, "second for a");
  warn_once(b, "first for b");
  warn_once(a, "third for a");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "warning: first for a\nwarning: first for b\n");
}

}  // namespace
}  // namespace megafold::ops
