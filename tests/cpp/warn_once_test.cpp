// ops/warn_once.h: one line per key and process, whatever the message of later calls.
#include <gtest/gtest.h>

#include <string>

#include "ops/warn_once.h"

namespace megafold::ops {
namespace {

TEST(WarnOnce, EachKeyOnce) {
  testing::internal::CaptureStderr();
  warn_once("warn_once_test:a", "first for a");
  warn_once("warn_once_test:a", "second for a");
  warn_once("warn_once_test:b", "first for b");
  warn_once("warn_once_test:a", "third for a");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "warning: first for a\nwarning: first for b\n");
}

}  // namespace
}  // namespace megafold::ops
