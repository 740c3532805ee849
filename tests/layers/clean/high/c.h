#pragma once
#include "high/d.h"
#include "low/a.h"
