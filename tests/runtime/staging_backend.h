// The staging backend of the tests is --device cpu:strict (runtime/strict_backend.h).
#pragma once

#include "runtime/strict_backend.h"

namespace campo::testing {

using StagingBackend = StrictCpuBackend;

}  // namespace campo::testing
