// A low layer's header with two bad includes (lines 9 and 10); the lines before them hold
// what CMake lists treat specially, which must not shift the reported line numbers.
#pragma once
#define JOIN(a, b) a;b \
  [ unbalanced
#include "low/ok.h"
#include <vector>
#include "stb_image.h"
#include "high/c.h"
#include "extras/x.h"
// a folder that is not in the tree is not ours: not checked
#include "oneapi/dnnl/dnnl.hpp"
