#include "datasets/dataset.h"

namespace campo {

void Dataset::check_index(int64_t index) const {
  CAMPO_CHECK(index >= 0 && index < size(), name(), ": sample index ", index,
              " is out of range [0, ", size(), ")");
}

}  // namespace campo
