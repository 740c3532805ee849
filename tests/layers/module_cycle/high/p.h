// p -> q -> r -> p, through a header, a source and a header.
#pragma once
#include "high/q.h"
#include "low/a.h"
