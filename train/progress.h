// Small helpers shared by the training loops' progress output.
#pragma once

#include <string>

namespace campo {

// "m:ss" or "h:mm:ss" (negative or non-finite input prints 0:00).
std::string format_duration(double seconds);

}  // namespace campo
