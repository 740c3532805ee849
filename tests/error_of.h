// The message of the campo::Error a callable throws: for tests of one-line error messages.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/check.h"

namespace campo::testing {

// The message of the campo::Error that `fn` throws (fails the test when none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no campo::Error thrown";
  return "";
}

}  // namespace campo::testing
